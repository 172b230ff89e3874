"""The windowing engine: :class:`WindowEngine`, the pure core of a windowed bolt that
decides which windows fire and which tuples are done (the user's side, ``WindowedBolt``,
``Count``, ``Duration``, ``TupleWindow``, is ``topology/windows.py``).

Storm 2.0's windowing (``BaseWindowedBolt``, ``WindowedBoltExecutor``, ``WindowManager`` with
its trigger and eviction policies, ``WaterMarkEventGenerator``) rebuilt as one class with no
I/O, no threads and no clock: the engine takes stimuli (:meth:`WindowEngine.add`,
:meth:`~WindowEngine.advance`, :meth:`~WindowEngine.upstream_ended`,
:meth:`~WindowEngine.close`) with the current time passed in, and returns :class:`Fire`
records. The executor carries them out: ``bolt.execute(fire.window)``, then ack ``fire.done``.

**Time.** Processing time when no timestamp field is set: a tuple's timestamp is the
``now_ms`` of its :meth:`~WindowEngine.add`. Event time otherwise: the timestamp comes from a
tuple field (:func:`extract_timestamp`), and a watermark, computed per upstream *task* as in
Flink (the minimum over live upstream tasks of the largest timestamp each has sent, minus the
lag), says how far event time has progressed. Tuples below the watermark are late. The
watermark releases held tuples to the windows in timestamp order (ties in arrival order), so
every rule below reads the same in both modes, with the watermark as the clock.

**Bounds.** Every window is half-open, ``[start_timestamp, end_timestamp)`` in epoch ms.
Duration windows are aligned to the epoch as Spark SQL's ``window(ts, length, slide)`` and
Flink's sliding windows: they start at the multiples of the sliding interval, and a tuple
with timestamp ``t`` is in every window ``[k * slide, k * slide + length)`` holding ``t``.
Storm's event-time windows are ``(end - length, end]`` instead (its ``TimeEvictionPolicy``
keeps ``0 <= end - ts < length``), and its processing-time windows are measured back from
whenever its timer thread runs, not aligned.

**Combinations** (L = length, S = sliding interval; the clock is ``now_ms`` or the watermark):

===================  =================================================================
Count L, Count S     every S-th tuple fires the last L tuples (``end`` = newest ts + 1)
Count L, Duration S  at each boundary ``b = k * S`` passed by the clock, if a tuple came
                     since the previous fire: the last L tuples with ts < b (``end = b``)
Duration L, Count S  every S-th tuple fires the tuples with ts in
                     ``[newest + 1 - L, newest + 1)``
Duration L, Dur. S   each aligned window whose end the clock has passed and that holds a
                     tuple (windows with no tuples never fire, as in Storm)
===================  =================================================================

Count-length windows have ``start_timestamp`` None, as in Storm. Processing-time count
triggers fire in ``add``; everything else fires when the clock moves (``advance``, or in event
time also ``upstream_ended``), so event-time ``add`` never fires.

**Acking.** A tuple is acked when it has left every window that will hold it: each
:class:`Fire` lists in ``done`` the held tuples no later window can include (for a tumbling
window, all its tuples). A ``Fire`` whose ``window`` is None only carries ``done`` (Storm's
``onExpiry``): tuples that left without a window to run, see below. The engine holds nothing
else: memory is the tuples the open windows (and, in event time, the watermark) need.

**Departures from Storm**, each for a reason:

- Aligned half-open bounds (above): windows that every task of a bolt, and Spark or Flink,
  agree on, whatever the timing of ticks.
- A count-length window with a duration slide fires only when it has a tuple it did not
  have at its previous fire. Storm runs ``execute`` again on the unchanged window at every
  boundary: after a gap in event time once per slide, in processing time for ever once the
  input stops, and a watermark jumping to +infinity would never finish.
- ``get_expired()`` lists the tuples of the previous window that are not in this one. Storm
  also lists tuples that expired without ever being in a window (Count L with Duration S,
  Duration L with Count S), and keeps every one of them in memory until the next window;
  here they are acked as soon as they are known to be outside every later window, through a
  ``Fire`` with no window, at most every :data:`EXPIRE_EVENTS_THRESHOLD` tuples as Storm's
  ``WindowManager`` compacts. Storm also loses the expirations it finds while scanning an
  event-time window that turns out empty; here they are listed.
- Late means ``ts < watermark`` and a tuple at the watermark is on time; windows with
  ``end <= watermark`` fire. With Storm's closed ends a window ending at the watermark fires
  while tuples stamped with that very end are still accepted, and miss it.
- Count triggers in event time count each tuple once, in timestamp order as the watermark
  releases it. Storm's ``WatermarkCountTriggerPolicy`` counts in arrival order and counts a
  tuple again in the next watermark's scan when it fell after the last trigger point.
- The end of the input (:meth:`WindowEngine.close`, or every upstream task ended in event
  time) fires every window that holds a tuple, including a partial count window with the
  tuples that came after the last trigger: a finite stream has no tuples left to fill it.
"""

