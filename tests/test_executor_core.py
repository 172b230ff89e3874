"""ExecutorCore in one process, without Ray: the Storm 2.0 loop's backpressure rules."""

from __future__ import annotations

import time

import pytest
from ray import cloudpickle

from actors import FLUSH, ExecutorCore, make_executor
from tests._util import until
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder

CONF = {"topology.executor.receive.buffer.size": 8, "topology.producer.batch.size": 2,
        "topology.batch.flush.interval.millis": 0}


def _topo():
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    return b.create_topology()  # tasks: sink=1, src=2


def _until(cond):
    """:func:`tests._util.until` polling every millisecond: no Ray here, the executor
    threads answer within microseconds."""
    return until(cond, 10.0, interval=0.001)


def test_spout_stops_next_tuple_while_pending_but_keeps_draining_its_queue():
    topo = _topo()
    workers = {1: 0, 2: 0}
    spout = make_executor("t", topo, CONF, 2, workers)
    bolt = make_executor("t", topo, CONF, 1, workers)  # never started: its queue fills
    spout.connect({1: ExecutorCore.make_queue_sink(bolt.queue, 2)})
    spout.start()
    try:
        _until(lambda: len(spout.outbox.pending_emits) > 0)
        # 8 in the receive queue, 2 in the full batch, 1 in pendingEmits: nothing more
        emitted = spout.emitted
        assert emitted == 8 + 2 + 1 and bolt.queue.size() == 8
        for _ in range(5):  # acks would arrive like this; the spout must keep consuming
            assert spout.queue.try_publish_direct(FLUSH)
            _until(lambda: spout.queue.size() == 0)
        assert spout.emitted == emitted and len(spout.outbox.pending_emits) == 1
        assert spout.backpressure_wait_s > 0 and spout.outbox.send_failures > 0
        got: list = []
        bolt.queue.consume(got.append)  # room again: the spout resumes, order kept
        _until(lambda: spout.emitted > emitted)
        _until(lambda: bolt.queue.size() == 8)
        bolt.queue.consume(got.append)
        assert [v[0] for _, _, v in got] == list(range(len(got)))
    finally:
        spout.stop()


class _FakeSink:
    def __init__(self):
        self.in_flight = False
        self.batches: list = []

    def busy(self):
        return self.in_flight

    def __call__(self, items):
        self.batches.append(list(items))
        return len(items)


def test_flush_tuple_holds_partial_batch_while_one_is_in_flight():
    topo = _topo()
    spout = make_executor("t", topo, {"topology.producer.batch.size": 100}, 2, {1: 0, 2: 0})
    sink = _FakeSink()
    spout.connect({1: sink})
    spout.collector.emit((1, "a"), "default")
    sink.in_flight = True
    assert not spout.outbox.try_flush_batches(timer=True) and sink.batches == []
    sink.in_flight = False
    assert spout.outbox.try_flush_batches(timer=True) and len(sink.batches) == 1
    spout.collector.emit((2, "b"), "default")
    sink.in_flight = True
    assert spout.outbox.try_flush_batches() and len(sink.batches) == 2  # end of stream: no hold


def test_bolt_ends_after_all_upstream_markers_and_calls_finish_once():
    from tests.components import CountBolt

    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(50), 2)
    b.set_bolt("count", CountBolt()).shuffle_grouping("src")
    topo = b.create_topology()  # count=1, src=2,3
    workers = {1: 0, 2: 0, 3: 0}
    bolt = make_executor("t", topo, {"topology.stats.sample.rate": 0.25}, 1, workers)
    spouts = [make_executor("t", topo, {}, t, workers) for t in (2, 3)]
    for s in spouts:
        s.connect({1: ExecutorCore.make_queue_sink(bolt.queue, s.task_id)})
    bolt.connect({})
    bolt.start()
    spouts[0].start()
    _until(spouts[0].done.is_set)
    assert not bolt.done.wait(0.05)  # one upstream task has not ended yet
    spouts[1].start()
    assert bolt.done.wait(10)
    assert bolt.state == "done" and bolt.executed == 100
    assert bolt.obj.counts == {f"k{i}": 10 for i in range(10)}
    assert bolt.latency_n == 25  # executes 1, 5, ..., 97 timed (the sample rate)


