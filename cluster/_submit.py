"""Placing a topology on Ray: one placement group per topology, one bundle (one node) per worker.

``submit`` = :func:`cluster._plan.plan` (pure: validation, ackers, assignment, placement)
then :func:`launch` (the placement group and the actors, from the plan).
"""

from __future__ import annotations

import logging
import uuid

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors import (
    TASK,
    WORKER,
    ExecutorActor,
    ThrottleCoordinator,
    TransferActor,
    actor_name,
    coordinator_name,
    store_topology,
    submit_prefix,
)
from actors.state import checkpointed
from cluster._handle import TopologyHandle
from cluster._plan import TopologyPlan, assign_tasks, input_fields, plan
from cluster._registry import placement_group_name
from topology import StormTopology, TopologyError, TwoPhaseCommitSink

__all__ = ["assign_tasks", "launch", "plan", "submit"]

logger = logging.getLogger("storm_on_ray.cluster")


def submit(name: str, conf: dict | None, topology: StormTopology,
           ready_timeout: float = 120, detached: bool = False,
           restore_from: str | None = None,
           allow_non_restored_state: bool = False) -> TopologyHandle:
    """Create the workers and executors of ``topology`` and start them; returns at once.

    The topology gets one placement group with one bundle per worker; a bundle is on one
    node and holds the worker's executors and, when ``topology.workers`` > 1, its
    :class:`TransferActor`. ``topology.worker.placement`` is the group's strategy: ``pack``
    (Ray's PACK: as few nodes as possible) or ``spread`` (Ray's SPREAD: workers on
    different nodes where there are enough).

    ``detached=True`` makes a topology that outlives this driver, as a Storm topology
    outlives ``storm jar``: its actors and placement groups are Ray-detached. It runs until
    killed (``handle.kill()``, or ``storm-on-ray kill NAME`` from anywhere).

    Every topology is kept in the GCS key-value store (``actors/_store.py``) until it is
    killed, and its executors read it from there, also when Ray restarts one (Storm keeps
    it in Nimbus's blob store): a restart never depends on an object the driver owns. A
    spout's own inputs may: a ``DataFrameSpout``'s Arrow blocks are in the driver's object
    store and die with that driver, so a ``DataFrameSpout`` task restarted after its driver
    has gone cannot read them.

    Raises:
        TopologyError: not a topology, an invalid graph, a bad name, or a sink whose
            target cannot be used (``TwoPhaseCommitSink.open_target``).
        ConfigError: invalid config.
        TimeoutError: Ray could not place the workers within ``ready_timeout`` s.
        SavepointError (a ValueError): ``restore_from`` is not a savepoint this topology
            can start from (missing, incomplete, another format version, a component
            with state missing unless ``allow_non_restored_state``, another parallelism
            that cannot be rescaled (``rescale``), another key-group count, key fields or
            grouping: ``check_restore``), or the
            ``memory`` provider, which would ignore it.

    ``restore_from``: a savepoint's path (``handle.savepoint``): the topology starts from
    its state (state, spout positions, persistent windows, sinks' pending commits), and
    its checkpoint ids go on from the savepoint's; components new since start empty. A
    component at another parallelism is rescaled by key groups, splits or transactions,
    or refused (``actors/state/_rescale.py``; docs/state.md, "Rescaling").
    """
    p = plan(topology, conf)
    savepoint = None
    if restore_from is not None:
        from actors.state import checkpointed
        from actors.state._rescale import check_splits, rescale
        from actors.state.savepoints import SavepointError, check_restore, read_savepoint

        if p.conf.get("topology.state.provider") == "memory":
            raise SavepointError(f"topology {name!r}: restore_from {restore_from!r} with "
                                 f"topology.state.provider \"memory\": that provider "
                                 f"starts empty and would ignore the savepoint; use "
                                 f"\"local\" or \"redis\"")
        savepoint = read_savepoint(restore_from)
        if not checkpointed(p.topology, dict(p.conf)):
            raise TopologyError(f"topology {name!r} keeps no state (no stateful bolt, "
                                f"persistent window or two-phase-commit sink), so savepoint "
                                f"{savepoint.path} has nothing to restore into")
        savepoint = rescale(savepoint, p.topology, dict(p.conf))  # (at other task counts)
        check_restore(savepoint, p.topology, allow_non_restored_state, dict(p.conf))
        check_splits(savepoint, p.topology, dict(p.conf))
    open_targets(p)  # sinks' targets, before anything starts
    return launch(p, name, ready_timeout, detached, savepoint)


