"""``JCQueue``: an executor's bounded receive queue plus its overflow queue.

Storm 2.0's ``JCQueue`` (STORM-2306, "Redesign Messaging Subsystem and switch to JCTools
Queues"; Storm's ``JCQueue`` class):

* the **receive queue** holds at most ``capacity`` elements (tuples); inserts into a full
  queue fail, which is how backpressure starts;
* the **overflow queue** holds elements that arrived from other workers during the
  halt-lag ("Backpressure model for Storm 2.0", STORM-2306's design doc, §2b); it is
  bounded by ``topology.executor.overflow.limit`` when that is > 0 (beyond it, drops are
  counted);
* **batch inserters**, one per producer, group ``topology.producer.batch.size`` elements
  per insert. An inserter is generic over its *sink* (any ``try_fill(items) -> n``), so the
  same class batches into a local ``JCQueue`` and into a remote executor's queue;
* ``consume`` drains the receive queue, then the overflow queue, as Storm does, but only
  once every element that entered the receive queue before the overflow started has been
  consumed (a *barrier*), so one upstream task's tuples never overtake each other when a
  batch is split between the two queues;
* **byte bounds** (``topology.executor.receive.buffer.bytes``, the overflow's
  ``topology.executor.overflow.limit.bytes``) beside the tuple counts: a queue is full at
  whichever bound comes first. The bytes are wire bytes that the caller passes with each
  insert (a frame's length), shared evenly by the frame's elements, so the bound costs
  one record per insert, not per tuple. An element larger than the whole bound enters only
  an empty queue, and then alone (Arroyo's rule; Flink's FLINK-33077 is what happens
  otherwise);
* each insert's **arrival time** is kept with it, so a consumer can read an element's
  sojourn time as it leaves (CoDel's measure; :meth:`JCQueue.consume` with ``timed``);
* an optional, bounded **control receive queue** (Storm 3.0's, apache/storm #8892 for
  #8816, "Decouple the control plane from the data plane on receive queues"): system
  elements that need no order against the data (ticks, flushes, acking messages) go
  there and ``consume`` drains it before the data, so they are not stuck behind a full
  receive queue. What must stay behind the data it follows (an end of stream, DRAINED,
  a checkpoint barrier) never goes there: the callers choose, this class only orders.

Many producers, one consumer. Producers serialise on a lock (an insert is one
``deque.extend``); the consumer pops without it (``deque.popleft`` is atomic in CPython).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any

from backpressure._arrivals import Arrivals as _Arrivals
from backpressure._arrivals import fit as _fit
from backpressure._inserter import BatchInserter, QueueInterrupted
from backpressure._rate import RateTracker
from backpressure._wait import ParkWaitStrategy, WaitStrategy


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
        capacity_bytes: the receive queue's byte bound (0: none).
        population_bytes: wire bytes of the tuples in the receive queue now.
        overflow_bytes: wire bytes of the tuples in the overflow queue now.
        control: elements in the control receive queue now (0 without one).
    """

    capacity: int
    population: int
    pct_full: float
    overflow: int
    arrival_rate_secs: float
    sojourn_time_ms: float
    insert_failures: int
    dropped_messages: int
    capacity_bytes: int = 0
    population_bytes: int = 0
    overflow_bytes: int = 0
    control: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        capacity_bytes: receive-queue bound in wire bytes
            (``topology.executor.receive.buffer.bytes``); 0 = none.
        overflow_limit_bytes: the overflow's bound in wire bytes
            (``topology.executor.overflow.limit.bytes``); 0 = none.
        control_capacity: the control receive queue's bound in elements
            (``topology.executor.control.receive.buffer.size``); 0 = no control queue.
    """

    def __init__(self, name: str, capacity: int, producer_batch_size: int = 1,
                 overflow_limit: int = 0, bp_wait: WaitStrategy | None = None,
                 wakeup: threading.Event | None = None, capacity_bytes: int = 0,
                 overflow_limit_bytes: int = 0, control_capacity: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"queue {name}: capacity must be >= 1, got {capacity}")
        if capacity_bytes < 0 or overflow_limit_bytes < 0:
            raise ValueError(f"queue {name}: byte bounds must be >= 0 (0: none)")
        self.name = name
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.producer_batch_size = max(1, min(producer_batch_size, capacity // 2 or 1))
        self.overflow_limit = overflow_limit
        self.overflow_limit_bytes = overflow_limit_bytes
        self._bp_wait = bp_wait or ParkWaitStrategy(100)
        self._q: deque = deque()
        self._overflow: deque = deque()
        self._qa = _Arrivals()  # the receive queue's inserts (count, bytes, time)
        self._ova = _Arrivals()  # the overflow's
        self._lock = threading.Lock()
        self._inserters: dict[Hashable, BatchInserter] = {}
        self._insert_failures = 0
        self._dropped = 0
        self._arrivals = RateTracker()
        self._interrupted = False
        # ordering barrier between the two queues (see consume): the receive queue's
        # element count (_qa.count_in) when the overflow last went from empty to non-empty
        self._ov_barrier = 0
        self._overflowed = 0  # elements ever put into the overflow (cumulative)
        self.wakeup = wakeup
        self.control_capacity = max(0, control_capacity)
        #: the control receive queue (None: off); elements never wait for room in it
        #: (a caller whose element finds it full uses the receive queue instead)
        self._ctrl: deque | None = deque() if self.control_capacity else None

    def _wake(self) -> None:
        w = self.wakeup
        if w is not None and not w.is_set():
            w.set()

    # -- producers ----------------------------------------------------------------------
    def try_fill(self, items: list, nbytes: int = 0) -> int:
        """Insert as many leading elements of ``items`` as fit; returns how many (0 if full).

        Args:
            nbytes: the wire bytes of all of ``items`` (0: not counted against the byte
                bound), shared evenly by them.
        """
        with self._lock:
            total = len(items)
            qa = self._qa
            n = _fit(total, nbytes, self.capacity - len(self._q), self.capacity_bytes,
                     qa.queued_bytes)
            if n <= 0:
                return 0
            qa.add(n, nbytes * n // total if nbytes else 0, time.monotonic())
            self._q.extend(items if n == total else islice(items, n))
            self._arrivals.notify(n)
        self._wake()
        return n

    def publish_remote(self, items: list, limit: int | None = None,
                       dropped_out: list | None = None, nbytes: int = 0) -> tuple[int, int]:
        """Insert a batch that arrived from another worker; never blocks.

        Storm's ``WorkerState.transferLocalBatch`` for one task: elements go to the receive
        queue while the overflow is empty and there is room; the rest, and everything while
        the overflow is non-empty (so one upstream's order is kept), go to the overflow
        queue; beyond ``overflow_limit`` or ``overflow_limit_bytes`` (> 0) they are dropped
        and counted. Storm 2.0 overflowQ, see "Backpressure model for Storm 2.0"
        (STORM-2306's design doc), §2b-c.

        Args:
            limit: an overflow limit for this call instead of ``overflow_limit`` (a back
                edge's cap); 0 = unbounded in count and bytes, for control elements such
                as the end of stream, whose loss would stall the stream rather than shed
                load.
            dropped_out: when given, the dropped elements are appended to it.
            nbytes: the wire bytes of all of ``items`` (0: not counted), shared evenly.

        Returns:
            ``(overflowed, dropped)``: how many went to the overflow, how many were dropped.
        """
        res = self._publish_remote(items, limit, dropped_out, nbytes)
        self._wake()
        return res

    def _publish_remote(self, items: list, limit: int | None,
                        dropped_out: list | None, nbytes: int) -> tuple[int, int]:
        total = len(items)
        now = time.monotonic()
        with self._lock:
            n = 0
            ov = self._overflow
            qa = self._qa
            if not ov:
                n = _fit(total, nbytes, self.capacity - len(self._q), self.capacity_bytes,
                         qa.queued_bytes)
                if n > 0:
                    qa.add(n, nbytes * n // total if nbytes else 0, now)
                    self._q.extend(items if n == total else islice(items, n))
            self._arrivals.notify(total)
            rest = total - n
            if not rest:
                return 0, 0
            self._insert_failures += 1
            if not ov:
                self._ov_barrier = qa.count_in
            rest_bytes = nbytes - (nbytes * n // total if nbytes else 0)
            cap = self.overflow_limit if limit is None else limit
            ova = self._ova
            if limit == 0:
                take = rest
            else:
                take = _fit(rest, rest_bytes, cap - len(ov) if cap > 0 else rest,
                            self.overflow_limit_bytes, ova.queued_bytes)
            if take:
                ova.add(take, rest_bytes * take // rest, now)
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

    def publish_all(self, items: list, interrupted: Callable[[], bool] | None = None,
                    nbytes: int = 0, guard=None) -> None:
        """Insert every element of ``items`` in order, waiting while the queue is full (in
        elements or, with ``nbytes``, the wire bytes of all of ``items``, in bytes).

        Used by a receiver for a batch that already travelled as one unit. With ``guard``
        (a lock), each insert attempt checks ``interrupted()`` first, both under the
        lock, so a consumer that clears the queue under it sees no insert of a batch that
        was interrupted before (never held while waiting).

        Raises:
            QueueInterrupted: ``interrupted()`` or :meth:`interrupt` while waiting.
        """
        if guard is not None:
            def fill(rest, rest_bytes):
                with guard:
                    if interrupted():
                        raise QueueInterrupted(f"queue {self.name}: publish interrupted")
                    return self.try_fill(rest, rest_bytes)
        else:
            fill = self.try_fill
        start = 0
        idle = 0
        total = len(items)
        while start < total:
            rest = items if start == 0 else items[start:]
            rest_bytes = nbytes - nbytes * start // total if nbytes else 0
            n = fill(rest, rest_bytes)
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

        Storm 2.0 overflowQ, see "Backpressure model for Storm 2.0" (STORM-2306's design
        doc), §2b-c.
        """
        with self._lock:
            if self.overflow_limit > 0 and len(self._overflow) >= self.overflow_limit:
                self._dropped += 1
                return False
            if not self._overflow:
                self._ov_barrier = self._qa.count_in
            self._ova.add(1, 0, time.monotonic())
            self._overflow.append(obj)
            self._overflowed += 1
        self._wake()
        return True

    @property
    def has_control(self) -> bool:
        """True if this queue has a control receive queue."""
        return self._ctrl is not None

    def try_publish_control(self, obj: Any) -> bool:
        """Insert one system element (a tick, a flush) ahead of the data: into the control
        receive queue, or, without one, into the receive queue as
        :meth:`try_publish_direct`. Non-blocking; False if the queue it goes to is full."""
        if self._ctrl is None:
            return self.try_fill([obj]) == 1
        return self.fill_control([obj]) == 1

    def fill_control(self, items: list) -> int:
        """Insert the leading elements of ``items`` that fit into the control receive
        queue; returns how many (0 without one, or when full). Never blocks."""
        ctrl = self._ctrl
        if ctrl is None:
            return 0
        with self._lock:
            n = min(len(items), self.control_capacity - len(ctrl))
            if n <= 0:
                return 0
            ctrl.extend(items if n == len(items) else islice(items, n))
        self._wake()
        return n

    def interrupt(self) -> None:
        """Make every blocked and future blocking publish raise ``QueueInterrupted``."""
        self._interrupted = True
        self._wake()

    # -- consumer -----------------------------------------------------------------------
    def consume(self, handler: Callable[..., Any],
                exit_cond: Callable[[], bool] | None = None, timed: bool = False,
                expired: tuple[float, Callable[[list, float], Any]] | None = None) -> int:
        """Hand queued elements to ``handler``: the control receive queue first (if any),
        then the receive queue, then the overflow.

        The overflow is consumed only once everything that entered the receive queue before
        the overflow started has been consumed (the ordering barrier). At most the elements
        present at entry are consumed from each queue (so a fast
        producer cannot keep the consumer here forever), and ``exit_cond()`` returning
        False stops early (Storm's ``ExitCondition.keepRunning``). Never blocks.

        Args:
            timed: call ``handler(element, arrived_at)`` instead, with the monotonic time
                (s) the element was inserted: its sojourn time is ``now - arrived_at``
                (CoDel's measure, for latency-first shedding). A control element's
                time is the time it is taken (none is kept for it).
            expired: with ``timed``, ``(max_age_s, take)``: what is left of an insert whose
                elements share an arrival time already more than ``max_age_s`` ago goes
                to ``take(elements, arrived_at)`` at once, in order, instead of to
                ``handler`` one by one (a shedding consumer drops a whole expired frame
                for the cost of counting it: shedding tuple by tuple cost the executor
                thread more than the arrivals left it at full speed, so it shed nearly
                everything; tests/test_overload.py).

        Returns:
            The number of elements consumed.
        """
        if self._ctrl:
            c = self._consume_control(handler, exit_cond, timed)
            if exit_cond is not None and not exit_cond():
                return c
            return c + self._consume_data(handler, exit_cond, timed, expired)
        return self._consume_data(handler, exit_cond, timed, expired)

    def _consume_control(self, handler: Callable[..., Any],
                         exit_cond: Callable[[], bool] | None, timed: bool) -> int:
        ctrl = self._ctrl
        limit = len(ctrl)
        n = 0
        while n < limit and (exit_cond is None or exit_cond()):
            el = ctrl.popleft()
            n += 1
            if timed:
                handler(el, time.monotonic())
            else:
                handler(el)
        return n

    def _consume_data(self, handler: Callable[..., Any],
                      exit_cond: Callable[[], bool] | None, timed: bool,
                      expired: tuple | None = None) -> int:
        q = self._q
        limit = len(q)
        if not limit and not self._overflow:  # (a spout's loop checks an empty queue often)
            return 0
        if timed:
            n = self._consume_timed(q, self._qa, limit, handler, exit_cond, expired)
        else:
            # an insert's bytes leave with its last element (before the handler runs it),
            # at the cost of one comparison per element
            pop, qa = q.popleft, self._qa
            base = qa.count_out
            stop = qa.taken_to(base) - base
            n = 0
            try:
                while n < limit and (exit_cond is None or exit_cond()):
                    el = pop()
                    n += 1
                    if n >= stop:
                        stop = qa.taken_to(base + n) - base
                    handler(el)
            finally:
                qa.taken_to(base + n)
        if n < limit:
            return n
        ov = self._overflow
        # consumed so far >= count_in (read first) - len(q) (read second): a lower bound
        # even while producers insert, so the barrier can only be passed late, never early
        if not ov or self._qa.count_in - len(q) < self._ov_barrier:
            return n
        olimit = len(ov)
        if timed:
            return n + self._consume_timed(ov, self._ova, olimit, handler, exit_cond)
        ova = self._ova
        m = 0
        while m < olimit and (exit_cond is None or exit_cond()):
            el = ov.popleft()
            m += 1
            ova.taken(1)
            handler(el)
        return n + m

    @staticmethod
    def _consume_timed(dq: deque, arrivals: _Arrivals, limit: int,
                       handler: Callable[[Any, float], Any],
                       exit_cond: Callable[[], bool] | None,
                       expired: tuple | None = None) -> int:
        pop, marks = dq.popleft, arrivals.marks
        max_age, take = expired if expired is not None else (None, None)
        clock = time.monotonic
        n = 0
        while n < limit and (exit_cond is None or exit_cond()):
            mark = marks[0]  # the record of the insert that holds the head element
            t = mark[2]
            if max_age is not None and clock() - t > max_age:
                k = min(mark[0] - arrivals.count_out, limit - n)  # the rest of the insert
                run = [pop() for _ in range(k)]
                arrivals.taken(k)
                n += k
                take(run, t)
                continue
            el = pop()
            arrivals.taken(1)
            n += 1
            handler(el, t)
        return n

    # -- state --------------------------------------------------------------------------
    def size(self) -> int:
        """Elements in the receive queue and the control receive queue."""
        ctrl = self._ctrl
        return len(self._q) + len(ctrl) if ctrl else len(self._q)

    def control_size(self) -> int:
        """Elements in the control receive queue (0 without one)."""
        return len(self._ctrl) if self._ctrl else 0

    @property
    def queued_bytes(self) -> int:
        """Wire bytes counted in the receive queue (an insert counts until its last element
        leaves)."""
        return self._qa.queued_bytes

    @property
    def overflow_bytes(self) -> int:
        """Wire bytes counted in the overflow queue."""
        return self._ova.queued_bytes

    def is_full(self) -> bool:
        """At the element bound, or at or past the byte bound."""
        return len(self._q) >= self.capacity or bool(
            self.capacity_bytes and self._qa.queued_bytes >= self.capacity_bytes)

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
        """A snapshot of the queue metrics (see :class:`JCQueueMetrics`).

        Counts and bytes are read together under the producers' lock, so no insert is seen
        half done. An empty deque reports 0 bytes: the consumer pops an element just before
        its insert's bytes leave, and what is in its hand is no longer queued.
        """
        with self._lock:
            rate = self._arrivals.rate()
            pop = len(self._q)
            qbytes = self._qa.queued_bytes if pop else 0
            ov = len(self._overflow)
            ovbytes = self._ova.queued_bytes if ov else 0
        return JCQueueMetrics(
            capacity=self.capacity, population=pop, pct_full=pop / self.capacity,
            overflow=ov, arrival_rate_secs=rate,
            sojourn_time_ms=pop / max(rate, 1e-5) * 1000.0,
            insert_failures=self._insert_failures, dropped_messages=self._dropped,
            capacity_bytes=self.capacity_bytes, population_bytes=qbytes,
            overflow_bytes=ovbytes, control=self.control_size())

    def __repr__(self) -> str:
        return (f"JCQueue({self.name!r}, {len(self._q)}/{self.capacity}, "
                f"overflow={len(self._overflow)})")


def make_receive_queue(conf: dict, name: str, bp_wait: WaitStrategy | None = None,
                       wakeup: threading.Event | None = None) -> JCQueue:
    """An executor's receive queue as ``conf`` (a validated topology config) sizes it:
    ``topology.executor.receive.buffer.size`` and ``.bytes``, the overflow's
    ``topology.executor.overflow.limit`` and ``.bytes``, and the control receive queue's
    ``topology.executor.control.receive.buffer.size``. Tuples pass one at a time (a
    receiver inserts whole frames; the producer batches are the senders')."""
    return JCQueue(name, conf["topology.executor.receive.buffer.size"], 1,
                   conf["topology.executor.overflow.limit"], bp_wait, wakeup,
                   conf["topology.executor.receive.buffer.bytes"] or 0,
                   conf["topology.executor.overflow.limit.bytes"] or 0,
                   conf["topology.executor.control.receive.buffer.size"])
