"""The acking path's Python cost per tuple tree, stage by stage, in one thread (no Ray, no
threads, no waiting): acking on against off, side by side in one run.

The executors of ``benchmarks/acking.py``'s pipeline (gen → double → count, plus the acker)
are built in this process. Each stage runs on the messages the stage before produced, and
every batch goes through the wire codec both ways (encode at the sender, decode at the
receiver), as between actors. Stages: the spout's emits (with ``msg_id``: the root id, the
pending entry; one target, so no init for the acker), the double bolt (anchored emit; its
ack rides on the child), the count bolt (its ack completes the tree: it answers the spout
itself), the acker (whatever reaches it: nothing on this chain), the spout taking the
answers;
and with ``topology.acker.in.spouts``, the spout taking the bolts' acks itself.
Each figure is the best of five passes over ``--tuples`` tuples, in µs per tuple.

What this leaves out is what a real run adds on top: actor calls (see
``benchmarks/actor_call.py``), waits and several processes sharing two cores.

    python -m benchmarks.acking_stages [--tuples 20000]

Writes benchmarks/results/acking_stages.json; the last line is `key=value ...`.
"""

from __future__ import annotations

import argparse
import gc
import time

import tests.components as pipeline
from actors import (
    decode_batch,
    encode_batch,
    make_executor,
)
from benchmarks._common import write_result


def _cores(ack: bool, in_spouts: bool = False) -> tuple[dict, dict]:
    """The pipeline's executors by component, and the outbox their sinks fill (task →
    ``[(src, stream, values(, anchors)), ...]``, after an encode/decode round trip)."""
    ackers = 1 if ack else 0
    topo = pipeline.build(10**9, msg_ids=ack).with_ackers(ackers, in_spouts)
    workers = {t: 0 for ts in topo.component_tasks.values() for t in ts}
    conf = {"topology.acker.executors": ackers, "topology.max.spout.pending": None,
            "topology.acker.in.spouts": in_spouts}
    cores = {topo.task_component(t): make_executor("stages", topo, conf, t, workers)
             for t in workers}
    outbox: dict = {}
    for core in cores.values():
        sinks = {}
        for d in core.destinations:
            def sink(items, src=core.task_id, dest=d):
                _, _, _, decoded = decode_batch(encode_batch(src, items))
                outbox.setdefault(dest, []).extend((src, *it) for it in decoded)
                return len(items)
            sinks[d] = sink
        core.connect(sinks)
        if core.is_spout:
            core.obj.open(core.conf, core.context, core.collector)
        else:
            core.obj.prepare(core.conf, core.context, core.collector)
    return cores, outbox


def _best(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def stages(n: int, ack: bool, in_spouts: bool = False) -> dict[str, float]:
    """µs per tuple of each stage (acking stages only when ``ack``; with ``in_spouts`` the
    spout is the acker of its own trees, so the acker stage is the spout taking the bolts'
    acks)."""
    cores, outbox = _cores(ack, in_spouts)
    task = {name: c.task_id for name, c in cores.items()}
    gen = cores["gen"]
    out: dict[str, float] = {}

    def spout() -> None:
        outbox.clear()
        gen.ledger.trees.clear()
        for i in range(n):
            gen.collector.emit((i, "k" + str(i % 1000)), msg_id=i if ack else None)
        gen.flush_acks()
        gen.outbox.try_flush_batches()

    def bolt(name: str, inputs: list):
        core = cores[name]

        def run() -> None:
            outbox.clear()
            for el in inputs:
                core.handle(el)
            core.flush_acks()
            core.outbox.try_flush_batches()
        return run

    spout()
    led = gen.ledger
    from_gen, pending = dict(outbox), dict(led.trees)
    out["spout emit"] = _best(spout)
    double = bolt("double", from_gen[task["double"]])
    double()
    from_double = dict(outbox)
    out["double"] = _best(double)
    count = bolt("count", from_double[task["count"]])
    count()
    from_count = dict(outbox)
    out["count"] = _best(count)
    if ack and in_spouts:
        answers = from_double.get(task["gen"], []) + from_count.get(task["gen"], [])
    elif ack:
        acker_task = task["__acker"]
        acker = cores["__acker"]
        # (with ack piggybacking and implicit inits, only count may send anything, and
        # it completes every one-ack tree itself)
        to_acker = (from_gen.get(acker_task, []) + from_double.get(acker_task, [])
                    + from_count.get(acker_task, []))

        def ack_stage() -> None:
            outbox.clear()
            acker.ledger.trees.clear()
            for el in to_acker:
                acker.handle(el)
            acker.flush_acks()
            acker.outbox.try_flush_batches()

        ack_stage()
        # one-ack trees reach the spout from the bolt that completed them; the acker
        # answers for the rest (none in this chain, whose acks all fold into count's)
        answers = from_count.get(task["gen"], []) + outbox.get(task["gen"], [])
        out["acker"] = _best(ack_stage)
    if ack:
        def spout_acks() -> None:  # each pass starts from the pending trees after emit
            led.trees.clear()
            led.trees.update(pending)
            for el in answers:
                gen.handle(el)

        before = gen.acked
        spout_acks()
        assert gen.acked - before == n and not led.trees, "trees left incomplete"
        out["spout acks"] = _best(spout_acks)
    return {k: v / n * 1e6 for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=20000)
    args = ap.parse_args()
    gc.set_threshold(10000, 10, 10)  # as in the executor actors (actors/_gc.py)
    off = stages(args.tuples, False)
    on = stages(args.tuples, True)
    sp = stages(args.tuples, True, in_spouts=True)
    total_off, total_on, total_sp = sum(off.values()), sum(on.values()), sum(sp.values())
    write_result("acking_stages", {
        "tuples": args.tuples, "us_per_tuple_off": off, "us_per_tuple_on": on,
        "us_per_tuple_in_spouts": sp, "total_off": total_off, "total_on": total_on,
        "total_in_spouts": total_sp, "ratio": total_off / total_on,
        "ratio_in_spouts": total_off / total_sp})
    print(f"{'stage':11} {'off':>8} {'acker':>8} {'in spouts':>10}  (µs per tuple)")
    for k in on:
        print(f"{k:11} {off.get(k, 0.0):8.2f} {on[k]:8.2f} {sp.get(k, 0.0):10.2f}")
    print(f"us_per_tree_on={total_on:.2f} us_per_tree_in_spouts={total_sp:.2f} "
          f"us_per_tuple_off={total_off:.2f} single_thread_ratio={total_off / total_on:.2f} "
          f"single_thread_ratio_in_spouts={total_off / total_sp:.2f}")


if __name__ == "__main__":
    main()
