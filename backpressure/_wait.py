"""Wait strategies: how a thread idles between retries (Storm's ``IWaitStrategy``).

Source: Storm 2.0 ``WaitStrategyProgressive`` / ``WaitStrategyPark`` (Storm docs,
"Performance Tuning", wait strategies). Python has no ``parkNanos``; a park of *µs* is
``time.sleep(µs / 1e6)``, whose real floor on Linux is the thread's timer slack (50 µs by
default), as is ``parkNanos(1)``'s, so Storm's level-2 ``parkNanos(1)`` is
``time.sleep(1e-6)``: a real park. It was ``time.sleep(0)`` (a bare yield) before: py-spy on
benchmarks/acking.py's pipeline showed idle executors spinning in it, taking cores from busy
ones, and both the acking and the non-acking pipeline ran faster with a real park (figures
in docs/benchmarks.md). All strategies are stateless apart from the caller's ``idle_count``,
so one instance may be shared.

Waking early: an executor passes its *wakeup* event (set when input reaches its queue or
one of its sends completes), and every park or sleep then ends as soon as it is set. Storm's
threads park for nanoseconds at a time; a Python thread's park costs far more: a thread
parking in a loop with ``time.sleep(1e-6)`` uses a large share of a core in wake-ups alone,
and waiting on an event with a 1 ms timeout almost none (its /proc CPU time; figures in
docs/benchmarks.md). So the executor's defaults skip level 2 and wait on the event.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Any

#: The situations whose config keys a strategy is read from (Storm's ``WAIT_SITUATION``).
SITUATIONS = {"spout": "topology.spout.wait", "bolt": "topology.bolt.wait",
              "backpressure": "topology.backpressure.wait"}


class WaitStrategy(ABC):
    """Idle once and return the new idle count; reset the count to 0 after progress."""

    @abstractmethod
    def idle(self, idle_count: int, wakeup: threading.Event | None = None,
             max_s: float | None = None) -> int:
        """Wait a little; ``idle_count`` is how many times in a row the caller idled.

        Args:
            wakeup: when given, a wait ends early once it is set (the caller clears it
                before checking for work, so nothing set after that check is missed).
            max_s: when given, no wait lasts longer (seconds): the executor's next flush.

        Returns:
            The count to pass next time. Blocks the calling thread for 0 to a few ms.
        """


def _pause(seconds: float, wakeup: threading.Event | None, max_s: float | None) -> None:
    if max_s is not None and max_s < seconds:
        seconds = max_s
    if wakeup is None:
        time.sleep(seconds)
    else:
        wakeup.wait(seconds)


class ProgressiveWaitStrategy(WaitStrategy):
    """Spin, then park briefly, then sleep: Storm's ``WaitStrategyProgressive``.

    Args:
        level1_count: idles that return at once (busy spin).
        level2_count: further idles that park for the timer slack each (``parkNanos(1)``).
        level3_sleep_ms: after that, each idle sleeps this long (count no longer grows).
    """

    def __init__(self, level1_count: int = 1, level2_count: int = 1000,
                 level3_sleep_ms: float = 1.0) -> None:
        self.level1_count = level1_count
        self.level2_count = level2_count
        self.level3_sleep_s = level3_sleep_ms / 1000.0

    def idle(self, idle_count: int, wakeup: threading.Event | None = None,
             max_s: float | None = None) -> int:
        if idle_count < self.level1_count:
            return idle_count + 1
        if idle_count < self.level1_count + self.level2_count:
            _pause(1e-6, wakeup, max_s)  # parkNanos(1): Linux's timer slack, 50 µs by default
            return idle_count + 1
        _pause(self.level3_sleep_s, wakeup, max_s)
        return idle_count

    def __repr__(self) -> str:
        return (f"ProgressiveWaitStrategy({self.level1_count}, {self.level2_count}, "
                f"{self.level3_sleep_s * 1000:g} ms)")


class ParkWaitStrategy(WaitStrategy):
    """Sleep a fixed number of microseconds per idle (0 = busy spin): ``WaitStrategyPark``."""

    def __init__(self, park_us: float = 100) -> None:
        self.park_s = park_us / 1e6

    def idle(self, idle_count: int, wakeup: threading.Event | None = None,
             max_s: float | None = None) -> int:
        if self.park_s > 0:
            _pause(self.park_s, wakeup, max_s)
        return idle_count + 1


class SleepWaitStrategy(WaitStrategy):
    """Sleep a fixed number of milliseconds per idle."""

    def __init__(self, sleep_ms: float = 1.0) -> None:
        self.sleep_s = sleep_ms / 1000.0

    def idle(self, idle_count: int, wakeup: threading.Event | None = None,
             max_s: float | None = None) -> int:
        _pause(self.sleep_s, wakeup, max_s)
        return idle_count + 1


def make_wait_strategy(conf: dict[str, Any], situation: str) -> WaitStrategy:
    """Build the strategy that ``conf`` selects for ``situation``.

    Args:
        conf: a full config (``topology.make_config``).
        situation: ``"spout"``, ``"bolt"`` or ``"backpressure"``.

    Raises:
        ValueError: unknown situation or strategy name.
    """
    try:
        prefix = SITUATIONS[situation]
    except KeyError:
        raise ValueError(f"unknown wait situation {situation!r}; "
                         f"known: {sorted(SITUATIONS)}") from None
    kind = conf[f"{prefix}.strategy"]
    if kind == "progressive":
        return ProgressiveWaitStrategy(conf[f"{prefix}.progressive.level1.count"],
                                       conf[f"{prefix}.progressive.level2.count"],
                                       conf[f"{prefix}.progressive.level3.sleep.millis"])
    if kind == "park":
        return ParkWaitStrategy(conf[f"{prefix}.park.microsec"])
    if kind == "sleep":
        return SleepWaitStrategy(conf[f"{prefix}.progressive.level3.sleep.millis"])
    raise ValueError(f"unknown wait strategy {kind!r} for {prefix}.strategy")
