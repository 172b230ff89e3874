"""Checkpointed state: Storm's ``StatefulBolt`` and ``KeyValueState``, in snake_case.

A stateful component keeps what it must not lose in a :class:`KeyValueState` instead of
Python attributes. The runtime snapshots it at each checkpoint (barriers in line with the
data and aligned, as in Flink: Carbone et al., "Lightweight Asynchronous Snapshots for
Distributed Dataflows", 2015), and after a failure restores every task to the last
committed checkpoint, so the state counts each input exactly once (docs/state.md gives the
guarantee per source and acking setting).

Storm's protocol (``StatefulBoltExecutor``, Storm's docs "State Checkpointing"): ``init_state``
once after ``prepare`` with the task's restored state, before any ``execute``; then, per
checkpoint, ``pre_prepare(id)`` before the snapshot and ``pre_commit(id)`` when the round
commits; ``pre_rollback()`` before a rollback replaces the state's contents with the last
committed checkpoint's.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Callable, Iterator
from typing import Any

from topology._components import Bolt, Spout

#: the scalar types a state key may be made of (or tuples of them)
KEY_TYPES = (str, int, float, bool, type(None), bytes, _dt.datetime, _dt.date,
             decimal.Decimal)


class StateError(ValueError):
    """A state key or value the state cannot keep, or a key outside the task's key
    groups; the message names the component, task and key."""


def _codec() -> tuple[Callable, Callable]:
    from actors._codec import decode_value, value_encoder  # the project's one codec
    return value_encoder(), decode_value


def _check_key(key: Any) -> None:
    if isinstance(key, tuple):
        if all(isinstance(k, KEY_TYPES) for k in key):
            return
    elif isinstance(key, KEY_TYPES):
        return
    raise TypeError(f"state keys are str, int, float, bool, None, bytes, datetime, date, "
                    f"Decimal or tuples of these, not {type(key).__name__}")


def _plain(key: Any) -> bool:
    """``key`` is a str or an int (exactly), or a tuple of them: a key that no key of
    another encoding equals (``1 == 1.0 == True == Decimal(1)``, and aware datetimes of one
    instant at different offsets, are one dict key of several encodings)."""
    t = type(key)
    if t is str or t is int:
        return True
    return t is tuple and all(type(k) is str or type(k) is int for k in key)


def _is_nan(key: Any) -> bool:
    if isinstance(key, tuple):
        return any(_is_nan(k) for k in key)
    return (isinstance(key, float) and key != key) or (
        isinstance(key, decimal.Decimal) and key.is_nan())


class _Held:
    """A probe equal to the keys equal to ``key``, remembering the one a dict or set holds
    (a lookup compares the held key with the probe: the held key's ``__eq__`` answers
    NotImplemented for a foreign type, so the probe's is asked)."""

    __slots__ = ("key", "_hash", "found")

    def __init__(self, key: Any) -> None:
        self.key, self._hash, self.found = key, hash(key), key

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self.key == other:
            self.found = other
            return True
        return False


class KeyValueState:
    """A task's key-value state (Storm's ``KeyValueState``).

    ``KeyValueState()`` with no arguments is a standalone in-memory state (unit tests of a
    bolt); the runtime gives each stateful task its own, restored from its checkpoints.

    Values are encoded with the wire codec at :meth:`put` (msgpack types, datetime, date,
    time, Decimal, Arrow), so :meth:`get` returns a copy: change a value, then put it
    again. Keys: ``str``, ``int``, ``float``, ``bool``, ``None``, ``bytes``, ``datetime``,
    ``date``, ``Decimal`` or tuples of these; not NaN. Keys equal in Python are one key,
    as in a dict: ``1``, ``1.0``, ``True`` and ``Decimal("1.0")`` (and tuples of them),
    aware datetimes of one instant at any offset; the key kept and checkpointed is the
    first one put (or the one restored), not a later equal argument. Keys changed since
    the last checkpoint are tracked, so a checkpoint writes only those.

    In a fields-grouped bolt the state is keyed: each key belongs to a key group (the
    router's hash of the grouping's values: the key is the grouped field's value, or the
    tuple of the grouped fields' values), and a task may keep only the keys that the
    grouping sends to it.

    Not thread-safe: the executor thread (the one calling ``execute``) owns it.
    """

    def __init__(self, *, component: str = "", task: int = -1,
                 key_group: Callable[[Any], int] | None = None,
                 groups: range | None = None) -> None:
        self.component = component
        self.task = task
        self._key_group = key_group
        self._groups = groups
        self._encode, self._decode = _codec()
        self._data: dict[Any, bytes] = {}
        self._dirty: set = set()
        #: a key other than a str, an int or a tuple of them was put or restored: equal
        #: keys may differ in encoding, so a put or delete looks up the key held
        self._mixed = False
        self._bytes = 0  # encoded values' bytes
        #: keyed state: each key's group, computed once at its first put
        self._key_groups: dict[Any, int] = {}

    def _where(self, key: Any) -> str:
        who = f"component {self.component!r} task {self.task}: " if self.component else ""
        return f"{who}state key {key!r:.80}"

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (encoded now).

        Raises:
            StateError: ``key`` is not of a key type, or is (or holds) a NaN, ``value``
                cannot be encoded, or ``key`` belongs to a key group of another task (a
                keyed state).
        """
        try:
            _check_key(key)
            data = self._encode(value)
        except TypeError as e:
            raise StateError(f"{self._where(key)}: {e}") from None
        t = type(key)  # (str and int keys, the common ones, skip the call)
        if self._mixed or (t is not str and t is not int and not _plain(key)):
            if _is_nan(key):
                raise StateError(f"{self._where(key)}: a NaN is equal to nothing, not even "
                                 f"itself, so it cannot be a state key")
            self._mixed = True
            key = self._held(key)
        if self._groups is not None and key not in self._data:
            g = self._key_groups[key] = self._key_group(key)
            if g not in self._groups:
                self._key_groups.pop(key, None)
                raise StateError(
                    f"{self._where(key)} is in key group {g}, which this task does not own "
                    f"(it owns groups {self._groups.start}-{self._groups.stop - 1}): keyed "
                    f"state may hold only keys that the fields grouping sends to the task")
        old = self._data.get(key)
        self._bytes += len(data) - (0 if old is None else len(old))
        self._data[key] = data
        self._dirty.add(key)

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` (a fresh copy), or ``default``."""
        data = self._data.get(key)
        return default if data is None else self._decode(data)

    def _held(self, key: Any) -> Any:
        """The key equal to ``key`` that the state holds (or has a pending delete of),
        else ``key``: the one whose encoding is stored."""
        probe = _Held(key)
        if probe in self._data or probe in self._dirty:
            return probe.found
        return key

    def delete(self, key: Any) -> None:
        """Remove ``key`` (no error if absent)."""
        if self._mixed:
            key = self._held(key)
        old = self._data.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
            self._dirty.add(key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs, in no fixed order (values decoded as iterated)."""
        decode = self._decode
        for k, data in list(self._data.items()):
            yield k, decode(data)

    def keys(self) -> Iterator[Any]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        return f"KeyValueState({len(self._data)} keys, {len(self._dirty)} changed)"

    # -- the runtime's side (actors/state) ---------------------------------------------------
    def take_changes(self) -> tuple[list[tuple[Any, bytes]], list[Any]]:
        """The changes since the last call: ``(puts [(key, value bytes)], deleted keys)``;
        clears the change set."""
        data, puts, deletes = self._data, [], []
        for k in self._dirty:
            v = data.get(k)
            if v is None:
                deletes.append(k)
            else:
                puts.append((k, v))
        self._dirty = set()
        return puts, deletes

    def replace(self, entries: dict[Any, bytes]) -> None:
        """Replace the whole contents with ``entries`` (key → value bytes), unchanged since
        (a restore)."""
        self._data = dict(entries)
        self._dirty = set()
        self._mixed = not all(_plain(k) for k in self._data)
        self._bytes = sum(len(v) for v in self._data.values())

    @property
    def stored_bytes(self) -> int:
        """Bytes of the encoded values (the keys not counted)."""
        return self._bytes

    def key_group_of(self, key: Any) -> int:
        """The key group of ``key`` (0 for a state that is not keyed)."""
        if self._key_group is None:
            return 0
        g = self._key_groups.get(key)
        if g is None:
            g = self._key_groups[key] = self._key_group(key)
        return g


class _Stateful:
    """The checkpoint hooks a stateful component declares (Storm's ``IStatefulComponent``)."""

    def init_state(self, state: KeyValueState) -> None:
        """Called with the task's restored state (empty on a first start) after
        ``prepare``/``open`` and before any ``execute``/``next_tuple``."""
        raise NotImplementedError

    def pre_prepare(self, checkpoint_id: int) -> None:  # noqa: B027 (optional hook)
        """Before the state is snapshotted for checkpoint ``checkpoint_id`` (Storm's
        ``prePrepare``): put what is still held elsewhere into the state."""

    def pre_commit(self, checkpoint_id: int) -> None:  # noqa: B027 (optional hook)
        """Checkpoint ``checkpoint_id`` has committed (Storm's ``preCommit``)."""

    def pre_rollback(self) -> None:  # noqa: B027 (optional hook)
        """The state is about to be rolled back to the last committed checkpoint (Storm's
        ``preRollback``): drop what was derived from the state since."""


class StatefulBolt(_Stateful, Bolt):
    """A bolt whose :class:`KeyValueState` is checkpointed (Storm's ``IStatefulBolt``).

    Implement :meth:`init_state` (keep the state it receives) and ``execute``; keep counts
    and anything else that must survive a failure in the state. Emits are not part of the
    state: with exactly-once state, what a bolt emits downstream may be emitted again
    after a rollback (the sinks' own issue), but the state counts each input once.
    """


class StatefulSpout(_Stateful, Spout):
    """A spout that keeps its position in its :class:`KeyValueState`: in
    :meth:`pre_prepare` it puts where it is; :meth:`init_state` is called again after
    every rollback with the state of the last committed checkpoint, and the spout goes on
    from the position it finds there (a rewind, Flink's replayable source). The
    runtime then neither acks nor fails the tuples it rewinds over: the position is the
    source of truth.

    A restore from a savepoint at another number of tasks calls the classmethod
    :meth:`redistribute` to build each new task's state from the old tasks' states.
    """

    @classmethod
    def redistribute(cls, old: list[dict], index: int, count: int) -> dict:
        """The state of new task ``index`` of ``count`` when a savepoint taken with
        ``len(old)`` tasks is restored with ``count`` (Flink's union list state, handed to
        each new task to pick from): ``old[k]`` is old task ``k``'s state as a dict (key →
        value, as its ``pre_prepare`` put it). Pure; called at submit, once per new task,
        before any task starts. The default refuses: a spout whose position does not split
        restores only at the same parallelism. ``IterableSpout``, ``DataFrameSpout`` and
        the Nexmark spout keep a position per split (``topology/_splits.py``).

        Raises:
            NotImplementedError: the default (the submit is refused, naming the spout).
            ValueError: old states this spout cannot split (the submit is refused).
        """
        raise NotImplementedError(
            f"{cls.__name__} keeps a position that does not split: define the classmethod "
            f"redistribute(old, index, count) to restore it at another parallelism")
