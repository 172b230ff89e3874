"""Spouts, bolts and pipelines shared by the tests and the benchmarks (pickled by value
into the executor actors): the tests' components first, then the benchmark pipelines
(``build``, ``build_chainable``, ``build_arrow``, ``build_live``, ``build_paced``) that
both the benchmarks and the tests run. Import as ``tests.components``."""

from __future__ import annotations

import collections
import time

from topology import (
    BatchBolt,
    Bolt,
    CollectorBolt,
    Fields,
    Spout,
    StatefulBolt,
    StatefulSpout,
    TopologyBuilder,
    WindowedBolt,
)


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


class AckEveryOtherBolt(Bolt):
    """Storm's AckEveryOtherBolt: acks the tuples with an even seq, leaves the rest."""

    auto_ack = False

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup["seq"] % 2 == 0:
            self.collector.ack(tup)


class SelfAnchorBolt(Bolt):
    """Emits each input twice anchored to the same input twice, then acks it."""

    auto_ack = False
    outputs = ("seq", "key")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit(tup.values, anchors=[tup, tup])
        self.collector.emit(tup.values, anchors=[tup, tup])
        self.collector.ack(tup)


class JoinBolt(Bolt):
    """Holds each seq until it has arrived ``copies`` times, then acks every copy."""

    auto_ack = False

    def __init__(self, copies: int = 2) -> None:
        self.copies = copies

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held: dict = {}
        self.joined: list = []

    def execute(self, tup):
        got = self.held.setdefault(tup["seq"], [])
        got.append(tup)
        if len(got) == self.copies:
            for t in self.held.pop(tup["seq"]):
                self.collector.ack(t)
            self.joined.append(tup["seq"])


class DropOddBolt(Bolt):
    """Passes even seqs on, drops odd ones (and acks every input: auto_ack)."""

    outputs = ("seq", "key")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup["seq"] % 2 == 0:
            self.collector.emit(tup.values)


class HoldBolt(Bolt):
    """Keeps every input and never acks (to fill ``topology.max.spout.pending``)."""

    auto_ack = False

    def prepare(self, conf, context, collector):
        self.held: list = []

    def execute(self, tup):
        self.held.append(tup)


class FailOnceBolt(Bolt):
    """Raises the first time it sees a ``field`` value divisible by ``every``; passes every
    other tuple on unchanged (its output fields are ``fields``)."""

    def __init__(self, every: int, field: str = "seq",
                 fields: tuple = ("seq", "key")) -> None:
        self.every = every
        self.field = field
        self.outputs = tuple(fields)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen: set = set()

    def execute(self, tup):
        seq = tup[self.field]
        if seq % self.every == 0 and seq not in self.seen:
            self.seen.add(seq)
            raise RuntimeError(f"first attempt at seq {seq}")
        self.collector.emit(tup.values)


class TimedSpout(Spout):
    """Emits (seq, key) for seq in [0, n) with msg_id=seq; records when each one was acked
    or failed, in seconds after its emit. Replays nothing; ends when all are resolved."""

    outputs = ("seq", "key")

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0
        self.sent: dict = {}
        self.acked_after: dict = {}
        self.failed_after: dict = {}

    def next_tuple(self):
        if self.i >= self.n:
            raise StopIteration
        self.sent[self.i] = time.monotonic()
        self.collector.emit((self.i, "k"), msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        self.acked_after[msg_id] = time.monotonic() - self.sent[msg_id]

    def fail(self, msg_id):
        self.failed_after[msg_id] = time.monotonic() - self.sent[msg_id]


class TickSpout(TimedSpout):
    """A ``TimedSpout`` of 2 that also emits an untracked tick every ``tick_s`` on stream
    ``tick`` until both tuples are resolved."""

    def __init__(self, tick_s: float) -> None:
        super().__init__(2)
        self.tick_s = tick_s

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("seq", "key"))
        declarer.declare(Fields("n"), stream_id="tick")

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.next_tick = 0.0

    def next_tuple(self):
        if self.i < self.n:
            return super().next_tuple()
        if len(self.acked_after) + len(self.failed_after) == self.n:
            raise StopIteration
        now = time.monotonic()
        if now >= self.next_tick:
            self.next_tick = now + self.tick_s
            self.collector.emit((1,), stream="tick")


