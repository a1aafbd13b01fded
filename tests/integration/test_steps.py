"""Big revisions written in steps (mvcc.h, "Big revisions in steps"): with
--experimental-apply-step-limit set small, a Txn of 1000 puts, a lease
revocation of 1500 keys and a DeleteRange of a 3000-key prefix each take
many LMDB transactions.

- The same history on etcd 3.4 and quorum: HashKV at every revision of
  interest is etcd's (the steps write the records one transaction would).
- Clients reading meanwhile (serializable and linearizable, counts of the
  prefixes a big revision changes) never see part of a revision.
- A follower that catches up by a snapshot indexes the received database
  on a worker before installing it (mvcc_prepare_file), and ends with the
  leader's HashKV.
- kill -9 between steps (a failpoint kills the member when the next step
  is about to commit, so the kill lands between steps every time), once in
  each of the three: the meta database holds quorumStepRev and a
  consistent index before the entry; the restart logs that it resumes the
  entry, finishes it, and HashKV is still etcd's.
"""
import json
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402
from test_compaction import meta_values  # noqa: E402
from cluster import Cluster  # noqa: E402
import test_cluster  # noqa: E402

from etcd3.etcdrpc import kv_pb2, rpc_pb2, rpc_pb2_grpc  # noqa: E402

BIG = 3000     # keys under big/, deleted by one DeleteRange
TXN = 1000     # puts in one Txn under txn/
LEASED = 1500  # keys under lease/ on one lease, revoked
LEASE_ID = 0x51e9
STEP = 64
FLAGS = ["--max-txn-ops", "2000", "--max-request-bytes", "10485760"]
QFLAGS = FLAGS + ["--experimental-apply-step-limit", str(STEP)]
KILL_ENV = "QUORUM_FAILPOINT_APPLY_STEP_KILL"


def prefix_end(p):
    return p[:-1] + bytes([p[-1] + 1])


def stubs(endpoint):
    ch = grpc.insecure_channel(endpoint)
    return ch, rpc_pb2_grpc.KVStub(ch), rpc_pb2_grpc.MaintenanceStub(ch), \
        rpc_pb2_grpc.LeaseStub(ch)


def put_op(key, value, lease=0):
    return rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def load(kv, lease):
    """Keys in txns of 50 puts (below the step limit: one step each)."""
    for i in range(0, BIG, 50):
        kv.Txn(rpc_pb2.TxnRequest(success=[put_op(b"big/%05d" % j, b"b%d" % j)
                                           for j in range(i, i + 50)]), timeout=30)
    lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(ID=LEASE_ID, TTL=3600), timeout=30)
    for i in range(0, LEASED, 50):
        kv.Txn(rpc_pb2.TxnRequest(success=[put_op(b"lease/%05d" % j, b"l%d" % j, LEASE_ID)
                                           for j in range(i, i + 50)]), timeout=30)
    kv.Put(rpc_pb2.PutRequest(key=b"other", value=b"o"), timeout=30)


def big_txn(kv):
    # the compare holds before the txn and not after it: a restart that
    # read it after its first writes would take the other branch
    cmp = rpc_pb2.Compare(key=b"txn/00000", target=rpc_pb2.Compare.VERSION,
                          result=rpc_pb2.Compare.EQUAL, version=0)
    return kv.Txn(rpc_pb2.TxnRequest(
        compare=[cmp],
        success=[put_op(b"txn/%05d" % j, b"t%d" % j) for j in range(TXN)],
        failure=[put_op(b"failed", b"x")]), timeout=60)


def revoke(lease):
    return lease.LeaseRevoke(rpc_pb2.LeaseRevokeRequest(ID=LEASE_ID), timeout=60)


def delete_big(kv):
    return kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"big/", range_end=prefix_end(b"big/")),
                          timeout=60)


def count(kv, prefix, rev=0, serializable=False):
    r = kv.Range(rpc_pb2.RangeRequest(key=prefix, range_end=prefix_end(prefix), count_only=True,
                                      revision=rev, serializable=serializable), timeout=30)
    return r.count, r.header.revision


