"""Flow-control policies side by side: storm2, watermark, nak and debloat on the same scenarios.

Each policy (``topology.backpressure.policy``) runs every scenario in one run, on one
``LocalCluster``; paced components (tests/components.py: ``PacedSpout``,
``PacedLatencySink``) take their speeds from schedules that start together once every task
is up (``StartClock``), so a phase means the same for every policy:

a. ``flink``: Flink's producer/consumer experiment (benchmarks/flink_experiment.py): the
   producer at 60% of ``--max-rate``, the consumer at 100 / 30 / 100 / 30 / 100%
   (``--phase-seconds`` each), then a step to 10% (``--step-seconds``) and back to 100%.
b. ``fanout-shuffle`` / ``fanout-all``: one spout at ``--fan-rate`` to three sink tasks
   (``--fan-sink-rate`` each), shuffle (load-aware when the runtime has it) or all grouping
   (the NAK blog's multicast case); task 0 slows to a tenth, then its actor is killed
   (``ray.kill``, restarted by Ray: ``topology.executor.max.restarts`` 1) and comes back at
   full speed.
c. ``two-workers``: producer and consumer in different workers (``topology.workers`` 2), so
   the consumer's backlog reaches the producer through the status path (halt-lag); the
   consumer at 100%, a step to 10%, back to 100%.
d. ``idle``: two workers, the producer at 5% of a full-speed consumer: nobody overloaded.

Measured per policy and scenario, from ``handle.stats()`` every ``--sample-seconds`` and
the sinks' per-tuple latencies: throughput (tuples executed by the sinks per s);
end-to-end latency p50/p99 (emit timestamp carried in the tuple); tuples in flight (sum of
``queue_population + overflow`` over the tasks: max, mean) and their wire bytes
(``queued_bytes + overflow_bytes``); after a step, the time to detect it (the producer's
rate first within ``TOL_PCT`` points of its new target) and to recover (back within them of
its own pace after the step up; in fan-out, after the kill); oscillation (coefficient of
variation of the producer's rate in the phases where the consumer holds it, after the
settling second); control messages per second (``control_sent`` and ``bp_reports`` of
every task, the transfer actors' ``statuses_sent``, and for watermark the coordinator's
pushes, counted as the spouts' ``control_received``); the follow error (mean |producer −
the rate it should have| over each phase after a fixed settling second, every phase counted:
benchmarks/_common.follow_error), here the mean over the scored phases, in points of the
full speed; and tuples lost (emitted × fan-out − executed − still queued after a drain).

    python -m benchmarks.flow_control [--phase-seconds 4] [--step-seconds 8]
        [--policies storm2,nak] [--scenarios flink,idle]

Writes benchmarks/results/flow_control.json, .md (one row per policy × scenario) and .png;
the last line is ``best_follow_error_pct=... storm2_follow_error_pct=...
watermark_oscillation_cv=... nak_idle_msgs_per_s=... nak_loaded_msgs_per_s=...
debloat_inflight_shrink_ratio=... debloat_latency_ms_p99=...`` (the loaded figures from
scenario a; the shrink ratio is debloat's receive-queue bound with the consumer at 10% over
the bound at 100%).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import (
    RESULTS,
    SETTLE_S,
    coefficient_of_variation,
    follow_error,
    interval_rates,
    quantile,
    reaction_time,
    write_result,
)
from cluster import LocalCluster
from topology import ConfigError, make_config

POLICIES = ("storm2", "watermark", "nak", "debloat")
SCENARIOS = ("flink", "fanout-shuffle", "fanout-all", "two-workers", "idle")
#: detect / recover: the producer's rate within this many points of its target
TOL_PCT = 5.0
#: the producer's pace in scenarios a and c (of the full speed), as in Flink's experiment
PRODUCER_SPEED = 0.6
#: the slow step's speed (of the full speed)
STEP_SPEED = 0.1
#: the producer's pace in the idle scenario (of the consumer's full speed)
IDLE_SPEED = 0.05
#: the load-aware shuffle's switch (another change adds it; run without it if absent)
LOADAWARE_KEY = "topology.disable.loadaware.messaging"
#: from the start's announcement to the start (s): the tasks read it within 20 ms
LEAD_S = 0.5
#: the longest wait for the queues to drain once the producer stops (s)
DRAIN_S = 8.0
COLORS = {"storm2": "#1f77b4", "watermark": "#d62728", "nak": "#2ca02c",
          "debloat": "#9467bd"}


class Phase(NamedTuple):
    """One phase of a scenario, in s since the run's start. ``target_pct``: the rate the
    producer should have (% of the scenario's full speed), None if not scored;
    ``controlled``: the consumer holds the producer below its pace (flow control acts)."""

    name: str
    start: float
    end: float
    target_pct: float | None
    controlled: bool


@dataclass
class Scenario:
    """What a scenario runs (built for a start file, ``components.StartClock``) and how it
    is scored.

    ``full_rate``: the tuples/s that 100% means for the rates. ``step``: indices of the
    phases where the consumer steps down and back up (detect / recover), or None;
    ``kill_at``: when to kill sink task 0 (s since start), or None; ``fanout``: copies of
    each tuple the sinks execute."""

    key: str
    title: str
    topology: Any
    conf: dict
    phases: list[Phase]
    full_rate: float
    fanout: int = 1
    step: tuple[int, int] | None = None
    kill_at: float | None = None
    note: str = ""

    @property
    def duration(self) -> float:
        return self.phases[-1].end


def _schedule(phases: list[tuple[float, float]], after: float | None = None) -> tuple:
    """A ``speed_at`` schedule from the start: ``(length s, speed)`` phases in turn, then
    ``after`` (default: the last speed)."""
    out, t = [], 0.0
    for length, speed in phases:
        out.append((t, speed))
        t += length
    if after is not None:
        out.append((t, after))
    return tuple(out)


def _phases(lengths_speeds: list[tuple[float, float]], producer: float) -> list[Phase]:
    out, t = [], 0.0
    for length, speed in lengths_speeds:
        out.append(Phase(f"consumer {speed:.0%}", t, t + length, min(producer, speed) * 100,
                         speed < producer))
        t += length
    return out


def scenario_flink(start_file: str, args, base: dict) -> Scenario:
    p, s = args.phase_seconds, args.step_seconds
    speeds = [(p, 1.0), (p, 0.3), (p, 1.0), (p, 0.3), (p, 1.0), (s, STEP_SPEED), (p, 1.0)]
    phases = _phases(speeds, PRODUCER_SPEED)
    topo = pipeline.build_paced(
        args.max_rate, _schedule([(phases[-1].end, PRODUCER_SPEED)], after=0.0),
        _schedule(speeds), start_file)
    return Scenario("flink", "a. Flink's experiment + a step to 10%", topo, dict(base),
                    phases, args.max_rate, step=(5, 6))


def scenario_two_workers(start_file: str, args, base: dict) -> Scenario:
    p, s = args.phase_seconds, args.step_seconds
    speeds = [(p, 1.0), (s, STEP_SPEED), (p, 1.0)]
    phases = _phases(speeds, PRODUCER_SPEED)
    topo = pipeline.build_paced(
        args.max_rate, _schedule([(phases[-1].end, PRODUCER_SPEED)], after=0.0),
        _schedule(speeds), start_file)
    return Scenario("two-workers", "c. two workers: a step to 10% across workers", topo,
                    {**base, "topology.workers": 2}, phases, args.max_rate, step=(1, 2))


def scenario_idle(start_file: str, args, base: dict) -> Scenario:
    phases = [Phase("idle (producer 5%)", 0.0, args.idle_seconds, IDLE_SPEED * 100, False)]
    topo = pipeline.build_paced(
        args.max_rate, _schedule([(args.idle_seconds, IDLE_SPEED)], after=0.0),
        _schedule([(args.idle_seconds, 1.0)]), start_file)
    return Scenario("idle", "d. idle: producer at 5%, two workers", topo,
                    {**base, "topology.workers": 2}, phases, args.max_rate)


def scenario_fanout(start_file: str, args, base: dict, grouping: str, loadaware: bool
                    ) -> Scenario:
    normal, slow, dead = 3.0, args.phase_seconds, args.phase_seconds * 2
    kill_at = normal + slow
    total = kill_at + dead
    pace, sink = args.fan_rate, args.fan_sink_rate
    slow_rate = sink * STEP_SPEED
    if grouping == "all":  # every tuple to every task: the slowest task sets the pace
        slow_target = min(pace, slow_rate)
    elif loadaware:  # routed by load: the tasks' speeds add up
        slow_target = min(pace, 2 * sink + slow_rate)
    else:  # round robin: each task gets a third
        slow_target = min(pace, 3 * slow_rate)
    phases = [Phase("all full", 0.0, normal, 100.0, False),
              Phase("task 0 at 10%", normal, kill_at, slow_target / pace * 100,
                    slow_target < pace),
              # the ideal while task 0 restarts depends on how long Ray takes: scored by
              # the recovery time instead
              Phase("task 0 killed, restarted at full", kill_at, total, None, False)]
    task0 = _schedule([(normal, 1.0), (slow, STEP_SPEED)], after=1.0)
    topo = pipeline.build_paced(pace, _schedule([(total, 1.0)], after=0.0),
                                _schedule([(total, 1.0)]), start_file, parallelism=3,
                                grouping=grouping, consumer_max_rate=sink,
                                task_schedules={0: task0})
    conf = {**base, "topology.executor.max.restarts": 1}
    note = ""
    if grouping == "shuffle":
        if loadaware:
            conf[LOADAWARE_KEY] = False
        else:
            note = f"load-aware shuffle absent ({LOADAWARE_KEY} unknown): round robin"
    return Scenario(f"fanout-{grouping}", f"b. 1:3 fan-out, {grouping} grouping: task 0 "
                    f"slows to 10%, then dies", topo, conf, phases, pace, fanout=3 if
                    grouping == "all" else 1, kill_at=kill_at, note=note)


class Sample(NamedTuple):
    """One ``stats()`` reading: ``t`` s since the run's start; cumulative counts (restarts
    folded in); in-flight tuples and bytes now; the policies' state now."""

    t: float
    emitted: float
    executed: float
    control: float
    inflight: int
    inflight_bytes: int
    bound: int | None
    rate_limit: float | None
    throttled: bool | None
    task0_executed: int
    task0_restarted: bool


