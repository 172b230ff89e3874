"""Ray's token authentication, as a driver or the CLI meets it when joining a cluster.

Ray (2.60 here) keeps one token per user, ``~/.ray/auth_token``, unless ``RAY_AUTH_TOKEN``
(the token itself) or ``RAY_AUTH_TOKEN_PATH`` (a file holding it) names another; both take
precedence over the file, in that order. ``RAY_AUTH_MODE`` (``token`` or ``disabled``) sets
whether a process uses it. When it is unset, Ray decides: ``ray.init()`` starting a local
cluster turns authentication on (and writes a token if there is none); ``ray start --head``
turns it on when a token exists; ``ray.init()`` finding a local cluster by itself
(``address="auto"``) uses a token when one exists. A client given an explicit address
(``ray.init(address=...)``, ``RAY_ADDRESS``) does not, so against a cluster with
authentication on it keeps retrying ``InvalidAuthToken`` and then reports the cluster
unreachable. :func:`use_available_token` does for an explicit address what Ray does for
``auto``; :func:`check_token` tells "no token" and "wrong token" apart from "unreachable"
before ``ray.init`` starts retrying.

With ``RAY_USE_TLS`` on, Ray's gRPC connections use mutual TLS with the certificates named
by ``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY`` and ``RAY_TLS_CA_CERT`` (Ray's docs,
"TLS authentication"); :func:`check_token` speaks to the GCS the same way
(:func:`channel_credentials`), so the token never crosses the network in clear text.

We never set ``RAY_AUTH_MODE=disabled``. ``ray job submit`` sends the token only when
``RAY_AUTH_MODE=token`` is set in its environment (with the variable unset it gets
"Authentication required: Missing authentication token"); ``storm-on-ray submit`` sets it
when a token exists.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Ray's guide to token authentication, quoted in our error messages.
AUTH_DOCS = "https://docs.ray.io/en/latest/ray-security/token-auth.html"
#: Ray's guide to TLS between its processes.
TLS_DOCS = "https://docs.ray.io/en/latest/ray-core/configure.html#tls-authentication"

#: The GCS call :func:`check_token` makes: small, read-only, answered by every GCS.
_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"


#: the variables of Ray's TLS configuration (Ray's docs, "TLS authentication")
TLS_VARIABLES = ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")


class ClusterAuthError(ConnectionError):
    """The Ray cluster refused this process's token, or this process has none; the message
    says where the token was looked for and how to pass the right one."""


def default_token_path() -> Path:
    """``~/.ray/auth_token``: where ``ray start``, ``ray.init()`` and ``ray get-auth-token
    --generate`` keep the user's token."""
    return Path.home() / ".ray" / "auth_token"


def find_token() -> tuple[str | None, str]:
    """The token Ray would use in this process, and where it comes from, in Ray's order:
    ``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``.

    Returns:
        ``(token, source)``; ``token`` is None when there is none (``source`` then names
        the file that was looked for). Reads at most one small file; never raises for a
        missing or unreadable file.
    """
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token, "RAY_AUTH_TOKEN"
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or default_token_path())
    try:
        token = path.read_text().strip()
    except OSError:
        token = ""
    return (token or None), str(path)


