"""Windowed bolts without Ray: ``Count``/``Duration``, ``WindowedBolt``'s config, ``WindowSpec``
checks, timestamps, and the ``WindowEngine``.

Storm's ``WindowManagerTest`` and ``WaterMarkEventGeneratorTest`` cases are ported with their
scenarios and expectations, adapted where our bounds differ (half-open, aligned to the epoch;
see ``topology/windows.py``); property tests compare the engine with brute-force
definitions (Spark SQL's ``window()`` for duration windows).
"""

from __future__ import annotations

import pickle
import random
from datetime import datetime, timedelta, timezone

import pytest

from actors.windowing import (
    EXPIRE_EVENTS_THRESHOLD,
    BadTimestamp,
    Fire,
    WindowedBoltExecutor,
    WindowEngine,
    extract_timestamp,
)
from topology import (
    SYSTEM_COMPONENT_ID,
    SYSTEM_TICK_STREAM_ID,
    ConfigError,
    Count,
    Duration,
    Fields,
    TopologyError,
    Tuple,
    WindowedBolt,
    WindowSpec,
)

LEN_C = "topology.bolts.window.length.count"
LEN_D = "topology.bolts.window.length.duration.ms"
SLIDE_C = "topology.bolts.window.sliding.interval.count"
SLIDE_D = "topology.bolts.window.sliding.interval.duration.ms"
TS_FIELD = "topology.bolts.tuple.timestamp.field.name"
LAG = "topology.bolts.tuple.timestamp.max.lag.ms"
WM_INTERVAL = "topology.bolts.watermark.event.interval.ms"
LATE = "topology.bolts.late.tuple.stream"


def seq(start: int, stop: int | None = None) -> list[int]:
    """Storm's test helper: ``[start, ..., stop]`` inclusive."""
    return list(range(start, (start if stop is None else stop) + 1))


def windows(fires: list[Fire]) -> list[list]:
    return [f.window.get() for f in fires if f.window is not None]


def event_engine(length, sliding, lag=0, tasks=(1,), interval=1000) -> WindowEngine:
    return WindowEngine(WindowSpec(length, sliding, timestamp_field="ts", lag_ms=lag,
                                   watermark_interval_ms=interval), tasks)


class Clock:
    """Distinct watermark slots for each ``advance`` of an event-time engine."""

    def __init__(self, interval: int = 1000) -> None:
        self.interval = interval
        self.now = 0

    def tick(self) -> int:
        self.now += self.interval
        return self.now


# -- Count, Duration ---------------------------------------------------------------------------

def test_count_and_duration_hold_whole_positive_amounts():
    assert Count(3).n == 3
    assert Duration(250).ms == 250
    assert Duration.of(7) == Duration(7)
    assert Duration.seconds(2).ms == 2_000
    assert Duration.seconds(0.5).ms == 500
    assert Duration.minutes(3).ms == 180_000
    assert Duration.hours(1).ms == 3_600_000
    assert Duration.days(2).ms == 172_800_000
    assert Count(4.0).n == 4 and isinstance(Count(4.0).n, int)
    with pytest.raises(AttributeError):
        Count(3).n = 4  # frozen


@pytest.mark.parametrize("make", [
    lambda: Count(0), lambda: Count(-1), lambda: Count(1.5), lambda: Count(True),
    lambda: Count("3"), lambda: Duration(0), lambda: Duration(-5), lambda: Duration(2.5),
    lambda: Duration.seconds(0), lambda: Duration.seconds(0.0001), lambda: Duration.of(None),
])
def test_count_and_duration_reject_non_positive_or_fractional(make):
    with pytest.raises(ValueError):
        make()


# -- WindowedBolt configuration ----------------------------------------------------------------

class Top(WindowedBolt):
    outputs = ("word", "count")

    def execute(self, window):
        self.seen = window.get()


@pytest.mark.parametrize("configure, expected", [
    # BaseWindowedBolt.withWindow(Count): slides by every tuple
    (lambda b: b.with_window(Count(5)), {LEN_C: 5, SLIDE_C: 1}),
    # withWindow(Duration): also slides by every tuple (Count(1)), not by its length
    (lambda b: b.with_window(Duration(500)), {LEN_D: 500, SLIDE_C: 1}),
    (lambda b: b.with_window(Count(5), Count(2)), {LEN_C: 5, SLIDE_C: 2}),
    (lambda b: b.with_window(Count(5), Duration(100)), {LEN_C: 5, SLIDE_D: 100}),
    (lambda b: b.with_window(Duration(500), Count(3)), {LEN_D: 500, SLIDE_C: 3}),
    (lambda b: b.with_window(Duration(500), Duration(100)), {LEN_D: 500, SLIDE_D: 100}),
    (lambda b: b.with_tumbling_window(Count(10)), {LEN_C: 10, SLIDE_C: 10}),
    (lambda b: b.with_tumbling_window(Duration.seconds(1)), {LEN_D: 1000, SLIDE_D: 1000}),
])
def test_with_window_writes_storms_keys(configure, expected):
    bolt = Top()
    assert configure(bolt) is bolt
    assert bolt.get_component_configuration() == expected


def test_with_window_replaces_the_previous_window_and_chains():
    bolt = (Top().with_window(Count(5), Count(2))
            .with_tumbling_window(Duration(1000))
            .with_timestamp_field("ts")
            .with_lag(Duration(50))
            .with_watermark_interval(Duration(200))
            .with_late_tuple_stream("late"))
    assert bolt.get_component_configuration() == {
        LEN_D: 1000, SLIDE_D: 1000, TS_FIELD: "ts", LAG: 50, WM_INTERVAL: 200, LATE: "late"}
    assert bolt.window_spec() == WindowSpec(Duration(1000), Duration(1000), "ts", 50, 200, "late")
    # the config handed out is a copy
    bolt.get_component_configuration()[LEN_D] = 1
    assert bolt.window_spec().length == Duration(1000)


def test_with_window_rejects_wrong_types_and_a_slide_longer_than_the_window():
    with pytest.raises(TypeError, match="Count or a Duration"):
        Top().with_window(5)
    with pytest.raises(TypeError, match="Count or a Duration"):
        Top().with_window(Count(5), 2)
    with pytest.raises(ValueError, match="Top: the sliding interval"):
        Top().with_window(Count(2), Count(5))
    with pytest.raises(TypeError):
        Top().with_lag(50)
    with pytest.raises(ValueError):
        Top().with_timestamp_field("")
    with pytest.raises(ValueError):
        Top().with_late_tuple_stream(None)


