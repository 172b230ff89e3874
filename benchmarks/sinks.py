"""What exactly-once output costs: a sink-bound topology writing through ``ParquetSink`` beside
``DatasetSink``, ``DbApiSink`` into SQLite, and a savepoint of a 100k-key state.

Sink runs: an ``IterableSpout`` over ``--rows`` prebuilt rows ``(id, key, value)`` (one
task, keeping its position, so checkpoints run with acking off) straight into one sink
task, ``topology.acker.executors: 0``. Per run, the wall time from the submit's return to
``handle.wait()``'s (for the two-phase-commit sinks that includes the final checkpoint's
commit, which publishes the last rows), and the rows read back from the output: the
committed Parquet dataset, the ``DatasetSink``'s tables, the SQLite table, each checked
equal to the input (every id once). The three sinks alternate, ``--runs`` each, in one
session; the figures are medians, and ``parquet_vs_dataset_sink`` is the ratio of the
medians. The ``ParquetSink`` and ``DbApiSink`` topologies run checkpoints (every
``topology.state.checkpoint.interval.ms``, default 1000, local provider); the
``DatasetSink`` one runs none (it keeps no state and is not a two-phase-commit sink).

Without Ray, first: each sink's own calls driven in a loop over prebuilt tuples (``write``
per row; ``pre_commit`` and ``commit`` every ``CPU_ROWS_PER_CHECKPOINT`` rows), CPU µs per
row, median of ``--runs``, alternating; ``--profile``
prints where that CPU goes. The share of the topology's cost that is the sink's own.

Savepoint: a spout emits ``--keys`` distinct words once, then a few per second for ever (a
running topology, nearly idle); a fields-grouped ``StatefulWordCount`` (two tasks) keeps
one count per word. Once the committed state holds every word, ``handle.savepoint(path)``
is timed ``--runs`` times (a new path each): a checkpoint requested and committed, then
the committed state copied to the path. The figure is the median wall time of the call.

The end of a stream: ``final_checkpoint_s``, per two-phase-commit run, from the last
spout's end of data (the coordinator's clock, the host's monotonic one) to the return of
``handle.wait()``: the final round (FLIP-147), its commit publishing the last rows, the
ends of stream. Target: one checkpoint interval plus twice the run's round p50 (the final
round must not wait for an interval).

    python -m benchmarks.sinks [--quick] [--rows 400000] [--keys 100000] [--runs 5]
        [--profile]

Writes benchmarks/results/sinks.json; the last line is ``key=value ...``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import write_result
from topology import StatefulSpout

FIELDS = ("id", "key", "value")
SINKS = ("parquet", "dataset", "db")
#: rows per checkpoint in the sinks' CPU measure: about a 1 s checkpoint interval's worth
#: at the topology's rate (results/sinks.json has the rates and checkpoint counts)
CPU_ROWS_PER_CHECKPOINT = 50_000
#: the topologies' checkpoint interval (the default topology.state.checkpoint.interval.ms)
CHECKPOINT_INTERVAL_S = 1.0


def rows(n: int) -> list[tuple]:
    """``n`` rows ``(id, key, value)``: an int, one of 1000 strings, a float."""
    return [(i, f"k{i % 1000}", i * 0.5) for i in range(n)]


# -- the sink-bound topology ---------------------------------------------------------------


def _sink(kind: str, out: Path):
    from topology import DatasetSink, DbApiSink, ParquetSink

    if kind == "parquet":
        return ParquetSink(str(out / "parquet"))
    if kind == "dataset":
        return DatasetSink()
    db = str(out / "out.db")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (id INTEGER, key TEXT, value REAL)")
    con.commit()
    con.close()
    return DbApiSink(functools.partial(sqlite3.connect, db, timeout=30),
                     "INSERT INTO t (id, key, value) VALUES (?, ?, ?)")


def _read_back(kind: str, handle, out: Path) -> tuple[int, int, int | None]:
    """(rows, distinct ids, files) in the sink's output (files: Parquet only)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    if kind == "parquet":
        ds = pads.dataset(str(out / "parquet"), format="parquet")  # skips _staging
        ids = ds.to_table(columns=["id"]).column("id")
        return len(ids), pc.count_distinct(ids).as_py(), len(ds.files)
    if kind == "dataset":
        ids = pa.concat_arrays([c for t in handle.sink_tables("sink")
                                for c in t.column("id").chunks])
        return len(ids), pc.count_distinct(ids).as_py(), None
    con = sqlite3.connect(str(out / "out.db"))
    try:
        n, distinct = con.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM t").fetchone()
    finally:
        con.close()
    return n, distinct, None


