"""Tick tuples (Storm's ``topology.tick.tuple.freq.secs``): delivered through the receive
queue behind the data, never blocking the executor on its own queue, collapsed while one
waits, neither anchored, acked nor counted as executed."""

from __future__ import annotations

import time

import pytest

from actors import make_executor
from tests._util import until
from tests.components import SeqSpout
from topology import Bolt, ConfigError, TopologyBuilder

TICK = "topology.tick.tuple.freq.secs"


class TickRecorder(Bolt):
    """Records ("tick", rate) for ticks and ("data", seq) for data tuples."""

    outputs = ("seq",)

    def __init__(self, conf: dict | None = None, fail_ticks: bool = False) -> None:
        self.conf = conf
        self.fail_ticks = fail_ticks

    def get_component_configuration(self):
        return self.conf

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen: list = []

    def execute(self, tup):
        if tup.is_tick():
            self.seen.append(("tick", tup["rate_secs"], tup.source_component,
                              tup.source_stream))
            self.collector.ack(tup)  # as Storm bolts often do: does nothing for a tick
            if self.fail_ticks:
                raise RuntimeError("tick failed")
        else:
            self.seen.append(("data", tup["seq"]))

    def ticks(self) -> int:
        return sum(1 for s in self.seen if s[0] == "tick")


def _topology(bolt: Bolt, conf: dict | None = None):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    d = b.set_bolt("b", bolt).shuffle_grouping("src")
    for k, v in (conf or {}).items():
        d.add_configuration(k, v)
    return b.create_topology()  # b = 1, src = 2


def _driven(period: float, capacity: int = 8, control: int = 0):
    """A bolt executor driven by hand (no thread) on a clock the test moves."""
    topo = _topology(TickRecorder(), {TICK: period})
    core = make_executor("t", topo, {"topology.executor.receive.buffer.size": capacity,
                                     "topology.producer.batch.size": 1,
                                     "topology.executor.control.receive.buffer.size": control},
                         1, {1: 0, 2: 0})
    now = [0.0]
    core.clock = lambda: now[0]
    core._next_tick = period
    core.obj.prepare(core.conf, core.context, core.collector)
    return core, now


def test_a_tick_behind_a_full_queue_waits_and_later_ticks_collapse_into_it():
    core, now = _driven(1.0)
    q, bolt = core.queue, core.obj
    src_stream = next(i for i, s in enumerate(core.streams) if s[0] == "src")
    assert q.try_fill([(2, src_stream, [i, "k"]) for i in range(8)]) == 8  # full
    now[0] = 3.5  # three periods pass while the queue is full
    core._timers(False)
    now[0] = 4.6
    core._timers(False)
    assert q.size() == 8 and core._tick_due  # never blocked, still due, one due only
    q.consume(core.handle)
    core._timers(False)  # room now: the tick goes in, behind the data
    core._timers(False)
    q.consume(core.handle)
    assert [s[0] for s in bolt.seen] == ["data"] * 8 + ["tick"]
    assert bolt.seen[-1] == ("tick", 1.0, "__system", "__tick")
    assert core.executed == 8 and core.ticks == 1
    assert core.collector.acked == 8  # the data (auto-acked); the tick's ack did nothing
    now[0] = 5.4  # before the next period: nothing
    core._timers(False)
    assert q.size() == 0
    now[0] = 5.6
    core._timers(False)
    q.consume(core.handle)
    assert core.ticks == 2 and core.executed == 8


def test_a_tick_still_queued_holds_the_next_one_back():
    core, now = _driven(1.0)
    now[0] = 1.0
    core._timers(False)
    assert core.queue.size() == 1
    for t in (2.0, 3.0, 4.0):  # the bolt has not taken the first: no pile-up
        now[0] = t
        core._timers(False)
        assert core.queue.size() == 1
    core.queue.consume(core.handle)
    core._timers(False)  # the collapsed tick follows
    core.queue.consume(core.handle)
    assert core.ticks == 2