def test_windowed_bolt_defaults_and_pickling():
    bolt = Top().with_window(Count(3))
    declared = {}

    class Declarer:
        def declare(self, fields, stream_id="default"):
            declared[stream_id] = fields

    bolt.declare_output_fields(Declarer())
    assert declared == {"default": Fields("word", "count")}
    with pytest.raises(NotImplementedError):
        WindowedBolt().execute(None)
    with pytest.raises(ConfigError, match="no window length.*with_window"):
        Top().window_spec()
    copy = pickle.loads(pickle.dumps(bolt))
    assert copy.window_spec() == WindowSpec(Count(3), Count(1))


# -- WindowSpec --------------------------------------------------------------------------------

def test_from_config_defaults_follow_storm():
    spec = WindowSpec.from_config({LEN_D: 1000, "topology.debug": True})
    assert spec == WindowSpec(Duration(1000), Count(1), None, 0, 1000, None)
    assert not spec.event_time
    assert WindowSpec.from_config({LEN_C: 3, TS_FIELD: "t"}).event_time


@pytest.mark.parametrize("conf, words", [
    ({}, ["bolt 'agg'", "no window length", LEN_C, LEN_D]),
    ({LEN_C: 3, LEN_D: 100}, ["bolt 'agg'", "both", LEN_C, LEN_D]),
    ({LEN_C: 3, SLIDE_C: 1, SLIDE_D: 10}, ["bolt 'agg'", "both", SLIDE_C, SLIDE_D]),
    ({LEN_C: 0}, ["bolt 'agg'", LEN_C, "> 0"]),
    ({LEN_D: -10}, ["bolt 'agg'", LEN_D, "> 0"]),
    ({LEN_D: 10, SLIDE_D: "5"}, ["bolt 'agg'", SLIDE_D]),
    ({LEN_D: 10, LAG: 1.5}, ["bolt 'agg'", LAG]),
])
def test_from_config_errors_name_the_component_and_key(conf, words):
    with pytest.raises(ConfigError) as err:
        WindowSpec.from_config(conf, component="agg")
    for w in words:
        assert w in str(err.value)


@pytest.mark.parametrize("spec, key", [
    (WindowSpec(Count(3), Count(5)), SLIDE_C),
    (WindowSpec(Duration(100), Duration(200)), SLIDE_D),
    (WindowSpec(Duration(100), Count(1), "ts", lag_ms=-1), LAG),
    (WindowSpec(Duration(100), Count(1), "ts", watermark_interval_ms=0), WM_INTERVAL),
    (WindowSpec(Duration(100), Count(1), late_stream="late"), LATE),
    (WindowSpec(Duration(100), Count(1), "ts", late_stream="__late"), LATE),
    (WindowSpec(Duration(100), Count(1), ""), TS_FIELD),
    (WindowSpec(100, Count(1)), "window length"),
])
def test_validate_errors_name_the_component_and_key(spec, key):
    with pytest.raises(TopologyError) as err:
        spec.validate("agg")
    assert "bolt 'agg'" in str(err.value) and key in str(err.value)
    assert isinstance(err.value, ValueError)


def test_validate_accepts_mixed_kinds_and_equal_slides():
    WindowSpec(Count(2), Duration(10_000)).validate("agg")   # no length/slide comparison
    WindowSpec(Duration(10), Count(50)).validate("agg")
    WindowSpec(Count(5), Count(5), "ts", 10, 100, "late").validate("agg")


@pytest.mark.parametrize("spec, conf, ok", [
    # processing time: length + slide must stay below the timeout (Storm's check, strict)
    (WindowSpec(Duration(20_000), Duration(9_000)), {"topology.message.timeout.secs": 30}, True),
    (WindowSpec(Duration(20_000), Duration(10_000)), {"topology.message.timeout.secs": 30},
     False),
    (WindowSpec(Duration(20_000), Duration(10_000)), {}, False),   # default 30 s
    (WindowSpec(Duration(40_000), Count(1)), {"topology.message.timeout.secs": 30}, False),
    (WindowSpec(Count(10), Duration(40_000)), {"topology.message.timeout.secs": 30}, False),
    (WindowSpec(Duration(40_000), Count(1)), {"topology.message.timeout.secs": 41}, True),
    # event time is not checked against the timeout
    (WindowSpec(Duration(40_000), Count(1), "ts"), {"topology.message.timeout.secs": 30}, True),
    # acking off: nothing times out
    (WindowSpec(Duration(40_000), Count(1)), {"topology.acker.executors": 0}, True),
])
def test_check_against_message_timeout(spec, conf, ok):
    if ok:
        spec.check_against("agg", conf)
    else:
        with pytest.raises(TopologyError, match="bolt 'agg'.*topology.message.timeout.secs"):
            spec.check_against("agg", conf)


@pytest.mark.parametrize("spec, pending, ackers, ok", [
    (WindowSpec(Count(80), Count(20)), 100, None, True),     # length + slide == pending
    (WindowSpec(Count(80), Count(21)), 100, None, False),
    (WindowSpec(Count(80), Count(21)), None, None, True),    # unset: unlimited
    (WindowSpec(Count(80), Count(21)), 100, 0, True),        # acking off: no pending limit
    (WindowSpec(Count(101), Duration(10)), 100, 2, False),   # count length alone
    (WindowSpec(Duration(10), Count(101)), 100, None, False),  # sliding count alone
    (WindowSpec(Count(80), Count(21), "ts"), 100, None, False),  # event time too
])
def test_check_against_max_spout_pending(spec, pending, ackers, ok):
    conf = {"topology.max.spout.pending": pending, "topology.acker.executors": ackers}
    if ok:
        spec.check_against("agg", conf)
    else:
        with pytest.raises(TopologyError, match="bolt 'agg'.*topology.max.spout.pending"):
            spec.check_against("agg", conf)


# -- timestamps --------------------------------------------------------------------------------

def test_extract_timestamp_numbers_and_datetimes():
    assert extract_timestamp({"ts": 1_700_000_000_123}, "ts") == 1_700_000_000_123
    assert extract_timestamp({"ts": 1234.9}, "ts") == 1234           # floored to whole ms
    naive = datetime(2024, 1, 2, 3, 4, 5, 678_900)
    utc = naive.replace(tzinfo=timezone.utc)
    expected = 1_704_164_645_678
    assert extract_timestamp({"ts": naive}, "ts") == expected         # naive read as UTC
    assert extract_timestamp({"ts": utc}, "ts") == expected
    plus2 = datetime(2024, 1, 2, 5, 4, 5, 678_900, tzinfo=timezone(timedelta(hours=2)))
    assert extract_timestamp({"ts": plus2}, "ts") == expected         # same instant
    assert extract_timestamp({"ts": datetime(1969, 12, 31, 23, 59, 59, 999_500)}, "ts") == -1