def sink_run(cluster, kind: str, data: list[tuple], root: Path, i: int) -> dict:
    """One run of the sink-bound topology into ``kind``; its rate and the rows it wrote."""
    from topology import IterableSpout, TopologyBuilder

    out = root / f"{kind}-{i}"
    out.mkdir()
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(data, fields=FIELDS))
    b.set_bolt("sink", _sink(kind, out)).shuffle_grouping("rows")
    conf = {"topology.acker.executors": 0,
            "topology.state.checkpoint.dir": str(out / "checkpoints")}
    name = f"sinks-{kind}-{i}"
    t_submit = time.perf_counter()
    handle = cluster.submit_topology(name, conf, b.create_topology())
    t0 = time.perf_counter()
    held, busy = [], []  # per metrics interval: spout backpressured, sink busy (ms/s)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            s = handle.stats()
            spout, sink = s.component("rows")[0], s.component("sink")[0]
            if spout.interval_s and spout.backpressured_time_ms_per_second is not None:
                held.append(spout.backpressured_time_ms_per_second)
            if sink.interval_s and sink.busy_time_ms_per_second is not None:
                busy.append(sink.busy_time_ms_per_second)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        assert handle.wait(600), f"{kind}: the run did not end within 600 s"
        elapsed = time.perf_counter() - t0
        t_done = time.monotonic()  # (the coordinator's clock: same host, same clock)
        done.set()
        sampler.join()
        ckpt = handle.checkpoint_stats()
        rounds = [r["checkpoint_ms_p50"] for r in handle.stats().checkpoints()
                  if r["checkpoint_ms_p50"] is not None]
        n_out, distinct, files = _read_back(kind, handle, out)
    finally:
        done.set()
        cluster.kill_topology(name)
    n = len(data)
    assert n_out == n and distinct == n, (
        f"{kind} sink wrote {n_out} rows ({distinct} distinct ids) of {n}: rows lost or "
        f"duplicated, so its rate means nothing")
    r = {"sink": kind, "rows": n, "rows_out": n_out, "submit_s": round(t0 - t_submit, 3),
         "elapsed_s": round(elapsed, 3), "rows_s": round(n / elapsed),
         "checkpoints": ckpt["completed"] if ckpt else 0,
         # sink-bound: the spout held by backpressure, the sink busy (median per interval)
         "spout_backpressured_ms_s": round(statistics.median(held)) if held else None,
         "sink_busy_ms_s": round(statistics.median(busy)) if busy else None}
    if ckpt and ckpt.get("spouts_ended_at") is not None:
        # the last spout's end of data -> completion: the final round, its commit (the
        # last rows published) and the ends of stream; target: one interval + 2 rounds
        r["final_checkpoint_s"] = round(t_done - ckpt["spouts_ended_at"], 3)
        r["round_ms_p50"] = statistics.median(rounds) if rounds else None
        r["final_checkpoint_target_s"] = round(
            CHECKPOINT_INTERVAL_S + 2 * (r["round_ms_p50"] or 0) / 1000, 3)
    if files is not None:
        r["files"] = files
    return r


# -- the sinks without Ray -------------------------------------------------------------------


