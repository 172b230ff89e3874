"""Backpressure between workers: which tasks are backlogged, and how senders learn it.

Storm 2.0's model (STORM-2306's design doc "Backpressure model for Storm 2.0", §2; Storm's
``WorkerState.transferLocalBatch``, ``BackPressureTracker`` and ``WorkerTransfer``):

* the **receiving** side knows a task is backlogged when an arrival from another worker
  finds its receive queue full and goes to the overflow queue. :class:`BackPressureTracker`
  is Storm's class of that name: per task a flag, set on the first overflow
  (:meth:`~BackPressureTracker.record_back_pressure` reports the false→true transition),
  cleared by the backpressure-check timer only once that task's overflow has drained
  (:meth:`~BackPressureTracker.refresh_bp_task_list`), and a per-task overflow count for
  the reminder (per task, not shared: STORM-3510);
* :class:`WorkerBackPressure` is the worker's view over all its tasks, from which the
  transfer actor sends a full :class:`BackPressureStatus` on every change, on reminders and
  to each worker that connects;
* the **sending** side keeps :class:`RemoteBackPressure`: per remote task a flag, set and
  cleared by the statuses it receives (stale ones ignored). A send to a flagged task fails
  and waits in ``pendingEmits``; sends to every other task go on. There is no global flag.

Nothing here does I/O; the actors carry these decisions out.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class OverflowQueue(Protocol):
    """What the tracker needs from a queue (``JCQueue`` has it)."""

    def is_empty_overflow(self) -> bool: ...


_last_id = 0
_id_lock = threading.Lock()


def next_status_id() -> int:
    """An id larger than every earlier one in this process, and than any id from an earlier
    incarnation (wall-clock nanoseconds), so a restarted worker's statuses are not taken as
    stale. Storm uses a static counter (restarts from 0)."""
    global _last_id
    with _id_lock:
        _last_id = max(_last_id + 1, time.time_ns())
        return _last_id


@dataclass(frozen=True)
class BackPressureStatus:
    """Storm's ``BackPressureStatus``: the full backpressure state of one worker's tasks.

    Attributes:
        worker_id: the worker whose tasks these are.
        bp_tasks: task ids that are backlogged (senders must hold).
        non_bp_tasks: the worker's other task ids (senders may send).
        status_id: increasing per sender; a receiver ignores an id at or below the last one
            it applied from that worker (a reordered or duplicated message).
        since: for each task in ``bp_tasks``, the wall-clock time (s since the epoch) its
            backlog started, so a sender can measure the halt-lag.
    """

    worker_id: int
    bp_tasks: tuple[int, ...]
    non_bp_tasks: tuple[int, ...]
    status_id: int = 0
    since: Mapping[int, float] = field(default_factory=dict)

    def to_wire(self) -> list:
        """A msgpack-able list: ``[status_id, worker_id, bp_tasks, non_bp_tasks, since]``,
        ``since`` as a list parallel to ``bp_tasks``."""
        return [self.status_id, self.worker_id, list(self.bp_tasks), list(self.non_bp_tasks),
                [float(self.since.get(t, 0.0)) for t in self.bp_tasks]]

    @classmethod
    def from_wire(cls, obj) -> BackPressureStatus:
        """Inverse of :meth:`to_wire`.

        Raises:
            ValueError: ``obj`` is not a well-formed status (wrong shape or types).
        """
        try:
            sid, wid, bp, non_bp, since = obj
        except (TypeError, ValueError):
            raise ValueError(f"not a backpressure status: {obj!r:.100}") from None
        if not (isinstance(sid, int) and isinstance(wid, int) and isinstance(bp, list)
                and isinstance(non_bp, list) and isinstance(since, list)
                and len(since) == len(bp)
                and all(isinstance(t, int) for t in itertools.chain(bp, non_bp))
                and all(isinstance(s, (int, float)) for s in since)):
            raise ValueError(f"malformed backpressure status: {obj!r:.100}")
        return cls(wid, tuple(bp), tuple(non_bp), sid, dict(zip(bp, since, strict=True)))


class _TaskState:
    __slots__ = ("queue", "backpressure", "last_overflow_count", "since")

    def __init__(self, queue: OverflowQueue) -> None:
        self.queue = queue
        self.backpressure = False
        self.last_overflow_count = 0
        self.since = 0.0


class BackPressureTracker:
    """Storm's ``BackPressureTracker`` over some of a worker's tasks.

    Args:
        worker_id: the worker these tasks belong to.
        queues: task id → its queue (anything with ``is_empty_overflow()``).

    Not thread-safe: one caller at a time (the receiving thread and the check timer of an
    executor take turns under its lock).
    """

    def __init__(self, worker_id: int, queues: Mapping[int, OverflowQueue]) -> None:
        self.worker_id = worker_id
        self._tasks = {t: _TaskState(q) for t, q in queues.items()}

    def record_back_pressure(self, task: int, now: float | None = None) -> bool:
        """Mark ``task`` backlogged; True only on the false→true transition.

        Raises:
            KeyError: not a task of this tracker.
        """
        st = self._tasks[task]
        if st.backpressure:
            return False
        st.backpressure = True
        st.since = time.time() if now is None else now
        return True

    def refresh_bp_task_list(self) -> bool:
        """Clear every backlogged task whose overflow has drained; True if any changed.

        A receive queue with room is not enough: while the overflow holds tuples, new
        arrivals still go behind them, so the senders must keep holding.
        """
        changed = False
        for st in self._tasks.values():
            if st.backpressure and st.queue.is_empty_overflow():
                st.backpressure = False
                changed = True
        return changed

    def is_backpressured(self, task: int) -> bool:
        return self._tasks[task].backpressure

    def since(self, task: int) -> float:
        """When ``task``'s current backlog started (epoch s); 0.0 if it is not backlogged."""
        st = self._tasks[task]
        return st.since if st.backpressure else 0.0

    def get_last_overflow_count(self, task: int) -> int:
        return self._tasks[task].last_overflow_count

    def set_last_overflow_count(self, task: int, count: int) -> None:
        self._tasks[task].last_overflow_count = count

    def get_curr_status(self) -> BackPressureStatus:
        """The full status of this tracker's tasks, with a fresh status id."""
        bp = tuple(sorted(t for t, s in self._tasks.items() if s.backpressure))
        non_bp = tuple(sorted(t for t, s in self._tasks.items() if not s.backpressure))
        return BackPressureStatus(self.worker_id, bp, non_bp, next_status_id(),
                                  {t: self._tasks[t].since for t in bp})


