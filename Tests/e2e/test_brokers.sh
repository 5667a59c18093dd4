#!/usr/bin/env bash
# End to end, as a user: two brokers, both serving (issue 14).
#   1. up --brokers 2: two broker programs under supervisord, every worker
#      registered with both; 'env' exports comma-separated lists;
#   2. quad-bench with 200 requests in flight through both frontends while
#      'deploy/stack kill broker 1' SIGKILLs the first: every request is
#      answered, none is an error, and some were resent through the other
#      (they were waiting on the one that died); status shows the restart;
#   3. the same for broker 2; then telemetry.ingest batches (mutations)
#      through a kill of broker 1: every batch answered, the collector holds
#      exactly the events sent (none lost, none twice); down leaves no broker;
#   4. (root, with ip and PostgreSQL) up --hosts: two brokers by default, on
#      hosts broker and broker-2, every worker registered with both,
#      PostgreSQL under supervisord on host pg, the kill of broker 2 under load.
# Runs on its own QUAD_HOME and ports (the first port base with every port
# free from QUAD_TEST_PORT_BASE, default 20400). QUAD_BUILD_DIR and QUAD_BIN_DIR
# are passed on to deploy/stack.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
QUAD_PROG=test_brokers
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

step=start
fail() {
    printf 'test_brokers: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_brokers: ok   %s (%ss)\n' "$*" "$SECONDS"; }

command -v supervisord >/dev/null || fail "supervisord is not installed (deploy/lib.sh quad_install_deps installs the supervisor package)"

QUAD_HOME=$(mktemp -d /tmp/quad-brokers-e2e.XXXXXX)
QUAD_PORT_BASE=$(quad_free_port_base "${QUAD_TEST_PORT_BASE:-20400}") || fail "no port base with every port free from ${QUAD_TEST_PORT_BASE:-20400}"
export QUAD_HOME QUAD_PORT_BASE
# Many requests from one address and key: no rate limit here.
export QUAD_RATE_PER_SECOND=0 QUAD_ADDRESS_RATE_PER_SECOND=0
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_BROKER_KEY QUAD_TOKEN QUAD_BROKERS
for v in $(compgen -v | grep -E "^QUAD_[A-Z_]+_DB$"); do unset "$v"; done  # every service's store

cleanup() {
    "$STACK" down >/dev/null 2>&1 || true
    rm -rf "$QUAD_HOME"
}
trap cleanup EXIT

# The RESTARTS column of program $1 in 'status'.
restarts_of() { "$STACK" status 2>/dev/null | awk -v p="$1" '$1 == p { print $6; exit }'; }

