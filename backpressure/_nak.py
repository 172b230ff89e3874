"""NAK flow control: receivers speak only when overloaded; spouts adapt a send-rate limit.

The NAK scheme (NAK-based flow control, where ACK-based flow control would grant credit:
negative acknowledgements, as in brokerless multicast messaging; the blog post "Backpressure
in async communication systems", 2014, applies it to sender rate limits; JStorm's rate-based
backpressure is the closest production design): a receiver watches its queue and, once the
fill crosses a level (50 / 75 / 87 / 100% by default), sends ``NAK(level)`` to the senders;
while no queue is past the first level, nothing is sent at all. Each sender keeps a
send-rate limit, cut by a NAK according to its strength and raised stepwise (the step
growing with the time since the last NAK) while none arrives. In 1:N fan-out a sender reacts
to the strongest NAK within a window (50 ms), so it never needs to know how many receivers
there are, and a dying receiver cannot stall it (it simply stops sending NAKs).

Here the senders that adapt are the spouts upstream of the overloaded task (the sources:
bolts between them pass the slowdown on through their bounded queues). The limit is applied
without blocking: a spout above its rate skips ``next_tuple`` but keeps taking acks.
Storm 2.0's per-task status still holds the senders to a task whose overflow is in use
(:class:`Storm2Policy`): the runtime's bound on memory under every policy.
:class:`NakPolicy` is pure: both sides of one task, times passed in.
"""

from __future__ import annotations

import math
from typing import Any

from backpressure._policy import POLICIES, Control, Storm2Policy
from backpressure._tracker import OverflowQueue

#: the default fill levels (fractions of the queue's bound) that trigger a NAK
DEFAULT_LEVELS = (0.5, 0.75, 0.87, 1.0)


def cut_factor(level: float) -> float:
    """What a NAK of fill ``level`` leaves of the rate limit: the fuller the receiver, the
    deeper the cut (0.5 full → 0.8 of the limit, 0.75 → 0.65, 0.87 → 0.57, full → 0.5)."""
    return max(0.1, 1.0 - 0.6 * level) if level < 1 else 0.5


