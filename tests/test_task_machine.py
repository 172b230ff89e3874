"""The task side of checkpointing as a pure machine (``actors/state/_machine.py``), and the
coordinator's answers to what a lost node does to it: a lost rollback, a restore that
fails, a log or a store that is gone. No Ray: every interleaving is driven by hand."""

from __future__ import annotations

import collections
import os

import pytest

from actors import make_executor
from actors.state import CoordinatorCore
from actors.state._machine import (
    CORRUPT,
    LOST,
    PAUSED_REPORT_S,
    RESTORE_FAILED,
    RESTORED,
    Step,
    TaskMachine,
)
from actors.state._provider import MissingState
from actors.state._sqlite import LocalProvider
from actors.state._task import enable_checkpoints
from actors.state.providers import MemoryProvider
from tests._util import until
from tests.components import StatefulWordCount
from topology import IterableSpout, TopologyBuilder

T = 7  # the task the machines below run


def kinds(steps) -> list:
    return [s.kind for s in steps]


def running(is_spout=False, stateful=True) -> TaskMachine:
    """A machine past a first start of checkpoint 1, generation 5."""
    m = TaskMachine(T, is_spout, stateful)
    assert m.on_start(0.0, first=(5, 1, False, False)) == [Step("restore", (1,))]
    assert m.on_restored(RESTORED, 1, "", 0.0, False) == [] and not m.paused
    return m


def rolled_back(m: TaskMachine, gen: int, cid=1, final=False, finished=()) -> list:
    steps = m.on_message("rollback", (gen, cid, final, finished), 0.0)
    assert kinds(steps) == ["rollback", "report", "restore"] and m.paused
    return m.on_restored(RESTORED, cid, "", 0.0, None if not m.stateful else T in finished)


# -- the machine ---------------------------------------------------------------------------
def test_a_rollback_during_alignment_forgets_the_barriers_that_came():
    """Barrier 2 came from input 1 (held); a rollback; after it, round 3's barrier from
    input 2 starts a new alignment: input 1's old barrier does not count."""
    m = running()
    assert m.on_barrier(1, 2, {1, 2}) == [Step("hold", (1,))]
    assert rolled_back(m, 6) == [Step("report", ("paused", (T, 6)))]
    assert m.on_barrier(2, 3, {1, 2}) == []  # paused: nothing until the resume
    m.on_message("resume", (6,), 0.0)
    assert m.on_barrier(2, 3, {1, 2}) == [Step("hold", (2,))]
    assert m.on_barrier(1, 3, {1, 2}) == [
        Step("snapshot", (3,)), Step("forward", (3,)), Step("write", (3,)), Step("release")]


def test_the_barrier_goes_on_before_the_durable_write():
    """Flink broadcasts the barrier before it snapshots: forward precedes write, for a
    spout's trigger and a bolt's alignment alike."""
    spout = running(is_spout=True)
    assert kinds(spout.on_message("trigger", (5, 2), 0.0)) == ["snapshot", "forward", "write"]
    assert kinds(running().on_barrier(1, 2, {1})) == ["snapshot", "forward", "write",
                                                      "release"]


def test_a_rollback_during_the_final_round_runs_finish_again_unless_it_is_recorded():
    """The input ended and was reported; a rollback during the final round to a
    checkpoint from before it: the end of input is reported again in the new generation,
    finish() included; to one recording it (a stateless task: the coordinator's list),
    not finish()."""
    m = running(stateful=False)
    assert m.on_end_of_input() == [Step("input_ended"),
                                   Step("report", ("data_ended", (T, 5)))]
    assert m.on_end_of_input() == []  # once per generation
    rolled_back(m, 6)
    m.on_message("resume", (6,), 0.0)
    assert not m.input_ended and not m.finish_ran
    assert kinds(m.on_end_of_input()) == ["input_ended", "report"]
    rolled_back(m, 7, finished=(T,))
    m.on_message("resume", (7,), 0.0)
    assert m.on_end_of_input() == [Step("report", ("data_ended", (T, 7)))]


def test_a_lost_resume_is_asked_for_again_and_a_stale_one_ignored():
    m = running()
    rolled_back(m, 6)
    assert m.on_clock(0.5) == []
    assert m.on_clock(PAUSED_REPORT_S + 0.1) == [Step("report", ("paused", (T, 6)))]
    m.on_message("resume", (5,), 0.0)  # of an older generation
    assert m.paused
    m.on_message("resume", (6,), 0.0)
    assert not m.paused and m.on_clock(99.0) == []


