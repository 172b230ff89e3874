"""Persistent windows: a windowed bolt whose open windows are part of its task's
checkpoints (Storm's ``PersistentWindowedBoltExecutor`` with its ``WindowState``).

:class:`PersistentWindowedBoltExecutor` runs a :class:`topology.StatefulWindowedBolt` with
``with_persistence()``, and every plain ``WindowedBolt`` of a topology that runs
checkpoints (``cluster._plan``). At each checkpoint it writes, beside the user's
``KeyValueState`` and in the same atomic write (``actors/state/_internals.py``):

- the engine's figures, watermarks, trigger positions and the order of its held tuples
  (key ``"meta"``: one small record; runs of consecutive arrival numbers are stored as
  ``[first, count]`` pairs, so an in-order stream costs a few ints whatever it holds);
- the held tuples themselves, in partitions of :data:`PARTITION_SIZE` consecutive arrival
  numbers (key ``("part", k)``): only partitions that gained or lost a tuple since the
  previous checkpoint are written, and one emptied is deleted. A bolt whose tuples each
  belong to one key (``JoinBolt``: its ``key_group_function``) splits each partition by
  the key group of its tuples' keys (key ``("part", group, k)``, stored in that group:
  ``actors/state/_internals.py``'s ``InGroup``), so a rescale can move them by group.

A rollback restores both, so the windows hold again exactly the tuples they held at the
checkpoint, and the replay after it refills them. Tuples are acked as they enter their
windows (their checkpoint, not their tree, now keeps them), and a window's output is
unanchored. Exactly-once holds for event-time windows whose tuples are not late: which
tuples are late depends on how the upstream tasks' streams interleave, which a replay
need not repeat (as in Flink); processing-time windows assign tuples by arrival time, so
a replay can land them in other windows.
"""

from __future__ import annotations

import logging
from typing import Any

from actors._codec import decode_value, value_encoder
from actors.state._internals import CheckpointedInternals, InGroup
from actors.windowing.engine import WindowEngine
from actors.windowing.executor import WindowedBoltExecutor
from topology import StatefulBolt, StatefulWindowedBolt, Tuple, WindowedBolt
from topology._state import KeyValueState, _Stateful

logger = logging.getLogger(__name__)

#: arrival numbers per stored partition: a checkpoint rewrites whole partitions, so a
#: smaller one writes less per changed tuple and more keys per held tuple
PARTITION_SIZE = 1000
_META = "meta"


def runs(ids: list[int]) -> list[int]:
    """``ids`` as ``[first, count, first, count, ...]`` runs of consecutive ints."""
    out: list[int] = []
    for i in ids:
        if out and out[-2] + out[-1] == i:
            out[-1] += 1
        else:
            out += (i, 1)
    return out


def unruns(flat: list[int]) -> list[int]:
    """The inverse of :func:`runs`."""
    out: list[int] = []
    for k in range(0, len(flat), 2):
        out.extend(range(flat[k], flat[k] + flat[k + 1]))
    return out