class ResetTimeoutBolt(Bolt):
    """Holds seq 0 and seq 1; on each tick resets seq 0's timeout, and acks it after
    ``hold_s``; seq 1 is never acked nor reset."""

    auto_ack = False

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held: dict = {}
        self.resets = 0

    def execute(self, tup):
        if tup.source_stream == "tick":
            self.collector.ack(tup)
            t0 = self.held.get(0)
            if t0 is not None:
                if time.monotonic() - t0[1] >= self.hold_s:
                    self.collector.ack(t0[0])
                    del self.held[0]
                else:
                    self.collector.reset_timeout(t0[0])
                    self.resets += 1
            return
        self.held[tup["seq"]] = (tup, time.monotonic())


class PingBolt(Bolt):
    """One side of a bolt↔bolt cycle: (seq, n) goes on to ``pong`` until n reaches
    ``hops``, then out on stream ``done``."""

    def __init__(self, hops: int) -> None:
        self.hops = hops

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("seq", "n"))
        declarer.declare(Fields("seq", "n"), stream_id="done")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        seq, n = tup.values
        if n >= self.hops:
            self.collector.emit((seq, n), stream="done")
        else:
            self.collector.emit((seq, n))


class PongBolt(Bolt):
    """The other side: sends (seq, n + 1) back to ``ping`` (the edge that closes the cycle)."""

    outputs = ("seq", "n")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        seq, n = tup.values
        self.collector.emit((seq, n + 1))


def _read_lines(path) -> list[str]:
    """The complete lines of a file (a line cut by a kill mid-write is ignored)."""
    try:
        with open(path) as f:
            return [ln[:-1] for ln in f if ln.endswith("\n")]
    except FileNotFoundError:
        return []


class LedgerSpout(Spout):
    """A durable source, as a Kafka spout with committed offsets: ids ``[0, n)`` split
    over the tasks, each emitted as ``(id, key)`` with ``msg_id=id``. An acked id is
    appended to ``<directory>/acked-<task index>.log`` (one write per id: it survives a
    SIGKILL); a restarted task emits every id not in its ledger again. Ends once all its
    ids are acked.

    With ``gated``, an id is emitted only below the number in ``<directory>/gate`` (read
    again at most every 20 ms while the next id waits): the test paces the run by its own
    progress instead of the machine's speed. A failed id is emitted again before any new
    one."""

    outputs = ("id", "key")

    def __init__(self, n: int, directory: str, keys: int = 10, gated: bool = False) -> None:
        self.n, self.directory, self.keys, self.gated = n, directory, keys, gated

    def open(self, conf, context, collector):
        import collections
        import os

        self.collector = collector
        k = len(context.get_component_tasks(context.component_id))
        path = os.path.join(self.directory, f"acked-{context.task_index}.log")
        self.acked = {int(x) for x in _read_lines(path)}
        self.ids = range(context.task_index, self.n, k)
        self.todo = collections.deque(i for i in self.ids if i not in self.acked)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self.gate, self.gate_read = (0 if self.gated else self.n), 0.0

    def _open_gate(self, i: int) -> bool:
        import os
        import time

        now = time.monotonic()
        if now - self.gate_read >= 0.02:
            self.gate_read = now
            lines = _read_lines(os.path.join(self.directory, "gate"))
            self.gate = int(lines[-1]) if lines else 0
        return i < self.gate

    def next_tuple(self):
        if self.todo:
            i = self.todo[0]
            if i >= self.gate and not self._open_gate(i):
                return
            self.todo.popleft()
            self.collector.emit((i, i % self.keys), msg_id=i)
        elif len(self.acked) == len(self.ids):
            raise StopIteration

    def ack(self, msg_id):
        import os

        if msg_id not in self.acked:
            self.acked.add(msg_id)
            os.write(self.fd, b"%d\n" % msg_id)

    def fail(self, msg_id):
        # replays go first: an id below the gate must never wait behind one above it
        if msg_id not in self.acked:
            self.todo.appendleft(msg_id)

    def close(self):
        import os

        os.close(self.fd)


