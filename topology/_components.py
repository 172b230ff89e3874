"""Spouts, bolts, the output declarer, the context and the collectors' interface.

Storm's ``IRichSpout`` / ``IRichBolt`` in snake_case. A component object is built on the
driver, pickled, and rebuilt inside each of its tasks' executor actors: one instance per
task, so instance attributes are per-task state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from topology._errors import TopologyError
from topology._fields import Fields
from topology._tuple import Tuple

DEFAULT_STREAM = "default"


class OutputFieldsDeclarer:
    """Collects the streams a component declares (Storm's ``OutputFieldsDeclarer``)."""

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self.streams: dict[str, Fields] = {}
        self.direct: set[str] = set()

    def declare(self, fields: Fields | Sequence[str], stream_id: str = DEFAULT_STREAM,
                direct: bool = False) -> None:
        """Declare ``stream_id`` with ``fields``.

        Raises:
            TopologyError: the stream is declared twice or its id is not a string.
        """
        if not isinstance(stream_id, str) or not stream_id or stream_id.startswith("__"):
            raise TopologyError(f"component {self.component_id!r}: invalid stream id "
                                f"{stream_id!r} (names starting with '__' are reserved)")
        if stream_id in self.streams:
            raise TopologyError(f"component {self.component_id!r} declares stream "
                                f"{stream_id!r} twice")
        self.streams[stream_id] = fields if isinstance(fields, Fields) else Fields(fields)
        if direct:
            self.direct.add(stream_id)

    def declare_stream(self, stream_id: str, fields: Fields | Sequence[str],
                       direct: bool = False) -> None:
        """Storm's ``declareStream(streamId, fields)``."""
        self.declare(fields, stream_id=stream_id, direct=direct)


class _Component:
    """Shared behaviour of spouts and bolts: output declaration."""

    #: Fields of the default stream, e.g. ``outputs = ("word", "count")``.
    outputs: Sequence[str] | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams; the default uses :attr:`outputs` for the default stream."""
        if self.outputs is not None:
            declarer.declare(Fields(tuple(self.outputs)))

    def get_component_configuration(self) -> dict[str, Any] | None:
        """Per-component config overrides (Storm's ``getComponentConfiguration``)."""
        return None


class Spout(_Component):
    """A source of tuples (Storm's ``ISpout``).

    The executor calls :meth:`next_tuple` in a loop on its single executor thread; it must
    not block for long (return without emitting when there is nothing to emit, and the
    executor idles under ``topology.spout.wait.strategy``). Raising ``StopIteration`` means
    the spout is exhausted: an end-of-stream marker then flows down every edge.
    """

    def open(self, conf: dict, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once in the task, before any other method. Keep ``collector``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples through the collector; raise ``StopIteration`` at the end."""
        raise NotImplementedError

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if you can."""

    def activate(self) -> None:
        """The topology was activated."""

    def deactivate(self) -> None:
        """The topology was deactivated: ``next_tuple`` is not called until activation."""

    def close(self) -> None:
        """The task is shutting down (not guaranteed on a process crash)."""

    def drain(self) -> None:
        """The topology drains (``handle.drain()``; ours, Storm has none): take no new
        input; emit only replays, then raise ``StopIteration`` from ``next_tuple`` once
        nothing is left, so the stream ends and windows downstream fire. Called once, on
        the executor thread. A spout that does not override it is ended by the executor:
        ``next_tuple`` is not called again, and its pending tuples are not replayed."""

    # Driver-side hooks, for spouts fed by something the driver runs (a Spark query):
    # called on the spout object the driver built, never in a task.
    def on_submit(self, handle: Any) -> None:
        """The topology's actors run (``submit``): start the driver-side source."""

    def on_drain(self) -> None:
        """``handle.drain()`` began: the driver-side source stops taking input."""

    def on_stop(self) -> None:
        """The topology was killed, or completed after a drain: stop the driver-side
        source (it must not wait for the topology any more)."""

    #: True for a spout whose source waits for acks before it moves on (a Spark streaming
    #: query with msg ids: its next micro-batch starts once the current one is acked). The
    #: plan then has windowed bolts downstream ack on entry, since only new input moves
    #: event time (``topology.bolts.window.ack.on.entry``).
    acks_hold_source: bool = False

    #: False for a spout that emits without msg ids: its tuples are in no tree, so a
    #: rollback cannot fail them for a replay. A spout that keeps no position and says so
    #: is refused at submit in a topology that checkpoints with acking on (docs/state.md,
    #: the replay contract); one that emits without a msg id there anyway fails its task at
    #: that emit (Storm's ``AnchoringOutputCollector``). A ``StatefulSpout`` needs no msg
    #: ids: its restored position rewinds it.
    emits_msg_ids: bool = True

    #: True for a spout whose source takes a tuple as done once it is emitted
    #: (``StreamingDataFrameSpout(msg_ids=False)``: Spark commits a micro-batch as it
    #: enters the hand-off): no restored position can bring back what was emitted after
    #: the last checkpoint, so such a spout is refused in any topology that checkpoints,
    #: acking on or off (docs/state.md, the replay contract).
    commits_on_entry: bool = False

    #: Items the whole component (all its tasks) will emit, when the spout knows it (a
    #: finite source such as a DataFrame); read on the driver for progress bars.
    total_items: int | None = None

    def progress(self) -> int | None:
        """How many source items this task has taken so far (replays not counted), or
        None when the spout does not count. Called from another thread than
        ``next_tuple`` (read a counter, do not compute); feeds ``handle.progress()``."""
        return None


class Bolt(_Component):
    """A processing step (Storm's ``IBolt``), plus Flink's ``endInput`` as :meth:`finish`.

    Attributes:
        auto_ack: True (default) behaves as Storm's ``BasicBolt``: emits made during
            ``execute`` without ``anchors`` are anchored to the input, and the input is
            acked when ``execute`` returns (failed when it raises) unless the bolt acked or
            failed it itself. Set False for Storm's ``IRichBolt`` behaviour: anchor, ack
            and fail explicitly through the collector.
    """

    auto_ack: bool = True

    def prepare(self, conf: dict, context: TopologyContext, collector: OutputCollector) -> None:
        """Called once in the task before any tuple. Keep ``collector``."""

    def execute(self, tup: Tuple) -> None:
        """Process one tuple; may emit. An exception is reported and the next tuple follows."""
        raise NotImplementedError

    def finish(self) -> None:
        """Called once when every input of this task has ended; may emit (totals, say).
        In a topology that checkpoints, it runs at the end of input, before the stream's
        final checkpoint, so what it emits reaches two-phase-commit sinks and stateful
        bolts exactly once (docs/state.md); a ``finish()`` that raises fails that round,
        and one that keeps raising fails the topology."""

    def cleanup(self) -> None:
        """The task is shutting down."""


class BoundedMultiInput(ABC):
    """A bolt the executor tells about each upstream task's end of input, as Flink's
    ``BoundedMultiInput.endInput`` (the per-input form of :meth:`Bolt.finish`).

    The executor checks ``isinstance(bolt, BoundedMultiInput)`` once, at start, and then
    calls both methods on its executor thread. A windowed bolt's executor implements it:
    an upstream task that ended no longer holds the watermark back.
    """

    @abstractmethod
    def upstream_ended(self, task: int) -> None:
        """Upstream task ``task`` ended its stream (or drained): nothing new will come
        from it, though replays may."""

    def end_of_pass(self) -> None:  # noqa: B027 (an optional hook: no-op by default)
        """The executor took every element its queue held at the start of the pass
        (called only once every upstream task ended). The default does nothing."""


class BatchBolt(Bolt):
    """A bolt whose :meth:`execute_batch` runs once per batch of input tuples, so that
    vectorised work (NumPy, pandas, Arrow, a model call) pays its per-call cost per batch,
    not per tuple. Storm has no such bolt (Trident batches whole streams); this is the
    runtime's own batching, surfaced: a batch holds the tuples the executor takes from its
    receive queue in one pass, at most ``max_batch_size`` (default
    ``topology.producer.batch.size``), so under load batches are full and at low rates a
    tuple waits for no one.

    Acking (with ``auto_ack``, the default): after ``execute_batch`` returns, every input
    not acked or failed by the bolt is acked; if it raises, every such input is failed (so
    its spout replays it) and the error is reported once per interval. Emits are anchored
    only to the tuples passed as ``anchors=`` (pass the inputs an output derives from; an
    unanchored emit leaves the tuple tree).

    Attributes:
        max_batch_size: cap on one batch (tuples); None for the config's batch size.
    """

    max_batch_size: int | None = None

    def execute_batch(self, tuples: list[Tuple]) -> None:
        """Process a non-empty list of tuples (in arrival order); may emit."""
        raise NotImplementedError

    def execute(self, tup: Tuple) -> None:
        self.execute_batch([tup])


@dataclass(frozen=True)
class TopologyContext:
    """What a task knows of its place in the topology (Storm's ``TopologyContext``).

    Attributes:
        topology_name: the name given at submit.
        component_id: this component's id.
        task_id: this task's id (global across the topology, from 1).
        task_index: index of this task among its component's tasks (0-based).
        component_tasks: every component's task ids.
        worker_index: the worker (placement group) holding this task.
        sources: for each ``(component, stream)`` this task subscribes to, its ``Fields``.
        submit_id: the id of the submit running this task, 8 lowercase hex digits: every
            incarnation of the task (a restart, a rollback) sees the same one, each submit
            (a restore from a savepoint too) a new one, as Storm's topology id
            (``TopologyContext.getStormId``); None in a context built by hand. Names that
            must not collide between runs of one topology use it (``ParquetSink``'s files,
            as Flink's ``FileSink`` puts a uid in each part file's name).
    """

    topology_name: str
    component_id: str
    task_id: int
    task_index: int
    component_tasks: dict[str, list[int]]
    worker_index: int = 0
    sources: dict[tuple[str, str], Fields] = field(default_factory=dict)
    submit_id: str | None = None

    def get_this_task_id(self) -> int:
        return self.task_id

    def get_this_task_index(self) -> int:
        return self.task_index

    def get_this_component_id(self) -> str:
        return self.component_id

    def get_component_tasks(self, component_id: str) -> Sequence[int]:
        return list(self.component_tasks.get(component_id, []))

    def get_component_id(self, task_id: int) -> str:
        for comp, tasks in self.component_tasks.items():
            if task_id in tasks:
                return comp
        raise KeyError(f"no task {task_id} in topology {self.topology_name!r}")


class SpoutOutputCollector:
    """What a spout emits through (Storm's ``SpoutOutputCollector``). Never blocks.

    Attributes:
        fail_reason: ours (Storm's ``fail`` says nothing of why): during the spout's
            ``fail(msg_id)``, why that tuple's tree failed, a short str such as
            ``"ValueError: bad row (in bolt 'parse')"``, ``"failed by bolt 'parse'"``,
            ``"timeout"`` or ``"could not serialise: ..."`` (None when unknown, and
            outside ``fail``). ``RetryService`` puts it into the dead letter.
    """

    fail_reason: str | None = None

    def emit(self, values: Sequence, stream: str = DEFAULT_STREAM,
             msg_id: Any = None) -> Sequence[int]:
        """Emit ``values`` on ``stream``; returns the target task ids (a tuple).

        Raises:
            EmitError: wrong number of values, or a stream this spout did not declare.
        """
        raise NotImplementedError

    def emit_direct(self, task: int, values: Sequence, stream: str = DEFAULT_STREAM,
                    msg_id: Any = None) -> None:
        raise NotImplementedError

    def report_error(self, exc: BaseException) -> None:
        raise NotImplementedError


class OutputCollector:
    """What a bolt emits through (Storm's ``OutputCollector``). Never blocks."""

    def emit(self, values: Sequence, stream: str = DEFAULT_STREAM,
             anchors: Sequence[Tuple] | Tuple | None = None) -> Sequence[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors``; returns the target task ids
        (a tuple).

        Raises:
            EmitError: wrong number of values, or a stream this bolt did not declare.
        """
        raise NotImplementedError

    def emit_direct(self, task: int, values: Sequence, stream: str = DEFAULT_STREAM,
                    anchors: Sequence[Tuple] | Tuple | None = None) -> None:
        raise NotImplementedError

    def ack(self, tup: Tuple) -> None:
        """Mark ``tup`` done: its tuple tree completes once every tuple in it is acked."""
        raise NotImplementedError

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        """Fail ``tup``'s tuple tree now: the spout's ``fail(msg_id)`` follows, with
        ``reason`` as its ``collector.fail_reason`` (ours; by default the exception being
        handled, if any, naming this bolt, else ``"failed by bolt '<id>'"``)."""
        raise NotImplementedError

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the ``topology.message.timeout.secs`` clock of ``tup``'s tuple tree."""
        raise NotImplementedError

    def report_error(self, exc: BaseException) -> None:
        raise NotImplementedError
