#!/usr/bin/python3
"""load-bench: etcd's benchmark cases (put, range linearizable and
serializable, txn-put, lease-keepalive, watch) driven by bench/load/qbench (built
on libquorum-client), against quorum and etcd 3.4 in one run, one after
the other on the same machine, with the ratio printed.

    QUORUM_BIN=build-bench/src/server/quorum QBENCH_BIN=build-bench/bench/load/qbench \\
        /usr/bin/python3 bench/load/load-bench.py [--cluster] [--total N] [--conns N] [--clients N]

Each case gets a fresh server (or, with --cluster, a fresh three-member
cluster whose leader takes the writes and a follower the reads). qbench
exits non-zero when any request failed, and the run is then marked FAILED.

watch is etcd's watch-latency: 100 watchers of one key on 10 streams, then
--total/10 Puts of it; its req/s are events delivered per second and its
latency runs from a Put's send to the event's arrival at each watcher.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402

CASES = [("put", ["put"], "leader"), ("txn-put", ["txn-put"], "leader"),
         ("range-lin", ["range"], "follower"),
         ("range-ser", ["range", "--consistency", "s"], "follower"),
         ("lease-keepalive", ["lease-keepalive"], "leader"),
         ("watch", ["--watchers", "100", "--streams", "10", "watch"], "leader")]
LINE = re.compile(r"(\d+) ok, (\d+) failed, ([\d.]+)s, (\d+) req/s, latency ms p50 ([\d.]+) "
                  r"p90 ([\d.]+) p99 ([\d.]+)")


def endpoint(target, role, cluster):
    if not cluster:
        return target.endpoint
    lead = target.wait_leader()
    if role == "leader":
        return target.endpoint(lead)
    return target.endpoint(next(i for i in range(target.n) if i != lead))


def run(kind, case, args):
    name, argv, role = case
    if args.cluster:
        from cluster import Cluster
        target = Cluster(kind, heartbeat_ms=100, election_ms=1000).start()
    else:
        target = harness.Server(kind).start()
    try:
        ep = endpoint(target, role, args.cluster)
        total = max(1, args.total // 10) if name == "watch" else args.total
        qbench = harness.built_binary("QBENCH_BIN", "bench", "load", "qbench")
        cmd = [qbench, "--endpoints", ep, "--conns", str(args.conns), "--clients",
               str(args.clients), "--total", str(total), "--key-space",
               str(args.key_space), "--val-size", str(args.val_size)] + argv
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        m = LINE.search(r.stdout)
        if r.returncode != 0 or not m:
            return None, (r.stdout + r.stderr).strip()[-300:]
        return {"rps": float(m.group(4)), "p50": float(m.group(5)), "p99": float(m.group(7)),
                "n": int(m.group(1))}, None
    finally:
        target.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", action="store_true", help="three members per kind")
    ap.add_argument("--total", type=int, default=100000)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--key-space", type=int, default=1000)
    ap.add_argument("--val-size", type=int, default=100)
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print("load-bench: %s, %d requests, %d conns x %d clients, %d keys, %d-byte values, "
          "load average %.2f" % ("3 members each" if args.cluster else "single member",
                                 args.total, args.conns, args.clients, args.key_space,
                                 args.val_size, load))
    failed = False
    for case in CASES:
        if args.cases and case[0] not in args.cases.split(","):
            continue
        res = {}
        for kind in ("quorum", "etcd"):
            r, err = run(kind, case, args)
            if r is None:
                print("%-16s %-6s FAILED: %s" % (case[0], kind, err))
                failed = True
                continue
            res[kind] = r
            print("%-16s %-6s req/s=%8.0f  p50=%7.3fms  p99=%7.3fms"
                  % (case[0], kind, r["rps"], r["p50"], r["p99"]))
        if len(res) == 2:
            print("%-16s ratio quorum/etcd: req/s x%.2f  p99 x%.2f"
                  % (case[0], res["quorum"]["rps"] / res["etcd"]["rps"],
                     res["quorum"]["p99"] / res["etcd"]["p99"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
