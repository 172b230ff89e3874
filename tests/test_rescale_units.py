"""Restoring a savepoint at another parallelism, without Ray: the assignment of key groups,
transactions and spout splits to new tasks (actors/state/_rescale.py,
topology/_splits.py), a rescaled savepoint seeded into the local provider, and each
refusal at submit."""

from __future__ import annotations

import pytest

from actors._codec import decode_key, decode_value, value_encoder
from actors.state._internals import INTERNAL_PREFIX
from actors.state._rescale import (
    FINISHED,
    assign_keyed,
    assign_transactions,
    check_splits,
    key_group_sources,
    key_groups_for,
    rescale,
)
from actors.state.savepoints import (
    SavepointError,
    check_restore,
    describe,
    read_savepoint,
    seed_provider,
    write_savepoint,
)
from topology import Bolt, IterableSpout, StatefulBolt, StatefulSpout, TopologyBuilder
from topology._keygroups import key_group, key_group_range, operator_index, stable_hash
from topology._splits import SPLITS_KEY, SplitPositions, redistribute_splits, split_items

enc = value_encoder()
KEYS, GROUPS = 42, 13  # Flink's RescalingITCase: 42 keys, max parallelism 13


def _group(key: bytes) -> int:
    return key_group(stable_hash(decode_key(key)), GROUPS)


@pytest.mark.parametrize("old_n, new_n", [(2, 4), (4, 2), (3, 5), (13, 1), (1, 13)])
def test_each_new_task_takes_the_old_tasks_whose_key_groups_meet_its_own(old_n, new_n):
    sources = key_group_sources(old_n, new_n, GROUPS)
    for g in range(GROUPS):
        assert operator_index(g, old_n, GROUPS) in sources[operator_index(g, new_n, GROUPS)]
    for j, ks in enumerate(sources):
        mine = set(key_group_range(j, new_n, GROUPS))
        assert all(mine & set(key_group_range(k, old_n, GROUPS)) for k in ks)


@pytest.mark.parametrize("old_n, new_n", [(2, 4), (4, 2)])
def test_keyed_entries_land_on_the_task_owning_their_group_with_their_values(old_n, new_n):
    old: dict[int, dict[bytes, bytes]] = {k: {} for k in range(old_n)}
    for key in range(KEYS):
        g = key_group(stable_hash(key), GROUPS)
        old[operator_index(g, old_n, GROUPS)][enc(key)] = enc(1000 * key)
    old[0][FINISHED] = b"\xc3"
    new = assign_keyed(old, old_n, new_n, GROUPS, _group)
    assert sorted(new) == list(range(new_n))
    seen = {}
    for j, entries in new.items():
        # finished where every old task it takes from was (only old task 0 was)
        assert (entries.pop(FINISHED, None) is not None) == (
            key_group_sources(old_n, new_n, GROUPS)[j] == [0])
        for k, v in entries.items():
            key = decode_key(k)
            assert operator_index(key_group(stable_hash(key), GROUPS), new_n, GROUPS) == j
            seen[key] = decode_value(v)
    assert seen == {key: 1000 * key for key in range(KEYS)}


def test_a_new_keyed_task_is_finished_only_if_every_old_task_of_its_groups_was():
    # (old task 1 of 2 left no entries: it is counted, not finished)
    new = assign_keyed({0: {FINISHED: b"\xc3"}}, 2, 1, GROUPS, _group)
    assert FINISHED not in new[0]

def test_keyed_runtime_entries_that_do_not_split_are_refused():
    old = {0: {INTERNAL_PREFIX + enc(("part", 1)): b"\x00"}, 1: {}}
    with pytest.raises(ValueError, match="old task 0 keeps 1 runtime entries"):
        assign_keyed(old, 2, 3, GROUPS, _group)


@pytest.mark.parametrize("old_n, new_n", [(2, 3), (3, 2)])
def test_each_pending_transaction_goes_to_one_new_task_under_a_key_of_its_own(old_n, new_n):
    old = {k: {INTERNAL_PREFIX + enc(("txn", 7)): enc([f"t{k}-7"]),
               INTERNAL_PREFIX + enc(("txn", 8)): enc([f"t{k}-8"])} for k in range(old_n)}
    new = assign_transactions(old, new_n)
    txns = [(decode_key(k[1:]), decode_value(v)) for e in new.values() for k, v in e.items()]
    assert sorted(v[0] for _, v in txns) == sorted(f"t{k}-{c}" for k in range(old_n)
                                                   for c in (7, 8))
    assert all(key == ("txn", int(v[0][-1]), int(v[0][1])) for key, v in txns)


