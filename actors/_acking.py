"""Acking as a pure ledger: Storm's XOR tuple trees, with no Ray, no threads and no clock.

Storm's at-least-once algorithm (Storm docs, "Guaranteeing Message Processing"; Storm's
``Acker`` and output collectors): every tuple of a spout tuple's tree carries, per root id,
a random 63-bit edge id; each edge id is XORed into the root's value twice (once when the
tuple is emitted, once when it is acked), so the tree is complete when the root's value
returns to 0. The acker tasks keep those values; a spout keeps its pending trees for
``topology.max.spout.pending`` and ``topology.message.timeout.secs``.

The executor feeds events in and carries out what comes out, in the manner of Dask's
``distributed.worker_state_machine``:

* events: :meth:`SpoutLedger.on_spout_emit`, :meth:`BoltLedger.on_emit`,
  :meth:`BoltLedger.on_ack`, :meth:`BoltLedger.on_fail`,
  :meth:`BoltLedger.on_reset_timeout`, ``on_system_message`` (an acking message that
  arrived), ``expire(now)``; ``now`` is always passed in (monotonic seconds);
* out: acking messages to send (:meth:`take_messages`, ``(dest task, stream, values)``) and
  user calls to make (:class:`UserCalls`: the spout's ``ack``/``fail`` with each msg id,
  and each fail's reason).

A fail carries its reason from where it happened to the spout (``topology.max.replays``
puts it into the dead letter of a tuple that fails for good): ``ACK_FAIL`` and
``ACKER_FAILED`` values are ``[root, reason, root, reason, ...]`` pairs, ``reason`` a short
str (at most :data:`MAX_REASON_CHARS`) or None; an acker keeps the first reason a tree
failed with. A timeout's reason is :data:`TIMEOUT_REASON`. Fails are rare: the ack path
carries nothing more.

Departures from Storm, each cutting acking messages (benchmarks/acking.py counts frames per
1000 tuples): batched acking values, implicit init (:func:`implicit_init_spout`), ack
piggybacking (:meth:`BoltLedger.fold_ack`), completion at the bolt
(:meth:`BoltLedger.on_ack`) and ackers in spouts (``topology.acker.in.spouts``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from actors._streams import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    ACKER_ACKED,
    ACKER_FAILED,
    ACKER_RESET,
)

#: Acking values held before they must leave (the executor also sends them at each flush
#: and whenever it idles): one message per root made acking cost as much as the data,
#: benchmarks/acking.py.
ACK_BATCH_VALUES = 1024
#: Bit 62 of a root id: the tree's spout sent no ACK_INIT (it emitted to one task, with edge
#: id 0); bits 47-61 give the spout's index among the topology's spout tasks.
IMPLICIT_INIT = 1 << 62
MAX_IMPLICIT_SPOUTS = 1 << 15  # spout tasks an implicit-init root can name (15 bits)

#: Positions in a spout's pending-tree tuple (see SpoutLedger)
MSG_ID, EMITTED_AT, XOR = 0, 1, 2

#: Errors a malformed acking message raises inside a ledger (counted, never propagated)
_MALFORMED = (TypeError, IndexError, KeyError, ValueError)

#: The reason of a tree that timed out (``topology.message.timeout.secs``)
TIMEOUT_REASON = "timeout"
#: The reason of a tree whose tuple was dropped at ``topology.executor.overflow.limit``
OVERFLOW_REASON = "dropped at the overflow limit"
#: A fail's reason is cut to this many characters (it rides in an acking message)
MAX_REASON_CHARS = 500


def wire_reason(reason: object) -> str | None:
    """``reason`` as it travels: a str cut to :data:`MAX_REASON_CHARS`, or None.

    Raises:
        TypeError: neither a str nor None (a malformed acking value).
    """
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise TypeError(f"a fail's reason is a str or None, got {type(reason).__name__}")
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS - 3] + "..."


def _fail_pairs(values: list):
    """``(root, reason)`` of ``[root, reason, ...]`` ACK_FAIL / ACKER_FAILED values.

    Raises:
        IndexError: an odd number of values. TypeError: a reason not a str or None.
    """
    if len(values) % 2:
        raise IndexError("ACK_FAIL/ACKER_FAILED values are [root, reason, ...] pairs")
    return [(root, wire_reason(r)) for root, r in zip(values[::2], values[1::2], strict=True)]


class UserCalls(NamedTuple):
    """A spout's user calls to make: ``ack(msg_id)`` for each of ``acks``, then
    ``fail(msg_id)`` for each of ``fails`` (Storm's ``ISpout.ack`` / ``fail``), the i-th
    fail for the reason ``reasons[i]`` (a str, or None: unknown; missing entries are None).
    """

    acks: list
    fails: list
    reasons: list = ()  # type: ignore[assignment]


def implicit_init_spout(root: int, spout_tasks: tuple[int, ...]) -> int:
    """The spout task named by an implicit-init ``root`` (-1 for any other root).

    Storm's spout sends ``__ack_init`` (root, XOR of its edge ids) so the acker learns the
    tree and its spout task. Here a spout emit to exactly one task (the usual: shuffle,
    fields, local grouping) sends none: the child's edge id is 0 (the init and the child's
    own contribution would cancel) and the root carries the spout (:data:`IMPLICIT_INIT`,
    then the spout's index among ``spout_tasks``). No proper subset of a tree's acks XORs
    to 0 (each non-zero edge id appears in exactly two acks), so an acker may create the
    entry at the first ack and complete it at 0.

    Raises:
        IndexError: the root names no spout task (a malformed root).
    """
    if not root & IMPLICIT_INIT:
        return -1
    return spout_tasks[(root ^ IMPLICIT_INIT) >> 47]


class _Ledger:
    """The acking values a task holds before they leave, per (destination, stream).

    With one acker (the default for one worker) ``ACK_INIT`` and ``ACK_ACK`` values wait in
    two plain lists instead (no lookup per tuple).
    """

    def __init__(self, ackers: Iterable[int], spout_tasks: Iterable[int],
                 rand: Callable[[int], int]) -> None:
        self.ackers = tuple(ackers)
        self.spout_tasks = tuple(spout_tasks)
        self.rand = rand  # rand(bits): a random int of ``bits`` bits (Random.getrandbits)
        self.one_acker = self.ackers[0] if len(self.ackers) == 1 else None
        self._held: dict[tuple[int, int], list] = {}
        self._inits: list = []
        self._acks: list = []
        #: acking values held in all (the executor sends at ACK_BATCH_VALUES)
        self.held_values = 0
        self.bad_messages = 0  # malformed acking messages (counted, dropped)
        self.unknown_acks = 0

    def _hold(self, dest: int, stream: int) -> list:
        key = (dest, stream)
        lst = self._held.get(key)
        if lst is None:
            lst = self._held[key] = []
        return lst

    def _to_acker(self, stream: int, root: int, value: int | None = None) -> None:
        """Hold ``root`` (and ``value``, for ACK_INIT / ACK_ACK) for the acker of ``root``
        (Storm's fields grouping on the root id)."""
        if self.one_acker is not None and (stream == ACK_INIT or stream == ACK_ACK):
            lst = self._inits if stream == ACK_INIT else self._acks
        else:
            lst = self._hold(self.ackers[root % len(self.ackers)], stream)
        if value is None:
            lst.append(root)
            self.held_values += 1
        else:
            lst += (root, value)
            self.held_values += 2

    @property
    def messages_due(self) -> bool:
        """True once ``ACK_BATCH_VALUES`` acking values are held: send them now."""
        return self.held_values >= ACK_BATCH_VALUES

    def take_messages(self) -> list[tuple[int, int, list]]:
        """The acking messages held, as ``(dest task, stream, values)``, and forget them."""
        if not self.held_values:
            return []
        held, self._held, self.held_values = self._held, {}, 0
        if self._inits:
            held[(self.one_acker, ACK_INIT)], self._inits = self._inits, []
        if self._acks:
            held[(self.one_acker, ACK_ACK)], self._acks = self._acks, []
        self._take_more(held)
        return [(d, s, v) for (d, s), v in held.items() if v]

    def _take_more(self, held: dict) -> None:
        """A subclass adds what it holds elsewhere to ``held``."""

    def _fail_to_acker(self, root: int, reason: str | None) -> None:
        """Hold ``[root, reason]`` on ``ACK_FAIL`` for the acker of ``root``."""
        self._hold(self.ackers[root % len(self.ackers)], ACK_FAIL).extend((root, reason))
        self.held_values += 2

    def fail_roots(self, roots: Iterable[int], reason: str | None = OVERFLOW_REASON) -> None:
        """Fail the trees ``roots`` for ``reason``: their tuples were dropped (at an
        overflow cap, the default reason) or could not be sent (``"could not serialise:
        ..."``). Executor thread only, as every other event."""
        reason = wire_reason(reason)
        for r in roots:
            self._fail_to_acker(r, reason)


class SpoutLedger(_Ledger):
    """A spout task's pending trees (Storm's ``pending`` RotatingMap in SpoutExecutor).

    :attr:`trees` maps each pending root id to ``(msg_id, emitted_at)``, or with
    ``own_trees`` ``(msg_id, emitted_at, xor)`` (read through :data:`MSG_ID`,
    :data:`EMITTED_AT`, :data:`XOR`): ``emitted_at`` is the emit or last reset time
    (monotonic s), and the dict is kept oldest first (a reset moves a tree to the end), so
    :meth:`expire` stops at the first tree still in time. A plain tuple, not a record: one
    is made per spout tuple, where a record object or a second dict was measurably slower
    (benchmarks/acking_stages.py, spout stages).

    Args:
        task_id: this spout task.
        ackers: the acker tasks (empty: no acking; with ``own_trees``, the spout tasks).
        spout_tasks: every spout task of the topology, sorted.
        own_trees: this spout tracks its own trees' XOR (``topology.acker.in.spouts``).
        timeout_s: ``topology.message.timeout.secs`` (0: never).
        rand: ``rand(bits)`` for root and edge ids.
    """

    def __init__(self, task_id: int, ackers: Iterable[int], spout_tasks: Iterable[int],
                 own_trees: bool, timeout_s: float, rand: Callable[[int], int]) -> None:
        super().__init__(ackers, spout_tasks, rand)
        self.own_trees = own_trees
        self.timeout_s = timeout_s
        #: pending trees: root id → (msg_id, emitted_at[, xor]), oldest first
        self.trees: dict[int, tuple] = {}
        #: without ackers: msg ids to ack once ``next_tuple`` returns
        self.acks_due: list = []
        #: with ``own_trees``: trees this task failed itself (:meth:`fail_roots`), as
        #: ``(root, reason)``; they stay pending until the next :meth:`expire` fails them
        self.fails_due: list = []
        self.timeouts = 0
        self.complete_latencies_ms: deque = deque(maxlen=1000)
        # root = rand(root_bits) * root_mod + own_index (root_mod if that is 0): with acker
        # executors a plain random 62-bit id (mod 1; bit 62 is IMPLICIT_INIT); in spouts,
        # root % len(ackers) names this task, so the bolts' acks come straight back here
        self.own_index = self.ackers.index(task_id) if own_trees else 0
        self.root_mod = len(self.ackers) if own_trees else 1
        self.root_bits = 63 - self.root_mod.bit_length() if own_trees else 62
        #: with acker executors, an emit to one task sends no ACK_INIT: its root is
        #: IMPLICIT_INIT | spout index << 47 | 47 random bits (None: not such a spout)
        spouts = self.spout_tasks
        self.implicit_root = (
            IMPLICIT_INIT | spouts.index(task_id) << 47
            if self.ackers and not own_trees and len(spouts) <= MAX_IMPLICIT_SPOUTS
            else None)

    @property
    def pending(self) -> int:
        """Trees in flight (what ``topology.max.spout.pending`` caps)."""
        return len(self.trees)

    def on_spout_emit(self, msg_id: Any, n_targets: int, now: float) -> list[list[int]] | None:
        """A spout emit with ``msg_id`` to ``n_targets`` tasks: the anchors of each target's
        tuple (``[root, edge id]``), or None without ackers (the tuple is untracked and
        ``msg_id`` is acked once ``next_tuple`` returns, see :meth:`take_acks_due`).

        The tree starts pending at ``now``; the acker gets Storm's ``__ack_init`` (root, XOR
        of the edge ids) unless the init is implicit or this spout is its own acker.
        """
        if n_targets == 1 and (self.implicit_root is not None or self.own_trees):
            return [self.on_spout_emit_one(msg_id, now)]
        if not self.ackers:
            self.acks_due.append(msg_id)
            return None
        rand = self.rand
        root = rand(self.root_bits) * self.root_mod + self.own_index or self.root_mod
        xor = 0
        anchors = []
        for _ in range(n_targets):
            e = rand(63) or 1
            xor ^= e
            anchors.append([root, e])
        if not self.own_trees:
            self.trees[root] = (msg_id, now)
            self._to_acker(ACK_INIT, root, xor)
        elif xor:  # no message: the tree's XOR starts here
            self.trees[root] = (msg_id, now, xor)
        else:  # emitted to no task: the tree is complete
            self.acks_due.append(msg_id)
        return anchors

    def on_spout_emit_one(self, msg_id: Any, now: float) -> list[int] | None:
        """:meth:`on_spout_emit` to one task (the usual case): that task's anchors, or None
        without ackers."""
        if self.implicit_root is not None:  # no ACK_INIT
            root = self.implicit_root | self.rand(47)
            self.trees[root] = (msg_id, now)
            return [root, 0]
        if self.own_trees:  # no message: the tree's XOR starts here
            rand = self.rand
            root = rand(self.root_bits) * self.root_mod + self.own_index or self.root_mod
            e = rand(63) or 1
            self.trees[root] = (msg_id, now, e)
            return [root, e]
        anchors = self.on_spout_emit(msg_id, 1, now)
        return None if anchors is None else anchors[0]

    def take_acks_due(self) -> list:
        """Msg ids complete at emit (no ackers, or an emit to no task): ack them now."""
        due, self.acks_due = self.acks_due, []
        return due

    def fail_roots(self, roots: Iterable[int], reason: str | None = OVERFLOW_REASON) -> None:
        """As :meth:`_Ledger.fail_roots`; with ``own_trees`` this task is the acker of its
        roots, so their trees fail at the next :meth:`expire`, which makes the spout's
        user calls (this is called from inside a send, where none are made). Until then
        they stay pending, so the spout cannot end its stream without them."""
        if not self.own_trees:
            super().fail_roots(roots, reason)
            return
        reason = wire_reason(reason)
        self.fails_due.extend((root, reason) for root in roots)

    def on_system_message(self, src: int, stream: int, values: list,
                          now: float) -> UserCalls:
        """An acking message for this spout: the acker's answers (``ACKER_*``), or with
        ``own_trees`` the bolts' ``ACK_ACK``/``ACK_FAIL``/``ACK_RESET_TIMEOUT``. Unknown
        roots (timed out, failed) are counted in ``unknown_acks``; a malformed message is
        counted in ``bad_messages``, keeping what was done before the bad value."""
        calls = UserCalls([], [], [])
        try:
            if stream == ACKER_ACKED:
                self._complete(values, now, calls)
            elif self.own_trees and stream == ACK_ACK:
                self._own_acks(values, now, calls)
            elif stream == ACKER_FAILED or (self.own_trees and stream == ACK_FAIL):
                self._fail(values, calls)
            elif stream == ACKER_RESET or (self.own_trees and stream == ACK_RESET):
                self._reset(values, now)
            else:
                raise ValueError(f"acking stream {stream} is not for a spout")
        except _MALFORMED:
            self.bad_messages += 1
        return calls

    def _complete(self, roots: list, now: float, calls: UserCalls) -> None:
        pop, lat, acks = self.trees.pop, self.complete_latencies_ms, calls.acks
        unknown = 0
        try:
            for root in roots:
                tree = pop(root, None)
                if tree is None:
                    unknown += 1
                    continue
                lat.append((now - tree[EMITTED_AT]) * 1000.0)
                acks.append(tree[MSG_ID])
        finally:  # (a malformed root raises out of the loop: count what was done)
            self.unknown_acks += unknown

    def _fail(self, values: list, calls: UserCalls) -> None:
        """The trees of ``[root, reason, ...]`` fail now (an unknown root counts in
        ``unknown_acks``)."""
        trees = self.trees
        for root, reason in _fail_pairs(values):
            tree = trees.pop(root, None)
            if tree is None:
                self.unknown_acks += 1
            else:
                calls.fails.append(tree[MSG_ID])
                calls.reasons.append(reason)

    def _reset(self, roots: list, now: float) -> None:
        """The timeouts of trees ``roots`` restart at ``now`` (unknown roots are ignored)."""
        trees = self.trees
        for root in roots:
            tree = trees.pop(root, None)
            if tree is not None:  # re-inserted: now the newest
                trees[root] = (tree[MSG_ID], now, *tree[XOR:])

    def _own_acks(self, values: list, now: float, calls: UserCalls) -> None:
        """The acker's work for this spout's own trees: ACK_ACK values XOR into the tree's
        value and complete it at 0."""
        if len(values) % 2:
            raise IndexError("ACK_ACK values are [root, xor, ...] pairs")
        trees = self.trees
        complete, unknown = [], 0
        try:
            for root, v in zip(values[::2], values[1::2], strict=True):
                tree = trees.get(root)
                if tree is None:
                    unknown += 1
                    continue
                x = tree[XOR] ^ v
                if x:
                    trees[root] = (tree[MSG_ID], tree[EMITTED_AT], x)
                else:
                    complete.append(root)
        finally:  # complete what was done, as the acker's answer would
            self.unknown_acks += unknown
            self._complete(complete, now, calls)

    def expire(self, now: float) -> UserCalls:
        """Fail the trees pending longer than the timeout at ``now`` (Storm's "TIMEOUT",
        reason :data:`TIMEOUT_REASON`), after the trees failed here since the last call
        (:attr:`fails_due`)."""
        calls = UserCalls([], [], [])
        if self.fails_due:
            due, self.fails_due = self.fails_due, []
            self._fail([x for pair in due for x in pair], calls)
        if self.timeout_s <= 0:
            return calls
        limit, trees = now - self.timeout_s, self.trees
        while trees:
            root = next(iter(trees))
            if trees[root][EMITTED_AT] >= limit:
                break
            self.timeouts += 1
            calls.fails.append(trees.pop(root)[MSG_ID])
            calls.reasons.append(TIMEOUT_REASON)
        return calls


class BoltLedger(_Ledger):
    """A bolt task's side of acking: the edge ids of its emits, and its acks and fails.

    Args:
        ackers: the acker tasks (or the spout tasks, with ``topology.acker.in.spouts``).
        spout_tasks: every spout task, sorted.
        ackers_in_spouts: the spouts are the ackers (no completion at the bolt: they need
            no such shortcut).
        rand: ``rand(bits)`` for edge ids.
    """

    def __init__(self, ackers: Iterable[int], spout_tasks: Iterable[int],
                 ackers_in_spouts: bool, rand: Callable[[int], int]) -> None:
        super().__init__(ackers, spout_tasks, rand)
        #: roots of the one-ack trees this bolt completed and has not sent yet, by
        #: ``root >> 47``: the implicit-init prefix naming the spout
        self._completed: dict[int, list] = (
            {(IMPLICIT_INIT | i << 47) >> 47: [] for i in range(len(self.spout_tasks))}
            if self.ackers and not ackers_in_spouts
            and len(self.spout_tasks) <= MAX_IMPLICIT_SPOUTS else {})
        self.folded_acks = 0  # acks carried by a child's edge (ack piggybacking)
        self.completed_trees = 0  # one-ack trees completed here, told to their spout

    def on_emit(self, anchors: list, n_targets: int) -> list[list[int]]:
        """An emit anchored to the tracked tuples ``anchors``, to ``n_targets`` tasks: each
        target's anchors list (``[root, edge, root, edge, ...]``). Each target gets a new
        edge id per anchor, XORed into that anchor's ``ack_val`` and paired with each of
        its roots (Storm's ``BoltOutputCollectorImpl.boltEmit``)."""
        rand = self.rand
        out = []
        for _ in range(n_targets):
            child: dict[int, int] = {}
            for a in anchors:
                e = rand(63) or 1
                a.ack_val ^= e
                for root in a.anchors[::2]:
                    child[root] = child.get(root, 0) ^ e
            out.append([x for kv in child.items() for x in kv])
        return out

    def on_emit_one(self, anchor: Any) -> list[int]:
        """:meth:`on_emit` for one target of an emit anchored to one tracked tuple of one
        root (the usual case, e.g. ``auto_ack``; one call per target): that target's
        anchors ``[root, edge]``."""
        e = self.rand(63) or 1
        anchor.ack_val ^= e
        return [anchor.anchors[0], e]

    def fold_ack(self, tup: Any, child_anchors: list) -> None:
        """Ack piggybacking: ``tup`` (one root) is acked while its child, anchored by
        ``child_anchors`` (``[root, edge]``), still waits in its batch. ``tup``'s ack value
        XORs into the child's edge instead of leaving as its own message: the acker sees
        the same XOR total, one message later. Only the executor knows the child has not
        left; it must not call this once it has."""
        child_anchors[1] ^= tup.anchors[1] ^ tup.ack_val
        self.folded_acks += 1

    def on_ack(self, tup: Any) -> bool:
        """Storm's ``ack``: each root of the tracked ``tup`` gets ``edge ^ ack_val``
        (``__ack_ack``). A root's value of 0 with an implicit init completes its whole
        tree: it is held for its spout (``ACKER_ACKED``) and the acker never hears of it.
        Returns :attr:`messages_due`."""
        anchors, v = tup.anchors, tup.ack_val
        if self.one_acker is not None and len(anchors) == 2:  # the usual case
            root, x = anchors[0], anchors[1] ^ v
            if x or not self._complete_tree(root):
                self._acks += (root, x)
        else:
            acks, one = self.ackers, self.one_acker
            for i in range(0, len(anchors), 2):
                root, x = anchors[i], anchors[i + 1] ^ v
                if not x and self._complete_tree(root):
                    continue
                lst = self._acks if one is not None else self._hold(
                    acks[root % len(acks)], ACK_ACK)
                lst += (root, x)
        self.held_values += len(anchors)
        return self.held_values >= ACK_BATCH_VALUES

    def _complete_tree(self, root: int) -> bool:
        """If ``root`` has an implicit init, its tree is complete: hold it for its spout
        (True); else False (the acker must see the ack: an explicit init holds its own
        XOR). The caller adds to ``held_values``."""
        done = self._completed.get(root >> 47)
        if done is None:
            return False
        done.append(root)
        self.completed_trees += 1
        return True

    def _take_more(self, held: dict) -> None:
        for key, roots in self._completed.items():
            if roots:
                held[(implicit_init_spout(key << 47, self.spout_tasks), ACKER_ACKED)] = roots
                self._completed[key] = []

    def on_fail(self, tup: Any, reason: str | None = None) -> bool:
        """Storm's ``fail``: every root of ``tup`` fails now for ``reason`` (a short str,
        or None; ``__ack_fail``). Returns :attr:`messages_due`."""
        reason = wire_reason(reason)
        for root in tup.anchors[::2]:
            self._fail_to_acker(root, reason)
        return self.messages_due

    def on_reset_timeout(self, tup: Any) -> bool:
        """Storm's ``resetTimeout`` (``__ack_reset_timeout``). Returns :attr:`messages_due`."""
        for root in tup.anchors[::2]:
            self._to_acker(ACK_RESET, root)
        return self.messages_due


_NO_CALLS = UserCalls((), (), ())  # type: ignore[arg-type]
