"""A restore is exact or refused (issue 49), without Ray: keys equal in Python stored as
one; the commit manifest; savepoints that check what they restore; reads pinned against
collection."""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pytest

from actors._codec import decode_key, value_encoder
from actors.state.providers import LocalProvider
from topology import KeyValueState
from topology._state import StateError


def _checkpoint(state: KeyValueState, store, cid: int) -> None:
    """What a task's snapshot and write do: the changes, keys encoded, prepared as cid."""
    enc = value_encoder()
    puts, deletes = state.take_changes()
    store.prepare(cid, [(0, enc(k), v) for k, v in puts], [(0, enc(k)) for k in deletes])


def _restored(store, cid: int) -> KeyValueState:
    state = KeyValueState()
    state.replace({decode_key(k): v for k, v in store.restore(cid).items()})
    return state


_UTC = dt.timezone.utc
_PLUS2 = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize("first, later", [
    (1, 1.0), (1.0, True), (True, decimal.Decimal("1.0")), (decimal.Decimal("1.0"), 1),
    (("a", 1), ("a", 1.0)), (1, decimal.Decimal("1.00")),
    (dt.datetime(2024, 1, 1, 12, tzinfo=_UTC), dt.datetime(2024, 1, 1, 14, tzinfo=_PLUS2)),
])
def test_keys_equal_in_python_are_one_stored_key(tmp_path, first, later):
    # the later equal key's value wins after collection, and its delete deletes the key
    p = LocalProvider(str(tmp_path), "t", "s")
    store = p.task_store("count", 1)
    state = KeyValueState()
    state.put(first, "old")
    _checkpoint(state, store, 1)
    state.put(later, "new")
    _checkpoint(state, store, 2)
    store.collect(2)
    assert _restored(store, 2).get(first) == "new"
    assert len(store.restore(2)) == 1  # one row
    state.delete(later)
    _checkpoint(state, store, 3)
    store.collect(3)
    assert len(_restored(store, 3)) == 0
    # a key deleted and put again in one checkpoint in another form: still one row
    state.put(first, "a")
    _checkpoint(state, store, 4)
    state.delete(first)
    state.put(later, "b")
    _checkpoint(state, store, 5)
    store.collect(5)
    assert list(_restored(store, 5).items()) == [(first, "b")]
    p.close()


@pytest.mark.parametrize("key", [float("nan"), decimal.Decimal("NaN"), ("a", float("nan"))])
def test_a_nan_key_is_refused_at_put_naming_it(key):
    state = KeyValueState(component="count", task=3)
    with pytest.raises(StateError, match=r"(?i)count.*task 3.*nan.*a NaN"):
        state.put(key, 1)
    assert len(state) == 0


# -- savepoints that check what they restore (format 2) ----------------------------------

def _wc(count_tasks=2, src_tasks=2, key=("word",), chain=False):
    from tests.components import StatefulWordCount
    from topology import IterableSpout, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([("a", 1)], ("word", "id")), src_tasks)
    d = b.set_bolt("count", StatefulWordCount(), count_tasks)
    if chain:
        d.local_or_shuffle_grouping("src")
    else:
        d.fields_grouping("src", key)
    topo = b.create_topology()
    return topo.with_chains(["count"]) if chain and src_tasks == count_tasks else topo


def _savepoint(tmp_path, topo, conf):
    from actors.state.savepoints import describe, read_savepoint, write_savepoint

    tasks = {c: list(t) for c, t in topo.component_tasks.items()}
    state = {"count": {t: {} for t in tasks["count"]}}
    return read_savepoint(write_savepoint(str(tmp_path / "sp"), "wc", 7, state, tasks,
                                          describe(topo, conf)))


