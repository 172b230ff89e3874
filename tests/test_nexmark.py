"""Nexmark (benchmarks/nexmark): the generator's guarantees without Ray, the command's
refusals, the DuckDB check, and q0-q4 on 20k events checked against DuckDB on the
session's Ray."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.nexmark import (
    Auction,
    Bid,
    EventStream,
    GeneratorConfig,
    NexmarkGenerator,
    Person,
    kind_of,
    last_auction,
    last_person,
    main,
    write_events,
)

CHECK_EVENTS = 20_000
CHECK_SEED = 7


def stream(config: GeneratorConfig, task: int = 0, tasks: int = 1) -> list:
    return list(EventStream(NexmarkGenerator(config), task, tasks))


# -- the generator ------------------------------------------------------------------------


def test_same_seed_same_events_and_another_seed_other_events():
    a = stream(GeneratorConfig(events=3_000, seed=5))
    assert a == stream(GeneratorConfig(events=3_000, seed=5))
    other = stream(GeneratorConfig(events=3_000, seed=6))
    assert [e for _, e in a] != [e for _, e in other]
    # ids and times are the events' places, whatever the seed
    assert [(i, e.dateTime) for i, e in a] == [(i, e.dateTime) for i, e in other]


def test_an_event_depends_on_its_id_alone():
    config = GeneratorConfig(events=3_000, seed=5)
    whole = dict(stream(config))
    fresh = NexmarkGenerator(config)
    for i in (2_999, 17, 1_500, 0, 50, 51):  # any order, one generator reused
        assert fresh.event(i) == whole[i]


@pytest.mark.parametrize("delayed", [False, True], ids=["in-order", "delayed"])
def test_every_task_split_yields_the_same_events(delayed):
    config = GeneratorConfig(events=5_017, seed=3, rate=1_000,
                             prob_delayed_event=0.2 if delayed else 0.0)
    one = sorted(stream(config))
    for tasks in (2, 3, 4):
        parts = [stream(config, k, tasks) for k in range(tasks)]
        assert sorted(x for p in parts for x in p) == one, tasks
        assert all(len(p) > 0 for p in parts)


def test_mix_is_one_person_three_auctions_forty_six_bids_per_fifty():
    events = stream(GeneratorConfig(events=10_000, seed=1))
    counts = Counter(type(e) for _, e in events)
    assert counts == {Person: 200, Auction: 600, Bid: 9_200}
    assert all(kind_of(i) == type(e).__name__.lower() for i, e in events)
    assert [type(e) for _, e in events[:6]] == [Person, Auction, Auction, Auction, Bid, Bid]


def test_ids_and_foreign_keys_follow_the_spec():
    events = stream(GeneratorConfig(events=20_000, seed=2))
    persons = [e.id for _, e in events if isinstance(e, Person)]
    auctions = [e for _, e in events if isinstance(e, Auction)]
    bids = [e for _, e in events if isinstance(e, Bid)]
    bid_ids = [i for i, e in events if isinstance(e, Bid)]
    auction_ids = [i for i, e in events if isinstance(e, Auction)]
    assert persons == list(range(1000, 1000 + len(persons)))
    assert [a.id for a in auctions] == list(range(1000, 1000 + len(auctions)))
    assert {a.category for a in auctions} == set(range(10, 15))
    assert all(a.dateTime < a.expires and a.initialBid <= a.reserve for a in auctions)
    # hot ratios 2, 4, 4: half the bids go to the first auction of the current block of
    # 100, three quarters of the sellers and bidders are the current block's first and
    # second person (a few more land there by chance)
    def share(hits):
        return sum(hits) / len(hits)

    assert 0.49 < share([b.auction == last_auction(i) // 100 * 100 + 1000
                         for i, b in zip(bid_ids, bids, strict=True)]) < 0.53
    assert 0.74 < share([b.bidder == last_person(i) // 100 * 100 + 1001
                         for i, b in zip(bid_ids, bids, strict=True)]) < 0.77
    assert 0.72 < share([a.seller == last_person(i) // 100 * 100 + 1000
                         for i, a in zip(auction_ids, auctions, strict=True)]) < 0.79
    # the others are recent: within the active people / in-flight auctions, or the lead
    assert all(last_auction(i) - 100 <= b.auction - 1000 <= last_auction(i) + 10
               for i, b in zip(bid_ids, bids, strict=True))
    assert all(b.bidder - 1000 <= last_person(i) + 10 for i, b in zip(bid_ids, bids,
                                                                      strict=True))
    assert all(100 <= b.price <= 10**8 for b in bids)
    # sizes near the averages (person 200, auction 500, bid 100 bytes)
    mean_bid_extra = sum(len(b.extra) for b in bids) / len(bids)
    assert 60 <= mean_bid_extra <= 76


def test_event_time_is_monotone_without_delay():
    config = GeneratorConfig(events=5_000, seed=1, rate=2_000, base_time=10**12)
    times = [e.dateTime for _, e in stream(config)]
    assert times == sorted(times)
    assert times[0] == 10**12 and times[-1] == 10**12 + 4_999 * 1_000 // 2_000


def test_delay_disorders_event_time_within_its_bound():
    in_order = GeneratorConfig(events=20_000, seed=4, rate=1_000)
    delayed = GeneratorConfig(events=20_000, seed=4, rate=1_000, occasional_delay_sec=3,
                              prob_delayed_event=0.1)
    out = stream(delayed)
    assert sorted(out) == stream(in_order)  # the same events, in another order
    newest, late = 0, 0
    for _, e in out:
        assert e.dateTime >= newest - 3_000
        late += e.dateTime < newest
        newest = max(newest, e.dateTime)
    assert late > 0.05 * len(out)


def test_a_stream_goes_on_from_its_position_and_held_events():
    config = GeneratorConfig(events=4_000, seed=9, rate=500, prob_delayed_event=0.3)
    gen = NexmarkGenerator(config)
    whole = list(EventStream(gen, 1, 2))
    s = EventStream(gen, 1, 2)
    head = [next(s) for _ in range(777)]
    assert s.held_ids()  # delayed events wait in it
    rest = list(EventStream(gen, 1, 2, s.position, s.held_ids()))
    assert head + rest == whole


@pytest.mark.parametrize("seed", [0, 7, 2**64 - 1])
def test_columnar_and_per_event_generators_agree_on_every_field(seed):
    from benchmarks.nexmark._columnar import ColumnarGenerator

    config = GeneratorConfig(events=5_017, seed=seed, rate=3_000)
    gen = NexmarkGenerator(config)
    columnar = ColumnarGenerator(gen)
    for tasks in (1, 3):
        for task in range(tasks):
            per_event = {kind: [] for kind in ("person", "auction", "bid")}
            for _, e in EventStream(gen, task, tasks):
                per_event[type(e).__name__.lower()].append(tuple(e))
            got = {kind: [] for kind in per_event}
            for _, batches in columnar.task_batches(task, tasks, batch_events=700):
                for kind, batch in batches.items():
                    got[kind] += [tuple(r.values()) for r in batch.to_pylist()]
            assert got == per_event, (tasks, task)
    # every channel's URL, made a column at a time, is the per-event generator's
    assert columnar._urls.to_pylist()[:10_000] == [gen.channel_url(c) for c in range(10_000)]
    # a task goes on from a position, as a spout after a rollback
    whole = [b for _, b in columnar.task_batches(1, 3, batch_events=50)]
    assert [b for _, b in columnar.task_batches(1, 3, position=100, batch_events=50)] == whole[2:]


def test_columnar_generator_refuses_delays_and_bad_batches():
    from benchmarks.nexmark._columnar import ColumnarGenerator

    delayed = ColumnarGenerator(NexmarkGenerator(GeneratorConfig(events=10,
                                                                  prob_delayed_event=0.5)))
    with pytest.raises(ValueError, match="does not apply delays"):
        next(delayed.task_batches())
    columnar = ColumnarGenerator(NexmarkGenerator(GeneratorConfig(events=10)))
    with pytest.raises(ValueError, match="batch_events"):
        next(columnar.task_batches(batch_events=0))


@pytest.mark.parametrize("bad", [dict(events=0), dict(events=10, rate=0),
                                 dict(events=10, seed=-1), dict(events=10, seed=2**64),
                                 dict(events=10, prob_delayed_event=1.5)])
def test_config_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        GeneratorConfig(**bad)


# -- the command's refusals (before anything starts: no Ray) -------------------------------


@pytest.mark.parametrize("argv, says", [
    (["run", "--query", "q9", "--events", "10", "--out", "{tmp}/r.parquet"], "invalid choice"),
    (["run", "--query", "q0", "--events", "0", "--out", "{tmp}/r.parquet"], "must be > 0"),
    (["run", "--query", "q0", "--events", "10", "--rate", "-5", "--out", "{tmp}/r.parquet"],
     "must be > 0"),
    (["run", "--query", "q0", "--events", "10", "--out", "{tmp}/exists.parquet"],
     "exists: give a new path"),
    (["generate", "--events", "-1", "--out", "{tmp}/d"], "must be > 0"),
    (["generate", "--events", "10", "--out", "{tmp}"], "already holds bid.parquet"),
    (["run", "--query", "q0", "--events", "10", "--out", "{tmp}/r.parquet", "--check",
      "--data", "{tmp}/none"], "lacks person.parquet"),
    (["run", "--query", "q0", "--mode", "rows", "--events", "10", "--out", "{tmp}/r.parquet"],
     "invalid choice"),
    (["run", "--query", "q3", "--mode", "batch", "--events", "10", "--out", "{tmp}/r.parquet"],
     "q3 runs in mode tuple"),
    (["run", "--query", "q1", "--mode", "batch", "--events", "10", "--prob-delayed-event",
      "0.1", "--out", "{tmp}/r.parquet"], "cannot delay them"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, capsys, argv, says):
    (tmp_path / "exists.parquet").write_bytes(b"")
    (tmp_path / "bid.parquet").write_bytes(b"")
    with pytest.raises(SystemExit) as e:
        main([a.format(tmp=tmp_path) for a in argv])
    assert e.value.code == 2
    assert says in capsys.readouterr().err


# -- the check ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The check's Parquet: 20k events of seed 7, written once for the module."""
    out = tmp_path_factory.mktemp("nexmark-data")
    rows = write_events(GeneratorConfig(events=CHECK_EVENTS, seed=CHECK_SEED), out)
    assert rows == {"person": 400, "auction": 1_200, "bid": 18_400}
    return out


