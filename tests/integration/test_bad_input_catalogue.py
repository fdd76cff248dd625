"""Bad input, catalogued: each input below (command line, config file, `set`, environment) gets one line and exit 2;
none creates or changes anything.

The one line names the problem and holds the case's words; after the whole catalogue the tables of every schema of
the source and target servers, the rows of the migrations recorded, the Connect cluster's connectors and the Kafka
topics are the same as before it.

docs/bad-input.md lists the catalogue as a table: `python -m tests.integration.test_bad_input_catalogue --write`
writes it there, and tests/unit/test_bad_input_table.py fails when the two differ."""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cli.main import main
from connectors.rest import connect_client
from core.db import connect, query
from core.endpoints import Endpoints
from core.spec import helper_table_name
from demo.traffic import create_sample_table
from tests.integration.helpers import db_conn, existing_topics

pytestmark = pytest.mark.integration

DB = "bad_catalogue"
TABLE = f"{DB}.orders"
MIGRATE = ("migrate", "--table", TABLE, "--alter", "ADD COLUMN extra INT NULL", "--quiet")
CONFIG = "{config}"   # in a case's command line or variables: the path of its config file
SERVER = "{server}"   # in a case's variables: host:port of the source server
AUDITED = f"{DB}.audited"   # a table with a trigger
AUDITED_MIGRATE = ("migrate", "--table", AUDITED, "--alter", "ADD COLUMN extra INT NULL", "--quiet")
NO_TRIGGER, NO_SUPER = "osc_no_trigger", "osc_no_super"   # users lacking one privilege the trigger move needs
TOOL_PRIVILEGES = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, LOCK TABLES, CREATE TEMPORARY TABLES, "
                   "PROCESS, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT")

COMMAND_LINE, CONFIG_FILE, SET, ENVIRONMENT = "command line", "config file", "set", "environment"
KINDS = (COMMAND_LINE, CONFIG_FILE, SET, ENVIRONMENT)
DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"


@dataclass(frozen=True)
class Case:
    """One bad input and the answer it gets: exit code 2 and one line holding each of `words` (and none of
    `hidden`, a secret the input holds)."""

    kind: str                       # one of KINDS
    given: str                      # the input, as docs/bad-input.md shows it
    words: tuple[str, ...]          # what the one error line must hold
    argv: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...] = ()   # variables set for the case (None: unset)
    config: str | bytes | None = None              # the text of the config file CONFIG names
    hidden: str = ""

    def row(self) -> str:
        cells = (self.kind, self.given, " … ".join(f"`{w}`" if "`" not in w else w for w in self.words))
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def option(text: str, *words: str, hidden: str = "") -> Case:
    """`stream-osc migrate --table … --alter … TEXT`."""
    return Case(COMMAND_LINE, f"`migrate … {text}`", words, (*MIGRATE, *shlex.split(text)), hidden=hidden)


def command(text: str, *words: str) -> Case:
    """`stream-osc TEXT`."""
    return Case(COMMAND_LINE, f"`{text}`", words, tuple(shlex.split(text)))


def config(text: str | bytes, *words: str, given: str = "", argv: tuple[str, ...] = (*MIGRATE, "--config", CONFIG),
           env: tuple[tuple[str, str | None], ...] = (), hidden: str = "") -> Case:
    """`stream-osc migrate … --config FILE`, FILE holding `text`."""
    shown = given or "`" + " ".join(str(text).strip().splitlines()) + "`"
    return Case(CONFIG_FILE, shown, words, argv, env, text, hidden)


def setting(text: str, *words: str, table: str = TABLE) -> Case:
    """`stream-osc set --table TABLE TEXT`."""
    shown = f"`set … {text}`" if table == TABLE else f"`set --table {table} {text}`"
    return Case(SET, shown, words, ("set", "--table", table, *shlex.split(text)))


def variable(name: str, value: str | None, *words: str, argv: tuple[str, ...] = MIGRATE, given: str = "",
             hidden: str = "") -> Case:
    """`stream-osc migrate …` (or `argv`) with the variable `name` set to `value` (None: unset)."""
    shown = given or (f"`{name}` unset" if value is None else f"`{name}={value}`")
    return Case(ENVIRONMENT, shown, words, argv, ((name, value),), hidden=hidden)


