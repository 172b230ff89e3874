"""The receiving side of one task: frames in sender order, into the queue or the overflow.

Ray does not order calls to threaded actors, so each (sender, receiver) pair numbers its
frames (seq, within an epoch that a restart renews); :meth:`Inbound.accept_frame` puts them
back in order. Frames from this worker block while the receive queue is full (which holds
the sender's credit); frames from another worker never block: they go to the overflow while
the queue is full or the overflow is in use (Storm 2.0's ``transferLocalBatch`` and
``overflowQ``; STORM-2306's design doc "Backpressure model for Storm 2.0"), and the task's
flow-control policy decides when to report a backlog to the worker's transfer actor. A
shedding task (``topology.backpressure.overload: "shed"``,
:class:`backpressure.LoadShedder`) blocks no sender and uses no overflow for data: what
finds its queue full is shed on arrival. Frames count their wire bytes against the queue's
byte bound (``topology.executor.receive.buffer.bytes``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from actors._errors import LogThrottle
from actors._streams import ACKING_STREAMS, BARRIER_STREAM, DRAINED_STREAM, EOS_STREAM
from backpressure import (
    SITE_ARRIVAL,
    FlowControlPolicy,
    JCQueue,
    LoadShedder,
    QueueInterrupted,
    Report,
)

logger = logging.getLogger("storm_on_ray.executor")

#: markers at the end of a sender's stream: never dropped, nor refused
_MARKERS = (EOS_STREAM, DRAINED_STREAM, BARRIER_STREAM)
#: a sender whose acknowledgements are not held (see Inbound.hold)
_NOT_HELD = object()
#: what a rollback keeps of the frames it drops: an end of stream, sent only once the
#: stream's final checkpoint committed (an upstream that ended stays ended); an end of data
#: (DRAINED) is not kept: the rewound upstream sends it again (actors/state/_task.py)
_END_MARKERS = (EOS_STREAM,)


class _Sender:
    """Ordering state of one upstream task's frames."""

    __slots__ = ("next_seq", "early", "epoch")

    def __init__(self, next_seq: int, epoch: int) -> None:
        self.next_seq = next_seq
        #: frames that arrived before ``next_seq``: seq → (items, wire bytes)
        self.early: dict[int, tuple[list, int]] = {}
        self.epoch = epoch


