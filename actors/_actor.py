"""``ExecutorActor``: one Ray actor per task, carrying out an :class:`ExecutorCore`.

Concurrency groups keep control off the data path: ``data`` (1 thread) only decodes and
enqueues batches from executors of the same worker, and may block while the receive queue
is full, which is what holds the sender's credit; ``remote`` (1 thread) takes batches from
the worker's transfer actor and never blocks (a full queue sends them to the overflow
queue, Storm 2.0's receiving side); ``control`` (1 thread) answers stats, backpressure
statuses and shutdown at once; ``wait`` (1 thread) parks in ``wait_done`` so the driver
waits without polling.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections import deque

import ray
from ray.exceptions import RayActorError

from actors._codec import FrameError, decode_batch, decode_status, encode_batch, encode_transfer
from actors._coordinator import coordinator_name
from actors._executor import EOS_STREAM, ExecutorCore, make_executor
from actors._gc import freeze_startup_objects, tune_gc
from actors._metrics import RayMetricsExport, TaskMetrics
from actors._routing import TASK, WORKER, actor_name
from actors._stats import TaskStats
from actors._store import StoredTopology, first_start
from actors._transfer import FRAME_LOST
from backpressure import BackPressureStatus

logger = logging.getLogger("storm_on_ray.actor")

_EOS_ITEM = (EOS_STREAM, None)

#: Seconds a destination whose frames were lost (its actor died, or its worker's transfer
#: actor answered FRAME_LOST) stays at full load for the load-aware shuffle
#: (``ActorSink.load``): Storm's load refresh period. A dead actor's calls fail at once, so
#: its credits come back at once and, without this, it would look idle and get the largest
#: share, all lost. Afterwards its share probes it again: a restarting actor's calls wait
#: in Ray's queue (its credits fill: still full load), a restarted one acknowledges, a
#: dead one fails again.
LOST_HOLD_S = 1.0


def _deliver(transfer, src_worker: int, dest_task: int, frame: bytes):
    """Send one frame to the transfer actor of ``dest_task``'s worker (a one-frame payload)."""
    return transfer.deliver.remote(encode_transfer(src_worker, [(dest_task, frame)]))


