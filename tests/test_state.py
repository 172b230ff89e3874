"""Checkpointed state: the state API, the coordinator's round state machine, barrier
alignment, the refusals at submit, and exactly-once state on Ray across killed tasks."""

from __future__ import annotations

import collections
import datetime
import decimal
import itertools
import os
import signal

import pytest
import ray

from actors import ExecutorCore, make_executor, stream_table
from actors._streams import BARRIER_STREAM
from actors.state import CoordinatorCore, enable_checkpoints
from actors.state.providers import MemoryProvider
from cluster import plan, read_state
from tests._util import until
from tests.components import (
    PassBolt,
    ReplayingWordSpout,
    StatefulWordCount,
    merged_counts,
    words,
)
from topology import (
    ConfigError,
    IterableSpout,
    KeyValueState,
    StateError,
    TopologyBuilder,
    TopologyError,
)

# -- the state API -----------------------------------------------------------------------------


def test_key_value_state_keeps_codec_values_and_tracks_changed_keys():
    s = KeyValueState()
    when = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)
    s.put("a", 1)
    s.put(("k", 2), {"at": when, "amount": decimal.Decimal("1.50")})
    s.put(b"raw", [1, 2])
    assert s.get(("k", 2)) == {"at": when, "amount": decimal.Decimal("1.50")}
    got = s.get(b"raw")
    got.append(3)  # a copy: the state is unchanged until put again
    assert s.get(b"raw") == [1, 2] and s.get("missing", 0) == 0 and len(s) == 3
    puts, deletes = s.take_changes()
    assert {k for k, _ in puts} == {"a", ("k", 2), b"raw"} and deletes == []
    s.delete("a")
    s.delete("never there")
    s.put("b", 2)
    puts, deletes = s.take_changes()
    assert [k for k, _ in puts] == ["b"] and deletes == ["a"]
    assert dict(s.items()) == {("k", 2): s.get(("k", 2)), b"raw": [1, 2], "b": 2}
    assert s.take_changes() == ([], [])


def test_unencodable_value_or_bad_key_raises_at_put_naming_component_and_key():
    s = KeyValueState(component="count", task=3)
    with pytest.raises(StateError, match=r"component 'count' task 3: state key 'w'.*object"):
        s.put("w", object())
    with pytest.raises(StateError, match="state keys are"):
        s.put(["a", "list"], 1)
    assert len(s) == 0 and s.take_changes() == ([], [])


def test_keyed_state_refuses_a_key_of_another_tasks_key_group():
    from topology._keygroups import key_group_range, state_key_group

    groups = key_group_range(0, 2, 128)  # task 0 of 2 owns groups 0-63
    s = KeyValueState(component="count", task=1, groups=groups,
                      key_group=lambda k: state_key_group(k, 1, 128))
    mine = next(w for w in (f"w{i}" for i in range(100)) if state_key_group(w, 1, 128) < 64)
    other = next(w for w in (f"w{i}" for i in range(100)) if state_key_group(w, 1, 128) >= 64)
    s.put(mine, 1)
    with pytest.raises(StateError, match="which this task does not own"):
        s.put(other, 1)


# -- the coordinator's state machine -----------------------------------------------------------

SPOUT, BOLT = 2, 1
STEPS = ("tick", "prep_spout", "prep_bolt", "fail", "pause_spout", "pause_bolt", "restart")


