"""``DbApiSink``: rows into a SQL database through any DB-API 2.0 driver (PEP 249), each
checkpoint's rows in one transaction with the checkpoint's id, so a commit repeated after a
restore changes nothing (the idempotent-commit side of Flink's two-phase commit, as Flink's
JDBC exactly-once sink records what it committed)."""

from __future__ import annotations

import re
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from topology._errors import TopologyError
from topology._redact import mask_text, safe_repr
from topology._two_phase import TwoPhaseCommitSink

#: the table where the sink records the checkpoints it committed
COMMITS_TABLE = "storm_sink_commits"
#: PEP 249's ``paramstyle`` values
PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")
#: the sink's own two parameters (its key, the checkpoint id) in each style; ``named`` and
#: ``pyformat`` placeholders are names, so those parameters go in a mapping
_OWN_MARKERS = {"qmark": ("?", "?"), "numeric": (":1", ":2"),
                "named": (":sink", ":checkpoint"), "format": ("%s", "%s"),
                "pyformat": ("%(sink)s", "%(checkpoint)s")}
# what is not SQL code: string literals, quoted identifiers (also MySQL's backticks),
# PostgreSQL's dollar quoting, comments; placeholders there are not parameters
_NOT_CODE = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\$(\w*)\$.*?\$\1\$"
                       r"|--[^\n]*|/\*.*?\*/", re.S)
# each style's placeholders; "::" (a PostgreSQL cast) is no ":name" or ":1"
_PLACEHOLDERS = {"qmark": re.compile(r"\?"),
                 "numeric": re.compile(r"(?<![:\w]):(\d+)"),
                 "named": re.compile(r"(?<![:\w]):([A-Za-z_]\w*)"),
                 "format": re.compile(r"%%|%s"),
                 "pyformat": re.compile(r"%%|%\((\w+)\)s|%s")}


class Placeholders(NamedTuple):
    """A statement's parameters in one paramstyle (:func:`placeholders`).

    Attributes:
        count: the parameters a row must bring: positional placeholders, the highest
            number (``numeric``) or the distinct names (``named``, ``pyformat``'s
            ``%(name)s``).
        names: the distinct names, in order of appearance (empty when positional).
    """

    count: int
    names: tuple[str, ...]


def placeholders(statement: str, style: str) -> Placeholders:
    """The parameters of ``statement`` in PEP 249 paramstyle ``style``, outside string
    literals, quoted identifiers and comments. ``pyformat`` counts ``%(name)s`` by name,
    or, in a statement without them, ``%s`` by position (which the drivers declaring
    ``pyformat``, psycopg and PyMySQL among them, take as ``format``).

    Raises:
        ValueError: an unknown style; ``numeric`` placeholders not numbered 1 to N;
            ``pyformat`` mixing ``%s`` and ``%(name)s``.
    """
    if style not in _PLACEHOLDERS:
        raise ValueError(f"unknown paramstyle {style!r}; PEP 249's are {list(PARAMSTYLES)}")
    code = _NOT_CODE.sub(" ", statement)
    found = [m for m in _PLACEHOLDERS[style].finditer(code) if m.group(0) != "%%"]
    if style == "numeric":
        numbers = {int(m.group(1)) for m in found}
        if numbers and numbers != set(range(1, max(numbers) + 1)):
            raise ValueError(f"numeric placeholders must be numbered 1 to N, got "
                             f"{sorted(numbers)}")
        return Placeholders(max(numbers, default=0), ())
    named = tuple(dict.fromkeys(m.group(1) for m in found if m.lastindex))
    positional = sum(1 for m in found if not m.lastindex)
    if named and positional:
        raise ValueError("pyformat placeholders mix %s and %(name)s")
    return Placeholders(len(named), named) if named else Placeholders(positional, ())


def driver_paramstyle(con: Any) -> str | None:
    """The ``paramstyle`` a DB-API connection's driver declares: that of the longest
    dotted prefix of ``type(con).__module__`` whose module declares one
    (``mysql.connector.connection_cext`` → ``mysql.connector``); None if none does."""
    parts = type(con).__module__.split(".")
    for n in range(len(parts), 0, -1):
        style = getattr(sys.modules.get(".".join(parts[:n])), "paramstyle", None)
        if style is not None:
            return style
    return None


