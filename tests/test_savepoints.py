"""Savepoints (actors/state/savepoints.py, handle.savepoint, kill(savepoint=...),
restore_from): the format and its refusals, then a stateful topology with a Parquet sink
stopped with a savepoint mid-stream and resubmitted from it (refused under another
key-group count, exact at its own)."""

from __future__ import annotations

import collections
import json
import os

import pyarrow.dataset as pads
import pytest

from actors.state.savepoints import (
    SavepointError,
    check_restore,
    check_target,
    describe,
    read_savepoint,
    write_savepoint,
)
from tests.components import StatefulWordCount, words
from topology import IterableSpout, ParquetSink, TopologyBuilder


def _topology(sink, data, count_tasks=2):
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, ("word", "id")), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.004), count_tasks).fields_grouping(
        "src", ("word",))
    b.set_bolt("sink", sink, 2).shuffle_grouping("src")
    return b.create_topology()


def test_a_savepoint_round_trips_and_bad_ones_are_refused_naming_path_and_reason(tmp_path):
    topo = _topology(ParquetSink(str(tmp_path / "out")), [("a", 1)])
    tasks = {c: list(t) for c, t in topo.component_tasks.items()}
    state = {"count": {tasks["count"][0]: {b"k": b"v"}, tasks["count"][1]: {}}}
    path = write_savepoint(str(tmp_path / "sp"), "wc", 7, state, tasks, describe(topo, {}))
    sp = read_savepoint(path)
    assert (sp.checkpoint_id, sp.components) == (7, {"count": 2})
    assert sp.entries["count"] == {0: {b"k": b"v"}, 1: {}}
    check_restore(sp, topo)
    with pytest.raises(SavepointError, match="not an empty directory"):
        check_target(path)
    with pytest.raises(SavepointError, match="had 2 tasks.*gives it 3"):
        check_restore(sp, _topology(ParquetSink(str(tmp_path / "o")), [("a", 1)], 3))
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([("a", 1)], ("word", "id")))
    b.set_bolt("other", StatefulWordCount()).shuffle_grouping("src")
    with pytest.raises(SavepointError, match="'count' has state there.*allow_non_restored"):
        check_restore(sp, b.create_topology())
    check_restore(sp, b.create_topology(), allow_non_restored_state=True)
    meta = os.path.join(path, "metadata.json")
    with open(meta) as f:
        m = json.load(f)
    m["format_version"] = 99
    with open(meta, "w") as f:
        json.dump(m, f)
    with pytest.raises(SavepointError, match="format version 99"):
        read_savepoint(path)
    os.remove(os.path.join(path, "_COMMITTED"))
    with pytest.raises(SavepointError, match="no _COMMITTED marker"):
        read_savepoint(path)
    with pytest.raises(SavepointError, match="no such directory"):
        read_savepoint(str(tmp_path / "missing"))


def _undo_commits(savepoint) -> int:
    """Move the files of the sink transactions the savepoint holds back to staging, as if
    the stop had come between their pre-commit and their commit; returns how many."""
    from actors._codec import decode_key, decode_value
    from actors.state._internals import INTERNAL_PREFIX

    moved = 0
    for entries in savepoint.entries["sink"].values():
        for k, v in entries.items():
            if k.startswith(INTERNAL_PREFIX) and decode_key(k[1:])[0] == "txn":
                for staged, final in decode_value(v).get("files", ()):
                    if os.path.exists(final):
                        os.replace(final, staged)
                        moved += 1
    return moved


def test_stop_with_savepoint_then_restore_counts_and_writes_everything_once(
        cluster, name, tmp_path):
    """A stateful word count and a Parquet sink are stopped with a savepoint mid-stream;
    the files of the sink's transactions in the savepoint are put back in staging (the
    stop between pre-commit and commit). The same topology resubmitted from it goes on from
    the spouts' positions: the final counts equal a plain count of the whole input, and the
    dataset holds every id once."""
    data = [(w, i) for i, w in enumerate(words(4000))]
    out, sp = str(tmp_path / "out"), str(tmp_path / "sp")
    # checkpoints only on request (the interval outlasts the test), and queues small
    # enough that the counts' 4 ms per word pace the spouts (about 8 s for the stream):
    # rows reach the sink between the running savepoint's barrier and the stop, so the
    # stop's checkpoint holds a sink transaction with files
    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 600_000,
            "topology.executor.receive.buffer.size": 64,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}
    handle = cluster.submit_topology(name, conf, _topology(ParquetSink(out), data))
    try:
        handle.savepoint(str(tmp_path / "running"))  # a savepoint that does not stop
        assert sum(t.emitted for t in handle.stats().component("src")) < len(data)
        handle.kill(savepoint=sp)
    finally:
        cluster.topologies.pop(name, None)
    saved = read_savepoint(sp)
    assert saved.checkpoint_id >= 2 and any(saved.entries["count"].values())
    assert _undo_commits(saved) >= 1

    # under another key-group count the keys' groups change: refused at submit (issue 49)
    with pytest.raises(SavepointError, match=r"component 'count': savepoint has 128 key "
                       r"groups, topology.max.task.parallelism is 16; restore with 128"):
        cluster.submit_topology(name, {**conf, "topology.max.task.parallelism": 16},
                                _topology(ParquetSink(out), data), restore_from=sp)
    handle = cluster.submit_topology(name, conf, _topology(ParquetSink(out), data),
                                     restore_from=sp)
    try:
        assert handle.wait(120), handle.stats().summary()
        state = handle.state()["count"]
        first = handle.checkpoint_stats()["last_committed"]
    finally:
        cluster.kill_topology(name)
    total = collections.Counter()
    for task_state in state.values():
        total.update(task_state)
    assert total == collections.Counter(w for w, _ in data)
    ids = pads.dataset(out, format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(len(data)))
    assert first > saved.checkpoint_id  # checkpoint ids go on from the savepoint's
