# shellcheck shell=bash
# deploy/hosts.sh: "hosts on one machine" for deploy/stack and deploy/chaos.
# Sourced by deploy/stack (after deploy/lib.sh);
# defines functions only and changes no shell option.
#
# With `deploy/stack up --hosts` every process gets a host of its own: a
# Linux network namespace with one veth on a bridge, talking real TCP.
#
#   namespace            address           what runs there
#   quadK-sw             (none)            the switch: bridge br0, one port per host
#   root namespace       10.77.K.1/24      you: quadctl, deploy/stack, the checker
#   quadK-broker         10.77.K.2         quad-broker 1 (binds its own address)
#   quadK-broker-J       10.77.K.(100+J)   quad-broker J, for J = 2 to 8 (--brokers N)
#   quadK-pg             10.77.K.3         PostgreSQL, one database per service
#   quadK-phones         10.77.K.4         quad-edge (deploy/chaos run)
#   quadK-SERVICE-N      10.77.K.(10*i+N)  worker N of the service of host i (deploy/stack.json)
#                        10.77.K.(110+7*(i-1)+N-10) for N from 10 to 16
#                        (deploy/quaddeploy/generate.py's hosts: no two alike)
#
# Every broker listens on the same ports (QUAD_PORT_BASE .. +4) of its own
# host's address; QUAD_FRONTEND and friends list them all, broker 1 first.
# All brokers share one CURVE key pair ($QUAD_HOME/keys/broker.key) and admit
# the same services' key on their internal sockets, so one key file serves
# every worker whichever broker it talks to.
# PostgreSQL on host pg runs under supervisord (program 'postgres', entering
# the pg namespace), like every other program of the stack.
#
# K is the first free net from 0 (or QUAD_HOSTS_NET), so two stacks on one
# machine do not meet. In this mode every service's store is a database on the
# PostgreSQL host (a SQLite file is never shared across hosts), unless
# QUAD_<SERVICE>_DB names one: such a service keeps one worker.
# Everything is recorded in $RUN/hosts.env and $RUN/hosts; `down` removes
# every namespace, veth and the bridge, and stops PostgreSQL (its data stays
# in $QUAD_HOME/pg, like the SQLite files in db/).
# `deploy/stack restart postgres` is `supervisorctl restart postgres`.

QUAD_HOSTS=${QUAD_HOSTS:-0}

hosts_enabled() { [[ ${QUAD_HOSTS:-0} == 1 ]]; }

hosts_ns() { printf '%s-%s\n' "$HOSTS_PREFIX" "$1"; }

