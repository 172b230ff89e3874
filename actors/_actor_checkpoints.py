"""The executor actor's checkpoint wiring: its tasks' stores, the coordinator's answer
for a restarted actor, and the hooks a task's checkpointing calls (``actors/state``)."""

from __future__ import annotations

import functools
import logging

import ray

from actors.state._manifest import ManifestedStore
from actors.state._plan import is_stateful, keyed_state
from actors.state._task import enable_checkpoints

logger = logging.getLogger("storm_on_ray.actor")
#: a restarted actor waits this long (s) in its constructor for the checkpoint
#: coordinator's answer; past it the executor thread asks
ASK_TIMEOUT_S = 10.0


class CheckpointWiring:
    """Mixed into ``actors._actor.ExecutorActor`` (which sets ``core``, ``cores``,
    ``_prefix``, ``_sinks``, ``_actor_of``)."""

    def _enable_checkpoints(self, topology_name, topology, conf, rejoining: bool) -> None:
        """Every task of this actor takes part in checkpoints (actors/state): a stateful
        one gets its store from the provider (keyed by key group when fields-grouped); a
        restarted actor asks the coordinator which checkpoint to restore and starts
        paused (its restart rolls the whole topology back)."""
        from actors.state._coordinator_actor import checkpoint_coordinator_name
        from actors.state.providers import make_provider

        gen, cid, final, finished = 0, None, False, ()
        self._checkpoints = ray.get_actor(checkpoint_coordinator_name(self._prefix))
        self._restart_answer = self._restart_ref = None
        provider = make_provider(conf, topology_name, self._prefix)
        if rejoining:  # asked here, or by the executor thread (a constructor that raises
            try:  # is not restarted)
                gen, cid, final, finished = self._ask_restart(timeout=ASK_TIMEOUT_S)
            except Exception as e:
                logger.warning("task %d: the checkpoint coordinator did not answer (%s); "
                               "asked again once started", self.core.task_id, e)
                gen = None
        else:  # a submit from a savepoint starts from the checkpoint it seeded
            committed = provider.checkpoint_log().load()[2]
            cid = committed[-1] if committed else None
        #: each stateful task's store, checked against the commit manifest at a restore
        self._stores: dict[int, ManifestedStore] = {}
        for core in self.cores.values():  # (the host first: its chain shares its inbox)
            store = None
            if is_stateful(core.obj):
                store = self._stores[core.task_id] = ManifestedStore(
                    provider.task_store_at(
                        core.component_id, core.task_id,
                        topology.component_tasks[core.component_id].index(core.task_id)),
                    functools.partial(self._manifest_entry, provider, core.task_id))
            key_group, groups = keyed_state(topology, core.component_id, core.task_id,
                                            core.conf)
            cp = enable_checkpoints(core, store, gen, cid, rejoining, key_group, groups,
                                    final, tuple(finished))
            cp.report = self._report_checkpoint
            cp.ask = self._ask_restart
            cp.grant = functools.partial(self._grant, core.task_id)
            cp.reset_sinks = functools.partial(self._reset_sinks, core.task_id)

    def _manifest_entry(self, provider, task: int, checkpoint_id: int) -> tuple | None:
        """``task``'s entry in the commit manifest of ``checkpoint_id`` (the provider's
        log, opened on first use; raises what reading it raises: the restore is retried)."""
        log_ = getattr(self, "_manifest_log", None)
        if log_ is None:
            log_ = self._manifest_log = provider.checkpoint_log()
        return (log_.manifest(checkpoint_id) or {}).get(task)

    def _ask_restart(self, timeout: float = 10.0) -> tuple:
        """The coordinator's answer for this restarted actor's tasks, ``(gen, checkpoint
        id, final, finished tasks)``: asked once per actor (each ask rolls the topology
        back), a pending ask waited for again. Raises what ``ray.get`` raised."""
        if self._restart_answer is None:
            if self._restart_ref is None:
                self._restart_ref = self._checkpoints.restarted.remote(self.core.task_id)
            try:
                self._restart_answer = tuple(ray.get(self._restart_ref, timeout=timeout))
            except ray.exceptions.GetTimeoutError:
                raise
            except Exception:  # the call failed: asked anew next time
                self._restart_ref = None
                raise
        return self._restart_answer

    def _report_checkpoint(self, method: str, *args) -> None:
        """A task's message to the checkpoint coordinator (fire and forget); a stateful
        task's ``prepared`` gets the entry count its store wrote (the commit manifest)."""
        if method == "prepared" and len(args) == 4:
            store = self._stores.get(args[0])
            written = store.written if store is not None else None
            if written is not None and written[0] == args[1]:
                args = (*args, written[1])
        try:
            getattr(self._checkpoints, method).remote(*args)
        except Exception as e:  # the coordinator restarts: it rolls back by itself
            self.core.errors.report(e, f"checkpoint report ({method})")

    def _grant(self, task: int, src: int, epoch: int, ack: int) -> None:
        """Alignment is over: give ``src`` the credit for the frames ``task`` held."""
        try:
            self._actor_of(src).credit.remote(src, task, epoch, ack)
        except Exception as e:  # a dead sender starts a new epoch anyway
            self.core.errors.report(e, f"credit to task {src}")

    def _reset_sinks(self, task: int, gen: int) -> None:
        for sink in self._sinks[task]:
            sink.reset_epoch(gen)
