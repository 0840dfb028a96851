#!/usr/bin/env bash
# Runs every lanes figure of docs/benchmarks.md ("Lanes") in the order
# recorded there, each against a fresh server (bench/scripts/lanes.sh).
# Needs a release build. Takes about nine minutes.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run() { echo "=== $*"; PORT="${PORT:-9400}" "$@" 2>&1 | grep -vE '^# (client|method)'; }
run env CONC=128 "$here/lanes.sh" weights13
run "$here/lanes.sh" mixed
run "$here/lanes.sh" mixed --lanes off
run "$here/lanes.sh" lone-small
run "$here/lanes.sh" lone-small --lanes off
run "$here/lanes.sh" lone-large
run "$here/lanes.sh" lone-large --lanes off
run "$here/lanes.sh" lone-put
run "$here/lanes.sh" lone-put --lanes off
run "$here/lanes.sh" noisy
run "$here/lanes.sh" noisy --lanes off
run "$here/lanes.sh" noisy-split
run "$here/lanes.sh" noisy-split --lanes off
run "$here/lanes.sh" join
run env CONC=128 "$here/lanes.sh" weights13
run "$here/lanes.sh" lone-small
run "$here/lanes.sh" lone-small --lanes off