def test_extract_timestamp_from_a_tuple():
    tup = Tuple([7, 5_000], Fields("id", "ts"), "src", 1, "default")
    assert extract_timestamp(tup, "ts") == 5_000
    with pytest.raises(BadTimestamp, match="no timestamp field 'when'"):
        extract_timestamp(tup, "when")


@pytest.mark.parametrize("value, type_name", [
    (None, "NoneType"), ("1700000000000", "str"), (True, "bool"), (float("nan"), "float"),
    (float("inf"), "float"), ([1], "list"),
])
def test_bad_timestamp_names_the_field_and_type(value, type_name):
    with pytest.raises(BadTimestamp) as err:
        extract_timestamp({"ts": value}, "ts")
    assert isinstance(err.value, ValueError)
    assert err.value.field == "ts" and err.value.value_type == type_name
    assert "'ts'" in str(err.value) and type_name in str(err.value)
    again = pickle.loads(pickle.dumps(err.value))
    assert (again.field, again.value_type, str(again)) == ("ts", type_name, str(err.value))


# -- Storm's WindowManagerTest, ported ---------------------------------------------------------

def test_count_based_window():
    """WindowManagerTest.testCountBasedWindow: count 5, sliding every 2."""
    e = WindowEngine(WindowSpec(Count(5), Count(2)), [1])
    assert e.add(1, 1, None, 1) == []
    [f] = e.add(2, 1, None, 2)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired()) == (seq(1, 2),) * 2 + ([],)
    assert f.done == [] and f.window.start_timestamp is None and f.window.end_timestamp == 3
    e.add(3, 1, None, 3)
    [f] = e.add(4, 1, None, 4)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired()) == (seq(1, 4), seq(3, 4),
                                                                            [])
    assert f.done == seq(1)     # the next window (after 6) is 2..6
    e.add(5, 1, None, 5)
    [f] = e.add(6, 1, None, 6)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired()) == (seq(2, 6), seq(5, 6),
                                                                            seq(1))
    assert f.done == seq(2, 3)
    assert e.add(7, 1, None, 7) == []
    [f] = e.add(8, 1, None, 8)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired()) == (seq(4, 8), seq(7, 8),
                                                                            seq(2, 3))
    assert f.done == seq(4, 5) and e.held == 3 and e.windows_fired == 4


def test_tumbling_window():
    """WindowManagerTest.testTumblingWindow: count 3 tumbling."""
    e = WindowEngine(WindowSpec(Count(3), Count(3)), [1])
    assert e.add(1, 1, None, 0) == [] and e.add(2, 1, None, 0) == []
    [f] = e.add(3, 1, None, 0)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired(), f.done) == (
        seq(1, 3), seq(1, 3), [], seq(1, 3))
    assert e.held == 0
    e.add(4, 1, None, 0)
    e.add(5, 1, None, 0)
    [f] = e.add(6, 1, None, 0)
    assert (f.window.get(), f.window.get_new(), f.window.get_expired(), f.done) == (
        seq(4, 6), seq(4, 6), seq(1, 3), seq(4, 6))


@pytest.mark.parametrize("event_time", [False, True])
def test_expire_threshold(event_time):
    """WindowManagerTest.testExpireThreshold: a count window of 5 with an hour's slide
    acks the tuples pushed out of it every EXPIRE_EVENTS_THRESHOLD tuples, without waiting
    for the slide."""
    threshold, length = EXPIRE_EVENTS_THRESHOLD, 5
    if event_time:
        e = event_engine(Count(length), Duration.hours(1))
        for i in seq(1, threshold + 1):
            assert e.add(i, 1, i, 0) == []
        fires = e.advance(0)            # watermark 101 releases 1..100
    else:
        e = WindowEngine(WindowSpec(Count(length), Duration.hours(1)), [1])
        fires = []
        for i in seq(1, threshold):
            fires += e.add(i, 1, None, 1_000 + i)
            if i < threshold:
                assert fires == []
    assert fires == [Fire(None, seq(1, threshold - length))]
    assert e.windows_fired == 0 and e.held == length + event_time
    # the hour's boundary fires the last 5; the expired ones were never in a window
    [f] = e.close(10**9)
    assert f.window.get() == seq(threshold - length + 1 + event_time, threshold + event_time)
    assert f.window.get_expired() == [] and f.done == seq(threshold - length + 1,
                                                           threshold + event_time)
    assert e.held == 0


@pytest.mark.parametrize("length", [Count(100), Duration(100)])
def test_no_window_and_no_ack_before_the_first_watermark(length):
    """WindowManagerTest.testExpireThresholdWithWatermark{Count,Time}EvictionPolicy: nothing
    leaves before the first watermark; then the window holds 1..100, and the next one (after
    100 more) lets them all go."""
    e = event_engine(length, Count(100))
    for i in seq(1, 100):
        e.add(i, 1, i, 0)
    assert e.held == 100 and e.windows_fired == 0 and e.watermark_ms is None
    e.add(101, 1, 101, 0)
    [f] = e.advance(0)                  # watermark 101: 1..100 released, 100th triggers
    assert f.window.get() == seq(1, 100)
    # a tumbling count window is done at once; a 100 ms one keeps them for the next window
    count_length = isinstance(length, Count)
    assert f.done == (seq(1, 100) if count_length else [])
    for i in seq(102, 201):
        e.add(i, 1, i, 0)
    [f] = e.advance(1000)               # watermark 201: 101..200 released
    assert f.window.get() == seq(101, 200) and f.window.get_expired() == seq(1, 100)
    # all of 1..100 are gone after the second watermark
    assert f.done == (seq(101, 200) if count_length else seq(1, 100))


def test_time_based_window_expiry():
    """WindowManagerTest.testTimeBasedWindowExpiry: 100 ms windows (aligned here, sliding by
    50 ms): the tuples are in the windows that cover them, then gone; no empty windows."""
    e = WindowEngine(WindowSpec(Duration(100), Duration(50)), [1])
    now = 1_000
    for i in seq(1, 10):
        e.add(i, 1, None, now)
    [f] = e.advance(now + 60)           # [950, 1050)
    assert (f.window.get(), f.window.get_expired(), f.done) == (seq(1, 10), [], [])
    assert (f.window.start_timestamp, f.window.end_timestamp) == (950, 1050)
    [f] = e.advance(now + 120)          # [1000, 1100): the same tuples, none new
    assert (f.window.get(), f.window.get_new(), f.done) == (seq(1, 10), [], seq(1, 10))
    assert e.advance(now + 180) == [] and e.held == 0


