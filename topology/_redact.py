"""Credentials masked wherever a target is named: URIs, DSNs, connection factories, configs.

One helper for every error, log line and ``repr`` that names where data goes or comes
from (a sink's URI, a database's connection factory, a state store's address, a savepoint's
target), so a password or an access key never reaches a log or a traceback. The masking is
textual and conservative: it hides the password (and, for object stores, the access key) of
a URI's user part, the values of query options and ``key=value`` pairs whose names say
secret (``password``, ``secret_key``, ``token``, ``sig``...), and the same names as quoted
keys of a dict's ``repr``. Everything else is kept, so a message still says which target
failed.

- :func:`mask_uri`: one URI, masked.
- :func:`mask_text`: any text (an error message, a ``repr``), every URI and secret pair in it
  masked.
- :func:`safe_repr`: ``repr(obj)`` masked (e.g. a ``functools.partial`` holding a DSN).
- :func:`uri_has_credentials`: whether a URI carries credentials itself (to refuse it: a URI
  is stored in the topology and printed; credentials belong in the environment, as pyarrow
  and the cloud SDKs read them).

Pure: no I/O. Sources: RFC 3986 §3.2.1 ("Use of the format 'user:password' in the userinfo
field is deprecated"), OWASP Logging Cheat Sheet (data to exclude: passwords, access tokens,
encryption keys).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, quote, urlsplit, urlunsplit

#: what replaces a secret
MASK = "***"

#: URI schemes whose user part is an access key (pyarrow's ``s3://KEY:SECRET@bucket``): the
#: user is masked too, not only the password
_KEY_USER_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "az", "wasb",
                               "wasbs", "oss", "cos"})

#: a name that says its value is secret (query options, DSN pairs, config keys)
_SECRET_NAME = re.compile(
    r"pass(?:word|wd)?|pwd|secret|token|credential|private[_-]?key|access[_-]?key"
    r"|api[_-]?key|^sig$|signature|^auth$|authorization",
    re.IGNORECASE)

#: a URI inside free text: a scheme, ``://`` and everything up to a space, quote or bracket
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{},]+")

#: a URI's user part, for URIs :func:`urllib.parse.urlsplit` refuses
_USERINFO = re.compile(r"(://)[^/@\s]*@")

#: ``name=value`` / ``name: value`` / ``'name': 'value'`` with a secret-sounding name (DSNs
#: such as libpq's ``password=x``, keyword arguments in a ``partial``'s repr, dict reprs)
_PAIR_IN_TEXT = re.compile(
    r"""(?P<name>[A-Za-z_][\w-]*)(?P<sep>['"]?\s*[=:]\s*)"""
    r"""(?P<value>'[^']*'|"[^"]*"|[^\s,;&)}\]]+)""")


def _secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def _split(uri: str) -> SplitResult | None:
    if "://" not in uri:
        return None
    try:
        return urlsplit(uri)
    except ValueError:                 # e.g. an unbalanced "[" in the host
        return None


def _userinfo(uri: str) -> tuple[int, int] | None:
    """The span of ``uri``'s user part (before the last ``@`` ahead of any ``?``/``#``), or
    None. Wider than RFC 3986's reading on purpose: an unescaped ``/`` in a secret (common in
    AWS secret keys) ends RFC's authority early, yet the secret must still be found. A ``@``
    in a path counts as a user part only with a ``:`` before it, or before the first ``/``."""
    start = uri.find("://") + 3
    stop = len(uri)
    for ch in "?#":
        i = uri.find(ch, start)
        if i != -1:
            stop = min(stop, i)
    at = uri.rfind("@", start, stop)
    if at == -1:
        return None
    user = uri[start:at]
    if ":" in user or "/" not in user:
        return start, at
    return None


def uri_has_credentials(uri: str) -> bool:
    """True if ``uri`` carries credentials itself: a user part with a password or (for an
    object store) an access key, or a query option whose name says secret.

    Args:
        uri: any string; a plain path (no ``scheme://``) has none.
    """
    if "://" not in uri:
        return False
    span = _userinfo(uri)
    if span is not None:
        scheme = uri.partition("://")[0].lower()
        if ":" in uri[span[0]:span[1]] or scheme in _KEY_USER_SCHEMES:
            return True
    parts = _split(uri)
    if parts is None:
        return span is not None
    return any(_secret_name(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True))


def mask_uri(uri: str) -> str:
    """``uri`` with its credentials replaced by ``***``: the password of the user part (and
    the user, for object stores, where it is an access key) and the values of query options
    whose names say secret. A string that is not a URI is returned as :func:`mask_text`
    masks it.

    >>> mask_uri("s3://AKIA:SECRET@bucket/p?region=eu&secret_key=x")
    's3://***:***@bucket/p?region=eu&secret_key=***'
    """
    parts = _split(uri)
    if parts is None:
        if "://" not in uri:
            return mask_text(uri)
        return _USERINFO.sub(rf"\1{MASK}@", uri)   # unparsable: hide any user part whole
    span = _userinfo(uri)
    if span is not None:
        start, end = span
        name, colon, _password = uri[start:end].partition(":")
        if parts.scheme.lower() in _KEY_USER_SCHEMES:
            name = MASK
        uri = f"{uri[:start]}{name}{':' + MASK if colon else ''}{uri[end:]}"
        parts = urlsplit(uri)
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_name(k) for k, _ in pairs):
            query = "&".join(f"{quote(k, safe='')}={MASK if _secret_name(k) else quote(v, safe='')}"
                             for k, v in pairs)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _mask_pair(m: re.Match[str]) -> str:
    if not _secret_name(m["name"]):
        return m[0]
    value = m["value"]
    quote_char = value[0] if value[:1] in ("'", '"') else ""
    return f"{m['name']}{m['sep']}{quote_char}{MASK}{quote_char}"


def mask_text(text: str) -> str:
    """``text`` with every URI's credentials (:func:`mask_uri`) and every ``name=value``,
    ``name: value`` or ``'name': 'value'`` pair whose name says secret masked; for error
    messages, log lines and reprs that may quote a target.

    >>> mask_text("could not connect: host=db user=app password=hunter2 dbname=x")
    'could not connect: host=db user=app password=*** dbname=x'
    """
    text = _URI_IN_TEXT.sub(lambda m: mask_uri(m[0]), text)
    return _PAIR_IN_TEXT.sub(_mask_pair, text)


def safe_repr(obj: object) -> str:
    """``repr(obj)`` with credentials masked (:func:`mask_text`): for naming a connection
    factory (``functools.partial(psycopg.connect, "postgresql://u:pw@h/db")``), a config dict
    or a target in an error."""
    try:
        text = repr(obj)
    except Exception as e:            # a user object whose __repr__ raises
        text = f"<{type(obj).__qualname__} (repr raised {type(e).__name__})>"
    return mask_text(text)
