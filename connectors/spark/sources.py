"""Which Spark streaming sources bound the rows of one micro-batch (pure; no Spark here).

A held ``foreachBatch`` holds Spark's trigger, but a source whose rows follow wall time (the
``rate`` source) or whose backlog is read whole (a file source without
``maxFilesPerTrigger``, Kafka without ``maxOffsetsPerTrigger``) sends everything that came
meanwhile in the next micro-batch (Spark's "Structured Streaming Programming Guide", input
sources; the Kafka source's ``maxOffsetsPerTrigger`` is in Spark's "Structured Streaming +
Kafka Integration Guide"). Backpressure reaches such a source only in micro-batches, not in
rows, so the hand-off's memory would follow the hold. :func:`source_problems` says which
sources of a query do that.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: file formats Spark's file source reads (``DataStreamReader.format``)
FILE_FORMATS = frozenset({"csv", "json", "parquet", "orc", "text", "avro", "binaryfile",
                          "xml"})

#: source → (option that bounds its rows per trigger, what to do if it is missing)
BOUNDING_OPTIONS = {
    "file": ("maxFilesPerTrigger",
             "set .option('maxFilesPerTrigger', N) on the readStream"),
    "kafka": ("maxOffsetsPerTrigger",
              "set .option('maxOffsetsPerTrigger', N) on the readStream"),
}


class StreamSource(NamedTuple):
    """One leaf of a streaming query's plan.

    Attributes:
        name: the source's short name (``rate-micro-batch``, ``kafka``, ``csv``...).
        options: its option names (Spark's option keys are case-insensitive).
        file: True for Spark's file source.
    """

    name: str
    options: frozenset[str]
    file: bool = False


def parse_scala_map_keys(text: str) -> frozenset[str]:
    """The keys of a Scala ``Map(k -> v, ...)``'s ``toString`` (what Py4J gives for a
    file source's options), lower-cased."""
    return frozenset(k.lower() for k in re.findall(r"(?:Map\(|, )([A-Za-z0-9_.]+) -> ", text))


def source_problems(sources: list[StreamSource]) -> tuple[list[str], list[str]]:
    """Sort a query's sources into those that cannot bound rows per micro-batch and
    those this module does not know.

    Returns:
        ``(unbounded, unknown)``: for each, one message per source, saying what to set.
    """
    unbounded, unknown = [], []
    for s in sources:
        name = s.name.lower()
        opts = {o.lower() for o in s.options}
        if name == "rate-micro-batch":
            continue  # rowsPerBatch is required by Spark
        if name == "rate":
            unbounded.append("the 'rate' source makes rows with wall time, so a held "
                             "micro-batch is followed by a bigger one; use "
                             "format('rate-micro-batch').option('rowsPerBatch', N)")
            continue
        if name == "socket":
            unbounded.append("the 'socket' source reads whatever arrived; it cannot bound "
                             "rows per micro-batch")
            continue
        kind = "file" if s.file or name in FILE_FORMATS else name
        if kind in BOUNDING_OPTIONS:
            option, todo = BOUNDING_OPTIONS[kind]
            if option.lower() not in opts:
                unbounded.append(f"the {s.name!r} source has no {option}, so a micro-batch "
                                 f"after a hold reads the whole backlog; {todo}")
            continue
        unknown.append(f"source {s.name!r}: not known to bound rows per micro-batch; "
                       f"the hand-off bounds micro-batches, and one micro-batch enters "
                       f"whole whatever its size")
    return unbounded, unknown


def query_sources(df) -> list[StreamSource]:
    """The streaming sources of a streaming DataFrame, read from its logical plan through
    Py4J (``StreamingRelationV2``: name and options; ``StreamingRelation``: the file
    source and other V1 sources)."""
    out = []
    it = df._jdf.queryExecution().logical().collectLeaves().iterator()
    while it.hasNext():
        leaf = it.next()
        cls = leaf.getClass().getSimpleName()
        if cls == "StreamingRelationV2":
            keys = leaf.extraOptions().asCaseSensitiveMap().keySet().toArray()
            out.append(StreamSource(str(leaf.sourceName()), frozenset(str(k) for k in keys)))
        elif cls == "StreamingRelation":
            ds = leaf.dataSource()
            name = str(ds.className())
            out.append(StreamSource(name, parse_scala_map_keys(str(ds.options().toString())),
                                    str(leaf.sourceName()).startswith("FileSource")))
    return out
