"""The state providers a topology can name and ``topology.state.provider``'s choice among
them: the public module, from which the providers and the readers are imported (it only
chooses; each backend is a module of its own, their shared rules in
:mod:`actors.state._common`).

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

:func:`read_state` reads a local submit's directory without changing it
(:mod:`actors.state._sqlite_reader`); each provider's ``read_raw`` reads its committed
state as stored, which a savepoint copies. This module does not import Ray.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from typing import Any

from actors.state._common import StateSnapshot
from actors.state._memory import MemoryProvider
from actors.state._provider import StateProvider
from actors.state._redis import RedisProvider, RedisStateError
from actors.state._sqlite import LocalProvider, default_checkpoint_dir
from actors.state._sqlite_format import (
    BUSY_TIMEOUT_S,
    LOG_FILE,
    MARKER,
    SCHEMA_VERSION,
    StateDirError,
)
from actors.state._sqlite_reader import committed_checkpoints, read_raw, read_state
from topology import ConfigError

__all__ = [
    "BUSY_TIMEOUT_S", "LOG_FILE", "MARKER", "SCHEMA_VERSION",
    "LocalProvider", "MemoryProvider", "RedisProvider", "RedisStateError", "StateDirError",
    "StateSnapshot",
    "committed_checkpoints", "default_checkpoint_dir", "make_provider", "read_committed",
    "read_raw",
    "read_state",
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
    ``host`` (required) or ``url``, ``port``, ``password`` (or ``password_env``,
    ``password_file``), ``username``, ``db``, ``key_prefix``, ``timeout_ms`` and redis-py's
    TLS options (:class:`~actors.state._redis_client.RedisConfig`; nothing connects yet); a
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


def read_committed(conf: dict, topology_name: str, submit_id: str,
                   checkpoint_id: int | None = None) -> StateSnapshot:
    """The committed state, as stored, of one submit of a topology whose config is
    ``conf``, read on this machine and changing nothing (``StateProvider.read_raw``): the
    local provider's directory through the offline reader (:func:`read_raw`, which
    creates nothing), any other provider through one made by :func:`make_provider`.
    What a savepoint copies and ``handle.state()`` decodes. Blocks for the reads.

    Raises:
        ValueError: the ``memory`` provider (its checkpoints live in the coordinator's
            process, where nothing else reads them), or a provider whose class does not
            implement ``read_raw``.
        FileNotFoundError: the local provider's directory is not on this machine.
        CorruptCheckpoint: the asked checkpoint (or every committed one) fails its check.
    """
    name = conf.get(_PROVIDER_KEY)
    if name is None or name == "local":
        directory = conf.get("topology.state.checkpoint.dir") or default_checkpoint_dir()
        return read_raw(os.path.join(directory, topology_name, submit_id), checkpoint_id)
    if name == "memory":
        raise ValueError(f"topology {topology_name!r}: the memory provider keeps its "
                         f"checkpoints in the coordinator's process, where nothing else "
                         f"reads them; use local or redis")
    provider = make_provider(conf, topology_name, submit_id)
    try:
        return provider.read_raw(checkpoint_id)
    except NotImplementedError as e:
        raise ValueError(f"topology {topology_name!r}: {e}") from None
    finally:
        provider.close()
