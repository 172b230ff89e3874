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
    chain_head,
    delta_name,
    gen_name,
    parse_task_listing,
    read_state_object,
    state_object,
)
from actors.state._object_log import ObjectLog
from actors.state._pins import read_newest_whole
from actors.state._provider import (
    CheckpointLog,
    CorruptCheckpoint,
    MissingState,
    StateProvider,
    TaskStore,
)
from actors.state._sqlite import _check_private, _LocalTaskStore, default_checkpoint_dir
from actors.state._sqlite_format import (
    MARKER,
    StateDirError,
    _check_name,
    _component_dir,
    _component_name,
)
from topology._private import make_dirs
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


def read_task(location: _fs.Location, folder: str, head: tuple[int, int] | None,
              checkpoint_id: int) -> tuple[int | None, dict[bytes, tuple[int, bytes]],
                                           dict[int, tuple[int, int | None]]]:
    """A task's state from its objects under ``folder``, walking its chain back from
    ``head`` (``(generation, checkpoint id)``, :func:`chain_head`) through each delta's
    ``prev`` to a base or the first delta, changing nothing: ``(its global task id or
    None when ``head`` is None, {key: (group, value)}, the chain {checkpoint id:
    (generation, entry count, None for a base)})``. Objects off the chain are never
    read. Blocks for one read per object of the chain.

    Raises:
        CorruptCheckpoint: an object of the chain is torn, damaged or gone.
    """
    chain: dict[int, tuple[int, int | None]] = {}
    objects = []
    task = None
    at = head
    while at is not None:
        g, cid = at
        path = f"{folder}/{gen_name(g)}/{BASE if cid == g else delta_name(cid)}"
        try:
            data = _fs.read_bytes(location, path)
        except FileNotFoundError:
            raise CorruptCheckpoint(_where(location, path), checkpoint_id,
                                    f"the object of checkpoint {cid} its chain names is "
                                    f"gone") from None
        t, entries, prev = read_state_object(data, _where(location, path), cid)
        task = t if task is None else task
        if cid == g:
            chain[cid] = (g, None)
            prev = None
        else:
            chain[cid] = (g, len(entries))
        if prev is not None and (prev[1] >= cid or prev[1] in chain):
            raise CorruptCheckpoint(_where(location, path), checkpoint_id,
                                    f"its chain goes from {cid} to {prev[1]}")
        objects.append(entries)
        at = prev
    state: dict[bytes, tuple[int, bytes]] = {}
    for entries in reversed(objects):  # (the base or first delta first)
        for k, grp, v in entries:
            if v is None:
                state.pop(k, None)
            else:
                state[k] = (grp, v)
    return task, state, chain


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
    method blocks for its requests: ``prepare`` one write (an empty delta when the
    checkpoint changed nothing), ``restore`` one listing, a read per object of its chain
    and a delete per object above the checkpoint, ``collect`` a write when it
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
        #: this task's chain: {checkpoint id: (generation, entry count; None: the base)}
        self._chain: dict[int, tuple[int, int | None]] = {}
        self._restored: tuple[int, dict] | None = None  # (id, {key: (group, value)})
        self._dirs: set[int] = set()

    def _listing(self) -> dict[int, dict]:
        if self._gens is None:
            self._gens = parse_task_listing(list_files(self.location, self.folder))
        return self._gens

    def _write(self, gen: int, name: str, data: bytes) -> None:
        if self.location.is_local and gen not in self._dirs:  # (object stores have none)
            _fs.make_dir(self.location, f"{self.folder}/{gen_name(gen)}")
            self._dirs.add(gen)
        # (whole or not at all: a kill mid-write leaves a temporary name, never a torn object)
        _fs.publish(self.location, f"{self.folder}/{gen_name(gen)}/{name}", data)

    def prepare(self, checkpoint_id: int, puts, deletes) -> int:
        entries = changes(puts, deletes)
        with self._lock:
            gens = self._listing()
            if self._gen and checkpoint_id <= self._gen:
                raise ValueError(f"{self.path}: checkpoint {checkpoint_id} cannot be written: "
                                 f"checkpoints up to {self._gen} are compacted into a base")
            self._restored = None
            self._work.prepare(checkpoint_id, puts, deletes)
            # (written even when it changed nothing: the commit manifest names it, so a
            # restore finds the newest object of the chain by name)
            prev = max(((g, c) for c, (g, _) in self._chain.items() if c < checkpoint_id),
                       key=lambda x: x[1], default=None)
            data = state_object("delta", checkpoint_id, self.task, entries, prev)
            self._write(self._gen, delta_name(checkpoint_id), data)
            gens.setdefault(self._gen, {"base": None, "deltas": {}})["deltas"][
                checkpoint_id] = len(data)
            for c in [c for c in self._chain if c >= checkpoint_id]:  # (written again)
                del self._chain[c]
            self._chain[checkpoint_id] = (self._gen, len(entries))
            self._latest = checkpoint_id
        return len(entries)

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        with self._lock:
            base = max((c for c, (_, n) in self._chain.items() if n is None), default=None)
            n = self._chain.get(checkpoint_id, (None, None))[1]
        check_manifest(self.path, checkpoint_id, count, base, n)

    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        return self.restore_checked(checkpoint_id, groups, None)

    def restore_checked(self, checkpoint_id: int | None, groups: range | None,
                        named: tuple[int, int] | None) -> dict[bytes, bytes]:
        """:meth:`restore`, the chain read back from the object the commit manifest's
        entry ``named`` (``(checkpoint id, entry count)``) names, then checked against
        it; without an entry, from the newest object listed at or below the id.

        Raises:
            MissingState: the named object is not listed (the task's objects are gone,
                or not visible from this node).
            CorruptCheckpoint: an object of the chain is torn, damaged or gone, or
                disagrees with the entry.
        """
        with self._lock:
            if checkpoint_id is None:
                self.location.filesystem.delete_dir_contents(self.folder, missing_dir_ok=True)
                self._gens, self._gen, self._chain, self._dirs = {}, 0, {}, set()
                self._restored, self._latest = None, None
                self._work.restore(None)
                return {}
            if self._restored is None or self._restored[0] != checkpoint_id:
                self._gens = None  # (listed anew: another process may have written)
                gens = self._listing()
                if gens and checkpoint_id < min(gens):  # (before anything is dropped)
                    check_not_collected(self.path, checkpoint_id, min(gens))
                self._drop_above(gens, checkpoint_id)
                head = chain_head(gens, checkpoint_id,
                                  None if named is None else min(named[0], checkpoint_id))
                if head is None and named is not None:
                    raise MissingState(self.path, checkpoint_id,
                                       f"the commit manifest names its object of checkpoint "
                                       f"{named[0]}, and none is there (its objects are "
                                       f"gone, or not visible from this node)")
                task, state, chain = read_task(self.location, self.folder, head,
                                               checkpoint_id)
                self._chain = chain
                self._gen = head[0] if head is not None else 0
                self._latest = checkpoint_id
                self._work.restore(None)  # the working copy: the state as of the id
                self._work.prepare(checkpoint_id, [(g, k, v) for k, (g, v) in state.items()],
                                   [])
                self._work.collect(checkpoint_id)
                self._restored = (checkpoint_id, state)
            state = self._restored[1]
        if named is not None:
            self.check_prepared(*named)
        return {k: v for k, (g, v) in state.items() if in_groups(g, groups)}

    def _drop_above(self, gens: dict[int, dict], checkpoint_id: int) -> None:
        """Delete what a rolled-back round wrote (ids above ``checkpoint_id``): tidying
        only, as a restore reads its chain, never what is listed."""
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
                self._chain[latest] = (latest, None)
            # GC: the generations below the one the chain of ``keep_from`` starts in
            # (what no retained checkpoint reads; strays there go with them)
            serving = [c for c in self._chain if c <= keep_from]
            keep = self._chain[max(serving)][0] if serving else None
            for c in [c for c, (g, _) in self._chain.items() if keep is not None and g < keep]:
                del self._chain[c]
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
        # (the working copies: in this user's private state directory, never a shared
        # one another local user could plant, topology/_private.py)
        self.work_dir = os.path.join(default_checkpoint_dir(), "work", topology_name,
                                     submit_id)
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
                _fs.make_dir(self.location, self.topology_dir)
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
        make_dirs(self.work_dir)
        _check_private(self.work_dir)
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

        log = self.checkpoint_log()

        def read(cid: int) -> dict:
            named = log.manifest(cid) or {}
            out: dict = {}
            for (comp, task_dir), names in sorted(tasks.items()):
                folder = f"{self.root}/{comp}/{task_dir}"
                gens = parse_task_listing(names)
                head = chain_head(gens, cid)
                if head is None:
                    continue
                task, state, chain = read_task(self.location, folder, head, cid)
                entry = named.get(task)
                if entry is not None and entry[0] not in chain:  # (a stray was newest)
                    head = chain_head(gens, cid, entry[0])
                    if head is None:
                        raise MissingState(_where(self.location, folder), cid,
                                           f"the commit manifest names its object of "
                                           f"checkpoint {entry[0]}, and none is there")
                    task, state, chain = read_task(self.location, folder, head, cid)
                if entry is not None:
                    check_manifest(_where(self.location, folder), *entry,
                                   max((c for c, (_, n) in chain.items() if n is None),
                                       default=None),
                                   chain.get(entry[0], (None, None))[1])
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
