"""``ray job submit`` for real: a Ray head on loopback with its own ports and temp dir and
Ray's token authentication on, the word-count example submitted with the ``ray job submit``
CLI from the project root with the user's token, the job's status read back through
``JobSubmissionClient``, the head stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._util import RayHead, until

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))

pytestmark = [pytest.mark.ray, pytest.mark.e2e]


@pytest.fixture(scope="module")
def ray_head():
    """A second Ray cluster (head only) on this machine with Ray's default token
    authentication on (``tests._util.RayHead``), shared by this module's tests (each
    names its own job); yields it."""
    head = RayHead()
    try:
        head.wait_ready()
        yield head
    finally:
        head.stop()


def _job_submit(address: str, env: dict, *entrypoint: str, wait: bool = True):
    """``ray job submit`` from the project root, as the README says to run it against a
    cluster with authentication on (``RAY_AUTH_MODE=token``: Ray's job client sends the
    user's token only then); returns the process and its output."""
    env = {**env, "RAY_AUTH_MODE": "token"}
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


#: What Ray printed at every submit while executors took the topology as a constructor
#: argument in the driver's object store (the test asserts it is gone).
OBJECT_STORE_ARGS = "constructor arguments in the object store"


def test_ray_job_submit_runs_the_wordcount_example(ray_head):
    from ray.job_submission import JobStatus

    proc, out = _job_submit(ray_head.dashboard, ray_head.env, "examples/wordcount.py",
                            "--repeat", "500")
    assert proc.returncode == 0, out[-4000:]
    assert "CHECK PASSED: 27 words, 16,000 counted, 2,500 sentences acked" in out, out[-4000:]
    assert OBJECT_STORE_ARGS not in out, out[-4000:]
    client = ray_head.client()
    (job,) = [j for j in client.list_jobs() if j.entrypoint.endswith("--repeat 500")]
    assert client.get_job_status(job.submission_id) == JobStatus.SUCCEEDED
    assert "CHECK PASSED" in client.get_job_logs(job.submission_id)


def test_ray_job_submit_with_a_wrong_token_is_refused(ray_head):
    """The head really has authentication on: a client with another token is refused."""
    env = {**ray_head.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"}
    proc = subprocess.run(
        [RAY, "job", "submit", "--address", ray_head.dashboard, "--working-dir", ".", "--",
         "python", "examples/wordcount.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Authentication failed" in proc.stdout + proc.stderr, proc.stderr[-2000:]


def test_a_submitted_job_is_watched_and_killed_with_the_cli(ray_head):
    """The README's path for a running job: ``ray job submit --no-wait`` the word count on
    an endless stream (``--forever``: it ends only when killed), see its four components
    in ``storm-on-ray stats`` (an answer during the submit lists only the executors
    registered so far, so poll), then ``storm-on-ray kill`` it: the topology is gone and
    the job ends, saying so. (The main job's own run is tests/test_examples.py: it runs
    once per suite.)"""
    from ray.job_submission import JobStatus

    env, gcs = ray_head.env, ray_head.gcs
    proc, out = _job_submit(ray_head.dashboard, env, "examples/wordcount.py", "--forever",
                            wait=False)
    assert proc.returncode == 0, out[-4000:]
    client = ray_head.client()
    (job,) = [j for j in client.list_jobs() if j.entrypoint.endswith("--forever")]
    cli = str(Path(sys.executable).with_name("storm-on-ray"))
    components = {"sentences", "split", "count", "totals"}
    seen = ""

    def rows() -> set:
        return {ln.split()[0] for ln in seen.splitlines()[2:] if ln.strip()}

    def all_components_shown() -> bool:
        nonlocal seen
        status = client.get_job_status(job.submission_id)
        assert status == JobStatus.RUNNING or status == JobStatus.PENDING, (
            status, client.get_job_logs(job.submission_id)[-3000:])
        st = subprocess.run([cli, "--address", gcs, "stats", "wordcount"], env=env,
                            capture_output=True, text=True, timeout=120)
        seen = st.stdout if st.returncode == 0 else seen
        return components <= rows()

    until(all_components_shown, 300, "storm-on-ray stats showing the word count", interval=1)
    killed = subprocess.run([cli, "--address", gcs, "kill", "wordcount"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == 0, killed.stderr
    listed = subprocess.run([cli, "--address", gcs, "list"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "wordcount" not in listed.stdout, listed.stdout
    until(lambda: client.get_job_status(job.submission_id).is_terminal(), 300,
          "the job ending once its topology was killed", interval=1)
    logs = client.get_job_logs(job.submission_id)
    assert client.get_job_status(job.submission_id) == JobStatus.SUCCEEDED, logs[-3000:]
    assert "wordcount was killed" in logs, logs[-3000:]
