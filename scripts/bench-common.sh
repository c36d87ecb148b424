# Shell functions the benchmark scripts share; sourced, not run.

# Debian's etcd installed if missing, and BIN set to the directory of the
# binaries to measure: $BENCH_BIN if given (another build, measured in the
# same sitting), else a fresh release build.
bench_setup() {
  command -v etcd >/dev/null || scripts/install-deps.sh
  if [ -n "${BENCH_BIN:-}" ]; then
    BIN=$BENCH_BIN
  else
    cargo build --release --bins -q
    BIN=${CARGO_TARGET_DIR:-target}/release
  fi
}

# A port nobody listens on, with the next one free too (the peer port).
free_port() {
  python3 -c 'import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass'
}

# Peak resident memory (VmHWM) of process $1, in KiB.
peak_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

# Median milliseconds of one write + fdatasync of $2 bytes at the end of
# what is written so far, $3 times, into a file preallocated in directory
# $1 (so on the data dirs' file system): the floor under a durable put.
# $4 is how the file is preallocated: "zero" writes zeros over it and syncs
# (as oxetcd's WAL does), "fallocate" only reserves the blocks (as etcd's
# WAL does), so the first write into each block also changes metadata.
fsync_floor_ms() { # dir bytes count zero|fallocate
  python3 - "$@" <<'PY'
import os, sys, time
d, size, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
path = os.path.join(d, "fsync-probe")
total = (size * n + 4095) // 4096 * 4096
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
try:
    if mode == "zero":
        chunk = bytes(1 << 20)
        for at in range(0, total, len(chunk)):
            os.pwrite(fd, chunk[: min(len(chunk), total - at)], at)
    else:
        os.posix_fallocate(fd, 0, total)
    os.fsync(fd)
    record, times = os.urandom(size), []
    for i in range(n):
        start = time.perf_counter_ns()
        os.pwrite(fd, record, i * size)
        os.fdatasync(fd)
        times.append(time.perf_counter_ns() - start)
    times.sort()
    print("%.3f" % (times[len(times) // 2] / 1e6))
finally:
    os.close(fd)
    os.unlink(path)
PY
}
