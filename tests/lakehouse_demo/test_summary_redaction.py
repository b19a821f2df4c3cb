"""The demo's closing summary shows the store URL through the shared redaction (review of
issue 39, follow-up item 4): it cut the URL at ``?`` instead, so a password in the userinfo
(``s3://user:password@...`` or any URL ``--store-url`` was given) was printed whole."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from lakehouse_demo.summary import RunFacts, render

PASSWORD = "pw-do-not-show"
TOKEN = "tok-do-not-show"


class _Out(dict[str, Any]):
    """An asset output whose every measurement is 1 (the summary only formats them)."""

    def __missing__(self, key: str) -> Any:
        return [] if key in ("checkpoints", "retired", "layout") else 1


def _summary(store_url: str) -> str:
    steps = (
        "orders_table",
        "compacted_shards",
        "daily_checkpoint",
        "checkpoint_read_under_writes",
        "rescaled_table",
        "scratch_clone_gc",
        "orders_delta_export",
    )
    out: dict[str, dict[str, Any]] = {name: _Out() for name in steps}
    facts = RunFacts(
        mode="reset",
        store_url=store_url,
        data_dir="/tmp/data",
        dagster_home="/tmp/dh",
        run_id="0123456789",
        setup=_Out(),
        total_s=1.0,
    )
    sink = io.StringIO()
    render(out, facts, Console(file=sink, width=400, color_system=None))
    return sink.getvalue()


def test_userinfo_and_secret_query_values_stay_hidden() -> None:
    text = _summary(
        f"s3://demo:{PASSWORD}@lake/prod?endpoint=http://127.0.0.1:9000"
        f"&session_token={TOKEN}&allow_http=true"
    )
    assert "store:" in text and "lake" in text, "the store line is still shown"
    # booleans, so that a failure message never quotes the summary (and the secret in it)
    password_shown, token_shown = PASSWORD in text, TOKEN in text
    assert not password_shown, "the userinfo password reached the summary"
    assert not token_shown, "a secret query value reached the summary"


def test_a_plain_local_store_reads_as_before() -> None:
    assert "store:  file:///tmp/lake  table 'orders'" in _summary("file:///tmp/lake")


def test_a_bracket_in_a_path_prints_as_itself() -> None:
    """The folder-and-store block went to rich as markup: ``[/x]`` in a data folder raised
    MarkupError and other tags restyled it (review of issue 39, follow-ups)."""
    text = _summary("file:///tmp/lake[/x]/[bold]b[/bold]")
    assert "[/x]" in text and "[bold]b[/bold]" in text
