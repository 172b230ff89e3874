"""A real ``redis-server`` for the tests: on a free loopback port, in a directory of its
own, stopped and started again on the same port (an outage) or killed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from tests._util import free_port

#: why the redis tests skip where there is no server binary
NO_SERVER = ("redis-server is not installed (Debian: apt-get install redis-server; .ci/run "
             "installs it when run as root): the redis state provider's tests need a real "
             "server")


def server_binary() -> str | None:
    """The ``redis-server`` on PATH (or Debian's), or None."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None)


class RedisServer:
    """``redis-server`` on ``127.0.0.1:<port>`` with its files in ``directory``.

    ``persistent``: the append-only file with ``appendfsync always`` (every write is on
    disk before its reply), so a server killed and started again from ``directory`` has
    every acknowledged write: an outage, not a data loss. Otherwise no persistence at all
    (``--save '' --appendonly no``).
    """

    def __init__(self, directory: str, persistent: bool = False,
                 port: int | None = None, extra_args: tuple = (),
                 password: str | None = None) -> None:
        self.directory = directory
        self.persistent = persistent
        #: more ``redis-server`` arguments (e.g. ``--tls-port``); ``password``: its
        #: ``--requirepass``, which the readiness PING uses
        self.extra_args, self.password = tuple(extra_args), password
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def config(self) -> dict:
        """The provider config that names this server."""
        return {"host": "127.0.0.1", "port": self.port}

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2,
                           socket_connect_timeout=2, password=self.password)

    def ping(self) -> bool:
        import redis

        c = self.client()
        try:
            return bool(c.ping())
        except redis.RedisError:
            return False
        finally:
            c.close()

    def start(self, timeout: float = 15.0) -> RedisServer:
        """Start it and wait until ``PING`` answers."""
        os.makedirs(self.directory, exist_ok=True)
        args = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.directory, "--save", "",
                "--logfile", os.path.join(self.directory, "redis.log")]
        args += (["--appendonly", "yes", "--appendfsync", "always"] if self.persistent
                 else ["--appendonly", "no"])
        args += [*self.extra_args, *(["--requirepass", self.password] if self.password else [])]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited ({self.proc.returncode}); see "
                                   f"{self.directory}/redis.log")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING "
                                   f"within {timeout} s")
            time.sleep(0.05)
        return self

    def stop(self, kill: bool = False) -> None:
        """Stop it (SIGTERM; ``kill``: SIGKILL, as a crash) and wait for the process."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
