"""The cluster matrix: setqueue alone on a local Redis Cluster, by QUEUE_SHARDS and WAIT_REPLICAS. The job's
INCR goes to a redis-server outside it, and each cell's queue name puts its shards evenly on the masters: the
split measured is the ids' and claims', not CRC16's."""

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import report
from common import CURRENT, CodeTree, Context, Server, fmt, log, median
from drain import Cell, cell_trials, exactly_once
from systems import SetQueue, close_all

from tests.support.cluster import RedisClusterNodes

NAME = "cluster"
TITLE = "setqueue on a Redis Cluster: drain and Redis cost per node, by QUEUE_SHARDS"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix cluster")
    g.add_argument("--shards", default="1,3,6", help="QUEUE_SHARDS values")
    g.add_argument("--wait-replicas", default="0,1", help="WAIT_REPLICAS values, each with every shards")
    g.add_argument("--cluster-jobs", type=int, default=25_000, help="jobs per trial")
    g.add_argument("--cluster-workers", type=int, default=2, help="worker processes")
    g.add_argument("--cluster-trials", type=int, default=3, help="trials of every cell, taking turns")
    g.add_argument("--masters", type=int, default=3, help="masters, one replica each")


@dataclass
class ClusterSetQueue(SetQueue):
    """``url`` names one node; the job INCRs on ``counter_url``."""

    counter_url: str = ""
    nodes: dict[str, redis.Redis] = field(default_factory=dict)  # by port
    masters: tuple[int, ...] = ()

    def env(self, tree: CodeTree = CURRENT) -> dict[str, str]:
        return {**super().env(tree), "BENCH_REDIS_URL": self.counter_url}

    def queue_servers(self) -> dict[str, redis.Redis]:
        return self.nodes

    def prepare(self) -> None:
        for port in self.masters:  # the replicas follow
            self.nodes[str(port)].flushall()

    def after_drain(self) -> dict[str, Any]:
        stats = self.client().stats()  # done keeps every id: DONE_MAX_COUNT is 1,000,000
        return {"done_per_shard": [s["done"] for s in stats.get("shards", [stats])]}


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    counter, cluster = Server(), RedisClusterNodes(masters=a.masters, replicas=1)
    systems: list[ClusterSetQueue] = []
    try:
        topology = cluster.start().topology()
        nodes = {str(p): redis.Redis(port=p, decode_responses=True) for p in cluster.ports}
        placement: dict[str, dict[str, Any]] = {}
        for shards in (int(s) for s in a.shards.split(",")):
            even = shards % len(topology) == 0  # shards evenly on the masters, when they can
            queue = cluster.evenly_sharded_name(f"bench{shards}", shards) if even else f"bench{shards}-0"
            placement[str(shards)] = {"queue": queue, "shard_masters": cluster.shard_masters(queue, shards)}
            for wait in (int(w) for w in a.wait_replicas.split(",")):
                name = f"shards={shards}" + (f" wait={wait}" if wait else "")
                how = {"concurrency": a.cpu_concurrency, "claim_batch": a.claim_batch, "queue": queue}
                how |= {"shards": shards, "wait_replicas": wait, "nodes": nodes, "masters": tuple(topology)}
                systems.append(ClusterSetQueue(name, cluster.url(), counter_url=counter.url, **how))
        log(f"cluster {topology}; counter on port {counter.port}; cells {[s.name for s in systems]}")
        cell = Cell(a.cluster_jobs, a.max_seconds, float("inf"), a.cluster_trials)
        runs = cell_trials(counter, systems, a.cluster_workers, cell, ctx.logs(NAME))
        cells = {s.name: s for s in systems}
        for r in runs:
            r.update(shards=cells[r["system"]].shards, wait_replicas=cells[r["system"]].wait_replicas)
    finally:
        close_all(systems)
        cluster.cleanup()
        counter.close()
    return {
        "redis_version": counter.version,
        "topology": {str(m): r for m, r in topology.items()},
        "placement": placement,
        "settings": {s.name: {"describe": s.describe()} for s in systems},
        "runs": runs,
        "ok": all(r["complete"] and exactly_once(r) for r in runs),
    }


def deviation(values: list[float]) -> float | None:
    """The largest distance of a value from an even split, as a fraction of the even share."""
    mean = sum(values) / len(values) if values else 0
    return max(abs(v / mean - 1) for v in values) if mean else None


