"""One task's side of checkpointing, performed: the steps of its
:class:`~actors.state._machine.TaskMachine` (which decides) on the task's executor thread
(its chain host's for a chained task), driven by the executor loops through
``actors.state._loop.poll_chain``; barriers reach :meth:`TaskCheckpoint.on_barrier`.

Alignment (Flink's ``CheckpointBarrierHandler``, aligned mode): once barrier N came from
an input channel, that channel's later elements are parked until barrier N has come from
every open input; the receive thread is never blocked. Instead the channel's
acknowledgements stop (``Inbound.hold``): its sender runs out of credit within
``topology.transfer.max.inflight.batches`` frames, and the credit is sent back by a
separate call once aligned. Parked elements are therefore bounded.

Rollback (Flink's global failover): the receiving side drops every frame of an earlier
epoch from the moment the rollback message arrives (``Inbound.begin_rollback``); the
executor thread drops its queue, pending emits, partial batches, parked elements and tuple
trees, restores the last committed checkpoint, rewinds or fails its spout's tuples,
reports that it paused, and waits for the resume.

End of input apart from end of stream (Flink's FLIP-147): a task whose input has ended
sends DRAINED on, reports it (:meth:`TaskCheckpoint.end_of_input`) and keeps taking
barriers and commits; its snapshots record it as finished (``FINISHED_KEY``), so a
restore of one of them does not run ``finish()`` again. The task ends its stream once the
final checkpoint has committed or is restored. A rollback forgets every end-of-data
marker: the rewound spouts send them again, as Flink regenerates ``MAX_WATERMARK``.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors._codec import decode_key, value_encoder
from actors.state._internals import (
    INTERNAL_GROUP,
    INTERNAL_GROUPS,
    INTERNAL_PREFIX,
    USER_GROUPS,
    CheckpointedInternals,
    InGroup,
)
from actors.state._loop import _MARKERS, clear_ledger
from actors.state._machine import CORRUPT, LOST, RESTORE_FAILED, RESTORED, TaskMachine
from actors.state._plan import is_stateful
from actors.state._provider import CorruptCheckpoint, MissingState, TaskStore
from topology._state import KeyValueState

if TYPE_CHECKING:  # (actors/_executor.py imports this module: no cycle at run time)
    from actors._executor import ExecutorCore

logger = logging.getLogger("storm_on_ray.checkpoint")

#: rounds whose durations the stats keep (p50/p99 over them)
RECENT_ROUNDS = 100
#: the coordinator's messages to a task
_KINDS = ("trigger", "commit", "rollback", "resume")
#: the stored key (internal group) that records a stateful task as finished: its input had
#: ended, and its ``finish()`` run, when the checkpoint was taken (two internal prefixes:
#: no ``CheckpointedInternals`` key, ``INTERNAL_PREFIX`` + a msgpack value, begins so)
FINISHED_KEY = INTERNAL_PREFIX + INTERNAL_PREFIX + b"finished"


def enable_checkpoints(core: ExecutorCore, store: TaskStore | None, gen: int | None = 0,
                       checkpoint_id: int | None = None, rejoining: bool = False,
                       key_group: Callable[[Any], int] | None = None,
                       groups: range | None = None, final: bool = False,
                       finished: tuple = ()) -> TaskCheckpoint:
    """Make ``core`` take part in checkpoints (before it starts; a chain host before its
    chained tasks, which share its inbox): ``store`` is its ``TaskStore`` (None without
    state). At start the state of ``checkpoint_id`` is restored; a restarted task
    (``rejoining``) restores on its executor thread and waits for the coordinator's resume
    of generation ``gen`` (None: it asks the coordinator first); ``final``: that
    checkpoint is the stream's final one, so the task only ends its stream; ``finished``:
    the tasks whose ``finish()`` had run by that checkpoint (the coordinator's record)."""
    host = core.chain_host
    core.checkpoint = TaskCheckpoint(core, store, key_group, groups,
                                     host.checkpoint.inbox if host is not None else None,
                                     (gen, checkpoint_id, rejoining, final, finished))
    return core.checkpoint


class TaskCheckpoint:
    """A task's checkpointing: the performer of its :class:`TaskMachine`'s steps
    (executor thread, except :meth:`request`, the control thread's).

    Args:
        core: the task's executor.
        store: the task's store (None for a task without state).
        key_group: the state key → key group function of a keyed (fields-grouped) bolt.
        groups: the key groups the task owns (None: per-task state).
        inbox: the coordinator messages' queue (a chained task shares its host's).
        start: ``(gen, checkpoint_id, rejoining, final, finished tasks)``: see
            :meth:`open` and :func:`enable_checkpoints`.
    """

    def __init__(self, core: ExecutorCore, store: TaskStore | None,
                 key_group: Callable[[Any], int] | None = None,
                 groups: range | None = None, inbox: deque | None = None,
                 start: tuple = (0, None, False, False, ())) -> None:
        self.core = core
        self._start = start
        self.store = store
        self.obj = core.obj
        self.stateful = is_stateful(core.obj)
        self.is_spout = core.is_spout
        self.machine = TaskMachine(core.task_id, core.is_spout, self.stateful)
        self.state = (KeyValueState(component=core.component_id, task=core.task_id,
                                    key_group=key_group, groups=groups)
                      if self.stateful else None)
        self._encode_key = value_encoder()
        #: coordinator messages received, by kind
        self.received: dict[str, int] = {}
        #: what the coordinator sent, for the executor thread: (task's checkpoint, kind,
        #: args); one inbox per executor thread (a chain's tasks share their host's)
        self.inbox: deque = deque() if inbox is None else inbox
        #: parked elements (bolts: of the inputs whose barrier came while aligning)
        self.parked: list = []
        # spouts: msg ids emitted since the last barrier, and per earlier barrier
        self.msgs: list = []
        self.rounds: deque = deque()
        if self.is_spout:
            core.collector.msg_log = self.msgs
        #: hooks set by the actor: report(method, *args) to the coordinator;
        #: grant(src_task, epoch, ack) credit to a sender; reset_sinks(gen); ask() the
        #: coordinator what a restarted task restores: (gen, checkpoint id, final,
        #: finished tasks), raising if it cannot be asked now
        self.report: Callable[..., None] = lambda *a: None
        self.grant: Callable[[int, int, int], None] = lambda *a: None
        self.reset_sinks: Callable[[int], None] = lambda gen: None
        self.ask: Callable[[], tuple] = _no_coordinator
        self._finish_stored = False
        #: the snapshot taken at a barrier, written by the next ``write`` step
        self._snapshot: tuple | None = None
        self._initialized = False
        # spouts: the collector's emitted count at each barrier since the last committed
        # one, at the start of this generation, and where a drain takes effect (a rewind
        # during a drain emits up to there again, then drains again)
        self.emitted_at: dict[int, int] = {}
        self._emitted_origin = 0
        self.drain_at: int | None = None
        #: the emitted count at which a rewound spout is back where it had come before
        #: the rollback (a drain asked for earlier applies there)
        self.replay_to = 0
        #: set by a rollback that restored a spout's position (the loop starts again)
        self.rewound = False
        # figures
        self.checkpoints = 0
        self.rollbacks = 0
        self.last_snapshot_ms: float | None = None
        self.last_keys_written = 0
        self.parked_max = 0
        self.restores = 0
        #: the round's start here (a spout's trigger, a bolt's first barrier; monotonic s)
        self._started: dict[int, float] = {}
        #: recent rounds: start to commit here, first barrier to aligned (ms)
        self.durations_ms: deque = deque(maxlen=RECENT_ROUNDS)
        self.alignments_ms: deque = deque(maxlen=RECENT_ROUNDS)
        #: stored bytes of the runtime-internal entries (persistent windows), by key
        self._internal_bytes: dict[bytes, int] = {}
        self._perform = {
            "ask": self._do_ask, "rollback": self._do_rollback, "restore": self._do_restore,
            "snapshot": self._do_snapshot, "forward": self._do_forward,
            "write": self._do_write, "hold": self._do_hold, "release": self._do_release,
            "commit": self._do_commit, "input_ended": self._do_input_ended,
            "report": self._do_report, "bad_frame": lambda: self.core.count_bad_frame()}

    # -- the machine's state, as the executor and the stats read it ----------------------------
    gen = property(lambda self: self.machine.gen)
    paused = property(lambda self: self.machine.paused)
    final = property(lambda self: self.machine.final)
    input_ended = property(lambda self: self.machine.input_ended)
    finish_ran = property(lambda self: self.machine.finish_ran)
    last_committed = property(lambda self: self.machine.last_committed)
    aligning = property(lambda self: self.machine.aligning)

    def perform(self, steps: list) -> None:
        """Perform the machine's steps in order (executor thread)."""
        for kind, args in steps:
            self._perform[kind](*args)

    # -- start ------------------------------------------------------------------------------
    def open(self) -> None:
        """After ``open``/``prepare``. A first start restores the start's checkpoint (None:
        empty) and calls ``init_state`` now (raising what the restore raised: the submit
        fails). A restarted task (``rejoining``) restores on its executor thread, after
        the actor's constructor (Ray does not restart an actor whose constructor raised:
        ray-project/ray#46746), through the same report-and-retry path as a rollback, and
        waits for the coordinator's resume before its first tuple; without the
        coordinator's answer (``gen`` None) it asks first."""
        gen, checkpoint_id, rejoining, final, finished = self._start
        now = time.monotonic()
        if not rejoining:
            if checkpoint_id is not None:  # (a rewind to it during a drain counts from here)
                self.emitted_at = {checkpoint_id: self.core.collector.emitted}
            self._committed_before = checkpoint_id
            self.machine.on_start(now, first=(gen, checkpoint_id, final,
                                              self.core.task_id in finished))
            if self.stateful:  # (the machine's one step: this restore)
                try:
                    self._restore(checkpoint_id, raising=True)
                except MissingState:  # a task new in the topology started from a
                    logger.warning("%s:%d: no state in the savepoint's checkpoint %s: "
                                   "starts empty", self.core.component_id,
                                   self.core.task_id, checkpoint_id)  # savepoint
                    self._restore(None, raising=True)
            self.perform(self.machine.on_restored(
                RESTORED, checkpoint_id, "", now,
                self._finish_stored if self.stateful else None))
            return
        answer = None if gen is None else (gen, checkpoint_id, final, finished)
        self.inbox.append((self, "start", answer))
        self.core.wakeup.set()

    def _do_ask(self) -> None:
        try:
            answer = self.ask()
        except Exception as e:  # the coordinator restarts: asked again on the clock
            logger.warning("%s:%d: the checkpoint coordinator was not reached (%s); asking "
                           "again", self.core.component_id, self.core.task_id, e)
            self.perform(self.machine.on_ask_failed(time.monotonic()))
            return
        self.perform(self.machine.on_restart_answer(*answer, time.monotonic()))

    def _do_restore(self, checkpoint_id: int | None) -> None:
        now = time.monotonic()
        if not self.stateful:
            self.perform(self.machine.on_restored(RESTORED, checkpoint_id, "", now))
            return
        try:
            self._restore(checkpoint_id, raising=False)
        except MissingState as e:
            logger.error("%s:%d: %s", self.core.component_id, self.core.task_id, e)
            self.perform(self.machine.on_restored(LOST, checkpoint_id, e.where, now))
            return
        except CorruptCheckpoint as e:
            logger.warning("%s:%d: %s", self.core.component_id, self.core.task_id, e)
            self.perform(self.machine.on_restored(CORRUPT, e.checkpoint_id, str(e), now))
            return
        except Exception as e:  # the store failed: stay paused, roll back again
            self.core.errors.report(e, f"restore of checkpoint {checkpoint_id}")
            self.perform(self.machine.on_restored(RESTORE_FAILED, checkpoint_id, str(e), now))
            return
        if self.is_spout and self._initialized:  # rewind: the spout reads its position
            self._user("init_state", self.state)
            self.rewound = True
        elif not self._initialized:
            self._initialized = True
            self._user("init_state", self.state)
        self.perform(self.machine.on_restored(RESTORED, checkpoint_id, "", now,
                                              self._finish_stored))

    def _restore(self, checkpoint_id: int | None, raising: bool) -> None:
        """Read checkpoint ``checkpoint_id`` (None: empty) into the state, the
        runtime-internal state and the finished record; a first start also calls
        ``init_state`` (``raising``: its exception propagates)."""
        groups = self.state._groups
        entries = self.store.restore(checkpoint_id, USER_GROUPS if groups is None else groups)
        keyed_internal = {k: entries.pop(k) for k in [k for k in entries
                                                        if k.startswith(INTERNAL_PREFIX)]}
        self.state.replace({decode_key(k): v for k, v in entries.items()})
        self.restores += checkpoint_id is not None
        entries = self.store.restore(checkpoint_id, INTERNAL_GROUPS)
        entries.update(keyed_internal)  # (InGroup entries: a join's buffers, by key group)
        self._finish_stored = entries.pop(FINISHED_KEY, None) is not None
        if isinstance(self.obj, CheckpointedInternals):
            self._internal_bytes = {k: len(v) for k, v in entries.items()}
            try:
                self.obj.restore_internals({decode_key(k[1:]): v for k, v in entries.items()
                                           if k.startswith(INTERNAL_PREFIX)}, checkpoint_id)
            except ValueError as e:
                raise CorruptCheckpoint(f"task {self.core.task_id}", checkpoint_id or 0,
                                        str(e)) from None
        if raising:
            self._initialized = True
            self.obj.init_state(self.state)

    # -- control thread ----------------------------------------------------------------------
    def request(self, kind: str, args: tuple) -> None:
        """Queue a coordinator message (control thread); a rollback starts at once on the
        receiving side (frames of older epochs are dropped from now on)."""
        if kind not in _KINDS:
            raise ValueError(f"unknown checkpoint message {kind!r}")
        if kind == "rollback" and args[0] > self.machine.gen:
            if self.core.state in ("ending", "done"):
                # a task ends its stream only once the final checkpoint committed, so the
                # rollback's target is that one (a task restarted after it): it holds all
                # this task did, which only flushes its end of stream, and pauses at once
                # (a done one is not waited for)
                self.machine.gen = args[0]
                if self.core.state == "ending":
                    self.core.rollback_while_ending = args[0]
                    self.core.wakeup.set()
                self.report("paused", self.core.task_id, args[0])
                return
            self.core.inbound.begin_rollback(args[0])
        self.received[kind] = self.received.get(kind, 0) + 1
        self.inbox.append((self, kind, args))
        self.core.wakeup.set()

    # -- executor thread ---------------------------------------------------------------------
    def apply(self, kind: str, args: tuple | None) -> None:
        """Apply one inbox entry: a coordinator message, or a restarted task's start
        (executor thread)."""
        now = time.monotonic()
        if kind == "start":
            self.perform(self.machine.on_start(now, answer=args))
        else:
            self.perform(self.machine.on_message(kind, args, now))

    def on_clock(self) -> None:
        """While paused: the machine's reports again (executor thread)."""
        self.perform(self.machine.on_clock(time.monotonic()))

    def timeouts_held(self) -> bool:
        """A spout's tuple timeouts wait while a barrier after its tuples waits for its
        commit (the commit acks them)."""
        return bool(self.rounds)

    def end_of_input(self) -> None:
        """This task's input has ended (a spout past its last tuple; a bolt whose inputs
        all sent end of data, after its ``finish()`` and the DRAINED it sent on): its
        snapshots from now on record it as finished, and the coordinator is told (once per
        generation). Executor thread."""
        self.perform(self.machine.on_end_of_input())

    def final_committed(self) -> bool:
        """True once the stream's final checkpoint (taken after every task finished its
        input) has committed or been restored here: the task ends its stream."""
        return self.machine.final

    def failed(self, reason: str) -> None:
        """A failure seen here (a failed or timed-out tree, a lost frame, a failed write):
        one report per generation."""
        self.perform(self.machine.failed(reason))

    def _do_report(self, method: str, args: tuple) -> None:
        self.report(method, *args)

    def _do_input_ended(self) -> None:
        if isinstance(self.obj, CheckpointedInternals):
            self.obj.input_ended()

    def _do_commit(self, checkpoint_id: int, final: bool) -> None:
        prev, self._committed_before = self._committed_before, checkpoint_id
        for cid in [c for c in self.emitted_at if c < checkpoint_id]:
            del self.emitted_at[cid]
        t0 = self._started.pop(checkpoint_id, None)
        if t0 is not None:
            self.durations_ms.append((time.monotonic() - t0) * 1000)
        for cid in [c for c in self._started if c < checkpoint_id]:
            del self._started[cid]
        published = True
        if self.stateful:
            self._user("pre_commit", checkpoint_id)
            if isinstance(self.obj, CheckpointedInternals):
                try:
                    self.obj.internal_commit(checkpoint_id)
                except Exception as e:  # (a sink that cannot publish): roll back to it
                    published = False
                    self.core.errors.report(e, f"commit of checkpoint {checkpoint_id}")
                    self.failed(f"commit of checkpoint {checkpoint_id} failed: {e}")
            if prev is not None:
                try:
                    self.store.collect(prev)
                except Exception as e:  # (a full disk): the data stays, the task goes on
                    self.core.errors.report(e, f"collection after checkpoint {checkpoint_id}")
        if self.is_spout:
            self._ack_rounds(checkpoint_id)
        self.perform(self.machine.on_committed(final, published))

    _committed_before: int | None = None

    def _ack_rounds(self, upto: int) -> None:
        """The spout's ``ack`` for every tuple emitted before barrier ``upto``."""
        acks = []
        while self.rounds and self.rounds[0][0] <= upto:
            acks.extend(self.rounds.popleft()[1])
        if acks:
            self.core.user_acks(acks)

    def _do_rollback(self, gen: int, checkpoint_id: int | None, finished: tuple) -> None:
        """Drop everything of the earlier generation: queued and parked elements (an
        upstream's end of stream is kept), pending emits, tuple trees; a spout acks what
        the checkpoint covers, rewinds its drain and fails (a replaying spout) what came
        after; ``pre_rollback``."""
        core = self.core
        self.rollbacks += 1
        core.inbound.begin_rollback(gen)  # (done at the request; a restart's answer here)
        ended = [el for el in self.parked if el[1] in _MARKERS]  # (a stream that ended
        self.parked = []  # stays ended)
        self._snapshot = None
        self._started.clear()
        core.blocked = frozenset()
        core.clear_io()
        for el in ended:
            core._control(el[0], el[1], el[2])
        # every end of input is regenerated: the rewound upstreams send DRAINED again
        core.reset_end_of_input()
        self._finish_stored = False
        clear_ledger(core.ledger)
        self.reset_sinks(gen)
        self._committed_before = checkpoint_id
        if self.is_spout:
            if checkpoint_id is not None:
                self._ack_rounds(checkpoint_id)
            after = [m for _, ms in self.rounds for m in ms] + self.msgs
            self.rounds.clear()
            self.msgs = core.collector.msg_log = []
            self._rewind_drain(checkpoint_id)
            core._fails_since_exhausted = True  # the loop calls next_tuple again
            if not self.stateful and after:  # a replaying spout: each fails once
                core.user_fails(after, "rolled back")
        if self.stateful and self._initialized:  # (a restarted task's state is not bound
            self._user("pre_rollback")  # yet: its init_state comes after the restore)

    def _rewind_drain(self, checkpoint_id: int | None) -> None:
        """A spout rolls back to ``checkpoint_id``: a drain it had begun takes effect
        again after as many emits as it made between that checkpoint's barrier and the
        drain (none when the barrier came after the drain)."""
        now = self.core.collector.emitted
        at = (self._emitted_origin if checkpoint_id is None
              else self.emitted_at.get(checkpoint_id))
        if at is not None:  # how far the spout had come, in the new count: a drain that
            # comes before it is back there applies there (replay_to), not at once
            self.replay_to = now + max(0, max(now, self.replay_to) - at)
        if self.drain_at is not None:
            left = self.drain_at - at if at is not None and at < self.drain_at else 0
            self.drain_at = now + left
        self.emitted_at = {checkpoint_id: now} if checkpoint_id is not None else {}
        self._emitted_origin = now

    def _user(self, hook: str, *args) -> bool:
        """Call a user hook; an exception is reported (False)."""
        try:
            getattr(self.obj, hook)(*args)
        except Exception as e:  # user code: reported
            self.core.errors.report(e, hook)
            return False
        return True

    # -- a round's steps ---------------------------------------------------------------------
    def _do_snapshot(self, checkpoint_id: int) -> None:
        """Take the task's changes for ``checkpoint_id`` (in memory; written by
        ``write``). A spout records its barrier's place; a bolt first runs input gathered
        but not processed (a ``BatchBolt``'s batch precedes the barrier)."""
        core = self.core
        now = time.monotonic()
        if self.is_spout:
            self.emitted_at[checkpoint_id] = core.collector.emitted
            self._started[checkpoint_id] = now
            self.alignments_ms.append(0.0)
        else:
            t0 = self._started.get(checkpoint_id)
            if t0 is not None:
                self.alignments_ms.append((now - t0) * 1000)
            core.finish_pending_input()
        self._snapshot = None
        if not self.stateful:
            self._snapshot = (checkpoint_id, None)
            return
        if not self._user("pre_prepare", checkpoint_id):  # (Flink declines it)
            self.failed(f"pre_prepare of checkpoint {checkpoint_id} raised")
            return
        state = self.state
        puts, deletes = state.take_changes()
        kg, enc = state.key_group_of, self._encode_key
        try:
            puts = [(kg(k), enc(k), v) for k, v in puts]
            deletes = [(kg(k), enc(k)) for k in deletes]
            if isinstance(self.obj, CheckpointedInternals):
                more, gone = self.obj.internal_changes(checkpoint_id)
                pre = INTERNAL_PREFIX
                more = [(k.group, pre + enc(k.key), v) if isinstance(k, InGroup)
                        else (INTERNAL_GROUP, pre + enc(k), v) for k, v in more]
                gone = [(k.group, pre + enc(k.key)) if isinstance(k, InGroup)
                        else (INTERNAL_GROUP, pre + enc(k)) for k in gone]
                sizes = self._internal_bytes
                sizes.update((k, len(v)) for _, k, v in more)
                for _, k in gone:
                    sizes.pop(k, None)
                puts += more
                deletes += gone
        except Exception as e:  # (a value that does not encode): the round fails
            core.errors.report(e, f"snapshot of checkpoint {checkpoint_id}")
            self.failed(f"snapshot of checkpoint {checkpoint_id} failed: {e}")
            return
        finish_ran = self.machine.finish_ran
        if finish_ran != self._finish_stored:
            if finish_ran:
                puts.append((INTERNAL_GROUP, FINISHED_KEY, b"\xc3"))  # (true)
            else:
                deletes.append((INTERNAL_GROUP, FINISHED_KEY))
        self._snapshot = (checkpoint_id, (puts, deletes, finish_ran))

    def _do_forward(self, checkpoint_id: int) -> None:
        """The barrier to every downstream task, now (a spout's tuples before it form the
        round that its commit acks)."""
        if self.is_spout:
            self.rounds.append((checkpoint_id, self.msgs))
            self.msgs = self.core.collector.msg_log = []
        self.core.send_barrier(checkpoint_id)

    def _do_write(self, checkpoint_id: int) -> None:
        """Write the snapshot durably, then report the task prepared."""
        snap, self._snapshot = self._snapshot, None
        if snap is None or snap[0] != checkpoint_id:
            return  # (the snapshot failed, and said so)
        t0 = time.perf_counter()
        if snap[1] is not None:
            puts, deletes, finish_ran = snap[1]
            try:
                self.store.prepare(checkpoint_id, puts, deletes)
            except Exception as e:  # (a full disk...): the round fails, the task goes on
                self.core.errors.report(e, f"snapshot of checkpoint {checkpoint_id}")
                self.failed(f"snapshot of checkpoint {checkpoint_id} failed: {e}")
                return
            self._finish_stored = finish_ran
            self.last_keys_written = len(puts) + len(deletes)
        self.checkpoints += 1
        self.last_snapshot_ms = (time.perf_counter() - t0) * 1000
        self.report("prepared", self.core.task_id, checkpoint_id, self.machine.gen,
                    self.machine.finish_ran)

    # -- alignment (bolts) -------------------------------------------------------------------
    def on_barrier(self, src: int, values) -> None:
        """Barrier ``values[0]`` from input task ``src`` (see :meth:`TaskMachine.on_barrier`;
        executor thread)."""
        if not values or not isinstance(values[0], int):
            self.core.count_bad_frame()
            return
        cid = values[0]
        if self.machine.aligning is None and not self.machine.paused:
            self._started.setdefault(cid, time.monotonic())
        core = self.core
        self.perform(self.machine.on_barrier(src, cid, core.upstream_open - core.back_sources))

    def check_aligned(self) -> None:
        """An input ended: complete the alignment if it was the last one waited for."""
        core = self.core
        self.perform(self.machine.on_input_closed(core.upstream_open - core.back_sources))

    def _do_hold(self, src: int) -> None:
        self.core.blocked = frozenset(self.machine.seen)
        self.core.inbound.hold(src)

    def _do_release(self) -> None:
        core = self.core
        core.blocked = frozenset()
        for src, epoch, ack in core.inbound.release():
            self.grant(src, epoch, ack)
        parked, self.parked = self.parked, []
        for el in parked:
            core.handle(el)

    def park(self, el) -> None:
        self.parked.append(el)
        if len(self.parked) > self.parked_max:
            self.parked_max = len(self.parked)

    def stats(self) -> dict:
        m = self.machine
        return {"checkpoints": self.checkpoints, "rollbacks": self.rollbacks,
                "input_ended": m.input_ended, "finish_ran": m.finish_ran,
                "final": m.final,
                "received": dict(self.received),
                "last_committed": m.last_committed, "generation": m.gen,
                "paused": m.paused, "aligning": m.aligning,
                "parked": len(self.parked), "parked_max": self.parked_max,
                "last_snapshot_ms": self.last_snapshot_ms,
                "last_keys_written": self.last_keys_written,
                "state_keys": len(self.state) if self.state is not None else None,
                "state_bytes": (self.state.stored_bytes + sum(self._internal_bytes.values())
                                if self.state is not None else None),
                "restores": self.restores,
                "checkpoint_ms_p50": _quantile(self.durations_ms, 0.5),
                "checkpoint_ms_p99": _quantile(self.durations_ms, 0.99),
                "alignment_ms_p50": _quantile(self.alignments_ms, 0.5),
                "alignment_ms_p99": _quantile(self.alignments_ms, 0.99),
                **({"guarantee": ("exactly-once" if self.stateful else
                                  "exactly-once while this task lives; at-least-once for "
                                  "its pending tuples if it dies")}
                   if self.is_spout else {})}


def _no_coordinator() -> tuple:
    raise RuntimeError("no checkpoint coordinator to ask")


def _quantile(values, q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), rounded to 0.1 ms; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


__all__ = ["TaskCheckpoint", "enable_checkpoints", "FINISHED_KEY"]
