"""Windowed bolts, the user's side: ``Count``, ``Duration``, :class:`WindowedBolt`, its
settings (:class:`WindowSpec`, Storm's ``topology.bolts.*`` keys), the :class:`TupleWindow`
a bolt receives and the :class:`Fire` records the engine returns.

Which windows fire and when, the bounds, the watermarks and each departure from Storm:
``actors/windowing/engine.py``, the pure engine that decides.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topology._config import DEFAULTS
from topology._errors import ConfigError, TopologyError
from topology._fields import Fields
from topology._state import _Stateful

if TYPE_CHECKING:
    from topology._components import OutputCollector, OutputFieldsDeclarer, TopologyContext

# Storm's ``Config`` names for a windowed bolt's component configuration.
TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT = "topology.bolts.window.length.count"
TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS = "topology.bolts.window.length.duration.ms"
TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT = "topology.bolts.window.sliding.interval.count"
TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS = "topology.bolts.window.sliding.interval.duration.ms"
TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME = "topology.bolts.tuple.timestamp.field.name"
TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS = "topology.bolts.tuple.timestamp.max.lag.ms"
TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS = "topology.bolts.watermark.event.interval.ms"
TOPOLOGY_BOLTS_LATE_TUPLE_STREAM = "topology.bolts.late.tuple.stream"

#: Every key a windowed bolt's ``get_component_configuration()`` may hold.
WINDOW_CONFIG_KEYS = (
    TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT, TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS,
    TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT, TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS,
    TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME, TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS,
    TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS, TOPOLOGY_BOLTS_LATE_TUPLE_STREAM,
)

#: Fields of the late-tuple stream. Storm's has one field, ``late_tuple``, holding the tuple;
#: these carry what a Python consumer needs of it, in plain values.
LATE_FIELDS = ("source_component", "source_stream", "values", "timestamp")
#: Storm's ``DEFAULT_WATERMARK_EVENT_INTERVAL_MS``: the watermark moves at most once a second.
DEFAULT_WATERMARK_INTERVAL_MS = 1000
#: Storm's ``DEFAULT_MAX_LAG_MS``: no out-of-order tolerance unless asked for.
DEFAULT_MAX_LAG_MS = 0
#: Floor of :meth:`WindowEngine.tick_interval_ms` for duration windows: a finer tick costs an
#: executor wake-up each and saves at most this much firing delay.
MIN_TICK_MS = 10


def _whole(value: Any, what: str) -> int:
    """``value`` as an int: an integral number, or a float with no fraction; else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise ValueError(f"{what} must be a whole number, got {value!r}")


def _positive(value: Any, what: str, unit: str) -> int:
    n = _whole(value, what)
    if n <= 0:
        raise ValueError(f"{what} must be > 0 {unit}, got {value!r}")
    return n


@dataclass(frozen=True)
class Count:
    """A number of tuples: a window length or sliding interval (Storm's
    ``BaseWindowedBolt.Count``).

    Raises:
        ValueError: ``n`` is not a whole number > 0.
    """

    n: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", _positive(self.n, "Count", "tuples"))


@dataclass(frozen=True)
class Duration:
    """A span of time in whole milliseconds: a window length, sliding interval, lag or
    watermark interval (Storm's ``BaseWindowedBolt.Duration``).

    Raises:
        ValueError: ``ms`` is not a whole number > 0.
    """

    ms: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "ms", _positive(self.ms, "Duration", "ms"))

    @classmethod
    def of(cls, ms: int) -> Duration:
        """``ms`` milliseconds."""
        return cls(ms)

    @classmethod
    def seconds(cls, n: float) -> Duration:
        """``n`` seconds (a fraction is fine when it is whole in ms: ``seconds(0.5)``)."""
        return cls._scaled(n, 1000, "seconds")

    @classmethod
    def minutes(cls, n: float) -> Duration:
        return cls._scaled(n, 60_000, "minutes")

    @classmethod
    def hours(cls, n: float) -> Duration:
        return cls._scaled(n, 3_600_000, "hours")

    @classmethod
    def days(cls, n: float) -> Duration:
        return cls._scaled(n, 86_400_000, "days")

    @classmethod
    def _scaled(cls, n: float, unit_ms: int, unit: str) -> Duration:
        return cls(_whole(n * unit_ms, f"Duration.{unit}({n!r}) in ms"))


def amount_of(x: Count | Duration) -> int:
    """A window length or sliding interval as a number: tuples for ``Count``, ms for
    ``Duration``."""
    return x.n if isinstance(x, Count) else x.ms


