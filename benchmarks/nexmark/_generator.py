"""A deterministic Nexmark event generator, written from the specification.

What it follows (Apache Beam's ``sdks/java/testing/nexmark``: ``Generator``,
``GeneratorConfig``, ``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``,
``NexmarkConfiguration``; and the nexmark/nexmark Flink suite's generator, whose bids add
``channel`` and ``url``):

* **The mix.** Event ``i`` is a person when ``i % 50 == 0``, an auction when
  ``i % 50`` is 1, 2 or 3, otherwise a bid (1 : 3 : 46).
* **Ids.** Person and auction ids count from 1000 in event order, so each is a function
  of the event id alone. An auction's seller and a bid's bidder are drawn from the last
  1,000 people (``numActivePeople``) plus 10 not yet created (the lead); a bid's auction
  from the last 100 auctions (``numInFlightAuctions``) plus 10 ahead. Hot ones: with
  probability ``1 - 1/hotSellersRatio`` (4) the seller is the first person of the
  current block of 100, with ``1 - 1/hotBiddersRatio`` (4) the bidder is its second, and
  with ``1 - 1/hotAuctionRatio`` (2) a bid goes to the first auction of the current block
  of 100 auctions.
* **Values.** Prices are log-uniform in [100, 10**8] cents (``nextPrice``; here 2**16
  steps of a table, ``_draw.PRICES``); categories 10..14; states and cities from the
  specification's short lists (so that q3 finds sellers in OR, ID and CA on small runs);
  ``extra`` pads an event to the average sizes (person 200, auction 500, bid 100 bytes,
  within +-20%); an auction runs for ``1 + U[0, 2h)`` ms, ``h`` being the event time
  until 100 more auctions exist.
* **Event time.** Event ``i`` happens at ``base_time + floor(i * 1e6 / rate)`` us, in ms
  (``interEventDelayUs = 1e6 / rate``); the base is 2015-07-15T00:00Z as in Beam.
* **Out of order** (off by default): with probability ``prob_delayed_event`` an event
  arrives ``1 + U[0, 1000 * occasional_delay_sec)`` ms of event time late: its
  ``dateTime`` is unchanged, it is emitted after the events whose time reaches its own
  plus that delay (Beam's held-back events, here in event time rather than wall-clock
  time, so that the order is reproducible). So no event arrives more than
  ``occasional_delay_sec`` behind the latest time seen before it.

Where it departs, and why:

* **Each event is a pure function of (seed, event id)**: every value of event ``i`` comes
  from its own counter-based draws ``u(seed, i, j)`` (SplitMix64, ``_draw``), the
  ``j``-th for a fixed field, so that one event costs no generator state and the columnar
  generator (``_columnar``) computes whole columns of the same events in numpy. Beam
  seeds a ``java.util.Random`` with the event id alone; the seed here lets one run differ
  from another. The values differ from Beam's, their distributions do not.
* **Parallel generators split the ids, on one timeline.** Beam splits the ids into
  contiguous ranges, each generator with its own clock. Here task ``k`` of ``n`` takes
  the blocks of 50 ids ``b`` with ``b % n == k``, each block keeping the 1 : 3 : 46 mix,
  and every event keeps the time its id gives it, so any split yields the same events
  and the tasks move through event time together.
* **Channel URLs** are a function of (seed, channel), not a table drawn once per
  process, so two processes agree.

Pure Python per event (numpy only for the tables the columnar generator shares): the
spout runs it in each task.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from benchmarks.nexmark import _draw
from benchmarks.nexmark._model import Auction, Bid, Person

#: 2015-07-15T00:00:00Z in epoch ms: Beam's Nexmark base time
BASE_TIME_MS = 1_436_918_400_000
#: events per second of event time (Nexmark's ``firstEventRate`` default)
DEFAULT_RATE = 10_000

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
#: the mix repeats every 50 event ids; also the block of ids a spout task takes at a time
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: people and auctions not yet created that a seller, bidder or bid may name
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
#: hot sellers, bidders and auctions are the first (bidders: second) of each block of ids
HOT_BLOCK = 100

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
             "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")
#: nexmark/nexmark's bid channels: half the bids come through one of these four
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
NUM_CHANNELS = 10_000

@dataclass(frozen=True)
class GeneratorConfig:
    """What the event stream depends on (Nexmark's ``NexmarkConfiguration`` names in
    brackets).

    Attributes:
        events: event ids ``0 .. events - 1``, all kinds counted (``numEvents``).
        seed: an int in ``[0, 2**64)``; the same seed gives the same events.
        rate: events per second of event time (``firstEventRate``); sets ``dateTime``
            only, not how fast anything runs.
        base_time: ``dateTime`` of event 0, epoch ms.
        occasional_delay_sec: the longest lateness of a delayed event, s
            (``occasionalDelaySec``).
        prob_delayed_event: the probability that an event is delayed
            (``probDelayedEvent``); 0 (the default) keeps event time in order.
        num_active_people, num_in_flight_auctions, hot_auction_ratio, hot_sellers_ratio,
            hot_bidders_ratio, avg_person_byte_size, avg_auction_byte_size,
            avg_bid_byte_size: Nexmark's defaults.

    Raises:
        ValueError: a non-positive ``events`` or ``rate``, a negative seed, base time or
            delay, or a probability outside [0, 1].
    """

    events: int
    seed: int = 0
    rate: int = DEFAULT_RATE
    base_time: int = BASE_TIME_MS
    occasional_delay_sec: int = 3
    prob_delayed_event: float = 0.0
    num_active_people: int = 1000
    num_in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100

    def __post_init__(self) -> None:
        for name in ("events", "rate"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("seed", "base_time", "occasional_delay_sec"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        if not 0.0 <= self.prob_delayed_event <= 1.0:
            raise ValueError(f"prob_delayed_event must be in [0, 1], got "
                             f"{self.prob_delayed_event!r}")
        if self.seed >= 1 << 64:
            raise ValueError(f"seed must be below 2**64, got {self.seed}")
        if self.events >= 1 << 63:
            raise ValueError(f"events must be below 2**63, got {self.events}")

    @property
    def delayed(self) -> bool:
        """True when some events arrive out of event-time order."""
        return self.prob_delayed_event > 0 and self.occasional_delay_sec > 0

    def timestamp(self, event_number: int) -> int:
        """``dateTime`` (epoch ms) of event ``event_number``."""
        return self.base_time + event_number * 1000 // self.rate


# -- ids, as functions of the event id (Nexmark's lastBase0PersonId and kin) --------------


def kind_of(event_id: int) -> str:
    """``"person"``, ``"auction"`` or ``"bid"``: the kind event ``event_id`` is."""
    rem = event_id % PROPORTION_DENOMINATOR
    if rem < PERSON_PROPORTION:
        return "person"
    return "auction" if rem < PERSON_PROPORTION + AUCTION_PROPORTION else "bid"


def last_person(event_id: int) -> int:
    """The newest person id (counted from 0) as of ``event_id``: its own for a person."""
    epoch, offset = divmod(event_id, PROPORTION_DENOMINATOR)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction(event_id: int) -> int:
    """The newest auction id (counted from 0) as of ``event_id``: its own for an auction;
    -1 before the first auction."""
    epoch, offset = divmod(event_id, PROPORTION_DENOMINATOR)
    if offset < PERSON_PROPORTION:
        return epoch * AUCTION_PROPORTION - 1
    return epoch * AUCTION_PROPORTION + min(offset - PERSON_PROPORTION,
                                            AUCTION_PROPORTION - 1)


# -- which ids a spout task takes ----------------------------------------------------------


def task_event_id(position: int, task: int, tasks: int) -> int:
    """The event id at ``position`` (0-based) of task ``task`` of ``tasks``: the task takes
    the blocks of 50 ids ``b`` with ``b % tasks == task``, in order."""
    block, offset = divmod(position, PROPORTION_DENOMINATOR)
    return (task + block * tasks) * PROPORTION_DENOMINATOR + offset


def task_event_count(events: int, task: int, tasks: int) -> int:
    """How many of the ids ``0 .. events - 1`` task ``task`` of ``tasks`` takes.

    Raises:
        ValueError: ``tasks`` < 1 or ``task`` outside ``[0, tasks)``.
    """
    if tasks < 1 or not 0 <= task < tasks:
        raise ValueError(f"task must be in [0, {tasks}) and tasks >= 1, got {task} of {tasks}")
    blocks = -(-events // PROPORTION_DENOMINATOR)
    mine = len(range(task, blocks, tasks))
    n = mine * PROPORTION_DENOMINATOR
    if mine and (blocks - 1) % tasks == task:  # the last block may be short
        n -= blocks * PROPORTION_DENOMINATOR - events
    return n


def _bit_reverse32(n: int) -> int:
    """Java's ``Math.abs(Integer.reverse(n))`` for 0 <= n < 2**31."""
    r = int(f"{n:032b}"[::-1], 2)
    return abs(r - (1 << 32) if r >= 1 << 31 else r)


