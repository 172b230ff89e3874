"""``TransferActor``: one per worker; moves batches and backpressure status between workers.

Storm 2.0's ``WorkerTransfer`` + Netty client/server (with Storm's ``WorkerState`` and
``BackPressureTracker``; STORM-2306's design doc "Backpressure model for Storm 2.0",
"Backpressure between workers"), as a threaded Ray actor with concurrency groups
(``status`` never waits behind data). Threads, not asyncio: a one-way call into a threaded
actor's group costs less than one into an asyncio actor, and on Storm's status path the
halt-lag is three such hops (benchmarks/halt_lag.py; the A/B figures are in
docs/benchmarks.md):

* **Sending.** An executor sends a batch for a task of another worker, as a msgpack frame,
  straight to that worker's transfer actor (:meth:`TransferActor.deliver`), wrapped in the
  worker-to-worker payload that can group several frames for one worker. The call returns
  once the batch is in the destination task's receive or overflow queue, with that
  executor's acknowledgement (the sender's window credit); nothing waits on the executor
  thread. Routing data through the *sending* worker's transfer actor too, as Storm's
  ``WorkerTransfer`` does, costs a third Ray call per batch and slowed two workers against
  one (benchmarks/throughput.py, ``two_worker_ratio``; figures in docs/benchmarks.md); a
  Ray actor can call any other directly, so that hop only copied bytes. The sending
  worker's transfer actor keeps the control plane: it receives the other workers' statuses
  and passes them to its executors.
* **Receiving.** :meth:`~TransferActor.deliver` checks size and shape, then hands each
  frame to its task's executor (``receive_remote``, which never blocks: a full queue sends
  it to the overflow). A frame for a task this worker does not own, an undecodable or an
  oversized payload is counted, logged at most once per 10 s and dropped (STORM-3751).
* **Backpressure status.** Executors report their task's transitions and reminders
  (:meth:`~TransferActor.task_status`); on a change or a reminder this actor sends the
  worker's full :class:`BackPressureStatus` to every connected worker, and to each worker
  that connects (:meth:`~TransferActor.hello`) while a task is backlogged. Nothing is sent
  while no task is backlogged. A received status (:meth:`~TransferActor.backpressure_status`)
  goes to the local executors that send to the tasks it names, on Storm's path only: with
  ``topology.backpressure.status.direct`` (the default) each executor tells its senders
  itself, one call instead of these three (docs/design.md), and a status received here is
  kept for stats and for restarted executors.

* **Restarts.** Submitted with Ray's ``max_restarts``; a restarted instance finds its
  executors and peers by their actor names, greets the peers (each sends its current
  status back), rebuilds its worker's status from its executors' current reports and
  sends it to every peer, so no peer keeps a stale flag for one of its tasks.

Only bytes cross between workers: tuple values are msgpack, never pickle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

import ray

from actors._codec import (
    FrameError,
    decode_status,
    decode_transfer,
    encode_status,
)
from actors._control_socket import ControlPlane, send_call
from actors._errors import LogThrottle
from actors._gc import tune_gc
from actors._local_socket import supported
from actors._routing import TASK, WORKER, actor_name
from actors._store import first_start
from backpressure import BackPressureStatus, RemoteBackPressure, WorkerBackPressure

logger = logging.getLogger("storm_on_ray.transfer")

_LOG_EVERY_S = 10.0

#: A transfer actor's acknowledgement for a frame whose receiver died before taking it.
FRAME_LOST = "lost"

#: Seconds a restarted transfer actor waits for its executors' backpressure reports (all
#: asked at once); one that is restarting too reports when it rejoins.
REPORT_WAIT_S = 5.0


@ray.remote(concurrency_groups={"deliver": 8, "status": 1, "control": 1})
class TransferActor:
    """The transfer actor of one worker.

    Args:
        topology_name: for logs.
        worker_id: this worker's index.
        conf: the validated topology config.
        task_worker: task id → worker index, for every task of the topology.
        prefix: the actor-name prefix of this submit (``actors._routing.actor_name``); None for
            an unnamed actor that cannot rejoin after a restart.
        destinations: local task id → the task ids it sends to (needed to rejoin).
    """

    def __init__(self, topology_name: str, worker_id: int, conf: dict,
                 task_worker: dict[int, int], prefix: str | None = None,
                 destinations: dict | None = None) -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        tune_gc(conf["topology.executor.gc.threshold"])
        self.topology_name = topology_name
        self.worker_id = worker_id
        self.task_worker = dict(task_worker)
        self.max_bytes = conf["topology.transfer.max.frame.bytes"]
        # the direct status path: executors tell their senders themselves, so a peer's
        # status is kept here (stats, restarted executors) but not forwarded
        self._forward = not conf["topology.backpressure.status.direct"]
        self.local = WorkerBackPressure(worker_id, [t for t, w in task_worker.items()
                                                    if w == worker_id])
        self.remote = RemoteBackPressure()
        self._executors: dict[int, ray.actor.ActorHandle] = {}
        self._destinations: dict[int, frozenset[int]] = {}
        self._peers: dict[int, ray.actor.ActorHandle] = {}
        self._lock = threading.Lock()  # counters
        self._log_throttle = LogThrottle(_LOG_EVERY_S)
        # where the halt-lag goes: ms from a backlog's start to its report arriving here
        # (from a local executor) and to a peer's status naming it arriving here
        self._report_lags: deque = deque(maxlen=1000)
        self._status_lags: deque = deque(maxlen=1000)
        self.counters = dict(
            frames_received=0, bytes_received=0, deliveries_received=0,
            statuses_sent=0, statuses_received=0, stale_statuses=0,
            dropped_unknown_task=0, dropped_bad_payload=0, dropped_oversized=0,
            dropped_no_peer=0, hellos=0, reminders_sent=0, frames_lost=0,
            statuses_forwarded=0)
        # the last status from each peer worker, for a restarted executor of this worker
        self._last_status: dict[int, bytes] = {}
        # statuses to and from actors of this node go over control sockets
        # (actors/_local_socket.py): they arrive on its reader thread too
        self._status_lock = threading.Lock()
        self._node_id = ray.get_runtime_context().get_node_id()
        self._stopped = False
        self._control = (ControlPlane(-1 - worker_id, prefix, self._bad_control,
                                      lambda: self._stopped)
                         if conf["topology.transfer.local.socket"] and supported() else None)
        if prefix is not None and not first_start(prefix, actor_name(None, WORKER, worker_id)):
            self._rejoin(prefix, destinations or {})

    def _rejoin(self, prefix: str, destinations: dict) -> None:
        """Wire this restarted instance again (see the module docstring)."""
        logger.warning("worker %d: transfer actor restarted by Ray; rejoining",
                       self.worker_id)
        mine = sorted(destinations)  # (tasks with an actor: chained ones have none)
        executors = {t: ray.get_actor(actor_name(prefix, TASK, t)) for t in mine}
        peers = {w: ray.get_actor(actor_name(prefix, WORKER, w))
                 for w in set(self.task_worker.values()) if w != self.worker_id}
        self.connect(executors, destinations, peers)
        # All asked at once, waited for together and briefly: an executor restarting with
        # us waits for our remote_statuses in its own rejoin, which we answer only once
        # this constructor returns; it reports when it rejoins, so we need not wait for it.
        refs = {executors[t].backpressure_report.remote(): t for t in mine}
        ready = (ray.wait(list(refs), num_returns=len(refs), timeout=REPORT_WAIT_S)[0]
                 if refs else [])
        for ref in ready:
            try:
                self.local.update(*ray.get(ref)[:4])
            except Exception as e:  # restarting too: it reports when it rejoins
                self._log("rejoin", "no backpressure report from task %d: %s", refs[ref], e)
        for t in sorted(refs[r] for r in set(refs) - set(ready)):
            self._log("rejoin", "no backpressure report from task %d within %.0f s (it "
                      "reports when it rejoins)", t, REPORT_WAIT_S)
        wire = encode_status(self.local.status().to_wire())
        for w, h in list(self._peers.items()):
            self._send_status_to(w, h, wire)

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counters[key] += n

    # -- wiring ---------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def connect(self, executors: dict, destinations: dict, peers: dict) -> None:
        """Attach this worker's executors and the other workers' transfer actors.

        Args:
            executors: local task id → executor handle.
            destinations: local task id → the task ids it sends to (for forwarding
                statuses only to the executors they concern).
            peers: worker index → transfer actor handle, for every other worker. Each is
                greeted (:meth:`hello`), so it sends this worker its current status.
        """
        self._executors = dict(executors)
        self._destinations = {t: frozenset(d) for t, d in destinations.items()}
        me = ray.get_runtime_context().current_actor
        self._peers.update(peers)
        ray.get([h.hello.remote(self.worker_id, me) for h in peers.values()])

    @ray.method(concurrency_group="status")
    def hello(self, worker_id: int, handle) -> None:
        """A worker connects (or reconnects after a restart): remember it, and send it the
        current status if any task here is backlogged (Storm's ``channelActive``)."""
        with self._status_lock:
            self._peers[worker_id] = handle
            self._count("hellos")
            if self.local.any_backlogged:
                self._send_status_to(worker_id, handle,
                                     encode_status(self.local.status().to_wire()))

    # -- data: receiving side -------------------------------------------------------------
    @ray.method(concurrency_group="deliver", enable_task_events=False)  # (as receive)
    def deliver(self, payload: bytes) -> list | None:
        """Hand each frame of a delivery to its task's executor; returns once all are in
        their receive or overflow queues, with one acknowledgement per frame (None for a
        dropped one). Bad payloads (None) and frames for tasks this worker does not own
        are counted and dropped; never raises for bad input."""
        try:
            src_worker, frames = decode_transfer(payload, self.max_bytes)
        except FrameError as e:
            key = "dropped_oversized" if "exceeds" in str(e) else "dropped_bad_payload"
            self._count(key)
            self._log(key, "dropped a payload (%s)", e)
            return None
        acks: list = [None] * len(frames)
        waiting, where = [], []
        unknown = 0
        for i, (task, frame) in enumerate(frames):
            h = self._executors.get(task)
            if h is None:
                unknown += 1
                self._log("unknown", "worker %d does not own task %s: frame from worker %s "
                          "dropped", self.worker_id, task, src_worker)
                continue
            waiting.append(h.receive_remote.remote(frame))
            where.append(i)
        with self._lock:
            c = self.counters
            c["deliveries_received"] += 1
            c["bytes_received"] += len(payload)
            c["frames_received"] += len(waiting)
            c["dropped_unknown_task"] += unknown
        if not waiting:
            return acks
        try:
            for i, ack in zip(where, ray.get(waiting), strict=True):
                acks[i] = ack
        except Exception:  # an executor died: the sender starts a new epoch, acking replays
            for i, ref in zip(where, waiting, strict=True):
                try:
                    acks[i] = ray.get(ref)
                except Exception as e:
                    acks[i] = FRAME_LOST
                    self._count("frames_lost")
                    self._log("exec", "an executor failed to take a batch: %s", e)
        return acks

    # -- backpressure status --------------------------------------------------------------
    @ray.method(concurrency_group="status")
    def task_status(self, task: int, backlogged: bool, since: float, seq: int,
                    reminder: bool) -> None:
        """An executor reports its task's backpressure transition (or a reminder)."""
        with self._status_lock:
            self._task_status(task, backlogged, since, seq, reminder)

    def _task_status(self, task: int, backlogged: bool, since: float, seq: int,
                     reminder: bool) -> None:
        if backlogged and not reminder and since:
            self._report_lags.append((time.time() - since) * 1000.0)
        try:
            changed = self.local.update(task, backlogged, since, seq)
        except KeyError:
            self._count("dropped_unknown_task")
            return
        if changed or (reminder and backlogged):
            status = self.local.status()
            wire = encode_status(status.to_wire())
            for w, h in list(self._peers.items()):
                self._send_status_to(w, h, wire)
            if not changed:
                self._count("reminders_sent")
            else:
                logger.info("worker %d: backlogged tasks now %s", self.worker_id,
                            list(status.bp_tasks))

    def _send_status_to(self, worker: int, handle, wire: bytes) -> None:
        self._send_control(("worker", worker), handle, "backpressure_status", (wire,))
        self._count("statuses_sent")

    def _send_control(self, key, handle, method: str, args: tuple) -> None:
        send_call(self._control, key, handle, method, args, self._node_id)

    @ray.method(concurrency_group="control")
    def control_address(self, pid: int, node_id: str) -> tuple | None:
        """This actor's control socket for a peer in process ``pid`` on node ``node_id``
        (``(name, token, buffer bytes)``), or None (another node, or the path off)."""
        if self._control is None or node_id != self._node_id:
            return None
        return self._control.address(pid, {"task_status": self.task_status,
                                           "backpressure_status": self.backpressure_status})

    def _bad_control(self, e: Exception) -> None:
        self._count("dropped_bad_payload")
        self._log("control", "dropped a control message or connection (%s)", e)

    @ray.method(concurrency_group="status")
    def backpressure_status(self, wire: bytes) -> None:
        """Another worker's status: apply it here (for stats) and forward it to the local
        executors that send to any task it names. Malformed or stale ones are dropped."""
        with self._status_lock:
            self._backpressure_status(wire)

    def _backpressure_status(self, wire: bytes) -> None:
        try:
            status = BackPressureStatus.from_wire(decode_status(wire))
        except ValueError as e:
            self._count("dropped_bad_payload")
            self._log("status", "dropped a bad status (%s)", e)
            return
        self._count("statuses_received")
        res = self.remote.apply(status)
        if res is not None:
            self._last_status[status.worker_id] = wire
        if res is None:
            self._count("stale_statuses")
            return
        named = set(status.bp_tasks) | set(status.non_bp_tasks)
        for t, h in self._executors.items() if self._forward else ():
            if self._destinations.get(t, frozenset()) & named:
                self._send_control(("task", t), h, "apply_backpressure", (wire,))
                self._count("statuses_forwarded")
        self._status_lags.extend(x * 1000.0 for x in res[1])

    @ray.method(concurrency_group="status")
    def remote_statuses(self) -> list[bytes]:
        """The last status received from each other worker (msgpack), for an executor of
        this worker that restarted."""
        return list(self._last_status.values())

    # -- control --------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        return os.getpid()

    @ray.method(concurrency_group="control")
    def stats(self) -> dict:
        """Counters and backpressure view of this worker (plain dict)."""
        with self._lock:
            counters = dict(self.counters)
        return {
            "worker": self.worker_id,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "tasks": sorted(self.local.tasks),
            "peers": sorted(self._peers),
            "backlogged": self.local.backlogged(),
            "remote_backlogged": self.remote.backlogged(),
            "report_lags_ms": list(self._report_lags),
            "status_lags_ms": list(self._status_lags),
            "control_socket_sent": 0 if self._control is None else self._control.socket_sent,
            "control_call_sent": 0 if self._control is None else self._control.call_sent,
            "control_received": 0 if self._control is None else self._control.received,
            "control_refused_connections": (0 if self._control is None
                                            else self._control.refused_connections),
            **counters,
        }

    def _log(self, key: str, msg: str, *args) -> None:
        if self._log_throttle.allow(key):
            logger.warning("worker %d: " + msg, self.worker_id, *args)
