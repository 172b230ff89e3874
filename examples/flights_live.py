"""The live main job: the NYC 2013 flights landing day by day, through Spark Structured
Streaming into event-time windows, checked against Spark SQL at the end.

1. **Landing.** The 2013 flights are cut into one CSV file per day (rows in scheduled
   order, ``time_hour``; a ``flight_id`` column first: the row's number in flights.csv)
   and land in ``<out>/landing/`` at a steady pace: the year in about three minutes by
   default. Each file is written in ``<out>/staging/`` and renamed in, so Spark never
   reads half a file. A few days (``--late-days``) land two days behind, so the windows'
   late stream has work, and a few malformed lines (``--malformed``) are slipped in.
2. **Spark.** A Structured Streaming query reads the landing directory with an explicit
   schema, ``maxFilesPerTrigger`` (which bounds the rows of a micro-batch, so backpressure
   reaches Spark) and ``PERMISSIVE`` mode, which keeps a malformed line in the
   ``_corrupt`` column instead of failing; it joins the carrier and airport names as
   examples/flights.py does. Within a micro-batch Spark's file source orders files by
   size, not by arrival, so the query puts each micro-batch back in landing order (one
   partition; rows by file, then ``time_hour``): the stream is the order things landed.
3. **Topology.** A ``StreamingDataFrameSpout`` brings the micro-batches in; ``screen``
   sends malformed rows to their own stream (counted and written out) and the flights on;
   per origin airport (fields grouping) and scheduled hour (``time_hour`` as event time),
   ``hourly`` computes tumbling one-hour windows and ``three_hourly`` three-hour windows
   sliding by one hour (flights, cancellations = no ``dep_time``, mean departure delay;
   examples/flights_windows.py's bolt, plus the airport's name), with a watermark lag of
   ``--lag-hours`` and a late stream. ``windows`` writes each window as it closes through
   a ``ParquetSink`` into ``<out>/windows/``, exactly once (its files are moved in when
   the checkpoint after their windows commits); ``out`` writes the late rows
   (``late.jsonl``) and the malformed lines (``malformed.jsonl``). A progress line shows
   the landing, Spark, the hand-off and the windows while it runs.
4. **End and check.** Once Spark has read every landed file the job drains the topology
   (``handle.drain()``: no new micro-batch, the open windows fire) and checks itself in
   Spark: every landed line reached the topology once and none failed; the malformed
   lines counted equal those injected and those Spark's batch reader flags; windows plus
   late rows account for every landed flight exactly; every closed window equals Spark
   SQL's ``window()`` aggregation of the same files less the late rows, counts exactly
   and means to 1e-9 (examples/flights_windows.py's check).

Acking is on, so the topology runs checkpoints with persistent windows: a micro-batch is
committed in Spark only once the checkpoint holding its rows (in the windows' checkpointed
contents or beyond them) has committed, so a failed task loses nothing Spark committed
(docs/spark-streaming.md). This run injects no failures (the tests kill tasks).

    python examples/flights_live.py [--days 365] [--landing-seconds 180] [--out out/flights_live]

A short run: ``--days 10 --landing-seconds 10``. Runs on an embedded Ray (or the cluster in
RAY_ADDRESS); prints a line starting ``CHECK PASSED`` and exits 0 only if the check passes.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import flights_windows
from flights import data_dir, flights_csv
from flights_windows import KINDS, WINDOW_FIELDS, OriginWindows, Run, check

from cluster import LocalCluster, start_spark, stop_spark
from topology import Bolt, Duration, ParquetSink, StreamingDataFrameSpout, TopologyBuilder

#: the landed files' columns: flights.csv's, with the row's number in it first
CSV_COLUMNS = ("flight_id", "year", "month", "day", "dep_time", "sched_dep_time",
               "dep_delay", "arr_time", "sched_arr_time", "arr_delay", "carrier", "flight",
               "tailnum", "origin", "dest", "air_time", "distance", "hour", "minute",
               "time_hour")
#: the explicit schema (a streaming file source infers none); ``_corrupt`` holds a line
#: that does not parse (PERMISSIVE mode)
SCHEMA = ("flight_id LONG, year INT, month INT, day INT, dep_time INT, sched_dep_time INT, "
          "dep_delay DOUBLE, arr_time INT, sched_arr_time INT, arr_delay DOUBLE, "
          "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, "
          "air_time DOUBLE, distance DOUBLE, hour INT, minute INT, time_hour TIMESTAMP, "
          "_corrupt STRING")
CSV_OPTIONS = {"header": "true", "nullValue": "NA", "mode": "PERMISSIVE",
               "columnNameOfCorruptRecord": "_corrupt"}
#: what the spout emits: the flight's fields the windows need, names from the joins, the
#: landing file's sequence number, and the malformed line (None for a good row)
SPOUT_FIELDS = ("flight_id", "origin", "origin_name", "carrier", "carrier_name",
                "time_hour", "dep_time", "dep_delay", "landing_seq", "_corrupt")
FLIGHT_FIELDS = SPOUT_FIELDS[:-1]
LIVE_WINDOW_FIELDS = (*WINDOW_FIELDS, "origin_name")


def WINDOWS_SCHEMA():  # noqa: N802 (a constant, built on use: pyarrow imports late)
    """The Arrow schema of the windows' Parquet dataset (LIVE_WINDOW_FIELDS): fixed, so a
    file whose windows all lack a mean delay still types it as a double."""
    import pyarrow as pa

    types = (pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64(),
             pa.int64(), pa.float64(), pa.string())
    return pa.schema(list(zip(LIVE_WINDOW_FIELDS, types, strict=True)))
# A micro-batch reads at most this many day files (about 900 flights each): a few thousand
# rows, large enough for RayDP's per-micro-batch cost (docs/spark-streaming.md), small
# enough that the hand-off, and what Spark reads ahead of the topology, stay small.
MAX_FILES_PER_TRIGGER = 6
LATE_BEHIND_DAYS = 2  # a late day lands after the day two days later


# -- the landing -------------------------------------------------------------------------

@dataclass
class DayFile:
    """One file to land: its day, lines (header excluded) and what is known of them."""

    day: str  # 2013-MM-DD
    lines: list[str]
    flights: int
    malformed: int = 0
    max_time_hour_ms: int = 0
    late: bool = False
    seq: int = -1
    name: str = ""
    landed_ms: float | None = None


def _ms(iso: str) -> int:
    return int(datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")
               .replace(tzinfo=timezone.utc).timestamp() * 1000)


def day_files(days: int | None = None, late_days: int = 3, malformed: int = 6
              ) -> list[DayFile]:
    """The first ``days`` days of 2013 (all: None) as day files, in landing order: date
    order, except ``late_days`` days spread over the run, each moved behind the day
    LATE_BEHIND_DAYS later; ``malformed`` bad lines are put in the middle of days spread
    over the run, alternately a line of the wrong shape and a row whose numbers and time
    do not parse."""
    by_day: dict[str, list[list[str]]] = defaultdict(list)
    with open(flights_csv(), newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        th = header.index("time_hour")
        for i, row in enumerate(reader):
            by_day[f"{row[0]}-{int(row[1]):02d}-{int(row[2]):02d}"].append([str(i), *row])
    chosen = sorted(by_day)[:days]
    files = []
    for day in chosen:
        rows = sorted(by_day[day], key=lambda r: r[th + 1])  # stable: CSV order in an hour
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        files.append(DayFile(day, buf.getvalue().splitlines(), len(rows),
                             max_time_hour_ms=_ms(rows[-1][th + 1])))
    n = len(files)
    for k in range(malformed):
        f = files[min(n - 1, (2 * k + 1) * n // (2 * malformed))]
        if k % 2 == 0:
            bad = f"### export of {f.day} interrupted ###"
        else:  # a flight-shaped row whose delay and time do not parse
            bad = ",".join(["999999999", *f.day.split("-"), "517", "515", "two", "830",
                            "819", "11", "UA", "1545", "N14228", "EWR", "IAH", "227",
                            "1400", "5", "15", "some time on " + f.day])
        f.lines.insert(len(f.lines) // 2, bad)
        f.malformed += 1
    order = list(range(n))
    for k in range(late_days):
        i = (k + 1) * n // (late_days + 1)
        if i + LATE_BEHIND_DAYS >= n:
            continue
        files[i].late = True
        order.remove(i)
        order.insert(order.index(i + LATE_BEHIND_DAYS) + 1, i)
    return [files[i] for i in order]


class Landing(threading.Thread):
    """Lands day files one by one at ``interval_s`` seconds apart (the attribute may be
    changed while it runs): each is written in ``staging`` and renamed into ``landing``
    (one directory level, same file system), so a reader never sees half a file. Records
    each file's sequence number, name and landing time (epoch ms)."""

    def __init__(self, files: list[DayFile], staging: Path, landing: Path,
                 interval_s: float, prime: int = 0) -> None:
        super().__init__(daemon=True, name="landing")
        self.files, self.staging, self.landing = files, staging, landing
        self.interval_s = interval_s
        #: after ``prime`` files the landing waits for ``go`` (the benchmark lets Spark's
        #: first micro-batches warm up before the paced landing starts)
        self.prime, self.go = prime, threading.Event()
        if not prime:
            self.go.set()
        self.landed: list[DayFile] = []
        self.stop_event = threading.Event()
        self.header = ",".join(CSV_COLUMNS)

    def run(self) -> None:
        next_at = time.monotonic()
        for seq, f in enumerate(self.files):
            if self.stop_event.wait(max(0.0, next_at - time.monotonic())):
                return
            if seq == self.prime and not self.go.is_set():
                while not self.go.wait(0.2):
                    if self.stop_event.is_set():
                        return
                next_at = time.monotonic()
            f.seq, f.name = seq, f"{seq:05d}-{f.day}.csv"
            tmp = self.staging / f.name
            tmp.write_text(self.header + "\n" + "\n".join(f.lines) + "\n")
            os.replace(tmp, self.landing / f.name)
            f.landed_ms = time.time() * 1000
            self.landed.append(f)
            next_at = max(next_at + self.interval_s, time.monotonic() - self.interval_s)

    @property
    def landed_lines(self) -> int:
        return sum(f.flights + f.malformed for f in self.landed)


