"""Several workers on a 3-node ``ray.cluster_utils.Cluster`` (conftest ``cluster``): placement,
per-task backpressure between workers, order and exact accounting through the overflow,
reminders, late connections, and bad input on the worker-to-worker path; one aggregation on
every worker layout (conftest ``workers``)."""

from __future__ import annotations

import collections

import msgpack
import pytest
import ray

from actors import TransferActor, encode_batch, encode_transfer
from cluster import assign_tasks
from tests._util import until
from tests.components import PassBolt, SeqSpout, SilentSpout, SlowCollector
from topology import CollectorBolt, TopologyBuilder

pytestmark = pytest.mark.ray

#: no acker tasks where nothing is tracked (no spout here emits with a msg id): acking is
#: test_acking's, and an acker is one more actor to start per worker
NO_ACKERS = {"topology.acker.executors": 0}


def test_workers_spread_over_nodes_and_assignment_in_stats(cluster, name):
    b = TopologyBuilder()
    # one user task per worker (sink 1, src 2 and 3): every worker sends or receives
    b.set_spout("src", SeqSpout(3000), 2)
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology()
    for placement, nodes in (("spread", 3), ("pack", 1)):
        handle = cluster.submit_topology(f"{name}-{placement}", {
            "topology.workers": 3, "topology.worker.placement": placement}, topo)
        try:
            assert handle.wait(120)
            s = handle.stats()
            assert s.assignment == assign_tasks(handle.topology, 3)
            # the ackers (one per worker) take the ids after the user tasks
            assert {t: w for t, w in s.assignment.items() if t <= 3} == assign_tasks(topo, 3)
            assert sorted(s.assignment[t] for t in handle.topology.acker_tasks) == [0, 1, 2]
            assert [w.worker for w in s.workers] == [0, 1, 2]
            assert len({w.node_id for w in s.workers}) == nodes
            assert all(t.worker == s.assignment[t.task] for t in s.tasks)
            assert sorted(t for w in s.workers for t in w.tasks) == sorted(s.assignment)
            assert len(handle.collected("sink")) == 6000
            assert sum(w.frames_received for w in s.workers) > 0
        finally:
            cluster.kill_topology(f"{name}-{placement}")


@pytest.mark.parametrize("direct", [True, False], ids=["direct-status", "worker-status"])
def test_slow_task_holds_only_its_senders(cluster, name, direct):
    """Worker 0 runs two spouts, worker 1 their bolts. The slow bolt's task is backlogged and
    its spout holds; the other spout, sending over the same worker-to-worker channel, never
    holds, and a fast bolt fed by the throttled spout is never named backlogged. On both
    status paths: the slow task's executor telling its sender itself, and Storm's
    worker-level one through the two transfer actors."""
    n_fast = 40_000
    b = TopologyBuilder()
    b.set_spout("s1_src", SeqSpout(n_fast))  # task 1, worker 0
    b.set_bolt("s2_fast", PassBolt(), 1).shuffle_grouping("s1_src")  # task 2, worker 1
    b.set_spout("s3_src", SeqSpout(10**9))  # task 3, worker 0
    b.set_bolt("s4_slow", PassBolt(delay_s=0.002)).shuffle_grouping("s3_src")  # 4, worker 1
    b.set_bolt("s5_local", PassBolt()).shuffle_grouping("s3_src")  # task 5, worker 0
    b.set_bolt("s6_fast", PassBolt()).shuffle_grouping("s3_src")  # task 6, worker 1
    conf = {**NO_ACKERS, "topology.workers": 2, "topology.executor.receive.buffer.size": 256,
            "topology.producer.batch.size": 32, "topology.backpressure.status.direct": direct}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert {t: w for t, w in handle.stats().assignment.items() if t <= 6} == {
            1: 0, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1}
        samples = []

        def fast_done():
            s = handle.stats()
            samples.append(s)
            return s.total("s2_fast", "executed") >= n_fast
        until(fast_done, 120, "the fast pair finishing")
        final = samples[-1]
    finally:
        cluster.kill_topology(name)
    t = {x.task: x for x in final.tasks}
    # the slow task was backlogged and its spout held; nobody else was ever named
    assert t[4].overflowed_total > 0 and t[3].remote_refusals > 0
    assert len(t[3].halt_lags_ms) > 0
    # the path taken: worker 0's transfer actor passes statuses on only on Storm's path
    # (it receives worker 1's statuses on both, for its stats)
    assert final.workers[0].counters["statuses_received"] > 0
    assert (final.workers[0].counters["statuses_forwarded"] > 0) != direct
    for s in samples:
        for x in s.tasks:
            assert set(x.remote_backlogged) <= {4}, (x.task, x.remote_backlogged)
        assert set(s.workers[1].backlogged) <= {4}
        assert not s.workers[0].backlogged
    assert t[1].remote_refusals == 0 and t[1].pending_emits == 0
    # the fast pair ran far faster than the throttled one in the same window
    assert t[1].emitted == n_fast and t[1].emitted >= 3 * t[3].emitted
    # the throttled spout's fast bolts took everything sent to them
    assert t[6].overflowed_total == 0 and not t[6].backlogged and t[5].queue_population < 256


