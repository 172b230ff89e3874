"""Flink's producer/consumer backpressure experiment, here (Flink blog, "How Apache Flink™
handles backpressure", 2015).

A paced producer spout runs at 60% of a nominal full speed ``--max-rate`` throughout; the
consumer bolt runs at full speed, then 30%, full, 30%, full (``--phase-seconds`` each).
Backpressure should make the producer follow the consumer: 30% while the consumer is slowed,
its own 60% otherwise. Both rates are sampled every ``--sample-seconds`` from
``handle.stats()`` (the producer's emitted and the consumer's executed counters) and
plotted as % of the full speed over time (benchmarks/results/flink_experiment.png).

Per phase: ``follow_error_pct``, the mean |producer rate − the rate it should have| over the
whole phase after a fixed settling second (benchmarks/_common.follow_error), in points of
the full speed (target ≤ 5); the rate it should have is min(its own 60%, the consumer's
imposed speed). Every phase counts, one that never settles with its full error. And the
reaction time after each change: from the change until the producer's rate is within 5
points of that rate and stays there for the rest of the phase ("never": unsettled). The
queues are small (``--queue`` tuples, batches of ``--batch``), as in Flink's run ("2
buffers of 4096 bytes per task"), so the reaction shows; with the default 32,768-tuple
queue the producer would run on for seconds before the queue fills. Pacing: each side
sleeps when ahead of its schedule, so "full speed" is a rate this 2-core host holds with
room to spare, not the machine's limit.

    python -m benchmarks.flink_experiment [--max-rate 10000] [--phase-seconds 10]

Writes benchmarks/results/flink_experiment.json and .png; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import time

import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import (
    RESULTS,
    SETTLE_S,
    follow_error,
    interval_rates,
    reaction_time,
    write_result,
)
from cluster import LocalCluster
from tests.components import Pacer
from topology import Bolt, Spout, TopologyBuilder

PRODUCER_SPEED = 0.6
CONSUMER_SPEEDS = (1.0, 0.3, 1.0, 0.3, 1.0)


def _speed_at(schedule: tuple, now: float) -> float:
    """The speed factor of ``schedule = (t0, phase_s, speeds)`` at wall time ``now``."""
    t0, phase_s, speeds = schedule
    i = int((now - t0) // phase_s) if now >= t0 else 0
    return speeds[min(max(i, 0), len(speeds) - 1)]


class PacedProducer(Spout):
    outputs = ("i",)

    def __init__(self, max_rate: float, schedule: tuple) -> None:
        self.max_rate, self.schedule = max_rate, schedule

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.pacer = Pacer()
        self.i = 0

    def next_tuple(self):
        rate = self.max_rate * _speed_at(self.schedule, time.time())
        for _ in range(64):  # at most a small burst per call
            if not self.pacer.ready(rate):
                self.pacer.sleep()
                return
            self.emit((self.i,))
            self.i += 1


class PacedConsumer(Bolt):
    def __init__(self, max_rate: float, schedule: tuple) -> None:
        self.max_rate, self.schedule = max_rate, schedule

    def prepare(self, conf, context, collector):
        self.pacer = Pacer()

    def execute(self, tup):
        rate = self.max_rate * _speed_at(self.schedule, time.time())
        while not self.pacer.ready(rate):
            self.pacer.sleep()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rate", type=float, default=10_000, help="full speed, tuples/s")
    ap.add_argument("--phase-seconds", type=float, default=10.0)
    ap.add_argument("--sample-seconds", type=float, default=0.25)
    ap.add_argument("--queue", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    ray.cloudpickle.register_pickle_by_value(pipeline)  # (its Pacer, for the actors)
    cluster = LocalCluster(num_cpus=2)
    t0 = time.time() + 5.0  # time to start the topology before the first phase
    prod_sched = (t0, args.phase_seconds, (PRODUCER_SPEED,) * len(CONSUMER_SPEEDS))
    cons_sched = (t0, args.phase_seconds, CONSUMER_SPEEDS)
    b = TopologyBuilder()
    b.set_spout("producer", PacedProducer(args.max_rate, prod_sched))
    b.set_bolt("consumer", PacedConsumer(args.max_rate, cons_sched)).shuffle_grouping(
        "producer")
    conf = {"topology.acker.executors": 0, "topology.executor.receive.buffer.size": args.queue,
            "topology.producer.batch.size": args.batch}
    handle = cluster.submit_topology("flink-experiment", conf, b.create_topology())
    end = t0 + args.phase_seconds * len(CONSUMER_SPEEDS)
    samples = []  # (s since t0, producer emitted, consumer executed)
    while time.time() < end:
        s = handle.stats()
        samples.append((time.time() - t0, s.total("producer", "emitted"),
                        s.total("consumer", "executed")))
        time.sleep(args.sample_seconds)
    stats = handle.stats()
    cluster.kill_topology("flink-experiment")
    cluster.shutdown()

    scale = 100.0 / args.max_rate  # rates in % of the full speed
    prod_rates = [r for r in interval_rates([(t, p) for t, p, _ in samples], scale)
                  if r.start >= 0]
    cons_rates = [r for r in interval_rates([(t, c) for t, _, c in samples], scale)
                  if r.start >= 0]
    ts = [r.start for r in prod_rates]
    prod = [r.rate for r in prod_rates]
    cons = [r.rate for r in cons_rates]
    phases = []
    for k, speed in enumerate(CONSUMER_SPEEDS):
        start, stop = k * args.phase_seconds, (k + 1) * args.phase_seconds
        target = min(PRODUCER_SPEED, speed) * 100.0  # the rate the producer should have
        steady = [r.rate for r in prod_rates if start + SETTLE_S <= r.start and r.end <= stop]
        phases.append({"phase": k + 1, "consumer_speed_pct": speed * 100,
                       "producer_cap_pct": PRODUCER_SPEED * 100, "target_pct": target,
                       "producer_steady_pct": sum(steady) / len(steady) if steady else None,
                       "follow_error_pct": follow_error(prod_rates, start, stop, target),
                       "reaction_s": reaction_time(prod_rates, start, stop, target, 5.0)})
    worst_err = max(p["follow_error_pct"] for p in phases)
    unsettled = [p["phase"] for p in phases if p["reaction_s"] is None]
    worst_reaction = max((p["reaction_s"] for p in phases if p["reaction_s"] is not None),
                         default=None)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(ts, prod, color="#e6a700", label="producer")
    ax.plot(ts, cons, color="#2a9d3a", label="consumer")
    ax.step([k * args.phase_seconds for k in range(len(phases) + 1)],
            [p["target_pct"] for p in phases] + [phases[-1]["target_pct"]], where="post",
            color="black", lw=0.8, ls=":", label="producer's target")
    for k in range(1, len(CONSUMER_SPEEDS)):
        ax.axvline(k * args.phase_seconds, color="grey", lw=0.5, ls="--")
    ax.set_xlabel("seconds")
    ax.set_ylabel(f"% of full speed ({args.max_rate:,.0f} tuples/s)")
    ax.set_ylim(0, 110)
    ax.set_title("Producer at 60%, consumer 100 / 30 / 100 / 30 / 100 % (storm-on-ray)")
    ax.legend(loc="lower right")
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(RESULTS / "flink_experiment.png", dpi=110)

    write_result("flink_experiment", {
        "max_rate": args.max_rate, "phase_seconds": args.phase_seconds,
        "sample_seconds": args.sample_seconds, "settle_seconds": SETTLE_S, "config": conf,
        "phases": phases,
        "samples": [{"t": t, "producer_pct": p, "consumer_pct": c}
                    for t, p, c in zip(ts, prod, cons, strict=True)],
        "producer_levels": [t.backpressure_level for t in stats.component("producer")],
    })
    for p in phases:
        err = f"{p['follow_error_pct']:.1f}"
        rt = "never" if p["reaction_s"] is None else f"{p['reaction_s']:.2f} s"
        print(f"phase {p['phase']}: consumer {p['consumer_speed_pct']:.0f}%, producer target "
              f"{p['target_pct']:.0f}%, follow error {err} points, reaction {rt}")
    def fmt(x):
        return "none" if x is None else f"{x:.2f}"

    print(f"follow_error_pct={fmt(worst_err)} reaction_s_max={fmt(worst_reaction)} "
          f"unsettled_phases={len(unsettled)}")


if __name__ == "__main__":
    main()
