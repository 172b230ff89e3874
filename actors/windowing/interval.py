"""The runtime of ``topology.IntervalJoinBolt`` (Flink's interval join): an executor that
buffers each side's tuples by key, matches each arriving tuple against the other side's
buffer, and expires buffered tuples as the watermark passes the last time they could match.

Event time and the watermark are the windows' (actors/windowing/engine.py): a timestamp
from the bolt's ``with_timestamp_field``, a watermark per upstream task (the minimum over
live upstream tasks of the newest timestamp each sent, minus the lag, moved at most once
per watermark interval, by a tick tuple or by the first tuple of the interval: under
backpressure ticks wait behind the queue, and every match scans what has not expired),
late tuples (``ts < watermark``) to the late stream
or counted, bad timestamps reported and counted. A left tuple at ``l`` expires once the
watermark is above ``l + upper`` (no right on time can match it); a right at ``r`` once it
is above ``r - lower``.

Flink keeps both buffers in keyed ``MapState`` by timestamp and cleans them with event-time
timers; here each key's rows are a list sorted by time (a tuple arriving in order is
appended), so a match looks up the slice of times it can pair with (two bisections: a
spout running ahead of the other fills the buffers, not the cost of each match), and a
heap of expiry times says which keys to cut from the front. In a topology that
checkpoints, :class:`PersistentIntervalJoinExecutor` writes each key group's buffered
tuples under that group (``InGroup``) and the watermark state under the internal group.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from operator import itemgetter
from typing import Any

from actors._codec import decode_value, value_encoder
from actors.state._internals import CheckpointedInternals, InGroup
from actors.windowing.executor import ACK_ON_ENTRY, WindowedBoltExecutor, now_ms
from actors.windowing.timestamps import BadTimestamp, extract_timestamp
from topology import OutputCollector, StatefulBolt, Tuple
from topology.joins import IntervalJoinBolt

#: a buffered row's time: rows are ``(ts, tuple)``, each key's list sorted by time
_TS = itemgetter(0)


class _PairCollector(OutputCollector):
    """The collector ``process(left, right)`` emits through: anchored to the pair unless
    given anchors, or unanchored when tuples are acked on entry."""

    def __init__(self, collector: OutputCollector) -> None:
        self._c = collector
        self.pair: tuple = ()
        self.unanchored = False

    def _anchors(self, anchors):
        if self.unanchored:
            return None
        return list(self.pair) if anchors is None else anchors

    def emit(self, values, stream: str = "default", anchors=None) -> tuple[int, ...]:
        return self._c.emit(values, stream, self._anchors(anchors))

    def emit_direct(self, task: int, values, stream: str = "default", anchors=None) -> None:
        self._c.emit_direct(task, values, stream, self._anchors(anchors))

    def ack(self, tup: Tuple) -> None:
        self._c.ack(tup)

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._c.fail(tup, reason)

    def report_error(self, exc: BaseException) -> None:
        self._c.report_error(exc)


class IntervalJoinExecutor(WindowedBoltExecutor):
    """Runs ``bolt`` (a :class:`topology.IntervalJoinBolt`) as a bolt: see the module
    docstring. Executor thread only; nothing blocks.

    Attributes:
        buffered: tuples held in the two buffers.
        matched: pairs passed to ``process``.
        late: tuples refused as late.
    """

    def __init__(self, bolt: IntervalJoinBolt) -> None:
        super().__init__(bolt)
        self.matched = self.late = 0

    def prepare(self, conf: dict, context, collector: OutputCollector) -> None:
        self.collector = collector
        self.ack_on_entry = bool(conf.get(ACK_ON_ENTRY))
        self._component = context.component_id
        self._upstream = sorted({t for (comp, _), _f in context.sources.items()
                                 for t in context.component_tasks.get(comp, ())})
        self._fields = dict(context.sources)
        self._reset()
        self._pairs = _PairCollector(collector)
        self.bolt.prepare(conf, context, self._pairs)

    def _reset(self) -> None:
        self.buffers: tuple[dict, dict] = ({}, {})   # side -> key -> [(ts, tuple)]
        self._expiry: list = []                      # (expires at, seq, side, key)
        self._seq = 0
        self.buffered = 0
        self._task_max: dict[int, int] = {}
        self._ended: set[int] = set()
        self.watermark: float | None = None
        self._slot: int | None = None
        self.newest_ms: int | None = None

    # -- the bolt -----------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        # the watermark moves at most once per interval, on a tick or on data: a tick
        # waits behind a full queue, and a buffer not expired meanwhile costs every match
        slot = now_ms() // self.spec.watermark_interval_ms
        if slot != self._slot:
            self._slot = slot
            self._move_watermark()
        if tup.is_tick():
            return
        bolt = self.bolt
        try:
            ts = extract_timestamp(tup, self.spec.timestamp_field)
        except BadTimestamp as e:
            self.bad_timestamps += 1
            self.collector.report_error(e)
            self.collector.ack(tup)
            return
        wm = self.watermark
        if wm is not None and ts < wm:
            self.late += 1
            self._late(tup, ts)
            return
        task = tup.source_task
        seen = self._task_max.get(task)
        if seen is None or ts > seen:
            self._task_max[task] = ts
            if self.newest_ms is None or ts > self.newest_ms:
                self.newest_ms = ts
        side = bolt.side_of(tup)
        key = None if side is None else bolt.key_of(tup, side)
        if key is None:  # matches nothing (a null key, or a stream not in the join)
            self.collector.ack(tup)
            return
        others = self.buffers[1 - side].get(key)
        if others:
            matches, pairs = bolt.matches, self._pairs
            # the other side's times that can match, as a slice of its sorted rows
            lo, hi = ((ts + bolt.lower, ts + bolt.upper) if side == 0
                      else (ts - bolt.upper, ts - bolt.lower))
            first = bisect_left(others, lo, key=_TS)
            last = bisect_right(others, hi, first, key=_TS)
            for ots, other in others[first:last]:
                lts, rts = (ts, ots) if side == 0 else (ots, ts)
                if matches(lts, rts):
                    pairs.pair = (tup, other) if side == 0 else (other, tup)
                    self._process(pairs.pair, max(lts, rts))
        self._buffer(side, key, ts, tup)
        if self.ack_on_entry:
            self.collector.ack(tup)

    def _process(self, pair: tuple, ts: int) -> None:
        self.matched += 1
        self._pairs.unanchored = self.ack_on_entry
        self.bolt.output_timestamp = ts
        try:
            self.bolt.process(*pair)
        except Exception as e:  # user code: report, go on (both tuples stay buffered)
            self.collector.report_error(e)

    def _buffer(self, side: int, key: Any, ts: int, tup: Tuple) -> None:
        bolt = self.bolt
        expires = ts + bolt.upper + 1 if side == 0 else ts - bolt.lower + 1
        rows = self.buffers[side].setdefault(key, [])
        if not rows or rows[-1][0] <= ts:
            rows.append((ts, tup))
        else:  # (kept in time order, arrival order within a time)
            insort(rows, (ts, tup), key=_TS)
        self._seq += 1
        heapq.heappush(self._expiry, (expires, self._seq, side, key))
        self.buffered += 1
        self._changed(key, tup)

    def _changed(self, key: Any, tup: Tuple) -> None:
        """The buffers of ``key`` changed (a checkpoint's hook)."""

    def _move_watermark(self) -> None:
        live = [t for t in self._upstream if t not in self._ended]
        if not live:
            wm: float | None = math.inf if self._upstream else None
        else:
            maxes = [self._task_max.get(t) for t in live]
            wm = None if None in maxes else min(maxes) - self.spec.lag_ms
        if wm is None or (self.watermark is not None and wm <= self.watermark):
            return
        self.watermark = wm
        heap, touched = self._expiry, set()
        while heap and heap[0][0] <= wm:
            _, _, side, key = heapq.heappop(heap)
            touched.add((side, key))
        bolt, ack = self.bolt, self.collector.ack
        for side, key in touched:
            buf = self.buffers[side]
            rows = buf.get(key)
            if not rows:
                continue
            # a left at l expires once wm > l + upper, a right at r once wm > r - lower
            limit = wm - bolt.upper - 1 if side == 0 else wm + bolt.lower - 1
            cut = bisect_right(rows, limit, key=_TS)
            if not cut:
                continue
            if not self.ack_on_entry:
                for _, t in rows[:cut]:
                    ack(t)
            keep = rows[cut:]
            self.buffered -= cut
            if keep:
                buf[key] = keep
            else:
                del buf[key]
            self._changed(key, rows[0][1])

    def upstream_ended(self, task: int) -> None:
        """Upstream task ``task`` ended: it no longer holds the watermark back."""
        self._ended.add(task)
        self._move_watermark()

    def end_of_pass(self) -> None:
        pass

    def finish(self) -> None:
        """End of every input: every buffered tuple expires, then the user's ``finish``."""
        self._ended.update(self._upstream)
        self._move_watermark()
        self.bolt.finish()

    def window_stats(self) -> dict[str, Any]:
        wm = self.watermark
        if wm is not None and math.isinf(wm):
            wm = None
        return {"window_held": self.buffered, "watermark_ms": wm,
                "watermark_lag_ms": (None if wm is None or self.newest_ms is None
                                     else self.newest_ms - wm),
                "windows_fired": self.matched, "late_tuples": self.late,
                "bad_timestamps": self.bad_timestamps}


class PersistentIntervalJoinExecutor(IntervalJoinExecutor, StatefulBolt, CheckpointedInternals):
    """An interval join whose buffers are part of its task's checkpoints: each key group's
    buffered tuples under that group (key ``("ibuf", group)``, rewritten whole when the
    group changed), the watermark state under the internal group (key ``"imeta"``). Tuples
    are acked as they are buffered; outputs are unanchored. A pair output before a failure
    and after the checkpoint is output again by the replay (at-least-once output, exactly
    once through a two-phase-commit sink)."""

    def prepare(self, conf: dict, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.ack_on_entry = True
        self._group_of = self.bolt.key_group_function(conf)

    def _reset(self) -> None:
        super()._reset()
        self._key_group: dict[Any, int] = {}   # buffered key -> its group
        self._dirty: set[int] = set()
        self._stored: set[int] = set()
        self._pack = value_encoder()

    def _changed(self, key: Any, tup: Tuple) -> None:
        g = self._key_group.get(key)
        if g is None:
            g = self._key_group[key] = self._group_of(tup)
        self._dirty.add(g)

    def init_state(self, state) -> None:
        self.state = state

    def internal_changes(self, checkpoint_id: int) -> tuple[list, list]:
        rows: dict[int, list] = {g: [] for g in self._dirty}
        live_keys = set()
        for side, buf in enumerate(self.buffers):
            for key, entries in buf.items():
                live_keys.add(key)
                out = rows.get(self._key_group[key])
                if out is not None:
                    out.extend((side, ts, t.source_component, t.source_task, t.source_stream,
                                t.values) for ts, t in entries)
        self._key_group = {k: g for k, g in self._key_group.items() if k in live_keys}
        puts: list = []
        deletes: list = []
        for g, r in rows.items():
            key = InGroup(g, ("ibuf", g))
            if r:
                puts.append((key, self._pack(r)))
                self._stored.add(g)
            elif g in self._stored:
                deletes.append(key)
                self._stored.discard(g)
        self._dirty = set()
        wm = self.watermark
        meta = {"task_max": sorted(self._task_max.items()), "ended": sorted(self._ended),
                "wm": "inf" if wm == math.inf else wm, "newest": self.newest_ms}
        puts.append(("imeta", self._pack(meta)))
        return puts, deletes

    def restore_internals(self, entries: dict[Any, bytes], checkpoint_id: int | None) -> None:
        self._reset()
        if not entries:
            return
        try:
            meta = decode_value(entries["imeta"])
            self._task_max = {t: ts for t, ts in meta["task_max"]}
            self._ended = set(meta["ended"])
            wm = meta["wm"]
            self.watermark = math.inf if wm == "inf" else wm
            self.newest_ms = meta["newest"]
            for key, data in entries.items():
                if key == "imeta":
                    continue
                self._stored.add(key[1])
                for side, ts, comp, task, stream, values in decode_value(data):
                    tup = Tuple(values, self._fields[(comp, stream)], comp, task, stream)
                    self._buffer(side, self.bolt.key_of(tup, side), ts, tup)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            self._reset()
            raise ValueError(f"the stored join buffers of {self._component!r} do not "
                             f"restore: {type(e).__name__}: {e}") from None
        self._dirty = set()
