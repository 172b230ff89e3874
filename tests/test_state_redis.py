"""The redis state provider against a real ``redis-server`` on a loopback port: the store
and log contract the memory and local providers meet, its checks, ``delete``, errors
that name the server, the coordinator with a log that fails, and on Ray the stateful word
count with tasks killed and with Redis itself stopped and started again mid-run."""

from __future__ import annotations

import collections
import logging
import random
import time

import pytest

from actors._codec import encode_value
from actors.state import CoordinatorCore
from actors.state._provider import COMMITTED, PREPARING, CheckpointLog, CorruptCheckpoint
from actors.state.providers import (
    MemoryProvider,
    RedisProvider,
    RedisStateError,
    make_provider,
)
from tests import test_state_providers as contract
from tests._redis import NO_SERVER, RedisServer, server_binary
from tests._util import free_port, until
from tests.components import StatefulWordCount, merged_counts, words
from tests.test_state import kill_mid_stream
from topology import ConfigError, IterableSpout, TopologyBuilder

pytestmark = pytest.mark.skipif(server_binary() is None, reason=NO_SERVER)


def k(x) -> bytes:
    return encode_value(x)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One ``redis-server`` without persistence for the module."""
    s = RedisServer(str(tmp_path_factory.mktemp("redis"))).start()
    yield s
    s.stop()


_submits = iter(range(10**6))


@pytest.fixture
def provider(server):
    p = RedisProvider("topo", f"s{next(_submits)}", server.config)
    yield p
    p.delete()
    p.close()


# -- the contract of every provider -----------------------------------------------------------


@pytest.mark.parametrize("check", [
    contract.test_restore_is_the_latest_version_at_or_below_the_id,
    contract.test_a_delete_hides_the_key_until_put_again,
    contract.test_preparing_an_id_again_replaces_what_it_held,
    contract.test_restore_takes_only_the_asked_key_groups,
    contract.test_collect_keeps_exactly_what_later_restores_need,
    contract.test_checkpoint_log_phases_and_last_two_committed,
], ids=lambda f: f.__name__.removeprefix("test_"))
def test_the_provider_contract(provider, check):
    check(provider)


@pytest.mark.parametrize("seed", range(3))
def test_collect_changes_no_restore_at_or_above_keep_from(server, seed):
    """Random rounds of puts and deletes (three key groups, one the runtime's negative
    group) into a memory store and a redis store collected as it goes: every restore at or
    above the collected id, highest first, is the same."""
    rnd = random.Random(seed)
    plain = MemoryProvider().task_store("count", 0)
    p = RedisProvider("topo", f"random-{seed}-{next(_submits)}", server.config)
    collected = p.task_store("count", 0)
    for ver in range(1, 13):
        keys = rnd.sample(range(10), rnd.randint(0, 6))
        cut = rnd.randint(0, len(keys))
        ps = [(x % 3 - 1, k(x), k(rnd.random())) for x in keys[:cut]]
        ds = [(x % 3 - 1, k(x)) for x in keys[cut:]]
        for store in (plain, collected):
            store.prepare(ver, ps, ds)
        if ver >= 4:
            collected.collect(ver - 3)
    for ver in range(12, 8, -1):
        assert collected.restore(ver) == plain.restore(ver), ver
        assert collected.restore(ver, range(0, 2)) == plain.restore(ver, range(0, 2))
    p.delete()


def test_layout_base_per_key_group_and_the_delta_of_the_base_kept(provider, server):
    s = provider.task_store("count", 3)
    s.prepare(1, [(0, k("a"), k(1)), (5, k("b"), k(1))], [])
    s.prepare(2, [(0, k("a"), k(2))], [(5, k("b"))])
    s.prepare(3, [(5, k("c"), k(3))], [])
    s.collect(2)
    s.collect(1)  # below the base: nothing to do
    with pytest.raises(ValueError, match="collected"):
        s.prepare(2, [(0, k("a"), k(9))], [])
    r = server.client()
    t = f"storm-on-ray:topo/{provider.submit_id}/count/3/"
    assert r.hgetall(t + "base/0") == {k("a"): k(2)}
    assert not r.exists(t + "base/5")  # b deleted in 2: folded away
    assert sorted(r.hkeys(t + "versions")) == [b"2", b"3"]
    assert r.get(t + "base_id") == b"2"
    assert not r.exists(t + "delta/1")
    assert r.smembers(f"storm-on-ray:topo/{provider.submit_id}/tasks") == {b"count/3"}
    assert s.restore(3) == {k("a"): k(2), k("c"): k(3)}
    with pytest.raises(CorruptCheckpoint, match="collected"):
        s.restore(1)
    r.close()


@pytest.mark.parametrize("damage", ["crc", "value", "entry", "count"])
def test_restore_detects_a_damaged_delta_naming_its_key_and_id(provider, server, damage):
    s = provider.task_store("count", 0)
    s.prepare(1, contract.puts(("a", 1)), [])
    s.prepare(2, contract.puts(("a", 2), ("b", 2)), [])
    r = server.client()
    t = f"storm-on-ray:topo/{provider.submit_id}/count/0/"
    if damage == "crc":
        n, crc = r.hget(t + "versions", "2").split()
        r.hset(t + "versions", "2", b"%s %d" % (n, int(crc) + 1))
    elif damage == "value":
        entry = r.hget(t + "delta/2", k("a"))
        r.hset(t + "delta/2", k("a"), entry[:-1] + bytes([entry[-1] ^ 1]))
    elif damage == "entry":
        r.hset(t + "delta/2", k("a"), b"\x01")
    else:
        r.hdel(t + "delta/2", k("b"))
    r.close()
    with pytest.raises(CorruptCheckpoint, match=rf"checkpoint 2 at {t}delta/2 is corrupt"):
        s.restore(2)
    assert s.restore(1) == {k("a"): k(1)}  # 1 is not part of the damage


def test_a_redis_that_lost_the_data_is_a_corrupt_checkpoint_not_an_empty_state(provider,
                                                                                server):
    s = provider.task_store("count", 0)
    s.restore(None)
    s.prepare(1, contract.puts(("a", 1)), [])
    provider.delete()  # (as a Redis restarted without persistence would have it)
    with pytest.raises(CorruptCheckpoint, match="checkpoint 2 .* the Redis data is gone"):
        s.prepare(2, contract.puts(("b", 2)), [])  # (a delta on top of nothing)
    assert provider.keys() == []
    with pytest.raises(CorruptCheckpoint, match="checkpoint 1 .* the Redis data is gone"):
        s.restore(1)
    fresh = provider.task_store("count", 0)  # (a task restarted: a new process)
    with pytest.raises(CorruptCheckpoint, match="the Redis data is gone"):
        fresh.restore(1)
    assert s.restore(None) == {}
    s.prepare(2, contract.puts(("b", 2)), [])
    assert fresh.restore(2) == {k("b"): k(2)}


def test_state_and_log_survive_the_provider_the_next_one_finds_them(server):
    """Another process (a task or coordinator restarted on another node) opens the same
    submit and finds the log and each task's checkpoints."""
    sid = f"again-{next(_submits)}"
    a = RedisProvider("topo", sid, server.config)
    a.task_store("count", 1).prepare(1, contract.puts(("a", 1)), [])
    a.checkpoint_log().record(COMMITTED, 1)
    a.close()
    b = make_provider({"topology.state.provider": "redis",
                       "topology.state.provider.config": server.config}, "topo", sid)
    assert b.checkpoint_log().load() == (COMMITTED, 1, [1])
    assert b.task_store("count", 1).restore(1) == {k("a"): k(1)}
    b.delete()


