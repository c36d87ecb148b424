#!/usr/bin/env bash
# Put latency while the backend is defragmented, oxetcd against Debian's
# etcd in one run: what an operator's `etcdctl defrag` costs the clients.
#
#   scripts/bench-defrag.sh [MIB]       # backend to build, MiB (default 1024)
#   BENCH_BIN=dir scripts/bench-defrag.sh   # binaries in dir, build nothing
#   BENCH_KINDS="oxetcd etcd" scripts/bench-defrag.sh
#
# For each server, on a fresh data dir: MIB MiB of 8 KiB values are put over
# half as many keys as puts (so each key holds about two versions), then
# compacted at the last revision, which leaves about half of the backend
# free for a defragmentation to return. Then twice, a paced put load
# (RATE puts/s from 16 clients, 256 B values, DURATION seconds): once
# alone, once with `etcdctl defrag` started 2 s in. Printed per server: the
# backend size before and after the defrag, how long the defrag took, and
# the put p50/p99/max of the samples that started while it ran, against the
# same window of the run without it. Raw samples land in bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_setup
MIB=${1:-1024}
RATE=${RATE:-2000}
DURATION=${DURATION:-20}
OUT=bench-out
mkdir -p "$OUT"

start_server() { # name kind port dir
  local kind=$2 port=$3 dir=$4
  rm -rf "$dir"
  local flags=(--name bench --data-dir "$dir" --listen-client-urls "http://127.0.0.1:$port"
    --advertise-client-urls "http://127.0.0.1:$port" --log-level error
    --quota-backend-bytes $((8 * 1024 * 1024 * 1024)))
  case $kind in
    etcd) etcd "${flags[@]}" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-cluster "bench=http://127.0.0.1:$((port + 1))" >"$OUT/$1.log" 2>&1 & ;;
    *) "$BIN/$kind" "${flags[@]}" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-cluster "bench=http://127.0.0.1:$((port + 1))" >"$OUT/$1.log" 2>&1 & ;;
  esac
  echo $!
}

ctl() { ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$PORT" --command-timeout 600s "$@"; }

wait_ready() {
  for _ in $(seq 1 100); do
    if ctl endpoint health >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "server on port $PORT did not become healthy" >&2
  return 1
}

db_mib() { # the backend's size as the server reports it
  ctl endpoint status -w json | python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)[0]["Status"]["dbSize"] / 1048576))'
}

load() { # csv -> paced puts for DURATION seconds
  "$BIN/oxetcdctl" --endpoints "127.0.0.1:$PORT" bench put --clients 16 --conns 4 \
    --rate "$RATE" --duration "${DURATION}s" --key-size 8 --val-size 256 \
    --key-space-size 10000 --csv "$1" >/dev/null
}

# p50/p99/max in ms of the samples of csv $1 that started within [$2, $3) µs.
window() {
  tail -n +2 "$1" | awk -F, -v a="$2" -v b="$3" '$1 >= a && $1 < b {print $2}' | sort -n |
    awk '{v[NR] = $1} END {
      if (NR == 0) { print "- - - 0"; exit }
      i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
      i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
      printf "%.2f %.2f %.2f %d\n", v[i50] / 1000, v[i99] / 1000, v[NR] / 1000, NR }'
}

now_us() { echo $(($(date +%s%N) / 1000)); }

echo "backend ${MIB} MiB of 8 KiB values; load ${RATE} puts/s, 16 clients, ${DURATION} s"
printf '%-12s %9s %9s %9s | %-26s | %-26s\n' server "db MiB" "after" "defrag s" \
  "with defrag p50/p99/max ms" "without p50/p99/max ms"
for kind in ${BENCH_KINDS:-oxetcd etcd}; do
  PORT=$(free_port)
  pid=$(start_server "$kind-defrag" "$kind" "$PORT" "$OUT/$kind-defrag.data")
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_ready
  puts=$((MIB * 128))
  "$BIN/oxetcdctl" --endpoints "127.0.0.1:$PORT" bench put --clients 64 --conns 8 \
    --total "$puts" --key-size 16 --val-size 8192 --key-space-size $((puts / 2)) >/dev/null
  revision=$(ctl endpoint status -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["header"]["revision"])')
  ctl compact "$revision" --physical >/dev/null
  before=$(db_mib)

  load "$OUT/$kind-defrag-without.csv"

  started=$(now_us)
  load "$OUT/$kind-defrag-with.csv" &
  loader=$!
  sleep 2
  defrag_from=$(now_us)
  ctl defrag >/dev/null
  defrag_to=$(now_us)
  wait "$loader"
  after=$(db_mib)
  from=$((defrag_from - started))
  to=$((defrag_to - started))
  read -r w50 w99 wmax wn <<<"$(window "$OUT/$kind-defrag-with.csv" "$from" "$to")"
  read -r o50 o99 omax _ <<<"$(window "$OUT/$kind-defrag-without.csv" "$from" "$to")"
  printf '%-12s %9s %9s %9.2f | %8s %8s %8s | %8s %8s %8s  (%s puts during defrag)\n' "$kind" \
    "$before" "$after" "$(awk -v us="$((to - from))" 'BEGIN {print us / 1e6}')" \
    "$w50" "$w99" "$wmax" "$o50" "$o99" "$omax" "$wn"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
