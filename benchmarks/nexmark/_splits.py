"""The events of a Nexmark spout task's splits (``topology/_splits.py``): block ``b`` of 50
ids is in split ``b % S`` (``S``: ``topology.max.task.parallelism``), so split ``s`` is
``EventStream(generator, s, S)``; a task runs one stream per split it owns and merges them
by ``(dateTime, id)``. Each split's position is that stream's ``(position, held ids)``, so
a savepoint restores at another parallelism (``StatefulSpout.redistribute``)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping

from benchmarks.nexmark._generator import EventStream, NexmarkGenerator


class SplitEvents:
    """The merged events ``(event_id, event)`` of ``splits`` of ``count``.

    Args:
        generator: the events.
        count: the split count ``S``.
        splits: the splits this task owns.
        positions: per split, ``(position, held ids)`` as :meth:`positions` gave them
            (missing: from the split's start).
    """

    def __init__(self, generator: NexmarkGenerator, count: int, splits: Iterable[int],
                 positions: Mapping[int, tuple] | None = None) -> None:
        positions = positions or {}
        self._delayed = generator.config.delayed
        self._streams = {s: EventStream(generator, s, count, *positions.get(s, (0, ())))
                         for s in splits}
        self._heap: list = []  # (dateTime, id, split, event): each split's next event
        for s in self._streams:
            self._pull(s)

    def _pull(self, split: int) -> None:
        try:
            event_id, event = next(self._streams[split])
        except StopIteration:
            return
        heapq.heappush(self._heap, (event.dateTime, event_id, split, event))

    def __iter__(self) -> Iterator:
        return self

    def __next__(self) -> tuple:
        if not self._heap:
            raise StopIteration
        _, event_id, split, event = heapq.heappop(self._heap)
        self._pull(split)
        return event_id, event

    def positions(self) -> dict[int, tuple[int, list[int]]]:
        """Per split, ``(position, held ids)``: where its stream would go on from, the
        event taken ahead for the merge counted as not out."""
        ahead = {split: event_id for _, event_id, split, _ in self._heap}
        out = {}
        for s, stream in self._streams.items():
            position, held = stream.position, stream.held_ids()
            if s in ahead:  # (without delays the stream takes ids in order: one back)
                if self._delayed:
                    held.append(ahead[s])
                else:
                    position -= 1
            out[s] = (position, sorted(held))
        return out

    def out(self) -> int:
        """Events out of this merge so far (taken, less those held or ahead)."""
        return sum(p - len(h) for p, h in self.positions().values())
