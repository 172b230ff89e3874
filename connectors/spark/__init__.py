"""Spark on Ray through RayDP: DataFrames and Structured Streaming queries as spouts, the
hand-off between Spark's ``foreachBatch`` and the spout, the checks of a streaming query's
sources, Arrow rows, the Spark session on Ray, and a topology's output back to Spark.

Every name is loaded on first use (PEP 562): ``import connectors.spark`` imports neither
Ray, pyarrow nor pyspark. ``topology`` re-exports the two spouts the same way.
"""

from __future__ import annotations

from actors import lazy_attributes

_LAZY = {
    "DataFrameSpout": "connectors.spark.dataframe_spout",
    "raydp_internals_quiet": "connectors.spark.dataframe_spout",
    "StreamingDataFrameSpout": "connectors.spark.streaming_spout",
    "HandoffCore": "connectors.spark.handoff",
    "query_sources": "connectors.spark.sources", "source_problems": "connectors.spark.sources",
    "arrow_rows": "connectors.spark.arrow_rows", "column_values": "connectors.spark.arrow_rows",
    "JAVA_MISSING": "connectors.spark.session", "SparkUnavailableError": "connectors.spark.session",
    "check_java": "connectors.spark.session", "java_add_opens": "connectors.spark.session",
    "start_spark": "connectors.spark.session", "stop_spark": "connectors.spark.session",
    "raydp_blocks": "connectors.spark.convert", "tables_to_spark": "connectors.spark.convert",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
