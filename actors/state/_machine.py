"""One task's side of checkpointing as a pure state machine: events in, steps out.

The task-side twin of :class:`actors.state._coordinator.CoordinatorCore` (no Ray, no
executor, no clock of its own: the tests drive it through every interleaving). Flink splits
the same work three ways: ``SingleCheckpointBarrierHandler`` counts barriers and blocks
channels, ``SubtaskCheckpointCoordinatorImpl`` prepares, broadcasts and snapshots, and
``StreamTask`` receives the coordinator's mails; here :class:`TaskMachine` decides all of
it and :class:`actors.state._task.TaskCheckpoint` performs what it returns, on the
executor thread, in order.

Events: a coordinator message (``trigger``, ``commit``, ``rollback``, ``resume``), the
task's start, the restarted task's answer from the coordinator, a restore's result, a
barrier from input channel ``c``, an input that ended (its end of stream), the end of the
task's input (FLIP-147), a failure seen by the task, the clock while paused.

Steps (:class:`Step`), performed in the order returned:

* ``ask`` — a restarted task asks the coordinator what to restore (the answer comes back
  as :meth:`TaskMachine.on_restart_answer`; a failed ask is asked again on the clock);
* ``rollback (gen, checkpoint_id, finished)`` — drop queued and in-flight frames, parked
  elements, tuple trees; rewind or fail the spout's tuples;
* ``restore (checkpoint_id,)`` — read the state of that checkpoint (None: empty); its
  result comes back as :meth:`TaskMachine.on_restored`;
* ``snapshot (checkpoint_id,)`` — take the state's changes since the last barrier (in
  memory: nothing is processed between this step and ``forward``);
* ``forward (checkpoint_id,)`` — the barrier to every downstream task, sent now;
* ``write (checkpoint_id,)`` — the durable write of the snapshot, then the ``prepared``
  report (after ``forward``, as Flink broadcasts the barrier before it snapshots: a hop
  does not add its write time to the next hop's alignment);
* ``hold (src,)`` / ``release ()`` — stop acknowledging channel ``src`` and park its
  elements / give every held channel its credit back and process what was parked;
* ``commit (checkpoint_id, final)`` — the commit's hooks, the spout's acks, collection;
  whether the task's sinks published comes back as :meth:`TaskMachine.on_committed`;
* ``input_ended ()`` — the runtime-internal state's end of input (persistent windows);
* ``report (method, args)`` — a message to the coordinator.
"""

from __future__ import annotations

from typing import NamedTuple

#: a task paused by a rollback reports again this often (seconds) until it is resumed:
#: Ray fails a call to an actor that is still restarting (at-most-once actor tasks), so
#: the coordinator's resume, or its rollback, may be lost; its ask is retried as often
PAUSED_REPORT_S = 1.0


class Step(NamedTuple):
    """One thing for the executor to do: ``kind`` with ``args`` (see the module)."""

    kind: str
    args: tuple = ()


#: restore results (:meth:`TaskMachine.on_restored`)
RESTORED, CORRUPT, LOST, RESTORE_FAILED = "restored", "corrupt", "lost", "failed"