def open_targets(p: TopologyPlan) -> None:
    """Call each two-phase-commit sink's ``open_target`` with the fields its input
    streams declare (:func:`~cluster._plan.input_fields`), on this driver, before anything
    starts.

    Raises:
        TopologyError: a sink's target cannot be used, the message naming the sink.
    """
    for cid, spec in sorted(p.topology.components.items()):
        if isinstance(spec.obj, TwoPhaseCommitSink):
            try:
                spec.obj.open_target(input_fields(p.topology, cid))
            except TopologyError as e:
                raise TopologyError(f"sink {cid!r}: {e}") from None


def launch(p: TopologyPlan, name: str, ready_timeout: float = 120,
           detached: bool = False, savepoint=None) -> TopologyHandle:
    """Carry out plan ``p`` on Ray under ``name``: reserve the placement group (one bundle
    per :class:`~cluster._plan.WorkerPlan`), create each task's executor actor and, with
    several workers, each worker's transfer actor in its bundle, wire them and start them.
    Blocks until Ray has placed the group (``ready_timeout`` s at most) and every actor is
    connected; see :func:`submit` for ``detached``.

    Raises:
        TopologyError: a bad name.
        TimeoutError: Ray could not place the workers within ``ready_timeout`` s (the
            placement group is removed again).
    """
    if not isinstance(name, str) or not name:
        raise TopologyError(f"topology name must be a non-empty string, got {name!r}")
    for warning in p.warnings:
        logger.warning("topology %r: %s", name, warning)
    topology, conf, task_worker = p.topology, dict(p.conf), dict(p.task_worker)
    # actor and placement-group names let a restarted actor find its peers and another
    # driver find the topology (unique per submit, so a name can be reused once killed)
    prefix = submit_prefix(name, uuid.uuid4().hex[:8])
    lifetime = "detached" if detached else None
    # one bundle per worker: a bundle is always on one node (a Storm worker is one
    # process); Ray's PACK or SPREAD strategy chooses the nodes, knowing their load
    pg = placement_group([{"CPU": w.cpu} for w in p.workers], strategy=p.strategy,
                         name=placement_group_name(prefix), lifetime=lifetime)
    try:
        ray.get(pg.ready(), timeout=ready_timeout)
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(pg)
        raise TimeoutError(
            f"topology {name!r}: Ray could not reserve {p.executor_cpu:.3f} CPU per executor "
            f"for {topology.num_tasks} executors in {len(p.workers)} worker(s) within "
            f"{ready_timeout} s; lower topology.component.cpu.pcore.percent or add "
            f"CPUs") from None
    checkpoints = None
    if checkpointed(topology, conf):
        try:
            checkpoints = _start_checkpoints(p, name, prefix, conf, pg, lifetime, savepoint)
        except Exception:
            ray.util.remove_placement_group(pg)
            raise
    # a restarted executor reads its topology again: from the GCS, not from an object this
    # driver owns (Ray warns at submit about an actor with max_restarts whose constructor
    # arguments are in the object store, and a detached one could not restart at all)
    stored = store_topology(prefix, topology)
    options = dict(num_cpus=p.executor_cpu, max_restarts=conf["topology.executor.max.restarts"],
                   lifetime=lifetime)
    # each worker's tasks → their destinations, for its transfer actor (statuses go only
    # to the executors that send to the tasks they name)
    # (a task chained into another's actor sends through it: its destinations are the
    # actor's; the transfer actor never names it)
    hosts = p.chain_hosts
    dests = {w.index: {t: sorted({d for c in [t, *topology.chain_of(t)]
                                  for d in p.links[c].destinations})
                       for t in w.tasks if t not in hosts}
             for w in p.workers}
    actors, transfers = {}, {}
    for w in p.workers:
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg,
                                                    placement_group_bundle_index=w.index)
        for task in w.tasks:
            if task in hosts:
                continue
            actors[task] = ExecutorActor.options(
                scheduling_strategy=strategy, name=actor_name(prefix, TASK, task), **options,
            ).remote(name, stored, conf, task, task_worker, prefix)
        if p.with_transfer:
            transfers[w.index] = TransferActor.options(
                scheduling_strategy=strategy, name=actor_name(prefix, WORKER, w.index),
                **options,
            ).remote(name, w.index, conf, task_worker, prefix, dests[w.index])
    own = list(actors.values())
    actors.update({t: actors[h] for t, h in hosts.items()})
    coordinator = None
    if conf["topology.backpressure.policy"] == "watermark":
        # STORM-886's throttle (actors/_coordinator.py), in the first worker's bundle, so
        # removing the placement group removes it with the topology
        coordinator = ThrottleCoordinator.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=0),
            name=coordinator_name(prefix), lifetime=lifetime,
            max_restarts=conf["topology.executor.max.restarts"]).remote(name)
    handle = TopologyHandle(name, topology, conf, actors, [pg], task_worker, transfers,
                            prefix=prefix, detached=detached)
    handle.checkpoints = checkpoints
    try:
        if coordinator is not None:
            ray.get(coordinator.connect.remote(
                {t: actors[t] for t in topology.spout_tasks if t in actors}))
        if transfers:
            ray.get([transfers[w.index].connect.remote(
                {t: actors[t] for t in w.tasks if t not in hosts}, dests[w.index],
                {v: h for v, h in transfers.items() if v != w.index})
                for w in p.workers])
        ray.get([a.connect.remote(actors, transfers, coordinator) for a in own])
        ray.get([a.start.remote() for a in own])
        if checkpoints is not None:
            ray.get(checkpoints.start.remote())
        for _, spec in sorted(topology.components.items()):
            if spec.is_spout:  # driver-side sources (a Spark streaming query) start now
                spec.obj.on_submit(handle)
    except Exception:
        handle.kill()
        raise
    if checkpoints is not None:
        provider = conf["topology.state.provider"] or "local"
        logger.info("topology %r: checkpoints every %d ms, provider %s%s", name,
                    conf["topology.state.checkpoint.interval.ms"], provider,
                    f" under {conf['topology.state.checkpoint.dir']}"
                    if provider == "local" else "")
    logger.info("topology %r started: %d tasks in %d executor(s) in %d worker(s)", name,
                topology.num_tasks, len(own), len(p.workers))
    return handle


