#!/usr/bin/env bash
# End to end, as a user: every process of deploy/stack runs under supervisord.
#   1. up: supervisord runs, its socket in a mode-700 folder under QUAD_HOME;
#      status shows every program with 0 restarts;
#   2. deploy/stack kill broker: SIGKILL, supervisord starts a new broker, a
#      request is answered again and the workers register again; status
#      shows the broker's restart and its last exit (SIGKILL);
#   3. a worker SIGKILLed from outside comes back (new pid, registered);
#      deploy/stack kill SERVICE still leaves it down;
#   4. up --postgres: deploy/stack restart postgres gives a new postmaster
#      that accepts connections; down leaves no process (supervisord,
#      PostgreSQL, workers), no socket;
#   5. as root, up --hosts: the broker runs under the same supervisord in its
#      host's namespace, and comes back there after kill broker.
# Runs on its own QUAD_HOME and ports (the first port base with every port
# free from QUAD_TEST_PORT_BASE, default 20100). QUAD_BUILD_DIR and QUAD_BIN_DIR
# are passed on to deploy/stack.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
QUAD_PROG=test_supervise
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

step=start
fail() {
    printf 'test_supervise: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_supervise: ok   %s (%ss)\n' "$*" "$SECONDS"; }

command -v supervisord >/dev/null || fail "supervisord is not installed (deploy/lib.sh quad_install_deps installs the supervisor package)"

QUAD_HOME=$(mktemp -d /tmp/quad-sup-e2e.XXXXXX)
chmod 755 "$QUAD_HOME"  # PostgreSQL (user postgres) keeps its data in it
# Two brokers (deploy/stack's default): base..base+4 and base+10..base+14.
QUAD_PORT_BASE=$(quad_free_port_base "${QUAD_TEST_PORT_BASE:-20100}") || fail "no port base with every port free from ${QUAD_TEST_PORT_BASE:-20100}"
export QUAD_HOME QUAD_PORT_BASE
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_BROKER_KEY QUAD_TOKEN
for v in $(compgen -v | grep -E "^QUAD_[A-Z_]+_DB$"); do unset "$v"; done  # every service's store


cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        printf '\n--- deploy/stack status at the failure\n' >&2
        "$STACK" status >&2 || true
        local log
        for log in "$QUAD_HOME"/logs/supervisord.log "$QUAD_HOME"/logs/broker.log "$QUAD_HOME"/logs/catalog.*.log; do
            [[ -f $log ]] || continue
            printf -- '--- last lines of %s\n' "$log" >&2
            tail -n 15 "$log" >&2
        done
    fi
    "$STACK" down >/dev/null 2>&1 || true
    local left
    left=$(quad_stack_processes)
    if [[ -n $left ]]; then
        printf 'test_supervise: processes left after down, killing them:\n%s\n' "$left" >&2
        awk '{print $1}' <<<"$left" | xargs -r kill -KILL 2>/dev/null || true
        rc=1
    fi
    rm -rf "$QUAD_HOME"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The status line of instance $1 (broker, postgres, catalog/1 ...).
status_row() {
    "$STACK" status | awk -v want="$1" '{ for (i = 3; i >= 1; i--) if ($i == want) { print; exit } }'
}
# The RESTARTS column of instance $1: the third after INSTANCE (PID, UPTIME).
restarts_of() {
    "$STACK" status | awk -v want="$1" '{ for (i = 3; i >= 1; i--) if ($i == want) { print $(i + 3); exit } }'
}

# Answered within $1 seconds: catalog.products.list.
answered_within() {
    local deadline=$((SECONDS + $1))
    while ((SECONDS < deadline)); do
        quadctl --timeout 1500 --attempts 1 call catalog.products.list '{"limit":1}' >/dev/null 2>&1 && return 0
        sleep 0.3
    done
    return 1
}

# Workers of $1 registered with the broker, as "instance pid" lines.
registered() {
    local json
    json=$(QUAD_TOKEN= timeout 5 quadctl --internal --timeout 1500 --attempts 1 services --json 2>/dev/null) || return 0
    python3 -c '
import json, sys
for s in json.loads(sys.argv[1])["services"]:
    if s["name"] == sys.argv[2]:
        for w in s["workers"]:
            print(w["instance"], w["pid"])
' "$json" "$1"
}

