"""Every public error says what the caller should do: its ``kind`` (issue 41, item 4).

``slatedb_core.errors`` holds one error tree; callers branch on ``err.kind`` (retry, re-read and
redo, reopen, fix the input, repair the data, report a bug), not on lists of classes, and
``is_retryable`` is derived from the kind, so it can no longer contradict a docstring (it said
no to :class:`CommitRetriesExhausted`, whose docstring says "retry later").

The kind of each class is a reviewed table below, not a guess from its text: a new error class
must be added to it, with the kind its docstring prescribes (docs/contributing.md, "How an error
is chosen").
"""

from __future__ import annotations

import inspect
import re

import pytest

from slatedb_core import errors
from slatedb_core.errors import (
    CommitRetriesExhausted,
    ErrorKind,
    InjectedFault,
    LinkInStore,
    S3CredentialsMissing,
    SlateDBError,
    StoreError,
    is_retryable,
)

K = ErrorKind
REVIEWED: dict[str, ErrorKind] = {
    "SlateDBError": K.INTERNAL,
    "InvalidArgument": K.INVALID,
    "ObjectNotFound": K.INVALID,
    "ObjectAlreadyExists": K.CONFLICT,
    "PreconditionFailed": K.CONFLICT,
    "UnsupportedOperation": K.INVALID,
    "UnsupportedFeature": K.INVALID,
    "MergeOperatorMissing": K.INVALID,
    "MergeOperatorFailed": K.INVALID,
    "ManifestV1Unrepresentable": K.INVALID,
    "StoreError": K.TRANSIENT,
    "S3CredentialsMissing": K.TRANSIENT,  # an instance refused by the endpoint: INVALID
    "LinkInStore": K.DATA,
    "InjectedFault": K.TRANSIENT,
    "VersionExists": K.CONFLICT,
    "ManifestVersionExists": K.CONFLICT,
    "ObjectVersionBehindBoundary": K.CONFLICT,
    "BoundaryMissing": K.DATA,
    "Fenced": K.CLOSED,
    "CorruptionError": K.DATA,
    "CommitRetriesExhausted": K.TRANSIENT,
    "CheckpointNotFound": K.INVALID,
    "InvalidDeletion": K.INVALID,
    "DatabaseDestroyed": K.INVALID,
    "DatabaseNotFound": K.INVALID,
    "DatabaseDeleted": K.INVALID,
    "NotADatabase": K.INVALID,
    "NotATable": K.INVALID,
    "TableNotFound": K.INVALID,
    "TableAlreadyExists": K.INVALID,
    "DatabaseNotInitialized": K.DATA,
    "ShardMapConflict": K.CONFLICT,
    "MergeBlockedByBatch": K.INVALID,
    "TableCreateIncomplete": K.TRANSIENT,
    "IngestJobExpired": K.DATA,
    "OverwriteTooOld": K.DATA,
    "CloneConflict": K.INVALID,
    "CloneIncomplete": K.DATA,
    "SourceCheckpointLost": K.DATA,
    "WalSstMissing": K.DATA,
    "WalStoreMissing": K.INVALID,
    "BackgroundThreadDied": K.CLOSED,
    "DbClosed": K.CLOSED,
    "ReaderClosed": K.CLOSED,
    "SstMissing": K.CLOSED,
    "CursorInvalid": K.INVALID,
    "ChangesCollected": K.DATA,
    "InputColumnMissing": K.INVALID,
    "CatalogOptionsMissing": K.INVALID,
    "StoreDirectoryMissing": K.INVALID,
    "UnionError": K.INVALID,
    "CompactionSourceChanged": K.CONFLICT,
    "CompactionContended": K.TRANSIENT,
    "CompactionCancelled": K.CLOSED,
    "WalEpochConflict": K.INTERNAL,
    "WalWindowClosed": K.CLOSED,
}

# Phrases a docstring uses to prescribe an action, and the one kind each belongs to.
PHRASES: tuple[tuple[str, ErrorKind], ...] = (
    (r"\bretry later\b|\btry again later\b", K.TRANSIENT),
    (r"\breopen\b|\bopen it again\b|\bopen a new one\b", K.CLOSED),
)


def _error_classes() -> list[type[SlateDBError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, SlateDBError) and cls.__module__ == errors.__name__
    ]


def test_every_error_class_has_a_reviewed_kind() -> None:
    classes = {cls.__name__: cls for cls in _error_classes()}
    unreviewed = sorted(set(classes) - set(REVIEWED))
    assert not unreviewed, (
        f"error classes without a reviewed kind: {unreviewed}: add each to REVIEWED in "
        "tests/core/test_error_kinds.py with the kind its docstring prescribes"
    )
    assert not set(REVIEWED) - set(classes), "REVIEWED names classes errors.py no longer has"
    wrong = {n: (c.kind, REVIEWED[n]) for n, c in classes.items() if c.kind is not REVIEWED[n]}
    assert not wrong, f"kind differs from the reviewed table (got, reviewed): {wrong}"


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_is_retryable_is_the_transient_kind(cls: type[SlateDBError]) -> None:
    err = cls.__new__(cls)  # the class's own kind, whatever its constructor takes
    assert isinstance(err.kind, ErrorKind)
    assert is_retryable(err) == (err.kind is ErrorKind.TRANSIENT)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_a_docstring_that_prescribes_retry_or_reopen_has_that_kind(
    cls: type[SlateDBError],
) -> None:
    doc = " ".join((cls.__doc__ or "").split()).lower()
    assert doc, f"{cls.__name__} has no docstring saying what to do"
    for pattern, kind in PHRASES:
        if re.search(pattern, doc):
            assert cls.kind is kind, f"{cls.__name__}'s docstring says {pattern!r}: {kind}"


def test_commit_retries_exhausted_is_retryable_as_its_docstring_says() -> None:
    err = CommitRetriesExhausted("manifest update", 10)
    assert "retry later" in (CommitRetriesExhausted.__doc__ or "").lower()
    assert err.kind is ErrorKind.TRANSIENT and is_retryable(err)


def test_a_store_error_that_is_not_retryable_says_what_to_do_instead() -> None:
    assert is_retryable(StoreError("timeout")) and StoreError("timeout").retryable
    denied = StoreError("access denied", retryable=False)
    assert denied.kind is ErrorKind.INVALID and not is_retryable(denied) and not denied.retryable
    closed = StoreError("store closed", kind=ErrorKind.CLOSED)
    assert not closed.retryable and not is_retryable(closed)
    refused = S3CredentialsMissing("get x", "x")
    assert refused.kind is ErrorKind.INVALID and not is_retryable(refused)
    passing = S3CredentialsMissing("get x", "x", cause="timeout")
    assert passing.kind is ErrorKind.TRANSIENT and is_retryable(passing)
    link = LinkInStore("db/x", "a link")
    assert link.kind is ErrorKind.DATA and not is_retryable(link)
    assert is_retryable(InjectedFault("boom"))
    # the class keeps its own kind: an instance's override does not leak into it
    assert StoreError.kind is ErrorKind.TRANSIENT and S3CredentialsMissing.kind is K.TRANSIENT


def test_anything_else_is_not_retryable() -> None:
    assert not is_retryable(ValueError("x")) and not is_retryable(TimeoutError())


def test_every_kind_says_what_to_do() -> None:
    for kind in ErrorKind:
        assert kind.__doc__ and kind.__doc__ != ErrorKind.__doc__, kind