def test_time_based_window_new_and_expired():
    """WindowManagerTest.testTimeBasedWindow: old tuples expire and are listed once in the
    next window's get_expired(); get_new() lists what arrived since."""
    e = WindowEngine(WindowSpec(Duration(1000), Duration(500)), [1])
    for i in seq(1, 50):
        e.add(i, 1, None, 9_000)
    for i in seq(51, 100):
        e.add(i, 1, None, 10_000)
    fires = e.advance(10_600)
    assert [(f.window.start_timestamp, f.window.get()) for f in fires] == [
        (8_500, seq(1, 50)), (9_000, seq(1, 50)), (9_500, seq(51, 100))]
    assert fires[2].window.get_expired() == seq(1, 50) and fires[2].window.get_new() == seq(51, 100)
    for i in seq(101, 200):
        e.add(i, 1, None, 10_700)
    [f] = e.advance(11_000)
    assert f.window.get() == seq(51, 200) and f.window.get_new() == seq(101, 200)
    assert f.window.get_expired() == [] and f.done == seq(51, 100)


def test_event_time_based_window():
    """WindowManagerTest.testEventTimeBasedWindow: 20 ms windows sliding by 10 ms; the lag of
    5 ms gives Storm's watermarks 631 and 834 (its 609 becomes 602: no window either way)."""
    e, clock = event_engine(Duration(20), Duration(10), lag=5), Clock()
    for i, ts in [(1, 603), (2, 605), (3, 607)]:
        e.add(i, 1, ts, 0)
    assert e.advance(clock.tick()) == [] and e.watermark_ms == 602
    for i, ts in [(4, 618), (5, 626), (6, 636)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())
    assert e.watermark_ms == 631
    assert windows(fires) == [seq(1, 3), seq(1, 4), seq(4, 5)]
    assert [f.window.get_expired() for f in fires] == [[], [], seq(1, 3)]
    assert [f.window.get_new() for f in fires] == [seq(1, 3), seq(4), seq(5)]
    assert [f.done for f in fires] == [[], seq(1, 3), seq(4)]
    assert [(f.window.start_timestamp, f.window.end_timestamp) for f in fires] == [
        (590, 610), (600, 620), (610, 630)]
    for i, ts in [(7, 825), (8, 826), (9, 827), (10, 839)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())
    assert e.watermark_ms == 834
    assert windows(fires) == [seq(5, 6), seq(6), seq(7, 9)]
    # Storm reports [] for the last: it drops the expiry of 6 found while scanning the empty
    # window [640, 660); here 6 is listed, having left since the previous window
    assert [f.window.get_expired() for f in fires] == [seq(4), seq(5), seq(6)]
    assert [f.window.get_new() for f in fires] == [seq(6), [], seq(7, 9)]
    assert [f.done for f in fires] == [seq(5), seq(6), []]


def test_count_based_window_with_event_ts():
    """WindowManagerTest.testCountBasedWindowWithEventTs: the last 3 tuples every 10 ms.
    Storm fires [4, 5, 6] three times across the gap (at 640, 650 and 660); a count window
    fires here only when it has a new tuple, so once."""
    e, clock = event_engine(Count(3), Duration(10), lag=5), Clock()
    for i, ts in [(1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 636)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())     # watermark 631
    assert windows(fires) == [seq(1, 3), seq(2, 4), seq(3, 5)]
    assert [f.window.end_timestamp for f in fires] == [610, 620, 630]
    assert [f.done for f in fires] == [seq(1), seq(2), seq(3)]
    for i, ts in [(7, 665), (8, 666), (9, 667), (10, 679)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())     # watermark 674
    assert windows(fires) == [seq(4, 6), seq(7, 9)]
    assert [f.window.end_timestamp for f in fires] == [640, 670]
    assert fires[1].window.get_expired() == seq(4, 6)


def test_count_based_trigger_with_event_ts():
    """WindowManagerTest.testCountBasedTriggerWithEventTs: 20 ms windows every 3 tuples."""
    e, clock = event_engine(Duration(20), Count(3), lag=5), Clock()
    for i, ts in [(1, 603), (2, 605), (3, 607), (4, 618), (5, 625), (6, 626), (7, 629),
                  (8, 636)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())     # watermark 631
    assert windows(fires) == [seq(1, 3), seq(3, 6)]
    assert [(f.window.start_timestamp, f.window.end_timestamp) for f in fires] == [
        (588, 608), (607, 627)]
    for i, ts in [(9, 665), (10, 666), (11, 667), (12, 669), (13, 679)]:
        e.add(i, 1, ts, 0)
    fires = e.advance(clock.tick())     # watermark 674
    assert windows(fires) == [seq(9), seq(9, 12)]


@pytest.mark.parametrize("length, expected", [
    # testCountBasedTumblingWithSameEventTs
    (2, [seq(1, 2), seq(3, 4), seq(5, 6), seq(7, 8), seq(9, 10)]),
    # testCountBasedSlidingWithSameEventTs
    (5, [seq(1, 2), seq(1, 4), seq(2, 6), seq(4, 8), seq(6, 10)]),
])
def test_count_based_window_with_same_event_ts(length, expected):
    e = event_engine(Count(length), Count(2))
    for i, ts in [(1, 10), (2, 10), (3, 11), (4, 12), (5, 12), (6, 12), (7, 12), (8, 13),
                  (9, 14), (10, 15), (11, 20)]:
        e.add(i, 1, ts, 0)
    assert windows(e.advance(0)) == expected    # watermark 20 releases 1..10


@pytest.mark.parametrize("stamps, third", [
    # testEventTimeLag: 629 arrives after 632, within the lag, and is in its window
    ([603, 605, 607, 618, 626, 632, 629, 636], [4, 5, 7]),
    # testScanStop: the tuples past the watermark stay out of every window
    ([603, 605, 607, 618, 626, 629, 636, 637, 638, 639], [4, 5, 6]),
])
def test_event_time_lag(stamps, third):
    e = event_engine(Duration(20), Duration(10), lag=5)
    for i, ts in enumerate(stamps, 1):
        e.add(i, 1, ts, 0)
    fires = e.advance(0)                # watermark: newest - 5 = 631 and 634
    assert windows(fires) == [seq(1, 3), seq(1, 4), third]
    assert e.held == sum(1 for ts in stamps if ts >= 620)


# -- Storm's WaterMarkEventGeneratorTest, ported -----------------------------------------------