CATALOGUE: tuple[Case, ...] = (
    # impossible ranges, wrong units and formats, unknown options
    option("--max-lag -1", "argument --max-lag: must be at least 0, not -1"),
    option("--cutover-attempts 0", "argument --cutover-attempts: must be at least 1, not 0"),
    option("--cutover-window nan", "argument --cutover-window: must be a finite number of seconds above 0, not nan"),
    option("--cutover-window 1e400", "argument --cutover-window: must be a finite number of seconds above 0, not inf"),
    option("--copy-workers 0", "argument --copy-workers: must be at least 1, not 0"),
    option("--copy-workers 4.7", "argument --copy-workers: '4.7' is not a whole number of at least 1"),
    option("--apply-workers 0", "argument --apply-workers: must be at least 1, not 0"),
    option("--chunk-size 0", "argument --chunk-size: must be at least 1, not 0"),
    option("--batch-size -5", "argument --batch-size: must be at least 1, not -5"),
    option("--partitions 0", "argument --partitions: must be at least 1, not 0"),
    option("--lock-wait-timeout 0", "argument --lock-wait-timeout: must be a finite number of seconds above 0, not 0"),
    option("--lock-tries 0", "argument --lock-tries: must be at least 1, not 0"),
    option("--max-replica-lag 0", "argument --max-replica-lag: must be at least 1, not 0"),
    option("--max-redo-fill -1", "argument --max-redo-fill: must be at least 0, not -1"),
    option("--max-redo-fill 100", "--max-redo-fill must be a percentage from 1 to 99, or 0 to turn it off, not 100"),
    option("--force-kill-max-rows -1", "argument --force-kill-max-rows: must be at least 0, not -1"),
    option("--force-kill-blockers-after=-5s", "argument --force-kill-blockers-after: '-5s' is not a duration"),
    option("--force-kill-blockers-after inf", "argument --force-kill-blockers-after: 'inf' is not a duration"),
    option("--force-kill-blockers-after '5 parsecs'", "'5 parsecs' is not a duration such as 5s, 500ms or 2m"),
    option("--target-batch-time '5 parsecs'", "--target-batch-time: '5 parsecs' is not a duration such as 250ms"),
    option("--max-app-latency fast", "--max-app-latency: 'fast' is not auto, off or a positive duration"),
    option("--max-load Threads_running", "--max-load: 'Threads_running' is not STATUS_VARIABLE=NUMBER"),
    option("--critical-load Threads_running=-1", "--critical-load: 'Threads_running=-1' is not STATUS_VARIABLE=NUMBER"),
    option("--cloudwatch-max-load CPUUtilization=80", "--cloudwatch-max-load needs --rds-instance"),
    option("--throttle-replicas replica-1:99999", "--throttle-replicas: 'replica-1:99999' is not HOST or HOST:PORT"),
    option("--cutover-window-schedule 25:00-26:00", "invalid cutover window '25:00-26:00': use HH:MM-HH:MM"),
    option("--cutover-timezone Mars/Olympus", "unknown time zone 'Mars/Olympus' for --cutover-timezone"),
    option("--cutover-window 10 --lock-wait-timeout 5", "--cutover-window plus --lock-wait-timeout is 15 s"),
    option("--cutover later", "argument --cutover: invalid choice: 'later'"),
    option("--log-level LOUD", "argument --log-level: invalid choice: 'LOUD'"),
    option("--max-lag -1 --log-format json", '"exit_code": 2', "argument --max-lag: must be at least 0, not -1"),
    option("--bogus", "unrecognized arguments: --bogus"),
    option("--hook /nonexistent/hooks", "argument --hook: '/nonexistent/hooks' is not a directory"),
    option("--notify-url ftp://chat.example/hook", "argument --notify-url: must be an http:// or https:// URL"),
    option("--notify-url http://", "argument --notify-url: must name a host"),
    option("--metrics-port 70000", "argument --metrics-port: '70000' is not a TCP port (1-65535)"),
    option("--metrics-address 0.0.0.0", "--metrics-address needs --metrics-port"),
    option("--target-table other.orders", "--target-table needs --target-dsn"),
    option("--where 'id > 5'", "--where needs --target-dsn"),
    option("--target-dsn mysql://osc:S3cret@db2:3306/", "--target-dsn holds a password", hidden="S3cret"),
    option("--target-dsn postgres://db2/", "--target-dsn must look like mysql://user:password@host:port/"),
    option("--metadata-schema ''", "the name '' is empty"),
    # tables that do not exist or are malformed, ALTERs that cannot be
    command("migrate --table nodot --alter 'ADD COLUMN extra INT'", "--table must be DB.TABLE, got 'nodot'"),
    command("migrate --table a.b.c --alter 'ADD COLUMN extra INT'", "--table must be DB.TABLE, got 'a.b.c'"),
    command(f"migrate --table {DB}.{'x' * 65} --alter 'ADD COLUMN extra INT'", "is 65 characters long (at most 64)"),
    command(f"migrate --table '{DB}.orders ' --alter 'ADD COLUMN extra INT'", "the name 'orders ' ends with a space"),
    command(f"migrate --table {DB}.nope --alter 'ADD COLUMN extra INT' --quiet", f"table {DB}.nope does not exist"),
    # a table with triggers (AUDITED): they move at the swap, so their bodies must fit the ALTER and the user must
    # be allowed to create them (the users below hold every other privilege the tool needs)
    command(f"migrate --table {AUDITED} --alter 'DROP COLUMN note' --quiet", f"trigger audited_bi of {AUDITED} "
            "cannot be created on the altered table: its body reads a column the ALTER drops or renames"),
    variable("STREAM_OSC_MYSQL_DSN", f"mysql://{NO_TRIGGER}:x@{SERVER}/", f"table {AUDITED} has triggers",
             f"that needs the TRIGGER privilege on {AUDITED}", argv=AUDITED_MIGRATE,
             given=f"`migrate --table {AUDITED} …` (it has a trigger) as a user without TRIGGER"),
    variable("STREAM_OSC_MYSQL_DSN", f"mysql://{NO_SUPER}:x@{SERVER}/", f"table {AUDITED} has triggers",
             "with binary logging on and log_bin_trust_function_creators OFF", "a user with SUPER",
             argv=AUDITED_MIGRATE, given=f"`migrate --table {AUDITED} …` (it has a trigger) as a user with TRIGGER "
             "but without SUPER, binary logging on"),
    command(f"migrate --table {TABLE} --quiet", "--alter is required"),
    command("migrate --alter 'ADD COLUMN extra INT' --quiet", "--table DB.TABLE is required"),
    command(f"migrate --table {TABLE} --alter ' ' --quiet", "--alter is empty"),
    command(f"migrate --table {TABLE} --alter 'RENAME TO orders2' --quiet", f"the ALTER renames the table {TABLE}"),
    command(f"migrate --table {TABLE} --alter 'ADD COLUMN extra INT, RENAME AS {DB}.orders2' --quiet",
            f"the ALTER renames the table {TABLE}"),
    # foreign keys (tests/integration/test_foreign_keys.py migrates the ones kept)
    command(f"migrate --table {DB}.fk_cascaded --alter 'ADD COLUMN extra INT' --quiet",
            f"table {DB}.fk_cascaded has foreign key fk_cascaded_parent REFERENCES {DB}.fk_parent ON DELETE CASCADE",
            "no row event in the binlog", "they would be lost"),
    command(f"migrate --table {DB}.fk_set_null --alter 'ADD COLUMN extra INT' --quiet",
            "has foreign key fk_set_null_parent", "ON UPDATE SET NULL", "they would be lost"),
    command(f"migrate --table {DB}.fk_parent --alter 'ADD COLUMN extra INT' --quiet",
            f"table {DB}.fk_parent is referenced by foreign keys of {DB}.fk_cascaded (fk_cascaded_parent), "
            f"{DB}.fk_set_null (fk_set_null_parent)", "--alter-foreign-keys-method rebuild"),
    command(f"migrate --table {DB}.fk_self --alter 'ADD COLUMN extra INT' --quiet",
            f"table {DB}.fk_self has foreign key fk_self_up referencing itself"),
    command(f"migrate --table {TABLE} --alter 'ADD CONSTRAINT fk_k FOREIGN KEY (k) REFERENCES {DB}.fk_parent (id)' "
            "--quiet", "the ALTER adds a foreign key (ADD CONSTRAINT fk_k FOREIGN KEY (k)", "after the migration"),
    command(f"migrate --table {DB}.fk_parent --alter 'MODIFY id BIGINT NOT NULL' --algorithm copy "
            "--alter-foreign-keys-method rebuild --quiet", "the ALTER changes or drops column id, which foreign key "
            f"fk_cascaded_parent of {DB}.fk_cascaded references"),
    option("--alter-foreign-keys-method drop_swap",
           "argument --alter-foreign-keys-method: must be one of none, rebuild, not 'drop_swap'"),
    command(f"migrate --table {TABLE} --alter 'ADDD COLUMN extra INT' --quiet",
            f"the ALTER is not valid for {TABLE}", "(server error 1064)"),
    command(f"migrate --table {TABLE} --alter 'DROP COLUMN nope' --quiet",
            f"the ALTER is not valid for {TABLE}", "(server error 1091)"),
    command(f"migrate --table {TABLE} --alter 'ADD COLUMN qty INT NOT NULL' --quiet",
            "the ALTER adds column qty NOT NULL without a DEFAULT"),
    command(f"migrate --table {TABLE} --alter 'DROP PRIMARY KEY, ADD PRIMARY KEY (id, k)' --quiet",
            "the ALTER changes the primary key (was id)"),
    # the other commands
    command(f"status --table {TABLE} --interval 0", "argument --interval: '0' is not a positive number of seconds"),
    command(f"status --table {TABLE} --metadata-schema {DB}_nowhere", f"no migration of {TABLE} is recorded"),
    command(f"resume --table {TABLE} --chunk-size 5", "--chunk-size is kept with the migration"),
    command(f"resume --table {TABLE} --quiet", f"no unfinished migration of {TABLE}"),
    command(f"cutover --table {TABLE} --quiet", f"no unfinished migration of {TABLE}"),
    command(f"pause --table {TABLE}", f"no unfinished migration of {TABLE}"),
    command(f"abort --table {TABLE}", f"no unfinished migration of {TABLE}"),
    command(f"accept-target --table {TABLE}", f"no unfinished migration of {TABLE}"),
    command(f"worker --table {TABLE} --copy-workers 0", "argument --copy-workers: must be at least 1, not 0"),
    command(f"worker --table {TABLE} --quiet", f"no unfinished migration of {TABLE} to join"),
    command("frobnicate", "argument command: invalid choice: 'frobnicate'"),

    # the config file: the options' names and types, and a file that cannot be read
    config('[migration]\ncopy_workers = "8"\n', "copy_workers in [migration] of",
           "must be a whole number of at least 1 (without quotes), not a string"),
    config("[migration]\ncopy_workers = 4.7\n", "copy_workers in [migration] of", "not a fractional number"),
    config('[migration]\ndry_run = "false"\n', "dry_run in [migration] of",
           "must be true or false (without quotes), not a string"),
    config("[migration]\nmax_lag = -1\n", "max_lag in [migration] of", "must be at least 0, not -1"),
    config("[migration]\ncutover_window = nan\n", "cutover_window in [migration] of",
           "must be a finite number of seconds above 0, not nan"),
    config("[migration]\ncutover_attempts = 0\n", "cutover_attempts in [migration] of", "must be at least 1, not 0"),
    config("[migration]\ncutover_window = true\n", "cutover_window in [migration] of", "not a boolean"),
    config('[migration]\ncutover = "later"\n', "cutover in [migration] of", "must be one of auto, manual, not 'later'"),
    config("[migration]\nmax_load = 25\n", "max_load in [migration] of", "must be a string, not an integer"),
    config('[migration]\nforce_kill_blockers_after = "5 parsecs"\n', "force_kill_blockers_after in [migration] of",
           "'5 parsecs' is not a duration"),
    config('[migration]\nhook = "/nonexistent/hooks"\n', "hook in [migration] of",
           "'/nonexistent/hooks' is not a directory"),
    config('[migration]\nnotify_url = "ftp://chat.example/hook"\n', "notify_url in [migration] of",
           "must be an http:// or https:// URL"),
    config("[migration]\nmax_lag_events = 5\n", "unknown keys in [migration] of",
           "max_lag_events (the option is max_lag)"),
    config("[migration]\nquiet = true\n", "unknown keys in [migration] of", ": quiet;"),
    config("[migration]\nkeep_old = true\ndrop_old = true\n", "drop_old in [migration] of", "contradicts another key"),
    config('[migration]\ntarget_dsn = "mysql://osc:S3cret@db2/"\n', "target_dsn in [migration] of",
           "holds a password", hidden="S3cret"),
    config('[migration]\ntable = "nodot"\nalter = "ADD COLUMN extra INT"\n', "--table must be DB.TABLE, got 'nodot'",
           argv=("migrate", "--config", CONFIG, "--quiet")),
    config(f'[migration]\ntable = "{TABLE}"\nalter = 5\n', "alter in [migration] of",
           "must be a string, not an integer", argv=("migrate", "--config", CONFIG, "--quiet")),
    config("migration = 5\n", "migration in config file", "it must be a [migration] section"),
    config('endpoints = "mysql://osc@db/"\n', "endpoints in config file", "it must be a [endpoints] section"),
    config("[migration\ncopy_workers = 8\n", "cannot read config file", "Expected ']'"),
    config(b"\xff\xfe[migration]\n", "cannot read config file", "it is not UTF-8 text",
           given="a file that is not UTF-8 (`\\xff\\xfe[migration]`)"),
    config("", "cannot read config file /nonexistent/stream-osc.toml", "No such file or directory",
           given="`--config /nonexistent/stream-osc.toml`",
           argv=(*MIGRATE, "--config", "/nonexistent/stream-osc.toml")),
    config("", "cannot read config file /:", "Is a directory", given="`--config /` (a directory)",
           argv=(*MIGRATE, "--config", "/")),
    config('[endpoints]\nmysql = "mysql://osc@db/"\n', "unknown keys in [endpoints] of", ": mysql"),
    config("[endpoints]\nmysql_dsn = 3306\n", "mysql_dsn in [endpoints] of", "must be a string (in quotes)"),
    config('[endpoints]\nconnect_url = "connect.internal:8083"\n',
           "STREAM_OSC_CONNECT_URL (connect_url) must be an http:// or https:// URL",
           given='`[endpoints] connect_url = "connect.internal:8083"` (`STREAM_OSC_CONNECT_URL` unset)',
           env=(("STREAM_OSC_CONNECT_URL", None),)),

    # `stream-osc set`
    setting("bogus=5", "'bogus=5': use NAME=VALUE with NAME one of"),
    setting("chunk-size=5", "'chunk-size=5': use NAME=VALUE with NAME one of"),
    setting("max-lag", "'max-lag': use NAME=VALUE"),
    setting("max-lag=-1", "max-lag must be at least 0, not -1"),
    setting("max-lag=", "max-lag: '' is not a whole number of at least 0"),
    setting("max_lag=1.5", "max-lag: '1.5' is not a whole number of at least 0"),
    setting("copy-workers=0", "copy-workers must be at least 1, not 0"),
    setting("batch-size=-5", "batch-size must be at least 1, not -5"),
    setting("max-load=Threads_running", "--max-load: 'Threads_running' is not STATUS_VARIABLE=NUMBER"),
    setting("critical-load=Threads_running=lots", "--critical-load: 'Threads_running=lots' is not STATUS_VARIABLE"),
    setting("cloudwatch-max-load=CPUUtilization", "--cloudwatch-max-load: 'CPUUtilization' is not METRIC=NUMBER"),
    setting("'target-batch-time=5 parsecs'", "--target-batch-time: '5 parsecs' is not a duration"),
    setting("max-app-latency=fast", "--max-app-latency: 'fast' is not auto, off or a positive duration"),
    setting("max-lag=5", f"no unfinished migration of {TABLE}"),
    setting("max-lag=5", f"no unfinished migration of {DB}.nope", table=f"{DB}.nope"),
    setting("max-lag=5", "--table must be DB.TABLE, got 'nodot'", table="nodot"),
    Case(SET, f"`set --table {TABLE}` (no NAME=VALUE)", ("the following arguments are required: NAME=VALUE",),
         ("set", "--table", TABLE)),

    # the environment: endpoints unset, empty or malformed, files that are not there
    variable("STREAM_OSC_MYSQL_DSN", "", "no address for: STREAM_OSC_MYSQL_DSN (set but empty"),
    variable("STREAM_OSC_MYSQL_DSN", None, "no address for: STREAM_OSC_MYSQL_DSN (or mysql_dsn in [endpoints])"),
    variable("STREAM_OSC_MYSQL_DSN", "postgres://osc:S3cret@db/", "STREAM_OSC_MYSQL_DSN must look like mysql://",
             hidden="S3cret"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc:S3cret@db:99999/",
             "STREAM_OSC_MYSQL_DSN: the port is not a number from 1 to 65535", hidden="S3cret"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc:S3cret@/", "STREAM_OSC_MYSQL_DSN has no host", hidden="S3cret"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc:S3cret@db/?ssl-mode=bogus",
             "STREAM_OSC_MYSQL_DSN: ssl-mode must be one of", hidden="S3cret"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc:S3cret@db/?ssl-ca=/nonexistent/ca.pem",
             "STREAM_OSC_MYSQL_DSN: ssl-ca /nonexistent/ca.pem is not a readable file", hidden="S3cret"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc:S3cret@127.0.0.1:1/", "cannot connect to MySQL at 127.0.0.1:1",
             "connection refused", argv=("list",), hidden="S3cret",
             given="`STREAM_OSC_MYSQL_DSN=mysql://osc:S3cret@127.0.0.1:1/` (nothing listens there), `list`"),
    variable("STREAM_OSC_CONNECT_URL", "", "no address for: STREAM_OSC_CONNECT_URL (set but empty"),
    variable("STREAM_OSC_CONNECT_URL", "connect.internal:8083",
             "STREAM_OSC_CONNECT_URL (connect_url) must be an http:// or https:// URL with a host"),
    variable("STREAM_OSC_CONNECT_URL", "ftp://connect.internal/",
             "STREAM_OSC_CONNECT_URL (connect_url) must be an http:// or https:// URL with a host"),
    variable("STREAM_OSC_CONNECT_URL", "http://admin:S3cret@connect.internal:8083",
             "STREAM_OSC_CONNECT_URL must not hold credentials", hidden="S3cret"),
    variable("STREAM_OSC_KAFKA_BOOTSTRAP", "", "no address for: STREAM_OSC_KAFKA_BOOTSTRAP (set but empty"),
    variable("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka-1 kafka-2",
             "STREAM_OSC_KAFKA_BOOTSTRAP (kafka_bootstrap) must be HOST:PORT", "'kafka-1 kafka-2' is not HOST:PORT"),
    variable("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka-1:9092,kafka-2:99999",
             "STREAM_OSC_KAFKA_BOOTSTRAP (kafka_bootstrap) must be HOST:PORT", "'kafka-2:99999' is not HOST:PORT"),
    variable("STREAM_OSC_REDIS_URL", "", "no address for: STREAM_OSC_REDIS_URL (set but empty"),
    variable("STREAM_OSC_REDIS_URL", "http://redis.internal:6379",
             "STREAM_OSC_REDIS_URL (redis_url) must be a redis://"),
    variable("STREAM_OSC_REDIS_URL", "redis://:S3cret@redis.internal:99999/0",
             "STREAM_OSC_REDIS_URL (redis_url) must be a redis://", hidden="S3cret"),
    variable("STREAM_OSC_CONFIG", "/nonexistent/stream-osc.toml",
             "cannot read config file /nonexistent/stream-osc.toml", "No such file or directory"),
    variable("STREAM_OSC_KAFKA_PROPERTIES", "/nonexistent/kafka.properties",
             "cannot read the Kafka client properties file /nonexistent/kafka.properties"),
    variable("STREAM_OSC_CONNECTOR_PASSWORD", "S3cret",
             "STREAM_OSC_CONNECTOR_PASSWORD (connector_password) must be a Kafka Connect config provider reference",
             hidden="S3cret"),
    variable("STREAM_OSC_CONNECTOR_SECRETS_DIR", "relative/dir",
             "STREAM_OSC_CONNECTOR_SECRETS_DIR (connector_secrets_dir) must be an absolute path"),
    variable("STREAM_OSC_CONNECT_USER", "admin", "Kafka Connect basic auth needs both STREAM_OSC_CONNECT_USER",
             given="`STREAM_OSC_CONNECT_USER=admin` without a password"),
    variable("STREAM_OSC_CONNECT_CA", "/nonexistent/ca.pem",
             "STREAM_OSC_CONNECT_CA /nonexistent/ca.pem is not a readable file"),
    variable("STREAM_OSC_CONNECTOR_DATABASE_HOST", "db:0",
             "STREAM_OSC_CONNECTOR_DATABASE_HOST (connector_database_host) must be host or host:port"),
    variable("STREAM_OSC_TARGET_DSN", "ftp://db2/", "STREAM_OSC_TARGET_DSN (target_dsn) must look like mysql://"),
    variable("STREAM_OSC_MYSQL_DSN", "mysql://osc@db.elsewhere:3306/", "--stack runs on the embedded stack only",
             argv=(*MIGRATE, "--stack"), given="`STREAM_OSC_MYSQL_DSN=mysql://osc@db.elsewhere:3306/` and `--stack`"),
)


