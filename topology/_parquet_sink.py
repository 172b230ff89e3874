"""``ParquetSink``: a dataset of Parquet files written exactly once with the checkpoints
(Flink's ``FileSink`` with bulk formats: part files staged, then moved into the dataset
when the checkpoint commits). Only its methods import ``pyarrow``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from topology._errors import TopologyError
from topology._private import make_dirs, open_new
from topology._redact import mask_text, mask_uri
from topology._two_phase import TwoPhaseCommitSink

#: the staging directory under the dataset's root (readers skip ``_``-prefixed paths)
STAGING = "_staging"
#: the directory value of a null (or empty) partition value: Hive's default partition
#: name, as Spark writes it (``ExternalCatalogUtils.DEFAULT_PARTITION_NAME``)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# the characters Spark's ``ExternalCatalogUtils.escapePathName`` escapes (its
# ``charToEscape``, copied there from Hive's ``FileUtils``; the POSIX set, without the
# Windows-only space, ``<``, ``>``, ``|``), plus NUL, which no file name may hold
_ESCAPES = {c: f"%{c:02X}" for c in (*range(0x00, 0x20), *b'"#%\'*/:=?\\\x7f{[]^')}


def escape_path_name(text: str) -> str:
    """``text`` with path characters percent-encoded (``%`` and two uppercase hex
    digits), as Spark's ``ExternalCatalogUtils.escapePathName``: ``"a/b"`` →
    ``"a%2Fb"``; other characters, non-ASCII ones included, stay. Readers that decode
    URI escapes in hive partition values (Spark, ``pyarrow.dataset``'s
    ``HivePartitioning`` by default, DuckDB) read back ``text``."""
    return text.translate(_ESCAPES)


def partition_dir(column: str, value: Any) -> str:
    """The hive directory of ``column`` = ``value``: ``<column>=<str(value)>``, both
    escaped (:func:`escape_path_name`); None and ``""`` are :data:`NULL_PARTITION`, as
    Spark's ``ExternalCatalogUtils.getPartitionPathString`` writes them (an empty value
    is not a directory name Spark reads)."""
    text = "" if value is None else str(value)
    return f"{escape_path_name(column)}={escape_path_name(text) if text else NULL_PARTITION}"


class PartName(NamedTuple):
    """The parts of a part file's name (:func:`part_name`, :func:`parse_part_name`).

    Attributes:
        component: the sink's component id, escaped (:func:`escape_path_name`).
        task_index: the task's index among its component's tasks (0-based).
        submit_id: the submit's id (``TopologyContext.submit_id``, 8 hex digits).
        checkpoint_id: the checkpoint whose commit publishes the file.
        n: the file's number within that checkpoint's files of the task.
    """

    component: str
    task_index: int
    submit_id: str
    checkpoint_id: int
    n: int


def part_name(p: PartName) -> str:
    """``part-<component>-<task index>-<submit id>-<checkpoint>-<n>.parquet``."""
    return f"part-{p.component}-{p.task_index}-{p.submit_id}-{p.checkpoint_id}-{p.n}.parquet"


# anchored at both ends: the four fields after the component hold no "-", so a component
# id with "-" in it parses (the component is what is left of the name)
_PART = re.compile(r"^part-(?P<component>.+)-(?P<task_index>\d+)-(?P<submit_id>[0-9a-f]{8})-"
                   r"(?P<checkpoint_id>\d+)-(?P<n>\d+)\.parquet$")


def parse_part_name(name: str) -> PartName | None:
    """The parts of a file name made by :func:`part_name`; None for any other name."""
    m = _PART.match(name)
    if m is None:
        return None
    return PartName(m["component"], int(m["task_index"]), m["submit_id"],
                    int(m["checkpoint_id"]), int(m["n"]))


def normalized_path(path: str) -> str:
    """``path`` as compared between sinks: ``file://`` removed, a local path made
    absolute (``os.path.abspath``), a URI without its trailing ``/``."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    return os.path.abspath(path) if "://" not in path else path.rstrip("/")