def test_a_savepoint_under_another_key_group_count_or_key_is_refused_naming_both(tmp_path):
    from actors.state.savepoints import SavepointError, check_restore

    sp = _savepoint(tmp_path, _wc(), {"topology.max.task.parallelism": 16})
    assert sp.format_version == 2 and sp.layout["key_groups"] == 16
    check_restore(sp, _wc(), conf={"topology.max.task.parallelism": 16})
    with pytest.raises(SavepointError, match=r"component 'count': savepoint has 16 key "
                       r"groups, topology.max.task.parallelism is 32; restore with 16"):
        check_restore(sp, _wc(), conf={"topology.max.task.parallelism": 32})
    with pytest.raises(SavepointError, match=r"'count'.*\['word'\].*\['id'\]"):
        check_restore(sp, _wc(key=("id",)), conf={"topology.max.task.parallelism": 16})


def test_a_forward_peer_whose_task_count_changed_is_refused(tmp_path):
    from actors.state.savepoints import SavepointError, check_restore

    sp = _savepoint(tmp_path, _wc(chain=True), {})
    check_restore(sp, _wc(chain=True))
    with pytest.raises(SavepointError, match=r"component 'src': savepoint has 2 tasks, "
                       r"this topology has 3.*'src' -> 'count'.*restore with 2"):
        check_restore(sp, _wc(src_tasks=3, chain=True))


def test_a_format_1_savepoint_restores_at_the_same_counts_with_a_warning(tmp_path, caplog):
    import json
    import os

    from actors.state.savepoints import SavepointError, check_restore, read_savepoint

    sp = _savepoint(tmp_path, _wc(), {})
    meta = os.path.join(sp.path, "metadata.json")
    with open(meta) as f:
        m = json.load(f)
    for k in ("key_groups", "tasks", "keyed", "forward"):
        del m[k]
    m["format_version"] = 1
    with open(meta, "w") as f:
        json.dump(m, f)
    sp = read_savepoint(sp.path)
    with caplog.at_level("WARNING"):
        check_restore(sp, _wc(), conf={"topology.max.task.parallelism": 32})
    assert "format 1" in caplog.text and "key-group count" in caplog.text
    with pytest.raises(SavepointError, match="had 2 tasks"):
        check_restore(sp, _wc(count_tasks=3))


def test_restore_from_with_the_memory_provider_is_refused(tmp_path):
    from actors.state.savepoints import SavepointError
    from cluster._submit import submit

    sp = _savepoint(tmp_path, _wc(), {})
    with pytest.raises(SavepointError, match="memory.*ignore the savepoint"):
        submit("wc", {"topology.state.provider": "memory"}, _wc(), restore_from=sp.path)


# -- state pinned against collection -----------------------------------------------------

def _commit(store, log_, cid: int) -> None:
    """A round as a task and the coordinator make it: prepare, commit, then the task's
    collection up to the committed checkpoint before this one."""
    from actors._codec import encode_value
    from actors.state._provider import COMMITTED

    store.prepare(cid, [(0, encode_value("a"), encode_value(cid))], [])
    log_.record(COMMITTED, cid)
    committed = log_.load()[2]
    if len(committed) > 1:
        store.collect(committed[-2])


def test_a_read_racing_two_commits_reads_the_checkpoint_it_pinned(tmp_path, monkeypatch):
    from actors._codec import encode_value
    from actors.state import _sqlite_reader as providers

    p = LocalProvider(str(tmp_path), "t", "s")
    store, log_ = p.task_store("count", 1), p.checkpoint_log()
    for cid in (1, 2):
        _commit(store, log_, cid)
    read_at = providers._read_at

    def racing(files, cid):  # two commits between the log's read and the stores'
        monkeypatch.setattr(providers, "_read_at", read_at)
        for c in (3, 4):
            _commit(store, log_, c)
        return read_at(files, cid)

    monkeypatch.setattr(providers, "_read_at", racing)
    snap = providers.read_raw(p.root)
    assert snap.checkpoint_id == 2
    assert snap["count"][1] == {encode_value("a"): encode_value(2)}
    from actors.state._pins import lowest_pin_local

    assert lowest_pin_local(p.root) is None  # released: collection goes on
    _commit(store, log_, 5)
    with pytest.raises(Exception, match="collected"):
        store.restore(2)
    p.close()


# -- the commit manifest -----------------------------------------------------------------

