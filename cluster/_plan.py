"""The plan of a submit: what runs where, decided without Ray.

:func:`plan` does what Storm's Nimbus does before any worker starts: it validates the
topology (``StormCommon.validateStructure``) and the config, adds the acker executors
(``StormCommon.systemTopology``), assigns the tasks to workers (the default scheduler's
round robin) and sizes each worker's slot. It returns a :class:`TopologyPlan`, a frozen
record that ``cluster._submit.launch`` carries out on Ray and that tests read without Ray:
this module imports no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from actors import TaskLinks, task_links
from actors.state import checkpointed, is_stateful
from topology import (
    ACKER_ID,
    DEAD_LETTER_STREAM,
    BatchBolt,
    ConfigError,
    StatefulWindowedBolt,
    StormTopology,
    TopologyError,
    WindowedBolt,
    dead_letter_consumers,
    make_config,
)
from topology._keygroups import check_key_group_parallelism
from topology._two_phase import TwoPhaseCommitSink

#: ``topology.worker.placement`` → the Ray placement-group strategy (bundle = worker)
PLACEMENT_STRATEGIES = {"pack": "PACK", "spread": "SPREAD"}


@dataclass(frozen=True)
class WorkerPlan:
    """One worker (a Storm worker process): one bundle, on one node, of the topology's
    placement group.

    Attributes:
        index: the worker index, also its bundle's index in the placement group.
        tasks: its task ids, sorted (chained tasks too: they run in their host's actor).
        cpu: CPUs its bundle reserves: the executor share for each executor actor (a task
            that hosts a chain counts once), plus one for its transfer actor when the
            topology has several workers.
    """

    index: int
    tasks: tuple[int, ...]
    cpu: float


@dataclass(frozen=True)
class TopologyPlan:
    """Everything a submit decides before it starts an actor (:func:`plan`).

    Attributes:
        topology: the topology to run: the user's components plus, with acker executors,
            the system component ``__acker`` (Storm's system topology; user task ids
            unchanged, acker task ids after them) and, with ``topology.max.replays``, the
            spouts' dead-letter stream and the system bolt ``__dead_letters``.
        conf: the validated config (every key present).
        workers: one :class:`WorkerPlan` per worker, by index; never an empty worker, so
            there are ``min(topology.workers, tasks)`` of them.
        task_worker: task id → worker index, for every task.
        links: task id → its :class:`~actors._routing.TaskLinks` (the topology's edges
            plus the acking system streams, the back edges and the remote upstream).
        back_edges: the ``(source, bolt)`` subscriptions that close a cycle.
        strategy: the placement group's Ray strategy, ``"PACK"`` or ``"SPREAD"``.
        executor_cpu: CPUs each executor actor (and transfer actor) asks Ray for.
        warnings: problems that do not stop the submit, for the log.
    """

    topology: StormTopology
    conf: Mapping[str, Any]
    workers: tuple[WorkerPlan, ...]
    task_worker: Mapping[int, int]
    links: Mapping[int, TaskLinks]
    back_edges: frozenset[tuple[str, str]]
    strategy: str
    executor_cpu: float
    warnings: tuple[str, ...]

    @property
    def acker_tasks(self) -> tuple[int, ...]:
        """Task ids of the ackers: the ``__acker`` tasks, the spout tasks with
        ``topology.acker.in.spouts``, none with acking off."""
        return self.topology.acker_tasks

    @property
    def chain_hosts(self) -> Mapping[int, int]:
        """Operator chains: chained task id → the task whose executor actor runs it
        (``StormTopology.chain_hosts``); empty when nothing is chained."""
        return self.topology.chain_hosts()

    @property
    def with_transfer(self) -> bool:
        """True when workers exchange tuples, so each gets a transfer actor."""
        return len(self.workers) > 1


def input_fields(topology: StormTopology, component_id: str) -> tuple[str, ...] | None:
    """The field names of the tuples ``component_id`` gets: those its input streams
    declare, when they all declare the same; None when they differ."""
    spec = topology.components[component_id]
    declared = {tuple(topology.components[g.source].streams[g.stream]) for g in spec.inputs}
    return declared.pop() if len(declared) == 1 else None


def assign_tasks(topology: StormTopology, workers: int,
                 hosts: Mapping[int, int] | None = None) -> dict[int, int]:
    """Task id → worker index, round robin over tasks in id order (deterministic): task
    ids follow Storm's sorted component order, so each component spreads over the workers
    as Storm's default scheduler spreads executors. A chained task (``hosts``: task → the
    task whose executor runs it) takes its host's worker and no turn."""
    hosts = hosts or {}
    own = sorted(t for ts in topology.component_tasks.values() for t in ts if t not in hosts)
    out = {t: i % workers for i, t in enumerate(own)}
    out.update({t: out[h] for t, h in hosts.items()})
    return out


