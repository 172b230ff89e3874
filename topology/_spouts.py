"""Built-in spouts and sinks that need nothing but the standard library."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from topology._components import Bolt, Spout
from topology._errors import TopologyError


class IterableSpout(Spout):
    """Emits the items of a finite iterable, then ends the stream.

    With parallelism *n*, task *k* (0-based index) emits the items at positions
    ``k, k+n, k+2n, ...``, so the tasks together emit each item exactly once.

    Args:
        items: a re-iterable collection (list, tuple, range...); it is pickled into each
            task, so keep it modest or use a generator factory via ``factory``.
        fields: output field names of the default stream.
        factory: alternative to ``items``: a picklable callable returning an iterable,
            called once in each task (for large generated inputs).
        msg_ids: emit each item with its position as ``msg_id`` (for acking, later).

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

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        n = len(context.get_component_tasks(context.component_id))
        source = self._items if self._factory is None else self._factory()
        self._it = enumerate(itertools.islice(source, context.task_index, None, n))
        self._stride = (n, context.task_index)
        self._single = len(self.outputs) == 1

    def next_tuple(self) -> None:
        i, item = next(self._it)  # StopIteration ends the stream
        if self._single and not isinstance(item, (list, tuple)):
            item = (item,)
        n, k = self._stride
        if self._msg_ids:
            self._collector.emit(item, msg_id=i * n + k)
        else:
            self._collector.emit(item)


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
