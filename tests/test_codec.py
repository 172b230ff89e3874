"""The tuple-batch codec refuses malformed frames with FrameError (receivers count and drop
them), and round-trips what the executors send."""

from __future__ import annotations

import msgpack
import pytest

from actors import FrameError, decode_batch, encode_batch


def test_round_trip_with_and_without_anchors():
    items = [[0, [1, "a"]], [1, [2, "b"], [12345, 678, 9, 10]], [1, [3, "c"], [2**63 - 1, 5]],
             [-1, None]]
    assert decode_batch(encode_batch(3, items, seq=7, epoch=2), num_streams=2) == (3, 2, 7, items)


@pytest.mark.parametrize("item, message", [
    ([0, [1], [[1, 2]]], "anchors"),  # the old nested pairs
    ([0, [1], [1, "x"]], "anchors"),
    ([0, [1], [5]], "anchors"),
    ([0, [1], []], "anchors"),
    ([0, [1], [1, 2, 3]], "anchors"),
    ([0, [1], [True, 2]], "anchors"),
    ([0, [1], [1, 2, 3, 4.5]], "anchors"),
    ([0, [1], 7], "not \\[stream_index"),
    ([0, 5], "not \\[stream_index"),
    ([7, [1]], "unknown stream index 7"),
    (["x", [1]], "not \\[stream_index"),
])
def test_malformed_items_raise_frame_error(item, message):
    frame = msgpack.packb([1, 0, 0, [[0, [0]], item]])
    with pytest.raises(FrameError, match=message):
        decode_batch(frame, num_streams=2)


def test_tune_gc_sets_generation_0_and_keeps_the_others():
    import gc

    from actors._gc import tune_gc

    before = gc.get_threshold()
    try:
        tune_gc(12345)
        assert gc.get_threshold() == (12345, *before[1:])
        tune_gc(0)  # 0 leaves Python's setting alone
        assert gc.get_threshold() == (12345, *before[1:])
    finally:
        gc.set_threshold(*before)


def test_every_supported_type_round_trips_exactly_time_zones_included():
    """Each value comes back equal and of its type; an aware datetime or time keeps its UTC
    offset (a named zone comes back as that instant's fixed offset, the same instant);
    a Decimal keeps its exact digits; Arrow batches and tables keep schema and rows."""
    import datetime as dt
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    import pyarrow as pa

    ist = dt.timezone(dt.timedelta(hours=5, minutes=30))
    values = [
        None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, float("inf"), "", "naïve ☃",
        b"\x00\xff", [1, [2, "x"]], {"a": [1, None], "b": {"c": 2.5}},
        dt.datetime(2013, 1, 1, 5, 15, 0, 123456),                         # naive
        dt.datetime(2013, 1, 1, 5, 15, tzinfo=dt.timezone.utc),
        dt.datetime(2013, 6, 30, 23, 59, 59, 999999, tzinfo=ist),
        dt.datetime(1969, 12, 31, 19, 0, tzinfo=dt.timezone(-dt.timedelta(hours=5))),
        dt.datetime(2013, 3, 10, 3, 30, tzinfo=ZoneInfo("America/New_York")),  # after DST
        dt.date(2013, 2, 28), dt.time(23, 59, 59, 1), dt.time(8, 0, tzinfo=ist),
        Decimal("1.10"), Decimal("-0.000"), Decimal("12345678901234567890.000000001"),
    ]
    items = [[0, [v]] for v in values]
    got = [it[1][0] for it in decode_batch(encode_batch(1, items, seq=1), num_streams=1)[3]]
    for sent, back in zip(values, got, strict=True):
        assert back == sent and type(back) is type(sent), (sent, back)
        if isinstance(sent, (dt.datetime, dt.time)):
            assert back.utcoffset() == sent.utcoffset(), (sent, back)
        if isinstance(sent, Decimal):
            assert str(back) == str(sent)
    batch = pa.record_batch({"ts": pa.array([dt.datetime(2013, 1, 1, tzinfo=dt.timezone.utc)],
                                            pa.timestamp("us", tz="UTC")),
                             "n": pa.array([1], pa.int64())})
    table = pa.Table.from_batches([batch, batch])
    frame = encode_batch(1, [[0, [batch]], [0, [table]]], seq=2)
    b2, t2 = (it[1][0] for it in decode_batch(frame, num_streams=1)[3])
    assert b2.equals(batch) and b2.schema == batch.schema
    assert t2.equals(table) and t2.schema == table.schema