# The 10.77.K.x address of host $1, fixed by its name: the table of
# deploy/quaddeploy/generate.py (hosts), read once per command.
# hosts_prepare and hosts_load read it in the command's own shell, so that
# the $(hosts_ip_of ...) of each caller does not run Python again.
declare -gA HOSTS_ADDRESS=()
hosts_table_load() {
    local name address
    HOSTS_ADDRESS=()
    while read -r name address; do HOSTS_ADDRESS[$name]=$address; done \
        < <(quad_generate hosts --subnet "$HOSTS_SUBNET" --brokers "$QUAD_MAX_BROKERS")
    ((${#HOSTS_ADDRESS[@]} > 0)) || quad_die "no table of hosts for net $HOSTS_SUBNET.0/24 (see above)"
}
hosts_ip_of() {
    ((${#HOSTS_ADDRESS[@]} > 0)) || hosts_table_load
    [[ -n ${HOSTS_ADDRESS[$1]:-} ]] || return 1
    printf '%s\n' "${HOSTS_ADDRESS[$1]}"
}

# Reads what 'up --hosts' recorded; a no-op for a loopback stack.
hosts_load() {
    if [[ -f $RUN/hosts.env ]]; then
        # shellcheck disable=SC1091
        source "$RUN/hosts.env"
        hosts_enabled && hosts_table_load
    fi
    return 0
}

# 'up', before the endpoints are computed: removes what a crashed stack on
# hosts left; with $1 = 1 (--hosts), picks the net.
hosts_prepare() {
    if [[ -f $RUN/hosts.env ]]; then
        (hosts_load && hosts_down >/dev/null 2>&1) || true
        rm -f "$RUN/hosts.env" "$RUN/hosts"
    fi
    QUAD_HOSTS=${1:-0}
    hosts_enabled || return 0
    [[ $(id -u) == 0 ]] || quad_die "--hosts makes network namespaces: run it as root"
    command -v ip >/dev/null || quad_die "--hosts needs the ip command (apt-get install iproute2)"
    local k
    if [[ -n ${QUAD_HOSTS_NET:-} ]]; then
        [[ $QUAD_HOSTS_NET =~ ^[0-9]+$ ]] && ((QUAD_HOSTS_NET <= 255)) ||
            usage_error "QUAD_HOSTS_NET must be 0 to 255, got '$QUAD_HOSTS_NET'"
        k=$QUAD_HOSTS_NET
        hosts_net_taken "$k" && quad_die "net $k is in use (namespaces quad$k-* or addresses 10.77.$k.x exist): another stack? choose another QUAD_HOSTS_NET"
    else
        for ((k = 0; k <= 255; k++)); do hosts_net_taken "$k" || break; done
        ((k <= 255)) || quad_die "no free net 10.77.K.0/24 for --hosts"
    fi
    HOSTS_NET=$k
    HOSTS_PREFIX=quad$k
    HOSTS_SUBNET=10.77.$k
    hosts_table_load
}

hosts_net_taken() { quad_hosts_net_taken "$1"; }

# Endpoints of a stack on hosts: each broker's own address, same ports;
# comma-separated lists, broker 1 first (BROKERS of them).
hosts_endpoints() {
    hosts_enabled || return 0
    local ip k sep=""
    QUAD_FRONTEND="" QUAD_BACKEND="" QUAD_EVENTS_IN="" QUAD_EVENTS_OUT="" QUAD_INTERNAL=""
    for ((k = 1; k <= ${BROKERS:-1}; k++)); do
        if ((k == 1)); then ip=$(hosts_ip_of broker); else ip=$(hosts_ip_of "broker-$k"); fi
        # Every broker on broker 1's ports of the table, at its own address.
        QUAD_FRONTEND+=$sep"tcp://$ip:$QUAD_PORT_BROKER1_FRONTEND"
        QUAD_BACKEND+=$sep"tcp://$ip:$QUAD_PORT_BROKER1_BACKEND"
        QUAD_EVENTS_IN+=$sep"tcp://$ip:$QUAD_PORT_BROKER1_EVENTS_IN"
        QUAD_EVENTS_OUT+=$sep"tcp://$ip:$QUAD_PORT_BROKER1_EVENTS_OUT"
        QUAD_INTERNAL+=$sep"tcp://$ip:$QUAD_PORT_BROKER1_INTERNAL"
        sep=,
    done
    # Each analytics worker serves the dashboard on its own host's address.
    [[ $QUAD_ANALYTICS_HTTP == off ]] || QUAD_ANALYTICS_HTTP=0.0.0.0:${QUAD_ANALYTICS_HTTP##*:}
}

# Succeeds when something accepts TCP on port $1 of host address $2 (default
# broker 1's host; 127.0.0.1 on a loopback stack).
hosts_port_open() {
    if hosts_enabled; then
        (exec 3<>"/dev/tcp/${2:-$HOSTS_SUBNET.2}/$1") 2>/dev/null
    else
        quad_port_open "$1"
    fi
}

# ------------------------------------------------------------------ network

# 'up --hosts': the switch, the root's port, the broker's, phones' and pg's
# hosts, PostgreSQL; records everything in $RUN/hosts.env.
hosts_up() {
    hosts_enabled || return 0
    local sw
    sw=$(hosts_ns sw)
    : >"$RUN/hosts"
    {
        printf 'QUAD_HOSTS=1\nHOSTS_NET=%q\nHOSTS_PREFIX=%q\nHOSTS_SUBNET=%q\n' "$HOSTS_NET" "$HOSTS_PREFIX" "$HOSTS_SUBNET"
    } >"$RUN/hosts.env"
    quad_say "Making hosts on net $HOSTS_SUBNET.0/24 (namespaces $HOSTS_PREFIX-*)"
    ip netns add "$sw" || quad_die "cannot make network namespace $sw"
    ip -n "$sw" link add br0 type bridge || quad_die "cannot make the bridge in $sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link set br0 up
    # The root namespace is a host too (10.77.K.1): quadctl, status, the checker.
    ip -n "$sw" link add root type veth peer name "$HOSTS_PREFIX" netns 1 ||
        quad_die "cannot make veth $HOSTS_PREFIX in the root namespace"
    ip -n "$sw" link set root master br0 up
    ip addr add "$HOSTS_SUBNET.1/24" dev "$HOSTS_PREFIX"
    ip link set "$HOSTS_PREFIX" up
    hosts_add broker
    hosts_add phones
    # PostgreSQL is started by hosts_pg_up, after supervisord (its program).
}

# Makes host $1 (a namespace, a veth on the bridge, its address); idempotent.
hosts_add() {
    local name=$1 ns ip port sw
    ns=$(hosts_ns "$name")
    sw=$(hosts_ns sw)
    ip=$(hosts_ip_of "$name") || quad_die "no address for host '$name'"
    if ip netns list | grep -q "^$ns\( \|$\)"; then
        grep -q "^$name " "$RUN/hosts" 2>/dev/null || printf '%s %s\n' "$name" "$ip" >>"$RUN/hosts"
        return 0
    fi
    port=h${ip##*.}
    ip netns add "$ns" || quad_die "cannot make network namespace $ns"
    ip -n "$sw" link del "$port" 2>/dev/null || true
    ip -n "$sw" link add "$port" type veth peer name eth0 netns "$ns" || quad_die "cannot make the veth of host $name"
    ip -n "$sw" link set "$port" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    printf '%s %s\n' "$name" "$ip" >>"$RUN/hosts"
}

# Removes host $1: what still runs there is killed, then its namespace
# (its veth goes with it).
hosts_remove() {
    hosts_enabled || return 0
    local name=$1 ns pids
    ns=$(hosts_ns "$name")
    if ip netns list | grep -q "^$ns\( \|$\)"; then
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086
        [[ -n ${pids// /} ]] && kill -KILL $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null || quad_warn "cannot remove namespace $ns"
    fi
    [[ -f $RUN/hosts ]] && sed -i "/^$name /d" "$RUN/hosts"
    return 0
}

# Host of worker $1/$2 after it stopped: gone with it.
hosts_worker_gone() { hosts_remove "$1-$2"; }

# 'down': every host, the switch, the root's veth, PostgreSQL.
hosts_down() {
    hosts_enabled || return 0
    hosts_pg_down
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$HOSTS_PREFIX-"); do
        hosts_remove "${ns#"$HOSTS_PREFIX"-}"
    done
    ip link del "$HOSTS_PREFIX" 2>/dev/null || true
    # Namespaces are torn down asynchronously: wait for their links to go.
    local k
    for ((k = 0; k < 50; k++)); do
        ip link show "$HOSTS_PREFIX" >/dev/null 2>&1 || break
        sleep 0.1
    done
    rm -f "$RUN/hosts" "$RUN/hosts.env" "$RUN/chaos.partitions"
    quad_say "Removed the hosts of net $HOSTS_SUBNET.0/24 (namespaces, veths, bridge)."
    QUAD_HOSTS=0
}

# Lists the hosts: "name address namespace".
hosts_list() {
    [[ -f $RUN/hosts ]] || return 0
    local name ip
    while read -r name ip; do
        [[ -n $name ]] && printf '%s %s %s\n' "$name" "$ip" "$(hosts_ns "$name")"
    done <"$RUN/hosts"
}

# ---------------------------------------------------------------- PostgreSQL

# One PostgreSQL server on host pg; a database per service whose store is not
# given by QUAD_<SERVICE>_DB. Data in ${QUAD_HOSTS_PG_DIR:-$QUAD_HOME/pg}.
hosts_pg_up() {
    local s var want=() pgbin dir port=5432 ip ns
    for s in "${SERVICES[@]}"; do
        built "$s" || continue
        var=QUAD_$(printf '%s' "$s" | tr '[:lower:]-' '[:upper:]_')_DB
        [[ -n ${!var:-} ]] && continue
        want+=("$s")
    done
    ((${#want[@]} > 0)) || return 0
    pgbin=$(quad_pg_bindir) || quad_die "--hosts puts services on PostgreSQL, which is not installed (apt-get install postgresql)"
    dir=$(quad_abspath "${QUAD_HOSTS_PG_DIR:-$QUAD_HOME/pg}")
    mkdir -p "$dir"
    chown postgres: "$dir"
    chmod 700 "$dir"
    runuser -u postgres -- test -w "$dir" ||
        quad_die "the postgres user cannot write $dir (a parent folder is closed to others?): set QUAD_HOSTS_PG_DIR to a folder it can reach"
    hosts_add pg
    ip=$HOSTS_SUBNET.3
    ns=$(hosts_ns pg)
    if [[ ! -f $dir/data/PG_VERSION ]]; then
        runuser -u postgres -- "$pgbin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; quad_die "initdb failed in $dir/data"; }
    fi
    # Trust from the hosts' net only (the server listens on its host alone).
    printf 'local all all trust\nhost all all 10.77.0.0/16 trust\n' >"$dir/data/pg_hba.conf"
    chown postgres: "$dir/data/pg_hba.conf"
    local options=(-c "listen_addresses=$ip" -p "$port" -k "$dir" -c max_connections=200 -c shared_buffers=64MB)
    # Program 'postgres' of supervisord (deploy/supervise.sh): it enters
    # host pg's namespace as root, then setpriv drops to the postgres user
    # and execs the server, so supervisord watches the postmaster itself;
    # SIGINT is PostgreSQL's fast shutdown.
    if [[ -f $dir/data/postmaster.pid ]] && runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        quad_die "a PostgreSQL server already runs on $dir/data (another stack on this QUAD_HOME?); stop it with: deploy/stack down"
    fi
    sup_add postgres "" "$dir/server.log" 5 --signal INT -- ip netns exec "$ns" \
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$pgbin/postgres" -D "$dir/data" "${options[@]}"
    {
        printf 'HOSTS_PG_DIR=%q\nHOSTS_PG_BIN=%q\n' "$dir" "$pgbin"
    } >>"$RUN/hosts.env"
    HOSTS_PG_DIR=$dir HOSTS_PG_BIN=$pgbin
    hosts_pg_wait_ready 60 || {
        tail -n 20 "$dir/server.log" >&2
        quad_die "PostgreSQL did not accept connections on host pg ($ip:$port) within 60 s (supervisord: $(sup_state postgres); its log: $dir/server.log)"
    }
    local url
    for s in "${want[@]}"; do
        var=QUAD_$(printf '%s' "$s" | tr '[:lower:]-' '[:upper:]_')_DB
        runuser -u postgres -- "$pgbin/psql" -h "$dir" -p "$port" -U postgres -Atqc \
            "SELECT 1 FROM pg_database WHERE datname = 'quad_$s'" postgres | grep -q 1 ||
            runuser -u postgres -- "$pgbin/createdb" -h "$dir" -p "$port" -U postgres "quad_$s" ||
            quad_die "cannot create database quad_$s"
        url=postgres://postgres@$ip:$port/quad_$s
        printf -v "$var" '%s' "$url"
        export "${var?}"
        printf 'export %s=%q\n' "$var" "$url" >>"$RUN/hosts.env"
    done
    quad_say "  pg              $ip:$port   databases quad_{$(IFS=,; echo "${want[*]}")}"
}

# Waits up to $1 seconds until PostgreSQL on host pg accepts connections
# (through its socket folder, which every namespace sees); fails after that
# or once supervisord gave up on it.
hosts_pg_wait_ready() {
    local deadline=$((SECONDS + $1))
    until runuser -u postgres -- "$HOSTS_PG_BIN/pg_isready" -q -h "$HOSTS_PG_DIR" -p 5432 >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        [[ $(sup_state postgres) == FATAL ]] && return 1
        sleep 0.1
    done
}

hosts_pg_down() {
    [[ -n ${HOSTS_PG_DIR:-} && -f $HOSTS_PG_DIR/data/postmaster.pid ]] || return 0
    runuser -u postgres -- "$HOSTS_PG_BIN/pg_ctl" -D "$HOSTS_PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        runuser -u postgres -- "$HOSTS_PG_BIN/pg_ctl" -D "$HOSTS_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
}

# Refuses a second worker of a service whose store is a SQLite file on hosts.
hosts_check_scale() {
    hosts_enabled || return 0
    local name=$1 want=$2 db
    db=$(db_of "$name")
    if ((want > 1)) && [[ $db != *://* ]]; then
        quad_die "$name's store is the SQLite file $db, which is never shared across hosts: on --hosts it keeps one worker (unset QUAD_$(printf '%s' "$name" | tr '[:lower:]-' '[:upper:]_')_DB to put it on the stack's PostgreSQL)"
    fi
}
