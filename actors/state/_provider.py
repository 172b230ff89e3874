"""State providers: where checkpoints are kept (``topology.state.provider``).

A provider gives each task a :class:`TaskStore` (its versioned key-value checkpoints) and
the checkpoint coordinator a :class:`CheckpointLog` (the round's id and phase, durable, so a
restarted coordinator rolls back or forward: Storm's ``CheckPointState``). Versions: the
store keeps, per key, the value written at each checkpoint id (a delta: only changed keys),
so the state as of checkpoint N is, per key, the latest version at or below N.

Pure (no Ray): the tests and the offline reader (:func:`read_state`) use it without Ray.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

#: phases of a round, as the coordinator records them (Storm's CheckPointState:
#: COMMITTED → PREPARING → COMMITTING → COMMITTED)
COMMITTED, PREPARING, COMMITTING = "committed", "preparing", "committing"
#: committed, and the stream's final checkpoint: every task had finished its input when it
#: was taken (Flink's FLIP-147, "Support Checkpoints After Tasks Finished"); recorded in
#: place of ``COMMITTED`` by the same one write, so a restore knows the stream is complete
FINAL = "final"
#: the phases that append their id to the committed ids
COMMIT_PHASES = (COMMITTED, FINAL)


class CorruptCheckpoint(Exception):
    """A checkpoint's stored data fails its check (named with its path and id)."""

    def __init__(self, path: str, checkpoint_id: int, why: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} at {path} is corrupt: {why}")
        self.path = path
        self.checkpoint_id = checkpoint_id


class MissingState(Exception):
    """The state a committed checkpoint needs is not in a task's store at all: its store
    was created anew (a task restarted on another node with state kept on the node's own
    disk, a deleted directory). Not a store failure that a retry mends: the topology fails,
    naming the task's store (``where``: a path or key) and the checkpoint; it never
    restores an empty state in its place (Flink fails a restore whose state handle is
    missing)."""

    def __init__(self, where: str, checkpoint_id: int, why: str) -> None:
        super().__init__(f"the state of checkpoint {checkpoint_id} is missing at {where}: "
                         f"{why}")
        self.where = where
        self.checkpoint_id = checkpoint_id


class TaskStore(ABC):
    """One task's checkpoints. Keys and values are bytes (the codec's); each entry carries
    its key group, so a later restore at another parallelism can take whole groups."""

    @abstractmethod
    def prepare(self, checkpoint_id: int, puts: list[tuple[int, bytes, bytes]],
                deletes: list[tuple[int, bytes]]) -> int | None:
        """Write checkpoint ``checkpoint_id``'s changes durably, atomically: ``puts``
        ``(key_group, key, value)``, ``deletes`` ``(key_group, key)``. Writing the same id
        again replaces what that id held (idempotent). Blocks for the write.

        Returns:
            The number of entries written (distinct keys), which the commit manifest
            records; None: the store does not tell (its restores are not checked)."""

    @abstractmethod
    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        """The state as of ``checkpoint_id`` (key → value; only keys of ``groups`` when
        given), after discarding every version above it (a rolled-back round's). None:
        no checkpoint committed yet, everything is discarded and the state is empty.

        Raises:
            CorruptCheckpoint: the data of that checkpoint fails its check.
        """

    def restore_checked(self, checkpoint_id: int | None, groups: range | None,
                        named: tuple[int, int] | None) -> dict[bytes, bytes]:
        """:meth:`restore`, then :meth:`check_prepared` against ``named``, the commit
        manifest's entry for the task (``(checkpoint id, entry count)``; None: none). A
        store whose restore must follow what the manifest names (the object provider's
        chain) overrides it. Blocks and raises as both do."""
        out = self.restore(checkpoint_id, groups)
        if checkpoint_id is not None and named is not None:
            self.check_prepared(*named)
        return out

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:  # noqa: B027
        """Raise :class:`CorruptCheckpoint` (naming the store's path or key) unless this
        store holds what checkpoint ``checkpoint_id`` wrote: its record with ``count``
        entries (None: any), or a base collected at or above it. The commit manifest
        names both; a store that lost them (a deleted key, a database created anew)
        would otherwise restore as if that checkpoint wrote nothing. Flink's checkpoint
        metadata likewise lists every task's state handles, and a missing one fails the
        restore. The default checks nothing. Blocks for one read."""

    @abstractmethod
    def collect(self, keep_from: int) -> None:
        """Drop what no restore of a checkpoint ``>= keep_from`` needs."""

    @abstractmethod
    def close(self) -> None:
        """Release files and connections (the data stays)."""


