"""At-least-once: Storm's TopologyIntegrationTest acking scenarios (testAcking,
testAckBranching, testAckingSelfAnchor, testTimeout, testResetTimeout), ported to real time;
``topology.max.spout.pending``; replay by the built-in spout; user errors fail and replay."""

from __future__ import annotations

import pytest

from tests._util import until
from tests.components import (
    AckEveryOtherBolt,
    DropOddBolt,
    FailOnceBolt,
    HoldBolt,
    JoinBolt,
    PassBolt,
    PingBolt,
    PongBolt,
    ResetTimeoutBolt,
    SelfAnchorBolt,
    SeqSpout,
    TickSpout,
    TimedSpout,
)
from tests.conftest import SAME_NODE_LAYOUTS
from topology import ACKER_ID, CollectorBolt, IterableSpout, TopologyBuilder

pytestmark = pytest.mark.ray

#: the two acker placements: Storm's acker executors (the default), and the spout tasks
#: tracking their own trees (topology.acker.in.spouts); every scenario must hold in both
IN_SPOUTS = {"topology.acker.in.spouts": True}
ACKING = pytest.mark.parametrize("acking", [{}, IN_SPOUTS], ids=["ackers", "in_spouts"])


def _finish(cluster, name, builder, conf=None, timeout=120):
    """Run to completion; return (stats, handle) with the handle still alive."""
    handle = cluster.submit_topology(name, conf or {}, builder.create_topology())
    assert handle.wait(timeout), handle.stats().summary()
    return handle.stats(), handle


# on this node: an ack from another worker takes the transfer path test_runtime's order
# test and test_workers already cross between nodes
@ACKING
@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_acking_every_tuple_tree_completes(cluster, workers, name, acking):
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout(300))
    b.set_bolt("mid", PassBolt(), 2).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("mid")
    stats, handle = _finish(cluster, name, b, workers.conf(acking))
    try:
        acked = handle.task_state("src", "acked_after")
        failed = handle.task_state("src", "failed_after")
    finally:
        cluster.kill_topology(name)
    (acked,), (failed,) = acked.values(), failed.values()
    assert sorted(acked) == list(range(300)) and failed == {}
    spout = stats.component("src")[0]
    assert spout.acked == 300 and spout.pending_tuples == 0
    assert len(spout.complete_latencies_ms) == 300
    if acking:  # the spout was the acker: no acker task, no acking message from it
        assert ACKER_ID not in handle.topology.components and spout.unknown_acks == 0
    else:
        # one acker per worker by default
        assert len(stats.component(ACKER_ID)) == workers.count
        # each tree went through the acker, or was one ack a bolt completed itself
        completed = stats.total("mid", "completed_trees") + stats.total("sink",
                                                                        "completed_trees")
        assert stats.total(ACKER_ID, "acked") + completed == 300 and completed > 0


@ACKING
def test_ack_branching_waits_for_every_branch(cluster, name, acking):
    """A diamond: each tuple reaches the join twice. Even seqs complete; for odd seqs one
    branch drops its copy, so the join holds the other and the tree never completes: those
    time out (Storm's testAckBranching, where 0 acks come before the second branch)."""
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout(20))
    b.set_bolt("a", PassBolt()).shuffle_grouping("src")
    b.set_bolt("b", DropOddBolt()).shuffle_grouping("src")
    b.set_bolt("join", JoinBolt(2)).shuffle_grouping("a").shuffle_grouping("b")
    stats, handle = _finish(cluster, name, b, {"topology.message.timeout.secs": 3, **acking})
    try:
        (acked,) = handle.task_state("src", "acked_after").values()
        (failed,) = handle.task_state("src", "failed_after").values()
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == list(range(0, 20, 2))
    assert sorted(failed) == list(range(1, 20, 2))
    assert all(3.0 <= s < 5.0 for s in failed.values()), failed
    assert stats.component("src")[0].timeouts == 10


@ACKING
def test_acking_self_anchor(cluster, name, acking):
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout(50))
    b.set_bolt("twice", SelfAnchorBolt()).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("twice")
    stats, handle = _finish(cluster, name, b, acking)
    try:
        (acked,) = handle.task_state("src", "acked_after").values()
        assert len(handle.collected("sink")) == 100
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == list(range(50))


