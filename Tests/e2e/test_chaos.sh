#!/usr/bin/env bash
# End to end, as root: a small stack on hosts (deploy/stack up --hosts), then
# real faults with deploy/chaos, and checks that the stack survives them:
#   1. partition a catalog worker's host from the broker: the broker drops it
#      (sys.services) and requests still succeed through the other worker;
#      heal: it registers again;
#   2. deploy/chaos kill: the worker's supervisor restarts it; deploy/stack
#      kill: it stays down;
#   3. scale catalog 1 -> 3 -> 2 -> 1 under load, with a worker SIGKILLed
#      on the way (catalog.stock.adjust +1, each request retried under its
#      own id until answered): every request applied exactly once (the stock
#      grew by exactly the number sent, one idempotency record each);
#   4. down: no namespace, veth or bridge of the stack is left.
#   5. deploy/chaos run: 12 phones, 120 s of campus day under every kind of
#      fault: partitions, kills, pauses, a scale to 3 and back, broker kills
#      and partitions, a PostgreSQL restart and a partition from pg, a SIGKILL
#      of quad-edge (restarted on its files), a worker on a skewed clock; the
#      faults log must show a broker kill, a PostgreSQL restart, a quad-edge
#      kill and a clock skew, and every check of deploy/checker.py runs on
#      real figures and passes (the fault switch set, and inert).
# Runs on its own QUAD_HOME, ports and net 10.77.K.0/24; about 6 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK=$ROOT/deploy/stack
CHAOS=$ROOT/deploy/chaos
QUAD_PROG=test_chaos
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

step=start
fail() {
    printf 'test_chaos: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_chaos: ok   %s (%ss)\n' "$*" "$SECONDS"; }

[[ $(id -u) == 0 ]] || fail "needs root: network namespaces and nftables"
if ! command -v nft >/dev/null; then
    printf 'test_chaos: installing nftables\n'
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables </dev/null >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables </dev/null >/dev/null; } ||
        fail "nftables is missing and could not be installed"
fi
# libfaketime: the chaos run's clock fault.
if ! compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; then
    printf 'test_chaos: installing faketime\n'
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime </dev/null >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime </dev/null >/dev/null; } ||
        fail "faketime (libfaketime) is missing and could not be installed"
fi
python3 -c 'import zmq' 2>/dev/null || fail "python3 zmq (pyzmq) is missing: deploy/test installs it"

QUAD_HOME=$(mktemp -d /tmp/quad-chaos-e2e.XXXXXX)
chmod 755 "$QUAD_HOME"  # PostgreSQL (user postgres) keeps its data in it
export QUAD_HOME
# A port base and a hosts net of its own, never the defaults a stack of the
# machine may hold: the first port base from QUAD_TEST_PORT_BASE (default
# 21700) whose every port is free, and QUAD_TEST_HOSTS_NET or the first free
# net 10.77.K.0/24.
QUAD_PORT_BASE=$(quad_free_port_base "${QUAD_TEST_PORT_BASE:-21700}") || fail "no port base with every port free from ${QUAD_TEST_PORT_BASE:-21700}"
QUAD_HOSTS_NET=${QUAD_TEST_HOSTS_NET:-$(quad_free_hosts_net "${QUAD_TEST_HOSTS_NET_FROM:-0}")} || fail "no free net 10.77.K.0/24 for --hosts"
export QUAD_PORT_BASE QUAD_HOSTS_NET QUAD_RESTART_DELAY=1
unset QUAD_FRONTEND QUAD_BACKEND QUAD_EVENTS_IN QUAD_EVENTS_OUT QUAD_INTERNAL QUAD_METRICS_BASE QUAD_EDGE_CONTROL
for v in $(compgen -v | grep -E "^QUAD_[A-Z_]+_DB$"); do unset "$v"; done  # every service's store
PREFIX=""

cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)); then
        printf '\n--- deploy/stack status at the failure\n' >&2
        "$STACK" status >&2 || true
        "$CHAOS" status >&2 || true
        local log
        for log in "$QUAD_HOME"/logs/broker.log "$QUAD_HOME"/logs/catalog.*.log; do
            [[ -f $log ]] || continue
            printf -- '--- last lines of %s\n' "$log" >&2
            tail -n 15 "$log" >&2
        done
    fi
    "$STACK" down >/dev/null 2>&1 || true
    if [[ -n $PREFIX ]]; then
        local ns
        for ns in $(ip netns list | awk '{print $1}' | grep "^$PREFIX-"); do
            printf 'test_chaos: namespace %s left after down; removing it\n' "$ns" >&2
            ip netns pids "$ns" | xargs -r kill -KILL 2>/dev/null || true
            ip netns del "$ns" || true
            rc=1
        done
        ip link del "$PREFIX" 2>/dev/null && { printf 'test_chaos: veth %s left after down\n' "$PREFIX" >&2; rc=1; }
    fi
    if ((rc != 0)) && [[ -n ${QUAD_TEST_KEEP:-} ]]; then
        printf 'test_chaos: kept %s (QUAD_TEST_KEEP)\n' "$QUAD_HOME" >&2
    else
        rm -rf "$QUAD_HOME"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# "instance pid" of each worker of $1 registered with the broker.
registered() {
    local json
    # Instances and pids are shown on the internal frontend (and to admins) only.
    json=$(quadctl --internal --timeout 1500 --attempts 1 services --json 2>/dev/null) || return 0
    python3 -c '
import json, sys
for s in json.loads(sys.argv[1])["services"]:
    if s["name"] == sys.argv[2]:
        for w in s["workers"]:
            print(w["instance"], w["pid"])
' "$json" "$1"
}

# Waits up to $2 seconds until `registered catalog` matches pattern $1 (grep -E), or for $3 = absent, until it does not.
wait_registered() {
    local pattern=$1 limit=$2 mode=${3:-present} deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        if [[ $mode == present ]]; then registered catalog | grep -qE "$pattern" && return 0
        else registered catalog | grep -qE "$pattern" || return 0
        fi
        sleep 0.3
    done
    return 1
}

# The load generator (python3, pyzmq), written out at the scale step.
write_load_script() {
    cat >"$1" <<'PY'
#!/usr/bin/env python3
"""Load for Tests/e2e/test_chaos.sh: catalog.stock.adjust +1 on one product,
sent by CLIENTS threads through the broker's internal frontend (as an admin),
each request retried under its own id until a service answers. Writes one
line per request (id, outcome, attempts) to --out, and the summary as JSON
on stdout. Bounded: at most --count requests, at most --seconds seconds."""

import argparse
import json
import os
import sys
import threading
import time
import uuid

import zmq


def uuid7():
    ms = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 68) & 0xFFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


failures = []


