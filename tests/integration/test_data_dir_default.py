"""The default data dir (no --data-dir; docs/configuration.md): etcd's,
${name}.etcd, so an operator who ran etcd without --data-dir and swaps the
binary keeps the data (quorum converts that etcd member). A ${name}.quorum
an earlier quorum release made (its default then) is used when there is no
${name}.etcd; both there: refused with both names, nothing changed."""
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


def tree_digest(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


class NoDataDir:
    """|kind| started in |cwd| with a Server's flags but no --data-dir."""

    def __init__(self, kind, cwd, name="m"):
        self.s = Server(kind, name=name, data_dir=os.path.join(cwd, "unused"),
                        log=os.path.join(os.path.dirname(cwd), "%s.log" % kind))
        self.cwd = cwd
        self.proc = None

    def args(self):
        a = self.s.args()
        i = a.index("--data-dir")
        return a[:i] + a[i + 2:]

    def start(self):
        self.log = open(self.s.log_path, "ab")
        self.proc = subprocess.Popen(self.args(), cwd=self.cwd, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.s.proc = self.proc
        self.s.wait_ready(60)
        return self.s

    def run_to_end(self):
        with open(self.s.log_path, "ab") as log:
            p = subprocess.run(self.args(), cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=60)
        return p.returncode

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(20)
        if getattr(self, "log", None):
            self.log.close()
            self.log = None


class DefaultDataDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="defdir-")
        self.cwd = os.path.join(self.tmp, "cwd")
        os.makedirs(self.cwd)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def log(self, kind):
        with open(os.path.join(self.tmp, "%s.log" % kind), errors="replace") as f:
            return f.read()

    def test_drop_in_and_earlier_release(self):
        # etcd without --data-dir: m.etcd in its working directory
        e = NoDataDir("etcd", self.cwd)
        q = NoDataDir("quorum", self.cwd)
        q.s.client_port, q.s.peer_port = e.s.client_port, e.s.peer_port
        try:
            e.start().etcdctl("put", "/k", "from-etcd")
            e.stop()
            self.assertEqual(os.listdir(self.cwd), ["m.etcd"])
            # the binary swapped, the same flags: the same data
            s = q.start()
            self.assertEqual(s.etcdctl("get", "/k", "--print-value-only").stdout.strip(),
                             "from-etcd")
            q.stop()
            self.assertEqual(os.listdir(self.cwd), ["m.etcd"])
            self.assertEqual(sorted(os.listdir(os.path.join(self.cwd, "m.etcd"))),
                             ["member", "member.etcd"])
            self.assertIn("etcd import: done", self.log("quorum"))

            # a data dir an earlier quorum release made by default
            os.rename(os.path.join(self.cwd, "m.etcd"), os.path.join(self.cwd, "m.quorum"))
            s = q.start()
            self.assertEqual(s.etcdctl("get", "/k", "--print-value-only").stdout.strip(),
                             "from-etcd")
            s.etcdctl("put", "/k2", "v2")
            q.stop()
            self.assertEqual(os.listdir(self.cwd), ["m.quorum"])
            self.assertIn("using data dir m.quorum, made by an earlier quorum release",
                          self.log("quorum"))

            # both: which one is meant is not guessed
            os.makedirs(os.path.join(self.cwd, "m.etcd"))
            before = tree_digest(self.cwd)
            self.assertNotEqual(q.run_to_end(), 0)
            self.assertIn("both m.etcd (the default data dir, etcd's) and m.quorum",
                          self.log("quorum"))
            self.assertEqual(tree_digest(self.cwd), before)
            self.assertEqual(sorted(os.listdir(self.cwd)), ["m.etcd", "m.quorum"])
        finally:
            e.stop(signal.SIGKILL)
            q.stop(signal.SIGKILL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
