"""Joins on Ray: ``JoinBolt`` and ``IntervalJoinBolt`` fed by two spouts, with acking, and
under checkpoints with a join task killed mid-stream; every output row against a plain
Python reference."""

from __future__ import annotations

import time

import pytest

from tests._util import until
from topology import (
    CollectorBolt,
    Duration,
    Fields,
    IntervalJoinBolt,
    IterableSpout,
    JoinBolt,
    StatefulBolt,
    TopologyBuilder,
)

N, KEYS, WINDOW_MS = 1500, 25, 100


def _rows():
    """``s1``: (id, a, ts) at even ms; ``s2``: (id, b, ts) at odd ms; ids cycle over
    KEYS; each spout's time rises (the lag, 50 ms, covers the skew between them)."""
    s1 = [(i % KEYS, i, 2 * i) for i in range(N)]
    s2 = [(i % KEYS, i, 2 * i + 1) for i in range(N)]
    return s1, s2


class Tally(StatefulBolt):
    """Counts each output row in its checkpointed state: its state is the join's output
    exactly once, rolled back with the join on a failure."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        key = f"{tup.values[0]},{tup.values[1]}"
        self.state.put(key, self.state.get(key, 0) + 1)


class SlowJoin(JoinBolt):
    """Sleeps per window so that a kill finds windows open."""

    def execute(self, window):
        time.sleep(0.01)
        super().execute(window)


class SlowIntervalJoin(IntervalJoinBolt):
    """Sleeps per pair so that a kill finds the buffers full."""

    def process(self, left, right):
        time.sleep(0.0005)
        super().process(left, right)


def _join_reference(s1, s2) -> set:
    return {(a, b) for k1, a, t1 in s1 for k2, b, t2 in s2
            if k1 == k2 and t1 // WINDOW_MS == t2 // WINDOW_MS}


def _interval_reference(s1, s2) -> set:
    return {(a, b) for k1, a, t1 in s1 for k2, b, t2 in s2 if k1 == k2 and -7 <= t2 - t1 <= 30}


BOLTS = {
    "join": (lambda: SlowJoin("s1", "id").join("s2", "id", "s1")
             .with_tumbling_window(Duration(WINDOW_MS)), _join_reference),
    "interval": (lambda: SlowIntervalJoin("s1", "id", "s2", "id").between(-7, 30),
                 _interval_reference),
}


def _run(cluster, name, tmp_path, kind, checkpoints):
    make, reference = BOLTS[kind]
    s1, s2 = _rows()
    bolt = (make().select("s1:a, s2:b").with_timestamp_field("ts").with_lag(Duration(50))
            .with_watermark_interval(Duration(20)))
    b = TopologyBuilder()
    b.set_spout("s1", IterableSpout(s1, ("id", "a", "ts"), msg_ids=not checkpoints))
    b.set_spout("s2", IterableSpout(s2, ("id", "b", "ts"), msg_ids=not checkpoints))
    b.set_bolt("j", bolt, 2).fields_grouping("s1", Fields(("id",))).fields_grouping(
        "s2", Fields(("id",)))
    if checkpoints:
        b.set_bolt("tally", Tally()).global_grouping("j")
    else:
        b.set_bolt("out", CollectorBolt()).global_grouping("j")
    conf = {"topology.producer.batch.size": 50, "topology.executor.receive.buffer.size": 256}
    if checkpoints:
        conf.update({"topology.acker.executors": 0,
                     "topology.state.checkpoint.interval.ms": 200,
                     "topology.state.checkpoint.dir": str(tmp_path / "ckpt")})
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        if checkpoints:
            from tests.test_state import _kill_and_wait

            victim = handle.topology.component_tasks["j"][0]
            until(lambda: handle.checkpoint_stats()["completed"] >= 1
                  and sum(t.executed for t in handle.stats().component("tally")) > 200,
                  60, "outputs and a checkpoint")
            _kill_and_wait(handle, victim)
        assert handle.wait(120), handle.stats().summary()
        if checkpoints:
            assert handle.checkpoint_stats()["rollbacks"] >= 1
            restored = [r for r in handle.stats().checkpoints()
                        if r["component"] == "j" and r["task"] == victim]
            assert restored[0]["restores"] >= 1
            counts = next(iter(handle.state()["tally"].values()))
            rows = [tuple(map(int, k.split(","))) for k, n in counts.items()
                    for _ in range(n)]
        else:
            rows = [tuple(values) for *_, values in handle.collected("out")]
            stats = handle.stats()  # every tree completes: outputs anchored, inputs acked
            for spout in ("s1", "s2"):
                tasks = stats.component(spout)
                assert sum(t.acked for t in tasks) == N and sum(t.failed for t in tasks) == 0
    finally:
        cluster.kill_topology(name)
    return rows, reference(s1, s2)


@pytest.mark.parametrize("checkpoints", [False, True], ids=["acking", "killed-checkpointed"])
@pytest.mark.parametrize("kind", sorted(BOLTS))
def test_a_join_through_two_spouts_outputs_the_reference(cluster, name, tmp_path, kind,
                                                         checkpoints):
    """Each (a, b) row of the reference is output once, and nothing else: with acking
    (every tree completes), and after a join task is killed mid-stream under checkpoints
    (counted in a stateful bolt rolled back with it, so a pair lost with the join's
    buffers, or output twice, shows)."""
    rows, want = _run(cluster, name, tmp_path, kind, checkpoints)
    assert len(rows) == len(want) and set(rows) == want and len(want) > 1000
