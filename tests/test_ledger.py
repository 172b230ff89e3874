"""The acking ledger alone: Storm's acking scenarios as events in, messages and user calls
out. No Ray, no threads, no clock (``now`` is passed in): the whole file runs in
milliseconds, and with Ray absent (test_the_ledger_imports_without_ray)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from actors._acker import AckerLedger
from actors._acking import (
    ACK_BATCH_VALUES,
    EMITTED_AT,
    IMPLICIT_INIT,
    MAX_REASON_CHARS,
    OVERFLOW_REASON,
    TIMEOUT_REASON,
    XOR,
    BoltLedger,
    SpoutLedger,
    UserCalls,
    implicit_init_spout,
)
from actors._streams import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    ACKER_ACKED,
    ACKER_FAILED,
    ACKER_RESET,
    SystemStream,
)

SPOUT, BOLT, ACKER = 1, 2, 9  # task ids


class Tup:
    """What the bolt ledger reads of a tuple (``topology.Tuple`` has the same slots)."""

    def __init__(self, anchors):
        self.anchors = anchors
        self.ack_val = 0


def rand(seed: int = 7):
    return random.Random(seed).getrandbits


def msgs(ledger) -> dict:
    return {(d, s): v for d, s, v in ledger.take_messages()}


def test_the_ledger_imports_without_ray():
    code = "import sys; sys.modules['ray'] = None; import actors._acking"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_system_streams_carry_storms_names():
    assert SystemStream.ACK_INIT.storm_name == "__ack_init"
    assert SystemStream(ACKER_ACKED).storm_name == "__ack_ack"
    assert SystemStream.ACK_RESET_TIMEOUT == ACK_RESET == -5


# -- the acker ------------------------------------------------------------------------------
def test_acker_xors_batched_messages_and_answers_each_spout_in_one_message():
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=30)
    acker.on_system_message(SPOUT, ACK_INIT, [11, 5, 12, 6, 13, 7], now=0.0)
    acker.on_system_message(BOLT, ACK_ACK, [11, 5, 12, 6], now=0.1)  # two complete
    acker.on_system_message(BOLT, ACK_FAIL, [13, "E: x"], now=0.2)
    acker.on_system_message(BOLT, ACK_ACK, [14], now=0.3)  # odd length: malformed
    assert msgs(acker) == {(SPOUT, ACKER_ACKED): [11, 12],
                           (SPOUT, ACKER_FAILED): [13, "E: x"]}
    assert (acker.acked, acker.failed, acker.bad_messages) == (2, 1, 1)
    assert not acker.trees and acker.take_messages() == []


def test_an_ack_before_its_init_waits_for_the_init():
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=30)
    acker.on_system_message(BOLT, ACK_ACK, [11, 5], now=0.0)  # explicit root, no init yet
    assert acker.trees[11].spout == -1 and not acker.take_messages()
    acker.on_system_message(SPOUT, ACK_INIT, [11, 5], now=0.1)
    assert msgs(acker) == {(SPOUT, ACKER_ACKED): [11]}


def test_the_acker_learns_an_implicit_init_tree_from_its_first_ack():
    spouts = (3, SPOUT)  # the spout is index 1 among the spout tasks
    acker = AckerLedger([ACKER], spouts, timeout_s=30)
    r1, r2, r3, r4 = (IMPLICIT_INIT | 1 << 47 | k for k in (1, 2, 3, 4))
    acker.on_system_message(BOLT, ACK_ACK, [r1, 0], now=0.0)  # a tree of one ack
    acker.on_system_message(BOLT, ACK_ACK, [r2, 99], now=0.0)  # the first of two acks
    assert r1 not in acker.trees and acker.trees[r2].spout == SPOUT
    acker.on_system_message(BOLT, ACK_ACK, [r2, 99], now=0.1)
    acker.on_system_message(BOLT, ACK_FAIL, [r3, None], now=0.1)
    acker.on_system_message(BOLT, ACK_RESET, [r4], now=0.2)
    assert list(acker.trees) == [r4] and acker.trees[r4].started == 0.2
    acker.on_system_message(BOLT, ACK_ACK, [IMPLICIT_INIT | 5 << 47, 0], now=0.3)  # no spout 5
    assert msgs(acker) == {(SPOUT, ACKER_ACKED): [r1, r2], (SPOUT, ACKER_FAILED): [r3, None],
                           (SPOUT, ACKER_RESET): [r4]}
    assert acker.bad_messages == 1
    assert implicit_init_spout(r3, spouts) == SPOUT and implicit_init_spout(11, spouts) == -1


def test_the_acker_forgets_trees_older_than_the_timeout_oldest_first():
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=10)
    acker.on_system_message(SPOUT, ACK_INIT, [1, 5, 2, 6, 3, 7], now=0.0)
    acker.on_system_message(BOLT, ACK_RESET, [1], now=8.0)  # 1 is now the newest
    assert msgs(acker) == {(SPOUT, ACKER_RESET): [1]}
    acker.expire(now=12.0)
    assert list(acker.trees) == [1]
    acker.expire(now=18.1)
    assert not acker.trees and acker.take_messages() == []  # the spout times out itself


# -- the spout ------------------------------------------------------------------------------
def test_a_spout_emit_to_one_task_sends_no_init_and_its_root_names_the_spout():
    spout = SpoutLedger(SPOUT, [ACKER], [0, SPOUT], own_trees=False, timeout_s=30,
                        rand=rand())
    ((root, edge),) = spout.on_spout_emit("m", 1, now=0.0)
    assert edge == 0 and root & IMPLICIT_INIT and implicit_init_spout(root, (0, SPOUT)) == 1
    assert spout.take_messages() == [] and spout.pending == 1


def test_a_spout_emit_to_several_tasks_sends_storms_init_with_the_xor_of_its_edges():
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=30, rand=rand())
    anchors = spout.on_spout_emit("m", 3, now=0.0)
    roots = {a[0] for a in anchors}
    (root,) = roots
    assert not root & IMPLICIT_INIT and all(a[1] for a in anchors)
    assert msgs(spout) == {(ACKER, ACK_INIT): [root, anchors[0][1] ^ anchors[1][1]
                                               ^ anchors[2][1]]}


def test_spout_completes_fails_and_resets_trees_counting_unknown_roots():
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=30, rand=rand())
    r = [spout.on_spout_emit(m, 1, now=1.0)[0][0] for m in "abcd"]
    calls = spout.on_system_message(ACKER, ACKER_ACKED, [r[0], 99, r[1]], now=1.5)
    assert calls.acks == ["a", "b"] and spout.unknown_acks == 1
    assert list(spout.complete_latencies_ms) == [500.0, 500.0]
    assert spout.on_system_message(ACKER, ACKER_RESET, [r[2]], now=2.0).fails == []
    assert list(spout.trees) == [r[3], r[2]]  # a reset tree is now the newest
    calls = spout.on_system_message(ACKER, ACKER_FAILED, [r[3], "E", 98, None], now=2.0)
    assert calls.fails == ["d"] and calls.reasons == ["E"]
    assert spout.unknown_acks == 2 and spout.pending == 1
    calls = spout.on_system_message(ACKER, ACKER_ACKED, [[1], r[2]], now=2.0)  # malformed
    assert calls.acks == [] and spout.bad_messages == 1 and spout.pending == 1


def test_spout_times_out_trees_oldest_first_and_stops_at_the_first_in_time():
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=10, rand=rand())
    for i, m in enumerate("abc"):
        spout.on_spout_emit(m, 1, now=float(i))
    assert spout.expire(now=11.5).fails == ["a", "b"]
    assert spout.timeouts == 2 and spout.pending == 1
    assert spout.expire(now=11.9).fails == []


def test_without_ackers_a_spout_tuple_is_untracked_and_acked_at_emit():
    spout = SpoutLedger(SPOUT, [], [SPOUT], own_trees=False, timeout_s=30, rand=rand())
    assert spout.on_spout_emit("m", 2, now=0.0) is None
    assert spout.take_acks_due() == ["m"] and spout.pending == 0


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_spout_acking_its_own_trees_xors_fails_resets_and_counts_unknown_roots(index):
    spouts = (4, 5, 6)
    spout = SpoutLedger(spouts[index], spouts, spouts, own_trees=True, timeout_s=30,
                        rand=rand(index))
    ((root, edge),) = spout.on_spout_emit("a", 1, now=0.0)
    assert root % 3 == index and spout.trees[root][XOR] == edge and not spout.take_messages()
    spout.on_system_message(BOLT, ACK_ACK, [root, edge ^ 5, 12345, 1], now=0.1)
    assert spout.trees[root][XOR] == 5 and spout.unknown_acks == 1
    assert spout.on_system_message(BOLT, ACK_ACK, [root, 5], now=0.2).acks == ["a"]
    b = spout.on_spout_emit("b", 1, now=1.0)[0][0]
    c = spout.on_spout_emit("c", 1, now=2.0)[0][0]
    spout.on_system_message(BOLT, ACK_RESET, [b], now=3.0)
    assert list(spout.trees) == [c, b] and spout.trees[b][EMITTED_AT] == 3.0
    assert spout.on_system_message(BOLT, ACK_FAIL, [c, None, 99, None],
                                   now=3.0).fails == ["c"]
    assert spout.unknown_acks == 2 and c not in spout.trees
    spout.on_system_message(BOLT, ACK_ACK, [b], now=3.0)  # odd length: malformed
    spout.on_system_message(BOLT, ACK_ACK, [b, "x"], now=3.0)
    assert spout.bad_messages == 2 and list(spout.trees) == [b]


# -- the bolt -------------------------------------------------------------------------------
def test_a_bolt_ack_xors_its_childrens_edges_and_goes_to_the_acker_of_the_root():
    bolt = BoltLedger([8, ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    parent = Tup([10, 3])  # root 10 (explicit init), edge 3; acker 10 % 2 = 8
    children = bolt.on_emit([parent], 2)
    assert [c[0] for c in children] == [10, 10]
    assert parent.ack_val == children[0][1] ^ children[1][1]
    assert not bolt.on_ack(parent)
    assert msgs(bolt) == {(8, ACK_ACK): [10, 3 ^ parent.ack_val]}


def test_a_bolt_anchored_to_two_trees_pairs_each_edge_with_every_root():
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    a, b = Tup([11, 5, 12, 6]), Tup([13, 7])
    (child,) = bolt.on_emit([a, b], 1)
    e1, e2 = a.ack_val, b.ack_val
    assert child == [11, e1, 12, e1, 13, e2]


def test_a_bolt_completes_a_one_ack_implicit_tree_itself_and_leaves_the_rest_to_the_acker():
    spouts = (0, SPOUT)
    bolt = BoltLedger([ACKER], spouts, ackers_in_spouts=False, rand=rand())
    implicit = IMPLICIT_INIT | 1 << 47 | 42
    bolt.on_ack(Tup([implicit, 0]))  # XOR 0: the whole tree
    bolt.on_ack(Tup([77, 0]))  # an explicit init holds its own XOR: the acker decides
    assert msgs(bolt) == {(SPOUT, ACKER_ACKED): [implicit], (ACKER, ACK_ACK): [77, 0]}
    assert bolt.completed_trees == 1
    in_spouts = BoltLedger(spouts, spouts, ackers_in_spouts=True, rand=rand())
    in_spouts.on_ack(Tup([implicit, 0]))
    assert msgs(in_spouts) == {(spouts[implicit % 2], ACK_ACK): [implicit, 0]}


def test_a_folded_ack_rides_on_the_childs_edge_and_sends_nothing():
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    parent = Tup([10, 3])
    (child,) = bolt.on_emit([parent], 1)
    e_child = child[1]
    bolt.fold_ack(parent, child)
    assert child == [10, 3] and bolt.folded_acks == 1  # edge ^ (3 ^ e_child) ^ e_child
    assert e_child and bolt.take_messages() == []


def test_a_bolt_fails_and_resets_every_root_of_a_tuple():
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    bolt.on_fail(Tup([11, 5, 12, 6]))
    bolt.on_reset_timeout(Tup([13, 7]))
    assert msgs(bolt) == {(ACKER, ACK_FAIL): [11, None, 12, None], (ACKER, ACK_RESET): [13]}


def test_messages_are_due_at_the_batch_limit():
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    due = [bolt.on_ack(Tup([r, 1])) for r in range(1, ACK_BATCH_VALUES // 2 + 1)]
    assert due[-1] and not any(due[:-1])


# -- whole trees through the ledgers alone ----------------------------------------------------
@pytest.mark.parametrize("placement", ["one acker", "two ackers", "in spouts"])
def test_every_tree_of_a_branching_chain_completes_exactly_once(placement):
    """spout → split (2 children per tuple, to 1 or 2 tasks) → sink, random fan-outs and ack
    orders, 300 trees: each spout msg id is acked once, nothing fails or stays pending."""
    rng = random.Random(3)
    spouts = (1, 2)
    ackers = {"one acker": (9,), "two ackers": (8, 9), "in spouts": spouts}[placement]
    own = placement == "in spouts"
    sp = {t: SpoutLedger(t, ackers, spouts, own, 30, rand(t)) for t in spouts}
    split = BoltLedger(ackers, spouts, own, rand(11))
    sink = BoltLedger(ackers, spouts, own, rand(12))
    trackers = ({a: sp[a] for a in spouts} if own
                else {a: AckerLedger(ackers, spouts, 30) for a in ackers})
    acked: list = []

    def deliver(ledger, src):
        for dest, stream, values in ledger.take_messages():
            to_tracker = stream in (ACK_INIT, ACK_ACK, ACK_FAIL, ACK_RESET)
            target = trackers[dest] if to_tracker else sp[dest]
            calls = target.on_system_message(src, stream, values, 0.0)
            acked.extend(calls.acks)
            assert not calls.fails and not target.bad_messages
            if isinstance(target, AckerLedger):
                deliver(target, dest)

    for i in range(300):
        spout = spouts[i % 2]
        tuples = [Tup(a) for a in sp[spout].on_spout_emit(i, rng.choice([1, 2]), 0.0)]
        deliver(sp[spout], spout)
        rng.shuffle(tuples)
        for t in tuples:
            kids = [Tup(a) for a in split.on_emit([t], rng.choice([1, 2]))]
            if kids and rng.random() < 0.5:
                split.fold_ack(t, kids[-1].anchors)  # the last child still in its batch
            else:
                split.on_ack(t)
            deliver(split, BOLT)
            rng.shuffle(kids)
            for k in kids:
                sink.on_ack(k)
            deliver(sink, BOLT + 1)
    assert sorted(acked) == list(range(300))
    assert all(s.pending == 0 for s in sp.values())
    assert own or all(not a.trees for a in trackers.values())


# -- a fail's reason travels with it ---------------------------------------------------------
REASON = "ValueError: bad row (in bolt 'parse')"


def _deliver_all(sources: dict, targets: dict, now: float = 1.0) -> UserCalls:
    """Every message held by ``sources`` (task → ledger) to its destination in
    ``targets`` (task → ledger), until none is held; the spouts' user calls, together."""
    calls = UserCalls([], [], [])
    moved = True
    while moved:
        moved = False
        for src, ledger in list(sources.items()):
            for dest, stream, values in ledger.take_messages():
                moved = True
                c = targets[dest].on_system_message(src, stream, values, now)
                calls.acks.extend(c.acks)
                calls.fails.extend(c.fails)
                calls.reasons.extend(c.reasons)
    return calls


