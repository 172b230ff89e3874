"""State backends and savepoint storage: the module the backends share, on each provider;
savepoints through ``pyarrow.fs`` (a local path, ``file://``, an S3-compatible server on
loopback: moto's, which shows none of S3's latency or throttling) and their refusals; the
``state`` command on savepoints and Redis; and, on Ray, a word count saved from one
provider and restored exact into another."""

from __future__ import annotations

import ast
import collections
import os
import shutil

import pytest

from actors._codec import encode_value
from actors.state._common import apply_delta, check_version, entries_crc
from actors.state._internals import INTERNAL_GROUP, INTERNAL_PREFIX
from actors.state._provider import COMMITTED, CorruptCheckpoint
from actors.state.providers import LocalProvider, MemoryProvider, RedisProvider
from actors.state.savepoints import (
    MARKER,
    SavepointError,
    check_target,
    read_savepoint,
    write_savepoint,
)
from tests import _redis
from tests.components import FileGatedKeySpout, StatefulWordCount, merged_counts
from topology import TopologyBuilder


def k(x) -> bytes:
    return encode_value(x)


#: a savepoint's layout as format 2 records it, for one component of one task
LAYOUT = {"key_groups": 128, "tasks": {"count": 1}, "keyed": {}, "forward": []}


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    if _redis.server_binary() is None:
        pytest.skip(_redis.NO_SERVER)
    s = _redis.RedisServer(str(tmp_path_factory.mktemp("redis"))).start()
    yield s
    s.stop()


# -- the backends' shared module --------------------------------------------------------------


