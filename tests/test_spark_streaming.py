"""StreamingDataFrameSpout: a Spark Structured Streaming query as a live spout, on the
``rate-micro-batch`` source (rows per micro-batch fixed by ``rowsPerBatch``; value v is row
v of the stream, so batch b holds values ``[b * n, (b + 1) * n)``)."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests._util import until
from tests.components import RelayBolt, SlowCollector, WindowSpanBolt
from topology import (
    CollectorBolt,
    Duration,
    StreamingDataFrameSpout,
    TopologyBuilder,
    TopologyError,
)

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def _rate(spark, rows_per_batch: int, **options):
    r = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
         .option("numPartitions", 1))  # one Spark task per micro-batch: 1-core executor
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _commits(checkpoint: str) -> list[int]:
    """Batch ids Spark has committed (the checkpoint's ``commits/`` log)."""
    d = os.path.join(checkpoint, "commits")
    return sorted(int(f) for f in os.listdir(d) if f.isdigit()) if os.path.isdir(d) else []


def _offsets(checkpoint: str) -> dict[int, int]:
    """Batch id → the rate source's end offset (rows generated up to that batch), from
    the checkpoint's ``offsets/`` log (its last line is the source's offset JSON)."""
    d = os.path.join(checkpoint, "offsets")
    out = {}
    for f in os.listdir(d) if os.path.isdir(d) else []:
        if f.isdigit():
            with open(os.path.join(d, f)) as fh:
                lines = fh.read().splitlines()
            try:
                out[int(f)] = int(json.loads(lines[-1])["offset"])
            except (ValueError, KeyError, IndexError):
                continue  # being written
    return out


def _values(collected, index: int = 0) -> list:
    return [v[index] for *_, v in collected]


def _windows_on(spout, relay_delay_s: float | None = None) -> TopologyBuilder:
    """``spout`` (→ a ``relay`` sleeping ``relay_delay_s`` per tuple, when given) →
    tumbling event-time windows of 100 values (value as event time) → ``sink``."""
    b = TopologyBuilder()
    b.set_spout("live", spout)
    up = "live"
    if relay_delay_s is not None:
        b.set_bolt("relay", RelayBolt(("value",), relay_delay_s)).shuffle_grouping("live")
        up = "relay"
    b.set_bolt("win", WindowSpanBolt("value").with_tumbling_window(Duration.of(100))
               .with_timestamp_field("value").with_watermark_interval(Duration.of(20))
               ).shuffle_grouping(up)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("win")
    return b


def _kill_then_drain(handle, task: int, ck: str, commits: int) -> tuple[list, int]:
    """SIGKILL ``task``'s process; once the topology rolled back and Spark committed
    ``commits`` more micro-batches, drain; returns the sink's windows and Spark's last
    committed offset."""
    import ray

    before = handle.checkpoint_stats()["rollbacks"]
    os.kill(ray.get(handle.actors[task].pid.remote()), 9)
    until(lambda: handle.checkpoint_stats()["rollbacks"] > before, 120, "the rollback",
          interval=0.2)
    n = len(_commits(ck))
    until(lambda: len(_commits(ck)) >= n + commits, 120, "commits after the kill",
          interval=0.2)
    assert handle.drain(120)
    return [v for *_, v in handle.collected("sink")], _offsets(ck)[_commits(ck)[-1]]


def _assert_exact_windows(windows: list, committed: int) -> None:
    """Every window below Spark's committed offset fired, each time with exactly its 100
    values."""
    fired = {}
    for start, end, count, values in windows:
        if end <= committed:
            assert values == list(range(start, end)), (start, count)
            fired[start] = count
    assert sorted(fired) == list(range(0, committed - committed % 100, 100))


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "arrow"])
def test_streaming_spout_delivers_rows_and_skips_empty_micro_batches(cluster, spark, name,
                                                                     arrow):
    """Every other micro-batch is empty (the filter keeps values v % 200 < 100 of batches
    of 100): those are skipped (RayDP's from_spark fails on them) and every row of the
    others arrives once, as a row or in Arrow record batches of at most 30 rows."""
    df = _rate(spark, 100).where("value % 200 < 100").select("value", "timestamp")
    spout = StreamingDataFrameSpout(df, arrow_batches=arrow, batch_rows=30)
    assert spout.outputs == (("batch",) if arrow else ("value", "timestamp"))
    b = TopologyBuilder()
    b.set_spout("live", spout, 2)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("live")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        def rows():
            got = handle.collected("sink")
            if not arrow:
                return _values(got)
            assert all(v[0].num_rows <= 30 for *_, v in got)
            return [x for *_, v in got for x in v[0].column("value").to_pylist()]

        until(lambda: len(rows()) >= 200 and spout.empty_batches >= 1, 120,
              "200 rows and an empty micro-batch", interval=0.3)
        assert spout.query.isActive
        handle.deactivate()  # the rows so far, stable
        time.sleep(0.5)
        values = sorted(rows())
    finally:
        cluster.kill_topology(name)
    assert not spout.query.isActive  # the query stops with its topology
    assert len(values) == len(set(values))  # no failures here: each row once
    # whole micro-batches of 100 (a spout task takes a block at a time, so the rows of a
    # batch may still be arriving: all rows below the last full hundred are there)
    top = max(values) // 100 * 100
    assert [v for v in values if v < top] == [v for v in range(top) if v % 200 < 100]