def _run(steps, log):
    """Drive a coordinator through ``steps`` (restarting it on "restart", on the same log),
    as the tasks would answer; check the invariants after each step."""
    now = [0.0]

    def new(restarted):
        return CoordinatorCore(log, [SPOUT, BOLT], [SPOUT], 1.0, 10.0, 0.0, now[0], restarted)

    c = new(False)
    actions = c.start(now[0])
    task_gen = {SPOUT: 0, BOLT: 0}  # what each task last heard
    task_round = {SPOUT: None, BOLT: None}
    reported: dict = collections.defaultdict(set)  # (id, gen) -> tasks that prepared
    triggered: list[int] = []
    committed: list[int] = []
    paused: dict = collections.defaultdict(set)
    resumed_ok = True

    def deliver(acts):
        nonlocal resumed_ok
        for a in acts:
            if a.kind == "trigger":
                gen, cid = a.args
                assert not triggered or cid > triggered[-1], "checkpoint ids never repeat"
                triggered.append(cid)
                for t in (SPOUT, BOLT):  # the barrier reaches the bolt too
                    if task_gen[t] == gen:
                        task_round[t] = cid
            elif a.kind == "commit":
                cid, _ = a.args
                assert reported[(cid, c.gen)] >= {SPOUT, BOLT}, "committed before all prepared"
                committed.append(cid)
            elif a.kind == "rollback":
                gen, cid, _, _ = a.args
                assert cid == (committed[-1] if committed else
                               (log.load()[2][-1] if log.load()[2] else None))
                for t in a.tasks:
                    task_gen[t] = gen
                    task_round[t] = None
            elif a.kind == "resume":
                (gen,) = a.args
                resumed_ok &= paused[gen] >= {SPOUT, BOLT} or a.tasks != (BOLT, SPOUT)

    deliver(actions)
    for step in steps:
        now[0] += 0.6
        if step == "tick":
            deliver(c.tick(now[0]))
        elif step.startswith("prep_"):
            t = SPOUT if step == "prep_spout" else BOLT
            if task_round[t] is not None:
                reported[(task_round[t], task_gen[t])].add(t)
                deliver(c.prepared(t, task_round[t], task_gen[t], now[0]))
        elif step == "fail":
            deliver(c.failed(BOLT, "a tree failed", now[0]))
        elif step.startswith("pause_"):
            t = SPOUT if step == "pause_spout" else BOLT
            paused[task_gen[t]].add(t)
            deliver(c.paused(t, task_gen[t], now[0]))
        elif step == "restart":  # the coordinator's actor died and Ray restarted it
            c = new(True)
            first = c.start(now[0])
            assert [a.kind for a in first] == ["rollback"], "a restart rolls back first"
            deliver(first)
        assert log.load()[2][-1:] == committed[-1:] or (not committed
                                                         and not log.load()[2])
    assert resumed_ok, "resumed before every task paused"


def test_coordinator_through_every_ordering_with_restarts_between_any_two_steps():
    """Every sequence of 5 steps (trigger, each task's prepare, a failure, each task's
    pause, a coordinator restart): ids never repeat, a round commits only once every task
    prepared it in the current generation, the log's last commit is the last one told, a
    restarted coordinator rolls back to it first (Storm users' "Invalid prepared state for
    commit" after restarts), and tasks resume only once all paused."""
    for n in range(1, 6):
        for steps in itertools.product(STEPS, repeat=n):
            _run(steps, MemoryProvider().checkpoint_log())


def test_coordinator_commits_resumes_and_ends():
    log = MemoryProvider().checkpoint_log()
    c = CoordinatorCore(log, [1, 2, 3], [3], 1.0, 5.0, 0.0, 0.0)
    assert c.start(0.0) == [] and c.tick(0.5) == []
    (trigger,) = c.tick(1.0)
    assert trigger.kind == "trigger" and trigger.tasks == (3,) and trigger.args == (0, 1)
    assert c.prepared(3, 1, 0, 1.1) == [] and c.prepared(1, 1, 0, 1.1) == []
    assert c.prepared(2, 1, 7, 1.1) == []  # another generation: stale
    (commit,) = c.prepared(2, 1, 0, 1.2)
    assert commit.kind == "commit" and commit.args == (1, False) and log.load()[2] == [1]
    (trigger,) = c.tick(2.0)
    assert c.ended(1, 2.1) == [] and c.prepared(3, 2, 0, 2.2) == []
    (commit,) = c.prepared(2, 2, 0, 2.3)  # the ended task is not waited for
    assert commit.args == (2, False) and commit.tasks == (2, 3)
    (trigger,) = c.tick(3.0)
    (rollback,) = c.tick(9.0)  # past the round's deadline
    assert rollback.kind == "rollback" and rollback.args[1] == 2 and c.failed_rounds == 1
    gen = rollback.args[0]
    assert c.tick(13.0) == []  # no round while rolling back (within its 5 s deadline)
    assert c.paused(2, gen, 13.0) == []
    (resume,) = c.paused(3, gen, 13.0)
    assert resume.kind == "resume" and resume.args == (gen,)
    (again,) = c.paused(3, gen, 14.0)  # its resume was lost: sent again, to it alone
    assert again.tasks == (3,)
    (trigger,) = c.tick(14.0)
    assert trigger.args == (gen, 4)  # round 3 was aborted: its id is not reused


