"""Opening the writer of one shard of a sharded table: fence, *then* re-read the map.

Opening a shard's :class:`~slatedb_core.writer.db.Db` fences every earlier writer of that shard
(docs/manifest-and-fencing.md). Only then is the latest shard map read again, and a shard that is
gone or sealed by a split/merge is refused (:class:`~slatedb_core.errors.ShardMapConflict`)
before anything is written. That order is what makes rescaling safe: a rescale seals its source
shards before it fences them, so a writer either opened before the seal (and the rescale's fence
stops it) or sees the seal (see :mod:`slatedb_core.table.rescale`).

:func:`act_as_writer` is the one open-with-retry of the table layer's own writers (a rescale's
fence, an overwrite's build and record carrying, a refused ingest's fencing read): it retries a
writer fenced by a concurrent opener, and with ``only_if`` it opens only on top of the manifest
it checked, so that a stale attempt never fences the writer of a live shard.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from slatedb_core.errors import Fenced, PreconditionFailed, ShardMapConflict
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore
from slatedb_core.writer.db import Db

log = logging.getLogger(__name__)

__all__ = ["act_as_writer", "check_live_shard", "open_shard_writer"]

T = TypeVar("T")


def open_shard_writer(maps: ShardMapStore, shard: Shard, options: DbOptions) -> tuple[Db, ShardMap]:
    """The fenced writer of ``shard`` and the latest map, read after fencing. ShardMapConflict,
    without writing anything, if that map no longer has the shard or a split/merge has sealed
    it: re-read the map and re-route."""
    check_live_shard(maps.read_latest(), shard)  # an early refusal; the check that counts: below
    db = Db.open(shard.db_path, maps.store, options)
    try:
        latest = maps.read_latest()
        check_live_shard(latest, shard)
    except BaseException:
        db.close()
        raise
    return db, latest


def check_live_shard(m: ShardMap, shard: Shard) -> None:
    """ShardMapConflict unless ``m`` has ``shard`` (same id, same database) and it is unsealed."""
    current = m.by_id(shard.shard_id)
    if current is None or current.db_path != shard.db_path:
        raise ShardMapConflict(
            f"shard {shard.shard_id} ({shard.db_path!r}) is no longer in shard map {m.id}; "
            "re-read the map and re-route"
        )
    if current.sealed:
        op = m.pending_for(shard.shard_id)
        what = "a rescale" if op is None else f"a {op.kind} ({op.op_id})"
        raise ShardMapConflict(
            f"shard {shard.shard_id} ({shard.db_path!r}) is sealed by {what} in shard map {m.id}; "
            "wait for it to finish (or Table.resume() a crashed one) and re-route"
        )


def act_as_writer(
    store: ObjectStore,
    db_path: str,
    options: DbOptions,
    attempts: int,
    what: str,
    act: Callable[[Db], T],
    *,
    only_if: Callable[[StoredManifest], bool] | None = None,
) -> T | None:
    """Open a writer on ``db_path``, ``act`` with it and close it; again, up to ``attempts``
    times (``TableOptions.fence_attempts``), while a writer opened after ours fences it, be it
    while ours acts or while it is still opening (between its epoch bump and its fence, SlateDB
    RFC 0001 "Writer Fencing"). Each attempt opens afresh, which re-checks the database (one
    destroyed meanwhile raises DatabaseDestroyed). ``act`` must be safe to repeat; what it
    committed stands when closing reports the fencing again. ``what`` names the act in logs.

    ``only_if``: open only while it holds, None returned once it does not (``act`` must then
    return something else than None). It is asked about the latest manifest, and the open
    commits its epoch bump only on top of that very version (``Db.open(if_manifest_id=...)``),
    so a writer that opened after the check is never fenced by ours: the open fails instead
    and we ask again. This is how a stale attempt of an overwrite or rescale leaves alone a
    target that has been swapped in (and given a writer) meanwhile: ``only_if`` reads the map
    after the manifest, so a swap after that read is followed by an open that fails ours."""
    last: Fenced | PreconditionFailed | None = None
    for attempt in range(attempts):
        if attempt:  # a little jitter, so that two openers do not keep fencing each other
            time.sleep(random.uniform(0.01, 0.05) * attempt)
        expected = None
        if only_if is not None:
            stored = ManifestStore(store, db_path).read_latest()
            if not only_if(stored):
                return None
            expected = stored.id
        try:
            db = Db.open(db_path, store, options, if_manifest_id=expected)
        except (Fenced, PreconditionFailed) as e:
            last = e
            log.info("%s %r: %s while opening; again", what, db_path, e)
            continue
        try:
            return act(db)
        except Fenced as e:
            last = e
            log.info("%s %r: %s; again", what, db_path, e)
        finally:
            try:
                db.close()
            except Fenced:
                # close() reports the fencing again (RELIABILITY.md, review finding 8); what
                # ``act`` committed stands, and we buffered nothing else
                pass
    assert last is not None
    raise last
