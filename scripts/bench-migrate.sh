#!/usr/bin/env bash
# The ways into oxetcd from etcd, timed on a backend of MIB MiB: restoring
# an etcd snapshot, taking over a stopped etcd's data directory at start,
# and migrating oxetcd's own storage from version 3.5 to 3.6 at start.
#
#   scripts/bench-migrate.sh [MIB]      # backend to build, MiB (default 1024)
#   BENCH_BIN=dir scripts/bench-migrate.sh   # binaries in dir, build nothing
#
# Each backend is filled with puts of 8 KiB values over MIB × 48 keys (so
# most keys hold two versions or more) until the server reports MIB MiB
# in use.
# Debian's etcd is filled this way and its snapshot saved with
# `etcdctl snapshot save`; printed: the time `oxetcdctl snapshot restore`
# takes over it (snapshot bytes, key versions, seconds, versions/s, MB/s),
# and how long the restored member then takes to answer /health. Then that
# etcd is stopped (SIGTERM) and oxetcd started with its flags and data dir:
# printed, the figures of oxetcd's "imported etcd data directory" log line
# and the wall time from start to /health answering healthy. Last, oxetcd
# run as 3.5.0 (`--unsafe-run-as-version`) is filled, stopped and started
# again as itself: printed, the time from start to healthy and to the
# "migrated the storage version" log line, and a restart of the same data
# dir without a migration to compare with. Data lives in a temporary
# directory removed at exit; server logs land in bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_setup
MIB=${1:-1024}
OUT=bench-out
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-migrate.XXXXXX")
SERVER=

cleanup() {
  if [ -n "$SERVER" ]; then kill -KILL "$SERVER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

QUOTA=$((8 * 1024 * 1024 * 1024))
WAIT_S=900          # the longest any start, stop or log line is waited for

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }

# The flags etcd and oxetcd share, on client port $1 and peer port $1 + 1.
member_flags() { # port dir
  local client=http://127.0.0.1:$1 peer=http://127.0.0.1:$(($1 + 1))
  FLAGS=(--name bench --data-dir "$2" --listen-client-urls "$client"
    --advertise-client-urls "$client" --listen-peer-urls "$peer"
    --initial-advertise-peer-urls "$peer" --initial-cluster "bench=$peer"
    --quota-backend-bytes "$QUOTA")
}

start() { # log command...
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  SERVER=$!
}

# SIGTERM, then wait for the exit; a server still up after WAIT_S is killed
# and the run fails.
stop() {
  kill -TERM "$SERVER"
  local deadline=$((SECONDS + WAIT_S))
  for _ in $(seq 1 $((WAIT_S * 10))); do
    kill -0 "$SERVER" 2>/dev/null || break
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.1
  done
  if kill -0 "$SERVER" 2>/dev/null; then
    echo "server $SERVER did not stop within ${WAIT_S} s; killed" >&2
    kill -KILL "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=
    return 1
  fi
  wait "$SERVER" 2>/dev/null || true
  SERVER=
}

