"""The sending side of one task: per-destination batches, ``pending_emits`` and the flush.

Storm 2.0's emit path (STORM-2306, Storm's ``ExecutorTransfer`` and ``JCQueue``): each
emit goes to its destination's :class:`BatchInserter`
(``topology.producer.batch.size``); a batch leaves when full, or at the flush that the
executor thread runs every ``topology.batch.flush.interval.millis`` while something waits
to leave (Storm's FlushTuple, with no timer thread). A send that fails (the destination is
full, or its worker names it backlogged) puts the emit into ``pending_emits`` (Storm's
``pendingEmits``), and so does every later emit until it drains, so nothing is reordered.
The flush only *tries*; nothing here blocks. One exception to "waits for its destination":
an emit of a load-aware shuffle that its task refuses goes to another task of that shuffle
(:meth:`Outbox.try_flush_pending`, see ``actors._routing.LoadAwareShuffle``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from actors._chain import ChainInserter, ChainLink
from backpressure import BatchInserter, FlowControlPolicy, WaitStrategy

Sink = Callable[[list], int]


class Outbox:
    """One task's outgoing batches and ``pending_emits`` (executor thread only).

    Args:
        task_id: the sending task (for errors).
        batch_size: ``topology.producer.batch.size``.
        bp_wait: the backpressure wait strategy (for blocking flushes).
        policy: the task's flow-control policy (the Nagle rule at flush).
        stopped: polled by blocking flushes; True interrupts them.
        dynamic: ``topology.producer.batch.dynamic``: each destination's batch is sized
            by AIMD up to ``batch_size`` (``backpressure.BatchInserter``).
    """

    def __init__(self, task_id: int, batch_size: int, bp_wait: WaitStrategy,
                 policy: FlowControlPolicy, stopped: Callable[[], bool],
                 dynamic: bool = False) -> None:
        self.task_id = task_id
        self.batch_size = batch_size
        self.dynamic = dynamic
        self._bp_wait = bp_wait
        self._policy = policy
        self._stopped = stopped
        #: destination task → its inserter (filled by :meth:`connect`, never replaced)
        self.inserters: dict[int, BatchInserter] = {}
        self._inserter_list: list[BatchInserter] = []
        # destination task → its sink's ``load()``, for sinks that have one (see load)
        self._sink_loads: dict[int, Callable[[], float]] = {}
        #: Storm's ``pendingEmits``: ``(dest task, message)`` waiting, in emit order
        self.pending_emits: deque = deque()
        self.max_pending_emits = 0
        #: sends a destination refused (full, or backlogged)
        self.send_failures = 0
        # (wire stream index, task) → (the load-aware shuffle routing that stream to that
        # task, the task's index in it): the emits that may go to another of its tasks
        self._shuffled: dict[tuple[int, int], tuple] = {}
        #: emits that went to another task of their load-aware shuffle than the one chosen
        self.rerouted = 0

    def connect(self, sinks: dict[int, Sink], destinations: Iterable[int]) -> None:
        """One inserter per destination task, over ``sinks[task]``: a ``ChainInserter``
        for a :class:`~actors._chain.ChainLink` (a task chained into this executor).

        Raises:
            ValueError: a destination task has no sink.
        """
        destinations = list(destinations)
        missing = [t for t in destinations if t not in sinks]
        if missing:
            raise ValueError(f"task {self.task_id}: no sink for destination tasks {missing}")
        for t in destinations:
            if isinstance(sinks[t], ChainLink):  # runs in this executor: no batch at all
                ins = ChainInserter(self.task_id, sinks[t])
            else:
                ins = BatchInserter(sinks[t], self.batch_size, self._bp_wait,
                                    self._count_failure, self._stopped, self.dynamic)
            self.inserters[t] = ins
            self._inserter_list.append(ins)
            sink_load = getattr(sinks[t], "load", None)
            if sink_load is not None:
                self._sink_loads[t] = sink_load

    def load(self, dest: int) -> float:
        """How loaded destination task ``dest`` looks from here: the load signal of the
        load-aware shuffle (``actors._routing.LoadAwareShuffle``, Storm's
        ``LoadAwareShuffleGrouping``), made of what this task already knows, with no
        message. 0.0 is idle; 1.0 and above, it takes nothing now (above: for that many
        seconds more, see ``ActorSink.load``).

        The sink's own ``load()`` if it has one (``ActorSink``: the credits in use, the
        flow-control policy's refusal, lost frames), else 0.0 (a local queue, a test's
        function sink); at least 1.0 while ``dest``'s batch is full (its sink refused it,
        so one more emit there would wait in ``pending_emits``). Non-blocking; executor
        thread.
        """
        sink_load = self._sink_loads.get(dest)
        load = sink_load() if sink_load is not None else 0.0
        ins = self.inserters[dest]
        return max(load, 1.0) if len(ins.batch) >= ins.batch_size else load

    def deliverer(self, task: int, stream: int) -> Callable[[list], bool]:
        """The emit of an untracked tuple on wire stream ``stream`` to ``task``, ``(values)
        -> bool`` (False: refused, nothing done; the caller then holds it in
        ``pending_emits``): the chained task's entry when ``task`` runs in this executor
        (``ChainInserter.entry``), else an append to its batch. Made at connect time, for
        a stream routed to ``task`` alone (``StreamRouter.deliver``)."""
        ins = self.inserters[task]
        if isinstance(ins, ChainInserter):
            return ins.entry(stream)
        publish = ins.try_publish

        def deliver(values) -> bool:
            return publish((stream, values))
        return deliver

    def reroute_within(self, stream: int, shuffle) -> None:
        """Emits on wire stream ``stream`` to a task of ``shuffle`` (an
        ``actors._routing.LoadAwareShuffle``) go to another of its tasks when theirs
        refuses them (:meth:`try_flush_pending`)."""
        for i, t in enumerate(shuffle.tasks):
            self._shuffled[(stream, t)] = (shuffle, i)

    def _count_failure(self) -> None:
        self.send_failures += 1

    def transfer(self, dest: int, msg: tuple) -> None:
        """Hand ``msg`` to ``dest``'s batch, or to ``pending_emits`` behind earlier waiting
        emits. Never blocks."""
        if self.pending_emits or not self.inserters[dest].try_publish(msg):
            self.pending_emits.append((dest, msg))

    def send_all(self, messages: Iterable[tuple[int, int, list]]) -> None:
        """Transfer system messages ``(dest, stream, values)`` (acking)."""
        for dest, stream, values in messages:
            self.transfer(dest, (stream, values))

    def try_flush_pending(self) -> bool:
        """Retry ``pending_emits`` in order, stopping at the first failure; True if empty.

        An emit its destination refuses that a load-aware shuffle chose (see
        :meth:`reroute_within`) is offered to the shuffle's other tasks, and goes to the
        first that takes it (:meth:`_reroute`): it does not wait for a task that takes
        nothing while another takes the stream. Every other emit waits for its own
        destination (a fields, global, all or direct grouping's, a system message)."""
        p = self.pending_emits
        if len(p) > self.max_pending_emits:
            self.max_pending_emits = len(p)
        inserters = self.inserters
        while p:
            dest, msg = p[0]
            if not inserters[dest].try_publish(msg) and not self._reroute(dest, msg):
                return False
            p.popleft()
        return True

    def _reroute(self, dest: int, msg: tuple) -> bool:
        """``msg``, refused by ``dest`` at the head of ``pending_emits``, to another task of
        the load-aware shuffle that chose ``dest`` (``LoadAwareShuffle.others``: those its
        weights choose, best first); True if one took it. If none did, the head now waits
        for the best of them when it weighs more than ``dest`` (the task the shuffle
        would choose now), and every retry offers it again. False at once for an emit of
        any other grouping."""
        entry = self._shuffled.get((msg[0], dest)) if self._shuffled else None
        if entry is None:
            return False
        shuffle, i = entry
        others = shuffle.others(i)
        inserters = self.inserters
        for t in others:
            if inserters[t].try_publish(msg):
                self.rerouted += 1
                return True
        if others and shuffle.weights[shuffle.tasks.index(others[0])] > shuffle.weights[i]:
            self.pending_emits[0] = (others[0], msg)
        return False

    def try_flush_batches(self, timer: bool = False) -> bool:
        """One non-blocking flush attempt of every partial batch; True if all are empty.

        Args:
            timer: the flush timer's path (``ExecutorCore._flush``): the policy may hold a
                partial batch back while an earlier batch to its destination is in flight
                (``FlowControlPolicy.hold_partial_batch``, against the batch's current
                size: with AIMD a batch at its size is full and never held), and a
                partial batch that leaves is AIMD's decrease
                (``BatchInserter.timer_flush``). The other callers (a barrier, the end of
                the stream, a capped spout) send what is there and adapt nothing.
        """
        ok = True
        hold = self._policy.hold_partial_batch
        for ins in self._inserter_list:
            if not ins.batch:
                continue
            if timer:
                if hold(len(ins.batch), ins.batch_size, ins.sink_busy()):
                    ok = False
                    continue
                ins.timer_flush()
            else:
                ins.try_flush()
            if ins.batch:
                ok = False
        return ok

    def batch_sizes(self) -> dict[int, int]:
        """Destination task → the size at which its batch leaves now (tuples; with AIMD
        between 1 and ``batch_size``; 1 for a chained task). Executor thread (a read from
        another thread is an estimate)."""
        return {t: ins.batch_size for t, ins in self.inserters.items()}

    def delivered(self) -> bool:
        """True when no sink has a batch in flight unacknowledged (``sink_busy``; reaps
        finished calls, so a loss found here is handled: an ``ActorSink`` starts a new
        epoch and, once its task is ending, sends its end marker again). Non-blocking;
        executor thread."""
        return not any(ins.sink_busy() for ins in self._inserter_list)

    def clear(self) -> None:
        """Drop ``pending_emits`` and every partial batch (a checkpoint rollback)."""
        self.pending_emits.clear()
        for ins in self._inserter_list:
            ins.batch.clear()

    def has_partial(self) -> bool:
        """True while some destination's batch holds tuples."""
        return any(ins.batch for ins in self._inserter_list)

    def batched(self) -> int:
        """Tuples waiting in partial batches."""
        return sum(len(i.batch) for i in self._inserter_list)

    def transferred(self) -> int:
        """Tuples handed to destination sinks so far (an estimate from other threads)."""
        return sum(i.transferred for i in self._inserter_list)