class IdempotentSink(Bolt):
    """Appends ``key,id`` of each input to ``<directory>/sink-<task>-<pid>.log`` before
    acking it; the distinct pairs over all files are the idempotent result."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def prepare(self, conf, context, collector):
        import os

        path = os.path.join(self.directory, f"sink-{context.task_id}-{os.getpid()}.log")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def execute(self, tup):
        import os

        i, key = tup.values  # (id, key), whatever the upstream calls its fields
        os.write(self.fd, b"%d,%d\n" % (key, i))

    def cleanup(self):
        import os

        os.close(self.fd)


class StuckBolt(Bolt):
    """Its first ``execute`` never returns (a hung call to an outside service): the stall
    detector's case."""

    def execute(self, tup):
        import threading

        threading.Event().wait()


class SumBatchBolt(BatchBolt):
    """Records its batch sizes; emits (seq,) of each input anchored to it, so trees
    continue; raises once on the batch holding seq ``fail_at`` (None: never)."""

    outputs = ("seq",)

    def __init__(self, max_batch_size: int | None = None, fail_at: int | None = None):
        self.max_batch_size = max_batch_size
        self.fail_at = fail_at

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sizes: list = []
        self.failed_once = False

    def execute_batch(self, tuples):
        self.sizes.append(len(tuples))
        seqs = [t.values[0] for t in tuples]
        if self.fail_at in seqs and not self.failed_once:
            self.failed_once = True
            raise RuntimeError(f"batch with seq {self.fail_at}")
        for t in tuples:
            self.collector.emit((t.values[0],), anchors=t)


class ArrowBatches:
    """Arrow record batches of several sizes (``rows`` cycles), ``n`` in all."""

    def __init__(self, n: int, rows: tuple[int, ...]) -> None:
        self.n, self.rows = n, rows

    def __iter__(self):
        import pyarrow as pa

        for i in range(self.n):
            k = self.rows[i % len(self.rows)]
            yield (pa.record_batch({"x": list(range(k)), "s": ["v" * 8] * k}),)


class SlowArrowSink(Bolt):
    """Counts the rows of each Arrow batch, slowly (a slow consumer of big tuples)."""

    outputs = ()

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def prepare(self, conf, context, collector):
        self.rows = 0

    def execute(self, tup):
        time.sleep(self.delay_s)
        self.rows += tup.values[0].num_rows


class PoisonBolt(Bolt):
    """Raises ``ValueError("bad row <value>")`` on every tuple whose ``field`` equals
    ``poison`` (a poison tuple); passes the others on. ``attempts`` counts the tuples seen
    per value of ``field``."""

    def __init__(self, poison, field: str = "seq", fields: tuple = ("seq", "key")) -> None:
        self.poison = poison
        self.field = field
        self.outputs = tuple(fields)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.attempts: dict = {}

    def execute(self, tup):
        v = tup[self.field]
        self.attempts[v] = self.attempts.get(v, 0) + 1
        if v == self.poison:
            raise ValueError(f"bad row {v}")
        self.collector.emit(tup.values)


class RejectBolt(Bolt):
    """Fails (``collector.fail``, no exception) every tuple whose ``seq`` is in ``reject``
    and never acks those in ``hold`` (they time out); acks the rest."""

    auto_ack = False

    def __init__(self, reject=(), hold=()) -> None:
        self.reject = frozenset(reject)
        self.hold = frozenset(hold)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.attempts: dict = {}

    def execute(self, tup):
        seq = tup["seq"]
        self.attempts[seq] = self.attempts.get(seq, 0) + 1
        if seq in self.reject:
            self.collector.fail(tup)
        elif seq not in self.hold:
            self.collector.ack(tup)