def sink_cpu(kind: str, n: int, per_checkpoint: int, root: Path, profile: bool = False
             ) -> float:
    """CPU µs per row of the sink's own calls, without Ray: ``execute`` per row (for a
    two-phase-commit sink ``write``), and every ``per_checkpoint`` rows ``pre_commit`` then
    ``commit`` (the ``DatasetSink``: ``arrow_table`` at the end). Leaves out what the
    runtime adds: the tuples' transport and the transactions' encoding into checkpoints.
    ``profile``: print the functions that take the most CPU."""
    import cProfile
    import pstats

    from topology import DatasetSink, Fields, TopologyContext, Tuple

    out = root / f"cpu-{kind}-{time.monotonic_ns()}"
    out.mkdir()
    sink = _sink(kind, out)
    if not isinstance(sink, DatasetSink):
        sink.open_target(FIELDS)
    sink.prepare({}, TopologyContext("cpu", "sink", 2, 0, {"rows": [1], "sink": [2]},
                                     submit_id="0000c0de"), None)
    fields = Fields(FIELDS)
    tuples = [Tuple(list(r), fields, "rows", 1, "default") for r in rows(n)]
    prof = cProfile.Profile(time.process_time) if profile else None
    t0 = time.process_time()
    if prof:
        prof.enable()
    if isinstance(sink, DatasetSink):
        for t in tuples:
            sink.execute(t)
        assert sink.arrow_table().num_rows == n
    else:
        for cid, start in enumerate(range(0, n, per_checkpoint), 1):
            for t in tuples[start:start + per_checkpoint]:
                sink.execute(t)
            txn = sink.pre_commit(cid)
            if txn is not None:
                sink.commit(cid, txn)
        sink.cleanup()
    if prof:
        prof.disable()
        print(f"-- {kind}: the sink's calls, by own CPU time")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return (time.process_time() - t0) / n * 1e6


# -- the savepoint ---------------------------------------------------------------------------


class FillThenTrickleSpout(StatefulSpout):
    """Emits ``(f"k{i}",)`` for i in [0, keys) as fast as it may, then ``(f"k{i % keys}",)``
    at ``trickle`` tuples/s for ever; keeps its position (so the topology checkpoints with
    acking off)."""

    outputs = ("word",)

    def __init__(self, keys: int, trickle: float) -> None:
        self.keys, self.trickle = keys, trickle

    def open(self, conf, context, collector):
        self.emit = collector.emit
        self.pacer = pipeline.Pacer()
        self.i = 0

    def init_state(self, state):
        self.state = state
        self.i = state.get("i", 0)

    def pre_prepare(self, checkpoint_id):
        self.state.put("i", self.i)

    def next_tuple(self):
        if self.i < self.keys:
            for _ in range(64):
                self.emit((f"k{self.i % self.keys}",))
                self.i += 1
                if self.i == self.keys:
                    return
        elif self.pacer.ready(self.trickle):
            self.emit((f"k{self.i % self.keys}",))
            self.i += 1
        else:
            self.pacer.sleep()


