"""Recovery from a lost Ray node: ``recovery_s_node_loss``.

Runs ``tests/_node_loss.py``'s scenario (a 3-node ``ray.cluster_utils.Cluster`` of its own,
one CPU per node, no dashboard; a stateful word count behind a position-keeping spout,
three workers one per node) with the redis provider on a ``redis-server`` started on a
loopback port: a checkpoint commits halfway, a non-head node is removed (every process on
it killed), a node joins back. The figure is the time from the node's removal until the
checkpoint coordinator has resumed every task in a new generation (each restored,
the restarted ones included), read from the coordinator every 0.1 s; the run must
complete exact. Ray's own detection of the dead node and the rescheduling of its
placement-group bundle are inside the figure.

    python -m benchmarks.node_loss [--runs 1]

Writes benchmarks/results/node_loss.json; the last line is ``recovery_s_node_loss=...``
(the median over the runs). Also run as part ``nodeloss`` of ``benchmarks.state``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import write_result

ROOT = Path(__file__).resolve().parent.parent


def recovery_runs(runs: int) -> dict:
    """``runs`` node losses with the redis provider; each one's result line (see
    ``tests/_node_loss.py``) and the median ``recovery_s``.

    Raises:
        RuntimeError: a run did not complete exact, or no redis-server is installed.
    """
    from tests._redis import RedisServer, server_binary

    if server_binary() is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="node-loss-") as tmp:
            server = RedisServer(os.path.join(tmp, "redis"))
            os.makedirs(server.directory)
            server.start()
            try:
                p = subprocess.run([sys.executable, "-m", "tests._node_loss",
                                    os.path.join(tmp, "run"), str(server.port), "redis-only"],
                                   cwd=ROOT, capture_output=True, text=True, timeout=600)
            finally:
                server.stop()
        lines = [json.loads(x[len("RESULT "):]) for x in p.stdout.splitlines()
                 if x.startswith("RESULT ")]
        if not lines or lines[0].get("outcome") != "complete" or (
                lines[0]["counts"] != lines[0]["expected"]):
            raise RuntimeError(f"a node-loss run did not complete exact: {lines}\n"
                               f"{p.stderr[-3000:]}")
        results.append({k: v for k, v in lines[0].items() if k not in ("counts",
                                                                          "expected")})
    recoveries = [r["recovery_s"] for r in results if r["recovery_s"] is not None]
    return {"runs": results,
            "recovery_s": round(statistics.median(recoveries), 2) if recoveries else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    result = {"command": f"python -m benchmarks.node_loss --runs {args.runs}",
              **recovery_runs(args.runs)}
    write_result("node_loss", result)
    print(f"recovery_s_node_loss={result['recovery_s']}")


if __name__ == "__main__":
    main()
