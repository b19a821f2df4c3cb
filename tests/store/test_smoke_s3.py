from __future__ import annotations

import pytest

from slatedb_core.errors import ObjectAlreadyExists, PreconditionFailed
from slatedb_core.store.url import open_store


@pytest.mark.s3
def test_moto_honours_conditional_writes(s3_url: str) -> None:
    s = open_store(s3_url)
    v = s.put_if_absent("a/b", b"1")
    with pytest.raises(ObjectAlreadyExists):
        s.put_if_absent("a/b", b"2")
    v2 = s.put_if_match("a/b", b"3", v)
    with pytest.raises(PreconditionFailed):
        s.put_if_match("a/b", b"4", v)
    assert s.get("a/b").data == b"3"
    assert s.get_if_none_match("a/b", v2.e_tag or "") is None
