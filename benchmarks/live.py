"""The live job's shape under a rate-controlled landing: latency, Spark following a slowed
topology, the hand-off's rows and the processes' memory.

examples/flights_live.py's job (day files landing in a directory, a Spark Structured
Streaming query with ``maxFilesPerTrigger``, the StreamingDataFrameSpout, hourly and
three-hour event-time windows per origin, acking on) with the landing at ``--days-per-s``
day files a second, in three phases:

1. **Steady** (``--steady-s``): the latency of each window closed meanwhile, from the
   landing of the file that let it close to the window's part file published in the
   ``ParquetSink`` dataset (at the commit of the checkpoint holding it): a row's
   latency from its landing to its window being readable, less the time the window had to
   wait for its close (the landing of later event time). The file that lets a window
   close is the first landed whose newest ``time_hour``, less the lag, reaches the
   window's end; each windowed task's watermark only counts its own origins' rows, so
   this can only make a latency longer, never shorter. Quantiles are over rows (a window
   counts once per flight in it). The landing starts with ``--prime-days`` days and waits
   for their first window (Spark's first micro-batches warm its JVM up), then lands at its
   pace; windows closed in the first ``--warmup-s`` of that are left out.
2. **Slowed** (``--slow-s``): ``screen`` paced to a third of the landing's rows a second
   (a token bucket: one row per 1/capacity s). Spark's input rate is its own: the sum of
   ``numInputRows`` over the sum of the micro-batches' ``durationMs.triggerExecution``,
   from the query's progress, for the micro-batches that started after the phase's first
   ``--settle-s``. The follow error is ``|rate - capacity| / capacity``. The memory: the
   resident set of the driver (with Spark's driver JVM) and of every actor of this Ray
   (the topology, the hand-off, Spark's executors), sampled each second; growth is the
   second half's peak over the first half's.
3. **Catch-up**: pacing off; the rest of the year lands; once Spark has read everything
   the topology drains and the job's own check runs (``windows_checked``: the closed
   windows found equal to Spark SQL's).

    python -m benchmarks.live [--days 100] [--days-per-s 0.5] [--steady-s 60] [--slow-s 120]

Ends with ``e2e_latency_ms_p50=... e2e_latency_ms_p99=... spark_follow_error_pct=...
spark_rows_per_s=... handoff_rows_max=... rss_growth_pct=... windows_checked=N``; writes
benchmarks/results/live.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks._common import EXAMPLES, example, write_result
from cluster import start_spark, stop_spark

job = example("flights", "flights_windows", "flights_live")


class PacedScreen(job.Screen):
    """The job's ``screen``, paced to ``capacity`` rows a second while ``flag`` exists
    (checked every 100 ms): each row waits for its slot, one per 1/capacity s."""

    def __init__(self, flag: str, capacity: float) -> None:
        self.flag, self.capacity = flag, capacity

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.slow, self.check_at, self.next_slot = False, 0.0, 0.0

    def execute(self, tup):
        now = time.monotonic()
        if now >= self.check_at:
            self.slow, self.check_at = os.path.exists(self.flag), now + 0.1
        if self.slow:
            slot = max(self.next_slot, now)
            if slot > now:
                time.sleep(slot - now)
            self.next_slot = slot + 1.0 / self.capacity
        super().execute(tup)


def weighted_quantile(pairs: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile (nearest rank) of values given as (value, weight) pairs.

    Raises:
        ValueError: ``pairs`` is empty (no window closed in the phase).
    """
    if not pairs:
        raise ValueError("no (value, weight) pairs: no window closed in the steady phase")
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    rank, seen = q * total, 0
    for v, w in pairs:
        seen += w
        if seen > rank:
            return v
    return pairs[-1][0]


def committed_windows(dataset: Path) -> list[dict]:
    """Each window of the job's ``ParquetSink`` dataset at ``dataset`` as ``{"end_ms",
    "flights", "written_ms"}`` (paths with a part beginning with ``_`` or ``.``, such as
    its ``_staging`` directory, left out, as Spark's reader does). ``written_ms`` is when
    its part file was moved into the dataset (the file's status change time, epoch ms):
    when the window became readable, at the commit of the checkpoint holding it."""
    import pyarrow.parquet as pq

    out = []
    for f in sorted(dataset.rglob("*.parquet")):
        if any(part.startswith(("_", ".")) for part in f.relative_to(dataset).parts):
            continue  # (as Spark's reader: _staging is not the dataset)
        written_ms = f.stat().st_ctime_ns / 1e6
        t = pq.read_table(f, columns=["end_ms", "flights"])
        out.extend({"end_ms": e, "flights": n, "written_ms": written_ms}
                   for e, n in zip(t.column("end_ms").to_pylist(),
                                   t.column("flights").to_pylist(), strict=True))
    return out


def closers(files: list[job.DayFile]) -> list[tuple[int, float]]:
    """(watermark reached + lag, landing ms) after each landed file, in landing order:
    the newest ``time_hour`` landed so far."""
    out, newest = [], 0
    for f in files:
        newest = max(newest, f.max_time_hour_ms)
        out.append((newest, f.landed_ms))
    return out


