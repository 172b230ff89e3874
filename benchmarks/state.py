"""What checkpointed state costs: throughput, persistent windows, checkpoint duration per
flow-control policy idle and under backpressure, and a commit against the state's size.

All in one run, on one ``LocalCluster``; the A and B of each comparison alternate, and
ratios are of medians within the run (a shared 2-core host drifts between runs).

a. ``stateful_ratio``: a position spout (``KeyCycleSpout``, two tasks) over ``--keys``
   keys into a fields-grouped word count (two tasks): the stateful one
   (``StatefulWordCount``, default local provider, a checkpoint every
   ``--interval-ms``) against the same count in a dict without checkpoints
   (``PlainWordCount``), acking off; then the same pair with acking on behind a replaying
   spout (``ReplayingWordSpout``). The rate is the bolt's steady rate: tuples executed
   between 10% and 90% of the input over the time between, from ``stats()`` every 0.1 s
   (so the submit and the final checkpoint are left out). Ratio: the median over the reps
   of stateful rate / plain rate, each rep's two runs adjacent in time.
b. ``persistent_window_ratio``: a position spout (``EventKeySpout``, two tasks, event time
   in its tuples) into event-time tumbling windows (two tasks, fields-grouped) that count
   their tuples per key: a ``StatefulWindowedBolt`` with ``with_persistence()``
   (checkpointed: the open windows are in every checkpoint) against the same windows in a
   plain ``WindowedBolt`` (no checkpoints). Rates as in a.
c. Checkpoint duration (the coordinator's ``last_duration_ms``: trigger to commit) per
   flow-control policy (``topology.backpressure.policy``), idle and under full
   backpressure: a paced position spout (``PacedKeySpout``, ``--bp-rate`` tuples/s) →
   a stateful count that passes each word on (``ForwardingWordCount``, fields-grouped) →
   a sink (``PacedSink``): unpaced when idle, paced at a third of the spout's rate under
   backpressure, so both receive queues on the path fill (up to
   ``--queue`` tuples each, batches of ``--batch``: the flow-control benchmark's
   settings). ``handle.checkpoint_stats()`` is polled every 50 ms and a round's duration
   recorded whenever ``completed`` grows; rounds that end in the first ``--idle-warmup-s``
   or ``--bp-warmup-s`` seconds (queues filling, debloat's moving average settling) are
   left out. The policies take turns, each idle then under backpressure (``--passes N``:
   N such passes, the order reversed in every other, the rounds pooled). Beside it: the
   sink's and the spout's rates, the tuples in the receive queues and debloat's bounds
   (``stats()`` every 0.5 s). The debloat check (Flink's docs,
   "Checkpointing under backpressure" and "Buffer debloating": in-flight data delays an
   aligned barrier; debloating bounds it to ``taskmanager.network.memory.buffer-debloat.
   target`` of work per buffer): p99 under backpressure ≤ (receive queues on the path ×
   ``topology.backpressure.debloat.target.ms``) + 1 s, and ≤ 0.5 × storm2's p99.
d. ``commit_ratio_1m_vs_1k`` (no Ray): a ``KeyValueState`` of 1M keys and one of 1k keys,
   each with a ``LocalProvider`` task store; per round 1,000 random keys are put, then
   the commit is timed: the state's changes taken (``take_changes``), keys encoded, the
   store's ``prepare`` (the delta, one SQLite transaction) and the log's ``COMMITTED``
   record; the garbage collection after it (``collect``, folding the older delta into
   the base) is timed apart. The two sizes alternate round by round.
e. ``recovery_s_node_loss``: a Ray node lost under a checkpointed topology on Redis, the
   time until every task runs again (``benchmarks/node_loss.py``; its own cluster).
f. ``s3_requests_per_task_ckpt``, ``bytes_uploaded_per_ckpt_vs_changed``,
   ``ckpt_ms_p50_s3_vs_local`` (no Ray): a task's checkpoints on ``s3://`` (moto's
   loopback server) counted by a wrapper around the filesystem, beside SQLite
   (``benchmarks/_state_objects.py``).
g. ``rescale_restore_vs_same`` (no Ray): the restore of a 100k-key savepoint taken at 2
   tasks, at 4 tasks over at 2 (``benchmarks/rescale.py``, which also runs alone).

    python -m benchmarks.state [--quick] [--parts ratio,windows,checkpoint,commit,nodeloss,
                                                  objects,rescale] [--result NAME]

Writes benchmarks/results/state.json (``--result``: another name) and
benchmarks/results/state.png (checkpoint duration per policy, idle and under
backpressure); the last line is ``stateful_ratio=...
persistent_window_ratio=... ckpt_ms_p50=... ckpt_ms_p99=... ckpt_under_bp_ms_p99_<policy>=...
ckpt_under_bp_vs_storm2_<policy>=... commit_ratio_1m_vs_1k=... stateful_ratio_acking=...
recovery_s_node_loss=... s3_requests_per_task_ckpt=... bytes_uploaded_per_ckpt_vs_changed=...
ckpt_ms_p50_s3_vs_local=... rescale_restore_vs_same=...``
(``ckpt_ms_*``: storm2 idle, the default policy).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import RESULTS, quantile, write_result
from benchmarks.state_store import filesystem, stats
from topology import (
    Bolt,
    Duration,
    StatefulWindowedBolt,
    TopologyBuilder,
    WindowedBolt,
)

POLICIES = ("storm2", "watermark", "nak", "debloat")
PARTS = ("ratio", "windows", "checkpoint", "commit", "nodeloss", "objects", "rescale")
#: the receive queues a barrier waits in on the checkpoint path (count, sink)
QUEUES_ON_PATH = 2
#: the debloat target's slack on top of the queues' drain time (the issue's bound, s)
DEBLOAT_SLACK_S = 1.0
#: coordinator polling period (s)
POLL_S = 0.05
#: a cell measures what it means to only if the rate that defines it was kept: under
#: backpressure the paced sink at this fraction of its pace at least (else the host, not
#: the sink, was the bottleneck), idle the spout (else something held it)
PREMISE_FRACTION = 0.9
COLORS = {"storm2": "#1f77b4", "watermark": "#d62728", "nak": "#2ca02c",
          "debloat": "#9467bd"}


# -- components (pickled by value into the executors) -------------------------------------


class PacedKeySpout(pipeline.KeyCycleSpout):
    """Emits ``(f"k{i % keys}",)`` at ``rate`` tuples/s over its tasks, for ever; keeps its
    position (``KeyCycleSpout``'s). Held by backpressure, it drops the missed slots
    (``components.Pacer``)."""

    outputs = ("word",)

    def __init__(self, keys: int, rate: float) -> None:
        super().__init__(keys, n=0)
        self.rate = rate

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.emit = collector.emit
        self.my_rate = self.rate / self.step
        self.pacer = pipeline.Pacer()

    def next_tuple(self):
        for _ in range(64):
            if not self.pacer.ready(self.my_rate):
                self.pacer.sleep()
                return
            self.emit((f"k{self.i % self.keys}",))
            self.i += self.step


class ForwardingWordCount(pipeline.StatefulWordCount):
    """``StatefulWordCount`` that passes each word on with its count."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup) -> None:
        word = tup.values[0]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.collector.emit((word, n))


class PacedSink(Bolt):
    """Executes at most ``rate`` tuples/s per task (sleeping when ahead); None: unpaced."""

    outputs = ()

    def __init__(self, rate: float | None) -> None:
        self.rate = rate

    def prepare(self, conf, context, collector):
        self.pacer = pipeline.Pacer()

    def execute(self, tup):
        if self.rate:
            while not self.pacer.ready(self.rate):
                self.pacer.sleep()


class EventKeySpout(pipeline.KeyCycleSpout):
    """Emits ``(f"k{i % keys}", ts)`` for i in [0, n) across its tasks, ``ts`` = ``i //
    per_ms`` (event time, epoch ms from 0), then ends; keeps its position (the position
    handling is ``KeyCycleSpout``'s)."""

    outputs = ("word", "ts")

    def __init__(self, keys: int, n: int, per_ms: int) -> None:
        super().__init__(keys, n)
        self.per_ms = per_ms

    def next_tuple(self):
        if self.i >= self.n:
            raise StopIteration
        self.collector.emit((f"k{self.i % self.keys}", self.i // self.per_ms))
        self.i += self.step


class WindowWordCount(WindowedBolt):
    """Counts each window's tuples per word; emits nothing."""

    def execute(self, window):
        collections.Counter(t.values[0] for t in window.get())


class PersistentWindowWordCount(StatefulWindowedBolt):
    """:class:`WindowWordCount` with its windows checkpointed (the same user work: its own
    state stays empty, so what differs is the runtime's)."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        collections.Counter(t.values[0] for t in window.get())


# -- a. and b.: steady rates side by side ---------------------------------------------------


def _word_count(spout, stateful: bool):
    b = TopologyBuilder()
    b.set_spout("src", spout, 2)
    bolt = pipeline.StatefulWordCount() if stateful else pipeline.PlainWordCount()
    b.set_bolt("count", bolt, 2).fields_grouping("src", ("word",))
    return b.create_topology()


def _windows(n: int, keys: int, args, persistent: bool):
    bolt = PersistentWindowWordCount() if persistent else WindowWordCount()
    bolt.with_tumbling_window(Duration(args.window_ms)).with_timestamp_field("ts") \
        .with_lag(Duration(args.lag_ms)).with_watermark_interval(Duration(args.watermark_ms))
    if persistent:
        bolt.with_persistence()
    b = TopologyBuilder()
    b.set_spout("src", EventKeySpout(keys, n, args.per_ms), 2)
    b.set_bolt("count", bolt, 2).fields_grouping("src", ("word",))
    return b.create_topology()


def steady_rate(cluster, name: str, conf: dict, topology, n: int, bolt: str = "count"
                ) -> dict:
    """Run ``topology`` to its end; the bolt's rate between 10% and 90% of ``n`` executed
    (tuples/s), from ``stats()`` every 0.1 s, and the checkpoint figures."""
    handle = cluster.submit_topology(name, conf, topology)
    readings: list[tuple[float, int]] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            st = handle.stats()
            readings.append((time.monotonic(), sum(t.executed for t in st.component(bolt))))
            if readings[-1][1] >= n:
                break
            time.sleep(0.1)
        assert handle.wait(300), f"{name} did not complete:\n{handle.stats().summary()}"
        ck = handle.checkpoint_stats()
    finally:
        cluster.kill_topology(name)
    lo = next((t, c) for t, c in readings if c >= 0.1 * n)
    hi = next((t, c) for t, c in readings if c >= 0.9 * n)
    out = {"rate_per_s": round((hi[1] - lo[1]) / (hi[0] - lo[0])),
           "measured_s": round(hi[0] - lo[0], 2), "executed": readings[-1][1]}
    if ck is not None:
        out.update(checkpoints=ck["completed"], rollbacks=ck["rollbacks"],
                   failed_rounds=ck["failed_rounds"])
    return out


def side_by_side(cluster, label: str, make, n: int, conf: dict, reps: int) -> dict:
    """``reps`` runs each of ``make(True)`` (A: checkpointed) and ``make(False)`` (B),
    alternating (A first in odd reps, B first in even ones); median rates, and the median
    over the reps of A/B."""
    runs: dict[str, list[dict]] = {"checkpointed": [], "plain": []}
    for r in range(reps):
        order = (True, False) if r % 2 == 0 else (False, True)
        for ckpt in order:
            key = "checkpointed" if ckpt else "plain"
            name = f"st-{label}-{key}-{r}-{time.monotonic_ns()}"
            res = steady_rate(cluster, name, conf, make(ckpt), n)
            runs[key].append(res)
            print(f"{label:15s} {key:12s} {res['rate_per_s']:>9,}/s over "
                  f"{res['measured_s']:.1f} s  {res.get('checkpoints', '')}", flush=True)
    med = {k: statistics.median(x["rate_per_s"] for x in v) for k, v in runs.items()}
    pairs = [a["rate_per_s"] / b["rate_per_s"]
             for a, b in zip(runs["checkpointed"], runs["plain"], strict=True)]
    return {"runs": runs, "median_rate_per_s": med,
            "pair_ratios": [round(x, 3) for x in pairs],
            # the figure: each rep's two runs are adjacent in time, so their ratio leaves
            # out the host's drift between reps
            "ratio": round(statistics.median(pairs), 3),
            "ratio_of_medians": round(med["checkpointed"] / med["plain"], 3)}


# -- c.: checkpoint duration per policy, idle and under backpressure -------------------------


def _bp_topology(args, sink_rate: float | None):
    b = TopologyBuilder()
    b.set_spout("src", PacedKeySpout(args.keys, args.bp_rate))
    b.set_bolt("count", ForwardingWordCount()).fields_grouping("src", ("word",))
    b.set_bolt("sink", PacedSink(sink_rate)).shuffle_grouping("count")
    return b.create_topology()


def checkpoint_cell(cluster, policy: str, loaded: bool, args, ckpt_dir: str, rounds: int,
                    max_s: float) -> dict:
    """One policy and condition: the round durations (ms) after the warm-up, until
    ``rounds`` rounds or ``max_s`` s; the rates and queue fill beside them."""
    sink_rate = args.bp_rate / 3 if loaded else None
    conf = {"topology.acker.executors": 0,
            "topology.backpressure.policy": policy,
            "topology.executor.receive.buffer.size": args.queue,
            "topology.producer.batch.size": args.batch,
            "topology.state.checkpoint.interval.ms": args.interval_ms,
            "topology.state.checkpoint.dir": ckpt_dir}
    name = f"st-ckpt-{policy}-{'bp' if loaded else 'idle'}-{time.monotonic_ns()}"
    handle = cluster.submit_topology(name, conf, _bp_topology(args, sink_rate))
    warmup = args.bp_warmup_s if loaded else args.idle_warmup_s
    durations: list[float] = []
    missed = 0
    done = threading.Event()
    errors: list[str] = []

    def poll(t_measure: float) -> None:
        nonlocal missed
        seen = None
        try:
            while not done.is_set():
                s = handle.checkpoint_stats()
                if seen is not None and s["completed"] > seen:
                    if time.monotonic() >= t_measure:
                        durations.append(s["last_duration_ms"])
                        missed += s["completed"] - seen - 1
                seen = s["completed"]
                time.sleep(POLL_S)
        except Exception as e:  # noqa: BLE001 (reported with the cell)
            errors.append(repr(e))

    samples = []
    try:
        handle.stats()  # every task is up
        t0 = time.monotonic()
        poller = threading.Thread(target=poll, args=(t0 + warmup,), daemon=True)
        poller.start()
        prev = None
        while (time.monotonic() - t0 < warmup + max_s
               and len(durations) < rounds and not errors):
            st = handle.stats()
            now = time.monotonic()
            row = {"t": now - t0,
                   "emitted": sum(x.emitted for x in st.component("src")),
                   "sunk": sum(x.executed for x in st.component("sink")),
                   "queued_count": sum(x.queue_population for x in st.component("count")),
                   "queued_sink": sum(x.queue_population for x in st.component("sink")),
                   # debloat's bound on each receive queue and the rate it is sized by
                   "bound_sink": st.component("sink")[0].policy_state.get("inflight_bound"),
                   "bound_count": st.component("count")[0].policy_state.get(
                       "inflight_bound"),
                   "busy_rate_sink": st.component("sink")[0].policy_state.get(
                       "throughput_per_busy_s"),
                   "busy_rate_count": st.component("count")[0].policy_state.get(
                       "throughput_per_busy_s")}
            if prev is not None and now - t0 >= warmup:
                dt = row["t"] - prev["t"]
                row["spout_rate"] = (row["emitted"] - prev["emitted"]) / dt
                row["sink_rate"] = (row["sunk"] - prev["sunk"]) / dt
                samples.append(row)
            prev = row
            time.sleep(0.5)
        done.set()
        poller.join(5)
        ck = handle.checkpoint_stats()
    finally:
        done.set()
        cluster.kill_topology(name)

    def med(key):
        xs = [r[key] for r in samples if r.get(key) is not None]
        return round(statistics.median(xs), 1) if xs else None

    kept = med("sink_rate" if loaded else "spout_rate")
    premise = kept is not None and kept >= PREMISE_FRACTION * (sink_rate or args.bp_rate)
    return {"policy": policy, "loaded": loaded, "premise_held": premise,
            "sink_rate_target": sink_rate,
            "durations_ms": [round(d, 1) for d in durations], "missed_rounds": missed,
            "rollbacks": ck["rollbacks"], "failed_rounds": ck["failed_rounds"],
            "errors": errors, "spout_rate_median": med("spout_rate"),
            "sink_rate_median": med("sink_rate"),
            "queued_count_median": med("queued_count"),
            "queued_sink_median": med("queued_sink"),
            "queued_max": max((r["queued_count"] + r["queued_sink"] for r in samples),
                              default=None),
            "bound_sink_median": med("bound_sink"), "bound_count_median": med("bound_count"),
            "busy_rate_sink_median": med("busy_rate_sink"),
            "busy_rate_count_median": med("busy_rate_count")}


def checkpoint_durations(cluster, args, ckpt_dir: str) -> dict:
    """Every policy idle and under backpressure, ``args.passes`` passes with the policies
    alternating; the rounds of the passes pooled per policy and condition."""
    cells: list[dict] = []
    for p in range(args.passes):
        order = POLICIES if p % 2 == 0 else tuple(reversed(POLICIES))
        for policy in order:
            for loaded in (False, True):
                n = args.bp_rounds if loaded else args.idle_rounds
                c = checkpoint_cell(cluster, policy, loaded, args, ckpt_dir,
                                    -(-n // args.passes), args.bp_max_s if loaded
                                    else args.idle_max_s)
                c["pass"] = p
                cells.append(c)
                d = c["durations_ms"]
                print(f"ckpt {policy:9s} {'backpressure' if loaded else 'idle':12s} "
                      f"pass {p}: {len(d)} rounds, p50 "
                      f"{quantile(d, 0.5) if d else float('nan'):8.1f} ms, max "
                      f"{max(d, default=float('nan')):8.1f} ms; spout {c['spout_rate_median']}"
                      f"/s sink {c['sink_rate_median']}/s queued {c['queued_count_median']}+"
                      f"{c['queued_sink_median']}; debloat bounds {c['bound_count_median']}/"
                      f"{c['bound_sink_median']}; rollbacks {c['rollbacks']} "
                      f"{'' if c['premise_held'] else 'PREMISE NOT HELD (a busy host?) '}"
                      f"{'; '.join(c['errors'])}", flush=True)
    summary: dict[str, dict] = {}
    for policy in POLICIES:
        for loaded in (False, True):
            mine = [c for c in cells if c["policy"] == policy and c["loaded"] == loaded]
            d = [x for c in mine for x in c["durations_ms"]]
            key = f"{policy}_{'bp' if loaded else 'idle'}"
            summary[key] = {
                "rounds": len(d),
                "premise_held": all(c["premise_held"] for c in mine),
                "p50_ms": round(quantile(d, 0.5), 1) if d else None,
                "p99_ms": round(quantile(d, 0.99), 1) if d else None,
                "max_ms": round(max(d), 1) if d else None,
                "rollbacks": sum(c["rollbacks"] for c in mine),
                "failed_rounds": sum(c["failed_rounds"] for c in mine),
                "missed_rounds": sum(c["missed_rounds"] for c in mine),
                "spout_rate_median": _median(c["spout_rate_median"] for c in mine),
                "sink_rate_median": _median(c["sink_rate_median"] for c in mine),
                "queued_median": _median((c["queued_count_median"] or 0)
                                         + (c["queued_sink_median"] or 0) for c in mine),
                "bound_sink_median": _median(c["bound_sink_median"] for c in mine),
                "bound_count_median": _median(c["bound_count_median"] for c in mine),
                "busy_rate_sink_median": _median(c["busy_rate_sink_median"] for c in mine),
                "busy_rate_count_median": _median(c["busy_rate_count_median"]
                                                  for c in mine)}
    storm2 = summary["storm2_bp"]["p99_ms"]
    for policy in POLICIES:
        s = summary[f"{policy}_bp"]
        s["p99_vs_storm2"] = (round(s["p99_ms"] / storm2, 3)
                              if s["p99_ms"] is not None and storm2 else None)
    bound_ms = QUEUES_ON_PATH * args.debloat_target_ms + DEBLOAT_SLACK_S * 1000
    deb = summary["debloat_bp"]
    check = {"queues_on_path": QUEUES_ON_PATH, "debloat_target_ms": args.debloat_target_ms,
             "bound_ms": bound_ms, "p99_ms": deb["p99_ms"],
             "within_bound": deb["p99_ms"] is not None and deb["p99_ms"] <= bound_ms,
             "storm2_p99_ms": storm2, "vs_storm2": deb["p99_vs_storm2"],
             "within_half_of_storm2": deb["p99_vs_storm2"] is not None
             and deb["p99_vs_storm2"] <= 0.5}
    check["held"] = check["within_bound"] and check["within_half_of_storm2"]
    return {"cells": cells, "summary": summary, "debloat_check": check,
            "premise_held": all(c["premise_held"] for c in cells)}


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 1) if xs else None


def chart(summary: dict, bound_ms: float, path: Path) -> None:
    """Bars of p50 (light) and p99 (dark) checkpoint duration per policy, idle and under
    backpressure; the debloat target (``bound_ms``) dashed on the second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, cond, title in ((axes[0], "idle", "idle (sink unpaced)"),
                            (axes[1], "bp", "full backpressure (sink at 1/3 of the spout)")):
        xs = range(len(POLICIES))
        p50 = [summary[f"{p}_{cond}"]["p50_ms"] or 0 for p in POLICIES]
        p99 = [summary[f"{p}_{cond}"]["p99_ms"] or 0 for p in POLICIES]
        ax.bar([x - 0.2 for x in xs], p50, 0.4, color=[COLORS[p] for p in POLICIES],
               alpha=0.45)
        ax.bar([x + 0.2 for x in xs], p99, 0.4, color=[COLORS[p] for p in POLICIES])
        for x, v in zip(xs, p99, strict=True):
            ax.text(x + 0.2, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
        handles = [Patch(color="grey", alpha=0.45, label="p50"),
                   Patch(color="grey", label="p99")]
        if cond == "bp":
            ax.axhline(bound_ms, color="black", lw=0.8, ls="--")
            handles.append(plt.Line2D([], [], color="black", lw=0.8, ls="--",
                                      label=f"debloat target ({bound_ms:,.0f} ms)"))
        ax.set_xticks(list(xs), POLICIES)
        ax.set_ylabel("checkpoint duration, ms (trigger → commit)")
        ax.set_title(title, fontsize=9)
        ax.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- d.: a commit of 1k dirty keys against the state's size (no Ray) ------------------------


def commit_cost(sizes: tuple[int, ...], dirty: int, rounds: int, root: Path) -> dict:
    """Per size, a ``KeyValueState`` loaded and committed as checkpoint 1, then ``rounds``
    commits of ``dirty`` random keys each, the sizes alternating round by round."""
    from actors.state._provider import COMMITTED
    from actors.state.providers import LocalProvider
    from topology import KeyValueState

    provider = LocalProvider(str(root), "state-bench", "commit")
    enc = msgpack.Packer(use_bin_type=True).pack
    rng = random.Random(7)
    setups = {}
    for n in sizes:
        t0 = time.perf_counter()
        state = KeyValueState()
        for i in range(n):
            state.put(f"w{i}", i)
        store = provider.task_store(f"size-{n}", 0)
        log = provider.checkpoint_log() if n == sizes[0] else setups[sizes[0]]["log"]
        puts, deletes = state.take_changes()
        store.prepare(1, [(0, enc(k), v) for k, v in puts], [(0, enc(k)) for k in deletes])
        setups[n] = {"state": state, "store": store, "log": log, "commit": [], "gc": [],
                     "load_s": round(time.perf_counter() - t0, 2)}
    commit_ms: dict[int, list[float]] = {n: [] for n in sizes}
    gc_ms: dict[int, list[float]] = {n: [] for n in sizes}
    version = 1
    for r in range(rounds + 2):  # the first two: warm-up (the first collect has no base)
        version += 1
        for n in (sizes if r % 2 == 0 else tuple(reversed(sizes))):
            s = setups[n]
            state, store = s["state"], s["store"]
            for i in rng.sample(range(n), min(dirty, n)):
                state.put(f"w{i}", r)
            t0 = time.perf_counter()
            puts, deletes = state.take_changes()
            store.prepare(version, [(0, enc(k), v) for k, v in puts],
                          [(0, enc(k)) for k in deletes])
            s["log"].record(COMMITTED, version)
            t1 = time.perf_counter()
            store.collect(version - 1)
            t2 = time.perf_counter()
            if r >= 2:
                commit_ms[n].append((t1 - t0) * 1e3)
                gc_ms[n].append((t2 - t1) * 1e3)
    provider.close()
    out = {str(n): {"keys": n, "dirty": dirty, "load_s": setups[n]["load_s"],
                    "commit_ms": stats(commit_ms[n]), "gc_ms": stats(gc_ms[n])}
           for n in sizes}
    small, big = str(sizes[0]), str(sizes[-1])
    out["commit_ratio"] = round(out[big]["commit_ms"]["p50"] / out[small]["commit_ms"]["p50"],
                                3)
    out["gc_ratio"] = round(out[big]["gc_ms"]["p50"] / out[small]["gc_ms"]["p50"], 3)
    return out


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of about 2 minutes")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--reps", type=int, default=3, help="runs of each side in a. and b.")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--tuples", type=int, default=500_000, help="a., acking off")
    ap.add_argument("--acking-tuples", type=int, default=150_000, help="a., acking on")
    ap.add_argument("--window-tuples", type=int, default=300_000, help="b.")
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--window-ms", type=int, default=1000, help="b.: event-time window")
    ap.add_argument("--per-ms", type=int, default=10, help="b.: tuples per event-time ms")
    ap.add_argument("--lag-ms", type=int, default=50, help="b.: with_lag")
    ap.add_argument("--watermark-ms", type=int, default=100, help="b.: watermark interval")
    ap.add_argument("--bp-rate", type=float, default=6000, help="c.: the spout, tuples/s")
    ap.add_argument("--queue", type=int, default=4096, help="c.: receive queue, tuples")
    ap.add_argument("--batch", type=int, default=64, help="c.: producer batch")
    ap.add_argument("--idle-rounds", type=int, default=10, help="c.: over all passes")
    ap.add_argument("--bp-rounds", type=int, default=20, help="c.: over all passes")
    ap.add_argument("--passes", type=int, default=1,
                    help="c.: passes over the policies (the order reversed in every other)")
    ap.add_argument("--idle-warmup-s", type=float, default=3.0)
    ap.add_argument("--bp-warmup-s", type=float, default=8.0,
                    help="the queues fill and debloat's moving average (about five metrics "
                    "intervals of 1 s) settles")
    ap.add_argument("--idle-max-s", type=float, default=20.0,
                    help="per cell and pass, after the warm-up")
    ap.add_argument("--bp-max-s", type=float, default=100.0,
                    help="per cell and pass, after the warm-up")
    ap.add_argument("--commit-sizes", default="1000,1000000")
    ap.add_argument("--commit-rounds", type=int, default=200)
    ap.add_argument("--objects-keys", type=int, default=10_000, help="f.")
    ap.add_argument("--objects-rounds", type=int, default=60, help="f.")
    ap.add_argument("--result", default="state", help="benchmarks/results/<NAME>.json")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.tuples, args.acking_tuples = 1, 300_000, 60_000
        args.window_tuples, args.idle_rounds, args.bp_rounds, args.passes = 150_000, 3, 3, 1
        args.idle_warmup_s, args.bp_warmup_s, args.idle_max_s, args.bp_max_s = 2, 5, 5, 10
        args.commit_rounds = 30
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - set(PARTS):
        ap.error(f"unknown parts {sorted(set(parts) - set(PARTS))}; known {PARTS}")
    from cluster import LocalCluster
    from topology import make_config

    args.debloat_target_ms = make_config({})["topology.backpressure.debloat.target.ms"]
    ray.cloudpickle.register_pickle_by_value(pipeline)
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = time.time()
    load_before = os.getloadavg()
    result: dict = {"command": "python -m benchmarks.state" + (" --quick" if args.quick
                                                                else ""),
                    "args": vars(args)}
    root = Path(tempfile.mkdtemp(prefix="state-bench-"))
    try:
        if "commit" in parts:  # before Ray starts: the host is quieter
            sizes = tuple(int(x) for x in args.commit_sizes.split(","))
            result["commit"] = c = commit_cost(sizes, 1000, args.commit_rounds,
                                               root / "commit")
            result["commit"]["filesystem"] = filesystem(root)
            for n in sizes:
                print(f"commit 1k dirty keys into {n:>9,} keys: p50/p99 "
                      f"{c[str(n)]['commit_ms']['p50']:.2f}/{c[str(n)]['commit_ms']['p99']:.2f}"
                      f" ms, GC p50 {c[str(n)]['gc_ms']['p50']:.2f} ms", flush=True)
        if "objects" in parts:
            from benchmarks._state_objects import run_against_moto
            result["objects"] = o = run_against_moto(args.objects_keys, args.objects_rounds)
            print(f"objects: {o['s3_requests_per_task_ckpt']} calls/ckpt, "
                  f"{o['bytes_uploaded_per_ckpt_vs_changed']} x the bytes changed, prepare "
                  f"p50 {o['prepare_ms_p50_s3']} ms on S3, {o['prepare_ms_p50_local']} ms "
                  f"on SQLite; a base at every commit instead: "
                  f"{o['base_every_ckpt']['s3_requests_per_task_ckpt']} calls/ckpt, "
                  f"{o['base_every_ckpt']['bytes_uploaded_per_ckpt_vs_changed']} x",
                  flush=True)
        if "rescale" in parts:
            from benchmarks.rescale import closing_line, rescale_restore
            result["rescale"] = rescale_restore(100_000, 1)
            print(closing_line(result["rescale"]), flush=True)
        if "nodeloss" in parts:  # (a Ray cluster of its own, in another process)
            from benchmarks.node_loss import recovery_runs
            result["node_loss"] = recovery_runs(1)
            print(f"node lost: running again after {result['node_loss']['recovery_s']} s",
                  flush=True)
        ray_parts = [p for p in parts if p not in ("commit", "nodeloss", "objects", "rescale")]
        if ray_parts:
            cluster = LocalCluster(num_cpus=2)
            try:
                ckpt = str(root / "ckpt")
                base = {"topology.state.checkpoint.interval.ms": args.interval_ms,
                        "topology.state.checkpoint.dir": ckpt}
                if "ratio" in parts:
                    result["stateful_acking_off"] = side_by_side(
                        cluster, "acking-off",
                        lambda s: _word_count(pipeline.KeyCycleSpout(args.keys, args.tuples),
                                              s),
                        args.tuples, {**base, "topology.acker.executors": 0}, args.reps)
                    words = pipeline.words(args.acking_tuples, args.keys)
                    result["stateful_acking_on"] = side_by_side(
                        cluster, "acking-on",
                        lambda s: _word_count(pipeline.ReplayingWordSpout(words), s),
                        args.acking_tuples, {**base, "topology.acker.executors": 1},
                        args.reps)
                if "windows" in parts:
                    result["windows"] = side_by_side(
                        cluster, "windows",
                        lambda s: _windows(args.window_tuples, args.keys, args, s),
                        args.window_tuples, {**base, "topology.acker.executors": 0},
                        args.reps)
                if "checkpoint" in parts:
                    result["checkpoint"] = checkpoint_durations(cluster, args, ckpt)
                    chart(result["checkpoint"]["summary"],
                          result["checkpoint"]["debloat_check"]["bound_ms"],
                          RESULTS / "state.png")
            finally:
                cluster.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["wall_s"] = round(time.time() - started, 1)
    # the host's load (1, 5, 15 min) before and after: a shared host's noise
    result["loadavg"] = {"before": load_before, "after": os.getloadavg()}
    write_result(args.result, result)
    print(f"wall time {result['wall_s']:.0f} s")

    def fmt(x, spec: str = ".3f") -> str:
        return "none" if x is None else format(x, spec)

    figures = []
    figures.append(f"stateful_ratio={fmt(result.get('stateful_acking_off', {}).get('ratio'))}")
    figures.append(f"persistent_window_ratio={fmt(result.get('windows', {}).get('ratio'))}")
    cp = result.get("checkpoint")
    if cp is not None:
        s = cp["summary"]
        figures.append(f"ckpt_ms_p50={fmt(s['storm2_idle']['p50_ms'], '.1f')}")
        figures.append(f"ckpt_ms_p99={fmt(s['storm2_idle']['p99_ms'], '.1f')}")
        figures += [f"ckpt_under_bp_ms_p99_{p}={fmt(s[f'{p}_bp']['p99_ms'], '.1f')}"
                    for p in POLICIES]
        figures += [f"ckpt_under_bp_vs_storm2_{p}={fmt(s[f'{p}_bp']['p99_vs_storm2'])}"
                    for p in POLICIES]
        d = cp["debloat_check"]
        print(f"debloat target: p99 {fmt(d['p99_ms'], '.0f')} ms <= {d['bound_ms']:.0f} ms "
              f"({d['queues_on_path']} queues x {d['debloat_target_ms']:g} ms + "
              f"{DEBLOAT_SLACK_S:g} s): {d['within_bound']}; <= 0.5 x storm2's p99 "
              f"({fmt(d['storm2_p99_ms'], '.0f')} ms): {d['within_half_of_storm2']}")
        if not cp["premise_held"]:
            print("checkpoint cells whose defining rate was not kept (see premise_held in "
                  "the JSON): " + ", ".join(f"{c['policy']} {'bp' if c['loaded'] else 'idle'}"
                                           for c in cp["cells"] if not c["premise_held"]))
    figures.append(f"commit_ratio_1m_vs_1k={fmt(result.get('commit', {}).get('commit_ratio'))}")
    figures.append("stateful_ratio_acking="
                   f"{fmt(result.get('stateful_acking_on', {}).get('ratio'))}")
    figures.append("recovery_s_node_loss="
                   f"{fmt(result.get('node_loss', {}).get('recovery_s'), '.2f')}")
    o = result.get("objects", {})
    figures += [f"{key}={fmt(o.get(key), '.2f')}" for key in (
        "s3_requests_per_task_ckpt", "bytes_uploaded_per_ckpt_vs_changed",
        "ckpt_ms_p50_s3_vs_local")]
    figures.append(f"rescale_restore_vs_same={fmt(result.get('rescale', {}).get('ratio'))}")
    print(" ".join(figures))


if __name__ == "__main__":
    main()
