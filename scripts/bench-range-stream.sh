#!/usr/bin/env bash
# Peak server memory for one large read: `get --prefix` as one Range and as
# a RangeStream, on oxetcd, and as one Range on Debian's etcd, in one run.
#
#   scripts/bench-range-stream.sh [MB]     # result size (default 60)
#
# Each measurement starts a fresh single-member server on 127.0.0.1, loads
# MB megabytes (10 kB values), records the server's peak RSS (VmHWM), reads
# everything once with oxetcdctl, and prints the peak's growth over the
# read and how long the read took.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_setup
MB=${1:-60}
KEYS=$((MB * 100))
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT


measure() { # server mode
  local server=$1 mode=$2 port
  port=$(free_port)
  local peer="http://127.0.0.1:$((port + 1))"
  local program=$BIN/oxetcd
  [ "$server" = etcd ] && program=etcd
  "$program" --name bench --data-dir "$OUT/data" --log-level error \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "bench=$peer" \
    --quota-backend-bytes 8589934592 >"$OUT/server.log" 2>&1 &
  local pid=$!
  local ctl=("$BIN/oxetcdctl" --endpoints "127.0.0.1:$port" --command-timeout 120s)
  for _ in $(seq 1 100); do "${ctl[@]}" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
  "${ctl[@]}" bench put --clients 16 --conns 4 --total "$KEYS" --key-size 16 --val-size 10000 \
    --key-space-size "$KEYS" --sequential-keys >/dev/null
  local before after start end
  before=$(peak_kib "$pid")
  start=$(date +%s%N)
  if [ "$mode" = stream ]; then
    "${ctl[@]}" get "" --prefix --stream >"$OUT/result"
  else
    "${ctl[@]}" get "" --prefix >"$OUT/result"
  fi
  end=$(date +%s%N)
  after=$(peak_kib "$pid")
  printf '%-8s %-7s %8d MB %10d MiB %10d MiB %8d ms\n' "$server" "$mode" \
    "$(($(stat -c %s "$OUT/result") / 1000000))" "$((before / 1024))" "$(((after - before) / 1024))" \
    "$(((end - start) / 1000000))"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$OUT/data"
}

printf '%-8s %-7s %11s %14s %14s %11s\n' server read result "peak before" "peak growth" took
measure oxetcd range
measure oxetcd stream
measure etcd range
