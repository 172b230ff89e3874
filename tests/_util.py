"""Helpers shared by the integration tests."""

from __future__ import annotations

import time


def until(cond, timeout: float = 60.0, what: str = "condition", interval: float = 0.05):
    """Poll ``cond`` every ``interval`` s (50 ms) until it returns a true value (returned);
    fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(interval)


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: seconds a stopping RayHead gets to shut down before its process group is killed
STOP_GRACE_S = 5


class RayHead:
    """A second Ray cluster (head only) on loopback, started with ``ray start --head`` and
    Ray's default token authentication: ``RAY_AUTH_MODE`` unset and a token available, so
    Ray turns authentication on, as on a user's machine that has ``~/.ray/auth_token``.
    The token is the head's own (``RAY_AUTH_TOKEN_PATH`` → a file in its temp dir): the
    user's ``~/.ray`` is never read or written.

    Attributes:
        dashboard: the job server's address (``http://127.0.0.1:<port>``).
        gcs: the GCS address (``127.0.0.1:<port>``).
        env: the environment of a user of this cluster (its token, this venv first on
            PATH, no ``RAY_ADDRESS`` and no ``RAY_AUTH_MODE``).
        token: the cluster's token.

    Stopped by terminating ``ray start --block`` (never ``ray stop``, which would stop
    every Ray here, the test session's included).
    """

    def __init__(self) -> None:
        import os
        import secrets
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        ports = [free_port() for _ in range(7)]
        gcs, dash, agent, agent_grpc, metrics, runtime_env, client = ports
        self.temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: socket paths
        self.token = secrets.token_hex(32)
        token_file = Path(self.temp, "auth_token")
        token_file.write_text(self.token)
        env = {k: v for k, v in os.environ.items()
               if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        env["RAY_AUTH_TOKEN_PATH"] = str(token_file)
        # the job's `python` is the one on the head's PATH: this venv's, as for a user who
        # started Ray from the activated venv
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        self.env = env
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
             "--node-ip-address=127.0.0.1", f"--port={gcs}", "--include-dashboard=true",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--num-cpus=2",
             f"--temp-dir={self.temp}",
             # its own ports: the defaults (agent 52365, client 10001...) may be held by
             # the test session's cluster, and then the head never gets an agent for jobs
             f"--dashboard-agent-listen-port={agent}",
             f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
             f"--runtime-env-agent-port={runtime_env}", f"--ray-client-server-port={client}",
             "--disable-usage-stats"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.dashboard = f"http://127.0.0.1:{dash}"
        self.gcs = f"127.0.0.1:{gcs}"

    def wait_ready(self, timeout: float = 120) -> None:
        """Block until the job server answers with the token (``timeout`` s at most)."""
        from ray.job_submission import JobSubmissionClient

        headers = {"Authorization": f"Bearer {self.token}"}

        def job_server_up() -> bool:
            assert self.proc.poll() is None, self.proc.stdout.read()
            try:
                JobSubmissionClient(self.dashboard, headers=headers).list_jobs()
                return True
            except Exception:
                return False

        until(job_server_up, timeout, "the Ray head's job server", interval=1)

    def client(self):
        """A ``JobSubmissionClient`` for this head, sending its token."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard,
                                   headers={"Authorization": f"Bearer {self.token}"})

    def stop(self) -> None:
        import os
        import shutil
        import signal
        import subprocess

        # Ray's own shutdown of a head (SIGTERM to ``ray start --block``) can take a
        # minute; what it leaves after a short grace is killed with the process group
        # (``start_new_session``: only this head's processes are in it)
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
