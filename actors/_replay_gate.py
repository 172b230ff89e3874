"""Replays before new tuples: after a rollback, a replaying spout's new emits wait behind
the tuples the rollback failed, as pure decisions (no I/O, no clock of its own).

A rollback fails every tuple a replaying spout (one that keeps no position) emitted
after the last committed checkpoint; the spout re-emits them in whatever order its
``fail`` re-queues them. If it emits new tuples first (a queue that re-queues failed ids
at the back), those move event time first, and the windows downstream drop the replays
as late. So the spout's collector holds every emit whose msg id is not one of the
rollback's failed ids (a new tuple) while any of those is still to come, and sends the
held emits, in order, once the last failed id was emitted again. The hold is bounded by
a deadline (``topology.message.timeout.secs`` after the rollback: a spout that gives a
tuple up, as a dead letter, never re-emits it); past it, the held emits go, and a failed
id emitted after that is a late replay, counted (Flink's sources rewind instead, so their
replays come first by construction; a replaying spout needs this gate for the same order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable


class ReplayGate:
    """The hold after one rollback.

    Args:
        failed: the msg ids the rollback failed (each to be emitted again, first).
        deadline: when the hold ends regardless (the caller's monotonic clock, s).
        forget_at: when the failed ids still to come are forgotten (late replays are
            counted until then; the caller then drops the gate).

    Attributes:
        pending: failed ids not yet emitted again.
        held: the emits held, oldest first (the caller's records, opaque here).
        open: the hold has ended (every failed id came again, or the deadline passed).
        held_total: emits held in all.
        late: failed ids emitted again after the deadline had opened the hold.
    """

    __slots__ = ("pending", "held", "deadline", "forget_at", "open", "held_total", "late")

    def __init__(self, failed: Iterable[Hashable], deadline: float, forget_at: float) -> None:
        self.pending = set(failed)
        self.held: deque = deque()
        self.deadline = deadline
        self.forget_at = forget_at
        self.open = not self.pending
        self.held_total = 0
        self.late = 0

    def admits(self, msg_id: Hashable | None) -> bool:
        """True if an emit with ``msg_id`` goes now (a replay, or the hold has ended);
        False: the caller holds it (:meth:`hold`). A replay that comes after the
        deadline counts as late."""
        pending = self.pending
        if msg_id is not None and msg_id in pending:
            pending.discard(msg_id)
            if self.open:
                self.late += 1
            elif not pending:
                self.open = True  # the last replay: the caller releases the held emits
            return True
        return self.open

    def hold(self, record) -> None:
        """Keep ``record`` (an emit that :meth:`admits` refused) until the hold ends."""
        self.held.append(record)
        self.held_total += 1

    def expire(self, now: float) -> bool:
        """Open the hold if the deadline passed; True if that happened now (the caller
        releases the held emits; the failed ids still pending will count as late)."""
        if self.open or now < self.deadline:
            return False
        self.open = True
        return True

    def release(self) -> list:
        """The held emits, oldest first, once open (emptied)."""
        out = list(self.held)
        self.held.clear()
        return out

    def done(self, now: float) -> bool:
        """True once the gate can be dropped: open, nothing held, and either every failed
        id came again or ``forget_at`` passed."""
        return self.open and not self.held and (not self.pending or now >= self.forget_at)


__all__ = ["ReplayGate"]