def test_a_task_paused_in_an_older_generation_is_rolled_back_again():
    """A rollback lost on the way (the task restarted meanwhile): the coordinator's
    second one, of a newer generation, reaches a task still paused in the first."""
    m = running()
    rolled_back(m, 6)
    assert kinds(m.on_message("rollback", (8, 1, False, ()), 0.0)) == [
        "rollback", "report", "restore"]
    assert m.on_restored(RESTORED, 1, "", 0.0, False) == [
        Step("report", ("paused", (T, 8)))]
    assert m.on_message("rollback", (8, 1, False, ()), 0.0) == []  # (a resent duplicate)


def test_a_failed_restore_is_tried_again_in_its_generation():
    """A store that fails (Redis away) is retried by the task itself every second, in the
    same generation: before, each failure asked the coordinator for a new global
    rollback, and each rollback's failed restores asked for more (a storm that grew
    geometrically with the tasks)."""
    m = running()
    assert kinds(m.on_message("rollback", (6, 1, False, ()), 0.0)) == [
        "rollback", "report", "restore"]  # (the report: alive, restoring, in 6)
    assert m.on_restored(RESTORE_FAILED, 1, "redis away", 0.0) == []
    m.on_message("resume", (6,), 0.0)  # (a resume cannot release a task without state)
    m.on_message("commit", (2, False), 0.0)  # (nor a commit reach it)
    assert m.paused and m.last_committed == 1
    assert m.on_clock(0.5) == []
    assert m.on_clock(PAUSED_REPORT_S + 0.1) == [Step("restore", (1,))]
    assert m.on_restored(RESTORED, 1, "", 1.2, False) == [Step("report", ("paused", (T, 6)))]
    m.on_message("resume", (6,), 1.3)
    assert not m.paused and m.gen == 6


def test_a_missing_or_corrupt_store_is_a_decision_reported_once():
    m = running()
    m.on_message("rollback", (6, 1, False, ()), 0.0)
    assert m.on_restored(LOST, 4, "/x/task-7.db", 0.0) == [
        Step("report", ("lost", (T, 4, "/x/task-7.db")))]
    assert m.on_clock(99.0) == [] and m.paused  # once: the coordinator fails the topology
    m.on_message("rollback", (7, 3, False, ()), 0.0)
    assert m.on_restored(CORRUPT, 3, "crc", 0.0) == [
        Step("report", ("corrupt", (T, 3, "crc")))]


def test_a_restarted_task_asks_then_restores_and_a_finished_one_only_ends():
    """A restarted task asks the coordinator (again on the clock while it cannot); its
    answer names the final checkpoint, in which the task had finished: it restores,
    reports paused, and once resumed it is final (its stream ends)."""
    m = TaskMachine(T, False, True)
    assert m.on_start(0.0) == [Step("ask")]
    assert m.on_ask_failed(0.0) == [] and m.on_clock(0.5) == []
    assert m.on_clock(PAUSED_REPORT_S + 0.1) == [Step("ask")]
    assert m.on_message("commit", (9, True), 0.0) == []  # not before its restore
    steps = m.on_restart_answer(12, 9, True, (T,), 2.0)
    assert kinds(steps) == ["rollback", "report", "restore"] and m.final
    assert m.on_restored(RESTORED, 9, "", 2.0, True) == [
        Step("input_ended"), Step("report", ("paused", (T, 12)))]
    m.on_message("resume", (12,), 2.0)
    assert not m.paused and m.final and m.finish_ran
    assert m.on_end_of_input() == [Step("report", ("data_ended", (T, 12)))]


# -- the coordinator -----------------------------------------------------------------------
def _coordinator(**kw) -> CoordinatorCore:
    return CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2, 3], [3], 600.0, 5.0,
                           0.0, 0.0, **kw)


def test_a_lost_rollback_is_resent_to_the_task_that_reports_the_older_generation():
    """Two executors restart together: the second restart's rollback reaches the first
    while Ray still restarts it (lost); it reports paused in the first restart's
    generation, and before, the coordinator ignored that and waited for ever."""
    c = _coordinator()
    g1 = c.restarted(1, 1.0)[0]
    c.paused(2, g1, 1.0)
    c.paused(3, g1, 1.0)
    g2, _, _, _, actions = c.restarted(2, 1.5)
    assert c.paused(3, g2, 1.6) == []
    resent = c.paused(1, g1, 2.0)  # task 1 missed g2
    assert [(a.kind, a.tasks, a.args[0]) for a in resent] == [("rollback", (1,), g2)]
    c.paused(2, g2, 2.1)
    assert [a.kind for a in c.paused(1, g2, 2.2)] == ["resume"]


