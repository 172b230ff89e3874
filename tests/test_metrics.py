"""Metrics: Flink's busy / idle / backpressured time, the backpressure level and its cause,
Storm's capacity and execute latency, the stall detector, and their export through
ray.util.metrics, read back from Ray's Prometheus endpoint."""

from __future__ import annotations

import urllib.request

import ray

from actors import ExecutorCore, make_executor
from actors._metrics import TaskMetrics, backpressure_level
from cluster import TopologyStats
from tests._util import until
from tests.components import PassBolt, SeqSpout, StuckBolt
from topology import ACKER_ID, CollectorBolt, TopologyBuilder


def test_backpressure_levels_use_flinks_thresholds():
    assert [backpressure_level(ms) for ms in (0, 100, 101, 500, 501, 1000)] == [
        "OK", "OK", "LOW", "LOW", "HIGH", "HIGH"]


def test_blocked_spout_is_backpressured_by_its_destination_then_stalled():
    """Ray-free: a spout whose only destination never consumes spends the interval held
    by that task (level HIGH, cause = the task) and, with its emits pending and no
    progress past the timeout, is reported stalled."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology()  # sink = 1, src = 2
    conf = {"topology.executor.receive.buffer.size": 8, "topology.producer.batch.size": 2,
            "topology.batch.flush.interval.millis": 0}
    spout = make_executor("t", topo, conf, 2, {1: 0, 2: 0})
    bolt = make_executor("t", topo, conf, 1, {1: 0, 2: 0})  # never started
    spout.connect({1: ExecutorCore.make_queue_sink(bolt.queue, 2)})
    metrics = TaskMetrics(spout, stall_timeout_s=0.3)
    spout.start()
    try:
        until(lambda: spout.outbox.pending_emits, 10)
        metrics.sample()  # an interval in which the spout only waits for the sink
        held0 = spout.backpressure_wait_s
        # the interval must outlast the stall timeout (0.3 s): wait until the spout has
        # been held for 0.4 s of it by its own clock
        until(lambda: spout.backpressure_wait_s - held0 >= 0.4, 10, "the spout held 0.4 s",
              interval=0.01)
        snap = spout.stats(metrics.sample())
        assert snap.backpressure_level == "HIGH" and snap.backpressure_cause == 1
        assert snap.backpressured_time_ms_per_second > 500
        assert snap.stalled and snap.stalled_seconds >= 0.3
        assert snap.transferred == 8  # taken by the queue; a full batch of 2 waits
        bolt.queue.consume(lambda el: None)  # room again: progress ends the stall
        until(lambda: not metrics.sample().stalled, 10)
    finally:
        spout.stop()


def test_no_busy_fraction_before_the_first_interval_then_an_idle_task_shows_idle():
    """Ray-free: before a task closes its first metrics interval its stats carry no rate,
    fraction or level (None, shown as ``-``), not a false 100% busy; after one interval a
    task with no input (the acker of a topology whose spout never emits) is idle."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(0))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1)
    acker = topo.component_tasks[ACKER_ID][0]
    core = make_executor("t", topo, {}, acker,
                         {t: 0 for ts in topo.component_tasks.values() for t in ts})
    metrics = TaskMetrics(core, stall_timeout_s=10)
    core.start()
    try:
        before = core.stats(metrics.last)
        assert metrics.last is None and before.state == "running"
        assert before.busy_time_ms_per_second is None and before.capacity is None
        assert before.backpressure_level is None and not before.stalled
        view = TopologyStats("t", [before], False)
        assert view.rows()[0]["busy"] is None and view.backpressure(ACKER_ID) == (None, "-")
        assert f"{ACKER_ID:<16}" in view.summary() and "<td>-</td>" in view._repr_html_()
        until(lambda: core.idle_wait_s > 0.2, 10, "the acker waiting for input")
        after = core.stats(metrics.sample())
        assert after.idle_time_ms_per_second > 500 and after.busy_time_ms_per_second < 500
        assert after.backpressure_level == "OK" and after.capacity == 0.0
    finally:
        core.stop()


def _prometheus_values(metric: str, topology: str) -> dict[str, float]:
    """component:task → value of ``metric`` for ``topology``, from every node's Prometheus
    endpoint (Ray's metrics agent)."""
    out = {}
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node.get("Alive") or not port:
            continue
        try:
            with urllib.request.urlopen(f"http://{node['NodeManagerAddress']}:{port}/metrics",
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(metric + "{") and f'topology="{topology}"' in line:
                labels, value = line.rsplit(" ", 1)
                tags = dict(kv.split("=", 1) for kv in labels[len(metric) + 1:-1].split(","))
                key = f"{tags['component'].strip(chr(34))}:{tags['task'].strip(chr(34))}"
                out[key] = float(value)
    return out


def test_slow_consumer_metrics_in_stats_and_in_rays_metrics(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("slow", PassBolt(delay_s=0.002)).shuffle_grouping("src")
    conf = {"topology.executor.receive.buffer.size": 64, "topology.producer.batch.size": 8,
            "topology.metrics.interval.secs": 0.5, "topology.stats.sample.rate": 1.0,
            "topology.acker.executors": 0}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    slow_task = handle.topology.component_tasks["slow"][0]
    try:
        def held():
            s = handle.stats()
            src, slow = s.component("src")[0], s.component("slow")[0]
            return (src.backpressure_level == "HIGH"
                    and (slow.busy_time_ms_per_second or 0) > 500 and s) or None

        s = until(held, 60, "the spout held by the slow bolt")
        src, slow = s.component("src")[0], s.component("slow")[0]
        assert src.backpressure_cause == slow_task
        assert slow.backpressure_level == "OK" and slow.execute_latency_ms >= 1.5
        assert slow.capacity > 0.5 and 100 < slow.executed_per_s < 600
        assert src.transferred > 0 and not s.stalled
        assert f"HIGH (task {slow_task})" in s.summary()
        # each task's process exports on its own schedule: wait for each figure
        until(lambda: _prometheus_values("ray_storm_backpressured_time_ms_per_second",
                                         name).get(f"src:{src.task}", 0) > 500, 90,
              "the spout's backpressured time in Ray's metrics", interval=0.5)
        until(lambda: _prometheus_values("ray_storm_busy_time_ms_per_second",
                                         name).get(f"slow:{slow_task}", 0) > 500, 90,
              "the slow bolt's busy time in Ray's metrics", interval=0.5)
    finally:
        cluster.kill_topology(name)


def test_stall_detector_names_the_stuck_task(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10**9))
    b.set_bolt("stuck", StuckBolt()).shuffle_grouping("src")
    conf = {"topology.executor.receive.buffer.size": 16, "topology.producer.batch.size": 4,
            "topology.metrics.interval.secs": 0.2, "topology.stall.timeout.secs": 1.0,
            "topology.acker.executors": 0}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        # the stuck bolt, and the spout held by it (each once its own timeout has passed)
        s = until(lambda: (st := handle.stats()).stalled and {
            t.component for t in st.stalled_tasks()} == {"src", "stuck"} and st, 60,
            "a stall report naming both tasks")
        assert s.component("src")[0].backpressure_cause == s.component("stuck")[0].task
        assert "STALLED stuck:" in s.summary()
    finally:
        cluster.kill_topology(name)
