"""``StreamingDataFrameSpout``: a Spark Structured Streaming query as a live spout.

Only this module and the hand-off's actor (``connectors/spark/_handoff_actor.py``) touch
``ray``/``raydp``/``pyspark``, and only when such a spout is built. The design (the
hand-off, backpressure reaching Spark, acking against Spark's offsets, which sources
bound rows, the position) is in docs/spark-streaming.md.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from typing import Any

from connectors.spark._handoff_actor import handoff_actor
from connectors.spark.arrow_rows import arrow_rows
from connectors.spark.handoff import FAILED
from connectors.spark.sources import query_sources, source_problems
from topology import RetryService, StatefulSpout, TopologyError
from topology._redact import mask_text

logger = logging.getLogger("storm_on_ray.streaming")


def block_rows(ds) -> list[tuple[Any, int]]:
    """``(block ref, rows)`` for each block of a materialised Ray Dataset, from the
    blocks' metadata (no data is fetched). Ray's ref bundles hold ``(ref, metadata)``
    pairs or, in later versions, entries with ``.ref`` and ``.metadata``."""
    out = []
    for bundle in ds.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            ref, meta = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
            out.append((ref, meta.num_rows))
    if any(r is None for _, r in out):  # no row counts in the metadata: count the blocks
        import ray

        counts = ray.get([_count_rows.remote(ref) for ref, _ in out])
        out = [(ref, n) for (ref, _), n in zip(out, counts, strict=True)]
    return out


def spark_blocks(df) -> list[tuple[Any, int]]:
    """``(block ref, rows)`` for a Spark micro-batch written into Ray's object store by
    RayDP's recoverable conversion (what ``ray.data.from_spark`` runs), without building a
    Ray Dataset: ``from_arrow_refs`` runs a metadata task that asks for one CPU, and a
    running topology plus Spark's executor may hold every CPU of a small cluster (the
    first ``foreachBatch`` then hung, with nothing in stats). RayDP's fetch tasks and our
    row counts ask for none. Where RayDP's internals differ from the pinned 1.6.5, falls
    back to ``ray.data.from_spark``. Blocks until every block exists.
    """
    import ray

    try:
        from pyspark import StorageLevel
        from raydp.spark import dataset as raydp_dataset

        fetch = raydp_dataset._fetch_arrow_table_from_executor
        rdd_ids = raydp_dataset._recoverable_rdd_ids
    except (ImportError, AttributeError):
        import ray.data

        return block_rows(ray.data.from_spark(df))
    sc = df.sparkSession.sparkContext
    writer = sc._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
    info = writer.prepareRecoverableRDD(
        df._jdf, sc._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK))
    rdd_ids[df] = info.rddId()  # so release_spark_recoverable(df) frees Spark's copy
    locations, schema, agent = info.locations(), info.schemaJson(), info.driverAgentUrl()
    refs = [fetch.options(num_cpus=0).remote(f"raydp-executor-{locations[i]}", info.rddId(),
                                             i, schema, agent)
            for i in range(info.numPartitions())]
    counts = ray.get([_count_rows.remote(ref) for ref in refs])
    return list(zip(refs, counts, strict=True))


def _count_rows_fn(table) -> int:
    return table.num_rows


class _LazyRemote:
    def __init__(self, fn) -> None:
        self.fn, self.remote_fn = fn, None

    def remote(self, *args):
        if self.remote_fn is None:
            import ray

            self.remote_fn = ray.remote(num_cpus=0)(self.fn)
        return self.remote_fn.remote(*args)


_count_rows = _LazyRemote(_count_rows_fn)


class _Block:
    """A block a spout task took: its micro-batch and index, tuples not yet resolved,
    and its position: the rows of it before ``start`` were not emitted again (a committed
    checkpoint holds them), ``emitted`` rows were emitted since."""

    __slots__ = ("batch_id", "index", "open", "emitted_all", "start", "emitted")

    def __init__(self, batch_id: int, index: int, start: int = 0) -> None:
        self.batch_id, self.index, self.open, self.emitted_all = batch_id, index, 0, False
        self.start, self.emitted = start, 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.batch_id, self.index)


class StreamingDataFrameSpout(StatefulSpout):
    """Emits the rows of a running Spark Structured Streaming query (a live, unbounded
    source), micro-batch by micro-batch, with backpressure that reaches Spark.

    **Source.** ``df`` is a streaming DataFrame (``spark.readStream...`` on the RayDP
    session, ``cluster.start_spark``). When the topology is submitted, the driver starts
    ``df.writeStream.foreachBatch(...)``; each non-empty micro-batch goes into Ray's object
    store through RayDP (``ray.data.from_spark``: Arrow blocks, never collected on the
    driver) and then into a **hand-off** (a small async Ray actor) as block references.
    Spout tasks take one block per call to it and emit its rows.

    **Backpressure.** The hand-off holds at most ``max_batches`` micro-batches and
    ``max_rows`` rows not yet taken; while it is full, ``foreachBatch`` does not return,
    so Spark starts no new micro-batch. That slows the source only where it bounds rows per
    micro-batch (``rowsPerBatch`` of ``rate-micro-batch``, ``maxFilesPerTrigger`` of a file
    source, ``maxOffsetsPerTrigger`` of Kafka); other sources are refused (see Raises).

    **Guarantee** (``msg_ids=True``, the default, with acking on): ``foreachBatch`` returns
    only once every row of its micro-batch is acked (or given up as a dead letter at
    ``topology.max.replays``), so Spark commits a micro-batch's offsets only after the
    topology processed it: at-least-once up to Spark's offsets. Failed rows replay from the
    spout; a driver restart replays the uncommitted micro-batch from the query's
    checkpoint (give ``checkpoint_location``). Spark runs one micro-batch at a time, so
    with acking one micro-batch is in the topology at a time. ``msg_ids=False``: a put
    returns once the micro-batch is in the hand-off (at-most-once past it; refused in a
    topology that checkpoints, whose rollback would lose the rows after its checkpoint).

    **Position** (a topology that checkpoints: stateful bolts, persistent windows, 2PC
    sinks; the plan makes the windows behind this spout persistent): the spout is a
    :class:`~topology.StatefulSpout`. Its state holds, for each block it took and has not
    reported done, ``(micro-batch id, block index, rows emitted)`` at the barrier; a block
    is reported done to the hand-off when the checkpoint after its last row commits, so
    Spark commits a micro-batch only once a committed checkpoint holds all of its rows. A
    rollback or a restarted task gives its blocks back and a re-taken block starts after
    the rows the committed checkpoint holds (Flink's ``SourceReaderBase`` resumes a split
    at its offset): exactly-once up to the topology's state and 2PC sinks. Restored from
    a savepoint behind the same ``checkpoint_location``, Spark runs its uncommitted
    micro-batch again and the restored positions skip the rows the savepoint holds (a
    re-run micro-batch must have the same blocks: the same source offsets and
    partitioning, as Spark's file, Kafka and ``rate-micro-batch`` sources give).

    **Lifecycle.** ``handle.kill()`` (or ``storm-on-ray kill``) closes the hand-off: a
    ``foreachBatch`` waiting in it raises, so Spark commits nothing it did not deliver,
    and the query stops. ``handle.drain()``: no new micro-batch enters; the spouts deliver
    what is inside, then end their streams. A query that fails stops the spout tasks with
    the query's error in ``stats()`` (component errors).

    Values after the trip are as :class:`~topology.DataFrameSpout`'s.

    Args:
        df: a streaming DataFrame of the RayDP Spark session.
        msg_ids: emit with msg ids and hold ``foreachBatch`` until its rows are acked.
        arrow_batches: emit Arrow record batches (one field ``batch``) of at most
            ``batch_rows`` rows instead of rows, as ``DataFrameSpout``.
        batch_rows: rows per record batch with ``arrow_batches`` (>= 1).
        max_batches: micro-batches the hand-off holds (>= 1).
        max_rows: rows the hand-off holds (>= 1); a micro-batch larger than this enters
            an empty hand-off alone.
        trigger: keyword arguments for ``DataStreamWriter.trigger`` (e.g.
            ``{"processingTime": "1 second"}``); None: Spark's default (as fast as
            micro-batches complete).
        checkpoint_location: the query's checkpoint directory (offsets and commits); None
            lets Spark use a temporary one, so a restarted driver starts afresh.
        query_name: the query's name in Spark.
        spark: the RayDP session; when given, ``df`` must belong to it.
        allow_unbounded_source: accept a source that does not bound rows per micro-batch,
            with a warning (the hand-off then bounds rows only between micro-batches).
        poll_ms: how long one take waits in the hand-off for a block (ms) before the task
            goes back to its loop.

    Attributes:
        query: the running ``StreamingQuery`` (driver side, after submit), for
            ``lastProgress`` and ``recentProgress``.
        empty_batches: empty micro-batches skipped (driver side; nothing to deliver).

    Raises:
        TopologyError: ``df`` is not a Spark DataFrame, is not streaming
            (``df.isStreaming`` False: use ``DataFrameSpout``), belongs to another Spark
            session (not RayDP's, or not ``spark``), or reads a source that does not bound
            rows per micro-batch (unless ``allow_unbounded_source``); a bound < 1.
    """

    def __init__(self, df: Any, msg_ids: bool = True, arrow_batches: bool = False,
                 batch_rows: int = 8192, max_batches: int = 2, max_rows: int = 100_000,
                 trigger: dict | None = None, checkpoint_location: str | None = None,
                 query_name: str | None = None, spark: Any = None,
                 allow_unbounded_source: bool = False, poll_ms: float = 200) -> None:
        if not hasattr(df, "isStreaming") or not hasattr(df, "columns"):
            raise TopologyError(f"StreamingDataFrameSpout needs a streaming Spark DataFrame, "
                                f"got {type(df).__name__}")
        if not df.isStreaming:
            raise TopologyError("StreamingDataFrameSpout needs a streaming DataFrame "
                                "(spark.readStream...), and df.isStreaming is False; use "
                                "DataFrameSpout for a batch DataFrame")
        for what, v in (("batch_rows", batch_rows), ("max_batches", max_batches),
                        ("max_rows", max_rows)):
            if not isinstance(v, int) or v < 1:
                raise TopologyError(f"StreamingDataFrameSpout {what} must be an int >= 1, "
                                    f"got {v!r}")
        _check_session(df, spark)
        unbounded, unknown = source_problems(query_sources(df))
        for problem in unknown:
            logger.warning("StreamingDataFrameSpout: %s", problem)
        if unbounded:
            if not allow_unbounded_source:
                raise TopologyError(
                    "StreamingDataFrameSpout: backpressure reaches Spark only through a "
                    "source that bounds rows per micro-batch; " + "; ".join(unbounded)
                    + " (or pass allow_unbounded_source=True to accept micro-batches of "
                      "any size)")
            for problem in unbounded:
                logger.warning("StreamingDataFrameSpout (allow_unbounded_source): %s",
                               problem)
        self.columns = tuple(df.columns)
        self.outputs = ("batch",) if arrow_batches else self.columns
        #: without msg ids Spark commits a micro-batch once it is in the hand-off
        #: (refused where the topology checkpoints, acking on or off: cluster._plan)
        self.emits_msg_ids = msg_ids
        self.commits_on_entry = not msg_ids
        self._arrow = arrow_batches
        self._batch_rows = batch_rows
        self._msg_ids = msg_ids
        #: the source waits for acks (cluster._plan makes windowed bolts ack on entry)
        self.acks_hold_source = msg_ids
        self._poll_s = poll_ms / 1000.0
        self.max_batches, self.max_rows = max_batches, max_rows
        # driver side only (never pickled): the query and what starts it
        self._df = df
        self._trigger = dict(trigger or {})
        self._checkpoint = checkpoint_location
        self._query_name = query_name
        self.query = None
        self.empty_batches = 0
        self._watcher: threading.Thread | None = None
        self.handoff = handoff_actor().remote(max_batches, max_rows, msg_ids)

    _DRIVER_ONLY = ("_df", "query", "_watcher", "empty_batches", "_putting")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for k in self._DRIVER_ONLY:
            state.pop(k, None)
        return state

    # -- driver side: the query ----------------------------------------------------------
    def on_submit(self, handle: Any) -> None:
        """Start the query (called by submit once the topology's actors run)."""
        if self.query is not None:
            raise TopologyError("this StreamingDataFrameSpout's query was already started; "
                                "build a new spout for another topology")
        w = self._df.writeStream.foreachBatch(self._on_batch)
        if self._checkpoint is not None:
            w = w.option("checkpointLocation", self._checkpoint)
        if self._query_name is not None:
            w = w.queryName(self._query_name)
        if self._trigger:
            w = w.trigger(**self._trigger)
        self.query = w.start()
        self._watcher = threading.Thread(target=self._watch, daemon=True,
                                         name="streaming-spout-watch")
        self._watcher.start()

    def _watch(self) -> None:
        """Wait for the query to end; a failure goes to the hand-off, whose takes then stop
        the spout tasks with the error (ignored there after a drain or a kill)."""
        import ray

        try:
            self.query.awaitTermination()
        except Exception as e:
            msg = query_error(e)
            try:
                if ray.get(self.handoff.fail.remote(msg), timeout=30):
                    logger.error("Spark streaming query failed: %s", msg)
            except Exception as e2:  # the hand-off is gone with the topology
                logger.warning("Spark query ended (%s); hand-off unreachable: %s", msg, e2)

    def _on_batch(self, df, batch_id: int) -> None:
        """``foreachBatch``: one micro-batch into the hand-off; returns once it is complete
        (see the class docstring). Runs in the driver's Py4J callback thread."""
        import ray
        from pyspark import StorageLevel

        # The emptiness check and the conversion each run the micro-batch's plan: cached,
        # the source is read (and the batch's joins run) once, and Spark's numInputRows
        # counts each row once instead of twice (benchmarks/live.py, Spark's own rate)
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if df.isEmpty():  # RayDP's from_spark fails on an empty frame
                self.empty_batches += 1
                return
            blocks = spark_blocks(df)  # (they exist now: Spark's cached copy can go)
            try:
                from raydp.spark.dataset import release_spark_recoverable

                from connectors.spark.dataframe_spout import raydp_internals_quiet

                with raydp_internals_quiet():  # (RayDP reads df.sql_ctx)
                    release_spark_recoverable(df)
            except ImportError:  # an older RayDP keeps no cached copy
                pass
        finally:
            df.unpersist()
        self._putting = True
        try:
            answer = ray.get(self.handoff.put.remote(int(batch_id), blocks))
        finally:
            self._putting = False
        if answer != "ok":
            raise TopologyError(f"micro-batch {batch_id} not delivered: the topology's "
                                f"hand-off is {answer}; Spark does not commit it")

    def on_drain(self) -> None:
        """Stop taking micro-batches (the next ``foreachBatch`` raises, uncommitted)."""
        import ray

        ray.get(self.handoff.drain.remote(), timeout=30)

    def on_stop(self) -> None:
        """Close the hand-off (a waiting ``foreachBatch`` raises) and stop the query."""
        import ray

        try:
            ray.get(self.handoff.close.remote(), timeout=30)
        except Exception as e:  # already gone
            logger.warning("StreamingDataFrameSpout: closing the hand-off: %s", e)
        if self.query is not None:
            try:
                if getattr(self, "_putting", False):
                    # its foreachBatch raises now: let the query end with that error
                    # (uncommitted) rather than interrupt it
                    self.query.awaitTermination(30)
            except Exception:  # the error we just caused
                pass
            try:
                self.query.stop()
            except Exception as e:
                logger.warning("StreamingDataFrameSpout: stopping the query: %s", e)
            if self._watcher is not None:
                self._watcher.join(30)

    def handoff_stats(self, timeout: float = 30) -> dict:
        """The hand-off's figures (``HandoffCore.stats``): rows and micro-batches held now
        and at most so far, in, complete; state and error."""
        import ray

        return ray.get(self.handoff.stats.remote(), timeout=timeout)

    # -- task side -----------------------------------------------------------------------
    def open(self, conf, context, collector) -> None:
        self._collector = collector
        self._rows: Any = iter(())
        self._block: _Block | None = None
        self._take = None  # the take in flight (an ObjectRef's future)
        self._ended = False
        self._mids = itertools.count()
        self._in_flight: dict = {}  # msg id → (values, _Block)
        self._replay: deque = deque()
        self._retries = RetryService(conf, context, collector)
        self.emitted_rows = 0
        self._task = context.task_id
        #: the position: blocks taken and not reported done, by key (written into the
        #: state at each barrier where the topology checkpoints)
        self._state = None
        self._held: dict[tuple[int, int], _Block] = {}
        #: committed positions kept in the state beyond the blocks held: blocks reported
        #: done (and restored positions) of the micro-batch Spark may still run again, so
        #: a re-run after a restore skips them too; dropped once a newer micro-batch's
        #: block is taken (with acking Spark starts one only after committing the last)
        self._carried: dict[tuple[int, int], int] = {}
        #: the blocks go back to the hand-off (with the positions) before the first take:
        #: a restarted task's, and after a rewind the task's own
        self._resume: list | None = []

    def init_state(self, state) -> None:
        """Go on from the positions in ``state`` (``[[batch id, block index, rows], ...]``:
        the blocks this task held at the last committed checkpoint and the rows of each
        that checkpoint holds; empty: none, as without checkpoints). A rewind (called
        again after a rollback) drops what the task holds and its tuples in flight (the
        rollback neither acks nor fails them); before its next take the blocks it held go
        back to the hand-off, each to start after its committed rows."""
        self._state = state
        if self._take is not None:  # a block it brings is this task's: given back below
            try:
                self._take.result(timeout=self._poll_s + 60)
            except Exception:  # (the hand-off is gone: the next take says so)
                pass
            self._take = None
        self._rows, self._block = iter(()), None
        self._held.clear()
        self._carried = {(b, i): r for b, i, r in state.get("position", ())}
        self._in_flight.clear()
        self._replay.clear()
        self._resume = [list(p) for p in state.get("position", ())]

    def pre_prepare(self, checkpoint_id: int) -> None:
        """The position at the barrier: each held block's rows emitted so far (where the
        topology checkpoints, its tuples are acked when the checkpoint after them
        commits, so a block is reported done once a committed checkpoint holds it
        whole)."""
        at = {**self._carried, **{b.key: b.start + b.emitted for b in self._held.values()}}
        self._state.put("position", [[b, i, r] for (b, i), r in sorted(at.items())])

    def _resolve(self, block: _Block) -> None:
        """One tuple of ``block`` acked or given up; report the block once all are."""
        block.open -= 1
        if block.emitted_all and block.open == 0:
            self._report(block)

    def _report(self, block: _Block) -> None:
        if self._held.pop(block.key, None) is not None:
            self._carried[block.key] = block.start + block.emitted
        if self._msg_ids:
            self.handoff.acked.remote(block.batch_id, block.index)

    def _next_block(self) -> bool:
        """Take the next block without blocking: one take in flight at a time, checked
        on each call; True once a block's rows are ready to emit."""
        import ray

        if self._ended:
            return False
        if self._resume is not None:
            if self._msg_ids:  # the blocks it held go back to the hand-off
                ray.get(self.handoff.reopened.remote(self._task, self._resume), timeout=60)
            self._resume = None
        if self._take is None:
            self._take = self.handoff.take.remote(self._poll_s, self._task).future()
        if not self._take.done():
            return False
        fut, self._take = self._take, None
        try:
            answer = fut.result()
        except Exception as e:  # the hand-off died (its driver went away)
            self._collector.report_error(e)
            self._ended = True
            return False
        kind = answer[0]
        if kind == "idle":
            return False
        if kind != "block":
            self._ended = True
            if kind == FAILED:
                self._collector.report_error(RuntimeError(f"Spark query failed: {answer[1]}"))
            return False
        _, batch_id, index, ref, _rows, start = answer
        table = ray.get(ref)
        if start:
            table = table.slice(start)
        self._block = _Block(batch_id, index, start)
        self._held[self._block.key] = self._block
        if any(k[0] < batch_id for k in self._carried):
            self._carried = {k: r for k, r in self._carried.items() if k[0] >= batch_id}
        if self._arrow:
            self._rows = ((b,) for b in table.select(list(self.columns)).to_batches(
                max_chunksize=self._batch_rows) if b.num_rows)
        else:
            self._rows = arrow_rows(table, self.columns)
        return True

    def _block_finished(self) -> None:
        b = self._block
        if b is not None:
            b.emitted_all = True
            if b.open == 0:
                self._report(b)
            self._block = None

    def next_tuple(self) -> None:
        if self._replay:
            mid = self._replay.popleft()
            self._collector.emit(self._in_flight[mid][0], msg_id=mid)
            return
        row = next(self._rows, None)
        if row is None:
            self._block_finished()
            if not self._next_block():
                if self._ended:
                    raise StopIteration
                return
            row = next(self._rows, None)
            if row is None:
                return
        block = self._block
        n = row[0].num_rows if self._arrow else 1
        if self._msg_ids:
            mid = next(self._mids)
            self._in_flight[mid] = (row, block)
            block.open += 1
            self._collector.emit(row, msg_id=mid)
        else:
            self._collector.emit(row)
        block.emitted += n
        self.emitted_rows += n

    def progress(self) -> int:
        """Rows emitted by this task so far: replays of failed rows not counted; rows
        emitted again after a rollback rewound the spout counted again (progress, not an
        exact count)."""
        return self.emitted_rows

    def ack(self, msg_id) -> None:
        entry = self._in_flight.pop(msg_id, None)
        if entry is not None:
            self._retries.remove(msg_id)
            self._resolve(entry[1])

    def fail(self, msg_id) -> None:
        entry = self._in_flight.get(msg_id)
        if entry is None:
            return
        if self._retries.schedule(msg_id, entry[0]):
            self._replay.append(msg_id)
        else:  # a dead letter: done for the micro-batch
            del self._in_flight[msg_id]
            self._resolve(entry[1])

    def drain(self) -> None:
        """The topology drains: no new micro-batch enters the hand-off; this task emits
        what is inside and its replays, then ends its stream."""
        self.handoff.drain.remote()

    def close(self) -> None:
        """The task stops (kill): close the hand-off, so a waiting ``foreachBatch`` raises
        and Spark commits nothing this topology did not deliver."""
        import ray

        try:
            ray.get(self.handoff.close.remote(), timeout=10)
        except Exception as e:  # the driver (and the hand-off) are gone
            logger.warning("StreamingDataFrameSpout: closing the hand-off: %s", e)


def query_error(e: BaseException, limit: int = 400) -> str:
    """A failed query's error, short enough for stats: Spark's message without the JVM
    and Python stack frames, the innermost cause last, at most ``limit`` characters from
    its end (the cause is what says what happened), credentials masked (a source's
    options may be quoted)."""
    text = mask_text(str(getattr(e, "desc", None) or e))
    keep = [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.strip().startswith(("at ", "File ", "...", "^", "~"))
            and not ln.startswith(" ")]
    msg = " | ".join(dict.fromkeys(keep)) or type(e).__name__
    return msg if len(msg) <= limit else "..." + msg[-limit:]


def _check_session(df, spark) -> None:
    session = df.sparkSession
    if spark is not None:
        if not session._jsparkSession.equals(spark._jsparkSession):
            raise TopologyError("StreamingDataFrameSpout: the DataFrame belongs to another "
                                "Spark session than spark=; build it with spark.readStream "
                                "on that session")
        return
    master = str(session.sparkContext.master)
    if not master.startswith("ray://"):
        raise TopologyError(f"StreamingDataFrameSpout: the DataFrame's Spark session is not "
                            f"RayDP's (master {master!r}), so its micro-batches cannot reach "
                            f"Ray's object store; build it on the session "
                            f"cluster.start_spark() returns")


__all__ = ["StreamingDataFrameSpout", "block_rows"]
