"""Backpressure between workers without Ray: Storm's BackPressureTrackerTest, ported; the
worker's aggregate and the senders' flags; the receiving side of an executor (overflow,
reminders per task, the check timer); the status wire format."""

from __future__ import annotations

import msgpack
import pytest

from actors import decode_status, encode_status, make_executor
from backpressure import (
    BackPressureStatus,
    BackPressureTracker,
    JCQueue,
    RemoteBackPressure,
    WorkerBackPressure,
)
from tests.components import SeqSpout
from topology import CollectorBolt, TopologyBuilder


class _Queue:
    """Storm's test mocks the JCQueue; only the overflow state matters to the tracker."""

    def __init__(self, overflow: int = 0) -> None:
        self.overflow = overflow

    def is_empty_overflow(self) -> bool:
        return self.overflow == 0


# -- BackPressureTrackerTest ----------------------------------------------------------------
WORKER = 7


def test_get_backpressure():
    tracker = BackPressureTracker(WORKER, {1: _Queue()})
    status = tracker.get_curr_status()
    assert status.worker_id == WORKER
    assert status.non_bp_tasks == (1,) and status.bp_tasks == ()


def test_set_backpressure():
    tracker = BackPressureTracker(WORKER, {1: _Queue(), 2: _Queue(5)})
    assert tracker.record_back_pressure(2) is True
    status = tracker.get_curr_status()
    assert status.bp_tasks == (2,) and status.non_bp_tasks == (1,)


def test_set_backpressure_with_existing_backpressure():
    tracker = BackPressureTracker(WORKER, {1: _Queue(5)})
    assert tracker.record_back_pressure(1) is True
    assert tracker.record_back_pressure(1) is False
    assert tracker.get_curr_status().bp_tasks == (1,)


def test_refresh_backpressure_with_empty_overflow():
    q = _Queue(3)
    tracker = BackPressureTracker(WORKER, {1: q})
    tracker.record_back_pressure(1)
    q.overflow = 0
    assert tracker.refresh_bp_task_list() is True
    status = tracker.get_curr_status()
    assert status.bp_tasks == () and status.non_bp_tasks == (1,)


def test_refresh_backpressure_with_non_empty_overflow():
    tracker = BackPressureTracker(WORKER, {1: _Queue(3)})
    tracker.record_back_pressure(1)
    assert tracker.refresh_bp_task_list() is False
    assert tracker.get_curr_status().bp_tasks == (1,)


def test_set_last_overflow_count_is_per_task():
    """STORM-3510: one task's reminder counter must not be another's."""
    tracker = BackPressureTracker(WORKER, {1: _Queue(), 2: _Queue()})
    tracker.set_last_overflow_count(1, 10_000)
    assert tracker.get_last_overflow_count(1) == 10_000
    assert tracker.get_last_overflow_count(2) == 0


# -- the worker's aggregate and the senders' flags ------------------------------------------
def test_worker_status_changes_only_on_transitions_and_ignores_reordered_reports():
    w = WorkerBackPressure(0, [1, 3])
    assert not w.any_backlogged
    assert w.update(1, True, 100.0, seq=1) is True
    assert w.update(1, True, 100.0, seq=2) is False  # a reminder: no change
    assert w.update(1, False, 0.0, seq=1) is False  # stale (older seq): ignored
    st = w.status()
    assert st.bp_tasks == (1,) and st.non_bp_tasks == (3,) and st.since == {1: 100.0}
    assert w.update(1, False, 0.0, seq=3) is True and not w.any_backlogged
    with pytest.raises(KeyError, match="task 2 is not owned by worker 0"):
        w.update(2, True, 1.0, seq=1)


def test_status_ids_increase_and_stale_statuses_are_ignored():
    w = WorkerBackPressure(1, [4, 5])
    w.update(4, True, 50.0, 1)
    first = w.status()
    w.update(4, False, 0.0, 2)
    second = w.status()
    assert second.status_id > first.status_id
    remote = RemoteBackPressure()
    assert remote.apply(second, now=51.0) == ([], [])
    assert remote.apply(first, now=52.0) is None  # arrived late: must not re-block task 4
    assert not remote.is_backlogged(4)


