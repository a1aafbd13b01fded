"""HashKV of quorum equals etcd 3.4's for the same history: at the current
revision, at a past one, and after a compaction (and the compact revision
reported, -1 before any). Members comparing hashes, and operators comparing
a quorum member with an etcd one, can rely on it."""
import os
import sys
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402


def hashes(kind):
    with Server(kind) as s:
        ch = grpc.insecure_channel(s.endpoint)
        kv, m = rpc_pb2_grpc.KVStub(ch), rpc_pb2_grpc.MaintenanceStub(ch)
        r = m.HashKV(rpc_pb2.HashKVRequest())
        out = [(r.hash, r.compact_revision)]
        for i in range(60):
            kv.Put(rpc_pb2.PutRequest(key=b"k%d" % (i % 7), value=b"v%d" % i))
            if i % 11 == 0:
                kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"k%d" % (i % 5)))
        for rev in (0, 20, 40):
            r = m.HashKV(rpc_pb2.HashKVRequest(revision=rev))
            out.append((rev, r.hash, r.compact_revision, r.header.revision))
        kv.Compact(rpc_pb2.CompactionRequest(revision=30, physical=True))
        for rev in (0, 45):
            r = m.HashKV(rpc_pb2.HashKVRequest(revision=rev))
            out.append((rev, r.hash, r.compact_revision))
        try:
            m.HashKV(rpc_pb2.HashKVRequest(revision=20))
        except grpc.RpcError as e:
            out.append((e.code(), e.details()))
        ch.close()
        return out


class HashKV(unittest.TestCase):
    def test_same_history_same_hash_as_etcd(self):
        want = hashes("etcd")
        got = hashes("quorum")
        self.assertEqual(got, want)
        self.assertEqual(want[0][1], -1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
