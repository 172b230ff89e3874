"""Where a task's tuples go: groupings turned into routers, each task's links (the user's
edges plus the acking system streams), and the Ray actor name each task answers to.

Storm's ``GrouperFactory`` groupings. Fields grouping hashes with a process-independent
hash (CRC-32 of text, the integer itself for ints) because Python's ``hash(str)`` differs
between processes, and every emitter task must send a key to the same consumer task.

No Ray here: the submit's plan (``cluster/_plan.py``) reads the links without Ray.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import msgpack

from topology import ACKER_ID, DEAD_LETTER_STREAM, EmitError, Fields, StormTopology


def stable_hash(value: object) -> int:
    """A hash equal in every process for equal values of msgpack-able types."""
    if isinstance(value, str):
        return zlib.crc32(value.encode())
    if isinstance(value, int):
        return value & 0xFFFFFFFFFFFF
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value) & 0xFFFFFFFFFFFF
    return zlib.crc32(msgpack.packb(value, default=str, use_bin_type=True))


@dataclass
class _Sub:
    kind: str
    tasks: tuple[int, ...]
    idxs: tuple[int, ...] = ()
    counter: int = 0


class StreamRouter:
    """Routes one (component, stream)'s tuples to the tasks of its subscribers.

    Attributes:
        index: the stream's index in the topology's stream table (the wire id).
        arity: the number of declared fields (checked at every emit).
        direct_tasks: tasks that may be named by ``emit_direct`` on this stream.
    """

    __slots__ = ("component", "stream", "index", "arity", "_subs", "direct_tasks", "_single",
                 "fixed")

    def __init__(self, component: str, stream: str, index: int, fields: Fields,
                 subs: list[_Sub], direct_tasks: frozenset[int]) -> None:
        self.component = component
        self.stream = stream
        self.index = index
        self.arity = len(fields)
        self._subs = subs
        self.direct_tasks = direct_tasks
        self._single = subs[0] if len(subs) == 1 else None
        #: the targets when they cannot depend on the values (every subscription reaches
        #: one task, or all its tasks), else None: the emit path then skips hashing and
        #: counting. A fields grouping into a one-task bolt is the common case.
        self.fixed: tuple[int, ...] | None = None
        if all(s.kind in ("all", "global") or len(s.tasks) == 1 for s in subs):
            self.fixed = tuple(t for s in subs for t in s.tasks)

    def route(self, values) -> tuple[int, ...]:
        """Target task ids for ``values`` (possibly empty; shared, hence a tuple). Callers
        on the emit path try ``fixed`` first."""
        sub = self._single
        if sub is not None:
            return self._one(sub, values)
        out: list[int] = []
        for s in self._subs:
            out.extend(self._one(s, values))
        return tuple(out)

    @staticmethod
    def _one(s: _Sub, values) -> tuple[int, ...]:
        kind = s.kind
        if kind == "shuffle":
            s.counter += 1
            return (s.tasks[s.counter % len(s.tasks)],)
        if kind == "fields":
            if len(s.idxs) == 1:
                h = stable_hash(values[s.idxs[0]])
            else:
                h = 0
                for i in s.idxs:
                    h = (h * 31 + stable_hash(values[i])) & 0xFFFFFFFFFFFF
            return (s.tasks[h % len(s.tasks)],)
        return s.tasks  # all, global (one task)

    def check_direct(self, task: int) -> None:
        if task not in self.direct_tasks:
            raise EmitError(f"component {self.component!r}: emit_direct to task {task} on "
                            f"stream {self.stream!r}, which has no direct subscriber task "
                            f"{task}; direct subscriber tasks: {sorted(self.direct_tasks)}")


class CountingRouter(StreamRouter):
    """A router that counts the tuples it routes (:attr:`routed`): the dead-letter stream's,
    so ``stats()`` counts dead letters without a check on any other stream's emits (never
    ``fixed``: every emit goes through :meth:`route`)."""

    __slots__ = ("routed",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fixed = None
        self.routed = 0

    def route(self, values) -> tuple[int, ...]:
        self.routed += 1
        return super().route(values)


def stream_table(topology: StormTopology) -> list[tuple[str, str, Fields]]:
    """Every (component, stream, fields) in a fixed order: the index is the wire stream id."""
    return [(cid, sid, topology.components[cid].streams[sid])
            for cid in sorted(topology.components)
            for sid in sorted(topology.components[cid].streams)]


def build_routers(topology: StormTopology, component: str, task: int,
                  task_worker: dict[int, int]) -> dict[str, StreamRouter]:
    """Routers for every stream ``component`` declares, as seen from ``task``.

    Args:
        task_worker: task id → worker index, for ``local_or_shuffle``.
    """
    table = {(c, s): i for i, (c, s, _) in enumerate(stream_table(topology))}
    rng = random.Random(task)
    routers: dict[str, StreamRouter] = {}
    spec = topology.components[component]
    for sid, fields in spec.streams.items():
        subs: list[_Sub] = []
        direct: set[int] = set()
        for bolt_id, g in topology.subscribers(component):
            if g.stream != sid:
                continue
            tasks = list(topology.component_tasks[bolt_id])
            if g.kind == "direct":
                direct.update(tasks)
                continue
            if g.kind in ("shuffle", "none", "local_or_shuffle"):
                if g.kind == "local_or_shuffle":
                    local = [t for t in tasks if task_worker.get(t) == task_worker.get(task)]
                    tasks = local or tasks
                rng.shuffle(tasks)
                subs.append(_Sub("shuffle", tuple(tasks), counter=rng.randrange(len(tasks))))
            elif g.kind == "fields":
                idxs = tuple(fields.field_index(f) for f in g.fields)
                subs.append(_Sub("fields", tuple(tasks), idxs))
            elif g.kind == "all":
                subs.append(_Sub("all", tuple(tasks)))
            elif g.kind == "global":
                subs.append(_Sub("global", (min(tasks),)))
        cls = CountingRouter if sid == DEAD_LETTER_STREAM else StreamRouter
        routers[sid] = cls(component, sid, table[(component, sid)], fields,
                           subs or [_Sub("all", ())], frozenset(direct))
    return routers


@dataclass(frozen=True)
class TaskLinks:
    """Which tasks one task exchanges tuples with, and which links close a cycle.

    Attributes:
        destinations: every task it sends to (each task a grouping may route to; the end
            of stream goes to all of them).
        upstream: every task it consumes from.
        back_dests: destinations on a back edge (an edge that closes a cycle): sends there
            never block, so no cycle of full queues can deadlock.
        back_sources: upstream tasks on a back edge: the end of stream does not wait for
            them (it could never arrive), and their arrivals are capped.
        remote_upstream: upstream tasks in other workers (their tuples arrive through
            transfer actors).
    """

    destinations: tuple[int, ...]
    upstream: frozenset[int]
    back_dests: frozenset[int]
    back_sources: frozenset[int]
    remote_upstream: frozenset[int]


def acking_links(topology: StormTopology, component: str) -> tuple[list[int], list[int]]:
    """The acking system streams of ``component``'s tasks: ``(sources, destinations)``,
    the task ids they receive acking messages from and send them to (both empty when
    acking is off).

    Storm's system topology: every spout sends ``__ack_init`` to the ackers, every bolt
    ``__ack_ack``/``__ack_fail`` to the ackers, and the ackers send the outcome back to the
    spouts. Two links are this runtime's own: a bolt that completes a one-ack tree sends
    the outcome straight to the tree's spout (``BoltLedger``, actors/_acking.py), so every
    bolt also sends to every spout task; and with ``topology.acker.in.spouts`` the spout
    tasks are the ackers, so bolts send to them and spouts send no acking message.
    """
    ackers = list(topology.acker_tasks)
    if not ackers:
        return [], []
    spouts = list(topology.spout_tasks)
    if component == ACKER_ID:
        return sorted(t for c, ts in topology.component_tasks.items() if c != ACKER_ID
                      for t in ts), spouts
    if topology.is_spout(component):
        bolts = sorted(t for c, ts in topology.component_tasks.items()
                       if c != ACKER_ID and not topology.is_spout(c) for t in ts)
        return (bolts, []) if topology.ackers_in_spouts else (bolts + ackers, ackers)
    return [], ackers if topology.ackers_in_spouts else ackers + spouts


def task_links(topology: StormTopology, task: int, task_worker: dict[int, int]) -> TaskLinks:
    """The :class:`TaskLinks` of ``task`` (``task_worker``: task id → worker index): the
    topology's edges plus its :func:`acking_links`."""
    cid = topology.task_component(task)
    tasks_of, back = topology.component_tasks, topology.back_edges
    ack_sources, ack_dests = acking_links(topology, cid)
    upstream = frozenset(topology.upstream_tasks(cid) + ack_sources)
    worker = task_worker.get(task, 0)
    return TaskLinks(
        tuple(topology.downstream_tasks(cid) + ack_dests), upstream,
        frozenset(t for (a, b) in back if a == cid for t in tasks_of[b]),
        frozenset(t for (a, b) in back if b == cid for t in tasks_of[a]),
        frozenset(t for t in upstream if task_worker.get(t, 0) != worker))


