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
from actors._sink import LOST_HOLD_S
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
    """What a fake actor call returns: ``future()`` of an answer given later; ``frame``,
    the frame it carried."""

    def __init__(self, frame: bytes = b"") -> None:
        self.fut: Future = Future()
        self.frame = frame

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
        calls.append(_Call(frame))
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


def test_a_call_that_fails_otherwise_is_a_loss_too():
    """A call that raises anything but an actor's death (the receiver raised, Ray
    cancelled it) may not have delivered its frame: the sink starts a new epoch rather
    than leave a gap that holds back every later frame at the receiver; the error is
    reported."""
    from ray.exceptions import TaskCancelledError

    sink, calls, core = _sink()
    sink([(0, [1, "k"])])
    sink([(0, [2, "k"])])
    calls[0].fut.set_exception(TaskCancelledError())
    calls[1].fut.set_result(1)
    assert sink.unacked() == 0 and sink.resets == 1 and core.errors.total == 1


def test_a_task_ends_once_its_end_marker_is_acknowledged_sent_again_after_a_loss():
    """``_end_stream`` waits for the destination's acknowledgement of the end marker, not
    only its hand-over: the frame that carried it lost meanwhile, the marker goes again
    (in a new epoch), and the task is done once that one is acknowledged."""
    from ray.exceptions import TaskCancelledError

    from actors._codec import decode_batch

    sink, calls, core = _sink()
    core.connect({1: sink})
    seen = 0

    def marker_call():
        # acknowledge data frames as they come; return the first call that carries the
        # end marker (stream -1), left unanswered
        nonlocal seen
        while seen < len(calls):
            call = calls[seen]
            seen += 1
            _, _, seq, items = decode_batch(call.frame)
            if any(stream == -1 for stream, *_ in items):
                return call
            call.fut.set_result(seq)
        return None

    core.start()
    try:
        first = until(marker_call, 10, "the end marker sent", interval=0.001)
        assert not core.done.wait(0.2) and core.state == "ending"  # not acknowledged
        first.fut.set_exception(TaskCancelledError())  # lost
        again = until(marker_call, 10, "the end marker sent again", interval=0.001)
        assert sink.resets == 1 and decode_batch(again.frame)[2] == 0  # a new epoch
        assert not core.done.wait(0.2)
        again.fut.set_result(0)
        assert core.done.wait(10) and core.state == "done"
    finally:
        core.stop()


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


#: The bolts' receive queues (tuples): what a live bolt task can still execute from
#: before a hang, with the spout held
QUEUE = 8192
#: Tuples each live bolt task must execute in a window: several queues' worth, so the
#: spout must have emitted them after the failure, and a clear amount of the stream
GROW = 40_000
#: A bolt's sleep per tuple when one is hung: the spout outpaces the bolts
HUNG_BOLT_DELAY_S = 0.00002
#: Batches a killed task is sent per probe at most: its share, flushed every flush interval
#: until the next weight refresh finds the first one lost
PROBE_BATCHES = 10
#: Seconds a window may take at most (a slow, shared host included)
WINDOW_S = 120


def _grow(handle, tasks: list[int], n: int, before: dict[int, int]) -> None:
    """Poll until each of ``tasks`` has executed ``n`` tuples more than ``before`` (task →
    executed); fail after :data:`WINDOW_S`, naming the counts."""
    deadline = time.monotonic() + WINDOW_S
    while True:
        grew = {t: _stats(handle, t).executed - before[t] for t in tasks}
        if all(g >= n for g in grew.values()):
            return
        assert time.monotonic() < deadline, (
            f"bolt tasks executed {grew} in {WINDOW_S} s, not {n} each")
        time.sleep(0.1)


def _window(handle, src: int, alive: list[int]):
    """:func:`_grow` of :data:`GROW` tuples by each task of ``alive``: ``(spout stats
    before, after, seconds between the two)``, read before and after the bolts'."""
    t0 = time.monotonic()
    spout0 = _stats(handle, src)
    _grow(handle, alive, GROW, {t: _stats(handle, t).executed for t in alive})
    spout = _stats(handle, src)
    return spout0, spout, time.monotonic() - t0


def _held(handle, src: int) -> tuple:
    """Poll until the spout has been held a second with no emit: two readings with
    ``pending_emits``, a second of backpressure wait between them and the same emit count
    (fails after :data:`WINDOW_S`); returns them."""
    prev = [_stats(handle, src)]

    def held() -> bool:
        s = _stats(handle, src)
        p = prev[0]
        if s.backpressure_wait_ms - p.backpressure_wait_ms < 1000:
            return False
        if s.emitted == p.emitted and s.pending_emits and p.pending_emits:
            prev.append(s)
            return True
        prev[0] = s
        return False
    until(held, WINDOW_S, "the spout held a second by pending_emits", 0.1)
    return prev[0], prev[1]