def test_backpressure_reaches_spark(cluster, spark, name, tmp_path):
    """A sink slowed to 20 rows/s (50 ms a tuple) holds Spark's trigger: the rows Spark
    has read never lead the rows the sink executed by more than the topology and the
    hand-off can hold, while unthrottled Spark reads several times that rate; the
    hand-off's rows stay within max_rows, and foreachBatch is seen waiting."""
    ck = str(tmp_path / "ck")
    df = _rate(spark, 200).select("value")
    spout = StreamingDataFrameSpout(df, msg_ids=False, max_batches=1, max_rows=200,
                                    checkpoint_location=ck)
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("sink", SlowCollector(0.05)).shuffle_grouping("live")
    queue = 16
    handle = cluster.submit_topology(name, {"topology.executor.receive.buffer.size": queue,
                                            "topology.acker.executors": 0},
                                     b.create_topology())
    # what may lie between Spark's offsets (logged as a micro-batch starts) and the
    # sink: the hand-off (max_rows), the micro-batch whose foreachBatch is putting, the
    # spout's current block (a whole micro-batch: one partition), the sink's queue, the
    # frames in flight to it (2 credits of a batch each; a batch is half the queue) and
    # the spout's partial batch and pending emits
    batch = queue // 2
    bound = 200 + 200 + 200 + queue + 2 * batch + 2 * batch
    samples = []
    try:
        def sample():
            offsets = _offsets(ck)
            executed = handle.stats().total("sink", "executed")
            read = max(offsets.values()) if offsets else 0
            samples.append((time.monotonic(), read, executed))
            assert read - executed <= bound, samples[-1]
            return executed >= 300

        until(sample, 120, "300 rows through the slow sink", interval=0.5)
        hs = spout.handoff_stats()
    finally:
        cluster.kill_topology(name)
    assert hs["max_held_rows"] <= 200 and hs["max_held_batches"] <= 1
    assert hs["put_waits"] >= 1  # Spark's trigger was held
    t0, r0, e0 = next(s for s in samples if s[2] >= 100)
    t1, r1, e1 = samples[-1]
    spark_rate, sink_rate = (r1 - r0) / (t1 - t0), (e1 - e0) / (t1 - t0)
    print(f"spark_rows_per_s={spark_rate:.1f} sink_rows_per_s={sink_rate:.1f} "
          f"max_lead={max(r - e for _, r, e in samples)} bound={bound}")
    assert sink_rate <= 21  # the imposed capacity
    assert r1 > r0  # Spark goes on, at the sink's pace