def hashes(mt, revs):
    return [(rev, mt.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=60).hash)
            for rev in revs]


def current(kv):
    return kv.Range(rpc_pb2.RangeRequest(key=b"other"), timeout=30).header.revision


def run_reference():
    """The history on etcd 3.4: the revision after each big request and
    the hashes there."""
    with Server("etcd", extra_args=FLAGS) as s:
        ch, kv, mt, lease = stubs(s.endpoint)
        load(kv, lease)
        revs = [current(kv)]
        r = big_txn(kv)
        assert r.succeeded
        revs.append(r.header.revision)
        revs.append(revoke(lease).header.revision)
        revs.append(delete_big(kv).header.revision)
        out = {"revs": revs, "hashes": hashes(mt, revs + [0])}
        ch.close()
        return out


class Watcher:
    """A watch on |prefix| from |start| (0: from now) in a thread of its
    own, collecting (type, key, mod_revision) until |want| events came."""

    def __init__(self, endpoint, prefix, start, want):
        self.events = []
        self.want = want
        self.ch = grpc.insecure_channel(endpoint)
        self.created = threading.Event()
        self.done = threading.Event()
        self.reqs = queue.Queue()
        self.reqs.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=start)))
        self.t = threading.Thread(target=self.run)
        self.t.start()
        self.created.wait(30)

    def requests(self):
        while True:
            r = self.reqs.get()
            if r is None:
                return
            yield r

    def run(self):
        try:
            for resp in rpc_pb2_grpc.WatchStub(self.ch).Watch(self.requests(), timeout=120):
                if resp.created:
                    self.created.set()
                for e in resp.events:
                    self.events.append((e.type, e.kv.key, e.kv.mod_revision))
                if len(self.events) >= self.want:
                    break
        except grpc.RpcError:
            pass
        self.done.set()

    def wait(self, timeout=60):
        self.done.wait(timeout)
        self.reqs.put(None)
        self.ch.close()
        self.t.join(30)
        return self.events


class Readers:
    """Threads reading the counts of the prefixes the big revisions change,
    each count checked against the whole-revision values: a read sees a
    revision entirely or not at all."""

    WHOLE = {b"txn/": (0, TXN), b"lease/": (LEASED, 0), b"big/": (BIG, 0)}

    def __init__(self, endpoint, n=3):
        self.stop = threading.Event()
        self.errors = []
        self.reads = 0
        self.threads = [threading.Thread(target=self.run, args=(endpoint, i)) for i in range(n)]

    def run(self, endpoint, i):
        ch, kv, _, _ = stubs(endpoint)
        try:
            while not self.stop.is_set():
                for p, whole in self.WHOLE.items():
                    c, rev = count(kv, p, serializable=(i % 2 == 0))
                    if c not in whole:
                        self.errors.append("%s: %d keys at revision %d" % (p, c, rev))
                    self.reads += 1
        except grpc.RpcError as e:
            self.errors.append("read failed: %s" % e)
        finally:
            ch.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


