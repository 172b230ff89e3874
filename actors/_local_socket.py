"""Same-node frames between executors over Unix-domain ``SOCK_SEQPACKET`` sockets.

A frame between two executors of one worker used to be one Ray actor call: an RPC per
frame, whose CPU on both sides dwarfs the frame's codec. Storm moves frames inside a worker
with no IPC at all (a direct ``tryPublish`` into the destination's ``JCQueue``) and Flink's
``LocalInputChannel`` reads a local subpartition without the network stack; our executors
are separate processes, so the cheapest same-node channel is a kernel socket that keeps
message boundaries: ``AF_UNIX``/``SOCK_SEQPACKET`` (the measured comparison with Ray's
shared-memory channels is in docs/design.md, "The same-node socket path").

Three pieces, none of which imports Ray (the executor actor wires them; see
``actors._actor``):

* :class:`SocketReceiver` (the destination): one listening socket under an abstract name
  (nothing is left on disk, and the name vanishes with the process, even after SIGKILL),
  and one reader thread. A connection is accepted only from a process of our uid whose pid
  the receiver was told to expect for that sender task (``SO_PEERCRED``), presenting this
  incarnation's random token; anything else is refused and counted, and one process may
  hold only :data:`MAX_PENDING_PER_PID` connections waiting for their handshake. A closed
  receiver hands out no address. The reader decodes
  each frame and inserts it like an actor call's frame (blocking while the receive queue
  is full, so it stops reading, the kernel buffer fills and the sender is refused: Storm
  2.0's in-worker backpressure), then writes the sender's cumulative acknowledgement back
  on the same socket.
* :class:`SocketChannel` (the sender's end of one pair): a non-blocking send; the
  kernel's refusal (``EAGAIN``) means "destination full", exactly as a full credit window.
  :func:`open_channel` authenticates the listener before it says anything: the process
  that listens on the name must be of our uid and the pid the receiver's actor reported
  (``SO_PEERCRED``), so a process that binds a name a stopped receiver left never sees a
  token nor a frame, nor forges an acknowledgement. Both ends are thus authenticated.
* :class:`AckReader` (one thread per sending actor): reads acknowledgements from every
  channel, hands them to their sink and wakes the executor; an end-of-file marks the
  channel broken (its peer died), and the sink falls back to actor calls.
* :class:`SocketConnector` (one thread per sending actor): asks each destination for its
  address (through a function the actor gives it: an actor call), connects, and offers
  the channel to the sink; again after a loss, to the destination's new incarnation.

Linux only (abstract names, ``SO_PEERCRED``); elsewhere :func:`supported` is False and
every frame goes by actor call.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

import msgpack

logger = logging.getLogger("storm_on_ray.socket")

#: an acknowledgement on the wire: (epoch, highest seq fully inserted)
ACK = struct.Struct("<qq")
#: the first message of a connection (msgpack): [HELLO, token, src task, dest task]
HELLO = "storm-on-ray/socket/1"
_OK = b"ok"
#: seconds a connection may take to present its handshake before it is refused
HANDSHAKE_TIMEOUT_S = 5.0
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
#: frames the reader takes from one connection before it looks at the others (fairness)
_BURST = 32
#: the smallest per-pair buffer (bytes): below it, frames would be cut too small
MIN_BUFFER_BYTES = 16 * 1024
#: connections that may wait for their handshake at once (more are refused)
MAX_PENDING_HANDSHAKES = 64
#: connections one process may keep waiting for their handshake at once (more are
#: refused), so that one local process cannot hold every pending place
MAX_PENDING_PER_PID = 4


def supported() -> bool:
    """True where the socket path can run: Linux (abstract names and ``SO_PEERCRED``)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED")


