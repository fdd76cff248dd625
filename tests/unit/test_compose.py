"""docker-compose.yml agrees with what connectors/ and stack/ generate, and with the variable names the
Debezium Connect image's entrypoint reads (tests/unit/data/debezium-connect-entrypoint.json, source noted there)."""
import json
import re
from pathlib import Path

import yaml

from connectors.config import WORKER_SETTINGS
from core.endpoints import parse_mysql_dsn
from stack.config import PORT_ENV, StackConfig
from stack.mariadb import TARGET_PRIVILEGES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ENTRYPOINT = json.loads((Path(__file__).parent / "data" / "debezium-connect-entrypoint.json").read_text())
SHORT_NAMES: dict[str, dict] = ENTRYPOINT["short_names"]
OVERWRITTEN = {entry["sets"]: short for short, entry in SHORT_NAMES.items() if not entry.get("only_if_set")}


def property_name(variable: str) -> str:
    """CONNECT_X_Y -> x.y, as the entrypoint turns variables into worker properties."""
    return variable.removeprefix("CONNECT_").lower().replace("_", ".")


def worker_properties(env: dict[str, object]) -> dict[str, str]:
    """The worker properties the entrypoint writes for this environment: CONNECT_ variables first, then
    what it exports from the short names (or their defaults) over them."""
    exported = {k: str(v) for k, v in env.items() if k.startswith("CONNECT_") and not k.startswith("CONNECT_LOG4J")}
    for short, entry in SHORT_NAMES.items():
        if short in env:
            exported[entry["sets"]] = str(env[short])
        elif not entry.get("only_if_set"):
            exported[entry["sets"]] = entry["default"] or ""
    return {property_name(k): v for k, v in exported.items() if k.startswith("CONNECT_")}


def compose_value(value: object) -> str:
    """A compose environment value as the container sees it (`$$` is compose's escape for `$`)."""
    return str(value).replace("$$", "$")


def test_services_present():
    assert {"mysql", "kafka", "connect", "redis", "stream-osc", "mariadb-target"} <= set(SERVICES)


def test_host_ports_match_the_embedded_stack(monkeypatch):
    for variable in PORT_ENV.values():   # the defaults, not a session's moved ports
        monkeypatch.delenv(variable, raising=False)
    stack = StackConfig()
    published = {name: [p.split(":")[0] for p in svc.get("ports", [])] for name, svc in SERVICES.items()}
    assert str(stack.mysql_port) in published["mysql"]
    assert str(stack.redis_port) in published["redis"]
    assert str(stack.kafka_port) in published["kafka"]
    assert str(stack.connect_port) in published["connect"]
    assert str(stack.target_mysql_port) in published["mariadb-target"]


def test_connect_worker_gets_the_settings_connectors_rely_on():
    """Offset flush of 500 ms, JSON without schemas, config providers: as the worker will really see them."""
    props = worker_properties(SERVICES["connect"]["environment"])
    for key, value in WORKER_SETTINGS.items():
        assert props.get(key) == value, key


def test_connect_environment_uses_only_names_the_entrypoint_reads():
    env = SERVICES["connect"]["environment"]
    secret_pattern = env.get("CONNECT_CONFIG_PROVIDERS_ENV_PARAM_ALLOWLIST_PATTERN", "(?!)")
    for name in env:
        assert name not in OVERWRITTEN, f"{name} is overwritten by the entrypoint: set {OVERWRITTEN.get(name)}"
        assert (name in SHORT_NAMES or name in ENTRYPOINT["other_variables_read"] or name.startswith("CONNECT_")
                or re.fullmatch(secret_pattern, name)), f"the entrypoint never reads {name}"


