"""The target server's login in AWS Secrets Manager (moto): RDS's JSON format and DSN strings, filling only what the
DSN leaves open, read once per process, and a secret that cannot be read named with the AWS error code only.

Each test uses a secret id of its own: values are cached per process, as in production."""
from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from core.endpoints import ConfigError, Endpoints

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}
REGION = "eu-central-1"
PASSWORD = "Rds-M4naged-pw"


@pytest.fixture
def secrets(monkeypatch):
    """A Secrets Manager client on moto's in-process AWS, with throwaway credentials; no default region."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


def load(**environ: str) -> Endpoints:
    return Endpoints.load(environ={"STREAM_OSC_TARGET_SECRET_REGION": REGION, **environ}, defaults=ADDRESSES)


def rds_secret(**fields: object) -> str:
    """A secret as RDS writes the managed secrets of its instances."""
    return json.dumps({"engine": "mysql", "username": "osc_target", "password": PASSWORD, **fields})


def login(address) -> tuple[str, int, str, str]:
    return address.host, address.port, address.user, address.password


def test_rds_json_secret_gives_host_port_user_and_password(secrets):
    secrets.create_secret(Name="rds/full", SecretString=rds_secret(host="db2.rds.internal", port=3307, dbname="app"))
    endpoints = load(STREAM_OSC_TARGET_SECRET_ID="rds/full")
    assert login(endpoints.target()) == ("db2.rds.internal", 3307, "osc_target", PASSWORD)


def test_rds_json_secret_fills_only_the_password_of_a_dsn_naming_host_and_user(secrets):
    secrets.create_secret(Name="rds/pw", SecretString=rds_secret(username="someone_else", host="elsewhere", port=1))
    endpoints = load(STREAM_OSC_TARGET_SECRET_ID="rds/pw")
    assert login(endpoints.target("mysql://osc_target@db2:3306/")) == ("db2", 3306, "osc_target", PASSWORD)
    assert login(load(STREAM_OSC_TARGET_SECRET_ID="rds/pw", STREAM_OSC_TARGET_DSN="mysql://osc_target@db3/").target()) \
        == ("db3", 3306, "osc_target", PASSWORD)


def test_rds_json_secret_gives_the_user_a_dsn_leaves_out(secrets):
    secrets.create_secret(Name="rds/user", SecretString=rds_secret())
    assert login(load(STREAM_OSC_TARGET_SECRET_ID="rds/user").target("mysql://db2:3307/")) \
        == ("db2", 3307, "osc_target", PASSWORD)


def test_dsn_string_secret(secrets):
    secrets.create_secret(Name="dsn/target", SecretString=f"mysql://osc_target:{PASSWORD}@db2:3307/?ssl-mode=required")
    address = load(STREAM_OSC_TARGET_SECRET_ID="dsn/target").target()
    assert login(address) == ("db2", 3307, "osc_target", PASSWORD)
    assert address.ssl_mode == "required"


def test_secret_is_read_only_when_something_is_missing(secrets):
    """A DSN and STREAM_OSC_TARGET_PASSWORD that say everything need no AWS call (none exists to answer here)."""
    endpoints = load(STREAM_OSC_TARGET_SECRET_ID="never/created", STREAM_OSC_TARGET_PASSWORD="pw")
    assert login(endpoints.target("mysql://osc_target@db2/")) == ("db2", 3306, "osc_target", "pw")


def test_secret_is_fetched_once_per_process(secrets):
    secrets.create_secret(Name="rds/once", SecretString=rds_secret(host="db2"))
    first = load(STREAM_OSC_TARGET_SECRET_ID="rds/once").target()
    secrets.delete_secret(SecretId="rds/once", ForceDeleteWithoutRecovery=True)
    assert load(STREAM_OSC_TARGET_SECRET_ID="rds/once").target() == first


def test_missing_secret_names_the_id_and_the_aws_error_code_only(secrets):
    secrets.create_secret(Name="rds/other", SecretString=rds_secret(host="db2"))
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_SECRET_ID="rds/missing").target()
    message = str(err.value)
    assert message.startswith("cannot read the Secrets Manager secret rds/missing (STREAM_OSC_TARGET_SECRET_ID): "
                              "ResourceNotFoundException")
    assert PASSWORD not in message and "testing" not in message
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_secret_without_a_region_says_how_to_give_one(secrets):
    with pytest.raises(ConfigError) as err:
        Endpoints.load(environ={"STREAM_OSC_TARGET_SECRET_ID": "rds/noregion"}, defaults=ADDRESSES).target()
    message = str(err.value)
    assert message.startswith("cannot read the Secrets Manager secret rds/noregion (STREAM_OSC_TARGET_SECRET_ID): ")
    assert message.endswith("no AWS region; set STREAM_OSC_TARGET_SECRET_REGION, AWS_REGION or a profile's region")


def test_secret_without_a_host_and_no_dsn_is_one_clear_error(secrets):
    secrets.create_secret(Name="rds/nohost", SecretString=rds_secret())
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_SECRET_ID="rds/nohost").target()
    assert str(err.value).startswith("the target server has no host: the Secrets Manager secret rds/nohost names none")


def test_secret_without_a_password_is_one_clear_error(secrets):
    secrets.create_secret(Name="rds/nopw", SecretString=json.dumps({"username": "osc_target", "host": "db2"}))
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_SECRET_ID="rds/nopw").target()
    assert str(err.value).startswith("no password for the target server osc_target@db2:3306")


@pytest.mark.parametrize("value", ['{"username": "osc_target", "password": "' + PASSWORD + '"',   # cut short
                                   f"just-a-password-{PASSWORD}",
                                   json.dumps([PASSWORD]),
                                   rds_secret(host="db2", port="port-" + PASSWORD)])
def test_malformed_secret_is_refused_without_showing_it(secrets, value):
    name = f"bad/{abs(hash(value))}"
    secrets.create_secret(Name=name, SecretString=value)
    with pytest.raises(ConfigError) as err:
        load(STREAM_OSC_TARGET_SECRET_ID=name).target()
    assert f"the Secrets Manager secret {name} (STREAM_OSC_TARGET_SECRET_ID)" in str(err.value)
    assert PASSWORD not in str(err.value)
