"""The submit's plan without Ray (cluster/_plan.py): task ids, workers, ackers and their
links, back edges, validation, and the actor names (actors/_routing.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from actors._routing import TASK, WORKER, ActorName, actor_name, parse_actor_name, submit_prefix
from cluster._plan import WorkerPlan, assign_tasks, plan
from tests.components import PassBolt, SeqSpout
from topology import (
    ACKER_ID,
    DEFAULT_STREAM,
    ComponentSpec,
    ConfigError,
    Count,
    Duration,
    Fields,
    Grouping,
    StormTopology,
    TopologyBuilder,
    TopologyError,
    WindowedBolt,
)

IN_SPOUTS = {"topology.acker.in.spouts": True}
NO_ACKERS = {"topology.acker.executors": 0}


def _spout_bolt(spouts: int = 2, bolts: int = 3) -> StormTopology:
    """bolt "b" (tasks 1..bolts) fed by spout "s" (the next ``spouts`` ids)."""
    b = TopologyBuilder()
    b.set_spout("s", SeqSpout(1), spouts)
    b.set_bolt("b", PassBolt(), bolts).shuffle_grouping("s")
    return b.create_topology()


def test_task_ids_follow_sorted_components_and_ackers_take_the_ids_after():
    topo = _spout_bolt()
    p = plan(topo, {"topology.workers": 2})
    assert dict(p.topology.component_tasks) == {"b": (1, 2, 3), "s": (4, 5), ACKER_ID: (6, 7)}
    assert p.acker_tasks == (6, 7)
    # the user's graph is untouched: no acker component, no acker task
    assert ACKER_ID not in topo.components and topo.num_tasks == 5
    assert sorted(p.task_worker) == list(range(1, 8))


@pytest.mark.parametrize(("workers", "task_worker", "tasks", "cpus"), [
    (1, {t: 0 for t in range(1, 7)}, [(1, 2, 3, 4, 5, 6)], [0.30]),
    (2, {1: 0, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1, 7: 0}, [(1, 3, 5, 7), (2, 4, 6)], [0.25, 0.20]),
    (3, {1: 0, 2: 1, 3: 2, 4: 0, 5: 1, 6: 2, 7: 0, 8: 1}, [(1, 4, 7), (2, 5, 8), (3, 6)],
     [0.20, 0.20, 0.15]),
], ids=["1-worker", "2-workers", "3-workers"])
def test_tasks_round_robin_over_workers_in_id_order(workers, task_worker, tasks, cpus):
    """One acker per worker by default; a bundle reserves 0.05 CPU (the default
    topology.component.cpu.pcore.percent) per executor, plus one share for the transfer
    actor when there are several workers."""
    p = plan(_spout_bolt(), {"topology.workers": workers})
    assert dict(p.task_worker) == task_worker == assign_tasks(p.topology, workers)
    assert [w.index for w in p.workers] == list(range(workers))
    assert [w.tasks for w in p.workers] == tasks
    assert [w.cpu for w in p.workers] == pytest.approx(cpus)
    assert p.with_transfer == (workers > 1)
    assert p.executor_cpu == pytest.approx(0.05)


def test_never_an_empty_worker():
    p = plan(_spout_bolt(spouts=1, bolts=1), {"topology.workers": 3, **NO_ACKERS})
    assert p.workers == (WorkerPlan(0, (1,), 0.1), WorkerPlan(1, (2,), 0.1))
    p = plan(_spout_bolt(spouts=1, bolts=1), {"topology.workers": 5, **NO_ACKERS})
    assert len(p.workers) == 2
    one = plan(_spout_bolt(spouts=1, bolts=1), {"topology.workers": 2, **NO_ACKERS,
                                                "topology.worker.placement": "spread"})
    assert one.strategy == "SPREAD" and p.strategy == "PACK"


def test_acker_count_and_placement():
    topo = _spout_bolt()
    p = plan(topo, {"topology.workers": 3})  # Storm: null means one acker per worker
    assert p.acker_tasks == (6, 7, 8)
    assert sorted(p.task_worker[t] for t in p.acker_tasks) == [0, 1, 2]
    p = plan(topo, {"topology.workers": 3, "topology.acker.executors": 2})
    assert p.acker_tasks == (6, 7) and p.topology.component_tasks[ACKER_ID] == (6, 7)
    p = plan(topo, {"topology.workers": 3, **NO_ACKERS})
    assert p.acker_tasks == () and ACKER_ID not in p.topology.components
    p = plan(topo, {"topology.workers": 3, **IN_SPOUTS})  # the spouts are the ackers
    assert p.acker_tasks == (4, 5) and ACKER_ID not in p.topology.components
    assert p.topology.num_tasks == 5


def test_acker_executors_links_are_the_runtimes_not_the_graphs():
    p = plan(_spout_bolt(), {})
    (acker,) = p.acker_tasks
    links = p.links
    # bolts ack to the acker and complete one-ack trees at their spout; spouts init trees
    # at the acker; the acker reports to the spouts and hears from every other task
    assert links[1].destinations == (acker, 4, 5)
    assert links[4].destinations == (1, 2, 3, acker)
    assert links[4].upstream == {1, 2, 3, acker}
    assert links[acker].destinations == (4, 5)
    assert links[acker].upstream == {1, 2, 3, 4, 5}
    assert links[1].upstream == {4, 5}
    # the topology's graph keeps only the user's subscriptions
    assert p.topology.downstream_tasks("b") == [] and p.topology.upstream_tasks("s") == []
    assert p.topology.downstream_tasks("s") == [1, 2, 3]
    assert p.topology.downstream_tasks(ACKER_ID) == []
    assert p.topology.upstream_tasks(ACKER_ID) == []


def test_acking_in_spouts_and_off_links():
    p = plan(_spout_bolt(), IN_SPOUTS)
    assert p.links[1].destinations == (4, 5)  # bolts ack to the spout of each root
    assert p.links[4].destinations == (1, 2, 3)  # a spout sends no acking message
    assert p.links[4].upstream == {1, 2, 3}
    p = plan(_spout_bolt(), NO_ACKERS)
    assert p.links[1].destinations == () and p.links[4].upstream == frozenset()
    assert p.links[4].destinations == (1, 2, 3)


def test_remote_upstream_follows_the_assignment():
    p = plan(_spout_bolt(), {"topology.workers": 2, **NO_ACKERS})
    # tasks 1, 3, 5 on worker 0; 2, 4 on worker 1
    assert p.links[1].remote_upstream == {4}
    assert p.links[2].remote_upstream == {5}


def _cycle() -> StormTopology:
    b = TopologyBuilder()
    b.set_spout("s", SeqSpout(1))
    b.set_bolt("a", PassBolt(), 2).shuffle_grouping("s").shuffle_grouping("b")
    b.set_bolt("b", PassBolt()).shuffle_grouping("a")
    return b.create_topology()  # a: 1, 2; b: 3; s: 4


def test_back_edges_in_the_plan_and_its_links():
    p = plan(_cycle(), {})
    assert p.back_edges == {("b", "a")}
    assert p.links[3].back_dests == {1, 2} and p.links[3].back_sources == frozenset()
    assert p.links[1].back_sources == {3} and p.links[1].back_dests == frozenset()
    assert p.warnings == ()
    (warning,) = plan(_cycle(), NO_ACKERS).warnings  # nothing would replay a drop
    assert "[('b', 'a')]" in warning and "topology.acker.executors > 0" in warning
    assert plan(_spout_bolt(), NO_ACKERS).warnings == ()


def test_conf_is_validated_complete_and_frozen():
    p = plan(_spout_bolt(), {"topology.workers": 2})
    assert p.conf["topology.max.spout.pending"] is None  # a default filled in
    with pytest.raises(TypeError):
        p.conf["topology.workers"] = 3
    with pytest.raises(ConfigError, match="did you mean 'topology.workers'"):
        plan(_spout_bolt(), {"topology.workerz": 2})


def test_component_config_is_checked_before_any_actor_and_names_the_component():
    b = TopologyBuilder()
    b.set_spout("s", SeqSpout(1))
    b.set_bolt("b", PassBolt()).shuffle_grouping("s").add_configuration(
        "topology.max.spout.pendng", 5)
    with pytest.raises(ConfigError, match="component 'b': unknown config key "
                                          "'topology.max.spout.pendng'; did you mean"):
        plan(b.create_topology(), {})


def test_not_a_topology():
    with pytest.raises(TopologyError, match="expects a StormTopology .* got dict"):
        plan({"s": None}, {})


def _spec(cid, obj, inputs=(), streams=None):
    return ComponentSpec(cid, obj, 1, tuple(inputs),
                         MappingProxyType(streams or {DEFAULT_STREAM: Fields("seq", "key")}),
                         frozenset(), MappingProxyType({}))


@pytest.mark.parametrize(("grouping", "match"), [
    (Grouping("s", "other", "shuffle"),
     r"bolt 'b' subscribes to stream 'other' of 's', which 's' does not declare"),
    (Grouping("s", DEFAULT_STREAM, "fields", Fields("wrd")),
     r"bolt 'b': fields grouping on field 'wrd', which stream 'default' of 's' does not "
     r"declare; its fields are \['seq', 'key'\]"),
    (Grouping("t", DEFAULT_STREAM, "shuffle"),
     r"bolt 'b' subscribes to unknown component 't'; known: \['b', 's'\]"),
    (Grouping("s", DEFAULT_STREAM, "direct"),
     r"bolt 'b': direct grouping on stream 'default' of 's', but a direct grouping needs "
     r"a stream declared direct"),
], ids=["undeclared-stream", "undeclared-field", "unknown-component", "not-direct"])
def test_a_topology_built_without_the_builder_is_validated(grouping, match):
    """Storm's Nimbus validates the structure again at submit; so does the plan."""
    topo = StormTopology({"s": _spec("s", SeqSpout(1)),
                          "b": _spec("b", PassBolt(), [grouping])})
    with pytest.raises(TopologyError, match=match):
        plan(topo, {})


