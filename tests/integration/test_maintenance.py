"""Maintenance against a real server with real etcdctl 3.4: the NOSPACE
alarm and the backend quota, alarm list/disarm, Defragment, Snapshot, Hash
and auto-compaction.

TARGET=etcd runs the same expectations against etcd 3.4 (tests that need a
quorum-only flag or quorum's file format are skipped there)."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402
import pb34  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
NOSPACE = "etcdserver: mvcc: database space exceeded"
COMPACTED = "etcdserver: mvcc: required revision has been compacted"
MIB = 1024 * 1024


def wait_for(pred, timeout=30.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Rpc:
    """Raw gRPC with etcd 3.4's messages (pb34): every field is visible."""

    def __init__(self, endpoint):
        self.chan = grpc.insecure_channel(endpoint)

    def call(self, path, req_name, resp_name, **fields):
        req = pb34.msg("etcdserverpb." + req_name)(**fields)
        fn = self.chan.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=pb34.msg("etcdserverpb." + resp_name)
                                   .FromString)
        return fn(req, timeout=30)

    def put(self, key, value):
        return self.call("/etcdserverpb.KV/Put", "PutRequest", "PutResponse",
                         key=key.encode(), value=value)

    def get(self, key, rev=0):
        r = self.call("/etcdserverpb.KV/Range", "RangeRequest", "RangeResponse",
                      key=key.encode(), revision=rev)
        return r.kvs[0].value if r.kvs else None

    def status(self):
        return self.call("/etcdserverpb.Maintenance/Status", "StatusRequest", "StatusResponse")

    def alarm(self, action, member=0, alarm=0):
        return self.call("/etcdserverpb.Maintenance/Alarm", "AlarmRequest", "AlarmResponse",
                         action=action, memberID=member, alarm=alarm)

    def close(self):
        self.chan.close()


GET, ACTIVATE, DEACTIVATE = 0, 1, 2
ALARM_NOSPACE = 1