class Steps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.want = run_reference()

    def test_steps_with_readers_and_hashkv_of_etcd(self):
        with Server("quorum", extra_args=QFLAGS) as s:
            ch, kv, mt, lease = stubs(s.endpoint)
            load(kv, lease)
            w = Watcher(s.endpoint, b"big/", 0, BIG)
            with Readers(s.endpoint) as rd:
                r = big_txn(kv)
                self.assertTrue(r.succeeded)
                revs = [r.header.revision - 1, r.header.revision]
                revs.append(revoke(lease).header.revision)
                revs.append(delete_big(kv).header.revision)
                time.sleep(0.2)  # a few reads after the last one too
            self.assertEqual(rd.errors, [])
            self.assertGreater(rd.reads, 0)
            self.assertEqual(revs, self.want["revs"])
            log = s.log_tail(1000000)
            for kind, changes in (("TxnRequest", TXN), ("LeaseRevokeRequest", LEASED),
                                  ("DeleteRangeRequest", BIG)):
                m = re.search(r"applied entry \d+ \(%s\) at revision \d+ in (\d+) steps" % kind,
                              log)
                self.assertIsNotNone(m, "%s was not applied in steps" % kind)
                self.assertEqual(int(m.group(1)), (changes + STEP - 1) // STEP)
            # each revision whole at, and nothing of it below, its revision
            self.assertEqual(count(kv, b"txn/", revs[1] - 1)[0], 0)
            self.assertEqual(count(kv, b"txn/", revs[1])[0], TXN)
            self.assertEqual(count(kv, b"lease/", revs[2] - 1)[0], LEASED)
            self.assertEqual(count(kv, b"lease/", revs[2])[0], 0)
            self.assertEqual(count(kv, b"big/", revs[3] - 1)[0], BIG)
            self.assertEqual(count(kv, b"big/", revs[3])[0], 0)
            self.assertEqual(count(kv, b"failed")[0], 0)
            self.assertEqual(hashes(mt, revs + [0]), self.want["hashes"])
            # the watcher got the DeleteRange's events, all of its revision
            ev = w.wait()
            self.assertEqual(len(ev), BIG)
            self.assertEqual({(t, r) for t, _, r in ev}, {(kv_pb2.Event.DELETE, revs[3])})
            self.assertEqual([k for _, k, _ in ev], [b"big/%05d" % j for j in range(BIG)])
            ch.close()

    def test_kill_between_steps_resumes(self):
        s = Server("quorum", extra_args=QFLAGS)
        try:
            s.start()
            ch, kv, mt, lease = stubs(s.endpoint)
            load(kv, lease)
            ch.close()
            s.stop()
            steps = [(big_txn, "TxnRequest", TXN, 5), (revoke, "LeaseRevokeRequest", LEASED, 11),
                     (delete_big, "DeleteRangeRequest", BIG, 30)]
            for i, (request, kind, changes, kill_after) in enumerate(steps):
                os.environ[KILL_ENV] = str(kill_after)
                try:
                    s.start()
                finally:
                    del os.environ[KILL_ENV]
                ch, kv, mt, lease = stubs(s.endpoint)
                with self.assertRaises(grpc.RpcError, msg=kind):
                    request(lease if kind.startswith("Lease") else kv)
                ch.close()
                s.proc.wait(timeout=30)
                self.assertEqual(s.proc.returncode, -9, "killed by the failpoint")
                s.kill()
                rev = self.want["revs"][i + 1]
                meta = meta_values(s.data_dir)
                self.assertEqual(meta.get("quorumStepRev"), rev, kind)
                log = s.log_tail(1000000)
                m = re.findall(r"applying entry (\d+) \(%s\) in steps" % kind, log)
                self.assertTrue(m, kind)
                entry = int(m[-1])
                self.assertEqual(meta["consistent_index"], entry - 1,
                                 "the steps record the entries before this one")
                s.start()
                self.assertTrue(wait_log(s, r"resuming entry %d \(%s\): revision %d has %d changes"
                                         % (entry, kind, rev, kill_after * STEP), 30),
                                s.log_tail())
                ch, kv, mt, lease = stubs(s.endpoint)
                self.assertEqual(current(kv), rev)
                self.assertEqual(hashes(mt, [rev]), [h for h in self.want["hashes"]
                                                     if h[0] == rev])
                if kind == "DeleteRangeRequest":  # its events, from the history
                    ev = Watcher(s.endpoint, b"big/", rev, BIG).wait()
                    self.assertEqual(len(ev), BIG)
                    self.assertEqual({r for _, _, r in ev}, {rev})
                ch.close()
                s.stop()
                self.assertNotIn("quorumStepRev", meta_values(s.data_dir))
            s.start()
            ch, kv, mt, lease = stubs(s.endpoint)
            self.assertEqual(count(kv, b"failed")[0], 0, "the Txn's branch was kept")
            self.assertEqual(count(kv, b"txn/")[0], TXN)
            self.assertEqual(count(kv, b"lease/")[0], 0)
            self.assertEqual(count(kv, b"big/")[0], 0)
            with self.assertRaises(grpc.RpcError):  # the lease went with its keys
                revoke(lease)
            self.assertEqual(hashes(mt, self.want["revs"] + [0]), self.want["hashes"])
            ch.close()
        finally:
            s.cleanup()

    def test_snapshot_indexed_on_a_worker(self):
        with Cluster("quorum", extra_args=QFLAGS + ["--snapshot-count", "100"]) as c:
            lead = c.wait_leader()
            victim, via = [i for i in range(3) if i != lead]
            ch, kv, _, lease = stubs(c.endpoint(via))
            load(kv, lease)  # a lease and its keys travel in the snapshot too
            ch.close()
            rev, hashes = test_cluster.write_while_down(c, victim, via, "s/", test_cluster.SNAP_KEYS)
            self.assertEqual(len({h[:2] for h in hashes.values()}), 1, hashes)
            log = test_cluster.log_since_last_start(c.members[victim])
            got = re.search(r"indexed the snapshot received at index (\d+) in [\d.]+ s", log)
            self.assertIsNotNone(got, "the follower did not index the snapshot aside")
            inst = re.search(r"applied snapshot at index (\d+)", log)
            self.assertIsNotNone(inst)
            self.assertEqual(got.group(1), inst.group(1))
            self.assertLess(got.start(), inst.start())
            # the follower's lessor learnt the keys: revoking deletes them there
            ch, kv, _, lease = stubs(c.endpoint(via))
            revoke(lease)
            ch.close()
            ch, kv, _, _ = stubs(c.endpoint(victim))
            deadline = time.monotonic() + 30
            while count(kv, b"lease/", serializable=True)[0] != 0 and \
                    time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(count(kv, b"lease/", serializable=True)[0], 0)
            ch.close()


MANY = 6000       # keys under many/, deleted by one DeleteRange in a cluster
SLEEP_ENV = "QUORUM_FAILPOINT_APPLY_PAUSE_SLEEP_MS"
PAUSE = 1000      # changes between pauses (node.c APPLY_PAUSE_CHANGES)


def load_many(kv):
    for i in range(0, MANY, 500):
        kv.Txn(rpc_pb2.TxnRequest(success=[put_op(b"many/%05d" % j, b"m%d" % j)
                                           for j in range(i, i + 500)]), timeout=30)


def delete_many(kv):
    return kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"many/",
                                                     range_end=prefix_end(b"many/")), timeout=60)


