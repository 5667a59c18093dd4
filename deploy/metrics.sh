# deploy/metrics.sh: the /metrics port of every process of a stack, and the
# 'deploy/stack metrics' command that lists them as Prometheus scrape
# targets. Sourced by deploy/stack (which defines SERVICES, PORT_BASE,
# BROKERS, RUN, QUAD_HOME and the hosts_* functions).
#
# Ports: the table's (deploy/quaddeploy/ports.py, QUAD_PORT_METRICS_*,
# which quad_ports_load sets), moved to METRICS_BASE (QUAD_METRICS_BASE at
# 'up', default the table's; off: no process serves /metrics): broker K,
# quad-edge (run it with --metrics on its port), worker N (1 to 20) of each
# service. On loopback each process serves on 127.0.0.1; on --hosts on 0.0.0.0 of
# its own host, scraped at that host's address. A worker numbered past 20
# ('scale' beyond) serves no /metrics.

# 'up': picks METRICS_BASE (before its ports are checked free) ...
metrics_choose() {
    local base=${QUAD_METRICS_BASE:-$QUAD_PORT_METRICS_BROKER_1}
    if [[ $base != off ]]; then
        [[ $base =~ ^[0-9]+$ ]] && ((base > 0 && base + QUAD_PORT_METRICS_WIDTH <= 65536)) ||
            usage_error "QUAD_METRICS_BASE must be a port number (the first of $QUAD_PORT_METRICS_WIDTH ports) or off, got '$base'"
    fi
    METRICS_BASE=$base
}

# ... and records it with the endpoints, so that 'scale', 'restart' and
# 'metrics' use the stack's own.
metrics_record() { printf 'METRICS_BASE=%q\n' "$METRICS_BASE" >>"$RUN/endpoints"; }

metrics_enabled() { [[ -n ${METRICS_BASE:-} && $METRICS_BASE != off ]]; }

# The port of broker K ($1 = broker K), of worker ($1 = SERVICE, $2 = N), or
# of quad-edge ($1 = edge); fails when the process has none.
metrics_port() {
    metrics_enabled || return 1
    local name port
    case $1 in
        broker) name=METRICS_BROKER_$2 ;;
        edge) name=METRICS_EDGE ;;
        *) name=METRICS_${1^^}_$2 ;;
    esac
    port=$(quad_port "${name//[^A-Z0-9]/_}") || return 1
    # The table's port, moved with the stack's METRICS_BASE.
    printf '%s\n' $((port - QUAD_PORT_METRICS_BROKER_1 + METRICS_BASE))
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

# The scrape targets of the running stack, JOB<TAB>INSTANCE<TAB>HOST:PORT a
# line: every broker, every worker the stack runs (its pid file is there:
# one dead or being restarted stays a target, so that its alert fires; a
# list of the live ones written while a killed worker restarted dropped it
# from Prometheus for the rest of a chaos run), quad-edge when something
# serves on its port, and each HOST:PORT of "$@" as another quad-edge.
metrics_targets() {
    local edges=("$@") k s n address
    for ((k = 1; k <= BROKERS; k++)); do
        printf 'quad-broker\t%s\t%s\n' "$(broker_prog "$k")" "$(metrics_address broker "$k")"
    done
    for s in "${SERVICES[@]}"; do
        built "$s" || continue
        for n in $(instances_of "$s"); do
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
}