def savepoints(cluster, keys: int, runs: int, root: Path, trickle: float = 20.0) -> dict:
    """Time ``handle.savepoint`` ``runs`` times on a running word count holding ``keys``
    keys; checks each savepoint holds them all."""
    from actors.state.savepoints import read_savepoint
    from topology import TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("words", FillThenTrickleSpout(keys, trickle))
    b.set_bolt("count", pipeline.StatefulWordCount(), 2).fields_grouping("words", ("word",))
    conf = {"topology.acker.executors": 0,
            "topology.state.checkpoint.dir": str(root / "sp-checkpoints")}
    name = "sinks-savepoint"
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        t0 = time.perf_counter()
        held = 0
        while held < keys:
            assert time.perf_counter() - t0 < 300, f"the state holds {held} of {keys} keys"
            time.sleep(1.0)
            held = sum(len(c) for c in handle.state().get("count", {}).values())
        fill_s = time.perf_counter() - t0
        times, entries = [], []
        for i in range(runs):
            path = root / f"savepoint-{i}"
            t = time.perf_counter()
            handle.savepoint(str(path))
            times.append(time.perf_counter() - t)
            sp = read_savepoint(str(path))
            entries.append(sum(len(e) for e in sp.entries["count"].values()))
            assert entries[-1] >= keys, f"savepoint {path} holds {entries[-1]} of {keys} keys"
            time.sleep(0.5)
        size = sum(f.stat().st_size for f in (root / "savepoint-0").rglob("*") if f.is_file())
    finally:
        cluster.kill_topology(name)
    return {"keys": keys, "trickle_tuples_s": trickle, "count_tasks": 2,
            "fill_s": round(fill_s, 2), "seconds": [round(t, 3) for t in times],
            "median_s": round(statistics.median(times), 3), "count_entries": entries,
            "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer rows (--rows 100000), for a check in about 2 minutes")
    ap.add_argument("--rows", type=int, default=None, help="rows per sink run (400000)")
    ap.add_argument("--keys", type=int, default=100_000, help="keys in the savepointed state")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs of each sink, and savepoints (5; --quick: 3)")
    ap.add_argument("--profile", action="store_true",
                    help="print a CPU profile of each sink's calls without Ray")
    args = ap.parse_args()
    if args.runs is None:
        args.runs = 3 if args.quick else 5
    if args.rows is None:
        args.rows = 100_000 if args.quick else 400_000
    from cluster import LocalCluster

    ray.cloudpickle.register_pickle_by_value(pipeline)
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = time.perf_counter()
    load_start = round(os.getloadavg()[0], 2)  # the host is shared: a record of its load
    data = rows(args.rows)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sinks-bench-") as tmp:
        root = Path(tmp)
        cpu: dict[str, list[float]] = {k: [] for k in SINKS}
        cpu_rows = min(args.rows, 200_000)
        for kind in SINKS:  # warm up: pyarrow's and sqlite3's imports
            sink_cpu(kind, 1000, CPU_ROWS_PER_CHECKPOINT, root)
        for i in range(args.runs):  # before Ray: the host is quieter
            for kind in SINKS if i % 2 == 0 else SINKS[::-1]:
                cpu[kind].append(round(sink_cpu(kind, cpu_rows, CPU_ROWS_PER_CHECKPOINT,
                                                root, args.profile and i == 0), 2))
        print("sink CPU µs/row without Ray:", cpu, flush=True)
        cluster = LocalCluster()
        sink_run(cluster, "parquet", data[:20_000], root, -1)  # warm up: actors, imports
        for i in range(args.runs):
            order = SINKS if i % 2 == 0 else SINKS[::-1]  # alternating, side by side
            for kind in order:
                r = sink_run(cluster, kind, data, root, i)
                print(r, flush=True)
                runs.append(r)
        sp = savepoints(cluster, args.keys, args.runs, root)
        print(sp, flush=True)
    cluster.shutdown()

    def median_rate(kind: str) -> float:
        return statistics.median(r["rows_s"] for r in runs if r["sink"] == kind)

    rates = {k: round(median_rate(k)) for k in SINKS}
    # each round's ParquetSink run beside its DatasetSink run (adjacent in time)
    paired = [p["rows_s"] / d["rows_s"] for p, d in zip(
        (r for r in runs if r["sink"] == "parquet"),
        (r for r in runs if r["sink"] == "dataset"), strict=True)]
    cpu_us = {k: statistics.median(v) for k, v in cpu.items()}
    finals = [r for r in runs if "final_checkpoint_s" in r]
    final_s = round(statistics.median(r["final_checkpoint_s"] for r in finals), 3)
    final_target_s = round(statistics.median(r["final_checkpoint_target_s"] for r in finals), 3)
    ratio = round(rates["parquet"] / rates["dataset"], 3)
    result = {
        "command": "python -m benchmarks.sinks" + (" --quick" if args.quick else ""),
        "args": vars(args), "rows_s_median": rates, "parquet_vs_dataset_sink": ratio,
        "parquet_vs_dataset_paired": {"median": round(statistics.median(paired), 3),
                                      "min": round(min(paired), 3),
                                      "max": round(max(paired), 3)},
        "parquet_vs_dataset_target": 0.8, "target_met": ratio >= 0.8,
        "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "checkpoint_interval_ms": 1000, "runs": runs,
        "sink_cpu_us_per_row_without_ray": {
            "rows": cpu_rows, "rows_per_checkpoint": CPU_ROWS_PER_CHECKPOINT,
            "median": cpu_us, "runs": cpu},
        "savepoint": sp,
        "final_checkpoint_s": {"median": final_s, "target_s": final_target_s,
                               "target_met": all(r["final_checkpoint_s"]
                                                 <= r["final_checkpoint_target_s"]
                                                 for r in finals),
                               "runs": [r["final_checkpoint_s"] for r in finals]},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_result("sinks", result)
    print(f"parquet_sink_rows_s={rates['parquet']} parquet_vs_dataset_sink={ratio} "
          f"db_sink_rows_s={rates['db']} savepoint_s_100k_keys={sp['median_s']} "
          f"final_checkpoint_s={final_s} final_checkpoint_target_s={final_target_s}")


if __name__ == "__main__":
    main()
