"""etcdctl 3.4 against quorum, compared with etcdctl 3.4 against etcd 3.4.

The same script of commands runs against a fresh etcd and a fresh quorum;
stdout, the error lines and the exit code of every command must match once
ids, terms and timings are masked. Direct assertions below make sure both
are also right (a shared mistake would otherwise pass).
"""
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

SCRIPT = [
    ["put", "a", "1"], ["put", "b", "2"], ["put", "c", "3"], ["put", "a", "11"],
    ["put", "d/x", "4"], ["put", "d/y", "5"], ["put", "e", ""], ["put", "f", "zz"],
    ["get", "a"], ["get", "a", "-w", "json"], ["get", "a", "--rev", "2", "-w", "json"],
    ["get", "a", "--rev", "1", "-w", "json"], ["get", "nope", "-w", "json"],
    ["get", "d/", "--prefix", "-w", "json"], ["get", "b", "--from-key", "--keys-only"],
    ["get", "a", "z", "--limit", "2", "-w", "json"], ["get", "", "--prefix", "--limit", "3", "-w", "json"],
    ["get", "a", "--print-value-only"],
    ["get", "", "--from-key", "--keys-only", "--limit", "4"],
    ["get", "a", "--consistency=s", "-w", "json"],
    ["get", "a", "--rev", "99", "-w", "json"],
] + [["get", "", "--prefix", "--sort-by=" + t, "--order=" + o, "-w", "json"]
     for t in ("CREATE", "KEY", "MODIFY", "VALUE", "VERSION") for o in ("ASCEND", "DESCEND")] + [
    ["get", "", "--prefix", "--sort-by=VALUE", "--limit", "2", "-w", "json"],
    ["put", "a", "--ignore-value"], ["get", "a", "-w", "json"],
    ["put", "zz", "--ignore-value"], ["put", "zz", "--ignore-lease"],
    ["put", "a", "v", "--lease", "1234"],
    ["put", "a", "12", "--prev-kv", "-w", "json"],
    ["del", "b", "--prev-kv"], ["del", "d/", "--prefix", "--prev-kv", "-w", "json"],
    ["del", "zzz", "-w", "json"], ["del", "c", "--from-key", "-w", "json"],
    ["put", "c", "again"],
    ["txn", "-w", "json", {"stdin": 'value("a") = "12"\n\nput a 13\nget a\nget c\n\nget e\n\n'}],
    ["txn", "-w", "json", {"stdin": 'value("a") = "nope"\nmod("c") > "0"\n\nput x 1\n\nput y 2\nget a\n\n'}],
    ["txn", "-w", "json", {"stdin": 'version("a") > "1"\ncreate("c") < "100"\n\ndel a\n\n\n'}],
    ["txn", {"stdin": 'mod("c") = "1"\n\n\nput c nope\nput c dup\n\n'}],
    ["txn", "-i", {"stdin": 'value("a") = "13"\n\nput a 14\n\nput a never\n\n'}],
    ["txn", "-i", "-w", "json", {"stdin": 'create("zz") > "0"\n\nput zz 1\n\nget a\n\n'}],
    ["get", "", "--prefix", "-w", "json"],
    ["compaction", "5"], ["get", "a", "--rev", "3"], ["get", "c", "--rev", "5", "-w", "json"],
    ["compaction", "3"], ["compaction", "1000"], ["compaction", "--physical", "6"],
    ["get", "", "--prefix", "--rev", "6", "-w", "json"],
    ["member", "list", "-w", "json"],
]

MASKS = [
    (re.compile(r'"(cluster_id|member_id|raft_term|ID|leader)":\s*\d+'), r'"\1":N'),
    (re.compile(r'127\.0\.0\.1:\d+'), "127.0.0.1:PORT"),
    (re.compile(r'took = [0-9.]+\S+'), "took = T"),
]


def normalize(text):
    lines = [ln for ln in text.splitlines() if not ln.startswith('{"level"')]
    out = "\n".join(lines)
    for rx, rep in MASKS:
        out = rx.sub(rep, out)
    return out


def run_script(server):
    results = []
    for cmd in SCRIPT:
        stdin = None
        if cmd and isinstance(cmd[-1], dict):
            stdin = cmd[-1]["stdin"]
            cmd = cmd[:-1]
        r = server.etcdctl(*cmd, check=False, input=stdin)
        results.append((cmd, r.returncode, normalize(r.stdout), normalize(r.stderr),
                        r.stdout))
    return results


class EtcdctlAgainstEtcd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Server("etcd").start()
        cls.quorum = Server("quorum").start()
        cls.want = run_script(cls.etcd)
        cls.got = run_script(cls.quorum)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.cleanup()
        cls.quorum.cleanup()

    def test_script_is_not_usage_errors(self):
        # a flag etcdctl 3.4 lacks fails the same way on both servers and
        # would compare equal while testing nothing
        bad = [c for c, rc, out, err, _ in self.want if "unknown flag" in err or "NAME:" in out]
        self.assertEqual(bad, [])

    def test_every_command_matches_etcd(self):
        diffs = []
        for (cmd, rc_e, out_e, err_e, _), (_, rc_q, out_q, err_q, _) in zip(self.want, self.got):
            if (rc_e, out_e, err_e) != (rc_q, out_q, err_q):
                diffs.append("etcdctl %s\n  etcd:   rc=%d out=%r err=%r\n  quorum: rc=%d out=%r err=%r"
                             % (" ".join(cmd), rc_e, out_e, err_e, rc_q, out_q, err_q))
        self.assertEqual(diffs, [], "\n".join(diffs))

    def result(self, cmd):
        for c, rc, _, err, raw in self.got:
            if c == cmd:
                return rc, raw, err
        raise KeyError(cmd)

    def test_direct_assertions(self):
        rc, out, _ = self.result(["get", "a", "--rev", "2", "-w", "json"])
        kv = json.loads(out)["kvs"][0]
        self.assertEqual((kv["create_revision"], kv["mod_revision"], kv["version"]), (2, 2, 1))
        rc, out, _ = self.result(["get", "d/", "--prefix", "-w", "json"])
        self.assertEqual(json.loads(out)["count"], 2)
        rc, out, err = self.result(["get", "a", "--rev", "3"])
        self.assertNotEqual(rc, 0)
        self.assertIn("etcdserver: mvcc: required revision has been compacted", err)
        rc, out, err = self.result(["get", "a", "--rev", "99", "-w", "json"])
        self.assertIn("etcdserver: mvcc: required revision is a future revision", err)
        rc, out, err = self.result(["put", "zz", "--ignore-value"])
        self.assertIn("etcdserver: key not found", err)
        rc, out, err = self.result(["put", "a", "v", "--lease", "1234"])
        self.assertIn("etcdserver: requested lease not found", err)
        rc, out, _ = self.result(["get", "", "--prefix", "--limit", "3", "-w", "json"])
        j = json.loads(out)
        self.assertTrue(j["more"])
        self.assertEqual(len(j["kvs"]), 3)

    def test_status_and_health(self):
        r = self.quorum.etcdctl("endpoint", "status", "-w", "json")
        st = json.loads(r.stdout)[0]["Status"]
        self.assertTrue(st["version"].startswith("3.4"))
        self.assertEqual(st["leader"], st["header"]["member_id"])
        self.assertGreater(st["dbSize"], 0)
        self.assertGreaterEqual(st["raftAppliedIndex"], 1)
        r = self.quorum.etcdctl("endpoint", "health")
        self.assertIn("is healthy", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
