"""The checkpoint coordinator's Ray actor: one thread runs
:class:`~actors.state._coordinator.CoordinatorCore`; made on first use, so the core's module
imports without Ray."""

from __future__ import annotations

import logging
import threading
import time

from actors.state._coordinator import CoordinatorCore

logger = logging.getLogger("storm_on_ray.checkpoint")

#: the coordinator opens its log again this often (s) while it cannot (Redis away); a
#: restarted task's ask and ``state()`` wait for it this long (s)
LOG_OPEN_RETRY_S = 1.0
#: a message whose call failed goes again this long after (s): the actor restarts
RESEND_AFTER_S = 0.5
LOG_WAIT_S = 5.0
#: the GCS flag set once the log has recorded a round (see ``CoordinatorCore``'s
#: ``log_expected``)
LOG_FLAG = "checkpoint-log"


def checkpoint_coordinator_name(prefix: str) -> str:
    """The Ray actor name of the checkpoint coordinator of the submit named ``prefix``."""
    return f"{prefix}-checkpoints"


def _ray_actor():
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0,
                concurrency_groups={"io": 1})
    class CheckpointCoordinator:
        """The coordinator's actor: one thread runs :class:`CoordinatorCore` (a lock
        serialises its calls and the timer), messages to executors are fire-and-forget
        actor calls by name.

        Args:
            prefix: the submit's actor-name prefix.
            topology_name, conf: for the provider.
            tasks: task id → the actor-name task of its actor (a chained task's host).
            spout_tasks: the spout tasks.
        """

        def __init__(self, prefix: str, topology_name: str, conf: dict, tasks: dict,
                     spout_tasks, ackers=(), publishers=()) -> None:
            from actors._routing import TASK, actor_name
            from actors._store import first_start, was_started

            logging.basicConfig(level=logging.INFO)
            self._prefix = prefix
            self._publishers = tuple(publishers)  # (two-phase-commit sinks' tasks)
            self._hosts = {int(t): int(h) for t, h in tasks.items()}
            self._handles: dict = {}
            self._actor_name = lambda t: actor_name(prefix, TASK, t)
            self._lock = threading.Lock()
            self._stopped = False
            self._started = False
            self._start_wanted = False
            self.core: CoordinatorCore | None = None
            #: messages sent and not yet answered; lost ones waiting to go again
            self._sent: list = []
            self._resend: list = []
            #: task events that came before the log opened (see _with_core)
            self._early: list = []
            self.provider = None
            self._opened = threading.Event()
            restarted = not first_start(prefix, "checkpoints")
            #: the log has recorded a round (a flag in the GCS, which outlives the node)
            self._log_marked = was_started(prefix, LOG_FLAG)
            # the log opens after construction, retried (a restarted coordinator whose
            # Redis is away must not fail its constructor: Ray would not restart it)
            threading.Thread(target=self._open, daemon=True, name="checkpoint-log",
                             args=(topology_name, conf, ackers, spout_tasks, restarted)
                             ).start()

        def _open(self, topology_name, conf, ackers, spout_tasks, restarted) -> None:
            """Open the provider and the log (again every second until they open), make
            the core; a restarted coordinator then recovers."""
            from actors.state.providers import make_provider

            while not self._stopped:
                try:
                    self.provider = make_provider(conf, topology_name, self._prefix)
                    log_ = self.provider.checkpoint_log()
                    core = CoordinatorCore(
                        log_, [t for t in self._hosts if t not in set(ackers)], spout_tasks,
                        conf["topology.state.checkpoint.interval.ms"] / 1000.0,
                        float(conf["topology.state.checkpoint.timeout.secs"]),
                        conf["topology.state.checkpoint.min.pause.ms"] / 1000.0,
                        time.monotonic(), restarted,
                        [t for t in self._hosts if t in set(ackers)], self._log_marked,
                        self._publishers)
                    break
                except Exception as e:  # (its Redis is away): tried again
                    logger.warning("the checkpoint log did not open (%s); trying again", e)
                    time.sleep(LOG_OPEN_RETRY_S)
            else:
                return
            if not self._log_marked:  # marked before the first round is recorded (or now,
                if core.last_id > 0:  # a log seeded from a savepoint)
                    self._mark_log()
                else:
                    core.before_first_record = self._mark_log
            with self._lock:
                self.core = core
                early, self._early = self._early, []
                for fn in early:  # (the events that came before the log opened)
                    self._send(fn(core, time.monotonic()))
            self._opened.set()
            if restarted:  # Ray restarted this actor: nobody calls start() again
                self._recover()
            elif self._start_wanted:
                self.start()

        def _recover(self, timeout: float = 10.0) -> None:
            """A restarted coordinator learns which tasks have ended (they take part no
            more), then starts: its first step rolls every task back."""
            refs = {}
            for t in sorted(self._hosts):
                try:
                    refs[self._handle(t).is_done.remote(t)] = t
                except Exception as e:  # a task restarting too: it asks us itself
                    logger.warning("task %d: not asked whether it ended: %s", t, e)
            ready = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)[0] if refs \
                else []
            for ref in ready:
                try:
                    if ray.get(ref):
                        self.core.finished.add(refs[ref])
                except Exception as e:
                    logger.warning("task %d: %s", refs[ref], e)
            self.start()

        def _handle(self, task: int):
            host = self._hosts.get(task, task)
            h = self._handles.get(host)
            if h is None:
                h = self._handles[host] = ray.get_actor(self._actor_name(host))
            return h

        def _send(self, actions: list) -> None:
            for a in actions:
                for t in a.tasks:
                    try:
                        ref = self._handle(t).checkpoint.remote(a.kind, t, *a.args)
                    except Exception as e:  # an actor being restarted: it rejoins itself
                        logger.warning("checkpoint %s to task %d not sent: %s", a.kind, t, e)
                        continue
                    self._sent.append((ref, a._replace(tasks=(t,))))

        def _resend_lost(self, now: float) -> None:
            """A message whose call failed (Ray fails a call to an actor that is
            restarting: at-most-once actor tasks) is sent again, after
            :data:`RESEND_AFTER_S`, while it still matters
            (:meth:`CoordinatorCore.still_current`): a lost trigger would hold its round
            until the timeout, a lost resume or commit a task for good. Timer thread,
            under the lock."""
            if self._sent:
                refs = [r for r, _ in self._sent]
                done = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
                kept = []
                for ref, a in self._sent:
                    if ref not in done:
                        kept.append((ref, a))
                        continue
                    try:
                        ray.get(ref)
                    except Exception as e:
                        logger.warning("checkpoint %s to task %d lost (%s); sent again",
                                       a.kind, a.tasks[0], type(e).__name__)
                        self._resend.append((now + RESEND_AFTER_S, a))
                self._sent = kept
            due = [a for at, a in self._resend if at <= now]
            self._resend = [(at, a) for at, a in self._resend if at > now]
            self._send([a for a in due if self.core.still_current(a)])

        def _mark_log(self) -> None:
            """Record in the GCS that this submit's log holds rounds: a coordinator
            restarted where the log is not then fails the topology instead of rolling
            every task back to nothing (``CoordinatorCore``'s ``log_expected``)."""
            from actors._store import first_start

            first_start(self._prefix, LOG_FLAG)
            self._log_marked = True

        def start(self) -> None:
            """Start the round timer (once every executor runs; once the log is open)."""
            if self.core is None:
                self._start_wanted = True
                return
            if self._started:
                return
            self._started = True
            with self._lock:
                self._send(self.core.start(time.monotonic()))
            threading.Thread(target=self._timer, daemon=True, name="checkpoints").start()

        def _timer(self) -> None:
            while not self._stopped:
                try:
                    with self._lock:
                        now = time.monotonic()
                        self._send(self.core.tick(now))
                        self._resend_lost(now)
                except Exception:  # a bug: seen, and the rounds go on (a dead timer
                    logger.exception("checkpoint timer")  # would end them for good)
                time.sleep(min(0.05, self.core.interval_s / 4))

        def _with_core(self, fn) -> None:
            """``fn(core, now)`` (a task event into the core), its actions sent; while the
            log is not open yet, kept and applied in order once it is (a task's one-shot
            report, a ``finish()`` that raised, must not be lost to a slow start)."""
            with self._lock:
                if self.core is None:
                    self._early.append(fn)
                    return
                self._send(fn(self.core, time.monotonic()))

        def _event(self, method: str, *args) -> None:
            self._with_core(lambda core, now: getattr(core, method)(*args, now))

        def prepared(self, task: int, checkpoint_id: int, gen: int,
                     finished: bool = False, count: int | None = None) -> None:
            self._with_core(lambda core, now: core.prepared(task, checkpoint_id, gen, now,
                                                            finished, count))

        def paused(self, task: int, gen: int) -> None:
            self._event("paused", task, gen)

        def failed(self, task: int, reason: str, gen: int | None = None) -> None:
            self._with_core(lambda core, now: core.failed(task, reason, now, gen))

        def restoring(self, task: int, gen: int) -> None:
            self._event("restoring", task, gen)

        def lost(self, task: int, checkpoint_id: int | None, where: str) -> None:
            self._event("lost", task, checkpoint_id, where)

        def corrupt(self, task: int, checkpoint_id: int, detail: str = "") -> None:
            self._with_core(lambda core, now: core.corrupt(task, checkpoint_id, now, detail))

        def data_ended(self, task: int, gen: int) -> None:
            self._event("data_ended_at", task, gen)

        def finish_failed(self, task: int, gen: int, reason: str) -> None:
            self._event("finish_failed", task, gen, reason)

        def ended(self, task: int) -> None:
            self._event("ended", task)

        def task_failed(self, task: int, reason: str) -> None:
            self._event("task_failed", task, reason)

        def restarted(self, task: int) -> tuple:
            """A restarted executor asks what to restore: ``(gen, checkpoint id, final,
            finished tasks)``.

            Raises:
                TopologyFailedError: the topology has failed (nothing is restored).
                TimeoutError: the log has not opened within :data:`LOG_WAIT_S` (the
                    task asks again)."""
            if not self._opened.wait(LOG_WAIT_S):
                raise TimeoutError("the checkpoint log is not open yet")
            with self._lock:
                gen, cid, final, finished, actions = self.core.restarted(
                    task, time.monotonic())
                self._send([a._replace(tasks=tuple(t for t in a.tasks
                                                   if self._hosts.get(t, t) != task))
                            for a in actions])
                return gen, cid, final, finished

        def request(self) -> None:
            self._with_core(lambda core, now: core.request(now) or [])

        def state(self) -> dict:
            """The core's figures (see :meth:`CoordinatorCore.state`); while the log is
            not open (waited for up to :data:`LOG_WAIT_S`), ``{"opening": True,
            "failure": None}``."""
            self._opened.wait(LOG_WAIT_S)
            with self._lock:
                if self.core is None:
                    return {"opening": True, "failure": None}
                return self.core.state()

        def stop(self, delete: bool = False) -> None:
            """Stop the timer; with ``delete``, remove the submit's checkpoints."""
            self._stopped = True
            if delete and self.provider is not None:
                self.provider.delete()

    return CheckpointCoordinator


_ACTOR = None


def checkpoint_coordinator_class():
    """The Ray actor class :class:`CheckpointCoordinator` (made on first use, so this
    module imports without Ray)."""
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = _ray_actor()
    return _ACTOR
