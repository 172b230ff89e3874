"""What Ray's own tables say about submitted topologies, for a driver that holds no
handle: their actors by name (``find_topologies``, ``attach``), their placement groups by
name, and an actor's record in the GCS (restarts, death)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import ray

from actors import TASK, parse_actor_name

if TYPE_CHECKING:
    from cluster._handle import TopologyHandle

logger = logging.getLogger("storm_on_ray.cluster")


def placement_group_name(prefix: str) -> str:
    """The name of the placement group of the submit named ``prefix``."""
    return f"{prefix}-pg"


def _placement_groups(prefix: str | None) -> list:
    """The live placement groups of the submit named ``prefix`` (found by name in Ray's
    placement-group table, so a handle from :func:`attach` can free them)."""
    if prefix is None:
        return []
    from ray.util.placement_group import PlacementGroup

    out = []
    for pg_id, info in ray.util.placement_group_table().items():
        if info.get("name") == placement_group_name(prefix) and info.get(
                "state") != "REMOVED":
            out.append(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
    return out


def _actor_record(handle) -> dict | None:
    # Ray's GCS actor table (what ``ray list actors`` shows); the public state API needs the
    # dashboard, which local and test clusters run without
    try:
        from ray._private.state import actors

        return actors(handle._actor_id.hex())
    except Exception:
        return None


def _num_restarts(handle) -> int | None:
    rec = _actor_record(handle)
    return None if rec is None else int(rec.get("NumRestarts", 0))


def _is_dead(handle) -> bool:
    rec = _actor_record(handle)
    return rec is not None and rec.get("State") == "DEAD"


def find_topologies() -> dict[str, dict]:
    """Topologies running on the connected Ray cluster, found by their actors' names (any
    namespace): name → ``{"prefix", "namespace", "tasks": {id: actor name},
    "workers": {index: actor name}}``."""
    out: dict[str, dict] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        n = parse_actor_name(entry["name"])
        if n is None:
            continue
        t = out.setdefault(n.topology, {"prefix": n.prefix, "namespace": entry["namespace"],
                                        "tasks": {}, "workers": {}})
        (t["tasks"] if n.kind == TASK else t["workers"])[n.index] = entry["name"]
    return out


def attach(name: str) -> TopologyHandle:
    """A handle on a topology submitted by another driver (stats, activate, deactivate,
    kill; not ``collected``/``task_state``, which need the topology object).

    Raises:
        KeyError: no running topology of that name (the message lists those running).
    """
    found = find_topologies()
    if name not in found:
        raise KeyError(f"no running topology {name!r}; running: {sorted(found)}")
    t = found[name]
    ns = t["namespace"]
    actors = {task: ray.get_actor(n, namespace=ns) for task, n in t["tasks"].items()}
    hosts: dict[int, int] = {}
    try:  # the tasks chained into another's actor have no actor name of their own
        from actors import StoredTopology

        hosts = StoredTopology(t["prefix"]).load().chain_hosts()
        actors.update({task: actors[h] for task, h in hosts.items() if h in actors})
    except Exception as e:  # an older topology, or killed meanwhile: its own tasks only
        logger.warning("topology %r: chained tasks not found: %s", name, e)
    transfers = {w: ray.get_actor(n, namespace=ns) for w, n in t["workers"].items()}
    from cluster._handle import TopologyHandle

    return TopologyHandle(name, None, {"topology.executor.max.restarts": -1}, actors, [], {},
                          transfers, prefix=t["prefix"], chained_tasks=set(hosts))