def _rounds(provider, publishers=()):
    """Two committed rounds of tasks 1 and 2 (stateful, stores of ``provider``) through
    the coordinator, each task reporting its store's entry count; task 2 ends after the
    first. Returns the coordinator and the stores."""
    from actors._codec import encode_value
    from actors.state import CoordinatorCore

    log_ = provider.checkpoint_log()
    c = CoordinatorCore(log_, [1, 2], [1], 1.0, 5.0, 0.0, 0.0, publishers=publishers)
    stores = {t: provider.task_store("count", t) for t in (1, 2)}
    for cid, tasks in ((1, (1, 2)), (2, (1,))):
        c.tick(float(cid))
        for t in tasks:
            n = stores[t].prepare(cid, [(0, encode_value(f"k{t}"), encode_value(cid)),
                                        (0, encode_value("x"), encode_value(t))], [])
            c.prepared(t, cid, c.gen, float(cid), count=n)
        if cid == 1:
            c.ended(2, 1.5)
    assert c.last_committed == 2
    return c, stores


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_the_commit_manifest_names_each_tasks_latest_checkpoint_and_count(tmp_path, kind):
    from actors.state.providers import MemoryProvider

    p = LocalProvider(str(tmp_path), "t", "s") if kind == "local" else MemoryProvider()
    c, _ = _rounds(p)
    # task 2 ended after checkpoint 1: it prepared nothing for 2 and its entry stays
    assert p.checkpoint_log().manifest(2) == {1: (2, 2), 2: (1, 2)}
    assert p.checkpoint_log().manifest(1) == {1: (1, 2), 2: (1, 2)}


def _lose_checkpoint_2(p, task: int) -> None:
    """An OS crash under synchronous=NORMAL: the task's last commit (checkpoint 2) undone."""
    import sqlite3

    con = sqlite3.connect(os.path.join(p.root, "count", f"task-{task}.db"))
    with con:
        con.execute("DELETE FROM delta WHERE version = 2")
        con.execute("DELETE FROM versions WHERE version = 2")
    con.close()


@pytest.mark.parametrize("publishers", [(), (9,)], ids=["no sink", "a published sink"])
def test_a_store_missing_what_the_manifest_names_is_corrupt_never_empty(tmp_path,
                                                                        publishers):
    """Before, task 1's store without checkpoint 2 restored checkpoint 1's state as 2's
    (a store with no record and no entries for it 'wrote nothing'). Now its restore is a
    corrupt checkpoint naming the store; the coordinator falls back to 1 only when no
    two-phase-commit sink may have published 2, and otherwise fails naming task,
    checkpoint and path."""
    from actors.state._manifest import ManifestedStore
    from actors.state._provider import CorruptCheckpoint

    p = LocalProvider(str(tmp_path), "t", "s")
    c, stores = _rounds(p, publishers)
    log_ = p.checkpoint_log()
    named = lambda t: (lambda cid: (log_.manifest(cid) or {}).get(t))  # noqa: E731
    for t in (1, 2):
        stores[t].close()
    _lose_checkpoint_2(p, 1)
    s2 = ManifestedStore(p.task_store("count", 2), named(2))
    assert len(s2.restore(2)) == 2  # (ended at 1: still valid for 2)
    s1 = ManifestedStore(p.task_store("count", 1), named(1))
    path = os.path.join(p.root, "count", "task-1.db")
    with pytest.raises(CorruptCheckpoint, match="checkpoint 2 at .*task-1.db.*no record"):
        s1.restore(2)
    try:
        s1.restore(2)
    except CorruptCheckpoint as e:
        actions = c.corrupt(1, e.checkpoint_id, 3.0, str(e))
    if publishers:
        assert actions == [] and c.failure is not None
        assert "task 1" in c.failure and "checkpoint 2" in c.failure and path in c.failure
        assert "published" in c.failure
    else:
        (rollback,) = actions
        assert rollback.args[1] == 1 and c.failure is None
        assert len(s1.restore(1)) == 2  # checkpoint 1 is whole
    p.close()