step="up"
"$STACK" up >"$QUAD_HOME/up.log" 2>&1 || { cat "$QUAD_HOME/up.log" >&2; fail "deploy/stack up exited $?"; }
eval "$("$STACK" env)"
sup=$QUAD_HOME/run/supervisor
[[ -S $sup/supervisor.sock ]] || fail "no supervisord socket $sup/supervisor.sock"
[[ $(stat -c %a "$sup") == 700 ]] || fail "$sup is mode $(stat -c %a "$sup"), not 700"
spid=$(<"$sup/supervisord.pid")
quad_alive "$spid" || fail "supervisord (pid $spid) is not running"
broker=$(<"$QUAD_HOME/run/broker.pid")
[[ $(awk '{print $4}' "/proc/$broker/stat") == "$spid" ]] || fail "the broker (pid $broker) is not a child of supervisord (pid $spid)"
catalog=$(<"$QUAD_HOME/run/catalog.1.pid")
[[ $(awk '{print $4}' "/proc/$catalog/stat") == "$spid" ]] || fail "catalog/1 (pid $catalog) is not a child of supervisord (pid $spid)"
grep -rq "/etc" "$sup/supervisord.conf" && fail "supervisord's config names /etc: $(grep /etc "$sup/supervisord.conf")"
status=$("$STACK" status) || fail "deploy/stack status exited $?"
printf '%s\n' "$status"
grep -q '^SERVICE .*RESTARTS  *LAST-EXIT' <<<"$status" || fail "status has no RESTARTS and LAST-EXIT columns"
[[ $(restarts_of broker) == 0 ]] || fail "the broker shows $(restarts_of broker) restarts right after up"
status_row catalog/1 | grep -q " $catalog .* 0 .*idle$" || fail "status does not show catalog/1 with pid $catalog, 0 restarts, idle: $(status_row catalog/1)"
answered_within 10 || fail "the catalog does not answer after up"
ok "up: broker and workers are children of supervisord (pid $spid), socket in a mode-700 folder, 0 restarts"

step="kill broker"
out=$("$STACK" kill broker) || fail "deploy/stack kill broker exited $?: $out"
printf '%s\n' "$out"
quad_alive "$broker" && fail "the old broker (pid $broker) still runs"
answered_within 60 || fail "no request answered within 60 s of deploy/stack kill broker"
new_broker=$(<"$QUAD_HOME/run/broker.pid")
[[ $new_broker != "$broker" ]] && quad_alive "$new_broker" || fail "no new broker (pid file says $new_broker, was $broker)"
deadline=$((SECONDS + 60))
until [[ $(registered accounts | wc -l) == 2 && $(registered catalog | wc -l) == 1 ]]; do
    ((SECONDS < deadline)) || fail "the workers did not register with the new broker within 60 s: accounts $(registered accounts | wc -l), catalog $(registered catalog | wc -l)"
    sleep 0.5
done
# supervisord calls it running once it has stayed up startsecs (2 s).
deadline=$((SECONDS + 30))
until row=$(status_row broker) && grep -q 'running$' <<<"$row"; do
    ((SECONDS < deadline)) || fail "status does not show the broker running 30 s after the kill: $row"
    sleep 0.5
done
[[ $(restarts_of broker) == 1 ]] || fail "status shows $(restarts_of broker) restarts of the broker, expected 1: $row"
grep -q 'SIGKILL' <<<"$row" || fail "status does not show the broker's last exit as SIGKILL: $row"
ok "kill broker: pid $broker -> $new_broker, a request answered and every worker registered again; status: $row"

step="a worker killed from outside"
kill -KILL "$catalog"
deadline=$((SECONDS + 60))
until [[ -s $QUAD_HOME/run/catalog.1.pid && $(<"$QUAD_HOME/run/catalog.1.pid") != "$catalog" ]] && registered catalog | grep -q '^catalog/1 '; do
    ((SECONDS < deadline)) || fail "catalog/1 was not restarted and registered within 60 s of a SIGKILL"
    sleep 0.3
