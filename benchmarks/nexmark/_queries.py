"""Nexmark's queries q0-q4 as storm-on-ray topologies, and the spout that generates the
events inside the topology.

Each query reads the streams ``person``, ``auction`` and ``bid`` of one spout
(:class:`NexmarkSpout`: the generator runs in the spout's tasks, which split the event ids)
and ends in one :class:`ResultFileSink` task writing the result's columns, in order:

========  =============================================  ====================================
query     what (Beam's Nexmark names)                    topology
========  =============================================  ====================================
q0        pass-through                                   spout → sink
q1        currency conversion: ``price * 0.908``         spout → convert (chained) → sink
q2        selection: bids with ``auction % 123 == 0``    spout → select (chained) → sink
q3        local item suggestion: sellers in OR, ID, CA   spout → join (fields: person id) →
          of auctions in category 10                     sink
q4        average winning price per category             spout → winning bids (fields:
                                                         auction) → average (fields:
                                                         category) → sink
========  =============================================  ====================================

q3 and q4 keep their keyed state in ``KeyValueState`` (``StatefulBolt``), checkpointed
every ``topology.state.checkpoint.interval.ms``; the spout is a ``StatefulSpout`` (its
position is its state), so a failure rolls back and replays exactly. They write their
final result when the stream ends (``finish``), not a changelog. The SQL that defines each
result is in docs/nexmark.md.

Latency: every tuple carries the spout's wall-clock emit stamp (``emitTime``, epoch ms)
beside ``dateTime``; the component a query names (:attr:`Query.latency_component`) keeps
``now - emitTime`` per tuple in ``latencies_ms``.
"""

from __future__ import annotations

import operator
import time
from array import array
from dataclasses import dataclass
from typing import Any

from benchmarks.nexmark._generator import EventStream, GeneratorConfig, NexmarkGenerator
from benchmarks.nexmark._model import EMIT_TIME, FIELDS, KINDS
from benchmarks.nexmark._parquet import ParquetTable
from benchmarks.nexmark._splits import SplitEvents
from topology import BatchBolt, Bolt, StatefulBolt, StatefulSpout, TopologyBuilder
from topology._splits import SPLITS_KEY, SplitPositions, SplitSpout

#: the result's columns and their Arrow types, in order, per query
RESULT_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "q0": (("auction", "int64"), ("bidder", "int64"), ("price", "int64"),
           ("dateTime", "int64"), ("extra", "string")),
    "q1": (("auction", "int64"), ("bidder", "int64"), ("price", "float64"),
           ("dateTime", "int64")),
    "q2": (("auction", "int64"), ("price", "int64")),
    "q3": (("name", "string"), ("city", "string"), ("state", "string"), ("id", "int64")),
    "q4": (("category", "int64"), ("avg_final", "float64")),
}

#: q1's exchange rate, dollars to euros (Nexmark's)
DOLLAR_TO_EURO = 0.908
#: q2 keeps the bids on every 123rd auction id (Nexmark's ``auctionSkip``)
AUCTION_SKIP = 123
#: q3's seller states and auction category (Nexmark's)
Q3_STATES = frozenset({"OR", "ID", "CA"})
Q3_CATEGORY = 10

_BID = {f: i for i, f in enumerate(FIELDS["bid"] + (EMIT_TIME,))}
_AUCTION = {f: i for i, f in enumerate(FIELDS["auction"] + (EMIT_TIME,))}
_PERSON = {f: i for i, f in enumerate(FIELDS["person"] + (EMIT_TIME,))}


def _now_ms() -> float:
    return time.time() * 1000.0


class EventSpout(StatefulSpout):
    """What both Nexmark spouts share: the config, the kinds emitted, the pace, the
    timestamps of the first call and the last emit.

    Raises:
        ValueError: unknown or no kinds, a non-positive pace.
    """

    def __init__(self, config: GeneratorConfig, kinds: tuple[str, ...] = ("bid",),
                 events_per_s: float | None = None) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown or not kinds:
            raise ValueError(f"kinds must be a non-empty subset of {sorted(KINDS)}, got "
                             f"{list(kinds)}")
        if events_per_s is not None and events_per_s <= 0:
            raise ValueError(f"events_per_s must be > 0 or None, got {events_per_s}")
        self.config = config
        self.kinds = tuple(kinds)
        self.events_per_s = events_per_s
        self.total_items = config.events
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.taken = 0

    def progress(self) -> int:
        """Events of this task out so far (emitted or filtered by kind)."""
        return self.taken


