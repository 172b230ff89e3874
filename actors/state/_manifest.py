"""The commit manifest: recorded with ``COMMITTED N`` in the checkpoint log, for every
stateful task the latest checkpoint <= N it prepared and that checkpoint's entry count (a
task that ended before N prepared nothing for N and keeps its older entry). A restore of N
checks each task's store against it (:meth:`TaskStore.check_prepared`), so a store that
lost its data is a corrupt checkpoint, never an empty start: Flink's checkpoint metadata
(``CheckpointMetadata``) lists every task's state handles and a missing one fails the
restore. Pure: no Ray.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from actors.state._provider import CorruptCheckpoint, TaskStore


def check_manifest(where: str, checkpoint_id: int, count: int | None, base: int | None,
                    n: int | None) -> None:
    """:meth:`TaskStore.check_prepared` on what a store holds: its ``base`` id and the
    entry count ``n`` of its record of ``checkpoint_id`` (None: no record)."""
    if base is not None and checkpoint_id <= base:
        return  # (folded into the base)
    if n is None:
        raise CorruptCheckpoint(where, checkpoint_id,
                                "the commit manifest names it, and the store has no record "
                                "of it (its data is lost)")
    if count is not None and n != count:
        raise CorruptCheckpoint(where, checkpoint_id, f"the commit manifest names it with "
                                                      f"{count} entries, the store has {n}")


def manifest_text(manifest: dict) -> str:
    """A commit manifest as stored: JSON ``{"task": [checkpoint id, count]}``."""
    return json.dumps({str(t): [int(c), int(n)] for t, (c, n) in sorted(manifest.items())})


def manifest_of(text: str | bytes | None) -> dict[int, tuple[int, int]] | None:
    """The commit manifest :func:`manifest_text` stored (None: none)."""
    return None if text is None else {int(t): (c, n) for t, (c, n) in json.loads(text).items()}


class ManifestedStore(TaskStore):
    """A task's store as its executor uses it: each ``prepare`` remembers its entry count
    (:attr:`written`, ``(checkpoint id, count)``, which the task's ``prepared`` report
    carries to the coordinator for the manifest), and each restore of a committed
    checkpoint checks the store against that checkpoint's manifest entry for the task
    (``named(checkpoint_id)`` gives it, None when it has none: a task new since a
    savepoint, a log that keeps no manifests). Blocks as the store does, plus one read
    of the log and one of the store per restore.

    Raises (restore):
        CorruptCheckpoint: the store lacks what the manifest names (named by its path or
            key), besides what the store's own restore raises.
    """

    def __init__(self, inner: TaskStore,
                 named: Callable[[int], tuple[int, int] | None]) -> None:
        self.inner = inner
        self._named = named
        self.written: tuple[int, int] | None = None

    def prepare(self, checkpoint_id: int, puts, deletes) -> int | None:
        n = self.inner.prepare(checkpoint_id, puts, deletes)
        self.written = None if n is None else (checkpoint_id, n)
        return n

    def restore(self, checkpoint_id: int | None, groups: range | None = None) -> dict:
        entry = None if checkpoint_id is None else self._named(checkpoint_id)
        return self.inner.restore_checked(checkpoint_id, groups, entry)

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        self.inner.check_prepared(checkpoint_id, count)

    def collect(self, keep_from: int) -> None:
        self.inner.collect(keep_from)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str):  # (the store's own attributes: path, name)
        return getattr(self.inner, name)