def window_latencies(windows: list[dict], files: list[job.DayFile], lag_ms: int,
                     t_from_ms: float, t_to_ms: float) -> list[tuple[float, int]]:
    """(latency ms, flights) of each window whose closing file landed in
    [t_from_ms, t_to_ms) (epoch ms); windows closed only by the drain are left out."""
    import bisect

    marks = closers(files)
    reach = [m for m, _ in marks]
    out = []
    for w in windows:
        i = bisect.bisect_left(reach, w["end_ms"] + lag_ms)
        if i == len(marks):
            continue  # fired by the drain: no landing closed it
        landed = marks[i][1]
        if t_from_ms <= landed < t_to_ms:
            out.append((w["written_ms"] - landed, w["flights"]))
    return out


def processes() -> list:
    """The driver, its children (Spark's driver JVM) and every process of this Ray (its
    command line names this Ray's GCS address, and their children: the raylet's workers
    are the topology's executors, the hand-off, Spark's executor JVMs)."""
    import psutil
    import ray

    gcs = ray.get_runtime_context().gcs_address
    me = psutil.Process()
    procs = {me.pid: me, **{c.pid: c for c in me.children(recursive=True)}}
    for p in psutil.process_iter(["cmdline"]):
        if p.pid not in procs and gcs in " ".join(p.info["cmdline"] or ()):
            procs[p.pid] = p  # the raylet and its workers, the GCS...
            procs.update((c.pid, c) for c in p.children(recursive=True))
    return list(procs.values())


def rss_mb(procs: list) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except Exception:  # gone (a restarted worker)
            pass
    return total / 2**20


def progress_of(query) -> dict[int, dict]:
    """The query's recent progress, by batch id (plain dicts)."""
    out = {}
    for p in query.recentProgress:
        d = p if isinstance(p, dict) else json.loads(p.json)
        out[d["batchId"]] = d
    return out


