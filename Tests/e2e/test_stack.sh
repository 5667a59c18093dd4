#!/usr/bin/env bash
# End to end, as a user: start the stack with deploy/stack, call the catalog
# with quadctl, scale it up and down, read the status table, stop it, and
# check that no process of the stack is left.
# Runs on its own QUAD_HOME and ports, so a stack already running is not
# touched. QUAD_BUILD_DIR and QUAD_BIN_DIR are passed on to deploy/stack.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
QUAD_PROG=test_stack
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

step=start
fail() {
    printf 'test_stack: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_stack: ok   %s\n' "$*"; }

QUAD_HOME=$(mktemp -d /tmp/quad-e2e.XXXXXX)
# Two brokers (deploy/stack's default): broker 2's frontend is base+10.
QUAD_PORT_BASE=$(quad_free_port_base "${QUAD_TEST_PORT_BASE:-17700}") || fail "no port base with every port free from ${QUAD_TEST_PORT_BASE:-17700}"
export QUAD_HOME QUAD_PORT_BASE
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_BROKERS


cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        printf '\n--- deploy/stack status at the failure\n' >&2
        "$STACK" status >&2 || true
        local log
        for log in "$QUAD_HOME"/logs/*.log; do
            [[ -f $log ]] || continue
            printf -- '--- last lines of %s\n' "$log" >&2
            tail -n 20 "$log" >&2
        done
    fi
    "$STACK" down >/dev/null 2>&1 || true
    local left
    left=$(quad_stack_processes)
    if [[ -n $left ]]; then
        printf 'test_stack: processes left after down, killing them:\n%s\n' "$left" >&2
        awk '{print $1}' <<<"$left" | xargs -r kill -KILL 2>/dev/null || true
        rc=1
    fi
    rm -rf "$QUAD_HOME"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Workers of $1 registered with the broker, from quadctl services.
workers_of() {
    local json
    json=$(quadctl services --json) || fail "quadctl services --json failed (exit $?)"
    python3 -c '
import json, sys
services = {s["name"]: s for s in json.loads(sys.argv[1])["services"]}
print(len(services.get(sys.argv[2], {}).get("workers", [])))
' "$json" "$1" || fail "quadctl services --json printed something that is not the expected JSON: $json"
}

step="deploy/stack up"
# A log left readable by an older launcher: up makes it private.
mkdir -p "$QUAD_HOME/logs"
(umask 022 && printf 'old\n' >"$QUAD_HOME/logs/old.log")
"$STACK" up || fail "deploy/stack up exited $?"
eval "$("$STACK" env)"
command -v quadctl >/dev/null || fail "quadctl is not on PATH after eval \"\$(deploy/stack env)\""
[[ $QUAD_FRONTEND == "tcp://127.0.0.1:$QUAD_PORT_BASE,tcp://127.0.0.1:$((QUAD_PORT_BASE + 10))" ]] ||
    fail "deploy/stack env gave QUAD_FRONTEND=$QUAD_FRONTEND, expected the two brokers' ports $QUAD_PORT_BASE and $((QUAD_PORT_BASE + 10))"
[[ -f $QUAD_HOME/run/broker.pid && -f $QUAD_HOME/run/broker-2.pid && -f $QUAD_HOME/run/catalog.1.pid ]] ||
    fail "expected pid files broker.pid, broker-2.pid and catalog.1.pid in $QUAD_HOME/run, found: $(ls "$QUAD_HOME/run")"
[[ -f $QUAD_HOME/logs/catalog.1.log && -f $QUAD_HOME/db/catalog.db ]] ||
    fail "expected logs/catalog.1.log and db/catalog.db under $QUAD_HOME"
ok "deploy/stack up on port $QUAD_PORT_BASE"

step="internal sockets"
sockets=$QUAD_HOME/run/sock
for e in ${QUAD_BACKEND//,/ } ${QUAD_EVENTS_IN//,/ } ${QUAD_EVENTS_OUT//,/ } ${QUAD_INTERNAL//,/ }; do
    [[ $e == "ipc://$sockets/"* && -S ${e#ipc://} ]] || fail "internal endpoint $e is not an ipc:// socket in $sockets"
done
[[ $(stat -c %a "$sockets") == 700 ]] || fail "$sockets is mode $(stat -c %a "$sockets"), not 700"
for port in $(seq $((QUAD_PORT_BASE + 1)) $((QUAD_PORT_BASE + 4))) $(seq $((QUAD_PORT_BASE + 11)) $((QUAD_PORT_BASE + 14))); do
    quad_port_free "$port" || fail "port $port is open: an internal socket on TCP"
done
if ((EUID == 0)) && id nobody >/dev/null 2>&1; then
    # Another user on the machine cannot reach the backend, where a worker
    # registers and whose requests are trusted.
    why=$(runuser -u nobody -- python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(type(e).__name__)
    sys.exit(0)
sys.exit(1)
' "$(b=${QUAD_BACKEND%%,*}; printf '%s' "${b#ipc://}")") || fail "the user nobody could connect to the backend socket"
    ok "internal sockets are ipc:// in a mode-700 folder; user nobody gets $why on the backend"
else
    ok "internal sockets are ipc:// in a mode-700 folder"
fi

step="no default secrets"
password_file=$QUAD_HOME/keys/admin.password
[[ -s $password_file ]] || fail "deploy/stack up made no $password_file"
[[ $(stat -c %a "$password_file") == 600 ]] || fail "$password_file is mode $(stat -c %a "$password_file"), not 600"
[[ $QUAD_ADMIN_PASSWORD_FILE == "$password_file" ]] || fail "deploy/stack env exports QUAD_ADMIN_PASSWORD_FILE=${QUAD_ADMIN_PASSWORD_FILE:-}, not $password_file"
[[ $(<"$password_file") != quad-admin-pass ]] || fail "the admin's password is the old published default"
# No command line of any process holds it (read from the file here, never
# passed as an argument, so this check cannot find itself).
holders=$(python3 - "$password_file" <<'PY'
import os, sys
secret = open(sys.argv[1], "rb").read().strip()
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            if secret in open(f"/proc/{entry}/cmdline", "rb").read():
                print(entry)
        except OSError:
            pass
PY
) || fail "could not read the processes' command lines"
[[ -z $holders ]] || fail "the admin's password is on the command line of: $(ps -o pid=,comm= -p "${holders//$'\n'/,}")"
profile=$(quadctl --as admin@quad.campus call accounts.profile.get) || fail "the admin cannot sign in with the password in $password_file: $profile"
python3 -c 'import json, sys; assert json.loads(sys.argv[1])["role"] == "admin"' "$profile" || fail "admin@quad.campus is not admin: $profile"
[[ $(stat -c %a "$QUAD_HOME/logs/old.log") == 600 ]] || fail "a log made before up is still mode $(stat -c %a "$QUAD_HOME/logs/old.log")"
for d in logs db keys run; do
    [[ $(stat -c %a "$QUAD_HOME/$d") == 700 ]] || fail "$QUAD_HOME/$d is mode $(stat -c %a "$QUAD_HOME/$d"), not 700"
done
open_files=$(find "$QUAD_HOME/logs" "$QUAD_HOME/db" "$QUAD_HOME/keys" "$QUAD_HOME/run" ! -type l ! -type s -perm /077 -printf '%m %p\n')
[[ -z $open_files ]] || fail "files under $QUAD_HOME that others may read: $open_files"
if ((EUID == 0)) && id nobody >/dev/null 2>&1; then
    for f in logs/broker.log logs/accounts.1.log db/accounts.db keys/admin.password keys/accounts.key keys/broker.key; do
        [[ -e $QUAD_HOME/$f ]] || fail "expected $QUAD_HOME/$f"
        runuser -u nobody -- cat "$QUAD_HOME/$f" >/dev/null 2>&1 && fail "the user nobody can read $QUAD_HOME/$f"
    done
    runuser -u nobody -- ls "$QUAD_HOME/logs" >/dev/null 2>&1 && fail "the user nobody can list $QUAD_HOME/logs"
    ok "admin password in a mode-600 file, on no command line, signs in; nobody reads no log, database or key"
else
    ok "admin password in a mode-600 file, on no command line, signs in"
fi

step="second up"
out=$("$STACK" up) || fail "a second deploy/stack up exited $?"
grep -qi "already running" <<<"$out" || fail "a second up did not say the stack is running: $out"
ok "a second up says the stack is already running"

step="catalog.products.list"
reply=$(quadctl call catalog.products.list '{"limit":5}') || fail "quadctl call catalog.products.list exited $?: $reply"
count=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["products"]))' "$reply") ||
    fail "the reply has no products list: $reply"
[[ $count == 5 ]] || fail "expected 5 products, got $count: $reply"
ok "quadctl call catalog.products.list '{\"limit\":5}' returns 5 products"

step="health"
health=$(quadctl call catalog.sys.health) || fail "catalog.sys.health exited $?: $health"
python3 -c 'import json, sys; assert json.loads(sys.argv[1])["status"] == "ok"' "$health" ||
    fail "catalog.sys.health is not ok: $health"
ok "catalog.sys.health is ok"

step="scale catalog 2"
"$STACK" scale catalog 2 || fail "deploy/stack scale catalog 2 exited $?"
n=$(workers_of catalog) || exit 1
[[ $n == 2 ]] || fail "after scale catalog 2, quadctl services shows $n catalog worker(s): $(quadctl services --json)"
[[ -f $QUAD_HOME/run/catalog.2.pid ]] || fail "no pid file catalog.2.pid after scale catalog 2"
# Both workers answer: enough calls reach each of them.
for _ in $(seq 6); do quadctl call catalog.products.list '{"limit":1}' >/dev/null || fail "a call failed with 2 workers"; done
ok "deploy/stack scale catalog 2: quadctl services shows 2 catalog workers"

step="status"
status=$("$STACK" status) || fail "deploy/stack status exited $?"
printf '%s\n' "$status"
grep -q '^SERVICE ' <<<"$status" || fail "status has no header row"
grep -q '^broker ' <<<"$status" && grep -q '^broker-2 ' <<<"$status" || fail "status has no rows for broker and broker-2"
grep -q 'catalog/1 ' <<<"$status" && grep -q 'catalog/2 ' <<<"$status" ||
    fail "status does not list catalog/1 and catalog/2"
ok "deploy/stack status prints a table with the broker and both catalog workers"

step="scale catalog 1"
pid2=$(<"$QUAD_HOME/run/catalog.2.pid")
"$STACK" scale catalog 1 || fail "deploy/stack scale catalog 1 exited $?"
n=$(workers_of catalog) || exit 1
[[ $n == 1 ]] || fail "after scale catalog 1, quadctl services shows $n catalog worker(s): $(quadctl services --json)"
quad_alive "$pid2" && fail "catalog/2 (pid $pid2) still runs after scale catalog 1"
[[ ! -f $QUAD_HOME/run/catalog.2.pid ]] || fail "catalog.2.pid is still there after scale catalog 1"
quadctl call catalog.products.list '{"limit":5}' >/dev/null || fail "the catalog does not answer after scaling down"
ok "deploy/stack scale catalog 1: one worker left, catalog/2 stopped, the catalog still answers"

step="restart catalog"
pid1=$(<"$QUAD_HOME/run/catalog.1.pid")
"$STACK" restart catalog || fail "deploy/stack restart catalog exited $?"
new1=$(<"$QUAD_HOME/run/catalog.1.pid")
[[ $new1 != "$pid1" ]] && quad_alive "$new1" || fail "catalog/1 was not restarted (pid $pid1, now $new1)"
quad_alive "$pid1" && fail "the old catalog/1 (pid $pid1) still runs after restart"
quadctl call catalog.products.list '{"limit":5}' >/dev/null || fail "the catalog does not answer after restart"
ok "deploy/stack restart catalog: a new catalog/1 answers"

step="kill catalog"
"$STACK" scale catalog 2 >/dev/null || fail "deploy/stack scale catalog 2 (again) exited $?"
pid2=$(<"$QUAD_HOME/run/catalog.2.pid")
"$STACK" kill catalog || fail "deploy/stack kill catalog exited $?"
quad_alive "$pid2" && fail "catalog/2 (pid $pid2) still runs after kill"
[[ ! -f $QUAD_HOME/run/catalog.2.pid ]] || fail "catalog.2.pid is still there after kill"
quad_alive "$new1" || fail "kill catalog killed catalog/1 too"
# Nothing brings it back, a worker supervisor neither (it restarts after 2 s).
sleep 3
[[ ! -f $QUAD_HOME/run/catalog.2.pid ]] || fail "catalog/2 came back after kill (pid file catalog.2.pid)"
pgrep -f -- "catalog/2 .*$QUAD_HOME/" >/dev/null && fail "a catalog/2 process runs again after kill"
quadctl call catalog.products.list '{"limit":5}' >/dev/null || fail "the catalog does not answer after one worker was killed"
ok "deploy/stack kill catalog: catalog/2 is gone for good, catalog/1 still answers"

step="a changed admin password survives up"
old=$(<"$password_file")
new="changed-$RANDOM-admin-pass"
body=$(python3 -c 'import json, sys; print(json.dumps({"password": sys.argv[2], "current_password": open(sys.argv[1]).read().strip()}))' "$password_file" "$new")
quadctl --as admin@quad.campus call accounts.profile.update "$body" >/dev/null || fail "the admin could not change its password"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
"$STACK" up >/dev/null || fail "deploy/stack up after the password change exited $?"
[[ $(<"$password_file") == "$old" ]] || fail "up replaced $password_file"
QUAD_ADMIN_PASSWORD_FILE=/nonexistent QUAD_PASSWORD=$new quadctl --as admin@quad.campus call accounts.profile.get >/dev/null ||
    fail "after down and up the admin's changed password no longer signs in"
QUAD_ADMIN_PASSWORD_FILE=/nonexistent QUAD_PASSWORD=$old quadctl --as admin@quad.campus call accounts.profile.get >/dev/null 2>&1 &&
    fail "after down and up the admin's first password signs in again: up reset it"
ok "a second up after a password change keeps the changed password"

step="down"
pids=$(cat "$QUAD_HOME"/run/*.pid)
"$STACK" down || fail "deploy/stack down exited $?"
for pid in $pids; do quad_alive "$pid" && fail "pid $pid still runs after down"; done
left=$(quad_stack_processes)
[[ -z $left ]] || fail "processes of the stack remain after down: $left"
[[ -z $(ls "$QUAD_HOME"/run/*.pid 2>/dev/null) ]] || fail "pid files remain after down: $(ls "$QUAD_HOME/run")"
for port in $(seq "$QUAD_PORT_BASE" $((QUAD_PORT_BASE + 4))); do
    quad_port_free "$port" || fail "port $port is still open after down"
done
rc=0
"$STACK" status >/dev/null || rc=$?
[[ $rc == 3 ]] || fail "status after down exited $rc, expected 3 (not running)"
ok "deploy/stack down: no process, pid file or port of the stack remains"

step="finished"
printf 'test_stack: all checks passed\n'