def test_a_task_paused_in_an_older_generation_after_the_resume_rolls_all_back():
    c = _coordinator()
    g1 = c.restarted(1, 1.0)[0]
    for t in (1, 2, 3):
        c.paused(t, g1, 1.0)
    g2 = c.restarted(2, 2.0)[0]
    for t in (2, 3):
        c.paused(t, g2, 2.0)
    c.waiting = None  # (as if resumed by a report that overtook task 1's)
    again = c.paused(1, g1, 3.0)
    assert [a.kind for a in again] == ["rollback"] and c.gen > g2


def test_a_rollback_whose_tasks_do_not_all_pause_in_time_is_done_again():
    c = _coordinator()
    g1 = c.restarted(1, 1.0)[0]
    c.paused(2, g1, 1.0)
    assert c.tick(5.9) == []
    redo = c.tick(6.1)  # task 3 did not pause within the 5 s timeout
    assert [a.kind for a in redo] == ["rollback"] and c.gen > g1 and c.failure is None


def test_a_restarted_coordinator_whose_log_is_gone_fails_and_wipes_nothing():
    """The log had recorded rounds (the GCS flag) but opens empty (its node was lost):
    the topology fails naming the log, and no rollback (which would restore no checkpoint,
    emptying every task's store) is sent, nor is a restarted task told to restore."""
    log = MemoryProvider().checkpoint_log()
    c = CoordinatorCore(log, [1, 2], [2], 600.0, 5.0, 0.0, 0.0, restarted=True,
                        log_expected=True)
    assert c.start(0.0) == [] and c.tick(700.0) == []
    assert "checkpoint log" in c.failure and "redis" in c.failure
    with pytest.raises(RuntimeError, match="checkpoint log"):
        c.restarted(1, 1.0)
    fresh = CoordinatorCore(log, [1, 2], [2], 600.0, 5.0, 0.0, 0.0, restarted=True)
    assert fresh.failure is None and [a.kind for a in fresh.start(0.0)] == ["rollback"]


def test_a_task_whose_state_is_missing_fails_the_topology_naming_it():
    c = _coordinator()
    assert c.lost(2, 4, "/ckpt/t/s/count/task-2.db", 1.0) == []
    assert "task 2" in c.failure and "/ckpt/t/s/count/task-2.db" in c.failure
    assert c.failed(1, "x", 2.0) == [] and c.paused(1, 0, 2.0) == []


# -- stores and tasks ----------------------------------------------------------------------
def test_a_local_store_created_anew_refuses_a_committed_checkpoint(tmp_path):
    """Before, a task restarted where its database was not (another node) restored an
    empty state for checkpoint 4, silently."""
    p = LocalProvider(str(tmp_path), "t", "s")
    s = p.task_store("count", 2)
    s.prepare(4, [(0, b"k", b"v")], [])
    s.close()
    assert p.task_store("count", 2).restore(4) == {b"k": b"v"}
    os.unlink(os.path.join(p.root, "count", "task-2.db"))
    with pytest.raises(MissingState, match="task-2.db"):
        p.task_store("count", 2).restore(4)
    assert p.task_store("count", 3).restore(None) == {}  # a first start: nothing missing


