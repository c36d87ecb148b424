#!/usr/bin/env bash
# Put and range throughput and latency of oxetcd, oxetcd-smol and Debian's
# etcd, side by side on this machine, in one run. Prints one table; raw bench
# output and plots (latency over time, latency against throughput) land in
# bench-out/.
#
#   scripts/bench.sh [TOTAL]      # TOTAL puts per measurement (default 20000)
#   BENCH_BIN=dir scripts/bench.sh  # use the binaries in dir, build nothing
#                                   # (to measure another build in the same sitting)
#   BENCH_KINDS="oxetcd etcd" scripts/bench.sh   # only these servers
#
# First it prints the fdatasync floor of the file system the data dirs are
# on: the median time of a 400-byte write + fdatasync into a preallocated
# file (zero-filled, as oxetcd's WAL; fallocated, as etcd's). A
# single-client put cannot be faster than the first.
#
# Each server gets a fresh data dir and its own 127.0.0.1 port. For every
# server: puts with 1, 16 and 256 clients, single-client p50/p99 latency, CPU
# seconds per 1000 puts (server process user+system time) over all three
# runs and over the 256-client run alone (the single-client run, which pays
# a log write per put, dominates the first), ranges/s with 256 clients
# (linearizable and serializable, after the puts), peak RSS (VmHWM), then
# with auth enabled: puts/s at 256 clients as root and as a user whose role
# holds a readwrite permission on a prefix (the empty one, so every bench key
# is covered; the permission is checked on each put), and the
# milliseconds one Authenticate takes (bcrypt at the default cost, the mean
# of 10 sequential etcdctl calls, less an unauthenticated call's time).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_setup
TOTAL=${1:-20000}
OUT=bench-out
mkdir -p "$OUT"

clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
peak_rss_mib() { awk -v kib="$(peak_kib "$1")" 'BEGIN {printf "%.1f", kib / 1024}'; }

start_server() { # name kind port dir
  local kind=$2 port=$3 dir=$4
  rm -rf "$dir"
  local flags=(--name bench --data-dir "$dir" --listen-client-urls "http://127.0.0.1:$port"
    --advertise-client-urls "http://127.0.0.1:$port" --log-level error)
  case $kind in
    etcd) etcd "${flags[@]}" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-cluster "bench=http://127.0.0.1:$((port + 1))" >"$OUT/$1.log" 2>&1 & ;;
    *) "$BIN/$kind" "${flags[@]}" >"$OUT/$1.log" 2>&1 & ;;
  esac
  echo $!
}

wait_ready() { # port
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$1" endpoint health >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "server on port $1 did not become healthy" >&2
  return 1
}

bench() { # port clients conns total [extra flags] -> summary text
  local port=$1 clients=$2 conns=$3 total=$4
  shift 4
  "$BIN/oxetcdctl" --endpoints "127.0.0.1:$port" bench put --clients "$clients" --conns "$conns" \
    --total "$total" --key-size 8 --val-size 256 --key-space-size 100000 "$@"
}

range_bench() { # port consistency total plot -> summary text (256 clients, 16 conns)
  "$BIN/oxetcdctl" --endpoints "127.0.0.1:$1" bench range --consistency "$2" \
    --clients 256 --conns 16 --total "$3" --plot "$4"
}

field() { awk -v k="$1" -F'\t' '$1 ~ k {print $2}' | head -1 | awk '{print $1}'; }
pct() { awk -v k="  $1% in" 'index($0, k) == 1 {printf "%.2f", $3 * 1000}'; }
# Percentile $1 of the latencies in a bench --csv file $2, in ms to the µs
# (the summary's percentiles are rounded to 0.1 ms).
csv_pct() { tail -n +2 "$2" | cut -d, -f2 | sort -n | awk -v p="$1" '{v[NR] = $1} END {i = int(NR * p / 100); if (i < 1) i = 1; printf "%.3f", v[i] / 1000}'; }

