"""The objects the ``local`` provider writes when ``topology.state.checkpoint.dir`` is a
``pyarrow.fs`` URI (``s3://``, ``gs://``, ``hdfs://``, ``file://``): their names and their
bytes. Each object is written once and never changed; a reader checks it whole (length and
CRC-32) before it believes a byte of it, so a torn or damaged object is never read as a
record or as state. The writers are :mod:`actors.state._objects` (the task stores and the
provider) and :mod:`actors.state._object_log` (the coordinator's log). Pure: no Ray, no I/O.

Layout under ``<dir>/<topology>/<submit id>/``::

    _log/<phase>-<checkpoint id:020d>                   one record of the coordinator's log
    <component>/task-<index>/gen-<base id:020d>/base    a task's state as of <base id>
    <component>/task-<index>/gen-<base id:020d>/delta-<checkpoint id:020d>
                                                        the keys one checkpoint changed

A task's objects form *generations*: a compacted ``base`` and the deltas of the
checkpoints after it (generation 0 has no base). The state as of checkpoint N is the base
of its generation with the deltas after it applied in order
(:func:`actors.state._common.apply_delta`'s rule). Which objects those are is never taken
from a listing: each delta names the object before it (``prev``), and a restore walks
that chain back from the object the commit manifest names for the task
(:func:`chain_head`), so an object off the chain (a zombie incarnation's late upload, a
rolled-back round's) is never read. Flink's incremental RocksDB checkpoints likewise
upload only new SST files and share the rest (``RocksIncrementalSnapshotStrategy``), and
restore only the handles a checkpoint's metadata lists; ``docs/state.md``, "Checkpoints in an object
store", gives the measurements behind this layout.

An object's bytes: ``MAGIC``, the payload's length (8 bytes, big-endian), its CRC-32 (4
bytes), then the payload, msgpack: a state object ``{"kind", "ckpt", "task", "n", "crc",
"prev", "entries": [[key, group, value or None], ...]}`` (``n``, ``crc``: the entries'
count and CRC-32, :func:`actors.state._common.entries_crc`; ``prev``:
:func:`state_object`), a log record ``{"phase", "ckpt",
"manifest"}``.
"""

from __future__ import annotations

import re
import struct
import zlib

import msgpack

from actors.state._common import PHASES, Entry, entries_crc
from actors.state._provider import COMMITTED, COMMITTING, FINAL, PREPARING, CorruptCheckpoint

MAGIC = b"SORS\x01"
_HEAD = struct.Struct(">QI")  # payload length, CRC-32 of the payload
#: the log's directory in a submit's
LOG_DIR = "_log"
#: a phase's order among one checkpoint's records (the latest record is the highest)
_RANK = {PREPARING: 0, COMMITTING: 1, COMMITTED: 2, FINAL: 2}
_RECORD = re.compile("^(" + "|".join(PHASES) + r")-(\d{20})$")
_GEN = re.compile(r"^gen-(\d{20})$")
_DELTA = re.compile(r"^delta-(\d{20})$")


class TornObject(ValueError):
    """An object whose bytes fail their frame's check (half written, damaged, not ours)."""


def frame(payload: dict) -> bytes:
    """``payload`` as an object's bytes (see the module)."""
    body = msgpack.packb(payload, use_bin_type=True)
    return MAGIC + _HEAD.pack(len(body), zlib.crc32(body)) + body


def unframe(data: bytes) -> dict:
    """The payload of an object's bytes.

    Raises:
        TornObject: the bytes are shorter or longer than their frame says, or fail its
            CRC-32, or do not start with :data:`MAGIC`.
    """
    head = len(MAGIC) + _HEAD.size
    if len(data) < head or not data.startswith(MAGIC):
        raise TornObject(f"{len(data)} bytes without a whole header")
    size, crc = _HEAD.unpack_from(data, len(MAGIC))
    body = data[head:]
    if len(body) != size:
        raise TornObject(f"{len(body)} bytes of payload where the header says {size}")
    if zlib.crc32(body) != crc:
        raise TornObject(f"CRC-32 {zlib.crc32(body):08x} of the payload, {crc:08x} written")
    try:
        out = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise TornObject(f"payload is not msgpack ({e})") from None
    if not isinstance(out, dict):
        raise TornObject("payload is not a map")
    return out


# -- state objects ----------------------------------------------------------------------------

def gen_name(base_id: int) -> str:
    return f"gen-{base_id:020d}"


def delta_name(checkpoint_id: int) -> str:
    return f"delta-{checkpoint_id:020d}"


BASE = "base"