class Sampler:
    """Reads ``handle.stats()`` into :class:`Sample` rows. Counters are summed per task as
    increments, a restarted task's counters (starting again at 0) included."""

    def __init__(self, handle, t0: float, policy: str) -> None:
        self.handle, self.t0, self.policy = handle, t0, policy
        self._last: dict[tuple, float] = {}
        self._sum: dict[str, float] = {"emitted": 0.0, "executed": 0.0, "control": 0.0}
        self.rows: list[Sample] = []
        self.stats = None

    def _add(self, name: str, key: Any, raw: float) -> None:
        last = self._last.get((name, key), 0.0)
        self._sum[name] += raw - last if raw >= last else raw  # lower: a restarted task
        self._last[(name, key)] = raw

    def sample(self):
        before = time.time()
        st = self.handle.stats()
        t = (before + time.time()) / 2 - self.t0
        for x in st.tasks:
            if x.component == "producer":
                self._add("emitted", x.task, x.emitted)
            elif x.component == "sink":
                self._add("executed", x.task, x.executed)
            ctl = x.control_sent + x.bp_reports
            if self.policy == "watermark" and x.component == "producer":
                ctl += x.control_received  # the coordinator's pushes to it
            self._add("control", x.task, ctl)
        for w in st.workers:
            self._add("control", ("worker", w.worker), w.statuses_sent)
        sinks = st.component("sink")
        bounds = [x.policy_state["inflight_bound"] for x in sinks
                  if "inflight_bound" in x.policy_state]
        spout = st.component("producer")[0].policy_state
        task0 = sinks[0]  # (task index 0: the one that slows and is killed in fan-out)
        self.rows.append(Sample(
            t, self._sum["emitted"], self._sum["executed"], self._sum["control"],
            sum(x.queue_population + x.overflow for x in st.tasks),
            sum(x.queued_bytes + x.overflow_bytes for x in st.tasks),
            min(bounds) if bounds else None, spout.get("rate_limit"), spout.get("throttled"),
            task0.executed, task0.restarted))
        self.stats = st
        return st

    def held(self) -> int:
        """Tuples still held anywhere at the last reading (queues, overflows, pending emits,
        partial batches)."""
        return sum(x.queue_population + x.overflow + x.pending_emits + x.batched
                   for x in self.stats.tasks)


