"""Joins without Ray: ``JoinBolt`` and ``IntervalJoinBolt`` against plain nested-loop
references on random inputs, their build-time checks, and their checkpoints (restored
mid-stream, stored by key group)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import actors.windowing.interval as interval_mod
from actors.state._internals import InGroup
from actors.windowing.interval import IntervalJoinExecutor, PersistentIntervalJoinExecutor
from actors.windowing.persistent import PersistentWindowedBoltExecutor
from topology import (
    Count,
    Duration,
    Fields,
    IntervalJoinBolt,
    JoinBolt,
    TopologyBuilder,
    TopologyError,
    Tuple,
)
from topology._components import Spout, TopologyContext
from topology._keygroups import state_key_group
from topology._tuple import SYSTEM_COMPONENT_ID, SYSTEM_TICK_STREAM_ID, TICK_FIELDS

FIELDS = {"s1": Fields(("id", "name", "info")), "s2": Fields(("id", "amount")),
          "s3": Fields(("ref", "city"))}


def _rows(seed: int, n: int = 120) -> list[Tuple]:
    """Tuples of s1, s2, s3 in random order: small key ranges, None keys, nested ``info``
    that is sometimes missing its key or not a mapping."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s = rnd.choice(("s1", "s2", "s3"))
        key = rnd.choice([None, 1, 2, 3, 4, 5])
        if s == "s1":
            info = rnd.choice([{"city": f"c{rnd.randrange(3)}"}, {}, "flat"])
            values = [key, f"n{i}", info]
        elif s == "s2":
            values = [key, i]
        else:
            values = [rnd.choice([None, 1, 2, 3, 4, 5, 6]), f"c{rnd.randrange(3)}"]
        out.append(Tuple(values, FIELDS[s], s, 1, "default"))
    return out


def _get(t: Tuple, path: str):
    """Reference lookup: the field, then keys into mappings; None when anything is missing."""
    v = t.get(path.split(".")[0])
    for k in path.split(".")[1:]:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _reference(rows, first, joins, select):
    """Storm's JoinBolt semantics as nested loops: ``joins`` [(stream, field, prior,
    prior_field, kind)]; returns a Counter of projected rows."""
    order = [first] + [j[0] for j in joins]
    records = [{first: t} for t in rows if t.source_component == first]
    for stream, field, prior, prior_field, kind in joins:
        nxt = []
        for rec in records:
            p = rec.get(prior)
            key = None if p is None else _get(p, prior_field)
            if key is None:
                continue
            matches = [t for t in rows if t.source_component == stream
                       and _get(t, field) == key]
            nxt += [{**rec, stream: m} for m in matches]
            if not matches and kind == "left":
                nxt.append(dict(rec))
        records = nxt
    out = Counter()
    for rec in records:
        vals = []
        for sel in select:
            stream, _, path = sel.rpartition(":")
            found = None
            for s in order:
                if s in rec and (not stream or stream.lower() == s):
                    found = _get(rec[s], path)
                    if found is not None:
                        break
            vals.append(found)
        out[tuple(map(repr, vals))] += 1
    return out


SELECT = ["s1:id", "name", "s1:info.city", "s2:amount", "S3:city", "missing.x"]
CASES = {
    "inner": ([("s2", "id", "s1", "id", "inner")], SELECT[:4]),
    "left": ([("s2", "id", "s1", "id", "left")], SELECT[:4]),
    "three-streams": ([("s2", "id", "s1", "id", "left"), ("s3", "ref", "s2", "id", "inner")],
                      SELECT[:5]),
    "three-from-first": ([("s2", "id", "s1", "id", "inner"),
                          ("s3", "ref", "s1", "id", "left")], SELECT[:5]),
}


def _join_bolt(joins, select) -> JoinBolt:
    bolt = JoinBolt("s1", "id")
    for stream, field, prior, _, kind in joins:
        (bolt.join if kind == "inner" else bolt.left_join)(stream, field, prior)
    return bolt.select(", ".join(select))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_join_window_equals_the_nested_loop_reference(case, seed):
    """Inner, left and three-stream joins with nested selectors, None keys and missing
    fields: the window's join is the reference's multiset (S3: names match whatever the
    case; a missing field projects None)."""
    joins, select = CASES[case]
    rows = _rows(seed)
    bolt = _join_bolt(joins, select)
    got = Counter(tuple(map(repr, v)) for _, v in bolt.join_window(rows))
    want = _reference(rows, "s1", [(s.lower(), *r) for s, *r in joins], select)
    assert got == want and sum(want.values()) > 0


