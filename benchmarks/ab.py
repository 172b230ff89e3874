"""An A/B of two checkouts on the same benchmarks, runs alternating, medians compared.

Each side is a checkout with its own virtual environment (``<tree>/.venv``), e.g. the
base commit in a ``git worktree`` and the change in another. Every benchmark runs as
``python -m benchmarks.NAME ARGS`` in each tree in turn (A, B, A, B, ...), so drift of a
shared, noisy machine falls on both sides alike; the figures are each run's closing
``key=value`` line. A figure regresses when B's median is more than ``--tolerance`` worse
than A's, "worse" by the direction given in ``--higher-is-better`` / ``--lower-is-better``.

    python -m benchmarks.ab --a ../base --b ../new --runs 3 \\
        --bench "peers --tuples 300000" --bench "halt_lag --seconds 10 --rounds 1"

Writes benchmarks/results/ab.json (the raw figures of every run, both medians and the
ratio per figure); the last line is ``key=value ...`` with each compared figure's ratio
B/A and ``regressions=N``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks._common import write_result


def closing_figures(output: str) -> dict[str, float]:
    """The numeric ``key=value`` pairs of the last line of ``output`` that has any."""
    for line in reversed(output.strip().splitlines()):
        pairs = dict(p.split("=", 1) for p in line.split() if "=" in p)
        figures = {}
        for k, v in pairs.items():
            try:
                figures[k] = float(v)
            except ValueError:
                continue
        if figures:
            return figures
    return {}


def run_once(tree: Path, bench: str, timeout_s: float) -> dict[str, float]:
    """One run of ``bench`` (``"NAME ARGS..."``) in ``tree``; its closing figures.

    Raises:
        RuntimeError: the run failed or printed no ``key=value`` line.
    """
    name, *args = shlex.split(bench)
    cmd = [str(tree / ".venv" / "bin" / "python"), "-m", f"benchmarks.{name}", *args]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout_s)
    figures = closing_figures(proc.stdout)
    if proc.returncode != 0 or not figures:
        raise RuntimeError(f"{tree}: {' '.join(cmd)} exited {proc.returncode}:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return figures


def worse(a: float, b: float, higher_is_better: bool, tolerance: float) -> bool:
    """True when ``b`` is more than ``tolerance`` (a fraction) worse than ``a``."""
    if higher_is_better:
        return b < a * (1 - tolerance)
    return b > a * (1 + tolerance)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="the base checkout")
    ap.add_argument("--b", type=Path, required=True, help="the changed checkout")
    ap.add_argument("--bench", action="append", required=True,
                    help='a benchmark and its arguments, e.g. "peers --tuples 300000"')
    ap.add_argument("--runs", type=int, default=3, help="runs per side and benchmark")
    ap.add_argument("--higher-is-better", default="", help="comma-separated figure names")
    ap.add_argument("--lower-is-better", default="", help="comma-separated figure names")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    args = ap.parse_args()
    higher = {k for k in args.higher_is_better.split(",") if k}
    lower = {k for k in args.lower_is_better.split(",") if k}
    sides = {"a": args.a.resolve(), "b": args.b.resolve()}
    raw: dict[str, dict[str, list[dict[str, float]]]] = {}
    failed: list[dict] = []
    for bench in args.bench:
        raw[bench] = {"a": [], "b": []}
        for i in range(args.runs):
            for side in ("a", "b"):
                t0 = time.monotonic()
                try:
                    figures = run_once(sides[side], bench, args.timeout_s)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    # a failed run is recorded and left out of the medians (the figures
                    # compared below need every run), never retried silently
                    failed.append({"bench": bench, "side": side, "run": i + 1,
                                   "error": str(e)[-2000:]})
                    print(f"{bench} run {i + 1} {side}: FAILED ({str(e)[-200:]!r})",
                          flush=True)
                    continue
                raw[bench][side].append(figures)
                print(f"{bench} run {i + 1} {side}: {time.monotonic() - t0:.0f} s "
                      + " ".join(f"{k}={v:g}" for k, v in figures.items()), flush=True)
    compared: dict[str, dict] = {}
    for bench, runs in raw.items():
        for key in sorted(higher | lower):
            a_vals = [r[key] for r in runs["a"] if key in r]
            b_vals = [r[key] for r in runs["b"] if key in r]
            if not a_vals or not b_vals:
                continue
            ma, mb = statistics.median(a_vals), statistics.median(b_vals)
            compared[key] = {"bench": bench, "a": a_vals, "b": b_vals, "median_a": ma,
                             "median_b": mb, "ratio_b_over_a": mb / ma if ma else None,
                             "higher_is_better": key in higher,
                             "regressed": worse(ma, mb, key in higher, args.tolerance)}
    write_result("ab", {"a": str(sides["a"]), "b": str(sides["b"]), "runs": args.runs,
                        "tolerance": args.tolerance, "raw": raw, "failed_runs": failed,
                        "compared": compared})
    regressions = sum(c["regressed"] for c in compared.values())
    print(" ".join(f"{k}_ratio={c['ratio_b_over_a']:.3f}" for k, c in compared.items()
                   if c["ratio_b_over_a"] is not None)
          + f" regressions={regressions} failed_runs={len(failed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
