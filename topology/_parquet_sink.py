"""``ParquetSink``: a dataset of Parquet files written exactly once with the checkpoints
(Flink's ``FileSink`` with bulk formats: part files staged, then moved into the dataset
when the checkpoint commits). Only its methods import ``pyarrow``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from topology._errors import TopologyError
from topology._two_phase import TwoPhaseCommitSink

#: the staging directory under the dataset's root (readers skip ``_``-prefixed paths)
STAGING = "_staging"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", name)


class ParquetSink(TwoPhaseCommitSink):
    """Writes its input tuples as a Parquet dataset at ``path`` (a local path or any
    ``pyarrow.fs`` URI, e.g. ``s3://bucket/prefix``), exactly once with the checkpoints.

    Columns are the input fields in order (every input stream must carry the same ones),
    typed by ``pyarrow`` from the values unless ``schema`` (a ``pyarrow.Schema``) is given.
    With ``partition_by``, rows go to hive-style directories ``<col>=<value>/`` (the
    columns are left out of the files, as Spark's ``partitionBy``).

    Files are written under ``<path>/_staging/`` when a checkpoint's barrier reaches the
    task and moved into the dataset when the checkpoint commits, named
    ``part-<component>-<task>-<checkpoint>-<n>.parquet``: a commit repeated after a restore
    finds its files moved and changes nothing. A reader (Spark, pyarrow, DuckDB over
    ``<path>/*.parquet``, pandas, Ray Data) sees whole committed files only, never a staged
    or duplicate one. On a move-less store (S3) a move is a copy and a delete, atomic per
    object.

    Roll policy: a checkpoint writes a file only once ``min_rows`` rows are buffered, or
    ``max_checkpoints`` checkpoints have passed since the last file: meanwhile the buffered
    rows are carried in the task's checkpoint (so they survive a rollback), which costs
    their size at each checkpoint. ``min_rows=1`` writes a file per checkpoint with rows.

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

    # -- the driver's check at submit ---------------------------------------------------------
    def open_target(self) -> None:
        """Create the dataset's root and staging directory (at submit, on the driver).

        Raises:
            TopologyError: the target cannot be reached or written, naming it.
        """
        try:
            fs, root = self._fs()
            fs.create_dir(f"{root}/{STAGING}", recursive=True)
        except Exception as e:
            raise TopologyError(f"ParquetSink {self.path!r} cannot be written: "
                                f"{type(e).__name__}: {e}") from None

    def _fs(self):
        from pyarrow import fs as pafs

        if "://" in self.path:
            return pafs.FileSystem.from_uri(self.path)
        import os

        return pafs.LocalFileSystem(), os.path.abspath(self.path)

    # -- the task -----------------------------------------------------------------------------
    def prepare(self, conf, context, collector) -> None:
        self._fsys, self._root = self._fs()
        self._prefix = f"part-{_safe(context.component_id)}-{context.task_id}-"
        self._names: tuple[str, ...] | None = None
        self._fields_seen = None  # the last input Fields found to match the columns
        self._rows: list[list] = []
        self._since_file = 0      # checkpoints since the last file
        self._input_ended = False  # end_of_input() came: write everything at pre_commit
        self._covered = -1        # the buffer reflects every checkpoint up to this one
        self.files_written = 0

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
        self._since_file += 1
        self._covered = checkpoint_id
        rows = self._rows
        if not rows:
            self._since_file = 0
            return None
        if (len(rows) < self.min_rows and self._since_file < self.max_checkpoints
                and not self._input_ended):
            return {"carry": rows, "names": list(self._names)}  # in the checkpoint
        files = self._stage(checkpoint_id, rows)
        self._rows, self._since_file = [], 0
        return {"files": files}

    def _stage(self, checkpoint_id: int, rows: list[list]) -> list[list[str]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(self._names)
        parts: dict[tuple, list[list]] = {}
        keys = [names.index(c) for c in self.partition_by]
        for r in rows:
            parts.setdefault(tuple(r[i] for i in keys), []).append(r)
        keep = [i for i in range(len(names)) if i not in keys]
        files = []
        for n, (values, part_rows) in enumerate(sorted(parts.items(), key=lambda kv: repr(kv[0]))):
            cols = {names[i]: [r[i] for r in part_rows] for i in keep}
            schema = self.schema
            if schema is not None and keys:
                schema = pa.schema([f for f in schema if f.name in cols])
            table = pa.table(cols, schema=schema)
            name = f"{self._prefix}{checkpoint_id}-{n}.parquet"
            sub = "".join(f"{c}={_safe(str(v))}/" for c, v in zip(self.partition_by, values,
                                                                   strict=True))
            staged = f"{self._root}/{STAGING}/{sub.replace('/', '__')}{name}"
            final = f"{self._root}/{sub}{name}"
            pq.write_table(table, staged, filesystem=self._fsys)
            files.append([staged, final])
        self.files_written += len(files)
        return files

    def commit(self, checkpoint_id: int, transaction: Any) -> None:
        if "carry" in transaction:
            # rows carried in checkpoint N: after a restore the buffer is empty and takes
            # them back; otherwise it holds them already (or wrote them since)
            if checkpoint_id > self._covered:
                self._rows = [list(r) for r in transaction["carry"]] + self._rows
                self._names = tuple(transaction["names"])
                self._covered = checkpoint_id
            return
        from pyarrow import fs as pafs

        for staged, final in transaction["files"]:
            info = self._fsys.get_file_info([staged, final])
            if info[0].type == pafs.FileType.File:
                parent = final.rsplit("/", 1)[0]
                self._fsys.create_dir(parent, recursive=True)
                self._fsys.move(staged, final)
            elif info[1].type != pafs.FileType.File:
                raise FileNotFoundError(f"neither the staged {staged} nor the committed "
                                        f"{final} exists")

    def abort(self, checkpoint_id: int, transaction: Any) -> None:
        for staged, _ in transaction.get("files", ()):
            self._delete(staged)

    def recover(self, last_committed: int | None) -> None:
        """Drop the buffer and this task's staged files of checkpoints above
        ``last_committed``."""
        from pyarrow import fs as pafs

        self._rows, self._since_file, self._covered = [], 0, -1
        self._input_ended = False  # (a restore after the end calls end_of_input again)
        sel = pafs.FileSelector(f"{self._root}/{STAGING}", allow_not_found=True)
        for info in self._fsys.get_file_info(sel):
            base = info.base_name.rsplit("__", 1)[-1]
            if not base.startswith(self._prefix):
                continue
            cid = int(base[len(self._prefix):].split("-", 1)[0])
            if last_committed is None or cid > last_committed:
                self._delete(info.path)

    def _delete(self, path: str) -> None:
        from pyarrow import fs as pafs

        if self._fsys.get_file_info(path).type == pafs.FileType.File:
            self._fsys.delete_file(path)
