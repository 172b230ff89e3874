"""Arrow columns to Python values (connectors/spark/arrow_rows.py): the same values as
``to_pylist`` for every timestamp unit and zone, nulls, chunks and other types."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from connectors.spark.arrow_rows import arrow_rows, column_values

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


def test_raydp_internal_notices_are_hidden_and_nothing_else():
    """While RayDP converts a frame, pyspark's ``sql_ctx`` notice and Ray's ``ray.worker``
    notice (both about RayDP's internals) are hidden; other warnings and Ray's other log
    lines still show, and outside the conversion the notice shows as before."""
    import logging
    import warnings

    import ray

    from connectors.spark.dataframe_spout import raydp_internals_quiet

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    keep = Keep()
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(keep)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with raydp_internals_quiet():
                ray.worker._warned.discard("global_worker")  # Ray warns once per attribute
                ray.worker.global_worker  # noqa: B018 (the access is what logs)
                warnings.warn("DataFrame.sql_ctx is an internal property, and will be "
                              "removed", UserWarning, stacklevel=1)
                warnings.warn("a real warning", UserWarning, stacklevel=1)
                ray_logger.warning("a real Ray line")
            ray.worker._warned.discard("global_worker")
            ray.worker.global_worker  # noqa: B018
        assert [str(w.message) for w in caught] == ["a real warning"]
        assert seen[0] == "a real Ray line" and len(seen) == 2, seen
        assert "`ray.worker.global_worker`" in seen[1]
    finally:
        ray_logger.removeHandler(keep)
