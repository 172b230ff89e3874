"""Part f. of ``benchmarks/state.py`` (no Ray): a task's checkpoints in an object store
(``topology.state.checkpoint.dir: s3://…``) against moto's S3 server on loopback (a
Python server on the same 2 cores: its times are not S3's), counted by a wrapper around
the filesystem, beside the same rounds into a ``LocalProvider`` task store (SQLite).

A state of ``keys`` keys (values of ``value_bytes`` bytes) is loaded as checkpoint 1, then
each round puts ``dirty`` random keys, and ``prepare`` (the delta's upload) then
``collect`` of the previous checkpoint run as a task does at a commit. Figures:

- ``s3_requests_per_task_ckpt``: the filesystem calls the task store made (reads, writes,
  listings, deletes; a directory delete counts as one call, though S3 makes it a listing
  and a batched delete) per checkpoint, the load included;
- ``bytes_uploaded_per_ckpt_vs_changed``: bytes written to the store over the bytes of
  the keys and values the rounds changed (the load included);
- ``ckpt_ms_p50_s3_vs_local``: the median ``prepare`` on S3 over the median on SQLite
  (the rounds after the load), with both medians.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections import Counter

import msgpack
import pyarrow as pa
import pyarrow.fs as pafs


class CountingHandler(pafs.FileSystemHandler):
    """A ``pyarrow.fs`` filesystem that forwards to ``inner`` and counts each call by
    name (``calls``) and the bytes written through its output streams (``written``)."""

    def __init__(self, inner: pafs.FileSystem) -> None:
        self.inner = inner
        self.calls: Counter = Counter()
        self.written = 0

    def _count(self, name: str) -> None:
        self.calls[name] += 1

    def __eq__(self, other) -> bool:
        return isinstance(other, CountingHandler) and other.inner.equals(self.inner)

    def __ne__(self, other) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return f"counting+{self.inner.type_name}"

    def normalize_path(self, path):
        return self.inner.normalize_path(path)

    def get_file_info(self, paths):
        self._count("get_file_info")
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        self._count("list")
        return self.inner.get_file_info(selector)

    def create_dir(self, path, recursive):
        self._count("create_dir")
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._count("delete_dir")
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._count("delete_dir_contents")
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError("not needed here")

    def delete_file(self, path):
        self._count("delete_file")
        self.inner.delete_file(path)

    def move(self, src, dest):
        self._count("move")
        self.inner.move(src, dest)

    def copy_file(self, src, dest):
        self._count("copy_file")
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path):
        self._count("read")
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        self._count("read")
        return self.inner.open_input_file(path)

    def open_output_stream(self, path, metadata):
        self._count("write")
        stream = self.inner.open_output_stream(path, metadata=metadata)
        return pa.PythonFile(_CountingStream(stream, self), mode="w")

    def open_append_stream(self, path, metadata):
        raise NotImplementedError("objects are never appended to")


class _CountingStream:
    """An output stream that adds what is written to its handler's ``written``."""

    def __init__(self, stream, handler: CountingHandler) -> None:
        self._stream, self._handler = stream, handler

    def write(self, data) -> int:
        self._handler.written += len(data)
        return self._stream.write(data)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def object_store_cost(s3_uri: str, keys: int, dirty: int, rounds: int,
                      value_bytes: int = 100) -> dict:
    """The figures of the module's docstring for one task, S3 beside SQLite."""
    from actors.state import _fs
    from actors.state._objects import ObjectProvider, ObjectTaskStore
    from actors.state.providers import LocalProvider

    enc = msgpack.Packer(use_bin_type=True).pack
    rng = random.Random(11)
    provider = ObjectProvider(s3_uri, "objects-bench", "run")
    handler = CountingHandler(provider.location.filesystem)
    counted = _fs.Location(pafs.PyFileSystem(handler), provider.location.base,
                           provider.location.target)
    work = tempfile.mkdtemp(prefix="objects-bench-")
    s3_store = ObjectTaskStore(counted, f"{provider.root}/count/task-0", 0, f"{work}/w.db")
    local = LocalProvider(work, "objects-bench", "local")
    sqlite_store = local.task_store("count", 0)
    s3_store.restore(None)
    handler.calls.clear()
    changed = 0
    ms: dict[str, list[float]] = {"s3": [], "local": []}
    for cid in range(1, rounds + 2):
        chosen = range(keys) if cid == 1 else rng.sample(range(keys), dirty)
        puts = [(0, enc(f"w{i}"), rng.randbytes(value_bytes)) for i in chosen]
        changed += sum(len(k) + len(v) for _, k, v in puts)
        for name, store in (("s3", s3_store), ("local", sqlite_store)):
            t0 = time.perf_counter()
            store.prepare(cid, puts, [])
            if cid > 1:
                ms[name].append((time.perf_counter() - t0) * 1e3)
            if cid > 1:
                store.collect(cid - 1)
    checkpoints = rounds + 1
    # the state as of the last checkpoint, read back by a new store: the same keys
    fresh = ObjectTaskStore(provider.location, f"{provider.root}/count/task-0", 0,
                            f"{work}/fresh.db")
    restored = len(fresh.restore(checkpoints))
    fresh.close()
    s3_store.close()
    local.delete()
    provider.delete()
    p50 = {name: statistics.median(v) for name, v in ms.items()}
    return {"keys": keys, "dirty": dirty, "rounds": rounds, "value_bytes": value_bytes,
            "calls": dict(handler.calls), "checkpoints": checkpoints,
            "bytes_changed": changed, "bytes_uploaded": handler.written,
            "restored_keys": restored,
            "s3_requests_per_task_ckpt": round(sum(handler.calls.values()) / checkpoints, 3),
            "bytes_uploaded_per_ckpt_vs_changed": round(handler.written / changed, 3),
            "prepare_ms_p50_s3": round(p50["s3"], 2),
            "prepare_ms_p50_local": round(p50["local"], 2),
            "ckpt_ms_p50_s3_vs_local": round(p50["s3"] / p50["local"], 2)}


def run_against_moto(keys: int, rounds: int, dirty: int = 1000) -> dict:
    """:func:`object_store_cost` against a moto server started for it (dummy credentials
    in this process's environment), stopped after."""
    import os

    from tests import _s3

    if _s3.server_binary() is None:
        raise RuntimeError(_s3.NO_SERVER)
    for name, value in _s3.ENV.items():
        os.environ.setdefault(name, value)
    server = _s3.MotoServer().start()
    try:
        server.create_bucket("bench")
        out = object_store_cost(server.uri("bench", "objects"), keys, min(dirty, keys),
                                rounds)
        # the layout not chosen, the same rounds: a base at every commit (chains of 1)
        from actors.state import _objects

        saved = _objects.MIN_CHAIN, _objects.MAX_CHAIN
        _objects.MIN_CHAIN = _objects.MAX_CHAIN = 1
        try:
            out["base_every_ckpt"] = object_store_cost(server.uri("bench", "every"), keys,
                                                       min(dirty, keys), rounds)
        finally:
            _objects.MIN_CHAIN, _objects.MAX_CHAIN = saved
        out["layout"] = {"min_chain": saved[0], "max_chain": saved[1]}
        return out
    finally:
        server.stop()
