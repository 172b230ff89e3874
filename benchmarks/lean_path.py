"""The per-tuple path of a chain host, without Ray: ns per row, and where they go.

A microbenchmark, not a timed test. It builds the peer pipeline as the submit's plan
chains it (``tests/components.py: build_chainable``; gen → double → keep joined by forward
edges, then a fields grouping into count) and runs task 1 of the chain in this process:
the gen spout's executor hosts the double and keep tasks (``host_chain``, ``ChainLink``
sinks, as ``actors._actor`` wires them), and keep's emits go to a fake sink for the count
task that counts the rows and takes every batch at once. No Ray, no actor call, no
encoding: what is left is our own Python per tuple (the collector's emit, routing, the
batch, the hand-over to the chained bolt, the ``Tuple``, the execute dispatch, the acking
bookkeeping, the metrics and the loop).

    python -m benchmarks.lean_path [--rows 300000] [--runs 5] [--acking] [--profile]

Prints each run's ns per row (wall and thread CPU) and, with ``--profile``, cProfile's top
functions of one more run and the per-stage budget: each stage's share of that run's
profiled time (the ``tottime`` of the functions in :data:`STAGES`), times the median
unprofiled thread CPU per row. The profiler's own cost falls on every call, so the shares
lean towards stages of many small calls: a budget to rank the stages, not a stopwatch.

The last line is ``key=value``: ``ns_per_row`` (median wall), ``cpu_ns_per_row`` (median
thread CPU), ``best_cpu_ns_per_row`` (the least thread CPU of the runs: on a shared host
the others carry its noise, as ``timeit`` reports its best), ``rows_per_s``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import tests.components as pipeline
from actors import make_executor
from actors._chain import ChainLink
from cluster._plan import plan

CONF = {"topology.acker.executors": 0}

#: The stages of the per-tuple path, by the functions whose own time they are (module
#: path suffix, function name); the rest is "other" (mostly builtins such as len).
STAGES = {
    "user code (next_tuple, execute)": [("tests/components.py", None)],
    "emit and route (collector)": [("actors/_collectors.py", "emit"),
                                   ("actors/_collectors.py", "_targets"),
                                   ("actors/_routing.py", None)],
    "batch / send to a destination": [("actors/_collectors.py", "_send"),
                                      ("actors/_collectors.py", "_send_one"),
                                      ("backpressure/_jcqueue.py", "try_publish"),
                                      ("backpressure/_jcqueue.py", "try_flush")],
    "hand to the chained bolt": [("actors/_chain.py", None)],
    "Tuple construction": [("topology/_tuple.py", "__init__")],
    "execute dispatch, auto-ack, sampled timing": [("actors/_bolt_executor.py", "_execute")],
    "acking ledger": [("actors/_acking.py", None)],
    "loop overhead (loop, timers, queue checks, flush)": [
        ("actors/_spout_executor.py", None), ("actors/_executor.py", None),
        ("actors/_bolt_executor.py", "_timers"), ("actors/_outbox.py", None),
        ("actors/_inbound.py", None), ("backpressure/_jcqueue.py", "consume"),
        ("backpressure/", None)],
    "fake sink (not ours)": [("benchmarks/lean_path.py", None)],
}


def stage_of(filename: str, func: str) -> str:
    """The :data:`STAGES` key of a profiled function (first match), or "other"."""
    filename = filename.replace("\\", "/")
    for stage, keys in STAGES.items():
        for suffix, name in keys:
            if suffix in filename and (name is None or name == func):
                return stage
    return "other (builtins)"


def budget(stats: pstats.Stats, cpu_ns_per_row: float) -> dict[str, float]:
    """ns per row per stage: each stage's share of the profiled own time, scaled to the
    unprofiled ``cpu_ns_per_row``."""
    own: dict[str, float] = {}
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():
        stage = stage_of(filename, func)
        own[stage] = own.get(stage, 0.0) + tottime
    total = sum(own.values())
    return {k: own.get(k, 0.0) / total * cpu_ns_per_row
            for k in [*STAGES, "other (builtins)"]}


class CountingSink:
    """The count task's stand-in: takes every batch whole and counts its data rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.calls = 0

    def __call__(self, items: list) -> int:
        self.calls += 1
        self.rows += sum(1 for it in items if it[0] >= 0)
        return len(items)