def _count_task(store, **start):
    """A ``StatefulWordCount`` task behind one spout, checkpoints enabled with ``store``
    and ``start`` (``enable_checkpoints``' keywords), connected, not started; its reports."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)))
    b.set_bolt("count", StatefulWordCount(), 1).shuffle_grouping("src")
    topo = b.create_topology()
    (src,), (count,) = topo.component_tasks["src"], topo.component_tasks["count"]
    core = make_executor("t", topo, {"topology.acker.executors": 0}, count,
                         {src: 0, count: 0})
    enable_checkpoints(core, store(count) if callable(store) else store, **start)
    reports = []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({})
    return core, reports


class _FlakyStore:
    """A task store whose first restore fails (its Redis is away), then works."""

    def __init__(self) -> None:
        self.inner = MemoryProvider().task_store("count", 1)
        self.inner.prepare(4, [(0, b"\xa1x", b"\x03")], [])
        self.fails = 1

    def restore(self, checkpoint_id, groups=None):
        if self.fails:
            self.fails -= 1
            raise ConnectionError("redis away")
        return self.inner.restore(checkpoint_id, groups)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_restore_that_fails_in_a_restarted_task_is_retried_after_construction():
    """Before, the restore ran in the actor's constructor and its exception left Ray's
    restart (and the topology) dead; now the task starts, reports the error, stays
    paused, restores on its next try and reports paused to the coordinator."""
    core, reports = _count_task(_FlakyStore(), gen=11, checkpoint_id=4, rejoining=True)
    core.start()  # (raised here before)
    try:
        until(lambda: ("paused", core.task_id, 11) in reports, 10, "its pause after a retry")
        assert core.state == "running" and core.errors.total >= 1
        assert ("restoring", core.task_id, 11) in reports
        core.checkpoint.request("resume", (11,))
        until(lambda: not core.checkpoint.paused, 10, "the resume")
        assert core.checkpoint.state.get("x") == 3
    finally:
        core.stop()


def test_failures_during_a_rollback_or_of_another_generation_start_none():
    """Each task's report of one failure used to start a rollback each, and each
    rollback's failures more: only a failure of the current generation, outside a
    rollback, rolls back."""
    c = _coordinator()
    g = c.restarted(1, 1.0)[0]
    assert c.failed(2, "frames lost", 1.1, g) == []  # a rollback is under way
    for t in (1, 2, 3):
        c.paused(t, g, 1.2)
    assert c.waiting is None
    assert c.failed(2, "stale", 1.3, g - 1) == []  # of an older generation
    assert [a.kind for a in c.failed(2, "tree failed", 1.4, g)] == ["rollback"]


def test_only_a_task_silent_since_the_rollback_is_taken_for_a_lost_one():
    """A task restoring a large state past the timeout said it took the rollback: it is
    waited for; before, a new rollback came every timeout and the restore never ended."""
    c = _coordinator()
    g = c.restarted(1, 1.0)[0]
    c.restoring(2, g, 1.5)
    c.paused(3, g, 2.0)
    assert c.tick(6.5) == []  # task 1 (restarted) and 2 restore: no task is silent
    c.restarted(1, 7.0)  # (a second restart of task 1: a new rollback, 2 silent in it)
    assert [a.kind for a in c.tick(12.5)] == ["rollback"]


def test_the_log_is_marked_before_the_first_round_is_recorded():
    c = _coordinator()
    calls = []
    c.before_first_record = lambda: calls.append(c.log.load())
    (trigger,) = c.tick(600.0)
    assert calls == [("committed", 0, [])] and trigger.kind == "trigger"
    c.prepared(1, 1, 0, 600.1), c.prepared(2, 1, 0, 600.1), c.prepared(3, 1, 0, 600.1)
    c.tick(1300.0)
    assert len(calls) == 1  # once
    failing = _coordinator()

    def refuse():
        raise OSError("GCS away")
    failing.before_first_record = refuse
    assert failing.tick(600.0) == [] and failing.last_id == 0  # no round unmarked


def test_a_queued_rollback_superseded_by_a_later_one_is_not_performed():
    from actors.state._loop import _superseded_dropped

    a, b = object(), object()
    inbox = collections.deque([(a, "rollback", (5,)), (b, "rollback", (5,)),
                               (a, "commit", (3,)), (a, "rollback", (6,)),
                               (a, "resume", (6,))])
    assert [(x is a, k, args) for x, k, args in _superseded_dropped(inbox)] == [
        (False, "rollback", (5,)), (True, "commit", (3,)), (True, "rollback", (6,)),
        (True, "resume", (6,))]
    assert not inbox


def test_a_savepoint_without_a_new_components_state_starts_it_empty(tmp_path):
    """A topology that adds a stateful bolt starts from a savepoint of the one before:
    the new task's store has nothing for the savepoint's checkpoint, and it starts
    empty (the refusal is for a task restarted where its state was)."""
    provider = LocalProvider(str(tmp_path), "t", "s")
    core, _ = _count_task(lambda t: provider.task_store("count", t), gen=0, checkpoint_id=5)
    core._open()
    assert len(core.checkpoint.state) == 0 and not core.checkpoint.paused


def test_a_lost_message_is_sent_again_only_while_it_matters():
    """Ray fails a call to an actor that is restarting; the coordinator's actor sends such
    a message again when the core says it still matters (a lost trigger held its round
    for the whole timeout, 60 s, in a restarted chain)."""
    from actors.state._coordinator import Action

    c = _coordinator()
    (trigger,) = c.tick(600.0)
    assert c.still_current(trigger._replace(tasks=(3,)))
    for t in (1, 2, 3):
        c.prepared(t, 1, 0, 600.1)
    assert not c.still_current(trigger._replace(tasks=(3,)))  # that round committed
    assert c.still_current(Action("commit", (1,), (1, False)))
    g = c.restarted(1, 601.0)[0]
    assert c.still_current(Action("rollback", (2,), (g, 1, False, ())))
    c.paused(2, g, 601.1)
    assert not c.still_current(Action("rollback", (2,), (g, 1, False, ())))  # it paused
    assert not c.still_current(Action("resume", (2,), (g,)))  # not before the resume
    c.paused(1, g, 601.2), c.paused(3, g, 601.2)
    assert c.still_current(Action("resume", (2,), (g,)))
    assert not c.still_current(Action("resume", (2,), (g - 1,)))
