"""Groupings turned into routers: for one emitter's stream, values → target task ids.

Storm's ``GrouperFactory`` groupings. Fields grouping hashes with a process-independent
hash (CRC-32 of text, the integer itself for ints) because Python's ``hash(str)`` differs
between processes, and every emitter task must send a key to the same consumer task.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import msgpack

from topology import EmitError, Fields, StormTopology


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
        routers[sid] = StreamRouter(component, sid, table[(component, sid)], fields,
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


def task_links(topology: StormTopology, task: int, task_worker: dict[int, int]) -> TaskLinks:
    """The :class:`TaskLinks` of ``task`` (``task_worker``: task id → worker index)."""
    cid = topology.task_component(task)
    tasks_of, back = topology.component_tasks, topology.back_edges
    upstream = frozenset(topology.upstream_tasks(cid))
    worker = task_worker.get(task, 0)
    return TaskLinks(
        tuple(topology.downstream_tasks(cid)), upstream,
        frozenset(t for (a, b) in back if a == cid for t in tasks_of[b]),
        frozenset(t for (a, b) in back if b == cid for t in tasks_of[a]),
        frozenset(t for t in upstream if task_worker.get(t, 0) != worker))
