"""``TransferActor``: one per worker; moves batches and backpressure status between workers.

Storm 2.0's ``WorkerTransfer`` + Netty client/server (notes/storm2-internals.md §3,
seeds/storm2-backpressure-model.txt §2), as an asyncio Ray actor:

* **Sending.** An executor hands a batch for a task of another worker to its own worker's
  transfer actor (:meth:`TransferActor.transfer`), as a msgpack frame it will never decode.
  Per destination worker one sender coroutine drains everything queued for that worker
  into one delivery (Storm's ``TransferDrainer``) and sends it to the peer's
  :meth:`~TransferActor.deliver`, one delivery in flight per peer (which keeps order). A
  ``transfer`` call completes once its batch is in the destination task's receive or
  overflow queue, which returns the executor's credit; nothing waits on the executor
  thread.
* **Receiving.** :meth:`~TransferActor.deliver` checks size and shape, then hands each
  frame to its task's executor (``receive_remote``, which never blocks: a full queue sends
  it to the overflow). A frame for a task this worker does not own, an undecodable or an
  oversized payload is counted, logged at most once per 10 s and dropped (STORM-3751).
* **Backpressure status.** Executors report their task's transitions and reminders
  (:meth:`~TransferActor.task_status`); on a change or a reminder this actor sends the
  worker's full :class:`BackPressureStatus` to every connected worker, and to each worker
  that connects (:meth:`~TransferActor.hello`) while a task is backlogged. Nothing is sent
  while no task is backlogged. A received status (:meth:`~TransferActor.backpressure_status`)
  goes to the local executors that send to the tasks it names.

Only bytes cross between workers: tuple values are msgpack, never pickle.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict

import ray

from actors._codec import (
    FrameError,
    decode_status,
    decode_transfer,
    encode_status,
    encode_transfer,
)
from backpressure import BackPressureStatus, RemoteBackPressure, WorkerBackPressure

logger = logging.getLogger("storm_on_ray.transfer")

_LOG_EVERY_S = 10.0


@ray.remote(max_restarts=0)
class TransferActor:
    """The transfer actor of one worker.

    Args:
        topology_name: for logs.
        worker_id: this worker's index.
        conf: the validated topology config.
        task_worker: task id → worker index, for every task of the topology.
    """

    def __init__(self, topology_name: str, worker_id: int, conf: dict,
                 task_worker: dict[int, int]) -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.topology_name = topology_name
        self.worker_id = worker_id
        self.task_worker = dict(task_worker)
        self.max_bytes = conf["topology.transfer.max.frame.bytes"]
        self.local = WorkerBackPressure(worker_id, [t for t, w in task_worker.items()
                                                    if w == worker_id])
        self.remote = RemoteBackPressure()
        self._executors: dict[int, ray.actor.ActorHandle] = {}
        self._destinations: dict[int, frozenset[int]] = {}
        self._peers: dict[int, ray.actor.ActorHandle] = {}
        self._outbox: dict[int, list] = defaultdict(list)
        self._wake: dict[int, asyncio.Event] = {}
        self._senders: dict[int, asyncio.Task] = {}
        self._logged_at: dict[str, float] = {}
        self.counters = dict(
            frames_sent=0, bytes_sent=0, deliveries_sent=0, delivery_failures=0,
            frames_received=0, bytes_received=0, deliveries_received=0,
            statuses_sent=0, statuses_received=0, stale_statuses=0,
            dropped_unknown_task=0, dropped_bad_payload=0, dropped_oversized=0,
            dropped_no_peer=0, hellos=0, reminders_sent=0)

    # -- wiring ---------------------------------------------------------------------------
    async def connect(self, executors: dict, destinations: dict, peers: dict) -> None:
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
        for w, h in peers.items():
            self._peers[w] = h
        await asyncio.gather(*(h.hello.remote(self.worker_id, me) for h in peers.values()))

    async def hello(self, worker_id: int, handle) -> None:
        """A worker connects (or reconnects after a restart): remember it, and send it the
        current status if any task here is backlogged (Storm's ``channelActive``)."""
        self._peers[worker_id] = handle
        self.counters["hellos"] += 1
        if self.local.any_backlogged:
            self._send_status_to(handle, encode_status(self.local.status().to_wire()))

    # -- data: sending side ---------------------------------------------------------------
    async def transfer(self, dest_task: int, frame: bytes) -> int | None:
        """Queue one batch for a task of another worker; completes once it has been put
        into that task's receive or overflow queue, with the destination executor's
        acknowledgement (see ``ExecutorActor.receive``), or None if it was dropped (the
        peer or the executor is gone; acking replays it)."""
        w = self.task_worker.get(dest_task)
        if w is None or w == self.worker_id or w not in self._peers:
            self.counters["dropped_no_peer"] += 1
            self._log("no_peer", "no connected worker for task %s: batch dropped", dest_task)
            return None
        fut = asyncio.get_running_loop().create_future()
        self._outbox[w].append((dest_task, frame, fut))
        ev = self._wake.get(w)
        if ev is None:
            ev = self._wake[w] = asyncio.Event()
            self._senders[w] = asyncio.create_task(self._sender(w))
        ev.set()
        return await fut

    async def _sender(self, w: int) -> None:
        ev = self._wake[w]
        outbox = self._outbox
        while True:
            await ev.wait()
            ev.clear()
            while outbox[w]:
                # everything queued for the worker, within half the receiver's size limit
                queued, size, n = outbox[w], 0, 0
                while n < len(queued) and (n == 0 or size + len(queued[n][1]) + 16
                                           <= self.max_bytes // 2):
                    size += len(queued[n][1]) + 16
                    n += 1
                items, outbox[w] = queued[:n], queued[n:]
                payload = encode_transfer(self.worker_id, [(t, f) for t, f, _ in items])
                try:
                    acks = await self._peers[w].deliver.remote(payload)
                except Exception as e:  # the peer died: Ray restarts it; replay covers it
                    acks = None
                    self.counters["delivery_failures"] += 1
                    self._log("deliver", "delivery to worker %d failed: %s", w, e)
                if not isinstance(acks, list) or len(acks) != len(items):
                    acks = [None] * len(items)
                c = self.counters
                c["deliveries_sent"] += 1
                c["frames_sent"] += len(items)
                c["bytes_sent"] += len(payload)
                for (_, _, fut), ack in zip(items, acks, strict=True):
                    if not fut.done():
                        fut.set_result(ack)

    # -- data: receiving side -------------------------------------------------------------
    async def deliver(self, payload: bytes) -> list | None:
        """Hand each frame of a delivery to its task's executor; returns once all are in
        their receive or overflow queues, with one acknowledgement per frame (None for a
        dropped one). Bad payloads (None) and frames for tasks this worker does not own
        are counted and dropped; never raises for bad input."""
        c = self.counters
        try:
            src_worker, frames = decode_transfer(payload, self.max_bytes)
        except FrameError as e:
            key = "dropped_oversized" if "exceeds" in str(e) else "dropped_bad_payload"
            c[key] += 1
            self._log(key, "dropped a payload (%s)", e)
            return None
        c["deliveries_received"] += 1
        c["bytes_received"] += len(payload)
        acks: list = [None] * len(frames)
        waiting, where = [], []
        for i, (task, frame) in enumerate(frames):
            h = self._executors.get(task)
            if h is None:
                c["dropped_unknown_task"] += 1
                self._log("unknown", "worker %d does not own task %s: frame from worker %s "
                          "dropped", self.worker_id, task, src_worker)
                continue
            c["frames_received"] += 1
            waiting.append(h.receive_remote.remote(frame))
            where.append(i)
        if waiting:
            results = await asyncio.gather(*waiting, return_exceptions=True)
            for i, r in zip(where, results, strict=True):
                if isinstance(r, BaseException):  # an executor died: replay covers it
                    self._log("exec", "an executor failed to take a batch: %s", r)
                else:
                    acks[i] = r
        return acks

    # -- backpressure status --------------------------------------------------------------
    async def task_status(self, task: int, backlogged: bool, since: float, seq: int,
                          reminder: bool) -> None:
        """An executor reports its task's backpressure transition (or a reminder)."""
        try:
            changed = self.local.update(task, backlogged, since, seq)
        except KeyError:
            self.counters["dropped_unknown_task"] += 1
            return
        if changed or (reminder and backlogged):
            status = self.local.status()
            if not changed:
                self.counters["reminders_sent"] += 1
            if changed:
                logger.info("worker %d: backlogged tasks now %s", self.worker_id,
                            list(status.bp_tasks))
            wire = encode_status(status.to_wire())
            for h in self._peers.values():
                self._send_status_to(h, wire)

    def _send_status_to(self, handle, wire: bytes) -> None:
        handle.backpressure_status.remote(wire)
        self.counters["statuses_sent"] += 1

    async def backpressure_status(self, wire: bytes) -> None:
        """Another worker's status: apply it here (for stats) and forward it to the local
        executors that send to any task it names. Malformed or stale ones are dropped."""
        c = self.counters
        try:
            status = BackPressureStatus.from_wire(decode_status(wire))
        except ValueError as e:
            c["dropped_bad_payload"] += 1
            self._log("status", "dropped a bad status (%s)", e)
            return
        c["statuses_received"] += 1
        if self.remote.apply(status) is None:
            c["stale_statuses"] += 1
            return
        named = set(status.bp_tasks) | set(status.non_bp_tasks)
        for t, h in self._executors.items():
            if self._destinations.get(t, frozenset()) & named:
                h.apply_backpressure.remote(wire)

    # -- control --------------------------------------------------------------------------
    async def stats(self) -> dict:
        """Counters and backpressure view of this worker (plain dict)."""
        return {
            "worker": self.worker_id,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "tasks": sorted(self.local.tasks),
            "peers": sorted(self._peers),
            "backlogged": {t: s for t, s in self.local.backlogged().items()},
            "remote_backlogged": self.remote.backlogged(),
            "outbox_frames": sum(len(v) for v in self._outbox.values()),
            **self.counters,
        }

    def _log(self, key: str, msg: str, *args) -> None:
        now = time.monotonic()
        if now - self._logged_at.get(key, -1e9) >= _LOG_EVERY_S:
            self._logged_at[key] = now
            logger.warning("worker %d: " + msg, self.worker_id, *args)
