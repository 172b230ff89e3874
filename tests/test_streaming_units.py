"""The pure parts of the live Spark source, without Ray or Spark: the hand-off's decisions,
which sources bound rows per micro-batch, the windowed bolt's ack-on-entry rule and the plan
that switches it on, the kill command's options."""

from __future__ import annotations

import pytest

from connectors.spark.handoff import HandoffCore
from connectors.spark.sources import StreamSource, parse_scala_map_keys, source_problems
from topology import (
    Bolt,
    Duration,
    Fields,
    Spout,
    TopologyBuilder,
    Tuple,
    WindowedBolt,
)

# -- the hand-off ------------------------------------------------------------------------------


def test_handoff_bounds_micro_batches_and_rows():
    h = HandoffCore(max_batches=2, max_rows=100, wait_for_acks=False)
    assert h.can_enter(60)
    h.enter(0, [("a", 30), ("b", 30)])
    assert not h.can_enter(60)  # 120 rows > 100
    assert h.can_enter(40)
    h.enter(1, [("c", 40)])
    assert not h.can_enter(1)  # two micro-batches wait: full in micro-batches
    assert h.take() == ("block", 0, 0, "a", 30, 0) and h.held_rows == 70
    assert h.can_enter(30) is False  # still two micro-batches with untaken blocks
    assert h.take() == ("block", 0, 1, "b", 30, 0)
    assert h.held_batches == 1 and h.can_enter(60) and not h.can_enter(61)
    assert h.take() == ("block", 1, 0, "c", 40, 0)
    assert h.take() == ("idle",)
    assert h.max_held_rows == 100 and h.max_held_batches == 2


def test_a_micro_batch_larger_than_the_row_bound_enters_an_empty_handoff_alone():
    h = HandoffCore(max_batches=3, max_rows=10, wait_for_acks=False)
    assert h.can_enter(50)
    h.enter(0, [("a", 50)])
    assert not h.can_enter(1)
    h.take()
    assert h.can_enter(50)


def test_with_acks_a_put_completes_once_every_block_is_done():
    h = HandoffCore(max_batches=2, max_rows=100, wait_for_acks=True)
    h.enter(7, [("a", 3), ("empty", 0), ("b", 2)])
    assert h.put_done(7) is None
    assert h.take()[:3] == ("block", 7, 0)
    h.acked(7, 0)
    assert h.put_done(7) is None  # block b not even taken
    assert h.take()[:3] == ("block", 7, 2)  # the empty block is never handed out
    assert h.put_done(7) is None
    h.acked(7, 2)
    assert h.put_done(7) == "ok" and h.batches_done == 1
    h.acked(99, 0)  # an unknown (earlier attempt's) batch: ignored


def test_blocks_of_a_restarted_spout_task_go_back_to_the_front():
    h = HandoffCore(max_batches=2, max_rows=100, wait_for_acks=True)
    h.enter(0, [("a", 3), ("b", 3), ("c", 3)])
    assert h.take(task=1)[3] == "a"
    assert h.take(task=2)[3] == "b"
    h.acked(0, 1)  # task 2 finished b
    assert h.reopened(2) == 0
    assert h.reopened(1) == 1  # task 1 died holding a
    assert h.held_rows == 6 and h.stats()["leased_blocks"] == 0
    assert h.take(task=1)[3] == "a"  # again, before c
    assert h.take(task=2)[3] == "c"
    h.acked(0, 0)
    assert h.put_done(0) is None
    h.acked(0, 2)
    assert h.put_done(0) == "ok"


def test_blocks_given_back_with_positions_start_after_their_committed_rows():
    """A task's positions (rows of each block a committed checkpoint holds): a block given
    back starts after them, one held whole is done without a take, and a position for a
    micro-batch not yet inside applies when Spark runs it again (a savepoint's)."""
    h = HandoffCore(max_batches=2, max_rows=100, wait_for_acks=True)
    h.enter(0, [("a", 3), ("b", 3), ("c", 3)])
    for _ in range(3):
        h.take(task=1)
    assert h.reopened(1, {(0, 0): 2, (0, 1): 3, (1, 0): 4}) == 3
    assert h.take(task=1) == ("block", 0, 0, "a", 3, 2)
    assert h.take(task=1) == ("block", 0, 2, "c", 3, 0)  # b was done: a checkpoint holds it
    h.acked(0, 0)
    h.acked(0, 2)
    assert h.put_done(0) == "ok" and h.stats()["rows_skipped"] == 5
    h.enter(1, [("d", 5)])  # the micro-batch the savepoint's position names
    assert h.take(task=2) == ("block", 1, 0, "d", 5, 4)


def test_without_acks_nothing_is_leased():
    h = HandoffCore(1, 100, wait_for_acks=False)
    h.enter(0, [("a", 3)])
    h.take(task=1)
    assert h.reopened(1) == 0 and h.put_done(0) == "ok"