def test_order_and_exact_counts_through_the_overflow(cluster, name):
    n = 4000
    b = TopologyBuilder()
    b.set_spout("a_src", SeqSpout(n), 3)  # tasks 1, 3 in worker 0; task 2 in worker 1
    b.set_bolt("b_sink", SlowCollector(0.0001)).global_grouping("a_src")  # task 4, worker 1
    conf = {**NO_ACKERS, "topology.workers": 2, "topology.executor.receive.buffer.size": 64,
            "topology.producer.batch.size": 16}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert handle.wait(180)
        s = handle.stats()
        got = handle.collected("b_sink")
    finally:
        cluster.kill_topology(name)
    sink = s.component("b_sink")[0]
    assert sink.overflowed_total > 0, "the test must exercise the overflow path"
    last: dict = {}
    for _, _, src_task, _, (seq, _) in got:
        assert seq == last.get(src_task, -1) + 1, "tuples of one upstream task reordered"
        last[src_task] = seq
    assert last == {1: n - 1, 2: n - 1, 3: n - 1} and len(got) == 3 * n
    assert sink.overflow == 0 and sink.dropped_messages == 0


def test_overflow_limit_drops_are_counted_exactly(cluster, name):
    n = 3000
    b = TopologyBuilder()
    b.set_spout("a_src", SeqSpout(n))  # task 1, worker 0
    b.set_bolt("b_sink", SlowCollector(0.0005)).shuffle_grouping("a_src")  # task 2, worker 1
    conf = {**NO_ACKERS, "topology.workers": 2, "topology.executor.receive.buffer.size": 32,
            "topology.producer.batch.size": 16, "topology.executor.overflow.limit": 16,
            "topology.transfer.max.inflight.batches": 4}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert handle.wait(180), "the end of stream must never be dropped"
        s = handle.stats()
        got = handle.collected("b_sink")
    finally:
        cluster.kill_topology(name)
    sink = s.component("b_sink")[0]
    assert s.component("a_src")[0].emitted == n
    assert sink.dropped_messages > 0, "the test must exercise the limit"
    assert len(got) + sink.dropped_messages == n
    assert len({v[0] for *_, v in got}) == len(got)  # no duplicates either


def _injection_topology(name, cluster, extra=None):
    """Spout task 1 (worker 0) → slow sink task 2 (worker 1), frames injected by hand."""
    b = TopologyBuilder()
    b.set_spout("a_src", SilentSpout())
    # 2 s per tuple: the 4 queued tuples alone outlast the test, so the overflow never
    # drains (and the backlog never clears) while it runs, however loaded the host
    b.set_bolt("b_sink", SlowCollector(2.0)).shuffle_grouping("a_src")
    conf = {**NO_ACKERS, "topology.workers": 2, "topology.executor.receive.buffer.size": 4,
            "topology.producer.batch.size": 2, "topology.backpressure.resend.size": 20,
            "topology.transfer.max.frame.bytes": 64 * 1024, **(extra or {})}
    return cluster.submit_topology(name, conf, b.create_topology())


def _frame(seq, start, count):
    return encode_batch(1, [[0, [i, f"k{i}"]] for i in range(start, start + count)], seq)


