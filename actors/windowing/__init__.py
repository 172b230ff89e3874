"""Windowing, the runtime's side: the window engine (triggers, eviction, watermarks) and
the windowed executor that runs a user's ``topology.WindowedBolt``.

Storm keeps ``org.apache.storm.windowing`` (its ``WindowManager``, trigger and eviction
policies, ``WaterMarkEventGenerator``) apart from the API a user writes against; so do we:
what a user writes (``Count``, ``Duration``, ``WindowedBolt``, ``TupleWindow``, and the
``WindowSpec`` that checks a window's settings when the topology is built) is
``topology.windows``. Pure Python, no Ray.
"""

from actors.windowing.engine import EXPIRE_EVENTS_THRESHOLD, Fire, WindowEngine
from actors.windowing.executor import ACK_ON_ENTRY, WindowedBoltExecutor
from actors.windowing.timestamps import BadTimestamp, extract_timestamp

__all__ = ["ACK_ON_ENTRY", "EXPIRE_EVENTS_THRESHOLD", "BadTimestamp", "Fire", "WindowEngine",
           "WindowedBoltExecutor", "extract_timestamp"]
