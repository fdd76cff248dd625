#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for stream-osc: system packages, the Python venv, the jars.
# Idempotent: installs only what is missing, reinstalls the venv only when pyproject.toml changed.
# Starts no system service: the embedded stack runs its own processes (`stream-osc stack up`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
say() { printf 'bootstrap: %s\n' "$*"; }

# --- Debian packages --------------------------------------------------------------------------
missing=()
need_pkg() { dpkg -s "$1" >/dev/null 2>&1 || missing+=("$1"); }
need_pkg mariadb-server
need_pkg redis-server
# Kafka 4 needs Java 17+: an older java on PATH (and no JAVA_HOME) gets Debian 12's OpenJDK 17 beside it
java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\.\{0,1\}\([0-9]*\).*/\1 \2/p' | head -1 |
               awk '{ print ($1 == 1) ? $2 : $1 }'; }
java_cmd=${JAVA_HOME:+$JAVA_HOME/bin/java}
java_cmd=${java_cmd:-$(command -v java || true)}
if [[ -z $java_cmd ]] || (( $(java_major "$java_cmd" || echo 0) < 17 )); then need_pkg default-jre-headless; fi
command -v mvn >/dev/null 2>&1 || need_pkg maven
need_pkg python3-venv
need_pkg percona-toolkit
need_pkg sysbench
command -v openssl >/dev/null 2>&1 || need_pkg openssl   # the stack's MariaDB TLS certificate

if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        say "missing Debian packages: ${missing[*]}; run this script as root (or apt-get install them)" >&2
        exit 1
    fi
    say "installing ${missing[*]}"
    # No service may start during the install: policy-rc.d answering 101 forbids invoke-rc.d starts.
    policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    say "Debian packages installed"
else
    say "Debian packages present"
fi

# --- Python venv ------------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    PYTHON=/usr/bin/python3   # Debian 12's python3 is 3.11
fi
stamp=.venv/.stream-osc-pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c 'import sys' 2>/dev/null; then
    say "creating .venv with $PYTHON"
    rm -rf .venv
    "$PYTHON" -m venv .venv
fi
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    say "installing Python dependencies (pip install -e '.[test]')"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
    echo "$want" >"$stamp"
else
    say "Python dependencies up to date"
fi

# --- jars -------------------------------------------------------------------------------------
.venv/bin/stream-osc stack install
say "done in $REPO; start the stack with: .venv/bin/stream-osc stack up"
