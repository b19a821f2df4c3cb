"""A writer's commit at 1,000 checkpoints cost 2.6x SlateDB's (issue 42, goal 2), 3 ms more
than the same commit without checkpoints: each of its two manifest encodes hashed every
checkpoint id through ``uuid.UUID.__hash__`` (the duplicate check), walked every checkpoint
in Python twice more (which are new; whether an expiry was clamped). Kept checkpoints were
checked when first written; an encode now steps over them in C. Measured by counting the
Python-level calls of an encode (``sys.setprofile``), which must not grow with the
checkpoints, not by timing."""

from __future__ import annotations

import gc
import sys
import uuid
from typing import Any

import pytest

from slatedb_core.checkpoints import writer_checkpoint
from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest._encode import ManifestEncoder, decodes_as_given
from slatedb_core.manifest.codec import decode_manifest
from slatedb_core.manifest.model import Checkpoint, Manifest

NAME = "db/manifest/00000000000000000009.manifest"


def _with_checkpoints(n: int) -> Manifest:
    return Manifest(
        checkpoints=tuple(Checkpoint(uuid.uuid4(), 1, 1_700_000_000 + i) for i in range(n))
    )


def _python_calls(n: int) -> int:
    """Python function calls of one writer-style encode (the writer checkpoint replaced) of a
    manifest of ``n`` checkpoints, after the encoder saw the previous one."""
    enc = ManifestEncoder()
    m = writer_checkpoint(_with_checkpoints(n), 1, 1)
    enc.encode(m)
    m = writer_checkpoint(m, 2, 1)
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    # no collection inside the count: a finalizer (another test's object) would be counted,
    # and more checkpoints allocate more, so run it more often (a flake under xdist)
    gc.collect()
    gc.disable()
    sys.setprofile(count)
    try:
        data = enc.encode(m, manifest_id=2)
        given = decodes_as_given(m)
    finally:
        sys.setprofile(None)
        gc.enable()
    assert given and decode_manifest(data, name=NAME) == m
    return calls


def test_an_encode_does_not_step_through_kept_checkpoints_in_python() -> None:
    """Issue 42, goal 2 (the commit at 1,000 checkpoints)."""
    assert _python_calls(2_000) == _python_calls(20)


def test_the_checks_still_refuse_what_they_refused() -> None:
    """A checkpoint id twice, and the clamp of an expiry past u32 (decoded differently)."""
    m = _with_checkpoints(30)
    twice = Manifest(checkpoints=(*m.checkpoints, m.checkpoints[3]))
    with pytest.raises(InvalidArgument, match="checkpoint id twice"):
        ManifestEncoder().encode(twice)
    same_id = Checkpoint(m.checkpoints[5].id, 9, 9)
    with pytest.raises(InvalidArgument, match="checkpoint id twice"):
        ManifestEncoder().encode(Manifest(checkpoints=(*m.checkpoints, same_id)))
    assert decodes_as_given(m)
    for expire in (0, 2**32, -1):
        late = Checkpoint(uuid.uuid4(), 1, 1, expire)
        assert not decodes_as_given(Manifest(checkpoints=(*m.checkpoints, late)))
    assert decodes_as_given(Manifest(checkpoints=(Checkpoint(uuid.uuid4(), 1, 1, 2**32 - 1),)))
