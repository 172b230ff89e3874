"""The checkpoint coordinator: rounds of aligned checkpoints, commit, global rollback.

Flink's ``CheckpointCoordinator`` with Storm's state names (``CheckpointSpout``,
``CheckPointState``): every ``topology.state.checkpoint.interval.ms`` a round starts; each
spout task puts barrier N into its output in line with its data and records its position;
every task aligns its inputs on the barrier, snapshots its state (prepared: durable under
id N), forwards the barrier and reports. When every live task has reported, the round
commits: one durable write of ``COMMITTED N`` in the provider's log is the commit point
(each task's data for N is already durable), then every task is told (hooks, the spouts'
acks, garbage collection). A log that cannot be written (its Redis is away) never
half-commits: a round whose start it cannot record is not started, and a round whose
commit it cannot record fails and rolls back. Carbone et al., "Lightweight Asynchronous
Snapshots for Distributed Dataflows" (2015) is the protocol; Storm's own checkpoint spout
does not align (its docs: at-least-once state).

A failure (a round that fails or times out, a task that restarted, a failed tuple tree)
rolls the whole topology back (Flink's global failover): the generation goes up, every task
drops its queued and in-flight frames, restores checkpoint N (or clears), spouts rewind or
fail what they emitted after barrier N, each task reports that it paused, and when all have,
the coordinator resumes them. A restarted coordinator does the same from the log: a round
that was preparing is aborted, the last committed one is restored.

The end of a stream is checkpointed too (Flink's FLIP-147, "Support Checkpoints After Tasks
Finished"): a task whose input has ended (a spout past its last tuple, a bolt after its
``finish()``) reports it and goes on taking barriers; once every task has, the *final*
round starts at once, its barrier behind everything ``finish()`` emitted, and its commit
(``FINAL`` in the log) publishes the sinks' last transactions; only then do the tasks send
their end of stream and end. A rollback before that commit rewinds every task (none has
ended); one after it (a task restarted) restores the final checkpoint, whose tasks only end.
A task whose ``finish()`` raises fails the round; after :data:`FINISH_ATTEMPTS` such
failures of one task in a row the topology fails (:attr:`CoordinatorCore.failure`).

:class:`CoordinatorCore` is the pure state machine (no Ray, no clock of its own: the tests
drive it through every ordering); its Ray actor is in ``actors/state/_coordinator_actor.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from actors.state._provider import COMMITTED, FINAL, PREPARING, CheckpointLog

logger = logging.getLogger("storm_on_ray.checkpoint")


class TopologyFailedError(RuntimeError):
    """The coordinator has declared the topology failed (see ``CoordinatorCore.failure``)."""


class Action(NamedTuple):
    """A message the coordinator sends: ``kind`` to each of ``tasks`` with ``args``.

    Kinds: ``"trigger"`` ``(gen, checkpoint_id)`` to spout tasks; ``"commit"``
    ``(checkpoint_id, final)``; ``"rollback"`` ``(gen, checkpoint_id or None, final,
    finished)``; ``"resume"`` ``(gen,)``. ``final``: that checkpoint is the stream's last
    (every task had finished its input): the tasks end once it is committed or restored.
    ``finished``: the tasks whose ``finish()`` had run when they took that checkpoint
    (FLIP-147's finished subtasks; a task without state keeps no record of its own)."""

    kind: str
    tasks: tuple[int, ...]
    args: tuple


#: the resume after the second rollback in a row waits this long, doubling with each
#: further one up to RESTART_DELAY_MAX_S; the first resumes at once
RESTART_DELAY_INITIAL_S = 0.1
RESTART_DELAY_MAX_S = 10.0
#: a task whose ``finish()`` raises this many times in a row fails the topology (each
#: failure rolls back and the replay runs ``finish()`` again, after the restart delay)
FINISH_ATTEMPTS = 3


def restart_delay_s(rollbacks_in_a_row: int) -> float:
    """How long the resume after the ``n``-th rollback since the last completed round
    waits (seconds): 0 for the first, then 0.1, 0.2, 0.4 ... at most 10 (Flink's
    exponential-delay restart strategy, with our bounds)."""
    if rollbacks_in_a_row <= 1:
        return 0.0
    return min(RESTART_DELAY_INITIAL_S * 2 ** (rollbacks_in_a_row - 2), RESTART_DELAY_MAX_S)


class CoordinatorCore:
    """The round state machine (one thread: the actor's).

    Args:
        log: the provider's checkpoint log (phase, id, committed ids).
        tasks: every task that takes part (all but the ackers).
        spout_tasks: the spout tasks (they start rounds).
        others: tasks outside the rounds that roll back too (the ackers: their trees).
        interval_s, timeout_s, min_pause_s: the round period, a round's deadline, the least
            pause between the end of one round and the start of the next.
        now: the current monotonic time (s).
        restarted: this coordinator replaces one that died: roll back at once.
        log_expected: the coordinator it replaces had recorded a round: a log that shows
            none is gone (kept on a lost node), and the topology fails at once, naming
            the log (never a rollback to an empty state, which would wipe every task's).
        publishers: the tasks of two-phase-commit sinks: once a checkpoint's commit is
            sent they may have published its output, so a corrupt one fails the topology
            rather than fall back (the fallback's replay would publish it again).
    """

    def __init__(self, log: CheckpointLog, tasks, spout_tasks, interval_s: float,
                 timeout_s: float, min_pause_s: float, now: float,
                 restarted: bool = False, others=(), log_expected: bool = False,
                 publishers=()) -> None:
        self.log = log
        self.tasks = frozenset(tasks)
        #: tasks that take no barriers but roll back with the others (the ackers)
        self.others = frozenset(others)
        self.spouts = tuple(sorted(spout_tasks))
        self.interval_s, self.timeout_s, self.min_pause_s = interval_s, timeout_s, min_pause_s
        phase, cid, committed = log.load()
        self.committed: list[int] = list(committed)
        self.publishers = frozenset(publishers)
        #: the commit manifest of the last committed checkpoint, ``{task: (the latest
        #: checkpoint it prepared, its entry count)}`` (actors/state/_manifest.py), and
        #: the entry counts reported in the round in flight
        self.manifest: dict[int, tuple[int, int]] = self._load_manifest()
        self.round_counts: dict[int, int] = {}
        #: the highest checkpoint id ever used (ids never repeat: an aborted round's
        #: versions are discarded by the restore, and the next round takes a new id)
        self.last_id = max([cid, *self.committed, 0])
        #: tasks that ended their stream (after the final commit, or in a topology
        #: restored from a log whose last checkpoint is final)
        self.finished: set[int] = set()
        #: tasks whose input has ended in this generation (FLIP-147's finished tasks)
        self.data_ended: set[int] = set()
        #: the final round, once started (its barrier follows every task's finish())
        self.final_round: int | None = None
        #: when the last spout's input ended, in this generation (monotonic s; the host's
        #: clock, so a driver on the same node can time the end: benchmarks/sinks.py)
        self.spouts_ended_at: float | None = None
        #: the last committed checkpoint is the stream's final one
        self.final = phase == FINAL and bool(self.committed) and cid == self.committed[-1]
        #: the tasks that reported their finish() run, in the round in flight; and per
        #: committed checkpoint (this coordinator's life only: a restarted one knows the
        #: final checkpoint's, all, from the log; the stateful tasks keep their own)
        self.round_finished: set[int] = set()
        self.finished_at: dict[int, tuple] = {}
        #: finish() failures in a row, per task; and why the topology failed (None: it
        #: has not): then no round starts and no rollback is sent
        self.finish_failures: dict[int, int] = {}
        self.failure: str | None = None
        self.gen = time.time_ns() if restarted else 0
        #: the round in flight: its id, start time and the tasks that reported
        self.round: int | None = None
        self.round_started = 0.0
        self.reported: set[int] = set()
        #: during a rollback: the tasks that have not yet paused (None: no rollback)
        self.waiting: set[int] | None = None
        self.next_due = now + interval_s
        #: a round was requested while another was in flight: the next one starts as
        #: soon as that one ends (its commit must not push the request an interval away)
        self.requested = False
        self.rollbacks = 0
        self.completed = 0
        self.failed_rounds = 0
        self.last_duration_s: float | None = None
        self._recover = restarted or phase == PREPARING
        #: rollbacks since the last completed round, and when the current one may resume
        #: (Flink's exponential-delay restart strategy: a failure that repeats, a sink
        #: that cannot publish, does not spin)
        self.rollbacks_in_a_row = 0
        self.resume_at = 0.0
        #: the last rollback sent (resent to a task that reports an older generation) and
        #: when (a rollback whose tasks do not all pause within ``timeout_s`` is redone)
        self._rollback_action: Action | None = None
        self.rollback_at = 0.0
        #: the tasks that said they took the current rollback (restoring, paused)
        self.alive: set[int] = set()
        #: called once before the first round's record (the actor marks in the GCS that
        #: the log holds rounds); if it raises, the round does not start
        self.before_first_record: Callable[[], None] | None = None
        if restarted and log_expected and (phase, cid, committed) == (COMMITTED, 0, []):
            self.failure = (f"the checkpoint log at {log.where()} is gone (its coordinator "
                            f"restarted where the log is not: a lost node?); keep "
                            f"checkpoints where every node reads them (topology.state."
                            f"provider \"redis\"); no task state was restored or deleted")
            self._recover = False
            logger.error("the topology fails: %s", self.failure)

    @property
    def last_committed(self) -> int | None:
        return self.committed[-1] if self.committed else None

    def live(self) -> tuple[int, ...]:
        """The tasks in the rounds that have not ended."""
        return tuple(sorted(self.tasks - self.finished))

    def _all_live(self) -> tuple[int, ...]:
        return tuple(sorted((self.tasks | self.others) - self.finished))

    # -- events ------------------------------------------------------------------------------
    def start(self, now: float) -> list[Action]:
        """The first step: a coordinator that restarted, or whose log shows a round that
        was preparing, rolls the topology back to the last committed checkpoint."""
        if self._recover:
            self._recover = False
            if self.round is None and self.last_id > (self.last_committed or 0):
                logger.warning("checkpoint %d was preparing when the coordinator stopped: "
                               "rolled back to %s", self.last_id, self.last_committed)
            return self._rollback(now, "the checkpoint coordinator restarted")
        return []

    def tick(self, now: float) -> list[Action]:
        """Start a round when one is due (not if the log cannot record it: it is tried
        again an interval later); fail a round past its deadline."""
        if self.failure is not None:
            return []
        if self.waiting is not None:  # a task silent since the rollback (neither restoring
            late = self.waiting - self.finished - self.alive  # nor paused) missed it
            if late and now - self.rollback_at > self.timeout_s:
                return self._rollback(now, f"tasks {sorted(late)} did not take the "
                                           f"rollback within {self.timeout_s:g} s")
            return self._maybe_resume(now)  # (a delayed resume)
        if self.final:  # (the stream's last round has committed)
            return []
        if self.round is not None:
            if now - self.round_started > self.timeout_s:
                self.failed_rounds += 1
                return self._rollback(now, f"checkpoint {self.round} timed out after "
                                           f"{self.timeout_s:g} s")
            return []
        if now < self.next_due or not self.live():
            return []
        spouts = tuple(t for t in self.spouts if t not in self.finished)
        if not spouts:
            return []
        try:
            if self.before_first_record is not None:
                self.before_first_record()
                self.before_first_record = None
            self.last_id += 1
            self.log.record(PREPARING, self.last_id)
        except Exception as e:  # (its store is away): no round now, one again when due
            self.failed_rounds += 1
            self.next_due = now + self.interval_s
            logger.warning("checkpoint %d not started: the log did not record it: %s",
                           self.last_id, e)
            return []
        self.round, self.round_started, self.reported = self.last_id, now, set()
        self.round_finished = set()
        self.round_counts = {}
        self.requested = False
        if self.all_data_ended():
            self.final_round = self.round
        return [Action("trigger", spouts, (self.gen, self.round))]

    def all_data_ended(self) -> bool:
        """True once every task in the rounds has reported the end of its input."""
        return self.tasks - self.finished <= self.data_ended

    def prepared(self, task: int, checkpoint_id: int, gen: int, now: float,
                 finished: bool = False, count: int | None = None) -> list[Action]:
        """``task`` snapshotted its state for ``checkpoint_id`` (stale reports ignored);
        ``finished``: its ``finish()`` had run by then; ``count``: the entries its store
        wrote (None: a task without state, or a store that does not tell)."""
        if gen != self.gen or checkpoint_id != self.round or self.waiting is not None:
            return []
        self.reported.add(task)
        if count is not None:
            self.round_counts[task] = count
        if finished:
            self.round_finished.add(task)
        return self._maybe_commit(now)

    def _maybe_commit(self, now: float) -> list[Action]:
        if self.round is None or not self.tasks - self.finished <= self.reported:
            return []
        cid = self.round
        final = cid == self.final_round
        manifest = {**self.manifest, **{t: (cid, n) for t, n in self.round_counts.items()}}
        phase = FINAL if final else COMMITTED
        try:  # the commit point (with its manifest, when tasks reported counts)
            if manifest:
                self.log.record(phase, cid, manifest)
            else:
                self.log.record(phase, cid)
        except Exception as e:  # noqa: BLE001
            # (ambiguous: a write the store applied may have raised; rolling back a
            # checkpoint the log holds would have a restart restore what tasks dropped)
            if not self.log.read_back(phase, cid):  # not committed: the round fails
                self.failed_rounds += 1
                return self._rollback(now, f"checkpoint {cid} could not be committed: the "
                                           f"log did not record it: {e}")
            logger.warning("checkpoint %d: the log's write raised (%s), and reading it "
                           "back shows it recorded: committed", cid, e)
        self.committed = (self.committed + [cid])[-2:]
        self.manifest = manifest
        self.finished_at = {c: t for c, t in self.finished_at.items() if c in self.committed}
        self.finished_at[cid] = tuple(sorted(self.round_finished))
        self.round = None
        self.completed += 1
        self.rollbacks_in_a_row = 0
        self.final = final
        if final:
            self.finish_failures.clear()
        self.last_duration_s = now - self.round_started
        self.next_due = now + self.min_pause_s
        if not self.requested:
            self.next_due = max(self.round_started + self.interval_s, self.next_due)
        return [Action("commit", self.live(), (cid, final))]

    def failed(self, task: int, reason: str, now: float, gen: int | None = None
               ) -> list[Action]:
        """``task`` reports a failure seen in generation ``gen`` (a failed or timed-out
        tuple tree, a lost frame, a failed snapshot): roll back. Ignored while a rollback
        is under way (it restores every task anyway) and for another generation (Flink's
        scheduler drops a stale execution attempt's report): a failure repeated by every
        task must not start a rollback each."""
        if self.failure is not None or self.waiting is not None or (
                gen is not None and gen != self.gen):
            return []
        return self._rollback(now, f"task {task}: {reason}")

    def restoring(self, task: int, gen: int, now: float) -> list[Action]:
        """``task`` took the rollback to generation ``gen`` and restores: it is alive, so
        a slow restore does not count as a lost rollback (see :meth:`tick`)."""
        if gen == self.gen and self.waiting is not None:
            self.alive.add(task)
        return []

    def finish_failed(self, task: int, gen: int, reason: str, now: float) -> list[Action]:
        """``task``'s ``finish()`` raised (``reason`` names its component and task): roll
        back, so the replay runs it again after the restart delay; the
        :data:`FINISH_ATTEMPTS`-th time in a row the topology fails instead
        (:attr:`failure`), never a rollback loop. Stale reports are ignored."""
        if self.failure is not None or gen != self.gen or self.waiting is not None:
            return []
        n = self.finish_failures[task] = self.finish_failures.get(task, 0) + 1
        if n >= FINISH_ATTEMPTS:
            self.failure = f"{reason} ({n} times in a row)"
            self.round = None
            logger.error("the topology fails: %s", self.failure)
            return []
        return self._rollback(now, reason)

    def task_failed(self, task: int, reason: str, now: float) -> list[Action]:
        """``task`` failed for good (``reason`` names its component and task: a spout
        that emitted a tuple no rollback can replay): the topology fails
        (:attr:`failure`); no rollback, which would lose the same tuples again."""
        if self.failure is None:
            self.failure = reason
            self.round = None
            logger.error("the topology fails: %s", self.failure)
        return []

    def data_ended_at(self, task: int, gen: int, now: float) -> list[Action]:
        """``task``'s input has ended in generation ``gen`` (a spout past its last tuple,
        a bolt after ``finish()``); once every task's has, the final round starts as soon
        as the round in flight (if any) ends."""
        if gen != self.gen or self.waiting is not None or self.final:
            return []
        self.data_ended.add(task)
        self.finish_failures.pop(task, None)  # (its finish() ran)
        if self.spouts_ended_at is None and set(self.spouts) <= self.data_ended | self.finished:
            self.spouts_ended_at = now
        if self.all_data_ended():
            self.request(now)
        return self.tick(now)

    def restarted(self, task: int, now: float
                  ) -> tuple[int, int | None, bool, tuple, list[Action]]:
        """``task``'s actor was restarted by Ray: roll every task back. Returns the new
        generation, the checkpoint the task restores (it pauses after restoring), whether
        that checkpoint is the stream's final one, the tasks finished in it (see
        :class:`Action`), and the actions.

        Raises:
            TopologyFailedError: the topology has failed (:attr:`failure`): the task
                restores nothing (a restore of no checkpoint would empty its store)."""
        if self.failure is not None:
            raise TopologyFailedError(self.failure)
        actions = self._rollback(now, f"task {task} restarted")
        self.alive.add(task)  # (it asked: alive, and restores next)
        return self.gen, self.last_committed, self.final, actions[0].args[3], actions

    def paused(self, task: int, gen: int, now: float) -> list[Action]:
        """``task`` has rolled back for generation ``gen`` and waits; once all have, they
        resume. A task paused in an older generation missed a rollback (Ray fails a call
        to an actor that is restarting): the current one is sent to it again; if the
        others have resumed already, they hold state it does not, so all roll back."""
        if self.failure is not None or gen > self.gen:
            return []
        if gen < self.gen:
            if self.waiting is None:
                return self._rollback(now, f"task {task} missed the rollback to "
                                           f"generation {self.gen} (paused in {gen})")
            if task in self.waiting and self._rollback_action is not None:
                return [self._rollback_action._replace(tasks=(task,))]
            return []
        if self.waiting is None:  # resumed already: its resume was lost, send it again
            return [Action("resume", (task,), (gen,))]
        self.waiting.discard(task)
        return self._maybe_resume(now)

    def _maybe_resume(self, now: float) -> list[Action]:
        if self.waiting is None or self.waiting - self.finished or now < self.resume_at:
            return []
        self.waiting = None
        self.next_due = now + self.min_pause_s
        return [Action("resume", self._all_live(), (self.gen,))]

    def ended(self, task: int, now: float) -> list[Action]:
        """``task`` ended its stream (a finite input, a drain): it takes part no more."""
        self.finished.add(task)
        if self.waiting is not None:
            return self._maybe_resume(now)
        return self._maybe_commit(now)

    def request(self, now: float) -> None:
        """Start the next round as soon as possible (every task's input has ended: the
        final round; a savepoint asked for). A request during a round starts the next one
        when that round ends, after the minimum pause."""
        self.next_due = now
        self.requested = True

    def _rollback(self, now: float, why: str) -> list[Action]:
        # an open round is abandoned: its versions are discarded by the tasks' restore,
        # and its PREPARING record stays (a restart rolls back anyway; ids never repeat)
        self.round = None
        self.final_round = None
        self.data_ended.clear()  # (every task rewinds: its input ends again)
        self.spouts_ended_at = None
        self.gen = max(time.time_ns(), self.gen + 1)
        self.rollbacks += 1
        self.rollbacks_in_a_row += 1
        self.resume_at = now + restart_delay_s(self.rollbacks_in_a_row)
        self.waiting = set(self._all_live())
        logger.warning("rolling back to checkpoint %s (generation %d): %s",
                       self.last_committed, self.gen, why)
        cid = self.last_committed
        finished = (tuple(sorted(self.tasks)) if self.final
                    else self.finished_at.get(cid, ()))
        self.rollback_at = now
        self.alive = set()
        self._rollback_action = Action("rollback", self._all_live(),
                                       (self.gen, cid, self.final, finished))
        return [self._rollback_action]

    def still_current(self, action: Action) -> bool:
        """Whether ``action`` (to one task, its call failed) still matters, so it is sent
        again: a trigger of the round in flight, a commit of a kept checkpoint, the current
        rollback to a task that has not paused, the current resume."""
        kind, args = action.kind, action.args
        if self.failure is not None:
            return False
        if kind == "trigger":
            return args[0] == self.gen and args[1] == self.round
        if kind == "commit":
            return args[0] in self.committed
        if kind == "rollback":
            return (args[0] == self.gen and self.waiting is not None
                    and action.tasks[0] in self.waiting)
        return kind == "resume" and args[0] == self.gen and self.waiting is None

    def lost(self, task: int, checkpoint_id: int | None, where: str, now: float
             ) -> list[Action]:
        """``task``'s state for ``checkpoint_id`` is not in its store at all (``where``:
        the store's path or key): no retry mends that, and no earlier checkpoint is in a
        store that is gone; the topology fails (:attr:`failure`), naming both."""
        if self.failure is None:
            self.failure = (f"task {task}: the state of checkpoint {checkpoint_id} is "
                            f"missing at {where}; keep checkpoints where every node reads "
                            f"them (topology.state.provider \"redis\")")
            self.round = None
            logger.error("the topology fails: %s", self.failure)
        return []

    def _load_manifest(self) -> dict[int, tuple[int, int]]:
        load = getattr(self.log, "manifest", None)  # (a log of one's own may keep none)
        if load is None or not self.committed:
            return {}
        return load(self.committed[-1]) or {}

    def corrupt(self, task: int, checkpoint_id: int, now: float,
                detail: str = "") -> list[Action]:
        """``task`` found checkpoint ``checkpoint_id`` corrupt (``detail``: what and where):
        it is given up (with every later one) and the topology rolls back to the one
        before; with no committed checkpoint before it, or with two-phase-commit sinks
        (:attr:`publishers`: they may have published it), the topology fails
        (:attr:`failure`), naming the task, the checkpoint and the detail (a rollback to
        none would restore empty state, and a fallback publish again what sinks
        published). A store that lacks what the commit manifest names is corrupt too."""
        if self.failure is not None:
            return []
        self.committed = [c for c in self.committed if c < checkpoint_id]
        self.final = False
        why = None
        if self.publishers and self.committed:
            why = (f"two-phase-commit sink tasks {sorted(self.publishers)} may have "
                   f"published its output, which a fallback to checkpoint "
                   f"{self.committed[-1]} would publish again")
        elif not self.committed:
            why = "no committed checkpoint before it is kept"
        if why is not None:
            self.failure = (f"task {task}: checkpoint {checkpoint_id} is corrupt ({detail}) "
                            f"and {why}; start from a savepoint, or anew")
            self.round = None
            logger.error("the topology fails: %s", self.failure)
            return []
        self.manifest = self._load_manifest()
        logger.warning("task %d: checkpoint %d is corrupt; rolling back to the one before",
                       task, checkpoint_id)
        return self._rollback(now, f"task {task} found checkpoint {checkpoint_id} corrupt")

    def state(self) -> dict:
        """Figures for ``stats()``: ids, phase, counts, the last round's duration (ms)."""
        return {"last_committed": self.last_committed, "in_flight": self.round,
                "generation": self.gen, "rolling_back": self.waiting is not None,
                "completed": self.completed, "rollbacks": self.rollbacks,
                "failed_rounds": self.failed_rounds, "ended_tasks": sorted(self.finished),
                "rollbacks_in_a_row": self.rollbacks_in_a_row,
                "data_ended_tasks": sorted(self.data_ended), "final": self.final,
                "spouts_ended_at": self.spouts_ended_at,
                "failure": self.failure,
                "last_duration_ms": (None if self.last_duration_s is None
                                     else round(self.last_duration_s * 1000, 3))}
