"""Integration tests on a real local Ray: groupings, ordering, end of stream, backpressure,
errors. One Ray for the session (conftest ``cluster``). Every scenario whose path depends on
where the tasks run (routing, order, end of stream, backpressure, control calls, kill) runs
once per conftest ``workers`` layout: 1 worker, 2 workers on one node, 3 workers spread over
3 nodes. The checks that end before any tuple crosses a worker (user errors, bad emits,
invalid submissions, frames injected into one executor, ``run``) run once, on 1 worker.
No spout here emits with a msg id, so every topology runs without acker tasks
(``NO_ACKERS``): acking is test_acking's."""

from __future__ import annotations

import collections
import time

import pytest
import ray

from cluster import TopologyFailed
from tests._util import until
from tests.components import (
    CountBolt,
    DirectSplitter,
    FlakyBolt,
    PassBolt,
    SeqSpout,
    WrongArityBolt,
)
from tests.conftest import SAME_NODE_LAYOUTS
from topology import CollectorBolt, ConfigError, IterableSpout, TopologyBuilder, TopologyError

pytestmark = pytest.mark.ray

#: no acker tasks: nothing here is tracked, and an acker is one more actor to start
NO_ACKERS = {"topology.acker.executors": 0}


def _run(cluster, name, builder, conf=None, timeout=120):
    """Run to completion without ackers; returns the final stats and every collector's
    tuples."""
    handle = cluster.submit_topology(name, {**NO_ACKERS, **(conf or {})},
                                     builder.create_topology())
    try:
        assert handle.wait(timeout), handle.stats().summary()
        return handle.stats(), {c: handle.collected(c) for c in handle.topology.components
                                if isinstance(handle.topology.components[c].obj, CollectorBolt)}
    finally:
        cluster.kill_topology(name)


# the groupings on this node: the cross-node path is test_per_upstream_order's
@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_shuffle_fields_all_global(cluster, workers, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(2000, keys=50), 2)
    b.set_bolt("shuffled", CollectorBolt(), 2).shuffle_grouping("src")
    b.set_bolt("keyed", CollectorBolt(), 2).fields_grouping("src", ["key"])
    b.set_bolt("every", CollectorBolt(), 2).all_grouping("src")
    b.set_bolt("one", CollectorBolt(), 2).global_grouping("src")
    b.set_bolt("none", CollectorBolt(), 2).none_grouping("src")
    b.set_bolt("local", CollectorBolt(), 2).local_or_shuffle_grouping("src")
    stats, got = _run(cluster, name, b, workers.conf())
    topo_tasks = {t.component: [] for t in stats.tasks}
    for t in stats.tasks:
        topo_tasks[t.component].append(t.task)

    # local_or_shuffle prefers tasks in the sender's worker when there are any
    where = stats.assignment
    for task, _, src_task, _, _ in got["local"]:
        local = [t for t in topo_tasks["local"] if where[t] == where[src_task]]
        assert not local or task in local, "local_or_shuffle left a worker with a local task"
    comps = ("shuffled", "none", "local") if workers.count == 1 else ("shuffled", "none")
    assert len(got["local"]) == 4000
    for comp in comps:
        per_task = collections.Counter(task for task, *_ in got[comp])
        assert sum(per_task.values()) == 4000
        assert set(per_task) == set(topo_tasks[comp]), f"{comp}: some task got nothing"
        # shuffle is round robin: every task within 2 of the even share (2 sources)
        share = 4000 / len(topo_tasks[comp])
        assert all(abs(n - share) <= 2 for n in per_task.values()), per_task

    key_task: dict = {}
    for task, _, _, _, (_seq, key) in got["keyed"]:
        assert key_task.setdefault(key, task) == task, f"key {key} went to two tasks"
    assert len(got["keyed"]) == 4000 and len(set(key_task.values())) > 1

    per_task = collections.Counter(task for task, *_ in got["every"])
    assert per_task == {t: 4000 for t in topo_tasks["every"]}

    assert {task for task, *_ in got["one"]} == {min(topo_tasks["one"])}
    assert len(got["one"]) == 4000


@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_direct_grouping(cluster, workers, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(300))
    b.set_bolt("split", DirectSplitter()).shuffle_grouping("src")
    b.set_bolt("direct_sink", CollectorBolt(), 2).direct_grouping("split", "direct")
    _, got = _run(cluster, name, b, workers.conf())
    tasks = sorted({task for task, *_ in got["direct_sink"]})
    assert len(got["direct_sink"]) == 300 and len(tasks) == 2
    for task, _, _, stream, (seq, _) in got["direct_sink"]:
        assert stream == "direct" and task == tasks[seq % 2]


