"""DatasetSink: a topology's output as Arrow tables, a Ray Dataset, a Spark DataFrame."""

from __future__ import annotations

import pytest

from topology import CollectorBolt, DatasetSink, IterableSpout, TopologyBuilder, TopologyError
from topology._tuple import Tuple


def _tuple(values, fields=("a", "b"), stream="default"):
    from topology import Fields

    return Tuple(list(values), Fields(*fields), "src", 1, stream)


def _sink(**kw):
    s = DatasetSink(**kw)
    s.prepare({}, None, None)
    return s


def test_columns_are_packed_into_arrow_tables_with_types_promoted():
    s = _sink(batch_rows=3)
    for i in range(7):
        s.execute(_tuple((i, None if i == 4 else f"s{i}")))
    assert len(s._tables) == 2  # 3 + 3 packed, 1 still in columns
    t = s.arrow_table()
    assert t.num_rows == 7 and t.column_names == ["a", "b"]
    assert t.column("a").to_pylist() == list(range(7))
    assert t.column("b").to_pylist()[4] is None
    assert str(t.schema.field("a").type) == "int64"


def test_fields_pick_columns_and_a_stream_without_them_is_an_error_naming_it():
    s = _sink(fields=("b",))
    s.execute(_tuple((1, "x")))
    with pytest.raises(TopologyError, match="stream 'other' of 'src'"):
        s.execute(_tuple((1,), fields=("a",), stream="other"))
    assert s.arrow_table().to_pydict() == {"b": ["x"]}


def test_other_fields_than_the_first_tuple_are_rejected():
    s = _sink()
    s.execute(_tuple((1, 2)))
    with pytest.raises(TopologyError, match=r"fields \['x', 'y'\]"):
        s.execute(_tuple((1, 2), fields=("x", "y")))
    assert s.rows == 1


def test_bounded_and_empty_cases():
    s = _sink(max_rows=2)
    assert s.arrow_table() is None
    s.execute(_tuple((1, 2)))
    s.execute(_tuple((3, 4)))
    with pytest.raises(OverflowError):
        s.execute(_tuple((5, 6)))
    assert s.arrow_table().num_rows == 2
    assert _sink(fields=("a",)).arrow_table().column_names == ["a"]
    for bad in ({"fields": "ab"}, {"fields": ("a", "a")}, {"batch_rows": 0}):
        with pytest.raises(TopologyError):
            DatasetSink(**bad)


def test_spark_blocks_give_every_column_in_one_chunk():
    """to_spark's blocks: a sink that packed several tables (more rows than batch_rows)
    has columns of several chunks; RayDP reads each block through pandas, and a string
    column of several chunks comes back from pandas >= 3 as a ChunkedArray, which pyspark
    3.5's mapInPandas rejects. Each block must be one chunk per column, in one schema."""
    import pyarrow as pa

    from connectors.spark.convert import raydp_blocks

    a, b = _sink(batch_rows=3), _sink(batch_rows=4)
    for i in range(7):
        a.execute(_tuple((i, f"s{i}")))
        b.execute(_tuple((None if i == 2 else i, f"t{i}")))
    tables = [a.arrow_table(), b.arrow_table()]
    assert tables[0].column("b").num_chunks > 1
    schema, blocks = raydp_blocks(tables)
    assert str(schema.field("a").type) == "int64"
    assert sum(t.num_rows for t in blocks) == 14
    for t in blocks:
        assert t.schema == schema
        assert all(c.num_chunks == 1 for c in t.columns)
        # what pyspark does with each column of a block after RayDP's to_pandas
        assert isinstance(pa.Array.from_pandas(t.to_pandas()["b"], type=pa.string()), pa.Array)
    assert [v for t in blocks for v in t.column("b").to_pylist()] == \
        [f"s{i}" for i in range(7)] + [f"t{i}" for i in range(7)]
    schema, blocks = raydp_blocks([_sink(fields=("a",)).arrow_table()])
    assert len(blocks) == 1 and blocks[0].num_rows == 0


@pytest.mark.ray
def test_to_dataset_gathers_every_task(cluster, name):
    n = 5000
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, f"w{i % 7}") for i in range(n)], fields=("i", "w")))
    b.set_bolt("out", DatasetSink(batch_rows=512), 2).shuffle_grouping("src")
    b.set_bolt("plain", CollectorBolt()).shuffle_grouping("src")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)
        ds = handle.to_dataset("out")
        rows = ds.take_all()
        with pytest.raises(TypeError, match="'plain' is a CollectorBolt"):
            handle.to_dataset("plain")
        with pytest.raises(KeyError):
            handle.to_dataset("nope")
    finally:
        cluster.kill_topology(name)
    assert ds.count() == n
    assert sorted(r["i"] for r in rows) == list(range(n))
    assert all(r["w"] == f"w{r['i'] % 7}" for r in rows)


@pytest.mark.ray
@pytest.mark.spark
def test_to_spark_round_trip(cluster, spark, name):
    """Spark → topology → Spark: a DataFrame in through DataFrameSpout, back out through a
    DatasetSink, aggregated again by Spark. The sink packs several tables (a string column
    of several chunks: see test_spark_blocks_give_every_column_in_one_chunk)."""
    from pyspark.sql import functions as F

    from topology import DataFrameSpout

    df = (spark.range(0, 3000).withColumn("k", F.col("id") % 10)
          .withColumn("w", F.concat(F.lit("w"), F.col("k").cast("string"))))
    b = TopologyBuilder()
    b.set_spout("df", DataFrameSpout(df))
    b.set_bolt("out", DatasetSink(batch_rows=512)).shuffle_grouping("df")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)
        back = handle.to_spark("out", spark).cache()
        assert back.count() == 3000
    finally:
        cluster.kill_topology(name)
    # still readable after the kill: RayDP holds the blocks
    got = {r["k"]: (r["n"], r["s"], r["w"]) for r in
           back.groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"),
                                 F.max("w").alias("w")).collect()}
    assert got == {k: (300, sum(range(k, 3000, 10)), f"w{k}") for k in range(10)}
