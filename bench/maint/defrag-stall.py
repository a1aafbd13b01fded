#!/usr/bin/python3
"""defrag-stall: how long a client's requests stall while a member
defragments, for quorum and etcd 3.4 in one run.

Each kind gets a fresh single member (tests/integration/harness.py), filled
with --keys keys of --value-size bytes, half of them then deleted and the
history compacted (so defragmentation has something to give back). Two
client threads then loop, one doing Puts and one linearizable Ranges,
recording each call's latency; meanwhile `Defragment` runs once. Printed
per kind: the defragmentation's own duration, the file size before and
after, and the longest Put and Range latency seen while it ran against the
median before it. No assertion: this is a measurement.

    QUORUM_BIN=build-bench/src/server/quorum /usr/bin/python3 bench/maint/defrag-stall.py
"""
import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import harness  # noqa: E402


def fill(kv, keys, size):
    val = b"x" * size
    for i in range(keys):
        kv.Put(rpc_pb2.PutRequest(key=b"fill/%08d" % i, value=val))
    for i in range(0, keys, 2):
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"fill/%08d" % i))
    rev = kv.Range(rpc_pb2.RangeRequest(key=b"fill/", count_only=True)).header.revision
    kv.Compact(rpc_pb2.CompactionRequest(revision=rev, physical=True))


def run(kind, keys, size):
    with harness.Server(kind, extra_args=["--quota-backend-bytes", str(8 << 30)]) as srv:
        ch = grpc.insecure_channel(srv.endpoint)
        kv = rpc_pb2_grpc.KVStub(ch)
        mt = rpc_pb2_grpc.MaintenanceStub(ch)
        fill(kv, keys, size)
        before = mt.Status(rpc_pb2.StatusRequest()).dbSize
        stop = threading.Event()
        samples = {"put": [], "range": []}
        window = {}

        def loop(name, call):
            while not stop.is_set():
                t0 = time.monotonic()
                call()
                t1 = time.monotonic()
                samples[name].append((t0, t1 - t0))
        threads = [
            threading.Thread(target=loop, args=("put", lambda: kv.Put(
                rpc_pb2.PutRequest(key=b"live", value=b"v")))),
            threading.Thread(target=loop, args=("range", lambda: kv.Range(
                rpc_pb2.RangeRequest(key=b"live")))),
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)
        window["start"] = time.monotonic()
        mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=600)
        window["end"] = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        after = mt.Status(rpc_pb2.StatusRequest()).dbSize
        out = {"defrag_s": window["end"] - window["start"], "before": before, "after": after}
        for name, xs in samples.items():
            base = [d for t0, d in xs if t0 < window["start"]]
            during = [d for t0, d in xs if t0 + d >= window["start"] and t0 <= window["end"]]
            out[name] = (statistics.median(base) if base else 0.0,
                         max(during) if during else 0.0, len(during))
        ch.close()
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--only", choices=["quorum", "etcd"])
    args = ap.parse_args()
    print("defrag-stall: %d keys x %d bytes, half deleted and compacted; one Put loop and one "
          "Range loop while Defragment runs" % (args.keys, args.value_size))
    for kind in ["quorum", "etcd"]:
        if args.only and kind != args.only:
            continue
        r = run(kind, args.keys, args.value_size)
        print("%-6s defrag %.3fs, db %.1f MiB -> %.1f MiB; put: median %.2fms before, "
              "longest %.1fms during (%d calls); range: median %.2fms before, longest %.1fms "
              "during (%d calls)"
              % (kind, r["defrag_s"], r["before"] / 2**20, r["after"] / 2**20,
                 r["put"][0] * 1e3, r["put"][1] * 1e3, r["put"][2],
                 r["range"][0] * 1e3, r["range"][1] * 1e3, r["range"][2]))


if __name__ == "__main__":
    main()
