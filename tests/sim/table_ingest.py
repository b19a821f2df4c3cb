"""Ingest actors of the table-level simulation (:mod:`tests.sim.table_harness`): jobs driven the
way ``spark_jobs.ingest`` drives them (plan on the driver, one staging task per input partition,
one commit per shard, then the run's cleanup), one step at a time, so that rescaling, writers
and GC act between any two of their steps.

* **staged batch ingests**: with an exactly-once batch record (app ``batch-N``, version 1) or
  without; a job whose commits were refused (the map changed after its plan) fails and its
  batch is re-run by a new job id;
* **stream micro-batches**: app ``stream``, versions 0, 1, 2, ...; a micro-batch fails mid-way
  (its driver dies between two shard commits, leaving its run behind) and restarts: the same
  version with a new job id;
* **task retries**: a commit task of a running job re-run, with the same staged SSTs or after
  its map stage re-ran (the SSTs staged again); a zombie attempt of a finished job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slatedb_core.errors import SlateDBError
from slatedb_core.manifest.model import AppVersion
from slatedb_core.table.ingest import (
    REFUSED,
    SKIPPED,
    WRITTEN,
    IngestPlan,
    ShardIngestStats,
    StagedSst,
    delete_staging,
    plan_ingest,
)
from slatedb_core.table.shardmap import Shard
from tests.sim.table_base import TableSimBase
from tests.sim.table_model import KEYS, Batch, TableViolation
from tests.table.ingest_steps import commit, stage


@dataclass
class Job:
    n: int
    kind: str  # "batch" or "stream"
    rows: dict[bytes, bytes | None]
    parts: list[dict[bytes, bytes | None]]
    txn: AppVersion | None
    batch: Batch | None
    plan: IngestPlan | None = None
    run_id: str = ""
    staged: list[StagedSst] | None = None
    todo: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    """Shard indices (of the plan) whose commit reported WRITTEN or SKIPPED."""
    refused: bool = False
    state: str = "new"  # new, running, finished, failed, abandoned
    attempts: int = 0

    @property
    def job_id(self) -> str:
        return f"job{self.n}"

    @property
    def label(self) -> str:
        txn = "" if self.txn is None else f" {self.txn.app_id}/{self.txn.version}"
        return f"{self.kind} {self.job_id}{txn}"


def shard_rows(rows: dict[bytes, bytes | None], shard: Shard) -> dict[bytes, bytes | None]:
    return {k: v for k, v in rows.items() if shard.contains(k)}


class IngestSteps(TableSimBase):
    def _init_ingests(self) -> None:
        self.jobs: list[Job] = []
        self.stream_version = 0
        self.stream_job: Job | None = None
        self.reruns: list[Batch] = []
        self._jobs = 0
        self._batches = 0

    # ---- making jobs -----------------------------------------------------------------------
    def _new_job(self, kind: str, txn: AppVersion | None, rows: dict[bytes, bytes | None]) -> Job:
        self._jobs += 1
        batch = None if txn is None else self.model.batch(txn.app_id, txn.version, rows)
        keys = sorted(rows)
        nparts = min(len(keys), self.rng.randint(1, 3))
        parts: list[dict[bytes, bytes | None]] = [{} for _ in range(nparts)]
        for k in keys:
            parts[self.rng.randrange(nparts)][k] = rows[k]
        job = Job(self._jobs, kind, dict(rows), [p for p in parts if p], txn, batch)
        self.jobs.append(job)
        self.note(f"  new {job.label}: {len(rows)} rows")
        return job

    def _draw_rows(self, tag: str) -> dict[bytes, bytes | None]:
        keys = self.rng.sample(KEYS, self.rng.randint(1, 12))
        return {
            k: None if self.rng.random() < 0.15 else f"{tag}/{k.decode()}".encode() for k in keys
        }

    def step_ingest_start(self) -> None:
        active = [j for j in self.jobs if j.state in ("new", "running")]
        if len(active) >= 3:
            return
        if self.reruns and self.rng.random() < 0.6:
            b = self.reruns.pop(0)
            self.note(f"re-run batch {b.app}/{b.version}")
            self._new_job("batch", AppVersion(b.app, b.version), b.rows)
            return
        if self.stream_job is None and self.rng.random() < 0.5:
            v = self.stream_version
            self.note(f"stream micro-batch {v}")
            rows = (
                self.model.batches[("stream", v)].rows
                if ("stream", v) in self.model.batches
                else self._draw_rows(f"stream/{v}")
            )
            self.stream_job = self._new_job("stream", AppVersion("stream", v), rows)
            return
        self._batches += 1
        if self.rng.random() < 0.6:
            app = f"batch-{self._batches}"
            self.note(f"staged ingest {app}")
            self._new_job("batch", AppVersion(app, 1), self._draw_rows(f"{app}/1"))
        else:
            self.note("staged ingest without a batch record")
            self._new_job("batch", None, self._draw_rows(f"plain-{self._batches}"))

    # ---- running them ----------------------------------------------------------------------
    def step_ingest(self) -> None:
        active = [j for j in self.jobs if j.state in ("new", "running")]
        if not active:
            self.step_ingest_start()
            return
        self.advance(self.rng.choice(active))

    def advance(self, job: Job) -> None:
        """One step of ``job``: its plan, its staging, one shard's commit, or its end."""
        if job.plan is None:
            self.note(f"{job.label}: plan")
            job.plan = plan_ingest(self.path, self.faulty, job.job_id, txn=job.txn)
            job.run_id = f"run{job.n}"
            job.todo = list(range(len(job.plan.shards)))
            self.rng.shuffle(job.todo)
            job.state = "running"
            return
        if job.staged is None:
            self.note(f"{job.label}: stage {len(job.parts)} partition(s)")
            job.staged = self._stage(job, job.parts, attempt=0)
            return
        if job.todo:
            if job.kind == "stream" and self.rng.random() < 0.12:
                self._abandon(job, "the micro-batch's driver died mid-way")
                return
            i = job.todo[0]
            if job.done and self.rng.random() < 0.25:
                # a task retried: a shard already committed is committed again by a new attempt,
                # half of the time after its map stage re-ran (staged afresh)
                self._retry_commit(job, self.rng.choice(job.done))
                return
            job.todo.pop(0)
            self._commit(job, i, job.staged, attempt=0)
            return
        self._finish(job)

    def _stage(
        self, job: Job, parts: list[dict[bytes, bytes | None]], attempt: int
    ) -> list[StagedSst]:
        assert job.plan is not None
        staged: list[StagedSst] = []
        for p, rows in enumerate(parts):
            staged.extend(
                stage(self.faulty, job.plan, rows, run=job.run_id, partition=p, attempt=attempt)
            )
        return staged

    def _restage(self, job: Job) -> list[StagedSst] | None:
        """The job's map stage re-ran, as attempt ``job.attempts``: its rows staged again (None:
        the staging failed)."""
        try:
            return self._stage(job, job.parts, attempt=job.attempts)
        except SlateDBError as e:
            self.outcome("ingest_restage", e)
            return None

    def _commit(self, job: Job, i: int, staged: list[StagedSst], attempt: int) -> None:
        assert job.plan is not None
        shard = job.plan.shards[i]
        rows = shard_rows(job.rows, shard)
        self.note(
            f"{job.label}: commit shard {i} (id {shard.shard_id}, {len(rows)} rows, "
            f"attempt {attempt})"
        )
        try:
            st = commit(
                self.faulty, job.plan, staged, i, run=job.run_id, partition=0, attempt=attempt
            )
        except SlateDBError as e:
            self.outcome("ingest_commit", e)
            self._resolve_failed_commit(job, shard, rows)
            self._fail(job, f"commit task of shard {i} failed: {type(e).__name__}")
            return
        self.outcome(f"ingest_commit_{st.status}", None)
        self.note(f"  -> {st.status} {st.message[:120]}")
        self._judge_commit(job, i, st, rows)

    def _judge_commit(
        self, job: Job, i: int, st: ShardIngestStats, rows: dict[bytes, bytes | None]
    ) -> None:
        if st.status == WRITTEN:
            self.model.committed(job.job_id, st.shard_id, st.manifest_id, job.batch, rows)
        elif st.status == REFUSED:
            job.refused = True
            return
        elif st.status != SKIPPED:
            raise TableViolation("ingest-status", f"{job.label}: status {st.status!r}")
        if i not in job.done:
            job.done.append(i)

    def _resolve_failed_commit(
        self, job: Job, shard: Shard, rows: dict[bytes, bytes | None]
    ) -> None:
        """A commit that raised: nothing runs concurrently, so the table shows whether it took
        effect; it must be all of the shard's rows or none."""
        seen = self.read_latest(sorted(rows))
        new = [k for k in rows if seen.get(k) == rows[k] and self.model.state.get(k) != rows[k]]
        changed = [k for k in rows if self.model.state.get(k) != rows[k]]
        if not new:
            return
        if len(new) != len(changed):
            raise TableViolation(
                "atomic-commit",
                f"{job.label}: a failed commit of shard "
                f"{shard.shard_id} applied {len(new)} of {len(changed)} rows",
            )
        self.note("  (the failed commit took effect)")
        self.model.committed(job.job_id, shard.shard_id, 0, job.batch, rows)

    def _retry_commit(self, job: Job, i: int) -> None:
        job.attempts += 1
        assert job.staged is not None
        if self.rng.random() < 0.5:
            self.note(f"{job.label}: map stage re-ran for a retried commit of shard {i}")
            restaged = self._restage(job)
            if restaged is None:
                return
            staged = restaged
        else:
            staged = job.staged
        self._commit(job, i, staged, attempt=job.attempts)

    def _finish(self, job: Job) -> None:
        assert job.plan is not None
        delete_staging(self.faulty, self.path, job.job_id, job.run_id)
        if job.refused or job.state != "running":
            self._fail(job, "refused shards: the map changed after the plan")
            return
        job.state = "finished"
        self.note(f"{job.label}: finished")
        if job is self.stream_job:
            self.stream_job = None
            self.stream_version += 1
        if job.batch is not None:
            self.model.reported_applied(job.batch, job.job_id)

    def _fail(self, job: Job, why: str) -> None:
        if job.state == "running" or job.state == "new":
            job.state = "failed"
        self.note(f"{job.label}: failed ({why})")
        self._rerun_later(job)

    def _abandon(self, job: Job, why: str) -> None:
        job.state = "abandoned"
        self.note(f"{job.label}: abandoned ({why})")
        self._rerun_later(job)

    def _rerun_later(self, job: Job) -> None:
        if job is self.stream_job:
            self.stream_job = None  # restarts at the same version
        elif job.batch is not None and not job.batch.applied and job.batch not in self.reruns:
            self.reruns.append(job.batch)

    def step_zombie_attempt(self) -> None:
        """A commit attempt of a job that is over (its run's staging is deleted, unless the
        attempt staged its rows again): a shard the job committed must not be written again."""
        over = [
            j
            for j in self.jobs
            if j.state in ("finished", "failed", "abandoned")
            and j.plan is not None
            and j.staged is not None
        ]
        if not over:
            return
        job = self.rng.choice(over)
        assert job.plan is not None and job.staged is not None
        i = self.rng.randrange(len(job.plan.shards))
        job.attempts += 1
        staged = job.staged
        if self.rng.random() < 0.5:
            # a late speculative copy of a map task staged the rows again
            self.note(f"zombie attempt of {job.label} ({job.state}), staged afresh")
            restaged = self._restage(job)
            if restaged is None:
                return
            staged = restaged
        else:
            self.note(f"zombie attempt of {job.label} ({job.state})")
        state = job.state
        self._commit(job, i, staged, attempt=job.attempts)
        job.state = state  # a zombie's failure fails no job

    def finish_ingests(self) -> None:
        """The end: every running job runs to its end, then every batch not yet applied is
        re-run until applied (nothing else acts now: a job must succeed)."""
        for job in [j for j in self.jobs if j.state in ("new", "running")]:
            self._run_through(job)
        pending = [b for b in self.model.batches.values() if not b.applied]
        for b in pending:
            for _ in range(3):
                job = self._new_job("batch", AppVersion(b.app, b.version), b.rows)
                self._run_through(job)
                if b.applied:
                    break
            if not b.applied:
                raise TableViolation(
                    "liveness",
                    f"batch {b.app}/{b.version} could not be "
                    "applied at the end, with nothing else acting",
                )

    def _advance_no_fail(self, job: Job) -> None:
        kind, job.kind = job.kind, "batch"
        try:
            self.advance(job)
        finally:
            job.kind = kind

    def _run_through(self, job: Job) -> None:
        for _ in range(200):
            if job.state not in ("new", "running"):
                return
            self._advance_no_fail(job)