def test_a_final_checkpoint_requested_during_a_round_starts_when_that_round_commits():
    """A second spout that emits its last tuple while a round is in flight (after that
    round's barrier) asks for the next one: the commit must not push it an interval away,
    or that spout's stream never ends."""
    c = CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2, 3], [2, 3], 600.0, 5.0,
                        0.5, 0.0)
    c.request(1.0)  # spout 2 is done
    (trigger,) = c.tick(1.0)
    c.request(1.1)  # spout 3 is done, after it took round 1's barrier
    assert c.tick(1.2) == []  # (one round at a time)
    for task in (1, 2):
        assert c.prepared(task, 1, 0, 1.3) == []
    (commit,) = c.prepared(3, 1, 0, 1.3)
    assert c.tick(1.5) == []  # the minimum pause holds
    (trigger,) = c.tick(1.8)
    assert trigger.args == (0, 2)
    for task in (1, 2, 3):
        c.prepared(task, 2, 0, 1.9)
    assert c.tick(100.0) == []  # no request since: the interval again


def test_a_failure_that_repeats_resumes_later_each_time_until_a_round_completes():
    """Flink's exponential-delay restart strategy: the first rollback resumes at once, the
    second after 0.1 s, the third after 0.2 s; a completed round resets it."""
    c = CoordinatorCore(MemoryProvider().checkpoint_log(), [1, 2], [2], 1.0, 5.0, 0.0, 0.0)
    now = 0.0
    for delay in (0.0, 0.1, 0.2):
        (rollback,) = c.failed(1, "commit failed", now)
        gen = rollback.args[0]
        assert c.paused(1, gen, now) == []
        resumed = c.paused(2, gen, now)
        if delay:
            assert resumed == [] and c.tick(now + delay / 2) == []
            (resume,) = c.tick(now + delay)
        else:
            (resume,) = resumed
        assert resume.kind == "resume"
        now += delay + 0.01
    (trigger,) = c.tick(now + 1.0)
    c.prepared(1, trigger.args[1], trigger.args[0], now + 1.1)
    assert c.prepared(2, trigger.args[1], trigger.args[0], now + 1.1)[0].kind == "commit"
    (rollback,) = c.failed(1, "again", now + 2)
    c.paused(1, rollback.args[0], now + 2)
    assert c.paused(2, rollback.args[0], now + 2)[0].kind == "resume"  # reset: at once


# -- alignment ---------------------------------------------------------------------------------