def _length_key(x: Count | Duration) -> str:
    return (TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT if isinstance(x, Count)
            else TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS)


def _sliding_key(x: Count | Duration) -> str:
    return (TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT if isinstance(x, Count)
            else TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS)


def error_prefix(component: str | None) -> str:
    """The prefix of an error about component ``component``'s window."""
    return f"bolt {component!r}: " if component else "windowed bolt: "


@dataclass(frozen=True)
class WindowSpec:
    """What a windowed bolt asked for, read from its component configuration.

    Attributes:
        length: window length, in tuples (``Count``) or ms (``Duration``).
        sliding: how far the window slides between fires; ``Count(1)`` (Storm's default)
            fires on every tuple; equal to ``length`` for a tumbling window.
        timestamp_field: the tuple field holding event time; None for processing time.
        lag_ms: how far behind the newest timestamp the watermark trails (Storm's max lag):
            the out-of-order tolerance before a tuple is late. Event time only.
        watermark_interval_ms: the watermark moves at most once per this many ms of
            processing time (Storm's ``WaterMarkEventGenerator`` period). Event time only.
        late_stream: stream id on which the executor emits late tuples (one field,
            :data:`LATE_FIELDS`); None drops and counts them. Event time only.
    """

    length: Count | Duration
    sliding: Count | Duration = Count(1)
    timestamp_field: str | None = None
    lag_ms: int = DEFAULT_MAX_LAG_MS
    watermark_interval_ms: int = DEFAULT_WATERMARK_INTERVAL_MS
    late_stream: str | None = None

    @property
    def event_time(self) -> bool:
        """True when windows follow a timestamp field rather than processing time."""
        return self.timestamp_field is not None

    def tick_interval_ms(self) -> int | None:
        """How often the window's time must move for windows to fire on time, in ms: the
        period of the bolt's tick tuples.

        Event time: the watermark interval (windows fire when the watermark moves).
        Processing time: for duration windows the gcd of length and slide (every window end
        is a multiple of it, so ticks at its multiples fire each window at its end;
        otherwise a window fires at most one interval late), at least ``min(slide,
        MIN_TICK_MS)``; for a count length with a duration slide the slide; None when a
        count triggers (windows fire as tuples arrive).
        """
        if self.event_time:
            return self.watermark_interval_ms
        if isinstance(self.sliding, Count):
            return None
        slide = amount_of(self.sliding)
        period = slide if isinstance(self.length, Count) else math.gcd(amount_of(self.length),
                                                                        slide)
        return max(period, min(slide, MIN_TICK_MS))

    def component_configuration(self, conf: Mapping[str, Any]) -> dict[str, Any]:
        """``conf`` (a windowed bolt's own configuration) with the tick period this window
        needs as ``topology.tick.tuple.freq.secs``, unless ``conf`` asks for shorter ticks
        (a new dict)."""
        conf = dict(conf)
        tick_ms = self.tick_interval_ms()
        if tick_ms is not None:
            key = "topology.tick.tuple.freq.secs"
            mine = conf.get(key)
            conf[key] = tick_ms / 1000 if mine is None else min(mine, tick_ms / 1000)
        return conf

    @classmethod
    def from_config(cls, conf: Mapping[str, Any], component: str | None = None) -> WindowSpec:
        """Read the ``topology.bolts.*`` window keys of ``conf`` (other keys are ignored).

        The sliding interval defaults to ``Count(1)``, the lag to 0 and the watermark
        interval to 1000 ms, as in Storm's ``WindowedBoltExecutor``. Does not check how the
        values relate (see :meth:`validate`).

        Args:
            conf: a component configuration, as ``WindowedBolt.get_component_configuration``.
            component: the bolt's id, named in errors.

        Raises:
            ConfigError: no window length; both the count and the duration key of the
                length (or of the sliding interval); a count or duration that is not a
                whole number > 0; a lag or interval that is not a whole number.
        """
        who = error_prefix(component)

        def setting(key: str, kind: type[Count] | type[Duration]) -> Count | Duration | None:
            raw = conf.get(key)
            if raw is None:
                return None
            try:
                return kind(raw)
            except ValueError:
                raise ConfigError(f"{who}{key} must be a whole number > 0, got {raw!r}")

        def one(count_key: str, duration_key: str) -> Count | Duration | None:
            c, d = setting(count_key, Count), setting(duration_key, Duration)
            if c is not None and d is not None:
                raise ConfigError(f"{who}both {count_key!r} and {duration_key!r} are set; "
                                  "set one (with_window replaces both)")
            return c if c is not None else d

        def whole(key: str, default: int) -> int:
            raw = conf.get(key)
            if raw is None:
                return default
            try:
                return _whole(raw, key)
            except ValueError:
                raise ConfigError(f"{who}{key} must be a whole number of ms, got {raw!r}")

        length = one(TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT, TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS)
        if length is None:
            raise ConfigError(
                f"{who}no window length: set {TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT!r} or "
                f"{TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS!r} (call with_window or "
                "with_tumbling_window)")
        sliding = one(TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT,
                      TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS)
        return cls(
            length=length,
            sliding=Count(1) if sliding is None else sliding,
            timestamp_field=conf.get(TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME),
            lag_ms=whole(TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS, DEFAULT_MAX_LAG_MS),
            watermark_interval_ms=whole(TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS,
                                        DEFAULT_WATERMARK_INTERVAL_MS),
            late_stream=conf.get(TOPOLOGY_BOLTS_LATE_TUPLE_STREAM),
        )

    def validate(self, component: str) -> None:
        """Check the spec on its own; the error names ``component`` and the config key.

        Raises:
            TopologyError (a ValueError): a length or sliding interval that is not a
                ``Count`` or ``Duration`` > 0; a sliding interval longer than the window (of
                the same kind); a negative lag; a watermark interval <= 0; an empty timestamp
                field; an empty or reserved late stream id, or a late stream without a
                timestamp field (only event time has late tuples).
        """
        who = error_prefix(component)
        for what, x, key in (("window length", self.length, _length_key),
                             ("sliding interval", self.sliding, _sliding_key)):
            if not isinstance(x, (Count, Duration)):
                raise TopologyError(f"{who}the {what} must be a Count or a Duration, got {x!r}")
            if amount_of(x) <= 0:
                raise TopologyError(f"{who}{key(x)} must be > 0, got {amount_of(x)}")
        if (type(self.length) is type(self.sliding)
                and amount_of(self.sliding) > amount_of(self.length)):
            raise TopologyError(
                f"{who}the sliding interval {self.sliding} ({_sliding_key(self.sliding)}) is "
                f"longer than the window length {self.length} ({_length_key(self.length)}), "
                "so tuples between windows would be in none; slide by at most the length "
                "(with_tumbling_window for windows that do not overlap)")
        if isinstance(self.lag_ms, bool) or not isinstance(self.lag_ms, int) or self.lag_ms < 0:
            raise TopologyError(f"{who}{TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS} must be a "
                                f"whole number of ms >= 0, got {self.lag_ms!r}")
        wmi = self.watermark_interval_ms
        if isinstance(wmi, bool) or not isinstance(wmi, int) or wmi <= 0:
            raise TopologyError(f"{who}{TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS} must be a "
                                f"whole number of ms > 0, got {wmi!r}")
        tsf = self.timestamp_field
        if tsf is not None and (not isinstance(tsf, str) or not tsf):
            raise TopologyError(f"{who}{TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME} must be a "
                                f"field name, got {tsf!r}")
        late = self.late_stream
        if late is not None:
            if not isinstance(late, str) or not late or late.startswith("__"):
                raise TopologyError(f"{who}{TOPOLOGY_BOLTS_LATE_TUPLE_STREAM} must be a stream "
                                    f"id (not starting with '__'), got {late!r}")
            if tsf is None:
                raise TopologyError(
                    f"{who}{TOPOLOGY_BOLTS_LATE_TUPLE_STREAM} = {late!r} needs a timestamp "
                    f"field ({TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME}): only event-time "
                    "windows have late tuples; call with_timestamp_field or drop the stream")

    def check_against(self, component: str, conf: Mapping[str, Any]) -> None:
        """Storm's submit-time checks of a window against the topology config
        (``WindowedBoltExecutor.validate``), skipped when acking is off
        (``topology.acker.executors`` = 0: nothing times out and nothing is pending).

        - Processing time: the duration parts (length and/or sliding interval) must stay
          below ``topology.message.timeout.secs``, or tuples time out while their window is
          open and are replayed. Event time is not checked: how long a tuple waits there
          depends on how fast event time moves, not on the window.
        - Count parts (length and/or sliding count) must not exceed
          ``topology.max.spout.pending`` when that is set, or the spouts stop before the
          window fills, and it never fires.

        Raises:
            TopologyError (a ValueError): naming ``component``, the key and what to change.
        """
        if conf.get("topology.acker.executors", DEFAULTS["topology.acker.executors"]) == 0:
            return
        who = error_prefix(component)
        parts = (self.length, self.sliding)
        if not self.event_time:
            timeout_s = conf.get("topology.message.timeout.secs",
                                 DEFAULTS["topology.message.timeout.secs"])
            ms = sum(x.ms for x in parts if isinstance(x, Duration))
            if ms and timeout_s is not None and ms >= timeout_s * 1000:
                raise TopologyError(
                    f"{who}the window's duration (length + sliding interval) {ms} ms is not "
                    f"below topology.message.timeout.secs = {timeout_s} s: its tuples would "
                    f"time out in the window and be replayed; raise the timeout above "
                    f"{math.ceil(ms / 1000)} s or shorten the window")
        pending = conf.get("topology.max.spout.pending")
        n = sum(x.n for x in parts if isinstance(x, Count))
        if n and pending is not None and n > pending:
            raise TopologyError(
                f"{who}the window's count (length + sliding interval) {n} exceeds "
                f"topology.max.spout.pending = {pending}: the spouts would stop before the "
                f"window fills; raise topology.max.spout.pending to at least {n} or use a "
                "shorter window")


