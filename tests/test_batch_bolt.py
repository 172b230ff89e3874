"""BatchBolt: ``execute_batch`` once per batch taken from the receive queue, with acking per
input tuple (acked after the batch, failed when it raises)."""

from __future__ import annotations

import pytest

from tests.components import SeqSpout, SumBatchBolt
from topology import CollectorBolt, IterableSpout, TopologyBuilder

pytestmark = pytest.mark.ray


def test_batches_are_capped_and_every_tuple_is_executed_once(cluster, name):
    n = 20_000
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(n))
    b.set_bolt("batch", SumBatchBolt(max_batch_size=100)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("batch")
    handle = cluster.submit_topology(name, {"topology.acker.executors": 0},
                                     b.create_topology())
    try:
        assert handle.wait(120)
        (sizes,) = handle.task_state("batch", "sizes").values()
        assert sum(sizes) == n and max(sizes) <= 100
        assert sum(sizes) / len(sizes) >= 10  # batches, not single tuples
        got = sorted(v[0] for *_, v in handle.collected("sink"))
        assert got == list(range(n))
        s = handle.stats().component("batch")[0]
        assert s.executed == n
    finally:
        cluster.kill_topology(name)


def test_a_batch_that_raises_fails_its_tuples_and_they_replay(cluster, name):
    n = 3000
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(range(n), fields=("seq",), msg_ids=True))
    b.set_bolt("batch", SumBatchBolt(max_batch_size=50, fail_at=1234)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("batch")
    handle = cluster.submit_topology(name, {"topology.acker.executors": 1},
                                     b.create_topology())
    try:
        assert handle.wait(120), handle.stats().summary()
        (acked,) = handle.task_state("src", "acked_ids").values()
        (failed,) = handle.task_state("src", "failed_ids").values()
        assert sorted(acked) == list(range(n))
        assert 1234 in failed and 1 <= len(failed) <= 50  # the failed batch only
        got = sorted(v[0] for *_, v in handle.collected("sink"))
        assert got == list(range(n))  # the failed batch emitted nothing, then replayed
        s = handle.stats().component("batch")[0]
        assert s.error_count == 1 and s.failed == len(failed)
    finally:
        cluster.kill_topology(name)