def test_alignment_parks_a_channel_after_its_barrier_and_holds_its_credit():
    """Two spout tasks feed one stateful bolt: once spout A's barrier came, A's next
    tuple is parked (and its frames' acknowledgement held), while B's tuples before B's
    barrier are counted; at B's barrier the snapshot holds exactly the tuples before both
    barriers, the barrier goes downstream, A gets its credit back and its parked tuple
    is counted after."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)), 2)
    b.set_bolt("count", StatefulWordCount(), 1).shuffle_grouping("src")
    b.set_bolt("out", PassBolt(), 1).shuffle_grouping("count")
    topo = b.create_topology()
    count = topo.component_tasks["count"][0]
    a, bb = topo.component_tasks["src"]
    workers = {t: 0 for t in topo.component_tasks["count"] + topo.component_tasks["src"]
               + topo.component_tasks["out"]}
    core = make_executor("t", topo, {"topology.acker.executors": 0}, count, workers)
    store = MemoryProvider().task_store("count", count)
    enable_checkpoints(core, store)
    reports, grants, downstream = [], [], []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.checkpoint.grant = lambda *g: grants.append(g)
    out = topo.component_tasks["out"][0]
    core.connect({out: lambda items: downstream.extend(items) or len(items)})
    core._open()
    s = [i for i, (c, sid, _) in enumerate(stream_table(topo)) if c == "src"][0]

    def frame(src, seq, *items):
        ack = core.inbound.accept_frame(src, seq, list(items), False)[0]
        core.queue.consume(core.handle)
        return ack

    assert frame(a, 0, [s, ["x"]]) == 0
    assert frame(a, 1, [BARRIER_STREAM, [1]]) == 1
    assert core.blocked == {a} and reports == []
    assert frame(a, 2, [s, ["y"]]) == 1  # parked, and its acknowledgement held
    assert frame(bb, 0, [s, ["x"]]) == 0  # B is not blocked
    assert core.checkpoint.state.get("y") is None and core.checkpoint.state.get("x") == 2
    assert frame(bb, 1, [BARRIER_STREAM, [1]]) == 1
    assert reports == [("prepared", count, 1, 0, False)]
    assert {k: v for k, v in store.restore(1).items()} == {b"\xa1x": b"\x02"}
    assert grants == [(a, 0, 2)]  # A's frames up to seq 2 acknowledged by another call
    assert core.checkpoint.state.get("y") == 1 and core.blocked == frozenset()
    core.outbox.try_flush_batches()
    assert (BARRIER_STREAM, [1]) in downstream


def test_barrier_of_an_ended_input_is_not_waited_for():
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["x"], fields=("word",)), 2)
    b.set_bolt("count", StatefulWordCount(), 1).shuffle_grouping("src")
    topo = b.create_topology()
    count = topo.component_tasks["count"][0]
    a, bb = topo.component_tasks["src"]
    core = make_executor("t", topo, {"topology.acker.executors": 0}, count,
                         {t: 0 for t in (count, a, bb)})
    enable_checkpoints(core, MemoryProvider().task_store("count", count))
    reports = []
    core.checkpoint.report = lambda *r: reports.append(r)
    core.connect({})
    core._open()
    core.handle((a, BARRIER_STREAM, [1]))
    assert reports == []
    core.handle((bb, -1, None))  # B ends: A's barrier completes the round
    assert reports == [("prepared", count, 1, 0, False)]


# -- refusals at submit --------------------------------------------------------------------------


def _stateful(spout=None):
    b = TopologyBuilder()
    b.set_spout("src", spout or IterableSpout(words(10), fields=("word",)))
    b.set_bolt("count", StatefulWordCount()).fields_grouping("src", ("word",))
    return b


def test_refused_a_spout_that_can_neither_rewind_nor_replay():
    b = _stateful(ReplayingWordSpout(words(10)))
    with pytest.raises(TopologyError, match="spout 'src' can neither rewind nor replay"):
        plan(b.create_topology(), {"topology.acker.executors": 0})
    plan(b.create_topology(), {"topology.acker.executors": 1})  # replays on fail: accepted


def test_refused_shedding_upstream_of_state_and_interval_above_timeout():
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(words(10), fields=("word",)))
    b.set_bolt("mid", PassBolt()).shuffle_grouping("src").add_configuration(
        "topology.backpressure.overload", "shed")
    b.set_bolt("count", StatefulWordCount()).fields_grouping("mid", ("key",))
    with pytest.raises(ConfigError, match="'mid' sheds load .* upstream of stateful bolt"):
        plan(b.create_topology(), {"topology.acker.executors": 0})
    with pytest.raises(ConfigError, match="must be below topology.message.timeout.secs"):
        plan(_stateful().create_topology(), {"topology.message.timeout.secs": 1,
                                             "topology.state.checkpoint.interval.ms": 1000})


def test_refused_a_stateful_bolt_in_a_topology_with_a_cycle():
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(words(10), fields=("word",)))
    b.set_bolt("count", StatefulWordCount()).fields_grouping("src", ("word",))
    b.set_bolt("a", PassBolt()).shuffle_grouping("src").shuffle_grouping("b")
    b.set_bolt("b", PassBolt()).shuffle_grouping("a")
    with pytest.raises(TopologyError, match="cycle"):
        plan(b.create_topology(), {"topology.acker.executors": 0})


# -- on Ray ---------------------------------------------------------------------------------------


def _pid(actor):
    try:
        return ray.get(actor.pid.remote(), timeout=60)
    except ray.exceptions.RayActorError:
        return None


def _kill_and_wait(handle, task):
    """SIGKILL the actor of ``task``; return once Ray restarted it and the topology rolled
    back and resumed."""
    actor = handle.actors[task]
    before = handle.checkpoint_stats()["rollbacks"]
    pid = _pid(actor)
    os.kill(pid, signal.SIGKILL)
    until(lambda: _pid(actor) not in (None, pid), 60, "the restart")
    until(lambda: (lambda s: s["rollbacks"] > before and not s["rolling_back"])(
        handle.checkpoint_stats()), 60, "the rollback")


def kill_mid_stream(handle, victims) -> None:
    """Kill each of ``victims`` (task ids) in turn once a checkpoint has committed, waiting
    for the rollback after each."""
    for victim in victims:
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        _kill_and_wait(handle, victim)


def test_an_unanchored_emit_from_a_replaying_spout_fails_the_topology_naming_it(
        cluster, name, tmp_path):
    """A spout that keeps no position emits without msg ids in a topology that checkpoints
    with acking on: no rollback could replay those tuples, so its first emit fails the
    task and ``wait`` raises naming the spout (Storm's AnchoringOutputCollector)."""
    from cluster import TopologyFailed
    from tests.components import SeqSpout

    b = TopologyBuilder()
    b.set_spout("seq", SeqSpout(50))
    b.set_bolt("count", StatefulWordCount()).fields_grouping("seq", ("key",))
    handle = cluster.submit_topology(name, {
        "topology.state.checkpoint.interval.ms": 200,
        "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}, b.create_topology())
    try:
        with pytest.raises(TopologyFailed, match="spout 'seq' emitted a tuple .* without a "
                                                 "msg id"):
            handle.wait(60)
        errors = handle.stats().errors
    finally:
        cluster.kill_topology(name)
    assert [e["component"] for e in errors] == ["seq"]


def _counts_after(handle, ckpt_dir, name) -> collections.Counter:
    assert handle.wait(180), "the topology did not complete"
    state = read_state(os.path.join(ckpt_dir, name, handle.prefix))
    return merged_counts(state["count"])


@pytest.mark.parametrize("source", ["positions", "replay-acking"])
def test_stateful_word_count_is_exact_after_its_tasks_are_killed(cluster, name, tmp_path,
                                                                  source):
    """A fields-grouped stateful word count over two workers whose stateful tasks are
    killed mid-stream (with a position-recording spout, the spout too) ends with its state
    equal to a Counter of the input: every word counted exactly once."""
    data = words(8000)
    b = TopologyBuilder()
    if source == "positions":
        b.set_spout("src", IterableSpout(data, fields=("word",)), 2)
    else:
        b.set_spout("src", ReplayingWordSpout(data), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005), 2).fields_grouping("src",
                                                                              ("word",))
    ckpt = str(tmp_path / "ckpt")
    conf = {"topology.workers": 2, "topology.acker.executors": 0 if source == "positions"
            else 1, "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": ckpt,
            "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        tasks = handle.topology.component_tasks
        victims = [tasks["count"][0], tasks["count"][1]]
        if source == "positions":
            victims.insert(1, tasks["src"][0])
        for victim in victims:
            until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
            _kill_and_wait(handle, victim)
        assert _counts_after(handle, ckpt, name) == collections.Counter(data)
        assert handle.checkpoint_stats()["rollbacks"] >= len(victims)
    finally:
        cluster.kill_topology(name)
    assert not os.path.exists(os.path.join(ckpt, name, handle.prefix)), "kill deletes it"


def test_finite_stateful_topology_commits_its_last_tuples(cluster, name, tmp_path):
    data = words(500)
    ckpt = str(tmp_path / "ckpt")
    b = _stateful(IterableSpout(data, fields=("word",)))
    handle = cluster.submit_topology(name, {"topology.acker.executors": 0,
                                            "topology.state.checkpoint.dir": ckpt},
                                     b.create_topology())
    try:
        assert _counts_after(handle, ckpt, name) == collections.Counter(data)
        s = handle.checkpoint_stats()
        assert s["rollbacks"] == 0 and s["completed"] >= 1
    finally:
        cluster.kill_topology(name)


def test_unusable_checkpoint_dir_is_refused_at_submit_with_its_path(cluster, name, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match=str(blocker)):
        cluster.submit_topology(name, {"topology.acker.executors": 0,
                                       "topology.state.checkpoint.dir": str(blocker / "x")},
                                _stateful().create_topology())
    if os.geteuid() != 0:  # (a chown to another user needs root)
        return
    foreign = tmp_path / "foreign"  # another user's directory: refused with the fix
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    with pytest.raises(ValueError, match=rf"{foreign}: not private to this user: {foreign} "
                                         rf"is owned by uid 65534.*mkdir -m 0700"):
        cluster.submit_topology(name, {"topology.acker.executors": 0,
                                       "topology.state.checkpoint.dir": str(foreign)},
                                _stateful().create_topology())


def test_core_without_checkpoints_gives_a_stateful_bolt_a_state_of_its_own():
    """In a topology without checkpoints (here: a bolt run by hand) ``init_state`` still
    comes, with a plain in-memory state."""
    b = _stateful()
    topo = b.create_topology()
    count = topo.component_tasks["count"][0]
    core = make_executor("t", topo, {}, count, {t: 0 for t in range(1, 3)})
    assert isinstance(core, ExecutorCore) and core.checkpoint is None
    core.connect({})
    core._open()
    assert isinstance(core.obj.counts, KeyValueState)



def test_dataframe_spout_rewinds_to_its_block_and_row(cluster, spark, name, tmp_path):
    """A DataFrameSpout records (block, row) and rewinds there: its task killed mid-stream,
    the stateful count still counts every row once."""
    from topology import DataFrameSpout

    data = words(6000)
    df = spark.createDataFrame([(w,) for w in data], ["word"])
    b = TopologyBuilder()
    b.set_spout("src", DataFrameSpout(df, parallelism=4), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005), 2).fields_grouping("src",
                                                                              ("word",))
    ckpt = str(tmp_path / "ckpt")
    handle = cluster.submit_topology(name, {
        "topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
        "topology.state.checkpoint.dir": ckpt, "topology.executor.receive.buffer.size": 256,
        "topology.producer.batch.size": 50}, b.create_topology())
    try:
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        _kill_and_wait(handle, handle.topology.component_tasks["src"][1])
        assert _counts_after(handle, ckpt, name) == collections.Counter(data)
    finally:
        cluster.kill_topology(name)


def test_a_corrupt_checkpoint_is_given_up_for_the_one_before():
    log = MemoryProvider().checkpoint_log()
    c = CoordinatorCore(log, [1, 2], [2], 1.0, 5.0, 0.0, 0.0)
    for cid, t in ((1, 1.0), (2, 2.0)):
        c.tick(t)
        c.prepared(2, cid, 0, t)
        c.prepared(1, cid, 0, t)
    assert c.last_committed == 2
    (rollback,) = c.corrupt(1, 2, 3.0)
    assert rollback.kind == "rollback" and rollback.args[1] == 1 and c.last_committed == 1


def test_chained_stateful_bolt_snapshots_as_the_barrier_passes_through(cluster, name,
                                                                       tmp_path):
    """A stateful bolt chained into its spout's actor (a local-or-shuffle edge of equal
    parallelism) snapshots when the barrier passes through the chain; the host killed,
    the chain restarts as one and the per-task counts still add up to the input."""
    data = words(6000)
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005), 2).local_or_shuffle_grouping("src")
    ckpt = str(tmp_path / "ckpt")
    handle = cluster.submit_topology(name, {
        "topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
        "topology.state.checkpoint.dir": ckpt}, b.create_topology())
    try:
        assert handle.chained_tasks == set(handle.topology.component_tasks["count"])
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        _kill_and_wait(handle, handle.topology.component_tasks["src"][0])
        assert handle.wait(180)
        total: collections.Counter = collections.Counter()
        for counts in handle.state()["count"].values():
            total.update(counts)
        assert total == collections.Counter(data)
    finally:
        cluster.kill_topology(name)


