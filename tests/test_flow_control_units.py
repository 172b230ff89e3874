"""The flow-control policies' decisions, without Ray: each one's own behaviour, so that
none is another under a new name (backpressure/_watermark.py, _nak.py, _debloat.py)."""

from __future__ import annotations

import math

import pytest

from backpressure import (
    POLICIES,
    Control,
    DebloatPolicy,
    JCQueue,
    NakPolicy,
    Storm2Policy,
    WatermarkPolicy,
    make_policy,
)
from backpressure._nak import cut_factor
from topology import ConfigError, make_config


def _q() -> JCQueue:
    return JCQueue("t", 100)


# -- choosing -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, cls", [("storm2", Storm2Policy), ("watermark", WatermarkPolicy),
                                       ("nak", NakPolicy), ("debloat", DebloatPolicy)])
def test_each_policy_is_chosen_by_its_config_name(name, cls):
    p = make_policy(make_config({"topology.backpressure.policy": name}), 3, _q())
    assert type(p) is cls and p.name == name and POLICIES[name] is cls


def test_watermarks_must_be_ordered():
    with pytest.raises(ConfigError, match="low.watermark"):
        make_config({"backpressure.disruptor.low.watermark": 0.9,
                     "backpressure.disruptor.high.watermark": 0.5})


# -- watermark (STORM-886) ------------------------------------------------------------------

def test_watermark_flags_at_the_high_mark_and_clears_only_below_the_low_one():
    p = WatermarkPolicy(1, _q(), high=0.9, low=0.4)
    assert p.on_queue_fill(0.5, 0) is None
    assert p.on_queue_fill(0.9, 0) == Control("flag", True)
    assert p.on_queue_fill(0.95, 0) is None  # already flagged: no second message
    assert p.on_queue_fill(0.6, 0) is None  # between the marks: still flagged
    assert p.flagged
    assert p.on_queue_fill(0.4, 0) == Control("flag", False)
    assert p.on_queue_fill(0.1, 0) is None  # idle: nothing sent
    assert p.control_sent == 2


def test_watermark_throttles_a_spout_while_the_topology_is_flagged_and_ignores_stale_pushes():
    p = WatermarkPolicy(0, _q())
    assert p.spout_delay(0.0) == 0
    p.on_control("throttle", (1, True), 0.0)
    assert p.spout_delay(0.0) > 0
    p.on_control("throttle", (3, False), 0.0)
    p.on_control("throttle", (2, True), 0.0)  # older than the release: ignored
    assert p.spout_delay(0.0) == 0 and not p.throttled
    assert p.may_send(5)  # the throttle is the spout's: sends go on while it is lifted


# -- NAK ------------------------------------------------------------------------------------

def test_nak_sends_nothing_below_the_first_level():
    p = NakPolicy(1, _q())
    assert all(p.on_queue_fill(f, t) is None for t, f in enumerate([0.0, 0.2, 0.49]))
    assert p.control_sent == 0


def test_nak_sends_on_each_higher_level_and_repeats_once_per_window():
    p = NakPolicy(1, _q(), window_s=0.05)
    assert p.on_queue_fill(0.5, 0.0) == Control("nak", 0.5)
    assert p.on_queue_fill(0.6, 0.01) is None  # same level, same window
    assert p.on_queue_fill(0.8, 0.02) == Control("nak", 0.75)  # a higher level: at once
    assert p.on_queue_fill(0.8, 0.06) is None
    assert p.on_queue_fill(0.8, 0.08) == Control("nak", 0.75)  # a window later: again
    assert p.on_queue_fill(0.3, 0.09) is None
    assert p.on_queue_fill(0.55, 0.095) == Control("nak", 0.5)  # a new overload


def _emit_at(p: NakPolicy, rate: float, t0: float, t1: float, emitted: int,
             dt: float = 0.001) -> tuple[int, float]:
    """Drive a spout that emits whenever it may, one tuple per ``rate`` step, from t0 to
    t1; returns the emitted count and the achieved rate."""
    t, start = t0, emitted
    while t < t1:
        if p.spout_delay(t, emitted) == 0:
            emitted += max(1, int(rate * dt))
        t += dt
    return emitted, (emitted - start) / (t1 - t0)


def test_nak_cuts_the_rate_by_the_strongest_nak_of_a_window_then_raises_it_stepwise():
    p = NakPolicy(0, _q(), window_s=0.05, step=0.05)
    emitted, rate = _emit_at(p, 10_000, 0.0, 1.0, 0)  # no limit yet: about 10,000/s
    assert math.isinf(p.rate_limit) and rate > 9000
    p.on_control("nak", 0.5, 1.0)
    assert p.rate_limit == pytest.approx(p._rate * cut_factor(0.5), rel=0.01)
    first = p.rate_limit
    p.on_control("nak", 0.87, 1.01)  # stronger, same window: the deeper cut
    assert p.rate_limit == pytest.approx(first / cut_factor(0.5) * cut_factor(0.87))
    cut = p.rate_limit
    p.on_control("nak", 0.5, 1.02)  # weaker, same window: ignored
    assert p.rate_limit == cut
    emitted, rate = _emit_at(p, 10_000, 1.02, 1.06, emitted)
    assert rate < 0.8 * 10_000  # held below the old rate without blocking
    limits = []
    for k in range(1, 6):  # quiet windows: the limit rises, faster each window
        p.spout_delay(1.02 + k * 0.05 + 0.001, emitted)
        limits.append(p.rate_limit)
    assert all(b > a for a, b in zip(limits, limits[1:], strict=False))
    assert limits[2] / limits[1] > limits[1] / limits[0]
    _emit_at(p, 10_000, 1.3, 3.0, emitted)
    assert math.isinf(p.rate_limit)  # recovered: the limit is lifted
    assert p.control_received == 3


# -- debloat (Flink's FLIP-183) ---------------------------------------------------------------

def test_debloat_sizes_the_queue_to_the_target_time_and_follows_the_consumer():
    p = DebloatPolicy(1, _q(), target_s=1.0, floor=100, ceiling=32768, samples=1,
                      threshold=0.1)
    assert p.on_interval(10_000, 1.0, 32768, 0) == 10_000  # 10,000/s busy: 1 s of it
    assert p.on_interval(1_000, 1.0, 10_000, 1) == 1_000  # the consumer slowed 10x
    assert p.on_interval(1_050, 1.0, 1_000, 2) is None  # within the threshold: kept
    assert p.on_interval(500, 0.25, 1_000, 3) == 2_000  # busy a quarter: 2,000/busy-s
    assert p.on_interval(10, 1.0, 2_000, 4) == 100  # never below one batch (the floor)
    assert p.on_interval(1e9, 1.0, 100, 5) == 32768  # never above the configured size
    assert p.on_interval(0, 0.0, 32768, 6) is None  # idle: nothing learnt
    assert p.state()["inflight_bound"] == 32768


def test_debloat_keeps_storm2s_per_task_statuses():
    p = DebloatPolicy(1, _q())
    assert isinstance(p, Storm2Policy) and p.name == "debloat"


def test_storm2_holds_only_the_senders_of_the_backlogged_task():
    from backpressure import BackPressureStatus

    p = Storm2Policy(0, _q(), worker=0)
    p.on_status(BackPressureStatus(1, [7], [8], 10, {7: 0.0}))
    assert not p.may_send(7) and p.may_send(8)
    assert not p.throttles_spout and p.on_queue_fill(1.0, 0) is None
