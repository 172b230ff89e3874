"""What a restore at another parallelism costs: ``rescale_restore_vs_same``.

A savepoint of a word count's keyed state (``--keys`` keys, 100k by default; 128 key
groups) taken at 2 tasks is restored at 2 tasks and at 4, without Ray, by the steps a
submit and its tasks take: ``read_savepoint``; ``rescale`` (at 4: each new task's key
groups taken from the old tasks, ``actors/state/_rescale.py``; at 2 nothing to do);
``check_restore``; ``seed_provider`` into a new local provider (SQLite); then each task's
``restore`` of its key groups, one after the other (on a cluster they run in parallel in
their own processes; their sum is counted here, the upper bound of the tasks' part).
The savepoint is written by ``write_savepoint`` from a state built here, in the format a
running topology's ``handle.savepoint`` writes. The two sides alternate ``--reps`` times;
the ratio is of the medians of the total (submit side + tasks' restores).

    python -m benchmarks.rescale [--keys 100000] [--reps 3]

Writes benchmarks/results/rescale.json; the last line is ``rescale_restore_vs_same=...
restore_s_same=... restore_s_rescaled=...``. ``benchmarks/state.py --parts rescale`` runs
the same part.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from actors._codec import value_encoder
from actors.state import keyed_state
from actors.state._rescale import key_groups_for, rescale
from actors.state.providers import LocalProvider
from actors.state.savepoints import (
    check_restore,
    describe,
    read_savepoint,
    seed_provider,
    write_savepoint,
)
from benchmarks._common import write_result
from tests.components import KeyCycleSpout, StatefulWordCount
from topology import TopologyBuilder

CONF: dict = {}  # (128 key groups: the default)


def _topology(tasks: int):
    b = TopologyBuilder()
    b.set_spout("src", KeyCycleSpout(10, 10), 1)
    b.set_bolt("count", StatefulWordCount(), tasks).fields_grouping("src", ("word",))
    return b.create_topology()


def make_savepoint(keys: int, path: Path) -> str:
    """A savepoint of ``keys`` word counts held by the 2 tasks of ``count``."""
    topo = _topology(2)
    enc = value_encoder()
    tasks = topo.component_tasks["count"]
    state: dict = {"count": {t: {} for t in tasks}}
    for t in tasks:
        kg, groups = keyed_state(topo, "count", t, CONF)
        for i in range(keys):
            if kg(f"k{i}") in groups:
                state["count"][t][enc(f"k{i}")] = enc(i % 1000)
    return write_savepoint(str(path), "wc", 5, state,
                           {c: list(t) for c, t in topo.component_tasks.items()},
                           describe(topo, CONF))


def restore_once(path: str, tasks: int, root: Path) -> dict:
    """The submit's and the tasks' steps of a restore of ``path`` at ``tasks`` tasks;
    seconds of each side, and the keys restored."""
    topo = _topology(tasks)
    t0 = time.perf_counter()
    sp = rescale(read_savepoint(path), topo, CONF)
    check_restore(sp, topo, conf=CONF)
    provider = LocalProvider(str(root), "wc", f"s{time.monotonic_ns()}")
    cid = seed_provider(provider, sp, topo, lambda c, t: key_groups_for(
        sp, c, keyed_state(topo, c, t, CONF)[0]))  # (as cluster/_submit.py seeds)
    t1 = time.perf_counter()
    restored = 0
    for t in topo.component_tasks["count"]:
        store = provider.task_store("count", t)
        restored += len(store.restore(cid, keyed_state(topo, "count", t, CONF)[1]))
        store.close()
    t2 = time.perf_counter()
    provider.close()
    shutil.rmtree(provider.root, ignore_errors=True)
    return {"submit_s": t1 - t0, "tasks_s": t2 - t1, "total_s": t2 - t0, "keys": restored}


def rescale_restore(keys: int, reps: int) -> dict:
    """``reps`` restores at 2 and at 4 tasks, alternating; medians and their ratio.

    Raises:
        AssertionError: a restore that did not give back every key.
    """
    root = Path(tempfile.mkdtemp(prefix="rescale-bench-"))
    try:
        path = make_savepoint(keys, root / "sp")
        runs: dict = {2: [], 4: []}
        for rep in range(reps):
            for tasks in ((2, 4) if rep % 2 == 0 else (4, 2)):
                r = restore_once(path, tasks, root / "ckpt")
                assert r["keys"] == keys, f"{r['keys']} of {keys} keys restored at {tasks}"
                runs[tasks].append(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(tasks: int, what: str) -> float:
        return round(statistics.median(r[what] for r in runs[tasks]), 4)
    return {"keys": keys, "reps": reps, "runs": runs,
            "same": {w: med(2, w) for w in ("submit_s", "tasks_s", "total_s")},
            "rescaled": {w: med(4, w) for w in ("submit_s", "tasks_s", "total_s")},
            "ratio": round(med(4, "total_s") / med(2, "total_s"), 3)}


def closing_line(r: dict) -> str:
    return (f"rescale_restore_vs_same={r['ratio']:.3f} restore_s_same={r['same']['total_s']:.3f}"
            f" restore_s_rescaled={r['rescaled']['total_s']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    r = rescale_restore(args.keys, args.reps)
    write_result("rescale", {"command": "python -m benchmarks.rescale", "args": vars(args),
                             **r})
    for side in ("same", "rescaled"):
        print(f"{side:9s} submit {r[side]['submit_s']:.3f} s, tasks {r[side]['tasks_s']:.3f} s"
              f", total {r[side]['total_s']:.3f} s")
    print(closing_line(r))


if __name__ == "__main__":
    main()