def test_status_reminders_and_late_connection(cluster, name):
    handle = _injection_topology(name, cluster)
    ta1 = handle.transfers[1]
    try:
        s = handle.stats()
        assert [w.statuses_sent for w in s.workers] == [0, 0], "no status while none is late"
        # 10 tuples for a queue of 4 whose consumer takes 2 s each: 6 go to the overflow
        assert ray.get(ta1.deliver.remote(encode_transfer(0, [(2, _frame(0, 0, 10))]))) == [0]
        # the spout may learn it by the direct report before worker 0's transfer actor
        # receives worker 1's status: wait for both paths
        s = until(lambda: ((st := handle.stats()).component("a_src")[0].remote_backlogged
                           == [2] and st.workers[0].remote_backlogged == [2] and st), 30,
                  "the spout and worker 0 learning that task 2 is backlogged")
        assert s.workers[1].backlogged
        assert s.workers[1].statuses_sent == 1 and s.workers[1].counters["reminders_sent"] == 0
        lag = s.halt_lag_ms(0.5)
        assert lag is not None and lag > 0
        # 45 more into the overflow: reminders after 20 and after 40 (counted per task)
        frames = [(2, _frame(1 + i, 10 + 5 * i, 5)) for i in range(9)]
        assert ray.get(ta1.deliver.remote(encode_transfer(0, frames))) == list(range(1, 10))
        # the executor's reports reach the transfer actor as one-way calls: wait for them
        s = until(lambda: (st := handle.stats()).workers[1].statuses_sent >= 3 and st, 30,
                  "the two reminders reaching the transfer actor")
        assert s.workers[1].counters["reminders_sent"] == 2
        assert s.workers[1].statuses_sent == 3
        # a worker that connects now receives the current status at once
        late = TransferActor.options(num_cpus=0.01).remote("late", 9, handle.conf,
                                                            handle.task_worker)
        ray.get(ta1.hello.remote(9, late))
        until(lambda: ray.get(late.stats.remote())["remote_backlogged"] == [2], 30,
               "the late worker receiving the status")
        ray.kill(late)
    finally:
        cluster.kill_topology(name)


def test_bad_worker_to_worker_input_is_counted_and_dropped(cluster, name):
    handle = _injection_topology(name, cluster)
    ta1 = handle.transfers[1]
    try:
        results = ray.get([
            ta1.deliver.remote(b"\xc1 not msgpack"),
            ta1.deliver.remote(msgpack.packb({"a": 1})),
            ta1.deliver.remote(msgpack.packb([0, [[2, "not bytes"]]])),
            ta1.deliver.remote(b"\x90" * (64 * 1024 + 1)),  # over the size limit
            ta1.deliver.remote(encode_transfer(0, [(1, _frame(0, 0, 1))])),  # not its task
            ta1.deliver.remote(encode_transfer(0, [(77, _frame(0, 0, 1))])),  # no such task
            ta1.deliver.remote(encode_transfer(0, [(2, b"\xc1garbage")])),  # bad inner frame
            ta1.backpressure_status.remote(b"\xc1"),
            ta1.backpressure_status.remote(msgpack.packb([1, 2, 3])),
        ])
        assert results[:4] == [None] * 4
        assert results[4:7] == [[None], [None], [None]]
        s = handle.stats()
        w = s.workers[1]
        assert w.dropped_bad_payload == 3 + 2 and w.dropped_oversized == 1
        assert w.dropped_unknown_task == 2
        assert s.component("b_sink")[0].bad_frames == 1
        # the worker still works: a good frame goes through
        assert ray.get(ta1.deliver.remote(encode_transfer(0, [(2, _frame(0, 0, 1))]))) == [0]
        assert all(t.state == "running" for t in handle.stats().tasks)
    finally:
        cluster.kill_topology(name)


def test_aggregation_gives_the_same_counts_on_every_layout(cluster, workers, name):
    """The flights-shaped aggregation (a shuffle, then a fields grouping into two tasks)
    gives the exact per-key counts with 1, 2 and 3 workers."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(5000, keys=37), 2)
    b.set_bolt("mid", PassBolt(), 3).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt(), 2).fields_grouping("mid", ["key"])
    handle = cluster.submit_topology(name, workers.conf(NO_ACKERS), b.create_topology())
    try:
        assert handle.wait(120)
        got = collections.Counter(v[1] for *_, v in handle.collected("sink"))
    finally:
        cluster.kill_topology(name)
    assert got == collections.Counter(f"k{i % 37}" for i in range(5000) for _ in range(2))
