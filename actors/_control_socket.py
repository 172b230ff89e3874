"""Control messages between actors of one node over Unix sockets: the backpressure
statuses' counterpart of ``actors._local_socket``'s data path (docs/design.md, "Departure:
same-node frames go over a socket, not an actor call")."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import msgpack

from actors._local_socket import (
    AckReader,
    SocketChannel,
    SocketConnector,
    SocketReceiver,
    socket_name,
)

#: the per-pair buffer of a control connection (backpressure statuses are small)
CONTROL_BUFFER_BYTES = 64 * 1024


class ControlPlane:
    """Control messages between actors of one node over sockets: backpressure statuses
    (``BackPressureStatus`` between transfer actors and to executors, an executor's
    reports to its transfer actor, the direct path's ``task_status``), the same-node
    counterpart of the actor calls they otherwise are.

    Receiving: :meth:`listen` starts a :class:`SocketReceiver` whose frames are msgpack
    ``[method, [args...]]``, dispatched to ``handlers[method](*args)`` on its reader
    thread (never blocking on data: it is not the data reader). A connection's "task" in
    the handshake is the sender's pid, expected through :meth:`address`.

    Sending: :meth:`send` writes the message on the channel to that peer if one is open,
    without blocking; otherwise (none yet, broken, or the kernel buffer full) it makes
    the actor call ``call()`` instead, so a control message is never refused nor lost
    to this path, and the first time asks the connector for a channel (``fetch()``
    returns the peer's :meth:`address`, or None off this node). Receivers order statuses
    by their own sequence numbers, so a message taking the other path is harmless.

    Args:
        my_id: this actor's id in handshakes (its task id; a transfer actor's ``-1 - w``).
        name_prefix: the submit prefix (for the abstract name).
        on_bad: reports bad messages and refused connections.
        stopped: polled; True ends the threads.
    """

    def __init__(self, my_id: int, name_prefix: str | None, on_bad: Callable,
                 stopped: Callable[[], bool]) -> None:
        self.my_id = my_id
        self._prefix = name_prefix
        self._on_bad = on_bad
        self._stopped = stopped
        self._handlers: dict[str, Callable] = {}
        self._receiver: SocketReceiver | None = None
        self._chans: dict = {}  # peer key → SocketChannel, or None while connecting
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._connector: SocketConnector | None = None
        self._acks: AckReader | None = None
        #: messages sent over sockets / by actor call (no channel, or the buffer full)
        self.socket_sent = 0
        self.call_sent = 0
        self.received = 0

    # -- receiving ---------------------------------------------------------------------------
    def address(self, pid: int, handlers: dict[str, Callable]) -> tuple | None:
        """The address a peer in process ``pid`` connects to
        (:meth:`SocketReceiver.address`; None once the listener is closed). The listener
        starts at the first request; ``handlers`` maps the accepted method names to
        callables."""
        with self._lock:
            if self._receiver is None:
                self._handlers = dict(handlers)
                self._receiver = SocketReceiver(
                    socket_name(self._prefix, self.my_id) + "/c", self.my_id, self._accept,
                    self._on_bad, self._stopped, CONTROL_BUFFER_BYTES)
            self._receiver.expect(pid, pid)
            return self._receiver.address()

    def _accept(self, src: int, frame) -> None:
        try:
            method, args = msgpack.unpackb(frame)
            handler = self._handlers[method]
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
            raise ValueError(f"bad control message from pid {src}: "
                             f"{type(e).__name__}: {e}") from None
        self.received += 1
        try:
            handler(*args)
        except TypeError as e:
            raise ValueError(f"bad control message {method!r} from pid {src}: {e}") from None
        return None

    @property
    def refused_connections(self) -> int:
        r = self._receiver
        return 0 if r is None else r.refused_connections

    # -- sending -----------------------------------------------------------------------------
    def send(self, key, method: str, args: list | tuple, call: Callable[[], None],
             fetch: Callable) -> None:
        """Send ``[method, args]`` to the peer ``key`` (a hashable of the caller's), over
        its channel when open, else by ``call()``; never blocks on the peer."""
        chan = self._chans.get(key, False)
        if chan:
            if chan.try_send(msgpack.packb([method, list(args)])):
                self.socket_sent += 1
                return
            if chan.broken:  # the peer died: again, to its next incarnation
                with self._lock:
                    again = self._chans.get(key) is chan
                    if again:
                        self._chans[key] = None
                if again:
                    self._connect(key, fetch, 0.1)
        elif chan is False:  # never asked
            with self._lock:
                first = key not in self._chans
                if first:
                    self._chans[key] = None
            if first:
                self._connect(key, fetch, 0.0)
        self.call_sent += 1
        call()

    def _connect(self, key, fetch: Callable, delay: float) -> None:
        with self._connect_lock:
            if self._connector is None:
                self._acks = AckReader(lambda: None, self._stopped)
                self._connector = SocketConnector(self._acks, self._stopped,
                                                  lambda e, where: None)
        pid = os.getpid()

        def offer(chan: SocketChannel) -> None:
            self._chans[key] = chan

        self._connector.request(pid, self._peer_id(key), fetch, offer, delay=delay)

    @staticmethod
    def _peer_id(key) -> int:
        """The peer's id in the handshake: ``key`` is ``("task", t)`` or ``("worker", w)``."""
        kind, n = key
        return n if kind == "task" else -1 - n

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()


def send_call(control: ControlPlane | None, key, handle, method: str, args,
              node_id: str) -> None:
    """``handle.method(*args)`` on a Ray actor handle: by ``control`` as a control message
    (see :meth:`ControlPlane.send`; the channel is asked of that actor's
    ``control_address(pid, node_id)``, which answers None off ``node_id``), or by actor
    call when ``control`` is None (the socket path off)."""
    import ray

    def call() -> None:
        getattr(handle, method).remote(*args)

    if control is None:
        call()
        return
    control.send(key, method, args, call, lambda: ray.get(
        handle.control_address.remote(os.getpid(), node_id), timeout=30))
