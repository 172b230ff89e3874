"""The state providers without Ray: versions, rollback, collection and key groups for the
memory and the local (SQLite) provider alike; the local one's durability, corruption check
and directory safety; ``make_provider``'s choices; the offline reader and the ``state``
command."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import logging
import os
import sqlite3

import pytest

from actors._codec import encode_value
from actors.state._provider import (
    COMMITTED,
    COMMITTING,
    PREPARING,
    CorruptCheckpoint,
    StateProvider,
)
from actors.state.providers import (
    MARKER,
    LocalProvider,
    MemoryProvider,
    StateDirError,
    committed_checkpoints,
    default_checkpoint_dir,
    make_provider,
    read_state,
)
from topology import ConfigError


def k(x) -> bytes:
    return encode_value(x)


@pytest.fixture(params=["memory", "local"])
def provider(request, tmp_path):
    p = (MemoryProvider("topo", "s1") if request.param == "memory"
         else LocalProvider(str(tmp_path), "topo", "s1"))
    yield p
    p.close()


def puts(*pairs, grp=0):
    return [(grp, k(key), k(value)) for key, value in pairs]


def test_restore_is_the_latest_version_at_or_below_the_id(provider):
    s = provider.task_store("count", 0)
    assert s.restore(None) == {}
    s.prepare(1, puts(("a", 1), ("b", 1)), [])
    s.prepare(2, puts(("a", 2)), [])
    s.prepare(3, puts(("c", 3)), [(0, k("b"))])
    assert s.restore(3) == {k("a"): k(2), k("c"): k(3)}
    # restoring 1 discards 2 and 3: restoring 3 afterwards finds only 1's state
    assert s.restore(1) == {k("a"): k(1), k("b"): k(1)}
    assert s.restore(3) == {k("a"): k(1), k("b"): k(1)}
    # a new round after the rollback reuses the ids
    s.prepare(2, puts(("b", 20)), [])
    assert s.restore(2) == {k("a"): k(1), k("b"): k(20)}
    assert s.restore(None) == {}
    assert s.restore(2) == {}


def test_a_delete_hides_the_key_until_put_again(provider):
    s = provider.task_store("count", 0)
    s.prepare(1, puts(("a", 1)), [])
    s.prepare(2, [], [(0, k("a"))])
    s.prepare(3, puts(("a", 3)), [])
    assert s.restore(2) == {}
    s.prepare(3, puts(("a", 3)), [])
    assert s.restore(3) == {k("a"): k(3)}
    assert s.restore(1) == {k("a"): k(1)}


def test_preparing_an_id_again_replaces_what_it_held(provider):
    s = provider.task_store("count", 0)
    s.prepare(1, puts(("a", 1)), [])
    s.prepare(2, puts(("a", 2), ("b", 2)), [])
    s.prepare(2, puts(("c", 2)), [])
    assert s.restore(2) == {k("a"): k(1), k("c"): k(2)}
    # a key put twice keeps its last value; put and deleted in one round, deleted
    s.prepare(3, puts(("d", 1), ("d", 2), ("e", 1)), [(0, k("e"))])
    assert s.restore(3) == {k("a"): k(1), k("c"): k(2), k("d"): k(2)}


def test_restore_takes_only_the_asked_key_groups(provider):
    s = provider.task_store("count", 0)
    s.prepare(1, [(g, k(f"key{g}"), k(g)) for g in range(8)], [])
    s.prepare(2, [(3, k("key3"), k(33))], [(5, k("key5"))])
    assert s.restore(2, range(2, 6)) == {k("key2"): k(2), k("key3"): k(33), k("key4"): k(4)}
    assert s.restore(2, range(0, 8, 7)) == {k("key0"): k(0), k("key7"): k(7)}
    assert len(s.restore(2)) == 7


def test_collect_keeps_exactly_what_later_restores_need(provider):
    s = provider.task_store("count", 0)
    s.prepare(1, puts(("a", 1), ("b", 1), ("c", 1), ("gone", 1)), [])
    s.prepare(2, puts(("a", 2)), [(0, k("gone"))])
    s.prepare(3, puts(("b", 3)), [(0, k("c"))])
    s.prepare(4, puts(("a", 4), ("c", 4)), [(0, k("b"))])
    s.prepare(5, puts(("e", 5)), [])
    before = {i: s.restore(i) for i in (5, 4, 3)}  # highest first: restore discards above
    # restore(3) dropped 4 and 5; write them again
    s.prepare(4, puts(("a", 4), ("c", 4)), [(0, k("b"))])
    s.prepare(5, puts(("e", 5)), [])
    s.collect(3)
    assert {i: s.restore(i) for i in (5, 4, 3)} == before
    with pytest.raises(CorruptCheckpoint, match="collected"):
        s.restore(2)
    if isinstance(provider, LocalProvider):
        con = sqlite3.connect(s.path)
        base = con.execute("SELECT key, value FROM base ORDER BY key").fetchall()
        delta = con.execute("SELECT version, key, value IS NULL FROM delta "
                            "ORDER BY version, key").fetchall()
        versions = [v for (v,) in con.execute("SELECT version FROM versions")]
        meta = con.execute("SELECT name, value FROM meta").fetchall()
        con.close()
        # base is the state at 3; 3's own rows (b put, c deleted) stay as its record; the
        # deltas of 1 and 2 are folded in; nothing above 3 is left after the restore(3)
        assert base == [(k("a"), k(2)), (k("b"), k(3))]
        assert delta == [(3, k("b"), 0), (3, k("c"), 1)]
        assert versions == [3] and meta == [("base", 3)]


@pytest.mark.parametrize("seed", range(5))
def test_collect_changes_no_restore_at_or_above_keep_from(tmp_path, seed):
    """Random rounds of puts and deletes into two stores; one is collected at each id in
    turn; every restore at or above that id, highest first, is the same in both."""
    import random

    rnd = random.Random(seed)
    for kind in ("memory", "local"):
        stores = []
        for name in ("plain", "collected"):
            p = (MemoryProvider() if kind == "memory"
                 else LocalProvider(str(tmp_path / kind), "topo", name))
            stores.append(p.task_store("count", 0))
        plain, collected = stores
        for ver in range(1, 13):
            keys = rnd.sample(range(10), rnd.randint(0, 6))
            cut = rnd.randint(0, len(keys))
            ps = [(x % 3, k(x), k(rnd.random())) for x in keys[:cut]]
            ds = [(x % 3, k(x)) for x in keys[cut:]]
            for store in stores:
                store.prepare(ver, ps, ds)
            if ver >= 4:
                collected.collect(ver - 3)
        for ver in range(12, 8, -1):
            assert collected.restore(ver) == plain.restore(ver), (kind, ver)
            assert collected.restore(ver, range(1, 3)) == plain.restore(ver, range(1, 3))


def test_collect_drops_superseded_versions_and_old_tombstones(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 0)
    s.prepare(1, puts(("a", 1), ("b", 1)), [])
    s.prepare(2, puts(("a", 2)), [(0, k("b"))])
    s.prepare(3, puts(("a", 3)), [])
    s.prepare(4, puts(("c", 4)), [])
    s.collect(4)
    con = sqlite3.connect(s.path)
    assert con.execute("SELECT key, value FROM base ORDER BY key").fetchall() == [
        (k("a"), k(3)), (k("c"), k(4))]
    assert con.execute("SELECT DISTINCT version FROM delta").fetchall() == [(4,)]
    con.close()
    assert s.restore(4) == {k("a"): k(3), k("c"): k(4)}
    p.close()


def test_local_base_checkpoint_is_still_checked_and_not_written_again(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 0)
    s.prepare(1, puts(("a", 1), ("b", 1)), [])
    s.prepare(2, puts(("a", 2)), [(0, k("b"))])
    s.prepare(3, puts(("c", 3)), [])
    s.collect(2)
    s.collect(1)  # below the base: nothing to do
    with pytest.raises(ValueError, match="collected"):
        s.prepare(2, puts(("a", 5)), [])
    assert s.restore(3) == {k("a"): k(2), k("c"): k(3)}
    con = sqlite3.connect(s.path)
    con.execute("UPDATE versions SET crc = crc + 1 WHERE version = 2")
    con.commit()
    con.close()
    with pytest.raises(CorruptCheckpoint, match="CRC-32"):
        s.restore(2)
    assert s.restore(3) == {k("a"): k(2), k("c"): k(3)}  # 3 is not part of the damage
    p.close()


def test_local_database_of_the_rows_layout_is_refused(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    path = tmp_path / "topo" / "s1" / "count" / "task-0.db"
    path.parent.mkdir()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version=1")
    con.close()
    with pytest.raises(StateDirError, match="older storm-on-ray"):
        p.task_store("count", 0)
    p.close()


def test_checkpoint_log_phases_and_last_two_committed(provider):
    log_ = provider.checkpoint_log()
    assert log_.load() == (COMMITTED, 0, [])
    for i in (1, 2, 3):
        log_.record(PREPARING, i)
        log_.record(COMMITTING, i)
        log_.record(COMMITTED, i)
    log_.record(PREPARING, 4)
    assert log_.load() == (PREPARING, 4, [2, 3])
    with pytest.raises(ValueError, match="phase"):
        log_.record("done", 5)


def test_memory_provider_keeps_stores_per_object_only():
    a, b = MemoryProvider("topo", "s1"), MemoryProvider("topo", "s1")
    a.task_store("count", 0).prepare(1, puts(("x", 1)), [])
    assert a.task_store("count", 0).restore(1) == {k("x"): k(1)}
    assert b.task_store("count", 0).restore(1) == {}
    a.delete()
    assert a.task_store("count", 0).restore(1) == {}


# -- local provider ---------------------------------------------------------------------


def test_local_state_survives_closing_and_a_new_provider(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 2)
    s.prepare(1, puts(("a", 1)), [])
    s.prepare(2, puts(("a", 2)), [])
    p.checkpoint_log().record(COMMITTED, 1)
    p.checkpoint_log().record(PREPARING, 2)
    del s, p  # no close: as if the process died
    q = LocalProvider(str(tmp_path), "topo", "s1")
    assert os.path.isfile(tmp_path / "topo" / "s1" / "count" / "task-2.db")
    assert q.checkpoint_log().load() == (PREPARING, 2, [1])
    assert q.task_store("count", 2).restore(1) == {k("a"): k(1)}
    q.close()


def test_a_component_id_with_a_slash_stays_one_directory(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    p.task_store("parse/1", 0).prepare(1, puts(("a", 1)), [])
    p.task_store("_checkpoints.db", 0).prepare(1, puts(("b", 1)), [])
    p.checkpoint_log().record(COMMITTED, 1)
    p.close()
    root = tmp_path / "topo" / "s1"
    assert sorted(os.listdir(root)) == ["%5Fcheckpoints.db", "_checkpoints.db", "parse%2F1"]
    assert read_state(str(root)) == {"parse/1": {0: {"a": 1}}, "_checkpoints.db": {0: {"b": 1}}}


@pytest.mark.parametrize("damage", ["crc", "value", "count"])
def test_local_restore_detects_a_corrupt_checkpoint(tmp_path, damage):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 0)
    s.prepare(1, puts(("a", 1), ("b", 1)), [])
    s.prepare(2, puts(("a", 2), ("b", 2)), [])
    s.close()
    con = sqlite3.connect(s.path)
    con.execute({"crc": "UPDATE versions SET crc = crc + 1 WHERE version = 2",
                 "value": "UPDATE delta SET value = X'07' WHERE version = 2 AND key = X'A161'",
                 "count": "DELETE FROM delta WHERE version = 2 AND key = X'A162'"}[damage])
    con.commit()
    con.close()
    s = p.task_store("count", 0)
    with pytest.raises(CorruptCheckpoint) as e:
        s.restore(2)
    assert e.value.path == s.path and e.value.checkpoint_id == 2 and s.path in str(e.value)
    assert s.restore(1) == {k("a"): k(1), k("b"): k(1)}  # the one before still restores
    p.close()


def test_damaged_database_pages_are_a_corrupt_checkpoint(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 0)
    s.prepare(1, puts(*((f"key{i}", "v" * 50) for i in range(500))), [])
    p.checkpoint_log().record(COMMITTED, 1)
    p.close()
    size = os.path.getsize(s.path)
    with open(s.path, "r+b") as f:  # the header page stays, the data pages do not
        for offset in range(4096, size, 4096):
            f.seek(offset + 100)
            f.write(b"\xff" * 200)
    with pytest.raises(CorruptCheckpoint, match="malformed"):
        read_state(str(tmp_path / "topo" / "s1"))
    with pytest.raises(CorruptCheckpoint, match="malformed"):
        LocalProvider(str(tmp_path), "topo", "s1").task_store("count", 0).restore(1)


def test_unwritable_directory_is_refused_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateDirError, match="cannot be created") as e:
        LocalProvider(str(blocker / "state"), "topo", "s1")
    assert str(blocker / "state") in str(e.value) and isinstance(e.value, ValueError)
    if os.geteuid() != 0:  # root writes through permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        os.chmod(ro, 0o500)
        try:
            with pytest.raises(StateDirError, match=str(ro)):
                LocalProvider(str(ro), "topo", "s1")
        finally:
            os.chmod(ro, 0o700)


def test_another_topologys_directory_is_refused(tmp_path):
    LocalProvider(str(tmp_path), "topo", "s1").close()
    assert (tmp_path / "topo" / MARKER).read_text() == "topo\n"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / MARKER).write_text("someone-else\n")
    with pytest.raises(StateDirError, match="someone-else") as e:
        LocalProvider(str(tmp_path), "other", "s1")
    assert str(tmp_path / "other") in str(e.value)
    LocalProvider(str(tmp_path), "topo", "s2").close()  # the same topology: fine


@pytest.mark.parametrize("topology,submit", [("a/b", "s"), ("..", "s"), ("a..b", "s"),
                                             ("", "s"), ("t", "../x"), ("t", ".")])
def test_names_that_would_leave_the_directory_are_refused(tmp_path, topology, submit):
    with pytest.raises(StateDirError, match="cannot name a directory"):
        LocalProvider(str(tmp_path), topology, submit)
    assert os.listdir(tmp_path) == []


def test_delete_removes_the_submit_then_the_empty_topology_dir(tmp_path):
    p1 = LocalProvider(str(tmp_path), "topo", "s1")
    p2 = LocalProvider(str(tmp_path), "topo", "s2")
    p1.task_store("count", 0).prepare(1, puts(("a", 1)), [])
    p2.checkpoint_log()
    p1.delete()
    assert sorted(os.listdir(tmp_path / "topo")) == [MARKER, "s2"]
    p2.delete()
    assert os.listdir(tmp_path) == []


# -- make_provider ----------------------------------------------------------------------


class _Custom(StateProvider):
    def __init__(self, topology_name, submit_id, config):
        self.args = (topology_name, submit_id, config)

    def task_store(self, component, task):
        raise NotImplementedError

    def checkpoint_log(self):
        raise NotImplementedError

    def delete(self):
        pass


class _NotAProvider:
    def __init__(self, *args):
        pass


def test_make_provider_choices(tmp_path):
    d = {"topology.state.checkpoint.dir": str(tmp_path)}
    local = make_provider({**d, "topology.state.provider": None}, "topo", "s1")
    assert isinstance(local, LocalProvider) and local.root == str(tmp_path / "topo" / "s1")
    local.close()
    assert isinstance(make_provider({**d, "topology.state.provider": "local"}, "t", "s"),
                      LocalProvider)
    assert isinstance(make_provider({"topology.state.provider": "memory"}, "t", "s"),
                      MemoryProvider)
    for path in (f"{__name__}:_Custom", f"{__name__}._Custom"):
        custom = make_provider({"topology.state.provider": path,
                                "topology.state.provider.config": '{"host": "h", "port": 1}'},
                               "topo", "s1")
        assert custom.args == ("topo", "s1", {"host": "h", "port": 1})
    custom = make_provider({"topology.state.provider": f"{__name__}:_Custom",
                            "topology.state.provider.config": {"x": 1}}, "topo", "s1")
    assert custom.args[2] == {"x": 1}
    assert make_provider({"topology.state.provider": f"{__name__}:_Custom"},
                         "t", "s").args[2] == {}


@pytest.mark.parametrize("conf,match", [
    ({"topology.state.provider": "cassandra"}, r"topology\.state\.provider.*\"local\""),
    ({"topology.state.provider": f"{__name__}:_NotAProvider"}, "not a StateProvider"),
    ({"topology.state.provider": "no_such_module:Thing"}, "cannot load"),
    ({"topology.state.provider": f"{__name__}:Missing"}, "cannot load"),
    ({"topology.state.provider": "memory", "topology.state.provider.config": "{bad"},
     r"topology\.state\.provider\.config: not a JSON object"),
    ({"topology.state.provider": "memory", "topology.state.provider.config": "[1]"},
     r"topology\.state\.provider\.config must be a dict"),
])
def test_make_provider_refuses_with_the_key(conf, match):
    with pytest.raises(ConfigError, match=match):
        make_provider(conf, "topo", "s1")


def test_default_checkpoint_dir_is_per_user_outside_rays_temp_dir():
    import tempfile

    assert default_checkpoint_dir() == os.path.join(tempfile.gettempdir(),
                                                    f"storm-on-ray-state-{os.geteuid()}")


# -- read_state and the CLI ------------------------------------------------------------------

WHEN = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc)


def _written(tmp_path):
    """A submit with checkpoints 1, 2 committed and 3 prepared but not committed."""
    p = LocalProvider(str(tmp_path), "topo", "s1")
    log_ = p.checkpoint_log()
    count = p.task_store("count", 0)
    count.prepare(1, puts((("the", 1), 3), ("cat", 1)), [])
    count.prepare(2, puts((("the", 1), 5)), [(0, k("cat"))])
    count.prepare(3, puts((("the", 1), 99)), [])
    p.task_store("count", 1).prepare(1, puts((7, decimal.Decimal("1.5"))), [])
    p.task_store("count", 1).prepare(2, [], [])
    when = p.task_store("when", 0)
    when.prepare(1, puts(("first", WHEN)), [])
    when.prepare(2, puts(("last", WHEN.date())), [])
    for i in (1, 2):
        log_.record(COMMITTED, i)
    log_.record(PREPARING, 3)
    p.close()
    return tmp_path / "topo" / "s1"


def _files(root):
    return {os.path.relpath(os.path.join(d, f), root):
            hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
            for d, _, fs in os.walk(root) for f in fs}


def test_read_state_decodes_the_committed_checkpoint_and_changes_nothing(tmp_path):
    root = _written(tmp_path)
    before = _files(root)
    state = read_state(str(root))
    assert state == {"count": {0: {("the", 1): 5}, 1: {7: decimal.Decimal("1.5")}},
                     "when": {0: {"first": WHEN, "last": WHEN.date()}}}
    assert state.checkpoint_id == 2
    assert read_state(str(root), 1)["count"][0] == {("the", 1): 3, "cat": 1}
    assert read_state(str(root / "count"), 3) == {0: {("the", 1): 99},
                                                  1: {7: decimal.Decimal("1.5")}}
    assert committed_checkpoints(str(root)) == [1, 2]
    assert _files(root) == before  # no side files, no change; 3 is still there
    assert LocalProvider(str(tmp_path), "topo", "s1").task_store("count", 0).restore(3) == {
        k(("the", 1)): k(99)}


def test_read_state_beside_a_writer_sees_the_committed_checkpoint(tmp_path):
    root = _written(tmp_path)
    p = LocalProvider(str(tmp_path), "topo", "s1")
    s = p.task_store("count", 0)  # an open writer: reads go through SQLite's locks
    s.prepare(4, puts((("the", 1), 7)), [])
    assert read_state(str(root))["count"][0] == {("the", 1): 5}
    assert read_state(str(root), 4)["count"][0] == {("the", 1): 7}
    p.close()


def test_read_state_falls_back_from_a_corrupt_checkpoint(tmp_path, caplog):
    root = _written(tmp_path)
    con = sqlite3.connect(root / "when" / "task-0.db")
    con.execute("UPDATE versions SET crc = crc + 1 WHERE version = 2")
    con.commit()
    con.close()
    with caplog.at_level(logging.WARNING, logger="actors.state.providers"):
        state = read_state(str(root))
    assert state.checkpoint_id == 1 and state["when"] == {0: {"first": WHEN}}
    assert "checkpoint 2" in caplog.text and "task-0.db" in caplog.text
    with pytest.raises(CorruptCheckpoint):
        read_state(str(root), 2)


def test_read_state_of_no_checkpoint_and_of_a_wrong_path(tmp_path):
    p = LocalProvider(str(tmp_path), "topo", "s1")
    p.checkpoint_log()
    p.task_store("count", 0).prepare(1, puts(("a", 1)), [])
    p.close()
    state = read_state(str(tmp_path / "topo" / "s1"))
    assert state == {"count": {0: {}}} and state.checkpoint_id is None
    with pytest.raises(FileNotFoundError, match="state directory"):
        read_state(str(tmp_path))


def test_cli_state_prints_the_state(tmp_path, capsys):
    from cluster._cli import main

    root = _written(tmp_path)
    assert main(["state", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"checkpoint 2: {root}"
    assert out[1:] == ["count task 0: 1 keys", "  ('the', 1) = 5",
                       "count task 1: 1 keys", "  7 = Decimal('1.5')",
                       "when task 0: 2 keys", f"  first = {WHEN!r}",
                       f"  last = {WHEN.date()!r}"]
    assert main(["state", str(root / "count"), "--checkpoint", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == ["count task 0: 2 keys", "  ('the', 1) = 3", "  cat = 1"]
    assert main(["state", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"checkpoint": 2, "state": {
        "count": {"0": {"('the', 1)": 5}, "1": {"7": "1.5"}},
        "when": {"0": {"first": WHEN.isoformat(), "last": WHEN.date().isoformat()}}}}
    assert main(["state", str(tmp_path / "nowhere")]) == 1
    assert "nowhere" in capsys.readouterr().err
