"""Batch mode (``run --mode batch``): q0, q1 and q2 on Arrow record batches.

The spout (:class:`NexmarkBatchSpout`) runs the columnar generator
(``_columnar.ColumnarGenerator``) in its tasks and emits one tuple per kind per batch of
ids: ``(batch, emitTime)``, ``batch`` a ``pyarrow.RecordBatch`` of that kind's events
(``_model.arrow_schema``), ``emitTime`` the wall-clock emit stamp (epoch ms, float) every
row of it shares. q1 and q2 are ``BatchBolt``\\ s working on whole columns; the sink
(``_queries.ResultFileSink``) writes a batch's columns as they are. The same events as
the per-tuple topologies, checked by the same SQL (docs/nexmark.md).

q3 and q4 keep keyed state per event; they run per tuple only.
"""

from __future__ import annotations

import time

from benchmarks.nexmark._generator import GeneratorConfig, NexmarkGenerator, task_event_count
from benchmarks.nexmark._model import EMIT_TIME
from benchmarks.nexmark._queries import EventSpout
from topology import BatchBolt

#: the field holding a record batch
BATCH = "batch"
#: the fields of every stream in batch mode
BATCH_FIELDS = (BATCH, EMIT_TIME)
#: ids per spout call (all kinds: 46/50 of them are bids)
DEFAULT_BATCH_EVENTS = 8_192
#: what every component of a batch-mode topology sets for itself: a tuple holds thousands
#: of events, so it leaves in a frame of its own (with the default 1,000 tuples a frame,
#: batch q0 ran about 9x slower: docs/nexmark.md, "Batch mode")
BATCH_COMPONENT_CONF = {"topology.producer.batch.size": 1}


class NexmarkBatchSpout(EventSpout):
    """Generates the Nexmark events a batch of ids at a time (``batch_events`` per
    ``next_tuple`` call, fewer when paced) and emits, per kind of ``kinds``, one tuple
    ``(record batch, emitTime)`` on the stream named after the kind. Every kind is
    generated, whatever ``kinds`` says (the source's cost counts all events, as
    Nexmark's and the per-tuple spout's); kinds with no row in a batch are not emitted.

    Task ``k`` of ``n`` takes its blocks of ids as the per-tuple ``NexmarkSpout`` does;
    its position (ids taken) is its checkpointed state.

    Args:
        config: the events; no delays (the columnar path emits in id order).
        kinds: the streams to emit (and declare).
        events_per_s: pace the whole spout (all tasks) at this many events per
            wall-clock second; None emits as fast as it can.
        batch_events: ids per call at most (>= 1).

    Raises:
        ValueError: a delayed config, unknown kinds, a non-positive pace or batch size.

    Attributes (per task, readable with ``handle.task_state``):
        started_at, finished_at: wall-clock time (epoch s) of the first call and of the
            last batch's emit; None until then.
    """

    def __init__(self, config: GeneratorConfig, kinds: tuple[str, ...] = ("bid",),
                 events_per_s: float | None = None,
                 batch_events: int = DEFAULT_BATCH_EVENTS) -> None:
        if config.delayed:
            raise ValueError("batch mode emits in id order: it cannot delay events "
                             "(prob_delayed_event > 0); run the query per tuple")
        if batch_events < 1:
            raise ValueError(f"batch_events must be >= 1, got {batch_events}")
        super().__init__(config, kinds, events_per_s)
        self.batch_events = batch_events

    def get_component_configuration(self) -> dict:
        """:data:`BATCH_COMPONENT_CONF`."""
        return dict(BATCH_COMPONENT_CONF)

    def declare_output_fields(self, declarer) -> None:
        for kind in self.kinds:
            declarer.declare(BATCH_FIELDS, stream_id=kind)

    def open(self, conf, context, collector) -> None:
        from benchmarks.nexmark._columnar import ColumnarGenerator

        self._collector = collector
        tasks = len(context.get_component_tasks(context.component_id))
        self._task, self._tasks = context.task_index, tasks
        self._generator = ColumnarGenerator(NexmarkGenerator(self.config))
        self._count = task_event_count(self.config.events, self._task, tasks)
        self._pace = self.events_per_s / tasks if self.events_per_s else None
        self.taken = 0

    def init_state(self, state) -> None:
        """Go on from the position in ``state`` (the start when empty)."""
        self._state = state
        self.taken = state.get("position", 0)

    def pre_prepare(self, checkpoint_id: int) -> None:
        self._state.put("position", self.taken)

    def next_tuple(self) -> None:
        if self.taken >= self._count:
            raise StopIteration
        now = time.time()
        if self.started_at is None:
            self.started_at = now
        n = min(self.batch_events, self._count - self.taken)
        if self._pace is not None:
            n = min(n, int((now - self.started_at) * self._pace) + 1 - self.taken)
            if n <= 0:
                return
        ids = self._generator.task_ids(self._task, self._tasks, self.taken, self.taken + n)
        batches = self._generator.batches(ids)
        self.taken += n
        stamp = time.time() * 1000.0
        for kind in self.kinds:
            if batches[kind].num_rows:
                self._collector.emit((batches[kind], stamp), kind)
        if self.taken >= self._count:
            self.finished_at = time.time()


class _ArrowBolt(BatchBolt):
    """A batch-mode bolt: one tuple a record batch, each output in a frame of its own."""

    outputs = BATCH_FIELDS

    def get_component_configuration(self) -> dict:
        """:data:`BATCH_COMPONENT_CONF`."""
        return dict(BATCH_COMPONENT_CONF)


class ArrowCurrencyConversion(_ArrowBolt):
    """q1 on record batches: ``(auction, bidder, price * 0.908, dateTime)``, the price a
    float64 (the same IEEE product as the per-tuple bolt's)."""

    def prepare(self, conf, context, collector) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        from benchmarks.nexmark._queries import DOLLAR_TO_EURO

        self._emit, self._pa, self._pc, self._rate = collector.emit, pa, pc, DOLLAR_TO_EURO

    def execute_batch(self, tuples) -> None:
        pa, pc = self._pa, self._pc
        for t in tuples:
            b = t.values[0]
            price = pc.multiply(b.column("price").cast(pa.float64()), self._rate)
            self._emit((pa.record_batch([b.column("auction"), b.column("bidder"), price,
                                         b.column("dateTime")],
                                        names=["auction", "bidder", "price", "dateTime"]),
                        t.values[1]))


class ArrowSelection(_ArrowBolt):
    """q2 on record batches: ``(auction, price)`` of the bids whose auction is a multiple
    of 123; a batch with none is dropped."""

    def prepare(self, conf, context, collector) -> None:
        import pyarrow as pa

        from benchmarks.nexmark._queries import AUCTION_SKIP

        self._emit, self._pa, self._skip = collector.emit, pa, AUCTION_SKIP

    def execute_batch(self, tuples) -> None:
        for t in tuples:
            b = t.values[0]
            auction = b.column("auction")
            keep = auction.to_numpy() % self._skip == 0
            if keep.any():
                mask = self._pa.array(keep)
                self._emit((self._pa.record_batch(
                    [auction.filter(mask), b.column("price").filter(mask)],
                    names=["auction", "price"]), t.values[1]))
