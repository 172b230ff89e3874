"""Operator chaining (Flink's chaining, ``topology.operator.chaining``): the plan's rule,
and chained runs against unchained ones of the same topology: equal results, each chained
component with its own stats and errors, acking and replays, ``finish()`` order, a restart
of the chain's actor, and backpressure through the chain."""

from __future__ import annotations

from collections import Counter

import pytest

from cluster._plan import chainable, plan
from cluster._registry import attach
from tests._util import until
from tests.components import CountBolt, FailOnceBolt, PassBolt, SlowCollector
from tests.test_chaos import _pid, _sigkill
from topology import (
    Bolt,
    CollectorBolt,
    Count,
    IterableSpout,
    TopologyBuilder,
    WindowedBolt,
)

CHAINING = pytest.mark.parametrize("chaining", [True, False], ids=["chained", "unchained"])


class Double(Bolt):
    """(seq, key) → (2·seq, key); from ``finish()`` one (-1, "tally:<tuples seen>")."""

    outputs = ("seq", "key")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.task_id
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        self.collector.emit((2 * tup["seq"], tup["key"]), anchors=[tup])

    def finish(self):
        self.collector.emit((-1, f"tally:{self.seen}"))


class KeepThirds(Bolt):
    """Keeps the tuples whose seq is a multiple of 3 (and the tallies, seq -1)."""

    outputs = ("seq", "key")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        s = tup["seq"]
        if s < 0 or s % 3 == 0:
            self.collector.emit(tup.values, anchors=[tup])


def _rows(n: int) -> list[tuple[int, str]]:
    return [(i, f"k{i % 10}") for i in range(n)]


def _pipeline(rows, middle: Bolt | None = None, par: int = 2, sink: Bolt | None = None):
    """rows → double → keep (both local_or_shuffle: chainable) → count (fields) → out."""
    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout(rows, ("seq", "key"), msg_ids=True), par)
    b.set_bolt("double", Double(), par).local_or_shuffle_grouping("rows")
    b.set_bolt("keep", middle or KeepThirds(), par).local_or_shuffle_grouping("double")
    b.set_bolt("count", sink or CountBolt(), 2).fields_grouping("keep", ["key"])
    if sink is None:
        b.set_bolt("out", CollectorBolt()).global_grouping("count")
    return b


# -- the plan ------------------------------------------------------------------------------


def test_the_plan_chains_forward_edges_only():
    """Chained: a local_or_shuffle input, the only one, from a component of equal
    parallelism. Not: a shuffle, unequal parallelism, two inputs, a windowed bolt, a
    component that disables it, a cycle, the whole topology off."""

    class Win(WindowedBolt):
        outputs = ("n",)

        def execute(self, window):
            pass

    b = TopologyBuilder()
    b.set_spout("rows", IterableSpout([(1, "a")], ("seq", "key")), 2)
    b.set_bolt("a", PassBolt(), 2).local_or_shuffle_grouping("rows")
    b.set_bolt("b", PassBolt(), 2).local_or_shuffle_grouping("a")
    b.set_bolt("shuffled", PassBolt(), 2).shuffle_grouping("rows")
    b.set_bolt("wider", PassBolt(), 3).local_or_shuffle_grouping("rows")
    b.set_bolt("two", PassBolt(), 2).local_or_shuffle_grouping("a").shuffle_grouping("rows")
    b.set_bolt("win", Win().with_tumbling_window(Count(2)), 2).local_or_shuffle_grouping("a")
    b.set_bolt("off", PassBolt(), 2).local_or_shuffle_grouping("b") \
        .add_configuration("topology.operator.chaining", False)
    b.set_bolt("after_off", PassBolt(), 2).local_or_shuffle_grouping("off")
    # a cycle: cyc_b's one input is local_or_shuffle, but it feeds cyc_a back
    b.set_bolt("cyc_a", PassBolt(), 2).shuffle_grouping("rows").shuffle_grouping("cyc_b")
    b.set_bolt("cyc_b", PassBolt(), 2).local_or_shuffle_grouping("cyc_a")
    topo = b.create_topology()
    p = plan(topo, {"topology.workers": 2, "topology.acker.executors": 0})
    assert chainable(topo, dict(p.conf)) == ["a", "b"]
    tasks = p.topology.component_tasks
    # task k of a and b run in the actor of task k of rows, in its worker
    for k, host in enumerate(tasks["rows"]):
        for c in ("a", "b"):
            assert p.chain_hosts[tasks[c][k]] == host
            assert p.task_worker[tasks[c][k]] == p.task_worker[host]
        assert p.topology.chain_of(host) == [tasks["a"][k], tasks["b"][k]]
    # each task of a sends its stream only to its peer in b (and b to "off"'s every task)
    a0, b0 = tasks["a"][0], tasks["b"][0]
    assert set(p.links[a0].destinations) & set(tasks["b"]) == {b0}
    assert p.links[b0].upstream == frozenset({a0})
    # a worker reserves CPU for its actors only (chained tasks run in their host's)
    own = sum(1 for t in p.task_worker if t not in p.chain_hosts)
    cpu = p.conf["topology.component.cpu.pcore.percent"] / 100
    assert sum(w.cpu for w in p.workers) == pytest.approx(cpu * (own + 2))
    off = plan(topo, {"topology.operator.chaining": False})
    assert off.chain_hosts == {} and chainable(off.topology, dict(off.conf)) == []