def by_node(data: dict[str, Any], r: dict[str, Any]) -> dict[str, Any] | None:
    """One trial's Redis CPU µs and commands per job by node (port); the split over the masters."""
    jobs, masters = r.get("window_jobs"), [int(m) for m in data["topology"]]
    if not jobs or "nodes" not in r:
        return None
    nodes = {int(p): d for p, d in r["nodes"].items()}
    held = data["placement"][str(r["shards"])]["shard_masters"]
    done = r.get("done_per_shard") or []
    even = set(held) == set(masters) and len(held) % len(masters) == 0  # else a split is not meant to be even
    by_master = [sum(n for n, at in zip(done, held, strict=True) if at == m) for m in masters]
    return {
        "cpu_us": {p: 1e6 * d["cpu_seconds"] / jobs for p, d in nodes.items()},
        "busiest": max(100 * nodes[m]["cpu_seconds"] / nodes[m]["seconds"] for m in masters),
        "masters_cmds": sum(nodes[m]["commands"] for m in masters) / jobs,
        "waits": sum(nodes[m]["commands_by_name"].get("wait", 0) for m in masters) / jobs,
        "jobs_dev": deviation(by_master) if even and done else None,
        "cmds_dev": deviation([nodes[m]["commands"] for m in masters]) if even else None,
    }