def test_per_upstream_order_and_exact_counts(cluster, workers, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(5000), 3)
    b.set_bolt("mid", PassBolt(), 2).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).global_grouping("mid")
    b.set_bolt("order", CollectorBolt()).global_grouping("src")
    stats, got = _run(cluster, name, b, workers.conf({
        "topology.producer.batch.size": 64, "topology.executor.receive.buffer.size": 512}))
    assert len(got["sink"]) == 15_000
    assert collections.Counter(v[0] for *_, v in got["sink"]) == {i: 3 for i in range(5000)}
    last: dict = {}
    for _, _, src_task, _, (seq, _) in got["order"]:
        assert seq == last.get(src_task, -1) + 1, "tuples of one upstream task reordered"
        last[src_task] = seq
    assert len(last) == 3 and all(v == 4999 for v in last.values())
    assert stats.total("mid", "executed") == 15_000


@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_end_of_stream_runs_finish_and_completes(cluster, workers, name):
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, f"k{i % 7}") for i in range(700)],
                                     fields=("seq", "key")), 2)
    b.set_bolt("count", CountBolt(), 2).fields_grouping("src", ["key"])
    b.set_bolt("totals", CollectorBolt()).global_grouping("count")
    stats, got = _run(cluster, name, b, workers.conf())
    assert stats.complete and all(t.state == "done" for t in stats.tasks)
    assert sorted(v for *_, v in got["totals"]) == [[f"k{i}", 100] for i in range(7)]


