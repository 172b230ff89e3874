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
