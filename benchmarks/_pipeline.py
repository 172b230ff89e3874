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


class ShareSpout(GenSpout):
    """``GenSpout`` over its task's share of [0, n): task j of m emits i ≡ j (mod m)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.step = len(context.component_tasks[context.component_id])
        self.i = context.task_index

    def next_tuple(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        self.emit((i, "k" + str(i % 1000)))
        self.i = i + self.step


class KeepMultiplesOf3(Bolt):
    """Passes on the tuples whose i is a multiple of 3 (the peer suite's filter)."""

    outputs = ("i", "k")

    def prepare(self, conf, context, collector):
        self.emit = collector.emit

    def execute(self, tup):
        v = tup.values
        if v[0] % 3 == 0:
            self.emit(v)


class CountPerKey(Bolt):
    """Counts its tuples per key; emits (k, n) at the end."""

    outputs = ("k", "n")

    def prepare(self, conf, context, collector):
        self.emit = collector.emit
        self.counts: dict = {}

    def execute(self, tup):
        k = tup.values[1]
        self.counts[k] = self.counts.get(k, 0) + 1

    def finish(self):
        for k, n in self.counts.items():
            self.emit((k, n))


def build_chainable(n: int, parallelism: int = 1):
    """The peer pipeline as Flink would chain it: gen → double → keep joined by
    local_or_shuffle (a chain under ``topology.operator.chaining``), then count (fields on
    k) → sink; ``parallelism`` tasks of each but the sink (each gen task emits its share
    of the ``n`` rows)."""
    b = TopologyBuilder()
    b.set_spout("gen", ShareSpout(n), parallelism)
    b.set_bolt("double", DoubleBolt(), parallelism).local_or_shuffle_grouping("gen")
    b.set_bolt("keep", KeepMultiplesOf3(), parallelism).local_or_shuffle_grouping("double")
    b.set_bolt("count", CountPerKey(), parallelism).fields_grouping("keep", ["k"])
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


class TimedDoubleBolt(Bolt):
    """``(i, emitted_at)`` → ``(2 * i, emitted_at)``: the throughput pipeline's first bolt,
    carrying the spout's emit time on."""

    outputs = ("i", "emitted_at")

    def prepare(self, conf, context, collector):
        self.emit = collector.emit

    def execute(self, tup):
        i, at = tup.values
        self.emit((2 * i, at))


class TimedCountSink(LatencySink):
    """The throughput pipeline's last bolt: counts multiples of 3 per key
    (``"k" + str(i % 1000)``), and keeps each tuple's latency from its spout's emit to
    the start of this ``execute`` as ``LatencySink`` does."""

    def __init__(self) -> None:
        super().__init__(0.0, busy=False)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        now = time.time()
        if self.t0 is None:
            self.t0 = now
        self._at.append(now - self.t0)
        i, at = tup.values
        self._lat.append(now - at)
        if i % 3 == 0:
            k = f"k{i % 1000}"
            self.counts[k] = self.counts.get(k, 0) + 1


def build_live_pipeline(rate: float, duration_s: float):
    """The throughput pipeline fed by a live source: live (``rate`` tuples/s for
    ``duration_s``) → double → count-and-time (``TimedCountSink``), shuffle groupings."""
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(rate, duration_s))
    b.set_bolt("double", TimedDoubleBolt()).shuffle_grouping("live")
    b.set_bolt("sink", TimedCountSink()).shuffle_grouping("double")
    return b.create_topology()


def build_live(rate: float, duration_s: float, work_us: float):
    """live (rate-controlled) → sink (``work_us`` per tuple), shuffle."""
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(rate, duration_s))
    b.set_bolt("sink", LatencySink(work_us)).shuffle_grouping("live")
    return b.create_topology()


# -- paced components on a shared schedule (benchmarks/flow_control.py) -------------------