@pytest.mark.parametrize("fan_out", [1, 2], ids=["implicit-init", "explicit-init"])
def test_a_bolts_fail_reason_reaches_the_spout_through_the_acker(fan_out):
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=30, rand=rand())
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=30)
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand(8))
    kept = Tup(spout.on_spout_emit("kept", 1, now=0.0)[0])
    tuples = [Tup(a) for a in spout.on_spout_emit("m", fan_out, now=0.0)]
    bolt.on_fail(tuples[0], REASON)
    bolt.on_ack(kept)
    ledgers = {SPOUT: spout, ACKER: acker, BOLT: bolt}
    calls = _deliver_all(ledgers, ledgers)
    assert (calls.acks, calls.fails, calls.reasons) == (["kept"], ["m"], [REASON])
    assert acker.failed == 1 and not acker.trees and spout.pending == 0


def test_with_ackers_in_spouts_a_bolts_fail_goes_straight_to_its_spout_with_the_reason():
    spouts = (4, 5)
    sp = {t: SpoutLedger(t, spouts, spouts, own_trees=True, timeout_s=30, rand=rand(t))
          for t in spouts}
    bolt = BoltLedger(spouts, spouts, ackers_in_spouts=True, rand=rand(8))
    tup = Tup(sp[5].on_spout_emit("m", 1, now=0.0)[0])
    bolt.on_fail(tup, REASON)
    assert msgs(bolt) == {(5, ACK_FAIL): [tup.anchors[0], REASON]}
    bolt.on_fail(Tup(sp[5].on_spout_emit("n", 1, now=0.0)[0]))  # no reason: None
    calls = _deliver_all({BOLT: bolt}, sp)
    assert calls.fails == ["n"] and calls.reasons == [None]