def test_datetimes_and_dates_round_trip_at_their_edges():
    """The binary wall time keeps fold, the extremes of the range, and offsets with seconds
    and microseconds (Python allows both); a date keeps a leap day."""
    import datetime as dt

    odd = dt.timezone(dt.timedelta(hours=-3, minutes=-25, seconds=-7, microseconds=-11))
    values = [
        dt.datetime.min, dt.datetime.max, dt.datetime.max.replace(tzinfo=dt.timezone.utc),
        dt.datetime(2021, 11, 7, 1, 30, fold=1), dt.datetime(2021, 11, 7, 1, 30, tzinfo=odd),
        dt.datetime(2000, 2, 29, 12, tzinfo=dt.timezone(dt.timedelta(hours=23, minutes=59))),
        dt.date.min, dt.date.max, dt.date(2000, 2, 29),
    ]
    items = [[0, [v]] for v in values]
    got = [it[1][0] for it in decode_batch(encode_batch(1, items), num_streams=1)[3]]
    for sent, back in zip(values, got, strict=True):
        assert back == sent and type(back) is type(sent), (sent, back)
        if isinstance(sent, dt.datetime):
            assert (back.fold, back.utcoffset()) == (sent.fold, sent.utcoffset())
            assert back.replace(tzinfo=None) == sent.replace(tzinfo=None)  # the wall time


def _ext_frame(code: int, payload: bytes) -> bytes:
    return msgpack.packb([1, 0, 0, [[0, [msgpack.ExtType(code, payload)]]]])


@pytest.mark.parametrize("code, payload, message", [
    (1, bytes([7, 221, 1, 1, 24, 0, 0, 0, 0, 0]), "fields are out of range"),         # hour 24
    (1, bytes([7, 221, 1, 1, 5, 60, 0, 0, 0, 0]), "fields are out of range"),         # minute 60
    (1, bytes([7, 221, 1, 1, 5, 0, 60, 0, 0, 0]), "fields are out of range"),         # second 60
    (1, bytes([7, 221, 1, 1, 5, 0, 0, 0x0F, 0x42, 0x40]), "fields are out of range"),  # 10**6 µs
    (1, bytes([7, 221, 2, 29, 5, 0, 0, 0, 0, 0]), "fields are out of range"),         # 2013-02-29
    (1, bytes([7, 221, 1, 0, 5, 0, 0, 0, 0, 0]), "fields are out of range"),          # day 0
    (1, bytes([7, 221, 13, 1, 5, 0, 0, 0, 0, 0]), "undecodable frame"),     # month 13 (TypeError)
    (1, bytes([0, 0, 1, 1, 5, 0, 0, 0, 0, 0]), "undecodable frame"),    # year 0 (OverflowError)
    (1, bytes([7, 221, 1, 1, 5, 0, 0, 0, 0]), "10 or 18 expected"),
    (1, bytes([7, 221, 1, 1, 5, 0, 0, 0, 0, 0]) + (86_400_000_000).to_bytes(8, "little"),
     "UTC offset"),
    (2, bytes([7, 221, 2, 30]), "date payload's fields are out of range"),         # 2013-02-30
    (2, bytes([7, 221, 2]), "4 expected"),
])
def test_malformed_datetime_and_date_payloads_raise_frame_error(code, payload, message):
    with pytest.raises(FrameError, match=message):
        decode_batch(_ext_frame(code, payload), num_streams=1)


def test_a_well_formed_payload_built_by_hand_decodes():
    """The frames above differ from this one only in the field under test."""
    import datetime as dt

    payload = bytes([7, 221, 1, 1, 5, 0, 0, 0, 0, 0]) + (-18_000_000_000).to_bytes(
        8, "little", signed=True)
    value = decode_batch(_ext_frame(1, payload), num_streams=1)[3][0][1][0]
    assert value == dt.datetime(2013, 1, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=-5)))