class RetryingSpout(Spout):
    """A user spout with the dead-letter helper (``RetryService``): emits (seq, key) for
    seq in [0, n) with msg_id=seq, replays a failed tuple until the helper gives it up.
    Records the ``collector.fail_reason`` of every fail (``reasons``), the acked and the
    given-up msg ids."""

    outputs = ("seq", "key")

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, conf, context, collector):
        from topology import RetryService

        self.collector = collector
        self.retries = RetryService(conf, context, collector)
        self.i = 0
        self.pending: dict = {}
        self.replay: list = []
        self.reasons: list = []
        self.acked: list = []
        self.dead: list = []

    def next_tuple(self):
        if self.replay:
            m = self.replay.pop(0)
            self.collector.emit(self.pending[m], msg_id=m)
            return
        if self.i >= self.n:
            raise StopIteration
        self.pending[self.i] = (self.i, f"k{self.i}")
        self.collector.emit(self.pending[self.i], msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        self.retries.remove(msg_id)
        del self.pending[msg_id]
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.reasons.append(self.collector.fail_reason)
        if self.retries.schedule(msg_id, self.pending[msg_id]):
            self.replay.append(msg_id)
        else:
            del self.pending[msg_id]
            self.dead.append(msg_id)


class PhasedBolt(Bolt):
    """Re-emits its input, sleeping per tuple by phase: ``phases`` is a list of
    ``(tuples, delay_s)``; after the last phase it runs without delay (a consumer that
    slows down and speeds up again)."""

    outputs = ("seq", "key")

    def __init__(self, phases: list) -> None:
        self.phases = list(phases)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.n = 0

    def execute(self, tup):
        i = self.n
        for count, delay in self.phases:
            if i < count:
                if delay:
                    time.sleep(delay)
                break
            i -= count
        self.n += 1
        self.collector.emit(tup.values)


class RelayBolt(Bolt):
    """Re-emits its input's ``fields`` unchanged, optionally sleeping ``delay_s`` per
    tuple (the Spark streaming tests' middle bolt)."""

    def __init__(self, fields, delay_s: float = 0.0) -> None:
        self.outputs = tuple(fields)
        self.delay_s = delay_s

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if self.delay_s:
            time.sleep(self.delay_s)
        self.collector.emit(tup.values)


class WindowSpanBolt(WindowedBolt):
    """Emits, per window: its start and end (epoch ms), its tuple count and the ``field``
    values it holds (a list)."""

    outputs = ("start", "end", "count", "values")

    def __init__(self, field: str) -> None:
        self.field = field

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        vals = sorted(t[self.field] for t in window.get())
        self.collector.emit((window.start_timestamp, window.end_timestamp, len(vals), vals))


# -- the benchmark pipelines -------------------------------------------------------------


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


class StatefulWordCount(StatefulBolt):
    """Counts each word in its checkpointed state (Storm's stateful word count); emits
    nothing. ``delay_s`` slows each tuple, so a kill finds tuples in flight."""

    outputs = ()

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def init_state(self, state) -> None:
        self.counts = state

    def execute(self, tup) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        word = tup.values[0]
        self.counts.put(word, self.counts.get(word, 0) + 1)


def words(n: int, distinct: int = 97) -> list[str]:
    """``n`` words over ``distinct`` keys (a fixed, uneven mix)."""
    return [f"w{(i * i + 3 * i) % distinct}" for i in range(n)]


def merged_counts(state: dict) -> collections.Counter:
    """One ``Counter`` of a component's ``{task: {word: count}}`` (``read_state``), checking
    that no word is counted by two tasks (fields grouping gives each word one task)."""
    total: collections.Counter = collections.Counter()
    for counts in state.values():
        assert not set(counts) & set(total), "a word counted by two tasks"
        total.update(counts)
    return total


class ReplayingWordSpout(Spout):
    """A user spout without a position: emits each of its task's share of ``words`` with
    its index as msg id, and emits a failed one again (at-least-once on its own; with
    checkpoints and acking, exactly-once state)."""

    outputs = ("word",)

    def __init__(self, words: list) -> None:
        self.words = words

    def open(self, conf, context, collector):
        n = len(context.get_component_tasks(context.component_id))
        self.mine = list(range(context.task_index, len(self.words), n))
        self.collector = collector
        self.i = 0
        self.replay: list = []
        self.acked = 0
        self.failed = 0

    def next_tuple(self):
        if self.replay:
            m = self.replay.pop(0)
        elif self.i < len(self.mine):
            m = self.mine[self.i]
            self.i += 1
        else:
            raise StopIteration
        self.collector.emit((self.words[m],), msg_id=m)

    def ack(self, msg_id):
        self.acked += 1

    def fail(self, msg_id):
        self.failed += 1
        self.replay.append(msg_id)


class BackOfQueueSpout(Spout):
    """A replaying spout over ``rows`` (each task its share), msg id = the row's index,
    whose ``fail`` re-queues a failed row at the back of its queue, behind every row not
    yet emitted (as a queue-backed source does)."""

    def __init__(self, rows: list, fields: tuple) -> None:
        self.rows = rows
        self.outputs = fields

    def open(self, conf, context, collector):
        from collections import deque

        n = len(context.get_component_tasks(context.component_id))
        self.queue = deque(range(context.task_index, len(self.rows), n))
        self.collector = collector

    def next_tuple(self):
        if not self.queue:
            raise StopIteration
        m = self.queue.popleft()
        self.collector.emit(self.rows[m], msg_id=m)

    def fail(self, msg_id):
        self.queue.append(msg_id)


class KeyCycleSpout(StatefulSpout):
    """Emits ``(f"k{i % keys}",)`` for i in [0, n) across its tasks, then ends; keeps its
    position (a rewindable source for stateful benchmarks)."""

    outputs = ("word",)

    def __init__(self, keys: int, n: int) -> None:
        self.keys, self.n = keys, n

    def open(self, conf, context, collector):
        self.collector = collector
        self.step = len(context.get_component_tasks(context.component_id))
        self.first = self.i = context.task_index

    def init_state(self, state):
        self.state = state
        self.i = state.get("i", self.first)

    def pre_prepare(self, checkpoint_id):
        self.state.put("i", self.i)

    def next_tuple(self):
        if self.i >= self.n:
            raise StopIteration
        self.collector.emit((f"k{self.i % self.keys}",))
        self.i += self.step


class PlainWordCount(Bolt):
    """:class:`StatefulWordCount` without checkpoints (a dict): the benchmarks' baseline."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.counts: dict = {}

    def execute(self, tup):
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1


class TotalsWordCount(StatefulWordCount):
    """A stateful word count that emits its totals, ``(word, count)``, in ``finish()`` (the
    ``Bolt.finish`` docstring's example); ``fail_finish`` times ``finish()`` raises first
    (a bolt whose last step fails); ``delay_s`` per tuple and ``finish_delay_s`` in
    ``finish()`` leave a kill time to land."""

    outputs = ("word", "count")

    def __init__(self, fail_finish: int = 0, delay_s: float = 0.0,
                 finish_delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.fail_finish, self.finish_delay_s = fail_finish, finish_delay_s
        self.finishes = 0

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def finish(self) -> None:
        self.finishes += 1
        if self.finish_delay_s:
            time.sleep(self.finish_delay_s)
        if self.finishes <= self.fail_finish:
            raise RuntimeError(f"finish failure {self.finishes}")
        for word, n in sorted(self.counts.items()):
            self.collector.emit((word, n))


class GatedCountSpout(StatefulSpout):
    """Emits 0, 1, 2 ... (field ``n``) from the position in its state, one per permit of
    ``gate`` (a ``threading.Semaphore`` the test releases; ``open_gate`` lifts it); no
    ``drain()`` of its own, so a drain ends it through the executor."""

    outputs = ("n",)

    def __init__(self) -> None:
        import threading

        self.gate = threading.Semaphore(0)
        self.open_gate = False

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.position = 0

    def init_state(self, state) -> None:
        self.state = state
        self.position = state.get("position", 0)

    def pre_prepare(self, checkpoint_id: int) -> None:
        self.state.put("position", self.position)

    def next_tuple(self) -> None:
        if not self.open_gate and not self.gate.acquire(blocking=False):
            return
        self.collector.emit((self.position,))
        self.position += 1


class FileGatedKeySpout(KeyCycleSpout):
    """:class:`KeyCycleSpout`, but only for i below the number in the file ``gate`` (read
    again every few tuples; missing: 0), so a test can hold it mid-stream in another
    process or on another node."""

    def __init__(self, keys: int, n: int, gate: str) -> None:
        super().__init__(keys, n)
        self.gate = gate

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.limit = 0

    def next_tuple(self):
        if self.i < self.n and self.i >= self.limit:
            try:
                with open(self.gate, encoding="utf-8") as f:
                    self.limit = int(f.read() or 0)
            except (FileNotFoundError, ValueError):
                self.limit = 0
            if self.i >= self.limit:
                time.sleep(0.01)
                return
        super().next_tuple()
