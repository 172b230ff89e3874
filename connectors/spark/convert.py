"""The Spark side of a topology's output: a ``DatasetSink``'s Arrow tables as a Spark
DataFrame through RayDP (``TopologyHandle.to_spark``)."""

from __future__ import annotations

from typing import Any

import ray

from connectors.spark.dataframe_spout import raydp_internals_quiet


def raydp_blocks(tables: list) -> tuple[Any, list]:
    """``pyarrow.Table`` s (e.g. a DatasetSink's, one per task) as blocks for RayDP's
    ``ray_dataset_to_spark_dataframe``: their unified schema (types promoted, e.g. int64
    with nulls) and one table per record batch, so that every column of a block is one
    chunk. RayDP turns each block into pandas inside Spark's ``mapInPandas``; pandas >= 3
    reads Arrow strings into a pyarrow-backed dtype, whose column of several chunks goes
    back to Arrow as a ``ChunkedArray``, which pyspark 3.5 rejects (``TypeError: Expected
    Array, got ChunkedArray``); a DatasetSink packs a table every ``batch_rows`` rows, so
    any output longer than that had such columns."""
    import pyarrow as pa

    schema = pa.unify_schemas([t.schema for t in tables], promote_options="permissive")
    blocks = [pa.Table.from_batches([b], schema) for t in tables
              for b in t.cast(schema).to_batches() if b.num_rows]
    return schema, blocks or [schema.empty_table()]


def tables_to_spark(spark, tables: list):
    """``tables`` (``pyarrow.Table`` s, e.g. one per sink task) as a Spark DataFrame of
    ``spark`` (a RayDP session). The blocks go into Ray's object store and RayDP
    (``ray_dataset_to_spark_dataframe``, what ``Dataset.to_spark`` calls) reads them
    lazily; RayDP's Spark master holds their references, so the DataFrame stays valid
    until the Spark session stops. No Ray task runs, so this works when a topology holds
    every CPU.

    Raises:
        ImportError: RayDP is not installed (the ``spark`` extra).
    """
    from raydp.spark import ray_dataset_to_spark_dataframe

    schema, blocks = raydp_blocks(tables)
    with raydp_internals_quiet():
        return ray_dataset_to_spark_dataframe(spark, schema, [ray.put(t) for t in blocks])
