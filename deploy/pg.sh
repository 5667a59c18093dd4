# deploy/pg.sh: `deploy/stack up --postgres`, sourced by deploy/stack.
#
# A PostgreSQL cluster of the stack's own under ${QUAD_PG_DIR:-$QUAD_HOME/pg},
# listening on 127.0.0.1 only, with one database per service that must scale
# (pg_services). Its data stays across down and up, like the SQLite files.
# Services connect as the role quad with a password that only the stack's
# user can read ($QUAD_PG_DIR/pgpass, given to libpq as PGPASSFILE), so the
# URL on a command line holds no secret.

# The services --postgres puts on the cluster (store postgres in
# deploy/stack.json, read by deploy/stack), unless QUAD_<NAME>_DB says otherwise.
pg_services() {
    local s
    for s in "${SERVICES[@]}"; do [[ ${SERVICE_STORE[$s]} == postgres ]] && printf '%s\n' "$s"; done
    return 0
}

pg_enabled() { [[ -f $RUN/pg.env ]]; }

# Exports of the running cluster (URLs, PGPASSFILE) for the commands after
# 'up': scale and restart start workers on the same databases.
pg_load() {
    if pg_enabled; then
        # shellcheck disable=SC1091
        source "$RUN/pg.env"
    fi
    return 0
}

