"""The topology API without Ray: builder validation, fields, tuples, config."""

from __future__ import annotations

import pytest

from topology import (
    Bolt,
    CollectorBolt,
    ConfigError,
    Fields,
    IterableSpout,
    Spout,
    TopologyBuilder,
    TopologyError,
    Tuple,
    effective_batch_size,
    make_config,
)


class WordSpout(Spout):
    outputs = ("word",)

    def next_tuple(self):
        raise StopIteration


class TwoStreams(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))
        declarer.declare(Fields("error"), stream_id="errors")
        declarer.declare(Fields("x"), stream_id="direct_out", direct=True)

    def execute(self, tup):
        pass


class Sink(Bolt):
    def execute(self, tup):
        pass


def _base():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout(), 2)
    return b


def test_valid_topology_assigns_task_ids_in_sorted_component_order():
    b = _base()
    b.set_bolt("split", TwoStreams(), 3).shuffle_grouping("words")
    b.set_bolt("count", Sink(), 2).fields_grouping("split", ["word"]) \
        .shuffle_grouping("split", stream="errors")
    b.set_bolt("d", Sink()).direct_grouping("split", "direct_out")
    topo = b.create_topology()
    assert dict(topo.component_tasks) == {"count": (1, 2), "d": (3,), "split": (4, 5, 6),
                                          "words": (7, 8)}
    assert topo.upstream_tasks("count") == [4, 5, 6]
    assert topo.downstream_tasks("split") == [1, 2, 3]
    assert topo.components["split"].streams["errors"] == Fields("error")
    assert topo.num_tasks == 8


@pytest.mark.parametrize("wire, match", [
    (lambda b: b.set_bolt("c", Sink()).shuffle_grouping("wrds"),
     r"bolt 'c' subscribes to unknown component 'wrds'; known: \['c', 'words'\]"),
    (lambda b: b.set_bolt("c", Sink()).shuffle_grouping("words", stream="nope"),
     r"bolt 'c' subscribes to stream 'nope' of 'words'"),
    (lambda b: b.set_bolt("c", Sink()).fields_grouping("words", ["wrd"]),
     r"bolt 'c': fields grouping on field 'wrd', which stream 'default' of 'words'"),
    (lambda b: b.set_bolt("c", Sink(), 0).shuffle_grouping("words"),
     r"component 'c': parallelism_hint must be an int >= 1, got 0"),
    (lambda b: b.set_bolt("c", Sink()),
     r"bolt 'c' has no inputs"),
    (lambda b: b.set_bolt("c", Sink()).direct_grouping("words"),
     r"direct grouping on stream 'default' of 'words'"),
    (lambda b: b.set_bolt("c", Sink()).shuffle_grouping("words").all_grouping("words"),
     r"subscribes twice to stream 'default' of 'words'"),
])
def test_invalid_topologies_name_component_stream_and_field(wire, match):
    b = _base()
    wire(b)
    with pytest.raises(TopologyError, match=match):
        b.create_topology()


def test_duplicate_ids_rejected():
    b = _base()
    with pytest.raises(TopologyError, match="duplicate component id 'words'"):
        b.set_bolt("words", Sink())


def test_topology_needs_a_spout_and_component_objects():
    with pytest.raises(TopologyError, match="at least one spout"):
        TopologyBuilder().create_topology()
    with pytest.raises(TopologyError, match="must be a Bolt instance"):
        TopologyBuilder().set_bolt("x", object())


def test_stream_declared_twice():
    class Twice(Bolt):
        def declare_output_fields(self, d):
            d.declare(["a"])
            d.declare(["b"])

    b = _base()
    b.set_bolt("t", Twice()).shuffle_grouping("words")
    with pytest.raises(TopologyError, match="component 't' declares stream 'default' twice"):
        b.create_topology()


def test_topology_is_immutable():
    b = _base()
    b.set_bolt("c", CollectorBolt()).shuffle_grouping("words")
    topo = b.create_topology()
    with pytest.raises(TypeError):
        topo.components["x"] = None
    b.set_bolt("later", Sink()).shuffle_grouping("words")
    assert "later" not in topo.components


def test_tuple_access_by_name_and_position():
    f = Fields("word", "count")
    t = Tuple(["a", 3], f, "split", 4, "default")
    assert (t["word"], t["count"], t[0], t.get("missing", 9)) == ("a", 3, "a", 9)
    assert t.as_dict() == {"word": "a", "count": 3}
    assert t.select(Fields("count")) == [3]
    with pytest.raises(KeyError, match=r"no field 'wrd'; fields are \['word', 'count'\]"):
        t["wrd"]
    assert not hasattr(t, "__dict__")


def test_fields_reject_duplicates():
    with pytest.raises(TopologyError, match="duplicate field"):
        Fields("a", "a")
    assert Fields(["a", "b"]) == Fields("a", "b")


def test_config_defaults_and_validation():
    conf = make_config()
    assert conf["topology.executor.receive.buffer.size"] == 32768
    assert conf["topology.spout.recvq.skips"] == 3
    assert conf["topology.backpressure.check.millis"] == 50
    with pytest.raises(ConfigError, match="did you mean 'topology.max.spout.pending'"):
        make_config({"topology.max.spout.pendng": 10})
    with pytest.raises(ConfigError, match="'topology.workers' expects int, got str"):
        make_config({"topology.workers": "2"})
    with pytest.raises(ConfigError, match="expects int, got bool"):
        make_config({"topology.workers": True})
    with pytest.raises(ConfigError, match="must be >= 1"):
        make_config({"topology.workers": 0})
    with pytest.raises(ConfigError, match="must be one of"):
        make_config({"topology.bolt.wait.strategy": "spin"})
    assert make_config({"my.app.setting": [1]})["my.app.setting"] == [1]
    assert make_config({"topology.max.spout.pending": None})["topology.max.spout.pending"] is None


