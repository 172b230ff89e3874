"""Overload on a running topology: latency-first shedding against blocking, and queues
bounded in bytes with Arrow record-batch tuples (Ray)."""

from __future__ import annotations

import pytest

from tests.components import ArrowBatches, LatencySink, LiveSpout, SlowArrowSink
from topology import IterableSpout, TopologyBuilder

pytestmark = pytest.mark.ray

#: the slow sink's work per tuple (s): about 900 tuples/s with sleep's overshoot
WORK_S = 0.001
#: offered: ten times what the sink can take
OFFERED_PER_S = 10_000
#: the shed test's overload (s): long enough for the shedder to hold the queue at its
#: target for several of its intervals and for a p99 over tens of thousands of tuples
SHED_S = 10.0
TARGET_MS = 100
#: the block test's overload (s): a full queue of the sink's (1,024 tuples) alone holds a
#: tuple for about a second, so the held latency passes the shed bound within the first
#: seconds, and the queues are sampled several times while the spout is held; it takes no
#: p99 over a long run
BLOCK_S = 4.0


def _overloaded(mode: str, duration_s: float):
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(OFFERED_PER_S, duration_s))
    b.set_bolt("sink", LatencySink(WORK_S * 1e6, busy=False)).shuffle_grouping("live")
    # batches of 100: a partial batch waits while an earlier one is in flight (the Nagle
    # rule), up to batch size / rate before the queue's clock starts (docs/overload.md)
    conf = {"topology.acker.executors": 0, "topology.backpressure.overload": mode,
            "topology.shed.latency.target.ms": TARGET_MS, "topology.producer.batch.size": 100}
    return b.create_topology(), conf


def _run_sampling(cluster, name, topology, conf, timeout):
    handle = cluster.submit_topology(name, conf, topology)
    samples = []
    try:
        assert handle.wait(0.0) is False
        while not handle.wait(0.5):
            samples.append(handle.stats())
            assert len(samples) < timeout * 2, "the topology did not complete"
        return handle.stats(), handle.collected("sink"), samples
    finally:
        cluster.kill_topology(name)


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


@pytest.mark.parametrize("workers", ["1worker", "2workers"], indirect=True)
def test_shed_keeps_latency_within_the_target_and_accounts_for_every_tuple(
        cluster, workers, name):
    """10x overload for ``SHED_S`` under "shed": every emitted tuple is delivered or shed
    (exactly), some are shed, and the emit-to-execute p99 stays within twice the target
    (the queue's sojourn is held to the target; the rest is the batch and the hops before
    the queue's clock starts; blocking instead holds tuples for seconds, see the next
    test). The long form is ``python -m benchmarks.overload``."""
    topology, conf = _overloaded("shed", SHED_S)
    final, got, _ = _run_sampling(cluster, name, topology, workers.conf(conf), 120)
    spout, sink = final.component("live")[0], final.component("sink")[0]
    assert final.complete
    assert sink.shed > 0
    assert sink.executed == len(got)
    assert sink.shed + sink.executed == spout.emitted
    sites = {site for by in sink.shed_by_stream.values() for site in by}
    assert set(sink.shed_by_stream) == {"live:default"} and sites <= {"queue", "arrival"}
    assert sum(n for by in sink.shed_by_stream.values() for n in by.values()) == sink.shed
    latencies = [v[1] for *_, v in got]
    p99_ms = _p99(latencies) * 1000
    assert p99_ms <= 2 * TARGET_MS, f"p99 {p99_ms:.1f} ms"
    # the spout was never held: it offered the whole stream's rate
    assert spout.emitted >= 0.9 * OFFERED_PER_S * SHED_S


#: the full-speed shed scenario: a spout as fast as it may into one bolt of 200 us a tuple
#: (about 5,000 tuples/s), a 50 ms target, default batches; long enough for the spout to
#: outrun the bolt fiftyfold for thousands of the bolt's executes
FLOOD_S = 6.0
FLOOD_WORK_US = 200
FLOOD_TARGET_MS = 50