class Inbound:
    """One task's receiving side (any thread: the receive threads and the check timer).

    Args:
        task_id, component_id: the task (for errors and logs).
        queue: its receive queue.
        upstream: every task it consumes from (itself included when it subscribes to
            itself).
        back_sources: upstream tasks on a back edge (one closing a cycle): their arrivals
            are capped at ``back_edge_cap`` even when the overflow is not.
        back_edge_cap: that cap (tuples in the overflow).
        acking: tuples dropped at the cap have trees to fail.
        policy: the task's flow-control policy (admission, reports).
        log_throttle: limits the drop warnings.
        ended: True once the task has ended (late frames are then counted and dropped).
        stopped: True once the task is killed (a blocked insert then raises).
        shedder: the task sheds load (``"shed"``) instead of blocking; None: it blocks.
        stream_name: stream index → ``"component:stream"`` (for the shed counts).
    """

    def __init__(self, task_id: int, component_id: str, queue: JCQueue,
                 upstream: Iterable[int], back_sources: Iterable[int], back_edge_cap: int,
                 acking: bool, policy: FlowControlPolicy, log_throttle: LogThrottle,
                 ended: Callable[[], bool], stopped: Callable[[], bool],
                 shedder: LoadShedder | None = None,
                 stream_name: Callable[[int], str] = str) -> None:
        self.task_id = task_id
        self.component_id = component_id
        self.queue = queue
        self.upstream = frozenset(upstream)
        self.back_sources = frozenset(back_sources)
        self.back_edge_cap = back_edge_cap
        self._acking = acking
        self.policy = policy
        self._log_throttle = log_throttle
        self._ended = ended
        self._stopped = stopped
        self.shedder = shedder
        self._stream_name = stream_name
        self._senders: dict[int, _Sender] = {}
        self._sender_locks: dict[int, threading.Lock] = {}  # see accept_frame
        self._lock = threading.Lock()  # the policy's receiving state, the dropped roots
        self._report_seq = time.time_ns()  # above any report of an earlier incarnation
        #: this instance replaces one that died (Ray re-ran ``__init__``)
        self.reconstructed = False
        self.duplicate_frames = 0
        self.early_frames = 0
        self.stale_frames = 0
        self.epoch_resets = 0
        self.lost_frames = 0
        #: tuples and acking messages that arrived after this task ended (dropped)
        self.late_items = 0
        self.bp_reports = 0
        #: tuples from other workers the policy did not admit (dropped)
        self.refused = 0
        self._dropped_roots: list = []  # trees to fail (tuples dropped at a back edge's cap)
        #: checkpoints: frames of an epoch below this are dropped (a rollback's, see
        #: begin_rollback); senders whose acknowledgements are held (alignment): src →
        #: the acknowledgement they last got, or None until their next frame
        self.min_epoch = 0
        #: held by every insert of a frame (never while waiting) and by a rollback's
        #: clearing of the queue, so no frame of an older epoch enters after it
        self.fill_lock = threading.Lock()
        self._held: dict[int, int | None] = {}
        #: end markers of frames dropped by a rollback (kept: an ended upstream stays so)
        self._kept_markers: list = []
        #: frames dropped because a rollback made their epoch stale
        self.rolled_back_frames = 0

    def _interrupted(self) -> bool:
        return self._stopped() or self._ended()

    def accept_frame(self, src_task: int, seq: int, items: list, remote: bool,
                     epoch: int = 0, nbytes: int = 0) -> tuple[int | None, tuple | None]:
        """Take the ``seq``-th decoded batch of ``epoch`` from ``src_task``, in order.

        A frame that arrives early waits (at most the sender's window,
        ``topology.transfer.max.inflight.batches``) until the frames before it are in; a
        duplicate is counted and dropped. ``remote`` frames (from another worker) never
        block; local ones block while the receive queue is full.

        Restarts: a sender that may have lost frames starts a larger ``epoch`` from seq 0;
        frames held back for the older epoch are dropped (with acking, their trees time out
        and replay) and later frames of an older epoch are stale. A restarted receiver
        (``reconstructed``) takes the first frame of an unknown sender as its start.
        ``nbytes`` (the frame's length) counts against the queue's byte bound; a shedding
        task takes local frames as remote ones (it never blocks).

        Returns:
            ``(ack, report)``: the highest seq of the current epoch from ``src_task`` now
            fully inserted (the sender's cumulative acknowledgement; None for a stale
            frame), and a backpressure report for the transfer actor or None.

        Raises:
            ValueError: ``src_task`` is not an upstream task of this task.
            QueueInterrupted: the task was stopped while a local insert waited.
        """
        if epoch < self.min_epoch:  # sent before a rollback: dropped, markers kept
            self.rolled_back_frames += 1
            kept = [(src_task, *it) for it in items if it[0] in _END_MARKERS]
            if kept:
                with self._lock:
                    self._kept_markers.extend(kept)
            return None, None
        # one sender's frames may come on two threads (an actor call and its socket, or
        # an old incarnation's socket and the new one's calls): one at a time, so its
        # order state is never advanced by a frame of another epoch
        lock = self._sender_locks.get(src_task)
        if lock is None:
            lock = self._sender_locks.setdefault(src_task, threading.Lock())
        with lock:
            return self._accept_frame(src_task, seq, items, remote, epoch, nbytes)

    def _accept_frame(self, src_task: int, seq: int, items: list, remote: bool, epoch: int,
                      nbytes: int) -> tuple[int | None, tuple | None]:
        st = self._senders.get(src_task)
        if st is None:
            if src_task not in self.upstream and src_task != self.task_id:
                raise ValueError(f"task {self.task_id} does not consume from task {src_task}")
            st = self._senders[src_task] = _Sender(seq if self.reconstructed else 0, epoch)
        if epoch != st.epoch:
            if epoch < st.epoch:
                self.stale_frames += 1
                return None, None
            self.epoch_resets += 1
            self.lost_frames += len(st.early)
            st.next_seq, st.early, st.epoch = 0, {}, epoch
            if src_task in self._held:  # (its held acknowledgement was of the old epoch)
                with self._lock:
                    if src_task in self._held:
                        self._held[src_task] = None
        expected, early = st.next_seq, st.early
        before = expected - 1
        if seq < expected or seq in early:
            self.duplicate_frames += 1
            return self._ack(src_task, before), None
        if seq > expected:
            early[seq] = (items, nbytes)
            self.early_frames += 1
            return self._ack(src_task, before), None
        report = None
        control = self.queue.has_control
        while items is not None:
            if control and items and items[0][0] in ACKING_STREAMS and not self._ended():
                items, nbytes = self._control_first(src_task, items, nbytes, epoch)
            if not items:
                pass  # (all of it went to the control receive queue)
            elif self._ended():
                # this task has ended: nobody takes from its queue any more, so a wait
                # would hold the sender for ever (a bolt's late acks of trees its spout
                # already timed out, an end marker sent again). Acknowledged and counted.
                self.late_items += len(items)
            elif remote or self.shedder is not None:
                with self.fill_lock:
                    if epoch < self.min_epoch:  # a rollback began meanwhile
                        self.rolled_back_frames += 1
                        return None, None
                    r = self.receive_remote_items(src_task, items, nbytes)
                if report is None:
                    report = r
            else:
                try:
                    if self.back_sources and not self.queue.is_empty_overflow():
                        self._wait_for_back_edges(epoch)
                    self.queue.publish_all(
                        [(src_task, *it) for it in items],
                        lambda: self._interrupted() or epoch < self.min_epoch, nbytes,
                        self.fill_lock)
                except QueueInterrupted:
                    if self._stopped():
                        raise
                    if epoch < self.min_epoch:  # a rollback began while we waited
                        self.rolled_back_frames += 1
                        return None, None
                    self.late_items += len(items)  # it ended while we waited
            expected += 1
            st.next_seq = expected
            items, nbytes = early.pop(expected, (None, 0))
        return self._ack(src_task, expected - 1, before), report

    def _control_first(self, src_task: int, items: list, nbytes: int, epoch: int
                       ) -> tuple[list, int]:
        """With a control receive queue: the acking messages that open a frame go there
        (up to its bound), ahead of the data, and the rest of the frame (with its share of
        ``nbytes``) is returned for the receive queue, in order. Only the leading ones: a
        frame's later elements keep their order against its markers (an end of stream,
        DRAINED and barriers stay behind the data they follow; they never go there).
        Frames to spouts and ackers hold acking messages only; frames to a bolt, data."""
        k = 0
        for it in items:
            if it[0] not in ACKING_STREAMS:
                break
            k += 1
        with self.fill_lock:
            if epoch < self.min_epoch:  # a rollback began: the caller drops the frame
                return items, nbytes
            n = self.queue.fill_control([(src_task, *it) for it in items[:k]])
        if not n:
            return items, nbytes
        rest = items[n:]
        return rest, (nbytes * len(rest) // len(items) if nbytes else 0)

    def _wait_for_back_edges(self, epoch: int) -> None:
        """A task on a cycle takes what came back round the cycle before new input: a
        frame from this worker waits while the overflow (where a back edge's arrivals go
        when the queue is full) is in use. Otherwise fresh input keeps the queue full,
        the back edge's arrivals pass their cap, are dropped and replayed as fresh input
        again, and the cycle never drains. No deadlock: the back edge never waits, and
        this task drains its overflow without any sender's help. Returns when it is
        empty, or the task stops, ends or rolls back (``publish_all`` then decides)."""
        q = self.queue
        idle = 0
        while not q.is_empty_overflow() and not (
                self._interrupted() or epoch < self.min_epoch):
            idle = q._bp_wait.idle(idle)

    def _ack(self, src_task: int, ack: int, before: int | None = None) -> int:
        """The acknowledgement to return to ``src_task``: ``ack``, or while its sender is
        held (alignment) the one it had when the hold began (``before`` this frame), so
        its credit runs out."""
        if not self._held:
            return ack
        with self._lock:
            held = self._held.get(src_task, _NOT_HELD)
            if held is None:
                self._held[src_task] = held = ack if before is None else before
        return ack if held is _NOT_HELD else held

    # -- checkpoints ---------------------------------------------------------------------------
    def hold(self, src_task: int) -> None:
        """Alignment: acknowledge no more frames of ``src_task`` (its sender runs out of
        credit) until :meth:`release`. Executor thread."""
        with self._lock:
            self._held.setdefault(src_task, None)

    def release(self) -> list[tuple[int, int, int]]:
        """End every hold: ``(src_task, epoch, ack)`` for each sender whose
        acknowledgement was held (the credit to send it by another call)."""
        with self._lock:
            held, self._held = self._held, {}
            senders = [(src, self._senders.get(src)) for src in held]
        return [(src, st.epoch, st.next_seq - 1) for src, st in senders if st is not None]

    def begin_rollback(self, gen: int) -> None:
        """A rollback to generation ``gen`` starts: from now on frames of an earlier
        epoch are dropped (their end markers kept, see :meth:`take_kept_markers`), the
        senders' order is forgotten (after the rollback they start epochs of at least
        ``gen`` from seq 0), holds end. Any thread."""
        with self._lock:
            self.min_epoch = max(self.min_epoch, gen)
            # (a sender already in an epoch of this rollback keeps its order: the call is
            # made again by the executor thread, after frames of the new epoch may be in)
            self._senders = {s: st for s, st in self._senders.items() if st.epoch >= gen}
            self._held = {}
            self.reconstructed = False
        self.queue._wake()

    def take_kept_markers(self) -> list:
        """End markers of frames that a rollback dropped, since the last call."""
        with self._lock:
            kept, self._kept_markers = self._kept_markers, []
        return kept

    def receive_remote_items(self, src_task: int, items: list, nbytes: int = 0
                             ) -> tuple | None:
        """Insert a batch that came from another worker (of ``nbytes`` wire bytes); never
        blocks.

        Into the receive queue while the overflow is empty and there is room, else into
        the overflow (or dropped and counted beyond ``topology.executor.overflow.limit``,
        logged at most once per ``topology.error.throttle.interval.secs``). A shedding
        task sheds the data tuples that do not fit instead (see :meth:`_shed_insert`).

        Returns:
            A report for the transfer actor, ``(task, backlogged, since, seq, reminder)``,
            when the policy says so (see ``FlowControlPolicy.on_remote_arrival``), else None.
        """
        q = self.queue
        elements = [(src_task, *it) for it in items]
        if self.shedder is not None:
            self._shed_insert(elements, nbytes)
            return None
        eos = []  # the end of stream, and the drained marker before it, never dropped
        while elements and elements[-1][1] in _MARKERS:
            eos.insert(0, elements.pop())
        dropped = 0
        if elements and not self.policy.admit(src_task, len(elements)):
            dropped = len(elements)
            self.refused += dropped
            elements = []
        # a back edge's arrivals are capped even when the overflow is not: a cycle can
        # generate tuples without bound; beyond the cap they are dropped and counted, and
        # with acking their trees fail, so the spout replays them
        limit = self.back_edge_cap if src_task in self.back_sources else None
        lost: list | None = [] if limit is not None and self._acking else None
        if elements:
            _, d = q.publish_remote(elements, limit=limit, dropped_out=lost, nbytes=nbytes)
            dropped += d
        if eos:
            q.publish_remote(eos, limit=0)
        if lost:
            roots = {r for el in lost if len(el) > 3 for r in el[3][::2]}
            with self._lock:
                self._dropped_roots.extend(roots)
        if dropped and self._log_throttle.allow("dropped"):
            logger.warning("%s:%d: overflow at its limit (%d): dropped %d tuples (%d so "
                           "far)", self.component_id, self.task_id, q.overflow_limit,
                           dropped, q.dropped_messages)
        in_use = bool(dropped) or not q.is_empty_overflow()
        if not in_use:
            return None
        with self._lock:
            r = self.policy.on_remote_arrival(q.overflowed_total, in_use, time.time())
            if r is Report.NONE:
                return None
            return self._report(True, r is Report.REMINDER)

    def _shed_insert(self, elements: list, nbytes: int) -> None:
        """A shedding task's insert (any sender; never blocks, never reports): what fits
        the receive queue enters it; of the rest, data tuples are shed (site
        ``"arrival"``) and system elements (end markers) go to the overflow, which then
        holds order for them."""
        q = self.queue
        n = q.try_fill(elements, nbytes) if q.is_empty_overflow() else 0
        if n == len(elements):
            return
        ctrl = []
        shed: dict[int, int] = {}
        for el in elements[n:] if n else elements:
            s = el[1]
            if s >= 0:
                shed[s] = shed.get(s, 0) + 1
            else:
                ctrl.append(el)
        with self._lock:
            for s, k in shed.items():
                self.shedder.count(self._stream_name(s), SITE_ARRIVAL, k)
        if ctrl:
            q.publish_remote(ctrl, limit=0)

    def take_dropped_roots(self) -> list:
        """Roots of the tuples dropped at a back edge's cap since the last call (their
        trees must fail)."""
        if not self._dropped_roots:
            return []
        with self._lock:
            roots, self._dropped_roots = self._dropped_roots, []
        return roots

    @property
    def has_dropped_roots(self) -> bool:
        return bool(self._dropped_roots)

    def check_backpressure(self) -> tuple | None:
        """The backpressure-check timer's step: a report for the transfer actor when the
        policy clears the backlog, else None."""
        with self._lock:
            if self.policy.on_check():
                return self._report(False, False)
        return None

    def current_report(self) -> tuple:
        """The task's current state as a (non-reminder) report for the transfer actor."""
        with self._lock:
            return self._report(self.policy.backlogged, False)

    def _report(self, backlogged: bool, reminder: bool) -> tuple:
        self._report_seq += 1
        self.bp_reports += 1
        if not reminder:
            logger.info("%s:%d: %s", self.component_id, self.task_id,
                        "backlogged (overflow in use)" if backlogged else "backlog cleared")
        return (self.task_id, backlogged, self.policy.backlogged_since, self._report_seq,
                reminder)
