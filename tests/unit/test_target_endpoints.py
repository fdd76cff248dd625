"""The target server of a migration to another server: where its address and login come from (order of the
sources), a password on the command line refused, and credentials never shown."""
from __future__ import annotations

from pathlib import Path

import pytest

from core.endpoints import ConfigError, Endpoints, parse_mysql_dsn, refuse_password_on_command_line

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}
SECRET = "t4rget-S3cret"


def load(**environ: str) -> Endpoints:
    return Endpoints.load(environ=environ, defaults=ADDRESSES)


def login(address) -> tuple[str, int, str, str]:
    return address.host, address.port, address.user, address.password


def test_target_dsn_from_the_environment_holds_the_whole_login():
    endpoints = load(STREAM_OSC_TARGET_DSN=f"mysql://osc_target:{SECRET}@db2.internal:3307/")
    assert login(endpoints.target()) == ("db2.internal", 3307, "osc_target", SECRET)


def test_target_dsn_from_the_config_file(tmp_path: Path):
    config = tmp_path / "osc.toml"
    config.write_text(f'[endpoints]\ntarget_dsn = "mysql://osc_target:{SECRET}@db2:3307/"\n'
                      'target_secret_region = "eu-west-1"\n')
    endpoints = Endpoints.load(config, environ={}, defaults=ADDRESSES)
    assert login(endpoints.target()) == ("db2", 3307, "osc_target", SECRET)
    assert endpoints.target_secret_region == "eu-west-1"


def test_command_line_dsn_takes_its_password_from_target_password():
    endpoints = load(STREAM_OSC_TARGET_PASSWORD=SECRET)
    assert login(endpoints.target("mysql://osc_target@db2:3307/")) == ("db2", 3307, "osc_target", SECRET)


def test_target_dsn_password_comes_before_target_password():
    endpoints = load(STREAM_OSC_TARGET_DSN=f"mysql://osc_target:{SECRET}@db2/", STREAM_OSC_TARGET_PASSWORD="other")
    assert endpoints.target().password == SECRET
    assert load(STREAM_OSC_TARGET_DSN="mysql://osc_target@db2/", STREAM_OSC_TARGET_PASSWORD=SECRET).target().password \
        == SECRET


def test_command_line_dsn_replaces_target_dsn_and_its_password():
    """The configured DSN's password belongs to its own server: a --target-dsn naming another one never gets it."""
    endpoints = load(STREAM_OSC_TARGET_DSN=f"mysql://osc_target:{SECRET}@db2/")
    with pytest.raises(ConfigError) as err:
        endpoints.target("mysql://other@db3:3306/")
    assert str(err.value).startswith("no password for the target server other@db3:3306: set STREAM_OSC_TARGET_PASSWORD")
    assert SECRET not in str(err.value)


def test_tls_options_of_the_target_dsn_are_kept(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    endpoints = load(STREAM_OSC_TARGET_PASSWORD=SECRET)
    address = endpoints.target(f"mysql://osc_target@db2:3307/?ssl-ca={ca}")
    assert (address.ssl_mode, address.ssl_ca) == ("verify-identity", str(ca))


def test_no_target_configured_is_one_clear_error():
    with pytest.raises(ConfigError) as err:
        load().target()
    assert str(err.value).startswith("no target server: give --target-dsn")


def test_no_password_anywhere_is_one_clear_error():
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_DSN="mysql://osc_target@db2:3307/").target()
    assert str(err.value) == ("no password for the target server osc_target@db2:3307: set STREAM_OSC_TARGET_PASSWORD, "
                              "STREAM_OSC_TARGET_SECRET_ID (a Secrets Manager secret), or the whole DSN in "
                              "STREAM_OSC_TARGET_DSN")


@pytest.mark.parametrize("dsn", [f"mysql://osc_target:{SECRET}@db2:3307/", f"mysql://:{SECRET}@db2/",
                                 f"mariadb://osc_target:{SECRET}@db2/?ssl-mode=required"])
def test_password_on_the_command_line_is_refused_without_repeating_it(dsn):
    for refuse in (refuse_password_on_command_line, lambda given: load(STREAM_OSC_TARGET_PASSWORD="x").target(given)):
        with pytest.raises(ConfigError) as err:
            refuse(dsn)
        message = str(err.value)
        assert message.startswith("--target-dsn holds a password: `ps` shows command lines to every user")
        assert "STREAM_OSC_TARGET_PASSWORD" in message and "STREAM_OSC_TARGET_SECRET_ID" in message
        assert SECRET not in message


@pytest.mark.parametrize("dsn", ["mysql://osc_target@db2:3307/", "mysql://db2/", "mysql://osc_target:@db2/"])
def test_command_line_dsn_without_a_password_is_accepted(dsn):
    refuse_password_on_command_line(dsn)
    assert parse_mysql_dsn(dsn, "--target-dsn").password == ""


def test_malformed_target_dsn_is_refused_at_load_naming_its_variable():
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_DSN=f"mysql://osc_target:{SECRET}@db2:port/")
    assert str(err.value).startswith("STREAM_OSC_TARGET_DSN (target_dsn): the port is not a number")
    assert SECRET not in str(err.value)


def test_malformed_command_line_dsn_names_the_option():
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_PASSWORD=SECRET).target("postgres://db2/")
    assert str(err.value).startswith("--target-dsn must look like")


def test_repr_shows_the_target_host_and_port_only():
    endpoints = load(STREAM_OSC_TARGET_DSN=f"mysql://osc_target:{SECRET}@db2:3307/",
                     STREAM_OSC_TARGET_PASSWORD="pw-" + SECRET)
    text = repr(endpoints)
    assert "target=db2:3307" in text
    assert SECRET not in text and "osc_target" not in text
    assert SECRET not in repr(endpoints.target())
    assert "target=secret prod/target" in repr(load(STREAM_OSC_TARGET_SECRET_ID="prod/target"))
    assert "target" not in repr(load())
