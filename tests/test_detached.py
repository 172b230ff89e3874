"""Detached topologies: a topology submitted by a driver that then exits keeps running,
survives an executor restart after its driver is gone, and is stopped with the CLI, which
frees its actors, placement groups and stored copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import ray

from actors._store import has_topology
from cluster._registry import _placement_groups, attach, find_topologies
from tests._util import until
from tests.test_cli import _cli

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]

DRIVER = """
import sys

import ray.cloudpickle

import tests.components as components
from cluster import LocalCluster
from tests.components import PassBolt, SeqSpout
from topology import TopologyBuilder

ray.cloudpickle.register_pickle_by_value(components)
name, address = sys.argv[1], sys.argv[2]
cluster = LocalCluster(address=address)
b = TopologyBuilder()
b.set_spout("src", SeqSpout(10**9))
b.set_bolt("slow", PassBolt(delay_s=0.001)).shuffle_grouping("src")
handle = cluster.submit_topology(name, {"topology.acker.executors": 0}, b.create_topology(),
                                 detached=True)
print("PREFIX", handle.prefix, flush=True)
cluster.shutdown()  # leaves the detached topology running; then this driver exits
"""


def test_a_detached_topology_outlives_its_driver_and_is_killed_with_the_cli(cluster, name):
    gcs = ray.get_runtime_context().gcs_address
    proc = subprocess.run([sys.executable, "-c", DRIVER, name, gcs], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prefix = next(ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("PREFIX"))
    try:
        # the driver is gone; its topology runs on
        assert name in find_topologies()
        handle = attach(name)
        until(lambda: handle.stats().total("slow", "executed") > 0, 60, "first tuples")
        before = handle.stats().total("slow", "executed")
        until(lambda: handle.stats().total("slow", "executed") > before + 100, 60, "progress")

        # an executor restarted now reads its topology from the GCS, not from the driver
        (slow,) = [t.task for t in handle.stats().tasks if t.component == "slow"]
        ray.kill(handle.actors[slow], no_restart=False)
        until(lambda: handle.restarts().get(f"task-{slow}", 0) >= 1, 60, "restart")
        until(lambda: (s := handle.stats().component("slow")[0]).restarted and s.executed > 0,
              60, "the restarted executor running")
        assert has_topology(prefix) and _placement_groups(prefix)

        killed = _cli("kill", name, address=gcs)
        assert killed.returncode == 0, killed.stderr
        assert name not in find_topologies()
        assert not has_topology(prefix)
        assert _placement_groups(prefix) == []
    finally:
        if name in find_topologies():
            attach(name).kill()
