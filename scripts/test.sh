#!/usr/bin/env bash
# Runs oxetcd's whole test suite on a fresh Debian/Ubuntu machine:
#   1. installs what the tests need (scripts/install-deps.sh e2e): Debian's
#      etcd-server and etcd-client as the reference, golang-go and
#      golang-etcd-server-dev for etcd's own end-to-end suite;
#   2. builds the server binaries (the end-to-end tests start them from the
#      same target directory and profile, so build and test share it);
#   3. runs every test of the workspace: unit tests, the conformance suite
#      against the core, both binaries and etcd, and the etcdctl and crash
#      tests;
#   4. runs etcd's own e2e TestCtlV3* tests (tests/e2e/ctlv3.txt) and the
#      others that pass (tests/e2e/more.txt: JSON gateway, unix peers, peer
#      certificate names) against both binaries; a
#      failure not in tests/e2e/expected-failures.txt, or a listed test
#      that passes, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh e2e
cargo build --workspace --bins
cargo test --workspace --no-fail-fast
for bin in oxetcd oxetcd-smol; do
    scripts/etcd-e2e.sh --bin "target/debug/$bin" --list tests/e2e/ctlv3.txt \
        --expect tests/e2e/expected-failures.txt --out "target/e2e/logs-$bin"
    scripts/etcd-e2e.sh --bin "target/debug/$bin" --list tests/e2e/more.txt \
        --expect tests/e2e/expected-failures.txt --out "target/e2e/logs-more-$bin"
done
