"""Typed statistics of a running topology, as returned by ``TopologyHandle.stats()``.

A task's record, :class:`TaskStats`, is defined once in ``actors/_stats.py`` (where the
executor builds it) and re-exported here; this module adds the worker and topology views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors import TaskStats


@dataclass(frozen=True)
class WorkerStats:
    """One worker's transfer actor: traffic, drops and backpressure view.

    Attributes:
        worker: the worker index. node_id: the Ray node it runs on. tasks: its task ids.
        backlogged: its backlogged tasks now → since (epoch s).
        remote_backlogged: tasks of other workers it knows to be backlogged.
        frames_received / deliveries_received: batches (and calls carrying them) from
            executors of other workers.
        statuses_sent / statuses_received: BackPressureStatus messages.
        dropped_unknown_task / dropped_bad_payload / dropped_oversized: dropped input.
        counters: every counter, by name.
    """

    worker: int
    node_id: str
    tasks: list[int]
    backlogged: dict[int, float]
    remote_backlogged: list[int]
    frames_received: int
    deliveries_received: int
    statuses_sent: int
    statuses_received: int
    dropped_unknown_task: int
    dropped_bad_payload: int
    dropped_oversized: int
    counters: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> WorkerStats:
        return cls(worker=d["worker"], node_id=d["node_id"], tasks=d["tasks"],
                   backlogged=d["backlogged"], remote_backlogged=d["remote_backlogged"],
                   frames_received=d["frames_received"],
                   deliveries_received=d["deliveries_received"],
                   statuses_sent=d["statuses_sent"], statuses_received=d["statuses_received"],
                   dropped_unknown_task=d["dropped_unknown_task"],
                   dropped_bad_payload=d["dropped_bad_payload"],
                   dropped_oversized=d["dropped_oversized"], counters=d)


@dataclass(frozen=True)
class TopologyStats:
    """Every task's :class:`TaskStats`, plus per-component sums.

    Attributes:
        name: the topology name.
        tasks: one entry per task, by task id.
        complete: True once every task has ended its stream.
        workers: one entry per worker with a transfer actor (empty for one worker).
        assignment: task id → worker index.
    """

    name: str
    tasks: list[TaskStats]
    complete: bool
    workers: list[WorkerStats] = field(default_factory=list)
    assignment: dict[int, int] = field(default_factory=dict)

    def halt_lag_ms(self, q: float = 0.5) -> float | None:
        """The ``q`` quantile (0-1) of the halt-lags recorded by all tasks, in ms; None if
        no task has had to hold for a backlogged task of another worker yet."""
        lags = sorted(x for t in self.tasks for x in t.halt_lags_ms)
        if not lags:
            return None
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    def component(self, component_id: str) -> list[TaskStats]:
        """The tasks of one component; ``KeyError`` naming the known components."""
        out = [t for t in self.tasks if t.component == component_id]
        if not out:
            raise KeyError(f"no component {component_id!r}; known: "
                           f"{sorted({t.component for t in self.tasks})}")
        return out

    def total(self, component_id: str, counter: str) -> float:
        """Sum of ``counter`` (e.g. ``"executed"``) over a component's tasks."""
        return sum(getattr(t, counter) for t in self.component(component_id))

    def backpressure(self, component_id: str) -> tuple[float | None, str]:
        """The component's most backpressured task in the last metrics interval: its
        backpressured fraction (0..1) and ``"LEVEL"`` or ``"LEVEL (task N)"`` naming the
        destination that held it back; ``(None, "-")`` before any task of the component
        has closed an interval."""
        ts = [t for t in self.component(component_id)
              if t.backpressured_time_ms_per_second is not None]
        if not ts:
            return None, "-"
        worst = max(ts, key=lambda t: t.backpressured_time_ms_per_second)
        cause = (f" (task {worst.backpressure_cause})"
                 if worst.backpressure_cause is not None else "")
        return (worst.backpressured_time_ms_per_second / 1000,
                f"{worst.backpressure_level}{cause}")

    def stalled_tasks(self) -> list[TaskStats]:
        """Tasks with tuples waiting for them and no progress for at least
        ``topology.stall.timeout.secs`` (the stall detector); empty when all is well."""
        return [t for t in self.tasks if t.stalled]

    @property
    def stalled(self) -> bool:
        """True when some tasks are stalled and no task made progress in the last interval:
        the pipeline stands still with tuples queued."""
        return bool(self.stalled_tasks()) and not any(
            (t.executed_per_s or t.emitted_per_s) for t in self.tasks)

    def progress(self) -> dict[str, int]:
        """Spout component → source items its tasks have taken so far, for the spouts that
        count (``Spout.progress``)."""
        out: dict[str, int] = {}
        for t in self.tasks:
            if t.progress is not None:
                out[t.component] = out.get(t.component, 0) + t.progress
        return out

    def rows(self) -> list[dict]:
        """One summary row per component (what ``storm-on-ray stats`` and the notebook view
        show): ``component``, ``tasks``, ``rate_per_s`` (executed, or emitted for spouts,
        in the last metrics interval), ``capacity`` and ``busy`` (max over tasks, 0..1),
        ``backpressured`` (0..1), ``level`` (``OK``/``LOW``/``HIGH``, with the holding
        task), ``queued``, ``queued_bytes`` (wire bytes in its receive and overflow
        queues), ``errors``, ``dead_letters`` (tuples its spout tasks gave up at
        ``topology.max.replays``), ``shed`` (tuples it shed, ``topology.backpressure.overload``
        "shed"), ``stalled`` (tasks). The interval figures are None
        until a task of the component has closed a metrics interval."""
        out = []
        for c in sorted({t.component for t in self.tasks}):
            ts = self.component(c)
            bp, level = self.backpressure(c)
            done = [t for t in ts if t.interval_s is not None]
            out.append({
                "component": c, "tasks": len(ts),
                "rate_per_s": sum(t.executed_per_s or t.emitted_per_s for t in done)
                if done else None,
                "capacity": max(t.capacity for t in done) if done else None,
                "busy": max(t.busy_time_ms_per_second for t in done) / 1000
                if done else None,
                "backpressured": bp, "level": level,
                "queued": sum(t.queue_population + t.overflow for t in ts),
                "queued_bytes": sum(t.queued_bytes + t.overflow_bytes for t in ts),
                "errors": sum(t.error_count for t in ts),
                "dead_letters": sum(t.dead_letters for t in ts),
                "shed": sum(t.shed for t in ts),
                "stalled": sum(t.stalled for t in ts)})
        return out

    def windows(self) -> list[dict]:
        """One row per windowed bolt: ``component``, ``held`` (tuples in windows or waiting
        for the watermark, summed over tasks), ``watermark_ms`` (the lowest over tasks,
        epoch ms; None in processing time, before one is known or once the input has
        ended), ``watermark_lag_ms``
        (the largest), ``fired``, ``late``, ``bad`` (summed)."""
        out = []
        for c in sorted({t.component for t in self.tasks if t.windows_fired is not None}):
            ts = self.component(c)
            wms = [t.watermark_ms for t in ts if t.watermark_ms is not None]
            lags = [t.watermark_lag_ms for t in ts if t.watermark_lag_ms is not None]
            out.append({"component": c, "held": sum(t.window_held or 0 for t in ts),
                        "watermark_ms": min(wms) if wms else None,
                        "watermark_lag_ms": max(lags) if lags else None,
                        "fired": sum(t.windows_fired or 0 for t in ts),
                        "late": sum(t.late_tuples or 0 for t in ts),
                        "bad": sum(t.bad_timestamps or 0 for t in ts)})
        return out

    def checkpoints(self) -> list[dict]:
        """One row per task taking part in checkpoints that keeps state (a stateful bolt or
        spout, a persistent window): ``component``, ``task``, ``last_committed``,
        ``checkpoint_ms_p50``/``_p99`` (its part of a round: its trigger or first barrier
        to the commit reaching it, over recent rounds), ``alignment_ms_p50``/``_p99``
        (first barrier to aligned), ``state_keys``, ``state_bytes`` (encoded values,
        windows included), ``rollbacks``, ``restores``, ``parked`` and ``parked_max``
        (elements held by alignment). Empty without checkpoints."""
        keys = ("last_committed", "checkpoint_ms_p50", "checkpoint_ms_p99",
                "alignment_ms_p50", "alignment_ms_p99", "state_keys", "state_bytes",
                "rollbacks", "restores", "parked", "parked_max")
        return [{"component": t.component, "task": t.task,
                 **{k: t.checkpoint.get(k) for k in keys}}
                for t in sorted(self.tasks, key=lambda t: t.task)
                if t.checkpoint and t.checkpoint.get("state_keys") is not None]

    def _repr_html_(self) -> str:
        return stats_html(self)

    @property
    def errors(self) -> list[dict]:
        return [e for t in self.tasks for e in t.errors]

    def summary(self) -> str:
        """A small text table: per component emitted, executed, queue, backpressure, errors."""
        lines = [f"{'component':<16}{'tasks':>6}{'emitted':>11}{'executed':>11}"
                 f"{'queued':>9}{'bp_wait_ms':>12}{'errors':>8}  {'busy':>5} {'bp':>5}  "
                 f"level (cause)"]
        for r in self.rows():
            ts = self.component(r["component"])
            lines.append(f"{r['component']:<16}{r['tasks']:>6}{sum(t.emitted for t in ts):>11}"
                         f"{sum(t.executed for t in ts):>11}{r['queued']:>9}"
                         f"{sum(t.backpressure_wait_ms for t in ts):>12.1f}{r['errors']:>8}"
                         f"  {fmt(r['busy'], '.0%'):>5} {fmt(r['backpressured'], '.0%'):>5}"
                         f"  {r['level']}")
        lines += (window_lines(self) + checkpoint_lines(self) + dead_letter_lines(self)
                  + shed_lines(self)
                  + flow_control_lines(self))
        for t in self.stalled_tasks():
            lines.append(f"STALLED {t.component}:{t.task} for {t.stalled_seconds:.0f} s "
                         f"({t.queue_population + t.overflow} queued, {t.pending_emits} "
                         f"pending emits)")
        for w in self.workers:
            lines.append(f"worker {w.worker} (node {w.node_id[:8]}): tasks {w.tasks}, "
                         f"backlogged {sorted(w.backlogged)}, frames in "
                         f"{w.frames_received}, statuses out/in "
                         f"{w.statuses_sent}/{w.statuses_received}")
        p50 = self.halt_lag_ms(0.5)
        if p50 is not None:
            lines.append(f"halt-lag p50 {p50:.2f} ms, p99 {self.halt_lag_ms(0.99):.2f} ms")
        return "\n".join(lines)


