"""What the executor loops call into checkpointing: :func:`poll_chain` (one call per loop
pass) and the rollback's helpers that touch the executor's queue and ledger (its thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors._streams import EOS_STREAM, FLUSH

if TYPE_CHECKING:  # (actors/_executor.py imports this module: no cycle at run time)
    from actors._executor import ExecutorCore
    from actors._inbound import Inbound
    from backpressure import JCQueue

#: the end markers a rollback keeps: an end of stream, which comes only after the final
#: checkpoint committed (a rollback after it, a task restarted then, restores that one);
#: an end-of-data marker (DRAINED) is dropped, and the rewound upstream sends it again
_MARKERS = (EOS_STREAM,)


def drop_queued(queue: JCQueue, inbound: Inbound) -> list:
    """A rollback: empty ``queue`` (receive queue and overflow) under the inbound side's
    insert lock, so no frame of an older epoch enters after; returns the end markers it
    held and those of frames dropped on arrival (an upstream that ended stays ended; only
    ends of streams are kept, see :data:`_MARKERS`)."""
    markers = []

    def drop(el) -> None:
        if el is not FLUSH and el[1] in _MARKERS:
            markers.append(el)
    with inbound.fill_lock:
        while queue.size() or not queue.is_empty_overflow():
            if not queue.consume(drop):
                break
    markers.extend(inbound.take_kept_markers())
    return markers


#: what :func:`poll_chain` tells the executor loop: go on; end the stream (the final
#: checkpoint committed, or was restored); a spout's position was restored (rewound)
GO, END, REWOUND = 0, 1, 2


def poll_chain(host: ExecutorCore, cores: tuple) -> int:
    """The executor loops' one call into checkpointing (the host's executor thread):
    apply what is queued for ``cores`` (a host and the tasks chained into it, sharing its
    inbox: coordinator messages, a restarted task's start); while any of them is paused
    (a rollback, a restore, an ask) wait here for the resume or a stop, the machines'
    clock running (their reports again every ``PAUSED_REPORT_S``). Returns
    :data:`GO`, :data:`END` or :data:`REWOUND` (the host's spout)."""
    cp = host.checkpoint
    inbox = cp.inbox
    if inbox or cp.machine.paused or (len(cores) > 1 and any(
            c.checkpoint.machine.paused for c in cores)):
        while True:
            if inbox:
                for tcp, kind, args in _superseded_dropped(inbox):
                    if tcp.core.state == "running":
                        tcp.apply(kind, args)
            paused = [c.checkpoint for c in cores
                      if c.state == "running" and c.checkpoint.machine.paused]
            if host._stop or not paused:
                break
            host.wakeup.wait(0.05)
            host.wakeup.clear()
            for tcp in paused:
                tcp.on_clock()
    if cp.machine.final and host.final_committed():
        return END
    if cp.rewound:
        cp.rewound = False
        return REWOUND
    return GO


def _superseded_dropped(inbox) -> list:
    """Take everything queued in ``inbox``, without the rollbacks a later rollback of the
    same task supersedes (each would be a full restore; a task behind on its rollbacks
    never catches up otherwise)."""
    items = []
    while inbox:
        items.append(inbox.popleft())
    last = {}
    for i, (tcp, kind, _) in enumerate(items):
        if kind == "rollback":
            last[id(tcp)] = i
    return [it for i, it in enumerate(items)
            if it[1] != "rollback" or last[id(it[0])] == i]


def clear_ledger(ledger) -> None:
    """Forget every tree and held acking value of a task's ledger (a rollback)."""
    if ledger is None:
        return
    ledger.take_messages()
    for name in ("trees", "acks_due", "fails_due"):
        v = getattr(ledger, name, None)
        if v is not None:
            v.clear()