@ACKING
def test_timeout_fails_what_is_not_acked(cluster, name, acking):
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout(10))
    b.set_bolt("half", AckEveryOtherBolt()).shuffle_grouping("src")
    stats, handle = _finish(cluster, name, b, {"topology.message.timeout.secs": 2, **acking})
    try:
        (acked,) = handle.task_state("src", "acked_after").values()
        (failed,) = handle.task_state("src", "failed_after").values()
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == [0, 2, 4, 6, 8] and all(s < 2.0 for s in acked.values())
    assert sorted(failed) == [1, 3, 5, 7, 9]
    # not before the timeout, and within the check period after it
    assert all(2.0 <= s < 3.5 for s in failed.values()), failed


@ACKING
def test_reset_timeout_keeps_a_tuple_alive(cluster, name, acking):
    timeout = 2
    b = TopologyBuilder()
    b.set_spout("src", TickSpout(tick_s=0.2))
    b.set_bolt("hold", ResetTimeoutBolt(hold_s=2.5 * timeout)).shuffle_grouping(
        "src").shuffle_grouping("src", "tick")
    stats, handle = _finish(cluster, name, b,
                            {"topology.message.timeout.secs": timeout, **acking})
    try:
        (acked,) = handle.task_state("src", "acked_after").values()
        (failed,) = handle.task_state("src", "failed_after").values()
        (resets,) = handle.task_state("hold", "resets").values()
    finally:
        cluster.kill_topology(name)
    assert list(acked) == [0] and acked[0] >= 2.5 * timeout, (acked, failed, resets)
    assert list(failed) == [1] and timeout <= failed[1] < timeout + 1.5
    assert resets > 5


@ACKING
def test_max_spout_pending_caps_tuples_in_flight(cluster, name, acking):
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(range(1000), fields=("seq",), msg_ids=True))
    b.set_bolt("hold", HoldBolt()).shuffle_grouping("src")
    handle = cluster.submit_topology(name, {"topology.max.spout.pending": 10, **acking},
                                     b.create_topology())
    try:
        until(lambda: handle.stats().component("src")[0].pending_tuples == 10, 30,
               "10 tuples pending")
        idle_ms = []

        def capped_and_idle():
            spout = handle.stats().component("src")[0]
            # emitted = acked + failed + pending, and nothing is acked or failed here
            assert spout.emitted == 10 and spout.pending_tuples == 10
            assert spout.acked == 0 and spout.failed == 0
            idle_ms.append(spout.idle_wait_ms)
            return idle_ms[-1] - idle_ms[0] > 400

        # at the cap the spout waits (idle_wait_ms), and stays at the cap on every look
        # while it does so for 0.4 s more
        until(capped_and_idle, 30, "the spout idle at the cap for 0.4 s")
        (held,) = handle.task_state("hold", "held").values()
        assert held is not None
    finally:
        cluster.kill_topology(name)


