#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1:5432 for the tests (issue 7).
#
# A no-op when one already answers, or when TASKLOOM_TEST_POSTGRES_URL points the tests at
# another server. Otherwise (a fresh machine) it installs Debian's postgresql package,
# allows password-less ("trust") connections from this machine only, and starts the
# cluster. Exits non-zero, saying why, when it cannot get a server.
set -euo pipefail

HOST=127.0.0.1
PORT="${TASKLOOM_PG_PORT:-5432}"       # these two only exist to test this script
CLUSTER="${TASKLOOM_PG_CLUSTER:-main}" # on a spare cluster

answers() {
    (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

say() {
    echo "ensure-postgres: $*" >&2
}

if [[ -n "${TASKLOOM_TEST_POSTGRES_URL:-}" ]] || answers; then
    exit 0
fi

if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    say "no PostgreSQL on $HOST:$PORT, and this is not a Debian machine where I am root;"
    say "start one (trust auth for user postgres) or set TASKLOOM_TEST_POSTGRES_URL"
    exit 1
fi

if ! command -v pg_ctlcluster >/dev/null || ! compgen -G "/etc/postgresql/*" >/dev/null; then
    say "installing PostgreSQL from the Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
fi

version="$(ls /etc/postgresql | sort -V | tail -n 1)"
config="/etc/postgresql/$version/$CLUSTER"
if [[ ! -d "$config" ]]; then
    say "creating the PostgreSQL $version cluster $CLUSTER"
    pg_createcluster "$version" "$CLUSTER" -p "$PORT" >/dev/null
fi
if ! grep -q "taskloom tests" "$config/pg_hba.conf"; then
    # Connections from this machine need no password (the tests' server only).
    original="$(cat "$config/pg_hba.conf")"
    {
        echo "# taskloom tests: trust local connections"
        echo "local all all trust"
        echo "host all all 127.0.0.1/32 trust"
        echo "host all all ::1/128 trust"
        echo "$original"
    } >"$config/pg_hba.conf" # rewritten in place: keeps its owner and mode
fi
mkdir -p "$config/conf.d"
printf "listen_addresses = 'localhost'\nport = %s\n" "$PORT" >"$config/conf.d/taskloom-tests.conf"

say "(re)starting PostgreSQL $version with that configuration"
pg_ctlcluster --skip-systemctl-redirect "$version" "$CLUSTER" restart
for _ in $(seq 1 60); do
    if answers; then
        exit 0
    fi
    sleep 0.5
done
say "PostgreSQL $version ($CLUSTER) did not start on $HOST:$PORT; see /var/log/postgresql/"
exit 1