def test_drain_ends_after_a_checkpoint_that_holds_every_tuple_taken(cluster, name, tmp_path):
    """``drain()`` of a stateful topology: the spouts stop taking items, a final checkpoint
    behind their last tuple commits, then the topology completes; the committed counts are
    exactly those of the items the spouts took (their committed positions)."""
    data = words(200_000)
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0002), 2).fields_grouping("src",
                                                                              ("word",))
    handle = cluster.submit_topology(name, {
        "topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
        "topology.executor.receive.buffer.size": 1024,
        "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}, b.create_topology())
    try:
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        assert handle.drain(120)
        state = handle.state()
        tasks = handle.topology.component_tasks["src"]
        taken = collections.Counter()
        for t in tasks:  # (per split s of 128: the items s, s + 128, ... taken)
            positions = {k[1]: p for k, p in state["src"][t].items() if k != "splits"}
            assert 0 < sum(positions.values())
            taken.update(data[s + q * 128] for s, p in positions.items() for q in range(p))
        assert 0 < sum(taken.values()) < len(data)  # drained mid-stream
        assert merged_counts(state["count"]) == taken
    finally:
        cluster.kill_topology(name)


def test_a_restarted_checkpoint_coordinator_rolls_back_and_the_count_stays_exact(
        cluster, name, tmp_path):
    """The coordinator's actor killed (Ray restarts it): it learns from its log where the
    last commit was, rolls every task back to it and runs rounds again."""
    data = words(6000)
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)))
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005)).fields_grouping("src", ("word",))
    ckpt = str(tmp_path / "ckpt")
    handle = cluster.submit_topology(name, {
        "topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
        "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50,
        "topology.state.checkpoint.dir": ckpt}, b.create_topology())
    try:  # (small queues: a barrier does not wait behind the whole input)
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 60, "a checkpoint")
        assert not handle.wait(0.1)  # still running
        ray.kill(handle.checkpoints, no_restart=False)

        def rolled_back() -> bool:
            try:
                s = handle.checkpoint_stats()
            except ray.exceptions.RayActorError:  # (still restarting)
                return False
            return s["rollbacks"] >= 1 and not s["rolling_back"]
        until(rolled_back, 60, "the restarted coordinator's rollback")
        assert _counts_after(handle, ckpt, name) == collections.Counter(data)
    finally:
        cluster.kill_topology(name)


