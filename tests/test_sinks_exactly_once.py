"""Two-phase-commit sinks (topology/_two_phase.py, actors/_two_phase.py): ParquetSink's
staging, commit, abort and recovery driven as the checkpoints drive them, then on Ray with
the sink's and a relay's executors killed mid-stream."""

from __future__ import annotations

import os

import pyarrow.dataset as pads
import pytest

from actors._two_phase import SinkError, TwoPhaseCommitExecutor
from tests._util import until
from topology import (
    DbApiSink,
    Fields,
    IterableSpout,
    ParquetSink,
    TopologyBuilder,
    TopologyError,
    Tuple,
)
from topology._components import TopologyContext

FIELDS = Fields(("id", "kind"))


class _Collector:
    def report_error(self, e):  # pragma: no cover
        raise AssertionError(e)


class Checkpoints:
    """A sink task driven as the runtime drives it, with its checkpointed entries per
    checkpoint id (what a restore of that id returns)."""

    def __init__(self, sink_factory, path, submit_id="5ab00001", component="sink",
                 task_index=0, fields=FIELDS):
        self.path, self.factory = path, sink_factory
        self.submit_id, self.component, self.index = submit_id, component, task_index
        self.fields = fields
        self.stored: dict[int, dict] = {}
        self.task = self._start(None)

    def _start(self, checkpoint_id):
        ex = TwoPhaseCommitExecutor(self.factory())
        ex.sink.open_target(tuple(self.fields))
        tasks = [3 + i for i in range(self.index + 1)]
        ex.prepare({}, TopologyContext("t", self.component, tasks[-1], self.index,
                                       {self.component: tasks}, submit_id=self.submit_id),
                   _Collector())
        ex.restore_internals(dict(self.stored.get(checkpoint_id, {})), checkpoint_id)
        return ex

    def write(self, ids, kind=lambda i: "k" + str(i % 3)):
        for i in ids:
            self.task.execute(Tuple([i, kind(i)], self.fields, "src", 1, "default"))

    def snapshot(self, cid):
        puts, deletes = self.task.internal_changes(cid)
        entries = dict(self.stored.get(max(self.stored, default=None), {}))
        entries.update(puts)
        for k in deletes:
            entries.pop(k, None)
        self.stored[cid] = entries

    def restart(self, checkpoint_id):
        """The task died; a new one restores ``checkpoint_id`` (the last committed)."""
        self.stored = {c: e for c, e in self.stored.items() if c <= checkpoint_id}
        self.task = self._start(checkpoint_id)


def _ids(path, column: str = "id") -> list[int]:
    """The committed dataset's ``column`` (pyarrow skips ``_staging``)."""
    ds = pads.dataset(path, format="parquet")
    return sorted(ds.to_table().column(column).to_pylist()) if ds.files else []


def test_files_appear_at_commit_and_once_across_a_restart_between_stage_and_commit(tmp_path):
    path = str(tmp_path / "out")
    c = Checkpoints(lambda: ParquetSink(path), path)
    c.write(range(10))
    c.snapshot(1)
    staging = os.path.join(path, "_staging", "5ab00001")  # the submit's staging directory
    assert os.listdir(staging) and _ids(path) == []  # staged only
    c.task.internal_commit(1)
    assert _ids(path) == list(range(10))
    c.write(range(10, 20))
    c.snapshot(2)                      # staged, and the task dies before its commit
    c.restart(1)                       # checkpoint 2 did not commit: its file goes
    assert os.listdir(staging) == []
    c.write(range(10, 20))             # the replay
    c.snapshot(2)
    c.restart(2)                       # committed, the task died before publishing
    assert _ids(path) == list(range(20))
    c.task.internal_commit(2)          # a late commit message changes nothing
    assert _ids(path) == list(range(20))
    names = sorted(os.listdir(path))
    assert names == ["_staging", "part-sink-0-5ab00001-1-0.parquet",
                     "part-sink-0-5ab00001-2-0.parquet"]


