#!/usr/bin/env bash
# End to end on containers: deploy/image builds the images (the bookworm
# base once, with debootstrap), deploy/kube up plays the manifests of
# deploy/k8s with podman, quadctl on the host lists products through the
# published frontends, quad-edge runs a short campus day with every action
# accounted for, deploy/kube down stops it all, and no container, pod or
# port of it is left. Fails, never skips, where podman cannot run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
QUAD_PROG=test_kube
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/containers.conf}

step=start
t0=$SECONDS
fail() {
    printf 'test_kube: FAIL (%s): %s\n' "$step" "$*" >&2
    exit 1
}
ok() { printf 'test_kube: ok   %s  (%s)\n' "$*" "$(quad_duration $((SECONDS - t0)))"; }

command -v podman >/dev/null || fail "podman is not installed (deploy/test installs it: apt-get install -y podman runc debootstrap)"
((EUID == 0)) || fail "deploy/kube plays the pod with rootful podman: run as root"

export QUAD_KUBE_HOME
QUAD_KUBE_HOME=$(mktemp -d /tmp/quad-kube-e2e.XXXXXX)
BASE=${QUAD_KUBE_PORT_BASE:-26000}

cleanup() {
    local rc=$?
    trap - EXIT
    if ((rc != 0)) && podman pod exists quad-kube 2>/dev/null; then
        printf '\n--- containers of quad-kube at the failure\n' >&2
        podman ps -a --pod --filter pod=quad-kube --format '{{.Names}} {{.Status}}' >&2 || true
        local c
        for c in $(podman ps -a --pod --filter pod=quad-kube --format '{{.Names}}' 2>/dev/null); do
            [[ $c == *-infra ]] && continue
            printf -- '--- last lines of %s\n' "$c" >&2
            podman logs --tail 15 "$c" >&2 2>&1 || true
        done
    fi
    "$ROOT/deploy/kube" down >/dev/null 2>&1 || true
    podman pod exists quad-kube 2>/dev/null && podman pod rm -f quad-kube >/dev/null 2>&1
    rm -rf "$QUAD_KUBE_HOME"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

podman pod exists quad-kube 2>/dev/null && fail "a pod quad-kube already runs (another deploy/kube up?): stop it with deploy/kube down"

step="deploy/image"
"$ROOT/deploy/image" || fail "deploy/image exited $?"
podman image exists localhost/quad:latest && podman image exists localhost/quad-postgres:latest ||
    fail "deploy/image made no localhost/quad:latest or localhost/quad-postgres:latest"
user=$(podman run --rm --network none localhost/quad:latest id -u) || fail "podman cannot run a container of localhost/quad:latest here: $user"
[[ $user == 10001 ]] || fail "the image runs as uid $user, not 10001 (quad)"
ok "deploy/image: localhost/quad:latest runs as uid 10001"

step="manifests"
# The checked-in manifests are what deploy/kube manifests writes.
out=$(mktemp -d)
"$ROOT/deploy/kube" manifests "$out" >/dev/null || fail "deploy/kube manifests exited $?"
diff -r -x keys "$out" "$ROOT/deploy/k8s" >&2 || { rm -rf "$out"; fail "deploy/k8s differs from what deploy/kube manifests writes: run it and commit"; }
rm -rf "$out"
ok "deploy/k8s is what deploy/kube manifests writes"
problems=$(PYTHONPATH="$ROOT/deploy" python3 -m quaddeploy.services check-manifest "$ROOT"/deploy/k8s/*.yaml 2>&1) \
    || fail "deploy/k8s disagrees with deploy/stack.json: $problems"
ok "deploy/k8s runs every service of deploy/stack.json"

step="deploy/kube up"
# On a port base whose every port is free (from QUAD_KUBE_PORT_BASE, default
# 26000): a stack of the machine on its own ports is left alone. The
# manifests above are the checked-in ones, of the default base.
BASE=$(quad_free_port_base "$BASE") || fail "no free port base from $BASE"
export QUAD_KUBE_PORT_BASE=$BASE
QUAD_HEALTH_TIMEOUT=${QUAD_HEALTH_TIMEOUT:-240} "$ROOT/deploy/kube" up || fail "deploy/kube up exited $?"
eval "$("$ROOT/deploy/kube" env)" || fail "deploy/kube env failed"
[[ $QUAD_FRONTEND == "tcp://127.0.0.1:$BASE,tcp://127.0.0.1:$((BASE + 10))" ]] || fail "deploy/kube env gave QUAD_FRONTEND=$QUAD_FRONTEND"
command -v quadctl >/dev/null || fail "quadctl is not on PATH after eval \"\$(deploy/kube env)\""
n=$(podman ps --pod --filter pod=quad-kube --filter status=running --format '{{.Names}}' | grep -c '^quad-kube-') || true
[[ $n == 11 ]] || fail "expected 11 running containers quad-kube-* (2 brokers, PostgreSQL, 8 services), found $n"
ok "deploy/kube up: 10 containers, every service healthy through both brokers"

step="catalog.products.list"
reply=$(quadctl call catalog.products.list '{"limit":5}') || fail "quadctl call catalog.products.list exited $?: $reply"
count=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["products"]))' "$reply") || fail "no products list in: $reply"
[[ $count == 5 ]] || fail "expected 5 products, got $count"
profile=$(quadctl --as admin@quad.campus call accounts.profile.get) || fail "the admin cannot sign in with the Secret's password: $profile"
python3 -c 'import json, sys; assert json.loads(sys.argv[1])["role"] == "admin"' "$profile" || fail "admin@quad.campus is not admin: $profile"
ok "quadctl from the host: 5 products; the admin signs in with the Secret's password"

step="quad-edge run"
report=$QUAD_KUBE_HOME/edge-report.json
if ! (cd "$QUAD_KUBE_HOME" && timeout 300 quad-edge run --phones 6 --duration 30 --seed 15 --dir "$QUAD_KUBE_HOME/phones" \
    --control none --report "$report" >"$QUAD_KUBE_HOME/edge.out" 2>"$QUAD_KUBE_HOME/edge.err"); then
    tail -n 20 "$QUAD_KUBE_HOME/edge.err" "$QUAD_KUBE_HOME/edge.out" >&2
    fail "quad-edge run failed"
fi
python3 - "$report" <<'PY' || fail "the campus day's report: see above"
import json, sys
r = json.load(open(sys.argv[1]))
a, t = r["actions"], r["telemetry"]
problems = []
if not r.get("accounted"):
    problems.append("not every action is accounted for")
if a["created"] < 1 or a["pending"] != 0 or a["done"] + a["rejected"] != a["created"]:
    problems.append("actions: %s" % a)
if r["sign_in_before_day"]["phones_with_session"] != r["phones"]:
    problems.append("sign-ins: %s" % r["sign_in_before_day"])
if t["sent"] < 1 or t["queued"] != 0 or t["accepted"] + t["duplicate"] != t["sent"]:
    problems.append("telemetry: %s" % t)
for p in problems:
    print("test_kube:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
ok "quad-edge run: $(grep -m1 '^Actions:' "$QUAD_KUBE_HOME/edge.out")"

step="deploy/kube down"
"$ROOT/deploy/kube" down || fail "deploy/kube down exited $?"
podman pod exists quad-kube && fail "the pod quad-kube still exists after down"
left=$(podman ps -a --format '{{.Names}}' | grep '^quad-kube' || true)
[[ -z $left ]] || fail "containers left after down: $left"
# Every port of the table at that base (deploy/quaddeploy/ports.py, which deploy/kube reads).
eval "$(quad_ports --base "$BASE" --brokers 2 --shell | grep '^QUAD_PORTS=')"
for port in $QUAD_PORTS; do
    quad_port_free "$port" || fail "port $port is still open after down"
done
ok "deploy/kube down: no pod, container or port of it is left"
printf 'test_kube: all checks passed in %s\n' "$(quad_duration $((SECONDS - t0)))"
