"""The generator's randomness: a counter-based draw ``u(seed, event_id, j)``, computed per
event in pure Python and per column in numpy ``uint64`` arithmetic, bit for bit the same.

A draw is SplitMix64 (Steele, Lea and Flood, "Fast Splittable Pseudorandom Number
Generators", OOPSLA 2014; the finaliser ``mix64`` is their ``mix64``, the one Java's
``SplittableRandom`` uses): the event's key ``k = mix64(mix64(seed) + event_id * G)``
(``G`` the golden-ratio increment ``0x9E3779B97F4A7C15``), and draw ``j`` of the event is
``mix64(k + (j + 1) * G)``, the ``j``-th output of a SplitMix64 stream seeded with ``k``.
Every operation is a 64-bit add, multiply, xor or shift, which numpy's ``uint64``
arrays wrap modulo 2**64 exactly as Python ints masked with ``2**64 - 1`` do; a draw
becomes a float by its top 53 bits (``(x >> 11) * 2**-53``, exact in both), and every
integer choice is ``int(u * n)`` (truncating the same float64 product). So the columnar
generator and the per-event one agree on every value, and an event is a function of
(seed, event id) alone.

Event ids are below 2**63; ids from 2**63 up name the per-seed tables: the ``extra``
pool, the hot channels' URLs, each channel's URL.

What is drawn once per process (not per seed): :data:`PRICES`, the price of each of
2**16 steps of a log-uniform ``[100, 10**8]`` (cents): a price is ``PRICES[int(u * 2**16)]``,
because numpy's and C's ``pow`` need not round alike.
"""

from __future__ import annotations

import string

import numpy as np

MASK = (1 << 64) - 1
#: SplitMix64's increment: 2**64 divided by the golden ratio, odd
GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_TO_UNIT = 2.0 ** -53

#: the draws ``j`` every kind shares: whether the event is delayed, and by how much
J_DELAYED, J_DELAY = 0, 1

#: ids above the events' (< 2**63): the per-seed tables
POOL_ID = MASK
HOT_URL_ID = MASK - 1  # hot channel i: HOT_URL_ID - i
CHANNEL_ID = 1 << 63   # channel c: CHANNEL_ID + c

#: the shortest random word (Nexmark's ``MIN_STRING_LENGTH``)
MIN_STRING = 3
#: ``extra`` is a slice of this many random letters, drawn once per seed
POOL_CHARS = 1 << 16
#: steps of the price table
PRICE_STEPS = 1 << 16
LETTERS = string.ascii_lowercase


def mix64(z: int) -> int:
    """SplitMix64's finaliser of a 64-bit int (0 <= z < 2**64)."""
    z = ((z ^ (z >> 30)) * _M1) & MASK
    z = ((z ^ (z >> 27)) * _M2) & MASK
    return z ^ (z >> 31)


def seed_key(seed: int) -> int:
    """The seed's part of every key: ``mix64(seed)``, seed in ``[0, 2**64)``."""
    return mix64(seed)


def event_key(skey: int, event_id: int) -> int:
    """The key of event ``event_id`` (or table id) under ``skey = seed_key(seed)``."""
    return mix64((skey + event_id * GOLDEN) & MASK)


def draw(key: int, j: int) -> int:
    """Draw ``j`` (>= 0) of the event whose key is ``key``: a uint64 as an int."""
    return mix64((key + (j + 1) * GOLDEN) & MASK)


def unit(x: int) -> float:
    """A draw as a float in ``[0, 1)``: its top 53 bits."""
    return (x >> 11) * _TO_UNIT


# -- the same in numpy, a column at a time -------------------------------------------------

_M1_NP, _M2_NP, _GOLDEN_NP = np.uint64(_M1), np.uint64(_M2), np.uint64(GOLDEN)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def mix64_np(z: np.ndarray) -> np.ndarray:
    """:func:`mix64` of each element of a ``uint64`` array (a new array)."""
    z = (z ^ (z >> _S30)) * _M1_NP
    z = (z ^ (z >> _S27)) * _M2_NP
    return z ^ (z >> _S31)


