"""The Redis state provider (``topology.state.provider: "redis"``): :class:`RedisProvider`,
its task stores and checkpoint log in one Redis server, and :class:`RedisStateError`.
Import them from :mod:`actors.state.providers`. This module does not import Ray; it
imports the ``redis`` client (redis-py, ``pip install 'storm-on-ray[redis]'``) only if it
is installed, and the provider refuses to start without it.

Storm's ``RedisKeyValueState`` keeps a component's state in one Redis hash per namespace,
the prepared changes in a ``$prepare`` hash beside it and the transaction ids in a
``$txid`` hash, written by separate commands. This provider keeps the same kinds of
record, per submit of a topology, component, task and key group, in the versioned base +
delta layout of the local provider (:mod:`actors.state._sqlite`), and writes each step in
one ``MULTI``/``EXEC`` transaction (Redis docs, "Transactions": the commands run one after
the other with no other client's in between, and a connection lost before ``EXEC`` runs
none of them). Keys, with ``R = <key_prefix><topology>/<submit id>/`` (names
percent-quoted, so no name can reach into another's keys or a ``SCAN`` pattern)::

    R log                              hash: phase, ckpt (the round being run)
    R committed                        sorted set: the last committed checkpoint ids
    R tasks                            set: <component>/<task> of every task store
    R <component>/<task>/base/<group>  hash: key → value, the state as of base_id
    R <component>/<task>/base_id       string: the checkpoint base/ is at (absent: none)
    R <component>/<task>/groups        set: the key groups that have a base/ hash
    R <component>/<task>/delta/<id>    hash: key → entry, what checkpoint <id> changed
    R <component>/<task>/versions      hash: <id> → "<entries> <CRC-32>" of delta/<id>

A delta entry is the key group (8 bytes, big-endian), a flag (1: put, 0: delete) and the
value. ``versions`` plays the part of Storm's ``$txid``: a restore checks each delta it
reads against its count and CRC-32 (the local provider's check), so a damaged or partly
lost checkpoint is a :class:`~actors.state._provider.CorruptCheckpoint` naming the Redis
key, not a silently different state.

A key's group is a function of the key for the whole submit (``topology._keygroups``), so
a key lives in one ``base/<group>`` hash. One standalone Redis server (or a proxy in front
of one); Redis Cluster is not supported (the keys of one transaction are not given a
common hash slot).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable
from urllib.parse import quote, unquote

from actors.state._common import (
    KEEP_COMMITTED,
    StateSnapshot,
    apply_delta,
    changes,
    check_not_collected,
    check_phase,
    check_version,
    decoded,
    entries_crc,
    in_groups,
)
from actors.state._manifest import check_manifest, manifest_of, manifest_text
from actors.state._pins import (
    lowest_pin_redis,
    pin_newest,
    pin_redis,
    read_newest_whole,
    unpin_redis,
)
from actors.state._provider import (
    COMMIT_PHASES,
    COMMITTED,
    CheckpointLog,
    CorruptCheckpoint,
    StateProvider,
    TaskStore,
)
from actors.state._redis_client import RedisConfig, RedisStateError, _Client

__all__ = ["RedisConfig", "RedisProvider", "RedisStateError"]

log = logging.getLogger(__name__)

_GONE = ("this task's registration is not stored: the Redis data is gone (a Redis "
         "restarted without persistence, a flush, or another db or key_prefix)")
_ENTRY_HEAD = struct.Struct(">qB")  # key group, 1 put / 0 delete; then the value
#: fields per HSET/HDEL command inside one transaction (one command's arguments are built
#: in one buffer by client and server alike; a large delta goes as several commands)
_CHUNK = 4096
#: SCAN's COUNT hint when deleting a submit's keys
_SCAN_COUNT = 1000
def _q(name: str) -> str:
    """``name`` as one segment of a key: percent-quoted, no ``/`` and no glob character."""
    return quote(name, safe="")


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _chunks(items: list, n: int = _CHUNK) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _hset(pipe, key: str, mapping: dict) -> None:
    items = list(mapping.items())
    for part in _chunks(items):
        pipe.hset(key, mapping=dict(part))


def _hdel(pipe, key: str, fields: Iterable) -> None:
    for part in _chunks(list(fields)):
        pipe.hdel(key, *part)


def _encode_entry(grp: int, value: bytes | None) -> bytes:
    return _ENTRY_HEAD.pack(grp, 0 if value is None else 1) + (value or b"")


def _record(entries: list[tuple[bytes, int, bytes | None]]) -> bytes:
    n, crc = entries_crc(entries)
    return f"{n} {crc}".encode()


class _TaskKeys:
    """The key names of one task store."""

    def __init__(self, root: str, component: str, task: int) -> None:
        self.member = f"{_q(component)}/{int(task)}"
        t = f"{root}{self.member}/"
        self.prefix = t
        self.base_id, self.versions, self.groups = t + "base_id", t + "versions", t + "groups"
        self.registry = root + "tasks"

    def base(self, grp: int) -> str:
        return f"{self.prefix}base/{grp}"

    def delta(self, ver: int) -> str:
        return f"{self.prefix}delta/{ver}"


class _Meta:
    """What a task store holds: base id (None: never collected), version records, the
    groups with a base hash, whether the task is registered."""

    def __init__(self, base, versions, groups, registered) -> None:
        self.base = None if base is None else int(base)
        self.versions = {int(v): bytes(r) for v, r in versions.items()}
        self.groups = sorted(int(g) for g in groups)
        self.registered = bool(registered)


class _RedisTaskStore(TaskStore):
    """One task's checkpoints in Redis (see the module's docstring for the keys).

    Like the local provider's: ``prepare(k)`` replaces ``delta/<k>`` and its record;
    ``collect(keep_from)`` folds the deltas up to ``keep_from`` into the ``base`` hashes
    (``base_id`` becomes ``keep_from``; its own delta stays as its record); ``restore(n)``
    drops the deltas above ``n``, then reads the base and the deltas in ``(base_id, n]``,
    checking each delta against its record. Each write is one ``MULTI``/``EXEC``. Every
    call blocks for its round trips (with retries, see ``RedisConfig.timeout_ms``).
    """

    def __init__(self, client: _Client, root: str, component: str, task: int) -> None:
        self._client = client
        self._root = root
        self.keys = _TaskKeys(root, component, task)
        self.name = f"redis://{client.address} {self.keys.prefix}"
        self._lock = threading.Lock()
        #: this object has restored or prepared: its task's registration must be there
        self._seen = False

    def _meta(self, what: str) -> _Meta:
        k = self.keys

        def build(pipe) -> None:
            pipe.get(k.base_id)
            pipe.hgetall(k.versions)
            pipe.smembers(k.groups)
            pipe.sismember(k.registry, k.member)
        return _Meta(*self._client.transaction(build, what))

    def prepare(self, checkpoint_id: int, puts: list[tuple[int, bytes, bytes]],
                deletes: list[tuple[int, bytes]]) -> int:
        """See :meth:`TaskStore.prepare` (returns the entry count).

        Raises:
            ValueError: ``checkpoint_id`` is at or below the collected base.
            CorruptCheckpoint: this store restored or prepared before, and its task's
                registration is gone (the Redis data was lost: a delta on top of nothing
                would be a wrong state).
            RedisStateError: a Redis command failed (nothing of the checkpoint is written).
        """
        entries = changes(puts, deletes)
        k = self.keys
        with self._lock:
            def check(pipe) -> None:
                pipe.get(k.base_id)
                pipe.sismember(k.registry, k.member)
            base, registered = self._client.transaction(
                check, f"prepare of checkpoint {checkpoint_id}")
            if self._seen and not registered:
                raise CorruptCheckpoint(self.name, checkpoint_id, _GONE)
            if base is not None and checkpoint_id <= int(base):
                raise ValueError(f"{self.name}: checkpoint {checkpoint_id} cannot be "
                                 f"written: checkpoints up to {int(base)} are collected "
                                 f"into the base")

            def build(pipe) -> None:
                delta = k.delta(checkpoint_id)
                pipe.delete(delta)
                _hset(pipe, delta, {key: _encode_entry(g, v) for key, g, v in entries})
                pipe.hset(k.versions, str(checkpoint_id), _record(entries))
                pipe.sadd(k.registry, k.member)
            self._client.transaction(build, f"prepare of checkpoint {checkpoint_id}")
            self._seen = True
        return len(entries)

    def check_prepared(self, checkpoint_id: int, count: int | None) -> None:
        """See :meth:`TaskStore.check_prepared` (one transaction; RedisStateError)."""
        meta = self._meta(f"check of checkpoint {checkpoint_id}")
        record = meta.versions.get(checkpoint_id)
        try:
            n = None if record is None else int(record.split()[0])
        except (ValueError, IndexError):
            n = -1  # (unreadable: a mismatch; the restore names it)
        check_manifest(self.name, checkpoint_id, count, meta.base, n)

    def _decode(self, ver: int, raw: dict) -> list[tuple[bytes, int, bytes | None]]:
        """The entries of ``delta/<ver>`` sorted by key (``CorruptCheckpoint`` for one
        that is not an entry)."""
        out = []
        for key, entry in raw.items():
            if len(entry) < _ENTRY_HEAD.size:
                raise CorruptCheckpoint(self.keys.delta(ver), ver,
                                        f"entry of key {bytes(key)!r:.60} is "
                                        f"{len(entry)} bytes, not an entry")
            grp, flag = _ENTRY_HEAD.unpack_from(entry)
            if flag not in (0, 1) or (flag == 0 and len(entry) != _ENTRY_HEAD.size):
                raise CorruptCheckpoint(self.keys.delta(ver), ver,
                                        f"entry of key {bytes(key)!r:.60} has flag {flag}")
            out.append((bytes(key), grp, bytes(entry[_ENTRY_HEAD.size:]) if flag else None))
        out.sort()
        return out

    def _check(self, ver: int, entries: list, record: bytes | None) -> None:
        """``CorruptCheckpoint`` unless ``entries`` match ``record`` (count, CRC-32); a
        version with neither wrote nothing here."""
        where = self.keys.delta(ver)
        want = None
        if record is not None:
            try:
                want = tuple(int(x) for x in record.split())
                if len(want) != 2:
                    raise ValueError(record)
            except ValueError:
                raise CorruptCheckpoint(where, ver, f"its record {record!r:.60} in "
                                                    f"{self.keys.versions} is unreadable"
                                        ) from None
        check_version(where, ver, entries_crc(entries), want, self.keys.versions)

    def _state_at(self, checkpoint_id: int, meta: _Meta,
                  groups: range | None) -> dict[bytes, bytes]:
        """The ``base`` hashes of ``groups``, then the deltas in ``(base, checkpoint_id]``
        in version order (each checked; ``checkpoint_id``'s own even at the base), read
        in one transaction and changing nothing."""
        check_not_collected(self.name, checkpoint_id, meta.base)
        low = meta.base
        vers = sorted(v for v in meta.versions
                      if (low is None or v > low) and v <= checkpoint_id)
        if checkpoint_id not in vers:
            vers.append(checkpoint_id)  # (checked though folded into the base, or absent)
            vers.sort()
        grps = [g for g in meta.groups if in_groups(g, groups)]
        k = self.keys

        def build(pipe) -> None:
            for g in grps:
                pipe.hgetall(k.base(g))
            for v in vers:
                pipe.hgetall(k.delta(v))
        replies = self._client.transaction(build, f"read of checkpoint {checkpoint_id}")
        out: dict[bytes, bytes] = {}
        for reply in replies[:len(grps)]:
            out.update((bytes(key), bytes(value)) for key, value in reply.items())
        for v, raw in zip(vers, replies[len(grps):], strict=True):
            entries = self._decode(v, raw)
            self._check(v, entries, meta.versions.get(v))
            if low is not None and v <= low:
                continue  # (the base's own checkpoint: checked, already in the base)
            apply_delta(out, entries, groups)
        return out

    def restore(self, checkpoint_id: int | None,
                groups: range | None = None) -> dict[bytes, bytes]:
        """See :meth:`TaskStore.restore`.

        Raises:
            CorruptCheckpoint: a delta read fails its check; the checkpoint is collected;
                or the task's registration is gone while this store restored or prepared
                before, or nothing at all of the task is stored (the Redis data was lost:
                a Redis restarted without persistence, a flush, or another ``db`` or
                ``key_prefix``).
            RedisStateError: a Redis command failed.
        """
        k = self.keys
        with self._lock:
            meta = self._meta(f"restore of checkpoint {checkpoint_id}")
            if checkpoint_id is None:
                def clear(pipe) -> None:
                    doomed = [k.base_id, k.versions, k.groups,
                              *(k.base(g) for g in meta.groups),
                              *(k.delta(v) for v in meta.versions)]
                    pipe.delete(*doomed)
                    pipe.sadd(k.registry, k.member)
                self._client.transaction(clear, "restore of no checkpoint")
                self._seen = True
                return {}
            if meta.base is not None and checkpoint_id < meta.base:
                raise CorruptCheckpoint(self.name, checkpoint_id,
                                        f"collected: only checkpoints >= {meta.base} can "
                                        f"be restored")  # (and nothing is discarded)
            above = sorted(v for v in meta.versions if v > checkpoint_id)
            if above:
                def discard(pipe) -> None:
                    pipe.delete(*(k.delta(v) for v in above))
                    pipe.hdel(k.versions, *(str(v) for v in above))
                self._client.transaction(discard, f"restore of checkpoint {checkpoint_id}")
                for v in above:
                    del meta.versions[v]
            if not meta.registered and (self._seen or (meta.base is None
                                                        and not meta.versions)):
                raise CorruptCheckpoint(self.name, checkpoint_id, _GONE)
            state = self._state_at(checkpoint_id, meta, groups)
            self._seen = True
            return state

    def collect(self, keep_from: int) -> None:
        """See :meth:`TaskStore.collect`. Best effort: a Redis error, or a delta that
        fails its check, is logged as a warning and nothing is collected (the next
        collection folds what this one left; a restore reports the damaged delta)."""
        k = self.keys
        try:
            pin = lowest_pin_redis(self._client, self._root)
            if pin is not None:  # a reader's: kept restorable until it releases the pin
                keep_from = min(keep_from, pin)
            with self._lock:
                meta = self._meta(f"collect up to checkpoint {keep_from}")
                if meta.base is not None and keep_from <= meta.base:
                    return
                fold = sorted(v for v in meta.versions
                              if (meta.base is None or v > meta.base) and v <= keep_from)
                raws = self._client.transaction(
                    lambda pipe: [pipe.hgetall(k.delta(v)) for v in fold],
                    f"collect up to checkpoint {keep_from}") if fold else []
                puts: dict[int, dict[bytes, bytes]] = {}
                dels: dict[int, set[bytes]] = {}
                for v, raw in zip(fold, raws, strict=True):
                    entries = self._decode(v, raw)
                    self._check(v, entries, meta.versions.get(v))
                    for key, grp, value in entries:
                        if value is None:
                            puts.get(grp, {}).pop(key, None)
                            dels.setdefault(grp, set()).add(key)
                        else:
                            dels.get(grp, set()).discard(key)
                            puts.setdefault(grp, {})[key] = value
                drop = [v for v in meta.versions if v < keep_from]

                def write(pipe) -> None:
                    for g, mapping in puts.items():
                        if mapping:
                            _hset(pipe, k.base(g), mapping)
                    for g, keys in dels.items():
                        if keys:
                            _hdel(pipe, k.base(g), keys)
                    if any(puts.values()):
                        pipe.sadd(k.groups, *(str(g) for g, m in puts.items() if m))
                    if drop:
                        pipe.delete(*(k.delta(v) for v in drop))
                        pipe.hdel(k.versions, *(str(v) for v in drop))
                    pipe.set(k.base_id, str(keep_from))
                self._client.transaction(write, f"collect up to checkpoint {keep_from}")
        except (RedisStateError, CorruptCheckpoint) as e:
            log.warning("%s: checkpoints below %d not collected: %s", self.name, keep_from, e)

    def close(self) -> None:
        """Nothing to release: the connections belong to the provider's pool."""


class _RedisLog(CheckpointLog):
    """The coordinator's log: ``R log`` (phase, id) and ``R committed`` (the last committed
    ids), each ``record`` one ``MULTI``/``EXEC``."""

    def __init__(self, client: _Client, root: str) -> None:
        self._client = client
        self.round_key, self.committed_key = root + "log", root + "committed"
        self.manifest_key = root + "manifest"
        #: the committed ids as this object last knew them (whose manifests are kept)
        self._kept: list[int] = []

    def load(self) -> tuple[str, int, list[int]]:
        """See :meth:`CheckpointLog.load`.

        Raises:
            RedisStateError: a Redis command failed.
        """
        def build(pipe) -> None:
            pipe.hgetall(self.round_key)
            pipe.zrange(self.committed_key, 0, -1)
        row, ids = self._client.transaction(build, "load of the checkpoint log")
        committed = sorted(int(i) for i in ids)
        self._kept = committed[-KEEP_COMMITTED:]
        if not row:
            return COMMITTED, 0, committed
        return row[b"phase"].decode(), int(row[b"ckpt"]), committed

    def record(self, phase: str, checkpoint_id: int, manifest: dict | None = None) -> None:
        """See :meth:`CheckpointLog.record` (the manifests in the hash ``<root>manifest``,
        by id; those of ids no longer committed are removed by the next record).

        Raises:
            ValueError: an unknown phase.
            RedisStateError: a Redis command failed (nothing is recorded).
        """
        check_phase(phase)

        commit = phase in COMMIT_PHASES
        stale = [str(c) for c in self._kept[:-1]] if commit else []

        def build(pipe) -> None:
            pipe.hset(self.round_key, mapping={"phase": phase, "ckpt": str(checkpoint_id)})
            if commit:
                pipe.zadd(self.committed_key, {str(checkpoint_id): checkpoint_id})
                pipe.zremrangebyrank(self.committed_key, 0, -KEEP_COMMITTED - 1)
                if manifest is not None:
                    pipe.hset(self.manifest_key, str(checkpoint_id), manifest_text(manifest))
                if stale:
                    pipe.hdel(self.manifest_key, *stale)
        self._client.transaction(build, f"record of {phase} {checkpoint_id}")
        if commit:
            self._kept = sorted({*self._kept[-1:], checkpoint_id})

    def manifest(self, checkpoint_id: int) -> dict[int, tuple[int, int]] | None:
        """See :meth:`CheckpointLog.manifest`.

        Raises:
            RedisStateError: a Redis command failed.
        """
        key = self.manifest_key
        return manifest_of(self._client.call(
            "HGET " + key, lambda: self._client.redis.hget(key, str(checkpoint_id))))

    def where(self) -> str:
        return f"Redis key {self.round_key}"


class RedisProvider(StateProvider):
    """Checkpoints in one Redis server (``topology.state.provider: "redis"``; Storm's
    ``RedisKeyValueStateProvider``): every node reads and writes the same server, so a
    task restarted on another node finds its state, and the coordinator's log is there too.
    As durable as the server is made (Redis docs, "Redis persistence": with
    ``appendonly yes`` and ``appendfsync always`` a written checkpoint survives a restart
    of Redis; without persistence a restart loses every checkpoint, which a restore then
    reports as corrupt).

    ``RedisProvider(topology_name, submit_id, config)``, ``config`` as
    :class:`RedisConfig` reads it. Nothing connects until a store or the log is used;
    :meth:`checkpoint_log` first checks that the server answers (at submit: a Redis that
    cannot be reached is refused before any executor starts). Operations block for their
    round trips; while Redis is away, each fails after its retries with a
    :class:`RedisStateError`, which fails the round (the topology rolls back, and the
    rollback is tried again until Redis answers).

    Raises:
        ConfigError: a bad config (see :meth:`RedisConfig.from_dict`), or redis-py is not
            installed.
    """

    def __init__(self, topology_name: str, submit_id: str, config: dict | None = None
                 ) -> None:
        self.config = RedisConfig.from_dict(dict(config or {}))
        for what, name in (("topology name", topology_name), ("submit id", submit_id)):
            if not isinstance(name, str) or not name:
                raise ValueError(f"the {what} must be a non-empty string, got {name!r}")
        self.topology_name, self.submit_id = topology_name, submit_id
        self.root = f"{self.config.key_prefix}{_q(topology_name)}/{_q(submit_id)}/"
        self._client = _Client(self.config)
        self.address = self._client.address

    def ping(self) -> None:
        """Check that the server answers (``PING``, with the config's password and db).

        Raises:
            RedisStateError: it cannot be reached or refuses us; the message names
                ``host:port/db`` and what to set.
        """
        self._client.call("PING", self._client.redis.ping)

    def task_store(self, component: str, task: int) -> TaskStore:
        """The store of ``task`` of ``component`` (no round trip until used)."""
        if not isinstance(component, str) or not component:
            raise ValueError(f"component id must be a non-empty string, got {component!r}")
        return _RedisTaskStore(self._client, self.root, component, task)

    def checkpoint_log(self) -> CheckpointLog:
        """The coordinator's log, after a :meth:`ping`.

        Raises:
            RedisStateError: the server cannot be reached (see :meth:`ping`).
        """
        self.ping()
        return _RedisLog(self._client, self.root)

    def keys(self) -> list[str]:
        """Every key of this submit (``SCAN`` over its prefix; never ``KEYS``)."""
        pattern = _glob_escape(self.root) + "*"
        return self._client.call(
            f"SCAN MATCH {pattern}",
            lambda: [k.decode() for k in self._client.redis.scan_iter(
                match=pattern, count=_SCAN_COUNT)])

    def delete(self) -> None:
        """Delete every key of this submit: ``SCAN`` over its prefix, ``UNLINK`` in
        batches. For after the tasks have stopped. Blocks for the scan (it walks the whole
        database, :data:`_SCAN_COUNT` keys a step).

        Raises:
            RedisStateError: a Redis command failed (keys may be left).
        """
        doomed = self.keys()
        for part in _chunks(doomed, _SCAN_COUNT):
            self._client.call("UNLINK", lambda part=part: self._client.redis.unlink(*part))

    def close(self) -> None:
        """Close the connections (the data stays)."""
        self._client.close()

    def read_state(self, checkpoint_id: int | None = None) -> StateSnapshot:
        """The checkpointed state of this submit, decoded, changing nothing:
        ``{component: {task: {key: value}}}`` as :func:`~actors.state.providers.read_state`
        gives it for the local provider (a ``StateSnapshot``, with the ``checkpoint_id``
        it shows), as of ``checkpoint_id`` or of the last committed checkpoint (falling
        back to the one before when that fails its check, with a warning). Every task that
        opened its store appears, with its user state only. Blocks for the reads.

        Raises:
            CorruptCheckpoint: the asked checkpoint (or every committed one) fails its
                check.
            RedisStateError: a Redis command failed.
        """
        return decoded(self.read_raw(checkpoint_id))

    def read_raw(self, checkpoint_id: int | None = None) -> StateSnapshot:
        """See :meth:`StateProvider.read_raw`: every task that opened its store, every
        key group (the runtime's own entries too), read in one transaction per task with
        the checkpoint pinned meanwhile (so a running topology's collection keeps it).

        Raises:
            CorruptCheckpoint: the asked checkpoint (or every committed one) fails its
                check.
            RedisStateError: a Redis command failed.
        """
        registry = self.root + "tasks"
        members = self._client.call("SMEMBERS " + registry,
                                    lambda: self._client.redis.smembers(registry))
        tasks: dict[str, list[int]] = {}
        for m in sorted(x.decode() for x in members):
            comp, _, task = m.rpartition("/")
            tasks.setdefault(unquote(comp), []).append(int(task))
        client, root = self._client, self.root
        candidates, pin = pin_newest(lambda: _RedisLog(client, root).load()[2],
                                     lambda c: pin_redis(client, root, c),
                                     lambda m: unpin_redis(client, root, m), checkpoint_id)

        def read(ckpt: int) -> dict:
            out: dict = {}
            for comp, ts in tasks.items():
                out[comp] = {}
                for t in sorted(ts):
                    store = _RedisTaskStore(client, root, comp, t)
                    out[comp][t] = store._state_at(ckpt, store._meta("read_raw"), None)
            return out
        state, used = read_newest_whole(
            candidates, read, lambda: pin is not None and unpin_redis(client, root, pin))
        if state is None:
            state = {c: {t: {} for t in sorted(ts)} for c, ts in tasks.items()}
        snapshot = StateSnapshot(state)
        snapshot.checkpoint_id = used
        return snapshot