@pytest.mark.parametrize("stamps", [[100, 110], [100, 110, 104]])
def test_watermark_single_input(stamps):
    e = event_engine(Duration(1000), Duration(1000), lag=5)
    for ts in stamps:
        e.add(ts, 1, ts, 0)
    e.advance(0)
    assert e.watermark_ms == 105


def test_watermark_two_inputs_waits_for_both():
    e, clock = event_engine(Duration(1000), Duration(1000), lag=5, tasks=(1, 2)), Clock()
    e.add("a", 1, 100, 0)
    e.add("b", 1, 110, 0)
    e.advance(clock.tick())
    assert e.watermark_ms is None       # task 2 has sent nothing
    e.add("c", 2, 95, 0)
    e.add("d", 2, 98, 0)
    e.advance(clock.tick())
    assert e.watermark_ms == 93         # min(110, 98) - 5


def test_watermark_no_events():
    e = event_engine(Duration(1000), Duration(1000))
    assert e.advance(0) == [] and e.watermark_ms is None


def test_late_event():
    e, clock = event_engine(Duration(1000), Duration(1000), lag=5), Clock()
    assert e.add("a", 1, 100, 0) == [] and e.add("b", 1, 110, 0) == []
    e.advance(clock.tick())
    assert e.watermark_ms == 105
    for ts in (105, 106, 115):
        assert e.add(ts, 1, ts, 0) == []
    assert e.add(104, 1, 104, 0) is None
    assert e.late == 1 and e.held == 5
    e.advance(clock.tick())
    assert e.watermark_ms == 110


# -- watermark and upstream tasks --------------------------------------------------------------

def test_watermark_moves_at_most_once_per_interval():
    e = event_engine(Duration(10), Duration(10), interval=1000)
    e.add("a", 1, 100, 0)
    e.advance(5_000)
    assert e.watermark_ms == 100
    e.add("b", 1, 200, 0)
    assert e.advance(5_999) == [] and e.watermark_ms == 100    # same interval slot
    assert e.add("c", 1, 150, 0) == []                         # so 150 is not late
    assert windows(e.advance(6_000)) == [["a"], ["c"]] and e.watermark_ms == 200


def test_upstream_ended_releases_the_watermark():
    e = event_engine(Duration(10), Duration(10), tasks=(1, 2, 3))
    e.add("a", 1, 100, 0)
    e.add("b", 2, 120, 0)
    assert e.advance(0) == [] and e.watermark_ms is None       # task 3 silent
    fires = e.upstream_ended(3, 0)                             # recomputed at once
    assert e.watermark_ms == 100 and fires == []
    fires = e.upstream_ended(1, 0)                             # only task 2 holds it now
    assert e.watermark_ms == 120 and windows(fires) == [["a"]] and fires[0].done == ["a"]
    assert e.held == 1


def test_all_upstream_ended_fires_everything_then_tuples_are_late():
    e = event_engine(Duration(20), Duration(10), tasks=(1, 2))
    e.add("a", 1, 100, 0)
    e.add("b", 2, 105, 0)
    assert e.upstream_ended(1, 0) == []     # task 2's 105 is the watermark: no window ends
    fires = e.upstream_ended(2, 0)
    assert e.watermark_ms == float("inf")
    assert [(f.window.start_timestamp, f.window.get()) for f in fires] == [
        (90, ["a", "b"]), (100, ["a", "b"])]
    assert fires[-1].done == ["a", "b"] and e.held == 0
    assert e.add("c", 1, 10**12, 0) is None and e.late == 1
    assert e.close(0) == []


def test_a_task_outside_the_upstream_set_joins_the_watermark(caplog):
    e = event_engine(Duration(10), Duration(10), tasks=(1,))
    e.add("a", 1, 1_000, 0)
    e.add("x", 9, 500, 0)
    assert "task 9" in caplog.text
    e.advance(0)
    assert e.watermark_ms == 500


def test_event_time_add_needs_a_timestamp():
    with pytest.raises(ValueError, match="ts_ms"):
        event_engine(Duration(10), Duration(10)).add("a", 1, None, 0)


# -- processing time ---------------------------------------------------------------------------

def test_processing_time_tumbling_duration_windows_are_aligned_and_half_open():
    e = WindowEngine(WindowSpec(Duration(1000), Duration(1000)), [1])
    e.add("a", 1, None, 10_999)
    assert e.advance(10_999) == []
    e.add("b", 1, None, 11_000)         # the end of [10 000, 11 000) is outside it
    [f] = e.advance(11_000)
    assert (f.window.get(), f.window.start_timestamp, f.window.end_timestamp) == (
        ["a"], 10_000, 11_000)
    assert f.done == ["a"] and e.held == 1 and e.newest_ms == 11_000
    assert e.advance(11_999) == []
    [f] = e.advance(15_000)             # late ticks still fire the right window, once
    assert (f.window.get(), f.window.start_timestamp) == (["b"], 11_000)
    assert e.advance(20_000) == [] and e.held == 0 and e.windows_fired == 2


def test_processing_time_count_length_with_duration_slide():
    e = WindowEngine(WindowSpec(Count(3), Duration(100)), [1])
    for i, now in enumerate([5, 10, 50, 99, 100, 150], 1):
        e.add(i, 1, None, now)
    fires = e.advance(250)
    assert [(f.window.get(), f.window.end_timestamp) for f in fires] == [
        ([2, 3, 4], 100), ([4, 5, 6], 200)]
    assert fires[0].window.start_timestamp is None
    assert [f.done for f in fires] == [[1, 2], [3, 4]]
    assert e.advance(1_000) == []       # no new tuple: no second run of the same window
    e.add(7, 1, None, 1_010)
    [f] = e.advance(1_100)
    assert f.window.get() == [5, 6, 7] and f.window.get_expired() == [4]


def test_processing_time_duration_length_with_count_slide():
    e = WindowEngine(WindowSpec(Duration(100), Count(2)), [1])
    assert e.add(1, 1, None, 1_000) == []
    [f] = e.add(2, 1, None, 1_050)
    assert (f.window.get(), f.window.start_timestamp, f.window.end_timestamp) == (
        [1, 2], 951, 1_051)
    assert f.done == []
    e.add(3, 1, None, 1_200)
    [f] = e.add(4, 1, None, 1_200)
    assert (f.window.get(), f.window.get_expired(), f.done) == ([3, 4], [1, 2], [1, 2])
    assert e.advance(10**6) == []       # a count slide fires in add() only
    assert e.tick_interval_ms() is None


