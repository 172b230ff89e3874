"""Storm's ``topology.*`` configuration keys: defaults in one place, each with its reason.

A topology's config is a plain ``dict`` keyed by Storm's names. :func:`make_config`
merges a user dict over :data:`DEFAULTS`, rejecting unknown keys and wrong types, so a
typo (``topology.max.spout.pendng``) fails at submit time instead of being ignored.
Source: Storm 2.0's ``conf/defaults.yaml`` and ``org.apache.storm.Config``.

Storm keys that this runtime does not use are still accepted, so a Storm config does not
fail; they are marked ``noop`` and validated only for their own type (never against another
key). The reference tables in docs/config.md are :func:`reference_table` and
:func:`noop_table` (a test keeps them equal).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from topology._errors import ConfigError


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key: its name, accepted types, default, bounds and the reason."""

    name: str
    types: tuple[type, ...]
    default: Any
    reason: str
    minimum: float | None = None
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    #: the value must be above this (an exclusive minimum)
    above: float | None = None
    #: a Storm key accepted for compatibility that nothing here reads
    noop: bool = False


WAIT_STRATEGIES = ("progressive", "park", "sleep")

_KEYS: list[ConfigKey] = [
    ConfigKey("topology.workers", (int,), 1,
              "Storm's default. Each worker is one bundle (one node) of the topology's placement "
              "group, with its executors and one transfer actor; tuples between workers go "
              "through the transfer actors.",
              minimum=1),
    ConfigKey("topology.executor.receive.buffer.size", (int,), 32768,
              "Storm's default. Bounds each executor's receive queue, in tuples.", minimum=2),
    ConfigKey("topology.executor.control.receive.buffer.size", (int,), 0,
              "Storm 3.0's optional control receive queue (apache/storm #8892): ticks and "
              "acking messages wait in a queue of this bound (elements) that the executor "
              "drains before its receive queue, so they are not stuck behind a full one; "
              "end of stream, DRAINED and checkpoint barriers never go there. 0: off, as in "
              "Storm; docs/benchmarks.md, \"The control receive queue\", says why.",
              minimum=0),
    ConfigKey("topology.producer.batch.size", (int,), 1000,
              "Storm uses 1, but here every batch is a Ray actor call, whose cost is per call, "
              "not per byte (benchmarks/actor_call.py), so a batch of 1 caps a hop at the rate "
              "of actor calls. 1000 amortises the call (benchmarks/throughput.py; figures in "
              "docs/benchmarks.md); the 1 ms flush interval bounds latency at low rates. "
              "Clamped to half the receive buffer, as Storm's JCQueue does.",
              minimum=1),
    ConfigKey("topology.producer.batch.dynamic", (bool,), False,
              "Storm 3.0's key and default (apache/storm #8796): each destination's batch "
              "is sized by AIMD between 1 and topology.producer.batch.size (+1 after a full "
              "batch, halved after the flush timer sends a partial one). Off here too, by "
              "measurement: docs/benchmarks.md, \"AIMD producer batching\", says why."),
    ConfigKey("topology.batch.flush.interval.millis", (int, float), 1,
              "Storm's default: partial batches leave at least every 1 ms. 0 disables "
              "flush tuples. A DataFrameSpout sets 10 for itself (rows per second count "
              "there, not milliseconds; its docstring says why).", minimum=0),
    ConfigKey("topology.transfer.buffer.size", (int,), 1000,
              "No-op (Storm's key and default, accepted so a Storm config does not fail): "
              "Storm bounds a worker's transfer queue with it; here a transfer actor's "
              "queue is bounded by the per (sender, destination task) credits of "
              "topology.transfer.max.inflight.batches instead.",
              minimum=1, noop=True),
    ConfigKey("topology.transfer.batch.size", (int,), 1,
              "No-op (Storm's key and default, accepted so a Storm config does not fail): "
              "Storm batches a worker's outgoing tuples by it; here a transfer actor sends "
              "every frame queued for a worker in one delivery. Not checked against "
              "topology.transfer.buffer.size, which is unused too.",
              minimum=1, noop=True),
    ConfigKey("topology.executor.overflow.limit", (int,), 0,
              "Storm's default: 0 leaves the overflow queue (remote arrivals during the "
              "halt-lag) unbounded; >0 drops, and counts, beyond the limit.", minimum=0),
    ConfigKey("topology.executor.receive.buffer.bytes", (int,), 32 * 1024 * 1024,
              "Bounds each executor's receive queue in wire bytes too: the queue is full at "
              "whichever bound comes first. Tuple counts alone let Arrow record-batch tuples "
              "take gigabytes (benchmarks/overload.py, batch row). A tuple larger than the "
              "bound enters only an empty queue, alone. Decoded Python rows take several "
              "times their wire size; Arrow stays close to it. null: no byte bound.",
              nullable=True, above=0),
    ConfigKey("topology.executor.overflow.limit.bytes", (int,), None,
              "Bounds the overflow queue in wire bytes (beyond it, tuples are dropped and "
              "counted, as at topology.executor.overflow.limit). null: unbounded, as the "
              "count limit's 0 (the overflow only holds the halt-lag's arrivals).",
              nullable=True, above=0),
    ConfigKey("topology.backpressure.policy", (str,), "storm2",
              "The flow-control design (backpressure/, docs/flow-control.md): \"storm2\" "
              "(Storm 2.0's per-task backpressure status), \"watermark\" (STORM-886: every "
              "spout stops while any queue is above its high watermark), \"nak\" (receivers "
              "send NAKs only when overloaded; spouts adapt a send-rate limit) or \"debloat\" "
              "(Flink's buffer debloating: each queue's bound sized to a drain time).",
              choices=("storm2", "watermark", "nak", "debloat")),
    ConfigKey("backpressure.disruptor.high.watermark", (int, float), 0.9,
              "Storm 1.x's key and default (policy \"watermark\"): the queue fill at which a "
              "task raises the topology-wide throttle.", above=0),
    ConfigKey("backpressure.disruptor.low.watermark", (int, float), 0.4,
              "Storm 1.x's key and default (policy \"watermark\"): the fill at which a raised "
              "flag is lowered; must be below the high watermark.", above=0),
    ConfigKey("topology.backpressure.nak.levels", (list, tuple), [0.5, 0.75, 0.87, 1.0],
              "Ours (policy \"nak\", receiver-driven NAKs): the receive-queue fill levels; "
              "crossing one sends a NAK of that strength to the spouts upstream."),
    ConfigKey("topology.backpressure.nak.window.ms", (int, float), 50,
              "Ours (policy \"nak\"): a spout reacts to the strongest NAK within this window, "
              "and raises its rate limit one step per quiet window.", above=0),
    ConfigKey("topology.backpressure.debloat.target.ms", (int, float), 1000,
              "Flink's default buffer-debloat target (policy \"debloat\"): each receive "
              "queue admits what its task drains in this time, measured while busy.",
              above=0),
    ConfigKey("topology.backpressure.overload", (str,), "block",
              "What a bolt does when its input is faster than it: \"block\" (Storm 2.0's "
              "backpressure: senders wait, nothing is lost) or \"shed\" (latency-first: a "
              "tuple whose time in the queue passed topology.shed.latency.target.ms is shed "
              "instead of executed, and arrivals that find the queue full are shed; never "
              "blocks a sender). Per topology or per component; \"shed\" needs acking off "
              "(topology.acker.executors 0): a shed tuple cannot be replayed.",
              choices=("block", "shed")),
    ConfigKey("topology.shed.latency.target.ms", (int, float), 100,
              "The queue sojourn time (CoDel's measure, taken as a tuple leaves the queue) "
              "past which a \"shed\" bolt sheds the tuple.", above=0),
    ConfigKey("topology.metrics.interval.secs", (int, float), 1.0,
              "ours: how often each task turns its counters into per-second rates (Flink's "
              "busy/idle/backpressured ms per second) and exports them through "
              "ray.util.metrics.", minimum=0.05),
    ConfigKey("topology.stall.timeout.secs", (int, float), 30.0,
              "ours: a task whose input or output has waited this long without progress is "
              "reported stalled (logged once, shown by stats()).", minimum=0.1),
    ConfigKey("topology.stats.sample.rate", (int, float), 0.05,
              "Storm's default: the fraction of tuples whose execute latency is timed.",
              minimum=0.0),
    ConfigKey("topology.executor.max.restarts", (int,), -1,
              "Ray's max_restarts for executor and transfer actors: a dead process is "
              "restarted and rejoins (Storm's supervisor restarts dead workers without "
              "limit: -1); 0 turns restarts off, so a death fails the topology.",
              minimum=-1),
    ConfigKey("topology.backpressure.check.millis", (int, float), 50,
              "Storm's default period of the backpressure-check timer (clears a task once "
              "its overflow has drained; runs only in tasks with upstreams in other "
              "workers).", minimum=1),
    ConfigKey("topology.backpressure.resend.size", (int,), 10000,
              "Storm's hard-coded RESEND_BACKPRESSURE_SIZE, made a key: a backlogged task's "
              "status is sent again after every this many tuples put into its overflow, in "
              "case a status was lost. Counted per task (STORM-3510).", minimum=1),
    ConfigKey("topology.backpressure.status.direct", (bool,), True,
              "Not in Storm: a backlogged task's executor sends its status straight to the "
              "executors in other workers that send to it, one actor call instead of "
              "Storm's three hops (executor, its worker's transfer actor, the sending "
              "worker's transfer actor, the sending executor), which shortens the halt-lag "
              "(benchmarks/halt_lag.py runs both; docs/design.md). The transfer actors keep "
              "the worker-level status for stats and for workers that (re)connect. False: "
              "Storm's worker-level path only."),
    ConfigKey("topology.executor.gc.threshold", (int,), 10000,
              "Ours (Storm tunes its JVM's collector through topology.worker.childopts): "
              "Python's generation-0 collection threshold in each executor and transfer "
              "actor process (Python's default 700). Tuples in flight are acyclic, so "
              "reference counting frees them; at 700 the cyclic collector ran every few "
              "hundred tuples and took most of the time of decoding a batch (figures in "
              "docs/benchmarks.md). Objects alive after open/prepare are also frozen out of the "
              "collector's scans. 0 keeps Python's default.", minimum=0),
    ConfigKey("topology.disable.loadaware.messaging", (bool,), False,
              "Storm's key and default (load-aware on): a shuffle, none or local-or-shuffle "
              "grouping into several tasks weighs each by 100 - load % (Storm's "
              "LoadAwareShuffleGrouping), the load being what the sender knows, with no "
              "message: its credits in use to the task, whether the flow-control policy "
              "refuses it, frames to it lost in the last second; read again every 64 emits "
              "(every batch if smaller). A backlogged, hung or dead task gets nothing while "
              "the others take the stream; while nothing lags, the shares stay the plain "
              "shuffle's. True: the plain shuffle, where a hung task holds its senders in "
              "pendingEmits and a dead one keeps getting its share (lost without acking). "
              "Per topology or per sending component."),
    ConfigKey("topology.operator.chaining", (bool,), True,
              "Ours (Flink's operator chaining, which Storm never had): a bolt whose one "
              "input is a local-or-shuffle grouping from a component of equal parallelism "
              "runs inside the executor of that component's task of the same index (task k "
              "feeds task k), and an emit into it calls its execute directly: no batch, no "
              "encoding, no actor call. Each chained bolt keeps its name, task id, stats and "
              "errors. Not chained: windowed and batch bolts, shedding bolts, cycles. False "
              "for a topology, or for a component (Flink's disableChaining: neither into "
              "nor out of it), keeps every task in its own executor."),
    ConfigKey("topology.worker.placement", (str,), "pack",
              "Ours (Storm leaves this to its scheduler): the topology's placement group "
              "has one bundle (one node) per worker; 'pack' is Ray's PACK strategy (as few "
              "nodes as possible), 'spread' Ray's SPREAD (workers on different nodes).",
              choices=("pack", "spread")),
    ConfigKey("topology.transfer.max.frame.bytes", (int,), 64 * 1024 * 1024,
              "Ours: the largest frame or transfer payload a receiver decodes; larger ones "
              "are dropped and counted (a bound on what a peer can make us allocate).",
              minimum=1024),
    ConfigKey("topology.transfer.local.socket", (bool,), True,
              "Ours: frames between executors of one worker on one node go over a "
              "Unix-domain SOCK_SEQPACKET socket per (sender, receiver) task pair instead "
              "of a Ray actor call (Linux; elsewhere, across workers and nodes, on back "
              "edges and for frames above half the pair's buffer: actor calls). "
              "TaskStats.transfer_path_to shows the path taken."),
    ConfigKey("topology.transfer.max.inflight.batches", (int,), 2,
              "Ours (no Storm equivalent): batches sent to one destination task whose actor "
              "call has not completed yet. The receiver completes the call only once the "
              "batch is in its bounded queue, so this is the credit that bounds what sits in "
              "Ray's call queues. 2 keeps one batch in transit while the next is filled.",
              minimum=1),
    ConfigKey("topology.backpressure.wait.strategy", (str,), "progressive",
              "Storm's WaitStrategyProgressive.", choices=WAIT_STRATEGIES),
    ConfigKey("topology.backpressure.wait.park.microsec", (int, float), 100,
              "Storm's default.", minimum=0),
    ConfigKey("topology.backpressure.wait.progressive.level1.count", (int,), 1,
              "Storm's default: one spin before parking.", minimum=0),
    ConfigKey("topology.backpressure.wait.progressive.level2.count", (int,), 0,
              "Storm uses 1000 short parks before sleeping; a Python park lasts far longer than "
              "Storm's and costs CPU at every wake-up, so idle executors took cores from busy "
              "ones (backpressure/_wait.py; figures in docs/benchmarks.md). Here an executor "
              "goes straight to level 3, which waits on its wakeup event (set when a send "
              "completes or input arrives) and so ends as soon as there is work.",
              minimum=0),
    ConfigKey("topology.backpressure.wait.progressive.level3.sleep.millis", (int, float), 1,
              "Storm's default; the longest wait (an executor's wait ends early on its wakeup "
              "event).", minimum=0),
    ConfigKey("topology.bolt.wait.strategy", (str,), "progressive",
              "Storm's default idle strategy of a bolt with an empty queue.",
              choices=WAIT_STRATEGIES),
    ConfigKey("topology.bolt.wait.park.microsec", (int, float), 100, "Storm's default.",
              minimum=0),
    ConfigKey("topology.bolt.wait.progressive.level1.count", (int,), 1, "Storm's default.",
              minimum=0),
    ConfigKey("topology.bolt.wait.progressive.level2.count", (int,), 0,
              "Storm uses 1000; 0 here for the reason given for the backpressure strategy: "
              "an idle bolt waits on its wakeup event, which input sets.", minimum=0),
    ConfigKey("topology.bolt.wait.progressive.level3.sleep.millis", (int, float), 10,
              "Storm uses 1. An idle bolt's wait ends when input, a completed send or a stop "
              "sets its wakeup event, and no later than its next flush or tick, so this "
              "only bounds how often it wakes for nothing; each such wake-up costs Python "
              "time that a busy task on the same cores loses (benchmarks/flights_rows.py; "
              "figures in docs/benchmarks.md).", minimum=0),
    ConfigKey("topology.spout.wait.strategy", (str,), "progressive",
              "Storm's default idle strategy of a spout that emitted nothing.",
              choices=WAIT_STRATEGIES),
    ConfigKey("topology.spout.wait.park.microsec", (int, float), 100, "Storm's default.",
              minimum=0),
    ConfigKey("topology.spout.wait.progressive.level1.count", (int,), 0,
              "Storm's default: an idle spout sleeps straight away.", minimum=0),
    ConfigKey("topology.spout.wait.progressive.level2.count", (int,), 0,
              "Storm's default.", minimum=0),
    ConfigKey("topology.spout.wait.progressive.level3.sleep.millis", (int, float), 1,
              "Storm's default.", minimum=0),
    ConfigKey("topology.spout.recvq.skips", (int,), 3,
              "Storm's default: a spout checks its receive queue every 4th loop iteration.",
              minimum=0),
    ConfigKey("topology.max.spout.pending", (int,), None,
              "Storm's default (no cap); used once acking is on.", minimum=1, nullable=True),
    ConfigKey("topology.tick.tuple.freq.secs", (int, float), None,
              "Storm's default (no ticks). Set for the topology or per bolt (add_configuration "
              "or get_component_configuration): every task of the bolt gets a tick tuple "
              "(Tuple.is_tick) at this period, through its receive queue behind the data. "
              "The executor never blocks on its own queue for one: a tick that finds it "
              "full, or finds the previous tick still queued, waits, and ticks falling due "
              "meanwhile collapse into it. Fractions of a second are accepted (Storm takes "
              "whole seconds). Spouts and ackers get none: their timeouts run on the "
              "executor's own timers.", minimum=0.001, nullable=True),
    ConfigKey("topology.bolts.window.length.count", (int,), None,
              "Storm's key, set per windowed bolt by WindowedBolt.with_window (Count).",
              minimum=1, nullable=True),
    ConfigKey("topology.bolts.window.length.duration.ms", (int,), None,
              "Storm's key, set per windowed bolt by WindowedBolt.with_window (Duration).",
              minimum=1, nullable=True),
    ConfigKey("topology.bolts.window.sliding.interval.count", (int,), None,
              "Storm's key, set per windowed bolt by WindowedBolt.with_window (Count).",
              minimum=1, nullable=True),
    ConfigKey("topology.bolts.window.sliding.interval.duration.ms", (int,), None,
              "Storm's key, set per windowed bolt by WindowedBolt.with_window (Duration).",
              minimum=1, nullable=True),
    ConfigKey("topology.bolts.tuple.timestamp.field.name", (str,), None,
              "Storm's key (WindowedBolt.with_timestamp_field): event time from this field, "
              "a datetime (naive read as UTC) or epoch ms; unset means processing time.",
              nullable=True),
    ConfigKey("topology.bolts.tuple.timestamp.max.lag.ms", (int,), None,
              "Storm's key (WindowedBolt.with_lag): how far a tuple's timestamp may trail "
              "the newest before it is late; unset means 0, as Storm.", minimum=0,
              nullable=True),
    ConfigKey("topology.bolts.watermark.event.interval.ms", (int,), None,
              "Storm's key (WindowedBolt.with_watermark_interval): how often the watermark "
              "may move, in processing time; unset means 1000, as Storm.", minimum=1,
              nullable=True),
    ConfigKey("topology.bolts.late.tuple.stream", (str,), None,
              "Storm's key (WindowedBolt.with_late_tuple_stream): late tuples go to this "
              "stream instead of being counted and dropped.", nullable=True),
    ConfigKey("topology.bolts.window.ack.on.entry", (bool,), None,
              "Ours: true acks a windowed bolt's tuple once it is in its windows, instead of "
              "once it has left them (Storm's rule), and leaves window output unanchored. "
              "Null: true in a topology with a spout whose source waits for acks (a "
              "StreamingDataFrameSpout with msg_ids, whose next micro-batch, the only thing "
              "that moves event time, starts only once the current one is acked), false "
              "elsewhere. The guarantee is then at-least-once up to the windows: a "
              "restarted task loses its open windows' contents.", nullable=True),
    ConfigKey("topology.message.timeout.secs", (int, float), 30, "Storm's default.",
              minimum=0),
    ConfigKey("topology.max.replays", (int,), None,
              "Ours (storm-kafka-client's maxRetries; Storm itself replays without end): N "
              "caps replays, so a spout tuple is emitted at most 1 + N times and after its "
              "last failure goes, with the failure's reason, to the dead-letter stream "
              "(handle.dead_letters()) instead of replaying. Unset keeps Storm's "
              "behaviour: a poison tuple replays forever and holds its spout's end of "
              "stream.", minimum=0, nullable=True),
    ConfigKey("topology.acker.executors", (int,), None,
              "Storm's default: null means one acker per worker.", minimum=0, nullable=True),
    ConfigKey("topology.acker.in.spouts", (bool,), False,
              "Ours (Heron tracks trees beside the spout, in its stream manager): true makes "
              "every spout task the acker of its own tuples, with no acker actors; "
              "topology.acker.executors then only switches acking on (null or > 0) or off "
              "(0). Off by default: Storm's acker executors are the documented default and "
              "scale apart from the spouts, and since bolts complete one-ack trees themselves "
              "an acker executor is as cheap (benchmarks/acking.py runs both placements side "
              "by side; figures in docs/benchmarks.md)."),
    ConfigKey("topology.error.throttle.interval.secs", (int, float), 10,
              "Storm's default: user-code errors are logged at most "
              "topology.max.error.report.per.interval times per interval.", minimum=0),
    ConfigKey("topology.max.error.report.per.interval", (int,), 5, "Storm's default.",
              minimum=0),
    ConfigKey("topology.component.cpu.pcore.percent", (int, float), 5.0,
              "Storm's key (default 10.0). Each executor actor asks Ray for this share of a "
              "core. 5% so that a 2-core machine holds a topology beside a Spark executor; "
              "it is a scheduling token, not a limit.", minimum=0.001),
    ConfigKey("topology.max.task.parallelism", (int,), None,
              "Storm's key (there: a cap on any component's parallelism). Here it is also "
              "the number of key groups (Flink's maxParallelism, KeyGroupRangeAssignment): "
              "a fields grouping hashes each key to one of these groups and each task owns a "
              "contiguous range of them, so keyed state can later move between tasks by "
              "group. Null means 128 groups. A component with more tasks is refused at "
              "submit.", minimum=1, nullable=True),
    ConfigKey("topology.state.provider", (str,), None,
              "Storm's key. Where stateful components keep their checkpoints: \"local\" "
              "(null means it too) is embedded and durable across an executor's death, under "
              "topology.state.checkpoint.dir; \"redis\" keeps them in one Redis server "
              "(topology.state.provider.config: host, port, password...), so they survive "
              "the loss of a node; \"memory\" is lost with the process (tests). "
              "A class path (module:Class or module.Class) names a StateProvider of your "
              "own (docs/state.md).", nullable=True),
    ConfigKey("topology.state.provider.config", (dict, str), None,
              "Storm's key: the provider's settings, a dict or a JSON object in a string, "
              "as Storm passes it.", nullable=True),
    ConfigKey("topology.state.checkpoint.interval.ms", (int,), 1000,
              "Storm's default: a checkpoint round starts at most this often (after the "
              "previous one ended and topology.state.checkpoint.min.pause.ms passed). With "
              "acking on it must stay below topology.message.timeout.secs.", minimum=1),
    ConfigKey("topology.state.checkpoint.timeout.secs", (int, float), 60,
              "Ours (Flink's execution.checkpointing.timeout, 10 min there): a round that "
              "has not committed after this long fails, which rolls the topology back to "
              "the last committed checkpoint.", above=0),
    ConfigKey("topology.state.checkpoint.min.pause.ms", (int,), 0,
              "Ours (Flink's execution.checkpointing.min-pause): the least time between the "
              "end of one round and the start of the next, so that under backpressure "
              "checkpoints do not take all the time.", minimum=0),
    ConfigKey("topology.state.checkpoint.dir", (str,), None,
              "Ours: the directory of the local provider's checkpoints, each submit under "
              "<dir>/<topology>/<submit id>/<component>/. Null: storm-on-ray-state-<uid> in "
              "the system's temp directory (e.g. /tmp/storm-on-ray-state-1000), private to "
              "the user (0700). A directory another user owns or can write into is refused "
              "(docs/security.md).",
              nullable=True),
    ConfigKey("topology.debug", (bool,), False,
              "No-op (Storm's key and default, accepted so a Storm config does not fail): "
              "true makes Storm log every emitted tuple; nothing here reads it, so it logs "
              "nothing. Per-component counts and errors are in handle.stats(), failed "
              "tuples in handle.dead_letters().", noop=True),
]

