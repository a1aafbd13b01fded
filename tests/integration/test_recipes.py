"""quorumctl's recipe commands (rwlock, semaphore, barrier, double-barrier,
queue, priority-queue, 2pc, membership, counter) under concurrency: several
quorumctl processes at once against one quorum, per recipe.

Holders run a shell command that appends enter/leave marks to a shared file
(O_APPEND lines), and the marks are checked afterwards: no overlap of
exclusive holders, readers never with a writer, at most n in a semaphore,
nobody past a double barrier before everyone arrived. Queues: no lost or
duplicated item, FIFO where promised. What must block is shown blocked by
a wait with --timeout failing while the blocker holds, never by how long
something took. A holder killed with SIGKILL loses its hold once its lease
(--ttl) expires.

TARGET=etcd runs the same against etcd 3.4 (the recipes use only its API).

Run: QUORUM_BIN=build/src/server/quorum QUORUMCTL_BIN=build/tools/quorumctl/quorumctl \
     /usr/bin/python3 tests/integration/test_recipes.py
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, built_binary, free_port, wait_for  # noqa: E402

QUORUMCTL = built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")


class Recipes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(os.environ.get("TARGET", "quorum")).start()
        cls.tmp = tempfile.mkdtemp(prefix="recipes-test-")
        # $Q: quorumctl with the endpoint, for the shell scripts of a test
        os.environ["Q"] = "%s --endpoints %s" % (QUORUMCTL, cls.srv.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.procs = []

    def tearDown(self):
        # every process this test started and that is still running, by PID
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                if f is not None and not f.closed:
                    f.close()

    # ---- helpers ----

    def argv(self, *args):
        return [QUORUMCTL, "--endpoints", self.srv.endpoint] + list(args)

    def ctl(self, *args, check=True, timeout=60):
        r = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("quorumctl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                                r.stderr))
        return r

    def spawn(self, *args, shell=None, stdin=subprocess.DEVNULL):
        """quorumctl |args| (or a shell script) in the background."""
        cmd = ["/bin/sh", "-c", shell] if shell is not None else self.argv(*args)
        p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.procs.append(p)
        return p

    def finish(self, procs, timeout=60):
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            self.assertEqual(p.returncode, 0, "exit %d: %s" % (p.returncode, err))
            outs.append(out)
        return outs

    def marks_file(self, name):
        path = os.path.join(self.tmp, name)
        open(path, "w").close()
        return path

    @staticmethod
    def marker(path, tag):
        """a holder's command: enter mark, a moment inside, leave mark"""
        return ["sh", "-c", 'echo "enter %s $$" >> %s; sleep 0.05; echo "leave %s $$" >> %s'
                % (tag, path, tag, path)]

    @staticmethod
    def read_marks(path):
        with open(path) as f:
            return [line.split() for line in f if line.strip()]

    def test_flags_after_dashdash_are_the_commands(self):
        # quorumctl's own flags end at "--", as pflag's do for etcdctl: the
        # held command keeps its --endpoints (here an unreachable one, so a
        # quorumctl that took it for itself would never get the lock)
        dead = "127.0.0.1:%d" % free_port()
        r = self.ctl("rwlock", "dd", "write", "--", QUORUMCTL, "--endpoints", dead,
                     "--dial-timeout=1s", "get", "x", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("context deadline exceeded", r.stderr)
        r = self.ctl("lock", "dd", "--", QUORUMCTL, "--endpoints", self.srv.endpoint,
                     "get", "dd", "--prefix", "--keys-only")
        self.assertTrue(r.stdout.startswith("dd/"), r.stdout)

    # ---- read/write lock ----

    def test_rwlock_writers_alone_readers_shared(self):
        path = self.marks_file("rw")
        procs = []
        for i in range(6):
            kind = "write" if i % 3 == 0 else "read"
            procs.append(self.spawn(shell="for k in 1 2 3; do $Q rwlock rwl %s -- %s || exit 1;"
                                    " done" % (kind, " ".join("'%s'" % a for a in
                                                            self.marker(path, kind[0].upper())))))
        self.finish(procs)
        marks = self.read_marks(path)
        self.assertEqual(len(marks), 6 * 3 * 2)
        inside = {"R": set(), "W": set()}
        for what, tag, pid in marks:
            if what == "enter":
                self.assertFalse(inside["W"], "someone entered while a writer held: %s" % marks)
                if tag == "W":
                    self.assertFalse(inside["R"], "a writer entered while readers held")
                inside[tag].add(pid)
            else:
                inside[tag].remove(pid)
        self.assertEqual(self.ctl("get", "--prefix", "rwl/").stdout, "", "nothing left behind")

        # readers share: a second reader gets in while a first one holds;
        # a writer cannot
        holder = self.spawn("rwlock", "rwl2", "read")
        key = holder.stdout.readline().strip()
        self.assertTrue(key.startswith("rwl2/read/"), key)
        r = self.ctl("rwlock", "--timeout", "10s", "rwl2", "read", "--", "echo", "shared")
        self.assertEqual(r.stdout, "shared\n")
        r = self.ctl("rwlock", "--timeout", "500ms", "rwl2", "write", "--", "true", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "Error: context deadline exceeded\n")
        os.kill(holder.pid, signal.SIGTERM)
        self.finish([holder])
        r = self.ctl("rwlock", "--timeout", "10s", "rwl2", "write", "--", "sh", "-c",
                     'echo "$ETCD_LOCK_KEY"')
        self.assertTrue(r.stdout.startswith("rwl2/write/"), r.stdout)

    def test_killed_holder_released_by_its_lease(self):
        holder = self.spawn("rwlock", "--ttl", "2", "dead", "write")
        self.assertTrue(holder.stdout.readline().startswith("dead/write/"))
        r = self.ctl("rwlock", "--timeout", "500ms", "dead", "read", "--", "true", check=False)
        self.assertEqual(r.stderr, "Error: context deadline exceeded\n", "held before the kill")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        r = self.ctl("rwlock", "--timeout", "30s", "dead", "read", "--", "echo", "got it")
        self.assertEqual(r.stdout, "got it\n")
        # a holder whose lease is revoked under it learns it lost the hold
        holder = self.spawn("rwlock", "lost", "write")
        key = holder.stdout.readline().strip()
        self.ctl("lease", "revoke", key.rsplit("/", 1)[1])
        _, err = holder.communicate(timeout=30)
        self.assertEqual((holder.returncode, err), (1, "Error: session expired\n"))

    # ---- semaphore ----

    def test_semaphore_at_most_n(self):
        path = self.marks_file("sem")
        procs = [self.spawn(shell="for k in 1 2 3; do $Q semaphore sem 2 -- %s || exit 1; done"
                            % " ".join("'%s'" % a for a in self.marker(path, "S")))
                 for _ in range(5)]
        self.finish(procs)
        n = most = 0
        for what, _, _ in self.read_marks(path):
            n += 1 if what == "enter" else -1
            most = max(most, n)
        self.assertLessEqual(most, 2)
        # two hold it: a third waits
        h1 = self.spawn("semaphore", "sem1", "2")
        h2 = self.spawn("semaphore", "sem1", "2")
        h1.stdout.readline()
        h2.stdout.readline()
        r = self.ctl("semaphore", "--timeout", "500ms", "sem1", "2", "--", "true", check=False)
        self.assertEqual(r.stderr, "Error: context deadline exceeded\n")
        os.kill(h1.pid, signal.SIGTERM)
        self.ctl("semaphore", "--timeout", "10s", "sem1", "2", "--", "true")
        os.kill(h2.pid, signal.SIGTERM)
        self.finish([h1, h2])

    # ---- barriers ----

    def test_barrier_releases_everyone(self):
        self.assertEqual(self.ctl("barrier", "bar", "hold").stdout, "OK\n")
        waiters = [self.spawn("barrier", "bar", "wait") for _ in range(3)]
        r = self.ctl("barrier", "--timeout", "500ms", "bar", "wait", check=False)
        self.assertEqual(r.stderr, "Error: context deadline exceeded\n")
        self.assertTrue(all(w.poll() is None for w in waiters), "nobody passes a held barrier")
        self.assertEqual(self.ctl("barrier", "bar", "release").stdout, "OK\n")
        self.finish(waiters)
        self.ctl("barrier", "--timeout", "1s", "bar", "wait")

    def test_double_barrier_together(self):
        path = self.marks_file("dbar")
        procs = [self.spawn(shell='echo arrive >> {p}; $Q double-barrier dbar 3 -- '
                            'sh -c "echo in >> {p}; sleep 0.05; echo done >> {p}" || exit 1; '
                            'echo out >> {p}'.format(p=path)) for _ in range(3)]
        self.finish(procs)
        marks = [m[0] for m in self.read_marks(path)]
        self.assertEqual(sorted(marks), sorted(["arrive", "in", "done", "out"] * 3))
        first_in = marks.index("in")
        self.assertEqual(marks[:first_in].count("arrive"), 3, "in before all arrived: %s" % marks)
        first_out = marks.index("out")
        self.assertEqual(marks[:first_out].count("done"), 3, "out before all done: %s" % marks)
        self.assertEqual(self.ctl("get", "--prefix", "dbar/").stdout, "")
        # more than n
        # more than n: the one inside runs `head -c 1` until we write it a byte
        h = self.spawn("double-barrier", "one", "1", "--", "head", "-c", "1",
                       stdin=subprocess.PIPE)
        wait_for(lambda: self.ctl("get", "--prefix", "--keys-only", "one/ready").stdout,
                 what="the first participant inside")
        r = self.ctl("double-barrier", "one", "1", check=False)
        self.assertEqual((r.returncode, r.stderr), (1, "Error: too many clients\n"))
        out, err = h.communicate("x", timeout=60)
        self.assertEqual((h.returncode, out, err), (0, "x", ""))
        self.assertEqual(self.ctl("get", "--prefix", "one/").stdout, "")

    # ---- queues ----

    def test_queue_each_item_once_fifo(self):
        producers = [self.spawn(shell="for i in $(seq 10); do $Q queue q put p%d-$i >/dev/null"
                                " || exit 1; done" % p) for p in range(3)]
        consumers = [self.spawn(shell="for i in $(seq 10); do $Q queue --timeout 30s q take"
                                " || exit 1; done") for _ in range(3)]
        self.finish(producers)
        outs = self.finish(consumers)
        taken = [line for out in outs for line in out.split()]
        want = ["p%d-%d" % (p, i) for p in range(3) for i in range(1, 11)]
        self.assertEqual(sorted(taken), sorted(want), "each item exactly once")
        for out in outs:  # one producer's items leave in the order they came
            seen = {}
            for item in out.split():
                p, i = item.split("-")
                self.assertGreater(int(i), seen.get(p, 0), out)
                seen[p] = int(i)
        for v in ["a", "b", "c", "d"]:
            self.ctl("queue", "fifo", "put", v)
        self.assertEqual([self.ctl("queue", "fifo", "take").stdout for _ in range(4)],
                         ["a\n", "b\n", "c\n", "d\n"])
        r = self.ctl("queue", "--timeout", "300ms", "fifo", "take", check=False)
        self.assertEqual((r.returncode, r.stderr), (1, "Error: context deadline exceeded\n"))
        # a taker waiting on an empty queue gets the next put
        t = self.spawn("queue", "fifo", "take")
        self.ctl("queue", "fifo", "put", "late")
        self.assertEqual(self.finish([t]), ["late\n"])

    def test_priority_queue(self):
        for prio, v in [(5, "e1"), (1, "a1"), (3, "c"), (1, "a2"), (0, "z"), (5, "e2")]:
            self.assertEqual(self.ctl("priority-queue", "pq", "put", str(prio), v).stdout, "OK\n")
        got = [self.ctl("priority-queue", "pq", "take").stdout.strip() for _ in range(6)]
        self.assertEqual(got, ["z", "a1", "a2", "c", "e1", "e2"])
        r = self.ctl("priority-queue", "pq", "put", "high", "x", check=False)
        self.assertEqual(r.returncode, 128)

    # ---- two-phase commit ----

    def test_2pc_same_outcome_for_all(self):
        for name, votes, want in [("tx1", ["commit"] * 3, "commit"),
                                  ("tx2", ["commit", "abort", "commit"], "abort")]:
            voters = [self.spawn("2pc", name, "vote", v) for v in votes]
            coord = self.ctl("2pc", "--timeout", "30s", name, "coordinate", "3")
            self.assertEqual(coord.stdout, want + "\n")
            self.assertEqual(self.finish(voters), [want + "\n"] * 3)
            self.assertEqual(self.ctl("2pc", name, "outcome").stdout, want + "\n")
        # a participant missing: abort at the coordinator's timeout, and the
        # one that voted learns it
        voter = self.spawn("2pc", "tx3", "vote", "commit")
        self.assertEqual(self.ctl("2pc", "--timeout", "1s", "tx3", "coordinate", "2").stdout,
                         "abort\n")
        self.assertEqual(self.finish([voter]), ["abort\n"])
        self.assertEqual(self.ctl("2pc", "tx3", "reset").stdout, "OK\n")
        self.assertEqual(self.ctl("2pc", "tx3", "outcome").stdout, "undecided\n")

    # ---- membership ----

    def test_membership(self):
        members = {m: self.spawn("membership", "--ttl", "2", "grp", "join", m)
                   for m in ["m1", "m2", "m3"]}
        for m, p in members.items():
            self.assertEqual(p.stdout.readline(), "grp/%s\n" % m)
        self.assertEqual(self.ctl("membership", "grp", "list").stdout, "m1\nm2\nm3\n")
        r = self.ctl("membership", "grp", "join", "m1", "--", "true", check=False)
        self.assertEqual((r.returncode, r.stderr), (1, "Error: key already exists\n"))
        watcher = self.spawn("membership", "grp", "watch")
        self.assertEqual([watcher.stdout.readline() for _ in range(3)],
                         ["member m1\n", "member m2\n", "member m3\n"])
        os.kill(members["m2"].pid, signal.SIGTERM)  # leaves at once
        self.finish([members["m2"]])
        self.assertEqual(watcher.stdout.readline(), "left m2\n")
        os.kill(members["m3"].pid, signal.SIGKILL)  # leaves when its lease ends
        members["m3"].wait()
        self.assertEqual(watcher.stdout.readline(), "left m3\n")
        j = self.ctl("membership", "grp", "join", "m4", "--", "sh", "-c",
                     "$Q membership grp list")
        self.assertEqual(j.stdout, "m1\nm4\n")
        self.assertEqual(watcher.stdout.readline(), "joined m4\n")
        self.assertEqual(watcher.stdout.readline(), "left m4\n")
        self.assertEqual(self.ctl("membership", "grp", "list").stdout, "m1\n")
        os.kill(watcher.pid, signal.SIGTERM)
        os.kill(members["m1"].pid, signal.SIGTERM)
        self.finish([watcher, members["m1"]])

    # ---- counter ----

    def test_counter(self):
        procs = [self.spawn(shell="for i in $(seq 10); do $Q counter cnt add 1 >/dev/null"
                            " || exit 1; done") for _ in range(4)]
        self.finish(procs)
        self.assertEqual(self.ctl("counter", "cnt", "get").stdout, "40\n")
        self.assertEqual(self.ctl("counter", "cnt", "add", "-50").stdout, "-10\n")
        self.ctl("put", "text", "abc")
        r = self.ctl("counter", "text", "add", "1", check=False)
        self.assertEqual((r.returncode, r.stderr), (1, "Error: counter: value is not an integer\n"))
        self.assertEqual(self.ctl("get", "--print-value-only", "text").stdout, "abc\n")
        r = self.ctl("counter", "cnt", "add", check=False)
        self.assertEqual(r.returncode, 128)


if __name__ == "__main__":
    unittest.main(verbosity=2)
