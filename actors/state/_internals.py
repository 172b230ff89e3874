"""State the runtime keeps for a task beside the user's :class:`topology.KeyValueState`
(a persistent window's open windows, watermarks and triggers: Storm's ``WindowState``),
checkpointed with it in the same atomic write and restored with it.

Its entries are stored under key group :data:`INTERNAL_GROUP`, which no user key has (a
user key's group is 0, or its key group ``>= 0`` in keyed state), with stored keys that
start with :data:`INTERNAL_PREFIX`, a byte that begins no msgpack value and so no user
key's bytes: the two never mix, and a reader of the user's state (``handle.state()``)
leaves them out. An entry that belongs to one key (a join's buffered tuples) may be put
under that key's group instead, its key wrapped in :class:`InGroup`, so a rescale can move
it with the group; its stored key still starts with :data:`INTERNAL_PREFIX`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

#: the key group of runtime-internal entries
INTERNAL_GROUP = -1
#: the first byte of an internal entry's stored key (0xc1: "never used" in msgpack)
INTERNAL_PREFIX = b"\xc1"
#: every group a user key can have
USER_GROUPS = range(0, 1 << 31)
#: the internal group alone, for a restore
INTERNAL_GROUPS = range(INTERNAL_GROUP, INTERNAL_GROUP + 1)


class InGroup(NamedTuple):
    """An internal entry's key stored under key group ``group`` (``>= 0``: the group of the
    key it belongs to, ``topology._keygroups.state_key_group``) rather than
    :data:`INTERNAL_GROUP`. ``key`` must be unique over every group (include the group)."""

    group: int
    key: Any


class CheckpointedInternals(ABC):
    """A component object whose runtime-side state is part of its task's checkpoints
    (declared by the object: the runtime calls these, executor thread only)."""

    @abstractmethod
    def internal_changes(self, checkpoint_id: int) -> tuple[list[tuple[Any, bytes]], list[Any]]:
        """What changed since the last call: ``(puts [(key, value bytes)], deleted
        keys)``; keys are state keys (codec-encodable), written in :data:`INTERNAL_GROUP`,
        or :class:`InGroup` (in puts and deletes alike) to write ``key`` in that group.
        Called after the user's ``pre_prepare`` for checkpoint ``checkpoint_id``."""

    @abstractmethod
    def restore_internals(self, entries: dict[Any, bytes], checkpoint_id: int | None) -> None:
        """Replace the runtime-side state with ``entries`` (key → value bytes, as written
        up to checkpoint ``checkpoint_id``, which has committed; empty and None: the state
        of a first start). Keys put as :class:`InGroup` come back bare, those of the groups
        the task restores.

        Raises:
            ValueError: the entries are not a snapshot this object can read (the caller
                treats the checkpoint as corrupt).
            Exception: anything else fails the restore (the task stays paused and the
                topology rolls back again).
        """

    def input_ended(self) -> None:  # noqa: B027 (optional hook)
        """The task's input has ended and its ``finish()`` has run (FLIP-147's finished
        task): called when that happens, and after a restore of a checkpoint that records
        it (``restore_internals`` first). The next snapshots are the task's last."""

    def internal_commit(self, checkpoint_id: int) -> None:  # noqa: B027 (optional hook)
        """Checkpoint ``checkpoint_id`` has committed (after the user's ``pre_commit``).

        Raises:
            Exception: reported, and the topology rolls back to the last committed
                checkpoint (whose restore is expected to finish what this did not).
        """