def use_available_token() -> bool:
    """Before joining a cluster at an explicit address: with ``RAY_AUTH_MODE`` unset and a
    token available (:func:`find_token`), set ``RAY_AUTH_MODE=token`` for this process and
    its children, as Ray itself does when it finds a local cluster. An explicit
    ``RAY_AUTH_MODE`` is left alone. Returns whether token mode is on afterwards. Must run
    before ``ray.init``."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None and find_token()[0] is not None:
        os.environ["RAY_AUTH_MODE"] = "token"
        mode = "token"
        _refresh_ray_config()
    return (mode or "").lower() == "token"


def _refresh_ray_config() -> None:
    """Make an already imported Ray read ``RAY_AUTH_MODE`` again. Ray caches its config when
    imported (``ray.init`` with an explicit address after ``import ray`` and then setting
    the variable still sent no token); Ray's own ``_enable_token_auth`` refreshes it the
    same way. No public API does this."""
    import sys

    if "ray" not in sys.modules:
        return  # Ray will read the variable when it is imported
    try:
        from ray._raylet import Config

        Config.initialize("")
    except (ImportError, AttributeError):  # another Ray: it reads the variable at init
        pass


def tls_enabled() -> bool:
    """Whether Ray's gRPC uses TLS in this process: ``RAY_USE_TLS`` is ``1`` or ``true``
    (as Ray reads it)."""
    return os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")


def channel_credentials():
    """The ``grpc.ChannelCredentials`` Ray's own clients use with ``RAY_USE_TLS`` on: the
    CA of ``RAY_TLS_CA_CERT`` as the root, this node's ``RAY_TLS_SERVER_CERT`` and
    ``RAY_TLS_SERVER_KEY`` as the client's certificate (Ray's TLS is mutual). None when TLS
    is off.

    Raises:
        ClusterAuthError: TLS is on and a variable is unset or names an unreadable file
            (the message names it).
    """
    import grpc

    if not tls_enabled():
        return None
    files = []
    for var in TLS_VARIABLES:
        path = os.environ.get(var)
        if not path:
            raise ClusterAuthError(f"RAY_USE_TLS is on but {var} is unset; Ray's TLS needs "
                                   f"{', '.join(TLS_VARIABLES)} (see {TLS_DOCS})")
        try:
            files.append(Path(path).read_bytes())
        except OSError as e:
            raise ClusterAuthError(f"RAY_USE_TLS is on but {var}={path} cannot be read: "
                                   f"{e.strerror}") from None
    cert, key, ca = files
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


def check_token(gcs_address: str, timeout: float = 5.0) -> None:
    """Ask the GCS at ``gcs_address`` (``host:port``) one small question with this
    process's token (none unless token mode is on) and raise if it refuses the token.
    Blocks up to ``timeout`` s. With ``RAY_USE_TLS`` on, the channel uses Ray's TLS
    credentials (:func:`channel_credentials`), as ``ray.init`` will. Any other outcome
    (answered, unreachable, a failed TLS handshake, a gRPC error) returns quietly:
    ``ray.init`` then reports it as usual.

    Raises:
        ClusterAuthError: the cluster has authentication on and this process's token is
            missing or wrong (the message says which, and what to do); TLS is on and its
            certificates are not configured.
    """
    import grpc

    token_mode = (os.environ.get("RAY_AUTH_MODE") or "").lower() == "token"
    token, source = find_token()
    metadata = [("authorization", f"Bearer {token}")] if token_mode and token else []
    credentials = channel_credentials()
    channel = (grpc.insecure_channel(gcs_address) if credentials is None
               else grpc.secure_channel(gcs_address, credentials))
    try:
        call = channel.unary_unary(_PROBE)  # bytes in, bytes out: an empty request
        call(b"", timeout=timeout, metadata=metadata)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise ClusterAuthError(auth_message(gcs_address, token if token_mode else None,
                                                source)) from None
    finally:
        channel.close()


def auth_message(address: str, token: str | None, source: str) -> str:
    """What to tell a user whose token the cluster at ``address`` refused."""
    if token is None:
        return (f"the Ray cluster at {address} requires an authentication token and this "
                f"process has none (looked in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and "
                f"{source}). Copy the cluster's token (`ray get-auth-token` on its head "
                f"node) to {default_token_path()}, or set RAY_AUTH_TOKEN; see {AUTH_DOCS}")
    return (f"the Ray cluster at {address} refused this process's authentication token "
            f"(from {source}): it is not the cluster's. Use the cluster's token "
            f"(`ray get-auth-token` on its head node) in RAY_AUTH_TOKEN or "
            f"{default_token_path()}; see {AUTH_DOCS}")
