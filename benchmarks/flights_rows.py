"""The main job's topology phase on the real frame, per-row tuples, beside a plain loop.

examples/flights.py's Spark frame (the 2013 flights joined with carrier and airport names,
in Ray's object store through RayDP) and its topology (``DataFrameSpout`` with one tuple per
row, fields groupings into the route and carrier statistics, totals and ranking), timed from
submit to completion as the job times it. Beside it, in the same run, a plain Python loop
that starts from the same Arrow blocks (``to_pylist`` per column) and computes both
aggregations in one pass: the limit for this work in one Python process. The loop's totals
must equal the topology's (the run fails otherwise).

    python -m benchmarks.flights_rows [--repeat 2]

Writes benchmarks/results/flights_rows.json; the last line is ``key=value ...``.
"""

from __future__ import annotations

import argparse
import os
import time

import ray
import ray.cloudpickle

from benchmarks._common import example, write_result
from cluster import LocalCluster, start_spark, stop_spark

flights = example("flights")

COLUMNS = ("carrier", "carrier_name", "origin", "origin_name", "dest", "dest_name",
           "dep_delay", "arr_delay", "distance")


def plain_loop(block_refs: list) -> tuple[dict, int]:
    """Both aggregations of ``flights.DelayStats`` (route and carrier) in one pass over the
    blocks; returns ``{(kind, key): [flights, arr_n, arr_sum, dep_n, dep_sum, distance]}``
    and the rows seen."""
    acc: dict = {}
    rows = 0
    for ref in block_refs:
        table = ray.get(ref)
        cols = [table.column(c).to_pylist() for c in COLUMNS]
        for carrier, _cn, origin, _on, dest, _dn, dep, arr, dist in zip(*cols, strict=True):
            rows += 1
            for key in (("carrier", carrier), ("origin+dest", f"{origin}-{dest}")):
                a = acc.get(key)
                if a is None:
                    a = acc[key] = [0, 0, 0, 0, 0, 0]
                a[0] += 1
                if arr is not None:
                    a[1] += 1
                    a[2] += arr
                if dep is not None:
                    a[3] += 1
                    a[4] += dep
                a[5] += dist
    return acc, rows


def topology_run(cluster: LocalCluster, df, name: str) -> tuple[float, dict, int, list]:
    """One submit of the job's topology; returns (seconds, totals, rows, block refs)."""
    topology, total = flights.build(df)
    spout = topology.components["flights"].obj
    t0 = time.perf_counter()
    handle = cluster.submit_topology(name, {}, topology)
    if not handle.wait(1800):
        raise SystemExit(f"{name} did not complete:\n{handle.stats().summary()}")
    seconds = time.perf_counter() - t0
    totals = {}
    for t in handle.sink_tables("totals"):
        for r in t.to_pylist():
            totals[(r["kind"], r["key"])] = [r["flights"], r["arr_n"], r["arr_sum"],
                                             r["dep_n"], r["dep_sum"], r["distance"]]
    errors = handle.stats().errors
    cluster.kill_topology(name)
    if errors:
        raise SystemExit(f"{name}: user errors {errors}")
    return seconds, totals, total, spout._block_refs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2,
                    help="topology runs and loop runs, alternating (the best of each counts)")
    args = ap.parse_args()
    ray.cloudpickle.register_pickle_by_value(flights)
    cluster = LocalCluster(address=os.environ.get("RAY_ADDRESS"))
    spark = start_spark("flights-rows", executor_memory="1GB")
    topo_s, loop_s = [], []
    try:
        df = flights.load_flights(spark).cache()
        n = df.count()
        for r in range(args.repeat):
            seconds, totals, total, refs = topology_run(cluster, df, f"flights-rows-{r}")
            topo_s.append(seconds)
            t0 = time.perf_counter()
            acc, rows = plain_loop(refs)
            loop_s.append(time.perf_counter() - t0)
            if rows != total or total != n:
                raise SystemExit(f"rows: loop {rows}, spout {total}, Spark {n}")
            if acc != totals:
                diff = [k for k in set(acc) | set(totals) if acc.get(k) != totals.get(k)]
                raise SystemExit(f"{len(diff)} totals differ between loop and topology, "
                                 f"e.g. {diff[:3]}")
    finally:
        stop_spark()
        cluster.shutdown()
    rows_per_s = n / min(topo_s)
    loop_per_s = n / min(loop_s)
    write_result("flights_rows", {
        "rows": n, "repeat": args.repeat, "topology_seconds": topo_s, "loop_seconds": loop_s,
        "flights_rows_per_s": rows_per_s, "plain_loop_rows_per_s": loop_per_s,
        "groups_checked": len(acc)})
    print(f"topology (submit to completion): best {min(topo_s):.1f} s of {topo_s}; plain "
          f"loop from the same blocks: best {min(loop_s):.2f} s; {len(acc)} totals equal")
    print(f"flights_rows_per_s={rows_per_s:.0f} flights_plain_loop_ratio="
          f"{rows_per_s / loop_per_s:.3f} plain_loop_rows_per_s={loop_per_s:.0f}")


if __name__ == "__main__":
    main()
