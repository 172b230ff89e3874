"""Placing a topology on Ray: one placement group per topology, one bundle (one node) per worker."""

from __future__ import annotations

import logging
import uuid

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors import ExecutorActor, TransferActor, executor_name, transfer_name
from actors._store import store_topology
from cluster._handle import TopologyHandle, placement_group_name
from topology import StormTopology, TopologyError, make_config

logger = logging.getLogger("storm_on_ray.cluster")


#: ``topology.worker.placement`` → the placement group's strategy (bundle = worker)
_STRATEGIES = {"pack": "PACK", "spread": "SPREAD"}


def assign_tasks(topology: StormTopology, workers: int) -> dict[int, int]:
    """Task id → worker index, round robin over tasks in id order (deterministic): task
    ids follow Storm's sorted component order, so each component spreads over the workers
    as Storm's default scheduler spreads executors."""
    return {t: i % workers for i, t in enumerate(sorted(
        t for ts in topology.component_tasks.values() for t in ts))}


def submit(name: str, conf: dict | None, topology: StormTopology,
           ready_timeout: float = 120, detached: bool = False) -> TopologyHandle:
    """Create the workers and executors of ``topology`` and start them; returns at once.

    The topology gets one placement group with one bundle per worker; a bundle is on one
    node and holds the worker's executors and, when ``topology.workers`` > 1, its
    :class:`TransferActor`. ``topology.worker.placement`` is the group's strategy: ``pack``
    (Ray's PACK: as few nodes as possible) or ``spread`` (Ray's SPREAD: workers on
    different nodes where there are enough).

    ``detached=True`` makes a topology that outlives this driver, as a Storm topology
    outlives ``storm jar``: its actors and placement groups are Ray-detached, and the
    topology itself is kept in the GCS (``actors/_store.py``) so a restarted executor can
    read it after the driver has gone. It runs until killed (``handle.kill()``, or
    ``storm-on-ray kill NAME`` from anywhere). Spouts must not depend on objects the driver
    owns: a ``DataFrameSpout``'s blocks die with the driver.

    Raises:
        TopologyError: not a topology, or a bad name.
        ConfigError: invalid config.
        TimeoutError: Ray could not place the workers within ``ready_timeout`` s.
    """
    if not isinstance(topology, StormTopology):
        raise TopologyError(f"submit_topology expects a StormTopology (from "
                            f"create_topology()), got {type(topology).__name__}")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"topology name must be a non-empty string, got {name!r}")
    conf = make_config(conf)
    workers = conf["topology.workers"]
    ackers = conf["topology.acker.executors"]
    if ackers is None:  # Storm: one acker per worker
        ackers = workers
    if ackers > 0:
        topology = topology.with_ackers(ackers, conf["topology.acker.in.spouts"])
    elif topology.back_edges:
        logger.warning(
            "topology %r has cycles (back edges %s) and no ackers: tuples beyond a back "
            "edge's cap are dropped (counted in stats) and nothing replays them; set "
            "topology.acker.executors > 0 and emit with msg ids for at-least-once", name,
            sorted(topology.back_edges))
    task_worker = assign_tasks(topology, workers)
    tasks_of = {w: sorted(t for t, x in task_worker.items() if x == w) for w in range(workers)}
    workers = max(1, sum(1 for ts in tasks_of.values() if ts))  # no empty workers
    tasks_of = {w: ts for w, ts in tasks_of.items() if ts}
    cpu = conf["topology.component.cpu.pcore.percent"] / 100.0
    with_transfer = workers > 1
    # actor and placement-group names let a restarted actor find its peers and another
    # driver find the topology (unique per submit, so a name can be reused once killed)
    prefix = f"storm-{name}-{uuid.uuid4().hex[:8]}"
    lifetime = "detached" if detached else None
    # one bundle per worker: a bundle is always on one node (a Storm worker is one
    # process); Ray's PACK or SPREAD strategy chooses the nodes, knowing their load
    bundle_of = {w: i for i, w in enumerate(tasks_of)}
    pg = placement_group(
        [{"CPU": round(cpu * (len(ts) + with_transfer), 4)} for ts in tasks_of.values()],
        strategy=_STRATEGIES[conf["topology.worker.placement"]],
        name=placement_group_name(prefix), lifetime=lifetime)
    try:
        ray.get(pg.ready(), timeout=ready_timeout)
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(pg)
        raise TimeoutError(
            f"topology {name!r}: Ray could not reserve {cpu:.3f} CPU per executor for "
            f"{topology.num_tasks} executors in {workers} worker(s) within {ready_timeout} s; "
            f"lower topology.component.cpu.pcore.percent or add CPUs") from None
    # a restarted executor reads its topology again: from an object this driver owns, or,
    # when the topology must outlive the driver, from the GCS
    topo_ref = store_topology(prefix, topology) if detached else ray.put(topology)
    restarts = conf["topology.executor.max.restarts"]
    actors, transfers = {}, {}
    for w, ts in tasks_of.items():
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg,
                                                    placement_group_bundle_index=bundle_of[w])
        for task in ts:
            actors[task] = ExecutorActor.options(
                num_cpus=cpu, scheduling_strategy=strategy, max_restarts=restarts,
                lifetime=lifetime, name=executor_name(prefix, task),
            ).remote(name, topo_ref, conf, task, task_worker, prefix)
        if with_transfer:
            dests = {t: topology.downstream_tasks(topology.task_component(t)) for t in ts}
            transfers[w] = TransferActor.options(
                num_cpus=cpu, scheduling_strategy=strategy, max_restarts=restarts,
                lifetime=lifetime, name=transfer_name(prefix, w),
            ).remote(name, w, conf, task_worker, prefix, dests)
    handle = TopologyHandle(name, topology, conf, actors, [pg], task_worker, transfers,
                            prefix=prefix, detached=detached)
    handle._topology_ref = topo_ref  # a restarted executor's __init__ reads it again
    try:
        if transfers:
            ray.get([ta.connect.remote(
                {t: actors[t] for t in tasks_of[w]},
                {t: topology.downstream_tasks(topology.task_component(t)) for t in tasks_of[w]},
                {v: h for v, h in transfers.items() if v != w})
                for w, ta in transfers.items()])
        ray.get([a.connect.remote(actors, transfers) for a in actors.values()])
        ray.get([a.start.remote() for a in actors.values()])
    except Exception:
        handle.kill()
        raise
    logger.info("topology %r started: %d tasks in %d worker(s)", name, topology.num_tasks,
                workers)
    return handle