class NexmarkSpout(EventSpout, SplitSpout):
    """Generates the Nexmark events in its tasks and emits them on the streams ``person``,
    ``auction`` and ``bid`` (the event's fields, then ``emitTime``: the wall-clock emit
    time, epoch ms, float).

    Task ``k`` of ``n`` generates the events of its splits' blocks of ids (block ``b`` of
    50 ids in split ``b % S``, ``S`` = ``topology.max.task.parallelism``; task ``k`` owns
    splits ``key_group_range(k, n, S)``: ``_splits.SplitEvents``), so the tasks together
    emit each event of ``0 .. events - 1`` once, and any number of tasks emits the same
    events as ``generate``. Every event is generated, whatever ``kinds`` says (the cost of the
    source counts all of them, as in Nexmark); only those of ``kinds`` are emitted.

    Its position (per split: ids taken, delayed events held) is its checkpointed state,
    so a rollback rewinds it (a ``StatefulSpout``), and a savepoint restores at another
    parallelism (``SplitSpout.redistribute``).

    Args:
        config: the events.
        kinds: the streams to emit (and declare).
        events_per_s: pace the whole spout (all its tasks) at this many events per
            second of wall-clock time; None (default) emits as fast as it can.
        burst: events generated per ``next_tuple`` call at most (each call is one pass
            of the executor's loop).

    Attributes (per task, readable with ``handle.task_state``):
        started_at, finished_at: wall-clock time (epoch s) of the first call and of the
            last event's emit; None until then.
    """

    def __init__(self, config: GeneratorConfig, kinds: tuple[str, ...] = ("bid",),
                 events_per_s: float | None = None, burst: int = 500) -> None:
        super().__init__(config, kinds, events_per_s)
        self.burst = burst

    def declare_output_fields(self, declarer) -> None:
        for kind in self.kinds:
            declarer.declare(FIELDS[kind] + (EMIT_TIME,), stream_id=kind)

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        self._tasks = len(context.get_component_tasks(context.component_id))
        self._task = context.task_index
        self._generator = NexmarkGenerator(self.config)
        self._splits = SplitPositions(conf, self._task, self._tasks, start=(0, ()))
        self._legacy = False  # a state of before splits: EventStream(task, tasks)
        self._stream = SplitEvents(self._generator, self._splits.count, self._splits.owned)
        #: event type → the stream it is emitted on, None for kinds not emitted
        self._stream_of = {t: kind if kind in self.kinds else None for kind, t in KINDS.items()}
        self._per_task_pace = (self.events_per_s / self._tasks if self.events_per_s
                               else None)
        self._exhausted = False
        self.taken = 0  # events out of this task (progress)

    def init_state(self, state) -> None:
        """Go on from the positions in ``state``, per split ``(ids taken, delayed ids
        held)`` (the start when empty); a state of before splits (``position``, ``held``)
        goes on as it was written, at the same parallelism.

        Raises:
            ValueError: the state was written under another split count.
        """
        self._state = state
        self._legacy = "position" in state and SPLITS_KEY not in state
        if self._legacy:
            position, held = state.get("position"), state.get("held", [])
            self._stream = EventStream(self._generator, self._task, self._tasks, position, held)
            self.taken = position - len(held)
        else:
            self._splits.load(state, f"NexmarkSpout task {self._task}")
            self._stream = SplitEvents(self._generator, self._splits.count,
                                       self._splits.owned, self._splits.positions)
            self.taken = self._stream.out()
        self._exhausted = False

    def pre_prepare(self, checkpoint_id: int) -> None:
        if self._legacy:
            self._state.put("position", self._stream.position)
            self._state.put("held", self._stream.held_ids())
            return
        self._splits.positions = self._stream.positions()
        self._splits.save(self._state)

    def next_tuple(self) -> None:
        if self._exhausted:
            raise StopIteration
        now = time.time()
        if self.started_at is None:
            self.started_at = now
        n = self.burst
        if self._per_task_pace is not None:
            due = int((now - self.started_at) * self._per_task_pace) + 1 - self.taken
            if due <= 0:
                return
            n = min(n, due)
        emit, stream_of, stream, clock = (self._collector.emit, self._stream_of, self._stream,
                                          time.time)
        for _ in range(n):
            try:
                _, event = next(stream)
            except StopIteration:
                # the events emitted in this call leave first; the next call ends the stream
                self._exhausted = True
                self.finished_at = time.time()
                return
            self.taken += 1
            stream_id = stream_of[type(event)]
            if stream_id is not None:
                emit((*event, clock() * 1000.0), stream_id)


