"""S3 credentials holding a control character are refused when the store opens (review of
issue 39, follow-up item 3): obstore put such a value into a request header and panicked at
every request (a Rust backtrace on stderr, and a ``PanicException`` that ``except Exception``
does not catch, so the CLI and the fleet scan died instead of reporting one database)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3

SECRET = "s3cr3t-do-not-show"
FIELDS = ("access_key_id", "secret_access_key", "session_token", "region")
CONTROLS = ["\n", "\r", "\x00", "\x7f", "\x1b", "\t", "\x85"]


def _url(moto: MotoS3, bucket: str, field: str, value: str) -> str:
    url = moto.url(bucket)
    if field in ("access_key_id", "secret_access_key", "region"):
        old = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
        url = url.replace(f"{field}={old[field]}", f"{field}={quote(value, safe='')}")
    else:
        url += f"&{field}={quote(value, safe='')}"
    return url


@pytest.mark.s3
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"{ord(c):02x}")
def test_a_credential_with_a_control_char_is_refused_at_open(
    moto_s3: MotoS3, field: str, char: str
) -> None:
    bucket = moto_s3.new_bucket()
    value = f"{SECRET}{char}x"
    try:
        store = open_store(_url(moto_s3, bucket, field, value))
        store.put("k", b"v")  # before the fix: a PanicException here (or a silent mis-sign)
    except InvalidArgument as e:
        msg = str(e)
        named, shown = field in msg, "s3cr3t" in msg  # no failure message quotes the secret
        assert named, "the message names the field"
        assert not shown, "the message shows the value"
        return
    except BaseException as e:  # a Rust panic is a BaseException
        pytest.fail(f"{type(e).__name__} instead of InvalidArgument for {field}")
    pytest.fail(f"a {field} holding {char!r} was accepted")


@pytest.mark.parametrize("field", FIELDS)
def test_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    env = {
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
        "region": "AWS_REGION",
    }[field]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv(env, f"{SECRET}\n")
    with pytest.raises(InvalidArgument) as e:
        open_store("s3://bucket?endpoint=http://127.0.0.1:9&allow_http=true")
    named, shown = field in str(e.value), SECRET in str(e.value)
    assert named and not shown, "the message must name the field and not show the value"


def test_ordinary_credentials_still_open() -> None:
    open_store(
        "s3://bucket?endpoint=http://127.0.0.1:9&allow_http=true&access_key_id=AKIA-x"
        "&secret_access_key=a%2Fb%2Bc%3D%20d&session_token=tok%2B%2F%3D&region=eu-west-1"
    )
