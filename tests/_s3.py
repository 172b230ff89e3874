"""A real S3-compatible server for the tests: moto's standalone server (``moto_server``,
from ``moto[server]`` in the ``test`` extra) on a free loopback port. It stands in for S3's
API only: none of S3's latency, consistency model or throttling."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

from tests._util import free_port

#: why the S3 tests skip where moto's server is missing
NO_SERVER = ("moto_server is not installed (pip install 'moto[server]>=5.1,<6', in the test "
             "extra): the S3 savepoint tests need an S3-compatible server")

#: dummy credentials and no EC2 metadata lookups (the AWS SDK would otherwise probe it)
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_EC2_METADATA_DISABLED": "true"}


def server_binary() -> str | None:
    """The ``moto_server`` beside this Python, or on PATH, or None."""
    here = os.path.join(os.path.dirname(sys.executable), "moto_server")
    return here if os.access(here, os.X_OK) else shutil.which("moto_server")


class MotoServer:
    """``moto_server -H 127.0.0.1 -p <port>``, its buckets in memory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> MotoServer:
        """Start it and wait until its port accepts connections."""
        self.proc = subprocess.Popen([server_binary(), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto_server exited ({self.proc.returncode})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not listen in {timeout} s") from None
                time.sleep(0.05)

    @property
    def query(self) -> str:
        """The URI query that points ``pyarrow.fs`` at this server."""
        return f"?endpoint_override=127.0.0.1:{self.port}&scheme=http&region=us-east-1"

    def uri(self, bucket: str, path: str) -> str:
        """``s3://bucket/path`` on this server."""
        return f"s3://{bucket}/{path}{self.query}"

    def filesystem(self):
        """A ``pyarrow.fs.S3FileSystem`` on this server (it may create buckets)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                 region="us-east-1", allow_bucket_creation=True)

    def create_bucket(self, bucket: str) -> None:
        self.filesystem().create_dir(bucket)

    def is_file(self, bucket: str, path: str) -> bool:
        """Whether ``bucket/path`` is an object on this server."""
        import pyarrow.fs as pafs

        return self.filesystem().get_file_info(f"{bucket}/{path}").type == pafs.FileType.File

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