def slow_steps_cluster(ms, step):
    """A 3-member cluster whose steps are |step| changes, and the work
    before each pause takes |ms| ms more (a failpoint): its clients
    certainly run between the passes of the DeleteRange."""
    os.environ[SLEEP_ENV] = str(ms)
    try:
        return Cluster("quorum", extra_args=FLAGS + ["--experimental-apply-step-limit",
                                                     str(step)]).start()
    finally:
        del os.environ[SLEEP_ENV]


def hashkv_all(c, rev):
    out = {}
    for i in range(3):
        ch, _, mt, _ = stubs(c.endpoint(i))
        out[i] = mt.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=60).hash
        ch.close()
    return out


def wait_rev(c, i, rev, timeout=30):
    ch, kv, _, _ = stubs(c.endpoint(i))
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r = kv.Range(rpc_pb2.RangeRequest(key=b"other", serializable=True), timeout=30)
            if r.header.revision >= rev:
                return True
            time.sleep(0.05)
        return False
    finally:
        ch.close()


class ClusterWork:
    """While a big revision is applied: a writer putting w/NNNNN in order
    through |writer_ep| and recording each answer's revision, and a reader
    per member counting many/ (serializable there, and linearizable), each
    count whole (MANY or 0) and each reader's revisions never going back."""

    def __init__(self, c, writer_ep):
        self.stop = threading.Event()
        self.errors = []
        self.writes = []   # (i, revision, sent, answered)
        self.reads = []    # (member, started, finished, count, revision)
        self.threads = [threading.Thread(target=self.write, args=(writer_ep,))]
        self.threads += [threading.Thread(target=self.read, args=(c.endpoint(i), i, ser))
                         for i in range(3) for ser in (True, False)]

    def write(self, ep):
        ch, kv, _, _ = stubs(ep)
        i = 0
        try:
            while not self.stop.is_set():
                t0 = time.monotonic()
                r = kv.Put(rpc_pb2.PutRequest(key=b"w/%05d" % i, value=b"%d" % i), timeout=30)
                self.writes.append((i, r.header.revision, t0, time.monotonic()))
                i += 1
        except grpc.RpcError as e:
            self.errors.append("write %d failed: %s" % (i, e))
        finally:
            ch.close()

    def read(self, ep, member, serializable):
        ch, kv, _, _ = stubs(ep)
        last = 0
        try:
            while not self.stop.is_set():
                t0 = time.monotonic()
                n, rev = count(kv, b"many/", serializable=serializable)
                self.reads.append((member, t0, time.monotonic(), n, rev))
                if n not in (MANY, 0):
                    self.errors.append("m%d: %d keys at revision %d" % (member, n, rev))
                if rev < last:
                    self.errors.append("m%d: revision %d after %d" % (member, rev, last))
                last = rev
        except grpc.RpcError as e:
            self.errors.append("m%d read failed: %s" % (member, e))
        finally:
            ch.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


