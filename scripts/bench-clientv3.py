#!/usr/bin/env python3
"""oxetcd against Debian's etcd, measured by etcd's own Go client.

The load comes from scripts/clientv3-load (Go, on etcd 3.4's clientv3 from
Debian's golang-etcd-server-dev, installed by scripts/install-deps.sh e2e),
the same program for both servers: nothing in it knows oxetcd. Runs
alternate between the servers in one sitting (etcd, oxetcd, etcd, oxetcd,
...), every run is printed, then a table of medians and oxetcd/etcd ratios.

Per run, on a fresh data dir on 127.0.0.1:
- single member: serializable get, 1 client (the loopback RPC floor); put,
  1 client (p50, p99); put, 256 clients on 16 connections (req/s, p99,
  server CPU per put, and the load generator's: the two share the
  machine's cores); watch fan-out, 256 watchers on 16 connections while
  16 writers put 10,000 keys (events/s, events per response, the
  client's and the server's CPU per event, and the writers' put p50,
  which sets the pace when the puts bound the run); resident memory
  after 100,000 keys of 256 B (and the peak over the run), then gets of
  those keys at 256 clients, linearizable and serializable;
- three members (put, 1 client and 256 clients, against the leader; CPU
  per put is all three members' together).

First it prints the fdatasync floor of the data dirs' file system: the
median 400 B write + fdatasync into a zero-filled preallocated file. The
floor under a 1-client put is that plus the fastest serializable get's p50
(a loopback RPC).

Usage: scripts/bench-clientv3.py [ROUNDS]        (default 2)
  BENCH_BIN=dir   oxetcd binaries to measure (default: a fresh release build)
  BENCH_KINDS     servers, space-separated (default "etcd oxetcd")
  BENCH_PUTS      puts at 256 clients (default 40000)
  BENCH_ONLY      "single" or "cluster" to run one half
Raw output lands in bench-out/clientv3/.
"""

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench-out", "clientv3")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BIN = os.environ.get("BENCH_BIN") or os.path.join(TARGET, "release")
LOAD = os.path.join(TARGET, "bench", "clientv3-load")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
KINDS = os.environ.get("BENCH_KINDS", "etcd oxetcd").split()
PUTS = int(os.environ.get("BENCH_PUTS", "40000"))
ONLY = os.environ.get("BENCH_ONLY", "")
CLK = os.sysconf("SC_CLK_TCK")


def setup():
    subprocess.run([os.path.join(ROOT, "scripts", "install-deps.sh"), "e2e"], check=True)
    if not os.environ.get("BENCH_BIN"):
        subprocess.run(["cargo", "build", "--release", "--bins", "-q"], cwd=ROOT, check=True)
    os.makedirs(os.path.dirname(LOAD), exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOFLAGS="",
               GOCACHE=os.path.join(TARGET, "e2e", "gocache"))
    subprocess.run(["go", "build", "-o", LOAD, "./scripts/clientv3-load"], cwd=ROOT, env=env,
                   check=True)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(kind):
    return "/usr/bin/etcd" if kind == "etcd" else os.path.join(BIN, kind)


