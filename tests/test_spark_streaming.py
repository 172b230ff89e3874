"""StreamingDataFrameSpout (issue 20): a Spark Structured Streaming query as a live spout,
on the ``rate-micro-batch`` source (rows per micro-batch fixed by ``rowsPerBatch``; value
v is row v of the stream, so batch b holds values ``[b * n, (b + 1) * n)``)."""

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
         .option("numPartitions", 2))
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

        until(lambda: len(rows()) >= 400 and spout.empty_batches >= 2, 90,
              "400 rows and two empty micro-batches")
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