def test_min_rows_carries_rows_in_the_checkpoint_until_a_file_is_due(tmp_path):
    """Below min_rows the rows ride in the checkpoint (no file); a rollback restores them;
    the file written once enough rows came holds each row once."""
    path = str(tmp_path / "out")
    c = Checkpoints(lambda: ParquetSink(path, min_rows=25, partition_by=("kind",)), path)
    c.write(range(10))
    c.snapshot(1)
    c.task.internal_commit(1)
    c.write(range(10, 20))
    c.snapshot(2)
    c.task.internal_commit(2)
    assert _ids(path) == []            # 20 rows < 25: carried, not written
    c.write(range(20, 23))             # after checkpoint 2, then a failure
    c.restart(2)
    c.write(range(20, 30))             # the replay and more: 30 rows
    c.snapshot(3)
    c.task.internal_commit(3)
    assert _ids(path) == list(range(30))
    assert sorted(d for d in os.listdir(path) if d != "_staging") == [
        "kind=k0", "kind=k1", "kind=k2"]
    got = pads.dataset(path, format="parquet", partitioning="hive").to_table()
    assert sorted(zip(got.column("id").to_pylist(), got.column("kind").to_pylist(),
                      strict=True)) == [(i, f"k{i % 3}") for i in range(30)]


def test_two_submits_into_one_path_keep_both_and_recovery_drops_only_its_own(tmp_path):
    """Files are named per submit (Flink's ``FileSink`` puts a uid in each part file's
    name): two runs of one topology into one path, whose checkpoint ids both start at 1,
    keep both runs' rows; a task starting (``recover(None)``) leaves alone what another
    submit staged, and one restoring what another component staged, also one whose id
    extends its own with ``-<its task id>``."""
    path = str(tmp_path / "out")

    def run(submit, component="sink"):
        return Checkpoints(lambda: ParquetSink(path), path, submit, component)

    first = run("aaaaaaa1")
    first.write(range(10))
    first.snapshot(1)
    first.task.internal_commit(1)
    first.write(range(10, 20))
    first.snapshot(2)                  # staged; its commit comes after the next run starts
    cousin = run("aaaaaaa1", "sink-3")
    cousin.write(range(20, 30))
    cousin.snapshot(1)                 # staged, not yet committed
    second = run("bbbbbbb2")           # the topology submitted again: ids from 1 again
    second.write(range(100, 110))
    second.snapshot(1)
    second.task.internal_commit(1)
    first.restart(2)                   # a restore of "sink": "sink-3"'s staged file stays
    cousin.task.internal_commit(1)
    assert _ids(path) == [*range(30), *range(100, 110)]


def test_a_carry_still_pending_at_the_next_barrier_is_not_carried_twice(tmp_path):
    """Each buffered row is in one transaction of a checkpoint (Flink's
    ``CheckpointCommittableManager``): when barrier 2 comes before checkpoint 1's commit,
    checkpoint 2 holds both carries, and a restore of it takes each row back once; without
    a restore, the rows of both carries reach the file once."""
    for restore in (True, False):
        path = str(tmp_path / f"out-{restore}")
        c = Checkpoints(lambda: ParquetSink(path, min_rows=25), path)  # noqa: B023
        c.write(range(10))
        c.snapshot(1)                  # carried (10 < 25); commit 1 has not come
        c.write(range(10, 20))
        c.snapshot(2)                  # carried too
        if restore:
            c.restart(2)
        else:
            c.task.internal_commit(2)  # commits 1 and 2, late
        c.write(range(20, 30))
        c.snapshot(3)
        c.task.internal_commit(3)
        assert _ids(path) == list(range(30)), f"restore={restore}"


def test_a_carry_still_pending_when_the_input_ends_goes_into_the_last_file_once(tmp_path):
    """The input ends (the next checkpoint may be the last) while checkpoint 1's carry
    awaits its commit: checkpoint 2's file takes its rows too, and names the carry, so
    neither the carry's late commit nor a restore of checkpoint 2 adds them again."""
    for restore in (False, True):
        path = str(tmp_path / f"out-{restore}")
        c = Checkpoints(lambda: ParquetSink(path, min_rows=25), path)  # noqa: B023
        c.write(range(10))
        c.snapshot(1)                  # carried (10 < 25); commit 1 has not come
        c.write(range(10, 15))
        c.task.input_ended()
        c.snapshot(2)                  # perhaps the last checkpoint: everything is staged
        if restore:                    # the task dies after 2 committed; its restore
            c.restart(2)               # is told the input ended and checkpoints again
            c.task.input_ended()
            c.snapshot(3)
            c.task.internal_commit(3)
        else:
            c.task.internal_commit(2)  # commits 1 and 2, late; 2 was the last checkpoint
        assert _ids(path) == list(range(15)), f"restore={restore}"

