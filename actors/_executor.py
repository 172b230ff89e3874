"""The executor: one task's receive queue, emit path and Storm 2.0 loop.

:class:`ExecutorCore` holds everything an executor decides and does, with no Ray in it:
its sinks (how a batch reaches a destination task) are injected by :meth:`connect`, so the
loop runs in-process in tests as well as inside :class:`actors.ExecutorActor`.

Data path (seeds/storm2-messaging-redesign.txt, notes/storm2-internals.md §2-4):

* ``emit`` routes by grouping, then ``transfer`` appends ``(stream_index, values)`` to the
  destination's :class:`BatchInserter` (``topology.producer.batch.size``), one level of
  batching only. A batch leaves when full, or at the flush that the executor thread itself
  runs every ``topology.batch.flush.interval.millis`` while something waits to leave (Storm's
  FlushTuple, without the timer thread: see :meth:`ExecutorCore._flush_due`). The flush path
  only *tries*; it never blocks.
* A send that fails (destination backlogged) goes to ``pending_emits``, and so does every
  later emit until it drains (no reordering). A spout does not call ``next_tuple`` while
  ``pending_emits`` is non-empty, but keeps consuming its own queue; a bolt stops consuming.
  Retries idle under ``topology.backpressure.wait.strategy``.
* End of stream: a spout that raises ``StopIteration`` sends an end-of-stream marker (stream
  index -1) after its data to every downstream task; a bolt that has seen the marker from all
  its upstream tasks and drained its queue calls ``finish()`` and does the same.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from actors._errors import ErrorReporter, LogThrottle
from actors._routing import build_routers, stream_table
from backpressure import (
    BackPressureStatus,
    BackPressureTracker,
    BatchInserter,
    JCQueue,
    QueueInterrupted,
    RemoteBackPressure,
    make_wait_strategy,
)
from topology import (
    ACKER_ID,
    DEFAULT_STREAM,
    BatchBolt,
    EmitError,
    OutputCollector,
    SpoutOutputCollector,
    StormTopology,
    TopologyContext,
    Tuple,
    effective_batch_size,
    make_config,
)

logger = logging.getLogger("storm_on_ray.executor")

#: The FlushTuple element: the executor thread flushes on its own schedule (see
#: ExecutorCore._flush_due); one put into the queue flushes when taken. Never on the wire.
FLUSH = ("__flush__",)
#: Wire stream index of the end-of-stream marker.
EOS_STREAM = -1
_EOS_MSG = (EOS_STREAM, None)
# Acking system streams (Storm's __ack_init/__ack_ack/__ack_fail/__ack_reset_timeout to the
# acker, and the acker's direct streams back to the spout). One message carries many roots:
# ACK_INIT and ACK_ACK values are [root, xor, root, xor, ...] (ACK_INIT's spout task is the
# sender), the others [root, root, ...]; see ExecutorCore._ack_list.
ACK_INIT, ACK_ACK, ACK_FAIL, ACK_RESET = -2, -3, -4, -5  # to the acker
ACKER_ACKED, ACKER_FAILED, ACKER_RESET = -6, -7, -8  # acker to spout
#: Acking values held per executor before they are sent (also sent at each FlushTuple and
#: whenever the executor idles).
ACK_BATCH_VALUES = 1024
#: Bit 62 of a root id: the tree's spout sent no ACK_INIT (it emitted to one task, with edge
#: id 0); bits 47-61 give the spout's index among the topology's spout tasks. See
#: ExecutorCore.implicit_init_spout.
IMPLICIT_INIT = 1 << 62

Sink = Callable[[list], int]


class _SpoutCollector(SpoutOutputCollector):
    def __init__(self, core: ExecutorCore) -> None:
        self._core = core
        # ``emit`` is the core's bound method itself (an instance attribute shadows the
        # base class's method): no extra call layer per emit
        self.emit = core.spout_output

    def emit_direct(self, task: int, values, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> None:
        if msg_id is None:
            self._core.emit_direct(task, values, stream)
        else:
            self._core.spout_emit(values, stream, msg_id, task)

    def report_error(self, exc: BaseException) -> None:
        self._core.errors.report(exc, "report_error")


class _BoltCollector(OutputCollector):
    def __init__(self, core: ExecutorCore) -> None:
        self._core = core
        self.emit = core.bolt_output  # as in _SpoutCollector

    def emit_direct(self, task: int, values, stream: str = DEFAULT_STREAM,
                    anchors=None) -> None:
        self._core.bolt_emit(values, stream, anchors, task)

    def ack(self, tup: Tuple) -> None:
        self._core.ack_tuple(tup)

    def fail(self, tup: Tuple) -> None:
        self._core.fail_tuple(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        self._core.reset_tuple_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._core.errors.report(exc, "report_error")


class ExecutorCore:
    """One task: its component instance, ``JCQueue``, routers, inserters and loop.

    Threads: the executor thread runs :meth:`run` (the only caller of user code); receivers
    call :meth:`accept_frame` from any thread; a timer thread inserts FlushTuples.

    Args:
        topology_name: for logs and the context.
        topology: the frozen topology (every task gets the same one).
        conf: the submitted config (validated again here, merged with component config).
        task_id: this task's id.
        task_worker: task id → worker index (for ``local_or_shuffle`` and stats).
    """

    def __init__(self, topology_name: str, topology: StormTopology, conf: dict,
                 task_id: int, task_worker: dict[int, int]) -> None:
        self.topology_name = topology_name
        self.task_id = task_id
        self.component_id = topology.task_component(task_id)
        spec = topology.components[self.component_id]
        self.spec = spec
        self.is_spout = spec.is_spout
        self.conf = make_config({**conf, **dict(spec.conf)})
        self.obj = spec.obj
        c = self.conf
        self.batch_size = effective_batch_size(c)
        self.bp_wait = make_wait_strategy(c, "backpressure")
        self.idle_wait = make_wait_strategy(c, "spout" if self.is_spout else "bolt")
        #: set when input reaches the queue, a send completes, a remote backlog clears or
        #: the executor is stopped: the executor thread's waits end on it (see _idle)
        self.wakeup = threading.Event()
        self.queue = JCQueue(f"{self.component_id}:{task_id}",
                             c["topology.executor.receive.buffer.size"], 1,
                             c["topology.executor.overflow.limit"], self.bp_wait, self.wakeup)
        self.streams = stream_table(topology)
        self.routers = build_routers(topology, self.component_id, task_id, task_worker)
        # Every task any grouping routes to belongs to a subscribing component, and the
        # end-of-stream marker goes to all of them: one list serves both.
        self.downstream = topology.downstream_tasks(self.component_id)
        self.destinations = self.downstream
        self.upstream_all = frozenset(topology.upstream_tasks(self.component_id))
        # Cycles: sends on a back edge never block (the receiver takes them into its
        # overflow, up to a cap), so no cycle of full queues can deadlock; and the end of
        # stream does not wait for back-edge sources (it could never arrive).
        back = topology.back_edges
        tasks_of = topology.component_tasks
        self.back_dests = frozenset(t for (a, b) in back if a == self.component_id
                                    for t in tasks_of[b])
        self.back_sources = frozenset(t for (a, b) in back if b == self.component_id
                                      for t in tasks_of[a])
        self.upstream_open = set(self.upstream_all - self.back_sources)
        self.back_edge_cap = (c["topology.executor.overflow.limit"]
                              or c["topology.executor.receive.buffer.size"])
        self.task_worker = dict(task_worker)
        self.worker = task_worker.get(task_id, 0)
        #: upstream tasks in other workers: their tuples arrive through transfer actors
        self.remote_upstream = frozenset(t for t in self.upstream_all
                                         if task_worker.get(t, 0) != self.worker)
        # receiving side of the backpressure between workers (a one-task tracker: the
        # queue lives in this process); reports go to the worker's transfer actor
        self.bp_tracker = BackPressureTracker(self.worker, {task_id: self.queue})
        self._bp_lock = threading.Lock()
        self._bp_seq = time.time_ns()  # above any report of an earlier incarnation
        self._resend_size = c["topology.backpressure.resend.size"]
        self.bp_reports = 0
        self.log_throttle = LogThrottle(c["topology.error.throttle.interval.secs"])
        # sending side: which remote tasks are backlogged, and the halt-lags seen
        self.remote_bp = RemoteBackPressure()
        self.halt_lags_s: deque = deque(maxlen=1000)
        self.remote_refusals = 0
        # ordering of incoming frames: src task -> [next expected seq, {seq: early items},
        # the sender's epoch]
        self._inbound: dict[int, list] = {}
        #: this instance replaces one that died (Ray re-ran ``__init__``)
        self.reconstructed = False
        self.duplicate_frames = 0
        self.early_frames = 0
        self.stale_frames = 0
        self.epoch_resets = 0
        self.lost_frames = 0
        #: tuples and acking messages that arrived after this task ended (dropped)
        self.late_items = 0
        tasks = topology.component_tasks
        self.context = TopologyContext(
            topology_name, self.component_id, task_id,
            list(tasks[self.component_id]).index(task_id),
            {k: list(v) for k, v in tasks.items()}, task_worker.get(task_id, 0),
            {(g.source, g.stream): topology.components[g.source].streams[g.stream]
             for g in spec.inputs})
        # acking (Storm's algorithm, notes/storm2-internals.md §5)
        self.ackers = tuple(topology.acker_tasks)
        self.is_acker = self.component_id == ACKER_ID
        #: this spout task tracks its own trees (``topology.acker.in.spouts``): its root
        #: ids satisfy ``root % len(ackers) == _own_index``, so the bolts' acks, routed by
        #: root id as to any acker, come straight back here
        self.own_trees = bool(self.is_spout and topology.ackers_in_spouts)
        self._own_index = self.ackers.index(task_id) if self.own_trees else 0
        # root = getrandbits(_root_bits) * _root_mod + _own_index (or _root_mod if 0): with
        # acker executors a plain random 62-bit id (mod 1, index 0; bit 62 is IMPLICIT_INIT)
        self._root_mod = len(self.ackers) if self.own_trees else 1
        self._root_bits = 63 - self._root_mod.bit_length() if self.own_trees else 62
        #: every spout task, sorted: an implicit-init root names its spout by index here
        self._spout_tasks = topology.spout_tasks
        #: with acker executors, a spout emit to one task sends no ACK_INIT: its root is
        #: IMPLICIT_INIT | spout index << 47 | 47 random bits and its edge id 0 (see
        #: implicit_init_spout); None when this task is not such a spout
        self._implicit_root = (
            IMPLICIT_INIT | self._spout_tasks.index(task_id) << 47
            if self.is_spout and self.ackers and not self.own_trees
            and len(self._spout_tasks) <= 1 << 15 else None)
        #: a bolt's roots of the one-ack trees it completed itself and has not sent yet
        #: (see ack_tuple), by ``root >> 47``: the implicit-init prefix naming the spout;
        #: empty when the spouts are the ackers, which need no such shortcut
        self._completed_out: dict[int, list] = (
            {(IMPLICIT_INIT | i << 47) >> 47: [] for i in range(len(self._spout_tasks))}
            if not self.is_spout and not self.is_acker and self.ackers
            and not topology.ackers_in_spouts and len(self._spout_tasks) <= 1 << 15 else {})
        self.auto_ack = bool(getattr(self.obj, "auto_ack", True))
        self._rand = random.Random(int.from_bytes(os.urandom(8), "little"))
        self.timeout_s = float(c["topology.message.timeout.secs"])
        self.max_spout_pending = c["topology.max.spout.pending"]
        #: spout: root id -> [msg_id, emit or reset time (monotonic s)], oldest first; with
        #: ``own_trees``, a third item: the tree's XOR value (the acker's, kept here)
        self.pending_tuples: dict[int, list] = {}
        self._acks_due: list = []  # msg ids to ack at once (no ackers)
        self._fails_since_exhausted = False
        self._next_timeout_check = 0.0
        #: acker: root id -> [xor value, spout task (-1 until init), start time, failed]
        self._tree: dict[int, list] = {}
        #: acking values not yet sent: (dest task, stream) -> values (see _ack_list)
        self._ack_out: dict[tuple[int, int], list] = {}
        self._ack_out_n = 0
        #: with one acker (the default for one worker), ACK_INIT and ACK_ACK values wait in
        #: these two lists instead (no lookup per tuple); None with several ackers
        self._one_acker = self.ackers[0] if len(self.ackers) == 1 else None
        self._init_out: list = []
        self._acks_out: list = []
        self._current: Tuple | None = None  # the input being executed (auto-anchoring)
        #: the last one-root anchored emit still in its batch: (parent tuple, the child's
        #: [root, edge] list, its inserter, its position in the inserter's stream); see
        #: ack_tuple
        self._fold: tuple | None = None
        #: acks carried by a child's edge instead of a message (ack piggybacking)
        self.folded_acks = 0
        #: one-ack trees this bolt completed, telling their spout without the acker
        self.completed_trees = 0
        # a BatchBolt's inputs gathered in this pass over the queue
        self._batch_in: list | None = [] if isinstance(self.obj, BatchBolt) else None
        self._batch_max = (getattr(self.obj, "max_batch_size", None) or self.batch_size)
        self._dropped_roots: list = []  # trees to fail (tuples dropped at a back edge's cap)
        self.timeouts = 0
        self.unknown_acks = 0
        self.complete_latencies_ms: deque = deque(maxlen=1000)
        self.errors = ErrorReporter(self.component_id, task_id,
                                    c["topology.error.throttle.interval.secs"],
                                    c["topology.max.error.report.per.interval"])
        self.pending: deque = deque()
        self.inserters: dict[int, BatchInserter] = {}
        self._inserter_list: list[BatchInserter] = []
        # counters
        self.emitted = 0
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.send_failures = 0
        self.bad_frames = 0
        self.backpressure_wait_s = 0.0
        self.max_pending_emits = 0
        # metrics (actors/_metrics.py): time idle for lack of input, backpressure time per
        # destination holding the head of pending_emits, sampled execute latencies
        self.idle_wait_s = 0.0
        self.held_by_s: dict[int, float] = {}
        rate = c["topology.stats.sample.rate"]
        self._sample_every = max(1, round(1.0 / rate)) if rate > 0 else 0
        self.latency_sum_s = 0.0
        self.latency_n = 0
        # state
        self.state = "created"
        #: a spout calls next_tuple only while active (Storm's activate / deactivate);
        #: the control thread sets the wish, the executor thread applies it
        self.active = True
        self._want_active = True
        self._stop = False
        interval = self.conf["topology.batch.flush.interval.millis"]
        #: seconds between flushes (0: none, as Storm without flush tuples)
        self._flush_interval_s = interval / 1000 if interval > 0 and self.batch_size > 1 else 0
        self._next_flush = float("inf")  # (set at start)
        self.done = threading.Event()
        self._started_at = 0.0
        self._finished_at = 0.0
        self._thread: threading.Thread | None = None

    # -- wiring --------------------------------------------------------------------------
    def local_sink(self) -> Sink:
        """A sink that delivers into this task's own queue (self-subscription)."""
        return self.make_queue_sink(self.queue, self.task_id)

    @staticmethod
    def make_queue_sink(queue: JCQueue, src_task: int) -> Sink:
        """A sink into ``queue`` in this process, tagging elements with ``src_task``."""
        def sink(items: list) -> int:
            return queue.try_fill([(src_task, *it) for it in items])
        return sink

    def connect(self, sinks: dict[int, Sink]) -> None:
        """Give the executor one sink per destination task; must cover ``destinations``.

        Raises:
            ValueError: a destination task has no sink.
        """
        missing = [t for t in self.destinations if t not in sinks]
        if missing:
            raise ValueError(f"task {self.task_id}: no sink for destination tasks {missing}")

        def count_failure() -> None:
            self.send_failures += 1

        for t in self.destinations:
            ins = BatchInserter(sinks[t], self.batch_size, self.bp_wait, count_failure,
                                lambda: self._stop)
            self.inserters[t] = ins
            self._inserter_list.append(ins)

    # -- emit path (executor thread only) ------------------------------------------------
    def _router(self, values, stream: str):
        """The stream's router, after checking the stream is declared and the arity matches.

        Raises:
            EmitError: naming the component, the stream and its declared fields.
        """
        r = self.routers.get(stream)
        if r is None:
            raise EmitError(f"component {self.component_id!r} emitted on undeclared stream "
                            f"{stream!r}; declared: {sorted(self.routers)}")
        if len(values) != r.arity:
            raise EmitError(
                f"component {self.component_id!r} emitted {len(values)} values on stream "
                f"{stream!r}, which declares {r.arity} fields "
                f"{self.spec.streams[stream].to_list()}")
        return r

    def emit(self, values, stream: str = DEFAULT_STREAM) -> tuple[int, ...]:
        """An untracked emit (no acking): route, then hand to each target's inserter, or
        to ``pending_emits`` behind earlier waiting emits. Never blocks.

        Raises:
            EmitError: an undeclared stream or a wrong number of values.
        """
        r = self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        targets = r.fixed or r.route(values)
        msg = (r.index, values)
        pending = self.pending
        if pending:
            for t in targets:
                pending.append((t, msg))
        else:
            inserters = self.inserters
            for t in targets:
                if pending or not inserters[t].try_publish(msg):
                    pending.append((t, msg))
        self.emitted += 1
        return targets

    def emit_direct(self, task: int, values, stream: str) -> None:
        r = self._router(values, stream)
        r.check_direct(task)
        self._transfer(task, (r.index, values))
        self.emitted += 1

    def _transfer(self, dest: int, msg: tuple) -> None:
        if self.pending or not self.inserters[dest].try_publish(msg):
            self.pending.append((dest, msg))

    def try_flush_pending(self) -> bool:
        """Retry ``pending_emits`` in order, stopping at the first failure; True if empty."""
        p = self.pending
        if len(p) > self.max_pending_emits:
            self.max_pending_emits = len(p)
        inserters = self.inserters
        while p:
            dest, msg = p[0]
            if not inserters[dest].try_publish(msg):
                return False
            p.popleft()
        return True

    def try_flush_batches(self, nagle: bool = False) -> bool:
        """One non-blocking flush attempt of every partial batch; True if all are empty.

        Args:
            nagle: the FlushTuple path. A partial batch is held back while an earlier batch
                to the same destination is still in flight (the sink's ``busy()`` is True):
                Nagle's rule. At low rates nothing is in flight and the batch leaves within
                the flush interval; under load batches keep filling instead of leaving as a
                stream of tiny actor calls (measured: 1 ms flushes of ~65-tuple batches ran
                the flights-shaped pipeline 2.5x slower than full batches).
        """
        ok = True
        for ins in self._inserter_list:
            if not ins.batch:
                continue
            if nagle and len(ins.batch) < ins.batch_size:  # (a full batch never waits)
                busy = getattr(ins._sink, "busy", None)
                if busy is not None and busy():
                    ok = False
                    continue
            ins.try_flush()
            if ins.batch:
                ok = False
        return ok

    # -- acking (executor thread only) ----------------------------------------------------
    def _edge_id(self) -> int:
        return self._rand.getrandbits(63) or 1

    def _to_acker(self, stream: int, root: int, value: int | None = None) -> None:
        """Hold ``root`` (and ``value``, for ACK_INIT / ACK_ACK) for the acker of ``root``
        (Storm's fields grouping on the root id)."""
        acks = self.ackers
        if self._one_acker is not None and (stream == ACK_INIT or stream == ACK_ACK):
            lst = self._init_out if stream == ACK_INIT else self._acks_out
        else:
            lst = self._ack_list(acks[root % len(acks)], stream)
        if value is None:
            lst.append(root)
            self._ack_out_n += 1
        else:
            lst += (root, value)
            self._ack_out_n += 2
        if self._ack_out_n >= ACK_BATCH_VALUES:
            self.flush_acks()

    def _ack_list(self, dest: int, stream: int) -> list:
        """The values held for ``dest`` on ``stream``: they leave as one message per
        (destination, stream) once ``ACK_BATCH_VALUES`` are held in all, at the next
        FlushTuple or when the executor idles, whichever is first. Measured with
        benchmarks/acking.py: one message per root made acking tuples cost as much as data
        tuples, three of them per tree. A caller that appends must add to ``_ack_out_n``
        and call :meth:`flush_acks` at ``ACK_BATCH_VALUES``."""
        key = (dest, stream)
        lst = self._ack_out.get(key)
        if lst is None:
            lst = self._ack_out[key] = []
        return lst

    def flush_acks(self) -> None:
        """Send the acking values held (executor thread)."""
        if not self._ack_out_n:
            return
        out, self._ack_out, self._ack_out_n = self._ack_out, {}, 0
        if self._init_out:
            out[(self._one_acker, ACK_INIT)], self._init_out = self._init_out, []
        if self._acks_out:
            out[(self._one_acker, ACK_ACK)], self._acks_out = self._acks_out, []
        for key, roots in self._completed_out.items():  # (a bolt: it answers nothing else)
            if roots:
                out[(self.implicit_init_spout(key << 47), ACKER_ACKED)] = roots
                self._completed_out[key] = []
        for (dest, stream), values in out.items():
            self._transfer(dest, (stream, values))

    def spout_output(self, values, stream: str = DEFAULT_STREAM,
                     msg_id: Any = None) -> tuple[int, ...]:
        """The spout collector's ``emit``: tracked by the ackers when ``msg_id`` is given.

        With ackers, :meth:`_targets` inlined (as in :meth:`emit`), then
        :meth:`_track_spout_emit`."""
        if msg_id is None:
            return self.emit(values, stream)
        if not self.ackers:
            return self.spout_emit(values, stream, msg_id, None)
        r = self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        self.emitted += 1
        return self._track_spout_emit(r.index, r.fixed or r.route(values), values, msg_id)

    def bolt_output(self, values, stream: str = DEFAULT_STREAM,
                    anchors=None) -> tuple[int, ...]:
        """The bolt collector's ``emit``: anchored (see :meth:`bolt_emit`) only when acking
        is on and there is an anchor (given, or the tracked input under ``auto_ack``)."""
        if self.ackers:
            if anchors is not None:
                return self.bolt_emit(values, stream, anchors, None)
            cur = self._current
            if self.auto_ack and cur is not None and cur.anchors:
                return self._emit_anchored(values, stream, cur, None)
        return self.emit(values, stream)

    def _targets(self, values, stream: str,
                 direct_task: int | None) -> tuple[Any, tuple[int, ...]]:
        """The stream's router and the emit's target tasks (``direct_task`` checked); counts
        the emit."""
        r = self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        if direct_task is None:
            targets = r.fixed or r.route(values)
        else:
            r.check_direct(direct_task)
            targets = (direct_task,)
        self.emitted += 1
        return r, targets

    def spout_emit(self, values, stream: str, msg_id: Any,
                   direct_task: int | None) -> tuple[int, ...]:
        """A spout emit with a ``msg_id``: tracked by the ackers (acked at once without).

        Each target gets its own random 63-bit edge id; the acker receives the XOR of all of
        them with the spout's task id (Storm's ``__ack_init``), except for an emit to one
        task, which sends none (see :meth:`implicit_init_spout`). The emit counts toward
        ``topology.max.spout.pending`` until acked, failed or timed out.
        """
        r, targets = self._targets(values, stream, direct_task)
        if not self.ackers:
            for t in targets:
                self._transfer(t, (r.index, values))
            self._acks_due.append(msg_id)
            return targets
        return self._track_spout_emit(r.index, targets, values, msg_id)

    def _track_spout_emit(self, index: int, targets: tuple[int, ...], values,
                          msg_id: Any) -> tuple[int, ...]:
        """Send a tracked spout tuple (stream ``index``) to ``targets`` and start its tree:
        the pending entry, and the acker's init unless the spout is its own acker or the
        init is implicit. ``_transfer`` is inlined (its checks, once per target)."""
        rand = self._rand.getrandbits
        pending, inserters = self.pending, self.inserters
        if len(targets) == 1 and self._implicit_root is not None:  # no ACK_INIT
            root = self._implicit_root | rand(47)
            t = targets[0]
            msg = (index, values, [root, 0])
            if pending or not inserters[t].try_publish(msg):
                pending.append((t, msg))
            self.pending_tuples[root] = [msg_id, time.monotonic()]
            return targets
        root = rand(self._root_bits) * self._root_mod + self._own_index or self._root_mod
        xor = 0
        for t in targets:
            e = rand(63) or 1
            xor ^= e
            msg = (index, values, [root, e])
            if pending or not inserters[t].try_publish(msg):
                pending.append((t, msg))
        if not self.own_trees:
            self.pending_tuples[root] = [msg_id, time.monotonic()]
            self._to_acker(ACK_INIT, root, xor)
        elif xor:  # no message: the tree's XOR starts here
            self.pending_tuples[root] = [msg_id, time.monotonic(), xor]
        else:  # emitted to no task: the tree is complete (acked after next_tuple)
            self._acks_due.append(msg_id)
        return targets

    def bolt_emit(self, values, stream: str, anchors,
                  direct_task: int | None) -> tuple[int, ...]:
        """A bolt emit, anchored to ``anchors`` (a tuple or a list of tuples); with
        ``auto_ack`` and no anchors given, anchored to the input being executed."""
        if anchors is None:
            cur = self._current
            tracked = [cur] if (self.auto_ack and cur is not None and cur.anchors) else ()
        else:
            if isinstance(anchors, Tuple):
                anchors = (anchors,)
            tracked = [a for a in anchors if a is not None and a.anchors]
        if len(tracked) == 1 and self.ackers:
            return self._emit_anchored(values, stream, tracked[0], direct_task)
        r, targets = self._targets(values, stream, direct_task)
        if not tracked or not self.ackers:
            msg = (r.index, values)
            for t in targets:
                self._transfer(t, msg)
            return targets
        for t in targets:
            child: dict[int, int] = {}
            for a in tracked:
                e = self._edge_id()
                a.ack_val ^= e
                for root in a.anchors[::2]:
                    child[root] = child.get(root, 0) ^ e
            self._transfer(t, (r.index, values, [x for kv in child.items() for x in kv]))
        return targets

    def _emit_anchored(self, values, stream: str, a: Tuple,
                       direct_task: int | None) -> tuple[int, ...]:
        """An emit anchored to one tracked tuple ``a`` (the usual case, e.g. ``auto_ack``):
        each target gets a new edge id, XORed into ``a.ack_val`` and paired with every root
        of ``a``."""
        if direct_task is None:  # _targets and _transfer inlined, as in spout_output
            r = self.routers.get(stream)
            if r is None or len(values) != r.arity:
                r = self._router(values, stream)  # raises, naming the stream
            targets = r.fixed or r.route(values)
            self.emitted += 1
        else:
            r, targets = self._targets(values, stream, direct_task)
        roots = a.anchors
        rand = self._rand.getrandbits
        pending, inserters, index = self.pending, self.inserters, r.index
        if len(roots) == 2:  # one root: the usual case, and the one acks can ride on
            last = len(targets) - 1
            for i, t in enumerate(targets):
                e = rand(63) or 1
                a.ack_val ^= e
                edge = [roots[0], e]
                msg = (index, values, edge)
                ins = inserters[t]
                if i < last:
                    if pending or not ins.try_publish(msg):
                        pending.append((t, msg))
                # try_append: a batch the last child fills leaves after ack_tuple(a) has
                # folded a's ack into that child (see there), not before. Measured on
                # benchmarks/acking.py's double bolt: flushing at once sent one ack frame
                # to the acker per data batch (0.5 of its 5.5 frames per 1000 tuples)
                elif pending or not ins.try_append(msg):
                    pending.append((t, msg))
                else:
                    self._fold = (a, edge, ins, ins.transferred + len(ins.batch) - 1)
            return targets
        for t in targets:
            e = rand(63) or 1
            a.ack_val ^= e
            msg = (index, values, [x for root in roots[::2] for x in (root, e)])
            if pending or not inserters[t].try_publish(msg):
                pending.append((t, msg))
        return targets

    def ack_tuple(self, tup: Tuple) -> None:
        """Storm's ``ack``: each root of ``tup`` gets ``edge ^ ack_val`` (``__ack_ack``)."""
        if tup.done:
            return
        tup.done = True
        self.acked += 1
        anchors = tup.anchors
        if anchors and self.ackers:
            v = tup.ack_val
            fold = self._fold
            if fold is not None and fold[0] is tup:
                # Ack piggybacking: a child of tup (one root) still waits in its batch, so
                # tup's ack value XORs into the child's edge instead of leaving as its own
                # message. The acker sees the same XOR total, one message later: the child's
                # own ack (or fail, or timeout) carries it. The child cannot have been sent
                # yet: batches leave only from this thread, and the sink has taken fewer
                # items than the child's position.
                self._fold = None
                ins = fold[2]
                if ins.transferred <= fold[3]:
                    fold[1][1] ^= anchors[1] ^ v
                    self.folded_acks += 1
                    if len(ins.batch) >= ins.batch_size:  # held for the fold: now it leaves
                        ins.try_flush()
                    return
            # A root's ack value of 0 with an implicit init completes its whole tree (no
            # proper subset of a tree's acks XORs to 0, and the spout's share is 0): this
            # bolt tells the spout itself, as the acker would at once (see _acker), and the
            # acker never hears of the tree. The usual tree of a chain whose acks all fold
            # into the last child is one such ack. Measured on benchmarks/acking.py's
            # pipeline: 3.8-3.9 frames per 1000 tuples against 5.1-5.8, the acker idle.
            # _to_acker inlined for one acker: measured 0.4-0.5 µs less per tree in
            # benchmarks/acking_stages.py than a _to_acker call per root
            if self._one_acker is not None and len(anchors) == 2:  # the usual case
                root, x = anchors[0], anchors[1] ^ v
                if x or not self._complete_tree(root):
                    self._acks_out += (root, x)
            else:
                acks, one = self.ackers, self._one_acker
                for i in range(0, len(anchors), 2):
                    root, x = anchors[i], anchors[i + 1] ^ v
                    if not x and self._complete_tree(root):
                        continue
                    lst = self._acks_out if one is not None else self._ack_list(
                        acks[root % len(acks)], ACK_ACK)
                    lst += (root, x)
            self._ack_out_n += len(anchors)
            if self._ack_out_n >= ACK_BATCH_VALUES:
                self.flush_acks()

    def _complete_tree(self, root: int) -> bool:
        """A bolt's ack of value 0 for ``root``: if ``root`` has an implicit init, its tree
        is complete, and ``root`` joins the roots held for its spout (True); otherwise
        False (the acker must see the ack: an explicit init holds its own XOR). A caller
        adds to ``_ack_out_n``."""
        done = self._completed_out.get(root >> 47)
        if done is None:
            return False
        done.append(root)
        self.completed_trees += 1
        return True

    def fail_tuple(self, tup: Tuple) -> None:
        """Storm's ``fail``: every root of ``tup`` fails now (``__ack_fail``)."""
        if tup.done:
            return
        tup.done = True
        self.failed += 1
        if tup.anchors and self.ackers:
            for root in tup.anchors[::2]:
                self._to_acker(ACK_FAIL, root)

    def reset_tuple_timeout(self, tup: Tuple) -> None:
        """Storm's ``resetTimeout`` (``__ack_reset_timeout``)."""
        if tup.anchors and self.ackers:
            for root in tup.anchors[::2]:
                self._to_acker(ACK_RESET, root)

    def _system(self, src: int, s: int, values: list) -> None:
        """A system-stream message: acking, as the acker or as a spout. Malformed values
        (not a list of ints of the stream's shape) are counted as bad and dropped."""
        try:
            if self.is_acker:
                self._acker(src, s, values)
            elif self.own_trees:
                self._own_acks(s, values)
            elif self.is_spout:
                self._spout_acks(s, values)
        except (TypeError, IndexError, KeyError):
            self.bad_frames += 1

    def _spout_acks(self, s: int, roots: list) -> None:
        pending = self.pending_tuples
        now = time.monotonic()
        if s == ACKER_ACKED:  # the hot path: one loop, the user's ack bound once
            pop, ack, lat = pending.pop, self.obj.ack, self.complete_latencies_ms
            acked = unknown = 0
            try:
                for root in roots:
                    entry = pop(root, None)
                    if entry is None:
                        unknown += 1
                        continue
                    acked += 1
                    lat.append((now - entry[1]) * 1000.0)
                    try:
                        ack(entry[0])
                    except Exception as e:  # user code: report, go on
                        self.errors.report(e, "ack")
            finally:  # (a malformed root raises out of the loop: count what was done)
                self.acked += acked
                self.unknown_acks += unknown
            return
        self._fail_or_reset(roots, s == ACKER_RESET, now)

    def _fail_or_reset(self, roots: list, reset: bool, now: float) -> None:
        """A spout's pending trees ``roots`` fail now (the user's ``fail``), or with
        ``reset`` their timeout restarts at ``now``. Unknown roots are ignored (a fail of
        one is counted in ``unknown_acks``)."""
        pending = self.pending_tuples
        for root in roots:
            entry = pending.pop(root, None)
            if entry is None:
                self.unknown_acks += not reset
            elif reset:
                entry[1] = now
                pending[root] = entry  # re-inserted: now the newest
            else:
                self.failed += 1
                self._user_fail(entry[0])

    def _own_acks(self, s: int, values: list) -> None:
        """The acker's work for this spout's own trees (``own_trees``): ACK_ACK values XOR
        into the tree's entry of ``pending_tuples`` and complete it at 0; ACK_FAIL fails it
        now; ACK_RESET restarts its timeout. Roots no longer pending (timed out, failed) are
        counted in ``unknown_acks`` and ignored."""
        pending = self.pending_tuples
        if s == ACK_ACK:
            if len(values) % 2:
                raise IndexError("ACK_ACK values are [root, xor, ...] pairs")
            get = pending.get
            complete, unknown = [], 0
            try:
                for root, v in zip(values[::2], values[1::2], strict=True):
                    e = get(root)
                    if e is None:
                        unknown += 1
                    else:
                        e[2] ^= v
                        if not e[2]:
                            complete.append(root)
            finally:  # (a malformed value raises out of the loop: complete what was done)
                self.unknown_acks += unknown
                # the acker executor's answer, as if it had come from one
                self._spout_acks(ACKER_ACKED, complete)
        elif s == ACK_FAIL or s == ACK_RESET:
            self._fail_or_reset(values, s == ACK_RESET, time.monotonic())
        else:
            raise TypeError(f"acking stream {s} is not for a spout's own trees")

    def _acker(self, src: int, s: int, values: list) -> None:
        """Storm's ``Acker.execute``: XOR per root; a root completes at 0 or on a fail."""
        tree = self._tree
        now = time.monotonic()
        if s == ACK_INIT or s == ACK_ACK:
            if len(values) % 2:
                raise IndexError("ACK_INIT/ACK_ACK values are [root, xor, ...] pairs")
            get, done = tree.get, self._tree_done
            pairs = zip(values[::2], values[1::2], strict=True)
            if s == ACK_INIT:
                if src < 0:
                    raise TypeError("ACK_INIT from a system task")
                for root, v in pairs:
                    e = get(root)
                    if e is None:  # the usual: the init comes first
                        e = tree[root] = [v ^ 0, src, now, False]  # (^ 0: an int)
                        if v == 0:  # an emit to no task: complete at once
                            done(root, e)
                        continue
                    e[0] ^= v
                    e[1] = src  # the spout task
                    if e[0] == 0 or e[3]:
                        done(root, e)
            else:
                spout_of = self.implicit_init_spout
                for root, v in pairs:
                    e = get(root)
                    if e is None:  # an implicit init, or an ack before the init
                        spout = spout_of(root)
                        if v == 0 and spout >= 0:  # a whole tree in one ack: no entry
                            self._answer_spout(spout, root, False)
                            continue
                        tree[root] = [v ^ 0, spout, now, False]
                        continue
                    e[0] ^= v
                    if e[0] == 0 and e[1] >= 0:  # (a failed tree with its spout is gone)
                        done(root, e)
        elif s == ACK_FAIL:
            for root in values:
                e = tree.get(root)
                if e is None:
                    e = tree[root] = [0, self.implicit_init_spout(root), now, False]
                e[3] = True
                if e[1] >= 0:
                    self._tree_done(root, e)
        elif s == ACK_RESET:
            for root in values:
                e = tree.pop(root, None)
                if e is None:
                    spout = self.implicit_init_spout(root)
                    if spout < 0:
                        continue
                    e = [0, spout, now, False]  # an implicit init: the tree is pending
                e[2] = now
                tree[root] = e  # now the newest: the dict stays in time order
                if e[1] >= 0:
                    self._ack_list(e[1], ACKER_RESET).append(root)
                    self._ack_out_n += 1

    def implicit_init_spout(self, root: int) -> int:
        """The spout task of an implicit-init root (-1 for any other root).

        Storm's spout sends ``__ack_init`` (root, XOR of its edge ids) so the acker learns
        the tree and its spout task. Here a spout emit to exactly one task (the usual:
        shuffle, fields, local grouping) sends none: the child's edge id is 0 (the init
        and the child's own contribution would cancel), and the root id carries the spout
        (:data:`IMPLICIT_INIT`). No subset of a tree's acks XORs to 0 but the whole tree
        (each non-zero edge id appears in exactly two acks), so the acker may create the
        entry at the first ack and complete it at 0. Measured with benchmarks/acking.py,
        together with ack piggybacking (:meth:`ack_tuple`): 5.7-6.1 frames per 1000 tuples
        with an acker executor, against 10.3-11.8 before.

        Raises:
            IndexError: the root names no spout task (a malformed root; counted as bad).
        """
        if not root & IMPLICIT_INIT:
            return -1
        return self._spout_tasks[(root ^ IMPLICIT_INIT) >> 47]

    def _tree_done(self, root: int, e: list) -> None:
        del self._tree[root]
        self._answer_spout(e[1], root, e[3])

    def _answer_spout(self, spout: int, root: int, failed: bool) -> None:
        """The acker's answer for a resolved tree: ``root`` joins the values held for
        ``spout`` on ACKER_FAILED or ACKER_ACKED."""
        self.acked += not failed
        self.failed += failed
        self._ack_list(spout, ACKER_FAILED if failed else ACKER_ACKED).append(root)
        self._ack_out_n += 1
        if self._ack_out_n >= ACK_BATCH_VALUES:
            self.flush_acks()

    def _expire(self, now: float) -> None:
        """Time out what waited longer than ``topology.message.timeout.secs``: the spout
        fails its pending tuples (Storm's "TIMEOUT"); the acker forgets their trees. Both
        dicts are kept oldest first (a reset moves an entry to the end), so this stops at
        the first entry still in time."""
        if self.timeout_s <= 0:
            return
        limit = now - self.timeout_s
        entries, at = (self._tree, 2) if self.is_acker else (self.pending_tuples, 1)
        while entries:
            root, entry = next(iter(entries.items()))
            if entry[at] >= limit:
                break
            del entries[root]
            if not self.is_acker:
                self.timeouts += 1
                self.failed += 1
                self._user_fail(entry[0])

    def _user_ack(self, msg_id: Any) -> None:
        try:
            self.obj.ack(msg_id)
        except Exception as e:
            self.errors.report(e, "ack")

    def _user_fail(self, msg_id: Any) -> None:
        self._fails_since_exhausted = True
        try:
            self.obj.fail(msg_id)
        except Exception as e:
            self.errors.report(e, "fail")

    # -- receive path (any thread) -------------------------------------------------------
    def accept_frame(self, src_task: int, seq: int, items: list, remote: bool,
                     epoch: int = 0) -> tuple[int | None, tuple | None]:
        """Take the ``seq``-th decoded batch of ``epoch`` from ``src_task``, in order.

        Ray does not order calls to threaded or asyncio actors, so frames of one
        (sender, receiver) pair are numbered: a frame that arrives early waits (at most the
        sender's window, ``topology.transfer.max.inflight.batches``) until the frames before
        it are in; a duplicate is counted and dropped. ``remote`` frames (from another
        worker) never block (see :meth:`receive_remote_items`); local ones block while the
        receive queue is full, which holds the sender's credit.

        Restarts: a sender that may have lost frames (it restarted, or its receiver or a
        transfer actor between them died) starts a larger ``epoch`` from seq 0; frames
        held back for the older epoch are dropped (with acking, their trees time out and
        replay) and later frames of an older epoch are stale. A restarted receiver
        (``reconstructed``) takes the first frame of an unknown sender as its start.

        Returns:
            ``(ack, report)``: the highest seq of the current epoch from ``src_task`` now
            fully inserted (the sender's cumulative acknowledgement; None for a stale
            frame), and a backpressure report for the transfer actor or None.

        Raises:
            ValueError: ``src_task`` is not an upstream task of this task.
            QueueInterrupted: the executor was stopped while a local insert waited.
        """
        st = self._inbound.get(src_task)
        if st is None:
            if src_task not in self.upstream_all and src_task != self.task_id:
                raise ValueError(f"task {self.task_id} does not consume from task {src_task}")
            st = self._inbound[src_task] = [seq if self.reconstructed else 0, {}, epoch]
        if epoch != st[2]:
            if epoch < st[2]:
                self.stale_frames += 1
                return None, None
            self.epoch_resets += 1
            self.lost_frames += len(st[1])
            st[:] = [0, {}, epoch]
        expected, early = st[0], st[1]
        if seq < expected or seq in early:
            self.duplicate_frames += 1
            return expected - 1, None
        if seq > expected:
            early[seq] = items
            self.early_frames += 1
            return expected - 1, None
        report = None
        while items is not None:
            if self.done.is_set():
                # this task has ended: nobody takes from its queue any more, so a wait
                # would hold the sender for ever (a bolt's late acks of trees its spout
                # already timed out, an end marker sent again). Acknowledged and counted.
                self.late_items += len(items)
            elif remote:
                r = self.receive_remote_items(src_task, items)
                if report is None:
                    report = r
            else:
                try:
                    self.queue.publish_all([(src_task, *it) for it in items],
                                           self._stopped_or_done)
                except QueueInterrupted:
                    if self._stop:
                        raise
                    self.late_items += len(items)  # it ended while we waited
            expected += 1
            st[0] = expected
            items = early.pop(expected, None)
        return expected - 1, report

    def _stopped_or_done(self) -> bool:
        return self._stop or self.done.is_set()

    # -- between workers (receiving side: any thread; sending side: control thread) ------
    def receive_remote_items(self, src_task: int, items: list) -> tuple | None:
        """Insert a batch that came from another worker; never blocks.

        Storm's ``transferLocalBatch`` for this task: into the receive queue while the
        overflow is empty and there is room, else into the overflow (or dropped and counted
        beyond ``topology.executor.overflow.limit``, logged at most once per
        ``topology.error.throttle.interval.secs``).

        Returns:
            A report for the transfer actor, ``(task, backlogged, since, seq, reminder)``,
            when this task just became backlogged or ``topology.backpressure.resend.size``
            more tuples went to its overflow since the last report; else None.
        """
        q = self.queue
        elements = [(src_task, *it) for it in items]
        # a back edge's arrivals are capped even when the overflow is not: a cycle can
        # generate tuples without bound; beyond the cap they are dropped and counted, and
        # with acking their trees fail, so the spout replays them
        limit = self.back_edge_cap if src_task in self.back_sources else None
        lost: list | None = [] if limit is not None and self.ackers else None
        if elements and elements[-1][1] == EOS_STREAM:  # the end of stream is never dropped
            _, dropped = q.publish_remote(elements[:-1], limit=limit, dropped_out=lost)
            q.publish_remote(elements[-1:], limit=0)
        else:
            _, dropped = q.publish_remote(elements, limit=limit, dropped_out=lost)
        if lost:
            self._fail_dropped(lost)
        if dropped:
            if self.log_throttle.allow("dropped"):
                logger.warning("%s:%d: overflow at its limit (%d): dropped %d tuples (%d so "
                               "far)", self.component_id, self.task_id, q.overflow_limit,
                               dropped, q.dropped_messages)
        if q.is_empty_overflow() and not dropped:
            return None
        with self._bp_lock:
            tr = self.bp_tracker
            total = q.overflowed_total
            if tr.record_back_pressure(self.task_id):
                tr.set_last_overflow_count(self.task_id, total)
                return self._report(True, False)
            if total - tr.get_last_overflow_count(self.task_id) >= self._resend_size:
                tr.set_last_overflow_count(self.task_id, total)
                return self._report(True, True)
        return None

    def _fail_dropped(self, elements: list) -> None:
        """Fail the trees of tuples dropped at a back edge's cap (receiving thread: the
        messages go to the ackers through the executor thread's FlushTuple path)."""
        roots = {r for el in elements if len(el) > 3 for r in el[3][::2]}
        with self._bp_lock:
            self._dropped_roots.extend(roots)

    def check_backpressure(self) -> tuple | None:
        """The backpressure-check timer's step: clear this task once its overflow has
        drained. Returns a report for the transfer actor on a change, else None."""
        with self._bp_lock:
            if self.bp_tracker.refresh_bp_task_list():
                return self._report(False, False)
        return None

    def current_report(self) -> tuple:
        """This task's current state as a (non-reminder) report for the transfer actor."""
        with self._bp_lock:
            return self._report(self.bp_tracker.is_backpressured(self.task_id), False)

    def _report(self, backlogged: bool, reminder: bool) -> tuple:
        self._bp_seq += 1
        self.bp_reports += 1
        if not reminder:
            logger.info("%s:%d: %s", self.component_id, self.task_id,
                        "backlogged (overflow in use)" if backlogged else "backlog cleared")
        return (self.task_id, backlogged, self.bp_tracker.since(self.task_id), self._bp_seq,
                reminder)

    def apply_backpressure(self, status: BackPressureStatus) -> list[int]:
        """Apply another worker's status to this task's sends; returns the tasks that
        became backlogged here (their halt-lag is recorded). Stale statuses are ignored."""
        res = self.remote_bp.apply(status)
        if res is None:
            return []
        newly, lags = res
        self.halt_lags_s.extend(lags)
        self.wakeup.set()  # a destination may have cleared: retry pending_emits
        return newly

    # -- the loop ------------------------------------------------------------------------
    def _handle(self, el) -> None:
        if el is FLUSH:
            self._flush()
            return
        src, s, values = el[0], el[1], el[2]
        if s < 0:
            if s == EOS_STREAM:
                self.upstream_open.discard(src)
            else:
                self._system(src, s, values)
            return
        if self.is_spout:
            return
        comp, sid, fields = self.streams[s]
        tup = Tuple(values, fields, comp, src, sid, el[3] if len(el) > 3 else None)
        if self._batch_in is not None:
            self._batch_in.append(tup)
            if len(self._batch_in) >= self._batch_max:
                self.run_batch()
            return
        self._current = tup
        timed = self._sample_every and self.executed % self._sample_every == 0
        if timed:
            t0 = time.perf_counter()
        try:
            self.obj.execute(tup)
        except Exception as e:  # user code: report, fail the tuple (it replays), go on
            self.errors.report(e, "execute")
            self.fail_tuple(tup)
        else:
            if self.auto_ack and not tup.done:
                if tup.anchors:
                    self.ack_tuple(tup)
                else:
                    self.acked += 1
        finally:
            self._current = None
            if timed:
                self.latency_sum_s += time.perf_counter() - t0
                self.latency_n += 1
        self.executed += 1

    def run_batch(self) -> None:
        """A ``BatchBolt``'s ``execute_batch`` on the inputs gathered so far (executor
        thread): then every input it left open is acked, or failed if it raised."""
        batch, self._batch_in = self._batch_in, []
        if not batch:
            return
        t0 = time.perf_counter()
        try:
            self.obj.execute_batch(batch)
        except Exception as e:  # user code: report, fail what it left open, go on
            self.errors.report(e, "execute_batch")
            for tup in batch:
                if not tup.done:
                    self.fail_tuple(tup)
        else:
            if self.auto_ack:
                for tup in batch:
                    if not tup.done:
                        if tup.anchors:
                            self.ack_tuple(tup)
                        else:
                            self.acked += 1
        self.latency_sum_s += time.perf_counter() - t0
        self.latency_n += len(batch)
        self.executed += len(batch)

    def _idle(self, idle: int) -> int:
        """Wait for input under the idle strategy, until the wakeup event: cleared first,
        then the queues are checked, so an insert after the check ends the wait."""
        if self._ack_out_n:
            self.flush_acks()
        self.wakeup.clear()
        q = self.queue
        if q.size() or not q.is_empty_overflow():
            return 0
        t0 = time.perf_counter()
        idle = self.idle_wait.idle(idle, self.wakeup, self._wait_limit())
        self.idle_wait_s += time.perf_counter() - t0
        return idle

    def _bp_idle(self, idle: int) -> int:
        """Wait for a destination to take ``pending_emits`` (a send completing, a remote
        backlog clearing) or for input, under the backpressure strategy; as :meth:`_idle`,
        the event is cleared before one more attempt."""
        if self._ack_out_n:
            self.flush_acks()
        self.wakeup.clear()
        if self.pending and self.try_flush_pending():
            return 0
        t0 = time.perf_counter()
        idle = self.bp_wait.idle(idle, self.wakeup, self._wait_limit())
        dt = time.perf_counter() - t0
        self.backpressure_wait_s += dt
        if self.pending:  # the destination at the head of pending_emits holds us back
            dest = self.pending[0][0]
            self.held_by_s[dest] = self.held_by_s.get(dest, 0.0) + dt
        return idle

    def transferred(self) -> int:
        """Tuples handed to destination sinks so far (any thread; an estimate while the
        executor runs)."""
        return sum(i.transferred for i in self._inserter_list)

    def start(self) -> None:
        """Call ``open``/``prepare`` and start the executor thread."""
        collector = _SpoutCollector(self) if self.is_spout else _BoltCollector(self)
        self.state = "starting"
        try:
            if self.is_spout:
                self.obj.open(self.conf, self.context, collector)
                self.obj.activate()  # Storm activates a spout when its topology starts
            else:
                self.obj.prepare(self.conf, self.context, collector)
        except Exception as e:
            self.errors.report(e, "open" if self.is_spout else "prepare")
            self.state = "failed"
            raise
        self._started_at = time.time()
        if self._flush_interval_s:
            self._next_flush = time.monotonic() + self._flush_interval_s
        self.state = "running"
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=f"executor-{self.component_id}-{self.task_id}")
        self._thread.start()

    def _has_flushable(self) -> bool:
        """True while a partial batch, acking values or dropped trees wait to leave."""
        return bool(self._ack_out_n or self._dropped_roots
                    or any(ins.batch for ins in self._inserter_list))

    def _flush(self) -> None:
        """Storm's FlushTuple handling: trees dropped at the overflow limit fail, the
        acking values and every partial batch leave (Nagle's rule; never blocks)."""
        if self._dropped_roots:
            with self._bp_lock:
                roots, self._dropped_roots = self._dropped_roots, []
            for r in roots:
                self._to_acker(ACK_FAIL, r)
        self.flush_acks()
        self.try_flush_batches(nagle=True)

    def _flush_due(self, now: float) -> None:
        """The executor thread's FlushTuple: at most every
        ``topology.batch.flush.interval.millis``, and only while something waits to leave
        (checked by the loops after each ``consume`` and each wait; a wait ends by the
        next flush time while something waits).

        Storm's one flush-tuple timer per worker inserts a FlushTuple into every
        executor's queue. Here a worker is one process per executor, so that timer was a
        thread per executor: measured on benchmarks/acking.py's pipeline (per-thread CPU
        over 5 s, py-spy for the thread names), each used 1.6-2.0% of a core waking every
        millisecond, and taking the GIL from the executor thread each time.
        """
        self._next_flush = now + self._flush_interval_s
        if self._has_flushable():
            self._flush()

    def _timers(self, expire: bool) -> None:
        """The loops' clock work: the flush when due and, with ``expire`` (a spout with
        ackers, or an acker), the timeout check (every timeout / 20, 10 ms to 1 s)."""
        now = time.monotonic()
        if now >= self._next_flush:
            self._flush_due(now)
        if expire and now >= self._next_timeout_check:
            self._next_timeout_check = now + min(1.0, max(0.01, self.timeout_s / 20))
            self._expire(now)

    def _wait_limit(self) -> float | None:
        """How long an idle wait may last: until the next flush while something waits to
        leave, else unbounded (None: the wait strategy's own)."""
        if self._next_flush == float("inf") or not self._has_flushable():
            return None
        return max(0.0, self._next_flush - time.monotonic())

    def run(self) -> None:
        """The executor thread: Storm's spout or bolt loop until end of stream or stop."""
        try:
            if self.is_spout:
                self._run_spout()
            else:
                self._run_bolt()
            if not self._stop:
                self._end_stream()
        except Exception as e:  # a bug of ours, not user code: make it visible
            logger.exception("%s:%d: executor loop crashed", self.component_id, self.task_id)
            self.errors.report(e, "executor loop")
            self.state = "failed"
        finally:
            self._finished_at = time.time()
            if self.state != "failed":
                self.state = "done" if not self._stop else "killed"
            self.done.set()

    def _run_spout(self) -> None:
        """Storm's spout loop. The receive queue is checked every
        ``topology.spout.recvq.skips`` + 1 iterations while ``next_tuple`` emits, and on
        the next iteration whenever the spout cannot emit (pending emits held by
        backpressure, ``topology.max.spout.pending`` reached, idle), so acks drain at once
        when they are what the spout waits for. With ackers, expired tuples fail (checked
        when the queue is). ``StopIteration`` ends the stream once no emitted tuple is
        pending; a fail after it calls ``next_tuple`` again, so the spout can replay.

        Storm's SpoutExecutor skips the queue the same way with acking on; checking it on
        every iteration cost 0.3 µs per tuple here (an empty ``consume`` and a clock read).
        """
        q = self.queue
        spout = self.obj
        acking = bool(self.ackers)
        skips = self.conf["topology.spout.recvq.skips"]
        max_pending = self.max_spout_pending if acking else None
        handle = self._handle
        counter = skips  # check the queue on the first iteration
        idle = bp_idle = 0
        exhausted = False
        calls, sample = 0, self._sample_every
        while not self._stop:
            recv = 0
            if counter >= skips:
                recv = q.consume(handle)
                counter = 0
                self._timers(acking)
            else:
                counter += 1
            if self.pending and not self.try_flush_pending():
                counter = skips
                if recv <= 1:
                    bp_idle = self._bp_idle(bp_idle)
                continue
            bp_idle = 0
            if exhausted:
                # a fail first: it may have emptied pending_tuples, and its item must be
                # replayed before the stream can end
                counter = skips
                if self._fails_since_exhausted:
                    exhausted = False
                elif not self.pending_tuples:
                    return
                else:
                    idle = self._idle(idle) if recv <= 1 else 0
                    continue
            if self._want_active is not self.active:
                self._apply_active()
            if not self.active or (max_pending is not None
                                   and len(self.pending_tuples) >= max_pending):
                counter = skips
                idle = self._idle(idle) if recv <= 1 else 0
                continue
            before = self.emitted
            calls += 1
            timed = sample and calls % sample == 0
            if timed:
                t0 = time.perf_counter()
            try:
                spout.next_tuple()
            except StopIteration:
                self._ack_due()
                if not self.pending_tuples:
                    return
                exhausted = True
                self._fails_since_exhausted = False
                continue
            except Exception as e:
                self.errors.report(e, "next_tuple")
            if timed:
                self.latency_sum_s += time.perf_counter() - t0
                self.latency_n += 1
            if self._acks_due:
                self._ack_due()
            if self.emitted == before and recv <= 1:
                counter = skips
                idle = self._idle(idle)
            else:
                idle = 0

    def _ack_due(self) -> None:
        """Without ackers a spout tuple is acked at emit (after ``next_tuple`` returns)."""
        due, self._acks_due = self._acks_due, []
        for m in due:
            self.acked += 1
            self._user_ack(m)

    def _run_bolt(self) -> None:
        q = self.queue
        pending = self.pending
        handle = self._handle

        def keep_running() -> bool:
            return not pending

        idle = bp_idle = 0
        is_acker = self.is_acker
        while not self._stop:
            self._timers(is_acker)
            if not pending or self.try_flush_pending():
                bp_idle = 0
                if q.consume(handle, keep_running):
                    if self._batch_in:
                        self.run_batch()
                    idle = 0
                    continue
                if not self.upstream_open and q.size() == 0 and q.is_empty_overflow():
                    try:
                        self.obj.finish()
                    except Exception as e:
                        self.errors.report(e, "finish")
                    return
                idle = self._idle(idle)
            else:
                bp_idle = self._bp_idle(bp_idle)

    def _end_stream(self) -> None:
        """Send end-of-stream after all data to every downstream task, and push it all out."""
        self.state = "ending"
        self.flush_acks()
        for t in self.downstream:
            self._transfer(t, _EOS_MSG)
        idle = 0
        while not self._stop:
            self.queue.consume(self._handle)  # keep draining our own queue (flushes, acks)
            self.flush_acks()
            if self.try_flush_pending() and self.try_flush_batches():
                return
            idle = self._bp_idle(idle)

    # -- control -------------------------------------------------------------------------
    def set_active(self, active: bool) -> None:
        """Storm's activate / deactivate (any thread; applied by the executor thread on its
        next iteration): a deactivated spout stops calling ``next_tuple`` but keeps taking
        acks and failing timeouts; its ``activate``/``deactivate`` hook is called on each
        change, on the executor thread as Storm does. No effect on bolts."""
        self._want_active = active
        self.wakeup.set()

    def _apply_active(self) -> None:
        active = self._want_active
        try:
            self.obj.activate() if active else self.obj.deactivate()
        except Exception as e:
            self.errors.report(e, "activate" if active else "deactivate")
        self.active = active
        logger.info("%s:%d: %s", self.component_id, self.task_id,
                    "activated" if active else "deactivated")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (kill), interrupt blocked receivers, call ``close``/``cleanup``."""
        self._stop = True
        self.wakeup.set()
        self.queue.interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            if self.is_spout:
                self.obj.close()
            else:
                self.obj.cleanup()
        except Exception as e:
            self.errors.report(e, "close" if self.is_spout else "cleanup")

    def stats(self) -> dict:
        """Counters, queue metrics, backpressure and errors of this task (plain dict)."""
        m = self.queue.metrics().to_dict()
        end = self._finished_at or time.time()
        return {
            "component": self.component_id, "task": self.task_id, "active": self.active,
            "worker": self.context.worker_index, "state": self.state,
            "emitted": self.emitted, "executed": self.executed,
            "acked": self.acked, "failed": self.failed, "timeouts": self.timeouts,
            "pending_tuples": len(self.pending_tuples) if self.is_spout else len(self._tree),
            "unknown_acks": self.unknown_acks, "folded_acks": self.folded_acks,
            "completed_trees": self.completed_trees,
            "complete_latencies_ms": list(self.complete_latencies_ms),
            "queue": m, "pending_emits": len(self.pending),
            "max_pending_emits": self.max_pending_emits,
            "batched": sum(len(i.batch) for i in self._inserter_list),
            "send_failures": self.send_failures,
            "backpressure_wait_ms": self.backpressure_wait_s * 1000.0,
            "idle_wait_ms": self.idle_wait_s * 1000.0,
            "bad_frames": self.bad_frames,
            "duplicate_frames": self.duplicate_frames, "early_frames": self.early_frames,
            "stale_frames": self.stale_frames, "epoch_resets": self.epoch_resets,
            "lost_frames": self.lost_frames, "late_items": self.late_items,
            "reconstructed": self.reconstructed,
            "backlogged": self.bp_tracker.is_backpressured(self.task_id),
            "overflowed_total": self.queue.overflowed_total,
            "bp_reports": self.bp_reports,
            "remote_backlogged": self.remote_bp.backlogged(),
            "remote_refusals": self.remote_refusals,
            "halt_lags_ms": [x * 1000.0 for x in self.halt_lags_s],
            "error_count": self.errors.total, "errors": self.errors.snapshot(),
            "uptime_s": (end - self._started_at) if self._started_at else 0.0,
            "progress": self._progress(),
        }

    def _progress(self) -> int | None:
        if not self.is_spout or not self._started_at:  # before open(): nothing taken
            return None
        try:
            p = self.obj.progress()
            return None if p is None else int(p)
        except Exception as e:  # a user method: report, never fail a stats call
            self.errors.report(e, "progress")
            return None
