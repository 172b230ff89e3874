"""The end of a stream is exactly-once (Flink's FLIP-147, "Support Checkpoints After Tasks
Finished"): end of input apart from end of stream, one final checkpoint after every task
has finished, end markers that a rollback regenerates, and a drain that a rollback
rewinds. The interleavings run on the Ray-free harness (an executor with a memory
store); the user's case, totals emitted in ``finish()`` into two-phase-commit sinks, runs
on Ray."""

from __future__ import annotations

import collections
import functools
import sqlite3

import pytest

from actors import make_executor, stream_table
from actors._streams import BARRIER_STREAM, DRAINED_STREAM, EOS_STREAM
from actors.state import CoordinatorCore, enable_checkpoints
from actors.state._coordinator import FINISH_ATTEMPTS
from actors.state._provider import FINAL
from actors.state._task import FINISHED_KEY
from actors.state.providers import MemoryProvider
from cluster import TopologyFailed
from tests._util import until
from tests.components import GatedCountSpout, PassBolt, TotalsWordCount, words
from topology import (
    Bolt,
    DbApiSink,
    Duration,
    IterableSpout,
    ParquetSink,
    TopologyBuilder,
    WindowedBolt,
)
from topology._two_phase import TwoPhaseCommitSink

# -- the coordinator ---------------------------------------------------------------------------


def test_the_final_round_starts_once_every_task_ended_its_input_and_commits_as_final():
    """A round in flight when the last task reports is not the final one (its barrier
    may have passed a task before that task's finish()); the next round starts at once,
    whatever the interval, and its commit is logged FINAL and told as final; no round
    follows, and a coordinator restarted on that log restores it as final."""
    log = MemoryProvider().checkpoint_log()
    c = CoordinatorCore(log, [1, 2], [2], 600.0, 5.0, 0.0, -600.0)
    (trigger,) = c.tick(0.0)
    assert c.data_ended_at(2, 0, 0.1) == []           # the spout's input ended
    assert c.data_ended_at(1, 0, 0.2) == []           # the bolt's: a round is in flight
    c.prepared(2, 1, 0, 0.3)
    (commit,) = c.prepared(1, 1, 0, 0.3)
    assert commit.args == (1, False)
    (final,) = c.tick(0.4)                            # at once, not an interval later
    assert final.kind == "trigger" and final.args == (0, 2)
    c.prepared(2, 2, 0, 0.5)
    (commit,) = c.prepared(1, 2, 0, 0.5)
    assert commit.args == (2, True) and log.load() == (FINAL, 2, [1, 2])
    assert c.tick(2000.0) == [] and c.state()["final"]
    again = CoordinatorCore(log, [1, 2], [2], 600.0, 5.0, 0.0, 3000.0, restarted=True)
    (rollback,) = again.start(3000.0)
    assert rollback.kind == "rollback" and rollback.args[1:3] == (2, True)


def test_a_rollback_forgets_which_tasks_ended_their_input():
    c = CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2], [2], 600.0, 5.0, 0.0, 0.0)
    assert c.data_ended_at(2, 0, 0.1) == []
    (rollback,) = c.failed(1, "a tree failed", 0.2)
    gen = rollback.args[0]
    assert rollback.args[1:] == (None, False, ())
    assert c.data_ended_at(1, 0, 0.3) == []           # a report of the old generation
    c.paused(1, gen, 0.3)
    c.paused(2, gen, 0.3)
    c.data_ended_at(1, gen, 0.4)
    assert not c.all_data_ended()                     # the spout's end must come again
    c.data_ended_at(2, gen, 0.5)
    assert c.all_data_ended()


