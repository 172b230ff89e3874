"""What every benchmark shares: the results folder, the machine record, a quantile, and
the scoring of a rate against the rate it should have had (follow error, reaction time)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(*names: str):
    """Load the example scripts ``names`` (in order, e.g. ``"flights", "flights_live"``) as
    modules under their own names, as running them as scripts would, so that a later one
    finds the modules it imports by plain name; returns the last one. The examples are
    scripts, not a package: this keeps ``sys.path`` as it is."""
    module = None
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return module


def machine() -> dict:
    """CPU count and Python/Ray versions, stored with every result."""
    import ray

    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "ray": ray.__version__}


def quantile(xs: list[float], q: float) -> float:
    """Nearest-rank ``q`` quantile (0-1) of a non-empty list."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def write_result(name: str, result: dict) -> Path:
    """Write ``result`` as ``benchmarks/results/<name>.json``; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **result}, indent=2, default=str))
    return path


# -- following a target rate (Flink's producer/consumer experiment and the flow-control
# comparison score a producer's rate the same way) ---------------------------------------

#: the time left out of a follow error after each change of phase (s). Fixed and the same
#: for every controller: a window that started when the controller had settled would let
#: a slow or oscillating one choose its own scoring window (or none at all).
SETTLE_S = 1.0


class RateSample(NamedTuple):
    """A rate over the interval ``[start, end)`` (s since the run's start)."""

    start: float
    end: float
    rate: float


def interval_rates(readings: Sequence[tuple[float, float]], scale: float = 1.0
                   ) -> list[RateSample]:
    """Cumulative counter readings ``(t s, count)`` → the rate between consecutive readings
    (count per s, times ``scale``: e.g. ``100 / full_speed`` for % of a full speed)."""
    return [RateSample(ta, tb, (cb - ca) / (tb - ta) * scale)
            for (ta, ca), (tb, cb) in zip(readings, readings[1:], strict=False) if tb > ta]


def _inside(rates: Sequence[RateSample], start: float, end: float) -> list[RateSample]:
    return [r for r in rates if start <= r.start and r.end <= end]


def follow_error(rates: Sequence[RateSample], start: float, end: float, target: float,
                 settle_s: float = SETTLE_S) -> float:
    """How far a rate stayed from the rate it should have had over one phase.

    The time-weighted mean of ``|rate - target|`` over the samples lying inside
    ``[start + settle_s, end)``: the whole phase but a fixed settling time. Every phase
    gets a value; one whose rate never settled counts with its full error (leaving such
    phases out would make an oscillating controller look perfect). ``target`` is the rate
    the producer should have: ``min(its own pace, the consumer's imposed speed)``, in the
    units of ``rates``.

    Raises:
        ValueError: no sample lies inside the window (a phase shorter than ``settle_s``
            plus one sampling interval): lengthen the phase or sample more often.
    """
    inside = _inside(rates, start + settle_s, end)
    if not inside:
        raise ValueError(f"no rate sample inside [{start + settle_s:.2f}, {end:.2f}) s: the "
                         f"phase is too short for a {settle_s} s settling time")
    total = sum(r.end - r.start for r in inside)
    return sum(abs(r.rate - target) * (r.end - r.start) for r in inside) / total


def reaction_time(rates: Sequence[RateSample], start: float, end: float, target: float,
                  tol: float, stay: bool = True) -> float | None:
    """Seconds from ``start`` to the end of the first sample within ``tol`` of ``target``
    (with ``stay``: the first from which every later sample of ``[start, end)`` is within
    it too); None if there is none."""
    inside = _inside(rates, start, end)
    for i, r in enumerate(inside):
        ok = inside[i:] if stay else (r,)
        if all(abs(x.rate - target) <= tol for x in ok):
            return r.end - start
    return None


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Population standard deviation over the mean (None for fewer than two values or a
    zero mean): how much a rate swings around its level."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else None
