"""Placing a topology on Ray: a worker is a STRICT_PACK placement group of executors."""

from __future__ import annotations

import logging

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors import ExecutorActor
from cluster._handle import TopologyHandle
from topology import StormTopology, TopologyError, make_config

logger = logging.getLogger("storm_on_ray.cluster")


def assign_tasks(topology: StormTopology, workers: int) -> dict[int, int]:
    """Task id → worker index, round robin over tasks in id order (deterministic)."""
    return {t: i % workers for i, t in enumerate(sorted(
        t for ts in topology.component_tasks.values() for t in ts))}


def submit(name: str, conf: dict | None, topology: StormTopology,
           ready_timeout: float = 120) -> TopologyHandle:
    """Create the executors of ``topology`` and start them; returns a handle at once.

    Raises:
        TopologyError: not a topology, a bad name, or more than one worker requested
            (multi-worker transfer arrives with the transfer-actor issue).
        ConfigError: invalid config.
        TimeoutError: Ray could not place the worker within ``ready_timeout`` s.
    """
    if not isinstance(topology, StormTopology):
        raise TopologyError(f"submit_topology expects a StormTopology (from "
                            f"create_topology()), got {type(topology).__name__}")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"topology name must be a non-empty string, got {name!r}")
    conf = make_config(conf)
    workers = conf["topology.workers"]
    if workers != 1:
        raise TopologyError(
            f"topology {name!r}: topology.workers={workers} is not supported yet; workers as "
            f"placement groups with transfer actors are the next milestone. Use 1.")
    task_worker = assign_tasks(topology, workers)
    cpu = conf["topology.component.cpu.pcore.percent"] / 100.0
    n = topology.num_tasks
    pg = placement_group([{"CPU": round(cpu * n, 4)}], strategy="STRICT_PACK",
                         name=f"storm-{name}-w0")
    try:
        ray.get(pg.ready(), timeout=ready_timeout)
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(pg)
        raise TimeoutError(
            f"topology {name!r}: Ray could not reserve {cpu * n:.2f} CPU for {n} executors "
            f"within {ready_timeout} s; lower topology.component.cpu.pcore.percent or add "
            f"CPUs") from None
    topo_ref = ray.put(topology)
    actors = {}
    for task in sorted(task_worker):
        actors[task] = ExecutorActor.options(
            num_cpus=cpu, name=None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=0),
        ).remote(name, topo_ref, conf, task, task_worker)
    handle = TopologyHandle(name, topology, conf, actors, [pg], task_worker)
    try:
        ray.get([a.connect.remote(actors) for a in actors.values()])
        ray.get([a.start.remote() for a in actors.values()])
    except Exception:
        handle.kill()
        raise
    logger.info("topology %r started: %d tasks in %d worker(s)", name, n, workers)
    return handle