class StartClock:
    """Seconds since a run's start, the start being a wall time (``time.time()``) that the
    driver writes to the file ``path`` once every task is up, so the schedules of all tasks
    start together however long the submit took (actors start in a few seconds or a dozen
    on a busy 2-core host). A ``LocalCluster``'s tasks share the driver's file system."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.t0: float | None = None
        self._next_check = 0.0

    def elapsed(self) -> float | None:
        """Seconds since the start (negative before it), None while not yet announced (the
        file is read at most every 20 ms until it is)."""
        if self.t0 is None:
            now = time.monotonic()
            if now < self._next_check:
                return None
            self._next_check = now + 0.02
            try:
                with open(self.path) as f:
                    self.t0 = float(f.read())
            except (OSError, ValueError):
                return None
        return time.time() - self.t0


def speed_at(schedule: tuple, t: float | None, before: float = 0.0) -> float:
    """The speed factor of ``schedule`` at ``t`` s since the start.

    ``schedule``: ``((start_s, factor), ...)`` in ascending time; the factor of the last
    entry at or before ``t``, ``before`` earlier or while the start is unknown (None)."""
    factor = before
    if t is None:
        return factor
    for start, f in schedule:
        if start > t:
            break
        factor = f
    return factor


class Pacer:
    """A running schedule of ``rate`` tuples per second. A caller held back (by
    backpressure, or a slow step) builds no debt to catch up later: the schedule never lags
    the clock by more than 10 ms (as benchmarks/flink_experiment.py's)."""

    def __init__(self) -> None:
        self.next_t = time.monotonic()

    def ready(self, rate: float) -> bool:
        """True (and the slot is taken) if a tuple is due now at ``rate``; never blocks."""
        now = time.monotonic()
        if self.next_t < now - 0.01:
            self.next_t = now - 0.01
        if rate <= 0 or self.next_t > now:
            return False
        self.next_t += 1.0 / rate
        return True

    def sleep(self, cap_s: float = 0.005) -> None:
        """Sleep until the next slot, at most ``cap_s`` (so a change of speed shows soon),
        at least 0.5 ms (no spinning at a zero rate)."""
        time.sleep(min(max(self.next_t - time.monotonic(), 0.0005), cap_s))


class PacedSpout(Spout):
    """Emits ``(i, emitted_at)`` (``time.time()``) at ``max_rate × speed_at(schedule)``
    tuples/s from the start announced in ``start_file`` (nothing before it), at most 64 per
    ``next_tuple``; held by backpressure, it drops the missed slots (a producer that can be
    slowed, unlike ``LiveSpout``)."""

    outputs = ("i", "emitted_at")

    def __init__(self, max_rate: float, schedule: tuple, start_file: str) -> None:
        self.max_rate, self.schedule, self.start_file = max_rate, schedule, start_file

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.clock = StartClock(self.start_file)
        self.pacer = Pacer()
        self.i = 0

    def next_tuple(self):
        rate = self.max_rate * speed_at(self.schedule, self.clock.elapsed())
        if rate <= 0:
            time.sleep(0.001)
            return
        for _ in range(64):
            if not self.pacer.ready(rate):
                self.pacer.sleep()
                return
            self.emit((self.i, time.time()))
            self.i += 1


class PacedLatencySink(LatencySink):
    """A consumer whose speed is imposed: at most ``max_rate × speed_at(schedule)`` tuples/s
    (sleeping when ahead; full speed before the start), with ``schedules`` mapping a task
    index to its own schedule (others: ``schedule``). Keeps, per tuple, when it ran (wall s)
    and how long after its spout's emit (``emitted_at``, s), in flat arrays as
    ``LatencySink`` does; ``received`` gives them as ``CollectorBolt`` items, value
    ``[wall_t, latency_s]``."""

    def __init__(self, max_rate: float, schedule: tuple, start_file: str,
                 schedules: dict[int, tuple] | None = None) -> None:
        super().__init__(work_us=0)
        self.max_rate, self.schedule, self.start_file = max_rate, schedule, start_file
        self.schedules = dict(schedules or {})

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)  # (LatencySink's arrays and received)
        self.my_schedule = self.schedules.get(context.task_index, self.schedule)
        self.clock = StartClock(self.start_file)
        self.pacer = Pacer()

    def execute(self, tup):
        now = time.time()
        self._at.append(now)
        self._lat.append(now - tup.values[1])
        sched, clock = self.my_schedule, self.clock
        while not self.pacer.ready(self.max_rate * speed_at(sched, clock.elapsed(), 1.0)):
            self.pacer.sleep()


def build_paced(max_rate: float, producer: tuple, consumer: tuple, start_file: str,
                parallelism: int = 1, grouping: str = "shuffle",
                consumer_max_rate: float | None = None,
                task_schedules: dict[int, tuple] | None = None):
    """producer (``PacedSpout``) → sink (``PacedLatencySink``, ``parallelism`` tasks),
    ``grouping`` "shuffle" or "all". ``producer`` / ``consumer``: ``speed_at`` schedules
    from the start announced in ``start_file`` (see ``StartClock``); the sink's full speed
    is ``consumer_max_rate`` (default ``max_rate``) per task."""
    b = TopologyBuilder()
    b.set_spout("producer", PacedSpout(max_rate, producer, start_file))
    sink = PacedLatencySink(consumer_max_rate or max_rate, consumer, start_file,
                            task_schedules)
    d = b.set_bolt("sink", sink, parallelism_hint=parallelism)
    if grouping == "all":
        d.all_grouping("producer")
    else:
        d.shuffle_grouping("producer")
    return b.create_topology()