def test_remote_flags_are_per_task_and_record_halt_lag():
    remote = RemoteBackPressure()
    st = BackPressureStatus(2, (8,), (9,), status_id=10, since={8: 100.0})
    assert remote.apply(st, now=100.004) == ([8], [pytest.approx(0.004)])
    assert remote.is_backlogged(8) and not remote.is_backlogged(9)
    # a reminder with the same backlog: no new transition, no new halt-lag sample
    assert remote.apply(BackPressureStatus(2, (8,), (9,), 11, {8: 100.0}), now=101) == ([], [])
    # another worker's status does not touch worker 2's tasks
    remote.apply(BackPressureStatus(3, (), (1,), 5))
    assert remote.is_backlogged(8)
    remote.apply(BackPressureStatus(2, (), (8, 9), 12))
    assert remote.backlogged() == []


def test_direct_task_reports_are_ordered_per_task_and_record_halt_lag():
    """The direct status path: each task's own reports, ordered by that task's sequence."""
    remote = RemoteBackPressure()
    assert remote.apply_task(8, True, 100.0, 5, now=100.003) == pytest.approx(0.003)
    assert remote.is_backlogged(8)
    # a reminder: still backlogged, no second halt-lag sample
    assert remote.apply_task(8, True, 100.0, 6, now=101.0) is None and remote.is_backlogged(8)
    # another task's reports, with smaller numbers (another process), are its own
    assert remote.apply_task(9, True, 100.5, 1, now=100.5) == 0.0
    assert remote.apply_task(8, False, 0.0, 7) is None and not remote.is_backlogged(8)
    # the report sent before the clear, arriving after it, must not hold task 8 again
    assert remote.apply_task(8, True, 100.0, 6) is None and not remote.is_backlogged(8)
    assert remote.backlogged() == [9]


def test_status_wire_round_trip_and_malformed_statuses():
    st = BackPressureStatus(1, (2, 5), (3,), 99, {2: 1.5, 5: 2.5})
    back = BackPressureStatus.from_wire(decode_status(encode_status(st.to_wire())))
    assert back == st
    for bad in ([1, 2], [1, 2, [3], [4], []], ["x", 1, [], [], []], [1, 1, ["a"], [], [0.0]],
                None, {"a": 1}):
        with pytest.raises(ValueError):
            BackPressureStatus.from_wire(bad)
    with pytest.raises(ValueError):
        decode_status(b"\xc1")
    with pytest.raises(ValueError):
        decode_status(msgpack.packb(list(range(10))) * 100_000, max_bytes=1000)


# -- the receiving side of an executor --------------------------------------------------------
def _receiver(conf: dict):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology()  # sink = task 1, src = task 2
    base = {"topology.executor.receive.buffer.size": 4, "topology.producer.batch.size": 2,
            "topology.batch.flush.interval.millis": 0}
    return make_executor("t", topo, {**base, **conf}, 1, {1: 1, 2: 0})


def _items(start: int, n: int) -> list:
    return [[0, [i, f"k{i}"]] for i in range(start, start + n)]


def test_remote_arrivals_overflow_report_once_then_remind_every_n_per_task():
    core = _receiver({"topology.backpressure.resend.size": 10})
    assert core.remote_upstream == {2}
    ack, report = core.inbound.accept_frame(2, 0, _items(0, 4), remote=True)
    assert (ack, report) == (0, None) and core.queue.size() == 4  # fits: nothing to say
    ack, report = core.inbound.accept_frame(2, 1, _items(4, 3), remote=True)
    task, backlogged, since, seq, reminder = report
    assert (task, backlogged, reminder) == (1, True, False) and since > 0
    assert core.queue.overflow_count() == 3
    # more overflow: no new report until 10 more tuples have gone to the overflow
    accept = core.inbound.accept_frame
    reports = [accept(2, 2 + i, _items(7 + i, 1), remote=True)[1] for i in range(9)]
    assert reports == [None] * 9
    ack, report = core.inbound.accept_frame(2, 11, _items(16, 1), remote=True)
    assert ack == 11 and report[1] is True and report[4] is True and report[3] > seq
    # the check timer clears the task only once the overflow has drained
    assert core.inbound.check_backpressure() is None
    got: list = []
    core.queue.consume(got.append)  # the queue, then the overflow: one upstream's order
    assert [v[0] for _, _, v in got] == list(range(17))
    report = core.inbound.check_backpressure()
    assert report[:2] == (1, False) and core.inbound.check_backpressure() is None


