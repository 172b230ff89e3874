"""``python -m benchmarks.nexmark bench``: q0-q4 at 1M events, one spout task, on an
embedded Ray; beside them, the generator alone in the same run and Flink 1.13's published
per-core throughput.

Per query, in order:

1. **Throughput**: the topology unpaced; events/s over the span the events flowed (the
   spout's first call to the result file complete), events per CPU-second (the
   topology's processes plus the driver, ``psutil``) and the whole machine's CPU over the
   same span. Its result is checked against DuckDB (the SQL in docs/nexmark.md) over
   Parquet generated once for the run.
2. **Latency**: the same query again, the spout paced at 50% of the rate just measured;
   p50 and p99 of the wall-clock ms from each tuple's emit (``emitTime``) to the query's
   measuring point (the sink; q4: the winning-bids bolt, where a bid takes effect).

The generator alone: the driver iterates one task's events (no topology), wall events/s:
what one spout task can at most feed q0.

Writes ``benchmarks/results/nexmark.json`` and the bench section of docs/nexmark.md; the
last line is ``nexmark_<q>_eps=... nexmark_<q>_eps_per_cpu_s=... nexmark_generator_eps=...``.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from benchmarks._common import machine, quantile, write_result
from benchmarks.nexmark._check import DOCS, check
from benchmarks.nexmark._generator import EventStream, GeneratorConfig, NexmarkGenerator
from benchmarks.nexmark._parquet import write_events
from benchmarks.nexmark._queries import QUERIES
from benchmarks.nexmark._run import QueryRun, run_query

#: Flink 1.13's events/s per core, 100M events (nexmark/nexmark, GUIDE_V1.md, "Nexmark
#: Benchmark Result": 8 TaskManagers of 1 slot, RocksDB, checkpoints every 3 minutes)
FLINK_1_13_EVENTS_PER_CORE_S = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120,
                                "q4": 34_330}
FLINK_SOURCE = ("nexmark/nexmark GUIDE_V1.md, 'Nexmark Benchmark Result' (Flink 1.13, "
                "100M events, 8 TaskManagers x 1 slot): Throughput/Cores")

#: the paced latency run's share of the measured maximum rate
PACE_SHARE = 0.5

_SECTION = re.compile(r"(<!-- nexmark-bench[^\n]*-->\n).*?(<!-- /nexmark-bench -->)", re.DOTALL)


def generator_alone(config: GeneratorConfig) -> dict:
    """Iterate every event of ``config`` in one task, in this process: wall events/s."""
    t0 = time.perf_counter()
    n = sum(1 for _ in EventStream(NexmarkGenerator(config)))
    dt = time.perf_counter() - t0
    return {"events": n, "seconds": round(dt, 3), "events_per_s": round(n / dt)}


def _query_row(throughput: QueryRun, paced: QueryRun, checked: str) -> dict:
    lat = list(paced.latencies_ms)
    flink = FLINK_1_13_EVENTS_PER_CORE_S[throughput.query]
    return {
        "title": QUERIES[throughput.query].title,
        "events": throughput.events,
        "rows": throughput.rows,
        "seconds": round(throughput.seconds, 3),
        "wall_s_from_submit": round(throughput.wall_s, 3),
        "events_per_s": round(throughput.events_per_s),
        "cpu_s": round(throughput.cpu_s, 2),
        "events_per_cpu_s": round(throughput.events_per_cpu_s),
        "machine_cpu_s": round(throughput.machine_cpu_s, 2),
        "machine_cores_busy": round(throughput.machine_cpu_s / throughput.seconds, 2),
        "load_1m": [round(x, 2) for x in throughput.load_1m],
        "check": checked,
        "latency": {
            "paced_events_per_s": round(paced.paced_events_per_s),
            "events": paced.events,
            "achieved_events_per_s": round(paced.events_per_s),
            "measured_at": QUERIES[paced.query].latency_component,
            "samples": len(lat),
            "p50_ms": round(quantile(lat, 0.50), 2) if lat else None,
            "p99_ms": round(quantile(lat, 0.99), 2) if lat else None,
            "load_1m": [round(x, 2) for x in paced.load_1m],
        },
        "flink_1_13_events_per_core_s": flink,
        "events_per_cpu_s_vs_flink_per_core": round(throughput.events_per_cpu_s / flink, 4),
    }


def summary_line(result: dict) -> str:
    parts = []
    for q, row in result["queries"].items():
        parts += [f"nexmark_{q}_eps={row['events_per_s']}",
                  f"nexmark_{q}_eps_per_cpu_s={row['events_per_cpu_s']}"]
    parts.append(f"nexmark_generator_eps={result['generator']['events_per_s']}")
    return " ".join(parts)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def markdown(result: dict) -> str:
    """The bench section of docs/nexmark.md."""
    m, lat_events = result["machine"], {r["latency"]["events"] for r in
                                        result["queries"].values()}
    lines = [
        f"`python -m benchmarks.nexmark bench{result['command_args']}` on "
        f"{result['date']}: {result['events']:,} events (seed {result['seed']}, event-time "
        f"rate {result['rate']:,}/s), one spout task, one worker, `storm2`, acking off; "
        f"{m['cpus']} cores shared with other work, Python {m['python']}, Ray {m['ray']}. "
        f"Results in `benchmarks/results/nexmark.json`.",
        "",
        "| query | events/s | events per CPU-s | CPU-s: topology + driver / whole machine "
        "| load avg, 1 min (start → end) | latency p50 / p99 at 50% pace | Flink 1.13 "
        "events/s per core | ours per CPU-s / Flink's per core | result rows | DuckDB check |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for q, r in result["queries"].items():
        lat = r["latency"]
        lines.append(
            f"| {q} {r['title']} | {r['events_per_s']:,} | {r['events_per_cpu_s']:,} | "
            f"{r['cpu_s']:.1f} / {r['machine_cpu_s']:.1f} | {r['load_1m'][0]:.1f} → "
            f"{r['load_1m'][1]:.1f} | {_ms(lat['p50_ms'])} / {_ms(lat['p99_ms'])} ms | "
            f"{r['flink_1_13_events_per_core_s']:,} | "
            f"{r['events_per_cpu_s_vs_flink_per_core']:.3f} | {r['rows']:,} | {r['check']} |")
    g = result["generator"]
    lines += [
        "",
        f"The generator alone (one task, in the driver, no topology): "
        f"{g['events_per_s']:,} events/s over {g['events']:,} events; q0 cannot beat it"
        + (f", and reached {result['queries']['q0']['events_per_s'] / g['events_per_s']:.0%}"
           f" of it." if "q0" in result["queries"] else "."),
        f"Latency runs: the spout paced at {PACE_SHARE:.0%} of each query's rate above, "
        f"{', '.join(f'{n:,}' for n in sorted(lat_events))} events; measured at the sink "
        f"(q4: where a bid takes effect, its result exists only at the end).",
        f"Flink's figures: {result['flink_source']}.",
        "",
        "```",
        result["summary"],
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_docs(result: dict, docs: Path = DOCS) -> None:
    text = docs.read_text()
    if not _SECTION.search(text):
        raise ValueError(f"{docs} has no '<!-- nexmark-bench -->' section to write into")
    docs.write_text(_SECTION.sub(lambda m: m.group(1) + markdown(result) + m.group(2), text))


def bench(args: argparse.Namespace) -> int:
    """Run the bench of ``args`` (``events``, ``latency_events``, ``queries``, ``seed``,
    ``rate``...); writes the JSON and the docs section; returns 0, or 1 if a check
    failed (the figures are still written, with the failure in the table)."""
    import ray.cloudpickle

    import benchmarks.nexmark as nexmark
    from cluster import LocalCluster

    config = GeneratorConfig(events=args.events, seed=args.seed, rate=args.rate,
                             base_time=args.base_time,
                             occasional_delay_sec=args.occasional_delay_sec,
                             prob_delayed_event=args.prob_delayed_event)
    lat_events = args.latency_events or args.events
    lat_config = GeneratorConfig(**{**config.__dict__, "events": lat_events})
    ray.cloudpickle.register_pickle_by_value(nexmark)
    failed = False
    with tempfile.TemporaryDirectory(prefix="nexmark-bench-") as tmp:
        data = Path(tmp) / "data"
        print(f"generating {args.events:,} events for the checks ...", flush=True)
        write_events(config, data)
        generator = generator_alone(config)
        print(f"generator alone: {generator['events_per_s']:,} events/s", flush=True)
        rows = {}
        with LocalCluster(num_cpus=2) as cluster:
            for q in args.queries:
                out = Path(tmp) / f"{q}.parquet"
                tp = run_query(cluster, q, config, str(out))
                result = check(q, out, data)
                failed |= not result.passed
                print(f"{q}: {tp.events_per_s:,.0f} events/s, {tp.events_per_cpu_s:,.0f} per "
                      f"CPU-s; {result.report.splitlines()[0]}", flush=True)
                pace = PACE_SHARE * tp.events_per_s
                paced = run_query(cluster, q, lat_config, str(Path(tmp) / f"{q}-paced.parquet"),
                                  events_per_s=pace)
                rows[q] = _query_row(tp, paced, "passed" if result.passed else "FAILED")
                print(f"{q} at {pace:,.0f} events/s: latency p50 "
                      f"{rows[q]['latency']['p50_ms']} ms, p99 {rows[q]['latency']['p99_ms']} "
                      f"ms", flush=True)
    argv = "" if args.events == 1_000_000 else f" --events {args.events}"
    if args.latency_events:
        argv += f" --latency-events {args.latency_events}"
    result = {"events": args.events, "seed": args.seed, "rate": args.rate,
              "latency_events": lat_events, "spout_tasks": 1, "workers": 1,
              "policy": "storm2", "acking": False, "pace_share": PACE_SHARE,
              "date": time.strftime("%Y-%m-%d"), "command_args": argv,
              "generator": generator, "queries": rows, "flink_source": FLINK_SOURCE,
              "machine": machine()}
    result["summary"] = summary_line(result)
    write_result("nexmark", result)
    write_docs(result)
    print(result["summary"])
    return 1 if failed else 0
