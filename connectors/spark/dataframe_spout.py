"""``DataFrameSpout``: a Spark DataFrame (through RayDP) as a finite spout.

Only this module touches ``ray``/``raydp``, and only when a ``DataFrameSpout`` is built.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import warnings
from collections.abc import Iterator
from typing import Any

from connectors.spark.arrow_rows import arrow_rows
from topology import RetryService, TopologyError
from topology._splits import SPLITS_KEY, SplitPositions, SplitSpout, redistribute_splits

#: the state key of the frame's block count (positions name blocks)
BLOCKS_KEY = "blocks"

#: A DataFrameSpout's flush interval (ms): see DataFrameSpout.get_component_configuration
FLUSH_INTERVAL_MS = 10


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def raydp_internals_quiet() -> Iterator[None]:
    """Hide, while RayDP converts a frame (or releases a micro-batch's cached copy), the
    two deprecation notices its own code raises (``DataFrame.sql_ctx`` from pyspark,
    ``ray.worker.global_worker`` from Ray): they are about RayDP 1.6.5's internals, not
    the caller's code, and a user can do nothing about them. Every other warning and log
    line still shows. Python's warning filters are process-wide, so the same notice from
    another thread during the call is hidden too; nothing else is."""
    ray_logger = logging.getLogger("ray")
    drop = _DropMessage("`ray.worker.")
    ray_logger.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"DataFrame\.sql_ctx is an internal",
                                    category=UserWarning)
            yield
    finally:
        ray_logger.removeFilter(drop)


class DataFrameSpout(SplitSpout):
    """Emits the rows of a Spark DataFrame as tuples whose fields are its column names.

    Its position is its checkpointed state: in a stateful topology a rollback rewinds it
    there. The frame's blocks are divided into splits (``topology/_splits.py``): block
    ``b`` is in split ``b % S`` (``S``: ``topology.max.task.parallelism``, 128 when
    unset; with fewer than ``S`` blocks, split ``b * S // B`` of ``B``, so that few blocks
    spread over the tasks), and the state holds, per split, the blocks done and the items
    emitted of the next, so a savepoint restores at another parallelism
    (``SplitSpout.redistribute``). The state records the frame's block count ``B`` too:
    positions name blocks, so a restore whose frame has another block count (another
    partitioning) is refused rather than reading other blocks.

    On the driver, the constructor hands the frame to RayDP (``spark_dataframe_to_ray_dataset``,
    what ``ray.data.from_spark`` calls), which
    writes it into Ray's object store as Arrow blocks; only the block references travel to
    the spout tasks, never the rows, so the frame is never collected on the driver. Each task
    fetches one block at a time (task *k* of *n* reads the blocks of its splits,
    ``key_group_range(k, n, S)``, in order) and emits its rows one per ``next_tuple`` call,
    then ends the stream.

    Value types after the trip: Spark timestamps become ``datetime.datetime``, dates
    ``datetime.date``, decimals ``decimal.Decimal``, nulls ``None`` (Arrow's ``to_pylist``;
    a UTC timestamp's zone is ``datetime.timezone.utc``, see connectors/spark/arrow_rows.py).

    Args:
        df: a DataFrame of a Spark session started by RayDP (``cluster.start_spark``).
        parallelism: number of Ray blocks to ask RayDP for (the frame is repartitioned to
            it; ``None``: one per Spark partition).
        msg_ids: emit each row with a ``msg_id`` (its running number in this task), so
            acking tracks it; a failed or timed-out row is emitted again, before new rows,
            until acked, or with ``topology.max.replays`` = N until its (1 + N)-th
            failure, when it goes to the dead letters instead
            (:class:`~topology.RetryService`). Rows in flight are kept until acked (bound
            them with ``topology.max.spout.pending``). With ``arrow_batches``, per record
            batch.
        arrow_batches: emit Arrow record batches instead of rows: one tuple per batch of
            at most ``batch_rows`` rows, with the single field ``batch`` (a
            ``pyarrow.RecordBatch``, which the wire carries as Arrow IPC), for bolts that
            work on whole columns (numpy / ``pyarrow.compute``), paying the per-tuple cost
            once per batch. The queues' byte bound
            (``topology.executor.receive.buffer.bytes``) holds their memory with the
            default sizes (``benchmarks/overload.py``, batch row; docs/overload.md).
        batch_rows: rows per record batch with ``arrow_batches`` (>= 1).

    Attributes:
        total_rows: the frame's row count (from block metadata; no extra Spark job); also
            ``total_items``, so ``handle.progress()`` and ``wait(progress=True)`` show rows
            consumed of the total.

    Raises:
        TopologyError: ``df`` is not a Spark DataFrame, or RayDP is not installed.
    """

    def __init__(self, df: Any, parallelism: int | None = None, msg_ids: bool = False,
                 arrow_batches: bool = False, batch_rows: int = 8192) -> None:
        try:
            from raydp.spark import spark_dataframe_to_ray_dataset
        except ImportError as e:
            raise TopologyError(f"DataFrameSpout needs RayDP: {e}; install the Spark extra: "
                                f"pip install 'storm-on-ray[spark]'") from e
        if not hasattr(df, "columns") or not hasattr(df, "schema"):
            raise TopologyError(f"DataFrameSpout needs a Spark DataFrame, got {type(df).__name__}")
        if batch_rows < 1:
            raise TopologyError(f"DataFrameSpout batch_rows must be >= 1, got {batch_rows}")
        self.columns = tuple(df.columns)
        self.outputs = ("batch",) if arrow_batches else self.columns
        self._arrow = arrow_batches
        self._batch_rows = batch_rows
        self._msg_ids = msg_ids
        # RayDP's conversion itself, which is all that ray.data.from_spark does: Ray 2.60's
        # from_spark defaults parallelism to None, not -1, so every call printed "The
        # argument ``parallelism`` is deprecated" and override_num_blocks was ignored
        with raydp_internals_quiet():
            ds = spark_dataframe_to_ray_dataset(df, parallelism)
        self._block_refs = ds.to_arrow_refs()
        self.total_rows = ds.count()
        self.total_items = self.total_rows
        self.emitted_rows = 0
        # Keep the dataset (and so the blocks' owner bookkeeping) alive on the driver side.
        self._ds = ds

    def get_component_configuration(self) -> dict[str, Any]:
        """``topology.batch.flush.interval.millis`` = :data:`FLUSH_INTERVAL_MS` for this
        spout: a frame is already in Ray's object store, so what counts is rows per second,
        and a partial batch that leaves every 1 ms (Storm's default) carries a few rows
        per actor call while the spout emits without pause (benchmarks/flights_rows.py;
        figures in docs/benchmarks.md). ``add_configuration`` on its declarer overrides it
        (Storm's merge order); the topology-wide key does not."""
        return {"topology.batch.flush.interval.millis": FLUSH_INTERVAL_MS}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_ds", None)
        return state

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        n = len(context.get_component_tasks(context.component_id))
        self._stride = (n, context.task_index)
        self._splits = SplitPositions(conf, context.task_index, n, start=(0, 0))
        self._legacy = False  # a state of before splits: blocks k, k+n, ... (at n tasks)
        self._order: list = []  # (block, items to skip) still to read, in order
        self._block = -1  # the block being emitted, and its items emitted so far
        self._item = 0
        self._rows = iter(())
        self.emitted_rows = 0
        self._emitted_items = 0
        self._in_flight: dict = {}
        self._replay: list = []
        self._retries = RetryService(conf, context, collector)
        self._plan()

    def _plan(self, legacy: tuple | None = None) -> None:
        """The blocks still to read: of this task's splits (:meth:`_where`), from each
        split's position ``(blocks done, items of the next emitted)``;
        or, for a state of before splits (``legacy``: ``(j, item)``), this task's blocks
        ``k, k+n, ...`` from its ``j``-th."""
        blocks = len(self._block_refs)
        if legacy is not None:
            (n, k), (j, item) = self._stride, legacy
            mine = list(range(k, blocks, n))[max(j, 0):]
            self._order = [(b, item if i == 0 and j >= 0 else 0)
                           for i, b in enumerate(mine)][::-1]  # (popped from the end)
            return
        pos, order = self._splits.positions, []
        for b in range(blocks):
            s, rank = self._where(b)
            if s in pos and rank >= pos[s][0]:
                order.append((b, pos[s][1] if rank == pos[s][0] else 0))
        self._order = order[::-1]  # (popped from the end)

    def _where(self, block: int) -> tuple[int, int]:
        """``(split, rank in it)`` of ``block``: split ``b % S``, rank ``b // S`` (the
        items' rule, ``topology/_splits.py``) when the frame has at least ``S`` blocks;
        with fewer, split ``b * S // B`` and rank 0, so that its few blocks spread over
        the splits, and so over the tasks, instead of all falling to the first task's."""
        S, B = self._splits.count, len(self._block_refs)
        return (block % S, block // S) if B >= S else (block * S // B, 0)

    def init_state(self, state) -> None:
        """Go on from the positions in ``state``, per split: ``(blocks done, items
        emitted of the next)`` (an empty state: from the first block). A rewind reads the
        block it was in again, skips the items emitted, and forgets what was in flight.

        Raises:
            ValueError: the state was written under another split count.
        """
        self._state = state
        self._in_flight.clear()
        self._replay.clear()
        self._rows, self._block, self._item = iter(()), -1, 0
        self._legacy = "position" in state and SPLITS_KEY not in state
        if self._legacy:
            self._plan(tuple(state.get("position")))
            return
        blocks = state.get(BLOCKS_KEY)
        if blocks is not None and blocks != len(self._block_refs):
            raise ValueError(f"DataFrameSpout task {self._stride[1]}: its state is of a frame "
                             f"of {blocks} blocks, this frame has {len(self._block_refs)}: "
                             f"its positions would name other blocks; give the frame "
                             f"{blocks} blocks (parallelism={blocks})")
        self._splits.load(state, f"DataFrameSpout task {self._stride[1]}")
        self._splits.positions = {s: tuple(p) for s, p in self._splits.positions.items()}
        self._plan()

    def pre_prepare(self, checkpoint_id: int) -> None:
        if self._legacy:
            n, k = self._stride
            self._state.put("position", ((self._block - k) // n if self._block >= 0 else -1,
                                         self._item))
            return
        if self._block >= 0:
            s, rank = self._where(self._block)
            self._splits.positions[s] = (rank, self._item)
        self._splits.save(self._state)
        self._state.put(BLOCKS_KEY, len(self._block_refs))

    @classmethod
    def redistribute(cls, old: list[dict], index: int, count: int) -> dict:
        """:func:`~topology._splits.redistribute_splits` of the split positions, with
        the block count the old tasks recorded (checked against the new frame's at
        ``init_state``).

        Raises:
            ValueError: old tasks of different block counts, or what
                ``redistribute_splits`` raises.
        """
        counts = {state.get(BLOCKS_KEY) for state in old} - {None}
        if len(counts) > 1:
            raise ValueError(f"the old tasks' states are of frames of {sorted(counts)} blocks")
        out = redistribute_splits([{k: v for k, v in state.items() if k != BLOCKS_KEY}
                                   for state in old], index, count)
        return {**out, BLOCKS_KEY: counts.pop()} if counts else out

    def _fetch(self, ref):
        """A block's Arrow table (``ray.get``)."""
        import ray

        return ray.get(ref)

    def _block_done(self) -> None:
        if self._block >= 0 and not self._legacy:
            s, rank = self._where(self._block)
            self._splits.positions[s] = (rank + 1, 0)

    def _next_block(self) -> bool:
        while self._order:
            self._block_done()  # (the block before)
            self._block, skip = self._order.pop()
            self._item = 0
            table = self._fetch(self._block_refs[self._block])
            if table.num_rows:
                if self._arrow:  # one tuple per record batch
                    self._rows = ((b,) for b in table.select(list(self.columns)).to_batches(
                        max_chunksize=self._batch_rows) if b.num_rows)
                else:
                    self._rows = arrow_rows(table, self.columns)
                if skip:
                    self._rows = itertools.islice(self._rows, skip, None)
                    self._item = skip
                return True
        if not self._legacy:  # (a state of before splits keeps the last block's place)
            self._block_done()
            self._block, self._item = -1, 0
        return False

    def next_tuple(self) -> None:
        if self._replay:
            mid = self._replay.pop(0)
            self._collector.emit(self._in_flight[mid], msg_id=mid)
            return
        # (a block whose items were all emitted before a restore is skipped whole: on)
        while (row := next(self._rows, None)) is None:
            if not self._next_block():
                raise StopIteration
        if self._msg_ids:
            mid = self._emitted_items
            self._in_flight[mid] = row
            self._collector.emit(row, msg_id=mid)
        else:
            self._collector.emit(row)
        self._emitted_items += 1
        self._item += 1
        self.emitted_rows += row[0].num_rows if self._arrow else 1

    def drain(self) -> None:
        """Take no new row: emit the replays, then end the stream."""
        self._order = []
        self._rows = iter(())

    def progress(self) -> int:
        """Rows of this task's blocks emitted so far (replays not counted)."""
        return self.emitted_rows

    def ack(self, msg_id) -> None:
        if self._in_flight.pop(msg_id, None) is not None:
            self._retries.remove(msg_id)

    def fail(self, msg_id) -> None:
        if msg_id in self._in_flight:
            if self._retries.schedule(msg_id, self._in_flight[msg_id]):
                self._replay.append(msg_id)
            else:
                del self._in_flight[msg_id]
