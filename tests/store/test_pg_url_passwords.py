"""A PostgreSQL password in a transactional-store URL is never shown, whatever it holds.

Issue 39, item 3: ``urlsplit`` ends the host at ``?``, ``#`` and ``/`` and splits userinfo at
the last ``@``; libpq ends userinfo at the first ``@`` (before any ``/``) and knows no fragment.
A password holding one of those characters was printed whole or in part by
``open_txn_store``'s errors, and one holding ``@`` was partly printed and sent to DNS as a host
name. Every printable ASCII character is tried here, raw and percent-encoded, against a real
PostgreSQL server that checks the password (SCRAM), in error messages, ``repr``/``str`` of the
store, ``redact_url`` and the CLI.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from slatedb_core.errors import SlateDBError
from slatedb_core.store.redact import redact_url
from slatedb_core.store.twophase import open_two_phase
from slatedb_core.store.txn import open_txn_store
from slatedb_core.store.url import open_store

LEFT, RIGHT = "Qz7Left", "Rgt8Xw"
CHARS = string.printable[:95]  # every printable ASCII character, space included
# raw in a URL, libpq refuses these (or reads them as something other than the password)
RAW_REFUSED = set("%/@ ")


def password(c: str) -> str:
    return f"{LEFT}{c}{RIGHT}"


def assert_hidden(text: str, what: str) -> None:
    """Neither half of the password in ``text`` (the message never shows the text itself)."""
    __tracebackhide__ = True  # pytest would show ``text`` as this frame's argument
    leaked = [half for half in (LEFT, RIGHT) if half in text]
    assert not leaked, f"{what}: {len(leaked)} half/halves of the password shown"


def test_redact_url_hides_every_password_character() -> None:
    for c in CHARS:
        pw = password(c)
        inner = f"postgresql://u:{quote(pw, safe='')}@h/db"
        for url in (
            f"postgresql://u:{pw}@127.0.0.1:5432/db",
            f"postgres://u:{quote(pw, safe='')}@127.0.0.1:5432/db",
            f"postgresql://127.0.0.1:5432/db?sslmode=disable&password={pw}",
            f"http://u:{pw}@127.0.0.1:9000",
            f"s3://bucket/p?txn=postgresql://u:{pw}@127.0.0.1:5432/db&region=eu",
            f"s3://bucket/p?txn={quote(inner, safe='')}",
            f"s3://bucket/p?secret_access_key={pw}&region=eu",
            f"s3://bucket/p?endpoint=http://u:{pw}@127.0.0.1:9000&allow_http=true",
        ):
            assert_hidden(redact_url(url), f"redact_url, character {c!r}")


def test_redaction_keeps_what_is_not_secret() -> None:
    assert redact_url("postgresql://u:a?b@127.0.0.1:5432/db") == (
        "postgresql://u:***@127.0.0.1:5432/db"
    )
    assert redact_url("postgresql://u:a#b@h/db?sslmode=require&password=x") == (
        "postgresql://u:***@h/db?sslmode=require&password=***"
    )
    assert redact_url("s3://bucket/p?txn=postgresql://u:pw@h/db&region=eu") == (
        "s3://bucket/p?txn=***&region=eu"
    )


@pytest.fixture(scope="module")
def scram_pg() -> Iterator[Any]:
    """A PostgreSQL cluster whose role ``pwuser`` must give its password (SCRAM) on TCP."""
    from tests.pgcluster import PG_MISSING, PgCluster, find_pg_bin

    if find_pg_bin() is None:
        pytest.skip(PG_MISSING)
    cluster = PgCluster()
    try:
        hba = cluster.data / "pg_hba.conf"
        hba.write_text(
            "host all pwuser 127.0.0.1/32 scram-sha-256\n"
            "local all postgres trust\nhost all postgres 127.0.0.1/32 trust\n"
        )
        import psycopg

        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE ROLE pwuser LOGIN")
            conn.execute("CREATE DATABASE pwdb OWNER pwuser")
        yield cluster
    finally:
        cluster.stop()


def set_password(cluster: Any, pw: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE pwuser PASSWORD {}").format(sql.Literal(pw)))


def forms(c: str, port: int) -> list[tuple[str, str]]:
    """(name, URL) spellings of the URL of ``password(c)``."""
    pw = password(c)
    return [
        ("raw", f"postgresql://pwuser:{pw}@127.0.0.1:{port}/pwdb"),
        ("percent-encoded", f"postgresql://pwuser:{quote(pw, safe='')}@127.0.0.1:{port}/pwdb"),
        ("query", f"postgres://pwuser@127.0.0.1:{port}/pwdb?password={quote(pw, safe='')}"),
    ]


@pytest.mark.postgres
def test_every_password_character_reaches_postgres_and_is_never_shown(
    scram_pg: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = scram_pg.port
    opened = 0
    for c in CHARS:
        set_password(scram_pg, password(c))
        for name, url in forms(c, port):
            what = f"{name} URL, character {c!r}"
            try:
                store = open_txn_store(url)
            except SlateDBError as e:
                assert_hidden(f"{e} {e!r}", what)
                assert name == "raw" and c in RAW_REFUSED, f"{what}: refused ({type(e).__name__})"
                continue
            opened += 1
            try:
                assert store.insert_intent("ns", f"{opened}", "b", 1)
                assert_hidden(f"{store} {store!r} {store.url}", what)
            finally:
                store.close()
            # the same URL to a port where nothing listens: the connection error hides it too
            dead = url.replace(f":{port}/", ":1/")
            with pytest.raises(SlateDBError) as info:
                open_txn_store(dead)
            assert_hidden(f"{info.value} {info.value!r}", f"{what}, dead port")
    assert opened == 3 * len(CHARS) - len(RAW_REFUSED)
    assert_hidden(caplog.text, "the log")


@pytest.mark.postgres
def test_a_wrong_password_error_hides_it(scram_pg: Any) -> None:
    set_password(scram_pg, "the-right-one")
    for c in CHARS:
        for name, url in forms(c, scram_pg.port):
            if name == "raw" and c in RAW_REFUSED:
                continue
            with pytest.raises(SlateDBError) as info:
                open_txn_store(url)
            assert_hidden(f"{info.value} {info.value!r}", f"{name} URL, character {c!r}")


@pytest.mark.parametrize("c", ["@", "/", "?", "#"])
def test_an_at_sign_is_never_sent_to_dns_and_the_password_never_shown(c: str) -> None:
    """``u:Left@Right@host``: libpq would look up the host ``Right@host``; refused before any
    connection, and the error shows neither half."""
    url = f"postgresql://u:{password(c)}@no-such-host.invalid:5432/db"
    with pytest.raises(SlateDBError) as info:
        open_txn_store(url)
    assert_hidden(f"{info.value} {info.value!r}", f"character {c!r}")
    if c in "@/":
        assert "no-such-host" not in str(info.value)  # refused before DNS, not a lookup error


@pytest.mark.parametrize("c", ["@", "/", "?", "#", "%", " ", "&"])
def test_a_store_url_with_a_txn_url_hides_its_password(c: str, tmp_path: Any) -> None:
    pw = password(c)
    for txn in (f"postgresql://u:{pw}@127.0.0.1:1/db", f"postgresql://u:{quote(pw)}@[::1:1/db"):
        for url in (f"s3://bucket/p?txn={quote(txn, safe='')}", f"s3://bucket/p?txn={txn}"):
            with pytest.raises(SlateDBError) as info:
                open_store(url, endpoint="http://127.0.0.1:1", allow_http="true")
            assert_hidden(f"{info.value} {info.value!r}", f"character {c!r}")
        with pytest.raises(SlateDBError) as info:
            open_two_phase(open_store("memory://"), txn)
        assert_hidden(f"{info.value} {info.value!r}", f"open_two_phase, character {c!r}")


def test_the_cli_hides_a_txn_password(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from slatedb_core.cli.main import cli

    for c in "@/?#% ":
        txn = f"postgresql://u:{password(c)}@127.0.0.1:1/db"
        result = CliRunner().invoke(
            cli,
            [
                "--url",
                f"s3://bucket/p?txn={quote(txn, safe='')}",
                "--path",
                "db",
                "list-checkpoints",
            ],
            env={"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ALLOW_HTTP": "true"},
        )
        assert result.exit_code != 0
        assert_hidden(result.output + str(result.exception), f"CLI, character {c!r}")


def test_spark_input_urls_share_the_redaction() -> None:
    """spark_jobs.parquet_input named input URLs with its own redaction (query only)."""
    from spark_jobs.parquet_input import redacted

    for c in CHARS:
        pw = password(c)
        for url in (
            f"s3://bucket/in?secret_access_key={quote(pw, safe='')}#{pw}",
            f"s3://u:{pw}@bucket/in",
            f"s3://bucket/in?txn=postgresql://u:{pw}@h/db",
        ):
            assert_hidden(redacted(url), f"spark input URL, character {c!r}")
