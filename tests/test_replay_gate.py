"""A replaying spout's collector after a rollback (actors/_replay_gate.py), without Ray:
held emits survive a second rollback, dead letters pass, the hold's clock starts at the
resume, odd msg ids do not crash the loop; and the submit rules for sources that commit
on entry."""

from __future__ import annotations

import time
from collections import deque

import pytest

from actors._collectors import SpoutCollector
from topology import DEFAULT_STREAM, Fields
from topology._dead_letters import DEAD_LETTER_STREAM, RetryService

_TASK = 9


class _Router:
    def __init__(self, index: int, arity: int) -> None:
        self.index, self.arity, self.fixed, self.deliver = index, arity, (_TASK,), None

    def route(self, values):
        return self.fixed

    def check_direct(self, task: int) -> None:
        pass

    def load_aware_shuffles(self):
        return ()


class _Inserter:
    def __init__(self, sent: list) -> None:
        self.sent = sent

    def try_publish(self, msg) -> bool:
        self.sent.append(msg)
        return True


class _Outbox:
    def __init__(self, sent: list) -> None:
        self.pending_emits = deque()
        self.inserters = {_TASK: _Inserter(sent)}


class _Ledger:  # no ackers: every emit untracked
    held_values = 0

    def on_spout_emit_one(self, msg_id, now):
        return None


class _Errors:
    def report(self, exc, where):
        raise AssertionError(f"{where}: {exc!r}")


def _collector():
    sent: list = []
    streams = {DEFAULT_STREAM: Fields(["v"]), DEAD_LETTER_STREAM: Fields(list("abcde"))}
    routers = {DEFAULT_STREAM: _Router(0, 1), DEAD_LETTER_STREAM: _Router(1, 5)}
    c = SpoutCollector("src", streams, routers, _Outbox(sent), _Errors(), lambda: None,
                       _Ledger())
    c.msg_log = []
    return c, sent


def _tick(c, now: float) -> None:  # the spout loop's queue check
    if c.gate is not None:
        c.tick_gate(now)


def _ids(sent) -> list:
    return [m[1][0] for m in sent if m[0] == 0]


def test_a_second_rollback_during_a_hold_keeps_what_the_first_hold_held():
    c, sent = _collector()
    queue = deque(range(8))  # a spout whose fail re-queues at the back

    def next_tuple():
        m = queue.popleft()
        c.emit([m], msg_id=m)

    def rollback(now):
        failed, c.msg_log = c.msg_log, []
        c.hold_new_emits(failed, now, 30.0)
        queue.extend(failed)

    for _ in range(4):
        next_tuple()
    rollback(0.0)  # fails 0..3
    for _ in range(5):
        next_tuple()  # new 4..7 held, then replay 0 goes
    rollback(1.0)  # fails 0 only: 4..7 were never sent
    while queue:
        next_tuple()
    assert _ids(sent) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 4, 5, 6, 7]
    assert c.gate is None or not c.gate.held


def test_a_dead_letter_passes_the_unanchored_check_and_ends_the_wait_for_its_replay():
    c, sent = _collector()
    c.anchoring = True  # a replaying spout where the topology checkpoints with acking

    class _Context:
        component_id = "src"

    retries = RetryService({"topology.max.replays": 0}, _Context(), c)
    c.hold_new_emits([7], 0.0, 30.0)
    assert not retries.schedule(7, ["row7"])  # given up: its dead letter goes
    assert c.refused is None and retries.dead_letters == 1
    c.emit([8], msg_id=8)  # no replay of 7 will come: new tuples go
    assert [m[0] for m in sent] == [1, 0]


def test_the_hold_ends_at_end_of_stream_with_what_it_held_sent():
    c, sent = _collector()
    c.hold_new_emits([1], 0.0, 30.0)
    c.emit([2], msg_id=2)
    assert sent == []
    c.release_held(0.0)  # the spout's stream ended (or it drains)
    assert _ids(sent) == [2]
    c.emit([3], msg_id=3)
    assert _ids(sent) == [2, 3]


def test_the_holds_deadline_starts_when_the_task_resumes():
    c, sent = _collector()
    c.hold_new_emits([1], 0.0, 30.0)  # the rollback; its pause lasts until t=100
    _tick(c, 100.0)  # the first queue check after the resume
    c.emit([2], msg_id=2)
    _tick(c, 129.0)
    assert sent == []
    c.emit([1], msg_id=1)
    assert _ids(sent) == [1, 2]


