"""Pins: a reader's hold on a committed checkpoint against garbage collection.

A savepoint, or ``handle.state()``, of a running topology reads the log's last committed
checkpoint, then each task's store; meanwhile two more commits would fold that checkpoint
into the stores' base and the read would fail as collected. The reader pins the
checkpoint first (a savepoint is never subsumed: Flink's docs, "Checkpoints vs.
Savepoints"), and every store's collection keeps what a restore of the lowest pinned
checkpoint needs; the reader releases the pin after. A pin older than :data:`PIN_TTL_S`
(its reader died) is ignored. The local provider's pins are files in the submit's
directory (this module); the Redis provider's a sorted set (``actors/state/_redis.py``).
Pure: no Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from actors.state._provider import CorruptCheckpoint

logger = logging.getLogger("actors.state.providers")

#: a pin file in a submit's directory: ``_pin.<checkpoint id>.<random>``
PIN_PREFIX = "_pin."
#: a pin older than this (seconds) is ignored: its reader died before releasing it
PIN_TTL_S = 600.0


def pin_local(root: str, checkpoint_id: int) -> str | None:
    """Pin ``checkpoint_id`` in the submit directory ``root``; returns the pin's path for
    :func:`unpin_local`, or None when ``root`` cannot be written (a copy read offline:
    nothing collects there). Blocks for one file creation."""
    path = os.path.join(root, f"{PIN_PREFIX}{int(checkpoint_id)}.{uuid.uuid4().hex}")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return None
    return path


def unpin_local(path: str | None) -> None:
    """Release a pin of :func:`pin_local` (None: nothing)."""
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def lowest_pin_local(root: str) -> int | None:
    """The lowest checkpoint id pinned in ``root`` by a live pin (None: none). Blocks for
    one directory listing (and a stat per pin)."""
    try:
        names = os.listdir(root)
    except OSError:
        return None
    lowest, now = None, time.time()
    for name in names:
        if not name.startswith(PIN_PREFIX):
            continue
        try:
            cid = int(name.split(".")[1])
            fresh = now - os.stat(os.path.join(root, name)).st_mtime < PIN_TTL_S
        except (ValueError, IndexError, OSError):
            continue
        if fresh and (lowest is None or cid < lowest):
            lowest = cid
    return lowest


def _redis_key(root: str) -> str:
    return root + "pins"


def pin_redis(client, root: str, checkpoint_id: int) -> str:
    """Pin ``checkpoint_id`` in the Redis submit ``root`` (``client``: the provider's
    ``_Client``): a member ``<deadline>:<random>`` of the sorted set ``<root>pins``,
    scored by the id. Returns the member for :func:`unpin_redis`. Blocks for one command.

    Raises:
        RedisStateError: the command failed.
    """
    member = f"{time.time() + PIN_TTL_S:.0f}:{uuid.uuid4().hex}"
    key = _redis_key(root)
    client.call("ZADD " + key, lambda: client.redis.zadd(key, {member: int(checkpoint_id)}))
    return member


def unpin_redis(client, root: str, member: str) -> None:
    """Release a pin of :func:`pin_redis` (a failure is left to its deadline)."""
    key = _redis_key(root)
    with contextlib.suppress(Exception):
        client.call("ZREM " + key, lambda: client.redis.zrem(key, member))


def lowest_pin_redis(client, root: str) -> int | None:
    """The lowest checkpoint id pinned in ``root`` by a pin before its deadline (None:
    none). Blocks for one command.

    Raises:
        RedisStateError: the command failed.
    """
    key = _redis_key(root)
    pins = client.call("ZRANGE " + key,
                       lambda: client.redis.zrange(key, 0, -1, withscores=True))
    now = time.time()
    live = [score for member, score in pins
            if float(bytes(member).split(b":", 1)[0] or 0) > now]
    return int(min(live)) if live else None


#: how often a reader pins the newest committed checkpoint again when commits overtake it
PIN_ATTEMPTS = 5


def pin_newest(committed: Callable[[], list[int]], pin: Callable[[int], Any],
               unpin: Callable[[Any], None], checkpoint_id: int | None = None
               ) -> tuple[list[int], Any]:
    """The checkpoints a reader reads, newest first, and its pin on the first (``pin(id)``
    makes one, ``unpin(pin)`` releases it; the caller releases the one returned, None for
    none). ``checkpoint_id``: that one only. Otherwise the newest of ``committed()``
    (ascending ids) is pinned and the log read again: if it has left the committed ids
    (two commits meanwhile may have collected it), the newest is pinned instead, up to
    :data:`PIN_ATTEMPTS` times (then read unpinned)."""
    if checkpoint_id is not None:
        return [checkpoint_id], pin(checkpoint_id)
    candidates = list(reversed(committed()))
    for _ in range(PIN_ATTEMPTS):
        if not candidates:
            return candidates, None
        held = pin(candidates[0])
        again = list(reversed(committed()))
        if candidates[0] in again:
            return [c for c in again if c <= candidates[0]], held
        unpin(held)
        candidates = again
    return candidates, None


def read_newest_whole(candidates: list[int], read: Callable[[int], Any],
                      release: Callable[[], None]) -> tuple[Any, int | None]:
    """``(read(id), id)`` of the first of ``candidates`` (newest first) whose read does
    not fail its check, a warning naming each one given up; ``(None, None)`` for none;
    then ``release()`` (the pin), whatever happened.

    Raises:
        CorruptCheckpoint: the last candidate fails its check too.
    """
    try:
        for i, ckpt in enumerate(candidates):
            try:
                return read(ckpt), ckpt
            except CorruptCheckpoint as e:
                if i + 1 == len(candidates):
                    raise
                logger.warning("%s; reading committed checkpoint %d instead", e,
                               candidates[i + 1])
        return None, None
    finally:
        release()
