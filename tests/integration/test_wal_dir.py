"""--wal-dir, a dedicated directory for the log (server/bootstrap.c), against
quorum (TARGET=quorum, the default) or etcd 3.4 (TARGET=etcd), which the
shared expectations are proven against: the log's segments are in that
directory and not in the data dir, the .snap files stay in
<data-dir>/member/snap, nothing is left beside them, and a member restarts
from that log with every write, also after kill -9 (the writes the store had
not committed are replayed from there). quorum only: a start without the
--wal-dir the member was made with is refused and changes nothing, and so is
a first start whose --wal-dir holds something else.

    TARGET=etcd /usr/bin/python3 test_wal_dir.py
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Server  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")


def tree_digest(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def refused(s, log_tag):
    """Runs |s|'s command line to its end: (exit status, log)."""
    log = s.log_path + "." + log_tag
    with open(log, "wb") as f:
        p = subprocess.run(s.args(), stdout=f, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=60)
    with open(log, errors="replace") as f:
        return p.returncode, f.read()


class WalDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="waldir-%s-" % TARGET)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_restart_from_wal_dir(self):
        data = os.path.join(self.tmp, "m.data")
        waldir = os.path.join(self.tmp, "disk2", "wal")   # its parent is new too
        s = Server(TARGET, name="m", data_dir=data,
                   extra_args=["--wal-dir", waldir, "--snapshot-count", "20"])
        try:
            s.start(timeout=60)
            revs = {}
            c = s.client()
            for i in range(60):
                k = "/w/%03d" % i
                revs[k] = c.put(k, "v%d" % i).header.revision
            c.close()
            s.stop()
            # the segments are in --wal-dir, the snapshots in the data dir
            segs = [f for f in os.listdir(waldir) if f.endswith(".wal")]
            self.assertTrue(segs, os.listdir(waldir))
            member = os.path.join(data, "member")
            self.assertFalse(os.path.exists(os.path.join(member, "wal")), os.listdir(member))
            snaps = [f for f in os.listdir(os.path.join(member, "snap"))
                     if f.endswith(".snap")]
            self.assertTrue(snaps, os.listdir(os.path.join(member, "snap")))
            # nothing built aside is left
            self.assertEqual(os.listdir(os.path.dirname(waldir)), ["wal"])
            self.assertEqual(sorted(os.listdir(data)), ["member"])

            # a restart reads that log: every write at its revision
            s.start(timeout=60)
            c = s.client()
            for k, rev in revs.items():
                v, meta = c.get(k)
                self.assertEqual((v, meta.mod_revision), (("v%s" % int(k[3:])).encode(), rev))
            # a write only the log holds (kill -9 before the store commits)
            last = c.put("/w/last", "z").header.revision
            c.close()
            s.kill(signal.SIGKILL)
            s.start(timeout=60)
            v, meta = s.client().get("/w/last")
            self.assertEqual((v, meta.mod_revision), (b"z", last))
            snap = os.path.join(self.tmp, "backup.db")
            s.etcdctl("snapshot", "save", snap)
            s.stop()
            self.assertFalse(os.path.exists(os.path.join(member, "wal")))

            if TARGET != "quorum":
                return
            # without the --wal-dir the member was made with: refused,
            # nothing changed (etcd would start a new member over it)
            before = tree_digest(data)
            s.extra_args = ["--snapshot-count", "20"]
            rc, log = refused(s, "nowaldir")
            self.assertNotEqual(rc, 0)
            self.assertIn("holds no log", log)
            self.assertIn("nothing was changed", log)
            self.assertEqual(tree_digest(data), before)
            # with a --wal-dir elsewhere: the same
            s.extra_args = ["--wal-dir", os.path.join(self.tmp, "other")]
            rc, log = refused(s, "otherwaldir")
            self.assertNotEqual(rc, 0)
            self.assertIn("holds no log", log)
            self.assertEqual(tree_digest(data), before)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "other")))

            # a restored store (quorumctl snapshot restore: the store, no
            # log) gets its log in --wal-dir at its first start
            rdata, rwal = os.path.join(self.tmp, "r.data"), os.path.join(self.tmp, "r.wal")
            ctl = harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")
            subprocess.run([ctl, "snapshot", "restore", snap, "--name", "r", "--data-dir", rdata,
                            "--wal-dir", rwal], check=True, capture_output=True, timeout=60)
            r = Server(TARGET, name="r", data_dir=rdata, extra_args=["--wal-dir", rwal])
            try:
                r.start(timeout=60)
                v, meta = r.client().get("/w/last")
                self.assertEqual((v, meta.mod_revision), (b"z", last))
                r.stop()
            finally:
                r.cleanup()
            self.assertTrue(any(f.endswith(".wal") for f in os.listdir(rwal)))
            self.assertFalse(os.path.exists(os.path.join(rdata, "member", "wal")))
            self.assertFalse(os.path.exists(rwal + ".tmp"))
        finally:
            s.cleanup()

    @unittest.skipIf(TARGET != "quorum", "etcd removes what --wal-dir holds")
    def test_first_start_refused_leaves_nothing(self):
        """--wal-dir naming a directory with files but no log: refused at
        the first start, which leaves no member and no stage behind."""
        root = os.path.join(self.tmp, "root")   # the logs stay outside
        data = os.path.join(root, "n.data")
        waldir = os.path.join(root, "busy")
        os.makedirs(waldir)
        with open(os.path.join(waldir, "notes.txt"), "w") as f:
            f.write("not a log")
        s = Server(TARGET, name="n", data_dir=data, extra_args=["--wal-dir", waldir],
                   log=os.path.join(self.tmp, "n.log"))
        rc, log = refused(s, "busy")
        self.assertNotEqual(rc, 0)
        self.assertIn("cannot use --wal-dir %s" % waldir, log)
        self.assertFalse(os.path.exists(data))
        self.assertEqual(sorted(os.listdir(root)), ["busy"])
        self.assertEqual(os.listdir(waldir), ["notes.txt"])
        # an empty one (made by the operator) is taken
        os.remove(os.path.join(waldir, "notes.txt"))
        try:
            s.start(timeout=60)
            s.etcdctl("put", "k", "v")
            s.stop()
        finally:
            s.cleanup()
        self.assertTrue(any(f.endswith(".wal") for f in os.listdir(waldir)))
        # no snapshot yet, started without its --wal-dir: the store knows it
        # had a log, so this is refused too (not a new member over it)
        before = tree_digest(data)
        s.extra_args = []
        rc, log = refused(s, "nowaldir")
        self.assertNotEqual(rc, 0)
        self.assertIn("is a member's store but %s/member/wal holds no log" % data, log)
        self.assertEqual(tree_digest(data), before)
        self.assertEqual(sorted(os.listdir(os.path.join(data, "member"))), ["db"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