class Cluster:
    """`size` members of one kind on 127.0.0.1, etcd's default timing."""

    def __init__(self, kind, size, tag):
        self.kind = kind
        self.names = [f"m{i}" for i in range(1, size + 1)]
        self.client = {n: free_port() for n in self.names}
        peer = {n: free_port() for n in self.names}
        initial = ",".join(f"{n}=http://127.0.0.1:{peer[n]}" for n in self.names)
        self.dir = os.path.join(OUT, f"{tag}-{kind}")
        os.makedirs(self.dir)
        self.procs = {}
        for n in self.names:
            url, purl = f"http://127.0.0.1:{self.client[n]}", f"http://127.0.0.1:{peer[n]}"
            log = open(os.path.join(self.dir, n + ".log"), "ab")
            self.procs[n] = subprocess.Popen(
                [program(kind), "--name", n, "--data-dir", os.path.join(self.dir, n + ".data"),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                 "--initial-cluster", initial, "--log-level", "error"],
                stdout=log, stderr=log)
        self.leader = self.wait_leader()

    def ctl(self, name, *args):
        return subprocess.run(
            ["etcdctl", "--endpoints", f"127.0.0.1:{self.client[name]}",
             "--command-timeout", "500ms", *args],
            env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=5)

    def wait_leader(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for n in self.names:
                out = self.ctl(n, "endpoint", "status", "-w", "fields")
                fields = dict(line.split(" : ", 1) for line in out.stdout.splitlines()
                              if " : " in line)
                member, leader = fields.get('"MemberID"'), fields.get('"Leader"')
                if out.returncode == 0 and leader and leader != "0" and member == leader:
                    return n
            time.sleep(0.05)
        raise RuntimeError(f"{self.kind}: no leader")

    def endpoint(self):
        return f"127.0.0.1:{self.client[self.leader]}"

    def cpu_seconds(self):
        total = 0
        for p in self.procs.values():
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLK

    def kib(self, field):
        """The largest `field` (VmRSS, VmHWM) among the members, in KiB."""
        values = []
        for p in self.procs.values():
            with open(f"/proc/{p.pid}/status") as f:
                values += [int(line.split()[1]) for line in f if line.startswith(field)]
        return max(values)

    def stop(self):
        for p in self.procs.values():
            p.kill()
            p.wait()


def load(cluster, *args):
    """Runs the load generator once; its key=value line as a dict."""
    out = subprocess.run([LOAD, "-endpoints", cluster.endpoint(), *args],
                         capture_output=True, text=True, timeout=600)
    lines = [l for l in out.stdout.splitlines() if l.startswith("mode=")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{cluster.kind}: clientv3-load {' '.join(args)}: {out.stderr}")
    result = {}
    for pair in lines[-1].split():
        k, v = pair.split("=", 1)
        result[k] = v if k == "mode" else float(v)
    return result


def puts(cluster, clients, conns, total, **extra):
    before = cluster.cpu_seconds()
    r = load(cluster, "-mode", "put", "-clients", str(clients), "-conns", str(conns),
             "-total", str(total), *sum(([f"-{k}", str(v)] for k, v in extra.items()), []))
    r["server_cpu_us"] = (cluster.cpu_seconds() - before) * 1e6 / total
    return r


def single(kind, tag):
    c = Cluster(kind, 1, tag)
    try:
        floor = load(c, "-mode", "get", "-consistency", "s", "-key-space", "1", "-total", "5000")
        one = puts(c, 1, 1, 5000)
        many = puts(c, 256, 16, PUTS)
        before = c.cpu_seconds()
        watch = load(c, "-mode", "watch", "-watchers", "256", "-conns", "16", "-clients", "16",
                     "-total", "10000")
        # Per delivered event, with the 10,000 puts that caused them.
        watch["server_cpu_us"] = (c.cpu_seconds() - before) * 1e6 / (256 * 10000)
        peak = c.kib("VmHWM")
    finally:
        c.stop()
    # Memory on a fresh member: 100,000 keys of 256 B, then its resident set.
    m = Cluster(kind, 1, tag + "-mem")
    try:
        puts(m, 256, 16, 100000, sequential="true", **{"key-size": 16})
        time.sleep(1)
        rss = m.kib("VmRSS")
        ranges = {c: load(m, "-mode", "get", "-consistency", c, "-clients", "256", "-conns", "16",
                          "-total", str(PUTS), "-key-size", "16", "-key-space", "100000")
                  for c in ("l", "s")}
    finally:
        m.stop()
    return {
        "get s 1 p50 ms": floor["p50_ms"],
        "put 1 p50 ms": one["p50_ms"],
        "put 1 p99 ms": one["p99_ms"],
        "put 256 req/s": many["per_s"],
        "put 256 p99 ms": many["p99_ms"],
        "put 256 server µs/put": many["server_cpu_us"],
        "put 256 client µs/put": many["client_cpu_us"],
        "watch events/s": watch["per_s"],
        "watch events/response": watch["events_per_response"],
        "watch client µs/event": watch["client_cpu_us"],
        "watch server µs/event": watch["server_cpu_us"],
        # The 16 writers' latency: when their seconds are near the run's,
        # it sets the run's pace (see scripts/clientv3-load).
        "watch writers' put p50 ms": watch["put_p50_ms"],
        "get l 256 req/s": ranges["l"]["per_s"],
        "get s 256 req/s": ranges["s"]["per_s"],
        "RSS 100k keys MiB": rss / 1024,
        "peak RSS MiB": peak / 1024,
    }


def cluster3(kind, tag):
    c = Cluster(kind, 3, tag)
    try:
        one = puts(c, 1, 1, 3000)
        many = puts(c, 256, 16, PUTS)
    finally:
        c.stop()
    return {
        "3 members put 1 p50 ms": one["p50_ms"],
        "3 members put 256 req/s": many["per_s"],
        "3 members put 256 p99 ms": many["p99_ms"],
        "3 members server µs/put": many["server_cpu_us"],
    }


def fsync_floor_ms(directory):
    """scripts/bench-common.sh's probe: 400 B writes + fdatasync, zero-filled."""
    out = subprocess.run(
        ["bash", "-c", '. scripts/bench-common.sh && fsync_floor_ms "$1" 400 2000 zero', "-",
         directory], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    setup()
    floor = fsync_floor_ms(OUT)
    print(f"fdatasync floor, 400 B into a zero-filled file in {OUT}: p50 {floor:.3f} ms", flush=True)
    runs = {k: [] for k in KINDS}
    for r in range(1, ROUNDS + 1):
        for kind in KINDS:
            row = {}
            if ONLY != "cluster":
                row.update(single(kind, f"r{r}"))
            if ONLY != "single":
                row.update(cluster3(kind, f"r{r}-3"))
            runs[kind].append(row)
            print(f"round {r} {kind}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()),
                  flush=True)
    metrics = list(runs[KINDS[0]][0].keys())
    print()
    print(f"{'median of ' + str(ROUNDS) + ' runs':<28}" + "".join(f"{k:>14}" for k in KINDS)
          + "".join(f"{k + '/etcd':>16}" for k in KINDS if k != "etcd"))
    for metric in metrics:
        med = {k: statistics.median(row[metric] for row in runs[k]) for k in KINDS}
        line = f"{metric:<28}" + "".join(f"{med[k]:>14.3f}" for k in KINDS)
        if "etcd" in med and med["etcd"]:
            line += "".join(f"{med[k] / med['etcd']:>16.2f}" for k in KINDS if k != "etcd")
        print(line)
    if "put 1 p50 ms" in metrics:
        # The loopback RPC floor: the fastest serializable get of any server.
        rpc = min(statistics.median(row["get s 1 p50 ms"] for row in runs[k]) for k in KINDS)
        for k in KINDS:
            p50 = statistics.median(row["put 1 p50 ms"] for row in runs[k])
            print(f"{k}: 1-client put p50 is {p50 / (floor + rpc):.2f}x the floor "
                  f"(fdatasync {floor:.3f} + the fastest get {rpc:.3f} ms)")


if __name__ == "__main__":
    main()
