"""Source splits: how a position-keeping spout divides its input so that another number of
tasks can take over its positions (Flink's source splits, FLIP-27; the split owner as
Flink's ``KeyGroupRangeAssignment`` assigns key groups).

A spout's input is a sequence of *items* (an ``IterableSpout``'s items, a ``DataFrameSpout``'s
Arrow blocks, the Nexmark spout's blocks of ids). With ``S`` splits (``topology.max.task.
parallelism``, the key-group count: 128 when unset), item ``i`` belongs to split ``i % S``,
and split ``s`` is owned by task ``operator_index(s, n, S)`` of ``n``: task ``k`` owns the
contiguous splits ``key_group_range(k, n, S)``. A task keeps one position per split it owns
(how far it came in that split), stored under :func:`split_key` in its state beside the
split count (:data:`SPLITS_KEY`). At another task count each new task takes the positions
of the splits it now owns from whichever old task had them (:func:`redistribute_splits`,
what these spouts' ``StatefulSpout.redistribute`` returns).

Pure: no Ray.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from topology._keygroups import key_group_count, key_group_range
from topology._state import StatefulSpout

#: the state key of a spout's split count
SPLITS_KEY = "splits"


def split_key(split: int) -> tuple[str, int]:
    """The state key of split ``split``'s position."""
    return ("split", split)


def redistribute_splits(old: Sequence[Mapping[Any, Any]], index: int, count: int) -> dict:
    """The state of new task ``index`` of ``count`` from the states of every old task
    (``old[k]``: old task ``k``'s state, key → value, as its ``pre_prepare`` put it): the
    split count and the position of each split the new task owns. A state holding more
    (a subclass's own keys) is refused rather than dropped: such a spout overrides
    ``redistribute`` to split its keys too.

    Raises:
        ValueError: an old state without a split count (a spout state of before splits,
            which restores only at the same parallelism), old states of different split
            counts, a split owned by no old task or by two, ``count`` above the split
            count, or a state with keys other than the split count and positions.
    """
    counts = {state.get(SPLITS_KEY) for state in old}
    if None in counts:
        raise ValueError("a spout state without splits (from an older savepoint) restores "
                         "only at the same parallelism")
    if len(counts) != 1:
        raise ValueError(f"the old tasks' states have split counts {sorted(counts)}")
    splits = counts.pop()
    if not 1 <= count <= splits:
        raise ValueError(f"{count} tasks for {splits} splits: each task owns at least one")
    known = {SPLITS_KEY, *(split_key(s) for s in range(splits))}
    for k, state in enumerate(old):
        extra = [key for key in state if key not in known]
        if extra:
            raise ValueError(f"old task {k} keeps {sorted(extra, key=repr)} beside its split "
                             f"positions, which redistribute_splits does not split; the "
                             f"spout's class must override redistribute to carry them")
    out: dict = {SPLITS_KEY: splits}
    for k, state in enumerate(old):
        mine = key_group_range(k, len(old), splits)
        for s in key_group_range(index, count, splits):
            if split_key(s) in state:
                if s not in mine:
                    raise ValueError(f"old task {k} holds split {s}, which it did not own")
                out[split_key(s)] = state[split_key(s)]
    return out


class SplitPositions:
    """One task's splits and its position in each (a spout's bookkeeping).

    ``SplitPositions(conf, index, tasks, start)``: task ``index`` of ``tasks`` owns
    :attr:`owned` of :attr:`count` splits (``topology.max.task.parallelism`` of ``conf``);
    every position starts at ``start``. :meth:`load` reads positions from a restored
    state, :meth:`save` puts those changed since the last save.

    Raises:
        ValueError: more tasks than splits.
    """

    def __init__(self, conf: Mapping[str, Any], index: int, tasks: int,
                 start: Any = 0) -> None:
        self.count = key_group_count(conf)
        self.owned = key_group_range(index, tasks, self.count)
        self._start = start
        self.positions: dict[int, Any] = dict.fromkeys(self.owned, start)
        self._saved: dict[int, Any] = {}

    def owns(self, item: int) -> bool:
        """True when item ``item`` is in one of this task's splits."""
        return item % self.count in self.owned

    def load(self, state: Any, who: str) -> None:
        """The positions in ``state`` (a ``KeyValueState`` or dict); a split missing there
        starts anew. ``who`` names the spout in an error.

        Raises:
            ValueError: the state was written under another split count.
        """
        stored = state.get(SPLITS_KEY)
        if stored is not None and stored != self.count:
            raise ValueError(f"{who}: its state has {stored} splits, topology.max.task."
                             f"parallelism is {self.count}; restore with {stored}")
        self.positions = {s: state.get(split_key(s), self._start) for s in self.owned}
        self._saved = dict(self.positions) if stored is not None else {}

    def save(self, state: Any) -> None:
        """Put the split count and every position changed since the last save."""
        if not self._saved:
            state.put(SPLITS_KEY, self.count)
        for s, p in self.positions.items():
            if self._saved.get(s, self) != p:
                state.put(split_key(s), p)
                self._saved[s] = p


def split_items(items: Any, splits: SplitPositions) -> Iterator[tuple[int, Any]]:
    """``(index, item)`` of the items of ``splits``' owned splits not yet taken (item ``i``
    of split ``s = i % S`` is taken when ``i // S < positions[s]``), in index order; each
    yield advances that split's position. ``items``: a sequence (indexed directly) or an
    iterable (walked and filtered)."""
    S, owned, pos = splits.count, splits.owned, splits.positions
    if not owned:
        return
    q = min(pos.values())
    if isinstance(items, (list, tuple, range)):
        n = len(items)
        while q * S + owned.start < n:
            for s in owned:
                if q >= pos[s]:
                    i = q * S + s
                    if i >= n:
                        return
                    pos[s] = q + 1
                    yield i, items[i]
            q += 1
        return
    for i, item in enumerate(itertools.islice(items, q * S, None), q * S):
        g, s = divmod(i, S)
        if s in owned and g >= pos[s]:
            pos[s] = g + 1
            yield i, item


class SplitSpout(StatefulSpout):
    """A ``StatefulSpout`` whose state is a :class:`SplitPositions`' (its split count and
    a position per split): its :meth:`redistribute` hands each new task the positions of
    the splits it owns. ``IterableSpout``, ``DataFrameSpout`` and the Nexmark spout are
    ones."""

    @classmethod
    def redistribute(cls, old: list[dict], index: int, count: int) -> dict:
        """:func:`redistribute_splits`.

        Raises:
            ValueError: a state of before splits (it restores only at the same
                parallelism), or states that do not split (see there).
        """
        return redistribute_splits(old, index, count)
