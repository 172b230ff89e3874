"""AIMD producer batching (``topology.producer.batch.dynamic``) without Ray: growth,
halving, the ceiling, and which flushes count."""

from __future__ import annotations

from actors import make_executor
from backpressure import BatchInserter
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder


class _Sink:
    """Takes everything unless ``refuse``; ``busy`` as an in-flight batch would be."""

    def __init__(self):
        self.refuse = False
        self.in_flight = False
        self.batches: list[list] = []

    def busy(self):
        return self.in_flight

    def __call__(self, items):
        if self.refuse:
            return 0
        self.batches.append(list(items))
        return len(items)


def _grown_to(size: int, ceiling: int = 8) -> tuple[BatchInserter, _Sink]:
    sink = _Sink()
    ins = BatchInserter(sink, ceiling, dynamic=True)
    while ins.batch_size < size:
        assert ins.try_publish(0)
    sink.batches.clear()
    return ins, sink


def test_grows_by_one_per_full_batch_from_one_up_to_the_ceiling():
    sink = _Sink()
    ins = BatchInserter(sink, 4, dynamic=True)
    assert ins.batch_size == 1
    for i in range(20):
        assert ins.try_publish(i)
    # a batch leaves as soon as it reaches the size, which then grows by one
    assert [len(b) for b in sink.batches] == [1, 2, 3, 4, 4, 4]
    assert ins.batch_size == 4 and ins.batch == [18, 19]
    assert [x for b in sink.batches for x in b] == list(range(18))


def test_a_refused_full_batch_grows_the_size():
    sink = _Sink()
    ins = BatchInserter(sink, 8, dynamic=True)
    sink.refuse = True
    assert not ins.try_publish("a")  # a batch of one, refused: load
    assert ins.batch_size == 2
    assert ins.try_publish("a") and ins.try_publish("b")  # fills it: refused again
    assert ins.batch_size == 3 and ins.batch == ["a", "b"]


def test_a_timer_flush_of_a_partial_batch_halves_the_size_down_to_one():
    ins, sink = _grown_to(8)
    sizes = []
    for _ in range(3):
        assert ins.try_publish("x")  # a partial batch (1 < size)
        assert ins.timer_flush()
        sizes.append(ins.batch_size)
    assert sizes == [4, 2, 1] and len(sink.batches) == 3
    assert ins.timer_flush() and ins.batch_size == 1  # nothing to send: no change
    assert ins.try_publish("y") and sink.batches[-1] == ["y"]  # at 1 it leaves at once


def test_only_the_timer_flush_decreases_and_only_when_something_left():
    ins, sink = _grown_to(6)
    ins.try_publish("a")
    assert ins.try_flush() and ins.batch_size == 6  # a barrier's or end's flush
    ins.try_publish("b")
    sink.refuse = True
    assert not ins.timer_flush() and ins.batch_size == 6  # refused: not light load
    sink.refuse = False
    assert ins.timer_flush() and ins.batch_size == 3


def test_fixed_batches_when_off():
    sink = _Sink()
    ins = BatchInserter(sink, 4)
    for i in range(3):
        assert ins.try_publish(i)
    assert ins.timer_flush() and ins.batch_size == 4 and sink.batches == [[0, 1, 2]]
    assert not BatchInserter(sink, 1, dynamic=True).dynamic  # nothing to adapt


def _spout(conf: dict):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    spout = make_executor("t", b.create_topology(), conf, 2, {1: 0, 2: 0})
    sink = _Sink()
    spout.connect({1: sink})
    return spout, sink


def test_the_executors_timer_flush_halves_its_other_flushes_do_not():
    """``ExecutorCore._flush`` (the timers' flush) is AIMD's decrease; the flush of a
    barrier (and so of the end of stream and of a capped spout, the same call) is not;
    the in-flight rule holds a partial batch, which is no flush at all."""
    spout, sink = _spout({"topology.producer.batch.size": 100,
                          "topology.producer.batch.dynamic": True})
    ins = spout.outbox.inserters[1]
    for i in range(1 + 2 + 3 + 4 + 5):  # full batches of 1..5: the size is 6
        spout.collector.emit((i, "a"), "default")
    assert [len(b) for b in sink.batches] == [1, 2, 3, 4, 5] and ins.batch_size == 6
    spout.collector.emit((99, "b"), "default")
    spout.send_barrier(7)  # the partial batch and the barrier leave: no change
    assert len(sink.batches) == 6 and ins.batch_size == 6
    spout.collector.emit((100, "c"), "default")
    sink.in_flight = True
    spout._flush()  # held while the earlier batch is in flight (the in-flight rule)
    assert ins.batch and ins.batch_size == 6
    sink.in_flight = False
    spout._flush()
    assert not ins.batch and ins.batch_size == 3
    assert spout.outbox.batch_sizes() == {1: 3}


def test_off_by_default():
    spout, _ = _spout({"topology.producer.batch.size": 100})
    assert spout.outbox.inserters[1].batch_size == 100
