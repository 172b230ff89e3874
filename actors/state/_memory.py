"""The memory state provider (``topology.state.provider: "memory"``):
:class:`MemoryProvider`, its task stores and checkpoint log, kept in dicts. Import it from
:mod:`actors.state.providers`. This module does not import Ray.
"""

from __future__ import annotations

import threading

from actors.state._common import (
    KEEP_COMMITTED,
    StateSnapshot,
    changes,
    check_not_collected,
    check_phase,
    in_groups,
)
from actors.state._manifest import check_manifest
from actors.state._provider import (
    COMMIT_PHASES,
    COMMITTED,
    CheckpointLog,
    StateProvider,
    TaskStore,
)


class _MemoryTaskStore(TaskStore):
    """A task's versions in dicts: ``key → {checkpoint id: (group, value or None)}``."""

    def __init__(self) -> None:
        self._rows: dict[bytes, dict[int, tuple[int, bytes | None]]] = {}
        self._by_ver: dict[int, set[bytes]] = {}
        self._collected = 0
        self._lock = threading.Lock()

    def prepare(self, checkpoint_id: int, puts: list[tuple[int, bytes, bytes]],
                deletes: list[tuple[int, bytes]]) -> None:
        entries = changes(puts, deletes)
        with self._lock:
            self._drop_version(checkpoint_id)
            keys = self._by_ver[checkpoint_id] = set()
            for key, grp, value in entries:
                self._rows.setdefault(key, {})[checkpoint_id] = (grp, value)
                keys.add(key)
        return len(entries)

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        with self._lock:
            keys = self._by_ver.get(checkpoint_id)
            check_manifest("memory", checkpoint_id, count, self._collected or None,
                            None if keys is None else len(keys))

    def _drop_version(self, ver: int) -> None:
        for key in self._by_ver.pop(ver, ()):
            versions = self._rows[key]
            del versions[ver]
            if not versions:
                del self._rows[key]

    def state_at(self, checkpoint_id: int) -> dict[bytes, bytes]:
        """Every entry as of ``checkpoint_id``, changing nothing."""
        with self._lock:
            check_not_collected("memory", checkpoint_id, self._collected)
            out = {}
            for key, versions in self._rows.items():
                below = [v for v in versions if v <= checkpoint_id]
                if below and versions[max(below)][1] is not None:
                    out[key] = versions[max(below)][1]
            return out

    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        with self._lock:
            if checkpoint_id is None:
                self._rows, self._by_ver, self._collected = {}, {}, 0
                return {}
            check_not_collected("memory", checkpoint_id, self._collected)
            for ver in [v for v in self._by_ver if v > checkpoint_id]:
                self._drop_version(ver)
            out = {}
            for key, versions in self._rows.items():
                grp, value = versions[max(versions)]
                if value is not None and in_groups(grp, groups):
                    out[key] = value
            return out

    def collect(self, keep_from: int) -> None:
        with self._lock:
            for key in list(self._rows):
                versions = self._rows[key]
                base = max((v for v in versions if v <= keep_from), default=None)
                if base is None:
                    continue
                for ver in [v for v in versions if v < base]:
                    del versions[ver]
                    self._by_ver[ver].discard(key)
                if base < keep_from and versions[base][1] is None:
                    del versions[base]
                    self._by_ver[base].discard(key)
                if not versions:
                    del self._rows[key]
            for ver in [v for v, keys in self._by_ver.items() if v < keep_from and not keys]:
                del self._by_ver[ver]
            self._collected = max(self._collected, keep_from)

    def close(self) -> None:
        """Nothing to release (the data lives as long as its provider)."""


class _MemoryLog(CheckpointLog):
    def __init__(self) -> None:
        self._phase, self._id, self._committed = COMMITTED, 0, []
        self._manifests: dict[int, dict] = {}
        self._lock = threading.Lock()

    def load(self) -> tuple[str, int, list[int]]:
        with self._lock:
            return self._phase, self._id, list(self._committed)

    def record(self, phase: str, checkpoint_id: int, manifest: dict | None = None) -> None:
        check_phase(phase)
        with self._lock:
            self._phase, self._id = phase, checkpoint_id
            if phase in COMMIT_PHASES and checkpoint_id not in self._committed:
                self._committed = sorted([*self._committed, checkpoint_id])[-KEEP_COMMITTED:]
            if phase in COMMIT_PHASES and manifest is not None:
                self._manifests[checkpoint_id] = dict(manifest)
            self._manifests = {c: m for c, m in self._manifests.items()
                               if c in self._committed}

    def manifest(self, checkpoint_id: int) -> dict[int, tuple[int, int]] | None:
        with self._lock:
            m = self._manifests.get(checkpoint_id)
            return None if m is None else dict(m)


class MemoryProvider(StateProvider):
    """Checkpoints in this object's memory (``topology.state.provider: "memory"``): the
    same versions, rollback and collection as :class:`LocalProvider`, lost with the object
    (or its process). For tests, and for state a job can afford to lose.

    ``task_store`` of the same task returns the same store, so a task that asks again finds
    its checkpoints. Nothing is shared between two providers, whatever their names.
    """

    def __init__(self, topology_name: str = "", submit_id: str = "") -> None:
        self.topology_name = topology_name
        self.submit_id = submit_id
        self._stores: dict[tuple[str, int], _MemoryTaskStore] = {}
        self._log = _MemoryLog()
        self._lock = threading.Lock()

    def task_store(self, component: str, task: int) -> TaskStore:
        with self._lock:
            store = self._stores.get((component, task))
            if store is None:
                store = self._stores[(component, task)] = _MemoryTaskStore()
            return store

    def checkpoint_log(self) -> CheckpointLog:
        return self._log

    def delete(self) -> None:
        """Forget every task's checkpoints and the log."""
        with self._lock:
            self._stores.clear()
            self._log = _MemoryLog()

    def read_raw(self, checkpoint_id: int | None = None) -> StateSnapshot:
        """See :meth:`StateProvider.read_raw`: every store of this provider object (only
        the process holding it sees them), as of ``checkpoint_id`` or the last committed
        one; no fallback (memory holds no damaged checkpoint)."""
        committed = self._log.load()[2]
        cid = checkpoint_id if checkpoint_id is not None else (
            committed[-1] if committed else None)
        with self._lock:
            stores = sorted(self._stores.items())
        state: dict = {}
        for (component, task), store in stores:
            state.setdefault(component, {})[task] = {} if cid is None else store.state_at(cid)
        snapshot = StateSnapshot(state)
        snapshot.checkpoint_id = cid
        return snapshot

    def close(self) -> None:
        """Nothing to release."""