# -- Spark ---------------------------------------------------------------------------------

def reference_tables(spark):
    """Carrier names and airport names (as origin), as examples/flights.py joins them."""
    from pyspark.sql import functions as F

    opts = {"header": True, "inferSchema": True, "nullValue": "NA"}
    airlines = (spark.read.options(**opts).csv(str(data_dir() / "airlines.csv"))
                .withColumnRenamed("name", "carrier_name"))
    airports = spark.read.options(**opts).csv(str(data_dir() / "airports.csv"))
    origin = airports.select(F.col("faa").alias("origin"), F.col("name").alias("origin_name"))
    return F.broadcast(airlines.cache()), F.broadcast(origin.cache())


def streaming_frame(spark, landing: Path, max_files: int = MAX_FILES_PER_TRIGGER):
    """The live query's frame: the landing directory read as a stream (explicit schema,
    ``maxFilesPerTrigger``, PERMISSIVE with ``_corrupt``), joined with the carrier and
    airport names, each micro-batch in one partition in landing order: SPOUT_FIELDS."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.schema(SCHEMA).options(**CSV_OPTIONS)
           .option("maxFilesPerTrigger", max_files).csv(str(landing)))
    seq = F.regexp_extract(F.input_file_name(), r"/(\d+)-[^/]*$", 1).cast("int")
    airlines, origins = reference_tables(spark)
    joined = (raw.withColumn("landing_seq", seq)
              .join(airlines, "carrier", "left").join(origins, "origin", "left")
              .select(*SPOUT_FIELDS))

    def in_landing_order(batches):  # nested: pickled by value for Spark's Python workers
        import pyarrow as pa

        batches = list(batches)
        if batches:
            table = pa.Table.from_batches(batches).sort_by(
                [("landing_seq", "ascending"), ("time_hour", "ascending")])
            yield from table.to_batches()

    # Spark cannot sort a stream; within one micro-batch's partition a map can
    return joined.coalesce(1).mapInArrow(in_landing_order, joined.schema)


def landed_frame(spark, files: list[DayFile]):
    """The landed files read again as a batch, with the stream's schema and options."""
    return (spark.read.schema(SCHEMA).options(**CSV_OPTIONS)
            .csv([str(f) for f in files]))


