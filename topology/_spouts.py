"""Built-in spouts and sinks that need nothing but the standard library."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from topology._components import Bolt
from topology._dead_letters import RetryService
from topology._errors import TopologyError
from topology._splits import SPLITS_KEY, SplitPositions, SplitSpout, split_items


class IterableSpout(SplitSpout):
    """Emits the items of a finite iterable, then ends the stream.

    Its position (items taken by this task) is its checkpointed state: in a stateful
    topology a rollback rewinds it to the position of the last committed checkpoint
    (:class:`~topology.StatefulSpout`), so the items are counted exactly once downstream.

    Its items are divided into splits (``topology/_splits.py``): with ``S`` splits
    (``topology.max.task.parallelism``, 128 when unset), item ``i`` is in split ``i % S``
    and task *k* of *n* emits, in index order, the items of the splits
    ``key_group_range(k, n, S)``, so the tasks together emit each item exactly once; its
    state is its position in each split, so a savepoint restores at another parallelism
    (``SplitSpout.redistribute``). A state of before splits (``"position"``, from an older
    savepoint) is read as it was written: items ``k, k+n, ...`` of task *k*, at the same
    parallelism only.

    Args:
        items: a re-iterable collection (list, tuple, range...); it is pickled into each
            task, so keep it modest or use a generator factory via ``factory``.
        fields: output field names of the default stream.
        factory: alternative to ``items``: a picklable callable returning an iterable,
            called once in each task (for large generated inputs).
        msg_ids: emit each item with its position as ``msg_id``, so acking tracks it; a
            failed (or timed out) item is emitted again, before any new item, until acked,
            or with ``topology.max.replays`` = N until its (1 + N)-th failure, when it
            goes to the dead letters instead (:class:`~topology.RetryService`). Items in
            flight are kept until acked (at most ``topology.max.spout.pending`` per task
            when that is set).

    Each item is a sequence of values (one per field); with a single field a scalar item
    is wrapped.
    """

    def __init__(self, items: Iterable | None = None, fields: Sequence[str] = ("value",),
                 factory: Any = None, msg_ids: bool = False) -> None:
        if (items is None) == (factory is None):
            raise TopologyError("IterableSpout needs exactly one of items= or factory=")
        self.outputs = tuple(fields)
        self._items = list(items) if items is not None and not isinstance(
            items, (list, tuple, range)) else items
        self._factory = factory
        self._msg_ids = msg_ids
        self.total_items = len(self._items) if self._items is not None else None
        self.taken = 0

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        n = len(context.get_component_tasks(context.component_id))
        self._stride = (n, context.task_index)
        self._splits = SplitPositions(conf, context.task_index, n)
        self._legacy = False  # a state of before splits: the stride of n (at n tasks)
        self._start_at(None)
        self._single = len(self.outputs) == 1
        self._in_flight: dict = {}  # msg_id -> values, until acked
        self._replay: list = []  # failed msg_ids, oldest first
        self.acked_ids: list = []  # for inspection (handle.task_state)
        self.failed_ids: list = []
        self.dead_ids: list = []  # given up at topology.max.replays
        self.taken = 0
        self._retries = RetryService(conf, context, collector)

    def _start_at(self, position: int | None) -> None:
        """Take items again from the splits' positions (``position`` None), or, for a state
        of before splits, from this task's ``position``-th item of its stride."""
        source = self._items if self._factory is None else self._factory()
        if position is None:
            self._it = split_items(source, self._splits)
            self.taken = sum(self._splits.positions.values())
            return
        n, k = self._stride
        self._it = ((i * n + k, item) for i, item in itertools.islice(
            enumerate(itertools.islice(source, k, None, n)), position, None))
        self.taken = position

    def init_state(self, state) -> None:
        """Go on from the positions in ``state`` (the start when empty); a rewind forgets
        what was in flight.

        Raises:
            ValueError: the state was written under another split count.
        """
        self._state = state
        self._legacy = "position" in state and SPLITS_KEY not in state
        if self._legacy:
            self._start_at(state.get("position"))
        elif len(state) or self.taken:
            self._splits.load(state, f"IterableSpout task {self._stride[1]}")
            self._start_at(None)
        self._in_flight.clear()
        self._replay.clear()

    def pre_prepare(self, checkpoint_id: int) -> None:
        if self._legacy:
            self._state.put("position", self.taken)
        else:
            self._splits.save(self._state)

    def next_tuple(self) -> None:
        if self._replay:
            mid = self._replay.pop(0)
            self._collector.emit(self._in_flight[mid], msg_id=mid)
            return
        i, item = next(self._it)  # StopIteration: nothing left (the executor waits for acks)
        self.taken += 1
        if self._single and not isinstance(item, (list, tuple)):
            item = (item,)
        if self._msg_ids:
            self._in_flight[i] = item
            self._collector.emit(item, msg_id=i)
        else:
            self._collector.emit(item)

    def drain(self) -> None:
        """Take no new item: emit the replays, then end the stream."""
        self._it = iter(())

    def progress(self) -> int:
        """Items of this task taken from the iterable so far (replays not counted)."""
        return self.taken

    def ack(self, msg_id) -> None:
        if self._in_flight.pop(msg_id, None) is not None:
            self.acked_ids.append(msg_id)
            self._retries.remove(msg_id)

    def fail(self, msg_id) -> None:
        if msg_id in self._in_flight:
            self.failed_ids.append(msg_id)
            if self._retries.schedule(msg_id, self._in_flight[msg_id]):
                self._replay.append(msg_id)
            else:
                del self._in_flight[msg_id]
                self.dead_ids.append(msg_id)


class CollectorBolt(Bolt):
    """A sink that keeps what it receives, for the driver to read back.

    Read with ``handle.collected(component_id)`` (cluster package): a list of
    ``(task_id, source_component, source_task, source_stream, values)`` per tuple, in
    arrival order per task. Bounded: beyond ``max_tuples`` per task it raises, so a
    forgotten sink cannot grow memory without limit (the error is reported, the tuple is
    dropped and counted as an error).
    """

    outputs = ()

    def __init__(self, max_tuples: int = 1_000_000) -> None:
        self.max_tuples = max_tuples
        self.received: list = []

    def prepare(self, conf, context, collector) -> None:
        self._task = context.task_id
        self.received = []

    def execute(self, tup) -> None:
        if len(self.received) >= self.max_tuples:
            raise OverflowError(f"CollectorBolt holds max_tuples={self.max_tuples}")
        self.received.append((self._task, tup.source_component, tup.source_task,
                              tup.source_stream, list(tup.values)))

    def declare_output_fields(self, declarer) -> None:
        pass
