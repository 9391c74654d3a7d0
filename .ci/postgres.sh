#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the Optuna RDB tests (tests/test_optuna_distributed.py).
# Installs PostgreSQL from Debian packages when missing (as root), starts a server on 127.0.0.1 only,
# on a free port, with a fresh database, and writes its SQLAlchemy URL to .pg/url (ignored by git).
# Idempotent: a server started by an earlier run that still answers is reused.
# Usage: bash .ci/postgres.sh [start|stop]      (CI: .ci/run calls it before `make test`)
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR="$PWD/.pg"
URL_FILE="$STATE_DIR/url"
mkdir -p "$STATE_DIR"

find_bindir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
    if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
}

# Run a command as the server's owner: root may not run PostgreSQL, so use the postgres account.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        if command -v runuser >/dev/null 2>&1; then runuser -u postgres -- "$@"; else su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; fi
    else
        "$@"
    fi
}

if [ "${1:-start}" = "stop" ]; then
    if [ -f "$STATE_DIR/datadir" ] && BIN=$(find_bindir) && [ -n "$BIN" ]; then
        as_owner "$BIN/pg_ctl" -D "$(cat "$STATE_DIR/datadir")" -m fast -w stop || true
    fi
    rm -f "$URL_FILE"
    exit 0
fi

BIN=$(find_bindir || true)
if [ -z "$BIN" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "postgres.sh: installing PostgreSQL from Debian packages" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq postgresql >/dev/null
        BIN=$(find_bindir || true)
    fi
fi
if [ -z "$BIN" ]; then
    echo "postgres.sh: PostgreSQL is not installed and cannot be installed here (need root + apt-get)" >&2
    rm -f "$URL_FILE"
    exit 1
fi

# Reuse a server from an earlier run when it still answers.
if [ -f "$URL_FILE" ] && [ -f "$STATE_DIR/datadir" ] && [ -f "$STATE_DIR/port" ]; then
    if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$(cat "$STATE_DIR/port")" 2>/dev/null; then
        echo "postgres.sh: reusing the server on 127.0.0.1:$(cat "$STATE_DIR/port")" >&2
        exit 0
    fi
fi
rm -f "$URL_FILE"

if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

# The data directory lives under /tmp so the postgres account can reach it whatever the clone's path.
DATA=$(mktemp -d /tmp/dnnsat-pg.XXXXXX)
chmod 700 "$DATA"
[ "$(id -u)" -eq 0 ] && chown postgres: "$DATA"
PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 20)
PWFILE="$DATA.pw"
printf '%s\n' "$PASSWORD" >"$PWFILE"
[ "$(id -u)" -eq 0 ] && chown postgres: "$PWFILE"
chmod 600 "$PWFILE"
as_owner "$BIN/initdb" -D "$DATA/db" -U dnnsat --pwfile="$PWFILE" --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 >"$DATA.initdb.log" 2>&1 || { cat "$DATA.initdb.log" >&2; exit 1; }
rm -f "$PWFILE"

started=""
for _ in 1 2 3 4 5; do
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    if as_owner "$BIN/pg_ctl" -D "$DATA/db" -l "$DATA/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c max_connections=200 -c fsync=off" start >/dev/null; then
        started=1
        break
    fi
done
if [ -z "$started" ]; then
    echo "postgres.sh: the server did not start; log:" >&2
    cat "$DATA/server.log" >&2 || true
    exit 1
fi
PGPASSWORD="$PASSWORD" "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U dnnsat dnnsat_test
echo "$DATA/db" >"$STATE_DIR/datadir"
echo "$PORT" >"$STATE_DIR/port"
URL="postgresql+psycopg2://dnnsat:$PASSWORD@127.0.0.1:$PORT/dnnsat_test"
umask 077
printf '%s\n' "$URL" >"$URL_FILE"
echo "postgres.sh: PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT, URL in .pg/url" >&2
