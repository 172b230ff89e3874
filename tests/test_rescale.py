"""A savepoint restored at another parallelism, on Ray (actors/state/_rescale.py): Flink's
``RescalingITCase`` at its small size with the local and Redis providers, a Parquet sink
whose pending transactions move from 2 tasks to 3, and an ``IterableSpout`` 1 → 3 → 2."""

from __future__ import annotations

import collections
import time

import pyarrow.dataset as pads
import pytest

from actors.state.savepoints import read_savepoint
from tests._redis import NO_SERVER, RedisServer, server_binary
from tests.test_savepoints import _undo_commits
from topology import IterableSpout, ParquetSink, StatefulBolt, TopologyBuilder
from topology._keygroups import key_group, operator_index, stable_hash

KEYS, GROUPS = 42, 13  # Flink's RescalingITCase: 42 keys, max parallelism 13 (not 2^k)
CONF = {"topology.max.task.parallelism": GROUPS, "topology.acker.executors": 0,
        "topology.state.checkpoint.interval.ms": 200}


class KeyedSum(StatefulBolt):
    """Sums ``n`` per ``key`` in its keyed state."""

    outputs = ()

    def init_state(self, state) -> None:
        self.sums = state

    def execute(self, tup) -> None:
        key, n = tup.values
        self.sums.put(key, self.sums.get(key, 0) + n)


def _sums(per_key: int, tasks: int):
    """``per_key`` tuples ``(key, 1)`` per key from one spout task, summed by ``tasks``
    tasks. Restored from a run of 1,000 per key, the spout's positions go on past them."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(k, 1) for _ in range(per_key) for k in range(KEYS)],
                                     ("key", "n")), 1)
    b.set_bolt("sum", KeyedSum(), tasks).fields_grouping("src", ("key",))
    return b.create_topology()


def _run(cluster, name, conf, topology, restore_from=None, savepoint=None) -> dict:
    """Run ``topology`` to its end (and save it to ``savepoint``); its ``sum`` state by
    task index."""
    handle = cluster.submit_topology(name, conf, topology, restore_from=restore_from)
    try:
        assert handle.wait(120), handle.stats().summary()
        state = handle.state()["sum"]
        if savepoint is not None:
            handle.savepoint(savepoint)
    finally:
        cluster.kill_topology(name)
    return {topology.component_tasks["sum"].index(t): s for t, s in state.items()}


def _check(state: dict, tasks: int, total: int) -> None:
    """Every key's sum is ``total`` and on task ``operator_index(key_group(stable_hash(key),
    13), tasks, 13)``."""
    assert sorted(state) == list(range(tasks))
    for index, sums in state.items():
        for key, n in sums.items():
            assert operator_index(key_group(stable_hash(key), GROUPS), tasks, GROUPS) == index
            assert n == total, (key, n)
    assert sum(len(s) for s in state.values()) == KEYS


@pytest.fixture
def redis_server(tmp_path):
    if server_binary() is None:
        pytest.skip(NO_SERVER)
    s = RedisServer(str(tmp_path / "redis")).start()
    yield s
    s.stop()


def test_rescaling_2_to_4_local_then_4_to_2_redis_puts_each_key_on_its_task_with_its_sum(
        cluster, name, tmp_path, redis_server):
    """Flink's RescalingITCase at its size: 1,000 tuples per key summed at parallelism 2
    and saved; restored at 4 (local provider) with 500 more per key and saved; restored
    at 2 with the Redis provider and 500 more. Each time every key's sum is on task
    ``operator_index(key_group(stable_hash(key), 13), p, 13)`` and counts every tuple."""
    conf = {**CONF, "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}
    _check(_run(cluster, name, conf, _sums(1000, 2), savepoint=str(tmp_path / "sp2")),
           2, 1000)
    _check(_run(cluster, name, conf, _sums(1500, 4), restore_from=str(tmp_path / "sp2"),
                savepoint=str(tmp_path / "sp4")), 4, 1500)
    redis = {**conf, "topology.state.provider": "redis",
             "topology.state.provider.config": redis_server.config}
    _check(_run(cluster, name, redis, _sums(2000, 2), restore_from=str(tmp_path / "sp4")),
           2, 2000)


class _Pace(StatefulBolt):
    """Passes ``(word, id)`` on after 3 ms, counting words (keyed state)."""

    outputs = ("word", "id")

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def init_state(self, state) -> None:
        self.counts = state

    def execute(self, tup) -> None:
        time.sleep(0.003)
        self.counts.put(tup.values[0], self.counts.get(tup.values[0], 0) + 1)
        self.collector.emit(tup.values)


def test_iterable_spout_1_to_3_to_2_and_parquet_sink_2_to_3_emit_and_write_each_row_once(
        cluster, name, tmp_path):
    """Stopped with a savepoint mid-stream with the spout at 1 task and a keyed bolt and
    the sink chained to it at 2, the files of the sink's pending transactions put back in
    staging (the stop between their pre-commit and commit); restored with all three at 3
    and stopped again; restored with the spout at 2 and run to the end. The dataset holds
    every id once, and the keyed counts between them equal one count of the items."""
    data = [(f"w{i % 11}", i) for i in range(1200)]
    out = str(tmp_path / "out")
    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 600_000,
            "topology.executor.receive.buffer.size": 64,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}

    def topology(spouts, sinks):  # (the sink chained to the keyed bolt: fewer actors,
        b = TopologyBuilder()  # and a forward edge whose ends rescale together)
        b.set_spout("src", IterableSpout(data, ("word", "id")), spouts)
        b.set_bolt("pace", _Pace(), sinks).fields_grouping("src", ("word",))
        b.set_bolt("sink", ParquetSink(out), sinks).local_or_shuffle_grouping("pace")
        return b.create_topology()

    restore = None
    for i, (spouts, sinks) in enumerate([(1, 2), (3, 3)]):
        handle = cluster.submit_topology(name, conf, topology(spouts, sinks),
                                         restore_from=restore)
        try:
            assert sum(t.emitted for t in handle.stats().component("src")) < len(data)
            restore = str(tmp_path / f"sp{i}")
            handle.kill(savepoint=restore)
        finally:
            cluster.topologies.pop(name, None)
        if i == 0:
            assert _undo_commits(read_savepoint(restore)) >= 1
    handle = cluster.submit_topology(name, conf, topology(2, 3), restore_from=restore)
    try:
        assert handle.wait(120), handle.stats().summary()
        state = handle.state()["pace"]
    finally:
        cluster.kill_topology(name)
    ids = pads.dataset(out, format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == list(range(len(data)))
    total = collections.Counter()
    for counts in state.values():
        total.update(counts)
    assert total == collections.Counter(w for w, _ in data)
