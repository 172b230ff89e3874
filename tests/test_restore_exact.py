"""A restore is exact or refused (issue 49), without Ray: keys equal in Python stored as
one; the commit manifest; savepoints that check what they restore; reads pinned against
collection."""

from __future__ import annotations

import datetime as dt
import decimal

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
