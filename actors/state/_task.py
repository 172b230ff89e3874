"""One task's side of checkpointing: barriers, alignment, snapshots, commit and rollback.

Runs on the task's executor thread (its chain host's for a chained task), driven by the
executor loops: :meth:`TaskCheckpoint.poll` applies what the coordinator sent (queued by
the control thread), :meth:`TaskCheckpoint.on_barrier` aligns a bolt's inputs.

Alignment (Flink's ``CheckpointBarrierHandler``, aligned mode): once barrier N came from
an input channel, that channel's later elements are parked, not processed, until barrier
N has come from every open input; the receive thread is never blocked (one thread serves
every channel, so blocking it would hold the barriers that alignment waits for). Instead
the channel's acknowledgements stop (``Inbound.hold``): its sender runs out of credit
within ``topology.transfer.max.inflight.batches`` frames, and the credit is sent back by a
separate call once aligned. Parked elements are therefore bounded.

Rollback (Flink's global failover): the receiving side drops every frame of an earlier
epoch from the moment the rollback message arrives (``Inbound.begin_rollback``: frames
carry their sender's epoch, and after a rollback senders use one at least the new
generation); the executor thread drops its queue, pending emits, partial batches,
parked elements and tuple trees, restores the state of the last committed checkpoint,
rewinds or fails its spout's tuples, reports that it paused, and waits for the resume.

End of input apart from end of stream (Flink's FLIP-147): a task whose input has ended (a
spout past its last tuple, a bolt whose inputs all sent their end-of-data marker, after its
``finish()``) sends DRAINED on, reports it (:meth:`TaskCheckpoint.end_of_input`) and keeps
taking barriers and commits; its snapshots record it as finished, so a restore of one of
them does not run ``finish()`` again, and a restore of an earlier one does, when the input
ends again. The task ends its stream once the final checkpoint (taken when every task had
finished) has committed, or is restored (:meth:`TaskCheckpoint.final_committed`). A rollback
forgets every end-of-data marker, queued, parked or applied: the rewound spouts send them
again when they reach their end, as Flink regenerates ``MAX_WATERMARK``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors._codec import decode_key, value_encoder
from actors._streams import BARRIER_STREAM, EOS_STREAM, FLUSH
from actors.state._internals import (
    INTERNAL_GROUP,
    INTERNAL_GROUPS,
    INTERNAL_PREFIX,
    USER_GROUPS,
    CheckpointedInternals,
)
from actors.state._provider import CorruptCheckpoint, TaskStore
from topology import StormTopology, WindowedBolt
from topology._keygroups import key_group_count, key_group_range, state_key_group
from topology._state import KeyValueState, StatefulBolt, StatefulSpout, _Stateful
from topology._two_phase import TwoPhaseCommitSink

if TYPE_CHECKING:  # (actors/_executor.py imports this module: no cycle at run time)
    from actors._executor import ExecutorCore
    from actors._inbound import Inbound
    from backpressure import JCQueue

logger = logging.getLogger("storm_on_ray.checkpoint")

#: a task paused by a checkpoint rollback reports again this often (seconds) until it is
#: resumed: Ray fails a call to an actor that is still restarting (at-most-once actor
#: tasks), so the coordinator's resume to a task that paused while it restarted can be lost
PAUSED_REPORT_S = 1.0
#: rounds whose durations the stats keep (p50/p99 over them)
RECENT_ROUNDS = 100
#: the coordinator's messages to a task
_KINDS = ("trigger", "commit", "rollback", "resume")
#: the config key of the windows' ack-on-entry rule (actors/windowing/executor.py)
ACK_ON_ENTRY = "topology.bolts.window.ack.on.entry"
#: the end markers a rollback keeps: an end of stream, which comes only after the final
#: checkpoint committed (a rollback after it, a task restarted then, restores that one);
#: an end-of-data marker (DRAINED) is dropped, and the rewound upstream sends it again
_MARKERS = (EOS_STREAM,)
#: the stored key (internal group) that records a stateful task as finished: its input had
#: ended, and its ``finish()`` run, when the checkpoint was taken (two internal prefixes:
#: no ``CheckpointedInternals`` key, ``INTERNAL_PREFIX`` + a msgpack value, begins so)
FINISHED_KEY = INTERNAL_PREFIX + INTERNAL_PREFIX + b"finished"


def is_stateful(obj: Any) -> bool:
    """True for a component whose state is checkpointed."""
    return isinstance(obj, _Stateful)


def checkpointed(topology: StormTopology, conf: dict) -> bool:
    """True when the topology runs checkpoints: some bolt is stateful (a stateful spout
    alone keeps its position only where checkpoints run) or a ``TwoPhaseCommitSink``; or a
    windowed bolt takes input from a spout whose source waits for acks (a
    ``StreamingDataFrameSpout`` with msg ids), acking is on and
    ``topology.bolts.window.ack.on.entry`` is unset (the plan's choice: its windows are
    persistent, so Spark commits only rows in a committed checkpoint). Every windowed bolt
    of a checkpointed topology runs with persistent windows."""
    comps = topology.components.values()
    if any(not spec.is_spout and (is_stateful(spec.obj)
                                  or isinstance(spec.obj, TwoPhaseCommitSink))
           for spec in comps):
        return True
    return (bool(topology.acker_tasks) and conf.get(ACK_ON_ENTRY) is None
            and any(spec.is_spout and spec.obj.acks_hold_source for spec in comps)
            and any(isinstance(spec.obj, WindowedBolt) for spec in comps))


def keyed_state(topology: StormTopology, component: str, task: int, conf: dict
                ) -> tuple[Callable[[Any], int] | None, range | None]:
    """The state key → key group function and the groups that ``task`` owns, for a
    stateful bolt whose every input is a fields grouping on the same number of fields
    (its state is keyed: a key is the grouped value, or the tuple of them); ``(None,
    None)`` otherwise (per-task state)."""
    spec = topology.components[component]
    if spec.is_spout or not spec.inputs or not is_stateful(spec.obj):
        return None, None
    arities = {len(g.fields) if g.kind == "fields" and g.fields else 0 for g in spec.inputs}
    if len(arities) != 1 or 0 in arities:
        return None, None
    arity = arities.pop()
    groups = key_group_count(conf)
    tasks = list(topology.component_tasks[component])
    owned = key_group_range(tasks.index(task), len(tasks), groups)
    return (lambda key: state_key_group(key, arity, groups)), owned


def enable_checkpoints(core: ExecutorCore, store: TaskStore | None, gen: int = 0,
                       checkpoint_id: int | None = None, paused: bool = False,
                       key_group: Callable[[Any], int] | None = None,
                       groups: range | None = None, final: bool = False,
                       finished: bool = False) -> TaskCheckpoint:
    """Make ``core`` take part in checkpoints (before it starts; a chain host before its
    chained tasks, which share its inbox): ``store`` is its ``TaskStore`` (None without
    state). At start the state of ``checkpoint_id`` is restored; ``paused`` (a restarted
    task) waits for the coordinator's resume of generation ``gen`` first; ``final``: that
    checkpoint is the stream's final one, so the task only ends its stream; ``finished``:
    the task's ``finish()`` had run by that checkpoint (the coordinator's record)."""
    host = core.chain_host
    core.checkpoint = TaskCheckpoint(core, store, key_group, groups,
                                     host.checkpoint.inbox if host is not None else None,
                                     (gen, checkpoint_id, paused, final, finished))
    return core.checkpoint


def drop_queued(queue: JCQueue, inbound: Inbound) -> list:
    """A rollback: empty ``queue`` (receive queue and overflow) under the inbound side's
    insert lock, so no frame of an older epoch enters after; returns the end markers it
    held and those of frames dropped on arrival (an upstream that ended stays ended; only
    ends of streams are kept, see :data:`_MARKERS`)."""
    markers = []

    def drop(el) -> None:
        if el is not FLUSH and el[1] in _MARKERS:
            markers.append(el)
    with inbound.fill_lock:
        while queue.size() or not queue.is_empty_overflow():
            if not queue.consume(drop):
                break
    markers.extend(inbound.take_kept_markers())
    return markers


def poll_chain(host: ExecutorCore, cores: tuple) -> None:
    """Apply the coordinator's messages queued for ``cores`` (a host and the tasks chained
    into it, sharing its inbox) on the host's executor thread; while any of them is paused
    by a rollback, wait here for the resume (or a stop), reporting again every
    :data:`PAUSED_REPORT_S`."""
    inbox = host.checkpoint.inbox
    again = time.monotonic() + PAUSED_REPORT_S
    while True:
        while inbox:
            cp, kind, args = inbox.popleft()
            if cp.core.state == "running":
                cp.apply(kind, args)
        paused = [c.checkpoint for c in cores if c.state == "running" and c.checkpoint.paused]
        if host._stop or not paused:
            return
        host.wakeup.wait(0.05)
        host.wakeup.clear()
        if time.monotonic() >= again:  # the resume may have been lost: ask again
            again = time.monotonic() + PAUSED_REPORT_S
            for cp in paused:
                cp.report("paused", cp.core.task_id, cp.gen)


def clear_ledger(ledger) -> None:
    """Forget every tree and held acking value of a task's ledger (a rollback)."""
    if ledger is None:
        return
    ledger.take_messages()
    for name in ("trees", "acks_due", "fails_due"):
        v = getattr(ledger, name, None)
        if v is not None:
            v.clear()


