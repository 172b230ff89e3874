"""A savepoint restored at another parallelism: which old task's state each new task takes
(Flink's ``StateAssignmentOperation``), and the restores that are refused.

The rules, per component whose number of tasks changed:

- **Keyed state** (a ``StatefulBolt`` whose inputs are all fields groupings): each new task
  takes, from every old task whose key-group range intersects its own, the entries of the
  key groups it now owns (:func:`key_group_sources`, :func:`assign_keyed`); the key-group
  count must not change, as Flink refuses a changed max parallelism.
- **Two-phase-commit sinks**: each old task's pending transactions go to one new task,
  :func:`transaction_owner` (old index modulo the new count), under keys made unique by the
  old task's index, so each is published once, by one task (:func:`assign_transactions`).
- **Spouts**: the spout class's ``StatefulSpout.redistribute(old, index, count)`` builds
  each new task's state from all old states (Flink's union list state); the default
  refuses. ``IterableSpout``, ``DataFrameSpout`` and the Nexmark spout split their input
  (``topology/_splits.py``).
- **Refused**, naming the component and the reason: per-task state that is not keyed
  (Flink refuses non-partitioned state at another parallelism), runtime state that does
  not split by key group yet (persistent windows, join buffers), a spout without
  ``redistribute``, a changed key-group count, and a forward (chained) edge one end of
  which has state and whose ends do not move from one equal count to another; and, at any
  task count, a spout whose state records another split count (:func:`check_splits`).

A task whose input had ended when the savepoint was taken is recorded as finished; a new
task is, when every old task it takes state from was. :func:`rescale` applies the rules to
a :class:`~actors.state.savepoints.Savepoint`, returning one as if taken at the new
parallelism. Pure: no Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors._codec import decode_key, decode_value, value_encoder
from actors.state._internals import INTERNAL_PREFIX
from actors.state.savepoints import Savepoint, SavepointError, describe_inputs
from topology import StatefulSpout, StormTopology, TwoPhaseCommitSink
from topology._keygroups import KEY_GROUPS_KEY, key_group_count, key_group_range, operator_index
from topology._splits import SPLITS_KEY

#: the stored key that records a task as finished (``actors/state/_task.py``'s
#: ``FINISHED_KEY``, repeated here so this module does not import the task side)
FINISHED = INTERNAL_PREFIX + INTERNAL_PREFIX + b"finished"

Entries = dict[bytes, bytes]


# -- the decisions -------------------------------------------------------------------------


def key_group_sources(old_n: int, new_n: int, groups: int) -> list[list[int]]:
    """For each new task index, the old task indexes whose key groups intersect its own
    (Flink's ``StateAssignmentOperation``: each new subtask intersects every old handle's
    ``KeyGroupRange`` with its own), in order."""
    old = [key_group_range(k, old_n, groups) for k in range(old_n)]
    out = []
    for j in range(new_n):
        mine = key_group_range(j, new_n, groups)
        out.append([k for k, r in enumerate(old) if r.start < mine.stop and mine.start < r.stop])
    return out


def transaction_owner(old_index: int, new_n: int) -> int:
    """The new task that publishes the pending transactions of old task ``old_index``."""
    return old_index % new_n


def _finished(olds: list[Entries]) -> Entries:
    return {FINISHED: b"\xc3"} if olds and all(FINISHED in e for e in olds) else {}


def assign_keyed(old: dict[int, Entries], old_n: int, new_n: int, groups: int,
                 group_of: Callable[[bytes], int]) -> dict[int, Entries]:
    """Each new task's entries of a keyed component: from each intersecting old task (of
    ``old_n``; one missing from ``old`` counts as not finished), the user entries whose
    group (``group_of(stored key)``) it owns, and the finished record when every such old
    task had it.

    Raises:
        ValueError: runtime-internal entries other than the finished record (persistent
            windows' or join buffers' state, which does not split by key group yet).
    """
    for k, entries in old.items():
        inner = [key for key in entries if key.startswith(INTERNAL_PREFIX) and key != FINISHED]
        if inner:
            raise ValueError(f"old task {k} keeps {len(inner)} runtime entries (persistent "
                             f"windows or join buffers), which do not split by key group yet")
    out: dict[int, Entries] = {j: {} for j in range(new_n)}
    owner = [operator_index(g, new_n, groups) for g in range(groups)]
    for entries in old.values():  # (each entry's group once: the intersections at once)
        for key, v in entries.items():
            if key != FINISHED:
                out[owner[group_of(key)]][key] = v
    for j, sources in enumerate(key_group_sources(old_n, new_n, groups)):
        out[j].update(_finished([old.get(k, {}) for k in sources]))
    return out


def assign_transactions(old: dict[int, Entries], new_n: int) -> dict[int, Entries]:
    """Each new task's entries of a two-phase-commit sink: the pending transactions of the
    old tasks it owns (:func:`transaction_owner`), each key extended with the old index
    (``("txn", 7)`` of old task 1 becomes ``("txn", 7, 1)``) so no two collide; finished
    when every old task was.

    Raises:
        ValueError: user entries (a sink keeps none) or an undecodable key.
    """
    enc = value_encoder()
    out: dict[int, Entries] = {j: {} for j in range(new_n)}
    for k, entries in sorted(old.items()):
        dest = out[transaction_owner(k, new_n)]
        for key, v in entries.items():
            if key == FINISHED:
                continue
            if not key.startswith(INTERNAL_PREFIX):
                raise ValueError(f"old task {k} has user state, which a sink does not keep")
            dest[INTERNAL_PREFIX + enc((*decode_key(key[1:]), k))] = v
    for entries in out.values():
        entries.update(_finished(list(old.values())))
    return out


def assign_spout(cls: type[StatefulSpout], old: dict[int, Entries], old_n: int,
                 new_n: int) -> dict[int, Entries]:
    """Each new task's entries of a spout: ``cls.redistribute`` of the old tasks' decoded
    states, encoded again; finished when every old task was.

    Raises:
        NotImplementedError, ValueError: what ``redistribute`` raises.
    """
    enc = value_encoder()
    states = [{decode_key(key): decode_value(v) for key, v in old.get(k, {}).items()
               if not key.startswith(INTERNAL_PREFIX)} for k in range(old_n)]
    done = _finished([old.get(k, {}) for k in range(old_n)])
    out = {}
    for j in range(new_n):
        state = cls.redistribute([dict(s) for s in states], j, new_n)
        out[j] = {enc(key): enc(v) for key, v in state.items()} | done
    return out


# -- applied to a savepoint ----------------------------------------------------------------


@dataclass(frozen=True)
class Rescaled(Savepoint):
    """A savepoint as if taken at the new task counts (:func:`rescale`), with the key
    group of each keyed entry it moved (``{component: {state key: group}}``), so the
    seeding (:func:`key_groups_for`) does not compute them again."""

    key_groups: dict = field(default_factory=dict)


def key_groups_for(savepoint: Savepoint, component: str,
                   key_group: Callable[[Any], int] | None) -> Callable[[Any], int] | None:
    """``key_group`` (a keyed task's state key → key group function, None for per-task
    state), answered from the groups :func:`rescale` computed where it has them."""
    known = (savepoint.key_groups.get(component) if isinstance(savepoint, Rescaled)
             else None)
    if key_group is None or not known:
        return key_group
    return lambda key: known[key] if key in known else key_group(key)


def rescale(savepoint: Savepoint, topology: StormTopology, conf: dict) -> Savepoint:
    """``savepoint`` as if it had been taken at ``topology``'s task counts: the entries of
    each component whose count changed assigned to the new tasks (see the module
    docstring). Components at their old count, and those not in ``topology``, are left as
    they are; a savepoint of format 1 (no layout recorded) is returned unchanged (its
    restore at other counts is refused by ``check_restore``). Call before
    ``check_restore``, which then checks the rest (key fields, groupings).

    Raises:
        SavepointError: a restore that would lose state or misplace it, naming the
            component, its old and new task counts and the reason.
    """
    was = savepoint.layout
    if not was:
        return savepoint
    from actors.state._plan import keyed_state
    from actors.state.savepoints import describe

    now = describe(topology, conf)
    groups = key_group_count(conf)
    changed = {c: (n, len(topology.component_tasks[c]))
               for c, n in savepoint.components.items()
               if c in topology.component_tasks and len(topology.component_tasks[c]) != n}
    _check_forward(savepoint, was, now)
    entries, components = dict(savepoint.entries), dict(savepoint.components)
    key_groups: dict = {}
    for c, (old_n, new_n) in sorted(changed.items()):
        spec = topology.components[c]

        def refuse(why: str, c: str = c, old_n: int = old_n, new_n: int = new_n) -> None:
            raise SavepointError(f"savepoint {savepoint.path}: component {c!r}: savepoint "
                                 f"has {old_n} tasks, this topology has {new_n}, and {why}; "
                                 f"restore with {old_n}")
        def same_groups(c: str = c) -> None:  # (what splits by key group: spouts, keys)
            if was["key_groups"] != groups:
                refuse(f"the savepoint has {was['key_groups']} key groups, {KEY_GROUPS_KEY} "
                       f"is {groups} (a rescale keeps the key-group count, as Flink keeps "
                       f"the max parallelism)")
        old = savepoint.entries.get(c, {})
        try:
            if spec.is_spout:
                same_groups()
                if type(spec.obj).redistribute.__func__ is StatefulSpout.redistribute.__func__:
                    refuse(f"spout class {type(spec.obj).__name__} has no redistribute "
                           f"(its position does not split)")
                entries[c] = assign_spout(type(spec.obj), old, old_n, new_n)
            elif isinstance(spec.obj, TwoPhaseCommitSink):
                entries[c] = assign_transactions(old, new_n)
            elif was["keyed"].get(c) and was["keyed"].get(c) != now["keyed"].get(c):
                refuse(f"the savepoint has {describe_inputs(was['keyed'][c])}, this topology has "
                       f"{describe_inputs(now['keyed'].get(c))} (its keys would be other keys)")
            elif c in now["keyed"] and was["keyed"].get(c) == now["keyed"][c]:
                same_groups()
                kg = keyed_state(topology, c, topology.component_tasks[c][0], conf)[0]
                memo = key_groups[c] = {}

                def group_of(stored: bytes, kg=kg, memo=memo) -> int:
                    key = decode_key(stored)
                    g = memo[key] = kg(key)
                    return g
                entries[c] = assign_keyed(old, old_n, new_n, groups, group_of)
            else:
                refuse("its state is per task, not keyed by a fields grouping (Flink "
                       "refuses non-partitioned state at another parallelism): it cannot "
                       "be split")
        except (NotImplementedError, ValueError) as e:
            if isinstance(e, SavepointError):
                raise
            refuse(str(e))
        components[c] = new_n
    if not changed:
        return savepoint
    # a forward peer (with state or without) moved with its stateful peer: _check_forward
    # let only equal counts at both ends through
    peers = {c for edge in was["forward"] + now["forward"] if set(edge) & set(changed)
             for c in edge}
    moved = {c: now["tasks"][c] for c in peers if c in now["tasks"]}
    layout = {**was, "tasks": {**was["tasks"], **moved,
                               **{c: n for c, (_, n) in changed.items()}}}
    return Rescaled(**{**vars(savepoint), "entries": entries, "components": components,
                       "layout": layout, "key_groups": key_groups})


def check_splits(savepoint: Savepoint, topology: StormTopology, conf: dict) -> None:
    """Refuse a spout state that records a split count (``topology/_splits.py``) under
    another number of splits (key groups), at any task count: its items would fall into
    other splits. (After ``check_restore``, whose refusal of a keyed bolt under another
    key-group count comes first.)

    Raises:
        SavepointError: naming the spout and both counts.
    """
    groups = key_group_count(conf)
    stored = value_encoder()(SPLITS_KEY)
    for c, tasks in sorted(savepoint.entries.items()):
        spec = topology.components.get(c)
        if spec is None or not spec.is_spout:
            continue
        counts = {decode_value(e[stored]) for e in tasks.values() if stored in e}
        if counts - {groups}:
            raise SavepointError(
                f"savepoint {savepoint.path}: spout {c!r}: its state has "
                f"{sorted(counts)[0]} splits, {KEY_GROUPS_KEY} is {groups}: its items "
                f"would fall into other splits; restore with {sorted(counts)[0]}")


def _check_forward(savepoint: Savepoint, was: dict, now: dict) -> None:
    """A forward (chained) edge pairs task k with task k: one whose ends have state and
    do not go together from one equal count to another is refused."""
    for source, target in sorted(set(map(tuple, was["forward"] + now["forward"]))):
        if not {source, target} & set(savepoint.components):
            continue
        old = (was["tasks"].get(source), was["tasks"].get(target))
        new = (now["tasks"].get(source), now["tasks"].get(target))
        if old == new or (old[0] == old[1] and new[0] == new[1]):
            continue
        peer = source if old[0] != new[0] else target
        o, n = (old[0], new[0]) if peer == source else (old[1], new[1])
        raise SavepointError(
            f"savepoint {savepoint.path}: component {peer!r}: savepoint has {o} tasks, "
            f"this topology has {n}, and its forward (chained) edge {source!r} -> "
            f"{target!r} pairs the tasks of a component with state by index, so its peer "
            f"must keep the same task count; restore with {o}")

