"""Byte-bounded queues, sojourn times and load shedding, without Ray."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from actors._errors import LogThrottle
from actors._inbound import Inbound
from backpressure import (
    SITE_ARRIVAL,
    SITE_QUEUE,
    JCQueue,
    LoadShedder,
    ParkWaitStrategy,
    QueueInterrupted,
    Storm2Policy,
)
from cluster._plan import plan
from tests.components import CountBolt, SeqSpout
from topology import ConfigError, TopologyBuilder, make_config


def _drain(q: JCQueue) -> list:
    out: list = []
    q.consume(out.append)
    return out


# -- byte bounds ------------------------------------------------------------------------

def test_a_queue_is_full_at_the_byte_bound_before_the_count_bound():
    q = JCQueue("b", 1000, capacity_bytes=1000)
    assert q.try_fill(list(range(10)), 600) == 10  # 60 bytes each
    assert q.queued_bytes == 600
    # 400 bytes free: 4 of 10 elements of 100 bytes fit
    assert q.try_fill(list(range(10, 20)), 1000) == 4
    assert q.queued_bytes == 1000 and q.is_full() and q.size() == 14
    assert q.try_fill([99], 1) == 0
    assert _drain(q) == list(range(14))
    assert q.queued_bytes == 0 and not q.is_full()


def test_a_tuple_larger_than_the_bound_enters_only_an_empty_queue_and_then_alone():
    q = JCQueue("big", 1000, capacity_bytes=100)
    assert q.try_fill(["small"], 10) == 1
    assert q.try_fill(["huge"], 500) == 0  # not beside anything
    assert _drain(q) == ["small"]
    assert q.try_fill(["huge"], 500) == 1  # alone into the empty queue
    assert q.queued_bytes == 500
    assert q.try_fill(["tiny"], 1) == 0  # nothing beside it while it is there
    assert _drain(q) == ["huge"]
    assert q.try_fill(["tiny"], 1) == 1


def test_bytes_of_a_partly_consumed_insert_count_until_its_last_element_leaves():
    q = JCQueue("p", 1000, capacity_bytes=10_000)
    q.try_fill([1, 2, 3, 4], 400)
    got: list = []
    q.consume(got.append, exit_cond=lambda: len(got) < 2)
    assert got == [1, 2] and q.queued_bytes == 400  # reads high, never low
    q.consume(got.append)
    assert q.queued_bytes == 0


def test_publish_all_waits_on_the_byte_bound():
    q = JCQueue("w", 1000, capacity_bytes=100, bp_wait=ParkWaitStrategy(0))
    q.try_fill(["a"], 100)
    stop = {"n": 0}

    def interrupted() -> bool:
        stop["n"] += 1
        return stop["n"] > 50

    with pytest.raises(QueueInterrupted):
        q.publish_all(["b", "c"], interrupted, nbytes=40)
    _drain(q)
    q.publish_all(["b", "c"], nbytes=40)
    assert _drain(q) == ["b", "c"]


def test_the_overflow_has_a_byte_limit_and_markers_pass_it():
    q = JCQueue("o", 2, overflow_limit_bytes=100)
    assert q.publish_remote(list(range(10)), nbytes=200) == (5, 3)  # 2 in, 5 overflow
    assert q.overflow_bytes == 100
    assert q.dropped_messages == 3
    assert q.publish_remote(["eos"], limit=0, nbytes=50) == (1, 0)
    assert _drain(q) == [0, 1, 2, 3, 4, 5, 6, "eos"]


def test_metrics_report_bytes():
    q = JCQueue("m", 10, capacity_bytes=1000)
    q.try_fill([1, 2], 300)
    m = q.metrics()
    assert (m.capacity_bytes, m.population_bytes, m.overflow_bytes) == (1000, 300, 0)


def test_metrics_never_show_bytes_beyond_the_bound_without_the_element():
    """A producer and a consumer move one oversized element (admitted alone into the empty
    queue) in and out while another thread samples metrics: every sample that holds more
    than the byte bound holds exactly that one element."""
    q = JCQueue("r", 100, capacity_bytes=1000)
    stop = time.monotonic() + 1.0
    bad = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    def produce():
        while time.monotonic() < stop:
            q.try_fill(["big"], 5000)
    def sample():
        while time.monotonic() < stop:
            m = q.metrics()
            if m.population_bytes > 1000 and m.population != 1:
                bad.append((m.population, m.population_bytes))
    threads = [threading.Thread(target=produce), threading.Thread(target=sample)]
    try:
        for t in threads:
            t.start()
        while time.monotonic() < stop:
            q.consume(lambda el: None)
    finally:
        for t in threads:
            t.join()
        sys.setswitchinterval(old)
    assert not bad, bad[:5]


# -- sojourn times ----------------------------------------------------------------------

def test_timed_consume_gives_each_element_its_insert_time():
    q = JCQueue("t", 100)
    t0 = time.monotonic()
    q.try_fill(["a", "b"])
    time.sleep(0.02)
    t1 = time.monotonic()
    q.try_fill(["c"])
    got: list = []
    q.consume(lambda el, at: got.append((el, at)), timed=True)
    assert [el for el, _ in got] == ["a", "b", "c"]
    assert t0 <= got[0][1] == got[1][1] < t1 <= got[2][1]


def test_timed_consume_covers_the_overflow_in_order():
    q = JCQueue("to", 2)
    q.publish_remote([1, 2, 3, 4])
    got: list = []
    q.consume(lambda el, at: got.append(el), timed=True)
    assert got == [1, 2, 3, 4]
    assert q.queued_bytes == 0 and q.overflow_bytes == 0


def test_an_expired_insert_goes_to_take_whole_and_a_young_one_element_by_element():
    q = JCQueue("te", 100)
    q.try_fill(["a", "b", "c"])
    time.sleep(0.03)
    q.try_fill(["d", "e"])
    runs: list = []
    one: list = []
    n = q.consume(lambda el, at: one.append(el), timed=True,
                  expired=(0.02, lambda run, at: runs.append(run)))
    assert n == 5 and runs == [["a", "b", "c"]] and one == ["d", "e"]
    assert q.size() == 0 and q.queued_bytes == 0


def test_a_shedding_bolt_sheds_an_expired_frame_in_one_pass_and_keeps_its_markers():
    from actors import make_executor
    from actors._streams import DRAINED_STREAM

    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("count", CountBolt()).shuffle_grouping("src")
    conf = {"topology.acker.executors": 0, "topology.backpressure.overload": "shed",
            "topology.shed.latency.target.ms": 10}
    core = make_executor("t", b.create_topology(), conf, 1, {1: 0, 2: 0})
    core.obj.prepare(core.conf, core.context, core.collector)
    data = next(i for i, st in enumerate(core.streams) if st[0] == "src")
    frame = [(2, data, [i]) for i in range(5)] + [(2, DRAINED_STREAM, None)]
    assert core.queue.try_fill(frame) == 6
    time.sleep(0.02)  # past the 10 ms target
    core.queue.consume(core.handle_timed, None, True,
                       (core.shedder.target_s, core.shed_expired))
    assert core.executed == 0 and core.shedder.totals[SITE_QUEUE] == 5
    assert core.shedder.by_stream() == {"src:default": {SITE_QUEUE: 5}}
    assert core.upstream_drained == {2}  # the marker was handled, not shed


# -- the shedder ------------------------------------------------------------------------

def test_the_shedder_sheds_past_its_target_and_counts_per_stream_and_site():
    s = LoadShedder(0.1, log_interval_s=1.0)
    assert not s.on_dequeue(0.05)
    assert s.on_dequeue(0.2)
    s.count("spout:default", SITE_QUEUE)
    s.count("spout:default", SITE_ARRIVAL, 5)
    s.count("other:s", SITE_QUEUE, 2)
    assert s.total == 8
    assert s.by_stream() == {"spout:default": {"queue": 1, "arrival": 5},
                             "other:s": {"queue": 2}}
    line = s.interval_report(10.0)
    assert "shed 8 tuples" in line and "100 ms" in line and "200 ms" in line
    assert s.interval_report(10.5) is None  # once per interval
    s.count("spout:default", SITE_QUEUE)
    assert s.interval_report(10.9) is None
    assert "shed 1 tuples" in s.interval_report(11.0)
    assert s.interval_report(20.0) is None  # nothing new


def test_a_shedder_target_must_be_positive():
    with pytest.raises(ValueError):
        LoadShedder(0)


# -- the receiving side of a shedding task ----------------------------------------------

def _inbound(q: JCQueue, shedder: LoadShedder | None) -> Inbound:
    return Inbound(7, "slow", q, [1, 2], [], 100, False, Storm2Policy(7, q),
                   LogThrottle(10), lambda: False, lambda: False, shedder,
                   lambda s: f"spout:s{s}")


@pytest.mark.parametrize("remote", [True, False])
def test_a_shedding_task_sheds_what_finds_its_queue_full_and_never_blocks(remote):
    q = JCQueue("slow:7", 4)
    shedder = LoadShedder(0.1)
    inb = _inbound(q, shedder)
    items = [[0, [i]] for i in range(6)] + [[1, [9]], [-9, None], [-1, None]]
    ack, report = inb.accept_frame(1, 0, items, remote, 0, 900)
    assert ack == 0 and report is None  # no backlog report: shedding never holds senders
    assert shedder.by_stream() == {"spout:s0": {"arrival": 2}, "spout:s1": {"arrival": 1}}
    got = _drain(q)
    assert [el[2] for el in got if el[1] >= 0] == [[0], [1], [2], [3]]
    assert [el[1] for el in got if el[1] < 0] == [-9, -1]  # the markers are never shed
    assert shedder.total + 4 == 7


def test_a_blocking_task_puts_remote_arrivals_into_the_overflow():
    q = JCQueue("b:7", 4)
    inb = _inbound(q, None)
    _, report = inb.accept_frame(1, 0, [[0, [i]] for i in range(6)], True, 0, 600)
    assert q.size() == 4 and q.overflow_count() == 2 and report is not None


# -- config and plan --------------------------------------------------------------------

@pytest.mark.parametrize("key", ["topology.shed.latency.target.ms",
                                 "topology.executor.receive.buffer.bytes",
                                 "topology.executor.overflow.limit.bytes"])
@pytest.mark.parametrize("value", [0, -5])
def test_a_non_positive_target_or_byte_bound_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_config({key: value})


def _shedding_topology(per_component: bool):
    b = TopologyBuilder()
    b.set_spout("numbers", SeqSpout(10))
    d = b.set_bolt("count", CountBolt()).shuffle_grouping("numbers")
    if per_component:
        d.add_configuration("topology.backpressure.overload", "shed")
    return b.create_topology()


@pytest.mark.parametrize("per_component", [False, True])
def test_shedding_with_acking_on_is_refused_at_submit(per_component):
    conf = {} if per_component else {"topology.backpressure.overload": "shed"}
    with pytest.raises(ConfigError, match="count.*acking off"):
        plan(_shedding_topology(per_component), conf)
    p = plan(_shedding_topology(per_component), {**conf, "topology.acker.executors": 0})
    assert not p.acker_tasks


def test_stats_views_show_what_was_shed_and_the_queued_bytes():
    from actors._stats import TaskStats
    from cluster._stats import TopologyStats, shed_lines, stats_html

    tasks = [TaskStats(component="sink", task=t, worker=0, state="running", shed=s,
                       shed_by_stream={"live:default": {"queue": s - 1, "arrival": 1}},
                       queued_bytes=100, overflow_bytes=20)
             for t, s in ((1, 5), (2, 7))]
    tasks.append(TaskStats(component="live", task=0, worker=0, state="running"))
    st = TopologyStats("t", tasks, False, [], {})
    row = {r["component"]: r for r in st.rows()}
    assert row["sink"]["shed"] == 12 and row["live"]["shed"] == 0
    assert row["sink"]["queued_bytes"] == 240
    assert shed_lines(st) == ["shed sink: 12 (live:default 2 at arrival + 10 at queue)"]
    assert "shed sink: 12" in st.summary() and "shed sink: 12" in stats_html(st)