def test_the_import_graph_of_actors_state_has_no_circle():
    """Every import between modules of actors/state, function-level ones included."""
    root = os.path.join(os.path.dirname(__file__), "..", "actors", "state")
    names = {f[:-3] for f in os.listdir(root) if f.endswith(".py") and f != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name in names:
        with open(os.path.join(root, name + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        graph[name] = {node.module.rpartition(".")[2] for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.module
                       and node.module.startswith("actors.state.")} & names - {name}

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += graph[n]
        return seen
    circles = sorted(n for n in names if n in reach(n))
    assert circles == [], f"modules on an import circle: {circles}"


def test_the_shared_checks_and_the_base_plus_delta_rule():
    state = {b"a": b"1", b"b": b"2"}
    apply_delta(state, [(b"a", 0, b"9"), (b"b", 0, None), (b"c", 5, b"3")], range(0, 4))
    assert state == {b"a": b"9"}  # a put into a group not asked for removes the key
    entries = [(b"a", 0, b"9"), (b"b", 1, None)]
    check_version("here", 4, entries_crc(entries), entries_crc(entries))
    n, crc = entries_crc(entries)
    with pytest.raises(CorruptCheckpoint, match="checkpoint 4 at here.*CRC-32"):
        check_version("here", 4, (n, crc), (n, crc ^ 1))
    with pytest.raises(CorruptCheckpoint, match="2 entries without the checkpoint's record"):
        check_version("here", 4, (n, crc), None)


@pytest.fixture(params=["memory", "local", "redis"])
def any_provider(request, tmp_path):
    if request.param == "memory":
        p = MemoryProvider("topo", "s1")
    elif request.param == "local":
        p = LocalProvider(str(tmp_path), "topo", "s1")
    else:
        p = RedisProvider("topo", f"s-{os.getpid()}-{id(request)}",
                          request.getfixturevalue("redis_server").config)
    yield p
    p.delete()
    p.close()


def test_each_provider_reads_its_committed_state_raw_through_the_shared_rules(any_provider):
    """The same writes on each provider: ``read_raw`` shows the last committed checkpoint
    (the runtime's internal entries too, a prepared round not), an asked one, and refuses
    a collected one with the shared check's message."""
    p, internal = any_provider, INTERNAL_PREFIX + b"w"
    log_ = p.checkpoint_log()
    s = p.task_store("count", 0)
    s.prepare(1, [(0, k("a"), k(1)), (0, k("b"), k(2)), (INTERNAL_GROUP, internal, b"x")], [])
    s.prepare(2, [(0, k("a"), k(3))], [(0, k("b"))])
    s.prepare(3, [(0, k("a"), k(99))], [])
    log_.record(COMMITTED, 1)
    log_.record(COMMITTED, 2)
    raw = p.read_raw()
    assert raw == {"count": {0: {k("a"): k(3), internal: b"x"}}} and raw.checkpoint_id == 2
    assert p.read_raw(1)["count"][0] == {k("a"): k(1), k("b"): k(2), internal: b"x"}
    s.collect(2)
    with pytest.raises(CorruptCheckpoint, match="collected: only checkpoints >= 2"):
        p.read_raw(1)
    s.close()


# -- savepoints through pyarrow.fs ---------------------------------------------------------------


def _save(target: str) -> str:
    return write_savepoint(target, "wc", 7, {"count": {3: {k("a"): k(1), b"\xc1w": b"x"}}},
                           {"count": [3]}, LAYOUT)


@pytest.mark.parametrize("scheme", ["path", "file://"])
def test_a_savepoint_round_trips_through_a_local_filesystem(tmp_path, scheme):
    target = str(tmp_path / "sp") if scheme == "path" else f"file://{tmp_path}/sp"
    assert _save(target) == target
    sp = read_savepoint(target)
    assert (sp.checkpoint_id, sp.components, sp.layout) == (7, {"count": 1}, LAYOUT)
    assert sp.entries == {"count": {0: {k("a"): k(1), b"\xc1w": b"x"}}}
    files = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "sp")
                   for d, _, fs in os.walk(tmp_path / "sp") for f in fs)
    assert files == [MARKER, "metadata.json", "state/count/0.msgpack"]  # (no temp left)
    with open(tmp_path / "sp" / MARKER) as f:
        assert f.read() == "7\n"


def test_a_savepoint_missing_or_changing_a_task_file_is_refused_not_restored_empty(tmp_path):
    """metadata.json lists every task file with its entry count and CRC-32: a savepoint
    that lost a file (or its whole state directory) or had one changed is refused, where
    a read of what was listed restored those tasks empty."""
    target = str(tmp_path / "sp")
    _save(target)
    state_file = tmp_path / "sp" / "state" / "count" / "0.msgpack"
    original = state_file.read_bytes()
    state_file.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(SavepointError, match="CRC-32"):
        read_savepoint(target)
    state_file.unlink()
    with pytest.raises(SavepointError, match=r"\['0'\] .* missing"):
        read_savepoint(target)
    shutil.rmtree(tmp_path / "sp" / "state")
    with pytest.raises(SavepointError, match="missing"):
        read_savepoint(target)


def test_a_savepoint_round_trips_through_s3_and_a_missing_bucket_is_refused(s3):
    uri = s3.uri("savepoints", "round-trip")
    assert _save(uri) == uri and s3.is_file("savepoints", "round-trip/state/count/0.msgpack")
    assert read_savepoint(uri).entries == {"count": {0: {k("a"): k(1), b"\xc1w": b"x"}}}
    with pytest.raises(SavepointError, match="exists and is not an empty directory"):
        check_target(uri)
    with pytest.raises(SavepointError, match=r"savepoint s3://nobucket/sp\?endpoint_override="
                       r".*cannot be written: OSError: Bucket 'nobucket' not found"):
        check_target(s3.uri("nobucket", "sp"))


def test_bad_targets_are_refused_naming_the_target_masked_and_the_error(tmp_path):
    with pytest.raises(SavepointError, match=r"savepoint nosuch://b/sp: pyarrow.fs cannot use "
                       r"it: ArrowInvalid: Unrecognized filesystem type"):
        check_target("nosuch://b/sp")
    for call in (check_target, read_savepoint, _save):
        with pytest.raises(SavepointError, match=r"s3://\*\*\*:\*\*\*@bucket/sp: the URI "
                           r"carries credentials") as e:
            call("s3://AKIAKEY:TOPSECRET@bucket/sp")
        assert "TOPSECRET" not in str(e.value) and "AKIAKEY" not in str(e.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(SavepointError, match=rf"savepoint {tmp_path}/file/sp: cannot be "
                       rf"written: NotADirectoryError"):
        _save(str(tmp_path / "file" / "sp"))


def test_the_state_command_reads_savepoints_and_a_redis_submit(tmp_path, capsys,
                                                               redis_server):
    from cluster._cli import main

    uri = f"file://{tmp_path}/sp"
    _save(uri)
    for target in (uri, str(tmp_path / "sp")):
        assert main(["state", target]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"checkpoint 7: savepoint {target}", "count task 0: 1 keys", "  a = 1"]
    p = RedisProvider("topo", "cli", redis_server.config)
    try:
        p.task_store("count", 2).prepare(1, [(0, k("b"), k(5))], [])
        p.checkpoint_log().record(COMMITTED, 1)
        assert main(["state", "topo/cli", "--redis", f"127.0.0.1:{redis_server.port}"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("checkpoint 1: redis 127.0.0.1:")
        assert out[1:] == ["count task 2: 1 keys", "  b = 5"]
        assert main(["state", "topo", "--redis", "127.0.0.1:1"]) == 1
        assert "TOPOLOGY/SUBMIT_ID" in capsys.readouterr().err
    finally:
        p.delete()
        p.close()


# -- on Ray: a word count moved between providers ----------------------------------------------

KEYS, STEP = 13, 600


def _expected(n: int) -> collections.Counter:
    return collections.Counter(f"k{i % KEYS}" for i in range(n))


def _word_count(gate: str) -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("src", FileGatedKeySpout(KEYS, 3 * STEP, gate))
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("src", ("word",))
    return b


def _conf(provider: dict) -> dict:
    return {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 100,
            **provider}


def _run_to(cluster, name, conf, gate, n, restore_from=None, savepoint=None):
    """Open the gate to ``n`` words, wait until the committed state counts them all, check
    it is exact, then stop with a savepoint at ``savepoint`` (or wait for the end)."""
    with open(gate, "w") as f:
        f.write(str(n))
    handle = cluster.submit_topology(name, conf, _word_count(gate).create_topology(),
                                     restore_from=restore_from)
    try:
        if savepoint is None:
            assert handle.wait(120), handle.stats().summary()
        else:
            from tests._util import until

            until(lambda: sum(merged_counts(handle.state()["count"]).values()) >= n, 60,
                  f"{n} words counted")
        assert merged_counts(handle.state()["count"]) == _expected(n)
        emitted = sum(t.emitted for t in handle.stats().component("src"))
        assert emitted < n if restore_from else emitted == n  # (a restore went on)
        if savepoint is not None:
            handle.kill(savepoint=savepoint)
    finally:
        if savepoint is None:
            cluster.kill_topology(name)
        else:
            cluster.topologies.pop(name, None)


def test_a_word_count_saved_from_local_to_s3_restores_exact_into_redis(
        cluster, name, tmp_path, s3, redis_server):
    gate, sp = str(tmp_path / "gate"), s3.uri("savepoints", f"{name}/local")
    local = _conf({"topology.state.checkpoint.dir": str(tmp_path / "ckpt")})
    redis = _conf({"topology.state.provider": "redis",
                   "topology.state.provider.config": redis_server.config})
    _run_to(cluster, name, local, gate, STEP, savepoint=sp)
    assert s3.is_file("savepoints", f"{name}/local/{MARKER}")  # (on the server)
    _run_to(cluster, name, redis, gate, 3 * STEP, restore_from=sp)


def test_a_word_count_saved_from_redis_restores_exact_into_local(
        cluster, name, tmp_path, redis_server):
    gate, sp = str(tmp_path / "gate"), str(tmp_path / "sp")
    local = _conf({"topology.state.checkpoint.dir": str(tmp_path / "ckpt")})
    redis = _conf({"topology.state.provider": "redis",
                   "topology.state.provider.config": redis_server.config})
    _run_to(cluster, name, redis, gate, STEP, savepoint=sp)
    _run_to(cluster, name, local, gate, 3 * STEP, restore_from=sp)

