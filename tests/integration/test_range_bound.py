#!/usr/bin/python3
"""A Range reply past --max-range-response-bytes is refused, not built
(issue 15; bench/overload's huge-range case).

One quorum member with --max-range-response-bytes=524288 and 40 keys of
32 KiB (1.3 MB in all):
- a Range over all of them fails RESOURCE_EXHAUSTED "grpc: trying to send
  message larger than max" (grpc-go's text when a reply passes the server's
  max send size, which is what etcd answers past its 2 GiB), for etcdctl
  and a gRPC client, linearizable and serializable (the front loops' path),
  and as a read-only Txn;
- the same Range with a limit of 10, keys only and count only is served;
  a Txn that writes and reads all of them is served (a Range inside an
  entry every member applies is not bounded);
- the member goes on serving, and every key is intact.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402

BOUND = 524288
N = 40
VAL = b"x" * 32768
TEXT = "grpc: trying to send message larger than max"


def main():
    t0 = time.monotonic()
    with harness.Server("quorum", extra_args=[
            "--max-range-response-bytes=%d" % BOUND]) as s:
        ch = grpc.insecure_channel(s.endpoint, options=[
            ("grpc.max_receive_message_length", 64 << 20)])
        kv = rpc_pb2_grpc.KVStub(ch)
        for i in range(N):
            kv.Put(rpc_pb2.PutRequest(key=b"big/%03d" % i, value=VAL), timeout=10)

        r = s.etcdctl("get", "--prefix", "big/", check=False)
        assert r.returncode != 0, "a 1.3 MB reply past a 512 KiB bound was served"
        assert TEXT in r.stderr, r.stderr
        r = s.etcdctl("get", "--prefix", "big/", "--consistency=s", check=False)
        assert r.returncode != 0 and TEXT in r.stderr, r.stderr

        whole = rpc_pb2.RangeRequest(key=b"big/", range_end=b"big0")
        for serializable in (False, True):
            whole.serializable = serializable
            try:
                kv.Range(whole, timeout=10)
                raise AssertionError("served past the bound")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                assert e.details() == TEXT, e.details()
        whole.serializable = False
        try:
            kv.Txn(rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_range=whole)]),
                   timeout=10)
            raise AssertionError("read-only txn served past the bound")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e

        r = s.etcdctl("get", "--prefix", "big/", "--limit", "10", "--keys-only")
        assert len(r.stdout.split()) == 10, r.stdout
        resp = kv.Range(rpc_pb2.RangeRequest(key=b"big/", range_end=b"big0", limit=10),
                        timeout=10)
        assert len(resp.kvs) == 10 and resp.more and resp.count == N
        assert all(x.value == VAL for x in resp.kvs)
        r = s.etcdctl("get", "--prefix", "big/", "--keys-only")
        assert len(r.stdout.split()) == N, r.stdout
        c = kv.Range(rpc_pb2.RangeRequest(key=b"big/", range_end=b"big0", count_only=True),
                     timeout=10)
        assert c.count == N and not c.kvs

        t = kv.Txn(rpc_pb2.TxnRequest(success=[
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"w", value=b"1")),
            rpc_pb2.RequestOp(request_range=whole)]), timeout=10)
        assert len(t.responses[1].response_range.kvs) == N

        for i in range(N):
            g = kv.Range(rpc_pb2.RangeRequest(key=b"big/%03d" % i), timeout=10)
            assert len(g.kvs) == 1 and g.kvs[0].value == VAL, i
        s.etcdctl("put", "after", "ok")
        assert s.etcdctl("get", "after", "--print-value-only").stdout.strip() == "ok"
        ch.close()
    print("test_range_bound: ok (%.1fs)" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
