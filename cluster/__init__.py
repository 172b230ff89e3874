"""Placing topologies on Ray: ``LocalCluster``, the topology handle, Spark on Ray."""

from cluster._handle import TopologyFailed, TopologyHandle
from cluster._local import LocalCluster
from cluster._spark import (
    JAVA_MISSING,
    SparkUnavailableError,
    check_java,
    java_add_opens,
    start_spark,
    stop_spark,
)
from cluster._stats import TaskStats, TopologyStats, WorkerStats
from cluster._submit import assign_tasks, submit

__all__ = [
    "JAVA_MISSING", "LocalCluster", "SparkUnavailableError", "TaskStats", "TopologyFailed",
    "TopologyHandle", "TopologyStats", "WorkerStats", "assign_tasks", "check_java",
    "java_add_opens", "start_spark", "stop_spark", "submit",
]
