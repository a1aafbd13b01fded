"""Logs as etcd writes them (docs/observability.md, "Logs"): --logger=zap
JSON lines with etcd's field names to a file, stdout or the journal,
--log-level, the refusals of bad --logger/--log-outputs values, and the one
line with its figures that each of these writes: a leader election (and a
leader change in a cluster), a compaction, a defragmentation, an auth
refusal, a slow apply (--experimental-warning-apply-duration) and a failed
one.

TARGET=etcd runs the same expectations against etcd 3.4: the message texts
and field names checked here are etcd's own."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from harness import Server, wait_for  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
LEVELS = {"debug", "info", "warn", "error", "dpanic", "panic", "fatal"}
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})$")
CALLER = re.compile(r"^[\w.-]+/[\w.-]+\.(c|go):\d+$")
# Go's time.Duration.String()
DURATION = re.compile(r"^(0s|\d+(\.\d+)?(ns|µs|ms|s)|(\d+h)?(\d+m)?\d+(\.\d+)?s)$")
JOURNAL = "/run/systemd/journal/socket"
AUTH_FAILED = "auth: authentication failed, invalid user ID or password"


def parse(text, where):
    """Every line of |text| as JSON with zap's first four keys in order;
    the records."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise AssertionError("%s line %d is not JSON (%s): %r" % (where, n, e, line))
        keys = list(rec)
        if keys[:4] != ["level", "ts", "caller", "msg"]:
            raise AssertionError("%s line %d: keys %s, not level, ts, caller, msg first: %r"
                                 % (where, n, keys[:4], line))
        if rec["level"] not in LEVELS or not TS.match(rec["ts"]) or \
                not CALLER.match(rec["caller"]):
            raise AssertionError("%s line %d: bad level, ts or caller: %r" % (where, n, line))
        out.append(rec)
    return out


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def one(recs, msg, what=None):
    """The single record with message |msg| (a regex when it starts with ^)."""
    if msg.startswith("^"):
        got = [r for r in recs if re.match(msg, r["msg"])]
    else:
        got = [r for r in recs if r["msg"] == msg]
    if len(got) != 1:
        raise AssertionError("%d lines %r (%s), wanted one; messages: %s"
                             % (len(got), msg, what or "", [r["msg"] for r in recs]))
    return got[0]


def is_duration(v):
    return isinstance(v, str) and DURATION.match(v) is not None