def test_processing_time_clock_never_goes_back():
    e = WindowEngine(WindowSpec(Duration(100), Duration(100)), [1])
    e.add("a", 1, None, 1_050)
    e.add("b", 1, None, 990)            # counts as 1 050
    assert e.newest_ms == 1_050
    assert e.advance(1_000) == []       # and the clock is at 1 050 already
    assert windows(e.advance(1_100)) == [["a", "b"]]


# -- close -------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, adds, expected, last_done", [
    # tumbling count: the partial window fires
    (WindowSpec(Count(3), Count(3)), 7, [seq(1, 3), seq(4, 6), [7]], [7]),
    # sliding count: the partial window is the one the next trigger would have fired
    (WindowSpec(Count(5), Count(2)), 7, [seq(1, 2), seq(1, 4), seq(2, 6), seq(4, 7)],
     seq(4, 7)),
    # duration windows: every window holding a tuple, before its end in processing time
    (WindowSpec(Duration(1000), Duration(500)), 3, [seq(1, 3), seq(1, 3)], seq(1, 3)),
    # (1 left the last 2 without a window: acked with the last one)
    (WindowSpec(Count(2), Duration(1000)), 3, [[2, 3]], [1, 2, 3]),
    (WindowSpec(Duration(1000), Count(2)), 3, [[1, 2], [1, 2, 3]], [1, 2, 3]),
])
def test_close_fires_every_open_window_and_acks_the_rest(spec, adds, expected, last_done):
    e = WindowEngine(spec, [1])
    fires = []
    for i in seq(1, adds):
        fires += e.add(i, 1, None, 5_000 + i)
    fires += e.close(5_100)
    assert windows(fires) == expected
    assert fires[-1].done == last_done
    assert sorted(x for f in fires for x in f.done) == seq(1, adds)
    assert e.held == 0 and e.close(5_200) == []
    with pytest.raises(RuntimeError, match="close"):
        e.add(99, 1, None, 6_000)


def test_close_acks_tuples_kept_for_a_window_that_never_comes():
    e = WindowEngine(WindowSpec(Count(5), Count(2)), [1])
    fires = [f for i in seq(1, 6) for f in e.add(i, 1, None, i)]
    assert fires[-1].done == seq(2, 3) and e.held == 3
    assert e.close(10) == [Fire(None, seq(4, 6))]   # no new tuple: no window, only acks


def test_event_time_close_releases_what_waits_for_the_watermark():
    e = event_engine(Duration(10), Duration(10), lag=100)
    for i, ts in enumerate([5, 12, 3, 27], 1):
        e.add(i, 1, ts, 0)
    e.advance(0)
    assert e.watermark_ms == -73 and e.held == 4
    fires = e.close(0)
    assert windows(fires) == [[3, 1], [2], [4]]
    assert [f.done for f in fires] == [[3, 1], [2], [4]] and e.held == 0


# -- tick interval, memory, copies -------------------------------------------------------------

@pytest.mark.parametrize("spec, expected", [
    (WindowSpec(Duration(10_000), Duration(5_000)), 5_000),
    (WindowSpec(Duration(10_000), Duration(4_000)), 2_000),      # window ends: 2 s multiples
    (WindowSpec(Duration(1_001), Duration(1_000)), 10),          # floored at MIN_TICK_MS
    (WindowSpec(Duration(7), Duration(3)), 3),                   # ... or the slide
    (WindowSpec(Count(100), Duration(3_000)), 3_000),
    (WindowSpec(Count(100), Count(10)), None),
    (WindowSpec(Duration(1_000), Count(10)), None),
    (WindowSpec(Count(100), Count(10), "ts", watermark_interval_ms=250), 250),
    (WindowSpec(Duration(10_000), Duration(5_000), "ts"), 1_000),
])
def test_tick_interval_ms(spec, expected):
    assert spec.tick_interval_ms() == expected
    assert WindowEngine(spec, [1]).tick_interval_ms() == expected