# -- the topology ----------------------------------------------------------------------------

class Screen(Bolt):
    """Sends a malformed row (``_corrupt`` set by Spark) to the ``malformed`` stream as
    ``(landing_seq, line)`` and a flight on, as FLIGHT_FIELDS; both anchored."""

    def declare_output_fields(self, declarer):
        declarer.declare(FLIGHT_FIELDS)
        declarer.declare(("landing_seq", "line"), "malformed")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        bad = tup["_corrupt"]
        if bad is not None:
            self.collector.emit((tup["landing_seq"], bad), "malformed")
        else:
            self.collector.emit(tup.values[:-1])


class NamedOriginWindows(OriginWindows):
    """examples/flights_windows.py's per-origin window (WINDOW_FIELDS), with the origin
    airport's name from Spark's join. Persistent: its open windows are checkpointed, and
    Spark commits a micro-batch once the checkpoint holding its rows has committed
    (docs/spark-streaming.md)."""

    outputs = LIVE_WINDOW_FIELDS

    def execute(self, window):
        by_origin = defaultdict(list)
        for t in window.get():
            by_origin[t["origin"]].append(t)
        for origin, rows in sorted(by_origin.items()):
            delays = [t["dep_delay"] for t in rows if t["dep_delay"] is not None]
            self.collector.emit(
                (self.kind, origin, window.start_timestamp, window.end_timestamp, len(rows),
                 sum(t["dep_time"] is None for t in rows), len(delays),
                 sum(delays) / len(delays) if delays else None, rows[0]["origin_name"]))


