"""Checkpoints, savepoints and staged sink files only their owner can read or plant
(topology/_private.py; docs/security.md, item 1). Ray-free."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import zlib

import msgpack
import pytest

from actors.state._sqlite import LocalProvider
from actors.state._sqlite_format import StateDirError
from actors.state.savepoints import SavepointError, read_savepoint, write_savepoint
from topology import ParquetSink

NOBODY = 65534


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root) -> dict[str, int]:
    """Every path under ``root`` (itself included) → its permission bits."""
    out = {".": stat.S_IMODE(os.lstat(root).st_mode)}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def _assert_private(root) -> None:
    modes = _modes(root)
    wrong = {p: f"{m:04o}" for p, m in modes.items()
             if m != (0o700 if os.path.isdir(os.path.join(root, p)) else 0o600)}
    assert not wrong, wrong
    assert any(not os.path.isdir(os.path.join(root, p)) for p in modes)  # files were checked


def test_a_checkpoint_and_its_log_are_private_whatever_the_umask(tmp_path):
    with umask(0):
        provider = LocalProvider(str(tmp_path / "ckpt"), "topo", "s1")
        store = provider.task_store("count", 3)
        store.prepare(1, [(0, b"k", b"v")], [])
        provider.checkpoint_log().record("committed", 1, {3: (1, 1)})
        names = {os.path.basename(p) for p in _modes(tmp_path / "ckpt")}
        assert {"task-3.db", "task-3.db-wal", "_checkpoints.db"} <= names
        _assert_private(tmp_path / "ckpt")
        provider.close()


def test_a_savepoint_is_private_whatever_the_umask(tmp_path):
    with umask(0):
        write_savepoint(str(tmp_path / "sp"), "topo", 4, {"count": {3: {b"k": b"v"}}},
                        {"count": [3]}, {"key_groups": 1, "tasks": {"count": 1},
                                         "keyed": {}, "forward": []})
    _assert_private(tmp_path / "sp")
    assert read_savepoint(str(tmp_path / "sp")).entries == {"count": {0: {b"k": b"v"}}}


def test_a_staged_sink_file_is_private_and_the_committed_one_reads_as_its_dataset(tmp_path):
    from tests.test_sinks_exactly_once import Checkpoints

    path = str(tmp_path / "out")
    with umask(0):
        c = Checkpoints(lambda: ParquetSink(path, partition_by=("kind",)), path)
        c.write(range(6))
        c.snapshot(1)
        _assert_private(os.path.join(path, "_staging"))
        c.task.internal_commit(1)
    committed = [os.path.join(d, n) for d, _, ns in os.walk(path) if "_staging" not in d
                 for n in ns]
    dataset = stat.S_IMODE(os.stat(path).st_mode) & 0o666
    assert len(committed) == 3
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in committed} == {dataset}


def test_a_transaction_naming_files_outside_the_dataset_is_refused(tmp_path):
    from tests.test_sinks_exactly_once import Checkpoints
    from topology import TopologyError

    path, victim = str(tmp_path / "out"), tmp_path / "victim"
    victim.write_bytes(b"keep")
    c = Checkpoints(lambda: ParquetSink(path), path)
    with pytest.raises(TopologyError, match="outside"):
        c.task.sink.commit(1, {"files": [[str(victim), f"{path}/x.parquet"]]})
    with pytest.raises(TopologyError, match="outside"):
        c.task.sink.commit(1, {"files": [[f"{path}/_staging/../../victim", f"{path}/x"]]})
    assert victim.read_bytes() == b"keep"


@pytest.mark.parametrize("case", ["foreign owner", "world-writable", "group-writable",
                                  "planted topology dir", "under a shared parent"])
def test_a_checkpoint_dir_others_own_or_can_write_is_refused(tmp_path, case):
    if case in ("foreign owner", "planted topology dir") and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    d = tmp_path / "ckpt"
    d.mkdir(mode=0o700)
    named = d
    if case == "foreign owner":
        os.chown(d, NOBODY, NOBODY)
    elif case == "world-writable":
        d.chmod(0o777)
    elif case == "group-writable":
        d.chmod(0o770)
    elif case == "planted topology dir":
        (d / "topo").mkdir()
        os.chown(d / "topo", NOBODY, NOBODY)
        named = d / "topo"
    else:  # the configured directory is ours, its parent is writable by all, no sticky bit
        tmp_path.chmod(0o777)
        named = tmp_path
    with pytest.raises(StateDirError) as e:
        LocalProvider(str(d), "topo", "s1")
    assert f"{named} is " in str(e.value)
    assert "topology.state.checkpoint.dir" in str(e.value) and "0700" in str(e.value)
    assert not (d / "topo" / "s1").exists()  # nothing written into it


def test_a_shared_dir_with_the_sticky_bit_is_accepted_and_ours_stays_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    LocalProvider(str(shared / "mine"), "topo", "s1").close()
    assert stat.S_IMODE(os.stat(shared / "mine").st_mode) == 0o700


def test_a_component_with_a_path_separator_is_refused_by_the_savepoint_writer(tmp_path):
    layout = {"key_groups": 1, "tasks": {"a/../../x": 1}, "keyed": {}, "forward": []}
    with pytest.raises(SavepointError, match=r"component 'a/\.\./\.\./x' cannot name"):
        write_savepoint(str(tmp_path / "sp"), "topo", 1, {"a/../../x": {0: {b"k": b"v"}}},
                        {"a/../../x": [0]}, layout)
    assert not (tmp_path / "x").exists() and not os.listdir(tmp_path / "sp")


def _saved(where) -> str:
    sp = str(where / "sp")
    write_savepoint(sp, "topo", 1, {"c": {0: {b"k": b"v"}}}, {"c": [0]},
                    {"key_groups": 1, "tasks": {"c": 1}, "keyed": {}, "forward": []})
    return sp


def test_a_savepoint_read_refuses_what_is_not_a_file_and_a_planted_component(tmp_path):
    sp = _saved(tmp_path / "fifo")
    part = os.path.join(sp, "metadata.json")
    os.unlink(part)
    os.mkfifo(part)  # a read of it would block for ever
    opened = threading.Event()

    def writer():  # (unblocks an open that would otherwise hang the test)
        with contextlib.suppress(OSError):
            fd = os.open(part, os.O_WRONLY)
            opened.set()
            os.close(fd)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    with pytest.raises(SavepointError, match="not a regular file"):
        read_savepoint(sp)
    assert not opened.is_set()  # refused before opening it
    with contextlib.suppress(OSError):  # release the writer
        os.close(os.open(part, os.O_RDONLY | os.O_NONBLOCK))
    t.join(5)
    sp = _saved(tmp_path / "planted")
    meta = os.path.join(sp, "metadata.json")
    with open(meta) as f:
        text = f.read().replace('"c": 1', '"../../etc": 1', 1)
    with open(meta, "w") as f:
        f.write(text)
    with pytest.raises(SavepointError, match=r"component '\.\./\.\./etc' cannot name"):
        read_savepoint(sp)


def test_a_savepoint_read_bounds_what_a_header_claims_by_the_files_size(tmp_path):
    sp = _saved(tmp_path)
    part = os.path.join(sp, "state", "c", "0.msgpack")
    with open(part, "wb") as f:  # a bin of 4 GiB claimed in a 20-byte file
        f.write(msgpack.packb([[b"k", b"v"]])[:2] + b"\xc6\xff\xff\xff\xff" + b"x" * 13)
    meta = os.path.join(sp, "metadata.json")  # (a planter rewrites the listed CRC too)
    with open(meta) as f:
        doc = json.load(f)
    with open(part, "rb") as f:
        doc["files"]["c"]["0"][1] = zlib.crc32(f.read())
    with open(meta, "w") as f:
        json.dump(doc, f)
    with pytest.raises(SavepointError, match="unreadable"):
        read_savepoint(sp)


def test_private_writes_never_follow_a_symlink(tmp_path):
    from actors.state import _fs

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        _fs.write_bytes(_fs.resolve(str(tmp_path)), str(link), b"planted")
    assert victim.read_bytes() == b"keep"
