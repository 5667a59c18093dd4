# shellcheck shell=bash
# deploy/supervise.sh: the stack's supervisor, Debian's supervisord.
# Sourced by deploy/stack and deploy/chaos (after deploy/lib.sh); defines
# functions only and changes no shell option. On --hosts the same supervisord
# runs in the root namespace and each program enters its host's namespace.
#
# One supervisord per stack, all of it under $QUAD_HOME, nothing in /etc:
#
#   $RUN/supervisor/             mode 700
#     supervisord.conf           the daemon's config, written at 'up'
#     supervisor.sock            its control socket (chmod 0700): supervisorctl
#     supervisord.pid
#     programs/NAME.conf         one [program:NAME] each, included by the config
#     programs/NAME.sh           the program's launcher (see sup_add)
#     programs/NAME.since        the supervisord log's size when NAME was added
#   $LOGS/supervisord.log        its log: spawned, exited, stopped, gave up
#
# Programs: 'broker', 'broker-K' (K >= 2), 'postgres' (the cluster of
# --postgres, or of host pg on --hosts), and NAME-N for
# worker N of service NAME. The list is generated: adding a worker (up, scale)
# writes its file and runs `supervisorctl update NAME-N`; stopping one runs
# `stop` and `remove` and deletes the file. A second broker is one more file.
#
# Every program has autorestart=unexpected with exitcodes=0 (a process that
# dies of a signal or a failure is restarted at once; one that exits 0 by
# itself, as a worker does on a SIGTERM from outside, stays down), startsecs
# (QUAD_START_SECS, 2: up that long counts as started) and startretries
# (QUAD_START_RETRIES, 5: a process that keeps dying before startsecs is tried
# again after 1, 2, 3 ... s, then left FATAL), stopsignal TERM and
# stopwaitsecs QUAD_STOP_TIMEOUT (10) before SIGKILL. PostgreSQL stops on INT
# (fast shutdown: TERM would wait for every client to leave).
#
# Restarts are counted from supervisord's own log: each "exited: NAME (...;
# not expected)" line is a death that the stack did not ask for (a stop it
# asked for logs "stopped:", an exit 0 "expected"), which supervisord
# restarts after. The line also
# says how it ended ("terminated by SIGKILL", "exit status 1"), which
# supervisord's exit status (-1 for any signal) does not. A restart that
# the stack asked for with `supervisorctl restart` (deploy/stack restart
# postgres) logs "stopped: NAME" and counts too, shown as "restart at T". A
# program removed and added again (a worker's restart) starts from 0. The log is never
# rotated (logfile_maxbytes=0) and starts afresh at each 'up'.

# The programs' wall clock: the campus offset and deploy/chaos's skew.
# shellcheck source=deploy/clock.sh
source "$(dirname "${BASH_SOURCE[0]}")/clock.sh"

# Where supervisord's files are, for the stack in $QUAD_HOME: SUP_DIR,
# SUP_CONF, SUP_SOCK, SUP_PROGRAMS, SUP_LOG, SUP_PID, as the generator of
# its config names them (deploy/quaddeploy/generate.py, supervisor_paths).
sup_paths() {
    local assignments
    assignments=$(quad_generate paths --home "$QUAD_HOME") || quad_die "cannot name supervisord's files under $QUAD_HOME"
    eval "$assignments"
}
sup_paths

sup_pid() {
    local pid
    [[ -f $SUP_PID ]] || return 1
    pid=$(<"$SUP_PID")
    quad_alive "$pid" || return 1
    [[ $(quad_program_of "$pid" 2>/dev/null) == supervisord || $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *supervisord* ]] || return 1
    printf '%s\n' "$pid"
}

sup_running() { sup_pid >/dev/null; }

sup_ctl() { supervisorctl -c "$SUP_CONF" "$@" 9>&-; }

