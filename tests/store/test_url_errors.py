"""Store URLs' credentials stay out of every error (slatedb_core.store.redact): a misspelt store or
txn URL, a bad S3 endpoint (refused when the store is opened), a PostgreSQL driver error; and
redact_url itself never raises."""

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
        f"s3://AKIAEXAMPLE:{SECRET}@bucket/p",  # credentials as userinfo: the bucket echoed
        f"s3://AKIAEXAMPLE:{SECRET}@/p",
        f"my_s3://AKIAEXAMPLE:{SECRET}@bucket",  # not a valid scheme: urlsplit finds no netloc
        f"s3:/AKIAEXAMPLE:{SECRET}@bucket/p",  # one slash short
        f"s3:AKIAEXAMPLE:{SECRET}@bucket",
    ],
)
def test_credentials_in_a_misspelt_store_url_stay_out_of_the_error(url: str) -> None:
    """aaabfcd masked the password of a URL urlsplit parses; fix: also in the bucket name the
    s3 error echoes, and in URLs whose scheme or slashes are wrong (no netloc parsed).

    Found by the session-26 review (was test_review_session26.py)."""
    with pytest.raises(SlateDBError) as info:
        open_store(url)
    assert SECRET not in str(info.value)
    assert SECRET not in redact_url(url)


@pytest.mark.parametrize("url", [f"post_gres://u:{SECRET}@h/db", f"postgresql:/u:{SECRET}@h/db"])
def test_credentials_in_a_misspelt_txn_url_stay_out_of_the_error(url: str) -> None:
    """Found by the session-26 review (was test_review_session26.py)."""
    with pytest.raises(InvalidArgument) as info:
        open_txn_store(url)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("url", [123, None, b"s3://u:pw@bucket", ["s3://x"]])
def test_redact_url_never_raises_and_a_wrong_type_stays_invalid_argument(url: object) -> None:
    """redact_url must not raise: open_txn_store(123) raised AttributeError (from urlsplit
    inside redact_url) instead of InvalidArgument after aaabfcd. Fix: non-str input masked.

    Found by the session-26 review (was test_review_session26.py)."""
    assert "pw" not in redact_url(url)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        open_txn_store(url)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://h:99999",  # port out of range: a Rust panic (BaseException) at the first
        "http://h:abc",  # request, past every `except Exception`
        "http://:80",  # no host: the same panic
        "http://h%20x:1",  # a character no host has: the same panic
        "http://[::1",  # urlsplit's ValueError escaped open_store untyped
        f"http://u:{SECRET}@127.0.0.1:1",  # userinfo: every request error showed it (GET http://u:...)
    ],
)
def test_a_bad_s3_endpoint_is_refused_when_the_store_is_opened(endpoint: str) -> None:
    """Fix: open_store checks the endpoint's host and port and refuses credentials in it
    (they go in access_key_id / secret_access_key), InvalidArgument with the URL redacted.

    Found by the session-26 review (was test_review_session26.py)."""
    url = (
        f"s3://bucket/p?endpoint={endpoint}&allow_http=true&access_key_id=a"
        f"&secret_access_key={SECRET}"
    )
    with pytest.raises(InvalidArgument) as info:
        open_store(url)
    assert SECRET not in str(info.value)


def test_a_good_s3_endpoint_is_accepted() -> None:
    """Found by the session-26 review (was test_review_session26.py)."""
    for ep in (
        "http://127.0.0.1:8333",
        "https://s3.eu-west-1.amazonaws.com",
        "http://[::1]:9000",
        "http://seaweed-s3.local:8333/",
    ):
        assert open_store(f"s3://bucket/p?endpoint={ep}&allow_http=true").url == "s3://bucket/p"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}%ZZ@127.0.0.1:1/db",  # libpq quoted the bad %-token: the password
        f"postgresql://u@127.0.0.1:1/db?password={SECRET}%ZZ",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode=bogus",
    ],
)
def test_a_postgres_driver_error_does_not_show_the_password(url: str) -> None:
    """Fix: the driver's message is scrubbed of the URL's password and query values, and not
    chained as the cause (a traceback in a log or Dagster's event log showed it).

    Found by the session-26 review (was test_review_session26.py)."""
    with pytest.raises(SlateDBError) as info:
        open_txn_store(url)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None or SECRET not in str(info.value.__cause__)


def test_a_postgres_url_with_a_bad_port_is_invalid_argument() -> None:
    """Found by the session-26 review (was test_review_session26.py)."""
    with pytest.raises(InvalidArgument) as info:  # was urlsplit's ValueError
        open_txn_store(f"postgresql://u:{SECRET}@h:99999/db")
    assert SECRET not in str(info.value)
