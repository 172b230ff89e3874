"""End-to-end latency against sustained throughput on the throughput pipeline.

The pipeline of benchmarks/throughput.py (spout → double → count multiples of 3 per key,
shuffle groupings, one worker, default config) fed by a live source (``LiveSpout``: a
rate it keeps, catching up when held). Latency is from the spout's ``emit`` to the start
of the last bolt's ``execute`` (``time.time()`` in both, one host), for every tuple.

Each ``--batch-sizes`` value (``topology.producer.batch.size``; the first is the default,
1,000) runs the whole sweep:

1. **Maximum rate**: the source asks for far more than the pipeline takes, for
   ``--max-s`` seconds; the sustained rate is the last bolt's executed tuples over the
   second half of the run (backpressure holds the spout to it).
2. **10%, 50% and 90%** of that rate, measured in the same run, ``--seconds`` each: p50 and
   p99 latency and the sustained rate, over the tuples after the first ``--warmup-s``.
   Every run's per-key counts are checked against the emitted range.

A plot of latency against sustained throughput (Storm's and Pathway's way of showing it)
goes to benchmarks/results/latency.png.

    python -m benchmarks.latency [--max-s 20] [--seconds 20] [--warmup-s 2]
                                 [--batch-sizes 1000,100]

Writes benchmarks/results/latency.json; the last line is ``key=value ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ray.cloudpickle

import tests.components as pipeline
from benchmarks._common import RESULTS, quantile, write_result
from cluster import LocalCluster
from topology import make_config

CONF = {"topology.acker.executors": 0}
SHARES = (0.1, 0.5, 0.9)
#: the maximum-rate run's asked rate: far above what the pipeline takes (finite, as the
#: live source computes its due count from it)
FLOOD = 1e9


def expected_counts(n: int) -> dict[str, int]:
    """The last bolt's counts for ``i`` in ``range(n)`` (doubled, multiples of 3)."""
    out: dict[str, int] = {}
    for i in range(0, n, 3):  # 2i is a multiple of 3 exactly when i is
        k = f"k{(2 * i) % 1000}"
        out[k] = out.get(k, 0) + 1
    return out


def run(cluster: LocalCluster, name: str, rate: float, seconds: float,
        warmup_s: float, batch: int) -> dict:
    """One run at ``rate`` tuples/s; returns the sustained rate and the latencies."""
    h = cluster.submit_topology(name, {**CONF, "topology.producer.batch.size": batch},
                                pipeline.build_live_pipeline(rate, seconds))
    try:
        if not h.wait(seconds * 4 + 120):
            raise SystemExit(f"{name} did not finish:\n{h.stats().summary()}")
        st = h.stats()
        got = h.collected("sink")
        (counts,) = h.task_state("sink", "counts").values()
    finally:
        cluster.kill_topology(name)
    emitted = st.component("live")[0].emitted
    if counts != expected_counts(emitted):
        raise SystemExit(f"{name}: the per-key counts differ from the emitted range")
    ts = [v[0] for *_, v in got]
    lat = [v[1] * 1000.0 for *_, v in got]
    if len(ts) != emitted:
        raise SystemExit(f"{name}: {len(ts)} tuples reached the last bolt of {emitted}")
    end = max(ts)
    start = end / 2 if rate == FLOOD else min(warmup_s, end / 2)
    kept = [x for t, x in zip(ts, lat, strict=True) if t >= start]
    return {"asked_rate": None if rate == FLOOD else rate, "emitted": emitted,
            "sustained_per_s": len(kept) / (end - start) if end > start else None,
            "latency_ms": {"p50": quantile(kept, 0.5), "p90": quantile(kept, 0.9),
                           "p99": quantile(kept, 0.99), "max": max(kept)},
            "measured_from_s": start, "run_s": end}


def chart(sweeps: dict[int, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for batch, rows in sweeps.items():
        x = [r["sustained_per_s"] for r in rows]
        for q, style in (("p50", "o-"), ("p99", "s--")):
            ax.plot(x, [r["latency_ms"][q] for r in rows], style,
                    label=f"{q}, batches of {batch}")
        for r in rows:
            ax.annotate(r["label"], (r["sustained_per_s"], r["latency_ms"]["p99"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("sustained throughput (tuples/s)")
    ax.set_ylabel("emit → last bolt's execute (ms)")
    ax.set_yscale("log")
    ax.set_title("Latency against throughput (throughput pipeline, one worker)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-s", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--batch-sizes", default="1000,100",
                    help="topology.producer.batch.size values, the first one reported first")
    args = ap.parse_args()
    batches = [int(x) for x in args.batch_sizes.split(",")]
    ray.cloudpickle.register_pickle_by_value(pipeline)
    cluster = LocalCluster(num_cpus=2)
    sweeps: dict[int, list[dict]] = {}
    try:
        for batch in batches:
            top = run(cluster, f"latency-{batch}-max", FLOOD, args.max_s, args.warmup_s,
                      batch)
            top["label"] = "max"
            rows = []
            for share in SHARES:
                r = run(cluster, f"latency-{batch}-{int(share * 100)}",
                        share * top["sustained_per_s"], args.seconds, args.warmup_s, batch)
                r["label"] = f"{int(share * 100)}%"
                rows.append(r)
            sweeps[batch] = rows + [top]
    finally:
        cluster.shutdown()
    write_result("latency", {"config": make_config(CONF), "max_s": args.max_s,
                             "seconds": args.seconds, "warmup_s": args.warmup_s,
                             "sweeps": {str(b): rows for b, rows in sweeps.items()}})
    chart(sweeps, RESULTS / "latency.png")
    for batch, rows in sweeps.items():
        for r in rows:
            lt = r["latency_ms"]
            print(f"batches of {batch:>4}, {r['label']:>4}: sustained "
                  f"{r['sustained_per_s']:,.0f}/s, latency p50 {lt['p50']:.2f} ms, p99 "
                  f"{lt['p99']:.2f} ms, max {lt['max']:.1f} ms")
    parts = []
    for k, (batch, rows) in enumerate(sweeps.items()):
        by = {r["label"]: r for r in rows}
        suffix = "" if k == 0 else f"_batch{batch}"
        parts.append(f"max_rate_per_s{suffix}={by['max']['sustained_per_s']:.0f}")
        parts += [f"latency_ms_{q}_at_{p}pct{suffix}={by[f'{p}%']['latency_ms'][q]:.2f}"
                  for p in (10, 50, 90) for q in ("p50", "p99")]
    print(" ".join(parts))


if __name__ == "__main__":
    main()
