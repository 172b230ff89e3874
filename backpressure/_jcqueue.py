"""``JCQueue``: an executor's bounded receive queue plus its overflow queue.

Storm 2.0's ``JCQueue`` (seeds/storm2-messaging-redesign.txt; notes/storm2-internals.md §2):

* the **receive queue** holds at most ``capacity`` elements (tuples); inserts into a full
  queue fail, which is how backpressure starts;
* the **overflow queue** holds elements that arrived from other workers during the
  halt-lag (seeds/storm2-backpressure-model.txt §2b); it is bounded by
  ``topology.executor.overflow.limit`` when that is > 0 (beyond it, drops are counted);
* **batch inserters**, one per producer, group ``topology.producer.batch.size`` elements
  per insert. An inserter is generic over its *sink* (any ``try_fill(items) -> n``), so the
  same class batches into a local ``JCQueue`` and into a remote executor's queue;
* ``consume`` drains the receive queue, then the overflow queue, as Storm does, but only
  once every element that entered the receive queue before the overflow started has been
  consumed (a *barrier*), so one upstream task's tuples never overtake each other when a
  batch is split between the two queues.

Many producers, one consumer. Producers serialise on a lock (an insert is one
``deque.extend``); the consumer pops without it (``deque.popleft`` is atomic in CPython).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any

from backpressure._rate import RateTracker
from backpressure._wait import ParkWaitStrategy, WaitStrategy


class QueueInterrupted(InterruptedError):
    """A blocking publish was interrupted (the queue or the inserter was interrupted)."""


@dataclass(frozen=True)
class JCQueueMetrics:
    """A snapshot of a queue's state (Storm's ``JCQueueMetrics``).

    Attributes:
        capacity: the receive queue's bound, in tuples.
        population: tuples in the receive queue now.
        pct_full: ``population / capacity`` (0.0 to 1.0).
        overflow: tuples in the overflow queue now.
        arrival_rate_secs: tuples inserted per second over the last ~10 s.
        sojourn_time_ms: expected wait of a new arrival, ``population / arrival_rate``.
        insert_failures: attempts that found the receive queue full (cumulative).
        dropped_messages: tuples dropped at the overflow limit (cumulative).
    """

    capacity: int
    population: int
    pct_full: float
    overflow: int
    arrival_rate_secs: float
    sojourn_time_ms: float
    insert_failures: int
    dropped_messages: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BatchInserter:
    """Groups one producer's elements into batches before inserting them into a sink.

    Storm's ``JCQueue.BatchInserter``, generalised: ``sink(items) -> n`` inserts a prefix of
    ``items`` (all, some or none) and returns how many it took. Not thread-safe: one
    inserter per producer thread.

    Args:
        sink: the insert function (``JCQueue.try_fill`` for a local queue).
        batch_size: elements per batch (>= 1).
        bp_wait: strategy for the blocking ``publish``/``flush`` retries.
        on_insert_failure: called once per failed (zero-element) insert attempt.
        interrupted: polled between blocking retries; True raises ``QueueInterrupted``.
    """

    __slots__ = ("_sink", "batch_size", "_bp_wait", "_on_failure", "_interrupted", "batch",
                 "transferred")

    def __init__(self, sink: Callable[[list], int], batch_size: int,
                 bp_wait: WaitStrategy | None = None,
                 on_insert_failure: Callable[[], None] | None = None,
                 interrupted: Callable[[], bool] | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._sink = sink
        self.batch_size = batch_size
        self._bp_wait = bp_wait or ParkWaitStrategy(100)
        self._on_failure = on_insert_failure
        self._interrupted = interrupted
        self.batch: list = []
        #: items the sink has taken so far (Storm's "transferred")
        self.transferred = 0

    def __len__(self) -> int:
        return len(self.batch)

    def sink_busy(self) -> bool:
        """True while the sink reports an earlier batch still in flight (its ``busy()``;
        False for a sink without one, such as a local queue). Non-blocking."""
        busy = getattr(self._sink, "busy", None)
        return busy is not None and busy()

    def publish(self, obj: Any) -> None:
        """Append ``obj``; when the batch is full, ``flush()`` (blocks while the sink is full)."""
        self.batch.append(obj)
        if len(self.batch) >= self.batch_size:
            self.flush()

    def try_publish(self, obj: Any) -> bool:
        """Append ``obj`` without blocking; False (nothing appended) if a full batch cannot leave.

        When the append fills the batch, one non-blocking flush is attempted.
        """
        batch = self.batch
        if self.batch_size == 1 and not batch:
            # Storm's DirectInserter: one offer, nothing held back on failure.
            if self._sink([obj]):
                self.transferred += 1
                return True
            if self._on_failure is not None:
                self._on_failure()
            return False
        if len(batch) >= self.batch_size and not self.try_flush():
            return False
        batch.append(obj)
        if len(batch) >= self.batch_size:
            self.try_flush()
        return True

    def try_append(self, obj: Any) -> bool:
        """As :meth:`try_publish`, but a batch that ``obj`` fills stays until the caller
        flushes it (or the next publish, or a flush): the bolt collector's ``ack`` first
        folds the parent's ack into ``obj``'s edge (ack piggybacking). Non-blocking; False
        (nothing appended) if a full batch cannot leave first."""
        batch = self.batch
        if len(batch) >= self.batch_size and not self.try_flush():
            return False
        batch.append(obj)
        return True

    def flush(self) -> None:
        """Insert the whole batch, retrying under the wait strategy until it is all in.

        Raises:
            QueueInterrupted: ``interrupted()`` became true while waiting.
        """
        idle = 0
        while self.batch:
            n = self._sink(self.batch)
            if n:
                del self.batch[:n]
                self.transferred += n
                idle = 0
                continue
            if self._on_failure is not None:
                self._on_failure()
            if self._interrupted is not None and self._interrupted():
                raise QueueInterrupted("publish interrupted while the queue was full")
            idle = self._bp_wait.idle(idle)

    def try_flush(self) -> bool:
        """One insert attempt; False only if nothing could be inserted (Storm's tryFlush)."""
        if not self.batch:
            return True
        n = self._sink(self.batch)
        if n:
            del self.batch[:n]
            self.transferred += n
            return True
        if self._on_failure is not None:
            self._on_failure()
        return False


class JCQueue:
    """Bounded receive queue + overflow queue + per-producer batch inserters + metrics.

    Args:
        name: for logs and errors (e.g. ``"count:3"``).
        capacity: receive-queue bound in elements (``topology.executor.receive.buffer.size``).
            Not rounded to a power of two: that is a JCTools detail, not a contract.
        producer_batch_size: ``topology.producer.batch.size``; clamped to
            ``[1, capacity // 2]`` as Storm does.
        overflow_limit: ``topology.executor.overflow.limit``; 0 = unbounded.
        bp_wait: wait strategy of blocking publishes
            (``topology.backpressure.wait.strategy``).
        wakeup: an event set after every insert (into either queue), so a consumer idling
            on it wakes when input arrives instead of polling (see backpressure._wait).
    """

    def __init__(self, name: str, capacity: int, producer_batch_size: int = 1,
                 overflow_limit: int = 0, bp_wait: WaitStrategy | None = None,
                 wakeup: threading.Event | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"queue {name}: capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self.producer_batch_size = max(1, min(producer_batch_size, capacity // 2 or 1))
        self.overflow_limit = overflow_limit
        self._bp_wait = bp_wait or ParkWaitStrategy(100)
        self._q: deque = deque()
        self._overflow: deque = deque()
        self._lock = threading.Lock()
        self._inserters: dict[Hashable, BatchInserter] = {}
        self._insert_failures = 0
        self._dropped = 0
        self._arrivals = RateTracker()
        self._interrupted = False
        # ordering barrier between the two queues (see consume)
        self._q_in = 0  # elements ever inserted into the receive queue (under the lock)
        self._ov_barrier = 0  # _q_in when the overflow last went from empty to non-empty
        self._overflowed = 0  # elements ever put into the overflow (cumulative)
        self.wakeup = wakeup

    def _wake(self) -> None:
        w = self.wakeup
        if w is not None and not w.is_set():
            w.set()

    # -- producers ----------------------------------------------------------------------
    def try_fill(self, items: list) -> int:
        """Insert as many leading elements of ``items`` as fit; returns how many (0 if full)."""
        with self._lock:
            room = self.capacity - len(self._q)
            if room <= 0:
                return 0
            if room >= len(items):
                self._q.extend(items)
                n = len(items)
            else:
                self._q.extend(islice(items, room))
                n = room
            self._q_in += n
            self._arrivals.notify(n)
        self._wake()
        return n

    def publish_remote(self, items: list, limit: int | None = None,
                       dropped_out: list | None = None) -> tuple[int, int]:
        """Insert a batch that arrived from another worker; never blocks.

        Storm's ``WorkerState.transferLocalBatch`` for one task: elements go to the receive
        queue while the overflow is empty and there is room; the rest, and everything while
        the overflow is non-empty (so one upstream's order is kept), go to the overflow
        queue; beyond ``overflow_limit`` (> 0) they are dropped and counted. Storm 2.0
        overflowQ, see seeds/storm2-backpressure-model.txt §2b-c.

        Args:
            limit: an overflow limit for this call instead of ``overflow_limit`` (a back
                edge's cap); 0 = unbounded, for control elements such as the end of
                stream, whose loss would stall the stream rather than shed load.
            dropped_out: when given, the dropped elements are appended to it.

        Returns:
            ``(overflowed, dropped)``: how many went to the overflow, how many were dropped.
        """
        res = self._publish_remote(items, limit, dropped_out)
        self._wake()
        return res

    def _publish_remote(self, items: list, limit: int | None,
                        dropped_out: list | None) -> tuple[int, int]:
        total = len(items)
        with self._lock:
            n = 0
            ov = self._overflow
            if not ov:
                room = self.capacity - len(self._q)
                if room > 0:
                    n = min(room, total)
                    self._q.extend(items if n == total else islice(items, n))
                    self._q_in += n
            self._arrivals.notify(total)
            rest = total - n
            if not rest:
                return 0, 0
            self._insert_failures += 1
            if not ov:
                self._ov_barrier = self._q_in
            take = rest
            cap = self.overflow_limit if limit is None else limit
            if cap > 0:
                take = max(0, min(rest, cap - len(ov)))
            if take:
                ov.extend(islice(items, n, n + take))
                self._overflowed += take
            dropped = rest - take
            self._dropped += dropped
            if dropped and dropped_out is not None:
                dropped_out.extend(islice(items, n + take, None))
            return take, dropped

    def _record_insert_failure(self) -> None:
        self._insert_failures += 1

    def _inserter(self, producer: Hashable | None) -> BatchInserter:
        key = threading.get_ident() if producer is None else producer
        ins = self._inserters.get(key)
        if ins is None:
            ins = self._inserters.setdefault(key, BatchInserter(
                self.try_fill, self.producer_batch_size, self._bp_wait,
                self._record_insert_failure, lambda: self._interrupted))
        return ins

    def publish(self, obj: Any, producer: Hashable | None = None) -> None:
        """Add ``obj`` through the producer's batch inserter; blocks while the queue is full.

        Args:
            producer: the inserter key; ``None`` = the calling thread (as Storm's ThreadLocal).

        Raises:
            QueueInterrupted: :meth:`interrupt` was called while this call waited.
        """
        self._inserter(producer).publish(obj)

    def try_publish(self, obj: Any, producer: Hashable | None = None) -> bool:
        """Add ``obj`` without blocking; False if the queue (and so the full batch) is full."""
        return self._inserter(producer).try_publish(obj)

    def flush(self, producer: Hashable | None = None) -> None:
        """Insert the producer's partial batch, blocking until it is all in."""
        self._inserter(producer).flush()

    def try_flush(self, producer: Hashable | None = None) -> bool:
        """One non-blocking attempt to insert the producer's partial batch."""
        return self._inserter(producer).try_flush()

    def publish_all(self, items: list, interrupted: Callable[[], bool] | None = None) -> None:
        """Insert every element of ``items`` in order, waiting while the queue is full.

        Used by a receiver for a batch that already travelled as one unit.

        Raises:
            QueueInterrupted: ``interrupted()`` or :meth:`interrupt` while waiting.
        """
        start = 0
        idle = 0
        while start < len(items):
            n = self.try_fill(items if start == 0 else items[start:])
            if n:
                start += n
                idle = 0
                continue
            self._insert_failures += 1
            if self._interrupted or (interrupted is not None and interrupted()):
                raise QueueInterrupted(f"queue {self.name}: publish interrupted while full")
            idle = self._bp_wait.idle(idle)

    def try_publish_direct(self, obj: Any) -> bool:
        """Insert one element bypassing batching (flush tuples); False if full."""
        return self.try_fill([obj]) == 1

    def try_publish_to_overflow(self, obj: Any) -> bool:
        """Append to the overflow queue; False, and the element counted as dropped, at the limit.

        Storm 2.0 overflowQ, see seeds/storm2-backpressure-model.txt §2b-c.
        """
        with self._lock:
            if self.overflow_limit > 0 and len(self._overflow) >= self.overflow_limit:
                self._dropped += 1
                return False
            if not self._overflow:
                self._ov_barrier = self._q_in
            self._overflow.append(obj)
            self._overflowed += 1
        self._wake()
        return True

    def interrupt(self) -> None:
        """Make every blocked and future blocking publish raise ``QueueInterrupted``."""
        self._interrupted = True
        self._wake()

    # -- consumer -----------------------------------------------------------------------
    def consume(self, handler: Callable[[Any], Any],
                exit_cond: Callable[[], bool] | None = None) -> int:
        """Hand queued elements to ``handler``: the receive queue first, then the overflow.

        The overflow is consumed only once everything that entered the receive queue before
        the overflow started has been consumed (the ordering barrier). At most the elements
        present at entry are consumed from each queue (so a fast
        producer cannot keep the consumer here forever), and ``exit_cond()`` returning
        False stops early (Storm's ``ExitCondition.keepRunning``). Never blocks.

        Returns:
            The number of elements consumed.
        """
        q = self._q
        pop = q.popleft
        n = 0
        limit = len(q)
        if exit_cond is None:
            for _ in range(limit):
                handler(pop())
            n = limit
        else:
            while n < limit and exit_cond():
                handler(pop())
                n += 1
            if n < limit:
                return n
        ov = self._overflow
        # consumed so far >= _q_in (read first) - len(q) (read second): a lower bound even
        # while producers insert, so the barrier can only be passed late, never early
        if not ov or self._q_in - len(q) < self._ov_barrier:
            return n
        olimit = len(ov)
        m = 0
        while m < olimit and (exit_cond is None or exit_cond()):
            handler(ov.popleft())
            m += 1
        return n + m

    # -- state --------------------------------------------------------------------------
    def size(self) -> int:
        """Elements in the receive queue."""
        return len(self._q)

    def is_full(self) -> bool:
        return len(self._q) >= self.capacity

    def overflow_count(self) -> int:
        return len(self._overflow)

    def is_empty_overflow(self) -> bool:
        return not self._overflow

    @property
    def overflowed_total(self) -> int:
        """Elements ever put into the overflow queue (cumulative; for BP reminders)."""
        return self._overflowed

    def pending_in_inserters(self) -> int:
        """Elements held in this queue's own producers' partial batches."""
        return sum(len(i) for i in list(self._inserters.values()))

    @property
    def insert_failures(self) -> int:
        return self._insert_failures

    @property
    def dropped_messages(self) -> int:
        return self._dropped

    def metrics(self) -> JCQueueMetrics:
        """A snapshot of the queue metrics (see :class:`JCQueueMetrics`)."""
        pop = len(self._q)
        with self._lock:
            rate = self._arrivals.rate()
        return JCQueueMetrics(
            capacity=self.capacity, population=pop, pct_full=pop / self.capacity,
            overflow=len(self._overflow), arrival_rate_secs=rate,
            sojourn_time_ms=pop / max(rate, 1e-5) * 1000.0,
            insert_failures=self._insert_failures, dropped_messages=self._dropped)

    def __repr__(self) -> str:
        return (f"JCQueue({self.name!r}, {len(self._q)}/{self.capacity}, "
                f"overflow={len(self._overflow)})")