class Out(Bolt):
    """Writes, one JSON object a line as they arrive: each late row to ``late.jsonl``
    (``kind``, ``flight_id``, ``landing_seq``) and each malformed line to
    ``malformed.jsonl``. Line-buffered: a line is in the file once ``execute`` returns.
    (The closed windows go to a ``ParquetSink``, exactly once.)"""

    def __init__(self, out_dir: str, kinds: dict[str, str]) -> None:
        self.out_dir = out_dir
        self.kinds = kinds  # windowed bolt's component id → its kind

    def prepare(self, conf, context, collector):
        self.files = {k: open(os.path.join(self.out_dir, f"{k}.jsonl"), "a", buffering=1)
                      for k in ("late", "malformed")}
        self.id_i, self.seq_i = FLIGHT_FIELDS.index("flight_id"), FLIGHT_FIELDS.index(
            "landing_seq")

    def execute(self, tup):
        if tup.source_stream == "malformed":
            rec, to = {"landing_seq": tup["landing_seq"], "line": tup["line"]}, "malformed"
        else:
            v = tup["values"]
            rec, to = {"kind": self.kinds[tup.source_component], "flight_id": v[self.id_i],
                       "landing_seq": v[self.seq_i]}, "late"
        self.files[to].write(json.dumps(rec) + "\n")

    def cleanup(self):
        for f in self.files.values():
            f.close()


def build(df, out_dir: Path, lag_hours: float, screen: Bolt | None = None,
          **spout_options):
    """The live topology over the streaming frame ``df``; returns (topology, spout)."""
    spout = StreamingDataFrameSpout(df, checkpoint_location=str(out_dir / "checkpoint"),
                                    query_name="flights_live", **spout_options)
    b = TopologyBuilder()
    # one spout task: a micro-batch is one block (one partition, in landing order)
    b.set_spout("flights", spout)
    b.set_bolt("screen", screen or Screen()).local_or_shuffle_grouping("flights")
    out = b.set_bolt("out", Out(str(out_dir), {k.component: kind
                                               for kind, k in KINDS.items()}))
    out.global_grouping("screen", "malformed")
    windows_out = b.set_bolt("windows", ParquetSink(str(out_dir / "windows"),
                                                    schema=WINDOWS_SCHEMA()))
    for kind, k in KINDS.items():
        bolt = (NamedOriginWindows(kind)
                .with_timestamp_field("time_hour")
                .with_lag(Duration.minutes(round(lag_hours * 60)))
                .with_late_tuple_stream("late")
                .with_persistence())
        if k.hours == k.slide_hours:
            bolt.with_tumbling_window(Duration.hours(k.hours))
        else:
            bolt.with_window(Duration.hours(k.hours), Duration.hours(k.slide_hours))
        b.set_bolt(k.component, bolt, 2).fields_grouping("screen", ["origin"])
        out.global_grouping(k.component, "late")
        windows_out.global_grouping(k.component)
    return b.create_topology(), spout


