"""``TopologyHandle``: a submitted topology's actors, with wait, stats and kill."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from cluster._stats import TaskStats, TopologyStats, WorkerStats
from topology import StormTopology

logger = logging.getLogger("storm_on_ray.cluster")


class TopologyFailed(RuntimeError):
    """An executor actor died or the runtime failed; the message names the task."""


class TopologyHandle:
    """A running topology: its executor actors (one per task), its transfer actors (one per
    worker when there are several) and its placement groups (one per worker).

    Attributes:
        name: the name given at submit.
        topology: the submitted topology.
        conf: the validated config.
        task_worker: task id → worker index.
        transfers: worker index → transfer actor (empty for a one-worker topology).
    """

    def __init__(self, name: str, topology: StormTopology, conf: dict,
                 actors: dict[int, ray.actor.ActorHandle], placement_groups: list,
                 task_worker: dict[int, int],
                 transfers: dict[int, ray.actor.ActorHandle] | None = None) -> None:
        self.name = name
        self.topology = topology
        self.conf = conf
        self.actors = actors
        self.transfers = dict(transfers or {})
        self.placement_groups = placement_groups
        self.task_worker = task_worker
        self._killed = False
        self._complete = False

    def _get(self, refs: list, timeout: float | None, what: str):
        try:
            return ray.get(refs, timeout=timeout)
        except RayActorError as e:
            raise TopologyFailed(f"topology {self.name!r}: an executor died during {what}: "
                                 f"{e}") from e

    def _call_all(self, handles: list, call, timeout: float | None, what: str) -> list:
        """``call(handle)`` on each actor, retried while Ray restarts one (its calls fail
        meanwhile), until ``timeout`` s. Raises TopologyFailed for an actor that is dead
        for good, GetTimeoutError when the time runs out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list = [None] * len(handles)
        todo = list(range(len(handles)))
        while todo:
            refs = [call(handles[i]) for i in todo]
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
            if len(ready) < len(refs):
                raise GetTimeoutError(f"topology {self.name!r}: {what} timed out")
            retry = []
            for i, ref in zip(todo, refs, strict=True):
                try:
                    out[i] = ray.get(ref)
                except RayActorError as e:
                    if self.max_restarts == 0 or _is_dead(handles[i]):
                        raise TopologyFailed(f"topology {self.name!r}: an actor died during "
                                             f"{what}: {e}") from e
                    retry.append(i)  # restarting: ask the new instance
            todo = retry
            if todo:
                time.sleep(0.1)
        return out

    @property
    def max_restarts(self) -> int:
        return self.conf.get("topology.executor.max.restarts", 0)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every task has ended its stream; True if so within ``timeout`` s.
        An executor that Ray restarts meanwhile is waited for in its new instance.

        Raises:
            TopologyFailed: an executor actor died and will not be restarted.
        """
        if self._complete:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                done = self._call_all(list(self.actors.values()),
                                      lambda a, left=left: a.wait_done.remote(left),
                                      None if left is None else left + 30, "wait")
            except GetTimeoutError:
                return False
            # an instance restarted during the wait answers at once with its own state
            if all(done) or (deadline is not None and time.monotonic() >= deadline):
                self._complete = all(done)
                return self._complete

    def restarts(self) -> dict[str, int]:
        """Actor → times Ray restarted it: ``"task-<id>"`` for executors and
        ``"worker-<index>"`` for transfer actors (read from Ray's actor table; empty if it
        cannot be read)."""
        named = {f"task-{t}": a for t, a in self.actors.items()}
        named.update({f"worker-{w}": a for w, a in self.transfers.items()})
        out = {}
        for key, a in named.items():
            n = _num_restarts(a)
            if n is not None:
                out[key] = n
        return out

    def stats(self, timeout: float = 30) -> TopologyStats:
        """Per-task statistics (one control call per task, answered even under load).

        Raises:
            TopologyFailed: an executor actor died.
        """
        tasks = sorted(self.actors)
        workers = sorted(self.transfers)
        raw = self._call_all([self.actors[t] for t in tasks]
                             + [self.transfers[w] for w in workers],
                             lambda a: a.stats.remote(), timeout, "stats")
        ts = [TaskStats.from_dict(d) for d in raw[:len(tasks)]]
        ws = [WorkerStats.from_dict(d) for d in raw[len(tasks):]]
        return TopologyStats(self.name, ts, all(t.state == "done" for t in ts), ws,
                             dict(self.task_worker))

    def collected(self, component_id: str) -> list:
        """Tuples kept by a ``CollectorBolt`` component, all tasks, in task order.

        Each item is ``(task_id, source_component, source_task, source_stream, values)``.
        """
        if component_id not in self.topology.components:
            raise KeyError(f"no component {component_id!r}; known: "
                           f"{sorted(self.topology.components)}")
        tasks = self.topology.component_tasks[component_id]
        parts = self._get([self.actors[t].collected.remote() for t in tasks], 60, "collected")
        return [x for p in parts for x in p]

    def task_state(self, component_id: str, attr: str) -> dict[int, Any]:
        """Task id → attribute ``attr`` of that task's spout or bolt object (None where it
        has none), for each task of ``component_id``: introspection for tests and
        notebooks. Values must be picklable; a list is copied."""
        if component_id not in self.topology.components:
            raise KeyError(f"no component {component_id!r}; known: "
                           f"{sorted(self.topology.components)}")
        tasks = self.topology.component_tasks[component_id]
        vals = self._get([self.actors[t].task_state.remote(attr) for t in tasks], 60,
                         "task_state")
        return dict(zip(tasks, vals, strict=True))

    def activate(self) -> None:
        """Storm's ``activate``: spouts call ``next_tuple`` again (after :meth:`deactivate`)."""
        self._set_active(True)

    def deactivate(self) -> None:
        """Storm's ``deactivate``: spouts stop calling ``next_tuple`` (their ``deactivate``
        hook runs); tuples in flight finish and acks still arrive. Returns at once."""
        self._set_active(False)

    def _set_active(self, active: bool) -> None:
        spouts = [t for t, a in self.actors.items() if self._is_spout_task(t)]
        self._call_all([self.actors[t] for t in spouts], lambda a: a.set_active.remote(active),
                       60, "activate" if active else "deactivate")

    def _is_spout_task(self, task: int) -> bool:
        if self.topology is not None:
            return self.topology.components[self.topology.task_component(task)].is_spout
        return True  # attached without the topology: bolts ignore it

    def kill(self) -> None:
        """Stop every task (``close``/``cleanup`` are called), then free the actors."""
        if self._killed:
            return
        self._killed = True
        try:
            ray.get([a.shutdown.remote() for a in self.actors.values()], timeout=30)
        except Exception as e:  # dying actors: we kill them anyway
            logger.warning("topology %r: shutdown: %s", self.name, e)
        for a in list(self.actors.values()) + list(self.transfers.values()):
            ray.kill(a, no_restart=True)
        for pg in self.placement_groups:
            ray.util.remove_placement_group(pg)

    def __repr__(self) -> str:
        return (f"TopologyHandle({self.name!r}, {len(self.actors)} tasks, "
                f"{len(set(self.task_worker.values()))} worker(s))")


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


# a submit's actor names: storm-<topology>-<uuid8>-task-<id> / -worker-<index>
_NAME_RE = re.compile(r"^(storm-(?P<name>.+)-[0-9a-f]{8})-(?P<kind>task|worker)-(?P<n>\d+)$")


def find_topologies() -> dict[str, dict]:
    """Topologies running on the connected Ray cluster, found by their actors' names (any
    namespace): name → ``{"prefix", "namespace", "tasks": {id: actor name},
    "workers": {index: actor name}}``."""
    out: dict[str, dict] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        m = _NAME_RE.match(entry["name"])
        if m is None:
            continue
        t = out.setdefault(m["name"], {"prefix": m[1], "namespace": entry["namespace"],
                                       "tasks": {}, "workers": {}})
        (t["tasks"] if m["kind"] == "task" else t["workers"])[int(m["n"])] = entry["name"]
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
    transfers = {w: ray.get_actor(n, namespace=ns) for w, n in t["workers"].items()}
    return TopologyHandle(name, None, {"topology.executor.max.restarts": -1}, actors, [], {},
                          transfers)
