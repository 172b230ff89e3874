"""Arrow columns to Python values, row by row, for the spouts that read Arrow blocks.

``pyarrow.Array.to_pylist`` builds each timestamp through a per-value time-zone lookup, the
largest cost of a ``DataFrameSpout`` task in the flights job's profile (py-spy on its
executor; ``benchmarks/row_path.py`` compares both paths). A timestamp column in UTC
goes through numpy instead: ``datetime64`` to naive ``datetime`` in C, then the zone set
once per value. Every other column, and a timestamp in another zone or in nanoseconds,
keeps ``to_pylist``: the values are the same either way (``tests/test_arrow_rows.py``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Iterator
from typing import Any

#: Zone names whose instants are UTC's (Spark's session zone is UTC under start_spark).
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00", "Z", "GMT", "Etc/GMT", "Universal",
                       "Zulu"})
_FAST_UNITS = frozenset({"s", "ms", "us"})  # numpy's object conversion gives datetimes
#: ``datetime``'s range in microseconds from the epoch (numpy gives ints outside it)
_MIN_US = (_dt.datetime(1, 1, 1) - _dt.datetime(1970, 1, 1)) // _dt.timedelta(microseconds=1)
_MAX_US = (_dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - _dt.datetime(1970, 1, 1)) \
    // _dt.timedelta(microseconds=1)
_PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def column_values(column: Any) -> list:
    """One Arrow column (``pyarrow.Array`` or ``ChunkedArray``) as a list of Python values,
    equal to ``column.to_pylist()``: timestamps as ``datetime.datetime`` (aware, with
    ``datetime.timezone.utc``, for a UTC column; naive for a column without a zone), nulls
    as ``None``. Non-blocking; O(len(column))."""
    import pyarrow as pa
    import pyarrow.compute as pc

    typ = column.type
    if not pa.types.is_timestamp(typ) or typ.unit not in _FAST_UNITS:
        return column.to_pylist()
    if typ.tz is not None and typ.tz not in UTC_NAMES:
        return column.to_pylist()
    bounds = pc.min_max(column.cast(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and not (_MIN_US <= low * _PER_US[typ.unit]
                                and high * _PER_US[typ.unit] <= _MAX_US):
        return column.to_pylist()  # (it raises on what datetime cannot hold)
    naive = column.cast(pa.timestamp(typ.unit)).to_numpy(zero_copy_only=False)
    values = naive.astype(object).tolist()  # NaT → None
    if typ.tz is None:
        return values
    utc = _dt.timezone.utc
    return [None if v is None else v.replace(tzinfo=utc) for v in values]


def arrow_rows(table: Any, columns: Iterable[str]) -> Iterator[tuple]:
    """The rows of ``table`` (a ``pyarrow.Table`` or ``RecordBatch``) as tuples of the
    ``columns``' values, in that order (see :func:`column_values`).

    Raises:
        KeyError: a column is not in the table.
    """
    cols = [column_values(table.column(name)) for name in columns]
    return zip(*cols, strict=True)
