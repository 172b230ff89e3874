"""The hand-off between a Spark streaming query and its spout tasks, as pure decisions.

A :class:`~topology.StreamingDataFrameSpout` has one hand-off: its query's
``foreachBatch`` puts each non-empty micro-batch in (as Arrow block references, never
rows), and the spout tasks take it out, one block per call. :class:`HandoffCore` decides
everything: whether a micro-batch may enter (the bound in micro-batches and in rows), which
block a task takes next, when a micro-batch is complete (every row acked, with acking), and
what a put or a take answers once the topology drains, is killed or its query fails, and
where a block given back or run again starts (the rows of it a committed checkpoint already
holds are skipped: Flink's ``SourceReaderBase`` resumes a split at its recorded offset). It has
no I/O, no Ray, no clock and no threads; the Ray actor that carries it out
(``connectors/spark/_handoff_actor.py``) only waits on its predicates.

States: ``open`` (puts enter when there is room), ``draining`` (no new micro-batch enters;
what is inside is delivered; takes answer ``end`` once it is empty), ``closed`` (the
topology was killed: puts answer ``closed`` at once, takes answer ``closed``) and ``failed``
(the query failed: takes answer ``failed`` with its error, so the spouts stop and report
it). A state only moves forward: open → draining → closed, and open/draining → failed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

OPEN, DRAINING, CLOSED, FAILED = "open", "draining", "closed", "failed"
_ORDER = {OPEN: 0, DRAINING: 1, FAILED: 2, CLOSED: 3}


@dataclass
class MicroBatch:
    """One micro-batch inside the hand-off.

    Attributes:
        batch_id: Spark's batch id (``foreachBatch``'s second argument).
        rows: its row count.
        blocks: its blocks not yet taken, oldest first: ``(index, block, rows)``, where
            block is opaque here (an ``ObjectRef`` of a ``pyarrow.Table`` in the actor).
        untaken_rows: rows of ``blocks``.
        open_blocks: indices of its blocks not yet reported done (every row acked or
            given up as a dead letter).
    """

    batch_id: int
    rows: int
    blocks: deque = field(default_factory=deque)
    untaken_rows: int = 0
    open_blocks: set = field(default_factory=set)


class HandoffCore:
    """Bounded hand-off of micro-batches (see the module docstring).

    Args:
        max_batches: micro-batches that may wait in the hand-off with blocks not yet
            taken (>= 1).
        max_rows: rows that may wait there (>= 1). A micro-batch larger than this enters
            only an empty hand-off, alone (it cannot be split here; bound the source's rows
            per trigger instead).
        wait_for_acks: a put completes only once every row of its micro-batch is acked
            (at-least-once up to Spark's offsets); False: once the micro-batch is inside.

    Attributes:
        state: ``open``, ``draining``, ``closed`` or ``failed``.
        error: the query's error once ``failed``.
        held_rows / held_batches: rows and micro-batches waiting to be taken now.
        max_held_rows / max_held_batches: the largest of those so far.
        batches_in / rows_in: micro-batches and rows that entered.
        batches_done: micro-batches complete (acked, or entered without acking).
        blocks_taken: blocks handed to spout tasks.
        put_waits: puts that found no room and waited (Spark's trigger held).
        rows_skipped: rows of blocks taken again that were not handed out again (a
            committed checkpoint holds them).
    """

    def __init__(self, max_batches: int, max_rows: int, wait_for_acks: bool) -> None:
        if max_batches < 1 or max_rows < 1:
            raise ValueError(f"hand-off bounds must be >= 1, got max_batches={max_batches}, "
                             f"max_rows={max_rows}")
        self.max_batches = max_batches
        self.max_rows = max_rows
        self.wait_for_acks = wait_for_acks
        self.state = OPEN
        self.error: str | None = None
        self._queue: deque[MicroBatch] = deque()  # micro-batches with untaken blocks
        self._open: dict[int, MicroBatch] = {}  # batch id → micro-batch not yet complete
        #: (batch id, block index) → (task, block, rows, start): blocks taken and not yet
        #: done, given back if their task restarts (with acking only); start: the first
        #: row handed out
        self._leases: dict[tuple[int, int], tuple[Any, Any, int, int]] = {}
        #: (batch id, block index) → rows of the block a committed checkpoint holds: a
        #: take of that block starts after them (see :meth:`reopened`)
        self._skip: dict[tuple[int, int], int] = {}
        self.held_rows = 0
        self.max_held_rows = 0
        self.max_held_batches = 0
        self.batches_in = 0
        self.rows_in = 0
        self.batches_done = 0
        self.blocks_taken = 0
        self.put_waits = 0
        self.rows_skipped = 0

    @property
    def held_batches(self) -> int:
        return len(self._queue)

    # -- state -------------------------------------------------------------------------
    def _move(self, state: str) -> bool:
        if _ORDER[state] <= _ORDER[self.state]:
            return False
        self.state = state
        return True

    def drain(self) -> None:
        """No new micro-batch enters; what is inside is still delivered."""
        self._move(DRAINING)

    def close(self) -> None:
        """The topology was killed: waiting puts and every take answer ``closed``."""
        self._move(CLOSED)

    def fail(self, error: str) -> bool:
        """The query failed with ``error``; True if that changed the state (an error after
        a drain or a kill is the query stopping because of it, not a failure)."""
        if self.state not in (OPEN,):
            return False
        self.error = error
        return self._move(FAILED)

    # -- puts --------------------------------------------------------------------------
    def can_enter(self, rows: int) -> bool:
        """True if a micro-batch of ``rows`` rows may enter now (state open and room)."""
        if self.state != OPEN:
            return False
        if len(self._queue) >= self.max_batches:
            return False
        return self.held_rows == 0 or self.held_rows + rows <= self.max_rows

    def put_answer(self) -> str | None:
        """What a waiting put answers now that it may not enter: None while it should
        wait (open, no room), else the state that refuses it."""
        return None if self.state == OPEN else self.state

    def enter(self, batch_id: int, blocks: list[tuple[Any, int]]) -> None:
        """Micro-batch ``batch_id`` enters with ``blocks`` (``(block, rows)`` each);
        call only when :meth:`can_enter`. A batch id already inside (Spark runs a
        micro-batch again after a failed attempt) replaces the earlier attempt's
        untaken blocks."""
        rows = sum(r for _, r in blocks)
        old = self._open.pop(batch_id, None)
        if old is not None:
            self._forget(old)
        mine = [(i, b, r) for i, (b, r) in enumerate(blocks) if r > 0]
        mb = MicroBatch(batch_id, rows, deque(mine), rows, {i for i, _, _ in mine})
        self.batches_in += 1
        self.rows_in += rows
        self._open[batch_id] = mb
        if mb.blocks:
            self._queue.append(mb)
            self.held_rows += rows
            self.max_held_rows = max(self.max_held_rows, self.held_rows)
            self.max_held_batches = max(self.max_held_batches, len(self._queue))
        if not self.wait_for_acks or rows == 0:
            self._complete(mb)

    def _forget(self, mb: MicroBatch) -> None:
        if mb in self._queue:
            self._queue.remove(mb)
            self.held_rows -= mb.untaken_rows
        for key in [k for k in self._leases if k[0] == mb.batch_id]:
            del self._leases[key]

    def _complete(self, mb: MicroBatch) -> None:
        if self._open.pop(mb.batch_id, None) is not None:
            self.batches_done += 1
        for key in [k for k in self._skip if k[0] == mb.batch_id]:
            del self._skip[key]

    def put_done(self, batch_id: int) -> str | None:
        """What the put of ``batch_id`` answers now: ``"ok"`` once it is complete,
        ``"closed"``/``"failed"`` once the topology was killed or the query failed before
        that, None while it should wait."""
        if batch_id not in self._open:
            return "ok"
        if self.state in (CLOSED, FAILED):
            return self.state
        return None

    # -- takes -------------------------------------------------------------------------
    def take(self, task: Any = None) -> tuple:
        """The next block for spout task ``task``: ``("block", batch_id, index, block,
        rows, start)``, whose rows from ``start`` on are to be emitted (the earlier ones
        are in a committed checkpoint, see :meth:`reopened`; a block held there whole is
        done without being handed out); else ``("idle",)`` (nothing now, open),
        ``("end",)`` (drained and empty), or ``("closed",)`` / ``("failed", error)``.
        With acking the block stays leased to ``task`` until :meth:`acked`."""
        if self.state == CLOSED:
            return (CLOSED,)
        if self.state == FAILED:
            return (FAILED, self.error)
        while self._queue:
            mb = self._queue[0]
            index, block, rows = mb.blocks.popleft()
            mb.untaken_rows -= rows
            self.held_rows -= rows
            if not mb.blocks:
                self._queue.popleft()
            start = min(self._skip.pop((mb.batch_id, index), 0), rows)
            self.rows_skipped += start
            if start == rows:  # every row of it is in a committed checkpoint
                self.acked(mb.batch_id, index)
                continue
            self.blocks_taken += 1
            if mb.batch_id in self._open:
                self._leases[(mb.batch_id, index)] = (task, block, rows, start)
            return ("block", mb.batch_id, index, block, rows, start)
        return ("end",) if self.state == DRAINING else ("idle",)

    def reopened(self, task: Any, positions: dict[tuple[int, int], int] | None = None
                 ) -> int:
        """Spout task ``task`` starts again (Ray restarted its process, or the topology
        rolled back): the blocks it had taken and not reported done go back to the front
        of the hand-off. ``positions``: ``(batch id, block index) → rows`` of the blocks
        whose first rows the task's last committed checkpoint holds (its position); a
        take of such a block, given back now or entering later (Spark runs a micro-batch
        again after a driver restart), starts after those rows, so each row is counted
        once. Without positions (a task that keeps none) a block's rows are all emitted
        again: at-least-once. Returns how many blocks went back."""
        for key, rows in (positions or {}).items():  # (a block's committed rows only grow:
            self._skip[key] = max(self._skip.get(key, 0), rows)  # another task's may be newer)
        back = sorted(k for k, v in self._leases.items() if v[0] == task)
        for batch_id, index in reversed(back):
            _, block, rows, start = self._leases.pop((batch_id, index))
            # the start it was handed out with was a committed position: a block given
            # back by a task whose own state does not name it (it took the block on after
            # a rollback, and the topology rolled back to the same checkpoint again)
            # still starts there, not at row 0
            if start:
                self._skip[(batch_id, index)] = max(self._skip.get((batch_id, index), 0),
                                                    start)
            mb = self._open[batch_id]
            mb.blocks.appendleft((index, block, rows))
            mb.untaken_rows += rows
            self.held_rows += rows
            if mb not in self._queue:
                self._queue.appendleft(mb)
        return len(back)

    def has_answer_for_take(self) -> bool:
        """True if :meth:`take` would answer something other than ``idle``."""
        return bool(self._queue) or self.state != OPEN

    def acked(self, batch_id: int, index: int) -> None:
        """A spout task reports block ``index`` of ``batch_id`` done: each of its rows
        acked, or given up as a dead letter. Unknown ones (an earlier attempt's, or a
        block reported twice) are ignored."""
        mb = self._open.get(batch_id)
        if mb is None:
            return
        self._leases.pop((batch_id, index), None)
        mb.open_blocks.discard(index)
        if not mb.open_blocks and not mb.blocks:
            self._complete(mb)

    def stats(self) -> dict[str, Any]:
        """The hand-off's figures (rows and micro-batches; see the class attributes)."""
        return {"state": self.state, "error": self.error, "held_rows": self.held_rows,
                "held_batches": self.held_batches, "max_held_rows": self.max_held_rows,
                "max_held_batches": self.max_held_batches, "max_rows": self.max_rows,
                "max_batches": self.max_batches, "batches_in": self.batches_in,
                "rows_in": self.rows_in, "batches_done": self.batches_done,
                "blocks_taken": self.blocks_taken, "put_waits": self.put_waits,
                "rows_skipped": self.rows_skipped,
                "unacked_batches": sorted(self._open), "leased_blocks": len(self._leases)}
