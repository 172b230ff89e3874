"""The local provider's on-disk format (``topology.state.provider: "local"``): the names
of its files and directories, the SQLite schema of a task database and of a submit's log,
the connection settings, the checks of a database's schema and of a stored checkpoint
(count and CRC-32), and the base + delta read of a task's state as of one checkpoint. The
writer (:mod:`actors.state._sqlite`) and the offline reader
(:mod:`actors.state._sqlite_reader`) both build on it; the layout is described in
:mod:`actors.state._sqlite`. This module does not import Ray.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import quote, unquote

from actors.state._common import (
    apply_delta,
    check_not_collected,
    check_version,
    entries_crc,
    in_groups,
)
from actors.state._provider import COMMITTED
from topology._private import prepare_file

#: the file in ``<dir>/<topology>/`` that names the topology the directory belongs to
MARKER = ".storm-on-ray-topology"
#: the coordinator's log, in a submit's directory
LOG_FILE = "_checkpoints.db"
#: how long a writer waits for another connection's lock on the same database (seconds)
BUSY_TIMEOUT_S = 30.0
#: the schema version of the local provider's databases (``PRAGMA user_version``); 2: task
#: databases in base + delta (1, rows keyed ``(key, version)``, is refused)
SCHEMA_VERSION = 2

_NO_BASE = -(2 ** 63)  # below every checkpoint id (SQLite's smallest integer)


class StateDirError(ValueError):
    """The checkpoint directory cannot be used: it cannot be created or written, it belongs
    to another topology, or a name would leave it. ``path`` is the directory in question
    (also named in the message)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"state directory {path}: {why}")
        self.path = path


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
        prepare_file(path)  # mode 0600 (SQLite would use the umask's)
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                              check_same_thread=False)
    except (sqlite3.Error, OSError) as e:
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
    check_not_collected(path, checkpoint_id, base)
    found = entries_crc(con.execute(
        "SELECT key, grp, value FROM delta WHERE version = ? ORDER BY key", (checkpoint_id,)))
    check_version(path, checkpoint_id, found, con.execute(
        "SELECT n, crc FROM versions WHERE version = ?", (checkpoint_id,)).fetchone())
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
           if in_groups(grp, groups)}
    apply_delta(out, con.execute(
        "SELECT key, grp, value FROM delta WHERE version > ? AND version <= ? "
        "ORDER BY version", (_NO_BASE if base is None else base, checkpoint_id)), groups)
    return out


def _load_log(con: sqlite3.Connection) -> tuple[str, int, list[int]]:
    row = con.execute("SELECT phase, ckpt FROM round WHERE one = 0").fetchone()
    ids = [r[0] for r in con.execute("SELECT ckpt FROM committed ORDER BY ckpt")]
    return (row[0], row[1], ids) if row else (COMMITTED, 0, ids)
