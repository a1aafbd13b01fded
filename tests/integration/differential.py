#!/usr/bin/python3
"""Differential test of the KV service: quorum against etcd 3.4.

Starts a fresh etcd 3.4 (the reference) and a fresh target (quorum by
default, or a second etcd with --target etcd, which must show zero
differences and so proves the comparison itself is deterministic), sends
both the same seeded random sequence of KV requests (Range, Put,
DeleteRange, Txn, Compact, valid and invalid), and compares every response
field a client sees: header.revision included, cluster_id / member_id /
raft_term masked (in every header, nested txn responses too); for errors the
gRPC status code and the details string. After the ops it also compares the
whole retained history (a range over all keys at every revision from the
compaction revision to the current one). With --restarts R (default 1) both
servers are restarted on their data dirs at R points of each seed (quorum
after kill -9), so the requests after that check the recovered state.

Before the seeds, fixed edge cases (directed_requests(), reported as seed
0 with their group name) run on their own fresh servers; --no-directed
skips them, --seeds 0 runs only them.

    differential.py [--target quorum|etcd] [--seed S] [--seeds K] [--ops N]
                    [--restarts R] [--max-diffs M] [--no-directed]
                    [--exclude nested-txn|compact-le0|neg-rev]... [-v]

Defaults: directed cases + seeds 1..3 x 300 ops, one restart per seed
(about 20 s). Exit 0 and print "differential: N ops, 0 differences" when
all agree; on the first difference (or the M-th with --max-diffs) print the
seed, the op index, the request and both responses, and exit 1. Exit 2 when
a server cannot be started. -v prints every request and etcd's answer.

Why the generator looks the way it does:
- At most 12 distinct keys exist, so a sorted range never has more than 12
  entries. etcd sorts with Go's sort.Sort, which is not stable in general;
  for 12 or fewer elements (go 1.19 pdqsort) it is an insertion sort, hence
  stable over the key-ordered input. So with this key space etcd's order on
  sort ties is "by key, ascending" and a stable sort in quorum must match it.
- No leases are granted (lease ids in requests are 0 or ids that do not
  exist), so nothing in the stream depends on time.
- The generator's model of the current and compacted revision is taken from
  the reference's responses, so the request stream depends only on the seed.
"""
import argparse
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402

# 12 keys (see the module comment): prefixes that nest ("a", "a/1"), keys
# with 0xff bytes (prefix end computation), a key that sorts last.
KEYS = [b"a", b"a/1", b"a/2", b"ab", b"b", b"b/1", b"b/2", b"c", b"c\xff", b"\xff",
        b"\xff\xff", b"z"]
MISSING = [b"nope", b"a/0", b"b/3", b"\x00", b"zz"]
PREFIXES = [b"a", b"a/", b"b", b"b/", b"c", b"\xff", b"\xff\xff", b"n", b"z"]
VALUES = [b"", b"v1", b"v2", b"x", b"\x00bin\xff", b"v1"]

RPC_TIMEOUT = 20.0
# Request classes --exclude can leave out: nested txns; compactions at
# revision <= 0; reads at a negative revision.
EXCLUDABLE = ["nested-txn", "compact-le0", "neg-rev"]
MAX_TXN_OPS = 128
OVERSIZE = 1536 * 1024 + 64 * 1024       # > etcd's 1.5 MiB --max-request-bytes, < 2 MiB grpc limit


def prefix_end(p):
    """etcd's GetPrefixRangeEnd: increment the last byte below 0xff, dropping
    trailing 0xff bytes; all 0xff (or empty) gives "\\0" (every key >= p)."""
    b = bytearray(p)
    for i in range(len(b) - 1, -1, -1):
        if b[i] < 0xff:
            b[i] += 1
            return bytes(b[:i + 1])
    return b"\x00"


