#!/usr/bin/env bash
# Throughput of the JSON gateway against gRPC on the same server: puts and
# linearizable ranges through `oxetcdctl bench` over gRPC and with
# `--gateway` (etcd's JSON over HTTP/1.1, one connection per client), on
# oxetcd and, for reference, on Debian's etcd.
#
#   scripts/bench-gateway.sh [TOTAL] [CLIENTS]    # default 20000 requests, 16 clients
#
# Each server is a fresh single member on 127.0.0.1 with its data in a
# scratch directory; every run is bounded by its request count.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_setup
TOTAL=${1:-20000}
CLIENTS=${2:-16}
OUT=$(mktemp -d)
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$OUT"' EXIT


# Requests per second of one `oxetcdctl bench` run: its summary's line.
rate() { awk '/Requests\/sec/ {print $2}'; }

measure() { # server
  local server=$1 port
  port=$(free_port)
  local peer="http://127.0.0.1:$((port + 1))"
  local program=$BIN/oxetcd
  [ "$server" = etcd ] && program=etcd
  rm -rf "$OUT/data"
  "$program" --name bench --data-dir "$OUT/data" --log-level error \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "bench=$peer" \
    >"$OUT/server.log" 2>&1 &
  PID=$!
  local ctl=("$BIN/oxetcdctl" --endpoints "127.0.0.1:$port")
  for _ in $(seq 1 100); do "${ctl[@]}" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
  local common=(--clients "$CLIENTS" --conns 1 --total "$TOTAL" --key-size 8 --val-size 256 --key-space-size 1000)
  local grpc_put http_put grpc_range http_range
  grpc_put=$("${ctl[@]}" bench put "${common[@]}" | rate)
  http_put=$("${ctl[@]}" bench put --gateway "${common[@]}" | rate)
  grpc_range=$("${ctl[@]}" bench range "${common[@]}" | rate)
  http_range=$("${ctl[@]}" bench range --gateway "${common[@]}" | rate)
  printf '%-8s %12s %12s %12s %12s\n' "$server" "$grpc_put" "$http_put" "$grpc_range" "$http_range"
  kill "$PID"
  wait "$PID" 2>/dev/null || true
  PID=""
}

echo "$TOTAL requests, $CLIENTS clients, 256-byte values; requests/s"
printf '%-8s %12s %12s %12s %12s\n' server "put gRPC" "put JSON" "range gRPC" "range JSON"
measure oxetcd
measure etcd