class Logging(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="logging-%s-" % TARGET)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def server(self, *args):
        return Server(TARGET, extra_args=list(args))

    def test_zap_file_lines_and_figures(self):
        path = os.path.join(self.tmp, "member.log")
        with self.server("--logger=zap", "--log-outputs=" + path) as s:
            for i in range(5):
                s.etcdctl("put", "k", "v%d" % i)
            s.etcdctl("compact", "4")
            wait_for(lambda: "finished scheduled compaction" in read(path), 30,
                     what="the compaction line")
            s.etcdctl("defrag")
            s.etcdctl("user", "add", "root:rootpw")
            s.etcdctl("auth", "enable")
            r = s.etcdctl("--user", "root:wrong", "get", "k", check=False)
            self.assertNotEqual(r.returncode, 0)
            r = s.etcdctl("--user", "nobody:x", "get", "k", check=False)
            self.assertNotEqual(r.returncode, 0)
            time.sleep(0.3)
            console = s.log_tail(100000)
        recs = parse(read(path), path)
        self.assertEqual(console.strip(), "", "nothing on stdout/stderr with a file output")
        self.assertTrue(os.stat(path).st_mode & 0o777 in (0o644, 0o600))

        # the election of a single member: raft's two lines
        me = "[0-9a-f]+"
        one(recs, r"^%s became leader at term \d+$" % me)
        el = one(recs, r"^raft\.node: (%s) elected leader (%s) at term \d+$" % (me, me))
        m = re.match(r"^raft\.node: (\w+) elected leader (\w+)", el["msg"])
        self.assertEqual(m.group(1), m.group(2))
        self.assertEqual(el["level"], "info")
        self.assertTrue(el["caller"].startswith("raft/") or el["caller"].startswith("server/"))

        c = one(recs, "finished scheduled compaction")
        self.assertEqual(c["level"], "info")
        self.assertEqual(c["compact-revision"], 4)
        self.assertTrue(is_duration(c["took"]), c)

        d = one(recs, "defragmenting")
        for k in ("current-db-size-bytes", "current-db-size-in-use-bytes"):
            self.assertIsInstance(d[k], int, d)
        for k in ("path", "current-db-size", "current-db-size-in-use"):
            self.assertIsInstance(d[k], str, d)
        self.assertRegex(d["current-db-size"], r"^\d+(\.\d)? (B|kB|MB|GB)$")
        d = one(recs, "defragmented")
        for k in ("current-db-size-bytes-diff", "current-db-size-bytes",
                  "current-db-size-in-use-bytes-diff", "current-db-size-in-use-bytes"):
            self.assertIsInstance(d[k], int, d)
        self.assertTrue(is_duration(d["took"]), d)
        one(recs, "starting defragment")
        one(recs, "finished defragment")

        p = one(recs, "invalid password")
        self.assertEqual(p["user-name"], "root")
        bad = [r for r in recs if r["msg"] == "invalid authentication was requested"]
        self.assertEqual([(r["level"], r["user"], r["error"]) for r in bad],
                         [("warn", "root", AUTH_FAILED), ("warn", "nobody", AUTH_FAILED)])

    def test_slow_and_failed_apply(self):
        path = os.path.join(self.tmp, "member.log")
        with self.server("--logger=zap", "--log-outputs=" + path,
                         "--experimental-warning-apply-duration=1ns") as s:
            s.etcdctl("put", "slow-key", "some value")
            s.etcdctl("compact", "2")
            r = s.etcdctl("compact", "1", check=False)  # already compacted: refused
            self.assertNotEqual(r.returncode, 0)
            time.sleep(0.3)
        recs = parse(read(path), path)
        put = [r for r in recs if r["msg"] == "apply request took too long"
               and "slow-key" in r["request"]]
        self.assertEqual(len(put), 1, [r["msg"] for r in recs])
        put = put[0]
        self.assertEqual(put["level"], "warn")
        self.assertEqual(list(put)[4:], ["took", "expected-duration", "prefix", "request",
                                         "response"])
        self.assertTrue(is_duration(put["took"]))
        self.assertEqual(put["expected-duration"], "1ns")
        self.assertEqual(put["prefix"], "")
        self.assertRegex(put["request"],
                         r'^header:<ID:\d+ > put:<key:"slow-key" value_size:10 >$')
        self.assertRegex(put["response"], r"^size:\d+$")
        f = one(recs, "failed to apply request")
        self.assertEqual(f["level"], "warn")
        self.assertEqual(list(f)[4:], ["took", "request", "response", "error"])
        self.assertRegex(f["request"], r"^header:<ID:\d+ > compaction:<revision:1 > $")
        self.assertEqual(f["error"], "mvcc: required revision has been compacted")

    def test_stdout(self):
        s = self.server("--logger=zap", "--log-outputs=stdout")
        out_path = os.path.join(self.tmp, "out")
        err_path = os.path.join(self.tmp, "err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(s.args(), stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                s.proc = proc
                s.wait_ready(30)
                s.etcdctl("put", "k", "v")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        recs = parse(read(out_path), "stdout")
        one(recs, r"^raft\.node: \w+ elected leader \w+ at term \d+$")
        # no log line on stderr (etcd's embedded grpc-go may print its own)
        self.assertEqual([ln for ln in read(err_path).splitlines() if ln.startswith("{")], [])
        if TARGET == "quorum":
            self.assertEqual(read(err_path), "")

    def test_level_warn_drops_info(self):
        path = os.path.join(self.tmp, "member.log")
        with self.server("--logger=zap", "--log-outputs=" + path, "--log-level=warn") as s:
            s.etcdctl("put", "k", "v")
            s.etcdctl("compact", "2")
            time.sleep(0.5)
        recs = parse(read(path), path)
        self.assertEqual([r for r in recs if r["level"] in ("debug", "info")], [])

    def test_refused_flags(self):
        cases = [
            (["--logger=foo"], 'unknown logger option "foo"'),
            (["--logger=zap", "--log-outputs=default,stdout"],
             'multi logoutput for "default" is not supported yet'),
            (["--logger=zap", "--log-outputs=/nonexistent-dir/x.log"],
             'open sink "/nonexistent-dir/x.log": open /nonexistent-dir/x.log: '
             'no such file or directory'),
            (["--logger=zap", "--log-outputs=systemd/journal,stderr"],
             "running with systemd/journal but other '--log-outputs' values"),
        ]
        for args, text in cases:
            s = self.server(*args)
            r = subprocess.run(s.args(), capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn("error verifying flags, " + text, r.stderr, args)

    def test_journal(self):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sk:
                sk.connect(JOURNAL)
        except OSError as e:
            # what both do without a journald: refuse to start, saying so
            s = self.server("--logger=zap", "--log-outputs=systemd/journal")
            r = subprocess.run(s.args(), capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("can't find journal (dial unixgram %s: connect: " % JOURNAL, r.stderr)
            self.skipTest("no journald reachable at %s (%s): checked only that the member "
                          "refuses to start" % (JOURNAL, e.strerror))
        ident = "logging-test-%d" % os.getpid()
        s = self.server("--logger=zap", "--log-outputs=systemd/journal")
        with s:
            s.etcdctl("put", "k", "v")
        r = subprocess.run(["journalctl", "-o", "json", "--no-pager", "_PID=%d" % s.proc.pid],
                           capture_output=True, text=True, timeout=60)
        msgs = [json.loads(json.loads(l)["MESSAGE"])["msg"] for l in r.stdout.splitlines() if l]
        self.assertTrue(any("elected leader" in m for m in msgs), (ident, msgs[:5]))

    def test_default_is_capnslog_text(self):
        with self.server() as s:
            s.etcdctl("put", "k", "v")
            text = s.log_tail(100000)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        capns = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} [DIWEC] \| [\w/]+: ")
        self.assertTrue(any(capns.match(ln) for ln in lines), lines[:5])
        self.assertFalse(any(ln.startswith("{") for ln in lines), lines[:5])
        if TARGET == "quorum":  # etcd's raft package prints in its own format
            self.assertEqual([ln for ln in lines if not capns.match(ln)], [])


class ClusterLogging(unittest.TestCase):
    def test_leader_change(self):
        with cluster.Cluster(TARGET, extra_args=["--logger=zap", "--log-outputs=stderr"]) as c:
            old = c.wait_leader()
            c.kill(old)
            new = c.wait_leader()
            self.assertNotEqual(new, old)
            time.sleep(0.5)
            for i in c.live():
                text = "\n".join(ln for ln in c.members[i].log().splitlines()
                                 if ln.startswith("{"))
                recs = parse(text, c.members[i].name)
                msgs = [r["msg"] for r in recs]
                self.assertTrue(any(re.match(r"^raft\.node: \w+ lost leader \w+ at term \d+$", m)
                                    for m in msgs), msgs)
                self.assertTrue(any(re.match(r"^raft\.node: \w+ (elected leader|changed leader "
                                             r"from \w+ to) \w+ at term \d+$", m)
                                    for m in msgs), msgs)
            newlog = c.members[new].log()
            self.assertRegex(newlog, r'"msg":"\w+ became leader at term \d+"')


if __name__ == "__main__":
    unittest.main(verbosity=2)