class PersistentWindowedBoltExecutor(WindowedBoltExecutor, StatefulBolt, CheckpointedInternals):
    """Runs ``bolt`` with its windows checkpointed (see the module docstring).

    Args:
        bolt: a ``StatefulWindowedBolt`` (its ``init_state``, ``pre_prepare``,
            ``pre_commit`` and ``pre_rollback`` are called as for a ``StatefulBolt``) or a
            plain ``WindowedBolt`` (no user state).

    Attributes:
        max_events_in_memory: the bolt's ``with_max_events_in_memory`` (None: unset); a
            task holding more is logged once (windows are kept in memory, not evicted).
        partitions_written: partitions written (or deleted) by the last checkpoint.
        restores: restores from a checkpoint with windows in it.
    """

    def __init__(self, bolt: WindowedBolt) -> None:
        super().__init__(bolt)
        self.user_stateful = isinstance(bolt, _Stateful)
        self.max_events_in_memory = (bolt.max_events_in_memory
                                     if isinstance(bolt, StatefulWindowedBolt) else None)
        self.state: KeyValueState | None = None
        self._pack = value_encoder()
        self._reset_tracking()
        self.partitions_written = 0
        self.restores = 0
        self._warned = False

    def _reset_tracking(self) -> None:
        # id(held tuple) -> its arrival number; rebuilt at each checkpoint from what is
        # held, so it keeps at most one checkpoint interval of released tuples alive
        self._aid_of: dict[int, int] = {}
        self._retained: set[int] = set()      # arrival numbers held at the last checkpoint
        self._group_at: dict[int, int] = {}   # their key groups (a bolt with groups)
        self._parts: set[int] = set()         # partitions stored
        self._snap_seq = 0                    # engine.accepted at the last checkpoint

    # -- the bolt -----------------------------------------------------------------------------
    def prepare(self, conf: dict, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.ack_on_entry = True  # the checkpoint keeps a tuple once it is in its windows
        self._fields = dict(context.sources)
        self._upstream = sorted(self.engine._upstream)
        self._component = context.component_id
        #: tuple -> its key group, when the bolt stores its tuples by key group
        key_groups = getattr(self.bolt, "key_group_function", None)
        self._group_of = key_groups(conf) if key_groups is not None else None

    def _took(self, tup: Tuple) -> None:
        self._aid_of[id(tup)] = self.engine.accepted - 1
        self.collector.ack(tup)

    # -- StatefulBolt -------------------------------------------------------------------------
    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        if self.user_stateful:
            self.bolt.init_state(state)

    def pre_prepare(self, checkpoint_id: int) -> None:
        if self.user_stateful:
            self.bolt.pre_prepare(checkpoint_id)

    def pre_commit(self, checkpoint_id: int) -> None:
        if self.user_stateful:
            self.bolt.pre_commit(checkpoint_id)

    def pre_rollback(self) -> None:
        if self.user_stateful:
            self.bolt.pre_rollback()

    # -- CheckpointedInternals ----------------------------------------------------------------
    def internal_changes(self, checkpoint_id: int) -> tuple[list[tuple[Any, bytes]], list[Any]]:
        engine, aid_of, pack = self.engine, self._aid_of, self._pack
        meta, released, pending, previous = engine.snapshot()
        records: dict[int, tuple] = {}
        rel_ids = []
        for item, ts in released:
            a = aid_of[id(item)]
            rel_ids.append(a)
            records[a] = (ts, item)
        for ts, seq, item in pending:
            records[seq] = (ts, item)
        prev_ids = []
        for item in previous:
            a = aid_of[id(item)]
            prev_ids.append(a)
            if a not in records:
                records[a] = (None, item)
        meta["released"] = runs(rel_ids)
        meta["pending"] = runs([seq for _, seq, _ in pending])
        meta["previous"] = runs(prev_ids)
        meta["partition_size"] = PARTITION_SIZE
        held = set(records)
        size = PARTITION_SIZE
        group_of, group_at = self._group_of, self._group_at
        if group_of is None:
            def part(a: int) -> Any:
                return a // size
            dirty = {a // size for a in self._retained - held}
            if engine.accepted > self._snap_seq:
                dirty.update(range(self._snap_seq // size, (engine.accepted - 1) // size + 1))
        else:
            for a in held:
                if a not in group_at:
                    group_at[a] = group_of(records[a][1])
            gone = self._retained - held
            dirty = {(group_at.pop(a), a // size) for a in gone}

            def part(a: int) -> Any:
                return (group_at[a], a // size)
            dirty.update(part(a) for a in held if a >= self._snap_seq)
        parts: dict[Any, list] = {k: [] for k in dirty}
        if dirty:
            for a in sorted(held):
                rows = parts.get(part(a))
                if rows is not None:
                    ts, t = records[a]
                    rows.append((a, ts, t.source_component, t.source_task, t.source_stream,
                                 t.values))
        puts, deletes = [], []
        for k, rows in parts.items():
            key = ("part", k) if group_of is None else InGroup(k[0], ("part", *k))
            if rows:
                puts.append((key, pack(rows)))
                self._parts.add(k)
            elif k in self._parts:
                deletes.append(key)
                self._parts.discard(k)
        puts.append((_META, pack(meta)))
        self.partitions_written = len(parts)
        self._retained = held
        self._snap_seq = engine.accepted
        self._aid_of = {id(t): a for a, (_, t) in records.items()}
        limit = self.max_events_in_memory
        if limit is not None and len(held) > limit and not self._warned:
            self._warned = True
            logger.warning("windowed bolt %r holds %d tuples, over with_max_events_in_memory"
                           "(%d): windows are kept in memory here, not evicted to the state "
                           "store", self._component, len(held), limit)
        return puts, deletes

    def restore_internals(self, entries: dict[Any, bytes], checkpoint_id: int | None) -> None:
        self.engine = WindowEngine(self.spec, self._upstream, self._component)
        self._reset_tracking()
        if not entries:
            return
        try:
            meta = decode_value(entries[_META])
            records: dict[int, tuple] = {}
            for key, data in entries.items():
                if key == _META:
                    continue
                grouped = len(key) == 3  # ("part", group, k)
                self._parts.add((key[1], key[2]) if grouped else key[1])
                for a, ts, comp, task, stream, values in decode_value(data):
                    if grouped:
                        self._group_at[a] = key[1]
                    records[a] = (ts, Tuple(values, self._fields[(comp, stream)], comp, task,
                                            stream))
            released = [(records[a][1], records[a][0]) for a in unruns(meta["released"])]
            pending = [(records[a][0], a, records[a][1]) for a in unruns(meta["pending"])]
            previous = tuple(records[a][1] for a in unruns(meta["previous"]))
            self.engine.restore(meta, released, pending, previous)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            self.engine = WindowEngine(self.spec, self._upstream, self._component)
            self._reset_tracking()
            raise ValueError(f"the stored windows of {self._component!r} do not restore: "
                             f"{type(e).__name__}: {e}") from None
        self._retained = set(records)
        self._snap_seq = self.engine.accepted
        self._aid_of = {id(t): a for a, (_, t) in records.items()}
        self.restores += 1
