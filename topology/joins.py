"""Joins: :class:`JoinBolt` (Storm's windowed join) and :class:`IntervalJoinBolt` (Flink's
interval join), the user's side. Both are configured with the ``WindowedBolt`` builder and
checked when the topology is built (:meth:`JoinBolt.check_inputs`).

``JoinBolt`` follows Storm 2's ``org.apache.storm.bolt.JoinBolt`` (STORM-2334, "Joins"
in Storm's "Windowing" documentation): the window engine fires a window, and the bolt joins
the window's tuples with a hash join per joined stream, in declaration order, the first
stream being the probe side. It runs in the windowed executor like any ``WindowedBolt``, so
its windows are checkpointed as persistent windows in a topology that checkpoints; it then
stores its held tuples by the key group of their join key (``key_group_function``).

``IntervalJoinBolt`` is Flink's ``KeyedStream.intervalJoin(...).between(lower, upper)``
(Flink's documentation, "Joining", "Interval Join"): no windows, each tuple is matched on
arrival against the other side's buffered tuples of the same key, and the buffers expire
with the watermark. Its runtime is ``actors/windowing/interval.py``.

Pure Python: no Ray.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from topology._errors import TopologyError
from topology._fields import Fields
from topology._tuple import Tuple
from topology.windows import Duration, WindowedBolt

if TYPE_CHECKING:
    from topology._builder import ComponentSpec
    from topology._components import OutputFieldsDeclarer

#: Storm's error when ``select`` was never called (``JoinBolt.prepare``)
NO_SELECT = "Must specify output fields via .select() method."


class Selector(enum.Enum):
    """What names a joined stream: the tuple's source component, or its stream id
    (Storm's ``JoinBolt.Selector``)."""

    SOURCE = "source"
    STREAM = "stream"


class JoinType(enum.Enum):
    """Storm's ``JoinBolt.JoinType``: only INNER and LEFT are supported."""

    INNER = "INNER"
    LEFT = "LEFT"
    RIGHT = "RIGHT"
    OUTER = "OUTER"


class FieldSelector(NamedTuple):
    """One ``[stream:]field[.inner...]`` selector (Storm's ``JoinBolt.FieldSelector``).

    Attributes:
        name: the output field name: the text, less a leading ``:``.
        stream: the stream (or source) it is restricted to, casefolded; None for any.
        path: the field, then the keys into nested mappings.
    """

    name: str
    stream: str | None
    path: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, stream: str | None = None) -> FieldSelector:
        """``text`` as a selector; ``stream`` (when given) restricts it instead of a
        ``stream:`` prefix.

        Raises:
            ValueError: an empty field name.
        """
        text = text.strip()
        pos = text.find(":")
        name = text[1:] if pos == 0 else text
        if pos > 0:
            stream, text = text[:pos], text[pos + 1:]
        elif pos == 0:
            text = text[1:]
        path = tuple(text.split("."))
        if not all(path):
            raise ValueError(f"a field selector needs field names, got {name!r}")
        return cls(name, None if stream is None else stream.casefold(), path)

    def lookup(self, tup: Tuple, stream: str) -> Any:
        """The selected value of ``tup`` (from ``stream``, casefolded), or None: another
        stream, a field the tuple lacks, or a nested key missing or under a non-mapping."""
        if self.stream is not None and self.stream != stream:
            return None
        value = tup.get(self.path[0])
        for key in self.path[1:]:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value


def _hashable(key: Any) -> Any:
    """A join key as a dict key: lists become tuples, mappings sorted item tuples."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in key.items()))
    return key


class _Joined(NamedTuple):
    stream: str               # as given
    key: str                  # casefolded
    field: FieldSelector      # this stream's join field
    prior: str | None         # casefolded stream it joins to (None: the first)
    kind: JoinType


def _check_fields(cid: str, comps: Mapping[str, ComponentSpec], inputs: list,
                  selectors: Iterable[FieldSelector], what: str) -> None:
    """Each selector's top-level field is declared by the inputs it can read."""
    for sel in selectors:
        fields = [(g, comps[g.source].streams[g.stream]) for g, key in inputs
                  if sel.stream is None or sel.stream == key]
        if sel.stream is not None and not fields:
            raise TopologyError(f"bolt {cid!r}: {what} {sel.name!r} names stream "
                                f"{sel.stream!r}, which is not an input of the join")
        if not any(sel.path[0] in f for _, f in fields):
            g, f = fields[0]
            raise TopologyError(
                f"bolt {cid!r}: {what} {sel.name!r}: field {sel.path[0]!r} is not declared "
                f"by stream {g.stream!r} of {g.source!r}; its fields are {list(f)}")


