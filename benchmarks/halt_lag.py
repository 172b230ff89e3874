"""Halt-lag between two workers on one host: the time from a task becoming backlogged to
its upstream senders in another worker holding their sends.

Storm 2.0's design quotes 1-2 ms for two workers on one host ("Backpressure model for
Storm 2.0", STORM-2306's design doc, §2); our target is p50 <= 3 ms.

Two status paths, each with its messages over the same-node control sockets
(``topology.transfer.local.socket``, the default) and by actor calls, four forms run side
by side in one run (alternating rounds on one Ray, so load on this shared host falls on
all): ``direct`` (``topology.backpressure.status.direct``, the
default), where the backlogged task's executor tells its senders itself (one actor call),
and ``worker`` (Storm's path), executor → its worker's transfer actor → the sending worker's
transfer actor → the sending executors (three calls).

Topology: spouts ``a_gen`` and ``c_gen`` in worker 0 feed ``b_slow`` in worker 1, which
busy-waits ``--work-us`` per tuple, so it is backlogged again and again: its receive queue
fills, arrivals go to its overflow, the transfer actor of worker 1 sends a
``BackPressureStatus``, worker 0's transfer actor forwards it to the spouts, and each spout
records ``now - since`` when its flag for the task turns on (wall clock, one host). The
backpressure-check timer clears the task once its overflow drains, and the cycle repeats.
On the direct path the first two hops are replaced by the executor's own call.

How the lag is measured: the receiving executor stamps ``since`` (``time.time()``) when the
first tuple goes to its overflow; the status carries it; a sender computes the lag when it
applies the status. Both clocks are this machine's.

A fifth form, ``direct_control``, is the direct path over sockets with a control receive
queue (``topology.executor.control.receive.buffer.size`` ``--control-size``) in every
executor; ``--paths`` picks the forms to run (all five by default). A run with the fifth
writes ``halt_lag_<forms>.json``.

    python -m benchmarks.halt_lag [--seconds 30] [--rounds 2] [--work-us 100]
                                  [--paths direct,direct_control] [--control-size 1024]

Writes benchmarks/results/halt_lag.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import quantile, write_result
from cluster import LocalCluster
from topology import TopologyBuilder, make_config


def _p50(xs: list[float]) -> float | None:
    return quantile(xs, 0.5) if xs else None


#: status path → (topology.backpressure.status.direct, topology.transfer.local.socket,
#: a control receive queue): each status path with its messages over the same-node
#: control sockets, and by actor calls (the ``_calls`` forms, as before the sockets); the
#: direct path over sockets with a control receive queue
PATHS = {"direct": (True, True, False), "worker": (False, True, False),
         "direct_calls": (True, False, False), "worker_calls": (False, False, False),
         "direct_control": (True, True, True)}


def run_once(cluster: LocalCluster, name: str, path: tuple[bool, bool], args) -> dict:
    """One submit on one status path; returns its samples and counters."""
    direct, socket_path, control = path
    b = TopologyBuilder()
    b.set_spout("a_gen", pipeline.GenSpout(10**12))  # task 1, worker 0
    slow = b.set_bolt("b_slow", pipeline.CountMultiplesOf3(args.work_us)).shuffle_grouping(
        "a_gen")  # task 2, worker 1
    if args.spouts == 2:
        b.set_spout("c_gen", pipeline.GenSpout(10**12))  # task 3, worker 0
        slow.shuffle_grouping("c_gen")
    conf = {"topology.workers": 2, "topology.executor.receive.buffer.size": 4096,
            "topology.producer.batch.size": 256, "topology.acker.executors": 0,
            "topology.backpressure.status.direct": direct,
            "topology.transfer.local.socket": socket_path,
            "topology.executor.control.receive.buffer.size": args.control_size * control}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    assert all(w == (t != 2) * 0 + (t == 2) for t, w in handle.stats().assignment.items())
    time.sleep(args.seconds)  # the run itself: the samples accumulate in the executors
    s = handle.stats()
    cluster.kill_topology(name)
    b_slow = s.component("b_slow")[0]
    return {"conf": conf, "lags": [x for t in s.tasks for x in t.halt_lags_ms],
            "reports": b_slow.bp_reports, "overflowed": b_slow.overflowed_total,
            "statuses_sent": s.workers[1].statuses_sent,
            "forwarded": s.workers[0].counters["statuses_forwarded"],
            "report_lags": s.workers[1].counters["report_lags_ms"],
            "status_lags": s.workers[0].counters["status_lags_ms"],
            "control_socket_sent": b_slow.transfer.get("control_socket_sent", 0)
            + sum(w.counters.get("control_socket_sent", 0) for w in s.workers),
            "control_call_sent": b_slow.transfer.get("control_call_sent", 0)
            + sum(w.counters.get("control_call_sent", 0) for w in s.workers)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="per round and path")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds; each runs both paths, in alternating order")
    ap.add_argument("--work-us", type=float, default=100.0)
    ap.add_argument("--spouts", type=int, choices=(1, 2), default=1,
                    help="spouts in worker 0 (each one a busy process on this 2-core host)")
    ap.add_argument("--paths", default=",".join(PATHS), help="the forms to run")
    ap.add_argument("--control-size", type=int, default=1024,
                    help="the control receive queue's bound in the direct_control form")
    args = ap.parse_args()
    forms = [p for p in args.paths.split(",") if p]
    if not forms or any(p not in PATHS for p in forms):
        ap.error(f"--paths: choose from {list(PATHS)}")
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    runs: dict[str, list[dict]] = {p: [] for p in forms}
    for r in range(args.rounds):
        order = forms if r % 2 == 0 else forms[::-1]
        for path in order:
            runs[path].append(run_once(cluster, f"halt-lag-{path}-{r}", PATHS[path], args))
    cluster.shutdown()
    result = {"seconds_per_round": args.seconds, "rounds": args.rounds,
              "consumer_work_us_per_tuple": args.work_us,
              "config": make_config(runs[forms[0]][0]["conf"]), "paths": {}}
    for path, rs in runs.items():
        lags = [x for r in rs for x in r["lags"]]
        if not lags:
            raise SystemExit(f"no halt-lag samples on the {path} path: the consumer never "
                             f"became backlogged")
        result["paths"][path] = {
            "samples": len(lags),
            "halt_lag_ms": {"p50": quantile(lags, 0.5), "p90": quantile(lags, 0.9),
                            "p99": quantile(lags, 0.99), "max": max(lags),
                            "mean": statistics.fmean(lags)},
            "backlog_episodes_reports": sum(r["reports"] for r in rs),
            "overflowed_total": sum(r["overflowed"] for r in rs),
            "statuses_sent": sum(r["statuses_sent"] for r in rs),
            "statuses_forwarded_to_executors": sum(r["forwarded"] for r in rs),
            "control_socket_sent": sum(r["control_socket_sent"] for r in rs),
            "control_call_sent": sum(r["control_call_sent"] for r in rs),
            # the same lag seen at the transfer actors on Storm's path: the receiving
            # worker's (report from the executor) and the sending worker's (peer status)
            "lag_at_receiving_transfer_ms_p50": _p50([x for r in rs for x in r["report_lags"]]),
            "lag_at_sending_transfer_ms_p50": _p50([x for r in rs for x in r["status_lags"]]),
            "all_lags_ms": sorted(round(x, 3) for x in lags),
        }
    four = ["direct", "worker", "direct_calls", "worker_calls"]
    write_result("halt_lag" if set(forms) <= set(four) else f"halt_lag_{'_'.join(forms)}",
                 result)
    for path, p in result["paths"].items():
        h = p["halt_lag_ms"]
        print(f"{path:>12}: {p['samples']} samples over {args.rounds} x {args.seconds:.0f} s: "
              f"p50 {h['p50']:.2f} ms, p90 {h['p90']:.2f} ms, p99 {h['p99']:.2f} ms; at the "
              f"receiving transfer actor {p['lag_at_receiving_transfer_ms_p50']} ms, at the "
              f"sending one {p['lag_at_sending_transfer_ms_p50']} ms; control messages "
              f"{p['control_socket_sent']} by socket, {p['control_call_sent']} by call")
    p50 = {path: p["halt_lag_ms"]["p50"] for path, p in result["paths"].items()}
    p99 = {path: p["halt_lag_ms"]["p99"] for path, p in result["paths"].items()}
    print(closing_line(p50, p99, result["paths"]))


def closing_line(p50: dict, p99: dict, paths: dict) -> str:
    """``key=value ...`` for the forms that ran (ratios where both sides ran)."""
    names = {"direct": "halt_lag_ms", "worker": "worker_path_halt_lag_ms",
             "direct_calls": "calls_halt_lag_ms", "worker_calls": "calls_worker_path_halt_lag_ms",
             "direct_control": "control_queue_halt_lag_ms"}
    parts = []
    for form, key in names.items():
        if form in p50:
            parts += [f"{key}_p50={p50[form]:.2f}", f"{key}_p99={p99[form]:.2f}"]
    for key, a, b in (("direct_socket_vs_call_p50", "direct", "direct_calls"),
                      ("worker_socket_vs_call_p50", "worker", "worker_calls"),
                      ("direct_speedup_p50", "worker", "direct"),
                      ("control_queue_on_vs_off_p50", "direct_control", "direct")):
        if a in p50 and b in p50:
            parts.append(f"{key}={p50[a] / p50[b]:.2f}")
    first = next(iter(paths))
    parts.append(f"samples={paths[first]['samples']}")
    return " ".join(parts)


if __name__ == "__main__":
    main()