@ACKING
@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_failed_tuples_replay_until_acked(cluster, workers, name, acking):
    """Execute raising fails the tuple; the iterable spout emits it again; every item
    reaches the sink (at least once) and every msg_id is acked exactly once. With 3
    workers the spout, the failing bolt and the sink are each in a worker of their own, so
    every fail and every replay crosses workers."""
    n = 400
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, f"k{i % 7}") for i in range(n)],
                                     fields=("seq", "key"), msg_ids=True))
    b.set_bolt("flaky", FailOnceBolt(every=10)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("flaky")
    stats, handle = _finish(cluster, name, b, workers.conf(acking))
    try:
        (acked,) = handle.task_state("src", "acked_ids").values()
        (failed,) = handle.task_state("src", "failed_ids").values()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == list(range(n))
    assert sorted(failed) == list(range(0, n, 10))
    assert sorted({v[0] for *_, v in got}) == list(range(n))
    assert stats.total("flaky", "error_count") == n // 10


def test_without_ackers_spout_tuples_are_acked_at_emit(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout(100))
    b.set_bolt("half", AckEveryOtherBolt()).shuffle_grouping("src")
    stats, handle = _finish(cluster, name, b, {"topology.acker.executors": 0})
    try:
        (acked,) = handle.task_state("src", "acked_after").values()
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == list(range(100))
    assert ACKER_ID not in handle.topology.components


def test_untracked_emits_need_no_acks(cluster, name):
    """A spout without msg ids completes at once with ackers present (nothing pending)."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(500))
    b.set_bolt("half", AckEveryOtherBolt()).shuffle_grouping("src")
    stats, handle = _finish(cluster, name, b)
    cluster.kill_topology(name)
    assert stats.component("src")[0].pending_tuples == 0
    assert stats.total(ACKER_ID, "acked") == 0


# conftest's worker layouts, chosen: the cycle on one worker, and with its back edge
# between two workers under both acker placements (three spread workers would send that edge
# through the same transfer path once more, at this test's cost)
@pytest.mark.parametrize(("workers", "acking"),
                         [("1worker", {}), ("2workers", {}), ("2workers", IN_SPOUTS)],
                         ids=["1worker-ackers", "2workers-ackers", "2workers-in_spouts"],
                         indirect=["workers"])
def test_bolt_cycle_under_backpressure_completes_with_bounded_memory(cluster, workers, name,
                                                                     acking):
    """ping ↔ pong, each tuple going round 5 times, with queues of 32 tuples: in Storm this
    deadlocks (STORM-3637: both bolts blocked on each other's full queue). Here the edge
    that closes the cycle never blocks; its arrivals are capped (the receive buffer size
    here), and what is dropped there is failed and replayed, so every tuple ends."""
    n, hops, cap = 600, 5, 32
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, 0) for i in range(n)], fields=("seq", "n"),
                                     msg_ids=True))
    b.set_bolt("ping", PingBolt(hops), 2).shuffle_grouping("src").shuffle_grouping("pong")
    b.set_bolt("pong", PongBolt(), 2).shuffle_grouping("ping")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("ping", "done")
    topo = b.create_topology()
    assert topo.back_edges == {("pong", "ping")}
    conf = workers.conf({"topology.executor.receive.buffer.size": cap,
                         "topology.producer.batch.size": 8,
                         "topology.message.timeout.secs": 20, **acking})
    handle = cluster.submit_topology(name, conf, topo)
    samples = []
    try:
        while not handle.wait(0.3):
            samples.append(handle.stats())
            assert len(samples) < 600, "the cycle did not finish"
        final = handle.stats()
        (acked,) = handle.task_state("src", "acked_ids").values()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert sorted(acked) == list(range(n))
    assert sorted({v[0] for *_, v in got}) == list(range(n))
    assert all(v[1] == hops for *_, v in got)
    for s in samples:  # memory: every queue and every back-edge overflow within its bound
        for t in s.component("ping"):
            # the cap, plus (two workers) forward arrivals during a halt-lag
            assert t.queue_population <= cap and t.overflow <= cap + 64
    assert final.complete


def test_spouts_as_ackers_route_each_ack_to_the_spout_task_that_emitted(cluster, name):
    """topology.acker.in.spouts with three spout tasks of two components over two workers:
    every bolt acks straight to the task named by each root id, so every tree completes at
    its own spout and no ack reaches a task that does not know its root."""
    n = 300
    b = TopologyBuilder()
    b.set_spout("items", IterableSpout([(i, f"k{i % 5}") for i in range(n)],
                                       fields=("seq", "key"), msg_ids=True), 2)
    b.set_spout("timed", TimedSpout(100))
    b.set_bolt("mid", PassBolt(), 2).shuffle_grouping("items").shuffle_grouping("timed")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("mid")
    stats, handle = _finish(cluster, name, b, {"topology.workers": 2, **IN_SPOUTS})
    try:
        acked = handle.task_state("items", "acked_ids")
        (timed,) = handle.task_state("timed", "acked_after").values()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert sorted(i for ids in acked.values() for i in ids) == list(range(n))
    assert all(ids for ids in acked.values())  # both items tasks had trees of their own
    assert sorted(timed) == list(range(100)) and len(got) == n + 100
    for c in ("items", "timed"):
        for t in stats.component(c):
            assert t.unknown_acks == 0 and t.pending_tuples == 0
            assert t.failed == 0
    # some acks crossed workers (through the transfer actors)
    spout_w = {t.worker for c in ("items", "timed") for t in stats.component(c)}
    bolt_w = {t.worker for t in stats.component("mid")}
    assert spout_w | bolt_w == {0, 1} and len(spout_w) * len(bolt_w) > 1
