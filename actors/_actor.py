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

import dataclasses
import functools
import logging
import os
import sys
import threading
import time
from collections import deque

import ray

from actors._actor_checkpoints import CheckpointWiring
from actors._chain import ChainLink
from actors._codec import FrameError, decode_batch, decode_status
from actors._control_socket import send_call
from actors._coordinator import coordinator_name
from actors._executor_sockets import ExecutorSockets
from actors._factory import make_executor
from actors._gc import freeze_startup_objects, tune_gc
from actors._metrics import TaskMetrics, run_metrics_timer
from actors._routing import TASK, WORKER, actor_name, submit_id
from actors._sink import ActorSink, _deliver
from actors._stats import TaskStats
from actors._store import StoredTopology, first_start
from actors.state._plan import checkpointed
from backpressure import BackPressureStatus
from topology import CollectorBolt, DatasetSink, DeadLetterSink

logger = logging.getLogger("storm_on_ray.actor")


@ray.remote(concurrency_groups={"data": 1, "remote": 1, "control": 1, "wait": 1})
class ExecutorActor(CheckpointWiring):
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
        #: this task's core and those of the tasks chained into it (actors/_chain.py)
        self.cores = {task_id: self.core}
        members = [make_executor(topology_name, topology, conf, t, task_worker)
                   for t in topology.chain_of(task_id)]
        if members:
            self.core.host_chain(members)
            self.cores.update({m.task_id: m for m in members})
        for c in self.cores.values():  # the context names the submit (shared by restarts)
            c.context = dataclasses.replace(c.context, submit_id=submit_id(prefix))
        #: task id → the task whose actor runs it (chained tasks only)
        self._hosts = topology.chain_hosts()
        tune_gc(self.core.conf["topology.executor.gc.threshold"])
        self._max_frame = self.core.conf["topology.transfer.max.frame.bytes"]
        self._sinks: dict[int, list[ActorSink]] = {t: [] for t in self.cores}
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
        self._checkpoints = None  # the checkpoint coordinator (fetched by name)
        # the same-node socket path: frames and backpressure statuses between actors
        # of this node over Unix sockets (actors/_executor_sockets.py)
        self._sockets = ExecutorSockets(self.core, self.cores, prefix, self._bad_frame)
        self._status_lock = threading.Lock()  # statuses arrive on two threads
        rejoining = prefix is not None and not first_start(prefix,
                                                           actor_name(None, TASK, task_id))
        if prefix is not None and checkpointed(topology, conf):
            self._enable_checkpoints(topology_name, topology, conf, rejoining)
        if rejoining:
            for c in self.cores.values():  # (a chain restarts as one: every task anew)
                c.inbound.reconstructed = True
            self._rejoin()

    @ray.method(concurrency_group="control")
    def checkpoint(self, kind: str, task: int, *args) -> None:
        """A checkpoint coordinator's message for ``task`` (``trigger``, ``commit``,
        ``rollback``, ``resume``; see ``actors.state``): queued for its executor thread.
        Unknown tasks and kinds are counted as bad frames."""
        try:
            self._core(task).checkpoint.request(kind, tuple(args))
        except (KeyError, ValueError, AttributeError) as e:
            self._bad_frame(ValueError(f"checkpoint message {kind!r} for task {task}: {e}"))

    @ray.method(concurrency_group="control")
    def credit(self, src: int, dest: int, epoch: int, ack: int) -> None:
        """Task ``dest`` acknowledges frames up to ``ack`` of ``epoch`` from task ``src``
        (of this actor), which it held while aligning: the sender's credit comes back."""
        for sink in self._sinks.get(src, ()):
            if sink.dest == dest:
                sink.credit(epoch, ack)
        self.core.wakeup.set()

    def _rejoin(self, timeout: float = 60.0) -> None:
        """Wire and start this restarted instance (see the class docstring)."""
        core, prefix = self.core, self._prefix
        logger.warning("%s:%d: restarted by Ray; rejoining topology %r", core.component_id,
                       core.task_id, core.topology_name)
        named = self._actor_of
        dests = {t for c in self.cores.values() for t in c.destinations} - set(self.cores)
        handles = {t: named(t) for t in dests}
        workers = {core.task_worker.get(t, 0) for t in dests} | {core.worker}
        transfers = {}
        if len(set(core.task_worker.values())) > 1:
            transfers = {w: ray.get_actor(actor_name(prefix, WORKER, w)) for w in workers}
        coordinator = None
        if core.policy.name == "watermark":
            coordinator = ray.get_actor(coordinator_name(prefix))
        if core.policy.name == "nak":
            handles.update({t: named(t) for t in core.upstream_spouts})
        if self._direct:
            handles.update({t: named(t) for t in core.remote_upstream - core.back_sources})
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
        ups = sorted(core.upstream_open - set(self.cores))
        if ups:
            done = []
            for t in ups:
                try:
                    if ray.get(named(t).is_done.remote(t), timeout=timeout):
                        done.append(t)
                except Exception as e:  # restarting too: its end marker will come
                    core.errors.report(e, f"rejoin (state of task {t})")
            core.upstream_open.difference_update(done)
        self.start()

    def _actor_of(self, task: int):
        """The actor running ``task`` (its host's for a chained task), by name."""
        return ray.get_actor(actor_name(self._prefix, TASK, self._hosts.get(task, task)))

    def _ask_remote_destinations(self, handles: dict, timeout: float = 5.0) -> None:
        """The direct status path after a restart: ask each destination in another worker
        for its current report, all at once, briefly. One that is restarting too sends its
        report when it rejoins (to us among its senders), so we need not wait for it."""
        core = self.core
        dests = sorted({t for c in self.cores.values() for t in c.destinations
                        if c.task_worker.get(t, 0) != c.worker and t not in c.back_dests
                        and t in handles})
        refs = {handles[t].backpressure_report.remote(t): t for t in dests}
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
            self._status_to = [(self._hosts.get(t, t), handles[t])
                               for t in sorted(core.remote_upstream - core.back_sources)
                               if t in handles]
        for c in self.cores.values():
            self._connect_core(c, handles, transfers)

    def _connect_core(self, core, handles: dict, transfers: dict) -> None:
        """One core's sinks (see :meth:`connect`): a task chained to this core gets a
        ``ChainLink`` (its sender calls it directly); another task of this actor (the
        host, taking a chained bolt's acking messages) gets its queue, so the host's user
        code is never entered from inside its own call."""
        worker_of = core.task_worker
        sinks: dict = {}
        for t in core.destinations:
            if t == core.task_id:
                sinks[t] = core.local_sink()
                continue
            if t in self.cores:  # in this actor: its chained bolt, or (acks) its host
                dest = self.cores[t]
                sinks[t] = (ChainLink(dest) if dest.chain_host is not None
                            and core.task_id in dest.links.upstream
                            else core.make_queue_sink(dest.queue, core.task_id))
                continue
            w = worker_of.get(t, 0)
            back = t in core.back_dests  # closes a cycle: never blocks, never holds
            if w == core.worker:
                send = handles[t].receive_remote.remote if back else handles[t].receive.remote
                s = ActorSink(send, core.task_id, t, core.policy.credits(t), core)
                if self._sockets.on and not back:  # (a back edge's receiver never blocks)
                    self._sockets.open(core, s, handles[t])
            else:
                if w not in transfers:
                    raise ValueError(f"task {core.task_id}: task {t} is in worker {w}, which "
                                     f"has no transfer actor")
                s = ActorSink(functools.partial(_deliver, transfers[w], core.worker, t),
                              core.task_id, t, core.policy.credits(t), core,
                              remote=not back)
            self._sinks[core.task_id].append(s)
            sinks[t] = s
        core.connect(sinks)

    @ray.method(concurrency_group="control")
    def socket_address(self, src_task: int, dest_task: int, pid: int,
                       node_id: str) -> tuple | None:
        """Task ``src_task``'s sender (in process ``pid`` on node ``node_id``) asks for the
        same-node socket of task ``dest_task`` (this actor's): ``(abstract name, token,
        per-pair buffer bytes)``, or None when frames must go by actor call (another
        node, the socket path off, a task this actor does not receive for). The listening
        socket and its reader thread start at the first request."""
        return self._sockets.address(src_task, dest_task, pid, node_id)

    @ray.method(concurrency_group="control")
    def start(self) -> None:
        core = self.core
        self._metrics = {t: TaskMetrics(c, c.conf["topology.stall.timeout.secs"])
                         for t, c in self.cores.items()}
        core.start()
        if core.conf["topology.executor.gc.threshold"]:
            freeze_startup_objects()
        for t, c in self.cores.items():
            threading.Thread(target=run_metrics_timer, args=(c, self._metrics[t]),
                             daemon=True, name=f"metrics-{t}").start()
        if (self.core.remote_upstream or self.core.back_sources
                or (self.core.policy.watches_fill and not self.core.is_spout)):
            self._bp_thread = threading.Thread(target=self._bp_check_timer, daemon=True,
                                               name=f"bp-check-{self.core.task_id}")
            self._bp_thread.start()

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
        direct path, to each executor in another worker that sends to this task: over a
        control socket where one is open (same node), else by actor call."""
        for host, h in self._status_to:
            try:
                self._send_status(("task", host), h, "task_status", report[:4])
            except Exception as e:  # a dead sender: its restart asks us (see _rejoin)
                self.core.errors.report(e, "backpressure status")
        if self._transfer is None:  # one worker: nobody to tell (a back edge's overflow)
            return
        try:
            self._send_status(("worker", self.core.worker), self._transfer, "task_status",
                               report)
        except Exception as e:  # the transfer actor is gone: Ray restarts it
            self.core.errors.report(e, "backpressure report")

    def _send_status(self, key, handle, method: str, args) -> None:
        send_call(self._sockets.control, key, handle, method, args, self._sockets.node_id)

    @ray.method(concurrency_group="control")
    def control_address(self, pid: int, node_id: str) -> tuple | None:
        """The control socket of this actor for a peer in process ``pid`` on node
        ``node_id``: ``(name, token, buffer bytes)``, or None (another node, or off)."""
        return self._sockets.control_address(pid, node_id, {
            "task_status": self.task_status, "apply_backpressure": self.apply_backpressure})

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
        with self._status_lock:
            for c in self.cores.values():
                c.apply_task_status(task, backlogged, float(since), seq)

    @ray.method(concurrency_group="control")
    def apply_backpressure(self, status: bytes) -> None:
        """Apply a :class:`BackPressureStatus` (msgpack, as sent between transfer actors)."""
        try:
            st = BackPressureStatus.from_wire(decode_status(status))
        except ValueError as e:
            self._bad_frame(e)
            return
        with self._status_lock:
            for c in self.cores.values():
                c.apply_backpressure(st)

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

    def _core(self, task: int | None):
        """The core of ``task`` (this actor's own for None).

        Raises:
            KeyError: ``task`` does not run in this actor.
        """
        if task is None:
            return self.core
        try:
            return self.cores[task]
        except KeyError:
            raise KeyError(f"task {task} does not run in the actor of task "
                           f"{self.core.task_id} (which runs {sorted(self.cores)})") from None

    @ray.method(concurrency_group="control")
    def stats(self, task: int | None = None) -> TaskStats:
        """The :class:`actors._stats.TaskStats` of ``task`` (this actor's own task for
        None; a task chained into it otherwise), with its last closed metrics interval and
        its sinks' figures (answered on the control group, even under load).

        Raises:
            KeyError: ``task`` does not run in this actor.
        """
        core = self._core(task)
        m = getattr(self, "_metrics", {}).get(core.task_id)
        return core.stats(m.last if m is not None else None).with_sinks(
            self._sinks[core.task_id], *((self._sockets.receiver, self._sockets.control)
                                         if core is self.core else (None, None)))

    @ray.method(concurrency_group="control")
    def collected(self, task: int | None = None) -> list:
        """What a ``CollectorBolt`` or ``DeadLetterSink`` task holds (its ``received``;
        ``[]`` for other components). ``task`` as in :meth:`stats`."""
        obj = self._core(task).obj
        return list(obj.received) if isinstance(obj, (CollectorBolt, DeadLetterSink)) else []

    @ray.method(concurrency_group="control")
    def sink_table(self, task: int | None = None):
        """A ``DatasetSink`` task's rows as one ``pyarrow.Table`` (None if this task's
        component is not a DatasetSink or nothing arrived). ``task`` as in :meth:`stats`."""
        obj = self._core(task).obj
        return obj.arrow_table() if isinstance(obj, DatasetSink) else None

    @ray.method(concurrency_group="control")
    def task_state(self, attr: str, task: int | None = None):
        """The value of attribute ``attr`` of a task's spout or bolt object (None if it
        has none): introspection for tests and notebooks, e.g. a spout's acked ids.
        ``task`` as in :meth:`stats`."""
        v = getattr(self._core(task).obj, attr, None)
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
    def is_done(self, task: int | None = None) -> bool:
        """True once the task has ended its stream (never blocks); ``task`` as in
        :meth:`stats`."""
        core = self._core(task)
        return core.done.is_set() and core.state == "done"

    @ray.method(concurrency_group="control")
    def backpressure_report(self, task: int | None = None) -> tuple:
        """The task's current backpressure state as a transfer-actor report
        ``(task, backlogged, since, seq, reminder)`` (for a restarted transfer actor);
        ``task`` as in :meth:`stats`."""
        return self._core(task).inbound.current_report()

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        import os
        return os.getpid()

    @ray.method(concurrency_group="control")
    def shutdown(self) -> None:
        self.core.stop()
        self._sockets.close()

    @ray.method(concurrency_group="wait")
    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until the task, and every task chained into it, has ended its stream (or
        ``timeout`` s); True if they have."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for c in self.cores.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not c.done.wait(left):
                return False
        return True
