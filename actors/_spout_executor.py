"""Storm's ``SpoutExecutor``: the spout loop over :class:`actors.ExecutorCore`'s rooms."""

from __future__ import annotations

import logging
import sys
import time

from actors._acking import SpoutLedger, UserCalls
from actors._collectors import SpoutCollector
from actors._executor import ExecutorCore
from actors._streams import FLUSH
from actors.state._loop import END, REWOUND
from topology import Spout, StormTopology, WindowedBolt

logger = logging.getLogger("storm_on_ray.executor")


class _Ended:
    """What the spout loop calls instead of a spout that cannot drain itself."""

    @staticmethod
    def next_tuple() -> None:
        raise StopIteration


_ENDED = _Ended()


class _Failed:
    """What the spout loop calls instead of a spout whose task failed: nothing (the
    topology has failed; ``handle.wait()`` raises)."""

    @staticmethod
    def next_tuple() -> None:
        pass


_FAILED = _Failed()


def windowed_downstream(topology: StormTopology, component: str) -> tuple[str, ...]:
    """The windowed bolts downstream of ``component``, sorted."""
    comps = topology.components
    seen, todo = set(), [component]
    while todo:
        src = todo.pop()
        for cid, spec in comps.items():
            if cid not in seen and any(g.source == src for g in spec.inputs):
                seen.add(cid)
                todo.append(cid)
    return tuple(sorted(c for c in seen if isinstance(comps[c].obj, WindowedBolt)))