def test_a_finish_that_keeps_raising_fails_the_topology_not_a_rollback_loop():
    c = CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2], [2], 600.0, 5.0, 0.0, 0.0)
    why = "count:1: finish() raised RuntimeError: boom"
    for now in (1.0, 2.0):
        (rollback,) = c.finish_failed(1, c.gen, why, now)
        c.paused(1, rollback.args[0], now)
        c.paused(2, rollback.args[0], now)
        c.tick(now + 0.5)                             # (a delayed resume)
    assert c.finish_failed(1, rollback.args[0] - 1, why, 3.0) == []   # a stale report
    assert c.failure is None
    assert c.finish_failed(1, c.gen, why, 3.0) == []
    assert c.state()["failure"].startswith(why) and c.rollbacks == 2
    assert c.tick(1000.0) == [] and c.failed(2, "a tree failed", 1000.0) == []


# -- the task side (Ray-free executors) ------------------------------------------------------------


def _count_task(spouts: int = 1):
    """A ``TotalsWordCount`` task fed by ``spouts`` spout tasks, with its reports, the
    elements it sends downstream and a function to feed it an element."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)), spouts)
    b.set_bolt("count", TotalsWordCount(), 1).shuffle_grouping("src")
    b.set_bolt("out", PassBolt(), 1).shuffle_grouping("count")
    topo = b.create_topology()
    (count,), (out,) = topo.component_tasks["count"], topo.component_tasks["out"]
    srcs = topo.component_tasks["src"]
    core = make_executor("t", topo, {"topology.acker.executors": 0}, count,
                         {t: 0 for t in (count, out, *srcs)})
    store = MemoryProvider().task_store("count", count)
    enable_checkpoints(core, store)
    reports, downstream = [], []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({out: lambda items: downstream.extend(items) or len(items)})
    core._open()
    s = [i for i, (c, _, _) in enumerate(stream_table(topo)) if c == "src"][0]

    def feed(src, stream, values=None):
        core.handle((src, s if stream is None else stream, values))
        core.outbox.try_flush_batches()
    return core, store, srcs, reports, downstream, feed


def _totals(downstream) -> list:
    return [tuple(v) for st, v in downstream if st >= 0]


def _rollback(core, gen, checkpoint_id, final=False, finished=()) -> None:
    core.checkpoint.apply("rollback", (gen, checkpoint_id, final, finished))
    core.checkpoint.apply("resume", (gen,))


def test_finish_runs_at_end_of_data_and_again_only_after_a_restore_from_before_it():
    """The bolt's inputs send end of data: finish() emits the totals, DRAINED goes on
    behind them, the coordinator is told, and the task does not end; the next snapshot
    records it finished. A rollback to that snapshot does not run finish() again when the
    input ends again (its output is in the checkpoint's downstream state); a rollback to
    one taken before it does. The final commit lets it end."""
    core, store, (src,), reports, downstream, feed = _count_task()
    cp = core.checkpoint
    for w in ("a", "b", "a"):
        feed(src, None, [w])
    feed(src, BARRIER_STREAM, [1])
    cp.apply("commit", (1, False))
    feed(src, DRAINED_STREAM)
    assert _totals(downstream) == [("a", 2), ("b", 1)]
    assert downstream[-1][0] == DRAINED_STREAM and reports[-1] == ("data_ended", core.task_id, 0)
    assert not cp.final_committed() and core.state == "running"
    feed(src, BARRIER_STREAM, [2])
    assert FINISHED_KEY in store.restore(2, range(-1, 0))
    del downstream[:]
    _rollback(core, 5, 2)                             # restored: finished
    feed(src, DRAINED_STREAM)
    assert _totals(downstream) == [] and downstream[-1][0] == DRAINED_STREAM
    assert reports[-1] == ("data_ended", core.task_id, 5)
    _rollback(core, 6, 1)                             # restored: before finish()
    feed(src, DRAINED_STREAM)
    assert _totals(downstream) == [("a", 2), ("b", 1)]
    feed(src, BARRIER_STREAM, [3])
    cp.apply("commit", (3, True))
    assert cp.final_committed()


def test_an_end_of_data_parked_during_alignment_does_not_survive_a_rollback():
    """Input A's barrier came, then A's end of data, parked while B aligns; a rollback
    drops it (A's rewound spout sends it again): B's end of data alone must not end the
    input, and finish() runs once, after A's comes again."""
    core, _, (a, b), reports, downstream, feed = _count_task(spouts=2)
    feed(a, None, ["x"])
    feed(a, BARRIER_STREAM, [1])
    feed(a, DRAINED_STREAM)                           # parked: A is aligned on barrier 1
    assert core.checkpoint.parked
    _rollback(core, 7, None)
    feed(b, None, ["y"])
    feed(b, DRAINED_STREAM)
    assert _totals(downstream) == [] and DRAINED_STREAM not in [st for st, _ in downstream]
    assert core.obj.finishes == 0
    feed(a, DRAINED_STREAM)
    assert _totals(downstream) == [("y", 1)] and core.obj.finishes == 1


def _spout_task():
    b = TopologyBuilder()
    b.set_spout("src", GatedCountSpout(), 1)
    b.set_bolt("out", PassBolt(), 1).shuffle_grouping("src")
    topo = b.create_topology()
    (src,), (out,) = topo.component_tasks["src"], topo.component_tasks["out"]
    core = make_executor("t", topo, {"topology.acker.executors": 0,
                                     "topology.batch.flush.interval.millis": 1},
                         src, {src: 0, out: 0})
    enable_checkpoints(core, MemoryProvider().task_store("src", src))
    reports, downstream = [], []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({out: lambda items: downstream.extend(items) or len(items)})
    return core, reports, downstream


def _data(downstream, since=0) -> list[int]:
    return [v[0] for st, v in downstream[since:] if st >= 0]


def _drained(downstream) -> int:
    return sum(st == DRAINED_STREAM for st, _ in downstream)


def _rewind_and_reach_the_end_again(core, reports, downstream, checkpoint_id) -> int:
    """Roll the spout task back to ``checkpoint_id`` (generation 9), open its gate, resume
    it, and wait for its end of data again; returns where the downstream list stood."""
    mark = len(downstream)
    core.checkpoint.request("rollback", (9, checkpoint_id, False, ()))
    until(lambda: ("paused", core.task_id, 9) in reports, 10, "the rollback")
    core.obj.open_gate = True
    core.checkpoint.request("resume", (9,))
    until(lambda: _drained(downstream[mark:]) == 1, 10, "the end of data again")
    return mark


def test_a_drain_rewound_by_a_rollback_emits_up_to_the_drain_again_then_ends_again():
    """A position-keeping spout without drain() emits 0..2, takes barrier 1 (committed),
    emits 3, 4, then drains (the executor ends it: end of data). A rollback to 1 rewinds
    it to 3: it must emit 3 and 4 again (not 5), and send its end of data again."""
    core, reports, downstream = _spout_task()
    gate = core.obj.gate
    core.start()
    try:
        gate.release(3)
        until(lambda: _data(downstream) == [0, 1, 2], 10, "three tuples")
        core.checkpoint.request("trigger", (0, 1))
        until(lambda: ("prepared", core.task_id, 1, 0, False) in reports, 10, "the snapshot")
        core.checkpoint.request("commit", (1, False))
        gate.release(2)
        until(lambda: _data(downstream) == [0, 1, 2, 3, 4], 10, "two more")
        core.set_draining()
        until(lambda: _drained(downstream) == 1, 10, "the end of data")
        assert ("data_ended", core.task_id, 0) in reports
        mark = _rewind_and_reach_the_end_again(core, reports, downstream, 1)
        assert _data(downstream, mark) == [3, 4]
        assert ("data_ended", core.task_id, 9) in reports and core.state == "running"
        core.checkpoint.request("trigger", (9, 2))
        core.checkpoint.request("commit", (2, True))  # final: the stream ends
        until(lambda: core.done.is_set(), 10, "the end of stream")
        assert core.state == "done" and downstream[-1][0] == EOS_STREAM
    finally:
        core.stop()


def test_a_task_restarted_after_the_final_commit_only_ends_its_stream():
    """A restarted task whose restored checkpoint is the final one emits nothing (not even
    end of data) and ends its stream once resumed."""
    core, reports, downstream = _spout_task()
    store = core.checkpoint.store
    store.prepare(4, [(0, b"\xa8position", b"\x05")], [])
    enable_checkpoints(core, store, gen=11, checkpoint_id=4, rejoining=True, final=True)
    core.checkpoint.report = lambda *r: reports.append(r)
    core.obj.open_gate = True
    core.start()
    try:
        until(lambda: ("paused", core.task_id, 11) in reports, 10, "its pause")
        core.checkpoint.request("resume", (11,))
        until(lambda: core.done.is_set(), 10, "the end of stream")
        assert [st for st, _ in downstream] == [EOS_STREAM] and core.state == "done"
    finally:
        core.stop()


# -- on Ray -----------------------------------------------------------------------------------


def _totals_topology(data, out, db, **counting):
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS totals (word TEXT, n INTEGER)")
    con.commit()
    con.close()
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)), 2)
    b.set_bolt("count", TotalsWordCount(**counting), 2).fields_grouping("src", ("word",))
    b.set_bolt("parquet", ParquetSink(out, min_rows=1000), 1).shuffle_grouping("count")
    b.set_bolt("db", DbApiSink(functools.partial(sqlite3.connect, db, timeout=30),
                               "INSERT INTO totals (word, n) VALUES (?, ?)"),
               1).shuffle_grouping("count")
    return b.create_topology()


