"""``ActorSink``: one executor's sends to one destination task, as Ray actor calls or, for
a task of the same worker, over a same-node socket (``actors._local_socket``), with one
sliding window of credits over both (see the class docstring); used by
``actors._actor.ExecutorActor``."""

from __future__ import annotations

import logging
import time

from ray.exceptions import RayActorError

from actors._codec import encode_batch, encode_transfer
from actors._executor import ExecutorCore
from actors._streams import EOS_STREAM
from actors._transfer import FRAME_LOST

logger = logging.getLogger("storm_on_ray.sink")

_EOS_ITEM = (EOS_STREAM, None)
#: ``ActorSink._channel``'s answer while an offered channel waits for the old path to drain
_SWITCHING = object()

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

    Two paths, one order (``topology.transfer.local.socket``): a destination in the same
    worker gets a :class:`~actors._local_socket.SocketChannel` when its connector has
    opened one (:meth:`offer_channel`); frames then go over the socket, a frame the kernel
    refuses (``EAGAIN``) is "destination full" exactly as a full window, and the
    receiver's acknowledgements come back on the socket as ``(epoch, seq)``. Both paths
    share one (epoch, seq) numbering, and a frame changes path only when nothing is
    outstanding on the other (so the receiver never reorders across paths): the switch to
    a new channel, a frame too large for the socket (half its buffer), which goes by
    actor call, and the way back. A broken channel (its peer died: end of file) is a loss
    like a failed call: a new epoch, then actor calls until the connector offers a
    channel to the new incarnation.

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
                 "_frame_limit", "cut_frames", "_lost_at", "_progress_at", "_granted",
                 "_chan", "_offered", "_on_socket", "socket_frames", "socket_bytes",
                 "call_frames", "call_bytes", "socket_refusals", "fallbacks",
                 "reconnects", "_lost_channel", "on_channel_lost", "_silence_s",
                 "silences")

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
        #: a receiver silent this long (s) with frames unacknowledged has lost them:
        #: ``topology.message.timeout.secs`` (with checkpoints, at least the round's
        #: timeout: a receiver aligning on a barrier holds its acknowledgements)
        c = core.conf
        self._silence_s = float(max(c["topology.message.timeout.secs"],
                                    c["topology.state.checkpoint.timeout.secs"]
                                    if core.checkpoint is not None else 0))
        #: times the receiver was silent past that (see _silent)
        self.silences = 0
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
        #: an acknowledgement given by another call, ``(epoch, seq)``: the receiver held
        #: our frames while aligning on a checkpoint barrier (see credit)
        self._granted: tuple[int, int] | None = None
        # the socket path (see the class docstring): the channel in use, one offered by
        # the connector thread and not yet taken, whether the last frame went over it
        self._chan = None
        self._offered = None
        self._on_socket = False
        self._lost_channel = False  # a channel broke: the next one is a reconnect
        #: called (executor thread) when a channel breaks: the actor asks for a new one
        self.on_channel_lost = None
        #: per path: frames and bytes sent; sends the socket refused (full); channels
        #: that broke (their frames fell back to actor calls); channels opened again
        self.socket_frames = self.socket_bytes = 0
        self.call_frames = self.call_bytes = 0
        self.socket_refusals = self.fallbacks = self.reconnects = 0

    @property
    def path(self) -> str:
        """``"socket"`` while a same-node channel carries the frames, else ``"call"``."""
        return "socket" if self._chan is not None else "call"

    def offer_channel(self, chan) -> None:
        """The connector opened ``chan`` (a ``SocketChannel``) to the destination: taken
        by the executor thread at a send with nothing outstanding. Any thread."""
        self._offered = chan

    def credit(self, epoch: int, ack: int) -> None:
        """The receiver acknowledges frames up to ``ack`` of ``epoch`` by a separate call
        (it held them while aligning). Any thread: applied by the executor thread at its
        next send."""
        self._granted = (epoch, ack)

    def reset_epoch(self, gen: int) -> None:
        """A checkpoint rollback to generation ``gen``: frames from now on carry an epoch
        of at least ``gen`` from seq 0, which receivers take as new after theirs; the
        calls in flight are forgotten (their frames are dropped by the receivers).
        Executor thread."""
        self._epoch = max(gen, self._epoch + 1)
        self._next, self._acked, self._inflight, self._granted = 0, -1, [], None

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
            except Exception as e:  # the receiver raised (a bug: made visible), or Ray
                # cancelled the call: the frame may not have arrived, and a gap in the
                # numbering would hold every later frame back at the receiver for good
                self._core.errors.report(e, f"send to task {self.dest}")
                lost = True
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
        """Frames may be lost: start a new epoch (see the class docstring). With
        checkpoints a loss is a failure: the topology rolls back (no frame is replayed
        otherwise without acking)."""
        self.resets += 1
        cp = self._core.checkpoint
        if cp is not None:
            cp.failed(f"frames to task {self.dest} may be lost (its actor or a transfer "
                      f"actor died)")
        self._lost_at = time.monotonic()
        # with checkpoints the next epoch stays below the generation of any rollback the
        # coordinator may have started meanwhile (generations are clock readings): frames
        # sent before this task applies that rollback are of the old generation, and its
        # receivers, already rolled back, must drop them as older (a clock reading here
        # could pass the generation, and those frames be processed after the restore)
        self._epoch = (self._epoch + 1 if cp is not None
                       else max(time.time_ns(), self._epoch + 1))
        self._next, self._acked, self._inflight = 0, -1, []
        if self._core.state in ("ending", "done"):  # the receiver may lack our end marker
            self._send_frame([_EOS_ITEM], by_call=True)

    def _wake_sender(self, _fut) -> None:
        self._core.wakeup.set()

    def unacked(self) -> int:
        """Frames sent to the destination and not yet acknowledged (reaps finished calls)."""
        g = self._granted
        if g is not None:
            if g[0] == self._epoch and g[1] > self._acked:
                self._acked = g[1]
                self._progress_at = time.monotonic()
        c = self._chan
        if c is not None:
            a = c.acked
            if c.broken:
                self._drop_channel()
            elif a is not None and a[0] == self._epoch and a[1] > self._acked:
                self._acked = a[1]
                self._progress_at = time.monotonic()
        if self._inflight and self._next - 1 > self._acked:
            self._reap()
        n = self._next - 1 - self._acked
        if n > 0 and time.monotonic() - self._progress_at > self._silence_s:
            self._silent()
            return self._next - 1 - self._acked
        return n

    def _silent(self) -> None:
        """Frames unacknowledged for longer than the silence bound, whatever the
        replies said (a ``None`` acknowledgement: a transfer actor that restarted and no
        longer knows the task; a reply that never came): they are lost (a new epoch; with
        acking they replay, with checkpoints the topology rolls back)."""
        logger.warning("task %d: %d frames to task %d unacknowledged for %.0f s: taken "
                       "as lost", self._src, self._next - 1 - self._acked, self.dest,
                       self._silence_s)
        self.silences += 1
        self._reset()

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

    def _drop_channel(self) -> None:
        """The channel broke (its peer died, or a send failed): frames on it may be
        lost (:meth:`_reset`), the next frames go by actor call, and the actor asks for
        a channel to the destination's next incarnation (``on_channel_lost``)."""
        self._chan.close()
        self._chan = None
        self.fallbacks += 1
        self._lost_channel = True
        self._reset()
        if self.on_channel_lost is not None:
            self.on_channel_lost(self)

    def _channel(self):
        """The socket channel for the next frame, or None for an actor call: a broken
        channel is dropped (a loss: see :meth:`_reset`), an offered one taken once nothing
        is outstanding. Executor thread."""
        chan = self._chan
        if chan is not None and chan.broken:
            self._drop_channel()
            chan = None
        offered = self._offered
        if offered is not None and offered is not chan:
            if offered.broken:  # its peer died before we took it: ask again
                if self._offered is offered:
                    self._offered = None
                offered.close()
                if self.on_channel_lost is not None:
                    self.on_channel_lost(self)
            elif self.unacked() > 0:
                return _SWITCHING  # no new frame until the old path is drained
            else:
                if self._offered is offered:
                    self._offered = None
                if chan is not None:
                    chan.close()
                self._chan = chan = offered
                if self._lost_channel:
                    self.reconnects += 1
                    self._lost_channel = False
        return chan

    def _send_frame(self, items: list, by_call: bool = False) -> int:
        """Send a prefix of ``items`` as one frame; returns how many it took: all, or
        fewer when the frame would pass the frame byte limit (the rest stay in the
        batch); 0 when the socket refused it or the frame must change path while frames
        are outstanding. One tuple always goes, alone if it must. ``by_call``: by actor
        call whatever the path (an end marker sent again after a loss, when nothing is
        outstanding: it must not be refused)."""
        chan = None if by_call else self._channel()
        if chan is _SWITCHING:
            return 0
        # reap and apply acknowledgements now: a loss found here starts a new epoch, which
        # must happen before the frame takes its (epoch, seq)
        outstanding = self.unacked()
        if chan is not None and chan is not self._chan:  # it broke meanwhile
            chan = None
        limit = self._frame_limit if chan is None else min(self._frame_limit, chan.limit)
        n = len(items)
        try:
            frame = encode_batch(self._src, items, self._next, self._epoch)
            while len(frame) > limit and n > 1:
                n = max(1, n * limit // len(frame))
                frame = encode_batch(self._src, items[:n], self._next, self._epoch)
        except TypeError:
            n = len(items)
            frame = self._encode_skipping_bad(items)
        if chan is not None and len(frame) <= chan.limit:
            if not self._on_socket and outstanding > 0:
                return 0  # actor calls still outstanding: one order, so wait for them
            if not chan.try_send(frame):
                if not chan.broken:
                    self.socket_refusals += 1
                    return 0  # the receiver is not reading: full
                self._drop_channel()  # a loss: a new epoch, and this frame by actor call
                return self._send_frame(items)
            self._on_socket = True
            self.socket_frames += 1
            self.socket_bytes += len(frame)
            self._sent(n, len(items))
            return n
        if self._on_socket and outstanding > 0:
            return 0  # too large for the socket: by actor call once it is drained
        self._on_socket = False
        fut = self._send(frame).future()
        fut.add_done_callback(self._wake_sender)  # a credit is back: retry pending_emits
        self._inflight.append(fut)
        self.call_frames += 1
        self.call_bytes += len(frame)
        self._sent(n, len(items))
        return n

    def _sent(self, n: int, of: int) -> None:
        """Bookkeeping of a frame sent with ``n`` of ``of`` items (either path)."""
        if n < of:
            self.cut_frames += 1
        if self._next - 1 == self._acked:  # nothing was unacknowledged: the wait starts
            self._progress_at = time.monotonic()
        self._next += 1
        self.sent_batches += 1

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
