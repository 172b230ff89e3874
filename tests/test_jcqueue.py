"""JCQueue, batch inserters and wait strategies, without Ray.

Ports the scenarios of Storm's JCQueueTest and JCQueueBackpressureTest (storm-client's
``org.apache.storm.utils`` tests).
"""

from __future__ import annotations

import threading
import time

import pytest

from backpressure import (
    BatchInserter,
    JCQueue,
    ParkWaitStrategy,
    ProgressiveWaitStrategy,
    QueueInterrupted,
    RateTracker,
    SleepWaitStrategy,
    make_wait_strategy,
)
from tests._util import until
from topology import make_config


def _drain(q: JCQueue) -> list:
    out: list = []
    q.consume(out.append)
    return out


# -- JCQueueBackpressureTest -----------------------------------------------------------

def test_basic_back_pressure():
    q = JCQueue("bp", 64, 1, bp_wait=ParkWaitStrategy(0))
    for i in range(64):
        assert q.try_publish(i), i
    for i in range(64, 70):
        assert not q.try_publish(i)
    assert q.size() == 64 and q.overflow_count() == 0
    assert q.insert_failures == 6
    got: list = []
    assert q.consume(got.append, exit_cond=lambda: len(got) < 1) == 1
    assert q.size() == 63
    assert q.try_publish(99)


def test_no_reordering_under_back_pressure():
    q = JCQueue("bp", 64, 1, bp_wait=ParkWaitStrategy(0))
    for i in range(100):
        if not q.is_empty_overflow() or not q.try_publish(i):
            assert q.try_publish_to_overflow(i)
    assert q.size() == 64 and q.overflow_count() == 36
    assert _drain(q) == list(range(100))


# -- JCQueueTest ------------------------------------------------------------------------

def test_first_message_first():
    q = JCQueue("ff", 16, 1, bp_wait=ParkWaitStrategy(100))
    q.publish("FIRST")
    stop = threading.Event()

    def producer():
        while not stop.is_set():
            try:
                q.publish("OTHER")
            except QueueInterrupted:
                return

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for t in threads:
        t.start()
    first: list = []
    while not first:
        q.consume(first.append, exit_cond=lambda: not first)
    stop.set()
    q.interrupt()
    for t in threads:
        t.join(5)
    assert first[0] == "FIRST"


@pytest.mark.parametrize("batch", [1, 10])
def test_in_order(batch):
    """One producer publishes 0, 1, 2...; the consumer sees them strictly in order, no gaps."""
    q = JCQueue("order", 1024, batch, bp_wait=ParkWaitStrategy(100))
    stop = threading.Event()
    published = [0]

    def producer():
        i = 0
        try:
            while not stop.is_set():
                q.publish(i)
                i += 1
                published[0] = i
            q.flush()
        except QueueInterrupted:
            pass

    t = threading.Thread(target=producer)
    t.start()
    seen: list = []

    def consumed_1000():
        q.consume(seen.append)
        return len(seen) > 1000

    until(consumed_1000, 10, "1000 consumed", interval=0)
    stop.set()
    t.join(5)
    q.consume(seen.append)
    assert len(seen) > 1000
    assert seen == list(range(len(seen)))


def test_publish_blocks_until_consumer_makes_room():
    q = JCQueue("blk", 4, 1, bp_wait=ParkWaitStrategy(100))
    for i in range(4):
        q.publish(i)
    done = threading.Event()

    def producer():
        q.publish(4)
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    # queue full: the publish found it so, waited, tried again, and is still waiting
    until(lambda: q.insert_failures >= 2, 5, "the publish retrying", interval=0.001)
    assert not done.is_set()
    got: list = []
    q.consume(got.append, exit_cond=lambda: len(got) < 1)
    assert done.wait(5)
    t.join()
    assert got + _drain(q) == [0, 1, 2, 3, 4]


def test_interrupt_unblocks_a_waiting_publisher():
    q = JCQueue("int", 2, 1)
    q.publish(1)
    q.publish(2)
    err: list = []

    def producer():
        try:
            q.publish(3)
        except QueueInterrupted as e:
            err.append(e)

    t = threading.Thread(target=producer)
    t.start()
    # interrupt() also fails a publish that starts after it: wait until this one waits
    until(lambda: q.insert_failures > 0, 5, "the publish waiting", interval=0.001)
    assert t.is_alive()
    q.interrupt()
    t.join(5)
    assert err and not t.is_alive()


# -- batching -----------------------------------------------------------------------------

def test_batch_is_held_until_full_or_flushed():
    q = JCQueue("b", 100, 10)
    for i in range(9):
        assert q.try_publish(i)
    assert q.size() == 0 and q.pending_in_inserters() == 9
    q.try_publish(9)  # fills the batch: it leaves
    assert q.size() == 10
    q.try_publish(10)
    assert q.try_flush() and q.size() == 11


def test_producer_batch_size_clamped_to_half_capacity():
    assert JCQueue("c", 64, 1000).producer_batch_size == 32


def test_try_publish_fails_when_full_batch_cannot_leave():
    q = JCQueue("f", 4, 2)
    for i in range(4):
        assert q.try_publish(i)
    assert q.size() == 4
    assert q.try_publish(4) and q.try_publish(5)  # batch [4, 5] is full but cannot leave
    assert not q.try_publish(6)
    assert _drain(q) == [0, 1, 2, 3]
    assert q.try_publish(6)  # the full batch leaves first, then 6 starts a new one
    q.flush()
    assert _drain(q) == [4, 5, 6]


def _room_sink(seen: list, room: list):
    """A sink taking at most ``room[0]`` items in all (a prefix), recording them in ``seen``."""
    def sink(items):
        n = min(room[0], len(items))
        seen.extend(items[:n])
        room[0] -= n
        return n

    return sink