step="up --brokers 2"
"$STACK" up --brokers 2 >"$QUAD_HOME/up.out" 2>&1 || { cat "$QUAD_HOME/up.out" >&2; fail "deploy/stack up --brokers 2 exited $?"; }
grep -q "2 brokers and" "$QUAD_HOME/up.out" || fail "up did not say it started 2 brokers: $(cat "$QUAD_HOME/up.out")"
eval "$("$STACK" env)"
[[ $QUAD_FRONTEND == tcp://127.0.0.1:$QUAD_PORT_BASE,tcp://127.0.0.1:$((QUAD_PORT_BASE + 10)) ]] ||
    fail "env exports QUAD_FRONTEND=$QUAD_FRONTEND, expected both brokers' frontends"
[[ $QUAD_BACKEND == *,* && $QUAD_EVENTS_OUT == *,* && $QUAD_INTERNAL == *,* ]] || fail "env does not export lists of both brokers' sockets"
for prog in broker broker-2; do
    [[ $(restarts_of "$prog") == 0 ]] || fail "status shows no $prog with 0 restarts: $("$STACK" status 2>&1)"
done
ok "up --brokers 2: broker and broker-2 under supervisord, env exports lists"

BIN=${QUAD_BIN_DIR:-${QUAD_BUILD_DIR:-$ROOT/.build}/release}

# Waits until the quad-bench $1 (pid) has said it got its first tenth of
# answers on stderr (file $2): requests are then in flight through both
# brokers, and nine tenths are still to come. A fixed sleep was too short
# on a loaded machine (the kill came before the bench had sent anything).
wait_for_progress() {
    local pid=$1 err=$2 t
    for ((t = 0; t < 600; t++)); do
        grep -q " answered," "$err" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || fail "quad-bench ended before it said it had answers: $(tail -n 3 "$err")"
        sleep 0.1
    done
    fail "quad-bench said nothing of its progress in 60 s: $(tail -n 3 "$err")"
}

# Freezes broker $1 (SIGSTOP) under a running quad-bench, then has
# deploy/stack kill it (SIGKILL). Frozen, the broker answers nothing, so the
# requests dealt to it stay waiting there and the bench cannot end before the
# kill: the kill always finds requests to resend, however slowly the
# launcher starts on a loaded machine.
freeze_and_kill() {
    local k=$1 pid
    pid=$(<"$QUAD_HOME/run/$( ((k == 1)) && printf broker || printf 'broker-%s' "$k").pid")
    kill -STOP "$pid" || fail "could not freeze broker $k (pid $pid)"
    "$STACK" kill broker "$k" >/dev/null || fail "deploy/stack kill broker $k exited $?"
}

# quad-bench with 200 in flight through both frontends; broker $1 is
# frozen and killed once a tenth of its 40,000 requests are answered. The
# deadline (60 s) outlasts the launcher's kill on a loaded machine.
bench_through_kill() {
    local k=$1 out=$QUAD_HOME/bench-$1.json
    "$BIN/quad-bench" request --n 40000 --inflight 200 --warmup 0 --deadline 60000 >"$out" 2>"$QUAD_HOME/bench-$k.err" &
    local bench=$!
    wait_for_progress "$bench" "$QUAD_HOME/bench-$k.err"
    freeze_and_kill "$k"
    wait "$bench" || fail "quad-bench exited $? after broker $k was killed: $(tail -n 3 "$QUAD_HOME/bench-$k.err")"
    python3 - "$out" <<'PY' || fail "quad-bench through the kill of broker $k: $(cat "$out")"
import json, sys
line = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert line["errors"] == 0, f"{line['errors']} errors: {line.get('first_error')}"
assert line["resent"] > 0, "no request was waiting on the killed broker: the kill came too late to prove anything"
print(f"test_brokers:      {line['n']} requests, 200 in flight, 0 errors, {line['resent']} resent through the other broker, p99 {line['p99_us']} us")
PY
}

step="kill broker 1 under load"
bench_through_kill 1
[[ $(restarts_of broker) == 1 ]] || fail "status shows $(restarts_of broker) restarts of broker, expected 1"
ok "kill broker 1 under 200 requests in flight: all answered, none an error"

step="kill broker 2 under load"
# Both brokers have every worker again before the next kill.
"$STACK" status >/dev/null
bench_through_kill 2
[[ $(restarts_of broker-2) == 1 ]] || fail "status shows $(restarts_of broker-2) restarts of broker-2, expected 1"
ok "kill broker 2 under 200 requests in flight: all answered, none an error"

step="kill broker 1 under ingest"
# Mutations through a kill: telemetry.ingest batches (each event with its
# own id), 200 in flight, broker 1 killed under them. Every batch answered,
# and the collector holds exactly the events sent: a batch resent through
# the other broker under the same id is not stored twice, none is lost.
events_held() {
    QUAD_TOKEN= timeout 10 "$BIN/quadctl" --as admin@quad.campus --timeout 5000 call telemetry.stats '{}' 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["events"])'
}
before=$(events_held) || fail "telemetry.stats did not answer"
"$STACK" status >/dev/null
out=$QUAD_HOME/bench-ingest.json
"$BIN/quad-bench" ingest --n 10000 --batch 10 --inflight 200 --warmup 0 --deadline 60000 >"$out" 2>"$QUAD_HOME/bench-ingest.err" &
bench=$!
wait_for_progress "$bench" "$QUAD_HOME/bench-ingest.err"
freeze_and_kill 1
wait "$bench" || fail "quad-bench ingest exited $? after broker 1 was killed: $(tail -n 3 "$QUAD_HOME/bench-ingest.err")"
after=$(events_held) || fail "telemetry.stats did not answer after the kill"
python3 - "$out" "$before" "$after" <<'PY' || fail "quad-bench ingest through the kill of broker 1: $(cat "$out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]).read().split("\n") if l.strip().startswith("{")]
line = next(l for l in lines if "errors" in l)
stored = int(sys.argv[3]) - int(sys.argv[2])
assert line["errors"] == 0, f"{line['errors']} errors: {line.get('first_error')}"
assert line["resent"] > 0, "no batch was waiting on the killed broker: the kill came too late to prove anything"
assert stored == 100000, f"the collector holds {stored} more events, 100000 were sent (10 in each of 10000 batches)"
print(f"test_brokers:      10000 batches of 10 events, 200 in flight, 0 errors, {line['resent']} resent through broker 2, 100000 events stored once each")
PY
ok "kill broker 1 under telemetry.ingest: every batch answered, every event stored once"