class CurrencyConversion(Bolt):
    """q1: each bid with its price in euros (``price * 0.908``, a float)."""

    outputs = ("auction", "bidder", "price", "dateTime", EMIT_TIME)

    def prepare(self, conf, context, collector) -> None:
        self._emit = collector.emit

    def execute(self, tup) -> None:
        v = tup.values
        self._emit((v[_BID["auction"]], v[_BID["bidder"]], v[_BID["price"]] * DOLLAR_TO_EURO,
                    v[_BID["dateTime"]], v[_BID[EMIT_TIME]]))


class Selection(Bolt):
    """q2: the bids on auctions whose id is a multiple of 123, as ``(auction, price)``."""

    outputs = ("auction", "price", EMIT_TIME)

    def prepare(self, conf, context, collector) -> None:
        self._emit = collector.emit

    def execute(self, tup) -> None:
        v = tup.values
        auction = v[_BID["auction"]]
        if auction % AUCTION_SKIP == 0:
            self._emit((auction, v[_BID["price"]], v[_BID[EMIT_TIME]]))


class LocalItemSuggestion(StatefulBolt):
    """q3: an incremental join of the auctions in category 10 with their sellers who live
    in OR, ID or CA; emits ``(name, city, state, id)`` (``id`` the auction's) once both
    are in, whichever came first.

    Keyed state (the key is the person id: persons grouped on ``id``, auctions on
    ``seller``): a seller who qualifies is kept as ``{"name", "city", "state"}``; auctions
    whose seller has not come yet as ``{"auctions": [id, ...]}``, joined when the seller
    comes. ``emitTime`` of a result is that of the event that completed it.
    """

    outputs = ("name", "city", "state", "id", EMIT_TIME)

    def prepare(self, conf, context, collector) -> None:
        self._emit = collector.emit

    def init_state(self, state) -> None:
        self._sellers = state

    def execute(self, tup) -> None:
        v = tup.values
        if tup.source_stream == "person":
            if v[_PERSON["state"]] not in Q3_STATES:
                return
            seller = v[_PERSON["id"]]
            person = {"name": v[_PERSON["name"]], "city": v[_PERSON["city"]],
                      "state": v[_PERSON["state"]]}
            waiting = self._sellers.get(seller)
            self._sellers.put(seller, person)
            for auction in (waiting or {}).get("auctions", ()):
                self._emit((person["name"], person["city"], person["state"], auction,
                            v[_PERSON[EMIT_TIME]]))
            return
        if v[_AUCTION["category"]] != Q3_CATEGORY:
            return
        seller, auction = v[_AUCTION["seller"]], v[_AUCTION["id"]]
        known = self._sellers.get(seller)
        if known is not None and "name" in known:
            self._emit((known["name"], known["city"], known["state"], auction,
                        v[_AUCTION[EMIT_TIME]]))
        else:
            waiting = known or {"auctions": []}
            waiting["auctions"].append(auction)
            self._sellers.put(seller, waiting)


