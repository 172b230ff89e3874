"""One Ray per test session, one Spark session per test session (marker ``spark``)."""

from __future__ import annotations

import os

import pytest

import tests.components as components

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def cluster():
    """A ``LocalCluster`` of 3 Ray nodes on this machine (2 CPUs each), shared by every Ray
    test; topologies pack on the driver's node unless they ask to spread."""
    import ray.cloudpickle

    from cluster import LocalCluster

    ray.cloudpickle.register_pickle_by_value(components)
    c = LocalCluster(nodes=3, num_cpus=2)
    yield c
    c.shutdown()


@pytest.fixture(scope="session")
def spark(cluster):
    """A RayDP Spark session on the shared Ray (about 10 s to start)."""
    from cluster import start_spark, stop_spark

    session = start_spark("storm-on-ray-tests", executor_memory="1GB")
    yield session
    stop_spark()


_names = iter(range(10**6))


@pytest.fixture
def name(request):
    """A unique topology name per test."""
    return f"{request.node.name[:40]}-{next(_names)}".replace("[", "-").replace("]", "")
