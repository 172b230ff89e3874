"""The acker task's side of acking: one XOR value per tuple tree (Storm's ``Acker`` bolt),
a pure ledger like the others in actors/_acking.py (no Ray, no threads, no clock)."""

from __future__ import annotations

from collections.abc import Iterable

from actors._acking import (
    _MALFORMED,
    _NO_CALLS,
    UserCalls,
    _fail_pairs,
    _Ledger,
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
)


class AckerTree:
    """One tree in an acker's table (Storm's ``Acker`` keeps the same per root)."""

    __slots__ = ("xor", "spout", "started", "failed", "reason")

    def __init__(self, xor: int, spout: int, started: float) -> None:
        self.xor = xor
        self.spout = spout  # the spout task to answer (-1 until its ACK_INIT arrives)
        self.started = started  # start or last reset (monotonic s)
        self.failed = False
        self.reason: str | None = None  # the first fail's reason


class AckerLedger(_Ledger):
    """Storm's ``Acker``: the XOR value of each tree, answered to its spout at 0 or on a
    fail. Trees are kept oldest first (a reset moves one to the end).

    Args:
        ackers: the acker tasks.
        spout_tasks: every spout task, sorted (to read implicit-init roots).
        timeout_s: ``topology.message.timeout.secs``: trees older are forgotten (their
            spout times them out itself).
    """

    def __init__(self, ackers: Iterable[int], spout_tasks: Iterable[int],
                 timeout_s: float) -> None:
        super().__init__(ackers, spout_tasks, lambda bits: 0)
        self.timeout_s = timeout_s
        self.trees: dict[int, AckerTree] = {}
        #: trees answered as complete / failed
        self.acked = 0
        self.failed = 0

    @property
    def pending(self) -> int:  # trees in the table
        return len(self.trees)

    def on_system_message(self, src: int, stream: int, values: list,
                          now: float) -> UserCalls:
        """An acking message from task ``src``; the answers to spouts are held (see
        :meth:`take_messages`). Malformed messages are counted in ``bad_messages``."""
        try:
            if stream == ACK_INIT or stream == ACK_ACK:
                if len(values) % 2:
                    raise IndexError("ACK_INIT/ACK_ACK values are [root, xor, ...] pairs")
                pairs = zip(values[::2], values[1::2], strict=True)
                if stream == ACK_INIT:
                    if src < 0:
                        raise TypeError("ACK_INIT from a system task")
                    self._init(src, pairs, now)
                else:
                    self._ack(pairs, now)
            elif stream == ACK_FAIL:
                for root, reason in _fail_pairs(values):
                    t = self.trees.get(root)
                    if t is None:
                        t = self.trees[root] = AckerTree(
                            0, implicit_init_spout(root, self.spout_tasks), now)
                    if not t.failed:
                        t.failed, t.reason = True, reason
                    if t.spout >= 0:
                        self._done(root, t)
            elif stream == ACK_RESET:
                self._reset(values, now)
            else:
                raise ValueError(f"acking stream {stream} is not for an acker")
        except _MALFORMED:
            self.bad_messages += 1
        return _NO_CALLS

    def _init(self, src: int, pairs, now: float) -> None:
        trees = self.trees
        for root, v in pairs:
            t = trees.get(root)
            if t is None:  # the usual: the init comes first
                t = trees[root] = AckerTree(v ^ 0, src, now)  # (^ 0: an int)
                if v == 0:  # an emit to no task: complete at once
                    self._done(root, t)
                continue
            t.xor ^= v
            t.spout = src
            if t.xor == 0 or t.failed:
                self._done(root, t)

    def _ack(self, pairs, now: float) -> None:
        trees, spouts = self.trees, self.spout_tasks
        for root, v in pairs:
            t = trees.get(root)
            if t is None:  # an implicit init, or an ack before the init
                spout = implicit_init_spout(root, spouts)
                if v == 0 and spout >= 0:  # a whole tree in one ack: no entry
                    self._answer(spout, root, None)
                    continue
                trees[root] = AckerTree(v ^ 0, spout, now)
                continue
            t.xor ^= v
            if t.xor == 0 and t.spout >= 0:  # (a failed tree with its spout is gone)
                self._done(root, t)

    def _reset(self, roots: list, now: float) -> None:
        trees = self.trees
        for root in roots:
            t = trees.pop(root, None)
            if t is None:
                spout = implicit_init_spout(root, self.spout_tasks)
                if spout < 0:
                    continue
                t = AckerTree(0, spout, now)  # an implicit init: the tree is pending
            t.started = now
            trees[root] = t  # now the newest: the dict stays in time order
            if t.spout >= 0:
                self._hold(t.spout, ACKER_RESET).append(root)
                self.held_values += 1

    def _done(self, root: int, t: AckerTree) -> None:
        del self.trees[root]
        self._answer(t.spout, root, t if t.failed else None)

    def _answer(self, spout: int, root: int, failed: AckerTree | None) -> None:
        """Answer ``spout``: the tree of ``root`` completed, or ``failed`` (its entry,
        for the reason)."""
        if failed is None:
            self.acked += 1
            self._hold(spout, ACKER_ACKED).append(root)
            self.held_values += 1
        else:
            self.failed += 1
            self._hold(spout, ACKER_FAILED).extend((root, failed.reason))
            self.held_values += 2

    def expire(self, now: float) -> UserCalls:
        """Forget trees older than the timeout at ``now`` (their spouts fail them)."""
        if self.timeout_s > 0:
            limit, trees = now - self.timeout_s, self.trees
            while trees:
                root = next(iter(trees))
                if trees[root].started >= limit:
                    break
                del trees[root]
        return _NO_CALLS
