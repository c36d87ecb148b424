#!/usr/bin/env bash
# Installs what the tests and benchmarks need beyond a Rust toolchain: the
# reference etcd from Debian (etcd-server for /usr/bin/etcd, etcd-client for
# /usr/bin/etcdctl), only when missing. Runs apt-get as root, or via sudo.
set -euo pipefail

missing=()
[ -x /usr/bin/etcd ] || missing+=(etcd-server)
[ -x /usr/bin/etcdctl ] || missing+=(etcd-client)
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