BEGIN = "<!-- the catalogue, written by `python -m tests.integration.test_bad_input_catalogue --write` -->"
END = "<!-- end of the catalogue -->"


def table() -> str:
    """The catalogue as docs/bad-input.md shows it between BEGIN and END: how many cases of each kind, then a
    Markdown table with one row per case."""
    where = {COMMAND_LINE: "on the command line", CONFIG_FILE: "in a config file", SET: "to `stream-osc set`",
             ENVIRONMENT: "in the environment"}
    kinds = ", ".join(f"{count} {where[kind]}" for kind, count in counts().items())
    return "\n".join([BEGIN, f"{len(CATALOGUE)} inputs: {kinds}.", "", "| kind | input | the one line holds |",
                      "| --- | --- | --- |", *(case.row() for case in CATALOGUE), END])


def written_table(doc: Path = DOC) -> str:
    """What `doc` holds between BEGIN and END (both included); "" when it has no such part."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        return ""
    return text[text.index(BEGIN):text.index(END) + len(END)]


def counts() -> dict[str, int]:
    """Cases per kind."""
    return {kind: sum(case.kind == kind for case in CATALOGUE) for kind in KINDS}


def answer_problem(case: Case, path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> str | None:
    """What is wrong with the answer to `case` (None: one line holding its words, exit code 2, no secret)."""
    if isinstance(case.config, bytes):
        path.write_bytes(case.config)
    elif case.config is not None:
        path.write_text(case.config)
    with monkeypatch.context() as patched:
        for name, value in case.env:
            if value is None:
                patched.delenv(name, raising=False)
            else:
                patched.setenv(name, value.replace(CONFIG, str(path)).replace(SERVER, server_address()))
        try:
            code = main([arg.replace(CONFIG, str(path)) for arg in case.argv])
        except SystemExit as stop:   # a usage error: argparse exits
            code = stop.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    missing = [word for word in case.words if not lines or word not in lines[0]]
    if code != 2 or len(lines) != 1 or missing or "Traceback" in err or (case.hidden and case.hidden in err):
        return f"exit {code}, {len(lines)} lines{f', without {missing}' if missing else ''}:\n{err}"
    return None


def server_address() -> str:
    """host:port of the source server the tests run against."""
    dsn = urlsplit(os.environ["STREAM_OSC_MYSQL_DSN"])   # the stack's, or the one given (tests/README.md)
    return f"{dsn.hostname}:{dsn.port or 3306}"


def audited_table_and_users(conn) -> None:
    """AUDITED with its trigger, and the users NO_TRIGGER and NO_SUPER (made once; kept, like the schema)."""
    query(conn, f"DROP TABLE IF EXISTS {AUDITED}")
    query(conn, f"CREATE TABLE {AUDITED} (id INT PRIMARY KEY, note VARCHAR(20) NOT NULL DEFAULT '')")
    query(conn, f"CREATE TRIGGER {DB}.audited_bi BEFORE INSERT ON {AUDITED} FOR EACH ROW "
                "SET NEW.note = UPPER(NEW.note)")
    for user, extra in ((NO_TRIGGER, ""), (NO_SUPER, ", TRIGGER")):
        query(conn, f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY 'x'")
        query(conn, f"GRANT {TOOL_PRIVILEGES}{extra} ON *.* TO '{user}'@'%'")


def everything(endpoints: Endpoints) -> dict[str, object]:
    """What a bad input must leave as it was: the tables of every schema of the source server (and of a move's
    target server), the catalogue's table itself, the migrations recorded, the connectors and the topics."""
    conn = db_conn(endpoints)
    try:
        seen: dict[str, object] = {"tables": tables(conn),
                                   "orders": (query(conn, f"SHOW CREATE TABLE {TABLE}"),
                                              query(conn, f"CHECKSUM TABLE {TABLE}"))}
        if query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='stream_osc' "
                       "AND TABLE_NAME='migrations'"):
            # (heartbeat_at and updated_at left out: a running coordinator's liveness, not the migration)
            seen["migrations"] = query(conn, "SELECT id, db, tbl, alter_sql, stage, status, prefix, error, options, "
                                             "coordinator, cutover_requested_at FROM stream_osc.migrations ORDER BY id")
    finally:
        conn.close()
    if endpoints.target_dsn or endpoints.target_secret_id:
        target = connect(endpoints.target())
        try:
            seen["target tables"] = tables(target)
        finally:
            target.close()
    seen["connectors"] = sorted(connect_client(endpoints).names())
    seen["topics"] = sorted(existing_topics(endpoints.kafka))
    return seen


