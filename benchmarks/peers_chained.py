"""``peers.py``'s chained, unchained and Bytewax rows only (its functions, its config), for
A/B runs against an older tree.

Run from the tree under test, with that tree first on the path, so the topology and
``benchmarks.peers`` are the tree's own while this script stays the same on both sides::

    cd <tree> && PYTHONPATH=<tree> python /path/to/benchmarks/peers_chained.py 300000

Prints one ``key=value ...`` line (rows/s of each, ``bytewax_ratio``, ``chaining_speedup``,
executor CPU per row); writes no result file: the A/B's driver collects the lines
(docs/benchmarks.md, "The per-tuple path").
"""

from __future__ import annotations

import sys

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks.peers import CONF, bytewax_run, ours_with_cpu
from benchmarks.throughput import expected_counts
from cluster import LocalCluster


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(address="local", num_cpus=2)
    cpu: dict = {}
    rate: dict = {}
    try:
        for key, conf in (("chained", CONF),
                          ("unchained", {**CONF, "topology.operator.chaining": False})):
            dt, counts = ours_with_cpu(cluster, n, conf, pipeline.build_chainable(n), cpu, key)
            if counts != expected_counts(n):
                raise SystemExit(f"{key}: counts differ from the expected ones")
            rate[key] = n / dt
    finally:
        cluster.shutdown()
    dt, counts = bytewax_run(n)
    if counts != expected_counts(n):
        raise SystemExit("bytewax: counts differ from the expected ones")
    rate["bytewax"] = n / dt
    out = {"chained_rows_per_s": rate["chained"], "unchained_rows_per_s": rate["unchained"],
           "bytewax_rows_per_s": rate["bytewax"],
           "bytewax_ratio": rate["chained"] / rate["bytewax"],
           "chaining_speedup": rate["chained"] / rate["unchained"],
           "chained_cpu_us_per_row": cpu["chained"] / n * 1e6,
           "unchained_cpu_us_per_row": cpu["unchained"] / n * 1e6}
    print(" ".join(f"{k}={v:.4g}" for k, v in out.items()), flush=True)


if __name__ == "__main__":
    main()
