"""Windowed bolts on Ray: windows equal a plain-Python computation of the same windows,
tuples are acked as they leave their windows, a failing ``execute(window)`` fails its new
tuples (replayed), late tuples go to the late stream, and bad windows fail at build time
naming the component and the setting."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests._util import until
from tests.components import PassBolt
from tests.test_chaos import _pid, _sigkill
from topology import (
    CollectorBolt,
    Count,
    Duration,
    IterableSpout,
    TopologyBuilder,
    TopologyError,
    WindowedBolt,
)

WORDS = ("ant", "bee", "cat", "dog", "eel", "fox", "gnu")


class WindowWordCount(WindowedBolt):
    """Per window and word: (start, end, word, count); optionally raises on the first
    window it sees (each task once)."""

    outputs = ("start", "end", "word", "count")

    def __init__(self, fail_first: bool = False) -> None:
        self.fail_first = fail_first

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.failed_once = False

    def execute(self, window):
        if self.fail_first and not self.failed_once:
            self.failed_once = True
            raise RuntimeError("window failed")
        for word, n in Counter(t["word"] for t in window.get()).items():
            self.collector.emit((window.start_timestamp, window.end_timestamp, word, n))


def _rows(n: int, seed: int = 7) -> list[tuple[int, str]]:
    """(ts, word) rows in timestamp order, 0-4 ms apart."""
    rnd, ts, out = random.Random(seed), 1_700_000_000_000, []
    for _ in range(n):
        ts += rnd.randrange(5)
        out.append((ts, rnd.choice(WORDS)))
    return out


def _expected(rows, length: int, slide: int) -> Counter:
    """Spark SQL's window(ts, length, slide): (start, end, word) → count."""
    out: Counter = Counter()
    for ts, word in rows:
        k = ts // slide
        while k * slide + length > ts:
            if k * slide <= ts:
                out[(k * slide, k * slide + length, word)] += 1
            k -= 1
    return out


def _run(cluster, name, rows, bolt, conf, spout_tasks=2):
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(rows, ("ts", "word"), msg_ids=True), spout_tasks)
    b.set_bolt("win", bolt, 2).fields_grouping("rows", ("word",))
    b.set_bolt("out", CollectorBolt()).global_grouping("win")
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert handle.wait(240), handle.stats().summary()
        return handle.stats(), handle.collected("out")
    finally:
        cluster.kill_topology(name)


# each window kind once, one on each layout: the kinds' arithmetic is test_windows' (no
# Ray), the watermark from two workers' spouts is the 2-worker form's
@pytest.mark.parametrize(("workers", "length", "slide"),
                         [("1worker", 50, 50), ("2workers", 60, 20)],
                         ids=["tumbling-1worker", "sliding-2workers"], indirect=["workers"])
def test_event_time_windows_equal_spark_sqls_window_and_ack_every_tuple(
        cluster, name, workers, length, slide):
    """Two spout tasks read interleaved parts of a sorted list (per upstream task
    watermarks: no row is late); each window's counts equal Spark SQL's window()
    computed in Python; every tree is acked (the last windows fire once the spouts are
    drained, without waiting for a timeout)."""
    rows = _rows(3000)
    bolt = (WindowWordCount().with_window(Duration.of(length), Duration.of(slide))
            .with_timestamp_field("ts"))
    stats, got = _run(cluster, name, rows, bolt,
                      workers.conf({"topology.message.timeout.secs": 60}))
    counts = Counter({(s, e, w): n for *_, (s, e, w, n) in got})
    assert len(counts) == len(got)  # each window and word once
    assert counts == _expected(rows, length, slide)
    win = stats.component("win")
    assert sum(t.late_tuples for t in win) == 0 and sum(t.bad_timestamps for t in win) == 0
    # each task fires the windows its words fall in: at least every distinct window
    assert sum(t.windows_fired for t in win) >= len({(s, e) for s, e, _ in counts})
    assert stats.total("rows", "acked") == len(rows) and stats.total("rows", "failed") == 0
    assert all(t.window_held == 0 for t in win)


@pytest.mark.parametrize("workers", ["1worker", "2workers"], indirect=True)
def test_a_failing_window_fails_its_new_tuples_and_they_replay(cluster, name, workers):
    """Processing-time tumbling count windows: each task's first execute(window) raises;
    its tuples fail, the spout replays them, and every row is counted exactly once in the
    windows that succeeded."""
    rows = _rows(400, seed=3)
    bolt = WindowWordCount(fail_first=True).with_tumbling_window(Count(25))
    stats, got = _run(cluster, name, rows, bolt,
                      workers.conf({"topology.message.timeout.secs": 60}), spout_tasks=1)
    total = Counter()
    for *_, (_, _, word, n) in got:
        total[word] += n
    assert total == Counter(w for _, w in rows)
    assert stats.total("rows", "failed") == 2 * 25  # the first window of each task
    assert stats.total("rows", "acked") == len(rows)
    errors = [e for t in stats.component("win") for e in t.errors]
    assert errors and "window failed" in str(errors)


