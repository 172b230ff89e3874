"""The peer suite: one logical pipeline, every way of running it on Ray here, in one run.

Pipeline: rows i in [0, n); map to (2i, key i % 1000); keep the rows whose value is a
multiple of 3; count them per key. Every implementation's per-key counts are checked equal.

Rows of the table (same machine, same run, side by side):

* ``plain_loop``: the plain Python loop, one process (the limit for per-row Python work);
* ``storm_on_ray_per_tuple``: this project, a spout and per-tuple bolts;
* ``storm_on_ray_batch``: this project, a spout of Arrow record batches and bolts that work
  on whole columns (numpy), one tuple per batch (queues sized in batches: ``CONF_BATCH``);
* ``ray_data_per_row``: Ray Data ``map`` / ``filter`` with per-row Python functions;
* ``ray_data_map_batches``: Ray Data ``map_batches`` with the same numpy work as the batch
  bolts, same batch size;
* ``ray_actor_queue_chain``: a naive chain of Ray actors handing rows through bounded
  ``ray.util.queue.Queue`` actors, one row per call (fewer rows: it is that slow);
* ``storm_on_ray_chained``: this project on the pipeline built so that operator chaining
  applies (spout → map → filter joined by ``local_or_shuffle``, then a fields grouping into
  the count: ``components.build_chainable``), chaining on (the default);
* ``storm_on_ray_unchained``: the same topology with ``topology.operator.chaining`` off
  (frames between its executors over the same-node socket, the default);
* ``storm_on_ray_unchained_calls``: the same again with ``topology.transfer.local.socket``
  off too (one Ray actor call per frame), right after it;
* ``bytewax``: Bytewax (the ``bench`` extra), one worker, ``TestingSource`` in batches of
  1,000, ``map`` → ``filter`` → ``count_final``, as a new user would write it (skipped,
  with a line saying so, where Bytewax is not installed).

Then memory with a slow consumer: each one runs for --slow-s seconds on an unbounded source
with its last stage busy-waiting --work-us per row (>= 10x slower than its source); every
0.5 s we sample the RSS of every Ray worker process plus the driver, and the object store's
use (Ray's memory summary). Flat means the second half's peak is within 10% of the first's.

    python -m benchmarks.peers [--tuples 1000000] [--slow-s 20] [--work-us 40]

Writes benchmarks/results/peers.json, peers.md (the table) and peers.png (the chart); the
last line is ``key=value ...``, with ``bytewax_ratio`` (chained per-tuple rate /
Bytewax's), ``chaining_speedup`` (chained / unchained rows/s),
``chaining_cpu_saving_pct`` (the executor CPU per row that chaining saves),
``unchained_socket_vs_call`` (unchained rows/s, socket / actor calls) and
``unchained_socket_cpu_saving_pct`` (the executor CPU per row the socket saves there).
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import RESULTS, write_result
from benchmarks.latency import path_verified, run_context, transfer_totals
from benchmarks.throughput import expected_counts, ours, plain_loop, ray_data
from cluster import LocalCluster

BATCH = 8192
CONF = {"topology.acker.executors": 0}
# sized in batches (64 per receive queue, 4 per frame) as before the queues' byte bound
# existed, so this suite's figures stay comparable; the defaults now hold the queued bytes
# too (benchmarks/overload.py, batch row)
CONF_BATCH = {**CONF, "topology.executor.receive.buffer.size": 64,
              "topology.producer.batch.size": 4}


# -- throughput ------------------------------------------------------------------------------


def _double(b: dict) -> dict:
    i = b["id"]
    return {"v": i * 2, "k": i % 1000}


def _keep(b: dict) -> dict:
    m = b["v"] % 3 == 0
    return {"v": b["v"][m], "k": b["k"][m]}


def _bincount(b: dict) -> dict:
    return {"k": np.arange(1000), "n": np.bincount(b["k"], minlength=1000)}


def ours_with_cpu(cluster: LocalCluster, n: int, conf: dict, topology,
                  cpu: dict, key: str, transfer: dict | None = None) -> tuple[float, dict]:
    """``throughput.ours`` that also records, in ``cpu[key]``, the CPU seconds its
    executor processes used from submit to completion (psutil, user + system): what
    chaining saves when the cores are shared with other work; and, given ``transfer``,
    in ``transfer[key]`` the tasks' transfer counters (``latency.transfer_totals``)."""
    handle = cluster.submit_topology("throughput", conf, topology)
    procs = [psutil.Process(ray.get(a.pid.remote())) for a in handle._executor_actors()]
    c0 = sum(sum(p.cpu_times()[:2]) for p in procs)
    t0 = time.perf_counter()
    assert handle.wait(600), handle.stats().summary()
    dt = time.perf_counter() - t0
    cpu[key] = sum(sum(p.cpu_times()[:2]) for p in procs) - c0
    if transfer is not None:
        transfer[key] = transfer_totals(handle.stats())
    got = {k: c for *_, (k, c) in handle.collected("sink")}
    cluster.kill_topology("throughput")
    return dt, got