def test_a_downscale_publishes_every_old_tasks_carry_of_one_checkpoint_once(tmp_path):
    """3 -> 2 tasks (``assign_transactions``): new task 0 restores old task 0's and old
    task 2's carries of checkpoint 1, and old task 0's file of checkpoint 2 that took its
    own carry's rows in; each transaction is published by itself (Flink's
    ``TwoPhaseCommitSinkFunction`` commits every restored transaction handle), so every
    row reaches the dataset once."""
    from actors._codec import decode_key, value_encoder
    from actors.state._internals import INTERNAL_PREFIX
    from actors.state._rescale import assign_transactions

    path, enc = str(tmp_path / "out"), value_encoder()

    def sink():
        return ParquetSink(path, min_rows=100)

    old = {}
    for k in range(3):
        c = Checkpoints(sink, path, "aaaaaaa1", task_index=k)
        c.write(range(10 * k, 10 * k + 5))
        c.snapshot(1)                  # carried (5 < 100); commit 1 has not come
        if k == 0:
            c.write(range(5, 10))
            c.task.input_ended()       # old task 0's file of 2 takes its carry's rows in
        c.snapshot(2)
        old[k] = {INTERNAL_PREFIX + enc(key): v for key, v in c.stored[2].items()}
    for j, entries in assign_transactions(old, 2).items():
        c = Checkpoints(sink, path, "bbbbbbb2", task_index=j)
        c.stored = {2: {decode_key(key[1:]): v for key, v in entries.items()}}
        c.restart(2)
        c.task.input_ended()
        c.snapshot(3)
        c.task.internal_commit(3)
    assert _ids(path) == [*range(10), *range(10, 15), *range(20, 25)]


#: partition values that an unescaped path loses or merges ("" is null, as Spark writes it)
PARTITION_VALUES = ["a/b", "a_b", "a b", "x:y=z?", "100%", "%41", "café", "2024-05-01 12:30:00",
                    None, ""]


def _partitioned(tmp_path, values) -> str:
    path = str(tmp_path / "out")
    c = Checkpoints(lambda: ParquetSink(path, partition_by=("kind",)), path)
    c.write(range(len(values)), kind=values.__getitem__)
    c.snapshot(1)
    c.task.internal_commit(1)
    return path


def test_values_equal_in_python_keep_partitions_of_their_own(tmp_path):
    """``1 == True == 1.0`` in Python, yet each is written to the directory its own
    ``str`` names (grouping by the values put all three under the first one's)."""
    import pyarrow as pa

    path = _partitioned(tmp_path, [1, True, 1.0])
    as_text = pads.partitioning(pa.schema([("kind", pa.string())]), flavor="hive")
    t = pads.dataset(path, format="parquet", partitioning=as_text).to_table()
    assert sorted(zip(t["id"].to_pylist(), t["kind"].to_pylist(), strict=True)) == [
        (0, "1"), (1, "True"), (2, "1.0")]


def test_partition_values_read_back_as_written_by_pyarrow_and_duckdb(tmp_path):
    """Partition directories escape path characters by percent-encoding, as Spark's
    ``ExternalCatalogUtils.escapePathName``, and null is ``__HIVE_DEFAULT_PARTITION__``:
    pyarrow's hive partitioning and DuckDB's read back ``str(value)``, and null as null
    (the typed value with a partition schema)."""
    import datetime

    import duckdb
    import pyarrow as pa

    path = _partitioned(tmp_path, PARTITION_VALUES)
    want = sorted(enumerate([v or None for v in PARTITION_VALUES]), key=repr)
    t = pads.dataset(path, format="parquet", partitioning="hive").to_table()
    assert sorted(zip(t["id"].to_pylist(), t["kind"].to_pylist(), strict=True),
                  key=repr) == want
    got = duckdb.sql(f"SELECT id, kind FROM read_parquet('{path}/*/*.parquet', "
                     f"hive_partitioning = true, hive_types = {{'kind': 'VARCHAR'}})")
    assert sorted(got.fetchall(), key=repr) == want
    when = datetime.datetime(2024, 5, 1, 12, 30)
    typed = pads.partitioning(pa.schema([("kind", pa.timestamp("us"))]), flavor="hive")
    t = pads.dataset(_partitioned(tmp_path / "ts", [when, None]), format="parquet",
                     partitioning=typed).to_table()
    assert sorted(t["kind"].to_pylist(), key=repr) == [None, when]


