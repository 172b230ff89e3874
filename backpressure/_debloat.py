"""Flink's buffer debloating (FLIP-183): in-flight data sized to a time, not a count.

A receiving task measures its throughput while not idle (tuples per second of busy or
backpressured time: what it drains when it has input, not what it happens to get; Flink's
throughput measurement pauses only while the task waits for input) and bounds what may
wait for it to that throughput times a target time
(``topology.backpressure.debloat.target.ms``, Flink's default 1 s), so under a slow
consumer the queued data, and the latency of going through it, shrink with the consumer
instead of staying at a fixed count. Smoothed as Flink smooths it: a moving average of the
throughput, a change applied only past a relative threshold, and a floor so one producer
batch always fits (Flink's FLINK-33077 is what happens otherwise: a buffer that can never
take the record). The bound applies to the receive queue's admission (local senders wait,
remote arrivals overflow and report the task backlogged as under
:class:`~backpressure.Storm2Policy`, whose per-task statuses this policy keeps); it never
exceeds the configured ``topology.executor.receive.buffer.size``.
"""

from __future__ import annotations

from typing import Any

from backpressure._policy import POLICIES, Storm2Policy
from backpressure._tracker import OverflowQueue


class DebloatPolicy(Storm2Policy):
    """Storm 2.0's per-task statuses plus a time-targeted receive-queue bound
    (``topology.backpressure.policy: "debloat"``).

    Args:
        target_s: the time the queued tuples may take to drain (s, > 0).
        floor: the smallest bound (tuples): one producer batch.
        ceiling: the largest (the configured receive buffer size).
        samples: the moving average's span in metrics intervals (Flink averages 20 of
            its 200 ms samples; an interval here is 1 s by default, so 5 span about the
            same time).
        threshold: the relative change below which the bound stays (Flink's
            ``buffer-debloat.threshold-percentages``).
        (others as :class:`Storm2Policy`)

    Raises:
        ValueError: a target <= 0 or floor > ceiling.
    """

    name = "debloat"
    watches_fill = False

    def __init__(self, task_id: int, queue: OverflowQueue, worker: int = 0,
                 credits: int = 2, resend_size: int = 1000, target_s: float = 1.0,
                 floor: int = 1, ceiling: int = 32768, samples: int = 5,
                 threshold: float = 0.1) -> None:
        if target_s <= 0 or floor > ceiling:
            raise ValueError(f"debloat needs target > 0 and floor <= ceiling, got "
                             f"{target_s}, {floor}, {ceiling}")
        super().__init__(task_id, queue, worker, credits, resend_size)
        self.target_s, self.floor, self.ceiling = target_s, max(1, floor), ceiling
        self._alpha = 2.0 / (samples + 1)
        self.threshold = threshold
        #: tuples per second not idle (moving average; None before the first such interval)
        self.throughput: float | None = None
        #: the admission bound now (tuples)
        self.bound = ceiling

    def on_interval(self, executed_per_s: float, busy_fraction: float, capacity: int,
                    now: float) -> int | None:
        if busy_fraction <= 0.01 or executed_per_s <= 0:
            return None  # idle: nothing to learn the throughput from
        t = executed_per_s / busy_fraction
        self.throughput = t if self.throughput is None else (
            self._alpha * t + (1 - self._alpha) * self.throughput)
        want = int(min(self.ceiling, max(self.floor, self.throughput * self.target_s)))
        if abs(want - capacity) < self.threshold * capacity:
            return None
        self.bound = want
        return want

    def state(self) -> dict[str, Any]:
        return {"inflight_bound": self.bound,
                "throughput_per_busy_s": None if self.throughput is None
                else round(self.throughput, 1),
                "drain_time_s": None if not self.throughput
                else round(self.bound / self.throughput, 3)}


POLICIES[DebloatPolicy.name] = DebloatPolicy