@pytest.mark.parametrize("ackers", [0, 1], ids=["acking-off", "acking-on"])
def test_refused_an_overflow_limit_where_the_topology_checkpoints(ackers):
    """A dropped tuple's barrier passes and its checkpoint commits without it (and, with
    acking, acks it to its spout): refused, naming the key (and the component that sets
    it); a topology without checkpoints keeps its limit."""
    with pytest.raises(ConfigError, match=r"topology.executor.overflow.limit \(100\)"):
        plan(_stateful().create_topology(), {"topology.acker.executors": ackers,
                                             "topology.executor.overflow.limit": 100})
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(words(10), fields=("word",)))
    b.set_bolt("mid", PassBolt()).shuffle_grouping("src").add_configuration(
        "topology.executor.overflow.limit.bytes", 10**6)
    plan(b.create_topology(), {"topology.acker.executors": ackers})  # no checkpoints
    b.set_bolt("count", StatefulWordCount()).fields_grouping("mid", ("key",))
    with pytest.raises(ConfigError, match="component 'mid': topology.executor.overflow"):
        plan(b.create_topology(), {"topology.acker.executors": ackers})


def test_refused_a_spout_that_emits_without_msg_ids_where_acking_checkpoints():
    class NoIds(ReplayingWordSpout):
        emits_msg_ids = False

    b = _stateful(NoIds(words(10)))
    with pytest.raises(TopologyError, match="spout 'src' emits without msg ids"):
        plan(b.create_topology(), {"topology.acker.executors": 1})