def bytewax_run(n: int) -> tuple[float, dict]:
    """Bytewax, one worker (``run_main``): the peer pipeline as its docs write it."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list = []
    flow = Dataflow("peers")
    rows = op.input("in", flow, TestingSource(range(n), batch_size=1000))
    doubled = op.map("double", rows, lambda i: (i * 2, "k" + str(i % 1000)))
    kept = op.filter("keep", doubled, lambda t: t[0] % 3 == 0)
    counts = op.count_final("count", kept, lambda t: t[1])
    op.output("out", counts, TestingSink(out))
    t0 = time.perf_counter()
    run_main(flow)
    return time.perf_counter() - t0, dict(out)


def ray_data_batches(n: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    ds = (ray.data.range(n)
          .map_batches(_double, batch_format="numpy", batch_size=BATCH)
          .map_batches(_keep, batch_format="numpy", batch_size=BATCH)
          .map_batches(_bincount, batch_format="numpy", batch_size=BATCH))
    counts = np.zeros(1000, dtype=np.int64)
    for b in ds.iter_batches(batch_format="numpy", batch_size=None):
        np.add.at(counts, b["k"], b["n"])
    dt = time.perf_counter() - t0
    return dt, {"k" + str(k): int(c) for k, c in enumerate(counts) if c}


@ray.remote(num_cpus=0.1)
class _Stage:
    """One link of the naive chain: get a row, work, put it on (one actor call each)."""

    def run(self, inq, outq, kind: str, n: int, work_s: float = 0.0) -> dict:
        counts: dict = {}
        for _ in range(n):
            row = inq.get()
            if kind == "double":
                outq.put((row[0] * 2, row[1]))
            else:
                if work_s:
                    pipeline.busy_wait(work_s)
                if row[0] % 3 == 0:
                    counts[row[1]] = counts.get(row[1], 0) + 1
        return counts


@ray.remote(num_cpus=0.1)
def _produce(q, n: int) -> None:
    for i in range(n):
        q.put((i, "k" + str(i % 1000)))


def _start_chain(n: int, work_s: float = 0.0):
    """Start the naive chain on n rows: (queues and actors to stop, the count's ref)."""
    from ray.util.queue import Queue

    q1, q2 = Queue(maxsize=1000), Queue(maxsize=1000)
    a, b = _Stage.remote(), _Stage.remote()
    prod = _produce.remote(q1, n)
    a.run.remote(q1, q2, "double", n)
    return [prod, a, b, q1.actor, q2.actor], b.run.remote(q2, None, "count", n, work_s)


def _stop_chain(parts: list) -> None:
    ray.cancel(parts[0], force=True)
    for x in parts[1:]:
        ray.kill(x)


def queue_chain(n: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    parts, counts_ref = _start_chain(n)
    counts = ray.get(counts_ref)
    dt = time.perf_counter() - t0
    _stop_chain(parts)
    return dt, counts


# -- memory with a slow consumer ---------------------------------------------------------


def _ray_rss_mb() -> float:
    total = psutil.Process().memory_info().rss
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if (p.info["name"] or "").startswith("ray::") or (cmd and cmd[0].startswith("ray::")):
                total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / 2**20


def _object_store_mb() -> float:
    from ray._private.internal_api import memory_summary

    summary = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    m = re.search(r"Plasma memory usage (\d+) MiB", summary)
    return float(m.group(1)) if m else 0.0


def sample_while(run, seconds: float) -> dict:
    """Run ``run(stop_event)`` in a thread for ``seconds`` while sampling memory."""
    stop = threading.Event()
    t = threading.Thread(target=run, args=(stop,), daemon=True)
    t.start()
    samples = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        time.sleep(0.5)
        samples.append({"t": round(time.perf_counter() - t0, 2),
                        "rss_mb": round(_ray_rss_mb(), 1),
                        "object_store_mb": _object_store_mb()})
    stop.set()
    t.join(60)
    half = len(samples) // 2
    first = max(s["rss_mb"] + s["object_store_mb"] for s in samples[:half])
    second = max(s["rss_mb"] + s["object_store_mb"] for s in samples[half:])
    return {"first_half_peak_mb": round(first, 1), "second_half_peak_mb": round(second, 1),
            "growth_pct": round(100 * (second - first) / first, 1),
            "flat": second <= first * 1.10, "samples": samples}


def slow_runs(cluster: LocalCluster, seconds: float, work_us: float) -> dict:
    work_s = work_us / 1e6
    endless = 10**12

    def topology(build, conf):
        def run(stop):
            h = cluster.submit_topology("peers-slow", conf, build())
            stop.wait()
            cluster.kill_topology("peers-slow")
            del h
        return run

    def data(per_row: bool):
        def slow_row(r):
            pipeline.busy_wait(work_s)
            return r["v"] % 3 == 0

        def slow_batch(b):
            pipeline.busy_wait(work_s * len(b["v"]))
            return _keep(b)

        def run(stop):
            ds = ray.data.range(endless)
            if per_row:
                ds = ds.map(lambda r: {"v": r["id"] * 2, "k": r["id"] % 1000}).filter(slow_row)
            else:
                ds = (ds.map_batches(_double, batch_format="numpy", batch_size=BATCH)
                      .map_batches(slow_batch, batch_format="numpy", batch_size=BATCH))
            for _ in ds.iter_batches(batch_size=None):
                if stop.is_set():
                    break
        return run

    def chain(stop):
        parts, _ = _start_chain(endless, work_s)
        stop.wait()
        _stop_chain(parts)

    def loop(stop):
        counts: dict = {}
        i = 0
        while not stop.is_set():
            v, k = i * 2, "k" + str(i % 1000)
            pipeline.busy_wait(work_s)
            if v % 3 == 0:
                counts[k] = counts.get(k, 0) + 1
            i += 1

    runs = {
        "plain_loop": loop,
        "storm_on_ray_per_tuple": topology(lambda: pipeline.build(endless, work_us=work_us),
                                           CONF),
        "storm_on_ray_batch": topology(lambda: pipeline.build_arrow(endless, BATCH, work_us),
                                       CONF_BATCH),
        "ray_data_per_row": data(True),
        "ray_data_map_batches": data(False),
        "ray_actor_queue_chain": chain,
    }
    out = {}
    for key, run in runs.items():
        out[key] = sample_while(run, seconds)
        print(f"slow consumer {key}: peak {out[key]['first_half_peak_mb']:,.0f} → "
              f"{out[key]['second_half_peak_mb']:,.0f} MB ({out[key]['growth_pct']:+.1f}%)",
              flush=True)
        time.sleep(2)  # let killed actors and datasets go before the next one
    return out


# -- report ----------------------------------------------------------------------------------

LABELS = {
    "plain_loop": "plain Python loop (the limit)",
    "storm_on_ray_per_tuple": "storm-on-ray, per-tuple bolts",
    "storm_on_ray_batch": "storm-on-ray, Arrow batch bolts",
    "ray_data_per_row": "Ray Data, per-row map/filter",
    "ray_data_map_batches": "Ray Data, map_batches (numpy)",
    "ray_actor_queue_chain": "Ray actors + ray.util.queue.Queue",
    "storm_on_ray_chained": "storm-on-ray, chainable pipeline, chaining on",
    "storm_on_ray_unchained": "storm-on-ray, chainable pipeline, chaining off",
    "storm_on_ray_unchained_calls": "storm-on-ray, chaining off, actor calls, no socket",
    "bytewax": "Bytewax 0.21, one worker",
}


def markdown(result: dict) -> str:
    lines = ["| pipeline | rows | rows/s | vs Ray Data per-row | memory, slow consumer "
             "(RSS + object store, first → second half peak) |",
             "|---|---:|---:|---:|---|"]
    base = result["rows_per_s"]["ray_data_per_row"]
    for key, label in LABELS.items():
        if key not in result["rows"]:
            continue
        m = result["slow_consumer"].get(key)
        mem = ("not run" if m is None else
               f"{m['first_half_peak_mb']:,.0f} → {m['second_half_peak_mb']:,.0f} MB "
               f"({m['growth_pct']:+.1f}%{', flat' if m['flat'] else ''})")
        lines.append(f"| {label} | {result['rows'][key]:,} | {result['rows_per_s'][key]:,.0f} "
                     f"| {result['rows_per_s'][key] / base:.2f}x | {mem} |")
    return "\n".join(lines) + "\n"


def chart(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    keys = [k for k in LABELS if k in result["rows_per_s"]]
    ax1.barh([LABELS[k] for k in keys], [result["rows_per_s"][k] for k in keys])
    ax1.set_xscale("log")
    ax1.set_xlabel("rows/s (log scale)")
    ax1.set_title("Throughput, same pipeline, one run")
    ax1.invert_yaxis()
    for k in [k for k in keys if k in result["slow_consumer"]]:
        s = result["slow_consumer"][k]["samples"]
        ax2.plot([x["t"] for x in s], [x["rss_mb"] + x["object_store_mb"] for x in s],
                 label=LABELS[k])
    ax2.set_xlabel("seconds")
    ax2.set_ylabel("MB (RSS of Ray workers + driver, plus object store)")
    ax2.set_title("Memory with a slow consumer")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--queue-tuples", type=int, default=10_000)
    ap.add_argument("--slow-s", type=float, default=20.0)
    ap.add_argument("--work-us", type=float, default=40.0)
    args = ap.parse_args()
    n, nq = args.tuples, args.queue_tuples
    context = run_context()
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    ray.data.DataContext.get_current().enable_progress_bars = False
    cpu: dict = {}  # row → CPU seconds of its executor processes
    transfer: dict = {}  # row → its tasks' transfer counters
    unchained = {**CONF, "topology.operator.chaining": False}
    runs = {
        "plain_loop": (n, lambda: plain_loop(n)),
        "storm_on_ray_per_tuple": (n, lambda: ours(cluster, n, CONF)),
        "storm_on_ray_batch": (n, lambda: ours(cluster, n, CONF_BATCH,
                                                 pipeline.build_arrow(n, BATCH))),
        "ray_data_per_row": (n, lambda: ray_data(n)),
        "ray_data_map_batches": (n, lambda: ray_data_batches(n)),
        "ray_actor_queue_chain": (nq, lambda: queue_chain(nq)),
        "storm_on_ray_chained": (n, lambda: ours_with_cpu(
            cluster, n, CONF, pipeline.build_chainable(n), cpu, "storm_on_ray_chained")),
        "storm_on_ray_unchained": (n, lambda: ours_with_cpu(
            cluster, n, unchained, pipeline.build_chainable(n), cpu,
            "storm_on_ray_unchained", transfer)),
        "storm_on_ray_unchained_calls": (n, lambda: ours_with_cpu(
            cluster, n, {**unchained, "topology.transfer.local.socket": False},
            pipeline.build_chainable(n), cpu, "storm_on_ray_unchained_calls", transfer)),
    }
    try:
        import bytewax  # noqa: F401
        runs["bytewax"] = (n, lambda: bytewax_run(n))
    except ImportError:
        print("bytewax: not installed (pip install -e '.[bench]'); its row is skipped")
    rows, seconds = {}, {}
    for key, (rows_k, run) in runs.items():
        dt, counts = run()
        assert counts == expected_counts(rows_k), f"{key}: counts differ"
        rows[key], seconds[key] = rows_k, dt
        print(f"{key}: {rows_k:,} rows in {dt:.2f} s = {rows_k / dt:,.0f} rows/s", flush=True)
    rates = {k: rows[k] / seconds[k] for k in rows}
    result = {"rows": rows, "seconds": seconds, "rows_per_s": rates, "batch_rows": BATCH,
              "per_tuple_vs_ray_data_per_row": rates["storm_on_ray_per_tuple"]
              / rates["ray_data_per_row"],
              "batch_vs_ray_data_map_batches": rates["storm_on_ray_batch"]
              / rates["ray_data_map_batches"],
              "slow_consumer_work_us_per_row": args.work_us,
              "chaining_speedup": rates["storm_on_ray_chained"]
              / rates["storm_on_ray_unchained"],
              "executor_cpu_us_per_row": {k: cpu[k] / rows[k] * 1e6 for k in cpu},
              "chaining_cpu_saving_pct": 100 * (1 - cpu["storm_on_ray_chained"]
                                                / cpu["storm_on_ray_unchained"]),
              "unchained_socket_vs_call": rates["storm_on_ray_unchained"]
              / rates["storm_on_ray_unchained_calls"],
              "unchained_socket_cpu_saving_pct": 100 * (
                  1 - cpu["storm_on_ray_unchained"] / cpu["storm_on_ray_unchained_calls"]),
              "transfer": transfer,
              "paths_verified": {
                  "storm_on_ray_unchained": path_verified(
                      "socket", transfer["storm_on_ray_unchained"]),
                  "storm_on_ray_unchained_calls": path_verified(
                      "call", transfer["storm_on_ray_unchained_calls"])},
              "run": context,
              "bytewax_ratio": (rates["storm_on_ray_chained"] / rates["bytewax"]
                                if "bytewax" in rates else None)}
    result["slow_consumer"] = slow_runs(cluster, args.slow_s, args.work_us)
    # (written before the shutdown: a Ray Data executor thread of a stopped slow run that
    # touches Ray after it can make Ray's core worker exit the process)
    table = markdown(result)
    (RESULTS / "peers.md").write_text(table)
    chart(result, RESULTS / "peers.png")
    result["load_avg_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    write_result("peers", result)
    print(table)
    ours_mem = result["slow_consumer"]["storm_on_ray_per_tuple"]
    ours_bmem = result["slow_consumer"]["storm_on_ray_batch"]
    print(f"per_tuple_vs_ray_data_per_row={result['per_tuple_vs_ray_data_per_row']:.2f} "
          f"batch_vs_ray_data_map_batches={result['batch_vs_ray_data_map_batches']:.2f} "
          f"per_tuple_mem_growth_pct={ours_mem['growth_pct']} "
          f"batch_mem_growth_pct={ours_bmem['growth_pct']} "
          f"ray_data_per_row_mem_growth_pct="
          f"{result['slow_consumer']['ray_data_per_row']['growth_pct']} "
          f"chaining_speedup={result['chaining_speedup']:.2f} "
          f"chaining_cpu_saving_pct={result['chaining_cpu_saving_pct']:.1f} "
          f"bytewax_ratio={_fmt(result['bytewax_ratio'])} "
          f"unchained_socket_vs_call={result['unchained_socket_vs_call']:.2f} "
          f"unchained_socket_cpu_saving_pct="
          f"{result['unchained_socket_cpu_saving_pct']:.1f}", flush=True)
    cluster.shutdown()


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