def test_ticks_arrive_at_the_period_on_the_executor_thread_and_stats_count_them():
    period = 0.05
    topo = _topology(TickRecorder(), {TICK: period})
    core = make_executor("t", topo, {}, 1, {1: 0, 2: 0})  # no data: src never starts
    t0 = time.monotonic()
    core.start()
    try:
        until(lambda: core.ticks >= 6, 10, "six ticks")
        elapsed = time.monotonic() - t0
        assert core.ticks <= elapsed / period + 1  # never faster than the period
        stats = core.stats()
        assert stats.ticks >= 6 and stats.executed == 0 and stats.acked == 0
        assert all(s[:2] == ("tick", period) for s in core.obj.seen)
    finally:
        core.stop()


def test_a_bolt_raising_on_a_tick_is_reported_and_goes_on():
    topo = _topology(TickRecorder(fail_ticks=True), {TICK: 0.02})
    core = make_executor("t", topo, {}, 1, {1: 0, 2: 0})
    core.start()
    try:
        until(lambda: core.ticks >= 3, 10, "three ticks")
        errors = core.stats().errors
        assert errors and errors[0]["component"] == "b" and "tick failed" in str(errors[0])
    finally:
        core.stop()


@pytest.mark.parametrize("how", ["add_configuration", "component_configuration", "topology"])
def test_tick_frequency_set_per_component_or_for_the_topology(how):
    conf = {TICK: 2}
    topo = _topology(TickRecorder(conf if how == "component_configuration" else None),
                     conf if how == "add_configuration" else None)
    core = make_executor("t", topo, conf if how == "topology" else {}, 1, {1: 0, 2: 0})
    assert core.tick_s == 2
    plain = make_executor("t", _topology(TickRecorder()), {}, 1, {1: 0, 2: 0})
    assert plain.tick_s is None


def test_add_configuration_overrides_the_components_own_and_bad_values_name_it():
    topo = _topology(TickRecorder({TICK: 5}), {TICK: 1})
    assert make_executor("t", topo, {}, 1, {1: 0, 2: 0}).tick_s == 1
    with pytest.raises(ConfigError, match=r"component 'b'.*tick\.tuple\.freq\.secs"):
        _topology(TickRecorder(), {TICK: 0})
    with pytest.raises(ConfigError, match=r"component 'b'"):
        _topology(TickRecorder({TICK: "often"}))


def test_ticks_reach_every_task_of_a_bolt_on_ray(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("b", TickRecorder(), 2).shuffle_grouping("src").add_configuration(TICK, 0.1)
    handle = cluster.submit_topology(name, {"topology.acker.executors": 0},
                                     b.create_topology())
    try:
        s = until(lambda: (st := handle.stats()) and all(
            t.ticks >= 3 for t in st.component("b")) and st, 60, "ticks at both tasks")
        # one tick per period from prepare on, plus one the stats call may count after
        # reading the clock (it reads a running task)
        assert all(t.ticks <= t.uptime_s / 0.1 + 1 for t in s.component("b")), \
            [(t.ticks, t.uptime_s) for t in s.component("b")]
    finally:
        cluster.kill_topology(name)


@pytest.mark.parametrize("control", [False, True], ids=["off", "control_queue"])
def test_a_tick_reaches_a_task_whose_data_queue_is_full(control):
    """With the control receive queue a tick due while the data queue is full goes in at
    its period and runs before the data; without it, it waits for room and runs after."""
    core, now = _driven(1.0, control=4 if control else 0)
    q, bolt = core.queue, core.obj
    src_stream = next(i for i, s in enumerate(core.streams) if s[0] == "src")
    assert q.try_fill([(2, src_stream, [i, "k"]) for i in range(8)]) == 8  # full
    now[0] = 1.0  # one period
    core._timers(False)
    assert core._tick_queued is control
    q.consume(core.handle)
    core._timers(False)
    q.consume(core.handle)
    kinds = [s[0] for s in bolt.seen]
    assert kinds == (["tick"] + ["data"] * 8 if control else ["data"] * 8 + ["tick"])
