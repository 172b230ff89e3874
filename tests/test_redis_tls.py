"""The redis state provider over TLS, against a real ``redis-server --tls-port`` with
certificates of a test CA (``trustme``), and its password never printed
(actors/state/_redis_client.py; docs/security.md, item 2). Ray-free."""

from __future__ import annotations

import contextlib
import logging
import socket

import pytest

from tests._redis import NO_SERVER, RedisServer, server_binary
from tests._util import free_port
from topology import ConfigError

pytestmark = pytest.mark.skipif(server_binary() is None, reason=NO_SERVER)

PASSWORD = "s3cr3t-pw-57b"
WRONG = "Wr0ng-pw-57b"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A redis-server with a plain port (the readiness PING) and a TLS port that asks
    for a client certificate; ``(server, tls port, {pem name: path})``."""
    trustme = pytest.importorskip("trustme")
    d = tmp_path_factory.mktemp("redis-tls")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("storm-on-ray-client")
    pem = {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key",
           "client": d / "client.pem", "other_ca": d / "other-ca.pem"}
    ca.cert_pem.write_to_path(str(pem["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(pem["cert"]))
    server_cert.private_key_pem.write_to_path(str(pem["key"]))
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(pem["client"]))
    trustme.CA().cert_pem.write_to_path(str(pem["other_ca"]))
    port = free_port()
    server = RedisServer(str(d / "data"), password=PASSWORD, extra_args=(
        "--tls-port", str(port), "--tls-cert-file", str(pem["cert"]),
        "--tls-key-file", str(pem["key"]), "--tls-ca-cert-file", str(pem["ca"]),
        "--tls-auth-clients", "yes")).start()
    yield server, port, {k: str(v) for k, v in pem.items()}
    server.stop()


def _config(tls, **more) -> dict:
    _, port, pem = tls
    return {"host": "127.0.0.1", "port": port, "ssl": True, "ssl_ca_certs": pem["ca"],
            "ssl_certfile": pem["client"], "ssl_keyfile": pem["client"],
            "password": PASSWORD, **more}


def _round_trip(config) -> dict:
    from actors.state._redis import RedisProvider

    p = RedisProvider("topo", "tls1", config)
    try:
        p.checkpoint_log()
        store = p.task_store("count", 0)
        store.prepare(1, [(0, b"k", b"v")], [])
        p.checkpoint_log().record("committed", 1, {0: (1, 1)})
        return dict(p.read_raw())
    finally:
        p.delete()
        p.close()


def test_a_checkpoint_round_trips_over_tls_and_not_in_clear_text(tls):
    assert _round_trip(_config(tls)) == {"count": {0: {b"k": b"v"}}}
    with socket.create_connection(("127.0.0.1", tls[1]), timeout=5) as s:
        s.sendall(f"AUTH {PASSWORD}\r\nPING\r\n".encode())  # clear text to the TLS port
        reply = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                reply += chunk
    assert b"+OK" not in reply and b"PONG" not in reply


def test_a_rediss_url_and_a_password_from_the_environment_or_a_file(tls, tmp_path,
                                                                   monkeypatch):
    _, port, pem = tls
    certs = {"ssl_ca_certs": pem["ca"], "ssl_certfile": pem["client"],
             "ssl_keyfile": pem["client"]}
    url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"
    assert _round_trip({"url": url, **certs}) == {"count": {0: {b"k": b"v"}}}
    monkeypatch.setenv("STORM_TEST_REDIS_PW", PASSWORD)
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD + "\n")
    for source in ({"password_env": "STORM_TEST_REDIS_PW"}, {"password_file": str(secret)}):
        config = {"url": f"rediss://127.0.0.1:{port}", **certs, **source}
        assert _round_trip(config) == {"count": {0: {b"k": b"v"}}}


def test_a_server_certificate_of_another_ca_is_refused_naming_the_tls_options(tls):
    from actors.state._redis import RedisProvider, RedisStateError

    p = RedisProvider("topo", "tls2", _config(tls, ssl_ca_certs=tls[2]["other_ca"],
                                              timeout_ms=1000))
    with pytest.raises(RedisStateError, match=r"rediss://127\.0\.0\.1:\d+/0: PING failed: .*"
                                              r"certificate.*ssl_ca_certs"):
        p.ping()
    p.close()


def test_no_password_in_any_error_log_or_repr_of_the_redis_provider(tls, caplog):
    from actors.state._redis import RedisProvider, RedisStateError

    caplog.set_level(logging.DEBUG)
    server = tls[0]
    p = RedisProvider("topo", "pw", {**server.config, "password": WRONG})  # (plain port)
    texts = [repr(p.config), str(p.config), p.address, repr(p.__dict__)]
    with pytest.raises(RedisStateError, match="password") as e:  # (1.4 s: retried)
        p.checkpoint_log()
    texts += [str(e.value), repr(e.value), repr(e.value.__reduce__())]
    p.close()
    for bad in ({"host": "h", "password": 12345678},
                {"host": "h", "password": WRONG, "timeout_ms": -1}):
        with pytest.raises(ConfigError) as e:
            RedisProvider("topo", "pw", bad)
        texts.append(str(e.value))
    texts += [r.getMessage() for r in caplog.records]
    leaked = [t for t in texts if WRONG in t or "12345678" in t]
    assert not leaked, leaked
    url = f"rediss://:{WRONG}@127.0.0.1:{tls[1]}"  # a URL and TLS options: none printed
    p = RedisProvider("topo", "pw", {"url": url, **{k: v for k, v in _config(tls).items()
                                                    if k.startswith("ssl_")}})
    texts = [repr(p.config), str(p.config), p.address, repr(p.__dict__)]
    p.close()
    for bad in ({"url": f"redis://:{WRONG}@h/x"}, {"url": f"ftp://:{WRONG}@h"},
                {"url": f"redis://:{WRONG}@h:1", "port": 1},
                {"host": "h", "password": WRONG, "password_env": "X"}):
        with pytest.raises(ConfigError) as e:
            RedisProvider("topo", "pw", bad)
        texts.append(str(e.value))
    leaked = [t for t in texts if WRONG in t]
    assert not leaked, leaked


def test_a_missing_password_source_is_named_not_guessed(tmp_path, monkeypatch):
    from actors.state._redis_client import RedisConfig

    monkeypatch.delenv("STORM_TEST_NO_SUCH_VAR", raising=False)
    with pytest.raises(ConfigError, match="password_env 'STORM_TEST_NO_SUCH_VAR' is not set"):
        RedisConfig.from_dict({"host": "h", "password_env": "STORM_TEST_NO_SUCH_VAR"}
                              ).resolved_password()
    missing = str(tmp_path / "nope")
    with pytest.raises(ConfigError, match=f"password_file '{missing}' cannot be read"):
        RedisConfig.from_dict({"host": "h", "password_file": missing}).resolved_password()