def checkpoint_lines(stats: TopologyStats) -> list[str]:
    """:meth:`TopologyStats.checkpoints` as text lines (the summary, the CLI and the
    notebook view)."""
    return [f"state {r['component']}:{r['task']}: checkpoint {fmt(r['last_committed'], 'd')}, "
            f"{fmt(r['checkpoint_ms_p50'], '.1f')}/{fmt(r['checkpoint_ms_p99'], '.1f')} ms "
            f"p50/p99 (aligning {fmt(r['alignment_ms_p50'], '.1f')}/"
            f"{fmt(r['alignment_ms_p99'], '.1f')}), {r['state_keys']:,} keys "
            f"{fmt(r['state_bytes'], ',d')} B, {r['rollbacks']} rollbacks, "
            f"{r['restores']} restores, {r['parked']} parked (max {r['parked_max']})"
            for r in stats.checkpoints()]


def window_lines(stats: TopologyStats) -> list[str]:
    """:meth:`TopologyStats.windows` as text lines (the summary and the CLI)."""
    return [f"window {w['component']}: {w['held']} held, watermark "
            f"{fmt(w['watermark_ms'], 'd')} (lag {fmt(w['watermark_lag_ms'], ',d')} ms), "
            f"{w['fired']} fired, {w['late']} late, {w['bad']} bad"
            for w in stats.windows()]