def run_cell(cluster: LocalCluster, make: Callable[[str], Scenario], policy: str,
             sample_s: float) -> dict:
    """Run one scenario under one policy; returns its measurements (see the module doc).

    The schedules start ``LEAD_S`` after every task answered its first stats call (the
    start is announced through a file, ``components.StartClock``), so a slow submit costs no
    phase."""
    tmp = tempfile.mkdtemp(prefix="flow-control-")
    start_file = os.path.join(tmp, "start")
    sc = make(start_file)
    name = f"fc-{sc.key}-{policy}"
    conf = {**sc.conf, "topology.backpressure.policy": policy}
    killed = None
    notes = [sc.note] if sc.note else []
    submitted = time.time()
    handle = cluster.submit_topology(name, conf, sc.topology)
    try:
        handle.stats()  # every task is up
        submit_s = time.time() - submitted
        t0 = time.time() + LEAD_S
        with open(start_file + ".tmp", "w") as f:
            f.write(repr(t0))
        os.replace(start_file + ".tmp", start_file)
        sampler = Sampler(handle, t0, policy)
        time.sleep(max(0.0, t0 - time.time()))
        end, next_t = t0 + sc.duration, t0
        while time.time() < end:
            if sc.kill_at is not None and killed is None and time.time() >= t0 + sc.kill_at:
                sampler.sample()  # its count just before it dies
                task = handle.topology.component_tasks["sink"][0]
                ray.kill(handle.actors[task], no_restart=False)
                killed = time.time() - t0
            sampler.sample()
            next_t = max(next_t + sample_s, time.time())
            time.sleep(max(0.0, min(next_t, end) - time.time()))
        sampler.sample()
        # the producer's schedule stops it at the end: wait for what it sent to drain
        drain_end = time.time() + DRAIN_S
        while time.time() < drain_end:
            time.sleep(0.2)
            prev = sampler.rows[-1].executed
            sampler.sample()
            if sampler.held() == 0 and sampler.rows[-1].executed == prev:
                break
        held = sampler.held()
        st = sampler.stats
        lat = [(v[0] - t0, v[1] * 1000.0) for *_, v in handle.collected("sink")]
        restarts = handle.restarts()
    finally:
        cluster.kill_topology(name)
        shutil.rmtree(tmp, ignore_errors=True)
    if held:
        notes.append(f"{held} tuples still held {DRAIN_S:.0f} s after the producer stopped")
    last = sampler.rows[-1]
    lost = int(last.emitted * sc.fanout - last.executed - held)
    errors = sum(x.error_count for x in st.tasks)
    if errors:
        kinds = sorted({f"{e['component']}:{e['error_type']}: {e['message'][:80]}"
                        for x in st.tasks for e in x.errors})
        notes.append(f"{errors} task errors ({'; '.join(kinds)})")
    return score(sc, policy, sampler.rows, lat, st, {
        "submit_s": round(submit_s, 2), "killed_at_s": killed, "lost": lost, "held": held,
        "restarts": {k: v for k, v in restarts.items() if v}, "notes": notes,
        "config": {k: v for k, v in conf.items()}})


