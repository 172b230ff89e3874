"""Run one query's topology to its end and measure it: wall time, the CPU of the
topology's processes and of the driver (``psutil``), the whole machine's CPU, latencies."""

from __future__ import annotations

import os
import threading
import time
from array import array
from dataclasses import dataclass, field

import psutil

from benchmarks.nexmark._generator import GeneratorConfig
from benchmarks.nexmark._queries import QUERIES

#: how long a run may take before it is stopped (s)
RUN_TIMEOUT_S = 3600


@dataclass
class QueryRun:
    """What one run of a query measured.

    Attributes:
        query: ``q0`` .. ``q4``.
        events: events generated (all kinds).
        rows: rows in the result file.
        seconds: wall-clock s from the spout's first call to the result file complete:
            the span the events flowed (start-up of the actors left out).
        wall_s: wall-clock s from submit to the topology's completion.
        cpu_s: CPU s (user + system) of the topology's processes (its executor and
            transfer actors and, for q3/q4, the checkpoint coordinator) plus this
            driver, from just after submit (the actors exist and run) to completion.
        machine_cpu_s: CPU s used by the whole machine over the same span (every
            process, Ray's own and anyone else's), from ``psutil.cpu_times``.
        latencies_ms: per tuple, wall-clock ms from the spout's emit to the query's
            measuring point (:attr:`Query.latency_component`).
        paced_events_per_s: the spout's pace, None when unpaced.
        load_1m: the machine's 1-minute load average at the start and at the end (other
            work on a shared machine shows here and in ``machine_cpu_s``).
        mode: ``tuple`` or ``batch``.
        peak_rss_mb: the highest sum of the resident memory (MiB) of the topology's
            processes and the driver, sampled every 0.1 s while it ran.
        cpu_by_stage: ``cpu_s`` split: ``spout`` (the processes of the spout's tasks,
            with the bolts chained into them), ``downstream`` (every other topology
            process) and ``driver``.
    """

    query: str
    events: int
    rows: int
    seconds: float
    wall_s: float
    cpu_s: float
    machine_cpu_s: float
    latencies_ms: array = field(repr=False)
    paced_events_per_s: float | None = None
    load_1m: tuple[float, float] = (0.0, 0.0)
    mode: str = "tuple"
    peak_rss_mb: float = 0.0
    cpu_by_stage: dict = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def events_per_cpu_s(self) -> float:
        return self.events / self.cpu_s


def _busy_cpu_s() -> float:
    """CPU s the whole machine has been busy since boot (all but idle and iowait)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:  # a process that ended: its last reading stands
            pass
    return total


class PeakRss:
    """Samples the summed RSS of ``processes`` every ``interval_s`` in a daemon thread
    from :meth:`start` to :meth:`stop`, which returns the highest sum in MiB."""

    def __init__(self, processes: list[psutil.Process], interval_s: float = 0.1) -> None:
        self._procs, self._interval = processes, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-rss")
        self.peak = 0

    def _sample(self) -> None:
        total = 0
        for p in self._procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def start(self) -> PeakRss:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 2**20


def _coordinator_processes(raylets: set[int]) -> list[psutil.Process]:
    """The checkpoint coordinators' processes under the raylets ``raylets`` (Ray names a
    worker process after its actor class, ``ray::CheckpointCoordinator``, and starts it
    from its node's raylet): the coordinator has no ``pid`` call. Another Ray on this
    machine has other raylets."""
    found = []
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if (cmd and cmd[0].startswith("ray::CheckpointCoordinator")
                and p.info["ppid"] in raylets):
            found.append(p)
    return found


def topology_processes(handle) -> list[psutil.Process]:
    """The processes of a submitted topology: one per executor actor (chained tasks share
    one) and per transfer actor, the checkpoint coordinator's when it has one, and this
    driver. Blocks for one ``pid`` call per actor."""
    import ray

    actors = {id(a): a for a in list(handle.actors.values()) + list(handle.transfers.values())}
    pids = set(ray.get([a.pid.remote() for a in actors.values()], timeout=60))
    procs = [psutil.Process(pid) for pid in sorted(pids)]
    if handle.checkpoints is not None:
        procs += _coordinator_processes({p.ppid() for p in procs})
    return procs + [psutil.Process(os.getpid())]


def _stages(handle, procs: list[psutil.Process]) -> dict[str, list[psutil.Process]]:
    """``procs`` (from :func:`topology_processes`, the driver last) by stage: the spout's
    tasks' processes, the other topology processes, the driver."""
    import ray

    tasks = handle.task_state("events", "started_at")
    spout = set(ray.get([handle.actors[t].pid.remote() for t in tasks], timeout=60))
    return {"spout": [p for p in procs[:-1] if p.pid in spout],
            "downstream": [p for p in procs[:-1] if p.pid not in spout],
            "driver": procs[-1:]}