def _parquet_totals(out) -> list:
    import pyarrow.dataset as pads

    t = pads.dataset(out, format="parquet").to_table()
    return sorted(zip(t.column("word").to_pylist(), t.column("count").to_pylist(),
                      strict=True))


def _db_totals(db) -> list:
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute("SELECT word, n FROM totals"))
    finally:
        con.close()


def test_totals_emitted_in_finish_reach_parquet_and_sqlite_once_across_kills(
        cluster, name, tmp_path):
    """The README's word count, stateful, emits its totals in finish() into a ParquetSink
    (holding rows back for bigger files) and a DbApiSink on SQLite; a counting task is
    killed once mid-stream and once after the spouts' input ended (its finish() takes a
    second: before the final commit). Each sink holds every total once (a run without
    kills proves nothing more: its totals took the same path)."""
    from tests.test_state import _kill_and_wait

    data = words(6000)
    out, db = str(tmp_path / "out"), str(tmp_path / "out.db")
    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt"),
            "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50}
    topology = _totals_topology(data, out, db, delay_s=0.0005, finish_delay_s=1.0)
    handle = cluster.submit_topology(name, conf, topology)
    try:
        victim = handle.topology.component_tasks["count"][0]
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        _kill_and_wait(handle, victim)
        spouts = set(handle.topology.component_tasks["src"])
        until(lambda: spouts <= set(handle.checkpoint_stats()["data_ended_tasks"]),
              60, "the spouts' end of data")
        _kill_and_wait(handle, victim)
        assert handle.wait(120), handle.stats().summary()
        s = handle.checkpoint_stats()
        assert s["final"] and s["failure"] is None
    finally:
        cluster.kill_topology(name)
    expected = sorted(collections.Counter(data).items())
    assert _parquet_totals(out) == expected
    assert _db_totals(db) == expected