done
answered_within 30 || fail "the catalog does not answer after its worker came back"
[[ $(restarts_of catalog/1) == 1 ]] || fail "status shows $(restarts_of catalog/1) restarts of catalog/1, expected 1: $(status_row catalog/1)"
ok "kill -9 of catalog/1: supervisord started pid $(<"$QUAD_HOME/run/catalog.1.pid"); status: $(status_row catalog/1)"

step="deploy/stack kill SERVICE stays down"
"$STACK" scale catalog 2 >/dev/null || fail "scale catalog 2 exited $?"
pid2=$(<"$QUAD_HOME/run/catalog.2.pid")
"$STACK" kill catalog >/dev/null || fail "deploy/stack kill catalog exited $?"
quad_alive "$pid2" && fail "catalog/2 (pid $pid2) still runs after kill"
sleep 4
[[ ! -f $QUAD_HOME/run/catalog.2.pid ]] || fail "catalog/2 came back after deploy/stack kill"
registered catalog | grep -q '^catalog/2 ' && fail "the broker lists catalog/2 again after deploy/stack kill"
grep -q "stopped: catalog-2 (terminated by SIGKILL)" "$QUAD_HOME/logs/supervisord.log" ||
    fail "supervisord's log does not show catalog-2 stopped by SIGKILL: $(grep catalog-2 "$QUAD_HOME/logs/supervisord.log")"
ok "deploy/stack kill catalog: catalog/2 SIGKILLed and not restarted"

step="down"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
quad_alive "$spid" && fail "supervisord (pid $spid) still runs after down"
left=$(quad_stack_processes)
[[ -z $left ]] || fail "processes of the stack remain after down: $left"
[[ ! -S $sup/supervisor.sock ]] || fail "supervisord's socket is left after down"
ok "down: supervisord and everything under it stopped"

if pgbin=$(quad_pg_bindir); then
    step="up --postgres"
    "$STACK" up --postgres >"$QUAD_HOME/up-pg.log" 2>&1 || { cat "$QUAD_HOME/up-pg.log" >&2; fail "deploy/stack up --postgres exited $?"; }
    eval "$("$STACK" env)"
    pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
    spid=$(<"$sup/supervisord.pid")
    [[ $(awk '{print $4}' "/proc/$pm/stat") == "$spid" ]] || fail "PostgreSQL (pid $pm) is not a child of supervisord (pid $spid)"
    status_row postgres | grep -q running || fail "status has no running postgres row: $("$STACK" status)"
    ok "up --postgres: PostgreSQL (pid $pm) runs under supervisord"

    step="restart postgres"
    "$STACK" restart postgres || fail "deploy/stack restart postgres exited $?"
    new_pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
    [[ $new_pm != "$pm" ]] && quad_alive "$new_pm" || fail "no new postmaster after restart postgres (was $pm, now $new_pm)"
    port=$(sed -n 's/^PG_PORT=//p' "$QUAD_HOME/run/pg.env")
    runuser -u postgres -- "$pgbin/pg_isready" -q -h "$QUAD_HOME/pg" -p "$port" 2>/dev/null || "$pgbin/pg_isready" -q -h "$QUAD_HOME/pg" -p "$port" ||
        fail "PostgreSQL does not accept connections after restart postgres"
    ok "restart postgres: postmaster $pm -> $new_pm, accepting connections"

    step="down after --postgres"
    "$STACK" down >/dev/null || fail "deploy/stack down exited $?"
    quad_alive "$new_pm" && fail "PostgreSQL (pid $new_pm) still runs after down"
    left=$(quad_stack_processes)
    [[ -z $left ]] || fail "processes of the stack remain after down: $left"
    ok "down: PostgreSQL stopped with the rest"
else
    printf 'test_supervise: skip --postgres: no PostgreSQL server installed\n'
fi

