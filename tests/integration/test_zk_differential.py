#!/usr/bin/python3
"""Differential test of the ZooKeeper face: the same seeded random sequence
of ZooKeeper operations against Apache ZooKeeper 3.8 (zkref.py, Debian's
package: the reference) and quorum (--listen-zk-urls), in lock step, every
answer compared.

Three kazoo sessions per server (session 2 authenticated as digest
alice:secret); each operation runs on the same session index on both. The
operations work on a small path space under a fresh root per seed (names
a, b, c, the sequential names and paths the reference made, depth <= 3) so
that NODEEXISTS, NONODE, NOTEMPTY, BADVERSION, NOAUTH, INVALIDACL and
NOCHILDRENFOREPHEMERALS come often:
- create (persistent, ephemeral, sequential, ephemeral-sequential; with
  include_data, i.e. create2; with one of a dozen ACLs: world with some
  permissions off, digest, auth, ip, repeated entries, empty), and
  createContainer;
- delete, setData and setACL with version -1 or a small one;
- getData, exists, getChildren(2) (one-shot watches at random), getACL,
  sync, getEphemerals, getAllChildrenNumber, multiRead;
- multi (kazoo transactions: create, delete, setData, check): random ops,
  and planned ones that mostly succeed (a fresh node, then its children,
  setData and check with the versions the multi itself gave, deletes,
  sequential creates: each op sees the changes of those before it);
- addWatch (persistent, persistent recursive), checkWatches, removeWatches,
  setWatches and setWatches2 relative to the zxid after an earlier
  operation (as a client sends them on reconnect);
- batches: several of the above sent on one connection without waiting
  (pipelined; ZooKeeper answers a connection's requests in order);
- closing a session and opening a new one in its place (its ephemerals go).

Every watch event a session receives (type, path; read off the wire,
before kazoo routes it) is collected after each operation behind a read of
that session (ZooKeeper sends an event before any later answer of the same
connection), and once more after a sync of every session at the end of the
seed, and compared with the operation's answer.

What is compared (normalized): the exception class for errors; for a Stat
version, cversion, aversion, dataLength, numChildren and ephemeralOwner as
the session index (and generation) that owns it; czxid, mzxid and pzxid as
labels in order of first sight with, at first sight, their rank among the
zxids seen so far in the seed (so equal zxids, a changed or unchanged mzxid
or pzxid, and the order of all zxids seen must agree; the values themselves
do not: quorum's zxids are revisions); created paths (sequential names
exactly), children sorted, data, ACL lists in order, sync's path, the
events of each session in order. test_reply_header_zxids compares the zxid
of each ReplyHeader of a raw session the same way (0, or its relation to
the session's last write).

Left out, as docs/zookeeper.md's "What differs from ZooKeeper" lists or
because timing (or a name) would decide ZooKeeper's answer: "/" and
/zookeeper, session ids, raw zxids, ctime and mtime, reconfig, quotas, TTL
nodes, SASL, session expiry, the container sweep (both servers get an
interval of an hour, so no container goes during a run), setACL in a
batch (see BATCH_KINDS); the events of a closed session's ephemerals are
compared as a set (ZooKeeper deletes them in its HashSet's order of their
paths).

test_zookeeper_is_deterministic runs each seed twice against ZooKeeper
alone (fresh roots, fresh sessions) and requires identical normalized
answers, so a difference with quorum is quorum's. On a difference the
message gives the seed, the operation's index, the operation and both
answers; tools/zk-differential replays a seed (-v prints every operation),
runs more seeds and longer ones, leaves classes out (-x) and shrinks a
failing sequence (--shrink).

    cd tests/integration && /usr/bin/python3 -m unittest test_zk_differential -v
"""
import bisect
from collections import namedtuple
import os
import random
import socket
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, stop_and_clean  # noqa: E402
import zkref  # noqa: E402

import kazoo.exceptions  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.protocol.serialization import (Create2, MultiHeader, Watch, ZnodeStat,  # noqa: E402
                                          int_struct, read_buffer, read_string,
                                          stat_struct, write_string)
from kazoo.protocol.states import KazooState  # noqa: E402
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential  # noqa: E402

SEEDS = (1, 2, 3)
OPS = 300
NCLIENTS = 3
AUTH = [None, None, [("digest", "alice:secret")]]
OP_TIMEOUT = 10.0
# no container is swept during a run (timing would decide which answers)
SWEEP_MS = 3600 * 1000

ALL = Permissions.ALL
WORLD = Id("world", "anyone")
ACLS = {
    "open": [ACL(ALL, WORLD)],
    "read": [ACL(Permissions.READ, WORLD)],
    "read-admin": [ACL(Permissions.READ | Permissions.ADMIN, WORLD)],
    "no-delete": [ACL(ALL & ~Permissions.DELETE, WORLD)],
    "no-create": [ACL(ALL & ~Permissions.CREATE, WORLD)],
    "no-write": [ACL(ALL & ~Permissions.WRITE, WORLD)],
    "alice": [ACL(ALL, Id("digest", make_digest_acl_credential("alice", "secret"))),
              ACL(Permissions.READ, WORLD)],
    "alice-only": [ACL(ALL, Id("digest", make_digest_acl_credential("alice", "secret")))],
    "auth": [ACL(ALL, Id("auth", ""))],
    "ip": [ACL(ALL, Id("ip", "127.0.0.1"))],
    "dup": [ACL(ALL, WORLD), ACL(ALL, WORLD)],
    "empty": [],
}
CREATE_ACLS = (["open"] * 14 + ["read-admin", "no-delete", "no-create", "no-write", "alice",
                                "alice-only", "auth", "ip", "dup", "empty", "read"])