class TupleWindow:
    """The window a windowed bolt's ``execute`` receives (Storm's ``TupleWindowImpl``).

    Timestamps are epoch ms, half-open: every tuple in the window has
    ``start_timestamp <= ts < end_timestamp``. ``start_timestamp`` is None for count-length
    windows (as in Storm).

    Attributes:
        start_timestamp: first ms the window covers (int), or None for a count length.
        end_timestamp: first ms after the window (int).
    """

    __slots__ = ("_tuples", "_new", "_expired", "start_timestamp", "end_timestamp")

    def __init__(self, tuples: list, new: list, expired: list,
                 start_timestamp: int | None, end_timestamp: int) -> None:
        self._tuples = tuples
        self._new = new
        self._expired = expired
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp

    def get(self) -> list:
        """Every tuple in the window, in timestamp order (ties in arrival order)."""
        return self._tuples

    def get_new(self) -> list:
        """The tuples that were not in the previous window this bolt task executed."""
        return self._new

    def get_expired(self) -> list:
        """The tuples of the previous window this task executed that are not in this one."""
        return self._expired

    def __len__(self) -> int:
        return len(self._tuples)

    def __iter__(self) -> Iterator:
        return iter(self._tuples)

    def __repr__(self) -> str:
        return (f"TupleWindow([{self.start_timestamp}, {self.end_timestamp}) "
                f"{len(self._tuples)} tuples, {len(self._new)} new, "
                f"{len(self._expired)} expired)")