def test_effective_batch_size_clamped():
    assert effective_batch_size(make_config({"topology.executor.receive.buffer.size": 100})) == 50


def test_iterable_spout_arguments():
    with pytest.raises(TopologyError, match="exactly one of"):
        IterableSpout()
    assert IterableSpout([1, 2], fields=("a",)).outputs == ("a",)


def test_topology_package_imports_no_runtime_and_its_spark_spouts_lazily():
    """Importing the user API (and backpressure) loads neither Ray, pyarrow, pyspark nor
    the runtime; the Spark spouts and the windowed executor come from their rooms on first
    use, as the same objects."""
    import subprocess
    import sys

    code = ("import sys, topology, backpressure; "
            "print(sorted(m for m in ('ray', 'pyarrow', 'pyspark', 'actors', 'connectors') "
            "if m in sys.modules)); "
            "from topology import DataFrameSpout, StreamingDataFrameSpout, WindowedBoltExecutor; "
            "import connectors.spark, actors.windowing; "
            "print(DataFrameSpout is connectors.spark.DataFrameSpout, "
            "StreamingDataFrameSpout is connectors.spark.StreamingDataFrameSpout, "
            "WindowedBoltExecutor is actors.windowing.WindowedBoltExecutor)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == "[]", out
    assert out[1] == "True True True", out


def test_back_edges_close_every_cycle_and_ackers_keep_user_task_ids():
    from tests.components import PassBolt, SeqSpout

    b = TopologyBuilder()
    b.set_spout("s", SeqSpout(1))
    b.set_bolt("a", PassBolt(), 2).shuffle_grouping("s").shuffle_grouping("b")
    b.set_bolt("b", PassBolt()).shuffle_grouping("a")
    b.set_bolt("c", PassBolt()).shuffle_grouping("c").shuffle_grouping("b")
    b.set_bolt("d", PassBolt()).shuffle_grouping("a")  # a DAG branch: no back edge
    topo = b.create_topology()
    assert topo.back_edges == {("b", "a"), ("c", "c")}
    with_ackers = topo.with_ackers(2)
    assert {c: t for c, t in with_ackers.component_tasks.items() if c != "__acker"} == dict(
        topo.component_tasks)
    assert with_ackers.acker_tasks == (topo.num_tasks + 1, topo.num_tasks + 2)
    # the acking links are the runtime's (actors/_routing.acking_links, tests/test_plan.py):
    # the topology graph keeps the user's edges only
    for c in "sabcd":
        assert with_ackers.downstream_tasks(c) == topo.downstream_tasks(c)
        assert with_ackers.upstream_tasks(c) == topo.upstream_tasks(c)
    # topology.acker.in.spouts: the spout tasks are the ackers; no task id changes
    rebuild, args = topo.with_ackers(2, in_spouts=True).__reduce__()  # as Ray ships it
    in_spouts = rebuild(*args)
    assert in_spouts.ackers_in_spouts and "__acker" not in in_spouts.components
    assert dict(in_spouts.component_tasks) == dict(topo.component_tasks)
    assert in_spouts.acker_tasks == tuple(topo.component_tasks["s"])
    assert in_spouts.downstream_tasks("b") == topo.downstream_tasks("b")
    assert in_spouts.upstream_tasks("s") == topo.upstream_tasks("s")
    assert in_spouts.back_edges == topo.back_edges
    assert topo.with_ackers(0, in_spouts=True).acker_tasks == ()  # acking off


def test_docs_config_tables_are_the_code_tables():
    """docs/config.md's two generated tables (every key; the Storm keys accepted as
    no-ops) are the text topology/_config.py generates, and the no-ops stay accepted."""
    from pathlib import Path

    from topology._config import CONFIG_KEYS, make_config, noop_table, reference_table

    path = Path(__file__).resolve().parents[1] / "docs" / "config.md"
    doc = path.read_text()
    for marker, expected, function in (("config-table", reference_table(), "reference_table"),
                                       ("noop-table", noop_table(), "noop_table")):
        start_tag, end_tag = f"<!-- {marker} -->\n", f"<!-- /{marker} -->"
        assert start_tag in doc and end_tag in doc, f"{path}: missing {start_tag!r} / {end_tag!r}"
        start = doc.index(start_tag) + len(start_tag)
        assert doc[start:doc.index(end_tag)] == expected, (
            f"{path}: the table between {start_tag.strip()} and {end_tag} differs from "
            f"topology._config.{function}(); paste that function's output between the "
            f"markers")
    # a Storm config that sets the no-ops, even inconsistently as Storm would refuse, passes
    noops = {name for name, key in CONFIG_KEYS.items() if key.noop}
    assert {"topology.debug", "topology.transfer.buffer.size",
            "topology.transfer.batch.size"} <= noops
    conf = make_config({"topology.debug": True, "topology.transfer.buffer.size": 1,
                        "topology.transfer.batch.size": 500})
    assert conf["topology.debug"] is True
