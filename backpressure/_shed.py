"""Latency-first load shedding: one task's decisions and accounts.

``topology.backpressure.overload: "shed"`` turns a bolt's overload from waiting into
dropping, for a source that cannot be slowed down (the at-most-once case of STORM-886,
"Automatic Back Pressure": flow control without acking only moves the backlog upstream). The
rule is CoDel's measure with a fixed target: a tuple whose sojourn time in the task's queue,
taken as it leaves the queue, is past ``topology.shed.latency.target.ms`` is shed instead of
executed (site ``"queue"``), and a tuple that arrives to a full queue is shed at once
instead of waiting or entering the overflow (site ``"arrival"``). A shedding task never
holds a sender, so it never reports a backlog: shedding overrides the flow-control policy
for the tasks it covers.

Only data tuples are shed: end-of-stream and drained markers, ticks, flushes and acking
messages never are (the executor asks only for user streams). Pure: no Ray, no threads, no
clock (times are passed in).
"""

from __future__ import annotations

#: where a tuple was shed: leaving the queue past the target, or arriving to a full queue
SITE_QUEUE, SITE_ARRIVAL = "queue", "arrival"


class LoadShedder:
    """The shedding decisions and counts of one task.

    Args:
        target_s: the sojourn-time target, seconds (> 0).
        log_interval_s: at most one :meth:`interval_report` line per this many seconds.

    Raises:
        ValueError: ``target_s`` <= 0.
    """

    __slots__ = ("target_s", "log_interval_s", "counts", "totals", "last_sojourn_s",
                 "max_sojourn_s", "_reported", "_next_report")

    def __init__(self, target_s: float, log_interval_s: float = 1.0) -> None:
        if not target_s > 0:
            raise ValueError(f"the shed latency target must be > 0 s, got {target_s!r}")
        self.target_s = target_s
        self.log_interval_s = log_interval_s
        #: tuples shed, per site, by input stream (``"component:stream"`` of the
        #: upstream). Each site is written by one side only (the executor thread sheds at
        #: the queue, the receivers, under their lock, at arrival), so no count is lost.
        self.counts: dict[str, dict[str, int]] = {SITE_QUEUE: {}, SITE_ARRIVAL: {}}
        #: tuples shed per site (cumulative)
        self.totals: dict[str, int] = {SITE_QUEUE: 0, SITE_ARRIVAL: 0}
        #: sojourn time of the last tuple that left the queue (s)
        self.last_sojourn_s = 0.0
        #: the largest sojourn seen since the last report (s)
        self.max_sojourn_s = 0.0
        self._reported = {SITE_QUEUE: 0, SITE_ARRIVAL: 0}
        self._next_report = 0.0

    @property
    def total(self) -> int:
        """Tuples shed, both sites."""
        return self.totals[SITE_QUEUE] + self.totals[SITE_ARRIVAL]

    def on_dequeue(self, sojourn_s: float) -> bool:
        """A data tuple leaves the queue after ``sojourn_s`` seconds: shed it (True) or
        execute it (False)? (The executor thread.)"""
        self.last_sojourn_s = sojourn_s
        if sojourn_s > self.max_sojourn_s:
            self.max_sojourn_s = sojourn_s
        return sojourn_s > self.target_s

    def count(self, stream: str, site: str, n: int = 1) -> None:
        """Count ``n`` tuples of ``stream`` shed at ``site`` (one writer per site)."""
        by = self.counts[site]
        by[stream] = by.get(stream, 0) + n
        self.totals[site] += n

    def interval_report(self, now: float) -> str | None:
        """At most once per ``log_interval_s`` (``now`` in monotonic s): what was shed
        since the last report and why, as one line; None if nothing was, or too soon.
        (The executor thread.)"""
        if now < self._next_report:
            return None
        q = self.totals[SITE_QUEUE] - self._reported[SITE_QUEUE]
        a = self.totals[SITE_ARRIVAL] - self._reported[SITE_ARRIVAL]
        if not (q or a):
            return None
        self._next_report = now + self.log_interval_s
        self._reported = {SITE_QUEUE: self._reported[SITE_QUEUE] + q,
                          SITE_ARRIVAL: self._reported[SITE_ARRIVAL] + a}
        line = (f"shed {q + a} tuples ({q} past the {self.target_s * 1000:g} ms queue-time "
                f"target, the longest {self.max_sojourn_s * 1000:.0f} ms; {a} arriving to "
                f"a full queue); {self.total} so far")
        self.max_sojourn_s = 0.0
        return line

    def by_stream(self) -> dict[str, dict[str, int]]:
        """The counts as ``{stream: {site: n}}`` (a copy)."""
        out: dict[str, dict[str, int]] = {}
        for site, by in self.counts.items():
            for stream, n in list(by.items()):
                out.setdefault(stream, {})[site] = n
        return out
