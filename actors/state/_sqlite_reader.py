"""The offline reader of the local provider's checkpoints: a submit's directory read
without changing it (a user's tool, the ``storm-on-ray state`` command, and what a
savepoint of a ``local`` topology copies), through read-only SQLite connections and the
format's own checks (:mod:`actors.state._sqlite_format`). Public through
:mod:`actors.state.providers`. This module does not import Ray.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from actors.state._common import StateSnapshot, decoded
from actors.state._pins import pin_local, pin_newest, read_newest_whole, unpin_local
from actors.state._provider import CorruptCheckpoint
from actors.state._sqlite_format import (
    BUSY_TIMEOUT_S,
    LOG_FILE,
    _check_schema,
    _check_version,
    _component_name,
    _load_log,
    _state_at,
)

__all__ = ["committed_checkpoints", "read_raw", "read_state"]


def _connect_ro(path: str, immutable: bool) -> sqlite3.Connection:
    flag = "immutable=1" if immutable else "mode=ro"
    uri = "file:" + quote(os.path.abspath(path)) + "?" + flag
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                           check_same_thread=False)


def _stat(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read_only(path: str, read: Callable[[sqlite3.Connection], Any]) -> Any:
    """``read(connection)`` on a connection that writes nothing. A database no connection
    has open (no ``-wal`` file beside it) is read as immutable, so SQLite creates no side
    files; if a writer opened it meanwhile (a ``-wal`` appeared, or the file changed), the
    read is done again through a ``mode=ro`` connection, which takes SQLite's locks (and
    may leave an empty ``-wal`` and the ``-shm`` index beside it; the data is untouched)."""
    wal = path + "-wal"
    if not os.path.exists(wal):
        before = _stat(path)
        con = _connect_ro(path, immutable=True)
        try:
            result, error = read(con), None
        except (CorruptCheckpoint, sqlite3.Error) as e:
            result, error = None, e
        finally:
            con.close()
        if not os.path.exists(wal) and _stat(path) == before:
            if error is not None:
                raise error
            return result
    con = _connect_ro(path, immutable=False)
    try:
        return read(con)
    finally:
        con.close()


def _locate(path: str) -> tuple[str, str | None]:
    """``(submit root, component directory name or None)`` of ``path``."""
    path = os.path.abspath(path)
    if os.path.isfile(os.path.join(path, LOG_FILE)):
        return path, None
    parent = os.path.dirname(path)
    if os.path.isdir(path) and os.path.isfile(os.path.join(parent, LOG_FILE)):
        return parent, os.path.basename(path)
    raise FileNotFoundError(f"{path} is neither a submit's state directory "
                            f"(<dir>/<topology>/<submit id>, holding {LOG_FILE}) nor a "
                            f"component's directory in one")


def committed_checkpoints(path: str) -> list[int]:
    """The committed checkpoint ids (ascending; the log keeps the last two) of the submit
    at ``path`` (its directory or one of its components'), read without changing anything.

    Raises:
        FileNotFoundError: ``path`` is not a submit's or component's state directory.
    """
    root, _ = _locate(path)
    return _read_only(os.path.join(root, LOG_FILE), lambda con: _load_log(con)[2])


def _task_files(root: str, component_dir: str | None) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    dirs = [component_dir] if component_dir else sorted(
        d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for d in dirs:
        tasks = {}
        for f in os.listdir(os.path.join(root, d)):
            stem = f.removeprefix("task-").removesuffix(".db")
            if f.startswith("task-") and f.endswith(".db") and stem.isdigit():
                tasks[int(stem)] = os.path.join(root, d, f)
        out[_component_name(d)] = dict(sorted(tasks.items()))
    return out


def _read_at(files: dict[str, dict[int, str]], checkpoint_id: int) -> dict:
    """``{component: {task: {key bytes: value bytes}}}`` as of ``checkpoint_id``, raw
    (runtime-internal entries included)."""
    out: dict = {}
    for component, tasks in files.items():
        out[component] = {}
        for task, db in tasks.items():
            def read(con: sqlite3.Connection, db: str = db) -> dict[bytes, bytes]:
                _check_schema(con, db)
                base = _check_version(con, db, checkpoint_id)
                return _state_at(con, checkpoint_id, base, None)

            try:
                out[component][task] = _read_only(db, read)
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as e:
                raise CorruptCheckpoint(db, checkpoint_id, str(e)) from None
    return out


def read_raw(path: str, checkpoint_id: int | None = None) -> StateSnapshot:
    """As :func:`read_state`, with keys and values as stored (codec bytes, the
    runtime-internal entries of persistent windows and sinks included): what a savepoint
    copies. Same arguments, result shape and errors."""
    root, component_dir = _locate(path)
    files = _task_files(root, component_dir)
    candidates, pin = pin_newest(lambda: committed_checkpoints(root),
                                 lambda c: pin_local(root, c), unpin_local, checkpoint_id)
    state, used = read_newest_whole(candidates, lambda c: _read_at(files, c),
                                    lambda: unpin_local(pin))
    if not candidates:
        state = {c: {t: {} for t in tasks} for c, tasks in files.items()}
    snapshot = StateSnapshot(state[_component_name(component_dir)] if component_dir
                             else state)
    snapshot.checkpoint_id = used
    return snapshot


def read_state(path: str, checkpoint_id: int | None = None) -> StateSnapshot:
    """The checkpointed state of a submit, decoded, without changing its data (read-only
    SQLite connections: versions above the checkpoint stay, nothing is collected).

    ``path``: a submit's directory ``<topology.state.checkpoint.dir>/<topology>/<submit
    id>`` → ``{component: {task: {key: value}}}``; or one component's directory in it →
    ``{task: {key: value}}``. Keys decode as they were put (tuples as tuples), values as
    :meth:`topology.KeyValueState.get` returns them. As of ``checkpoint_id``, or of the
    last committed checkpoint in the submit's log; if that one fails its check, a warning
    is logged naming it and the committed one before is read. No committed checkpoint:
    every task empty, ``checkpoint_id`` None. The result's ``checkpoint_id`` says which
    was read. Blocks for the reads; a running topology may go on writing meanwhile, and
    its collection keeps the checkpoint being read: it is pinned by a file beside the log
    while read, then released (``actors/state/_pins.py``; not in a directory this cannot
    write, where nothing collects).

    Raises:
        FileNotFoundError: ``path`` is not a submit's or component's state directory.
        CorruptCheckpoint: the asked checkpoint (or every committed one) fails its check.
    """
    _, component_dir = _locate(path)
    return decoded(read_raw(path, checkpoint_id), 1 if component_dir else 2)