def client(endpoint, product, count, stop, results, lock, timeout_ms):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    key_file = os.environ.get("QUAD_SERVICE_KEY_FILE")
    if key_file:
        # Between hosts the internal frontend speaks CURVE and admits only
        # the services' key (deploy/stack env exports where it is).
        with open(key_file, "rb") as f:
            secret = f.read().strip()
        with open(os.path.join(os.environ["QUAD_HOME"], "keys", "broker.pub"), "rb") as f:
            sock.curve_serverkey = f.read().strip()
        sock.curve_secretkey = secret
        sock.curve_publickey = zmq.curve_public(secret)
    # Every broker's internal frontend (a comma-separated list): the DEALER
    # deals its requests over them, and a retry may go through another.
    for e in endpoint.split(","):
        sock.connect(e)
    sent = 0
    while sent < count and not stop.is_set():
        rid = uuid7()
        attempts = 0
        outcome = None
        give_up = time.time() + 60
        while outcome is None and time.time() < give_up:
            attempts += 1
            env = {"v": 1, "id": rid, "type": "catalog.stock.adjust", "kind": "request", "ts": int(time.time() * 1000),
                   "src": "e2e/chaos-load", "deadline": timeout_ms, "user": "e2e-admin", "role": "admin",
                   "body": {"id": product, "delta": 1}}
            # MDP/0.2 (RFC 18): header, REQUEST, service, envelope.
            sock.send_multipart([b"MDPC02", b"\x01", b"catalog", json.dumps(env).encode()])
            until = time.time() + timeout_ms / 1000.0 + 0.3
            while time.time() < until:
                if not sock.poll(int(max(1, (until - time.time()) * 1000))):
                    break
                reply = json.loads(sock.recv_multipart()[-1])
                if reply.get("corr") != rid:
                    continue  # a late answer to an earlier request
                if reply.get("kind") == "error" and reply.get("body", {}).get("status") in (503, 504):
                    time.sleep(0.2)
                    break  # no worker took it in time: the same id again
                if reply.get("kind") == "error" and reply.get("body", {}).get("status", 0) >= 500:
                    # A failure is not stored by the service: the same id again.
                    with lock:
                        failures.append("%s %s" % (rid, reply.get("body", {}).get("message", "")[:300]))
                    time.sleep(0.2)
                    break
                outcome = "ok" if reply.get("kind") == "reply" else "error:%s" % reply.get("body", {}).get("code")
                break
        with lock:
            results.append((rid, outcome or "unanswered", attempts))
        sent += 1
    sock.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--product", default="p-0001")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--count", type=int, default=150, help="requests per client")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--timeout-ms", type=int, default=1500)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop-file", help="stop sending new requests once this file exists")
    args = ap.parse_args()
    deadline = time.time() + args.seconds
    results, lock, stop = [], threading.Lock(), threading.Event()
    threads = [threading.Thread(target=client, args=(args.endpoint, args.product, args.count, stop, results, lock, args.timeout_ms))
               for _ in range(args.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if time.time() > deadline or (args.stop_file and os.path.exists(args.stop_file)):
            stop.set()
        time.sleep(0.1)
    with open(args.out, "w") as f:
        for rid, outcome, attempts in results:
            f.write("%s %s %d\n" % (rid, outcome, attempts))
    summary = {"sent": len(results), "ok": sum(1 for r in results if r[1] == "ok"), "failures_retried": failures[:5],
               "failures": len(failures),
               "retried": sum(1 for r in results if r[2] > 1), "other": sorted({r[1] for r in results if r[1] != "ok"})}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY
}

step="deploy/stack up --hosts"
"$STACK" up --hosts || fail "deploy/stack up --hosts exited $?"
eval "$("$STACK" env)"
# shellcheck disable=SC1091
source "$QUAD_HOME/run/hosts.env"
PREFIX=$HOSTS_PREFIX
# Two brokers by default, each on its own host: broker (.2) and broker-2 (.102).
[[ $QUAD_FRONTEND == "tcp://$HOSTS_SUBNET.2:$QUAD_PORT_BASE,tcp://$HOSTS_SUBNET.102:$QUAD_PORT_BASE" ]] ||
    fail "the frontend is $QUAD_FRONTEND, expected the broker hosts' tcp://$HOSTS_SUBNET.2:$QUAD_PORT_BASE,tcp://$HOSTS_SUBNET.102:$QUAD_PORT_BASE"
ip netns list | grep -q "^$PREFIX-broker" || fail "no namespace $PREFIX-broker: $(ip netns list)"
ip netns list | grep -q "^$PREFIX-catalog-1" || fail "no namespace $PREFIX-catalog-1"
[[ $(ip netns identify "$(<"$QUAD_HOME/run/catalog.1.pid")") == "$PREFIX-catalog-1" ]] ||
    fail "catalog/1 does not run in namespace $PREFIX-catalog-1"
[[ ${QUAD_CATALOG_DB:-} == postgres://* ]] || fail "on hosts, catalog's store should be PostgreSQL, QUAD_CATALOG_DB=${QUAD_CATALOG_DB:-}"
quadctl call catalog.products.list '{"limit":2}' >/dev/null || fail "catalog does not answer over the hosts' network"
ok "up --hosts: broker at $QUAD_FRONTEND, every worker on its own namespace, stores on PostgreSQL"

step="scale catalog 2"
"$STACK" scale catalog 2 >/dev/null || fail "deploy/stack scale catalog 2 exited $?"
[[ $(registered catalog | wc -l) == 2 ]] || fail "expected 2 catalog workers: $(registered catalog)"
ok "scale catalog 2: catalog-2 on $(awk '$1 == "catalog-2" {print $2}' "$QUAD_HOME/run/hosts")"

step="partition broker catalog-2"
"$CHAOS" partition broker catalog-2 >/dev/null || fail "deploy/chaos partition exited $?"
wait_registered '^catalog/2 ' 12 absent || fail "the broker still lists catalog/2 12 s after the partition: $(registered catalog)"
for k in $(seq 8); do
    quadctl --timeout 2000 --attempts 2 call catalog.products.list '{"limit":1}' >/dev/null ||
        fail "call $k to catalog failed while catalog-2 is cut off"
done
# The worker itself cannot reach the broker: it is cut off, not gone.
[[ -n $("$CHAOS" status | grep 'partition  broker | catalog-2') ]] || fail "chaos status does not show the partition"
ok "partition: the broker dropped catalog/2; 8 calls answered by catalog/1"

step="heal"
"$CHAOS" heal >/dev/null || fail "deploy/chaos heal exited $?"
wait_registered '^catalog/2 ' 20 || fail "catalog/2 did not register again within 20 s of the heal: $(registered catalog)"
ok "heal: catalog/2 registered again"

step="chaos kill (restarted)"
old=$(<"$QUAD_HOME/run/catalog.2.pid")
"$CHAOS" kill catalog --instance 2 >/dev/null || fail "deploy/chaos kill exited $?"
deadline=$((SECONDS + 20))
until [[ -f $QUAD_HOME/run/catalog.2.pid && $(<"$QUAD_HOME/run/catalog.2.pid") != "$old" ]] && registered catalog | grep -q "^catalog/2 "; do
    ((SECONDS < deadline)) || fail "catalog/2 was not restarted and registered within 20 s of chaos kill"
    sleep 0.3
done
quad_alive "$old" && fail "the killed pid $old still runs"
ok "chaos kill catalog --instance 2: SIGKILLed, restarted by its supervisor as pid $(<"$QUAD_HOME/run/catalog.2.pid")"

step="stack kill (not restarted)"
"$STACK" kill catalog >/dev/null || fail "deploy/stack kill exited $?"
sleep 3
[[ -f $QUAD_HOME/run/catalog.2.pid ]] && fail "deploy/stack kill: catalog/2 came back (pid file $(<"$QUAD_HOME/run/catalog.2.pid"))"
wait_registered '^catalog/2 ' 8 absent || fail "the broker still lists catalog/2 after deploy/stack kill"
ok "deploy/stack kill catalog: catalog/2 stays down"

step="pause"
"$STACK" scale catalog 1 >/dev/null || fail "scale catalog 1 exited $?"
"$CHAOS" pause catalog --for 4 >/dev/null || fail "deploy/chaos pause exited $?"
pid=$(<"$QUAD_HOME/run/catalog.1.pid")
# deploy/chaos pause returns once the process is stopped; its resumer
# sends SIGCONT 4 s after, which a busy machine may put off a little.
[[ $(awk '{print $3}' "/proc/$pid/stat") == T ]] || fail "catalog/1 (pid $pid) is not stopped after chaos pause"
for _ in $(seq 300); do [[ $(awk '{print $3}' "/proc/$pid/stat") != T ]] && break; sleep 0.1; done
[[ $(awk '{print $3}' "/proc/$pid/stat") != T ]] || fail "catalog/1 (pid $pid) is still stopped 30 s after pause --for 4"
quadctl --timeout 3000 --attempts 3 call catalog.products.list '{"limit":1}' >/dev/null || fail "catalog does not answer after the pause"
ok "pause catalog --for 4: SIGSTOP, then SIGCONT, and it answers"

step="scale under load"
stock() { psql -XAtq "$QUAD_CATALOG_DB" -c "SELECT stock FROM products WHERE id = 'p-0001'"; }
before=$(stock) || fail "cannot read the stock of p-0001 from $QUAD_CATALOG_DB"
LOAD=$QUAD_HOME/load.py
write_load_script "$LOAD"
python3 "$LOAD" --endpoint "$QUAD_INTERNAL" --product p-0001 --clients 3 --count 100000 --seconds 90 \
    --stop-file "$QUAD_HOME/stop-load" --out "$QUAD_HOME/load.txt" >"$QUAD_HOME/load.json" 2>"$QUAD_HOME/load.err" &
load=$!
sleep 2
"$STACK" scale catalog 3 >/dev/null || fail "scale catalog 3 under load exited $?"
sleep 2
# A crash under load too: what catalog/3 held is retried under the same id.
"$CHAOS" kill catalog --instance 3 >/dev/null || fail "chaos kill catalog under load exited $?"
sleep 3
"$STACK" scale catalog 2 >/dev/null || fail "scale catalog 2 under load exited $?"
sleep 2
"$STACK" scale catalog 1 >/dev/null || fail "scale catalog 1 under load exited $?"
sleep 2
touch "$QUAD_HOME/stop-load"
wait "$load" || fail "the load generator exited $?: $(cat "$QUAD_HOME/load.err")"
summary=$(<"$QUAD_HOME/load.json")
sent=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sent"])' "$summary")
okn=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ok"])' "$summary")
((sent > 20)) || fail "the load sent only $sent requests: $summary"
[[ $sent == "$okn" ]] || fail "not every request was answered ok: $summary"
after=$(stock)
((after - before == sent)) ||
    fail "stock of p-0001 went from $before to $after: $((after - before)) applied for $sent requests acknowledged (lost or duplicated)"
applied=$(psql -XAtq "$QUAD_CATALOG_DB" -c "SELECT COUNT(*) FROM idempotency WHERE type = 'catalog.stock.adjust'")
[[ $applied == "$sent" ]] || fail "catalog's store holds $applied idempotency records of catalog.stock.adjust, $sent requests were sent"
by=$(grep -h '"catalog.stock.adjust"' "$QUAD_HOME"/logs/catalog.*.log | python3 -c '
import json, sys
seen = {}
for line in sys.stdin:
    try: e = json.loads(line)
    except ValueError: continue
    seen[e.get("src")] = seen.get(e.get("src"), 0) + 1
print(" ".join("%s:%d" % kv for kv in sorted(seen.items())))')
ok "scale 1 -> 3 (-> catalog/3 killed and restarted) -> 2 -> 1 under load: $sent requests, $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["retried"])' "$summary") retried, each applied once (stock $before -> $after; served by $by; $(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print("%d answers of 5xx retried%s" % (s["failures"], (": " + s["failures_retried"][0]) if s["failures"] else ""))' "$summary"))"

step="down"
"$STACK" down >/dev/null || fail "deploy/stack down exited $?"
left=$(ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true)
[[ -z $left ]] || fail "namespaces left after down: $left"
ip link show "$PREFIX" >/dev/null 2>&1 && fail "veth $PREFIX is left in the root namespace after down"
ip -4 addr show | grep -q "inet $HOSTS_SUBNET\." && fail "an address of $HOSTS_SUBNET.0/24 is left after down"
ok "down: no namespace, veth, bridge or address of the stack is left"

step="deploy/chaos run"
# A short Jepsen-style run when the edge agent is built: phones, a nemesis,
# heal, drain, and deploy/checker.py over every store.
edge_bin=${QUAD_BIN_DIR:-${QUAD_BUILD_DIR:-$ROOT/.build}/release}/quad-edge
if [[ -x $edge_bin ]] && [[ $("$edge_bin" --help 2>&1 || true) == *--duration* ]]; then
    rundir=$QUAD_HOME/run-chaos
    # Its own stack, its own stores: not the databases of the stack above.
    for v in $(compgen -v | grep -E "^QUAD_[A-Z_]+_DB$"); do unset "$v"; done  # every service's store
    # Two minutes of campus day, faults every few seconds. The fault switch
    # is set, and must do nothing: a release build ignores it (QUAD_FAULTS
    # is defined for debug builds only, Package.swift)
    # (Tests/e2e/test_chaos_faults.py runs the build that honours it).
    if ! QUAD_FAULT_SKIP_IDEMPOTENCY=1 "$CHAOS" run --phones 12 --duration 120 --seed 11 --partition-every 15 --kill-every 20 \
        --pause-every 30 --scale-to 3 --out "$rundir" >"$QUAD_HOME/chaos-run.log" 2>&1; then
        tail -n 40 "$QUAD_HOME/chaos-run.log" >&2
        fail "deploy/chaos run failed (its log above)"
    fi
    grep -q '^verdict: PASS' "$QUAD_HOME/chaos-run.log" || fail "deploy/chaos run printed no PASS verdict"
    [[ -s $rundir/report.html && -s $rundir/run.json ]] || fail "deploy/chaos run wrote no report.html or run.json"
    grep -q 'applies a repeated request id' "$rundir"/home/logs/*.log &&
        fail "a production build honoured QUAD_FAULT_SKIP_IDEMPOTENCY"
    # Every check ran on real figures and passed: the telemetry matched event
    # by event, the cart ledger balanced, and the faults really happened.
    python3 - "$rundir" 2>"$QUAD_HOME/chaos-checks.txt" <<'PY' || fail "deploy/chaos run's checks: $(tr '\n' ';' <"$QUAD_HOME/chaos-checks.txt")"
import json, re, sys
d = sys.argv[1]
v = json.load(open(d + "/check.json"))
checks = {c["name"]: c for c in v["checks"]}
want = ["drained", "lost", "order", "duplicated", "stock", "saga", "spots", "deadlines", "telemetry", "analytics", "brokers", "holds",
        "monotonic", "ryw", "wfr", "converged"]
problems = ["missing check %s" % n for n in want if n not in checks]
problems += ["check %s failed: %s" % (n, c["figures"]) for n, c in checks.items() if not c["ok"]]
problems += ["check %s did not run: %s" % (n, c["figures"]) for n, c in checks.items() if "n/a" in c["figures"]]
t = v.get("telemetry") or {}
# A rolled-back phone file (the disk fault) may lose events still queued:
# the device's loss, counted apart (counts.device_lost_events), never stored.
if not t.get("recorded") or t.get("stored") != t.get("recorded") - v["counts"].get("device_lost_events", 0):
    problems.append("telemetry not matched event by event: %s" % t)
if not re.search(r"cart ledger: [1-9]\d* units added", checks.get("duplicated", {}).get("figures", "")):
    problems.append("no cart ledger: %s" % checks.get("duplicated"))
# The session guarantees ran on the phones' logs (quad-edge --record-views on).
sessions = v.get("sessions") or {}
if sessions.get("reads", 0) < 100 or sessions.get("converged_copies", 0) < 10:
    problems.append("session guarantees on too little: %s" % sessions)
c = v["counts"]
if c.get("attempted", 0) < 50 or c.get("lost") or c.get("duplicated") or c.get("indeterminate"):
    problems.append("counts: %s" % c)
faults = open(d + "/faults.log").read()
for kind, least in (("partition", 6), ("kill", 4), ("pause", 2), ("scale", 2)):
    n = len(re.findall(r"\] %s " % kind, faults)) - (1 if kind == "partition" else 0)  # less the start's cut
    if n < least:
        problems.append("only %d %s faults (want %d or more)" % (n, kind, least))
# The faults that kill what Quad must now survive, each at least once.
for what, rx in (("broker kill", r"\] broker: kill broker \d+ \("), ("PostgreSQL restart", r"\] pg: restart postgres done"),
                 ("quad-edge kill", r"\] edge: kill quad-edge \("), ("quad-edge restart", r"\] edge: quad-edge restarted"),
                 ("clock skew", r"\] clock: \w+/\d+ [+-]\d+s \(restarted"), ("clock restore", r"\] clock: \w+/\d+ restored"),
                 ("broker partition", r"\] broker: partition phones"), ("pg partition", r"\] pg: partition \w+ \| pg"),
                 ("phone file rolled back", r"\] disk: phone-\d+ file rolled back"), ("pg disk full", r"\] disk: host pg's disk full \(")):
    if not re.search(rx, faults):
        problems.append("no %s in the faults log" % what)
# The skew took effect: the skewed worker's log lines jump by its offset
# when it restarts under libfaketime (their ts is its wall clock).
for svc, n, off in re.findall(r"\] clock: (\w+)/(\d+) ([+-]\d+)s \(restarted", faults)[:1]:
    stamps = []
    for line in open("%s/home/logs/%s.%s.log" % (d, svc, n), errors="replace"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("ts"), int):
            stamps.append(e["ts"])
    jumps = [b - a for a, b in zip(stamps, stamps[1:])]
    if not any(abs(j - int(off) * 1000) < 5000 for j in jumps):
        problems.append("%s/%s's log shows no jump of %s s in its timestamps (largest %s ms): the skew did not take effect" % (
            svc, n, off, max(jumps, key=abs) if jumps else None))
if re.search(r"FAILED|no live worker", faults):
    problems.append("a fault did not happen: %s" % [l for l in faults.splitlines() if "FAILED" in l or "no live" in l])
print("\n".join(problems), file=sys.stderr)
sys.exit(1 if problems else 0)
PY
    run_prefix=$(sed -n 's/.*(namespaces \(quad[0-9]*\)-\*).*/\1/p' "$rundir/stack-up.log")
    [[ -n $run_prefix ]] || fail "the chaos run's stack-up.log does not name its namespaces"
    left=$(ip netns list | awk '{print $1}' | grep "^$run_prefix-" || true)
    [[ -z $left ]] || fail "namespaces left after the chaos run: $left"
    ok "deploy/chaos run: 12 phones, 120 s, $(grep '^faults by kind' "$QUAD_HOME/chaos-run.log"); $(grep '^actions:' "$QUAD_HOME/chaos-run.log")"
    sed -n '/^actions:/,/^converged/p' "$QUAD_HOME/chaos-run.log" | sed 's/^/    /'
else
    printf 'test_chaos: skip deploy/chaos run: %s is not built with a run command\n' "$edge_bin"
fi

step="finished"
printf 'test_chaos: all checks passed in %s s\n' "$SECONDS"
