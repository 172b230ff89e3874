"""The msgpack wire codec for tuple batches (never pickle: a peer must not run code in us).

A frame is ``msgpack([src_task, epoch, seq, [[stream_index, values(, anchors)], ...]])``,
where ``anchors`` (acking only) is ``[root_id, edge_xor, root_id, edge_xor, ...]`` (flat:
one list per tuple, not one per root, which unpacks faster; see docs/benchmarks.md);
``seq`` numbers the frames of one (sender, receiver) pair from 0 within an ``epoch``, so
the receiver restores their order (Ray does not order calls to threaded or asyncio
actors) and acknowledges them cumulatively. The sender starts a new, larger ``epoch``
(from 0 again) when frames may have been lost: it restarted, or the receiver or a transfer
actor between them died. Values are msgpack's own types plus these extension types, so
Spark rows survive the trip:

=====  ==========================  ==============================
code   Python type                 payload
=====  ==========================  ==============================
1      ``datetime.datetime``       10-byte wall time, then the UTC offset
                                   (int64 µs, little-endian) if aware
2      ``datetime.date``           4-byte date
3      ``decimal.Decimal``         its exact ``str``
4      ``datetime.time``           ISO 8601 text
5      ``pyarrow.RecordBatch``     Arrow IPC stream (one batch)
6      ``pyarrow.Table``           Arrow IPC stream
=====  ==========================  ==============================

The wall time and the date are the bytes CPython's ``datetime`` and ``date`` pickle
themselves as (year as two bytes, month with the ``fold`` flag in its top bit, day, then
hour, minute, second, and microsecond as three bytes, all big-endian): ``__reduce_ex__``
gives them and the type's constructor reads them back, both in C, with no pickle and no code
run. ISO text made encoding a flights row (one datetime among ten values) markedly slower
(docs/benchmarks.md, the main job's rows). A named zone travels as the value's UTC offset
(the same instant), as ISO 8601 text would carry it; msgpack's own Timestamp type keeps
neither the offset nor the wall time. The decoder refuses a field out of range (see
``_NO_TIME``).

Arrow values let one tuple carry a whole record batch (``DataFrameSpout(...,
arrow_batches=True)`` feeding vectorised bolts): its buffers are copied once into the frame
and read back without a per-row step.

Arrow payloads are untrusted input (``actors/_arrow_ipc.py``): every batch is validated
in full before a value is read, and a column of an extension type outside a short
allow-list is refused, naming the type, before pyarrow reads the schema (a registered
extension type runs its Python code there and on its values: Ray Data's
``ray.data.arrow_pickled_object`` runs ``pickle.load`` in ``to_pylist()``).

Decoding is bounded (``max_frame_bytes``) and strict about shape; anything else raises
:class:`FrameError`, which receivers count and drop. Encoding raises ``TypeError`` for any
value the wire cannot carry (msgpack's own ``ValueError`` for a value nested past its
depth limit included), so a sender reports that tuple alone (``ActorSink``'s poison path)
and sends the rest.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import functools
import struct
from typing import Any

import msgpack

from actors._arrow_ipc import ArrowPayloadError, decode_arrow, encode_arrow

_EXT_DATETIME, _EXT_DATE, _EXT_DECIMAL, _EXT_TIME = 1, 2, 3, 4
_EXT_ARROW_BATCH, _EXT_ARROW_TABLE = 5, 6

#: The lowest stream index on the wire: negative indices are system streams (end of
#: stream -1; the acking streams -2 to -8, the drained marker -9 and the checkpoint barrier
#: -10, see actors/_streams.py; the tick, -11, never travels: a frame carrying it is
#: malformed).
MIN_STREAM_INDEX = -10

#: msgpack's nesting limit (its ``DEFAULT_RECURSE_LIMIT``); its unpacker's stack holds one
#: level less than its packer takes, so the codec packs each frame or value inside a
#: one-element list and drops that list's one-byte header (``0x91``): whatever it encodes
#: decodes
DEPTH_LIMIT = 1024

#: Default cap on one frame, in bytes (64 MiB).
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(ValueError):
    """A frame that cannot be decoded, is too large, or has the wrong shape."""


_UTC = _dt.timezone.utc
_US = _dt.timedelta(microseconds=1)
_OFFSET = struct.Struct("<q")
_ZERO_OFFSET = _OFFSET.pack(0)
_datetime_state = _dt.datetime.__reduce_ex__  # (type, (state, [tzinfo])); 4: with fold
_date_state = _dt.date.__reduce__  # (C: date's own __reduce_ex__ is object's, which runs a
#                                     subclass's __reduce__)
#: decoded offsets (their 8 bytes) → their ``timezone``, so equal offsets share one object;
#: bounded, as a peer chooses the offsets
_ZONES: dict[bytes, _dt.tzinfo] = {_ZERO_OFFSET: _UTC}
_MAX_ZONES = 1024
#: The state constructor checks only the month. Adding no time rebuilds the value through
#: the checked constructor, which carries an hour of 24, a 30 February or a microsecond of
#: a million over into the next unit (so the sum differs from the value) and raises on a
#: year outside 1-9999 (OverflowError, a FrameError to decode_batch): one C-level check,
#: where field-by-field checks in Python cost more than the decode itself
_NO_TIME = _dt.timedelta(0)


#: ``ExtType(code, data)`` without its ``__new__``, whose checks are Python code run per
#: value: every code and payload made here is already valid (benchmarks/encode_once.py)
_ext = functools.partial(tuple.__new__, msgpack.ExtType)


def _default(obj: Any) -> msgpack.ExtType:
    if isinstance(obj, _dt.datetime):
        # pandas' NaT is a datetime subclass whose state is year 1's (a plain datetime
        # never is: the check is skipped for it, as it runs per value)
        if type(obj) is not _dt.datetime and obj != obj:
            raise TypeError("cannot serialise a NaT (not a time) in a tuple: emit None for "
                            "a missing time")
        state = _datetime_state(obj, 4)[1][0]
        tz = obj.tzinfo
        if tz is None:
            return _ext((_EXT_DATETIME, state))
        if tz is _UTC:
            return _ext((_EXT_DATETIME, state + _ZERO_OFFSET))
        offset = obj.utcoffset()
        if offset is None:  # a tzinfo that gives no offset: naive, as ISO text has it
            return _ext((_EXT_DATETIME, state))
        return _ext((_EXT_DATETIME, state + _OFFSET.pack(offset // _US)))
    if isinstance(obj, _dt.date):
        return _ext((_EXT_DATE, _date_state(obj)[1][0]))
    if isinstance(obj, decimal.Decimal):
        return _ext((_EXT_DECIMAL, str(obj).encode()))
    if isinstance(obj, _dt.time):
        return _ext((_EXT_TIME, obj.isoformat().encode()))
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    kind = type(obj).__name__
    if kind in ("RecordBatch", "Table") and type(obj).__module__.startswith("pyarrow"):
        return _ext((_EXT_ARROW_BATCH if kind == "RecordBatch" else _EXT_ARROW_TABLE,
                     encode_arrow(obj)))
    raise TypeError(f"cannot serialise a {type(obj).__name__} in a tuple: use msgpack types "
                    f"(None, bool, int, float, str, bytes, list, dict), datetime, date, time, "
                    f"Decimal, or a pyarrow RecordBatch / Table")


def _from_arrow_ipc(code: int, data: bytes):
    try:
        return decode_arrow(data, table=code == _EXT_ARROW_TABLE)
    except ArrowPayloadError as e:
        raise FrameError(str(e)) from None


def _datetime_from(data: bytes) -> _dt.datetime:
    n = len(data)
    new_zone = None
    if n == 18:
        key = data[10:]
        tz = _ZONES.get(key)
        if tz is None:
            tz = new_zone = _zone(key)
        data = data[:10]
    elif n == 10:
        tz = None
    else:
        raise FrameError(f"datetime payload of {n} bytes (10 or 18 expected)")
    value = _dt.datetime(data, tz)
    if value + _NO_TIME != value:  # (see _NO_TIME)
        raise FrameError("datetime payload's fields are out of range")
    if new_zone is not None and len(_ZONES) < _MAX_ZONES:
        _ZONES[key] = new_zone  # (only once a value with it passed: refused frames pin none)
    return value


def _zone(offset_bytes: bytes) -> _dt.tzinfo:
    offset = _OFFSET.unpack(offset_bytes)[0]
    try:
        return _dt.timezone(_dt.timedelta(microseconds=offset))
    except ValueError:  # not strictly within a day
        raise FrameError(f"datetime payload's UTC offset {offset} µs is out of range") from None


def _date_from(data: bytes) -> _dt.date:
    if len(data) != 4:
        raise FrameError(f"date payload of {len(data)} bytes (4 expected)")
    value = _dt.date(data)
    if value + _NO_TIME != value:  # (see _NO_TIME)
        raise FrameError("date payload's fields are out of range")
    return value


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_DATETIME:  # (first: the most frequent, one per row of a time column)
        return _datetime_from(data)
    if code in (_EXT_ARROW_BATCH, _EXT_ARROW_TABLE):
        return _from_arrow_ipc(code, data)
    if code == _EXT_DATE:
        return _date_from(data)
    text = data.decode()
    if code == _EXT_DECIMAL:
        return decimal.Decimal(text)
    if code == _EXT_TIME:
        return _dt.time.fromisoformat(text)
    raise FrameError(f"unknown msgpack extension type {code}")


_packer_opts = {"default": _default, "use_bin_type": True, "strict_types": False}


def _unencodable(e: Exception) -> TypeError:
    """msgpack's ``ValueError`` (nested past its depth limit, an object too large) as the
    ``TypeError`` the codec's callers take for "this value cannot travel"."""
    return TypeError(f"cannot serialise a value the wire cannot carry ({e}: it takes at "
                     f"most {DEPTH_LIMIT} levels of nested lists and dicts, and objects "
                     f"below 4 GiB)")