def state_object(kind: str, checkpoint_id: int, task: int, entries: list[Entry],
                 prev: tuple[int, int] | None = None) -> bytes:
    """The bytes of a ``"delta"`` or ``"base"`` object of ``task`` (its global id, so a
    reader can name it) as of ``checkpoint_id``; ``entries`` sorted by key. A delta
    records ``prev``, the ``(generation, checkpoint id)`` of the object before it in the
    task's chain (None: the first; the generation's base when the id equals it)."""
    n, crc = entries_crc(entries)
    return frame({"kind": kind, "ckpt": checkpoint_id, "task": task, "n": n, "crc": crc,
                  "prev": None if prev is None else [int(prev[0]), int(prev[1])],
                  "entries": [[k, g, v] for k, g, v in entries]})


def read_state_object(data: bytes, where: str, checkpoint_id: int
                      ) -> tuple[int, list[Entry], tuple[int, int] | None]:
    """``(task id, entries, prev)`` of a state object (``prev``: see
    :func:`state_object`), checked whole: its frame, its id against ``checkpoint_id``,
    and its entries against the count and CRC-32 it records.

    Raises:
        CorruptCheckpoint: naming ``where`` and ``checkpoint_id``, for a torn or damaged
            object.
    """
    try:
        d = unframe(data)
        entries = [(bytes(k), int(g), None if v is None else bytes(v)) for k, g, v in d["entries"]]
        task, n, crc = int(d["task"]), d["n"], d["crc"]
        prev = None if d.get("prev") is None else (int(d["prev"][0]), int(d["prev"][1]))
        if d["ckpt"] != checkpoint_id:
            raise ValueError(f"it says checkpoint {d['ckpt']!r}")
    except (TornObject, KeyError, TypeError, ValueError, IndexError) as e:
        raise CorruptCheckpoint(where, checkpoint_id, f"unreadable object: {e}") from None
    found = entries_crc(entries)
    if found != (n, crc):
        raise CorruptCheckpoint(where, checkpoint_id,
                                f"{found[0]} entries (CRC-32 {found[1]:08x}) where {n} "
                                f"(CRC-32 {crc:08x}) were written")
    return task, entries, prev


def parse_task_listing(names: list[tuple[str, int]]) -> dict[int, dict]:
    """A task directory's listing (``(path relative to it, size in bytes)``) as its
    generations: ``{base id: {"base": size or None, "deltas": {checkpoint id: size}}}``;
    other names (temporary files, strangers) are left out."""
    gens: dict[int, dict] = {}
    for rel, size in names:
        parts = rel.split("/")
        if len(parts) != 2 or not (m := _GEN.match(parts[0])):
            continue
        gen = gens.setdefault(int(m[1]), {"base": None, "deltas": {}})
        if parts[1] == BASE:
            gen["base"] = size
        elif d := _DELTA.match(parts[1]):
            gen["deltas"][int(d[1])] = size
    return gens


def chain_head(gens: dict[int, dict], checkpoint_id: int,
               named: int | None = None) -> tuple[int, int] | None:
    """``(generation, checkpoint id)`` of the object a restore of ``checkpoint_id`` starts
    its chain from: the object of id ``named`` (the commit manifest's entry for the
    task), else the newest listed at or below ``checkpoint_id`` (a base before a delta of
    the same id, the newest generation first). None: no such object listed."""
    found = None
    for g, gen in gens.items():
        ids = ([g] if gen["base"] is not None else []) + list(gen["deltas"])
        for cid in ids:
            ok = cid == named if named is not None else cid <= checkpoint_id
            key = (cid, cid == g, g)
            if ok and (found is None or key > found):
                found = key
    return None if found is None else (found[2], found[0])


# -- log records ------------------------------------------------------------------------------

def record_name(phase: str, checkpoint_id: int) -> str:
    return f"{phase}-{checkpoint_id:020d}"


def parse_record_name(name: str) -> tuple[int, int, str] | None:
    """``(checkpoint id, rank, phase)`` of a log object's name (sorting these puts the
    latest record last), or None for another name (a temporary file)."""
    m = _RECORD.match(name)
    return None if m is None else (int(m[2]), _RANK[m[1]], m[1])


def log_record(phase: str, checkpoint_id: int, manifest_text: str | None) -> bytes:
    return frame({"phase": phase, "ckpt": checkpoint_id, "manifest": manifest_text})


def read_log_record(data: bytes, phase: str, checkpoint_id: int) -> str | None:
    """The manifest text of a log record whose name says ``phase`` and ``checkpoint_id``.

    Raises:
        TornObject: the bytes fail their check or disagree with the name.
    """
    d = unframe(data)
    if d.get("phase") != phase or d.get("ckpt") != checkpoint_id:
        raise TornObject(f"the record says {d.get('phase')!r} {d.get('ckpt')!r}")
    return d.get("manifest")
