#!/usr/bin/env bash
# End to end, as a user: `deploy/stack up --postgres` creates a PostgreSQL
# cluster under $QUAD_HOME/pg on 127.0.0.1, telemetry and analytics keep
# their stores there (not in SQLite files), a scaled telemetry worker uses
# the same database, `down` stops the cluster, and a second `up --postgres`
# finds the data again.
# Runs on its own QUAD_HOME and ports. Root runs the server as postgres.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
QUAD_PROG=test_stack_postgres
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

step=start
fail() {
    printf 'test_stack_postgres: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_stack_postgres: ok   %s\n' "$*"; }

PG_BIN=$(quad_pg_bindir) || fail "no PostgreSQL server under /usr/lib/postgresql (deploy/test installs it)"
# The cluster's folder must be reachable by the postgres user: not under a
# private home.
QUAD_HOME=$(mktemp -d /tmp/quad-e2e-pg.XXXXXX)
chmod 755 "$QUAD_HOME"
QUAD_PORT_BASE=$(quad_free_port 19700 10 5) || fail "no five free ports from 19700"
QUAD_PG_PORT=$(quad_free_port $((QUAD_PORT_BASE + 90))) || fail "no free port for PostgreSQL"
export QUAD_HOME QUAD_PORT_BASE QUAD_PG_PORT
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_TELEMETRY_DB QUAD_ANALYTICS_DB

cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        local log
        for log in "$QUAD_HOME"/logs/telemetry.*.log "$QUAD_HOME"/logs/analytics.*.log "$QUAD_HOME"/pg/server.log; do
            [[ -f $log ]] || continue
            printf -- '--- last lines of %s\n' "$log" >&2
            tail -n 20 "$log" >&2
        done
    fi
    "$STACK" down >/dev/null 2>&1 || true
    if [[ -f $QUAD_HOME/pg/data/postmaster.pid ]]; then
        printf 'test_stack_postgres: PostgreSQL still runs after down, stopping it\n' >&2
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$QUAD_HOME/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
        rc=1
    fi
    rm -rf "$QUAD_HOME"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# psql as the cluster's owner, through its socket in $QUAD_HOME/pg.
sql() {
    local db=$1
    shift
    if ((EUID == 0)); then
        runuser -u postgres -- "$PG_BIN/psql" -X -At -h "$QUAD_HOME/pg" -p "$QUAD_PG_PORT" -U postgres -d "$db" -c "$*"
    else
        "$PG_BIN/psql" -X -At -h "$QUAD_HOME/pg" -p "$QUAD_PG_PORT" -U postgres -d "$db" -c "$*"
    fi
}

BATCH=$ROOT/protos/examples/telemetry/ingest.request.json
EXPECTED=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["events"]))' "$BATCH")

step="up --postgres"
out=$("$STACK" up --postgres) || fail "deploy/stack up --postgres exited $?: $out"
grep -q "telemetry and analytics on PostgreSQL 127.0.0.1:$QUAD_PG_PORT" <<<"$out" ||
    fail "up did not say where PostgreSQL listens: $out"
eval "$("$STACK" env)"
[[ -f $QUAD_HOME/pg/data/PG_VERSION && -f $QUAD_HOME/pg/data/postmaster.pid ]] || fail "no running cluster in $QUAD_HOME/pg/data"
[[ $(stat -c %a "$QUAD_HOME/pg/pgpass") == 600 ]] || fail "the password file is mode $(stat -c %a "$QUAD_HOME/pg/pgpass"), not 600"
for s in telemetry analytics; do
    [[ ! -e $QUAD_HOME/db/$s.db ]] || fail "$s made a SQLite file $QUAD_HOME/db/$s.db"
    tr '\0' ' ' </proc/"$(<"$QUAD_HOME/run/$s.1.pid")"/cmdline | grep -q -- "--db postgres://quad@127.0.0.1:$QUAD_PG_PORT/quad_$s" ||
        fail "$s/1 does not run on quad_$s: $(tr '\0' ' ' </proc/"$(<"$QUAD_HOME/run/$s.1.pid")"/cmdline)"
