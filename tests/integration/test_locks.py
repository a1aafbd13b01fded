"""Locks and elections against quorum: the Lock and Election RPCs, etcdctl
lock/elect (etcd's client-side recipes on the same keys), mutual exclusion
under contention with fencing tokens, and a killed holder's lock released
by its lease, not before."""
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pb34  # noqa: E402
from harness import Server  # noqa: E402

M = pb34.msg


def rpc(ch, path, resp, stream=False):
    make = ch.unary_stream if stream else ch.unary_unary
    return make(path, request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=M(resp).FromString)


class Client:
    def __init__(self, endpoint):
        self.ch = grpc.insecure_channel(endpoint)
        self.lock_ = rpc(self.ch, "/v3lockpb.Lock/Lock", "v3lockpb.LockResponse")
        self.unlock_ = rpc(self.ch, "/v3lockpb.Lock/Unlock", "v3lockpb.UnlockResponse")
        self.grant_ = rpc(self.ch, "/etcdserverpb.Lease/LeaseGrant", "etcdserverpb.LeaseGrantResponse")
        self.range_ = rpc(self.ch, "/etcdserverpb.KV/Range", "etcdserverpb.RangeResponse")
        self.txn_ = rpc(self.ch, "/etcdserverpb.KV/Txn", "etcdserverpb.TxnResponse")
        self.ka_ = self.ch.stream_stream("/etcdserverpb.Lease/LeaseKeepAlive",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=M("etcdserverpb.LeaseKeepAliveResponse").FromString)

    def grant(self, ttl):
        return self.grant_(M("etcdserverpb.LeaseGrantRequest")(TTL=ttl), timeout=10).ID

    def lock(self, name, lease=0, timeout=60):
        return self.lock_(M("v3lockpb.LockRequest")(name=name, lease=lease), timeout=timeout)

    def unlock(self, key):
        return self.unlock_(M("v3lockpb.UnlockRequest")(key=key), timeout=10)

    def get(self, key):
        r = self.range_(M("etcdserverpb.RangeRequest")(key=key), timeout=10)
        return r.kvs[0] if r.kvs else None


def contender(endpoint, name, rounds, me, out):
    """Take the lock |rounds| times; under it, bump /counter with a Txn that
    also checks the fencing token (the lock key's create revision) and that
    nobody else touched the counter since we read it."""
    c = Client(endpoint)
    lease = c.grant(30)
    overlaps = 0
    for i in range(rounds):
        held = c.lock(name, lease)
        token = c.get(held.key).create_revision
        cur = c.get(b"/counter")
        n = int(cur.value) if cur else 0
        mod = cur.mod_revision if cur else 0
        Cmp = M("etcdserverpb.Compare")
        cmps = [Cmp(key=held.key, target=Cmp.CREATE, result=Cmp.EQUAL, create_revision=token),
                Cmp(key=b"/counter", target=Cmp.MOD, result=Cmp.EQUAL, mod_revision=mod)]
        ops = [M("etcdserverpb.RequestOp")(request_put={"key": b"/counter", "value": b"%d" % (n + 1)}),
               M("etcdserverpb.RequestOp")(request_put={"key": b"/log/%08d" % n,
                                                         "value": b"%d-%d-%d" % (me, i, token)})]
        r = c.txn_(M("etcdserverpb.TxnRequest")(compare=cmps, success=ops), timeout=10)
        if not r.succeeded:
            overlaps += 1
        c.unlock(held.key)
    out.put((me, overlaps))


def holder(endpoint, name, ttl, ready):
    """Take the lock on a lease kept alive, then wait to be killed."""
    c = Client(endpoint)
    lease = c.grant(ttl)
    reqs = []

    def keepalive():
        def gen():
            while True:
                yield M("etcdserverpb.LeaseKeepAliveRequest")(ID=lease)
                time.sleep(0.3)
        for _ in c.ka_(gen()):
            pass
    threading.Thread(target=keepalive, daemon=True).start()
    c.lock(name, lease)
    ready.set()
    time.sleep(3600)


