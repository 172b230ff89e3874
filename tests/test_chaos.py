"""Actor failures: Ray restarts a killed executor or transfer actor, it rejoins, and with
acking no msg_id is lost."""

from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest
import ray

from tests._util import until
from tests.components import IdempotentSink, LedgerSpout, PassBolt, SeqSpout, _read_lines
from topology import CollectorBolt, TopologyBuilder


def _pid(actor) -> int | None:
    """The actor's process id; None while Ray restarts it."""
    try:
        return ray.get(actor.pid.remote(), timeout=60)
    except ray.exceptions.RayActorError:
        return None


def _sigkill(actor) -> int:
    """SIGKILL the process of ``actor`` (the whole cluster runs on this machine)."""
    pid = _pid(actor)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    return pid


#: one kill of each kind: a spout, a bolt and a sink task, an acker (or the other spout
#: task when the spouts ack), a transfer actor
FIRST_KILLS = 5


def test_killed_bolt_is_restarted_and_the_stream_completes(cluster, workers, name):
    """Without acking the tuples the dead instance held are lost, but the restarted
    instance rejoins: the rest of the stream reaches it and the topology completes. With
    several workers it rejoins through the transfer actors (with 3, its spout and its sink
    are each in another worker)."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(3000))
    b.set_bolt("mid", PassBolt(delay_s=0.001)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("mid")
    # small queues and batches: the spout is still held by backpressure at the kill
    handle = cluster.submit_topology(name, workers.conf({
        "topology.acker.executors": 0, "topology.executor.receive.buffer.size": 64,
        "topology.producer.batch.size": 16}), b.create_topology())
    try:
        mid = handle.actors[handle.topology.component_tasks["mid"][0]]
        until(lambda: handle.stats().component("mid")[0].executed > 200, 60)
        old = _sigkill(mid)
        until(lambda: _pid(mid) not in (None, old), 60)
        assert handle.wait(120)
        s = handle.stats()
        assert s.component("mid")[0].restarted and not s.component("src")[0].restarted
        assert handle.restarts()[f"task-{handle.topology.component_tasks['mid'][0]}"] == 1
        got = {v[0] for *_, v in handle.collected("sink")}
        assert max(got) == 2999  # tuples sent after the restart arrived
        assert len(got) >= s.component("mid")[0].executed
    finally:
        cluster.kill_topology(name)


@pytest.mark.parametrize("in_spouts,policy,wanted,n", [
    (False, "storm2", 8, 60_000),
    # the other forms kill one actor of each kind (FIRST_KILLS), on a shorter stream:
    # acking in the spouts, and every other flow-control policy with ackers (nothing lost,
    # no deadlock, across restarts under each)
    (True, "storm2", FIRST_KILLS, 40_000),
    (False, "watermark", FIRST_KILLS, 40_000),
    (False, "nak", FIRST_KILLS, 40_000), (False, "debloat", FIRST_KILLS, 40_000)],
    ids=["ackers", "in_spouts", "ackers-watermark", "ackers-nak", "ackers-debloat"])
def test_chaos_kills_every_few_seconds_and_every_msg_id_is_acked(cluster, name, tmp_path,
                                                                 in_spouts, policy, wanted,
                                                                 n):
    """Kill an executor or transfer actor (SIGKILL) ``wanted`` times, at each
    ``1 / (wanted + 1)`` of an ``n``-tuple acked run over two workers, at least 2 s apart:
    one of each kind, then at random. Every msg_id must end up acked (the spout's durable
    ledger), and the idempotent sink's per-key counts must equal the expected ones. With
    ``topology.acker.in.spouts`` there is no acker to kill: the other spout task is killed
    in its place (its trees die with it). The spouts emit only below a gate the test
    keeps half a step past the next kill's point (the whole stream after the last kill),
    so a fast run cannot end before its kills."""
    keys = 10
    step = wanted + 1
    gate = tmp_path / "gate"

    def open_gate(upto: int) -> None:
        (tmp_path / "gate.tmp").write_text(f"{min(n, upto)}\n")
        os.replace(tmp_path / "gate.tmp", gate)

    def gate_after(kills: int) -> int:  # half a step past kill ``kills + 1``'s point
        return n if kills == wanted else n * (2 * kills + 3) // (2 * step)

    open_gate(gate_after(0))
    b = TopologyBuilder()
    b.set_spout("src", LedgerSpout(n, str(tmp_path), keys, gated=True), parallelism_hint=2)
    b.set_bolt("mid", PassBolt(), parallelism_hint=2).shuffle_grouping("src")
    b.set_bolt("sink", IdempotentSink(str(tmp_path)), parallelism_hint=2).fields_grouping(
        "mid", ["key"])
    conf = {"topology.workers": 2, "topology.message.timeout.secs": 5,
            "topology.max.spout.pending": 2000, "topology.acker.in.spouts": in_spouts,
            "topology.backpressure.policy": policy}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    rng = random.Random(1234)
    victims = [(f"task-{t}", a) for t, a in handle.actors.items()]
    victims += [(f"worker-{w}", a) for w, a in handle.transfers.items()]
    # one of each kind first (spout, bolt, sink, acker, transfer actor), then at random
    tasks = handle.topology.component_tasks
    first = [tasks[c][0] for c in ("src", "mid", "sink")]
    first.append(tasks["src"][1] if in_spouts else tasks["__acker"][0])
    plan = [(f"task-{t}", handle.actors[t]) for t in first] + [("worker-1", handle.transfers[1])]
    kills: list[str] = []
    try:
        # a kill at each step of the msg_ids acked (so a fast run cannot outpace them),
        # at least 2 s apart
        deadline = time.monotonic() + 420  # (below pytest-timeout: the summary shows)
        last_kill = 0.0
        while not handle.wait(0.25):
            assert time.monotonic() < deadline, handle.stats().summary()
            acked = sum(len(_read_lines(tmp_path / f"acked-{k}.log")) for k in range(2))
            due = len(kills) < wanted and acked >= n * (len(kills) + 1) / step
            if due and time.monotonic() - last_kill >= 2.0:
                key, actor = plan[len(kills)] if len(kills) < len(plan) else rng.choice(victims)
                if _sigkill(actor) is not None:  # None: still restarting from a kill
                    kills.append(key)
                    last_kill = time.monotonic()
                    open_gate(gate_after(len(kills)))
        # the run may complete before the last killed actor is back (a transfer actor is
        # not needed by the stream's end): wait for Ray to have restarted every one
        wanted_restarts = collections.Counter(kills)
        restarts = until(lambda: (lambda r: r if all(
            r.get(k, 0) >= c for k, c in wanted_restarts.items()) else None)(
            handle.restarts()), 60, "every killed actor restarted")
        s = handle.stats()
    finally:
        cluster.kill_topology(name)
    assert len(kills) == wanted, kills
    for key, count in wanted_restarts.items():
        assert restarts[key] == count, (key, restarts)
    acked = set()
    for k in range(2):
        acked.update(int(x) for x in _read_lines(tmp_path / f"acked-{k}.log"))
    assert acked == set(range(n))
    pairs = set()
    for f in tmp_path.glob("sink-*.log"):
        pairs.update(tuple(map(int, ln.split(","))) for ln in _read_lines(f))
    counts = collections.Counter(k for k, _ in pairs)
    assert counts == collections.Counter(i % keys for i in range(n))
    assert {i for _, i in pairs} == set(range(n))
    print(f"kills={kills} replays={s.total('src', 'failed')} "
          f"lost_frames={s.total('mid', 'lost_frames') + s.total('sink', 'lost_frames')}")
