"""Credentials masked wherever a target is named (topology/_redact.py). Ray-free."""

import doctest
import functools
import sqlite3

import pytest

from topology import _redact
from topology._redact import mask_text, mask_uri, safe_repr, uri_has_credentials


def test_doctests():
    assert doctest.testmod(_redact).failed == 0


@pytest.mark.parametrize("uri, masked", [
    ("s3://AKIAXX:wJalr@bucket/prefix", "s3://***:***@bucket/prefix"),
    ("s3://AKIAXX@bucket/p", "s3://***@bucket/p"),
    ("postgresql://app:hunter2@db:5432/x", "postgresql://app:***@db:5432/x"),
    ("redis://:hunter2@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
    ("https://acct.blob/c?sv=1&sig=abc%2Fd", "https://acct.blob/c?sv=1&sig=***"),
    ("s3://b/p?endpoint_override=127.0.0.1:9000&scheme=http",
     "s3://b/p?endpoint_override=127.0.0.1:9000&scheme=http"),
    ("file:///tmp/a b", "file:///tmp/a b"),
])
def test_mask_uri_hides_secrets_and_keeps_the_rest(uri, masked):
    assert mask_uri(uri) == masked


def test_an_unparsable_uri_loses_its_whole_user_part():
    assert "hunter2" not in mask_uri("redis://u:hunter2@[::1/0")


@pytest.mark.parametrize("uri, has", [
    ("s3://KEY:SECRET@bucket", True), ("s3://KEY@bucket", True),
    ("gs://b/p?access_key=x", True), ("postgresql://u:p@h/db", True),
    ("postgresql://u@h/db", False), ("s3://bucket/p?region=us-east-1", False),
    ("/tmp/x", False), ("file:///tmp/x", False),
])
def test_uri_has_credentials(uri, has):
    assert uri_has_credentials(uri) is has


def test_mask_text_masks_dsn_pairs_dict_reprs_and_embedded_uris():
    text = ("failed: host=db password=hunter2 user=app; {'password': 'pw2', 'port': 1} "
            "at s3://K:S@b/x, token = tk3")
    out = mask_text(text)
    for secret in ("hunter2", "pw2", ":S@", "tk3", "K:"):
        assert secret not in out
    for kept in ("host=db", "user=app", "'port': 1", "@b/x"):
        assert kept in out


def test_safe_repr_of_a_partial_holding_a_dsn():
    factory = functools.partial(sqlite3.connect, "postgresql://app:hunter2@db/x",
                                password="pw2")
    out = safe_repr(factory)
    assert "hunter2" not in out and "pw2" not in out
    assert "connect" in out and "app:***@db/x" in out


def test_safe_repr_survives_a_repr_that_raises():
    class Bad:
        def __repr__(self):
            raise RuntimeError("no")
    assert "repr raised RuntimeError" in safe_repr(Bad())


def test_a_secret_with_an_unescaped_slash_is_still_found():
    uri = "s3://AKIAXX:wJalr/K7@bucket/prefix"
    assert uri_has_credentials(uri)
    assert mask_uri(uri) == "s3://***:***@bucket/prefix"


def test_an_at_sign_in_a_path_is_not_a_user_part():
    assert mask_uri("s3://bucket/me@example.com/data") == "s3://bucket/me@example.com/data"
    assert not uri_has_credentials("s3://bucket/me@example.com/data")
