"""Arrow record batches as tuple values: the wire carries them as Arrow IPC, and
DataFrameSpout(arrow_batches=True) feeds vectorised bolts one record batch per tuple."""

from __future__ import annotations

import datetime as dt

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from actors import FrameError, decode_batch, encode_batch
from topology import Bolt, DataFrameSpout, DatasetSink, TopologyBuilder


def test_record_batches_and_tables_cross_the_wire_intact():
    rb = pa.record_batch({
        "i": pa.array([1, None, 3], pa.int64()),
        "s": pa.array(["a", "b", None]),
        "ts": pa.array([dt.datetime(2013, 1, 1, 5, 15)] * 3, pa.timestamp("us", "UTC")),
        "d": pa.array([1.5, 2.5, None])})
    frame = encode_batch(7, [[0, [rb, pa.Table.from_batches([rb, rb]), "x"]]])
    src, _, _, [[stream, (got_rb, got_table, x)]] = decode_batch(frame)
    assert (src, stream, x) == (7, 0, "x")
    assert isinstance(got_rb, pa.RecordBatch) and got_rb.equals(rb)
    assert isinstance(got_table, pa.Table) and got_table.num_rows == 6
    assert got_table.schema == rb.schema


@pytest.mark.parametrize("payload", [b"", b"garbage", b"\xff" * 64])
def test_a_malformed_arrow_payload_is_a_frame_error(payload):
    frame = msgpack.packb([1, 0, 0, [[0, [msgpack.ExtType(5, payload)]]]])
    with pytest.raises(FrameError, match="Arrow"):
        decode_batch(frame)


class ArrowStats(Bolt):
    """Vectorised: per record batch, keeps rows with an even id and sums their score."""

    outputs = ("rows", "even", "score_sum", "max_rows")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.acc = [0, 0, 0.0, 0]

    def execute(self, tup):
        batch = tup["batch"]
        even = batch.filter(pc.equal(pc.bit_wise_and(batch.column("id"), 1), 0))
        self.acc[0] += batch.num_rows
        self.acc[1] += even.num_rows
        self.acc[2] += pc.sum(even.column("score")).as_py() or 0.0
        self.acc[3] = max(self.acc[3], batch.num_rows)

    def finish(self):
        self.collector.emit(tuple(self.acc))


@pytest.mark.ray
@pytest.mark.spark
def test_dataframe_spout_feeds_record_batches_to_a_vectorised_bolt(cluster, spark, name):
    from pyspark.sql import functions as F

    n = 50_000
    df = spark.range(0, n).withColumn("score", F.col("id") * 0.5).repartition(3)
    spout = DataFrameSpout(df, arrow_batches=True, batch_rows=1000, msg_ids=True)
    assert spout.outputs == ("batch",) and spout.total_items == n
    b = TopologyBuilder()
    b.set_spout("df", spout, 2)
    b.set_bolt("stats", ArrowStats(), 2).shuffle_grouping("df")
    b.set_bolt("out", DatasetSink()).global_grouping("stats")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    try:
        assert handle.wait(120)
        table = handle.sink_tables("out")[0]
        stats = handle.stats()
        assert handle.progress() == {"df": (n, n)}  # rows, not batches
    finally:
        cluster.kill_topology(name)
    rows, even, score, max_rows = (pc.sum(table.column(c)).as_py() for c in
                                   ("rows", "even", "score_sum", "max_rows"))
    assert (rows, even) == (n, n // 2)
    assert score == sum(i * 0.5 for i in range(0, n, 2))
    assert max(table.column("max_rows").to_pylist()) <= 1000
    assert stats.total("df", "emitted") >= n // 1000  # batches, not rows
    assert stats.total("df", "emitted") < n // 100
    assert stats.total("df", "acked") == stats.total("df", "emitted")