class _HourlyCounts(WindowedBolt):
    """Per origin and event-time hour: ``(origin, start_ms, n)``."""

    outputs = ("origin", "start_ms", "n")

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, window) -> None:
        for origin, n in sorted(collections.Counter(t["origin"] for t in window.get()).items()):
            self.collector.emit((origin, window.start_timestamp, n))


def test_hourly_windows_that_fire_at_the_end_of_input_reach_parquet_once(cluster, name,
                                                                         tmp_path):
    """Persistent event-time hourly windows (the topology checkpoints: a ParquetSink):
    the last hours' windows fire only when the input ends, and their rows reach the
    dataset with the others, each once."""
    import pyarrow.dataset as pads

    hour = 3_600_000
    rows = [("ABC"[i % 3], i * 97_000) for i in range(600)]   # 16 hours of events
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(rows, ("origin", "ts")), 2)
    b.set_bolt("win", _HourlyCounts().with_tumbling_window(Duration(hour))
               .with_timestamp_field("ts"), 2).fields_grouping("rows", ("origin",))
    out = str(tmp_path / "out")
    b.set_bolt("parquet", ParquetSink(out), 1).shuffle_grouping("win")
    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assert handle.wait(120), handle.stats().summary()
    finally:
        cluster.kill_topology(name)
    t = pads.dataset(out, format="parquet").to_table()
    got = sorted(zip(t.column("origin").to_pylist(), t.column("start_ms").to_pylist(),
                     t.column("n").to_pylist(), strict=True))
    expected = collections.Counter((o, ts - ts % hour) for o, ts in rows)
    assert got == sorted((o, start, n) for (o, start), n in expected.items())


