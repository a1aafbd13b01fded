"""Compaction in steps, against real members, at a size where it takes many
steps: --experimental-compaction-batch-limit (etcd 3.4 has the flag too) is
set small, so ~150,000 records below the compaction revision take thousands
of steps.

- The same history on etcd 3.4 and quorum, compacted twice: HashKV at the
  current revision and at revisions above each compaction, and the compact
  revision reported, are etcd's.
- While a compaction runs: a read below it fails with etcd's error at once,
  reads at and above it see what they saw before, writes go on.
- kill -9 in the middle: the meta database says where (scheduledCompactRev
  above finishedCompactRev, quorumCompactNextRev past the start), the
  restart resumes from there and finishes, and HashKV is etcd's.
- A physical Compact is answered once the removal is finished.
- Three members compacting under a write load: no leader change, no failed
  request, every member's HashKV equal afterwards.
"""
import os
import re
import subprocess
import sys
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402
import cluster  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

COMPACTED = "etcdserver: mvcc: required revision has been compacted"
KEYS = 10000
TXNS = 1500  # each puts 100 keys: 150,000 records in 1,500 revisions
PER_TXN = 100


def history(kv):
    """A deterministic history: txns of 100 puts over KEYS keys, with a
    DeleteRange of a few keys now and then. Returns the revisions after
    each third of it."""
    marks = []
    for t in range(TXNS):
        ops = []
        for j in range(PER_TXN):
            k = (t * PER_TXN + j * 7) % KEYS
            ops.append(rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
                key=b"key/%05d" % k, value=b"value %d.%d" % (t, j))))
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=30)
        if t % 50 == 49:
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"key/%05d" % (t % KEYS),
                                                      range_end=b"key/%05d" % (t % KEYS + 30)),
                           timeout=30)
        if t % (TXNS // 3) == TXNS // 3 - 1:
            marks.append(kv.Range(rpc_pb2.RangeRequest(key=b"key/", count_only=True),
                                  timeout=30).header.revision)
    return marks


def stubs(endpoint):
    ch = grpc.insecure_channel(endpoint)
    return ch, rpc_pb2_grpc.KVStub(ch), rpc_pb2_grpc.MaintenanceStub(ch)


def hashes(mt, revs):
    out = []
    for rev in revs:
        r = mt.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=60)
        out.append((rev, r.hash, r.compact_revision))
    return out


def digest(kv, rev):
    """Every kv of the key/ range at |rev| (serializable), as a tuple."""
    r = kv.Range(rpc_pb2.RangeRequest(key=b"key/", range_end=b"key0", revision=rev,
                                      serializable=True), timeout=30)
    return tuple((x.key, x.value, x.mod_revision, x.version, x.create_revision) for x in r.kvs)


def compaction_steps(kind, limit):
    return ["--experimental-compaction-batch-limit", str(limit)]


def run_reference(kind):
    """The history, two physical compactions, and the hashes after each."""
    with Server(kind, extra_args=compaction_steps(kind, 100)) as s:
        ch, kv, mt = stubs(s.endpoint)
        marks = history(kv)
        top = marks[-1]
        out = {"marks": marks}
        kv.Compact(rpc_pb2.CompactionRequest(revision=marks[0], physical=True), timeout=120)
        out["first"] = hashes(mt, [0, marks[0] + 1, marks[1], top])
        kv.Compact(rpc_pb2.CompactionRequest(revision=marks[1], physical=True), timeout=120)
        out["second"] = hashes(mt, [0, marks[1] + 1, top])
        ch.close()
        return out


