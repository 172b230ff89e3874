"""Dead letters: a spout tuple that fails ``1 + topology.max.replays`` times leaves the
topology on the dead-letter stream instead of replaying forever.

Storm replays a failed tuple for as long as its spout chooses to; storm-kafka-client caps
it with ``maxRetries`` (``KafkaSpoutRetryService.schedule`` answers false at the cap and
the spout gives the message up). Here the cap is one key, ``topology.max.replays`` (N),
and a tuple given up is not lost: its spout emits it, unanchored, on
:data:`DEAD_LETTER_STREAM` with why it failed, for a :class:`~topology.DeadLetterSink`
(which ``plan`` adds as the system bolt :data:`DEAD_LETTERS_ID`) or the user's own bolt.

The failure reason travels with the fail from where it happened through the acker to the
spout (``actors/_acking.py``); the spout reads it during its ``fail`` as
``collector.fail_reason``. Spouts use :class:`RetryService`, the one helper: the built-in
spouts do, and a user spout calls it from its ``fail``.

Pure Python: no Ray, no msgpack.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import reprlib
from typing import Any, NamedTuple

from topology._fields import Fields

#: The stream id of dead letters. Every spout declares it when ``topology.max.replays`` is
#: set (or when a bolt subscribes to it); ``__`` marks a system stream, as Storm's
#: ``__ack_ack``.
DEAD_LETTER_STREAM = "__dead_letters"
#: Its fields: the spout's component id, the tuple's ``msg_id``, its ``values`` (a list; the
#: repr of the list, a str, when the wire cannot carry one of them), the ``reason`` it
#: failed the last time, and ``attempts`` (1 + N: how often it was emitted).
DEAD_LETTER_FIELDS = Fields(("spout", "msg_id", "values", "reason", "attempts"))
#: Component id of the system bolt that keeps dead letters no user bolt subscribes to (a
#: :class:`~topology.DeadLetterSink`, one task; read with ``handle.dead_letters()``).
DEAD_LETTERS_ID = "__dead_letters"

#: The reason when the spout's collector had none (a test's collector, a user's own call)
UNKNOWN_REASON = "unknown"


class DeadLetter(NamedTuple):
    """One dead letter, as ``handle.dead_letters()`` returns it.

    Attributes:
        spout: the spout component that gave the tuple up.
        task: that spout's task id.
        msg_id: the tuple's ``msg_id`` (its repr, a str, if the wire cannot carry it).
        values: the tuple's values as a list, or the repr of that list (a str) when the
            wire cannot carry one of them.
        reason: why it failed the last time: ``"<ExceptionClass>: <message> (in bolt
            '<id>')"`` for an exception in ``execute``, ``"failed by bolt '<id>'"`` for a
            bolt's own ``collector.fail``, ``"timeout"``, ``"could not serialise: <error>"``,
            ``"dropped at the overflow limit"``, or ``"unknown"``.
        attempts: how many times it was emitted (``1 + topology.max.replays``).
    """

    spout: str
    task: int
    msg_id: Any
    values: list | str
    reason: str
    attempts: int


class RetryService:
    """Counts a spout's failures per ``msg_id`` and gives a tuple up, as a dead letter,
    at its ``1 + topology.max.replays``-th failure (storm-kafka-client's
    ``KafkaSpoutRetryService`` with ``maxRetries``, without its backoff: the spout replays
    when it chooses).

    Use it from a spout: build it in ``open``; in ``fail(msg_id)`` call
    :meth:`schedule` and replay only if it answers True (else forget the tuple: its dead
    letter has been emitted); in ``ack(msg_id)`` call :meth:`remove`::

        def open(self, conf, context, collector):
            self.retries = RetryService(conf, context, collector)

        def fail(self, msg_id):
            if self.retries.schedule(msg_id, self.pending[msg_id]):
                self.replay.append(msg_id)
            else:
                del self.pending[msg_id]

        def ack(self, msg_id):
            self.retries.remove(msg_id)
            self.pending.pop(msg_id, None)

    With ``topology.max.replays`` unset every failure is scheduled and nothing is counted
    (Storm's behaviour: replays without end). Memory: one counter per tuple that has failed
    and is neither acked nor given up yet. Executor thread only (``open``/``ack``/``fail``).

    Args:
        conf: the spout's config (what ``open`` receives).
        context: the spout's ``TopologyContext`` (for its component id).
        collector: the spout's collector: dead letters are emitted through it, unanchored,
            on :data:`DEAD_LETTER_STREAM`; its ``fail_reason`` (set by the executor during
            ``fail``) gives the reason.

    Attributes:
        max_replays: N (None: no cap).
        dead_letters: tuples given up by this task so far.
    """

    def __init__(self, conf: dict, context: Any, collector: Any) -> None:
        self.max_replays: int | None = conf.get("topology.max.replays")
        self._spout = context.component_id
        self._collector = collector
        self._failures: dict = {}
        self.dead_letters = 0

    def schedule(self, msg_id: Any, values: Any) -> bool:
        """One failure of ``msg_id`` (emitted with ``values``): True if the spout should
        replay it; False at its ``1 + max_replays``-th failure, when its dead letter has
        just been emitted and ``msg_id`` is forgotten here. Never blocks (the emit may wait
        in ``pending_emits``, as any emit).

        Raises:
            EmitError: the spout does not declare :data:`DEAD_LETTER_STREAM` (a spout under
                a ``plan`` always does once ``topology.max.replays`` is set).
        """
        if self.max_replays is None:
            return True
        failures = self._failures.pop(msg_id, 0) + 1
        if failures <= self.max_replays:
            self._failures[msg_id] = failures
            return True
        reason = getattr(self._collector, "fail_reason", None) or UNKNOWN_REASON
        self._collector.emit([self._spout, msg_id if wire_safe(msg_id) else letter_repr(msg_id),
                              dead_letter_values(values), reason, failures],
                             stream=DEAD_LETTER_STREAM)
        self.dead_letters += 1
        return False

    def remove(self, msg_id: Any) -> None:
        """``msg_id`` was acked: forget its failures."""
        if self._failures:
            self._failures.pop(msg_id, None)


def dead_letter_values(values: Any) -> list | str:
    """``values`` as a dead letter carries them: a list, or its repr when the wire codec
    (``actors/_codec.py``) cannot carry one of them."""
    values = list(values)
    return values if wire_safe(values) else letter_repr(values)


def letter_repr(value: Any) -> str:
    """``repr(value)``; for a value nested past Python's recursion limit (whose ``repr``
    raises ``RecursionError``, and which the wire refuses too), ``reprlib``'s abridged
    one, so giving the tuple up never fails."""
    try:
        return repr(value)
    except RecursionError:
        return reprlib.repr(value)


_SCALARS = (type(None), bool, float, str, bytes, bytearray, _dt.date, _dt.time,
            decimal.Decimal)


def wire_safe(value: Any, depth: int = 0) -> bool:
    """True if the wire codec (``actors/_codec.py``: msgpack with its extension types) can
    carry ``value``. Checked by type, without msgpack, so this package stays free of it."""
    if depth > 64:
        return False
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return False
        return True
    if isinstance(value, int):
        return -(1 << 63) <= value < (1 << 64)
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(wire_safe(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(wire_safe(k, depth + 1) and wire_safe(v, depth + 1)
                   for k, v in value.items())
    t = type(value)
    return t.__name__ in ("RecordBatch", "Table") and t.__module__.startswith("pyarrow")
