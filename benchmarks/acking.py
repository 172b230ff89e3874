"""Acking on and off, side by side in one run: the throughput pipeline (spout → double →
count per key) with every spout tuple tracked (XOR of 64-bit edge ids, ``auto_ack`` bolts
anchoring and acking each input), against the same pipeline with
``topology.acker.executors = 0``.

Acking runs in both acker placements: Storm's acker executors (one acker actor, the
default) and ``topology.acker.in.spouts`` (the spout task tracks its own trees; the bolts
ack straight to it). Each repeat runs the three configurations back to back (off, acker
executors, in spouts); a ratio is taken within a repeat, and the median over repeats is
reported, since the host's speed drifts between repeats.

Complete latency: a spout's emit-to-ack time of each completed tuple tree, sampled through
the run (the spout keeps its last 1000: they are read every ``LATENCY_POLL_S``, and once
more at the end), pooled over repeats. The last 1000 alone are the trees of the run's last
few milliseconds, two or three acking messages: their median moved 13-140 ms between runs
of one commit, as the pipeline's trees in flight drift between a few hundred and
``max.spout.pending``. ``topology.max.spout.pending`` bounds the trees in
flight (Storm's advice; without it the spout can outrun the acking without bound).

    python -m benchmarks.acking [--tuples 300000] [--max-spout-pending 5000] [--repeats 3]

Writes benchmarks/results/acking.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import machine, quantile, write_result
from cluster import LocalCluster
from topology import make_config

#: seconds between reads of the spout's recent complete latencies during a run
LATENCY_POLL_S = 0.5


def run(cluster: LocalCluster, n: int, conf: dict, msg_ids: bool) -> dict:
    handle = cluster.submit_topology("acking", conf, pipeline.build(n, msg_ids=msg_ids))
    t0 = time.perf_counter()
    lat: list[float] = []
    while not handle.wait(LATENCY_POLL_S):
        assert time.perf_counter() - t0 < 900, handle.stats().summary()
        if msg_ids:
            lat += handle.stats().component("gen")[0].complete_latencies_ms
    dt = time.perf_counter() - t0
    s = handle.stats()
    (failed,) = handle.task_state("gen", "failed").values()
    got = sum(c for *_, (_, c) in handle.collected("sink"))
    cluster.kill_topology("acking")
    spout = s.component("gen")[0]
    frames = sum(t.sent_batches for t in s.tasks)
    return {"seconds": dt, "tuples_per_s": n / dt, "acked": spout.acked,
            "failed": failed, "counted": got, "frames_per_1000_tuples": frames / n * 1000,
            "latencies_ms": lat + spout.complete_latencies_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=300_000)
    ap.add_argument("--max-spout-pending", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.tuples
    ray.cloudpickle.register_pickle_by_value(pipeline)
    on = {"topology.acker.executors": 1, "topology.max.spout.pending": args.max_spout_pending}
    configs = {"off": {"topology.acker.executors": 0}, "ackers": on,
               "in_spouts": {**on, "topology.acker.in.spouts": True}}
    expected = sum(1 for i in range(n) if (i * 2) % 3 == 0)
    runs: dict[str, list] = {k: [] for k in configs}
    cluster = LocalCluster(num_cpus=2)
    for _ in range(args.repeats):
        for mode, conf in configs.items():
            r = run(cluster, n, conf, msg_ids=mode != "off")
            assert r["counted"] == expected, (mode, r["counted"], expected)
            assert mode == "off" or (r["acked"] == n and r["failed"] == 0), (mode, r)
            runs[mode].append(r)
            print(f"{mode:9} {r['tuples_per_s']:9,.0f} tuples/s "
                  f"{r['frames_per_1000_tuples']:5.1f} frames per 1000 tuples", flush=True)
    cluster.shutdown()
    result: dict = {"tuples": n, "repeats": args.repeats, "machine": machine(),
                    "configs": {k: make_config(c) for k, c in configs.items()}}
    summary = []
    for mode in ("ackers", "in_spouts"):
        ratios = [a["tuples_per_s"] / o["tuples_per_s"]
                  for a, o in zip(runs[mode], runs["off"], strict=True)]
        lat = [x for r in runs[mode] for x in r["latencies_ms"]]
        key = "" if mode == "ackers" else "_in_spouts"
        result[mode] = {
            "acking_ratio": statistics.median(ratios), "ratios": ratios,
            "ack_latency_ms": {"p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
                               "samples": len(lat)},
            "runs": [{k: v for k, v in r.items() if k != "latencies_ms"} for r in runs[mode]]}
        summary += [f"acking_ratio{key}={result[mode]['acking_ratio']:.2f}",
                    f"ack_latency_ms_p50{key}={quantile(lat, 0.5):.1f}",
                    f"ack_latency_ms_p99{key}={quantile(lat, 0.99):.1f}"]
    result["off"] = {"runs": [{k: v for k, v in r.items() if k != "latencies_ms"}
                              for r in runs["off"]]}
    write_result("acking", result)
    print(" ".join(summary))


if __name__ == "__main__":
    main()
