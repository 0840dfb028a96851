#!/usr/bin/env bash
# Builds and runs laneway's fuzz targets (fuzz/, cargo-fuzz + libFuzzer).
# See docs/fuzzing.md for what each target checks.
#
#   scripts/fuzz.sh smoke                      every target for FUZZ_SMOKE_SECONDS
#                                              (default 10); fails on any crash
#   scripts/fuzz.sh long [SECONDS] [TARGET..]  each target (default: all) for
#                                              SECONDS (default 600)
#   scripts/fuzz.sh build                      build the targets only
#   scripts/fuzz.sh list                       the target names
#
# Works on the stable toolchain: the default is `--sanitizer none` (laneway
# denies unsafe code, so what the fuzzer finds are panics, overflows and
# failed assertions; overflow checks and debug assertions are on). Set
# FUZZ_SANITIZER=address for AddressSanitizer, which needs nightly flags:
# the script then sets RUSTC_BOOTSTRAP=1 for that build.
#
# Installs cargo-fuzz (crates.io, --locked) when it is missing; needs a C++
# compiler for libFuzzer (g++, installed with apt-get when absent and root).
# Builds into fuzz/target (not the workspace's shared target dir): `long`
# optimised (opt-level 3), `smoke` into fuzz/target/smoke at opt-level 0,
# which builds in less than half the CPU time (the smoke run is about the
# build, the seeds and a first round of mutations, not about speed). Runs
# start the built binaries directly, so every target of one run fuzzes the
# same build even while the sources change. The
# seed corpora fuzz/corpus/TARGET are read only; inputs the fuzzer finds go
# to fuzz/target/fuzz-corpus/TARGET, crashes to fuzz/artifacts/TARGET (both
# not committed). Logs and a summary go to fuzz/target/fuzz-logs/MODE/.
#
# Environment knobs:
#   FUZZ_SMOKE_SECONDS=10   seconds per target in smoke mode
#   FUZZ_SANITIZER=none     none | address
#   FUZZ_NICE=15            nice level of builds and runs (shared machines)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
FUZZ="$ROOT/fuzz"
SANITIZER="${FUZZ_SANITIZER:-none}"
NICE=(nice -n "${FUZZ_NICE:-15}")
WORK="$FUZZ/target/fuzz-corpus"
LOGS="$FUZZ/target/fuzz-logs/${1:-none}"
# -O -a: optimised, with debug assertions and overflow checks (an
# overflowing length read from disk must be found, not wrapped).
BUILD_FLAGS=(-O -a --sanitizer "$SANITIZER")
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
# Set by the mode: where the build goes (cargo's --target-dir).
TARGET_DIR="$FUZZ/target"

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

targets() {
    sed -n 's/^name = "\(.*\)"$/\1/p' "$FUZZ/Cargo.toml" | grep -v '^laneway-fuzz$'
}

ensure_tools() {
    if ! command -v c++ >/dev/null 2>&1; then
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && apt-get install -y -qq g++ >/dev/null
        else
            echo "error: libFuzzer needs a C++ compiler (install g++)" >&2
            exit 1
        fi
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
        "${NICE[@]}" cargo install cargo-fuzz --locked
    fi
}

cargo_fuzz() {
    if [[ "$SANITIZER" != none ]]; then
        # Sanitizers are -Z flags: allowed on stable only this way.
        RUSTC_BOOTSTRAP=1 "${NICE[@]}" cargo fuzz "$@"
    else
        "${NICE[@]}" cargo fuzz "$@"
    fi
}

build() {
    echo "==> cargo fuzz build ${BUILD_FLAGS[*]} --target-dir ${TARGET_DIR#"$ROOT"/}"
    (cd "$FUZZ" && cargo_fuzz build "${BUILD_FLAGS[@]}" --target-dir "$TARGET_DIR")
}

# run TARGET SECONDS: fuzz one target; prints one summary line, returns
# non-zero on a crash (or any other libFuzzer failure).
run() {
    local t="$1" secs="$2" log="$LOGS/$1.log" rc=0
    mkdir -p "$WORK/$t" "$LOGS" "$FUZZ/artifacts/$t"
    local start=$SECONDS
    # New inputs go to the first corpus dir; the seeds stay as committed.
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_odr_violation=0}" "${NICE[@]}" \
        "$TARGET_DIR/$TRIPLE/release/$t" "$WORK/$t" "$FUZZ/corpus/$t" \
        -artifact_prefix="$FUZZ/artifacts/$t/" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || rc=$?
    local took=$((SECONDS - start))
    local execs corpus crashes
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    corpus="$(find "$WORK/$t" -type f | wc -l)"
    crashes="$(find "$FUZZ/artifacts/$t" -type f 2>/dev/null | wc -l)"
    printf '%-22s %6ss %12s execs %7s corpus files %4s artifacts  %s\n' \
        "$t" "$took" "${execs:-?}" "$corpus" "$crashes" \
        "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc, see ${log#"$ROOT"/})")" |
        tee -a "$LOGS/summary.txt"
    if [[ $rc != 0 ]]; then
        grep -E "panicked|ERROR: libFuzzer|SUMMARY|Test unit written" "$log" | head -5 >&2 || true
    fi
    return "$rc"
}

# fuzz_all SECONDS TARGET...: run each; non-zero if any failed.
fuzz_all() {
    local secs="$1" failed=0
    shift
    echo "==> $(date -u +%FT%TZ) fuzzing $# target(s) for ${secs}s each" | tee -a "$LOGS/summary.txt"
    for t in "$@"; do
        run "$t" "$secs" || failed=1
    done
    return "$failed"
}

mode="${1:-}"
[[ -n "$mode" ]] || usage
shift
mkdir -p "$LOGS"
case "$mode" in
    list) targets ;;
    build)
        ensure_tools
        build
        ;;
    smoke)
        ensure_tools
        TARGET_DIR="$FUZZ/target/smoke"
        export CARGO_PROFILE_RELEASE_OPT_LEVEL=0
        build
        mapfile -t all < <(targets)
        fuzz_all "${FUZZ_SMOKE_SECONDS:-10}" "${all[@]}"
        ;;
    long)
        secs="${1:-600}"
        [[ "$secs" =~ ^[0-9]+$ ]] || usage
        shift || true
        if (($#)); then
            chosen=("$@")
        else
            mapfile -t chosen < <(targets)
        fi
        ensure_tools
        build
        fuzz_all "$secs" "${chosen[@]}"
        ;;
    *) usage ;;
esac
