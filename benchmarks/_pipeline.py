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


# -- the same pipeline on Arrow record batches (batch bolts; benchmarks/peers.py) ----------


def busy_wait(seconds: float) -> None:
    """Burn CPU for ``seconds`` (a slow consumer that really works, not one that sleeps)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class ArrowGenSpout(Spout):
    """Emits i in [0, n) as record batches of ``batch_rows`` rows (field ``batch``)."""

    outputs = ("batch",)

    def __init__(self, n: int, batch_rows: int = 8192) -> None:
        self.n = n
        self.batch_rows = batch_rows

    def open(self, conf, context, collector):
        import numpy as np
        import pyarrow as pa

        self.emit, self.np, self.pa = collector.emit, np, pa
        self.i = 0

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        j = min(self.n, i + self.batch_rows)
        self.emit((self.pa.record_batch({"i": self.np.arange(i, j, dtype=self.np.int64)}),))
        self.i = j


class ArrowDoubleBolt(Bolt):
    """Vectorised: (i) → (v = 2i, k = i % 1000), one record batch in, one out."""

    outputs = ("batch",)

    def prepare(self, conf, context, collector):
        import pyarrow as pa

        self.emit, self.pa = collector.emit, pa

    def execute(self, tup):
        i = tup.values[0].column(0).to_numpy()
        self.emit((self.pa.record_batch({"v": i * 2, "k": i % 1000}),))


class ArrowCountBolt(Bolt):
    """Vectorised: keeps v % 3 == 0 and counts per k (np.bincount); emits (k, n) per key
    at the end. ``work_us`` > 0 busy-waits that long per row (the slow consumer)."""

    outputs = ("k", "n")

    def __init__(self, work_us: float = 0.0) -> None:
        self.work_s = work_us / 1e6

    def prepare(self, conf, context, collector):
        import numpy as np

        self.emit, self.np = collector.emit, np
        self.counts = np.zeros(1000, dtype=np.int64)

    def execute(self, tup):
        batch = tup.values[0]
        if self.work_s:
            busy_wait(self.work_s * batch.num_rows)
        v, k = batch.column(0).to_numpy(), batch.column(1).to_numpy()
        self.counts += self.np.bincount(k[v % 3 == 0], minlength=1000)

    def finish(self):
        for k, n in enumerate(self.counts.tolist()):
            if n:
                self.emit(("k" + str(k), n))


def build_arrow(n: int, batch_rows: int = 8192, work_us: float = 0.0):
    """The benchmark topology on record batches: gen → double → count → sink."""
    b = TopologyBuilder()
    b.set_spout("gen", ArrowGenSpout(n, batch_rows))
    b.set_bolt("double", ArrowDoubleBolt()).shuffle_grouping("gen")
    b.set_bolt("count", ArrowCountBolt(work_us)).shuffle_grouping("double")
    b.set_bolt("sink", CollectorBolt()).global_grouping("count")
    return b.create_topology()


class LiveSpout(Spout):
    """A source that cannot be slowed down: ``(i, emitted_at)`` at ``rate`` tuples/s for
    ``duration_s`` seconds (``emitted_at``: ``time.time()``), catching up on time it was
    held, as a live feed would; no msg ids."""

    outputs = ("i", "emitted_at")

    def __init__(self, rate: float, duration_s: float) -> None:
        self.rate, self.duration_s = rate, duration_s

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.i = 0
        self.start = None

    def next_tuple(self):
        now = time.monotonic()
        if self.start is None:
            self.start = now
        elapsed = now - self.start
        if elapsed >= self.duration_s:
            raise StopIteration
        due = min(int(elapsed * self.rate) + 1, self.i + 200)
        while self.i < due:
            self.emit((self.i, time.time()))
            self.i += 1


class LatencySink(CollectorBolt):
    """Works ``work_us`` per tuple (busy, or with ``busy=False`` asleep) and keeps, per
    tuple, when it ran (s since its first tuple) and how long after its spout's emit
    (``emitted_at``) it started. Kept in two flat arrays, not one Python object per tuple,
    so the sink's own heap does not grow the garbage collector's pauses into the latency
    it measures; ``received`` gives them as ``CollectorBolt`` items, value ``[t, latency_s]``.
    """

    def __init__(self, work_us: float, busy: bool = True) -> None:
        super().__init__(max_tuples=10_000_000)
        self.work_s = work_us / 1e6
        self.busy = busy

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        from array import array

        self.t0 = None
        self._at, self._lat = array("d"), array("d")

    @property
    def received(self) -> list:
        # (strict=False: a read while execute appends may see one array a value ahead)
        pairs = zip(self._at, self._lat, strict=False)
        return [(self._task, "", 0, "", [t, lat]) for t, lat in pairs]

    @received.setter
    def received(self, _value) -> None:  # (CollectorBolt's prepare resets it)
        pass

    def execute(self, tup):
        now = time.time()
        if self.t0 is None:
            self.t0 = now
        self._at.append(now - self.t0)
        self._lat.append(now - tup.values[1])
        if self.busy:
            busy_wait(self.work_s)
        else:
            time.sleep(self.work_s)


def build_live(rate: float, duration_s: float, work_us: float):
    """live (rate-controlled) → sink (``work_us`` per tuple), shuffle."""
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(rate, duration_s))
    b.set_bolt("sink", LatencySink(work_us)).shuffle_grouping("live")
    return b.create_topology()
