#!/bin/bash
# Bytes on disk per object with and without tags (docs/benchmarks.md,
# "Disk per object with and without tags"):
#
#   bench/scripts/disk_tags.sh [N]        (default 1000000)
#
# Twice, in a fresh data dir each: `laneway serve` once (to create the
# tenant), then `laneway-bench load` of N 1-byte objects through the
# store's bulk loader, first tagged as tags_scale.py tags them
# (`part=<i mod 16>` on every object, `sel=yes` on 1 %), then with
# `--untagged`; `du -sb` of the data dir after the load, divided by N.
# Needs the release binaries (cargo build --release -p laneway-gateway
# -p laneway-bench).
set -euo pipefail
N=${1:-1000000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$ROOT/target/release/laneway-bench; L=$ROOT/target/release/laneway
AK=LWDISKBENCH000000001; SK=diskBenchSecret0123456789abcdefghijklmno; TOK=disk-bench-token-0123456789
WORK=$(mktemp -d /tmp/laneway-disk-XXXXXX)
for kind in tagged untagged; do
  d=$WORK/$kind
  $L serve --data-dir $d --listen 127.0.0.1:9350 --admin-listen 127.0.0.1:9351 --admin-token $TOK --access-key $AK --secret-key $SK > $d.log 2>&1 &
  SP=$!; for i in $(seq 100); do grep -q "laneway listening" $d.log 2>/dev/null && break; sleep 0.2; done
  T=$(curl -s -H "Authorization: Bearer $TOK" http://127.0.0.1:9351/v1/tenants | python3 -c 'import json,sys; print(json.load(sys.stdin)["tenants"][0]["id"])')
  kill $SP; wait $SP || true
  before=$(du -sb $d | cut -f1)
  flag=""; [ $kind = untagged ] && flag=--untagged
  $B load --data-dir $d --tenant $T --bucket big --objects $N $flag | grep -E "^load"
  after=$(du -sb $d | cut -f1)
  echo "$kind $N: du -sb before the load $before, after $after = $(echo "$after/$N" | bc -l | cut -c1-6) B/object"
  rm -rf $d
done
rm -rf "$WORK"