def test_a_fail_that_empties_pending_is_replayed_before_the_stream_ends():
    """The spout has emitted everything and waits for its last tree; that tree fails. The
    item must be emitted again, not the stream ended with it lost."""
    from actors._streams import ACKER_FAILED
    from topology import IterableSpout

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(7,)], fields=("v",), msg_ids=True))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1)  # sink=1, src=2, acker=3
    workers = {1: 0, 2: 0, 3: 0}
    conf = {**CONF, "topology.producer.batch.size": 1}
    spout = make_executor("t", topo, conf, 2, workers)
    sink = make_executor("t", topo, conf, 1, workers)
    acker = make_executor("t", topo, conf, 3, workers)
    spout.connect({1: ExecutorCore.make_queue_sink(sink.queue, 2),
                   3: ExecutorCore.make_queue_sink(acker.queue, 2)})
    spout.start()
    try:
        _until(lambda: len(spout.ledger.trees) == 1)
        (root,) = spout.ledger.trees
        assert spout.queue.try_publish_direct((3, ACKER_FAILED, [root, "E: x (in bolt 'b')"]))
        _until(lambda: spout.emitted == 2 or spout.done.is_set())
        assert spout.emitted == 2 and not spout.done.is_set()
        assert len(spout.ledger.trees) == 1 and spout.obj.failed_ids == [0]
    finally:
        spout.stop()


def test_acker_takes_batched_acking_messages_and_answers_in_one_message():
    """Acking messages carry many roots (ACK_INIT/ACK_ACK: root, xor pairs; the spout task
    is the sender); completed trees go back to the spout as one ACKER_ACKED message, and
    malformed acking values are counted as bad, never raised."""
    from actors._streams import ACK_ACK, ACK_FAIL, ACK_INIT, ACKER_ACKED, ACKER_FAILED

    topo = _topo().with_ackers(1)
    acker_task = topo.acker_tasks[0]
    acker = make_executor("t", topo, CONF, acker_task, {t: 0 for t in range(1, 4)})
    sent: list = []
    acker.connect({t: (lambda items, t=t: sent.append((t, list(items))) or len(items))
                   for t in acker.destinations})
    acker.handle((2, ACK_INIT, [11, 5, 12, 6, 13, 7]))  # three trees of spout task 2
    acker.handle((1, ACK_ACK, [11, 5, 12, 6]))  # two complete
    acker.handle((1, ACK_FAIL, [13, "E: x (in bolt 'b')"]))  # [root, reason] pairs
    acker.handle((1, ACK_ACK, [14]))  # odd length: malformed
    acker.flush_acks()
    acker.outbox.try_flush_batches()
    assert sent == [(2, [(ACKER_ACKED, [11, 12]), (ACKER_FAILED, [13, "E: x (in bolt 'b')"])])]
    assert acker.acked == 2 and acker.failed == 1 and acker.bad_frames == 1



def _src_pass_sink(spout) -> TopologyBuilder:
    """src (``spout``) → pass (a PassBolt) → sink (a CollectorBolt), shuffle groupings."""
    from tests.components import PassBolt

    b = TopologyBuilder()
    b.set_spout("src", spout)
    b.set_bolt("pass", PassBolt()).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("pass")
    return b


def _src_stream(topo, component: str = "src") -> int:
    """The wire stream index of ``component``'s default stream."""
    from actors._routing import stream_table

    return [i for i, (c, _, _) in enumerate(stream_table(topo)) if c == component][0]


class _FiveThenIdle(SeqSpout):
    """Emits 5 tuples, then nothing (without ending its stream)."""

    def next_tuple(self):
        if self.i < 5:
            super().next_tuple()


