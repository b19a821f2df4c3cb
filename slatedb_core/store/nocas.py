"""A store without conditional writes, for tests and benchmarks of two-phase CAS.

Some S3-compatible stores accept ``If-None-Match: *`` and ``If-Match`` headers and ignore them (S3
itself did until 2024). :class:`NoConditionalWrites` behaves like such a store: ``put_if_absent``
and ``put_if_match`` are plain overwrites that always report success, and so is
``copy_if_absent`` (a GET of the source and a plain PUT of its bytes: this wrapper's inner store
offers no unconditional copy). Over it, racing creators of
one path all "win"; :class:`~slatedb_core.store.twophase.TwoPhaseStore` on top of it restores
exactly one winner. Conditional GETs are passed through (stores honour those).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
)


class NoConditionalWrites(ObjectStore):
    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self.url = f"nocas+{inner.url}"
        self.counters = RequestCounters()

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    def __repr__(self) -> str:
        return f"NoConditionalWrites({self._inner!r})"

    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        self.counters.incr("get")
        return self._inner.get(path, byte_range=byte_range)

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        self.counters.incr("get")
        return self._inner.get_if_none_match(path, e_tag)

    def head(self, path: str) -> ObjectMeta:
        self.counters.incr("head")
        return self._inner.head(path)

    def put(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put")
        return self._inner.put(path, data)

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put_if_absent")
        return self._inner.put(path, data)  # If-None-Match ignored

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        self.counters.incr("put_if_match")
        return self._inner.put(path, data)  # If-Match ignored

    def copy_if_absent(self, src: str, dst: str) -> None:
        self.counters.incr("copy")
        self._inner.put(dst, self._inner.get(src).data)  # If-None-Match ignored

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        self.counters.incr("list")
        return self._inner.list(prefix, start_after=start_after)

    def delete(self, path: str) -> None:
        self.counters.incr("delete")
        self._inner.delete(path)

    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        return self._inner.sweep_staged(prefix, older_than_s=older_than_s, now_s=now_s)

    def flush_and_evict(self, paths: Sequence[str]) -> None:
        self._inner.flush_and_evict(paths)