def _db_rows(db) -> list[int]:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT id FROM t"))
    finally:
        con.close()


def _db_sink(db):
    import functools
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER, kind TEXT)")
    con.commit()
    con.close()
    return DbApiSink(functools.partial(sqlite3.connect, db, timeout=30),
                     "INSERT INTO t (id, kind) VALUES (?, ?)")


def test_db_rows_go_in_with_their_checkpoint_once_across_restarts(tmp_path):
    db = str(tmp_path / "out.db")
    c = Checkpoints(lambda: _db_sink(db), db)
    c.write(range(10))
    c.snapshot(1)
    assert _db_rows(db) == []                  # nothing before the commit
    c.task.internal_commit(1)
    c.write(range(10, 15))
    c.snapshot(2)
    c.restart(1)                               # 2 did not commit: its rows are gone
    c.write(range(10, 20))
    c.snapshot(2)
    c.restart(2)                               # committed; restored and published
    c.task.internal_commit(2)                  # again: a no-op
    assert _db_rows(db) == list(range(20))


def test_spark_reads_partition_values_back_as_written(spark, tmp_path):
    """Spark's reader, which unescapes what ``escapePathName`` escapes, reads back
    ``str(value)``, and null (and ``""``) as null."""
    path = _partitioned(tmp_path, PARTITION_VALUES)
    rows = spark.read.schema("id BIGINT, kind STRING").parquet(path).collect()
    assert sorted(((r.id, r.kind) for r in rows), key=repr) == sorted(
        enumerate([v or None for v in PARTITION_VALUES]), key=repr)

def test_named_paramstyle_commits_each_row_as_a_mapping_once(tmp_path):
    """PEP 249's ``named`` style (``:name``, parameters in a mapping), which sqlite3 takes
    beside its own ``qmark``: with ``paramstyle="named"`` the sink's statements and each
    row go as mappings, a row keyed by its fields (the statement names them in another
    order than the input's)."""
    import functools
    import sqlite3

    db = str(tmp_path / "out.db")
    _db_sink(db)  # (the table)
    c = Checkpoints(lambda: DbApiSink(functools.partial(sqlite3.connect, db, timeout=30),
                                      "INSERT INTO t (kind, id) VALUES (:kind, :id)",
                                      paramstyle="named"), db)
    c.write(range(10))
    c.snapshot(1)
    c.task.internal_commit(1)
    c.write(range(10, 20))
    c.snapshot(2)
    c.restart(2)                               # committed; restored and published
    c.task.internal_commit(2)
    assert _db_rows(db) == list(range(20))


class _FormatCursor:
    """A ``format``-style driver's cursor over sqlite3: ``%s`` only, ``?`` refused."""

    def __init__(self, cur):
        self._cur = cur

    @staticmethod
    def _sql(sql):
        if "?" in sql:
            raise ValueError(f"this driver's paramstyle is 'format': {sql}")
        return sql.replace("%s", "?")

    def execute(self, sql, params=()):
        self._cur.execute(self._sql(sql), params)
        return self

    def executemany(self, sql, rows):
        self._cur.executemany(self._sql(sql), rows)

    def fetchone(self):
        return self._cur.fetchone()


class _FormatConnection:
    def __init__(self, db):
        import sqlite3

        self._con = sqlite3.connect(db)

    def cursor(self):
        return _FormatCursor(self._con.cursor())

    def commit(self):
        self._con.commit()

    def rollback(self):
        self._con.rollback()

    def close(self):
        self._con.close()


def test_the_paramstyle_is_read_from_the_connection_module_down(tmp_path, monkeypatch):
    """A driver whose top-level package declares no ``paramstyle`` (``mysql`` for
    ``mysql.connector``): the style is the one of the longest dotted prefix of the
    connection class's module that declares one."""
    import functools
    import sys
    import types

    for name, style in (("fakedb", None), ("fakedb.connector", "format"),
                        ("fakedb.connector.connection", None)):
        module = types.ModuleType(name)
        if style:
            module.paramstyle = style
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(_FormatConnection, "__module__", "fakedb.connector.connection")
    db = str(tmp_path / "out.db")
    _db_sink(db)
    c = Checkpoints(lambda: DbApiSink(functools.partial(_FormatConnection, db),
                                      "INSERT INTO t (id, kind) VALUES (%s, %s)"), db)
    c.write(range(5))
    c.snapshot(1)
    c.task.internal_commit(1)
    assert _db_rows(db) == list(range(5))


