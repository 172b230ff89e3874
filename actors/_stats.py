"""One task's statistics as one typed record, built where the numbers are.

:class:`TaskStats` is the only definition of the stats schema: the executor builds it
(:func:`task_stats`) from its rooms (ledger, inbound side, outbox, policy, queue) and from
the last closed metrics interval (:class:`IntervalMetrics`, made by
``actors._metrics.TaskMetrics``); the executor actor adds its sinks' figures and returns
it; ``TopologyHandle.stats()``, the CLI, the notebook view and the Ray metrics export read
its fields. Pure: no Ray import, so drivers and tests read it anywhere.

Sources: Storm UI's per-executor stats and Storm 2.0's ``JCQueueMetrics`` (Storm docs,
"Storm UI REST API"); Flink's busy / idle / backpressured time and levels (Flink docs,
"Monitoring Back Pressure").
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class IntervalMetrics:
    """One closed metrics interval of one task (``topology.metrics.interval.secs``).

    Attributes:
        interval_s: the interval's length (s).
        executed_per_s / emitted_per_s: rates over the interval (tuples/s).
        execute_latency_ms: mean ``execute`` (spout: ``next_tuple``) time of the tuples
            sampled at ``topology.stats.sample.rate`` (ms).
        capacity: Storm UI's capacity, the executing fraction of the interval (0..1).
        busy_time_ms_per_second / idle_time_ms_per_second /
        backpressured_time_ms_per_second: Flink's split of each second (ms): executing,
            waiting for input, held by a full or backlogged destination.
        backpressure_level: ``OK`` / ``LOW`` / ``HIGH`` (Flink's 0.10 / 0.5 thresholds).
        backpressure_cause: the destination task that held this task most (None if none).
        stalled_seconds: how long tuples have waited for the task without progress (s).
        stalled: ``stalled_seconds`` has reached ``topology.stall.timeout.secs``.
    """

    interval_s: float
    executed_per_s: float
    emitted_per_s: float
    execute_latency_ms: float
    capacity: float
    busy_time_ms_per_second: float
    idle_time_ms_per_second: float
    backpressured_time_ms_per_second: float
    backpressure_level: str
    backpressure_cause: int | None
    stalled_seconds: float
    stalled: bool


#: The fields a task shows only once it has closed a metrics interval (None before).
INTERVAL_FIELDS = tuple(f for f in IntervalMetrics.__dataclass_fields__
                        if f not in ("stalled_seconds", "stalled"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStats:
    """One task's counters (cumulative since start), its state now, and its last closed
    metrics interval.

    Where: ``component``, ``task``, ``worker`` (index), ``state`` (``running``,
    ``ending``, ``done``, ``killed`` or ``failed``), ``active`` (a spout's
    activate/deactivate), ``restarted`` (Ray restarted the actor),
    ``uptime_s``, ``progress`` (a spout's ``Spout.progress()``: source items taken; None for
    bolts and spouts that do not count).

    Tuples: ``emitted`` (by user code), ``transferred`` (handed to destination tasks, one
    per destination), ``executed`` (given to ``execute``), ``acked`` / ``failed`` (a spout:
    its trees, timeouts included; a bolt: its inputs; an acker: trees it completed /
    failed), ``ticks`` (tick tuples given to a bolt; not in ``executed``).

    Acking (Storm's acker protocol, actors/_acking.py): ``timeouts`` (trees failed by
    ``topology.message.timeout.secs``), ``pending_tuples`` (a spout's trees in flight, an
    acker's trees tracked), ``complete_latencies_ms`` (a spout's recent emit-to-ack times),
    ``completed_trees`` (one-ack trees a bolt completed itself), ``folded_acks`` (acks a
    bolt piggybacked on its anchored emits), ``unknown_acks`` (acks for trees not held),
    ``dead_letters`` (a spout's tuples given up at ``topology.max.replays`` and emitted on
    the dead-letter stream; 0 for other tasks). After a rollback (actors/_replay_gate.py):
    ``held_for_replays`` (a replaying spout's new emits held until the tuples the rollback
    failed were emitted again) and ``late_replays`` (those emitted again only after the
    hold's deadline, ``topology.message.timeout.secs``: event-time windows may drop them),
    ``unhashable_replays`` (failed msg ids no new emit could wait for: unhashable).

    Receive queue (Storm 2.0's JCQueue): ``queue_population`` / ``queue_capacity``
    (tuples now / bound), ``queue_pct_full`` (0..1), ``overflow`` (tuples in the overflow
    now), ``queue_arrival_rate_secs`` (tuples/s),
    ``queue_sojourn_time_ms``, ``insert_failures`` (inserts that found it full),
    ``dropped_messages`` (dropped at ``topology.executor.overflow.limit``),
    ``overflowed_total`` (tuples ever put in the overflow); ``queue`` is the same as a dict.
    Bytes: ``queued_bytes`` / ``queue_capacity_bytes`` (wire bytes in the receive queue
    now / its byte bound, 0: none), ``overflow_bytes``.

    Shedding (``topology.backpressure.overload`` "shed", backpressure/_shed.py): ``shed``
    (tuples shed), ``shed_by_stream`` (``{"component:stream": {"queue" | "arrival": n}}``,
    by input stream and site), ``last_sojourn_ms`` (the queue time of the last tuple that
    left the queue; None unless shedding).

    Backpressure (STORM-2306's design doc "Backpressure model for Storm 2.0"):
    ``backpressure_policy`` (its name), ``policy_state`` (its state: the watermark flag and
    throttle, the NAK rate limit and last NAK, debloat's in-flight bound and drain time; see
    backpressure/), ``control_sent`` / ``control_received`` (flow-control signals: watermark
    flags, throttles, NAKs), ``backlogged`` (this task's overflow is in use: other workers
    hold their sends to it), ``pending_emits`` / ``max_pending_emits`` (emits waiting for a
    full or backlogged destination now / the most at once), ``batched`` (tuples in partial
    outgoing batches), ``send_failures`` (sends that found a destination full or
    backlogged), ``remote_backlogged`` (tasks of other workers this task may not send to
    now), ``remote_refusals``, ``halt_lags_ms`` (recent ms from a destination's backlog
    starting to this task holding its sends), ``bp_reports`` / ``refused`` (reports this
    task sent as a receiver / arrivals it refused), ``backpressure_wait_ms`` /
    ``idle_wait_ms`` (time the executor waited on backpressure / for input, cumulative ms).

    Transfer (actors/_inbound.py, the executor actor's sinks): ``bad_frames``,
    ``duplicate_frames``, ``early_frames``, ``stale_frames``, ``epoch_resets``,
    ``lost_frames`` (dropped because their sender began a new epoch after a failure),
    ``late_items``, ``inflight_batches``, ``sent_batches``, ``sent_batches_to`` (per
    destination task), ``sink_resets``; ``transfer_path_to`` (destination task →
    ``"socket"`` or ``"call"``: the path its frames take now) and ``transfer``, the
    counters per path (``topology.transfer.local.socket``, actors/_local_socket.py):
    ``socket_frames`` / ``socket_bytes`` and ``call_frames`` / ``call_bytes`` sent,
    ``socket_refusals`` (sends the kernel refused: destination full), ``fallbacks``
    (channels that broke, their frames then going by actor call), ``reconnects``, and as
    a receiver ``socket_frames_in`` / ``socket_bytes_in``, ``malformed_socket_frames``,
    ``refused_connections``, ``socket_connections``; and the control messages
    (backpressure statuses) sent over a control socket or by actor call, and received
    on it (``control_socket_sent``, ``control_call_sent``, ``control_received``), and
    connections its control listener refused (``control_refused_connections``).

    Errors: ``error_count`` and ``errors`` (each kind with count and last traceback).

    Windows (a windowed bolt; None for other components, see ``WindowedBoltExecutor.window_stats``):
    ``window_held`` (tuples held in windows or waiting for the watermark, outside the
    bounded queues), ``watermark_ms`` (epoch ms; None in processing time, before every
    upstream task has sent a tuple and once every one has ended), ``watermark_lag_ms``
    (behind the newest timestamp), ``windows_fired``, ``late_tuples``, ``bad_timestamps``.

    Checkpoints (a stateful topology; None otherwise): ``checkpoint``, a dict of
    ``checkpoints`` (snapshots taken), ``rollbacks``, ``last_committed``, ``generation``,
    ``paused``, ``aligning`` (the round being aligned), ``parked`` and ``parked_max``
    (elements held by alignment), ``last_snapshot_ms``, ``last_keys_written``,
    ``state_keys`` and ``state_bytes`` (None for a task without state; bytes of encoded
    values, persistent windows included), ``restores`` (restores of a committed
    checkpoint), ``checkpoint_ms_p50``/``_p99`` (recent rounds: the task's trigger or first
    barrier to the commit reaching it), ``alignment_ms_p50``/``_p99`` (first barrier to
    aligned); ``rolled_back_frames`` (frames dropped for an older epoch).

    Last metrics interval: the :class:`IntervalMetrics` fields. A task that has not yet
    closed an interval shows None for the rates, fractions, latency and level (never a
    false 0% or 100%), and ``stalled`` False.
    """

    component: str
    task: int
    worker: int
    state: str
    active: bool = True
    restarted: bool = False
    uptime_s: float = 0.0
    progress: int | None = None
    emitted: int = 0
    transferred: int = 0
    executed: int = 0
    ticks: int = 0
    acked: int = 0
    failed: int = 0
    timeouts: int = 0
    pending_tuples: int = 0
    complete_latencies_ms: list[float] = field(default_factory=list)
    completed_trees: int = 0
    folded_acks: int = 0
    unknown_acks: int = 0
    dead_letters: int = 0
    held_for_replays: int = 0
    late_replays: int = 0
    unhashable_replays: int = 0
    queue_population: int = 0
    queue_capacity: int = 0
    queue_pct_full: float = 0.0
    overflow: int = 0
    queue_arrival_rate_secs: float = 0.0
    queue_sojourn_time_ms: float = 0.0
    insert_failures: int = 0
    dropped_messages: int = 0
    overflowed_total: int = 0
    queue: dict[str, Any] = field(default_factory=dict, repr=False)
    queued_bytes: int = 0
    queue_capacity_bytes: int = 0
    overflow_bytes: int = 0
    shed: int = 0
    shed_by_stream: dict[str, dict[str, int]] = field(default_factory=dict)
    last_sojourn_ms: float | None = None
    backpressure_policy: str = ""
    policy_state: dict[str, Any] = field(default_factory=dict)
    control_sent: int = 0
    control_received: int = 0
    backlogged: bool = False
    pending_emits: int = 0
    max_pending_emits: int = 0
    batched: int = 0
    send_failures: int = 0
    remote_backlogged: list[int] = field(default_factory=list)
    remote_refusals: int = 0
    halt_lags_ms: list[float] = field(default_factory=list)
    bp_reports: int = 0
    refused: int = 0
    backpressure_wait_ms: float = 0.0
    idle_wait_ms: float = 0.0
    bad_frames: int = 0
    duplicate_frames: int = 0
    early_frames: int = 0
    stale_frames: int = 0
    epoch_resets: int = 0
    lost_frames: int = 0
    late_items: int = 0
    inflight_batches: int = 0
    sent_batches: int = 0
    sent_batches_to: dict[int, int] = field(default_factory=dict)
    sink_resets: int = 0
    transfer_path_to: dict[int, str] = field(default_factory=dict)
    transfer: dict[str, int] = field(default_factory=dict)
    error_count: int = 0
    errors: list[dict] = field(default_factory=list)
    window_held: int | None = None
    watermark_ms: int | None = None
    watermark_lag_ms: int | None = None
    windows_fired: int | None = None
    late_tuples: int | None = None
    bad_timestamps: int | None = None
    checkpoint: dict | None = None
    interval_s: float | None = None
    executed_per_s: float | None = None
    emitted_per_s: float | None = None
    execute_latency_ms: float | None = None
    capacity: float | None = None
    busy_time_ms_per_second: float | None = None
    idle_time_ms_per_second: float | None = None
    backpressured_time_ms_per_second: float | None = None
    backpressure_level: str | None = None
    backpressure_cause: int | None = None
    stalled_seconds: float = 0.0
    stalled: bool = False

    @property
    def raw(self) -> dict[str, Any]:
        """The record as a plain dict (field name → value), e.g. for JSON."""
        return asdict(self)

    def with_interval(self, m: IntervalMetrics | None) -> TaskStats:
        """This record with the fields of metrics interval ``m`` (unchanged if None)."""
        return self if m is None else replace(self, **asdict(m))

    def with_sinks(self, sinks: list, receiver=None, control=None) -> TaskStats:
        """This record with the executor actor's sinks' figures (``ActorSink`` objects:
        ``outstanding()``, ``sent_batches``, ``dest``, ``resets``, the per-path counters)
        and, given the actor's ``SocketReceiver`` and ``ControlPlane``, their counters."""
        t = {k: sum(getattr(s, k) for s in sinks) for k in _SINK_COUNTERS}
        if receiver is not None:
            t.update(socket_frames_in=receiver.frames, socket_bytes_in=receiver.bytes,
                     malformed_socket_frames=receiver.malformed,
                     refused_connections=receiver.refused_connections,
                     socket_connections=receiver.connections)
        if control is not None:
            t.update(control_socket_sent=control.socket_sent,
                     control_call_sent=control.call_sent,
                     control_received=control.received,
                     control_refused_connections=control.refused_connections)
        return replace(self, inflight_batches=sum(s.outstanding() for s in sinks),
                       sent_batches=sum(s.sent_batches for s in sinks),
                       sent_batches_to={s.dest: s.sent_batches for s in sinks},
                       sink_resets=sum(s.resets for s in sinks),
                       transfer_path_to={s.dest: s.path for s in sinks}, transfer=t)


#: the ActorSink counters summed into ``TaskStats.transfer``
_SINK_COUNTERS = ("socket_frames", "socket_bytes", "call_frames", "call_bytes",
                  "socket_refusals", "fallbacks", "reconnects")


def _spout_progress(core: Any) -> int | None:
    """The spout's ``progress()`` (None for a bolt, before ``open``, or when it raises:
    reported, never failing a stats call)."""
    if not core.is_spout or not core.started_at:
        return None
    try:
        p = core.obj.progress()
        return None if p is None else int(p)
    except Exception as e:
        core.errors.report(e, "progress")
        return None


def task_stats(core: Any, interval: IntervalMetrics | None = None) -> TaskStats:
    """The :class:`TaskStats` of ``core`` (an ``ExecutorCore``), read from its rooms, with
    the fields of ``interval`` when given. Any thread; never blocks on the data path."""
    ledger, out, inb, policy = core.ledger, core.outbox, core.inbound, core.policy
    q = core.queue.metrics()
    end = core.finished_at or time.time()
    stats = TaskStats(
        component=core.component_id, task=core.task_id, worker=core.context.worker_index,
        state=core.state, active=core.active, restarted=inb.reconstructed,
        uptime_s=(end - core.started_at) if core.started_at else 0.0,
        progress=_spout_progress(core),
        emitted=core.emitted, transferred=out.transferred(), executed=core.executed,
        ticks=getattr(core, "ticks", 0),
        acked=core.acked, failed=core.failed,
        timeouts=getattr(ledger, "timeouts", 0),
        pending_tuples=getattr(ledger, "pending", 0),
        complete_latencies_ms=list(getattr(ledger, "complete_latencies_ms", ())),
        completed_trees=getattr(ledger, "completed_trees", 0),
        folded_acks=getattr(ledger, "folded_acks", 0),
        unknown_acks=getattr(ledger, "unknown_acks", 0),
        dead_letters=_dead_letters(core),
        held_for_replays=getattr(core.collector, "held_for_replays", 0),
        late_replays=getattr(core.collector, "late_replays", 0),
        unhashable_replays=getattr(core.collector, "unhashable_replays", 0),
        queue_population=q.population, queue_capacity=q.capacity,
        queue_pct_full=q.pct_full, overflow=q.overflow,
        queue_arrival_rate_secs=q.arrival_rate_secs, queue_sojourn_time_ms=q.sojourn_time_ms,
        insert_failures=q.insert_failures, dropped_messages=q.dropped_messages,
        overflowed_total=core.queue.overflowed_total, queue=q.to_dict(),
        queued_bytes=q.population_bytes, queue_capacity_bytes=q.capacity_bytes,
        overflow_bytes=q.overflow_bytes, **_shed_stats(core.shedder),
        backpressure_policy=policy.name, backlogged=bool(policy.backlogged),
        policy_state=policy.state(), control_sent=policy.control_sent,
        control_received=policy.control_received,
        pending_emits=len(out.pending_emits), max_pending_emits=out.max_pending_emits,
        batched=out.batched(), send_failures=out.send_failures,
        remote_backlogged=list(policy.backlogged_remote()), remote_refusals=policy.refusals,
        # (copied first, in one C call: the status thread appends to this deque, and a
        # Python loop over it could see it change: "deque mutated during iteration")
        halt_lags_ms=[x * 1000.0 for x in tuple(getattr(policy, "halt_lags_s", ()))],
        bp_reports=inb.bp_reports, refused=inb.refused,
        backpressure_wait_ms=core.backpressure_wait_s * 1000.0,
        idle_wait_ms=core.idle_wait_s * 1000.0,
        bad_frames=core.bad_frames, duplicate_frames=inb.duplicate_frames,
        early_frames=inb.early_frames, stale_frames=inb.stale_frames,
        epoch_resets=inb.epoch_resets, lost_frames=inb.lost_frames,
        late_items=inb.late_items,
        error_count=core.errors.total, errors=core.errors.snapshot(),
        checkpoint=(None if core.checkpoint is None else
                    {**core.checkpoint.stats(),
                     "rolled_back_frames": inb.rolled_back_frames}),
        **_window_stats(core))
    return stats.with_interval(interval)


def _shed_stats(shedder: Any) -> dict[str, Any]:
    """A shedding task's counts (empty for one that blocks)."""
    if shedder is None:
        return {}
    return {"shed": shedder.total, "shed_by_stream": shedder.by_stream(),
            "last_sojourn_ms": shedder.last_sojourn_s * 1000.0}


def _dead_letters(core: Any) -> int:
    """Tuples a spout emitted on the dead-letter stream (counted by that stream's
    ``CountingRouter``; 0 for bolts and for spouts without the stream)."""
    from topology import DEAD_LETTER_STREAM

    r = core.collector.routers.get(DEAD_LETTER_STREAM) if core.is_spout else None
    return getattr(r, "routed", 0)


def _window_stats(core: Any) -> dict[str, Any]:
    """A windowed bolt's ``window_stats()`` (empty for other components)."""
    from actors.windowing import WindowedBoltExecutor

    return core.obj.window_stats() if isinstance(core.obj, WindowedBoltExecutor) else {}
