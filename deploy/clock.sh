# shellcheck shell=bash
# deploy/clock.sh: the wall clock a stack's programs run on (libfaketime).
# Sourced by deploy/supervise.sh; defines functions only and changes no
# shell option.
#
# Two offsets, both files under $QUAD_HOME/run/clock/, read by a program's
# launcher (deploy/supervise.sh) each time supervisord starts it:
#
#   campus   the stack's campus clock, whole seconds ahead of real time
#            ("+259200"), written by `deploy/stack clock +3d` on a stack
#            started with `deploy/stack up --demo`, removed by `clock reset`.
#            Every program but PostgreSQL runs on it: brokers and workers.
#   NAME     one program's own skew (deploy/chaos's clock fault, "+73s",
#            "-45s"; a number with s, m, h, d, w or y, or seconds).
#
# The two add up: orders-1 with "+73s" on a campus at +1h runs at +3673 s.
# A program's own file in any other form of FAKETIME (an absolute
# "@2026-12-24 10:00:00") is taken as it is and the campus offset ignored.
#
# A program on an offset runs with LD_PRELOAD=libfaketime, FAKETIME=+Ns,
# FAKETIME_DONT_FAKE_MONOTONIC=1 (ZeroMQ's heartbeats and every timer keep
# the real monotonic clock) and FAKETIME_NO_CACHE=1, exec'd by the launcher
# itself: never the faketime(1) wrapper, whose own process stays between
# supervisord and the program and is left behind when the program is
# SIGKILLed; nor env(1), which under libfaketime leaves a semaphore and
# shared memory in /dev/shm at each start (see below).
#
# FAKETIME_SHARED names a semaphore and shared memory that do not exist.
# libfaketime 0.9.10 gives every process a pair in /dev/shm of its own
# (faketime_shm_PID, sem.faketime_sem_PID, unless FAKETIME_SHARED names a
# live pair) and writes their names into FAKETIME_SHARED with setenv(3).
# When the variable is not in the environment yet, setenv moves the
# environment to a new array, and a Swift program then sees none of its
# arguments (CommandLine.arguments is empty: seen with Swift 6.3, which
# appears to find them next to the environment); when it is there already,
# setenv replaces its value in place and the program sees its arguments. libfaketime removes
# the pair when the process exits; not when it is SIGKILLed, not when it
# execs another program (env, ip netns exec on --hosts: the program keeps
# the pid, not the pair), and never for a shell (which rebuilds its
# environment). deploy/stack kill and the stop of a worker remove the pair
# of the pid they ended; a shell's quad-edge and quadctl on the campus
# clock are shell functions (deploy/stack env), so that no shell runs under
# libfaketime.

# A name that exists neither as a semaphore nor as shared memory.
CLOCK_NO_SHM="/quad-faketime-none /quad-faketime-none"

# libfaketime 0.9.10 makes its pair under the process's pid with O_EXCL and
# gives up when one of that name is there already: it was left by a dead
# process of the same pid (SIGKILLed, or one that exec'd another program),
# and the new process then exits at its first clock read ("sem_open failed
# and recreation attempts failed"). Pids come round (pid_max is 32,768
# here), and a day of tests leaves hundreds of such pairs: quadctl on the
# campus clock died so in one CI run of test_clock.sh. So whatever starts a
# program under libfaketime removes the pair of the pid the program will
# have first: the launcher and quad_clock exec it, keeping their pid.
CLOCK_CLEAR_SELF='rm -f "/dev/shm/sem.faketime_sem_$$" "/dev/shm/faketime_shm_$$";'

# The path of libfaketime.so.1, or fails.
clock_lib() {
    local l
    for l in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do
        [[ -f $l ]] && { printf '%s\n' "$l"; return 0; }
    done
    return 1
}

# Removes the semaphore and shared memory libfaketime made for process $1,
# which has ended: SIGKILLed, or not their owner (a C program made them
# before it exec'd the program).
clock_forget_pid() {
    [[ $1 =~ ^[0-9]+$ ]] || return 0
    rm -f "/dev/shm/faketime_shm_$1" "/dev/shm/sem.faketime_sem_$1"
}

