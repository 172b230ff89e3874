"""The same-node socket path (actors/_local_socket.py) without a Ray cluster: a real
``SocketReceiver`` inserting into a real receiving ``ExecutorCore``'s inbound, a real
``ActorSink`` whose actor calls run the receiver's ``receive`` logic on a thread."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from concurrent.futures import Future

import pytest

from actors import make_executor
from actors._codec import FrameError, decode_batch, encode_batch
from actors._local_socket import (
    HELLO,
    AckReader,
    SocketReceiver,
    open_channel,
    pair_buffer_bytes,
    socket_name,
    supported,
)
from actors._sink import ActorSink
from tests._util import until
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder

pytestmark = pytest.mark.skipif(not supported(), reason="the socket path needs Linux")


class _Call:
    def __init__(self, fut: Future) -> None:
        self.fut = fut

    def future(self) -> Future:
        return self.fut


class Pair:
    """Task 2 (a spout's core) sending to task 1 (a collector bolt's core) over a socket and
    over actor calls; the receiving queue is drained into ``got`` on demand."""

    def __init__(self, conf: dict, max_inflight: int = 2) -> None:
        b = TopologyBuilder()
        b.set_spout("src", SeqSpout(10))
        b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
        topo = b.create_topology()  # tasks: sink=1, src=2
        self.recv = make_executor("t", topo, conf, 1, {1: 0, 2: 0})
        self.send_core = make_executor("t", topo, conf, 2, {1: 0, 2: 0})
        self.bad: list[Exception] = []
        self.stop = False
        self.receiver = SocketReceiver(
            socket_name("test", 1), 1, self._accept, self.bad.append, lambda: self.stop,
            pair_buffer_bytes(conf.get("topology.executor.receive.buffer.bytes", 0), 1))
        self.receiver.expect(2, __import__("os").getpid())
        self.calls = 0
        self.sink = ActorSink(self._call, 2, 1, max_inflight, self.send_core)
        self.acks = AckReader(self.send_core.wakeup.set, lambda: self.stop)
        self.got: list = []
        self.gate = threading.Event()  # actor calls complete only while it is set
        self.gate.set()

    def _accept(self, src, frame):
        s, epoch, seq, items = decode_batch(frame, 1 << 26, len(self.recv.streams))
        if s != src:
            raise FrameError("wrong source")
        ack = self.recv.inbound.accept_frame(s, seq, items, False, epoch, len(frame))[0]
        return None if ack is None else (epoch, ack)

    def _call(self, frame: bytes):
        """An actor call: the receiver's ``receive`` on another thread."""
        self.calls += 1
        fut: Future = Future()

        def run():
            self.gate.wait()
            s, epoch, seq, items = decode_batch(frame, 1 << 26, len(self.recv.streams))
            fut.set_result(self.recv.inbound.accept_frame(s, seq, items, False, epoch,
                                                          len(frame))[0])
        threading.Thread(target=run, daemon=True).start()
        return _Call(fut)

    def connect(self) -> None:
        chan = open_channel(*self.receiver.address(), 2, 1)
        self.acks.add(chan)
        self.sink.offer_channel(chan)

    def drain(self) -> None:
        self.recv.queue.consume(self.got.append)

    def send_all(self, batches: list[list]) -> None:
        """Send every batch in order through the sink, draining as we go."""
        for items in batches:
            while items:
                n = self.sink(items)
                items = items[n:]
                if not n:
                    self.drain()
                    self.send_core.wakeup.wait(0.01)
                    self.send_core.wakeup.clear()

    def close(self) -> None:
        self.stop = True
        self.receiver.close()


def _items(first: int, n: int, size: int = 8) -> list:
    return [(0, [i, "x" * size]) for i in range(first, first + n)]