def test_a_null_probe_key_drops_the_row_in_a_left_join_and_outputs_are_anchored():
    """Storm's rule: s1's row with a None id is dropped though the join is LEFT; a row
    with no match is kept with None; each output is anchored to the tuples it was made
    of; output fields are the selector text less a leading ':'."""
    a = Tuple([None, "x", {}], FIELDS["s1"], "s1", 1, "default")
    b = Tuple([7, "y", {}], FIELDS["s1"], "s1", 1, "default")
    c = Tuple([8, "z", {}], FIELDS["s1"], "s1", 1, "default")
    d = Tuple([8, 5], FIELDS["s2"], "s2", 1, "default")
    bolt = JoinBolt("s1", "id").left_join("s2", "id", "s1").select(":name, s2:amount")
    emitted = []

    class _Col:
        def emit(self, values, stream="default", anchors=None):
            emitted.append((values, stream, anchors))

    bolt.prepare({}, None, _Col())

    class _W:
        def get(self):
            return [a, b, c, d]
    bolt.execute(_W())
    assert emitted == [(["y", None], "default", [b]), (["z", 5], "default", [c, d])]
    assert bolt.output_names() == ["name", "s2:amount"]


# -- build-time checks -------------------------------------------------------------------

class _Src(Spout):
    def __init__(self, fields):
        self.fields = fields

    def declare_output_fields(self, declarer):
        declarer.declare(Fields(self.fields))

    def next_tuple(self):
        pass


def _build(bolt, par=1, group=("id", "id"), fields2=("id", "amount")):
    b = TopologyBuilder()
    b.set_spout("s1", _Src(("id", "name", "ts")))
    b.set_spout("s2", _Src(fields2 + ("ts",)))
    d = b.set_bolt("j", bolt.with_tumbling_window(Count(10))
                   if isinstance(bolt, JoinBolt) else bolt, par)
    for src, f in zip(("s1", "s2"), group, strict=True):
        d.fields_grouping(src, Fields((f,))) if f else d.shuffle_grouping(src)
    return b.create_topology()


def _ij():
    return (IntervalJoinBolt("s1", "id", "s2", "id").between(Duration(1), Duration(5))
            .with_timestamp_field("ts").select("s1:id, amount"))