def _window(rows: list[Sample], start: float, end: float) -> list[Sample]:
    return [r for r in rows if start <= r.t <= end]


def _rate(rows: list[Sample], attr: str, start: float, end: float) -> float:
    """Mean per-s rate of a cumulative count over the readings within ``[start, end]``."""
    w = _window(rows, start, end)
    if len(w) < 2 or w[-1].t <= w[0].t:
        return 0.0
    return (getattr(w[-1], attr) - getattr(w[0], attr)) / (w[-1].t - w[0].t)


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _stalled_since(prod: list, sc: Scenario) -> float | None:
    """When the producer's rate fell below 1% for good, if that was at least 2 s before the
    end of a scenario whose last phase wants it running; None otherwise."""
    last = sc.phases[-1]
    if last.target_pct == 0:
        return None
    since = None
    for r in prod:
        if r.end > sc.duration:
            break
        if r.rate >= 1.0:
            since = None
        elif since is None:
            since = r.start
    return since if since is not None and sc.duration - since >= 2.0 else None


def _follow_error(prod: list, ph: Phase, notes: list[str]) -> float | None:
    """The phase's follow error; None, with a note, if no sample lies in its window (a run
    that started late, or a stats call that took the whole phase)."""
    try:
        return follow_error(prod, ph.start, ph.end, ph.target_pct)
    except ValueError as e:
        notes.append(f"phase '{ph.name}' at {ph.start:g} s unscored: {e}")
        return None


