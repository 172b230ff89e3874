"""Joins: ``JoinBolt`` and ``IntervalJoinBolt`` through a topology, each against the same
join as a plain Python loop over the same input, and the window join against Bytewax's
``join_window``, in one run.

Input: two streams of ``--rows`` rows each, ``(key, value, ts)``: keys cycle over
``--keys``, ``s1`` at even and ``s2`` at odd milliseconds (each stream's time rising).

* ``join``: ``JoinBolt("s1", "key").join("s2", "key", "s1")`` over tumbling 1 s event-time
  windows, selecting ``(s1:value, s2:value)``; one task, one worker, no ackers.
* ``interval``: ``IntervalJoinBolt`` with bounds ``[-50 ms, +50 ms]``, same input.
* ``loop``: each join as a plain Python loop (dicts per window and key; per-key lists
  scanned for the interval), one process: the limit for per-row Python work.
* ``bytewax``: Bytewax (the ``bench`` extra), one worker (``run_main``), two
  ``TestingSource``s in batches of 1,000, ``join_window`` with an event clock and a
  tumbling 1 s window, ``insert_mode="product"`` (emitting rows with a missing side, which
  a ``filter`` drops: an inner join); its output multiset is asserted equal to ours
  before any figure is kept.

Rates are input rows (both streams) per second, from the submit's return (actors up) to
the end of the stream for topologies. ``*_vs_loop`` is our rate / the loop's;
``join_vs_bytewax`` our window join's rate / Bytewax's.

    python -m benchmarks.joins [--rows 100000] [--keys 1000]

Writes benchmarks/results/joins.json; the last line is ``key=value ...``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

from benchmarks._common import write_result
from cluster import LocalCluster
from topology import (
    CollectorBolt,
    Duration,
    IntervalJoinBolt,
    IterableSpout,
    JoinBolt,
    TopologyBuilder,
)

WINDOW_MS = 1000
LOWER, UPPER = -50, 50
CONF = {"topology.acker.executors": 0, "topology.workers": 1}


def streams(n: int, keys: int) -> tuple[list, list]:
    return ([(i % keys, i, 2 * i) for i in range(n)],
            [(i % keys, i, 2 * i + 1) for i in range(n)])


def loop_join(s1: list, s2: list) -> tuple[float, Counter]:
    """The window join as a plain loop: s2 hashed per (window, key), s1 probing."""
    t0 = time.perf_counter()
    table: dict = defaultdict(list)
    for k, v, ts in s2:
        table[(ts // WINDOW_MS, k)].append(v)
    out = Counter()
    for k, v, ts in s1:
        for b in table.get((ts // WINDOW_MS, k), ()):
            out[(v, b)] += 1
    return time.perf_counter() - t0, out


def loop_interval(s1: list, s2: list) -> tuple[float, Counter]:
    """The interval join as a plain loop: in arrival order (the two streams interleaved,
    time rising), each row matches the other side's rows of its key, after dropping those
    too old to match anything still to come."""
    t0 = time.perf_counter()
    span = max(-LOWER, UPPER) + 2
    bufs: tuple[dict, dict] = (defaultdict(list), defaultdict(list))
    out = Counter()
    for i in range(len(s1)):
        for side, (k, v, ts) in ((0, s1[i]), (1, s2[i])):
            other = bufs[1 - side][k]
            if other and other[0][0] < ts - span:
                other[:] = [(t, x) for t, x in other if t >= ts - span]
            if side == 0:
                out.update((v, b) for t, b in other if LOWER <= t - ts <= UPPER)
            else:
                out.update((a, v) for t, a in other if LOWER <= ts - t <= UPPER)
            bufs[side][k].append((ts, v))
    return time.perf_counter() - t0, out


def ours(cluster: LocalCluster, bolt, s1: list, s2: list) -> tuple[float, Counter]:
    b = TopologyBuilder()
    b.set_spout("s1", IterableSpout(s1, ("key", "value", "ts")))
    b.set_spout("s2", IterableSpout(s2, ("key", "value", "ts")))
    b.set_bolt("join", bolt.select("s1:value, s2:value").with_timestamp_field("ts")
               .with_watermark_interval(Duration(50))).fields_grouping(
        "s1", ("key",)).fields_grouping("s2", ("key",))
    b.set_bolt("sink", CollectorBolt()).global_grouping("join")
    handle = cluster.submit_topology("joins", CONF, b.create_topology())
    t0 = time.perf_counter()
    assert handle.wait(900), handle.stats().summary()
    dt = time.perf_counter() - t0
    got = Counter(tuple(values) for *_, values in handle.collected("sink"))
    cluster.kill_topology("joins")
    return dt, got


def bytewax_join(s1: list, s2: list) -> tuple[float, Counter]:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    flow = Dataflow("joins")
    sides = [op.key_on(f"key{i}", op.input(f"in{i}", flow, TestingSource(s, batch_size=1000)),
                       lambda r: str(r[0])) for i, s in enumerate((s1, s2))]
    clock = win.EventClock(lambda r: epoch + timedelta(milliseconds=r[2]),
                           wait_for_system_duration=timedelta(0))
    windows = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=epoch)
    joined = win.join_window("join", clock, windows, *sides, insert_mode="product")
    inner = op.filter("inner", joined.down, lambda kv: None not in kv[1][1])
    out: list = []
    op.output("out", op.map("values", inner, lambda kv: (kv[1][1][0][1], kv[1][1][1][1])),
              TestingSink(out))
    t0 = time.perf_counter()
    run_main(flow)
    return time.perf_counter() - t0, Counter(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows per stream")
    p.add_argument("--keys", type=int, default=1000)
    args = p.parse_args()
    s1, s2 = streams(args.rows, args.keys)
    rows = 2 * args.rows
    result: dict = {"rows_per_stream": args.rows, "keys": args.keys, "window_ms": WINDOW_MS,
                    "interval_ms": [LOWER, UPPER]}
    dt_loop, want = loop_join(s1, s2)
    dt_iloop, iwant = loop_interval(s1, s2)
    dt_bw, bw = bytewax_join(s1, s2)
    assert bw == want, "Bytewax's join_window (product, inner) differs from the reference"
    cluster = LocalCluster(num_cpus=2)
    try:
        dt_join, got = ours(cluster, JoinBolt("s1", "key").join("s2", "key", "s1")
                            .with_tumbling_window(Duration(WINDOW_MS)), s1, s2)
        assert got == want, "JoinBolt's output differs from the loop's"
        dt_int, igot = ours(cluster, IntervalJoinBolt("s1", "key", "s2", "key")
                            .between(LOWER, UPPER), s1, s2)
        assert igot == iwant, "IntervalJoinBolt's output differs from the loop's"
    finally:
        cluster.shutdown()
    figures = {
        "join_rows_s": round(rows / dt_join), "join_loop_rows_s": round(rows / dt_loop),
        "interval_join_rows_s": round(rows / dt_int),
        "interval_loop_rows_s": round(rows / dt_iloop),
        "bytewax_join_rows_s": round(rows / dt_bw),
    }
    figures["join_vs_loop"] = round(figures["join_rows_s"] / figures["join_loop_rows_s"], 3)
    figures["interval_join_vs_loop"] = round(
        figures["interval_join_rows_s"] / figures["interval_loop_rows_s"], 3)
    figures["join_vs_bytewax"] = round(figures["join_rows_s"] / figures["bytewax_join_rows_s"],
                                       3)
    result.update(figures, outputs_join=sum(want.values()),
                  outputs_interval=sum(iwant.values()))
    write_result("joins", result)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