def chainable(topology: StormTopology, conf: dict) -> list[str]:
    """The bolts that join their source's chain (Flink's chaining rule, on Storm's
    groupings): ``topology.operator.chaining`` on for the topology, the bolt and its
    source; exactly one input, ``local_or_shuffle``, from a component of equal parallelism
    that is not the bolt itself; neither of them on a cycle's back edge (a chained send
    into a queue of its own actor could block the cycle); not a windowed bolt, a ``BatchBolt``
    or a shedding bolt (each needs its own pass over its own queue). Sorted."""
    if not conf["topology.operator.chaining"]:
        return []
    comps, back = topology.components, topology.back_edges

    def allows(cid: str) -> bool:
        return bool(comps[cid].conf.get("topology.operator.chaining", True))

    out = []
    for cid, spec in comps.items():
        if spec.is_spout or cid.startswith("__") or len(spec.inputs) != 1:
            continue
        g = spec.inputs[0]
        src = comps.get(g.source)
        if (g.kind != "local_or_shuffle" or src is None or g.source == cid
                or any(a in (cid, g.source) or b in (cid, g.source) for a, b in back)
                or src.parallelism != spec.parallelism
                or not allows(cid) or not allows(g.source)
                or isinstance(spec.obj, (WindowedBolt, BatchBolt))
                or {**conf, **spec.conf}.get("topology.backpressure.overload") == "shed"):
            continue
        out.append(cid)
    return sorted(out)


def _refuse_shedding_with_acking(topology: StormTopology, conf: dict) -> None:
    """Shedding is at-most-once by choice: with acking on, a shed tuple's tree would fail
    and replay (or, from a streaming source, be committed and lost for good)."""
    for cid, spec in topology.components.items():
        if spec.is_spout or cid == ACKER_ID:
            continue
        if {**conf, **spec.conf}["topology.backpressure.overload"] == "shed":
            raise ConfigError(
                f"component {cid!r}: topology.backpressure.overload 'shed' needs acking off "
                f"(topology.acker.executors 0): shedding is at-most-once, a shed tuple "
                f"cannot be replayed, and a streaming source would commit its offset, so it "
                f"would be lost for good; use 'block' for at-least-once")