class WorkerBackPressure:
    """The transfer actor's view of its worker's tasks, fed by their executors' reports.

    An executor runs a one-task :class:`BackPressureTracker` next to its own queue (the
    queue lives in the executor's process) and reports each transition and reminder here
    with an increasing sequence number, so reports that arrive out of order are ignored.

    Args:
        worker_id: this worker.
        tasks: the task ids this worker owns.
    """

    def __init__(self, worker_id: int, tasks: Iterable[int]) -> None:
        self.worker_id = worker_id
        self.tasks = frozenset(tasks)
        self._since: dict[int, float] = {}
        self._seq: dict[int, int] = {}

    def update(self, task: int, backlogged: bool, since: float, seq: int) -> bool:
        """Apply one executor report; True if the worker's status changed.

        Raises:
            KeyError: ``task`` is not owned by this worker.
        """
        if task not in self.tasks:
            raise KeyError(f"task {task} is not owned by worker {self.worker_id}")
        if seq <= self._seq.get(task, -1):
            return False
        self._seq[task] = seq
        was = task in self._since
        if backlogged:
            self._since[task] = since
            return not was
        self._since.pop(task, None)
        return was

    @property
    def any_backlogged(self) -> bool:
        return bool(self._since)

    def backlogged(self) -> dict[int, float]:
        """Backlogged task → since (epoch s)."""
        return dict(self._since)

    def status(self) -> BackPressureStatus:
        """The full status of this worker's tasks, with a fresh status id."""
        bp = tuple(sorted(self._since))
        return BackPressureStatus(self.worker_id, bp, tuple(sorted(self.tasks - set(bp))),
                                  next_status_id(), dict(self._since))


class RemoteBackPressure:
    """The sending side's flags: which remote tasks are backlogged (Storm's
    ``remoteBackPressureStatus``, per task, never global).

    Thread-safety: :meth:`apply` runs on a control thread while the executor thread reads
    :meth:`is_backlogged`; each flag is one dict entry (atomic under the GIL).
    """

    def __init__(self) -> None:
        self._flags: dict[int, bool] = {}
        self._last_id: dict[int, int] = {}
        self._last_seq: dict[int, int] = {}

    def is_backlogged(self, task: int) -> bool:
        return self._flags.get(task, False)

    def apply(self, status: BackPressureStatus,
              now: float | None = None) -> tuple[list[int], list[float]] | None:
        """Apply a status from another worker; None if it is stale (older id), else the
        tasks that became backlogged here and the halt-lag so far of each (seconds from
        the backlog's start to now)."""
        last = self._last_id.get(status.worker_id, -1)
        if status.status_id <= last:
            return None
        self._last_id[status.worker_id] = status.status_id
        now = time.time() if now is None else now
        newly, lags = [], []
        flags = self._flags
        for t in status.bp_tasks:
            if not flags.get(t, False):
                flags[t] = True
                newly.append(t)
                since = status.since.get(t, 0.0)
                lags.append(max(0.0, now - since) if since else 0.0)
        for t in status.non_bp_tasks:
            if flags.get(t, False):
                flags[t] = False
        return newly, lags

    def apply_task(self, task: int, backlogged: bool, since: float, seq: int,
                   now: float | None = None) -> float | None:
        """Apply one task's own report, sent straight from its executor (the direct status
        path, ``topology.backpressure.status.direct``): ordered per task by ``seq`` (an
        executor's report sequence, which starts above any earlier incarnation's), so a
        report that arrives after a later one is ignored.

        Returns:
            the halt-lag so far in seconds (backlog start to now) if ``task`` became
            backlogged here, else None.
        """
        if seq <= self._last_seq.get(task, -1):
            return None
        self._last_seq[task] = seq
        was = self._flags.get(task, False)
        self._flags[task] = backlogged
        if backlogged and not was:
            now = time.time() if now is None else now
            return max(0.0, now - since) if since else 0.0
        return None

    def backlogged(self) -> list[int]:
        return sorted(t for t, f in self._flags.items() if f)