class ClusterSteps(unittest.TestCase):
    """Applying a big revision across loop passes (node.c): the loop goes
    back to its clients and to Raft between steps, on every member."""

    def test_delete_range_across_passes_with_clients(self):
        # steps of 2500 changes: the first commits at 1000 (PAUSE), the next
        # at 3500, the last with the revision; a pass every 1000 changes
        # and after each commit: 7 passes
        c = slow_steps_cluster(60, 2500)
        try:
            lead = c.wait_leader()
            ch, kv, _, _ = stubs(c.endpoint(lead))
            load_many(kv)
            loaded = kv.Put(rpc_pb2.PutRequest(key=b"other", value=b"o"), timeout=30)
            for i in range(3):  # the followers' serializable reads too
                self.assertTrue(wait_rev(c, i, loaded.header.revision))
            with ClusterWork(c, c.endpoint(lead)) as work:
                time.sleep(0.2)
                t0 = time.monotonic()
                r = delete_many(kv)
                t1 = time.monotonic()
                time.sleep(0.3)
            big = r.header.revision
            self.assertEqual(r.deleted, MANY)
            self.assertEqual(work.errors, [])
            # the writes: in order, none lost, none at the big revision, and
            # those sent once it was answered after it
            revs = [w[1] for w in work.writes]
            self.assertGreater(len(revs), 0)
            self.assertEqual(revs, sorted(set(revs)), "writes reordered")
            self.assertNotIn(big, revs)
            self.assertTrue(all(w[1] > big for w in work.writes if w[2] > t1))
            self.assertTrue(any(w[1] > big for w in work.writes))
            # reads completed while the DeleteRange was under way (the loop
            # was not held), all of the revision before it
            during = [x for x in work.reads if x[1] > t0 and x[2] < t1]
            self.assertGreater(len(during), 0)
            final = revs[-1]
            for i in range(3):
                self.assertTrue(wait_rev(c, i, final), "m%d did not reach %d" % (i, final))
            for i in range(3):
                ch2, kv2, _, _ = stubs(c.endpoint(i))
                got = kv2.Range(rpc_pb2.RangeRequest(key=b"w/", range_end=prefix_end(b"w/"),
                                                     revision=final, serializable=True),
                                timeout=30)
                self.assertEqual([(k.key, k.mod_revision) for k in got.kvs],
                                 [(b"w/%05d" % w[0], w[1]) for w in work.writes], "m%d" % i)
                self.assertEqual(count(kv2, b"many/", big - 1, True)[0], MANY)
                self.assertEqual(count(kv2, b"many/", big, True)[0], 0)
                ch2.close()
            h = hashkv_all(c, final)
            self.assertEqual(len(set(h.values())), 1, h)
            h = hashkv_all(c, big)
            self.assertEqual(len(set(h.values())), 1, h)
            for m in c.members:
                got = re.findall(r"applied entry \d+ \(DeleteRangeRequest\) at revision %d in "
                                 r"(\d+) steps \((\d+) loop passes\)" % big, m.log_tail(1000000))
                self.assertEqual(got, [("3", "7")], m.name)
            ch.close()
        finally:
            c.cleanup()

    def test_kill_follower_between_passes_resumes(self):
        c = slow_steps_cluster(10, 50)  # 120 steps, a pass after each
        try:
            lead = c.wait_leader()
            victim = (lead + 1) % 3
            ch, kv, _, _ = stubs(c.endpoint(lead))
            load_many(kv)
            kv.Put(rpc_pb2.PutRequest(key=b"other", value=b"o"), timeout=30)
            res = {}
            t = threading.Thread(target=lambda: res.setdefault("r", delete_many(kv)))
            t.start()
            m = c.members[victim]
            self.assertTrue(wait_log(m, r"applying entry \d+ \(DeleteRangeRequest\) in steps",
                                     30, poll=0.005))
            # the line comes before the first step commits: the kill waits
            # for the mark a committed step leaves (a fixed pause lost the
            # race to a slow fsync under the suite's load); 120 steps of
            # 10 ms and more keep it far from the last
            deadline = time.monotonic() + 30
            while "quorumStepRev" not in meta_values(m.data_dir) and time.monotonic() < deadline:
                time.sleep(0.005)
            c.kill(victim)
            t.join(60)
            big = res["r"].header.revision
            meta = meta_values(m.data_dir)
            self.assertEqual(meta.get("quorumStepRev"), big, "killed between steps")
            c.restart(victim)
            self.assertTrue(wait_log(m, r"resuming entry \d+ \(DeleteRangeRequest\): "
                                     r"revision %d has \d+ changes" % big, 30))
            last = kv.Put(rpc_pb2.PutRequest(key=b"other", value=b"after"), timeout=30)
            for i in range(3):
                self.assertTrue(wait_rev(c, i, last.header.revision))
            h = hashkv_all(c, last.header.revision)
            self.assertEqual(len(set(h.values())), 1, h)
            ch2, kv2, _, _ = stubs(c.endpoint(victim))
            self.assertEqual(count(kv2, b"many/", big - 1, True)[0], MANY)
            self.assertEqual(count(kv2, b"many/", big, True)[0], 0)
            ch2.close()
            ch.close()
        finally:
            c.cleanup()