def _start_checkpoints(p: TopologyPlan, name: str, prefix: str, conf: dict, pg,
                       lifetime: str | None, savepoint=None):
    """Create the checkpoint coordinator (actors/state) of a stateful topology, in the
    first worker's bundle, before the executors (which find it by name at start). The
    provider is opened here first, so a state directory that cannot be used is refused at
    submit, with its path, and seeded with ``savepoint`` (a ``Savepoint``) if given.
    ``conf`` gets the checkpoint directory it resolved.

    Raises:
        StateDirError: the checkpoint directory is not writable or holds another
            topology's checkpoints.
        TopologyError: the ``local`` provider's directory is on a local filesystem that
            a node holding one of ``pg``'s bundles does not see (cluster/_state_dir.py).
    """
    from actors.state import checkpoint_coordinator_class, checkpoint_coordinator_name
    from actors.state.providers import default_checkpoint_dir, make_provider

    if conf["topology.state.checkpoint.dir"] is None:
        conf["topology.state.checkpoint.dir"] = default_checkpoint_dir()
    provider = make_provider(conf, name, prefix)
    provider.checkpoint_log()  # refuses a bad directory
    if conf.get("topology.state.provider") in (None, "local"):
        from cluster._state_dir import check_bundle_nodes, local_dir

        directory = local_dir(conf["topology.state.checkpoint.dir"])
        if directory is not None:  # (the path the provider writes, as it resolves it)
            check_bundle_nodes(directory, pg)
    topology = p.topology
    if savepoint is not None:  # the tasks and the coordinator start from its checkpoint
        from actors.state import keyed_state
        from actors.state._rescale import key_groups_for
        from actors.state.savepoints import seed_provider

        seed_provider(provider, savepoint, topology, lambda c, t: key_groups_for(
            savepoint, c, keyed_state(topology, c, t, conf)[0]))
    hosts = p.chain_hosts
    tasks = {t: hosts.get(t, t) for t in p.task_worker}
    return checkpoint_coordinator_class().options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=0),
        name=checkpoint_coordinator_name(prefix), lifetime=lifetime,
    ).remote(prefix, name, conf, tasks, topology.spout_tasks, topology.acker_tasks,
             [t for c, spec in topology.components.items()
              if isinstance(spec.obj, TwoPhaseCommitSink)
              for t in topology.component_tasks[c]])