def test_a_finish_that_keeps_raising_fails_the_topology_naming_its_task(cluster, name,
                                                                        tmp_path):
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(words(50), fields=("word",)))
    b.set_bolt("count", TotalsWordCount(fail_finish=99), 1).shuffle_grouping("src")
    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        with pytest.raises(TopologyFailed, match=r"count:\d+: finish\(\) raised RuntimeError"):
            handle.wait(120)
        assert handle.checkpoint_stats()["rollbacks"] == FINISH_ATTEMPTS - 1
    finally:
        cluster.kill_topology(name)


class _FlakyPublishSink(TwoPhaseCommitSink):
    """Holds rows per checkpoint; its first ``commit`` raises, later ones publish."""

    def prepare(self, conf, context, collector) -> None:
        self.rows, self.published, self.fails_left = [], [], 1

    def write(self, tup) -> None:
        self.rows.append(tup.values[0])

    def pre_commit(self, checkpoint_id):
        rows, self.rows = self.rows, []
        return rows or None

    def commit(self, checkpoint_id, transaction) -> None:
        if self.fails_left:
            self.fails_left -= 1
            raise OSError("the target is away")
        if transaction not in self.published:
            self.published.append(transaction)

    def abort(self, checkpoint_id, transaction) -> None:
        pass


def test_a_final_commit_a_sink_could_not_publish_does_not_end_it_before_its_restore():
    """The final checkpoint's commit raises in a sink task: the task reports the failure
    and does not end; the rollback to that (final) checkpoint publishes it, then it ends."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)))
    b.set_bolt("sink", _FlakyPublishSink(), 1).shuffle_grouping("src")
    topo = b.create_topology()
    (src,), (sink,) = topo.component_tasks["src"], topo.component_tasks["sink"]
    core = make_executor("t", topo, {"topology.acker.executors": 0}, sink, {src: 0, sink: 0})
    enable_checkpoints(core, MemoryProvider().task_store("sink", sink))
    reports = []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({})
    core._open()
    s = [i for i, (c, _, _) in enumerate(stream_table(topo)) if c == "src"][0]
    core.handle((src, s, ["a"]))
    core.handle((src, DRAINED_STREAM, None))
    core.handle((src, BARRIER_STREAM, [1]))
    core.checkpoint.apply("commit", (1, True))
    assert not core.checkpoint.final_committed() and reports[-1][0] == "failed"
    assert core.obj.sink.published == []
    _rollback(core, 3, 1, final=True)
    assert core.checkpoint.final_committed() and core.obj.sink.published == [["a"]]


def test_a_rollback_names_the_tasks_whose_finish_had_run_at_its_checkpoint():
    c = CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2], [2], 600.0, 5.0, 0.0,
                        -600.0)
    (trigger,) = c.tick(0.0)
    c.prepared(2, 1, 0, 0.1, True)
    assert c.prepared(1, 1, 0, 0.1, False)[0].kind == "commit"
    (rollback,) = c.failed(1, "a tree failed", 0.2)
    assert rollback.args[1:] == (1, False, (2,))


class _EndRowBolt(Bolt):
    """A bolt without state whose finish() emits one row."""

    outputs = ("word",)

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, tup) -> None:
        pass

    def finish(self) -> None:
        self.collector.emit(("end",))


def test_a_task_without_state_runs_finish_again_only_after_a_rollback_from_before_it():
    """The coordinator's record stands in for a snapshot a task without state does not
    write: told it had finished at the restored checkpoint, it does not emit its
    finish() row again; told otherwise, it does. Ticks stop once its input has ended."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)))
    b.set_bolt("end", _EndRowBolt(), 1).shuffle_grouping("src")
    b.set_bolt("out", PassBolt(), 1).shuffle_grouping("end")
    topo = b.create_topology()
    (src,), (end,), (out,) = (topo.component_tasks[c] for c in ("src", "end", "out"))
    core = make_executor("t", topo, {"topology.acker.executors": 0,
                                     "topology.tick.tuple.freq.secs": 1}, end,
                         {src: 0, end: 0, out: 0})
    now = [0.0]
    core.clock = lambda: now[0]
    enable_checkpoints(core, None)
    reports, downstream = [], []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({out: lambda items: downstream.extend(items) or len(items)})
    core._open()

    def feed(stream, values=None):
        core.handle((src, stream, values))
        core.outbox.try_flush_batches()
    feed(DRAINED_STREAM)
    feed(BARRIER_STREAM, [1])
    assert reports[-1] == ("prepared", end, 1, 0, True)
    now[0] = 5.0
    core._timers(False)
    assert core.queue.size() == 0, "a tick after finish()"
    del downstream[:]
    _rollback(core, 3, 1, finished=(end,))
    feed(DRAINED_STREAM)
    assert _totals(downstream) == []
    _rollback(core, 4, None)
    now[0] = 10.0
    core._timers(False)
    assert core.queue.size() == 1, "ticks again once the input is rewound"
    feed(DRAINED_STREAM)
    assert _totals(downstream) == [("end",)]