def test_frames_over_socket_and_actor_calls_interleaved_arrive_in_order_once():
    # an 8 KiB frame limit on the socket: batches of large tuples go by actor call (each
    # change of path waits until nothing is outstanding), small ones over the socket
    p = Pair({"topology.executor.receive.buffer.bytes": 32 * 1024})
    try:
        p.connect()
        batches, seq = [], 0
        for k in range(120):
            size = 20_000 if k % 7 == 3 else 16  # every 7th batch: over the socket's limit
            n = 1 if size > 1000 else 20
            batches.append(_items(seq, n, size))
            seq += n
        p.send_all(batches)
        until(lambda: (p.drain(), len(p.got))[1] >= seq, 10, "every tuple", 0.005)
        assert [e[2][0] for e in p.got] == list(range(seq))  # in order, each once
        s = p.sink
        assert s.socket_frames > 0 and s.call_frames >= 17 and s.path == "socket"
        assert p.calls == s.call_frames and p.receiver.frames == s.socket_frames
        assert p.recv.inbound.duplicate_frames == 0 and not p.bad
    finally:
        p.close()


def test_a_full_receiver_refuses_through_the_socket_and_loses_nothing():
    # credits do not bind (1,000 frames): the reader blocks on the full queue, the kernel
    # buffer fills and the socket refuses; the sender holds the rest, bounded
    p = Pair({"topology.executor.receive.buffer.size": 64,
              "topology.executor.receive.buffer.bytes": 64 * 1024}, max_inflight=1000)
    try:
        p.connect()
        p.sink([(0, [0, "warm"])])
        until(lambda: p.sink.path == "socket" and p.receiver.frames == 1, 5, "the socket")
        sent = 1
        while p.sink.socket_refusals == 0:  # nobody drains: the queue fills, then the socket
            n = p.sink(_items(sent, 4, 200))
            sent += n
            assert sent < 5000, "the socket never refused"
        assert p.recv.queue.size() <= 64
        in_kernel = p.sink.outstanding()
        assert 0 < in_kernel * 4 * 220 < 2 * p.receiver.buffer_bytes + 64 * 1024
        p.send_all([_items(sent, 40, 200)])
        sent += 40
        until(lambda: (p.drain(), len(p.got))[1] >= sent, 10, "every tuple", 0.005)
        assert [e[2][0] for e in p.got] == list(range(sent))
    finally:
        p.close()


def test_a_peer_gone_mid_stream_is_a_loss_then_actor_calls():
    p = Pair({})
    try:
        p.connect()
        p.send_all([_items(0, 10)])
        until(lambda: p.receiver.frames >= 1, 5, "socket frames")
        epoch = p.sink._epoch
        p.sink._chan.sock.shutdown(socket.SHUT_RDWR)  # the receiver's end sees EOF
        p.send_all([_items(10, 10)])
        until(lambda: (p.drain(), len(p.got))[1] >= 20, 10, "every tuple", 0.005)
        s = p.sink
        assert s.fallbacks == 1 and s.path == "call" and s._epoch > epoch and s.resets == 1
        assert sorted(e[2][0] for e in p.got) == list(range(20))
    finally:
        p.close()


_FOREIGN = """
import socket, sys, msgpack
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(b"\\0" + sys.argv[1].encode())
s.send(msgpack.packb([sys.argv[2], bytes.fromhex(sys.argv[3]), 2, 1]))
s.settimeout(10)
print(repr(s.recv(16)))
"""


