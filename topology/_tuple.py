"""``Tuple``: one message flowing on a stream (Storm's ``TupleImpl``)."""

from __future__ import annotations

from typing import Any

from topology._fields import Fields

#: Component id of the system's tuples (Storm's ``Constants.SYSTEM_COMPONENT_ID``).
SYSTEM_COMPONENT_ID = "__system"
#: Stream id of tick tuples (Storm's ``Constants.SYSTEM_TICK_STREAM_ID``).
SYSTEM_TICK_STREAM_ID = "__tick"
#: A tick tuple's one field: its period in seconds (Storm's tick value).
TICK_FIELDS = Fields(("rate_secs",))


class Tuple:
    """A list of values with field names, its source and stream.

    Cheap by design: ``__slots__`` and no per-tuple dict; the field → index map is shared
    by every tuple of the same stream (it lives in ``Fields``).

    Attributes:
        values: the values, in the order of ``fields``.
        fields: the ``Fields`` the source declared for ``source_stream``.
        source_component: id of the emitting spout or bolt.
        source_task: task id of the emitter.
        source_stream: stream id the tuple was emitted on.
    """

    __slots__ = ("values", "fields", "source_component", "source_task", "source_stream",
                 "anchors", "ack_val", "done")

    def __init__(self, values: list, fields: Fields, source_component: str,
                 source_task: int, source_stream: str, anchors: list | None = None) -> None:
        self.values = values
        self.fields = fields
        self.source_component = source_component
        self.source_task = source_task
        self.source_stream = source_stream
        #: acking (Storm's MessageId): ``[root id, this tuple's edge-id XOR, ...]`` as it
        #: came off the wire (flat pairs, one per root; no dict built per tuple); None if
        #: untracked
        self.anchors = anchors
        #: XOR of the edge ids of the tuples anchored to this one so far
        self.ack_val = 0
        #: acked or failed already
        self.done = False

    def is_tick(self) -> bool:
        """True for a tick tuple (Storm's ``TupleUtils.isTick``): from ``__system`` on the
        stream ``__tick``, sent every ``topology.tick.tuple.freq.secs``. Ticks are neither
        anchored nor acked (acking one does nothing)."""
        return (self.source_stream == SYSTEM_TICK_STREAM_ID
                and self.source_component == SYSTEM_COMPONENT_ID)

    def __getitem__(self, key: str | int) -> Any:
        """``tup["word"]`` by field name, or ``tup[0]`` by position; ``KeyError``/``IndexError``."""
        if isinstance(key, int):
            return self.values[key]
        return self.values[self.fields.field_index(key)]

    def get(self, name: str, default: Any = None) -> Any:
        i = self.fields._index.get(name)
        return default if i is None else self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        return self[name]

    def select(self, selector: Fields) -> list:
        return self.fields.select(selector, self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.fields, self.values, strict=True))

    def __repr__(self) -> str:
        return (f"Tuple({self.source_component}:{self.source_task}/{self.source_stream} "
                f"{self.as_dict()!r})")
