#!/usr/bin/env bash
# Installs what the tests and benchmarks need beyond a Rust toolchain, only
# what is missing, from Debian's packages:
#   - always: the reference etcd (etcd-server for /usr/bin/etcd, etcd-client
#     for /usr/bin/etcdctl), and protoc (protobuf-compiler), which the Rust
#     etcd-client crate the tests drive oxetcd with needs to build;
#   - with the argument `e2e`: what etcd's own end-to-end suite needs
#     (golang-go, and golang-etcd-server-dev for the suite's Go source and
#     its dependencies; scripts/etcd-e2e.sh);
#   - with the argument `valgrind`: valgrind, whose callgrind counts the
#     server's instructions in scripts/bench-instructions.sh.
# Runs apt-get as root, or via sudo.
set -euo pipefail

missing=()
[ -x /usr/bin/etcd ] || missing+=(etcd-server)
[ -x /usr/bin/etcdctl ] || missing+=(etcd-client)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if [ "${1:-}" = e2e ]; then
    command -v go >/dev/null 2>&1 || missing+=(golang-go)
    [ -d /usr/share/gocode/src/go.etcd.io/etcd/tests/e2e ] || missing+=(golang-etcd-server-dev)
fi
if [ "${1:-}" = valgrind ]; then
    command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
fi
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "install-deps.sh: ${missing[*]} missing and neither root nor sudo is available" >&2
    exit 1
fi
echo "install-deps.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
# The package may start a system etcd on localhost:2379. Tests use their own
# ports, but `cargo run --bin oxetcd` wants 2379.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null 2>&1 \
    && systemctl is-active --quiet etcd 2>/dev/null; then
    "${sudo[@]}" systemctl disable --now etcd || true
fi
