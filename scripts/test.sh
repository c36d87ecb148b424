#!/usr/bin/env bash
# Runs oxetcd's whole test suite on a fresh Debian/Ubuntu machine:
#   1. installs the reference etcd (Debian's etcd-server and etcd-client)
#      when /usr/bin/etcd or /usr/bin/etcdctl is missing;
#   2. builds the server binaries (the end-to-end tests start them from the
#      same target directory and profile, so build and test share it);
#   3. runs every test of the workspace: unit tests, the conformance suite
#      against the core, both binaries and etcd, and the etcdctl and crash
#      tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo build --workspace --bins
cargo test --workspace --no-fail-fast
