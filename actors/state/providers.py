"""The state providers a topology can name, ``topology.state.provider``'s choice among
them, and the offline reader of the local provider's checkpoints; the public module, from
which the providers are imported.

``"local"`` (:class:`LocalProvider`, the default) keeps each task's checkpoints in an embedded
SQLite database: no server, durable across the death of the process that wrote them
(:mod:`actors.state._sqlite`, which describes the layout of its directory).
``"memory"`` (:class:`MemoryProvider`, :mod:`actors.state._memory`) keeps them in the
provider object (tests). ``"redis"`` (:class:`RedisProvider`, :mod:`actors.state._redis`)
keeps them, and the coordinator's log, in one Redis server that every node reaches (Storm's
``RedisKeyValueStateProvider``). A class path
names a :class:`~actors.state._provider.StateProvider` of the user's own, as Storm's
``topology.state.provider`` names a ``StateProvider`` class (Storm's
``RedisKeyValueStateProvider``, behind ``RedisKeyValueState``, is one; its settings come in
``topology.state.provider.config``). :func:`make_provider` makes the choice.

:func:`read_state` reads a submit's directory without changing it (a user's tool, and the
``storm-on-ray state`` command), through read-only SQLite connections and the local
provider's own checks. This module does not import Ray.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from actors.state._memory import MemoryProvider
from actors.state._pins import pin_local, pin_newest, read_newest_whole, unpin_local
from actors.state._provider import CorruptCheckpoint, StateProvider
from actors.state._redis import RedisProvider, RedisStateError
from actors.state._sqlite import (
    BUSY_TIMEOUT_S,
    LOG_FILE,
    MARKER,
    SCHEMA_VERSION,
    LocalProvider,
    StateDirError,
    _check_schema,
    _check_version,
    _component_name,
    _load_log,
    _state_at,
    default_checkpoint_dir,
)
from topology import ConfigError

__all__ = [
    "BUSY_TIMEOUT_S", "LOG_FILE", "MARKER", "SCHEMA_VERSION",
    "LocalProvider", "MemoryProvider", "RedisProvider", "RedisStateError", "StateDirError",
    "StateSnapshot",
    "committed_checkpoints", "default_checkpoint_dir", "make_provider", "read_state",
]

log = logging.getLogger(__name__)

# -- the provider a topology asks for ---------------------------------------------------------

_PROVIDER_KEY = "topology.state.provider"
_CONFIG_KEY = "topology.state.provider.config"


def _provider_config(raw: Any) -> dict:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise ConfigError(f"{_CONFIG_KEY}: not a JSON object ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{_CONFIG_KEY} must be a dict or a JSON object in a string, got "
                          f"{type(raw).__name__}")
    return dict(raw)


def _provider_class(path: str) -> type[StateProvider]:
    module, sep, name = path.partition(":")
    if not sep:
        module, _, name = path.rpartition(".")
    if not module or not name:
        raise ConfigError(f"{_PROVIDER_KEY}: {path!r} is not a class path (module:Class)")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{_PROVIDER_KEY}: cannot load {path!r} "
                          f"({type(e).__name__}: {e})") from None
    if not (isinstance(obj, type) and issubclass(obj, StateProvider)):
        raise ConfigError(f"{_PROVIDER_KEY}: {path!r} is not a StateProvider subclass "
                          f"(actors.state._provider.StateProvider)")
    return obj


def make_provider(conf: dict, topology_name: str, submit_id: str) -> StateProvider:
    """The provider ``conf`` names for one submit of a topology.

    ``topology.state.provider``: None or ``"local"`` → :class:`LocalProvider` under
    ``topology.state.checkpoint.dir`` (None: :func:`default_checkpoint_dir`); ``"memory"``
    → :class:`MemoryProvider`; ``"redis"`` → :class:`RedisProvider` with the config's
    ``host`` (required), ``port``, ``password``, ``username``, ``db``, ``key_prefix`` and
    ``timeout_ms`` (:class:`~actors.state._redis_client.RedisConfig`; nothing connects yet); a
    class path ``module:Class`` or ``module.Class`` → that :class:`StateProvider` subclass,
    constructed as ``Class(topology_name, submit_id, config)``. The config is
    ``topology.state.provider.config`` as a dict (given as one, or as a JSON object in a
    string; ``{}`` when None); the local and memory providers take none.

    Raises:
        ConfigError: an unknown provider name, a class path that does not load or is not a
            StateProvider subclass, a provider config that is not a dict or a JSON
            object, a redis config without ``host`` or with an unknown key or bad value,
            or redis-py not installed for ``"redis"``.
        StateDirError: the local provider's directory cannot be used.
    """
    name = conf.get(_PROVIDER_KEY)
    config = _provider_config(conf.get(_CONFIG_KEY))
    if name is None or name in ("local", "memory"):
        if config:
            log.warning("%s is set but the %s provider takes no config: ignored",
                        _CONFIG_KEY, name or "local")
        if name == "memory":
            return MemoryProvider(topology_name, submit_id)
        return LocalProvider(conf.get("topology.state.checkpoint.dir"), topology_name,
                             submit_id)
    if name == "redis":
        return RedisProvider(topology_name, submit_id, config)
    if not isinstance(name, str) or not (":" in name or "." in name):
        raise ConfigError(f"{_PROVIDER_KEY}: unknown provider {name!r}; choose \"local\", "
                          f"\"memory\", \"redis\" or a class path (module:Class) of a "
                          f"StateProvider")
    return _provider_class(name)(topology_name, submit_id, config)


# -- the offline reader ---------------------------------------------------------------------------


class StateSnapshot(dict):
    """What :func:`read_state` returns: a dict, and the checkpoint it shows in
    ``checkpoint_id`` (None: no checkpoint committed, every task empty)."""

    checkpoint_id: int | None = None


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
    from actors._codec import decode_key, decode_value
    from actors.state._internals import INTERNAL_PREFIX

    raw = read_raw(path, checkpoint_id)

    def decoded(entries: dict) -> dict:
        return {decode_key(k): decode_value(v) for k, v in entries.items()
                if not k.startswith(INTERNAL_PREFIX)}  # (windows', sinks' entries)
    _, component_dir = _locate(path)
    snapshot = StateSnapshot({t: decoded(e) for t, e in raw.items()} if component_dir else
                             {c: {t: decoded(e) for t, e in tasks.items()}
                              for c, tasks in raw.items()})
    snapshot.checkpoint_id = raw.checkpoint_id
    return snapshot