step="quadclient.Client fails over"
# deploy/quadclient.py's Client on QUAD_FRONTEND (the list): with broker 1
# frozen (SIGSTOP: its connection stays open, nothing answers), a request
# sent there is sent again under the same id through broker 2 and answered.
python3 - "$ROOT" "$QUAD_FRONTEND" "$QUAD_HOME" "$(<"$QUAD_HOME/run/broker.pid")" <<'PY' || fail "quadclient.Client did not fail over to broker 2"
import os, signal, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "deploy"))
import quadclient
frontends, home, pid = sys.argv[2], sys.argv[3], int(sys.argv[4])
c = quadclient.Client(frontends, quadclient.broker_key(home))
assert len(c.socks) == 2, c.endpoints
for k in (0, 1):  # both connections answer first
    c.current, c.sock = k, c.socks[k]
    a = c.call("catalog.products.list", {"limit": 1}, timeout=20)
    assert a and a["kind"] == "reply", a
c.current, c.sock = 0, c.socks[0]
os.kill(pid, signal.SIGSTOP)
try:
    t = time.monotonic()
    a = c.call("catalog.products.list", {"limit": 1}, timeout=10)
    took = time.monotonic() - t
finally:
    os.kill(pid, signal.SIGCONT)
assert a and a["kind"] == "reply", a
assert c.current == 1, "answered, but not through broker 2"
assert took < 2.0, f"answered through broker 2 after {took:.2f} s, more than 2 s"
print(f"test_brokers:      broker 1 frozen: answered through broker 2 after {took * 1000:.0f} ms")
c.close()
PY
ok "quadclient.Client on the list: a request unanswered by a frozen broker 1 is answered through broker 2 within 2 s"

step="down"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
pgrep -f "$QUAD_HOME/run/sock" >/dev/null && fail "a broker of the stack remains after down"
ok "down"

