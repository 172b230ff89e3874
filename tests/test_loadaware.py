"""Load-aware shuffle (Storm's ``LoadAwareShuffleGrouping``, key
``topology.disable.loadaware.messaging``): the router and the sender's load signal
(``Outbox.load``, ``ActorSink.load``) without Ray, an executor core in-process with a
destination that takes nothing, and on Ray a killed or hung bolt task whose share the
others take."""

from __future__ import annotations

import collections
import os
import signal
import time
from concurrent.futures import Future

import pytest
import ray
from ray.exceptions import RayActorError

from actors import make_executor
from actors._routing import MAX_WEIGHT, LoadAwareShuffle, StreamRouter, build_routers
from tests._util import until
from tests.components import PassBolt, SeqSpout
from topology import CollectorBolt, Fields, TopologyBuilder

TASKS = (4, 7, 9)


class _Shuffle:
    """A one-subscription stream router over a :class:`LoadAwareShuffle` of ``TASKS``."""

    def __init__(self, loads: dict[int, float] | None = None, period: int = 8,
                 counter: int = 0) -> None:
        self.sub = LoadAwareShuffle(TASKS, period, counter)
        self.router = StreamRouter("src", "default", 0, Fields(("x",)), [self.sub],
                                   frozenset())
        if loads is not None:
            self.router.bind_load(loads.__getitem__)

    def choose(self) -> int:
        (task,) = self.router.route([0])
        return task


def _shares(s: _Shuffle, n: int) -> collections.Counter:
    return collections.Counter(s.choose() for _ in range(n))


def _to_refresh(s: _Shuffle) -> None:
    """Choose up to the last choice before the next refresh."""
    for _ in range(s.sub.refresh_at - s.sub.counter - 1):
        s.choose()


def test_weights_follow_the_load_function():
    loads = {4: 0.0, 7: 0.5, 9: 0.75}
    s = _Shuffle(loads)
    assert s.sub.weights == (MAX_WEIGHT, 50, 25)  # Storm's 100 - load %
    assert _shares(s, 7000) == {4: 4000, 7: 2000, 9: 1000}
    loads.update({4: 0.75, 9: 0.0})  # read again at the next refresh, not before
    before = s.sub.weights
    _to_refresh(s)
    assert s.sub.weights == before
    s.choose()
    assert s.sub.weights == (25, 50, MAX_WEIGHT)
    assert _shares(s, 7000) == {4: 1000, 7: 2000, 9: 4000}


def test_a_task_at_full_load_gets_nothing_and_the_others_share_the_stream():
    s = _Shuffle({4: 0.0, 7: 1.0, 9: 0.0})
    got = _shares(s, 10_000)
    assert got[7] == 0 and got[4] == got[9] == 5000


def test_when_every_task_is_at_full_load_the_plain_shuffle_takes_over():
    s = _Shuffle({t: 1.0 for t in TASKS})
    assert [s.choose() for _ in range(6)] == [7, 9, 4, 7, 9, 4]  # the plain rotation


def test_when_every_task_takes_nothing_those_that_stopped_last_keep_the_stream():
    """Beyond 1.0 a load counts the seconds a task has taken nothing: a hung one (3 s)
    is left out of the fallback while the merely full ones (just now, 20 ms ago) share it;
    the emits then wait for one of those."""
    loads = {4: 1.0, 7: 1.02, 9: 4.0}
    s = _Shuffle(loads)
    assert s.sub.weights == (MAX_WEIGHT, MAX_WEIGHT, 0)
    assert _shares(s, 1000) == {4: 500, 7: 500}
    loads[7] = 1.2  # now 4 alone stopped last
    _to_refresh(s)
    assert _shares(s, 1000) == {4: 1000}


