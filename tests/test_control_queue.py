"""The control receive queue (``topology.executor.control.receive.buffer.size``) without
Ray: drained before the data, bounded, and never the way of an end of stream, DRAINED or
a checkpoint barrier."""

from __future__ import annotations

import pytest

from actors import make_executor
from actors._streams import ACK_ACK, BARRIER_STREAM, DRAINED_STREAM, EOS_STREAM
from backpressure import JCQueue
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder


def test_consume_drains_the_control_queue_first_and_it_is_bounded():
    q = JCQueue("q", 4, control_capacity=2)
    assert q.try_fill(["d1", "d2"]) == 2
    assert q.fill_control(["c1", "c2", "c3"]) == 2  # bounded: the third is the caller's
    assert q.size() == 4 and q.control_size() == 2 and q.metrics().control == 2
    got: list = []
    assert q.consume(got.append) == 4 and got == ["c1", "c2", "d1", "d2"]
    assert not JCQueue("q", 4).has_control and JCQueue("q", 4).fill_control(["c"]) == 0


def _bolt(**conf):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    core = make_executor("t", b.create_topology(), {
        "topology.executor.control.receive.buffer.size": 8, **conf}, 1, {1: 0, 2: 0})
    data = next(i for i, s in enumerate(core.streams) if s[0] == "src")
    return core, data


@pytest.mark.parametrize("path", ["local", "remote", "shed"])
def test_acking_messages_go_first_and_markers_stay_behind_their_data(path):
    conf = {"topology.backpressure.overload": "shed"} if path == "shed" else {}
    core, data = _bolt(**conf)
    ack1, ack2 = (ACK_ACK, [11, 1]), (ACK_ACK, [12, 2])
    first = [(data, [0, "a"]), (DRAINED_STREAM, None), (BARRIER_STREAM, [1])]
    second = [ack1, (data, [1, "b"]), (BARRIER_STREAM, [2]), ack2, (EOS_STREAM, None)]
    remote = path == "remote"
    core.inbound.accept_frame(2, 0, first, remote)
    core.inbound.accept_frame(2, 1, second, remote)
    assert core.queue.control_size() == 1  # the acking message that opened a frame
    got: list = []
    core.queue.consume(got.append)
    assert [(el[1], el[2]) for el in got] == [ack1, *first, *second[1:]]
