"""The tuple-batch codec refuses malformed frames with FrameError (receivers count and drop
them), and round-trips what the executors send."""

from __future__ import annotations

import msgpack
import pytest

from actors import FrameError, decode_batch, encode_batch


def test_round_trip_with_and_without_anchors():
    items = [[0, [1, "a"]], [1, [2, "b"], [12345, 678, 9, 10]], [1, [3, "c"], [2**63 - 1, 5]],
             [-1, None]]
    assert decode_batch(encode_batch(3, items, seq=7, epoch=2), num_streams=2) == (3, 2, 7, items)


@pytest.mark.parametrize("item, message", [
    ([0, [1], [[1, 2]]], "anchors"),  # the old nested pairs
    ([0, [1], [1, "x"]], "anchors"),
    ([0, [1], [5]], "anchors"),
    ([0, [1], []], "anchors"),
    ([0, [1], [1, 2, 3]], "anchors"),
    ([0, [1], [True, 2]], "anchors"),
    ([0, [1], [1, 2, 3, 4.5]], "anchors"),
    ([0, [1], 7], "not \\[stream_index"),
    ([0, 5], "not \\[stream_index"),
    ([7, [1]], "unknown stream index 7"),
    (["x", [1]], "not \\[stream_index"),
])
def test_malformed_items_raise_frame_error(item, message):
    frame = msgpack.packb([1, 0, 0, [[0, [0]], item]])
    with pytest.raises(FrameError, match=message):
        decode_batch(frame, num_streams=2)


def test_tune_gc_sets_generation_0_and_keeps_the_others():
    import gc

    from actors._gc import tune_gc

    before = gc.get_threshold()
    try:
        tune_gc(12345)
        assert gc.get_threshold() == (12345, *before[1:])
        tune_gc(0)  # 0 leaves Python's setting alone
        assert gc.get_threshold() == (12345, *before[1:])
    finally:
        gc.set_threshold(*before)
