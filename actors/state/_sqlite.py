"""The local state provider (``topology.state.provider: "local"``, the default):
:class:`LocalProvider`, its SQLite task stores and checkpoint log, the checks of its
directory (:class:`StateDirError`), the schema and the per-checkpoint CRC-32. Import the
public names from :mod:`actors.state.providers`, whose offline reader reads these databases
with this module's checks; :mod:`actors.state._memory` shares the helpers on a checkpoint's
entries, key groups and phases. This module does not import Ray.

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
import struct
import sys
import tempfile
import threading
import uuid
import zlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

from actors.state._manifest import check_manifest, manifest_of, manifest_text
from actors.state._pins import lowest_pin_local
from actors.state._provider import (
    COMMIT_PHASES,
    COMMITTED,
    COMMITTING,
    FINAL,
    PREPARING,
    CheckpointLog,
    CorruptCheckpoint,
    MissingState,
    StateProvider,
    TaskStore,
)

#: the file in ``<dir>/<topology>/`` that names the topology the directory belongs to
MARKER = ".storm-on-ray-topology"
#: the coordinator's log, in a submit's directory
LOG_FILE = "_checkpoints.db"
#: how long a writer waits for another connection's lock on the same database (seconds)
BUSY_TIMEOUT_S = 30.0
#: the schema version of the local provider's databases (``PRAGMA user_version``); 2: task
#: databases in base + delta (1, rows keyed ``(key, version)``, is refused)
SCHEMA_VERSION = 2

_PHASES = (COMMITTED, PREPARING, COMMITTING, FINAL)
#: how many committed ids the log keeps (the last, and the one before to fall back to)
_KEEP_COMMITTED = 2
_ENTRY = struct.Struct(">qqq")  # key group, key length, value length (-1: a delete)
_NO_BASE = -(2 ** 63)  # below every checkpoint id (SQLite's smallest integer)


class StateDirError(ValueError):
    """The checkpoint directory cannot be used: it cannot be created or written, it belongs
    to another topology, or a name would leave it. ``path`` is the directory in question
    (also named in the message)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"state directory {path}: {why}")
        self.path = path


def _entries_crc(entries: Iterable[tuple[bytes, int, bytes | None]]) -> tuple[int, int]:
    """``(count, CRC-32)`` of ``(key, key group, value or None)`` entries in key order."""
    crc = n = 0
    for key, grp, value in entries:
        crc = zlib.crc32(_ENTRY.pack(grp, len(key), -1 if value is None else len(value)), crc)
        crc = zlib.crc32(key, crc)
        if value is not None:
            crc = zlib.crc32(value, crc)
        n += 1
    return n, crc


def _changes(puts: list[tuple[int, bytes, bytes]],
             deletes: list[tuple[int, bytes]]) -> list[tuple[bytes, int, bytes | None]]:
    """One checkpoint's entries ``(key, group, value or None)`` sorted by key; a key given
    twice keeps its last put, and a delete of a key also put wins."""
    by_key: dict[bytes, tuple[int, bytes | None]] = {}
    for grp, key, value in puts:
        by_key[bytes(key)] = (grp, bytes(value))
    for grp, key in deletes:
        by_key[bytes(key)] = (grp, None)
    return [(k, g, v) for k, (g, v) in sorted(by_key.items())]


def _in_groups(grp: int, groups: range | None) -> bool:
    return groups is None or grp in groups


def _check_name(what: str, name: Any, parent: str) -> str:
    """``name`` as one path component under ``parent``, or :class:`StateDirError`."""
    if (not isinstance(name, str) or not name or ".." in name or "/" in name
            or "\0" in name or name == "." or (os.altsep and os.altsep in name)):
        raise StateDirError(os.path.join(parent, str(name)),
                            f"the {what} {name!r} cannot name a directory: it must be a "
                            f"non-empty string without '/' or '..'")
    return name


def _component_dir(component: str) -> str:
    """The directory name of ``component`` (reversible: :func:`_component_name`): its id,
    percent-quoted where a character could not stand in one path component, and a leading
    ``.`` or ``_`` quoted so no id can name a hidden file or the log."""
    if not isinstance(component, str) or not component:
        raise ValueError(f"component id must be a non-empty string, got {component!r}")
    name = quote(component, safe="")
    if name[0] in "._":
        name = f"%{ord(name[0]):02X}{name[1:]}"
    return name


