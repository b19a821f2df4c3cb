"""S3 without credentials says so, and which settings to give (issue 40, item 6). Before the
fix, a request with no access key anywhere failed quoting the instance-metadata endpoint
obstore falls back to ("Error performing PUT http://169.254.169.254/latest/api/token ... 403"),
which names neither the cause nor the fix. Against the moto S3 server, the keys left out."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import S3CredentialsMissing, StoreError
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3

_CRED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def keyless_url(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in _CRED_ENV:
        monkeypatch.delenv(name, raising=False)
    bucket = moto_s3.new_bucket()
    return f"s3://{bucket}?endpoint={moto_s3.endpoint}&region=us-east-1&allow_http=true"


def test_request_without_credentials_says_what_to_set(keyless_url: str) -> None:
    store = open_store(keyless_url)
    with pytest.raises(S3CredentialsMissing) as e:
        store.get("db/manifest/x")
    assert isinstance(e.value, StoreError) and not e.value.retryable
    text = str(e.value)
    assert "169.254" not in text, text
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "access_key_id"):
        assert name in text, text


def test_cli_without_credentials_one_line(keyless_url: str) -> None:
    r = CliRunner().invoke(cli, ["--url", keyless_url, "--path", "db", "get", "k"])
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1, r.output
    assert r.output.startswith("error: S3CredentialsMissing: "), r.output
    assert "169.254" not in r.output and "AWS_ACCESS_KEY_ID" in r.output, r.output


@pytest.mark.parametrize(
    "answer",
    [
        "after 10 retries, max_retries: 10, retry_timeout: 180s - HTTP error: error sending request",
        "- Server returned non-2xx status code: 429 Too Many Requests",
        "- Server returned non-2xx status code: 503 Service Unavailable",
    ],
)
def test_a_passing_failure_of_the_metadata_endpoint_stays_retryable(answer: str) -> None:
    """Review of issue 40, item 6: on EC2 with an instance role, a timeout, a throttle or a 5xx
    of the metadata endpoint became a final "no S3 credentials", which stopped the writer's
    retries (wal/writer.py, meta/sequenced.py) where they used to recover. Only the endpoint's
    refusal (a 4xx such as the 403 above) is final."""
    import obstore.exceptions as obx

    from slatedb_core.store.objectstore import map_error

    url = "http://169.254.169.254/latest/meta-data/iam/security-credentials/role"
    e = map_error(
        obx.GenericError(f"Generic S3 error: Error performing GET {url} {answer}"), "p", "get"
    )
    assert isinstance(e, S3CredentialsMissing) and e.retryable, str(e)
    assert "AWS_ACCESS_KEY_ID" in str(e) and answer.split(" - ")[-1][:20] in str(e)
    refused = map_error(
        obx.GenericError(f"Error performing PUT {url} - Server returned non-2xx status code: 403"),
        "p",
        "get",
    )
    assert isinstance(refused, S3CredentialsMissing) and not refused.retryable
