"""Where the latency of the same-node path goes: per hop, per flush interval, with each
executor's CPU and run-queue waits, GC pauses and the episodes of the tail.

The latency pipeline of benchmarks/latency.py (live → double → sink, shuffle groupings,
one worker, frames over the same-node socket by default), its bolts also stamping the
time each tuple reached the first bolt, so a tuple's latency splits into hop 1 (spout's
``emit`` → first bolt's ``execute``) and hop 2 (→ last bolt's ``execute``). At a fixed
rate (``--rate``, default about half the socket path's maximum measured on this host), for
each ``topology.batch.flush.interval.millis`` in ``--flush-ms``, ``--rounds`` runs
alternating:

* per hop and end to end, p50 / p90 / p99 (ms) over the tuples after ``--warmup-s``;
* frames per hop (``TaskStats.transfer``) and tuples per frame: with Nagle's rule, a hop's
  frame interval is what a tuple waits in its batch;
* each executor process's CPU and run-queue wait (ms per s of wall time, all threads,
  from ``/proc/<pid>/task/*/schedstat``, a 5 s window in the middle of the run): the
  kernel's account of how long runnable threads waited for a core;
* the bolts' GC pauses (``gc.callbacks``: count, total and longest per generation);
* the tail's shape: the share of tuples over ``--slow-ms`` end to end, and the episodes
  they fall in (slow tuples less than 50 ms apart are one episode): many long episodes
  in which both hops are slow together point at the host (CPU), a regular beat at a
  periodic stall in one process.

    python -m benchmarks.latency_hops [--rate 44000] [--seconds 12] [--rounds 2]
                                      [--flush-ms 1,0.25] [--paths socket]

Writes benchmarks/results/latency_hops.json; the last line is ``key=value ...``: per flush
interval (suffix ``_flush<ms>``) and path, the medians over rounds of
``e2e_ms_p50``/``e2e_ms_p99``, ``hop_ms_p50`` (mean of the two hops), ``frames_per_s``
(per hop), ``slow_share`` and ``cpu_ms_per_s`` (the three executors).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

import ray
import ray.cloudpickle

import tests.components as components
from benchmarks._common import quantile, write_result
from benchmarks.latency import run_context
from cluster import LocalCluster
from tests.components import LiveSpout
from topology import Bolt, TopologyBuilder

COMPONENTS = ("live", "double", "sink")
#: slow tuples closer than this (s) belong to one episode
EPISODE_GAP_S = 0.05


class _GcWatch:
    """Keeps ``(generation, pause s)`` of every collection in this process."""

    def _watch_gc(self) -> None:
        self.gc_pauses: list[tuple[int, float]] = []
        started: list[float] = []

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                started[:] = [time.perf_counter()]
            elif started:
                self.gc_pauses.append((info["generation"], time.perf_counter() - started[0]))

        gc.callbacks.append(on_gc)


class HopDouble(Bolt, _GcWatch):
    """``(i, emitted_at)`` → ``(2 * i, emitted_at, reached_at)``: ``reached_at`` is
    ``time.time()`` at the start of this ``execute``."""

    outputs = ("i", "emitted_at", "reached_at")

    def prepare(self, conf, context, collector):
        self._watch_gc()
        self.emit = collector.emit

    def execute(self, tup):
        i, at = tup.values
        self.emit((2 * i, at, time.time()))


class HopSink(Bolt, _GcWatch):
    """Keeps ``(now, hop 1 s, hop 2 s)`` per tuple, in three lists of floats (untracked by
    the GC, so the keeping adds no collections)."""

    def prepare(self, conf, context, collector):
        self._watch_gc()
        self.at: list[float] = []
        self.hop1: list[float] = []
        self.hop2: list[float] = []

    def execute(self, tup):
        now = time.time()
        _, emitted, reached = tup.values
        self.at.append(now)
        self.hop1.append(reached - emitted)
        self.hop2.append(now - reached)


def _schedstat(pids: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Component → (ns on a CPU, ns runnable waiting for one), summed over its threads."""
    out = {}
    for comp, pid in pids.items():
        run = wait = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    r, w, _ = map(int, f.read().split())
            except (OSError, ValueError):  # a thread that ended meanwhile
                continue
            run, wait = run + r, wait + w
        out[comp] = (run, wait)
    return out


def _episodes(at: list[float], e2e: list[float], slow_s: float) -> list[tuple[float, int]]:
    """(duration s, tuples) of each run of slow tuples, ``EPISODE_GAP_S`` apart at most."""
    eps: list[list[float]] = []
    for t, x in zip(at, e2e, strict=True):
        if x <= slow_s:
            continue
        if eps and t - eps[-1][1] < EPISODE_GAP_S:
            eps[-1][1] = t
            eps[-1][2] += 1
        else:
            eps.append([t, t, 1])
    return [(b - a, int(n)) for a, b, n in eps]


