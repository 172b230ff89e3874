"""The collectors a spout or bolt emits through: routing, anchoring, then the outbox.

Storm's ``SpoutOutputCollectorImpl`` and ``BoltOutputCollectorImpl``: an emit is checked
against its stream's declaration, routed by the stream's grouping, given its anchors by the
acking ledger (``actors/_acking.py``) and handed to each target's batch
(``actors/_outbox.py``). Executor thread only; nothing here blocks.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from actors._acking import ACK_BATCH_VALUES, BoltLedger, SpoutLedger
from actors._errors import ErrorReporter
from actors._outbox import Outbox
from actors._replay_gate import ReplayGate
from actors._routing import StreamRouter
from topology import DEFAULT_STREAM, EmitError, OutputCollector, SpoutOutputCollector, Tuple
from topology._dead_letters import DEAD_LETTER_STREAM

logger = logging.getLogger("storm_on_ray.executor")


class _Emitter:
    """What both collectors share: the stream check and the send loops."""

    def __init__(self, component_id: str, streams: dict, routers: dict[str, StreamRouter],
                 outbox: Outbox, errors: ErrorReporter, flush_acks: Callable[[], None]
                 ) -> None:
        self._component_id = component_id
        self._streams = streams  # stream id → declared Fields (for errors)
        self.routers = routers
        # the default stream's router (None if undeclared): most emits name no stream, and
        # this spares them the look-up by name
        self._default = routers.get(DEFAULT_STREAM)
        self._outbox = outbox
        self._pending = outbox.pending_emits
        self._inserters = outbox.inserters
        self._errors = errors
        self._flush_acks = flush_acks
        #: tuples emitted (each counted once, whatever its number of targets)
        self.emitted = 0
        for r in routers.values():  # their emits may go to another task than the chosen
            for shuffle in r.load_aware_shuffles():
                outbox.reroute_within(r.index, shuffle)

    def _router(self, values, stream: str) -> StreamRouter:
        """The stream's router, after checking the stream is declared and the arity matches.

        Raises:
            EmitError: naming the component, the stream and its declared fields.
        """
        r = self.routers.get(stream)
        if r is None:
            raise EmitError(f"component {self._component_id!r} emitted on undeclared stream "
                            f"{stream!r}; declared: {sorted(self.routers)}")
        if len(values) != r.arity:
            raise EmitError(
                f"component {self._component_id!r} emitted {len(values)} values on stream "
                f"{stream!r}, which declares {r.arity} fields "
                f"{self._streams[stream].to_list()}")
        return r

    def _targets(self, values, stream: str, direct_task: int | None
                 ) -> tuple[StreamRouter, tuple[int, ...]]:
        r = self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        if direct_task is None:
            targets = r.fixed or r.route(values)
        else:
            r.check_direct(direct_task)
            targets = (direct_task,)
        self.emitted += 1
        return r, targets

    def _send(self, targets: tuple[int, ...], msg: tuple) -> tuple[int, ...]:
        """``msg`` to every target's batch, or to ``pending_emits`` behind earlier emits."""
        pending = self._pending
        if pending:
            for t in targets:
                pending.append((t, msg))
        else:
            inserters = self._inserters
            for t in targets:
                if pending or not inserters[t].try_publish(msg):
                    pending.append((t, msg))
        return targets

    def _undelivered(self, r: StreamRouter, values) -> tuple[int, ...]:
        """An untracked emit that ``r.deliver`` refused: it waits in ``pending_emits``."""
        self._pending.append((r.fixed[0], (r.index, values)))
        return r.fixed

    def _send_anchored(self, targets: tuple[int, ...], index: int, values,
                       anchors: list[list[int]]) -> tuple[int, ...]:
        """As :meth:`_send`, each target's message with its own anchors."""
        pending, inserters = self._pending, self._inserters
        for t, a in zip(targets, anchors, strict=True):
            msg = (index, values, a)
            if pending or not inserters[t].try_publish(msg):
                pending.append((t, msg))
        return targets

    def report_error(self, exc: BaseException) -> None:
        self._errors.report(exc, "report_error")