def test_the_acker_answers_with_the_first_reason_a_tree_failed_with():
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=30)
    acker.on_system_message(BOLT, ACK_ACK, [11, 5], now=0.0)  # before the init: waits
    acker.on_system_message(BOLT, ACK_FAIL, [11, "first"], now=0.1)
    acker.on_system_message(BOLT + 1, ACK_FAIL, [11, "second"], now=0.1)
    assert acker.take_messages() == []  # no spout known yet
    acker.on_system_message(SPOUT, ACK_INIT, [11, 7], now=0.2)
    assert msgs(acker) == {(SPOUT, ACKER_FAILED): [11, "first"]}


def test_a_timeout_fails_with_the_reason_timeout():
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=10, rand=rand())
    spout.on_spout_emit("a", 1, now=0.0)
    calls = spout.expire(now=10.5)
    assert calls.fails == ["a"] and calls.reasons == [TIMEOUT_REASON] == ["timeout"]


def test_roots_failed_by_the_task_itself_carry_their_reason():
    """An overflow cap's drop (the default reason) or a tuple the codec could not carry:
    through the acker, or with ackers in spouts the spout's own trees at its next expire."""
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    bolt.fail_roots([11, 12])
    bolt.fail_roots([13], "could not serialise: cannot serialise a Foo")
    assert msgs(bolt) == {(ACKER, ACK_FAIL): [11, OVERFLOW_REASON, 12, OVERFLOW_REASON,
                                              13, "could not serialise: cannot serialise a Foo"]}
    own = SpoutLedger(SPOUT, [SPOUT], [SPOUT], own_trees=True, timeout_s=0, rand=rand())
    root = own.on_spout_emit("m", 1, now=0.0)[0][0]
    own.fail_roots([root, 999], "could not serialise: x")
    # nothing leaves, and the tree stays pending (its spout must not end without it)
    assert own.take_messages() == [] and own.pending == 1
    calls = own.expire(now=0.1)  # (no timeout: the fails due still leave)
    assert calls.fails == ["m"] and calls.reasons == ["could not serialise: x"]
    assert own.pending == 0 and own.unknown_acks == 1
    assert own.expire(now=0.2).fails == []


def test_a_reason_is_cut_and_one_not_a_str_makes_the_message_malformed():
    bolt = BoltLedger([ACKER], [SPOUT], ackers_in_spouts=False, rand=rand())
    bolt.on_fail(Tup([11, 5]), "x" * 10_000)
    ((_, _, values),) = bolt.take_messages()
    assert len(values[1]) == MAX_REASON_CHARS and values[1].endswith("...")
    acker = AckerLedger([ACKER], [SPOUT], timeout_s=30)
    acker.on_system_message(BOLT, ACK_FAIL, [11, {"not": "a str"}], now=0.0)
    acker.on_system_message(BOLT, ACK_FAIL, [12], now=0.0)  # a root without its reason
    assert acker.bad_messages == 2 and acker.take_messages() == []
    spout = SpoutLedger(SPOUT, [ACKER], [SPOUT], own_trees=False, timeout_s=30, rand=rand())
    root = spout.on_spout_emit("m", 2, now=0.0)[0][0]
    assert spout.on_system_message(ACKER, ACKER_FAILED, [root, 3], now=0.0).fails == []
    assert spout.bad_messages == 1 and spout.pending == 1
