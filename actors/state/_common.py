"""What every state backend shares (the ``local``, ``redis`` and ``memory`` providers):
one checkpoint's entries, their count and CRC-32, the checks of a stored version, the
base + delta rule of a restore, the phases a log records, and the snapshot type the
readers return. Flink keeps its backends' shared code the same way, in one module each
backend imports (``org.apache.flink.runtime.state``: ``SnapshotResult``,
``KeyGroupRange``), with each backend in its own. Pure: no Ray, no I/O.

An entry is ``(key bytes, key group, value bytes or None)``; None is a delete. A task's
stored state is a *base* (the state as of the oldest checkpoint still restorable) and a
*delta* per newer checkpoint (only the keys it changed): the state as of checkpoint N is
the base with the deltas up to N applied in version order (:func:`apply_delta`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

from actors.state._internals import INTERNAL_PREFIX
from actors.state._provider import COMMITTED, COMMITTING, FINAL, PREPARING, CorruptCheckpoint

#: every phase a checkpoint log records
PHASES = (COMMITTED, PREPARING, COMMITTING, FINAL)
#: how many committed ids a log keeps (the last, and the one before to fall back to)
KEEP_COMMITTED = 2
_ENTRY = struct.Struct(">qqq")  # key group, key length, value length (-1: a delete)

Entry = tuple[bytes, int, bytes | None]


class StateSnapshot(dict):
    """What the state readers return (``read_state``, ``read_raw``, a provider's
    ``read_raw``): a dict, and the checkpoint it shows in ``checkpoint_id`` (None: no
    checkpoint committed, every task empty)."""

    checkpoint_id: int | None = None


def decoded(raw: StateSnapshot, depth: int = 2) -> StateSnapshot:
    """A raw snapshot (``read_raw``'s: stored bytes) decoded as
    :meth:`topology.KeyValueState.get` returns keys and values, without the runtime's own
    entries; ``depth``: the levels of dicts above the entries (2: ``{component: {task:
    entries}}``, 1: ``{task: entries}``). Keeps ``checkpoint_id``."""
    from actors._codec import decode_key, decode_value

    def walk(d: dict, level: int) -> dict:
        if level:
            return {k: walk(v, level - 1) for k, v in d.items()}
        return {decode_key(k): decode_value(v) for k, v in d.items()
                if not k.startswith(INTERNAL_PREFIX)}  # (windows', sinks' entries)
    out = StateSnapshot(walk(raw, depth))
    out.checkpoint_id = raw.checkpoint_id
    return out


def entries_crc(entries: Iterable[Entry]) -> tuple[int, int]:
    """``(count, CRC-32)`` of entries in key order: what a version's record holds, so a
    restore detects a damaged checkpoint instead of loading it."""
    crc = n = 0
    for key, grp, value in entries:
        crc = zlib.crc32(_ENTRY.pack(grp, len(key), -1 if value is None else len(value)), crc)
        crc = zlib.crc32(key, crc)
        if value is not None:
            crc = zlib.crc32(value, crc)
        n += 1
    return n, crc


def changes(puts: list[tuple[int, bytes, bytes]],
            deletes: list[tuple[int, bytes]]) -> list[Entry]:
    """One checkpoint's entries sorted by key, from a store's ``prepare`` arguments; a key
    given twice keeps its last put, and a delete of a key also put wins."""
    by_key: dict[bytes, tuple[int, bytes | None]] = {}
    for grp, key, value in puts:
        by_key[bytes(key)] = (grp, bytes(value))
    for grp, key in deletes:
        by_key[bytes(key)] = (grp, None)
    return [(k, g, v) for k, (g, v) in sorted(by_key.items())]


def in_groups(grp: int, groups: range | None) -> bool:
    """Whether key group ``grp`` is among ``groups`` (None: every group)."""
    return groups is None or grp in groups


def check_phase(phase: str) -> None:
    """``ValueError`` unless ``phase`` is one of :data:`PHASES`."""
    if phase not in PHASES:
        raise ValueError(f"checkpoint phase must be one of {', '.join(PHASES)}, got {phase!r}")


def check_not_collected(where: str, checkpoint_id: int, base: int | None) -> None:
    """:class:`CorruptCheckpoint` (naming ``where``) if ``checkpoint_id`` is below the
    store's base ``base`` (None: never collected): its deltas were folded away."""
    if base is not None and checkpoint_id < base:
        raise CorruptCheckpoint(where, checkpoint_id,
                                f"collected: only checkpoints >= {base} can be restored")


def check_version(where: str, checkpoint_id: int, found: tuple[int, int],
                  record: tuple[int, int] | None, record_at: str = "") -> None:
    """:class:`CorruptCheckpoint` unless ``found`` (the ``(count, CRC-32)`` of the
    entries stored for ``checkpoint_id``, :func:`entries_crc`) matches ``record`` (what
    ``prepare`` recorded). No record and no entries: the checkpoint wrote nothing to this
    store (a store newer than it), not corrupt. ``record_at`` names where the record is
    kept, for the message."""
    n, crc = found
    if record is None:
        if n:
            raise CorruptCheckpoint(where, checkpoint_id,
                                    f"{n} entries without the checkpoint's record"
                                    + (f" in {record_at}" if record_at else ""))
        return
    if record[0] != n:
        raise CorruptCheckpoint(where, checkpoint_id,
                                f"{n} entries where {record[0]} were written")
    if record[1] != crc:
        raise CorruptCheckpoint(where, checkpoint_id,
                                f"CRC-32 {crc:08x} of its entries, {record[1]:08x} written")


def apply_delta(state: dict[bytes, bytes], entries: Iterable[Entry],
                groups: range | None) -> None:
    """Apply one checkpoint's delta to ``state`` in place: a put sets its key, a delete
    removes it, and so does a put into a group not in ``groups`` (a key's latest entry
    decides its group)."""
    for key, grp, value in entries:
        if value is None or not in_groups(grp, groups):
            state.pop(key, None)
        else:
            state[key] = value
