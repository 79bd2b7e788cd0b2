"""Restarts of a worker that stopped itself because its slots are zombies (jobs that ignored their
timeout): one rule for a worker alone and for the N processes of ``PROCESSES=N`` (docs/guide.md, "How a
worker runs jobs"). Under a supervisor the supervisor restarts its process (``worker.supervisor``); alone,
``python -m worker`` restarts itself: it runs its own command line again in place (``exec``: the same
pid, settings and directory; no thread of the old one survives), so a worker started with ``&`` or by
any process manager carries on without one."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import NoReturn

from setqueue.runtime.logs import flush_logs
from worker.service import EXIT_ZOMBIES

RESTART_BASE_SECONDS = 0.25  # the wait before a restart, doubled for each restart within the window
RESTART_WINDOW_SECONDS = 60.0
RESTARTS_PER_WINDOW = 5  # one more exit within the window: give up
# The Unix times of a worker's restarts within the window, carried from one exec to the next.
RESTARTS_ENV = "SETQUEUE_WORKER_RESTARTS"
START_DIR = os.getcwd()  # where the command started, before a handler's configure_worker could move


def restart_delay(restarts: list[float], now: float) -> tuple[list[float], float | None]:
    """The restarts to remember (those within the window, and this one) and how long to wait before this
    one; None for the wait: RESTARTS_PER_WINDOW within the window already, give up."""
    recent = [at for at in restarts if at >= now - RESTART_WINDOW_SECONDS]
    if len(recent) >= RESTARTS_PER_WINDOW:
        return recent, None
    return [*recent, now], RESTART_BASE_SECONDS * 2 ** len(recent)


def exit_or_restart(code: int) -> NoReturn:
    """Exit with ``code`` (os._exit: there may be threads still in a handler), unless the worker stopped
    for zombie slots: then restart it (``restart_self``)."""
    if code == EXIT_ZOMBIES:
        restart_self(code)
    _exit(code)


def restart_self(code: int) -> NoReturn:
    """Run this command line again in place after the wait of ``restart_delay``; exit with ``code`` once
    it gives up (or if the exec fails). A signal during the wait exits at once (the service's second
    signal, as it is stopping already)."""
    log = logging.getLogger("setqueue.worker")
    restarts, delay = restart_delay(_earlier(), time.time())
    if delay is None:
        log.error(
            "its slots became zombies again after %d restarts within %gs: giving up (exit code %d)",
            len(restarts),
            RESTART_WINDOW_SECONDS,
            code,
        )
        _exit(code)
    command = " ".join(sys.orig_argv)
    log.warning("restarting this worker (pid %d) in %.2fs, as it was started: %s", os.getpid(), delay, command)
    flush_logs()
    time.sleep(delay)
    env = {**os.environ, RESTARTS_ENV: " ".join(f"{at:.3f}" for at in restarts)}
    try:
        os.chdir(START_DIR)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:
        log.exception("could not restart this worker: exiting with code %d", code)
    _exit(code)


def _earlier() -> list[float]:
    try:
        return [float(at) for at in os.environ.get(RESTARTS_ENV, "").split()]
    except ValueError:  # not ours: as if none
        return []


def _exit(code: int) -> NoReturn:
    flush_logs()
    os._exit(code)
