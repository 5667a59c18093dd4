#!/usr/bin/env bash
# Fuzzing in CI: every fuzz target (the envelope decoder, session tokens, the
# body decoders of every service) for a fixed number of inputs, as
# deploy/fuzz runs them: with libFuzzer and AddressSanitizer (a build of
# about two minutes), or deploy/fuzz's seeded generator where libFuzzer does
# not build. `deploy/fuzz --runs 1000000` is the long run (docs/security.md).
# QUAD_FUZZ_RUNS (default 20000) inputs per target; QUAD_FUZZ_SEED replays
# the generator.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
QUAD_PROG=test_fuzz
# shellcheck source=deploy/lib.sh
source "$ROOT/deploy/lib.sh"

fail() {
    printf 'test_fuzz: FAIL: %s\n' "$*" >&2
    exit 1
}

RUNS=${QUAD_FUZZ_RUNS:-20000}
SEED=${QUAD_FUZZ_SEED:-$(date +%s)}
WORK=$(mktemp -d /tmp/quad-fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export QUAD_FUZZ_DIR=$WORK
export QUAD_FUZZ_BUILD=${QUAD_FUZZ_BUILD:-${QUAD_BUILD_DIR:-$ROOT/.build}/fuzz}
export QUAD_FUZZ_GENERATOR_BUILD=${QUAD_BUILD_DIR:-$ROOT/.build}

printf 'test_fuzz: %s inputs per target, seed %s (QUAD_FUZZ_SEED=%s replays it)\n' "$RUNS" "$SEED" "$SEED"
rc=0
out=$("$ROOT/deploy/fuzz" --runs "$RUNS" --seed "$SEED" 2>&1) || rc=$?
printf '%s\n' "$out" | sed -n '/quad-fuzz summary/,$p'
if ((rc != 0)); then
    printf '%s\n' "$out" | tail -n 40 >&2
    for log in "$WORK"/logs/*.log; do
        grep -q -i "crash\|fatal" "$log" 2>/dev/null && { printf -- '--- %s\n' "$log" >&2; tail -n 30 "$log" >&2; }
    done
    fail "deploy/fuzz exited $rc (seed $SEED)"
fi

# Every target ran all its inputs: the envelope, tokens, and one target per
# service the launcher starts.
quad_services_read  # deploy/stack.json
services=${SERVICES[*]}
targets=$(printf '%s\n' envelope token $(printf 'service-%s\n' $services))
engine=$(grep -o 'quad-fuzz summary ([^)]*)' <<<"$out" || true)
printf 'test_fuzz: %s\n' "${engine:-no summary}"
for t in $targets; do
    line=$(grep -E "^ +$t +[0-9]+ inputs" <<<"$out" | tail -n 1) || fail "no summary line for target $t"
    read -r _ inputs _ <<<"$line"
    [[ $inputs == "$RUNS" ]] || fail "$t ran $inputs inputs, expected $RUNS: $line"
    grep -q " ok " <<<"$line" || fail "$t: $line"
done
printf 'test_fuzz: all %s targets ran %s inputs each without a crash\n' "$(wc -l <<<"$targets")" "$RUNS"
