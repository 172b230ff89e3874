"""The user API: spouts, bolts, streams, fields, groupings, windows, sinks and Storm's
config keys. Names follow Storm's, in snake_case.

Pure Python: importing this package never imports Ray, pyarrow or pyspark. The Spark
spouts (``DataFrameSpout``, ``StreamingDataFrameSpout``) live in ``connectors.spark`` and
the windowed executor in ``actors.windowing``; both are re-exported here on first use
(PEP 562), so ``from topology import DataFrameSpout`` keeps working.
"""

import importlib as _importlib

from topology._builder import (
    ACKER_ID,
    FORWARD,
    GROUPINGS,
    BoltDeclarer,
    ComponentSpec,
    Grouping,
    SpoutDeclarer,
    StormTopology,
    TopologyBuilder,
    dead_letter_consumers,
)
from topology._components import (
    DEFAULT_STREAM,
    BatchBolt,
    Bolt,
    BoundedMultiInput,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
)
from topology._config import CONFIG_KEYS, DEFAULTS, ConfigKey, effective_batch_size, make_config
from topology._db_sink import DbApiSink
from topology._dead_letters import (
    DEAD_LETTER_FIELDS,
    DEAD_LETTER_STREAM,
    DEAD_LETTERS_ID,
    DeadLetter,
    RetryService,
)
from topology._errors import ConfigError, EmitError, TopologyError
from topology._fields import Fields
from topology._parquet_sink import ParquetSink
from topology._sinks import DatasetSink, DeadLetterSink
from topology._spouts import CollectorBolt, IterableSpout
from topology._state import KeyValueState, StateError, StatefulBolt, StatefulSpout
from topology._tuple import SYSTEM_COMPONENT_ID, SYSTEM_TICK_STREAM_ID, TICK_FIELDS, Tuple
from topology._two_phase import TwoPhaseCommitSink
from topology.joins import IntervalJoinBolt, JoinBolt
from topology.windows import (
    Count,
    Duration,
    StatefulWindowedBolt,
    TupleWindow,
    WindowedBolt,
    WindowSpec,
)

__all__ = [
    "ACKER_ID", "BatchBolt", "Bolt", "BoltDeclarer", "CONFIG_KEYS", "CollectorBolt", "Count",
    "ComponentSpec", "ConfigError", "ConfigKey", "DEAD_LETTERS_ID", "DEAD_LETTER_FIELDS",
    "DEAD_LETTER_STREAM", "DEFAULTS", "DEFAULT_STREAM", "DataFrameSpout", "DatasetSink",
    "DeadLetter", "DeadLetterSink", "Duration", "EmitError", "Fields", "GROUPINGS", "Grouping",
    "IterableSpout", "OutputCollector", "OutputFieldsDeclarer", "RetryService",
    "SYSTEM_COMPONENT_ID", "SYSTEM_TICK_STREAM_ID", "Spout", "SpoutDeclarer",
    "StreamingDataFrameSpout",
    "SpoutOutputCollector", "StormTopology", "TopologyBuilder", "TopologyContext",
    "TopologyError", "Tuple", "TupleWindow", "WindowedBolt", "WindowedBoltExecutor",
    "effective_batch_size", "make_config",
    "BoundedMultiInput", "FORWARD", "TICK_FIELDS", "WindowSpec", "dead_letter_consumers",
    "KeyValueState", "StateError", "StatefulBolt", "StatefulSpout", "StatefulWindowedBolt",
    "DbApiSink", "ParquetSink", "TwoPhaseCommitSink", "IntervalJoinBolt", "JoinBolt",
]

#: names this package gives from the packages beside it, imported on first use
_LAZY = {"DataFrameSpout": "connectors.spark.dataframe_spout",
         "StreamingDataFrameSpout": "connectors.spark.streaming_spout",
         "WindowedBoltExecutor": "actors.windowing.executor"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topology' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value
