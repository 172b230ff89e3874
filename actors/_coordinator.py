"""The topology-wide throttle of STORM-886's watermark policy, as one small actor.

Storm 1.x kept each task's backpressure flag as a ZooKeeper node and the workers watched
them: a change reached every worker without polling (STORM-886, "Automatic Back Pressure").
Here each task tells the coordinator when its flag changes (``flag(task, on)``), and the
coordinator tells every spout task when the topology-wide state changes (some task flagged ↔
none), each push numbered so a spout ignores an older one that arrives late. While no flag
changes, nothing is sent (polling the GCS key-value store instead would send messages while
idle). See backpressure/_watermark.py for the policy.
"""

from __future__ import annotations

import logging

import ray

logger = logging.getLogger("storm_on_ray.coordinator")


def coordinator_name(prefix: str) -> str:
    """The Ray actor name of the throttle coordinator of the submit named ``prefix``."""
    return f"{prefix}-coordinator"


@ray.remote(num_cpus=0)
class ThrottleCoordinator:
    """Holds the set of flagged tasks and pushes ``("throttle", (seq, on))`` to every spout
    task's ``flow_control`` when it goes from empty to non-empty or back.

    Calls from one task arrive in order (a sequential actor), so a task's flag and unflag
    never cross. Never blocks: pushes are fire-and-forget actor calls.
    """

    def __init__(self, topology_name: str) -> None:
        self.topology_name = topology_name
        self._spouts: dict[int, ray.actor.ActorHandle] = {}
        self._flagged: set[int] = set()
        self._seq = 0
        #: pushes sent (one per spout task per change)
        self.pushes = 0
        #: flag changes received
        self.flags = 0

    def connect(self, spouts: dict) -> None:
        """The spout tasks' executor handles (task id → handle)."""
        self._spouts = dict(spouts)

    def flag(self, task: int, on: bool) -> None:
        """Task ``task`` is above its high watermark (``on``) or back below its low one."""
        self.flags += 1
        self._set(task, on)

    def rejoin(self, task: int) -> None:
        """Task ``task`` restarted (Ray restarted its actor): its queue, and so its flag,
        started empty, and a restarted spout task knows nothing of the throttle. The task's
        flag is cleared (pushing the release if it was the last), and a spout task is told
        the current state, so neither a dead flag nor a lost push throttles or frees the
        spouts for ever (Storm 1.x's ephemeral ZooKeeper nodes died with their worker)."""
        self._set(task, False)
        h = self._spouts.get(task)
        if h is not None:
            h.flow_control.remote("throttle", (self._seq, bool(self._flagged)))
            self.pushes += 1

    def _set(self, task: int, on: bool) -> None:
        was = bool(self._flagged)
        if on:
            self._flagged.add(task)
        else:
            self._flagged.discard(task)
        now = bool(self._flagged)
        if now == was:
            return
        self._seq += 1
        logger.info("topology %r: spouts %s (flagged tasks: %s)", self.topology_name,
                    "throttled" if now else "released", sorted(self._flagged))
        for h in self._spouts.values():
            h.flow_control.remote("throttle", (self._seq, now))
            self.pushes += 1

    def state(self) -> dict:
        """``flagged`` (task ids now), ``throttled`` (bool), ``pushes``, ``flags``."""
        return {"flagged": sorted(self._flagged), "throttled": bool(self._flagged),
                "pushes": self.pushes, "flags": self.flags}
