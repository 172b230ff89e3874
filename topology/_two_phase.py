"""Exactly-once output: sinks whose writes are published when the checkpoint after them
commits (Flink's ``TwoPhaseCommitSinkFunction``; Flink's docs "Fault Tolerance Guarantees
of Data Sources and Sinks").

The protocol, per sink task and checkpoint N:

1. ``write(tup)`` stages each tuple in the open transaction (memory, a staging file);
2. when barrier N reaches the task, ``pre_commit(N)`` makes what was staged since the last
   barrier durable and returns the *transaction*: what ``commit`` needs to publish it (the
   names of staged files, or the rows themselves), a value the wire codec can carry. The
   runtime records it in the task's checkpoint N, in the same atomic write as the task's
   other state;
3. when checkpoint N commits, ``commit(N, transaction)`` publishes it. A commit may be
   repeated with the same arguments after a restore (the task died between the
   checkpoint's commit and its own), so it must be idempotent by the *transaction*, not
   by the checkpoint id or the task: after a restore at another parallelism
   (docs/state.md) one task commits the transactions of several old tasks, next to
   others of the same checkpoint id, and one another task pre-committed. So a
   transaction must name what it publishes itself (file names, a key of its own), as
   Flink's restored ``TwoPhaseCommitSinkFunction`` commits each transaction handle
   whatever subtask it lands on;
4. on a rollback to checkpoint N, ``abort(M, transaction)`` for each transaction whose
   checkpoint M did not commit, then ``recover(N)``: reset the open transaction and drop
   what was staged above N that no transaction names (a task that died between staging
   and its snapshot); then ``commit`` again for every transaction checkpoint N holds (on
   a restart too: the task may have died before publishing them).

A topology with a ``TwoPhaseCommitSink`` runs checkpoints even when no bolt is stateful, and
its output follows the state's guarantee (docs/state.md): exactly-once with a spout that
rewinds, or with one that replays on ``fail`` and acking on.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from topology._components import Bolt


class TwoPhaseCommitSink(Bolt):
    """A sink that publishes its output with the checkpoints (see the module docstring).

    Subclasses implement :meth:`write`, :meth:`pre_commit`, :meth:`commit` and
    :meth:`abort`, and may override :meth:`recover`; ``execute`` calls ``write``. Called on
    the task's executor thread only; ``prepare`` comes first, then ``recover``.
    """

    outputs = ()

    def execute(self, tup) -> None:
        self.write(tup)

    @abstractmethod
    def write(self, tup) -> None:
        """Stage ``tup`` in the open transaction."""

    @abstractmethod
    def pre_commit(self, checkpoint_id: int) -> Any:
        """Make what was staged since the previous call durable; return the transaction
        that publishes it (codec-encodable; None when nothing was staged).

        Raises:
            Exception: the checkpoint fails (the topology rolls back and replays).
        """

    @abstractmethod
    def commit(self, checkpoint_id: int, transaction: Any) -> None:
        """Publish ``transaction`` (checkpoint ``checkpoint_id`` has committed).
        Idempotent by the transaction: a repeat with the same arguments changes nothing,
        and another transaction of the same checkpoint id (another old task's, after a
        restore at another parallelism) is published too.

        Raises:
            Exception: reported naming the sink and the checkpoint; the topology rolls
                back to that checkpoint, whose restore commits it again.
        """

    @abstractmethod
    def abort(self, checkpoint_id: int, transaction: Any) -> None:
        """Discard ``transaction``: its checkpoint did not commit."""

    def open_target(self, fields: tuple[str, ...] | None = None) -> None:  # noqa: B027
        """Called once on the driver at submit, before anything starts: check that the
        target can be reached (create it if need be) and takes what the sink will write.
        (An optional hook.)

        Args:
            fields: the field names of the tuples the sink will get: those its input
                streams declare, or None when they declare different ones.

        Raises:
            TopologyError: the target cannot be used, naming it.
        """

    def exclusive_target(self) -> str | None:
        """The target no other sink component of the same topology may write into (a
        dataset's root, say), compared at build; None (the default) when sinks may share
        theirs."""
        return None

    def end_of_input(self) -> None:  # noqa: B027 (optional hook)
        """The sink's input has ended (after its ``finish()``, or after a restore of a
        checkpoint taken after it): every later ``pre_commit`` must stage all it holds,
        since the stream's final checkpoint may be the next one. Rows held back for a
        bigger file (a roll policy) are written then."""

    def recover(self, last_committed: int | None) -> None:  # noqa: B027 (optional hook)
        """After a restore to ``last_committed`` (None: nothing committed), and at start:
        drop staged data of later checkpoints that no transaction names."""
