#!/usr/bin/python3
"""snapshot-stall: what sending and installing a big snapshot does to the
clients of the leader and of the follower that receives it.

Three quorum members (etcd's heartbeat and election timeout, 100 ms and
1 s; --snapshot-count small, so that the leader's log soon starts after
what a stopped member has): --keys keys (bench/load/qbench), then one
follower stopped (SIGTERM) while --behind more puts go through the leader,
then started again: the leader sends it the database (a copy of its
store), the follower indexes it aside and installs it. Meanwhile one probe
reads from the leader and one from the follower (a serializable Range,
then 10 ms pause, repeated; a 5 s deadline). It prints the database's
size, the seconds from the follower's start to the snapshot installed,
each probe's longest wait in that time, the failed reads, whether the
leader changed, and whether every member's HashKV agrees afterwards.
A measurement: nothing is asserted.

    QUORUM_BIN=build-bench/src/server/quorum QBENCH_BIN=build-bench/bench/load/qbench \\
        /usr/bin/python3 bench/growth/snapshot-stall.py [--keys 1000000]
"""
import argparse
import importlib.util
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


growth = _load("growth_bench", "growth-bench.py")
stall = _load("apply_stall", "apply-stall.py")
harness = growth.harness
rpc_pb2, rpc_pb2_grpc, grpc = growth.rpc_pb2, growth.rpc_pb2_grpc, growth.grpc
from cluster import Cluster  # noqa: E402


def since_start(m):
    return m.log().split("\n==== ")[-1]


def wait_for_line(m, pattern, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = re.search(pattern, since_start(m))
        if got:
            return got
        time.sleep(0.05)
    raise RuntimeError("no /%s/ in %s's log within %d s" % (pattern, m.name, timeout))


def longest(probe, t0, t1):
    during = [w for s, w in probe.waits if s + w >= t0 and s <= t1]
    return (max(during) * 1000 if during else 0.0), len(during)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--snapshot-count", type=int, default=10000)
    ap.add_argument("--behind", type=int, default=50000,
                    help="puts while the follower is stopped")
    a = ap.parse_args()
    c = Cluster("quorum", extra_args=["--quota-backend-bytes", str(8 << 30),
                                      "--snapshot-count", str(a.snapshot_count)],
                heartbeat_ms=100, election_ms=1000).start()
    try:
        lead = c.wait_leader()
        victim = (lead + 1) % 3
        lead_ep = c.endpoint(lead)
        growth.qbench(lead_ep, "--conns", "10", "--clients", "100", "--total", str(a.keys),
                      "--key-space", str(a.keys), "--sequential-keys", "put")
        c.kill(victim, signal.SIGTERM)
        growth.qbench(lead_ep, "--conns", "10", "--clients", "100", "--total", str(a.behind),
                      "--key-space", str(a.keys), "put")
        eps = [c.endpoint(i) for i in range(3) if i != victim]
        before = [stall.status(ep) for ep in eps]
        db = c.status(lead)["dbSize"]
        lprobe = stall.Probe(lead_ep)
        time.sleep(0.5)
        t0 = time.monotonic()
        c.restart(victim, wait=False)
        while True:  # the follower's probe starts once it serves
            ch = grpc.insecure_channel(c.endpoint(victim))
            try:
                rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"probe",
                                                                   serializable=True), timeout=1)
                break
            except grpc.RpcError:
                if time.monotonic() - t0 > 60:
                    raise
                time.sleep(0.02)
            finally:
                ch.close()
        fprobe = stall.Probe(c.endpoint(victim))
        m = c.members[victim]
        idx = wait_for_line(m, r"indexed the snapshot received at index (\d+) in ([\d.]+) s", 600)
        wait_for_line(m, r"applied snapshot at index %s" % idx.group(1), 600)
        t1 = time.monotonic()
        time.sleep(1)
        lprobe.end()
        fprobe.end()
        after = [stall.status(c.endpoint(i)) for i in range(3)]
        top = c.status(lead)["header"]["revision"]
        nhash = growth.distinct_hashes([c.endpoint(i) for i in range(3)], top)
        for line in since_start(m).splitlines():
            if "snapshot" in line:
                print("  follower: " + line.strip()[:400])
        lw, ln = longest(lprobe, t0, t1)
        fw, fn = longest(fprobe, t0, t1)
        terms = [x[1] for x in before + after if x[1] is not None]
        changed = len(set(terms)) > 1 or len({x[0] for x in before + after if x[0]}) > 1
        print("snapshot-stall: %d keys, database %.0f MB: follower's start to snapshot "
              "installed %.2f s (indexed aside in %s s); leader's probe: longest wait %.1f ms "
              "(%d reads); follower's probe: longest wait %.1f ms (%d reads); failed reads %d; "
              "leader changed: %s; distinct HashKV afterwards: %d"
              % (a.keys, int(db) / 1e6, t1 - t0, idx.group(2), lw, ln, fw, fn,
                 lprobe.failed + fprobe.failed, "yes" if changed else "no", nhash))
    finally:
        c.cleanup()


if __name__ == "__main__":
    main()