def _refuse_unsound_state(topology: StormTopology, conf: dict) -> None:
    """A stateful topology (actors/state) is exactly-once only where a rollback can
    replay: refuse what cannot (docs/state.md, the guarantee matrix)."""
    if not checkpointed(topology, conf):
        return
    comps = topology.components
    stateful = sorted(c for c, spec in comps.items() if not spec.is_spout
                      and (is_stateful(spec.obj)
                           or isinstance(spec.obj, (WindowedBolt, TwoPhaseCommitSink))))
    for cid in stateful:
        obj = comps[cid].obj
        if isinstance(obj, StatefulWindowedBolt) and not obj.persistent:
            raise TopologyError(
                f"stateful windowed bolt {cid!r} has no with_persistence(): its state would "
                f"be exactly-once but its open windows would be lost when a task fails, so "
                f"the windows would be at most at-least-once; call with_persistence() to "
                f"checkpoint them with the state")
    if topology.back_edges:
        raise TopologyError(
            f"stateful bolts {stateful}: a topology with a cycle (back edges "
            f"{sorted(topology.back_edges)}) cannot checkpoint them: barriers cannot be "
            f"aligned around a cycle; remove the cycle or keep the state outside it")
    acking = bool(topology.acker_tasks)
    for cid in [None, *sorted(comps)]:  # the topology's conf, then a component's own
        c = conf if cid is None else {**conf, **comps[cid].conf}
        for key in ("topology.executor.overflow.limit", "topology.executor.overflow.limit.bytes"):
            if c[key]:
                where = "" if cid is None else f"component {cid!r}: "
                raise ConfigError(
                    f"{where}{key} ({c[key]}) drops tuples beyond the limit in a "
                    f"topology that checkpoints (stateful bolts {stateful}): the barrier "
                    f"behind a dropped tuple still passes, so the checkpoint commits without "
                    f"it{' and acks it to its spout' if acking else ''}, and the state misses "
                    f"it for good; leave {key} at 0 (unbounded) here")
    for sid in sorted(c for c, spec in comps.items() if spec.is_spout):
        obj = comps[sid].obj
        if obj.commits_on_entry:
            raise TopologyError(
                f"spout {sid!r} commits its source on entry (commits_on_entry: its source "
                f"takes each tuple as done once emitted) in a topology that checkpoints "
                f"(stateful bolts {stateful}): neither a restored position nor a replay "
                f"can bring back what it emitted after the last checkpoint, so a failure "
                f"would lose it; for StreamingDataFrameSpout pass msg_ids=True")
        if acking and not obj.emits_msg_ids and not is_stateful(obj):
            raise TopologyError(
                f"spout {sid!r} emits without msg ids (emits_msg_ids False) in a "
                f"topology that checkpoints with acking on (stateful bolts {stateful}): "
                f"a rollback cannot replay tuples that are in no tree, so every one "
                f"after the last checkpoint would be lost; emit with msg ids, or make it "
                f"a StatefulSpout that keeps its position")
    timeout = conf["topology.message.timeout.secs"]
    interval = conf["topology.state.checkpoint.interval.ms"]
    if acking and timeout and interval >= timeout * 1000:
        raise ConfigError(
            f"topology.state.checkpoint.interval.ms ({interval}) must be below "
            f"topology.message.timeout.secs ({timeout:g} s) with acking on: tuples are acked "
            f"when the checkpoint after them commits, so they would time out first")
    upstream = {c: set() for c in comps}  # component -> every component upstream of it
    for cid in comps:
        todo, seen = [cid], set()
        while todo:
            for g in comps[todo.pop()].inputs:
                if g.source not in seen:
                    seen.add(g.source)
                    todo.append(g.source)
        upstream[cid] = seen
    for cid in stateful:
        for up in sorted(upstream[cid] | {cid}):
            spec = comps[up]
            if (not spec.is_spout and up != ACKER_ID
                    and {**conf, **spec.conf}["topology.backpressure.overload"] == "shed"):
                raise ConfigError(
                    f"component {up!r} sheds load (topology.backpressure.overload 'shed') "
                    f"upstream of stateful bolt {cid!r}: what is shed depends on timing, so "
                    f"no exact state exists; use 'block'")
    for sid in sorted(c for c, spec in comps.items() if spec.is_spout):
        if not is_stateful(comps[sid].obj) and not acking:
            raise TopologyError(
                f"spout {sid!r} can neither rewind nor replay, so the stateful bolts "
                f"{stateful} cannot be exactly-once after a failure: make it a "
                f"StatefulSpout that keeps its position (IterableSpout and DataFrameSpout "
                f"do), or switch acking on (topology.acker.executors > 0) and replay on "
                f"fail(msg_id)")


def _window_acks_for_live_sources(topology: StormTopology, conf: dict,
                                  warnings: list[str]) -> None:
    """A spout whose source waits for acks (``acks_hold_source``: a Spark streaming spout
    with msg ids) starts its next micro-batch only once the current one is acked, and only
    the next micro-batch moves event time; a windowed bolt acking as tuples leave its
    windows would wait for it for ever. Unless ``topology.bolts.window.ack.on.entry`` is
    set, such a topology runs checkpoints (``actors.state.checkpointed``): its windows are
    persistent and ack on entry, and the source's acks come when the checkpoint holding the
    tuples commits. Set true, windowed bolts ack on entry without checkpoints (warned:
    at-least-once up to the windows); set false, they ack as tuples leave (warned: a
    window may never close)."""
    live = sorted(cid for cid, spec in topology.components.items()
                  if spec.is_spout and spec.obj.acks_hold_source)
    windowed = sorted(cid for cid, spec in topology.components.items()
                      if isinstance(spec.obj, WindowedBolt))
    key = "topology.bolts.window.ack.on.entry"
    if not live or not windowed or checkpointed(topology, conf):
        return
    for cid in windowed:
        on_entry = {**conf, **topology.components[cid].conf}.get(key)
        if on_entry is False:
            warnings.append(f"windowed bolt {cid!r} acks as tuples leave its windows ({key} "
                            f"false) while spouts {live} wait for acks before their next "
                            f"micro-batch: an event-time window may then never close")
        elif on_entry:
            warnings.append(f"windowed bolt {cid!r} acks tuples as they enter its windows "
                            f"({key} true) without checkpoints: spouts {live} let their "
                            f"source commit rows whose open windows a failed task loses "
                            f"(at-least-once up to the windows); leave {key} unset for "
                            f"persistent windows")


