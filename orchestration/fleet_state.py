"""How the fleet sensor judges each database, and what it remembers between ticks.

Pure functions over one scan of the fleet (``slatedb_core.FleetScanner``) and the sensor's cursor,
so every rule here is tested without a Dagster daemon:

* the *findings*: the current-state checks of one database (L0, WAL backlog and manifest lag are
  warnings; a manifest that does not decode, a missing SST or a GC boundary that moved backwards are
  errors), each described with the database's name and its figure against the threshold;
* the *compaction decision*: a run is keyed on the set of L0 SST ids, which a failing compactor does
  not change (it only bumps its epoch and writes a manifest), and a database whose last compaction
  failed with an alert is held back until one of the L0 SSTs present at that failure is gone (a
  repair, or a successful run by hand) — never re-requested every tick; the same *hold*
  (:func:`hold`) keeps the schedules' runs back (:mod:`orchestration.holds`), and GC, checkpoint
  refresh and export runs that failed with an alert are held until a run by hand succeeds or
  ``ALERT_HOLD_S`` has passed;
* manifest lag pinned by a checkpoint is not a reason to compact (compaction cannot move a
  checkpoint): it is reported, and when the pinning checkpoint is a managed retention checkpoint a
  ``checkpoint_refresh`` run re-takes it at the latest manifest.

The cursor is compact JSON (a few numbers per database) so an operator can read and reset it in the
UI; per-database entries are kept only for databases still in the partitions.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from orchestration.checkpoint_policy import judged_manifest_lag, lingering_checkpoints
from slatedb_core import DatabaseStatus
from slatedb_core.health import BOUNDARY_NAMESPACES

# Check names: the asset checks declared in orchestration.checks carry the same names.
INTACT = "manifest_and_ssts_intact"
L0 = "l0_under_threshold"
WAL = "wal_backlog_under_threshold"
LAG = "manifest_lag_under_threshold"
BOUNDARIES = "boundaries_behind_latest"
LINGER = "no_expired_checkpoint_lingering"
CHECK_ORDER = (INTACT, L0, WAL, LAG, BOUNDARIES, LINGER)

WARN = "WARN"
ERROR = "ERROR"

LIVE_STATES = frozenset({"live"})
GC_STATES = frozenset({"live", "retired", "destroyed"})
"""Which states each kind of run is requested for: only GC has work on a retired shard (delete it
once unreferenced) or a soft-destroyed database (delete it after the grace)."""

CURSOR_VERSION = 2
RETRY_BACKOFF_S = 60
RETRY_BACKOFF_MAX_S = 3600
ALERT_HOLD_S = 6 * 3600
"""How long a GC, checkpoint refresh or export run that failed with an alert holds back the
runs of its kind for the database (they have no input, like compaction's L0, whose change says
that something was repaired): one attempt per 6 hours instead of one per schedule tick."""
L0_TAG = "slatedb/l0"
"""On a compaction run requested by the sensor or a schedule: the L0 SST ids it was launched on
(comma-separated), so a failure with an alert is held back on the L0 it failed on whoever
launched it."""
HELD_KINDS = ("compaction", "gc", "checkpoint", "export")
"""The kinds of run a hold applies to (a job's name without ``_job``)."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    l0_max_ssts: int
    wal_backlog_max: int
    manifest_lag_max: int
    retention_checkpoints: frozenset[str] = frozenset()
    """Names of the managed retention checkpoints (policies without ``every``)."""
    scheduled_checkpoints: tuple[tuple[str, float], ...] = ()
    """(name, lifetime in seconds) of the scheduled checkpoint policies: what they pin within
    their lifetime is not lag (:func:`orchestration.checkpoint_policy.judged_manifest_lag`)."""
    expired_checkpoint_grace_s: float = 7200.0
    """How long an expired checkpoint may stay listed before ``no_expired_checkpoint_lingering``
    warns (the settings' ``expired_checkpoint_grace``)."""


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    severity: str
    passed: bool
    description: str
    figure: int | None = None
    limit: int | None = None


def _seconds(t: float | None) -> int | None:
    """Times are kept to the second: the cursor of a 10,000-database fleet stays about 1 MB."""
    return None if t is None else int(t)


def _run_json(entry: list[Any] | None, ms: bool = False) -> list[Any] | None:
    """[status or kind, time, detail] with the time to the second (or the millisecond)."""
    if entry is None:
        return None
    return [entry[0], round(entry[1], 3) if ms else _seconds(entry[1]), *entry[2:]]


@dataclass(slots=True)
class Memory:
    """What the sensor remembers of one database (one cursor entry)."""

    boundaries: list[int | None] = field(default_factory=lambda: [None] * len(BOUNDARY_NAMESPACES))
    checks: str = ""
    """One character per CHECK_ORDER entry: p(assed), f(ailed), -(not evaluated)."""
    requested_l0: list[str] | None = None
    requested_at: float | None = None
    compaction: list[Any] | None = None
    """[status, end time, alert kind or None] of the latest finished compaction run."""
    gc: list[Any] | None = None
    boundary_advanced_at: float | None = None
    alert: list[Any] | None = None
    """[kind, time, message] of the latest alert seen for this database."""
    compaction_failures: int = 0
    """Compaction runs in a row that failed without an alert (retried with a backoff)."""
    materialized: dict[str, float] = field(default_factory=dict)
    """Asset name -> end of the newest successful run of it whose results were re-reported
    (:func:`rereport_after`)."""
    alert_failures: dict[str, list[Any]] = field(default_factory=dict)
    """Kind (checkpoint, export) -> [alert kind, end time] while the latest finished run of that
    kind failed with an alert (compaction and GC keep theirs in ``compaction`` / ``gc``)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"b": self.boundaries, "k": self.checks}
        for key, value in (
            ("rl0", self.requested_l0),
            ("rat", _seconds(self.requested_at)),
            ("c", _run_json(self.compaction, ms=True)),  # tells runs apart (fold_run)
            ("g", _run_json(self.gc)),
            ("adv", _seconds(self.boundary_advanced_at)),
            ("alert", _run_json(self.alert)),
            ("cf", self.compaction_failures or None),
            ("af", {k: [a, _seconds(t)] for k, (a, t) in self.alert_failures.items()} or None),
            ("m", {k: round(t, 3) for k, t in self.materialized.items()} or None),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Memory:
        """Each field as :meth:`to_json` writes it; a field of any other shape (a hand-edited or
        damaged cursor) is dropped, since a tick that raises keeps its cursor and would fail
        again every tick."""
        b = raw.get("b")
        bounds: list[int | None] | None = (
            [v if _is_int(v) else None for v in b]
            if isinstance(b, list) and len(b) == len(BOUNDARY_NAMESPACES)
            else None
        )
        k = raw.get("k")
        checks = (
            k if isinstance(k, str) and len(k) <= len(CHECK_ORDER) and set(k) <= set("pf-") else ""
        )
        rl0 = raw.get("rl0")
        fails = raw.get("cf")
        af = raw.get("af")
        mat = raw.get("m")
        return cls(
            boundaries=bounds or [None] * len(BOUNDARY_NAMESPACES),
            checks=checks,
            requested_l0=rl0
            if isinstance(rl0, list) and all(isinstance(i, str) for i in rl0)
            else None,
            requested_at=_number(raw.get("rat")),
            compaction=_entry(raw.get("c")),
            gc=_entry(raw.get("g")),
            boundary_advanced_at=_number(raw.get("adv")),
            alert=_entry(raw.get("alert")),
            compaction_failures=fails if _is_int(fails) and fails >= 0 else 0,
            materialized={
                str(k): t
                for k, v in (mat.items() if isinstance(mat, dict) else ())
                if (t := _number(v)) is not None
            },
            alert_failures={
                k: [v[0], float(v[1])]
                for k, v in (af.items() if isinstance(af, dict) else ())
                if k in HELD_KINDS
                and isinstance(v, list)
                and len(v) == 2
                and isinstance(v[0], str)
                and _number(v[1]) is not None
            },
        )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> float | None:
    return float(value) if _is_int(value) or isinstance(value, float) else None


def _entry(value: Any) -> list[Any] | None:
    """A ``[status or kind, time, detail]`` entry as :func:`_run_json` writes it, else None."""
    if (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], str)
        and _number(value[1]) is not None
        and (value[2] is None or isinstance(value[2], str))
    ):
        return list(value)
    return None


@dataclass(slots=True)
class Cursor:
    runs_seen_until: float | None = None
    """Finished runs updated up to this time were folded into the memories."""
    fleet_at: float | None = None
    """When the fleet view was last materialized, and the digest of what it showed."""
    fleet_digest: str = ""
    verify_from: int = 0
    """Where the next tick's slice of SST verification starts (see fleet_sensor)."""
    dbs: dict[str, Memory] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(
            {
                "v": CURSOR_VERSION,
                "runs_until": self.runs_seen_until,
                "fleet_at": self.fleet_at,
                "fleet_digest": self.fleet_digest,
                "verify_from": self.verify_from,
                "dbs": {db: m.to_json() for db, m in sorted(self.dbs.items())},
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str | None) -> Cursor:
        """The cursor of an earlier tick; an empty, unreadable or older-format cursor starts
        afresh (the first tick then re-reports every database once)."""
        if not text:
            return cls()
        try:
            raw = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(raw, dict) or raw.get("v") != CURSOR_VERSION:
            return cls()
        dbs = raw.get("dbs") if isinstance(raw.get("dbs"), dict) else {}
        digest, start = raw.get("fleet_digest"), raw.get("verify_from")
        return cls(
            runs_seen_until=_number(raw.get("runs_until")),
            fleet_at=_number(raw.get("fleet_at")),
            fleet_digest=digest if isinstance(digest, str) else "",
            verify_from=start if _is_int(start) and start >= 0 else 0,
            dbs={
                str(db): Memory.from_json(m) for db, m in (dbs or {}).items() if isinstance(m, dict)
            },
        )


def state_of(status: DatabaseStatus, retired: frozenset[str]) -> str:
    """live / retired / destroyed / damaged / missing / uninitialized (or unreachable)."""
    if status.state == "live" and status.path in retired:
        return "retired"
    return status.state


def l0_digest(ids: tuple[str, ...] | list[str]) -> str:
    return hashlib.sha1("\n".join(sorted(ids)).encode()).hexdigest()[:12]


def _pinned(status: DatabaseStatus) -> str:
    cp = status.pinned_by
    if cp is None:
        return "nothing"
    return f"checkpoint {cp.name or cp.id}" + (
        "" if cp.name else " (unnamed: a reader's or clone's)"
    )


def deleted_outside_destroy(state: str, memory: Memory) -> bool:
    """A database with no manifest and no destroy tombstone (``missing``) that the sensor has
    seen with a manifest before (its intact check was judged): deleted by hand or by a bucket
    rule, not by destroy (which leaves a tombstone, docs/clones-and-destroy.md). A partition
    never seen with a manifest (a typo, a database not created yet) is not."""
    return state == "missing" and memory.checks[:1] in ("p", "f")


def vanished_with_the_store(states: Mapping[str, str], memories: Mapping[str, Memory]) -> list[str]:
    """The databases to show *unreachable* rather than deleted outside destroy: every database
    the sensor had seen with a manifest (at least two) is missing in the same scan. That is a
    store problem (a volume not mounted, a bucket or prefix emptied or renamed), not N deletions
    by hand, whose next step (the acknowledgement) would drop the whole fleet from the UI. With
    one database the two cannot be told apart; it is judged as deleted. Found by the issue 40
    adversarial review."""
    seen = [db for db, m in memories.items() if db in states and m.checks[:1] in ("p", "f")]
    gone = [db for db in seen if states[db] == "missing"]
    return gone if len(seen) >= 2 and len(gone) == len(seen) else []


def findings(
    status: DatabaseStatus,
    state: str,
    memory: Memory,
    limits: Thresholds,
    *,
    deleted: str = "",
) -> list[Finding]:
    """The current-state checks of one database. Missing and retired-but-gone databases have none;
    SST existence is only judged when this scan verified it (``status.missing_ssts``). ``deleted``:
    the description of a database deleted outside destroy (where it was, what to do,
    :func:`orchestration.missing.missing_description`)."""
    db = status.path
    out: list[Finding] = []
    if state == "damaged":
        out.append(Finding(INTACT, ERROR, False, f"{db}: {status.error_kind}: {status.error}"))
        return out
    if deleted_outside_destroy(state, memory):
        # It was seen with a manifest before: deleted outside destroy (which leaves a tombstone,
        # docs/clones-and-destroy.md), so the passing check it had must not stand.
        out.append(
            Finding(
                INTACT,
                ERROR,
                False,
                deleted
                or f"{db}: no manifest any more: the database was deleted without destroy "
                "(or its manifest/ objects were)",
            )
        )
        return out
    h = status.health
    if h is None or state in ("missing", "unreachable", "uninitialized", "invalid"):
        return out
    if status.missing_ssts is not None:
        gone = status.missing_ssts
        out.append(
            Finding(
                INTACT,
                ERROR,
                not gone,
                f"{db}: {len(gone)} of {h.ssts} SSTs the latest manifest (#{h.manifest_id}) "
                f"references are missing: {', '.join(gone[:5])}"
                if gone
                else f"{db}: manifest #{h.manifest_id} decodes and its {h.ssts} SSTs exist",
                len(gone),
                0,
            )
        )
    if state == "live":
        for check, name, figure, limit in (
            (L0, "L0 SSTs", h.l0_ssts, limits.l0_max_ssts),
            (WAL, "WAL SSTs to replay", h.wal_backlog, limits.wal_backlog_max),
        ):
            ok = figure <= limit
            out.append(
                Finding(
                    check,
                    WARN,
                    ok,
                    f"{db}: {figure} {name} (threshold {limit})" + ("" if ok else ": over"),
                    figure,
                    limit,
                )
            )
        lag, by = judged_manifest_lag(
            status.checkpoints, h.manifest_id, time.time(), dict(limits.scheduled_checkpoints)
        )
        lag_ok = lag <= limits.manifest_lag_max
        out.append(
            Finding(
                LAG,
                WARN,
                lag_ok,
                f"{db}: manifest lag {lag} (threshold {limits.manifest_lag_max}), "
                f"oldest manifest pinned by {_pinned(replace(status, pinned_by=by))}"
                + (
                    f"; {h.manifest_lag} counting the scheduled checkpoints the policy keeps"
                    if lag != h.manifest_lag
                    else ""
                ),
                lag,
                limits.manifest_lag_max,
            )
        )
        lingering = lingering_checkpoints(
            h.expired_checkpoints, time.time(), limits.expired_checkpoint_grace_s
        )
        out.append(
            Finding(
                LINGER,
                WARN,
                not lingering,
                f"{db}: {len(lingering)} checkpoints still listed longer than "
                f"{limits.expired_checkpoint_grace_s:.0f} s after they expired"
                + (
                    ": " + ", ".join(f"{c.name or '-'}:{c.id}" for c in lingering[:5])
                    if lingering
                    else ""
                ),
                len(lingering),
                0,
            )
        )
    moved = boundary_problems(status, memory)
    out.append(
        Finding(
            BOUNDARIES,
            ERROR,
            not moved,
            f"{db}: " + ("; ".join(moved) if moved else "GC boundaries only moved forward"),
        )
    )
    return out


SEVERITY = {INTACT: ERROR, L0: WARN, WAL: WARN, LAG: WARN, BOUNDARIES: ERROR, LINGER: WARN}


def unjudged(
    status: DatabaseStatus, state: str, memory: Memory, judged: list[Finding]
) -> list[Finding]:
    """The checks :func:`findings` could not judge for a damaged database whose manifest does not
    decode, or one deleted outside destroy, failed with why (the figures of a database with a
    missing SST are still true, and stand): every check of the database gets a result, so its check pages
    never show an old "Passed" (or a grey "not evaluated") beside the failing intact check
    (issue 40, item 10). Not part of the fleet view's attention text (the intact check says it)."""
    if state == "damaged" and status.health is None:  # the manifest did not decode
        why = f"{status.path}: not evaluated: {status.error_kind}: {status.error}"
    elif deleted_outside_destroy(state, memory):
        why = f"{status.path}: not evaluated: the database is missing (deleted outside destroy)"
    else:
        return []
    done = {f.check for f in judged}
    return [Finding(c, SEVERITY[c], False, why) for c in CHECK_ORDER if c not in done]


def boundary_problems(status: DatabaseStatus, memory: Memory) -> list[str]:
    """GC boundaries that moved backwards or disappeared since the last tick, or that cover the
    latest manifest (SlateDB RFC 0026: GC never moves the manifest boundary onto the latest)."""
    problems = []
    for i, ns in enumerate(BOUNDARY_NAMESPACES):
        last, now = memory.boundaries[i], status.boundaries.get(ns)
        if last is not None and now is None:
            problems.append(f"gc/{ns}.boundary disappeared (was {last})")
        elif last is not None and now is not None and now < last:
            problems.append(f"gc/{ns}.boundary moved back from {last} to {now}")
    h = status.health
    manifest_boundary = status.boundaries.get(BOUNDARY_NAMESPACES[0])
    if h is not None and manifest_boundary and manifest_boundary >= h.manifest_id:
        problems.append(
            f"gc/manifest.boundary {manifest_boundary} covers the latest manifest {h.manifest_id}"
        )
    return problems


def remember_boundaries(
    status: DatabaseStatus, memory: Memory, now: float, *, first: bool = False
) -> list[str]:
    """Fold the scanned boundaries into ``memory``; returns the namespaces that advanced. A value
    that moved backwards or vanished is not taken, so the problem stays visible until an operator
    resets the cursor. The ``first`` sighting of a database is learnt, not an advance (a fresh
    cursor would otherwise date every database's last advance to the sensor's first tick)."""
    if status.state == "missing":  # what it remembered belongs to a database that is gone
        memory.boundaries = [None] * len(BOUNDARY_NAMESPACES)
        return []
    advanced = []
    for i, ns in enumerate(BOUNDARY_NAMESPACES):
        last, value = memory.boundaries[i], status.boundaries.get(ns)
        if value is None or (last is not None and value < last):
            continue
        if last is None or value > last:
            memory.boundaries[i] = value
            if not first:
                advanced.append(ns)
    if advanced:
        memory.boundary_advanced_at = now
    return advanced


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str
    """"compaction" or "checkpoint"."""
    run_key: str | None
    reasons: tuple[str, ...]
    held: str | None = None


def compaction_decision(
    status: DatabaseStatus, memory: Memory, limits: Thresholds, now: float
) -> Decision | None:
    """Whether to request a compaction run for a live database, and under which run key."""
    h = status.health
    if h is None:
        return None
    reasons = tuple(
        f"{name} {value} > {limit}"
        for name, value, limit in (
            ("L0 SSTs", h.l0_ssts, limits.l0_max_ssts),
            ("WAL backlog", h.wal_backlog, limits.wal_backlog_max),
        )
        if value > limit
    )
    if not reasons:
        return None
    ids = status.l0_sst_ids
    last = memory.compaction
    held = compaction_hold(status.path, ids, memory, now)
    if held is not None:
        return Decision("compaction", None, reasons, held=held)
    key = f"compaction:{status.path}:l0-{l0_digest(ids)}"
    if last is not None and last[0] == "FAILURE" and not last[2] and memory.compaction_failures:
        # Dagster launches a run key once: without a new key a failure that is not an alert (a
        # store error, a setting fixed since) would never be retried while L0 stays the same.
        # One retry per failure, the first at once, then after 1, 2, 4 ... 60 min.
        n = memory.compaction_failures
        wait = 0 if n <= 1 else min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2 ** (n - 2))
        if now - last[1] < wait:
            return Decision(
                "compaction",
                None,
                reasons,
                held=(
                    f"{status.path}: compaction retried in {int(wait - (now - last[1]))} s: "
                    f"{n} runs in a row failed (without an alert), the last {ago(now, last[1])}"
                ),
            )
        key += f":retry-{int(last[1] * 1000)}"
    return Decision("compaction", key, reasons)


def compaction_hold(
    db: str, l0_ids: tuple[str, ...] | list[str], memory: Memory, now: float
) -> str | None:
    """Why compaction of ``db`` is held back (None: it is not): its latest finished compaction
    failed with an alert, whoever launched it, and every L0 SST it was launched on is still in
    L0. A repair (the L0 changes) or a run launched by hand that succeeds lifts it. A run whose
    L0 is not known (launched from the Launchpad, without ``L0_TAG``) or was empty (requested
    for the WAL backlog) holds like the other kinds (:func:`run_hold`): for ``ALERT_HOLD_S`` or
    until a run by hand succeeds."""
    last = memory.compaction
    if last is None or last[0] != "FAILURE" or not last[2]:
        return None
    if not memory.requested_l0:
        # unknown, or empty (requested for the WAL backlog): "every L0 SST it was launched on
        # is still in L0" would hold for ever, so this one is bounded in time too
        if now - last[1] >= ALERT_HOLD_S:
            return None
        return (
            f"{db}: compaction not requested: the last run (its L0 not recorded, or empty) "
            f"failed with {last[2]} {ago(now, last[1])}; held until a compaction run "
            f"launched by hand succeeds, or for {int((ALERT_HOLD_S - (now - last[1])) // 60)} "
            "min more"
        )
    if set(memory.requested_l0) <= set(l0_ids):
        return (
            f"{db}: compaction not requested: the last run failed with {last[2]} "
            f"{ago(now, last[1])} and none of the L0 SSTs it failed on has changed since "
            "(a run launched by hand that succeeds, or a repair, lifts this)"
        )
    return None


def run_hold(kind: str, db: str, memory: Memory, now: float) -> str | None:
    """Why a GC, checkpoint refresh or export run of ``db`` is held back (None: it is not): the
    latest finished run of the kind failed with an alert less than ``ALERT_HOLD_S`` ago. A run
    of the kind launched by hand that succeeds lifts it."""
    if kind == "gc":
        last = memory.gc
        failed = (
            (last[2], last[1]) if last is not None and last[0] == "FAILURE" and last[2] else None
        )
    else:
        entry = memory.alert_failures.get(kind)
        failed = (entry[0], entry[1]) if entry is not None else None
    if failed is None or now - failed[1] >= ALERT_HOLD_S:
        return None
    alert, end = failed
    return (
        f"{db}: {kind} not requested: the last run failed with {alert} {ago(now, end)}; "
        f"held until a {kind} run launched by hand succeeds, or for "
        f"{int((ALERT_HOLD_S - (now - end)) // 60)} min more"
    )


def hold(kind: str, status: DatabaseStatus, memory: Memory, now: float) -> str | None:
    """The one hold rule of fleet_sensor and the schedules: why a ``kind`` run of the database
    is held back after a failure with an alert (None: it may be launched)."""
    if kind == "compaction":
        return compaction_hold(status.path, status.l0_sst_ids, memory, now)
    if kind in HELD_KINDS:
        return run_hold(kind, status.path, memory, now)
    return None


def rereport_after(memory: Memory, asset: str, checks: tuple[str, ...], end: float) -> None:
    """A successful run of ``asset`` for the database that ended at ``end``: its checks are
    marked not reported, so this tick reports them again. Dagster shows a check result older
    than the partition's latest materialization as not evaluated (grey), and the sensor
    reports only changes, so without this a check went grey after every maintenance run
    (issue 40, item 10). A run read again (ticks overlap) counts once."""
    end = round(end, 3)
    if memory.materialized.get(asset, 0.0) >= end:
        return
    memory.materialized[asset] = end
    bits = list(memory.checks.ljust(len(CHECK_ORDER), "-"))
    for check in checks:
        bits[CHECK_ORDER.index(check)] = "-"
    memory.checks = "".join(bits)


def l0_tag(ids: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The tag a compaction run request carries: the L0 it is launched on (see ``L0_TAG``)."""
    return {L0_TAG: ",".join(ids)}


def checkpoint_decision(status: DatabaseStatus, limits: Thresholds) -> Decision | None:
    """A checkpoint_refresh run when a managed retention checkpoint pins a manifest lagging past
    the threshold (the refresh re-takes it at the latest manifest)."""
    h = status.health
    if h is None:
        return None
    lag, cp = judged_manifest_lag(
        status.checkpoints, h.manifest_id, time.time(), dict(limits.scheduled_checkpoints)
    )
    if cp is None or lag <= limits.manifest_lag_max:
        return None
    if cp.name not in limits.retention_checkpoints:
        return None
    return Decision(
        "checkpoint",
        f"checkpoint:{status.path}:{cp.id}",
        (f"manifest lag {lag} > {limits.manifest_lag_max}, pinned by {cp.name}",),
    )


def fold_run(
    memory: Memory,
    kind: str,
    status: str,
    end: float,
    alert: str | None,
    l0: list[str] | None = None,
) -> None:
    """Record a finished compaction or GC run of this database (newest wins); of any other
    kind of run its alert, and whether it holds back the kind (checkpoint, export). ``l0``: the
    L0 a compaction run was launched on (its ``L0_TAG``), which a failure is held back on."""
    if kind not in ("compaction", "gc"):
        if kind in HELD_KINDS:
            held = memory.alert_failures.get(kind)
            if held is None or held[1] <= end:
                if status == "FAILURE" and alert:
                    memory.alert_failures[kind] = [alert, end]
                elif status == "SUCCESS":
                    memory.alert_failures.pop(kind, None)
        if alert and (memory.alert is None or memory.alert[1] <= end):
            memory.alert = [alert, end, f"{kind} run failed"]
        return
    end = round(end, 3)  # as the cursor keeps it, so a run read again compares equal
    entry = [status, end, alert]
    slot = memory.compaction if kind == "compaction" else memory.gc
    if slot is not None and slot[1] > end:
        return
    if kind == "compaction":
        if slot is None or end > slot[1]:  # a run read again (ticks overlap) counts once
            failed = status == "FAILURE" and not alert
            memory.compaction_failures = memory.compaction_failures + 1 if failed else 0
            if status == "FAILURE" and alert and l0:
                # held back on the L0 this run was launched on, whoever launched it (a
                # schedule's run was never requested by the sensor)
                memory.requested_l0 = list(l0)
        memory.compaction = entry
        if status == "SUCCESS" and (memory.requested_at is None or memory.requested_at <= end):
            # Only a failure is judged against the L0 it was requested on; the ids (~30 bytes
            # each) would otherwise stay in the cursor of every database ever compacted.
            memory.requested_l0 = memory.requested_at = None
    else:
        memory.gc = entry
    if alert:
        memory.alert = [alert, end, f"{kind} run failed"]


def ago(now: float, then: float | None) -> str:
    if then is None:
        return "at an unknown time"
    s = max(0, int(now - then))
    if s < 120:
        return f"{s} s ago"
    if s < 7200:
        return f"{s // 60} min ago"
    if s < 172800:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"