class CheckpointLog(ABC):
    """The coordinator's durable record of rounds."""

    @abstractmethod
    def load(self) -> tuple[str, int, list[int]]:
        """``(phase, checkpoint id of that phase, committed ids ascending)``; a new log
        gives ``(COMMITTED, 0, [])``."""

    @abstractmethod
    def record(self, phase: str, checkpoint_id: int, manifest: dict | None = None) -> None:
        """Durably set the phase (``COMMITTED`` and ``FINAL`` append ``checkpoint_id`` to
        the committed ids, keeping the last two, with ``manifest``, written by the same
        commit: ``{task: (the latest checkpoint <= checkpoint_id it prepared, its entry
        count)}`` for every stateful task; the coordinator passes it only when tasks
        reported counts)."""

    def manifest(self, checkpoint_id: int) -> dict[int, tuple[int, int]] | None:
        """The commit manifest recorded with committed ``checkpoint_id`` (None: none
        kept, or a log that keeps none)."""
        return None

    def read_back(self, phase: str, checkpoint_id: int) -> bool:
        """After a :meth:`record` that raised: whether its record is stored anyway (a
        write the store applied whose reply was lost), read back from the store, and
        then taken as recorded. False: not stored, or the log cannot tell (the default).
        Flink likewise settles a failed store of a completed checkpoint before it
        declares the checkpoint failed. Blocks for one read; raises nothing."""
        return False

    def where(self) -> str:
        """Where the log is kept (a path, a key), for messages."""
        return type(self).__name__


class StateProvider(ABC):
    """The checkpoints of one submit of one topology."""

    @abstractmethod
    def task_store(self, component: str, task: int) -> TaskStore:
        """The store of ``task`` of ``component`` (created empty if new)."""

    def task_store_at(self, component: str, task: int, index: int) -> TaskStore:
        """The store of ``task`` (its global id) of ``component``, ``index`` being its
        index among the component's tasks: what the runtime calls. A provider that keys
        its stores by index (so a store's name does not depend on the other components'
        parallelism) overrides it; the default is :meth:`task_store`."""
        return self.task_store(component, task)

    @abstractmethod
    def checkpoint_log(self) -> CheckpointLog:
        """The coordinator's log."""

    @abstractmethod
    def delete(self) -> None:
        """Delete everything this submit stored (``kill``)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release files and connections (the data stays). The default has none."""

    def read_raw(self, checkpoint_id: int | None = None) -> dict:
        """This submit's committed state as stored, changing nothing (a running topology
        may go on writing): ``{component: {task: {key bytes: value bytes}}}``, the
        runtime's own entries (persistent windows, sinks' transactions) included, as of
        ``checkpoint_id`` or of the last committed checkpoint (falling back to the one
        before when that fails its check). What a savepoint copies, so a provider that
        implements it can be saved from, whatever provider it is restored into (every
        provider can be restored into: a restore only calls :meth:`task_store` and
        :meth:`checkpoint_log`). Returns an ``actors.state._common.StateSnapshot`` (a
        dict with ``checkpoint_id``: the id read, None when none committed). Blocks
        for the reads.

        Raises:
            NotImplementedError: the provider cannot be read this way (the default).
            CorruptCheckpoint: the asked checkpoint (or every committed one) fails its
                check.
        """
        raise NotImplementedError(f"{type(self).__qualname__} does not implement "
                                  f"StateProvider.read_raw, so its checkpoints cannot be "
                                  f"saved (savepoints) or read offline")