def test_delete_removes_every_key_of_the_submit_and_no_other(server):
    r = server.client()
    r.set("storm-on-ray:topo/s1x", b"not ours")
    ps = [RedisProvider("topo", sid, server.config) for sid in ("s1", "s10")]
    for p in ps:
        log_ = p.checkpoint_log()
        log_.record(PREPARING, 1)
        for task in (0, 1):
            st = p.task_store("a/b*", task)  # (a component id with a slash and a glob)
            st.restore(None)
            st.prepare(1, contract.puts(("x", task)), [])
            st.prepare(2, contract.puts(("y", task)), [])
            st.collect(1)
        log_.record(COMMITTED, 1)
    assert all(key.startswith("storm-on-ray:topo/s1/") for key in ps[0].keys())
    assert len(ps[0].keys()) == len(ps[1].keys()) > 8
    ps[0].delete()
    assert ps[0].keys() == []
    assert not [key for key in r.scan_iter(match="storm-on-ray:topo/s1/*")]
    assert len(ps[1].keys()) > 8 and r.get("storm-on-ray:topo/s1x") == b"not ours"
    ps[1].delete()
    r.delete("storm-on-ray:topo/s1x")
    r.close()


def test_read_state_decodes_the_committed_checkpoint_and_changes_nothing(provider):
    log_ = provider.checkpoint_log()
    s = provider.task_store("count", 2)
    s.restore(None)
    provider.task_store("src", 0).restore(None)
    s.prepare(1, [(4, k(("w", 1)), k(1))], [])
    log_.record(COMMITTED, 1)
    s.prepare(2, [(4, k(("w", 1)), k(2)), (-1, b"\xc1internal", k(0))], [])
    log_.record(COMMITTED, 2)
    s.prepare(3, [(4, k(("w", 1)), k(3))], [])  # prepared, not committed
    before = sorted(provider.keys())
    snap = provider.read_state()
    assert snap == {"count": {2: {("w", 1): 2}}, "src": {0: {}}}
    assert snap.checkpoint_id == 2
    assert provider.read_state(1) == {"count": {2: {("w", 1): 1}}, "src": {0: {}}}
    assert sorted(provider.keys()) == before  # (3 is still there)
    assert s.restore(3) == {k(("w", 1)): k(3), b"\xc1internal": k(0)}