def test_at_least_once_across_a_killed_executor(cluster, spark, name, tmp_path):
    """With acking, a micro-batch is committed only once all its rows are acked: with the
    spout task's process and one relay task's killed mid-stream (the relay's tuples time
    out and replay; the restarted spout task gets its blocks back from the hand-off),
    every row of every committed micro-batch is in the sink whenever we look, and every
    row the source produced up to the last commit reaches it at least once."""
    ck = str(tmp_path / "ck")
    df = _rate(spark, 100).select("value")
    spout = StreamingDataFrameSpout(df, checkpoint_location=ck)
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("relay", RelayBolt(("value",)), 2).shuffle_grouping("live")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("relay")
    handle = cluster.submit_topology(name, {"topology.message.timeout.secs": 2},
                                     b.create_topology())
    checked = []
    try:
        def committed_rows_in_sink() -> int:
            commits = _commits(ck)  # first the commits, then the sink: a commit follows acks
            seen = set(_values(handle.collected("sink")))
            if not commits:
                return -1
            end = _offsets(ck)[commits[-1]]
            missing = [v for v in range(end) if v not in seen]
            assert not missing, f"batch {commits[-1]} committed without rows {missing[:10]}"
            checked.append(commits[-1])
            return commits[-1]

        first = until(lambda: committed_rows_in_sink() >= 1 or None, 120, "two commits",
                      interval=0.3)
        relay = handle.topology.component_tasks["relay"][0]
        live = handle.topology.component_tasks["live"][0]
        import ray

        for task in (relay, live):
            os.kill(ray.get(handle.actors[task].pid.remote()), 9)
        until(lambda: committed_rows_in_sink() >= first + 2, 120,
              "two more commits after the kill", interval=0.3)
        restarts = handle.restarts()
    finally:
        cluster.kill_topology(name)
    assert restarts.get(f"task-{relay}", 0) >= 1 and restarts.get(f"task-{live}", 0) >= 1
    assert len(checked) >= 3


