"""A bucket that does not exist (deleted, or a typo in the URL) is a store error, not "this
object/database is missing": a LIST never finds a prefix missing, so its not-found answer names
the bucket. The fleet scan then shows the databases unreachable instead of raising (issue 40
adversarial review: a deleted bucket made the scan raise ``ObjectNotFound``)."""

from __future__ import annotations

import pytest

from slatedb_core import FleetScanner
from slatedb_core.errors import ErrorKind, StoreError
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3

pytestmark = pytest.mark.s3


def test_listing_a_missing_bucket_is_a_store_error_naming_it(moto_s3: MotoS3) -> None:
    store = open_store(moto_s3.url("no-such-bucket-here"))
    with pytest.raises(StoreError, match="NoSuchBucket") as raised:
        list(store.list("db"))
    assert raised.value.kind is not ErrorKind.TRANSIENT  # retrying will not create it


def test_the_fleet_scan_of_a_missing_bucket_says_unreachable(moto_s3: MotoS3) -> None:
    store = open_store(moto_s3.url("no-such-bucket-either"))
    status = FleetScanner(store).scan(["orders"])["orders"]
    assert status.state == "unreachable" and "NoSuchBucket" in (status.error or "")


def test_reading_an_object_of_a_missing_bucket_is_not_object_not_found(moto_s3: MotoS3) -> None:
    """S3 answers a GET in a missing bucket with 404 too; taken for a missing object it made a
    database look absent rather than its store."""
    store = open_store(moto_s3.url("no-such-bucket-at-all"))
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.get("db/manifest/00000000000000000001.manifest")