class ActorSink:
    """Sends a batch to another executor as one actor call: a sliding window, never blocking.

    Frames to the destination are numbered from 0; each call returns the receiver's
    cumulative acknowledgement (the highest seq it has fully inserted). At most
    ``max_inflight`` frames may be sent and not yet acknowledged; the receiver acknowledges
    a frame only once it is inside its bounded receive queue (same worker), or inside the
    destination's receive or overflow queue (another worker, through the transfer actors).
    With the window full the sink takes nothing (returns 0), the sender's emit goes to
    ``pending_emits``, and memory in transit stays bounded by
    ``max_inflight × topology.producer.batch.size`` per (sender, receiver) pair.

    Failures: a call that fails because the receiver (or the transfer actor in between)
    died, or that the transfer actor answers with :data:`FRAME_LOST`, means frames may be
    lost. The sink then starts a new epoch (a larger number, seq from 0; see
    ``Inbound.accept_frame``), forgets the calls in flight (their tuples replay through
    acking) and, if this task already ended its stream, sends its end-of-stream marker
    again. Ray queues calls to an actor while it restarts, so nothing else waits.

    Args:
        send: ``send(frame) -> ObjectRef``: the receiver's ``receive``, or for a task in
            another worker, a one-frame delivery to that worker's transfer actor (whose
            reply is a list of acknowledgements).
        remote: True for a task in another worker: a send to it fails at once while its
            worker's last :class:`BackPressureStatus` names it backlogged. False for a back
            edge (one that closes a cycle), even across workers: those never hold.
    """

    __slots__ = ("_send", "_src", "_max", "_inflight", "_core", "dest", "sent_batches",
                 "_remote", "_may_send", "_next", "_acked", "_epoch", "resets",
                 "_frame_limit", "cut_frames", "_lost_at", "_progress_at")

    def __init__(self, send, src_task: int, dest_task: int, max_inflight: int,
                 core: ExecutorCore, remote: bool = False) -> None:
        self._send = send
        self._remote = remote
        self._src = src_task
        self.dest = dest_task
        self._max = max_inflight
        self._inflight: list = []
        self._core = core
        self._may_send = core.policy.may_send
        self._next = 0  # seq of the next frame
        self._acked = -1  # highest seq the receiver has acknowledged
        # a restarted sender starts above any epoch of its earlier incarnation
        self._epoch = time.time_ns() if core.inbound.reconstructed else 0
        self.sent_batches = 0
        self.resets = 0
        self._lost_at = float("-inf")  # monotonic time of the last reset
        # monotonic time of the last acknowledgement, or of the send that found nothing
        # unacknowledged: how long the receiver has been silent (see load)
        self._progress_at = time.monotonic()
        # a frame stays within half the receive queue's byte bound (and the frame cap), so
        # one frame never needs more than the queue has (docs/overload.md, byte bounds)
        c = core.conf
        limit, bound = c["topology.transfer.max.frame.bytes"], c[
            "topology.executor.receive.buffer.bytes"]
        self._frame_limit = min(limit, max(1, bound // 2)) if bound else limit
        #: batches sent in more than one frame because of the frame byte limit
        self.cut_frames = 0

    def _reap(self) -> None:
        # each call's reply is a future (Ray completes it from its own thread), so checking
        # costs no GIL hand-off: a ray.wait here showed up in py-spy profiles of
        # benchmarks/acking.py's spout (it releases the GIL, and taking it back waits behind
        # the receive thread; see docs/benchmarks.md)
        ready, waiting = [], []
        for f in self._inflight:
            (ready if f.done() else waiting).append(f)
        if not ready:
            return
        self._inflight = waiting
        lost = False
        for fut in ready:
            try:
                ack = fut.result()
            except RayActorError:  # the receiver or the transfer actor died
                lost = True
                continue
            except Exception as e:  # the receiver raised: a bug, make it visible
                self._core.errors.report(e, f"send to task {self.dest}")
                continue
            if isinstance(ack, list):
                ack = ack[0] if ack else None
            if ack == FRAME_LOST:
                lost = True
            elif isinstance(ack, int) and ack > self._acked:
                self._acked = ack
                self._progress_at = time.monotonic()
        if lost:
            self._reset()

    def _reset(self) -> None:
        """Frames may be lost: start a new epoch (see the class docstring)."""
        self.resets += 1
        self._lost_at = time.monotonic()
        self._epoch = max(time.time_ns(), self._epoch + 1)
        self._next, self._acked, self._inflight = 0, -1, []
        if self._core.state in ("ending", "done"):  # the receiver may lack our end marker
            self._send_frame([_EOS_ITEM])

    def _wake_sender(self, _fut) -> None:
        self._core.wakeup.set()

    def unacked(self) -> int:
        """Frames sent to the destination and not yet acknowledged (reaps finished calls)."""
        if self._inflight and self._next - 1 > self._acked:
            self._reap()
        return self._next - 1 - self._acked

    def busy(self) -> bool:
        """True while an earlier batch to this destination is unacknowledged (non-blocking)."""
        return self.unacked() > 0

    def load(self) -> float:
        """How loaded the destination looks from this sender: the load-aware shuffle's
        signal (``Outbox.load``). Storm's ``LoadAwareShuffleGrouping`` weighs by the queue
        fill that receiving workers report; here it is what the sender knows, no message:

        * below 1.0, the credits in use beyond the first, as a fraction of the others:
          Nagle's rule keeps one frame in flight while the next fills, a healthy
          receiver's normal state, not load (so while nothing lags, the shares stay even);
        * 1.0 and above, it takes nothing now, and the excess says for how long, in
          seconds: every credit in use (``max_inflight`` frames unacknowledged: a slow
          receiver, or a hung or restarting one, which acknowledges nothing), ``1.0 +`` the
          seconds since its last acknowledgement; frames to it lost in the last
          :data:`LOST_HOLD_S` (a dead receiver), ``1.0 + LOST_HOLD_S``; refused by the
          flow-control policy (a task in another worker that its worker names
          backlogged), 1.0. When every target takes nothing, the shuffle keeps to those
          that stopped most recently, so a hung or dead one is not picked while a live
          one is merely full.

        Non-blocking (reaps finished calls); executor thread.
        """
        now = time.monotonic()
        used = self.unacked()  # (reaps: a loss found here starts the hold)
        if now - self._lost_at < LOST_HOLD_S:
            return 1.0 + LOST_HOLD_S
        if used >= self._max:
            return 1.0 + max(0.0, now - self._progress_at)
        if self._remote and self.dest in self._core.policy.backlogged_remote():
            return 1.0
        return max(0, used - 1) / (self._max - 1)  # (here _max > used >= 0, so _max >= 2)

    def __call__(self, items: list) -> int:
        if self._remote and not self._may_send(self.dest):  # the flow-control policy
            return 0
        if self._next - 1 - self._acked >= self._max and self.unacked() >= self._max:
            return 0
        return self._send_frame(items)

    def _send_frame(self, items: list) -> int:
        """Send a prefix of ``items`` as one frame; returns how many it took: all, or
        fewer when the frame would pass the frame byte limit (the rest stay in the
        batch). One tuple always goes, alone if it must."""
        n = len(items)
        try:
            frame = encode_batch(self._src, items, self._next, self._epoch)
            while len(frame) > self._frame_limit and n > 1:
                n = max(1, n * self._frame_limit // len(frame))
                frame = encode_batch(self._src, items[:n], self._next, self._epoch)
        except TypeError:
            n = len(items)
            frame = self._encode_skipping_bad(items)
        if n < len(items):
            self.cut_frames += 1
        fut = self._send(frame).future()
        fut.add_done_callback(self._wake_sender)  # a credit is back: retry pending_emits
        self._inflight.append(fut)
        if self._next - 1 == self._acked:  # nothing was unacknowledged: the wait starts
            self._progress_at = time.monotonic()
        self._next += 1
        self.sent_batches += 1
        return n

    def _encode_skipping_bad(self, items: list) -> bytes:
        """The frame of ``items`` without those the codec cannot carry: each is reported,
        and with acking its trees fail now (reason ``"could not serialise: <error>"``), so
        its spout replays it or, at ``topology.max.replays``, gives it up as a dead letter
        (instead of waiting for the timeout). Runs on the executor thread (every send
        does), so the task's ledger is at hand."""
        good = []
        ledger = self._core.ledger
        for it in items:
            try:
                encode_batch(self._src, [it])
                good.append(it)
            except TypeError as e:
                self._core.errors.report(e, "emit (serialisation)")
                if ledger is not None and len(it) > 2 and it[0] >= 0 and it[2]:
                    ledger.fail_roots(it[2][::2], f"could not serialise: {e}")
        return encode_batch(self._src, good, self._next, self._epoch)

    def outstanding(self) -> int:
        return self._next - 1 - self._acked


@ray.remote(concurrency_groups={"data": 1, "remote": 1, "control": 1, "wait": 1})
class ExecutorActor:
    """A Storm executor as a Ray actor (one task). See :class:`ExecutorCore`.

    Restarts (Storm's supervisor restarting a dead worker): submitted with Ray's
    ``max_restarts`` (``topology.executor.max.restarts``), so when the process dies Ray
    runs ``__init__`` again in a new one. That instance rejoins by itself: it finds the
    executors and transfer actors it sends to by their actor names, takes the current
    backpressure status from its worker's transfer actor, tells it that its task is not
    backlogged (its queue is new and empty), counts upstream tasks that already ended their
    stream as ended, and starts (``open``/``prepare`` again). What the dead instance held
    (queued tuples, a spout's pending tuples, an acker's trees) is lost; with acking, those
    trees fail or time out and the spouts replay them.

    Args:
        topology_name: the name given at submit.
        topology: a ``StoredTopology``, read from the GCS here (``actors/_store.py``: so
            that a restart does not depend on an object the driver owns), or the frozen
            ``StormTopology`` itself (tests that build an actor by hand).
        conf: the validated topology config.
        task_id: the task this actor runs.
        task_worker: task id → worker index.
        prefix: the actor-name prefix of this submit (see :func:`actor_name`); None for
            an unnamed actor that cannot rejoin.
    """

    def __init__(self, topology_name, topology, conf, task_id, task_worker,
                 prefix: str | None = None) -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        # The executor thread rarely blocks, so the receive and control threads wait for the
        # GIL up to the switch interval (5 ms by default) before they can take a batch or a
        # backpressure status; see benchmarks/halt_lag.py for the effect.
        sys.setswitchinterval(float(os.environ.get("STORM_ON_RAY_SWITCH_INTERVAL", "0.0005")))
        if isinstance(topology, StoredTopology):
            topology = topology.load()
        self.core = make_executor(topology_name, topology, conf, task_id, task_worker)
        tune_gc(self.core.conf["topology.executor.gc.threshold"])
        self._max_frame = self.core.conf["topology.transfer.max.frame.bytes"]
        self._sinks: list[ActorSink] = []
        self._transfer = None
        self._bp_thread: threading.Thread | None = None
        self._prefix = prefix
        # flow-control signals out: the watermark policy's throttle coordinator, the
        # spouts upstream that a NAK slows down
        self._coordinator = None
        self._nak_to: list = []
        #: the direct status path: the executors in other workers that send to this task
        self._status_to: list = []
        self._direct = bool(self.core.conf["topology.backpressure.status.direct"])
        if prefix is not None and not first_start(prefix, actor_name(None, TASK, task_id)):
            self.core.inbound.reconstructed = True
            self._rejoin()

    def _rejoin(self, timeout: float = 60.0) -> None:
        """Wire and start this restarted instance (see the class docstring)."""
        core, prefix = self.core, self._prefix
        logger.warning("%s:%d: restarted by Ray; rejoining topology %r", core.component_id,
                       core.task_id, core.topology_name)
        handles = {t: ray.get_actor(actor_name(prefix, TASK, t)) for t in core.destinations
                   if t != core.task_id}
        workers = {core.task_worker.get(t, 0) for t in core.destinations} | {core.worker}
        transfers = {}
        if len(set(core.task_worker.values())) > 1:
            transfers = {w: ray.get_actor(actor_name(prefix, WORKER, w)) for w in workers}
        coordinator = None
        if core.policy.name == "watermark":
            coordinator = ray.get_actor(coordinator_name(prefix))
        if core.policy.name == "nak":
            handles.update({t: ray.get_actor(actor_name(prefix, TASK, t))
                            for t in core.upstream_spouts})
        if self._direct:
            handles.update({t: ray.get_actor(actor_name(prefix, TASK, t))
                            for t in core.remote_upstream - core.back_sources})
        self.connect(handles, transfers, coordinator)
        if coordinator is not None:  # our flag died with us; a spout learns the throttle
            coordinator.rejoin.remote(core.task_id)
        if self._transfer is not None:
            if self._direct:
                self._ask_remote_destinations(handles)
            else:
                try:
                    for wire in ray.get(self._transfer.remote_statuses.remote(),
                                        timeout=timeout):
                        self.apply_backpressure(wire)
                except Exception as e:  # the transfer actor restarts too: statuses come
                    core.errors.report(e, "rejoin (backpressure status)")
            self._notify(core.inbound.current_report())
        ups = sorted(core.upstream_open)
        if ups:
            done = []
            for t in ups:
                try:
                    if ray.get(ray.get_actor(actor_name(prefix, TASK, t)).is_done.remote(),
                               timeout=timeout):
                        done.append(t)
                except Exception as e:  # restarting too: its end marker will come
                    core.errors.report(e, f"rejoin (state of task {t})")
            core.upstream_open.difference_update(done)
        self.start()

    def _ask_remote_destinations(self, handles: dict, timeout: float = 5.0) -> None:
        """The direct status path after a restart: ask each destination in another worker
        for its current report, all at once, briefly. One that is restarting too sends its
        report when it rejoins (to us among its senders), so we need not wait for it."""
        core = self.core
        dests = [t for t in core.destinations
                 if core.task_worker.get(t, 0) != core.worker and t not in core.back_dests
                 and t in handles]
        refs = {handles[t].backpressure_report.remote(): t for t in dests}
        ready = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)[0] if refs else []
        for ref in ready:
            try:
                self.task_status(*ray.get(ref)[:4])
            except Exception as e:  # restarting too: its report comes when it rejoins
                core.errors.report(e, f"rejoin (backpressure of task {refs[ref]})")

    @ray.method(concurrency_group="control")
    def connect(self, handles: dict, transfers: dict | None = None,
                coordinator=None) -> None:
        """Build one sink per destination task: our own queue for ourselves, a direct
        actor call for a task of this worker, the destination worker's transfer actor for a
        task of another worker.

        Args:
            handles: task id → executor handle, for every task.
            transfers: worker index → transfer actor (none for a one-worker topology). This
                worker's own one receives this task's backpressure reports.
            coordinator: the topology's throttle coordinator (policy "watermark"), which
                this task tells when its watermark flag changes.

        Raises:
            ValueError: a destination in another worker that has no transfer actor.
        """
        core = self.core
        transfers = transfers or {}
        self._transfer = transfers.get(core.worker)
        self._coordinator = coordinator
        if core.policy.name == "nak":
            self._nak_to = [handles[t] for t in core.upstream_spouts if t in handles]
        if self._direct:  # (back edges never hold: their senders need no status)
            self._status_to = [handles[t] for t in sorted(core.remote_upstream
                                                          - core.back_sources)
                               if t in handles]
        worker_of = core.task_worker
        sinks = {}
        for t in core.destinations:
            if t == core.task_id:
                sinks[t] = core.local_sink()
                continue
            w = worker_of.get(t, 0)
            back = t in core.back_dests  # closes a cycle: never blocks, never holds
            if w == core.worker:
                send = handles[t].receive_remote.remote if back else handles[t].receive.remote
                s = ActorSink(send, core.task_id, t, core.policy.credits(t), core)
            else:
                if w not in transfers:
                    raise ValueError(f"task {core.task_id}: task {t} is in worker {w}, which "
                                     f"has no transfer actor")
                s = ActorSink(functools.partial(_deliver, transfers[w], core.worker, t),
                              core.task_id, t, core.policy.credits(t), core,
                              remote=not back)
            self._sinks.append(s)
            sinks[t] = s
        core.connect(sinks)

    @ray.method(concurrency_group="control")
    def start(self) -> None:
        core = self.core
        self._metrics = TaskMetrics(core, core.conf["topology.stall.timeout.secs"])
        core.start()
        if core.conf["topology.executor.gc.threshold"]:
            freeze_startup_objects()
        threading.Thread(target=self._metrics_timer, daemon=True,
                         name=f"metrics-{core.task_id}").start()
        if (self.core.remote_upstream or self.core.back_sources
                or (self.core.policy.watches_fill and not self.core.is_spout)):
            self._bp_thread = threading.Thread(target=self._bp_check_timer, daemon=True,
                                               name=f"bp-check-{self.core.task_id}")
            self._bp_thread.start()

    def _metrics_timer(self) -> None:
        """Every ``topology.metrics.interval.secs``: close the metrics interval and export
        it through ``ray.util.metrics``; logs each backpressure-level change once."""
        core = self.core
        period = core.conf["topology.metrics.interval.secs"]
        try:
            export = RayMetricsExport(core.topology_name, core.component_id, core.task_id)
        except Exception as e:  # no metrics agent: the stats still carry everything
            core.errors.report(e, "metrics export")
            export = None
        level = "OK"
        while not core._stop:
            time.sleep(period)
            m = self._metrics.sample()
            if m.interval_s and m.busy_time_ms_per_second is not None:
                bound = core.policy.on_interval(m.executed_per_s or 0.0,
                                                m.busy_time_ms_per_second / 1000.0,
                                                core.queue.capacity, time.monotonic())
                if bound is not None:  # (Flink's buffer debloating: the queue's admission)
                    core.queue.capacity = bound
            if m.backpressure_level != level:
                level = m.backpressure_level
                logger.info("%s:%d: backpressure %s (%.0f ms/s held%s)", core.component_id,
                            core.task_id, level, m.backpressured_time_ms_per_second,
                            f", by task {m.backpressure_cause}"
                            if m.backpressure_cause is not None else "")
            if export is not None:
                export.record(core.stats(m))
            if core.done.is_set():
                return

    def _bp_check_timer(self) -> None:
        """Storm's backpressure-check timer, for this task: every
        ``topology.backpressure.check.millis``, clear the backlog once the overflow drained,
        and for a policy that watches the queue's fill, send the signal it asks for (the
        watermark flag to the coordinator, a NAK to the spouts upstream)."""
        core = self.core
        period = core.conf["topology.backpressure.check.millis"] / 1000.0
        policy, q = core.policy, core.queue
        watch = policy.watches_fill and not core.is_spout  # (a spout's queue holds acks)
        while not core._stop and not core.done.is_set():
            time.sleep(period)
            report = core.inbound.check_backpressure()
            if report is not None:
                self._notify(report)
            if watch:
                fill = (q.size() + q.overflow_count()) / q.capacity
                signal = policy.on_queue_fill(fill, time.monotonic())
                if signal is not None:
                    self._send_control(signal)

    def _send_control(self, signal) -> None:
        """Send a flow-control signal (fire and forget; a dead receiver is its own
        restart's problem, never this task's)."""
        try:
            if signal.kind == "flag" and self._coordinator is not None:
                self._coordinator.flag.remote(self.core.task_id, bool(signal.value))
            elif signal.kind == "nak":
                for h in self._nak_to:
                    h.flow_control.remote("nak", signal.value)
        except Exception as e:
            self.core.errors.report(e, "flow-control signal")

    @ray.method(concurrency_group="control")
    def flow_control(self, kind: str, value) -> None:
        """A flow-control signal for this task's policy (``FlowControlPolicy.on_control``):
        the watermark policy's throttle, a NAK. Wakes the executor thread."""
        self.core.policy.on_control(kind, value, time.monotonic())
        self.core.wakeup.set()

    def _notify(self, report: tuple) -> None:
        """Tell this task's backpressure report ``(task, backlogged, since, seq, reminder)``
        to its worker's transfer actor (the worker-level status, Storm's path) and, on the
        direct path, to each executor in another worker that sends to this task."""
        for h in self._status_to:
            try:
                h.task_status.remote(*report[:4])
            except Exception as e:  # a dead sender: its restart asks us (see _rejoin)
                self.core.errors.report(e, "backpressure status")
        if self._transfer is None:  # one worker: nobody to tell (a back edge's overflow)
            return
        try:
            self._transfer.task_status.remote(*report)
        except Exception as e:  # the transfer actor is gone: Ray restarts it
            self.core.errors.report(e, "backpressure report")

    @ray.method(concurrency_group="remote", enable_task_events=False)
    def receive_remote(self, frame: bytes) -> int | None:
        """Take a batch from another worker (through the transfer actor); never blocks.

        A full receive queue sends it to the overflow queue, and the first such batch
        (or every ``topology.backpressure.resend.size`` overflowed tuples after) is
        reported to the transfer actor, which tells the other workers. Bad frames are
        counted and dropped as in :meth:`receive`. Returns the sender's acknowledgement
        as :meth:`receive` does.
        """
        core = self.core
        try:
            src, epoch, seq, items = decode_batch(frame, self._max_frame, len(core.streams))
            ack, report = core.inbound.accept_frame(src, seq, items, True, epoch, len(frame))
        except (FrameError, ValueError) as e:
            self._bad_frame(e)
            return None
        if report is not None:
            self._notify(report)
        return ack

    @ray.method(concurrency_group="control")
    def task_status(self, task: int, backlogged: bool, since: float, seq: int) -> None:
        """A destination task's own backpressure report, sent by its executor (the direct
        status path, ``topology.backpressure.status.direct``): hold or resume sends to
        ``task``. ``since`` is the backlog's start (wall-clock s), ``seq`` the report's
        sequence number (older ones are ignored). Malformed arguments are counted as a bad
        frame and dropped."""
        if not (isinstance(task, int) and isinstance(backlogged, bool)
                and isinstance(since, (int, float)) and isinstance(seq, int)):
            self._bad_frame(ValueError(
                f"malformed task status {(task, backlogged, since, seq)!r:.100}"))
            return
        self.core.apply_task_status(task, backlogged, float(since), seq)

    @ray.method(concurrency_group="control")
    def apply_backpressure(self, status: bytes) -> None:
        """Apply a :class:`BackPressureStatus` (msgpack, as sent between transfer actors)."""
        try:
            st = BackPressureStatus.from_wire(decode_status(status))
        except ValueError as e:
            self._bad_frame(e)
            return
        self.core.apply_backpressure(st)

    # Frames are not Ray task events (the dashboard's task list): one per batch, they would
    # flood the GCS, and recording them costs CPU on both sides of each call
    # (benchmarks/actor_call.py, task_events_off_cpu_ratio; figures in docs/benchmarks.md)
    @ray.method(concurrency_group="data", enable_task_events=False)
    def receive(self, frame: bytes) -> int | None:
        """Decode a batch from an executor of this worker and insert it into the receive
        queue, in the sender's frame order; blocks while the queue is full.

        Returns:
            The sender's cumulative acknowledgement (highest seq fully inserted), or None
            for a malformed frame or one from a task this task does not consume: those are
            counted (``bad_frames``), logged at most once per 10 s and dropped; never raises.
        """
        core = self.core
        try:
            src, epoch, seq, items = decode_batch(frame, self._max_frame, len(core.streams))
            return core.inbound.accept_frame(src, seq, items, False, epoch, len(frame))[0]
        except (FrameError, ValueError) as e:
            self._bad_frame(e)
            return None
        except InterruptedError:
            return None

    def _bad_frame(self, e: Exception) -> None:
        core = self.core
        n = core.count_bad_frame()
        if core.log_throttle.allow("bad_frame"):
            logger.warning("%s:%d dropped a bad frame (%d so far): %s", core.component_id,
                           core.task_id, n, e)

    @ray.method(concurrency_group="control")
    def stats(self) -> TaskStats:
        """This task's :class:`actors._stats.TaskStats`, with its last closed metrics
        interval and its sinks' figures (answered on the control group, even under load)."""
        m = getattr(self, "_metrics", None)
        return self.core.stats(m.last if m is not None else None).with_sinks(self._sinks)

    @ray.method(concurrency_group="control")
    def collected(self) -> list:
        """What a ``CollectorBolt`` or ``DeadLetterSink`` task holds (its ``received``;
        ``[]`` for other components)."""
        return list(getattr(self.core.obj, "received", []))

    @ray.method(concurrency_group="control")
    def sink_table(self):
        """A ``DatasetSink`` task's rows as one ``pyarrow.Table`` (None if this task's
        component is not a DatasetSink or nothing arrived)."""
        f = getattr(self.core.obj, "arrow_table", None)
        return f() if callable(f) else None

    @ray.method(concurrency_group="control")
    def task_state(self, attr: str):
        """The value of attribute ``attr`` of this task's spout or bolt object (None if it
        has none): introspection for tests and notebooks, e.g. a spout's acked ids."""
        v = getattr(self.core.obj, attr, None)
        return list(v) if isinstance(v, (list, tuple, set, frozenset, deque)) else v

    @ray.method(concurrency_group="control")
    def set_active(self, active: bool) -> None:
        """Activate or deactivate this task's spout (see ``ExecutorCore.set_active``)."""
        self.core.set_active(bool(active))

    @ray.method(concurrency_group="control")
    def drain(self) -> None:
        """Drain this task's spout (see ``ExecutorCore.set_draining``); returns at once."""
        self.core.set_draining()

    @ray.method(concurrency_group="control")
    def is_done(self) -> bool:
        """True once this task has ended its stream (never blocks)."""
        return self.core.done.is_set() and self.core.state == "done"

    @ray.method(concurrency_group="control")
    def backpressure_report(self) -> tuple:
        """This task's current backpressure state as a transfer-actor report
        ``(task, backlogged, since, seq, reminder)`` (for a restarted transfer actor)."""
        return self.core.inbound.current_report()

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        import os
        return os.getpid()

    @ray.method(concurrency_group="control")
    def shutdown(self) -> None:
        self.core.stop()

    @ray.method(concurrency_group="wait")
    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until the task has ended its stream (or ``timeout`` s); True if it has."""
        return self.core.done.wait(timeout)