def test_empty_micro_batch_completes_at_once():
    h = HandoffCore(1, 10, True)
    h.enter(0, [])
    assert h.put_done(0) == "ok" and h.held_batches == 0


def test_drain_delivers_what_is_inside_then_ends_and_refuses_new_batches():
    h = HandoffCore(2, 100, True)
    h.enter(0, [("a", 5)])
    h.drain()
    assert not h.can_enter(1) and h.put_answer() == "draining"
    assert h.take() == ("block", 0, 0, "a", 5, 0)
    assert h.put_done(0) is None  # the batch inside still completes by its acks
    h.acked(0, 0)
    assert h.put_done(0) == "ok"
    assert h.take() == ("end",)


def test_close_answers_waiting_puts_and_takes_and_a_later_failure_is_ignored():
    h = HandoffCore(1, 100, True)
    h.enter(0, [("a", 5)])
    h.close()
    assert h.put_done(0) == "closed" and h.put_answer() == "closed"
    assert h.take() == ("closed",)
    assert not h.fail("query stopped")  # the query failing because we closed it
    assert h.state == "closed"


def test_a_failed_query_answers_takes_with_its_error():
    h = HandoffCore(1, 100, True)
    h.enter(0, [("a", 5)])
    assert h.fail("boom")
    assert h.take() == ("failed", "boom") and h.put_done(0) == "failed"
    h.drain()  # states only move forward
    assert h.state == "failed"


def test_a_micro_batch_run_again_replaces_its_untaken_blocks():
    h = HandoffCore(2, 100, True)
    h.enter(3, [("a", 5), ("b", 5)])
    h.enter(3, [("a2", 5), ("b2", 5)])
    assert h.held_rows == 10 and h.held_batches == 1
    assert h.take()[3] == "a2"


def test_handoff_refuses_bounds_below_one():
    with pytest.raises(ValueError):
        HandoffCore(0, 10, True)


# -- which sources bound rows --------------------------------------------------------------------


def test_sources_that_bound_rows_per_micro_batch_pass_and_others_say_what_to_set():
    ok = [StreamSource("rate-micro-batch", frozenset({"rowsPerBatch"})),
          StreamSource("csv", frozenset({"maxfilespertrigger", "path"}), True),
          StreamSource("kafka", frozenset({"maxOffsetsPerTrigger", "subscribe"}))]
    assert source_problems(ok) == ([], [])
    unbounded, unknown = source_problems([
        StreamSource("rate", frozenset({"rowsPerSecond"})),
        StreamSource("json", frozenset({"path"}), True),
        StreamSource("kafka", frozenset({"subscribe"})),
        StreamSource("memory", frozenset())])
    assert len(unbounded) == 3 and len(unknown) == 1
    assert "rate-micro-batch" in unbounded[0]
    assert "maxFilesPerTrigger" in unbounded[1] and "maxOffsetsPerTrigger" in unbounded[2]
    assert "'memory'" in unknown[0]


def test_scala_map_keys_from_a_file_sources_options():
    assert parse_scala_map_keys("Map(maxFilesPerTrigger -> 2, path -> /tmp/a, b)") == {
        "maxfilespertrigger", "path"}
    assert parse_scala_map_keys("Map()") == frozenset()


def test_query_error_keeps_the_cause_without_stack_frames():
    from connectors.spark.streaming_spout import query_error

    e = RuntimeError("An error occurred\n\tat org.apache.X(X.scala:1)\n  File \"x.py\"\n"
                     "Caused by: java.lang.RuntimeException: '(v < 150)' is not true!")
    msg = query_error(e)
    assert "at org" not in msg and "File" not in msg
    assert msg.endswith("'(v < 150)' is not true!")
    assert len(query_error(RuntimeError("x" * 1000))) <= 403


# -- windowed bolts behind a source that waits for acks ----------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.acked, self.emitted = [], []

    def emit(self, values, stream="default", anchors=None):
        self.emitted.append((list(values), list(anchors or [])))
        return ()

    def ack(self, tup):
        if not tup.done:
            tup.done = True
            self.acked.append(tup.values[0])

    def fail(self, tup, reason=None):  # pragma: no cover
        raise AssertionError(tup)

    def report_error(self, exc):  # pragma: no cover
        raise exc


