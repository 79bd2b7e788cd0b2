"""CPU seconds of process trees, from /proc (no psutil needed)."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime+stime+cutime+cstime in seconds) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3); utime is field 14 -> index 11
    ppid = int(fields[1])
    ticks = sum(int(x) for x in fields[11:15])
    return ppid, ticks / _TICK


def tree_cpu_seconds(roots: list[int]) -> dict[int, float]:
    """CPU seconds by pid, for every live process in the trees under ``roots``.

    Each figure includes the CPU of that process's children it has already reaped (cutime,
    cstime), so a worker that forks per job (RQ's default Worker) is counted in full.
    """
    table: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                table[int(name)] = st
    wanted = {pid for pid in roots if pid in table}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in table.items():
            if ppid in wanted and pid not in wanted:
                wanted.add(pid)
                grew = True
    return {pid: table[pid][1] for pid in wanted}