def test_a_statement_that_does_not_fit_is_refused_at_submit_naming_sink_style_and_counts(
        tmp_path):
    """At submit the sink's own parameterised ``SELECT`` runs in a transaction rolled back
    (proving the style), and the statement's placeholders for that style must number the
    fields it will get (``fields``, else the input stream's); the user's statement never
    runs there."""
    import functools
    import sqlite3

    db = str(tmp_path / "out.db")
    _db_sink(db)
    connect = functools.partial(sqlite3.connect, db, timeout=30)
    fields = ("id", "kind")
    refused = [  # (statement, DbApiSink's other arguments, what the refusal says)
        ("INSERT INTO t VALUES (?, ?, ?)", {}, "qmark.* 3 .* 2 fields"),
        ("INSERT INTO t VALUES (%s, %s)", {}, "qmark.* 0 .* 2 fields"),
        ("INSERT INTO t (id) VALUES (:id)", {"paramstyle": "named"}, "named.* 1 .* 2 fields"),
        ("INSERT INTO t (id, kind) VALUES (:id, :knd)", {"paramstyle": "named"},
         "named.*'knd'"),
        ("INSERT INTO t VALUES (?, ?)", {"fields": ("id",)}, "qmark.* 2 .* 1 field"),
        ("INSERT INTO t VALUES (%s, %s)", {"paramstyle": "format"}, "'format'.*SELECT"),
    ]
    for statement, kw, match in refused:
        with pytest.raises(TopologyError, match=match):
            DbApiSink(connect, statement, **kw).open_target(fields)
    # placeholders in literals, comments and casts are not parameters
    DbApiSink(connect, "INSERT INTO t VALUES (?, '?') -- ?\n").open_target(("id",))
    from cluster._plan import plan
    from cluster._submit import open_targets

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(1, "a")], fields))
    b.set_bolt("db", DbApiSink(connect, refused[0][0])).shuffle_grouping("src")
    with pytest.raises(TopologyError, match=r"sink 'db': .*qmark.* 3 .* 2 fields"):
        open_targets(plan(b.create_topology(), {"topology.acker.executors": 0}))
    assert _db_rows(db) == []


def test_two_parquet_sinks_of_one_topology_on_one_path_are_refused_at_build(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def topology(*paths):
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(1, "a")], ("id", "kind")))
        for name, path in zip("ab", paths, strict=False):
            b.set_bolt(name, ParquetSink(path)).shuffle_grouping("src")
        return b.create_topology()

    with pytest.raises(TopologyError, match=r"'a' and 'b' .*'" + str(tmp_path / "out")):
        topology("out", f"file://{tmp_path}/out/")
    topology("out", "out2")
    topology("out")
    topology("out")  # two topologies into one path: each run names its own files


def test_a_sink_that_cannot_publish_names_itself_and_the_checkpoint(tmp_path):
    path = str(tmp_path / "out")
    c = Checkpoints(lambda: ParquetSink(path), path)
    c.write(range(3))
    c.snapshot(1)
    staging = os.path.join(path, "_staging", "5ab00001")
    for f in os.listdir(staging):
        os.remove(os.path.join(staging, f))
    with pytest.raises(SinkError, match="sink 'sink' task 3: commit of checkpoint 1"):
        c.task.internal_commit(1)


def test_an_unwritable_target_is_refused_at_submit_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(TopologyError, match="cannot be written"):
        ParquetSink(str(blocker / "out")).open_target()
    with pytest.raises(TopologyError, match="min_rows"):
        ParquetSink(str(tmp_path), min_rows=0)
    with pytest.raises(TopologyError, match=r"partition_by \['day'\] not in the input"):
        ParquetSink(str(tmp_path / "p"), partition_by=("day",)).open_target(("id", "kind"))


# -- on Ray ---------------------------------------------------------------------------------------


