"""Encoding a row once for every frame that carries it, against once per frame (Ray-free).

A spout whose stream goes to two components (examples/flights.py: route and carrier
statistics) puts the same ``(stream, values)`` message in two destination batches, and
each batch is packed into its frame by one ``msgpack.packb`` call (``encode_batch``). The
other way packs each message once, keeps its bytes in a memo keyed by the message's
identity, and joins each frame from a header and the packed items (msgpack lets an array
be written as its header followed by its packed elements; the wire format is unchanged,
and the frames decode to the same items). Flights-shaped rows (nine values and a UTC
datetime), 100 rows per frame.

Load-independent figures come from callgrind: instructions per row as the difference of
two row counts, less the rows' construction (``--mode build``)::

    for m in build packb memo; do for n in 2000 12000; do
      valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m benchmarks.encode_once --rows $n --mode $m --frames 2 2>&1 | grep Collected
    done; done

Without valgrind it times each mode (thread CPU, best of ``--repeat``) and prints
``key=value`` per mode; it writes no result file (docs/benchmarks.md, "The main job's
rows", holds the callgrind figures).
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time

import msgpack

from actors._codec import _default, decode_batch, encode_batch

ROWS_PER_FRAME = 100


def flights_rows(n: int) -> list[tuple[int, list]]:
    """``n`` messages ``(0, row)`` shaped like the flights job's rows, times in order."""
    rng = random.Random(1)
    base = dt.datetime(2013, 1, 1, tzinfo=dt.timezone.utc)
    return [(0, ["UA", "United Air Lines Inc.", "EWR", "Newark Liberty Intl", "IAH",
                 "George Bush Intercontinental", rng.randint(-10, 100), rng.randint(-20, 120),
                 rng.randint(100, 2500), base + dt.timedelta(hours=k // 48)])
            for k in range(n)]


def per_frame(msgs: list, frames: int) -> bytes:
    """Today's path: each frame packs its items in one ``packb`` call."""
    f = b""
    for k in range(0, len(msgs), ROWS_PER_FRAME):
        items = msgs[k:k + ROWS_PER_FRAME]
        for _ in range(frames):
            f = encode_batch(1, items, k)
    return f


def memo_joined(msgs: list, frames: int, capacity: int = 8192) -> bytes:
    """Each message packed once (a memo by identity, cleared when full), frames joined
    from their parts."""
    pack = msgpack.Packer(default=_default, use_bin_type=True).pack
    header = msgpack.Packer().pack_array_header
    prefix = {0: b"\x92\x00"}  # [stream, values]: a 2-array, then stream 0
    memo: dict[int, tuple] = {}
    f = b""
    for k in range(0, len(msgs), ROWS_PER_FRAME):
        items = msgs[k:k + ROWS_PER_FRAME]
        for _ in range(frames):
            parts = [b"\x94" + pack(1) + pack(0) + pack(k) + header(len(items))]
            for it in items:
                e = memo.get(id(it))
                if e is None or e[0] is not it:
                    p = prefix[it[0]] + pack(it[1])
                    if len(memo) >= capacity:
                        memo.clear()
                    memo[id(it)] = (it, p)
                else:
                    p = e[1]
                parts.append(p)
            f = b"".join(parts)
    return f


def encoded_frames(msgs: list) -> list[bytes]:
    """The frames :func:`per_frame` makes, one per ``ROWS_PER_FRAME`` messages."""
    return [encode_batch(1, msgs[k:k + ROWS_PER_FRAME], k)
            for k in range(0, len(msgs), ROWS_PER_FRAME)]


def decode_frames(msgs: list, frames: int) -> bytes:
    """The receiving side, for scale: :func:`encoded_frames`, then each decoded ``frames``
    times (subtract ``--mode build-decode``, which only encodes them)."""
    encoded = encoded_frames(msgs)
    for f in encoded:
        for _ in range(frames):
            decode_batch(f)
    return encoded[-1]


MODES = {"packb": per_frame, "memo": memo_joined, "decode": decode_frames}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=12_000)
    ap.add_argument("--frames", type=int, default=2, help="frames that carry each row")
    ap.add_argument("--mode", choices=["build", "build-decode", "all", *MODES],
                    default="all", help="build-decode: build and encode what decode reads")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    msgs = flights_rows(args.rows)
    if args.mode == "build":
        return
    if args.mode == "build-decode":
        encoded_frames(msgs)
        return
    if args.mode in MODES:  # one pass (the callgrind form)
        MODES[args.mode](msgs, args.frames)
        return
    last = msgs[-ROWS_PER_FRAME:]
    for name, fn in MODES.items():
        assert decode_batch(fn(msgs, args.frames))[3] == [list(m) for m in last]
        if name == "decode":
            continue
        best = min(_cpu(fn, msgs, args.frames) for _ in range(args.repeat))
        print(f"mode={name} frames={args.frames} cpu_us_per_row={best / args.rows * 1e6:.2f}")


def _cpu(fn, msgs: list, frames: int) -> float:
    t0 = time.thread_time()
    fn(msgs, frames)
    return time.thread_time() - t0


if __name__ == "__main__":
    main()
