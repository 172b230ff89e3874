"""A lost Ray node, in a process of its own (the suite's session cluster cannot be
re-initialised in-process): ``python -m tests._node_loss DIR [REDIS_PORT [redis-only]]
[--s3 URI]``.

Starts a 3-node ``ray.cluster_utils.Cluster`` (one CPU per node, no dashboard), submits a
stateful word count behind a position-keeping spout with its three workers one per node
(each worker's bundle needs more than half a node, so two never share one), and once a
checkpoint has committed halfway through the stream removes a non-head node (every
process on it dies: executors, a transfer actor). With the ``local`` provider it then
deletes the task files that node's tasks wrote (what a real node loss does to a node's
disk). A node joins back, the spout's gate opens, and the topology is waited for. With a
``REDIS_PORT`` the scenario runs with the redis provider first, then with ``local``, in
the same cluster; with ``--s3 URI`` it also runs with the ``local`` provider's checkpoints
under that ``s3://`` URI (objects survive the node), before ``local``.

Prints one JSON line per scenario: ``provider``, ``outcome`` ("complete", "failed" or
"timeout"), the failure's text, the final committed counts (redis), the expected ones,
and ``recovery_s`` (node removed → every task running again, restored).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import time

N, KEYS, TASKS = 3000, 13, 3
#: the bound on the whole scenario after the node is lost (s)
WAIT_S = 150


def _running_again(handle, gen: int, since: float) -> float | None:
    """Seconds from ``since`` until the coordinator resumed every task in a generation
    after ``gen`` (each restored and paused first, the restarted ones included); None
    before."""
    import ray

    try:
        state = ray.get(handle.checkpoints.state.remote(), timeout=1)
    except Exception:
        return None
    if state.get("generation") == gen or state.get("rolling_back", True):
        return None
    return time.monotonic() - since


def main(argv: list[str]) -> list[dict]:
    s3 = None
    if "--s3" in argv:
        i = argv.index("--s3")
        s3, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    directory = argv[0]
    import ray
    import ray.cloudpickle
    from ray.cluster_utils import Cluster

    from cluster import LocalCluster
    from tests import components

    ray.cloudpickle.register_pickle_by_value(components)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                       "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1, include_dashboard=False)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="ERROR")
    lc = LocalCluster()
    try:
        providers = (["redis"] if argv[1:] else []) + (["s3"] if s3 else []) + (
            [] if argv[2:] == ["redis-only"] else ["local"])
        return [scenario(c, lc, provider, os.path.join(directory, provider), argv[1:2], s3)
                for provider in providers]
    finally:
        ray.shutdown()
        c.shutdown()


def scenario(c, lc, provider: str, directory: str, redis_port: list,
             s3: str | None = None) -> dict:
    """One topology through the loss of one node (see the module)."""
    import ray

    from actors.state._common import decoded
    from actors.state.providers import make_provider
    from cluster import TopologyFailed
    from tests.components import FileGatedKeySpout, StatefulWordCount, merged_counts
    from topology import TopologyBuilder

    os.makedirs(directory, exist_ok=True)
    gate = os.path.join(directory, "gate")
    with open(gate, "w", encoding="utf-8") as f:
        f.write(str(N // 2))
    b = TopologyBuilder()
    b.set_spout("src", FileGatedKeySpout(KEYS, N, gate), TASKS)
    b.set_bolt("count", StatefulWordCount(), TASKS).fields_grouping("src", ["word"])
    conf = {"topology.workers": 3, "topology.worker.placement": "spread",
            "topology.acker.executors": 0, "topology.component.cpu.pcore.percent": 20,
            "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.timeout.secs": 20,
            "topology.state.provider": "local" if provider == "s3" else provider}
    if provider == "s3":
        conf["topology.state.checkpoint.dir"] = s3
    elif provider == "redis":
        conf["topology.state.provider.config"] = {"host": "127.0.0.1",
                                                  "port": int(redis_port[0])}
    else:
        conf["topology.state.checkpoint.dir"] = os.path.join(directory, "checkpoints")
    handle = lc.submit_topology("nodeloss", conf, b.create_topology())
    out: dict = {"provider": provider, "expected": dict(
        collections.Counter(f"k{i % KEYS}" for i in range(N)))}
    try:
        deadline = time.monotonic() + 60
        while True:  # a checkpoint committed with the spouts at their gate
            state = ray.get(handle.checkpoints.state.remote())
            done = sum(t.executed for t in handle.stats().component("count"))
            if state.get("completed", 0) >= 2 and done >= N // 2 - TASKS:
                break
            assert time.monotonic() < deadline, f"no checkpoint before the loss: {state}"
            time.sleep(0.1)
        # a worker other than the first (whose bundle holds the checkpoint coordinator)
        # on a node other than the head (this driver's)
        nodes = ray.util.placement_group_table(handle.placement_groups[0])[
            "bundles_to_node_id"]
        worker = next(w for w in (1, 2) if nodes[w] != c.head_node.node_id)
        victim = next(n for n in c.list_all_nodes() if n.node_id == nodes[worker])
        lost_tasks = sorted(t for t, w in handle.task_worker.items() if w == worker)
        gen = ray.get(handle.checkpoints.state.remote())["generation"]
        t0 = time.monotonic()
        c.remove_node(victim, allow_graceful=False)
        if provider == "local":
            for t in lost_tasks:
                for path in glob.glob(os.path.join(directory, "checkpoints", "nodeloss", "*",
                                                   "*", f"task-{t}.db*")):
                    os.unlink(path)
        c.add_node(num_cpus=1, include_dashboard=False)
        with open(gate, "w", encoding="utf-8") as f:
            f.write(str(N))
        out["lost_tasks"] = lost_tasks
        recovery = None
        end = t0 + WAIT_S
        try:
            while time.monotonic() < end:
                if handle.wait(0.1):
                    out["outcome"] = "complete"
                    break
                if recovery is None:
                    recovery = _running_again(handle, gen, t0)
            else:
                out["outcome"] = "timeout"
                out["stats"] = handle.stats().summary()
        except TopologyFailed as e:
            out["outcome"], out["failure"] = "failed", str(e)
        out["recovery_s"] = recovery
        out["elapsed_s"] = round(time.monotonic() - t0, 1)
        if out.get("outcome") == "complete" and provider != "local":
            snap = decoded(make_provider(conf, "nodeloss", handle.prefix).read_raw())
            out["counts"] = dict(merged_counts(snap["count"]))
        if provider == "s3":  # (the checkpoints are on the server, not on a disk)
            import pyarrow.fs as pafs

            fs, base = pafs.FileSystem.from_uri(s3)
            out["objects"] = sum(i.type == pafs.FileType.File for i in fs.get_file_info(
                pafs.FileSelector(base, recursive=True, allow_not_found=True)))
        ray.get(handle.checkpoints.state.remote())  # (alive: the coordinator answers)
    finally:
        try:
            lc.kill_topology("nodeloss")
        except Exception as e:  # (the failure may have taken it down): reported
            out["kill_error"] = repr(e)
    return out


if __name__ == "__main__":
    for result in main(sys.argv[1:]):
        print("RESULT " + json.dumps(result), flush=True)
