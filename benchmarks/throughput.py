"""Throughput of a spout → bolt → bolt pipeline in one worker and in two workers, side by
side with Ray Data per-row map/filter and a plain Python loop, in one run; then memory under
overload, in one worker and across two workers.

Pipeline: the spout generates (i, "k" + str(i % 1000)); bolt 1 doubles i; bolt 2 keeps
multiples of 3 and counts per key. Every implementation's per-key counts are checked equal.

Two workers (``topology.workers=2``, one host): tasks alternate between the workers in id
order (count, double, gen, sink → 0, 1, 0, 1), so every edge crosses workers through the
transfer actors.

Overload runs: the same topology with bolt 2 busy-waiting per tuple so it is >= 10x slower
than the spout, for --overload-s seconds (one worker) and --overload-2w-s seconds (two
workers: the slow bolt in worker 0, its upstream in worker 1); samples every 0.5 s the
tuples queued in the whole topology (receive queues + overflow + pending_emits + partial
batches + unacknowledged batches in flight) and the RSS of every actor (executors and
transfer actors); reports peaks against the bound the config implies. With two workers the
bound adds, per edge between workers, two windows for the overflow (what arrives during the
halt-lag, which takes about one acknowledgement round trip: three one-way hops against
four, see benchmarks/halt_lag.py); the observed overflow peak is reported beside it.

    python -m benchmarks.throughput [--tuples 1000000] [--overload-s 30] [--overload-2w-s 60]

Writes benchmarks/results/throughput.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import time

import psutil
import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import write_result
from cluster import LocalCluster
from topology import TopologyBuilder, make_config


def expected_counts(n: int) -> dict:
    counts: dict = {}
    for i in range(n):
        if (i * 2) % 3 == 0:
            k = "k" + str(i % 1000)
            counts[k] = counts.get(k, 0) + 1
    return counts


def plain_loop(n: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    counts: dict = {}
    for i in range(n):
        t = (i, "k" + str(i % 1000))
        t = (t[0] * 2, t[1])
        if t[0] % 3 == 0:
            counts[t[1]] = counts.get(t[1], 0) + 1
    return time.perf_counter() - t0, counts


def ray_data(n: int) -> tuple[float, dict]:
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    t0 = time.perf_counter()
    ds = (ray.data.range(n)
          .map(lambda r: {"i": r["id"], "k": "k" + str(r["id"] % 1000)})
          .map(lambda r: {"i": r["i"] * 2, "k": r["k"]})
          .filter(lambda r: r["i"] % 3 == 0)
          .groupby("k").count())
    rows = ds.take_all()
    dt = time.perf_counter() - t0
    return dt, {r["k"]: r["count()"] for r in rows}


def ours(cluster: LocalCluster, n: int, conf: dict, topology=None) -> tuple[float, dict]:
    """Run ``topology`` (default: the per-tuple pipeline of ``n`` tuples) to completion;
    returns (seconds, per-key counts from its sink)."""
    handle = cluster.submit_topology("throughput", conf, topology or pipeline.build(n))
    t0 = time.perf_counter()
    assert handle.wait(600), handle.stats().summary()
    dt = time.perf_counter() - t0
    got = {k: c for *_, (k, c) in handle.collected("sink")}
    cluster.kill_topology("throughput")
    return dt, got


def queued_bound(conf: dict, n_tasks: int, edges: int, remote_edges: int = 0) -> int:
    c = make_config(conf)
    batch = min(c["topology.producer.batch.size"], c["topology.executor.receive.buffer.size"] // 2)
    inflight = c["topology.transfer.max.inflight.batches"]
    # each receive queue, plus per edge (sender, receiver): the window in flight, the batch
    # being filled, and one call's emits in pending_emits; per edge between workers, two
    # more windows waiting in the overflow (the halt-lag's arrivals)
    return (n_tasks * c["topology.executor.receive.buffer.size"]
            + edges * ((inflight + 1) * batch + 1) + remote_edges * 2 * inflight * batch)


def overload(cluster: LocalCluster, seconds: float, conf: dict) -> dict:
    name = f"overload-{make_config(conf)['topology.workers']}w"
    handle = cluster.submit_topology(name, conf, pipeline.build(10**12, work_us=40.0))
    procs = [psutil.Process(ray.get(a.pid.remote())) for a in handle.actors.values()]
    procs += [psutil.Process(ray.get(t.stats.remote())["pid"])
              for t in handle.transfers.values()]
    batch = make_config(conf)["topology.producer.batch.size"]
    where = handle.task_worker
    remote_edges = sum(1 for src, dst in ((3, 2), (2, 1), (1, 4)) if where[src] != where[dst])
    samples = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        time.sleep(0.5)
        s = handle.stats()
        queued = sum(t.queue_population + t.overflow + t.pending_emits + t.batched
                     + t.inflight_batches * batch for t in s.tasks)
        rss = sum(p.memory_info().rss for p in procs)
        samples.append({"t": round(time.perf_counter() - t0, 2), "queued": queued,
                        "overflow": sum(t.overflow for t in s.tasks),
                        "rss_mb": round(rss / 2**20, 1),
                        "spout_emitted": s.component("gen")[0].emitted,
                        "count_executed": s.component("count")[0].executed})
    final = handle.stats()
    cluster.kill_topology(name)
    half = len(samples) // 2
    spout_rate = (samples[-1]["spout_emitted"] - samples[0]["spout_emitted"]) / (
        samples[-1]["t"] - samples[0]["t"])
    bound = queued_bound(conf, 4, 3, remote_edges)
    return {
        "seconds": seconds, "workers": make_config(conf)["topology.workers"],
        "edges_between_workers": remote_edges, "consumer_work_us_per_tuple": 40.0,
        "spout_rate_tuples_s": round(spout_rate),
        "peak_queued_tuples": max(s["queued"] for s in samples),
        "peak_overflow_tuples": max(s["overflow"] for s in samples),
        "queued_bound_tuples": bound,
        "dropped_messages": sum(t.dropped_messages for t in final.tasks),
        "halt_lag_ms_p50": final.halt_lag_ms(0.5),
        "halt_lag_ms_p99": final.halt_lag_ms(0.99),
        "rss_mb_first_half_peak": max(s["rss_mb"] for s in samples[:half]),
        "rss_mb_second_half_peak": max(s["rss_mb"] for s in samples[half:]),
        "samples": samples,
    }


def unthrottled_spout_rate(cluster: LocalCluster, conf: dict) -> float:
    """The spout's rate into a null bolt, to show the overload consumer is >= 10x slower."""
    from topology import Bolt

    class Null(Bolt):
        def execute(self, tup):
            pass

    b = TopologyBuilder()
    b.set_spout("gen", pipeline.GenSpout(400_000))
    b.set_bolt("null", Null()).shuffle_grouping("gen")
    h = cluster.submit_topology("null", conf, b.create_topology())
    t0 = time.perf_counter()
    h.wait(300)
    dt = time.perf_counter() - t0
    cluster.kill_topology("null")
    return 400_000 / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--overload-s", type=float, default=30.0)
    ap.add_argument("--overload-2w-s", type=float, default=60.0)
    args = ap.parse_args()
    n = args.tuples
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    conf: dict = {"topology.acker.executors": 0}  # no msg ids here: acking.py measures it
    expected = expected_counts(n)

    t_plain, c_plain = plain_loop(n)
    t_ours, c_ours = ours(cluster, n, conf)
    t_ours2, c_ours2 = ours(cluster, n, {**conf, "topology.workers": 2})
    t_rd, c_rd = ray_data(n)
    assert c_plain == expected, "plain loop counts differ"
    assert c_ours == expected, "topology counts differ"
    assert c_ours2 == expected, "two-worker topology counts differ"
    assert c_rd == expected, "Ray Data counts differ"

    result = {
        "tuples": n, "config": make_config(conf),
        "seconds": {"storm_on_ray": t_ours, "storm_on_ray_2_workers": t_ours2,
                    "ray_data_per_row": t_rd, "plain_loop": t_plain},
        "tuples_per_s": {"storm_on_ray": n / t_ours, "storm_on_ray_2_workers": n / t_ours2,
                         "ray_data_per_row": n / t_rd, "plain_loop": n / t_plain},
    }
    rates = result["tuples_per_s"]
    result["two_worker_ratio"] = rates["storm_on_ray_2_workers"] / rates["storm_on_ray"]
    result["ray_data_ratio"] = rates["storm_on_ray"] / rates["ray_data_per_row"]
    result["plain_loop_ratio"] = rates["storm_on_ray"] / rates["plain_loop"]
    summary = (f"tuples_per_s={rates['storm_on_ray']:.0f} "
               f"ray_data_ratio={result['ray_data_ratio']:.2f} "
               f"plain_loop_ratio={result['plain_loop_ratio']:.3f} "
               f"two_worker_ratio={result['two_worker_ratio']:.2f}")
    if args.overload_s > 0:
        free_rate = unthrottled_spout_rate(cluster, conf)
        ov = overload(cluster, args.overload_s, conf)
        ov["unthrottled_spout_rate_tuples_s"] = round(free_rate)
        ov["consumer_max_rate_tuples_s"] = round(1e6 / 40.0)
        result["overload"] = ov
        print(f"overload: unthrottled spout {free_rate:,.0f}/s, consumer <= "
              f"{1e6 / 40:,.0f}/s; throttled spout {ov['spout_rate_tuples_s']:,}/s; "
              f"queued peak {ov['peak_queued_tuples']:,} (bound {ov['queued_bound_tuples']:,}); "
              f"RSS peak first/second half {ov['rss_mb_first_half_peak']} / "
              f"{ov['rss_mb_second_half_peak']} MB")
        summary += (f" overload_peak_queued={ov['peak_queued_tuples']} "
                    f"overload_queued_bound={ov['queued_bound_tuples']} "
                    f"overload_rss_mb_first_half={ov['rss_mb_first_half_peak']} "
                    f"overload_rss_mb_second_half={ov['rss_mb_second_half_peak']}")
    if args.overload_2w_s > 0:
        ov = overload(cluster, args.overload_2w_s, {**conf, "topology.workers": 2})
        result["overload_2_workers"] = ov
        print(f"overload, 2 workers: throttled spout {ov['spout_rate_tuples_s']:,}/s; "
              f"queued peak {ov['peak_queued_tuples']:,} (bound {ov['queued_bound_tuples']:,}), "
              f"overflow peak {ov['peak_overflow_tuples']:,}, dropped "
              f"{ov['dropped_messages']}; halt-lag p50 {ov['halt_lag_ms_p50']} ms; RSS peak "
              f"first/second half {ov['rss_mb_first_half_peak']} / "
              f"{ov['rss_mb_second_half_peak']} MB")
        summary += (f" overload2w_peak_queued={ov['peak_queued_tuples']} "
                    f"overload2w_queued_bound={ov['queued_bound_tuples']} "
                    f"overload2w_peak_overflow={ov['peak_overflow_tuples']} "
                    f"overload2w_rss_mb_first_half={ov['rss_mb_first_half_peak']} "
                    f"overload2w_rss_mb_second_half={ov['rss_mb_second_half_peak']}")
    cluster.shutdown()
    write_result("throughput", result)
    for k, v in rates.items():
        print(f"{k:>18}: {v:>12,.0f} tuples/s")
    print(summary)


if __name__ == "__main__":
    main()