def test_the_executor_thread_flushes_partial_batches_on_its_own_schedule():
    """Storm's FlushTuple, run by the executor thread itself (no timer thread): with a
    batch size of 4, the fifth tuple of a spout, and a bolt's one output, leave within the
    flush interval although nothing else joins their batches."""
    topo = _src_pass_sink(_FiveThenIdle(10)).create_topology()
    tasks = {t: 0 for ts in topo.component_tasks.values() for t in ts}
    (src,), (pas,), (sink,) = (topo.component_tasks[c] for c in ("src", "pass", "sink"))
    conf = {**CONF, "topology.batch.flush.interval.millis": 1,
            "topology.producer.batch.size": 4}
    spout = make_executor("t", topo, conf, src, tasks)
    bolt = make_executor("t", topo, conf, pas, tasks)
    from_spout: list = []
    from_bolt: list = []
    spout.connect({pas: lambda items: from_spout.extend(items) or len(items)})
    bolt.connect({sink: lambda items: from_bolt.extend(items) or len(items)})
    spout.start()
    bolt.start()
    try:
        _until(lambda: len(from_spout) == 5)
        assert not spout._has_flushable()
        assert bolt.queue.try_publish_direct((src, _src_stream(topo), [7, "k7"]))
        _until(lambda: from_bolt)
        assert from_bolt[0][1] == [7, "k7"] and not bolt._has_flushable()
    finally:
        spout.stop()
        bolt.stop()


def test_a_flush_tuple_in_the_queue_still_flushes():
    topo = _topo()
    spout = make_executor("t", topo, {**CONF, "topology.producer.batch.size": 4}, 2,
                         {1: 0, 2: 0})
    sent: list = []
    spout.connect({1: lambda items: sent.extend(items) or len(items)})
    assert not spout._has_flushable()
    spout.collector.emit([1, "k"])  # a partial batch (1 of 4)
    assert spout._has_flushable() and not sent
    spout.handle(FLUSH)
    assert not spout._has_flushable() and len(sent) == 1


def _all_tasks(topo):
    return {t: 0 for ts in topo.component_tasks.values() for t in ts}


def _shipped(topo):
    """``topo`` as one executor actor gets it from Ray (a pickled copy): tasks built from
    copies do not share a component object (a shared bolt keeps the last ``prepare``'s
    collector, so one task's emits would leave through another's)."""
    return cloudpickle.loads(cloudpickle.dumps(topo))


def test_routes_that_cannot_depend_on_values_are_fixed_and_emits_return_tuples():
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(1))
    b.set_bolt("one", CollectorBolt()).fields_grouping("src", ["key"])
    topo = b.create_topology()
    one, src = topo.component_tasks["one"][0], topo.component_tasks["src"][0]
    core = make_executor("t", topo, CONF, src, _all_tasks(topo))
    assert core.collector.routers["default"].fixed == (one,)  # a fields grouping into one task
    b.set_bolt("two", CollectorBolt(), parallelism_hint=2).fields_grouping("src", ["key"])
    topo = b.create_topology()
    one, two = topo.component_tasks["one"][0], topo.component_tasks["two"]
    core = make_executor("t", topo, CONF, topo.component_tasks["src"][0], _all_tasks(topo))
    core.connect({t: (lambda items: len(items)) for t in core.destinations})
    assert core.collector.routers["default"].fixed is None  # "two" has two tasks: the key decides
    seen = set()
    for i in range(50):
        targets = core.collector.emit([i, f"k{i}"])
        assert isinstance(targets, tuple) and targets[0] == one and targets[1] in two
        seen.add(targets[1])
    assert seen == set(two)