class Gen:
    """Seeded generator of KV requests. cur_rev / compact_rev are fed back
    from the reference's responses (see observe)."""

    def __init__(self, seed, exclude=()):
        self.r = random.Random(seed)
        self.exclude = set(exclude)
        self.cur_rev = 1
        self.compact_rev = 0

    # ---- pieces -------------------------------------------------------
    def key(self):
        r = self.r
        return r.choice(KEYS) if r.random() < 0.9 else r.choice(MISSING)

    def write_key(self):
        """Only KEYS are ever written (at most 12 live keys, see above)."""
        return self.r.choice(KEYS)

    def value(self):
        r = self.r
        if r.random() < 0.03:
            return bytes(r.getrandbits(8) for _ in range(r.randint(100, 400)))
        return r.choice(VALUES)

    def interval(self):
        """(key, range_end) in one of the shapes etcd distinguishes."""
        r = self.r
        shape = r.choice(["single", "single", "prefix", "prefix", "fromkey", "all", "interval",
                          "interval"])
        if shape == "single":
            return self.key(), b""
        if shape == "prefix":
            p = r.choice(PREFIXES)
            return p, prefix_end(p)
        if shape == "fromkey":
            return r.choice(KEYS + MISSING), b"\x00"
        if shape == "all":
            return b"\x00", b"\x00"
        a, b = r.choice(KEYS + MISSING), r.choice(KEYS + MISSING)
        return a, b                       # may be empty or reversed on purpose

    def revision(self):
        """A read revision: 0 (current), current, historical, compacted,
        future, or negative."""
        r = self.r
        x = r.random()
        if x < 0.45:
            return 0
        if x < 0.55:
            return self.cur_rev
        if x < 0.80:
            return r.randint(max(self.compact_rev, 1), self.cur_rev)
        if x < 0.88 and self.compact_rev > 1:
            return r.randint(1, self.compact_rev - 1)
        if x < 0.96:
            return self.cur_rev + r.randint(1, 3)
        return 0 if "neg-rev" in self.exclude else -r.randint(1, 2)

    def some_rev(self):
        r = self.r
        return 0 if r.random() < 0.5 else r.randint(1, self.cur_rev + 1)

    # ---- requests -----------------------------------------------------
    def range_req(self, simple=False):
        r = self.r
        k, e = self.interval()
        q = rpc_pb2.RangeRequest(key=k, range_end=e)
        if r.random() < 0.3:
            q.limit = r.choice([1, 1, 2, 3, 5, 20, -1])
        if r.random() < 0.35:
            q.revision = self.revision()
        if r.random() < 0.5:
            q.sort_order = r.randint(0, 2)
            q.sort_target = r.randint(0, 4)
        if simple:
            return q
        q.serializable = r.random() < 0.2
        q.keys_only = r.random() < 0.15
        q.count_only = r.random() < 0.1
        if r.random() < 0.1:
            q.min_mod_revision = self.some_rev()
        if r.random() < 0.1:
            q.max_mod_revision = self.some_rev()
        if r.random() < 0.1:
            q.min_create_revision = self.some_rev()
        if r.random() < 0.1:
            q.max_create_revision = self.some_rev()
        return q

    def put_req(self, invalid_ok=True):
        r = self.r
        q = rpc_pb2.PutRequest(key=self.write_key(), value=self.value())
        q.prev_kv = r.random() < 0.4
        if invalid_ok and r.random() < 0.12:
            q.ignore_value = True
            if r.random() < 0.8:
                q.value = b""
        if invalid_ok and r.random() < 0.08:
            q.ignore_lease = True
        if (q.ignore_value or q.ignore_lease) and r.random() < 0.3:
            q.key = r.choice(MISSING)     # "key not found"
        return q

    def delete_req(self):
        k, e = self.interval()
        return rpc_pb2.DeleteRangeRequest(key=k, range_end=e, prev_kv=self.r.random() < 0.5)

    def compare(self):
        r = self.r
        c = rpc_pb2.Compare(key=self.key(), result=r.randint(0, 3), target=r.randint(0, 4))
        if r.random() < 0.2:
            p = r.choice(PREFIXES)
            c.key, c.range_end = p, prefix_end(p)
        if c.target == rpc_pb2.Compare.VERSION:
            c.version = r.randint(0, 3)
        elif c.target == rpc_pb2.Compare.CREATE:
            c.create_revision = r.randint(0, self.cur_rev + 1)
        elif c.target == rpc_pb2.Compare.MOD:
            c.mod_revision = r.randint(0, self.cur_rev + 1)
        elif c.target == rpc_pb2.Compare.VALUE:
            c.value = r.choice(VALUES)
        else:
            c.lease = r.choice([0, 0, 1])
        return c

    def request_op(self, depth):
        r = self.r
        x = r.random()
        if x < 0.4:
            return rpc_pb2.RequestOp(request_put=self.put_req(invalid_ok=r.random() < 0.1))
        if x < 0.7:
            return rpc_pb2.RequestOp(request_range=self.range_req(simple=r.random() < 0.5))
        if x < 0.9 or depth >= 2 or "nested-txn" in self.exclude:
            return rpc_pb2.RequestOp(request_delete_range=self.delete_req())
        return rpc_pb2.RequestOp(request_txn=self.txn_req(depth + 1))

    def txn_req(self, depth=0):
        r = self.r
        t = rpc_pb2.TxnRequest()
        for _ in range(r.choice([0, 1, 1, 1, 2, 3])):
            t.compare.append(self.compare())
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            t.success.append(self.request_op(depth))
        for _ in range(r.choice([0, 1, 1, 2])):
            t.failure.append(self.request_op(depth))
        return t

    def compact_req(self):
        r = self.r
        x = r.random()
        if x < 0.6 and self.cur_rev > self.compact_rev:
            lo = self.compact_rev + 1
            rev = r.randint(lo, max(lo, lo + (self.cur_rev - lo) // 2))
        elif x < 0.8:
            rev = r.randint(0, max(self.compact_rev, 1))          # already compacted (or 0/1)
        elif x < 0.95:
            rev = self.cur_rev + r.randint(1, 3)                  # future
        else:
            rev = r.choice([self.cur_rev, -1])
        if "compact-le0" in self.exclude and rev <= 0:
            rev = 1
        return rpc_pb2.CompactionRequest(revision=rev, physical=r.random() < 0.5)

    def invalid(self):
        """Requests etcd refuses (plus a few near misses it accepts)."""
        r = self.r
        kind = r.randint(0, 16)
        if kind == 0:
            return "Put", rpc_pb2.PutRequest(key=b"", value=b"v")
        if kind == 1:
            return "Range", rpc_pb2.RangeRequest(key=b"", range_end=r.choice([b"", b"a", b"\x00"]))
        if kind == 2:
            return "DeleteRange", rpc_pb2.DeleteRangeRequest(key=b"", range_end=r.choice([b"", b"a"]))
        if kind == 3:                     # too many ops in one branch
            t = rpc_pb2.TxnRequest()
            branch = t.success if r.random() < 0.5 else t.failure
            n = MAX_TXN_OPS + r.choice([0, 1, 1, 5])      # 128 is allowed, 129 is not
            for i in range(n):
                branch.append(rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(
                    key=KEYS[i % len(KEYS)])))
            return "Txn", t
        if kind == 4:                     # too many compares
            t = rpc_pb2.TxnRequest()
            for i in range(MAX_TXN_OPS + r.choice([0, 1])):
                t.compare.append(rpc_pb2.Compare(key=KEYS[i % len(KEYS)],
                                                 target=rpc_pb2.Compare.VERSION,
                                                 result=rpc_pb2.Compare.GREATER, version=-1))
            return "Txn", t
        if kind == 5:                     # put/put same key in one branch
            k = r.choice(KEYS)
            t = rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"1")),
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"2"))])
            return "Txn", t
        if kind == 6:                     # put and delete overlap (single or prefix)
            p = r.choice([b"a", b"b"])
            k = p + b"/1"
            d = rpc_pb2.DeleteRangeRequest(key=p, range_end=prefix_end(p)) if r.random() < 0.5 \
                else rpc_pb2.DeleteRangeRequest(key=k)
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"1")),
                   rpc_pb2.RequestOp(request_delete_range=d)]
            if r.random() < 0.5:
                ops.reverse()
            return "Txn", rpc_pb2.TxnRequest(failure=ops)
        if kind == 7:                     # same key in success and failure: allowed
            k = r.choice(KEYS)
            t = rpc_pb2.TxnRequest(
                compare=[self.compare()],
                success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"s"))],
                failure=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"f"))])
            return "Txn", t
        if kind == 8:                     # delete/delete overlap: allowed
            t = rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(
                    key=b"a", range_end=prefix_end(b"a"))),
                rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"a/1"))])
            return "Txn", t
        if kind == 9 and "nested-txn" not in self.exclude:   # put in parent and in nested txn
            k = r.choice(KEYS)
            inner = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(
                request_put=rpc_pb2.PutRequest(key=k, value=b"in"))])
            t = rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=b"out")),
                rpc_pb2.RequestOp(request_txn=inner)])
            return "Txn", t
        if kind == 10:                    # ignore_value with a value
            return "Put", rpc_pb2.PutRequest(key=self.key(), value=b"v", ignore_value=True)
        if kind == 11:                    # ignore_lease with a lease
            return "Put", rpc_pb2.PutRequest(key=self.key(), value=b"v", lease=7,
                                             ignore_lease=True)
        if kind == 12:                    # lease that does not exist
            return "Put", rpc_pb2.PutRequest(key=self.key(), value=b"v",
                                             lease=r.choice([1, 0x1234, 2 ** 62]))
        if kind == 13:                    # oversized request
            return "Put", rpc_pb2.PutRequest(key=self.write_key(), value=b"o" * OVERSIZE)
        if kind == 14:                    # a failing op inside a txn
            bad = r.choice([
                rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(
                    key=b"a", revision=self.cur_rev + 5)),
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
                    key=r.choice(MISSING), ignore_value=True)),
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"", value=b"x")),
            ])
            t = rpc_pb2.TxnRequest(compare=[self.compare()] if r.random() < 0.5 else [])
            (t.success if r.random() < 0.5 else t.failure).append(bad)
            t.success.append(rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"z", value=b"t")))
            return "Txn", t
        if kind == 15:                    # compare with an empty key
            t = rpc_pb2.TxnRequest(compare=[rpc_pb2.Compare(key=b"", target=rpc_pb2.Compare.VERSION,
                                                            result=rpc_pb2.Compare.EQUAL)])
            return "Txn", t
        # 16: a 100 KiB value, accepted
        return "Put", rpc_pb2.PutRequest(key=self.write_key(), value=b"L" * (100 * 1024))

    def next(self):
        """The next (method, request)."""
        r = self.r
        x = r.random()
        if x < 0.30:
            return "Put", self.put_req()
        if x < 0.58:
            return "Range", self.range_req()
        if x < 0.70:
            return "DeleteRange", self.delete_req()
        if x < 0.88:
            return "Txn", self.txn_req()
        if x < 0.92:
            return "Compact", self.compact_req()
        return self.invalid()

    def observe(self, method, req, resp):
        """Feed back a reference response (None on error)."""
        if resp is None:
            return
        if resp.header.revision:
            self.cur_rev = resp.header.revision
        if method == "Compact":
            self.compact_rev = max(self.compact_rev, req.revision)


