"""Storm's word count, as a job: sentences → split (shuffle) → count (fields on "word") →
totals, with acking on; the job checks its totals against ``collections.Counter``.

    python examples/wordcount.py [--repeat 2000]
    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python examples/wordcount.py

With ``--forever`` the sentences never end (an unbounded stream, no acking): the job runs
until the topology is killed (``storm-on-ray kill wordcount``), then exits 0.

Runs on the Ray cluster in RAY_ADDRESS (as ``ray job submit`` sets it), or an embedded one.
Exits 0 only if the check passes.
"""

from __future__ import annotations

import argparse
import collections
import itertools

from cluster import LocalCluster, TopologyFailed
from topology import Bolt, CollectorBolt, IterableSpout, TopologyBuilder

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SplitSentence(Bolt):
    outputs = ("word",)

    def prepare(self, conf, context, collector):
        self.emit = collector.emit

    def execute(self, tup):
        for word in tup.values[0].split():
            self.emit((word,))


class WordCount(Bolt):
    """Counts per word; emits (word, count) for each word at the end of the stream."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.emit = collector.emit
        self.counts = collections.Counter()

    def execute(self, tup):
        self.counts[tup.values[0]] += 1

    def finish(self):
        for word, n in self.counts.items():
            self.emit((word, n))


def endless_sentences():
    """The sentences, over and over (``--forever``)."""
    return itertools.cycle(SENTENCES)


def build(spout: IterableSpout) -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("sentences", spout)
    b.set_bolt("split", SplitSentence(), parallelism_hint=2).shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(), parallelism_hint=2).fields_grouping("split", ["word"])
    b.set_bolt("totals", CollectorBolt()).global_grouping("count")
    return b


def forever() -> int:
    """Run the word count on an endless stream until the topology is killed."""
    b = build(IterableSpout(factory=endless_sentences, fields=("sentence",)))
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("wordcount", {"topology.acker.executors": 0},
                                         b.create_topology())
        print("wordcount runs until killed: storm-on-ray kill wordcount", flush=True)
        try:
            handle.wait()
        except TopologyFailed:
            pass
        cluster.topologies.pop("wordcount", None)
    print("wordcount was killed")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--forever", action="store_true",
                    help="an endless stream: run until the topology is killed")
    args = ap.parse_args()
    if args.forever:
        return forever()
    sentences = SENTENCES * args.repeat
    b = build(IterableSpout(sentences, fields=("sentence",), msg_ids=True))
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("wordcount", {}, b.create_topology())
        if not handle.wait(600):
            print(handle.stats().summary())
            return 1
        stats = handle.stats()
        got = {w: n for *_, (w, n) in handle.collected("totals")}
        cluster.kill_topology("wordcount")
    print(stats.summary())
    expected = collections.Counter(w for s in sentences for w in s.split())
    for word, n in sorted(got.items(), key=lambda kv: -kv[1])[:5]:
        print(f"{word:>10} {n:>8,}")
    if got != expected:
        print(f"CHECK FAILED: {len(got)} words counted, {len(expected)} expected")
        return 1
    print(f"CHECK PASSED: {len(got)} words, {sum(got.values()):,} counted, "
          f"{stats.total('sentences', 'acked'):,} sentences acked")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
