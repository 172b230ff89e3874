"""Storm's perf topologies (storm-perf), here, side by side in one run.

* ``ConstSpoutNullBoltTopo``: a spout emitting one constant string → a bolt that drops it.
* ``ConstSpoutIdBoltNullBoltTopo``: the same with a pass-through bolt between, with and
  without ackers (the spout emits with msg ids when acking).
* ``BackPressureTopo``: a spout at full speed → a bolt 10× slower (busy work per tuple); the
  spout must follow the bolt with the queues bounded (peak queued ≤ the bound).
* ``LowThroughputTopo``: a spout at ``--low-rate`` tuples/s (500, as in Storm's regression
  report, PR 2241) → a bolt measuring the emit-to-execute latency. Storm 2.0 first showed
  seconds there; the 1 ms flush interval must keep it to a few ms.

Rates are the sink's executed count over ``--seconds`` after a 2 s warm-up (stats
samples). Latency: the spout stamps ``time.time()`` into the tuple, the sink subtracts
(one host, one clock).

    python -m benchmarks.storm_perf [--seconds 10] [--low-rate 500]

Writes benchmarks/results/storm_perf.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import time
from collections import deque

from benchmarks._common import quantile, write_result
from cluster import LocalCluster
from topology import Bolt, Spout, TopologyBuilder


class ConstSpout(Spout):
    outputs = ("str",)

    def __init__(self, msg_ids: bool = False) -> None:
        self.msg_ids = msg_ids

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.i = 0

    def next_tuple(self):
        if self.msg_ids:
            self.i += 1
            self.emit(("some data",), msg_id=self.i)
        else:
            self.emit(("some data",))


class IdBolt(Bolt):
    outputs = ("str",)

    def prepare(self, conf, context, collector):
        self.emit = collector.emit

    def execute(self, tup):
        self.emit(tup.values)


class DevNullBolt(Bolt):
    def execute(self, tup):
        pass


class SlowBolt(Bolt):
    """Busy-waits ``work_us`` per tuple."""

    def __init__(self, work_us: float) -> None:
        self.work_s = work_us / 1e6

    def execute(self, tup):
        end = time.perf_counter() + self.work_s
        while time.perf_counter() < end:
            pass


class TimedLowRateSpout(Spout):
    """Emits ``(time.time(),)`` at ``rate`` tuples per second."""

    outputs = ("ts",)

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.next_t = time.monotonic()

    def next_tuple(self):
        now = time.monotonic()
        if now < self.next_t:
            return  # the spout wait strategy idles the executor
        self.next_t = max(self.next_t + 1.0 / self.rate, now - 0.01)
        self.emit((time.time(),))


class LatencyBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.latencies_ms: deque = deque(maxlen=100_000)

    def execute(self, tup):
        self.latencies_ms.append((time.time() - tup.values[0]) * 1000.0)


def _rate(cluster, name, topo, conf, sink, seconds) -> dict:
    handle = cluster.submit_topology(name, conf, topo)
    try:
        time.sleep(2.0)
        s0, t0 = handle.stats(), time.monotonic()
        time.sleep(seconds)
        s1, t1 = handle.stats(), time.monotonic()
    finally:
        cluster.kill_topology(name)
    n = s1.total(sink, "executed") - s0.total(sink, "executed")
    queued = max(t.queue_population + t.overflow for t in s1.tasks)
    return {"tuples_per_s": n / (t1 - t0), "queued_max": queued,
            "queue_capacity": s1.tasks[0].queue_capacity,
            "spout_backpressure_level": s1.component("spout")[0].backpressure_level}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--low-rate", type=float, default=500.0)
    args = ap.parse_args()
    cluster = LocalCluster(num_cpus=2)
    off = {"topology.acker.executors": 0}
    results = {}

    b = TopologyBuilder()
    b.set_spout("spout", ConstSpout())
    b.set_bolt("null", DevNullBolt()).shuffle_grouping("spout")
    results["ConstSpoutNullBoltTopo"] = _rate(cluster, "csnb", b.create_topology(), off,
                                              "null", args.seconds)
    for acking in (False, True):
        b = TopologyBuilder()
        b.set_spout("spout", ConstSpout(msg_ids=acking))
        b.set_bolt("id", IdBolt()).shuffle_grouping("spout")
        b.set_bolt("null", DevNullBolt()).shuffle_grouping("id")
        conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 20_000} \
            if acking else off
        key = "ConstSpoutIdBoltNullBoltTopo" + ("_ackers" if acking else "")
        results[key] = _rate(cluster, "csibnb", b.create_topology(), conf, "null",
                             args.seconds)
    b = TopologyBuilder()
    b.set_spout("spout", ConstSpout())
    b.set_bolt("slow", SlowBolt(work_us=100)).shuffle_grouping("spout")
    results["BackPressureTopo"] = _rate(cluster, "bp", b.create_topology(), off, "slow",
                                        args.seconds)

    b = TopologyBuilder()
    b.set_spout("spout", TimedLowRateSpout(args.low_rate))
    b.set_bolt("latency", LatencyBolt()).shuffle_grouping("spout")
    handle = cluster.submit_topology("low", off, b.create_topology())
    try:
        time.sleep(2.0 + args.seconds)
        (lat,) = handle.task_state("latency", "latencies_ms").values()
        s = handle.stats()
    finally:
        cluster.kill_topology("low")
    cluster.shutdown()
    lat = lat[len(lat) // 5:]  # drop the warm-up
    results["LowThroughputTopo"] = {
        "rate": args.low_rate, "executed": s.total("latency", "executed"),
        "latency_ms_p50": quantile(lat, 0.5), "latency_ms_p99": quantile(lat, 0.99),
        "latency_ms_max": max(lat), "samples": len(lat)}

    bp = results["BackPressureTopo"]
    assert bp["queued_max"] <= 2 * bp["queue_capacity"], bp
    write_result("storm_perf", {"seconds": args.seconds, "results": results})
    for k, v in results.items():
        print(f"{k:>34}: " + ", ".join(
            f"{a}={b:,.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))
    print(f"const_null_tps={results['ConstSpoutNullBoltTopo']['tuples_per_s']:.0f} "
          f"const_id_null_tps={results['ConstSpoutIdBoltNullBoltTopo']['tuples_per_s']:.0f} "
          f"const_id_null_ackers_tps="
          f"{results['ConstSpoutIdBoltNullBoltTopo_ackers']['tuples_per_s']:.0f} "
          f"backpressure_tps={bp['tuples_per_s']:.0f} "
          f"backpressure_queued_max={bp['queued_max']} "
          f"low_rate_latency_ms_p50={results['LowThroughputTopo']['latency_ms_p50']:.2f} "
          f"low_rate_latency_ms_p99={results['LowThroughputTopo']['latency_ms_p99']:.2f}")


if __name__ == "__main__":
    main()
