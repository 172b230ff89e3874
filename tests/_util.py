"""Helpers shared by the integration tests."""

from __future__ import annotations

import time


def until(cond, timeout: float = 60.0, what: str = "condition", interval: float = 0.05):
    """Poll ``cond`` every ``interval`` s (50 ms) until it returns a true value (returned);
    fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(interval)