BAD = {
    "no select": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s1")),
                  ["'j'", "Must specify output fields via .select() method."]),
    "join field undeclared": (lambda: _build(JoinBolt("s1", "id").join("s2", "zz", "s1")
                                             .select("name")), ["'j'", "'zz'", "'s2'"]),
    "select field undeclared": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s1")
                                               .select("name, s2:nope")),
                                ["'j'", "'nope'", "'s2'"]),
    "joined twice": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s1")
                                    .join("S2", "id", "s1").select("name")),
                     ["'j'", "'S2' is already part of the join"]),
    "forward reference": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s3")
                                         .select("name")), ["'j'", "'s3' was not previously"]),
    "right join": (lambda: _build(JoinBolt("s1", "id").join_of(JoinBolt.JoinType.RIGHT, "s2",
                                                               "id", "s1").select("name")),
                   ["'j'", "Unsupported join type : RIGHT"]),
    "not grouped on the key": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s1")
                                              .select("name"), 2, ("id", None)),
                               ["'j'", "'s2'", "fields-grouped on its join field 'id'"]),
    "grouped on another field": (lambda: _build(JoinBolt("s1", "id").join("s2", "id", "s1")
                                                .select("name"), 2, ("name", "id")),
                                 ["'j'", "'s1'", "join field 'id'"]),
    "interval lower above upper": (lambda: _build(_ij().between(5, 1)),
                                   ["'j'", "lower bound 5 ms is above upper bound 1 ms"]),
    "interval without time": (lambda: _build(IntervalJoinBolt("s1", "id", "s2", "id")
                                             .between(0, 1).select("name")),
                              ["'j'", "with_timestamp_field"]),
    "interval key undeclared": (lambda: _build(_ij(), fields2=("key", "amount"),
                                               group=("id", "key")),
                                ["'j'", "'id'", "'s2'"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_invalid_joins_fail_at_build_naming_the_bolt_and_the_field_or_stream(case):
    make, words = BAD[case]
    with pytest.raises(TopologyError) as e:
        make()
    assert all(w in str(e.value) for w in words), str(e.value)


def test_valid_joins_build_with_a_nested_key_grouped_on_its_outer_field():
    _build(JoinBolt("s1", "id").join("s2", "id", "s1").select("s1:id, amount"), 2)
    _build(_ij(), 3)
    _build(JoinBolt("s1", "id").join("s2", "id.inner", "s1").select("id"), 2)


# -- the interval join -------------------------------------------------------------------

IFIELDS = Fields(("id", "key", "ts"))


def _stream(seed: int, n: int = 300, skew: int = 6) -> list[Tuple]:
    """Lefts from task 1 (source s1), rights from task 2 (s2), each side's time rising
    with disorder up to ``skew`` ms; keys 0..3 and None."""
    rnd, out, now = random.Random(seed), [], {1: 1000, 2: 1000}
    for i in range(n):
        task = rnd.choice((1, 2))
        now[task] += rnd.randrange(0, 3)
        ts = now[task] - rnd.randrange(0, skew)
        comp = "s1" if task == 1 else "s2"
        out.append(Tuple([i, rnd.choice([None, 0, 1, 2, 3]), ts], IFIELDS, comp, task,
                         "default"))
    return out


def _interval_reference(rows, lower, upper, lo_incl=True, hi_incl=True) -> Counter:
    out = Counter()
    for left in rows:
        for right in rows:
            if (left.source_component, right.source_component) != ("s1", "s2"):
                continue
            if left["key"] is None or left["key"] != right["key"]:
                continue
            d = right["ts"] - left["ts"]
            if ((d >= lower if lo_incl else d > lower)
                    and (d <= upper if hi_incl else d < upper)):
                out[(left["id"], right["id"], max(left["ts"], right["ts"]))] += 1
    return out


class _Col:
    def __init__(self):
        self.emitted, self.acked, self.errors = [], [], []

    def emit(self, values, stream="default", anchors=None):
        self.emitted.append((tuple(values), anchors))
        return ()

    def ack(self, tup):
        self.acked.append(tup)

    def report_error(self, e):
        self.errors.append(e)


_TICK = Tuple([1], TICK_FIELDS, SYSTEM_COMPONENT_ID, -1, SYSTEM_TICK_STREAM_ID)


def _interval_executor(bolt, kind=IntervalJoinExecutor, conf=None):
    ex, col = kind(bolt), _Col()
    ctx = TopologyContext("t", "j", 3, 0, {"s1": [1], "s2": [2], "j": [3]},
                          sources={("s1", "default"): IFIELDS, ("s2", "default"): IFIELDS})
    ex.prepare(conf or {}, ctx, col)
    return ex, col


@pytest.fixture
def clock(monkeypatch):
    """The executors' clock, moved by hand: each tick is in a new watermark slot."""
    now = [0]
    monkeypatch.setattr(interval_mod, "now_ms", lambda: now[0])
    return now


def _drive(ex, rows, clock, every=7):
    for i, t in enumerate(rows):
        ex.execute(t)
        if i % every == 0:
            clock[0] += 10
            ex.execute(_TICK)


BOUNDS = {"inclusive": (-2, 3, True, True), "exclusive": (-2, 3, False, False),
          "lower-exclusive-zero": (0, 0, True, True), "positive": (1, 4, False, True)}


@pytest.mark.parametrize("bounds", sorted(BOUNDS))
@pytest.mark.parametrize("seed", [1, 2])
def test_interval_join_equals_the_reference_and_holds_bounded_buffers(bounds, seed, clock):
    """Every pair within the bounds, at their inclusive and exclusive edges, exactly once,
    with the larger timestamp; buffers stay bounded by rate x (interval + lag) and each
    tuple is acked once (after it expired, or at once for a None key)."""
    lower, upper, lo_in, hi_in = BOUNDS[bounds]
    bolt = (IntervalJoinBolt("s1", "key", "s2", "key").between(lower, upper)
            .with_timestamp_field("ts").with_lag(Duration(8)).with_watermark_interval(
                Duration(10)).select("s1:id, s2:id").with_output_timestamp_field("t"))
    if not lo_in:
        bolt.lower_bound_exclusive()
    if not hi_in:
        bolt.upper_bound_exclusive()
    rows = _stream(seed)
    ex, col = _interval_executor(bolt)
    _drive(ex, rows, clock)
    assert ex.late == 0 and ex.buffered < 60, ex.buffered
    ex.finish()
    want = _interval_reference(rows, lower, upper, lo_in, hi_in)
    assert Counter(v for v, _ in col.emitted) == want and sum(want.values()) > 5
    assert all(len(a) == 2 for _, a in col.emitted)
    assert sorted(t["id"] for t in col.acked) == list(range(len(rows)))
    assert ex.buffered == 0


def test_interval_edges_are_exact():
    """``left.ts + lower <= right.ts <= left.ts + upper``, each end strict on demand."""
    b = IntervalJoinBolt("a", "k", "b", "k").between(-1, 2)
    assert [b.matches(10, r) for r in (8, 9, 12, 13)] == [False, True, True, False]
    b.lower_bound_exclusive().upper_bound_exclusive()
    assert [b.matches(10, r) for r in (9, 10, 11, 12)] == [False, True, True, False]


def test_late_and_bad_timestamps_go_to_the_late_stream_and_the_error_count(clock):
    bolt = (IntervalJoinBolt("s1", "key", "s2", "key").between(0, 1).with_timestamp_field("ts")
            .with_late_tuple_stream("late").select("s1:id"))
    ex, col = _interval_executor(bolt)
    ex.execute(Tuple([0, 1, 100], IFIELDS, "s1", 1, "default"))
    ex.execute(Tuple([1, 1, 100], IFIELDS, "s2", 2, "default"))
    clock[0] += 1000   # the next watermark interval
    ex.execute(_TICK)
    assert ex.watermark == 100
    ex.execute(Tuple([2, 1, 99], IFIELDS, "s2", 2, "default"))
    ex.execute(Tuple([3, 1, "soon"], IFIELDS, "s2", 2, "default"))
    assert col.emitted[0] == ((0,), [col.emitted[0][1][0], col.emitted[0][1][1]])
    assert col.emitted[1][0] == ("s2", "default", [2, 1, 99], 99)
    assert ex.late == 1 and ex.bad_timestamps == 1 and "ts" in str(col.errors[0])


# -- checkpoints -------------------------------------------------------------------------

def _checkpoint(ex, store: dict) -> list:
    puts, deletes = ex.internal_changes(1)
    for k, v in puts:
        store[k] = v
    for k in deletes:
        store.pop(k)
    return puts


def _restore(ex, store):
    ex.restore_internals({(k.key if isinstance(k, InGroup) else k): v
                          for k, v in store.items()}, 1)


def _assert_grouped(store, bolt, field_of):
    """Every InGroup entry holds only tuples whose key's group is its group."""
    from actors._codec import decode_value

    grouped = [k for k in store if isinstance(k, InGroup)]
    assert len({k.group for k in grouped}) > 1
    for k in grouped:
        for row in decode_value(store[k]):
            assert state_key_group(field_of(row), 1, 128) == k.group


@pytest.mark.parametrize("seed", [1, 2])
def test_an_interval_join_restored_from_a_checkpoint_outputs_every_pair(seed, clock):
    """Checkpoint mid-stream, crash later, restore into a new executor and replay from
    the checkpoint: the outputs before the checkpoint and after the restore are exactly
    the reference; the buffers are stored by their key's group."""
    def bolt():
        return (IntervalJoinBolt("s1", "key", "s2", "key").between(-3, 3)
                .with_timestamp_field("ts").with_lag(Duration(8))
                .with_watermark_interval(Duration(10)).select("s1:id, s2:id"))
    rows = _stream(seed)
    cut = len(rows) // 2
    ex, col = _interval_executor(bolt(), PersistentIntervalJoinExecutor)
    _drive(ex, rows[:cut], clock)
    store: dict = {}
    _checkpoint(ex, store)
    before = list(col.emitted)
    _drive(ex, rows[cut:cut + 40], clock)    # lost in the crash
    _assert_grouped(store, ex.bolt, lambda row: row[5][1])
    ex2, col2 = _interval_executor(bolt(), PersistentIntervalJoinExecutor)
    _restore(ex2, store)
    _drive(ex2, rows[cut:], clock)
    ex2.finish()
    want = Counter((a, b) for a, b, _ in _interval_reference(rows, -3, 3).elements())
    assert Counter(v for v, _ in before + col2.emitted) == want
    assert all(a is None for _, a in col2.emitted)


def test_a_join_bolt_under_checkpoints_stores_its_window_by_key_group_and_restores():
    """A JoinBolt's persistent window, checkpointed with a window open and restored into
    a new executor, fires the same join; its tuples are stored under their key's group."""
    ev = Fields(("id", "amount", "ts"))

    def executor():
        bolt = (JoinBolt("s1", "id").join("s2", "id", "s1").select("s1:amount, s2:amount")
                .with_tumbling_window(Duration(100)).with_timestamp_field("ts"))
        ex, col = PersistentWindowedBoltExecutor(bolt), _Col()
        ex.prepare({}, TopologyContext("t", "j", 3, 0, {"s1": [1], "s2": [2], "j": [3]},
                                       sources={("s1", "default"): ev,
                                                ("s2", "default"): ev}), col)
        return ex, col
    rnd = random.Random(4)
    rows = [Tuple([rnd.randrange(6), i, rnd.randrange(0, 90)], ev, s, task, "default")
            for i, (s, task) in enumerate([("s1", 1), ("s2", 2)] * 40)]
    ex, col = executor()
    for t in rows:
        ex.execute(t)
    store: dict = {}
    _checkpoint(ex, store)
    _assert_grouped(store, ex.bolt, lambda row: row[5][0])
    ex2, col2 = executor()
    _restore(ex2, store)
    for e in (ex, ex2):
        e.upstream_ended(1)
        e.upstream_ended(2)
    assert col.emitted == col2.emitted and len(col.emitted) > 20
    want = Counter((a["amount"], b["amount"]) for a in rows[::2] for b in rows[1::2]
                   if a["id"] == b["id"])
    assert Counter(v for v, _ in col2.emitted) == want


def test_process_can_be_overridden_and_emits_anchored_to_the_pair(clock):
    class Diff(IntervalJoinBolt):
        outputs = ("gap",)

        def process(self, left, right):
            self.collector.emit((right["ts"] - left["ts"],))
    bolt = Diff("s1", "key", "s2", "key").between(0, 5).with_timestamp_field("ts")
    ex, col = _interval_executor(bolt)
    left = Tuple([0, 1, 10], IFIELDS, "s1", 1, "default")
    right = Tuple([1, 1, 13], IFIELDS, "s2", 2, "default")
    ex.execute(left)
    ex.execute(right)
    assert col.emitted == [((3,), [left, right])]


def test_interval_projection_is_joinbolts():
    """The interval join's pair projection reads as ``JoinBolt``'s: first non-None value
    in (left, right) order, restricted by a ``stream:`` prefix, None when missing."""
    bolt = IntervalJoinBolt("S1", "key", "s2", "key").select("id, s2:id, S2:key, key, ts.x")
    for left, right in zip(_stream(5)[::2], _stream(6)[1::2], strict=False):
        left = Tuple([left["id"], None, left["ts"]], IFIELDS, "s1", 1, "default")
        right = Tuple([right["id"], right["key"], {"x": 1}], IFIELDS, "s2", 2, "default")
        assert bolt.project_pair(left, right) == bolt.project((left, right))
    assert bolt.project_pair(left, right) == [left["id"], right["id"], right["key"],
                                              right["key"], 1]


def test_buffers_expire_on_data_when_ticks_lag_behind_a_full_queue(clock):
    """No tick arrives (as behind a full queue): the first tuple of each watermark
    interval moves the watermark, so the buffers stay bounded by the interval."""
    bolt = (IntervalJoinBolt("s1", "key", "s2", "key").between(-3, 3)
            .with_timestamp_field("ts").with_watermark_interval(Duration(10)).select("s1:id"))
    ex, col = _interval_executor(bolt)
    held = []
    for i, t in enumerate(_stream(3, n=600)):
        if i % 20 == 0:
            clock[0] += 10
        ex.execute(t)
        held.append(ex.buffered)
    assert max(held) < 80 and ex.watermark is not None, max(held)
