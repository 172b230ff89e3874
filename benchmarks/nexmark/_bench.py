"""``python -m benchmarks.nexmark bench``: q0-q4 with storm-on-ray (per tuple, and in
batch mode where a query has one) and with Bytewax 0.21 on the same events, side by side
in one run, plus both generators alone; beside them Flink's published per-core figures.

Per query, in order, each engine:

1. **Throughput**: unpaced; events/s over the span the events flowed (the source's first
   call to the result file complete), events per CPU-second (storm-on-ray: the
   topology's processes plus the driver, ``psutil``, split by stage; Bytewax: its own
   process, every thread), peak resident memory (the same processes). Its result is
   checked against DuckDB (the SQL in docs/nexmark.md) over Parquet generated once.
   Bytewax's flow is first checked at small N (``CHECK_EVENTS``) and only then timed.
2. **Latency**: the same again, the source paced at 50% of the rate just measured; p50
   and p99 of the wall-clock ms from each tuple's ``emitTime`` to the query's measuring
   point (the sink; q4: where a bid takes effect).

The generators alone: the driver iterates one task's events per event
(``EventStream``) and in columns (``ColumnarGenerator``), wall events/s.

Writes ``benchmarks/results/nexmark.json`` and the bench section of docs/nexmark.md; the
last line is ``nexmark_<q>_<mode>_eps_per_cpu_s=... nexmark_<q>_vs_bytewax=... ...``.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from benchmarks._common import machine, quantile, write_result
from benchmarks.nexmark._check import DOCS, check
from benchmarks.nexmark._columnar import ColumnarGenerator
from benchmarks.nexmark._generator import EventStream, GeneratorConfig, NexmarkGenerator
from benchmarks.nexmark._parquet import write_events
from benchmarks.nexmark._queries import QUERIES
from benchmarks.nexmark._run import QueryRun, run_query

#: Flink 1.13's events/s per core, 100M events (nexmark/nexmark, GUIDE_V1.md, "Nexmark
#: Benchmark Result": 8 TaskManagers of 1 slot, RocksDB, checkpoints every 3 minutes)
FLINK_1_13_EVENTS_PER_CORE_S = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120,
                                "q4": 34_330}
#: Flink 2.0's events/s per core with the V2 runner: Throughput / Cores of nexmark/nexmark
#: GUIDE_V2.md's example result table (50M events timed after 150M of warm-up, 8
#: TaskManagers of 1 slot, RocksDB, MiniBatch on)
FLINK_2_V2_EVENTS_PER_CORE_S = {"q0": round(2.65e6 / 7), "q1": round(2.86e6 / 7.24),
                                "q2": round(2.95e6 / 7.13), "q3": round(1.9e6 / 8.69),
                                "q4": round(347.84e3 / 12.33)}
FLINK_SOURCE = ("Flink 1.13: nexmark/nexmark GUIDE_V1.md, 'Nexmark Benchmark Result' (100M "
                "events, 8 TaskManagers x 1 slot), Throughput/Cores; Flink 2.x: GUIDE_V2.md, "
                "'Benchmark Results' example table (50M events after 150M warm-up, 8 "
                "TaskManagers x 1 slot), Throughput/Cores")

#: the paced latency run's share of the measured maximum rate
PACE_SHARE = 0.5
#: events of the Bytewax flows' check before they are timed
CHECK_EVENTS = 20_000
#: events the per-event generator is timed over at most (it is the slow one)
PER_EVENT_GENERATOR_EVENTS = 300_000

_SECTION = re.compile(r"(<!-- nexmark-bench[^\n]*-->\n).*?(<!-- /nexmark-bench -->)", re.DOTALL)


def generators_alone(config: GeneratorConfig) -> dict:
    """Both generators over one task's events, in this process: wall events/s each (the
    per-event one over at most ``PER_EVENT_GENERATOR_EVENTS``)."""
    per_event = GeneratorConfig(**{**config.__dict__,
                                   "events": min(config.events, PER_EVENT_GENERATOR_EVENTS)})
    t0 = time.perf_counter()
    n = sum(1 for _ in EventStream(NexmarkGenerator(per_event)))
    dt = time.perf_counter() - t0
    t1 = time.perf_counter()
    m = sum(k for k, _ in ColumnarGenerator(NexmarkGenerator(config)).task_batches())
    dt1 = time.perf_counter() - t1
    return {"per_event": {"events": n, "seconds": round(dt, 3), "events_per_s": round(n / dt)},
            "columnar": {"events": m, "seconds": round(dt1, 3),
                         "events_per_s": round(m / dt1)},
            "columnar_vs_per_event": round((m / dt1) / (n / dt), 2)}


def _per_event_in_worker(config: GeneratorConfig) -> float:
    """CPU µs per event of the per-event generator run inside a Ray worker process (as a
    spout runs it), over the events ``generators_alone`` times it on."""
    import psutil
    import ray

    @ray.remote(num_cpus=1)
    def run(cfg: GeneratorConfig) -> float:
        p = psutil.Process()
        c0 = sum(p.cpu_times()[:2])
        n = sum(1 for _ in EventStream(NexmarkGenerator(cfg)))
        return (sum(p.cpu_times()[:2]) - c0) / n * 1e6

    cfg = GeneratorConfig(**{**config.__dict__,
                             "events": min(config.events, PER_EVENT_GENERATOR_EVENTS)})
    return round(ray.get(run.remote(cfg)), 2)


def _latency(samples, paced_eps: float, events: int, achieved: float, load=None) -> dict:
    lat = list(samples)
    return {"paced_events_per_s": round(paced_eps), "events": events,
            "achieved_events_per_s": round(achieved), "samples": len(lat),
            "p50_ms": round(quantile(lat, 0.50), 2) if lat else None,
            "p99_ms": round(quantile(lat, 0.99), 2) if lat else None,
            **({"load_1m": [round(x, 2) for x in load]} if load else {})}


def _ours_row(tp: QueryRun, paced: QueryRun, checked: str) -> dict:
    return {
        "engine": f"storm-on-ray, {tp.mode}",
        "events": tp.events, "rows": tp.rows, "seconds": round(tp.seconds, 3),
        "events_per_s": round(tp.events_per_s), "cpu_s": round(tp.cpu_s, 2),
        "events_per_cpu_s": round(tp.events_per_cpu_s),
        "cpu_us_per_event": {k: round(v / tp.events * 1e6, 2)
                             for k, v in tp.cpu_by_stage.items()},
        "machine_cpu_s": round(tp.machine_cpu_s, 2),
        "load_1m": [round(x, 2) for x in tp.load_1m],
        "peak_rss_mb": round(tp.peak_rss_mb), "check": checked,
        "latency": {**_latency(paced.latencies_ms, paced.paced_events_per_s, paced.events,
                               paced.events_per_s, paced.load_1m),
                    "measured_at": QUERIES[tp.query].latency_component},
    }


def _bytewax_row(tp: dict, paced: dict, pace: float, checked: str) -> dict:
    lat = paced["latency"]
    return {
        "engine": "Bytewax 0.21, one worker",
        "events": tp["events"], "rows": tp["rows"], "seconds": round(tp["seconds"], 3),
        "events_per_s": round(tp["events"] / tp["seconds"]), "cpu_s": round(tp["cpu_s"], 2),
        "events_per_cpu_s": round(tp["events"] / tp["cpu_s"]),
        "peak_rss_mb": round(tp["peak_rss_mb"]), "check": checked,
        "latency": {"paced_events_per_s": round(pace), "events": paced["events"],
                    "achieved_events_per_s": round(paced["events"] / paced["seconds"]),
                    "samples": lat["samples"],
                    "p50_ms": round(lat["p50_ms"], 2) if lat["p50_ms"] is not None else None,
                    "p99_ms": round(lat["p99_ms"], 2) if lat["p99_ms"] is not None else None},
    }


def summary_line(result: dict) -> str:
    parts = []
    for q, row in result["queries"].items():
        for mode in ("tuple", "batch"):
            if mode in row["engines"]:
                parts.append(f"nexmark_{q}_{mode}_eps_per_cpu_s="
                             f"{row['engines'][mode]['events_per_cpu_s']}")
        if "bytewax" in row["engines"]:
            parts.append(f"nexmark_{q}_bytewax_eps_per_cpu_s="
                         f"{row['engines']['bytewax']['events_per_cpu_s']}")
        if row.get("vs_bytewax") is not None:
            parts.append(f"nexmark_{q}_vs_bytewax={row['vs_bytewax']}")
    g = result["generator"]
    parts += [f"nexmark_generator_per_event_eps={g['per_event']['events_per_s']}",
              f"nexmark_generator_columnar_eps={g['columnar']['events_per_s']}",
              f"nexmark_generator_columnar_vs_per_event={g['columnar_vs_per_event']}"]
    return " ".join(parts)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def markdown(result: dict) -> str:
    """The bench section of docs/nexmark.md."""
    m, g = result["machine"], result["generator"]
    lines = [
        f"`{result['command']}` on {result['date']}: {result['events']:,} events (seed "
        f"{result['seed']}, event-time rate {result['rate']:,}/s), one source task, one "
        f"worker; storm-on-ray with `storm2`, acking off; Bytewax {result['bytewax']} in a "
        f"process of its own, one worker. {m['cpus']} cores shared with other work, "
        f"Python {m['python']}, Ray {m['ray']}. Results in "
        f"`benchmarks/results/nexmark.json`.",
        "",
        "| query | engine | events/s | events per CPU-s | CPU-s | peak memory | latency "
        "p50 / p99 at 50% pace | result rows | DuckDB check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for q, row in result["queries"].items():
        for r in row["engines"].values():
            lat = r["latency"]
            lines.append(
                f"| {q} {row['title']} | {r['engine']} | {r['events_per_s']:,} | "
                f"{r['events_per_cpu_s']:,} | {r['cpu_s']:.1f} | {r['peak_rss_mb']:,} MiB | "
                f"{_ms(lat['p50_ms'])} / {_ms(lat['p99_ms'])} ms | {r['rows']:,} | "
                f"{r['check']} |")
    lines += [
        "",
        "| query | per tuple / Bytewax, per CPU-s | batch events per CPU-s | Flink 1.13 per "
        "core | Flink 2.x V2 per core | per tuple / Flink 1.13 | batch / Flink 1.13 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for q, row in result["queries"].items():
        e, f1 = row["engines"], row["flink_1_13_events_per_core_s"]
        batch = e.get("batch", {}).get("events_per_cpu_s")
        tup = e.get("tuple", {}).get("events_per_cpu_s")
        lines.append(
            f"| {q} | {row['vs_bytewax'] if row.get('vs_bytewax') is not None else 'n/a'} | "
            f"{f'{batch:,}' if batch else '-'} | {f1:,} | "
            f"{row['flink_2_v2_events_per_core_s']:,} | "
            f"{f'{tup / f1:.3f}' if tup else '-'} | {f'{batch / f1:.2f}' if batch else '-'} |")
    behind = [(q, row) for q, row in result["queries"].items()
              if row.get("vs_bytewax") is not None and row["vs_bytewax"] < 1.0]
    if behind:
        gen_us = 1e6 / g["per_event"]["events_per_s"]
        in_worker = g.get("per_event_cpu_us_in_ray_worker")
        lines += [
            "",
            f"Where per tuple is behind Bytewax, CPU µs per event by stage. The per-event "
            f"generator, part of both sources, takes {gen_us:.1f} µs an event alone in the "
            f"driver (wall)"
            + (f" and {in_worker:.1f} µs of CPU inside a Ray worker process, as a spout "
               f"runs it" if in_worker else "") + ":",
            "",
            "| query | storm-on-ray: spout process | downstream processes | driver | total "
            "| Bytewax: total | per-event generator alone |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for q, row in behind:
            st = row["engines"]["tuple"]["cpu_us_per_event"]
            bw = 1e6 / row["engines"]["bytewax"]["events_per_cpu_s"]
            lines.append(f"| {q} | {st['spout']:.1f} | {st['downstream']:.1f} | "
                         f"{st['driver']:.1f} | {sum(st.values()):.1f} | {bw:.1f} | "
                         f"{gen_us:.1f} |")
    lines += [
        "",
        f"The generators alone (one task, in the driver, no topology): per event "
        f"{g['per_event']['events_per_s']:,} events/s over {g['per_event']['events']:,} "
        f"events, columnar {g['columnar']['events_per_s']:,} events/s over "
        f"{g['columnar']['events']:,}: {g['columnar_vs_per_event']}x.",
        f"Latency runs: each source paced at {PACE_SHARE:.0%} of its engine's rate above, "
        f"{result['latency_events']:,} events; measured at the sink (q4: where a bid takes "
        f"effect, its result exists only at the end). Batch mode stamps a batch, not an "
        f"event: its latency is the batch's.",
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


def _bytewax(q: str, config: GeneratorConfig, lat_config: GeneratorConfig, tmp: Path,
             data: Path, small: Path) -> tuple[dict | None, bool]:
    """Bytewax's row for ``q`` (None if its small check failed) and whether it passed."""
    from benchmarks.nexmark._bytewax import run_in_subprocess

    small_config = GeneratorConfig(**{**config.__dict__, "events": CHECK_EVENTS})
    run_in_subprocess(q, small_config, str(tmp / f"{q}-bw-small.parquet"))
    first = check(q, tmp / f"{q}-bw-small.parquet", small)
    print(f"{q} Bytewax at {CHECK_EVENTS:,} events: {first.report.splitlines()[0]}", flush=True)
    if not first.passed:
        return None, False
    tp = run_in_subprocess(q, config, str(tmp / f"{q}-bw.parquet"))
    result = check(q, tmp / f"{q}-bw.parquet", data)
    pace = PACE_SHARE * tp["events"] / tp["seconds"]
    paced = run_in_subprocess(q, lat_config, str(tmp / f"{q}-bw-paced.parquet"), pace)
    row = _bytewax_row(tp, paced, pace, "passed" if result.passed else "FAILED")
    print(f"{q} Bytewax: {row['events_per_s']:,} events/s, {row['events_per_cpu_s']:,} per "
          f"CPU-s; {result.report.splitlines()[0]}; latency p50 {row['latency']['p50_ms']} "
          f"ms, p99 {row['latency']['p99_ms']} ms", flush=True)
    return row, result.passed


