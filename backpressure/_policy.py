"""The flow-control policy interface, and Storm 2.0's per-task model behind it.

One :class:`FlowControlPolicy` per task makes that task's flow-control decisions, as pure
functions of what it is told (queue fills, statuses from other workers, send outcomes,
timer ticks); the executor (``actors/``) carries them out. The runtime's credits (at most
``topology.transfer.max.inflight.batches`` unfinished sends per (sender, receiver)) and
bounded queues sit under every policy and bound memory whatever it decides.

The hooks, by side:

* **sending**: :meth:`~FlowControlPolicy.may_send` (a send to a task; Storm 2.0: refused
  while that task's worker names it backlogged), :meth:`~FlowControlPolicy.on_status`
  (a :class:`BackPressureStatus` from another worker),
  :meth:`~FlowControlPolicy.hold_partial_batch` (the flush's Nagle rule),
  :meth:`~FlowControlPolicy.credits` (the in-flight window per destination, the hook for
  Flink's time-targeted sizing), and the spout's throttle,
  :attr:`~FlowControlPolicy.throttles_spout` / :meth:`~FlowControlPolicy.spout_delay`
  (STORM-886's watermarks, the NAK blog's adaptive rate);
* **receiving**: :meth:`~FlowControlPolicy.admit` (take arrivals from another worker, or
  drop them: shedding and byte bounds), :meth:`~FlowControlPolicy.on_remote_arrival`
  (the overflow in use: report a backlog, or a reminder), :meth:`~FlowControlPolicy.on_check`
  (the backpressure-check timer), :meth:`~FlowControlPolicy.on_queue_fill` (the same timer's
  reading of the queue's fill: a :class:`Control` signal to send, STORM-886's watermark
  flag or a NAK), :meth:`~FlowControlPolicy.on_interval` (each metrics interval's
  throughput: the queue's admission bound, Flink's buffer debloating);
* **control signals** arriving at a spout: :meth:`~FlowControlPolicy.on_control` (the
  topology-wide throttle flag, a NAK's strength);
* **observability**: :meth:`~FlowControlPolicy.state` and the control-message counters.

The policies: :class:`Storm2Policy` here, ``WatermarkPolicy`` (backpressure/_watermark.py),
``NakPolicy`` (backpressure/_nak.py), ``DebloatPolicy`` (backpressure/_debloat.py).

Thread-safety: none. The receiving hooks are called under the executor's inbound lock, the
sending hooks from the executor thread (:meth:`on_status` from the control thread: a flag
per task, one dict entry each, atomic under the GIL).
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any, NamedTuple

from backpressure._tracker import (
    BackPressureStatus,
    BackPressureTracker,
    OverflowQueue,
    RemoteBackPressure,
)


class Control(NamedTuple):
    """A flow-control signal a receiving task sends (:meth:`FlowControlPolicy.on_queue_fill`):
    ``kind`` ``"flag"`` (STORM-886: ``value`` True while the task is above its high
    watermark, False once back below the low one; to the topology's throttle coordinator)
    or ``"nak"`` (``value``: the fill level crossed, 0..1; to the spouts upstream)."""

    kind: str
    value: float | bool


class Report(enum.Enum):
    """What the receiving side must tell its worker's transfer actor after an arrival."""

    NONE = 0  #: nothing changed
    BACKLOGGED = 1  #: the task just became backlogged (Storm: a new BackPressureStatus)
    REMINDER = 2  #: still backlogged: tell again, in case a status was lost (STORM-3510:
    #: counted per task)


class FlowControlPolicy:
    """One task's flow-control decisions (``topology.backpressure.policy``).

    Subclasses override the hooks they use; the defaults never hold, never refuse and
    never throttle. Times are monotonic seconds unless named otherwise.

    Args:
        task_id: the task whose decisions these are.
        queue: its receive queue (anything with ``is_empty_overflow()``).
        worker: its worker index.
        credits: ``topology.transfer.max.inflight.batches``.
    """

    #: the config value naming this policy
    name = "none"
    #: True if :meth:`spout_delay` may ever hold a spout (the loop asks only then)
    throttles_spout = False
    #: True if the task must read its queue's fill on the backpressure-check timer
    #: (:meth:`on_queue_fill`) even without upstream tasks in other workers
    watches_fill = False

    def __init__(self, task_id: int, queue: OverflowQueue, worker: int = 0,
                 credits: int = 2) -> None:
        self.task_id = task_id
        self.worker = worker
        self._credits = credits
        #: sends refused by :meth:`may_send`
        self.refusals = 0
        #: control signals this task sent (:meth:`on_queue_fill`) / received
        #: (:meth:`on_control`)
        self.control_sent = 0
        self.control_received = 0

    # -- sending side -----------------------------------------------------------------
    def may_send(self, dest: int) -> bool:
        """May a batch be offered to task ``dest`` (in another worker) now? A refusal puts
        the emit into ``pending_emits``; never blocks."""
        return True

    def on_status(self, status: BackPressureStatus, now_wall: float | None = None
                  ) -> list[int]:
        """Apply another worker's status; returns the tasks that became backlogged here.
        ``now_wall`` is wall-clock seconds (the status's ``since`` is too)."""
        return []

    def on_task_status(self, task: int, backlogged: bool, since: float, seq: int,
                       now_wall: float | None = None) -> bool:
        """Apply one remote task's own report (the direct status path); True if the task
        became backlogged here. ``since`` and ``now_wall`` are wall-clock seconds."""
        return False

    def hold_partial_batch(self, fill: int, batch_size: int, in_flight: bool) -> bool:
        """At a flush: keep a partial batch of ``fill`` tuples back? ``in_flight``: an
        earlier batch to the same destination is not yet acknowledged."""
        return False

    def credits(self, dest: int) -> int:
        """Batches that may be in flight to ``dest`` (sent, not yet acknowledged)."""
        return self._credits

    def spout_delay(self, now: float, emitted: int = 0) -> float:
        """Seconds the spout must wait before its next ``next_tuple`` (0: go); ``emitted``
        is the spout's cumulative emit count (for a rate limit). Asked only when
        :attr:`throttles_spout`; never blocks."""
        return 0.0

    def on_control(self, kind: str, value: Any, now: float) -> None:
        """A control signal for this (spout) task: ``("throttle", bool)`` from the
        topology's throttle coordinator, ``("nak", level)`` from a task downstream."""

    def backlogged_remote(self) -> list[int]:
        """Tasks in other workers this task holds its sends to."""
        return []

    # -- receiving side ---------------------------------------------------------------
    def admit(self, src: int, n: int) -> bool:
        """Take ``n`` tuples from task ``src`` (another worker) by the queue's rule (queue,
        else overflow), or drop them (False: counted by the caller)?"""
        return True

    def on_remote_arrival(self, overflowed_total: int, overflow_in_use: bool,
                          now_wall: float) -> Report:
        """After arrivals from another worker: ``overflowed_total`` tuples have gone to this
        task's overflow so far, which is in use now or not."""
        return Report.NONE

    def on_check(self) -> bool:
        """The backpressure-check timer: True if this task's backlog just cleared."""
        return False

    def on_queue_fill(self, fill: float, now: float) -> Control | None:
        """The backpressure-check timer's reading of this task's receive queue: ``fill``
        is its population (queue and overflow) over its bound, 0..1 or more. A signal to
        send, or None. Asked only when :attr:`watches_fill`."""
        return None

    def on_interval(self, executed_per_s: float, busy_fraction: float, capacity: int,
                    now: float) -> int | None:
        """A closed metrics interval: tuples executed per second and the share of the
        interval the task was not idle (busy or held by a full destination, 0..1). A new
        admission bound for the receive queue (tuples), or None to
        keep ``capacity``, the bound now."""
        return None

    def state(self) -> dict[str, Any]:
        """The policy's state for stats (JSON-able; empty by default)."""
        return {}

    @property
    def backlogged(self) -> bool:
        """This task is backlogged (its senders in other workers hold)."""
        return False

    @property
    def backlogged_since(self) -> float:
        """When the current backlog started (wall-clock s), 0.0 if none."""
        return 0.0


class Storm2Policy(FlowControlPolicy):
    """Storm 2.0's per-task backpressure ("Backpressure model for Storm 2.0", STORM-2306, §2).

    Receiving: a task is backlogged from the first arrival from another worker that goes to
    its overflow until the check timer finds the overflow drained
    (:class:`BackPressureTracker`); a reminder every ``resend_size`` overflowed tuples.
    Sending: a send to a task its worker names backlogged is refused
    (:class:`RemoteBackPressure`, per task, never global); the halt-lag (backlog start to
    status applied) is kept for the stats. Nagle's rule at flush: a partial batch waits
    while an earlier one to its destination is in flight, so under load batches fill
    instead of leaving as a stream of small actor calls (benchmarks/throughput.py).

    Args:
        resend_size: ``topology.backpressure.resend.size``.
        (others as :class:`FlowControlPolicy`)
    """

    name = "storm2"

    def __init__(self, task_id: int, queue: OverflowQueue, worker: int = 0,
                 credits: int = 2, resend_size: int = 1000) -> None:
        super().__init__(task_id, queue, worker, credits)
        self._tracker = BackPressureTracker(worker, {task_id: queue})
        self._remote = RemoteBackPressure()
        self._resend_size = resend_size
        #: halt-lags seen (s): a remote task's backlog start to its status applied here
        self.halt_lags_s: deque = deque(maxlen=1000)

    def may_send(self, dest: int) -> bool:
        if self._remote.is_backlogged(dest):
            self.refusals += 1
            return False
        return True

    def on_status(self, status: BackPressureStatus, now_wall: float | None = None
                  ) -> list[int]:
        res = self._remote.apply(status, now_wall)
        if res is None:  # stale
            return []
        newly, lags = res
        self.halt_lags_s.extend(lags)
        return newly

    def on_task_status(self, task: int, backlogged: bool, since: float, seq: int,
                       now_wall: float | None = None) -> bool:
        lag = self._remote.apply_task(task, backlogged, since, seq, now_wall)
        if lag is None:
            return False
        self.halt_lags_s.append(lag)
        return True

    def hold_partial_batch(self, fill: int, batch_size: int, in_flight: bool) -> bool:
        return in_flight and fill < batch_size  # (a full batch never waits)

    def backlogged_remote(self) -> list[int]:
        return self._remote.backlogged()

    def on_remote_arrival(self, overflowed_total: int, overflow_in_use: bool,
                          now_wall: float) -> Report:
        if not overflow_in_use:
            return Report.NONE
        tr, task = self._tracker, self.task_id
        if tr.record_back_pressure(task, now_wall):
            tr.set_last_overflow_count(task, overflowed_total)
            return Report.BACKLOGGED
        if overflowed_total - tr.get_last_overflow_count(task) >= self._resend_size:
            tr.set_last_overflow_count(task, overflowed_total)
            return Report.REMINDER
        return Report.NONE

    def on_check(self) -> bool:
        return self._tracker.refresh_bp_task_list()

    @property
    def backlogged(self) -> bool:
        return self._tracker.is_backpressured(self.task_id)

    @property
    def backlogged_since(self) -> float:
        return self._tracker.since(self.task_id)


#: ``topology.backpressure.policy`` values → policy classes (the other modules of this
#: package add theirs when imported: backpressure/__init__.py imports them all)
POLICIES: dict[str, type[FlowControlPolicy]] = {"storm2": Storm2Policy}


def make_policy(conf: dict, task_id: int, queue: OverflowQueue,
                worker: int = 0) -> FlowControlPolicy:
    """The policy ``conf`` names for ``task_id`` (``topology.backpressure.policy``, Storm
    2.0's by default), with its keys from ``conf``.

    Raises:
        ValueError: an unknown policy name, listing the known ones.
    """
    name = conf.get("topology.backpressure.policy", "storm2")
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown topology.backpressure.policy {name!r}; known: "
                         f"{sorted(POLICIES)}")
    credits = conf.get("topology.transfer.max.inflight.batches", 2)
    resend = conf.get("topology.backpressure.resend.size", 1000)
    if name == "storm2":
        return Storm2Policy(task_id, queue, worker, credits, resend)
    if name == "watermark":
        return cls(task_id, queue, worker, credits, resend,
                   high=conf.get("backpressure.disruptor.high.watermark", 0.9),
                   low=conf.get("backpressure.disruptor.low.watermark", 0.4))
    if name == "nak":
        return cls(task_id, queue, worker, credits, resend,
                   levels=tuple(conf.get("topology.backpressure.nak.levels",
                                         (0.5, 0.75, 0.87, 1.0))),
                   window_s=conf.get("topology.backpressure.nak.window.ms", 50) / 1000.0)
    if name == "debloat":
        size = conf.get("topology.executor.receive.buffer.size", 32768)
        batch = min(conf.get("topology.producer.batch.size", 1000), max(1, size // 2))
        return cls(task_id, queue, worker, credits, resend,
                   target_s=conf.get("topology.backpressure.debloat.target.ms", 1000) / 1000,
                   floor=batch, ceiling=size)
    return cls(task_id, queue, worker, credits)
