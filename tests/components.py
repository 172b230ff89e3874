"""Spouts and bolts used by the integration tests (pickled by value into the actors)."""

from __future__ import annotations

import time

from topology import Bolt, CollectorBolt, Fields, Spout


class SeqSpout(Spout):
    """Emits (seq, key) for seq in [0, n) per task; key = "k" + seq % keys."""

    outputs = ("seq", "key")

    def __init__(self, n: int, keys: int = 10) -> None:
        self.n = n
        self.keys = keys

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0

    def next_tuple(self):
        if self.i >= self.n:
            raise StopIteration
        self.collector.emit((self.i, "k" + str(self.i % self.keys)))
        self.i += 1


class PassBolt(Bolt):
    """Re-emits its input unchanged, optionally sleeping ``delay_s`` per tuple."""

    outputs = ("seq", "key")

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if self.delay_s:
            time.sleep(self.delay_s)
        self.collector.emit(tup.values)


class CountBolt(Bolt):
    """Counts per key; emits (key, count) for each key from ``finish()``."""

    outputs = ("key", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: dict = {}

    def execute(self, tup):
        k = tup["key"]
        self.counts[k] = self.counts.get(k, 0) + 1

    def finish(self):
        for k, n in sorted(self.counts.items()):
            self.collector.emit((k, n))


class FlakyBolt(Bolt):
    """Raises on every seq divisible by ``every``; passes the others on."""

    outputs = ("seq", "key")

    def __init__(self, every: int) -> None:
        self.every = every

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup["seq"] % self.every == 0:
            raise RuntimeError(f"cannot handle seq {tup['seq']}")
        self.collector.emit(tup.values)


class WrongArityBolt(Bolt):
    """Emits three values on a two-field stream, and on an undeclared stream."""

    outputs = ("seq", "key")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup["seq"] % 2:
            self.collector.emit((1, 2, 3))
        else:
            self.collector.emit((1, 2), stream="nope")


class DirectSplitter(Bolt):
    """Sends each tuple straight to task ``targets[seq % len(targets)]`` with emit_direct."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("seq", "key"), stream_id="direct", direct=True)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.targets = context.get_component_tasks("direct_sink")

    def execute(self, tup):
        t = self.targets[tup["seq"] % len(self.targets)]
        self.collector.emit_direct(t, tup.values, stream="direct")


class SlowCollector(CollectorBolt):
    """A ``CollectorBolt`` that sleeps ``delay_s`` per tuple (a slow consumer)."""

    def __init__(self, delay_s: float, max_tuples: int = 1_000_000) -> None:
        super().__init__(max_tuples)
        self.delay_s = delay_s

    def execute(self, tup) -> None:
        time.sleep(self.delay_s)
        super().execute(tup)


class SilentSpout(Spout):
    """Declares (seq, key) and never emits nor ends: tests inject frames by hand."""

    outputs = ("seq", "key")

    def next_tuple(self):
        return None
