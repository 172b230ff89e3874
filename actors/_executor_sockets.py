"""The same-node socket path of one executor actor (``actors._local_socket``,
``actors._control_socket``): its listening socket, its senders' connector and ack reader,
and its control plane, kept apart from ``actors._actor.ExecutorActor``, which calls
these from its Ray methods."""

from __future__ import annotations

import logging
import os
import threading

import ray

from actors._codec import FrameError, decode_batch
from actors._control_socket import ControlPlane
from actors._local_socket import (
    AckReader,
    SocketConnector,
    SocketReceiver,
    pair_buffer_bytes,
    socket_name,
    supported,
)

logger = logging.getLogger("storm_on_ray.actor")


class ExecutorSockets:
    """One executor actor's sockets (``topology.transfer.local.socket``; Linux).

    Args:
        core: the actor's host ``ExecutorCore`` (its inbound takes socket frames; its
            wakeup and stop flag drive the threads).
        cores: task id → every core of the actor (chained tasks are not local senders).
        prefix: the submit prefix (socket names carry it).
        on_bad: counts and logs a bad frame or a refused connection.
    """

    def __init__(self, core, cores: dict, prefix: str | None, on_bad) -> None:
        self.core = core
        self._cores = cores
        self._prefix = prefix
        self._on_bad = on_bad
        self.on = bool(core.conf["topology.transfer.local.socket"]) and supported()
        self.node_id = ray.get_runtime_context().get_node_id()
        self._max_frame = core.conf["topology.transfer.max.frame.bytes"]
        #: the listening socket, made at the first sender's request
        self.receiver: SocketReceiver | None = None
        self._lock = threading.Lock()
        self._connector: SocketConnector | None = None  # made with the first sink
        #: backpressure statuses to and from actors of this node
        self.control = (ControlPlane(core.task_id, prefix, on_bad, lambda: core._stop)
                        if self.on else None)

    # -- sending --------------------------------------------------------------------------------
    def open(self, core, sink, handle) -> None:
        """Ask the connector for a socket from ``core``'s task to ``sink``'s destination
        (``handle``'s actor; again whenever the channel breaks); frames go by actor call
        until it is open."""
        if self._connector is None:
            stopped = lambda: self.core._stop  # noqa: E731
            self._connector = SocketConnector(AckReader(self.core.wakeup.set, stopped),
                                              stopped, self._error)
        src, dest, pid, node = core.task_id, sink.dest, os.getpid(), self.node_id

        def fetch():
            return ray.get(handle.socket_address.remote(src, dest, pid, node), timeout=30)

        def lost(s) -> None:
            self._connector.request(src, dest, fetch, s.offer_channel,
                                    lambda: not core._stop, delay=0.05)

        sink.on_channel_lost = lost
        self._connector.request(src, dest, fetch, sink.offer_channel, lambda: not core._stop)

    def _error(self, e: Exception, where: str) -> None:
        core = self.core
        if core.log_throttle.allow("socket_error"):
            logger.info("%s:%d: %s: %s (frames go by actor call meanwhile)",
                        core.component_id, core.task_id, where, e)

    # -- receiving ------------------------------------------------------------------------------
    def address(self, src_task: int, dest_task: int, pid: int, node_id: str) -> tuple | None:
        """``ExecutorActor.socket_address``: ``(name, token, buffer bytes, listening pid)``
        for task ``src_task`` in process ``pid``, or None (another node, off, not our
        task, or the receiver closed: a stopped task's name is never handed out). The
        listening socket and its reader thread start at the first request."""
        core = self.core
        if not self.on or node_id != self.node_id or dest_task != core.task_id:
            return None
        with self._lock:
            if self.receiver is None:
                senders = sum(1 for t in core.inbound.upstream
                              if core.task_worker.get(t, 0) == core.worker
                              and t not in self._cores and t not in core.back_sources)
                bound = core.conf["topology.executor.receive.buffer.bytes"] or 0
                self.receiver = SocketReceiver(
                    socket_name(self._prefix, core.task_id), core.task_id, self._frame,
                    self._on_bad, lambda: core._stop, pair_buffer_bytes(bound, senders))
            self.receiver.expect(src_task, pid)
            return self.receiver.address()

    def _frame(self, src: int, frame) -> tuple[int, int] | None:
        """One frame from ``src``'s socket (the reader thread), inserted as the actor's
        ``receive`` does; returns the acknowledgement ``(epoch, ack)`` to write back."""
        core = self.core
        s, epoch, seq, items = decode_batch(frame, self._max_frame, len(core.streams))
        if s != src:
            raise FrameError(f"a frame of task {s} on the socket of task {src}")
        ack = core.inbound.accept_frame(s, seq, items, False, epoch, len(frame))[0]
        return None if ack is None else (epoch, ack)

    def control_address(self, pid: int, node_id: str, handlers: dict) -> tuple | None:
        """``ExecutorActor.control_address``: the control socket for a peer in process
        ``pid``, or None (another node, or off)."""
        if self.control is None or node_id != self.node_id:
            return None
        return self.control.address(pid, handlers)

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
        if self.control is not None:
            self.control.close()
