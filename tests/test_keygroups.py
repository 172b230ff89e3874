"""Key groups (topology/_keygroups.py, Flink's ``KeyGroupRangeAssignment``) and the fields
grouping that routes by them (actors/_routing.py), without Ray: the mix, the ranges, the
router's choice against a state key's group, and the submit's parallelism check."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import msgpack
import pytest

import actors
from actors._routing import _MEMO_KEYS, build_routers
from actors._routing import stable_hash as routing_stable_hash
from cluster._plan import plan
from tests.components import PassBolt, SeqSpout
from topology import CollectorBolt, ConfigError, TopologyBuilder
from topology._keygroups import (
    DEFAULT_KEY_GROUPS,
    check_key_group_parallelism,
    fields_hash,
    key_group,
    key_group_count,
    key_group_range,
    murmur_mix,
    operator_index,
    stable_hash,
    state_key_group,
)


def _murmur3_32(data: bytes, seed: int) -> int:
    """MurmurHash3 x86 32-bit over any bytes (the public algorithm, written from its
    description), to check :func:`murmur_mix` against: a different route to the same
    numbers, itself checked against published test vectors below."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    h = seed
    n = len(data) - len(data) % 4
    for i in range(0, n, 4):
        k = rotl(int.from_bytes(data[i:i + 4], "little") * 0xCC9E2D51 & m, 15)
        h = (rotl(h ^ (k * 0x1B873593 & m), 13) * 5 + 0xE6546B64) & m
    if data[n:]:
        k = rotl(int.from_bytes(data[n:], "little") * 0xCC9E2D51 & m, 15)
        h ^= k * 0x1B873593 & m
    h ^= len(data)
    h ^= h >> 16
    h = h * 0x85EBCA6B & m
    h ^= h >> 13
    h = h * 0xC2B2AE35 & m
    return h ^ (h >> 16)


def _java_abs(u: int) -> int:
    """Flink's non-negative result of a 32-bit hash read as a Java int."""
    s = u - (1 << 32) if u >= 1 << 31 else u
    return 0 if s == -(1 << 31) else abs(s)


# -- the hash and the mix -------------------------------------------------------------


def test_stable_hash_results_are_unchanged_and_still_exported_by_actors():
    # the values of the hash before it moved here (CRC-32 of text or msgpack, 48 bits of
    # an int): every existing key keeps its hash
    expected = {"a": 3904355907, "": 0, "héllo": 2654700086, 0: 0, 5: 5,
                -1: 2**48 - 1, 2**60 + 7: 7, None: 0, 3.0: 3, 2.5: 21589957,
                (1, "a"): 3127263330, ("k", 2, None): 1216565326, b"xy": 365971525}
    for value, h in expected.items():
        assert stable_hash(value) == h, value
    assert stable_hash([1, "a"]) == stable_hash((1, "a"))
    assert stable_hash("a") == zlib.crc32(b"a") == 0xE8B7BE43
    assert stable_hash(2.5) == zlib.crc32(msgpack.packb(2.5))
    assert actors.stable_hash is stable_hash and routing_stable_hash is stable_hash


def test_fields_hash_is_the_31_recurrence_and_one_value_its_stable_hash():
    for v in ("a", 7, None, (1, 2)):
        assert fields_hash((v,)) == stable_hash(v)
    a, b, c = stable_hash("x"), stable_hash(12), stable_hash(None)
    assert fields_hash(("x", 12, None)) == ((a * 31 + b) * 31 + c) & (2**48 - 1)
    assert fields_hash(["x", 12]) == fields_hash(("x", 12))
    assert fields_hash(("x", 12)) != fields_hash((12, "x"))


def test_reference_murmur3_matches_published_vectors():
    vectors = [(b"", 0, 0), (b"", 1, 0x514E28B7), (b"", 0xFFFFFFFF, 0x81F16F39),
               (b"\xff\xff\xff\xff", 0, 0x76293B50), (b"\x21\x43\x65\x87", 0, 0xF55B516B),
               (b"\x21\x43\x65\x87", 0x5082EDEE, 0x2362F9DE), (b"\x21\x43\x65", 0, 0x7E4A8634),
               (b"\x21\x43", 0, 0xA0F7B07A), (b"\x21", 0, 0x72661CF4),
               (b"\0\0\0\0", 0, 0x2362F9DE), (b"\0\0\0", 0, 0x85F0B427)]
    for data, seed, want in vectors:
        assert _murmur3_32(data, seed) == want, (data, seed)


