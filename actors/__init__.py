"""The Ray actors that carry out the backpressure core: executors, transfer actors and the
msgpack wire codec.

The Ray-free rooms (``actors._acking``, ``actors._outbox``, ``actors._inbound``,
``actors._executor``, ``actors.windowing``) import without Ray; the names below are loaded
on first use (PEP 562), so ``from actors import make_executor`` works where Ray is absent.
Other packages import only these names (and ``actors.windowing``'s).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

_LAZY = {
    "ActorSink": "actors._sink", "ExecutorActor": "actors._actor",
    "DEFAULT_MAX_FRAME_BYTES": "actors._codec", "FrameError": "actors._codec",
    "decode_batch": "actors._codec", "decode_status": "actors._codec",
    "decode_transfer": "actors._codec", "encode_batch": "actors._codec",
    "encode_status": "actors._codec", "encode_transfer": "actors._codec",
    "ErrorInfo": "actors._errors", "ErrorReporter": "actors._errors",
    "EOS_STREAM": "actors._streams", "FLUSH": "actors._streams",
    "SystemStream": "actors._streams",
    "ExecutorCore": "actors._executor", "make_executor": "actors._factory",
    "StreamRouter": "actors._routing", "build_routers": "actors._routing",
    "stable_hash": "actors._routing", "stream_table": "actors._routing",
    "TASK": "actors._routing", "WORKER": "actors._routing", "TaskLinks": "actors._routing",
    "actor_name": "actors._routing", "parse_actor_name": "actors._routing",
    "submit_prefix": "actors._routing", "task_links": "actors._routing",
    "StoredTopology": "actors._store", "delete_topology": "actors._store",
    "store_topology": "actors._store",
    "TaskStats": "actors._stats",
    "FRAME_LOST": "actors._transfer", "TransferActor": "actors._transfer",
    "ThrottleCoordinator": "actors._coordinator", "coordinator_name": "actors._coordinator",
}

__all__ = sorted(_LAZY)


def lazy_attributes(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A package's PEP 562 ``__getattr__``: attribute ``name`` is imported from module
    ``table[name]`` on first use and kept in the package.

    Raises (from the returned function):
        AttributeError: ``name`` is not in ``table``.
    """
    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value
    return getattr_


__getattr__ = lazy_attributes(__name__, _LAZY)
