"""Savepoints: a committed checkpoint copied to a portable place that outlives its
topology, and a new submit started from one (Flink's savepoints and ``--fromSavepoint``).
A savepoint lives at a local path or any ``pyarrow.fs`` URI (:mod:`actors.state._fs`), and
holds entries as stored, whatever provider kept them (``StateProvider.read_raw``): one
taken on ``local`` restores into Redis and the reverse, as Flink's savepoints are
backend-independent.

Layout of a savepoint directory::

    metadata.json        {"format_version": 2, "topology": name, "checkpoint_id": N,
                          "components": {component with state: number of tasks},
                          "created": epoch s, "key_groups": G (topology.max.task.
                          parallelism), "tasks": {every component: number of tasks},
                          "keyed": {keyed component: [[source, stream, grouping,
                          [key fields]], ...]}, "forward": [[source, component], ...]}
    state/<component>/<task index>.msgpack
                         [[key bytes, value bytes], ...]: the task's entries as stored,
                         the runtime's own (persistent windows, sinks' transactions) too
    _COMMITTED           written last: a directory without it is not a savepoint

Entries go by task *index* within their component, so a restore at the same parallelism
gives each new task what the old task of that index had. A restore is exact or refused at
submit (:func:`check_restore`): keyed state is stored by key group, so another key-group
count, other key fields or another grouping would put keys in groups their tasks do not
own, as Flink's ``StateAssignmentOperation`` refuses a changed max parallelism; a forward
(chained) edge pairs task k with task k, so its peers' counts must not change either. A
format-1 savepoint (before these were recorded) restores at the same task counts only,
its key-group count taken to be the current one, with a warning. Pure: no Ray.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.fs as pafs

from actors.state import _fs
from actors.state._internals import INTERNAL_GROUP, INTERNAL_PREFIX
from actors.state._provider import COMMITTED, StateProvider
from topology import StormTopology
from topology._builder import FORWARD
from topology._keygroups import KEY_GROUPS_KEY, key_group_count
from topology._private import unsafe_reason
from topology._redact import mask_text

logger = logging.getLogger("storm_on_ray.savepoints")

#: 2: metadata.json records the key-group count, the keyed components' key fields and
#: groupings, every component's task count and the forward edges; 1 is read, checked less
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
MARKER = "_COMMITTED"
METADATA = "metadata.json"


class SavepointError(ValueError):
    """A savepoint that cannot be written or used: the message names its path and why."""


@dataclass(frozen=True)
class Savepoint:
    """A savepoint read back: its path, checkpoint id, the component → task count it was
    taken at, and the entries ``{component: {task index: {key: value}}}`` (bytes)."""

    path: str
    topology: str
    checkpoint_id: int
    components: dict[str, int]
    entries: dict[str, dict[int, dict[bytes, bytes]]]
    #: what format 2 records of the topology it was taken from (:func:`describe`); empty
    #: for format 1
    layout: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION


def check_target(path: str) -> str:
    """``path`` (a local path, made absolute, or a ``pyarrow.fs`` URI) if a savepoint may
    be written there: it is a new or empty directory, and writable (a probe file is
    written and deleted; the directory is created). Blocks for a few filesystem calls.

    Raises:
        SavepointError: it exists and is not an empty directory, or cannot be reached or
            written; or the URI is one ``pyarrow.fs`` does not know or carries
            credentials (see :func:`actors.state._fs.resolve`). The message names the
            target, credentials masked, and the filesystem's error.
    """
    return _check_location(_resolve(path))


def _check_location(loc: _fs.Location) -> str:
    fs = loc.filesystem
    try:
        info = fs.get_file_info(loc.base)
        if info.type == pafs.FileType.File or (
                info.type == pafs.FileType.Directory
                and fs.get_file_info(pafs.FileSelector(loc.base))):
            raise SavepointError(f"savepoint {loc.target}: exists and is not an empty "
                                 f"directory; give a new path")
        _fs.make_dir(loc, loc.base)
        if loc.is_local:
            _check_private(loc)
        probe = loc.join(f".write-check-{uuid.uuid4().hex}")
        _fs.write_bytes(loc, probe, b"")
        fs.delete_file(probe)
    except SavepointError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise SavepointError(f"savepoint {_fs.error(loc, 'cannot be written', e)}") from None
    return loc.target


def _check_private(loc: _fs.Location) -> None:
    why = unsafe_reason(loc.base)
    if why is not None:
        raise SavepointError(f"savepoint {loc.target}: not private to this user: {why}; "
                             f"save into a directory only you can write")


def _check_component(path: str, component: Any) -> str:
    """``component`` if it can name one directory of a savepoint, or SavepointError: a
    name with a path separator, ``.``/``..``, a NUL or nothing would write (or read)
    outside ``state/``."""
    if (not isinstance(component, str) or component in ("", ".", "..") or "/" in component
            or "\\" in component or "\0" in component):
        raise SavepointError(f"savepoint {path}: component {component!r} cannot name a "
                             f"directory: a component id with a path separator, '.', '..' "
                             f"or NUL cannot be saved; rename the component")
    return component


def _resolve(path: str) -> _fs.Location:
    try:
        return _fs.resolve(path)
    except _fs.StorageError as e:
        raise SavepointError(f"savepoint {e}") from None


def describe(topology: StormTopology, conf: dict) -> dict:
    """What a restore of keyed state depends on, as format 2 records it: ``key_groups``
    (``topology.max.task.parallelism``), ``tasks`` (every component's task count),
    ``keyed`` (each keyed stateful component's inputs ``[source, stream, grouping, [key
    fields]]``, sorted) and ``forward`` (the ``[source, component]`` forward edges)."""
    from actors.state._plan import keyed_state

    keyed, forward = {}, []
    for cid, spec in sorted(topology.components.items()):
        forward += [[g.source, cid] for g in spec.inputs if g.kind == FORWARD]
        tasks = topology.component_tasks.get(cid)
        if tasks and keyed_state(topology, cid, tasks[0], conf)[0] is not None:
            keyed[cid] = sorted([g.source, g.stream, g.kind, list(g.fields or ())]
                                for g in spec.inputs)
    return {"key_groups": key_group_count(conf),
            "tasks": {c: len(t) for c, t in sorted(topology.component_tasks.items())},
            "keyed": keyed, "forward": sorted(forward)}


def write_savepoint(path: str, topology_name: str, checkpoint_id: int,
                    state: dict[str, dict[int, dict[bytes, bytes]]],
                    component_tasks: dict[str, list[int]], layout: dict) -> str:
    """Write ``state`` (``{component: {task id: {key: value}}}``, as stored, as of
    ``checkpoint_id``) to ``path`` (a local path or a ``pyarrow.fs`` URI), with ``layout``
    (:func:`describe` of the topology it was taken from) in its metadata; the marker last,
    through a temporary name and a move where the filesystem has moves
    (:func:`actors.state._fs.publish`). Blocks for the writes.

    Returns:
        The absolute path, or the URI.

    Raises:
        SavepointError: ``path`` cannot be used (see :func:`check_target`), or a write
            failed (what was written has no marker; the message names the target and
            the filesystem's error).
    """
    loc = _resolve(path)
    target = _check_location(loc)
    counts = {c: len(tasks) for c, tasks in component_tasks.items()}
    for component in state:
        _check_component(target, component)
    try:
        files: dict[str, dict[str, list[int]]] = {}
        for component, tasks in state.items():
            d = loc.join("state", component)
            _fs.make_dir(loc, d)
            ids = list(component_tasks.get(component, sorted(tasks)))
            files[component] = {}
            for task, entries in tasks.items():
                data = msgpack.packb(sorted(entries.items()), use_bin_type=True)
                index = ids.index(task)
                _fs.write_bytes(loc, posixpath.join(d, f"{index}.msgpack"), data)
                files[component][str(index)] = [len(entries), zlib.crc32(data)]
        meta = {"format_version": FORMAT_VERSION, "topology": topology_name,
                "checkpoint_id": checkpoint_id,
                "components": {c: counts.get(c, len(t)) for c, t in state.items()},
                # every task file written, with its entry count and CRC-32: a read
                # requires exactly these, so a lost file is never restored as empty state
                "files": files,
                "created": time.time(), **layout}
        _fs.write_bytes(loc, loc.join(METADATA), json.dumps(meta, indent=2).encode())
        _fs.publish(loc, loc.join(MARKER), f"{checkpoint_id}\n".encode())
    except (OSError, pa.ArrowException) as e:
        raise SavepointError(f"savepoint {_fs.error(loc, 'a write failed', e)}; what was "
                             f"written has no {MARKER} marker") from None
    return target


def read_savepoint(path: str) -> Savepoint:
    """The savepoint at ``path`` (a local path or a ``pyarrow.fs`` URI), whatever
    provider it was taken from. Blocks for the reads.

    Raises:
        SavepointError: missing, no ``_COMMITTED`` marker, another format version,
            unreadable files, or a target that cannot be resolved (see
            :func:`actors.state._fs.resolve`); the message names the path (credentials
            masked) and the reason.
    """
    loc = _resolve(path)
    path, fs = loc.target, loc.filesystem
    try:
        if fs.get_file_info(loc.base).type != pafs.FileType.Directory:
            raise SavepointError(f"savepoint {path}: no such directory")
        if fs.get_file_info(loc.join(MARKER)).type != pafs.FileType.File:
            raise SavepointError(f"savepoint {path}: no {MARKER} marker, so it was never "
                                 f"completed")
        meta = json.loads(_fs.read_bytes(loc, loc.join(METADATA)))
        version = meta.get("format_version")
        if version not in READ_VERSIONS:
            raise SavepointError(f"savepoint {path}: format version {version!r}, this "
                                 f"version reads {' and '.join(map(str, READ_VERSIONS))}")
        entries: dict[str, dict[int, dict[bytes, bytes]]] = {}
        listed = meta.get("files")  # (None: written before the list was recorded)
        for component in meta["components"]:
            _check_component(path, component)
            entries[component] = {}
            want = None if listed is None else dict(listed.get(component, {}))
            for info in fs.get_file_info(pafs.FileSelector(loc.join("state", component),
                                                           allow_not_found=True)):
                if info.type != pafs.FileType.File or not info.base_name.endswith(".msgpack"):
                    continue
                stem = info.base_name[:-len(".msgpack")]
                if want is not None and stem not in want:
                    raise SavepointError(f"savepoint {path}: {component}/{info.base_name} "
                                         f"is not one of the files {METADATA} lists")
                data = _fs.read_bytes(loc, info.path)
                if want is not None and zlib.crc32(data) != want[stem][1]:
                    raise SavepointError(f"savepoint {path}: {component}/{info.base_name} "
                                         f"fails its CRC-32 check")
                # (every length a header claims bounded by the file's: msgpack's limits)
                pairs = msgpack.unpackb(data, raw=False, max_bin_len=len(data),
                                        max_str_len=len(data), max_array_len=len(data),
                                        max_map_len=len(data) // 2)
                entries[component][int(info.base_name.split(".")[0])] = {
                    bytes(k): bytes(v) for k, v in pairs}
                if want is not None:
                    if len(pairs) != want.pop(stem)[0]:
                        raise SavepointError(f"savepoint {path}: {component}/"
                                             f"{info.base_name} holds another entry count "
                                             f"than {METADATA} records")
            if want:
                raise SavepointError(f"savepoint {path}: {component}: task files "
                                     f"{sorted(want)} that {METADATA} lists are missing, "
                                     f"so their state would restore empty")
        layout = {k: meta[k] for k in ("key_groups", "tasks", "keyed", "forward")
                  if k in meta}
        if version >= 2 and len(layout) < 4:
            raise KeyError(f"{sorted({'key_groups', 'tasks', 'keyed', 'forward'} - set(layout))}"
                           f" missing from {METADATA}")
        return Savepoint(path, meta["topology"], int(meta["checkpoint_id"]),
                         {c: int(n) for c, n in meta["components"].items()}, entries,
                         layout, version)
    except SavepointError:
        raise
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
        raise SavepointError(f"savepoint {path}: unreadable: "
                             f"{mask_text(f'{type(e).__name__}: {e}')}") from None


def check_restore(savepoint: Savepoint, topology: StormTopology,
                  allow_non_restored_state: bool = False, conf: dict | None = None) -> None:
    """Refuse a restore that would lose state or put it where its tasks do not look.

    ``conf``: the new submit's (its ``topology.max.task.parallelism``); None: the
    defaults.

    Raises:
        SavepointError: a component with state in the savepoint is missing from
            ``topology`` (unless ``allow_non_restored_state``, Flink's flag), or has
            another number of tasks; and, for format 2, a keyed component restored under
            another key-group count, other key fields or another grouping, or a forward
            (chained) edge one of whose ends has state and whose other end's task count
            changed. The message names the component, what differs and both values.
    """
    for component, n in sorted(savepoint.components.items()):
        tasks = topology.component_tasks.get(component)
        if tasks is None:
            if allow_non_restored_state:
                continue
            raise SavepointError(
                f"savepoint {savepoint.path}: component {component!r} has state there "
                f"but is not in this topology; pass allow_non_restored_state=True to "
                f"start without it")
        if len(tasks) != n:
            raise SavepointError(
                f"savepoint {savepoint.path}: component {component!r} had {n} tasks, "
                f"this topology gives it {len(tasks)}; restore at the same parallelism")
    conf = dict(conf or {})
    now = describe(topology, conf)
    was = savepoint.layout
    if not was:  # format 1
        logger.warning("savepoint %s is of format 1: its key-group count (taken to be this "
                       "topology's, %d), key fields, groupings and forward peers' task "
                       "counts are not recorded, so not checked", savepoint.path,
                       now["key_groups"])
        return
    restored = [c for c in sorted(savepoint.components) if c in topology.component_tasks]
    for component in restored:
        old, new = was["keyed"].get(component), now["keyed"].get(component)
        if old is not None and was["key_groups"] != now["key_groups"]:
            raise SavepointError(
                f"savepoint {savepoint.path}: component {component!r}: savepoint has "
                f"{was['key_groups']} key groups, {KEY_GROUPS_KEY} is "
                f"{now['key_groups']}; restore with {was['key_groups']}")
        if old != new:
            raise SavepointError(
                f"savepoint {savepoint.path}: component {component!r}: savepoint has "
                f"{describe_inputs(old)}, this topology has {describe_inputs(new)}; "
                f"restore with the key fields and grouping of the savepoint")
    stateful = set(restored)
    for source, target in sorted(set(map(tuple, was["forward"] + now["forward"]))):
        if not {source, target} & stateful:
            continue
        for peer in (source, target):
            old, new = was["tasks"].get(peer), now["tasks"].get(peer)
            if old != new:
                raise SavepointError(
                    f"savepoint {savepoint.path}: component {peer!r}: savepoint has "
                    f"{old} tasks, this topology has {new}, and its forward (chained) edge "
                    f"{source!r} -> {target!r} pairs the tasks of a component with state "
                    f"by index; restore with {old}")


def describe_inputs(inputs: list | None) -> str:
    """A layout's record of a component's inputs (``describe``'s ``"keyed"`` entry, None
    for per-task state) in words, for refusals."""
    if inputs is None:
        return "per-task state (not keyed by a fields grouping)"
    return "keyed state grouped by " + ", ".join(
        f"{kind} {fields} of {source!r}/{stream!r}" for source, stream, kind, fields in inputs)


def seed_provider(provider: StateProvider, savepoint: Savepoint, topology: StormTopology,
                  key_groups: Any) -> int:
    """Write the savepoint's entries into ``provider`` (a new submit's) as checkpoint
    ``savepoint.checkpoint_id``, committed in its log, before any task starts: the tasks
    then restore it as they would after a failure. ``key_groups(component, task)`` gives
    a stateful task's state key → key group function (None: per-task state).

    Returns:
        The checkpoint id the tasks restore.
    """
    from actors._codec import decode_key

    cid = savepoint.checkpoint_id
    manifest = {}  # (each seeded task's entry count: its first restore checks it)
    for component, tasks in savepoint.entries.items():
        ids = topology.component_tasks.get(component)
        if ids is None:
            continue  # (allowed not restored)
        for index, entries in tasks.items():
            task = ids[index]
            kg = key_groups(component, task)
            puts = [(INTERNAL_GROUP if k.startswith(INTERNAL_PREFIX)
                     else (kg(decode_key(k)) if kg is not None else 0), k, v)
                    for k, v in entries.items()]
            store = provider.task_store_at(component, task, index)
            n = store.prepare(cid, puts, [])
            store.close()
            if n is not None:
                manifest[task] = (cid, n)
    provider.checkpoint_log().record(COMMITTED, cid, manifest or None)
    return cid