def _component_name(dirname: str) -> str:
    return unquote(dirname)


def _check_phase(phase: str) -> None:
    if phase not in _PHASES:
        raise ValueError(f"checkpoint phase must be one of {', '.join(_PHASES)}, got {phase!r}")


_TASK_SCHEMA = """
CREATE TABLE IF NOT EXISTS base (  -- the state as of meta 'base'
    key BLOB PRIMARY KEY, grp INTEGER NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delta (  -- the keys each checkpoint changed
    version INTEGER NOT NULL, key BLOB NOT NULL, grp INTEGER NOT NULL,
    value BLOB,  -- NULL: the key was deleted in this checkpoint
    PRIMARY KEY (version, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (version INTEGER PRIMARY KEY, n INTEGER NOT NULL,
                                     crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

_LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS round (one INTEGER PRIMARY KEY CHECK (one = 0),
                                  phase TEXT NOT NULL, ckpt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS committed (ckpt INTEGER PRIMARY KEY);
"""
#: the commit manifests of the committed ids kept (created in a log of before it too)
_MANIFEST_TABLE = "CREATE TABLE IF NOT EXISTS manifest (ckpt INTEGER PRIMARY KEY, tasks TEXT)"


#: per connection: WAL journal; ``synchronous=NORMAL`` (a commit survives the death of the
#: process; SQLite's docs, "Write-Ahead Logging" and "PRAGMA synchronous": an OS crash or
#: power loss may undo the last commits); the ``-wal`` file cut back to 16 MiB after a WAL
#: checkpoint; automatic WAL checkpoints only as a backstop, since each garbage collection
#: ends with one (so that a checkpoint's commit does not pay for it)
_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
            "PRAGMA journal_size_limit=16777216", "PRAGMA wal_autocheckpoint=10000")


def _check_schema(con: sqlite3.Connection, path: str) -> int:
    """The schema version of ``path`` (0: new), or :class:`StateDirError` for another."""
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StateDirError(path, f"written by a newer storm-on-ray (schema {version})")
    if 0 < version < SCHEMA_VERSION:
        raise StateDirError(path, f"written by an older storm-on-ray (schema {version}, "
                                  f"this one reads schema {SCHEMA_VERSION})")
    return version


def _open(path: str, schema: str) -> sqlite3.Connection:
    """A read-write connection to ``path`` (created with ``schema`` if new), with
    :data:`_PRAGMAS`, transactions begun explicitly."""
    try:
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                              check_same_thread=False)
    except sqlite3.Error as e:
        raise StateDirError(path, f"cannot open the database ({e})") from None
    try:
        version = _check_schema(con, path)
        for pragma in _PRAGMAS:
            con.execute(pragma)
        if version < SCHEMA_VERSION:
            con.execute("BEGIN IMMEDIATE")
            for statement in schema.split(";"):
                if statement.strip():
                    con.execute(statement)
            con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            con.execute("COMMIT")
    except sqlite3.Error as e:
        con.close()
        raise StateDirError(path, f"not a usable state database ({e})") from None
    except BaseException:
        con.close()
        raise
    return con


def _base_id(con: sqlite3.Connection) -> int | None:
    """The checkpoint id ``base`` is at (None: never collected)."""
    row = con.execute("SELECT value FROM meta WHERE name = 'base'").fetchone()
    return None if row is None else row[0]