def meta_values(data_dir):
    """The meta database of a stopped member's store, by name (mdb_dump)."""
    path = os.path.join(data_dir, "member", "db", "data.mdb")
    r = subprocess.run(["mdb_dump", "-n", "-p", "-s", "meta", path], capture_output=True,
                       text=True, check=True)
    lines = [ln[1:] for ln in r.stdout.splitlines() if ln.startswith(" ")]

    def unprint(text):  # mdb_dump -p: "\\" is a backslash, "\hh" a byte
        out, i = bytearray(), 0
        while i < len(text):
            if text[i] == "\\" and text[i + 1] == "\\":
                out.append(0x5c)
                i += 2
            elif text[i] == "\\":
                out.append(int(text[i + 1:i + 3], 16))
                i += 3
            else:
                out.append(ord(text[i]))
                i += 1
        return bytes(out)
    vals = {}
    for name, value in zip(lines[0::2], lines[1::2]):
        raw = unprint(value)
        vals[unprint(name).decode()] = int.from_bytes(raw, "big") if len(raw) == 8 else raw
    return vals


class Compaction(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.want = run_reference("etcd")

    def test_hashkv_equals_etcd_after_stepped_compactions(self):
        got = run_reference("quorum")
        self.assertEqual(got["marks"], self.want["marks"])
        self.assertEqual(got["first"], self.want["first"])
        self.assertEqual(got["second"], self.want["second"])

    def test_reads_and_writes_during_a_compaction(self):
        # 20 revisions a step, 2 ms apart: some seconds for the ~90,000
        with Server("quorum", extra_args=compaction_steps("quorum", 20) +
                    ["--experimental-compaction-sleep-interval", "2ms"]) as s:
            ch, kv, mt = stubs(s.endpoint)
            marks = history(kv)
            at = marks[1]
            before = {rev: digest(kv, rev) for rev in (at, at + 40, 0)}
            self.assertGreater(len(before[at]), KEYS // 2)
            kv.Compact(rpc_pb2.CompactionRequest(revision=at), timeout=30)
            with self.assertRaises(grpc.RpcError) as cm:
                kv.Range(rpc_pb2.RangeRequest(key=b"key/", revision=at - 1), timeout=30)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.OUT_OF_RANGE)
            self.assertEqual(cm.exception.details(), COMPACTED)
            during = 0
            for i in range(200):
                running = compacted(at) not in s.log_tail(100000)
                self.assertEqual(digest(kv, at), before[at])
                self.assertEqual(digest(kv, at + 40), before[at + 40])
                kv.Put(rpc_pb2.PutRequest(key=b"other/%d" % i, value=b"x"), timeout=30)
                if running:
                    during += 1
                elif i > 20:
                    break
            self.assertGreater(during, 0, "no read happened while the compaction ran")
            self.assertTrue(wait_log(s, re.escape(compacted(at)), 120))
            self.assertEqual(digest(kv, at), before[at])
            self.assertEqual(digest(kv, 0), before[0], "the other/ keys are outside key/")
            ch.close()

    def test_physical_compact_answers_when_finished(self):
        # 50 revisions a step, 1 ms apart: a few seconds in all
        with Server("quorum", extra_args=compaction_steps("quorum", 50) +
                    ["--experimental-compaction-sleep-interval", "1ms"]) as s:
            ch, kv, mt = stubs(s.endpoint)
            marks = history(kv)
            t0 = time.monotonic()
            kv.Compact(rpc_pb2.CompactionRequest(revision=marks[1], physical=True), timeout=120)
            self.assertIn(compacted(marks[1]), s.log_tail(100000))
            self.assertGreater(time.monotonic() - t0, 1.0, "answered before the steps ran")
            # a non-physical one is answered at once, before its steps end
            kv.Compact(rpc_pb2.CompactionRequest(revision=marks[2]), timeout=120)
            self.assertNotIn(compacted(marks[2]), s.log_tail(100000))
            self.assertTrue(wait_log(s, re.escape(compacted(marks[2])), 120))
            ch.close()

    def test_kill_during_compaction_resumes_and_hash_is_etcds(self):
        # 10 revisions a step, 5 ms apart: ~20 s for the ~40,000 to drop
        s = Server("quorum", extra_args=compaction_steps("quorum", 10) +
                   ["--experimental-compaction-sleep-interval", "5ms"])
        try:
            s.start()
            ch, kv, mt = stubs(s.endpoint)
            marks = history(kv)
            self.assertEqual(marks, self.want["marks"])
            kv.Compact(rpc_pb2.CompactionRequest(revision=marks[0]), timeout=30)
            # let some steps commit (a batch commits every 100 ms), then kill
            time.sleep(1.0)
            self.assertNotIn(compacted(None), s.log_tail(100000),
                             "finished before the kill: the steps are not small")
            ch.close()
            s.kill()
            meta = meta_values(s.data_dir)
            self.assertEqual(meta["scheduledCompactRev"],
                             marks[0])
            self.assertNotIn("finishedCompactRev", meta)
            pos = meta["quorumCompactNextRev"]
            self.assertGreater(pos, 1, "the position of the last committed step")
            self.assertLess(pos, marks[0])
            s.extra_args = compaction_steps("quorum", 10)  # no pause now
            s.start()
            self.assertTrue(wait_log(s, r"resuming the compaction at revision %d from revision %d"
                                     % (marks[0], pos), 30))
            self.assertTrue(wait_log(s, re.escape(compacted(marks[0])), 300))
            ch, kv, mt = stubs(s.endpoint)
            self.assertEqual(hashes(mt, [0, marks[0] + 1, marks[1], marks[2]]), self.want["first"])
            kv.Compact(rpc_pb2.CompactionRequest(revision=marks[1], physical=True), timeout=120)
            self.assertEqual(hashes(mt, [0, marks[1] + 1, marks[2]]), self.want["second"])
            ch.close()
            s.stop()
            meta = meta_values(s.data_dir)
            self.assertEqual(meta["scheduledCompactRev"], marks[1])
            self.assertEqual(meta["finishedCompactRev"], marks[1])
        finally:
            s.cleanup()

    def test_three_members_compact_under_load(self):
        with cluster.Cluster("quorum", n=3, extra_args=compaction_steps("quorum", 20),
                             heartbeat_ms=100, election_ms=1000) as c:
            leader = c.wait_leader()
            ch, kv, mt = stubs(c.endpoint(leader))
            marks = history(kv)
            term = c.status(leader)["header"]["raft_term"]
            failures = []
            stop = threading.Event()

            def load(i):
                ch2, kv2, _ = stubs(c.endpoint(i))
                n = 0
                while not stop.is_set():
                    try:
                        kv2.Put(rpc_pb2.PutRequest(key=b"load/%d/%d" % (i, n % 50), value=b"v"),
                                timeout=5)
                        kv2.Range(rpc_pb2.RangeRequest(key=b"key/00001"), timeout=5)
                    except grpc.RpcError as e:
                        failures.append((i, e.code(), e.details()))
                    n += 1
                ch2.close()
            threads = [threading.Thread(target=load, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            time.sleep(0.5)
            kv.Compact(rpc_pb2.CompactionRequest(revision=marks[2] - 5, physical=True),
                       timeout=120)
            for m in c.members:
                self.assertTrue(wait_log(m, re.escape(compacted(marks[2] - 5)), 120))
            time.sleep(0.5)
            stop.set()
            for t in threads:
                t.join()
            self.assertEqual(failures, [])
            self.assertEqual(c.leader_index(), leader, "no leader change")
            self.assertEqual(c.status(leader)["header"]["raft_term"], term)
            rev = kv.Range(rpc_pb2.RangeRequest(key=b"key/00001"), timeout=30).header.revision
            got = []
            for i in range(3):
                chi, _, mti = stubs(c.endpoint(i))
                got.append(hashes(mti, [rev]))
                chi.close()
            self.assertEqual(got[0], got[1])
            self.assertEqual(got[0], got[2])
            self.assertEqual(got[0][0][2], marks[2] - 5)
            ch.close()


def compacted(rev):
    """The log line of a finished compaction at |rev| (any if None): etcd's
    "finished scheduled compaction" in quorum's default (capnslog) format."""
    line = 'finished scheduled compaction {"compact-revision": '
    return line if rev is None else line + "%d," % rev


def wait_log(s, pattern, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, s.log_tail(200000)):
            return True
        time.sleep(0.1)
    return False


if __name__ == "__main__":
    unittest.main(verbosity=2)
