"""Where a task's tuples go: groupings turned into routers, each task's links (the user's
edges plus the acking system streams), and the Ray actor name each task answers to.

Storm's ``GrouperFactory`` groupings. Fields grouping goes by key groups (Flink's
``KeyGroupRangeAssignment``, topology/_keygroups.py): a key's process-independent hash
(``stable_hash``: CRC-32 of text, the integer itself for ints; Python's ``hash(str)``
differs between processes, and every emitter task must send a key to the same consumer
task) is mixed (``murmur_mix``) into one of ``topology.max.task.parallelism`` groups (128
when unset), and each consumer task owns a contiguous range of groups
(``key_group_range``), so keyed state can move between tasks by group. Each subscription
keeps a ``group → task`` table and remembers the routes of its last keys, so a tuple costs
a hash and a look-up (and the mix, for a key not seen lately).
Shuffle groupings are load-aware unless ``topology.disable.loadaware.messaging``
(:class:`LoadAwareShuffle`, Storm's ``LoadAwareShuffleGrouping``).

No Ray here: the submit's plan (``cluster/_plan.py``) reads the links without Ray.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from topology import ACKER_ID, DEAD_LETTER_STREAM, FORWARD, EmitError, Fields, StormTopology
from topology._keygroups import (
    DEFAULT_KEY_GROUPS,
    murmur_mix,
    operator_index,
    stable_hash,  # also actors.stable_hash
)


@dataclass
class _Sub:
    kind: str
    tasks: tuple[int, ...]
    idxs: tuple[int, ...] = ()
    counter: int = 0
    #: fields grouping: key group → its task (a 1-tuple, as routes return)
    table: tuple[tuple[int], ...] = ()
    #: fields grouping: key hash → its route, for the last keys seen (see _MEMO_KEYS)
    memo: dict[int, tuple[int]] = field(default_factory=dict)


#: Key hashes whose route a fields grouping remembers (cleared when full): a route costs
#: a dict look-up for a recurring key instead of a murmur mix in Python.
_MEMO_KEYS = 4096


def _group_table(tasks: tuple[int, ...], groups: int) -> tuple[tuple[int], ...]:
    """Key group → the task owning it (``operator_index``), as a 1-tuple, for a fields
    grouping into ``tasks`` (in component task order) over ``groups`` key groups."""
    n = len(tasks)
    return tuple((tasks[operator_index(g, n, groups)],) for g in range(groups))


#: A task's weight at load 0.0 (Storm's ``MAX_WEIGHT``): a weight is ``100 − load %``.
MAX_WEIGHT = 100
#: Emits between two refreshes of a load-aware shuffle's weights, at most (fewer when a
#: batch is smaller, see :class:`LoadAwareShuffle`). A refresh asks every target's load
#: (an ``ActorSink`` reaps its finished calls for it), so it stays off the per-tuple
#: path; and a task that stops taking is dropped within that many emits.
LOAD_REFRESH_EMITS = 64
#: The longest choice cycle (Storm's ``CAPACITY``): weights whose reduced sum is larger
#: are scaled down to it.
_MAX_CYCLE = 1000
#: Choice cycles kept per shuffle (by weights); the cache is cleared when full.
_MAX_CACHED = 64
#: When every target is at weight 0, the targets within this much of the lowest load keep
#: the stream (Storm's "within 5% of the minimum congestion is still fine"); beyond 1.0 a
#: load counts the seconds a task has taken nothing, so this is 50 ms.
FALLBACK_MARGIN = 0.05


def _weight(load: float) -> int:
    """Storm's weight of a task at ``load`` (0.0 idle, 1.0 and above takes nothing):
    100 − load %, rounded."""
    if load >= 1.0:
        return 0
    return MAX_WEIGHT - int(MAX_WEIGHT * load + 0.5) if load > 0.0 else MAX_WEIGHT


def _cycle(tasks: tuple[int, ...], weights: tuple[int, ...]) -> tuple[tuple[int], ...]:
    """One cycle of choices (each a 1-tuple, as routes return) giving each task its share
    of ``weights``, interleaved (each task's picks spread evenly over the cycle). Weights
    are divided by their greatest common divisor, so equal weights give ``tasks`` once
    each in their order: the plain shuffle's rotation. All zero: the plain rotation."""
    g = 0
    for w in weights:
        g = math.gcd(g, w)
    if g == 0:
        return tuple((t,) for t in tasks)
    counts = [w // g for w in weights]
    total = sum(counts)
    if total > _MAX_CYCLE:
        counts = [max(1, c * _MAX_CYCLE // total) if c else 0 for c in counts]
    picks = sorted(((k + 0.5) / c, i) for i, c in enumerate(counts) for k in range(c))
    return tuple((tasks[i],) for _, i in picks)


class LoadAwareShuffle:
    """Storm's ``LoadAwareShuffleGrouping`` for one subscription of several tasks: a
    shuffle weighted by how loaded each target task looks from the sender, so a backlogged,
    hung or dead task gets less of the stream, or nothing, while the others take it.

    Weights: ``100 − load %`` per task (Storm's), from ``load(task) -> float`` (0.0: idle;
    1.0 and above: takes nothing now, for ``load − 1.0`` seconds so far), bound by
    :meth:`bind` once the sender's sinks exist (``Outbox.load``); until then every task
    weighs 100. A task at weight 0 gets nothing. When every task is at weight 0, the
    choice falls back to the plain shuffle over the tasks within :data:`FALLBACK_MARGIN` of
    the lowest load (all of them at equal load): the emit then waits in its batch or in
    ``pending_emits`` as with a plain shuffle, never dropped, but for a task that stopped
    taking last, not for one that is hung or dead while the others are merely full (and
    the first of them to take again gets it: see re-routing).

    Choices: as in Storm, a precomputed cycle read by a counter, one step per emit
    (:meth:`StreamRouter.route`; no random draw, no allocation). Each task's weight divided
    by the weights' greatest common divisor gives its picks per cycle, spread evenly, so
    equal weights (whatever the load) give exactly the plain shuffle's rotation and its
    even shares. Cycles are cached by weights.

    Refresh (:meth:`refresh`): every ``period`` emits the weights are read again (Storm:
    once a second, from the load its workers report to each other; here from what the
    sender knows, with no message). Nothing else refreshes them, so an idle sender does no
    work and a sender held by ``pending_emits`` does not spin. ``period`` is at most one
    batch, so a task that stops taking just after a refresh is dropped within a batch of
    emits.

    Re-routing (:meth:`others`): a task can still refuse an emit chosen for it, between two
    refreshes (its batch was already part full when it stopped taking, or its worker's
    backpressure status arrived since) or while every task is full and it is still among
    those that stopped last (as a hung task is, for :data:`FALLBACK_MARGIN` after its last
    acknowledgement, when the stream was backpressured). That emit is not held for it: the
    sender's ``Outbox.try_flush_pending`` offers it to the other tasks of this shuffle
    that the weights choose, best first, and the refusal refreshes the weights at once, so
    the refusing task is dropped from the next emit on. A departure from Storm, whose emit
    waits for the task it chose whatever the grouping: it carries the grouping's aim
    (STORM-162, STORM-2733: send a task that lags less, or nothing, and let the others
    take the stream) to the emits chosen just before a task stopped taking. Held, one such
    emit would stop a spout outright (Storm 2.0's spout calls ``nextTuple`` only while
    ``pendingEmits`` is empty) and the refresh that drops the task would never come. Every
    other grouping's emit still waits for its destination.

    Departures from Storm: weights follow the current load at each refresh (Storm 2's ring
    grows a weight by 1 and cuts it by 10 per one-second refresh, too slow for a load
    refreshed every few emits), and there are no locality scopes (Storm's
    ``topology.localityaware.*`` bounds): ``local_or_shuffle`` is the local choice here,
    and a plain shuffle spreads evenly over workers.

    Args:
        tasks: the target tasks, in this sender's rotation order.
        period: emits between refreshes (>= 1).
        counter: the rotation's starting point (spreads senders over the targets).

    Attributes:
        weights: the weights in use, one per task of ``tasks``.
        refreshes: how many times the weights were read.
    """

    __slots__ = ("kind", "tasks", "period", "counter", "refresh_at", "choices", "weights",
                 "refreshes", "_load", "_cache", "_even")

    def __init__(self, tasks: tuple[int, ...], period: int, counter: int = 0) -> None:
        if period < 1:
            raise ValueError(f"load-aware shuffle: period must be >= 1 emit, got {period}")
        self.kind = "loadaware"
        self.tasks = tasks
        self.period = period
        self.counter = counter
        self.refresh_at = counter + period
        self.weights = self._even = (MAX_WEIGHT,) * len(tasks)
        self.choices = _cycle(tasks, self.weights)
        self.refreshes = 0
        self._load: Callable[[int], float] | None = None
        self._cache: dict[tuple[int, ...], tuple[tuple[int], ...]] = {
            self.weights: self.choices}

    def bind(self, load: Callable[[int], float]) -> None:
        """Take the weights from ``load(task) -> float`` from now on (read at once)."""
        self._load = load
        self.refresh()

    def refresh(self) -> None:
        """Read every task's load and switch to the cycle of the new weights."""
        self.refresh_at = self.counter + self.period
        load = self._load
        if load is None:
            return
        self.refreshes += 1
        loads = [load(t) for t in self.tasks]
        if not any(loads):  # (the usual: nobody lags, even weights)
            weights = self._even
        else:
            weights = tuple([_weight(x) for x in loads])
            if not any(weights):  # every task takes nothing: those that stopped last keep it
                low = min(loads) + FALLBACK_MARGIN
                weights = tuple([MAX_WEIGHT if x <= low else 0 for x in loads])
        if weights == self.weights:
            return
        self.weights = weights
        cycle = self._cache.get(weights)
        if cycle is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            cycle = self._cache[weights] = _cycle(self.tasks, weights)
        self.choices = cycle

    def others(self, i: int) -> tuple[int, ...]:
        """The tasks to offer an emit that ``tasks[i]`` refused, best first: the other
        tasks the weights choose (after a refresh, if ``tasks[i]`` was still weighted: the
        refusal says it takes nothing now), by weight, ties in this sender's rotation from
        the counter. Never one at weight 0: a task the load signal leaves out (a hung one,
        or a dead one whose sends would be lost) gets no emit this way either. Only on a
        refused send (see the class docstring: re-routing)."""
        if self.weights[i]:
            self.refresh()
        w, n, c = self.weights, len(self.tasks), self.counter
        order = sorted((k for k in range(n) if k != i and w[k]),
                       key=lambda k: (-w[k], (k - c) % n))
        return tuple([self.tasks[k] for k in order])


class StreamRouter:
    """Routes one (component, stream)'s tuples to the tasks of its subscribers.

    Attributes:
        index: the stream's index in the topology's stream table (the wire id).
        arity: the number of declared fields (checked at every emit).
        direct_tasks: tasks that may be named by ``emit_direct`` on this stream.
    """

    __slots__ = ("component", "stream", "index", "arity", "_subs", "direct_tasks", "_single",
                 "fixed", "deliver")

    def __init__(self, component: str, stream: str, index: int, fields: Fields,
                 subs: list[_Sub | LoadAwareShuffle], direct_tasks: frozenset[int]) -> None:
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
        #: when ``fixed`` is one task: the emit of an untracked tuple to it,
        #: ``(values) -> bool`` (False: refused, nothing done), made once at connect
        #: (``Outbox.deliverer``), so that emit does no routing and no per-tuple look-up
        self.deliver = None

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
    def _one(s: _Sub | LoadAwareShuffle, values) -> tuple[int, ...]:
        kind = s.kind
        if kind == "loadaware":  # one step of the cycle (inline: a call costs more)
            p = s.counter + 1
            s.counter = p
            if p >= s.refresh_at:
                s.refresh()
            c = s.choices
            return c[p % len(c)]
        if kind == "shuffle":
            s.counter += 1
            return (s.tasks[s.counter % len(s.tasks)],)
        if kind == "fields":  # the key's group's task (topology/_keygroups.py)
            if len(s.idxs) == 1:
                h = stable_hash(values[s.idxs[0]])
            else:  # fields_hash, inline
                h = 0
                for i in s.idxs:
                    h = (h * 31 + stable_hash(values[i])) & 0xFFFFFFFFFFFF
            memo = s.memo
            r = memo.get(h)
            if r is None:
                t = s.table
                r = t[murmur_mix(h) % len(t)]
                if len(memo) >= _MEMO_KEYS:
                    memo.clear()
                memo[h] = r
            return r
        return s.tasks  # all, global (one task)

    def bind_load(self, load: Callable[[int], float]) -> None:
        """Give this stream's load-aware shuffles their load signal, ``load(task) -> float``
        (see :class:`LoadAwareShuffle`); other groupings ignore it."""
        for s in self._subs:
            if isinstance(s, LoadAwareShuffle):
                s.bind(load)

    def load_aware_shuffles(self) -> list[LoadAwareShuffle]:
        """This stream's load-aware shuffles: the only subscriptions whose emits may go to
        another task than the one chosen (``Outbox.reroute_within``)."""
        return [s for s in self._subs if isinstance(s, LoadAwareShuffle)]

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
                  task_worker: dict[int, int], load_aware: bool = False,
                  batch_size: int = 1,
                  key_groups: int = DEFAULT_KEY_GROUPS) -> dict[str, StreamRouter]:
    """Routers for every stream ``component`` declares, as seen from ``task``.

    Args:
        task_worker: task id → worker index, for ``local_or_shuffle``.
        load_aware: shuffle, none and local-or-shuffle groupings into several tasks are
            :class:`LoadAwareShuffle` (``not topology.disable.loadaware.messaging``); their
            load signal is bound later (:meth:`StreamRouter.bind_load`).
        batch_size: the sender's ``topology.producer.batch.size`` (effective): a
            load-aware shuffle refreshes its weights every ``min(LOAD_REFRESH_EMITS,
            batch_size)`` emits.
        key_groups: the topology's key-group count (``key_group_count(conf)``,
            topology/_keygroups.py): a fields grouping sends a key to the task of its
            group.

    Raises:
        ValueError: a fields grouping into more tasks than ``key_groups`` (the submit's
            plan refuses such a topology first, ``check_key_group_parallelism``).
    """
    table = {(c, s): i for i, (c, s, _) in enumerate(stream_table(topology))}
    rng = random.Random(task)
    period = max(1, min(LOAD_REFRESH_EMITS, batch_size))
    routers: dict[str, StreamRouter] = {}
    spec = topology.components[component]
    for sid, fields in spec.streams.items():
        subs: list[_Sub | LoadAwareShuffle] = []
        direct: set[int] = set()
        for bolt_id, g in topology.subscribers(component):
            if g.stream != sid:
                continue
            tasks = list(topology.component_tasks[bolt_id])
            if g.kind == "direct":
                direct.update(tasks)
                continue
            if g.kind == FORWARD:  # an operator chain: task k feeds task k
                subs.append(_Sub("global", (topology.forward_peer(component, task,
                                                                  bolt_id),)))
                continue
            if g.kind in ("shuffle", "none", "local_or_shuffle"):
                if g.kind == "local_or_shuffle":
                    local = [t for t in tasks if task_worker.get(t) == task_worker.get(task)]
                    tasks = local or tasks
                rng.shuffle(tasks)
                start = rng.randrange(len(tasks))
                if load_aware and len(tasks) > 1:
                    subs.append(LoadAwareShuffle(tuple(tasks), period, start))
                else:
                    subs.append(_Sub("shuffle", tuple(tasks), counter=start))
            elif g.kind == "fields":
                idxs = tuple(fields.field_index(f) for f in g.fields)
                subs.append(_Sub("fields", tuple(tasks), idxs,
                                 table=_group_table(tuple(tasks), key_groups)))
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
    upstream = frozenset(topology.upstream_tasks(cid, task) + ack_sources)
    worker = task_worker.get(task, 0)
    return TaskLinks(
        tuple(topology.downstream_tasks(cid, task) + ack_dests), upstream,
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


def submit_id(prefix: str | None) -> str | None:
    """The token of a :func:`submit_prefix` (the submit's id, ``TopologyContext.submit_id``);
    None for None or any other string."""
    m = _SUBMIT_PREFIX.match(prefix or "")
    return m["token"] if m else None


_SUBMIT_PREFIX = re.compile(r"^storm-.+-(?P<token>[0-9a-f]{8})$")


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


def upstream_spout_tasks(topology: StormTopology, component_id: str) -> tuple[int, ...]:
    """The tasks of every spout whose streams reach ``component_id`` through any path of
    subscriptions (the component itself excluded), sorted."""
    seen, todo, spouts = {component_id}, [component_id], set()
    while todo:
        for g in topology.components[todo.pop()].inputs:
            if g.source in seen:
                continue
            seen.add(g.source)
            if topology.components[g.source].is_spout:
                spouts.add(g.source)
            else:
                todo.append(g.source)
    return tuple(sorted(t for c in spouts for t in topology.component_tasks[c]))
