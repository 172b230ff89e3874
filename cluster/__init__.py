"""Placing topologies on Ray: the plan and its launch, ``LocalCluster``, the topology
handle, typed stats, Spark on Ray.

The Ray-free parts (``cluster._plan``, ``cluster._stats``) import without Ray; the names
below are loaded on first use (PEP 562), as in ``actors``.
"""

from __future__ import annotations

from actors import lazy_attributes

_LAZY = {
    "TopologyFailed": "cluster._handle", "TopologyHandle": "cluster._handle",
    "LocalCluster": "cluster._local",
    "ClusterAuthError": "cluster._auth",
    # Spark on Ray lives in connectors.spark; these stay importable from here
    "JAVA_MISSING": "connectors.spark", "SparkUnavailableError": "connectors.spark",
    "check_java": "connectors.spark", "java_add_opens": "connectors.spark",
    "start_spark": "connectors.spark", "stop_spark": "connectors.spark",
    "TaskStats": "cluster._stats", "TopologyStats": "cluster._stats",
    "WorkerStats": "cluster._stats",
    "TopologyPlan": "cluster._plan", "plan": "cluster._plan",
    "assign_tasks": "cluster._submit", "submit": "cluster._submit",
    "read_state": "actors.state.providers",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