healthy() { curl -fsS -m 2 "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"health":"true"'; }

wait_healthy() { # port log
  local deadline=$((SECONDS + WAIT_S))
  for _ in $(seq 1 $((WAIT_S * 20))); do
    if healthy "$1"; then return 0; fi
    if ! kill -0 "$SERVER" 2>/dev/null; then
      echo "server on port $1 exited before it was healthy; end of $2:" >&2
      tail -n 20 "$2" >&2
      return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.05
  done
  echo "server on port $1 not healthy within ${WAIT_S} s; see $2" >&2
  return 1
}

# The first line of log $1 containing $2, waited for.
wait_line() { # log text
  local deadline=$((SECONDS + WAIT_S))
  for _ in $(seq 1 $((WAIT_S * 10))); do
    if grep -m1 -F "$2" "$1"; then return 0; fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.1
  done
  echo "no \"$2\" in $1 within ${WAIT_S} s" >&2
  return 1
}

ctl() { ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$PORT" --command-timeout 600s "$@"; }

status() { # field of the endpoint's status: dbSize, dbSizeInUse or revision
  ctl endpoint status -w json | python3 -c 'import json, sys
s = json.load(sys.stdin)[0]["Status"]
print(s["header"]["revision"] if sys.argv[1] == "revision" else s.get(sys.argv[1], 0))' "$1"
}

sizes() {
  echo "backend $(($(status dbSize) / 1048576)) MiB ($(($(status dbSizeInUse) / 1048576)) MiB in use), revision $(status revision)"
}

# Puts 8 KiB values: MIB × 96 over half as many keys, then rounds of
# MIB × 8 more (at most 16) until the backend reports MIB MiB in use.
# (Each bench run draws the same key sequence, so a round overwrites keys
# already written: more history, no new keys.) PUTS is how many were made.
fill() { # bench log
  local puts=$((MIB * 96)) round=$((MIB * 8))
  : >"$1"
  put "$1" "$puts" $((puts / 2))
  PUTS=$puts
  for _ in $(seq 1 16); do
    [ "$(status dbSizeInUse)" -lt $((MIB * 1048576)) ] || return 0
    put "$1" "$round" $((puts / 2))
    PUTS=$((PUTS + round))
  done
  echo "backend still under ${MIB} MiB in use after $PUTS puts; measuring it as it is" >&2
}

put() { # log puts keys
  local out errors
  out=$("$BIN/oxetcdctl" --endpoints "127.0.0.1:$PORT" bench put --clients 64 --conns 8 \
    --total "$2" --key-size 16 --val-size 8192 --key-space-size "$3" 2>&1)
  printf '%s\n' "$out" >>"$1"
  errors=$(printf '%s\n' "$out" | awk '/Errors:/ {print $2}')
  if [ "${errors:-0}" != 0 ]; then echo "$errors of $2 puts failed; see $1" >&2; fi
}

# Seconds from epoch time $1 to the RFC 3339 "ts" of JSON log line $2.
ts_after() {
  python3 -c 'import json, sys, datetime
ts = json.loads(sys.argv[2])["ts"].replace("Z", "+00:00")
print("%.2f" % (datetime.datetime.fromisoformat(ts).timestamp() - float(sys.argv[1])))' "$1" "$2"
}

echo "backend ${MIB} MiB of 8 KiB values over $((MIB * 48)) keys; data in $WORK; logs in $OUT/migrate-*"

# 1. An etcd snapshot restored by oxetcdctl.
PORT=$(free_port)
member_flags "$PORT" "$WORK/etcd"
start "$OUT/migrate-etcd.log" etcd "${FLAGS[@]}"
wait_healthy "$PORT" "$OUT/migrate-etcd.log"
t=$(now)
fill "$OUT/migrate-etcd-fill.log"
echo "etcd filled: $PUTS puts in $(since "$t") s, $(sizes)"
ctl snapshot save "$WORK/etcd.snapshot" >"$OUT/migrate-etcd-snapshot.log" 2>&1
stop
ETCD_PORT=$PORT
snapshot_bytes=$(stat -c %s "$WORK/etcd.snapshot")

PORT=$(free_port)
member_flags "$PORT" "$WORK/restored"
t=$(now)
"$BIN/oxetcdctl" snapshot restore "$WORK/etcd.snapshot" --data-dir "$WORK/restored" \
  --name bench --initial-cluster "bench=http://127.0.0.1:$((PORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 1))" 2>"$OUT/migrate-restore.log"
secs=$(since "$t")
revision=$(sed -n 's/.*(revision \([0-9]*\)).*/\1/p' "$OUT/migrate-restore.log")
# Only puts were made, one version each from revision 2 on.
versions=$((revision - 1))
awk -v b="$snapshot_bytes" -v v="$versions" -v r="$revision" -v s="$secs" 'BEGIN {
  printf "snapshot restore: %d bytes (%.0f MiB), %d key versions (revision %d), %.2f s, %.0f versions/s, %.1f MB/s\n",
    b, b / 1048576, v, r, s, v / s, b / 1e6 / s }'
t=$(now)
start "$OUT/migrate-restored.log" "$BIN/oxetcd" "${FLAGS[@]}"
wait_healthy "$PORT" "$OUT/migrate-restored.log"
secs=$(since "$t")
echo "restored member healthy ${secs} s after start, revision $(status revision), $(ctl get "" --prefix --keys-only --limit 1 -w json | python3 -c 'import json, sys; print(json.load(sys.stdin).get("count", 0))') keys"
stop
rm -rf "$WORK/restored" "$WORK/etcd.snapshot"

# 2. The stopped etcd's data directory taken over by oxetcd at start.
PORT=$ETCD_PORT
member_flags "$PORT" "$WORK/etcd"
t=$(now)
start "$OUT/migrate-import.log" "$BIN/oxetcd" "${FLAGS[@]}"
wait_healthy "$PORT" "$OUT/migrate-import.log"
secs=$(since "$t")
line=$(wait_line "$OUT/migrate-import.log" "imported etcd data directory")
python3 -c 'import json, sys
l = json.loads(sys.argv[1])
print("etcd data dir import: %s key versions, %s leases, %s members, revision %s, backend %s bytes (%.0f MiB), %s WAL entries replayed, took %s, %s versions/s, %s MB/s"
      % (l["versions"], l["leases"], l["members"], l["revision"], l["backend-bytes"],
         l["backend-bytes"] / 1048576, l["replayed-entries"], l["took"], l["versions-per-sec"], l["mb-per-sec"]))' "$line"
echo "etcd data dir import: healthy ${secs} s after start (log line at $(ts_after "$t" "$line") s), revision $(status revision)"
stop
rm -rf "$WORK/etcd"

# 3. oxetcd's storage migrated from version 3.5 to 3.6 at start.
PORT=$(free_port)
member_flags "$PORT" "$WORK/oxetcd"
start "$OUT/migrate-3.5.log" "$BIN/oxetcd" "${FLAGS[@]}" --unsafe-run-as-version 3.5.0
wait_healthy "$PORT" "$OUT/migrate-3.5.log"
t=$(now)
fill "$OUT/migrate-oxetcd-fill.log"
echo "oxetcd as 3.5.0 filled: $PUTS puts in $(since "$t") s, $(sizes)"
t=$(now)
stop
echo "oxetcd as 3.5.0 stopped in $(since "$t") s; data dir $(du -sm "$WORK/oxetcd" | cut -f1) MiB"
t=$(now)
start "$OUT/migrate-3.6.log" "$BIN/oxetcd" "${FLAGS[@]}"
wait_healthy "$PORT" "$OUT/migrate-3.6.log"
secs=$(since "$t")
migrated=$(wait_line "$OUT/migrate-3.6.log" "migrated the storage version")
updated=$(wait_line "$OUT/migrate-3.6.log" "updated the cluster version from 3.5 to 3.6")
steps=$(python3 -c 'import json, sys
l = json.loads(sys.argv[1])
print("from %s to %s, %s steps" % (l["from"], l["to"], l["steps"]))' "$migrated")
echo "storage migration 3.5 -> 3.6 ($steps): healthy ${secs} s after start;" \
  "\"updated the cluster version from 3.5 to 3.6\" at $(ts_after "$t" "$updated") s;" \
  "\"migrated the storage version\" at $(ts_after "$t" "$migrated") s"
stop
t=$(now)
start "$OUT/migrate-3.6-again.log" "$BIN/oxetcd" "${FLAGS[@]}"
wait_healthy "$PORT" "$OUT/migrate-3.6-again.log"
echo "restart of the same data dir, no migration: healthy $(since "$t") s after start"
stop
