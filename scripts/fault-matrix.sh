#!/usr/bin/env bash
# The process-level fault matrix, long version: every (cluster kind × fault)
# cell of tests/tests/fault_matrix.rs, with more operations per client than
# CI runs, on release builds.
#
#   scripts/fault-matrix.sh                       # every cell once
#   FAULT_OPS=1000 FAULT_ROUNDS=3 scripts/fault-matrix.sh
#   FAULT_KINDS="smol mixed" FAULTS="isolate-leader kill-leader" scripts/fault-matrix.sh
#
# Kinds: oxetcd (three tokio members), smol (three smol members), mixed
# (tokio, smol, tokio). Faults: isolate-leader, isolate-follower,
# one-way-leader, slow-leader-link, kill-leader, pause-leader,
# replace-follower (see `Fault` in tests/src/history_load.rs). Each run
# starts a fresh cluster behind fault-injecting peer proxies, records
# FAULT_CLIENTS clients (default 6) of FAULT_OPS operations each (default 400) across
# the fault, and checks the history for linearizability, the watch for
# exactness, and that every member shows the final put. One line per run:
# kind, fault, operations, unknown outcomes, violations, seconds; then
# 'N passed, N failed'. Each run's full output lands in fault-out/; the
# exit status is non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
FAULT_OPS=${FAULT_OPS:-400}
FAULT_ROUNDS=${FAULT_ROUNDS:-1}
FAULT_CLIENTS=${FAULT_CLIENTS:-6}
FAULT_KINDS=${FAULT_KINDS:-oxetcd smol mixed}
FAULTS=${FAULTS:-isolate-leader isolate-follower one-way-leader slow-leader-link kill-leader pause-leader replace-follower}
OUT=fault-out
mkdir -p "$OUT"

command -v etcd >/dev/null || scripts/install-deps.sh
# The test binary starts the servers from its own profile's directory.
cargo build --release --bins -q
TEST_BIN=$(cargo test --release -q -p oxetcd-tests --test fault_matrix --no-run \
  --message-format=json | grep -o '"executable":"[^"]*fault_matrix[^"]*"' | cut -d'"' -f4)
[ -x "$TEST_BIN" ] || { echo "no fault_matrix test binary" >&2; exit 1; }

passed=0
failed=0
printf '%-7s %-17s %10s %8s %10s %8s  %s\n' kind fault operations unknown violations seconds result
for round in $(seq 1 "$FAULT_ROUNDS"); do
  for kind in $FAULT_KINDS; do
    for fault in $FAULTS; do
      log="$OUT/$kind-$fault-$round.log"
      started=$(date +%s.%N)
      if FAULT_KIND=$kind FAULT_NAME=$fault FAULT_OPS=$FAULT_OPS FAULT_CLIENTS=$FAULT_CLIENTS \
        "$TEST_BIN" --ignored --exact one_cell_from_the_environment --nocapture >"$log" 2>&1; then
        result=ok
        passed=$((passed + 1))
      else
        result="FAILED ($log)"
        failed=$((failed + 1))
      fi
      seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      line=$(grep -m1 '^fault-matrix:' "$log" || true)
      field() { echo "$line" | grep -o "$1=[^ ]*" | cut -d= -f2; }
      printf '%-7s %-17s %10s %8s %10s %8.1f  %s\n' "$kind" "$fault" \
        "$(field operations)" "$(field unknown)" "$(field violations)" "$seconds" "$result"
    done
  done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
