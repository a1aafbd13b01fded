"""quorum started on an etcd 3.4 data directory (server/etcd_import.c,
docs/migrate.md): etcd stopped under a write load (SIGTERM, then kill -9),
quorum started on its data dir with the same flags: every acknowledged
write is there at its revision, a watch from before the switch resumes
without a gap, etcd's original is kept beside as member.etcd. A corrupted
etcd WAL is refused and nothing changes; the states a kill -9 in the middle
of a conversion leaves are finished or redone; a dir made by `etcdctl
snapshot restore` converts too; so does an etcd member run with --wal-dir
when quorum gets the same --wal-dir. A stopped three-member etcd
cluster converts member by member into one quorum cluster: the same
members, keys and revisions, and writes work."""
import hashlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402
from harness import Server  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402


class Load(threading.Thread):
    """Puts /load/NNNNNN one after another until told to stop or the server
    goes away; |acked| holds (key, value, revision) of every put answered."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        self.chan = grpc.insecure_channel(endpoint)
        self.kv = rpc_pb2_grpc.KVStub(self.chan)
        self.acked = []
        self.halt = threading.Event()

    def run(self):
        i = 0
        while not self.halt.is_set():
            k, v = b"/load/%06d" % i, b"v%d" % i
            i += 1
            try:
                r = self.kv.Put(rpc_pb2.PutRequest(key=k, value=v), timeout=5)
            except grpc.RpcError:
                break
            self.acked.append((k, v, r.header.revision))
        self.chan.close()


class Watcher(threading.Thread):
    """Every event of every key from |start|, as (revision, key)."""

    def __init__(self, endpoint, start):
        super().__init__(daemon=True)
        self.chan = grpc.insecure_channel(endpoint)
        self.events = []
        self.reqs = []
        self.start_rev = start
        self.call = None

    def run(self):
        w = rpc_pb2_grpc.WatchStub(self.chan)
        req = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
            key=b"\0", range_end=b"\0", start_revision=self.start_rev))
        self.call = w.Watch(self._reqs(req))
        try:
            for resp in self.call:
                for ev in resp.events:
                    self.events.append((ev.kv.mod_revision, ev.kv.key))
        except grpc.RpcError:
            pass

    def _reqs(self, first):
        yield first
        while not getattr(self, "done", False):
            time.sleep(0.05)

    def seen_up_to(self, rev):
        return bool(self.events) and self.events[-1][0] >= rev

    def close(self):
        self.done = True
        if self.call is not None:
            self.call.cancel()
        self.join(10)
        self.chan.close()


def tree_digest(path):
    """{relative path: sha256} of every file under |path|."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def wal_frames(path):
    """(offset, record length) of every frame of an etcd WAL segment."""
    with open(path, "rb") as f:
        b = f.read()
    off, out = 0, []
    while off + 8 <= len(b):
        w = struct.unpack_from("<Q", b, off)[0]
        if w == 0:
            break
        n = w & ~(0xff << 56)
        pad = (w >> 56) & 7 if w >> 63 else 0
        out.append((off, n))
        off += 8 + n + pad
    return out


def quorum_on(etcd_server):
    """A quorum Server with the etcd server's data dir, name and ports."""
    q = Server("quorum", name=etcd_server.name, data_dir=etcd_server.data_dir,
               log=etcd_server.log_path + ".quorum")
    q.client_port, q.peer_port = etcd_server.client_port, etcd_server.peer_port
    return q


