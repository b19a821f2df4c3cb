"""A direct read or write that carries a ``provider`` option is not taken for a call from Spark's
catalog: every other option then used to be dropped from the unknown-name check, so a misspelt
``chekpoint`` read the latest state silently again (issue 40 adversarial review of item 2's
catalog filter). A call from the catalog carries the ``option.<name>`` copies of the table's
OPTIONS, or only Spark's reserved properties; a direct one with a stray ``provider`` has neither.

The options container is PySpark's own CaseInsensitiveDict, as Spark hands them over."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource_options import check_option_names
from spark_jobs.datasource_read import READ_OPTIONS


def test_a_misspelt_option_beside_a_stray_provider_is_refused() -> None:
    direct = CaseInsensitiveDict(
        {"url": "file:///lake", "path": "t", "provider": "slatedb", "chekpoint": "daily"}
    )
    with pytest.raises(InvalidArgument, match=r"'chekpoint' \(did you mean 'checkpoint'\?\)"):
        check_option_names(direct, READ_OPTIONS, "a read")


def test_catalog_calls_still_pass() -> None:
    with_options = CaseInsensitiveDict(
        {
            "provider": "slatedb",
            "location": "t",
            "path": "t",
            "url": "u",
            "option.url": "u",
            "team": "ops",  # a TBLPROPERTIES entry
        }
    )
    check_option_names(with_options, READ_OPTIONS, "a read")
    # CREATE TABLE ... USING slatedb without OPTIONS: Spark's reserved properties only
    bare = CaseInsensitiveDict({"provider": "slatedb", "location": "t", "owner": "root"})
    check_option_names(bare, READ_OPTIONS, "a read")