def test_read_state_falls_back_from_a_corrupt_checkpoint(provider, server, caplog):
    log_ = provider.checkpoint_log()
    s = provider.task_store("count", 0)
    for i in (1, 2):
        s.prepare(i, contract.puts(("a", i)), [])
        log_.record(COMMITTED, i)
    r = server.client()
    r.hset(f"storm-on-ray:topo/{provider.submit_id}/count/0/versions", "2", b"1 0")
    r.close()
    with caplog.at_level(logging.WARNING):
        snap = provider.read_state()
    assert snap == {"count": {0: {"a": 1}}} and snap.checkpoint_id == 1
    assert "checkpoint 2" in caplog.text and "corrupt" in caplog.text


# -- config and errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("config,match", [
    (None, r"needs \"host\""),
    ({"port": 6379}, r"needs \"host\""),
    ({"host": "h", "passwd": "x"}, r"unknown key 'passwd'.*did you mean 'password'"),
    ({"host": "h", "port": "6379"}, r"'port' must be a port number"),
    ({"host": "h", "port": 0}, r"'port' must be a port number"),
    ({"host": "h", "db": -1}, r"'db' must be a database number"),
])
def test_bad_config_is_refused_naming_the_key(config, match):
    conf = {"topology.state.provider": "redis"}
    if config is not None:
        conf["topology.state.provider.config"] = config
    with pytest.raises(ConfigError, match=match):
        make_provider(conf, "topo", "s1")


def test_unreachable_redis_is_refused_naming_the_address_and_command(caplog):
    port = free_port()
    p = make_provider({"topology.state.provider": "redis",
                       "topology.state.provider.config":
                           f'{{"host": "127.0.0.1", "port": {port}, "timeout_ms": 500}}'},
                      "topo", "s1")
    address = f"127.0.0.1:{port}/0"
    with pytest.raises(RedisStateError, match=rf"Redis at {address}: PING failed: .*"
                                              rf"is redis-server running there") as e:
        p.checkpoint_log()
    assert e.value.address == address and e.value.command == "PING"
    s = p.task_store("count", 0)
    with pytest.raises(RedisStateError, match=rf"{address}: MULTI/EXEC of GET HGETALL "
                                              rf"SMEMBERS SISMEMBER \(restore"):
        s.restore(1)
    with caplog.at_level(logging.WARNING):
        s.collect(1)  # best effort: logged, never raised into the commit
    assert "not collected" in caplog.text and address in caplog.text


