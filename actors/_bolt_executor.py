"""Storm's ``BoltExecutor``: the bolt loop (and the acker's) over
:class:`actors.ExecutorCore`'s rooms."""

from __future__ import annotations

import time

from actors._acker import AckerLedger
from actors._acking import BoltLedger
from actors._collectors import BoltCollector
from actors._executor import ExecutorCore
from actors._streams import BARRIER_STREAM, DRAINED_STREAM, EOS_STREAM, FLUSH, TICK_STREAM
from actors._two_phase import TwoPhaseCommitExecutor
from actors.state._loop import END
from actors.state._plan import checkpointed
from actors.windowing import WindowedBoltExecutor
from actors.windowing.persistent import PersistentWindowedBoltExecutor
from backpressure import SITE_QUEUE
from topology import (
    SYSTEM_COMPONENT_ID,
    SYSTEM_TICK_STREAM_ID,
    TICK_FIELDS,
    BatchBolt,
    BoundedMultiInput,
    StormTopology,
    Tuple,
    WindowedBolt,
)
from topology._two_phase import TwoPhaseCommitSink
from topology.joins import IntervalJoinBolt

#: what an input sends in line with its data: parked with it while the task aligns
_CHANNEL_MARKERS = (BARRIER_STREAM, EOS_STREAM, DRAINED_STREAM)
#: the system task id a tick comes from (Storm's ``Constants.SYSTEM_TASK_ID``)
SYSTEM_TASK_ID = -1


