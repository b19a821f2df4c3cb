"""The writer's WAL pipeline state: buffered writes by *generation*, and which generations are
durable (SlateDB RFC 0001 "Writes", "Acknowledgements", "Parallel Writes").

Writes enter the current :class:`WalBuffer` (generation g); sealing it makes g one WAL SST to
write. :class:`WalAcks` records what became of each sealed generation: written in order by one
flusher (``max_parallel_writes`` 1), or issued to a :class:`~slatedb_core.wal.writer.WalWindow`
whose creates land in any order. ``durable_gen`` is the contiguous watermark (every generation up
to it is in the WAL); a generation that landed ahead of it is acknowledged at once, but the
memtable flush waits for the watermark, so the replay point never passes a hole.

Everything here is bookkeeping without I/O or locking: its one user,
:class:`~slatedb_core.wal.flusher.WalFlusher`, holds its ``lock`` around every call and does the
writing, dispatching to the window and waiting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa

from slatedb_core.lsm.entries import ENTRY_SCHEMA, batch_from_lists
from slatedb_core.lsm.row_model import concat_rows


@dataclass
class WalBuffer:
    """Writes not yet in a WAL SST, for one generation."""

    keys: list[bytes] = dataclasses.field(default_factory=list)
    seqs: list[int] = dataclasses.field(default_factory=list)
    values: list[bytes | None] = dataclasses.field(default_factory=list)
    batches: list[pa.RecordBatch] = dataclasses.field(default_factory=list)
    """``put_arrow`` batches, and the rows of writes with a TTL or a merge operand (ROW_SCHEMA,
    their kind and timestamps as SlateDB writes them: merge operands as written, unfolded)."""
    nbytes: int = 0
    tick_ms: int | None = None
    """The clock tick of its newest write, set when it is sealed: the ``create_ts`` its rows
    without one are written with (SlateDB stamps each row with its write's tick, RFC 0003)."""

    def empty(self) -> bool:
        return not self.keys and not self.batches

    def to_batch(self) -> pa.RecordBatch:
        """Every buffered write, one row each, in seq order: the rows of a WAL SST.

        Nothing is sorted by key or deduplicated: SlateDB 0.17's WAL SSTs hold a batch's rows in
        seq order and repeat a key written more than once; replay applies them in order, so the
        last row of a key (its newest) wins. Each part (a ``put_arrow`` batch, the single puts
        and write batches in ``keys``) is in seq order already; only a buffer holding both kinds
        of write can need a reordering, which :func:`~slatedb_core.wal.log.in_seq_order` does."""
        parts: list[pa.RecordBatch] = list(self.batches)
        if self.keys:
            kinds = [1 if v is None else 0 for v in self.values]
            vals = [b"" if v is None else v for v in self.values]
            parts.append(batch_from_lists(self.keys, self.seqs, kinds, vals))
        if len(parts) == 1:
            return parts[0]
        if any(p.num_columns > 4 for p in parts):  # rows with a TTL or merge operands (issue 38)
            return concat_rows(parts)
        rows = pa.Table.from_batches(parts, schema=ENTRY_SCHEMA).combine_chunks()
        return rows.to_batches()[0]


class WalAcks:
    """Sealed generations and their fate. Not thread-safe: the caller holds the writer's lock."""

    def __init__(self) -> None:
        self.sealed: list[tuple[int, WalBuffer]] = []  # sealed, not yet landed, oldest first
        self.durable_gen = 0  # every generation <= this one is in the WAL
        self.last_wal_id = 0  # the WAL id of durable_gen (at open: our last fencing SST)
        self.wal_id_of_gen: dict[int, int] = {}  # landed generation -> its WAL id
        # one flusher (no window): the generation whose write failed last, and the error
        self.flush_failure: tuple[int, BaseException] | None = None
        # a window: generations landed ahead of durable_gen, issued and not yet landed, and the
        # last failure of each generation not landed
        self.landed: set[int] = set()
        self.issued: set[int] = set()
        self.failures: dict[int, tuple[int, BaseException]] = {}  # gen -> (serial, error)
        self.failure_serial = 0

    def seal(self, gen: int, buf: WalBuffer) -> None:
        self.sealed.append((gen, buf))

    # ---- one flusher, in order ---------------------------------------------------------------
    def written(self, gen: int, wal_id: int) -> None:
        """The oldest sealed generation ``gen`` is in WAL SST ``wal_id``."""
        self.sealed.pop(0)
        self.wal_id_of_gen[gen] = wal_id
        self.last_wal_id = wal_id
        self.durable_gen = gen
        if self.flush_failure is not None and self.flush_failure[0] <= gen:
            self.flush_failure = None

    def write_failed(self, gen: int, err: BaseException) -> None:
        self.flush_failure = (gen, err)

    # ---- a window, any order -------------------------------------------------------------------
    def next_unissued(self) -> tuple[int, WalBuffer] | None:
        """The oldest sealed generation not yet given to the window (landed ones leave sealed)."""
        for gen, buf in self.sealed:
            if gen not in self.issued:
                return gen, buf
        return None

    def landed_at(self, gen: int, wal_id: int) -> None:
        """Generation ``gen`` landed at ``wal_id``; advance the watermark over landed ones."""
        self.issued.discard(gen)
        self.failures.pop(gen, None)
        self.wal_id_of_gen[gen] = wal_id
        self.landed.add(gen)
        self.sealed = [(g, b) for g, b in self.sealed if g != gen]
        while self.durable_gen + 1 in self.landed:
            self.durable_gen += 1
            self.landed.discard(self.durable_gen)
            self.last_wal_id = self.wal_id_of_gen[self.durable_gen]

    def create_failed(self, gen: int, err: BaseException, final: bool) -> None:
        """A create of ``gen`` failed; ``final``: it is not retried (fenced, or a bug)."""
        self.failure_serial += 1
        self.failures[gen] = (self.failure_serial, err)
        if final:
            self.issued.discard(gen)

    def failure(self, since: int, upto: int | None = None) -> BaseException | None:
        """The failure of the oldest generation (<= ``upto``) not landed whose last attempt
        failed after failure number ``since``."""
        failed = [
            (g, err)
            for g, (serial, err) in self.failures.items()
            if serial > since and (upto is None or g <= upto)
        ]
        return min(failed, key=lambda f: f[0])[1] if failed else None

    # ---- acknowledging ---------------------------------------------------------------------------
    def acknowledged(self, gen: int, error: BaseException | None) -> bool:
        """True if a put of generation ``gen`` may return (it is durable, or landed ahead of an
        earlier one); raises what it must fail with (``error``: the writer's own failure); False
        to keep waiting."""
        if self.durable_gen >= gen or gen in self.landed:
            return True
        lost = self.failures.get(gen)
        if lost is not None:
            raise lost[1]
        # a fenced writer still acknowledges what it had in flight once it lands
        if error is not None and gen not in self.issued:
            raise error
        failure = self.flush_failure
        if failure is not None and failure[0] >= gen:
            raise failure[1]
        return False

    def forget_before(self, gen: int) -> None:
        """Generations older than ``gen`` are in L0: their WAL ids are no longer needed."""
        for g in [g for g in self.wal_id_of_gen if g < gen]:
            del self.wal_id_of_gen[g]