def test_wrong_password_names_the_address_and_what_to_check(server):
    r = server.client()
    r.acl_setuser("storm", enabled=True, passwords=["+right"], keys=["*"],
                  commands=["+@all"])
    try:
        p = RedisProvider("topo", "s1", {**server.config, "username": "storm",
                                         "password": "nope"})
        with pytest.raises(RedisStateError, match=r"PING failed: .*check \"password\""):
            p.checkpoint_log()
        p = RedisProvider("topo", "s1", {**server.config, "username": "storm",
                                         "password": "right"})
        assert p.checkpoint_log().load() == (COMMITTED, 0, [])
        p.close()
    finally:
        r.acl_deluser("storm")
        r.close()


# -- the coordinator with a log that fails --------------------------------------------------------


class _FlakyLog(CheckpointLog):
    """A memory log that raises while ``down``."""

    def __init__(self) -> None:
        self.inner = MemoryProvider().checkpoint_log()
        self.down = False

    def load(self):
        return self.inner.load()

    def record(self, phase, checkpoint_id, manifest=None):
        if self.down:
            raise RedisStateError("127.0.0.1:1/0", "MULTI/EXEC of HSET", "refused")
        self.inner.record(phase, checkpoint_id)


def test_a_log_that_fails_never_commits_and_the_rounds_go_on_when_it_is_back():
    log_ = _FlakyLog()
    core = CoordinatorCore(log_, [1, 2], [1], interval_s=1.0, timeout_s=10.0,
                           min_pause_s=0.0, now=0.0)
    log_.down = True
    assert core.tick(1.0) == [] and core.round is None and core.failed_rounds == 1
    assert core.tick(1.5) == []  # tried again an interval later, not at once
    log_.down = False
    (trigger,) = core.tick(2.0)
    cid = trigger.args[1]
    assert trigger.kind == "trigger" and log_.load()[:2] == (PREPARING, cid)
    core.prepared(1, cid, core.gen, 2.1)
    log_.down = True
    (rollback,) = core.prepared(2, cid, core.gen, 2.2)  # its commit cannot be recorded
    assert rollback.kind == "rollback" and rollback.args[1] is None
    assert core.last_committed is None and log_.load()[2] == []
    for t in (1, 2):
        core.paused(t, core.gen, 2.3)
    log_.down = False
    (trigger,) = core.tick(3.5)
    cid = trigger.args[1]
    core.prepared(1, cid, core.gen, 3.6)
    (commit,) = core.prepared(2, cid, core.gen, 3.7)
    assert commit.kind == "commit" and core.last_committed == cid == log_.load()[2][-1]


# -- on Ray ------------------------------------------------------------------------------------


def _redis_conf(config: dict, **more) -> dict:
    return {"topology.state.provider": "redis",
            "topology.state.provider.config": config,
            "topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
            "topology.executor.receive.buffer.size": 256,
            "topology.producer.batch.size": 50, **more}


def _word_count(data: list, tasks: int = 1) -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)), tasks)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005), tasks).fields_grouping(
        "src", ("word",))
    return b


def test_unreachable_redis_is_refused_at_submit(cluster, name):
    port = free_port()
    with pytest.raises(RedisStateError, match=rf"127\.0\.0\.1:{port}/0: PING failed"):
        cluster.submit_topology(name, _redis_conf({"host": "127.0.0.1", "port": port}),
                                _word_count(words(10)).create_topology())


def test_stateful_word_count_on_redis_is_exact_after_tasks_are_killed(cluster, name,
                                                                       server):
    """Two workers; a count task and a spout task (its position is in Redis too) killed
    mid-stream: the final state is a Counter of the input, and kill deletes the keys."""
    data = words(8000)
    conf = _redis_conf(server.config, **{"topology.workers": 2})
    handle = cluster.submit_topology(name, conf, _word_count(data, 2).create_topology())
    provider = RedisProvider(name, handle.prefix, server.config)
    try:
        tasks = handle.topology.component_tasks
        kill_mid_stream(handle, (tasks["count"][0], tasks["src"][1]))
        assert handle.wait(120), "the topology did not complete"
        assert merged_counts(provider.read_state()["count"]) == collections.Counter(data)
        assert merged_counts(handle.state()["count"]) == collections.Counter(data)
        assert handle.checkpoint_stats()["rollbacks"] >= 2
    finally:
        cluster.kill_topology(name)
    assert provider.keys() == [], "kill deletes the submit's keys"
    provider.close()