class BoltExecutor(ExecutorCore):
    """A bolt or acker task (see :class:`ExecutorCore` for the arguments).

    Tick tuples (Storm's ``topology.tick.tuple.freq.secs``, for user bolts): the loop's
    timer puts one into the task's own receive queue at each period, behind the data (or,
    with ``topology.executor.control.receive.buffer.size``, into its control receive
    queue, ahead of the data), with a non-blocking insert; a tick that finds the queue
    full, or the previous tick still
    queued, stays due, and ticks that fall due meanwhile collapse into it (Storm's
    ``Executor.setupTicks`` publishes from the worker's user timer with a blocking
    ``JCQueue.publish``, so ticks pile up behind a slow bolt).
    """

    #: the tick timer's clock (monotonic seconds; a test may drive it)
    clock = staticmethod(time.monotonic)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        period = None if self.is_acker else self.conf["topology.tick.tuple.freq.secs"]
        #: seconds between ticks (None: no ticks)
        self.tick_s: float | None = period
        self._next_tick = float("inf")  # (set at prepare: _open)
        self._tick_due = False
        self._tick_queued = False
        self._tick_el = (SYSTEM_TASK_ID, TICK_STREAM, [period])
        #: ticks given to the bolt
        self.ticks = 0
        # a bolt told when an upstream task sends no new data (a windowed bolt's
        # watermark) and when a pass over the queue is done (its replays after the end)
        multi = isinstance(self.obj, BoundedMultiInput)
        self._upstream_ended = self.obj.upstream_ended if multi else None
        self._end_of_pass = self.obj.end_of_pass if multi else None
        #: upstream tasks drained or ended; DRAINED passed on once all inputs are
        self.upstream_drained: set[int] = set()

    _OPEN_CALL, _CLOSE_CALL = "prepare", "cleanup"

    def _make_ledger(self, topology: StormTopology, c: dict):
        ackers, spouts = topology.acker_tasks, topology.spout_tasks
        if self.is_acker:
            return AckerLedger(ackers, spouts, float(c["topology.message.timeout.secs"]))
        if not ackers:
            return None
        return BoltLedger(ackers, spouts, topology.ackers_in_spouts, self._random_bits())

    def _open_component(self) -> None:
        self.obj.prepare(self.conf, self.context, self.collector)

    def _close_component(self) -> None:
        self.obj.cleanup()

    @property
    def acked(self) -> int:
        """Bolt: tuples acked; acker: trees completed."""
        return self.ledger.acked if self.is_acker else self._acked + self.collector.acked

    @property
    def failed(self) -> int:
        return self.ledger.failed if self.is_acker else self._failed + self.collector.failed

    def _component_object(self, obj, topology, conf: dict):
        """A ``TwoPhaseCommitSink`` runs inside a :class:`TwoPhaseCommitExecutor`. A
        :class:`WindowedBolt` runs inside a :class:`WindowedBoltExecutor` (Storm's),
        or, in a topology that runs checkpoints, a :class:`PersistentWindowedBoltExecutor`
        (its windows are checkpointed; the plan refuses a ``StatefulWindowedBolt`` there
        without ``with_persistence()``)."""
        if isinstance(obj, TwoPhaseCommitSink):  # (its topology always checkpoints)
            return TwoPhaseCommitExecutor(obj)
        if not isinstance(obj, WindowedBolt):
            return obj
        if isinstance(obj, IntervalJoinBolt):  # (a WindowedBolt for its builder only)
            from actors.windowing import interval
            return (interval.PersistentIntervalJoinExecutor(obj) if checkpointed(topology, conf)
                    else interval.IntervalJoinExecutor(obj))
        if checkpointed(topology, conf):
            return PersistentWindowedBoltExecutor(obj)
        return WindowedBoltExecutor(obj)

    def _open(self) -> None:
        super()._open()
        if self.tick_s is not None:  # the first tick one period after prepare (the actors
            self._next_tick = self.clock() + self.tick_s  # are all built before any starts)

    def _make_collector(self, routers: dict) -> BoltCollector:
        # a BatchBolt's inputs gathered in this pass over the queue
        self._batch_in: list | None = [] if isinstance(self.obj, BatchBolt) else None
        self._batch_max = ((self._batch_in is not None and self.obj.max_batch_size)
                           or self.outbox.batch_size)
        return BoltCollector(self.component_id, self.spec.streams, routers, self.outbox,
                             self.errors, self.flush_acks, self.ledger,
                             bool(self.obj.auto_ack))

    def handle(self, el) -> None:
        """Process one element of the receive queue: a tuple, an end-of-stream marker, an
        acking message or a FlushTuple (executor thread)."""
        if el is FLUSH:
            self._flush()
            return
        src, s, values = el[0], el[1], el[2]
        if self.blocked and src in self.blocked and (s >= 0 or s in _CHANNEL_MARKERS):
            self.checkpoint.park(el)  # aligning: this input's barrier already came
            return
        if s < 0:
            if s == TICK_STREAM and src == SYSTEM_TASK_ID:
                self._tick(values)
            else:
                self._control(src, s, values)
            return
        comp, sid, fields = self.streams[s]
        tup = Tuple(values, fields, comp, src, sid, el[3] if len(el) > 3 else None)
        if self._batch_in is not None:
            self._batch_in.append(tup)
            if len(self._batch_in) >= self._batch_max:
                self.run_batch()
            return
        self._execute(tup)

    def _execute(self, tup: Tuple) -> None:
        """Run the bolt on one data tuple (executor thread; a chained task's too, called by
        its ``ChainInserter``): user code that raises is reported and its tuple fails (it
        replays); with ``auto_ack`` a tuple it left open is acked. One execute in
        ``topology.stats.sample.rate``'s is timed (a countdown, not a modulo: this runs per
        tuple, benchmarks/peers.py chained rows)."""
        col = self.collector
        col.current = tup
        n = self._sample_in - 1
        if n:
            self._sample_in = n
        else:
            self._sample_in = self._sample_every
            t0 = time.perf_counter()
        try:
            self.obj.execute(tup)
        except Exception as e:  # user code: report, fail the tuple (it replays), go on
            self.errors.report(e, "execute")
            col.fail(tup)
        else:
            if not tup.done and col.auto_ack:
                if tup.anchors is None:  # untracked: what ack would do, without the call
                    tup.done = True
                    col.acked += 1
                else:
                    col.ack(tup)
        finally:
            col.current = None
        if not n:
            self.latency_sum_s += time.perf_counter() - t0
            self.latency_n += 1
        self.executed += 1

    def handle_timed(self, el, arrived_at: float) -> None:
        """:meth:`handle` for a shedding bolt: a data tuple whose time in the queue (from
        ``arrived_at``, monotonic s) is past the target is shed, not executed (CoDel's
        sojourn time, backpressure/_shed.py); markers, ticks and flushes never are."""
        if el is not FLUSH and el[1] >= 0:
            shedder = self.shedder
            if shedder.on_dequeue(time.monotonic() - arrived_at):
                shedder.count(self.stream_name(el[1]), SITE_QUEUE)
                return
        self.handle(el)

    def shed_expired(self, run: list, arrived_at: float) -> None:
        """A shedding bolt's bulk step (``JCQueue.consume``'s ``expired``): ``run``, what
        is left of one insert, arrived at ``arrived_at`` (monotonic s), past the target:
        its data tuples are shed and counted per stream in one pass; its markers, ticks
        and flushes are handled, in order, as always."""
        shedder = self.shedder
        shedder.on_dequeue(time.monotonic() - arrived_at)
        by: dict[int, int] = {}
        for el in run:
            if el is not FLUSH and el[1] >= 0:
                by[el[1]] = by.get(el[1], 0) + 1
            else:
                self.handle(el)
        for s, k in by.items():
            shedder.count(self.stream_name(s), SITE_QUEUE, k)

    def _control(self, src: int, s: int, values) -> None:
        super()._control(src, s, values)
        if s == EOS_STREAM:
            self._on_drained(src)

    def _on_drained(self, src: int) -> None:
        if self.is_acker or src in self.upstream_drained:
            return
        self.upstream_drained.add(src)
        if self._upstream_ended is not None:
            try:
                self._upstream_ended(src)
            except Exception as e:  # user code (a windowed bolt's execute): report, go on
                self.errors.report(e, "execute")
        if (not self._drained_sent and self.upstream_open
                and self.upstream_open <= self.upstream_drained):
            if self.checkpoint is not None:
                self._end_of_input()
            else:
                self._drained_sent = True
                self.send_drained()

    def _end_of_input(self) -> None:
        """With checkpoints, every input has sent end of data (FLIP-147's end of input,
        apart from the end of stream): ``finish()`` runs (unless the restored checkpoint
        records that it ran), DRAINED goes on behind its output, and the coordinator is
        told; the task keeps taking barriers and commits until the final one. A
        ``finish()`` that raises is reported with its component and task, and fails the
        round (the coordinator rolls back, or fails the topology if it keeps raising)."""
        cp = self.checkpoint
        if not cp.finish_ran:
            if self._batch_in:
                self.run_batch()
            try:
                self.obj.finish()
            except Exception as e:  # user code: reported; the end is not reached
                self.errors.report(e, "finish")
                cp.report("finish_failed", self.task_id, cp.gen,
                          f"{self.component_id}:{self.task_id}: finish() raised "
                          f"{type(e).__name__}: {e}")
                return
        self._drained_sent = True
        self.send_drained()
        cp.end_of_input()

    def reset_end_of_input(self) -> None:
        super().reset_end_of_input()
        self.upstream_drained.clear()

    def _tick(self, values: list) -> None:
        """Give the bolt a tick tuple (not anchored, not acked, not counted as executed);
        a ``BatchBolt`` runs the inputs gathered before it first."""
        self._tick_queued = False
        if self._batch_in:
            self.run_batch()
        tup = Tuple(values, TICK_FIELDS, SYSTEM_COMPONENT_ID, SYSTEM_TASK_ID,
                    SYSTEM_TICK_STREAM_ID)
        tup.done = True  # an ack or fail of a tick does nothing
        col = self.collector
        col.current = tup
        try:
            self.obj.execute(tup)
        except Exception as e:  # user code: report, go on
            self.errors.report(e, "execute (tick)")
        finally:
            col.current = None
        self.ticks += 1

    def _timers(self, expire: bool) -> None:
        super()._timers(expire)
        if self.tick_s is None:
            return
        now = self.clock()
        if now >= self._next_tick:
            self._tick_due = True  # ticks due meanwhile collapse into this one
            self._next_tick += self.tick_s
            if self._next_tick <= now:  # behind by more than a period: start afresh
                self._next_tick = now + self.tick_s
        if self._tick_due and not self._tick_queued and self._ticking():
            if self.queue.try_publish_control(self._tick_el):
                self._tick_due, self._tick_queued = False, True

    def _ticking(self) -> bool:
        """Ticks run while input may come: until every input has ended, or, with
        checkpoints, until the task's input has ended and ``finish()`` has run (a tick
        after it would emit behind the end of data; Flink quiesces its timers when an
        operator finishes). A rollback that rewinds the input starts them again."""
        return bool(self.upstream_open) and not (self.checkpoint is not None
                                                 and self.checkpoint.input_ended)

    def finish_pending_input(self) -> None:
        if self._batch_in:
            self.run_batch()

    def clear_io(self) -> None:
        """As :meth:`ExecutorCore.clear_io`, with a ``BatchBolt``'s gathered tuples; a tick
        it dropped is due again."""
        super().clear_io()
        if self._batch_in:
            self._batch_in = []
        if self._tick_queued:
            self._tick_queued, self._tick_due = False, True

    def _wait_limit(self) -> float | None:
        limit = super()._wait_limit()
        if self.tick_s is None or self._tick_queued or not self._ticking():
            return limit
        until_tick = max(0.0, self._next_tick - self.clock())
        return until_tick if limit is None else min(limit, until_tick)

    def run_batch(self) -> None:
        """A ``BatchBolt``'s ``execute_batch`` on the inputs gathered so far (executor
        thread): then every input it left open is acked, or failed if it raised."""
        batch, self._batch_in = self._batch_in, []
        if not batch:
            return
        col = self.collector
        t0 = time.perf_counter()
        try:
            self.obj.execute_batch(batch)
        except Exception as e:  # user code: report, fail what it left open, go on
            self.errors.report(e, "execute_batch")
            for tup in batch:
                col.fail(tup)
        else:
            if col.auto_ack:
                for tup in batch:
                    col.ack(tup)
        self.latency_sum_s += time.perf_counter() - t0
        self.latency_n += len(batch)
        self.executed += len(batch)

    def _loop(self) -> None:
        q, outbox = self.queue, self.outbox
        pending = outbox.pending_emits
        timed = self.shedder is not None
        handle = self.handle_timed if timed else self.handle
        expired = (self.shedder.target_s, self.shed_expired) if timed else None

        cp = self.checkpoint
        requests = cp.inbox if cp is not None else ()

        def keep_running() -> bool:  # (a coordinator message ends the pass: it is polled)
            return not pending and not requests

        idle = bp_idle = 0
        is_acker = self.is_acker
        while not self._stop:
            if cp is not None and self._poll_checkpoints() == END:  # (a rollback waits
                return  # here; finish() ran when the input's data ended)
            self._timers(is_acker)
            if not pending or outbox.try_flush_pending():
                bp_idle = 0
                if q.consume(handle, keep_running, timed, expired):
                    if self._batch_in:
                        self.run_batch()
                    if self._end_of_pass is not None and self.upstream_drained:
                        try:
                            self._end_of_pass()
                        except Exception as e:  # user code (a window's execute)
                            self.errors.report(e, "execute")
                    idle = 0
                    continue
                # (with checkpoints a bolt ends on the final commit, above; an acker,
                # outside the rounds, once every input has ended)
                if ((cp is None or is_acker) and not self.upstream_open and q.size() == 0
                        and q.is_empty_overflow()):
                    try:
                        self.obj.finish()
                    except Exception as e:
                        self.errors.report(e, "finish")
                    return
                idle = self._idle(idle)
            else:
                bp_idle = self._bp_idle(bp_idle)