class _IdSpout(SeqSpout):
    """SeqSpout with ``msg_id = seq``; records acked and failed ids."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.acked_ids: list = []
        self.failed_ids: list = []

    def next_tuple(self):
        if self.i >= self.n:
            raise StopIteration
        self.collector.emit((self.i, "k" + str(self.i % self.keys)), msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        self.acked_ids.append(msg_id)

    def fail(self, msg_id):
        self.failed_ids.append(msg_id)


@pytest.mark.parametrize("ackers", [1, 2])
def test_every_tree_completes_through_one_acker_or_several(ackers):
    """The acking fast paths (one acker: buffered init and ack values, inlined spout and
    anchored emits) and the general one (several ackers: a root's acker by root id) must
    agree: every tree of a branching topology (an all grouping: two edges per emit)
    completes once, and nothing is left in any acker."""
    from tests.components import PassBolt

    b = TopologyBuilder()
    b.set_spout("src", _IdSpout(200))
    b.set_bolt("pass", PassBolt(), parallelism_hint=2).shuffle_grouping("src")
    b.set_bolt("both", CollectorBolt(), parallelism_hint=2).all_grouping("pass")
    topo = b.create_topology().with_ackers(ackers)
    conf = {"topology.acker.executors": ackers, "topology.producer.batch.size": 16,
            "topology.batch.flush.interval.millis": 1}
    tasks = _all_tasks(topo)
    cores = {t: make_executor("t", _shipped(topo), conf, t, tasks) for t in tasks}
    for t, c in cores.items():
        c.connect({d: ExecutorCore.make_queue_sink(cores[d].queue, t) for d in c.destinations})
    (spout,) = (c for c in cores.values() if c.is_spout)
    for c in cores.values():
        c.start()
    try:
        _until(lambda: spout.done.is_set())
        assert sorted(spout.obj.acked_ids) == list(range(200))
        assert spout.obj.failed_ids == [] and spout.ledger.unknown_acks == 0
        ackers_ = [cores[t] for t in topo.acker_tasks]
        assert sum(a.acked for a in ackers_) == 200 and not any(a.ledger.trees for a in ackers_)
        # every tree branches (two "both" tasks): no bolt may complete one by itself
        assert not any(getattr(c.ledger, "completed_trees", 0) for c in cores.values())
        if ackers > 1:
            assert all(a.acked for a in ackers_)  # the roots were spread over them
        # most pass acks rode on a child still in its batch (ack piggybacking)
        assert sum(cores[t].ledger.folded_acks for t in topo.component_tasks["pass"]) > 0
        # every seq reached both "both" tasks
        rows = [r for t in topo.component_tasks["both"] for r in cores[t].obj.received]
        assert sorted(r[-1][0] for r in rows) == sorted(list(range(200)) * 2)
    finally:
        for c in cores.values():
            c.stop()


def test_spout_takes_acks_counting_unknown_roots_and_going_on_after_a_raising_ack():
    from actors._streams import ACKER_ACKED

    class _Raising(_IdSpout):
        def ack(self, msg_id):
            if msg_id == "bad":
                raise ValueError("user ack failed")
            super().ack(msg_id)

    b = TopologyBuilder()
    b.set_spout("src", _Raising(0))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1)
    src = topo.component_tasks["src"][0]
    spout = make_executor("t", topo, CONF, src, _all_tasks(topo))
    spout.obj.open(spout.conf, spout.context, None)
    bad, ok = (spout.ledger.on_spout_emit(m, 1, time.monotonic())[0][0] for m in ("bad", "ok"))
    spout.handle((topo.acker_tasks[0], ACKER_ACKED, [bad, 99, ok]))
    assert spout.obj.acked_ids == ["ok"] and spout.acked == 2 and spout.ledger.unknown_acks == 1
    assert not spout.ledger.trees and len(spout.ledger.complete_latencies_ms) == 2
    assert spout.errors.total == 1


@pytest.mark.parametrize("spouts", [1, 2])
def test_spouts_as_their_own_ackers_complete_every_tree(spouts):
    """``topology.acker.in.spouts``: no acker task; each spout task draws root ids that
    name it (``root % len(acker_tasks)``), so the bolts' acks, routed by root id, come back
    to the spout that emitted the tree, which completes it there."""
    import copy

    from tests.components import PassBolt

    b = TopologyBuilder()
    b.set_spout("src", _IdSpout(200), parallelism_hint=spouts)
    b.set_bolt("pass", PassBolt(), parallelism_hint=2).shuffle_grouping("src")
    b.set_bolt("both", CollectorBolt(), parallelism_hint=2).all_grouping("pass")
    topo = b.create_topology().with_ackers(1, in_spouts=True)
    assert "__acker" not in topo.components
    assert topo.acker_tasks == tuple(topo.component_tasks["src"])
    conf = {"topology.acker.in.spouts": True, "topology.producer.batch.size": 16}
    tasks = _all_tasks(topo)
    cores = {t: make_executor("t", _shipped(topo), conf, t, tasks) for t in tasks}
    for t, c in cores.items():
        c.connect({d: ExecutorCore.make_queue_sink(cores[d].queue, t) for d in c.destinations})
    spout_cores = [c for c in cores.values() if c.is_spout]
    for c in spout_cores:  # one spout object per task (each emits seqs 0..199)
        c.obj = copy.deepcopy(c.obj)
    for c in cores.values():
        c.start()
    try:
        _until(lambda: all(c.done.is_set() for c in spout_cores))
        for i, c in enumerate(spout_cores):
            assert c.ledger.own_trees and c.ledger.own_index == i
            assert sorted(c.obj.acked_ids) == list(range(200)), c.task_id
            assert c.obj.failed_ids == [] and c.ledger.unknown_acks == 0 and not c.ledger.trees
            assert c.acked == 200 and len(c.ledger.complete_latencies_ms) == 200
        rows = {id(r): r for t in topo.component_tasks["both"] for r in cores[t].obj.received}
        assert len(rows) == 2 * 200 * spouts
    finally:
        for c in cores.values():
            c.stop()


def test_a_task_that_ended_takes_late_frames_without_blocking_the_sender():
    """After a spout ends (every tree resolved), bolts may still ack trees it timed out:
    with nobody draining its queue, a blocking insert would hold the bolt for ever. Late
    frames are acknowledged and counted instead, also when the end comes during a wait."""
    import threading

    b = TopologyBuilder()
    b.set_spout("src", _IdSpout(0))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1, in_spouts=True)
    src, sink = topo.component_tasks["src"][0], topo.component_tasks["sink"][0]
    spout = make_executor("t", topo, CONF, src, _all_tasks(topo))  # queue of 8
    items = [(-3, [5, 6])] * 8
    assert spout.inbound.accept_frame(sink, 0, items, False) == (0, None)  # fills the queue
    out = []
    waiter = threading.Thread(target=lambda: out.append(
        spout.inbound.accept_frame(sink, 1, items[:3], False)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # blocked: the queue is full and the task runs
    spout.done.set()
    waiter.join(5)
    assert out == [(1, None)] and spout.inbound.late_items == 3
    assert spout.inbound.accept_frame(sink, 2, items, True) == (2, None)  # remote: no overflow
    assert spout.inbound.late_items == 11 and spout.queue.is_empty_overflow()


def _pass_core(batch_size: int, in_spouts: bool = False, name: str = "pass"):
    """The ``name`` task (``pass`` or ``sink``) of src → pass → sink with acking, its sinks
    recording items, and the wire element of a tuple from its upstream (without anchors)."""
    from actors._codec import decode_batch, encode_batch

    topo = _src_pass_sink(_IdSpout(0)).create_topology().with_ackers(1, in_spouts)
    conf = {"topology.producer.batch.size": batch_size, "topology.acker.in.spouts": in_spouts}
    task = topo.component_tasks[name][0]
    core = make_executor("t", topo, conf, task, _all_tasks(topo))
    sent: dict = {}

    def sink_to(dest):
        def sink(items):  # through the codec, as to an actor
            sent.setdefault(dest, []).extend(decode_batch(encode_batch(task, items))[3])
            return len(items)
        return sink

    core.connect({d: sink_to(d) for d in core.destinations})
    core.obj.prepare(core.conf, core.context, core.collector)
    up = "src" if name == "pass" else "pass"
    return core, topo, sent, (topo.component_tasks[up][0], _src_stream(topo, up), [7, "k7"])


@pytest.mark.parametrize("in_spouts", [False, True])
def test_a_bolt_ack_rides_on_its_child_while_the_child_waits_in_its_batch(in_spouts):
    """Ack piggybacking: the pass bolt's ack value (edge_in ^ edge_child) XORs into its
    child's edge, so it sends no ack message, and the sink's ack of the child alone
    completes the tree (the XOR total is what the two messages would have given)."""
    from actors._streams import ACK_ACK

    core, topo, sent, el = _pass_core(batch_size=16, in_spouts=in_spouts)
    root, e_in = 1234567, 987654321
    core.handle((*el, [root, e_in]))
    assert core.ledger.folded_acks == 1 and core.acked == 1
    assert core.ledger.held_values == 0
    core.outbox.try_flush_batches()
    sink = topo.component_tasks["sink"][0]
    ((stream, values, anchors),) = sent[sink]
    assert values == [7, "k7"]
    # the child's edge now carries e_child ^ (e_in ^ e_child): the sink acking it with
    # ack_val 0 sends exactly e_in, which cancels the spout's init value
    assert anchors == [root, e_in]
    core.flush_acks()
    assert all(item[0] != ACK_ACK for items in sent.values() for item in items)


def test_a_child_that_fills_its_batch_waits_for_the_fold_then_leaves():
    """A child that fills its batch (batch size 1 here) is held until its parent's ack has
    folded into it, and leaves at once after: no ack message per data batch."""
    core, topo, sent, el = _pass_core(batch_size=1)
    root, e_in = 1234567, 987654321
    core.handle((*el, [root, e_in]))
    sink = topo.component_tasks["sink"][0]
    ((_, values, anchors),) = sent[sink]
    assert values == [7, "k7"] and anchors == [root, e_in]  # e_child ^ (e_in ^ e_child)
    assert core.ledger.folded_acks == 1 and core.ledger.held_values == 0
    assert not core.outbox.inserters[sink].batch  # it left without a flush call


def test_a_bolt_ack_leaves_as_a_message_once_its_child_has_left_or_has_two_roots():
    """No piggybacking when the child already left (here the bolt flushes its batches
    between emit and ack) or when the input has several roots: the ack value goes to the
    acker as Storm sends it."""
    from actors._streams import ACK_ACK

    core, topo, sent, el = _pass_core(batch_size=16)
    execute = core.obj.execute

    def execute_then_flush(tup):
        execute(tup)
        core.outbox.try_flush_batches()

    core.obj.execute = execute_then_flush
    root, e_in = 1234567, 987654321
    core.handle((*el, [root, e_in]))
    sink = topo.component_tasks["sink"][0]
    ((_, _, (r, e_child)),) = sent[sink]
    assert r == root and core.ledger.folded_acks == 0
    acker = topo.acker_tasks[0]
    assert core.ledger.take_messages() == [(acker, ACK_ACK, [root, e_in ^ e_child])]

    core, topo, sent, el = _pass_core(batch_size=16)
    core.handle((*el, [11, 5, 12, 6]))  # anchored to two trees
    core.outbox.try_flush_batches()
    ((_, _, (r1, e1, r2, e2)),) = sent[topo.component_tasks["sink"][0]]
    assert (r1, r2) == (11, 12) and e1 == e2 and core.ledger.folded_acks == 0
    assert core.ledger.take_messages() == [(acker, ACK_ACK, [11, 5 ^ e1, 12, 6 ^ e1])]


def test_a_spout_emit_to_one_task_sends_no_ack_init_and_its_root_names_the_spout():
    """Implicit init: with acker executors, an emit to one task sends no ACK_INIT; the
    child's edge id is 0 and the root carries IMPLICIT_INIT and the spout's index. An emit
    to two tasks (an all grouping) still sends Storm's init."""
    from actors._acking import IMPLICIT_INIT, implicit_init_spout
    from actors._streams import ACK_INIT

    b = TopologyBuilder()
    b.set_spout("one", _IdSpout(0))
    b.set_spout("two", _IdSpout(0))
    b.set_bolt("sink", CollectorBolt(), parallelism_hint=2).shuffle_grouping(
        "one").all_grouping("two")
    topo = b.create_topology().with_ackers(1)
    tasks = _all_tasks(topo)
    conf = {"topology.producer.batch.size": 1}
    for name in ("one", "two"):
        task = topo.component_tasks[name][0]
        core = make_executor("t", topo, conf, task, tasks)
        sent: list = []
        core.connect({d: (lambda items, d=d, s=sent: s.append((d, list(items))) or len(items))
                      for d in core.destinations})
        core.collector.emit((1, "k1"), msg_id="m")
        core.flush_acks()
        (root,) = core.ledger.trees
        inits = [it for d, items in sent for it in items if it[0] == ACK_INIT]
        edges = [it[2] for d, items in sent for it in items if it[0] >= 0]
        if name == "one":
            assert root & IMPLICIT_INIT and implicit_init_spout(root, topo.spout_tasks) == task
            assert inits == [] and edges == [[root, 0]]
        else:
            assert not root & IMPLICIT_INIT and implicit_init_spout(root, topo.spout_tasks) == -1
            assert len(edges) == 2 and all(e[1] for e in edges)
            assert inits == [(ACK_INIT, [root, edges[0][1] ^ edges[1][1]])]


@pytest.mark.parametrize("in_spouts", [False, True])
def test_a_bolt_completes_a_one_ack_tree_itself_and_leaves_the_rest_to_the_acker(in_spouts):
    """An ack of value 0 for an implicit-init root is its whole tree: the bolt tells the
    spout (ACKER_ACKED) and the acker never hears of it. A non-zero value, a root without
    the implicit bit, and malformed roots (negative; naming spout index 5 of one spout) go
    to the acker as Storm sends them (it counts the malformed as bad). With the spouts as
    their own ackers the bolt sends every ack to the spout as before."""
    from actors._acking import IMPLICIT_INIT
    from actors._streams import ACK_ACK, ACKER_ACKED

    core, topo, sent, el = _pass_core(16, in_spouts, name="sink")
    whole = IMPLICIT_INIT | 101  # spout index 0: the only spout
    roots = [(whole, 0), (IMPLICIT_INIT | 102, 77), (555, 0), (-1, 0),
             (IMPLICIT_INIT | 5 << 47 | 103, 0)]
    for root, edge in roots:
        core.handle((*el, [root, edge]))
    core.flush_acks()
    core.outbox.try_flush_batches()
    src = topo.component_tasks["src"][0]
    if in_spouts:  # the spout is the acker: every ack goes to it
        assert core.ledger.completed_trees == 0
        assert sent == {src: [[ACK_ACK, [x for r in roots for x in r]]]}
        return
    assert core.ledger.completed_trees == 1 and core.acked == 5
    assert sent == {src: [[ACKER_ACKED, [whole]]],
                    topo.acker_tasks[0]: [[ACK_ACK, [x for r in roots[1:] for x in r]]]}


@pytest.mark.parametrize("skips", [0, 3, 50])
def test_a_burst_of_next_tuple_calls_stops_at_max_spout_pending(skips):
    """Between its queue checks the spout loop calls ``next_tuple`` in a burst; the burst
    stops at ``topology.max.spout.pending`` (trees unacked: the acker never runs), and
    every ``topology.stats.sample.rate``-th call is timed whatever the bursts."""
    from topology import IterableSpout

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i,) for i in range(10_000)], fields=("v",),
                                     msg_ids=True))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1)  # sink=1, src=2, acker=3
    conf = {**CONF, "topology.max.spout.pending": 37, "topology.spout.recvq.skips": skips,
            "topology.stats.sample.rate": 0.25, "topology.executor.receive.buffer.size": 64,
            "topology.producer.batch.size": 1000}
    spout = make_executor("t", topo, conf, 2, {1: 0, 2: 0, 3: 0})
    got: list = []
    spout.connect({1: lambda items: got.extend(items) or len(items), 3: lambda items: len(items)})
    spout.start()
    try:
        _until(lambda: len(spout.ledger.trees) == 37)
        for _ in range(3):  # the loop goes on (flushes), and never emits past the cap
            assert spout.queue.try_publish_direct(FLUSH)
            _until(lambda: spout.queue.size() == 0)
        assert spout.emitted == 37 and len(spout.ledger.trees) == 37
        _until(lambda: len(got) == 37)
        assert [m[1][0] for m in got] == list(range(37))  # (stream, values, anchors)
        assert spout.latency_n in (9, 10)  # calls 1, 5, 9, ..., 37 timed (37 or 38 calls)
    finally:
        spout.stop()