@pytest.mark.ray
@pytest.mark.parametrize("workers", ["2workers"], indirect=True)
@pytest.mark.parametrize("failure", ["killed", "hung"])
@pytest.mark.parametrize("disable", [False, True], ids=["loadaware", "plain"])
def test_a_killed_or_hung_bolt_task_and_the_others_keep_the_stream(cluster, workers, name,
                                                                  failure, disable):
    """One spout → three bolt tasks (shuffle) over two workers, acking off, no restarts;
    one bolt task, in the other worker than the spout, is killed (``ray.kill``: its calls
    fail at once and its frames are lost) or hung (SIGSTOP: nothing it is sent is ever
    acknowledged). Load-aware, the spout sends it nothing but a probe now and then, and the
    other two take the whole stream: they keep executing (polled, window after window) and
    the spout's batches go to them. With ``topology.disable.loadaware.messaging``: a killed
    task keeps getting its third (lost), a hung one holds the spout in ``pending_emits``.

    Two windows after the failure: the first lets it take effect (the frames in flight to
    the victim, its batch), the second is measured. For a hang the bolts are slower than
    the spout, as in a backpressured stream: every task's credits are in use, so for a
    moment after it stops the hung task looks no more loaded than the live ones (within
    ``FALLBACK_MARGIN``) and an emit may still be chosen for it, which it refuses; that
    emit must not hold the spout."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("mid", PassBolt(HUNG_BOLT_DELAY_S if failure == "hung" else 0.0),
               3).shuffle_grouping("src")
    handle = cluster.submit_topology(name, workers.conf({
        "topology.acker.executors": 0, "topology.executor.max.restarts": 0,
        "topology.executor.receive.buffer.size": QUEUE,
        "topology.disable.loadaware.messaging": disable}), b.create_topology())
    stopped = None
    try:
        src = handle.topology.component_tasks["src"][0]
        mids = handle.topology.component_tasks["mid"]
        victim = next(t for t in mids if handle.task_worker[t] != handle.task_worker[src])
        alive = [t for t in mids if t != victim]
        _grow(handle, mids, 10_000, dict.fromkeys(mids, 0))  # every bolt task running
        if failure == "killed":
            ray.kill(handle.actors[victim])
        else:
            stopped = ray.get(handle.actors[victim].pid.remote())
            os.kill(stopped, signal.SIGSTOP)
        if disable and failure == "hung":  # the old behaviour: held
            spout0, spout = _held(handle, src)
        else:
            _window(handle, src, alive)  # (the failure takes effect)
            spout0, spout, seconds = _window(handle, src, alive)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.kill_topology(name)
    batches = {t: spout.sent_batches_to[t] - spout0.sent_batches_to[t] for t in mids}
    if disable and failure == "hung":  # (held by it, and nothing more sent to it)
        assert spout.state == "running" and batches[victim] == 0, batches
        return
    to_victim, to_alive = batches[victim], sum(batches[t] for t in alive)
    if disable:  # killed: its third still goes to it, lost
        assert to_victim > 0.2 * (to_victim + to_alive), batches
    elif failure == "hung":  # the live two take all of it
        assert to_victim == 0, batches
    else:  # a killed one: a probe each time its hold ends
        assert to_victim <= PROBE_BATCHES * (1 + seconds / LOST_HOLD_S), (batches, seconds)


def test_a_receiver_silent_past_the_message_timeout_has_lost_its_frames(monkeypatch):
    """A ``None`` acknowledgement (a restarted transfer actor that no longer knows the
    task) leaves the frame unacknowledged; past ``topology.message.timeout.secs`` of
    silence the frames are lost: a new epoch, and an ending task sends its end marker
    again (before, the sender waited for that acknowledgement for good)."""
    now = _clock(monkeypatch)
    sink, calls, core = _sink()
    sink([(0, [1, "k"])])
    calls[0].fut.set_result([None])  # answered, but not acknowledged
    timeout = core.conf["topology.message.timeout.secs"]
    now[0] += timeout - 0.5
    assert sink.unacked() == 1 and sink.resets == 0  # silent, not yet lost
    core.state = "ending"
    now[0] += 1.0
    assert sink.unacked() == 1 and sink.resets == 1 and sink.silences == 1
    assert len(calls) == 2  # the end marker again, by actor call, in the new epoch
    calls[1].fut.set_result(0)
    assert sink.unacked() == 0


def test_with_checkpoints_a_loss_epoch_stays_below_a_rollback_begun_before_it(monkeypatch):
    """A rollback's generation is a clock reading; a sender that finds a loss after the
    rollback began, but before it applies it, sends old-generation frames in its next
    epoch. That epoch must stay below the generation, so receivers that already rolled
    back drop those frames (a clock reading passed it: a join killed under checkpoints
    counted 20 pairs twice in a full run)."""
    import time as _time

    from actors.state import enable_checkpoints

    _clock(monkeypatch)
    sink, calls, core = _sink()
    enable_checkpoints(core, None)
    sink([(0, [1, "k"])])
    gen = _time.time_ns()  # the coordinator starts a rollback
    calls[0].fut.set_exception(RayActorError())  # the sender finds the loss after it
    assert sink.unacked() == 0 and sink.resets == 1
    assert sink._epoch < gen
    sink.reset_epoch(gen)  # the rollback reaches the sender
    assert sink._epoch == gen