class LeaderMoves(unittest.TestCase):
    def test_leader_moves_while_the_revision_is_applied(self):
        """MoveLeader between the passes of a DeleteRange on every member:
        the transfer goes through (the members answer Raft between
        passes), the request is answered by the member it was sent to
        once applied there, and every member ends with the same store."""
        c = slow_steps_cluster(20, 50)  # 120 passes of 20 ms and more
        try:
            lead = c.wait_leader()
            to = (lead + 1) % 3
            ch, kv, mt, _ = stubs(c.endpoint(lead))
            load_many(kv)
            kv.Put(rpc_pb2.PutRequest(key=b"other", value=b"o"), timeout=30)
            ch2, _, mt2, _ = stubs(c.endpoint(to))
            to_id = mt2.Status(rpc_pb2.StatusRequest(), timeout=10).header.member_id
            res = {}
            t = threading.Thread(target=lambda: res.setdefault("r", delete_many(kv)))
            t.start()
            self.assertTrue(wait_log(c.members[lead],
                                     r"applying entry \d+ \(DeleteRangeRequest\) in steps", 30,
                                     poll=0.005))
            mt.MoveLeader(rpc_pb2.MoveLeaderRequest(targetID=to_id), timeout=30)
            deadline = time.monotonic() + 10
            while c.leader_index() != to and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(c.leader_index(), to)
            t.join(60)
            big = res["r"].header.revision
            self.assertEqual(res["r"].deleted, MANY)
            _, kv2, _, _ = stubs(c.endpoint(to))
            last = kv2.Put(rpc_pb2.PutRequest(key=b"other", value=b"after"), timeout=30)
            self.assertGreater(last.header.revision, big)
            for i in range(3):
                self.assertTrue(wait_rev(c, i, last.header.revision))
            h = hashkv_all(c, last.header.revision)
            self.assertEqual(len(set(h.values())), 1, h)
            ch.close()
            ch2.close()
        finally:
            c.cleanup()