# -- splits ------------------------------------------------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.out: list = []

    def emit(self, values, stream=None, msg_id=None) -> None:
        self.out.append(values[0])


class _Context:
    def __init__(self, index: int, n: int) -> None:
        self.component_id, self.task_index, self.task_id, self._n = "src", index, index, n

    def get_component_tasks(self, component):
        return list(range(self._n))


def _spouts(n: int, items, states=None, conf=None):
    """``n`` opened IterableSpout tasks, each given its state (a dict) or an empty one."""
    out = []
    for k in range(n):
        s = IterableSpout(items)
        s.open({"topology.max.task.parallelism": 13, **(conf or {})}, _Context(k, n),
               _Collector())
        state = dict(states[k]) if states else {}
        s.init_state(_DictState(state))
        out.append(s)
    return out


class _DictState(dict):
    def put(self, key, value) -> None:
        self[key] = value


def _run(spouts, budget: int | None = None) -> list:
    """Each spout emits up to ``budget`` items (all when None); returns what they emitted."""
    emitted = []
    for s in spouts:
        for _ in range(budget if budget is not None else 10**9):
            try:
                s.next_tuple()
            except StopIteration:
                break
        emitted += s._collector.out
        s._collector.out = []
    return emitted


def _snapshot(spouts) -> list[dict]:
    for s in spouts:
        s.pre_prepare(1)
    return [dict(s._state) for s in spouts]


def test_iterable_spout_1_to_3_to_2_emits_every_item_once():
    items = list(range(100))
    one = _spouts(1, items)
    emitted = _run(one, 17)
    assert emitted == list(range(17))  # (one task: the items' order)
    old = _snapshot(one)
    three = _spouts(3, items, [IterableSpout.redistribute(old, j, 3) for j in range(3)])
    emitted += _run(three, 9)
    old = _snapshot(three)
    two = _spouts(2, items, [IterableSpout.redistribute(old, j, 2) for j in range(2)])
    emitted += _run(two)
    assert sorted(emitted) == items


def test_split_positions_restore_and_own_the_items_of_their_splits():
    sp = SplitPositions({"topology.max.task.parallelism": 4}, 1, 2)
    assert sp.owned == range(2, 4) and sp.owns(6) and not sp.owns(5)
    sp.positions = {2: 1, 3: 0}
    assert list(split_items(range(12), sp)) == [(3, 3), (6, 6), (7, 7), (10, 10), (11, 11)]
    sp.positions = {2: 1, 3: 0}
    assert list(split_items(iter(range(12)), sp)) == [(3, 3), (6, 6), (7, 7), (10, 10),
                                                      (11, 11)]
    with pytest.raises(ValueError, match="its state has 8 splits.*is 4; restore with 8"):
        sp.load({"splits": 8}, "src")


def test_a_spout_state_without_splits_does_not_redistribute():
    with pytest.raises(ValueError, match="without splits.*same parallelism"):
        redistribute_splits([{"position": 3}], 0, 2)
    legacy = _spouts(2, list(range(10)), [{"position": 2}, {"position": 1}])
    assert sorted(_run(legacy)) == [3, 4, 5, 6, 7, 8, 9]  # (task 0 took 0, 2; task 1: 1)



def test_a_spout_state_with_more_than_its_splits_is_refused_naming_the_keys():
    with pytest.raises(ValueError, match=r"old task 1 keeps \['seen'\] beside its split"):
        redistribute_splits([{"splits": 2, ("split", 0): 3},
                             {"splits": 2, ("split", 1): 0, "seen": 9}], 0, 1)

# -- a rescaled savepoint, seeded and restored -------------------------------------------


class Sum(StatefulBolt):
    outputs = ()

    def init_state(self, state) -> None:
        self.state = state

    def execute(self, tup) -> None:
        self.state.put(tup.values[0], self.state.get(tup.values[0], 0) + tup.values[1])


class Positional(StatefulSpout):
    outputs = ("key", "n")

    def init_state(self, state) -> None:
        pass

    def next_tuple(self) -> None:
        raise StopIteration


