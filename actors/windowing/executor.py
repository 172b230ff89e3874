"""Storm's ``WindowedBoltExecutor``: the bolt that runs a user's :class:`WindowedBolt`.

A bolt task whose component is a windowed bolt runs it inside a
:class:`WindowedBoltExecutor` (``BoltExecutor``), an ordinary bolt to the runtime: each
input tuple goes into a ``WindowEngine`` (actors/windowing/engine.py), tick tuples move its
time (their period is the window's ``WindowSpec.tick_interval_ms``, which the builder sets
as the component's ``topology.tick.tuple.freq.secs`` unless the user set a shorter one),
and each window the engine fires goes to the user's ``execute(window)``.

Acking, as Storm's: the executor does not ack on ``execute`` (``auto_ack`` off); a tuple is
acked once it leaves every window that holds it (the engine's ``Fire.done``), after the
window's ``execute`` returned; if ``execute(window)`` raises, the error is reported and the
window's new tuples fail (their spouts replay them). Emits from ``execute(window)`` are
anchored to every tuple of the window unless given anchors (Storm's windowed collector).
Late tuples go to the late stream, anchored to the tuple, or are counted and dropped (acked)
when none is declared; a tuple whose timestamp field holds neither a ``datetime`` nor a
number is bad input: counted, reported with the component, and acked (a replay would be as
bad).

With ``topology.bolts.window.ack.on.entry`` (ours; on by default in a topology fed by a
Spark streaming spout with msg ids, see ``cluster._plan``) a tuple is acked as soon as it is
in its windows, and the output of ``execute(window)`` is unanchored: the spout's source can
then move on (the next micro-batch is what moves event time), and the guarantee is
at-least-once up to the windows, whose open contents a restarted task loses.

Watermarks are per upstream task (actors/windowing/engine.py); an upstream task's end of stream
leaves the minimum (the executor calls :meth:`WindowedBoltExecutor.upstream_ended`), and
:meth:`finish` closes every open window before the user's ``finish``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from actors.windowing.engine import WindowEngine
from actors.windowing.timestamps import BadTimestamp, extract_timestamp
from topology import Bolt, BoundedMultiInput, OutputCollector, Tuple, WindowedBolt

#: the config key of the ack-on-entry rule
ACK_ON_ENTRY = "topology.bolts.window.ack.on.entry"


def now_ms() -> int:
    """Processing time: the wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class _WindowCollector(OutputCollector):
    """The collector a windowed bolt's ``execute(window)`` emits through: an emit without
    anchors is anchored to every tuple of the window being executed (Storm's
    ``WindowedOutputCollector``)."""

    def __init__(self, collector: OutputCollector) -> None:
        self._c = collector
        self.window_tuples: list[Tuple] = []
        #: acked on entry: every emit is unanchored, given anchors included (the tuples'
        #: trees are complete; anchoring to them would start trees nobody completes)
        self.unanchored = False

    def emit(self, values, stream: str = "default", anchors=None) -> tuple[int, ...]:
        return self._c.emit(values, stream, self._anchors(anchors))

    def emit_direct(self, task: int, values, stream: str = "default", anchors=None) -> None:
        self._c.emit_direct(task, values, stream, self._anchors(anchors))

    def _anchors(self, anchors):
        if self.unanchored:
            return None
        return self.window_tuples if anchors is None else anchors

    def ack(self, tup: Tuple) -> None:
        self._c.ack(tup)

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._c.fail(tup, reason)

    def reset_timeout(self, tup: Tuple) -> None:
        self._c.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._c.report_error(exc)