class SingleMember(unittest.TestCase):
    def switch(self, sig, corrupt_copy=False, etcd_args=(), users=False):
        e = Server("etcd")
        q = None
        try:
            e.start()
            e.etcdctl("put", "/before", "x")
            lease = e.etcdctl("lease", "grant", "600").stdout.split()[1]
            e.etcdctl("put", "/leased", "y", "--lease", lease)
            if etcd_args:
                # a first run stopped cleanly (its store commits), then a
                # second one with |etcd_args|
                e.stop()
                e.extra_args = list(etcd_args)
                e.start()
            if users:
                # etcd 3.4 logs the passwords; quorum's entries get their hash
                e.etcdctl("role", "add", "root")
                e.etcdctl("user", "add", "root:rootpw")
                e.etcdctl("user", "grant-role", "root", "root")
            first = int(e.etcdctl("get", "/before", "-w", "fields").stdout.split(
                '"ModRevision" : ')[1].split()[0])
            # a watch of everything from the first write, against etcd
            w1 = Watcher(e.endpoint, first)
            w1.start()
            load = Load(e.endpoint)
            load.start()
            harness.wait_for(lambda: len(load.acked) >= 300, timeout=60, what="300 puts")
            if corrupt_copy:
                # an etcd snapshot taken under the load, for the restore case
                snap = os.path.join(e.tmp, "snap.db")
                before_snap = list(load.acked)
                e.etcdctl("snapshot", "save", snap)
            e.kill(sig)          # etcd stops under the load
            load.halt.set()
            load.join(20)
            w1.close()
            self.assertGreaterEqual(len(load.acked), 300)
            member = os.path.join(e.data_dir, "member")
            if corrupt_copy:
                self.refuses_corrupt(e)
                self.restored(e, snap, before_snap)
                self.crash_states(e, load.acked[-1])
            before = tree_digest(member)

            q = quorum_on(e)
            q.start(timeout=60)
            # etcd's original is beside, untouched
            self.assertEqual(tree_digest(os.path.join(e.data_dir, "member.etcd")), before)
            self.assertFalse(os.path.exists(os.path.join(e.data_dir, "member.etcd-import")))
            chan = grpc.insecure_channel(q.endpoint)
            kv = rpc_pb2_grpc.KVStub(chan)
            # every acknowledged write, at its revision
            for k, v, rev in load.acked:
                r = kv.Range(rpc_pb2.RangeRequest(key=k, revision=rev), timeout=10)
                self.assertEqual(len(r.kvs), 1, k)
                self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (v, rev), k)
            # the lease and its key
            r = kv.Range(rpc_pb2.RangeRequest(key=b"/leased"), timeout=10)
            self.assertEqual(r.kvs[0].lease, int(lease, 16))
            self.assertIn(lease, q.etcdctl("lease", "list").stdout)
            # etcd's watch saw every revision it made in order, and a watch
            # on quorum from a revision before the switch gets every one
            # from there to the head, without a gap
            head = r.header.revision
            seen = [rv for rv, _ in w1.events]
            self.assertEqual(seen, list(range(first, first + len(seen))))
            mid = first + (head - first) // 2
            w2 = Watcher(q.endpoint, mid)
            w2.start()
            harness.wait_for(lambda: w2.seen_up_to(head), timeout=30, what="watch to the head")
            w2.close()
            self.assertEqual([rv for rv, _ in w2.events if rv <= head],
                             list(range(mid, head + 1)))
            self.assertGreaterEqual(load.acked[-1][2], mid)
            # it takes writes after the last revision etcd made
            r = kv.Put(rpc_pb2.PutRequest(key=b"/after", value=b"z"), timeout=10)
            self.assertEqual(r.header.revision, head + 1)
            chan.close()
            # and restarts as quorum (the conversion is done once)
            q.stop()
            q.start(timeout=60)
            self.assertEqual(q.etcdctl("get", "/after", "--print-value-only").stdout.strip(), "z")
            with open(q.log_path, errors="replace") as f:
                log = f.read()
            self.assertIn("etcd import: done", log)
            if users:
                q.etcdctl("auth", "enable")
                r = q.etcdctl("--user", "root:rootpw", "get", "/after", "--print-value-only")
                self.assertEqual(r.stdout.strip(), "z")
                r = q.etcdctl("--user", "root:wrong", "get", "/after", check=False)
                self.assertIn("authentication failed", r.stderr)
                def wal_bytes(member):
                    d = os.path.join(e.data_dir, member, "wal")
                    out = b""
                    for f in sorted(os.listdir(d)):
                        with open(os.path.join(d, f), "rb") as fh:
                            out += fh.read()
                    return out
                self.assertIn(b"rootpw", wal_bytes("member.etcd"))   # etcd logged it
                self.assertNotIn(b"rootpw", wal_bytes("member"))     # quorum's has a hash
            m = re.search(r"store at index (\d+) .*, (\d+) log entries after it", log)
            return int(m.group(1)), int(m.group(2)), len(load.acked)
        finally:
            if q is not None:
                q.kill()
            e.cleanup()

    def refuses_corrupt(self, e):
        """A copy of the stopped etcd's dir with one byte flipped in an entry
        in the middle of its WAL: quorum refuses, with the file and offset,
        and changes nothing."""
        bad = e.data_dir + ".corrupt"
        shutil.copytree(e.data_dir, bad)
        wal = os.path.join(bad, "member", "wal")
        seg = os.path.join(wal, sorted(os.listdir(wal))[0])
        frames = wal_frames(seg)
        off, n = frames[len(frames) // 2]
        with open(seg, "r+b") as f:
            f.seek(off + 8 + n - 1)
            b = f.read(1)
            f.seek(off + 8 + n - 1)
            f.write(bytes([b[0] ^ 0x10]))
        before = tree_digest(bad)
        q = Server("quorum", name=e.name, data_dir=bad, log=e.log_path + ".corrupt")
        q.client_port, q.peer_port = e.client_port, e.peer_port
        q.log_file = open(q.log_path, "ab")
        try:
            p = subprocess.run(q.args(), stdout=q.log_file, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=60)
        finally:
            q.log_file.close()
        with open(q.log_path, errors="replace") as f:
            log = f.read()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cannot start on etcd's data directory", log)
        self.assertIn("offset %d" % off, log)
        self.assertIn("nothing was changed", log)
        self.assertEqual(tree_digest(bad), before)
        self.assertEqual(sorted(os.listdir(bad)), ["member"])
        shutil.rmtree(bad)

    def restored(self, e, snap, acked):
        """What `etcdctl snapshot restore` makes of an etcd snapshot is an
        etcd member dir too: quorum starts on it, every write acknowledged
        before the snapshot was taken at its revision."""
        d = e.data_dir + ".restored"
        purl = "http://127.0.0.1:%d" % e.peer_port
        subprocess.run(["etcdctl", "snapshot", "restore", snap, "--data-dir", d,
                        "--name", e.name, "--initial-cluster", "%s=%s" % (e.name, purl),
                        "--initial-advertise-peer-urls", purl],
                       check=True, capture_output=True, env=dict(os.environ, ETCDCTL_API="3"))
        q = self.run_quorum(e, d, "restored")
        try:
            chan = grpc.insecure_channel(q.endpoint)
            kv = rpc_pb2_grpc.KVStub(chan)
            for k, v, rev in acked:
                r = kv.Range(rpc_pb2.RangeRequest(key=k), timeout=10)
                self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (v, rev), k)
            chan.close()
        finally:
            q.kill()
        self.assertTrue(os.path.isdir(os.path.join(d, "member.etcd")))
        shutil.rmtree(d)

    def run_quorum(self, e, data_dir, tag):
        """quorum with |e|'s flags on |data_dir| until healthy; the Server."""
        q = Server("quorum", name=e.name, data_dir=data_dir, log=e.log_path + "." + tag)
        q.client_port, q.peer_port = e.client_port, e.peer_port
        return q.start(timeout=60)

    def crash_states(self, e, last):
        """What a kill -9 in the middle of a conversion leaves, made by hand
        on copies of the stopped etcd's dir: each start finishes or redoes
        the conversion, and the result holds the last acknowledged put."""
        k, v, rev = last
        base = e.data_dir + ".crash"
        shutil.copytree(e.data_dir, base)
        etcd_digest = tree_digest(os.path.join(base, "member"))
        q = self.run_quorum(e, base, "crash0")   # a clean conversion, as reference
        q.stop()
        states = {
            # died while building the stage: etcd's member as it was
            "building": lambda d: (shutil.rmtree(os.path.join(d, "member")),
                                   os.rename(os.path.join(d, "member.etcd"),
                                             os.path.join(d, "member")),
                                   shutil.copytree(os.path.join(base, "member"),
                                                   os.path.join(d, "member.etcd-import",
                                                                "member"))),
            # died between the renames, stage complete: etcd's aside
            "renamed": lambda d: (os.makedirs(os.path.join(d, "member.etcd-import")),
                                  os.rename(os.path.join(d, "member"),
                                            os.path.join(d, "member.etcd-import", "member")),
                                  open(os.path.join(d, "member.etcd-import", "COMPLETE"),
                                       "w").close()),
            # died between the renames, the stage not complete (no marker)
            "renamed-incomplete": lambda d: (os.makedirs(os.path.join(d, "member.etcd-import")),
                                             os.rename(os.path.join(d, "member"),
                                                       os.path.join(d, "member.etcd-import",
                                                                    "member"))),
        }
        for i, (name, make) in enumerate(states.items()):
            d = "%s.%d" % (base, i)
            shutil.copytree(base, d)
            make(d)
            q = self.run_quorum(e, d, "crash-" + name)
            try:
                r = q.etcdctl("get", k.decode(), "-w", "fields").stdout
                self.assertIn('"ModRevision" : %d' % rev, r, name)
                self.assertEqual(sorted(x for x in os.listdir(d) if x.startswith("member")),
                                 ["member", "member.etcd"], name)
                self.assertEqual(tree_digest(os.path.join(d, "member.etcd")), etcd_digest, name)
            finally:
                q.kill()
            shutil.rmtree(d)
        shutil.rmtree(base)

    def test_sigterm(self):
        self.switch(signal.SIGTERM, corrupt_copy=True)

    def test_kill9(self):
        # a first run leaves etcd's store at some index; the second commits
        # its store once an hour, so what it applied under the load is only
        # in its log: the conversion must apply it all
        index, after, acked = self.switch(signal.SIGKILL, etcd_args=[
            "--backend-batch-interval=1h", "--backend-batch-limit=100000000"], users=True)
        self.assertGreater(index, 0)          # the store of the first run
        self.assertGreaterEqual(after, acked)  # the load, from the log


