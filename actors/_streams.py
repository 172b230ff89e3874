"""The system streams: wire indexes of the streams the runtime sends beside the user's.

User streams count up from 0 (``actors._routing.stream_table``); the system streams are
negative. The wire codec accepts down to ``actors._codec.MIN_STREAM_INDEX``: the tick
never travels.
"""

from __future__ import annotations

from enum import IntEnum


class SystemStream(IntEnum):
    """Wire indexes of the system streams (user streams count up from 0).

    One acking message carries many roots: ``ACK_INIT`` and ``ACK_ACK`` values are
    ``[root, xor, root, xor, ...]`` (``ACK_INIT``'s spout task is the sender),
    ``ACK_FAIL`` and ``ACKER_FAIL`` values ``[root, reason, root, reason, ...]`` (``reason``
    a short str or None: why the tree failed, see actors/_acking.py), the others
    ``[root, root, ...]``. :attr:`storm_name` gives Storm's stream id.
    """

    EOS = -1  #: end of stream (ours: Storm's streams never end)
    ACK_INIT = -2  #: spout → acker: a new tree and the XOR of its first edges
    ACK_ACK = -3  #: bolt → acker: a tuple acked (its edge XOR the edges of its children)
    ACK_FAIL = -4  #: bolt → acker: a tuple failed
    ACK_RESET_TIMEOUT = -5  #: bolt → acker: restart a tree's timeout
    ACKER_ACK = -6  #: acker → spout: the tree completed
    ACKER_FAIL = -7  #: acker → spout: the tree failed
    ACKER_RESET_TIMEOUT = -8  #: acker → spout: restart the tree's timeout
    DRAINED = -9  #: upstream → downstream: no new data follows, only replays (ours)
    BARRIER = -10  #: a checkpoint barrier, in line with the data (Flink's; ours)
    TICK = -11  #: the executor → itself: a tick tuple (never on the wire)

    @property
    def storm_name(self) -> str:
        """Storm's stream id (the acker's answers reuse the ids of the streams it takes)."""
        return _STORM_NAMES[self]


_STORM_NAMES = dict(zip(SystemStream, ["__eos", "__ack_init", "__ack_ack", "__ack_fail",
                                         "__ack_reset_timeout", "__ack_ack", "__ack_fail",
                                         "__ack_reset_timeout", "__drained", "__checkpoint",
                                         "__tick"],
                        strict=True))

# plain ints for the per-tuple paths and the wire (an IntEnum compares as its int)
EOS_STREAM = int(SystemStream.EOS)
DRAINED_STREAM = int(SystemStream.DRAINED)
TICK_STREAM = int(SystemStream.TICK)
BARRIER_STREAM = int(SystemStream.BARRIER)
ACK_INIT = int(SystemStream.ACK_INIT)
ACK_ACK = int(SystemStream.ACK_ACK)
ACK_FAIL = int(SystemStream.ACK_FAIL)
ACK_RESET = int(SystemStream.ACK_RESET_TIMEOUT)
ACKER_ACKED = int(SystemStream.ACKER_ACK)
ACKER_FAILED = int(SystemStream.ACKER_FAIL)
ACKER_RESET = int(SystemStream.ACKER_RESET_TIMEOUT)

#: the acking streams (Storm's ``__ack_*``): what a control receive queue takes from frames
ACKING_STREAMS = frozenset((ACK_INIT, ACK_ACK, ACK_FAIL, ACK_RESET, ACKER_ACKED, ACKER_FAILED,
                            ACKER_RESET))

#: The FlushTuple element (Storm 2.0's ``FlushTuple``, STORM-2306): one put into a task's
#: receive queue flushes its outbox when taken. Never on the wire.
FLUSH = ("__flush__",)
