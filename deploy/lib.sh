# shellcheck shell=bash
# Shared bash helpers for deploy/stack, deploy/test and the end-to-end tests.
# Source it; it defines functions and QUAD_ROOT, and changes no shell option.

QUAD_ROOT=${QUAD_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

quad_say()  { printf '%s\n' "$*"; }
quad_warn() { printf '%s: warning: %s\n' "${QUAD_PROG:-quad}" "$*" >&2; }
quad_die()  { printf '%s: error: %s\n' "${QUAD_PROG:-quad}" "$*" >&2; exit 1; }

# An absolute path for $1, relative paths taken from the current directory.
quad_abspath() {
    case $1 in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s/%s\n' "$PWD" "${1#./}" ;;
    esac
}

# Succeeds when nothing accepts TCP connections on 127.0.0.1:$1.
quad_port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Succeeds when something accepts TCP connections on 127.0.0.1:$1.
quad_port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Prints the first port >= $1, in steps of ${2:-1}, such that the ${3:-1}
# ports from it are all free. Fails after ${4:-200} tries.
quad_free_port() {
    local port=$1 step=${2:-1} width=${3:-1} most=${4:-200} tries k ok
    for ((tries = 0; tries < most; tries++)); do
        ok=1
        for ((k = 0; k < width; k++)); do
            quad_port_free $((port + k)) || { ok=0; break; }
        done
        if ((ok)); then printf '%s\n' "$port"; return 0; fi
        port=$((port + step))
    done
    return 1
}

# python3 -m quaddeploy.ports "$@": the one table of a stack's default
# ports (deploy/quaddeploy/ports.py; --help says more).
quad_ports() {
    PYTHONPATH="$QUAD_ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" python3 -m quaddeploy.ports "$@"
}

# python3 -m quaddeploy.generate "$@": the one generator of what the
# description becomes (supervisord's config, the hosts, prometheus.yml,
# the manifests; deploy/quaddeploy/generate.py, --help says more).
quad_generate() {
    PYTHONPATH="$QUAD_ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" python3 -m quaddeploy.generate "$@"
}

# python3 -m quaddeploy.stackinfo "$@": what a running stack's JSON, /proc,
# HTTP and supervisord say (deploy/quaddeploy/stackinfo.py; --help says more).
quad_stackinfo() {
    PYTHONPATH="$QUAD_ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" python3 -m quaddeploy.stackinfo "$@"
}

# Sets QUAD_PORT_<NAME> for every port of the table of a stack at port base
# $1 with $2 brokers: deploy/stack and the scripts it sources read each port
# from these, never compute it (a stack's own METRICS_BASE moves the
# /metrics ones: metrics_port in deploy/metrics.sh).
quad_ports_load() {
    local table
    table=$(quad_ports --base "$1" --brokers "$2" --shell) ||
        quad_die "the table of ports (deploy/quaddeploy/ports.py) refused port base $1 with $2 broker(s)"
    eval "$(grep '^QUAD_PORT_[A-Z0-9_]*=[0-9]*$' <<<"$table")"
}

# The port of QUAD_PORT_$1 (quad_ports_load set it); fails when the table has none.
quad_port() {
    local v=QUAD_PORT_$1
    [[ -n ${!v:-} ]] || return 1
    printf '%s\n' "${!v}"
}

# A broker's updates socket, from its frontend's port $1: the broker's own
# rule (its frontend + QUAD_PORT_UPDATES_OFFSET, 9), for any frontend.
updates_port() { printf '%s\n' $(($1 + QUAD_PORT_UPDATES_OFFSET)); }

# Prints the first port base from ${1:-17700}, in steps of 100, at which
# every port of the table (${2:-8} brokers, the metrics range included) is
# free on 127.0.0.1 now: what a test that starts a stack passes as
# QUAD_PORT_BASE. Fails, saying so, when there is none.
quad_free_port_base() {
    quad_ports --free-from "${1:-17700}" --brokers "${2:-8}"
}

# Succeeds when the --hosts net 10.77.$1.0/24 is taken: namespaces quad$1-*,
# a link quad$1, or an address 10.77.$1.x on this machine.
quad_hosts_net_taken() {
    ip netns list 2>/dev/null | grep -q "^quad$1-" && return 0
    ip link show "quad$1" >/dev/null 2>&1 && return 0
    ip -o -4 addr show 2>/dev/null | grep -q "inet 10\.77\.$1\." && return 0
    return 1
}

# Prints the first free --hosts net K (10.77.K.0/24) from ${1:-0}: what a
# test that starts a stack with --hosts passes as QUAD_HOSTS_NET.
quad_free_hosts_net() {
    local k
    for ((k = ${1:-0}; k <= 255; k++)); do
        quad_hosts_net_taken "$k" || { printf '%s\n' "$k"; return 0; }
    done
    printf '%s: error: no free net 10.77.K.0/24 from K=%s\n' "${QUAD_PROG:-quad}" "${1:-0}" >&2
    return 1
}

# Succeeds when process $1 exists and is not a zombie. A main thread that
# has exited shows as a zombie while the other threads still wind down (and
# may still hold sockets): that process counts as alive until they are gone.
quad_alive() {
    local pid=$1 stat tasks
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]] && return 0
    tasks=(/proc/"$pid"/task/*)
    ((${#tasks[@]} > 1))
}

# Prints the basename of the program that process $1 runs (its argv[0]),
# which survives the binary being replaced by a rebuild.
quad_program_of() {
    local argv0
    argv0=$({ tr '\0' '\n' <"/proc/$1/cmdline"; } 2>/dev/null | head -n 1) || return 1
    [[ -n $argv0 ]] || return 1
    printf '%s\n' "${argv0##*/}"
}

