"""An emit that its load-aware shuffle chose for a task that then refuses it goes to
another task of that shuffle (``Outbox.try_flush_pending``, ``LoadAwareShuffle.others``);
every other grouping's emit waits for its own task. An executor core driven in-process, its
collector called directly (no thread, no Ray)."""

from __future__ import annotations

import collections

import pytest

from actors import make_executor
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder


class _Gate:
    """A sink that takes everything while ``open``, nothing once closed; with ``load``
    (a float) it has a load signal, as an ``ActorSink``, else only its batch's fill says
    anything (a local queue: a closed gate looks idle until its batch is full)."""

    def __init__(self, got: collections.Counter, task: int) -> None:
        self.got, self.task = got, task
        self.open = True

    def __call__(self, items: list) -> int:
        if not self.open:
            return 0
        self.got[self.task] += len(items)
        return len(items)


class _LoadedGate(_Gate):
    def __init__(self, got: collections.Counter, task: int) -> None:
        super().__init__(got, task)
        self.value = 0.0

    def load(self) -> float:
        return self.value


def _spout(grouping: str = "shuffle", batch: int = 8, disable: bool = False,
           sink=_Gate):
    """A spout task sending to a three-task bolt by ``grouping``, connected to a gate per
    task: ``(core, bolt tasks, gates, tuples each took)``."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    d = b.set_bolt("sink", CollectorBolt(), parallelism_hint=3)
    if grouping == "fields":
        d.fields_grouping("src", ["key"])
    else:
        d.shuffle_grouping("src")
    topo = b.create_topology()
    src, tasks = topo.component_tasks["src"][0], list(topo.component_tasks["sink"])
    conf = {"topology.producer.batch.size": batch, "topology.batch.flush.interval.millis": 0,
            "topology.disable.loadaware.messaging": disable}
    core = make_executor("t", topo, conf, src, {t: 0 for t in (src, *tasks)})
    got: collections.Counter = collections.Counter()
    gates = {t: sink(got, t) for t in tasks}
    core.connect(gates)
    return core, tasks, gates, got


def _emit(core, n: int) -> int:
    """``n`` emits as the spout loop makes them: none while ``pending_emits`` holds (it
    retries them first); returns how many went out."""
    out, col = core.outbox, core.collector
    done = 0
    for i in range(n):
        if out.pending_emits and not out.try_flush_pending():
            break
        col.emit((i, "k"))
        done += 1
    return done


def test_a_task_that_stops_taking_between_refreshes_does_not_hold_the_spout():
    """A task stops taking while its batch is part full and its load still says 0.0 (the
    signal has not caught up): the emits chosen for it fill the batch and, unless a
    refresh comes first, the next one is refused. It goes to another task, the refusal
    drops the task from the shuffle, and the spout goes on emitting, the other two taking
    every later tuple. Stopped after each number of emits over three batches, so the
    refusal falls at every point of the refresh period (some before, some after it)."""
    rerouted = 0
    for first in range(3 * 8):
        core, tasks, gates, got = _spout(batch=8)
        out = core.outbox
        assert _emit(core, first) == first
        victim, *alive = sorted(tasks, key=lambda t: -len(out.inserters[t].batch))
        gates[victim].open = False
        before = {t: got[t] + len(out.inserters[t].batch) for t in tasks}  # sent or batched
        assert _emit(core, 300) == 300, first  # never held
        assert not out.pending_emits or out.try_flush_pending(), first
        assert out.try_flush_batches() is False  # (the victim's full batch waits)
        assert got[victim] == 0 and len(out.inserters[victim].batch) == 8
        grew = {t: got[t] - before[t] for t in alive}
        assert sum(grew.values()) + 8 - before[victim] == 300, first  # every emit
        assert all(g > 100 for g in grew.values()), (first, grew)
        rerouted += out.rerouted
    assert rerouted > 0  # the refusal did fall between two refreshes


def test_a_refused_emit_of_a_fields_grouping_waits_for_its_task():
    core, tasks, gates, got = _spout("fields", batch=1)
    out = core.outbox
    (target,) = core.collector.emit((0, "k"))
    gates[target].open = False
    core.collector.emit((1, "k"))  # same key: same task, which refuses it
    for _ in range(3):
        assert not out.try_flush_pending()
    assert [d for d, _ in out.pending_emits] == [target] and out.rerouted == 0
    gates[target].open = True
    assert out.try_flush_pending() and got[target] == 2


def test_with_load_aware_messaging_disabled_a_refused_shuffle_emit_waits_for_its_task():
    core, tasks, gates, got = _spout(batch=1, disable=True)
    out = core.outbox
    (target,) = core.collector.emit((0, "k"))
    gates[target].open = False
    _emit(core, 2 * len(tasks))  # the rotation comes back to it, and holds there
    for _ in range(3):
        assert not out.try_flush_pending()
    assert out.pending_emits[0][0] == target and out.rerouted == 0
    assert sum(got.values()) == len(tasks)  # (its first, and the other two)


@pytest.mark.parametrize("opens", ["best", "other"])
def test_when_no_task_takes_it_the_emit_waits_for_the_best_and_goes_to_the_first_free(
        opens):
    """Every task refuses: the emit stays at the head of ``pending_emits``, now for a task
    the shuffle would choose (the two that stopped just now, not the one silent for 3 s),
    and each retry offers it to both: the first to take again gets it."""
    core, tasks, gates, got = _spout(batch=1, sink=_LoadedGate)
    out = core.outbox
    victim, a, b = tasks
    for g in gates.values():
        g.open = False
    gates[victim].value = 0.0  # (its load has not caught up yet: chosen)
    gates[a].value = gates[b].value = 1.0
    core.collector.emit((0, "k"))
    assert out.pending_emits[0][0] == victim
    assert not out.try_flush_pending() and out.pending_emits[0][0] == victim
    gates[victim].value = 4.0  # silent for 3 s now
    assert not out.try_flush_pending()
    held = out.pending_emits[0][0]
    assert held in (a, b) and out.rerouted == 0
    free = held if opens == "best" else ({a, b} - {held}).pop()
    gates[free].open = True
    assert out.try_flush_pending() and got == {free: 1}
    assert out.rerouted == (0 if opens == "best" else 1)


def test_a_task_the_weights_leave_out_is_never_offered_a_refused_emit():
    """A dead task's sends fail at once, so it "takes" everything (and loses it): at weight
    0 it gets no re-routed emit either; the emit waits until a weighted task takes it."""
    core, tasks, gates, got = _spout(batch=1, sink=_LoadedGate)
    out = core.outbox
    dead, chosen, full = tasks
    gates[dead].value = 2.0  # open, and lost: its load holds it out
    gates[chosen].open = False  # (its load has not caught up)
    gates[full].open, gates[full].value = False, 1.0
    core.collector.emit((0, "k"))
    for _ in range(3):
        assert not out.try_flush_pending()
    assert out.pending_emits[0][0] == chosen and not got
    gates[full].open, gates[full].value = True, 0.3
    assert out.try_flush_pending() and got == {full: 1} and out.rerouted == 1