def score(sc: Scenario, policy: str, rows: list[Sample], lat: list[tuple[float, float]],
          st, extra: dict) -> dict:
    """The measurements of one run (see the module doc)."""
    pct = 100.0 / sc.full_rate
    prod = [r for r in interval_rates([(s.t, s.emitted) for s in rows], pct) if r.start >= 0]
    cons = interval_rates([(s.t, s.executed / sc.fanout) for s in rows], pct)
    phases = []
    notes = extra["notes"]
    for ph in sc.phases:
        steady = [r.rate for r in prod if ph.start + SETTLE_S <= r.start and r.end <= ph.end]
        ph_lat = [ms for t, ms in lat if ph.start + SETTLE_S <= t < ph.end]
        phases.append({
            "name": ph.name, "start_s": ph.start, "end_s": ph.end, "target_pct": ph.target_pct,
            "controlled": ph.controlled,
            "producer_pct": _r(statistics.fmean(steady) if steady else None),
            "follow_error_pct": None if ph.target_pct is None
            else _r(_follow_error(prod, ph, notes)),
            "oscillation_cv": _r(coefficient_of_variation(steady), 3),
            "latency_ms_p50": _r(quantile(ph_lat, 0.5), 1) if ph_lat else None,
            "latency_ms_p99": _r(quantile(ph_lat, 0.99), 1) if ph_lat else None})
    scored = [p["follow_error_pct"] for p in phases if p["follow_error_pct"] is not None]
    osc_phases = [p for p in phases if p["controlled"]] or phases
    cvs = [p["oscillation_cv"] for p in osc_phases if p["oscillation_cv"] is not None]
    detect = recover = None
    if sc.step is not None:
        down, up = (sc.phases[i] for i in sc.step)
        detect = reaction_time(prod, down.start, down.end, down.target_pct, TOL_PCT, False)
        recover = reaction_time(prod, up.start, up.end, up.target_pct, TOL_PCT, False)
    elif sc.kill_at is not None:
        slow = sc.phases[1]
        if slow.controlled:
            detect = reaction_time(prod, slow.start, slow.end, slow.target_pct, TOL_PCT, False)
        dead = sc.phases[2]
        recover = reaction_time(prod, dead.start, dead.end, 100.0, TOL_PCT, False)
    window = _window(rows, 0.0, sc.duration)
    stall = _stalled_since(prod, sc)
    if stall is not None:
        sp = st.component("producer")[0]
        t0 = st.component("sink")[0]
        notes.append(f"producer stalled (< 1%) from {stall:.1f} s to the end ({sc.duration:g} s):"
                     f" spout pending_emits {sp.pending_emits}, inflight_batches "
                     f"{sp.inflight_batches}, sink_resets {sp.sink_resets}, policy_state "
                     f"{sp.policy_state}; sink task 0 restarted {t0.restarted}, executed "
                     f"{t0.executed}, queue {t0.queue_population}")
    lats = [ms for t, ms in lat if 0.0 <= t <= sc.duration + DRAIN_S]
    ratio = None
    if sc.step is not None and rows[-1].bound is not None:
        down = sc.phases[sc.step[0]]
        before = [r.bound for r in _window(rows, down.start - 1.0, down.start)]
        during = [r.bound for r in _window(rows, down.end - 1.0, down.end)]
        if before and during:
            ratio = during[-1] / before[-1]
    out = {
        "scenario": sc.key, "policy": policy, "title": sc.title, "duration_s": sc.duration,
        "full_rate": sc.full_rate, "fanout": sc.fanout,
        "throughput_per_s": round(_rate(rows, "executed", 0.0, sc.duration), 1),
        "producer_per_s": round(_rate(rows, "emitted", 0.0, sc.duration), 1),
        "latency_ms_p50": _r(quantile(lats, 0.5), 1) if lats else None,
        "latency_ms_p99": _r(quantile(lats, 0.99), 1) if lats else None,
        "latency_samples": len(lat),
        "inflight_max": max(r.inflight for r in window),
        "inflight_mean": round(statistics.fmean(r.inflight for r in window), 1),
        "inflight_bytes_max": max(r.inflight_bytes for r in window),
        "detect_s": _r(detect), "recover_s": _r(recover),
        "oscillation_cv": _r(statistics.fmean(cvs), 3) if cvs else None,
        "control_msgs_per_s": round(_rate(rows, "control", 0.0, sc.duration), 2),
        "control_msgs": int(window[-1].control - window[0].control),
        "follow_error_pct": _r(statistics.fmean(scored)) if scored else None,
        "debloat_shrink_ratio": _r(ratio, 3),
        "halt_lag_ms_p50": _r(st.halt_lag_ms(0.5), 1),
        "halt_lag_ms_p99": _r(st.halt_lag_ms(0.99), 1),
        "watermark_flag_changes": sum(x.policy_state.get("flag_changes", 0) for x in st.tasks),
        "phases": phases, **extra,
        "samples": {"t": [round(r.start, 2) for r in prod],
                    "producer_pct": [round(r.rate, 1) for r in prod],
                    "consumer_pct": [round(r.rate, 1) for r in cons if r.start >= 0],
                    # the readings that open the intervals of "t"
                    "inflight": [r.inflight for r in rows[:-1] if r.t >= 0],
                    "bound": [r.bound for r in rows[:-1] if r.t >= 0],
                    "nak_rate_limit": [r.rate_limit for r in rows[:-1] if r.t >= 0],
                    "watermark_throttled": [r.throttled for r in rows[:-1] if r.t >= 0],
                    # sink task 0's own count (0 again once Ray restarted it)
                    "task0_executed": [r.task0_executed for r in rows[:-1] if r.t >= 0]}}
    return out