def test_persistent_windows_behind_spark_count_every_committed_row_after_a_kill(
        cluster, spark, name, tmp_path):
    """Behind the live source with acking, the plan checkpoints the windows: the windowed
    task (value as event time, tumbling windows of 100 values) is killed mid-stream, then
    the topology is drained. Every window below the rows Spark committed holds exactly its
    100 values each time it fires (with ack-on-entry windows a killed task loses its open
    windows' rows while Spark has committed them)."""
    ck = str(tmp_path / "ck")
    b = _windows_on(StreamingDataFrameSpout(_rate(spark, 60).select("value"),
                                            checkpoint_location=ck))
    conf = {"topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "state")}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert handle.checkpoints is not None  # the plan turned checkpoints on
        until(lambda: len(_commits(ck)) >= 2, 120, "two commits", interval=0.3)
        win = handle.topology.component_tasks["win"][0]
        windows, committed = _kill_then_drain(handle, win, ck, 2)
    finally:
        cluster.kill_topology(name)
    _assert_exact_windows(windows, committed)


def test_a_spout_task_killed_mid_block_behind_persistent_windows_counts_every_row_once(
        cluster, spark, name, tmp_path):
    """The spout keeps a position (micro-batch, block, rows): its task is killed while it
    holds a block that a committed checkpoint holds rows of (blocks of 200 rows behind a
    relay of 5 ms a tuple and small queues, so a block spans many rounds); the restarted
    task's block starts after those rows, and every window below what Spark committed
    holds each value once (given back whole, the committed rows were counted twice)."""
    ck = str(tmp_path / "ck")
    spout = StreamingDataFrameSpout(_rate(spark, 200).select("value"), checkpoint_location=ck)
    b = _windows_on(spout, relay_delay_s=0.005)
    conf = {"topology.state.checkpoint.interval.ms": 100,
            "topology.executor.receive.buffer.size": 16, "topology.producer.batch.size": 4,
            "topology.state.checkpoint.dir": str(tmp_path / "state")}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        until(lambda: len(_commits(ck)) >= 1, 120, "a commit", interval=0.2)

        def mid_block():  # the same block leased across two commits
            hs, c0 = spout.handoff_stats(), handle.checkpoint_stats()["last_committed"] or 0
            if hs["leased_blocks"] != 1:
                return None
            until(lambda: handle.checkpoint_stats()["last_committed"] >= c0 + 2, 30,
                  "two commits", interval=0.05)
            hs2 = spout.handoff_stats()
            return hs2["leased_blocks"] == 1 and hs2["blocks_taken"] == hs["blocks_taken"]

        until(mid_block, 60, "a block held across two commits", interval=0.05)
        live = handle.topology.component_tasks["live"][0]
        windows, committed = _kill_then_drain(handle, live, ck, 1)
        skipped = spout.handoff_stats().get("rows_skipped")
    finally:
        cluster.kill_topology(name)
    _assert_exact_windows(windows, committed)
    assert skipped > 0  # the restarted task's block started after its committed rows


def test_kill_with_wait_commits_nothing_undelivered(cluster, spark, name, tmp_path):
    """kill(wait_secs) deactivates, waits, kills: the micro-batch still in the topology
    (its foreachBatch waiting for acks) raises, so Spark does not commit it, and the
    query stops. A new query on the same checkpoint (what a restarted driver runs)
    replays that micro-batch whole, and Spark commits it once the topology acks it."""
    ck = str(tmp_path / "ck")
    df = _rate(spark, 200).select("value")
    spout = StreamingDataFrameSpout(df, checkpoint_location=ck)
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("sink", SlowCollector(0.05)).shuffle_grouping("live")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        until(lambda: len(handle.collected("sink")) >= 10, 120, "rows of batch 0",
              interval=0.3)
    finally:
        t0 = time.monotonic()
        handle.kill(wait_secs=1.0)
        cluster.topologies.pop(name, None)
    assert time.monotonic() - t0 >= 1.0
    assert 0 in _offsets(ck)  # Spark ran batch 0 (200 rows, 10 s in the sink) ...
    assert _commits(ck) == []  # ... and committed nothing of it
    assert not spout.query.isActive
    assert "not delivered" in str(spout.query.exception())

    again = StreamingDataFrameSpout(_rate(spark, 200).select("value"), checkpoint_location=ck)
    b = TopologyBuilder()
    b.set_spout("live", again)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("live")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        until(lambda: 0 in _commits(ck) or None, 120, "batch 0 committed after the restart",
              interval=0.3)
        values = _values(handle.collected("sink"))
    finally:
        cluster.kill_topology(name)
    assert set(range(200)) <= set(values)  # batch 0, replayed from the checkpoint


def test_drain_fires_every_window(cluster, spark, name):
    """drain(): no new micro-batch, the spout delivers what entered and ends its stream,
    and every event-time window fires (tumbling 2 s of the source's event time, one
    micro-batch a second): the windows hold each delivered row exactly once."""
    df = _rate(spark, 50, advanceMillisPerBatch=1000).select("value", "timestamp")
    spout = StreamingDataFrameSpout(df)
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("win", WindowSpanBolt("value").with_tumbling_window(Duration.seconds(2))
               .with_timestamp_field("timestamp")).shuffle_grouping("live")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("win")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        until(lambda: spout.handoff_stats()["batches_done"] >= 3, 120, "three micro-batches",
              interval=0.3)
        assert not handle.wait(0.5)  # live: wait returns without ending it
        assert handle.drain(120)
        windows = [v for *_, v in handle.collected("sink")]
        hs = spout.handoff_stats()
    finally:
        cluster.kill_topology(name)
    assert not spout.query.isActive
    values = sorted(x for w in windows for x in w[3])
    assert values == list(range(hs["rows_in"]))  # each delivered row in one window
    assert sum(w[2] for w in windows) == hs["rows_in"]
    assert len(windows) >= 2 and hs["state"] in ("draining", "closed")


def test_a_failed_query_stops_its_spout_with_the_error(cluster, spark, name):
    """A query failing in Spark (assert_true on the second micro-batch) ends the spout's
    stream with the query's error in stats()."""
    df = _rate(spark, 100).selectExpr("value", "assert_true(value < 150) AS ok")
    spout = StreamingDataFrameSpout(df)
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("live")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)  # the spout ended its stream: the topology completes
        errors = handle.stats().errors
    finally:
        cluster.kill_topology(name)
    assert any(e["component"] == "live" and "Spark query failed" in e["message"]
               and "150" in e["message"] for e in errors), errors


def test_refuses_batch_frames_other_sessions_and_unbounded_sources(spark):
    with pytest.raises(TopologyError, match="isStreaming is False; use DataFrameSpout"):
        StreamingDataFrameSpout(spark.range(3))
    with pytest.raises(TopologyError, match="rate-micro-batch"):
        StreamingDataFrameSpout(spark.readStream.format("rate").load())
    other = spark.newSession()
    with pytest.raises(TopologyError, match="another Spark session"):
        StreamingDataFrameSpout(_rate(other, 10), spark=spark)
    with pytest.raises(TopologyError, match="needs a streaming Spark DataFrame, got list"):
        StreamingDataFrameSpout([1, 2])