def _check_version(con: sqlite3.Connection, path: str, checkpoint_id: int) -> int | None:
    """Raise :class:`CorruptCheckpoint` unless the entries of ``checkpoint_id`` match its
    record (count and CRC-32), or the checkpoint is below ``base`` (collected). A
    checkpoint with no record and no entries wrote nothing here (a store newer than it):
    not corrupt. Returns the base id."""
    base = _base_id(con)
    if base is not None and checkpoint_id < base:
        raise CorruptCheckpoint(path, checkpoint_id,
                                f"collected: only checkpoints >= {base} can be restored")
    n, crc = _entries_crc(con.execute(
        "SELECT key, grp, value FROM delta WHERE version = ? ORDER BY key", (checkpoint_id,)))
    record = con.execute("SELECT n, crc FROM versions WHERE version = ?",
                         (checkpoint_id,)).fetchone()
    if record is None:
        if n:
            raise CorruptCheckpoint(path, checkpoint_id,
                                    f"{n} entries without the checkpoint's record")
        return base
    if record[0] != n:
        raise CorruptCheckpoint(path, checkpoint_id,
                                f"{n} entries where {record[0]} were written")
    if record[1] != crc:
        raise CorruptCheckpoint(path, checkpoint_id,
                                f"CRC-32 {crc:08x} of its entries, {record[1]:08x} written")
    return base


def _state_at(con: sqlite3.Connection, checkpoint_id: int, base: int | None,
              groups: range | None) -> dict[bytes, bytes]:
    """``base`` (the table, at checkpoint ``base``), then the deltas above it up to
    ``checkpoint_id`` in version order: a put sets the key, a delete removes it (as does a
    put into a group not asked for, so a key's latest entry decides its group)."""
    sql = "SELECT key, grp, value FROM base"
    args: tuple = ()
    if groups is not None and groups.step == 1:
        sql += " WHERE grp >= ? AND grp < ?"
        args = (groups.start, groups.stop)
    out = {key: value for key, grp, value in con.execute(sql, args)
           if _in_groups(grp, groups)}
    for key, grp, value in con.execute(
            "SELECT key, grp, value FROM delta WHERE version > ? AND version <= ? "
            "ORDER BY version", (_NO_BASE if base is None else base, checkpoint_id)):
        if value is None or not _in_groups(grp, groups):
            out.pop(key, None)
        else:
            out[key] = value
    return out


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
        entries = _changes(puts, deletes)
        n, crc = _entries_crc(entries)
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
        _check_phase(phase)
        with self._lock, _Transaction(self._con) as con:
            con.execute("INSERT OR REPLACE INTO round (one, phase, ckpt) VALUES (0, ?, ?)",
                        (phase, checkpoint_id))
            if phase in COMMIT_PHASES:
                con.execute("INSERT OR IGNORE INTO committed (ckpt) VALUES (?)",
                            (checkpoint_id,))
                con.execute("DELETE FROM committed WHERE ckpt NOT IN (SELECT ckpt FROM "
                            "committed ORDER BY ckpt DESC LIMIT ?)", (_KEEP_COMMITTED,))
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


def _load_log(con: sqlite3.Connection) -> tuple[str, int, list[int]]:
    row = con.execute("SELECT phase, ckpt FROM round WHERE one = 0").fetchone()
    ids = [r[0] for r in con.execute("SELECT ckpt FROM committed ORDER BY ckpt")]
    return (row[0], row[1], ids) if row else (COMMITTED, 0, ids)


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
        self._claim_topology_dir()
        try:
            os.makedirs(self.root, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise StateDirError(self.root, f"cannot be created or written ({e})") from None

    def _claim_topology_dir(self) -> None:
        marker = os.path.join(self.topology_dir, MARKER)
        try:
            os.makedirs(self.topology_dir, exist_ok=True)
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
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(self.topology_name + "\n")
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
            os.makedirs(folder, exist_ok=True)
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
    """``storm-on-ray-state`` beside Ray's session directories: in Ray's temp directory of
    this node when Ray is initialised in this process (``ray.get_runtime_context()
    .get_temp_dir()``), else ``<system temp>/ray/storm-on-ray-state`` (Ray's default temp
    directory). Does not import Ray."""
    ray = sys.modules.get("ray")
    temp = None
    if ray is not None:
        try:
            if ray.is_initialized():
                try:
                    temp = ray.get_runtime_context().get_temp_dir()
                except AttributeError:  # a Ray without it
                    temp = ray._private.worker._global_node.get_temp_dir_path()
        except Exception:  # noqa: BLE001 (any failure: the default path)
            temp = None
    if not temp:
        temp = os.path.join(tempfile.gettempdir(), "ray")
    return os.path.join(temp, "storm-on-ray-state")