def dead_letter_lines(stats: TopologyStats) -> list[str]:
    """One line per spout that gave tuples up at ``topology.max.replays`` (the summary, the
    CLI and the notebook view; none while there are no dead letters)."""
    return [f"dead letters {r['component']}: {r['dead_letters']} (handle.dead_letters())"
            for r in stats.rows() if r["dead_letters"]]


def shed_lines(stats: TopologyStats) -> list[str]:
    """One line per component that shed tuples (latency-first, backpressure/_shed.py):
    how many, at which site, from which input streams (the summary, the CLI and the
    notebook view; none while nothing is shed)."""
    out = []
    for c in sorted({t.component for t in stats.tasks if t.shed}):
        ts = stats.component(c)
        by: dict[str, dict[str, int]] = {}
        for t in ts:
            for stream, sites in t.shed_by_stream.items():
                for site, n in sites.items():
                    d = by.setdefault(stream, {})
                    d[site] = d.get(site, 0) + n
        parts = ", ".join(f"{stream} " + " + ".join(f"{n} at {site}" for site, n in
                                                    sorted(sites.items()))
                          for stream, sites in sorted(by.items()))
        out.append(f"shed {c}: {sum(t.shed for t in ts)} ({parts})")
    return out


def flow_control_lines(stats: TopologyStats) -> list[str]:
    """The flow-control policy and, for a policy other than Storm 2.0's, each task's state
    and the control signals sent and received per second of uptime (the summary, the CLI
    and the notebook view)."""
    policies = sorted({t.backpressure_policy for t in stats.tasks if t.backpressure_policy})
    if not policies or policies == ["storm2"]:
        return []
    out = [f"flow control: {', '.join(policies)}"]
    for t in stats.tasks:
        if not (t.policy_state or t.control_sent or t.control_received):
            continue
        up = max(t.uptime_s, 1e-9)
        state = " ".join(f"{k}={v}" for k, v in t.policy_state.items())
        out.append(f"  {t.component}:{t.task} {state} signals out "
                   f"{t.control_sent / up:.1f}/s in {t.control_received / up:.1f}/s")
    return out


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, or ``-`` when unknown (None: no metrics interval
    closed yet)."""
    return "-" if value is None else format(value, spec)


_LEVEL_COLOURS = {"OK": "#2e7d32", "LOW": "#f9a825", "HIGH": "#c62828"}


def stats_html(stats: TopologyStats, progress: dict[str, tuple[int, int | None]] | None = None
               ) -> str:
    """An HTML table of :meth:`TopologyStats.rows` (the notebook view): per component rate,
    capacity, busy and backpressured fractions, backpressure level coloured by Flink's
    thresholds and naming the task that holds it back, queued tuples, errors; spout
    progress when given (component → (taken, total or None))."""
    from html import escape

    state = ("complete" if stats.complete else
             "STALLED" if stats.stalled else "running")
    head = ("component", "tasks", "rate/s", "capacity", "busy", "backpressured", "level",
            "queued", "errors", "progress")
    rows = []
    for r in stats.rows():
        level = r["level"].split(" ", 1)[0]
        colour = _LEVEL_COLOURS.get(level, "inherit")
        prog = ""
        if progress and r["component"] in progress:
            done, total = progress[r["component"]]
            prog = f"{done:,}" + (f" / {total:,} ({done / total:.0%})" if total else "")
        cells = (escape(r["component"]), r["tasks"], fmt(r["rate_per_s"], ",.0f"),
                 fmt(r["capacity"], ".2f"), fmt(r["busy"], ".0%"),
                 fmt(r["backpressured"], ".0%"),
                 f'<span style="color:{colour};font-weight:bold">{escape(r["level"])}</span>',
                 f"{r['queued']:,}", r["errors"] or "", prog)
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    stalled = "".join(f"<li>STALLED {escape(t.component)}:{t.task} for "
                      f"{t.stalled_seconds:.0f} s</li>" for t in stats.stalled_tasks())
    stalled += "".join(f"<li>{escape(line)}</li>"
                       for line in window_lines(stats) + checkpoint_lines(stats)
                       + dead_letter_lines(stats)
                       + shed_lines(stats) + flow_control_lines(stats))
    return (f"<div><b>topology {escape(stats.name)}</b>: {len(stats.tasks)} tasks, {state}"
            f"<table><thead><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            + (f"<ul>{stalled}</ul>" if stalled else "") + "</div>")
