#!/usr/bin/env python3
"""Two server builds, side by side: which is faster, beyond the noise.

A change worth a few percent drowns in this machine's noise when the builds
are measured minutes apart: the same binary's put rate moves by a fifth
between sittings. So both servers run at once, each a single member on a
fresh data dir on 127.0.0.1, and the runs alternate (a, b, a, b, ...) with
the same load from scripts/clientv3-load; a slow spell slows both. Every
run is printed, then the median and range of each figure per build.

Usage: scripts/bench-ab.py BIN_A BIN_B [ROUNDS] [-- LOAD ARGS]
  ROUNDS      runs per build (default 8)
  LOAD ARGS   what each run does (default: -mode put -clients 256
              -conns 16 -total 100000); server CPU is measured per
              request for put and get runs, per delivered event for watch
For example, a build against the one before it:
  git stash; cargo build --release; cp target/release/oxetcd /tmp/before
  git stash pop; cargo build --release
  scripts/bench-ab.py /tmp/before target/release/oxetcd
"""

import importlib.util
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench", os.path.join(HERE, "bench-clientv3.py"))
bench = importlib.util.module_from_spec(spec)
ARGV, sys.argv = sys.argv, sys.argv[:1]  # it reads its own arguments as it loads
spec.loader.exec_module(bench)
sys.argv = ARGV

DEFAULT_LOAD = ["-mode", "put", "-clients", "256", "-conns", "16", "-total", "100000"]
FIGURES = ["per_s", "p50_ms", "p99_ms", "server_us", "client_cpu_us", "events_per_response",
           "put_secs", "put_p50_ms"]


def main():
    args = sys.argv[1:]
    load_args = DEFAULT_LOAD
    if "--" in args:
        at = args.index("--")
        args, load_args = args[:at], args[at + 1:]
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    bins = {"a": os.path.abspath(args[0]), "b": os.path.abspath(args[1])}
    rounds = int(args[2]) if len(args) == 3 else 8
    os.environ["BENCH_BIN"] = HERE  # a binary is given: build nothing
    bench.setup()
    bench.program = lambda kind: bins[kind]
    total = float(load_args[load_args.index("-total") + 1]) if "-total" in load_args else None
    clusters = {}
    try:
        for kind in bins:
            clusters[kind] = bench.Cluster(kind, 1, f"ab-{kind}")
            bench.load(clusters[kind], *load_args)  # warm-up
        results = {kind: [] for kind in bins}
        for _ in range(rounds):
            for kind, cluster in clusters.items():
                before = cluster.cpu_seconds()
                r = bench.load(cluster, *load_args)
                if total and r["mode"] in ("put", "get"):
                    r["server_us"] = (cluster.cpu_seconds() - before) * 1e6 / total
                elif total and r["mode"] == "watch":  # per delivered event
                    r["server_us"] = (cluster.cpu_seconds() - before) * 1e6 / (total * r["watchers"])
                results[kind].append(r)
                print(kind, " ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    print(f"\nmedian [range] of {rounds} runs each; a = {bins['a']}, b = {bins['b']}")
    for figure in FIGURES:
        values = {k: [r[figure] for r in rs if figure in r] for k, rs in results.items()}
        if all(values.values()):
            a, b = (statistics.median(values[k]) for k in ("a", "b"))
            cells = "   ".join(f"{k} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
                               for k, v in values.items())
            print(f"{figure:20s} {cells}   b/a {b / a:.3f}")


if __name__ == "__main__":
    main()
