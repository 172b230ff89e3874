"""Parquet out: rows appended as Python values, written a row group at a time with
``pyarrow.parquet.ParquetWriter``; the generator's three files (``generate``).

A file is written to ``<path>.partial`` and renamed to ``path`` when closed, so a run that
stops half way never leaves a file that looks complete.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from benchmarks.nexmark._generator import EventStream, GeneratorConfig, NexmarkGenerator
from benchmarks.nexmark._model import KINDS, arrow_schema

#: rows per row group: bounds the Python lists held before each write
ROW_GROUP_ROWS = 65_536

#: the generator's output: one file per event kind
DATA_FILES = tuple(f"{kind}.parquet" for kind in KINDS)


class ParquetTable:
    """Collects rows for one Parquet file of ``schema`` (a ``pyarrow.Schema``).

    Not thread-safe. Memory: at most ``row_group_rows`` rows as Python values.

    Args:
        path: the file to write; must not exist.
        schema: the columns, in order, with their Arrow types.
        row_group_rows: rows per row group (>= 1).

    Raises:
        FileExistsError: ``path`` exists (when the table is made).
    """

    def __init__(self, path: str | os.PathLike, schema, row_group_rows: int = ROW_GROUP_ROWS
                 ) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists; choose another path or delete it")
        self.schema = schema
        self.row_group_rows = row_group_rows
        self.rows = 0
        self._partial = self.path.with_name(self.path.name + ".partial")
        self._columns: list[list] = [[] for _ in schema.names]
        self._batches: list = []  # record batches waiting for a row group
        self._batched_rows = 0
        self._writer = None

    def append(self, row: Sequence) -> None:
        """Add one row (one value per column, in order); writes a row group when full."""
        for column, value in zip(self._columns, row, strict=True):
            column.append(value)
        if len(self._columns[0]) >= self.row_group_rows:
            self._write()

    def extend(self, columns: Sequence[Sequence]) -> None:
        """Add rows given column by column (one sequence per column, in order, all of one
        length); writes a row group when full."""
        for column, values in zip(self._columns, columns, strict=True):
            column.extend(values)
        if len(self._columns[0]) >= self.row_group_rows:
            self._write()

    def extend_arrow(self, batch) -> None:
        """Add the rows of a ``pyarrow.RecordBatch`` holding (at least) this table's
        columns by name, of its types; they are written after the rows appended before
        them, a row group once ``row_group_rows`` are waiting.

        Raises:
            KeyError: a column of the schema is missing from ``batch``.
        """
        import pyarrow as pa

        if self._columns[0]:
            self._write()
        self._batches.append(pa.record_batch([batch.column(n) for n in self.schema.names],
                                             schema=self.schema))
        self._batched_rows += batch.num_rows
        if self._batched_rows >= self.row_group_rows:
            self._write_batches()

    def _open(self) -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(self._partial, self.schema)

    def _write_batches(self) -> None:
        import pyarrow as pa

        self._open()
        self._writer.write_table(pa.Table.from_batches(self._batches, schema=self.schema))
        self.rows += self._batched_rows
        self._batches, self._batched_rows = [], 0

    def _write(self) -> None:
        import pyarrow as pa

        if self._batches:
            self._write_batches()
        self._open()
        batch = pa.record_batch([pa.array(c, type=f.type)
                                 for c, f in zip(self._columns, self.schema, strict=True)],
                                schema=self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows
        self._columns = [[] for _ in self.schema.names]

    def close(self) -> int:
        """Write what is left, close the file and give it its name; returns its rows.
        An empty table still gets a file (with the schema and no rows)."""
        if self._batches and not self._columns[0]:
            self._write_batches()
        if self._columns[0] or self._writer is None:
            self._write()
        self._writer.close()
        os.replace(self._partial, self.path)
        return self.rows


def write_events(config: GeneratorConfig, out_dir: str | os.PathLike) -> dict[str, int]:
    """Write every event of ``config`` to ``person.parquet``, ``auction.parquet`` and
    ``bid.parquet`` in ``out_dir`` (made if missing), each in arrival order (one task):
    by the columnar generator, a batch of ids at a time, or with delays (whose order
    only the per-event stream gives) one event at a time. Blocks until written.

    Returns:
        Rows written per kind.

    Raises:
        FileExistsError: ``out_dir`` already holds one of the three files.
    """
    out = Path(out_dir)
    taken = [name for name in DATA_FILES if (out / name).exists()]
    if taken:
        raise FileExistsError(f"{out} already holds {', '.join(taken)}; give an empty or new "
                              f"directory")
    out.mkdir(parents=True, exist_ok=True)
    if not config.delayed:
        import pyarrow.parquet as pq

        from benchmarks.nexmark._columnar import ColumnarGenerator

        rows = dict.fromkeys(KINDS, 0)
        writers = {kind: pq.ParquetWriter(out / f"{kind}.parquet.partial", arrow_schema(kind))
                   for kind in KINDS}
        for _, batches in ColumnarGenerator(NexmarkGenerator(config)).task_batches(
                batch_events=ROW_GROUP_ROWS):
            for kind, batch in batches.items():
                writers[kind].write_batch(batch)
                rows[kind] += batch.num_rows
        for kind, writer in writers.items():
            writer.close()
            os.replace(out / f"{kind}.parquet.partial", out / f"{kind}.parquet")
        return rows
    tables = {kind: ParquetTable(out / f"{kind}.parquet", arrow_schema(kind)) for kind in KINDS}
    by_type = {t: tables[kind] for kind, t in KINDS.items()}
    for _, event in EventStream(NexmarkGenerator(config)):
        by_type[type(event)].append(event)
    return {kind: table.close() for kind, table in tables.items()}
