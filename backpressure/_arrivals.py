"""What entered a queue, insert by insert: counts, wire bytes and arrival times.

One record per insert (not per tuple) lets a ``JCQueue`` bound itself in bytes and give a
consumer each element's sojourn time (CoDel's measure) at the cost of one append per insert
and one comparison per element taken (backpressure/_jcqueue.py).
"""

from __future__ import annotations

from collections import deque


class Arrivals:
    """What entered one of a queue's deques, insert by insert: a record per insert (its
    cumulative element count, cumulative wire bytes and arrival time), popped as its
    elements leave. Producers add under the queue's lock; only the consumer takes.

    Bytes leave when the last element of their insert leaves, so a partly consumed insert
    still counts whole: the queued bytes read high, never low.
    """

    __slots__ = ("marks", "count_in", "count_out", "bytes_in", "bytes_out")

    def __init__(self) -> None:
        self.marks: deque = deque()
        self.count_in = 0  # elements ever added
        self.count_out = 0  # elements ever taken
        self.bytes_in = 0
        self.bytes_out = 0

    def add(self, n: int, nbytes: int, now: float) -> None:
        """Record ``n`` elements of ``nbytes`` arriving at ``now``, *before* they are
        appended (so an element the consumer sees always has its record)."""
        self.count_in += n
        self.bytes_in += nbytes
        self.marks.append((self.count_in, self.bytes_in, now))

    def taken(self, n: int) -> None:
        """``n`` elements left (the consumer)."""
        self.taken_to(self.count_out + n)

    def taken_to(self, count: int) -> int:
        """Elements up to the ``count``-th ever added have left (the consumer); returns the
        count at which the oldest insert still queued will have left (its record's end)."""
        self.count_out = count
        marks = self.marks
        while marks and marks[0][0] <= count:
            self.bytes_out = marks.popleft()[1]
        return marks[0][0] if marks else _NEVER

    @property
    def queued_bytes(self) -> int:
        return self.bytes_in - self.bytes_out


_NEVER = 1 << 62


def fit(n: int, nbytes: int, room: int, cap_bytes: int, queued_bytes: int) -> int:
    """How many of ``n`` elements of ``nbytes`` wire bytes in all (shared evenly) fit
    beside ``queued_bytes`` under ``cap_bytes`` (0: no byte bound) and ``room`` elements.
    An element larger than the whole bound fits only when nothing is queued."""
    k = min(n, room)
    if k <= 0 or not cap_bytes or not nbytes:
        return max(k, 0)
    free = cap_bytes - queued_bytes
    kb = free * n // nbytes if free > 0 else 0
    if kb == 0 and queued_bytes <= 0:
        kb = 1  # alone into an empty queue
    return min(k, kb)