def _check_grouping(cid: str, par: int, g: Any, field: FieldSelector) -> None:
    """With more than one task, ``g`` must be fields-grouped on the join field alone."""
    if par > 1 and (g.kind != "fields" or tuple(g.fields or ()) != field.path[:1]):
        raise TopologyError(
            f"bolt {cid!r} has {par} tasks, so its input stream {g.stream!r} of "
            f"{g.source!r} must be fields-grouped on its join field {field.path[0]!r} "
            f"(fields_grouping({g.source!r}, {g.stream!r}, Fields({field.path[0]!r}))), "
            f"got a {g.kind} grouping"
            + (f" on {list(g.fields)}" if g.kind == "fields" else ""))


class _JoinBase(WindowedBolt):
    """What both joins share: the selector, ``select``, the output stream, key groups."""

    _selector = Selector.SOURCE
    _output_fields: tuple[FieldSelector, ...] | None = None
    _output_stream: str | None = None
    _error: str | None = None     # the first misuse of the builder, raised at build

    def _refuse(self, why: str) -> None:
        if self._error is None:
            self._error = why

    def stream_of(self, tup: Tuple) -> str:
        """The name (casefolded) ``tup`` has in the join: its source or its stream."""
        name = tup.source_component if self._selector is Selector.SOURCE else tup.source_stream
        return name.casefold()

    def select(self, fields: str) -> _JoinBase:
        """The output fields, comma separated: ``"f1, s2:f2, outer.inner"`` (Storm's
        ``select``): ``stream:field`` reads only that stream's tuple, ``a.b`` key ``b`` of
        the mapping in field ``a``. Output field names are the selector texts (a leading
        ``:`` dropped). A value missing from the joined tuples projects None."""
        try:
            self._output_fields = tuple(FieldSelector.parse(t) for t in fields.split(","))
        except ValueError as e:
            self._refuse(f"select({fields!r}): {e}")
        return self

    def with_output_stream(self, stream_id: str) -> _JoinBase:
        """Emit on ``stream_id`` instead of the default stream."""
        self._output_stream = stream_id
        return self

    @property
    def output_stream(self) -> str:
        return self._output_stream or "default"

    def output_names(self) -> list[str]:
        """The declared output fields."""
        return [s.name for s in self._output_fields or ()]

    def project(self, tuples: Iterable[Tuple | None]) -> list:
        """The selected values over ``tuples`` (None entries skipped): each selector's
        first non-None value, in the order of ``tuples`` (Storm's ``doProjection``)."""
        pairs = [(t, self.stream_of(t)) for t in tuples if t is not None]
        out = []
        for sel in self._output_fields or ():
            value = None
            for t, s in pairs:
                value = sel.lookup(t, s)
                if value is not None:
                    break
            out.append(value)
        return out

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        if self._output_fields is not None:
            declarer.declare_stream(self.output_stream, Fields(self.output_names()))

    def _join_fields(self) -> dict[str, FieldSelector]:
        """Each joined stream (casefolded) → its join field."""
        raise NotImplementedError

    def key_group_function(self, conf: Mapping[str, Any]) -> Callable[[Tuple], int]:
        """``tuple -> key group`` of its join key's top-level field, as the router groups
        it (``topology._keygroups.state_key_group``) under ``conf``'s group count."""
        from topology._keygroups import key_group_count, state_key_group
        groups = key_group_count(conf)
        fields = self._join_fields()

        def group_of(tup: Tuple) -> int:
            sel = fields.get(self.stream_of(tup))
            key = None if sel is None else tup.get(sel.path[0])
            return state_key_group(key, 1, groups)
        return group_of

    def check_inputs(self, cid: str, comps: Mapping[str, ComponentSpec]) -> None:
        """The build's checks of this join against its inputs (``create_topology``).

        Raises:
            TopologyError: naming the bolt and the stream or field: a builder misuse (a
                stream joined twice, a join to a stream not yet joined, an unsupported join
                type, a bad selector); no ``select``; an input that is not a joined stream
                or a joined stream with no input; a join or selected field the input does
                not declare; with more than one task, an input not fields-grouped on its
                join field.
        """
        if self._error is not None:
            raise TopologyError(f"bolt {cid!r}: {self._error}")
        if self._output_fields is None and self._needs_select():
            raise TopologyError(f"bolt {cid!r}: {NO_SELECT}")
        spec = comps[cid]
        fields = self._join_fields()
        inputs = []
        for g in spec.inputs:
            name = g.source if self._selector is Selector.SOURCE else g.stream
            key = name.casefold()
            if key not in fields:
                raise TopologyError(
                    f"bolt {cid!r}: input stream {g.stream!r} of {g.source!r} is not in the "
                    f"join (by {self._selector.value}: {name!r}); joined: "
                    f"{sorted(fields)}")
            _check_fields(cid, comps, [(g, key)], [fields[key]], "join field")
            _check_grouping(cid, spec.parallelism, g, fields[key])
            inputs.append((g, key))
        missing = set(fields) - {k for _, k in inputs}
        if missing:
            raise TopologyError(f"bolt {cid!r}: joined {self._selector.value} "
                                f"{sorted(missing)[0]!r} is not among its inputs")
        _check_fields(cid, comps, inputs, self._output_fields or (), "selected field")

    def _needs_select(self) -> bool:
        return True


