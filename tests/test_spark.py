"""DataFrameSpout through RayDP: exact rows, values, timestamps, decimals and nulls."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from topology import CollectorBolt, DataFrameSpout, TopologyBuilder, TopologyError

pytestmark = [pytest.mark.spark, pytest.mark.ray]


def _frame(spark, n):
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType(), True),
        T.StructField("ts", T.TimestampType(), True),
        T.StructField("day", T.DateType(), True),
        T.StructField("price", T.DecimalType(12, 3), True),
        T.StructField("score", T.DoubleType(), True),
    ])
    base = dt.datetime(2013, 1, 1, 5, 15, 0, tzinfo=dt.timezone.utc)
    rows = []
    for i in range(n):
        rows.append((
            i,
            None if i % 7 == 0 else f"name-{i}",
            None if i % 11 == 0 else base + dt.timedelta(minutes=i, microseconds=i),
            None if i % 13 == 0 else dt.date(2013, 1, 1) + dt.timedelta(days=i % 365),
            None if i % 5 == 0 else decimal.Decimal(i) / decimal.Decimal(1000) + 1,
            None if i % 3 == 0 else i * 0.5,
        ))
    return spark.createDataFrame(rows, schema).repartition(4), rows


def _norm(row):
    out = list(row)
    ts = out[2]
    if ts is not None:  # compare instants: Arrow may hand back UTC-aware or naive UTC
        out[2] = ts.astimezone(dt.timezone.utc) if ts.tzinfo else ts.replace(
            tzinfo=dt.timezone.utc)
    return tuple(out)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_dataframe_spout_round_trip(cluster, spark, name, parallelism):
    df, rows = _frame(spark, 2000)
    spout = DataFrameSpout(df)
    assert spout.total_rows == 2000
    assert spout.outputs == ("id", "name", "ts", "day", "price", "score")
    b = TopologyBuilder()
    b.set_spout("df", spout, parallelism)
    b.set_bolt("sink", CollectorBolt(), 2).shuffle_grouping("df")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert len(got) == 2000
    by_id = {v[0]: _norm(v) for *_, v in got}
    assert len(by_id) == 2000
    for r in rows:
        assert by_id[r[0]] == _norm(r), r[0]
    sample = by_id[1]
    assert isinstance(sample[2], dt.datetime) and isinstance(sample[4], decimal.Decimal)
    assert isinstance(sample[3], dt.date)
    assert by_id[0][1] is None and by_id[0][2] is None and by_id[0][4] is None


def test_dataframe_spout_replays_failed_rows(cluster, spark, name):
    """With msg_ids, a row whose processing raised is emitted again until acked."""
    from tests.components import FailOnceBolt

    df, rows = _frame(spark, 600)
    spout = DataFrameSpout(df, msg_ids=True)
    b = TopologyBuilder()
    b.set_spout("df", spout)
    b.set_bolt("flaky", FailOnceBolt(every=50, field="id", fields=spout.outputs)
               ).shuffle_grouping("df")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("flaky")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)
        got = handle.collected("sink")
        s = handle.stats()
    finally:
        cluster.kill_topology(name)
    assert sorted(v[0] for *_, v in got) == list(range(600))
    spout_stats = s.component("df")[0]
    assert spout_stats.acked == 600 and spout_stats.failed == 12
    assert s.total("flaky", "error_count") == 12


def test_dataframe_spout_rejects_non_frames():
    with pytest.raises(TopologyError, match="needs a Spark DataFrame, got list"):
        DataFrameSpout([1, 2, 3])


def test_dataframe_spout_flushes_every_10_ms_unless_its_declarer_says_otherwise(spark):
    """The spout's component config carries its flush interval, which an executor merges
    over the topology's key (Storm's order); ``add_configuration`` on its declarer wins."""
    from topology import make_config

    key = "topology.batch.flush.interval.millis"
    df, _ = _frame(spark, 10)
    b = TopologyBuilder()
    b.set_spout("df", DataFrameSpout(df))
    b.set_spout("df_fast", DataFrameSpout(df)).add_configuration(key, 1)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("df").shuffle_grouping("df_fast")
    topology = b.create_topology()
    assert topology.components["df"].conf[key] == 10
    merged = make_config({key: 1, **topology.components["df"].conf})  # (ExecutorCore's merge)
    assert merged[key] == 10
    assert topology.components["df_fast"].conf[key] == 1
    assert key not in topology.components["sink"].conf