def test_the_check_reports_the_rows_that_differ(data, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.nexmark import check

    bids = pq.read_table(data / "bid.parquet").to_pylist()
    kept = [(b["auction"], b["price"]) for b in bids if b["auction"] % 123 == 0]
    wrong = kept[1:] + [(123, 1)]
    pq.write_table(pa.table({"auction": [a for a, _ in wrong], "price": [p for _, p in wrong]}),
                   tmp_path / "q2.parquet")
    result = check("q2", tmp_path / "q2.parquet", data)
    assert not result.passed
    assert "1 rows missing from the result" in result.report
    assert "(123, 1)" in result.report
    pq.write_table(pa.table({"auction": [a for a, _ in kept], "price": [p for _, p in kept]}),
                   tmp_path / "q2-right.parquet")
    assert check("q2", tmp_path / "q2-right.parquet", data).passed


# -- q0-q4 on the session's Ray, checked against DuckDB ------------------------------------


@pytest.mark.parametrize("query, parallelism, mode", [
    ("q0", 1, "tuple"), ("q1", 1, "tuple"), ("q2", 1, "tuple"), ("q3", 1, "tuple"),
    ("q4", 1, "tuple"), ("q4", 2, "tuple"),
    ("q0", 1, "batch"), ("q1", 2, "batch"), ("q2", 1, "batch")])
def test_query_equals_duckdb(cluster, data, tmp_path, capsys, query, parallelism, mode):
    out = tmp_path / f"{query}.parquet"
    status = main(["run", "--query", query, "--mode", mode, "--events", str(CHECK_EVENTS),
                   "--seed", str(CHECK_SEED), "--parallelism", str(parallelism), "--out",
                   str(out), "--check", "--data", str(data)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert f"CHECK PASSED {query}" in printed


# -- the Bytewax flows of the bench, checked by the same SQL -------------------------------


@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q4"])
def test_bytewax_flow_equals_duckdb(data, tmp_path, query):
    pytest.importorskip("bytewax")
    from benchmarks.nexmark import check
    from benchmarks.nexmark._bytewax import run_flow

    out = tmp_path / f"{query}.parquet"
    ran = run_flow(query, GeneratorConfig(events=CHECK_EVENTS, seed=CHECK_SEED), str(out))
    result = check(query, out, data)
    assert result.passed, result.report
    assert ran["rows"] == result.rows > 0
    assert len(ran["latencies_ms"]) == (18_400 if query == "q4" else ran["rows"])


def test_bytewax_process_peak_memory_is_its_own(tmp_path):
    """A child's ``ru_maxrss`` keeps its parent's high-water mark across exec on Linux:
    the Bytewax run's peak memory must be the child's own (VmHWM)."""
    import subprocess
    import sys
    from pathlib import Path

    ballast = bytearray(400 * 2**20)  # the parent's peak: 400 MiB resident
    ballast[::4096] = b"x" * len(ballast[::4096])
    code = "from benchmarks.nexmark._bytewax import peak_rss_mb; print(peak_rss_mb())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    del ballast
    assert 0 < float(out) < 300