class SpoutExecutor(ExecutorCore):
    """A spout task (see :class:`ExecutorCore` for the arguments)."""

    _OPEN_CALL, _CLOSE_CALL = "open", "close"

    def _make_ledger(self, topology: StormTopology, c: dict) -> SpoutLedger:
        # (the topology is at hand here: the windowed bolts a late replay may reach, named
        # in its warning)
        self._windows_downstream = windowed_downstream(topology, self.component_id)
        return SpoutLedger(self.task_id, topology.acker_tasks, topology.spout_tasks,
                           topology.ackers_in_spouts,
                           float(c["topology.message.timeout.secs"]), self._random_bits())

    def _open_component(self) -> None:
        self.obj.open(self.conf, self.context, self.collector)
        self.obj.activate()  # Storm activates a spout when its topology starts

    def _close_component(self) -> None:
        self.obj.close()

    def _make_collector(self, routers: dict) -> SpoutCollector:
        self.max_spout_pending = self.conf["topology.max.spout.pending"]
        col = SpoutCollector(self.component_id, self.spec.streams, routers, self.outbox,
                             self.errors, self.flush_acks, self.ledger)
        col.windows_downstream = self._windows_downstream
        return col

    def handle(self, el) -> None:
        """One element of the spout's receive queue: acking messages, flushes (a spout
        takes no user tuples)."""
        if el is FLUSH:
            self._flush()
        elif el[1] < 0:
            self._control(el[0], el[1], el[2])

    def _user_calls(self, calls: UserCalls) -> None:
        """The spout's ``ack``/``fail`` for what the ledger resolved (user code: an
        exception is reported and the loop goes on). During each ``fail`` the collector's
        ``fail_reason`` is that fail's reason.

        With checkpoints the ledger decides neither: a tuple is acked when the checkpoint
        after it commits (:meth:`user_acks`), and a failed or timed-out tree rolls the
        topology back, which fails each tuple emitted after the last committed barrier
        once (:meth:`user_fails`)."""
        cp = self.checkpoint
        if cp is not None:
            if calls.fails:
                reasons = calls.reasons
                cp.failed(f"a tuple tree failed ({reasons[0] if reasons else 'timed out'})")
            return
        self._call_user(calls)

    def user_acks(self, msg_ids: list) -> None:
        """The spout's ``ack`` for each of ``msg_ids`` (a checkpoint committed)."""
        self._call_user(UserCalls(msg_ids, []))

    def user_fails(self, msg_ids: list, reason: str) -> None:
        """The spout's ``fail`` for each of ``msg_ids`` (a rollback). Its new emits are
        held until it has emitted each of them again (replays before new tuples, so
        event-time windows downstream do not drop the replays as late), for at most
        ``topology.message.timeout.secs`` from the task's resume, or until its stream
        ends or it drains (see actors/_replay_gate.py)."""
        self.collector.hold_new_emits(msg_ids, time.monotonic(),
                                      float(self.conf["topology.message.timeout.secs"]))
        self._call_user(UserCalls([], msg_ids, [reason] * len(msg_ids)))

    def _call_user(self, calls: UserCalls) -> None:
        for m in calls.acks:
            self._acked += 1
            try:
                self.obj.ack(m)
            except Exception as e:
                self.errors.report(e, "ack")
        if not calls.fails:
            return
        col, reasons = self.collector, calls.reasons
        for i, m in enumerate(calls.fails):
            self._failed += 1
            self._fails_since_exhausted = True
            col.fail_reason = reasons[i] if i < len(reasons) else None
            try:
                self.obj.fail(m)
            except Exception as e:
                self.errors.report(e, "fail")
            finally:
                col.fail_reason = None

    def _loop(self) -> None:
        """Storm's spout loop. The receive queue is checked every
        ``topology.spout.recvq.skips`` + 1 iterations while ``next_tuple`` emits (as
        Storm's SpoutExecutor: an empty ``consume`` and a clock read per tuple cost
        measurably, benchmarks/acking_stages.py), and on the next iteration whenever the
        spout cannot emit (pending emits held by backpressure, ``max.spout.pending``
        reached, idle, throttled by the policy), so acks drain at once when they are what
        the spout waits for. Between two queue checks the calls come in a burst that skips
        the per-iteration checks its own emits cannot change (activation, draining, a stop
        are seen at most ``skips`` calls later; a throttling policy has no bursts).
        ``StopIteration`` ends the stream once no tree is pending; a fail after it calls
        ``next_tuple`` again, so the spout can replay."""
        q, spout, ledger, outbox = self.queue, self.obj, self.ledger, self.outbox
        pending, trees = outbox.pending_emits, ledger.trees
        acking = bool(ledger.ackers)
        skips = self.conf["topology.spout.recvq.skips"]
        max_pending = self.max_spout_pending if acking else None
        policy = self.policy
        throttles = policy.throttles_spout
        handle, col = self.handle, self.collector
        counter = skips  # check the queue on the first iteration
        idle = bp_idle = 0
        exhausted = False
        #: a rewind during a drain: the emitted count at which the drain applies again
        redrain = None
        sample = self._sample_every
        calls, next_timed = 0, (1 if sample else sys.maxsize)
        cp = self.checkpoint
        # a spout that keeps no position, where the topology checkpoints with acking on:
        # an emit without a msg id cannot be replayed at a rollback, so it fails the task
        col.anchoring = cp is not None and acking and not cp.stateful
        while not self._stop:
            recv = 0
            if counter >= skips:
                if col.refused is not None and spout is not _FAILED:
                    spout = self._fail_task(col.refused)
                if col.gate is not None:
                    col.tick_gate(time.monotonic())
                if cp is not None:
                    polled = self._poll_checkpoints()  # (a rollback waits here)
                    if polled == END:
                        return  # (the final checkpoint committed, or was restored)
                    if polled == REWOUND:  # its position was restored: not exhausted
                        exhausted = False
                        spout = self.obj
                        if self.draining:  # the drain applies again where it did
                            redrain = cp.drain_at
                recv = q.consume(handle)
                counter = 0
                # with checkpoints, a tuple's timeout does not run while a barrier after it
                # waits for its commit (the commit acks it)
                self._timers(acking and not (cp is not None and cp.timeouts_held()))
            else:
                counter += 1
            if pending and not outbox.try_flush_pending():
                counter = skips
                if recv <= 1:
                    bp_idle = self._bp_idle(bp_idle)
                continue
            bp_idle = 0
            if exhausted:
                # a fail first: it may have emptied the pending trees, and its item must be
                # replayed before the stream can end
                counter = skips
                if self._fails_since_exhausted:
                    exhausted = False
                elif cp is not None:  # (its stream ends at the poll after the final commit)
                    idle = self._idle(idle) if recv <= 1 else 0
                    continue
                elif not trees:
                    return
                else:
                    idle = self._idle(idle) if recv <= 1 else 0
                    continue
            if self._want_drain and not self.draining:
                if self._apply_drain():
                    spout = _ENDED
                redrain = self._redrain
            if redrain is not None and col.emitted >= redrain:
                redrain = None
                if self._call_drain():
                    spout = _ENDED
            if self._want_active is not self.active:
                self._apply_active()
            capped = max_pending is not None and len(trees) >= max_pending
            if (not self.active or capped
                    or (throttles and policy.spout_delay(time.monotonic(), col.emitted) > 0)):
                counter = skips
                if capped:
                    # the trees the cap waits for may sit in partial batches: send them
                    # now, not at the next flush (a DataFrameSpout's comes every 10 ms)
                    outbox.try_flush_batches()
                idle = self._idle(idle) if recv <= 1 else 0
                continue
            b = col.emitted  # (before the last next_tuple call)
            calls += 1
            timed = calls >= next_timed
            if timed:
                next_timed = calls + sample
                t0 = time.perf_counter()
            try:
                spout.next_tuple()
                if not timed and not throttles and redrain is None:
                    # a burst (a departure from Storm, whose loop makes every check above
                    # before each nextTuple): next_tuple again until the queue check is
                    # due, while each call emits and nothing it changes holds the spout
                    # back; those checks weigh on a chain host's thread
                    # (benchmarks/peers.py, chained rows). Its calls count towards the queue
                    # check and the next timed call (not if one raises: the check then
                    # comes a few calls late).
                    burst = room = min(skips - counter, next_timed - calls - 1)
                    while (room > 0 and not pending and col.emitted != b
                           and (max_pending is None or len(trees) < max_pending)
                           and not ledger.acks_due):
                        b = col.emitted
                        room -= 1
                        spout.next_tuple()
                    counter += burst - room
                    calls += burst - room
            except StopIteration:
                if col.gate is not None:  # what the hold keeps goes before the end
                    col.release_held(time.monotonic())
                self._user_calls(UserCalls(ledger.take_acks_due(), []))
                if cp is None and not trees:
                    return
                if not self._drained_sent:  # (once per generation: a rollback resets it)
                    self._drained_sent = True
                    self.send_drained()
                    if cp is not None:  # its stream ends after the final checkpoint
                        cp.end_of_input()
                exhausted = True
                self._fails_since_exhausted = False
                continue
            except Exception as e:
                self.errors.report(e, "next_tuple")
                if col.refused is not None and spout is not _FAILED:
                    spout = self._fail_task(col.refused)
            if timed:
                self.latency_sum_s += time.perf_counter() - t0
                self.latency_n += 1
            if ledger.acks_due:  # without ackers a tuple is acked once next_tuple returns
                self._user_calls(UserCalls(ledger.take_acks_due(), []))
            if col.emitted == b and recv <= 1:  # the last call emitted nothing
                counter = skips
                idle = self._idle(idle)
            else:
                idle = 0

    def _fail_task(self, reason: str) -> _Failed:
        """The task fails (an emit no rollback can replay): the coordinator fails the
        topology, naming the spout, and ``next_tuple`` is not called again."""
        logger.error("%s:%d: %s", self.component_id, self.task_id, reason)
        self.checkpoint.report("task_failed", self.task_id,
                               f"task {self.task_id}: {reason}")
        return _FAILED

    def _apply_drain(self) -> bool:
        """Start draining (executor thread): call the spout's ``drain``; True when the
        spout has none, so the executor ends its stream itself (see ``Spout.drain``).
        With checkpoints the emitted count is recorded: a rollback to a checkpoint before
        it has the rewound spout emit up to there again, then drain again (its position
        was restored, and ``init_state`` undid the drain); a drain asked for while a
        rewound spout is not yet back where it had come applies there
        (``TaskCheckpoint.replay_to``: :attr:`_redrain`)."""
        self.draining = True
        logger.info("%s:%d: draining", self.component_id, self.task_id)
        if self.collector.gate is not None:  # what the hold keeps goes before the drain
            self.collector.release_held(time.monotonic())
        cp, emitted = self.checkpoint, self.collector.emitted
        self._redrain = None
        if cp is not None:  # a rewound spout not yet back where it had come drains there
            cp.drain_at = max(emitted, cp.replay_to)
            if cp.drain_at > emitted:
                self._redrain = cp.drain_at
                return False
        return self._call_drain()

    def _call_drain(self) -> bool:
        """The spout's ``drain()``; True when it has none (or it raised): the executor
        ends the spout itself."""
        if type(self.obj).drain is Spout.drain:
            return True
        try:
            self.obj.drain()
        except Exception as e:
            self.errors.report(e, "drain")
            return True
        return False

    def _apply_active(self) -> None:
        active = self._want_active
        try:
            self.obj.activate() if active else self.obj.deactivate()
        except Exception as e:
            self.errors.report(e, "activate" if active else "deactivate")
        self.active = active
        logger.info("%s:%d: %s", self.component_id, self.task_id,
                    "activated" if active else "deactivated")
