"""The ``local`` provider with ``topology.state.checkpoint.dir`` a ``pyarrow.fs`` URI
(``s3://bucket/prefix``, ``gs://…``, ``hdfs://…``, ``file:///mnt/shared/…``):
:class:`ObjectProvider`. Each task keeps a SQLite working copy in its node's temporary
directory (the local provider's own store, :class:`actors.state._sqlite._LocalTaskStore`)
and, inside ``prepare`` (before the task reports prepared), uploads the keys the checkpoint
changed as one immutable *delta* object; every so often, at a commit, a compacted *base*
object starts a new generation, and the generations no retained checkpoint reads are
deleted. A restarted task, on whatever node it lands, restores from the objects. The
coordinator's log is :class:`actors.state._object_log.ObjectLog`; the names and bytes of
the objects are :mod:`actors.state._object_format`'s.

The URI is resolved once (:func:`actors.state._fs.resolve`: ``FileSystem.from_uri``, its
query options such as ``region``, ``scheme``, ``endpoint_override`` and
``allow_bucket_creation`` as Arrow reads them; credentials from the environment, a URI
carrying them refused). No Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid

import pyarrow.fs as pafs

from actors.state import _fs
from actors.state._common import StateSnapshot, changes, check_not_collected, in_groups
from actors.state._manifest import check_manifest
from actors.state._object_format import (
    BASE,
    delta_name,
    gen_name,
    parse_task_listing,
    read_state_object,
    serving_gen,
    state_object,
)
from actors.state._object_log import ObjectLog
from actors.state._pins import read_newest_whole
from actors.state._provider import CheckpointLog, CorruptCheckpoint, StateProvider, TaskStore
from actors.state._sqlite import _LocalTaskStore, default_checkpoint_dir
from actors.state._sqlite_format import (
    MARKER,
    StateDirError,
    _check_name,
    _component_dir,
    _component_name,
)
from topology._redact import mask_text, mask_uri

logger = logging.getLogger(__name__)

#: a generation is compacted into a new base once its deltas hold at least as many bytes
#: as its base (so the bytes uploaded stay within twice the bytes changed) and it has this
#: many deltas (so a small state is not uploaded whole at every checkpoint)
MIN_CHAIN = 8
#: ... or once it has this many deltas whatever their size (bounds a restore's reads)
MAX_CHAIN = 64


def _where(location: _fs.Location, path: str) -> str:
    """``path`` on ``location``'s filesystem as a message names it."""
    if location.is_local:
        return path
    return f"{location.filesystem.type_name}://{path}"


def read_task(location: _fs.Location, folder: str, gens: dict[int, dict],
              checkpoint_id: int) -> tuple[int | None, dict[bytes, tuple[int, bytes]],
                                           dict[int, int]]:
    """A task's state as of ``checkpoint_id`` from its objects under ``folder`` (listed
    as ``gens``, :func:`parse_task_listing`), changing nothing: ``(its global task id or
    None when it has no objects, {key: (group, value)}, {checkpoint id: entry count} of
    the deltas read)``. Blocks for one read per object of the generation read.

    Raises:
        CorruptCheckpoint: an object is torn, damaged or gone (deleted since listed).
    """
    g = serving_gen(gens, checkpoint_id)
    state: dict[bytes, tuple[int, bytes]] = {}
    counts: dict[int, int] = {}
    task = None
    if g is None:
        if gens and checkpoint_id < min(gens):
            check_not_collected(_where(location, folder), checkpoint_id, min(gens))
        return task, state, counts
    gen_dir = f"{folder}/{gen_name(g)}"

    def read(path: str, cid: int):
        try:
            data = _fs.read_bytes(location, path)
        except FileNotFoundError:
            raise CorruptCheckpoint(_where(location, path), cid, "the object is gone") \
                from None
        return read_state_object(data, _where(location, path), cid)

    if gens[g]["base"] is not None:
        task, entries = read(f"{gen_dir}/{BASE}", g)
        state = {k: (grp, v) for k, grp, v in entries}
    for cid in sorted(c for c in gens[g]["deltas"] if c <= checkpoint_id):
        task, entries = read(f"{gen_dir}/{delta_name(cid)}", cid)
        counts[cid] = len(entries)
        for k, grp, v in entries:
            if v is None:
                state.pop(k, None)
            else:
                state[k] = (grp, v)
    return task, state, counts


