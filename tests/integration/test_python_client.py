"""python3-etcd3 and raw gRPC against quorum: the client library's view, and
every bad input answered with etcd's status and text."""
import os
import sys
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402


class PythonClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(os.environ.get("TARGET", "quorum")).start()
        cls.c = cls.server.client()
        cls.chan = grpc.insecure_channel(cls.server.endpoint)
        cls.kv = rpc_pb2_grpc.KVStub(cls.chan)

    @classmethod
    def tearDownClass(cls):
        cls.chan.close()
        cls.server.cleanup()

    def status_of(self, fn, req):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(req, timeout=10)
        return cm.exception.code(), cm.exception.details()

    def test_put_get_delete_prefix(self):
        c = self.c
        c.put("/py/a", "1")
        c.put("/py/b", "2")
        value, meta = c.get("/py/a")
        self.assertEqual(value, b"1")
        self.assertEqual(meta.version, 1)
        self.assertEqual(sorted(v for v, _ in c.get_prefix("/py/")), [b"1", b"2"])
        self.assertTrue(c.delete("/py/a"))
        self.assertFalse(c.delete("/py/a"))
        self.assertEqual(c.get("/py/a"), (None, None))
        c.delete_prefix("/py/")
        self.assertEqual(list(c.get_prefix("/py/")), [])

    def test_transaction(self):
        c = self.c
        c.put("/tx/k", "v1")
        ok, resp = c.transaction(compare=[c.transactions.value("/tx/k") == "v1"],
                                 success=[c.transactions.put("/tx/k", "v2"),
                                          c.transactions.get("/tx/k")],
                                 failure=[])
        self.assertTrue(ok)
        self.assertEqual(resp[1][0][0], b"v2")
        ok, _ = c.transaction(compare=[c.transactions.version("/tx/k") == 1],
                              success=[c.transactions.put("/tx/k", "nope")],
                              failure=[c.transactions.put("/tx/other", "x")])
        self.assertFalse(ok)
        self.assertEqual(c.get("/tx/k")[0], b"v2")
        self.assertEqual(c.get("/tx/other")[0], b"x")

    def test_revisions_and_compaction(self):
        c = self.c
        r1 = self.kv.Put(rpc_pb2.PutRequest(key=b"/rev/k", value=b"1")).header.revision
        r2 = self.kv.Put(rpc_pb2.PutRequest(key=b"/rev/k", value=b"2")).header.revision
        self.assertEqual(r2, r1 + 1)
        old = self.kv.Range(rpc_pb2.RangeRequest(key=b"/rev/k", revision=r1))
        self.assertEqual(old.kvs[0].value, b"1")
        self.assertEqual(old.header.revision, r2, "header revision is the current one")
        c.compact(r2)
        code, msg = self.status_of(self.kv.Range, rpc_pb2.RangeRequest(key=b"/rev/k", revision=r1))
        self.assertEqual(code, grpc.StatusCode.OUT_OF_RANGE)
        self.assertEqual(msg, "etcdserver: mvcc: required revision has been compacted")
        code, msg = self.status_of(self.kv.Compact, rpc_pb2.CompactionRequest(revision=r1))
        self.assertEqual(msg, "etcdserver: mvcc: required revision has been compacted")
        code, msg = self.status_of(self.kv.Compact, rpc_pb2.CompactionRequest(revision=r2 + 100))
        self.assertEqual((code, msg), (grpc.StatusCode.OUT_OF_RANGE,
                                       "etcdserver: mvcc: required revision is a future revision"))

    def test_count_only_and_limit(self):
        for i in range(5):
            self.kv.Put(rpc_pb2.PutRequest(key=b"/cnt/%d" % i, value=b"x"))
        r = self.kv.Range(rpc_pb2.RangeRequest(key=b"/cnt/", range_end=b"/cnt0", count_only=True))
        self.assertEqual((r.count, len(r.kvs)), (5, 0))
        r = self.kv.Range(rpc_pb2.RangeRequest(key=b"/cnt/", range_end=b"/cnt0", limit=2))
        self.assertEqual((r.count, len(r.kvs), r.more), (5, 2, True))

    def test_bad_input_gets_etcds_errors(self):
        IA = grpc.StatusCode.INVALID_ARGUMENT
        cases = [
            (self.kv.Put, rpc_pb2.PutRequest(key=b"", value=b"v"), IA,
             "etcdserver: key is not provided"),
            (self.kv.Range, rpc_pb2.RangeRequest(key=b""), IA, "etcdserver: key is not provided"),
            (self.kv.DeleteRange, rpc_pb2.DeleteRangeRequest(key=b""), IA,
             "etcdserver: key is not provided"),
            (self.kv.Put, rpc_pb2.PutRequest(key=b"k", value=b"v", ignore_value=True), IA,
             "etcdserver: value is provided"),
            (self.kv.Put, rpc_pb2.PutRequest(key=b"k", lease=5, ignore_lease=True), IA,
             "etcdserver: lease is provided"),
            (self.kv.Put, rpc_pb2.PutRequest(key=b"/missing", ignore_value=True), IA,
             "etcdserver: key not found"),
            (self.kv.Put, rpc_pb2.PutRequest(key=b"k", value=b"v", lease=77),
             grpc.StatusCode.NOT_FOUND, "etcdserver: requested lease not found"),
            (self.kv.Txn, rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(
                request_put=rpc_pb2.PutRequest(key=b"k%d" % i)) for i in range(129)]), IA,
             "etcdserver: too many operations in txn request"),
            (self.kv.Txn, rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"d")),
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"d"))]), IA,
             "etcdserver: duplicate key given in txn request"),
            (self.kv.Txn, rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(
                    key=b"a", range_end=b"z")),
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"m"))]), IA,
             "etcdserver: duplicate key given in txn request"),
            (self.kv.Txn, rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp()]), IA,
             "etcdserver: key not found"),
            (self.kv.Put, rpc_pb2.PutRequest(key=b"big", value=b"x" * (1572864 + 10)), IA,
             "etcdserver: request is too large"),
        ]
        rev = self.kv.Range(rpc_pb2.RangeRequest(key=b"x")).header.revision
        for fn, req, code, msg in cases:
            with self.subTest(msg=msg):
                self.assertEqual(self.status_of(fn, req), (code, msg))
        self.assertEqual(self.kv.Range(rpc_pb2.RangeRequest(key=b"x")).header.revision, rev,
                         "no bad request wrote anything")

    def test_grpc_level_errors(self):
        # larger than --max-request-bytes + 512 KiB: refused by the grpc layer
        code, msg = self.status_of(self.kv.Put,
                                   rpc_pb2.PutRequest(key=b"huge", value=b"x" * (3 << 20)))
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("received message larger than max", msg)
        raw = self.chan.unary_unary("/etcdserverpb.KV/Range", request_serializer=None,
                                    response_deserializer=None)
        with self.assertRaises(grpc.RpcError) as cm:
            raw(b"\xff\xff\xff", timeout=10)
        # quorum answers INVALID_ARGUMENT as its issue asks; etcd (grpc-go)
        # answers INTERNAL; the text starts the same on both
        want = (grpc.StatusCode.INTERNAL if os.environ.get("TARGET") == "etcd"
                else grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.code(), want)
        self.assertTrue(cm.exception.details().startswith("grpc: error unmarshalling request"))
        nope = self.chan.unary_unary("/etcdserverpb.KV/Nope", request_serializer=None,
                                     response_deserializer=None)
        with self.assertRaises(grpc.RpcError) as cm:
            nope(b"", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # the server still serves
        self.assertEqual(self.c.status().version[:3], "3.4")

    def test_status_members(self):
        st = self.c.status()
        # python-etcd3 finds the leader by matching Status.leader in MemberList
        self.assertIsNotNone(st.leader)
        self.assertEqual(st.leader.name, "default")
        self.assertGreater(st.db_size, 0)
        members = list(self.c.members)
        self.assertEqual(len(members), 1)
        self.assertEqual(members[0].name, "default")


if __name__ == "__main__":
    unittest.main(verbosity=2)
