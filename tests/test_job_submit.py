"""``ray job submit`` for real (issue 6): a Ray head on loopback with its own ports and temp
dir, the word-count example submitted with the ``ray job submit`` CLI from the project
root, the job's status read back through ``JobSubmissionClient``, the head stopped."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests._util import until

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))

pytestmark = pytest.mark.ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A second Ray cluster (head only) on this machine; yields its dashboard address.
    Stopped by terminating ``ray start --block`` (never ``ray stop``, which would stop
    every Ray here, the test session's included)."""
    gcs, dash, agent, agent_grpc, metrics, runtime_env, client = (
        _free_port() for _ in range(7))
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: socket paths have a limit
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"
    # the job's `python` is the one on the head's PATH: this venv's, as for a user who
    # started Ray from the activated venv
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", "--num-cpus=2", f"--temp-dir={temp}",
         # its own ports: the defaults (agent 52365, client 10001...) may be held by the
         # test session's cluster, and then the head never gets an agent to run jobs
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
         f"--ray-client-server-port={client}",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        from ray.job_submission import JobSubmissionClient

        def job_server_up() -> bool:
            assert proc.poll() is None, proc.stdout.read()
            try:
                JobSubmissionClient(address).list_jobs()
                return True
            except Exception:
                return False

        until(job_server_up, 120, "the Ray head's job server", interval=1)
        yield address, env, f"127.0.0.1:{gcs}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _job_submit(address: str, env: dict, *entrypoint: str, wait: bool = True):
    """``ray job submit`` from the project root; returns the process and its output."""
    tries = []

    def submitted() -> bool:
        proc = subprocess.run(
            [RAY, "job", "submit", "--address", address, "--working-dir", ".",
             *([] if wait else ["--no-wait"]), "--", "python", *entrypoint],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        tries.append((proc, proc.stdout + proc.stderr))
        # the job server answers before the head's agent has registered; Ray's own
        # message says to try again, which is what a user would do
        return "No available agent to submit job" not in tries[-1][1]

    until(submitted, 120, "an agent on the head taking the job", interval=2)
    return tries[-1]


def test_ray_job_submit_runs_the_wordcount_example(ray_head):
    from ray.job_submission import JobStatus, JobSubmissionClient

    address, env, _ = ray_head
    proc, out = _job_submit(address, env, "examples/wordcount.py", "--repeat", "500")
    assert proc.returncode == 0, out[-4000:]
    assert "CHECK PASSED: 27 words, 16,000 counted, 2,500 sentences acked" in out, out[-4000:]
    client = JobSubmissionClient(address)
    (job,) = [j for j in client.list_jobs() if j.entrypoint.startswith("python examples/")]
    assert client.get_job_status(job.submission_id) == JobStatus.SUCCEEDED
    assert "CHECK PASSED" in client.get_job_logs(job.submission_id)


@pytest.mark.spark
def test_the_flights_job_submitted_and_watched_with_the_cli(ray_head, tmp_path):
    """The README's path: ``ray job submit`` the flights job (Spark on Ray inside the job),
    watch it with ``storm-on-ray stats flights`` while it runs, and read its result."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    address, env, gcs = ray_head
    proc, out = _job_submit(address, env, "examples/flights.py", "--out",
                            str(tmp_path / "flights.json"), wait=False)
    assert proc.returncode == 0, out[-4000:]
    client = JobSubmissionClient(address)
    (job,) = [j for j in client.list_jobs() if "flights.py" in j.entrypoint]
    cli = [str(Path(sys.executable).with_name("storm-on-ray")), "--address", gcs, "stats",
           "flights"]
    seen = None

    def job_ended() -> bool:
        nonlocal seen
        status = client.get_job_status(job.submission_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return True
        if seen is None:
            st = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
            if st.returncode == 0:
                seen = st.stdout
        return False

    until(job_ended, 900, "the flights job ending", interval=1)
    logs = client.get_job_logs(job.submission_id)
    assert client.get_job_status(job.submission_id) == JobStatus.SUCCEEDED, logs[-4000:]
    assert "CHECK PASSED: 240 carrier and route totals (336,776 flights)" in logs, logs[-3000:]
    assert seen is not None, "storm-on-ray stats never showed the running topology"
    rows = {ln.split()[0] for ln in seen.splitlines()[2:] if ln.strip()}
    assert {"flights", "route_stats", "carrier_stats", "ranking"} <= rows, seen