class JoinBolt(_JoinBase):
    """Storm's ``JoinBolt``: joins the tuples of each window on equal field values.

    ``JoinBolt("s1", "id")`` (streams named by source component) or
    ``JoinBolt(JoinBolt.Selector.STREAM, "s1", "id")``; then ``.join("s2", "id", "s1")``
    (INNER) or ``.left_join(...)`` (LEFT), ``.select("s1:id, name, s2:addr.city")``
    (required), and the window from the ``WindowedBolt`` builder.

    Per fired window, a hash join in declaration order: the first stream's tuples are the
    probe rows; each joined stream is hashed on its join field and probed with the prior
    stream's join field, read from the row's tuple of that stream. A row whose probe key is
    None is dropped, in LEFT joins too (Storm's rule, not SQL's null padding); a LEFT join
    keeps a row with no match, its stream's fields None. Stream names match
    case-insensitively. Join keys must be hashable once lists and mappings are turned into
    tuples.

    Anchoring: without checkpoints each output is anchored to the tuples it was made of (a
    Storm ``JoinBolt``'s emit); in a topology that checkpoints, windows are persistent and
    outputs are unanchored (the checkpoint keeps the window's tuples).

    Storm refuses RIGHT and OUTER joins when the window is joined; here at build, with
    Storm's "Unsupported join type" message. Unlike Storm, the build also checks the
    inputs: see :meth:`check_inputs`.
    """

    Selector = Selector
    JoinType = JoinType

    def __init__(self, *args: Any) -> None:
        if len(args) == 2:
            selector, (name, field) = Selector.SOURCE, args
        elif len(args) == 3 and isinstance(args[0], Selector):
            selector, name, field = args
        else:
            raise TypeError("JoinBolt(source_id, field) or JoinBolt(JoinBolt.Selector.X, "
                            f"id, field), got {len(args)} arguments")
        self._selector = selector
        self._streams: list[_Joined] = []
        self._add(name, field, None, JoinType.INNER)

    def _add(self, stream: str, field: str, prior: str | None, kind: JoinType) -> JoinBolt:
        key = stream.casefold()
        if any(j.key == key for j in self._streams):
            self._refuse(f"{stream!r} is already part of the join; a stream can be joined "
                         "once")
        elif prior is not None and not any(j.key == prior.casefold() for j in self._streams):
            self._refuse(f"join({stream!r}, {field!r}, {prior!r}): stream {prior!r} was not "
                         "previously declared (join to a stream already in the join)")
        elif kind not in (JoinType.INNER, JoinType.LEFT):
            self._refuse(f"Unsupported join type : {kind.value} (joining {stream!r})")
        else:
            try:
                sel = FieldSelector.parse(field, stream)
            except ValueError as e:
                self._refuse(f"join field of {stream!r}: {e}")
                return self
            self._streams.append(_Joined(stream, key, sel, prior and prior.casefold(), kind))
        return self

    def join(self, new_stream: str, field: str, prior_stream: str) -> JoinBolt:
        """INNER join ``new_stream`` on ``field`` to ``prior_stream``'s join field."""
        return self._add(new_stream, field, prior_stream, JoinType.INNER)

    def left_join(self, new_stream: str, field: str, prior_stream: str) -> JoinBolt:
        """LEFT join: rows with no match in ``new_stream`` are kept."""
        return self._add(new_stream, field, prior_stream, JoinType.LEFT)

    def join_of(self, kind: JoinType, new_stream: str, field: str,
                prior_stream: str) -> JoinBolt:
        """A join of ``kind``; RIGHT and OUTER are refused at build, as Storm does."""
        return self._add(new_stream, field, prior_stream, kind)

    def _join_fields(self) -> dict[str, FieldSelector]:
        return {j.key: j.field for j in self._streams}

    def join_window(self, tuples: Iterable[Tuple]) -> list[tuple[list, list]]:
        """The join of one window's tuples: ``[(tuples of the row, in join order; None
        for a LEFT join's missing stream), projected values]``, in probe order. Tuples of
        streams not in the join are ignored."""
        first = self._streams[0].key
        keys = {j.key: j for j in self._streams}
        tables: dict[str, dict] = {j.key: {} for j in self._streams[1:]}
        rows: list[list] = []
        for t in tuples:
            s = self.stream_of(t)
            if s == first:
                rows.append([t])
            elif s in tables:
                k = _hashable(keys[s].field.lookup(t, s))
                tables[s].setdefault(k, []).append(t)
        pos = {j.key: i for i, j in enumerate(self._streams)}
        for j in self._streams[1:]:
            prior_sel = keys[j.prior].field
            at = pos[j.prior]
            table = tables[j.key]
            out = []
            for row in rows:
                pt = row[at]
                probe = None if pt is None else prior_sel.lookup(pt, j.prior)
                if probe is None:
                    continue   # Storm: a null probe key drops the row, LEFT joins too
                matches = table.get(_hashable(probe))
                if matches:
                    out.extend([*row, m] for m in matches)
                elif j.kind is JoinType.LEFT:
                    out.append([*row, None])
            rows = out
        return [(row, self.project(row)) for row in rows]

    def execute(self, window) -> None:
        """Join ``window`` and emit each row on the output stream, anchored to its tuples."""
        emit, stream = self.collector.emit, self.output_stream
        for row, values in self.join_window(window.get()):
            emit(values, stream, [t for t in row if t is not None])

    def prepare(self, conf: dict, context, collector) -> None:
        self.collector = collector