def test_a_zero_message_timeout_still_holds_new_emits_behind_the_replays():
    c, sent = _collector()
    c.hold_new_emits([1], 100.0, 0.0)
    _tick(c, 100.0)
    c.emit([2], msg_id=2)
    _tick(c, 101.0)
    c.emit([1], msg_id=1)
    assert _ids(sent) == [1, 2] and c.late_replays == 0


def test_unhashable_msg_ids_at_a_rollback_are_not_held_for():
    c, sent = _collector()
    c.hold_new_emits([[0, 17], 3], 0.0, 30.0)  # (a spout's [partition, offset] ids)
    c.emit([[0, 18]], msg_id=[0, 18])  # new: held behind 3
    c.emit([3], msg_id=3)
    c.emit([[0, 17]], msg_id=[0, 17])
    assert _ids(sent) == [3, [0, 18], [0, 17]]
    assert c.unhashable_replays == 1


def test_direct_emits_count_once_while_a_gate_is_up():
    c, sent = _collector()
    c.hold_new_emits([1], 0.0, 30.0)
    c.emit_direct(_TASK, [2], msg_id=2)  # held
    c.emit_direct(_TASK, [1], msg_id=1)  # the replay, then 2
    assert _ids(sent) == [1, 2] and c.emitted == 2


# -- several spout tasks: a lease given back keeps its start -----------------------------


def test_a_block_given_back_twice_after_rollbacks_to_one_checkpoint_keeps_its_start():
    from connectors.spark.handoff import HandoffCore

    h = HandoffCore(max_batches=2, max_rows=1000, wait_for_acks=True)
    h.enter(0, [("X", 200)])
    assert h.take(task="B")[5] == 0
    h.reopened("B", {(0, 0): 120})  # rollback 1: B's committed position
    assert h.take(task="C")[5] == 120  # C takes it on
    h.reopened("C", {})  # rollback 2 to the same checkpoint: C's state names no X
    assert h.take(task="C")[5] == 120  # not 0: rows 0..119 are committed


# -- the submit rules ----------------------------------------------------------------------


def _spout_topology(spout):
    from tests.components import StatefulWordCount
    from topology import TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("count", StatefulWordCount()).fields_grouping("live", ("key",))
    return b.create_topology()


@pytest.mark.parametrize("ackers", [0, 1])
def test_a_source_that_commits_on_entry_is_refused_where_the_topology_checkpoints(ackers):
    from cluster._plan import plan
    from topology import StatefulSpout, TopologyError

    class CommitsOnEntry(StatefulSpout):  # as StreamingDataFrameSpout(msg_ids=False)
        outputs = ("key",)
        emits_msg_ids = False
        commits_on_entry = True

        def next_tuple(self):
            raise StopIteration

    with pytest.raises(TopologyError, match="spout 'live' .*commits"):
        plan(_spout_topology(CommitsOnEntry()), {"topology.acker.executors": ackers})


def test_a_stateful_spout_without_msg_ids_is_accepted_with_acking():
    from cluster._plan import plan
    from topology import StatefulSpout

    class KeepsPosition(StatefulSpout):
        outputs = ("key",)
        emits_msg_ids = False

        def next_tuple(self):
            raise StopIteration

    plan(_spout_topology(KeepsPosition()), {"topology.acker.executors": 1})


def test_the_spout_loop_sends_what_the_hold_kept_before_its_stream_ends():
    """The executor without Ray: a hold up when ``next_tuple`` raises ``StopIteration``
    ends, and what it held is sent before the stream ends."""
    from actors import make_executor
    from tests._util import until
    from tests.components import CollectorBolt
    from topology import IterableSpout, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(7,)], fields=("v",)))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    conf = {"topology.acker.executors": 0, "topology.producer.batch.size": 1}
    spout = make_executor("t", b.create_topology(), conf, 2, {1: 0, 2: 0})
    downstream: list = []
    spout.connect({1: lambda items: downstream.extend(items) or len(items)})
    # a replay that will not come (the hold's deadline is far off)
    spout.collector.hold_new_emits([999], time.monotonic(), 30.0)
    spout.start()
    try:
        assert spout.done.wait(10)
        until(lambda: downstream, 5, interval=0.001)
        assert downstream[0][1] == (7,)  # (then the end of its stream)
    finally:
        spout.stop()