@pytest.mark.parametrize("spec", [
    WindowSpec(Duration(50), Duration(50)),
    WindowSpec(Duration(50), Duration(10)),
    WindowSpec(Count(20), Duration(10_000)),
    WindowSpec(Count(20), Count(5)),
    WindowSpec(Duration(50), Count(5)),
])
def test_memory_is_bounded_by_what_windows_need(spec):
    e = WindowEngine(spec, [1])
    peak = 0
    for i in range(4_000):
        e.add(i, 1, None, i // 4)           # 4 tuples per ms
        if i % 7 == 0:
            e.advance(i // 4)
        peak = max(peak, e.held)
    # a 50 ms window holds 200 tuples; a count window 20 plus the acks' batching
    assert peak <= 300 if isinstance(spec.length, Duration) else peak <= 20 + 100
    e.validate_state()


def test_changing_a_window_list_does_not_change_the_next_windows():
    e = WindowEngine(WindowSpec(Count(4), Count(2)), [1])
    fires = [f for i in seq(1, 4) for f in e.add(i, 1, None, i)]
    fires[-1].window.get().clear()
    [f] = [f for i in seq(5, 6) for f in e.add(i, 1, None, i)]
    assert f.window.get() == seq(3, 6) and f.window.get_expired() == seq(1, 2)


# -- property tests against brute-force definitions --------------------------------------------

def spark_windows(released: list[tuple[int, int]], length: int, slide: int):
    """Spark SQL's window(ts, length, slide): every [k * slide, k * slide + length) holding a
    tuple, by start (each tuple tried against every start from ts - length to ts)."""
    out: dict[int, list[int]] = {}
    for ts, i in released:
        for k in range((ts - length) // slide, ts // slide + 1):
            s = k * slide
            if s <= ts < s + length:
                out.setdefault(s, []).append(i)
    return [(s, s + length, ids) for s, ids in sorted(out.items())]


def brute_force(released: list[tuple[int, int]], spec: WindowSpec):
    """(start, end, ids) of every window, from the definitions in the module docstring;
    ``released`` is in release order (timestamp order, ties in arrival order)."""
    length, slide = spec.length, spec.sliding
    if isinstance(length, Duration) and isinstance(slide, Duration):
        return spark_windows(released, length.ms, slide.ms)
    out = []
    n = len(released)
    if isinstance(slide, Duration):             # Count L, Duration S
        for b in sorted({(ts // slide.ms + 1) * slide.ms for ts, _ in released}):
            before = [i for ts, i in released if ts < b]
            out.append((None, b, before[-length.n:]))
        return out
    points = list(range(slide.n, n + 1, slide.n))
    if n % slide.n:
        points.append(n)                        # the partial window at the end
    for k, p in enumerate(points):
        newest = released[p - 1][0]
        if isinstance(length, Count):
            lo = max(k * slide.n + slide.n - length.n, 0)   # the trigger's last L
            out.append((None, newest + 1, [i for _, i in released[lo:p]]))
        else:
            start = newest + 1 - length.ms
            out.append((start, newest + 1, [i for ts, i in released[:p] if ts >= start]))
    return out


def check_fires(fires: list[Fire], accepted: set[int], exact_done: bool) -> None:
    """new/expired against the previous window, window order, and each accepted item in
    exactly one ``done``, not before its last window (at it when ``exact_done``)."""
    real = [(k, f) for k, f in enumerate(fires) if f.window is not None]
    prev: list = []
    for _, f in real:
        cur = f.window.get()
        before, now = set(prev), set(cur)
        assert f.window.get_new() == [x for x in cur if x not in before]
        assert f.window.get_expired() == [x for x in prev if x not in now]
        prev = cur
    ends = [f.window.end_timestamp for _, f in real]
    assert ends == sorted(ends)
    done_at = {}
    for k, f in enumerate(fires):
        for x in f.done:
            assert x not in done_at, f"{x} acked twice"
            done_at[x] = k
    assert set(done_at) == accepted
    last_window = {}
    for k, f in real:
        for x in f.window.get():
            last_window[x] = k
    for x, k in last_window.items():
        assert done_at[x] >= k, f"{x} acked before its last window"
        if exact_done:
            assert done_at[x] == k or k == real[-1][0], f"{x} acked late"


def random_spec(rng: random.Random, kinds: tuple[str, str], event_time: bool) -> WindowSpec:
    def amount(kind, cap=None):
        if kind == "count":
            return Count(rng.randint(1, cap or 7))
        return Duration(rng.choice([5, 10, 20, 30, 60]) if cap is None else
                        rng.choice([d for d in (5, 10, 15, 20, 30, 60) if d <= cap]))
    length = amount(kinds[0])
    same = kinds[0] == kinds[1]
    sliding = amount(kinds[1], _amount_of(length) if same else None)
    if rng.random() < 0.25 and same:
        sliding = length
    return WindowSpec(length, sliding, "ts" if event_time else None,
                      lag_ms=rng.choice([0, 3, 15]), watermark_interval_ms=10)


def _amount_of(x):
    return x.n if isinstance(x, Count) else x.ms


COMBOS = [("count", "count"), ("count", "duration"), ("duration", "count"),
          ("duration", "duration")]


def run_random(rng: random.Random, kinds: tuple[str, str], event_time: bool, items: int,
               validate_every: int = 1) -> None:
    """Random tuples from two tasks, mostly in order, some behind by more than the lag, with
    ticks at random; compares every window with ``brute_force`` and checks ``check_fires``."""
    spec = random_spec(rng, kinds, event_time)
    e = WindowEngine(spec, [1, 2])
    fires, arrivals, late = [], [], set()
    now, newest, wm, slot = 0, {}, None, None
    for i in range(rng.randint(items // 2, items)):
        now += rng.choice([0, 0, 1, 3, 7, 25])
        task = rng.choice([1, 2])
        ts = now - rng.choice([0, 0, 1, spec.lag_ms, spec.lag_ms + 20])
        got = e.add(i, task, ts if event_time else None, now)
        if got is None:
            late.add(i)
            assert wm is not None and ts < wm           # late exactly when below it
        else:
            assert wm is None or not event_time or ts >= wm
            fires += got
            arrivals.append((ts if event_time else now, i))
            newest[task] = max(newest.get(task, ts), ts)
        if rng.random() < 0.3:
            fires += e.advance(now)
            # the watermark, computed here: once per interval, once both tasks sent
            if event_time and (slot is None or now // 10 > slot):
                slot = now // 10
                if len(newest) == 2:
                    low = min(newest.values()) - spec.lag_ms
                    wm = low if wm is None else max(wm, low)
                assert e.watermark_ms == wm
        if i % validate_every == 0:
            e.validate_state()
    if not event_time:
        assert not late
    fires += e.close(now + 10**6)
    assert e.held == 0
    released = sorted(arrivals, key=lambda a: a[0])     # stable: ties in arrival order
    got = [(f.window.start_timestamp, f.window.end_timestamp, f.window.get())
           for f in fires if f.window is not None]
    assert got == brute_force(released, spec), spec
    assert e.windows_fired == len(got) and e.late == len(late)
    check_fires(fires, {i for _, i in arrivals},
                exact_done=kinds == ("duration", "duration") or kinds == ("count", "count"))


@pytest.mark.parametrize("kinds", COMBOS, ids=lambda k: f"{k[0]}-{k[1]}")
@pytest.mark.parametrize("event_time", [False, True], ids=["processing", "event"])
def test_every_combination_matches_its_definition(kinds, event_time):
    rng = random.Random(f"{kinds}{event_time}")
    for _ in range(25):
        run_random(rng, kinds, event_time, items=60)


@pytest.mark.parametrize("kinds", COMBOS, ids=lambda k: f"{k[0]}-{k[1]}")
@pytest.mark.parametrize("event_time", [False, True], ids=["processing", "event"])
def test_long_streams_match_their_definition(kinds, event_time):
    """Long enough for the expiry scans (every EXPIRE_EVENTS_THRESHOLD tuples) and for the
    engine to drop done tuples from its list."""
    rng = random.Random(f"long{kinds}{event_time}")
    for _ in range(2):
        run_random(rng, kinds, event_time, items=600, validate_every=97)


@pytest.mark.parametrize("tumbling", [True, False], ids=["tumbling", "sliding"])
def test_event_time_duration_windows_equal_spark_window_with_a_lag(tumbling):
    """In-order data with jitter within the lag: nothing is late, and the windows, fired as
    the watermark passes them, are Spark SQL's window() assignment."""
    rng = random.Random(7 + tumbling)
    for _ in range(15):
        length = rng.choice([10, 20, 50])
        slide = length if tumbling else rng.choice([d for d in (5, 10, 25) if d <= length])
        lag = rng.choice([5, 20])
        e = event_engine(Duration(length), Duration(slide), lag=lag, interval=10)
        fires, items, t, fired_by = [], [], 1_000, []
        for i in range(150):
            t += rng.randint(0, 4)
            ts = t - rng.randint(0, lag)
            assert e.add(i, 1, ts, 0) == []
            items.append((ts, i))
            if i % 10 == 9:
                fires += e.advance(i * 10)
                fired_by.append((e.watermark_ms, len(fires)))
        fires += e.close(10**6)
        assert e.late == 0 and e.held == 0
        expected = spark_windows(sorted(items, key=lambda a: a[0]), length, slide)
        assert [(f.window.start_timestamp, f.window.end_timestamp, f.window.get())
                for f in fires] == expected
        # each advance fired exactly the windows ending at or before its watermark
        assert fired_by == [(wm, sum(1 for w in expected if w[1] <= wm)) for wm, _ in fired_by]
        check_fires(fires, {i for _, i in items}, exact_done=True)


@pytest.mark.parametrize("tumbling", [True, False], ids=["tumbling", "sliding"])
def test_processing_time_duration_windows_equal_spark_window(tumbling):
    rng = random.Random(11 + tumbling)
    for _ in range(15):
        length = rng.choice([10, 20, 50])
        slide = length if tumbling else rng.choice([d for d in (5, 10, 25) if d <= length])
        e = WindowEngine(WindowSpec(Duration(length), Duration(slide)), [1])
        fires, items, now, fired_by = [], [], 0, []
        for i in range(150):
            now += rng.choice([0, 1, 2, 9])
            assert e.add(i, 1, None, now) == []
            items.append((now, i))
            if rng.random() < 0.2:
                fires += e.advance(now)
                fired_by.append((now, len(fires)))
        fires += e.close(now)
        expected = spark_windows(items, length, slide)
        assert [(f.window.start_timestamp, f.window.end_timestamp, f.window.get())
                for f in fires] == expected
        # each advance fired exactly the windows ending at or before its now_ms
        assert fired_by == [(t, sum(1 for w in expected if w[1] <= t)) for t, _ in fired_by]
        check_fires(fires, {i for _, i in items}, exact_done=True)


def test_processing_time_windows_fire_when_every_upstream_task_has_ended_then_go_on():
    """A finite stream with acking: its spouts end only once every tree is acked, so the
    engine fires the open windows as soon as every upstream task has ended (drained), and
    replays arriving after that fill new windows, fired at close()."""
    spec = WindowSpec(Count(5), Count(5))
    engine = WindowEngine(spec, [1, 2])
    fired = [f for i in range(7) for f in (engine.add(f"a{i}", 1 + i % 2, None, i) or [])]
    assert [f.window.get() for f in fired] == [[f"a{i}" for i in range(5)]]
    assert engine.upstream_ended(1, 10) == [] and engine.held == 2
    rest = engine.upstream_ended(2, 11)
    assert [f.window.get() for f in rest] == [["a5", "a6"]] and rest[0].done == ["a5", "a6"]
    assert engine.held == 0
    assert engine.add("replay", 1, None, 12) == [] and engine.held == 1
    last = engine.close(13)
    assert [f.window.get() for f in last] == [["replay"]] and last[-1].done == ["replay"]


def test_replays_after_every_upstream_ended_fire_at_the_end_of_a_pass():
    """Replays that come after the end fill a window short of its count: the pass's end
    fires them (else they would wait for a count that never comes, time out and replay for
    ever); never while an upstream task is live, never twice, never in event time."""
    engine = WindowEngine(WindowSpec(Count(5), Count(5)), [1, 2])
    for i in range(3):
        engine.add(f"a{i}", 1, None, i)
    engine.upstream_ended(1, 3)
    assert engine.flush_after_end() == [] and engine.held == 3      # task 2 is live
    assert [f.window.get() for f in engine.upstream_ended(2, 4)] == [["a0", "a1", "a2"]]
    assert engine.flush_after_end() == []                           # nothing held
    engine.add("r1", 1, None, 5)
    engine.add("r2", 2, None, 6)
    fires = engine.flush_after_end()
    assert [f.window.get() for f in fires] == [["r1", "r2"]] and fires[-1].done == ["r1", "r2"]
    assert engine.held == 0 and engine.flush_after_end() == []
    timed = event_engine(Duration(10), Duration(10), tasks=(1,))
    timed.add("a", 1, 100, 0)
    timed.upstream_ended(1, 0)
    assert timed.flush_after_end() == [] and timed.add("late", 1, 50, 0) is None


# -- the executor's stats ----------------------------------------------------------------------


class _Collector:
    """What WindowedBoltExecutor needs of an OutputCollector: emits and acks, recorded."""

    def __init__(self) -> None:
        self.emitted: list = []
        self.acked: list = []

    def emit(self, values, stream="default", anchors=None):
        self.emitted.append((stream, list(values)))
        return ()

    def ack(self, tup):
        self.acked.append(tup)

    def fail(self, tup):  # pragma: no cover - no window fails here
        raise AssertionError(f"failed {tup}")

    def report_error(self, exc):  # pragma: no cover
        raise exc


def test_window_stats_after_the_input_ended_are_whole_numbers_or_none():
    """Once every upstream task has ended, the engine's watermark is +infinity; the
    executor's window_stats must still give TaskStats ints or None (the stats summary
    formats them as ints: ``handle.stats().summary()`` raised ValueError after an event-time
    windowed bolt had seen its whole input)."""
    from actors._stats import TaskStats
    from cluster._stats import TopologyStats
    from topology._components import TopologyContext

    class Counts(WindowedBolt):
        outputs = ("n",)

        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, window):
            self.collector.emit((len(window),))

    ex = WindowedBoltExecutor(Counts().with_tumbling_window(Duration.of(10))
                              .with_timestamp_field("ts").with_lag(Duration.of(5)))
    fields = Fields("ts")
    ex.prepare({}, TopologyContext("t", "win", 3, 0, {"src": [1, 2], "win": [3]},
                                   sources={("src", "default"): fields}), _Collector())
    for task, ts in ((1, 3), (2, 12), (1, 25)):
        ex.execute(Tuple([ts], fields, "src", task, "default"))
    ex.execute(Tuple([1], Fields("tick"), SYSTEM_COMPONENT_ID, -1, SYSTEM_TICK_STREAM_ID))
    assert ex.window_stats()["watermark_ms"] == 7 and ex.window_stats()["watermark_lag_ms"] == 18
    ex.upstream_ended(1)
    ex.upstream_ended(2)
    stats = ex.window_stats()
    assert stats["watermark_ms"] is None and stats["watermark_lag_ms"] is None
    assert stats["windows_fired"] == 3 and stats["window_held"] == 0
    task = TaskStats(component="win", task=3, worker=0, state="done", **stats)
    lines = TopologyStats("t", [task], complete=True).summary().splitlines()
    assert "window win: 0 held, watermark - (lag - ms), 3 fired, 0 late, 0 bad" in lines
