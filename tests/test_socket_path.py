"""The same-node socket path on a real Ray (``topology.transfer.local.socket``): a killed
receiver loses nothing with acking, its senders fall back to actor calls and reconnect
to its new incarnation, and nothing of the sockets outlives the topology."""

from __future__ import annotations

import os
import signal
import socket

import pytest
import ray

from actors._local_socket import supported
from tests._util import until
from tests.components import CountMultiplesOf3, GenSpout, LedgerSpout, PassBolt, _read_lines
from topology import CollectorBolt, TopologyBuilder


def _abstract_names(prefix: str, listening: bool = False) -> list[str]:
    """Abstract Unix socket names in use on this machine that carry ``prefix`` (only
    those of listening sockets: flag ``__SO_ACCEPTCON``, 0x10000)."""
    with open("/proc/net/unix") as f:
        rows = [ln.split() for ln in f if f"@storm-on-ray/{prefix}" in ln]
    return [r[-1] for r in rows if not listening or int(r[3], 16) & 0x10000]


@pytest.mark.parametrize("socket_path", [
    pytest.param(True, marks=pytest.mark.skipif(not supported(), reason="Linux only")),
    False], ids=["socket", "call"])
def test_a_killed_receiver_loses_no_msg_id_and_its_senders_reconnect(cluster, name,
                                                                      tmp_path, socket_path):
    n = 4000
    b = TopologyBuilder()
    b.set_spout("src", LedgerSpout(n, str(tmp_path)))
    b.set_bolt("mid", PassBolt(delay_s=0.0005)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("mid")
    conf = {"topology.transfer.local.socket": socket_path,
            "topology.message.timeout.secs": 3, "topology.max.spout.pending": 500}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    tasks = handle.topology.component_tasks
    mid = tasks["mid"][0]
    try:
        until(lambda: len(_read_lines(tmp_path / "acked-0.log")) > 500, 60, "500 acked")
        if socket_path:  # one listening socket per receiving actor, under our prefix
            assert len(_abstract_names(handle.prefix)) >= 2
        os.kill(ray.get(handle.actors[mid].pid.remote()), signal.SIGKILL)
        assert handle.wait(120), handle.stats().summary()
        acked = [int(x) for x in _read_lines(tmp_path / "acked-0.log")]
        assert sorted(acked) == list(range(n))  # every id acked, each once
        s = handle.stats()
        assert s.component("mid")[0].restarted
        sent = s.component("src")[0]
        if socket_path:
            # the spout's frames to mid: over the socket, then actor calls after the
            # kill, then a socket to the new incarnation
            assert sent.transfer["socket_frames"] > 0 and sent.transfer["fallbacks"] >= 1
            until(lambda: handle.stats().component("src")[0].transfer_path_to[mid]
                  == "socket", 30, "the spout back on the socket")
            assert handle.stats().component("src")[0].transfer["reconnects"] >= 1
        else:
            assert set(sent.transfer_path_to.values()) == {"call"}
            assert sent.transfer["socket_frames"] == 0 and sent.transfer["call_frames"] > 0
    finally:
        cluster.kill_topology(name)
    # abstract names vanish with the processes: nothing is left behind
    until(lambda: not _abstract_names(handle.prefix), 30, "no socket left")


@pytest.mark.skipif(not supported(), reason="Linux only")
def test_backpressure_statuses_between_two_workers_go_over_control_sockets(cluster, name):
    """A slow task in worker 1 fed from worker 0 (one node): its reports to its transfer
    actor and to its sender (the direct path) go as control messages on sockets, and the
    sender halts on them (a halt-lag recorded). A connection from another process to a
    control listener is refused and counted."""
    b = TopologyBuilder()
    b.set_spout("gen", GenSpout(10**9))
    b.set_bolt("slow", CountMultiplesOf3(300)).shuffle_grouping("gen")
    conf = {"topology.workers": 2, "topology.executor.receive.buffer.size": 256,
            "topology.producer.batch.size": 64, "topology.acker.executors": 0}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        assign = handle.stats().assignment
        gen, slow = handle.topology.component_tasks["gen"][0], handle.topology.component_tasks[
            "slow"][0]
        assert assign[gen] != assign[slow]
        # the first status to each peer goes by actor call (no channel yet), so wait for
        # the sockets to carry some both ways: to the sender and to the transfer actors
        until(lambda: (lambda s: s.component("gen")[0].halt_lags_ms
                       and s.component("slow")[0].transfer["control_socket_sent"] >= 2
                       and s.component("gen")[0].transfer["control_received"] >= 1
                       and sum(w.counters["control_received"] for w in s.workers) >= 1)(
            handle.stats()), 60, "a halt over a control socket")
        # a foreign process (this one: no peer expects its pid) that connects to every
        # control listener and says anything is refused, and each listener's owner counts
        # it (a listener is named .../<task id, or -1 - worker>/<random>/c)
        owners = {int(n.split("/")[-3]): n
                  for n in _abstract_names(handle.prefix, True) if n.endswith("/c")}
        assert gen in owners  # (it received statuses over one)
        before = _refused_by_owner(handle.stats())
        for n in owners.values():
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
                sock.connect("\0" + n[1:])
                sock.send(b"\x93\xa5hello")
                sock.settimeout(10)
                assert sock.recv(64) == b""  # closed on us
        until(lambda: (lambda after: all(after[o] > before[o] for o in owners))(
            _refused_by_owner(handle.stats())), 30, "every refusal counted")
    finally:
        cluster.kill_topology(name)


def _refused_by_owner(s) -> dict[int, int]:
    """Control connections refused so far, by listener owner: a task id, or ``-1 - w``
    for worker ``w``'s transfer actor."""
    out = {t.task: t.transfer.get("control_refused_connections", 0) for t in s.tasks}
    out.update({-1 - w.worker: w.counters["control_refused_connections"] for w in s.workers})
    return out