class WalDir(unittest.TestCase):
    def test_wal_dir(self):
        """etcd run with --wal-dir (its log apart from member/), killed
        under a write load; quorum started with the same flags reads
        etcd's log there, keeps every acknowledged write at its revision,
        writes its own log there and keeps etcd's beside it, untouched, as
        <wal-dir>.etcd (and etcd's member as member.etcd)."""
        e = Server("etcd")
        waldir = os.path.join(e.tmp, "wal-disk", "wal")
        e.extra_args = ["--wal-dir", waldir]
        q = None
        try:
            e.start()
            e.etcdctl("put", "/before", "x")
            load = Load(e.endpoint)
            load.start()
            harness.wait_for(lambda: len(load.acked) >= 200, timeout=60, what="200 puts")
            e.kill(signal.SIGKILL)
            load.halt.set()
            load.join(20)
            self.assertFalse(os.path.exists(os.path.join(e.data_dir, "member", "wal")))
            etcd_member = tree_digest(os.path.join(e.data_dir, "member"))
            etcd_wal = tree_digest(waldir)

            q = quorum_on(e)
            q.extra_args = ["--wal-dir", waldir]
            q.start(timeout=60)
            self.assertEqual(tree_digest(os.path.join(e.data_dir, "member.etcd")), etcd_member)
            self.assertEqual(tree_digest(waldir + ".etcd"), etcd_wal)
            self.assertEqual(sorted(os.listdir(os.path.dirname(waldir))), ["wal", "wal.etcd"])
            self.assertEqual(sorted(os.listdir(e.data_dir)), ["member", "member.etcd"])
            chan = grpc.insecure_channel(q.endpoint)
            kv = rpc_pb2_grpc.KVStub(chan)
            for k, v, rev in load.acked:
                r = kv.Range(rpc_pb2.RangeRequest(key=k, revision=rev), timeout=10)
                self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (v, rev), k)
            # (a put etcd made but did not answer before it died may follow)
            head = kv.Range(rpc_pb2.RangeRequest(key=b"/after"), timeout=10).header.revision
            self.assertGreaterEqual(head, load.acked[-1][2])
            r = kv.Put(rpc_pb2.PutRequest(key=b"/after", value=b"z"), timeout=10)
            self.assertEqual(r.header.revision, head + 1)
            chan.close()
            q.stop()
            # quorum's log is in --wal-dir now, not in the data dir
            self.assertFalse(os.path.exists(os.path.join(e.data_dir, "member", "wal")))
            self.assertFalse(os.path.exists(os.path.join(e.data_dir, "member", "snap", "db")))
            self.assertNotEqual(tree_digest(waldir), etcd_wal)
            q.start(timeout=60)
            self.assertEqual(q.etcdctl("get", "/after", "--print-value-only").stdout.strip(), "z")
            with open(q.log_path, errors="replace") as f:
                self.assertEqual(f.read().count("etcd import: done"), 1)
        finally:
            if q is not None:
                q.kill()
            e.cleanup()


