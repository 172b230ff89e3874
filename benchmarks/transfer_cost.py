"""CPU per frame between two executors of one worker: same-node socket against actor calls.

A one-worker topology, ``live`` (``LiveSpout``: ``--rate`` tuples/s, a rate it keeps) →
``sink`` (``LatencySink`` with no work), shuffle grouping, no acking: every frame goes from
the spout's process to the sink's, over the same-node socket (``topology.transfer.local.socket``
on) or as one Ray actor call (off). Each run reads, over a ``--window-s`` window after
``--warmup-s`` of traffic, the CPU time of both actor processes (psutil, user + system, all
threads: the executor, Ray's own, the socket's reader, ack-reader and connector threads)
and the frames that crossed (the spout's ``TaskStats.transfer``, both paths' counters).

What a frame costs is not what a run's CPU over its frames is: the same CPU also pays for
each tuple (the spout's ``next_tuple`` and ``emit``, the codec, the sink's ``execute``) and
for being alive (waits, metrics). So each path runs at one tuple rate with several
``--batch-sizes`` (``topology.producer.batch.size``): the tuples and the time stay the same,
the frames change (a flush every 50 ms, so that the batch size sets them), and the slope
of a least-squares line through (frames/s, CPU s/s) is the CPU of one more frame, sender
and receiver apart; its intercept is what the tuples and the idle time cost at that rate.
A run whose spout fell more than 10% short of the rate (the path could not carry that many
frames here: two frames in flight per destination and the round trip of a call on a
loaded host bound the call path's frames/s) stays in the JSON but out of the fit. Each
run's CPU per frame with everything in it is kept too. The paths and batch sizes take
turns (``--repeats`` rounds, the order flipping each round) so the host's load falls on
all.

    python -m benchmarks.transfer_cost [--rate 2000] [--batch-sizes 5,10,25,100]
                                       [--all-in-batch 10] [--window-s 12] [--warmup-s 2]
                                       [--repeats 2]

Writes benchmarks/results/transfer_cost.json; the last line is ``key=value ...``:
``cpu_us_per_frame_{sender,receiver}_{socket,call}`` (the fitted slopes, µs of CPU per
frame), ``..._all_in`` (CPU per frame with the tuples' work and the idle time in it, at
``--all-in-batch``) and ``sender_call_vs_socket`` / ``receiver_call_vs_socket`` (slope ratios).
"""

from __future__ import annotations

import argparse
import os
import time

import psutil
import ray
import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import write_result
from benchmarks.latency import PATHS, path_verified, run_context, transfer_totals
from cluster import LocalCluster
from topology import make_config

#: a flush every 50 ms (not 1): a partial batch then waits long enough that the batch size,
#: not the flush, sets how many frames carry the same tuples, and the fit below has frame
#: rates far apart on both paths (the socket's quick acknowledgements would otherwise let
#: a partial batch leave at nearly every 1 ms flush whatever the batch size)
CONF = {"topology.acker.executors": 0, "topology.batch.flush.interval.millis": 50}
#: a run whose spout fell this far below the asked rate (the path could not carry that
#: many frames on this host) has fewer tuples to pay for: kept, but left out of the fit
SHORT_OF_RATE = 0.10


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _frames(task) -> int:
    """Frames a task has sent, both paths (``TaskStats.transfer``)."""
    return task.transfer.get("socket_frames", 0) + task.transfer.get("call_frames", 0)


def snapshot(h, procs: dict[str, psutil.Process]) -> dict:
    """The CPU seconds of both processes and the spout's and sink's counters, now."""
    cpu0 = {k: _cpu_s(p) for k, p in procs.items()}
    st = h.stats()
    cpu1 = {k: _cpu_s(p) for k, p in procs.items()}
    spout, sink = st.component("live")[0], st.component("sink")[0]
    return {"t": time.perf_counter(),
            "cpu_s": {k: (cpu0[k] + cpu1[k]) / 2 for k in procs},
            "frames": _frames(spout), "bytes": spout.transfer.get("socket_bytes", 0)
            + spout.transfer.get("call_bytes", 0),
            "frames_in_socket": sink.transfer.get("socket_frames_in", 0),
            "emitted": spout.emitted, "executed": sink.executed}


