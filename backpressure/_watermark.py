"""STORM-886's automatic backpressure: high and low watermarks, one topology-wide throttle.

Storm 1.x (STORM-886, "Automatic Back Pressure"): each executor watches its receive queue;
when it passes the high watermark (``backpressure.disruptor.high.watermark``, 0.9 of the
queue) the task raises its flag, and lowers it only once the queue is back below the low
watermark (``…low.watermark``, 0.4). Storm kept the flags in ZooKeeper, whose watches pushed
a change to every worker; every spout stops emitting while any task in the topology is
flagged, whether or not it feeds that task (a bang-bang controller; Storm 1.x later switched
it off by default after erratic on/off behaviour and stalls, STORM-1949/1956). Here the flag
goes to a coordinator actor that pushes the throttle to every spout only when the
topology-wide state changes (actors/_coordinator.py), so an idle topology sends nothing.

:class:`WatermarkPolicy` is pure: the receiving side's hysteresis and the spout's
throttle flag. Under it, as under every policy here, Storm 2.0's per-task status still
holds the senders to a task whose overflow is in use (:class:`Storm2Policy`): that is the
runtime's bound on memory (the overflow holds at most the halt-lag's arrivals), and the
policy decides what happens before it is reached.
"""

from __future__ import annotations

from typing import Any

from backpressure._policy import POLICIES, Control, Storm2Policy
from backpressure._tracker import OverflowQueue

#: how long a throttled spout waits before it asks again (s); a lifted throttle wakes it
THROTTLED_WAIT_S = 0.01


class WatermarkPolicy(Storm2Policy):
    """One task's side of STORM-886 (``topology.backpressure.policy: "watermark"``).

    Args:
        high: the fill (0..1 of the receive queue's bound) at or above which the task
            raises its flag (``backpressure.disruptor.high.watermark``).
        low: the fill at or below which a raised flag is lowered (``…low.watermark``).
        (others as :class:`Storm2Policy`)

    Raises:
        ValueError: not ``0 < low < high <= 1``.
    """

    name = "watermark"
    throttles_spout = True
    watches_fill = True

    def __init__(self, task_id: int, queue: OverflowQueue, worker: int = 0,
                 credits: int = 2, resend_size: int = 1000, high: float = 0.9,
                 low: float = 0.4) -> None:
        if not 0 < low < high <= 1:
            raise ValueError(f"watermarks must satisfy 0 < low < high <= 1, got low={low}, "
                             f"high={high}")
        super().__init__(task_id, queue, worker, credits, resend_size)
        self.high, self.low = high, low
        #: this task is above its high watermark (not yet back below the low one)
        self.flagged = False
        #: this spout is throttled: some task of the topology is flagged
        self.throttled = False
        self.flag_changes = 0
        self._throttle_seq = 0

    def on_queue_fill(self, fill: float, now: float) -> Control | None:
        if not self.flagged and fill >= self.high:
            self.flagged = True
        elif self.flagged and fill <= self.low:
            self.flagged = False
        else:
            return None
        self.flag_changes += 1
        self.control_sent += 1
        return Control("flag", self.flagged)

    def on_control(self, kind: str, value: Any, now: float) -> None:
        """``("throttle", (seq, on))`` from the coordinator: pushes may arrive out of
        order (a spout's control calls run on a thread), so one older than the last
        applied is ignored."""
        if kind != "throttle":
            return
        self.control_received += 1
        seq, on = value
        if seq > self._throttle_seq:
            self._throttle_seq, self.throttled = seq, bool(on)

    def spout_delay(self, now: float, emitted: int = 0) -> float:
        return THROTTLED_WAIT_S if self.throttled else 0.0

    def state(self) -> dict[str, Any]:
        return {"flagged": self.flagged, "throttled": self.throttled,
                "flag_changes": self.flag_changes}


POLICIES[WatermarkPolicy.name] = WatermarkPolicy