#: Every known key, by name.
CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}
#: The defaults, by key name.
DEFAULTS: dict[str, Any] = {k.name: k.default for k in _KEYS}


def _check(key: ConfigKey, value: Any) -> None:
    if value is None:
        if key.nullable:
            return
        raise ConfigError(f"config {key.name!r} may not be None (default {key.default!r})")
    if isinstance(value, bool) and bool not in key.types:
        raise ConfigError(f"config {key.name!r} expects {_tn(key)}, got bool {value!r}")
    if not isinstance(value, key.types):
        raise ConfigError(
            f"config {key.name!r} expects {_tn(key)}, got {type(value).__name__} {value!r}")
    if key.choices is not None and value not in key.choices:
        raise ConfigError(f"config {key.name!r} must be one of {list(key.choices)}, "
                          f"got {value!r}")
    if key.minimum is not None and not isinstance(value, (str, bool)) and value < key.minimum:
        raise ConfigError(f"config {key.name!r} must be >= {key.minimum}, got {value!r}")
    if key.above is not None and not isinstance(value, (str, bool)) and value <= key.above:
        raise ConfigError(f"config {key.name!r} must be > {key.above}, got {value!r}")


def _tn(key: ConfigKey) -> str:
    return " or ".join(t.__name__ for t in key.types)


