"""One Ray per test session, one Spark session per test session (marker ``spark``), and the
worker layouts an integration scenario runs on (fixture ``workers``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

import tests.components as components
from tests import _s3

#: fixtures that start (or need) Ray, and those that need a Spark session on it
RAY_FIXTURES = frozenset({"cluster", "ray_head", "spark"})
SPARK_FIXTURES = frozenset({"spark"})


def pytest_configure(config):
    """Compile the project's modules to bytecode once, before any Ray worker starts.

    Every executor, transfer and acker actor is a fresh Python process that imports the
    project; where ``PYTHONDONTWRITEBYTECODE`` is set (CI's environment sets it) no import
    writes ``__pycache__``, so each process would compile the same sources again.
    ``compileall`` writes the cache regardless; imports then read it (git ignores it).
    """
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in ("actors", "topology", "backpressure", "cluster", "connectors",
                    "examples", "tests"):
        if (root / package).is_dir():
            compileall.compile_dir(str(root / package), quiet=1)


def pytest_collection_modifyitems(config, items):
    """Mark every test that uses a Ray or Spark fixture (directly or through another
    fixture) ``ray`` or ``spark``, so ``-m "not ray and not spark"`` runs only the tests
    that need neither; a test that starts Ray itself carries the mark in its module."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & SPARK_FIXTURES:
            item.add_marker(pytest.mark.spark)
        if used & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)

# For the session's cluster only: ray.cluster_utils.Cluster sets up no token of its own
# (Ray 2.60), and this process joins it at an explicit address, for which Ray never turns
# token mode on; off for both keeps them in one mode. (Whether the session would also run
# with Ray's default is not yet checked.) What a user runs drops it and gets Ray's default:
# the CLI and `ray job submit` against tests/_util.RayHead, tests/test_examples.py.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Dummy AWS credentials for moto's loopback S3 server (tests/_s3.py), set before Ray starts
# so that Ray's workers, which write checkpoints to s3://, inherit them; a developer's own
# credentials, if set, are kept (moto accepts any).
for _name, _value in _s3.ENV.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on loopback (``tests/_s3.py``) with the buckets ``savepoints``
    and ``checkpoints``; the credentials are in this process's environment (above)."""
    if _s3.server_binary() is None:
        pytest.skip(_s3.NO_SERVER)
    server = _s3.MotoServer().start()
    try:
        server.create_bucket("savepoints")
        server.create_bucket("checkpoints")
        yield server
    finally:
        server.stop()


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


@dataclass(frozen=True)
class Workers:
    """One worker layout for a topology: ``count`` workers (``topology.workers``), placed by
    Ray's ``placement`` strategy over the session's nodes (``topology.worker.placement``;
    ``None`` leaves the default, which packs them on the driver's node)."""

    count: int
    placement: str | None = None

    def conf(self, conf: dict | None = None) -> dict:
        """``conf`` with this layout's keys added; a key already in ``conf`` wins."""
        layout = {"topology.workers": self.count}
        if self.placement is not None:
            layout["topology.worker.placement"] = self.placement
        return {**layout, **(conf or {})}


#: one worker (executors send to each other's queues, no transfer actor), two packed on one
#: node (the worker-to-worker path through the transfer actors), three spread over the
#: session's three nodes (that path between Ray nodes; one acker per worker by default)
WORKER_LAYOUTS = {"1worker": Workers(1), "2workers": Workers(2),
                  "3workers-spread": Workers(3, "spread")}


#: the layouts on this node only: for a scenario whose cross-node form adds nothing the
#: cross-node tests (test_runtime's groupings and order, test_workers) do not prove
#: already. Use ``@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)``.
SAME_NODE_LAYOUTS = ["1worker", "2workers"]


@pytest.fixture(params=list(WORKER_LAYOUTS))
def workers(request) -> Workers:
    """The scenario's worker layout: the test runs once with each of ``WORKER_LAYOUTS``
    (Bytewax's single- and multi-worker runs of one dataflow). Submit with
    ``workers.conf({...})``."""
    return WORKER_LAYOUTS[request.param]


_names = iter(range(10**6))


@pytest.fixture
def name(request):
    """A unique topology name per test."""
    return f"{request.node.name[:40]}-{next(_names)}".replace("[", "-").replace("]", "")