class NakPolicy(Storm2Policy):
    """One task's side of NAK flow control (``topology.backpressure.policy: "nak"``).

    Receiving: :meth:`on_queue_fill` returns ``Control("nak", level)`` when the fill
    reaches a higher level than the last NAK's, and again once per ``window_s`` while the
    fill stays at or above the first level; nothing below it.

    Sending (a spout): :meth:`on_control` applies a NAK: the first one in a window cuts the
    limit by :func:`cut_factor` of its level (from the spout's measured rate when it had no
    limit); a stronger one in the same window deepens the cut to its own level's; weaker
    ones are ignored. Each ``window_s`` without a NAK raises the limit by ``step`` times
    the number of quiet windows in a row (so it recovers faster the longer it is quiet);
    once the limit is above ``4 ×`` the measured rate it is lifted. :meth:`spout_delay`
    keeps a token bucket of one window's worth of tuples at the limit.

    Args:
        levels: ascending fill levels (0..1] that trigger a NAK.
        window_s: the NAK window and the step period (s).
        step: the relative rise per quiet window (0.05: +5%, +10%, ...).
        (others as :class:`Storm2Policy`)

    Raises:
        ValueError: empty or unsorted levels, a level outside (0, 1], a window <= 0.

    Threads: the receiving side runs on the check timer; on a spout, :meth:`on_control`
    runs on the control thread and :meth:`spout_delay` on the executor thread, each
    writing the limit: an update lost to that race costs one window, and the next NAK
    (one window later while the overload lasts) makes up for it.
    """

    name = "nak"
    throttles_spout = True
    watches_fill = True

    def __init__(self, task_id: int, queue: OverflowQueue, worker: int = 0,
                 credits: int = 2, resend_size: int = 1000,
                 levels: tuple[float, ...] = DEFAULT_LEVELS, window_s: float = 0.05,
                 step: float = 0.05) -> None:
        levels = tuple(levels)
        if not levels or list(levels) != sorted(levels) or not 0 < levels[0] <= levels[-1] <= 1:
            raise ValueError(f"NAK levels must be ascending within (0, 1], got {levels}")
        if window_s <= 0:
            raise ValueError(f"the NAK window must be > 0 s, got {window_s}")
        super().__init__(task_id, queue, worker, credits, resend_size)
        self.levels, self.window_s, self.step = levels, window_s, step
        # receiving side
        self._sent_level = 0.0  # the level of the last NAK sent (0: below the first)
        self._sent_at = -math.inf
        # sending side (a spout)
        #: tuples/s this spout may emit (inf: no limit)
        self.rate_limit = math.inf
        #: the strength (level) of the last NAK received, 0.0 if none
        self.last_nak = 0.0
        self._window_end = -math.inf  # the current NAK window's end
        self._applied = 0.0  # the level whose cut applies in the current window
        self._base = math.inf  # the limit before the current window's cut
        self._quiet = 0  # quiet windows in a row
        self._next_step = math.inf
        self._tokens = 0.0
        self._last_t: float | None = None
        self._last_emitted = 0
        self._rate = 0.0  # measured emit rate (EMA over windows)
        self._rate_t: float | None = None
        self._rate_n = 0

    # -- receiving ----------------------------------------------------------------------
    def on_queue_fill(self, fill: float, now: float) -> Control | None:
        level = 0.0
        for x in self.levels:
            if fill >= x:
                level = x
        if not level:
            self._sent_level = 0.0
            return None
        if level <= self._sent_level and now - self._sent_at < self.window_s:
            return None
        self._sent_level, self._sent_at = level, now
        self.control_sent += 1
        return Control("nak", level)

    # -- sending ------------------------------------------------------------------------
    def on_control(self, kind: str, value: Any, now: float) -> None:
        if kind != "nak":
            return
        level = float(value)
        self.control_received += 1
        self.last_nak = level
        self._quiet = 0
        self._next_step = now + self.window_s
        if now >= self._window_end:  # the first NAK of a new window
            self._window_end = now + self.window_s
            self._base = self.rate_limit if self.rate_limit < math.inf else max(
                self._rate, 1.0)
            self._applied = level
        elif level > self._applied:  # a stronger NAK within the window
            self._applied = level
        else:
            return
        self.rate_limit = max(1.0, self._base * cut_factor(self._applied))

    def _measure(self, now: float, emitted: int) -> None:
        if self._rate_t is None:
            self._rate_t, self._rate_n = now, emitted
            return
        dt = now - self._rate_t
        if dt >= self.window_s:
            r = (emitted - self._rate_n) / dt
            self._rate = r if not self._rate else 0.7 * self._rate + 0.3 * r
            self._rate_t, self._rate_n = now, emitted

    def spout_delay(self, now: float, emitted: int = 0) -> float:
        self._measure(now, emitted)
        if self.rate_limit == math.inf:
            self._last_t, self._last_emitted = now, emitted
            return 0.0
        while now >= self._next_step:  # quiet windows: raise stepwise
            self._quiet += 1
            self.rate_limit *= 1.0 + self.step * self._quiet
            self._next_step += self.window_s
            if self.rate_limit > 4 * max(self._rate, 1.0):
                self.rate_limit, self._quiet, self._next_step = math.inf, 0, math.inf
                self._last_t, self._last_emitted = now, emitted
                return 0.0
        limit = self.rate_limit
        if self._last_t is None:
            self._last_t, self._last_emitted = now, emitted
        burst = max(1.0, limit * self.window_s)
        self._tokens = min(burst, self._tokens + (now - self._last_t) * limit)
        self._tokens -= emitted - self._last_emitted
        self._last_t, self._last_emitted = now, emitted
        return 0.0 if self._tokens >= 0 else -self._tokens / limit

    def state(self) -> dict[str, Any]:
        return {"rate_limit": None if self.rate_limit == math.inf else round(self.rate_limit, 1),
                "last_nak": self.last_nak, "measured_rate": round(self._rate, 1)}


POLICIES[NakPolicy.name] = NakPolicy