def _topology(bolt_tasks=2, spout=None, spout_tasks=1, grouping="fields", chain=False):
    b = TopologyBuilder()
    b.set_spout("src", spout or IterableSpout([(0, 1)], ("key", "n")), spout_tasks)
    d = b.set_bolt("sum", Sum(), bolt_tasks)
    if chain:
        d.local_or_shuffle_grouping("src")
    elif grouping == "fields":
        d.fields_grouping("src", ("key",))
    else:
        d.shuffle_grouping("src")
    topo = b.create_topology()
    return topo.with_chains(["sum"]) if chain else topo


CONF = {"topology.max.task.parallelism": GROUPS}


def _savepoint(tmp_path, topo, state, conf=CONF):
    tasks = {c: list(t) for c, t in topo.component_tasks.items()}
    return read_savepoint(write_savepoint(
        str(tmp_path / "sp"), "t", 7,
        {c: {tasks[c][i]: e for i, e in per.items()} for c, per in state.items()},
        tasks, describe(topo, conf)))


def test_a_savepoint_at_2_tasks_seeded_at_4_gives_each_task_its_key_groups(tmp_path):
    from actors.state import keyed_state
    from actors.state.providers import LocalProvider

    old = _topology(2)
    state = {"sum": {0: {}, 1: {}}, "src": {0: {enc("splits"): enc(GROUPS)}}}
    for key in range(KEYS):
        state["sum"][operator_index(key_group(stable_hash(key), GROUPS), 2, GROUPS)][
            enc(key)] = enc(1500)
    sp = _savepoint(tmp_path, old, state)
    new = _topology(4)
    sp4 = rescale(sp, new, CONF)
    check_restore(sp4, new, conf=CONF)
    provider = LocalProvider(str(tmp_path / "ckpt"), "t", "s1")
    cid = seed_provider(provider, sp4, new, lambda c, t: key_groups_for(  # (as a submit)
        sp4, c, keyed_state(new, c, t, CONF)[0]))
    for i, task in enumerate(new.component_tasks["sum"]):
        store = provider.task_store("sum", task)
        got = store.restore(cid, keyed_state(new, "sum", task, CONF)[1])
        store.close()
        assert {decode_key(k): decode_value(v) for k, v in got.items()} == {
            key: 1500 for key in range(KEYS)
            if operator_index(key_group(stable_hash(key), GROUPS), 4, GROUPS) == i}
    provider.close()


@pytest.mark.parametrize("case, match", [
    ("shuffled", r"'sum': savepoint has 2 tasks, this topology has 3, and its state is "
                 r"per task, not keyed.*restore with 2"),
    ("spout", r"'src': savepoint has 1 tasks, this topology has 2, and spout class "
              r"Positional has no redistribute.*restore with 1"),
    ("legacy", r"'src': .*1 tasks.*2, and a spout state without splits.*restore with 1"),
    ("key groups", r"'sum': .*2 tasks.*3, and the savepoint has 13 key groups, "
                   r"topology.max.task.parallelism is 16.*restore with 2"),
    ("forward", r"'src': savepoint has 2 tasks, this topology has 3.*forward.*'src' -> "
                r"'sum'.*same task count; restore with 2"),
    ("splits", r"spout 'src': its state has 13 splits, topology.max.task.parallelism is "
               r"16.*restore with 13"),
])
def test_each_restore_that_cannot_rescale_is_refused_naming_component_and_reason(
        tmp_path, case, match):
    conf = CONF
    if case == "shuffled":
        old, new = _topology(2, grouping="shuffle"), _topology(3, grouping="shuffle")
        state = {"sum": {0: {enc("a"): enc(1)}, 1: {}}}
    elif case in ("spout", "legacy"):
        spout = Positional() if case == "spout" else None
        old, new = (_topology(2, spout, 1), _topology(2, spout, 2))
        state = {"src": {0: {enc("position"): enc(3)}}}
    elif case == "key groups":
        old, new = _topology(2), _topology(3)
        state = {"sum": {0: {}, 1: {}}}
        conf = {"topology.max.task.parallelism": 16}
    elif case == "splits":  # (at the same task count too)
        old, new = _topology(2), _topology(2)
        state = {"src": {0: {enc("splits"): enc(GROUPS)}}}
        conf = {"topology.max.task.parallelism": 16}
    else:
        old, new = _topology(2, spout_tasks=2, chain=True), _topology(2, spout_tasks=3)
        state = {"sum": {0: {}, 1: {}}}
    sp = _savepoint(tmp_path, old, state)
    with pytest.raises(SavepointError, match=match):
        check_splits(rescale(sp, new, conf), new, conf)