def run(cluster: LocalCluster, name: str, path: str, batch: int, rate: float,
        warmup_s: float, window_s: float) -> dict:
    """One run: ``live`` at ``rate`` → ``sink``, frames on ``path``, batches of ``batch``;
    returns the window's CPU seconds per process, frames, tuples and the transfer
    counters of the whole run."""
    duration = warmup_s + window_s + 3.0  # the spout's clock starts at its first tuple
    conf = {**CONF, "topology.producer.batch.size": batch,
            "topology.transfer.local.socket": PATHS[path]}
    h = cluster.submit_topology(name, conf, pipeline.build_live(rate, duration, 0.0))
    try:
        st = h.stats()
        tasks = {"sender": st.component("live")[0].task,
                 "receiver": st.component("sink")[0].task}
        procs = {k: psutil.Process(ray.get(h.actors[t].pid.remote())) for k, t in tasks.items()}
        deadline = time.monotonic() + 120
        while h.stats().component("live")[0].emitted == 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the spout emitted nothing in 120 s")
            time.sleep(0.2)
        time.sleep(warmup_s)
        a = snapshot(h, procs)
        time.sleep(window_s)
        b = snapshot(h, procs)
        if not h.wait(duration * 4 + 120):
            raise SystemExit(f"{name} did not finish:\n{h.stats().summary()}")
        transfer = transfer_totals(h.stats())
    finally:
        cluster.kill_topology(name)
    secs = b["t"] - a["t"]
    frames = b["frames"] - a["frames"]
    cpu = {k: b["cpu_s"][k] - a["cpu_s"][k] for k in procs}
    ok = path_verified(path, transfer)
    if not ok:
        print(f"{name}: frames did not go by {path}: {transfer['totals']}", flush=True)
    return {"path": path, "batch": batch, "window_s": secs, "frames": frames,
            "frames_per_s": frames / secs, "tuples_per_s": (b["emitted"] - a["emitted"]) / secs,
            "executed_per_s": (b["executed"] - a["executed"]) / secs,
            "bytes_per_frame": (b["bytes"] - a["bytes"]) / frames if frames else None,
            "socket_frames_in": b["frames_in_socket"] - a["frames_in_socket"],
            "cpu_s": cpu, "cpu_s_per_s": {k: c / secs for k, c in cpu.items()},
            "cpu_us_per_frame_all_in": {k: c / frames * 1e6 if frames else None
                                        for k, c in cpu.items()},
            "transfer": transfer, "path_verified": ok}


