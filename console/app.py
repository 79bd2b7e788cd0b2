"""The console's web app: Starlette routes (``build_app``) rendering Jinja2 templates. Every page
works without JavaScript; static/live.js only refreshes the elements with ``data-live``.

The event loop never waits on Redis. The pages read through the library (``JobQueue``, the registry),
which is synchronous redis-py, so each route that reads Redis is a plain ``def``: Starlette runs it
on its thread pool, as it advises for blocking work (``action`` awaits its form, then hands the rest
to that pool). Rewriting those reads on redis.asyncio would duplicate the library. Each read waits
at most CONSOLE_REDIS_TIMEOUT_SECONDS (``console_client``): a Redis that stops answering gives a 503
page, not a page that hangs. ``/healthz`` is the one ``async def`` that asks Redis: a PING on
redis.asyncio, on connections of its own, waited for 1 s at most (``Health``), so it answers at
once even while every thread of the pool waits on Redis.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import redis
import redis.asyncio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from console.data import (
    COLUMN_STATES,
    LIST_STATES,
    THROUGHPUT_MINUTES,
    BadInput,
    Catalog,
    NotFound,
    parse_cursor,
    parse_page,
    parse_shard,
    result_gone,
)
from console.security import COOKIE, SESSION_SECONDS, Guard, Refused, Session
from setqueue.client import TlsFiles, redact_url, tls_options
from setqueue.jobs import JobInfo
from setqueue.keys import validate_job_id
from setqueue.limits import Rate, parse_concurrency
from setqueue.runtime.cli_limits import OFF
from setqueue.sentinel import async_master_pool, is_sentinel_url
from setqueue.tracing import trace_id
from setqueue.version import __version__

HERE = Path(__file__).parent
log = logging.getLogger("setqueue.console")

CANCELLABLE = ("todos", "scheduled", "in_progress", "waiting")
DELETE_ALL_MOST = 1000  # dead letters one "delete all" click deletes
REQUEUE_ALL_MOST = 10_000
NOTICES = {
    "requeued": "Requeued {n} dead letter{s}.",
    "deleted": "Deleted {n} job{s}.",
    "cancelled": "Cancelled {n} job{s}: it will not run again.",
    "not-cancelled": "Nothing to cancel: the job had already ended.",
    "paused": "Paused: none of its jobs starts until it is resumed (running jobs finish).",
    "resumed": "Resumed: its jobs start again.",
    "was-paused": "Nothing changed: the queue was paused already.",
    "was-running": "Nothing changed: the queue was not paused.",
    "rate": "Rate limit set.",
    "group-limits": "Group limits set.",
    "signed-in": "Signed in: actions are enabled.",
    "signed-out": "Signed out.",
}


def _utc(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    delta = time.time() - seconds
    later = delta < 0
    delta = abs(delta)
    if delta < 60:
        words = f"{delta:.1f} s"
    elif delta < 3600:
        words = f"{delta / 60:.1f} min"
    elif delta < 86400:
        words = f"{delta / 3600:.1f} h"
    else:
        words = f"{delta / 86400:.1f} d"
    return f"in {words}" if later else f"{words} ago"


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:,}"


# No CLIENT SETINFO on connecting, as the library's clients (a least-privilege user lacks it).
_NO_SETINFO: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.asyncio.connection.AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


# The longest /healthz waits for Redis, whatever CONSOLE_REDIS_TIMEOUT_SECONDS: a probe's own timeout
# is often 1 s (Kubernetes' default), and a probe told nothing learns nothing.
HEALTH_SECONDS = 1.0


class Health:
    """/healthz's question, "does Redis answer?": one PING on redis.asyncio, on connections of its
    own, waited for at most ``timeout`` seconds (HEALTH_SECONDS at most) and not resent. It needs no
    thread of the pool, so it answers while every one of them waits on Redis."""

    def __init__(self, url: str, timeout: float, tls: TlsFiles | None = None) -> None:
        self.url = url
        self.timeout = min(timeout, HEALTH_SECONDS)
        self._options: dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "retry": Retry(NoBackoff(), 0),
            **tls_options(url, **(tls or {})),
            **_NO_SETINFO,
        }
        self._client: redis.asyncio.Redis | None = None

    async def up(self) -> bool:
        if self._client is None:  # made on the server's event loop, which its connections belong to
            if is_sentinel_url(self.url):  # the master its sentinels name, asked within the same timeout
                pool = async_master_pool(self.url, max_connections=4, timeout=self.timeout, **self._options)
                self._client = redis.asyncio.Redis.from_pool(pool)
            else:
                self._client = redis.asyncio.Redis.from_url(self.url, **self._options)
        try:
            return bool(await asyncio.wait_for(self._client.ping(), self.timeout))
        except (redis.RedisError, OSError, TimeoutError):
            return False

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class Console:
    def __init__(self, catalog: Catalog, guard: Guard, redis_url: str, health: Health) -> None:
        self.catalog = catalog
        self.guard = guard
        self.redis_url = redis_url
        self.health = health
        env = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), auto_reload=False
        )
        env.filters.update(utc=_utc, ago=_ago, number=_number, trace_id=trace_id)
        env.globals["columns"] = COLUMN_STATES
        self.templates = Jinja2Templates(env=env)

    def session(self, request: Request) -> Session | None:
        return self.guard.session(request.cookies.get(COOKIE))

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        session = self.session(request)
        notice = request.query_params.get("notice", "")
        kind, _, count = notice.partition(":")
        n = int(count) if count.isdigit() and len(count) < 12 else 0
        context.update(
            read_only=self.guard.read_only,
            signed_in=session is not None,
            csrf=self.guard.csrf(session),
            version=__version__,
            redis=redact_url(self.redis_url),
            notice=NOTICES[kind].format(n=f"{n:,}", s="" if n == 1 else "s") if kind in NOTICES else "",
            path=request.url.path,
            query=str(request.url.query),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    def error(self, request: Request, status: int, title: str, detail: str, *, maybe_done: bool = False) -> Response:
        """``maybe_done``: an action's write may have been made before Redis stopped answering."""
        return self.render(
            request, "error.html", status, title=title, detail=detail, code=status, maybe_done=maybe_done
        )

    def queues(self, request: Request) -> Response:
        views = [self.catalog.overview(ref) for ref in self.catalog.discover()]
        template = "_queues_table.html" if request.query_params.get("partial") else "queues.html"
        return self.render(request, template, queues=views, minutes=THROUGHPUT_MINUTES)

    def queue(self, request: Request) -> Response:
        ref = self.catalog.ref(request.path_params["name"])
        view = self.catalog.overview(ref)
        workers = self.catalog.workers([ref])
        if request.query_params.get("partial"):
            return self.render(request, "_queue_live.html", q=view, workers=workers, minutes=THROUGHPUT_MINUTES)
        limits = self.catalog.limits(ref)
        return self.render(
            request,
            "queue.html",
            q=view,
            workers=workers,
            minutes=THROUGHPUT_MINUTES,
            states=LIST_STATES,
            limits=limits,
        )

    def jobs(self, request: Request) -> Response:
        ref = self.catalog.ref(request.path_params["name"])
        state = request.path_params["state"]
        params = request.query_params
        shard = parse_shard(params.get("shard"), ref.shards)
        number, cursor = parse_page(params.get("page")), parse_cursor(params.get("cursor"))
        page = self.catalog.job_page(ref, state, shard, number, cursor)
        return self.render(request, "jobs.html", ref=ref, jobs=page, states=LIST_STATES)

    def job(self, request: Request) -> Response:
        ref = self.catalog.ref(request.path_params["name"])
        job_id = _job_id(_strict_query(request).get("id", [""])[0])
        info = self.catalog.open(ref).inspect(job_id)
        if info is None:
            raise NotFound(f"queue {ref.name} knows no job {job_id[:200]!r}")
        gone = info.state == "done" and not info.result_kept and result_gone(self.catalog.open(ref), job_id)
        return self.render(
            request,
            "job.html",
            ref=ref,
            job=info,
            trace=trace_id(info.trace_parent),
            result=_result_view(info, gone),
            depends_on=self.catalog.linked(info.depends_on),
            dependents=self.catalog.linked(info.dependents),
        )

    def workers(self, request: Request) -> Response:
        found = self.catalog.workers()
        template = "_workers_table.html" if request.query_params.get("partial") else "workers.html"
        return self.render(request, template, workers=found)

    async def healthz(self, request: Request) -> Response:
        up = await self.health.up()
        return JSONResponse({"status": "ok" if up else "redis_unreachable"}, status_code=200 if up else 503)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.render(request, "login.html")
        _same_origin(request)
        form = await request.form()
        if self.guard.read_only:
            raise Refused("this console is read-only: start it with CONSOLE_TOKEN set to enable actions")
        given = form.get("token")
        if not isinstance(given, str) or not self.guard.check_token(given):
            log.warning("sign-in refused from %s: wrong token", _client(request))
            return self.render(request, "login.html", 403, failed=True)
        log.info("signed in from %s", _client(request))
        response = RedirectResponse("/?notice=signed-in", status_code=303)
        response.set_cookie(
            COOKIE,
            self.guard.new_session(),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        _same_origin(request)
        form = await request.form()
        self.guard.authorize(self.session(request), _field(form, "csrf"))
        response = RedirectResponse("/?notice=signed-out", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    async def action(self, request: Request) -> Response:
        if request.method != "POST":  # else GET would show the queue "<name>/actions"
            raise HTTPException(405)
        _same_origin(request)
        form = await request.form()
        return await run_in_threadpool(self._act, request, form)

    def _act(self, request: Request, form: Any) -> Response:
        """The action, on a thread of the pool: every step of it may wait on Redis."""
        ref = self.catalog.ref(request.path_params["name"])
        self.guard.authorize(self.session(request), _field(form, "csrf"))
        what = _field(form, "action")
        back = _field(form, "back") or f"/queues/{ref.name}/jobs/failed"
        if not back.startswith("/") or back.startswith("//") or "\\" in back:
            raise BadInput("back must be a path of this console")
        queue = self.catalog.open(ref)
        who = _client(request)
        if what in ("requeue", "delete", "cancel"):
            job_id = _job_id(_field(form, "id") or "")
            if what == "requeue":
                n = queue.requeue_failed([job_id])
                log.info("console action requeue: queue %s, job %r: %d requeued (by %s)", ref.name, job_id, n, who)
                notice = f"requeued:{n}"
            elif what == "cancel":
                state = queue.cancel(job_id)  # one atomic script: cancel.lua
                log.info("console action cancel: queue %s, job %r was %s (by %s)", ref.name, job_id, state, who)
                if state is None:
                    raise NotFound(f"queue {ref.name} knows no job {job_id[:200]!r}")
                notice = "cancelled:1" if state in CANCELLABLE else "not-cancelled:0"
            else:
                state = queue.delete(job_id)
                log.info("console action delete: queue %s, job %r was %s (by %s)", ref.name, job_id, state, who)
                notice = f"deleted:{0 if state is None else 1}"
                if back.startswith(f"/queues/{ref.name}/job?"):
                    back = f"/queues/{ref.name}"
        elif what == "requeue-all":
            n = queue.requeue_failed(limit=REQUEUE_ALL_MOST)
            log.info("console action requeue-all: queue %s: %d requeued (by %s)", ref.name, n, who)
            notice = f"requeued:{n}"
        elif what == "delete-all":
            n = _delete_failed(self.catalog, ref, DELETE_ALL_MOST)
            log.info("console action delete-all: queue %s: %d dead letters deleted (by %s)", ref.name, n, who)
            notice = f"deleted:{n}"
        elif what in ("pause", "resume"):
            changed = queue.pause() if what == "pause" else queue.resume()  # one script each: set_limits.lua
            log.info("console action %s: queue %s: %s (by %s)", what, ref.name, "done" if changed else "no change", who)
            notice = f"{what}d:1" if changed else ("was-paused:0" if what == "pause" else "was-running:0")
            back = back if back.startswith(f"/queues/{ref.name}") else f"/queues/{ref.name}"
        elif what == "rate":
            rate = _rate_field(form)
            queue.set_rate(rate)
            log.info("console action rate: queue %s: %s (by %s)", ref.name, rate or "no limit", who)
            notice = "rate:1"
        elif what == "group-limits":
            group = _field(form, "group") or None
            concurrency_text = (_field(form, "concurrency") or "").strip()
            rate = _rate_field(form)
            try:
                concurrency = parse_concurrency(concurrency_text) if concurrency_text else None
                queue.set_group_limits(group, concurrency=concurrency, rate=rate)
            except (TypeError, ValueError) as exc:
                raise BadInput(str(exc)[:300]) from None
            log.info(
                "console action group-limits: queue %s, group %s: concurrency %s, rate %s (by %s)",
                ref.name,
                "(every group's default)" if group is None else repr(group),
                concurrency or "no limit",
                rate or "no limit",
                who,
            )
            notice = "group-limits:1"
        else:
            raise BadInput(
                f"no action {str(what)[:40]!r}: requeue, cancel, delete, requeue-all, delete-all, pause, resume,"
                " rate or group-limits"
            )
        path, _, query = back.partition("?")
        kept = "&".join(p for p in query.split("&") if p and not p.startswith(("notice=", "cursor=")))
        return RedirectResponse(f"{path}?{kept + '&' if kept else ''}{urlencode({'notice': notice})}", status_code=303)


def _job_id(job_id: str) -> str:
    try:
        validate_job_id(job_id)
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc)[:300]) from None
    return job_id


