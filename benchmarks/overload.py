"""Overload: latency-first shedding against blocking, and queues bounded in bytes.

1. ``block``: a rate-controlled live source far above a slow sink (``--work-us`` of busy
   work per tuple): the sink's capacity is its executed rate over the run's second half.
2. ``shed``: the same pipeline offered ``--overload`` (10) times that capacity for
   ``--shed-s`` seconds with ``topology.backpressure.overload: "shed"`` and a
   ``--target-ms`` target: the p99 of the emit-to-execute latency of the executed tuples,
   and the shed share against the share that must go, ``1 - capacity / offered``.
3. The peer suite's Arrow batch row (benchmarks/components.build_arrow, 8,192-row record
   batches) with a slow consumer for ``--slow-s`` seconds, default queue counts and the
   default byte bound: the peak queued wire bytes (receive queues and overflows, from
   stats) of the phase's two halves.

    python -m benchmarks.overload [--shed-s 30] [--slow-s 20] [--work-us 500]

Ends with ``shed_p99_latency_ms=... shed_target_ms=... shed_fraction_error_pct=...
batch_queued_bytes_growth_pct=...``; writes benchmarks/results/overload.json.
"""

from __future__ import annotations

import argparse
import time

import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import quantile, write_result
from cluster import LocalCluster
from topology import make_config

BASE = {"topology.acker.executors": 0}


def live_run(cluster, mode: str, rate: float, seconds: float, work_us: float,
             target_ms: float) -> dict:
    """One run of live → sink; returns counts, the sink's executed rate over the second
    half, and the latencies of the executed tuples."""
    # batches of 100: a partial batch waits while an earlier one is in flight (the Nagle
    # rule), up to batch size / rate before the queue's clock starts (docs/overload.md)
    conf = {**BASE, "topology.backpressure.overload": mode,
            "topology.shed.latency.target.ms": target_ms, "topology.producer.batch.size": 100}
    h = cluster.submit_topology(f"overload-{mode}", conf,
                                pipeline.build_live(rate, seconds, work_us))
    try:
        assert h.wait(seconds * 4 + 120), h.stats().summary()
        st = h.stats()
        got = h.collected("sink")
    finally:
        cluster.kill_topology(f"overload-{mode}")
    spout, sink = st.component("live")[0], st.component("sink")[0]
    assert sink.shed + sink.executed == spout.emitted, "a tuple was neither run nor shed"
    ts = [v[0] for *_, v in got]
    lat = [v[1] * 1000 for *_, v in got]
    half = max(ts) / 2 if ts else 0
    second = [t for t in ts if t >= half]
    executed_rate = len(second) / (max(ts) - half) if second and max(ts) > half else 0.0
    return {"mode": mode, "offered_per_s": rate, "seconds": seconds,
            "emitted": spout.emitted, "executed": sink.executed, "shed": sink.shed,
            "shed_by_stream": sink.shed_by_stream,
            "executed_per_s_second_half": round(executed_rate, 1),
            "latency_ms_p50": round(quantile(lat, 0.5), 1),
            "latency_ms_p99": round(quantile(lat, 0.99), 1),
            "latency_ms_max": round(max(lat), 1)}


def batch_slow(cluster, seconds: float, work_us: float) -> dict:
    """The Arrow batch row with a slow consumer: queued wire bytes sampled from stats."""
    conf = dict(BASE)  # default queue counts, batch size and byte bound
    h = cluster.submit_topology("overload-batch", conf,
                                pipeline.build_arrow(10**12, 8192, work_us))
    samples = []
    try:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            time.sleep(0.5)
            st = h.stats()
            samples.append({
                "t": round(time.perf_counter() - t0, 2),
                "queued_bytes": sum(t.queued_bytes + t.overflow_bytes for t in st.tasks),
                "queued_tuples": sum(t.queue_population + t.overflow for t in st.tasks)})
        rows_in = sum(t.executed for t in st.component("count"))
        bad = sum(t.bad_frames + t.dropped_messages for t in st.tasks)
    finally:
        cluster.kill_topology("overload-batch")
    assert rows_in > 0 and bad == 0, (rows_in, bad)
    half = len(samples) // 2
    first = max(s["queued_bytes"] for s in samples[:half])
    second = max(s["queued_bytes"] for s in samples[half:])
    return {"seconds": seconds, "work_us_per_row": work_us, "config": conf,
            "batches_counted": rows_in, "bad_frames_or_dropped": bad,
            "first_half_peak_bytes": first, "second_half_peak_bytes": second,
            "growth_pct": round(100 * (second - first) / max(first, 1), 1),
            "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-s", type=float, default=15.0)
    ap.add_argument("--shed-s", type=float, default=30.0)
    ap.add_argument("--slow-s", type=float, default=20.0)
    ap.add_argument("--work-us", type=float, default=500.0)
    ap.add_argument("--overload", type=float, default=10.0)
    ap.add_argument("--target-ms", type=float, default=100.0)
    ap.add_argument("--batch-work-us", type=float, default=40.0)
    args = ap.parse_args()
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)

    # the sink's capacity: offered far more than it can take, under block
    block = live_run(cluster, "block", 1e6 / args.work_us * 5, args.block_s, args.work_us,
                     args.target_ms)
    capacity = block["executed_per_s_second_half"]
    print(f"block: capacity {capacity:,.0f} tuples/s, latency p99 "
          f"{block['latency_ms_p99']:,.0f} ms (held, nothing shed)")
    offered = capacity * args.overload
    shed = live_run(cluster, "shed", offered, args.shed_s, args.work_us, args.target_ms)
    offered_real = shed["emitted"] / args.shed_s
    must_go = max(0.0, 1 - capacity / offered_real)
    shed_share = shed["shed"] / shed["emitted"]
    error_pts = abs(shed_share - must_go) * 100
    print(f"shed: offered {offered_real:,.0f}/s, shed {shed_share:.1%} (must go "
          f"{must_go:.1%}), executed {shed['executed_per_s_second_half']:,.0f}/s, "
          f"latency p50/p99 {shed['latency_ms_p50']}/{shed['latency_ms_p99']} ms "
          f"(target {args.target_ms:g} ms)")
    batch = batch_slow(cluster, args.slow_s, args.batch_work_us)
    print(f"batch row, slow consumer: queued bytes peak {batch['first_half_peak_bytes']:,} "
          f"→ {batch['second_half_peak_bytes']:,} ({batch['growth_pct']:+}%)")
    cluster.shutdown()

    result = {"config": make_config(BASE), "args": vars(args), "block": block,
              "shed": shed, "capacity_per_s": capacity, "offered_per_s": offered_real,
              "shed_share": round(shed_share, 4), "must_go_share": round(must_go, 4),
              "shed_fraction_error_pct": round(error_pts, 2), "batch_slow_consumer": batch}
    write_result("overload", result)
    print(f"shed_p99_latency_ms={shed['latency_ms_p99']} shed_target_ms={args.target_ms:g} "
          f"shed_fraction_error_pct={error_pts:.2f} "
          f"batch_queued_bytes_growth_pct={batch['growth_pct']}")


if __name__ == "__main__":
    main()
