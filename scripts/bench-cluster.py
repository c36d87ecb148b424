#!/usr/bin/env python3
"""Cluster figures for oxetcd, oxetcd-smol and Debian's etcd, in one run.

For each server kind, on a 3-member cluster on 127.0.0.1 with etcd's default
timing (heartbeat 100 ms, election timeout 1000 ms):

- time to elect a new leader after `kill -9` of the leader, median of ROUNDS
  (measured from the kill to the first moment a surviving member reports a
  new leader; the killed member is restarted between rounds);
- put throughput with 256 clients against the leader (`oxetcdctl bench`);
- peak RSS of each member;
- snapshot transfer to a new learner: with `--snapshot-count 1000`, 20,000
  puts of 2 KiB, then `member add --learner` and start it; the time from its
  start until it has applied what the leader had, and the leader's backend
  size over that time.

Usage: scripts/bench-cluster.py [ROUNDS] [PUTS]   (defaults 10 and 30000)
Builds release binaries first (NO_BUILD=1 skips that). Raw logs land in
bench-out/cluster/.
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
    def __init__(self, kind, extra=()):
        self.kind = kind
        self.extra = list(extra)
        self.names = ["m1", "m2", "m3"]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.procs = {}
        self.initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        self.state = "new"
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
            "--initial-cluster", self.initial, "--initial-cluster-state", self.state,
            "--log-level", "error",
        ] + self.extra
        log = open(os.path.join(OUT, self.kind, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=log)

    def full_status(self, name):
        """`name`'s Status as etcdctl prints it in JSON, or None."""
        try:
            out = subprocess.run(
                ["etcdctl", "--endpoints", f"127.0.0.1:{self.client[name]}",
                 "--command-timeout", "300ms", "endpoint", "status", "-w", "json"],
                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, timeout=2,
            )
            return json.loads(out.stdout)[0]["Status"]
        except Exception:
            return None

    def status(self, name):
        """(member id, leader id) as `name` reports them, or None."""
        status = self.full_status(name)
        if status is None:
            return None
        return status["header"]["member_id"], status.get("leader", 0)

    def add_learner(self):
        """Adds m4 as a learner and starts it; returns seconds until it has
        applied everything the leader had applied when it was added, and the
        leader's backend size in bytes."""
        leader, _ = self.leader(self.names)
        target = self.full_status(leader)["raftAppliedIndex"]
        db_size = self.full_status(leader)["dbSize"]
        name = "m4"
        self.client[name] = free_port()
        self.peer[name] = free_port()
        peer = f"http://127.0.0.1:{self.peer[name]}"
        for attempt in range(20):
            added = subprocess.run(
                ["etcdctl", "--endpoints", f"127.0.0.1:{self.client[leader]}", "member", "add",
                 name, "--learner", f"--peer-urls={peer}"],
                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=10,
            )
            if added.returncode == 0:
                break
            print(f"{self.kind}: member add: {added.stderr.strip()}", file=sys.stderr)
            time.sleep(0.25)
        else:
            raise RuntimeError(f"{self.kind}: member add kept failing")
        self.initial += f",{name}={peer}"
        self.state = "existing"
        started = time.monotonic()
        self.start(name)
        deadline = started + WAIT_SECONDS * 4
        while time.monotonic() < deadline:
            status = self.full_status(name)
            if status and status.get("raftAppliedIndex", 0) >= target:
                return time.monotonic() - started, db_size
            time.sleep(0.02)
        raise RuntimeError(f"{self.kind}: the learner did not catch up")

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


def bench_puts(port, total=PUTS, val_size=256, clients=256):
    out = subprocess.run(
        [os.path.join(BIN, "oxetcdctl"), "--endpoints", f"127.0.0.1:{port}", "bench", "put",
         "--clients", str(clients), "--conns", "16", "--total", str(total), "--val-size",
         str(val_size), "--key-space-size", "100000"],
        capture_output=True, text=True, timeout=600,
    )
    for line in out.stdout.splitlines():
        if "Requests/sec" in line:
            return float(line.split()[-1])
    raise RuntimeError(out.stdout + out.stderr)


def main():
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "--bins", "-q"], cwd=ROOT, check=True)
    rows = []
    for kind in ["oxetcd", "oxetcd-smol", "etcd"]:
        cluster = Cluster(kind)
        try:
            cluster.leader(cluster.names)
            elections = [cluster.elect_after_kill() for _ in range(ROUNDS)]
            leader, _ = cluster.leader(cluster.names)
            puts = bench_puts(cluster.client[leader])
            rss = cluster.peak_rss_mib()
        finally:
            cluster.stop()
        cluster = Cluster(kind, ["--snapshot-count", "1000"])
        try:
            leader, _ = cluster.leader(cluster.names)
            bench_puts(cluster.client[leader], total=20000, val_size=2048, clients=64)
            catch_up, db_size = cluster.add_learner()
        finally:
            cluster.stop()
        rows.append((kind, statistics.median(elections), max(elections), puts, rss,
                     catch_up, db_size / catch_up / 2**20))
    print(f"{'server':<12} {'election median s':>18} {'max s':>7} {'puts/s 256 cl':>14} "
          f"{'peak RSS MiB':>13} {'learner catch-up s':>19} {'MiB/s':>7}")
    for kind, median, worst, puts, rss, catch_up, rate in rows:
        print(f"{kind:<12} {median:>18.3f} {worst:>7.3f} {puts:>14.0f} {rss:>13.1f} "
              f"{catch_up:>19.2f} {rate:>7.1f}")


if __name__ == "__main__":
    main()