def machine_load() -> dict:
    """How quiet the machine is: the load averages and the Ray clusters (``gcs_server``
    processes, this one included) and JVMs running on it."""
    import psutil

    names = [p.info["name"] or "" for p in psutil.process_iter(["name"])]
    return {"loadavg": [round(x, 1) for x in os.getloadavg()],
            "gcs_servers": sum(n.startswith("gcs_server") for n in names),
            "jvms": sum(n == "java" for n in names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=100,
                    help="days of 2013 to land (enough for the phases at the pace)")
    ap.add_argument("--days-per-s", type=float, default=0.5)
    ap.add_argument("--steady-s", type=float, default=60.0)
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument("--prime-days", type=int, default=7)
    ap.add_argument("--slow-s", type=float, default=120.0)
    ap.add_argument("--settle-s", type=float, default=20.0)
    ap.add_argument("--lag-hours", type=float, default=3.0)
    ap.add_argument("--max-files", type=int, default=job.MAX_FILES_PER_TRIGGER)
    ap.add_argument("--out", default=str(EXAMPLES.parent / "out" / "bench_live"))
    args = ap.parse_args()

    files = job.day_files(args.days, late_days=3, malformed=6)
    rows_per_s = args.days_per_s * sum(f.flights for f in files) / len(files)
    capacity = rows_per_s / 3
    out = Path(args.out)
    flag = out.resolve() / "slow"
    flag.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    load_before = machine_load()
    cluster = job.local_cluster()
    spark = start_spark("bench-live", executor_memory="1GB",
                        configs={"spark.sql.shuffle.partitions": "4",
                                 "spark.sql.session.timeZone": "UTC"})
    try:
        live = job.start(cluster, spark, out, files, 1.0 / args.days_per_s, args.lag_hours,
                         name="bench-live", screen=PacedScreen(str(flag), capacity),
                         max_files=args.max_files, prime=args.prime_days,
                         # paced, a micro-batch of max_files days spends max_files * 900 /
                         # capacity s in the topology, past Storm's 30 s default: a timeout
                         # would replay rows, and the check would count them twice
                         conf={"topology.message.timeout.secs": 600})
        samples, prog = [], {}
        # Spark's first micro-batches are slow (JVM warm-up): the landing waits after the
        # first days until their windows fire, then lands at its pace from there
        t_warm = time.monotonic() + 600
        while live.progress()["fired"] == 0:
            if time.monotonic() > t_warm:
                raise SystemExit("no window fired within 10 min of the first days landing")
            time.sleep(1.0)
        live.landing.go.set()
        t0_ms = time.time() * 1000

        def sample(phase: str) -> dict:
            p = live.progress()
            s = {"t": round(p["t"], 2), "phase": phase, "landed_lines": p["landed_lines"],
                 "spark_rows": p["spark_rows"], "screened": p["screened"],
                 "handoff_rows": p["handoff_rows"], "fired": p["fired"]}
            samples.append(s)
            prog.update(progress_of(live.spout.query))
            return s

        t_end = time.monotonic() + args.steady_s
        while time.monotonic() < t_end:
            s = sample("steady")
            print(live.line(live.progress()), flush=True)
            time.sleep(2.0)
        steady_end_ms = time.time() * 1000

        flag.touch()
        slow_start = time.monotonic()
        slow_start_ms = time.time() * 1000
        procs = processes()
        load_during = machine_load()
        t_end = slow_start + args.slow_s
        while time.monotonic() < t_end:
            s = sample("slowed")
            s["rss_mb"] = round(rss_mb(procs), 1)
            time.sleep(1.0)
        flag.unlink()
        slow_end_ms = time.time() * 1000
        print(live.line(live.progress()), flush=True)

        last = job.wait_all_read(live, timeout=1800, every_s=10.0)
        prog.update(progress_of(live.spout.query))
        if not live.handle.drain(600):
            raise SystemExit("the topology did not drain within 10 min")
        stats = live.handle.stats()
        hs = live.spout.handoff_stats()
    finally:
        flag.unlink(missing_ok=True)
        try:
            live.landing.stop_event.set()
            live.handle.kill()
            cluster.topologies.pop("bench-live", None)
        except NameError:
            pass
    try:
        failures, fig = job.run_check(spark, live, stats, args.lag_hours, True)
    finally:
        stop_spark()
        cluster.shutdown()

    # 1. latency of the windows closed in the steady phase
    windows = committed_windows(out / "windows")
    lat = window_latencies(windows, live.landing.landed, int(args.lag_hours * 3_600_000),
                           t0_ms + args.warmup_s * 1000, steady_end_ms)
    p50, p99 = weighted_quantile(lat, 0.5), weighted_quantile(lat, 0.99)

    # 2. Spark's input rate in the slowed phase, from its own progress
    settle_ms = slow_start_ms + args.settle_s * 1000
    from datetime import datetime

    def started_ms(d: dict) -> float:
        return datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp() * 1000

    slowed = [d for _, d in sorted(prog.items())
              if settle_ms <= started_ms(d) and d["numInputRows"] > 0
              and started_ms(d) + d["durationMs"]["triggerExecution"] <= slow_end_ms]
    in_rows = sum(d["numInputRows"] for d in slowed)
    in_s = sum(d["durationMs"]["triggerExecution"] for d in slowed) / 1000
    spark_rate = in_rows / in_s if in_s else 0.0
    follow_err = abs(spark_rate - capacity) / capacity * 100

    # 3. memory between the halves of the slowed phase
    rss = [s["rss_mb"] for s in samples if "rss_mb" in s]
    half = len(rss) // 2
    first, second = max(rss[:half]), max(rss[half:])
    growth = (second - first) / first * 100
    windows_checked = 0 if failures else sum(fig["windows"].values())

    result = {
        "args": vars(args), "machine_load": {"before": load_before, "slowed_phase": load_during},
        "landing_rows_per_s": round(rows_per_s, 1),
        "capacity_rows_per_s": round(capacity, 1),
        "latency": {"windows": len(lat), "rows": sum(w for _, w in lat),
                    "p50_ms": round(p50, 1), "p99_ms": round(p99, 1),
                    "max_ms": round(max(v for v, _ in lat), 1)},
        "spark_follow": {"micro_batches": len(slowed), "rows": in_rows,
                         "seconds": round(in_s, 2), "rows_per_s": round(spark_rate, 1),
                         "error_pct": round(follow_err, 2),
                         "batches": [{"batchId": d["batchId"], "timestamp": d["timestamp"],
                                      "numInputRows": d["numInputRows"],
                                      "triggerExecution_ms":
                                          d["durationMs"]["triggerExecution"]}
                                     for d in slowed]},
        "handoff": {k: hs[k] for k in ("max_held_rows", "max_held_batches", "max_rows",
                                       "max_batches", "batches_in", "rows_in", "put_waits")},
        "rss_mb": {"first_half_peak": first, "second_half_peak": second,
                   "growth_pct": round(growth, 2), "processes": len(procs)},
        "check": {"failures": failures, **fig},
        "last_progress": {k: v for k, v in last.items() if k not in ("stats", "handoff")},
        "samples": samples,
    }
    path = write_result("live", result)
    print(f"steady: {len(lat)} windows closed, latency p50/p99 {p50:.0f}/{p99:.0f} ms; "
          f"slowed to {capacity:.0f} rows/s: Spark read {spark_rate:.0f} rows/s over "
          f"{len(slowed)} micro-batches; hand-off at most {hs['max_held_rows']:,} rows; "
          f"RSS {first:.0f} -> {second:.0f} MB; check: "
          f"{'passed' if not failures else failures}; {path}")
    print(f"e2e_latency_ms_p50={p50:.0f} e2e_latency_ms_p99={p99:.0f} "
          f"spark_follow_error_pct={follow_err:.1f} spark_rows_per_s={spark_rate:.1f} "
          f"handoff_rows_max={hs['max_held_rows']} "
          f"rss_growth_pct={growth:.1f} windows_checked={windows_checked}")


if __name__ == "__main__":
    main()