def test_connector_password_is_a_reference_the_worker_resolves():
    """The tool hands Connect ${env:VAR}; VAR is in the worker's environment, allowed, and the osc password."""
    connect_env, tool_env = SERVICES["connect"]["environment"], SERVICES["stream-osc"]["environment"]
    reference = compose_value(tool_env["STREAM_OSC_CONNECTOR_PASSWORD"])
    match = re.fullmatch(r"\$\{env:([A-Z0-9_]+)\}", reference)
    assert match, reference
    variable = match.group(1)
    props = worker_properties(connect_env)
    assert "env" in props["config.providers"].split(",")
    assert re.fullmatch(props["config.providers.env.param.allowlist.pattern"], variable)
    assert str(connect_env[variable]) == SERVICES["mysql"]["environment"]["MYSQL_PASSWORD"]
    assert parse_mysql_dsn(tool_env["STREAM_OSC_MYSQL_DSN"]).password == str(connect_env[variable])
    assert not any(str(connect_env[variable]) in str(v) for k, v in tool_env.items()
                   if k != "STREAM_OSC_MYSQL_DSN"), "the password itself goes nowhere but the DSN"


def test_services_start_once_their_dependencies_are_healthy():
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on without conditions only waits for a start"
        for dependency, condition in depends.items():
            assert condition == {"condition": "service_healthy"}, (name, dependency)
            assert "test" in SERVICES[dependency].get("healthcheck", {}), f"{dependency} has no healthcheck"


def test_build_context_leaves_out_local_folders():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".run", ".cache"} <= ignored


def test_mysql_binlog_settings_are_what_init_checks():
    flags = set(SERVICES["mysql"]["command"])
    assert {"--binlog-format=ROW", "--binlog-row-image=FULL", "--log-bin=mysql-bin",
            "--innodb-autoinc-lock-mode=2"} <= flags


def test_tool_endpoints_point_at_the_services():
    env = SERVICES["stream-osc"]["environment"]
    mysql = parse_mysql_dsn(env["STREAM_OSC_MYSQL_DSN"])
    assert mysql.host == "mysql" and mysql.user == SERVICES["mysql"]["environment"]["MYSQL_USER"]
    connect_props = worker_properties(SERVICES["connect"]["environment"])
    assert env["STREAM_OSC_KAFKA_BOOTSTRAP"] == connect_props["bootstrap.servers"]
    assert env["STREAM_OSC_CONNECT_URL"].endswith(":" + SERVICES["connect"]["ports"][0].split(":")[1])
    assert env["STREAM_OSC_REDIS_URL"].startswith("redis://redis:")


def test_target_server_is_another_mariadb_account_the_tool_points_at():
    """mariadb-target: the account and grants of the embedded stack's target server, no binlog, and the tool's
    STREAM_OSC_TARGET_DSN logs in there as that account."""
    target, stack = SERVICES["mariadb-target"], StackConfig()
    assert target["image"].startswith("mariadb:10.11")
    env = target["environment"]
    assert (env["MARIADB_USER"], env["MARIADB_PASSWORD"]) == (stack.target_mysql_user, stack.target_mysql_password)
    assert env["MARIADB_USER"] != SERVICES["mysql"]["environment"]["MYSQL_USER"]
    assert not any("log-bin" in flag for flag in target.get("command", []))
    init = next(v.split(":")[0] for v in target["volumes"] if "/docker-entrypoint-initdb.d/" in v)
    grant = re.search(r"GRANT (.+?)\s+ON \*\.\* TO 'osc_target'@'%'", (ROOT / init).read_text(), re.S)
    assert grant and [p.strip() for p in grant.group(1).split(",")] == list(TARGET_PRIVILEGES)
    dsn = parse_mysql_dsn(SERVICES["stream-osc"]["environment"]["STREAM_OSC_TARGET_DSN"])
    assert (dsn.host, dsn.port, dsn.user, dsn.password) == ("mariadb-target", 3306, env["MARIADB_USER"],
                                                            env["MARIADB_PASSWORD"])
    assert "mariadb-target" in SERVICES["stream-osc"]["depends_on"]