def fit(xs: list[float], ys: list[float]) -> dict:
    """Least-squares line ``y = intercept + slope x``, with R²."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx if sxx else float("nan")
    icpt = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"slope": slope, "intercept": icpt,
            "r2": 1 - ss_res / ss_tot if ss_tot else None, "points": n}


def paired(runs: list[dict], batches: list[int]) -> dict:
    """Per batch size both paths kept the rate at: the call path's CPU s/s minus the
    socket's over their mean frames/s, sender and receiver (µs per frame: what a frame
    costs more by actor call, the tuples and the time being the same on both sides)."""
    out = {}
    for b in batches:
        mean = {}
        for p in PATHS:
            rs = [r for r in runs if r["path"] == p and r["batch"] == b and r["in_fit"]]
            if not rs:
                break
            mean[p] = {k: sum(r["cpu_s_per_s"][k] for r in rs) / len(rs)
                       for k in ("sender", "receiver")}
            mean[p]["frames_per_s"] = sum(r["frames_per_s"] for r in rs) / len(rs)
        else:
            f = (mean["socket"]["frames_per_s"] + mean["call"]["frames_per_s"]) / 2
            out[b] = {k: (mean["call"][k] - mean["socket"][k]) / f * 1e6
                      for k in ("sender", "receiver")}
            out[b]["frames_per_s"] = f
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", default="socket,call")
    ap.add_argument("--rate", type=float, default=2_000.0, help="tuples/s")
    ap.add_argument("--batch-sizes", default="5,10,25,100",
                    help="topology.producer.batch.size values (at least two)")
    ap.add_argument("--all-in-batch", type=int, default=10,
                    help="the batch size whose runs give the *_all_in figures")
    ap.add_argument("--window-s", type=float, default=12.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if any(p not in PATHS for p in paths):
        ap.error(f"--paths: choose from {sorted(PATHS)}")
    batches = [int(x) for x in args.batch_sizes.split(",")]
    if len(set(batches)) < 2:
        ap.error("--batch-sizes: at least two sizes, for the fit")
    if args.all_in_batch not in batches:
        ap.error(f"--all-in-batch {args.all_in_batch} is not among --batch-sizes")
    context = run_context()
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    runs: list[dict] = []
    try:
        for rep in range(args.repeats):
            # the paths take turns inside each batch size; the order flips every round
            order = [(b, p) for b in batches for p in paths]
            for batch, path in order if rep % 2 == 0 else order[::-1]:
                r = run(cluster, f"transfer-cost-{path}-{batch}-{rep}", path, batch,
                        args.rate, args.warmup_s, args.window_s)
                r["round"] = rep
                r["in_fit"] = r["tuples_per_s"] >= (1 - SHORT_OF_RATE) * args.rate
                runs.append(r)
                print(f"{path:>6}, batches of {batch:>4}: {r['tuples_per_s']:,.0f} tuples/s, "
                      f"{r['frames_per_s']:,.0f} frames/s; CPU s/s sender "
                      f"{r['cpu_s_per_s']['sender']:.3f} receiver "
                      f"{r['cpu_s_per_s']['receiver']:.3f}"
                      f"{'' if r['in_fit'] else ' (short of the rate: not in the fit)'}",
                      flush=True)
    finally:
        cluster.shutdown()
    fits: dict = {}
    for path in paths:
        rs = [r for r in runs if r["path"] == path and r["in_fit"]]
        if len({r["batch"] for r in rs}) < 2:
            raise SystemExit(f"{path}: fewer than two batch sizes kept the rate; lower --rate")
        fits[path] = {}
        for side in ("sender", "receiver"):
            f = fit([r["frames_per_s"] for r in rs], [r["cpu_s_per_s"][side] for r in rs])
            f["cpu_us_per_frame"] = f.pop("slope") * 1e6
            f["cpu_s_per_s_without_frames"] = f.pop("intercept")
            f["cpu_us_per_tuple_and_idle"] = (f["cpu_s_per_s_without_frames"] / args.rate
                                              * 1e6)
            fits[path][side] = f
    all_in = {p: {side: sum(r["cpu_us_per_frame_all_in"][side] for r in rs) / len(rs)
                  for side in ("sender", "receiver")}
              for p in paths
              for rs in [[r for r in runs if r["path"] == p and r["batch"] == args.all_in_batch]]}
    verified = all(r["path_verified"] for r in runs)
    result = {"paired": paired(runs, batches) if set(paths) == set(PATHS) else None,
              "config": make_config(CONF), "rate": args.rate, "batch_sizes": batches,
              "window_s": args.window_s, "warmup_s": args.warmup_s,
              "repeats": args.repeats, "run": context,
              "load_avg_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
              "paths_verified": verified, "fits": fits, "all_in_batch": args.all_in_batch,
              "cpu_us_per_frame_all_in": all_in, "runs": runs}
    parts = [f"cpu_us_per_frame_{side}_{p}={fits[p][side]['cpu_us_per_frame']:.1f}"
             for p in paths for side in ("sender", "receiver")]
    parts += [f"cpu_us_per_frame_{side}_{p}_all_in={all_in[p][side]:.1f}"
              for p in paths for side in ("sender", "receiver")]
    if "socket" in fits and "call" in fits:
        for side in ("sender", "receiver"):
            ratio = (fits["call"][side]["cpu_us_per_frame"]
                     / fits["socket"][side]["cpu_us_per_frame"])
            result[f"{side}_call_vs_socket"] = ratio
            parts.append(f"{side}_call_vs_socket={ratio:.2f}")
    line = " ".join(parts)
    result["closing"] = line
    write_result("transfer_cost", result)
    for p in paths:
        for side in ("sender", "receiver"):
            f = fits[p][side]
            print(f"{p:>6} {side:>8}: {f['cpu_us_per_frame']:.1f} µs per frame (R² "
                  f"{f['r2'] if f['r2'] is None else round(f['r2'], 3)}), "
                  f"{f['cpu_us_per_tuple_and_idle']:.2f} µs per tuple with the idle time")
    print(f"frames went the way each run asked: {verified}")
    print(line)


if __name__ == "__main__":
    main()
