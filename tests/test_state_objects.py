"""Checkpoints as objects under a ``pyarrow.fs`` URI (``actors/state/_objects.py``): a
task's store and the coordinator's log round-trip through ``file://`` and through moto's
loopback S3 server (none of S3's latency or throttling), a restarted task restores from
the objects alone, garbage collection leaves only what retained checkpoints read, a torn
object is never read, and the multi-node refusal's pure check. On Ray: the stateful word
count with kills, exact, on ``s3://`` and ``file://``."""

from __future__ import annotations

import collections
import os

import pyarrow.fs as pafs
import pytest

from actors._codec import encode_value
from actors.state._manifest import ManifestedStore
from actors.state._object_format import MAGIC, log_record, record_name
from actors.state._objects import MAX_CHAIN, MIN_CHAIN, ObjectProvider
from actors.state._provider import COMMITTED, FINAL, PREPARING, CorruptCheckpoint, MissingState
from actors.state.providers import StateDirError, make_provider
from cluster._state_dir import check_shared_dir, local_dir
from tests.components import StatefulWordCount, merged_counts, words
from tests.test_state import kill_mid_stream
from topology import IterableSpout, TopologyBuilder, TopologyError


def k(x) -> bytes:
    return encode_value(x)


@pytest.fixture(params=["file", "s3"])
def uri(request, tmp_path):
    """A checkpoint directory URI, on ``file://`` or on the loopback S3 server."""
    if request.param == "file":
        return f"file://{tmp_path}/ckpt"
    s3 = request.getfixturevalue("s3")
    return s3.uri("checkpoints", f"{request.node.name.replace('[', '-').rstrip(']')}")


