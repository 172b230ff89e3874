"""The ``storm-on-ray`` command against the test session's cluster: list, stats,
deactivate / activate and kill of a topology submitted by this process; a clear exit code
when no cluster is reachable. Against a cluster with Ray's token authentication on: the
commands work with the user's token, and give a plain answer when the token is wrong or
missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from cluster import TopologyFailed
from tests._util import RayHead, until
from tests.components import PassBolt, SeqSpout
from topology import TopologyBuilder

pytestmark = pytest.mark.ray

CLI = str(Path(sys.executable).with_name("storm-on-ray"))


def _cli(*args: str, address: str | None = None,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: this environment (or ``env``) without RAY_ADDRESS."""
    env = {k: v for k, v in (os.environ if env is None else env).items()
           if k != "RAY_ADDRESS"}
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


ROOT = Path(__file__).resolve().parents[1]

#: A driver that submits a detached topology to the cluster at argv[2] and exits.
DETACHED_DRIVER = """
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
cluster.submit_topology(name, {"topology.acker.executors": 0}, b.create_topology(),
                        detached=True)
cluster.shutdown()
"""


def test_cli_with_token_authentication_on(tmp_path):
    """A head started as a user starts one (``ray start --head``, Ray's default
    authentication with a token present): every command works with the user's token, and
    a wrong or missing token is said to be that, at once, with its own exit status."""
    head = RayHead()
    name = "authwc"
    try:
        head.wait_ready()
        driver = subprocess.run([sys.executable, "-c", DETACHED_DRIVER, name, head.gcs],
                                cwd=ROOT, env=head.env, capture_output=True, text=True,
                                timeout=300)
        assert driver.returncode == 0, driver.stderr[-3000:]

        listed = _cli("list", address=head.gcs, env=head.env)
        assert listed.returncode == 0 and name in listed.stdout, listed.stderr[-2000:]
        stats = until(lambda: (st := _cli("stats", name, address=head.gcs, env=head.env))
                      .returncode == 0 and st, 60, "stats")
        assert {ln.split()[0] for ln in stats.stdout.splitlines()[2:]} >= {"src", "slow"}
        for command in ("deactivate", "activate"):
            done = _cli(command, name, address=head.gcs, env=head.env)
            assert done.returncode == 0, done.stderr[-2000:]

        started = time.monotonic()
        wrong = _cli("list", address=head.gcs, env={**head.env, "RAY_AUTH_TOKEN": "x" * 64})
        assert wrong.returncode == 3, wrong.stderr[-2000:]
        assert "refused this process's authentication token" in wrong.stderr, wrong.stderr
        assert "RAY_AUTH_TOKEN" in wrong.stderr
        assert time.monotonic() - started < 15  # not 20 s of retries, then "unreachable"

        # no token anywhere: not in the environment, none under this HOME
        bare = {k: v for k, v in head.env.items() if k != "RAY_AUTH_TOKEN_PATH"}
        none = _cli("stats", name, address=head.gcs, env={**bare, "HOME": str(tmp_path)})
        assert none.returncode == 3, none.stderr[-2000:]
        assert "requires an authentication token and this process has none" in none.stderr

        killed = _cli("kill", name, address=head.gcs, env=head.env)
        assert killed.returncode == 0, killed.stderr[-2000:]
        assert name not in _cli("list", address=head.gcs, env=head.env).stdout
    finally:
        head.stop()
