"""Shared fixtures of the store tests: the transactional stores two-phase CAS keeps its records in
(``txn_url``, ``txn``), SQLite in the test's folder and a throwaway PostgreSQL cluster
(``pg_url``, tests/conftest.py; those cases carry the ``postgres`` marker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.store.txn import TxnStore, open_txn_store

TXN_KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=TXN_KINDS)
def txn_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/txn.sqlite"


@pytest.fixture
def txn(txn_url: str) -> Iterator[TxnStore]:
    store = open_txn_store(txn_url)
    yield store
    store.close()