def _files(p: ObjectProvider) -> list[str]:
    infos = p.location.filesystem.get_file_info(
        pafs.FileSelector(p.root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(p.root) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_a_restarted_task_restores_from_the_objects_alone(uri):
    p = ObjectProvider(uri, "topo", "s1")
    store = p.task_store_at("count", 7, 1)
    assert store.restore(None) == {}
    store.prepare(1, [(3, k("a"), k(1)), (5, k("b"), k(1))], [])
    store.prepare(2, [(3, k("a"), k(2))], [(5, k("b"))])
    store.prepare(3, [], [])  # (changed nothing: an empty object the manifest can name)
    store.prepare(4, [(5, k("c"), k(9))], [])  # (a round that will be rolled back)
    store.close()
    assert _files(p) == ["count/task-1/gen-00000000000000000000/delta-00000000000000000001",
                         "count/task-1/gen-00000000000000000000/delta-00000000000000000002",
                         "count/task-1/gen-00000000000000000000/delta-00000000000000000003",
                         "count/task-1/gen-00000000000000000000/delta-00000000000000000004"]
    # another process (another node): a new provider, a new working copy
    again = ObjectProvider(uri, "topo", "s1").task_store_at("count", 7, 1)
    assert again.restore(3) == {k("a"): k(2)}
    assert again.restore(3, range(5, 6)) == {}
    again.check_prepared(2, 2)  # (a put and a delete)
    again.check_prepared(3, 0)
    with pytest.raises(CorruptCheckpoint, match="the commit manifest names it with 1"):
        again.check_prepared(2, 1)
    assert not any(f.endswith("4") for f in _files(p)), "the rolled-back round's is gone"
    again.prepare(5, [(5, k("d"), k(1))], [])
    assert again.restore(5) == {k("a"): k(2), k("d"): k(1)}  # (4's "c" never read)
    again.close()
    p.delete()
    assert _files(p) == []


def test_collection_leaves_only_what_retained_checkpoints_read(uri):
    p = ObjectProvider(uri, "topo", "gc")
    store = p.task_store_at("count", 0, 0)
    store.restore(None)
    n = MIN_CHAIN * 3
    for cid in range(1, n + 1):  # every key changed every time: a delta = the state
        store.prepare(cid, [(0, k(f"w{i}"), k(cid)) for i in range(4)], [])
        if cid > 1:
            store.collect(cid - 1)  # (the runtime keeps the last two committed)
    gens = sorted({f.split("/")[2] for f in _files(p)})
    assert 1 <= len(gens) <= 2, gens
    deltas = [f for f in _files(p) if "/delta-" in f]
    assert len(deltas) <= 2 * MIN_CHAIN
    expected = {k(f"w{i}"): k(n) for i in range(4)}
    fresh = ObjectProvider(uri, "topo", "gc").task_store_at("count", 0, 0)
    assert fresh.restore(n) == expected
    assert fresh.restore(n - 1) == {k(f"w{i}"): k(n - 1) for i in range(4)}
    with pytest.raises(CorruptCheckpoint, match="collected"):
        fresh.restore(1)
    fresh.close()
    store.close()
    p.delete()
    assert MAX_CHAIN >= MIN_CHAIN


def test_the_log_is_append_only_and_a_torn_record_is_never_read(uri):
    p = ObjectProvider(uri, "topo", "log")
    log = p.checkpoint_log()
    assert log.load() == (COMMITTED, 0, [])
    for cid in (1, 2, 3):
        log.record(PREPARING, cid)
        log.record(COMMITTED, cid, {7: (cid, 2)})
    log.record(PREPARING, 4)
    assert sorted(f.split("/")[1] for f in _files(p)) == [
        record_name(COMMITTED, 2), record_name(COMMITTED, 3), record_name(PREPARING, 3),
        record_name(PREPARING, 4)], "records below the older committed one are collected"
    # a record half written (a writer that died mid-PUT on a store without atomic writes)
    whole = log_record(FINAL, 4, None)
    torn = f"{p.root}/_log/{record_name(FINAL, 4)}"
    with p.location.filesystem.open_output_stream(torn) as f:
        f.write(whole[:len(whole) // 2])
    # (its name is the commit point: it stays committed, its manifest unknown)
    fresh = p.checkpoint_log()
    assert fresh.load() == (FINAL, 4, [3, 4])
    assert fresh.manifest(3) == {7: (3, 2)} and fresh.manifest(4) is None
    with p.location.filesystem.open_output_stream(torn) as f:
        f.write(MAGIC + b"\0" * 12)  # (a header, no payload)
    assert p.checkpoint_log().load() == (FINAL, 4, [3, 4])
    preparing = f"{p.root}/_log/{record_name(PREPARING, 5)}"
    with p.location.filesystem.open_output_stream(preparing) as f:
        f.write(MAGIC)  # (a torn record of another phase is skipped)
    assert p.checkpoint_log().load() == (FINAL, 4, [3, 4])
    p.delete()


def test_a_damaged_state_object_fails_its_check(uri):
    p = ObjectProvider(uri, "topo", "bad")
    store = p.task_store_at("count", 0, 0)
    store.restore(None)
    store.prepare(1, [(0, k("a"), k(1))], [])
    path = f"{p.root}/count/task-0/gen-00000000000000000000/delta-00000000000000000001"
    with p.location.filesystem.open_input_stream(path) as f:
        data = f.read()
    with p.location.filesystem.open_output_stream(path) as f:
        f.write(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptCheckpoint, match=r"checkpoint 1 at .*delta-0+1 is corrupt"):
        p.task_store_at("count", 0, 0).restore(1)
    p.close()
    p.delete()


def test_a_savepoint_seeds_the_task_directories_by_index(tmp_path):
    """A savepoint restored into a URI checkpoint directory lands in ``task-<index>``
    whatever the tasks' global ids, and the new submit's tasks restore it."""
    from actors.state.savepoints import Savepoint, seed_provider

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(["a"], fields=("word",)), 3)
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("src", ("word",))
    topology = b.create_topology()
    ids = topology.component_tasks["count"]
    sp = Savepoint("sp", "wc", 5, {"count": 2},
                   {"count": {0: {k("a"): k(1)}, 1: {k("b"): k(2)}}})
    p = ObjectProvider(f"file://{tmp_path}", "wc", "s")
    assert seed_provider(p, sp, topology, lambda c, t: None) == 5
    assert p.checkpoint_log().load() == (COMMITTED, 5, [5])
    assert ids != [0, 1] and {f.split("/")[1] for f in _files(p) if f.startswith("count/")} \
        == {"task-0", "task-1"}
    assert p.task_store_at("count", ids[1], 1).restore(5) == {k("b"): k(2)}
    assert p.read_raw() == {"count": {ids[0]: {k("a"): k(1)}, ids[1]: {k("b"): k(2)}}}
    p.close()


def test_a_uri_is_refused_with_credentials_masked_and_another_topologys_directory(tmp_path):
    with pytest.raises(StateDirError, match=r"s3://\*\*\*:\*\*\*@b/x: cannot be used: .*"
                                            r"carries credentials") as e:
        make_provider({"topology.state.checkpoint.dir": "s3://AKIAKEY:TOPSECRET@b/x"}, "t", "s")
    assert "TOPSECRET" not in str(e.value) and "AKIAKEY" not in str(e.value)
    uri = f"file://{tmp_path}"
    ObjectProvider(uri, "one", "s")
    os.rename(tmp_path / "one", tmp_path / "two")
    with pytest.raises(StateDirError, match="belongs to topology 'one'"):
        ObjectProvider(uri, "two", "s")


def test_the_multi_node_refusal_names_the_key_the_nodes_and_the_choices():
    reads = {"node-a": "token", "node-b": "token"}
    check_shared_dir("/tmp/ray/storm-on-ray-state", "token", reads)  # all see it
    with pytest.raises(TopologyError) as e:
        check_shared_dir("/tmp/ray/storm-on-ray-state", "token",
                         {"node-a": "token", "node-b": None, "node-c": "other"})
    msg = str(e.value)
    assert "topology.state.checkpoint.dir" in msg and "/tmp/ray/storm-on-ray-state" in msg
    assert "node-b" in msg and "node-c" in msg and "node-a" not in msg.split("see")[0]
    assert "s3://" in msg and "shared" in msg and "redis" in msg


# -- on Ray -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["s3", "file"])
def test_stateful_word_count_on_a_uri_is_exact_after_tasks_are_killed(cluster, name,
                                                                      tmp_path, scheme,
                                                                      request):
    """Two workers; a count task and a spout task killed mid-stream, checkpoints on
    ``s3://`` (moto) or ``file://``: the final state is a Counter of the input, and kill
    deletes the submit's objects."""
    if scheme == "s3":
        ckpt = request.getfixturevalue("s3").uri("checkpoints", f"wc-{name}")
    else:
        ckpt = f"file://{tmp_path}/ckpt"
    data = words(4000)
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(data, fields=("word",)), 2)
    b.set_bolt("count", StatefulWordCount(delay_s=0.0005), 2).fields_grouping("src",
                                                                              ("word",))
    conf = {"topology.workers": 2, "topology.acker.executors": 0,
            "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": ckpt,
            "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    provider = make_provider(conf, name, handle.prefix)
    try:
        tasks = handle.topology.component_tasks
        kill_mid_stream(handle, (tasks["count"][0], tasks["src"][1]))
        assert handle.wait(120), "the topology did not complete"
        stored = _files(provider)
        assert any(f.startswith("count/task-1/gen-") for f in stored), stored
        assert any(f.startswith("_log/committed-") for f in stored), stored
        assert merged_counts(handle.state()["count"]) == collections.Counter(data)
        assert handle.checkpoint_stats()["rollbacks"] >= 2
    finally:
        cluster.kill_topology(name)
    assert _files(provider) == [], "kill deletes the submit's objects"


def _committed_round(log, store, cid, changes: dict) -> None:
    """One round of ``store`` (task 7) committed with its manifest entry, as the
    coordinator records it."""
    log.record(PREPARING, cid)
    n = store.prepare(cid, [(0, k(x), k(v)) for x, v in changes.items()], [])
    log.record(COMMITTED, cid, {7: (cid, n)})


def _checked(p: ObjectProvider, index: int = 0) -> ManifestedStore:
    log = p.checkpoint_log()
    return ManifestedStore(p.task_store_at("count", 7, index),
                           lambda c: (log.manifest(c) or {}).get(7))


def _opened(tmp_path):
    """``(uri, provider, its log loaded, task 7's store at index 0)`` on ``file://``."""
    uri = f"file://{tmp_path}/ckpt"
    p = ObjectProvider(uri, "topo", "s1")
    log = p.checkpoint_log()
    log.load()
    return uri, p, log, p.task_store_at("count", 7, 0)


def test_a_zombie_delta_off_the_chain_is_never_read(tmp_path):
    uri, p, log, zombie = _opened(tmp_path)
    _committed_round(log, zombie, 1, {"x": 1, "y": 1})
    log.record(PREPARING, 2)  # (round 2 in flight: the zombie's node is cut off)
    new = ObjectProvider(uri, "topo", "s1").task_store_at("count", 7, 0)
    assert new.restore(1) == {k("x"): k(1), k("y"): k(1)}  # (rolled back to 1)
    zombie.prepare(2, [(0, k("x"), k("zombie"))], [])  # (lands after the rollback)
    _committed_round(log, new, 3, {"y": 2})
    expected = {k("x"): k(1), k("y"): k(2)}
    assert ObjectProvider(uri, "topo", "s1").read_raw(3)["count"][7] == expected
    assert _checked(ObjectProvider(uri, "topo", "s1")).restore(3) == expected


def test_a_task_whose_objects_are_gone_is_missing_state(tmp_path):
    uri, p, log, store = _opened(tmp_path)
    _committed_round(log, store, 1, {"a": 1})
    _committed_round(log, store, 2, {})  # (changed nothing: its manifest count is 0)
    store.close()
    p.location.filesystem.delete_dir(f"{p.root}/count")  # (not there on its new node)
    with pytest.raises(MissingState, match="task-0"):
        _checked(ObjectProvider(uri, "topo", "s1")).restore(2)


def test_state_objects_are_published_never_written_in_place(tmp_path, monkeypatch):
    from actors.state import _fs

    p = ObjectProvider(f"file://{tmp_path}/ckpt", "topo", "s1")
    store = p.task_store_at("count", 7, 0)

    def in_place(location, path, data):  # (a kill mid-write would tear it where it lies)
        assert "/." in path and path.endswith(".tmp"), f"{path} written in place"
        write_bytes(location, path, data)

    write_bytes = _fs.write_bytes
    monkeypatch.setattr(_fs, "write_bytes", in_place)
    for cid in range(1, MIN_CHAIN + 2):
        store.prepare(cid, [(0, k("a"), k("x" * 64 * cid))], [])
    store.collect(1)  # (compacts: a base)
    assert any(f.endswith("/base") for f in _files(p))


def test_the_working_copies_are_in_a_private_directory(tmp_path, monkeypatch):
    import stat
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.chmod(tmp_path, 0o700)
    p = ObjectProvider(f"file://{tmp_path}/ckpt", "topo", "s1")
    p.task_store_at("count", 7, 0).prepare(1, [(0, k("a"), k(1))], [])
    p.checkpoint_log().record(PREPARING, 1)
    for top, dirs, _ in os.walk(tmp_path):  # (the working copies', and the objects' too)
        for d in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(top, d)).st_mode) == 0o700, (top, d)


def test_a_torn_commit_record_stays_committed_and_records_are_synced(tmp_path, monkeypatch):
    p = ObjectProvider(f"file://{tmp_path}/ckpt", "topo", "s1")
    log = p.checkpoint_log()
    log.load()
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(
        f"/proc/self/fd/{fd}")), real(fd)))
    for cid in (1, 2, 3):
        log.record(PREPARING, cid)
        log.record(COMMITTED, cid, {7: (cid, 1)})
    assert f"{p.root}/_log" in synced and any(".tmp" in f for f in synced), synced
    open(f"{p.root}/_log/{record_name(COMMITTED, 3)}", "wb").close()  # (a power loss)
    assert p.checkpoint_log().load() == (COMMITTED, 3, [2, 3])  # (never 2, below it)


