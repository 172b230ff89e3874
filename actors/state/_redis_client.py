"""The redis state provider's connection: :class:`RedisConfig` (its
``topology.state.provider.config``), :class:`RedisStateError`, and one client per store
that retries a lost connection and names the server and the command in every error. Like
:mod:`actors.state._redis`, it imports redis-py only if it is installed."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from topology import ConfigError

try:  # an optional dependency: only this provider needs it
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry
except ImportError:  # pragma: no cover (the test extra installs it)
    redis = None

_CONFIG_KEY = "topology.state.provider.config"
#: a command that cannot connect or times out is tried again this many times, waiting
#: ``base * 2**n`` s before the n-th (redis-py's ExponentialBackoff, at most the cap): a
#: Redis restart shorter than the waits together costs no failed round, and during a longer
#: outage each step fails only after them, so a rollback that cannot restore is not retried
#: in a busy loop
_RETRIES = 3
_BACKOFF_BASE_S, _BACKOFF_CAP_S = 0.1, 1.0


class RedisStateError(Exception):
    """A Redis command of the redis state provider failed (unreachable, refused, or an
    error reply). The message names the server's address and the command;
    ``address`` (``host:port/db``) and ``command`` hold them."""

    def __init__(self, address: str, command: str, why: str) -> None:
        super().__init__(f"Redis at {address}: {command} failed: {why}")
        self.address, self.command, self.why = address, command, why

    def __reduce__(self):  # (pickles with its three arguments, e.g. into a Ray error)
        return type(self), (self.address, self.command, self.why)


@dataclass(frozen=True)
class RedisConfig:
    """``topology.state.provider.config`` of the redis provider (Storm's
    ``JedisPoolConfig``: host, port, timeout, password, database).

    Attributes:
        host: the server every node connects to; required, since ``localhost`` would be
            another Redis on each Ray node.
        port: its TCP port (6379, Redis's default).
        password: ``AUTH`` password (None: no ``AUTH``).
        username: ACL user for ``AUTH`` (None: the default user).
        db: the database number (0, Redis's default).
        key_prefix: prepended to every key (``"storm-on-ray:"``: a shared Redis shows
            whose keys these are).
        timeout_ms: connect and read timeout of each command (5000 ms: above the reply
            time of a large commit, well below ``topology.state.checkpoint.timeout.secs``).
    """

    host: str
    port: int = 6379
    password: str | None = None
    username: str | None = None
    db: int = 0
    key_prefix: str = "storm-on-ray:"
    timeout_ms: int = 5000

    @classmethod
    def from_dict(cls, raw: dict) -> RedisConfig:
        """Check and convert a config dict.

        Raises:
            ConfigError: no ``host``, an unknown key, or a value of the wrong type or range.
        """
        known = list(cls.__dataclass_fields__)
        for key in raw:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, 1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {known}"
                raise ConfigError(f"{_CONFIG_KEY}: unknown key {key!r} for the redis "
                                  f"provider{hint}")
        if not raw.get("host"):
            raise ConfigError(
                f"topology.state.provider \"redis\" needs \"host\" in {_CONFIG_KEY} (a Redis "
                f"every Ray node reaches: \"localhost\" would be another one on each node), "
                f"e.g. {{\"host\": \"10.0.0.5\", \"port\": 6379, \"password\": ...}}; or "
                f"choose \"local\" or \"memory\"")

        def check(key: str, types: tuple, ok: Callable[[Any], bool] = lambda v: True,
                  what: str = "") -> None:
            v = raw.get(key)
            if v is None or (isinstance(v, types) and not isinstance(v, bool) and ok(v)):
                return
            raise ConfigError(f"{_CONFIG_KEY}: {key!r} must be {what or types[0].__name__}, "
                              f"got {v!r}")
        check("host", (str,))
        check("port", (int,), lambda v: 0 < v < 65536, "a port number (1-65535)")
        check("password", (str,))
        check("username", (str,))
        check("db", (int,), lambda v: v >= 0, "a database number >= 0")
        check("key_prefix", (str,))
        check("timeout_ms", (int,), lambda v: v > 0, "a positive int (ms)")
        return cls(**{k: v for k, v in raw.items() if v is not None})

    @property
    def address(self) -> str:
        """``host:port/db`` (an IPv6 host in brackets), as errors name the server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}/{self.db}"


class _Client:
    """One connection pool to the server and the error translation of every call."""

    def __init__(self, config: RedisConfig) -> None:
        if redis is None:
            raise ConfigError("topology.state.provider \"redis\" needs the redis-py client: "
                              "pip install 'storm-on-ray[redis]' (redis>=5)")
        self.config = config
        self.address = config.address
        timeout = config.timeout_ms / 1000.0
        self.redis = redis.Redis(
            host=config.host, port=config.port, db=config.db, password=config.password,
            username=config.username, socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(ExponentialBackoff(cap=_BACKOFF_CAP_S, base=_BACKOFF_BASE_S),
                        _RETRIES),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError])

    def _error(self, command: str, e: Exception) -> RedisStateError:
        why = f"{type(e).__name__}: {e}"
        if isinstance(e, redis.AuthenticationError) or "NOAUTH" in str(e) \
                or "WRONGPASS" in str(e):
            why += (f" (check \"password\" and \"username\" in {_CONFIG_KEY})")
        elif isinstance(e, (redis.ConnectionError, redis.TimeoutError)):
            why += (f" (is redis-server running there and reachable from this node? set "
                    f"\"host\" and \"port\" in {_CONFIG_KEY})")
        return RedisStateError(self.address, command, why)

    def call(self, command: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` (one command, named ``command``); a redis-py error becomes a
        :class:`RedisStateError`."""
        try:
            return fn()
        except redis.RedisError as e:
            raise self._error(command, e) from None

    def transaction(self, build: Callable[[Any], None], what: str) -> list:
        """The commands ``build(pipe)`` queues, sent as one ``MULTI``/``EXEC`` (their
        replies, in order). A connection lost is retried (every transaction here can run
        twice with the same result)."""
        pipe = self.redis.pipeline(transaction=True)
        build(pipe)
        names = list(dict.fromkeys(str(args[0]) for args, _ in pipe.command_stack))
        try:
            return pipe.execute()
        except redis.RedisError as e:
            raise self._error(f"MULTI/EXEC of {' '.join(names)} ({what})", e) from None
        finally:
            pipe.reset()

    def close(self) -> None:
        self.redis.close()
