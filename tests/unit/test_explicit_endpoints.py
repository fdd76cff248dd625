"""Endpoints are explicit: an unset or empty one is an error naming it, the embedded stack's addresses are used
only when asked for (--stack, `stream-osc stack env`), and the demo runs on the embedded stack or nowhere."""
from __future__ import annotations

import argparse

import pytest

import demo.__main__ as demo_main
from cli.endpoints import command_endpoints, configured_endpoints
from cli.main import main
from core.endpoints import ENV_KEYS, OPTIONAL_KEYS, ConfigError, MissingEndpoint
from stack.config import StackConfig

PRODUCTION = {"STREAM_OSC_MYSQL_DSN": "mysql://osc:Pr0dSecret@db.prod.internal:3306/",
              "STREAM_OSC_KAFKA_BOOTSTRAP": "kafka.prod:9092", "STREAM_OSC_CONNECT_URL": "http://connect.prod:8083",
              "STREAM_OSC_REDIS_URL": "redis://redis.prod:6379/0"}


@pytest.fixture
def no_endpoints(monkeypatch):
    """No STREAM_OSC_* endpoint variable and no config file in the environment."""
    for var in (*ENV_KEYS.values(), *OPTIONAL_KEYS.values(), "STREAM_OSC_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("stream-osc: error: "), err
    return err


def test_an_empty_database_dsn_is_one_error_naming_it_never_the_stacks_database(no_endpoints, capsys):
    no_endpoints.setenv("STREAM_OSC_MYSQL_DSN", "")
    assert main(["list"]) == 2
    err = one_error_line(capsys)
    assert "STREAM_OSC_MYSQL_DSN (set but empty; or mysql_dsn in [endpoints])" in err
    assert 'eval "$(stream-osc stack env)"' in err and "--stack" in err
    assert StackConfig().mysql_password not in err


def test_an_unset_connect_url_is_named_and_never_becomes_the_stacks(no_endpoints, capsys):
    for var, value in PRODUCTION.items():
        if var != "STREAM_OSC_CONNECT_URL":
            no_endpoints.setenv(var, value)
    with pytest.raises(MissingEndpoint, match=r"no address for: STREAM_OSC_CONNECT_URL \(or connect_url"):
        configured_endpoints()
    assert main(["status", "--table", "shop.orders"]) == 2
    err = one_error_line(capsys)
    assert "STREAM_OSC_CONNECT_URL" in err and "18083" not in err and "Pr0dSecret" not in err


def test_an_empty_config_file_value_is_missing_too(no_endpoints, tmp_path):
    path = tmp_path / "osc.toml"
    path.write_text('[endpoints]\nmysql_dsn = ""\nkafka_bootstrap = "k:9092"\nconnect_url = "http://c:8083"\n'
                    'redis_url = "redis://r:6379/0"\n')
    with pytest.raises(MissingEndpoint, match=r"no address for: STREAM_OSC_MYSQL_DSN \(or mysql_dsn"):
        configured_endpoints(path)


def test_the_stacks_variables_give_its_endpoints_and_its_secrets_folder(no_endpoints):
    stack = StackConfig()
    for var, value in stack.env().items():
        no_endpoints.setenv(var, value)
    loaded = command_endpoints(argparse.Namespace(config=None, stack=None))
    assert loaded.mysql.port == stack.mysql_port and loaded.connect_url == stack.env()["STREAM_OSC_CONNECT_URL"]
    assert loaded.connector_secrets_dir == str(stack.connect_secrets_dir)


def test_configured_endpoints_take_nothing_from_the_stack(no_endpoints):
    for var, value in PRODUCTION.items():
        no_endpoints.setenv(var, value)
    loaded = command_endpoints(argparse.Namespace(config=None, stack=None))
    assert loaded.connector_secrets_dir == "" and loaded.target_dsn == ""
    assert (loaded.mysql.host, loaded.connect_url) == ("db.prod.internal", "http://connect.prod:8083")


def test_stack_option_uses_the_stack_and_refuses_variables_naming_another_server(no_endpoints, capsys):
    stack = StackConfig()
    loaded = command_endpoints(argparse.Namespace(config=None, stack=True))
    assert (loaded.mysql.port, loaded.redis_url) == (stack.mysql_port, stack.env()["STREAM_OSC_REDIS_URL"])
    no_endpoints.setenv("STREAM_OSC_MYSQL_DSN", stack.env()["STREAM_OSC_MYSQL_DSN"])   # the stack's own: fine
    command_endpoints(argparse.Namespace(config=None, stack=True))
    no_endpoints.setenv("STREAM_OSC_MYSQL_DSN", PRODUCTION["STREAM_OSC_MYSQL_DSN"])
    assert main(["list", "--stack"]) == 2
    err = one_error_line(capsys)
    assert ("--stack runs on the embedded stack only, but STREAM_OSC_MYSQL_DSN names another server: "
            "`unset STREAM_OSC_MYSQL_DSN`, or leave out --stack") in err
    assert "Pr0dSecret" not in err


def test_stack_option_refuses_a_config_file_naming_another_server(no_endpoints, tmp_path):
    path = tmp_path / "prod.toml"
    path.write_text('[endpoints]\nredis_url = "redis://redis.prod:6379/0"\n')
    with pytest.raises(ConfigError, match=rf"redis_url in \[endpoints\] of {path} names another server"):
        command_endpoints(argparse.Namespace(config=str(path), stack=True))
    no_endpoints.setenv("STREAM_OSC_CONFIG", str(path))
    with pytest.raises(ConfigError, match="names another server"):
        command_endpoints(argparse.Namespace(config=None, stack=True))


def test_the_demo_refuses_a_shell_set_up_for_production_before_starting_anything(no_endpoints, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(demo_main.stack_cli, "cmd_up", lambda args: started.append(args))
    monkeypatch.setattr(demo_main, "connect", lambda *a, **k: pytest.fail("the demo connected"))
    for var, value in PRODUCTION.items():
        no_endpoints.setenv(var, value)
    assert demo_main.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demo: error: the demo runs on the embedded stack only, but STREAM_OSC_MYSQL_DSN, "
                          "STREAM_OSC_KAFKA_BOOTSTRAP, STREAM_OSC_CONNECT_URL, STREAM_OSC_REDIS_URL name another "
                          "server: `unset STREAM_OSC_MYSQL_DSN STREAM_OSC_KAFKA_BOOTSTRAP STREAM_OSC_CONNECT_URL "
                          "STREAM_OSC_REDIS_URL`"), err
    assert "Pr0dSecret" not in err and started == []


def test_the_demos_endpoints_are_the_stacks_whatever_else_the_environment_holds(no_endpoints):
    stack = StackConfig()
    no_endpoints.setenv("STREAM_OSC_MYSQL_DSN", stack.env()["STREAM_OSC_MYSQL_DSN"])
    no_endpoints.setenv("STREAM_OSC_CONNECTOR_DATABASE_HOST", "db.prod.internal")   # not an address it follows
    loaded = demo_main.demo_endpoints()
    assert loaded.mysql.port == stack.mysql_port and loaded.connector_database_host == ""
    assert loaded.connector_secrets_dir == str(stack.connect_secrets_dir)
