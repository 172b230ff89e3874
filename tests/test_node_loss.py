"""A whole Ray node lost mid-stream (executors, a transfer actor): with state where every
node reads it (Redis, or checkpoints on s3://: moto's loopback server) the topology
completes exact in bounded time; with the ``local`` provider, whose files died with the
node, it fails loudly naming the task and the path, never restoring an empty state. Runs
``tests/_node_loss.py`` in a process of its own, with a 3-node Ray cluster of its own
(the session's cannot lose a node without its other tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._redis import NO_SERVER, RedisServer, server_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(server_binary() is None, reason=NO_SERVER)
def test_a_lost_node_completes_exact_on_redis_and_s3_and_fails_loudly_on_local(tmp_path,
                                                                               s3):
    server = RedisServer(str(tmp_path / "redis"))
    os.makedirs(server.directory)
    server.start()
    try:
        p = subprocess.run([sys.executable, "-m", "tests._node_loss", str(tmp_path),
                            str(server.port), "--s3", s3.uri("checkpoints", "nodeloss")],
                           cwd=ROOT, capture_output=True, text=True, timeout=480)
    finally:
        server.stop()
    results = [json.loads(line[len("RESULT "):]) for line in p.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert p.returncode == 0 and len(results) == 3, p.stderr[-4000:]
    redis, on_s3, local = results
    for shared in (redis, on_s3):
        assert shared["outcome"] == "complete", shared
        assert shared["counts"] == shared["expected"]  # exact: nothing lost, nothing twice
    assert on_s3["objects"] > 0, on_s3  # (written to the server)
    assert local["outcome"] == "failed", local
    lost = [t for t in local["lost_tasks"] if f"task {t}:" in local["failure"]]
    assert lost and f"task-{lost[0]}.db" in local["failure"], local["failure"]
    assert str(tmp_path) in local["failure"] and "redis" in local["failure"]
