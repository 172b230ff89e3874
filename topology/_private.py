"""Files and directories only their owner can read or plant: checkpoints, their logs,
savepoints and the files a sink stages before a commit.

- :func:`make_dirs`: a directory and its missing parents created ``0700``, whatever the
  umask (``mkdir`` then ``chmod``: the umask can only take bits away).
- :func:`open_new`: a file opened for writing ``0600`` without following a symlink in its
  last component (``O_NOFOLLOW``), refused unless it is a regular file; :func:`write_file`
  writes one whole, :func:`prepare_file` creates an empty one for SQLite to open (SQLite
  gives its ``-wal`` and ``-shm`` files the database file's mode: SQLite's docs, "Write-
  Ahead Logging", and ``unixOpen``'s ``findCreateFileMode``).
- :func:`unsafe_reason`: why a directory is not private to this user, or None: the rule
  OpenSSH's ``StrictModes`` applies to ``~/.ssh`` (``safe_path`` in its ``misc.c``): the
  directory and every directory above it are owned by this user or root, and none is
  writable by its group or by others unless it has the sticky bit (as ``/tmp``), so no
  other local user can swap a directory on the path for one of theirs.

POSIX only (Linux, macOS). No Ray; no import of the rest of the project.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

#: a private directory's mode
DIR_MODE = 0o700
#: a private file's mode
FILE_MODE = 0o600

_WRITE_FLAGS = (os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def make_dirs(path: str) -> None:
    """Create ``path`` and its missing parents with mode ``0700``. Directories that exist
    keep their mode (see :func:`unsafe_reason` to check them). Blocks for a few system
    calls.

    Raises:
        OSError: a directory cannot be created (``NotADirectoryError`` where a file
            stands in the way).
    """
    path = os.path.abspath(path)
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for p in reversed(missing):
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            if os.path.isdir(p):  # (created meanwhile by a process of ours: its mode is ours)
                continue
            raise NotADirectoryError(errno.ENOTDIR, "a file stands where a directory "
                                                    "must be", p) from None
        os.chmod(p, DIR_MODE)


def open_new(path: str, truncate: bool = True) -> BinaryIO:
    """``path`` opened for writing (binary, buffered) with mode ``0600``: created if
    missing, truncated if ``truncate``, never through a symlink as its last component and
    never unless it is a regular file (a FIFO or a device is refused rather than waited
    on). A file of ours that existed with a wider mode gets ``0600`` too.

    Raises:
        OSError: ``ELOOP`` for a symlink, ``EEXIST``-like ``OSError`` naming a file that is
            not regular, or what ``open`` raises.
    """
    fd = os.open(path, _WRITE_FLAGS | (os.O_TRUNC if truncate else 0), FILE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        os.fchmod(fd, FILE_MODE)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` as :func:`open_new` opens it (replacing what was there).
    Raises what :func:`open_new` and the write raise."""
    with open_new(path) as f:
        f.write(data)


def prepare_file(path: str) -> None:
    """Create ``path`` empty with mode ``0600`` if missing (an existing file of ours is
    set to ``0600`` and left as it is), before a library that creates files with the
    umask's mode (SQLite) opens it. Raises what :func:`open_new` raises."""
    open_new(path, truncate=False).close()


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _check_one(path: str, st: os.stat_result, me: int, last: bool) -> str | None:
    if st.st_uid != me and (last or st.st_uid != 0):
        return (f"{path} is owned by {_owner(st.st_uid)}, not by this user ({_owner(me)}), "
                f"who could read or replace what is kept there")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"{path} is writable by {'others' if st.st_mode & 0o002 else 'its group'} "
                f"without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o}), so another "
                f"user could swap what is under it")
    return None


def _chain(path: str, follow: bool, me: int) -> str | None:
    """The first unsafe directory of ``path`` and its parents that exist, or None."""
    last = True  # (the directory itself, if it exists, must be this user's own)
    while True:
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):  # (not there yet: created later)
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (me, 0):
                    return f"{path} is a symlink owned by {_owner(st.st_uid)}"
            else:
                why = _check_one(path, st, me, last)
                if why:
                    return why
        last = False
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def unsafe_reason(path: str) -> str | None:
    """Why ``path`` (a directory, which need not exist yet) is not private to this user,
    or None if it is: the directory itself must be owned by this user (effective uid),
    each directory above it by this user or root, and none may be writable by its group
    or others without the sticky bit. Checked along the path as given (symlinks, by their
    owner) and along the path they lead to. Blocks for one ``stat`` per level.

    Returns:
        A sentence naming the offending path, its owner or its mode; None if safe.
    """
    me = os.geteuid()
    path = os.path.abspath(path)
    return _chain(path, False, me) or _chain(os.path.realpath(path), True, me)
