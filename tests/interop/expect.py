"""What a database must hold after a history of writes, and the check that an engine reads it.

:class:`Model` applies the same puts and deletes as the engine under test; :func:`check_reads`
asks a reader (either engine's ``Db`` or ``DbReader``, through two callables) for every key ever
written, deleted ones included, plus keys never written between and around them, and for a full
scan, which must return the live rows in key order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import pyarrow as pa


class Scannable(Protocol):
    def scan(self) -> Iterator[tuple[bytes, bytes]]: ...


def scanner(db: Scannable) -> Callable[[], list[tuple[bytes, bytes]]]:
    """A full scan of our ``Db`` or ``DbReader`` as a list."""
    return lambda: list(db.scan())


class Model:
    def __init__(self) -> None:
        self.rows: dict[bytes, bytes | None] = {}

    def put(self, key: bytes, value: bytes) -> None:
        self.rows[key] = value

    def delete(self, key: bytes) -> None:
        self.rows[key] = None

    def apply(self, ops: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
        ops = list(ops)
        for key, value in ops:
            self.rows[key] = value
        return ops

    def live(self) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, v in self.rows.items() if v is not None)

    def as_table(self) -> pa.Table:
        live = self.live()
        return pa.table(
            {
                "key": pa.array([k for k, _ in live], pa.binary()),
                "value": pa.array([v for _, v in live], pa.binary()),
            }
        )


def rows(round_: int, n: int, *, step: int = 1, start: int = 0) -> list[tuple[bytes, bytes]]:
    """``n`` puts of round ``round_``: keys ``k/<5 digits>`` (long shared prefixes, as SlateDB's
    block encoding compresses them), values of every size from empty to a few KiB so that SSTs
    hold several blocks."""
    out = []
    for i in range(start, start + n * step, step):
        size = (i * 37 + round_ * 11) % 97 if i % 50 else 3000 + i % 1000
        out.append((b"k/%05d" % i, (b"r%d:%d:" % (round_, i) + b"v" * size)[:size]))
    return out


def check_reads(
    model: Model,
    get: Callable[[bytes], bytes | None],
    scan: Callable[[], list[tuple[bytes, bytes]]],
    *,
    who: str,
    every: int = 1,
) -> None:
    """``get`` answers every key as ``model`` says (None for deleted and never-written keys) and
    ``scan`` returns exactly the live rows, in key order. ``every``: ask only every n-th key
    written by ``get`` (a CLI process per key is slow)."""
    probes = {k: v for i, (k, v) in enumerate(model.rows.items()) if i % every == 0}
    for extra in (b"\x00", b"k/", b"k/99999x", b"\xff\xff", b"a", b"zz"):
        probes.setdefault(extra, None)
    for key in list(model.rows)[::7]:
        probes.setdefault(key + b"\x00", None)
    wrong = [(k, want, got) for k, want in probes.items() if (got := get(k)) != want]
    assert not wrong, f"{who}: {len(wrong)} of {len(probes)} gets wrong, e.g. {wrong[:3]!r}"
    got_rows = scan()
    want_rows = model.live()
    if got_rows != want_rows:
        got_keys = {k for k, _ in got_rows}
        want_keys = {k for k, _ in want_rows}
        raise AssertionError(
            f"{who}: scan returned {len(got_rows)} rows, expected {len(want_rows)}; missing "
            f"{sorted(want_keys - got_keys)[:3]!r}, extra {sorted(got_keys - want_keys)[:3]!r}, "
            f"in order: {[k for k, _ in got_rows] == sorted(got_keys)}"
        )