def test_murmur_mix_is_murmur3_of_the_folded_hash_made_non_negative():
    """For a 32-bit hash, Flink's ``MathUtils.murmurHash``: MurmurHash3 of its 4 bytes
    (seed 0) as a non-negative Java int; the bits above 32 are folded in first."""
    assert murmur_mix(0) == 0x2362F9DE  # the published vector of four zero bytes
    rng = random.Random(7)
    hashes = [0, 1, 2**31 - 1, 2**31, 2**32 - 1] + [rng.getrandbits(32) for _ in range(3000)]
    for h in hashes:
        assert murmur_mix(h) == _java_abs(_murmur3_32(h.to_bytes(4, "little"), 0)), h
    for h in [2**32, 2**48 - 1] + [rng.getrandbits(48) for _ in range(3000)]:
        folded = (h ^ (h >> 32)) & 0xFFFFFFFF
        assert murmur_mix(h) == murmur_mix(folded), h
    assert murmur_mix(2**32) != murmur_mix(0)  # a high bit changes the mix


def test_murmur_mix_is_non_negative_and_the_same_in_another_process():
    keys = ["a", "b", 0, 1, 128, 2**40 + 3, None, 2.5, ("k", 1)]
    hashes = [stable_hash(k) for k in keys] + [fields_hash(("k", 1, "z"))]
    mine = [murmur_mix(h) for h in hashes]
    assert all(0 <= m < 2**31 for m in mine)
    code = ("import sys; from topology._keygroups import murmur_mix, stable_hash, fields_hash;"
            f"keys = {keys!r};"
            "hs = [stable_hash(k) for k in keys] + [fields_hash(('k', 1, 'z'))];"
            "print([murmur_mix(h) for h in hs])")
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=root,
                         env={**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": root})
    assert out.stdout.strip() == str(mine)


def test_strided_int_keys_spread_over_the_groups():
    groups = [key_group(stable_hash(k * 128), 128) for k in range(10_000)]
    counts = [groups.count(g) for g in range(128)]
    assert sum(1 for c in counts if c) > 100
    assert max(counts) < 3 * 10_000 / 128  # no group takes a large share
    # the same for other strides and group counts, and for text keys
    for stride, g in ((1024, 128), (64, 64), (1 << 32, 128)):
        assert len({key_group(stable_hash(k * stride), g) for k in range(5_000)}) > 0.8 * g
    assert len({key_group(stable_hash(f"user-{i}"), 128) for i in range(5_000)}) == 128


# -- groups, ranges and operator indices ------------------------------------------------


def test_key_group_count_reads_the_key_or_defaults_to_128():
    assert DEFAULT_KEY_GROUPS == 128
    assert key_group_count({"topology.max.task.parallelism": None}) == 128
    assert key_group_count({}) == 128
    assert key_group_count({"topology.max.task.parallelism": 32}) == 32


@pytest.mark.parametrize("n, g", [(1, 1), (1, 128), (3, 128), (7, 128), (128, 128),
                                  (5, 17), (16, 16), (10, 1000), (33, 64)])
def test_key_group_range_is_contiguous_and_the_inverse_of_operator_index(n, g):
    ranges = [key_group_range(i, n, g) for i in range(n)]
    assert all(len(r) >= 1 and r.step == 1 for r in ranges)
    assert [x for r in ranges for x in r] == list(range(g))  # contiguous, in order, a cover
    for i, r in enumerate(ranges):
        assert all(operator_index(x, n, g) == i for x in r)
    for x in range(g):
        assert x in ranges[operator_index(x, n, g)]
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1  # even


def test_ranges_and_indices_refuse_out_of_range_arguments():
    with pytest.raises(ValueError, match="parallelism must be in"):
        key_group_range(0, 5, 4)
    with pytest.raises(ValueError, match="task index must be in"):
        key_group_range(3, 3, 128)
    with pytest.raises(ValueError, match="group must be in"):
        operator_index(128, 3, 128)
    with pytest.raises(ValueError, match="parallelism must be in"):
        operator_index(0, 0, 128)


def test_state_key_group_by_arity():
    assert state_key_group("k1", 1, 128) == key_group(stable_hash("k1"), 128)
    assert state_key_group(("a", 1), 1, 128) == key_group(stable_hash(("a", 1)), 128)
    assert state_key_group(("a", 1), 2, 64) == key_group(fields_hash(("a", 1)), 64)
    assert state_key_group(["a", 1], 2, 64) == state_key_group(("a", 1), 2, 64)
    for bad in ("ab", ("a",), ("a", 1, 2), 5):
        with pytest.raises(ValueError, match="must be a tuple of 2 values"):
            state_key_group(bad, 2, 128)
    with pytest.raises(ValueError, match="at least one field"):
        state_key_group("a", 0, 128)


# -- the router -----------------------------------------------------------------------


def _keyed_topology(n: int):
    """A spout of (seq, key) and two bolts of ``n`` tasks: one grouped on key, one on
    (key, seq) — the grouping's order, not the stream's."""
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    b.set_bolt("one", CollectorBolt(), parallelism_hint=n).fields_grouping("src", ["key"])
    b.set_bolt("two", CollectorBolt(), parallelism_hint=n).fields_grouping(
        "src", ["key", "seq"])
    topo = b.create_topology()
    src = topo.component_tasks["src"][0]
    workers = {t: 0 for ts in topo.component_tasks.values() for t in ts}
    return topo, src, workers


@pytest.mark.parametrize("n, groups", [(3, 128), (4, 16), (5, 7), (1, 128), (8, 8)])
def test_router_sends_a_key_to_the_task_whose_range_holds_its_group(n, groups):
    topo, src, workers = _keyed_topology(n)
    router = build_routers(topo, "src", src, workers, key_groups=groups)["default"]
    one, two = list(topo.component_tasks["one"]), list(topo.component_tasks["two"])
    seen = set()
    for seq in range(3000):
        key = f"k{seq % 500}" if seq % 2 else seq * 128
        targets = router.route((seq, key))
        t1, t2 = (t for t in targets if t in one), (t for t in targets if t in two)
        i1, i2 = one.index(next(t1)), two.index(next(t2))
        assert state_key_group(key, 1, groups) in key_group_range(i1, n, groups)
        assert state_key_group((key, seq), 2, groups) in key_group_range(i2, n, groups)
        seen.add(i1)
    assert seen == set(range(n))  # every task gets keys


def test_router_routes_the_same_once_its_memo_is_full_and_across_senders():
    topo, src, workers = _keyed_topology(6)
    r = build_routers(topo, "src", src, workers, key_groups=32)["default"]
    again = build_routers(topo, "src", src, workers, key_groups=32)["default"]
    keys = [f"user-{i}" for i in range(3 * _MEMO_KEYS)]
    first = [r.route((0, k)) for k in keys]  # fills the memo, clears it, fills it again
    assert [r.route((0, k)) for k in keys] == first
    assert [again.route((0, k)) for k in reversed(keys)] == first[::-1]
    fields = next(s for s in r._subs if s.kind == "fields")
    assert 0 < len(fields.memo) <= _MEMO_KEYS


def test_the_group_count_changes_the_route_but_not_the_group_of_a_key():
    topo, src, workers = _keyed_topology(4)
    one = list(topo.component_tasks["one"])
    for groups in (4, 16, 128):
        r = build_routers(topo, "src", src, workers, key_groups=groups)["default"]
        for k in range(200):
            task = next(t for t in r.route((k, k)) if t in one)
            assert task == one[operator_index(key_group(stable_hash(k), groups), 4, groups)]


def test_build_routers_refuses_more_tasks_than_groups_in_a_fields_grouping():
    topo, src, workers = _keyed_topology(5)
    with pytest.raises(ValueError, match="parallelism must be in"):
        build_routers(topo, "src", src, workers, key_groups=4)


def test_the_executor_routes_by_the_configured_group_count():
    from actors import make_executor

    topo, src, workers = _keyed_topology(3)
    core = make_executor("t", topo, {"topology.max.task.parallelism": 8}, src, workers)
    fields = [s for s in core.collector.routers["default"]._subs if s.kind == "fields"]
    assert len(fields) == 2 and all(len(s.table) == 8 for s in fields)


# -- the submit's check -----------------------------------------------------------------


def _chain(par: int, conf: dict | None = None):
    b = TopologyBuilder()
    b.set_spout("src", SeqSpout(10))
    d = b.set_bolt("wide", PassBolt(), parallelism_hint=par).fields_grouping("src", ["key"])
    for k, v in (conf or {}).items():
        d.add_configuration(k, v)
    return b.create_topology()


def test_parallelism_above_the_group_count_is_refused_naming_the_key():
    key = "topology.max.task.parallelism"
    with pytest.raises(ConfigError, match=rf"component 'wide': parallelism 9 exceeds the 8 "
                                          rf"key groups \({key}\)"):
        check_key_group_parallelism(_chain(9), {key: 8})
    with pytest.raises(ConfigError, match=r"'wide': parallelism 129 exceeds the 128 key"):
        plan(_chain(129), None)
    with pytest.raises(ConfigError, match=r"'wide': parallelism 3 exceeds the 2 key groups"):
        plan(_chain(3), {key: 2})


def test_parallelism_up_to_the_group_count_is_accepted():
    key = "topology.max.task.parallelism"
    check_key_group_parallelism(_chain(8), {key: 8})
    check_key_group_parallelism(_chain(128), {})
    assert plan(_chain(4), {key: 4}).conf[key] == 4
    # the ackers are system tasks: more of them than key groups is fine
    p = plan(_chain(1), {key: 1, "topology.workers": 2, "topology.acker.executors": 3})
    assert len(p.topology.acker_tasks) == 3


def test_a_component_may_not_set_its_own_group_count():
    key = "topology.max.task.parallelism"
    with pytest.raises(ConfigError, match=rf"component 'wide': {key} 16 differs from the "
                                          rf"topology's 128"):
        plan(_chain(2, {key: 16}), None)
    assert plan(_chain(2, {key: 16}), {key: 16}).conf[key] == 16
