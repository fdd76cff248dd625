"""MariaDB of the embedded stack: own datadir, config file, socket and port; binlog set up for Debezium."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pymysql

from stack import tls
from stack.base import Service, require_binary
from stack.config import StackConfig
from stack.process import StackError, tail

NAME = "mariadb"


def home(config: StackConfig) -> Path:
    """Folder of the config file, data directory and socket."""
    return config.run_dir / NAME


def data_dir(config: StackConfig) -> Path:
    return home(config) / "data"


def socket_path(config: StackConfig) -> Path:
    return config.run_dir / "mariadb.sock"


def config_file(config: StackConfig) -> Path:
    return home(config) / "my.cnf"


def render_config(config: StackConfig) -> str:
    """The server's option file: ROW binlog with full images, GTIDs, settings the copy needs."""
    return f"""\
# written by stream-osc (stack/mariadb.py); rewritten on every start
[mysqld]
user = root
datadir = {data_dir(config)}
socket = {socket_path(config)}
pid-file = {home(config) / 'mariadbd.pid'}
port = {config.mysql_port}
bind-address = {config.host}
skip-name-resolve
log_bin = binlog
binlog_format = ROW
binlog_row_image = FULL
server_id = 1
log_slave_updates = ON
binlog_expire_logs_seconds = 604800
innodb_autoinc_lock_mode = 2
# information_schema.METADATA_LOCK_INFO: the cutover sees exactly who holds a table before locking it
plugin_load_add = metadata_lock_info
innodb_buffer_pool_size = 1G
max_connections = 500
# TLS offered to clients that ask for it (users created REQUIRE SSL must): a locally made certificate
ssl_ca = {tls.ca_file(config)}
ssl_cert = {tls.server_files(config)[0]}
ssl_key = {tls.server_files(config)[1]}

[client]
socket = {socket_path(config)}
port = {config.mysql_port}
"""


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_bootstrap_sql(config: StackConfig) -> str:
    """Users created once, when the data directory is initialised."""
    user, password = _sql_string(config.mysql_user), _sql_string(config.mysql_password)
    lines = ["FLUSH PRIVILEGES;"]  # bootstrap runs without grant tables; this loads them
    for host in ("'%'", "'localhost'"):
        lines.append(f"CREATE USER IF NOT EXISTS {user}@{host} IDENTIFIED BY {password};")
        lines.append(f"GRANT ALL PRIVILEGES ON *.* TO {user}@{host} WITH GRANT OPTION;")
    return "\n".join(lines) + "\n"


def preflight(config: StackConfig) -> None:
    require_binary("mariadbd", "mariadb-server")
    require_binary("openssl", "openssl")
    if not data_dir(config).is_dir():
        require_binary("mariadb-install-db", "mariadb-server")


def prepare(config: StackConfig) -> None:
    """Write the option file; initialise the data directory (and the `osc` users) on first start."""
    home(config).mkdir(parents=True, exist_ok=True)
    tls.ensure_certificates(config)
    config_file(config).write_text(render_config(config))
    if data_dir(config).is_dir():
        return
    staging = home(config) / "data.init"
    shutil.rmtree(staging, ignore_errors=True)
    bootstrap = home(config) / "bootstrap.sql"
    bootstrap.write_text(render_bootstrap_sql(config))
    log = config.log_file(NAME)
    with open(log, "ab") as out:
        out.write(b"\n==> initialising the data directory (mariadb-install-db)\n")
        out.flush()
        result = subprocess.run(
            [require_binary("mariadb-install-db", "mariadb-server"), f"--defaults-file={config_file(config)}",
             f"--datadir={staging}", "--user=root", "--skip-test-db", f"--extra-file={bootstrap}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise StackError(f"mariadb: mariadb-install-db failed (exit {result.returncode}); see {log}:\n{tail(log)}")
    staging.rename(data_dir(config))  # a half-initialised directory never looks ready


def command(config: StackConfig) -> list[str]:
    return [require_binary("mariadbd", "mariadb-server"), f"--defaults-file={config_file(config)}"]


def probe(config: StackConfig) -> bool:
    """Ready when the `osc` user can run SELECT 1 over TCP."""
    try:
        conn = pymysql.connect(host=config.host, port=config.mysql_port, user=config.mysql_user,
                               password=config.mysql_password, connect_timeout=2, read_timeout=5)
    except pymysql.err.OperationalError:
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchone() == (1,)
    finally:
        conn.close()


SERVICE = Service(
    name=NAME,
    ports=lambda config: [(config.mysql_port, NAME)],
    command=command,
    probe=probe,
    prepare=prepare,
    preflight=preflight,
)