def extra_size(u: float, current_size: int, average_size: int) -> int:
    """``extra``'s length from a unit draw: what brings an event of ``current_size``
    bytes to ``average_size`` on average, within +-20% (Nexmark's ``nextExtra``); 0 when
    it is already bigger."""
    if current_size > average_size:
        return 0
    want = average_size - current_size
    delta = int(want * 0.2 + 0.5)
    return want - delta + (int(u * 2 * delta) if delta else 0)


#: person draws: first and last name, email words' lengths and bytes, card, city, state
P_FIRST, P_LAST, P_EMAIL_LEN, P_DOMAIN_LEN, P_EMAIL, P_DOMAIN, P_CARD = 2, 3, 4, 5, 6, 7, 8
P_CITY, P_STATE, P_EXTRA_SIZE, P_EXTRA_AT = 12, 13, 14, 15
#: auction draws (the words' bytes last: item name 3 draws, description 13)
A_HOT_SELLER, A_SELLER, A_CATEGORY, A_INITIAL, A_EXPIRES, A_RESERVE = 2, 3, 4, 5, 6, 7
A_ITEM_LEN, A_DESC_LEN, A_EXTRA_SIZE, A_EXTRA_AT, A_ITEM, A_DESC = 8, 9, 10, 11, 12, 15
#: bid draws
B_HOT_AUCTION, B_AUCTION, B_HOT_BIDDER, B_BIDDER, B_PRICE, B_HOT_CHANNEL = 2, 3, 4, 5, 6, 7
B_CHANNEL, B_EXTRA_SIZE, B_EXTRA_AT = 8, 9, 10
#: the longest words: an email's name and domain, an item name, a description
EMAIL_MAX, DOMAIN_MAX, ITEM_MAX, DESC_MAX = 7, 5, 20, 100
#: a bid's size before ``extra`` (bytes, Nexmark's estimate)
BID_BASE_SIZE = 32