# Runs a PostgreSQL program as the cluster's owner: postgres when we are
# root (the server refuses to run as root), else ourselves.
pg_as_owner() {
    if ((EUID == 0)); then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_up() {
    local s var want=() pgbin dir port
    for s in $(pg_services); do
        built "$s" || continue
        var=QUAD_$(printf '%s' "$s" | tr '[:lower:]-' '[:upper:]_')_DB
        if [[ -n ${!var:-} ]]; then
            quad_say "  --postgres: $s keeps $var=${!var}"
            continue
        fi
        want+=("$s")
    done
    ((${#want[@]} > 0)) || { quad_say "  --postgres: no service left to put on PostgreSQL"; return 0; }
    pgbin=$(quad_pg_bindir) || quad_die "--postgres needs a PostgreSQL server, which is not installed (apt-get install postgresql)"
    dir=$(quad_abspath "${QUAD_PG_DIR:-$QUAD_HOME/pg}")
    mkdir -p "$dir"
    if ((EUID == 0)); then
        chown postgres: "$dir"
        runuser -u postgres -- test -w "$dir" ||
            quad_die "the postgres user cannot write $dir (a parent folder is closed to others?): set QUAD_PG_DIR to a folder it can reach"
    fi
    chmod 700 "$dir"
    if [[ ! -f $dir/data/PG_VERSION ]]; then
        quad_say "  --postgres: creating a cluster in $dir/data"
        pg_as_owner "$pgbin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; quad_die "initdb failed in $dir/data (its log: $dir/initdb.log)"; }
        # The owner through the socket in $dir (mode 700); everyone else
        # over loopback with the password of the role quad.
        printf 'local all postgres trust\nhost all quad 127.0.0.1/32 scram-sha-256\n' >"$dir/data/pg_hba.conf"
        ((EUID == 0)) && chown postgres: "$dir/data/pg_hba.conf"
    fi
    port=${QUAD_PG_PORT:-}
    if [[ -z $port ]]; then
        # The table's ten (deploy/quaddeploy/ports.py): past them are the /metrics ports.
        port=$(quad_free_port "$QUAD_PORT_POSTGRES_1" 1 1 10) ||
            quad_die "no free port for PostgreSQL in $QUAD_PORT_POSTGRES_1-$QUAD_PORT_POSTGRES_10; set QUAD_PG_PORT"
    elif ! quad_port_free "$port"; then
        quad_die "QUAD_PG_PORT $port on 127.0.0.1 is in use"
    fi
    if [[ -f $dir/data/postmaster.pid ]] && pg_as_owner "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        quad_die "a PostgreSQL server already runs on $dir/data (another stack on this QUAD_HOME?); stop it with: deploy/stack down"
    fi
    local options=(-c listen_addresses=127.0.0.1 -p "$port" -k "$dir" -c max_connections=100)
    # A program of supervisord (deploy/supervise.sh), run as the
    # cluster's owner; SIGINT is PostgreSQL's fast shutdown.
    local owner=()
    ((EUID == 0)) && owner=(--user postgres)
    sup_add postgres "" "$dir/server.log" 5 "${owner[@]}" --signal INT -- "$pgbin/postgres" -D "$dir/data" "${options[@]}"
    printf 'PG_DIR=%q\nPG_BIN=%q\nPG_PORT=%q\n' "$dir" "$pgbin" "$port" >"$RUN/pg.env"
    PG_DIR=$dir PG_BIN=$pgbin PG_PORT=$port
    pg_wait_ready "$dir" "$port"

    local password
    if [[ ! -s $dir/pgpass ]]; then
        password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n')
        (umask 077 && printf '*:*:*:quad:%s\n' "$password" >"$dir/pgpass")
    fi
    password=$(cut -d: -f5- <"$dir/pgpass" | head -n 1)
    pg_psql "$dir" "$port" postgres -c "DO \$\$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'quad') THEN CREATE ROLE quad LOGIN; END IF;
        END \$\$; ALTER ROLE quad PASSWORD '$password'" >/dev/null ||
        quad_die "cannot create the role quad (PostgreSQL's log: $dir/server.log)"
    # libpq reads the password from here; the workers inherit it.
    printf 'export PGPASSFILE=%q\n' "$dir/pgpass" >>"$RUN/pg.env"
    export PGPASSFILE=$dir/pgpass

    local url
    for s in "${want[@]}"; do
        var=QUAD_$(printf '%s' "$s" | tr '[:lower:]-' '[:upper:]_')_DB
        pg_psql "$dir" "$port" postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'quad_$s'" | grep -q 1 ||
            pg_psql "$dir" "$port" postgres -c "CREATE DATABASE quad_$s OWNER quad" >/dev/null ||
            quad_die "cannot create the database quad_$s"
        url=postgres://quad@127.0.0.1:$port/quad_$s
        printf -v "$var" '%s' "$url"
        export "${var?}"
        printf 'export %s=%q\n' "$var" "$url" >>"$RUN/pg.env"
    done
    quad_say "  postgres        127.0.0.1:$port   databases quad_{$(IFS=,; echo "${want[*]}")}   data $dir/data"
}

# Waits up to 60 s until the cluster in $1 accepts connections on port $2.
pg_wait_ready() {
    local dir=$1 port=$2 deadline=$((SECONDS + 60))
    until pg_as_owner "$PG_BIN/pg_isready" -q -h "$dir" -p "$port" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)) || [[ $(sup_state postgres) == FATAL ]]; then
            tail -n 20 "$dir/server.log" >&2
            quad_die "PostgreSQL did not accept connections on 127.0.0.1:$port within 60 s (its log: $dir/server.log)"
        fi
        sleep 0.1
    done
}

pg_psql() {
    local dir=$1 port=$2 db=$3
    shift 3
    pg_as_owner "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d "$db" "$@"
}

# Stops the cluster; its data stays for the next 'up --postgres'.
pg_down() {
    pg_enabled || return 0
    pg_load
    if [[ -n ${PG_DIR:-} && -f $PG_DIR/data/postmaster.pid ]]; then
        quad_say "Stopping PostgreSQL (127.0.0.1:$PG_PORT, data stays in $PG_DIR/data)"
        pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
            pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -f "$RUN/pg.env"
}

# One line for 'status'.
pg_status() {
    pg_enabled || return 0
    pg_load
    local state=stopped
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1 && state=running
    quad_say "PostgreSQL 127.0.0.1:$PG_PORT ($state), data $PG_DIR/data: $(env | sed -n 's/^QUAD_\([A-Z_]*\)_DB=postgres:.*/\1/p' | tr 'A-Z\n' 'a-z ')"
}