class WindowedBolt:
    """A bolt that processes windows of tuples (Storm's ``BaseWindowedBolt``).

    Configure with the chainable ``with_*`` methods (each returns self), typically in
    ``__init__`` or where the topology is built, and override :meth:`execute`::

        class Top(WindowedBolt):
            outputs = ("word", "count")
            def execute(self, window):
                ...
        Top().with_window(Duration.seconds(10), Duration.seconds(5)).with_timestamp_field("ts")

    The executor anchors what ``execute`` emits to the window's tuples and acks each tuple
    once it has left every window (:class:`Fire`). Which windows fire, and when: the module
    docstring.

    Attributes:
        outputs: fields of the default stream, as for ``Bolt``.
    """

    outputs: Sequence[str] | None = None

    def _window_config(self) -> dict[str, Any]:
        # created on first use, so a subclass __init__ need not call super().__init__()
        conf = self.__dict__.get("_window_conf")
        if conf is None:
            conf = self._window_conf = {}
        return conf

    def with_window(self, length: Count | Duration,
                    sliding: Count | Duration | None = None) -> WindowedBolt:
        """A sliding window of ``length`` that slides by ``sliding``; without ``sliding``, by
        every tuple (``Count(1)``), as Storm's ``withWindow(Count)`` and
        ``withWindow(Duration)``. Any mix of ``Count`` and ``Duration`` is allowed.

        Raises:
            TypeError: an argument is not a ``Count`` or ``Duration``.
            ValueError: ``sliding`` is longer than ``length`` (same kind).
        """
        if sliding is None:
            sliding = Count(1)
        for what, x in (("length", length), ("sliding", sliding)):
            if not isinstance(x, (Count, Duration)):
                raise TypeError(f"with_window {what} must be a Count or a Duration, got {x!r}; "
                                "e.g. with_window(Count(100)) or with_window(Duration.seconds(10))")
        if type(length) is type(sliding) and amount_of(sliding) > amount_of(length):
            raise ValueError(f"{type(self).__name__}: the sliding interval {sliding} is longer "
                             f"than the window length {length}")
        conf = self._window_config()
        for key in WINDOW_CONFIG_KEYS[:4]:
            conf.pop(key, None)
        conf[_length_key(length)] = amount_of(length)
        conf[_sliding_key(sliding)] = amount_of(sliding)
        return self

    def with_tumbling_window(self, length: Count | Duration) -> WindowedBolt:
        """Windows of ``length`` that do not overlap: each tuple is in exactly one."""
        return self.with_window(length, length)

    def with_timestamp_field(self, name: str) -> WindowedBolt:
        """Use event time from field ``name`` (epoch ms, or a ``datetime``; see
        :func:`extract_timestamp`) instead of processing time."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"with_timestamp_field takes a field name, got {name!r}")
        self._window_config()[TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME] = name
        return self

    def with_lag(self, duration: Duration) -> WindowedBolt:
        """The most a tuple's timestamp may trail the newest one before it is late."""
        if not isinstance(duration, Duration):
            raise TypeError(f"with_lag takes a Duration, got {duration!r}")
        self._window_config()[TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS] = duration.ms
        return self

    def with_watermark_interval(self, interval: Duration) -> WindowedBolt:
        """How often (processing time) the watermark may move; default 1 s, as Storm."""
        if not isinstance(interval, Duration):
            raise TypeError(f"with_watermark_interval takes a Duration, got {interval!r}")
        self._window_config()[TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS] = interval.ms
        return self

    def with_late_tuple_stream(self, stream_id: str) -> WindowedBolt:
        """Emit late tuples on ``stream_id`` instead of counting and dropping them; the
        stream's fields are ``source_component``, ``source_stream``, ``values`` and
        ``timestamp`` (epoch ms; actors/windowing/executor.py). Needs
        :meth:`with_timestamp_field`."""
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError(f"with_late_tuple_stream takes a stream id, got {stream_id!r}")
        self._window_config()[TOPOLOGY_BOLTS_LATE_TUPLE_STREAM] = stream_id
        return self

    def get_component_configuration(self) -> dict[str, Any]:
        """The window settings under Storm's ``topology.bolts.*`` keys (a new dict)."""
        return dict(self._window_config())

    def window_spec(self) -> WindowSpec:
        """The settings as a :class:`WindowSpec` (not yet validated).

        Raises:
            ConfigError: no window set, or an invalid value (see ``WindowSpec.from_config``).
        """
        return WindowSpec.from_config(self.get_component_configuration(),
                                      component=type(self).__name__)

    def prepare(self, conf: dict, context: TopologyContext, collector: OutputCollector) -> None:
        """Called once in the task before any window. Keep ``collector``."""

    def execute(self, window: TupleWindow) -> None:
        """Process one window; may emit (anchored to the window's tuples)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Called once every input has ended, after the last windows fired."""

    def cleanup(self) -> None:
        """The task is shutting down."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams; the default declares :attr:`outputs` on the default stream.
        The late-tuple stream is declared by the executor, not here."""
        if self.outputs is not None:
            declarer.declare(Fields(tuple(self.outputs)))


