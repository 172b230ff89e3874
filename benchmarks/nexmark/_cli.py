"""The Nexmark command: generate the events, run a query, or run the bench.

    python -m benchmarks.nexmark generate --events N [--seed S] [--rate R]
        [--base-time T] [--occasional-delay-sec D --prob-delayed-event P] --out DIR
    python -m benchmarks.nexmark run --query qK [--mode tuple|batch] --events N [--seed S]
        [--rate R] [--parallelism K] [--workers W] [--policy P] [--events-per-s E]
        --out FILE.parquet [--check [--data DIR]]
    python -m benchmarks.nexmark bench [--events 1000000] [--latency-events N]
        [--queries q0 q1 ...] [--modes tuple batch] [--no-bytewax]

``generate`` writes person.parquet, auction.parquet and bid.parquet; ``run`` runs the
query's topology on the spout-side generator (the same events as ``generate`` for the
same ``--events``, ``--seed``, ``--rate``, ``--base-time`` and delay), writes its result,
and with ``--check`` compares it with DuckDB's answer (the SQL in docs/nexmark.md) over
Parquet generated in a temporary directory, or in ``--data DIR``: it prints ``CHECK
PASSED qK`` or the rows that differ and exits 1. Bad input is refused before anything
starts (exit 2).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.nexmark._generator import BASE_TIME_MS, DEFAULT_RATE, GeneratorConfig
from benchmarks.nexmark._parquet import DATA_FILES
from benchmarks.nexmark._queries import QUERIES


def _positive_int(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def _non_negative_int(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def _probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {v}")
    return v


def _add_events(p: argparse.ArgumentParser, events_default: int | None = None) -> None:
    p.add_argument("--events", type=_positive_int, required=events_default is None,
                   default=events_default,
                   help="events to generate, all kinds (ids 0 .. N-1)")
    p.add_argument("--seed", type=_non_negative_int, default=0)
    p.add_argument("--rate", type=_positive_int, default=DEFAULT_RATE,
                   help="events per second of event time (dateTime advances 1e6/R us per "
                        "event; default %(default)s)")
    p.add_argument("--base-time", type=_non_negative_int, default=BASE_TIME_MS,
                   help="dateTime of event 0, epoch ms (default 2015-07-15T00:00Z)")
    p.add_argument("--occasional-delay-sec", type=_non_negative_int, default=3,
                   help="a delayed event arrives up to this late (Nexmark's "
                        "occasionalDelaySec; default %(default)s)")
    p.add_argument("--prob-delayed-event", type=_probability, default=0.0,
                   help="probability that an event is delayed (probDelayedEvent; default "
                        "0: in order)")


def _config(args: argparse.Namespace, events: int | None = None) -> GeneratorConfig:
    return GeneratorConfig(events=events or args.events, seed=args.seed, rate=args.rate,
                           base_time=args.base_time,
                           occasional_delay_sec=args.occasional_delay_sec,
                           prob_delayed_event=args.prob_delayed_event)


def parser() -> argparse.ArgumentParser:
    from topology import CONFIG_KEYS

    ap = argparse.ArgumentParser(prog="python -m benchmarks.nexmark",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write the events as Parquet")
    _add_events(g)
    g.add_argument("--out", required=True, type=Path,
                   help="directory (missing or without the three files)")
    r = sub.add_parser("run", help="run a query's topology and write its result")
    r.add_argument("--query", required=True, choices=sorted(QUERIES))
    r.add_argument("--mode", default="tuple", choices=("tuple", "batch"),
                   help="tuple: a tuple per event (every query); batch: Arrow record batches "
                        "and batch bolts (q0, q1, q2); default %(default)s")
    _add_events(r)
    r.add_argument("--parallelism", type=_positive_int, default=1,
                   help="tasks of the spout and of each query bolt (default 1)")
    r.add_argument("--workers", type=_positive_int, default=1,
                   help="topology.workers (default 1)")
    r.add_argument("--policy", default="storm2",
                   choices=CONFIG_KEYS["topology.backpressure.policy"].choices,
                   help="topology.backpressure.policy (default storm2)")
    r.add_argument("--events-per-s", type=_positive_float, default=None,
                   help="pace the spout at this many events per wall-clock second "
                        "(default: as fast as it goes)")
    r.add_argument("--out", required=True, type=Path, help="the result file (must not exist)")
    r.add_argument("--check", action="store_true",
                   help="compare the result with DuckDB's answer (docs/nexmark.md)")
    r.add_argument("--data", type=Path, default=None,
                   help="with --check: the generated Parquet to use (else generated into a "
                        "temporary directory)")
    b = sub.add_parser("bench", help="q0-q4 per tuple, in batch mode and in Bytewax, the "
                                     "generators alone, latency at 50%% of max; writes "
                                     "benchmarks/results/nexmark.json and the table in "
                                     "docs/nexmark.md")
    _add_events(b, events_default=1_000_000)
    b.add_argument("--latency-events", type=_positive_int, default=None,
                   help="events of each paced latency run (default: --events)")
    b.add_argument("--queries", nargs="+", choices=sorted(QUERIES), default=sorted(QUERIES))
    b.add_argument("--modes", nargs="+", choices=("tuple", "batch"), default=["tuple", "batch"],
                   help="storm-on-ray's modes to run (batch where a query has it)")
    b.add_argument("--no-bytewax", action="store_true", help="leave Bytewax's rows out")
    return ap


def _refuse(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what cannot work, before anything starts (``ap.error`` exits 2)."""
    if args.command == "generate":
        taken = [n for n in DATA_FILES if (args.out / n).exists()]
        if taken:
            ap.error(f"--out {args.out} already holds {', '.join(taken)}: give a new or empty "
                     f"directory, or delete them")
        if args.out.exists() and not args.out.is_dir():
            ap.error(f"--out {args.out} is a file: give a directory")
    elif args.command == "bench":
        if args.prob_delayed_event > 0 and "batch" in args.modes:
            ap.error("batch mode cannot delay events: drop --prob-delayed-event, or give "
                     "--modes tuple")
    elif args.command == "run":
        modes = QUERIES[args.query].modes
        if args.mode not in modes:
            ap.error(f"--mode {args.mode}: {args.query} runs in mode {' or '.join(modes)}")
        if args.mode == "batch" and args.prob_delayed_event > 0:
            ap.error("--mode batch emits events in id order and cannot delay them: drop "
                     "--prob-delayed-event, or use --mode tuple")
        if args.out.exists():
            ap.error(f"--out {args.out} exists: give a new path, or delete it")
        if args.out.parent.exists() and not args.out.parent.is_dir():
            ap.error(f"--out {args.out}: {args.out.parent} is not a directory")
        if args.data is not None:
            if not args.check:
                ap.error("--data is only read by --check: add --check, or drop --data")
            missing = [n for n in DATA_FILES if not (args.data / n).exists()]
            if missing:
                ap.error(f"--data {args.data} lacks {', '.join(missing)}: make it with "
                         f"'python -m benchmarks.nexmark generate --events {args.events} "
                         f"--seed {args.seed} --out {args.data}', or drop --data")