def test_a_chain_host_counts_exactly_with_sampled_timings():
    """The chained pipeline in one thread (gen hosting double and keep, keep's emits to a
    sink for count): with an execute timed every other tuple, every counter is exact, and
    only the sampled executes are timed; each emit took the fixed route's deliver."""
    from actors._chain import ChainLink
    from cluster._plan import plan
    from tests.components import build_chainable

    n = 300
    p = plan(build_chainable(n), {"topology.acker.executors": 0,
                                  "topology.stats.sample.rate": 0.5})
    topo, tw = p.topology, dict(p.task_worker)
    task = {c: topo.component_tasks[c][0] for c in ("gen", "double", "keep", "count")}
    gen, double, keep = (make_executor("t", topo, dict(p.conf), task[c], tw)
                         for c in ("gen", "double", "keep"))
    gen.host_chain([double, keep])
    rows: list = []
    gen.connect({task["double"]: ChainLink(double)})
    double.connect({task["keep"]: ChainLink(keep)})
    keep.connect({task["count"]: lambda items: rows.extend(items) or len(items)})
    assert all(r.deliver is not None for c in (gen, double, keep)
               for r in c.collector.routers.values())
    gen.start()
    assert gen.done.wait(10.0) and keep.done.is_set()
    kept = sum(1 for i in range(n) if (2 * i) % 3 == 0)
    assert [r[1][0] for r in rows if r[0] >= 0] == [2 * i for i in range(n) if (2 * i) % 3 == 0]
    assert (gen.emitted, double.executed, double.emitted) == (n, n, n)
    assert (keep.executed, keep.emitted, keep.acked) == (n, kept, n)
    assert double.acked == n and double.failed == keep.failed == 0
    assert double.latency_n == keep.latency_n == n // 2
    assert gen.outbox.transferred() == n + 1 and double.outbox.transferred() == n + 1  # +EOS
    assert keep.outbox.transferred() == kept + 1


def test_stats_are_read_while_the_status_thread_records_halt_lags():
    """``stats()`` runs on the control thread while statuses, on another thread, append
    halt-lags to the policy's deque: reading them must not fail with "deque mutated
    during iteration" (seen in a full run under load)."""
    import sys
    import threading

    topo = _topo()
    core = make_executor("t", topo, CONF, 2, {1: 0, 2: 0})
    lags = core.policy.halt_lags_s
    stop = threading.Event()

    def record() -> None:
        while not stop.is_set():
            lags.append(0.001)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=record)
    t.start()
    try:
        for _ in range(300):
            assert len(core.stats().halt_lags_ms) <= 1000
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
