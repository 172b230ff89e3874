"""Typed statistics of a running topology, as returned by ``TopologyHandle.stats()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskStats:
    """One task's counters (cumulative since start) and current state.

    Attributes:
        component, task, worker: where the task is.
        state: ``running``, ``ending``, ``done``, ``killed`` or ``failed``.
        emitted: tuples emitted by user code. executed: tuples given to ``execute``.
        queue_population / queue_capacity: receive queue now / its bound (tuples).
        overflow: tuples in the overflow queue now.
        insert_failures: inserts into this task's receive queue that found it full.
        dropped_messages: tuples dropped at ``topology.executor.overflow.limit``.
        pending_emits: this task's emits waiting for a backlogged destination now.
        max_pending_emits: the most seen waiting at once.
        send_failures: this task's sends that found a destination backlogged.
        backpressure_wait_ms: time the executor spent idling because of backpressure.
        idle_wait_ms: time the executor spent waiting for input (a spout also while at
            ``topology.max.spout.pending`` or inactive).
        bad_frames: malformed frames dropped on receipt.
        backlogged: this task is backlogged now (its overflow is in use; other workers
            hold their sends to it).
        overflowed_total: tuples ever put into its overflow queue.
        remote_backlogged: tasks of other workers this task may not send to now.
        halt_lags_ms: recent halt-lags seen by this task as a sender (ms from a
            destination's backlog starting to this task holding its sends).
        acked / failed: tuples acked / failed (a spout: its tuple trees completed / failed,
            timeouts included; a bolt: inputs it acked / failed; an acker: trees it
            completed / failed).
        completed_trees: a bolt's one-ack trees it completed itself (its ack of value 0
            for an implicit-init root), telling the spout without the acker.
        timeouts: a spout's tuple trees failed by ``topology.message.timeout.secs``.
        pending_tuples: a spout's tuple trees in flight (an acker's: trees it tracks).
        complete_latencies_ms: a spout's recent emit-to-ack times of completed trees.
        error_count / errors: user-code errors (each kind with count and last traceback).
        busy_time_ms_per_second / idle_time_ms_per_second /
        backpressured_time_ms_per_second: Flink's split of the last metrics interval
            (``topology.metrics.interval.secs``): executing, waiting for input, held by a
            full or backlogged destination.
        backpressure_level: ``OK`` / ``LOW`` / ``HIGH`` (Flink's 0.10 / 0.5 thresholds on
            the backpressured fraction).
        backpressure_cause: the destination task that held this task back most in the last
            interval (None if none did).
        capacity: Storm UI's capacity, the executing fraction of the last interval.
        execute_latency_ms: mean execute (spout: ``next_tuple``) time of sampled tuples
            (``topology.stats.sample.rate``) in the last interval.
        executed_per_s / emitted_per_s: rates over the last interval.
        transferred: tuples handed to destination tasks (one per destination).
        stalled_seconds: how long tuples have waited for this task without any progress
            (0 when it progresses or has nothing to do); ``stalled`` once that reaches
            ``topology.stall.timeout.secs``.
        restarted: this instance replaced one that died (Ray restarted the actor).
        progress: a spout task's source items taken so far (``Spout.progress``; None for
            bolts and for spouts that do not count).
        lost_frames: frames from upstream dropped because their sender started a new epoch
            after a failure (with acking, their trees replay).
    """

    component: str
    task: int
    worker: int
    state: str
    emitted: int
    executed: int
    queue_population: int
    queue_capacity: int
    overflow: int
    insert_failures: int
    dropped_messages: int
    pending_emits: int
    max_pending_emits: int
    send_failures: int
    backpressure_wait_ms: float
    bad_frames: int
    error_count: int
    backlogged: bool = False
    overflowed_total: int = 0
    remote_backlogged: list[int] = field(default_factory=list)
    halt_lags_ms: list[float] = field(default_factory=list)
    idle_wait_ms: float = 0.0
    acked: int = 0
    failed: int = 0
    timeouts: int = 0
    pending_tuples: int = 0
    completed_trees: int = 0
    complete_latencies_ms: list[float] = field(default_factory=list)
    busy_time_ms_per_second: float = 0.0
    idle_time_ms_per_second: float = 0.0
    backpressured_time_ms_per_second: float = 0.0
    backpressure_level: str = "OK"
    backpressure_cause: int | None = None
    capacity: float = 0.0
    execute_latency_ms: float = 0.0
    executed_per_s: float = 0.0
    emitted_per_s: float = 0.0
    transferred: int = 0
    stalled_seconds: float = 0.0
    stalled: bool = False
    restarted: bool = False
    lost_frames: int = 0
    progress: int | None = None
    errors: list[dict] = field(default_factory=list)
    queue: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> TaskStats:
        q = d["queue"]
        return cls(component=d["component"], task=d["task"], worker=d["worker"],
                   state=d["state"], emitted=d["emitted"], executed=d["executed"],
                   queue_population=q["population"], queue_capacity=q["capacity"],
                   overflow=q["overflow"], insert_failures=q["insert_failures"],
                   dropped_messages=q["dropped_messages"], pending_emits=d["pending_emits"],
                   max_pending_emits=d["max_pending_emits"], send_failures=d["send_failures"],
                   backpressure_wait_ms=d["backpressure_wait_ms"], bad_frames=d["bad_frames"],
                   error_count=d["error_count"], errors=d["errors"], queue=q, raw=d,
                   backlogged=d.get("backlogged", False),
                   overflowed_total=d.get("overflowed_total", 0),
                   remote_backlogged=d.get("remote_backlogged", []),
                   halt_lags_ms=d.get("halt_lags_ms", []),
                   idle_wait_ms=d.get("idle_wait_ms", 0.0),
                   acked=d.get("acked", 0), failed=d.get("failed", 0),
                   timeouts=d.get("timeouts", 0), pending_tuples=d.get("pending_tuples", 0),
                   completed_trees=d.get("completed_trees", 0),
                   complete_latencies_ms=d.get("complete_latencies_ms", []),
                   **{k: m[k] for k in _METRIC_FIELDS if k in (m := d.get("metrics") or {})},
                   restarted=d.get("reconstructed", False),
                   lost_frames=d.get("lost_frames", 0), progress=d.get("progress"))


_METRIC_FIELDS = (
    "busy_time_ms_per_second", "idle_time_ms_per_second", "backpressured_time_ms_per_second",
    "backpressure_level", "backpressure_cause", "capacity", "execute_latency_ms",
    "executed_per_s", "emitted_per_s", "transferred", "stalled_seconds", "stalled")


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

    def backpressure(self, component_id: str) -> tuple[float, str]:
        """The component's most backpressured task in the last interval: its
        backpressured fraction (0..1) and ``"LEVEL"`` or ``"LEVEL (task N)"`` naming the
        destination that held it back."""
        worst = max(self.component(component_id),
                    key=lambda t: t.backpressured_time_ms_per_second)
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
            t.executed_per_s or t.emitted_per_s for t in self.tasks)

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
        task), ``queued``, ``errors``, ``stalled`` (tasks)."""
        out = []
        for c in sorted({t.component for t in self.tasks}):
            ts = self.component(c)
            bp, level = self.backpressure(c)
            out.append({
                "component": c, "tasks": len(ts),
                "rate_per_s": sum(t.executed_per_s or t.emitted_per_s for t in ts),
                "capacity": max(t.capacity for t in ts),
                "busy": max(t.busy_time_ms_per_second for t in ts) / 1000,
                "backpressured": bp, "level": level,
                "queued": sum(t.queue_population + t.overflow for t in ts),
                "errors": sum(t.error_count for t in ts),
                "stalled": sum(t.stalled for t in ts)})
        return out

    def _repr_html_(self) -> str:
        return stats_html(self)

    @property
    def errors(self) -> list[dict]:
        return [e for t in self.tasks for e in t.errors]

    def summary(self) -> str:
        """A small text table: per component emitted, executed, queue, backpressure, errors."""
        comps = sorted({t.component for t in self.tasks})
        lines = [f"{'component':<16}{'tasks':>6}{'emitted':>11}{'executed':>11}"
                 f"{'queued':>9}{'bp_wait_ms':>12}{'errors':>8}  {'busy':>5} {'bp':>5}  "
                 f"level (cause)"]
        for c in comps:
            ts = self.component(c)
            bp, level = self.backpressure(c)
            lines.append(f"{c:<16}{len(ts):>6}{sum(t.emitted for t in ts):>11}"
                         f"{sum(t.executed for t in ts):>11}"
                         f"{sum(t.queue_population + t.overflow for t in ts):>9}"
                         f"{sum(t.backpressure_wait_ms for t in ts):>12.1f}"
                         f"{sum(t.error_count for t in ts):>8}"
                         f"  {max(t.busy_time_ms_per_second for t in ts) / 1000:>5.0%}"
                         f" {bp:>5.0%}  {level}")
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
        cells = (escape(r["component"]), r["tasks"], f"{r['rate_per_s']:,.0f}",
                 f"{r['capacity']:.2f}", f"{r['busy']:.0%}", f"{r['backpressured']:.0%}",
                 f'<span style="color:{colour};font-weight:bold">{escape(r["level"])}</span>',
                 f"{r['queued']:,}", r["errors"] or "", prog)
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    stalled = "".join(f"<li>STALLED {escape(t.component)}:{t.task} for "
                      f"{t.stalled_seconds:.0f} s</li>" for t in stats.stalled_tasks())
    return (f"<div><b>topology {escape(stats.name)}</b>: {len(stats.tasks)} tasks, {state}"
            f"<table><thead><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            + (f"<ul>{stalled}</ul>" if stalled else "") + "</div>")