class _Parse(Bolt):
    outputs = ("key", "n")

    def execute(self, tup) -> None:
        pass


@pytest.mark.parametrize("tasks", [1, 3])
def test_a_stateless_chained_peer_may_move_with_its_stateful_peer(tmp_path, tasks):
    def topology(n):
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(0, 1)], ("key", "n")), n)
        b.set_bolt("parse", _Parse(), n).local_or_shuffle_grouping("src")
        return b.create_topology().with_chains(["parse"])

    sp = _savepoint(tmp_path, topology(2), {"src": {k: {enc(SPLITS_KEY): enc(GROUPS)}
                                                     for k in range(2)}})
    new = topology(tasks)
    rescaled = rescale(sp, new, CONF)
    check_restore(rescaled, new, conf=CONF)  # (no refusal: both ends of the chain moved)
    assert rescaled.layout["tasks"]["parse"] == tasks


class _Frame:
    """A ``DataFrameSpout`` without Spark: its blocks are Arrow tables in memory."""

    @staticmethod
    def spout(blocks: int, rows: int):
        import pyarrow as pa

        from connectors.spark.dataframe_spout import DataFrameSpout

        class Local(DataFrameSpout):
            def __init__(self) -> None:  # (no Spark: the blocks are given)
                self.columns = self.outputs = ("id",)
                self._arrow, self._batch_rows, self._msg_ids = False, 1, False
                self._block_refs = [pa.table({"id": list(range(b * rows, (b + 1) * rows))})
                                    for b in range(blocks)]

            def _fetch(self, ref):
                return ref

        return Local()


def _frames(n: int, blocks: int, states=None, groups: int = 8):
    out = []
    for k in range(n):
        s = _Frame.spout(blocks, 5)
        s.open({"topology.max.task.parallelism": groups}, _Context(k, n), _Collector())
        s.init_state(_DictState(dict(states[k]) if states else {}))
        out.append(s)
    return out


@pytest.mark.parametrize("blocks", [3, 20])  # (fewer blocks than the 8 splits, and more)
def test_dataframe_spout_2_to_3_to_1_emits_every_row_once(blocks):
    from connectors.spark.dataframe_spout import DataFrameSpout

    two = _frames(2, blocks)
    emitted = _run(two, 3)
    assert all(s._block >= 0 for s in two)  # (both tasks have blocks, and are inside one)
    old = _snapshot(two)
    three = _frames(3, blocks, [DataFrameSpout.redistribute(old, j, 3) for j in range(3)])
    emitted += _run(three, 4)
    old = _snapshot(three)
    one = _frames(1, blocks, [DataFrameSpout.redistribute(old, 0, 1)])
    emitted += _run(one)
    assert sorted(emitted) == list(range(blocks * 5))


class _EventCollector(_Collector):
    def emit(self, values, stream=None, msg_id=None) -> None:
        self.out.append(tuple(values[:-1]))  # (the event, without its emit time)


@pytest.mark.parametrize("delayed", [False, True])
def test_nexmark_spout_2_to_3_to_1_emits_every_event_once(delayed):
    from benchmarks.nexmark import EventStream, GeneratorConfig, NexmarkGenerator, NexmarkSpout

    config = GeneratorConfig(events=2000, prob_delayed_event=0.3 if delayed else 0.0)

    def spouts(n, states=None):
        out = []
        for k in range(n):
            s = NexmarkSpout(config, kinds=("person", "auction", "bid"), burst=1)
            s.open({"topology.max.task.parallelism": 8}, _Context(k, n), _EventCollector())
            s.init_state(_DictState(dict(states[k]) if states else {}))
            out.append(s)
        return out

    two = spouts(2)
    emitted = _run(two, 300)
    old = _snapshot(two)
    three = spouts(3, [NexmarkSpout.redistribute(old, j, 3) for j in range(3)])
    emitted += _run(three, 200)
    old = _snapshot(three)
    one = spouts(1, [NexmarkSpout.redistribute(old, 0, 1)])
    emitted += _run(one)
    everything = [tuple(e) for _, e in EventStream(NexmarkGenerator(config))]
    assert sorted(emitted, key=repr) == sorted(everything, key=repr)


