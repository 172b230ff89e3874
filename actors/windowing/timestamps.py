"""Event time from a tuple field: :func:`extract_timestamp` (Storm's
``TupleFieldTimestampExtractor``) and the error for a field that holds no time."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any


class BadTimestamp(ValueError):
    """A tuple's timestamp field is missing or holds neither a number nor a ``datetime``.

    Not a late tuple: the caller counts and reports it.

    Attributes:
        field: the timestamp field.
        value_type: the type name of the value found (``"missing"`` when absent).
    """

    def __init__(self, field: str, value_type: str) -> None:
        self.field = field
        self.value_type = value_type
        if value_type == "missing":
            msg = f"the tuple has no timestamp field {field!r}"
        else:
            msg = (f"timestamp field {field!r} holds a {value_type}; expected epoch ms (int "
                   "or float) or a datetime")
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.field, self.value_type))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)
_MISSING = object()


def extract_timestamp(values: Any, field: str) -> int:
    """The event time of a tuple, in whole epoch ms (Storm's ``TupleFieldTimestampExtractor``).

    Args:
        values: a ``Tuple``, a mapping, or anything indexable by field name.
        field: the timestamp field.

    Returns:
        An int: an int as is; a float floored to whole ms (window bounds are whole ms); a
        ``datetime`` converted, a naive one read as UTC.

    Raises:
        BadTimestamp: the field is missing, or holds anything else (None, str, bool, NaN).
    """
    if isinstance(values, Mapping):
        v = values.get(field, _MISSING)
    else:
        try:
            v = values[field]
        except (KeyError, IndexError, TypeError):
            v = _MISSING
    t = type(v)
    if t is int:
        return v
    if t is float:
        if math.isfinite(v):
            return math.floor(v)
    elif isinstance(v, datetime):
        ms = ((v if v.tzinfo is not None else v.replace(tzinfo=timezone.utc)) - _EPOCH) // _ONE_MS
        if isinstance(ms, int):  # pandas.NaT passes isinstance(datetime) and yields NaN
            return ms
    elif v is not _MISSING and not isinstance(v, bool):
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real) and math.isfinite(v):
            return math.floor(v)
    raise BadTimestamp(field, "missing" if v is _MISSING else t.__name__)
