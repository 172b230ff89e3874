"""How a driver and the CLI find Ray's token and tell a refused token from an unreachable
cluster, without Ray: a small gRPC server stands in for a GCS with token authentication on.
The real cluster is in tests/test_cli.py and tests/test_job_submit.py."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from cluster._auth import ClusterAuthError, check_token, find_token, use_available_token
from tests._util import free_port


@pytest.fixture
def user(monkeypatch, tmp_path):
    """A user with no token anywhere: no token variables, an empty HOME. Ray's cached
    config is left alone (this process's Ray must keep the session's mode)."""
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("cluster._auth._refresh_ray_config", lambda: None)
    return tmp_path


def test_the_token_is_found_where_ray_looks_in_rays_order(user, monkeypatch):
    assert find_token() == (None, str(user / ".ray" / "auth_token"))
    (user / ".ray").mkdir()
    (user / ".ray" / "auth_token").write_text("from-home\n")
    assert find_token() == ("from-home", str(user / ".ray" / "auth_token"))
    (user / "other").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(user / "other"))
    assert find_token() == ("from-path", str(user / "other"))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert find_token() == ("from-env", "RAY_AUTH_TOKEN")


def test_token_mode_is_turned_on_only_when_unset_and_a_token_exists(user, monkeypatch):
    import os

    assert not use_available_token() and "RAY_AUTH_MODE" not in os.environ
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t")
    assert use_available_token() and os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's explicit choice stands
    assert not use_available_token() and os.environ["RAY_AUTH_MODE"] == "disabled"


@pytest.fixture
def gcs():
    """A stand-in GCS on loopback that answers the probe only with ``Bearer good``."""

    def probe(request, context):
        if ("authorization", "Bearer good") not in context.invocation_metadata():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken")
        return b""

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            return grpc.unary_unary_rpc_method_handler(probe)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def test_a_refused_token_is_told_apart_from_a_missing_one(user, monkeypatch, gcs):
    with pytest.raises(ClusterAuthError, match="this process has none"):
        check_token(gcs)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "bad")
    use_available_token()
    with pytest.raises(ClusterAuthError, match="refused this process's authentication token "
                                               r"\(from RAY_AUTH_TOKEN\)"):
        check_token(gcs)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "good")
    check_token(gcs)


def test_an_unreachable_cluster_is_left_to_ray_init(user):
    check_token(f"127.0.0.1:{free_port()}", timeout=1)  # no error: ray.init reports it


def test_the_probe_speaks_rays_tls_when_ray_use_tls_is_on(user, monkeypatch, tmp_path):
    """A GCS that takes only mutual TLS (as Ray's with ``RAY_USE_TLS=1``) still tells a
    refused token apart: the probe uses the certificates Ray's variables name."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = {"RAY_TLS_SERVER_CERT": tmp_path / "cert.pem", "RAY_TLS_SERVER_KEY":
             tmp_path / "key.pem", "RAY_TLS_CA_CERT": tmp_path / "ca.pem"}
    cert.cert_chain_pems[0].write_to_path(str(paths["RAY_TLS_SERVER_CERT"]))
    cert.private_key_pem.write_to_path(str(paths["RAY_TLS_SERVER_KEY"]))
    ca.cert_pem.write_to_path(str(paths["RAY_TLS_CA_CERT"]))

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                                       "InvalidAuthToken"))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Handler(),))
    creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes())],
        root_certificates=ca.cert_pem.bytes(), require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        monkeypatch.setenv("RAY_USE_TLS", "1")
        for var, path in paths.items():
            monkeypatch.setenv(var, str(path))
        with pytest.raises(ClusterAuthError, match="this process has none"):
            check_token(f"127.0.0.1:{port}")
        monkeypatch.delenv("RAY_TLS_CA_CERT")
        with pytest.raises(ClusterAuthError, match="RAY_TLS_CA_CERT is unset"):
            check_token(f"127.0.0.1:{port}")
    finally:
        server.stop(0)