def test_a_drain_rewound_to_the_checkpoint_the_task_started_from_emits_again():
    """A spout restored at start from checkpoint 4 (position 5) emits 5, 6 and drains; a
    rollback to 4 has it emit 5, 6 again before it ends again."""
    core, reports, downstream = _spout_task()
    store = core.checkpoint.store
    store.prepare(4, [(0, b"\xa8position", b"\x05")], [])
    enable_checkpoints(core, store, gen=0, checkpoint_id=4)
    core.checkpoint.report = lambda *r: reports.append(r)
    core.start()
    try:
        core.obj.gate.release(2)
        until(lambda: _data(downstream) == [5, 6], 10, "two tuples")
        core.set_draining()
        until(lambda: _drained(downstream) == 1, 10, "the end of data")
        mark = _rewind_and_reach_the_end_again(core, reports, downstream, 4)
        assert _data(downstream, mark) == [5, 6]
    finally:
        core.stop()


def test_a_drain_asked_for_before_a_rewound_spout_is_back_applies_where_it_had_come():
    """Rolled back to barrier 1 (after 0..2) from 0..4, the spout is drained before it
    emits again: it emits 3 and 4 again (where it had come), then ends."""
    core, reports, downstream = _spout_task()
    core.start()
    try:
        core.obj.gate.release(3)
        until(lambda: _data(downstream) == [0, 1, 2], 10, "three tuples")
        core.checkpoint.request("trigger", (0, 1))
        until(lambda: ("prepared", core.task_id, 1, 0, False) in reports, 10, "a snapshot")
        core.checkpoint.request("commit", (1, False))
        core.obj.gate.release(2)
        until(lambda: _data(downstream) == [0, 1, 2, 3, 4], 10, "two more")
        mark = len(downstream)
        core.checkpoint.request("rollback", (9, 1, False, ()))
        until(lambda: ("paused", core.task_id, 9) in reports, 10, "the rollback")
        core.checkpoint.request("resume", (9,))
        core.set_draining()
        until(lambda: core.draining, 10, "the drain")
        core.obj.open_gate = True
        until(lambda: _drained(downstream[mark:]) == 1, 10, "the end of data")
        assert _data(downstream, mark) == [3, 4]
    finally:
        core.stop()
