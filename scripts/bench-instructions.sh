#!/usr/bin/env bash
# Instructions the server executes per request, counted by valgrind's
# callgrind: a figure that does not move with the machine's load, for
# changes of a few percent that wall-clock runs cannot tell apart.
#
#   scripts/bench-instructions.sh [REQUESTS] [-- LOAD ARGS]
#   BENCH_BIN=dir scripts/bench-instructions.sh      # binaries in dir
#
# One member starts under callgrind on a fresh data dir on 127.0.0.1, with
# counting off; a short warm-up load runs, counting is switched on for the
# measured load (scripts/clientv3-load, default 5000 puts from 64 clients
# on 16 connections) and off after it. Printed: the load's own summary,
# the instructions per request (REQUESTS, default 5000: the puts, or the
# deliveries of a watch load), and the functions with the most
# instructions. The profile is kept in bench-out/ for callgrind_annotate.
# The server runs some 50 times slower under callgrind, so batches are
# larger than at full speed: compare builds with each other, not with
# wall-clock figures.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
scripts/install-deps.sh valgrind
REQUESTS=5000
if [ $# -gt 0 ] && [ "$1" != "--" ]; then REQUESTS=$1; shift; fi
[ "${1:-}" = "--" ] && shift
LOAD=("$@")
[ ${#LOAD[@]} -gt 0 ] || LOAD=(-mode put -clients 64 -conns 16 -total 5000)
bench_setup
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$PWD/$TARGET ;; esac
LOADGEN=$TARGET/bench/clientv3-load
if [ ! -x "$LOADGEN" ]; then
  scripts/install-deps.sh e2e
  mkdir -p "$TARGET/bench"
  GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$TARGET/e2e/gocache" \
    go build -o "$LOADGEN" ./scripts/clientv3-load
fi
OUT=bench-out
mkdir -p "$OUT"
PORT=$(free_port)
DIR=$(mktemp -d "${TMPDIR:-/tmp}/oxetcd-instr.XXXXXX")
PROFILE="$OUT/callgrind.$(date +%Y%m%d-%H%M%S).out"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$PROFILE" \
  "$BIN/oxetcd" --data-dir "$DIR/data" \
  --listen-client-urls "http://127.0.0.1:$PORT" --advertise-client-urls "http://127.0.0.1:$PORT" \
  --listen-peer-urls "http://127.0.0.1:$((PORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 1))" \
  --initial-cluster "default=http://127.0.0.1:$((PORT + 1))" >"$DIR/log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"' EXIT
for _ in $(seq 120); do
  curl -fsm 2 "http://127.0.0.1:$PORT/health" 2>/dev/null | grep -q true && break
  sleep 0.5
done
curl -fsm 2 "http://127.0.0.1:$PORT/health" | grep -q true || { echo "the server did not become healthy" >&2; exit 1; }
"$LOADGEN" -endpoints "127.0.0.1:$PORT" -mode put -clients 8 -total 200 >/dev/null
callgrind_control -i on "$PID" >/dev/null 2>&1
"$LOADGEN" -endpoints "127.0.0.1:$PORT" "${LOAD[@]}"
callgrind_control -i off "$PID" >/dev/null 2>&1
kill -INT "$PID"
wait "$PID" 2>/dev/null || true
TOTAL=$(awk '/^totals:/ {print $2}' "$PROFILE")
[ -n "$TOTAL" ] || { echo "no totals in $PROFILE" >&2; exit 1; }
echo "instructions per request: $((TOTAL / REQUESTS)) ($TOTAL over $REQUESTS); profile: $PROFILE"
callgrind_annotate "$PROFILE" 2>/dev/null | awk '/file:function/ {on = 1; next} on && /^-+$/ {next} on && !NF {exit} on' \
  | head -15 | sed -E 's#/root/\.cargo/registry/src/[^/]+/##; s# \[[^]]*\]##'
