"""Which embedded store keeps the checkpointed keyed state: sqlite3, RocksDB or LMDB.

Each executor task keeps its keyed state in memory and, at each checkpoint, writes only the
keys that changed since the last one (a delta) durably to a store in a file of its own; a
restore reads the whole state back as of a checkpoint id; versions older than the last two
committed checkpoints are garbage-collected. Candidates, each with the layout this benchmark
recommends for it (docs/state.md, "Storage"):

* ``sqlite``: stdlib ``sqlite3`` in WAL mode, a ``base`` table (the state as of the older of
  the two kept checkpoints) and a ``delta`` table of rows keyed ``(version, key)`` (NULL
  value: deleted) for the newer checkpoints; GC folds the oldest delta into ``base``, then
  checkpoints the WAL (so that a commit does not).
* ``sqlite-rows``: the other obvious SQLite layout, one table of rows keyed ``(key,
  version)`` and an index on ``version``; GC deletes the rows a newer kept row supersedes.
* ``rocksdict`` (RocksDB) and ``lmdb``: the same base + delta layout as ``sqlite`` in one
  ordered key space, prefixes ``b`` + key and ``d`` + version (8 bytes, big-endian) + key,
  an empty value marking a deletion (a serialized value is never empty).

A candidate whose module is missing is skipped and recorded with the reason (rocksdict and
lmdb are not project dependencies: ``pip install rocksdict lmdb`` to include them).

For each state size every store loads the same initial state (``N`` msgpack str keys such
as ``b'\\xa4w123'``, msgpack values of about 20 bytes), committed as checkpoint 1. Then, in
rounds, one delta of ``--dirty`` keys (updates of random live keys, ``--new`` new keys,
``--deletes`` deletions) is committed as the next checkpoint by every store in turn (the
order rotates each round, so the host's noise falls on all alike), then each runs one GC
round (keep the last two checkpoints). Rounds alternate the two durability settings:

* ``process_crash``: a committed checkpoint survives the death of the process (not of the
  machine): sqlite ``synchronous=NORMAL`` in WAL mode, RocksDB's WAL written without sync,
  LMDB ``sync=False`` (committed pages are in the OS page cache, no fsync);
* ``power_loss``: also survives an OS crash or power loss (an fsync per commit): sqlite
  ``synchronous=FULL``, RocksDB ``WriteOptions.sync``, LMDB ``env.sync(True)`` after the
  commit.

A commit is timed from the start of the write transaction to its durable end, including the
checkpoint id recorded in the same transaction; the delta is already serialized (bytes) and
sorted by key, as a provider would hand it over. GC runs at the ``process_crash`` setting
(losing a GC round loses nothing: it is redone); the ``power_loss`` commit after it also
flushes what the GC left unsynced, as it would in use. Restore reopens the store and reads the
whole state at the latest checkpoint into a ``dict`` of bytes (no msgpack decoding: the same
for every store); it is checked against the in-memory state, as is a restore at the
checkpoint before. Sizes are the store's files on disk after the runs, open and closed.

    python -m benchmarks.state_store [--quick] [--commits 200] [--dir /tmp]

Writes benchmarks/results/state_store.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import shutil
import sqlite3
import tempfile
import time
from importlib import metadata
from pathlib import Path

import msgpack

from benchmarks._common import quantile, write_result

SIZES = (1_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 100_000)
MODES = ("process_crash", "power_loss")
#: rounds before the measured ones (the first GC has nothing to fold)
WARMUP_ROUNDS = 2


def _ver(version: int) -> bytes:
    return version.to_bytes(8, "big")


# -- the stores ---------------------------------------------------------------------------

class SqliteDelta:
    """``base`` (the state at ``meta.base``) + ``delta`` rows keyed ``(version, key)``."""

    name = "sqlite"
    layout = ("base(key PK, value) + delta((version, key) PK, value NULL = deleted), "
              "both WITHOUT ROWID; GC folds the oldest kept delta into base")
    #: journal_size_limit: the WAL file is cut back to this after a checkpoint (it keeps its
    #: high-water mark otherwise, e.g. the whole first load). wal_autocheckpoint: only a
    #: backstop, as each GC round ends with a WAL checkpoint of its own (``gc``), so that
    #: a checkpoint commit does not pay for copying the WAL back into the database.
    PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
               "PRAGMA journal_size_limit=16777216", "PRAGMA wal_autocheckpoint=10000")
    SCHEMA = """
        CREATE TABLE IF NOT EXISTS base (
            key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS delta (
            version INTEGER NOT NULL, key BLOB NOT NULL, value BLOB,
            PRIMARY KEY (version, key)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS checkpoints (id INTEGER PRIMARY KEY);
        CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.open()

    def open(self) -> None:
        self.con = sqlite3.connect(self.dir / "state.sqlite", isolation_level=None)
        for pragma in self.PRAGMAS:
            self.con.execute(pragma)
        self.con.executescript(self.SCHEMA)

    def close(self) -> None:
        self.con.close()

    def durability(self, mode: str) -> None:
        self.con.execute("PRAGMA synchronous=" + ("FULL" if mode == "power_loss"
                                                  else "NORMAL"))

    def load(self, version: int, items: list[tuple[bytes, bytes]]) -> None:
        con = self.con
        con.execute("BEGIN")
        con.executemany("INSERT INTO base VALUES (?, ?)", items)
        con.execute("INSERT INTO checkpoints VALUES (?)", (version,))
        con.execute("INSERT INTO meta VALUES ('base', ?)", (version,))
        con.execute("COMMIT")

    def commit(self, version: int, delta: list[tuple[bytes, bytes | None]]) -> None:
        con = self.con
        con.execute("BEGIN")
        con.executemany("INSERT INTO delta VALUES (?, ?, ?)",
                        [(version, k, v) for k, v in delta])
        con.execute("INSERT INTO checkpoints VALUES (?)", (version,))
        con.execute("COMMIT")

    def gc(self, floor: int) -> None:
        """Fold every delta up to ``floor`` into base: base is then the state at ``floor``."""
        con = self.con
        con.execute("BEGIN")
        versions = [v for (v,) in con.execute(
            "SELECT DISTINCT version FROM delta WHERE version <= ?", (floor,))]
        for v in versions:
            con.execute("INSERT INTO base SELECT key, value FROM delta "
                        "WHERE version = ?1 AND value IS NOT NULL "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (v,))
            con.execute("DELETE FROM base WHERE key IN "
                        "(SELECT key FROM delta WHERE version = ?1 AND value IS NULL)", (v,))
            con.execute("DELETE FROM delta WHERE version = ?", (v,))
        con.execute("UPDATE meta SET value = ? WHERE name = 'base'", (floor,))
        con.execute("DELETE FROM checkpoints WHERE id < ?", (floor,))
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def restore(self, version: int) -> dict[bytes, bytes]:
        con = self.con
        (base,) = con.execute("SELECT value FROM meta WHERE name = 'base'").fetchone()
        if version < base:
            raise KeyError(f"checkpoint {version} was garbage-collected (base {base})")
        state = dict(con.execute("SELECT key, value FROM base"))
        for k, v in con.execute("SELECT key, value FROM delta WHERE version <= ? "
                                "ORDER BY version", (version,)):
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
        return state


class SqliteRows(SqliteDelta):
    """One table of rows keyed ``(key, version)``; a key's value at ``v`` is its row with
    the highest version ``<= v``."""

    name = "sqlite-rows"
    layout = ("kv((key, version) PK, value NULL = deleted) WITHOUT ROWID + index on "
              "version; GC deletes the rows a kept row supersedes")
    SCHEMA = """
        CREATE TABLE IF NOT EXISTS kv (
            key BLOB NOT NULL, version INTEGER NOT NULL, value BLOB,
            PRIMARY KEY (key, version)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS kv_version ON kv (version);
        CREATE TABLE IF NOT EXISTS checkpoints (id INTEGER PRIMARY KEY);
        CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """

    def load(self, version: int, items: list[tuple[bytes, bytes]]) -> None:
        con = self.con
        con.execute("BEGIN")
        con.executemany("INSERT INTO kv VALUES (?, ?, ?)", [(k, version, v) for k, v in items])
        con.execute("INSERT INTO checkpoints VALUES (?)", (version,))
        con.execute("INSERT INTO meta VALUES ('base', ?)", (version,))
        con.execute("COMMIT")

    def commit(self, version: int, delta: list[tuple[bytes, bytes | None]]) -> None:
        con = self.con
        con.execute("BEGIN")
        con.executemany("INSERT INTO kv VALUES (?, ?, ?)", [(k, version, v) for k, v in delta])
        con.execute("INSERT INTO checkpoints VALUES (?)", (version,))
        con.execute("COMMIT")

    def gc(self, floor: int) -> None:
        con = self.con
        con.execute("BEGIN")
        (prev,) = con.execute("SELECT value FROM meta WHERE name = 'base'").fetchone()
        # rows written in (prev, floor] supersede every older row of their key
        con.execute("DELETE FROM kv WHERE (key, version) IN ("
                    "SELECT o.key, o.version FROM kv AS d JOIN kv AS o "
                    "ON o.key = d.key AND o.version < d.version "
                    "WHERE d.version > ?1 AND d.version <= ?2)", (prev, floor))
        # a deletion with nothing older left is not needed any more
        con.execute("DELETE FROM kv WHERE version > ?1 AND version <= ?2 AND value IS NULL "
                    "AND NOT EXISTS (SELECT 1 FROM kv AS o WHERE o.key = kv.key "
                    "AND o.version < kv.version)", (prev, floor))
        con.execute("UPDATE meta SET value = ? WHERE name = 'base'", (floor,))
        con.execute("DELETE FROM checkpoints WHERE id < ?", (floor,))
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def restore(self, version: int) -> dict[bytes, bytes]:
        con = self.con
        (base,) = con.execute("SELECT value FROM meta WHERE name = 'base'").fetchone()
        if version < base:
            raise KeyError(f"checkpoint {version} was garbage-collected (base {base})")
        # SQLite: a bare column beside max() comes from the row holding the max
        return {k: v for k, v, _ in con.execute(
            "SELECT key, value, max(version) FROM kv WHERE version <= ? GROUP BY key",
            (version,)) if v is not None}


BASE, DELTA, META = b"b", b"d", b"\x00"


class _KeySpaceStore:
    """Base + delta in one ordered key space: ``b`` + key, ``d`` + version + key."""

    layout = ("one key space: b+key (state at the base version) and d+version(8 B)+key "
              "(delta, empty value = deleted); GC folds the oldest kept delta into b+")

    def _fold(self, rows, put, delete) -> None:
        for k, v in rows:
            if v:
                put(BASE + k[9:], v)
            else:
                delete(BASE + k[9:])

    @staticmethod
    def _replay(state: dict, rows) -> dict:
        for k, v in rows:
            if v:
                state[k[9:]] = v
            else:
                state.pop(k[9:], None)
        return state


class RocksStore(_KeySpaceStore):
    name = "rocksdict"

    def __init__(self, directory: Path) -> None:
        import rocksdict

        self.rd = rocksdict
        self.dir = directory
        self.no_sync = rocksdict.WriteOptions()
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True
        self.write_opt = self.no_sync
        self.open()

    def open(self) -> None:
        opts = self.rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = self.rd.Rdict(str(self.dir), opts)

    def close(self) -> None:
        self.db.close()

    def durability(self, mode: str) -> None:
        self.write_opt = self.sync if mode == "power_loss" else self.no_sync

    def _items(self, lower: bytes, upper: bytes):
        # a generator, so that ``ro`` lives as long as the iteration: the iterator does
        # not keep the bound alive by itself
        ro = self.rd.ReadOptions()
        ro.set_iterate_upper_bound(upper)
        yield from self.db.items(from_key=lower, read_opt=ro)

    def load(self, version: int, items: list[tuple[bytes, bytes]]) -> None:
        wb = self.rd.WriteBatch(raw_mode=True)
        for k, v in items:
            wb.put(BASE + k, v)
        wb.put(META + b"ckpt", _ver(version))
        wb.put(META + b"base", _ver(version))
        self.db.write(wb, self.write_opt)

    def commit(self, version: int, delta: list[tuple[bytes, bytes | None]]) -> None:
        wb = self.rd.WriteBatch(raw_mode=True)
        prefix = DELTA + _ver(version)
        for k, v in delta:
            wb.put(prefix + k, v or b"")
        wb.put(META + b"ckpt", _ver(version))
        self.db.write(wb, self.write_opt)

    def gc(self, floor: int) -> None:
        # from the first live delta: deleted ones stay in the LSM until compaction, and an
        # iterator would step over each of them
        start = DELTA + _ver(int.from_bytes(self.db[META + b"base"], "big") + 1)
        end = DELTA + _ver(floor + 1)
        wb = self.rd.WriteBatch(raw_mode=True)
        self._fold(self._items(start, end), wb.put, wb.delete)
        wb.delete_range(start, end)
        wb.put(META + b"base", _ver(floor))
        self.db.write(wb, self.no_sync)

    def restore(self, version: int) -> dict[bytes, bytes]:
        base = int.from_bytes(self.db[META + b"base"], "big")
        if version < base:
            raise KeyError(f"checkpoint {version} was garbage-collected (base {base})")
        state = {k[1:]: v for k, v in self._items(BASE, b"c")}
        return self._replay(state, self._items(DELTA + _ver(base + 1),
                                               DELTA + _ver(version + 1)))


class LmdbStore(_KeySpaceStore):
    name = "lmdb"

    def __init__(self, directory: Path) -> None:
        import lmdb

        self.lmdb = lmdb
        self.dir = directory
        self.mode = "process_crash"
        self.open()

    def open(self) -> None:
        # map_size is address space, not disk: the file grows with the pages used
        self.env = self.lmdb.open(str(self.dir), map_size=1 << 34, sync=False,
                                  metasync=True, writemap=False, readahead=False,
                                  max_dbs=0)

    def close(self) -> None:
        self.env.close()

    def durability(self, mode: str) -> None:
        self.mode = mode

    def _durable(self) -> None:
        if self.mode == "power_loss":
            self.env.sync(True)

    def _rows(self, txn, lower: bytes, upper: bytes):
        cur = txn.cursor()
        if not cur.set_range(lower):
            return
        for k, v in cur.iternext():
            if k >= upper:
                return
            yield k, v

    def load(self, version: int, items: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti([(BASE + k, v) for k, v in items])
            txn.put(META + b"ckpt", _ver(version))
            txn.put(META + b"base", _ver(version))
        self._durable()

    def commit(self, version: int, delta: list[tuple[bytes, bytes | None]]) -> None:
        prefix = DELTA + _ver(version)
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti([(prefix + k, v or b"") for k, v in delta])
            txn.put(META + b"ckpt", _ver(version))
        self._durable()

    def gc(self, floor: int) -> None:
        end = DELTA + _ver(floor + 1)
        with self.env.begin(write=True) as txn:
            rows = list(self._rows(txn, DELTA, end))
            self._fold(rows, txn.put, txn.delete)
            cur = txn.cursor()
            if cur.set_range(DELTA):
                while cur.key() and cur.key() < end:
                    cur.delete()
            txn.put(META + b"base", _ver(floor))

    def restore(self, version: int) -> dict[bytes, bytes]:
        with self.env.begin() as txn:
            base = int.from_bytes(txn.get(META + b"base"), "big")
            if version < base:
                raise KeyError(f"checkpoint {version} was garbage-collected (base {base})")
            state = {k[1:]: v for k, v in self._rows(txn, BASE, b"c")}
            return self._replay(state, self._rows(txn, DELTA, DELTA + _ver(version + 1)))


CANDIDATES = {"sqlite": (SqliteDelta, None), "sqlite-rows": (SqliteRows, None),
              "rocksdict": (RocksStore, "rocksdict"), "lmdb": (LmdbStore, "lmdb")}


def available() -> tuple[dict, dict]:
    """The candidates whose module imports, and the skipped ones with the reason."""
    ok, skipped = {}, {}
    for name, (cls, module) in CANDIDATES.items():
        if module is not None:
            try:
                __import__(module)
            except ImportError as e:
                skipped[name] = f"{type(e).__name__}: {e}"
                continue
        ok[name] = cls
    return ok, skipped


# -- the workload -------------------------------------------------------------------------

class Workload:
    """The in-memory keyed state and the deltas made of it, the same for every store."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = n
        self.live = [self.key(i) for i in range(n)]
        self.state = {k: self.value() for k in self.live}

    @staticmethod
    def key(i: int) -> bytes:
        return msgpack.packb(f"w{i}")

    def value(self) -> bytes:
        r = self.rng.getrandbits(32)
        return msgpack.packb([r & 0xFFFF, f"word-{r % 100_000_000:08d}", r >> 31])

    def delta(self, dirty: int, new: int, deletes: int
              ) -> tuple[list[tuple[bytes, bytes | None]], dict]:
        """The next checkpoint's delta, sorted by key, applied to the state; and the undo
        (each dirty key's value before, None: absent)."""
        rng, live = self.rng, self.live
        changes: dict[bytes, bytes | None] = {}
        for _ in range(deletes):
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            changes[live.pop()] = None
        for i in rng.sample(range(len(live)), dirty - new - deletes):
            changes[live[i]] = self.value()
        for _ in range(new):
            k = self.key(self.next_id)
            self.next_id += 1
            live.append(k)
            changes[k] = self.value()
        undo = {k: self.state.get(k) for k in changes}
        for k, v in changes.items():
            if v is None:
                del self.state[k]
            else:
                self.state[k] = v
        return sorted(changes.items()), undo


def dir_size(path: Path) -> tuple[int, int]:
    """Bytes of the files under ``path`` (apparent size, and blocks allocated on disk)."""
    size = blocks = 0
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            size += st.st_size
            blocks += st.st_blocks * 512
    return size, blocks


def filesystem(path: Path) -> str:
    """The type of the file system holding ``path`` (from /proc/mounts), or ''."""
    best, fs = "", ""
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _, mnt, typ, *_ = line.split()
                if str(path).startswith(mnt) and len(mnt) > len(best):
                    best, fs = mnt, typ
    except OSError:
        pass
    return fs


def stats(xs: list[float]) -> dict:
    return {"p50": round(quantile(xs, 0.5), 3), "p99": round(quantile(xs, 0.99), 3),
            "max": round(max(xs), 3), "n": len(xs)}


def run_size(n: int, classes: dict, args, root: Path) -> dict:
    t0 = time.perf_counter()
    work = Workload(n, seed=n)
    items = sorted(work.state.items())
    gen_s = time.perf_counter() - t0
    stores, out = {}, {}
    for name, cls in classes.items():
        store = cls(root / f"{name}-{n}")
        t0 = time.perf_counter()
        store.load(1, items)
        out[name] = {"load_s": round(time.perf_counter() - t0, 3)}
        stores[name] = store
    del items
    commit_ms = {name: {m: [] for m in MODES} for name in stores}
    gc_ms: dict[str, list[float]] = {name: [] for name in stores}
    names = list(stores)
    version = 1
    rounds = WARMUP_ROUNDS + 2 * args.commits
    undo: dict = {}
    gc.disable()  # no collector pause inside one store's timing
    try:
        for r in range(rounds):
            version += 1
            delta, undo = work.delta(args.dirty, args.new, args.deletes)
            mode = MODES[r % 2]
            for name in names[r % len(names):] + names[:r % len(names)]:
                store = stores[name]
                store.durability(mode)
                t0 = time.perf_counter()
                store.commit(version, delta)
                t1 = time.perf_counter()
                store.durability("process_crash")
                t2 = time.perf_counter()
                store.gc(version - 1)
                t3 = time.perf_counter()
                if r >= WARMUP_ROUNDS:
                    commit_ms[name][mode].append((t1 - t0) * 1e3)
                    gc_ms[name].append((t3 - t2) * 1e3)
    finally:
        gc.enable()
    previous = dict(work.state)
    for k, v in undo.items():
        if v is None:
            previous.pop(k, None)
        else:
            previous[k] = v
    for name, store in stores.items():
        o = out[name]
        o["commit_ms"] = {m: stats(commit_ms[name][m]) for m in MODES}
        o["commit_ms_samples"] = {m: [round(x, 3) for x in commit_ms[name][m]]
                                  for m in MODES}
        o["gc_ms"] = stats(gc_ms[name])
        o["gc_ms_samples"] = [round(x, 3) for x in gc_ms[name]]
        o["size_bytes_open"], _ = dir_size(store.dir)
        store.close()
        o["size_bytes"], o["disk_bytes"] = dir_size(store.dir)
        # correct at the latest checkpoint and at the one before (the rollback target)
        store.open()
        if store.restore(version) != work.state or store.restore(version - 1) != previous:
            raise AssertionError(f"{name}: restore at {n} keys differs from the state")
        store.close()
        o["restore_checked"] = True
    del previous
    restores: dict[str, list[float]] = {name: [] for name in stores}
    opens: dict[str, list[float]] = {name: [] for name in stores}
    for i in range(args.restores):  # side by side too
        for name in names[i % len(names):] + names[:i % len(names)]:
            store = stores[name]
            gc.collect()
            t0 = time.perf_counter()
            store.open()
            t1 = time.perf_counter()
            got = store.restore(version)
            t2 = time.perf_counter()
            store.close()
            opens[name].append(t1 - t0)
            restores[name].append(t2 - t0)
            if len(got) != len(work.state):
                raise AssertionError(f"{name}: restore at {n} keys differs from the state")
            del got
    for name, store in stores.items():
        o = out[name]
        o["restore_s"] = round(quantile(restores[name], 0.5), 3)
        o["restore_s_samples"] = [round(x, 3) for x in restores[name]]
        o["open_s"] = round(quantile(opens[name], 0.5), 4)
        shutil.rmtree(store.dir, ignore_errors=True)
    return {"keys": n, "final_keys": len(work.state), "checkpoints": version,
            "generate_s": round(gen_s, 2), "stores": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1k and 100k keys only (not 1M)")
    ap.add_argument("--commits", type=int, default=200,
                    help="measured commits per durability setting and size")
    ap.add_argument("--dirty", type=int, default=1000, help="keys in each delta")
    ap.add_argument("--new", type=int, default=10, help="of which new keys")
    ap.add_argument("--deletes", type=int, default=10, help="of which deletions")
    ap.add_argument("--restores", type=int, default=5, help="restores timed (median)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="state sizes (keys), comma-separated")
    ap.add_argument("--stores", default=",".join(CANDIDATES),
                    help="candidates to run, comma-separated")
    ap.add_argument("--dir", default=None,
                    help="where the stores' files go (default: the system temp dir)")
    args = ap.parse_args()
    classes, skipped = available()
    classes = {k: v for k, v in classes.items() if k in args.stores.split(",")}
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    sizes = QUICK_SIZES if args.quick else tuple(int(x) for x in args.sizes.split(","))
    root = Path(tempfile.mkdtemp(prefix="state_store_", dir=args.dir))
    started = time.perf_counter()
    try:
        results = {}
        for n in sizes:
            results[str(n)] = r = run_size(n, classes, args, root)
            for name, o in r["stores"].items():
                c = o["commit_ms"]
                print(f"{n:>9,} keys {name:<12} commit p50/p99 "
                      f"{c['process_crash']['p50']:.2f}/{c['process_crash']['p99']:.2f} ms "
                      f"(fsync {c['power_loss']['p50']:.2f}/{c['power_loss']['p99']:.2f}), "
                      f"GC p50 {o['gc_ms']['p50']:.2f} ms, restore {o['restore_s']:.3f} s, "
                      f"{o['size_bytes'] / 1e6:.1f} MB, load {o['load_s']:.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    versions = {"sqlite": sqlite3.sqlite_version, "msgpack": metadata.version("msgpack")}
    for name in ("rocksdict", "lmdb"):
        if name in classes:
            versions[name] = metadata.version(name)
    if "lmdb" in classes:
        import lmdb

        versions["liblmdb"] = ".".join(map(str, lmdb.version()))
    settings = {
        "sqlite": {"pragmas": list(SqliteDelta.PRAGMAS),
                   "gc": "ends with PRAGMA wal_checkpoint(PASSIVE)",
                   "power_loss": "PRAGMA synchronous=FULL",
                   "transactions": "isolation_level=None, explicit BEGIN/COMMIT"},
        "rocksdict": {"options": "Options(raw_mode=True), defaults otherwise (WAL on)",
                      "process_crash": "WriteOptions() (sync=False)",
                      "power_loss": "WriteOptions.sync = True"},
        "lmdb": {"open": "lmdb.open(map_size=1<<34, sync=False, metasync=True, "
                         "writemap=False, readahead=False)",
                 "process_crash": "commit (no fsync)",
                 "power_loss": "commit, then env.sync(True)"},
    }
    write_result("state_store", {
        "command": "python -m benchmarks.state_store" + (" --quick" if args.quick else ""),
        "platform": platform.platform(), "filesystem": filesystem(root),
        "versions": versions, "skipped": skipped,
        "layouts": {name: cls.layout for name, cls in classes.items()},
        "settings": settings,
        "workload": {"dirty": args.dirty, "new": args.new, "deletes": args.deletes,
                     "commits_per_mode": args.commits, "warmup_rounds": WARMUP_ROUNDS,
                     "restores": args.restores, "gc_keeps": 2},
        "runtime_s": round(time.perf_counter() - started, 1),
        "sizes": results})
    big = str(sizes[-1])
    tag = f"{int(big) // 1000}k" if int(big) < 1_000_000 else f"{int(big) // 1_000_000}m"
    print(" ".join(
        f"{name}_commit_ms_p50_{tag}={o['commit_ms']['process_crash']['p50']:.2f} "
        f"{name}_commit_ms_p99_{tag}={o['commit_ms']['process_crash']['p99']:.2f} "
        f"{name}_gc_ms_p50_{tag}={o['gc_ms']['p50']:.2f} "
        f"{name}_restore_s_{tag}={o['restore_s']:.3f}"
        for name, o in results[big]["stores"].items()).replace("-", "_"))

if __name__ == "__main__":
    main()