def wmem_max() -> int:
    """The kernel's ceiling for ``SO_SNDBUF`` (``/proc/sys/net/core/wmem_max``, bytes)."""
    try:
        with open("/proc/sys/net/core/wmem_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 212_992  # Linux's usual default


def pair_buffer_bytes(receive_bound: int, local_senders: int) -> int:
    """The per (sender, receiver) socket buffer, bytes: ``min(wmem_max, receive byte bound
    ÷ (2 × local senders))`` (no byte bound: ``wmem_max``), at least
    :data:`MIN_BUFFER_BYTES`. Frames on the socket path are cut to half of it, so what
    the kernel holds for all local senders stays within the receive queue's byte bound."""
    cap = wmem_max()
    if receive_bound > 0:
        cap = min(cap, receive_bound // (2 * max(1, local_senders)))
    return max(MIN_BUFFER_BYTES, cap)


def socket_name(prefix: str | None, task_id: int) -> str:
    """The abstract name of ``task_id``'s listening socket: the submit prefix (so that
    ``/proc/net/unix`` shows whose it is), the task and a random suffix per incarnation."""
    p = (prefix or "anon")[:60]
    return f"storm-on-ray/{p}/{task_id}/{secrets.token_hex(4)}"


def _abstract(name: str) -> bytes:
    return b"\0" + name.encode()


class _Peer:
    """One accepted connection's state on the receiver."""

    __slots__ = ("sock", "pid", "src", "deadline", "pending_ack")

    def __init__(self, sock: socket.socket, pid: int, deadline: float) -> None:
        self.sock = sock
        self.pid = pid  # the connecting process (SO_PEERCRED)
        self.src: int | None = None  # known once the handshake passed
        self.deadline = deadline
        self.pending_ack: tuple[int, int] | None = None  # refused by a full buffer


class SocketReceiver:
    """The destination's side: a listening socket and its reader thread.

    Args:
        name: the abstract socket name (see :func:`socket_name`).
        task_id: the receiving task (its handshake's destination).
        accept: ``accept(src_task, frame) -> (epoch, ack) | None``: decode and insert one
            frame (a ``memoryview`` valid only during the call); may block while the
            receive queue is full. Raises ``ValueError`` (``FrameError`` included) for a
            bad frame, ``InterruptedError`` when the task stops while it waits.
        on_bad: reports a bad frame or a refused connection (counted by the caller).
        stopped: polled between reads; True ends the thread.
        buffer_bytes: the per-pair buffer (see :func:`pair_buffer_bytes`); frames of more
            than half of it are malformed here (senders cut theirs to half).

    Counters (read from any thread): ``frames``, ``bytes``, ``malformed``,
    ``refused_connections``, ``connections``.
    """

    def __init__(self, name: str, task_id: int, accept: Callable, on_bad: Callable,
                 stopped: Callable[[], bool], buffer_bytes: int) -> None:
        self.name = name
        self.task_id = task_id
        self.token = secrets.token_bytes(16)
        self.buffer_bytes = buffer_bytes
        self.pid = os.getpid()  # the listener's: what a sender checks (SO_PEERCRED)
        self._closed = False
        self._accept_frame = accept
        self._on_bad = on_bad
        self._stopped = stopped
        self._expected: dict[int, int] = {}  # src task → the pid it connects from
        self._lock = threading.Lock()
        self._buf = bytearray(buffer_bytes // 2 + 1)
        self.frames = 0
        self.bytes = 0
        self.malformed = 0
        self.refused_connections = 0
        self.connections = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._listener.bind(_abstract(name))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._peers: dict[int, _Peer] = {}  # fd → peer
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"socket-in-{task_id}")
        self._thread.start()

    def expect(self, src_task: int, pid: int) -> None:
        """Task ``src_task`` will connect from process ``pid`` (its actor's, told by an
        actor call that only a member of this topology can make). Any thread."""
        with self._lock:
            self._expected[src_task] = pid

    def address(self) -> tuple[str, bytes, int, int] | None:
        """``(abstract name, token, per-pair buffer bytes, listening pid)`` for a sender
        (:func:`open_channel`), or None once the receiver is closed: its name is free
        again, so any local process could bind it."""
        if self._closed:
            return None
        return self.name, self.token, self.buffer_bytes, self.pid

    @property
    def closed(self) -> bool:
        """True once the receiver stopped listening (:meth:`close`, or its task stopped)."""
        return self._closed

    def close(self) -> None:
        """Stop listening (the reader thread ends at its next poll)."""
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass

    # -- the reader thread ---------------------------------------------------------------------
    def _run(self) -> None:
        sel = self._sel
        try:
            while not self._stopped():
                # an acknowledgement the kernel refused is retried soon, not at the next
                # frame: its sender's window may wait on it
                retry = any(p.pending_ack is not None for p in self._peers.values())
                try:
                    events = sel.select(0.002 if retry else 0.5)
                except (OSError, ValueError):  # closed under us (shutdown)
                    return
                for key, _ in events:
                    try:
                        if key.data is None:
                            self._accept()
                        else:
                            self._readable(key.data)
                    except InterruptedError:
                        raise
                    except Exception as e:  # a bug: that peer goes (it falls back)
                        self._on_bad(e)
                        if key.data is not None:
                            self._drop(key.data)
                self._housekeeping()
        except InterruptedError:  # the task stopped while an insert waited
            pass
        finally:  # every sender sees end of file and falls back to actor calls
            for peer in list(self._peers.values()):
                self._drop(peer)
            self.close()

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        try:
            pid, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET,
                                                       socket.SO_PEERCRED, _CRED.size))
        except OSError:
            pid, uid = -1, -1
        peer = _Peer(sock, pid, time.monotonic() + HANDSHAKE_TIMEOUT_S)
        if uid != os.getuid():  # another user: refused before it can hold anything
            self._refuse(peer, f"peer uid {uid} is not ours")
            return
        pending = [p.pid for p in self._peers.values() if p.src is None]
        if pending.count(pid) >= MAX_PENDING_PER_PID:
            self._refuse(peer, f"pid {pid} has {MAX_PENDING_PER_PID} connections waiting "
                               f"for their handshake already")
            return
        if len(pending) >= MAX_PENDING_HANDSHAKES:
            self._refuse(peer, "too many connections waiting for their handshake")
            return
        self._peers[sock.fileno()] = peer
        self._sel.register(sock, selectors.EVENT_READ, peer)

    def _refuse(self, peer: _Peer, why: str) -> None:
        self.refused_connections += 1
        self._drop(peer)
        self._on_bad(ConnectionRefusedError(f"task {self.task_id}: refused a socket "
                                            f"connection: {why}"))

    def _drop(self, peer: _Peer) -> None:
        try:
            fd = peer.sock.fileno()
            if fd >= 0:
                self._sel.unregister(peer.sock)
                self._peers.pop(fd, None)
        except (KeyError, ValueError, OSError):
            pass
        peer.sock.close()

    def _handshake(self, peer: _Peer) -> None:
        try:
            data = peer.sock.recv(512)
        except BlockingIOError:
            return
        except OSError as e:
            self._refuse(peer, f"handshake failed ({e})")
            return
        try:
            pid, uid, _ = _CRED.unpack(peer.sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
            hello, token, src, dest = msgpack.unpackb(data)
        except (OSError, ValueError, TypeError, msgpack.UnpackException) as e:
            self._refuse(peer, f"not a handshake ({type(e).__name__})")
            return
        with self._lock:
            expected = self._expected.get(src) if isinstance(src, int) else None
        if hello != HELLO or dest != self.task_id or not isinstance(src, int):
            self._refuse(peer, "not a handshake for this task")
        elif uid != os.getuid():
            self._refuse(peer, f"peer uid {uid} is not ours")
        elif expected is None or pid != expected:
            self._refuse(peer, f"pid {pid} is not the one expected for task {src}")
        elif not isinstance(token, bytes) or not secrets.compare_digest(token, self.token):
            self._refuse(peer, f"wrong token from pid {pid}")
        else:
            try:
                peer.sock.send(_OK)
            except OSError:  # the sender gave up waiting (this reader was blocked): it
                self._drop(peer)  # tries again, so this is no refusal
                return
            peer.src = src
            self.connections += 1

    def _readable(self, peer: _Peer) -> None:
        if peer.src is None:
            self._handshake(peer)
            return
        sock, buf = peer.sock, self._buf
        for _ in range(_BURST):
            try:
                n, _, flags, _ = sock.recvmsg_into([buf])
            except BlockingIOError:
                return
            except OSError:  # reset by a dying peer
                self._drop(peer)
                return
            if n == 0:  # end of file: the sender closed or died
                self._drop(peer)
                return
            # a bad frame leaves a gap in the pair's numbering: the connection goes, so
            # the sender sees end of file and starts a new epoch (nothing acked is lost)
            if flags & socket.MSG_TRUNC:
                self.malformed += 1
                self._on_bad(ValueError(f"socket frame from task {peer.src} larger than "
                                        f"{len(buf) - 1} bytes (truncated, dropped)"))
                self._drop(peer)
                return
            try:
                res = self._accept_frame(peer.src, memoryview(buf)[:n])
            except ValueError as e:
                self.malformed += 1
                self._on_bad(e)
                self._drop(peer)
                return
            self.frames += 1
            self.bytes += n
            if res is not None:
                self._send_ack(peer, res)
            if self._stopped():
                return

    def _send_ack(self, peer: _Peer, ack: tuple[int, int]) -> None:
        try:
            peer.sock.send(ACK.pack(*ack))
            peer.pending_ack = None
        except BlockingIOError:  # the sender does not read its acks: retried later
            peer.pending_ack = ack
        except OSError:
            self._drop(peer)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        for peer in list(self._peers.values()):
            if peer.src is None and now > peer.deadline:
                self._refuse(peer, "no handshake in time")
            elif peer.pending_ack is not None:
                self._send_ack(peer, peer.pending_ack)


class SocketChannel:
    """The sender's end of one (sender task, receiver task) socket.

    ``limit`` is the largest frame it carries (half the pair's buffer); ``acked`` the last
    ``(epoch, ack)`` read back (set by the :class:`AckReader`); ``broken`` True once the
    peer is gone (end of file, reset) or a send failed: the sink then falls back.
    """

    __slots__ = ("sock", "limit", "acked", "broken", "dest")

    def __init__(self, sock: socket.socket, limit: int, dest: int) -> None:
        self.sock = sock
        self.limit = limit
        self.dest = dest
        self.acked: tuple[int, int] | None = None
        self.broken = False

    def try_send(self, frame: bytes) -> bool:
        """Send one frame without blocking: False if the kernel refused it (the receiver
        is not reading: full) or the channel is broken (see ``broken``)."""
        if self.broken:
            return False
        try:
            self.sock.send(frame)
            return True
        except BlockingIOError:
            return False
        except OSError:
            self.broken = True
            return False

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass


def open_channel(name: str, token: bytes, buffer_bytes: int, pid: int, src_task: int,
                 dest_task: int, timeout: float = HANDSHAKE_TIMEOUT_S) -> SocketChannel:
    """Connect to ``dest_task``'s receiver (:meth:`SocketReceiver.address`: ``name``,
    ``token``, ``buffer_bytes`` and its listening ``pid``), check that the listener is
    that process of our uid (``SO_PEERCRED``, before anything is sent), and pass its
    handshake (blocking, up to ``timeout`` s); the channel comes back non-blocking.

    Raises:
        ConnectionRefusedError: the listener is another process than the receiver's
            (another user's, or one that bound the name after the receiver closed), or
            the receiver refused the handshake.
        OSError: the receiver is gone or did not answer in time.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        # the kernel doubles what it is given (for its own bookkeeping): half, so the
        # pair holds about buffer_bytes
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes // 2)
        sock.settimeout(timeout)
        sock.connect(_abstract(name))
        # for a connected AF_UNIX socket, the credentials of the process that called
        # listen() (unix(7), SO_PEERCRED)
        peer_pid, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET,
                                                        socket.SO_PEERCRED, _CRED.size))
        if uid != os.getuid() or peer_pid != pid:
            raise ConnectionRefusedError(
                f"task {dest_task}'s socket {name!r} is held by pid {peer_pid} of uid {uid}, "
                f"not by the receiver's pid {pid} of uid {os.getuid()}: not connecting")
        sock.send(msgpack.packb([HELLO, token, src_task, dest_task]))
        if sock.recv(16) != _OK:
            raise ConnectionRefusedError(f"task {dest_task} refused the handshake")
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return SocketChannel(sock, buffer_bytes // 2, dest_task)


class AckReader:
    """One thread per sending actor: reads every channel's acknowledgements into
    ``channel.acked`` and calls ``wake()`` (the executor's wakeup: a credit is back); an
    end of file or error marks the channel broken and wakes too.

    Args:
        wake: called after each batch of acknowledgements (any thread).
        stopped: polled; True ends the thread.
    """

    def __init__(self, wake: Callable[[], None], stopped: Callable[[], bool]) -> None:
        self._wake = wake
        self._stopped = stopped
        self._sel = selectors.DefaultSelector()
        self._new: queue.SimpleQueue = queue.SimpleQueue()
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._sel.register(self._r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, daemon=True, name="socket-acks")
        self._thread.start()

    def add(self, chan: SocketChannel) -> None:
        """Start reading ``chan``'s acknowledgements (any thread)."""
        self._new.put(chan)
        try:
            self._w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stopped():
            try:
                self._poll()
            except Exception as e:  # never die: every sink of this actor waits on us
                logger.warning("socket ack reader: %s: %s", type(e).__name__, e)
                time.sleep(0.05)

    def _poll(self) -> None:
        sel, size = self._sel, ACK.size
        for key, _ in sel.select(0.5):
            chan = key.data
            if chan is None:
                try:
                    self._r.recv(4096)
                except OSError:
                    pass
                while not self._new.empty():
                    c = self._new.get()
                    if c.broken:
                        continue
                    try:
                        stale = sel.get_map().get(c.sock.fileno())
                        if stale is not None:  # a closed channel's fd, reused
                            sel.unregister(stale.fd)
                        sel.register(c.sock, selectors.EVENT_READ, c)
                    except (OSError, ValueError, KeyError):  # closed meanwhile
                        c.broken = True
                continue
            last, gone = None, False
            while True:
                try:
                    data = chan.sock.recv(size)
                except BlockingIOError:
                    break
                except OSError:
                    gone = True
                    break
                if len(data) != size:  # end of file (b""), or not an ack
                    gone = True
                    break
                last = ACK.unpack(data)
            if last is not None:
                chan.acked = last
            if gone:
                chan.broken = True
                try:
                    sel.unregister(chan.sock)
                except (KeyError, ValueError, OSError):
                    pass
            self._wake()


class SocketConnector:
    """One thread per sending actor that opens channels: for each request, ``fetch()``
    returns the destination's address (``(name, token, buffer bytes, pid)``, or None when
    the socket path does not apply, e.g. another node, or its receiver is closed), then
    :func:`open_channel`, then
    ``offer(channel)``. A failed attempt is retried after a doubling delay (0.1 s to 5 s)
    while ``wanted()`` stays True.

    Args:
        acks: the actor's :class:`AckReader` (every new channel is added to it).
        stopped: polled; True ends the thread.
        on_error: reports a failed attempt (rate-limited by the caller).
    """

    def __init__(self, acks: AckReader, stopped: Callable[[], bool],
                 on_error: Callable[[Exception, str], None]) -> None:
        self._acks = acks
        self._stopped = stopped
        self._on_error = on_error
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="socket-connect")
        self._thread.start()

    def request(self, src: int, dest: int, fetch: Callable, offer: Callable,
                wanted: Callable[[], bool] = lambda: True, delay: float = 0.0) -> None:
        """Open a channel from task ``src`` to task ``dest`` in the background."""
        self._jobs.put((time.monotonic() + delay, src, dest, fetch, offer, wanted, 0.1))

    def _run(self) -> None:
        waiting: list = []
        while not self._stopped():
            try:  # (idle, it wakes once a second only to see whether to stop)
                job = self._jobs.get(timeout=0.1 if waiting else 1.0)
                waiting.append(job)
            except queue.Empty:
                pass
            now = time.monotonic()
            due = [j for j in waiting if j[0] <= now]
            waiting = [j for j in waiting if j[0] > now]
            for job in due:
                if self._stopped():
                    return
                _, src, dest, fetch, offer, wanted, backoff = job
                try:
                    if not wanted():
                        continue
                    addr = fetch()
                    if addr is None:
                        continue  # not on this path (another node, or switched off)
                    chan = open_channel(*addr, src, dest)
                    self._acks.add(chan)
                    offer(chan)
                except Exception as e:  # the peer restarts, or refused us: later
                    try:
                        self._on_error(e, f"socket to task {dest}")
                    except Exception:
                        pass
                    waiting.append((time.monotonic() + backoff, src, dest, fetch, offer,
                                    wanted, min(5.0, backoff * 2)))