class TaskCheckpoint:
    """A task's checkpointing (executor thread, except :meth:`request`).

    Args:
        core: the task's executor.
        store: the task's store (None for a task without state).
        key_group: the state key → key group function of a keyed (fields-grouped) bolt.
        groups: the key groups the task owns (None: per-task state).
        inbox: the coordinator messages' queue (a chained task shares its host's).
        start: ``(gen, checkpoint_id, paused, final, finished)`` for :meth:`open`.
    """

    def __init__(self, core: ExecutorCore, store: TaskStore | None,
                 key_group: Callable[[Any], int] | None = None,
                 groups: range | None = None, inbox: deque | None = None,
                 start: tuple = (0, None, False, False, False)) -> None:
        self.core = core
        self._start = start
        self.store = store
        self.obj = core.obj
        self.stateful = is_stateful(core.obj)
        self.is_spout = core.is_spout
        self.state = (KeyValueState(component=core.component_id, task=core.task_id,
                                    key_group=key_group, groups=groups)
                      if self.stateful else None)
        self._encode_key = value_encoder()
        self.gen = 0
        #: coordinator messages received, by kind
        self.received: dict[str, int] = {}
        #: what the coordinator sent, for the executor thread: (task's checkpoint, kind,
        #: args); one inbox per executor thread (a chain's tasks share their host's)
        self.inbox: deque = deque() if inbox is None else inbox
        #: rolled back, waiting for the resume of generation ``gen``
        self.paused = False
        self.last_committed: int | None = None
        # bolts: the round being aligned, the inputs whose barrier came, parked elements
        self.aligning: int | None = None
        self.seen: set[int] = set()
        self.parked: list = []
        # spouts: msg ids emitted since the last barrier, and per earlier barrier
        self.msgs: list = []
        self.rounds: deque = deque()
        if self.is_spout:
            core.collector.msg_log = self.msgs
        #: hooks set by the actor: report(method, *args) to the coordinator;
        #: grant(src_task, epoch, ack) credit to a sender; reset_sinks(gen)
        self.report: Callable[..., None] = lambda *a: None
        self.grant: Callable[[int, int, int], None] = lambda *a: None
        self.reset_sinks: Callable[[int], None] = lambda gen: None
        self._failure_reported = -1
        #: this task's input has ended in this generation (reported to the coordinator)
        self.input_ended = False
        #: its finish() ran: in this generation, or before the checkpoint restored
        #: (stateful tasks record it in their snapshots: FINISHED_KEY)
        self.finish_ran = False
        self._finish_stored = False
        #: the stream's final checkpoint has committed here, or was restored: end
        self.final = False
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

    # -- start ------------------------------------------------------------------------------
    def open(self) -> None:
        """After ``open``/``prepare``: restore the start's checkpoint (None: empty) and
        call ``init_state``. A restarted task (``paused``) waits for the resume of the
        start's generation before its first tuple."""
        gen, checkpoint_id, paused, final, finished = self._start
        self.gen = gen
        self.final = final
        self.finish_ran = finished  # (a stateful task's own record replaces it below)
        if checkpoint_id is not None:  # (a rewind to it during a drain counts from here)
            self.emitted_at = {checkpoint_id: self.core.collector.emitted}
        if paused:  # every sender starts anew after the rollback: its first frame is seq 0
            self.core.inbound.begin_rollback(gen)
        if self.stateful:
            self._restore(checkpoint_id)
            self.obj.init_state(self.state)
        self.last_committed = checkpoint_id
        if paused:  # reported by the executor loop once the actor is up (a call to an
            self.paused = True  # actor still in its constructor fails: the resume would)

    def _restore(self, checkpoint_id: int | None) -> None:
        groups = self.state._groups
        entries = self.store.restore(checkpoint_id, USER_GROUPS if groups is None else groups)
        self.state.replace({decode_key(k): v for k, v in entries.items()})
        self.restores += checkpoint_id is not None
        entries = self.store.restore(checkpoint_id, INTERNAL_GROUPS)
        self.finish_ran = self._finish_stored = entries.pop(FINISHED_KEY, None) is not None
        if isinstance(self.obj, CheckpointedInternals):
            self._internal_bytes = {k: len(v) for k, v in entries.items()}
            try:
                self.obj.restore_internals({decode_key(k[1:]): v for k, v in entries.items()
                                           if k.startswith(INTERNAL_PREFIX)}, checkpoint_id)
            except ValueError as e:
                raise CorruptCheckpoint(f"task {self.core.task_id}", checkpoint_id or 0,
                                        str(e)) from None
            if self.finish_ran:
                self.obj.input_ended()

    # -- control thread ----------------------------------------------------------------------
    def request(self, kind: str, args: tuple) -> None:
        """Queue a coordinator message (control thread); a rollback starts at once on the
        receiving side (frames of older epochs are dropped from now on)."""
        if kind not in _KINDS:
            raise ValueError(f"unknown checkpoint message {kind!r}")
        if kind == "rollback" and args[0] > self.gen:
            if self.core.state in ("ending", "done"):
                # a task ends its stream only once the final checkpoint committed, so the
                # rollback's target is that one (a task restarted after it): it holds all
                # this task did, which only flushes its end of stream, and pauses at once
                # (a done one is not waited for)
                self.gen = args[0]
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
    def apply(self, kind: str, args: tuple) -> None:
        """Apply one coordinator message (executor thread)."""
        getattr(self, "_on_" + kind)(*args)

    def end_of_input(self) -> None:
        """This task's input has ended (a spout past its last tuple; a bolt whose inputs
        all sent end of data, after its ``finish()`` and the DRAINED it sent on): its
        snapshots from now on record it as finished, and the coordinator is told (once per
        generation). Executor thread."""
        if self.input_ended:
            return
        self.input_ended = True
        if not self.is_spout and not self.finish_ran:
            self.finish_ran = True
            if isinstance(self.obj, CheckpointedInternals):
                self.obj.input_ended()
        self.report("data_ended", self.core.task_id, self.gen)

    def final_committed(self) -> bool:
        """True once the stream's final checkpoint (taken after every task finished its
        input) has committed or been restored here: the task ends its stream."""
        return self.final

    def _on_trigger(self, gen: int, checkpoint_id: int) -> None:
        if gen != self.gen or self.paused or not self.is_spout:
            return
        self.emitted_at[checkpoint_id] = self.core.collector.emitted
        self._started[checkpoint_id] = time.monotonic()
        self.alignments_ms.append(0.0)
        self.snapshot(checkpoint_id)
        self.rounds.append((checkpoint_id, self.msgs))
        self.msgs = self.core.collector.msg_log = []
        self.core.send_barrier(checkpoint_id)

    def _on_commit(self, checkpoint_id: int, final: bool = False) -> None:
        if self.last_committed is not None and checkpoint_id <= self.last_committed:
            return
        prev, self.last_committed = self.last_committed, checkpoint_id
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
        # (a final commit this task could not publish does not end it: the rollback to
        # the final checkpoint that its failure brings publishes it again, then it ends)
        self.final = final and published

    def _ack_rounds(self, upto: int) -> None:
        """The spout's ``ack`` for every tuple emitted before barrier ``upto``."""
        acks = []
        while self.rounds and self.rounds[0][0] <= upto:
            acks.extend(self.rounds.popleft()[1])
        if acks:
            self.core.user_acks(acks)

    def _on_rollback(self, gen: int, checkpoint_id: int | None, final: bool = False,
                     finished: tuple = ()) -> None:
        if gen <= self.gen:
            return
        core = self.core
        self.gen = gen
        self.rollbacks += 1
        ended = [el for el in self.parked if el[1] in _MARKERS]  # (a stream that ended
        self.aligning, self.seen, self.parked = None, set(), []  # stays ended)
        self._started.clear()
        core.blocked = frozenset()
        core.clear_io()
        for el in ended:
            core._control(el[0], el[1], el[2])
        # every end of input is regenerated: the rewound upstreams send DRAINED again
        core.reset_end_of_input()
        self.input_ended = False
        # whether finish() had run by checkpoint_id: the coordinator's record (a task
        # without state); a stateful task's own snapshot, restored below, replaces it
        self.finish_ran = self.core.task_id in finished
        self._finish_stored = False
        self.final = final
        clear_ledger(core.ledger)
        self.reset_sinks(gen)
        if checkpoint_id is not None and (self.last_committed is None
                                          or checkpoint_id > self.last_committed):
            self.last_committed = checkpoint_id  # (its commit message may be behind)
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
        if self.stateful:
            self._user("pre_rollback")
            try:
                self._restore(checkpoint_id)
            except CorruptCheckpoint as e:
                logger.warning("%s:%d: %s", core.component_id, core.task_id, e)
                self.report("corrupt", core.task_id, e.checkpoint_id)
                self.paused = True
                return
            except Exception as e:  # the store failed: stay paused, roll back again
                core.errors.report(e, f"restore of checkpoint {checkpoint_id}")
                self.paused = True
                self.report("failed", core.task_id, f"restore failed: {e}")
                return
            if self.is_spout:  # rewind: the spout reads its position again
                self._user("init_state", self.state)
                self.rewound = True
        self.last_committed = checkpoint_id
        self.paused = True
        self.report("paused", core.task_id, gen)

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

    def _on_resume(self, gen: int) -> None:
        if gen == self.gen and self.paused:
            self.paused = False

    def _user(self, hook: str, *args) -> bool:
        """Call a user hook; an exception is reported (False)."""
        try:
            getattr(self.obj, hook)(*args)
        except Exception as e:  # user code: reported
            self.core.errors.report(e, hook)
            return False
        return True

    def snapshot(self, checkpoint_id: int) -> None:
        """Write this task's changes for ``checkpoint_id`` and report it prepared."""
        core = self.core
        t0 = time.perf_counter()
        if self.stateful:
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
                    more = [(INTERNAL_GROUP, pre + enc(k), v) for k, v in more]
                    gone = [(INTERNAL_GROUP, pre + enc(k)) for k in gone]
                    sizes = self._internal_bytes
                    sizes.update((k, len(v)) for _, k, v in more)
                    for _, k in gone:
                        sizes.pop(k, None)
                    puts += more
                    deletes += gone
                if self.finish_ran != self._finish_stored:
                    if self.finish_ran:
                        puts.append((INTERNAL_GROUP, FINISHED_KEY, b"\xc3"))  # (true)
                    else:
                        deletes.append((INTERNAL_GROUP, FINISHED_KEY))
                self.store.prepare(checkpoint_id, puts, deletes)
                self._finish_stored = self.finish_ran
            except Exception as e:  # (a full disk...): the round fails, the task goes on
                core.errors.report(e, f"snapshot of checkpoint {checkpoint_id}")
                self.failed(f"snapshot of checkpoint {checkpoint_id} failed: {e}")
                return
            self.last_keys_written = len(puts) + len(deletes)
        self.checkpoints += 1
        self.last_snapshot_ms = (time.perf_counter() - t0) * 1000
        self.report("prepared", core.task_id, checkpoint_id, self.gen, self.finish_ran)

    def failed(self, reason: str) -> None:
        """A failure seen here (a failed or timed-out tree): one report per generation."""
        if self._failure_reported != self.gen:
            self._failure_reported = self.gen
            self.report("failed", self.core.task_id, reason)

    # -- alignment (bolts) -------------------------------------------------------------------
    def on_barrier(self, src: int, values) -> None:
        """Barrier ``values[0]`` from input task ``src``: block that channel; once every
        open input's barrier came, snapshot, forward it, report, release."""
        if not values or not isinstance(values[0], int):
            self.core.count_bad_frame()
            return
        cid = values[0]
        if self.paused:
            return
        if self.aligning is None:
            self.aligning, self.seen = cid, {src}
            self._started[cid] = time.monotonic()
        elif cid == self.aligning:
            self.seen.add(src)
        else:  # a barrier of another round while aligning: frames were lost; roll back
            self.core.count_bad_frame()  # now rather than at the round's timeout
            self.failed(f"barrier {cid} from task {src} while aligning {self.aligning}")
            return
        core = self.core
        if (core.upstream_open - core.back_sources) <= self.seen:
            self.check_aligned()  # the last one: nothing to hold
            return
        core.blocked = frozenset(self.seen)
        core.inbound.hold(src)

    def check_aligned(self) -> None:
        """Complete the alignment when every open input's barrier came (an input that
        ends counts as aligned)."""
        if self.aligning is None:
            return
        core = self.core
        if not (core.upstream_open - core.back_sources) <= self.seen:
            return
        cid = self.aligning
        t0 = self._started.get(cid)
        if t0 is not None:
            self.alignments_ms.append((time.monotonic() - t0) * 1000)
        core.finish_pending_input()  # (a BatchBolt's gathered tuples precede the barrier)
        self.snapshot(cid)
        core.send_barrier(cid)
        self.aligning, self.seen = None, set()
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
        return {"checkpoints": self.checkpoints, "rollbacks": self.rollbacks,
                "input_ended": self.input_ended, "finish_ran": self.finish_ran,
                "final": self.final,
                "received": dict(self.received),
                "last_committed": self.last_committed, "generation": self.gen,
                "paused": self.paused, "aligning": self.aligning,
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


def _quantile(values, q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), rounded to 0.1 ms; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def is_marker(el) -> bool:
    """An element a rollback keeps: an upstream's end marker."""
    return el is not FLUSH and el[1] in _MARKERS


__all__ = ["TaskCheckpoint", "checkpointed", "is_stateful", "clear_ledger",
           "BARRIER_STREAM", "StatefulBolt", "StatefulSpout"]
