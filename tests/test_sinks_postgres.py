"""``DbApiSink`` against a real PostgreSQL (tests/_postgres.py) through ``psycopg`` 3: the
snapshot, commit and restart orderings of the SQLite tests in test_sinks_exactly_once.py,
a commit repeated after a restore that finds its row in ``storm_sink_commits``, an upsert
replayed after a rollback, and an unreachable server refused at submit (the sink on Ray,
with its tasks killed, is tested on SQLite in test_sinks_exactly_once.py). Skipped,
saying why, where PostgreSQL's server or the driver is missing."""

from __future__ import annotations

import functools
import itertools

import pytest

from tests._postgres import NO_DRIVER, PostgresServer, skip_reason
from tests._util import free_port
from tests.test_sinks_exactly_once import Checkpoints
from topology import DbApiSink, TopologyError
from topology._db_sink import COMMITS_TABLE


@pytest.fixture(scope="module")
def pg():
    """One PostgreSQL server for the module; each test writes tables of its own."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    server = PostgresServer().start()
    yield server
    server.stop()


_tables = itertools.count()


def _table(pg, columns: str) -> str:
    """A new table ``t<n>`` with ``columns``; its name."""
    name = f"t{next(_tables)}"
    with pg.connect() as con:
        con.execute(f"CREATE TABLE {name} ({columns})")
    return name


def _sink(pg, statement: str) -> DbApiSink:
    import psycopg

    return DbApiSink(functools.partial(psycopg.connect, pg.conninfo), statement)


def _rows(pg, sql: str) -> list[tuple]:
    with pg.connect() as con:
        return sorted(con.execute(sql).fetchall())


def test_rows_go_in_with_their_checkpoint_once_across_restarts(pg):
    """The SQLite test's orderings, then one more: checkpoint 3 published, the task dies
    before its next snapshot, and the restored task publishes 3 again, which finds its row
    in storm_sink_commits and changes nothing."""
    t = _table(pg, "id INTEGER, kind TEXT")
    c = Checkpoints(lambda: _sink(pg, f"INSERT INTO {t} (id, kind) VALUES (%s, %s)"), t)
    ids = lambda: [r[0] for r in _rows(pg, f"SELECT id FROM {t}")]  # noqa: E731
    c.write(range(10))
    c.snapshot(1)
    assert ids() == []                         # nothing before the commit
    c.task.internal_commit(1)
    assert ids() == list(range(10))
    c.write(range(10, 15))
    c.snapshot(2)
    c.restart(1)                               # 2 did not commit: its rows are gone
    c.write(range(10, 20))
    c.snapshot(2)
    c.restart(2)                               # committed; restored and published
    c.task.internal_commit(2)                  # again: a no-op
    assert ids() == list(range(20))
    c.write(range(20, 25))
    c.snapshot(3)
    c.task.internal_commit(3)                  # published; the task dies before snapshot 4
    c.restart(3)                               # the restore publishes 3 again: a no-op
    assert (c.task.committed, c.task.sink.rows_committed) == (1, 0)  # called, wrote nothing
    assert _rows(pg, f"SELECT id, kind FROM {t}") == [(i, f"k{i % 3}") for i in range(25)]
    assert _rows(pg, f"SELECT count(*) FROM {COMMITS_TABLE}")[0][0] >= 3


def test_an_upsert_replayed_after_a_restore_stays_one_row_per_id(pg):
    """``INSERT ... ON CONFLICT (id) DO UPDATE`` counting its applications: rows of a
    checkpoint that did not commit, replayed, and a commit repeated after a restore leave
    one row per id, updated once per committed write."""
    t = _table(pg, "id INTEGER PRIMARY KEY, kind TEXT, n INTEGER NOT NULL")
    upsert = (f"INSERT INTO {t} (id, kind, n) VALUES (%s, %s, 1) "
              f"ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, n = {t}.n + 1")
    c = Checkpoints(lambda: _sink(pg, upsert), t)
    c.write(range(10))
    c.snapshot(1)
    c.task.internal_commit(1)
    c.write(range(5, 15))                      # ids 5-9 again: updates
    c.snapshot(2)
    c.restart(1)                               # 2 did not commit
    c.write(range(5, 15))                      # the replay
    c.snapshot(2)
    c.task.internal_commit(2)
    c.restart(2)                               # the restore publishes 2 again: a no-op
    c.task.internal_commit(2)
    assert _rows(pg, f"SELECT id, kind, n FROM {t}") == [
        (i, f"k{i % 3}", 2 if 5 <= i < 10 else 1) for i in range(15)]


def test_an_unreachable_server_is_refused_at_submit_naming_the_factory():
    psycopg = pytest.importorskip("psycopg", reason=NO_DRIVER)
    conninfo = f"host=127.0.0.1 port={free_port()} user=postgres connect_timeout=5"
    sink = DbApiSink(functools.partial(psycopg.connect, conninfo), "INSERT INTO t VALUES (%s)")
    with pytest.raises(TopologyError, match=r"DbApiSink functools\.partial\(.*psycopg.*"
                       + conninfo.split()[1] + r".*the database cannot be used"):
        sink.open_target()


def test_pyformat_names_take_each_row_as_a_mapping_and_are_counted_at_submit(pg):
    """psycopg declares ``pyformat``: a statement written with ``%(name)s`` gets each row as
    a mapping keyed by its fields (here in another order than the input's); one whose
    names do not number the fields is refused at submit."""
    t = _table(pg, "id INTEGER, kind TEXT")
    c = Checkpoints(lambda: _sink(pg, f"INSERT INTO {t} (kind, id) VALUES (%(kind)s, %(id)s)"),
                    t)
    c.write(range(5))
    c.snapshot(1)
    c.task.internal_commit(1)
    assert _rows(pg, f"SELECT id, kind FROM {t}") == [(i, f"k{i % 3}") for i in range(5)]
    with pytest.raises(TopologyError, match=r"'pyformat' .* 1 placeholder, .* 2 fields"):
        _sink(pg, f"INSERT INTO {t} (id) VALUES (%(id)s)").open_target(("id", "kind"))