def encode_batch(src_task: int, items: list, seq: int = 0, epoch: int = 0) -> bytes:
    """Serialise one batch of ``(stream_index, values)`` from ``src_task``, the ``seq``-th
    frame of ``epoch`` from it to its receiver.

    Raises:
        TypeError: a value the wire cannot carry: of a type it has no form for (named in
            the message) or nested past :data:`DEPTH_LIMIT`.
    """
    try:
        return msgpack.packb([[src_task, epoch, seq, items]], **_packer_opts)[1:]
    except ValueError as e:
        raise _unencodable(e) from None


_BAD_ANCHORS = "frame item's anchors are not [root_id, edge, root_id, edge, ...] (ints)"


def decode_batch(frame: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 num_streams: int | None = None) -> tuple[int, int, int, list]:
    """Parse a frame into ``(src_task, epoch, seq, [[stream_index, values], ...])``.

    Args:
        num_streams: when given, a stream index must be below it (or be the end-of-stream
            marker -1); checked in the same pass as the shape.

    Raises:
        FrameError: oversized, undecodable, not of the frame's shape, or a stream index
            out of range.
    """
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise FrameError(f"frame must be bytes, got {type(frame).__name__}")
    if len(frame) > max_frame_bytes:
        raise FrameError(f"frame of {len(frame)} bytes exceeds the {max_frame_bytes}-byte limit")
    try:
        obj = msgpack.unpackb(frame, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except FrameError:
        raise
    except Exception as e:
        raise FrameError(f"undecodable frame ({type(e).__name__}: {e})") from None
    if (not isinstance(obj, list) or len(obj) != 4 or not isinstance(obj[0], int)
            or not isinstance(obj[1], int) or obj[1] < 0
            or not isinstance(obj[2], int) or obj[2] < 0 or not isinstance(obj[3], list)):
        raise FrameError("frame is not [src_task, epoch, seq, [[stream, values], ...]]")
    limit = num_streams if num_streams is not None else 2**63
    for item in obj[3]:
        if (not isinstance(item, list) or not 2 <= len(item) <= 3
                or not isinstance(item[0], int)
                or not (item[1] is None or isinstance(item[1], list))
                or (len(item) == 3 and not isinstance(item[2], list))):
            raise FrameError("frame item is not [stream_index, values(, anchors)]")
        if not MIN_STREAM_INDEX <= item[0] < limit:
            raise FrameError(f"unknown stream index {item[0]}")
        if len(item) == 3:  # acking: the receiver uses these pairs without checks
            a = item[2]
            if len(a) == 2:  # one root: the usual case
                if type(a[0]) is not int or type(a[1]) is not int:
                    raise FrameError(_BAD_ANCHORS)
            elif not a or len(a) % 2 or any(type(x) is not int for x in a):
                raise FrameError(_BAD_ANCHORS)
    return obj[0], obj[1], obj[2], obj[3]


# -- worker to worker ------------------------------------------------------------------------
# A transfer payload groups the frames for one destination worker:
# ``msgpack([src_worker, [[dest_task, frame], ...]])``; each frame stays opaque bytes, so the
# transfer actors never decode tuples. A backpressure status travels as
# ``msgpack(BackPressureStatus.to_wire())``.


def encode_transfer(src_worker: int, frames: list[tuple[int, bytes]]) -> bytes:
    """Serialise the frames of one delivery to another worker."""
    return msgpack.packb([src_worker, frames], use_bin_type=True)


def decode_transfer(payload: bytes,
                    max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> tuple[int, list]:
    """Parse a delivery into ``(src_worker, [[dest_task, frame_bytes], ...])``.

    Raises:
        FrameError: oversized, undecodable or not of that shape.
    """
    if not isinstance(payload, (bytes, bytearray)):
        raise FrameError(f"payload must be bytes, got {type(payload).__name__}")
    if len(payload) > max_bytes:
        raise FrameError(f"payload of {len(payload)} bytes exceeds the {max_bytes}-byte limit")
    try:
        obj = msgpack.unpackb(payload, raw=False)
    except Exception as e:
        raise FrameError(f"undecodable payload ({type(e).__name__}: {e})") from None
    if (not isinstance(obj, list) or len(obj) != 2 or not isinstance(obj[0], int)
            or not isinstance(obj[1], list)
            or not all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], int)
                       and isinstance(f[1], bytes) for f in obj[1])):
        raise FrameError("payload is not [src_worker, [[dest_task, frame], ...]]")
    return obj[0], obj[1]