class Maintenance(unittest.TestCase):
    def start(self, *extra):
        self.server = Server(TARGET, extra_args=list(extra)).start()
        self.rpc = Rpc(self.server.endpoint)
        return self.server

    def restart(self):
        self.rpc.close()
        self.server.stop()
        self.server.start()
        self.rpc = Rpc(self.server.endpoint)

    def tearDown(self):
        if getattr(self, "rpc", None):
            self.rpc.close()
        if getattr(self, "server", None):
            # a graceful stop: under ASan this is where leaks are reported
            # (as a non-zero exit)
            self.server.stop()
            code = self.server.proc.returncode
            self.server.cleanup()
            if TARGET == "quorum":
                self.assertEqual(code, 0, "quorum exited with %s" % code)

    def assert_nospace(self, fn):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.RESOURCE_EXHAUSTED, NOSPACE))

    def defrag(self):
        r = self.server.etcdctl("defrag", check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def alarm_text(self, member):
        return "memberID:%d alarm:NOSPACE " % member

    # ---- NOSPACE: fill, refused writes, reads, recovery ----

    def test_nospace_fill_recover(self):
        s = self.start("--quota-backend-bytes", str(16 * MIB))
        member = self.rpc.status().header.member_id
        # overwrite a few keys, so history (not live data) fills the quota
        # and a compaction can free it
        latest = {}
        filler = b"x" * (100 * 1024)
        failed_at = None
        for i in range(1000):
            key = "k%d" % (i % 8)
            val = b"%d:" % i + filler
            try:
                self.rpc.put(key, val)
            except grpc.RpcError as e:
                self.assertEqual((e.code(), e.details()),
                                 (grpc.StatusCode.RESOURCE_EXHAUSTED, NOSPACE))
                failed_at = i
                refused = (key, val)
                break
            latest[key] = val
        self.assertIsNotNone(failed_at, "the quota was never reached")
        self.assertGreater(failed_at, 20)

        # the alarm: Alarm GET, etcdctl alarm list, Status.errors
        alarms = self.rpc.alarm(GET).alarms
        self.assertEqual([(a.memberID, a.alarm) for a in alarms], [(member, ALARM_NOSPACE)])
        self.assertEqual(s.etcdctl("alarm", "list").stdout, self.alarm_text(member) + "\n")
        st = json.loads(s.etcdctl("endpoint", "status", "-w", "json").stdout)[0]["Status"]
        self.assertEqual(st["errors"], [self.alarm_text(member)])
        self.assertEqual(list(self.rpc.status().errors), [self.alarm_text(member)])

        # refused: put (etcdctl's exact text too), lease grant, txn with a put
        r = s.etcdctl("put", "new", "v", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Error: " + NOSPACE, r.stderr)
        r = s.etcdctl("lease", "grant", "100", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(NOSPACE, r.stderr)
        self.assert_nospace(lambda: self.rpc.put("new", b"v"))
        put_op = pb34.msg("etcdserverpb.RequestOp")(
            request_put=pb34.msg("etcdserverpb.PutRequest")(key=b"new", value=b"v"))
        self.assert_nospace(lambda: self.rpc.call("/etcdserverpb.KV/Txn", "TxnRequest",
                                                  "TxnResponse", success=[put_op]))

        # allowed: reads, deletes. etcd 3.4 refuses a put past the quota
        # either before Raft (the API's check) or when applying it, and
        # there its quotaApplierV3 writes the put and then answers NOSPACE:
        # the refused value may be what etcd holds. quorum's apply writes
        # nothing for a refused entry.
        for k, v in latest.items():
            got = self.rpc.get(k)
            if TARGET == "etcd" and k == refused[0] and got == refused[1]:
                continue
            self.assertEqual(got, v)
        self.assertEqual(s.etcdctl("del", "k7").stdout, "1\n")
        latest.pop("k7")

        # the alarm survives a restart (etcd: the alarm bucket)
        self.restart()
        self.assertEqual(s.etcdctl("alarm", "list").stdout, self.alarm_text(member) + "\n")
        self.assert_nospace(lambda: self.rpc.put("new", b"v"))

        # recovery: compact, defragment, disarm, write again
        rev = self.rpc.status().header.revision
        self.assertEqual(s.etcdctl("compact", str(rev)).stdout, "compacted revision %d\n" % rev)
        before = self.rpc.status().dbSize
        r = self.defrag()
        self.assertIn("Finished defragmenting etcd member[%s]" % s.endpoint, r.stdout)
        after = self.rpc.status().dbSize
        self.assertLess(after, before)
        self.assertLess(after, 16 * MIB)
        r = s.etcdctl("alarm", "disarm")
        self.assertEqual(r.stdout, self.alarm_text(member) + "\n")
        self.assertEqual(s.etcdctl("alarm", "list").stdout, "")
        self.assertEqual(list(self.rpc.status().errors), [])
        self.assertEqual(s.etcdctl("put", "new", "v").stdout, "OK\n")
        s.etcdctl("lease", "grant", "100")

        # nothing written before is lost
        for k, v in latest.items():
            self.assertEqual(self.rpc.get(k), v)
        self.assertIsNone(self.rpc.get("k7"))
        self.assertEqual(self.rpc.get("new"), b"v")

    # ---- the Alarm API itself ----

    def test_alarm_activate_deactivate(self):
        s = self.start()
        member = self.rpc.status().header.member_id
        self.assertEqual(list(self.rpc.alarm(GET).alarms), [])
        self.assertEqual(s.etcdctl("alarm", "list").stdout, "")
        r = self.rpc.alarm(ACTIVATE, member, ALARM_NOSPACE)
        self.assertEqual([(a.memberID, a.alarm) for a in r.alarms], [(member, ALARM_NOSPACE)])
        # activating again answers the same alarm, still one of them
        r = self.rpc.alarm(ACTIVATE, member, ALARM_NOSPACE)
        self.assertEqual([(a.memberID, a.alarm) for a in r.alarms], [(member, ALARM_NOSPACE)])
        self.assertEqual(len(self.rpc.alarm(GET).alarms), 1)
        self.assertEqual(s.etcdctl("alarm", "list").stdout, self.alarm_text(member) + "\n")
        self.assert_nospace(lambda: self.rpc.put("a", b"b"))
        self.assertIsNone(self.rpc.get("a"))
        # a member/type not raised: nothing deactivated
        r = self.rpc.alarm(DEACTIVATE, member + 1, ALARM_NOSPACE)
        self.assertEqual(list(r.alarms), [])
        self.assertEqual(s.etcdctl("alarm", "disarm").stdout, self.alarm_text(member) + "\n")
        self.assertEqual(s.etcdctl("alarm", "list").stdout, "")
        self.assertEqual(s.etcdctl("alarm", "disarm").stdout, "")
        self.rpc.put("a", b"b")
        self.assertEqual(self.rpc.get("a"), b"b")

    def test_alarm_corrupt_and_none(self):
        s = self.start()
        self.rpc.put("a", b"1")
        # etcd 3.4 activates type NONE too; its text leaves the zero field out
        r = self.rpc.alarm(ACTIVATE, 5, 0)
        self.assertEqual([(a.memberID, a.alarm) for a in r.alarms], [(5, 0)])
        self.rpc.alarm(ACTIVATE, 5, 2)
        self.assertEqual(sorted(self.rpc.status().errors),
                         ["memberID:5 ", "memberID:5 alarm:CORRUPT "])
        # CORRUPT: writes fail DATA_LOSS, reads go on
        with self.assertRaises(grpc.RpcError) as cm:
            self.rpc.put("a", b"2")
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.DATA_LOSS, "etcdserver: corrupt cluster"))
        r = s.etcdctl("del", "a", check=False)
        self.assertIn("etcdserver: corrupt cluster", r.stderr)
        self.assertEqual(self.rpc.get("a"), b"1")
        self.assertEqual(sorted(s.etcdctl("alarm", "disarm").stdout.splitlines()),
                         ["memberID:5 ", "memberID:5 alarm:CORRUPT "])
        self.rpc.put("a", b"3")
        self.assertEqual(self.rpc.get("a"), b"3")

    # ---- Defragment ----

    def test_defrag_shrinks_keeps_data_and_watches(self):
        s = self.start()
        c = s.client()
        events = []
        watch_id = c.add_watch_callback("w", lambda resp: events.extend(resp.events))
        filler = b"y" * (64 * 1024)
        for i in range(200):
            self.rpc.put("d%d" % (i % 4), b"%d:" % i + filler)
        rev = self.rpc.status().header.revision
        s.etcdctl("compact", str(rev))
        before = self.rpc.status().dbSize
        r = self.defrag()
        self.assertIn("Finished defragmenting", r.stdout)
        after = self.rpc.status().dbSize
        self.assertLess(after, before)
        for j in range(4):
            i = 196 + j
            self.assertEqual(self.rpc.get("d%d" % (i % 4)), b"%d:" % i + filler)
        # history below the compaction is gone, above it is there
        r = s.etcdctl("get", "d0", "--rev", str(rev - 1), check=False)
        self.assertIn(COMPACTED, r.stderr)
        # writes and the watch opened before the defragmentation still work
        self.assertEqual(s.etcdctl("put", "w", "after").stdout, "OK\n")
        self.assertTrue(wait_for(lambda: any(e.value == b"after" for e in events)))
        c.cancel_watch(watch_id)
        c.close()
        # and it all survives a restart
        self.restart()
        self.assertEqual(self.rpc.get("w"), b"after")
        self.assertEqual(self.rpc.get("d3"), b"199:" + filler)

    def test_defrag_under_writes_keeps_every_acknowledged_write(self):
        """Writes go on while the copy is made (quorum copies on a worker
        thread and catches the copy up with what was written meanwhile):
        every write acknowledged before, during or after two overlapping
        Defragment calls is there afterwards, and after a restart."""
        s = self.start()
        filler = b"f" * 1024
        for i in range(6000):  # a few MB: the copy takes a while
            self.rpc.put("base%d" % (i % 3000), b"%d:" % i + filler)
        acked = {}
        stop = threading.Event()
        errors = []

        def writer(tag):
            rpc = Rpc(s.endpoint)
            i = 0
            try:
                while not stop.is_set():
                    key = "%s%d" % (tag, i % 500)
                    val = b"%d" % i
                    rpc.put(key, val)
                    acked[key] = val
                    if i % 7 == 0:
                        rpc.call("/etcdserverpb.KV/DeleteRange", "DeleteRangeRequest",
                                 "DeleteRangeResponse", key=("%s%d" % (tag, (i * 3) % 500))
                                 .encode())
                        acked.pop("%s%d" % (tag, (i * 3) % 500), None)
                    i += 1
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
            finally:
                rpc.close()

        threads = [threading.Thread(target=writer, args=(t,)) for t in ("wa", "wb")]
        for t in threads:
            t.start()
        time.sleep(0.3)
        procs = [subprocess.Popen(["etcdctl", "--endpoints", s.endpoint, "defrag"],
                                  env=dict(os.environ, ETCDCTL_API="3"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("Finished defragmenting etcd member[%s]" % s.endpoint, out)
        self.assertGreater(len(acked), 100)

        def check():
            for key, val in sorted(acked.items()):
                self.assertEqual(self.rpc.get(key), val, key)
            for tag in ("wa", "wb"):
                for j in range(500):
                    key = "%s%d" % (tag, j)
                    if key not in acked:
                        self.assertIsNone(self.rpc.get(key), key)
            self.assertEqual(self.rpc.get("base2999"), b"5999:" + filler)
        check()
        self.restart()
        check()

    # ---- Snapshot ----

    def test_snapshot_save(self):
        s = self.start()
        # about 2 MB: many 32 KiB messages, and some output backpressure
        for i in range(200):
            self.rpc.put("s%d" % i, b"v%d" % i * 2000)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "snap.db")
            r = s.etcdctl("snapshot", "save", path)
            self.assertIn("Snapshot saved at " + path, r.stdout)
            with open(path, "rb") as f:
                data = f.read()
            self.assertGreater(len(data), 32)
            body, digest = data[:-32], data[-32:]
            # etcd's stream ends with the sha256 of the bytes before it
            self.assertEqual(hashlib.sha256(body).digest(), digest)
            self.assertLessEqual(len(body), self.rpc.status().dbSize)
            # etcd's backup format from both: etcdctl (bbolt) reads it, and
            # the 200 keys are there
            out = subprocess.run(["etcdctl", "snapshot", "status", path, "-w", "json"],
                                 capture_output=True, text=True,
                                 env=dict(os.environ, ETCDCTL_API="3"))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertGreaterEqual(json.loads(out.stdout)["totalKey"], 200)

    def test_snapshot_client_leaves(self):
        """A client that leaves mid-stream: the server frees the stream and
        goes on; a later snapshot is whole."""
        self.start()
        for i in range(100):
            self.rpc.put("s%d" % i, b"z" * 20000)
        fn = self.rpc.chan.unary_stream(
            "/etcdserverpb.Maintenance/Snapshot",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb34.msg("etcdserverpb.SnapshotResponse").FromString)
        for _ in range(3):
            it = fn(pb34.msg("etcdserverpb.SnapshotRequest")(), timeout=30)
            first = next(it)
            self.assertGreater(first.remaining_bytes, 0)
            self.assertEqual(len(first.blob), 32 * 1024)
            self.assertFalse(first.HasField("header"))  # etcd 3.4 sends none
            it.cancel()
        # one read to the end: remaining_bytes counts down to 0, then the digest
        body = b""
        msgs = list(fn(pb34.msg("etcdserverpb.SnapshotRequest")(), timeout=30))
        for m in msgs[:-1]:
            body += m.blob
        for a, b in zip(msgs, msgs[1:-1]):
            self.assertEqual(a.remaining_bytes - len(b.blob), b.remaining_bytes)
        self.assertEqual(msgs[-2].remaining_bytes, 0)
        self.assertEqual(msgs[-1].remaining_bytes, 0)
        self.assertEqual(msgs[-1].blob, hashlib.sha256(body).digest())
        self.assertEqual(msgs[0].remaining_bytes + len(msgs[0].blob), len(body))
        self.rpc.put("after", b"1")
        self.assertEqual(self.rpc.get("after"), b"1")

    # ---- Hash ----

    def test_hash(self):
        self.start()
        h = lambda: self.rpc.call("/etcdserverpb.Maintenance/Hash", "HashRequest",  # noqa: E731
                                  "HashResponse").hash
        self.rpc.put("a", b"1")
        h1 = h()
        self.assertEqual(h(), h1)
        self.rpc.put("a", b"2")
        h2 = h()
        self.assertNotEqual(h2, h1)
        self.assertEqual(h(), h2)

    # ---- auto-compaction ----

    def compact_rev(self):
        return self.rpc.call("/etcdserverpb.Maintenance/HashKV", "HashKVRequest",
                             "HashKVResponse").compact_revision

    @unittest.skipIf(TARGET != "quorum", "etcd checks revision mode every 5 minutes")
    def test_auto_compaction_revision(self):
        self.start("--auto-compaction-mode", "revision", "--auto-compaction-retention", "10",
                   "--auto-compaction-check-interval", "200ms")
        for i in range(30):
            self.rpc.put("r", b"%d" % i)
        rev = self.rpc.status().header.revision
        self.assertTrue(wait_for(lambda: self.compact_rev() == rev - 10),
                        "compact revision %d, want %d" % (self.compact_rev(), rev - 10))
        self.assertEqual(self.rpc.get("r", rev - 10), b"%d" % (29 - 10))
        with self.assertRaises(grpc.RpcError) as cm:
            self.rpc.get("r", rev - 11)
        self.assertEqual(cm.exception.details(), COMPACTED)

    def test_auto_compaction_periodic(self):
        self.start("--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1s")
        for i in range(10):
            self.rpc.put("p", b"%d" % i)
        rev = self.rpc.status().header.revision
        # the revision sampled a period ago is compacted to, within a few
        # periods
        self.assertTrue(wait_for(lambda: self.compact_rev() >= rev, timeout=30))


if __name__ == "__main__":
    unittest.main(verbosity=2)