from __future__ import annotations

import heapq
import logging
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from topology import Count, TupleWindow
from topology.windows import WindowSpec, amount_of, error_prefix

#: Storm's ``WindowManager.EXPIRE_EVENTS_THRESHOLD``: tuples that leave a count window between
#: two fires are acked in groups of this many, so the check costs O(1) amortised per tuple
#: and such tuples never pile up in memory until the next fire.
EXPIRE_EVENTS_THRESHOLD = 100


class Fire(NamedTuple):
    """One decision of the engine.

    Attributes:
        window: run ``execute(window)``; None when the record only acks (Storm's
            ``onExpiry``: tuples that left every window without a window to run).
        done: the items no later window can hold: ack them once ``execute`` has returned
            (at once when ``window`` is None). Each accepted item is in exactly one
            ``done``, in the fire of its last window or a later one.
    """

    window: TupleWindow | None
    done: list


logger = logging.getLogger(__name__)


class WindowEngine:
    """Which windows fire, and which tuples are done: the pure core of a windowed bolt task
    (Storm's ``WindowManager`` with its trigger and eviction policies and its
    ``WaterMarkEventGenerator``).

    One engine per bolt task. Items are opaque (the executor's tuples); the engine holds
    them until a :class:`Fire` lists them in ``done``. No method blocks, reads a clock or
    does I/O; ``now_ms`` (epoch ms) is passed in and treated as never going back (an earlier
    value counts as the latest seen). Cost per ``add``: O(1) amortised in processing time
    and for in-order event time; O(log n) for a tuple that arrives out of order. A fire costs
    the size of its window.

    Attributes:
        spec: the window.
        newest_ms: the largest timestamp seen (None before the first tuple).
        windows_fired: windows returned so far.
        late: event-time tuples refused as late.
    """

    __slots__ = ("spec", "newest_ms", "windows_fired", "late", "_component",
                 "_event_time", "_count_length", "_count_trigger", "_per_item", "_length",
                 "_slide",
                 "_lag", "_wm_interval",
                 "_items", "_ts", "_base", "_done_hi", "_prev_lo", "_prev_hi", "_prev_window",
                 "_since_fire", "_since_scan", "_next_start", "_now",
                 "_pending", "_pending_heap", "_seq", "_upstream", "_ended", "_task_max",
                 "_wm", "_wm_slot", "_closed")

    def __init__(self, spec: WindowSpec, upstream_tasks: Iterable[int],
                 component: str | None = None) -> None:
        """
        Args:
            spec: the window (validated here).
            upstream_tasks: the task ids this task receives from; in event time the
                watermark waits for each of them (a task sending from outside the set joins
                it, with a warning).
            component: the bolt's id, for errors and logs.

        Raises:
            TopologyError: ``spec`` is invalid (see ``WindowSpec.validate``).
        """
        spec.validate(component or "")
        self.spec = spec
        self._component = component
        self.newest_ms: int | None = None
        self.windows_fired = 0
        self.late = 0
        self._event_time = spec.event_time
        self._count_length = isinstance(spec.length, Count)
        self._count_trigger = isinstance(spec.sliding, Count)
        # count triggers and count-length expiry scans look at each released item
        self._per_item = self._count_trigger or self._count_length
        self._length = amount_of(spec.length)
        self._slide = amount_of(spec.sliding)
        self._lag = spec.lag_ms
        self._wm_interval = spec.watermark_interval_ms
        # Released items (every item in processing time; in event time those below the
        # watermark) in timestamp order, ties in arrival order. Positions are global: the
        # i-th released item is at index i - _base. Windows are contiguous ranges of them.
        self._items: list = []
        self._ts: list[int] = []
        self._base = 0
        self._done_hi = 0       # items below this position were handed out as done
        self._prev_lo = 0       # the previous window's range [_prev_lo, _prev_hi)
        self._prev_hi = 0
        self._prev_window: tuple = ()   # its items, for the next window's get_expired()
        self._since_fire = 0    # released since the last count trigger
        self._since_scan = 0    # released since the last expiry scan (Count L, Duration S)
        self._next_start: int | None = None   # first unfired start (Duration L, Duration S)
        self._now: int | None = None          # processing-time clock
        # event time: items waiting for the watermark, as (ts, seq, item); in-order arrivals
        # in a deque, the rest in a heap, merged on release
        self._pending: deque = deque()
        self._pending_heap: list = []
        self._seq = 0
        self._upstream = set(upstream_tasks)
        self._ended: set[int] = set()
        self._task_max: dict[int, int] = {}
        self._wm: float | None = None
        self._wm_slot: int | None = None
        self._closed = False

    # -- read-only figures ------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Items not yet handed out as done: in a window, or waiting for the watermark."""
        return (self._base + len(self._ts) - self._done_hi + len(self._pending)
                + len(self._pending_heap))

    @property
    def watermark_ms(self) -> int | float | None:
        """Event time's progress in epoch ms: None until every live upstream task has sent
        a tuple (and always in processing time); ``math.inf`` once every upstream task has
        ended, or after :meth:`close`."""
        return self._wm

    def tick_interval_ms(self) -> int | None:
        """How often :meth:`advance` should be called for windows to fire on time, in ms
        (the spec's :meth:`WindowSpec.tick_interval_ms`)."""
        return self.spec.tick_interval_ms()

    @property
    def accepted(self) -> int:
        """Items taken so far (late ones excluded): the ``i``-th accepted item has arrival
        number ``i``, which :meth:`snapshot` names pending items by."""
        return self._seq

    # -- stimuli ----------------------------------------------------------------------------

    def add(self, item: Any, source_task: int, ts_ms: int | None, now_ms: int) -> list[Fire] | None:
        """Take one tuple.

        Args:
            item: the tuple (opaque).
            source_task: the upstream task it came from.
            ts_ms: its event time (epoch ms, from :func:`extract_timestamp`); ignored in
                processing time, where the timestamp is ``now_ms``.
            now_ms: the current time, epoch ms.

        Returns:
            None when the tuple is late (event time, ``ts_ms`` below the watermark): it is
            not taken, and is counted in :attr:`late`. Otherwise the windows this add fired,
            in window order: processing-time count triggers, plus the occasional ack-only
            ``Fire``; always ``[]`` in event time.

        Raises:
            RuntimeError: the engine was closed.
            ValueError: event time and ``ts_ms`` is None.
        """
        if self._closed:
            raise RuntimeError("add() after close(): the window engine has ended its stream")
        if not self._event_time:
            now = self._now
            if now is None or now_ms > now:
                self._now = now = now_ms
            self.newest_ms = now
            self._seq += 1
            self._items.append(item)
            self._ts.append(now)
            if not self._per_item:
                return []
            fires: list[Fire] = []
            self._after_release(fires)
            return fires
        if ts_ms is None:
            raise ValueError("an event-time window needs each tuple's ts_ms "
                             "(extract_timestamp(tuple, spec.timestamp_field))")
        wm = self._wm
        if wm is not None and ts_ms < wm:
            self.late += 1
            return None
        task_max = self._task_max
        seen = task_max.get(source_task)
        if seen is None:
            if source_task not in self._upstream:
                self._upstream.add(source_task)
                logger.warning("%sa tuple from task %s, which is not among its upstream "
                               "tasks; the watermark now waits for that task too",
                               error_prefix(self._component), source_task)
            task_max[source_task] = ts_ms
        elif ts_ms > seen:
            task_max[source_task] = ts_ms
        newest = self.newest_ms
        if newest is None or ts_ms > newest:
            self.newest_ms = ts_ms
        seq = self._seq
        self._seq = seq + 1
        pending = self._pending
        if not pending or ts_ms >= pending[-1][0]:
            pending.append((ts_ms, seq, item))
        else:
            heapq.heappush(self._pending_heap, (ts_ms, seq, item))
        return []

    def advance(self, now_ms: int) -> list[Fire]:
        """Time passes (call on each tick, every :meth:`tick_interval_ms`).

        Processing time: fires the duration-triggered windows whose end (or boundary) is at
        or before ``now_ms``. Event time: recomputes the watermark, at most once per
        watermark interval (per ``now_ms // interval`` slot), releases the tuples below it
        and fires the windows it completes.

        Returns:
            The fires, in window order (often ``[]``).
        """
        if self._closed:
            return []
        if self._event_time:
            slot = now_ms // self._wm_interval
            if self._wm_slot is not None and slot <= self._wm_slot:
                return []
            self._wm_slot = slot
            return self._move_watermark(self._compute_watermark())
        now = self._now
        if now is None or now_ms > now:
            self._now = now = now_ms
        fires: list[Fire] = []
        if not self._count_trigger:
            self._fire_due(now, fires)
        return fires

    def upstream_ended(self, task: int, now_ms: int) -> list[Fire]:
        """Upstream ``task`` has sent its last tuple (its end-of-stream marker came).

        Event time: the task stops holding the watermark back, which is recomputed now;
        once every upstream task has ended the watermark is +infinity and every window
        with tuples fires, as at :meth:`close` (later tuples, replays, are late).
        Processing time: once every upstream task has ended, every window with tuples fires
        as at :meth:`close`, and later tuples (replays) start new windows, fired at the
        next trigger, at :meth:`flush_after_end` or at :meth:`close`. Without this a finite
        stream with acking would wait for ever: its spouts end their streams only once
        every tree is acked, and the trees in open windows are acked only when the windows
        fire.

        Returns:
            The fires, in window order.
        """
        self._upstream.add(task)
        self._ended.add(task)
        if self._closed:
            return []
        if self._event_time:
            return self._move_watermark(self._compute_watermark())
        fires: list[Fire] = []
        if not self._upstream - self._ended:
            self._flush(fires)
        return fires

    def flush_after_end(self) -> list[Fire]:
        """Processing time, once every upstream task has ended: fire the windows holding
        tuples that came after the end (replays of failed or timed-out trees), as at
        :meth:`upstream_ended`. Call it when a pass over the input queue is done, so the
        replays that arrived together share windows. Without it a count window short of its
        count would hold its replays until their trees time out, replay again, and be held
        again: the stream could never end. A no-op in event time (replays after the end
        are late) and while an upstream task is live.

        Returns:
            The fires, in window order (``[]`` when nothing is held).
        """
        if (self._closed or self._event_time or self._upstream - self._ended
                or self._done_hi == self._base + len(self._ts)):
            return []
        fires: list[Fire] = []
        self._flush(fires)
        return fires

    def close(self, now_ms: int) -> list[Fire]:
        """The end of the input: every window holding tuples fires, in order, and every
        held item is in the ``done`` of one of the returned fires; afterwards nothing is
        held and :meth:`add` raises. Idempotent.

        Returns:
            The fires, in window order; the last may be ack-only (``window`` None) when
            tuples were kept for a window that will now never come.
        """
        if self._closed:
            return []
        if self._event_time:
            fires = self._move_watermark(math.inf)
        else:
            fires = []
            self._flush(fires)
        self._closed = True
        return fires

    # -- event time -------------------------------------------------------------------------

    def _compute_watermark(self) -> float | None:
        """min over live upstream tasks of their newest ts, minus the lag; None while a live
        task has sent nothing; +inf once every known task has ended."""
        live = self._upstream - self._ended
        if not live:
            return math.inf if self._upstream else None
        task_max = self._task_max
        low = None
        for task in live:
            ts = task_max.get(task)
            if ts is None:
                return None
            if low is None or ts < low:
                low = ts
        return low - self._lag

    def _move_watermark(self, wm: float | None) -> list[Fire]:
        if wm is None or (self._wm is not None and wm <= self._wm):
            return []
        self._wm = wm
        fires: list[Fire] = []
        self._release(wm, fires)
        if wm == math.inf:
            self._flush(fires)
        elif not self._count_trigger:
            self._fire_due(wm, fires)
        return fires

    def _release(self, wm: float, fires: list[Fire]) -> None:
        """Move the pending items with ts < ``wm`` to the released sequence, in (ts, arrival)
        order, running count triggers as they go."""
        pending, heap = self._pending, self._pending_heap
        items, tss = self._items, self._ts
        per_item = self._per_item
        while pending or heap:
            if heap and (not pending or heap[0] < pending[0]):
                if heap[0][0] >= wm:
                    return
                ts, _, item = heapq.heappop(heap)
            else:
                if pending[0][0] >= wm:
                    return
                ts, _, item = pending.popleft()
            items.append(item)
            tss.append(ts)
            if per_item:
                self._after_release(fires)

    # -- windows ----------------------------------------------------------------------------

    def _after_release(self, fires: list[Fire]) -> None:
        """After one item joined the released sequence (count triggers, count lengths)."""
        if self._count_trigger:
            self._since_fire += 1
            if self._since_fire >= self._slide:
                self._count_fire(fires)
        elif self._count_length:
            self._since_scan += 1
            if self._since_scan >= EXPIRE_EVENTS_THRESHOLD:
                self._expire_displaced(fires)

    def _count_fire(self, fires: list[Fire]) -> None:
        """A count trigger (or the final partial window): the window ending at the newest
        released item."""
        self._since_fire = 0
        tss, base = self._ts, self._base
        hi = base + len(tss)
        newest = tss[-1]
        if self._count_length:
            # the last `length` items; a partial window at the end of the input holds those
            # of the window the next trigger would have fired (its older items are done)
            lo = max(self._prev_hi + self._slide - self._length, 0)
            self._emit(lo, hi, hi + self._slide - self._length, None, newest + 1, fires)
        else:
            start = newest + 1 - self._length
            lo = bisect_left(tss, start, self._done_hi - base) + base
            # a later window ends at a newer or equal ts, so it starts no earlier than this one
            self._emit(lo, hi, lo, start, newest + 1, fires)

    def _fire_due(self, clock: float, fires: list[Fire]) -> None:
        """Fire the duration-slid windows the clock has passed, in order."""
        tss, length, slide = self._ts, self._length, self._slide
        if self._count_length:
            while True:
                base = self._base
                oldest = self._unwindowed()
                if oldest is None:
                    return
                # the first boundary after the oldest item no window has held yet
                boundary = (tss[oldest] // slide + 1) * slide
                if boundary > clock:
                    return
                hi = bisect_left(tss, boundary, oldest) + base
                # a later window needs a new item, so it drops at least the oldest of these
                self._emit(max(hi - length, 0), hi, hi + 1 - length, None, boundary, fires)
        else:
            while True:
                base, done_hi = self._base, self._done_hi
                if done_hi >= base + len(tss):
                    return
                # the first window holding the oldest item not done, unless already fired
                start = ((tss[done_hi - base] - length) // slide + 1) * slide
                if self._next_start is not None and start < self._next_start:
                    start = self._next_start
                end = start + length
                if end > clock:
                    return
                lo = bisect_left(tss, start, done_hi - base)
                hi = bisect_left(tss, end, lo) + base
                keep = bisect_left(tss, start + slide, lo) + base
                self._emit(lo + base, hi, keep, start, end, fires)
                self._next_start = start + slide

    def _expire_displaced(self, fires: list[Fire]) -> None:
        """Count L, Duration S: ack, without a window, the items pushed out of the last L
        before the next boundary fires (Storm's ``compactWindow`` every 100 events)."""
        self._since_scan = 0
        tss, base = self._ts, self._base
        oldest = self._unwindowed()
        if oldest is None:
            return
        # the next window ends at the first boundary after the oldest unwindowed item; it and
        # every later one hold at least the items below that boundary, so their last L at most
        boundary = (tss[oldest] // self._slide + 1) * self._slide
        bound = bisect_left(tss, boundary, oldest) + base - self._length
        if bound > self._done_hi:
            done = self._items[self._done_hi - base:bound - base]
            self._done_hi = bound
            fires.append(Fire(None, done))
            self._trim()

    def _unwindowed(self) -> int | None:
        """Count L, Duration S: list index of the oldest released item no window has held
        and that is not done, or None. (Items pushed out of the last L before any window
        held them are done, and may be gone from the list.)"""
        first = max(self._prev_hi, self._done_hi) - self._base
        return first if first < len(self._ts) else None

    def _emit(self, lo: int, hi: int, keep: int, start: int | None, end: int,
              fires: list[Fire]) -> None:
        """Fire the window [lo, hi) of released positions; ``keep`` is the first position a
        later window can hold, so everything below it becomes done."""
        items, base = self._items, self._base
        prev_lo, prev_hi = self._prev_lo, self._prev_hi
        window = items[lo - base:hi - base]
        new = items[max(lo, prev_hi) - base:hi - base]
        expired = list(self._prev_window[:max(0, min(lo, prev_hi) - prev_lo)])
        if keep > hi:
            keep = hi
        done_hi = self._done_hi
        if keep > done_hi:
            done = items[done_hi - base:keep - base]
            self._done_hi = keep
        else:
            done = []
        fires.append(Fire(TupleWindow(window, new, expired, start, end), done))
        self.windows_fired += 1
        self._prev_lo, self._prev_hi = lo, hi
        self._prev_window = tuple(window)   # the user may change the list they got
        self._trim()

    def _trim(self) -> None:
        """Drop done items from the front once they are half the list (amortised O(1))."""
        cut = self._done_hi - self._base
        if cut > 64 and cut * 2 > len(self._items):
            del self._items[:cut]
            del self._ts[:cut]
            self._base = self._done_hi

    def _flush(self, fires: list[Fire]) -> None:
        """The end of the input (every pending item already released): fire what is left,
        then hand every remaining item out as done. ``fires`` holds only this call's fires."""
        tss = self._ts
        n = self._base + len(tss)
        if not self._count_trigger:
            self._fire_due(math.inf, fires)
        elif self._prev_hi < n:
            self._count_fire(fires)
        base, done_hi = self._base, self._done_hi
        if done_hi < n:
            rest = self._items[done_hi - base:]
            if fires:
                fires[-1].done.extend(rest)     # after the last window there will ever be
            else:
                fires.append(Fire(None, rest))
        self._items.clear()
        tss.clear()
        self._base = self._done_hi = self._prev_hi = n
        self._prev_lo = n
        self._prev_window = ()

    # -- checkpoints (actors/windowing/persistent.py) -------------------------------------

    def snapshot(self) -> tuple[dict, list, list, tuple]:
        """What a restore needs, for a checkpoint (Storm's persistent windows keep the
        window manager's state in the task's ``WindowState``). O(held); changes nothing.

        Returns:
            ``(meta, released, pending, previous)``: ``meta`` the engine's figures and
            positions as plain ints, floats and lists (no items); ``released`` the
            ``(item, ts)`` not yet done, in release order; ``pending`` the
            ``(ts, arrival number, item)`` waiting for the watermark, in-order ones first,
            then the out-of-order heap; ``previous`` the previous window's items (for the
            next window's ``get_expired()``).
        """
        cut = self._done_hi - self._base
        wm = self._wm
        meta = {
            "newest": self.newest_ms, "fired": self.windows_fired, "late": self.late,
            "done_hi": self._done_hi, "prev_lo": self._prev_lo, "prev_hi": self._prev_hi,
            "since_fire": self._since_fire, "since_scan": self._since_scan,
            "next_start": self._next_start, "now": self._now, "seq": self._seq,
            "upstream": sorted(self._upstream), "ended": sorted(self._ended),
            "task_max": sorted(self._task_max.items()),
            "wm": "inf" if wm == math.inf else wm, "wm_slot": self._wm_slot,
            "closed": self._closed, "in_order": len(self._pending),
        }
        released = list(zip(self._items[cut:], self._ts[cut:], strict=True))
        pending = list(self._pending) + self._pending_heap
        return meta, released, pending, self._prev_window

    def restore(self, meta: dict, released: list, pending: list, previous: tuple) -> None:
        """Become the engine that :meth:`snapshot` described (the arguments as it
        returned them, items restored by the caller). A fresh engine of the same spec is
        expected; figures and positions are replaced, nothing fires.

        Raises:
            KeyError, ValueError: ``meta`` is not a snapshot's.
        """
        self.newest_ms = meta["newest"]
        self.windows_fired = meta["fired"]
        self.late = meta["late"]
        self._base = self._done_hi = meta["done_hi"]
        self._prev_lo, self._prev_hi = meta["prev_lo"], meta["prev_hi"]
        self._since_fire, self._since_scan = meta["since_fire"], meta["since_scan"]
        self._next_start, self._now, self._seq = meta["next_start"], meta["now"], meta["seq"]
        self._upstream = set(meta["upstream"])
        self._ended = set(meta["ended"])
        self._task_max = {t: ts for t, ts in meta["task_max"]}
        wm = meta["wm"]
        self._wm = math.inf if wm == "inf" else wm
        self._wm_slot = meta["wm_slot"]
        self._closed = meta["closed"]
        self._items = [item for item, _ in released]
        self._ts = [ts for _, ts in released]
        k = meta["in_order"]
        self._pending = deque(tuple(p) for p in pending[:k])
        self._pending_heap = [tuple(p) for p in pending[k:]]
        heapq.heapify(self._pending_heap)
        self._prev_window = tuple(previous)

    # -- checks -----------------------------------------------------------------------------

    def validate_state(self) -> None:
        """Assert the engine's invariants (for tests; O(held))."""
        tss, base = self._ts, self._base
        n = base + len(tss)
        assert len(self._items) == len(tss)
        assert all(a <= b for a, b in zip(tss, tss[1:], strict=False)), "released out of order"
        assert base <= self._done_hi <= n, (base, self._done_hi, n)
        assert self._prev_lo <= self._prev_hi <= n
        assert len(self._prev_window) == self._prev_hi - self._prev_lo
        assert self._done_hi - base <= max(64, len(self._items) // 2 + 1), "done items kept"
        if self._pending:
            p = list(self._pending)
            assert all(a[:2] < b[:2] for a, b in zip(p, p[1:], strict=False))
        for ts, _, _ in list(self._pending) + self._pending_heap:
            assert self._wm is None or ts >= self._wm, "a pending item below the watermark"
            assert not tss or ts >= tss[-1], "a pending item below a released one"
