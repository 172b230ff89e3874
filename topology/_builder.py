"""``TopologyBuilder``: declare spouts, bolts and groupings; validate; freeze.

Storm's ``TopologyBuilder`` in snake_case. ``create_topology()`` checks the whole graph
and returns an immutable :class:`StormTopology`; every error names the component, the
stream and the field involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from topology._components import DEFAULT_STREAM, Bolt, OutputFieldsDeclarer, Spout
from topology._config import make_config
from topology._dead_letters import DEAD_LETTER_FIELDS, DEAD_LETTER_STREAM, DEAD_LETTERS_ID
from topology._errors import ConfigError, TopologyError
from topology._fields import Fields
from topology._redact import mask_uri
from topology._sinks import DeadLetterSink
from topology._two_phase import TwoPhaseCommitSink
from topology.joins import _JoinBase
from topology.windows import LATE_FIELDS, WindowedBolt

#: The grouping kinds, Storm's names.
GROUPINGS = ("shuffle", "fields", "all", "global", "direct", "local_or_shuffle", "none")
#: Flink's forward partitioning: task k of the source feeds task k of the subscriber
#: (equal parallelisms). Not offered by the builder: the plan turns a chained
#: ``local_or_shuffle`` subscription into one (``StormTopology.with_chains``).
FORWARD = "forward"


@dataclass(frozen=True)
class Grouping:
    """How one subscription partitions a stream over the subscriber's tasks.

    Attributes:
        source: the emitting component's id.
        stream: the stream id.
        kind: one of :data:`GROUPINGS`.
        fields: the grouping fields, for ``fields`` groupings.
    """

    source: str
    stream: str
    kind: str
    fields: Fields | None = None


@dataclass(frozen=True)
class ComponentSpec:
    """A frozen component: its object, parallelism, inputs and declared streams."""

    id: str
    obj: Spout | Bolt
    parallelism: int
    inputs: tuple[Grouping, ...]
    streams: MappingProxyType  # stream id -> Fields
    direct_streams: frozenset[str]
    conf: MappingProxyType

    @property
    def is_spout(self) -> bool:
        return isinstance(self.obj, Spout)


class BoltDeclarer:
    """Returned by ``set_bolt``; each grouping method subscribes the bolt and returns self."""

    def __init__(self, builder: TopologyBuilder, bolt_id: str) -> None:
        self._builder = builder
        self._id = bolt_id

    def _add(self, source: str, stream: str, kind: str,
             fields: Fields | Sequence[str] | None = None) -> BoltDeclarer:
        if fields is not None and not isinstance(fields, Fields):
            if isinstance(fields, str):
                fields = (fields,)
            fields = Fields(tuple(fields))
        self._builder._inputs[self._id].append(Grouping(source, stream, kind, fields))
        return self

    def shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Spread tuples evenly over the tasks (random round robin)."""
        return self._add(source, stream, "shuffle")

    def fields_grouping(self, source: str, fields: Fields | Sequence[str],
                        stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Tuples with equal values of ``fields`` go to the same task."""
        return self._add(source, stream, "fields", fields)

    def all_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every task gets every tuple."""
        return self._add(source, stream, "all")

    def global_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every tuple goes to the task with the lowest id."""
        return self._add(source, stream, "global")

    def direct_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """The emitter picks the task with ``emit_direct``; the stream must be declared direct."""
        return self._add(source, stream, "direct")

    def local_or_shuffle_grouping(self, source: str,
                                  stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Shuffle among the tasks in the emitter's worker if any, else among all."""
        return self._add(source, stream, "local_or_shuffle")

    def none_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """No preference; currently a shuffle, as in Storm."""
        return self._add(source, stream, "none")

    def add_configuration(self, key: str, value: Any) -> BoltDeclarer:
        self._builder._conf[self._id][key] = value
        return self


class SpoutDeclarer:
    """Returned by ``set_spout``."""

    def __init__(self, builder: TopologyBuilder, spout_id: str) -> None:
        self._builder = builder
        self._id = spout_id

    def add_configuration(self, key: str, value: Any) -> SpoutDeclarer:
        self._builder._conf[self._id][key] = value
        return self


def _check_timestamp_field(cid: str, comps: Mapping[str, ComponentSpec]) -> None:
    """A windowed bolt in event time needs its timestamp field on every input stream.

    Raises:
        TopologyError: naming the bolt, the field and the stream that lacks it.
    """
    obj = comps[cid].obj
    field = obj.window_spec().timestamp_field if isinstance(obj, WindowedBolt) else None
    if field is None:
        return
    for g in comps[cid].inputs:
        fields = comps[g.source].streams.get(g.stream) if g.source in comps else None
        if fields is not None and field not in fields:
            raise TopologyError(
                f"bolt {cid!r}: timestamp field {field!r} is not declared by stream "
                f"{g.stream!r} of {g.source!r}; its fields are {list(fields)}")


def _component_conf(cid: str, obj: Any, declared: dict) -> dict:
    """A component's own config: its ``get_component_configuration()`` under what its
    declarer's ``add_configuration`` set (Storm merges them in this order), validated.

    Raises:
        ConfigError: a key or value ``make_config`` refuses, naming the component.
    """
    own = obj.get_component_configuration() or {}
    if isinstance(obj, WindowedBolt):  # its tick tuples move the window's time
        own = obj.window_spec().component_configuration(own)
    conf = {**own, **declared}
    try:
        make_config(conf)
    except ConfigError as e:
        raise ConfigError(f"component {cid!r}: {e}") from None
    return conf


#: Component id of the acker system bolt (Storm's ``__acker``). ``create_topology()`` never
#: has it; the topology a submit runs (``with_ackers``, Storm's system topology) lists it as
#: a system component, as Storm's UI does, when there are acker executors.
ACKER_ID = "__acker"


class _AckerBolt(Bolt):
    """Placeholder object of the acker component; the executor carries out its logic."""


def _declare_dead_letters(spec: ComponentSpec) -> ComponentSpec:
    """Spout ``spec`` with :data:`DEAD_LETTER_STREAM` declared (unchanged if it is)."""
    if DEAD_LETTER_STREAM in spec.streams:
        return spec
    return replace(spec, streams=MappingProxyType(
        {**spec.streams, DEAD_LETTER_STREAM: DEAD_LETTER_FIELDS}))


def dead_letter_consumers(components: Mapping[str, ComponentSpec]) -> set[str]:
    """The spouts whose dead-letter stream some bolt of ``components`` subscribes to."""
    return {g.source for spec in components.values() for g in spec.inputs
            if g.stream == DEAD_LETTER_STREAM}


class StormTopology:
    """An immutable, validated topology: components and their task ids.

    Task ids are assigned from 1, component by component in sorted id order (as Storm
    does), so a topology always gets the same ids. Acker tasks, when added by
    :meth:`with_ackers` at submit, take the ids after every user task, so adding them
    changes no user task id.

    The graph is the user's: its components and their subscriptions. What
    ``TopologyBuilder.create_topology()`` returns has nothing else. :meth:`with_ackers`
    (Storm's system topology, built by the submit's plan, ``cluster/_plan.py``) adds the
    acker executors as the system component ``__acker`` (:data:`ACKER_ID`), with its task
    ids and no subscriptions: the acking system streams between spouts, bolts and ackers
    are links of the runtime (``actors/_routing.py``, ``task_links``), not edges here, so
    :meth:`upstream_tasks` and :meth:`downstream_tasks` never name an acker.

    With ``ackers_in_spouts`` (``topology.acker.in.spouts``) there is no acker component:
    every spout task tracks the trees of its own tuples, and :attr:`acker_tasks` are the
    spout tasks (a root id names its spout task: ``root % len(acker_tasks)`` is the
    spout's index in them).

    With ``dead_letters`` (``topology.max.replays`` set, acking on; see
    ``topology/_dead_letters.py``) every spout declares the dead-letter stream, and the
    system bolt ``__dead_letters`` (:data:`DEAD_LETTERS_ID`, a ``DeadLetterSink`` of one
    task, ids after the ackers') subscribes to it on every spout no user bolt takes it
    from. Unlike the ackers it is a data subscriber: it is downstream of those spouts.
    """

    def __init__(self, components: dict[str, ComponentSpec], ackers: int = 0,
                 ackers_in_spouts: bool = False, dead_letters: bool = False) -> None:
        self._user = MappingProxyType(dict(components))
        tasks: dict[str, tuple[int, ...]] = {}
        next_id = 1
        for cid in sorted(components):
            n = components[cid].parallelism
            tasks[cid] = tuple(range(next_id, next_id + n))
            next_id += n
        comps = dict(components)
        self.ackers_in_spouts = ackers > 0 and ackers_in_spouts
        if ackers > 0 and not ackers_in_spouts:
            comps[ACKER_ID] = ComponentSpec(
                id=ACKER_ID, obj=_AckerBolt(), parallelism=ackers, inputs=(),
                streams=MappingProxyType({}), direct_streams=frozenset(),
                conf=MappingProxyType({}))
            tasks[ACKER_ID] = tuple(range(next_id, next_id + ackers))
            next_id += ackers
        self.dead_letters = dead_letters
        if dead_letters:
            taken = dead_letter_consumers(components)
            spouts = sorted(c for c, spec in components.items() if spec.is_spout)
            for c in spouts:
                comps[c] = _declare_dead_letters(comps[c])
            inputs = tuple(Grouping(c, DEAD_LETTER_STREAM, "shuffle") for c in spouts
                           if c not in taken)
            if inputs:
                comps[DEAD_LETTERS_ID] = ComponentSpec(
                    id=DEAD_LETTERS_ID, obj=DeadLetterSink(), parallelism=1, inputs=inputs,
                    streams=MappingProxyType({}), direct_streams=frozenset(),
                    conf=MappingProxyType({}))
                tasks[DEAD_LETTERS_ID] = (next_id,)
        self._components = MappingProxyType(comps)
        self._tasks = MappingProxyType(tasks)
        self._task_component = {t: c for c, ts in tasks.items() for t in ts}
        self._ackers = ackers
        self._acker_tasks: tuple[int, ...] = (
            tuple(sorted(t for c, ts in tasks.items() if comps[c].is_spout for t in ts))
            if self.ackers_in_spouts else tasks.get(ACKER_ID, ()))

    def with_ackers(self, ackers: int, in_spouts: bool = False,
                    dead_letters: bool = False) -> StormTopology:
        """This topology with ``ackers`` acker tasks (Storm's ``topology.acker.executors``):
        the user's components plus the system component ``__acker`` of ``ackers`` tasks
        (none when ``ackers`` is 0); user task ids do not change. With ``in_spouts`` (and
        ``ackers`` > 0), the spout tasks are the ackers instead (see the class docstring).
        The acking links are the runtime's (``actors/_routing.py``), not edges of this graph.
        With ``dead_letters``, the dead-letter stream and its system bolt (class docstring).
        """
        return StormTopology(dict(self._user), ackers, in_spouts, dead_letters)

    def with_chains(self, chained: Iterable[str]) -> StormTopology:
        """This topology with each bolt in ``chained`` joined to its one input by a
        :data:`FORWARD` grouping (task k of the source feeds its task k) instead of the
        ``local_or_shuffle`` it was subscribed with: the plan's operator chains
        (``cluster/_plan.py``, ``chainable``), which :meth:`chain_hosts` then reads.

        Raises:
            TopologyError: a bolt in ``chained`` does not have exactly one input, a
                ``local_or_shuffle`` one from a component of equal parallelism.
        """
        user = dict(self._user)
        for cid in chained:
            spec = user[cid]
            (g,) = spec.inputs if len(spec.inputs) == 1 else (None,)
            if (g is None or g.kind != "local_or_shuffle"
                    or user[g.source].parallelism != spec.parallelism):
                raise TopologyError(f"bolt {cid!r} cannot be chained: it needs one "
                                    f"local_or_shuffle input of equal parallelism")
            user[cid] = replace(spec, inputs=(replace(g, kind=FORWARD),))
        return StormTopology(user, self._ackers, self.ackers_in_spouts, self.dead_letters)

    def chain_hosts(self) -> dict[int, int]:
        """Operator chains: task id → the task whose executor runs it, for every task
        joined to its source by a :data:`FORWARD` grouping (task k of a chained bolt runs
        inside the executor of task k of its source, or of that task's own host). Tasks
        that head a chain, or are in none, are not keys."""
        cached = getattr(self, "_chain_hosts", None)
        if cached is not None:
            return cached
        comps, tasks = self._components, self._tasks
        hosts: dict[int, int] = {}

        def host(cid: str) -> None:
            spec = comps[cid]
            if len(spec.inputs) != 1 or spec.inputs[0].kind != FORWARD:
                return
            src = spec.inputs[0].source
            host(src)
            for mine, theirs in zip(tasks[cid], tasks[src], strict=True):
                hosts[mine] = hosts.get(theirs, theirs)

        for cid in sorted(comps):
            host(cid)
        self._chain_hosts = hosts
        return hosts

    def chain_of(self, host: int) -> list[int]:
        """The tasks that run in task ``host``'s executor besides it (see
        :meth:`chain_hosts`), each after the task that feeds it."""
        hosts = self.chain_hosts()
        left = sorted(t for t, h in hosts.items() if h == host)
        placed, out = {host}, []
        while left:
            for t in left:
                if self.upstream_tasks(self.task_component(t), t)[0] in placed:
                    out.append(t)
                    placed.add(t)
                    left.remove(t)
                    break
        return out

    def forward_peer(self, source: str, task: int, target: str) -> int:
        """The task of ``target`` that task ``task`` of ``source`` feeds on a
        :data:`FORWARD` edge (the same index)."""
        return self._tasks[target][self._tasks[source].index(task)]

    @property
    def back_edges(self) -> frozenset[tuple[str, str]]:
        """The subscriptions that close a cycle: ``(source, bolt)`` pairs found as back edges
        by a depth-first search from the spouts (in sorted id order). Every cycle of the
        graph contains at least one; their sends never block (see actors/_executor.py)."""
        cached = getattr(self, "_back_edges", None)
        if cached is not None:
            return cached
        succ: dict[str, list[str]] = {c: [] for c in self._user}
        for cid, spec in self._user.items():
            for g in spec.inputs:
                if cid not in succ[g.source]:
                    succ[g.source].append(cid)
        for v in succ.values():
            v.sort()
        back: set[tuple[str, str]] = set()
        state: dict[str, int] = {}  # 1 on the stack, 2 done

        def visit(u: str) -> None:
            state[u] = 1
            for v in succ[u]:
                if state.get(v) == 1:
                    back.add((u, v))
                elif v not in state:
                    visit(v)
            state[u] = 2

        for c in sorted(self._user):
            if self._user[c].is_spout and c not in state:
                visit(c)
        for c in sorted(self._user):  # components no spout reaches (validation forbids)
            if c not in state:
                visit(c)
        self._back_edges = frozenset(back)
        return self._back_edges

    @property
    def acker_tasks(self) -> tuple[int, ...]:
        """Task ids of the ackers (empty when acking is off; the spout tasks when the
        spouts are the ackers)."""
        return self._acker_tasks

    def is_spout(self, component: str) -> bool:
        return self._components[component].is_spout

    @property
    def components(self) -> MappingProxyType:
        return self._components

    @property
    def component_tasks(self) -> MappingProxyType:
        """Component id → its task ids."""
        return self._tasks

    def task_component(self, task: int) -> str:
        return self._task_component[task]

    @property
    def num_tasks(self) -> int:
        return len(self._task_component)

    def subscribers(self, source: str) -> list[tuple[str, Grouping]]:
        """(bolt id, grouping) pairs that consume streams of ``source``."""
        return [(cid, g) for cid, spec in self._components.items() for g in spec.inputs
                if g.source == source]

    @property
    def spout_tasks(self) -> tuple[int, ...]:
        """Task ids of every spout, sorted."""
        return tuple(sorted(t for t, c in self._task_component.items()
                            if self._components[c].is_spout))

    def upstream_tasks(self, component: str, task: int | None = None) -> list[int]:
        """Task ids of every component ``component`` subscribes to (any stream), in
        sorted component order; none for a spout or ``__acker``. With ``task`` (one of
        ``component``'s), a :data:`FORWARD` source gives only the task feeding it."""
        spec = self._components[component]
        srcs = sorted({g.source for g in spec.inputs})
        if task is not None and len(spec.inputs) == 1 and spec.inputs[0].kind == FORWARD:
            return [self.forward_peer(component, task, srcs[0])]
        return [t for s in srcs for t in self._tasks[s]]

    def downstream_tasks(self, component: str, task: int | None = None) -> list[int]:
        """Task ids of every component subscribed to ``component`` (any stream), in sorted
        component order; none for ``__acker``. With ``task`` (one of ``component``'s), a
        :data:`FORWARD` subscriber gives only the task it feeds."""
        subs = self.subscribers(component)
        out = []
        for c in sorted({cid for cid, _ in subs}):
            if task is not None and all(g.kind == FORWARD for cid, g in subs if cid == c):
                out.append(self.forward_peer(component, task, c))
            else:
                out.extend(self._tasks[c])
        return out

    def validate(self) -> None:
        """Check the user's graph again, as Storm's Nimbus does at submit
        (``StormCommon.validateStructure``): a topology built without the builder gets the
        same checks as :meth:`TopologyBuilder.create_topology`.

        Raises:
            TopologyError: as ``create_topology``, naming the component, stream and field.
        """
        _validate_structure(self._user)

    def __repr__(self) -> str:
        parts = ", ".join(f"{c}x{s.parallelism}" for c, s in self._components.items())
        return f"StormTopology({parts})"

    def __reduce__(self):
        return (StormTopology, (dict(self._user), self._ackers, self.ackers_in_spouts,
                                self.dead_letters))


class TopologyBuilder:
    """Build a topology (Storm's ``TopologyBuilder``).

    Example:
        >>> b = TopologyBuilder()
        >>> b.set_spout("words", WordSpout(), 2)
        >>> b.set_bolt("count", CountBolt(), 4).fields_grouping("words", ["word"])
        >>> topo = b.create_topology()
    """

    def __init__(self) -> None:
        self._objs: dict[str, Spout | Bolt] = {}
        self._par: dict[str, Any] = {}
        self._inputs: dict[str, list[Grouping]] = {}
        self._conf: dict[str, dict] = {}

    def _add(self, cid: str, obj: Any, parallelism_hint: Any) -> None:
        if not isinstance(cid, str) or not cid or cid.startswith("__"):
            raise TopologyError(f"component id must be a non-empty string not starting with "
                                f"'__', got {cid!r}")
        if cid in self._objs:
            raise TopologyError(f"duplicate component id {cid!r}: ids must be unique across "
                                f"spouts and bolts")
        self._objs[cid] = obj
        self._par[cid] = parallelism_hint
        self._inputs[cid] = []
        self._conf[cid] = {}

    def set_spout(self, spout_id: str, spout: Spout, parallelism_hint: int = 1) -> SpoutDeclarer:
        """Add a spout with ``parallelism_hint`` tasks.

        Raises:
            TopologyError: duplicate id, or ``spout`` is not a :class:`Spout`.
        """
        if not isinstance(spout, Spout):
            raise TopologyError(f"spout {spout_id!r} must be a Spout instance, got "
                                f"{type(spout).__name__}")
        self._add(spout_id, spout, parallelism_hint)
        return SpoutDeclarer(self, spout_id)

    def set_bolt(self, bolt_id: str, bolt: Bolt | WindowedBolt,
                 parallelism_hint: int = 1) -> BoltDeclarer:
        """Add a bolt with ``parallelism_hint`` tasks; subscribe it with the returned declarer.
        A :class:`WindowedBolt` runs inside the runtime's ``WindowedBoltExecutor``
        (Storm's); the component keeps the user's object.

        Raises:
            TopologyError: duplicate id; ``bolt`` is neither a :class:`Bolt` nor a
                :class:`WindowedBolt`; a windowed bolt's window cannot work (naming the
                component and the setting).
        """
        if isinstance(bolt, WindowedBolt):
            try:
                spec = bolt.window_spec()
                spec.validate(bolt_id)
            except ConfigError as e:
                raise TopologyError(f"bolt {bolt_id!r}: {e}") from None
        elif not isinstance(bolt, Bolt):
            raise TopologyError(f"bolt {bolt_id!r} must be a Bolt instance, got "
                                f"{type(bolt).__name__}")
        self._add(bolt_id, bolt, parallelism_hint)
        return BoltDeclarer(self, bolt_id)

    def create_topology(self) -> StormTopology:
        """Validate the graph and return an immutable :class:`StormTopology`.

        A bolt may subscribe to a spout's dead-letter stream (:data:`DEAD_LETTER_STREAM`,
        fields :data:`DEAD_LETTER_FIELDS`) without the spout declaring it: the stream is
        the system's, and carries tuples once ``topology.max.replays`` is set.

        Raises:
            TopologyError: no spout; parallelism < 1; a subscription to an unknown
                component or undeclared stream; a fields grouping on an undeclared field;
                a direct grouping on a stream not declared direct; a bolt without inputs;
                two sink components writing into one target (``ParquetSink`` paths
                compared absolute, without ``file://``).
        """
        comps = {}
        for cid, obj in self._objs.items():
            d = OutputFieldsDeclarer(cid)
            obj.declare_output_fields(d)
            if isinstance(obj, WindowedBolt):  # the late stream is the executor's
                late = obj.window_spec().late_stream
                if late is not None:
                    d.declare_stream(late, Fields(LATE_FIELDS))
            comps[cid] = ComponentSpec(
                id=cid, obj=obj, parallelism=self._par[cid],
                inputs=tuple(self._inputs[cid]),
                streams=MappingProxyType(dict(d.streams)),
                direct_streams=frozenset(d.direct),
                conf=MappingProxyType(_component_conf(cid, obj, self._conf[cid])))
        for cid in dead_letter_consumers(comps):  # the dead-letter stream is the system's
            if cid in comps and comps[cid].is_spout:
                comps[cid] = _declare_dead_letters(comps[cid])
        _validate_structure(comps)
        return StormTopology(comps)


def _validate_structure(comps: Mapping[str, ComponentSpec]) -> None:
    """The graph checks of ``create_topology`` (and of ``StormTopology.validate``) over
    frozen components; see :meth:`TopologyBuilder.create_topology` for what is raised."""
    if not any(spec.is_spout for spec in comps.values()):
        raise TopologyError("a topology needs at least one spout")
    writers: dict[str, str] = {}  # a sink's exclusive target -> its component
    for cid, spec in sorted(comps.items()):
        target = (spec.obj.exclusive_target() if isinstance(spec.obj, TwoPhaseCommitSink)
                  else None)
        if target is not None and target in writers:
            raise TopologyError(f"sinks {writers[target]!r} and {cid!r} both write into "
                                f"{mask_uri(target)!r}: give each sink component its own target")
        if target is not None:
            writers[target] = cid
    for cid, spec in comps.items():
        par = spec.parallelism
        if not isinstance(par, int) or isinstance(par, bool) or par < 1:
            raise TopologyError(f"component {cid!r}: parallelism_hint must be an int >= 1, "
                                f"got {par!r}")
    def par_of(cid: str) -> int:
        return comps[cid].parallelism

    for cid, spec in comps.items():
        inputs = spec.inputs
        if not spec.is_spout and not inputs:
            raise TopologyError(f"bolt {cid!r} has no inputs: subscribe it with a grouping")
        _check_timestamp_field(cid, comps)
        for g in inputs:
            if g.kind not in GROUPINGS and g.kind != FORWARD:
                raise TopologyError(f"bolt {cid!r}: unknown grouping {g.kind!r}")
            if g.kind == FORWARD and (len(inputs) != 1 or g.source not in comps
                                      or comps[g.source].parallelism != par_of(cid)):
                raise TopologyError(f"bolt {cid!r}: a forward grouping needs one input "
                                    f"of equal parallelism")
            if g.source not in comps:
                raise TopologyError(
                    f"bolt {cid!r} subscribes to unknown component {g.source!r}; "
                    f"known: {sorted(comps)}")
            src_streams = comps[g.source].streams
            if g.stream not in src_streams:
                raise TopologyError(
                    f"bolt {cid!r} subscribes to stream {g.stream!r} of {g.source!r}, "
                    f"which {g.source!r} does not declare; declared: {sorted(src_streams)}")
            if g.kind == "fields":
                if g.fields is None or len(g.fields) == 0:
                    raise TopologyError(f"bolt {cid!r}: fields grouping on {g.source!r} "
                                        f"stream {g.stream!r} needs at least one field")
                for f in g.fields:
                    if f not in src_streams[g.stream]:
                        raise TopologyError(
                            f"bolt {cid!r}: fields grouping on field {f!r}, which stream "
                            f"{g.stream!r} of {g.source!r} does not declare; its fields "
                            f"are {src_streams[g.stream].to_list()}")
            is_direct = g.stream in comps[g.source].direct_streams
            if (g.kind == "direct") != is_direct:
                want = "declared direct" if g.kind == "direct" else "not direct"
                raise TopologyError(
                    f"bolt {cid!r}: {g.kind} grouping on stream {g.stream!r} of "
                    f"{g.source!r}, but a {g.kind} grouping needs a stream {want}")
        seen = set()
        for g in inputs:
            if (g.source, g.stream) in seen:
                raise TopologyError(f"bolt {cid!r} subscribes twice to stream {g.stream!r} "
                                    f"of {g.source!r}")
            seen.add((g.source, g.stream))
        if isinstance(spec.obj, _JoinBase):  # its join and selected fields, its groupings
            spec.obj.check_inputs(cid, comps)
