"""The flow-control policies on running topologies (Ray): the contract every policy keeps
(nothing lost, order within one upstream, queues within their bounds, cycles complete)
and each policy's own behaviour."""

from __future__ import annotations

import pytest

import tests.test_acking as acking_scenarios
from tests._util import until
from tests.components import PassBolt, PhasedBolt, SeqSpout
from tests.conftest import Workers
from topology import CollectorBolt, TopologyBuilder

pytestmark = pytest.mark.ray

POLICIES = ["storm2", "watermark", "nak", "debloat"]


def _sample_until_done(handle, timeout_s: float, every: float = 0.2) -> list:
    samples = []
    while not handle.wait(every):
        samples.append(handle.stats())
        assert len(samples) * every < timeout_s, "the topology did not complete"
    return samples


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_loses_nothing_keeps_order_and_bounds_its_queues(cluster, name, policy):
    """A consumer ten times slower than its spout, over two workers: every tuple arrives,
    in order, and no receive queue ever holds more than its bound."""
    n, cap = 2000, 64
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(n))
    b.set_bolt("slow", PassBolt(delay_s=0.001)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("slow")
    conf = {"topology.workers": 2, "topology.acker.executors": 0,
            "topology.backpressure.policy": policy,
            "topology.executor.receive.buffer.size": cap, "topology.producer.batch.size": 16,
            "topology.metrics.interval.secs": 0.2}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        samples = _sample_until_done(handle, 120)
        final = handle.stats()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert [v[0] for *_, v in got] == list(range(n))
    assert samples
    for s in samples:
        for t in s.tasks:
            assert t.queue_population <= cap
            assert t.backpressure_policy == policy
    assert final.complete


@pytest.mark.parametrize("policy", ["watermark", "nak", "debloat"])
def test_every_policy_completes_the_bolt_cycle(cluster, name, policy):
    """ping ↔ pong with acking over two workers (tests/test_acking.py's scenario) under
    each policy: no deadlock, every tuple acked, memory bounded."""
    acking_scenarios.test_bolt_cycle_under_backpressure_completes_with_bounded_memory(
        cluster, Workers(2), name, {"topology.backpressure.policy": policy})


def _submit_two_pipelines(cluster, name, busy_n: int, slow_delay_s: float):
    """Under the watermark policy, two independent pipelines: "busy" (``busy_n`` tuples)
    into "slow" (``slow_delay_s`` per tuple, small queue: it passes its high watermark) and
    "free" (endless: it is running whenever the test looks) into "fast", an idle bolt.
    Returns the handle."""
    b = TopologyBuilder()
    b.set_spout("busy", SeqSpout(busy_n))
    b.set_bolt("slow", PassBolt(delay_s=slow_delay_s)).shuffle_grouping("busy")
    b.set_spout("free", SeqSpout(10**12))
    b.set_bolt("fast", PassBolt()).shuffle_grouping("free")
    conf = {"topology.acker.executors": 0, "topology.backpressure.policy": "watermark",
            "topology.executor.receive.buffer.size": 200, "topology.producer.batch.size": 10}
    return cluster.submit_topology(name, conf, b.create_topology())


def test_watermark_holds_every_spout_while_any_task_is_flagged(cluster, name):
    """Two independent pipelines; only "slow"'s queue passes its high watermark. The other
    spout ("free"), whose own bolt is idle, is held while "slow" is flagged (STORM-886's
    topology-wide throttle), and released once "slow" drains below the low mark."""
    handle = _submit_two_pipelines(cluster, name, 1500, 0.002)
    try:
        def throttled():
            s = handle.stats()
            free = s.component("free")[0]
            return (s if free.policy_state.get("throttled")
                    and s.component("slow")[0].policy_state.get("flagged") else None)

        held = until(throttled, 30, "the free spout throttled while slow is flagged", 0.02)
        # its own bolt is far from any watermark: only the topology-wide flag holds it
        assert held.component("fast")[0].queue_pct_full < 0.4
        assert not held.component("fast")[0].policy_state["flagged"]
        at_hold = held.component("free")[0].emitted

        def released():
            s = handle.stats()
            free, slow = s.component("free")[0], s.component("slow")[0]
            return (s if slow.state == "done" and not free.policy_state["throttled"]
                    and free.emitted > at_hold else None)

        # "busy" ends, "slow" drains below its low mark and lowers the flag
        final = until(released, 120, "the free spout released once slow drained", 0.1)
    finally:
        cluster.kill_topology(name)
    assert final.component("slow")[0].control_sent >= 2  # raised, and lowered again
    assert final.component("free")[0].control_received >= 2


def test_watermark_releases_the_spouts_when_a_flagged_task_restarts(cluster, name):
    """A flagged task is killed (SIGKILL) while it holds every spout: its restarted
    instance starts with an empty queue and no flag, so the coordinator drops the dead
    flag and releases the spouts (the throttle would otherwise stay on for ever: the held
    spouts send nothing that could raise and lower the flag again)."""
    import os
    import signal

    import ray

    handle = _submit_two_pipelines(cluster, name, 3000, 0.005)
    try:
        def throttled():
            s = handle.stats()
            return (s if s.component("free")[0].policy_state.get("throttled")
                    and s.component("slow")[0].policy_state.get("flagged") else None)

        held = until(throttled, 30, "the spouts throttled while slow is flagged", 0.02)
        at_hold = held.component("free")[0].emitted
        slow = handle.actors[handle.topology.component_tasks["slow"][0]]
        os.kill(ray.get(slow.pid.remote(), timeout=30), signal.SIGKILL)

        def released():
            s = handle.stats()
            free = s.component("free")[0]
            return (s if s.component("slow")[0].restarted
                    and not free.policy_state["throttled"] and free.emitted > at_hold
                    else None)

        until(released, 120, "the free spout released after slow restarted", 0.1)
    finally:
        cluster.kill_topology(name)


def test_nak_cuts_the_spout_rate_under_overload_raises_it_after_and_is_silent_when_idle(
        cluster, name):
    """A consumer slow for its first 1,500 tuples, then fast: the consumer sends NAKs
    while its queue is past the first level, the spout's rate limit is cut and then rises;
    a second, never-overloaded pipeline sends no signal at all."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(60_000))
    b.set_bolt("phased", PhasedBolt([(1500, 0.002)])).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt(max_tuples=10**6)).shuffle_grouping("phased")
    b.set_spout("idle", SeqSpout(50))
    b.set_bolt("quiet", CollectorBolt()).shuffle_grouping("idle")
    conf = {"topology.acker.executors": 0, "topology.backpressure.policy": "nak",
            "topology.executor.receive.buffer.size": 400, "topology.producer.batch.size": 10}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        samples = _sample_until_done(handle, 120, every=0.05)
        final = handle.stats()
    finally:
        cluster.kill_topology(name)
    limits = [s.component("src")[0].policy_state.get("rate_limit") for s in samples]
    cut = [x for x in limits if x is not None]
    assert cut, "the spout's rate was never limited"
    low = cut.index(min(cut))
    assert max(cut[low:]) > min(cut)  # raised again after its lowest point
    # lifted, or still rising at the end: the lift (at four times the measured rate) needs
    # the pipeline to outrun the limit, which a loaded host may not allow before the spout
    # ends (the unit test checks the lift on a test clock)
    assert limits[-1] is None or limits[-1] > min(cut)
    assert final.component("phased")[0].control_sent > 0
    assert final.component("src")[0].control_received > 0
    assert final.component("quiet")[0].control_sent == 0  # idle: no signal
    assert final.component("idle")[0].control_received == 0
    assert final.component("sink")[0].executed == 60_000


def test_debloat_shrinks_the_bound_while_the_consumer_is_slow_and_grows_it_after(
        cluster, name):
    """A consumer fast, then 2 ms per tuple, then fast again: its queue's admission bound
    (tuples it drains in the 1 s target) falls in the slow phase and rises after."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(80_000))
    b.set_bolt("phased", PhasedBolt([(20_000, 0), (1_500, 0.002)])).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt(max_tuples=10**6)).shuffle_grouping("phased")
    conf = {"topology.acker.executors": 0, "topology.backpressure.policy": "debloat",
            "topology.metrics.interval.secs": 0.2, "topology.producer.batch.size": 100}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        samples = _sample_until_done(handle, 180, every=0.1)
    finally:
        cluster.kill_topology(name)
    rows = [(s.component("phased")[0].executed,
             s.component("phased")[0].policy_state.get("inflight_bound")) for s in samples]
    slow = [b for n, b in rows if 20_500 <= n <= 21_500]
    after = [b for n, b in rows if n > 21_500]
    assert slow and after
    assert min(slow) < 32768 / 4  # 500 tuples/s busy: far below the configured 32,768
    assert max(after) > 2 * min(slow)  # grows again once the consumer is fast
    for s in samples:
        assert s.component("phased")[0].queue_population <= 32768