def _cluster():
    """A ``LocalCluster``: joins the Ray this process already runs (the tests' one), else
    starts one; the nexmark modules travel to the actors by value."""
    import ray.cloudpickle

    import benchmarks.nexmark as nexmark
    from cluster import LocalCluster

    ray.cloudpickle.register_pickle_by_value(nexmark)
    return LocalCluster()


def generate(args: argparse.Namespace) -> int:
    from benchmarks.nexmark._parquet import write_events

    t0 = time.perf_counter()
    rows = write_events(_config(args), args.out)
    dt = time.perf_counter() - t0
    print(f"wrote {', '.join(f'{n:,} {k}' for k, n in rows.items())} to {args.out} in "
          f"{dt:.1f} s ({args.events / dt:,.0f} events/s)")
    return 0


def run(args: argparse.Namespace) -> int:
    from benchmarks.nexmark._check import check
    from benchmarks.nexmark._parquet import write_events
    from benchmarks.nexmark._run import run_query

    config = _config(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    conf = {"topology.workers": args.workers, "topology.backpressure.policy": args.policy}
    cluster = _cluster()
    try:
        r = run_query(cluster, args.query, config, str(args.out), args.parallelism, conf,
                      args.events_per_s, mode=args.mode)
    finally:
        cluster.shutdown()
    print(f"{args.query} ({QUERIES[args.query].title}, {args.mode}): {r.events:,} events in "
          f"{r.seconds:.2f} s = {r.events_per_s:,.0f} events/s, "
          f"{r.events_per_cpu_s:,.0f} per CPU-s ({r.cpu_s:.1f} CPU-s); {r.rows:,} rows "
          f"→ {args.out}")
    if not args.check:
        return 0
    with tempfile.TemporaryDirectory(prefix="nexmark-") as tmp:
        data = args.data
        if data is None:
            data = Path(tmp)
            write_events(config, data)
        result = check(args.query, args.out, data)
    print(result.report)
    return 0 if result.passed else 1


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); returns the exit status:
    0, 1 (a failed check) or 2 (bad input, refused before anything started)."""
    ap = parser()
    args = ap.parse_args(argv)
    _refuse(ap, args)
    if args.command == "generate":
        return generate(args)
    if args.command == "run":
        return run(args)
    from benchmarks.nexmark._bench import bench

    return bench(args)


