#!/usr/bin/python3
"""apply-stall: what a DeleteRange of every key does to the other clients.

A fresh quorum (one member, or three with --members 3) gets --keys keys
(32-byte keys, 100-byte values, bench/load/qbench), then one DeleteRange of
every key while a probe client reads one key (a serializable Range, then a
10 ms pause, repeated, on the leader: the member that also applies the
entry; a 5 s deadline). It prints, for the time the DeleteRange takes:
the probe's longest wait and number of reads, and whether the leader
changed (leader and term before and after, from every member's Status).
A measurement: nothing is asserted.

Issue 19 is about the loop being held for the whole entry: run it against
the binary before and after (QUORUM_BIN), with the same step limit.

    QUORUM_BIN=build/src/server/quorum /usr/bin/python3 bench/growth/apply-stall.py \\
        --keys 500000 [--members 3] [--apply-step-limit 1000]
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402

import importlib.util  # noqa: E402
_spec = importlib.util.spec_from_file_location("growth_bench",
                                               os.path.join(HERE, "growth-bench.py"))
growth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(growth)


class Probe:
    def __init__(self, ep):
        self.ch = grpc.insecure_channel(ep)
        self.kv = rpc_pb2_grpc.KVStub(self.ch)
        self.kv.Range(rpc_pb2.RangeRequest(key=b"probe", serializable=True), timeout=30)
        self.waits = []  # (start, seconds)
        self.failed = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                self.kv.Range(rpc_pb2.RangeRequest(key=b"probe", serializable=True), timeout=5)
            except grpc.RpcError:
                self.failed += 1
            self.waits.append((t0, time.monotonic() - t0))
            time.sleep(0.01)

    def end(self):
        self.stop.set()
        self.t.join()
        self.ch.close()


def status(ep):
    ch = grpc.insecure_channel(ep)
    try:
        s = rpc_pb2_grpc.MaintenanceStub(ch).Status(rpc_pb2.StatusRequest(), timeout=10)
        return s.leader, s.raftTerm
    except grpc.RpcError:
        return None, None
    finally:
        ch.close()


def fmt(st):
    return "?" if st[0] is None else "%x/%d" % st


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=500000)
    ap.add_argument("--members", type=int, default=1, choices=(1, 3))
    ap.add_argument("--apply-step-limit", type=int, default=0,
                    help="quorum's --experimental-apply-step-limit (0: its default)")
    a = ap.parse_args()
    flags = ["--quota-backend-bytes", str(8 << 30)]
    if a.apply_step_limit:
        flags += ["--experimental-apply-step-limit", str(a.apply_step_limit)]
    if a.members == 1:
        srv = harness.Server("quorum", extra_args=flags)
        srv.start()
        eps, lead_ep, stop = [srv.endpoint], srv.endpoint, srv.cleanup
    else:
        c = Cluster("quorum", extra_args=flags, heartbeat_ms=100, election_ms=1000).start()
        lead = c.wait_leader()
        eps, lead_ep, stop = [c.endpoint(i) for i in range(3)], c.endpoint(lead), c.cleanup
    try:
        growth.qbench(lead_ep, "--conns", "10", "--clients", "100", "--total", str(a.keys),
                      "--key-space", str(a.keys), "--sequential-keys", "put")
        before = [status(ep) for ep in eps]
        probe = Probe(lead_ep)
        time.sleep(0.5)
        ch = grpc.insecure_channel(lead_ep)
        t0 = time.monotonic()
        r = rpc_pb2_grpc.KVStub(ch).DeleteRange(
            rpc_pb2.DeleteRangeRequest(key=b"\0", range_end=b"\0"), timeout=600)
        t1 = time.monotonic()
        ch.close()
        time.sleep(0.5)
        probe.end()
        after = [status(ep) for ep in eps]
        during = [w for s, w in probe.waits if s + w >= t0 and s <= t1]
        longest = max(during) if during else 0.0
        # a new term on any member is an election (pre-vote keeps a failed
        # one from raising it); members that did not answer are shown as ?
        terms_before = [b[1] for b in before if b[1] is not None]
        terms_after = [x[1] for x in after if x[1] is not None]
        changed = max(terms_after, default=0) != max(terms_before, default=0) or \
            len({x[0] for x in before + after if x[0]}) > 1
        print("apply-stall: %s, %d member%s, %d keys, step limit %s: DeleteRange %.2f s "
              "(%d deleted); probe: longest wait %.1f ms, %d reads during it, %d failed; "
              "leader changed: %s (leader/term before %s, after %s)"
              % (harness.quorum_binary(), a.members, "s" if a.members > 1 else "", a.keys,
                 a.apply_step_limit or "default", t1 - t0, r.deleted, longest * 1000,
                 len(during), probe.failed, "yes" if changed else "no",
                 " ".join(fmt(x) for x in before), " ".join(fmt(x) for x in after)))
    finally:
        stop()


if __name__ == "__main__":
    main()
