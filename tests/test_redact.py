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


# -- the sinks name their targets masked ------------------------------------------------------
DSN = "postgresql://app:hunter2@db.internal:5432/x"
# pyarrow refuses the option before any network call
S3 = "s3://AKIAEXAMPLEKEY:wJalrSECRETKEY@bucket/prefix?no_such_option=1"
SECRETS = ("hunter2", "AKIAEXAMPLEKEY", "wJalrSECRETKEY")


def _refused_connect(dsn):
    raise ConnectionError(f"could not connect to {dsn}")   # as drivers quote their DSN


def _no_secret(*texts):
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, text


def test_db_api_sink_never_prints_its_dsn(caplog):
    from topology._db_sink import DbApiSink
    from topology._errors import TopologyError

    sink = DbApiSink(functools.partial(_refused_connect, DSN), "INSERT INTO t VALUES (?)")
    with caplog.at_level("DEBUG"), pytest.raises(TopologyError) as e:
        sink.open_target(("a",))
    with pytest.raises(TopologyError) as not_callable:
        DbApiSink(DSN, "INSERT INTO t VALUES (?)")
    assert "db.internal" in str(e.value)                     # it still names the target
    _no_secret(str(e.value), str(not_callable.value), repr(sink),
               *(r.getMessage() for r in caplog.records))


def test_parquet_sink_never_prints_the_keys_in_its_uri(caplog):
    from topology import IterableSpout, TopologyBuilder
    from topology._components import TopologyContext
    from topology._errors import TopologyError
    from topology._parquet_sink import ParquetSink

    sink = ParquetSink(S3, partition_by=("day",))
    errors = []
    with caplog.at_level("DEBUG"):
        for call in (lambda: sink.open_target(("day",)),        # pyarrow refuses it
                     lambda: sink.open_target(("other",)),      # a partition field missing
                     lambda: sink.prepare({}, TopologyContext("t", "s", 1, 0, {}), None)):
            with pytest.raises(TopologyError) as e:
                call()
            errors.append(str(e.value))
        b = TopologyBuilder()
        b.set_spout("src", IterableSpout([(1,)], fields=("day",)))
        b.set_bolt("a", ParquetSink(S3)).shuffle_grouping("src")
        b.set_bolt("b", ParquetSink(S3)).shuffle_grouping("src")
        with pytest.raises(TopologyError, match="both write into") as e:
            b.create_topology()
        errors.append(str(e.value))
    assert all("bucket/prefix" in text for text in errors)    # it still names the target
    _no_secret(*errors, repr(sink), *(r.getMessage() for r in caplog.records))


def test_a_sink_step_error_is_masked():
    from actors._two_phase import SinkError, TwoPhaseCommitExecutor
    from topology._db_sink import DbApiSink

    sink = DbApiSink(functools.partial(_refused_connect, DSN), "INSERT INTO t VALUES (?)")
    sink.prepare({}, None, None)
    executor = TwoPhaseCommitExecutor(sink)
    with pytest.raises(SinkError) as e:
        executor._call("commit", 1, 1, {"key": "k", "rows": [], "names": []})
    assert "db.internal" in str(e.value)
    _no_secret(str(e.value))


def test_an_error_report_masks_the_message_and_the_chained_traceback(caplog):
    """A sink's commit fails on its driver's error, which quotes the DSN: the task's error
    log and its kept error kinds show neither the password nor the chained original's."""
    from actors._errors import ErrorReporter
    from actors._two_phase import TwoPhaseCommitExecutor
    from topology._db_sink import DbApiSink

    sink = DbApiSink(functools.partial(_refused_connect, DSN), "INSERT INTO t VALUES (?)")
    sink.prepare({}, None, None)
    reporter = ErrorReporter("sink", 1)
    try:
        TwoPhaseCommitExecutor(sink)._call("commit", 1, 1, {"key": "k", "rows": []})
    except Exception as e:
        with caplog.at_level("ERROR", logger="storm_on_ray.errors"):
            reporter.report(e, "commit")
    (kind,) = reporter.kinds.values()
    assert caplog.records and "db.internal" in caplog.records[0].getMessage()
    _no_secret(kind.message, kind.traceback, *(r.getMessage() for r in caplog.records))


def test_a_failed_spark_querys_error_is_masked():
    from connectors.spark.streaming_spout import query_error

    e = RuntimeError("StreamingQueryException: jdbc source failed\n"
                     "  at org.apache.spark.X\n"
                     f"Caused by: could not connect to {DSN}")
    msg = query_error(e)
    assert "db.internal" in msg
    _no_secret(msg)