def test_a_dataframe_spout_state_without_splits_goes_on_at_the_same_parallelism():
    # task 0 of 2 (blocks 0, 2, 4, ...) was in its 2nd block (block 2) with 2 rows out;
    # task 1 had not started
    legacy = _frames(2, 6, [{"position": (1, 2)}, {"position": (-1, 0)}])
    done = set(range(5)) | {10, 11}
    assert sorted(_run(legacy)) == [r for r in range(30) if r not in done]
    old = _snapshot(legacy)
    assert old[0]["position"] == (2, 5) and SPLITS_KEY not in old[0]  # (its 3rd block, 4)


@pytest.mark.parametrize("arrow", [False, True])
@pytest.mark.parametrize("new_n", [1, 2])
def test_a_dataframe_spout_restored_at_a_block_boundary_emits_the_blocks_after_it(arrow, new_n):
    from connectors.spark.dataframe_spout import DataFrameSpout

    one = _frames(1, 3, groups=2)
    for s in one:
        s._arrow, s._batch_rows = arrow, 100  # (arrow: one tuple, a record batch, per block)
    first = _run(one, 1 if arrow else 5)  # (all of block 0, not yet moved on)
    old = _snapshot(one)
    again = _frames(new_n, 3, [DataFrameSpout.redistribute(old, j, new_n) for j in range(new_n)],
                    groups=2)
    for s in again:
        s._arrow, s._batch_rows = arrow, 100
    rest = _run(again)
    if arrow:
        first, rest = ([r for b in out for r in b.column(0).to_pylist()] for out in (first, rest))
    assert sorted(first + rest) == list(range(15))


def test_a_dataframe_spout_state_without_splits_at_a_block_end_goes_on_with_its_next_block():
    # task 0 of 2 (blocks 0, 2, 4) had emitted all 5 rows of its first block
    legacy = _frames(2, 6, [{"position": (0, 5)}, {"position": (0, 5)}])
    assert sorted(_run(legacy)) == [r for r in range(30) if r >= 10]


def test_a_dataframe_spout_state_of_another_block_count_is_refused():
    from connectors.spark.dataframe_spout import DataFrameSpout

    old = _snapshot(_frames(2, 3))
    assert DataFrameSpout.redistribute(old, 0, 1)["blocks"] == 3
    with pytest.raises(ValueError, match="DataFrameSpout task 0: its state is of a frame of "
                                         "3 blocks, this frame has 4"):
        _frames(1, 4, [DataFrameSpout.redistribute(old, 0, 1)])


def test_a_keyed_bolt_whose_key_fields_changed_is_refused_naming_both(tmp_path):
    def topology(n, fields):
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(0, 1)], ("key", "n")), 1)
        b.set_bolt("sum", Sum(), n).fields_grouping("src", fields)
        return b.create_topology()

    sp = _savepoint(tmp_path, topology(2, ("key",)), {"sum": {0: {}, 1: {}}})
    with pytest.raises(SavepointError, match=r"'sum': savepoint has 2 tasks, this topology "
                                             r"has 3, and the savepoint has keyed state "
                                             r"grouped by fields \['key'\].*this topology "
                                             r"has keyed state grouped by fields \['n'\]"):
        rescale(sp, topology(3, ("n",)), CONF)


def test_a_sink_rescales_under_another_key_group_count(tmp_path):
    from topology import TwoPhaseCommitSink

    class Sink(TwoPhaseCommitSink):
        def write(self, tup): pass
        def pre_commit(self, checkpoint_id): return None
        def commit(self, checkpoint_id, transaction): pass
        def abort(self, checkpoint_id, transaction): pass

    def topology(n):
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(0, 1)], ("key", "n")), 1)
        b.set_bolt("sink", Sink(), n).shuffle_grouping("src")
        return b.create_topology()

    txn = {INTERNAL_PREFIX + enc(("txn", 7)): enc(["t"])}
    sp = _savepoint(tmp_path, topology(2), {"sink": {0: txn, 1: {}}})
    conf = {"topology.max.task.parallelism": 16}  # (the savepoint's: 13)
    rescaled = rescale(sp, topology(3), conf)
    assert rescaled.components["sink"] == 3