def test_equal_load_keeps_the_plain_shuffles_rotation_and_even_shares():
    """Whatever the (equal) load, the choices are the plain shuffle's, task for task: the
    even shares the shuffle tests rely on."""
    for load in (0.0, 0.3, 0.99):
        s = _Shuffle({t: load for t in TASKS}, counter=5)
        plain = collections.deque(TASKS)
        plain.rotate(-6)  # the plain shuffle's counter + 1 = 6
        assert [s.choose() for _ in range(9)] == list(plain) * 3
        assert set(_shares(s, 3000).values()) == {1000}


def test_shares_are_interleaved_not_bunched():
    """A task's picks are spread over the cycle, so a short burst is already weighted."""
    s = _Shuffle({4: 0.0, 7: 0.5, 9: 1.0})
    picks = [s.choose() for _ in range(30)]
    assert 9 not in picks
    for i in range(0, 30, 3):  # every window of 3 holds 2 of task 4 and 1 of task 7
        assert sorted(picks[i:i + 3]) == [4, 4, 7], picks


def test_the_load_is_read_once_per_task_per_period():
    """The per-tuple path stays a counter step: each target's load is asked once every
    ``period`` emits."""
    calls = collections.Counter()

    def load(t):
        calls[t] += 1
        return 0.0

    s = _Shuffle(period=16)
    s.router.bind_load(load)
    for _ in range(160):
        s.choose()
    assert calls == {t: 1 + 10 for t in TASKS} and s.sub.refreshes == 11


def test_unbound_it_is_the_plain_shuffle_and_period_must_be_positive():
    s = _Shuffle(period=4, counter=2)
    assert [s.choose() for _ in range(4)] == [4, 7, 9, 4] and s.sub.refreshes == 0
    with pytest.raises(ValueError, match="period must be >= 1"):
        LoadAwareShuffle(TASKS, 0)


def _three_sinks_topology():
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", CollectorBolt(), parallelism_hint=3).shuffle_grouping("src")
    b.set_bolt("one", CollectorBolt()).shuffle_grouping("src")  # one task: a fixed route
    return b.create_topology()


def test_build_routers_makes_multi_task_shuffles_load_aware_when_asked():
    topo = _three_sinks_topology()
    src = topo.component_tasks["src"][0]
    workers = {t: 0 for ts in topo.component_tasks.values() for t in ts}
    on = build_routers(topo, "src", src, workers, load_aware=True, batch_size=16)["default"]
    off = build_routers(topo, "src", src, workers)["default"]
    la = [s for s in on._subs if isinstance(s, LoadAwareShuffle)]
    assert len(la) == 1 and la[0].period == 16  # min(64 emits, one batch)
    assert not any(isinstance(s, LoadAwareShuffle) for s in off._subs)
    # unbound, both route the same tuples to the same tasks
    assert [on.route([i, "k"]) for i in range(12)] == [off.route([i, "k"]) for i in range(12)]


class _Refusing:
    """A sink that takes nothing and says so (as an ``ActorSink`` whose receiver is hung:
    every credit in use)."""

    def __init__(self):
        self.offers = 0

    def __call__(self, items: list) -> int:
        self.offers += 1
        return 0

    def load(self) -> float:
        return 1.0


@pytest.mark.parametrize("disable", [False, True], ids=["loadaware", "plain"])
def test_a_spout_keeps_emitting_past_a_task_that_takes_nothing(disable):
    """Executor core in-process: of three shuffle targets, one takes nothing. Load-aware,
    the other two take the whole stream and nothing waits in ``pending_emits``; with
    ``topology.disable.loadaware.messaging`` the spout ends up held by it."""
    topo = _three_sinks_topology()
    src, one = topo.component_tasks["src"][0], topo.component_tasks["one"][0]
    dead, *alive = topo.component_tasks["sink"]
    workers = {t: 0 for ts in topo.component_tasks.values() for t in ts}
    conf = {"topology.producer.batch.size": 8, "topology.batch.flush.interval.millis": 0,
            "topology.disable.loadaware.messaging": disable}
    spout = make_executor("t", topo, conf, src, workers)
    got = collections.Counter()

    def taking(task):
        def sink(items):
            got[task] += len(items)
            return len(items)
        return sink

    refusing = _Refusing()
    spout.connect({dead: refusing, one: taking(one), **{t: taking(t) for t in alive}})
    spout.start()
    try:
        if disable:
            until(lambda: spout.outbox.pending_emits, 10, "the spout held", 0.001)
            held = spout.emitted
            until(lambda: spout.backpressure_wait_s > 0.05, 10, "waiting", 0.001)
            pending = spout.outbox.pending_emits  # one emit: to a "sink" task and to "one"
            assert spout.emitted == held and len(pending) == 2 and pending[0][0] == dead
        else:
            until(lambda: got[one] > 20_000, 30, "20k tuples", 0.001)
            assert not spout.outbox.pending_emits and spout.outbox.max_pending_emits == 0
            assert refusing.offers == 0 and sum(got[t] for t in alive) >= got[one] - 16
            assert abs(got[alive[0]] - got[alive[1]]) <= 16  # even between the two
    finally:
        spout.stop()