class SpoutCollector(_Emitter, SpoutOutputCollector):
    """A spout's collector: an emit with a ``msg_id`` starts a tuple tree in the ledger
    (acked at once without ackers); without one the tuple is untracked.

    Attributes:
        fail_reason: during the spout's ``fail(msg_id)``, why that tree failed (see
            ``SpoutOutputCollector.fail_reason``); None at any other time.
    """

    def __init__(self, component_id: str, streams: dict, routers: dict[str, StreamRouter],
                 outbox: Outbox, errors: ErrorReporter, flush_acks: Callable[[], None],
                 ledger: SpoutLedger) -> None:
        super().__init__(component_id, streams, routers, outbox, errors, flush_acks)
        self._ledger = ledger
        self.fail_reason: str | None = None
        #: with checkpoints: the msg ids emitted since the last barrier (acked when a
        #: checkpoint after them commits); None otherwise
        self.msg_log: list | None = None
        #: Storm's ``AnchoringOutputCollector``: set where a tuple emitted without a msg
        #: id would be lost at a rollback (a spout that keeps no position, in a topology
        #: that checkpoints with acking on); the first such emit is refused
        self.anchoring = False
        #: why the task fails: the refused emit (the spout executor fails the task)
        self.refused: str | None = None
        #: after a rollback: new emits held until its failed ids are emitted again
        #: (actors/_replay_gate.py); None otherwise
        self.gate: ReplayGate | None = None
        #: the components downstream that a late replay may reach late (for the warning)
        self.windows_downstream: tuple[str, ...] = ()
        #: new emits held behind a rollback's replays; replays emitted after the hold
        #: ended (its deadline passed), in all
        self.held_for_replays = 0
        self.late_replays = 0
        #: failed msg ids no emit could wait for (unhashable), in all
        self.unhashable_replays = 0
        self._rolled_back_at = 0.0

    def emit(self, values, stream: str = DEFAULT_STREAM, msg_id: Any = None
             ) -> tuple[int, ...]:
        """Storm's ``emit``: returns the target task ids.

        Raises:
            EmitError: an undeclared stream or a wrong number of values; no ``msg_id``
                where :attr:`anchoring` (the task then fails).
        """
        r = self._default if stream is DEFAULT_STREAM else self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        if msg_id is None and self.anchoring and stream[:2] != "__":
            self._refuse_unanchored(stream)  # (a system stream's, as dead letters, pass)
        if self.gate is not None:
            if stream[:2] != "__":
                return self._gated(None, values, stream, msg_id)
            return self._system_emit(values, stream, msg_id)
        self.emitted += 1
        if msg_id is None:
            deliver = r.deliver
            if deliver is not None and not self._pending:  # the usual: no routing at all
                return r.fixed if deliver(values) else self._undelivered(r, values)
            return self._send(r.fixed or r.route(values), (r.index, values))
        return self._tracked(r.index, values, r.fixed or r.route(values), msg_id)

    def emit_direct(self, task: int, values, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> None:
        r, targets = self._targets(values, stream, task)
        system = stream[:2] == "__"  # (as dead letters: neither refused nor held)
        if self.gate is not None and not system:
            if msg_id is None and self.anchoring:
                self._refuse_unanchored(stream)
            self.emitted -= 1  # (counted by _gated, or by the emit_direct it makes)
            self._gated(task, values, stream, msg_id)
        elif msg_id is None:
            if self.anchoring and not system:
                self._refuse_unanchored(stream)
            self._send(targets, (r.index, values))
        else:
            self._tracked(r.index, values, targets, msg_id)

    def hold_new_emits(self, failed: list, now: float, timeout_s: float) -> None:
        """A rollback failed ``failed`` (msg ids), at ``now`` (monotonic s): until each
        is emitted again, or ``timeout_s`` passed from the task's first queue check after
        the rollback (:meth:`tick_gate`), new emits wait (see actors/_replay_gate.py). A
        hold still up from an earlier rollback carries over: what it held stays held,
        first (those emits were never sent, so this rollback did not fail them)."""
        gate = self.gate = ReplayGate(failed, timeout_s, carried=self.gate)
        self._rolled_back_at = now
        self.unhashable_replays += gate.unhashable
        if gate.unhashable:
            logger.warning(
                "spout %r: %d of the msg ids the rollback failed are unhashable, so no new "
                "tuple waits for their replays (use hashable msg ids, e.g. tuples; stats: "
                "unhashable_replays)", self._component_id, gate.unhashable)
        if gate.open and gate.held:
            self._release(gate)

    def release_held(self, now: float) -> None:
        """End the hold now and send what it held (the spout's stream ended, or it
        starts draining: a held emit must not be left behind)."""
        gate = self.gate
        if gate is None:
            return
        gate.end(now)
        if gate.held:
            logger.warning(
                "spout %r ended its stream or drains with %d of the tuples the rollback "
                "failed not emitted again; its %d new tuples held behind them go now",
                self._component_id, len(gate.pending), len(gate.held))
            self._release(gate)

    def tick_gate(self, now: float) -> None:
        """The hold's deadline (executor thread, at its queue checks): past it, the
        held emits go; a gate with nothing left to do is dropped."""
        gate = self.gate
        if gate.expire(now) and gate.held:
            logger.warning(
                "spout %r: %d of the tuples the rollback failed were not emitted again "
                "within topology.message.timeout.secs of resuming (%.1f s after the "
                "rollback); its %d new tuples held behind them go now, and those replays, "
                "if they come, may be late for event-time windows %s", self._component_id,
                len(gate.pending), now - self._rolled_back_at, len(gate.held),
                list(self.windows_downstream))
            self._release(gate)
        if gate.done(now):
            self.gate = None

    def _system_emit(self, values, stream: str, msg_id: Any) -> tuple[int, ...]:
        """An emit on a system stream while a gate is up: it goes now. A dead letter
        (``RetryService``, from the spout's ``fail``) says its tuple will not be emitted
        again: no new emit waits for it."""
        gate, self.gate = self.gate, None
        try:
            out = self.emit(values, stream, msg_id)
        finally:
            self.gate = gate
        if stream == DEAD_LETTER_STREAM and gate.give_up(values[1]) and gate.held:
            self._release(gate)
        return out

    def _gated(self, task: int | None, values, stream: str, msg_id: Any):
        """An emit while a gate is up: a replay or an emit after the hold goes now;
        a new one is held."""
        gate = self.gate
        late = gate.late
        if not gate.admits(msg_id):
            gate.hold((task, values, stream, msg_id))
            self.held_for_replays += 1
            # counted as emitted now (the spout loop sees a call that emitted, not an idle
            # one), not again when it goes
            self.emitted += 1
            return ()
        if gate.late != late:
            self.late_replays += 1
            if self.late_replays == 1 or gate.late == 1:
                logger.warning(
                    "spout %r emitted a tuple the rollback failed after its hold ended "
                    "(topology.message.timeout.secs): event-time windows %s may drop it as "
                    "late (stats: late_replays)", self._component_id,
                    list(self.windows_downstream))
        self.gate = None  # (this emit, and the held ones it lets go, pass)
        try:
            if task is None:
                out = self.emit(values, stream, msg_id)
            else:
                out = self.emit_direct(task, values, stream, msg_id)
            if gate.open and gate.held:
                self._release(gate)
        finally:
            self.gate = gate
        return out

    def _release(self, gate: ReplayGate) -> None:
        saved, self.gate = self.gate, None
        try:
            for task, values, stream, msg_id in gate.release():
                self.emitted -= 1  # (counted when held)
                if task is None:
                    self.emit(values, stream, msg_id)
                else:
                    self.emit_direct(task, values, stream, msg_id)
        finally:
            self.gate = saved

    def _refuse_unanchored(self, stream: str) -> None:
        """Refuse an emit without a msg id (see :attr:`anchoring`): nothing is sent.

        Raises:
            EmitError: always, naming the spout and the stream; :attr:`refused` holds why.
        """
        self.refused = (
            f"spout {self._component_id!r} emitted a tuple on stream {stream!r} without a "
            f"msg id in a topology that checkpoints with acking on: no rollback can replay "
            f"it, so it and every later one would be lost at a failure; emit with a msg id "
            f"(replayed on fail), or make the spout a StatefulSpout that keeps its position")
        raise EmitError(self.refused)

    def _tracked(self, index: int, values, targets: tuple[int, ...], msg_id: Any
                 ) -> tuple[int, ...]:
        ledger = self._ledger
        if self.msg_log is not None:
            self.msg_log.append(msg_id)
        if len(targets) == 1:  # the usual
            anchors = ledger.on_spout_emit_one(msg_id, time.monotonic())
            if anchors is None:  # no ackers: untracked, acked after next_tuple
                return self._send(targets, (index, values))
            if ledger.held_values >= ACK_BATCH_VALUES:
                self._flush_acks()
            t, msg = targets[0], (index, values, anchors)
            if self._pending or not self._inserters[t].try_publish(msg):
                self._pending.append((t, msg))
            return targets
        many = ledger.on_spout_emit(msg_id, len(targets), time.monotonic())
        if many is None:
            return self._send(targets, (index, values))
        if ledger.held_values >= ACK_BATCH_VALUES:
            self._flush_acks()
        return self._send_anchored(targets, index, values, many)


class BoltCollector(_Emitter, OutputCollector):
    """A bolt's collector: anchored emits (to the given anchors, or with ``auto_ack`` to
    the input being executed), and Storm's ``ack``/``fail``/``resetTimeout``.

    Ack piggybacking: the last child of a one-root anchored emit is appended without
    leaving its batch (``BatchInserter.try_append``), and remembered; if its parent is
    acked while the child still waits there, the parent's ack folds into the child's edge
    (``BoltLedger.fold_ack``) and no ack message leaves for it. A batch the child filled
    leaves then. Without this, each data batch sent one ack frame to the acker
    (benchmarks/acking.py, frames per 1000 tuples).
    """

    def __init__(self, component_id: str, streams: dict, routers: dict[str, StreamRouter],
                 outbox: Outbox, errors: ErrorReporter, flush_acks: Callable[[], None],
                 ledger: BoltLedger | None, auto_ack: bool) -> None:
        super().__init__(component_id, streams, routers, outbox, errors, flush_acks)
        self._ledger = ledger
        self.auto_ack = auto_ack
        # no emit can be anchored unless acking is on and inputs are anchored for the bolt
        self._untracked = ledger is None or not auto_ack
        #: the input being executed (auto-anchoring); set by the executor
        self.current: Tuple | None = None
        self.acked = 0
        self.failed = 0
        # the last one-root child still in its batch: its parent, its anchors, its
        # inserter and its position among everything that inserter took
        self._fold_parent: Tuple | None = None
        self._fold_anchors: list | None = None
        self._fold_inserter = None
        self._fold_at = 0

    def emit(self, values, stream: str = DEFAULT_STREAM, anchors=None) -> tuple[int, ...]:
        """Storm's ``emit``, anchored to ``anchors`` (a tuple or a list of tuples) when
        acking is on; with ``auto_ack`` and no anchors, to the input being executed.
        Returns the target task ids.

        Raises:
            EmitError: an undeclared stream or a wrong number of values.
        """
        r = self._default if stream is DEFAULT_STREAM else self.routers.get(stream)
        if r is None or len(values) != r.arity:
            r = self._router(values, stream)  # raises, naming the stream
        self.emitted += 1
        deliver = r.deliver
        if deliver is not None and anchors is None and not self._pending:
            # untracked (what _anchored would decide): no routing at all
            if self._untracked or (a := self.current) is None or not a.anchors:
                return r.fixed if deliver(values) else self._undelivered(r, values)
        return self._anchored(r.index, values, r.fixed or r.route(values), anchors)

    def emit_direct(self, task: int, values, stream: str = DEFAULT_STREAM,
                    anchors=None) -> None:
        r, targets = self._targets(values, stream, task)
        self._anchored(r.index, values, targets, anchors)

    def _anchored(self, index: int, values, targets: tuple[int, ...], anchors
                  ) -> tuple[int, ...]:
        ledger = self._ledger
        if ledger is None:
            return self._send(targets, (index, values))
        if anchors is None:
            a = self.current
            if a is None or not a.anchors or not self.auto_ack:
                return self._send(targets, (index, values))
            if len(a.anchors) == 2:
                return self._anchored_one(index, values, targets, a)
            tracked = (a,)
        else:
            if isinstance(anchors, Tuple):
                anchors = (anchors,)
            tracked = [a for a in anchors if a is not None and a.anchors]
            if not tracked:
                return self._send(targets, (index, values))
            if len(tracked) == 1 and len(tracked[0].anchors) == 2:
                return self._anchored_one(index, values, targets, tracked[0])
        return self._send_anchored(targets, index, values,
                                   ledger.on_emit(tracked, len(targets)))

    def _anchored_one(self, index: int, values, targets: tuple[int, ...], a: Tuple
                      ) -> tuple[int, ...]:
        """An emit anchored to ``a`` of one root: the usual case, and the one acks can
        ride on (see the class docstring)."""
        edge = self._ledger.on_emit_one
        pending, inserters = self._pending, self._inserters
        last = targets[-1] if targets else None
        for t in targets[:-1]:
            msg = (index, values, edge(a))
            if pending or not inserters[t].try_publish(msg):
                pending.append((t, msg))
        if last is not None:
            child = edge(a)
            msg = (index, values, child)
            ins = inserters[last]
            if pending or not ins.try_append(msg):
                pending.append((last, msg))
            else:
                self._fold_parent = a
                self._fold_anchors = child
                self._fold_inserter = ins
                self._fold_at = ins.transferred + len(ins.batch) - 1
        return targets

    def ack(self, tup: Tuple) -> None:
        """Storm's ``ack`` (a second ack or fail of ``tup`` is ignored)."""
        if tup.done:
            return
        tup.done = True
        self.acked += 1
        ledger = self._ledger
        if not tup.anchors or ledger is None:
            return
        if self._fold_parent is tup:
            self._fold_parent = None
            ins = self._fold_inserter
            # the child cannot have left unless its inserter took items past its position:
            # batches leave only from this thread
            if ins.transferred <= self._fold_at:
                ledger.fold_ack(tup, self._fold_anchors)
                if len(ins.batch) >= ins.batch_size:  # held for the fold: now it leaves
                    ins.try_flush()
                return
        if ledger.on_ack(tup):
            self._flush_acks()

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        """Storm's ``fail``: the tuple's trees fail now, and their spouts replay them (or,
        at ``topology.max.replays``, give them up as dead letters). The reason travels to
        the spout: ``reason`` if given; else, called while an exception is being handled
        (the executor's fail after ``execute`` raised, or the bolt's own ``except``
        block), ``"<ExceptionClass>: <message> (in bolt '<id>')"``; else ``"failed by
        bolt '<id>'"``."""
        if tup.done:
            return
        tup.done = True
        self.failed += 1
        if tup.anchors and self._ledger is not None:
            if reason is None:
                reason = self._reason(sys.exc_info()[1])
            if self._ledger.on_fail(tup, reason):
                self._flush_acks()

    def _reason(self, exc: BaseException | None) -> str:
        """A fail's reason: the exception being handled, or the bolt's own fail."""
        if exc is None:
            return f"failed by bolt {self._component_id!r}"
        return f"{type(exc).__name__}: {exc} (in bolt {self._component_id!r})"

    def reset_timeout(self, tup: Tuple) -> None:
        """Storm's ``resetTimeout``: the tuple's trees time out later."""
        if tup.anchors and self._ledger is not None and self._ledger.on_reset_timeout(tup):
            self._flush_acks()
