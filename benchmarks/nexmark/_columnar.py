"""The columnar generator: the per-event generator's events, computed a column at a time
in numpy and handed out as Arrow record batches, one per kind.

Every value is the per-event generator's (``_generator.NexmarkGenerator``) function of
the same draws ``u(seed, event_id, j)`` (``_draw``), evaluated over an array of event
ids with the same float64 and 64-bit integer operations, so the two agree on every field
of every event (tests/test_nexmark.py checks them against each other). Strings are built
as Arrow buffers: a word's bytes are its draws' bytes through the same tables; ``extra``
is a slice of the same pool; names, cities, states, channels and their URLs are taken
from tables by index (the 10,000 channels' URLs made a column at a time when the
generator is built).

Events come in id order; delays (``prob_delayed_event``) change the per-event stream's
order only, so they are not applied here (:meth:`ColumnarGenerator.task_batches` refuses
a delayed config).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from benchmarks.nexmark import _draw
from benchmarks.nexmark import _generator as g
from benchmarks.nexmark._model import arrow_schema

#: events per batch, all kinds (a batch of bids holds 46/50 of them)
DEFAULT_BATCH_EVENTS = 8_192

_SCHEMAS = {kind: arrow_schema(kind) for kind in ("person", "auction", "bid")}


def _string_array(parts: list[tuple[np.ndarray, np.ndarray]]) -> pa.StringArray:
    """A string column from parts laid side by side: each part a ``uint8`` matrix (rows,
    width) of characters and the ``int64`` lengths of each row's share of it (<= width)."""
    n = len(parts[0][1])
    matrix = np.hstack([m for m, _ in parts]) if len(parts) > 1 else parts[0][0]
    keep = np.hstack([np.arange(m.shape[1]) < lengths[:, None] for m, lengths in parts])
    data = matrix[keep]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sum(lengths for _, lengths in parts), out=offsets[1:])
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _constant(text: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    return np.broadcast_to(raw, (n, len(raw))), np.full(n, len(raw), dtype=np.int64)


def _word(keys: np.ndarray, j: int, lengths: np.ndarray, max_length: int,
          separator: str = " ") -> tuple[np.ndarray, np.ndarray]:
    """``_draw.word`` for each key: the characters (rows, 8 * draws) and the lengths."""
    draws = _draw.word_draws(max_length)
    raw = np.stack([_draw.draw_np(keys, j + i) for i in range(draws)], axis=1)
    raw = raw.astype("<u8").view(np.uint8)
    chars = _draw.INNER_NP[separator][raw]
    rows = np.arange(len(keys))
    chars[:, 0] = _draw.EDGE_NP[raw[:, 0]]
    last = lengths - 1
    chars[rows, last] = _draw.EDGE_NP[raw[rows, last]]
    return chars, lengths


def _lengths(keys: np.ndarray, j: int, max_length: int) -> np.ndarray:
    """``_draw.word_length`` for each key's draw ``j``."""
    return _draw.MIN_STRING + _draw.choice_np(keys, j, max_length - _draw.MIN_STRING)


def _extra_sizes(u: np.ndarray, current: np.ndarray | int, average: int) -> np.ndarray:
    """``_generator.extra_size`` for each row."""
    want = average - np.asarray(current, dtype=np.int64)
    delta = (want * 0.2 + 0.5).astype(np.int64)
    size = want - delta + (u * 2 * delta).astype(np.int64)
    return np.where(want < 0, 0, size)


class ColumnarGenerator:
    """Makes the events of arrays of ids as Arrow record batches (``person``, ``auction``,
    ``bid``, with ``_model.arrow_schema``'s columns), the same events as
    ``NexmarkGenerator`` makes one at a time.

    Not thread-safe (numpy and Arrow buffers are built per call). Building one makes the
    10,000 channels' URLs.

    Args:
        generator: the per-event generator whose config, ``extra`` pool and channel URLs
            this one shares.
    """

    def __init__(self, generator: g.NexmarkGenerator) -> None:
        self.generator = generator
        self.config = generator.config
        self._skey = _draw.seed_key(self.config.seed)
        self._pool = np.frombuffer(generator.pool.encode(), dtype=np.uint8)
        self._names = pa.array([f"{f} {last}" for f in g.FIRST_NAMES for last in g.LAST_NAMES])
        self._cities, self._states = pa.array(g.US_CITIES), pa.array(g.US_STATES)
        # channel i < NUM_CHANNELS is "channel-i"; NUM_CHANNELS + i the hot channel i
        self._channels = pa.array([f"channel-{n}" for n in range(g.NUM_CHANNELS)]
                                  + list(g.HOT_CHANNELS))
        self._urls = self._url_table()

    def _url_table(self) -> pa.StringArray:
        """Every channel's URL (``NexmarkGenerator.channel_url``, a column at a time),
        then the hot channels'."""
        import pyarrow.compute as pc

        channel = np.arange(g.NUM_CHANNELS, dtype=np.uint64)
        keys = _draw.event_keys_np(self._skey, channel + np.uint64(_draw.CHANNEL_ID))
        n = len(channel)
        parts = [_constant("https://www.nexmark.com/", n)]
        for i in range(3):
            parts += [_word(keys, 3 + i, _lengths(keys, i, 5), 5, "_"), _constant("/", n)]
        parts[-1] = _constant("/item.htm?query=1", n)
        ids = pa.array(_bit_reverse32(channel.astype(np.int64))).cast(pa.string())
        suffix = pc.if_else(pa.array(_draw.choice_np(keys, 6, 10) > 0),
                            pc.binary_join_element_wise("&channel_id=", ids, ""), "")
        urls = pc.binary_join_element_wise(_string_array(parts), suffix, "")
        return pa.concat_arrays([urls, pa.array(self.generator.hot_urls, pa.string())])

    def _url_column(self, channel: np.ndarray) -> pa.Array:
        return self._urls.take(channel)

    def _extra(self, keys: np.ndarray, j_size: int, current, average: int) -> pa.StringArray:
        sizes = _extra_sizes(_draw.unit_np(_draw.draw_np(keys, j_size)), current, average)
        starts = (_draw.unit_np(_draw.draw_np(keys, j_size + 1))
                  * (_draw.POOL_CHARS - sizes)).astype(np.int64)
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = self._pool[np.repeat(starts - offsets[:-1], sizes) + np.arange(offsets[-1])]
        return pa.StringArray.from_buffers(len(keys), pa.py_buffer(offsets.astype(np.int32)),
                                           pa.py_buffer(data))

    def _now(self, ids: np.ndarray) -> np.ndarray:
        return self.config.base_time + ids * 1000 // self.config.rate

    def _person_id(self, u: np.ndarray, newest: np.ndarray) -> np.ndarray:
        people = newest + 1
        active = np.minimum(people, self.config.num_active_people)
        return people - active + (u * (active + g.PERSON_ID_LEAD)).astype(np.int64)

    def persons(self, ids: np.ndarray) -> pa.RecordBatch:
        """The persons of ``ids`` (an ``int64`` array of person event ids)."""
        keys, n = _draw.event_keys_np(self._skey, ids), len(ids)
        name = self._names.take(_draw.choice_np(keys, g.P_FIRST, len(g.FIRST_NAMES))
                                * len(g.LAST_NAMES)
                                + _draw.choice_np(keys, g.P_LAST, len(g.LAST_NAMES)))
        email = _string_array([
            _word(keys, g.P_EMAIL, _lengths(keys, g.P_EMAIL_LEN, g.EMAIL_MAX), g.EMAIL_MAX),
            _constant("@", n),
            _word(keys, g.P_DOMAIN, _lengths(keys, g.P_DOMAIN_LEN, g.DOMAIN_MAX),
                  g.DOMAIN_MAX),
            _constant(".com", n)])
        digits = np.stack([_draw.choice_np(keys, g.P_CARD + i, 10_000) for i in range(4)],
                          axis=1)
        chars = (digits[:, :, None] // np.array([1000, 100, 10, 1]) % 10 + 48).astype(np.uint8)
        card_matrix = np.concatenate([chars, np.full((n, 4, 1), 32, np.uint8)], axis=2)
        card = _string_array([(card_matrix.reshape(n, 20), np.full(n, 19, np.int64))])
        city = self._cities.take(_draw.choice_np(keys, g.P_CITY, len(g.US_CITIES)))
        state = self._states.take(_draw.choice_np(keys, g.P_STATE, len(g.US_STATES)))
        size = 8 + sum(_byte_lengths(c) for c in (name, email, card, city, state))
        extra = self._extra(keys, g.P_EXTRA_SIZE, size, self.config.avg_person_byte_size)
        pid = ids // g.PROPORTION_DENOMINATOR * g.PERSON_PROPORTION + g.FIRST_PERSON_ID
        return pa.record_batch([pid, name, email, card, city, state, self._now(ids), extra],
                               schema=_SCHEMAS["person"])

    def auctions(self, ids: np.ndarray) -> pa.RecordBatch:
        """The auctions of ``ids`` (an ``int64`` array of auction event ids)."""
        cfg, keys = self.config, _draw.event_keys_np(self._skey, ids)
        epoch, offset = np.divmod(ids, g.PROPORTION_DENOMINATOR)
        newest_person = epoch * g.PERSON_PROPORTION
        hot = _draw.choice_np(keys, g.A_HOT_SELLER, cfg.hot_sellers_ratio) > 0
        seller = np.where(hot, newest_person // g.HOT_BLOCK * g.HOT_BLOCK,
                          self._person_id(_draw.unit_np(_draw.draw_np(keys, g.A_SELLER)),
                                          newest_person))
        category = g.FIRST_CATEGORY_ID + _draw.choice_np(keys, g.A_CATEGORY, g.NUM_CATEGORIES)
        initial = _draw.PRICES_NP[_draw.choice_np(keys, g.A_INITIAL, _draw.PRICE_STEPS)]
        now = self._now(ids)
        horizon_events = (cfg.num_in_flight_auctions * g.PROPORTION_DENOMINATOR
                          // g.AUCTION_PROPORTION)
        horizon = self._now(ids + horizon_events) - now
        expires = now + 1 + _draw.choice_np(keys, g.A_EXPIRES, np.maximum(2 * horizon, 1))
        item_len = _lengths(keys, g.A_ITEM_LEN, g.ITEM_MAX)
        desc_len = _lengths(keys, g.A_DESC_LEN, g.DESC_MAX)
        item = _string_array([_word(keys, g.A_ITEM, item_len, g.ITEM_MAX)])
        desc = _string_array([_word(keys, g.A_DESC, desc_len, g.DESC_MAX)])
        reserve = initial + _draw.PRICES_NP[_draw.choice_np(keys, g.A_RESERVE,
                                                            _draw.PRICE_STEPS)]
        extra = self._extra(keys, g.A_EXTRA_SIZE, 8 + item_len + desc_len + 40,
                            cfg.avg_auction_byte_size)
        aid = (epoch * g.AUCTION_PROPORTION + offset - g.PERSON_PROPORTION
               + g.FIRST_AUCTION_ID)
        return pa.record_batch([aid, item, desc, initial, reserve, now, expires,
                                seller + g.FIRST_PERSON_ID, category, extra],
                               schema=_SCHEMAS["auction"])

    def bids(self, ids: np.ndarray) -> pa.RecordBatch:
        """The bids of ``ids`` (an ``int64`` array of bid event ids)."""
        cfg, keys = self.config, _draw.event_keys_np(self._skey, ids)
        u = {j: _draw.unit_np(_draw.draw_np(keys, j))
             for j in range(g.B_HOT_AUCTION, g.B_EXTRA_AT + 1)}
        epoch = ids // g.PROPORTION_DENOMINATOR
        newest_auction = epoch * g.AUCTION_PROPORTION + g.AUCTION_PROPORTION - 1
        newest_person = epoch * g.PERSON_PROPORTION + g.PERSON_PROPORTION - 1
        oldest = np.maximum(newest_auction - cfg.num_in_flight_auctions, 0)
        auction = np.where(
            (u[g.B_HOT_AUCTION] * cfg.hot_auction_ratio).astype(np.int64) > 0,
            newest_auction // g.HOT_BLOCK * g.HOT_BLOCK,
            oldest + (u[g.B_AUCTION] * (newest_auction - oldest + 1 + g.AUCTION_ID_LEAD)
                      ).astype(np.int64))
        bidder = np.where((u[g.B_HOT_BIDDER] * cfg.hot_bidders_ratio).astype(np.int64) > 0,
                          newest_person // g.HOT_BLOCK * g.HOT_BLOCK + 1,
                          self._person_id(u[g.B_BIDDER], newest_person))
        price = _draw.PRICES_NP[(u[g.B_PRICE] * _draw.PRICE_STEPS).astype(np.int64)]
        channel = np.where((u[g.B_HOT_CHANNEL] * 2).astype(np.int64) > 0,
                           g.NUM_CHANNELS + (u[g.B_CHANNEL] * len(g.HOT_CHANNELS)
                                             ).astype(np.int64),
                           (u[g.B_CHANNEL] * g.NUM_CHANNELS).astype(np.int64))
        extra = self._extra(keys, g.B_EXTRA_SIZE, g.BID_BASE_SIZE, cfg.avg_bid_byte_size)
        return pa.record_batch([auction + g.FIRST_AUCTION_ID, bidder + g.FIRST_PERSON_ID, price,
                                self._channels.take(channel), self._url_column(channel),
                                self._now(ids), extra], schema=_SCHEMAS["bid"])

    def batches(self, ids: np.ndarray, kinds: tuple[str, ...] = ("person", "auction", "bid")
                ) -> dict[str, pa.RecordBatch]:
        """The events of ``ids`` (an ``int64`` array, ascending), one record batch per kind
        in ``kinds`` (rows in id order; a kind with no id here gets an empty batch).

        Raises:
            ValueError: an id outside ``[0, config.events)``.
        """
        if len(ids) and (ids[0] < 0 or ids[-1] >= self.config.events):
            raise ValueError(f"ids must lie in [0, {self.config.events}), got "
                             f"{ids[0]} .. {ids[-1]}")
        rem = ids % g.PROPORTION_DENOMINATOR
        make = {"person": (self.persons, rem < g.PERSON_PROPORTION),
                "auction": (self.auctions, (rem >= g.PERSON_PROPORTION)
                            & (rem < g.PERSON_PROPORTION + g.AUCTION_PROPORTION)),
                "bid": (self.bids, rem >= g.PERSON_PROPORTION + g.AUCTION_PROPORTION)}
        return {kind: make[kind][0](ids[make[kind][1]]) for kind in kinds}

    def task_batches(self, task: int = 0, tasks: int = 1, position: int = 0,
                     batch_events: int = DEFAULT_BATCH_EVENTS,
                     kinds: tuple[str, ...] = ("person", "auction", "bid")
                     ) -> Iterator[tuple[int, dict[str, pa.RecordBatch]]]:
        """The events of task ``task`` of ``tasks`` (its blocks of ids, as
        ``_generator.task_event_id``) from ``position`` on, ``batch_events`` ids at a
        time: ``(events in the batch, {kind: record batch})``.

        Raises:
            ValueError: a delayed config (the columnar path has no arrival order), a bad
                task, position or batch size.
        """
        if self.config.delayed:
            raise ValueError("the columnar generator emits in id order: it does not apply "
                             "delays (prob_delayed_event > 0); use the per-event EventStream")
        if batch_events < 1:
            raise ValueError(f"batch_events must be >= 1, got {batch_events}")
        count = g.task_event_count(self.config.events, task, tasks)
        if not 0 <= position <= count:
            raise ValueError(f"position {position} outside [0, {count}]")
        for start in range(position, count, batch_events):
            ids = self.task_ids(task, tasks, start, min(start + batch_events, count))
            yield len(ids), self.batches(ids, kinds)

    @staticmethod
    def task_ids(task: int, tasks: int, start: int, stop: int) -> np.ndarray:
        """The event ids at positions ``start .. stop - 1`` of task ``task`` of ``tasks``
        (``_generator.task_event_id`` of each), an ascending ``int64`` array."""
        block, offset = np.divmod(np.arange(start, stop, dtype=np.int64),
                                  g.PROPORTION_DENOMINATOR)
        return (task + block * tasks) * g.PROPORTION_DENOMINATOR + offset


def _bit_reverse32(n: np.ndarray) -> np.ndarray:
    """``_generator._bit_reverse32`` of each element (``int64``, 0 <= n < 2**31)."""
    r = np.zeros_like(n)
    for b in range(32):
        r |= ((n >> b) & 1) << (31 - b)
    return np.where(r >= 1 << 31, (1 << 32) - r, r)


def _byte_lengths(column: pa.Array) -> np.ndarray:
    """The UTF-8 byte length of each string of ``column`` (``int64``); the generator's
    text is ASCII, so bytes are characters."""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:
                                                                 column.offset + len(column) + 1]
    return np.diff(offsets).astype(np.int64)