def _result_view(info: JobInfo, gone: bool) -> tuple[str, str]:
    """(kind, text): "json" or "bytes" with the value kept, else "gone", "none" or "pending"."""
    if info.result_kept:
        if isinstance(info.result, bytes):
            return "bytes", f"{len(info.result):,} bytes: {info.result[:2000]!r}"
        return "json", json.dumps(info.result, indent=2, ensure_ascii=False)
    if gone:
        return "gone", "gone: it was kept for RESULT_TTL_SECONDS, and that time has passed"
    if info.state == "done":
        return "none", "none: the handler returned None (or results are not kept: RESULT_TTL_SECONDS=0)"
    if info.state in ("failed", "cancelled"):
        return "none", f"none: a {info.state} job has no result"
    return "pending", "none yet: the job has not ended"


def _rate_field(form: Any) -> Rate | None:
    """The form's ``rate`` (empty, "none" or "off": no limit) and ``burst``, or BadInput (also for a
    burst without a rate, as the CLI's ``limit`` refuses it)."""
    text = (_field(form, "rate") or "").strip()
    burst_text = (_field(form, "burst") or "").strip()
    if text.lower() in ("", "none", OFF):
        if burst_text:
            raise BadInput("rate: a burst goes with a rate, not with no limit")
        return None
    try:
        return Rate.parse(text, int(burst_text) if burst_text else None)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"rate: {str(exc)[:300]}") from None


