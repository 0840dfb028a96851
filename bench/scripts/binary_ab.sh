#!/bin/bash
# A/B of two laneway binaries on this machine (docs/benchmarks.md,
# "Allocator"): server CPU per GET, PUT and PutObjectTagging, then per
# listed key, with the same loader.
#
#   bench/scripts/binary_ab.sh A_BINARY B_BINARY [ROUNDS]
#
# For each round and binary (A, B, A, B, ...): `laneway serve` on a fresh
# data dir, `laneway-bench get` (20,000 keys of 4 KiB, 32 in flight, 10 s;
# it PUTs the key space first), `put` and `tag --no-prepare` likewise,
# and the server's RSS at the end. Then one 1M-object bucket is built with
# `laneway-bench load` and served by each binary in turn for two LIST
# walks of 1,000-key pages. Every figure is the bench's own output
# (server CPU from /proc of the server pid). Needs the release
# laneway-bench (cargo build --release -p laneway-bench).
set -euo pipefail
A=${1:?first laneway binary}; B=${2:?second laneway binary}; ROUNDS=${3:-2}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BENCH=$ROOT/target/release/laneway-bench
AK=LWABBENCH00000000001; SK=abBenchSecret0123456789abcdefghijklmnopq; TOK=ab-bench-token-0123456789
WORK=$(mktemp -d /tmp/laneway-ab-XXXXXX)
PORT=9320

serve() { # binary data-dir log: starts the server, sets SP
  "$1" serve --data-dir "$2" --listen 127.0.0.1:$PORT --admin-listen 127.0.0.1:$((PORT + 1)) \
    --admin-token $TOK --access-key $AK --secret-key $SK > "$3" 2>&1 &
  SP=$!
  for _ in $(seq 150); do grep -q "laneway listening" "$3" && return; sleep 0.2; done
  echo "server did not start: $3" >&2; exit 1
}
stop() { kill "$SP"; wait "$SP" 2>/dev/null || true; }
ends() { echo "rss at the end: $(grep VmRSS /proc/$SP/status | awk '{print $2 / 1024 " MiB"}')"; }

echo "# $(date -u +%FT%TZ) $(nproc) cpus; A=$A B=$B"
C="--endpoint http://127.0.0.1:$PORT --access-key $AK --secret-key $SK --objects 20000 --size 4096 --duration 10"
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    rm -rf "$WORK/ops"; serve "$bin" "$WORK/ops" "$WORK/serve-$side.log"
    echo "== round $round $side"
    "$BENCH" get $C --server-pid $SP | grep -E "^get|cpu over"
    "$BENCH" put $C --server-pid $SP | grep -E "^put|cpu over"
    "$BENCH" tag $C --server-pid $SP --no-prepare | grep -E "^tag|cpu over"
    ends; stop
  done
done

serve "$A" "$WORK/list" "$WORK/serve-list.log"
TENANT=$(curl -s -H "Authorization: Bearer $TOK" http://127.0.0.1:$((PORT + 1))/v1/tenants |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tenants"][0]["id"])')
stop
"$BENCH" load --data-dir "$WORK/list" --tenant "$TENANT" --bucket big --objects 1000000 | tail -1
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    serve "$bin" "$WORK/list" "$WORK/serve-list-$side.log"
    echo "== list round $round $side"
    "$BENCH" list --endpoint http://127.0.0.1:$PORT --access-key $AK --secret-key $SK --bucket big \
      --server-pid $SP --rounds 2 | grep -E "^round|cpu over|first page \("
    ends; stop
  done
done
rm -rf "$WORK"
