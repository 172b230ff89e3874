"""Acking on and off, side by side in one run: the throughput pipeline (spout → double →
count per key) with every spout tuple tracked by the acker (XOR of 64-bit edge ids,
``auto_ack`` bolts anchoring and acking each input), against the same pipeline with
``topology.acker.executors = 0``.

Complete latency: a spout's emit-to-ack time of each completed tuple tree (the last 1000
of the run). ``topology.max.spout.pending`` bounds the trees in flight in the acking run
(Storm's advice; without it the spout can outrun the acker without bound).

    python benchmarks/acking.py [--tuples 300000] [--max-spout-pending 5000]

Writes benchmarks/results/acking.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray  # noqa: E402
import ray.cloudpickle  # noqa: E402

import benchmarks._pipeline as pipeline  # noqa: E402
from benchmarks._common import quantile, write_result  # noqa: E402
from cluster import LocalCluster  # noqa: E402
from topology import make_config  # noqa: E402


def run(cluster: LocalCluster, n: int, conf: dict, msg_ids: bool) -> dict:
    handle = cluster.submit_topology("acking", conf, pipeline.build(n, msg_ids=msg_ids))
    t0 = time.perf_counter()
    assert handle.wait(900), handle.stats().summary()
    dt = time.perf_counter() - t0
    s = handle.stats()
    (failed,) = handle.task_state("gen", "failed").values()
    got = sum(c for *_, (_, c) in handle.collected("sink"))
    cluster.kill_topology("acking")
    spout = s.component("gen")[0]
    return {"seconds": dt, "tuples_per_s": n / dt, "acked": spout.acked,
            "failed": failed, "counted": got, "latencies_ms": spout.complete_latencies_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=300_000)
    ap.add_argument("--max-spout-pending", type=int, default=5000)
    args = ap.parse_args()
    n = args.tuples
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    off_conf = {"topology.acker.executors": 0}
    on_conf = {"topology.acker.executors": 1,
               "topology.max.spout.pending": args.max_spout_pending}
    expected = sum(1 for i in range(n) if (i * 2) % 3 == 0)
    off = run(cluster, n, off_conf, msg_ids=False)
    on = run(cluster, n, on_conf, msg_ids=True)
    cluster.shutdown()
    assert off["counted"] == expected and on["counted"] == expected, (off, on)
    assert on["acked"] == n and on["failed"] == 0, on
    lat = on["latencies_ms"]
    result = {
        "tuples": n, "config_on": make_config(on_conf), "config_off": make_config(off_conf),
        "ack_off": {k: v for k, v in off.items() if k != "latencies_ms"},
        "ack_on": {k: v for k, v in on.items() if k != "latencies_ms"},
        "acking_ratio": on["tuples_per_s"] / off["tuples_per_s"],
        "ack_latency_ms": {"p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
                           "samples": len(lat)},
    }
    write_result("acking", result)
    print(f"ack off {off['tuples_per_s']:,.0f} tuples/s; ack on {on['tuples_per_s']:,.0f} "
          f"tuples/s ({n:,} acked, 0 failed)")
    print(f"acking_ratio={result['acking_ratio']:.2f} "
          f"ack_latency_ms_p50={result['ack_latency_ms']['p50']:.1f} "
          f"ack_latency_ms_p99={result['ack_latency_ms']['p99']:.1f}")


if __name__ == "__main__":
    main()
