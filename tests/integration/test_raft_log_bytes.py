#!/usr/bin/python3
"""The Raft core's in-memory log is bounded by bytes too (issue 15).

A single member with --max-raft-log-bytes=8388608 takes 240 puts of 1 MiB:
without the bound the core would keep all of them (its 5000-entry window),
240 MiB of heap; with it the member's anonymous RSS stays under
ANON_BOUND_MIB, and every value reads back (the store has them; only the
in-memory copy of the log went). The same member then restarts (the WAL
still has every entry) and serves them again.
Under ASan the member runs with a small quarantine (freed memory would
count otherwise).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402

N = 240
ANON_BOUND_MIB = 120  # unbounded: > 240 MiB of entries alone


def rss_anon_kib(s):
    if s.proc.poll() is not None:
        raise RuntimeError("quorum exited %s:\n%s" % (s.proc.returncode, s.log_tail()))
    with open("/proc/%d/status" % s.proc.pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon")


def main():
    t0 = time.monotonic()
    # under ASan, freed blocks wait in its quarantine (256 MiB by default)
    # and would count as the member's memory: keep it small here
    os.environ["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") +
                                  ":quarantine_size_mb=4:thread_local_quarantine_size_kb=256")
    val = lambda i: bytes([65 + i % 26]) * (1 << 20)  # noqa: E731
    with harness.Server("quorum", extra_args=[
            "--max-raft-log-bytes=8388608", "--snapshot-count=100000"]) as s:
        opts = [("grpc.max_send_message_length", 4 << 20),
                ("grpc.max_receive_message_length", 4 << 20)]
        ch = grpc.insecure_channel(s.endpoint, options=opts)
        kv = rpc_pb2_grpc.KVStub(ch)
        peak = 0
        for i in range(N):
            kv.Put(rpc_pb2.PutRequest(key=b"big/%03d" % i, value=val(i)), timeout=30)
            if i % 20 == 19:
                peak = max(peak, rss_anon_kib(s))
        peak = max(peak, rss_anon_kib(s))
        assert peak < ANON_BOUND_MIB * 1024, "anonymous RSS %d KiB after %d x 1 MiB" % (peak, N)
        for i in range(0, N, 7):
            r = kv.Range(rpc_pb2.RangeRequest(key=b"big/%03d" % i), timeout=30)
            assert r.kvs[0].value == val(i), i
        ch.close()
        s.stop()
        s.start()
        ch = grpc.insecure_channel(s.endpoint, options=opts)
        kv = rpc_pb2_grpc.KVStub(ch)
        r = kv.Range(rpc_pb2.RangeRequest(key=b"big/", range_end=b"big0", keys_only=True),
                     timeout=30)
        assert r.count == N, r.count
        r = kv.Range(rpc_pb2.RangeRequest(key=b"big/%03d" % (N - 1)), timeout=30)
        assert r.kvs[0].value == val(N - 1)
        ch.close()
        print("test_raft_log_bytes: ok (peak anon %d MiB, %.1fs)" % (peak // 1024,
                                                                    time.monotonic() - t0))


if __name__ == "__main__":
    main()
