"""Per-task metrics: Storm's queue and executor metrics, Flink's busy / idle / backpressured
time, the backpressure level and its cause, a stall detector, and their export through
``ray.util.metrics`` (so Ray's dashboard and Prometheus show them).

Sources: Storm 2.0's ``JCQueueMetrics`` and Storm UI's ``capacity`` (Storm docs, "Storm
UI REST API"); Flink's ``idleTimeMsPerSecond`` / ``busyTimeMsPerSecond`` /
``backPressuredTimeMsPerSecond`` and its backpressure levels OK ≤ 0.10 < LOW ≤ 0.5 < HIGH
(Flink docs, "Monitoring Back Pressure"; Flink blog, "How to identify the source of back
pressure?", 2021).

The executor thread only adds to cumulative counters (time idle, time held by
backpressure and by which destination, sampled execute latencies); a :class:`TaskMetrics`
sampler turns them into per-interval rates once per ``topology.metrics.interval.secs``, on
a thread of its own, so the data path pays two ``perf_counter`` calls per idle and per
sampled tuple and nothing per interval.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from actors._stats import IntervalMetrics, TaskStats

logger = logging.getLogger("storm_on_ray.metrics")
#: the level changes are the executor's news: logged under its logger
_actor_log = logging.getLogger("storm_on_ray.actor")

#: Flink's thresholds on the backpressured fraction of time.
BP_LOW, BP_HIGH = 0.10, 0.5
BP_LEVELS = ("OK", "LOW", "HIGH")


def backpressure_level(backpressured_ms_per_s: float) -> str:
    """Flink's level for a task held ``backpressured_ms_per_s`` ms per second by its
    outputs: ``OK`` up to 10%, ``LOW`` up to 50%, ``HIGH`` above."""
    r = backpressured_ms_per_s / 1000.0
    return "HIGH" if r > BP_HIGH else "LOW" if r > BP_LOW else "OK"


_GAUGES = {
    "queue_population": "Tuples in the task's receive queue (JCQueue population).",
    "queue_capacity": "Bound of the task's receive queue (tuples).",
    "queue_pct_full": "Receive queue population / capacity (0..1).",
    "queue_overflow": "Tuples in the task's overflow queue (arrivals from other workers "
                      "while it was full).",
    "queue_arrival_rate_secs": "Tuples per second arriving at the receive queue.",
    "queue_sojourn_time_ms": "Expected ms a tuple waits in the receive queue "
                             "(population / arrival rate).",
    "execute_latency_ms": "Mean ms per execute (bolts) or next_tuple (spouts), sampled.",
    "capacity": "Storm UI's capacity: fraction of the interval spent executing.",
    "busy_time_ms_per_second": "Flink's busyTimeMsPerSecond.",
    "idle_time_ms_per_second": "Flink's idleTimeMsPerSecond (waiting for input).",
    "backpressured_time_ms_per_second": "Flink's backPressuredTimeMsPerSecond (held by a "
                                        "full or backlogged destination).",
    "backpressure_level": "0 OK, 1 LOW, 2 HIGH (Flink's thresholds 0.10 / 0.5).",
    "backlogged": "1 while the task's overflow is in use (other workers hold their sends).",
    "stalled_seconds": "Seconds without progress while tuples wait for the task (0 if not).",
}
_COUNTERS = {
    "emitted": "Tuples emitted by user code.",
    "transferred": "Tuples handed to destination tasks (one per destination).",
    "executed": "Tuples given to execute.",
    "acked": "Tuples (spout: trees) acked.",
    "failed": "Tuples (spout: trees) failed, timeouts included.",
    "insert_failures": "Inserts that found the receive queue full.",
    "dropped_messages": "Tuples dropped at topology.executor.overflow.limit.",
}
#: a stateful task's checkpoint figures (TaskStats.checkpoint keys), as gauges
_CHECKPOINT_GAUGES = {
    "last_committed": "Last checkpoint id committed, as this task knows it.",
    "checkpoint_ms_p99": "p99 over recent rounds of this task's part of a checkpoint (its "
                         "trigger or first barrier to the commit reaching it), ms.",
    "alignment_ms_p99": "p99 over recent rounds of barrier alignment (first barrier to "
                        "every input's), ms.",
    "state_keys": "Keys in the task's KeyValueState.",
    "state_bytes": "Bytes of the task's checkpointed values (persistent windows included).",
    "rollbacks": "Rollbacks this task took part in.",
    "parked": "Elements parked by barrier alignment now.",
}
_TAGS = ("topology", "component", "task")
#: gauges whose TaskStats field has another name
_FIELD = {"queue_overflow": "overflow"}


class RayMetricsExport:
    """The task's metrics as ``ray.util.metrics`` gauges and counters, named
    ``storm_<metric>`` (Prometheus shows them as ``ray_storm_<metric>``), tagged with
    ``topology``, ``component`` and ``task``. Built in the executor's process."""

    def __init__(self, topology: str, component: str, task: int) -> None:
        from ray.util.metrics import Counter, Gauge

        tags = {"topology": topology, "component": component, "task": str(task)}
        self.gauges = {k: Gauge(f"storm_{k}", d, _TAGS).set_default_tags(tags)
                       for k, d in _GAUGES.items()}
        self.counters = {k: Counter(f"storm_{k}", d, _TAGS).set_default_tags(tags)
                         for k, d in _COUNTERS.items()}
        self._last: dict[str, float] = {k: 0 for k in _COUNTERS}
        self.checkpoint_gauges = {
            k: Gauge(f"storm_checkpoint_{k}" if not k.startswith(("checkpoint", "state"))
                     else f"storm_{k}", d, _TAGS).set_default_tags(tags)
            for k, d in _CHECKPOINT_GAUGES.items()}

    def record(self, stats: TaskStats) -> None:
        """Set every gauge from ``stats`` (gauges of a metrics interval are left alone
        until the task has closed one); counters grow by the change of their cumulative
        value."""
        for k, g in self.gauges.items():
            v = getattr(stats, _FIELD.get(k, k))
            if v is not None:
                g.set(float(BP_LEVELS.index(v) if k == "backpressure_level" else v))
        ckpt = stats.checkpoint
        if ckpt and ckpt.get("state_keys") is not None:
            for k, g in self.checkpoint_gauges.items():
                v = ckpt.get(k)
                if v is not None:
                    g.set(float(v))
        for k, c in self.counters.items():
            v = getattr(stats, k)
            if v > self._last[k]:
                c.inc(v - self._last[k])
            self._last[k] = v