# ---- comparison ---------------------------------------------------------

def mask(msg):
    """Zero cluster_id, member_id and raft_term in every ResponseHeader
    inside msg (in place)."""
    if msg.DESCRIPTOR.full_name == "etcdserverpb.ResponseHeader":
        msg.cluster_id = 0
        msg.member_id = 0
        msg.raft_term = 0
        return
    for fd, val in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.label == fd.LABEL_REPEATED:
            for m in val:
                mask(m)
        else:
            mask(val)


def shorten(msg):
    """A copy of msg for printing, long bytes fields cut."""
    m = type(msg)()
    m.CopyFrom(msg)

    def walk(x):
        for fd, val in x.ListFields():
            if fd.message_type is not None:
                for sub in (val if fd.label == fd.LABEL_REPEATED else [val]):
                    walk(sub)
            elif fd.type == fd.TYPE_BYTES and fd.label != fd.LABEL_REPEATED and len(val) > 64:
                setattr(x, fd.name, val[:24] + b"...<%d bytes>" % len(val))
    walk(m)
    return m


def show(x):
    if isinstance(x, tuple):
        return "ERROR %s %r" % x
    s = text_format.MessageToString(shorten(x), as_one_line=True)
    return s if len(s) < 6000 else s[:6000] + " ...<%d chars>" % len(s)


