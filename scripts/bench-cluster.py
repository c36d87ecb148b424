#!/usr/bin/env python3
"""Cluster figures for oxetcd, oxetcd-smol and Debian's etcd, in one run.

For each server kind, on a 3-member cluster on 127.0.0.1 with etcd's default
timing (heartbeat 100 ms, election timeout 1000 ms):

- time to elect a new leader after `kill -9` of the leader, median of ROUNDS
  (measured from the kill to the first moment a surviving member reports a
  new leader; the killed member is restarted between rounds);
- put throughput with 256 clients against the leader (`oxetcdctl bench`);
- peak RSS of each member.

Usage: scripts/bench-cluster.py [ROUNDS] [PUTS]   (defaults 10 and 30000)
Builds release binaries first. Raw logs land in bench-out/cluster/.
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench-out", "cluster")
BIN = os.path.join(ROOT, "target", "release")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
PUTS = int(sys.argv[2]) if len(sys.argv) > 2 else 30000
# Longest to wait for any one cluster event before giving up on the run.
WAIT_SECONDS = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(kind):
    return "/usr/bin/etcd" if kind == "etcd" else os.path.join(BIN, kind)


class Cluster:
    def __init__(self, kind):
        self.kind = kind
        self.names = ["m1", "m2", "m3"]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.procs = {}
        self.initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        shutil.rmtree(os.path.join(OUT, kind), ignore_errors=True)
        os.makedirs(os.path.join(OUT, kind))
        for n in self.names:
            self.start(n)

    def start(self, name):
        url = f"http://127.0.0.1:{self.client[name]}"
        peer = f"http://127.0.0.1:{self.peer[name]}"
        args = [
            program(self.kind), "--name", name,
            "--data-dir", os.path.join(OUT, self.kind, name + ".data"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial, "--initial-cluster-state", "new",
            "--log-level", "error",
        ]
        log = open(os.path.join(OUT, self.kind, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=log)

    def status(self, name):
        """(member id, leader id) as `name` reports them, or None."""
        try:
            out = subprocess.run(
                ["etcdctl", "--endpoints", f"127.0.0.1:{self.client[name]}",
                 "--command-timeout", "300ms", "endpoint", "status", "-w", "json"],
                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, timeout=2,
            )
            status = json.loads(out.stdout)[0]["Status"]
            return status["header"]["member_id"], status.get("leader", 0)
        except Exception:
            return None

    def leader(self, among):
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            for name in among:
                s = self.status(name)
                if s and s[1]:
                    for candidate in among:
                        c = self.status(candidate)
                        if c and c[0] == s[1]:
                            return candidate, s[1]
            time.sleep(0.02)
        raise RuntimeError(f"{self.kind}: no leader among {among}")

    def elect_after_kill(self):
        old_name, old_id = self.leader(self.names)
        rest = [n for n in self.names if n != old_name]
        self.procs[old_name].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        self.procs[old_name].wait()
        deadline = killed + WAIT_SECONDS
        while time.monotonic() < deadline:
            for name in rest:
                s = self.status(name)
                if s and s[1] and s[1] != old_id:
                    elapsed = time.monotonic() - killed
                    self.start(old_name)
                    self.leader(self.names)
                    return elapsed
            time.sleep(0.005)
        raise RuntimeError(f"{self.kind}: no new leader after killing {old_name}")

    def peak_rss_mib(self):
        peaks = []
        for proc in self.procs.values():
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM"):
                            peaks.append(int(line.split()[1]) / 1024)
            except OSError:
                pass
        return max(peaks) if peaks else 0.0

    def stop(self):
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


def bench_puts(port):
    out = subprocess.run(
        [os.path.join(BIN, "oxetcdctl"), "--endpoints", f"127.0.0.1:{port}", "bench", "put",
         "--clients", "256", "--conns", "16", "--total", str(PUTS), "--val-size", "256",
         "--key-space-size", "100000"],
        capture_output=True, text=True, timeout=600,
    )
    for line in out.stdout.splitlines():
        if "Requests/sec" in line:
            return float(line.split()[-1])
    raise RuntimeError(out.stdout + out.stderr)


def main():
    subprocess.run(["cargo", "build", "--release", "--bins", "-q"], cwd=ROOT, check=True)
    rows = []
    for kind in ["oxetcd", "oxetcd-smol", "etcd"]:
        cluster = Cluster(kind)
        try:
            cluster.leader(cluster.names)
            elections = [cluster.elect_after_kill() for _ in range(ROUNDS)]
            leader, _ = cluster.leader(cluster.names)
            puts = bench_puts(cluster.client[leader])
            rows.append((kind, statistics.median(elections), max(elections), puts,
                         cluster.peak_rss_mib()))
        finally:
            cluster.stop()
    print(f"{'server':<12} {'election median s':>18} {'max s':>7} {'puts/s 256 cl':>14} {'peak RSS MiB':>13}")
    for kind, median, worst, puts, rss in rows:
        print(f"{kind:<12} {median:>18.3f} {worst:>7.3f} {puts:>14.0f} {rss:>13.1f}")


if __name__ == "__main__":
    main()
