"""The ``storm-on-ray`` command against the test session's cluster (issue 6): list, stats,
deactivate / activate and kill of a topology submitted by this process; a clear exit code
when no cluster is reachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from cluster import TopologyFailed
from tests._util import until
from tests.components import PassBolt, SeqSpout
from topology import TopologyBuilder

pytestmark = pytest.mark.ray

CLI = str(Path(sys.executable).with_name("storm-on-ray"))


def _cli(*args: str, address: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    addr = ["--address", address] if address else []
    return subprocess.run([CLI, *addr, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_cli_lists_shows_pauses_resumes_and_kills_a_topology(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("slow", PassBolt(delay_s=0.001)).shuffle_grouping("src")
    handle = cluster.submit_topology(name, {"topology.metrics.interval.secs": 0.5},
                                     b.create_topology())
    gcs = ray.get_runtime_context().gcs_address
    try:
        listed = _cli("list", address=gcs)
        assert listed.returncode == 0 and name in listed.stdout, listed.stderr
        until(lambda: handle.stats().component("slow")[0].executed_per_s > 0, 30)
        stats = _cli("stats", name, address=gcs)
        assert stats.returncode == 0, stats.stderr
        rows = {ln.split()[0]: ln for ln in stats.stdout.splitlines()[2:]}
        assert set(rows) == {"src", "slow", "__acker"}, stats.stdout
        assert "(task " in rows["src"]  # the spout is held back, and by whom

        assert _cli("deactivate", name, address=gcs).returncode == 0
        until(lambda: not handle.stats().component("src")[0].active, 30)
        first = handle.stats().component("src")[0]

        def idle_without_emitting():
            src = handle.stats().component("src")[0]
            assert src.emitted == first.emitted  # no next_tuple calls
            return src.idle_wait_ms - first.idle_wait_ms > 1000

        # the deactivated spout's loop goes on, idle: a second of it without an emit
        until(idle_without_emitting, 30, "the deactivated spout idle for 1 s")
        assert _cli("activate", name, address=gcs).returncode == 0
        until(lambda: handle.stats().total("src", "emitted") > first.emitted, 30)

        missing = _cli("stats", "no-such-topology", address=gcs)
        assert missing.returncode == 1 and "no running topology" in missing.stderr
        assert _cli("kill", name, address=gcs).returncode == 0
        with pytest.raises((TopologyFailed, ray.exceptions.RayError)):
            handle.stats(timeout=10)
        assert name not in _cli("list", address=gcs).stdout
    finally:
        cluster.topologies.pop(name, None)
        handle.kill()


def test_cli_says_when_no_cluster_is_reachable():
    out = _cli("list", address="127.0.0.1:1")
    assert out.returncode == 2 and "no Ray cluster reachable" in out.stderr