# Seconds of an offset "+73s", "-2h", "+5d", "259200"; fails on any other form.
clock_secs() {
    [[ $1 =~ ^([+-]?)([0-9]{1,12})([smhdwy]?)$ ]] || return 1
    local u=1 n
    case ${BASH_REMATCH[3]} in
        m) u=60 ;; h) u=3600 ;; d) u=86400 ;; w) u=604800 ;; y) u=31536000 ;;
    esac
    n=$((10#${BASH_REMATCH[2]} * u))
    [[ ${BASH_REMATCH[1]} == - ]] && n=$((-n))
    printf '%s\n' "$n"
}

# Seconds of a move forward as `deploy/stack clock` takes it: "+3d", "+2h",
# "+90m", "+45s", "+1w", "+1d12h", or "+3600" (seconds); fails otherwise.
clock_parse_move() {
    local v=${1#+} total=0 u
    [[ $1 == +* && -n $v ]] || return 1
    if [[ $v =~ ^[0-9]{1,12}$ ]]; then
        printf '%s\n' $((10#$v))
        return 0
    fi
    while [[ -n $v ]]; do
        [[ $v =~ ^([0-9]{1,9})([wdhms])(.*)$ ]] || return 1
        case ${BASH_REMATCH[2]} in
            w) u=604800 ;; d) u=86400 ;; h) u=3600 ;; m) u=60 ;; s) u=1 ;;
        esac
        total=$((total + 10#${BASH_REMATCH[1]} * u))
        v=${BASH_REMATCH[3]}
    done
    printf '%s\n' "$total"
}

# "+3d", "+1d2h30m", "+45s", "+0s" for a number of seconds.
clock_fmt() {
    local s=$1 sign=+ out=""
    ((s < 0)) && { sign=-; s=$((-s)); }
    ((s / 86400)) && out+=$((s / 86400))d
    ((s % 86400 / 3600)) && out+=$((s % 86400 / 3600))h
    ((s % 3600 / 60)) && out+=$((s % 3600 / 60))m
    ((s % 60)) && out+=$((s % 60))s
    printf '%s%s\n' "$sign" "${out:-0s}"
}

# The campus offset in seconds of the stack in $QUAD_HOME (0 when none).
clock_campus() {
    local f=$QUAD_HOME/run/clock/campus v
    [[ -s $f ]] || { printf '0\n'; return 0; }
    v=$(<"$f")
    v=${v//[[:space:]]/}
    clock_secs "$v" 2>/dev/null || printf '0\n'
}

# Writes the campus offset $1 (seconds; 0 removes the file).
clock_campus_write() {
    local dir=$QUAD_HOME/run/clock
    if (($1 == 0)); then
        rm -f "$dir/campus"
        return 0
    fi
    mkdir -p "$dir"
    chmod 700 "$dir"
    printf '+%s\n' "$1" >"$dir/campus.new"
    mv -f "$dir/campus.new" "$dir/campus"
}

# The time on the campus clock (offset $1 seconds), ISO 8601 UTC.
clock_campus_time() { date -u -d "@$(($(date +%s) + $1))" +%Y-%m-%dT%H:%M:%SZ; }

# libfaketime's variables for a program on the campus clock (offset $1
# seconds), as one line of NAME=VALUE words (quoted for a shell).
clock_vars() {
    local lib
    lib=$(clock_lib) || return 1
    printf 'LD_PRELOAD=%q FAKETIME=%q FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_NO_CACHE=1 FAKETIME_SHARED=%q\n' "$lib" "+${1}s" "$CLOCK_NO_SHM"
}

# Shell lines that put quad-edge and quadctl of a shell on the campus clock
# (offset $1 seconds): functions of those names that run them under
# libfaketime, and quad_clock COMMAND for any other command. Only they run
# on it: the shell's other commands (git, date, deploy/stack) keep the real
# clock, and no shell runs under libfaketime (a shell leaves libfaketime's
# semaphore and shared memory in /dev/shm behind at each start). At 0,
# lines that take them away again.
clock_env_lines() {
    local off=$1 vars
    if ((off != 0)) && vars=$(clock_vars "$off"); then
        printf '# The campus clock is %s (deploy/stack clock): quad-edge and quadctl from this shell run on it; quad_clock COMMAND runs any other.\n' "$(clock_fmt "$off")"
        # bash (not under libfaketime) removes what a dead process of its
        # pid left, then env(1) execs the command under libfaketime.
        printf 'quad_clock() { bash -c %q quad_clock %s "$@"; }\n' "$CLOCK_CLEAR_SELF"' exec env "$@"' "$vars"
        printf '%s\n' 'quad-edge() { quad_clock quad-edge "$@"; }' 'quadctl() { quad_clock quadctl "$@"; }'
    else
        printf '%s\n' 'unset -f quad_clock quad-edge quadctl 2>/dev/null || true'
    fi
}

# The launcher's code that sets the clock (deploy/supervise.sh's sup_add
# writes it after clock_campus= and clock_own=, the two files): it exports
# libfaketime's variables when the program runs on an offset, and takes away
# those a shell on the campus clock (deploy/stack env) would pass on.
clock_launcher_code() {
    declare -f clock_secs
    # shellcheck disable=SC2016
    printf '%s\n' \
        '[[ ${LD_PRELOAD:-} != *libfaketime* ]] || unset LD_PRELOAD FAKETIME FAKETIME_DONT_FAKE_MONOTONIC FAKETIME_NO_CACHE FAKETIME_SHARED' \
        'off=0; raw=' \
        'if [[ -n $clock_campus && -s $clock_campus ]]; then v=$(<"$clock_campus"); v=${v//[[:space:]]/}; s=$(clock_secs "$v") && off=$s; fi' \
        'if [[ -s $clock_own ]]; then v=$(<"$clock_own"); v=${v//[[:space:]]/}; if s=$(clock_secs "$v"); then off=$((off + s)); else raw=$v; fi; fi' \
        'if [[ -n $raw ]] || ((off != 0)); then' \
        '    for l in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do' \
        '        [[ -f $l ]] || continue' \
        '        if ((off < 0)); then ft=${off}s; else ft=+${off}s; fi' \
        "        export LD_PRELOAD=\$l FAKETIME=\${raw:-\$ft} FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_NO_CACHE=1 FAKETIME_SHARED='$CLOCK_NO_SHM'" \
        "        $CLOCK_CLEAR_SELF  # a dead namesake's pair: libfaketime would exit (clock.sh)" \
        '        break' \
        '    done' \
        'fi'
}