def bench(args: argparse.Namespace) -> int:
    """Run the bench of ``args`` (``events``, ``latency_events``, ``queries``, ``seed``,
    ``rate``...); writes the JSON and the docs section; returns 0, or 1 if a check
    failed (the figures are still written, with the failure in the table)."""
    import ray.cloudpickle

    import benchmarks.nexmark as nexmark
    from cluster import LocalCluster

    try:
        from importlib.metadata import version

        import bytewax  # noqa: F401

        bytewax_version = version("bytewax")
    except ImportError:
        bytewax_version = None
        print("bytewax: not installed (pip install -e '.[bench]'); its rows are skipped")
    config = GeneratorConfig(events=args.events, seed=args.seed, rate=args.rate,
                             base_time=args.base_time,
                             occasional_delay_sec=args.occasional_delay_sec,
                             prob_delayed_event=args.prob_delayed_event)
    lat_events = args.latency_events or args.events
    lat_config = GeneratorConfig(**{**config.__dict__, "events": lat_events})
    ray.cloudpickle.register_pickle_by_value(nexmark)
    failed = False
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="nexmark-bench-") as tmp_name:
        tmp = Path(tmp_name)
        data, small = tmp / "data", tmp / "small"
        print(f"generating {args.events:,} events for the checks ...", flush=True)
        write_events(config, data)
        write_events(GeneratorConfig(**{**config.__dict__, "events": CHECK_EVENTS}), small)
        generator = generators_alone(config)
        print(f"generators alone: per event {generator['per_event']['events_per_s']:,} "
              f"events/s, columnar {generator['columnar']['events_per_s']:,} events/s",
              flush=True)
        with LocalCluster(num_cpus=2) as cluster:
            generator["per_event_cpu_us_in_ray_worker"] = _per_event_in_worker(config)
            for q in args.queries:
                engines: dict[str, dict] = {}
                for mode in QUERIES[q].modes:
                    if mode not in args.modes:
                        continue
                    out = tmp / f"{q}-{mode}.parquet"
                    tp = run_query(cluster, q, config, str(out), mode=mode)
                    result = check(q, out, data)
                    failed |= not result.passed
                    pace = PACE_SHARE * tp.events_per_s
                    paced = run_query(cluster, q, lat_config,
                                      str(tmp / f"{q}-{mode}-paced.parquet"),
                                      events_per_s=pace, mode=mode)
                    engines[mode] = _ours_row(tp, paced, "passed" if result.passed
                                              else "FAILED")
                    print(f"{q} {mode}: {tp.events_per_s:,.0f} events/s, "
                          f"{tp.events_per_cpu_s:,.0f} per CPU-s; "
                          f"{result.report.splitlines()[0]}; latency p50 "
                          f"{engines[mode]['latency']['p50_ms']} ms, p99 "
                          f"{engines[mode]['latency']['p99_ms']} ms", flush=True)
                if bytewax_version and not args.no_bytewax:
                    row, passed = _bytewax(q, config, lat_config, tmp, data, small)
                    failed |= not passed
                    if row is not None:
                        engines["bytewax"] = row
                vs = (round(engines["tuple"]["events_per_cpu_s"]
                            / engines["bytewax"]["events_per_cpu_s"], 3)
                      if "tuple" in engines and "bytewax" in engines else None)
                rows[q] = {"title": QUERIES[q].title, "engines": engines, "vs_bytewax": vs,
                           "flink_1_13_events_per_core_s": FLINK_1_13_EVENTS_PER_CORE_S[q],
                           "flink_2_v2_events_per_core_s": FLINK_2_V2_EVENTS_PER_CORE_S[q]}
    command = "python -m benchmarks.nexmark bench"
    if args.events != 1_000_000:
        command += f" --events {args.events}"
    if args.latency_events:
        command += f" --latency-events {args.latency_events}"
    result = {"events": args.events, "seed": args.seed, "rate": args.rate,
              "latency_events": lat_events, "source_tasks": 1, "workers": 1,
              "policy": "storm2", "acking": False, "pace_share": PACE_SHARE,
              "date": time.strftime("%Y-%m-%d"), "command": command,
              "bytewax": bytewax_version, "generator": generator, "queries": rows,
              "flink_source": FLINK_SOURCE, "machine": machine()}
    result["summary"] = summary_line(result)
    write_result("nexmark", result)
    write_docs(result)
    print(result["summary"])
    return 1 if failed else 0
