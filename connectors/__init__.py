"""Connectors: sources and sinks that bring other systems into a topology, outside the
core (as Storm keeps ``storm-kafka-client`` and ``storm-redis``, and Flink its connectors,
apart from the runtime). Each subpackage imports its system's client only when used.

- ``connectors.spark``: Spark DataFrames and Structured Streaming queries as spouts, and a
  topology's output back to Spark, through RayDP.
"""
