"""Checkpointed state: the checkpoint coordinator, barrier alignment and the state
providers (Flink's checkpointing protocol behind Storm's state API).

Pure modules (no Ray at import): ``_provider`` (the provider interfaces), ``_common``
(what the backends share: entries, CRC, version checks, base + delta), ``_memory``,
``_sqlite`` (with ``_sqlite_format`` and the offline ``_sqlite_reader``) and ``_redis`` (the
memory, local and Redis providers), ``providers`` (the choice among them), ``_fs`` (a path
or ``pyarrow.fs`` URI resolved once), ``savepoints``, ``_coordinator`` (the round state
machine), ``_coordinator_actor`` (its actor, made on first use), ``_machine`` (a task's
side as a pure machine), ``_task`` (its steps performed), ``_loop`` (what the executor
loops call), ``_plan`` (which tasks take part).
"""

from actors.state._coordinator import CoordinatorCore
from actors.state._coordinator_actor import (
    checkpoint_coordinator_class,
    checkpoint_coordinator_name,
)
from actors.state._plan import checkpointed, is_stateful, keyed_state
from actors.state._task import TaskCheckpoint, enable_checkpoints

__all__ = ["CoordinatorCore", "TaskCheckpoint", "checkpoint_coordinator_class",
           "checkpoint_coordinator_name", "checkpointed", "enable_checkpoints", "is_stateful",
           "keyed_state"]
