"""The coordinator's checkpoint log in an object store (``topology.state.checkpoint.dir``
a ``pyarrow.fs`` URI): append-only, one immutable object per record,
``<dir>/<topology>/<submit id>/_log/<phase>-<checkpoint id:020d>``, the latest record the
highest listed (ids only grow; a checkpoint's ``preparing`` comes before its
``committed``). Nothing is ever overwritten, so no write can tear a record another reader
relies on: on a filesystem with moves (``file://``, HDFS) a record is written under a
temporary name and moved into place, on an object store by one PUT; a record whose bytes
fail their check (half written) is never read: a ``preparing``/``committing`` one is
skipped with a warning, a commit record counts as committed without its manifest (its
name is the commit point). On ``file://`` each record is ``fsync``-ed before and after its
move. Records below the
older of the two committed ids kept are deleted after each commit. Flink's
``FileSystemCheckpointStorage`` writes each completed checkpoint's ``_metadata`` once the
same way. No Ray.
"""

from __future__ import annotations

import logging
import threading

import pyarrow.fs as pafs

from actors.state import _fs
from actors.state._common import KEEP_COMMITTED, check_phase
from actors.state._manifest import manifest_of, manifest_text
from actors.state._object_format import (
    LOG_DIR,
    TornObject,
    log_record,
    parse_record_name,
    read_log_record,
    record_name,
)
from actors.state._provider import COMMIT_PHASES, COMMITTED, CheckpointLog

logger = logging.getLogger(__name__)


class ObjectLog(CheckpointLog):
    """The log of one submit at ``location``'s ``root`` (a path on its filesystem). Each
    call blocks for its requests: :meth:`load` one listing and a read per record it
    believes, :meth:`record` one write (and, after a commit, a delete per record that
    left), :meth:`manifest` one read."""

    def __init__(self, location: _fs.Location, root: str) -> None:
        self.location = location
        self.dir = f"{root}/{LOG_DIR}"
        self._lock = threading.Lock()
        #: names this log knows are stored: ``(id, rank, phase)``; None until listed
        self._known: set[tuple[int, int, str]] | None = None
        self._committed: list[int] = []
        self._made_dir = False

    def _list(self) -> set[tuple[int, int, str]]:
        infos = self.location.filesystem.get_file_info(
            pafs.FileSelector(self.dir, allow_not_found=True))
        return {r for i in infos if (r := parse_record_name(i.base_name)) is not None}

    def _read(self, rec: tuple[int, int, str]) -> str | None:
        """The manifest text of record ``rec``; TornObject if it fails its check."""
        return read_log_record(_fs.read_bytes(self.location, self._path(rec[2], rec[0])),
                               rec[2], rec[0])

    def _path(self, phase: str, checkpoint_id: int) -> str:
        return f"{self.dir}/{record_name(phase, checkpoint_id)}"

    def _believed(self, records) -> list[tuple[int, int, str]]:
        """``records`` newest first, without those whose bytes fail their check, except
        a commit record: its name is the commit point (it appears whole by a move, or a
        PUT, after the body was written), so sinks may have published the checkpoint and
        it stays committed, its manifest unknown; its tasks' objects are still checked
        when restored, and a corrupt one reaches the coordinator's ``corrupt()``."""
        out = []
        for rec in sorted(records, reverse=True):
            try:
                self._read(rec)
            except TornObject as e:
                if rec[2] in COMMIT_PHASES:
                    logger.error("%s: the log record %s is torn (a write lost at a power "
                                 "loss?): checkpoint %d stays committed, its manifest "
                                 "unknown: %s", self.location.target,
                                 record_name(rec[2], rec[0]), rec[0], e)
                else:
                    logger.warning("%s: the log record %s is torn, skipped: %s",
                                   self.location.target, record_name(rec[2], rec[0]), e)
                    continue
            except FileNotFoundError:
                continue  # (deleted since the listing)
            out.append(rec)
            if rec[2] in COMMIT_PHASES:
                if sum(r[2] in COMMIT_PHASES for r in out) >= KEEP_COMMITTED:
                    break
        return out

    def load(self) -> tuple[str, int, list[int]]:
        with self._lock:
            self._known = self._list()
            believed = self._believed(self._known)
            self._committed = sorted(r[0] for r in believed if r[2] in COMMIT_PHASES)
        if not believed:
            return COMMITTED, 0, []
        return believed[0][2], believed[0][0], list(self._committed)

    def record(self, phase: str, checkpoint_id: int, manifest: dict | None = None) -> None:
        check_phase(phase)
        text = manifest_text(manifest) if manifest is not None and phase in COMMIT_PHASES \
            else None
        with self._lock:
            if self._known is None:
                self._known = self._list()
                self._committed = sorted(r[0] for r in self._known if r[2] in COMMIT_PHASES)
            if self.location.is_local and not self._made_dir:
                _fs.make_dir(self.location, self.dir)
                self._made_dir = True
            _fs.publish(self.location, self._path(phase, checkpoint_id),
                        log_record(phase, checkpoint_id, text), durable=True)
            rec = parse_record_name(record_name(phase, checkpoint_id))
            self._known.add(rec)
            if phase not in COMMIT_PHASES:
                return
            self._committed = sorted({*self._committed, checkpoint_id})[-KEEP_COMMITTED:]
            oldest = (self._committed[0], 2)  # (below it: no record a load would use)
            for old in sorted(r for r in self._known if r[:2] < oldest):
                try:
                    self.location.filesystem.delete_file(self._path(old[2], old[0]))
                except FileNotFoundError:
                    pass
                self._known.discard(old)

    def read_back(self, phase: str, checkpoint_id: int) -> bool:
        rec = parse_record_name(record_name(phase, checkpoint_id))
        try:
            self._read(rec)
        except Exception:  # (gone, torn, or the store still unreachable: not known)
            return False
        with self._lock:
            if self._known is not None:
                self._known.add(rec)
            if phase in COMMIT_PHASES:
                self._committed = sorted({*self._committed, checkpoint_id})[-KEEP_COMMITTED:]
        return True

    def manifest(self, checkpoint_id: int) -> dict[int, tuple[int, int]] | None:
        for phase in COMMIT_PHASES:
            try:
                text = self._read((checkpoint_id, 2, phase))
            except (FileNotFoundError, TornObject):
                continue
            return manifest_of(text)
        return None

    def where(self) -> str:
        return f"{self.location.target} ({LOG_DIR}/)"

    def close(self) -> None:
        pass
