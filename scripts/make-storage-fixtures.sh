#!/usr/bin/env bash
# Makes the data directories in tests/fixtures/storage/: one per storage
# version this build can write (3.5 with --unsafe-run-as-version, and
# 3.6), each a single member holding the same history. They are kept as
# made: a later build must open them (tests/tests/storage_fixtures.rs),
# so never regenerate a fixture that is already there; add one for a new
# storage version instead.
#
#   scripts/make-storage-fixtures.sh [BIN_DIR]   # default target/debug
#
# The history: puts, an overwrite, a delete, a txn, a compaction at
# revision 3, a lease of an hour with a key on it, and a user and a role
# (auth left off).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug}
out=tests/fixtures/storage
mkdir -p "$out"

make_one() { # storage version, extra server flags...
    local version=$1
    shift
    if [ -e "$out/$version.tar.gz" ]; then
        echo "$out/$version.tar.gz exists; kept" >&2
        return
    fi
    local dir
    dir=$(mktemp -d)
    local port=23790
    "$bin/oxetcd" --name fixture --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$port" \
        --advertise-client-urls "http://127.0.0.1:$port" \
        --listen-peer-urls http://127.0.0.1:23800 \
        --initial-advertise-peer-urls http://127.0.0.1:23800 \
        --initial-cluster fixture=http://127.0.0.1:23800 \
        --initial-cluster-token fixtures "$@" >"$dir/log" 2>&1 &
    server_pid=$!
    local pid=$server_pid
    local ctl=("$bin/oxetcdctl" --endpoints "127.0.0.1:$port")
    for _ in $(seq 100); do
        "${ctl[@]}" endpoint health >/dev/null 2>&1 && break
        sleep 0.1
    done
    "${ctl[@]}" put a 1 >/dev/null           # revision 2
    "${ctl[@]}" put b 1 >/dev/null           # 3
    "${ctl[@]}" put a 2 >/dev/null           # 4
    "${ctl[@]}" del b >/dev/null             # 5
    "${ctl[@]}" txn <<'TXN' >/dev/null       # 6
value("a") = "2"

put c 1
put d 1


TXN
    "${ctl[@]}" compact 3 >/dev/null
    local lease
    lease=$("${ctl[@]}" lease grant 3600 | awk '{print $2}')
    "${ctl[@]}" put leased x --lease "$lease" >/dev/null   # 7
    "${ctl[@]}" role add reader >/dev/null
    "${ctl[@]}" user add alice --new-user-password secret >/dev/null
    "${ctl[@]}" user grant-role alice reader >/dev/null
    "${ctl[@]}" endpoint status -w json >"$dir/status.json"
    kill -TERM "$pid" || { cat "$dir/log" >&2; exit 1; }
    wait "$pid" || true
    tar -C "$dir/data" -czf "$out/$version.tar.gz" member
    echo "$out/$version.tar.gz: $(stat -c %s "$out/$version.tar.gz") bytes; $(cat "$dir/status.json")"
    rm -rf "$dir"
}

server_pid=""
trap '[ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true' EXIT
make_one 3.5 --unsafe-run-as-version 3.5.0
make_one 3.6
