"""Dead letters (``topology.max.replays``): a spout tuple is emitted at most 1 + N times,
then leaves on the dead-letter stream with its values, the reason it failed and its
attempts; with the key unset a poison tuple replays forever, as in Storm.

The plan, the helper and the sink run without Ray (milliseconds); the ``ray`` tests run the
whole path: the reason from the failing bolt (or the timeout, or the codec) through the
acker to the spout, the dead letter to ``handle.dead_letters()`` and ``stats()``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster._plan import plan
from tests._util import until
from tests.components import PassBolt, PoisonBolt, RejectBolt, RetryingSpout, SeqSpout
from topology import (
    ACKER_ID,
    DEAD_LETTER_FIELDS,
    DEAD_LETTER_STREAM,
    DEAD_LETTERS_ID,
    CollectorBolt,
    ConfigError,
    DatasetSink,
    DeadLetter,
    DeadLetterSink,
    IterableSpout,
    RetryService,
    TopologyBuilder,
    TopologyError,
    Tuple,
)
from topology._dead_letters import wire_safe

IN_SPOUTS = {"topology.acker.in.spouts": True}
ACKING = pytest.mark.parametrize("acking", [{}, IN_SPOUTS], ids=["ackers", "in_spouts"])
REPLAYS = 2


def _poison_topology(n: int = 40, poison: int = 7, spout=None):
    """src (IterableSpout of (seq, key), msg ids) → poison (raises on seq ``poison``) →
    sink (CollectorBolt)."""
    b = TopologyBuilder()
    b.set_spout("src", spout or IterableSpout([(i, f"k{i}") for i in range(n)],
                                              fields=("seq", "key"), msg_ids=True))
    b.set_bolt("poison", PoisonBolt(poison)).shuffle_grouping("src")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("poison")
    return b.create_topology()


# -- the plan (no Ray) ------------------------------------------------------------------------
def test_with_max_replays_every_spout_declares_the_stream_and_a_system_sink_takes_it():
    topo = _poison_topology()
    p = plan(topo, {"topology.max.replays": REPLAYS, "topology.workers": 2})
    comps = p.topology.components
    assert comps["src"].streams[DEAD_LETTER_STREAM] == DEAD_LETTER_FIELDS
    sink = comps[DEAD_LETTERS_ID]
    assert isinstance(sink.obj, DeadLetterSink) and sink.parallelism == 1
    assert [(g.source, g.stream) for g in sink.inputs] == [("src", DEAD_LETTER_STREAM)]
    # user ids unchanged, the ackers next, the dead-letter sink last
    assert dict(p.topology.component_tasks) == {
        "poison": (1,), "sink": (2,), "src": (3,), ACKER_ID: (4, 5), DEAD_LETTERS_ID: (6,)}
    assert 6 in p.links[3].destinations and p.links[6].upstream == {3}
    # the user's graph is untouched, and the plan's topology survives the trip to the
    # actors (its __reduce__ rebuilds it)
    assert DEAD_LETTER_STREAM not in topo.components["src"].streams
    cls, args = p.topology.__reduce__()
    again = cls(*args)
    assert DEAD_LETTERS_ID in again.components and again.component_tasks == \
        p.topology.component_tasks


def test_unset_the_topology_is_todays():
    p = plan(_poison_topology(), {})
    assert DEAD_LETTERS_ID not in p.topology.components
    assert DEAD_LETTER_STREAM not in p.topology.components["src"].streams
    assert p.warnings == ()


def test_max_replays_per_spout_and_acking_off():
    b = TopologyBuilder()
    b.set_spout("a", SeqSpout(1)).add_configuration("topology.max.replays", 0)
    b.set_spout("b", SeqSpout(1))
    b.set_bolt("x", PassBolt()).shuffle_grouping("a").shuffle_grouping("b")
    p = plan(b.create_topology(), {})
    assert [g.source for g in p.topology.components[DEAD_LETTERS_ID].inputs] == ["a", "b"]
    off = plan(b.create_topology(), {"topology.acker.executors": 0})
    assert DEAD_LETTERS_ID not in off.topology.components
    (warning,) = off.warnings
    assert "topology.max.replays is set but acking is off" in warning


def test_a_user_bolt_may_take_a_spouts_dead_letters_instead_of_the_system_sink():
    b = TopologyBuilder()
    b.set_spout("a", SeqSpout(1))
    b.set_spout("b", SeqSpout(1))
    b.set_bolt("x", PassBolt()).shuffle_grouping("a").shuffle_grouping("b")
    b.set_bolt("letters", DatasetSink(fields=("spout", "msg_id", "reason", "attempts"))
               ).fields_grouping("a", ["spout"], DEAD_LETTER_STREAM)
    topo = b.create_topology()  # the stream is the system's: no declaration needed
    assert topo.components["a"].streams[DEAD_LETTER_STREAM] == DEAD_LETTER_FIELDS
    p = plan(topo, {"topology.max.replays": 1})
    assert [g.source for g in p.topology.components[DEAD_LETTERS_ID].inputs] == ["b"]
    (warning,) = plan(topo, {}).warnings  # subscribed, but no dead letter will come
    assert "no dead letter is made without topology.max.replays" in warning


def test_a_negative_max_replays_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"config 'topology.max.replays' must be >= 0, got -1"):
        plan(_poison_topology(), {"topology.max.replays": -1})
    b = TopologyBuilder()
    with pytest.raises(ConfigError, match=r"component 'a': config 'topology.max.replays'"):
        b.set_spout("a", SeqSpout(1)).add_configuration("topology.max.replays", -2)
        b.set_bolt("x", PassBolt()).shuffle_grouping("a")
        b.create_topology()
    with pytest.raises(ConfigError, match=r"'topology.max.replays' expects int, got float"):
        plan(_poison_topology(), {"topology.max.replays": 1.5})


# -- the helper and the sink (no Ray) ---------------------------------------------------------
class _Collector:
    def __init__(self):
        self.emitted = []
        self.fail_reason = None

    def emit(self, values, stream="default", msg_id=None):
        self.emitted.append((stream, values, msg_id))
        return ()


def _service(max_replays):
    col = _Collector()
    ctx = SimpleNamespace(component_id="src")
    return RetryService({"topology.max.replays": max_replays}, ctx, col), col


def test_the_retry_service_gives_a_tuple_up_at_its_1_plus_n_th_failure():
    svc, col = _service(2)
    col.fail_reason = "E: x (in bolt 'b')"
    assert svc.schedule("m", (1, "a")) and svc.schedule("m", (1, "a"))
    assert not col.emitted
    assert not svc.schedule("m", (1, "a"))  # the third failure
    assert col.emitted == [(DEAD_LETTER_STREAM,
                            ["src", "m", [1, "a"], "E: x (in bolt 'b')", 3], None)]
    assert svc.dead_letters == 1 and not svc._failures  # forgotten
    # an ack forgets the count: a later failure starts again
    svc.schedule("n", (2,))
    svc.remove("n")
    assert svc.schedule("n", (2,)) and svc._failures == {"n": 1}


def test_the_retry_service_with_no_cap_always_replays_and_counts_nothing():
    svc, col = _service(None)
    assert all(svc.schedule("m", (1,)) for _ in range(100))
    assert not col.emitted and not svc._failures
    zero, col0 = _service(0)
    assert not zero.schedule(complex(0, 1), (1,))  # the first failure
    (stream, (spout, msg_id, values, reason, attempts), _), = col0.emitted
    assert isinstance(msg_id, str) and reason == "unknown" and attempts == 1


def test_values_the_wire_cannot_carry_become_their_repr():
    svc, col = _service(0)
    svc.schedule(1, (1, complex(1, 2)))
    assert col.emitted[0][1][2] == "[1, (1+2j)]"
    assert wire_safe([1, "a", None, 2.5, b"x", {"k": [1, 2]}, {3}]) and not wire_safe(1 << 64)
    assert not wire_safe(["\ud800"]) and not wire_safe(object())


def test_the_dead_letter_sink_keeps_records_and_refuses_other_streams():
    sink = DeadLetterSink(max_letters=1)
    sink.prepare({}, None, None)
    tup = Tuple(["src", 7, [7, "k"], "timeout", 3], DEAD_LETTER_FIELDS, "src", 4,
                DEAD_LETTER_STREAM)
    sink.execute(tup)
    assert sink.received == [DeadLetter("src", 4, 7, [7, "k"], "timeout", 3)]
    with pytest.raises(OverflowError):
        sink.execute(tup)
    with pytest.raises(TopologyError, match="takes stream '__dead_letters'"):
        sink.execute(Tuple([1, 2, 3, 4, 5], DEAD_LETTER_FIELDS, "src", 4, "default"))
    with pytest.raises(TopologyError):
        DeadLetterSink(max_letters=0)


def test_in_one_process_the_reason_reaches_the_spout_and_its_dead_letter_the_sink():
    """The executors without Ray (queues for sinks): the acker's fails, with their reason,
    reach ``IterableSpout.fail`` as ``collector.fail_reason``; the second is its last, so
    its dead letter goes to the ``__dead_letters`` task, is counted, and the spout ends."""
    from actors import ExecutorCore, make_executor
    from actors._streams import ACKER_FAILED

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(7,)], fields=("v",), msg_ids=True))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    topo = b.create_topology().with_ackers(1, dead_letters=True)
    assert dict(topo.component_tasks) == {"sink": (1,), "src": (2,), ACKER_ID: (3,),
                                          DEAD_LETTERS_ID: (4,)}
    workers = {t: 0 for t in range(1, 5)}
    conf = {"topology.producer.batch.size": 1, "topology.batch.flush.interval.millis": 0,
            "topology.max.replays": 1}
    spout, letters = (make_executor("t", topo, conf, t, workers) for t in (2, 4))
    spout.connect({t: ExecutorCore.make_queue_sink(q, 2) for t, q in (
        (1, make_executor("t", topo, conf, 1, workers).queue),
        (3, make_executor("t", topo, conf, 3, workers).queue), (4, letters.queue))})
    spout.start()
    letters.start()
    try:
        for attempt in (1, 2):
            until(lambda a=attempt: spout.emitted == a and spout.ledger.trees, 10,
                  interval=0.001)
            (root,) = spout.ledger.trees
            assert spout.queue.try_publish_direct(
                (3, ACKER_FAILED, [root, f"E: attempt {attempt} (in bolt 'sink')"]))
        assert spout.done.wait(10) and spout.state == "done"
        until(lambda: letters.obj.received, 10, interval=0.001)
        assert letters.obj.received == [
            DeadLetter("src", 2, 0, [7], "E: attempt 2 (in bolt 'sink')", 2)]
        assert spout.obj.failed_ids == [0, 0] and spout.obj.dead_ids == [0]
        assert spout.stats().dead_letters == 1 and spout.stats().failed == 2
        assert spout.collector.fail_reason is None  # outside fail
    finally:
        spout.stop()
        letters.stop()


# -- on Ray -----------------------------------------------------------------------------------
def _letters_after_finish(cluster, name, topo, conf, timeout=60):
    handle = cluster.submit_topology(name, conf, topo)
    try:
        assert handle.wait(timeout), handle.stats().summary()
        return handle, handle.dead_letters(), handle.stats()
    except BaseException:
        cluster.kill_topology(name)
        raise


@pytest.mark.ray
@ACKING
@pytest.mark.parametrize("workers", ["1worker", "2workers"], indirect=True)
def test_a_poison_tuple_is_a_dead_letter_after_exactly_1_plus_n_attempts(
        cluster, workers, name, acking):
    n = 40
    conf = workers.conf({"topology.max.replays": REPLAYS, **acking})
    handle, letters, stats = _letters_after_finish(cluster, name, _poison_topology(n), conf)
    try:
        (attempts,) = handle.task_state("poison", "attempts").values()
        (acked,) = handle.task_state("src", "acked_ids").values()
        (dead,) = handle.task_state("src", "dead_ids").values()
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    assert letters == [DeadLetter("src", stats.component("src")[0].task, 7, [7, "k7"],
                                  "ValueError: bad row 7 (in bolt 'poison')", 1 + REPLAYS)]
    assert attempts[7] == 1 + REPLAYS
    assert all(v == 1 for k, v in attempts.items() if k != 7)
    # the rest of the stream completes
    assert sorted(acked) == [i for i in range(n) if i != 7] and dead == [7]
    assert sorted(v[0] for *_, v in got) == [i for i in range(n) if i != 7]
    assert stats.total("src", "dead_letters") == 1 and stats.complete
    assert {r["component"]: r["dead_letters"] for r in stats.rows()}["src"] == 1
    assert "dead letters src: 1" in stats.summary()


@pytest.mark.ray
def test_unset_a_poison_tuple_replays_without_end(cluster, name):
    handle = cluster.submit_topology(name, {}, _poison_topology(10))
    try:
        def attempts():
            (a,) = handle.task_state("poison", "attempts").values()
            return a.get(7, 0)

        until(lambda: attempts() > 2 * (1 + REPLAYS), 60, "the poison tuple replaying")
        assert not handle.wait(0.1)  # its spout cannot end while it replays
        assert handle.dead_letters() == []
        assert DEAD_LETTERS_ID not in handle.topology.components
        stats = handle.stats()
        assert stats.total("src", "dead_letters") == 0 and not stats.complete
    finally:
        cluster.kill_topology(name)


@pytest.mark.ray
@ACKING
def test_a_tree_that_times_out_is_a_dead_letter_with_reason_timeout(cluster, name, acking):
    """seq 3 is never acked (it times out each time), seq 5 is failed by the bolt itself
    without an exception; a user spout with the helper (RetryService) gives both up."""
    b = TopologyBuilder()
    b.set_spout("src", RetryingSpout(10))
    b.set_bolt("judge", RejectBolt(reject=[5], hold=[3])).shuffle_grouping("src")
    conf = {"topology.max.replays": 1, "topology.message.timeout.secs": 1, **acking}
    handle, letters, stats = _letters_after_finish(cluster, name, b.create_topology(), conf)
    try:
        (spout,) = handle.task_state("src", "reasons").values()
        (acked,) = handle.task_state("src", "acked").values()
        (attempts,) = handle.task_state("judge", "attempts").values()
    finally:
        cluster.kill_topology(name)
    task = stats.component("src")[0].task
    assert sorted(letters) == [
        DeadLetter("src", task, 3, [3, "k3"], "timeout", 2),
        DeadLetter("src", task, 5, [5, "k5"], "failed by bolt 'judge'", 2)]
    assert sorted(spout) == ["failed by bolt 'judge'"] * 2 + ["timeout"] * 2
    assert attempts[3] == attempts[5] == 2 and sorted(acked) == [0, 1, 2, 4, 6, 7, 8, 9]
    assert stats.total("src", "dead_letters") == 2


def _items_with_two_poisons() -> list:
    """Seq 4 a complex (no wire form), seq 6 a list nested 1100 deep (built in the task:
    a value that deep cannot be pickled into the topology)."""
    deep: list = []
    inner = deep
    for _ in range(1100):
        inner.append([])
        inner = inner[0]
    return [(i, complex(1, 2) if i == 4 else deep if i == 6 else f"k{i}") for i in range(8)]


@pytest.mark.ray
@ACKING
def test_a_tuple_the_wire_cannot_carry_fails_could_not_serialise(cluster, name, acking):
    """The codec refuses seq 4's value (of a type it has no form for) and seq 6's (nested
    past its depth limit, and past Python's recursion limit) on the way to the bolt:
    each tree fails at once (not at the timeout) with the codec's error, its dead letter
    carries a repr, and the rest go through."""
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout(factory=_items_with_two_poisons, fields=("seq", "key"),
                                     msg_ids=True))
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("src")
    conf = {"topology.max.replays": 1, "topology.message.timeout.secs": 120, **acking}
    handle, letters, stats = _letters_after_finish(cluster, name, b.create_topology(), conf)
    try:
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    letter, deep_letter = sorted(letters)
    assert (letter.msg_id, letter.values, letter.attempts) == (4, "[4, (1+2j)]", 2)
    assert letter.reason.startswith("could not serialise: cannot serialise a complex")
    assert deep_letter.msg_id == 6 and deep_letter.values.startswith("[6, [[")
    assert deep_letter.reason.startswith("could not serialise: cannot serialise a value "
                                         "the wire cannot carry")
    assert sorted(v[0] for *_, v in got) == [0, 1, 2, 3, 5, 7]
    assert stats.total("src", "timeouts") == 0 and stats.total("src", "error_count") == 4


@pytest.mark.ray
def test_a_user_dataset_sink_takes_the_dead_letters_as_a_table(cluster, name):
    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, f"k{i}") for i in range(10)], fields=("seq", "key"),
                                     msg_ids=True))
    b.set_bolt("poison", PoisonBolt(2)).shuffle_grouping("src")
    b.set_bolt("letters", DatasetSink(fields=("spout", "msg_id", "reason", "attempts"))
               ).shuffle_grouping("src", DEAD_LETTER_STREAM)
    handle, letters, _ = _letters_after_finish(cluster, name, b.create_topology(),
                                               {"topology.max.replays": 0})
    try:
        (table,) = handle.sink_tables("letters")
    finally:
        cluster.kill_topology(name)
    assert letters == []  # no DeadLetterSink: the user's bolt took them
    assert table.to_pylist() == [{"spout": "src", "msg_id": 2, "attempts": 1,
                                  "reason": "ValueError: bad row 2 (in bolt 'poison')"}]


@pytest.mark.ray
@pytest.mark.spark
def test_the_dataframe_spout_gives_a_poison_row_up(cluster, spark, name):
    df = spark.createDataFrame([(i, f"n{i}") for i in range(30)], "id long, name string")
    from topology import DataFrameSpout

    spout = DataFrameSpout(df, msg_ids=True)
    b = TopologyBuilder()
    b.set_spout("df", spout)
    b.set_bolt("poison", PoisonBolt(11, field="id", fields=spout.outputs)).shuffle_grouping("df")
    b.set_bolt("sink", CollectorBolt()).shuffle_grouping("poison")
    handle, letters, stats = _letters_after_finish(cluster, name, b.create_topology(),
                                                   {"topology.max.replays": 1}, timeout=120)
    try:
        got = handle.collected("sink")
    finally:
        cluster.kill_topology(name)
    (letter,) = letters
    assert (letter.values, letter.reason, letter.attempts) == (
        [11, "n11"], "ValueError: bad row 11 (in bolt 'poison')", 2)
    assert sorted(v[0] for *_, v in got) == [i for i in range(30) if i != 11]
    assert stats.total("df", "dead_letters") == 1