class Side:
    def __init__(self, server):
        self.server = server
        self.chan = grpc.insecure_channel(server.endpoint, options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024)])
        grpc.channel_ready_future(self.chan).result(timeout=20)
        self.kv = rpc_pb2_grpc.KVStub(self.chan)

    def call_future(self, method, req):
        return getattr(self.kv, method).future(req, timeout=RPC_TIMEOUT)

    def close(self):
        self.chan.close()


def outcome(fut):
    """A masked response, or ("CODE", "details") for an error."""
    try:
        resp = fut.result()
    except grpc.RpcError as e:
        return (e.code().name, e.details())
    mask(resp)
    return resp


def same(a, b):
    """Equal errors (code, details) or equal masked messages. Message
    equality is field by field, so a submessage present but empty differs
    from one absent, as it does for a Go client (nil vs non-nil)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return a == b


def directed_requests():
    """Fixed edge cases, run before the random seeds: places where an
    implementation is likely to part from etcd (several were found by the
    random runs and minimised here). Returns [(group, [(method, request)])];
    each group runs in order on its own fresh pair of servers, so a
    difference in one group does not shift the revisions of the others."""
    P = lambda k, v=b"", **kw: rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(  # noqa: E731
        key=k, value=v, **kw))
    D = lambda k, e=b"", **kw: rpc_pb2.RequestOp(  # noqa: E731
        request_delete_range=rpc_pb2.DeleteRangeRequest(key=k, range_end=e, **kw))
    R = lambda k, e=b"", **kw: rpc_pb2.RequestOp(  # noqa: E731
        request_range=rpc_pb2.RangeRequest(key=k, range_end=e, **kw))
    T = lambda s=(), f=(), c=(): rpc_pb2.RequestOp(request_txn=rpc_pb2.TxnRequest(  # noqa: E731
        success=list(s), failure=list(f), compare=list(c)))
    Txn = lambda s=(), f=(), c=(): ("Txn", rpc_pb2.TxnRequest(  # noqa: E731
        success=list(s), failure=list(f), compare=list(c)))
    Cmp = rpc_pb2.Compare
    ALL = dict(key=b"\x00", range_end=b"\x00")
    groups = []
    out = [
        # Before any compaction etcd's compaction revision is -1: a txn
        # range at a negative revision passes, and Compact 0 succeeds once.
        Txn(s=[R(b"a", revision=-1)]),
        ("Range", rpc_pb2.RangeRequest(key=b"a", revision=-1)),
        ("Compact", rpc_pb2.CompactionRequest(revision=0)),
        ("Compact", rpc_pb2.CompactionRequest(revision=0)),
        Txn(s=[R(b"a", revision=-1)]),
        ("Compact", rpc_pb2.CompactionRequest(revision=1)),
        ("Compact", rpc_pb2.CompactionRequest(revision=-1)),
        ("Compact", rpc_pb2.CompactionRequest(revision=2)),
    ]
    groups.append(("never-compacted", out))
    out = [
        # Duplicate-key rules (etcd's checkIntervals), nested txns.
        Txn(s=[T(s=[T(s=[P(b"a/2")], f=[P(b"a/2")])], f=[P(b"a/2")])]),
        Txn(s=[T(s=[P(b"a/2")], f=[P(b"a/2")])]),
        Txn(s=[T(s=[T(s=[P(b"a/2")])], f=[P(b"a/2")])]),
        Txn(s=[T(s=[T(s=[P(b"a/2")]), P(b"b/2")], f=[P(b"a/2")])]),
        Txn(s=[P(b"a/2"), T(s=[P(b"a/2")])]),
        Txn(s=[D(b"a", b"b"), T(s=[P(b"a/1")])]),
        Txn(s=[P(b"a/1"), T(s=[D(b"a", b"b")])]),
        Txn(s=[T(s=[D(b"a", b"b")]), T(s=[P(b"a/1")])]),
        Txn(s=[P(b"a"), P(b"a")]),
        Txn(s=[P(b"a"), D(b"a")]),
        Txn(s=[D(b"a"), D(b"a", b"b")]),
        Txn(s=[P(b"z"), D(b"b", b"\x00")]),       # from-key delete + put: etcd allows
        Txn(s=[P(b"z"), D(b"\x00", b"\x00")]),
        Txn(s=[P(b"a")], f=[P(b"a")]),
        Txn(s=[P(b"a")], f=[P(b"a"), T(s=[P(b"a")])]),
    ]
    # The check is made on the whole request, whichever branch runs. A
    # compare that never holds (and an empty failure branch) makes each
    # accepted case a no-op, so one refused wrongly does not shift the
    # revisions of the cases after it. Then the same cases once more, run.
    never = Cmp(key=b"never", target=Cmp.VERSION, result=Cmp.GREATER, version=5)
    dry = []
    for method, t in out:
        if not t.failure and not t.compare:
            t2 = rpc_pb2.TxnRequest()
            t2.CopyFrom(t)
            t2.compare.append(never)
            dry.append((method, t2))
    groups.append(("duplicate-keys", dry + out))
    out = [
        # Ties in sorts, limit with sort order NONE and a non-key target.
        ("Put", rpc_pb2.PutRequest(key=b"c", value=b"same")),
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"same")),
        ("Put", rpc_pb2.PutRequest(key=b"b", value=b"same")),
        ("Put", rpc_pb2.PutRequest(key=b"b", value=b"other")),
        Txn(s=[P(b"x1", b"t"), P(b"x2", b"t"), P(b"x0", b"t")]),
    ]
    for order in range(3):
        for target in range(5):
            for limit in (0, 2):
                out.append(("Range", rpc_pb2.RangeRequest(sort_order=order, sort_target=target,
                                                          limit=limit, **ALL)))
    out += [
        ("Range", rpc_pb2.RangeRequest(limit=2, min_mod_revision=4, **ALL)),
        ("Range", rpc_pb2.RangeRequest(limit=2, max_create_revision=3, count_only=True, **ALL)),
        ("Range", rpc_pb2.RangeRequest(limit=1, keys_only=True, count_only=True, **ALL)),
        ("Range", rpc_pb2.RangeRequest(key=b"b", range_end=b"a")),
        ("DeleteRange", rpc_pb2.DeleteRangeRequest(key=b"b", range_end=b"a", prev_kv=True)),
    ]
    groups.append(("sort-and-range", out))
    out = [
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"same")),
        ("Put", rpc_pb2.PutRequest(key=b"b", value=b"same")),
        # ignore_value / ignore_lease keep what is there.
        ("Put", rpc_pb2.PutRequest(key=b"a", ignore_value=True, prev_kv=True)),
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"n", ignore_lease=True, prev_kv=True)),
        ("Put", rpc_pb2.PutRequest(key=b"q", ignore_value=True)),
        ("Put", rpc_pb2.PutRequest(key=b"q", ignore_lease=True)),
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"v", ignore_value=True)),
        ("Put", rpc_pb2.PutRequest(key=b"a", lease=5, ignore_lease=True)),
        ("Put", rpc_pb2.PutRequest(key=b"a", lease=5)),
        ("Put", rpc_pb2.PutRequest(key=b"", value=b"v")),
        # Compares: missing keys, empty ranges, every target.
        Txn(c=[Cmp(key=b"nope", target=Cmp.VALUE, result=Cmp.EQUAL, value=b"")]),
        Txn(c=[Cmp(key=b"nope", target=Cmp.VERSION, result=Cmp.EQUAL, version=0)]),
        Txn(c=[Cmp(key=b"nope", target=Cmp.CREATE, result=Cmp.EQUAL, create_revision=0)]),
        Txn(c=[Cmp(key=b"nope", target=Cmp.LEASE, result=Cmp.EQUAL, lease=0)]),
        Txn(c=[Cmp(key=b"n", range_end=b"o", target=Cmp.MOD, result=Cmp.LESS, mod_revision=1)]),
        Txn(c=[Cmp(key=b"a", range_end=b"c", target=Cmp.VALUE, result=Cmp.EQUAL, value=b"same")]),
        Txn(c=[Cmp(key=b"a", range_end=b"c", target=Cmp.VERSION, result=Cmp.GREATER, version=0)]),
        Txn(c=[Cmp(key=b"", target=Cmp.VERSION, result=Cmp.EQUAL)]),
        Txn(),
        Txn(s=[R(b"a", revision=1000)]),
        Txn(s=[R(b"a", revision=1)]),
        Txn(s=[P(b"q", ignore_value=True)]),
        ("Put", rpc_pb2.PutRequest(key=b"big", value=b"o" * OVERSIZE)),
        ("Range", rpc_pb2.RangeRequest(key=b"a", revision=1000)),
        ("Range", rpc_pb2.RangeRequest(key=b"a", revision=1)),
        ("Compact", rpc_pb2.CompactionRequest(revision=1000)),
        ("Compact", rpc_pb2.CompactionRequest(revision=3, physical=True)),
        ("Range", rpc_pb2.RangeRequest(revision=2, **ALL)),
        ("Range", rpc_pb2.RangeRequest(revision=3, **ALL)),
        ("Range", rpc_pb2.RangeRequest(revision=2, **ALL)),
    ]
    groups.append(("put-compare-misc", out))
    return groups


def history_requests(gen):
    """Range over all keys at every retained revision, plus a few views."""
    out = []
    for rev in range(max(gen.compact_rev, 1), gen.cur_rev + 1):
        out.append(("Range", rpc_pb2.RangeRequest(key=b"\x00", range_end=b"\x00", revision=rev)))
    out.append(("Range", rpc_pb2.RangeRequest(key=b"\x00", range_end=b"\x00", count_only=True)))
    if gen.compact_rev > 1:
        out.append(("Range", rpc_pb2.RangeRequest(key=b"\x00", range_end=b"\x00",
                                                  revision=gen.compact_rev - 1)))
    return out


def restart_all(servers):
    """Stop every server, then start them again (in parallel: etcd takes a
    second or two to elect itself) on the same data dirs and ports. quorum
    is killed with SIGKILL; etcd gets SIGTERM, because etcd 3.4.23 itself
    is not deterministic across kill -9: now and then it comes back with
    acknowledged history rewritten (revisions shifted by one from some
    point on; seen with seed 3003 --exclude nested-txn --exclude
    compact-le0, restart at op 515), which would make the reference wrong.
    Returns a list of error texts, empty when all came back."""
    for srv in servers:
        srv.kill(signal.SIGKILL if srv.kind == "quorum" else signal.SIGTERM)
    errors = [None] * len(servers)

    def one(k):
        try:
            servers[k].start()
        except Exception as e:  # noqa: BLE001
            errors[k] = "%s did not restart after kill -9: %s" % (servers[k].kind, e)
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(servers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [e for e in errors if e]


def run_seed(seed, nops, target, verbose, max_diffs=1, exclude=(), restarts=0, fixed=None,
             label=""):
    """Run one seed. Returns (ops_done, [difference texts]); stops at
    max_diffs differences. Differences after the first may be consequences
    of it (the two stores may have diverged). With restarts > 0, both
    servers are stopped (quorum with kill -9) and restarted at that many points of the run
    (chosen by their own generator, so the op stream does not change): the
    requests after a restart check the recovered state. With fixed (a
    list of (method, request)), those are sent instead of generated ones;
    label names them in the output."""
    ref = harness.Server("etcd", name="ref")
    tgt = harness.Server(target, name="tgt")
    diffs = []
    try:
        try:
            ref.start()
            tgt.start()
        except Exception as e:  # noqa: BLE001
            raise SetupError(str(e))
        a, b = Side(ref), Side(tgt)
        gen = Gen(seed, exclude)
        if fixed is not None:
            nops = len(fixed)
        restart_at = set(random.Random(seed * 7919 + 1).sample(range(1, nops), restarts)) \
            if 0 < restarts < nops else set()
        done = 0
        i = 0
        hist = None
        while True:
            if i in restart_at:
                a.close()
                b.close()
                errs = restart_all([ref, tgt])
                if errs:
                    text = "DIFFERENCE seed=%d op=%d: %s" % (seed, i, "\n".join(errs))
                    print(text)
                    return done, diffs + [text]
                a, b = Side(ref), Side(tgt)
                if verbose:
                    print("#%d -- both servers stopped (quorum: kill -9) and restarted" % i)
            if i < nops:
                method, req = gen.next() if fixed is None else fixed[i]
            else:
                if hist is None:
                    hist = history_requests(gen)
                if i - nops >= len(hist):
                    break
                method, req = hist[i - nops]
            fa = a.call_future(method, req)
            fb = b.call_future(method, req)
            ra, rb = outcome(fa), outcome(fb)
            if verbose:
                print("#%d %s %s\n   -> %s" % (i, method, show(req), show(ra)))
            if not same(ra, rb):
                side = "etcd#2:" if target == "etcd" else target + ":"
                text = ("DIFFERENCE seed=%d%s op=%d%s method=%s\n  request: %s\n  etcd:    %s\n"
                        "  %-8s %s" % (seed, label, i, " (history check)" if i >= nops else "",
                                       method, show(req), show(ra), side, show(rb)))
                diffs.append(text)
                if len(diffs) >= max_diffs:
                    tail = tgt.log_tail(1500) if target != "etcd" else ""
                    if tail:
                        text += "\n  --- %s log tail ---\n%s" % (target, tail)
                    print(text)
                    return done, diffs
                print(text)
            gen.observe(method, req, None if isinstance(ra, tuple) else ra)
            done += 1
            i += 1
        a.close()
        b.close()
        return done, diffs
    finally:
        ref.cleanup()
        tgt.cleanup()


class SetupError(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="quorum", choices=["quorum", "etcd"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=3, help="run seeds seed .. seed+K-1")
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--restarts", type=int, default=1,
                    help="restart both servers (quorum after kill -9, etcd after SIGTERM) at "
                         "this many points of each seed")
    ap.add_argument("--no-directed", action="store_true",
                    help="skip the fixed edge cases (reported as seed 0) run before the seeds")
    ap.add_argument("--max-diffs", type=int, default=1,
                    help="keep going until this many differences (later ones may be "
                         "consequences of earlier ones)")
    ap.add_argument("--exclude", action="append", default=[], choices=EXCLUDABLE,
                    help="leave a class of requests out (to look past a known difference)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every op")
    args = ap.parse_args()

    t0 = time.time()
    total = 0
    ndiffs = 0
    runs = [(seed, None, "") for seed in range(args.seed, args.seed + args.seeds)]
    if not args.no_directed:
        runs[:0] = [(0, ops, " (directed group %s)" % g) for g, ops in directed_requests()]
    for seed, fixed, label in runs:
        try:
            n, diffs = run_seed(seed, args.ops, args.target, args.verbose,
                                args.max_diffs - ndiffs, args.exclude,
                                0 if fixed else args.restarts, fixed, label)
        except SetupError as e:
            print("differential: cannot start servers: %s" % e, file=sys.stderr)
            return 2
        total += n
        ndiffs += len(diffs)
        if ndiffs >= args.max_diffs:
            rerun = "--seeds 0" if seed == 0 else "--no-directed --seed %d --seeds 1 --ops %d" % (
                seed, args.ops)
            rerun += "".join(" --exclude " + x for x in args.exclude)
            print("differential: %d ops, %d difference%s (last in seed %d; rerun: %s --target %s %s)"
                  % (total, ndiffs, "" if ndiffs == 1 else "s", seed, sys.argv[0], args.target,
                     rerun))
            return 1
    print("differential: %d ops, %d differences (%s%d seeds from %d, target %s, %.1fs)"
          % (total, ndiffs, "" if args.no_directed else "directed cases + ", args.seeds,
             args.seed, args.target, time.time() - t0))
    return 1 if ndiffs else 0


if __name__ == "__main__":
    sys.exit(main())
