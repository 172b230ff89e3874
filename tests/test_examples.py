"""The main job, run as the README runs it: a subprocess with its own embedded Ray and Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.e2e]


#: Lines the main job printed that were not its own: Ray's error at every
#: submit about executors' constructor arguments in the driver's object store, Ray's
#: deprecation warnings from every executor and from ray.data.from_spark, Log4j's failed
#: reconfiguration in Spark's driver, Spark's console progress bars, pyspark's notice about
#: RayDP's own use of ``DataFrame.sql_ctx``. (RayDP's Spark master still prints Ray's
#: notice about its use of ``ray.worker``, from its own process.)
NOT_THE_JOBS = ("constructor arguments in the object store", "RayDeprecationWarning",
                "``parallelism`` is deprecated", "Reconfiguration failed", "[Stage ",
                "DataFrame.sql_ctx is an internal property")


def test_flights_job_checks_itself_against_spark_sql(tmp_path):
    out = tmp_path / "summary.json"
    # as a user runs it: Ray's default token authentication (on), whatever the session set
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "flights.py"), "--out",
                           str(out)], capture_output=True, text=True, timeout=1200, cwd=ROOT,
                          env=env)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    for noise in NOT_THE_JOBS:
        assert noise not in proc.stdout + proc.stderr, tail
    assert ("CHECK PASSED: 240 carrier and route totals (336,776 flights), back in Spark"
            in proc.stdout), tail
    summary = json.loads(out.read_text())
    assert summary["flights"] == 336_776
    carriers = [r for r in summary["summary"] if r["kind"] == "carrier"]
    assert len(carriers) == 16 and carriers[0]["key"] == "F9"  # worst mean arrival delay
    assert (tmp_path / "summary.txt").read_text().startswith("NYC 2013 flights: 336,776")