def plan(topology: StormTopology, conf: dict | None) -> TopologyPlan:
    """Validate ``topology`` and ``conf`` and decide its tasks, workers and placement.

    Acking: ``topology.acker.executors`` acker tasks (None: one per worker, as Storm),
    which take the task ids after every user task, so round robin puts consecutive ackers
    on different workers; 0 switches acking off; with ``topology.acker.in.spouts`` the
    spout tasks are the ackers instead. Workers: the tasks round robin in id order over
    ``topology.workers`` workers (:func:`assign_tasks`), never more workers than tasks.
    Dead letters: with ``topology.max.replays`` set (for the topology or for a spout) and
    acking on, every spout declares the dead-letter stream, and a ``DeadLetterSink``
    (system bolt ``__dead_letters``, one task, its id after the ackers') takes it from
    every spout no user bolt takes it from.

    Args:
        topology: from ``TopologyBuilder.create_topology()``.
        conf: the topology config (Storm's keys); None for the defaults.

    Returns:
        The :class:`TopologyPlan`; nothing is started.

    Raises:
        TopologyError: not a ``StormTopology``, or its graph is invalid (the message names
            the component, stream and field).
        ConfigError: an invalid config, or a component's config (``add_configuration``)
            invalid once merged over it (the message names the component).
        TopologyError: a windowed bolt whose window cannot be held within the message
            timeout or ``topology.max.spout.pending`` (``WindowSpec.check_against``).
        ConfigError: a bolt with ``topology.backpressure.overload`` "shed" while acking is
            on (naming the bolt and why).
    """
    if not isinstance(topology, StormTopology):
        raise TopologyError(f"submit_topology expects a StormTopology (from "
                            f"create_topology()), got {type(topology).__name__}")
    topology.validate()
    conf = make_config(conf)
    for cid, spec in topology.components.items():
        if spec.conf:  # merged as each executor merges it (actors/_executor.py)
            try:
                make_config({**conf, **spec.conf})
            except ConfigError as e:
                raise ConfigError(f"component {cid!r}: {e}") from None
        if isinstance(spec.obj, WindowedBolt) and not checkpointed(topology, conf):
            # Storm's submit checks of a window (persistent windows ack on entry)
            spec.obj.window_spec().check_against(cid, {**conf, **spec.conf})
    check_key_group_parallelism(topology, conf)  # no more tasks than key groups
    requested = conf["topology.workers"]
    ackers = conf["topology.acker.executors"]
    if ackers is None:  # Storm: one acker per worker
        ackers = requested
    capped = conf["topology.max.replays"] is not None or any(
        spec.is_spout and spec.conf.get("topology.max.replays") is not None
        for spec in topology.components.values())
    replays = capped and ackers > 0
    taken = sorted(dead_letter_consumers(topology.components))
    topology = topology.with_ackers(ackers, conf["topology.acker.in.spouts"],
                                    dead_letters=replays)
    if topology.acker_tasks:
        _refuse_shedding_with_acking(topology, conf)
    _refuse_unsound_state(topology, conf)
    warnings = []
    if capped and not replays:
        warnings.append("topology.max.replays is set but acking is off "
                        "(topology.acker.executors 0): nothing fails, so nothing replays and "
                        "no dead letter is made")
    elif taken and not replays:
        warnings.append(f"bolts subscribe to stream {DEAD_LETTER_STREAM!r} of {taken}, but "
                        f"no dead letter is made without topology.max.replays")
    if not topology.acker_tasks and topology.back_edges:
        warnings.append(
            f"cycles (back edges {sorted(topology.back_edges)}) and no ackers: tuples beyond a "
            f"back edge's cap are dropped (counted in stats) and nothing replays them; set "
            f"topology.acker.executors > 0 and emit with msg ids for at-least-once")
    if topology.acker_tasks:
        _window_acks_for_live_sources(topology, conf, warnings)
    chained = chainable(topology, conf)
    if chained:
        topology = topology.with_chains(chained)
    hosts = topology.chain_hosts()
    actors = topology.num_tasks - len(hosts)
    task_worker = assign_tasks(topology, min(requested, actors), hosts)
    n = max(task_worker.values()) + 1
    transfer = n > 1
    cpu = conf["topology.component.cpu.pcore.percent"] / 100.0
    workers = []
    for w in range(n):
        tasks = tuple(sorted(t for t, x in task_worker.items() if x == w))
        own = sum(1 for t in tasks if t not in hosts)
        workers.append(WorkerPlan(w, tasks, round(cpu * (own + transfer), 4)))
    return TopologyPlan(
        topology=topology, conf=MappingProxyType(conf), workers=tuple(workers),
        task_worker=MappingProxyType(task_worker),
        links=MappingProxyType({t: task_links(topology, t, task_worker) for t in task_worker}),
        back_edges=topology.back_edges,
        strategy=PLACEMENT_STRATEGIES[conf["topology.worker.placement"]],
        executor_cpu=cpu, warnings=tuple(warnings))