# -- actor names: how a restarted actor, or another driver, finds a task's actor ----------
#: The kinds of named actor a submit creates: an executor per task (named by task id) and,
#: with several workers, a transfer actor per worker (named by worker index).
TASK, WORKER = "task", "worker"


class ActorName(NamedTuple):
    """A parsed actor name (:func:`parse_actor_name`).

    Attributes:
        prefix: the submit's prefix (:func:`submit_prefix`).
        topology: the topology name given at submit.
        kind: :data:`TASK` or :data:`WORKER`.
        index: the task id or worker index.
    """

    prefix: str
    topology: str
    kind: str
    index: int


def submit_prefix(topology_name: str, token: str) -> str:
    """The prefix of every name one submit gives (actors, placement group, stored
    topology): ``storm-<topology_name>-<token>``, ``token`` 8 lowercase hex digits, new
    for each submit so a name can be reused once its topology is killed."""
    return f"storm-{topology_name}-{token}"


def actor_name(prefix: str | None, kind: str, index: int) -> str:
    """The Ray actor name of task ``index``'s executor (``kind`` :data:`TASK`) or worker
    ``index``'s transfer actor (:data:`WORKER`) in the submit named ``prefix``:
    ``<prefix>-task-<id>`` / ``<prefix>-worker-<index>``; with ``prefix`` None, the name
    within its submit (``task-<id>``, the keys of ``TopologyHandle.restarts``).

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in (TASK, WORKER):
        raise ValueError(f"actor kind must be {TASK!r} or {WORKER!r}, got {kind!r}")
    local = f"{kind}-{index}"
    return local if prefix is None else f"{prefix}-{local}"


# the inverse of submit_prefix + actor_name (tests/test_plan.py checks the round trip)
_ACTOR_NAME = re.compile(
    rf"^(?P<prefix>storm-(?P<topology>.+)-[0-9a-f]{{8}})-(?P<kind>{TASK}|{WORKER})-"
    rf"(?P<index>\d+)$")


def parse_actor_name(name: str) -> ActorName | None:
    """The parts of an actor name made by :func:`actor_name` under a
    :func:`submit_prefix`; None for any other name."""
    m = _ACTOR_NAME.match(name)
    if m is None:
        return None
    return ActorName(m["prefix"], m["topology"], m["kind"], int(m["index"]))
