"""``TopologyHandle``: a submitted topology's actors, with wait, stats and kill."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors import TASK, WORKER, actor_name
from cluster._registry import _is_dead, _num_restarts, _placement_groups
from cluster._stats import TaskStats, TopologyStats, WorkerStats, stats_html
from topology import Spout, StormTopology, TopologyError

logger = logging.getLogger("storm_on_ray.cluster")


#: how often ``wait`` asks a checkpointed topology's coordinator whether it failed (s)
FAILURE_POLL_S = 1.0


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
        prefix: the submit's actor-name prefix (``storm-<name>-<uuid8>``).
        detached: the topology outlives the driver that submitted it (see ``submit``).
        chained_tasks: tasks chained into another task's actor (they share its actor and
            its restarts); from ``topology`` unless given (``attach``, which has none).
    """

    def __init__(self, name: str, topology: StormTopology, conf: dict,
                 actors: dict[int, ray.actor.ActorHandle], placement_groups: list,
                 task_worker: dict[int, int],
                 transfers: dict[int, ray.actor.ActorHandle] | None = None,
                 prefix: str | None = None, detached: bool = False,
                 chained_tasks: set[int] | None = None) -> None:
        self.prefix = prefix
        self.detached = detached
        self.name = name
        self.topology = topology
        self.conf = conf
        self.actors = actors
        self.transfers = dict(transfers or {})
        self.placement_groups = placement_groups
        self.task_worker = task_worker
        self._killed = False
        self._complete = False
        self.chained_tasks: set[int] = (set(chained_tasks) if chained_tasks is not None
                                        else set(topology.chain_hosts()) if topology
                                        else set())
        #: the checkpoint coordinator of a stateful topology (actors/state), else None
        self.checkpoints = None

    def _checkpoint_coordinator(self):
        """The checkpoint coordinator (by name for an attached handle), or None."""
        if self.checkpoints is None and self.prefix is not None:
            from actors.state import checkpoint_coordinator_name
            try:
                self.checkpoints = ray.get_actor(checkpoint_coordinator_name(self.prefix))
            except ValueError:
                return None
        return self.checkpoints

    @property
    def checkpoint_path(self) -> str | None:
        """Where the local provider keeps this submit's checkpoints
        (``<topology.state.checkpoint.dir>/<name>/<submit id>``); None for a topology
        without state."""
        d = (self.conf or {}).get("topology.state.checkpoint.dir")
        if d is None or self.prefix is None or self._checkpoint_coordinator() is None:
            return None
        return os.path.join(d, self.name, self.prefix)

    def _read_raw(self, checkpoint_id: int | None = None):
        """The committed state as stored (``providers.read_committed``); ValueError: a
        topology without state, or a provider that cannot be read."""
        if self.prefix is None or self._checkpoint_coordinator() is None:
            raise ValueError(f"topology {self.name!r} keeps no checkpoints (no stateful "
                             f"component)")
        from actors.state.providers import read_committed

        return read_committed(dict(self.conf or {}), self.name, self.prefix, checkpoint_id)

    def state(self, checkpoint_id: int | None = None) -> dict:
        """The checkpointed state as of the last committed checkpoint (or
        ``checkpoint_id``): ``{component: {task: {key: value}}}``, read from the
        provider (the local provider's files on this machine, Redis, or a provider of
        the user's that implements ``StateProvider.read_raw``), never from the running
        tasks. Blocks for the reads.

        Raises:
            ValueError: a topology without state, the ``memory`` provider, or a provider
                without ``read_raw``.
        """
        from actors.state._common import decoded

        return decoded(self._read_raw(checkpoint_id))

    def checkpoint_stats(self) -> dict | None:
        """The checkpoint coordinator's figures (None for a topology without state):
        ``last_committed`` and ``in_flight`` checkpoint ids, ``completed`` rounds,
        ``rollbacks``, ``failed_rounds``, ``generation``, ``rolling_back``,
        ``last_duration_ms`` (the last round, from its trigger to its commit). Blocks for
        one actor call (30 s at most).

        Raises:
            ray.exceptions.GetTimeoutError: the coordinator did not answer in 30 s.
        """
        c = self._checkpoint_coordinator()
        return None if c is None else ray.get(c.state.remote(), timeout=30)

    def _await_checkpoint(self, timeout: float) -> bool:
        """Start a checkpoint now and wait up to ``timeout`` s until one that started
        after this call has committed; True if it did (no checkpoints: True at once)."""
        c = self._checkpoint_coordinator()
        if c is None:
            return True
        s0 = ray.get(c.state.remote(), timeout=30)
        if s0["final"]:  # the stream's final checkpoint committed: no round follows it
            return True
        need = s0["completed"] + (2 if s0["in_flight"] is not None else 1)
        ray.get(c.request.remote(), timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ray.get(c.state.remote(), timeout=30)["completed"] >= need:
                return True
            time.sleep(0.05)
        return False

    def savepoint(self, path: str, timeout: float = 120) -> str:
        """Take a checkpoint now and copy it, once committed, to ``path``, a directory
        that outlives the topology (Flink's savepoint): every task's state, spout
        positions, persistent windows and sinks' pending commits, with a
        ``metadata.json`` and a ``_COMMITTED`` marker written last; from any provider
        with ``StateProvider.read_raw`` (local, Redis), restored into any with
        ``submit_topology(..., restore_from=path)``. Blocks until written.

        Args:
            path: a local directory that does not exist or is empty, or a ``pyarrow.fs``
                URI of one (``s3://bucket/sp``, ``gs://…``, ``hdfs://…``, ``file://…``;
                credentials in the environment, not in the URI).
            timeout: seconds to wait for the checkpoint to commit.

        Returns:
            The savepoint's absolute path, or its URI.

        Raises:
            SavepointError: ``path`` exists and is not an empty directory, cannot be
                reached or written, or is a URI pyarrow does not know or that carries
                credentials (named with credentials masked).
            TopologyError: the topology keeps no state, its provider cannot be read
                (``memory``, or a provider without ``read_raw``), or no checkpoint
                committed within ``timeout`` s.
        """
        from actors.state.savepoints import check_target, describe, write_savepoint

        check_target(path)
        if (self.conf or {}).get("topology.state.provider") == "memory":
            raise TopologyError(f"topology {self.name!r}: the memory provider's checkpoints "
                                f"cannot be copied to a savepoint; use local or redis")
        # (a topology that completed, or whose final checkpoint committed, holds all)
        if not self.wait(0) and not self._await_checkpoint(timeout):
            raise TopologyError(f"topology {self.name!r}: no checkpoint committed within "
                                f"{timeout:g} s, so no savepoint was taken")
        try:  # the last committed (it holds what came before the call)
            state = self._read_raw()
        except ValueError as e:
            raise TopologyError(str(e)) from None
        return write_savepoint(path, self.name, state.checkpoint_id, dict(state),
                               {c: list(t) for c, t in
                                self.topology.component_tasks.items()},
                               describe(self.topology, dict(self.conf)))

    def _executor_actors(self) -> list:
        """Each executor actor once (a task chained into another's actor shares it)."""
        seen: dict = {}
        for a in self.actors.values():
            seen.setdefault(id(a), a)
        return list(seen.values())

    def _get(self, refs: list, timeout: float | None, what: str):
        try:
            return ray.get(refs, timeout=timeout)
        except RayActorError as e:
            raise TopologyFailed(f"topology {self.name!r}: an executor died during {what}: "
                                 f"{e}") from e

    def _call_all(self, handles: list, call, timeout: float | None, what: str,
                  tasks: list | None = None) -> list:
        """``call(handle)`` on each actor (``call(handle, task)`` with ``tasks``, one per
        handle), retried while Ray restarts one (its calls fail meanwhile), until
        ``timeout`` s. Raises TopologyFailed for an actor that is dead for good,
        GetTimeoutError when the time runs out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list = [None] * len(handles)
        todo = list(range(len(handles)))
        while todo:
            refs = [call(handles[i]) if tasks is None else call(handles[i], tasks[i])
                    for i in todo]
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

    def wait(self, timeout: float | None = None, progress: bool = False) -> bool:
        """Block until every task has ended its stream; True if so within ``timeout`` s.
        An executor that Ray restarts meanwhile is waited for in its new instance.
        ``progress=True`` draws a progress bar (tqdm; a widget in Jupyter) of the spouts'
        items taken of their total (e.g. a DataFrameSpout's rows), with the components
        under backpressure.

        Raises:
            TopologyFailed: an executor actor died and will not be restarted, or the
                checkpoint coordinator failed the topology (a task's ``finish()`` kept
                raising: the message names its component and task).
        """
        if self._complete:
            return True
        if progress:
            return self._wait_with_progress(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        coordinator = self._checkpoint_coordinator()
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if coordinator is not None:  # (a failure it declares ends the wait)
                try:
                    failure = ray.get(coordinator.state.remote(), timeout=30)["failure"]
                except (RayActorError, GetTimeoutError):  # (restarting: asked next time)
                    failure = None
                if failure is not None:
                    raise TopologyFailed(f"topology {self.name!r}: {failure}")
                left = FAILURE_POLL_S if left is None else min(left, FAILURE_POLL_S)
            try:
                done = self._call_all(self._executor_actors(),
                                      lambda a, left=left: a.wait_done.remote(left),
                                      None if left is None else left + 30, "wait")
            except GetTimeoutError:
                return False
            # an instance restarted during the wait answers at once with its own state
            if all(done) or (deadline is not None and time.monotonic() >= deadline):
                self._complete = all(done)
                return self._complete

    def progress(self, timeout: float = 30) -> dict[str, tuple[int, int | None]]:
        """Spout component → (source items taken so far, the component's total or None),
        for spouts that count (``Spout.progress``; e.g. a DataFrameSpout's rows of its
        frame). One stats call per task (see :meth:`stats`)."""
        return self._progress_of(self.stats(timeout))

    def _progress_of(self, stats: TopologyStats) -> dict[str, tuple[int, int | None]]:
        out = {}
        for c, done in stats.progress().items():
            total = None
            if self.topology is not None and c in self.topology.components:
                spec = self.topology.components[c]
                total = spec.obj.total_items if spec.is_spout else None
            out[c] = (done, total)
        return out

    def _wait_with_progress(self, timeout: float | None) -> bool:
        """:meth:`wait` that draws a tqdm bar (``tqdm.auto``: a widget in Jupyter, text in
        a terminal) of the spouts' items taken of their total, refreshed every 0.5 s."""
        from tqdm.auto import tqdm

        deadline = None if timeout is None else time.monotonic() + timeout
        p = self.progress()
        totals = [t for _, t in p.values()]
        total = sum(totals) if totals and all(t is not None for t in totals) else None
        with tqdm(total=total, desc=self.name, unit="item", dynamic_ncols=True) as bar:
            while True:
                left = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                done = self.wait(left)
                stats = self.stats()
                taken = sum(d for d, _ in self._progress_of(stats).values())
                bar.update(taken - bar.n)
                bp = [f"{r['component']} {r['level']}" for r in stats.rows()
                      if not r["level"].startswith("OK")]
                bar.set_postfix_str("; ".join(bp) if bp else "no backpressure", refresh=True)
                if done or (deadline is not None and time.monotonic() >= deadline):
                    return done

    def watch(self, interval_s: float = 1.0, timeout: float | None = None) -> TopologyStats:
        """Show the live summary (the :meth:`_repr_html_` table) in a notebook cell,
        refreshed every ``interval_s`` s until the topology completes or ``timeout`` s
        pass; in a terminal, print the text summary each time instead. Blocks; returns
        the last stats."""
        try:
            from IPython import get_ipython
            from IPython.display import HTML, display

            shell = get_ipython()
        except ImportError:
            shell = None
        deadline = None if timeout is None else time.monotonic() + timeout
        out = None
        while True:
            stats = self.stats()
            if shell is not None:
                html = HTML(stats_html(stats, self._progress_of(stats)))
                if out is None:
                    out = display(html, display_id=True)
                else:
                    out.update(html)
            else:
                print(stats.summary(), flush=True)
            if stats.complete or (deadline is not None and time.monotonic() >= deadline):
                return stats
            time.sleep(interval_s)

    def _repr_html_(self) -> str:
        """Jupyter's rich view of the handle: the current per-component summary (one
        stats call per task; 10 s at most)."""
        try:
            stats = self.stats(timeout=10)
        except Exception as e:
            from html import escape

            return f"<div>{escape(repr(self))}: stats unavailable ({escape(str(e))})</div>"
        return stats_html(stats, self._progress_of(stats))

    def restarts(self) -> dict[str, int]:
        """Actor → times Ray restarted it: ``"task-<id>"`` for executors and
        ``"worker-<index>"`` for transfer actors (read from Ray's actor table; empty if it
        cannot be read)."""
        named = {actor_name(None, TASK, t): a for t, a in self.actors.items()
                 if t not in self.chained_tasks}
        named.update({actor_name(None, WORKER, w): a for w, a in self.transfers.items()})
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
                             lambda a, t: a.stats.remote(*([] if t is None else [t])),
                             timeout, "stats", tasks + [None] * len(workers))
        ts: list[TaskStats] = raw[:len(tasks)]
        ws = [WorkerStats.from_dict(d) for d in raw[len(tasks):]]
        return TopologyStats(self.name, ts, all(t.state == "done" for t in ts), ws,
                             dict(self.task_worker))

    def collected(self, component_id: str) -> list:
        """Tuples kept by a ``CollectorBolt`` component, all tasks, in task order.

        Each item is ``(task_id, source_component, source_task, source_stream, values)``.
        """
        self._component(component_id)
        tasks = self.topology.component_tasks[component_id]
        parts = self._get([self.actors[t].collected.remote(t) for t in tasks], 60, "collected")
        return [x for p in parts for x in p]

    def dead_letters(self) -> list:
        """The dead letters kept so far by every ``DeadLetterSink`` of the topology (the
        system bolt ``__dead_letters``, and any the user subscribed), as
        ``topology.DeadLetter`` records (``spout``, ``task``, ``msg_id``, ``values``,
        ``reason``, ``attempts``), in component, task and arrival order. The spout tuples
        that failed ``1 + topology.max.replays`` times; empty when that key is unset. Read
        them before :meth:`kill` (they live in the sinks' actors); blocks until every sink
        task answers (60 s at most).

        Raises:
            RuntimeError: the handle was attached without its topology object.
            TopologyFailed: a sink actor died.
        """
        from topology import DeadLetterSink

        if self.topology is None:
            self._component("")  # raises, saying why
        tasks = [t for cid, spec in sorted(self.topology.components.items())
                 if isinstance(spec.obj, DeadLetterSink)
                 for t in self.topology.component_tasks[cid]]
        parts = self._get([self.actors[t].collected.remote(t) for t in tasks], 60,
                          "dead_letters")
        return [x for p in parts for x in p]

    def sink_tables(self, component_id: str) -> list:
        """The rows kept by each task of a ``DatasetSink`` component, as one
        ``pyarrow.Table`` per task that received any (task order). Call it after
        :meth:`wait` for the complete output and before :meth:`kill` (the rows live in the
        sink's actors); it blocks until every sink task answers (60 s at most).

        Raises:
            KeyError: no such component.
            TypeError: the component is not a ``DatasetSink``.
            ValueError: the sink received nothing and has no ``fields`` for a schema.
            TopologyFailed: a sink actor died.
        """
        from topology import DatasetSink

        spec = self._component(component_id)
        if not isinstance(spec.obj, DatasetSink):
            raise TypeError(f"component {component_id!r} is a {type(spec.obj).__name__}, "
                            f"not a DatasetSink; only a DatasetSink keeps rows as tables")
        tasks = self.topology.component_tasks[component_id]
        tables = [t for t in self._get([self.actors[t].sink_table.remote(t) for t in tasks], 60,
                                       "sink_tables") if t is not None]
        if not tables:
            raise ValueError(f"DatasetSink {component_id!r} received nothing and has no "
                             f"fields= to give an empty result a schema")
        return tables

    def to_dataset(self, component_id: str):
        """The rows kept by a ``DatasetSink`` component as a ``ray.data.Dataset`` of Arrow
        blocks, one block per task (:meth:`sink_tables`, then ``ray.data.from_arrow``,
        which runs one small Ray task per block: it needs a free CPU somewhere). Same
        rules and errors as :meth:`sink_tables`."""
        import ray.data

        return ray.data.from_arrow(self.sink_tables(component_id))

    def to_spark(self, component_id: str, spark):
        """The rows kept by a ``DatasetSink`` component as a Spark DataFrame of ``spark``
        (a RayDP session, ``cluster.start_spark``): the Spark → topology → Spark round
        trip. The tables of :meth:`sink_tables` go into Ray's object store and RayDP
        (``ray_dataset_to_spark_dataframe``, what ``Dataset.to_spark`` calls) reads them
        lazily; RayDP's Spark master holds their references, so the DataFrame stays valid
        after :meth:`kill`, until the Spark session stops. No Ray task runs, so this works
        when the topology and Spark hold every CPU. Same rules and errors as
        :meth:`sink_tables`."""
        from connectors.spark import tables_to_spark

        return tables_to_spark(spark, self.sink_tables(component_id))

    def _component(self, component_id: str):
        if self.topology is None:
            raise RuntimeError(f"topology {self.name!r} was attached without its topology "
                               f"object; read its output from the driver that submitted it")
        if component_id not in self.topology.components:
            raise KeyError(f"no component {component_id!r}; known: "
                           f"{sorted(self.topology.components)}")
        return self.topology.components[component_id]

    def task_state(self, component_id: str, attr: str) -> dict[int, Any]:
        """Task id → attribute ``attr`` of that task's spout or bolt object (None where it
        has none), for each task of ``component_id``: introspection for tests and
        notebooks. Values must be picklable; a list is copied."""
        self._component(component_id)
        tasks = self.topology.component_tasks[component_id]
        vals = self._get([self.actors[t].task_state.remote(attr, t) for t in tasks], 60,
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

    def _spout_objects(self) -> list:
        """The driver's spout objects (none for a handle from :func:`attach`)."""
        if self.topology is None:
            return []
        return [spec.obj for _, spec in sorted(self.topology.components.items())
                if spec.is_spout]

    def _spout_hooks(self, hook: Callable[[Spout], None], name: str) -> None:
        """Call ``hook`` (a call of ``Spout.on_drain`` or ``Spout.on_stop``, the driver-side hooks)
        on each spout object; an error is logged, and the other spouts still get theirs."""
        for obj in self._spout_objects():
            try:
                hook(obj)
            except Exception as e:
                logger.warning("topology %r: %s of a %s: %s", self.name, name,
                               type(obj).__name__, e)

    def drain(self, timeout: float | None = None) -> bool:
        """The graceful end of a topology that runs until stopped (ours; Storm has none):
        the spouts stop taking input (each spout's ``drain``; a Spark streaming spout
        takes no new micro-batch), emit their replays and end their streams; event-time
        windows downstream fire as their inputs end; the topology completes. Blocks until
        it has completed or ``timeout`` s passed; True if it completed, then the driver-side
        sources are stopped (``on_stop``). Does not kill: call :meth:`kill` after.

        Raises:
            TopologyFailed: an executor died and will not be restarted.
        """
        self._spout_hooks(lambda s: s.on_drain(), "on_drain")
        spouts = [t for t in self.actors if self._is_spout_task(t)]
        self._call_all([self.actors[t] for t in spouts], lambda a: a.drain.remote(), 60,
                       "drain")
        done = self.wait(timeout)
        if done:
            self._spout_hooks(lambda s: s.on_stop(), "on_stop")
        return done

    def kill(self, wait_secs: float = 0, savepoint: str | None = None) -> None:
        """Stop every task (``close``/``cleanup`` are called), then free the actors, the
        placement groups and its stored copy in the GCS. Blocks up to 30 s for
        ``close``/``cleanup``; a handle from :func:`attach` frees the same.

        Args:
            wait_secs: Storm's ``kill -w``: deactivate the spouts first, then wait this
                many seconds (tuples in flight finish, acks arrive), then kill. A Spark
                streaming spout's ``foreachBatch`` still waiting then raises, so Spark
                commits nothing the topology did not deliver, and its query stops.
            savepoint: Flink's stop-with-savepoint: deactivate the spouts, take a
                savepoint at this path once a checkpoint after the last emit commits
                (:meth:`savepoint`; sinks' transactions of that checkpoint included, and
                published again at restore), then kill.

        Raises:
            SavepointError, TopologyError: the savepoint could not be taken (the
                topology is left deactivated, not killed).
        """
        if self._killed:
            return
        if savepoint is not None:
            from actors.state.savepoints import check_target

            check_target(savepoint)
            self.deactivate()
            self.savepoint(savepoint, timeout=max(wait_secs or 0, 120))
        if wait_secs and wait_secs > 0:
            self.deactivate()
            t0 = time.monotonic()
            if not self._await_checkpoint(wait_secs):  # what was emitted is committed
                logger.warning("topology %r: no checkpoint committed within kill -w %g s",
                               self.name, wait_secs)
            time.sleep(max(0.0, wait_secs - (time.monotonic() - t0)))
        self._killed = True
        try:
            ray.get([a.shutdown.remote() for a in self._executor_actors()], timeout=30)
        except Exception as e:  # dying actors: we kill them anyway
            logger.warning("topology %r: shutdown: %s", self.name, e)
        self._spout_hooks(lambda s: s.on_stop(), "on_stop")
        checkpoints = self._checkpoint_coordinator()
        if checkpoints is not None:  # (a new submit starts empty: nothing to keep)
            try:
                ray.get(checkpoints.stop.remote(delete=True), timeout=30)
            except Exception as e:
                logger.warning("topology %r: checkpoints not deleted: %s", self.name, e)
            ray.kill(checkpoints, no_restart=True)
        for a in self._executor_actors() + list(self.transfers.values()):
            ray.kill(a, no_restart=True)
        pgs = self.placement_groups or _placement_groups(self.prefix)
        for pg in pgs:
            ray.util.remove_placement_group(pg)
        if self.prefix is not None:
            from actors import delete_topology

            delete_topology(self.prefix)

    def __repr__(self) -> str:
        return (f"TopologyHandle({self.name!r}, {len(self.actors)} tasks, "
                f"{len(set(self.task_worker.values()))} worker(s))")