def test_a_batch_bolts_gathered_tuples_run_before_the_barrier_goes_on():
    """Tuples a BatchBolt gathered before its inputs' barriers are processed, and their
    output emitted, before it forwards the barrier (they belong to that checkpoint)."""
    from tests.components import SumBatchBolt

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([1], fields=("seq",)))
    b.set_bolt("batch", SumBatchBolt(max_batch_size=100), 1).shuffle_grouping("src")
    b.set_bolt("out", PassBolt(), 1).shuffle_grouping("batch")
    topo = b.create_topology()
    (src,), (batch,), (out,) = (topo.component_tasks[c] for c in ("src", "batch", "out"))
    core = make_executor("t", topo, {"topology.acker.executors": 0}, batch,
                         {src: 0, batch: 0, out: 0})
    enable_checkpoints(core, None)
    core.checkpoint.report = lambda *r: None
    downstream = []
    core.connect({out: lambda items: downstream.extend(items) or len(items)})
    core._open()
    s = [i for i, (c, _, _) in enumerate(stream_table(topo)) if c == "src"][0]
    core.handle((src, s, [7]))
    core.handle((src, s, [8]))
    assert core.obj.sizes == []  # gathered, not run yet
    core.handle((src, BARRIER_STREAM, [1]))
    core.outbox.try_flush_batches()
    assert [list(it[1]) for it in downstream] == [[7], [8], [1]]
    assert downstream[-1][0] == BARRIER_STREAM