class StatefulWindowedBolt(_Stateful, WindowedBolt):
    """A windowed bolt with checkpointed state (Storm's ``BaseStatefulWindowedBolt``): the
    :class:`WindowedBolt` builder, plus :meth:`init_state` and the checkpoint hooks of a
    ``StatefulBolt`` (``pre_prepare``, ``pre_commit``, ``pre_rollback``).

    With :meth:`with_persistence` the open windows (their tuples, the per-upstream
    watermarks and the trigger positions) are checkpointed with the state and restored on
    a rollback, so a window that fires again after a failure holds the same tuples
    (event-time windows whose tuples were not late; docs/state.md). Without it the windows
    would be lost on a failure while the state is exactly-once: the plan refuses that,
    naming the bolt.

    Attributes:
        persistent: :meth:`with_persistence` was called.
        max_events_in_memory: :meth:`with_max_events_in_memory`, or None.
    """

    persistent = False
    max_events_in_memory: int | None = None

    def with_persistence(self) -> StatefulWindowedBolt:
        """Checkpoint the open windows with the state (Storm's ``withPersistence``)."""
        self.persistent = True
        return self

    def with_max_events_in_memory(self, n: int) -> StatefulWindowedBolt:
        """Storm's ``withMaxEventsInMemory``: the most window tuples a task should hold.
        Here windows stay in memory (they are not evicted to the state store as in Storm);
        a task that holds more logs a warning once, at a checkpoint.

        Raises:
            ValueError: ``n`` is not a whole number > 0.
        """
        self.max_events_in_memory = _positive(n, "with_max_events_in_memory", "tuples")
        return self