def list_files(location: _fs.Location, folder: str) -> list[tuple[str, int]]:
    """``(path relative to folder, size)`` of every file under ``folder`` (none if it is
    missing). One listing request."""
    infos = location.filesystem.get_file_info(
        pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return [(i.path[len(folder) + 1:], i.size or 0) for i in infos
            if i.type == pafs.FileType.File]


class ObjectTaskStore(TaskStore):
    """One task's checkpoints as objects under ``folder`` (``<dir>/<topology>/<submit
    id>/<component>/task-<index>``), its SQLite working copy at ``work_path``. Each
    method blocks for its requests: ``prepare`` one write (none when the checkpoint
    changed nothing), ``restore`` one listing, a read per object of the generation it
    reads and a delete per object above the checkpoint, ``collect`` a write when it
    compacts and a directory delete per generation it drops."""

    def __init__(self, location: _fs.Location, folder: str, task: int, work_path: str) -> None:
        self.location = location
        self.folder = folder
        self.path = _where(location, folder)  # (for messages)
        self.task = task
        self._work_path = work_path
        self._work = _LocalTaskStore(work_path)
        self._lock = threading.Lock()
        self._gens: dict[int, dict] | None = None  # listed lazily; then kept up to date
        self._gen = 0  # the generation new deltas go to
        self._latest: int | None = None  # the newest checkpoint prepared
        self._counts: dict[int, int] = {}
        self._restored: tuple[int, dict] | None = None  # (id, {key: (group, value)})
        self._dirs: set[int] = set()

    def _listing(self) -> dict[int, dict]:
        if self._gens is None:
            self._gens = parse_task_listing(list_files(self.location, self.folder))
            self._gen = max(self._gens, default=0)
        return self._gens

    def _write(self, gen: int, name: str, data: bytes) -> None:
        if self.location.is_local and gen not in self._dirs:  # (object stores have none)
            self.location.filesystem.create_dir(f"{self.folder}/{gen_name(gen)}",
                                                recursive=True)
            self._dirs.add(gen)
        _fs.write_bytes(self.location, f"{self.folder}/{gen_name(gen)}/{name}", data)

    def prepare(self, checkpoint_id: int, puts, deletes) -> int:
        entries = changes(puts, deletes)
        with self._lock:
            gens = self._listing()
            if self._gen and checkpoint_id <= self._gen:
                raise ValueError(f"{self.path}: checkpoint {checkpoint_id} cannot be written: "
                                 f"checkpoints up to {self._gen} are compacted into a base")
            self._restored = None
            self._work.prepare(checkpoint_id, puts, deletes)
            if entries:  # (a checkpoint that changed nothing writes no object)
                data = state_object("delta", checkpoint_id, self.task, entries)
                self._write(self._gen, delta_name(checkpoint_id), data)
                gens.setdefault(self._gen, {"base": None, "deltas": {}})["deltas"][
                    checkpoint_id] = len(data)
            self._counts[checkpoint_id] = len(entries)
            self._latest = checkpoint_id
        return len(entries)

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        with self._lock:
            base = self._gen if self._gen and self._listing()[self._gen]["base"] is not None \
                else None
            n = self._counts.get(checkpoint_id)
        if n is None and count == 0:
            return  # (it changed nothing, so it wrote no object)
        check_manifest(self.path, checkpoint_id, count, base, n)

    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        with self._lock:
            if checkpoint_id is None:
                self.location.filesystem.delete_dir_contents(self.folder, missing_dir_ok=True)
                self._gens, self._gen, self._counts, self._dirs = {}, 0, {}, set()
                self._restored, self._latest = None, None
                self._work.restore(None)
                return {}
            if self._restored is None or self._restored[0] != checkpoint_id:
                self._gens = None  # (listed anew: another process may have written)
                gens = self._listing()
                if gens and checkpoint_id < min(gens):  # (before anything is dropped)
                    check_not_collected(self.path, checkpoint_id, min(gens))
                self._drop_above(gens, checkpoint_id)
                task, state, counts = read_task(self.location, self.folder, gens,
                                                checkpoint_id)
                self._gen = max(gens, default=0)
                self._counts = counts
                self._latest = checkpoint_id
                self._work.restore(None)  # the working copy: the state as of the id
                self._work.prepare(checkpoint_id, [(g, k, v) for k, (g, v) in state.items()],
                                   [])
                self._work.collect(checkpoint_id)
                self._restored = (checkpoint_id, state)
            state = self._restored[1]
        return {k: v for k, (g, v) in state.items() if in_groups(g, groups)}

    def _drop_above(self, gens: dict[int, dict], checkpoint_id: int) -> None:
        """Delete what a rolled-back round wrote (ids above ``checkpoint_id``): a later
        checkpoint with a higher id must not read it."""
        fs = self.location.filesystem
        for g in [g for g in gens if g > checkpoint_id]:
            fs.delete_dir(f"{self.folder}/{gen_name(g)}")
            del gens[g]
        for g, gen in gens.items():
            for cid in [c for c in gen["deltas"] if c > checkpoint_id]:
                with contextlib.suppress(FileNotFoundError):
                    fs.delete_file(f"{self.folder}/{gen_name(g)}/{delta_name(cid)}")
                del gen["deltas"][cid]

    def collect(self, keep_from: int) -> None:
        with self._lock:
            gens = self._listing()
            latest = self._latest
            if latest is not None and latest > self._gen and self._due(gens.get(self._gen)):
                self._work.collect(latest)  # its base table: the state as of ``latest``
                with self._work._lock:
                    entries = [(bytes(k), g, bytes(v)) for k, g, v in self._work._con.execute(
                        "SELECT key, grp, value FROM base ORDER BY key")]
                data = state_object("base", latest, self.task, entries)
                self._write(latest, BASE, data)
                gens[latest] = {"base": len(data), "deltas": {}}
                self._gen = latest
            keep = serving_gen(gens, keep_from)  # GC: what no retained checkpoint reads
            for g in [g for g in gens if keep is not None and g < keep]:
                self.location.filesystem.delete_dir(f"{self.folder}/{gen_name(g)}")
                del gens[g]
                self._dirs.discard(g)

    @staticmethod
    def _due(gen: dict | None) -> bool:
        """Whether a generation is due for compaction (:data:`MIN_CHAIN`,
        :data:`MAX_CHAIN`)."""
        if gen is None or not gen["deltas"]:
            return False
        chain, size = len(gen["deltas"]), sum(gen["deltas"].values())
        return chain >= MAX_CHAIN or (chain >= MIN_CHAIN and size >= (gen["base"] or 0))

    def close(self) -> None:
        with self._lock:
            self._work.close()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(self._work_path + suffix)


class ObjectProvider(StateProvider):
    """Checkpoints as objects under a ``pyarrow.fs`` URI (the ``local`` provider with
    ``topology.state.checkpoint.dir: "s3://bucket/prefix?region=…"``): see the module.

    ``ObjectProvider(uri, topology_name, submit_id)`` resolves the URI and claims
    ``<uri>/<topology>/`` for the topology (its marker object; blocks for a read and, the
    first time, a write). A task's store is ``<component>/task-<index>/`` (by its index
    among its component's tasks, :meth:`task_store_at`), the log ``_log/``.

    Raises:
        StateDirError: the URI cannot be resolved (an unknown scheme, credentials in it),
            the store cannot be reached or written, the topology or submit name would
            leave the directory, or the directory belongs to another topology.
    """

    def __init__(self, uri: str, topology_name: str, submit_id: str) -> None:
        try:
            self.location = _fs.resolve(uri)
        except _fs.StorageError as e:
            raise StateDirError(mask_uri(uri), f"cannot be used: {e}") from None
        self.directory = self.location.target
        _check_name("topology name", topology_name, self.directory)
        _check_name("submit id", submit_id, f"{self.directory}/{topology_name}")
        self.topology_name, self.submit_id = topology_name, submit_id
        self.topology_dir = self.location.join(topology_name)
        self.root = self.location.join(topology_name, submit_id)
        self.work_dir = os.path.join(os.path.dirname(default_checkpoint_dir()),
                                     "storm-on-ray-work", topology_name, submit_id)
        self._open: list[ObjectTaskStore] = []
        self._lock = threading.Lock()
        try:
            self._claim()
        except (OSError, ValueError) as e:
            raise StateDirError(f"{self.directory} ({topology_name}/)",
                                f"cannot be read or written: "
                                f"{mask_text(f'{type(e).__name__}: {e}')}") from None

    def _claim(self) -> None:
        marker = f"{self.topology_dir}/{MARKER}"
        try:
            owner = _fs.read_bytes(self.location, marker).decode("utf-8", "replace")
        except FileNotFoundError:
            if self.location.is_local:
                self.location.filesystem.create_dir(self.topology_dir, recursive=True)
            _fs.publish(self.location, marker, (self.topology_name + "\n").encode())
            return
        if owner.removesuffix("\n") != self.topology_name:
            raise StateDirError(f"{self.directory} ({self.topology_name}/)",
                                f"belongs to topology {owner.strip()!r} (its {MARKER} says "
                                f"so), not {self.topology_name!r}: choose another "
                                f"topology.state.checkpoint.dir or topology name")

    def task_store(self, component: str, task: int) -> TaskStore:
        """:meth:`task_store_at` with ``task`` standing for its own index."""
        return self.task_store_at(component, task, task)

    def task_store_at(self, component: str, task: int, index: int) -> TaskStore:
        """The store of ``task`` (global id, recorded in its objects) of ``component``,
        kept under ``<component>/task-<index>/``, with a new working copy in this node's
        temporary directory (removed at close). Nothing is requested yet."""
        folder = f"{self.root}/{_component_dir(component)}/task-{int(index)}"
        os.makedirs(self.work_dir, exist_ok=True)
        work = os.path.join(self.work_dir, f"{_component_dir(component)}-{int(index)}-"
                                           f"{uuid.uuid4().hex[:8]}.db")
        store = ObjectTaskStore(self.location, folder, int(task), work)
        with self._lock:
            self._open.append(store)
        return store

    def checkpoint_log(self) -> CheckpointLog:
        return ObjectLog(self.location, self.root)

    def close(self) -> None:
        with self._lock:
            opened, self._open = self._open, []
        for s in opened:
            s.close()

    def read_raw(self, checkpoint_id: int | None = None) -> StateSnapshot:
        """See :meth:`StateProvider.read_raw`: one listing of the submit, then the objects
        of the generation each task's read needs; tasks by global id. Not pinned against
        collection: a read the running topology's collection overtakes fails its check
        and the committed checkpoint before is read (then the error is raised)."""
        committed = self.checkpoint_log().load()[2]
        candidates = [checkpoint_id] if checkpoint_id is not None else committed[::-1]
        files = list_files(self.location, self.root)
        tasks: dict[tuple[str, str], list] = {}
        for rel, size in files:
            parts = rel.split("/", 2)
            if len(parts) == 3 and parts[1].startswith("task-"):
                tasks.setdefault((parts[0], parts[1]), []).append((parts[2], size))

        def read(cid: int) -> dict:
            out: dict = {}
            for (comp, task_dir), names in sorted(tasks.items()):
                task, state, _ = read_task(self.location, f"{self.root}/{comp}/{task_dir}",
                                           parse_task_listing(names), cid)
                if task is not None:
                    out.setdefault(_component_name(comp), {})[task] = {
                        k: v for k, (_, v) in state.items()}
            return out

        state, used = read_newest_whole(candidates, read, lambda: None)
        snapshot = StateSnapshot(state or {})
        snapshot.checkpoint_id = used
        return snapshot

    def delete(self) -> None:
        """Close what this provider opened, delete the submit's objects, and the
        topology's marker if no other submit is left. Blocks for the deletes."""
        self.close()
        fs = self.location.filesystem
        with contextlib.suppress(FileNotFoundError):
            fs.delete_dir(self.root)
        left = fs.get_file_info(pafs.FileSelector(self.topology_dir, allow_not_found=True))
        if all(i.base_name == MARKER for i in left):
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(f"{self.topology_dir}/{MARKER}")
        with contextlib.suppress(OSError):
            os.rmdir(self.work_dir)