class TaskMachine:
    """The decisions of one task's checkpointing.

    Args:
        task: the task id (named in reports).
        is_spout: a spout starts rounds (``trigger``); a bolt aligns barriers.
        stateful: the task keeps state (its snapshots are written; a restore reads it).
    """

    def __init__(self, task: int, is_spout: bool, stateful: bool) -> None:
        self.task = task
        self.is_spout = is_spout
        self.stateful = stateful
        self.gen = 0
        #: waiting for the coordinator: a restore's result, or the resume of ``gen``
        self.paused = True
        #: the restarted task's ask is unanswered; a restore is in progress
        self.asking = False
        self.restoring = False
        self.last_committed: int | None = None
        #: the stream's final checkpoint has committed here, or was restored: end
        self.final = False
        #: the task's input has ended in this generation (reported); its ``finish()`` ran
        #: (in this generation, or before the checkpoint restored)
        self.input_ended = False
        self.finish_ran = False
        #: alignment (bolts): the round being aligned, the inputs whose barrier came
        self.aligning: int | None = None
        self.seen: set[int] = set()
        self._failure_reported = -1
        self._report_due = float("inf")
        #: a first start runs once restored (no coordinator waits for its pause)
        self._first_start = False
        #: the restore's checkpoint, tried again on the clock after the store failed;
        #: a decision (corrupt, lost) leaves the task unrestored until a rollback
        self._restore_id: int | None = None
        self._retry_restore = False
        self._unrestored = False

    # -- start -----------------------------------------------------------------------------
    def on_start(self, now: float, first: tuple | None = None,
                 answer: tuple | None = None) -> list[Step]:
        """The task starts, on its executor thread. ``first``: ``(gen, checkpoint_id,
        final, finished)`` of a first start, which restores ``checkpoint_id`` (a
        savepoint's; None: empty) and runs; ``answer``: a restarted task's answer from the
        coordinator, ``(gen, checkpoint_id, final, finished tasks)``, a rollback (the
        restart rolled every other task back); neither: a restarted task that could not
        ask yet asks first."""
        self.paused = True
        if first is not None:
            self.gen, _, self.final, self.finish_ran = first
            self._first_start = True
            return self._restore(first[1])
        if answer is not None:
            return self._begin_rollback(*answer)
        self.asking = True
        self._report_due = now + PAUSED_REPORT_S
        return [Step("ask")]

    def on_restart_answer(self, gen: int, checkpoint_id: int | None, final: bool,
                          finished: tuple, now: float) -> list[Step]:
        """The coordinator's answer to ``ask``: restore ``checkpoint_id`` in generation
        ``gen`` (the restart rolled every other task back to it)."""
        if not self.asking:  # (a rollback came first: as good as the answer)
            return []
        self.asking = False
        return self._begin_rollback(gen, checkpoint_id, final, finished)

    def on_ask_failed(self, now: float) -> list[Step]:
        """The ask failed (the coordinator restarts): asked again on the clock."""
        self._report_due = now + PAUSED_REPORT_S
        return []

    def _restore(self, checkpoint_id: int | None) -> list[Step]:
        self.restoring = True
        self._restore_id = checkpoint_id
        return [Step("restore", (checkpoint_id,))]

    def on_restored(self, result: str, checkpoint_id: int | None, detail: str,
                    now: float, finished: bool | None = None) -> list[Step]:
        """The ``restore`` step's result: ``RESTORED`` (``finished``: the restored state
        records the task's ``finish()`` as run; None: no record of its own), ``CORRUPT``
        (the checkpoint is damaged: the coordinator falls back), ``LOST`` (the state is
        gone: the topology fails) or ``RESTORE_FAILED`` (the store failed: the restore is
        tried again every :data:`PAUSED_REPORT_S`, in this generation). The task stays
        paused until the coordinator's resume."""
        self.restoring = False
        if result == RESTORE_FAILED:  # (the store: Redis away) tried again on the clock,
            self._retry_restore = True  # in this generation: the other tasks restored
            self._report_due = now + PAUSED_REPORT_S  # fine and need no new rollback
            return []
        if result != RESTORED:  # decisions, reported once: the coordinator falls back to
            self._report_due = float("inf")  # an older checkpoint, or fails the topology
            self._unrestored = True  # (no resume releases it: only a rollback)
            kind = (("corrupt", (self.task, checkpoint_id or 0, detail)) if result == CORRUPT
                    else ("lost", (self.task, checkpoint_id, detail)))
            return [Step("report", kind)]
        if finished is not None:
            self.finish_ran = finished
        self.last_committed = checkpoint_id
        steps = [Step("input_ended")] if finished else []
        if self._first_start:
            self._first_start = False
            self.paused = False
            return steps
        self._report_due = now + PAUSED_REPORT_S
        return [*steps, Step("report", ("paused", (self.task, self.gen)))]

    # -- coordinator messages --------------------------------------------------------------
    def on_message(self, kind: str, args: tuple, now: float) -> list[Step]:
        """A coordinator message (see ``actors.state._coordinator.Action``)."""
        if kind == "trigger":
            return self._on_trigger(*args)
        if kind == "commit":
            return self._on_commit(*args)
        if kind == "rollback":
            return self._on_rollback(*args)
        if kind == "resume":
            return self._on_resume(*args)
        raise ValueError(f"unknown checkpoint message {kind!r}")

    def _on_trigger(self, gen: int, checkpoint_id: int) -> list[Step]:
        if gen != self.gen or self.paused or not self.is_spout:
            return []
        return [Step("snapshot", (checkpoint_id,)), Step("forward", (checkpoint_id,)),
                Step("write", (checkpoint_id,))]

    def _on_commit(self, checkpoint_id: int, final: bool = False) -> list[Step]:
        if (self.asking or self.restoring or self._retry_restore or self._unrestored
                or (self.last_committed is not None
                    and checkpoint_id <= self.last_committed)):
            return []  # (a task not restored restores what the coordinator names)
        self.last_committed = checkpoint_id
        return [Step("commit", (checkpoint_id, final))]

    def on_committed(self, final: bool, published: bool) -> list[Step]:
        """The ``commit`` step ran: a final commit that its sinks published ends the task
        (one they could not publish fails, and the rollback to the final checkpoint
        publishes it again)."""
        self.final = final and published
        return []

    def _on_rollback(self, gen: int, checkpoint_id: int | None, final: bool = False,
                     finished: tuple = ()) -> list[Step]:
        if gen <= self.gen and not self.asking:
            return []
        self.asking = False  # (a rollback sent after the ask is as good as its answer)
        return self._begin_rollback(gen, checkpoint_id, final, finished)

    def _begin_rollback(self, gen: int, checkpoint_id: int | None, final: bool,
                        finished: tuple) -> list[Step]:
        self.gen = gen
        self.paused = True
        self._first_start = False
        self._retry_restore = False
        self._unrestored = False
        self.aligning, self.seen = None, set()
        self.input_ended = False
        # whether finish() had run by checkpoint_id: the coordinator's record (a task
        # without state); a stateful task's own snapshot replaces it at the restore
        self.finish_ran = self.task in finished
        self.final = final
        self._failure_reported = -1
        if checkpoint_id is not None and (self.last_committed is None
                                          or checkpoint_id > self.last_committed):
            self.last_committed = checkpoint_id  # (its commit message may be behind)
        # the coordinator hears first that the task is alive and restoring (a slow
        # restore is not taken for a lost rollback)
        return [Step("rollback", (gen, checkpoint_id, finished)),
                Step("report", ("restoring", (self.task, gen))),
                *self._restore(checkpoint_id)]

    def _on_resume(self, gen: int) -> list[Step]:
        if (gen != self.gen or not self.paused or self.asking or self.restoring
                or self._unrestored or self._retry_restore):
            return []  # (not restored: its paused report after the restore gets another)
        self.paused = False
        self._report_due = float("inf")
        return []

    # -- the clock -------------------------------------------------------------------------
    def on_clock(self, now: float) -> list[Step]:
        """While paused: every :data:`PAUSED_REPORT_S`, the ask again, or the paused
        report again (the coordinator resends a rollback that was lost, and a resume)."""
        if not self.paused or now < self._report_due or self.restoring:
            return []
        self._report_due = now + PAUSED_REPORT_S
        if self.asking:
            return [Step("ask")]
        if self._retry_restore:
            self._retry_restore = False
            return self._restore(self._restore_id)
        return [Step("report", ("paused", (self.task, self.gen)))]

    # -- alignment (bolts) -----------------------------------------------------------------
    def on_barrier(self, src: int, checkpoint_id: int, open_inputs: set) -> list[Step]:
        """Barrier ``checkpoint_id`` from input ``src``; ``open_inputs``: the inputs that
        have not ended (those whose barrier must come). Once every open input's came:
        snapshot, forward, write, release; before, hold ``src``."""
        if self.paused:
            return []
        if self.aligning is None:
            self.aligning, self.seen = checkpoint_id, {src}
        elif checkpoint_id == self.aligning:
            self.seen.add(src)
        else:  # a barrier of another round while aligning: frames were lost; roll back
            return [Step("bad_frame"), *self.failed(
                f"barrier {checkpoint_id} from task {src} while aligning {self.aligning}")]
        if open_inputs <= self.seen:
            return self._aligned()
        return [Step("hold", (src,))]

    def on_input_closed(self, open_inputs: set) -> list[Step]:
        """An input ended (its end of stream): it needs no barrier; the alignment may be
        complete."""
        if self.aligning is not None and open_inputs <= self.seen:
            return self._aligned()
        return []

    def _aligned(self) -> list[Step]:
        cid = self.aligning
        self.aligning, self.seen = None, set()
        return [Step("snapshot", (cid,)), Step("forward", (cid,)), Step("write", (cid,)),
                Step("release")]

    # -- the task's own events -------------------------------------------------------------
    def on_end_of_input(self) -> list[Step]:
        """The task's input has ended (a spout past its last tuple; a bolt whose inputs all
        sent end of data, after its ``finish()``): reported once per generation."""
        if self.input_ended:
            return []
        self.input_ended = True
        steps = []
        if not self.is_spout and not self.finish_ran:
            self.finish_ran = True
            steps.append(Step("input_ended"))
        steps.append(Step("report", ("data_ended", (self.task, self.gen))))
        return steps

    def failed(self, reason: str) -> list[Step]:
        """A failure seen here (a failed tree, a lost frame, a failed write): one report
        per generation."""
        if self._failure_reported == self.gen:
            return []
        self._failure_reported = self.gen
        return [Step("report", ("failed", (self.task, reason, self.gen)))]