# ACLs that leave sessions 0 and 1 without READ (exclusion class "noread")
NOREAD_ACLS = ("alice-only", "auth")
SET_ACLS = ["open"] * 4 + [a for a in ACLS if a != "open"]
NAMES = ("a", "b", "c")
DATAS = (b"", b"x", b"yy", b"hello world", None, b"\x00\xff" * 9)
VERSIONS = (-1, -1, -1, 0, 0, 1, 2, 3)
# the operations, how often each is drawn
OP_KINDS = ("create", "container", "delete", "set", "get", "exists", "children", "get_acls",
            "set_acls", "txn", "sync", "restart", "add_watch", "check_watches",
            "remove_watches", "ephemerals", "all_children", "multi_read", "set_watches",
            "batch")
OP_WEIGHTS = (22, 4, 14, 10, 8, 8, 8, 3, 5, 8, 2, 1, 2, 1, 2, 2, 2, 3, 2, 5)
# what a batch (requests pipelined on one connection) is made of, and
# which of those often take a path near the one before; no setACL: ZooKeeper
# checks the requests behind one still in flight against the ACL before it
# (PrepRequestProcessor's change record keeps the old ACL), so its answer
# depends on timing
BATCH_KINDS = ("create", "create", "delete", "set", "set", "get", "exists", "children", "txn",
               "sync", "get_acls")
NEAR_KINDS = ("create", "delete", "set", "get", "exists", "children")
# classes that can be left out of a run: the kinds of operation, and
# "noread" (no ACL that takes READ from sessions 0 and 1)
EXCLUSIONS = OP_KINDS + ("noread",)
# left out of every run: checkWatches, where ZooKeeper 3.8 answers OK when
# any session has a watch on the path in the table asked of (quorum: only
# the asking session's, as removeWatches; docs/zookeeper.md, "What differs
# from ZooKeeper")
EXCLUDE = ("check_watches",)
EVENT_NAMES = {1: "CREATED", 2: "DELETED", 3: "CHANGED", 4: "CHILD"}


def read_strings(buffer, offset):
    """A jute vector of strings at |offset|: (the list, the offset after it)."""
    n = int_struct.unpack_from(buffer, offset)[0]
    offset += 4
    out = []
    for _ in range(max(n, 0)):
        p, offset = read_string(buffer, offset)
        out.append(p)
    return out, offset


class CreateContainer(Create2):
    """createContainer (op 19): Create2's request and response."""
    type = 19


class PathInt(namedtuple("PathInt", "path n")):
    """A request of a path and an int, answered with nothing."""

    def serialize(self):
        return bytearray(write_string(self.path) + int_struct.pack(self.n))

    @classmethod
    def deserialize(cls, buffer, offset):
        return True


class AddWatch(PathInt):
    type = 106  # n: mode, 0 persistent, 1 persistent recursive


class CheckWatches(PathInt):
    type = 17   # n: watcher type, 1 children, 2 data, 3 any


class RemoveWatches(PathInt):
    type = 18


class SetWatches(namedtuple("SetWatches", "rel data exist child")):
    """setWatches (101), as a client sends it on reconnect: the watches
    given are set again, and those whose node changed after zxid |rel|
    fire at once (ZooKeeper's DataTree.setWatches)."""
    type = 101

    def serialize(self):
        b = bytearray(struct.pack(">q", self.rel))
        for paths in self[1:]:
            b.extend(int_struct.pack(len(paths)))
            for p in paths:
                b.extend(write_string(p))
        return b

    @classmethod
    def deserialize(cls, buffer, offset):
        return True


class SetWatches2(namedtuple("SetWatches2", "rel data exist child persistent recursive")):
    """setWatches2 (105): setWatches with persistent and persistent
    recursive watches."""
    type = 105
    serialize = SetWatches.serialize
    deserialize = SetWatches.deserialize


class GetEphemerals(namedtuple("GetEphemerals", "path")):
    type = 103

    def serialize(self):
        return bytearray(write_string(self.path))

    @classmethod
    def deserialize(cls, buffer, offset):
        return read_strings(buffer, offset)[0]


class GetAllChildrenNumber(GetEphemerals):
    type = 104

    @classmethod
    def deserialize(cls, buffer, offset):
        return int_struct.unpack_from(buffer, offset)[0]


