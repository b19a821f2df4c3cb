"""Objects damaged at rest between two writer runs (RELIABILITY.md, review findings 5, 6 and 7), in schedules
whose :class:`~tests.sim.state.Profile` says so.

Every stalled operation finishes and every writer stops (crashes or closes), zombies too; then
one object the database needs is deleted or corrupted (one byte flipped) behind the engine's
back: an SST the latest manifest names (L0 or a sorted run), a WAL SST above the replay point,
or a manifest above the boundary. Then the next writer opens and reads.

The judge: a read returns the acknowledged value or raises a typed error (``SlateDBError``),
never an older value, and an open never succeeds by silently dropping acknowledged data
(:meth:`~tests.sim.base.SimBase.verify_latest` and :meth:`DamageSteps.read_through_writer`
apply the model's durability, prefix and bank judgements to every read that returns).

Only damage that some engine could tell from a legal state is done, since an undetectable
loss would fail any engine: the latest manifest is never deleted (the one before it would
pass for the latest), and a WAL SST is deleted only if it is at least ``max_parallel_writes``
ids below the highest one present (a hole closer to the top may be a write the last writer had
in flight when it died, SlateDB RFC 0001, "Parallel Writes"). Anything can be corrupted: every object
carries CRCs.
"""

from __future__ import annotations

import re

from slatedb_core.lsm.dbstate import resolve_sst_path
from tests.sim import model as m
from tests.sim.destroy_actors import DestroySteps
from tests.sim.state import DB, Writer

WAL = re.compile(rf"^{DB}/wal/(\d{{20}})\.sst$")
MANIFEST = re.compile(rf"^{DB}/manifest/(\d{{20}})\.manifest$")


class DamageSteps(DestroySteps):
    def step_damage(self) -> None:
        if self.destroyed:
            return
        self.resume_all()  # "at rest": whatever was running finishes first
        for w in self.writers:
            if w.db is None or w.state not in ("live", "zombie"):
                continue
            if w.state == "live" and self.rng.random() < 0.5:
                self.note(f"close w{w.id} (live) before the damage")
                self._close(w, "close")
            else:
                self.note(f"crash w{w.id} ({w.state}) before the damage")
                w.db._simulate_crash()
                w.state = "crashed"
                self.model.forget(w.id)
        victim = self._victim()
        if victim is None:
            return
        kind, path, data = victim
        self.note(f"damage at rest: {'delete' if data is None else 'corrupt'} {kind} {path}")
        self.rec.damage(path, data, self.raw)
        self.damaged = True
        self.figures.outcomes[f"damage:{'delete' if data is None else 'corrupt'}_{kind}"] += 1
        self.step_open_writer()
        nxt = self.live()
        if nxt is not None and not nxt.busy:
            self.read_through_writer(nxt)

    def _victim(self) -> tuple[str, str, bytes | None] | None:
        """(kind, path, new bytes or None to delete) of the object to damage, or None."""
        latest = self.rec.latest_manifest(DB)
        if latest is None:
            return None
        mid, manifest = latest
        paths = self.rec.paths_under(DB)
        ssts = sorted(
            {
                p
                for s in manifest.ssts
                if (p := resolve_sst_path(DB, manifest, s)).startswith(DB + "/") and p in paths
            }
        )
        wal = sorted(int(g[1]) for p in paths if (g := WAL.match(p)) is not None)
        wal = [i for i in wal if i > manifest.replay_after_wal_id]
        window = max(manifest.max_parallel_writes, self.options.max_parallel_writes)
        boundary = self.rec.boundary(DB, "manifest")
        manifests = sorted(
            i for p in paths if (g := MANIFEST.match(p)) is not None and (i := int(g[1])) > boundary
        )
        choices: list[tuple[str, str, bool]] = []  # (kind, path, may delete)
        choices += [("sst", p, True) for p in ssts]
        choices += [("wal", f"{DB}/wal/{i:020d}.sst", i <= wal[-1] - window) for i in wal]
        choices += [("manifest", f"{DB}/manifest/{i:020d}.manifest", i != mid) for i in manifests]
        if not choices:
            return None
        kinds = sorted({k for k, _, _ in choices})
        kind = self.rng.choices(kinds, [1 if k == "manifest" else 3 for k in kinds])[0]
        kind_path, may_delete = self.rng.choice([(p, d) for k, p, d in choices if k == kind])
        if may_delete and self.rng.random() < 0.6:
            return kind, kind_path, None
        data = self.rec.stored(kind_path)
        if not data:
            return None
        flipped = bytearray(data)
        flipped[self.rng.randrange(len(flipped))] ^= 0xFF
        return kind, kind_path, bytes(flipped)

    def read_through_writer(self, w: Writer) -> None:
        """The writer of the next run reads every key: an acknowledged value or a typed error."""
        assert w.db is not None
        db = w.db
        out = self.attempt("damaged_read", lambda: db.get_many(list(m.ALL_KEYS)))
        if out.error is not None:
            return
        assert isinstance(out.value, list)
        state = dict(zip(m.ALL_KEYS, out.value, strict=True))
        where = f"writer w{w.id} after damage at rest"
        self.figures.checks += 3
        m.check_bank(state, where)
        self.model.check_prefix(state, where)
        self.model.check_durable(state, where)
