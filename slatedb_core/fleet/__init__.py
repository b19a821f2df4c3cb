"""Read-only status of a whole fleet of databases, fast enough for a sensor tick over thousands.

:func:`slatedb_core.health.inspect_database` plus :func:`~slatedb_core.health.read_boundaries`
cost about seven requests per database, one after another. A :class:`FleetScanner` reads many
databases at once (a bounded thread pool; obstore releases the GIL while it waits) and remembers
what it saw, so that a database nothing happened to costs one LIST on the next scan:

* **One LIST** of ``<db>/`` starting just before ``<db>/gc/`` returns, in key order, the
  boundary files (``gc/*.boundary``), every manifest and the WAL SSTs (``compacted/`` and
  ``compactions/`` sort before ``gc/``). It is used when the first page (1,000 keys) should hold
  all of ``gc/`` and ``manifest/``: always on a first scan, later when the last scan saw fewer
  than 200 manifests and WAL SSTs ahead of their GC boundaries; and its result only when the page
  did reach past the manifests. Otherwise (a busy database keeping thousands of recent
  manifests, a large WAL backlog) there are two LISTs: ``<db>/gc/``, and ``<db>/manifest/`` from
  the previously latest id (the first time: all of it, or, when the names fill a page, from the
  ``_latest_version`` pointer as :class:`~slatedb_core.meta.sequenced.SequencedStore` reads it).
* **Boundaries** (SlateDB RFC 0026): a boundary file is read (GET) only when its listed identity
  (e-tag, size, last-modified) differs from the one the previous scan listed. S3's e-tag of a
  single-part object is its content's MD5 and the local filesystem's includes the modification
  time, so a boundary rewritten with another value of the same size is read again.
* **Latest manifest** (SlateDB RFC 0001; docs/manifest-and-fencing.md): the highest id listed.
  The same id and identity as the previous scan's latest: its decoded manifest is reused; else it
  is read. Gone before the GET (collected after a newer one landed): looked up again. A database
  deleted and recreated (ids started again, or the same id holding another object) is therefore
  read afresh. A manifest written between the LIST and the GET only makes this scan report the
  one before it; the next scan lists it.
* Boundaries are read before the latest manifest is listed, so a boundary is never compared with a
  manifest older than itself (GC moves a boundary only below the latest of its time): when the one
  listing's boundary files had to be read (GET), the manifests are listed again from its latest id
  after them; a manifest boundary at the tombstone means the database was destroyed and collected
  (docs/clones-and-destroy.md), whatever manifest a stalled writer may have left there.

A first scan costs one LIST, a GET per boundary file (and then a LIST of the manifests again) and
the manifest's GET. ``verify`` adds, for the paths named, a check that every SST the latest
manifest references exists: one LIST per SST directory (a HEAD per SST when a directory holds only
one or two of them), never cached, since finding an SST deleted since is the point.

Errors stay with their database, so one bad database cannot hide the others:
``DatabaseNotFound``-like absence is ``"missing"``; a manifest or boundary that does not decode
(``CorruptionError``), a referenced SST that is absent, or a boundary file that this scanner saw
and that is now gone (GC never deletes one) is ``"damaged"``; any other store failure
(network, access denied) is ``"unreachable"``: it is not the database's fault and says nothing of
its state, so the scanner keeps its previous knowledge of that database for the next scan. Only
a bad argument (an invalid path, ``concurrency``) raises.
"""

from __future__ import annotations

from slatedb_core.fleet.scanner import FleetScanner
from slatedb_core.fleet.status import STATES, DatabaseStatus

__all__ = ["STATES", "DatabaseStatus", "FleetScanner"]