def _pcts(xs: list[float]) -> dict:
    return {k: round(quantile(xs, q) * 1000, 3) for k, q in
            (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}


def run(cluster: LocalCluster, name: str, path: str, flush_ms: float, args) -> dict:
    """One run; returns its figures."""
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(args.rate, args.seconds))
    b.set_bolt("double", HopDouble()).shuffle_grouping("live")
    b.set_bolt("sink", HopSink()).shuffle_grouping("double")
    conf = {"topology.acker.executors": 0, "topology.transfer.local.socket": path == "socket",
            "topology.batch.flush.interval.millis": flush_ms}
    h = cluster.submit_topology(name, conf, b.create_topology())
    try:
        pids = {c: ray.get(h.actors[h.topology.component_tasks[c][0]].pid.remote())
                for c in COMPONENTS}
        time.sleep(min(args.seconds / 2, 3.0))
        s0, t0 = _schedstat(pids), time.monotonic()
        time.sleep(min(5.0, args.seconds / 3))
        s1, dt = _schedstat(pids), time.monotonic() - t0
        if not h.wait(args.seconds * 4 + 60):
            raise SystemExit(f"{name} did not finish:\n{h.stats().summary()}")
        st = h.stats()
        state = {a: next(iter(h.task_state("sink", a).values())) for a in ("at", "hop1", "hop2")}
        pauses = {c: next(iter(h.task_state(c, "gc_pauses").values())) for c in ("double", "sink")}
    finally:
        cluster.kill_topology(name)
    emitted = st.component("live")[0].emitted
    if len(state["at"]) != emitted:
        raise SystemExit(f"{name}: {len(state['at'])} tuples reached the sink of {emitted}")
    start = state["at"][0] + args.warmup_s
    keep = [k for k, t in enumerate(state["at"]) if t >= start]
    at = [state["at"][k] for k in keep]
    hop1 = [state["hop1"][k] for k in keep]
    hop2 = [state["hop2"][k] for k in keep]
    e2e = [a + b for a, b in zip(hop1, hop2, strict=True)]
    span = state["at"][-1] - state["at"][0]
    frames = {}
    for c in ("live", "double"):
        t = st.component(c)[0].transfer or {}
        frames[c] = t.get("socket_frames", 0) + t.get("call_frames", 0)
    slow_s = args.slow_ms / 1000
    eps = _episodes(at, e2e, slow_s)
    cpu = {c: {"cpu_ms_per_s": round((s1[c][0] - s0[c][0]) / dt / 1e6, 1),
               "runq_wait_ms_per_s": round((s1[c][1] - s0[c][1]) / dt / 1e6, 1)}
           for c in COMPONENTS}
    gcs = {c: {f"gen{g}": {"n": len(d), "total_ms": round(sum(d) * 1000, 2),
                           "max_ms": round(max(d) * 1000, 3)}
               for g in (0, 1, 2) if (d := [p for gen, p in pauses[c] if gen == g])}
           for c in pauses}
    return {"path": path, "flush_ms": flush_ms, "tuples": len(e2e),
            "sustained_per_s": round(len(e2e) / (at[-1] - at[0])) if len(at) > 1 else None,
            "hop1_ms": _pcts(hop1), "hop2_ms": _pcts(hop2), "e2e_ms": _pcts(e2e),
            "frames_per_s": {c: round(n / span, 1) for c, n in frames.items()},
            "tuples_per_frame": {c: round(emitted / n, 1) if n else None
                                 for c, n in frames.items()},
            "schedstat": cpu, "gc": gcs,
            "slow_share": round(sum(1 for x in e2e if x > slow_s) / len(e2e), 4),
            "episodes": {"n": len(eps), "longest_ms": round(max((d for d, _ in eps),
                                                                default=0.0) * 1000, 1),
                         "over_100ms": sum(1 for d, _ in eps if d > 0.1)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=44_000.0, help="tuples/s")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--flush-ms", default="1,0.25",
                    help="topology.batch.flush.interval.millis values")
    ap.add_argument("--paths", default="socket", help="socket, call, or both")
    ap.add_argument("--slow-ms", type=float, default=8.0,
                    help="end-to-end latency above which a tuple is slow")
    args = ap.parse_args()
    flushes = [float(x) for x in args.flush_ms.split(",") if x]
    paths = [p for p in args.paths.split(",") if p]
    before = run_context()
    ray.cloudpickle.register_pickle_by_value(components)
    cluster = LocalCluster(num_cpus=2)
    runs: list[dict] = []
    try:
        forms = [(p, f) for p in paths for f in flushes]
        for r in range(args.rounds):
            for p, f in (forms if r % 2 == 0 else forms[::-1]):
                row = run(cluster, f"hops-{p}-{f}-{r}", p, f, args)
                row["round"] = r
                runs.append(row)
                print(f"{p} flush {f} ms round {r}: e2e {row['e2e_ms']}, hop1 "
                      f"{row['hop1_ms']}, hop2 {row['hop2_ms']}, frames/s "
                      f"{row['frames_per_s']}, slow {row['slow_share']:.1%}, episodes "
                      f"{row['episodes']}", flush=True)
    finally:
        cluster.shutdown()
    parts = []
    summary = {}
    for p, f in [(p, f) for p in paths for f in flushes]:
        rs = [x for x in runs if x["path"] == p and x["flush_ms"] == f]

        def med(get, rs=rs):
            return round(statistics.median(get(x) for x in rs), 3)

        key = f"{p}_flush{f:g}"
        s = {"e2e_ms_p50": med(lambda x: x["e2e_ms"]["p50"]),
             "e2e_ms_p99": med(lambda x: x["e2e_ms"]["p99"]),
             "hop_ms_p50": med(lambda x: (x["hop1_ms"]["p50"] + x["hop2_ms"]["p50"]) / 2),
             "frames_per_s": med(lambda x: statistics.mean(x["frames_per_s"].values())),
             "slow_share": med(lambda x: x["slow_share"]),
             "cpu_ms_per_s": med(lambda x: sum(c["cpu_ms_per_s"]
                                               for c in x["schedstat"].values()))}
        summary[key] = s
        parts += [f"{k}_{key}={v}" for k, v in s.items()]
    line = " ".join(parts)
    write_result("latency_hops", {"rate": args.rate, "seconds": args.seconds,
                                  "warmup_s": args.warmup_s, "rounds": args.rounds,
                                  "slow_ms": args.slow_ms, "run": before,
                                  "load_avg_1_5_15_end": [round(x, 2)
                                                          for x in os.getloadavg()],
                                  "summary": summary, "runs": runs, "closing": line})
    print(line)


if __name__ == "__main__":
    main()
