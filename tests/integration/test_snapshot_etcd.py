#!/usr/bin/python3
"""Snapshots in etcd's backup format, both ways, three-member clusters.

etcd 3.4 (three members) gets keys with history, a compaction, leases with
keys and without, a user and a role; `etcdctl snapshot save` writes its
snapshot. `quorumctl snapshot status` must print what `etcdctl snapshot
status` prints for it (-w json, table, simple and fields); `quorumctl snapshot restore`
makes a three-member quorum cluster of it, each member of which must answer
as etcd did: every key at
every revision from the compaction to the current one, the compaction
(a Range below it fails "required revision has been compacted"), every
lease's granted TTL and keys, users and roles. Then back: `etcdctl snapshot
save` against quorum, the status of that file equal from both tools,
`etcdctl snapshot restore` and an etcd cluster started on it (the quorum
members' names, ports and token) answer the same again, members (ids
derived as etcd does) included.

Refusals: a truncated, a corrupted, a random and an LMDB file are refused by
quorumctl's restore with etcdctl's error text, and the data dir is not
created; restoring over an existing data dir changes nothing in it.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

QCTL = harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        raise AssertionError(what)


def run(cmd, check_rc=True):
    env = dict(os.environ, ETCDCTL_API="3")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if check_rc and r.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr))
    return r


def etcdctl(*args, check_rc=True):
    return run(["etcdctl"] + list(args), check_rc)


def qctl(*args, check_rc=True):
    return run([QCTL] + list(args), check_rc)


def error_line(stderr):
    """The "Error: ..." line (etcdctl logs JSON lines around it)."""
    for line in stderr.splitlines():
        if line.startswith("Error:"):
            return line
    return None


def load(s, cluster):
    """Writes the data set into etcd |s| (a member of |cluster|); returns the
    compaction revision."""
    c = s.client()
    for i in range(60):
        c.put("k%02d" % (i % 20), "v%d" % i)
        if i % 13 == 12:
            c.delete("k%02d" % (i % 7))
    compact = c.get("k00")[1].mod_revision + 5
    c.compact(compact, physical=True)
    l1, l2 = c.lease(600), c.lease(900)
    c.lease(300)  # no keys
    c.put("l/a", "1", lease=l1)
    c.put("l/b", "2", lease=l1)
    c.put("l/c", "3", lease=l2)
    for i in range(10):
        c.put("k%02d" % i, "after-%d" % i)
    c.delete("k09")
    cluster.etcdctl(0, "user", "add", "alice:secret")
    cluster.etcdctl(0, "role", "add", "r1")
    cluster.etcdctl(0, "role", "grant-permission", "r1", "readwrite", "k", "--prefix")
    cluster.etcdctl(0, "user", "grant-role", "alice", "r1")
    return compact


def state(s, compact):
    """What a server answers: every revision's keys, the compaction, leases,
    users and roles, members."""
    c = s.client()
    cur = c.kvstub.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", count_only=True),
                         timeout=10).header.revision
    revs = {}
    for r in range(compact, cur + 1):
        resp = c.kvstub.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", revision=r),
                              timeout=10)
        revs[r] = [(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                   for kv in resp.kvs]
    try:
        c.kvstub.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", revision=compact - 1),
                       timeout=10)
        below = "no error"
    except Exception as e:  # noqa: BLE001
        below = e.details()
    leases = []
    for ls in sorted(c.leasestub.LeaseLeases(rpc_pb2.LeaseLeasesRequest(), timeout=10).leases,
                     key=lambda x: x.ID):
        t = c.leasestub.LeaseTimeToLive(rpc_pb2.LeaseTimeToLiveRequest(ID=ls.ID, keys=True),
                                        timeout=10)
        leases.append((ls.ID, t.grantedTTL, sorted(t.keys)))
    auth = rpc_pb2_grpc.AuthStub(c.channel)
    users = {}
    for u in auth.UserList(rpc_pb2.AuthUserListRequest(), timeout=10).users:
        users[u] = sorted(auth.UserGet(rpc_pb2.AuthUserGetRequest(name=u), timeout=10).roles)
    roles = {}
    for r in auth.RoleList(rpc_pb2.AuthRoleListRequest(), timeout=10).roles:
        perms = auth.RoleGet(rpc_pb2.AuthRoleGetRequest(role=r), timeout=10).perm
        roles[r] = sorted((p.permType, p.key, p.range_end) for p in perms)
    members = sorted((m.ID, m.name, list(m.peerURLs), list(m.clientURLs))
                     for m in c.clusterstub.MemberList(rpc_pb2.MemberListRequest(),
                                                       timeout=10).members)
    return {"current": cur, "revs": revs, "below": below, "leases": leases, "users": users,
            "roles": roles, "members": members}


def compare(got, want, who):
    check(got["current"] == want["current"], "%s: revision %d, want %d"
          % (who, got["current"], want["current"]))
    for r, kvs in want["revs"].items():
        check(got["revs"].get(r) == kvs, "%s: revision %d differs:\n %s\n %s"
              % (who, r, got["revs"].get(r), kvs))
    check(got["below"] == want["below"] and "required revision has been compacted" in got["below"],
          "%s: below the compaction: %r, want %r" % (who, got["below"], want["below"]))
    check(got["leases"] == want["leases"], "%s: leases %s, want %s"
          % (who, got["leases"], want["leases"]))
    check(got["users"] == want["users"], "%s: users %s" % (who, got["users"]))
    check(got["roles"] == want["roles"], "%s: roles %s" % (who, got["roles"]))
    print("%s: %d revisions (%d..%d) equal, compaction, %d leases, users and roles equal"
          % (who, len(want["revs"]), min(want["revs"]), want["current"], len(want["leases"])))


def same_status(path, who):
    out = {}
    for fmt in ("json", "table", "simple", "fields"):
        a = etcdctl("snapshot", "status", path, "-w", fmt).stdout
        out[fmt] = qctl("snapshot", "status", path, "-w", fmt).stdout
        check(a == out[fmt], "%s: snapshot status -w %s: quorumctl %r, etcdctl %r"
              % (who, fmt, out[fmt], a))
    print("%s: snapshot status equal (json, table, simple, fields): %s"
          % (who, out["json"].strip()))


def refusals(tmp, snap, lmdb):
    with open(snap, "rb") as f:
        data = f.read()
    bad = {
        "truncated": data[:len(data) // 2],
        # cut where a digest would end: the last 32 bytes are taken for one
        "truncated-at-page": data[:3 * 4096 + 32],
        "corrupted": data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40])
        + data[len(data) // 2 + 1:],
        "random": random.Random(7).randbytes(20000),
    }
    with open(lmdb, "rb") as f:
        bad["lmdb"] = f.read()
    for name, content in bad.items():
        path = os.path.join(tmp, name + ".db")
        with open(path, "wb") as f:
            f.write(content)
        target = os.path.join(tmp, "refused-" + name)
        r = qctl("snapshot", "restore", path, "--data-dir", target, check_rc=False)
        e = etcdctl("snapshot", "restore", path, "--data-dir", os.path.join(tmp, "e-" + name),
                    check_rc=False)
        check(r.returncode == 1 and e.returncode == 1,
              "%s: exit %d (etcdctl %d)" % (name, r.returncode, e.returncode))
        check(error_line(r.stderr) == error_line(e.stderr) and error_line(r.stderr),
              "%s: quorumctl says %r, etcdctl %r" % (name, r.stderr, error_line(e.stderr)))
        check(not os.path.exists(target) and
              not [x for x in os.listdir(tmp) if x.startswith("refused-")],
              "%s: the refused restore left %s" % (name, os.listdir(tmp)))
        print("%s: refused as etcdctl does: %s" % (name, error_line(r.stderr)[:90]))
    # even with the hash check off, a file that is no bbolt db is refused
    for name in ("random", "lmdb"):
        path = os.path.join(tmp, name + ".db")
        r = qctl("snapshot", "restore", path, "--skip-hash-check", "--data-dir",
                 os.path.join(tmp, "refused-skip"), check_rc=False)
        check(r.returncode == 1 and "invalid database" in r.stderr and
              not os.path.exists(os.path.join(tmp, "refused-skip")),
              "%s with --skip-hash-check: %r" % (name, r.stderr))
        s = qctl("snapshot", "status", path, check_rc=False)
        es = etcdctl("snapshot", "status", path, check_rc=False)
        check(s.returncode == 1 and error_line(s.stderr) == error_line(es.stderr),
              "%s status: %r vs etcdctl %r" % (name, s.stderr, es.stderr))
    # an existing data dir is left as it was
    existing = os.path.join(tmp, "existing")
    os.makedirs(existing)
    with open(os.path.join(existing, "keep"), "w") as f:
        f.write("x")
    r = qctl("snapshot", "restore", snap, "--data-dir", existing, check_rc=False)
    e = etcdctl("snapshot", "restore", snap, "--data-dir", existing, check_rc=False)
    check(r.returncode == 1 and error_line(r.stderr) == error_line(e.stderr),
          "existing dir: %r vs %r" % (r.stderr, e.stderr))
    check(os.listdir(existing) == ["keep"], "existing dir changed: %s" % os.listdir(existing))
    print("existing data dir: %s, unchanged" % error_line(r.stderr))


class Endpoint:
    """A client of one member of a Cluster, as state() wants it."""

    def __init__(self, port):
        self.port = port

    def client(self):
        import etcd3
        return etcd3.client(host="127.0.0.1", port=self.port, timeout=10)


def restore_all(tool, snap, cluster, ports_of=None):
    """Restores |snap| into every member's data dir of |cluster| with |tool|
    (quorumctl or etcdctl), with the cluster's names, URLs and token."""
    for m in cluster.members:
        if tool == "quorumctl":
            qctl("snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir)
        else:
            etcdctl("snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir,
                    "--initial-cluster", m.initial_cluster, "--initial-cluster-token", m.token,
                    "--initial-advertise-peer-urls", m.peer_url)


def main():
    tmp = tempfile.mkdtemp(prefix="quorum-snapshot-etcd-")
    s1, s2 = os.path.join(tmp, "etcd.db"), os.path.join(tmp, "quorum.db")
    try:
        with Cluster("etcd") as src:
            compact = load(Endpoint(src.members[0].client_port), src)
            src.etcdctl(1, "snapshot", "save", s1)
            want = state(Endpoint(src.members[1].client_port), compact)
        print("etcd (3 members): revision %d, compacted at %d, snapshot %d bytes"
              % (want["current"], compact, os.path.getsize(s1)))
        same_status(s1, "etcd's snapshot")

        q = Cluster("quorum")
        try:
            restore_all("quorumctl", s1, q)
            q.start()
            got = None
            for m in q.members:
                got = state(Endpoint(m.client_port), compact)
                compare(got, want, "quorum %s restored from etcd's snapshot" % m.name)
            check(len(got["members"]) == 3 and [x[1] for x in got["members"]] != [],
                  "quorum's members: %s" % got["members"])
            q.etcdctl(2, "snapshot", "save", s2)
            same_status(s2, "quorum's snapshot")
            q.stop()
            lmdb = os.path.join(tmp, "data.mdb")
            shutil.copy(os.path.join(q.members[0].data_dir, "member", "db", "data.mdb"), lmdb)

            # etcd on quorum's names, URLs and token: the same member ids
            e2 = Cluster("etcd")
            try:
                for em, qm in zip(e2.members, q.members):
                    em.client_port, em.peer_port = qm.client_port, qm.peer_port
                    em.initial_cluster = qm.initial_cluster
                restore_all("etcdctl", s2, e2)
                e2.start()
                for m in e2.members:
                    back = state(Endpoint(m.client_port), compact)
                    compare(back, want, "etcd %s restored from quorum's snapshot" % m.name)
                    check(back["members"] == got["members"], "members: etcd %s, quorum %s"
                          % (back["members"], got["members"]))
                print("members equal: %s" % [(hex(x[0]), x[1]) for x in back["members"]])
            finally:
                e2.cleanup()
        finally:
            q.cleanup()
        refusals(tmp, s1, lmdb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_snapshot_etcd: OK (%d checks)" % CHECKS[0])


if __name__ == "__main__":
    main()
