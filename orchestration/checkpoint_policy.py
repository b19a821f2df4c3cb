"""Which named checkpoints to create, refresh and delete: a pure plan, so the rules can be tested at
any clock without a store, and so the asset only carries the plan out with ``slatedb_core.admin``.

The rules (per :class:`~orchestration.resources.CheckpointPolicy`):

* retention (no ``every``): keep exactly one live checkpoint of that name. Create it when none is
  live; refresh the newest to a full ``lifetime`` once less than ``refresh_before`` remains;
  delete older live duplicates (left by a run that died between create and delete). When the
  newest pins a manifest more than ``manifest_lag_max`` versions behind the latest, it is re-taken
  (a new one at the latest manifest, then the old one deleted): a refresh only extends its life,
  and a checkpoint's pin keeps every manifest and SST since alive (SlateDB RFC 0004), so without
  this the database's manifest lag grows without bound.
* scheduled (``every``): take a new one when the newest is older than ``every``; delete those
  older than ``retain``.
* either: delete expired ones of that name, so nobody mistakes them for a usable snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestration.resources import CheckpointPolicy
from slatedb_core import Checkpoint


@dataclass
class CheckpointPlan:
    create: list[CheckpointPolicy] = field(default_factory=list)
    refresh: list[tuple[Checkpoint, CheckpointPolicy]] = field(default_factory=list)
    delete: list[tuple[Checkpoint, str]] = field(default_factory=list)
    """(checkpoint, why)"""
    retake: list[tuple[Checkpoint, CheckpointPolicy]] = field(default_factory=list)
    """Retention checkpoints to replace by a new one at the latest manifest (create the new one,
    then delete the old one, so the name is never without a live checkpoint)."""


def plan_checkpoints(
    checkpoints: list[Checkpoint],
    policies: list[CheckpointPolicy],
    now_s: float,
    *,
    latest_manifest_id: int | None = None,
    manifest_lag_max: int | None = None,
) -> CheckpointPlan:
    """The plan at ``now_s``. Retention checkpoints are re-taken for lag only when both
    ``latest_manifest_id`` and ``manifest_lag_max`` are given."""
    plan = CheckpointPlan()
    for policy in policies:
        mine = sorted(
            (c for c in checkpoints if c.name == policy.name), key=lambda c: c.create_time_s
        )
        live = [c for c in mine if not c.is_expired(now_s)]
        plan.delete.extend((c, "expired") for c in mine if c.is_expired(now_s))
        every = policy.every_td
        if every is None:
            if not live:
                plan.create.append(policy)
                continue
            newest = live[-1]
            plan.delete.extend((c, "duplicate") for c in live[:-1])
            if (
                latest_manifest_id is not None
                and manifest_lag_max is not None
                and latest_manifest_id - newest.manifest_id > manifest_lag_max
            ):
                plan.retake.append((newest, policy))
                continue
            remaining = None if newest.expire_time_s is None else newest.expire_time_s - now_s
            if remaining is not None and remaining < policy.refresh_before_td.total_seconds():
                plan.refresh.append((newest, policy))
            continue
        retain_s = policy.retain_td.total_seconds()
        kept = []
        for c in live:
            if now_s - c.create_time_s > retain_s:
                plan.delete.append((c, "past retention"))
            else:
                kept.append(c)
        if not kept or now_s - kept[-1].create_time_s >= every.total_seconds():
            plan.create.append(policy)
    return plan


LIFETIME_SLACK_S = 5.0
"""Seconds a checkpoint's life may exceed its policy's lifetime and still be the policy's: create
and expiry times are whole seconds taken at slightly different instants."""


def scheduled_lifetimes(policies: Sequence[CheckpointPolicy]) -> dict[str, float]:
    """Name -> lifetime in seconds of every scheduled policy (one with ``every``)."""
    return {p.name: p.lifetime_td.total_seconds() for p in policies if p.every_td is not None}


def kept_by_policy(c: Checkpoint, scheduled: Mapping[str, float]) -> bool:
    """A checkpoint a scheduled policy took and keeps for its lifetime: it pins an old manifest
    on purpose (the ``daily`` one pins a week-old manifest for up to 8 days). One with the name
    but a longer life than the policy gives (or none) was made by someone else."""
    lifetime = scheduled.get(c.name) if c.name is not None else None
    return (
        lifetime is not None
        and c.expire_time_s is not None
        and c.expire_time_s - c.create_time_s <= lifetime + LIFETIME_SLACK_S
    )


def judged_manifest_lag(
    checkpoints: Iterable[Checkpoint],
    latest_manifest_id: int,
    now_s: float,
    scheduled: Mapping[str, float],
) -> tuple[int, Checkpoint | None]:
    """The manifest lag the lag check judges against ``manifest_lag_max``, and the checkpoint
    that pins it: the oldest manifest pinned by an unexpired non-writer checkpoint (as
    ``DatabaseHealth.manifest_lag``) that the scheduled policies do not keep on purpose. Warning
    on what the policy itself allows would keep the warning up for the policy's whole lifetime
    (issue 40, item 10); retention checkpoints still count (checkpoint_refresh re-takes them past
    ``manifest_lag_max``), as do readers' and clones'."""
    pins = [
        c
        for c in checkpoints
        if c.writer_epoch is None and not c.is_expired(now_s) and not kept_by_policy(c, scheduled)
    ]
    if not pins:
        return 0, None
    oldest = min(pins, key=lambda c: (c.manifest_id, c.create_time_s))
    return max(0, latest_manifest_id - oldest.manifest_id), oldest


def lingering_checkpoints(
    expired: Iterable[Checkpoint], now_s: float, grace_s: float
) -> list[Checkpoint]:
    """The expired checkpoints still listed longer than ``grace_s`` after they expired: the GC
    removes expired checkpoints on its passes, so one lingering means GC is not running. The
    one rule of ``no_expired_checkpoint_lingering``, deep (orchestration.checks) and in the
    sensor (orchestration.fleet_state.findings)."""
    return [c for c in expired if c.expire_time_s is not None and now_s - c.expire_time_s > grace_s]