class ParquetSink(TwoPhaseCommitSink):
    """Writes its input tuples as a Parquet dataset at ``path`` (a local path or any
    ``pyarrow.fs`` URI, e.g. ``s3://bucket/prefix``), exactly once with the checkpoints.

    Columns are the input fields in order (every input stream must carry the same ones),
    typed by ``pyarrow`` from the values unless ``schema`` (a ``pyarrow.Schema``) is given.
    With ``partition_by``, rows go to hive-style directories ``<col>=<value>/`` (the
    columns are left out of the files, as Spark's ``partitionBy``); the value is
    ``str(value)`` with path characters percent-encoded, null (and ``""``) as
    ``__HIVE_DEFAULT_PARTITION__`` (:func:`partition_dir`).

    Files are written under ``<path>/_staging/<submit id>/`` when a checkpoint's barrier
    reaches the task and moved into the dataset when the checkpoint commits, named
    ``part-<component>-<task index>-<submit id>-<checkpoint>-<n>.parquet``
    (:func:`part_name`): every run of a topology (a restore from a savepoint too) writes
    names of its own, as Flink's ``FileSink`` puts a uid in each part file's name, so runs
    into one path add to the dataset; a commit repeated after a restore finds its files
    moved and changes nothing. A reader (Spark, pyarrow, DuckDB over
    ``<path>/*.parquet``, pandas, Ray Data) sees whole committed files only, never a staged
    or duplicate one. On a move-less store (S3) a move is a copy and a delete, atomic per
    object.

    Roll policy: a checkpoint writes a file only once ``min_rows`` rows are buffered, or
    ``max_checkpoints`` checkpoints have passed since the last file: meanwhile the buffered
    rows are carried in the task's checkpoint (so they survive a rollback), which costs
    their size at each checkpoint. Each row is in one transaction of a checkpoint (Flink's
    ``CheckpointCommittableManager`` keeps each committable with one checkpoint): a carry
    holds the rows no earlier carry still pending holds. ``min_rows=1`` writes a file per
    checkpoint with rows.

    Args:
        path: the dataset's root directory (created if missing).
        schema: the Arrow schema, or None to infer it per file.
        partition_by: fields whose values name the partition directories.
        min_rows: rows buffered before a file is written (>= 1).
        max_checkpoints: checkpoints after which buffered rows are written anyway (>= 1).

    Raises:
        TopologyError: a bad argument.
    """

    def __init__(self, path: str, schema: Any = None, partition_by: Sequence[str] = (),
                 min_rows: int = 1, max_checkpoints: int = 60) -> None:
        if not isinstance(path, str) or not path:
            raise TopologyError(f"ParquetSink needs a path, got {path!r}")
        if isinstance(partition_by, str) or not all(isinstance(c, str) for c in partition_by):
            raise TopologyError(f"ParquetSink partition_by takes field names, got "
                                f"{partition_by!r}")
        if min_rows < 1 or max_checkpoints < 1:
            raise TopologyError(f"ParquetSink needs min_rows >= 1 and max_checkpoints >= 1, "
                                f"got {min_rows} and {max_checkpoints}")
        self.path = path
        self.schema = schema
        self.partition_by = tuple(partition_by)
        self.min_rows = min_rows
        self.max_checkpoints = max_checkpoints

    def __repr__(self) -> str:
        return f"ParquetSink({self._target()})"

    def _target(self) -> str:
        """The path as errors name it: quoted, credentials masked (``s3://***:***@b/p``)."""
        return repr(mask_uri(self.path))

    def exclusive_target(self) -> str:
        """The dataset's root (:func:`normalized_path`): one sink component per path."""
        return normalized_path(self.path)

    # -- the driver's check at submit ---------------------------------------------------------
    def open_target(self, fields=None) -> None:
        """Create the dataset's root and staging directory (at submit, on the driver).

        Raises:
            TopologyError: the target cannot be reached or written, naming it; a
                ``partition_by`` field not among the input's ``fields``.
        """
        missing = [c for c in self.partition_by if fields is not None and c not in fields]
        if missing:
            raise TopologyError(f"ParquetSink {self._target()}: partition_by {missing} not in "
                                f"the input fields {list(fields)}")
        try:
            fs, root = self._fs()
            fs.create_dir(root, recursive=True)
            self._make_dir(fs, f"{root}/{STAGING}")
        except Exception as e:
            raise TopologyError(f"ParquetSink {self._target()} cannot be written: "
                                f"{type(e).__name__}: {mask_text(str(e))}") from None

    @staticmethod
    def _make_dir(fs, path: str) -> None:
        """A staging directory: ``0700`` on the local filesystem (its files are ``0600``
        there), so no other user reads rows before their commit or plants a file."""
        from pyarrow import fs as pafs

        if isinstance(fs, pafs.LocalFileSystem):
            make_dirs(path)
        else:
            fs.create_dir(path, recursive=True)

    def _fs(self):
        from pyarrow import fs as pafs

        if "://" in self.path:
            return pafs.FileSystem.from_uri(self.path)
        return pafs.LocalFileSystem(), os.path.abspath(self.path)

    # -- the task -----------------------------------------------------------------------------
    def prepare(self, conf, context, collector) -> None:
        """Raises:
            TopologyError: the context names no submit (``TopologyContext.submit_id``
                None, as in a context built by hand).
        """
        if not re.fullmatch(r"[0-9a-f]{8}", context.submit_id or ""):
            raise TopologyError(f"ParquetSink {self._target()}: the task's context names no "
                                f"submit (TopologyContext.submit_id is "
                                f"{context.submit_id!r}), which its file names need; run "
                                f"it through submit_topology")
        self._fsys, self._root = self._fs()
        #: this task's files: component, task index, submit (the checkpoint and n vary)
        self._own = (escape_path_name(context.component_id), context.task_index,
                     context.submit_id)
        #: names this task's transactions (a restore at another parallelism hands one
        #: task several old tasks' transactions of one checkpoint id)
        self._me = [context.task_index, context.submit_id]
        self._staging = f"{self._root}/{STAGING}/{context.submit_id}"
        self._make_dir(self._fsys, self._staging)
        self._names: tuple[str, ...] | None = None
        self._fields_seen = None  # the last input Fields found to match the columns
        self._reset()
        self.files_written = 0

    def _reset(self) -> None:
        self._rows: list[list] = []        # rows in no transaction yet
        self._held: dict[int, list] = {}   # checkpoint id -> the rows its carry holds
        self._held_rows = 0
        self._absorbed: set[int] = set()   # carries whose rows went into a later file
        # (task, checkpoint id) of a restored carry -> the rows it put back (a file of
        # that task that absorbed it takes them out again); until the next pre_commit
        self._restored: dict[tuple, list] = {}
        self._taken: set[tuple] = set()  # the restored carries put back since then
        self._since_file = 0      # checkpoints since the last file
        self._input_ended = False  # end_of_input() came: write everything at pre_commit
        self._covered = -1        # the buffer reflects every checkpoint up to this one

    def write(self, tup) -> None:
        if tup.fields is self._fields_seen:  # (one Fields object per input stream)
            self._rows.append(list(tup.values))
            return
        names = tuple(tup.fields)
        if self._names is None:
            missing = [c for c in self.partition_by if c not in names]
            if missing:
                raise TopologyError(f"ParquetSink partition_by {missing} not in the input "
                                    f"fields {list(names)}")
            self._names = names
        elif names != self._names:
            raise TopologyError(f"ParquetSink: stream {tup.source_stream!r} of "
                                f"{tup.source_component!r} has fields {list(names)}, the "
                                f"sink's columns are {list(self._names)}")
        self._fields_seen = tup.fields
        self._rows.append(list(tup.values))

    def end_of_input(self) -> None:
        """The input has ended: rows are no longer held back for ``min_rows`` (the next
        checkpoint may be the stream's final one)."""
        self._input_ended = True

    def pre_commit(self, checkpoint_id: int) -> Any:
        """The rows since the last transaction, carried (below the roll policy's size) or
        staged as files; rows of an earlier carry whose commit has not come stay in that
        carry, and join the next transaction once it has."""
        self._since_file += 1
        self._covered = checkpoint_id
        self._restored.clear()  # (the buffer's rows go into this transaction)
        self._taken.clear()
        rows = self._rows
        if not rows and not (self._input_ended and self._held):
            if not self._held:
                self._since_file = 0
            return None
        self._rows = []
        if (len(rows) + self._held_rows < self.min_rows
                and self._since_file < self.max_checkpoints and not self._input_ended):
            self._held[checkpoint_id] = rows
            self._held_rows += len(rows)
            return {"carry": rows, "names": list(self._names), "by": self._me}
        self._since_file = 0
        if not self._input_ended or not self._held:
            return {"files": self._stage(checkpoint_id, rows), "by": self._me}
        # the input has ended, so this checkpoint may be the last: the rows of carries
        # still awaiting their commit go into its files too, which name those carries
        # (their commit then adds nothing, and a restore drops their rows again)
        absorbs = sorted(self._held)
        rows = [r for c in absorbs for r in self._held[c]] + rows
        self._absorbed.update(absorbs)
        self._held, self._held_rows = {}, 0
        return {"files": self._stage(checkpoint_id, rows), "absorbs": absorbs, "by": self._me}

    def _stage(self, checkpoint_id: int, rows: list[list]) -> list[list[str]]:
        """Write ``rows`` under staging, a file per partition; returns ``[staged, final]``
        path pairs."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        names = list(self._names)
        if not self.partition_by:  # one table: a list per column, no grouping
            # (zip(*rows) measured slower, and unevenly so: a tuple per column and an
            # argument per row)
            parts = {(): (names, [[r[i] for r in rows] for i in range(len(names))])}
        else:
            keys = [names.index(c) for c in self.partition_by]
            # grouped by value and type: 1, True and 1.0 are equal dict keys, and each
            # has a directory of its own (its str)
            grouped: dict[tuple, list[list]] = {}
            for r in rows:
                grouped.setdefault(tuple((type(r[i]), r[i]) for i in keys), []).append(r)
            keep = [i for i in range(len(names)) if i not in keys]
            parts = {typed: ([names[i] for i in keep], [[r[i] for r in part] for i in keep])
                     for typed, part in grouped.items()}
        files = []
        for n, (values, (cols, data)) in enumerate(sorted(parts.items(),
                                                          key=lambda kv: repr(kv[0]))):
            schema = self.schema
            if schema is not None and self.partition_by:
                schema = pa.schema([f for f in schema if f.name in cols])
            table = pa.table(dict(zip(cols, data, strict=True)), schema=schema)
            sub = "".join(f"{partition_dir(c, v)}/"
                          for c, (_, v) in zip(self.partition_by, values, strict=True))
            name = part_name(PartName(*self._own, checkpoint_id, n))
            if sub:
                self._make_dir(self._fsys, f"{self._staging}/{sub[:-1]}")
            staged = f"{self._staging}/{sub}{name}"
            if isinstance(self._fsys, pafs.LocalFileSystem):
                with open_new(staged) as f:  # (0600, not through a symlink)
                    pq.write_table(table, f)
            else:
                pq.write_table(table, staged, filesystem=self._fsys)
            files.append([staged, f"{self._root}/{sub}{name}"])
        self.files_written += len(files)
        return files

    def commit(self, checkpoint_id: int, transaction: Any) -> None:
        """Publish ``transaction``: idempotent by the transaction, which names the task
        and submit that made it (``"by"``; one of before it names none, and is this
        task's): after a restore at another parallelism this task may commit several
        old tasks' transactions of one checkpoint id."""
        by = tuple(transaction.get("by") or ())
        mine = not by or list(by) == self._me
        if "carry" in transaction:
            held = self._held.pop(checkpoint_id, None) if mine else None
            if mine and checkpoint_id in self._absorbed:  # its rows are in a later file
                self._absorbed.discard(checkpoint_id)
            elif held is not None:
                # carried by this task since its last restore: the rows are in no
                # transaction once the runtime drops this one, so the next takes them
                self._held_rows -= len(held)
                self._rows = held + self._rows
            elif checkpoint_id > self._covered and (by, checkpoint_id) not in self._taken:
                # restored with its checkpoint: the buffer takes the rows back (a carry
                # at or below _covered, or taken since, is in the buffer already)
                restored = [list(r) for r in transaction["carry"]]
                self._restored[(by, checkpoint_id)] = restored
                self._taken.add((by, checkpoint_id))
                self._rows = restored + self._rows
                self._names = tuple(transaction["names"])
            return
        from pyarrow import fs as pafs

        drop = {id(r) for c in transaction.get("absorbs", ())
                for r in self._restored.pop((by, c), ())}
        if drop:  # restored carries whose rows these files hold
            self._rows = [r for r in self._rows if id(r) not in drop]

        for staged, final in transaction["files"]:
            self._check_own(staged, final)
            info = self._fsys.get_file_info([staged, final])
            if info[0].type == pafs.FileType.File:
                parent = final.rsplit("/", 1)[0]
                self._fsys.create_dir(parent, recursive=True)
                self._fsys.move(staged, final)
                if isinstance(self._fsys, pafs.LocalFileSystem):
                    # committed: readable as the dataset's directory is (staged: 0600)
                    os.chmod(final, os.stat(self._root).st_mode & 0o666)
            elif info[1].type != pafs.FileType.File:
                raise FileNotFoundError(f"neither the staged {staged} nor the committed "
                                        f"{final} exists")

    def _check_own(self, staged: str, final: str) -> None:
        """A transaction moves a file from this dataset's staging into this dataset,
        nowhere else (a checkpoint is data: one altered or planted must not move files
        elsewhere)."""
        for path, under in ((staged, f"{self._root}/{STAGING}/"), (final, f"{self._root}/")):
            if (not isinstance(path, str) or not path.startswith(under)
                    or ".." in path.split("/")):
                raise TopologyError(f"ParquetSink {self._target()}: a transaction names "
                                    f"{mask_uri(str(path))!r}, outside {mask_uri(under)!r}; "
                                    f"refused (a damaged or foreign checkpoint)")

    def abort(self, checkpoint_id: int, transaction: Any) -> None:
        for staged, _ in transaction.get("files", ()):
            self._delete(staged)

    def recover(self, last_committed: int | None) -> None:
        """Drop the buffer and the staged files of this task (component, task index and
        submit parsed from the whole name) of checkpoints above ``last_committed``; other
        tasks' and other submits' staged files stay."""
        from pyarrow import fs as pafs

        self._reset()  # (a restore after the end calls end_of_input again)
        sel = pafs.FileSelector(self._staging, allow_not_found=True, recursive=True)
        for info in self._fsys.get_file_info(sel):
            p = parse_part_name(info.base_name)
            if (info.type == pafs.FileType.File and p is not None and p[:3] == self._own
                    and (last_committed is None or p.checkpoint_id > last_committed)):
                self._fsys.delete_file(info.path)

    def _delete(self, path: str) -> None:
        from pyarrow import fs as pafs

        if self._fsys.get_file_info(path).type == pafs.FileType.File:
            self._fsys.delete_file(path)
