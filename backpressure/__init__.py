"""The flow-control core, free of I/O: bounded queues, batch inserters, wait strategies,
flow-control policies and load shedding.

Storm 2.0's messaging and backpressure model (STORM-2306, "Redesign Messaging Subsystem and
switch to JCTools Queues", and its design doc "Backpressure model for Storm 2.0"). Nothing
here imports Ray: actors carry out what these classes decide, and every class is unit-tested
without a cluster.
"""

from backpressure._debloat import DebloatPolicy
from backpressure._inserter import BatchInserter, QueueInterrupted
from backpressure._jcqueue import JCQueue, JCQueueMetrics, make_receive_queue
from backpressure._nak import NakPolicy
from backpressure._policy import (
    POLICIES,
    Control,
    FlowControlPolicy,
    Report,
    Storm2Policy,
    make_policy,
)
from backpressure._rate import RateTracker
from backpressure._shed import SITE_ARRIVAL, SITE_QUEUE, LoadShedder
from backpressure._tracker import (
    BackPressureStatus,
    BackPressureTracker,
    RemoteBackPressure,
    WorkerBackPressure,
    next_status_id,
)
from backpressure._wait import (
    SITUATIONS,
    ParkWaitStrategy,
    ProgressiveWaitStrategy,
    SleepWaitStrategy,
    WaitStrategy,
    make_wait_strategy,
)
from backpressure._watermark import WatermarkPolicy

__all__ = [
    "FlowControlPolicy", "POLICIES", "Report", "Storm2Policy", "make_policy", "Control",
    "WatermarkPolicy", "NakPolicy", "DebloatPolicy",
    "BackPressureStatus", "BackPressureTracker", "RemoteBackPressure", "WorkerBackPressure",
    "next_status_id", "BatchInserter", "JCQueue", "JCQueueMetrics", "make_receive_queue",
    "ParkWaitStrategy",
    "ProgressiveWaitStrategy", "QueueInterrupted", "RateTracker", "SITUATIONS",
    "SleepWaitStrategy", "WaitStrategy", "make_wait_strategy", "LoadShedder", "SITE_ARRIVAL",
    "SITE_QUEUE",
]