# -- ActorSink.load: the sender's view of one destination (no Ray cluster) ---------------


class _Call:
    """What a fake actor call returns: ``future()`` of an answer given later."""

    def __init__(self) -> None:
        self.fut: Future = Future()

    def future(self) -> Future:
        return self.fut


def _sink(max_inflight: int = 2, remote: bool = False):
    """An ``ActorSink`` of task 2 of ``_topo_one_sink`` to task 1, whose calls are kept
    (answer one with ``calls[i].fut.set_result(seq)``)."""
    from actors._sink import ActorSink

    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology()  # tasks: sink=1, src=2
    core = make_executor("t", topo, {}, 2, {1: 0, 2: 0})
    calls: list[_Call] = []

    def send(frame):
        calls.append(_Call())
        return calls[-1]
    return ActorSink(send, 2, 1, max_inflight, core, remote), calls, core


def _clock(monkeypatch) -> list[float]:
    """A settable ``time.monotonic`` for ``actors._actor``."""
    import actors._sink as actor_mod

    now = [100.0]
    monkeypatch.setattr(actor_mod.time, "monotonic", lambda: now[0])
    return now


def test_sink_load_is_the_credits_in_use_beyond_the_first(monkeypatch):
    now = _clock(monkeypatch)
    sink, calls, _ = _sink(max_inflight=3)
    assert sink.load() == 0.0
    sink([(0, [1, "k"])])
    assert sink.load() == 0.0  # one frame in flight: a healthy receiver's normal state
    sink([(0, [2, "k"])])
    assert sink.load() == 0.5
    sink([(0, [3, "k"])])
    assert sink.load() == 1.0  # every credit in use: a slow, hung or restarting receiver
    now[0] += 2.5
    assert sink.load() == 3.5  # ... for 2.5 s since the first frame went unacknowledged
    calls[1].fut.set_result(1)  # frames 0 and 1 acknowledged
    assert sink.load() == 0.0
    sink([(0, [4, "k"])])
    now[0] += 0.5
    calls[2].fut.set_result(2)  # frame 2 acknowledged: the silence starts again
    sink([(0, [5, "k"])])
    sink([(0, [6, "k"])])
    now[0] += 0.25
    assert sink.load() == 1.25  # full again, silent for 0.25 s


def test_sink_load_is_taken_for_a_while_after_frames_were_lost(monkeypatch):
    """A dead receiver's calls fail at once, which frees the credits: without the hold it
    would look idle, and get the largest share."""
    from actors._sink import LOST_HOLD_S

    now = _clock(monkeypatch)
    sink, calls, _ = _sink()
    sink([(0, [1, "k"])])
    sink([(0, [2, "k"])])
    for c in calls:
        c.fut.set_exception(RayActorError())
    assert sink.load() == 1.0 + LOST_HOLD_S and sink.resets == 1 and sink.unacked() == 0
    now[0] += LOST_HOLD_S - 0.01
    assert sink.load() == 1.0 + LOST_HOLD_S
    now[0] += 0.02
    assert sink.load() == 0.0  # its share probes it again