class WinningBids(StatefulBolt):
    """q4, first step: per auction, the highest bid whose ``dateTime`` lies within the
    auction's ``[dateTime, expires]``; at the end of the stream emits
    ``(auction, category, final)`` for each auction that has one.

    Keyed state (the key is the auction id: auctions grouped on ``id``, bids on
    ``auction``): ``{"category", "dateTime", "expires", "final"}`` once the auction is in
    (``final`` None while no bid counts); before that, the bids that came early as
    ``{"early": [[price, dateTime], ...]}`` (a bid may name an auction up to Nexmark's
    lead ahead of the newest).

    ``latencies_ms``: per bid, wall-clock ms from the spout's emit to its apply here
    (q4's only result comes at the end, so this is where a bid takes effect).
    """

    outputs = ("auction", "category", "final")

    def prepare(self, conf, context, collector) -> None:
        self._emit = collector.emit
        self.latencies_ms = array("d")

    def init_state(self, state) -> None:
        self._auctions = state

    def execute(self, tup) -> None:
        v = tup.values
        if tup.source_stream == "auction":
            auction = v[_AUCTION["id"]]
            start, expires = v[_AUCTION["dateTime"]], v[_AUCTION["expires"]]
            early = (self._auctions.get(auction) or {}).get("early", ())
            in_time = [price for price, t in early if start <= t <= expires]
            self._auctions.put(auction, {"category": v[_AUCTION["category"]],
                                         "dateTime": start, "expires": expires,
                                         "final": max(in_time) if in_time else None})
            return
        auction, price, t = v[_BID["auction"]], v[_BID["price"]], v[_BID["dateTime"]]
        entry = self._auctions.get(auction)
        if entry is None:
            self._auctions.put(auction, {"early": [[price, t]]})
        elif "early" in entry:
            entry["early"].append([price, t])
            self._auctions.put(auction, entry)
        elif (entry["dateTime"] <= t <= entry["expires"]
              and (entry["final"] is None or price > entry["final"])):
            entry["final"] = price
            self._auctions.put(auction, entry)
        self.latencies_ms.append(_now_ms() - v[_BID[EMIT_TIME]])

    def finish(self) -> None:
        for auction, entry in self._auctions.items():
            if entry.get("final") is not None:
                self._emit((auction, entry["category"], entry["final"]))


class CategoryAverage(StatefulBolt):
    """q4, second step: the mean winning price per category (a float), emitted at the end
    of the stream as ``(category, avg_final)``. Keyed state: category →
    ``{"sum", "count"}``."""

    outputs = ("category", "avg_final")

    def prepare(self, conf, context, collector) -> None:
        self._emit = collector.emit

    def init_state(self, state) -> None:
        self._categories = state

    def execute(self, tup) -> None:
        category, final = tup["category"], tup["final"]
        total = self._categories.get(category) or {"sum": 0, "count": 0}
        total["sum"] += final
        total["count"] += 1
        self._categories.put(category, total)

    def finish(self) -> None:
        for category, total in self._categories.items():
            self._emit((category, total["sum"] / total["count"]))


class _ResultFile:
    """What both result sinks share: the file, the columns, the latencies."""

    outputs = ()

    def __init__(self, path: str, columns: tuple[tuple[str, str], ...],
                 latency: bool = True) -> None:
        self.path = str(path)
        self.columns = tuple(columns)
        self.latency = latency
        self.rows = 0
        self.finished_at: float | None = None

    def declare_output_fields(self, declarer) -> None:
        pass

    def prepare(self, conf, context, collector) -> None:
        import pyarrow as pa

        schema = pa.schema([pa.field(n, getattr(pa, t)(), nullable=False)
                            for n, t in self.columns])
        self._table = ParquetTable(self.path, schema)
        self._index: dict[Any, tuple[list[int], int | None]] = {}  # Fields → positions
        self.latencies_ms = array("d")

    def _positions(self, fields) -> tuple[list[int], int | None]:
        found = self._index.get(fields)
        if found is None:
            names = list(fields)
            missing = [n for n, _ in self.columns if n not in names]
            if missing:
                raise KeyError(f"ResultFileSink needs fields {missing}; the stream has {names}")
            stamp = names.index(EMIT_TIME) if self.latency and EMIT_TIME in names else None
            found = self._index[fields] = ([names.index(n) for n, _ in self.columns], stamp)
        return found

    def finish(self) -> None:
        self.rows = self._table.close()
        self.finished_at = time.time()