class TaskMetrics:
    """Turns an executor's cumulative counters into per-interval rates (one sampler per
    task, called from one thread).

    Args:
        core: the ``ExecutorCore``.
        stall_timeout_s: ``topology.stall.timeout.secs``: a task whose input or output
            has waited that long without progress is reported stalled (logged once).
    """

    def __init__(self, core: Any, stall_timeout_s: float) -> None:
        self.core = core
        self.stall_timeout_s = stall_timeout_s
        self._t = time.monotonic()
        self._prev = self._cumulative()
        self._stalled_since: float | None = None
        self._stall_logged = False
        #: the last closed interval (None until the first: no rate or fraction is known)
        self.last: IntervalMetrics | None = None

    def _cumulative(self) -> dict:
        c = self.core
        h = c.chain_host or c  # a chained task's time is its host thread's
        return {"idle": h.idle_wait_s, "bp": h.backpressure_wait_s,
                "held": dict(c.held_by_s), "lat_s": c.latency_sum_s, "lat_n": c.latency_n,
                "executed": c.executed, "emitted": c.emitted, "acked": c.acked,
                "failed": c.failed}

    def sample(self) -> IntervalMetrics:
        """Close the interval since the last sample; returns (and keeps in ``last``) its
        rates, time split, backpressure level and the stall state."""
        now = time.monotonic()
        cur = self._cumulative()
        dt = max(now - self._t, 1e-6)
        snap = self._snapshot(dt, self._prev, cur, now)
        self._t, self._prev, self.last = now, cur, snap
        return snap

    def _snapshot(self, dt: float, prev: dict, cur: dict, now: float) -> IntervalMetrics:
        core = self.core
        q = core.queue.metrics()
        idle = min(1000.0, (cur["idle"] - prev["idle"]) / dt * 1000.0)
        bp = min(1000.0 - idle, (cur["bp"] - prev["bp"]) / dt * 1000.0)
        busy = max(0.0, 1000.0 - idle - bp)
        n = cur["lat_n"] - prev["lat_n"]
        lat_ms = (cur["lat_s"] - prev["lat_s"]) / n * 1000.0 if n else 0.0
        executed = cur["executed"] - prev["executed"]
        work = executed if not core.is_spout else cur["emitted"] - prev["emitted"]
        capacity = min(1.0, work * lat_ms / 1000.0 / dt)
        held = {t: s - prev["held"].get(t, 0.0) for t, s in cur["held"].items()}
        held = {t: s for t, s in held.items() if s > 0}
        cause = max(held, key=held.get) if held else None
        # stall: something waits for this task (input queued, or emits pending) and none of
        # its counters moved during the interval
        waiting = q.population + q.overflow + len(core.outbox.pending_emits)
        progressed = (executed or cur["emitted"] != prev["emitted"]
                      or cur["acked"] != prev["acked"] or cur["failed"] != prev["failed"])
        if waiting and not progressed and core.state in ("running", "ending"):
            if self._stalled_since is None:
                self._stalled_since = now - dt
        else:
            if self._stall_logged:
                logger.warning("%s:%d: progress again after a stall", core.component_id,
                               core.task_id)
            self._stalled_since, self._stall_logged = None, False
        stalled = now - self._stalled_since if self._stalled_since is not None else 0.0
        if stalled >= self.stall_timeout_s and not self._stall_logged:
            self._stall_logged = True
            logger.warning("%s:%d: no progress for %.1f s with %d tuples waiting (queue %d, "
                           "overflow %d, pending emits %d); held back by %s",
                           core.component_id, core.task_id, stalled, waiting, q.population,
                           q.overflow, len(core.outbox.pending_emits),
                           f"task {cause}" if cause is not None else "nothing downstream")
        return IntervalMetrics(
            interval_s=dt, executed_per_s=executed / dt,
            emitted_per_s=(cur["emitted"] - prev["emitted"]) / dt,
            execute_latency_ms=lat_ms, capacity=capacity, busy_time_ms_per_second=busy,
            idle_time_ms_per_second=idle, backpressured_time_ms_per_second=bp,
            backpressure_level=backpressure_level(bp), backpressure_cause=cause,
            stalled_seconds=stalled, stalled=stalled >= self.stall_timeout_s)


