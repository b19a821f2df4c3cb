"""No credential reaches what the Dagster UI serves: the repository snapshot (the Resources page,
the launchpad's defaults), the job snapshot stored with each run, GraphQL, metadata and run logs.

Issue 39, item 2: the store URL (``SLATEDB_STORE_URL``, ``store.url`` in slatedb.yaml, the
demo's ``LAKEHOUSE_DEMO_STORE_URL``) and the key fields were plain strings in the resources'
config, which Dagster keeps in the repository snapshot: an S3 secret and a PostgreSQL password
inside ``txn=`` were served in full. They now come from ``dg.EnvVar`` (the snapshot holds the
variable's name), and a literal secret in a resource's config is refused when the definitions
are built.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from orchestration.definitions import build_definitions
from orchestration.settings import CONFIG_ENV, STORE_URL_ENV, load_settings
from slatedb_core.errors import InvalidArgument

S3_SECRET = "S3sEcReT0wJalrXUtnFEMIK7MDENG"
PG_SECRET = "PgPaSs9?Wd#x/y"  # '?', '#', '/' too: issue 39 item 3's characters
KEY_ID = "AKIDKEYID0EXAMPLE"


def forms(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), quote(quote(secret, safe=""), safe=""), secret[:8]]


def assert_no_secret(text: str, what: str) -> None:
    __tracebackhide__ = True  # pytest would show ``text``
    shown = [i for s in (S3_SECRET, PG_SECRET) for i, f in enumerate(forms(s)) if f in text]
    assert not shown, f"{what} shows a secret (forms {shown})"


def secret_url(pg_url: str = "postgresql://127.0.0.1:1/db", bucket: str = "bucket") -> str:
    """An S3 store URL with a secret key and a two-phase txn URL holding a password."""
    txn = pg_url.replace("postgresql://", f"postgresql://u:{quote(PG_SECRET, safe='')}@", 1)
    if "@" in pg_url:  # already has a user: put the password in
        user, rest = pg_url.split("://", 1)[1].split("@", 1)
        txn = f"postgresql://{user}:{quote(PG_SECRET, safe='')}@{rest}"
    return (
        f"s3://{bucket}/lake?endpoint=http://127.0.0.1:1&allow_http=true&region=us-east-1"
        f"&access_key_id={KEY_ID}&secret_access_key={S3_SECRET}&txn={quote(txn, safe='')}"
    )


def repository_text(defs: dg.Definitions) -> str:
    return serialize_value(RepositorySnap.from_def(defs.get_repository_def()))


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "slatedb.yaml"
    path.write_text("store: {url: memory://unused}\nmanaged: {databases: [orders]}\n")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


def test_the_store_url_from_the_environment_is_not_in_the_snapshot(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_URL_ENV, secret_url())
    defs = build_definitions(load_settings())
    text = repository_text(defs)
    assert_no_secret(text, "the repository snapshot")
    named = STORE_URL_ENV in text  # the variable's name is what the UI shows
    assert named
    for job in defs.get_repository_def().get_all_jobs():
        assert_no_secret(serialize_value(job.get_job_snapshot()), f"job {job.name}")


def test_settings_file_names_variables_for_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "slatedb.yaml"
    path.write_text(
        "store:\n  url: {env: LAKE_URL}\n  access_key_id: {env: LAKE_KEY_ID}\n"
        "  secret_access_key: {env: LAKE_SECRET}\n  wal_url: {env: LAKE_WAL}\n"
    )
    monkeypatch.setenv("LAKE_URL", secret_url())
    monkeypatch.setenv("LAKE_KEY_ID", KEY_ID)
    monkeypatch.setenv("LAKE_SECRET", S3_SECRET)
    monkeypatch.setenv("LAKE_WAL", secret_url(bucket="walbucket"))
    monkeypatch.delenv(STORE_URL_ENV, raising=False)
    defs = build_definitions(load_settings(path))
    text = repository_text(defs)
    assert_no_secret(text, "the repository snapshot")
    named = "LAKE_SECRET" in text and "LAKE_URL" in text
    assert named


@pytest.mark.parametrize(
    "store",
    [
        f"{{url: '{secret_url()}'}}",
        f"{{url: 's3://bucket/lake', secret_access_key: {S3_SECRET}}}",
        f"{{url: 's3://bucket/lake', session_token: {S3_SECRET}}}",
        f"{{url: 'memory://x', wal_url: '{secret_url()}'}}",
        f"{{url: 'postgresql://u:{PG_SECRET}@h/db'}}",
    ],
)
def test_a_literal_secret_in_the_settings_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    path = tmp_path / "slatedb.yaml"
    path.write_text(f"store: {store}\n")
    monkeypatch.delenv(STORE_URL_ENV, raising=False)
    with pytest.raises(InvalidArgument) as info:
        build_definitions(load_settings(path))
    assert "env" in str(info.value)
    assert_no_secret(f"{info.value} {info.value!r}", "the refusal")


def test_a_plain_url_in_the_settings_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "slatedb.yaml"
    path.write_text("store: {url: 's3://bucket/lake?region=eu-west-1', region: eu-west-1}\n")
    defs = build_definitions(load_settings(path))
    assert "s3://bucket/lake?region=eu-west-1" in repository_text(defs)


def test_the_demo_store_url_is_not_in_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakehouse_demo import definitions as demo_definitions

    monkeypatch.setenv("LAKEHOUSE_DEMO_DIR", str(tmp_path))
    monkeypatch.setenv("LAKEHOUSE_DEMO_STORE_URL", secret_url())
    try:
        module = importlib.reload(demo_definitions)
        assert_no_secret(repository_text(module.defs), "the demo's repository snapshot")
        # the CLI's path: a URL handed to resource_for (make demo-s3 passes one with keys)
        monkeypatch.delenv("LAKEHOUSE_DEMO_STORE_URL")
        demo = module.resource_for(tmp_path, secret_url(bucket="other"))
        defs = module.build_definitions(demo)
        assert_no_secret(repository_text(defs), "the demo CLI's repository snapshot")
        job = defs.resolve_job_def("lakehouse_demo_job")
        assert_no_secret(serialize_value(job.get_job_snapshot()), "the demo job's snapshot")
    finally:
        monkeypatch.undo()
        importlib.reload(demo_definitions)


# ---- served over GraphQL, and one materialization's metadata and logs ------------------------


@pytest.fixture
def secret_store_env(
    moto_s3: Any, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """``SLATEDB_STORE_URL``: a moto bucket holding one database, with a secret key and a txn
    URL to a real PostgreSQL (trust authentication: any password connects)."""
    from devtools.sample_data import write_database
    from slatedb_core import open_store
    from slatedb_core.store.twophase import TwoPhaseStore

    bucket = moto_s3.new_bucket()
    url = secret_url(pg_url, bucket).replace("http://127.0.0.1:1", moto_s3.endpoint)
    store = open_store(url)
    assert isinstance(store, TwoPhaseStore)  # the txn= URL (and its password) is used
    write_database(store, "orders", prefix="order-", l0_ssts=6, rows_per_sst=50)
    store.close()
    config = tmp_path / "slatedb.yaml"
    config.write_text(
        "store: {url: memory://unused}\n"
        f"managed: {{databases: [orders], l0_max_ssts: 2, export_root: '{tmp_path}/delta'}}\n"
    )
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setenv(STORE_URL_ENV, url)
    yield url


RESOURCES_QUERY = """
query ($selector: RepositorySelector!) {
  repositoryOrError(repositorySelector: $selector) {
    ... on Repository {
      allTopLevelResourceDetails {
        name description
        configFields { name description defaultValueAsJson configTypeKey }
        configuredValues { key value type }
      }
    }
  }
}
"""


@pytest.mark.postgres
@pytest.mark.s3
def test_graphql_metadata_and_run_logs_hold_no_secret(secret_store_env: str) -> None:
    from dagster_graphql.test.utils import (
        define_out_of_process_context,
        execute_dagster_graphql,
        infer_repository_selector,
    )

    from orchestration.assets import compaction
    from orchestration.partitions import DATABASES

    definitions = str(Path(__file__).parents[2] / "orchestration" / "definitions.py")
    with (
        dg.instance_for_test() as instance,
        define_out_of_process_context(definitions, "defs", instance) as context,
    ):
        result = execute_dagster_graphql(
            context, RESOURCES_QUERY, {"selector": infer_repository_selector(context)}
        )
        served = str(result.data)
        assert_no_secret(served, "GraphQL's resource details")
        named = "allTopLevelResourceDetails" in served and STORE_URL_ENV in served
        assert named

        defs = build_definitions(load_settings())
        instance.add_dynamic_partitions(DATABASES, ["orders"])
        run = dg.materialize(
            [compaction], resources=defs.resources, instance=instance, partition_key="orders"
        )
        assert run.success
        events = run.get_asset_materialization_events()
        assert events and events[0].materialization.metadata["l0_ssts"].value == 0
        logs = serialize_value(instance.all_logs(run.run_id))
        assert_no_secret(logs, "the run's event log")
        stored = instance.get_run_by_id(run.run_id)
        assert stored is not None and stored.job_snapshot_id is not None
        snapshot = serialize_value(instance.get_job_snapshot(stored.job_snapshot_id))
        assert_no_secret(snapshot, "the job snapshot stored with the run")
        assert_no_secret(serialize_value(stored), "the run record")


def test_a_resource_repr_hides_its_credentials() -> None:
    """A resolved resource (what a run's steps hold) prints no credential when logged."""
    from lakehouse_demo.resource import DemoResource
    from orchestration.resources import ObjectStoreResource

    store = ObjectStoreResource(
        url=secret_url(),
        access_key_id=KEY_ID,
        secret_access_key=S3_SECRET,
        session_token=S3_SECRET,
        wal_url=secret_url(),
    )
    demo = DemoResource(store_url=secret_url(), input_dir="in", delta_dir="out")
    for resource in (store, demo):
        assert_no_secret(f"{resource!r} {resource}", type(resource).__name__)