class _Sum(WindowedBolt):
    outputs = ("n",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        self.collector.emit((len(window),))


def _windowed(conf):
    from actors.windowing.executor import WindowedBoltExecutor
    from topology._components import TopologyContext

    ex = WindowedBoltExecutor(_Sum().with_tumbling_window(Duration.of(10))
                              .with_timestamp_field("ts"))
    col = _Collector()
    ex.prepare(conf, TopologyContext("t", "win", 2, 0, {"src": [1], "win": [2]},
                                     sources={("src", "default"): Fields("ts")}), col)
    return ex, col


@pytest.mark.parametrize("on_entry", [False, True])
def test_windowed_bolt_acks_on_entry_or_as_tuples_leave(on_entry):
    ex, col = _windowed({"topology.bolts.window.ack.on.entry": on_entry})
    for ts in (1, 2, 3):
        ex.execute(Tuple([ts], Fields("ts"), "src", 1, "default"))
    # the watermark has not passed the window [0, 10): nothing fired yet
    assert col.acked == ([1, 2, 3] if on_entry else [])
    ex.upstream_ended(1)
    assert col.acked == [1, 2, 3]
    [(values, anchors)] = col.emitted
    assert values == [3]
    assert len(anchors) == (0 if on_entry else 3)  # acked on entry: nothing to anchor to


class _Live(Spout):
    outputs = ("ts",)
    acks_hold_source = True

    def next_tuple(self):  # pragma: no cover
        pass


class _Pass(Bolt):
    outputs = ("ts",)

    def execute(self, tup):  # pragma: no cover
        pass


def _topology(spout):
    b = TopologyBuilder()
    b.set_spout("live", spout)
    b.set_bolt("win", _Sum().with_tumbling_window(Duration.of(10))
               .with_timestamp_field("ts")).shuffle_grouping("live")
    return b.create_topology()


def test_plan_checkpoints_windowed_bolts_behind_a_source_that_waits_for_acks():
    """Behind a source that waits for acks, with acking, windows are persistent (the
    topology runs checkpoints) unless the ack-on-entry key is set: true keeps acking on
    entry without checkpoints, false acks on leaving; each is warned of."""
    from actors.state import checkpointed
    from cluster._plan import plan

    key = "topology.bolts.window.ack.on.entry"
    p = plan(_topology(_Live()), {})
    assert checkpointed(p.topology, p.conf) and not p.warnings
    # acking off: nothing waits for acks
    p = plan(_topology(_Live()), {"topology.acker.executors": 0})
    assert not checkpointed(p.topology, p.conf)
    plain = _Live()
    plain.acks_hold_source = False
    p = plan(_topology(plain), {})
    assert not checkpointed(p.topology, p.conf)
    p = plan(_topology(_Live()), {key: True})
    assert not checkpointed(p.topology, p.conf)
    assert any("at-least-once up to the windows" in w for w in p.warnings)
    p = plan(_topology(_Live()), {key: False})
    assert not checkpointed(p.topology, p.conf)
    assert any("may then never close" in w for w in p.warnings)


# -- the kill command ------------------------------------------------------------------------


def test_kill_command_takes_wait_and_drain():
    from cluster._cli import build_parser

    a = build_parser().parse_args(["kill", "live", "--wait", "3"])
    assert a.name == "live" and a.wait == 3.0 and not a.drain
    a = build_parser().parse_args(["kill", "live", "--drain", "-w", "60"])
    assert a.drain and a.wait == 60.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["stats", "live", "--wait", "3"])


# -- replays before new tuples (actors/_replay_gate.py) ------------------------------------------


def test_a_replay_gate_holds_new_emits_until_every_failed_id_came_again():
    from actors._replay_gate import ReplayGate

    g = ReplayGate([3, 4], timeout_s=10.0)
    assert not g.admits(7) and not g.admits(None)  # new tuples: held
    g.hold("seven")
    assert g.admits(4) and not g.open
    assert g.admits(3) and g.open  # the last replay: the held emits go
    assert g.release() == ["seven"] and g.admits(8) and g.late == 0
    assert g.done(0.0)


def test_a_replay_gate_opens_at_its_deadline_and_counts_replays_after_it_as_late():
    from actors._replay_gate import ReplayGate

    g = ReplayGate([1, 2], timeout_s=10.0)
    assert not g.admits(5)
    g.hold("five")
    assert not g.expire(0.0)  # the clock starts at the first call (the resume)
    assert not g.expire(9.9) and g.expire(10.0) and not g.expire(11.0)
    assert g.release() == ["five"] and g.admits(6)
    assert g.admits(1) and g.late == 1  # a replay after the hold: late
    assert not g.done(19.0) and g.done(20.0)  # id 2 forgotten at forget_at


def test_a_replay_gate_carries_an_earlier_hold_only_while_it_lasts():
    from actors._replay_gate import ReplayGate

    first = ReplayGate([1, 2], timeout_s=10.0)
    first.hold("new")
    second = ReplayGate([3], timeout_s=10.0, carried=first)
    assert second.pending == {1, 2, 3} and list(second.held) == ["new"]
    first = ReplayGate([1], timeout_s=10.0)
    first.expire(0.0)
    assert first.expire(10.0)  # its deadline passed: 1 is no longer waited for
    assert ReplayGate([3], timeout_s=10.0, carried=first).pending == {3}