def test_an_unrelated_process_is_refused_even_with_the_token():
    p = Pair({})
    try:
        name, token, _, pid = p.receiver.address()
        out = subprocess.run([sys.executable, "-c", _FOREIGN, name, HELLO, token.hex()],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "b''", out  # closed: not the pid expected for task 2
        assert p.receiver.refused_connections == 1 and p.receiver.connections == 0
        assert "pid" in str(p.bad[-1])
        # and our own pid with a wrong token
        with pytest.raises(OSError):
            open_channel(name, b"0" * 16, 65536, pid, 2, 1)
        assert p.receiver.refused_connections == 2
    finally:
        p.close()


_SQUATTER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(b"\\0" + sys.argv[1].encode())
s.listen(1)
print("bound", flush=True)
s.settimeout(10)
try:
    conn, _ = s.accept()
    conn.settimeout(2)
    hello = conn.recv(512)            # what a sender tells it: the token, if anything
    conn.send(b"ok")                  # and it answers as a receiver would
    print(hello.hex(), flush=True)
except OSError:
    print("", flush=True)
"""


def test_a_closed_receiver_hands_out_no_address():
    p = Pair({})
    assert p.receiver.address() is not None
    p.close()
    assert p.receiver.address() is None   # its name is free for any process to bind


def test_a_process_squatting_a_closed_receivers_name_gets_nothing():
    """A sender that still has a stopped receiver's address refuses whoever listens on
    the name now (not the pid the receiver reported) before it sends the token."""
    p = Pair({})
    addr = p.receiver.address()
    p.close()
    until(lambda: _name_free(addr[0]), 5, "the receiver's name freed")
    squatter = subprocess.Popen([sys.executable, "-c", _SQUATTER, addr[0]],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "bound"
        with pytest.raises(ConnectionRefusedError, match=f"pid {squatter.pid}"):
            open_channel(*addr, 2, 1)
        told = squatter.communicate(timeout=20)[0]
        assert addr[1].hex() not in told and HELLO.encode().hex() not in told
    finally:
        squatter.kill()
        squatter.wait()


def _name_free(name: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(b"\0" + name.encode())
        return False
    except OSError:
        return True
    finally:
        s.close()


def test_one_process_cannot_hold_every_pending_handshake():
    """Connections that never say hello, from this process, past its own cap: another
    process still reaches the handshake (and is judged on its pid, not turned away)."""
    from actors._local_socket import (
        HANDSHAKE_TIMEOUT_S,
        MAX_PENDING_HANDSHAKES,
        MAX_PENDING_PER_PID,
    )

    p = Pair({})
    held = []
    try:
        name, token, _, _ = p.receiver.address()
        for _ in range(MAX_PENDING_HANDSHAKES):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c.connect(b"\0" + name.encode())
            held.append(c)
        # (well before the handshake timeout, which refuses every silent connection)
        until(lambda: p.receiver.refused_connections
              >= MAX_PENDING_HANDSHAKES - MAX_PENDING_PER_PID, HANDSHAKE_TIMEOUT_S / 2,
              "this pid capped")
        out = subprocess.run([sys.executable, "-c", _FOREIGN, name, HELLO, token.hex()],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "b''", out
        assert "is not the one expected" in str(p.bad[-1]), p.bad[-1]
    finally:
        for c in held:
            c.close()
        p.close()


def test_malformed_wire_data_is_counted_and_dropped_with_its_connection():
    # a bad frame leaves a gap in the pair's numbering: the receiver closes that
    # connection (the sender sees end of file and starts a new epoch); a new one works
    p = Pair({})
    try:
        bad = [b"\xc1 not msgpack", encode_batch(5, [(0, [1, "a"])], 0, 0),  # other task
               b"x" * (p.receiver.buffer_bytes // 2 + 10)]  # over the limit
        for k, frame in enumerate(bad, 1):
            chan = open_channel(*p.receiver.address(), 2, 1)
            chan.sock.setblocking(True)
            chan.sock.send(frame)
            chan.sock.settimeout(10)
            assert chan.sock.recv(64) == b""  # end of file: dropped with its connection
            assert p.receiver.malformed == k and len(p.bad) == k
            chan.close()
        chan = open_channel(*p.receiver.address(), 2, 1)
        chan.sock.setblocking(True)
        chan.sock.send(encode_batch(2, [(0, [7, "ok"])], 0, 0))
        chan.sock.settimeout(10)
        assert len(chan.sock.recv(64)) == 16  # its acknowledgement: (epoch 0, seq 0)
        p.drain()
        assert [e[2][0] for e in p.got] == [7] and p.receiver.frames == 1
    finally:
        p.close()


def test_an_offered_channel_is_taken_only_once_the_calls_before_it_are_acknowledged():
    p = Pair({})
    try:
        p.gate.clear()  # the receiver's actor calls hang (as while it restarts)
        assert p.sink(_items(0, 5)) == 5 and p.sink.path == "call"
        p.connect()
        assert p.sink(_items(5, 5)) == 0  # switching: nothing new until the call is in
        assert p.receiver.frames == 0
        p.gate.set()
        p.send_all([_items(5, 5), _items(10, 5)])
        until(lambda: (p.drain(), len(p.got))[1] >= 15, 10, "every tuple", 0.005)
        assert [e[2][0] for e in p.got] == list(range(15))
        assert p.sink.path == "socket" and p.sink.call_frames == 1
        assert p.sink.socket_frames == 2
    finally:
        p.close()
