"""The local state provider (``topology.state.provider: "local"``, the default):
:class:`LocalProvider`, its SQLite task stores and checkpoint log. The on-disk format (the
schema, the checks of a directory and of a checkpoint) is in
:mod:`actors.state._sqlite_format`, the offline reader in :mod:`actors.state._sqlite_reader`,
the rules every backend shares in :mod:`actors.state._common`. Import the public names from
:mod:`actors.state.providers`. This module does not import Ray.

Layout, one directory per submit of a topology::

    <topology.state.checkpoint.dir>/<topology>/.storm-on-ray-topology   the topology's name
    <topology.state.checkpoint.dir>/<topology>/<submit id>/_checkpoints.db   the rounds' log
    <topology.state.checkpoint.dir>/<topology>/<submit id>/<component>/task-<task>.db

(a component id is percent-quoted where it could not stand as one directory name).

Each task database is a **base + delta** layout, the one ``benchmarks/state_store.py``
measured best for SQLite (``docs/state.md``, "Storage"): ``base`` holds the state as of the
oldest checkpoint still restorable (the id in ``meta``; empty until the first collection),
``delta`` the keys each newer checkpoint changed, keyed ``(version, key)`` (a delete is a
row without a value), so a checkpoint appends its rows and garbage collection folds old
deltas into ``base``. Every
entry carries its key group; per checkpoint, ``versions`` holds the number of its entries
and a CRC-32 over them, so a restore detects a damaged checkpoint instead of loading it.
The log is the coordinator's record of the round's phase (Storm's ``CheckPointState``:
committed, preparing, committing) and of the last committed ids.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import threading
import uuid
from typing import Any

from actors.state._common import (
    KEEP_COMMITTED,
    StateSnapshot,
    changes,
    check_phase,
    entries_crc,
)
from actors.state._manifest import check_manifest, manifest_of, manifest_text
from actors.state._pins import lowest_pin_local
from actors.state._provider import (
    COMMIT_PHASES,
    CheckpointLog,
    CorruptCheckpoint,
    MissingState,
    StateProvider,
    TaskStore,
)
from actors.state._sqlite_format import (
    _LOG_SCHEMA,
    _MANIFEST_TABLE,
    _NO_BASE,
    _TASK_SCHEMA,
    LOG_FILE,
    MARKER,
    StateDirError,
    _base_id,
    _check_name,
    _check_version,
    _component_dir,
    _load_log,
    _open,
    _state_at,
)
from actors.state._sqlite_reader import read_raw
from topology._private import make_dirs, unsafe_reason, write_file


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on an exception."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __enter__(self) -> sqlite3.Connection:
        self.con.execute("BEGIN IMMEDIATE")
        return self.con

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.con.execute("COMMIT")
        elif self.con.in_transaction:  # (SQLite may have rolled it back already)
            self.con.execute("ROLLBACK")


class _LocalTaskStore(TaskStore):
    """One task's SQLite database, base + delta (see the module's docstring).

    ``prepare(k)`` replaces the ``delta`` rows and the ``versions`` record of ``k`` in one
    transaction. ``collect(keep_from)`` folds the deltas up to ``keep_from`` into ``base``
    (meta ``base`` becomes ``keep_from``) and drops the deltas and records below it; the
    rows of ``keep_from`` itself stay as its record, so restoring it is still checked.
    ``restore(n)`` drops the deltas above ``n``, checks ``n``'s own entries, and reads
    ``base`` plus the deltas in ``(base, n]``. A checkpoint at or below ``base`` cannot be
    prepared again (``ValueError``): what it changed is folded into ``base``.
    """

    def __init__(self, path: str, on_close=None, pinned=None) -> None:
        self.path = path
        #: () -> the lowest checkpoint id a reader pinned, or None (actors/state/_pins.py)
        self._pinned = pinned
        #: the database did not exist before this store opened it: a restore of a
        #: committed checkpoint before this store wrote one is refused (MissingState)
        self._created = not os.path.exists(path)
        self._con = _open(path, _TASK_SCHEMA)
        self._lock = threading.Lock()
        self._on_close = on_close

    def prepare(self, checkpoint_id: int, puts: list[tuple[int, bytes, bytes]],
                deletes: list[tuple[int, bytes]]) -> None:
        entries = changes(puts, deletes)
        n, crc = entries_crc(entries)
        with self._lock, _Transaction(self._con) as con:
            base = _base_id(con)
            if base is not None and checkpoint_id <= base:
                raise ValueError(f"{self.path}: checkpoint {checkpoint_id} cannot be written: "
                                 f"checkpoints up to {base} are collected into the base")
            con.execute("DELETE FROM delta WHERE version = ?", (checkpoint_id,))
            con.executemany("INSERT INTO delta (version, key, grp, value) VALUES (?, ?, ?, ?)",
                            ((checkpoint_id, k, g, v) for k, g, v in entries))
            con.execute("INSERT OR REPLACE INTO versions (version, n, crc) VALUES (?, ?, ?)",
                        (checkpoint_id, n, crc))
        return n

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        with self._lock:
            base = _base_id(self._con)
            row = self._con.execute("SELECT n FROM versions WHERE version = ?",
                                    (checkpoint_id,)).fetchone()
        check_manifest(self.path, checkpoint_id, count, base, None if row is None else row[0])

    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        with self._lock:
            try:
                with _Transaction(self._con) as con:
                    if checkpoint_id is None:
                        for table in ("base", "delta", "versions", "meta"):
                            con.execute(f"DELETE FROM {table}")
                        return {}
                    if self._created and _base_id(con) is None and con.execute(
                            "SELECT 1 FROM versions LIMIT 1").fetchone() is None:
                        raise MissingState(self.path, checkpoint_id,
                                           "the task's database did not exist when it "
                                           "started (on a lost node, or deleted); keep "
                                           "state where every node reads it: the redis "
                                           "provider")
                    self._created = False
                    con.execute("DELETE FROM delta WHERE version > ?", (checkpoint_id,))
                    con.execute("DELETE FROM versions WHERE version > ?", (checkpoint_id,))
                    base = _check_version(con, self.path, checkpoint_id)
                    return _state_at(con, checkpoint_id, base, groups)
            except sqlite3.OperationalError:  # locked, disk full, I/O: not the data's fault
                raise
            except sqlite3.DatabaseError as e:  # malformed, not a database
                raise CorruptCheckpoint(self.path, checkpoint_id, str(e)) from None

    def collect(self, keep_from: int) -> None:
        pin = self._pinned() if self._pinned is not None else None
        if pin is not None:  # a reader's: kept restorable until it releases the pin
            keep_from = min(keep_from, pin)
        with self._lock:
            with _Transaction(self._con) as con:
                base = _base_id(con)
                if base is not None and keep_from <= base:
                    return
                folded = [v for (v,) in con.execute(
                    "SELECT DISTINCT version FROM delta WHERE version > ? AND version <= ? "
                    "ORDER BY version", (_NO_BASE if base is None else base, keep_from))]
                for ver in folded:
                    # (WHERE: SQLite's upsert after a SELECT needs one to parse)
                    con.execute("INSERT INTO base (key, grp, value) SELECT key, grp, value "
                                "FROM delta WHERE version = ? AND value IS NOT NULL "
                                "ON CONFLICT (key) DO UPDATE SET grp = excluded.grp, "
                                "value = excluded.value", (ver,))
                    con.execute("DELETE FROM base WHERE key IN (SELECT key FROM delta "
                                "WHERE version = ? AND value IS NULL)", (ver,))
                # keep_from's own rows and record stay: restoring it checks them
                con.execute("DELETE FROM delta WHERE version < ?", (keep_from,))
                con.execute("DELETE FROM versions WHERE version < ?", (keep_from,))
                con.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('base', ?)",
                            (keep_from,))
            # copy the WAL into the database now, not during the next checkpoint's commit
            self._con.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        with self._lock:
            self._con.close()
        if self._on_close is not None:
            self._on_close(self)


class _LocalLog(CheckpointLog):
    def __init__(self, path: str) -> None:
        self.path = path
        self._con = _open(path, _LOG_SCHEMA)
        self._con.execute(_MANIFEST_TABLE)
        self._lock = threading.Lock()

    def load(self) -> tuple[str, int, list[int]]:
        with self._lock:
            return _load_log(self._con)

    def record(self, phase: str, checkpoint_id: int, manifest: dict | None = None) -> None:
        check_phase(phase)
        with self._lock, _Transaction(self._con) as con:
            con.execute("INSERT OR REPLACE INTO round (one, phase, ckpt) VALUES (0, ?, ?)",
                        (phase, checkpoint_id))
            if phase in COMMIT_PHASES:
                con.execute("INSERT OR IGNORE INTO committed (ckpt) VALUES (?)",
                            (checkpoint_id,))
                con.execute("DELETE FROM committed WHERE ckpt NOT IN (SELECT ckpt FROM "
                            "committed ORDER BY ckpt DESC LIMIT ?)", (KEEP_COMMITTED,))
                if manifest is not None:
                    con.execute("INSERT OR REPLACE INTO manifest (ckpt, tasks) VALUES (?, ?)",
                                (checkpoint_id, manifest_text(manifest)))
                con.execute("DELETE FROM manifest WHERE ckpt NOT IN (SELECT ckpt FROM "
                            "committed)")

    def manifest(self, checkpoint_id: int) -> dict[int, tuple[int, int]] | None:
        with self._lock:
            row = self._con.execute("SELECT tasks FROM manifest WHERE ckpt = ?",
                                    (checkpoint_id,)).fetchone()
        return manifest_of(None if row is None else row[0])

    def where(self) -> str:
        return self.path

    def close(self) -> None:
        with self._lock:
            self._con.close()


class LocalProvider(StateProvider):
    """Checkpoints in SQLite databases under ``directory`` (``topology.state.provider:
    "local"``, the default): embedded, no server, durable across the death of the process
    (an OS crash may lose the last commits). The files are on the machine of the process
    that writes them, so a task restarted on another machine does not find them (nor may
    they be on a network filesystem: SQLite's docs, "Write-Ahead Logging"); a provider of
    your own covers that.

    ``LocalProvider(directory, topology_name, submit_id)`` checks the directory at once:
    ``<directory>/<topology_name>/<submit_id>/`` is created (and the topology's directory
    marked with its name); databases are opened when asked for. A task's database is
    ``<component>/task-<task>.db`` there, the coordinator's log ``_checkpoints.db``.
    Operations block for their SQLite transaction (another connection's lock is waited for
    up to :data:`BUSY_TIMEOUT_S`). Several processes may open the same directory, each
    writing its own tasks' databases.

    Raises:
        StateDirError: a name with ``/`` or ``..``; the directory cannot be created or
            written; or ``<directory>/<topology_name>/`` belongs to another topology.
    """

    def __init__(self, directory: str | None, topology_name: str, submit_id: str) -> None:
        self.directory = os.path.abspath(directory or default_checkpoint_dir())
        _check_name("topology name", topology_name, self.directory)
        _check_name("submit id", submit_id, os.path.join(self.directory, topology_name))
        self.topology_name = topology_name
        self.submit_id = submit_id
        self.topology_dir = os.path.join(self.directory, topology_name)
        self.root = os.path.join(self.topology_dir, submit_id)
        self._open: list[_LocalTaskStore | _LocalLog] = []
        self._lock = threading.Lock()
        _check_private(self.directory)
        self._claim_topology_dir()
        try:
            make_dirs(self.root)
            fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise StateDirError(self.root, f"cannot be created or written ({e})") from None
        _check_private(self.root)  # (a submit directory planted before us)

    def _claim_topology_dir(self) -> None:
        marker = os.path.join(self.topology_dir, MARKER)
        try:
            make_dirs(self.topology_dir)
            _check_private(self.topology_dir)  # (one planted before us)
            with open(marker, encoding="utf-8") as f:
                owner = f.read()
        except FileNotFoundError:
            owner = None
        except OSError as e:
            raise StateDirError(self.topology_dir,
                                f"cannot be created or read ({e})") from None
        if owner is not None:
            if owner.removesuffix("\n") != self.topology_name:
                raise StateDirError(self.topology_dir,
                                    f"belongs to topology {owner.strip()!r} (its {MARKER} "
                                    f"says so), not {self.topology_name!r}: choose another "
                                    f"topology.state.checkpoint.dir or topology name")
            return
        # written whole, then renamed: a concurrent reader sees no marker or all of it
        tmp = os.path.join(self.topology_dir, f"{MARKER}.{uuid.uuid4().hex}.tmp")
        try:
            write_file(tmp, (self.topology_name + "\n").encode())
            os.replace(tmp, marker)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StateDirError(self.topology_dir,
                                f"cannot be created or written ({e})") from None

    def task_store(self, component: str, task: int) -> TaskStore:
        """A new connection to the database of ``task`` of ``component`` (created empty if
        new; close it when done).

        Raises:
            StateDirError: the database cannot be created or opened.
        """
        folder = os.path.join(self.root, _component_dir(component))
        try:
            make_dirs(folder)
        except OSError as e:
            raise StateDirError(folder, f"cannot be created ({e})") from None
        store = _LocalTaskStore(os.path.join(folder, f"task-{int(task)}.db"),
                                on_close=self._forget,
                                pinned=lambda: lowest_pin_local(self.root))
        with self._lock:
            self._open.append(store)
        return store

    def checkpoint_log(self) -> CheckpointLog:
        """A new connection to the coordinator's log (``_checkpoints.db``).

        Raises:
            StateDirError: the database cannot be created or opened.
        """
        log_ = _LocalLog(os.path.join(self.root, LOG_FILE))
        with self._lock:
            self._open.append(log_)
        return log_

    def _forget(self, store: Any) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._open.remove(store)

    def close(self) -> None:
        """Close every store and log this provider opened (the data stays)."""
        with self._lock:
            opened, self._open = self._open, []
        for s in opened:
            s.close()

    def read_raw(self, checkpoint_id: int | None = None) -> StateSnapshot:
        """See :meth:`StateProvider.read_raw`: the offline reader
        (:func:`actors.state._sqlite_reader.read_raw`) on this submit's directory, through
        read-only connections. Raises as it does."""
        return read_raw(self.root, checkpoint_id)

    def delete(self) -> None:
        """Close what this provider opened, remove the submit's directory, and the
        topology's directory if no other submit is left in it. For after the tasks have
        stopped: a connection of another process to a removed database writes into the
        void. Blocks for the removal; a file that cannot be removed is left."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
        marker = os.path.join(self.topology_dir, MARKER)
        try:
            if set(os.listdir(self.topology_dir)) - {MARKER}:
                return
            os.unlink(marker)
            os.rmdir(self.topology_dir)
        except FileNotFoundError:
            pass
        except OSError:  # another submit arrived meanwhile: it keeps the marker
            if os.path.isdir(self.topology_dir) and not os.path.exists(marker):
                self._claim_topology_dir()


def default_checkpoint_dir() -> str:
    """``storm-on-ray-state-<uid>`` in the system's temporary directory (``tempfile
    .gettempdir()``, e.g. ``/tmp/storm-on-ray-state-1000``), one per user, created ``0700``
    when first used. Not inside Ray's temporary directory (``/tmp/ray``), which Ray makes
    writable by every local user without the sticky bit, so any of them could read or
    plant checkpoints there. A directory of that name owned by another user is refused
    when the provider opens it (:func:`_check_private`). See docs/security.md."""
    return os.path.join(tempfile.gettempdir(), f"storm-on-ray-state-{os.geteuid()}")


def _check_private(directory: str) -> None:
    """Raise :class:`StateDirError` naming ``directory`` and the fix unless it is private
    to this user (:func:`topology._private.unsafe_reason`)."""
    why = unsafe_reason(directory)
    if why is not None:
        raise StateDirError(directory, f"not private to this user: {why}; use a directory "
                                       f"only you can write (mkdir -m 0700 DIR, or chown "
                                       f"and chmod 0700 this one) as "
                                       f"topology.state.checkpoint.dir")
