"""Checkpointed state: the checkpoint coordinator, barrier alignment and the state
providers (Flink's checkpointing protocol behind Storm's state API).

Pure modules (no Ray at import): ``_provider`` (the provider interfaces), ``_memory`` and
``_sqlite`` (the memory and local providers), ``providers`` (the choice among them and the
offline reader), ``_coordinator`` (the round state machine), ``_coordinator_actor`` (its
actor, made on first use), ``_machine`` (a task's side as a pure machine), ``_task``
(its steps performed), ``_loop`` (what the executor loops call), ``_plan`` (which tasks
take part).
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