def test_the_multi_node_check_reads_the_path_the_provider_writes(tmp_path):
    (tmp_path / "a b").mkdir()
    p = ObjectProvider(f"file://{tmp_path}/a%20b/c", "topo", "s1")
    assert local_dir(f"file://{tmp_path}/a%20b/c") == p.location.base == f"{tmp_path}/a b/c"
    assert local_dir("relative/dir") == os.path.abspath("relative/dir")
    assert local_dir("s3://bucket/prefix") is None


def test_a_commit_record_stored_by_a_write_that_raised_is_committed(tmp_path, monkeypatch):
    from actors.state import _fs
    from actors.state._coordinator import CoordinatorCore

    p = ObjectProvider(f"file://{tmp_path}/ckpt", "topo", "s1")
    core = CoordinatorCore(p.checkpoint_log(), tasks=[7], spout_tasks=[7], interval_s=1,
                           timeout_s=10, min_pause_s=0, now=0, publishers=[7])
    publish = _fs.publish

    def stored_then_raised(location, path, *args, **kwargs):
        publish(location, path, *args, **kwargs)
        if f"/{COMMITTED}-" in path:
            raise OSError("timed out (the store applied it)")

    for now in (2, 4):
        core.tick(now)
        monkeypatch.setattr(_fs, "publish", stored_then_raised if now == 4 else publish)
        actions = core.prepared(7, core.round, core.gen, now, count=1)
    assert [a.kind for a in actions] == ["commit"] and core.committed == [1, 2]
    assert p.checkpoint_log().load()[2] == [1, 2]
