"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries, a cluster
``initdb``-ed into a temp directory, trust authentication on loopback, a free port and its
unix socket in that directory; stopped (``pg_ctl stop -m fast``) and removed after.

PostgreSQL refuses to run as root, so when the tests run as root (CI does) ``initdb`` and
``pg_ctl`` run as the ``postgres`` system user (``runuser -u postgres --``) in a directory
that user owns; as anyone else they run directly.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time

from tests._util import free_port

#: the install hint shared by the skip reasons
_INSTALL = ("Debian: apt-get install postgresql; .ci/run installs it when run as root")


#: why the tests that need only the driver skip
NO_DRIVER = ("the psycopg driver is not installed (pip install 'psycopg[binary]', in the test "
             "extra): the DbApiSink tests against PostgreSQL need it")


def bin_dir() -> str | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``, ``pg_ctl`` and
    ``postgres`` (or the directory of an ``initdb`` on PATH), or None."""
    found = [os.path.dirname(p) for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    if shutil.which("initdb"):
        found.append(os.path.dirname(shutil.which("initdb")))

    def version(d: str) -> tuple:
        v = os.path.basename(os.path.dirname(d))
        return tuple(int(x) for x in v.split(".") if x.isdigit())

    for d in sorted(found, key=version, reverse=True):
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def skip_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here (no server binaries, no ``psycopg``
    driver, or root without a ``postgres`` user to run the server as), or None."""
    if bin_dir() is None:
        return (f"PostgreSQL's server is not installed ({_INSTALL}): the DbApiSink tests "
                "against PostgreSQL need a real server")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return NO_DRIVER
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return ("running as root and there is no 'postgres' system user to run "
                    f"PostgreSQL as (it refuses root; {_INSTALL} creates the user)")
    return None


class PostgresServer:
    """PostgreSQL on ``127.0.0.1:<port>``, its data directory and unix socket in a temp
    directory of its own (under the system temp dir, which the ``postgres`` user can
    reach, unlike pytest's per-user ``tmp_path``).

    Attributes:
        port: the TCP port, free when chosen.
        directory: the temp directory (``data/``, ``postgres.log``, the socket); removed
            by :meth:`stop`.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory: str | None = None
        self._bin = bin_dir()
        self._as_postgres = os.geteuid() == 0

    @property
    def conninfo(self) -> str:
        """The libpq connection string to the ``postgres`` database as user ``postgres``."""
        return (f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres "
                f"connect_timeout=5")

    def connect(self, **kwargs):
        """A new ``psycopg`` connection (autocommit off, as DB-API's default)."""
        import psycopg

        return psycopg.connect(self.conninfo, **kwargs)

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a PostgreSQL binary, as the ``postgres`` user when we are root; raise with
        its output on failure."""
        cmd = [os.path.join(self._bin, args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        # cwd: the caller's may be unreadable to the postgres user (pg_ctl checks it)
        p = subprocess.run(cmd, cwd=self.directory, capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        return p

    def answers(self) -> bool:
        """Whether a connection succeeds and runs ``SELECT 1``."""
        import psycopg

        try:
            with psycopg.connect(self.conninfo, connect_timeout=2) as con:
                return con.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """``initdb`` a new cluster (trust authentication, ``fsync`` off: the data is
        thrown away), start it on :attr:`port`, and wait until a connection answers.

        Raises:
            RuntimeError: initdb or the server failed (with its output or log's path), or
                no connection answered within ``timeout`` s.
        """
        self.directory = tempfile.mkdtemp(prefix="storm-pg-")
        if self._as_postgres:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.directory, pw.pw_uid, pw.pw_gid)
        data, log = os.path.join(self.directory, "data"), os.path.join(self.directory,
                                                                        "postgres.log")
        self._run("initdb", "-D", data, "--auth=trust", "--username=postgres",
                  "--encoding=UTF8", "--locale=C", "--no-sync")
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
                   f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        try:
            self._run("pg_ctl", "start", "-D", data, "-l", log, "-o", options, "-w",
                      "-t", str(int(timeout)), timeout=timeout + 10)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"PostgreSQL did not start: {e}; see {log}") from None
        deadline = time.monotonic() + timeout
        while not self.answers():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL on port {self.port} did not answer within "
                                   f"{timeout} s")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        """``pg_ctl stop -m fast`` (open connections are ended) and remove the directory."""
        if self.directory is None:
            return
        data = os.path.join(self.directory, "data")
        try:
            if os.path.exists(os.path.join(data, "postmaster.pid")):
                self._run("pg_ctl", "stop", "-D", data, "-m", "fast", "-w")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
