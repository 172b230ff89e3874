"""``DbApiSink``: rows into a SQL database through any DB-API 2.0 driver (PEP 249), each
checkpoint's rows in one transaction with the checkpoint's id, so a commit repeated after a
restore changes nothing (the idempotent-commit side of Flink's two-phase commit, as Flink's
JDBC exactly-once sink records what it committed)."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from topology._errors import TopologyError
from topology._two_phase import TwoPhaseCommitSink

#: the table where the sink records the checkpoints it committed
COMMITS_TABLE = "storm_sink_commits"
_MARKERS = {"qmark": ("?", "?"), "format": ("%s", "%s"), "pyformat": ("%s", "%s"),
            "numeric": (":1", ":2")}


class DbApiSink(TwoPhaseCommitSink):
    """Writes each input tuple as one execution of ``statement`` (an ``INSERT`` or an
    upsert, in the driver's parameter style), exactly once with the checkpoints.

    The rows of checkpoint N are kept in the task's checkpoint at the barrier; when N
    commits they go into the database in one transaction together with a row ``(sink,
    N)`` in the table ``storm_sink_commits`` (created at submit if missing), and a commit
    that finds its row there does nothing. ``sink`` is a key drawn once per task
    incarnation and kept with the rows, so runs of the same topology never mistake each
    other's checkpoint ids.

    Args:
        connect: a picklable callable returning a new DB-API connection (e.g.
            ``functools.partial(sqlite3.connect, "out.db", timeout=30)``); called at submit
            on the driver and once per task.
        statement: the statement run per row, e.g. ``"INSERT INTO t (id, kind) VALUES (?, ?)"``.
        fields: the tuple fields passed as the row's parameters, in order (default: every
            field, in the input's order).

    Raises:
        TopologyError: a bad argument.
    """

    def __init__(self, connect: Callable[[], Any], statement: str,
                 fields: Sequence[str] | None = None) -> None:
        if not callable(connect):
            raise TopologyError(f"DbApiSink needs a connection factory, got {connect!r}")
        if not isinstance(statement, str) or not statement.strip():
            raise TopologyError(f"DbApiSink needs a statement, got {statement!r}")
        self.connect = connect
        self.statement = statement
        self.fields = tuple(fields) if fields is not None else None

    def _target(self) -> str:
        return getattr(self.connect, "__qualname__", None) or repr(self.connect)

    def _connection(self) -> tuple[Any, tuple[str, str]]:
        con = self.connect()
        style = getattr(sys.modules.get(type(con).__module__.split(".")[0]), "paramstyle",
                        "qmark")
        return con, _MARKERS.get(style, ("?", "?"))

    def open_target(self, fields=None) -> None:
        """Connect and create ``storm_sink_commits`` if missing (at submit).

        Raises:
            TopologyError: the database cannot be reached or written, naming the factory.
        """
        try:
            con, _ = self._connection()
            try:
                con.cursor().execute(
                    f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (sink VARCHAR(64) NOT NULL, "
                    f"checkpoint BIGINT NOT NULL, PRIMARY KEY (sink, checkpoint))")
                con.commit()
            finally:
                con.close()
        except Exception as e:
            raise TopologyError(f"DbApiSink {self._target()}: the database cannot be used: "
                                f"{type(e).__name__}: {e}") from None

    def prepare(self, conf, context, collector) -> None:
        # one connection per thread that commits (a restore at start runs on another
        # thread than the executor's, and sqlite3 objects stay on their thread)
        self._con, self._con_thread = None, None
        self._key = uuid.uuid4().hex
        self._rows: list[list] = []
        self.rows_committed = 0

    def write(self, tup) -> None:
        self._rows.append(list(tup.values) if self.fields is None
                          else [tup[f] for f in self.fields])

    def pre_commit(self, checkpoint_id: int) -> Any:
        if not self._rows:
            return None
        rows, self._rows = self._rows, []
        return {"key": self._key, "rows": rows}

    def commit(self, checkpoint_id: int, transaction: Any) -> None:
        if self._con_thread != threading.get_ident():
            self._con, (self._p1, self._p2) = self._connection()
            self._con_thread = threading.get_ident()
        con, key = self._con, transaction["key"]
        cur = con.cursor()
        try:
            cur.execute(f"SELECT 1 FROM {COMMITS_TABLE} WHERE sink = {self._p1} AND "
                        f"checkpoint = {self._p2}", (key, checkpoint_id))
            if cur.fetchone() is not None:
                con.rollback()
                return
            cur.executemany(self.statement, transaction["rows"])
            cur.execute(f"INSERT INTO {COMMITS_TABLE} (sink, checkpoint) VALUES "
                        f"({self._p1}, {self._p2})", (key, checkpoint_id))
            con.commit()
        except Exception:
            con.rollback()
            raise
        self.rows_committed += len(transaction["rows"])

    def abort(self, checkpoint_id: int, transaction: Any) -> None:
        """(Nothing reached the database before the commit.)"""

    def recover(self, last_committed: int | None) -> None:
        self._rows = []

    def cleanup(self) -> None:
        if self._con is not None and self._con_thread == threading.get_ident():
            self._con.close()