class WindowedBoltExecutor(Bolt, BoundedMultiInput):
    """Runs ``bolt`` (a :class:`WindowedBolt`) as a bolt (Storm's WindowedBoltExecutor).

    Attributes:
        bolt: the user's windowed bolt.
        engine: its ``WindowEngine`` (after ``prepare``).
        bad_timestamps: tuples dropped for a timestamp that is neither a datetime nor a
            number.
        late_dropped: late tuples counted and dropped (no late stream declared).
    """

    auto_ack = False  # acked as they leave their windows

    def __init__(self, bolt: WindowedBolt) -> None:
        self.bolt = bolt
        self.spec = bolt.window_spec()
        self.engine: WindowEngine | None = None
        self.bad_timestamps = 0
        self.late_dropped = 0

    # -- the bolt ---------------------------------------------------------------------
    def prepare(self, conf: dict, context, collector: OutputCollector) -> None:
        self.collector = collector
        #: ack each tuple once it is in its windows (``topology.bolts.window.ack.on.entry``)
        self.ack_on_entry = bool(conf.get(ACK_ON_ENTRY))
        self._window_collector = _WindowCollector(collector)
        upstream = sorted({t for (comp, _), _f in context.sources.items()
                           for t in context.component_tasks.get(comp, ())})
        self.engine = WindowEngine(self.spec, upstream, context.component_id)
        self.bolt.prepare(conf, context, self._window_collector)

    def execute(self, tup: Tuple) -> None:
        engine = self.engine
        if tup.is_tick():
            self._fire(engine.advance(now_ms()))
            return
        field = self.spec.timestamp_field
        ts = None
        if field is not None:
            try:
                ts = extract_timestamp(tup, field)
            except BadTimestamp as e:
                self.bad_timestamps += 1
                self.collector.report_error(e)
                self.collector.ack(tup)
                return
        fires = engine.add(tup, tup.source_task, ts, now_ms())
        if fires is None:
            self._late(tup, ts)
            return
        self._took(tup)
        if fires:
            self._fire(fires)

    def _took(self, tup: Tuple) -> None:
        """``tup`` is in the engine (not late)."""
        if self.ack_on_entry:
            self.collector.ack(tup)

    def _late(self, tup: Tuple, ts: int | None) -> None:
        late = self.spec.late_stream
        if late is None:
            self.late_dropped += 1
        else:
            self.collector.emit((tup.source_component, tup.source_stream, list(tup.values),
                                 ts), late, tup)
        self.collector.ack(tup)

    def _fire(self, fires: list) -> None:
        wc, col = self._window_collector, self.collector
        for f in fires:
            if f.window is None:  # tuples that left without a window to run (onExpiry)
                for t in f.done:
                    col.ack(t)
                continue
            # acked on entry: nothing left to anchor to (the output leaves the trees)
            wc.unanchored = self.ack_on_entry
            wc.window_tuples = [] if self.ack_on_entry else f.window.get()
            try:
                self.bolt.execute(f.window)
            except Exception as e:  # user code: report, fail the window's new tuples
                col.report_error(e)
                for t in f.window.get_new():
                    col.fail(t)
            finally:
                wc.window_tuples = []
            for t in f.done:
                col.ack(t)  # a no-op for a tuple failed above

    def upstream_ended(self, task: int) -> None:
        """Upstream task ``task`` ended its stream: it no longer holds the watermark."""
        if self.engine is not None:
            self._fire(self.engine.upstream_ended(task, now_ms()))

    def end_of_pass(self) -> None:
        """The executor has taken every tuple in its queue (executor thread): fire the
        windows of replays that came after every upstream task ended (see
        ``WindowEngine.flush_after_end``)."""
        if self.engine is not None:
            fires = self.engine.flush_after_end()
            if fires:
                self._fire(fires)

    def finish(self) -> None:
        """End of every input: every open window fires, then the user's ``finish``."""
        self._fire(self.engine.close(now_ms()))
        self.bolt.finish()

    def cleanup(self) -> None:
        self.bolt.cleanup()

    def window_stats(self) -> dict[str, Any]:
        """The windows' figures for stats: tuples held, watermark (epoch ms; None in
        processing time, before every upstream task has sent a tuple, and once every one
        has ended) and its lag behind the newest timestamp (ms), windows fired, late and
        bad tuples. Whole numbers or None: the engine's watermark is ``math.inf`` once the
        input has ended, which the stats (ints, formatted as such) must not carry."""
        e = self.engine
        if e is None:
            return {}
        wm, newest = e.watermark_ms, e.newest_ms
        if wm is not None and math.isinf(wm):
            wm = None
        return {"window_held": e.held, "watermark_ms": wm,
                "watermark_lag_ms": None if wm is None or newest is None else newest - wm,
                "windows_fired": e.windows_fired, "late_tuples": e.late,
                "bad_timestamps": self.bad_timestamps}
