"""Arrow columns to Python values (topology/_arrow_rows.py): the same values as
``to_pylist`` for every timestamp unit and zone, nulls, chunks and other types."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from topology._arrow_rows import arrow_rows, column_values

_SCALE = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "+00:00", "America/New_York", "+05:30"])
def test_timestamps_equal_to_pylist_in_value_type_and_awareness(unit, tz):
    t = pa.timestamp(unit, tz=tz)
    col = pa.chunked_array([pa.array([0, None, 1_700_000_000 * _SCALE[unit] + 7], t),
                            pa.array([-86_400 * _SCALE[unit], None], t)])
    want, got = col.to_pylist(), column_values(col)
    assert got == want
    assert [type(v) for v in got] == [type(v) for v in want]
    assert [v.utcoffset() if v is not None else "null" for v in got] == \
        [v.utcoffset() if v is not None else "null" for v in want]


def test_a_utc_column_comes_back_aware_in_utc():
    col = pa.array([1_356_998_400_000_000], pa.timestamp("us", tz="UTC"))  # 2013-01-01
    (v,) = column_values(col)
    assert v == dt.datetime(2013, 1, 1, tzinfo=dt.timezone.utc)
    assert v.utcoffset() == dt.timedelta(0) and v.isoformat() == "2013-01-01T00:00:00+00:00"


def test_all_null_and_empty_columns():
    assert column_values(pa.array([None, None], pa.timestamp("us", tz="UTC"))) == [None, None]
    assert column_values(pa.array([], pa.timestamp("us"))) == []


def test_outside_datetimes_range_it_raises_as_to_pylist_does():
    col = pa.array([0, 300_000 * 365 * 86_400], pa.timestamp("s"))
    with pytest.raises(OverflowError):
        col.to_pylist()
    with pytest.raises(OverflowError):
        column_values(col)


def test_rows_take_the_columns_in_the_order_asked():
    table = pa.table({"n": [1, None], "s": ["a", "b"], "f": [0.5, 1.5],
                      "t": pa.array([0, 3_600_000_000], pa.timestamp("us", tz="UTC"))})
    utc = dt.timezone.utc
    assert list(arrow_rows(table, ["t", "s", "n"])) == [
        (dt.datetime(1970, 1, 1, tzinfo=utc), "a", 1),
        (dt.datetime(1970, 1, 1, 1, tzinfo=utc), "b", None)]
    with pytest.raises(KeyError):
        list(arrow_rows(table, ["missing"]))