def test_subclasses_travel_as_their_base_type_and_nat_is_refused():
    """A subclass's own ``__reduce__`` never runs (a date subclass once crashed the send);
    pandas' NaT, a datetime whose state is year 1's, is refused with a clear error instead
    of arriving as 0001-01-01."""
    import datetime as dt

    class Day(dt.date):
        def __reduce__(self):
            return (Day, ())

    class Instant(dt.datetime):
        def __reduce_ex__(self, protocol):
            return (Instant, ())

    items = [[0, [Day(2020, 1, 2), Instant(2020, 1, 2, 3, tzinfo=dt.timezone.utc)]]]
    back = decode_batch(encode_batch(1, items), num_streams=1)[3][0][1]
    assert back == [dt.date(2020, 1, 2), dt.datetime(2020, 1, 2, 3, tzinfo=dt.timezone.utc)]
    assert [type(v) for v in back] == [dt.date, dt.datetime]
    pd = pytest.importorskip("pandas")
    with pytest.raises(TypeError, match="NaT"):
        encode_batch(1, [[0, [pd.NaT]]])


def test_a_datetime_travels_in_a_compact_payload():
    """Ten bytes of wall time, eight more for an offset: not ISO text."""
    import datetime as dt

    naive = dt.datetime(2013, 1, 1, 5, 15, 0, 123456)
    aware = naive.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    for value, size in ((naive, 10), (aware, 18), (naive.date(), 4)):
        frame = encode_batch(1, [[0, [value]]])
        ext = msgpack.unpackb(frame)[3][0][1][0]
        assert isinstance(ext, msgpack.ExtType) and len(ext.data) == size, (value, ext)


# -- nothing on the wire runs code in us; no value wedges a send -------------------------------
def _arrow_frame(batch) -> bytes:
    return encode_batch(1, [[0, [batch]]])


@pytest.fixture
def pickled_object_type():
    """An extension type that unpickles its values in ``to_pylist()``, as Ray Data's
    ``ray.data.arrow_pickled_object`` does, registered in this process; ``.hook_calls``
    counts its ``__arrow_ext_deserialize__`` (Python code pyarrow runs at schema reading)."""
    pa = pytest.importorskip("pyarrow")
    import pickle

    hook_calls = []

    class PickledScalar(pa.ExtensionScalar):
        def as_py(self, **kwargs):
            return pickle.loads(self.value.as_py())

    class PickledObjectType(pa.ExtensionType):
        def __init__(self):
            super().__init__(pa.large_binary(), "test.pickled_object")

        def __arrow_ext_serialize__(self):
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type, serialized):
            hook_calls.append(serialized)
            return cls()

        def __arrow_ext_scalar_class__(self):
            return PickledScalar

    pa.register_extension_type(PickledObjectType())
    ext = PickledObjectType()
    ext.hook_calls = hook_calls
    yield ext
    pa.unregister_extension_type("test.pickled_object")


def test_an_arrow_column_of_a_foreign_extension_type_is_refused(pickled_object_type):
    import pickle

    import pyarrow as pa

    storage = pa.array([pickle.dumps(("payload", 1))], pa.large_binary())
    column = pa.ExtensionArray.from_storage(pickled_object_type, storage)
    nested = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), column)
    for batch in (pa.record_batch({"obj": column}), pa.record_batch({"objs": nested})):
        with pytest.raises(FrameError, match="extension type 'test.pickled_object'"):
            decode_batch(_arrow_frame(batch))
    assert pickled_object_type.hook_calls == []   # refused before pyarrow read the schema
    frame = _arrow_frame(pa.record_batch({"obj": column}))
    pa.unregister_extension_type("test.pickled_object")   # known only by its metadata
    try:
        with pytest.raises(FrameError, match="extension type 'test.pickled_object'"):
            decode_batch(frame)
    finally:
        pa.register_extension_type(pickled_object_type)
    ok = pa.record_batch({"id": pa.array([b"0123456789abcdef"], pa.uuid())})
    assert decode_batch(_arrow_frame(ok))[3][0][1][0].equals(ok)   # Arrow's own: allowed