def make_config(conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a complete config: ``conf`` validated and merged over :data:`DEFAULTS`.

    Keys outside ``topology.*`` (an application's own settings) pass through unchecked,
    as in Storm, where the topology conf doubles as the application's config map.

    Args:
        conf: user settings keyed by Storm's names; ``None`` for all defaults.

    Returns:
        A new dict with every known key present.

    Raises:
        ConfigError: an unknown ``topology.*`` key (with the closest known name), a wrong
            type, a value out of range, watermarks out of order or NAK levels not ascending.
    """
    merged = dict(DEFAULTS)
    for name, value in (conf or {}).items():
        if not isinstance(name, str):
            raise ConfigError(f"config keys must be strings, got {name!r}")
        key = CONFIG_KEYS.get(name)
        if key is None:
            if name.startswith("topology."):
                close = difflib.get_close_matches(name, CONFIG_KEYS, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown config key {name!r}{hint}")
            merged[name] = value
            continue
        _check(key, value)
        merged[name] = value
    if not (merged["backpressure.disruptor.low.watermark"]
            < merged["backpressure.disruptor.high.watermark"] <= 1):
        raise ConfigError("config 'backpressure.disruptor.low.watermark' must be below "
                          "'backpressure.disruptor.high.watermark', which must be <= 1")
    levels = merged["topology.backpressure.nak.levels"]
    if (not levels or list(levels) != sorted(levels)
            or not all(isinstance(x, (int, float)) and 0 < x <= 1 for x in levels)):
        raise ConfigError(f"config 'topology.backpressure.nak.levels' must be ascending "
                          f"fractions in (0, 1], got {levels!r}")
    return merged


def effective_batch_size(conf: dict[str, Any]) -> int:
    """``topology.producer.batch.size`` clamped to ``[1, receive.buffer.size / 2]`` (Storm)."""
    return max(1, min(conf["topology.producer.batch.size"],
                      conf["topology.executor.receive.buffer.size"] // 2))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference_table() -> str:
    """Every config key as a Markdown table (key, default, what and why), in definition
    order: docs/config.md's full table is this text (a test keeps them equal)."""
    lines = ["| key | default | what and why |", "|---|---|---|"]
    for k in _KEYS:
        lines.append(f"| `{k.name}` | `{k.default!r}` | {_cell(k.reason)} |")
    return "\n".join(lines) + "\n"


def noop_table() -> str:
    """The Storm keys accepted but read by nothing (``ConfigKey.noop``), as a Markdown
    table: docs/config.md's no-op section is this text (a test keeps them equal)."""
    lines = ["| key | default | accepted type | what Storm does with it, and here |",
             "|---|---|---|---|"]
    for k in _KEYS:
        if k.noop:
            lines.append(f"| `{k.name}` | `{k.default!r}` | {_tn(k)} | {_cell(k.reason)} |")
    return "\n".join(lines) + "\n"
