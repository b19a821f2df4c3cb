"""Tests that run in CI's slow suite (``make test-slow``) instead of ``make test``, by node id.

``make test`` must stay under 20 minutes on the CI machine (2 cores): with none of these it
took 22 min 10 s or more in the clean-clone CIs. Each took 3.6-13 s there (their ``--durations``
lists; three from a loaded local run). Each is a stress, interop or property test whose plain
path other tests in ``make test`` cover; CI still runs every one of them. tests/conftest.py
marks them ``slow`` at collection, and refuses an id here that names no test of a collected
module (a rename would otherwise move a test back silently).
"""

from __future__ import annotations

import pytest

SLOW_IN_MAKE_TEST = frozenset(
    {
        # issue 42 goal 4 (session 50): Spark reads of fixed-shape rows beside Db scans (~25 s)
        "tests/spark/test_read_fixed_rows.py::test_fixed_rows_read_as_the_db_scans_them",
        # issue 43's gaps (session 49): a schedule tick and its runs; a real Ctrl-C; S3 TTL rows
        "tests/orchestration/test_changes_schedules.py::test_ticks_request_live_databases_and_tables_and_their_runs_apply_only_new_changes",
        "tests/cli/test_changes_follow_until.py::test_ctrl_c_stops_follow_with_every_line_whole",
        "tests/feed/test_snapshot_expire_ts.py::test_snapshot_rows_carry_their_versions_expire_ts[s3]",
        "tests/feed/test_stale_clock_hold.py::test_a_hold_with_a_stale_clock_never_vouches_for_an_unmarked_ingest[s3]",
        "tests/feed/test_stale_clock_hold.py::test_an_ingest_marks_a_lapsed_but_present_consumer[s3]",
        "tests/sst/test_encode_decode_properties.py::test_damaged_block_with_a_valid_crc_is_corruption_or_rows",
        "tests/spark/test_worker_probe.py::test_the_probe_is_bounded_in_time",
        "tests/spark/test_worker_probe.py::test_a_missing_module_is_reported_as_the_interpreter",
        "tests/spark/test_read_cli_checkpoint.py::test_read_job_names_a_snapshot",
        "tests/spark/test_read_cli_checkpoint.py::test_read_job_refuses_an_unknown_snapshot_name",
        "tests/spark/test_catalog_tables.py::test_save_as_table_writes_and_reading_it_by_name_says_how_to_read",
        "tests/spark/test_catalog_tables.py::test_stream_into_a_table_by_name_says_the_catalog_passed_no_options",
        "tests/spark/test_datasource_memory_url.py::test_a_memory_store_is_refused_on_write",
        "tests/lakehouse_demo/test_demo_interrupt.py::test_sigint_after_the_first_step_ends_in_one_line",
        "tests/spark/test_worker_python.py::test_chosen_interpreter_with_package_passes_the_worker_probe",
        "tests/spark/test_worker_python.py::test_local_session_workers_run_the_drivers_interpreter",
        "tests/spark/test_worker_python.py::test_chosen_interpreter_without_package_fails_on_register[venv-base]",
        "tests/spark/test_worker_python.py::test_chosen_interpreter_without_package_fails_on_register[system]",
        "tests/spark/test_datasource_unknown_options.py::test_spark_generic_path_option_is_accepted",
        "tests/cluster/test_signal_cleanup.py::test_sigterm_during_start_stops_what_it_started",
        "tests/cluster/test_signal_cleanup.py::test_sigterm_after_start_leaves_the_cluster_running",
        "tests/cluster/test_signal_cleanup.py::test_stop_finds_what_a_killed_start_left",
        "tests/orchestration/test_schedule_holds.py::test_a_failure_of_the_schedules_own_run_holds_the_schedule_and_the_sensor",
        "tests/lakehouse_demo/test_seaweedfs_tls.py::test_seaweedfs_starts_without_openssl",
        "tests/cluster/test_compose_spark_auth.py::test_entrypoint_writes_the_secret_into_a_private_config",
        "tests/cluster/test_launcher_recovery.py::test_the_store_cannot_be_read_or_changed_without_the_keys",
        "tests/orchestration/test_config_secrets.py::test_graphql_metadata_and_run_logs_hold_no_secret",
        "tests/store/test_pg_url_passwords.py::test_every_password_character_reaches_postgres_and_is_never_shown",
        "tests/store/test_pg_url_passwords.py::test_a_wrong_password_error_hides_it",
        "tests/spark/test_compact_contention.py::test_spark_compaction_that_loses_every_race_raises",
        "tests/interop/test_wal_store_id.py::test_slatedb_opens_writes_and_collects_our_wal_store[s3]",
        "tests/interop/test_wal_store_id.py::test_a_v1_manifest_with_a_wal_store_both_engines[s3]",
        "tests/spark/test_datasource_read_wal_merge.py::test_read_with_wal_url_and_merge_operator",
        "tests/spark/test_ingest_ttl.py::test_ingest_ttl_column_and_fixed_ttl",
        "tests/spark/test_ingest_ttl.py::test_datasource_ttl_options",
        "tests/spark/test_ingest_ttl.py::test_bad_ttl_options_are_refused",
        "tests/lsm/test_rewrite_registry.py::test_each_rewrite_path_keeps_the_whole_row[s3-compaction]",
        "tests/orchestration/test_merge_operator_resource.py::test_compaction_asset_folds_slatedb_operands[s3]",
        "tests/orchestration/test_merge_operator_resource.py::test_compaction_asset_folds_slatedb_operands[local]",
        "tests/interop/test_manifest_v1.py::test_slatedb_writes_we_read_a_v1_manifest_everywhere[s3]",
        "tests/manifest/test_codec.py::test_decodes_a_100k_sst_manifest_quickly",
        "tests/lsm/test_iterators.py::test_merge_equals_dict_model",
        "tests/lsm/test_iterators.py::test_sortable_keys_preserve_byte_order",
        "tests/interop/test_cli.py::test_cli_reads_a_live_slatedb_database",
        "tests/interop/test_maintenance.py::test_our_gc_during_slatedb_writes_and_compactions_loses_nothing",
        "tests/manifest/test_store.py::test_racing_threads_apply_every_update_exactly_once[s3]",
        "tests/manifest/test_codec_slatedb.py::test_we_decode_every_manifest_slatedb_writes",
        "tests/manifest/test_codec.py::test_random_manifests_round_trip",
        "tests/wal/test_wal_rows.py::test_repeated_keys_in_our_wal_read_by_slatedb_and_replayed_here",
        "tests/spark/test_datasource_read.py::test_encoded_values_read_back_as_their_columns[json]",
        "tests/gc/test_races.py::test_a_db_writing_under_a_looping_collector_loses_no_acknowledged_write[twophase-s3]",
        "tests/meta/test_sequenced.py::test_latest_lookup_costs_at_most_two_requests[twophase-s3-200]",
        "tests/lsm/test_memtable_runs.py::test_overlaid_tables_of_runs_take_the_newer_entry",
        "tests/sst/test_encode_decode_properties.py::test_sst_rows_versions_bloom_and_newest_versions",
        "tests/sst/test_encode_decode_properties.py::test_wal_sst_of_repeated_keys_replays_to_the_newest_write",
        "tests/sst/test_encode_decode_properties.py::test_frozen_memtable_order_is_byte_order",
        "tests/sst/test_encode_decode_properties.py::test_fixed_width_encoder_reads_as_written",
        "tests/store/test_seaweedfs.py::test_conditional_create_race_has_one_winner",
        "tests/store/test_local_cas.py::test_put_if_match_increments_are_atomic_across_processes",
        "tests/store/test_twophase.py::test_racing_processes_on_one_machine_have_one_winner",
        "tests/compactor/test_compaction.py::test_similar_sorted_runs_merge_into_one_and_keep_the_newest_values[s3]",
        "tests/gc/test_races.py::test_a_db_writing_under_a_looping_collector_loses_no_acknowledged_write[s3]",
        "tests/reader/test_checkpoint_reads_under_maintenance.py::test_checkpoint_reader_is_stable_under_writer_compactor_and_gc[s3]",
        "tests/http_faults/test_proxy.py::test_rates_are_seeded_and_counted",
        "tests/sst/test_fixed_width.py::test_same_entries_as_the_general_encoder",
        "tests/orchestration/test_fleet_sensor_outcomes.py::test_a_tick_after_one_stuck_on_a_hanging_store_fails_quickly_and_says_why",
        "tests/spark/test_datasource_read.py::test_a_read_from_s3_returns_the_table",
        "tests/spark/test_stream_after_split.py::test_a_stream_with_split_points_writes_after_a_split_between_micro_batches",
        "tests/spark/test_snapshot_encoding.py::test_spark_reads_a_named_snapshot_with_its_own_columns",
        "tests/reader/test_destroyed_reader.py::test_a_managed_reader_never_extends_or_renews_its_checkpoint_after_a_soft_destroy",
        "tests/sim/test_table_sim.py::test_table_campaign_long",
        "tests/spark/test_ingest_failures.py::test_a_write_killed_after_one_shard_blocks_merges_until_its_rerun",
        "tests/spark/test_ingest_failures.py::test_gc_between_a_commit_and_its_marker_then_the_retry",
    }
)


def mark_slow(items: list[pytest.Item], whole_modules: bool) -> None:
    """Mark the listed tests ``slow``; when whole modules were collected (no ``file::test``
    argument picked single tests), a listed id of a collected module that names no test is a
    usage error."""
    found = set()
    for item in items:
        if item.nodeid in SLOW_IN_MAKE_TEST:
            item.add_marker(pytest.mark.slow)
            found.add(item.nodeid)
    if not whole_modules:
        return
    modules = {item.nodeid.split("::", 1)[0] for item in items}
    stale = sorted(i for i in SLOW_IN_MAKE_TEST - found if i.split("::", 1)[0] in modules)
    if stale:
        raise pytest.UsageError(f"tests/make_test_budget.py names tests that do not exist: {stale}")