def tables(conn) -> list[tuple[str, str]]:
    """(schema, table) of every table of the server's schemas, and (schema, "") of each schema."""
    system = ("information_schema", "performance_schema", "mysql", "sys")
    return sorted([*query(conn, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                "WHERE TABLE_SCHEMA NOT IN %s", (system,)),
                   *query(conn, "SELECT SCHEMA_NAME, '' FROM information_schema.SCHEMATA "
                                "WHERE SCHEMA_NAME NOT IN %s", (system,))])


def differences(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What changed between two `everything`s, in words."""
    found = []
    for key in before.keys() | after.keys():
        was, now = before.get(key), after.get(key)
        if was != now:
            if isinstance(was, list) and isinstance(now, list):
                found.append(f"{key}: added {sorted(set(map(str, now)) - set(map(str, was)))}, removed "
                             f"{sorted(set(map(str, was)) - set(map(str, now)))}")
            else:
                found.append(f"{key}: {was!r} -> {now!r}")
    return found


def create_foreign_key_tables(conn) -> None:
    """fk_parent, referenced by fk_cascaded (ON DELETE CASCADE) and fk_set_null (ON UPDATE SET NULL); fk_self,
    holding a key to itself."""
    for name in ("fk_cascaded", "fk_set_null", "fk_parent", "fk_self"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{name}")
    query(conn, f"CREATE TABLE {DB}.fk_parent (id INT PRIMARY KEY) ENGINE=InnoDB")
    for name, rule in (("fk_cascaded", "ON DELETE CASCADE"), ("fk_set_null", "ON UPDATE SET NULL")):
        query(conn, f"CREATE TABLE {DB}.{name} (id INT PRIMARY KEY, parent INT, CONSTRAINT {name}_parent "
                    f"FOREIGN KEY (parent) REFERENCES {DB}.fk_parent (id) {rule}) ENGINE=InnoDB")
    query(conn, f"CREATE TABLE {DB}.fk_self (id INT PRIMARY KEY, up INT, CONSTRAINT fk_self_up FOREIGN KEY (up) "
                f"REFERENCES {DB}.fk_self (id)) ENGINE=InnoDB")


@pytest.mark.exclusive   # it compares the whole server, Connect cluster and broker before and after
def test_every_bad_input_is_one_line_and_exit_2_and_nothing_is_created_or_changed(endpoints, conn, tmp_path,
                                                                                monkeypatch, capsys):
    create_sample_table(conn, DB, "orders", rows=20)
    audited_table_and_users(conn)
    create_foreign_key_tables(conn)
    for name in (helper_table_name("orders", "new"), helper_table_name("orders", "old"), "orders2"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{name}")   # what a wrongly accepted case of an earlier run made
    before = everything(endpoints)
    wrong = [f"{case.kind}: {case.given}: {problem}" for i, case in enumerate(CATALOGUE)
             if (problem := answer_problem(case, tmp_path / f"case-{i}.toml", monkeypatch, capsys))]
    changed = differences(before, everything(endpoints))
    assert not wrong and not changed, "\n".join(
        ([f"{len(wrong)} of {len(CATALOGUE)} bad inputs answered otherwise:", *wrong] if wrong else [])
        + ([f"the catalogue changed: {'; '.join(changed)}"] if changed else []))


def test_the_catalogue_covers_every_kind_of_input():
    assert all(count >= 5 for count in counts().values()), counts()
    assert len(CATALOGUE) >= 40
    assert len({(case.argv, case.env, case.config) for case in CATALOGUE}) == len(CATALOGUE), "a case twice"


def write_table(doc: Path = DOC) -> None:
    """Replace the catalogue's part of `doc` (BEGIN to END) with the catalogue as it is."""
    text = doc.read_text()
    doc.write_text(text.replace(written_table(doc), table()) if written_table(doc) else f"{text}\n{table()}\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_table()
    else:
        print(table())