@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_slow_bolt_throttles_spout_with_bounded_queues(cluster, workers, name):
    """A bolt 1 ms/tuple behind a fast spout: queues stay within capacity, the spout waits
    on backpressure, and not one tuple is lost."""
    cap, batch, n = 64, 16, 3000
    conf = workers.conf({**NO_ACKERS, "topology.executor.receive.buffer.size": cap,
                         "topology.producer.batch.size": batch,
                         "topology.transfer.max.inflight.batches": 2})
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(n))
    b.set_bolt("slow", PassBolt(delay_s=0.001)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("slow")
    handle = cluster.submit_topology(name, conf, b.create_topology())
    src_actor = handle.actors[handle.topology.component_tasks["src"][0]]
    samples = []
    try:
        while not handle.wait(0.2):
            # the tasks' stats are read concurrently, not at one instant: the spout's count
            # read first, so the spout emitting meanwhile never inflates what is in transit
            emitted = ray.get(src_actor.stats.remote()).emitted
            samples.append((emitted, handle.stats()))
        final = handle.stats()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert len(samples) >= 3
    final_assignment = None
    for emitted, s in samples:
        for t in s.tasks:
            assert t.queue_population <= cap
            # the spout's emits wait in pendingEmits, bounded by one next_tuple's output and,
            # once it ends, one end-of-stream marker per destination
            ending = len(t.sent_batches_to) if t.state == "ending" else 0
            assert t.pending_emits <= 1 + ending, (t.state, t.pending_emits)
        # in transit: the receive queue, at most 2 batches in Ray's call queue, one batch
        # being filled, one pending emit; from another worker, plus what arrived during the
        # halt-lag, which waits in the overflow queue
        assert (emitted - s.total("slow", "executed") - s.total("slow", "overflow")
                <= cap + 2 * batch + batch + 1 + 1)
        final_assignment = s.assignment
    slow_task = handle.topology.component_tasks["slow"][0]
    src_task = handle.topology.component_tasks["src"][0]
    remote = final_assignment[slow_task] != final_assignment[src_task]
    spout = final.component("src")[0]
    assert spout.backpressure_wait_ms > 100 and spout.send_failures > 0
    assert final.component("slow")[0].insert_failures > 0
    assert sorted(v[0] for *_, v in got) == list(range(n))
    if remote:  # the spout held because the slow task's worker said it was backlogged
        assert final.component("slow")[0].overflowed_total > 0
        assert spout.remote_refusals > 0 and len(spout.halt_lags_ms) > 0
        assert final.component("slow")[0].overflow == 0


def test_user_exceptions_reported_and_topology_goes_on(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(1000))
    b.set_bolt("flaky", FlakyBolt(every=10), 2).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("flaky")
    stats, got = _run(cluster, name, b)
    assert len(got["sink"]) == 900
    errs = [e for t in stats.component("flaky") for e in t.errors]
    assert sum(e["count"] for e in errs) == 100
    assert stats.total("flaky", "error_count") == 100
    e = errs[0]
    assert e["component"] == "flaky" and e["error_type"] == "RuntimeError"
    assert e["task"] in [t.task for t in stats.component("flaky")]
    assert "cannot handle seq" in e["message"] and "in execute" in e["traceback"]


def test_bad_emits_name_component_and_stream(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("bad", WrongArityBolt()).shuffle_grouping("src")
    stats, _ = _run(cluster, name, b)
    msgs = {e["message"] for e in stats.component("bad")[0].errors}
    assert ("component 'bad' emitted 3 values on stream 'default', which declares 2 fields "
            "['seq', 'key']") in msgs
    assert "component 'bad' emitted on undeclared stream 'nope'; declared: ['default']" in msgs


def test_invalid_submissions_rejected(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    with pytest.raises(TopologyError, match="expects a StormTopology"):
        cluster.submit_topology(name, {}, b)
    with pytest.raises(ConfigError, match="unknown config key 'topology.wrokers'"):
        cluster.submit_topology(name, {"topology.wrokers": 2}, b.create_topology())
    assert name not in cluster.topologies


def test_malformed_frames_counted_and_dropped(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(100))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    handle = cluster.submit_topology(name, NO_ACKERS, b.create_topology())
    try:
        sink = handle.actors[handle.topology.component_tasks["sink"][0]]
        import msgpack
        frames = [b"\xc1garbage", msgpack.packb({"not": "a frame"}),
                  msgpack.packb([999, 0, 0, [[0, [1, "x"]]]]),  # a task that is not upstream
                  msgpack.packb([2, 0, 0, [[10_000, [1]]]]), b"\x00" * 10]
        assert ray.get([sink.receive.remote(f) for f in frames]) == [None] * 5
        assert handle.wait(60)
        s = handle.stats()
        assert s.component("sink")[0].bad_frames == 5
        assert len(handle.collected("sink")) == 100
    finally:
        cluster.kill_topology(name)


@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_kill_stops_a_running_topology(cluster, workers, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", PassBolt(delay_s=0.001)).shuffle_grouping("src")
    handle = cluster.submit_topology(name, workers.conf(NO_ACKERS), b.create_topology())
    until(lambda: handle.stats().total("sink", "executed") > 0, 60, "tuples reaching the sink")
    assert not handle.wait(0)  # an endless spout: running until killed
    cluster.kill_topology(name)
    with pytest.raises((TopologyFailed, ray.exceptions.RayError)):
        handle.stats(timeout=10)


@pytest.mark.parametrize("workers", SAME_NODE_LAYOUTS, indirect=True)
def test_stats_answer_while_data_is_blocked(cluster, workers, name):
    """Control calls use their own concurrency group: stats() answers while the data
    threads are held, the slow bolt's in a 50 ms ``execute`` and the spout's with an emit
    waiting in pendingEmits for that bolt's full queue (one worker) or for its worker's
    backlog (several). The answer itself must show the spout held: a spout free to emit
    would have no pending emit and would be thousands of tuples ahead of the bolt."""
    cap, batch, inflight = 8, 4, 2
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("slow", PassBolt(delay_s=0.05)).shuffle_grouping("src")
    handle = cluster.submit_topology(name, workers.conf({
        **NO_ACKERS, "topology.executor.receive.buffer.size": cap,
        "topology.producer.batch.size": batch,
        "topology.transfer.max.inflight.batches": inflight}), b.create_topology())
    answer_s = []

    def answered_while_held():
        t0 = time.monotonic()
        s = handle.stats(timeout=10)
        answer_s.append(time.monotonic() - t0)
        src, slow = s.component("src")[0], s.component("slow")[0]
        return src.pending_emits > 0 and slow.insert_failures > 0 and s

    try:
        s = until(answered_while_held, 60, "a stats answer with the spout's emits pending")
        assert max(answer_s) < 5, answer_s
        src, slow = s.component("src")[0], s.component("slow")[0]
        assert slow.queue_population <= cap and src.backpressure_wait_ms > 0
        # tuples wait for the bolt, and the spout is no further ahead than the bounds let
        # it be: the slow task's queue and overflow, the batches in flight to it and the
        # one being filled, the pending emit, the tuple in execute; and one batch more, as
        # the two tasks answer a moment apart (the bolt may take a tuple in between, and
        # the spout send a batch into the room)
        assert slow.executed < src.emitted
        assert (src.emitted - slow.executed - slow.overflow
                <= cap + inflight * batch + batch + 1 + 1 + batch), (
            src.emitted, slow.executed, slow.overflow)
    finally:
        cluster.kill_topology(name)


def test_run_returns_final_stats(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(500))
    b.set_bolt("count", CountBolt()).fields_grouping("src", ["key"])
    stats = cluster.run(name, NO_ACKERS, b.create_topology(), timeout=120)
    assert stats.complete and stats.total("count", "executed") == 500
    assert stats.total("count", "emitted") == 10
    assert name not in cluster.topologies