def test_replays_after_the_end_of_stream_fire_without_waiting_for_a_count(cluster, name):
    """A count window longer than the stream fires only at the end of stream; its execute
    raises, so its tuples fail and replay after every upstream task has ended. The replays
    fire at the end of the bolt's pass over its queue, not when a count that will never come
    is reached: the topology completes with every row counted once (before, the replays
    waited, timed out and replayed until the wait gave up)."""
    rows = _rows(30, seed=11)
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(rows, ("ts", "word"), msg_ids=True))
    b.set_bolt("win", WindowWordCount(fail_first=True).with_tumbling_window(Count(1000))
               ).global_grouping("rows")
    b.set_bolt("out", CollectorBolt()).global_grouping("win")
    handle = cluster.submit_topology(name, {"topology.message.timeout.secs": 600},
                                     b.create_topology())
    try:
        assert handle.wait(120), handle.stats().summary()
        got, stats = handle.collected("out"), handle.stats()
    finally:
        cluster.kill_topology(name)
    total = Counter()
    for *_, (_, _, word, n) in got:
        total[word] += n
    assert total == Counter(w for _, w in rows)
    assert stats.total("rows", "failed") == len(rows)
    assert stats.total("rows", "acked") == len(rows)


def test_late_tuples_go_to_the_late_stream(cluster, name):
    """Rows out of order by more than the lag are late: they reach the late stream with
    their source, values and timestamp; windows plus late rows account for every row.
    ``max.spout.pending`` makes it deterministic: the spout can only emit the rows at the
    end (the late ones) once the windows of all but the last 50 rows have fired, so the
    watermark has passed most of the late rows by then."""
    rows = _rows(600, seed=5)
    late_ids = set(range(300, 600, 10))
    shuffled = [r for i, r in enumerate(rows) if i not in late_ids]
    shuffled += [rows[i] for i in sorted(late_ids)]  # far behind the watermark by then
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(shuffled, ("ts", "word"), msg_ids=True))
    b.set_bolt("win", WindowWordCount().with_tumbling_window(Duration.of(40))
               .with_timestamp_field("ts").with_lag(Duration.of(5))
               .with_watermark_interval(Duration.of(10))
               .with_late_tuple_stream("late")).shuffle_grouping("rows")
    b.set_bolt("out", CollectorBolt()).global_grouping("win")
    b.set_bolt("late", CollectorBolt()).global_grouping("win", "late")
    handle = cluster.submit_topology(name, {"topology.message.timeout.secs": 60,
                                            "topology.max.spout.pending": 50},
                                     b.create_topology())
    try:
        assert handle.wait(240), handle.stats().summary()
        windows, late = handle.collected("out"), handle.collected("late")
        stats = handle.stats()
    finally:
        cluster.kill_topology(name)
    late_rows = [tuple(v[2]) for *_, v in late]
    assert all(v[0] == "rows" and v[1] == "default" and v[3] == v[2][0] for *_, v in late)
    counted = Counter()
    for *_, (_, _, w, n) in windows:
        counted[w] += n
    assert counted + Counter(w for _, w in late_rows) == Counter(w for _, w in shuffled)
    assert len(late_rows) >= 15 and stats.component("win")[0].late_tuples == len(late_rows)
    assert stats.total("rows", "acked") == len(shuffled)


@pytest.mark.parametrize("make,match", [
    (lambda: WindowWordCount().with_window(Count(0)), r"Count must be > 0"),
    (lambda: WindowWordCount().with_window(Duration.of(10), Duration.of(20)),
     r"sliding interval"),
    (lambda: WindowWordCount().with_tumbling_window(Duration.of(10))
     .with_timestamp_field("when"), r"bolt 'win'.*'when'.*stream 'default' of 'rows'"),
    (lambda: WindowWordCount().with_tumbling_window(Count(5))
     .with_late_tuple_stream("late"), r"win.*late"),
])
def test_a_window_that_cannot_work_fails_at_build_naming_component_and_setting(make, match):
    with pytest.raises((TopologyError, ValueError), match=match):
        b = TopologyBuilder()
        b.set_spout("rows", IterableSpout([(1, "a")], ("ts", "word")))
        b.set_bolt("win", make()).shuffle_grouping("rows")
        b.create_topology()


class WindowSeqs(WindowedBolt):
    """Emits each window's seq values as one list."""

    outputs = ("seqs",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        self.collector.emit(([t["seq"] for t in window.get()],))


def test_a_windowed_bolt_killed_mid_run_with_acking_gives_every_window_its_tuples(
        cluster, name):
    """The windowed task's process is killed with tuples in its open windows: Ray restarts
    it with empty windows, the lost tuples time out and replay, and every row reaches a
    window that fired (at least once)."""

    n = 3000
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout([(i, "k") for i in range(n)], ("seq", "key"),
                                      msg_ids=True))
    b.set_bolt("slow", PassBolt(delay_s=0.001)).shuffle_grouping("rows")
    b.set_bolt("win", WindowSeqs().with_tumbling_window(Count(10))).shuffle_grouping("slow")
    b.set_bolt("out", CollectorBolt()).global_grouping("win")
    handle = cluster.submit_topology(name, {"topology.message.timeout.secs": 5,
                                            "topology.max.spout.pending": 200},
                                     b.create_topology())
    try:
        win = handle.actors[handle.topology.component_tasks["win"][0]]
        until(lambda: handle.stats().component("win")[0].windows_fired > 20, 60)
        old = _sigkill(win)
        until(lambda: _pid(win) not in (None, old), 60)
        assert handle.wait(240), handle.stats().summary()
        stats = handle.stats()
        seen = {s for *_, (seqs,) in handle.collected("out") for s in seqs}
        assert seen == set(range(n))
        assert stats.component("win")[0].restarted and stats.total("rows", "acked") == n
        assert stats.total("rows", "failed") > 0  # the lost windows' tuples timed out
    finally:
        cluster.kill_topology(name)
