"""Which tasks take part in checkpoints, and how their state is keyed (read at submit and
by each executor; pure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from topology import StormTopology, WindowedBolt
from topology._keygroups import key_group_count, key_group_range, state_key_group
from topology._state import _Stateful
from topology._two_phase import TwoPhaseCommitSink

#: the config key of the windows' ack-on-entry rule (actors/windowing/executor.py)
ACK_ON_ENTRY = "topology.bolts.window.ack.on.entry"


def is_stateful(obj: Any) -> bool:
    """True for a component whose state is checkpointed."""
    return isinstance(obj, _Stateful)


def checkpointed(topology: StormTopology, conf: dict) -> bool:
    """True when the topology runs checkpoints: some bolt is stateful (a stateful spout
    alone keeps its position only where checkpoints run) or a ``TwoPhaseCommitSink``; or a
    windowed bolt takes input from a spout whose source waits for acks (a
    ``StreamingDataFrameSpout`` with msg ids), acking is on and
    ``topology.bolts.window.ack.on.entry`` is unset (the plan's choice: its windows are
    persistent, so Spark commits only rows in a committed checkpoint). Every windowed bolt
    of a checkpointed topology runs with persistent windows."""
    comps = topology.components.values()
    if any(not spec.is_spout and (is_stateful(spec.obj)
                                  or isinstance(spec.obj, TwoPhaseCommitSink))
           for spec in comps):
        return True
    return (bool(topology.acker_tasks) and conf.get(ACK_ON_ENTRY) is None
            and any(spec.is_spout and spec.obj.acks_hold_source for spec in comps)
            and any(isinstance(spec.obj, WindowedBolt) for spec in comps))


def keyed_state(topology: StormTopology, component: str, task: int, conf: dict
                ) -> tuple[Callable[[Any], int] | None, range | None]:
    """The state key → key group function and the groups that ``task`` owns, for a
    stateful bolt whose every input is a fields grouping on the same number of fields
    (its state is keyed: a key is the grouped value, or the tuple of them); ``(None,
    None)`` otherwise (per-task state)."""
    spec = topology.components[component]
    if spec.is_spout or not spec.inputs or not is_stateful(spec.obj):
        return None, None
    arities = {len(g.fields) if g.kind == "fields" and g.fields else 0 for g in spec.inputs}
    if len(arities) != 1 or 0 in arities:
        return None, None
    arity = arities.pop()
    groups = key_group_count(conf)
    tasks = list(topology.component_tasks[component])
    owned = key_group_range(tasks.index(task), len(tasks), groups)
    return (lambda key: state_key_group(key, arity, groups)), owned


