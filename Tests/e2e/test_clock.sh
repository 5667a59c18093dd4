#!/usr/bin/env bash
# End to end, as a user: the demo clock (deploy/stack clock, docs/operations.md "A demo
# clock").
#   1. on a stack started without --demo, 'clock +1h' is refused (exit 1,
#      naming up --demo) and nothing is restarted;
#   2. up --demo: a student (quadctl register, login) holds a parking spot
#      (10 minutes by default) and rents a book for 3 days;
#   3. clock +1h: every broker and worker runs again, under libfaketime at
#      +3600 s (their environment says so; status shows the offset);
#      deploy/stack env's quad-edge and quadctl run on it (quad-edge sees its
#      arguments); the session signed before the move has expired (401), a
#      new login works, and the check-in is refused with 409: the hold ran out;
#   4. clock +5d (cumulative: +5d1h): the rental comes back late
#      (late_days > 0, a late charge);
#   5. deploy/stack kill SERVICE on the moved clock leaves no process behind
#      (the stack's processes before and after, by pid: only the killed one
#      is gone, nothing new, no faketime(1) wrapper) and no semaphore or
#      shared memory of libfaketime for it in /dev/shm;
#   6. clock reset: the offset is 0 again, processes run without libfaketime;
#      down leaves no process of the stack.
# Runs on its own QUAD_HOME and a free port base (from QUAD_TEST_PORT_BASE,
# default 35000; every port of the stack free: frontends, dashboard, image
# servers, /metrics). QUAD_BUILD_DIR and QUAD_BIN_DIR are passed on to
# deploy/stack.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
QUAD_PROG=test_clock
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"
# shellcheck source=deploy/clock.sh
source "$ROOT/deploy/clock.sh"

step=start
fail() {
    printf 'test_clock: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_clock: ok   %s (%ss)\n' "$*" "$SECONDS"; }
# grep -q for a pipe: reads all its input (grep -q stops at the first match,
# and the writer's SIGPIPE would fail the pipeline under pipefail).
has() { grep -c "$@" >/dev/null; }

command -v supervisord >/dev/null || fail "supervisord is not installed (deploy/lib.sh quad_install_deps installs the supervisor package)"
clock_lib >/dev/null || fail "libfaketime is not installed (apt-get install faketime; deploy/lib.sh quad_install_deps installs it)"

QUAD_HOME=$(mktemp -d /tmp/quad-clock-e2e.XXXXXX)
planted=()  # stale libfaketime pairs this test made (removed at the end)
# Every port the stack takes, from its base: broker K's frontend at
# base+10*(K-1), the dashboard and image servers at base+80..86, /metrics
# from base+100 (brokers, then base+110+20*I+N-1 for worker N of the I-th
# service): 300 ports cover them all. A port some connection holds as its
# local end is not free either; and none is taken from the kernel's range of
# ephemeral ports (ip_local_port_range, 32768 to 60999 by default), where any
# outgoing connection on the machine (a thousand phones of another stack)
# may take one between the choice and the bind: a base in it moves above it.
held_ports() { command -v ss >/dev/null && ss -Htan 2>/dev/null | awk '$1 != "TIME-WAIT" { n = split($4, a, ":"); print a[n] }' | sort -u; return 0; }
pick_base() {
    local base=$1 held k ok tries low=32768 high=60999
    read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    for ((tries = 0; tries < 20; tries++)); do
        if ((base + 299 >= low && base <= high)); then
            base=$((high + 1))
        fi
        ((base + 299 <= 65535)) || return 1
        if declare -F quad_free_port_base >/dev/null; then
            base=$(quad_free_port_base "$base" 2) || return 1
        else
            base=$(quad_free_port "$base" 300 300) || return 1
        fi
        held=$(held_ports)
        ok=1
        for ((k = 0; k < 300; k++)); do
            grep -qx $((base + k)) <<<"$held" && { ok=0; break; }
        done
        ((ok)) && { printf '%s\n' "$base"; return 0; }
        base=$((base + 300))
    done
    return 1
}
QUAD_PORT_BASE=$(pick_base "${QUAD_TEST_PORT_BASE:-35000}") || fail "no 300 free ports from ${QUAD_TEST_PORT_BASE:-35000}"
export QUAD_HOME QUAD_PORT_BASE
export QUAD_BROKERS=2
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_BROKER_KEY QUAD_TOKEN QUAD_METRICS_BASE
unset QUAD_ANALYTICS_HTTP QUAD_CATALOG_IMAGES QUAD_RESERVATIONS_IMAGES_HTTP
unset LD_PRELOAD FAKETIME FAKETIME_DONT_FAKE_MONOTONIC FAKETIME_NO_CACHE FAKETIME_SHARED
for v in $(compgen -v | grep -E "^QUAD_[A-Z_]+_(DB|WORKERS)$"); do unset "$v"; done


cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        printf '\n--- deploy/stack status at the failure\n' >&2
        "$STACK" status >&2 || true
        local log
        for log in "$QUAD_HOME"/clock-*.log "$QUAD_HOME"/logs/supervisord.log "$QUAD_HOME"/logs/reservations.*.log "$QUAD_HOME"/logs/orders.*.log; do
            [[ -f $log ]] || continue
            printf -- '--- last lines of %s\n' "$log" >&2
            tail -n 15 "$log" >&2
        done
    fi
    "$STACK" down >/dev/null 2>&1 || true
    rm -f "${planted[@]}"
    local left
    left=$(quad_stack_processes)
    if [[ -n $left ]]; then
        printf 'test_clock: processes left after down, killing them:\n%s\n' "$left" >&2
        awk '{print $1}' <<<"$left" | xargs -r kill -KILL 2>/dev/null || true
        rc=1
    fi
    rm -rf "$QUAD_HOME"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The pids of every broker and worker, from the stack's pid files.
program_pids() {
    local f
    for f in "$QUAD_HOME"/run/broker*.pid "$QUAD_HOME"/run/*.*.pid; do
        [[ -s $f ]] && quad_alive "$(<"$f")" && printf '%s %s\n' "$(basename "$f" .pid)" "$(<"$f")"
    done
    return 0
}

# Fails unless every broker and worker runs with FAKETIME=$1 and libfaketime
# preloaded ($1 empty: without either).
expect_clock() {
    local want=$1 name pid env n=0
    while read -r name pid; do
        env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
        n=$((n + 1))
        if [[ -n $want ]]; then
            grep -qx "FAKETIME=$want" <<<"$env" || fail "$name (pid $pid) does not run with FAKETIME=$want: $(grep '^FAKETIME=' <<<"$env" || printf 'no FAKETIME')"
            grep -q '^LD_PRELOAD=.*libfaketime' <<<"$env" || fail "$name (pid $pid) does not preload libfaketime"
            grep -q 'libfaketime' "/proc/$pid/maps" || fail "$name (pid $pid) has not loaded libfaketime"
        else
            grep -q '^FAKETIME=' <<<"$env" && fail "$name (pid $pid) still runs with $(grep '^FAKETIME=' <<<"$env")"
            grep -q 'libfaketime' "/proc/$pid/maps" && fail "$name (pid $pid) still has libfaketime loaded"
        fi
    done < <(program_pids)
    ((n >= 10)) || fail "only $n brokers and workers found running: $(program_pids | tr '\n' ' ')"
}

# quadctl's JSON answer $1: field $2 (a Python expression on `b`).
field() { python3 -c 'import json, sys; b = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

login() {
    local out
    out=$(quadctl login "$EMAIL" 2>&1) || fail "quadctl login $EMAIL exited $?: $out"
    eval "$(grep '^export QUAD_TOKEN=' <<<"$out")"
    [[ -n ${QUAD_TOKEN:-} ]] || fail "quadctl login printed no token: $out"
}

# deploy/stack clock ARGS, its output in $QUAD_HOME/clock-N.log; fails when it does.
moves=0
move_clock() {
    moves=$((moves + 1))
    local t0=$SECONDS
    "$STACK" clock "$@" >"$QUAD_HOME/clock-$moves.log" 2>&1 || fail "deploy/stack clock $* exited $?: $(tail -n 20 "$QUAD_HOME/clock-$moves.log")"
    printf 'test_clock:      deploy/stack clock %s took %s s\n' "$*" $((SECONDS - t0))
}

# deploy/stack up "$@"; again on another port base (three tries) when one of
# its ports was taken between the choice and the bind (an outgoing
# connection of anything on the machine may take an ephemeral port).
stack_up() {
    local try rc
    for ((try = 1; try <= 3; try++)); do
        rc=0
        "$STACK" up "$@" 2>&1 | tee "$QUAD_HOME/up-try.log" || rc=$?
        ((rc == 0)) && return 0
        grep -q -e 'Address already in use' -e ' in use' "$QUAD_HOME/up-try.log" || return "$rc"
        "$STACK" down >/dev/null 2>&1 || true
        QUAD_PORT_BASE=$(pick_base $((QUAD_PORT_BASE + 300))) || return "$rc"
        printf 'test_clock:      a port was taken meanwhile; up again on port base %s\n' "$QUAD_PORT_BASE" >&2
    done
    return "$rc"
}

step="--help"
"$STACK" --help | has 'clock +DURATION' || fail "deploy/stack --help does not document clock"

step="refused on a stack that is not a demo stack"
stack_up >"$QUAD_HOME/up.log" 2>&1 || { rc=$?; cat "$QUAD_HOME/up.log" >&2; fail "deploy/stack up exited $rc"; }
broker=$(<"$QUAD_HOME/run/broker.pid")
set +e
out=$("$STACK" clock +1h 2>&1)
rc=$?
set -e
((rc == 1)) || fail "clock +1h on a stack not started with --demo exited $rc, not 1: $out"
grep -q 'not a demo or test stack' <<<"$out" && grep -q 'up --demo' <<<"$out" || fail "the refusal does not say how to mark a demo stack: $out"
[[ $(<"$QUAD_HOME/run/broker.pid") == "$broker" ]] && quad_alive "$broker" || fail "the broker was restarted by a refused clock move"
[[ ! -e $QUAD_HOME/run/clock/campus ]] || fail "a refused clock move wrote $QUAD_HOME/run/clock/campus"
"$STACK" clock | has 'real time (not a demo stack)' || fail "deploy/stack clock does not show real time: $("$STACK" clock)"
"$STACK" status | has '^Campus clock: real time' || fail "status does not show the campus clock"
expect_clock ""
ok "clock +1h refused on a stack not marked demo (exit 1): $(head -n 1 <<<"$out")"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"

step="up --demo"
stack_up --demo >"$QUAD_HOME/up-demo.log" 2>&1 || { rc=$?; cat "$QUAD_HOME/up-demo.log" >&2; fail "deploy/stack up --demo exited $rc"; }
grep -qx 'DEMO=1' "$QUAD_HOME/run/endpoints" || fail "up --demo did not mark the stack in $QUAD_HOME/run/endpoints"
eval "$("$STACK" env)"
declare -F quad_clock >/dev/null && fail "deploy/stack env on real time defined quad_clock"
export QUAD_PASSWORD='correct horse battery'
EMAIL=clock-$$@uni.edu
out=$(quadctl register "$EMAIL" "Clock Tester" 4 Study 2>&1) || fail "quadctl register exited $?: $out"
login
old_token=$QUAD_TOKEN
out=$(quadctl call reservations.hold '{"destination":"ML"}' 2>&1) || fail "reservations.hold exited $?: $out"
hold_seconds=$(field "$out" 'b["hold_seconds"]')
spot=$(field "$out" 'b["reservation"]["spot"]')
((hold_seconds < 3600)) || fail "a hold lasts $hold_seconds s: clock +1h would not expire it"
out=$(quadctl call orders.place '{"source":"buy_now","product":"p-0014","mode":"rent","days":3}' 2>&1) || fail "orders.place (rent 3 days) exited $?: $out"
order=$(field "$out" 'b["order"]')
[[ $(field "$out" 'b["status"]') == confirmed ]] || fail "the rental was not confirmed: $out"
ok "up --demo: $EMAIL holds $spot for $hold_seconds s and rents p-0014 for 3 days (order $order)"

step="clock +1h"
move_clock +1h
expect_clock +3600s
"$STACK" clock | has '+1h (3600 s ahead)' || fail "deploy/stack clock does not show +1h: $("$STACK" clock)"
"$STACK" status | has '^Campus clock: +1h' || fail "status does not show the offset +1h: $("$STACK" status | head -n 3)"
# A shell's quad-edge and quadctl on the campus clock (deploy/stack env's
# functions); the shell's other commands keep the real clock.
eval "$("$STACK" env)"
declare -F quad_clock quad-edge quadctl >/dev/null || fail "deploy/stack env defined no quad_clock, quad-edge and quadctl functions: $("$STACK" env | tail -n 4)"
declare -f quad_clock | has 'FAKETIME=+3600s' || fail "quad_clock does not run on +3600s: $(declare -f quad_clock)"
real_now=$(date -u +%s)
(($(quad_clock date -u +%s) >= real_now + 3590)) || fail "quad_clock date does not run an hour ahead"
(($(date -u +%s) < real_now + 60)) || fail "the shell's own date moved with the campus clock"
# A Swift program started by that function sees its arguments (under
# libfaketime alone, quad-edge --help sees none and starts a campus instead:
# deploy/clock.sh).
quad-edge --help >"$QUAD_HOME/edge-help.out" 2>&1 &
edge=$!
deadline=$((SECONDS + 30))
while quad_alive "$edge" && ((SECONDS < deadline)); do sleep 0.1; done
if quad_alive "$edge"; then
    kill -KILL "$edge"
    fail "quad-edge --help on the campus clock did not exit within 30 s (it saw no arguments?): $(head -c 500 "$QUAD_HOME/edge-help.out")"
fi
wait "$edge" || fail "quad-edge --help on the campus clock exited $?: $(head -c 500 "$QUAD_HOME/edge-help.out")"
has 'Commands:' "$QUAD_HOME/edge-help.out" || fail "quad-edge --help on the campus clock printed no usage: $(head -c 500 "$QUAD_HOME/edge-help.out")"
# The session signed an hour ago (1 h by default) has expired.
set +e
out=$(QUAD_TOKEN=$old_token quadctl call accounts.profile.get 2>/dev/null)
rc=$?
set -e
((rc == 1)) && [[ $(field "$out" 'b["code"]') == unauthorized ]] || fail "the session signed before the move was not refused (exit $rc): $out"
login
set +e
out=$(quadctl call reservations.checkin 2>/dev/null)
rc=$?
set -e
((rc == 1)) || fail "check-in after clock +1h exited $rc, not 1: $out"
[[ $(field "$out" 'b["status"]') == 409 && $(field "$out" 'b["message"]') == *expired* ]] || fail "check-in after clock +1h was not refused with 409 (expired): $out"
ok "clock +1h: every broker and worker at FAKETIME=+3600s; the old session 401; check-in 409: $(field "$out" 'b["message"]')"

step="stale libfaketime pairs"
# What a dead process under libfaketime leaves in /dev/shm (SIGKILLed, or
# one that exec'd another program) is named by its pid; pids come round,
# and libfaketime 0.9.10 exits at the first clock read of a new process
# whose pid has such a pair ("sem_open failed and recreation attempts
# failed": quadctl died so in a CI run). Planted for the next 400 pids, the
# workers the next move starts and quadctl on the campus clock must run.
planted=()
read -r last_pid </proc/sys/kernel/ns_last_pid
read -r pid_max </proc/sys/kernel/pid_max
for ((p = last_pid + 1; p <= last_pid + 400 && p < pid_max; p++)); do
    f=/dev/shm/sem.faketime_sem_$p
    [[ -e $f ]] || { : >"$f" && planted+=("$f"); }
done
for ((k = 1; k <= 5; k++)); do
    out=$(quad_clock date -u +%s 2>&1) || fail "quad_clock date exited $? with a stale pair under its pid: $out"
done
ok "quad_clock ran 5 times with stale libfaketime pairs under the next 400 pids (${#planted[@]} planted)"

step="clock +5d"
move_clock +5d
expect_clock +435600s
"$STACK" status | has '^Campus clock: +5d1h' || fail "status does not show the offset +5d1h: $("$STACK" status | head -n 3)"
login
out=$(quadctl call orders.return "{\"order\":\"$order\"}" 2>&1) || fail "orders.return exited $?: $out"
late=$(field "$out" 'b["late_days"]')
charge=$(field "$out" 'b["late_charge"]')
((late >= 2)) || fail "the rental returned 5 days and an hour after a 3-day rent has late_days $late: $out"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$charge" || fail "no late charge: $out"
ok "clock +5d (+5d1h in all): the rental came back $late days late, charged $charge"

step="kill on the moved clock"
"$STACK" scale catalog 2 >/dev/null || fail "deploy/stack scale catalog 2 exited $?"
killed=$(<"$QUAD_HOME/run/catalog.2.pid")
tr '\0' '\n' <"/proc/$killed/environ" | has -x 'FAKETIME=+435600s' || fail "catalog/2, started by scale, is not on the campus clock"
before=$(quad_stack_processes)
grep -q ' faketime$' <<<"$before" && fail "a faketime(1) process runs in the stack: $(grep ' faketime$' <<<"$before")"
# libfaketime made its semaphore and shared memory once the worker read the clock.
[[ -e /dev/shm/faketime_shm_$killed ]] || printf 'test_clock:      (catalog/2 has no /dev/shm/faketime_shm_%s)\n' "$killed"
"$STACK" kill catalog >/dev/null || fail "deploy/stack kill catalog exited $?"
quad_alive "$killed" && fail "catalog/2 (pid $killed) still runs after kill"
after=$(quad_stack_processes)
expected=$(grep -v "^$killed " <<<"$before")
if [[ $after != "$expected" ]]; then
    fail "the stack's processes after kill catalog are not those before without pid $killed:
before:
$before
after:
$after"
fi
[[ ! -e /dev/shm/faketime_shm_$killed && ! -e /dev/shm/sem.faketime_sem_$killed ]] ||
    fail "libfaketime's semaphore or shared memory of the killed pid $killed is left in /dev/shm"
ok "kill catalog on the moved clock: pid $killed gone, the other $(wc -l <<<"$after") processes the same pids, no faketime process, nothing left in /dev/shm"

step="clock reset"
move_clock reset
expect_clock ""
[[ ! -e $QUAD_HOME/run/clock/campus ]] || fail "clock reset left $QUAD_HOME/run/clock/campus: $(<"$QUAD_HOME/run/clock/campus")"
"$STACK" clock | has 'real time (a demo stack' || fail "deploy/stack clock after reset: $("$STACK" clock)"
"$STACK" status | has '^Campus clock: real time' || fail "status after reset: $("$STACK" status | head -n 3)"
eval "$("$STACK" env)"
declare -F quad_clock quad-edge quadctl >/dev/null && fail "deploy/stack env after reset left the campus clock's functions: $(declare -F)"
login
quadctl call reservations.levels '{"lot":"central"}' >/dev/null || fail "the stack does not answer after clock reset"
ok "clock reset: offset 0, no process on libfaketime, answering"

step="down"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
left=$(quad_stack_processes)
[[ -z $left ]] || fail "processes of the stack remain after down: $left"
ok "down: no process left"

step="finished"
printf 'test_clock: all checks passed in %s s\n' "$SECONDS"