class MultiRead(namedtuple("MultiRead", "ops")):
    """multiRead (22): ops is a list of (4 getData | 8 getChildren, path);
    the answer a list of (data, ZnodeStat), children lists and error codes."""
    type = 22

    def serialize(self):
        b = bytearray()
        for t, path in self.ops:
            b.extend(MultiHeader(t, False, -1).serialize() + write_string(path) + b"\0")
        return b + MultiHeader(-1, True, -1).serialize()

    @classmethod
    def deserialize(cls, buffer, offset):
        out = []
        while True:
            h, offset = MultiHeader.deserialize(buffer, offset)
            if h.done:
                return out
            if h.type == 4:
                data, offset = read_buffer(buffer, offset)
                out.append((data, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            elif h.type == 8:
                kids, offset = read_strings(buffer, offset)
                out.append(kids)
            else:
                out.append(int_struct.unpack_from(buffer, offset)[0])
                offset += 4


def _kazoo_error(code, name):
    """kazoo 2.8 knows no exception for some of ZooKeeper 3.8's codes (its
    reader thread dies on one); named here as ZooKeeper names them."""
    if code not in kazoo.exceptions.EXCEPTIONS:
        kazoo.exceptions.EXCEPTIONS[code] = type(name, (kazoo.exceptions.ZookeeperError,),
                                                 {"code": code})


for _code, _name in ((-12, "UnknownSessionError"), (-120, "EphemeralOnLocalSessionError"),
                     (-121, "NoWatcherError"), (-122, "RequestTimeoutError"),
                     (-123, "ReconfigDisabledError"), (-124, "SessionClosedRequireSaslError"),
                     (-125, "QuotaExceededError"), (-127, "ThrottledOpError")):
    _kazoo_error(_code, _name)


# ---------------------------------------------------------------- generator

class Gen:
    """The operation stream of a seed. Paths are written with "R" for the
    seed's root. Paths the reference created and its sequential names
    become paths and names later operations use (learn), so the stream
    depends on the seed and on the reference's answers, which
    test_zookeeper_is_deterministic shows to be a function of the seed."""

    def __init__(self, seed, exclude=()):
        self.rng = random.Random(seed)
        self.weights = [0 if k in exclude else w for k, w in zip(OP_KINDS, OP_WEIGHTS)]
        drop = NOREAD_ACLS if "noread" in exclude else ()
        self.create_acls = [a for a in CREATE_ACLS if a not in drop]
        self.set_acls = [a for a in SET_ACLS if a not in drop]
        self.learned = []  # sequential names
        self.known = []    # paths the reference created lately
        self.watches = [[] for _ in range(NCLIENTS)]  # paths each session watched
        self.fresh = 0     # names t1, t2, ... of planned multis

    def name(self):
        if self.learned and self.rng.random() < 0.2:
            return self.rng.choice(self.learned)
        return self.rng.choice(NAMES)

    def path(self, lo=0, hi=3):
        if self.known and self.rng.random() < 0.4:
            p = self.rng.choice(self.known)
            depth = p.count("/")
            if lo <= depth < hi and self.rng.random() < 0.3:
                return p + "/" + self.name()
            if lo <= depth <= hi:
                return p
        depth = self.rng.choices(range(lo, hi + 1), [1, 8, 8, 4][lo:hi + 1])[0]
        return "R" + "".join("/" + self.name() for _ in range(depth))

    def data(self, null=False):
        """Data of a setData or a transaction's op: bytes (kazoo refuses
        None there); |null|: a create's, which may be null."""
        d = self.rng.choice(DATAS)
        return b"" if d is None and not null else d

    def version(self):
        return self.rng.choice(VERSIONS)

    def create_args(self):
        """(path, ephemeral, sequence) of a create."""
        kind = self.rng.choices(["p", "e", "s", "es"], [5, 2, 2, 2])[0]
        seq = "s" in kind
        if seq:
            path = self.path(0, 2) + "/" + self.rng.choice(["s", "s", ""])
        else:
            path = self.path(0, 3)
        return path, "e" in kind, seq

    def near(self, prev, lo, hi):
        """A path for a transaction's op: often the previous op's, its
        parent or a child of it (so ops of one multi meet: create then
        delete, a child then its parent), else any."""
        if prev is not None and self.rng.random() < 0.5:
            depth = prev.count("/")
            cands = [prev] * 2
            if depth > 1:
                cands.append(prev.rsplit("/", 1)[0])
            if depth < 3:
                cands.append(prev + "/" + self.name())
            p = self.rng.choice(cands)
            if lo <= p.count("/") <= hi:
                return p
        return self.path(lo, hi)

    def sub_op(self, prev):
        k = self.rng.choices(["create", "delete", "set", "check"], [4, 3, 3, 2])[0]
        if k == "create":
            path, eph, seq = self.create_args()
            if self.rng.random() < 0.5:
                path = self.near(prev, 1, 3)
                if seq:
                    path = path.rsplit("/", 1)[0] + "/s"
            if path.endswith("/"):
                # kazoo's transaction drops a trailing "/" (it would name
                # a sibling of the parent, here one of the root's under "/")
                path += "s"
            return ("create", path, self.data(), eph, seq)
        if k == "delete":
            return ("delete", self.near(prev, 1, 3), self.version())
        if k == "set":
            return ("set", self.near(prev, 1, 3), self.data(), self.version())
        return ("check", self.near(prev, 0, 3), self.version())

    def planned_txn(self):
        """A multi that mostly succeeds: a fresh node under a path that
        likely exists, then creates, setData and check with the versions
        the multi itself gave, deletes of its leaves, sequential creates,
        as the ops before it in the same multi left them (ZooKeeper checks
        each op against the changes of those before it); sometimes one
        random op among them (the whole multi fails then, often)."""
        r = self.rng
        self.fresh += 1
        shallow = [p for p in self.known if p.count("/") <= 2]
        base = r.choice(shallow) if shallow and r.random() < 0.6 else "R"
        top = "%s/t%d" % (base, self.fresh)
        ops = [("create", top, self.data(), False, False)]
        nodes = {top: 0}      # made in this multi: data version
        kids = {top: 0}       # children each has (sequential ones too)
        eph = set()
        for _ in range(r.randint(1, 6)):
            k = r.choices(["create", "seq", "set", "check", "delete", "random"],
                          [4, 2, 3, 2, 2, 1])[0]
            live = sorted(nodes)
            if k == "create":
                parent = r.choice(live)
                path = parent + "/" + r.choice(NAMES)
                e = r.random() < 0.2
                ops.append(("create", path, self.data(), e, False))
                if path not in nodes and parent not in eph:
                    nodes[path] = 0
                    kids[path] = 0
                    kids[parent] += 1
                    if e:
                        eph.add(path)
            elif k == "seq":
                parent = r.choice(live)
                ops.append(("create", parent + "/s", self.data(), r.random() < 0.3, True))
                kids[parent] += 1
            elif k == "set":
                path = r.choice(live)
                v = nodes[path] if r.random() < 0.8 else -1
                ops.append(("set", path, self.data(), v))
                nodes[path] += 1
            elif k == "check":
                path = r.choice(live)
                ops.append(("check", path, nodes[path] if r.random() < 0.8 else nodes[path] + 1))
            elif k == "delete":
                leaves = [p for p in live if kids[p] == 0 and p != top]
                if leaves:
                    path = r.choice(leaves)
                    ops.append(("delete", path, nodes[path] if r.random() < 0.8 else -1))
                    del nodes[path]
                    kids[path.rsplit("/", 1)[0]] -= 1
            else:
                ops.append(self.sub_op(r.choice(live)))
        return tuple(ops)

    def txn_ops(self, n):
        ops, prev = [], None
        for _ in range(n):
            op = self.sub_op(prev)
            ops.append(op)
            prev = op[1]
        return tuple(ops)

    def op(self):
        r = self.rng
        ci = r.randrange(NCLIENTS)
        k = r.choices(OP_KINDS, self.weights)[0]
        if k == "batch":
            subs, prev = [], None
            for _ in range(r.randint(2, 6)):
                sub = self.make(r.choice(BATCH_KINDS), ci)
                if prev is not None and sub[0] in NEAR_KINDS and r.random() < 0.6:
                    p = self.near(prev, 1, 3)
                    if sub[0] == "create" and sub[6]:
                        p = p.rsplit("/", 1)[0] + "/s"
                    sub = sub[:2] + (p,) + sub[3:]
                    if sub[0] in ("get", "exists", "children"):
                        self.watching(ci, sub)
                if sub[0] in NEAR_KINDS:
                    prev = sub[2]
                subs.append(sub[:1] + sub[2:])
            return ("batch", ci, tuple(subs))
        return self.make(k, ci)

    def make(self, k, ci):
        r = self.rng
        watch = r.random() < 0.4
        if k == "create":
            path, eph, seq = self.create_args()
            return ("create", ci, path, self.data(True), r.choice(self.create_acls), eph, seq,
                    r.random() < 0.4)
        if k == "container":
            return ("container", ci, self.path(1, 3), self.data(True))
        if k == "delete":
            return ("delete", ci, self.path(0, 3), self.version())
        if k == "set":
            return ("set", ci, self.path(0, 3), self.data(), self.version())
        if k in ("get", "exists"):
            return self.watching(ci, (k, ci, self.path(0, 3), watch))
        if k == "children":
            return self.watching(ci, ("children", ci, self.path(0, 3), watch, r.random() < 0.5))
        if k == "get_acls":
            return ("get_acls", ci, self.path(0, 3))
        if k == "set_acls":
            return ("set_acls", ci, self.path(0, 3), r.choice(self.set_acls), self.version())
        if k == "txn":
            if r.random() < 0.5:
                return ("txn", ci, self.planned_txn())
            return ("txn", ci, self.txn_ops(r.choice([1, 1, 2, 2, 3, 4, 6])))
        if k == "sync":
            return ("sync", ci, self.path(0, 3))
        if k == "add_watch":
            return self.watching(ci, ("add_watch", ci, self.path(0, 3), r.choice([0, 1])))
        if k in ("check_watches", "remove_watches"):
            if self.watches[ci] and r.random() < 0.7:
                return (k, ci, r.choice(self.watches[ci]), r.choice([1, 2, 3]))
            return (k, ci, self.path(0, 3), r.choice([1, 2, 3]))
        if k == "ephemerals":
            p = self.path(0, 2)
            return ("ephemerals", ci, p + r.choice(["", "", "/", "/s", "/a"]))
        if k == "all_children":
            return ("all_children", ci, self.path(0, 3))
        if k == "multi_read":
            return ("multi_read", ci, tuple((r.choice([4, 8]), self.path(0, 3))
                                            for _ in range(r.randint(1, 4))))
        if k == "set_watches":
            # relative to the zxid after the operation |back| before this one
            # (0: the zxid 0)
            back = r.choice([0, 1, 1, 2, 3, 5, 10, 30])
            lists = tuple(tuple(self.path(0, 3) for _ in range(r.choice([0, 0, 1, 2])))
                          for _ in range(3))
            if r.random() < 0.4:
                lists += tuple(tuple(self.path(0, 3) for _ in range(r.choice([0, 1])))
                               for _ in range(2))
            return self.watching(ci, ("set_watches", ci, back) + lists)
        return ("restart", ci)

    def watching(self, ci, op):
        """op, remembered when it sets a watch (checkWatches and
        removeWatches name those paths more often)."""
        if op[0] == "set_watches":
            for p in sum(op[3:], ()):
                if p not in self.watches[ci]:
                    self.watches[ci].append(p)
                    del self.watches[ci][:-8]
        elif op[0] == "add_watch" or op[3]:
            if op[2] not in self.watches[ci]:
                self.watches[ci].append(op[2])
                del self.watches[ci][:-8]
        return op

    def learn(self, op, answer):
        """Paths the reference created become paths later operations use
        (sequential names also as names anywhere)."""
        result = answer[0]
        made = []  # (path, sequential)
        if op[0] in ("create", "container") and isinstance(result, str) and result.startswith("R"):
            made.append((result, op[0] == "create" and op[6]))
        elif op[0] in ("create", "container") and isinstance(result, tuple):
            made.append((result[0], op[0] == "create" and op[6]))
        elif op[0] == "txn" and isinstance(result, list):
            for sub, res in zip(op[2], result):
                if sub[0] == "create" and isinstance(res, str) and res.startswith("R"):
                    made.append((res, sub[4]))
        for p, seq in made:
            if p not in self.known:
                self.known.append(p)
                del self.known[:-24]
            n = p.rsplit("/", 1)[-1]
            if seq and "/" in p and n not in self.learned:
                self.learned.append(n)
                del self.learned[:-8]


# ---------------------------------------------------------------- one server

class Side:
    """One server under test: NCLIENTS kazoo sessions, the seed's root on
    it, and the normalization of its answers (session labels, zxid labels)."""

    def __init__(self, name, hosts):
        self.name = name
        self.hosts = hosts
        self.clients = [None] * NCLIENTS
        self.gen = [0] * NCLIENTS
        self.events = [[] for _ in range(NCLIENTS)]
        self.watched = [False] * NCLIENTS
        self.stopping = [False] * NCLIENTS
        self.anomalies = []
        self.lock = threading.Lock()
        self.root = None
        self.labels = {}
        self.zx_sorted = []
        self.zx_label = {}

    # -- sessions
    def connect(self, i):
        c = KazooClient(hosts=self.hosts, timeout=10.0, auth_data=AUTH[i])
        conn = c._connection
        orig = conn._read_watch_event

        def read_watch_event(buffer, offset, i=i, c=c):
            w, _ = Watch.deserialize(buffer, offset)
            with self.lock:
                if self.clients[i] is c:
                    self.events[i].append((w.type, w.path))
            return orig(buffer, offset)
        conn._read_watch_event = read_watch_event

        def listener(state, i=i, c=c):
            if state != KazooState.CONNECTED and self.clients[i] is c and not self.stopping[i]:
                self.anomalies.append("%s session %d: %s" % (self.name, i, state))
        c.add_listener(listener)
        self.clients[i] = c
        self.stopping[i] = False
        c.start(timeout=20)
        self.labels[c.client_id[0]] = "c%d.%d" % (i, self.gen[i])
        self.watched[i] = False

    def disconnect(self, i):
        c = self.clients[i]
        if c is None:
            return
        self.stopping[i] = True
        try:
            c.stop()
            c.close()
        except Exception:
            pass
        with self.lock:
            self.clients[i] = None
            self.events[i] = []

    def begin(self, root):
        """Fresh sessions, labels and zxid table; the root made."""
        for i in range(NCLIENTS):
            self.disconnect(i)
        self.labels = {}
        self.gen = [0] * NCLIENTS
        self.zx_sorted = []
        self.zx_label = {}
        self.anomalies = []
        for i in range(NCLIENTS):
            self.connect(i)
        self.root = root
        self.clients[0].create_async(root, b"").get(timeout=OP_TIMEOUT)
        # zxids[k]: the zxid after operation k-1 (zxids[0]: after the root)
        self.zxids = [self.clients[0].last_zxid]

    def close(self):
        for i in range(NCLIENTS):
            self.disconnect(i)

    # -- normalization
    def rel(self, p):
        if p == self.root:
            return "R"
        if p.startswith(self.root + "/"):
            return "R" + p[len(self.root):]
        return p

    def abs(self, p):
        assert p.startswith("R"), p
        return self.root + p[1:]

    def zxid(self, z):
        if z in self.zx_label:
            return "z%d" % self.zx_label[z]
        rank = bisect.bisect_left(self.zx_sorted, z)
        bisect.insort(self.zx_sorted, z)
        self.zx_label[z] = len(self.zx_label)
        return "z%d<%d>" % (self.zx_label[z], rank)

    def stat(self, st):
        o = st.ephemeralOwner
        owner = "-" if o == 0 else self.labels.get(o, "unknown")
        return ("Stat(v=%d cv=%d av=%d len=%d nc=%d owner=%s cz=%s mz=%s pz=%s)"
                % (st.version, st.cversion, st.aversion, st.dataLength, st.numChildren, owner,
                   self.zxid(st.czxid), self.zxid(st.mzxid), self.zxid(st.pzxid)))

    def acls(self, acls):
        return ["%d:%s:%s" % (a.perms, a.id.scheme, a.id.id) for a in acls]

    def exc(self, e):
        return "!" + type(e).__name__

    # -- operations
    def run(self, op):
        """op's answer, normalized, and the watch events it caused."""
        if self.anomalies:
            return ("ANOMALY: " + "; ".join(self.anomalies), {})
        try:
            result = self._run(op)
        except Exception as e:  # kazoo's exceptions, timeouts
            result = self.exc(e)
        events = self.collect(sync=False)
        # the zxid the server was at when it answered (set_watches' rel):
        # the last one in a ReplyHeader of the session (of a read on a new one)
        c = self.clients[op[1]]
        try:
            if op[0] == "restart":
                c.exists_async(self.root).get(timeout=OP_TIMEOUT)
            self.zxids.append(c.last_zxid)
        except Exception as e:
            self.zxids.append(0)
            result = (result, "barrier " + self.exc(e))
        if op[0] == "restart":
            # a closed session's ephemerals go in the order of ZooKeeper's
            # HashSet of their paths (DataTree.killSession), which the
            # root's name decides: compared as sets
            events = {i: sorted(e) for i, e in events.items()}
        if self.anomalies:
            result = (result, "ANOMALY: " + "; ".join(self.anomalies))
        return (result, events)

    def _run(self, op):
        kind, ci = op[0], op[1]
        if kind == "restart":
            self.collect(sync=True)
            self.disconnect(ci)
            self.gen[ci] += 1
            self.connect(ci)
            return "restarted"
        if kind == "batch":
            # sent one after the other without waiting (pipelined on the
            # connection), answered in order (ZooKeeper's FIFO client order)
            started = []
            for sub in op[2]:
                try:
                    started.append(self._start((sub[0], ci) + sub[1:]))
                except Exception as e:
                    started.append(e)
            out = []
            for st in started:
                try:
                    if isinstance(st, Exception):
                        raise st
                    ar, finish = st
                    out.append(finish(ar.get(timeout=OP_TIMEOUT)))
                except Exception as e:
                    out.append(self.exc(e))
            return out
        ar, finish = self._start(op)
        return finish(ar.get(timeout=OP_TIMEOUT))

    def _start(self, op):
        """op sent: (its async result, what normalizes the answer)."""
        kind, ci = op[0], op[1]
        c = self.clients[ci]
        A = self.abs
        W = self.watcher
        if kind in ("get", "exists", "children") and op[3]:
            self.watched[ci] = True
        if kind == "create":
            _, _, path, data, acl, eph, seq, inc = op
            ar = c.create_async(A(path), data, acl=ACLS[acl], ephemeral=eph, sequence=seq,
                                include_data=inc)
            if inc:
                return ar, lambda r: (self.rel(r[0]), self.stat(r[1]))
            return ar, self.rel
        if kind == "container":
            _, _, path, data = op
            return (self.send(c, CreateContainer(A(path), data, ACLS["open"], 4)),
                    lambda r: (self.rel(r[0]), self.stat(r[1])))
        if kind == "delete":
            _, _, path, version = op
            return c.delete_async(A(path), version), lambda r: r
        if kind == "set":
            _, _, path, data, version = op
            return c.set_async(A(path), data, version), self.stat
        if kind == "get":
            _, _, path, watch = op
            return (c.get_async(A(path), watch=W if watch else None),
                    lambda r: (r[0], self.stat(r[1])))
        if kind == "exists":
            _, _, path, watch = op
            return (c.exists_async(A(path), watch=W if watch else None),
                    lambda r: None if r is None else self.stat(r))
        if kind == "children":
            _, _, path, watch, inc = op
            ar = c.get_children_async(A(path), watch=W if watch else None, include_data=inc)
            if inc:
                return ar, lambda r: (sorted(r[0]), self.stat(r[1]))
            return ar, sorted
        if kind == "get_acls":
            return c.get_acls_async(A(op[2])), lambda r: (self.acls(r[0]), self.stat(r[1]))
        if kind == "set_acls":
            _, _, path, acl, version = op
            return c.set_acls_async(A(path), ACLS[acl], version), self.stat
        if kind == "txn":
            t = c.transaction()
            for sub in op[2]:
                if sub[0] == "create":
                    t.create(A(sub[1]), sub[2], ephemeral=sub[3], sequence=sub[4])
                elif sub[0] == "delete":
                    t.delete(A(sub[1]), sub[2])
                elif sub[0] == "set":
                    t.set_data(A(sub[1]), sub[2], sub[3])
                else:
                    t.check(A(sub[1]), sub[2])

            def results(rs):
                out = []
                for r in rs:
                    if isinstance(r, Exception):
                        out.append(self.exc(r))
                    elif isinstance(r, str):
                        out.append(self.rel(r))
                    elif r is True:
                        out.append(True)
                    else:
                        out.append(self.stat(r))
                return out
            return t.commit_async(), results
        if kind == "sync":
            return c.sync_async(A(op[2])), self.rel
        if kind in ("add_watch", "check_watches", "remove_watches"):
            req = {"add_watch": AddWatch, "check_watches": CheckWatches,
                   "remove_watches": RemoveWatches}[kind](A(op[2]), op[3])
            if kind == "add_watch":
                self.watched[ci] = True
            return self.send(c, req), lambda r: r
        if kind == "set_watches":
            back = op[2]
            rel = 0 if back == 0 else self.zxids[max(len(self.zxids) - back, 0)]
            lists = [[A(p) for p in paths] for paths in op[3:]]
            self.watched[ci] = True
            return (self.send(c, (SetWatches if len(lists) == 3 else SetWatches2)(rel, *lists)),
                    lambda r: r)
        if kind == "ephemerals":
            return (self.send(c, GetEphemerals(A(op[2]))),
                    lambda r: sorted(self.rel(p) for p in r))
        if kind == "all_children":
            return self.send(c, GetAllChildrenNumber(A(op[2]))), lambda r: r
        if kind == "multi_read":
            def results(rs):
                out = []
                for r in rs:
                    if isinstance(r, int):
                        out.append("!%d" % r)
                    elif isinstance(r, list):
                        out.append(sorted(r))
                    else:
                        out.append((r[0], self.stat(r[1])))
                return out
            return self.send(c, MultiRead([(t, A(p)) for t, p in op[2]])), results
        raise ValueError(op)

    @staticmethod
    def send(c, req):
        """A request kazoo 2.8 has no call for, sent: its async result."""
        ar = c.handler.async_result()
        c._call(req, ar)
        return ar

    @staticmethod
    def watcher(event):
        pass  # events are recorded off the wire (connect)

    def collect(self, sync):
        """The watch events each session got since the last call, after a
        barrier on that session: a read (or a sync) whose answer comes
        after every event of the changes before it."""
        out = {}
        for i, c in enumerate(self.clients):
            if c is None or not (self.watched[i] or sync):
                continue
            try:
                if sync:
                    c.sync_async(self.root).get(timeout=OP_TIMEOUT)
                else:
                    c.exists_async(self.root).get(timeout=OP_TIMEOUT)
            except Exception as e:
                out[i] = ["barrier " + self.exc(e)]
                continue
            with self.lock:
                evs, self.events[i] = self.events[i], []
            if evs:
                out[i] = ["%s %s" % (EVENT_NAMES.get(t, t), self.rel(p)) for t, p in evs]
        return out


# ---------------------------------------------------------------- a seed

class Mismatch(Exception):
    pass


def fmt_op(op):
    return repr(op)


def run_seed(seed, sides, nops, tag, expect=None, ops=None, verbose=False, out=sys.stdout,
             exclude=EXCLUDE):
    """Runs seed's operations (or |ops|, a fixed list) on every side in lock
    step. Returns (ops, trace): the operations and the first side's
    normalized answers. Raises Mismatch at the first operation where a side
    answers differently from the first side, or from |expect| (a trace of
    an earlier run)."""
    gen = Gen(seed, exclude)
    roots = []
    for k, s in enumerate(sides):
        root = "/zkdiff-%d-%s%d-%d-%d" % (seed, tag, k, os.getpid(),
                                          int(time.time() * 1000) % 10 ** 8)
        s.begin(root)
        roots.append(root)
    done_ops, trace = [], []
    n_total = len(ops) if ops is not None else nops
    for n in range(n_total + 1):
        if n < n_total:
            op = ops[n] if ops is not None else gen.op()
            answers = [s.run(op) for s in sides]
        else:
            op = ("end: sync every session, last events",)
            answers = [("end", s.collect(sync=True)) for s in sides]
        done_ops.append(op)
        if verbose:
            print("seed %d #%d %s -> %r" % (seed, n, fmt_op(op), answers[0]), file=out)
        names = [s.name for s in sides]
        bad = [k for k in range(1, len(sides)) if answers[k] != answers[0]]
        if expect is not None and n < len(expect) and expect[n] != answers[0]:
            names = ["earlier run of " + sides[0].name] + names
            answers = [expect[n]] + answers
            bad = [1]
        if bad:
            k = bad[0]
            raise Mismatch(
                "seed %d, op #%d of %d: %s\n  %s: %r\n  %s: %r\n"
                "  (replay: tools/zk-differential --seed %d --ops %d -v)\n"
                "  roots: %s" % (seed, n, n_total, fmt_op(op), names[0], answers[0], names[k],
                                 answers[k], seed, n_total, ", ".join(roots)),
                done_ops, n)
        trace.append(answers[0])
        if n < n_total:
            gen.learn(op, answers[0])
    return done_ops, trace


# ---------------------------------------------------------------- servers

def start_zookeeper():
    return zkref.ZooKeeper(jvm_props=["-Dznode.container.checkIntervalMs=%d" % SWEEP_MS]).start()


def start_quorum():
    port = free_port()
    q = Server("quorum", name="zkdiff",
               extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port,
                           "--zk-container-check-interval", "%dms" % SWEEP_MS])
    q.start()
    q.zk_hostport = "127.0.0.1:%d" % port
    return q


ZK = None
QUORUM = None


def setUpModule():
    global ZK, QUORUM
    if not zkref.available():
        raise unittest.SkipTest("zookeeper not installed (apt-get install zookeeper)")
    ZK = start_zookeeper()
    try:
        QUORUM = start_quorum()
    except Exception:
        ZK.stop()
        raise


def tearDownModule():
    try:
        if QUORUM is not None:
            stop_and_clean(QUORUM)
    finally:
        if ZK is not None:
            ZK.stop()


class ZkDifferential(unittest.TestCase):
    maxDiff = None

    def test_zookeeper_is_deterministic(self):
        """Each seed twice against ZooKeeper alone: identical normalized
        answers (the comparison with quorum can only blame quorum)."""
        side = Side("zookeeper", ZK.hostport)
        try:
            for seed in SEEDS:
                with self.subTest(seed=seed):
                    failure = None
                    try:
                        _, trace = run_seed(seed, [side], OPS, "a")
                        run_seed(seed, [side], OPS, "b", expect=trace)
                    except Mismatch as e:
                        failure = "ZooKeeper against itself: " + e.args[0]
                    if failure:
                        self.fail(failure)
        finally:
            side.close()

    def test_quorum_matches_zookeeper(self):
        """Each seed against ZooKeeper and quorum in lock step: the same
        normalized answers and watch events."""
        sides = [Side("zookeeper", ZK.hostport), Side("quorum", QUORUM.zk_hostport)]
        try:
            for seed in SEEDS:
                with self.subTest(seed=seed):
                    failure = None
                    try:
                        run_seed(seed, sides, OPS, "d")
                    except Mismatch as e:
                        failure = e.args[0]
                    if failure:
                        self.fail(failure)
        finally:
            for s in sides:
                s.close()

    def test_reply_header_zxids(self):
        """The zxid in each ReplyHeader of one raw session, as ZooKeeper
        relates it to the session's writes: 0, or equal to / above the last
        write's (the values differ, their relations must not). A failed
        write is left out: ZooKeeper gives it a zxid of its own (an error
        transaction), quorum no revision."""
        def run(hostport, root):
            c = RawSession(hostport)
            try:
                out, last = [], None
                for name, xid, t, body, write in reply_header_requests(root):
                    z, err = c.request(xid, t, body)
                    if z == 0:
                        rel = "0"
                    elif last is None:
                        rel = "> 0"
                    else:
                        rel = "= last write" if z == last else (
                            "> last write" if z > last else "< last write")
                    if write and err == 0:
                        last = z
                    out.append("%s: err %d, zxid %s" % (name, err, rel))
                return out
            finally:
                c.close()
        root = "/zkdiff-hdr-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10 ** 8)
        want, got = run(ZK.hostport, root), run(QUORUM.zk_hostport, root)
        self.assertEqual(got, want, "ReplyHeader zxids, ZooKeeper's | quorum's:\n"
                         + "\n".join("  %-45s | %s" % (w, g) for w, g in zip(want, got)))


def _jstr(b):
    return struct.pack(">i", len(b)) + b


def reply_header_requests(root):
    """(name, xid, op, body, is a write) of test_reply_header_zxids."""
    r = root.encode()
    acl = struct.pack(">ii", 1, 31) + _jstr(b"world") + _jstr(b"anyone")
    return [
        ("addAuth digest", -4, 100, struct.pack(">i", 0) + _jstr(b"digest") + _jstr(b"u:p"), False),
        ("ping", -2, 11, b"", False),
        ("create root", 1, 1, _jstr(r) + _jstr(b"") + acl + struct.pack(">i", 0), True),
        ("exists root", 2, 3, _jstr(r) + b"\0", False),
        ("create child", 3, 1, _jstr(r + b"/x") + _jstr(b"") + acl + struct.pack(">i", 0), True),
        ("getData missing", 4, 4, _jstr(r + b"/nope") + b"\0", False),
        ("ping", -2, 11, b"", False),
        ("setWatches", -8, 101, struct.pack(">qi", 1 << 62, 1) + _jstr(r + b"/x")
         + struct.pack(">ii", 0, 0), False),
        ("sync", 5, 9, _jstr(r), False),
        ("checkWatches, none", 6, 17, _jstr(r) + struct.pack(">i", 3), False),
        ("getChildren", 7, 8, _jstr(r) + b"\0", False),
        ("setData", 8, 5, _jstr(r + b"/x") + _jstr(b"d") + struct.pack(">i", -1), True),
        ("getACL", 9, 6, _jstr(r), False),
        ("closeSession", 10, -11, b"", False),
    ]


class RawSession:
    """A ZooKeeper session on a plain socket: request() sends one request
    and returns its ReplyHeader's (zxid, err), events skipped."""

    def __init__(self, hostport):
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), OP_TIMEOUT)
        self.send(struct.pack(">iqiq", 0, 0, 30000, 0) + _jstr(b"\0" * 16) + b"\0")
        self.recv()

    def send(self, body):
        self.s.sendall(struct.pack(">i", len(body)) + body)

    def recv(self):
        n = struct.unpack(">i", self._read(4))[0]
        return self._read(n)

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            b += chunk
        return b

    def request(self, xid, op, body):
        self.send(struct.pack(">ii", xid, op) + body)
        while True:
            rx, zxid, err = struct.unpack(">iqi", self.recv()[:16])
            if rx != -1:
                return zxid, err

    def close(self):
        self.s.close()


if __name__ == "__main__":
    unittest.main()
