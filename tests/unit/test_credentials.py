"""The database password never leaves the tool readable: DSN errors, connector configs, secret files, command lines."""
from __future__ import annotations

import os
import stat
from dataclasses import replace
from urllib.parse import quote

import pytest

from bench import tools
from bench.credentials import sysbench_config_file
from bench.sysbench import BenchError, sysbench_command
from bench.table import BenchTable
from connectors.secrets import (password_reference, properties_value, remove_connector_secret,
                                require_connector_secret, write_connector_secret)
from core.endpoints import ConfigError, Endpoints, parse_mysql_dsn

PASSWORDS = ["s3cr?t", "s3/cr/t", "s3#cr#t", "s3@cr@t", "50%off", "a:b@c/d?e#f%g", "sp ace\\back=sl:ash!#ü😀"]
ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_with_url_characters_is_read_whole(password):
    raw = parse_mysql_dsn(f"mysql://app:{password}@db.example:3307/")
    encoded = parse_mysql_dsn(f"mysql://app:{quote(password, safe='')}@db.example:3307/")
    assert (encoded.user, encoded.password, encoded.host, encoded.port) == ("app", password, "db.example", 3307)
    if "%" not in password:   # written as it is, only a '%' needs escaping (%25)
        assert (raw.password, raw.host, raw.port) == (password, "db.example", 3307)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("shape", ["mysql://app:{pw}@db:port/", "mysql://app:{pw}@:3306/", "postgres://app:{pw}@db/",
                                   "mysql://app:{pw}@db:99999/", "mysql://app:{pw}@", "app:{pw}@db:3306"])
def test_dsn_errors_never_echo_the_password(password, shape):
    with pytest.raises(ConfigError) as err:
        parse_mysql_dsn(shape.format(pw=password))
    message = str(err.value)
    assert password not in message and quote(password, safe="") not in message
    for fragment in password.replace("?", "/").replace("#", "/").replace("@", "/").split("/"):
        if len(fragment) >= 3:
            assert fragment not in message, fragment
    assert "mysql://user:password@host:port/" in message


def test_connector_password_must_be_a_provider_reference_and_is_never_echoed():
    with pytest.raises(ConfigError) as err:
        Endpoints.load(environ={"STREAM_OSC_CONNECTOR_PASSWORD": "hunter2-plain"}, defaults=ADDRESSES)
    assert "hunter2-plain" not in str(err.value) and "config provider reference" in str(err.value)
    loaded = Endpoints.load(environ={"STREAM_OSC_CONNECTOR_PASSWORD": "${env:DB_PASSWORD}"}, defaults=ADDRESSES)
    assert password_reference(loaded, "conn-1") == "${env:DB_PASSWORD}"
    with pytest.raises(ConfigError, match="absolute path"):
        Endpoints.load(environ={"STREAM_OSC_CONNECTOR_SECRETS_DIR": "relative/dir"}, defaults=ADDRESSES)


def test_capture_is_refused_when_the_password_could_only_go_in_clear():
    endpoints = Endpoints.load(environ={}, defaults=ADDRESSES)
    with pytest.raises(ConfigError, match="STREAM_OSC_CONNECTOR_PASSWORD .* or\\s+STREAM_OSC_CONNECTOR_SECRETS_DIR"):
        require_connector_secret(endpoints)


def test_secret_file_is_owner_only_and_holds_the_exact_password(tmp_path):
    password = "sp ace\\back=sl:ash!#ü😀"
    endpoints = replace(Endpoints.load(environ={}, defaults=ADDRESSES),
                        mysql_dsn=f"mysql://u:{quote(password, safe='')}@db/", connector_secrets_dir=str(tmp_path))
    require_connector_secret(endpoints)
    write_connector_secret(endpoints, "conn-1")
    path = tmp_path / "conn-1.properties"
    assert password_reference(endpoints, "conn-1") == f"${{file:{path}:database.password}}"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_properties_value(path.read_text().split("=", 1)[1].rstrip("\n")) == password
    assert [p.name for p in tmp_path.iterdir()] == ["conn-1.properties"]   # no temporary file left
    remove_connector_secret(endpoints, "conn-1")
    assert not path.exists()


def test_properties_value_escapes_what_java_would_read_otherwise():
    assert properties_value("plain-Pass.1") == "plain-Pass.1"
    assert properties_value(" a\\b") == "\\u0020a\\\\b"          # leading space kept, backslash not an escape
    assert properties_value("x#y=z:w!") == "x\\u0023y\\u003dz\\u003aw\\u0021"
    assert properties_value("é\n😀") == "\\u00e9\\u000a\\ud83d\\ude00"   # UTF-16 code units, as Java reads them


def test_benchmark_programs_read_the_password_from_owner_only_files(monkeypatch, tmp_path):
    """pt-online-schema-change (DSN F=), gh-ost (--conf) and sysbench (--config-file): nothing in `ps`."""
    password = 'hunter2#;"x'
    endpoints = Endpoints.load(environ={"STREAM_OSC_MYSQL_DSN": f"mysql://bench:{quote(password, safe='')}@db:3306/"},
                               defaults=ADDRESSES)
    seen: list[tuple[list[str], str]] = []

    def fake_run(cmd, limit_s, env=None, on_tick=None):
        files = [arg.split("=", 1)[1].split(",")[0] for arg in cmd if arg.startswith(("F=", "--conf="))]
        assert files and stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600
        seen.append((cmd, open(files[0]).read()))
        return tools.ProcessResult(0.1, 0, 1.0, "")
    monkeypatch.setattr(tools, "run_process", fake_run)
    monkeypatch.setattr(tools.shutil, "which", lambda name: "/usr/bin/" + name)
    gh_ost = tmp_path / "gh-ost"
    gh_ost.write_text("")
    run = tools.ToolRun(endpoints, BenchTable(endpoints.mysql, "bench", "sbtest1", 10), "ADD COLUMN c INT", 5.0,
                        str(gh_ost))
    assert tools.pt_osc(run).finished and tools.gh_ost(run).finished
    for cmd, option_file in seen:
        assert not any("hunter2" in arg for arg in cmd), cmd
        assert 'password="hunter2#;\\"x"' in option_file
    with sysbench_config_file(endpoints.mysql) as config_file:
        cmd = sysbench_command(config_file, "bench", 10, "run")
        assert stat.S_IMODE(os.stat(config_file).st_mode) == 0o600
        assert f"mysql-password={password}" in config_file.read_text().splitlines()
        assert not any("hunter2" in arg for arg in cmd)
    assert not config_file.exists() and not config_file.parent.exists()
    with pytest.raises(BenchError, match="whitespace"):
        with sysbench_config_file(parse_mysql_dsn("mysql://bench:two%20words@db/")):
            pass


def read_properties_value(text: str) -> str:
    """Decode a java.util.Properties value (the escapes properties_value writes)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1] == "u":
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
        elif text[i] == "\\":
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")