def test_frames_out_of_order_are_restored_and_duplicates_dropped():
    core = _receiver({})
    assert core.inbound.accept_frame(2, 1, _items(2, 2), remote=True) == (-1, None)  # early: waits
    assert core.queue.size() == 0
    assert core.inbound.accept_frame(2, 0, _items(0, 2), remote=True)[0] == 1  # both now in
    assert core.inbound.accept_frame(2, 0, _items(0, 2), remote=True)[0] == 1  # duplicate
    got: list = []
    core.queue.consume(got.append)
    assert [v[0] for _, _, v in got] == [0, 1, 2, 3]
    assert core.inbound.duplicate_frames == 1 and core.inbound.early_frames == 1
    with pytest.raises(ValueError, match="does not consume from task 5"):
        core.inbound.accept_frame(5, 0, _items(0, 1), remote=True)


def test_overflow_limit_drops_exactly_and_counts():
    core = _receiver({"topology.executor.overflow.limit": 5})
    sent = 0
    for seq in range(6):
        core.inbound.accept_frame(2, seq, _items(sent, 3), remote=True)
        sent += 3
    q = core.queue
    assert q.size() == 4 and q.overflow_count() == 5
    assert q.dropped_messages == sent - 4 - 5 and core.stats().dropped_messages == 9


def test_publish_remote_keeps_order_when_a_batch_is_split():
    """A remote batch split between the receive queue and the overflow in the middle of a
    consume: the overflow's tuples must not overtake the one left in the receive queue."""
    q = JCQueue("t", 4)
    q.try_fill([("l", i) for i in range(4)])
    got: list = []

    def handler(x):
        got.append(x)
        if x == ("l", 0):  # one slot free: r0 goes to the queue, r1..r5 to the overflow
            assert q.publish_remote([("r", i) for i in range(6)]) == (5, 0)

    q.consume(handler)
    assert got == [("l", i) for i in range(4)]  # r0 is still queued: overflow must wait
    q.consume(got.append)
    assert [x for x in got if x[0] == "r"] == [("r", i) for i in range(6)]
    assert q.publish_remote([("r", 6)]) == (0, 0)  # overflow empty again: into the queue


def test_a_new_epoch_restarts_the_numbering_and_older_frames_are_stale():
    """A sender that may have lost frames (a restart, a dead transfer actor) starts a
    larger epoch from seq 0: frames held back for the old epoch are dropped (counted), and
    later frames of the old epoch are stale."""
    core = _receiver({"topology.executor.receive.buffer.size": 64})
    assert core.inbound.accept_frame(2, 0, _items(0, 2), True, 0)[0] == 0
    assert core.inbound.accept_frame(2, 2, _items(4, 2), True, 0)[0] == 0  # seq 1 was lost
    assert core.inbound.accept_frame(2, 0, _items(10, 2), True, 5)[0] == 0  # new epoch: in at once
    assert core.inbound.epoch_resets == 1 and core.inbound.lost_frames == 1
    assert core.inbound.accept_frame(2, 1, _items(2, 2), True, 0) == (None, None)  # stale
    assert core.inbound.stale_frames == 1
    got: list = []
    core.queue.consume(got.append)
    assert [v[0] for _, _, v in got] == [0, 1, 10, 11]


def test_a_restarted_receiver_starts_from_the_first_frame_it_sees():
    core = _receiver({})
    core.inbound.reconstructed = True  # the senders go on numbering where they were
    assert core.inbound.accept_frame(2, 41, _items(0, 1), True, 0)[0] == 41
    assert core.inbound.accept_frame(2, 42, _items(1, 1), True, 0)[0] == 42
    assert core.inbound.early_frames == 0 and core.queue.size() == 2
