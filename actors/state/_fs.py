"""A place to keep files, named by a local path or any ``pyarrow.fs`` URI (``s3://``,
``gs://``, ``hdfs://``, ``abfs://``, ``file://``), resolved once into a filesystem and a
base path; savepoints (and checkpoint directories) join their files onto the base path,
never onto the URI string, since a URI's query (``?endpoint_override=…&scheme=http``)
follows its path. Pure apart from what the filesystem does; no Ray.

Credentials never go in the URI: pyarrow accepts ``s3://KEY:SECRET@bucket`` as an access
key, but a URI is stored in the topology, printed and logged. They come from the
environment, as pyarrow and the cloud SDKs read them (``AWS_ACCESS_KEY_ID``…). Errors name
the URI with credentials masked (:mod:`topology._redact`). Sources: Arrow's docs,
"Filesystem Interface" (``FileSystem.from_uri``, ``FileSystem.move``).
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from topology._private import make_dirs, write_file
from topology._redact import mask_text, mask_uri, uri_has_credentials

#: ``FileSystem.type_name`` of the object stores: a move is a copy and a delete there
_NO_MOVES = frozenset({"s3", "gcs", "abfs"})


class StorageError(ValueError):
    """A path or URI that cannot be used: a scheme ``pyarrow.fs`` does not know, a URI
    carrying credentials, an unreachable or unwritable target. The message names the
    target (credentials masked) and the filesystem's error."""


class Location(NamedTuple):
    """A resolved target: ``filesystem`` and the ``base`` path on it (what
    ``FileSystem.from_uri`` returns), and ``target`` (masked, for messages)."""

    filesystem: pafs.FileSystem
    base: str
    target: str

    def join(self, *parts: str) -> str:
        """``base`` with ``parts`` joined on (``/``-separated, as every pyarrow
        filesystem takes its paths)."""
        return posixpath.join(self.base, *parts)

    @property
    def is_local(self) -> bool:
        """Whether it is on this machine's filesystem."""
        return isinstance(self.filesystem, pafs.LocalFileSystem)


def is_uri(target: str) -> bool:
    """Whether ``target`` is a URI (``scheme://…``) rather than a local path."""
    return "://" in target


def resolve(target: str) -> Location:
    """Resolve ``target`` once: a local path (made absolute) on the local filesystem, or
    a URI through ``pyarrow.fs.FileSystem.from_uri`` (which may contact the store, e.g.
    to find an S3 bucket's region; it blocks for that).

    Args:
        target: a local path, or a ``pyarrow.fs`` URI; an object store's options go in the
            query (``s3://bucket/p?endpoint_override=127.0.0.1:9000&scheme=http``).

    Returns:
        The :class:`Location`.

    Raises:
        StorageError: ``target`` is empty or not a string, carries credentials, or
            pyarrow cannot make a filesystem of it (an unknown scheme, an option it
            refuses); the message names the masked target and pyarrow's error.
    """
    if not isinstance(target, str) or not target:
        raise StorageError(f"a path or URI must be a non-empty string, got {target!r}")
    if not is_uri(target):
        return Location(pafs.LocalFileSystem(), os.path.abspath(target), os.path.abspath(target))
    masked = mask_uri(target)
    if uri_has_credentials(target):
        raise StorageError(f"{masked}: the URI carries credentials, which would be stored in "
                           f"the topology and in logs; give them in the environment "
                           f"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://, "
                           f"GOOGLE_APPLICATION_CREDENTIALS for gs://)")
    try:
        fs, base = pafs.FileSystem.from_uri(target)
    except (pa.ArrowException, ValueError, OSError, TypeError) as e:
        raise StorageError(f"{masked}: pyarrow.fs cannot use it: "
                           f"{mask_text(f'{type(e).__name__}: {e}')}") from None
    return Location(fs, base.rstrip("/") or base, masked)


def error(location: Location, doing: str, e: BaseException) -> StorageError:
    """A :class:`StorageError` naming ``location``'s target, what was being done and the
    filesystem's error (masked)."""
    return StorageError(f"{location.target}: {doing}: "
                        f"{mask_text(f'{type(e).__name__}: {e}')}")


def make_dir(location: Location, path: str) -> None:
    """Create the directory ``path`` and its parents; on the local filesystem with mode
    ``0700`` (:func:`topology._private.make_dirs`). Raises what the filesystem raises."""
    if location.is_local:
        make_dirs(path)
    else:
        location.filesystem.create_dir(path, recursive=True)


def write_bytes(location: Location, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (a path on ``location.filesystem``), replacing it; on
    the local filesystem with mode ``0600`` and never through a symlink
    (:func:`topology._private.write_file`). Blocks for the write; raises what the
    filesystem raises."""
    if location.is_local:
        write_file(path, data)
        return
    with location.filesystem.open_output_stream(path) as f:
        f.write(data)


def read_bytes(location: Location, path: str) -> bytes:
    """The whole file at ``path``, which must be a file: its size is asked first and no
    more than that is read, so a file that grows, a device or a FIFO cannot make the
    read allocate without bound. Blocks for the read; raises what the filesystem raises
    (``FileNotFoundError`` for a missing file, ``OSError`` for what is not a file)."""
    info = location.filesystem.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{path}: no such file")
    if info.type != pafs.FileType.File or info.size is None:
        raise OSError(f"{path}: not a regular file")
    with location.filesystem.open_input_stream(path) as f:
        return f.read(info.size)


def _sync(path: str) -> None:
    """``fsync`` a local file or directory (a directory: the names in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(location: Location, path: str, data: bytes, durable: bool = False) -> None:
    """Write ``data`` to ``path`` so that a reader sees the whole file or none: through a
    temporary name beside it and a move where the filesystem has moves (local, HDFS);
    where it has none (an object store emulates a move by copy and delete, or refuses
    one) a single write, which an object store makes visible whole. For a marker written
    last (Flink's ``_metadata`` of a completed checkpoint plays that role).

    ``durable``: on the local filesystem, the temporary file is ``fsync``-ed before the
    move and its directory after it, so a power loss leaves the old name or the whole new
    file (the write-then-rename rule of ext4's and XFS's docs). ``pyarrow.fs`` offers no
    ``fsync`` for HDFS; an object store's PUT is durable when it returns."""
    fs = location.filesystem
    if fs.type_name in _NO_MOVES:
        write_bytes(location, path, data)  # (one PUT: visible whole or not at all)
        return
    head, tail = posixpath.split(path)
    tmp = posixpath.join(head, f".{tail}.{uuid.uuid4().hex}.tmp")
    write_bytes(location, tmp, data)
    sync = durable and location.is_local
    if sync:
        _sync(tmp)
    try:
        fs.move(tmp, path)
    except NotImplementedError:  # (pyarrow's ArrowNotImplementedError is one)
        write_bytes(location, path, data)
        fs.delete_file(tmp)
    if sync:
        _sync(head)
