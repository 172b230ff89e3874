"""The main job, run as the README runs it: a subprocess with its own embedded Ray and Spark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.spark


def test_flights_job_checks_itself_against_spark_sql(tmp_path):
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "flights.py"), "--out",
                           str(out)], capture_output=True, text=True, timeout=1200, cwd=ROOT)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert ("CHECK PASSED: 240 carrier and route totals (336,776 flights), back in Spark"
            in proc.stdout), tail
    summary = json.loads(out.read_text())
    assert summary["flights"] == 336_776
    carriers = [r for r in summary["summary"] if r["kind"] == "carrier"]
    assert len(carriers) == 16 and carriers[0]["key"] == "F9"  # worst mean arrival delay
    assert (tmp_path / "summary.txt").read_text().startswith("NYC 2013 flights: 336,776")