def test_try_append_holds_the_batch_it_fills_until_the_next_insert_or_flush():
    seen: list = []
    room = [10]
    ins = BatchInserter(_room_sink(seen, room), 2)
    assert ins.try_append(0) and ins.try_append(1)
    assert seen == [] and ins.batch == [0, 1]  # full, held (for an ack to fold into 1)
    assert ins.try_append(2)  # the full batch leaves first
    assert seen == [0, 1] and ins.batch == [2] and ins.transferred == 2
    assert ins.try_append(3)
    room[0] = 0
    assert not ins.try_append(4)  # full and cannot leave: nothing appended
    assert ins.batch == [2, 3]
    room[0] = 10
    assert ins.try_flush() and seen == [0, 1, 2, 3]


def test_partial_insert_keeps_order():
    seen: list = []
    room = [3]
    ins = BatchInserter(_room_sink(seen, room), 5)
    for i in range(5):
        ins.try_publish(i)
    assert seen == [0, 1, 2] and ins.batch == [3, 4]
    room[0] = 10
    assert ins.try_flush() and seen == [0, 1, 2, 3, 4]


def test_publish_all_waits_and_keeps_order():
    q = JCQueue("pa", 10, 1)
    out: list = []
    t = threading.Thread(target=q.publish_all, args=(list(range(100)),))
    t.start()

    def consumed_all():
        q.consume(out.append)
        return len(out) == 100

    # a consume every ms: publish_all finds the queue full between them
    until(consumed_all, 10, "100 consumed", interval=0.001)
    t.join(5)
    assert q.insert_failures > 0
    assert out == list(range(100))


# -- overflow ----------------------------------------------------------------------------

def test_overflow_limit_drops_and_counts():
    q = JCQueue("o", 2, 1, overflow_limit=3)
    accepted = sum(q.try_publish_to_overflow(i) for i in range(10))
    assert accepted == 3 and q.dropped_messages == 7 and q.overflow_count() == 3


def test_overflow_unbounded_when_limit_zero():
    q = JCQueue("o", 2, 1, overflow_limit=0)
    assert all(q.try_publish_to_overflow(i) for i in range(10_000))
    assert q.dropped_messages == 0


def test_consume_stops_on_exit_condition_before_overflow():
    q = JCQueue("x", 4, 1)
    for i in range(4):
        q.try_publish(i)
    q.try_publish_to_overflow(4)
    got: list = []
    assert q.consume(got.append, exit_cond=lambda: len(got) < 2) == 2
    assert got == [0, 1] and q.overflow_count() == 1
    assert _drain(q) == [2, 3, 4]


# -- metrics -----------------------------------------------------------------------------

def test_metrics_report_population_and_failures():
    q = JCQueue("m", 8, 1)
    for i in range(10):
        q.try_publish(i)
    q.try_publish_to_overflow("x")
    m = q.metrics()
    assert (m.capacity, m.population, m.overflow, m.insert_failures) == (8, 8, 1, 2)
    assert m.pct_full == 1.0
    assert m.arrival_rate_secs > 0 and m.sojourn_time_ms > 0


def test_rate_tracker_window():
    now = [0.0]
    r = RateTracker(10.0, 10, clock=lambda: now[0])
    for _ in range(20):
        now[0] += 0.5
        r.notify(100)
    assert r.rate() == pytest.approx(200.0, rel=0.1)
    now[0] += 30  # the window has passed: nothing recent
    assert r.rate() == 0.0


# -- wait strategies ---------------------------------------------------------------------

def test_progressive_levels():
    w = ProgressiveWaitStrategy(2, 3, 1)
    c = 0
    for expected in (1, 2, 3, 4, 5):
        c = w.idle(c)
        assert c == expected
    t0 = time.perf_counter()
    assert w.idle(c) == 5  # level 3: sleeps, count stays
    assert time.perf_counter() - t0 >= 0.0009


def test_make_wait_strategy_from_config():
    conf = make_config({"topology.bolt.wait.strategy": "park",
                        "topology.bolt.wait.park.microsec": 5})
    assert isinstance(make_wait_strategy(conf, "bolt"), ParkWaitStrategy)
    spout = make_wait_strategy(make_config(), "spout")
    assert isinstance(spout, ProgressiveWaitStrategy)
    assert (spout.level1_count, spout.level2_count) == (0, 0)  # Storm: idle spout sleeps at once
    conf = make_config({"topology.backpressure.wait.strategy": "sleep"})
    assert isinstance(make_wait_strategy(conf, "backpressure"), SleepWaitStrategy)
    with pytest.raises(ValueError, match="unknown wait situation"):
        make_wait_strategy(conf, "acker")


def test_every_insert_sets_the_wakeup_event():
    ev = threading.Event()
    q = JCQueue("w", 4, 1, overflow_limit=0, wakeup=ev)
    for insert in (lambda: q.try_fill([1]), lambda: q.try_publish_direct(2),
                   lambda: q.publish_remote([3, 4, 5]),  # the last one overflows
                   lambda: q.try_publish_to_overflow(6)):
        ev.clear()
        insert()
        assert ev.is_set()
    ev.clear()
    assert q.try_fill([7]) == 0 and not ev.is_set()  # full: nothing inserted, no wake-up
    assert _drain(q) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("strategy", [ProgressiveWaitStrategy(0, 0, 5000),
                                      ParkWaitStrategy(5_000_000), SleepWaitStrategy(5000)])
def test_a_wait_ends_when_its_wakeup_event_is_set(strategy):
    ev = threading.Event()
    timer = threading.Timer(0.05, ev.set)
    timer.start()
    t0 = time.monotonic()
    strategy.idle(5, ev)  # would last 5 s without the event
    assert time.monotonic() - t0 < 2.5
    timer.join()
