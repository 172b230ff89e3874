"""``DatasetSink``: a topology's output as Arrow tables, for a Ray Dataset or Spark DataFrame;
``DeadLetterSink``: the tuples spouts gave up (``topology.max.replays``).

Only :meth:`DatasetSink.arrow_table` imports ``pyarrow`` (a dependency of ``ray[data]``), so
building a topology stays Ray-free.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from topology._components import Bolt
from topology._dead_letters import DEAD_LETTER_STREAM, DeadLetter
from topology._errors import TopologyError


class DatasetSink(Bolt):
    """A sink that keeps the tuples it receives, column by column, so the driver can turn
    the output into a Ray Dataset (``handle.to_dataset(component_id)``) or, through RayDP,
    a Spark DataFrame (``handle.to_spark(component_id, spark)``): the way back of a
    Spark → topology → Spark pipeline.

    Every input stream must carry the same field names (the first tuple fixes them unless
    ``fields`` is given); a tuple with other fields fails (it replays if acked) and is
    reported as an error naming its stream. Every ``batch_rows`` rows the columns are
    packed into one ``pyarrow.Table`` (types inferred by Arrow), so memory per row is
    Arrow's, not Python objects'. Bounded: beyond ``max_rows`` per task a tuple fails
    with ``OverflowError`` (reported), so a forgotten sink cannot grow without limit.

    Read it after ``handle.wait()`` for the complete output; on a running topology it gives
    what has arrived so far. The rows live in the sink's executor actor: read them before
    ``kill``.

    Args:
        fields: the column names to keep, in order (default: the first tuple's fields).
        batch_rows: rows per packed Arrow table (>= 1).
        max_rows: rows kept per task at most (>= 1).

    Raises:
        TopologyError: bad ``fields``, ``batch_rows`` or ``max_rows``.
    """

    outputs = ()

    def __init__(self, fields: Sequence[str] | None = None, batch_rows: int = 8192,
                 max_rows: int = 10_000_000) -> None:
        if fields is not None and (isinstance(fields, str) or not all(
                isinstance(f, str) for f in fields) or len(set(fields)) != len(fields)):
            raise TopologyError(f"DatasetSink fields must be distinct names, got {fields!r}")
        if batch_rows < 1 or max_rows < 1:
            raise TopologyError(f"DatasetSink needs batch_rows >= 1 and max_rows >= 1, got "
                                f"{batch_rows} and {max_rows}")
        self.fields = tuple(fields) if fields is not None else None
        self.batch_rows = batch_rows
        self.max_rows = max_rows

    def prepare(self, conf, context, collector) -> None:
        self._names: tuple[str, ...] | None = self.fields
        self._cols: list[list] = [[] for _ in self._names] if self._names else []
        self._tables: list = []
        self.rows = 0
        self._checked = None  # the Fields object the last tuple's stream was checked for
        self._index: list[int] = []  # positions of ``fields`` in the last stream's Fields
        self._lock = threading.Lock()  # the executor thread appends, a control call reads

    def execute(self, tup) -> None:
        names = self._names
        if names is None:
            names = self._names = tuple(tup.fields)
            self._cols = [[] for _ in names]
        if self.rows >= self.max_rows:
            raise OverflowError(f"DatasetSink holds max_rows={self.max_rows}")
        if self.fields is not None:
            if tup.fields is not self._checked:  # a stream's Fields object is shared
                try:
                    self._index = [tup.fields.field_index(n) for n in names]
                except KeyError:
                    raise TopologyError(
                        f"DatasetSink needs fields {list(names)}; stream "
                        f"{tup.source_stream!r} of {tup.source_component!r} has "
                        f"{list(tup.fields)}") from None
                self._checked = tup.fields
            values = [tup.values[i] for i in self._index]
        else:
            if tup.fields is not self._checked and tuple(tup.fields) != names:
                raise TopologyError(
                    f"DatasetSink received fields {list(tup.fields)} on stream "
                    f"{tup.source_stream!r} of {tup.source_component!r}, but its first tuple "
                    f"had {list(names)}; give DatasetSink(fields=...) to pick columns")
            self._checked = tup.fields  # a stream's Fields object is shared by its tuples
            values = tup.values
        with self._lock:
            for col, v in zip(self._cols, values, strict=True):
                col.append(v)
            self.rows += 1
            if len(self._cols[0]) >= self.batch_rows:
                self._pack()

    def _pack(self) -> None:
        import pyarrow as pa

        if self._cols and self._cols[0]:
            self._tables.append(pa.table(dict(zip(self._names, self._cols, strict=True))))
            self._cols = [[] for _ in self._names]

    def arrow_table(self):
        """Everything received so far as one ``pyarrow.Table`` (columns in field order;
        types promoted across batches, e.g. int64 with nulls), or ``None`` if nothing
        arrived and no ``fields`` were given. Safe to call while the topology runs."""
        import pyarrow as pa

        with self._lock:
            self._pack()
            tables = list(self._tables)
        if not tables:
            if self._names is None:
                return None
            return pa.table({n: pa.array([], pa.null()) for n in self._names})
        if len(tables) == 1:
            return tables[0]
        return pa.concat_tables(tables, promote_options="default")


class DeadLetterSink(Bolt):
    """Keeps the dead letters it receives, for ``handle.dead_letters()``: the spout tuples
    that failed ``1 + topology.max.replays`` times (see ``topology/_dead_letters.py``).

    With ``topology.max.replays`` set, the submit's plan adds one as the system bolt
    ``__dead_letters`` (one task), subscribed to the dead-letter stream of every spout
    whose dead letters no user bolt takes; subscribe one yourself (``shuffle_grouping(spout,
    DEAD_LETTER_STREAM)``) to keep them elsewhere, or a ``DatasetSink`` to have them as a
    table. Each is kept as a :class:`~topology.DeadLetter`. Bounded: beyond ``max_letters``
    per task a dead letter raises ``OverflowError`` (reported, counted in errors), so a
    poison stream cannot grow memory without limit. The letters live in the sink's actor:
    read them before ``kill``.

    Args:
        max_letters: dead letters kept per task at most (>= 1).

    Raises:
        TopologyError: ``max_letters`` < 1; a tuple from another stream (reported when it
            arrives).
    """

    outputs = ()

    def __init__(self, max_letters: int = 100_000) -> None:
        if max_letters < 1:
            raise TopologyError(f"DeadLetterSink needs max_letters >= 1, got {max_letters}")
        self.max_letters = max_letters
        self.received: list[DeadLetter] = []

    def prepare(self, conf, context, collector) -> None:
        self.received = []

    def execute(self, tup) -> None:
        if tup.is_tick():  # (topology.tick.tuple.freq.secs set for the whole topology)
            return
        if tup.source_stream != DEAD_LETTER_STREAM:
            raise TopologyError(f"DeadLetterSink takes stream {DEAD_LETTER_STREAM!r}, got "
                                f"stream {tup.source_stream!r} of {tup.source_component!r}")
        if len(self.received) >= self.max_letters:
            raise OverflowError(f"DeadLetterSink holds max_letters={self.max_letters}")
        spout, msg_id, values, reason, attempts = tup.values
        self.received.append(DeadLetter(spout, tup.source_task, msg_id, values, reason,
                                        attempts))