def run_metrics_timer(core, metrics: TaskMetrics) -> None:
    """The body of a task's metrics thread (its executor actor starts one per task): every
    ``topology.metrics.interval.secs``, close ``core``'s (an ``ExecutorCore``) metrics
    interval, give the flow-control policy its rates (buffer debloating), export it
    through ``ray.util.metrics`` and log each backpressure-level change once. Returns when
    the task stops or is done."""
    period = core.conf["topology.metrics.interval.secs"]
    try:
        export = RayMetricsExport(core.topology_name, core.component_id, core.task_id)
    except Exception as e:  # no metrics agent: the stats still carry everything
        core.errors.report(e, "metrics export")
        export = None
    level = "OK"
    while not core._stop:
        time.sleep(period)
        m = metrics.sample()
        if (m.interval_s and m.busy_time_ms_per_second is not None
                and core.chain_host is None):
            # busy plus held by a full destination: Flink's throughput measurement
            # pauses only while the task is idle, so a backpressured task is sized to
            # what it really drains, not to its speed when unblocked
            active = (m.busy_time_ms_per_second
                      + (m.backpressured_time_ms_per_second or 0.0)) / 1000.0
            bound = core.policy.on_interval(m.executed_per_s or 0.0, min(active, 1.0),
                                            core.queue.capacity, time.monotonic())
            if bound is not None:  # (Flink's buffer debloating: the queue's admission)
                core.queue.capacity = bound
        if m.backpressure_level != level:
            level = m.backpressure_level
            _actor_log.info("%s:%d: backpressure %s (%.0f ms/s held%s)",
                            core.component_id, core.task_id, level,
                            m.backpressured_time_ms_per_second,
                            f", by task {m.backpressure_cause}"
                            if m.backpressure_cause is not None else "")
        if export is not None:
            export.record(core.stats(m))
        if core.done.is_set():
            return