def register_for_workers() -> None:
    """Ship this job's bolts to Ray's workers by value (examples/ is not on their path)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(flights_windows)
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def local_cluster() -> LocalCluster:
    """The cluster in RAY_ADDRESS, or an embedded Ray with at least 4 logical CPUs. Ray's
    CPUs are scheduling tokens: each micro-batch's ``ray.data.from_spark`` runs a Ray task
    asking for one CPU (block metadata), and on a 2-core machine the topology's placement
    group and Spark's executor already hold the two, so that task would never run."""
    if os.environ.get("RAY_ADDRESS"):
        return LocalCluster(address=os.environ["RAY_ADDRESS"])
    return LocalCluster(num_cpus=max(4, os.cpu_count() or 1))


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# -- running it ------------------------------------------------------------------------------

@dataclass
class Live:
    """A running live job: its paths, landing, topology handle and spout."""

    out: Path
    landing: Landing
    handle: object
    spout: StreamingDataFrameSpout
    started: float = field(default_factory=time.monotonic)

    def progress(self) -> dict:
        """What the progress line shows (and the benchmark samples)."""
        st = self.handle.stats()
        hs = self.spout.handoff_stats()
        wins = {w["component"]: w for w in st.windows()}
        wm = [w["watermark_ms"] for w in wins.values() if w["watermark_ms"] is not None]
        return {"t": time.monotonic() - self.started, "landed_files": len(self.landing.landed),
                "landed_lines": self.landing.landed_lines, "spark_rows": hs["rows_in"],
                "micro_batches": hs["batches_in"], "handoff_rows": hs["held_rows"],
                "handoff_state": hs["state"], "handoff_error": hs["error"],
                "fired": sum(w["fired"] for w in wins.values()),
                "late": sum(w["late"] for w in wins.values()),
                "watermark_ms": min(wm) if wm else None,
                "screened": st.total("screen", "executed"), "stats": st, "handoff": hs}

    def line(self, p: dict) -> str:
        wm = (datetime.fromtimestamp(p["watermark_ms"] / 1000, timezone.utc)
              .strftime("%m-%d %H:%M") if p["watermark_ms"] else "-")
        return (f"[{p['t']:6.1f} s] landed {p['landed_files']}/{len(self.landing.files)} "
                f"days ({p['landed_lines']:,} lines) | Spark {p['spark_rows']:,} rows in "
                f"{p['micro_batches']} micro-batches | hand-off {p['handoff_rows']:,} | "
                f"topology {p['screened']:,} | windows fired {p['fired']:,}, late "
                f"{p['late']:,} | watermark {wm}")