class IntervalJoinBolt(_JoinBase):
    """Flink's interval join: ``left`` and ``right`` tuples of equal keys whose event
    times satisfy ``left.ts + lower <= right.ts <= left.ts + upper``.

    ``IntervalJoinBolt("orders", "id", "payments", "order_id").between(Duration.of(0),
    Duration.seconds(5))`` (streams named by source component; ``selector=Selector.STREAM``
    for stream ids), then ``.select(...)`` as :class:`JoinBolt` or a subclass overriding
    :meth:`process`, and ``.with_timestamp_field(name)`` (required, epoch ms or datetime),
    optionally ``with_lag``, ``with_watermark_interval``, ``with_late_tuple_stream``. Bounds
    are inclusive unless ``lower_bound_exclusive()`` / ``upper_bound_exclusive()``; inner
    join only. Each pair is output once, when the later of the two arrives (in arrival
    order, not event-time order). The watermark is per upstream task, as for windows; a
    tuple below it is late, and buffered tuples expire once the watermark has passed every
    time they could match, so each buffer holds about rate × (interval + lag).

    Anchoring: without checkpoints, each output is anchored to its two tuples, and a tuple
    is acked when it expires from its buffer; with checkpoints, tuples are acked as they
    are buffered (the checkpoint keeps them), and outputs are unanchored.

    Args:
        left_stream, right_stream: the two joined streams (by ``selector``).
        left_key, right_key: their join fields (``a`` or nested ``a.b``).
        selector: ``Selector.SOURCE`` (default) or ``Selector.STREAM``.

    Attributes:
        collector: the output collector, set before the first :meth:`process`.
        output_timestamp: during :meth:`process`, the larger of the two timestamps (ms).
    """

    Selector = Selector

    def __init__(self, left_stream: str, left_key: str, right_stream: str, right_key: str,
                 selector: Selector = Selector.SOURCE) -> None:
        self._selector = selector
        self.left = FieldSelector.parse(left_key, left_stream)
        self.right = FieldSelector.parse(right_key, right_stream)
        self.left_stream, self.right_stream = left_stream, right_stream
        if self.left.stream == self.right.stream:
            self._refuse(f"{left_stream!r} is already part of the join; an interval join "
                         "joins two different streams")
        self.lower = self.upper = 0
        self.lower_inclusive = self.upper_inclusive = True
        self.output_timestamp_field: str | None = None
        self.output_timestamp: int | None = None
        # the engine needs a window length: a 1 ms tumbling window, never used
        super().with_window(Duration(1), Duration(1))

    def with_window(self, length, sliding=None) -> WindowedBolt:
        """Refused: an interval join has bounds (:meth:`between`), not windows."""
        raise TypeError("IntervalJoinBolt has no window: set its bounds with between()")

    def between(self, lower: Duration | int, upper: Duration | int) -> IntervalJoinBolt:
        """Match rights whose ts is in ``[left.ts + lower, left.ts + upper]``. Bounds are
        ``Duration``s or whole ms (an int may be zero or negative, as Flink's)."""
        self.lower, self.upper = (b.ms if isinstance(b, Duration) else int(b)
                                  for b in (lower, upper))
        if self.lower > self.upper:
            self._refuse(f"between({lower}, {upper}): lower bound {self.lower} ms is above "
                         f"upper bound {self.upper} ms")
        return self

    def lower_bound_exclusive(self) -> IntervalJoinBolt:
        self.lower_inclusive = False
        return self

    def upper_bound_exclusive(self) -> IntervalJoinBolt:
        self.upper_inclusive = False
        return self

    def with_output_timestamp_field(self, name: str) -> IntervalJoinBolt:
        """Add field ``name`` to the selected output: the larger of the two timestamps."""
        self.output_timestamp_field = name
        return self

    def matches(self, left_ts: int, right_ts: int) -> bool:
        """``left_ts + lower <= right_ts <= left_ts + upper`` (strict where exclusive)."""
        d = right_ts - left_ts
        lo_ok = d >= self.lower if self.lower_inclusive else d > self.lower
        hi_ok = d <= self.upper if self.upper_inclusive else d < self.upper
        return lo_ok and hi_ok

    def side_of(self, tup: Tuple) -> int | None:
        """0 for the left stream, 1 for the right, None for neither."""
        name = tup.source_component if self._selector is Selector.SOURCE else tup.source_stream
        sides = self.__dict__.get("_sides")
        if sides is None:
            sides = self._sides = {}
        side = sides.get(name, -1)
        if side == -1:
            s = name.casefold()
            side = sides[name] = (0 if s == self.left.stream else 1 if s == self.right.stream
                                  else None)
        return side

    def key_of(self, tup: Tuple, side: int) -> Any:
        """The join key of ``tup`` (hashable), None when missing."""
        sel = self.right if side else self.left
        if len(sel.path) == 1:
            key = tup.get(sel.path[0])
            return key if type(key) in (int, str) else _hashable(key)
        return _hashable(sel.lookup(tup, sel.stream))

    def project_pair(self, left: Tuple, right: Tuple) -> list:
        """:meth:`project` of ``(left, right)``, with each selector's sides known."""
        plan = self.__dict__.get("_plan")
        if plan is None:
            plan = self._plan = [
                (sel, [(side, st) for side, st in ((0, self.left.stream),
                                                    (1, self.right.stream))
                       if sel.stream is None or sel.stream == st])
                for sel in self._output_fields or ()]
        pair = (left, right)
        out = []
        for sel, sides in plan:
            value = None
            for side, st in sides:
                value = sel.lookup(pair[side], st)
                if value is not None:
                    break
            out.append(value)
        return out

    def output_names(self) -> list[str]:
        names = super().output_names()
        if self.output_timestamp_field is not None:
            names.append(self.output_timestamp_field)
        return names

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        if self._output_fields is not None:
            super().declare_output_fields(declarer)
        elif type(self).outputs is not None:
            declarer.declare_stream(self.output_stream, Fields(tuple(type(self).outputs)))

    def prepare(self, conf: dict, context, collector) -> None:
        self.collector = collector

    def process(self, left: Tuple, right: Tuple) -> None:
        """One matching pair (Flink's ``ProcessJoinFunction.processElement``); emits the
        selected fields, plus ``output_timestamp`` when ``with_output_timestamp_field``.
        Override to emit through :attr:`collector` instead."""
        values = self.project_pair(left, right)
        if self.output_timestamp_field is not None:
            values.append(self.output_timestamp)
        self.collector.emit(values, self.output_stream)

    def execute(self, window) -> None:
        raise TypeError("an IntervalJoinBolt runs in actors/windowing/interval.py's "
                        "executor, not as a windowed bolt")

    def _join_fields(self) -> dict[str, FieldSelector]:
        return {self.left.stream: self.left, self.right.stream: self.right}

    def _needs_select(self) -> bool:
        return type(self).process is IntervalJoinBolt.process

    def check_inputs(self, cid: str, comps: Mapping[str, ComponentSpec]) -> None:
        """As :meth:`JoinBolt.check_inputs`, and: a timestamp field is set.

        Raises:
            TopologyError: also ``lower > upper``, no ``with_timestamp_field``.
        """
        if self.window_spec().timestamp_field is None and self._error is None:
            raise TopologyError(f"bolt {cid!r}: an IntervalJoinBolt needs event time: call "
                                "with_timestamp_field(name)")
        super().check_inputs(cid, comps)
