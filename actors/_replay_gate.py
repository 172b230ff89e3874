"""Replays before new tuples: after a rollback, a replaying spout's new emits wait behind
the tuples the rollback failed, as pure decisions (no I/O, no clock of its own).

A rollback fails every tuple a replaying spout (one that keeps no position) emitted
after the last committed checkpoint; the spout re-emits them in whatever order its
``fail`` re-queues them. If it emits new tuples first (a queue that re-queues failed ids
at the back), those move event time first, and the windows downstream drop the replays
as late. So the spout's collector holds every emit whose msg id is not one of the
rollback's failed ids (a new tuple) while any of those is still to come, and sends the
held emits, in order, once the last failed id was emitted again. The hold is bounded by
a deadline (``topology.message.timeout.secs`` after the task resumed from the rollback: a
spout that gives a tuple up, as a dead letter, never re-emits it, and its dead letter
ends the wait for it); past it, the held emits go, and a failed
id emitted after that is a late replay, counted (Flink's sources rewind instead, so their
replays come first by construction; a replaying spout needs this gate for the same order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

#: The hold's bound when ``topology.message.timeout.secs`` is 0 (tuple trees that never
#: time out): Storm's default timeout, so a spout that never replays cannot stall for good
ZERO_TIMEOUT_HOLD_S = 30.0


class ReplayGate:
    """The hold after one rollback (or several: a rollback during a hold carries the
    earlier hold into its own).

    Args:
        failed: the msg ids the rollback failed (each to be emitted again, first); an
            unhashable one cannot be told apart from a new tuple, so no emit waits for it
            (counted in :attr:`unhashable`).
        timeout_s: how long the hold lasts at most, from :meth:`expire`'s first call (the
            task's first queue check after the rollback: the pause until the topology
            resumes does not count); 0 means :data:`ZERO_TIMEOUT_HOLD_S`.
        carried: the gate of an earlier rollback: if its hold had not ended, its held
            emits (never sent, so the new rollback did not fail them) stay held, first,
            and its failed ids still to come are still waited for.

    Attributes:
        pending: failed ids not yet emitted again.
        held: the emits held, oldest first (the caller's records, opaque here).
        open: the hold has ended (every failed id came again, or the deadline passed).
        deadline: when the hold ends regardless (the caller's monotonic clock, s); None
            until the clock starts. ``forget_at``: one more timeout later, the failed
            ids still pending are forgotten (late replays are counted until then).
        held_total: emits held in all.
        late: failed ids emitted again after the deadline had opened the hold.
    """

    __slots__ = ("pending", "held", "timeout", "deadline", "forget_at", "open", "held_total",
                 "late", "unhashable")

    def __init__(self, failed: Iterable, timeout_s: float,
                 carried: ReplayGate | None = None) -> None:
        pending: set = set()
        self.unhashable = 0
        for m in failed:
            try:
                pending.add(m)
            except TypeError:
                self.unhashable += 1
        self.held: deque = deque()
        self.held_total = self.late = 0
        if carried is not None and not carried.open:  # (an open one holds nothing, and
            pending |= carried.pending  # its ids missed their deadline: not waited for again)
            self.held.extend(carried.held)
            carried.held.clear()
        self.pending = pending
        self.timeout = timeout_s if timeout_s > 0 else ZERO_TIMEOUT_HOLD_S
        self.deadline: float | None = None
        self.forget_at: float | None = None
        self.open = not self.pending

    def admits(self, msg_id: Hashable | None) -> bool:
        """True if an emit with ``msg_id`` goes now (a replay, or the hold has ended);
        False: the caller holds it (:meth:`hold`). A replay that comes after the
        deadline counts as late. An unhashable ``msg_id`` is taken for a new tuple."""
        pending = self.pending
        try:
            replay = msg_id is not None and msg_id in pending
        except TypeError:
            return self.open
        if replay:
            pending.discard(msg_id)
            if self.open:
                self.late += 1
            elif not pending:
                self.open = True  # the last replay: the caller releases the held emits
            return True
        return self.open

    def give_up(self, msg_id: Hashable) -> bool:
        """``msg_id`` will not come again (its dead letter was emitted): no emit waits
        for it. True if that ended the hold (the caller releases the held emits)."""
        try:
            self.pending.discard(msg_id)
        except TypeError:
            return False
        if self.open or self.pending:
            return False
        self.open = True
        return True

    def hold(self, record) -> None:
        """Keep ``record`` (an emit that :meth:`admits` refused) until the hold ends."""
        self.held.append(record)
        self.held_total += 1

    def expire(self, now: float) -> bool:
        """Start the hold's clock at the first call; open the hold if the deadline
        passed: True if that happened now (the caller releases the held emits; the failed
        ids still pending will count as late)."""
        if self.deadline is None:
            self.deadline = now + self.timeout
            self.forget_at = self.deadline + self.timeout
        if self.open or now < self.deadline:
            return False
        self.open = True
        return True

    def end(self, now: float) -> None:
        """End the hold now, whatever is pending (the spout's stream ended, or it
        drains); the caller releases the held emits."""
        if self.deadline is None or self.deadline > now:
            self.deadline = now
            self.forget_at = now + self.timeout
        self.open = True

    def release(self) -> list:
        """The held emits, oldest first, once open (emptied)."""
        out = list(self.held)
        self.held.clear()
        return out

    def done(self, now: float) -> bool:
        """True once the gate can be dropped: open, nothing held, and either every failed
        id came again or ``forget_at`` passed."""
        return self.open and not self.held and (
            not self.pending or (self.forget_at is not None and now >= self.forget_at))


__all__ = ["ZERO_TIMEOUT_HOLD_S", "ReplayGate"]
