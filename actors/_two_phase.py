"""The engine's side of two-phase-commit sinks (``topology.TwoPhaseCommitSink``): the
transactions a sink task pre-committed are part of its checkpoints, published when a
checkpoint commits, published again after a restore, and aborted on a rollback (Flink's
``TwoPhaseCommitSinkFunction``: ``preCommit`` on the snapshot, ``commit`` on
``notifyCheckpointComplete``, ``recoverAndCommit`` on restore).

:class:`TwoPhaseCommitExecutor` runs the user's sink as a stateful bolt whose
runtime-side state (``actors/state/_internals.py``) is its pending transactions, key
``("txn", checkpoint id)``: written at the snapshot, deleted by the snapshot after their
commit. A restore at another parallelism hands each old task's transactions to one new
task (``actors/state/_rescale.py``) under ``("txn", checkpoint id, old task index)``.
"""

from __future__ import annotations

from typing import Any

from actors._codec import decode_value, value_encoder
from actors.state._internals import CheckpointedInternals
from topology import StatefulBolt
from topology._redact import mask_text
from topology._state import KeyValueState
from topology._two_phase import TwoPhaseCommitSink


class SinkError(RuntimeError):
    """A sink's ``pre_commit``, ``commit``, ``abort`` or ``recover`` raised: the message
    names the sink's component, task, the step and the checkpoint id."""


class TwoPhaseCommitExecutor(StatefulBolt, CheckpointedInternals):
    """Runs ``sink`` with its transactions checkpointed (see the module docstring).

    Attributes:
        sink: the user's sink.
        pending: key (``("txn", checkpoint id, ...)``) → transaction, pre-committed and
            not yet published.
        committed: transactions published (repeats after a restore included).
        aborted: transactions aborted.
    """

    def __init__(self, sink: TwoPhaseCommitSink) -> None:
        self.sink = sink
        self.auto_ack = sink.auto_ack
        self.pending: dict[tuple, Any] = {}
        self._published: list[tuple] = []  # deleted from the checkpoint at the next snapshot
        self._pack = value_encoder()
        self.committed = 0
        self.aborted = 0
        self._who = "sink"

    def prepare(self, conf: dict, context, collector) -> None:
        self._who = f"sink {context.component_id!r} task {context.task_id}"
        self.sink.prepare(conf, context, collector)

    def execute(self, tup) -> None:
        self.sink.execute(tup)

    def init_state(self, state: KeyValueState) -> None:
        """(The sink keeps no user state.)"""

    def finish(self) -> None:
        """Every input's data has ended (not its stream): the sink's ``finish()``. What
        is pending is published by the commits, the final checkpoint's last of all."""
        self.sink.finish()

    def input_ended(self) -> None:
        """The next ``pre_commit`` may be the sink's last: it writes all it holds."""
        self.sink.end_of_input()

    def cleanup(self) -> None:
        self.sink.cleanup()

    def _call(self, step: str, checkpoint_id: int | None, *args) -> Any:
        try:
            return getattr(self.sink, step)(*args)
        except Exception as e:  # user code: named, and the checkpoint machinery decides
            raise SinkError(f"{self._who}: {step} of checkpoint {checkpoint_id} failed: "
                            f"{type(e).__name__}: {mask_text(str(e))}") from e

    def _publish(self, upto: int) -> None:
        for key in sorted(k for k in self.pending if k[1] <= upto):
            self._call("commit", key[1], key[1], self.pending.pop(key))
            self._published.append(key)
            self.committed += 1

    # -- CheckpointedInternals ----------------------------------------------------------------
    def internal_changes(self, checkpoint_id: int) -> tuple[list[tuple[Any, bytes]], list[Any]]:
        txn = self._call("pre_commit", checkpoint_id, checkpoint_id)
        puts = []
        if txn is not None:
            self.pending[("txn", checkpoint_id)] = txn
            puts.append((("txn", checkpoint_id), self._pack(txn)))
        deletes, self._published = self._published, []
        return puts, deletes

    def internal_commit(self, checkpoint_id: int) -> None:
        self._publish(checkpoint_id)

    def restore_internals(self, entries: dict[Any, bytes], checkpoint_id: int | None) -> None:
        try:
            restored = {tuple(key): decode_value(v) for key, v in entries.items()}
        except (TypeError, IndexError, ValueError) as e:
            raise ValueError(f"{self._who}: stored transactions do not decode: {e}") from None
        for key, txn in sorted(self.pending.items()):
            if key not in restored:  # its checkpoint did not commit
                self._call("abort", key[1], key[1], txn)
                self.aborted += 1
        self._call("recover", checkpoint_id, checkpoint_id)
        # the restored checkpoint committed, so did every transaction in it: publish them
        # (again, if this task did before it failed; commit is idempotent)
        self.pending = restored
        self._published = []
        self._publish(checkpoint_id if checkpoint_id is not None else -1)
