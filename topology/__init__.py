"""The user API: spouts, bolts, streams, fields, groupings and Storm's config keys.

Pure Python: importing this package never imports Ray (only ``DataFrameSpout`` and
``StreamingDataFrameSpout`` do, when built). Names follow Storm's, in snake_case.
"""

from topology._builder import (
    ACKER_ID,
    GROUPINGS,
    BoltDeclarer,
    ComponentSpec,
    Grouping,
    SpoutDeclarer,
    StormTopology,
    TopologyBuilder,
)
from topology._components import (
    DEFAULT_STREAM,
    BatchBolt,
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
)
from topology._config import CONFIG_KEYS, DEFAULTS, ConfigKey, effective_batch_size, make_config
from topology._dataframe_spout import DataFrameSpout
from topology._dead_letters import (
    DEAD_LETTER_FIELDS,
    DEAD_LETTER_STREAM,
    DEAD_LETTERS_ID,
    DeadLetter,
    RetryService,
)
from topology._errors import ConfigError, EmitError, TopologyError
from topology._fields import Fields
from topology._sinks import DatasetSink, DeadLetterSink
from topology._spouts import CollectorBolt, IterableSpout
from topology._streaming_spout import StreamingDataFrameSpout
from topology._tuple import SYSTEM_COMPONENT_ID, SYSTEM_TICK_STREAM_ID, Tuple
from topology._windowed_executor import WindowedBoltExecutor
from topology._windows import Count, Duration, TupleWindow, WindowedBolt

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
]
