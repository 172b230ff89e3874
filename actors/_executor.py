"""The executor: one task's loop and lifecycle, over the rooms that decide.

:class:`ExecutorCore` runs Storm 2.0's spout and bolt loops on one thread and holds, as
objects it calls, the rooms that decide (no Ray in any of them; its sinks are injected by
:meth:`ExecutorCore.connect`, so the loop runs in-process in tests as well as inside
:class:`actors.ExecutorActor`):

* the **collector** (``actors/_collectors.py``): emits, routed and anchored;
* the **outbox** (``actors/_outbox.py``): per-destination batches, ``pending_emits``, the
  flush;
* the **inbound** side (``actors/_inbound.py``): frames in sender order, queue or overflow,
  backpressure reports;
* the **acking ledger** (``actors/_acking.py``): tuple trees, pure;
* the **flow-control policy** (``backpressure/_policy.py``).

The loop (STORM-2306, "Redesign Messaging Subsystem and switch to JCTools Queues"; Storm's
``SpoutExecutor`` and ``BoltExecutor``): a spout does not call ``next_tuple`` while
``pending_emits`` is non-empty, but keeps consuming its own queue (acks); a bolt stops
consuming. Retries idle under ``topology.backpressure.wait.strategy``. The executor
thread runs its own flushes (Storm's FlushTuple without the timer thread, see
:meth:`ExecutorCore._timers`). End of stream: a spout that raises ``StopIteration`` sends
an end-of-stream marker after its data to every downstream task; a bolt that has seen the
marker from all its upstream tasks and drained its queue calls ``finish()`` and does the
same.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

from actors._acking import UserCalls
from actors._errors import ErrorReporter, LogThrottle
from actors._inbound import Inbound
from actors._outbox import Outbox, Sink
from actors._routing import build_routers, stream_table, task_links, upstream_spout_tasks
from actors._stats import IntervalMetrics, TaskStats, task_stats
from actors._streams import BARRIER_STREAM, DRAINED_STREAM, EOS_STREAM
from actors.state._loop import drop_queued, poll_chain
from backpressure import (
    BackPressureStatus,
    JCQueue,
    LoadShedder,
    make_policy,
    make_receive_queue,
    make_wait_strategy,
)
from topology import ACKER_ID, StormTopology, TopologyContext, effective_batch_size, make_config
from topology._keygroups import key_group_count
from topology._state import KeyValueState, _Stateful

logger = logging.getLogger("storm_on_ray.executor")

#: Wire stream index of the end-of-stream marker.
_EOS_MSG = (EOS_STREAM, None)
#: A chained task's flush waits at most this many flush intervals while it emits (see
#: ExecutorCore._defer_flush)
CHAIN_FLUSH_DEFER = 10
#: A busy host runs its chained tasks' clock work at most this often (seconds), and at once
#: after it waited: the spout loop's clock check comes every few tuples, and the chained
#: tasks' part of it showed in a chain host's profile (benchmarks/peers.py's chained
#: pipeline)
CHAIN_TIMERS_S = 0.001
_DRAINED_MSG = (DRAINED_STREAM, None)


class ExecutorCore:
    """One task: its component instance, its queue, its rooms, and the loop.

    Threads: the executor thread runs :meth:`run` (the only caller of user code);
    receivers call ``inbound.accept_frame`` from any thread; the control thread applies
    statuses and reads stats.

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
        self.component_id = cid = topology.task_component(task_id)
        self.spec = spec = topology.components[cid]
        self.is_spout = spec.is_spout
        self.is_acker = cid == ACKER_ID
        self.conf = c = make_config({**conf, **dict(spec.conf)})
        self.obj = self._component_object(spec.obj, topology, conf)
        self.bp_wait = make_wait_strategy(c, "backpressure")
        self.idle_wait = make_wait_strategy(c, "spout" if self.is_spout else "bolt")
        #: set when input reaches the queue, a send completes, a remote backlog clears or
        #: the executor is stopped: the executor thread's waits end on it (see _idle)
        self.wakeup = threading.Event()
        self.queue = make_receive_queue(c, f"{cid}:{task_id}", self.bp_wait, self.wakeup)
        #: latency-first shedding (a bolt with ``topology.backpressure.overload`` "shed")
        self.shedder = (
            LoadShedder(c["topology.shed.latency.target.ms"] / 1000.0,
                        c["topology.metrics.interval.secs"])
            if c["topology.backpressure.overload"] == "shed" and not spec.is_spout
            and cid != ACKER_ID else None)
        self.streams = stream_table(topology)
        self.links = links = task_links(topology, task_id, task_worker)
        self.destinations = links.destinations
        # the tasks of the components subscribing to this one (no acking links)
        self._data_destinations = tuple(topology.downstream_tasks(cid, task_id))
        self.back_dests, self.back_sources = links.back_dests, links.back_sources
        self.remote_upstream = links.remote_upstream
        #: the spout tasks whose streams reach this task (the senders a NAK slows down)
        self.upstream_spouts = upstream_spout_tasks(topology, cid)
        #: upstream tasks whose end of stream has not arrived (back edges never end)
        self.upstream_open = set(links.upstream - links.back_sources)
        self.task_worker = dict(task_worker)
        self.worker = task_worker.get(task_id, 0)
        tasks_of = topology.component_tasks
        self.context = TopologyContext(
            topology_name, cid, task_id, list(tasks_of[cid]).index(task_id),
            {k: list(v) for k, v in tasks_of.items()}, self.worker,
            {(g.source, g.stream): topology.components[g.source].streams[g.stream]
             for g in spec.inputs})
        self.log_throttle = LogThrottle(c["topology.error.throttle.interval.secs"])
        self.errors = ErrorReporter(cid, task_id, c["topology.error.throttle.interval.secs"],
                                    c["topology.max.error.report.per.interval"])
        self._stop = False
        self.done = threading.Event()
        self.policy = make_policy(c, task_id, self.queue, self.worker)
        self.outbox = Outbox(task_id, effective_batch_size(c), self.bp_wait, self.policy,
                             lambda: self._stop, c["topology.producer.batch.dynamic"])
        self.ledger = self._make_ledger(topology, c)
        self.inbound = Inbound(
            task_id, cid, self.queue, links.upstream, links.back_sources,
            c["topology.executor.overflow.limit"] or c["topology.executor.receive.buffer.size"],
            bool(topology.acker_tasks), self.policy, self.log_throttle, self.done.is_set,
            lambda: self._stop, self.shedder, self.stream_name)
        self.collector = self._make_collector(build_routers(
            topology, cid, task_id, task_worker,
            load_aware=not c["topology.disable.loadaware.messaging"],
            batch_size=self.outbox.batch_size, key_groups=key_group_count(c)))
        # counters of this task's own calls (the collector and the ledger count theirs)
        self.executed = 0
        self._acked = 0
        self._failed = 0
        self._bad_frames = 0
        self._fails_since_exhausted = False
        #: a spout's drain waits for this emitted count (see SpoutExecutor._apply_drain)
        self._redrain: int | None = None
        #: DRAINED was sent on in this generation (see send_drained)
        self._drained_sent = False
        #: a checkpoint rollback's generation that reached this task while it sent its
        #: end of stream (set by the control thread): the receivers drop frames of older
        #: epochs, so ``_end_stream`` sends its end marker again in a new one
        self.rollback_while_ending: int | None = None
        # metrics (actors/_metrics.py): time idle for lack of input, backpressure time per
        # destination holding the head of pending_emits, sampled execute latencies
        self.idle_wait_s = 0.0
        self.backpressure_wait_s = 0.0
        self.held_by_s: dict[int, float] = {}
        rate = c["topology.stats.sample.rate"]
        self._sample_every = max(1, round(1.0 / rate)) if rate > 0 else 0
        self._sample_in = 1 if self._sample_every else 0  # executes to a timed one (0: none)
        self.latency_sum_s = 0.0
        self.latency_n = 0
        self.state = "created"
        #: a spout calls next_tuple only while active (Storm's activate / deactivate);
        #: the control thread sets the wish, the executor thread applies it
        self.active = True
        self._want_active = True
        #: the topology drains (``handle.drain()``): set by the control thread, applied
        #: by the spout loop (see ``set_draining``)
        self._want_drain = False
        self.draining = False
        interval = c["topology.batch.flush.interval.millis"]
        #: seconds between flushes (0: none, as Storm without flush tuples)
        self._flush_interval_s = (interval / 1000 if interval > 0 and self.outbox.batch_size > 1
                                  else 0)
        self._next_flush = float("inf")  # (set at start)
        self._next_timeout_check = 0.0
        self.started_at = 0.0
        self.finished_at = 0.0
        self._thread: threading.Thread | None = None
        #: operator chains (actors/_chain.py): the tasks this executor runs besides its
        #: own, in chain order (each one's source before it), and, for such a task, the
        #: executor running it
        self.chained: list[ExecutorCore] = []
        self.chain_host: ExecutorCore | None = None
        self._flush_seen = 0
        self._flushed_at = 0.0
        self._next_chain_timers = 0.0  # (monotonic s; 0: at the next clock check)
        #: checkpoints: this task's side when the topology runs them (a
        #: ``actors.state.TaskCheckpoint``, set by ``enable_checkpoints``), and the input
        #: tasks whose elements are parked while the task aligns on a barrier
        self.checkpoint = None
        self.blocked: frozenset = frozenset()

    def send_barrier(self, checkpoint_id: int) -> None:
        """Barrier ``checkpoint_id`` to every downstream task after everything emitted so
        far (never to ackers, nor over a back edge), and try to send it now."""
        item = (BARRIER_STREAM, [checkpoint_id])
        for t in self._data_destinations:
            if t not in self.back_dests:
                self.outbox.transfer(t, item)
        self.outbox.try_flush_batches()

    def clear_io(self) -> None:
        """A rollback: drop every queued element (an upstream's end marker is applied,
        not dropped), ``pending_emits`` and partial batches. Executor thread."""
        for el in drop_queued(self.queue, self.inbound):
            self._control(el[0], el[1], el[2])
        self.outbox.clear()

    def host_chain(self, members: list[ExecutorCore]) -> None:
        """Run ``members`` (chained tasks, each after its source) in this executor: they
        share its thread and its wakeup event; connect them (``ChainLink`` sinks) before
        :meth:`start`."""
        self.chained = list(members)
        for m in members:
            m.chain_host = self
            m.wakeup = self.wakeup

    def _make_ledger(self, topology: StormTopology, c: dict):
        """This task's acking ledger (``SpoutLedger``, ``BoltLedger``, ``AckerLedger``), or
        None when it tracks nothing; each executor subclass makes its own."""
        raise NotImplementedError

    @staticmethod
    def _random_bits():
        """A ``getrandbits`` seeded from the OS: edge ids and roots differ across tasks and
        restarts."""
        return random.Random(int.from_bytes(os.urandom(8), "little")).getrandbits

    def stream_name(self, s: int) -> str:
        """``"component:stream"`` of wire stream index ``s`` (for counts and logs)."""
        comp, sid, _ = self.streams[s]
        return f"{comp}:{sid}"

    # -- counters over the rooms ---------------------------------------------------------
    @property
    def emitted(self) -> int:
        return self.collector.emitted

    @property
    def acked(self) -> int:
        """Spout: msg ids acked; bolt: tuples acked; acker: trees completed."""
        return self._acked

    @property
    def failed(self) -> int:
        return self._failed

    @property
    def bad_frames(self) -> int:
        """Malformed frames and acking messages, counted and dropped."""
        return self._bad_frames + (self.ledger.bad_messages if self.ledger else 0)

    def count_bad_frame(self) -> int:
        """Count one malformed frame (a receiver's decode failed); returns the total."""
        self._bad_frames += 1
        return self.bad_frames

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
        The load-aware shuffles then weigh their targets by ``Outbox.load``, and a stream
        routed to one task gets its untracked emit (``StreamRouter.deliver``).

        Raises:
            ValueError: a destination task has no sink.
        """
        self.outbox.connect(sinks, self.destinations)
        for router in self.collector.routers.values():
            router.bind_load(self.outbox.load)
            fixed = router.fixed
            router.deliver = (self.outbox.deliverer(fixed[0], router.index)
                              if fixed and len(fixed) == 1 else None)

    def apply_backpressure(self, status: BackPressureStatus) -> list[int]:
        """Apply another worker's status to this task's sends (control thread); returns the
        tasks that became backlogged here. Stale statuses are ignored."""
        newly = self.policy.on_status(status)
        self.wakeup.set()  # a destination may have cleared: retry pending_emits
        return newly

    def apply_task_status(self, task: int, backlogged: bool, since: float, seq: int) -> bool:
        """Apply one remote task's own report, sent by its executor (the direct status
        path; control thread); True if it became backlogged here. Stale ones are ignored."""
        newly = self.policy.on_task_status(task, backlogged, since, seq)
        self.wakeup.set()  # a destination may have cleared: retry pending_emits
        return newly

    # -- acking ---------------------------------------------------------------------------
    def flush_acks(self) -> None:
        """Send the acking messages the ledger holds (executor thread)."""
        ledger = self.ledger
        if ledger is not None and ledger.held_values:
            self.outbox.send_all(ledger.take_messages())

    # -- the loop ------------------------------------------------------------------------
    def _control(self, src: int, s: int, values) -> None:
        """A system-stream element from ``src``: an end-of-stream marker or an acking
        message (counted as bad and dropped if malformed)."""
        if s == EOS_STREAM:
            self.upstream_open.discard(src)
            if self.checkpoint is not None:  # an ended input needs no barrier
                self.checkpoint.check_aligned()
        elif s == BARRIER_STREAM:
            if self.checkpoint is not None:
                self.checkpoint.on_barrier(src, values)
            else:
                self.count_bad_frame()
        elif s == DRAINED_STREAM:
            self._on_drained(src)
        elif self.is_spout or self.is_acker:
            calls = self.ledger.on_system_message(src, s, values, time.monotonic())
            if calls.acks or calls.fails:
                self._user_calls(calls)
            if self.ledger.messages_due:
                self.flush_acks()

    def _on_drained(self, src: int) -> None:
        """Upstream task ``src`` will send no new data, only replays (see
        :meth:`send_drained`); a bolt passes it on once all its inputs are drained."""

    def send_drained(self) -> None:
        """Tell every downstream task that this task sends no new data from now on, only
        replays and then its end of stream: a source whose input is exhausted while its
        trees are pending. Windowed bolts downstream stop waiting for this task's event
        time (their watermark), so the windows holding those trees fire and ack them
        (otherwise the trees would wait for the end of stream, and it for them)."""
        for t in self._data_destinations:
            self.outbox.transfer(t, _DRAINED_MSG)

    def reset_end_of_input(self) -> None:
        """A checkpoint rollback: forget that this task's input ended and that it sent
        DRAINED on (the rewound upstreams send theirs again). Executor thread."""
        self._drained_sent = False

    def final_committed(self) -> bool:
        """With checkpoints: the stream's final checkpoint has committed (or was restored)
        for this task and every task chained into it, so the executor may end its
        stream (a chained task's commit is applied on this thread, maybe after ours)."""
        return self.checkpoint.final_committed() and all(
            m.checkpoint.final_committed() for m in self.chained)

    def _make_collector(self, routers: dict):
        raise NotImplementedError  # SpoutExecutor, BoltExecutor

    def _loop(self) -> None:
        raise NotImplementedError

    def _user_calls(self, calls: UserCalls) -> None:
        """A spout's ``ack``/``fail`` for what its ledger resolved (spouts only)."""

    def _idle(self, idle: int) -> int:
        """Wait for input under the idle strategy, until the wakeup event: cleared first,
        then the queues are checked, so an insert after the check ends the wait."""
        self._flush_chain_acks()
        self.wakeup.clear()
        q = self.queue
        if q.size() or not q.is_empty_overflow():
            return 0
        t0 = time.perf_counter()
        idle = self.idle_wait.idle(idle, self.wakeup, self._wait_limit())
        self.idle_wait_s += time.perf_counter() - t0
        self._next_chain_timers = 0.0
        return idle

    def _bp_idle(self, idle: int) -> int:
        """Wait for a destination to take ``pending_emits`` (a send completing, a remote
        backlog clearing) or for input, under the backpressure strategy; as :meth:`_idle`,
        the event is cleared before one more attempt."""
        self._flush_chain_acks()
        self.wakeup.clear()
        pending = self.outbox.pending_emits
        if pending and self.outbox.try_flush_pending():
            return 0
        t0 = time.perf_counter()
        idle = self.bp_wait.idle(idle, self.wakeup, self._wait_limit())
        dt = time.perf_counter() - t0
        self.backpressure_wait_s += dt
        self._next_chain_timers = 0.0
        if pending:  # the destination at the head of pending_emits holds us back
            dest = pending[0][0]
            self.held_by_s[dest] = self.held_by_s.get(dest, 0.0) + dt
        return idle

    def _flush_chain_acks(self) -> None:
        """Before a wait: the acking messages of this task and of the tasks chained in."""
        self.flush_acks()
        for m in self.chained:
            m.flush_acks()

    def _has_flushable(self) -> bool:
        """True while a partial batch, acking values or dropped trees wait to leave."""
        return bool((self.ledger is not None and self.ledger.held_values)
                    or self.inbound.has_dropped_roots or self.outbox.has_partial()
                    or (self.chain_host is not None and self.outbox.pending_emits)
                    or any(m._has_flushable() for m in self.chained))

    def _flush(self) -> None:
        """Storm's FlushTuple: trees dropped at an overflow cap fail, the acking messages
        and every partial batch leave (the policy's Nagle rule; never blocks)."""
        roots = self.inbound.take_dropped_roots()
        if roots and self.ledger is not None:
            self.ledger.fail_roots(roots)
        self.flush_acks()
        self.outbox.try_flush_batches(timer=True)

    def _timers(self, expire: bool) -> None:
        """The loops' clock work. The flush: at most every
        ``topology.batch.flush.interval.millis`` and only while something waits to leave
        (Storm has one flush timer thread per worker; a worker here is a process per
        executor, where a timer thread woke every millisecond and took the GIL from the
        executor thread: benchmarks/acking.py). With ``expire`` (a spout with ackers, or
        an acker), the timeout check, every timeout / 20 (10 ms to 1 s)."""
        now = time.monotonic()
        if now >= self._next_flush:
            self._next_flush = now + self._flush_interval_s
            if self._has_flushable() and not self._defer_flush(now):
                self._flush()
        if expire and now >= self._next_timeout_check:
            timeout_s = self.ledger.timeout_s
            self._next_timeout_check = now + min(1.0, max(0.01, timeout_s / 20))
            calls = self.ledger.expire(now)
            if calls.fails:
                self._user_calls(calls)
        if self.shedder is not None:
            line = self.shedder.interval_report(now)
            if line is not None:
                logger.warning("%s:%d: %s", self.component_id, self.task_id, line)
        if not self.chained or now < self._next_chain_timers:
            return
        self._next_chain_timers = now + CHAIN_TIMERS_S
        for m in self.chained:  # their flushes and ticks (their queues hold only ticks)
            if m.state == "running":
                if m.outbox.pending_emits:  # (else retried only when fed again)
                    m.outbox.try_flush_pending()
                m._timers(False)
                if m.queue.size():
                    m.queue.consume(m.handle)

    def _defer_flush(self, now: float) -> bool:
        """A chained task's flush waits while it is still emitting, up to
        ``CHAIN_FLUSH_DEFER`` flush intervals: its host's loop checks the clock between
        tuples, so a plain timer would send a small frame every interval while a stream
        flows, where a task of its own flushes between passes over its queue (each frame
        costs its receiver an actor call: benchmarks/peers.py, chained rows). A pause in
        its emits, or the bound, flushes it."""
        if self.chain_host is None:
            return False
        emitted = self.collector.emitted
        if emitted != self._flush_seen and now - self._flushed_at < (
                CHAIN_FLUSH_DEFER * self._flush_interval_s):
            self._flush_seen = emitted
            return True
        self._flush_seen, self._flushed_at = emitted, now
        return False

    def _wait_limit(self) -> float | None:
        """How long an idle wait may last: until the next flush while something waits to
        leave, else unbounded (None: the wait strategy's own)."""
        limit = None
        if self._next_flush != float("inf") and self._has_flushable():
            limit = max(0.0, self._next_flush - time.monotonic())
        for m in self.chained:
            lm = m._wait_limit()
            if lm is not None and (limit is None or lm < limit):
                limit = lm
        return limit

    def start(self) -> None:
        """Call ``open``/``prepare`` and start the executor thread (the chained tasks'
        ``prepare`` first, last task first, so a tuple never reaches an unprepared bolt).

        Raises:
            Exception: what ``open``/``prepare`` raised (also reported; state "failed").
        """
        for m in reversed(self.chained):  # (no thread: this one runs them)
            m._open()
        self._open()
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=f"executor-{self.component_id}-{self.task_id}")
        self._thread.start()

    def end_in_chain(self) -> None:
        """A chained task's end, on its host's thread, once its input has ended: the
        bolt's ``finish()`` (with checkpoints it ran when its input's data ended), then its
        own end of stream (which ends the tasks chained after it)."""
        if self.state != "running":
            return
        if self.checkpoint is None:
            try:
                self.obj.finish()
            except Exception as e:
                self.errors.report(e, "finish")
        try:
            self._end_stream()
            self._report_ended()
        finally:
            self.finished_at = time.time()
            self.state = "done" if not self._stop else "killed"
            self.done.set()

    def finish_pending_input(self) -> None:
        """Process input gathered but not yet run (before a checkpoint's snapshot); none
        here (``BoltExecutor``: a ``BatchBolt``'s batch)."""

    def _poll_checkpoints(self) -> int:
        """The loops' one call into checkpointing, for this task and the tasks chained
        into it (executor thread; after a rollback it waits until all are resumed):
        ``GO``, ``END`` or ``REWOUND`` (see ``actors.state._task.poll_chain``)."""
        return poll_chain(self, (self, *self.chained))

    def _report_ended(self) -> None:
        """Tell the checkpoint coordinator this task takes part no more."""
        if self.checkpoint is not None:
            self.checkpoint.report("ended", self.task_id)

    def _open(self) -> None:
        """``open``/``prepare`` (see :meth:`start`), without the thread."""
        self.state = "starting"
        try:
            self._open_component()
            if self.checkpoint is not None:
                self.checkpoint.open()
            elif isinstance(self.obj, _Stateful):  # no checkpoints: a state of its own
                self.obj.init_state(KeyValueState(component=self.component_id,
                                                  task=self.task_id))
        except Exception as e:
            self.errors.report(e, self._OPEN_CALL)
            self.state = "failed"
            raise
        self.started_at = time.time()
        if self._flush_interval_s:
            self._next_flush = time.monotonic() + self._flush_interval_s
        self.state = "running"

    def run(self) -> None:
        """The executor thread: Storm's spout or bolt loop until end of stream or stop."""
        try:
            self._loop()
            if not self._stop:
                self._end_stream()
                self._report_ended()
        except Exception as e:  # a bug of ours, not user code: make it visible
            logger.exception("%s:%d: executor loop crashed", self.component_id, self.task_id)
            self.errors.report(e, "executor loop")
            self.state = "failed"
        finally:
            self.finished_at = time.time()
            if self.state != "failed":
                self.state = "done" if not self._stop else "killed"
            self.done.set()
            for m in self.chained:  # ended with their input, unless this loop did not
                if not m.done.is_set():
                    m.finished_at = self.finished_at
                    m.state = "killed" if self._stop else "failed"
                    m.done.set()

    def _end_stream(self) -> None:
        """Send end-of-stream after all data to every downstream task, push it all out, and
        wait until every destination has acknowledged it: a frame lost meanwhile (a
        receiver or transfer actor restarted) is found while waiting, and the end marker
        is sent again (``ActorSink``); a task that stopped waiting at hand-over would
        leave a receiver without its upstream's end for good."""
        self.state = "ending"
        self.flush_acks()
        for t in self.destinations:
            self.outbox.transfer(t, _EOS_MSG)
        idle = 0
        while not self._stop:
            gen = self.rollback_while_ending
            if gen is not None:  # receivers drop our frames of older epochs from now on:
                self.rollback_while_ending = None  # the end marker goes again, anew
                self.outbox.clear()
                self.checkpoint.reset_sinks(gen)
                for t in self.destinations:
                    self.outbox.transfer(t, _EOS_MSG)
            self.queue.consume(self.handle)  # keep draining our own queue (flushes, acks)
            self.flush_acks()
            if (self.outbox.try_flush_pending() and self.outbox.try_flush_batches()
                    and self.outbox.delivered()):
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

    def set_draining(self) -> None:
        """Drain (any thread; applied by the executor thread): a spout takes no new input,
        emits its replays, then ends its stream (``Spout.drain``); a deactivated spout is
        activated for that. No effect on bolts: they end when their inputs have."""
        self._want_drain = True
        self._want_active = True
        self.wakeup.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (kill), interrupt blocked receivers, call ``close``/``cleanup``;
        waits up to ``timeout`` s for the executor thread."""
        self._stop = True
        for m in self.chained:
            m._stop = True
        self.wakeup.set()
        self.queue.interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self._close_component()
        except Exception as e:
            self.errors.report(e, self._CLOSE_CALL)
        for m in self.chained:
            m.stop(timeout)

    #: the user calls that open and close the component, as errors name them
    _OPEN_CALL = _CLOSE_CALL = ""

    def _open_component(self) -> None:
        """Call the component's ``open`` (a spout) or ``prepare`` (a bolt)."""
        raise NotImplementedError

    def _close_component(self) -> None:
        """Call the component's ``close`` (a spout) or ``cleanup`` (a bolt)."""
        raise NotImplementedError

    def _component_object(self, obj, topology: StormTopology, conf: dict):
        """The object this task runs for its component's ``obj`` (the topology's instance,
        which the task's copy of the topology holds) in ``topology`` submitted with
        ``conf``; a subclass may wrap it."""
        return obj

    def stats(self, interval: IntervalMetrics | None = None) -> TaskStats:
        """This task's :class:`actors._stats.TaskStats` (counters, queue, backpressure,
        errors), with the fields of metrics ``interval`` when given. Any thread."""
        return task_stats(self, interval)

