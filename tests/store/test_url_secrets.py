"""A store URL's credentials never appear in the error its bad spelling raises: such messages
reach logs, Dagster's event log and Spark's driver output (slatedb_core/store/redact.py)."""

from __future__ import annotations

import pytest

from slatedb_core.errors import InvalidArgument, SlateDBError
from slatedb_core.store.redact import redact_url
from slatedb_core.store.txn import open_txn_store
from slatedb_core.store.url import open_store

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"


@pytest.mark.parametrize(
    "url",
    [
        f"s3://?secret_access_key={SECRET}",  # no bucket
        f"s3://Bad Bucket/p?secret_access_key={SECRET}",  # bad bucket name
        f"s3://bucket/p?secret_access_key={SECRET}#frag",  # fragment
        f"s3://bucket/p?secret_access_key={SECRET}&regoin=eu",  # unknown option
        f"s3://bucket/../p?session_token={SECRET}",  # bad prefix
        f"s4://bucket?secret_access_key={SECRET}",  # unknown scheme
        f"file:///tmp/x?secret_access_key={SECRET}",  # file with a query
        f"s3://bucket?endpoint=ftp://u:{SECRET}@h&access_key_id=a",  # bad endpoint
        f"s3://bucket?endpoint=http://u:{SECRET}@127.0.0.1:1",  # http without allow_http
        f"s3://bucket?txn=postgresql%3A%2F%2Fu%3A{SECRET}%40%2Fdb",  # txn URL without host
    ],
)
def test_a_bad_store_url_error_does_not_show_its_secrets(url: str) -> None:
    with pytest.raises(SlateDBError) as info:
        open_store(url)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://user:{SECRET}@/db",
        f"sqlite://user:{SECRET}@host/x.db",
        f"mysql://user:{SECRET}@host/db",
    ],
)
def test_a_bad_transactional_store_url_error_does_not_show_its_password(url: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        open_txn_store(url)
    assert SECRET not in str(info.value)


def test_redact_keeps_what_an_operator_needs_to_find_the_mistake() -> None:
    shown = redact_url(
        f"s3://bucket/p?region=eu-west-1&secret_access_key={SECRET}&endpoint=http://127.0.0.1:8333"
    )
    assert shown == (
        "s3://bucket/p?region=eu-west-1&secret_access_key=***&endpoint=http://127.0.0.1:8333"
    )
    assert redact_url(f"postgresql://dagster:{SECRET}@127.0.0.1:5432/dagster") == (
        "postgresql://dagster:***@127.0.0.1:5432/dagster"
    )
    assert redact_url("file:///data/lake") == "file:///data/lake"
