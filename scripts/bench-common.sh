# Shell functions the benchmark scripts share; sourced, not run.

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
