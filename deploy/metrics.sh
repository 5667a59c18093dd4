# deploy/metrics.sh: the /metrics port of every process of a stack, and the
# 'deploy/stack metrics' command that lists them as Prometheus scrape
# targets. Sourced by deploy/stack (which defines SERVICES, PORT_BASE,
# BROKERS, RUN, QUAD_HOME and the hosts_* functions).
#
# Ports, from METRICS_BASE (QUAD_METRICS_BASE at 'up', default
# QUAD_PORT_BASE + 100; off: no process serves /metrics):
#   broker K            METRICS_BASE + K - 1          (K = 1..8)
#   quad-edge           METRICS_BASE + 9              (run it with --metrics on it)
#   worker N of the     METRICS_BASE + 10 + 20*I + N - 1
#   I-th service                                      (N = 1..20; I from 0, in SERVICES order)
# On loopback each process serves on 127.0.0.1; on --hosts on 0.0.0.0 of
# its own host, scraped at that host's address. A worker numbered past 20
# ('scale' beyond) serves no /metrics.

METRICS_WORKERS_PER_SERVICE=20

# 'up': picks METRICS_BASE and records it with the endpoints, so that
# 'scale', 'restart' and 'metrics' use the stack's own.
metrics_record() {
    local base=${QUAD_METRICS_BASE:-$((PORT_BASE + 100))}
    if [[ $base != off ]]; then
        [[ $base =~ ^[0-9]+$ ]] && ((base > 0 && base + 10 + METRICS_WORKERS_PER_SERVICE * ${#SERVICES[@]} < 65536)) ||
            usage_error "QUAD_METRICS_BASE must be a port number (the first of $((10 + METRICS_WORKERS_PER_SERVICE * ${#SERVICES[@]})) ports) or off, got '$base'"
    fi
    METRICS_BASE=$base
    printf 'METRICS_BASE=%q\n' "$METRICS_BASE" >>"$RUN/endpoints"
}

metrics_enabled() { [[ -n ${METRICS_BASE:-} && $METRICS_BASE != off ]]; }

# The port of broker K ($1 = broker K), of worker ($1 = SERVICE, $2 = N), or
# of quad-edge ($1 = edge); fails when the process has none.
metrics_port() {
    metrics_enabled || return 1
    case $1 in
        broker) printf '%s\n' $((METRICS_BASE + $2 - 1)) ;;
        edge) printf '%s\n' $((METRICS_BASE + 9)) ;;
        *)
            local i
            (($2 >= 1 && $2 <= METRICS_WORKERS_PER_SERVICE)) || return 1
            for i in "${!SERVICES[@]}"; do
                if [[ ${SERVICES[i]} == "$1" ]]; then
                    printf '%s\n' $((METRICS_BASE + 10 + METRICS_WORKERS_PER_SERVICE * i + $2 - 1))
                    return 0
                fi
            done
            return 1
            ;;
    esac
}

# The host name (deploy/hosts.sh) of broker K, worker SERVICE N, or edge.
metrics_host() {
    case $1 in
        broker) if (($2 == 1)); then printf 'broker\n'; else printf 'broker-%s\n' "$2"; fi ;;
        edge) printf 'phones\n' ;;
        *) printf '%s-%s\n' "$1" "$2" ;;
    esac
}

# The address a process is scraped at: HOST:PORT.
metrics_address() {
    local port
    port=$(metrics_port "$@") || return 1
    if hosts_enabled; then
        printf '%s:%s\n' "$(hosts_ip_of "$(metrics_host "$@")")" "$port"
    else
        printf '127.0.0.1:%s\n' "$port"
    fi
}

# The flags that make a process serve /metrics (none when it has no port):
# '--metrics HOST:PORT', with 0.0.0.0 on --hosts (the host's own namespace).
metrics_flags() {
    local port
    port=$(metrics_port "$@") || return 0
    if hosts_enabled; then printf -- '--metrics\n0.0.0.0:%s\n' "$port"; else printf -- '--metrics\n127.0.0.1:%s\n' "$port"; fi
}

metrics_usage() {
    cat <<EOF
Usage: deploy/stack metrics [--edge HOST:PORT]... [--out FILE] [--json]

Lists the Prometheus scrape targets of the running stack: every broker,
every live worker, and quad-edge when it serves /metrics (on its port
METRICS_BASE+9, or each --edge HOST:PORT given), one line each:
JOB INSTANCE URL. Writes a prometheus.yml for them (scrape_configs with
static_configs, a job per program, an instance label per process) to
\$QUAD_HOME/prometheus.yml, or FILE with --out; --json prints the targets
as JSON instead of the table.

Ports: METRICS_BASE is QUAD_METRICS_BASE at 'up' (default QUAD_PORT_BASE+100;
off: no process serves /metrics); broker K at METRICS_BASE+K-1, quad-edge at
METRICS_BASE+9 (quad-edge --metrics 127.0.0.1:PORT), worker N of the I-th
service at METRICS_BASE+10+20*I+N-1 (N up to 20). On --hosts each process
serves on its own host's address.
EOF
}

cmd_metrics() {
    local edges=() out="" json=0
    while (($#)); do
        case $1 in
            -h | --help) metrics_usage; return 0 ;;
            --edge)
                (($# >= 2)) || usage_error "metrics: --edge needs HOST:PORT"
                edges+=("$2")
                shift
                ;;
            --edge=*) edges+=("${1#--edge=}") ;;
            --out)
                (($# >= 2)) || usage_error "metrics: --out needs a file"
                out=$2
                shift
                ;;
            --out=*) out=${1#--out=} ;;
            --json) json=1 ;;
            *) usage_error "metrics: unknown argument '$1'" ;;
        esac
        shift
    done
    local k
    for ((k = 0; k < ${#edges[@]}; k++)); do
        [[ ${edges[k]} =~ ^[0-9.]+:[0-9]+$ ]] || usage_error "metrics: --edge must be HOST:PORT, got '${edges[k]}'"
    done
    load_endpoints recorded
    require_running
    metrics_enabled ||
        quad_die "the stack in $QUAD_HOME was started without /metrics ports (QUAD_METRICS_BASE=off, or before they existed): start it again with deploy/stack down && deploy/stack up"
    local s n address extra=()
    ((json)) && extra=(--json)
    {
        for ((k = 1; k <= BROKERS; k++)); do
            printf 'quad-broker\t%s\t%s\n' "$(broker_prog "$k")" "$(metrics_address broker "$k")"
        done
        for s in "${SERVICES[@]}"; do
            built "$s" || continue
            for n in $(live_instances_of "$s"); do
                address=$(metrics_address "$s" "$n") || continue
                printf 'quad-%s\t%s/%s\t%s\n' "$s" "$s" "$n" "$address"
            done
        done
        # quad-edge is not the stack's: listed when something serves on its port.
        address=$(metrics_address edge)
        if [[ " ${edges[*]} " != *" $address "* ]] && hosts_port_open "${address##*:}" "${address%:*}"; then
            printf 'quad-edge\tedge\t%s\n' "$address"
        fi
        for ((k = 0; k < ${#edges[@]}; k++)); do
            printf 'quad-edge\tedge-%s\t%s\n' $((k + 1)) "${edges[k]}"
        done
    } | PYTHONPATH="$ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" python3 -m quaddeploy.metrics --out "${out:-$QUAD_HOME/prometheus.yml}" "${extra[@]}"
}