# Turns auth on: root (role root) and a user "bench" whose role reads and
# writes every key. Both passwords are the user name.
enable_auth() { # port
  local ctl=(env ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$1")
  "${ctl[@]}" user add root:root >/dev/null
  "${ctl[@]}" user grant-role root root >/dev/null
  "${ctl[@]}" role add bench >/dev/null
  "${ctl[@]}" role grant-permission bench readwrite --prefix=true '' >/dev/null
  "${ctl[@]}" user add bench:bench >/dev/null
  "${ctl[@]}" user grant-role bench bench >/dev/null
  "${ctl[@]}" auth enable >/dev/null
}

# Mean milliseconds of 10 sequential etcdctl gets, with extra flags.
ctl_ms() { # port [flags]
  local port=$1; shift
  local start end
  start=$(date +%s%N)
  for _ in $(seq 1 10); do
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" "$@" get k >/dev/null
  done
  end=$(date +%s%N)
  awk -v ns="$((end - start))" 'BEGIN {printf "%.1f", ns / 10 / 1e6}'
}

FLOOR_WRITES=${FLOOR_WRITES:-2000}
echo "fdatasync floor, 400 B x $FLOOR_WRITES in $OUT: p50 $(fsync_floor_ms "$OUT" 400 "$FLOOR_WRITES" zero) ms zero-filled, $(fsync_floor_ms "$OUT" 400 "$FLOOR_WRITES" fallocate) ms fallocated"
printf '%-12s %10s %10s %10s %10s %10s %12s %12s %10s %10s %10s %10s %10s %8s\n' server "1 client" "16" "256" "p50 ms" "p99 ms" "cpu s/1k" "256: s/1k" "range l" "range s" "rss MiB" "auth root" "auth user" "authn ms"
for kind in ${BENCH_KINDS:-oxetcd oxetcd-smol etcd}; do
  name=$kind
  port=$(free_port)
  pid=$(start_server "$name" "$kind" "$port" "$OUT/$name.data")
  trap 'kill $pid 2>/dev/null || true' EXIT
  wait_ready "$port"
  before=$(cpu_ticks "$pid")
  one=$(bench "$port" 1 1 "$((TOTAL / 4))" --csv "$OUT/$name-1.csv"); echo "$one" >"$OUT/$name-1.txt"
  sixteen=$(bench "$port" 16 4 "$TOTAL"); echo "$sixteen" >"$OUT/$name-16.txt"
  before_many=$(cpu_ticks "$pid")
  many=$(bench "$port" 256 16 "$TOTAL" --plot "$OUT/$name-put-256.svg"); echo "$many" >"$OUT/$name-256.txt"
  after=$(cpu_ticks "$pid")
  puts=$((TOTAL / 4 + TOTAL * 2))
  cpu=$(awk -v t="$((after - before))" -v c="$clk" -v n="$puts" 'BEGIN {printf "%.3f", t / c / n * 1000}')
  cpu_many=$(awk -v t="$((after - before_many))" -v c="$clk" -v n="$TOTAL" 'BEGIN {printf "%.3f", t / c / n * 1000}')
  # Reads last, outside the CPU figures above: 256 clients, linearizable
  # (a read index per batch) and serializable (local).
  range_l=$(range_bench "$port" l "$TOTAL" "$OUT/$name-range-l.svg"); echo "$range_l" >"$OUT/$name-range-l.txt"
  range_s=$(range_bench "$port" s "$TOTAL" "$OUT/$name-range-s.svg"); echo "$range_s" >"$OUT/$name-range-s.txt"
  rss=$(peak_rss_mib "$pid")
  # Auth last: puts as root and as a user with a role, and Authenticate.
  plain_ms=$(ctl_ms "$port")
  enable_auth "$port"
  authn_ms=$(awk -v a="$(ctl_ms "$port" --user root:root)" -v b="$plain_ms" 'BEGIN {printf "%.1f", a - b}')
  auth_root=$(bench "$port" 256 16 "$TOTAL" --user root:root); echo "$auth_root" >"$OUT/$name-auth-root.txt"
  auth_user=$(bench "$port" 256 16 "$TOTAL" --user bench:bench); echo "$auth_user" >"$OUT/$name-auth-user.txt"
  printf '%-12s %10.0f %10.0f %10.0f %10s %10s %12s %12s %10.0f %10.0f %10s %10.0f %10.0f %8s\n' "$name" \
    "$(echo "$one" | field 'Requests/sec')" "$(echo "$sixteen" | field 'Requests/sec')" \
    "$(echo "$many" | field 'Requests/sec')" "$(csv_pct 50 "$OUT/$name-1.csv")" "$(csv_pct 99 "$OUT/$name-1.csv")" "$cpu" "$cpu_many" \
    "$(echo "$range_l" | field 'Requests/sec')" "$(echo "$range_s" | field 'Requests/sec')" "$rss" \
    "$(echo "$auth_root" | field 'Requests/sec')" "$(echo "$auth_user" | field 'Requests/sec')" "$authn_ms"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