def _fmt(x, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def table(cells: list[dict]) -> str:
    """The Markdown table: one row per policy × scenario."""
    head = ("| scenario | policy | executed/s | latency p50 / p99 ms | in flight max / mean "
            "(tuples) | in flight max KiB | detect s | recover s | oscillation CV | "
            "control msg/s | follow error pts | lost | notes |")
    lines = [head, "|" + "---|" * 13]
    for c in cells:
        notes = list(c["notes"])
        if c["halt_lag_ms_p50"] is not None:
            notes.append(f"halt-lag p50/p99 {c['halt_lag_ms_p50']:.0f}/"
                         f"{c['halt_lag_ms_p99']:.0f} ms")
        if c["debloat_shrink_ratio"] is not None:
            notes.append(f"bound at 10% / at 100%: {c['debloat_shrink_ratio']:.2f}")
        if c["restarts"]:
            notes.append("restarts " + ", ".join(f"{k}×{v}" for k, v in c["restarts"].items()))
        lines.append(
            f"| {c['scenario']} | {c['policy']} | {c['throughput_per_s']:,.0f} | "
            f"{_fmt(c['latency_ms_p50'], '.1f')} / {_fmt(c['latency_ms_p99'], '.1f')} | "
            f"{c['inflight_max']:,} / {c['inflight_mean']:,.0f} | "
            f"{c['inflight_bytes_max'] / 1024:,.0f} | {_fmt(c['detect_s'])} | "
            f"{_fmt(c['recover_s'])} | {_fmt(c['oscillation_cv'], '.3f')} | "
            f"{c['control_msgs_per_s']:,.1f} | {_fmt(c['follow_error_pct'], '.1f')} | "
            f"{c['lost']:,} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def chart(cells: list[dict], scenarios: dict[str, Scenario], path: Path) -> None:
    """Producer rate per policy for each scenario (target dotted), and tuples in flight for
    the scenarios with a consumer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in SCENARIOS if k in scenarios and k != "idle"]
    panels = [(k, "producer_pct") for k in keys] + [(k, "inflight") for k in keys
                                                    if scenarios[k].step is not None]
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.2 * rows), squeeze=False)
    for ax, (key, what) in zip(axes.flat, panels, strict=False):
        sc = scenarios[key]
        for c in cells:
            if c["scenario"] == key:
                s = c["samples"]
                ax.plot(s["t"][:len(s[what])], s[what], lw=0.9, color=COLORS[c["policy"]],
                        label=c["policy"])
        for ph in sc.phases[1:]:
            ax.axvline(ph.start, color="grey", lw=0.5, ls="--")
        if what == "producer_pct":
            xs = [p.start for p in sc.phases] + [sc.duration]
            ys = [p.target_pct if p.target_pct is not None else float("nan")
                  for p in sc.phases]
            ax.step(xs, ys + ys[-1:], where="post", color="black", lw=0.8, ls=":",
                    label="target")
            ax.set_ylabel(f"producer, % of {sc.full_rate:,.0f}/s")
            ax.set_ylim(0, 130 if sc.full_rate < 5000 else 80)
        else:
            ax.set_ylabel("tuples in flight")
        ax.set_title(sc.title if what == "producer_pct" else f"{sc.title}: in flight",
                     fontsize=9)
        ax.set_xlabel("s")
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _loadaware_available() -> bool:
    try:
        make_config({LOADAWARE_KEY: False})
        return True
    except ConfigError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rate", type=float, default=10_000, help="full speed, tuples/s")
    ap.add_argument("--phase-seconds", type=float, default=4.0)
    ap.add_argument("--step-seconds", type=float, default=16.0,
                    help="the 10%% step: long enough for debloat's moving average (5 metrics "
                    "intervals of 1 s) to come down from its estimate at light load")
    ap.add_argument("--idle-seconds", type=float, default=8.0)
    ap.add_argument("--fan-rate", type=float, default=3000, help="fan-out spout, tuples/s")
    ap.add_argument("--fan-sink-rate", type=float, default=4000,
                    help="fan-out sink task's full speed, tuples/s")
    ap.add_argument("--queue", type=int, default=4096,
                    help="receive queue (tuples): larger than debloat's bound at 10%%")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sample-seconds", type=float, default=0.2)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    wanted = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(policies) - set(POLICIES)) + sorted(set(wanted) - set(SCENARIOS))
    if unknown:
        ap.error(f"unknown {unknown}; policies {POLICIES}, scenarios {SCENARIOS}")
    base = {"topology.acker.executors": 0, "topology.executor.receive.buffer.size": args.queue,
            "topology.producer.batch.size": args.batch}
    loadaware = _loadaware_available()
    makers: dict[str, Callable[[str], Scenario]] = {
        "flink": lambda f: scenario_flink(f, args, base),
        "fanout-shuffle": lambda f: scenario_fanout(f, args, base, "shuffle", loadaware),
        "fanout-all": lambda f: scenario_fanout(f, args, base, "all", loadaware),
        "two-workers": lambda f: scenario_two_workers(f, args, base),
        "idle": lambda f: scenario_idle(f, args, base)}

    ray.cloudpickle.register_pickle_by_value(pipeline)
    started = time.time()
    cluster = LocalCluster(num_cpus=2)
    cells, shapes = [], {}
    try:
        for key in [s for s in SCENARIOS if s in wanted]:
            shapes[key] = makers[key]("")
            for policy in policies:  # the policies interleaved per scenario
                c = run_cell(cluster, makers[key], policy, args.sample_seconds)
                cells.append(c)
                print(f"{key:15s} {policy:9s} executed {c['throughput_per_s']:8,.0f}/s  "
                      f"latency p50/p99 {_fmt(c['latency_ms_p50'], '.1f')}/"
                      f"{_fmt(c['latency_ms_p99'], '.1f')} ms  in flight max "
                      f"{c['inflight_max']:,}  follow {_fmt(c['follow_error_pct'], '.1f')}  "
                      f"cv {_fmt(c['oscillation_cv'], '.3f')}  ctl "
                      f"{c['control_msgs_per_s']:.1f}/s  lost {c['lost']}  "
                      f"{'; '.join(c['notes'])}", flush=True)
    finally:
        cluster.shutdown()
    wall_s = time.time() - started

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "flow_control.md").write_text(
        f"# Flow-control policies side by side (benchmarks/flow_control.py)\n\n"
        f"Rates and follow errors in % of each scenario's full speed; follow error: mean "
        f"over the scored phases of |producer − target| after a {SETTLE_S:g} s settling "
        f"time; oscillation: CV of the producer's rate in the phases where the consumer "
        f"holds it; lost: emitted × fan-out − executed − held after the drain. Wall time "
        f"{wall_s:.0f} s.\n\n" + table(cells))
    chart(cells, shapes, RESULTS / "flow_control.png")
    write_result("flow_control", {
        "args": vars(args), "loadaware_shuffle": loadaware, "wall_s": round(wall_s, 1),
        "settle_s": SETTLE_S, "tolerance_pct": TOL_PCT, "cells": cells})

    def cell(scenario: str, policy: str) -> dict:
        return next((c for c in cells if c["scenario"] == scenario and c["policy"] == policy),
                    {})

    flink = [c for c in cells if c["scenario"] == "flink" and c["follow_error_pct"] is not None]
    best = min(flink, key=lambda c: c["follow_error_pct"], default=None)
    if best is not None:
        print(f"best follow error in scenario a: {best['policy']}")
    print(f"wall time {wall_s:.0f} s")

    def fmt(x, spec: str = ".2f") -> str:
        return "none" if x is None else format(x, spec)

    print(f"best_follow_error_pct={fmt(best and best['follow_error_pct'])} "
          f"storm2_follow_error_pct={fmt(cell('flink', 'storm2').get('follow_error_pct'))} "
          f"watermark_oscillation_cv="
          f"{fmt(cell('flink', 'watermark').get('oscillation_cv'), '.3f')} "
          f"nak_idle_msgs_per_s={fmt(cell('idle', 'nak').get('control_msgs_per_s'))} "
          f"nak_loaded_msgs_per_s={fmt(cell('flink', 'nak').get('control_msgs_per_s'))} "
          f"debloat_inflight_shrink_ratio="
          f"{fmt(cell('flink', 'debloat').get('debloat_shrink_ratio'), '.3f')} "
          f"debloat_latency_ms_p99={fmt(cell('flink', 'debloat').get('latency_ms_p99'), '.1f')}")


if __name__ == "__main__":
    main()