class DbApiSink(TwoPhaseCommitSink):
    """Writes each input tuple as one execution of ``statement`` (an ``INSERT`` or an
    upsert, in the driver's parameter style), exactly once with the checkpoints.

    The rows of checkpoint N are kept in the task's checkpoint at the barrier; when N
    commits they go into the database in one transaction together with a row ``(sink,
    N)`` in the table ``storm_sink_commits`` (created at submit if missing), and a commit
    that finds its row there does nothing. ``sink`` is a key drawn once per task
    incarnation and kept with the rows, so runs of the same topology never mistake each
    other's checkpoint ids.

    The parameter style (PEP 249's ``paramstyle``) is ``paramstyle``, else the one the
    driver declares (:func:`driver_paramstyle`). A row goes as a sequence in the
    positional styles (``qmark`` ``?``, ``numeric`` ``:1``, ``format`` ``%s``, and
    ``pyformat`` written with ``%s``), as a mapping from field name to value in the named
    ones (``named`` ``:id``, ``pyformat`` ``%(id)s``).

    At submit (:meth:`open_target`) the sink runs its own parameterised ``SELECT`` on
    ``storm_sink_commits`` in a transaction it rolls back (proving the style), and checks
    that ``statement`` has a placeholder per field; ``statement`` itself never runs there.

    Args:
        connect: a picklable callable returning a new DB-API connection (e.g.
            ``functools.partial(sqlite3.connect, "out.db", timeout=30)``); called at submit
            on the driver and once per task.
        statement: the statement run per row, e.g. ``"INSERT INTO t (id, kind) VALUES (?, ?)"``.
        fields: the tuple fields passed as the row's parameters, in order (default: every
            field, in the input's order).
        paramstyle: one of PEP 249's ``"qmark"``, ``"numeric"``, ``"named"``,
            ``"format"``, ``"pyformat"`` (e.g. ``"named"`` for ``sqlite3``, which takes
            it beside its declared ``qmark``); None to use the driver's.

    Raises:
        TopologyError: a bad argument.
    """

    def __init__(self, connect: Callable[[], Any], statement: str,
                 fields: Sequence[str] | None = None, paramstyle: str | None = None) -> None:
        if not callable(connect):
            raise TopologyError(f"DbApiSink needs a connection factory, got {safe_repr(connect)}")
        if not isinstance(statement, str) or not statement.strip():
            raise TopologyError(f"DbApiSink needs a statement, got {statement!r}")
        if paramstyle is not None and paramstyle not in PARAMSTYLES:
            raise TopologyError(f"DbApiSink paramstyle must be one of {list(PARAMSTYLES)} or "
                                f"None, got {paramstyle!r}")
        self.connect = connect
        self.statement = statement
        self.fields = tuple(fields) if fields is not None else None
        self.paramstyle = paramstyle

    def __repr__(self) -> str:
        return f"DbApiSink({self._target()}, {self.statement!r})"

    def _target(self) -> str:
        """The connection factory as errors name it: its qualified name, or its ``repr``
        with credentials masked (a ``functools.partial`` holding a DSN)."""
        name = getattr(self.connect, "__qualname__", None)
        return name if isinstance(name, str) else safe_repr(self.connect)

    def _style(self, con: Any) -> str:
        style = self.paramstyle or driver_paramstyle(con)
        if style not in PARAMSTYLES:
            raise TopologyError(
                f"DbApiSink {self._target()}: the driver of {type(con).__module__}."
                f"{type(con).__qualname__} declares paramstyle {style!r}, not one of PEP "
                f"249's {list(PARAMSTYLES)}; pass DbApiSink(..., paramstyle=...)")
        return style

    def _own_statements(self, style: str) -> tuple[str, str]:
        p1, p2 = _OWN_MARKERS[style]
        return (f"SELECT 1 FROM {COMMITS_TABLE} WHERE sink = {p1} AND checkpoint = {p2}",
                f"INSERT INTO {COMMITS_TABLE} (sink, checkpoint) VALUES ({p1}, {p2})")

    @staticmethod
    def _own_params(style: str, key: str, checkpoint_id: int) -> Any:
        if style in ("named", "pyformat"):
            return {"sink": key, "checkpoint": checkpoint_id}
        return (key, checkpoint_id)

    def open_target(self, fields: tuple[str, ...] | None = None) -> None:
        """Connect, create ``storm_sink_commits`` if missing, run the sink's own
        ``SELECT`` on it in the driver's style in a transaction rolled back, and check the
        statement's placeholders against the fields each row will have (``fields`` given
        to the sink, else ``fields`` here: the input's). At submit, on the driver.

        Raises:
            TopologyError: the database cannot be reached or written, or refuses the
                style; the statement's placeholders do not number the fields (naming the
                style and both counts); no fields are known.
        """
        target = self._target()
        try:
            con = self.connect()
        except Exception as e:
            raise TopologyError(f"DbApiSink {target}: the database cannot be used: "
                                f"{type(e).__name__}: {mask_text(str(e))}") from None
        try:
            style = self._style(con)
            self._check_statement(style, self.fields or fields)
            select, _ = self._own_statements(style)
            try:
                cur = con.cursor()
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (sink VARCHAR(64) NOT NULL, "
                    f"checkpoint BIGINT NOT NULL, PRIMARY KEY (sink, checkpoint))")
                con.commit()
            except Exception as e:
                raise TopologyError(f"DbApiSink {target}: the database cannot be used: "
                                    f"{type(e).__name__}: {mask_text(str(e))}") from None
            try:
                cur.execute(select, self._own_params(style, "submit-check", 0))
                cur.fetchone()
            except Exception as e:
                raise TopologyError(
                    f"DbApiSink {target}: the driver refuses paramstyle {style!r}: the "
                    f"sink's {select!r} raised {type(e).__name__}: {mask_text(str(e))}; "
                    f"pass the style the driver takes as DbApiSink(..., paramstyle=...)"
                ) from None
            finally:
                con.rollback()
        finally:
            con.close()

    def _check_statement(self, style: str, fields: Sequence[str] | None) -> None:
        target = self._target()
        if fields is None:
            raise TopologyError(f"DbApiSink {target}: its input streams declare different "
                                f"fields, so a row's parameters are unknown; give "
                                f"DbApiSink(..., fields=...)")
        try:
            got = placeholders(self.statement, style)
        except ValueError as e:
            raise TopologyError(f"DbApiSink {target}: paramstyle {style!r}: {e} in "
                                f"{self.statement!r}") from None
        n = len(fields)
        if got.count != n:
            others = {s: c for s in PARAMSTYLES if s != style
                      and (c := _count_or_none(self.statement, s)) == n}
            hint = (f" (in paramstyle {next(iter(others))!r} it has {n}: pass "
                    f"DbApiSink(..., paramstyle=...) if the driver takes that)" if others
                    else "")
            raise TopologyError(
                f"DbApiSink {target}: in paramstyle {style!r} the statement "
                f"{self.statement!r} has {got.count} placeholder"
                f"{'s' if got.count != 1 else ''}, and each row has {n} "
                f"field{'s' if n != 1 else ''} {list(fields)}{hint}")
        unknown = [name for name in got.names if name not in fields]
        if unknown:
            raise TopologyError(f"DbApiSink {target}: in paramstyle {style!r} the statement "
                                f"names {unknown}, which are not among the row's fields "
                                f"{list(fields)}")

    def prepare(self, conf, context, collector) -> None:
        # one connection per thread that commits (a restore at start runs on another
        # thread than the executor's, and sqlite3 objects stay on their thread)
        self._con, self._con_thread = None, None
        self._key = uuid.uuid4().hex
        self._rows: list[list] = []
        self._names: tuple[str, ...] | None = self.fields
        self._fields_seen = None
        self.rows_committed = 0

    def write(self, tup) -> None:
        if self.fields is not None:
            self._rows.append([tup[f] for f in self.fields])
            return
        if tup.fields is not self._fields_seen:  # (one Fields object per input stream)
            self._fields_seen, self._names = tup.fields, tuple(tup.fields)
        self._rows.append(list(tup.values))

    def pre_commit(self, checkpoint_id: int) -> Any:
        if not self._rows:
            return None
        rows, self._rows = self._rows, []
        return {"key": self._key, "rows": rows, "names": list(self._names or ())}

    def commit(self, checkpoint_id: int, transaction: Any) -> None:
        if self._con_thread != threading.get_ident():
            self._con = self.connect()
            self._con_thread = threading.get_ident()
            self._style_now = style = self._style(self._con)
            self._select, self._insert = self._own_statements(style)
            self._row_names = placeholders(self.statement, style).names
        con, key, style = self._con, transaction["key"], self._style_now
        own = self._own_params(style, key, checkpoint_id)
        rows = transaction["rows"]
        if self._row_names:  # a named style: each row a mapping keyed by its fields
            names = transaction.get("names") or self.fields
            rows = [dict(zip(names, r, strict=True)) for r in rows]
        cur = con.cursor()
        try:
            cur.execute(self._select, own)
            if cur.fetchone() is not None:
                con.rollback()
                return
            cur.executemany(self.statement, rows)
            cur.execute(self._insert, own)
            con.commit()
        except Exception:
            con.rollback()
            raise
        self.rows_committed += len(rows)

    def abort(self, checkpoint_id: int, transaction: Any) -> None:
        """(Nothing reached the database before the commit.)"""

    def recover(self, last_committed: int | None) -> None:
        self._rows = []

    def cleanup(self) -> None:
        if self._con is not None and self._con_thread == threading.get_ident():
            self._con.close()


def _count_or_none(statement: str, style: str) -> int | None:
    try:
        return placeholders(statement, style).count
    except ValueError:
        return None