def test_sink_load_is_full_while_the_policy_refuses_the_destination(monkeypatch):
    sink, _, core = _sink(remote=True)
    assert sink.load() == 0.0
    monkeypatch.setattr(core.policy, "backlogged_remote", lambda: [1])
    assert sink.load() == 1.0 and core.policy.refusals == 0  # asking is not a refusal
    back_edge, _, core = _sink(remote=False)  # (a back edge is never refused)
    monkeypatch.setattr(core.policy, "backlogged_remote", lambda: [1])
    assert back_edge.load() == 0.0


# -- on Ray: a killed or hung bolt task -------------------------------------------------


def _stats(handle, task: int):
    """One task's stats, straight from its actor (the handle's ``stats()`` fails once an
    actor is dead for good)."""
    return ray.get(handle.actors[task].stats.remote(), timeout=60)


@pytest.mark.ray
@pytest.mark.parametrize("workers", ["2workers"], indirect=True)
@pytest.mark.parametrize("failure", ["killed", "hung"])
@pytest.mark.parametrize("disable", [False, True], ids=["loadaware", "plain"])
def test_a_killed_or_hung_bolt_task_and_the_others_keep_the_stream(cluster, workers, name,
                                                                  failure, disable):
    """One spout → three bolt tasks (shuffle) over two workers, acking off, no restarts;
    one bolt task, in the other worker than the spout, is killed (``ray.kill``: its calls
    fail at once and its frames are lost) or hung (SIGSTOP: nothing it is sent is ever
    acknowledged). Load-aware, the spout sends it nothing but a probe now and then, the
    other two take the whole stream and nothing waits in ``pending_emits``. With
    ``topology.disable.loadaware.messaging``: a killed task keeps getting its third (lost),
    a hung one holds the spout in ``pending_emits`` for good."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("mid", PassBolt(), 3).shuffle_grouping("src")
    handle = cluster.submit_topology(name, workers.conf({
        "topology.acker.executors": 0, "topology.executor.max.restarts": 0,
        "topology.disable.loadaware.messaging": disable}), b.create_topology())
    stopped = None
    try:
        src = handle.topology.component_tasks["src"][0]
        mids = handle.topology.component_tasks["mid"]
        victim = next(t for t in mids if handle.task_worker[t] != handle.task_worker[src])
        alive = [t for t in mids if t != victim]
        until(lambda: all(_stats(handle, t).executed > 10_000 for t in mids), 120,
              "every bolt task running")
        if failure == "killed":
            ray.kill(handle.actors[victim])
        else:
            stopped = ray.get(handle.actors[victim].pid.remote())
            os.kill(stopped, signal.SIGSTOP)
        time.sleep(1.0)  # (the loss or the hang takes effect)
        spout0 = _stats(handle, src)
        before = {t: _stats(handle, t).executed for t in alive}
        time.sleep(3.0)
        spout = _stats(handle, src)
        grew = {t: _stats(handle, t).executed - before[t] for t in alive}
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.kill_topology(name)
    emitted = spout.emitted - spout0.emitted
    to_victim = spout.sent_batches_to[victim] - spout0.sent_batches_to[victim]
    if disable and failure == "hung":  # the old behaviour: held for good
        assert emitted == 0 and spout.pending_emits > 0 and spout.state == "running"
        assert spout.backpressure_wait_ms - spout0.backpressure_wait_ms > 2500
        return
    assert spout.pending_emits == 0 and emitted > 30_000
    assert all(g > 10_000 for g in grew.values()), grew
    if disable:  # killed: its third still goes to it, lost
        assert to_victim > 10 and sum(grew.values()) < 0.8 * emitted, (to_victim, grew)
    else:  # the live two took (about) all of it; the victim, at most a probe a second
        assert sum(grew.values()) >= 0.9 * emitted, (grew, emitted)
        assert to_victim <= (0 if failure == "hung" else 4 * 10), to_victim
