"""Nexmark q0-q4 in Bytewax 0.21 (one worker), on the same generator, for the bench's
side-by-side rows. No Python engine publishes Nexmark queries; these are ours, written
as Bytewax's documentation writes dataflows ("Dataflow Programming", bytewax.operators:
``input``, ``filter``, ``map``, ``merge``, ``key_on``, ``stateful_flat_map``,
``stateful``, ``fold_final``, ``output``), with the semantics of the storm-on-ray
topologies (``_queries``) and checked by the same SQL (docs/nexmark.md) before the bench
times them.

* The source (:class:`NexmarkSource`) runs the per-event generator
  (``_generator.EventStream``, one partition: the whole id range) and yields
  ``(event, emitTime)`` for the kinds the query reads, up to ``burst`` events a call;
  like the spout it generates every event.
* The sink (:class:`ResultSink`) writes the result's columns to Parquet
  (``_parquet.ParquetTable``, renamed into place when the flow ends) and keeps each
  row's latency from its ``emitTime``; q4's latency is taken where a bid takes effect
  (its winning-bid step), as the topology's.

Run one query in its own process (``python -m benchmarks.nexmark._bytewax``), so that
its CPU time and peak memory are its own: :func:`run_in_subprocess`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from array import array
from datetime import datetime, timezone
from pathlib import Path

from benchmarks._common import quantile
from benchmarks.nexmark._generator import EventStream, GeneratorConfig, NexmarkGenerator
from benchmarks.nexmark._model import KINDS, Auction, Bid, Person
from benchmarks.nexmark._parquet import ParquetTable
from benchmarks.nexmark._queries import (
    AUCTION_SKIP,
    DOLLAR_TO_EURO,
    Q3_CATEGORY,
    Q3_STATES,
    QUERIES,
    RESULT_COLUMNS,
)

#: events per ``next_batch`` call at most
BURST = 1_000


def _now_ms() -> float:
    return time.time() * 1000.0


class _Run:
    """What one run records: the source's first call, the sink's close, latencies."""

    def __init__(self) -> None:
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.rows = 0
        self.latencies_ms = array("d")


def _source(config: GeneratorConfig, kinds: tuple[str, ...], run: _Run,
            events_per_s: float | None):
    from bytewax.inputs import DynamicSource, StatelessSourcePartition

    types = tuple(KINDS[k] for k in kinds)

    class Partition(StatelessSourcePartition):
        def __init__(self) -> None:
            self._stream = EventStream(NexmarkGenerator(config))
            self._taken = 0

        def next_batch(self) -> list:
            now = time.time()
            if run.started_at is None:
                run.started_at = now
            n = BURST
            if events_per_s is not None:
                n = min(n, int((now - run.started_at) * events_per_s) + 1 - self._taken)
            out = []
            for _ in range(max(n, 0)):
                try:
                    _, event = next(self._stream)
                except StopIteration:
                    if out:
                        return out
                    raise
                self._taken += 1
                if isinstance(event, types):
                    out.append((event, _now_ms()))
            return out

        def next_awake(self):
            if events_per_s is None:
                return None
            due = run.started_at + (self._taken + 1) / events_per_s if run.started_at else 0
            return datetime.fromtimestamp(due, tz=timezone.utc) if due else None

    class Source(DynamicSource):
        def build(self, step_id, worker_index, worker_count):
            if worker_count != 1:
                raise ValueError("the Nexmark Bytewax source runs on one worker")
            return Partition()

    return Source()


def _sink(path: str, query: str, run: _Run):
    import pyarrow as pa
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    columns = RESULT_COLUMNS[query]
    schema = pa.schema([pa.field(n, getattr(pa, t)(), nullable=False) for n, t in columns])
    width = len(columns)

    class Partition(StatelessSinkPartition):
        def __init__(self) -> None:
            self._table = ParquetTable(path, schema)

        def write_batch(self, items: list) -> None:
            now = _now_ms()
            table = self._table
            if query == "q4":
                for row in items:
                    table.append(row)
                return
            for row in items:
                table.append(row[:width])
            run.latencies_ms.extend([now - row[width] for row in items])

        def close(self) -> None:
            run.rows = self._table.close()
            run.finished_at = time.time()

    class Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return Partition()

    return Sink()


def _q3_join(state: dict | None, item: tuple) -> tuple[dict, list]:
    """q3 per seller: keeps the qualifying seller and the auctions waiting for one."""
    state = state or {"person": None, "auctions": []}
    event, stamp = item
    if isinstance(event, Person):
        state["person"] = (event.name, event.city, event.state)
        out = [(*state["person"], a, stamp) for a in state["auctions"]]
        state["auctions"] = []
        return state, out
    if state["person"] is not None:
        return state, [(*state["person"], event.id, stamp)]
    state["auctions"].append(event.id)
    return state, []


def _winning_logic(run: _Run):
    from bytewax.operators import StatefulLogic

    class WinningBid(StatefulLogic):
        """q4 per auction: the highest bid within ``[dateTime, expires]``, emitted as
        ``(category, final)`` at the end of the stream."""

        def __init__(self) -> None:
            self.auction: tuple[int, int, int] | None = None  # category, start, expires
            self.final: int | None = None
            self.early: list[tuple[int, int]] = []

        def on_item(self, value):
            event, stamp = value
            if isinstance(event, Auction):
                self.auction = (event.category, event.dateTime, event.expires)
                in_time = [p for p, t in self.early if event.dateTime <= t <= event.expires]
                self.final = max(in_time) if in_time else None
                self.early = []
            else:
                if self.auction is None:
                    self.early.append((event.price, event.dateTime))
                elif (self.auction[1] <= event.dateTime <= self.auction[2]
                      and (self.final is None or event.price > self.final)):
                    self.final = event.price
                run.latencies_ms.append(_now_ms() - stamp)
            return (), StatefulLogic.RETAIN

        def on_eof(self):
            if self.auction is None or self.final is None:
                return (), StatefulLogic.DISCARD
            return [(self.auction[0], self.final)], StatefulLogic.DISCARD

        def snapshot(self):
            return (self.auction, self.final, list(self.early))

    return WinningBid


def build_flow(query: str, config: GeneratorConfig, out: str, run: _Run,
               events_per_s: float | None = None):
    """The Bytewax ``Dataflow`` of ``query`` writing its result to ``out``.

    Raises:
        KeyError: an unknown query.
    """
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow

    q = QUERIES[query]
    flow = Dataflow(f"nexmark-{query}")
    events = op.input("events", flow, _source(config, q.kinds, run, events_per_s))
    if query == "q0":
        rows = op.map("q0", events, lambda x: (x[0].auction, x[0].bidder, x[0].price,
                                               x[0].dateTime, x[0].extra, x[1]))
    elif query == "q1":
        rows = op.map("q1", events, lambda x: (x[0].auction, x[0].bidder,
                                               x[0].price * DOLLAR_TO_EURO, x[0].dateTime,
                                               x[1]))
    elif query == "q2":
        kept = op.filter("select", events, lambda x: x[0].auction % AUCTION_SKIP == 0)
        rows = op.map("q2", kept, lambda x: (x[0].auction, x[0].price, x[1]))
    elif query == "q3":
        kept = op.filter("qualify", events, lambda x: (
            x[0].state in Q3_STATES if isinstance(x[0], Person)
            else x[0].category == Q3_CATEGORY))
        keyed = op.key_on("by_seller", kept, lambda x: str(
            x[0].id if isinstance(x[0], Person) else x[0].seller))
        rows = op.flat_map("unkey", op.stateful_flat_map("join", keyed, _q3_join),
                           lambda kv: (kv[1],))
    else:
        keyed = op.key_on("by_auction", events, lambda x: str(
            x[0].auction if isinstance(x[0], Bid) else x[0].id))
        finals = op.stateful("winning_bids", keyed, lambda _resume: _winning_logic(run)())
        by_category = op.key_on("by_category", op.map("final", finals, lambda kv: kv[1]),
                                lambda cf: str(cf[0]))
        totals = op.fold_final("average", by_category, lambda: [0, 0, 0],
                               lambda s, cf: [cf[0], s[1] + cf[1], s[2] + 1])
        rows = op.map("mean", totals, lambda kv: (kv[1][0], kv[1][1] / kv[1][2]))
    op.output("sink", rows, _sink(out, query, run))
    return flow


def run_flow(query: str, config: GeneratorConfig, out: str,
             events_per_s: float | None = None) -> dict:
    """Run ``query`` in Bytewax in this thread (``run_main``: one worker) until its
    result is in ``out`` (a Parquet file, which must not exist).

    Returns:
        ``events``, ``rows``, ``seconds`` (the source's first call to the result file
        complete), ``cpu_s`` (this process's CPU s, every thread, over ``run_main``),
        ``latencies_ms`` (an ``array``: per result row, or per bid for q4).

    Raises:
        KeyError: an unknown query. FileExistsError: ``out`` exists.
    """
    from bytewax.testing import run_main

    if Path(out).exists():
        raise FileExistsError(f"{out} exists; give a new path")
    run = _Run()
    flow = build_flow(query, config, out, run, events_per_s)
    cpu0 = time.process_time()
    run_main(flow)
    cpu_s = time.process_time() - cpu0
    return {"events": config.events, "rows": run.rows,
            "seconds": run.finished_at - run.started_at, "cpu_s": cpu_s,
            "latencies_ms": run.latencies_ms}


def run_in_subprocess(query: str, config: GeneratorConfig, out: str,
                      events_per_s: float | None = None, timeout_s: float = 3600) -> dict:
    """:func:`run_flow` in a fresh Python process (this interpreter, the repository as
    its working directory); blocks until it ends.

    Returns:
        :func:`run_flow`'s figures, ``latencies_ms`` replaced by ``latency``
        (``samples``, ``p50_ms``, ``p99_ms``), plus ``peak_rss_mb``, the process's peak
        resident memory (MiB, :func:`peak_rss_mb`).

    Raises:
        RuntimeError: the process failed (its stderr in the message).
        subprocess.TimeoutExpired: it ran over ``timeout_s``.
    """
    stats = f"{out}.stats.json"
    argv = [sys.executable, "-m", "benchmarks.nexmark._bytewax", query, json.dumps(
        {**config.__dict__}), out, stats] + ([str(events_per_s)] if events_per_s else [])
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"Bytewax {query} failed (exit {proc.returncode}):\n{err[-3000:]}")
    result = json.loads(Path(stats).read_text())
    os.remove(stats)
    return result


def peak_rss_mb() -> float:
    """This process's peak resident memory since its exec, MiB: ``VmHWM`` of
    ``/proc/self/status`` (proc(5)). Not ``ru_maxrss``, which on Linux keeps the parent's
    high-water mark across fork and exec (getrusage(2)), so a child of a large driver
    reports the driver's peak; where there is no ``/proc``, ``ru_maxrss`` all the same."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.nexmark._bytewax")
    ap.add_argument("query", choices=sorted(QUERIES))
    ap.add_argument("config", help="GeneratorConfig's fields as JSON")
    ap.add_argument("out")
    ap.add_argument("stats")
    ap.add_argument("events_per_s", nargs="?", type=float, default=None)
    args = ap.parse_args(argv)
    config = GeneratorConfig(**json.loads(args.config))
    result = run_flow(args.query, config, args.out, args.events_per_s)
    lat = result.pop("latencies_ms")
    result["latency"] = {"samples": len(lat),
                         "p50_ms": quantile(lat, 0.50) if lat else None,
                         "p99_ms": quantile(lat, 0.99) if lat else None}
    result["peak_rss_mb"] = peak_rss_mb()
    Path(args.stats).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