done
[[ -e $QUAD_HOME/db/catalog.db ]] || fail "catalog should stay on SQLite ($QUAD_HOME/db/catalog.db is missing)"
listen=$(sql postgres "SHOW listen_addresses") || fail "psql cannot reach the cluster"
[[ $listen == 127.0.0.1 ]] || fail "PostgreSQL listens on '$listen', expected 127.0.0.1 only"
ok "up --postgres: cluster on 127.0.0.1:$QUAD_PG_PORT, telemetry and analytics on it, the others on SQLite"

step="ingest"
reply=$(quadctl call telemetry.ingest "$(cat "$BATCH")") || fail "telemetry.ingest exited $?: $reply"
accepted=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["accepted"])' "$reply") || fail "no accepted count: $reply"
[[ $accepted == "$EXPECTED" ]] || fail "accepted $accepted of $EXPECTED: $reply"
stored=$(sql quad_telemetry "SELECT count(*) FROM events") || fail "cannot count quad_telemetry.events"
[[ $stored == "$EXPECTED" ]] || fail "quad_telemetry.events holds $stored rows, expected $EXPECTED"
ok "telemetry.ingest of $EXPECTED events: $stored rows in PostgreSQL's quad_telemetry.events"

step="analytics"
# Analytics catches up with telemetry into its own database.
seen=0
for _ in $(seq 150); do
    seen=$(sql quad_analytics "SELECT count(*) FROM tel_events" 2>/dev/null) || seen=0
    ((seen >= EXPECTED)) && break
    sleep 0.2
done
[[ $seen == "$EXPECTED" ]] || fail "quad_analytics.tel_events holds $seen of the $EXPECTED events after 30 s"
summary=$(quadctl --as admin@quad.campus call analytics.summary) || fail "analytics.summary exited $?: $summary"
python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert d["questions"], d' "$summary" ||
    fail "analytics.summary has no questions: ${summary:0:500}"
ok "analytics caught up: $seen events in quad_analytics.tel_events; analytics.summary answers"

step="scale telemetry 2"
"$STACK" scale telemetry 2 >/dev/null || fail "deploy/stack scale telemetry 2 exited $?"
tr '\0' ' ' </proc/"$(<"$QUAD_HOME/run/telemetry.2.pid")"/cmdline | grep -q -- "--db postgres://quad@127.0.0.1:$QUAD_PG_PORT/quad_telemetry" ||
    fail "telemetry/2 is not on the same database: $(tr '\0' ' ' </proc/"$(<"$QUAD_HOME/run/telemetry.2.pid")"/cmdline)"
status=$("$STACK" status) || fail "deploy/stack status exited $?"
grep -q "PostgreSQL 127.0.0.1:$QUAD_PG_PORT (running)" <<<"$status" || fail "status does not show PostgreSQL: $status"
ok "scale telemetry 2: the second worker shares quad_telemetry; status shows the cluster"

step="down"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
[[ ! -f $QUAD_HOME/pg/data/postmaster.pid ]] || fail "PostgreSQL still runs after down"
quad_port_free "$QUAD_PG_PORT" || fail "port $QUAD_PG_PORT is still open after down"
ok "down stops PostgreSQL; its data stays in $QUAD_HOME/pg/data"

step="second up --postgres"
"$STACK" up --postgres >/dev/null || fail "a second deploy/stack up --postgres exited $?"
eval "$("$STACK" env)"
stored=$(sql quad_telemetry "SELECT count(*) FROM events") || fail "cannot count quad_telemetry.events"
[[ $stored == "$EXPECTED" ]] || fail "after down and up, quad_telemetry.events holds $stored rows, expected $EXPECTED"
reply=$(quadctl call telemetry.ingest "$(cat "$BATCH")") || fail "telemetry.ingest (again) exited $?: $reply"
dups=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["duplicate"])' "$reply") || fail "no duplicate count: $reply"
[[ $dups == "$EXPECTED" ]] || fail "the same batch again gave $dups duplicates, expected $EXPECTED: $reply"
stored=$(sql quad_telemetry "SELECT count(*) FROM events")
[[ $stored == "$EXPECTED" ]] || fail "the batch sent twice left $stored rows, expected $EXPECTED"
"$STACK" down >/dev/null || fail "the second down exited $?"
ok "the data is there after down and up; the same batch again is $dups duplicates, still $stored rows"

step="finished"
printf 'test_stack_postgres: all checks passed\n'