class ThreeMembers(unittest.TestCase):
    def test_cluster(self):
        c = Cluster("etcd", n=3)
        try:
            c.start()
            chan = grpc.insecure_channel(c.endpoint(0))
            kv = rpc_pb2_grpc.KVStub(chan)
            written = []
            for i in range(60):
                k = b"/c/%03d" % i
                written.append((k, kv.Put(rpc_pb2.PutRequest(key=k, value=k),
                                          timeout=10).header.revision))
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"/c/000"), timeout=10)
            chan.close()
            members = sorted(c.member_list(0), key=lambda m: m["ID"])
            # every member has applied everything before it stops
            harness.wait_for(lambda: len({c.status(i)["header"]["revision"]
                                          for i in range(3)}) == 1,
                             timeout=30, what="members at one revision")
            c.stop()
            # the same members, flags and data dirs: quorum instead of etcd
            c.kind = "quorum"
            for m in c.members:
                m.start()
            for i in range(3):
                c.wait_member(i, 60)
            c.wait_leader(60)
            self.assertEqual(sorted(c.member_list(0), key=lambda m: m["ID"]), members)
            for i in range(3):
                self.assertTrue(os.path.isdir(os.path.join(c.members[i].data_dir,
                                                           "member.etcd")))
                chan = grpc.insecure_channel(c.endpoint(i))
                kv = rpc_pb2_grpc.KVStub(chan)
                for k, rev in written[1:]:
                    r = kv.Range(rpc_pb2.RangeRequest(key=k, serializable=True), timeout=10)
                    self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (k, rev))
                r = kv.Range(rpc_pb2.RangeRequest(key=b"/c/000"), timeout=10)
                self.assertEqual(len(r.kvs), 0)
                chan.close()
            # one cluster: a write through one member is read on the others
            c.etcdctl(1, "put", "/after", "yes")
            for i in range(3):
                harness.wait_for(lambda: c.etcdctl(i, "get", "/after", "--print-value-only",
                                                   "--consistency=s").stdout.strip() == "yes",
                                 timeout=20, what="the write on member %d" % i)
        except Exception:
            c.dump_logs()
            raise
        finally:
            c.cleanup()


    def test_cluster_killed_under_load(self):
        """kill -9 of every member of an etcd cluster under a write load,
        their stores held behind their logs: each converts its own log
        tail, and the quorum cluster they form has every acknowledged
        write at its revision on every member."""
        held = ["--backend-batch-interval=1h", "--backend-batch-limit=100000000"]
        c = Cluster("etcd", n=3, extra_args=held)
        try:
            c.start()
            load = Load(c.endpoint(0))
            load.start()
            harness.wait_for(lambda: len(load.acked) >= 200, timeout=60, what="200 puts")
            for m in c.members:
                m.signal(signal.SIGKILL)
            load.halt.set()
            load.join(20)
            c.kind = "quorum"
            c.extra_args = []
            for m in c.members:
                m.start()
            for i in range(3):
                c.wait_member(i, 60)
            c.wait_leader(60)
            c.etcdctl(0, "put", "/after", "x")   # through the leader: all caught up
            for i in range(3):
                chan = grpc.insecure_channel(c.endpoint(i))
                kv = rpc_pb2_grpc.KVStub(chan)
                harness.wait_for(lambda: kv.Range(rpc_pb2.RangeRequest(
                    key=b"/after", serializable=True), timeout=10).count == 1,
                    timeout=30, what="member %d caught up" % i)
                for k, v, rev in load.acked:
                    r = kv.Range(rpc_pb2.RangeRequest(key=k, serializable=True), timeout=10)
                    self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (v, rev), k)
                chan.close()
        except Exception:
            c.dump_logs()
            raise
        finally:
            c.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
