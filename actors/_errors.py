"""Throttled reporting of user-code errors: counted always, logged once per interval.

Messages and tracebacks are kept and logged with credentials masked
(``topology._redact.mask_text``): a sink's driver error, or the exception it chains, may
quote a DSN or a URI with its password."""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import asdict, dataclass

from topology._redact import mask_text

logger = logging.getLogger("storm_on_ray.errors")

_MAX_KINDS = 20


@dataclass
class ErrorInfo:
    """One kind of error a task raised: type and message, how often, the last traceback."""

    component: str
    task: int
    error_type: str
    message: str
    count: int
    last_seen: float
    traceback: str

    def to_dict(self) -> dict:
        return asdict(self)


class LogThrottle:
    """Lets a log line of each kind through at most once per ``interval_s`` (drops, bad
    frames and other input that is counted in stats and must not flood the log).

    Args:
        interval_s: seconds between two lines of one kind.
    """

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def allow(self, kind: str) -> bool:
        """True if a line of ``kind`` may be logged now (and starts a new interval)."""
        now = time.monotonic()
        if now - self._last.get(kind, -1e18) < self.interval_s:
            return False
        self._last[kind] = now
        return True


class ErrorReporter:
    """Counts every error; logs at most ``max_per_interval`` per ``interval_s`` (Storm's
    ``topology.error.throttle.interval.secs`` / ``topology.max.error.report.per.interval``),
    then one summary line of what was suppressed. Keeps at most 20 distinct kinds.
    """

    def __init__(self, component: str, task: int, interval_s: float = 10,
                 max_per_interval: int = 5) -> None:
        self.component = component
        self.task = task
        self.interval_s = interval_s
        self.max_per_interval = max_per_interval
        self.total = 0
        self.kinds: dict[tuple[str, str], ErrorInfo] = {}
        self._window_start = 0.0
        self._logged = 0
        self._suppressed = 0

    def report(self, exc: BaseException, where: str = "execute") -> None:
        self.total += 1
        now = time.time()
        etype = type(exc).__name__
        msg = mask_text(str(exc)[:2000])[:500]  # (masked whole, then cut)
        key = (etype, msg)
        info = self.kinds.get(key)
        tb = mask_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__,
                                                          limit=8)))
        if info is None:
            if len(self.kinds) >= _MAX_KINDS:
                key = ("(other)", "more distinct errors than kept")
                info = self.kinds.get(key)
            if info is None:
                info = ErrorInfo(self.component, self.task, key[0], key[1], 0, now, "")
                self.kinds[key] = info
        info.count += 1
        info.last_seen = now
        info.traceback = tb
        if now - self._window_start >= self.interval_s:
            if self._suppressed:
                logger.error("%s:%d: %d more errors in the last %.0f s were not logged "
                             "(see stats())", self.component, self.task, self._suppressed,
                             self.interval_s)
            self._window_start = now
            self._logged = 0
            self._suppressed = 0
        if self._logged < self.max_per_interval:
            self._logged += 1
            logger.error("%s:%d: user code raised in %s: %s: %s\n%s", self.component, self.task,
                         where, etype, msg, tb)
        else:
            self._suppressed += 1

    def snapshot(self) -> list[dict]:
        return [i.to_dict() for i in self.kinds.values()]