def run_query(cluster, query: str, config: GeneratorConfig, out: str, parallelism: int = 1,
              conf: dict | None = None, events_per_s: float | None = None,
              name: str | None = None, mode: str = "tuple") -> QueryRun:
    """Submit ``query`` over the events of ``config`` on ``cluster`` (a ``LocalCluster``),
    wait until its result is in ``out`` (a Parquet file), measure, kill it.

    Blocks until the topology completes (``RUN_TIMEOUT_S`` at most).

    Args:
        parallelism: tasks of the spout and of each query bolt (the sink has one).
        conf: topology config (Storm's keys), over this module's (acking off).
        events_per_s: pace the spout (all tasks together); None: as fast as it goes.
        name: the topology's name (default ``nexmark-<query>``).
        mode: ``tuple`` (per-tuple bolts) or ``batch`` (Arrow record batches; q0-q2).

    Raises:
        KeyError: an unknown query.
        ValueError: a mode the query does not run in (before anything is submitted).
        TimeoutError: not complete within ``RUN_TIMEOUT_S`` (the topology is killed).
        cluster.TopologyFailed: an executor died.
    """
    q = QUERIES[query]
    name = name or f"nexmark-{query}"
    topology = q.build(config, out, parallelism, events_per_s, mode)
    conf = {"topology.acker.executors": 0, **(conf or {})}
    wall0, load0 = time.perf_counter(), os.getloadavg()[0]
    handle = cluster.submit_topology(name, conf, topology)
    try:
        procs = topology_processes(handle)
        stages = _stages(handle, procs)
        stage0 = {k: _cpu_s(v) for k, v in stages.items()}
        cpu0, machine0 = _cpu_s(procs), _busy_cpu_s()
        rss = PeakRss(procs).start()
        if not handle.wait(RUN_TIMEOUT_S):
            rss.stop()
            raise TimeoutError(f"{query} did not complete within {RUN_TIMEOUT_S} s:\n"
                               f"{handle.stats().summary()}")
        wall_s = time.perf_counter() - wall0
        peak_rss_mb = rss.stop()
        cpu_s = _cpu_s(procs) - cpu0
        by_stage = {k: _cpu_s(v) - stage0[k] for k, v in stages.items()}
        machine_cpu_s = _busy_cpu_s() - machine0
        started = [t for t in handle.task_state("events", "started_at").values() if t]
        sink = handle.task_state("sink", "finished_at")
        rows = sum(handle.task_state("sink", "rows").values())
        latencies = array("d")
        for part in handle.task_state(q.latency_component, "latencies_ms").values():
            latencies.extend(part)
    finally:
        cluster.kill_topology(name)
    return QueryRun(query, config.events, rows, max(sink.values()) - min(started), wall_s,
                    cpu_s, machine_cpu_s, latencies, events_per_s,
                    (load0, os.getloadavg()[0]), mode, peak_rss_mb, by_stage)