def start(cluster, spark, out: Path, files: list[DayFile], interval_s: float,
          lag_hours: float, name: str = "flights-live", screen: Bolt | None = None,
          max_files: int = MAX_FILES_PER_TRIGGER, conf: dict | None = None,
          prime: int = 0) -> Live:
    """Fresh directories, the topology submitted (its query started), the landing
    started; returns the running job."""
    for sub in ("landing", "staging", "checkpoint"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    for k in ("late", "malformed"):
        (out / f"{k}.jsonl").unlink(missing_ok=True)
    shutil.rmtree(out / "windows", ignore_errors=True)
    register_for_workers()
    topology, spout = build(streaming_frame(spark, out / "landing", max_files), out.resolve(),
                            lag_hours, screen)
    handle = cluster.submit_topology(name, dict(conf or {}), topology)
    landing = Landing(files, out / "staging", out / "landing", interval_s, prime)
    landing.start()
    return Live(out, landing, handle, spout)


def wait_all_read(live: Live, timeout: float, every_s: float = 5.0, show=print) -> dict:
    """Wait (showing progress) until the landing is done and Spark has handed every
    landed line to the topology; returns the last progress. Raises SystemExit if the
    query failed or the timeout passed."""
    t_end = time.monotonic() + timeout
    tty = sys.stdout.isatty()
    last_line = 0.0
    while True:
        p = live.progress()
        done = (not live.landing.is_alive()
                and p["spark_rows"] >= live.landing.landed_lines
                and p["screened"] >= p["spark_rows"])
        now = time.monotonic()
        if tty:
            print("\r" + live.line(p), end="", flush=True)
        elif done or now - last_line >= every_s:
            show(live.line(p))
            last_line = now
        if done:
            if tty:
                print()
            return p
        if p["handoff_state"] == "failed":
            raise SystemExit(f"the Spark query failed: {p['handoff_error']}")
        if now > t_end:
            raise SystemExit(f"Spark had not read every landed file within {timeout:.0f} s")
        time.sleep(1.0 if tty else 0.5)


def run_check(spark, live: Live, stats, lag_hours: float, late_expected: bool
              ) -> tuple[list[str], dict]:
    """The end-of-run check (module docstring, step 4); returns (failures, figures)."""
    from pyspark.sql import functions as F

    files = live.landing.landed
    n_flights = sum(f.flights for f in files)
    n_injected = sum(f.malformed for f in files)
    hs = live.spout.handoff_stats()
    failures = []

    # every landed line reached the topology once, none failed (no replays: none counted
    # twice), nothing went wrong in a bolt
    lines = n_flights + n_injected
    screened = stats.total("screen", "executed")
    if hs["rows_in"] != lines or screened != lines:
        failures.append(f"{lines:,} lines landed; Spark handed over {hs['rows_in']:,}, "
                        f"screen executed {screened:,}")
    failed = stats.total("flights", "failed")
    acked = stats.total("flights", "acked")
    if failed or acked != lines:
        failures.append(f"{acked:,} rows acked and {failed:,} failed of {lines:,}")
    for e in stats.errors:
        failures.append(f"error in {e['component']}:{e['task']} ({e['count']}x): "
                        f"{e['error_type']}: {e['message']}")
    fired = {w["component"]: w for w in stats.windows()}
    bad_ts = sum(w["bad"] for w in fired.values())
    if bad_ts:
        failures.append(f"{bad_ts} rows with a bad time_hour reached the windows")

    # malformed: injected = counted by the topology = flagged by Spark's batch reader
    landed = landed_frame(spark, [live.out / "landing" / f.name for f in files]).cache()
    spark_bad = landed.where(F.col("_corrupt").isNotNull()).count()
    counted = len(read_jsonl(live.out / "malformed.jsonl"))
    if not (n_injected == counted == spark_bad):
        failures.append(f"malformed lines: {n_injected} injected, {counted} counted by the "
                        f"topology, {spark_bad} flagged by Spark's batch read")

    # windows plus late rows = every landed flight; windows = Spark SQL's less the late
    good = landed.where(F.col("_corrupt").isNull()).select(
        "flight_id", "origin", "time_hour", "dep_time", "dep_delay").cache()
    n_good = good.count()
    if n_good != n_flights:
        failures.append(f"Spark reads {n_good:,} flights in the landed files, "
                        f"{n_flights:,} were written")
    # the windows as the ParquetSink committed them (Spark skips its _staging directory)
    windows = spark.read.parquet(str(live.out / "windows")).select(*WINDOW_FIELDS)
    n_rows = windows.count()
    n_distinct = windows.select("kind", "origin", "start_ms").distinct().count()
    if n_rows != n_distinct:
        failures.append(f"the Parquet windows hold {n_rows - n_distinct:,} duplicate "
                        f"windows ({n_rows:,} rows, {n_distinct:,} distinct)")
    late_ids = (spark.read.schema("kind STRING, flight_id LONG")
                .json(str(live.out / "late.jsonl")) if (live.out / "late.jsonl").exists()
                else spark.createDataFrame([], "kind string, flight_id long"))
    run = Run(0, "live", "time_hour", 1, Duration.minutes(round(lag_hours * 60)),
              late_expected)
    outcome = check(good, n_good, windows.cache(), late_ids.cache(), run)
    failures += outcome.failures
    if late_expected and not all(outcome.late.values()):
        failures.append(f"days landed late, but late rows per kind: {outcome.late}")
    late_days = {f.seq for f in files if f.late}
    late_rows = read_jsonl(live.out / "late.jsonl")
    figures = {"flights": n_flights, "malformed": n_injected, "windows": outcome.windows,
               "late": outcome.late, "micro_batches": hs["batches_in"],
               "max_handoff_rows": hs["max_held_rows"],
               "late_from_late_days": sum(r["landing_seq"] in late_days for r in late_rows),
               "fired": {c: w["fired"] for c, w in fired.items()}}
    return failures, figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=None,
                    help="land only the first N days of 2013 (default: all 365)")
    ap.add_argument("--landing-seconds", type=float, default=180.0,
                    help="time to land all the days, at a steady pace (default 180)")
    ap.add_argument("--late-days", type=int, default=3,
                    help=f"days that land {LATE_BEHIND_DAYS} days behind (default 3)")
    ap.add_argument("--malformed", type=int, default=6,
                    help="malformed lines slipped into the files (default 6)")
    ap.add_argument("--lag-hours", type=float, default=3.0,
                    help="the windows' watermark lag (default 3 h)")
    ap.add_argument("--out", default="out/flights_live",
                    help="working directory: landing/, checkpoint/, the JSONL outputs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    files = day_files(args.days, args.late_days, args.malformed)
    interval = args.landing_seconds / len(files)
    out = Path(args.out)
    cluster = local_cluster()
    spark = start_spark("flights-live", executor_memory="1GB",
                        configs={"spark.sql.shuffle.partitions": "4",
                                 "spark.sql.session.timeZone": "UTC"})
    try:
        print(f"landing {len(files)} days ({sum(f.flights for f in files):,} flights, "
              f"{sum(f.late for f in files)} days {LATE_BEHIND_DAYS} days behind, "
              f"{sum(f.malformed for f in files)} malformed lines) in {out / 'landing'}, "
              f"one every {interval:.2f} s")
        live = start(cluster, spark, out, files, interval, args.lag_hours)
        t0 = time.monotonic()
        try:
            wait_all_read(live, timeout=args.landing_seconds + 1800)
            t_read = time.monotonic() - t0
            t_drain = time.monotonic()
            if not live.handle.drain(600):
                print(live.handle.stats().summary())
                raise SystemExit("the topology did not drain within 10 min")
            t_drain = time.monotonic() - t_drain
            stats = live.handle.stats()
        finally:
            live.landing.stop_event.set()
            live.handle.kill()
            cluster.topologies.pop("flights-live", None)
        t_check = time.monotonic()
        failures, fig = run_check(spark, live, stats, args.lag_hours, args.late_days > 0)
        t_check = time.monotonic() - t_check

        print(f"{len(files)} days landed in {args.landing_seconds:.0f} s; every line through "
              f"the topology {t_read:.1f} s after the first landed; drained in "
              f"{t_drain:.1f} s; checked in {t_check:.1f} s")
        print(f"  Spark: {fig['micro_batches']} non-empty micro-batches, hand-off at most "
              f"{fig['max_handoff_rows']:,} rows")
        for kind, k in KINDS.items():
            print(f"  {k.component:<13}{fig['fired'][k.component]:,} windows fired, "
                  f"{fig['windows'][kind]:,} origin-windows, {fig['late'][kind]:,} late rows")
        print(f"  late rows from the {sum(f.late for f in files)} days landed late: "
              f"{fig['late_from_late_days']:,} of "
              f"{sum(fig['late'].values()):,}; windows in {out}/windows/ (Parquet), the "
              f"rest in {out}/*.jsonl")
        if failures:
            print("CHECK FAILED:")
            for f in failures:
                print(f"  {f}")
            return 1
        l1, l3 = fig["late"]["1h"], fig["late"]["3h"]
        print(f"CHECK PASSED: {len(files)} days landed live ({fig['flights']:,} flights, "
              f"{fig['malformed']} malformed lines counted); windows plus late rows account "
              f"for every flight ({l1:,} late hourly, {l3:,} late three-hourly); the "
              f"{fig['windows']['1h']:,} hourly and {fig['windows']['3h']:,} three-hour "
              f"windows per origin, read back from the ParquetSink's dataset, each once, "
              f"equal Spark SQL's window() aggregation of the landed files less the late "
              f"rows")
        return 0
    finally:
        stop_spark()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
