"""Operator chains (Flink's chaining, which Storm never had): tasks that run inside another
task's executor.

The plan chains a bolt to its one source when they are joined by a forward edge
(``cluster/_plan.py``, ``chainable``; ``topology.operator.chaining``): task k of the bolt
then runs in the executor actor of task k of its source (the chain's host), as its own
:class:`~actors.ExecutorCore` (its own collector, acking ledger, outbox to the tasks
outside the chain, errors and counters) without a thread of its own. The host's sink to a
chained task is a :class:`ChainInserter`: an emit into it runs the chained task's
``_execute`` on a new ``Tuple`` at once (through :meth:`ChainInserter.entry` for an
untracked emit on a stream routed to that task alone; markers go to its ``handle``), on
the host's executor thread, with no batch, no encoding and no actor call (the emitted
values object itself, as Storm passes tuples between the executors of one worker).

Backpressure covers the chain through the host's ``pending_emits``: a chained task whose
own emits wait (its destination outside the chain is full or backlogged) refuses the next
tuple, which waits in its sender's ``pending_emits``, and so on up to the host, whose loop
then stops (a spout stops calling ``next_tuple``, a bolt stops consuming its queue). The
host's loop runs the chained tasks' clock work (flushes, acks, ticks): see
:meth:`ExecutorCore._timers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors._streams import EOS_STREAM
from topology import Tuple

if TYPE_CHECKING:  # (imported at run time by actors/_executor.py: no cycle here)
    from actors._executor import ExecutorCore



class ChainLink:
    """The sink of a destination task that runs in this executor (given to
    ``ExecutorCore.connect``; ``Outbox.connect`` puts a :class:`ChainInserter` over it).

    Args:
        core: the chained task's ``ExecutorCore``.
    """

    __slots__ = ("core",)

    def __init__(self, core: ExecutorCore) -> None:
        self.core = core

    def __call__(self, items: list) -> int:  # (a sink's signature; never called)
        raise TypeError("a ChainLink is delivered through its ChainInserter")


class ChainInserter:
    """What ``Outbox`` holds for a chained destination, in place of a ``BatchInserter``
    (same interface, executor thread only): :meth:`try_publish` runs the chained task on
    the message now. It never holds a batch.

    Args:
        src_task: the sending task (the element's source).
        link: the destination's :class:`ChainLink`.
    """

    __slots__ = ("_src", "_core", "_handle", "_execute", "_streams", "_pending",
                 "_flush_pending", "batch", "batch_size", "_markers")

    def __init__(self, src_task: int, link: ChainLink) -> None:
        core = link.core
        self._src = src_task
        self._core = core
        self._handle = core.handle
        self._execute = core._execute
        self._streams = core.streams
        self._pending = core.outbox.pending_emits
        self._flush_pending = core.outbox.try_flush_pending
        #: always empty (read by ``Outbox``'s flushes and the collectors' ack folding)
        self.batch: list = []
        self.batch_size = 1
        self._markers = 0  # system-stream messages delivered (see transferred)

    @property
    def transferred(self) -> int:
        """Messages delivered: the chained task's executes, each a data tuple from here
        (its one input: the plan chains a bolt with one input, on a forward edge), and the
        markers. Counted by the task, not per hand-over: this runs per tuple
        (benchmarks/lean_path.py)."""
        return self._core.executed + self._markers

    def sink_busy(self) -> bool:
        return False

    def try_publish(self, msg: tuple) -> bool:
        """Run the chained task on ``msg`` (``(stream, values[, anchors])``) now; False
        (nothing done) while that task's own ``pending_emits`` cannot drain. After an
        end-of-stream marker that closes its last input, the chained task ends: its
        ``finish()``, then its own end of stream (``ExecutorCore.end_in_chain``)."""
        if self._pending and not self._flush_pending():
            return False
        s = msg[0]
        if s >= 0:  # a data tuple: BoltExecutor.handle's path without its checks (a chained
            comp, sid, fields = self._streams[s]  # bolt is never a batch bolt)
            self._execute(Tuple(msg[1], fields, comp, self._src, sid,
                                msg[2] if len(msg) > 2 else None))
            return True
        core = self._core
        self._markers += 1
        self._handle((self._src, *msg))
        if msg[0] == EOS_STREAM and not core.upstream_open:
            core.end_in_chain()
        return True

    def entry(self, s: int):
        """The chained task's entry for an untracked data tuple on wire stream ``s``
        (``StreamRouter.deliver``): ``(values) -> bool``, :meth:`try_publish` of
        ``(s, values)`` with the stream's names looked up once, not per tuple."""
        comp, sid, fields = self._streams[s]
        src, execute = self._src, self._execute
        pending, flush_pending = self._pending, self._flush_pending

        def run(values) -> bool:
            if pending and not flush_pending():
                return False
            execute(Tuple(values, fields, comp, src, sid))
            return True
        return run

    #: the collectors' ack folding appends without flushing: here both deliver at once
    try_append = try_publish

    def try_flush(self) -> bool:
        """Nothing is ever held."""
        return True
