"""The producer side of a queue: batch inserters, fixed or sized by AIMD.

Storm 2.0's ``JCQueue.BatchInserter`` (STORM-2306): one producer's elements are grouped
into batches of ``topology.producer.batch.size`` before they are inserted into a sink, so
the per-insert cost (here a frame: an actor call or a socket message) is paid once per
batch. A batch leaves when full, or at the executor's flush (Storm's FlushTuple).

Storm 3.0's ``topology.producer.batch.dynamic`` (apache/storm #8796, "Add AIMD based
dynamic producer batch sizing to JCQueue"): the batch size is no longer fixed but adapts
between 1 and the configured size by why batches leave, with no other measurement:

* a batch that reached the current size (it filled, or a full batch the sink refused: both
  say the producer emits faster than batches leave) grows the size by one, up to the
  configured size (additive increase);
* a partial batch that the flush timer sends (nothing filled it within a flush interval:
  light load) halves it, down to 1 (multiplicative decrease).

Under light load a tuple therefore leaves almost at once instead of waiting for the
flush; under heavy load the size climbs to the configured one and behaves as a fixed
batch. Two departures from Storm, both because our inserters also sit in front of sinks
that can refuse (a remote task's credits, a full socket): a partial batch that the timer
*tried* to send and the sink refused does not halve the size (a refusal is load, not its
absence), and only the timer's flush decreases it, not the flushes that send a partial
batch for another reason (a checkpoint barrier, the end of the stream, a spout at
``topology.max.spout.pending``): those say nothing about the rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backpressure._wait import ParkWaitStrategy, WaitStrategy


class QueueInterrupted(InterruptedError):
    """A blocking publish was interrupted (the queue or the inserter was interrupted)."""


class BatchInserter:
    """Groups one producer's elements into batches before inserting them into a sink.

    Storm's ``JCQueue.BatchInserter``, generalised: ``sink(items) -> n`` inserts a prefix of
    ``items`` (all, some or none) and returns how many it took. Not thread-safe: one
    inserter per producer thread.

    Args:
        sink: the insert function (``JCQueue.try_fill`` for a local queue).
        batch_size: elements per batch (>= 1); with ``dynamic``, the ceiling.
        bp_wait: strategy for the blocking ``publish``/``flush`` retries.
        on_insert_failure: called once per failed (zero-element) insert attempt.
        interrupted: polled between blocking retries; True raises ``QueueInterrupted``.
        dynamic: size batches by AIMD between 1 and ``batch_size`` (Storm 3.0's
            ``topology.producer.batch.dynamic``, see the module docstring); starts at 1.

    Raises:
        ValueError: ``batch_size`` < 1.
    """

    __slots__ = ("_sink", "batch_size", "max_batch_size", "dynamic", "_bp_wait",
                 "_on_failure", "_interrupted", "batch", "transferred")

    def __init__(self, sink: Callable[[list], int], batch_size: int,
                 bp_wait: WaitStrategy | None = None,
                 on_insert_failure: Callable[[], None] | None = None,
                 interrupted: Callable[[], bool] | None = None,
                 dynamic: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._sink = sink
        #: the ceiling (the configured size)
        self.max_batch_size = batch_size
        #: AIMD on (and a ceiling above 1, else there is nothing to adapt)
        self.dynamic = dynamic and batch_size > 1
        #: the size at which a batch leaves now (tuples)
        self.batch_size = 1 if self.dynamic else batch_size
        self._bp_wait = bp_wait or ParkWaitStrategy(100)
        self._on_failure = on_insert_failure
        self._interrupted = interrupted
        self.batch: list = []
        #: items the sink has taken so far (Storm's "transferred")
        self.transferred = 0

    def __len__(self) -> int:
        return len(self.batch)

    def _grow(self) -> None:
        """AIMD's additive increase: a full batch left, or was refused."""
        if self.batch_size < self.max_batch_size:
            self.batch_size += 1

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
            # Storm's DirectInserter: one offer, nothing held back on failure (with AIMD,
            # a batch of one that left or was refused: either grows the size)
            if self.dynamic:
                self._grow()
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
        if self.dynamic and len(self.batch) >= self.batch_size:
            self._grow()
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
        """One insert attempt; False only if nothing could be inserted (Storm's tryFlush).
        With AIMD, a full batch (sent or refused) grows the size; the size never changes
        otherwise here (see :meth:`timer_flush`)."""
        batch = self.batch
        if not batch:
            return True
        if self.dynamic and len(batch) >= self.batch_size:
            self._grow()
        n = self._sink(batch)
        if n:
            del batch[:n]
            self.transferred += n
            return True
        if self._on_failure is not None:
            self._on_failure()
        return False

    def timer_flush(self) -> bool:
        """The flush timer's attempt (Storm's FlushTuple): as :meth:`try_flush`, and with
        AIMD a partial batch that left (in whole or in part) halves the size, down to 1.
        Non-blocking; False only if nothing could be inserted."""
        batch = self.batch
        n = len(batch)
        partial = n < self.batch_size
        ok = self.try_flush()
        if self.dynamic and partial and len(batch) < n:
            self.batch_size = max(1, self.batch_size >> 1)
        return ok
