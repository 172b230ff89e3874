"""Savepoints: a committed checkpoint copied to a portable place that outlives its
topology, and a new submit started from one (Flink's savepoints and ``--fromSavepoint``).

Layout of a savepoint directory::

    metadata.json        {"format_version": 1, "topology": name, "checkpoint_id": N,
                          "components": {component: number of tasks}, "created": epoch s}
    state/<component>/<task index>.msgpack
                         [[key bytes, value bytes], ...]: the task's entries as stored,
                         the runtime's own (persistent windows, sinks' transactions) too
    _COMMITTED           written last: a directory without it is not a savepoint

Entries go by task *index* within their component, so a restore at the same parallelism
gives each new task what the old task of that index had. Pure: no Ray.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from actors.state._internals import INTERNAL_GROUP, INTERNAL_PREFIX
from actors.state._provider import COMMITTED, StateProvider
from topology import StormTopology

FORMAT_VERSION = 1
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


def check_target(path: str) -> str:
    """``path`` as an absolute path, if a savepoint may be written there.

    Raises:
        SavepointError: it exists and is not an empty directory.
    """
    path = os.path.abspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise SavepointError(f"savepoint {path}: exists and is not an empty directory; "
                             f"give a new path")
    return path


def write_savepoint(path: str, topology_name: str, checkpoint_id: int,
                    state: dict[str, dict[int, dict[bytes, bytes]]],
                    component_tasks: dict[str, list[int]]) -> str:
    """Write ``state`` (``{component: {task id: {key: value}}}``, as stored, as of
    ``checkpoint_id``) to ``path``; the marker last. Blocks for the writes.

    Returns:
        The absolute path.

    Raises:
        SavepointError: ``path`` cannot be used (see :func:`check_target`).
        OSError: a write failed (what was written has no marker).
    """
    path = check_target(path)
    counts = {c: len(tasks) for c, tasks in component_tasks.items()}
    for component, tasks in state.items():
        d = os.path.join(path, "state", component)
        os.makedirs(d, exist_ok=True)
        ids = list(component_tasks.get(component, sorted(tasks)))
        for task, entries in tasks.items():
            with open(os.path.join(d, f"{ids.index(task)}.msgpack"), "wb") as f:
                f.write(msgpack.packb(sorted(entries.items()), use_bin_type=True))
    meta = {"format_version": FORMAT_VERSION, "topology": topology_name,
            "checkpoint_id": checkpoint_id,
            "components": {c: counts.get(c, len(t)) for c, t in state.items()},
            "created": time.time()}
    with open(os.path.join(path, METADATA), "w") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(path, MARKER), "w") as f:
        f.write(f"{checkpoint_id}\n")
    return path


def read_savepoint(path: str) -> Savepoint:
    """The savepoint at ``path``.

    Raises:
        SavepointError: missing, no ``_COMMITTED`` marker, another format version, or
            unreadable files (naming the path and the reason).
    """
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise SavepointError(f"savepoint {path}: no such directory")
    if not os.path.isfile(os.path.join(path, MARKER)):
        raise SavepointError(f"savepoint {path}: no {MARKER} marker, so it was never "
                             f"completed")
    try:
        with open(os.path.join(path, METADATA)) as f:
            meta = json.load(f)
        if meta.get("format_version") != FORMAT_VERSION:
            raise SavepointError(f"savepoint {path}: format version "
                                 f"{meta.get('format_version')!r}, this version reads "
                                 f"{FORMAT_VERSION}")
        entries: dict[str, dict[int, dict[bytes, bytes]]] = {}
        for component in meta["components"]:
            d = os.path.join(path, "state", component)
            entries[component] = {}
            for name in os.listdir(d) if os.path.isdir(d) else ():
                with open(os.path.join(d, name), "rb") as f:
                    pairs = msgpack.unpackb(f.read(), raw=False)
                entries[component][int(name.split(".")[0])] = {bytes(k): bytes(v)
                                                               for k, v in pairs}
        return Savepoint(path, meta["topology"], int(meta["checkpoint_id"]),
                         {c: int(n) for c, n in meta["components"].items()}, entries)
    except SavepointError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SavepointError(f"savepoint {path}: unreadable: {type(e).__name__}: {e}"
                             ) from None


def check_restore(savepoint: Savepoint, topology: StormTopology,
                  allow_non_restored_state: bool = False) -> None:
    """Refuse a restore that would lose state or mismatch tasks.

    Raises:
        SavepointError: a component with state in the savepoint is missing from
            ``topology`` (unless ``allow_non_restored_state``, Flink's flag), or has
            another number of tasks (naming it).
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
            store = provider.task_store(component, task)
            store.prepare(cid, puts, [])
            store.close()
    provider.checkpoint_log().record(COMMITTED, cid)
    return cid
