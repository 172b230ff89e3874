"""Nexmark's three event types, with the field names of the specification.

The NEXMark benchmark (Tucker, Tufte, Papadimos and Maier, "NEXMark: A Benchmark for
Queries over Data Streams", 2010) models an online auction: people register, open
auctions and bid. Field names follow Apache Beam's Nexmark model
(``sdks/java/testing/nexmark``, ``model/Person.java``, ``Auction.java``, ``Bid.java``) and
the nexmark/nexmark Flink suite, whose ``Bid`` adds ``channel`` and ``url``.

Every id, price and time is an ``int`` (``int64`` in Parquet); times are epoch
milliseconds; text is ``str`` (UTF-8). Pure Python: Arrow is imported only by
:func:`arrow_schema`.
"""

from __future__ import annotations

from typing import NamedTuple


class Person(NamedTuple):
    """A person who registered (sells or bids): one in 50 events."""

    id: int
    name: str
    emailAddress: str
    creditCard: str
    city: str
    state: str
    dateTime: int  # epoch ms
    extra: str


class Auction(NamedTuple):
    """An auction opened by ``seller``: three in 50 events. ``initialBid`` and ``reserve``
    are prices in cents; the auction is open over ``[dateTime, expires]`` (epoch ms)."""

    id: int
    itemName: str
    description: str
    initialBid: int
    reserve: int
    dateTime: int
    expires: int
    seller: int
    category: int
    extra: str


class Bid(NamedTuple):
    """A bid of ``price`` cents by ``bidder`` on ``auction``: 46 in 50 events."""

    auction: int
    bidder: int
    price: int
    channel: str
    url: str
    dateTime: int
    extra: str


#: event kind → its record type; the kind is also the name of its stream and Parquet file
KINDS: dict[str, type[NamedTuple]] = {"person": Person, "auction": Auction, "bid": Bid}

#: the field names of each kind, in order
FIELDS: dict[str, tuple[str, ...]] = {k: tuple(t._fields) for k, t in KINDS.items()}

#: the fields that are text; every other field is an int64
TEXT_FIELDS = frozenset({"name", "emailAddress", "creditCard", "city", "state", "extra",
                         "itemName", "description", "channel", "url"})

#: the wall-clock emit stamp a spout carries after an event's own fields (epoch ms,
#: float): what the latency of a paced run is measured from; never written to Parquet
EMIT_TIME = "emitTime"


def arrow_schema(kind: str):
    """The ``pyarrow.Schema`` of ``kind`` (``person``, ``auction`` or ``bid``): ``int64``
    for ids, prices and times, ``string`` for text, no nulls.

    Raises:
        KeyError: an unknown kind.
    """
    import pyarrow as pa

    return pa.schema([pa.field(f, pa.string() if f in TEXT_FIELDS else pa.int64(),
                               nullable=False) for f in FIELDS[kind]])