# -- chained against unchained on Ray ------------------------------------------------------


# chained on both layouts; unchained once, as the control (the unchained path between
# workers is every other 2-worker test's)
@pytest.mark.parametrize(("workers", "chaining"),
                         [("1worker", True), ("2workers", True), ("1worker", False)],
                         ids=["1worker-chained", "2workers-chained", "1worker-unchained"],
                         indirect=["workers"])
def test_a_chained_pipeline_equals_the_unchained_one(cluster, name, workers, chaining):
    """Same counts, every tree acked, each chained component with its own tasks and
    counts in stats, and each chained bolt's ``finish()`` (its tally) before its end of
    stream, so the tallies reach the count."""
    rows = _rows(3000)
    handle = cluster.submit_topology(
        name, workers.conf({"topology.operator.chaining": chaining,
                            "topology.message.timeout.secs": 60}),
        _pipeline(rows).create_topology())
    try:
        assert handle.wait(180), handle.stats().summary()
        stats, got = handle.stats(), handle.collected("out")
        tasks = handle.topology.component_tasks
        hosted = [handle.actors[tasks[c][k]] is handle.actors[tasks["rows"][k]]
                  for c in ("double", "keep") for k in range(2)]
    finally:
        cluster.kill_topology(name)
    assert all(hosted) if chaining else not any(hosted)
    counts = Counter({k: n for *_, (k, n) in got})
    want = Counter(k for s, k in rows if (2 * s) % 3 == 0)
    assert {k: n for k, n in counts.items() if not k.startswith("tally")} == want
    tallies = [int(k.split(":")[1]) for k in counts if k.startswith("tally")]
    assert len(tallies) == 1 or sum(tallies) == len(rows)  # two tasks with equal tallies
    assert sum(int(k.split(":")[1]) * n for k, n in counts.items()
               if k.startswith("tally")) == len(rows)
    assert stats.total("rows", "acked") == len(rows) and stats.total("rows", "failed") == 0
    for comp in ("double", "keep"):
        assert len(stats.component(comp)) == 2
        assert stats.total(comp, "executed") == (len(rows) if comp == "double"
                                                 else len(rows) + 2)
    assert stats.complete


@CHAINING
def test_an_exception_in_a_chained_bolt_is_that_bolts(cluster, name, chaining):
    """A chained bolt that raises: its tuple fails and replays, the error and the count are
    its own (never the spout's or the bolt before it), and every row arrives."""
    rows = _rows(600)
    b = _pipeline(rows, middle=FailOnceBolt(50), sink=CollectorBolt())
    handle = cluster.submit_topology(
        name, {"topology.operator.chaining": chaining, "topology.message.timeout.secs": 60},
        b.create_topology())
    try:
        assert handle.wait(180), handle.stats().summary()
        stats, got = handle.stats(), handle.collected("count")
    finally:
        cluster.kill_topology(name)
    doubled = [2 * s for s, _ in rows]
    fails = sum(1 for s in doubled if s % 50 == 0)
    assert sorted(v[0] for *_, v in got if v[0] >= 0) == sorted(doubled)
    keep_errors = [e for t in stats.component("keep") for e in t.errors]
    assert keep_errors and "first attempt at seq" in str(keep_errors)
    assert not any(t.errors for c in ("rows", "double") for t in stats.component(c))
    # each keep task raises once per seq it sees: chained, a replay comes back through the
    # same chain (the same keep task); unchained, it may meet the other keep task first
    failed = stats.total("rows", "failed")
    assert failed == stats.total("keep", "failed")
    assert failed == fails if chaining else fails <= failed <= 2 * fails
    assert stats.total("rows", "acked") == len(rows)