def build(rows: int, conf: dict):
    """Task 1 of the chained peer pipeline: the host (gen) with double and keep chained
    in, keep's emits into a :class:`CountingSink`; returns (host, sink)."""
    p = plan(pipeline.build_chainable(rows), conf)
    topo, tw = p.topology, dict(p.task_worker)
    tasks = {cid: topo.component_tasks[cid][0] for cid in ("gen", "double", "keep", "count")}
    cores = {cid: make_executor("lean", topo, dict(p.conf), t, tw)
             for cid, t in tasks.items() if cid != "count"}
    host, double, keep = cores["gen"], cores["double"], cores["keep"]
    host.host_chain([double, keep])
    sink = CountingSink()
    in_actor = {c.task_id: c for c in cores.values()}
    for core in cores.values():
        sinks = {}
        for t in core.destinations:
            dest = in_actor.get(t)
            if dest is not None and dest.chain_host is not None:
                sinks[t] = ChainLink(dest)
            elif dest is not None:
                sinks[t] = core.make_queue_sink(dest.queue, core.task_id)
            elif t == tasks["count"]:
                sinks[t] = sink
            else:  # acking messages to tasks outside this actor (with --acking)
                sinks[t] = lambda items: len(items)
        core.connect(sinks)
    return host, sink


def run_once(rows: int, conf: dict, profiler: cProfile.Profile | None = None
             ) -> tuple[float, float, int]:
    """One run on this thread: (wall s, thread CPU s, rows counted by the sink)."""
    host, sink = build(rows, conf)
    for m in reversed(host.chained):
        m._open()
    host._open()
    t0, c0 = time.perf_counter(), time.thread_time()
    if profiler is not None:
        profiler.enable()
    host.run()
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    if host.state != "done" or any(m.state != "done" for m in host.chained):
        raise RuntimeError(f"the chain did not end cleanly: {host.state}, "
                           f"{[m.state for m in host.chained]}")
    return wall, cpu, sink.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--acking", action="store_true",
                    help="acking on, spouts as ackers (no acker task), emits with msg ids "
                         "are not made: the bolts' tracked path is not exercised")
    ap.add_argument("--profile", action="store_true", help="cProfile one more run")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    conf = dict(CONF)
    if args.acking:
        conf = {"topology.acker.executors": 1, "topology.acker.in.spouts": True}
    expected = sum(1 for i in range(args.rows) if (2 * i) % 3 == 0)
    walls, cpus = [], []
    for r in range(args.runs):
        wall, cpu, counted = run_once(args.rows, conf)
        if counted != expected:
            raise RuntimeError(f"counted {counted} rows, expected {expected}")
        walls.append(wall)
        cpus.append(cpu)
        print(f"run {r + 1}: {wall / args.rows * 1e9:.0f} ns/row wall, "
              f"{cpu / args.rows * 1e9:.0f} ns/row cpu", flush=True)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    if args.profile:
        prof = cProfile.Profile()
        run_once(args.rows, conf, prof)
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(args.top)
        print("stage: ns per row (thread CPU, by profiled share)")
        for stage, ns in budget(stats, cpu / args.rows * 1e9).items():
            print(f"  {stage}: {ns:.0f}")
    print(f"ns_per_row={wall / args.rows * 1e9:.1f} cpu_ns_per_row={cpu / args.rows * 1e9:.1f} "
          f"best_cpu_ns_per_row={min(cpus) / args.rows * 1e9:.1f} "
          f"rows_per_s={args.rows / wall:.0f}")


if __name__ == "__main__":
    main()
