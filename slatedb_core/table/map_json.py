"""The JSON pieces of a shard map document (:mod:`slatedb_core.table.shardmap`): keys as hex
text, key ranges, and a replace's exactly-once record (``{"app_id", "version"}``). Decoding
raises TypeError or ValueError for anything else; the map decoder reports those as
CorruptionError."""

from __future__ import annotations

from typing import Any

from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import AppVersion

__all__ = ["hex_key", "key_of", "range_json", "range_of", "txn_json", "txn_of"]


def hex_key(k: bytes | None) -> str | None:
    return None if k is None else k.hex()


def range_json(r: KeyRange) -> dict[str, str | None]:
    return {"start": hex_key(r.start), "end": hex_key(r.end)}


def key_of(v: Any) -> bytes | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError(f"key must be hex text, got {type(v).__name__}")
    return bytes.fromhex(v)


def range_of(d: dict[str, Any]) -> KeyRange:
    return KeyRange(key_of(d["start"]), key_of(d["end"]))


def txn_json(txn: AppVersion | None) -> dict[str, Any] | None:
    return None if txn is None else {"app_id": txn.app_id, "version": txn.version}


def txn_of(v: Any) -> AppVersion | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise TypeError(f"txn must be an object, got {type(v).__name__}")
    app_id, version = v["app_id"], v["version"]
    if not isinstance(app_id, str) or isinstance(version, bool) or not isinstance(version, int):
        raise TypeError("txn needs a str app_id and an int version")
    return AppVersion(app_id, version)
