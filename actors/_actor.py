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
import threading
import time

import ray

from actors._codec import FrameError, decode_batch, decode_status, encode_batch
from actors._executor import ExecutorCore
from backpressure import BackPressureStatus

logger = logging.getLogger("storm_on_ray.actor")


class ActorSink:
    """Sends a batch to another executor as one actor call: credit-based, never blocking.

    At most ``max_inflight`` calls to the destination may be unfinished; the receiver
    finishes a call only once the batch is inside its bounded receive queue (same worker),
    or inside the destination's receive or overflow queue (another worker, through the
    transfer actors). With no credit left the sink takes nothing (returns 0), the sender's
    emit goes to ``pending_emits``, and memory in transit stays bounded by
    ``max_inflight × topology.producer.batch.size`` per (sender, receiver) pair.

    Args:
        send: ``send(frame) -> ObjectRef``: the receiver's ``receive``, or for a task in
            another worker ``lambda f: transfer.transfer.remote(dest, f)``.
        remote: True for a task in another worker: a send to it fails at once while its
            worker's last :class:`BackPressureStatus` names it backlogged.
    """

    __slots__ = ("_send", "_src", "_max", "_inflight", "_core", "dest", "sent_batches",
                 "_remote")

    def __init__(self, send, src_task: int, dest_task: int, max_inflight: int,
                 core: ExecutorCore, remote: bool = False) -> None:
        self._send = send
        self._remote = remote
        self._src = src_task
        self.dest = dest_task
        self._max = max_inflight
        self._inflight: list = []
        self._core = core
        self.sent_batches = 0

    def _reap(self) -> bool:
        ready, rest = ray.wait(self._inflight, num_returns=len(self._inflight), timeout=0,
                               fetch_local=False)
        if not ready:
            return False
        self._inflight = rest
        try:
            ray.get(ready)
        except Exception as e:  # the receiver died or raised: make it visible
            self._core.errors.report(e, f"send to task {self.dest}")
        return True

    def busy(self) -> bool:
        """True while an earlier batch to this destination is still in flight (non-blocking)."""
        return bool(self._inflight) and (not self._reap() or bool(self._inflight))

    def __call__(self, items: list) -> int:
        if self._remote and self._core.remote_bp.is_backlogged(self.dest):
            self._core.remote_refusals += 1
            return 0
        if len(self._inflight) >= self._max and not self._reap():
            return 0
        try:
            frame = encode_batch(self._src, items)
        except TypeError:
            frame = self._encode_skipping_bad(items)
        self._inflight.append(self._send(frame))
        self.sent_batches += 1
        return len(items)

    def _encode_skipping_bad(self, items: list) -> bytes:
        good = []
        for it in items:
            try:
                encode_batch(self._src, [it])
                good.append(it)
            except TypeError as e:
                self._core.errors.report(e, "emit (serialisation)")
        return encode_batch(self._src, good)

    def outstanding(self) -> int:
        return len(self._inflight)


@ray.remote(concurrency_groups={"data": 1, "remote": 1, "control": 1, "wait": 1},
            max_restarts=0)