class NexmarkGenerator:
    """Makes the event of any id: ``event(i)`` depends on the config and ``i`` only, as a
    pure-Python function of the draws ``u(seed, i, j)`` (``_draw``); the columnar
    generator (``_columnar.ColumnarGenerator``) computes the same events a column at a
    time.

    Not thread-safe (the channel URLs are cached). Building one draws the ``extra`` pool
    (64 Ki letters) and the four hot channels' URLs; other channels' URLs are made when
    first used and kept (at most 10,000).
    """

    def __init__(self, config: GeneratorConfig) -> None:
        self.config = config
        self._skey = _draw.seed_key(config.seed)
        self._pool = _draw.pool(self._skey)
        self._hot_urls = tuple(_draw.url(_draw.event_key(self._skey, _draw.HOT_URL_ID - i))
                               for i in range(len(HOT_CHANNELS)))
        self._channel_urls: dict[int, str] = {}
        # the event time until ``num_in_flight_auctions`` more auctions exist, in events
        self._auction_horizon_events = (config.num_in_flight_auctions * PROPORTION_DENOMINATOR
                                        // AUCTION_PROPORTION)

    @property
    def pool(self) -> str:
        """The seed's ``extra`` pool (64 Ki letters); an ``extra`` is a slice of it."""
        return self._pool

    @property
    def hot_urls(self) -> tuple[str, ...]:
        """The URLs of :data:`HOT_CHANNELS`, in order."""
        return self._hot_urls

    def channel_url(self, channel: int) -> str:
        """The URL of ``channel-<channel>`` (0 <= channel < 10,000), a function of (seed,
        channel): nine in ten carry ``&channel_id=`` (nexmark/nexmark's bid URLs)."""
        url = self._channel_urls.get(channel)
        if url is None:
            key = _draw.event_key(self._skey, _draw.CHANNEL_ID + channel)
            url = _draw.url(key)
            if int(_draw.unit(_draw.draw(key, 6)) * 10) > 0:
                url += f"&channel_id={_bit_reverse32(channel)}"
            self._channel_urls[channel] = url
        return url

    def _extra(self, u_size: float, u_at: float, current_size: int, average_size: int) -> str:
        size = extra_size(u_size, current_size, average_size)
        start = int(u_at * (_draw.POOL_CHARS - size))
        return self._pool[start:start + size]

    def _person_id(self, u: float, newest: int) -> int:
        """A random active person id (from 0), up to the lead ahead of ``newest``."""
        people = newest + 1
        active = min(people, self.config.num_active_people)
        return people - active + int(u * (active + PERSON_ID_LEAD))

    def _auction_id(self, u: float, newest: int) -> int:
        """A random in-flight auction id (from 0), up to the lead ahead of ``newest``."""
        oldest = max(newest - self.config.num_in_flight_auctions, 0)
        return oldest + int(u * (newest - oldest + 1 + AUCTION_ID_LEAD))

    # -- the events: ``key`` is the event's key, ``u(j)`` its draw j as a unit float -----
    def _person(self, key: int, event_id: int, now: int) -> Person:
        draw, unit, word, length = _draw.draw, _draw.unit, _draw.word, _draw.word_length
        name = (f"{FIRST_NAMES[int(unit(draw(key, P_FIRST)) * len(FIRST_NAMES))]} "
                f"{LAST_NAMES[int(unit(draw(key, P_LAST)) * len(LAST_NAMES))]}")
        email = (f"{word(key, P_EMAIL, length(unit(draw(key, P_EMAIL_LEN)), EMAIL_MAX))}@"
                 f"{word(key, P_DOMAIN, length(unit(draw(key, P_DOMAIN_LEN)), DOMAIN_MAX))}"
                 f".com")
        card = " ".join(f"{int(unit(draw(key, P_CARD + i)) * 10_000):04d}" for i in range(4))
        city = US_CITIES[int(unit(draw(key, P_CITY)) * len(US_CITIES))]
        state = US_STATES[int(unit(draw(key, P_STATE)) * len(US_STATES))]
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        return Person(last_person(event_id) + FIRST_PERSON_ID, name, email, card, city, state,
                      now, self._extra(unit(draw(key, P_EXTRA_SIZE)), unit(draw(key, P_EXTRA_AT)),
                                       size, self.config.avg_person_byte_size))

    def _auction(self, key: int, event_id: int, now: int) -> Auction:
        cfg = self.config
        draw, unit, word, length = _draw.draw, _draw.unit, _draw.word, _draw.word_length
        newest_person = last_person(event_id)
        if int(unit(draw(key, A_HOT_SELLER)) * cfg.hot_sellers_ratio) > 0:
            seller = newest_person // HOT_BLOCK * HOT_BLOCK
        else:
            seller = self._person_id(unit(draw(key, A_SELLER)), newest_person)
        category = FIRST_CATEGORY_ID + int(unit(draw(key, A_CATEGORY)) * NUM_CATEGORIES)
        prices = _draw.PRICES
        initial_bid = prices[int(unit(draw(key, A_INITIAL)) * _draw.PRICE_STEPS)]
        horizon = cfg.timestamp(event_id + self._auction_horizon_events) - now
        expires = now + 1 + int(unit(draw(key, A_EXPIRES)) * max(2 * horizon, 1))
        item_name = word(key, A_ITEM, length(unit(draw(key, A_ITEM_LEN)), ITEM_MAX))
        description = word(key, A_DESC, length(unit(draw(key, A_DESC_LEN)), DESC_MAX))
        reserve = initial_bid + prices[int(unit(draw(key, A_RESERVE)) * _draw.PRICE_STEPS)]
        size = 8 + len(item_name) + len(description) + 40
        return Auction(last_auction(event_id) + FIRST_AUCTION_ID, item_name, description,
                       initial_bid, reserve, now, expires, seller + FIRST_PERSON_ID, category,
                       self._extra(unit(draw(key, A_EXTRA_SIZE)), unit(draw(key, A_EXTRA_AT)),
                                   size, cfg.avg_auction_byte_size))

    def _bid(self, key: int, event_id: int, now: int) -> Bid:
        cfg = self.config
        # SplitMix64 inlined (``_draw.mix64(key + (j + 1) * GOLDEN)``, top 53 bits): bids
        # are 92% of events, and a call per draw costs as much as the draw
        m, g, m1, m2, to_unit = _draw.MASK, _draw.GOLDEN, _draw._M1, _draw._M2, _draw._TO_UNIT
        u = []
        for j in range(B_HOT_AUCTION, B_EXTRA_AT + 1):
            z = (key + (j + 1) * g) & m
            z = ((z ^ (z >> 30)) * m1) & m
            z = ((z ^ (z >> 27)) * m2) & m
            u.append(((z ^ (z >> 31)) >> 11) * to_unit)
        u_hot_auction, u_auction, u_hot_bidder, u_bidder, u_price, u_hot_channel, \
            u_channel, u_size, u_at = u
        # last_auction and last_person of a bid (the last of its epoch's people and
        # auctions), the functions' bid case without the calls
        epoch = event_id // PROPORTION_DENOMINATOR
        newest_auction = epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
        newest_person = epoch * PERSON_PROPORTION + PERSON_PROPORTION - 1
        if int(u_hot_auction * cfg.hot_auction_ratio) > 0:
            auction = newest_auction // HOT_BLOCK * HOT_BLOCK
        else:
            auction = self._auction_id(u_auction, newest_auction)
        if int(u_hot_bidder * cfg.hot_bidders_ratio) > 0:
            bidder = newest_person // HOT_BLOCK * HOT_BLOCK + 1
        else:
            bidder = self._person_id(u_bidder, newest_person)
        price = _draw.PRICES[int(u_price * _draw.PRICE_STEPS)]
        if int(u_hot_channel * 2) > 0:
            i = int(u_channel * len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], self._hot_urls[i]
        else:
            n = int(u_channel * NUM_CHANNELS)
            channel, url = f"channel-{n}", self.channel_url(n)
        return Bid(auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID, price, channel, url,
                   now, self._extra(u_size, u_at, BID_BASE_SIZE, cfg.avg_bid_byte_size))

    def timed_event(self, event_id: int) -> tuple[Person | Auction | Bid, int]:
        """Event ``event_id`` and its delay in ms of event time (0 unless delayed).

        Raises:
            ValueError: ``event_id`` outside ``[0, config.events)``.
        """
        if not 0 <= event_id < self.config.events:
            raise ValueError(f"event id {event_id} outside [0, {self.config.events})")
        return self._timed_event(event_id)

    def _timed_event(self, event_id: int) -> tuple[Person | Auction | Bid, int]:
        cfg = self.config
        key = _draw.event_key(self._skey, event_id)
        now = cfg.base_time + event_id * 1000 // cfg.rate  # cfg.timestamp(event_id)
        rem = event_id % PROPORTION_DENOMINATOR
        if rem >= PERSON_PROPORTION + AUCTION_PROPORTION:
            event = self._bid(key, event_id, now)
        elif rem >= PERSON_PROPORTION:
            event = self._auction(key, event_id, now)
        else:
            event = self._person(key, event_id, now)
        return event, (self.delay(key) if cfg.delayed else 0)

    def delay(self, key: int) -> int:
        """The delay (ms of event time) of the event whose key is ``key``: 0, or with
        probability ``prob_delayed_event`` 1 .. ``1000 * occasional_delay_sec``. Its own
        draws, so delays change the order only, never an event's fields."""
        cfg = self.config
        if _draw.unit(_draw.draw(key, _draw.J_DELAYED)) < cfg.prob_delayed_event:
            return 1 + int(_draw.unit(_draw.draw(key, _draw.J_DELAY))
                           * cfg.occasional_delay_sec * 1000)
        return 0

    def event(self, event_id: int) -> Person | Auction | Bid:
        """Event ``event_id`` (see :meth:`timed_event`)."""
        return self.timed_event(event_id)[0]


class EventStream:
    """The events of one spout task, in the order they arrive: ``(event_id, event)``.

    Task ``task`` of ``tasks`` takes its blocks of ids (:func:`task_event_id`). Without
    delays the order is the ids' order. With them, an event waits in a heap until the
    event time of the newest event taken reaches its own plus its delay, so the output
    is sorted by ``(dateTime + delay, event_id)``.

    The position (:attr:`position`, ids taken) and :meth:`held_ids` (delayed events not
    yet out) say where it is; ``EventStream(..., position, held)`` goes on from there with
    the same output (a spout's checkpointed state).
    """

    def __init__(self, generator: NexmarkGenerator, task: int = 0, tasks: int = 1,
                 position: int = 0, held: tuple[int, ...] | list[int] = ()) -> None:
        self._generator = generator
        self.config = cfg = generator.config
        self.task, self.tasks = task, tasks
        self.count = task_event_count(cfg.events, task, tasks)
        if not 0 <= position <= self.count:
            raise ValueError(f"position {position} outside [0, {self.count}]")
        self.position = position
        self._heap: list = []
        for event_id in held:
            event, delay = generator.timed_event(event_id)
            self._heap.append((event.dateTime + delay, event_id, event))
        heapq.heapify(self._heap)
        self._clock = (cfg.timestamp(task_event_id(position - 1, task, tasks))
                       if position else cfg.base_time)
        self._next_id = task_event_id(position, task, tasks)
        #: from the last id of a block to the first of the task's next block
        self._block_jump = (tasks - 1) * PROPORTION_DENOMINATOR + 1

    def _take(self) -> int:
        """The next id of the task (the caller checked that one is left)."""
        event_id = self._next_id
        self.position += 1
        self._next_id = (event_id + self._block_jump
                         if (event_id + 1) % PROPORTION_DENOMINATOR == 0 else event_id + 1)
        return event_id

    def held_ids(self) -> list[int]:
        """The delayed events taken but not yet out, by id."""
        return [e[1] for e in self._heap]

    def __iter__(self) -> Iterator[tuple[int, Person | Auction | Bid]]:
        return self

    def __next__(self) -> tuple[int, Person | Auction | Bid]:
        if not self.config.delayed:
            if self.position >= self.count:
                raise StopIteration
            event_id = self._take()
            return event_id, self._generator._timed_event(event_id)[0]
        heap = self._heap
        while True:
            if heap and (heap[0][0] <= self._clock or self.position >= self.count):
                _, event_id, event = heapq.heappop(heap)
                return event_id, event
            if self.position >= self.count:
                raise StopIteration
            event_id = self._take()
            event, delay = self._generator._timed_event(event_id)
            self._clock = event.dateTime
            heapq.heappush(heap, (event.dateTime + delay, event_id, event))

    def done(self) -> bool:
        """True once every event of the task is out."""
        return self.position >= self.count and not self._heap