def test_a_killed_chain_restarts_and_its_trees_replay(cluster, name):
    """SIGKILL the actor that runs a chain (spout task, its double and keep tasks): Ray
    restarts it, the chain's tasks rejoin together, and with acking every row reaches the
    sink (at least once)."""
    rows = _rows(4000)
    b = _pipeline(rows, par=1, sink=SlowCollector(0.0005))
    handle = cluster.submit_topology(
        name, {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200,
               "topology.executor.max.restarts": 3},
        b.create_topology())
    try:
        host = handle.actors[handle.topology.component_tasks["rows"][0]]
        until(lambda: handle.stats().total("count", "executed") > 300, 60, "a few rows in")
        at_kill = handle.stats().total("count", "executed")
        _sigkill(host)
        until(lambda: _pid(host) is not None, 60, "the chain's actor restarted")
        # the restarted chain's frames get through at once (each chained task sends in a
        # new epoch, as a restarted task does): within seconds the sink has executed more
        # than the kill could have left in flight (max.spout.pending trees), or the whole
        # replay is done (it often is by the time Ray answers the restarted actor's pid),
        # where a chained task that reused its old epoch sent frames the sink took for
        # duplicates until its sends reset, 50 s later
        def moved() -> bool:
            st = handle.stats()
            return st.complete or st.total("count", "executed") > at_kill + 200

        until(moved, 20, "the restarted chain's tuples at the sink well before the old "
              "epoch's 50 s")
        # one entry per actor, on this handle and on another driver's (attach)
        restarts = handle.restarts()
        assert restarts.get(f"task-{handle.topology.component_tasks['rows'][0]}", 0) >= 1
        assert attach(name).restarts().keys() == restarts.keys()
        assert handle.chained_tasks == set(handle.topology.chain_hosts()) != set()
        assert not {f"task-{t}" for t in handle.chained_tasks} & restarts.keys()
        assert handle.wait(240), handle.stats().summary()
        got, stats = handle.collected("count"), handle.stats()
    finally:
        cluster.kill_topology(name)
    assert {v[0] for *_, v in got if v[0] >= 0} == {2 * s for s, _ in rows if s % 3 == 0}
    assert stats.total("rows", "acked") == len(rows)
    assert len(stats.component("keep")) == 1 and stats.component("keep")[0].executed > 0


@CHAINING
@pytest.mark.parametrize("acking", [False, True], ids=["no-acking", "acking"])
def test_backpressure_holds_the_chain_head(cluster, name, chaining, acking):
    """A slow sink behind the chain: the chain's tuples wait in its tasks' pending emits,
    so the spout stops; what is in flight stays within the queues' bounds (without
    ackers, no max.spout.pending hides it). With acking, every tree completes before its
    timeout: a chained task's pending emits are retried by its host's clock work, not only
    when its source feeds it again."""
    rows = _rows(3000)
    b = _pipeline(rows, par=1, sink=SlowCollector(0.002))
    conf = {"topology.operator.chaining": chaining,
            "topology.executor.receive.buffer.size": 64, "topology.producer.batch.size": 8}
    conf.update({"topology.acker.executors": 1, "topology.max.spout.pending": 1000,
                 "topology.message.timeout.secs": 60} if acking
                else {"topology.acker.executors": 0})
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        peak = 0
        for _ in range(20):
            st = handle.stats()
            # tuples between the stages: emitted by one, not yet executed by the next
            peak = max(peak, sum(st.total(a, "emitted") - st.total(b, "executed")
                                 for a, b in (("rows", "double"), ("double", "keep"),
                                              ("keep", "count"))))
            if st.complete:
                break
        assert handle.wait(50), handle.stats().summary()  # (before any timeout)
        st = handle.stats()
    finally:
        cluster.kill_topology(name)
    # queues of 64 and batches of 8 between actors, nothing held on a chained hop; without
    # backpressure through the chain the spout would have emitted all 3000 at once
    assert peak <= 600, peak
    if acking:
        assert st.total("rows", "failed") == 0 and st.total("rows", "acked") == len(rows)