def test_redis_stopped_and_started_again_mid_run_the_state_is_still_exact(
        cluster, name, tmp_path):
    """Redis (append-only, fsync per write) is killed mid-run and started again on the same
    port from its files a few seconds later: rounds fail meanwhile (no half-written
    checkpoint is committed) and the topology rolls back until it answers, then runs on;
    the final state is exact."""
    server = RedisServer(str(tmp_path / "redis"), persistent=True).start()
    data = words(4000)
    try:
        handle = cluster.submit_topology(name, _redis_conf(server.config),
                                         _word_count(data).create_topology())
        provider = RedisProvider(name, handle.prefix, server.config)
        try:
            until(lambda: handle.checkpoint_stats()["completed"] >= 2, 60, "checkpoints")
            # (killed while a round runs, mostly: its tasks' prepares fail, and then the
            # restores of the rollback, until Redis is back)
            until(lambda: handle.checkpoint_stats()["in_flight"] is not None, 30, "a round")
            server.stop(kill=True)
            assert not handle.wait(0.01), "finished before the outage"
            until(lambda: (lambda s: s["failed_rounds"] + s["rollbacks"] > 0)(
                handle.checkpoint_stats()), 30, "a round failed by the outage")
            time.sleep(1.5)  # (a rollback's restores fail too)
            server.start()
            assert handle.wait(120), "the topology did not complete"
            assert merged_counts(provider.read_state()["count"]) == collections.Counter(data)
        finally:
            cluster.kill_topology(name)
        assert provider.keys() == []
        provider.close()
    finally:
        server.stop()


def test_a_read_racing_two_commits_reads_the_checkpoint_it_pinned(provider, monkeypatch):
    """handle.state() of a running topology on Redis: two commits between the log's read
    and the stores' read collect nothing it reads (issue 49)."""
    from actors.state import _redis
    from tests.test_restore_exact import _commit

    store, log_ = provider.task_store("count", 1), provider.checkpoint_log()
    for cid in (1, 2):
        _commit(store, log_, cid)
    state_at = _redis._RedisTaskStore._state_at

    def racing(self, *args):
        monkeypatch.setattr(_redis._RedisTaskStore, "_state_at", state_at)
        for c in (3, 4):
            _commit(store, log_, c)
        return state_at(self, *args)

    monkeypatch.setattr(_redis._RedisTaskStore, "_state_at", racing)
    snap = provider.read_state()
    assert (snap.checkpoint_id, snap["count"][1]) == (2, {"a": 2})


def test_a_lost_key_that_the_commit_manifest_names_is_a_corrupt_checkpoint(provider,
                                                                          server):
    """Before, a task store whose checkpoint 2 was lost from Redis (its delta and record
    gone, the rest there) restored checkpoint 1's state as 2's (issue 49)."""
    from actors.state._manifest import ManifestedStore

    s = provider.task_store("count", 0)
    s.restore(None)
    n1 = s.prepare(1, contract.puts(("a", 1)), [])
    n2 = s.prepare(2, contract.puts(("a", 2), ("b", 2)), [])
    log_ = provider.checkpoint_log()
    log_.record(COMMITTED, 1, {0: (1, n1)})
    log_.record(COMMITTED, 2, {0: (2, n2)})
    assert log_.manifest(2) == {0: (2, 2)}
    r = server.client()
    r.delete(s.keys.delta(2))
    r.hdel(s.keys.versions, "2")
    fresh = ManifestedStore(provider.task_store("count", 0),
                            lambda cid: (log_.manifest(cid) or {}).get(0))
    with pytest.raises(CorruptCheckpoint, match=r"checkpoint 2 at redis://.*count/0/ .*"
                                                r"no record"):
        fresh.restore(2)
    assert fresh.restore(1) == {k("a"): k(1)}