metrics_usage() {
    cat <<EOF
Usage: deploy/stack metrics [--edge HOST:PORT]... [--out FILE] [--json]

Lists the Prometheus scrape targets of the running stack: every broker,
every worker it runs (one being restarted too), and quad-edge when it serves /metrics (on its port
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

With a Prometheus of 'deploy/stack up --prometheus' running, its config
(\$QUAD_HOME/prometheus/prometheus.yml) gets the same targets, these --edge
ones included, and it reloads: run it after starting quad-edge so that
Prometheus scrapes the phones too.
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
    local extra=()
    ((json)) && extra=(--json)
    metrics_targets "${edges[@]}" | quad_generate prometheus --out "${out:-$QUAD_HOME/prometheus.yml}" "${extra[@]}"
    # A Prometheus of up --prometheus scrapes the same targets (and these
    # --edge ones from now on): its config follows.
    prom_reload --edges "${edges[@]}"
}

# ------------------------------------------------------------ --prometheus
# 'deploy/stack up --prometheus' runs Debian's Prometheus (package
# prometheus) beside the stack, one more program of its supervisord
# ('prometheus', started after the workers, stopped before them):
#   $QUAD_HOME/prometheus/prometheus.yml   its config: the targets of
#                                          'deploy/stack metrics', the rules
#                                          of deploy/prometheus/rules/*.yml,
#                                          scrape and evaluation every
#                                          QUAD_PROMETHEUS_INTERVAL (5s)
#   $QUAD_HOME/prometheus/data/            its TSDB (kept across down)
#   $QUAD_HOME/logs/prometheus.log         its log
# It listens on 127.0.0.1:PROMETHEUS_PORT, QUAD_PROMETHEUS_PORT at 'up'
# (default QUAD_PORT_BASE+89, deploy/quaddeploy/ports.py), recorded with the
# endpoints. 'scale' and 'metrics' rewrite its config and send it SIGHUP (it
# reloads); a worker killed and kept down stays a target, reported down.
# docs/alerts.md says what its alerts mean.

PROM_DIR=$QUAD_HOME/prometheus
PROM_RULES=$ROOT/deploy/prometheus/rules

prom_enabled() { [[ -n ${PROMETHEUS_PORT:-} ]]; }

prom_url() { printf 'http://127.0.0.1:%s/\n' "$PROMETHEUS_PORT"; }

# Before 'up --prometheus' starts anything: what it needs is there.
prom_preflight() {
    command -v prometheus >/dev/null ||
        quad_die "--prometheus runs Debian's Prometheus, which is not installed (apt-get install prometheus; deploy/quickstart installs it)"
    [[ ${QUAD_METRICS_BASE:-} != off ]] || quad_die "--prometheus scrapes the /metrics ports, which QUAD_METRICS_BASE=off turns off"
    local port=${QUAD_PROMETHEUS_PORT:-$QUAD_PORT_PROMETHEUS}
    [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) ||
        usage_error "QUAD_PROMETHEUS_PORT must be a port number, got '$port'"
    quad_port_free "$port" ||
        quad_die "port $port on 127.0.0.1 (Prometheus) is in use: another stack? Choose another QUAD_PORT_BASE or QUAD_PROMETHEUS_PORT"
    PROMETHEUS_PORT=$port
}

# Writes $PROM_DIR/prometheus.yml for the running stack's targets (and the
# quad-edges of the last 'deploy/stack metrics --edge').
prom_config() {
    local edges=() e
    if [[ -f $PROM_DIR/edges ]]; then
        while read -r e; do [[ -n $e ]] && edges+=("$e"); done <"$PROM_DIR/edges"
    fi
    metrics_targets "${edges[@]}" |
        quad_generate prometheus --out "$PROM_DIR/prometheus.yml" --rules "$PROM_RULES/*.yml" --interval "${QUAD_PROMETHEUS_INTERVAL:-5s}" --quiet
}

# Starts Prometheus under supervisord and waits until it is ready; records
# its port with the endpoints.
prom_start() {
    mkdir -p "$PROM_DIR/data"
    chmod 700 "$PROM_DIR"
    printf 'PROMETHEUS_PORT=%q\n' "$PROMETHEUS_PORT" >>"$RUN/endpoints"
    prom_config
    sup_add prometheus "$RUN/prometheus.pid" "$LOGS/prometheus.log" 200 -- prometheus \
        --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
        --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --web.page-title="Quad stack $QUAD_HOME"
    local deadline=$((SECONDS + HEALTH_TIMEOUT))
    until quad_stackinfo ready "$(prom_url)-/ready"; do
        if ((SECONDS >= deadline)) || [[ $(sup_state prometheus) == FATAL ]]; then
            fail_with_log "Prometheus did not become ready on $(prom_url) within ${HEALTH_TIMEOUT} s" "$LOGS/prometheus.log"
        fi
        sleep 0.2
    done
    # And supervisord counts it started (QUAD_START_SECS), as 'status' shows.
    deadline=$((SECONDS + ${QUAD_START_SECS:-2} + 10))
    while [[ $(sup_state prometheus) != RUNNING ]] && ((SECONDS < deadline)); do sleep 0.2; done
}

# After the targets changed (scale, metrics): a new config, and SIGHUP so
# that Prometheus reloads it. '--edges E...' first sets the quad-edges.
prom_reload() {
    prom_enabled && [[ $(sup_state prometheus) == RUNNING ]] || return 0
    if [[ ${1:-} == --edges ]]; then
        shift
        printf '%s\n' "$@" >"$PROM_DIR/edges"
    fi
    prom_config
    sup_ctl signal HUP prometheus >/dev/null 2>&1 || true
}

prom_line() {
    prom_enabled || return 0
    quad_say "  prometheus $(prom_url)   (targets: $(prom_url)targets, alerts: $(prom_url)alerts; docs/alerts.md)"
}

# A Prometheus that a stack whose supervisord died left running.
prom_stop_orphan() {
    local pid
    pid=$(live_pid "$RUN/prometheus.pid" prometheus) || return 0
    quad_say "Stopping Prometheus (pid $pid) left by a stack whose supervisord is gone"
    stop_all "prometheus:$pid"
}
