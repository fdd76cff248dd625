"""What `resume` takes back from the migration's stored options, and what a flag given to it replaces."""
from migration.resuming import resumed_values

STORED = {"cutover": "manual", "partitions": 4, "lock_wait_s": 0.3, "lock_tries": 3,
          "force_kill_blockers_after_s": 5.0, "force_kill_max_rows": 7, "copy_workers": 8}
THROTTLES = {"max_load": "Threads_running=40", "critical_load": "Threads_running=100",
             "cloudwatch_max_load": "CPUUtilization=80", "rds_instance": "db-1", "throttle_replicas": "replica-1",
             "max_replica_lag": 3, "max_app_latency": "20ms"}


def test_resume_restores_the_stored_lock_and_kill_options():
    values = resumed_values(STORED, frozenset())
    assert values == {"cutover": "manual", "partitions": 4, "lock_wait_s": 0.3, "lock_tries": 3,
                      "force_kill_blockers_after_s": 5.0, "force_kill_max_rows": 7}


def test_a_lock_option_given_to_resume_wins_over_the_stored_one():
    values = resumed_values(STORED, frozenset({"lock_tries", "force_kill_blockers_after_s"}))
    assert "lock_tries" not in values and "force_kill_blockers_after_s" not in values
    assert values["lock_wait_s"] == 0.3 and values["force_kill_max_rows"] == 7


def test_the_migration_shape_is_never_replaced_by_resume():
    assert resumed_values(STORED, frozenset({"cutover", "partitions"}))["cutover"] == "manual"


def test_a_migration_stopped_at_its_critical_load_resumes_with_its_limits():
    assert resumed_values({**STORED, **THROTTLES}, frozenset()).items() >= THROTTLES.items()


def test_a_throttle_given_to_resume_wins_over_the_stored_one():
    values = resumed_values({**STORED, **THROTTLES}, frozenset({"critical_load"}))
    assert "critical_load" not in values and values["max_load"] == "Threads_running=40"