if ((EUID == 0)) && command -v ip >/dev/null && quad_pg_bindir >/dev/null; then
    # 4. On hosts, two brokers by default: broker on host broker
    #    (10.77.K.2), broker-2 on host broker-2 (10.77.K.102), every worker
    #    on its own host registered with both, the same kill under load.
    step="up --hosts (two brokers by default)"
    "$STACK" up --hosts >"$QUAD_HOME/up-hosts.out" 2>&1 || { cat "$QUAD_HOME/up-hosts.out" >&2; fail "deploy/stack up --hosts exited $?"; }
    grep -q "2 brokers and" "$QUAD_HOME/up-hosts.out" || fail "up --hosts did not start 2 brokers: $(tail -n 20 "$QUAD_HOME/up-hosts.out")"
    eval "$("$STACK" env)"
    # shellcheck disable=SC1091
    source "$QUAD_HOME/run/hosts.env"
    [[ $QUAD_FRONTEND == "tcp://$HOSTS_SUBNET.2:$QUAD_PORT_BASE,tcp://$HOSTS_SUBNET.102:$QUAD_PORT_BASE" ]] ||
        fail "env exports QUAD_FRONTEND=$QUAD_FRONTEND, expected both brokers' hosts"
    [[ $QUAD_INTERNAL == "tcp://$HOSTS_SUBNET.2:$((QUAD_PORT_BASE + 4)),tcp://$HOSTS_SUBNET.102:$((QUAD_PORT_BASE + 4))" ]] ||
        fail "env exports QUAD_INTERNAL=$QUAD_INTERNAL, expected both brokers' hosts"
    grep -q "^broker-2 $HOSTS_SUBNET.102\$" "$QUAD_HOME/run/hosts" || fail "run/hosts does not record broker-2 at $HOSTS_SUBNET.102: $(cat "$QUAD_HOME/run/hosts")"
    for prog in broker broker-2; do
        pid=$(<"$QUAD_HOME/run/$prog.pid")
        [[ $(ip netns identify "$pid") == "$HOSTS_PREFIX-$prog" ]] || fail "$prog (pid $pid) does not run in namespace $HOSTS_PREFIX-$prog"
        [[ $(restarts_of "$prog") == 0 ]] || fail "status shows no $prog with 0 restarts: $("$STACK" status 2>&1)"
    done
    # Every worker is registered with both brokers (up waited for it).
    for k in 1 2; do
        n=$(QUAD_INTERNAL=$(cut -d, -f"$k" <<<"$QUAD_INTERNAL") QUAD_TOKEN= timeout 5 "$BIN/quadctl" --internal --timeout 2000 --attempts 1 services --json |
            python3 -c 'import json, sys; print(sum(len(s["workers"]) for s in json.load(sys.stdin)["services"]))') ||
            fail "broker $k on hosts did not answer sys.services"
        want=$(ls "$QUAD_HOME"/run/supervisor/programs/ | grep -c '^[a-z]*-[0-9]*\.conf$' || true)
        want=$((want - 1))  # broker-2.conf
        ((n == want)) || fail "broker $k on hosts has $n workers registered, expected $want"
    done
    # The internal sockets on hosts speak CURVE with the services' key, on both brokers.
    [[ -n ${QUAD_SERVICE_KEY_FILE:-} ]] || fail "no services' key on hosts (internal CURVE off?)"
    grep -q "internal sockets: CURVE" "$QUAD_HOME/up-hosts.out" || fail "up --hosts did not turn internal CURVE on"
    pm=$(head -n 1 "$QUAD_HOME/pg/data/postmaster.pid")
    [[ $(ip netns identify "$pm") == "$HOSTS_PREFIX-pg" ]] || fail "PostgreSQL (pid $pm) does not run in namespace $HOSTS_PREFIX-pg"
    [[ $(awk '{print $4}' "/proc/$pm/stat") == "$(<"$QUAD_HOME/run/supervisor/supervisord.pid")" ]] ||
        fail "PostgreSQL (pid $pm) on host pg is not a child of supervisord"
    ok "up --hosts: broker on $HOSTS_SUBNET.2 and broker-2 on $HOSTS_SUBNET.102, each in its namespace, every worker ($want) registered with both, PostgreSQL under supervisord on host pg"

    step="kill broker 2 on hosts under load"
    bench_through_kill 2
    [[ $(restarts_of broker-2) == 1 ]] || fail "status shows $(restarts_of broker-2) restarts of broker-2 on hosts, expected 1"
    pid=$(<"$QUAD_HOME/run/broker-2.pid")
    [[ $(ip netns identify "$pid") == "$HOSTS_PREFIX-broker-2" ]] || fail "the new broker-2 (pid $pid) is not on host broker-2"
    ok "kill broker 2 on hosts under 200 requests in flight: all answered, none an error; back on host broker-2"

    step="down after --hosts"
    "$STACK" down >/dev/null || fail "deploy/stack down exited $?"
    ip netns list | grep -q "^$HOSTS_PREFIX-" && fail "namespaces left after down: $(ip netns list | grep "^$HOSTS_PREFIX-")"
    ok "down after --hosts: no namespace left"
else
    printf 'test_brokers: skip --hosts: needs root, ip and PostgreSQL\n'
fi
step="finished"
printf 'test_brokers: all checks passed in %s s\n' "$SECONDS"
