"""Python's cyclic garbage collector in actor processes (``topology.executor.gc.threshold``).

A decoded batch allocates two or three containers per tuple, and most of them live a while
in a receive queue, so at Python's default generation-0 threshold (700 allocations) the
collector runs every few hundred tuples and rescans the survivors as they age. Tuples in
flight hold no reference cycles: reference counting frees them, and the collector finds
nothing. Decoding frames while many are alive, the collector at the default threshold took
most of the time, and at this key's default decoding cost as little as with the collector
off (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import gc


def tune_gc(threshold: int) -> None:
    """Set this process's generation-0 threshold to ``threshold`` (0: leave Python's), keeping
    the older generations' ratios. Process-wide: call it from an actor's ``__init__``."""
    if threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)


def freeze_startup_objects() -> None:
    """Move every object alive now (modules, the topology, state built by ``open`` or
    ``prepare``) to the permanent generation, so collections no longer rescan them
    (``gc.freeze``). Call once, after start-up."""
    gc.freeze()