def test_a_damaged_arrow_payload_is_a_frame_error_whatever_the_damage():
    """The schema reader checks every offset: truncated or flipped bytes anywhere in the
    schema message give a FrameError, never another exception or a crash."""
    import random

    pa = pytest.importorskip("pyarrow")
    batch = pa.record_batch({"id": pa.array([b"0123456789abcdef"], pa.uuid()),
                             "l": pa.array([[{"x": "y"}]])})  # (an extension: walked)
    payload = bytearray(msgpack.unpackb(_arrow_frame(batch), ext_hook=lambda c, d: d)[3][0][1][0])
    rng = random.Random(7)
    for n in range(200):
        bad = bytearray(payload)
        for _ in range(1 + n % 4):
            bad[rng.randrange(8, 8 + 200)] = rng.randrange(256)
        frame = encode_batch(1, [[0, [msgpack.ExtType(5, bytes(bad))]]])
        try:
            decode_batch(frame)
        except FrameError:
            pass
    for cut in range(0, 200, 7):
        with pytest.raises(FrameError):
            decode_batch(encode_batch(1, [[0, [msgpack.ExtType(5, bytes(payload[:cut]))]]]))


def test_an_arrow_payload_is_validated_in_full():
    """A string that is not UTF-8: Arrow's cheap checks pass, the full one does not."""
    pa = pytest.importorskip("pyarrow")

    offsets = pa.py_buffer(pa.array([0, 1], pa.int32()).buffers()[1])
    bad = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff")])
    with pytest.raises(FrameError, match="undecodable Arrow payload"):
        decode_batch(_arrow_frame(pa.record_batch({"s": bad})))


def _deep(n: int) -> list:
    value: list = []
    inner = value
    for _ in range(n):
        inner.append([])
        inner = inner[0]
    return value


def test_a_value_past_the_depth_limit_is_a_type_error_and_what_encodes_decodes():
    from actors._codec import decode_value, encode_value, value_encoder

    with pytest.raises(TypeError, match="nested lists"):
        encode_batch(1, [[0, [_deep(5000)]]])
    for encode in (encode_value, value_encoder()):
        with pytest.raises(TypeError, match="nested lists"):
            encode(_deep(5000))
    deepest = max(n for n in range(1015, 1030) if _encodes(n))  # msgpack's limit, framed
    assert _depth(decode_batch(encode_batch(1, [[0, [_deep(deepest)]]]))[3][0][1][0]) == deepest
    assert _depth(decode_value(encode_value(_deep(deepest + 3)))) == deepest + 3


def _depth(value: list) -> int:
    n = 0
    while value:
        value, n = value[0], n + 1
    return n


def _encodes(n: int) -> bool:
    try:
        encode_batch(1, [[0, [_deep(n)]]])
    except TypeError:
        return False
    return True


def test_a_too_deep_value_is_that_tuples_error_and_the_rest_are_sent():
    """The sender's poison path (``ActorSink``): the tuple is reported, its neighbours go
    in the frame, and the sink goes on taking batches."""
    from actors import make_executor
    from actors._sink import ActorSink
    from tests.components import SeqSpout
    from topology import CollectorBolt, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    core = make_executor("t", b.create_topology(), {}, 2, {1: 0, 2: 0})  # sink=1, src=2
    frames = []

    class Call:
        def future(self):
            from concurrent.futures import Future
            return Future()

    def send(frame):
        frames.append(frame)
        return Call()

    sink = ActorSink(send, 2, 1, 4, core)
    assert sink([(0, [1]), (0, [_deep(5000)]), (0, [3])]) == 3
    assert sink([(0, [4])]) == 1
    assert [decode_batch(f)[3] for f in frames] == [[[0, [1]], [0, [3]]], [[0, [4]]]]
    (kind,) = core.errors.kinds.values()
    assert kind.count == 1 and kind.error_type == "TypeError" and "nested" in kind.message
