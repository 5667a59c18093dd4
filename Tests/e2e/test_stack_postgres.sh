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
# Two brokers (deploy/stack's default): base..base+4 and base+10..base+14.
QUAD_PORT_BASE=$(quad_free_port_base "${QUAD_TEST_PORT_BASE:-19700}") || fail "no port base with every port free from ${QUAD_TEST_PORT_BASE:-19700}"
QUAD_PG_PORT=$(quad_free_port $((QUAD_PORT_BASE + 90)) 1 1 10) || fail "no free port for PostgreSQL in $((QUAD_PORT_BASE + 90))-$((QUAD_PORT_BASE + 99))"
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

step="restart postgres under load"
# Requests flow (telemetry.ingest of the same batch: duplicates, each a
# transaction on quad_telemetry) while 'restart postgres' stops and starts
# the cluster under supervisord. Once the new server accepts connections,
# a request must be answered within 2 s (the workers reconnect by
# themselves), and status must show the restart.
old_pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
flowing=$QUAD_HOME/flowing
: >"$flowing"
(
    while [[ ! -f $QUAD_HOME/flowing.stop ]]; do
        if quadctl --timeout 1000 --attempts 1 call telemetry.ingest "$(cat "$BATCH")" >/dev/null 2>&1; then
            printf 'ok %s\n' "$(date +%s%3N)" >>"$flowing"
        else
            printf 'err %s\n' "$(date +%s%3N)" >>"$flowing"
        fi
    done
) &
flow=$!
deadline=$((SECONDS + 30))
until grep -q '^ok ' "$flowing"; do
    ((SECONDS < deadline)) || fail "no telemetry.ingest answered before the restart"
    sleep 0.1
done
"$STACK" restart postgres >"$QUAD_HOME/restart-pg.out" 2>&1 &
restarter=$!
# The moment the new server accepts connections: a new postmaster that
# pg_isready answers (the old one answers too until it stops).
deadline=$((SECONDS + 60))
until new_pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid" 2>/dev/null) && [[ -n $new_pm && $new_pm != "$old_pm" ]] &&
    { runuser -u postgres -- "$PG_BIN/pg_isready" -q -h "$QUAD_HOME/pg" -p "$QUAD_PG_PORT" 2>/dev/null ||
        "$PG_BIN/pg_isready" -q -h "$QUAD_HOME/pg" -p "$QUAD_PG_PORT" 2>/dev/null; }; do
    ((SECONDS < deadline)) || fail "no new PostgreSQL accepted connections within 60 s of restart postgres: $(cat "$QUAD_HOME/restart-pg.out")"
    sleep 0.02
done
ready_ms=$(date +%s%3N)
# The first answer from then on, by the flow or by a request of our own.
answered_ms=""
while [[ -z $answered_ms ]]; do
    now=$(date +%s%3N)
    ((now - ready_ms <= 2000)) || break
    if quadctl --timeout 500 --attempts 1 call telemetry.ingest "$(cat "$BATCH")" >/dev/null 2>&1; then
        answered_ms=$(date +%s%3N)
    fi
    first=$(awk -v t="$ready_ms" '$1 == "ok" && $2 >= t { print $2; exit }' "$flowing")
    [[ -n $first ]] && { [[ -z $answered_ms ]] || ((first < answered_ms)); } && answered_ms=$first
done
wait "$restarter" || fail "deploy/stack restart postgres exited $?: $(cat "$QUAD_HOME/restart-pg.out")"
touch "$QUAD_HOME/flowing.stop"
wait "$flow" || true
[[ -n $answered_ms ]] || fail "no telemetry.ingest answered within 2 s of PostgreSQL accepting connections again (requests since: $(awk -v t="$ready_ms" '$2 >= t' "$flowing" | sort | uniq -c | head -n 5 | tr '\n' ' '))"
took_ms=$((answered_ms - ready_ms))
((took_ms <= 2000)) || fail "the first answer came $took_ms ms after PostgreSQL accepted connections again, more than 2 s"
errors=$(grep -c '^err ' "$flowing" || true)
row=$("$STACK" status | awk '$1 == "postgres"')
[[ $(awk '{print $6}' <<<"$row") == 1 ]] || fail "status does not show one restart of postgres: $row"
grep -q 'restart at' <<<"$row" || fail "status does not show the restart as postgres's last exit: $row"
stored=$(sql quad_telemetry "SELECT count(*) FROM events")
[[ $stored == "$EXPECTED" ]] || fail "after the restart under load quad_telemetry.events holds $stored rows, expected $EXPECTED (none twice)"
ok "restart postgres under load: postmaster $old_pm -> $new_pm; answered $took_ms ms after it accepted connections ($errors requests failed meanwhile); status: $(tr -s ' ' <<<"$row")"

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
