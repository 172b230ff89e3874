"""The redis state provider's connection: :class:`RedisConfig` (its
``topology.state.provider.config``), :class:`RedisStateError`, and one client per store
that retries a lost connection and names the server and the command in every error. Like
:mod:`actors.state._redis`, it imports redis-py only if it is installed."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from topology import ConfigError
from topology._redact import mask_text, mask_uri

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


#: ``ssl_cert_reqs`` values (redis-py's, after Python's ``ssl.CERT_*``)
_CERT_REQS = ("required", "optional", "none")
#: keys whose values are never printed (a wrong type is named, not echoed)
_SECRET_KEYS = frozenset({"password", "url"})


@dataclass(frozen=True)
class RedisConfig:
    """``topology.state.provider.config`` of the redis provider (Storm's
    ``JedisPoolConfig``: host, port, timeout, password, database; plus redis-py's TLS
    options). Its ``repr`` shows no password (nor a URL, which may hold one).

    Attributes:
        host: the server every node connects to; required (or in ``url``), since
            ``localhost`` would be another Redis on each Ray node.
        port: its TCP port (6379, Redis's default), or its ``--tls-port`` with ``ssl``.
        password: ``AUTH`` password (None: no ``AUTH``). Given here it travels in the
            topology's config (pickled into its actors by Ray); ``password_env`` or
            ``password_file`` keep it out.
        password_env: the name of an environment variable holding the password, read by
            each process when it connects (set it on every node, e.g. in the Ray workers'
            environment).
        password_file: a file whose content (one trailing newline dropped) is the
            password, read when connecting; on every node (a mounted secret).
        username: ACL user for ``AUTH`` (None: the default user).
        db: the database number (0, Redis's default).
        key_prefix: prepended to every key (``"storm-on-ray:"``: a shared Redis shows
            whose keys these are).
        timeout_ms: connect and read timeout of each command (5000 ms: above the reply
            time of a large commit, well below ``topology.state.checkpoint.timeout.secs``).
        url: ``redis://[[user]:password@]host[:port][/db]`` or ``rediss://…`` (TLS)
            instead of ``host``, ``port``, ``db``, ``username``, ``password`` (and
            ``ssl``), which it may not be given with (redis-py's ``from_url`` scheme).
        ssl: TLS to the server (False); redis-py's option, as the ones below.
        ssl_ca_certs: a PEM file of the CAs to trust (None: the system's).
        ssl_certfile, ssl_keyfile: this client's certificate and key (PEM) for a server
            that asks for one (``tls-auth-clients``).
        ssl_cert_reqs: ``"required"`` (the default: the server's certificate is checked),
            ``"optional"`` or ``"none"``.
        ssl_check_hostname: the certificate must name ``host`` (True).
    """

    host: str
    port: int = 6379
    password: str | None = field(default=None, repr=False)
    password_env: str | None = None
    password_file: str | None = None
    username: str | None = None
    db: int = 0
    key_prefix: str = "storm-on-ray:"
    timeout_ms: int = 5000
    ssl: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cert_reqs: str = "required"
    ssl_check_hostname: bool = True

    @classmethod
    def from_dict(cls, raw: dict) -> RedisConfig:
        """Check and convert a config dict (a ``url`` is split into its parts).

        Raises:
            ConfigError: no ``host`` (nor ``url``), an unknown key, a value of the wrong
                type or range, a ``url`` that is not ``redis://``/``rediss://`` or is given
                with a key it sets, or more than one of ``password``, ``password_env``
                and ``password_file``. A password's value is never in the message.
        """
        known = [*cls.__dataclass_fields__, "url"]
        for key in raw:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, 1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {known}"
                raise ConfigError(f"{_CONFIG_KEY}: unknown key {key!r} for the redis "
                                  f"provider{hint}")
        raw = {k: v for k, v in raw.items() if v is not None}
        if "url" in raw:
            raw = _from_url(raw)
        if not raw.get("host"):
            raise ConfigError(
                f"topology.state.provider \"redis\" needs \"host\" (or \"url\") in "
                f"{_CONFIG_KEY} (a Redis every Ray node reaches: \"localhost\" would be "
                f"another one on each node), e.g. {{\"host\": \"10.0.0.5\", \"port\": "
                f"6379, \"password_env\": \"REDIS_PASSWORD\"}}; or choose \"local\" or "
                f"\"memory\"")

        def check(key: str, types: tuple, ok: Callable[[Any], bool] = lambda v: True,
                  what: str = "") -> None:
            v = raw.get(key)
            if v is None or (isinstance(v, types) and (types[0] is bool
                                                       or not isinstance(v, bool)) and ok(v)):
                return
            shown = type(v).__name__ if key in _SECRET_KEYS else repr(v)
            raise ConfigError(f"{_CONFIG_KEY}: {key!r} must be {what or types[0].__name__}, "
                              f"got {shown}")
        check("host", (str,))
        check("port", (int,), lambda v: 0 < v < 65536, "a port number (1-65535)")
        for key in ("password", "password_env", "password_file", "username", "key_prefix",
                    "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            check(key, (str,))
        check("db", (int,), lambda v: v >= 0, "a database number >= 0")
        check("timeout_ms", (int,), lambda v: v > 0, "a positive int (ms)")
        check("ssl", (bool,))
        check("ssl_check_hostname", (bool,))
        check("ssl_cert_reqs", (str,), lambda v: v in _CERT_REQS,
              f"one of {', '.join(map(repr, _CERT_REQS))}")
        given = [k for k in ("password", "password_env", "password_file") if k in raw]
        if len(given) > 1:
            raise ConfigError(f"{_CONFIG_KEY}: give one of {', '.join(given)}, not several")
        return cls(**raw)

    @property
    def address(self) -> str:
        """``host:port/db`` (an IPv6 host in brackets), as errors name the server;
        ``rediss://`` before it with TLS."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'rediss://' if self.ssl else ''}{host}:{self.port}/{self.db}"

    def resolved_password(self) -> str | None:
        """The password: ``password``, or read from ``password_env`` or
        ``password_file`` now (so a rotated secret is read on the next connection).

        Raises:
            ConfigError: the variable is not set, or the file cannot be read; naming the
                variable or the file, never a value.
        """
        if self.password_env is not None:
            value = os.environ.get(self.password_env)
            if value is None:
                raise ConfigError(f"{_CONFIG_KEY}: password_env {self.password_env!r} is not "
                                  f"set in this process's environment (set it on every "
                                  f"node, e.g. in the Ray workers' environment)")
            return value
        if self.password_file is not None:
            try:
                with open(self.password_file, encoding="utf-8") as f:
                    return f.read().removesuffix("\n")
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"{_CONFIG_KEY}: password_file {self.password_file!r} "
                                  f"cannot be read ({type(e).__name__}: "
                                  f"{e.strerror if isinstance(e, OSError) else 'not UTF-8'})"
                                  ) from None
        return self.password


def _from_url(raw: dict) -> dict:
    """``raw`` with its ``url`` replaced by the keys it sets."""
    url = raw.pop("url")
    if not isinstance(url, str):
        raise ConfigError(f"{_CONFIG_KEY}: 'url' must be a str, got a {type(url).__name__}")
    masked = mask_uri(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{_CONFIG_KEY}: url {masked!r} cannot be read ({e})") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(f"{_CONFIG_KEY}: url {masked!r} must be redis://host[:port][/db] "
                          f"or rediss://… (TLS)")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ConfigError(f"{_CONFIG_KEY}: url {masked!r}: the path must be a database "
                          f"number, got {path!r}")
    fields = {"host": parts.hostname, "port": port, "db": int(path) if path else None,
              "username": unquote(parts.username) if parts.username else None,
              "password": unquote(parts.password) if parts.password is not None else None,
              "ssl": True if parts.scheme == "rediss" else None}
    both = sorted(k for k, v in fields.items() if v is not None and k in raw)
    if both:
        raise ConfigError(f"{_CONFIG_KEY}: url {masked!r} sets {', '.join(both)}: give "
                          f"them in the url or as keys, not both")
    return {**raw, **{k: v for k, v in fields.items() if v is not None}}


class _Client:
    """One connection pool to the server and the error translation of every call."""

    def __init__(self, config: RedisConfig) -> None:
        if redis is None:
            raise ConfigError("topology.state.provider \"redis\" needs the redis-py client: "
                              "pip install 'storm-on-ray[redis]' (redis>=5)")
        self.config = config
        self.address = config.address
        timeout = config.timeout_ms / 1000.0
        tls = ({"ssl": True, "ssl_ca_certs": config.ssl_ca_certs,
                "ssl_certfile": config.ssl_certfile, "ssl_keyfile": config.ssl_keyfile,
                "ssl_cert_reqs": config.ssl_cert_reqs,
                "ssl_check_hostname": config.ssl_check_hostname} if config.ssl else {})
        self.redis = redis.Redis(
            host=config.host, port=config.port, db=config.db,
            password=config.resolved_password(), username=config.username,
            socket_timeout=timeout, **tls,
            socket_connect_timeout=timeout,
            retry=Retry(ExponentialBackoff(cap=_BACKOFF_CAP_S, base=_BACKOFF_BASE_S),
                        _RETRIES),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError])

    def _error(self, command: str, e: Exception) -> RedisStateError:
        why = mask_text(f"{type(e).__name__}: {e}")
        if isinstance(e, redis.AuthenticationError) or "NOAUTH" in str(e) \
                or "WRONGPASS" in str(e):
            why += (f" (check \"password\" (or \"password_env\", \"password_file\") "
                    f"and \"username\" in {_CONFIG_KEY})")
        elif "SSL" in str(e) or "certificate" in str(e):
            why += (f" (check \"ssl\", \"ssl_ca_certs\", \"ssl_certfile\" and "
                    f"\"ssl_keyfile\" in {_CONFIG_KEY}, and that \"port\" is the server's "
                    f"TLS port)")
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