def encode_status(wire: list) -> bytes:
    """Serialise a ``BackPressureStatus.to_wire()`` list."""
    return msgpack.packb(wire, use_bin_type=True)


def decode_status(data: bytes, max_bytes: int = 1 << 20) -> list:
    """Parse a status message back into its wire list (shape checked by ``from_wire``).

    Raises:
        FrameError: oversized or undecodable.
    """
    if not isinstance(data, (bytes, bytearray)) or len(data) > max_bytes:
        raise FrameError("status must be bytes within the size limit")
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as e:
        raise FrameError(f"undecodable status ({type(e).__name__}: {e})") from None


# -- state values and keys -------------------------------------------------------------------
# Checkpointed state (``topology.KeyValueState``) stores each key and value as bytes of the
# same codec: a value that could travel in a tuple can be kept in state, and nothing is
# pickled. Keys decode with tuples for arrays (a tuple key comes back as a tuple).


def encode_value(value: Any) -> bytes:
    """One value as codec bytes.

    Raises:
        TypeError: a value the codec cannot carry (see :func:`encode_batch`).
    """
    try:
        return msgpack.packb([value], **_packer_opts)[1:]  # (see DEPTH_LIMIT)
    except ValueError as e:
        raise _unencodable(e) from None


def value_encoder():
    """:func:`encode_value` with a ``msgpack.Packer`` of its own: faster per call than
    ``packb`` with options, and not thread-safe (one owner: a task's state)."""
    pack = msgpack.Packer(default=_default, use_bin_type=True).pack

    def encode(value: Any) -> bytes:
        try:
            # (see DEPTH_LIMIT; msgpack's Packer resets its buffer when it raises)
            return pack([value])[1:]
        except ValueError as e:
            raise _unencodable(e) from None
    return encode


def _decode_state(data: bytes, what: str, use_list: bool) -> Any:
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False,
                               use_list=use_list)
    except FrameError:
        raise
    except Exception as e:
        raise FrameError(f"undecodable state {what} ({type(e).__name__}: {e})") from None


def decode_value(data: bytes) -> Any:
    """The value of :func:`encode_value`'s bytes.

    Raises:
        FrameError: undecodable bytes.
    """
    return _decode_state(data, "value", True)


def decode_key(data: bytes) -> Any:
    """A state key from its codec bytes (arrays come back as tuples).

    Raises:
        FrameError: undecodable bytes.
    """
    return _decode_state(data, "key", False)
