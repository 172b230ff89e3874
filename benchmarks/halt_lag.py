"""Halt-lag between two workers on one host: the time from a task becoming backlogged to
its upstream senders in another worker holding their sends.

Storm 2.0's design quotes 1-2 ms for two workers on one host
(seeds/storm2-backpressure-model.txt §2); our target is p50 <= 5 ms.

Topology: spouts ``a_gen`` and ``c_gen`` in worker 0 feed ``b_slow`` in worker 1, which
busy-waits ``--work-us`` per tuple, so it is backlogged again and again: its receive queue
fills, arrivals go to its overflow, the transfer actor of worker 1 sends a
``BackPressureStatus``, worker 0's transfer actor forwards it to the spouts, and each spout
records ``now - since`` when its flag for the task turns on (wall clock, one host). The
backpressure-check timer clears the task once its overflow drains, and the cycle repeats.

How the lag is measured: the receiving executor stamps ``since`` (``time.time()``) when the
first tuple goes to its overflow; the status carries it; a sender computes the lag when it
applies the status. Both clocks are this machine's.

    python benchmarks/halt_lag.py [--seconds 30] [--work-us 100]

Writes benchmarks/results/halt_lag.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray  # noqa: E402
import ray.cloudpickle  # noqa: E402

import benchmarks._pipeline as pipeline  # noqa: E402
from benchmarks._common import quantile, write_result  # noqa: E402
from cluster import LocalCluster  # noqa: E402
from topology import TopologyBuilder, make_config  # noqa: E402


def _p50(xs: list[float]) -> float | None:
    return quantile(xs, 0.5) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--work-us", type=float, default=100.0)
    ap.add_argument("--spouts", type=int, choices=(1, 2), default=1,
                    help="spouts in worker 0 (each one a busy process on this 2-core host)")
    args = ap.parse_args()
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    b = TopologyBuilder()
    b.set_spout("a_gen", pipeline.GenSpout(10**12))  # task 1, worker 0
    slow = b.set_bolt("b_slow", pipeline.CountMultiplesOf3(args.work_us)).shuffle_grouping(
        "a_gen")  # task 2, worker 1
    if args.spouts == 2:
        b.set_spout("c_gen", pipeline.GenSpout(10**12))  # task 3, worker 0
        slow.shuffle_grouping("c_gen")
    conf = {"topology.workers": 2, "topology.executor.receive.buffer.size": 4096,
            "topology.producer.batch.size": 256, "topology.acker.executors": 0}
    handle = cluster.submit_topology("halt-lag", conf, b.create_topology())
    assert all(w == (t != 2) * 0 + (t == 2) for t, w in handle.stats().assignment.items())
    time.sleep(args.seconds)  # the run itself: the samples accumulate in the executors
    s = handle.stats()
    cluster.kill_topology("halt-lag")
    cluster.shutdown()
    lags = [x for t in s.tasks for x in t.halt_lags_ms]
    slow = s.component("b_slow")[0]
    if not lags:
        raise SystemExit("no halt-lag samples: the consumer never became backlogged")
    result = {
        "seconds": args.seconds, "consumer_work_us_per_tuple": args.work_us,
        "config": make_config(conf), "samples": len(lags),
        "halt_lag_ms": {"p50": quantile(lags, 0.5), "p90": quantile(lags, 0.9),
                        "p99": quantile(lags, 0.99), "max": max(lags),
                        "mean": statistics.fmean(lags)},
        "backlog_episodes_reports": slow.bp_reports,
        "overflowed_total": slow.overflowed_total,
        "statuses_sent": s.workers[1].statuses_sent,
        # the same lag seen at the hops on the way: the receiving worker's transfer actor
        # (report from the executor) and the sending worker's (status from the peer)
        "lag_at_receiving_transfer_ms_p50": _p50(s.workers[1].counters["report_lags_ms"]),
        "lag_at_sending_transfer_ms_p50": _p50(s.workers[0].counters["status_lags_ms"]),
        "all_lags_ms": sorted(round(x, 3) for x in lags),
    }
    write_result("halt_lag", result)
    h = result["halt_lag_ms"]
    print(f"{len(lags)} halt-lag samples over {args.seconds:.0f} s: p50 {h['p50']:.2f} ms, "
          f"p90 {h['p90']:.2f} ms, p99 {h['p99']:.2f} ms, max {h['max']:.2f} ms; "
          f"{result['statuses_sent']} statuses sent; p50 on the way: at the receiving "
          f"transfer actor {result['lag_at_receiving_transfer_ms_p50']} ms, at the sending "
          f"one {result['lag_at_sending_transfer_ms_p50']} ms")
    print(f"halt_lag_ms_p50={h['p50']:.2f} halt_lag_ms_p99={h['p99']:.2f} samples={len(lags)}")


if __name__ == "__main__":
    main()