class Locks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(os.environ.get("TARGET", "quorum")).start()
        cls.c = Client(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def test_mutual_exclusion_under_contention(self):
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=contender, args=(self.server.endpoint, b"contended", 25, i, out))
                 for i in range(6)]
        for p in procs:
            p.start()
        results = [out.get(timeout=240) for _ in procs]
        for p in procs:
            p.join(30)
        self.assertEqual(sum(o for _, o in results), 0, "a holder saw another inside the lock")
        self.assertEqual(int(self.c.get(b"/counter").value), 150, "an increment was lost")
        r = self.c.range_(M("etcdserverpb.RangeRequest")(key=b"/log/", range_end=b"/log0"), timeout=10)
        tokens = [int(kv.value.split(b"-")[2]) for kv in r.kvs]
        self.assertEqual(len(tokens), 150)
        self.assertEqual(tokens, sorted(tokens), "fencing tokens only grow")
        self.assertEqual(len(set(tokens)), 150, "each holding has its own token")

    def test_killed_holder_releases_at_lease_expiry_not_before(self):
        ttl = 4
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        p = ctx.Process(target=holder, args=(self.server.endpoint, b"killed", ttl, ready))
        p.start()
        self.assertTrue(ready.wait(30))
        t_kill = time.monotonic()
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        held = self.c.lock(b"killed", timeout=60)
        waited = time.monotonic() - t_kill
        # the lease had at least ttl - 0.3 s left when its keep-alives stopped
        self.assertGreaterEqual(waited, ttl - 1.0, "lock taken before the holder's lease expired")
        self.c.unlock(held.key)

    def test_lock_rpc_and_etcdctl_lock_exclude_each_other(self):
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.Popen(["etcdctl", "--endpoints", self.server.endpoint, "lock", "shared",
                              "--", "sh", "-c", "echo in; sleep 1.5"],
                             stdout=subprocess.PIPE, text=True, env=env)
        self.assertEqual(p.stdout.readline().strip(), "in")
        t = time.monotonic()
        held = self.c.lock(b"shared")
        self.assertGreater(time.monotonic() - t, 0.5, "Lock RPC got a lock etcdctl held")
        self.assertTrue(held.key.startswith(b"shared/"))
        p.wait(30)
        p.stdout.close()
        # and the other way round: etcdctl waits for the RPC's lock
        q = subprocess.Popen(["etcdctl", "--endpoints", self.server.endpoint, "lock", "shared",
                              "--", "echo", "got it"], stdout=subprocess.PIPE, text=True, env=env)
        time.sleep(1.0)
        self.assertIsNone(q.poll(), "etcdctl lock got a lock the RPC held")
        self.c.unlock(held.key)
        self.assertEqual(q.communicate(timeout=30)[0].strip(), "got it")

    def test_lock_errors(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.c.lock(b"x", lease=987654321, timeout=10)
        self.assertEqual(cm.exception.details(), "etcdserver: requested lease not found")
        with self.assertRaises(grpc.RpcError) as cm:
            self.c.unlock(b"")
        self.assertEqual(cm.exception.details(), "etcdserver: key is not provided")


class Elections(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(os.environ.get("TARGET", "quorum")).start()
        ch = grpc.insecure_channel(cls.server.endpoint)
        cls.ch = ch
        E = "/v3electionpb.Election/"
        cls.campaign = rpc(ch, E + "Campaign", "v3electionpb.CampaignResponse")
        cls.proclaim = rpc(ch, E + "Proclaim", "v3electionpb.ProclaimResponse")
        cls.resign = rpc(ch, E + "Resign", "v3electionpb.ResignResponse")
        cls.leader = rpc(ch, E + "Leader", "v3electionpb.LeaderResponse")
        cls.observe = rpc(ch, E + "Observe", "v3electionpb.LeaderResponse", stream=True)
        cls.c = Client(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def test_succession_and_observe(self):
        name = b"succession"
        seen = []
        obs = self.observe(M("v3electionpb.LeaderRequest")(name=name), timeout=60)

        def observe():
            try:
                for r in obs:
                    seen.append(r.kv.value)
            except grpc.RpcError:
                pass  # cancelled at the end
        observer = threading.Thread(target=observe, daemon=True)
        observer.start()
        l1, l2 = self.c.grant(30), self.c.grant(30)
        a = self.campaign(M("v3electionpb.CampaignRequest")(name=name, lease=l1, value=b"a"), timeout=10)
        self.assertEqual(self.leader(M("v3electionpb.LeaderRequest")(name=name)).kv.value, b"a")
        got = []
        th = threading.Thread(target=lambda: got.append(self.campaign(
            M("v3electionpb.CampaignRequest")(name=name, lease=l2, value=b"b"), timeout=30)))
        th.start()
        time.sleep(0.5)
        self.assertEqual(got, [], "a second candidate won while the first leads")
        self.proclaim(M("v3electionpb.ProclaimRequest")(leader=a.leader, value=b"a2"))
        self.resign(M("v3electionpb.ResignRequest")(leader=a.leader))
        th.join(30)
        self.assertEqual(got[0].leader.lease, l2)
        deadline = time.monotonic() + 10
        while seen[-1:] != [b"b"] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(seen, [b"a", b"a2", b"b"])
        obs.cancel()
        observer.join(10)  # a stream iterated at interpreter exit can crash grpc

    def test_errors(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.leader(M("v3electionpb.LeaderRequest")(name=b"nobody"), timeout=10)
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.UNKNOWN, "election: no leader"))
        with self.assertRaises(grpc.RpcError) as cm:
            self.proclaim(M("v3electionpb.ProclaimRequest")(value=b"x"), timeout=10)
        self.assertEqual(cm.exception.details(), '"leader" field must be provided')

    def test_etcdctl_elect(self):
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.Popen(["etcdctl", "--endpoints", self.server.endpoint, "elect", "ctl", "p1"],
                             stdout=subprocess.PIPE, text=True, env=env)
        self.assertTrue(p.stdout.readline().startswith("ctl/"))
        r = self.leader(M("v3electionpb.LeaderRequest")(name=b"ctl"), timeout=10)
        self.assertEqual(r.kv.value, b"p1")
        os.kill(p.pid, signal.SIGINT)  # etcdctl resigns on interrupt
        p.wait(30)
        p.stdout.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
