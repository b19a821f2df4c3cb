"""Where fleet_sensor keeps what it remembers of each database between ticks: in the instance's
key-value storage, with only a small pointer in the sensor's cursor.

Dagster stores a sensor's cursor with every tick it records and keeps ticks that requested runs
for good; at 10,000 databases the memory is about 1.7 MB, which as a cursor would be written into
every tick row (gigabytes a day). The key-value storage holds one copy instead.

Two slots, ``a`` and ``b``: the cursor names the slot holding the memory of the last completed
tick, and a tick writes the other one. A tick that fails after writing leaves the cursor on the
slot it did not touch, so the next tick reads a memory that agrees with its cursor. The pointer
carries the SHA-1 of what it points at; a slot overwritten by a stale tick (one that outlived
its timeout) does not match, and the sensor starts afresh: it re-reports every check once rather
than trust a memory that is not the one its cursor describes.
"""

import hashlib
import json

import dagster as dg

from orchestration.fleet_state import Cursor

KEY = "slatedb/fleet_sensor/memory/{slot}"
POINTER = "slatedb-fleet-kv-1"


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _pointer(text: str | None) -> dict[str, str] | None:
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("v") != POINTER:
        return None
    slot, digest = raw.get("slot"), raw.get("sha1")
    if slot not in ("a", "b") or not isinstance(digest, str):
        return None
    return {"slot": slot, "sha1": digest}


def load(instance: dg.DagsterInstance, cursor: str | None) -> tuple[Cursor, str | None]:
    """The memory the cursor points at, and its slot (None: no pointer). A cursor of the
    earlier format (the whole memory inline) is read as such."""
    pointer = _pointer(cursor)
    if pointer is None:
        return Cursor.loads(cursor), None
    key = KEY.format(slot=pointer["slot"])
    text = instance.run_storage.get_cursor_values({key}).get(key)
    if text is None or _sha1(text) != pointer["sha1"]:
        return Cursor(), pointer["slot"]
    return Cursor.loads(text), pointer["slot"]


def save(instance: dg.DagsterInstance, memory: Cursor, previous: str | None) -> str:
    """Write ``memory`` into the slot the cursor does not name; returns the new cursor."""
    slot = "b" if previous == "a" else "a"
    text = memory.dumps()
    instance.run_storage.set_cursor_values({KEY.format(slot=slot): text})
    return json.dumps({"v": POINTER, "slot": slot, "sha1": _sha1(text)}, sort_keys=True)


def latest(instance: dg.DagsterInstance) -> Cursor:
    """The memory of the sensor's newest completed tick, without its cursor (for the schedules,
    which share its hold, :mod:`orchestration.holds`): of the two slots, the one whose finished
    runs were read up to the later time. A stale tick that wrote a slot late started earlier,
    so its memory is the older one; an empty instance gives an empty memory."""
    keys = {KEY.format(slot=slot) for slot in ("a", "b")}
    values = instance.run_storage.get_cursor_values(keys)
    memories = [Cursor.loads(text) for text in values.values() if text]
    return max(memories, key=lambda m: m.runs_seen_until or 0.0, default=Cursor())