# "3h02m", "4m05s", "12s" for a number of seconds.
quad_duration() {
    local s=$1
    if ((s >= 86400)); then printf '%dd%02dh\n' $((s / 86400)) $((s % 86400 / 3600))
    elif ((s >= 3600)); then printf '%dh%02dm\n' $((s / 3600)) $((s % 3600 / 60))
    elif ((s >= 60)); then printf '%dm%02ds\n' $((s / 60)) $((s % 60))
    else printf '%ds\n' "$s"
    fi
}

# The bin folder of the newest PostgreSQL server installed by Debian.
quad_pg_bindir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [[ -n $d && -x $d/initdb ]] || return 1
    printf '%s\n' "$d"
}

# pip install, also where the system Python is marked externally managed.
quad_pip_install() {
    python3 -m pip install -q "$@" ||
        python3 -m pip install -q --break-system-packages "$@"
}

# Installs what Quad needs and is missing: Debian's -dev packages, a
# PostgreSQL server, python3 with pip, pyzmq, jsonschema and majortomo (an
# MDP/0.2 worker and client no one here wrote, for Tests/e2e/test_majordomo.py).
quad_install_deps() {
    local pkg apt_missing=()
    # nats-server: deploy/bench sets Quad against NATS request/reply and pub/sub;
    # libssl-dev: its C client of NATS speaks TLS to the peer with encryption.
    # supervisor: supervisord runs every process of a deploy/stack (deploy/supervise.sh).
    # podman, runc, debootstrap: deploy/image and deploy/kube (Tests/e2e/test_kube.sh); runc
    # because crun fails here (deploy/containers.conf). python3-yaml: test_kube.sh
    # checks deploy/k8s against deploy/stack.json (python3 -m quaddeploy.services check-manifest).
    # prometheus (with promtool): deploy/stack up --prometheus and the rules of deploy/prometheus.
    for pkg in libzmq3-dev libsqlite3-dev libpq-dev libsodium-dev libmicrohttpd-dev libssl-dev nats-server supervisor nftables faketime podman runc debootstrap python3-yaml prometheus; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || apt_missing+=("$pkg")
    done
    quad_pg_bindir >/dev/null || apt_missing+=(postgresql)
    # Headless Chromium renders the analytics dashboard in its screenshot test.
    dpkg-query -W -f='${Status}' chromium-headless-shell 2>/dev/null | grep -q 'install ok installed' || apt_missing+=(chromium-headless-shell)
    command -v python3 >/dev/null || apt_missing+=(python3)
    { command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; } || apt_missing+=(python3-pip)
    if ((${#apt_missing[@]} > 0)); then
        quad_say "Installing with apt-get: ${apt_missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${apt_missing[@]}" </dev/null
    else
        quad_say "System packages: all present"
    fi

    if ! python3 -c 'import zmq, jsonschema' 2>/dev/null; then
        quad_say "Installing with pip: pyzmq jsonschema"
        quad_pip_install pyzmq jsonschema
    fi
    if [[ $(python3 -c 'import importlib.metadata as m; print(m.version("majortomo"))' 2>/dev/null) != 0.2.0 ]]; then
        quad_say "Installing with pip: majortomo==0.2.0"
        quad_pip_install majortomo==0.2.0
    fi
}

# `TOOL COMMAND --help` for a tool whose usage lists its commands under
# "Commands:", two spaces in: quad_help_asked ARGS says whether --help or -h
# is among a command's arguments; `usage | quad_command_usage COMMAND TOOL`
# prints that command's lines of it, then where the rest is.
quad_help_asked() {
    local arg
    for arg in "$@"; do [[ $arg == --help || $arg == -h ]] && return 0; done
    return 1
}

quad_command_usage() {
    awk -v cmd="$1" '
        /^Commands:/ { inside = 1; next }
        inside && /^[^ ]/ { exit }
        inside && /^  [a-z]/ { showing = ($1 == cmd) }
        inside && showing { print }'
    printf '\nThe environment and every other command: %s --help\n' "$2"
}

# The services of deploy/stack.json (QUAD_STACK_FILE for tests), read by its
# one reader (deploy/quaddeploy/stack.json.py, which refuses a malformed
# description naming the service and the field) into SERVICES (start order)
# and the associative arrays SERVICE_EXE, SERVICE_STORE, SERVICE_HOST,
# SERVICE_WORKERS and SERVICE_FAULTS (comma-separated), with
# QUAD_DEFAULT_BROKERS and QUAD_MAX_BROKERS. Dies, saying why, when it cannot.
quad_services_read() {
    local assignments
    assignments=$(PYTHONPATH="$QUAD_ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" python3 -m quaddeploy.services shell) ||
        quad_die "cannot read the description of the stack (${QUAD_STACK_FILE:-$QUAD_ROOT/deploy/stack.json}); see above"
    eval "$assignments"
}

# The processes of the stack in $QUAD_HOME that are not of this shell's own
# session: those with that QUAD_HOME in their environment or command line
# (PostgreSQL on its data folder too). "pid program" lines, by pid; the
# tests check that none is left after a kill or a down.
quad_stack_processes() {
    quad_stackinfo processes "$QUAD_HOME" "$$"
}