class ResultFileSink(_ResultFile, BatchBolt):
    """Writes the tuples it receives to one Parquet file: the columns ``columns`` (name,
    Arrow type name), taken by name from each tuple, in order. Written to
    ``<path>.partial`` a row group at a time and renamed to ``path`` at the end of the
    stream (``finish``), so the file exists only once complete. Run it as one task: two
    tasks would write the same file.

    Not ``topology.ParquetSink``: that one publishes a dataset directory with each
    checkpoint (exactly-once output, visible up to a checkpoint interval later, and it
    turns checkpoints on). A Nexmark result is one file, complete at the end of the
    stream, and its latency is taken where the sink receives a tuple.

    With ``latency=True`` it keeps, per tuple, the wall-clock ms from the tuple's
    ``emitTime`` to the sink taking the batch that holds it, in ``latencies_ms``.

    In batch mode (``_batch``) each tuple is ``(batch, emitTime)``: the record batch's
    columns are written as they are, and every row's latency is its batch's.

    Attributes (readable with ``handle.task_state``):
        rows: rows written; finished_at: wall-clock time (epoch s) the file was complete.

    Raises:
        FileExistsError: ``path`` exists (in ``prepare``, reported as the task's error).
    """

    def execute_batch(self, tuples) -> None:
        now = _now_ms()
        if tuples[0].fields[0] == "batch":  # batch mode: (record batch, emitTime) each
            for t in tuples:
                batch, stamp = t.values
                self._table.extend_arrow(batch)
                if self.latency:
                    self.latencies_ms.extend([now - stamp] * batch.num_rows)
            return
        start = 0
        while start < len(tuples):  # runs of one stream (one Fields object): usually one
            fields = tuples[start].fields
            end = start + 1
            while end < len(tuples) and tuples[end].fields is fields:
                end += 1
            positions, stamp = self._positions(fields)
            values = [t.values for t in tuples[start:end]]
            self._table.extend([[v[i] for v in values] for i in positions])
            if stamp is not None:
                self.latencies_ms.extend([now - v[stamp] for v in values])
            start = end


class ChainedResultFileSink(_ResultFile, Bolt):
    """:class:`ResultFileSink` taking one tuple at a time (a plain ``Bolt``'s
    ``execute``), so that it can be chained into the task that feeds it (operator
    chaining takes no batch bolt: docs/config.md, ``topology.operator.chaining``), as
    Flink chains Nexmark's source, calc and sink. Used where one task feeds it over
    ``local_or_shuffle``; per tuple only."""

    #: rows gathered before they go to the table's columns at once
    ROWS_PER_FLUSH = 4_096

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self._rows: list[tuple] = []
        self._getters: dict[Any, tuple[Any, int | None]] = {}  # Fields → getter, stamp

    def execute(self, tup) -> None:
        found = self._getters.get(tup.fields)
        if found is None:
            positions, stamp = self._positions(tup.fields)
            get = operator.itemgetter(*positions)
            found = self._getters[tup.fields] = (
                get if len(positions) > 1 else (lambda v, g=get: (g(v),)), stamp)
        get, stamp = found
        v = tup.values
        rows = self._rows
        rows.append(get(v))
        if stamp is not None:
            self.latencies_ms.append(_now_ms() - v[stamp])
        if len(rows) >= self.ROWS_PER_FLUSH:
            self._table.extend(list(zip(*rows, strict=True)))
            rows.clear()

    def finish(self) -> None:
        if self._rows:
            self._table.extend(list(zip(*self._rows, strict=True)))
            self._rows.clear()
        super().finish()


