#!/usr/bin/env bash
# Runs one lanes benchmark (figures 1-5 of docs/benchmarks.md, "Lanes")
# against a fresh laneway server on loopback, then stops the server.
#
#   bench/scripts/lanes.sh FIGURE [laneway serve flags...]
#
# FIGURE is one of:
#   weights13   two tenants 1:3, both saturating with 4 KiB GETs
#   mixed       1:1, tenant a streams 64 MiB GETs, tenant b 4 KiB GETs
#   lone-small  one tenant, 4 KiB GETs (run with --lanes off to compare)
#   lone-large  one tenant, 64 MiB GETs (run with --lanes off to compare)
#   lone-put    one tenant, durable 4 KiB PUTs (run with --lanes off to compare)
#   noisy       a offers a steady ${ARATE:-2000} requests/s (open loop), alone
#               for 10 s; then b joins with 128 in flight, asking for all
#               the server can give
#   noisy-split as noisy, with b driven by its own loader process
#   join        1:2:5, c joins at 10 s and leaves at 20 s
#
# Extra arguments go to `laneway serve` (e.g. --lanes off,
# --lanes-capacity 2097152). Needs a release build (cargo build --release).
# DURATION (seconds, default 20) overrides the measured time of the
# figures with one phase. PIN=0 lets server and loader float over both
# CPUs; SERVER_CPU=0.6 caps the server at that fraction of a CPU.
# SIGN_REUSE (seconds, default 60; 0 signs every request) lets the loader
# reuse a signature for identical requests, so that it spends its CPU on
# sending requests rather than on HMACs: see bench/src/sign.rs.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
figure="${1:?usage: lanes.sh FIGURE [serve flags...]}"
shift
bin="$root/target/release"
port="${PORT:-9300}"
admin_port=$((port + 1))
token="bench-admin-token-$$-$RANDOM"
dir="$(mktemp -d "${TMPDIR:-/tmp}/laneway-lanes.XXXXXX")"
d="${DURATION:-20}"

# The server runs on CPU 1 and the loader on CPU 0, so the loader cannot
# take the server's CPU: the server is the bottleneck, as it is when the
# clients are other machines. PIN=0 lets both float over both CPUs.
server_cpu=(); loader_cpu=()
if [ "${PIN:-1}" = 1 ]; then server_cpu=(taskset -c 1); loader_cpu=(taskset -c 0); fi

"${server_cpu[@]}" "$bin/laneway" serve --data-dir "$dir" --listen "127.0.0.1:$port" \
  --admin-listen "127.0.0.1:$admin_port" --admin-token "$token" "$@" \
  >"$dir.log" 2>&1 &
server=$!
cgroup=""
cleanup() {
  kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
  rm -rf "$dir" "$dir.log"
  if [ -n "$cgroup" ]; then rmdir "$cgroup" 2>/dev/null || true; fi
}
trap cleanup EXIT
# SERVER_CPU=0.6 caps the server at that fraction of one CPU (cgroup v1
# CFS quota, 10 ms period), so that the server, not the loader, stays the
# bottleneck however fast the host runs that minute. Needs root.
if [ -n "${SERVER_CPU:-}" ]; then
  cgroup="/sys/fs/cgroup/cpu/laneway-lanes-$$"
  mkdir "$cgroup"
  echo 10000 > "$cgroup/cpu.cfs_period_us"
  awk -v f="$SERVER_CPU" 'BEGIN { printf "%d\n", f * 10000 }' > "$cgroup/cpu.cfs_quota_us"
  echo "$server" > "$cgroup/cgroup.procs"
fi
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$admin_port") 2>/dev/null; then break; fi
  sleep 0.1
done
echo "# server: laneway serve $* (pid $server${SERVER_CPU:+, capped at $SERVER_CPU CPU})"

bench() {
  LANEWAY_ADMIN_TOKEN="$token" "${loader_cpu[@]}" "$bin/laneway-bench" tenants \
    --endpoint "http://127.0.0.1:$port" --admin-endpoint "http://127.0.0.1:$admin_port" \
    --reuse-signatures-secs "${SIGN_REUSE:-60}" "$@"
}

case "$figure" in
  weights13)
    bench --duration "$d" --tenant a,weight=1,conc=${CONC:-32} --tenant b,weight=3,conc=${CONC:-32} ;;
  mixed)
    bench --duration "$d" --tenant a,weight=1,conc=4,size=64MiB,objects=4 \
      --tenant b,weight=1,conc=32 ;;
  lone-small)
    bench --duration "$d" --tenant a,conc=32 ;;
  lone-put)
    bench --duration "$d" --tenant a,conc=32,mix=put:1 ;;
  lone-large)
    bench --duration "$d" --tenant a,conc=4,size=64MiB,objects=4 ;;
  noisy)
    bench --duration 20 --tenant a,weight=1,conc=4,rate=${ARATE:-2000} \
      --tenant b,weight=1,conc=128,start=10 ;;
  noisy-split)
    # As noisy, but b is driven by a second loader process under the
    # SCHED_IDLE policy, so the loader's own CPU sharing does not add to
    # a's latency: the kernel lets a waking normal task (a's loader)
    # preempt a SCHED_IDLE one at once, where a nice 19 task may finish
    # its slice first. B_SCHED="nice -n 19" gives the older setting.
    ${B_SCHED:-chrt --idle 0} bash -c "$(declare -f bench); $(declare -p bin port admin_port token loader_cpu); \
      bench --duration 20 --tenant b,weight=1,conc=128,start=10" > "$dir.b" 2>&1 &
    noisy=$!
    bench --duration 20 --cut 10 --tenant a,weight=1,conc=4,rate=${ARATE:-2000}
    wait "$noisy"; grep -E '^phase|^  b ' "$dir.b"; rm -f "$dir.b" ;;
  join)
    bench --duration 30 --tenant a,weight=1,conc=32 --tenant b,weight=2,conc=32 \
      --tenant c,weight=5,conc=32,start=10,stop=20 ;;
  *)
    echo "unknown figure $figure" >&2; exit 2 ;;
esac