if ((EUID == 0)) && command -v ip >/dev/null && quad_pg_bindir >/dev/null; then
    # On hosts: the same supervisord, each program in its host's namespace.
    step="up --hosts"
    "$STACK" up --hosts >"$QUAD_HOME/up-hosts.log" 2>&1 || { cat "$QUAD_HOME/up-hosts.log" >&2; fail "deploy/stack up --hosts exited $?"; }
    eval "$("$STACK" env)"
    # shellcheck disable=SC1091
    source "$QUAD_HOME/run/hosts.env"
    spid=$(<"$sup/supervisord.pid")
    broker=$(<"$QUAD_HOME/run/broker.pid")
    [[ $(awk '{print $4}' "/proc/$broker/stat") == "$spid" ]] || fail "on hosts, the broker (pid $broker) is not a child of supervisord (pid $spid)"
    [[ $(ip netns identify "$broker") == "$HOSTS_PREFIX-broker" ]] || fail "the broker does not run in namespace $HOSTS_PREFIX-broker"
    answered_within 30 || fail "the catalog does not answer on hosts"
    ok "up --hosts: the broker (pid $broker) runs under supervisord in namespace $HOSTS_PREFIX-broker"

    step="kill broker on hosts"
    "$STACK" kill broker >/dev/null || fail "deploy/stack kill broker exited $?"
    answered_within 60 || fail "no request answered within 60 s of deploy/stack kill broker on hosts"
    new_broker=$(<"$QUAD_HOME/run/broker.pid")
    [[ $new_broker != "$broker" && $(ip netns identify "$new_broker") == "$HOSTS_PREFIX-broker" ]] ||
        fail "the new broker (pid $new_broker) is not a new process on the broker's host"
    [[ $(restarts_of broker) == 1 ]] || fail "status shows $(restarts_of broker) restarts of the broker on hosts, expected 1"
    ok "kill broker on hosts: pid $broker -> $new_broker, answered again"

    step="postgres on hosts"
    # PostgreSQL on host pg is supervisord's program postgres, in pg's namespace.
    pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
    [[ $(awk '{print $4}' "/proc/$pm/stat") == "$spid" ]] || fail "on hosts, PostgreSQL (pid $pm) is not a child of supervisord (pid $spid)"
    [[ $(ip netns identify "$pm") == "$HOSTS_PREFIX-pg" ]] || fail "PostgreSQL (pid $pm) does not run in namespace $HOSTS_PREFIX-pg"
    [[ $(stat -c %U "/proc/$pm") == postgres ]] || fail "PostgreSQL (pid $pm) runs as $(stat -c %U "/proc/$pm"), not postgres"
    status_row postgres | grep -q running || fail "status has no running postgres row on hosts: $("$STACK" status)"
    "$STACK" restart postgres >/dev/null || fail "deploy/stack restart postgres on hosts exited $?"
    new_pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
    [[ $new_pm != "$pm" && $(ip netns identify "$new_pm") == "$HOSTS_PREFIX-pg" ]] || fail "no new postmaster on host pg after restart postgres (was $pm, now $new_pm)"
    [[ $(restarts_of postgres) == 1 ]] || fail "status shows $(restarts_of postgres) restarts of postgres on hosts, expected 1: $(status_row postgres)"
    answered_within 30 || fail "the catalog (on PostgreSQL on hosts) does not answer after restart postgres"
    ok "postgres on hosts: pid $pm under supervisord in $HOSTS_PREFIX-pg as user postgres; restart postgres -> $new_pm, 1 restart in status, answered again"

    step="down after --hosts"
    "$STACK" down >/dev/null || fail "deploy/stack down exited $?"
    ip netns list | grep -q "^$HOSTS_PREFIX-" && fail "namespaces left after down: $(ip netns list | grep "^$HOSTS_PREFIX-")"
    left=$(quad_stack_processes)
    [[ -z $left ]] || fail "processes of the stack remain after down: $left"
    ok "down: supervisord, the hosts and everything on them are gone"
else
    printf 'test_supervise: skip --hosts: needs root, ip and PostgreSQL\n'
fi

step="finished"
printf 'test_supervise: all checks passed in %s s\n' "$SECONDS"
