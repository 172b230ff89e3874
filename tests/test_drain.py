"""Topologies that run until stopped, without Spark: ``drain()`` ends the spouts' streams
and fires the windows, ``wait(timeout)`` leaves a live topology running, ``kill(wait_secs)``
deactivates first."""

from __future__ import annotations

import time

import pytest

from tests._util import until
from tests.components import RelayBolt, SeqSpout, WindowSpanBolt
from topology import CollectorBolt, Count, IterableSpout, TopologyBuilder

pytestmark = pytest.mark.ray


@pytest.mark.parametrize("own_drain", [True, False], ids=["spout-drains", "executor-ends"])
def test_drain_ends_a_live_topology_and_fires_every_window(cluster, name, own_drain):
    """An endless source (an IterableSpout with its own ``drain``, and a spout without
    one, which the executor ends) drains: its stream ends, every count window holding a
    tuple fires, the topology completes; each emitted value is in one window."""
    spout = (IterableSpout(factory=_endless, fields=("value",), msg_ids=True) if own_drain
             else SeqSpout(10**9))
    field = "value" if own_drain else "seq"
    b = TopologyBuilder()
    b.set_spout("src", spout)
    b.set_bolt("relay", RelayBolt(spout.outputs)).shuffle_grouping("src")
    b.set_bolt("win", WindowSpanBolt(field).with_tumbling_window(Count(7))
               ).shuffle_grouping("relay")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("win")
    # small queues: what a drain still delivers is what they hold
    handle = cluster.submit_topology(name, {"topology.executor.receive.buffer.size": 64},
                                     b.create_topology())
    try:
        until(lambda: len(handle.collected("sink")) >= 3, 60, "three windows")
        assert not handle.wait(0.2)  # live: wait returns False and leaves it running
        assert handle.drain(60)
        windows = [v for *_, v in handle.collected("sink")]
        emitted = handle.stats().total("src", "emitted")
    finally:
        cluster.kill_topology(name)
    values = sorted(x for w in windows for x in w[3])
    assert values == list(range(len(values))) and len(values) == emitted


def _endless():
    import itertools

    return itertools.count()


def test_kill_with_wait_deactivates_then_waits_then_kills(cluster, name):
    import threading

    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    handle = cluster.submit_topology(name, {}, b.create_topology())
    until(lambda: handle.stats().total("src", "emitted") > 0, 60, "emits")
    t0 = time.monotonic()
    killer = threading.Thread(target=handle.kill, kwargs={"wait_secs": 3.0})
    killer.start()
    until(lambda: not handle.stats().component("src")[0].active, 2.5,
          "the spout deactivated during the wait")
    killer.join(60)
    cluster.topologies.pop(name, None)
    assert time.monotonic() - t0 >= 3.0 and handle._killed