class StopDuringSteps(unittest.TestCase):
    def test_sigterm_between_passes_finishes_the_revision(self):
        """SIGTERM between the passes of a DeleteRange: the member finishes
        it before it exits (server_apply_finish), cleanly, and the store
        holds the whole revision with no mark left."""
        os.environ[SLEEP_ENV] = "20"
        try:
            s = Server("quorum", extra_args=QFLAGS)
            s.start()
        finally:
            del os.environ[SLEEP_ENV]
        try:
            ch, kv, mt, lease = stubs(s.endpoint)
            load(kv, lease)
            t = threading.Thread(target=lambda: delete_big(kv))
            t.start()
            self.assertTrue(wait_log(s, r"applying entry \d+ \(DeleteRangeRequest\) in steps",
                                     30, poll=0.005))
            s.stop()  # SIGTERM; fails unless it exits 0
            t.join(60)
            ch.close()
            self.assertRegex(s.log_tail(1000000),
                             r"applied entry \d+ \(DeleteRangeRequest\) at revision \d+ in "
                             r"\d+ steps")
            self.assertNotIn("quorumStepRev", meta_values(s.data_dir))
            s.start()
            ch, kv, mt, lease = stubs(s.endpoint)
            self.assertEqual(count(kv, b"big/")[0], 0)
            self.assertNotRegex(s.log_tail(1000000), r"resuming entry")
            ch.close()
        finally:
            s.cleanup()


class SnapshotDuringSteps(unittest.TestCase):
    def test_snapshot_and_defrag_wait_for_the_revision(self):
        """A Snapshot and a Defragment asked while a DeleteRange is applied
        across loop passes start once it is applied (server_apply_wait):
        the snapshot holds the whole revision, as one taken afterwards."""
        os.environ[SLEEP_ENV] = "20"  # 3000 keys in steps of 64: 47 passes, ~1 s
        try:
            s = Server("quorum", extra_args=QFLAGS)
            s.start()
        finally:
            del os.environ[SLEEP_ENV]
        try:
            ch, kv, mt, lease = stubs(s.endpoint)
            load(kv, lease)
            res = {}
            t = threading.Thread(target=lambda: res.setdefault("r", delete_big(kv)))
            t.start()
            self.assertTrue(wait_log(s, r"applying entry \d+ \(DeleteRangeRequest\) in steps",
                                     30, poll=0.005))
            tmp = tempfile.mkdtemp(prefix="steps-snap-")
            paths = [os.path.join(tmp, "during.db"), os.path.join(tmp, "after.db")]
            s.etcdctl("snapshot", "save", paths[0], timeout=60)
            mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=60)
            t.join(60)
            big = res["r"].header.revision
            s.etcdctl("snapshot", "save", paths[1], timeout=60)
            st = [json.loads(s.etcdctl("snapshot", "status", p, "-w", "json").stdout)
                  for p in paths]
            self.assertEqual(st[0]["revision"], big)
            self.assertEqual((st[0]["revision"], st[0]["totalKey"]),
                             (st[1]["revision"], st[1]["totalKey"]))
            self.assertEqual(count(kv, b"big/")[0], 0)
            ch.close()
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            s.cleanup()


def wait_log(s, pattern, timeout, poll=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, s.log_tail(1000000)):
            return True
        time.sleep(poll)
    return False


if __name__ == "__main__":
    unittest.main(verbosity=2)
