"""The benchmark pipeline's components (pickled by value into the executor actors)."""

from __future__ import annotations

import time

from topology import Bolt, CollectorBolt, Spout, TopologyBuilder


class GenSpout(Spout):
    """Emits (i, "k" + str(i % 1000)) for i in [0, n); with ``msg_ids``, msg_id = i and
    failed ones are counted (the benchmark expects none)."""

    outputs = ("i", "k")

    def __init__(self, n: int, msg_ids: bool = False) -> None:
        self.n = n
        self.msg_ids = msg_ids

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.i = 0
        self.failed = 0

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        if self.msg_ids:
            self.emit((i, "k" + str(i % 1000)), msg_id=i)
        else:
            self.emit((i, "k" + str(i % 1000)))
        self.i = i + 1

    def fail(self, msg_id):
        self.failed += 1


class DoubleBolt(Bolt):
    outputs = ("i", "k")

    def prepare(self, conf, context, collector):
        self.emit = collector.emit

    def execute(self, tup):
        v = tup.values
        self.emit((v[0] * 2, v[1]))


class CountMultiplesOf3(Bolt):
    """Keeps multiples of 3 and counts them per key; emits (k, n) at the end.

    ``work_us`` > 0 busy-waits that long per tuple (the slow consumer of the overload run).
    """

    outputs = ("k", "n")

    def __init__(self, work_us: float = 0.0) -> None:
        self.work_s = work_us / 1e6

    def prepare(self, conf, context, collector):
        self.emit = collector.emit
        self.counts: dict = {}

    def execute(self, tup):
        if self.work_s:
            end = time.perf_counter() + self.work_s
            while time.perf_counter() < end:
                pass
        i, k = tup.values
        if i % 3 == 0:
            self.counts[k] = self.counts.get(k, 0) + 1

    def finish(self):
        for k, n in self.counts.items():
            self.emit((k, n))


def build(n: int, work_us: float = 0.0, msg_ids: bool = False):
    """The benchmark topology: gen → double (shuffle) → count (fields on k) → sink."""
    b = TopologyBuilder()
    b.set_spout("gen", GenSpout(n, msg_ids=msg_ids))
    b.set_bolt("double", DoubleBolt()).shuffle_grouping("gen")
    b.set_bolt("count", CountMultiplesOf3(work_us)).fields_grouping("double", ["k"])
    b.set_bolt("sink", CollectorBolt()).global_grouping("count")
    return b.create_topology()