def _delete_failed(catalog: Catalog, ref: Any, most: int) -> int:
    queue = catalog.open(ref)
    deleted = 0
    for shard in queue.shards:
        for job_id in list(shard.redis.sscan_iter(shard.keys.failed, count=500)):
            if deleted >= most:
                return deleted
            if shard.delete(job_id if isinstance(job_id, str) else job_id.decode()) is not None:
                deleted += 1
    return deleted


def _strict_query(request: Request) -> dict[str, list[str]]:
    """BadInput when not UTF-8 (Starlette would put in replacement characters: not the id sent)."""
    raw = request.scope.get("query_string", b"").decode("latin-1")
    try:
        return parse_qs(raw, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise BadInput("the query string is not UTF-8 (a job id is UTF-8 text)") from None


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _same_origin(request: Request) -> None:
    """Refuse a POST from another site's page (besides the SameSite cookie and the CSRF token)."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise Refused(f"a form from {origin[:100]} may not act on this console")


def build_app(catalog: Catalog, guard: Guard, redis_url: str, health: Health, timeout: float) -> Starlette:
    """``timeout``: how long ``catalog``'s client waits for Redis (``console_client``), named on a 503."""
    console = Console(catalog, guard, redis_url, health)

    async def not_found(request: Request, exc: Exception) -> Response:
        return console.error(request, 404, "Not found", str(exc))

    async def bad_input(request: Request, exc: Exception) -> Response:
        return console.error(request, 400, "Bad request", str(exc))

    async def refused(request: Request, exc: Exception) -> Response:
        log.warning("console action refused from %s: %s (%s)", _client(request), exc, request.url.path)
        return console.error(request, 403, "Refused", str(exc))

    async def redis_down(request: Request, exc: Exception) -> Response:
        where = redact_url(redis_url)
        if isinstance(exc, redis.TimeoutError):
            detail = f"Redis at {where} is not answering (no reply within {timeout:g} s): try again soon"
        elif isinstance(exc, redis.ConnectionError):
            detail = f"cannot reach Redis at {where}: try again once it is back"
        else:
            detail = f"Redis at {where} refused the command"
        detail = f"{detail} ({type(exc).__name__}: {str(exc)[:200]})"
        return console.error(request, 503, "Redis unavailable", detail, maybe_done=request.method == "POST")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return console.error(request, 404, "Not found", f"no page at {request.url.path[:200]}")
        if exc.status_code == 405:
            return console.error(request, 405, "Method not allowed", f"{request.method} {request.url.path[:200]}")
        return console.error(request, exc.status_code, "Error", str(exc.detail))

    routes = [
        Route("/", console.queues),
        Route("/workers", console.workers),
        Route("/healthz", console.healthz),
        Route("/login", console.login, methods=["GET", "POST"]),
        Route("/logout", console.logout, methods=["POST"]),
        Route("/queues/{name:path}/jobs/{state}", console.jobs),
        Route("/queues/{name:path}/job", console.job),
        Route("/queues/{name:path}/actions", console.action, methods=["GET", "POST"]),
        Route("/queues/{name:path}", console.queue),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: dict[Any, Any] = {
        NotFound: not_found,
        BadInput: bad_input,
        Refused: refused,
        redis.RedisError: redis_down,
        HTTPException: http_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers)
