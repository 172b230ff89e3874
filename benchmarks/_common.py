"""What every benchmark shares: the results folder, the machine record, a quantile."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


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
