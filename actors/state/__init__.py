"""Checkpointed state: the checkpoint coordinator, barrier alignment and the state
providers (Flink's checkpointing protocol behind Storm's state API).

Pure modules (no Ray at import): ``_provider`` (the provider interfaces), ``_memory`` and
``_sqlite`` (the memory and local providers), ``providers`` (the choice among them and the
offline reader), ``_coordinator`` (the round state machine; its actor is made on first
use), ``_task`` (a task's side: barriers, alignment, snapshot, rollback).
"""

from actors.state._coordinator import (
    CoordinatorCore,
    checkpoint_coordinator_class,
    checkpoint_coordinator_name,
)
from actors.state._task import (
    TaskCheckpoint,
    checkpointed,
    enable_checkpoints,
    is_stateful,
    keyed_state,
)

__all__ = ["CoordinatorCore", "TaskCheckpoint", "checkpoint_coordinator_class",
           "checkpoint_coordinator_name", "checkpointed", "enable_checkpoints", "is_stateful",
           "keyed_state"]