def test_shed_at_full_speed_keeps_its_target_and_goes_on_executing(cluster, name):
    """A source that emits as fast as it may against a bolt of 200 us a tuple, "shed"
    with a 50 ms target, as a user would set it: exact accounting; the delivered tuples'
    emit-to-execute p99 within the target + 50 ms (the batch and the hop before the
    queue's clock starts); and the bolt still executes at a quarter of its capacity or more.
    Shedding tuple by tuple cost the executor thread about as much per tuple as the
    spout's emits left it, so it fell behind, shed nearly all, and the few it ran had
    waited past the target (the bulk shed of an expired frame, JCQueue.consume's
    ``expired``)."""
    b = TopologyBuilder()
    b.set_spout("live", LiveSpout(1e9, FLOOD_S))
    b.set_bolt("sink", LatencySink(FLOOD_WORK_US)).shuffle_grouping("live")
    conf = {"topology.acker.executors": 0, "topology.backpressure.overload": "shed",
            "topology.shed.latency.target.ms": FLOOD_TARGET_MS}
    final, got, _ = _run_sampling(cluster, name, b.create_topology(), conf, 120)
    spout, sink = final.component("live")[0], final.component("sink")[0]
    assert final.complete and sink.shed > 0
    assert sink.shed + sink.executed == spout.emitted == sink.shed + len(got)
    p99_ms = _p99([v[1] for *_, v in got]) * 1000
    assert p99_ms <= FLOOD_TARGET_MS + 50, f"p99 {p99_ms:.1f} ms"
    capacity = FLOOD_S / (FLOOD_WORK_US / 1e6)
    assert sink.executed >= 0.25 * capacity, (sink.executed, capacity)  # (a loaded host)


def test_block_sheds_nothing_and_keeps_its_queues_bounded(cluster, name):
    """The same overload under "block", for ``BLOCK_S``: nothing shed, nothing lost,
    queues within their bounds (the source is held instead, so the latency grows)."""
    topology, conf = _overloaded("block", BLOCK_S)
    conf = {**conf, "topology.executor.receive.buffer.size": 1024,
            "topology.workers": 2}
    final, got, samples = _run_sampling(cluster, name, topology, conf, 180)
    spout, sink = final.component("live")[0], final.component("sink")[0]
    assert sink.shed == 0 and sink.shed_by_stream == {}
    assert sink.executed == spout.emitted == len(got)
    assert sink.dropped_messages == 0
    assert samples
    for s in samples:
        for t in s.tasks:
            assert t.queue_population <= t.queue_capacity
    assert max(v[1] for *_, v in got) * 1000 > 2 * TARGET_MS  # held past the shed bound


@pytest.mark.parametrize("workers", ["1worker", "2workers"], indirect=True)
def test_a_byte_bounded_queue_holds_its_byte_bound_with_arrow_batches(cluster, workers, name):
    """Arrow batches of several sizes, one larger than the whole bound, into a slow sink:
    on every stats sample the sink's receive queue holds at most its byte bound, unless it
    holds exactly one data tuple (the large one, admitted alone into the empty queue; the
    end-of-stream marker, which no bound refuses, may follow it). From
    another worker, what arrives while the queue is full waits in the overflow, which the
    senders' credits bound (``max.inflight.batches`` frames of ``producer.batch.size``
    tuples each), never the stream."""
    bound, batch, credits = 200_000, 4, 2
    rows = (100, 1_000, 4_000, 30_000)  # the last is larger than the bound on the wire
    b = TopologyBuilder()
    b.set_spout("batches", IterableSpout(ArrowBatches(80, rows), fields=("batch",)))
    b.set_bolt("sink", SlowArrowSink(0.02)).shuffle_grouping("batches")
    conf = workers.conf({"topology.acker.executors": 0,
                         "topology.executor.receive.buffer.bytes": bound,
                         "topology.producer.batch.size": batch,
                         "topology.transfer.max.inflight.batches": credits})
    final, _, samples = _run_sampling_stats(cluster, name, b.create_topology(), conf, 120)
    # the spout's end-of-stream marker is never refused (no bytes of its own): once the
    # spout has emitted everything (in this sample or the next: the tasks answer stats
    # one by one) it may sit in the queue behind the large tuple
    done = [s.component("batches")[0].emitted == 80 for s in samples] + [True]
    sink_rows = [(t, done[i] or done[i + 1])
                 for i, s in enumerate(samples) for t in s.component("sink")]
    assert len(sink_rows) >= 3
    assert any(t.queued_bytes + t.overflow_bytes > 0 for t, _ in sink_rows)
    largest = 30_000 * 24  # a generous wire size of the largest batch
    for t, ending in sink_rows:
        assert t.queue_capacity_bytes == bound
        data_tuples = t.queue_population - ending
        assert t.queued_bytes <= bound or data_tuples <= 1, (
            t.queued_bytes, t.queue_population, ending)
        assert t.overflow_bytes <= credits * batch * largest
    assert final.component("sink")[0].executed == 80


def _run_sampling_stats(cluster, name, topology, conf, timeout):
    handle = cluster.submit_topology(name, conf, topology)
    samples = []
    try:
        while not handle.wait(0.1):
            samples.append(handle.stats())
            assert len(samples) < timeout * 10, "the topology did not complete"
        return handle.stats(), None, samples
    finally:
        cluster.kill_topology(name)