def cells(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each cell: the medians of its trials, and the worst split of any."""
    masters = [int(m) for m in data["topology"]]
    out = []
    for name in dict.fromkeys(r["system"] for r in data["runs"]):
        rs = [r for r in data["runs"] if r["system"] == name]
        trials = [t for t in (by_node(data, r) for r in rs) if t]
        c: dict[str, Any] = {"name": name, "shards": rs[0]["shards"], "wait": rs[0]["wait_replicas"], "runs": rs}
        c["cpu_us"] = {
            p: median(t["cpu_us"].get(p) for t in trials) or 0 for p in (trials[0]["cpu_us"] if trials else {})
        }
        c |= {k: median(t[k] for t in trials) or 0 for k in ("busiest", "masters_cmds", "waits")}
        c |= {k: max((t[k] for t in trials if t[k] is not None), default=None) for k in ("jobs_dev", "cmds_dev")}
        c["masters_us"] = sum(v for p, v in c["cpu_us"].items() if p in masters)
        c["replicas_us"] = sum(v for p, v in c["cpu_us"].items() if p not in masters)
        c["steady"], c["worker_us"] = report.steady(rs), 1000 * (report.cost(rs, "worker_cpu_ms_per_job") or 0)
        out.append(c)
    return out


def split(v: float | None, c: dict[str, Any]) -> str:
    return ("one master" if c["shards"] == 1 else "-") if v is None else f"{100 * v:.1f}%"


def cell_table(cs: list[dict[str, Any]]) -> list[str]:
    cols = ["cell", "steady jobs/s (range)", "drain jobs/s", "enqueue jobs/s", "worker CPU µs/job"]
    cols += ["Redis CPU µs/job: masters", "replicas", "Redis cmds/job, masters", "busiest master", "jobs split"]
    rows = []
    for c in cs:
        rs, cost = c["runs"], report.cost
        row = [c["name"], f"{fmt(c['steady'])} ({report.range_text(rs)})", fmt(cost(rs, "drain_jobs_per_s"))]
        row += [fmt(cost(rs, "enqueue_jobs_per_s")), fmt(c["worker_us"]), fmt(c["masters_us"]), fmt(c["replicas_us"])]
        rows.append([*row, fmt(c["masters_cmds"], 2), f"{c['busiest']:.0f}%", split(c["jobs_dev"], c)])
        rows[-1].append(split(c["cmds_dev"], c))
    return [
        *report.table([*cols, "commands split"], rows),
        "CPU and commands from the first job executed to the end, over the jobs executed meanwhile (commands in "
        "scripts count); busiest master: % of a core; splits: the largest deviation of a master from an even share "
        "(worst trial), jobs from each shard's done count. Sharding's own cost: shards=1 against the others.\n",
    ]


def wait_lines(cs: list[dict[str, Any]]) -> list[str]:
    L = ["## The cost of WAIT_REPLICAS\n", "Against the same shards without it, in the same run:\n"]
    for c in cs:
        plain = next((p for p in cs if p["shards"] == c["shards"] and not p["wait"]), None)
        if c["wait"] and plain and plain["steady"] and c["steady"]:
            L.append(
                f"- {c['name']}: steady **{c['steady'] / plain['steady']:.2f}x**; masters {c['masters_us']:.0f} vs "
                f"{plain['masters_us']:.0f} µs and {c['masters_cmds']:.2f} vs {plain['masters_cmds']:.2f} commands "
                f"per job (WAIT: {c['waits']:.3f}); replicas {c['replicas_us']:.0f} vs {plain['replicas_us']:.0f} µs"
            )
    return [*L, ""] if len(L) > 2 else []


def projection(masters: int, cs: list[dict[str, Any]]) -> list[str]:
    """A ceiling set by Redis CPU alone, from the most sharded even cell's CPU per job (the unsharded one's
    for N = 1), not a measurement of N machines."""
    even = [c for c in cs if c["shards"] % masters == 0 and not c["wait"] and c["masters_us"]]
    if not even:
        return []
    base = max(even, key=lambda c: c["shards"])
    single = next((c for c in cs if c["shards"] == 1 and not c["wait"] and c["masters_us"]), base)
    waiting = {c["shards"]: c for c in cs if c["wait"] and c["masters_us"]}
    rows = []
    for n in (1, 3, 6, 12):
        src = single if n == 1 else base
        ceiling, wait = n * 1e6 / src["masters_us"], waiting.get(src["shards"])
        shards = src["shards"] if n == 1 else src["shards"] // masters * n
        rows.append(
            [str(n), str(shards), fmt(ceiling), fmt(0.7 * ceiling), fmt(0.7 * ceiling * src["worker_us"] / 1e6, 1)]
        )
        rows[-1].append(fmt(wait and n * 1e6 / wait["masters_us"]))
    about = (
        f"From `{base['name']}` (`{single['name']}` for N = 1): Redis CPU per job on the masters, with the shards "
        "spread evenly so that each of N masters serves 1/N of the jobs. Assumed: a core per Redis node, the "
        "workers on machines of their own, the same cost per job (CLAIM_BATCH, short ids, no payload). Here the "
        "workers, not Redis, fill the cores, so jobs/s cannot rise with the shards: the split and the cost per "
        "job are what this machine shows.\n"
    )
    cols = ["masters N", "shards", "ceiling jobs/s (masters 100% busy)", "at 70%", "worker cores at 70%"]
    return ["## Projection: what N masters give\n", about, *report.table([*cols, "WAIT_REPLICAS=1"], rows)]


def summary(data: dict[str, Any]) -> str:
    a, cs, masters = data["args"], cells(data), len(data["topology"])
    about = [
        f"{masters} masters with a replica each ({2 * masters} redis-server processes on loopback) and one for the "
        f"job's INCR; {a['cluster_jobs']:,} jobs per trial, drained by {a['cluster_workers']} worker processes; "
        f"{a['cluster_trials']} trials per cell, the cells taking turns; medians",
    ]
    about += [
        f"QUEUE_SHARDS={n}: queue `{p['queue']}` on masters {p['shard_masters']}" for n, p in data["placement"].items()
    ]
    L = [*report.header(data, TITLE, about), "## Targets\n"]
    for c in (c for c in cs if c["cmds_dev"] is not None):
        ok = report.verdict(max(c["cmds_dev"], c["jobs_dev"] or 0) <= 0.1)
        spread = f"commands {split(c['cmds_dev'], c)}, jobs {split(c['jobs_dev'], c)}"
        L.append(f"- {c['name']}: commands and jobs per master within 10% of an even split: {spread}: {ok}")
    L += [report.once_target(data["runs"]), "", "## Throughput and Redis cost per job\n", *cell_table(cs)]
    return "\n".join(L + wait_lines(cs) + projection(masters, cs) + report.settings_list(data))


def plot(data: dict[str, Any], path: Path) -> bool:
    cs, masters = cells(data), sorted(int(m) for m in data["topology"])
    width = 0.8 / len(masters)

    def draw(ax: Any) -> None:
        for i, m in enumerate(masters):
            xs = [j + i * width for j in range(len(cs))]
            ax.bar(xs, [c["cpu_us"].get(m, 0) for c in cs], width, label=f"master :{m}")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cs))], [c["name"] for c in cs])
        date = data["machine_before"]["date"]
        ax.set(ylabel="Redis CPU µs per job", title=f"Redis CPU per job on each master; {date}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)

    return report.chart(path, 4.4, draw)
