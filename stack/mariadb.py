"""MariaDB servers of the embedded stack, each with its own datadir, config file, socket, port and account: the
source (binlog set up for Debezium) and, on request, the target of migrations to another server."""
from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pymysql

from stack import tls
from stack.base import Service, require_binary
from stack.config import TARGET_MYSQL, StackConfig
from stack.process import StackError, tail

NAME = "mariadb"

# What the target server's account may do: make, fill, lock and swap the new table, see who holds it
# (PROCESS), and no more, so that a privilege the tool forgets there shows up in the tests.
TARGET_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "INDEX", "TRIGGER",
                     "CREATE TEMPORARY TABLES", "LOCK TABLES", "PROCESS")


@dataclass(frozen=True)
class Server:
    """One MariaDB server of the stack: the source (binlog for Debezium) or the target of migrations to another
    server (no binlog, another account)."""

    name: str        # the service, its folder under the run dir and its socket
    login: Callable[[StackConfig], tuple[int, str, str]]   # port, user, password
    privileges: str  # what the user is granted ON *.*
    binlog: bool
    server_id: int
    buffer_pool: str
    redo_log: str    # sized so that a copy beside unthrottled writers does not fill it: near its checkpoint limit
                     # InnoDB flushes before any write may go on (Debian's 96 MiB filled to 90% in the test suite)


SOURCE = Server(NAME, lambda c: (c.mysql_port, c.mysql_user, c.mysql_password),
                "ALL PRIVILEGES ON *.* TO {user} WITH GRANT OPTION", binlog=True, server_id=1, buffer_pool="1G",
                redo_log="1G")
TARGET = Server(TARGET_MYSQL, lambda c: (c.target_mysql_port, c.target_mysql_user, c.target_mysql_password),
                f"{', '.join(TARGET_PRIVILEGES)} ON *.* TO {{user}}", binlog=False, server_id=2, buffer_pool="256M",
                redo_log="512M")


def home(config: StackConfig, server: Server = SOURCE) -> Path:
    """Folder of the config file, data directory and socket."""
    return config.run_dir / server.name


def data_dir(config: StackConfig, server: Server = SOURCE) -> Path:
    return home(config, server) / "data"


def socket_path(config: StackConfig, server: Server = SOURCE) -> Path:
    return config.run_dir / f"{server.name}.sock"


def config_file(config: StackConfig, server: Server = SOURCE) -> Path:
    return home(config, server) / "my.cnf"


# One day of binlog: a run of the tests or the benchmark writes gigabytes of it (70 GB in a few days of both
# filled a disk), and a migration here that waits longer than that is told its position was purged.
BINLOG = """\
log_bin = binlog
binlog_format = ROW
binlog_row_image = FULL
log_slave_updates = ON
binlog_expire_logs_seconds = 86400
"""


def render_config(config: StackConfig, server: Server = SOURCE) -> str:
    """The server's option file: ROW binlog with full images and GTIDs (the source), settings the copy needs."""
    port = server.login(config)[0]
    return f"""\
# written by stream-osc (stack/mariadb.py); rewritten on every start
[mysqld]
user = root
datadir = {data_dir(config, server)}
socket = {socket_path(config, server)}
pid-file = {home(config, server) / 'mariadbd.pid'}
# its own temporary files (internal temporary tables) under the run dir, where no /tmp cleaner removes them
tmpdir = {home(config, server) / 'tmp'}
port = {port}
bind-address = {config.host}
skip-name-resolve
server_id = {server.server_id}
{BINLOG if server.binlog else ""}innodb_autoinc_lock_mode = 2
# information_schema.METADATA_LOCK_INFO: the cutover sees exactly who holds a table before locking it
plugin_load_add = metadata_lock_info
innodb_buffer_pool_size = {server.buffer_pool}
innodb_log_file_size = {server.redo_log}
max_connections = 500
# every deadlock's cycle in the error log: a test that sees 1213 leaves the statements that made it
innodb_print_all_deadlocks = ON
# TLS offered to clients that ask for it (users created REQUIRE SSL must): a locally made certificate
ssl_ca = {tls.ca_file(config)}
ssl_cert = {tls.server_files(config)[0]}
ssl_key = {tls.server_files(config)[1]}

[client]
socket = {socket_path(config, server)}
port = {port}
"""


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_bootstrap_sql(config: StackConfig, server: Server = SOURCE) -> str:
    """Users created once, when the data directory is initialised."""
    _, user, password = server.login(config)
    user, password = _sql_string(user), _sql_string(password)
    lines = ["FLUSH PRIVILEGES;"]  # bootstrap runs without grant tables; this loads them
    for host in ("'%'", "'localhost'"):
        lines.append(f"CREATE USER IF NOT EXISTS {user}@{host} IDENTIFIED BY {password};")
        lines.append(f"GRANT {server.privileges.format(user=f'{user}@{host}')};")
    return "\n".join(lines) + "\n"


def preflight(config: StackConfig, server: Server = SOURCE) -> None:
    require_binary("mariadbd", "mariadb-server")
    require_binary("openssl", "openssl")
    if not data_dir(config, server).is_dir():
        require_binary("mariadb-install-db", "mariadb-server")


def prepare(config: StackConfig, server: Server = SOURCE) -> None:
    """Write the option file; initialise the data directory (and the server's users) on first start."""
    home(config, server).mkdir(parents=True, exist_ok=True)
    (home(config, server) / "tmp").mkdir(exist_ok=True)
    tls.ensure_certificates(config)
    config_file(config, server).write_text(render_config(config, server))
    if data_dir(config, server).is_dir():
        return
    staging = home(config, server) / "data.init"
    shutil.rmtree(staging, ignore_errors=True)
    bootstrap = home(config, server) / "bootstrap.sql"
    bootstrap.write_text(render_bootstrap_sql(config, server))
    log = config.log_file(server.name)
    with open(log, "ab") as out:
        out.write(b"\n==> initialising the data directory (mariadb-install-db)\n")
        out.flush()
        result = subprocess.run(
            [require_binary("mariadb-install-db", "mariadb-server"), f"--defaults-file={config_file(config, server)}",
             f"--datadir={staging}", "--user=root", "--skip-test-db", f"--extra-file={bootstrap}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise StackError(f"{server.name}: mariadb-install-db failed (exit {result.returncode}); see {log}:\n"
                         f"{tail(log)}")
    staging.rename(data_dir(config, server))  # a half-initialised directory never looks ready


def command(config: StackConfig, server: Server = SOURCE) -> list[str]:
    return [require_binary("mariadbd", "mariadb-server"), f"--defaults-file={config_file(config, server)}"]


def probe(config: StackConfig, server: Server = SOURCE) -> bool:
    """Ready when the server's user (`osc`, `osc_target`) can run SELECT 1 over TCP."""
    port, user, password = server.login(config)
    try:
        conn = pymysql.connect(host=config.host, port=port, user=user, password=password, connect_timeout=2,
                               read_timeout=5)
    except pymysql.err.OperationalError:
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchone() == (1,)
    finally:
        conn.close()


def service(server: Server) -> Service:
    """The stack service running `server`."""
    return Service(
        name=server.name,
        ports=lambda config: [(server.login(config)[0], server.name)],
        command=functools.partial(command, server=server),
        probe=functools.partial(probe, server=server),
        prepare=functools.partial(prepare, server=server),
        preflight=functools.partial(preflight, server=server),
    )


SERVICE = service(SOURCE)
TARGET_SERVICE = service(TARGET)   # only with `stack up --target-server`
