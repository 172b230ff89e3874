"""What a checkpoint round costs, at 1k and 100k keys of state.

A spout (two tasks, keeping its position) cycles over ``K`` keys; a fields-grouped
stateful word count (two tasks) keeps one count per key in its ``KeyValueState``, so after
the first pass the state holds ``K`` keys and every round writes the keys touched since the
last one. Measured per run, from the coordinator (``handle.checkpoint_stats()``, sampled
every 20 ms) and the tasks (``stats().checkpoint``):

* ``round_ms``: a round's duration, from the coordinator's trigger to its commit (barriers
  through the queues, alignment, every task's snapshot written, the commit record);
* ``snapshot_ms`` and ``keys_written``: one stateful task's write of its changed keys;
* the run's rate, beside the same topology with a plain dict-counting bolt (no
  checkpoints) in the same session, alternating: the throughput cost of checkpointing.

    python -m benchmarks.checkpoint_cost [--keys 1000 100000] [--tuples 300000]
        [--interval-ms 200] [--rounds 2]

Writes benchmarks/results/checkpoint_cost.json; the last line is ``key=value ...``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import machine, quantile, write_result


def _topology(keys: int, n: int, stateful: bool):
    from topology import TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", pipeline.KeyCycleSpout(keys, n), 2)
    bolt = pipeline.StatefulWordCount() if stateful else pipeline.PlainWordCount()
    b.set_bolt("count", bolt, 2).fields_grouping("src", ("word",))
    return b.create_topology()


def run_once(cluster, keys: int, n: int, stateful: bool, interval_ms: int,
             ckpt_dir: str) -> dict:
    name = f"cost-{keys}-{'state' if stateful else 'plain'}-{time.monotonic_ns()}"
    conf = {"topology.acker.executors": 0,
            "topology.state.checkpoint.interval.ms": interval_ms,
            "topology.state.checkpoint.dir": ckpt_dir}
    t0 = time.perf_counter()
    handle = cluster.submit_topology(name, conf, _topology(keys, n, stateful))
    rounds: dict[int, float] = {}
    snapshots: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        seen_tasks: dict[int, int] = {}
        while not done.is_set():
            s = handle.checkpoint_stats()
            if s and s["last_duration_ms"] is not None:
                rounds[s["completed"]] = s["last_duration_ms"]
            for t in handle.stats().component("count"):
                cp = t.checkpoint or {}
                if cp.get("checkpoints", 0) != seen_tasks.get(t.task) and cp.get(
                        "last_snapshot_ms") is not None:
                    seen_tasks[t.task] = cp["checkpoints"]
                    snapshots.append((cp["last_snapshot_ms"], cp["last_keys_written"]))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    if stateful:
        sampler.start()
    try:
        assert handle.wait(600), "the run did not complete"
        elapsed = time.perf_counter() - t0
        state_keys = None
        if stateful:
            state_keys = sum(len(c) for c in handle.state()["count"].values())
    finally:
        done.set()
        cluster.kill_topology(name)
    out = {"keys": keys, "tuples": n, "stateful": stateful, "elapsed_s": round(elapsed, 3),
           "rate_per_s": round(n / elapsed)}
    if stateful:
        r = sorted(rounds.values())
        # the first pass adds keys: keep the snapshots after it (the state is full)
        full = [s for s in snapshots[len(snapshots) // 3:]] or snapshots
        out.update(state_keys=state_keys, rounds=len(r),
                   round_ms_p50=round(statistics.median(r), 2) if r else None,
                   round_ms_p99=round(quantile(r, 0.99), 2) if r else None,
                   snapshot_ms_p50=round(statistics.median(x for x, _ in full), 2)
                   if full else None,
                   keys_written_p50=statistics.median(k for _, k in full) if full else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--tuples", type=int, default=300_000)
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from cluster import LocalCluster

    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster()
    runs = []
    with tempfile.TemporaryDirectory() as ckpt:
        for _ in range(args.rounds):
            for keys in args.keys:
                for stateful in (True, False):  # side by side, alternating
                    r = run_once(cluster, keys, args.tuples, stateful, args.interval_ms, ckpt)
                    print(r, flush=True)
                    runs.append(r)
    cluster.shutdown()
    summary = {}
    for keys in args.keys:
        st = [r for r in runs if r["keys"] == keys and r["stateful"]]
        pl = [r for r in runs if r["keys"] == keys and not r["stateful"]]
        summary[keys] = {
            "round_ms_p50": statistics.median(r["round_ms_p50"] for r in st),
            "round_ms_p99": max(r["round_ms_p99"] for r in st),
            "snapshot_ms_p50": statistics.median(r["snapshot_ms_p50"] for r in st),
            "keys_written_p50": statistics.median(r["keys_written_p50"] for r in st),
            "state_keys": st[-1]["state_keys"],
            "rate_ratio": round(statistics.median(r["rate_per_s"] for r in st)
                                / statistics.median(r["rate_per_s"] for r in pl), 3)}
    write_result("checkpoint_cost", {"machine": machine(), "args": vars(args), "runs": runs,
                                     "summary": summary})
    print(" ".join(f"round_ms_p50_{k}={v['round_ms_p50']} snapshot_ms_p50_{k}="
                   f"{v['snapshot_ms_p50']} rate_ratio_{k}={v['rate_ratio']}"
                   for k, v in summary.items()))


if __name__ == "__main__":
    main()
