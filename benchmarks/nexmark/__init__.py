"""Nexmark in Python: a deterministic event generator, queries q0-q4 as storm-on-ray
topologies, their DuckDB checks and the bench (docs/nexmark.md).

Run it as ``python -m benchmarks.nexmark generate|run|bench``. Public here: the generator
(:class:`GeneratorConfig`, :class:`NexmarkGenerator`, :class:`EventStream`,
:class:`ColumnarGenerator`, the event types), :func:`write_events` (the Parquet files),
:data:`QUERIES` and :func:`run_query` (the topologies), :func:`check` (DuckDB) and
:func:`main` (the command).
"""

from benchmarks.nexmark._check import CheckResult, check, query_sql
from benchmarks.nexmark._cli import main
from benchmarks.nexmark._columnar import ColumnarGenerator
from benchmarks.nexmark._generator import (
    BASE_TIME_MS,
    DEFAULT_RATE,
    EventStream,
    GeneratorConfig,
    NexmarkGenerator,
    kind_of,
    last_auction,
    last_person,
    task_event_count,
    task_event_id,
)
from benchmarks.nexmark._model import EMIT_TIME, FIELDS, KINDS, Auction, Bid, Person
from benchmarks.nexmark._parquet import write_events
from benchmarks.nexmark._queries import QUERIES, RESULT_COLUMNS, NexmarkSpout, Query
from benchmarks.nexmark._run import QueryRun, run_query

__all__ = [
    "Auction", "BASE_TIME_MS", "Bid", "CheckResult", "ColumnarGenerator", "DEFAULT_RATE",
    "EMIT_TIME", "EventStream", "FIELDS", "GeneratorConfig", "KINDS", "NexmarkGenerator",
    "NexmarkSpout", "Person", "QUERIES", "Query", "QueryRun", "RESULT_COLUMNS", "check",
    "kind_of", "last_auction", "last_person", "main", "query_sql", "run_query",
    "task_event_count", "task_event_id", "write_events",
]
