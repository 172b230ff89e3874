"""A sliding-window event rate (Storm's ``RateTracker``: 10 s window, 10 buckets)."""

from __future__ import annotations

import time
from collections.abc import Callable


class RateTracker:
    """Counts events into time buckets and reports events per second over the window.

    Not thread-safe on its own; callers hold their lock. ``notify`` costs one clock read,
    so call it per batch, not per tuple.
    """

    def __init__(self, window_s: float = 10.0, buckets: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._width = window_s / buckets
        self._n = buckets
        self._counts = [0] * buckets
        self._start = clock()
        self._epoch = 0  # index of the current bucket since start

    def _roll(self, now: float) -> None:
        epoch = int((now - self._start) / self._width)
        if epoch != self._epoch:
            for e in range(self._epoch + 1, min(epoch, self._epoch + self._n) + 1):
                self._counts[e % self._n] = 0
            self._epoch = epoch

    def notify(self, n: int = 1) -> None:
        self._roll(self._clock())
        self._counts[self._epoch % self._n] += n

    def rate(self) -> float:
        """Events per second over the elapsed part of the window."""
        now = self._clock()
        self._roll(now)
        since = now - self._start
        # full buckets kept, plus the part of the current one that has elapsed
        elapsed = min(since, (self._n - 1) * self._width + (since % self._width))
        if elapsed <= 0:
            return 0.0
        return sum(self._counts) / max(elapsed, 1e-9)