def event_keys_np(skey: int, event_ids: np.ndarray) -> np.ndarray:
    """:func:`event_key` of each id (``int64`` or ``uint64`` array) → ``uint64`` array."""
    with np.errstate(over="ignore"):
        return mix64_np(np.uint64(skey) + event_ids.astype(np.uint64) * _GOLDEN_NP)


def draw_np(keys: np.ndarray, j: int) -> np.ndarray:
    """:func:`draw` ``j`` of each key → ``uint64`` array."""
    with np.errstate(over="ignore"):
        return mix64_np(keys + np.uint64(((j + 1) * GOLDEN) & MASK))


def unit_np(x: np.ndarray) -> np.ndarray:
    """:func:`unit` of each draw → ``float64`` array in ``[0, 1)``."""
    return (x >> _S11).astype(np.float64) * _TO_UNIT


def choice_np(keys: np.ndarray, j: int, n) -> np.ndarray:
    """``int(unit(draw(key, j)) * n)`` for each key (``n`` a number or an array) →
    ``int64`` array."""
    return (unit_np(draw_np(keys, j)) * n).astype(np.int64)


# -- words: random bytes through a table ---------------------------------------------------


def _table(separators: int, separator: str = " ") -> bytes:
    """Random byte → a character: the first ``separators`` of the 256 values are
    ``separator``, the rest spread over the 26 letters (9 or 10 values each)."""
    return bytes(ord(separator) if b < separators
                 else ord(LETTERS[(b - separators) * 26 // (256 - separators)])
                 for b in range(256))


#: a word's first and last character: a letter; inner ones: a separator 20 times in 256
#: (Nexmark's ``nextString`` puts spaces in a word and trims it; here they are inner only)
EDGE = _table(0)
INNER = {sep: _table(20, sep) for sep in (" ", "_")}
EDGE_NP = np.frombuffer(EDGE, dtype=np.uint8)
INNER_NP = {sep: np.frombuffer(t, dtype=np.uint8) for sep, t in INNER.items()}


def word_length(u: float, max_length: int) -> int:
    """A word's length from a unit draw: 3 .. ``max_length - 1`` (``nextString``)."""
    return MIN_STRING + int(u * (max_length - MIN_STRING))


def word_draws(max_length: int) -> int:
    """The uint64 draws a word of at most ``max_length - 1`` characters takes (8 each)."""
    return -(-(max_length - 1) // 8)


def word(key: int, j: int, n: int, separator: str = " ") -> str:
    """A word of ``n`` characters from the bytes of draws ``j, j + 1, ...`` of ``key``
    (little-endian, 8 a draw)."""
    raw = b"".join(draw(key, j + i).to_bytes(8, "little") for i in range(-(-n // 8)))
    return (raw[:1].translate(EDGE) + raw[1:n - 1].translate(INNER[separator])
            + raw[n - 1:n].translate(EDGE)).decode()


def url(key: int) -> str:
    """A channel's URL from its table key: three words of 3-4 characters."""
    w = [word(key, 3 + i, word_length(unit(draw(key, i)), 5), "_") for i in range(3)]
    return f"https://www.nexmark.com/{w[0]}/{w[1]}/{w[2]}/item.htm?query=1"


def pool(skey: int) -> str:
    """The seed's ``extra`` pool: :data:`POOL_CHARS` lowercase letters."""
    key = event_key(skey, POOL_ID)
    raw = b"".join(draw(key, i).to_bytes(8, "little") for i in range(POOL_CHARS // 8))
    return raw.translate(EDGE).decode()


def _prices() -> tuple[int, ...]:
    return tuple(int(10.0 ** ((i + 0.5) / PRICE_STEPS * 6.0) * 100.0 + 0.5)
                 for i in range(PRICE_STEPS))


#: a price in cents for each step: log-uniform over [100, 10**8] (Nexmark's ``nextPrice``)
PRICES = _prices()
PRICES_NP = np.array(PRICES, dtype=np.int64)