def test_ids_reach_parquet_and_sqlite_exactly_once_with_sinks_and_a_relay_killed(
        cluster, name, tmp_path):
    """Ids flow spout (position-keeping) → relay (2 tasks) → ParquetSink (2 tasks) and
    DbApiSink on SQLite (2 tasks), over two workers; a Parquet sink task, a database sink
    task and a relay task are killed mid-stream. The committed dataset and the table hold
    every id exactly once (the dataset also as DuckDB reads it)."""
    import duckdb

    from tests.components import RelayBolt
    from tests.test_state import _kill_and_wait

    n = 6000
    out, db = str(tmp_path / "out"), str(tmp_path / "out.db")
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, f"k{i % 3}") for i in range(n)], ("id", "kind")), 2)
    b.set_bolt("relay", RelayBolt(("id", "kind"), delay_s=0.0005), 2).shuffle_grouping("src")
    b.set_bolt("parquet", ParquetSink(out), 2).shuffle_grouping("relay")
    b.set_bolt("db", _db_sink(db), 2).shuffle_grouping("relay")
    conf = {"topology.workers": 2, "topology.acker.executors": 0,
            "topology.state.checkpoint.interval.ms": 200,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt"),
            "topology.executor.receive.buffer.size": 256, "topology.producer.batch.size": 50}
    handle = cluster.submit_topology(name, conf, b.create_topology())
    try:
        tasks = handle.topology.component_tasks
        for victim in (tasks["parquet"][0], tasks["db"][1], tasks["relay"][1]):
            until(lambda: handle.checkpoint_stats()["completed"] >= 2, 60, "checkpoints")
            _kill_and_wait(handle, victim)
        assert handle.wait(180), handle.stats().summary()
    finally:
        cluster.kill_topology(name)
    assert _ids(out) == list(range(n))
    assert duckdb.sql(f"SELECT count(*), count(DISTINCT id) FROM '{out}/*.parquet'"
                      ).fetchall() == [(n, n)]
    assert _db_rows(db) == list(range(n))


def test_runs_into_one_path_add_up_and_a_named_driver_commits_once(cluster, name, tmp_path):
    """One topology submitted three times into one ``ParquetSink`` path and one SQLite
    table written in the ``named`` paramstyle: run 1 writes ids 0..n-1 to the end; run 2
    writes n..2n-1 and is stopped with a savepoint mid-stream; run 3, restored from it,
    writes the rest. The dataset holds every id once, in the files of three submits, run
    1's files untouched; the table holds every id once."""
    import functools
    import sqlite3

    from tests.components import RelayBolt
    from topology._parquet_sink import parse_part_name

    n = 600
    out, db, sp = str(tmp_path / "out"), str(tmp_path / "out.db"), str(tmp_path / "sp")
    _db_sink(db)  # (the table)

    def topology(first, delay_s=0.002):
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(i, f"k{i % 3}") for i in range(first, first + n)],
                                         ("id", "kind")))
        b.set_bolt("relay", RelayBolt(("id", "kind"), delay_s=delay_s)).shuffle_grouping("src")
        b.set_bolt("parquet", ParquetSink(out)).shuffle_grouping("relay")
        b.set_bolt("db", DbApiSink(functools.partial(sqlite3.connect, db, timeout=30),
                                   "INSERT INTO t (kind, id) VALUES (:kind, :id)",
                                   paramstyle="named")).shuffle_grouping("relay")
        return b.create_topology()

    def files():
        return {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in os.listdir(out)
                if f.endswith(".parquet")}

    conf = {"topology.acker.executors": 0, "topology.state.checkpoint.interval.ms": 200,
            "topology.executor.receive.buffer.size": 64,
            "topology.state.checkpoint.dir": str(tmp_path / "ckpt")}
    handle = cluster.submit_topology(name, conf, topology(0))
    try:
        assert handle.wait(60), handle.stats().summary()
    finally:
        cluster.kill_topology(name)
    first = files()
    # (run 2's relay takes 6 s for its rows: the savepoint is surely mid-stream, where a
    # run that ended before its kill would leave run 3 nothing to write)
    handle = cluster.submit_topology(name, conf, topology(n, delay_s=0.01))
    try:
        until(lambda: handle.checkpoint_stats()["completed"] >= 1, 30, "a checkpoint")
        handle.kill(savepoint=sp)
    finally:
        cluster.topologies.pop(name, None)
    handle = cluster.submit_topology(name, conf, topology(n), restore_from=sp)
    try:
        assert handle.wait(60), handle.stats().summary()
    finally:
        cluster.kill_topology(name)
    assert _ids(out) == list(range(2 * n))
    now = files()
    assert {f: now[f] for f in first} == first
    assert len({parse_part_name(f).submit_id for f in now}) == 3
    assert _db_rows(db) == list(range(2 * n))