def test_actor_names_round_trip_and_nothing_else_parses():
    prefix = submit_prefix("word-count-2", "0123abcd")
    assert prefix == "storm-word-count-2-0123abcd"
    assert actor_name(prefix, TASK, 12) == "storm-word-count-2-0123abcd-task-12"
    for kind, index in ((TASK, 12), (WORKER, 0)):
        assert parse_actor_name(actor_name(prefix, kind, index)) == ActorName(
            prefix, "word-count-2", kind, index)
    assert actor_name(None, WORKER, 3) == "worker-3"  # the keys of handle.restarts()
    for other in ("task-3", "storm-x-0123abcd-pg", "storm-x-0123ABCD-task-1",
                  "storm-x-012345-task-1", "storm-x-0123abcd-chain-1", "my-actor"):
        assert parse_actor_name(other) is None, other
    with pytest.raises(ValueError, match="actor kind must be 'task' or 'worker', got 'pg'"):
        actor_name(prefix, "pg", 0)


def test_the_plan_module_imports_without_ray():
    """The plan, the typed stats and what they import need no Ray (cluster/__init__.py
    loads its Ray modules lazily)."""
    cluster_dir = str(Path(__file__).resolve().parents[1] / "cluster")
    code = ("import sys\n"
            "sys.modules['ray'] = None\n"
            "import cluster._plan, cluster._stats\n"
            "from cluster import plan, TaskStats\n"
            "print(sorted(m for m in sys.modules if m.startswith('ray.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(cluster_dir).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


class _Window(WindowedBolt):
    def execute(self, window):
        pass


@pytest.mark.parametrize("bolt,conf,match", [
    (_Window().with_window(Duration.seconds(20), Duration.seconds(10)),
     {"topology.message.timeout.secs": 30},
     r"'w'.*30000 ms is not below topology.message.timeout.secs = 30"),
    (_Window().with_tumbling_window(Count(100)), {"topology.max.spout.pending": 150},
     r"'w'.*count .* 200 exceeds topology.max.spout.pending = 150"),
])
def test_a_window_the_timeout_or_max_spout_pending_cannot_hold_fails_at_submit(
        bolt, conf, match):
    """Storm's submit checks of a windowed bolt, before any actor starts."""
    b = TopologyBuilder()
    b.set_spout("s", SeqSpout(1))
    b.set_bolt("w", bolt).shuffle_grouping("s")
    topo = b.create_topology()
    with pytest.raises(TopologyError, match=match):
        plan(topo, conf)
    assert plan(topo, {**conf, "topology.acker.executors": 0}).topology  # nothing can time out
    relaxed = {"topology.message.timeout.secs": 31} if "timeout" in match else {
        "topology.max.spout.pending": 200}
    assert plan(topo, {**conf, **relaxed}).topology