# Writes the config $1 (deploy/quaddeploy/generate.py's supervisord, which
# deploy/stack up renders before anything starts) and starts supervisord,
# with no program yet.
sup_start() {
    command -v supervisord >/dev/null && command -v supervisorctl >/dev/null ||
        quad_die "the stack runs under supervisord, which is not installed (apt-get install supervisor; deploy/quickstart and .ci/run install it)"
    mkdir -p "$SUP_PROGRAMS"
    chmod 700 "$SUP_DIR" "$SUP_PROGRAMS"
    rm -f "$SUP_PROGRAMS"/*
    [[ -f $SUP_LOG ]] && mv -f "$SUP_LOG" "$SUP_LOG.prev"
    printf '%s\n' "$1" >"$SUP_CONF" || quad_die "cannot write supervisord's config $SUP_CONF"
    supervisord -c "$SUP_CONF" </dev/null >>"$LOGS/supervisord.out" 2>&1 9>&- ||
        fail_with_log "supervisord did not start" "$SUP_LOG"
    local deadline=$((SECONDS + 10))
    until sup_running && sup_ctl pid >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail_with_log "supervisord did not answer on $SUP_SOCK within 10 s" "$SUP_LOG"
        sleep 0.1
    done
    quad_say "  supervisord     pid $(sup_pid)   config $SUP_CONF"
}

# sup_add NAME PIDFILE LOG PRIORITY [--user U] [--signal SIG] -- COMMAND...
# Adds program NAME and starts it. Its launcher records the pid in PIDFILE
# (when given), appends its output to LOG and execs COMMAND with the
# environment of this deploy/stack command: the pid supervisord watches is
# the program's own, so a signal to either reaches the same process.
sup_add() {
    local name=$1 pidfile=$2 log=$3 priority=$4 user="" signal=TERM
    shift 4
    while [[ $1 != -- ]]; do
        case $1 in
            --user) user=$2; shift ;;
            --signal) signal=$2; shift ;;
        esac
        shift
    done
    shift
    local script=$SUP_PROGRAMS/$name.sh
    [[ -n $user ]] && script=$(dirname "$log")/supervise-$name.sh
    {
        printf '#!/bin/bash\n# Launcher of %s, written by deploy/stack.\numask 077\n' "$name"
        # The environment the process had when deploy/stack started it itself.
        [[ -z $user ]] && export -p | grep -v '^declare -[a-z]*x[a-z]* \(SUPERVISOR_[A-Z_]*\|BASH[A-Z_]*\|SHELLOPTS\|OLDPWD\|PWD\|SHLVL\|_\)\(=\|$\)'
        [[ -n $pidfile ]] && printf 'printf "%%s\\n" "$$" >%q\n' "$pidfile"
        # The program's wall clock (libfaketime; deploy/clock.sh says how):
        # the stack's campus offset ($RUN/clock/campus, seconds, written by
        # deploy/stack clock; PostgreSQL keeps the real clock) plus the
        # program's own ($RUN/clock/NAME, "+73s", deploy/chaos's clock fault).
        # Both are read at each start, so a restart picks up a change.
        printf 'clock_campus=%q clock_own=%q\n' "$([[ $name != postgres ]] && printf '%s' "$QUAD_HOME/run/clock/campus")" "$QUAD_HOME/run/clock/$name"
        clock_launcher_code
        printf 'exec >>%q 2>&1\n' "$log"
        printf 'exec'
        printf ' %q' "$@"
        printf '\n'
    } >"$script.new"
    chmod 700 "$script.new"
    [[ -n $user ]] && chown "$user:" "$script.new"
    mv -f "$script.new" "$script"
    quad_generate program "$name" --command "$script" --priority "$priority" --signal "$signal" --directory "$QUAD_HOME" \
        ${user:+--user "$user"} >"$SUP_PROGRAMS/$name.conf.new" 9>&- ||
        quad_die "cannot write supervisord's program $name (see above)"
    # Renamed into place: a reread of another program's 'update' (deploy/stack
    # clock restarts services side by side) never sees half a file.
    mv -f "$SUP_PROGRAMS/$name.conf.new" "$SUP_PROGRAMS/$name.conf"
    stat -c %s "$SUP_LOG" 2>/dev/null >"$SUP_PROGRAMS/$name.since" || printf '0\n' >"$SUP_PROGRAMS/$name.since"
    [[ -n $pidfile ]] && rm -f "$pidfile"
    sup_ctl update "$name" >/dev/null || quad_die "supervisorctl could not add program $name (its log: $SUP_LOG)"
    [[ -n $pidfile ]] || return 0
    local deadline=$((SECONDS + 10))
    until [[ -s $pidfile ]]; do
        if ((SECONDS >= deadline)) || [[ $(sup_state "$name") == FATAL ]]; then
            fail_with_log "$name did not start under supervisord ($(sup_ctl status "$name" 2>&1 | tr -s ' '))" "$log"
        fi
        sleep 0.05
    done
}

# Stops program $1 (stopsignal, then SIGKILL after stopwaitsecs) and removes it.
sup_remove() {
    local name=$1
    sup_ctl stop "$name" >/dev/null 2>&1 || true
    sup_ctl remove "$name" >/dev/null 2>&1 || true
    rm -f "$SUP_PROGRAMS/$name".{conf,sh,since}
}

# supervisord's state of program $1: RUNNING, STARTING, BACKOFF, STOPPED,
# EXITED, FATAL, STOPPING, or UNKNOWN.
sup_state() {
    local line
    line=$(sup_ctl status "$1" 2>/dev/null) || true
    line=$(awk '{print $2}' <<<"$line")
    printf '%s\n' "${line:-UNKNOWN}"
}

# SIGKILLs program $1's process (pid $2) so that supervisord does not
# restart it: the process is frozen (SIGSTOP), supervisord is asked to stop
# it (its SIGTERM waits, pending, on the frozen process), then SIGKILL ends
# it at once. supervisord logs "stopped: NAME (terminated by SIGKILL)".
sup_kill_stay_down() {
    local name=$1 pid=$2 stopper k
    kill -STOP "$pid" 2>/dev/null || return 0
    sup_ctl stop "$name" >/dev/null 2>&1 &
    stopper=$!
    for ((k = 0; k < 100; k++)); do
        [[ $(sup_state "$name") == STOPPING ]] && break
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$stopper" 2>/dev/null || true
}

# One line per program, from supervisord itself: "NAME STATE PID UPTIME",
# PID and UPTIME (seconds) "-" when it has no process.
sup_info() {
    # The Python that supervisorctl runs on has supervisor's modules (a
    # python3 first on PATH, pyenv's say, may not).
    local python
    python=$(head -n 1 "$(command -v supervisorctl)")
    python=${python#\#!}
    PYTHONPATH="$QUAD_ROOT/deploy${PYTHONPATH:+:$PYTHONPATH}" "${python:-python3}" -m quaddeploy.stackinfo supervised "$SUP_SOCK" 2>/dev/null
}

# Stops every program and supervisord itself; what is still alive after that
# is SIGKILLed. Leaves no process of the stack. The workers get SIGTERM all
# at once (they exit 0, which supervisord does not restart): supervisord's
# own shutdown stops one program at a time, a second each. Then the rest by
# priority: the broker, then PostgreSQL.
sup_shutdown() {
    local pid
    pid=$(sup_pid) || return 0
    local n workers=() f pids=() deadline
    n=$(find "$SUP_PROGRAMS" -name '*.conf' | wc -l)
    for f in "$SUP_PROGRAMS"/*-*.conf; do
        [[ -e $f ]] || continue
        f=${f##*/}
        workers+=("${f%.conf}")
        f=$RUN/${f%.conf}
        f=${f%-*}.${f##*-}.pid
        [[ -s $f ]] && pids+=("$(<"$f")")
    done
    if ((${#workers[@]} > 0)); then
        sup_ctl signal TERM "${workers[@]}" >/dev/null 2>&1 || true
        deadline=$((SECONDS + STOP_TIMEOUT))
        for f in "${pids[@]}"; do
            while quad_alive "$f" && ((SECONDS < deadline)); do sleep 0.1; done
        done
    fi
    sup_ctl shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + (n + 1) * (STOP_TIMEOUT + 1)))
    while quad_alive "$pid"; do
        if ((SECONDS >= deadline)); then
            printf 'stack: supervisord (pid %s) did not stop within %s s; sending SIGKILL\n' "$pid" $((deadline - SECONDS)) >&2
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
}

# "COUNT|LAST" for program $1: the deaths supervisord restarted after since
# the program was added (see the top of this file; an exit 0 is not one),
# and how the last exit ended with its time, e.g. "1|SIGKILL at 15:40:01".
sup_exits() {
    local name=$1 since=0
    [[ -f $SUP_PROGRAMS/$name.since ]] && since=$(<"$SUP_PROGRAMS/$name.since")
    [[ -f $SUP_LOG ]] || { printf '0|-\n'; return 0; }
    tail -c +$((since + 1)) "$SUP_LOG" | awk -v name="$name" '
        # A restart asked for (supervisorctl restart: deploy/stack restart
        # postgres) logs "stopped: NAME (...)" while the program stays.
        index($0, " stopped: " name " (") {
            n++
            last = "restart at " substr($2, 1, 8)
            next
        }
        index($0, " exited: " name " (") {
            if (index($0, "; not expected)")) n++
            how = $0; sub(/.* exited: [^(]*\(/, "", how); sub(/; (not )?expected\)$/, "", how)
            sub(/^terminated by /, "", how); sub(/^exit status /, "exit ", how)
            at = substr($2, 1, 8)
            last = how " at " at
        }
        END { printf "%d|%s\n", n, (n ? last : "-") }'
}