@dataclass(frozen=True)
class Query:
    """One of q0-q4: how to build its topology.

    Attributes:
        name: ``q0`` .. ``q4``.
        title: what it computes (Beam's name).
        kinds: the event streams it reads.
        stateful: keeps checkpointed keyed state (q3, q4).
        latency_component: the component whose ``latencies_ms`` measure its latency.
        modes: ``tuple`` (every query), ``batch`` (Arrow record batches: q0-q2).
    """

    name: str
    title: str
    kinds: tuple[str, ...]
    stateful: bool
    latency_component: str
    modes: tuple[str, ...] = ("tuple",)

    def build(self, config: GeneratorConfig, out: str, parallelism: int = 1,
              events_per_s: float | None = None, mode: str = "tuple"):
        """The topology (``StormTopology``) writing this query's result to ``out``:
        spout and query bolts with ``parallelism`` tasks each, one sink task (chained
        into the task feeding it when ``parallelism`` is 1).

        Raises:
            ValueError: a mode this query does not run in.
        """
        if mode not in self.modes:
            raise ValueError(f"{self.name} runs in mode {' or '.join(self.modes)}, not "
                             f"{mode!r}")
        if mode == "batch":
            return self._build_batch(config, out, parallelism, events_per_s)
        b = TopologyBuilder()
        b.set_spout("events", NexmarkSpout(config, self.kinds, events_per_s), parallelism)

        def sink(source: str, stream: str = "default") -> None:
            # one task feeding it: chained into that task (no encoding, no actor call);
            # else every task sends to its one task
            columns, latency = RESULT_COLUMNS[self.name], self.name != "q4"
            if parallelism == 1:
                (b.set_bolt("sink", ChainedResultFileSink(out, columns, latency))
                 .local_or_shuffle_grouping(source, stream))
            else:
                (b.set_bolt("sink", ResultFileSink(out, columns, latency))
                 .global_grouping(source, stream))

        if self.name == "q0":
            sink("events", "bid")
        elif self.name in ("q1", "q2"):
            bolt = CurrencyConversion() if self.name == "q1" else Selection()
            b.set_bolt(self.name, bolt, parallelism).local_or_shuffle_grouping("events", "bid")
            sink(self.name)
        elif self.name == "q3":
            (b.set_bolt("join", LocalItemSuggestion(), parallelism)
             .fields_grouping("events", ["id"], "person")
             .fields_grouping("events", ["seller"], "auction"))
            sink("join")
        else:
            (b.set_bolt("winning_bids", WinningBids(), parallelism)
             .fields_grouping("events", ["id"], "auction")
             .fields_grouping("events", ["auction"], "bid"))
            (b.set_bolt("average", CategoryAverage(), parallelism)
             .fields_grouping("winning_bids", ["category"]))
            sink("average")
        return b.create_topology()

    def _build_batch(self, config: GeneratorConfig, out: str, parallelism: int,
                     events_per_s: float | None):
        from benchmarks.nexmark._batch import (
            ArrowCurrencyConversion,
            ArrowSelection,
            NexmarkBatchSpout,
        )

        b = TopologyBuilder()
        b.set_spout("events", NexmarkBatchSpout(config, self.kinds, events_per_s), parallelism)
        sink = ResultFileSink(out, RESULT_COLUMNS[self.name])
        if self.name == "q0":
            b.set_bolt("sink", sink).global_grouping("events", "bid")
        else:
            bolt = ArrowCurrencyConversion() if self.name == "q1" else ArrowSelection()
            b.set_bolt(self.name, bolt, parallelism).local_or_shuffle_grouping("events", "bid")
            b.set_bolt("sink", sink).global_grouping(self.name)
        return b.create_topology()


QUERIES: dict[str, Query] = {q.name: q for q in (
    Query("q0", "pass-through", ("bid",), False, "sink", ("tuple", "batch")),
    Query("q1", "currency conversion", ("bid",), False, "sink", ("tuple", "batch")),
    Query("q2", "selection", ("bid",), False, "sink", ("tuple", "batch")),
    Query("q3", "local item suggestion", ("person", "auction"), True, "sink"),
    Query("q4", "average price per category", ("auction", "bid"), True, "winning_bids"),
)}