class ExecutorActor:
    """A Storm executor as a Ray actor (one task). See :class:`ExecutorCore`.

    Args:
        topology_name: the name given at submit.
        topology: the frozen ``StormTopology`` (passed once through the object store).
        conf: the validated topology config.
        task_id: the task this actor runs.
        task_worker: task id → worker index.
    """

    def __init__(self, topology_name, topology, conf, task_id, task_worker) -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.core = ExecutorCore(topology_name, topology, conf, task_id, task_worker)
        self._bad_frame_logged_at = 0.0
        self._max_frame = self.core.conf["topology.transfer.max.frame.bytes"]
        self._sinks: list[ActorSink] = []
        self._transfer = None
        self._bp_thread: threading.Thread | None = None

    @ray.method(concurrency_group="control")
    def connect(self, handles: dict, transfer=None) -> None:
        """Build one sink per destination task: our own queue for ourselves, a direct
        actor call for a task of this worker, the worker's ``transfer`` actor for a task
        of another worker.

        Raises:
            ValueError: a destination in another worker but no transfer actor given.
        """
        core = self.core
        self._transfer = transfer
        worker_of = core.task_worker
        inflight = core.conf["topology.transfer.max.inflight.batches"]
        sinks = {}
        for t in core.destinations:
            if t == core.task_id:
                sinks[t] = core.local_sink()
                continue
            if worker_of.get(t, 0) == core.worker:
                s = ActorSink(handles[t].receive.remote, core.task_id, t, inflight, core)
            else:
                if transfer is None:
                    raise ValueError(f"task {core.task_id}: task {t} is in another worker "
                                     f"but no transfer actor was given")
                s = ActorSink(functools.partial(transfer.transfer.remote, t), core.task_id,
                              t, inflight, core, remote=True)
            self._sinks.append(s)
            sinks[t] = s
        core.connect(sinks)

    @ray.method(concurrency_group="control")
    def start(self) -> None:
        self.core.start()
        if self.core.remote_upstream and self._transfer is not None:
            self._bp_thread = threading.Thread(target=self._bp_check_timer, daemon=True,
                                               name=f"bp-check-{self.core.task_id}")
            self._bp_thread.start()

    def _bp_check_timer(self) -> None:
        """Storm's backpressure-check timer, for this task: every
        ``topology.backpressure.check.millis``, clear the backlog once the overflow drained."""
        core = self.core
        period = core.conf["topology.backpressure.check.millis"] / 1000.0
        while not core._stop and not core.done.is_set():
            time.sleep(period)
            report = core.check_backpressure()
            if report is not None:
                self._notify(report)

    def _notify(self, report: tuple) -> None:
        try:
            self._transfer.task_status.remote(*report)
        except Exception as e:  # the transfer actor is gone: Ray restarts it
            self.core.errors.report(e, "backpressure report")

    @ray.method(concurrency_group="remote")
    def receive_remote(self, frame: bytes) -> bool:
        """Take a batch from another worker (through the transfer actor); never blocks.

        A full receive queue sends it to the overflow queue, and the first such batch
        (or every ``topology.backpressure.resend.size`` overflowed tuples after) is
        reported to the transfer actor, which tells the other workers. Bad frames are
        counted and dropped as in :meth:`receive`.
        """
        core = self.core
        try:
            src, items = decode_batch(frame, self._max_frame, len(core.streams))
            report = core.receive_remote_items(src, items)
        except (FrameError, ValueError) as e:
            self._bad_frame(e)
            return False
        if report is not None:
            self._notify(report)
        return True

    @ray.method(concurrency_group="control")
    def apply_backpressure(self, status: bytes) -> None:
        """Apply a :class:`BackPressureStatus` (msgpack, as sent between transfer actors)."""
        try:
            st = BackPressureStatus.from_wire(decode_status(status))
        except ValueError as e:
            self._bad_frame(e)
            return
        self.core.apply_backpressure(st)

    @ray.method(concurrency_group="data")
    def receive(self, frame: bytes) -> bool:
        """Decode a batch and insert it into the receive queue; returns once it is all in.

        A malformed frame, or one for a source this task does not consume, is counted
        (``bad_frames``), logged at most once per 10 s, and dropped: it never raises.
        """
        core = self.core
        try:
            src, items = decode_batch(frame, self._max_frame, len(core.streams))
            core.receive_items(src, items)
            return True
        except (FrameError, ValueError) as e:
            self._bad_frame(e)
            return False
        except InterruptedError:
            return False

    def _bad_frame(self, e: Exception) -> None:
        core = self.core
        core.bad_frames += 1
        now = time.time()
        if now - self._bad_frame_logged_at > 10:
            self._bad_frame_logged_at = now
            logger.warning("%s:%d dropped a bad frame (%d so far): %s", core.component_id,
                           core.task_id, core.bad_frames, e)

    @ray.method(concurrency_group="control")
    def stats(self) -> dict:
        s = self.core.stats()
        s["inflight_batches"] = sum(x.outstanding() for x in self._sinks)
        s["sent_batches"] = sum(x.sent_batches for x in self._sinks)
        return s

    @ray.method(concurrency_group="control")
    def collected(self) -> list:
        """What a ``CollectorBolt`` task holds (``[]`` for other components)."""
        return list(getattr(self.core.obj, "received", []))

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
