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
compaction revision to the current one).

Leases and watches are part of the same seeded sequence. Lease ops:
LeaseGrant (client-chosen ids, or ID 0 with the server's id mapped to a
placeholder per server; long, too-short and too-large TTLs; duplicates),
puts (and txn compares) with live or unknown leases, LeaseRevoke,
LeaseTimeToLive (keys sorted, TTL only checked to be in [0, grantedTTL]),
LeaseLeases (ids sorted), LeaseKeepAlive on one stream per server.
Watches: at random points a watcher is opened (random range, start
revision past / current / future / compacted, prev_kv, filters) on one
Watch stream per server; a history watcher over all keys (prev_kv) runs on
another stream. Before each compaction and restart and at the end, every
watcher's concatenated events and its control responses are compared
between the servers and against the reference history (see Watchers);
at the end about half are cancelled and the cancel responses compared.
Classes can be left out with --exclude (DEFAULT_EXCLUDE is empty: the four
classes that found quorum bugs, same-rev-prev-kv, cancel-compacted,
future-watch and neg-lease-id, pass since they were fixed; --strict is kept
for scripts that pass it).

With --restarts R (default 1) both
servers are restarted on their data dirs at R points of each seed (quorum
after kill -9), so the requests after that check the recovered state.

Before the seeds, fixed edge cases (directed_requests(), reported as seed
0 with their group name) run on their own fresh servers; --no-directed
skips them, --seeds 0 runs only them.

    differential.py [--target quorum|etcd] [--seed S] [--seeds K] [--ops N]
                    [--restarts R] [--max-diffs M] [--no-directed]
                    [--exclude CLASS]... [--strict] [-v]
    CLASS: nested-txn compact-le0 neg-rev lease watch same-rev-prev-kv
           cancel-compacted future-watch neg-lease-id

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
- Nothing depends on time: leases that live get TTLs >= 3600 s; a grant
  whose TTL comes back short (raised to etcd's 2 s minimum) is revoked by
  the next op (a restart due then waits one op); remaining TTLs are only
  checked loosely. Watch timing is settled before compactions (see
  Watchers).
- The generator's model of the current and compacted revision is taken from
  the reference's responses, so the request stream depends only on the seed.
"""
import argparse
import copy
import os
import queue
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
import pb34  # noqa: E402

# etcd 3.4 watch messages (python3-etcd3's are 3.3's, without watch_id /
# fragment / progress requests)
WatchRequest = pb34.msg("etcdserverpb.WatchRequest")
WatchResponse = pb34.msg("etcdserverpb.WatchResponse")
WatchCreateRequest = pb34.msg("etcdserverpb.WatchCreateRequest")

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
# leases (LeaseGrant/Revoke/TimeToLive/Leases/KeepAlive, puts with
# leases); watches (watchers opened during the run, compared at checkpoints).
# same-rev-prev-kv: ignore, in watch events, the prev_kv of events on a key
# that one txn wrote more than once (put then delete, via a nested txn or
# a from-key delete): etcd reads prev_kv at revision - 1, so the delete's
# prev_kv is the key before the txn (or none); quorum gives the put of the
# same txn. A KNOWN quorum difference, so it is in DEFAULT_EXCLUDE
# (--strict shows it).
# cancel-compacted: do not send a cancel request for a watcher already
# canceled by compaction (etcd 3.4 still answers the first such cancel with
# a canceled response, quorum sends nothing: KNOWN, in DEFAULT_EXCLUDE).
# future-watch: watchers start at most at the current revision + 1 (quorum
# delivers events below a start_revision further in the future: KNOWN, in
# DEFAULT_EXCLUDE).
# neg-lease-id: no LeaseGrant with a negative client-chosen ID (etcd grants
# it; quorum stops: "applying a batch failed: Invalid argument; stopping":
# KNOWN, in DEFAULT_EXCLUDE).
EXCLUDABLE = ["nested-txn", "compact-le0", "neg-rev", "lease", "watch", "same-rev-prev-kv",
              "cancel-compacted", "future-watch", "neg-lease-id"]
# The four classes that found quorum bugs (fixed) are no longer excluded.
DEFAULT_EXCLUDE = []
NEG_LEASE_IDS = [-9, -(2 ** 63)]
MAX_TXN_OPS = 128
OVERSIZE = 1536 * 1024 + 64 * 1024       # > etcd's 1.5 MiB --max-request-bytes, < 2 MiB grpc limit

# Leases. Client-chosen ids (the same on both servers); UNKNOWN ids are
# never granted (kind 12 of invalid() uses some of them too). A grant with
# ID 0 lets each server choose: the generator names such a lease by a
# placeholder (AUTO_BASE + k) and each Side maps placeholder <-> its own id
# in requests and responses. Leases meant to live get TTL >= 3600 s so
# nothing expires during a run; a grant whose TTL comes back short (below
# etcd's 2 s minimum it is raised to 2 s) is revoked by the very next op.
CLIENT_LEASE_IDS = [3, 42, 0x5000, 10 ** 12, 2 ** 50 + 1, 2 ** 63 - 1]
UNKNOWN_LEASE_IDS = [1, 0x1234, 2 ** 62, 99]
AUTO_BASE = 0x7F5A000000000000
MAX_LEASE_TTL = 9000000000               # etcd's lease.MaxLeaseTTL
LONG_TTLS = [3600, 7200, 86400, 10 ** 6, MAX_LEASE_TTL]
SHORT_TTLS = [-1, 0, 1, 2]
HUGE_TTLS = [MAX_LEASE_TTL + 1, 2 ** 62]
# counts for the summary line: what the lease and watch parts exercised
STATS = {"lease ops": 0, "watchers": 0, "watch events": 0}
MAX_WATCHERS = 16                        # per seed
WATCH_WAIT = 8.0                         # seconds to wait for expected watch responses


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
        self.leases = []                  # live lease ids (client ids or placeholders)
        self.pending = []                 # follow-up ops sent before any new one
        self.autos = 0                    # placeholders handed out
        self.last_auto = None             # placeholder of the last ID-0 grant
        self.watchers = 0                 # watchers opened so far

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
        if "lease" not in self.exclude and self.leases and r.random() < 0.3:
            q.lease = self.lease_id(0.9)
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
            c.lease = r.choice([0, 0, 1] + self.leases)
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

    # ---- leases and watches ------------------------------------------
    def lease_id(self, live_p=0.75):
        """A live lease id (or placeholder), else one never granted."""
        r = self.r
        if self.leases and r.random() < live_p:
            return r.choice(self.leases)
        return r.choice(UNKNOWN_LEASE_IDS)

    def lease_op(self):
        r = self.r
        x = r.random()
        self.last_auto = None
        if x < 0.35:
            q = rpc_pb2.LeaseGrantRequest()
            y = r.random()
            if y < 0.2:
                self.autos += 1
                self.last_auto = AUTO_BASE + self.autos          # server-chosen id
            elif y < 0.9 or not self.leases:
                q.ID = r.choice(CLIENT_LEASE_IDS + ([] if "neg-lease-id" in self.exclude
                                                    else NEG_LEASE_IDS))  # may already exist
            else:
                q.ID = r.choice(self.leases)                     # duplicate
            y = r.random()
            q.TTL = r.choice(LONG_TTLS if y < 0.75 else SHORT_TTLS if y < 0.9 else HUGE_TTLS)
            return "LeaseGrant", q
        if x < 0.5:
            return "LeaseRevoke", rpc_pb2.LeaseRevokeRequest(ID=self.lease_id())
        if x < 0.65:
            return "LeaseTimeToLive", rpc_pb2.LeaseTimeToLiveRequest(
                ID=self.lease_id(), keys=r.random() < 0.6)
        if x < 0.75:
            return "LeaseLeases", rpc_pb2.LeaseLeasesRequest()
        return "LeaseKeepAlive", rpc_pb2.LeaseKeepAliveRequest(ID=self.lease_id(0.85))

    def watch_req(self):
        """A WatchCreateRequest (etcd 3.4 class): random key/prefix/range,
        start revision (0, past, current, future, compacted), prev_kv and
        filters; progress_notify stays false (its timing is not
        deterministic)."""
        r = self.r
        k, e = self.interval()
        if e and e != b"\x00" and e <= k:
            e = b""                       # no reversed or empty watch ranges
        q = WatchCreateRequest(key=k, range_end=e)
        y = r.random()
        if y < 0.4:
            q.start_revision = 0
        elif y < 0.7:
            q.start_revision = r.randint(max(self.compact_rev, 1), self.cur_rev)
        elif y < 0.8:
            q.start_revision = self.cur_rev
        elif y < 0.9:
            q.start_revision = self.cur_rev + r.randint(1, 20)
            if "future-watch" in self.exclude:
                q.start_revision = self.cur_rev + 1
        else:
            q.start_revision = r.randint(1, self.compact_rev - 1) if self.compact_rev > 1 else 1
        q.prev_kv = r.random() < 0.5
        y = r.random()
        if y < 0.15:
            q.filters.append(0)           # NOPUT
        elif y < 0.3:
            q.filters.append(1)           # NODELETE
        elif y < 0.33:
            q.filters.extend([0, 1])
        self.watchers += 1
        return "Watch", q

    def next(self):
        """The next (method, request)."""
        r = self.r
        if self.pending:
            return self.pending.pop(0)
        if "lease" not in self.exclude and r.random() < 0.12:
            return self.lease_op()
        if "watch" not in self.exclude and self.watchers < MAX_WATCHERS and r.random() < 0.025:
            return self.watch_req()
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
        if method == "LeaseGrant":
            lid = self.last_auto if req.ID == 0 else req.ID
            if resp.TTL < 60:
                # short TTL: revoke at once, before it can expire
                self.pending.append(("LeaseRevoke", rpc_pb2.LeaseRevokeRequest(ID=lid)))
            elif lid not in self.leases:
                self.leases.append(lid)
        if method == "LeaseRevoke" and req.ID in self.leases:
            self.leases.remove(req.ID)


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


def map_ids(msg, table):
    """Replace, in place, every int field named lease or ID of msg (and its
    submessages) whose value is a key of table by table's value."""
    for fd, val in msg.ListFields():
        if fd.message_type is not None:
            for sub in (val if fd.label == fd.LABEL_REPEATED else [val]):
                map_ids(sub, table)
        elif fd.name in ("lease", "ID") and fd.label != fd.LABEL_REPEATED and val in table:
            setattr(msg, fd.name, table[val])


def normalize(resp):
    """Make lease responses comparable: LeaseLeases ids and TimeToLive keys
    sorted (both servers keep them in hash order); a TimeToLive TTL inside
    [0, grantedTTL] becomes -100 (remaining time depends on the clock)."""
    name = resp.DESCRIPTOR.name
    if name == "LeaseLeasesResponse":
        items = sorted((copy.deepcopy(x) for x in resp.leases), key=lambda x: x.ID)
        del resp.leases[:]
        resp.leases.extend(items)
    elif name == "LeaseTimeToLiveResponse":
        ks = sorted(resp.keys)
        del resp.keys[:]
        resp.keys.extend(ks)
        if 0 <= resp.TTL <= resp.grantedTTL:
            resp.TTL = -100


class Stream:
    """A bidirectional stream (Watch or LeaseKeepAlive): requests go in a
    queue, a reader thread appends every response to self.resps (under
    self.cv); a stream error is kept in self.error."""

    def __init__(self, chan, path, req_cls, resp_cls):
        self.reqs = queue.Queue()
        self.cv = threading.Condition()
        self.resps = []
        self.error = None
        call = chan.stream_stream(path, request_serializer=req_cls.SerializeToString,
                                  response_deserializer=resp_cls.FromString)
        self.call = call(iter(self.reqs.get, None))
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            for r in self.call:
                with self.cv:
                    self.resps.append(r)
                    self.cv.notify_all()
        except grpc.RpcError as e:
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def send(self, req):
        self.reqs.put(req)

    def wait(self, pred, timeout):
        """Wait until pred() (called under the lock) or a stream error."""
        with self.cv:
            return self.cv.wait_for(lambda: pred() or self.error is not None, timeout)

    def close(self):
        self.reqs.put(None)
        self.call.cancel()


class StreamFuture:
    """The next response of a Stream, shaped like a grpc future."""

    def __init__(self, stream, index):
        self.stream, self.index = stream, index

    def result(self):
        st = self.stream
        st.wait(lambda: len(st.resps) > self.index, RPC_TIMEOUT)
        with st.cv:
            if len(st.resps) > self.index:
                return st.resps[self.index]
            if st.error is not None:
                raise st.error
        raise TimeoutError("no response on the stream after %.0fs" % RPC_TIMEOUT)


class Side:
    """One server seen by a client: unary KV and Lease calls, a
    LeaseKeepAlive stream, and (unless watches are excluded) two Watch
    streams: one for the watchers the generator opens, one for a history
    watcher over all keys with prev_kv from hist_from on, whose events
    are the reference for what every other watcher must see. lmap maps
    lease placeholders to this server's ids (kept across restarts by the
    caller); hist_base collects the history events of earlier streams."""

    def __init__(self, server, lmap=None, hist_from=None, hist_base=None):
        self.server = server
        self.chan = grpc.insecure_channel(server.endpoint, options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024)])
        grpc.channel_ready_future(self.chan).result(timeout=20)
        self.kv = rpc_pb2_grpc.KVStub(self.chan)
        self.lease = rpc_pb2_grpc.LeaseStub(self.chan)
        self.lmap = lmap if lmap is not None else {}
        self.ka = None
        self.ws = None
        self.hist = None
        self.hist_base = hist_base if hist_base is not None else []
        self.wcount = 0                   # create requests sent on self.ws
        if hist_from is not None:
            self.ws = Stream(self.chan, "/etcdserverpb.Watch/Watch", WatchRequest, WatchResponse)
            self.hist = Stream(self.chan, "/etcdserverpb.Watch/Watch", WatchRequest,
                               WatchResponse)
            self.hist.send(WatchRequest(create_request=WatchCreateRequest(
                key=b"\x00", range_end=b"\x00", start_revision=hist_from, prev_kv=True)))

    def back(self):
        return {v: k for k, v in self.lmap.items()}

    def call_future(self, method, req):
        if self.lmap:
            req = copy.deepcopy(req)
            map_ids(req, self.lmap)
        if method == "LeaseKeepAlive":
            if self.ka is None:
                self.ka = Stream(self.chan, "/etcdserverpb.Lease/LeaseKeepAlive",
                                 rpc_pb2.LeaseKeepAliveRequest, rpc_pb2.LeaseKeepAliveResponse)
            with self.ka.cv:
                n = len(self.ka.resps)
            self.ka.send(req)
            return StreamFuture(self.ka, n)
        stub = self.lease if method.startswith("Lease") else self.kv
        return getattr(stub, method).future(req, timeout=RPC_TIMEOUT)

    def hist_events(self):
        """Every event the history watcher has seen (this stream and the
        earlier ones), lease ids mapped back to placeholders."""
        out = list(self.hist_base)
        if self.hist is not None:
            with self.hist.cv:
                resps = list(self.hist.resps)
            back = self.back()
            for r in resps:
                for ev in r.events:
                    e = copy.deepcopy(ev)
                    map_ids(e, back)
                    out.append(e)
        return out

    def close(self):
        if self.hist is not None:
            self.hist_base[:] = self.hist_events()
            self.hist.close()
            self.hist = None
        for st in (self.ka, self.ws):
            if st is not None:
                st.close()
        self.chan.close()


def outcome(fut, side=None):
    """A masked response (lease ids mapped back to placeholders, lease
    lists normalized), or ("CODE", "details") for an error."""
    try:
        resp = fut.result()
    except grpc.RpcError as e:
        return (e.code().name, e.details())
    except TimeoutError as e:
        return ("TIMEOUT", str(e))
    resp = copy.deepcopy(resp)
    if side is not None and side.lmap:
        map_ids(resp, side.back())
    normalize(resp)
    mask(resp)
    return resp


def same(a, b):
    """Equal errors (code, details) or equal masked messages. Message
    equality is field by field, so a submessage present but empty differs
    from one absent, as it does for a Go client (nil vs non-nil)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return a == b


def directed_requests(exclude=()):
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
    G = lambda i, ttl: ("LeaseGrant", rpc_pb2.LeaseGrantRequest(ID=i, TTL=ttl))  # noqa: E731
    TTL = lambda i, keys=True: ("LeaseTimeToLive", rpc_pb2.LeaseTimeToLiveRequest(  # noqa: E731
        ID=i, keys=keys))
    KA = lambda i: ("LeaseKeepAlive", rpc_pb2.LeaseKeepAliveRequest(ID=i))  # noqa: E731
    RV = lambda i: ("LeaseRevoke", rpc_pb2.LeaseRevokeRequest(ID=i))  # noqa: E731
    LS = ("LeaseLeases", rpc_pb2.LeaseLeasesRequest())
    out = [
        # Leases (client-chosen ids only: an ID-0 grant needs the generator's
        # placeholder mapping). Short TTLs are revoked at once.
        G(3, 3600), G(3, 7200), G(42, MAX_LEASE_TTL), G(43, MAX_LEASE_TTL + 1), G(44, 2 ** 62),
        G(5, 1), RV(5), G(6, 0), RV(6), G(7, -1), RV(7), G(-9, 3600), G(2 ** 63 - 1, 3600),
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"1", lease=3)),
        ("Put", rpc_pb2.PutRequest(key=b"b", value=b"1", lease=3)),
        Txn(s=[P(b"c", b"1", lease=3), P(b"d", b"1", lease=42)]),
        ("Put", rpc_pb2.PutRequest(key=b"a", value=b"2", ignore_lease=True, prev_kv=True)),
        ("Put", rpc_pb2.PutRequest(key=b"d", value=b"2", lease=3, prev_kv=True)),
        ("Put", rpc_pb2.PutRequest(key=b"e", value=b"1", lease=99)),
        Txn(s=[P(b"e", b"1", lease=99)]),
        Txn(c=[Cmp(key=b"a", target=Cmp.LEASE, result=Cmp.EQUAL, lease=3)], s=[P(b"f", b"1")]),
        Txn(c=[Cmp(key=b"a", range_end=b"z", target=Cmp.LEASE, result=Cmp.GREATER, lease=0)]),
        TTL(3), TTL(3, False), TTL(42), TTL(99), TTL(0), KA(3), KA(42), KA(99), KA(0), LS,
        ("Range", rpc_pb2.RangeRequest(**ALL)),
        RV(3), RV(3), RV(99), RV(0),
        ("Range", rpc_pb2.RangeRequest(**ALL)),
        ("Range", rpc_pb2.RangeRequest(revision=8, **ALL)),
        TTL(3), KA(3), LS, G(3, 3600), TTL(3), RV(42), RV(-9), RV(2 ** 63 - 1), LS,
    ]
    if "neg-lease-id" in exclude:
        out = [x for x in out if not (x[0] == "LeaseGrant" and x[1].ID < 0)]
    groups.append(("leases", out))
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


def in_range(key, k, e):
    if not e:
        return key == k
    if e == b"\x00":
        return key >= k
    return k <= key < e


def is_control(r):
    return r.created or r.canceled or r.compact_revision != 0


def control_view(r):
    """A control response (created / canceled / compacted) without events,
    header masked."""
    c = copy.deepcopy(r)
    del c.events[:]
    mask(c)
    return c


def show_events(evs):
    return "[" + ", ".join(show(e) for e in evs) + "]" if evs else "[]"


def show_diff(x, y):
    """The first differing position of two event lists and a few events
    from there on each side."""
    n = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
    return n, show_events(x[n:n + 3]), show_events(y[n:n + 3]), len(x), len(y)


def multi_writes(log):
    """(revision, key) pairs with more than one event in log: keys a txn
    wrote more than once (put then delete, delete then put)."""
    seen, multi = set(), set()
    for e in log:
        p = (e.kv.mod_revision, e.kv.key)
        (multi if p in seen else seen).add(p)
    return multi


def drop_same_rev_prev(evs, multi):
    """Clear prev_kv of the events on keys written more than once in their
    revision (the same-rev-prev-kv class)."""
    for e in evs:
        if (e.kv.mod_revision, e.kv.key) in multi:
            e.ClearField("prev_kv")
    return evs


class Watchers:
    """The watchers opened during a seed, on both servers. Each side has one
    Watch stream for them; watcher j is the j-th created response on it.

    What is compared (check()): per watcher, the concatenated list of events
    (type, kv, prev_kv) and the list of control responses (created /
    canceled / compact_revision / cancel_reason / watch_id / header), NOT
    the response boundaries and not the header revision of event
    responses: etcd batches catch-up events of an unsynced watcher into
    responses in its own way (and stamps them with the revision current
    when it syncs), so those are timing, not semantics. Each side's event
    list must also equal what the MVCC history implies: the history
    watcher's events (reference server) filtered by range, start revision
    and filters, prev_kv dropped unless asked for, and for catch-up events
    (revision <= the one current at creation) prev_kv dropped when revision
    - 1 was already compacted at creation (etcd reads prev_kv at rev - 1
    when it sends, and that read fails on a compacted revision).

    Determinism: an etcd watcher behind the current revision is synced by
    a loop every 100 ms, and a compaction cancels unsynced watchers below
    it; so before each compaction (and restart) the run "settles": waits
    0.3 s if a watcher was opened since the last settle, then waits until
    every watcher has its expected events (so prev_kv reads are done)."""

    def __init__(self, exclude=()):
        self.ws = []                  # dicts: req, rev, compact, ids, closed, bad
        self.fresh = False
        self.same_rev = "same-rev-prev-kv" in exclude
        self.no_cancel_compacted = "cancel-compacted" in exclude
        self.hist_bad = False         # report a history difference once

    def open(self, sides, req, gen):
        """Send the create request on both sides; returns a difference text
        or None."""
        w = dict(req=req, rev=gen.cur_rev, compact=gen.compact_rev, closed=False)
        self.ws.append(w)
        self.fresh = True
        views = []
        for sd in sides:
            sd.wcount += 1
            count = sd.wcount
            sd.ws.send(WatchRequest(create_request=req))
            sd.ws.wait(lambda: sum(1 for r in sd.ws.resps if r.created) >= count, WATCH_WAIT)
            with sd.ws.cv:
                created = [r for r in sd.ws.resps if r.created]
            views.append(control_view(created[count - 1]) if len(created) >= count else None)
        STATS["watchers"] += 1
        w["ids"] = [v.watch_id if v is not None else None for v in views]
        if views[0] != views[1]:
            return "created responses differ:\n  etcd:    %s\n  target:  %s" % (
                show(views[0]) if views[0] is not None else "none",
                show(views[1]) if views[1] is not None else "none")
        return None

    def expected(self, w, log):
        req = w["req"]
        start = req.start_revision or w["rev"] + 1
        out = []
        if req.start_revision and 0 < req.start_revision < w["compact"]:
            return out                    # canceled as compacted
        for ev in log:
            rev = ev.kv.mod_revision
            if rev < start or not in_range(ev.kv.key, req.key, req.range_end):
                continue
            if ev.type in req.filters:    # NOPUT = PUT = 0, NODELETE = DELETE = 1
                continue
            e = copy.deepcopy(ev)
            if not req.prev_kv or (rev <= w["rev"] and rev - 1 < w["compact"]):
                e.ClearField("prev_kv")
            out.append(e)
        return out

    def responses(self, sd, w, k):
        wid = w["ids"][k]
        with sd.ws.cv:
            resps = [r for r in sd.ws.resps if r.watch_id == wid]
        back = sd.back()
        evs = []
        for r in resps:
            for ev in r.events:
                e = copy.deepcopy(ev)
                map_ids(e, back)
                evs.append(e)
        return evs, [control_view(r) for r in resps if is_control(r)]

    def check(self, sides, gen, final=False, cancel_rng=None):
        """Settle and compare every open watcher (and the history watchers)
        up to gen.cur_rev. Returns a list of difference texts."""
        diffs = []
        if self.fresh:
            time.sleep(0.3)
            self.fresh = False
        R = gen.cur_rev

        def hist_done(sd):
            return lambda: any(e.kv.mod_revision >= R for r in sd.hist.resps for e in r.events)
        for sd in sides:
            if R > 1 and not any(e.kv.mod_revision >= R for e in sd.hist_base):
                sd.hist.wait(hist_done(sd), WATCH_WAIT)
        logs = [sd.hist_events() for sd in sides]
        multi = multi_writes(logs[0])
        if self.same_rev:
            logs = [drop_same_rev_prev(x, multi) for x in logs]
        if logs[0] != logs[1] and not self.hist_bad:
            self.hist_bad = True
            diffs.append("history watcher (all keys, prev_kv) differs at event %d:\n"
                         "  etcd:    %s\n  target:  %s\n  (%d vs %d events)"
                         % show_diff(logs[0], logs[1]))
        log = logs[0]
        if final:
            time.sleep(0.2)               # let extra (wrong) events arrive
        for j, w in enumerate(self.ws):
            if w["closed"] or None in w["ids"] or w.get("bad"):
                continue
            exp = self.expected(w, log)
            req = w["req"]
            want_cancel = bool(req.start_revision) and req.start_revision < w["compact"]
            got = []
            for k, sd in enumerate(sides):
                def enough(sd=sd, k=k):
                    evs, ctl = self.responses(sd, w, k)
                    return len(evs) >= len(exp) and (not want_cancel or
                                                     any(c.canceled for c in ctl))
                sd.ws.wait(enough, WATCH_WAIT)
                got.append(self.responses(sd, w, k))
            if self.same_rev:
                for g in got:
                    drop_same_rev_prev(g[0], multi)
            nd = len(diffs)
            what = "watcher #%d %s (opened at revision %d, compacted %d)" % (
                j, show(req), w["rev"], w["compact"])
            if got[0][1] != got[1][1]:
                diffs.append("%s: control responses differ:\n  etcd:    %s\n  target:  %s" % (
                    what, " | ".join(show(c) for c in got[0][1]),
                    " | ".join(show(c) for c in got[1][1])))
            if got[0][0] != got[1][0]:
                diffs.append("%s: events differ at event %d:\n  etcd:    %s\n  target:  %s\n"
                             "  (%d vs %d events)" % ((what,) + show_diff(got[0][0], got[1][0])))
            STATS["watch events"] += len(got[0][0])
            if got[0][0] != exp:
                diffs.append("%s: etcd's events differ from the history (test model "
                             "wrong?) at event %d:\n  expected: %s\n  etcd:     %s\n"
                             "  (%d vs %d events)" % ((what,) + show_diff(exp, got[0][0])))
            if len(diffs) > nd:
                w["bad"] = True           # report each watcher once
        if final and cancel_rng is not None and not diffs:
            diffs += self.cancel_some(sides, cancel_rng)
        return diffs

    def cancel_some(self, sides, rng):
        """Cancel about half the open watchers; compare the responses."""
        diffs = []
        for j, w in enumerate(self.ws):
            if w["closed"] or None in w["ids"] or rng.random() < 0.5:
                continue
            if self.no_cancel_compacted and any(c.compact_revision for c in
                                                self.responses(sides[0], w, 0)[1]):
                continue
            got = []
            for k, sd in enumerate(sides):
                before = len(self.responses(sd, w, k)[1])
                sd.ws.send(WatchRequest(cancel_request={"watch_id": w["ids"][k]}))
                sd.ws.wait(lambda sd=sd, k=k: len(self.responses(sd, w, k)[1]) > before,
                           WATCH_WAIT)
                got.append(self.responses(sd, w, k)[1][before:])
            w["closed"] = True
            if got[0] != got[1]:
                st = sides[1].ws
                with st.cv:
                    tail = [show(control_view(r)) + " +%d events" % len(r.events)
                            for r in st.resps[-4:]]
                diffs.append("watcher #%d %s: cancel responses differ:\n  etcd:    %s\n"
                             "  target:  %s\n  (target stream error: %s; its last responses: %s)"
                             % (j, show(w["req"]), " | ".join(show(c) for c in got[0]),
                                " | ".join(show(c) for c in got[1]), st.error, " | ".join(tail)))
        return diffs

    def close_all(self):
        for w in self.ws:
            w["closed"] = True


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
        gen = Gen(seed, exclude)
        watching = "watch" not in exclude and fixed is None
        lmaps = [{}, {}]
        hbases = [[], []]

        def sides():
            hist_from = (max(e.kv.mod_revision for e in hbases[0]) + 1 if hbases[0] else 1) \
                if watching else None
            if watching and hbases[0]:
                hist_from = max(hist_from, gen.compact_rev)
            return (Side(ref, lmaps[0], hist_from, hbases[0]),
                    Side(tgt, lmaps[1], hist_from, hbases[1]))
        a, b = sides()
        watchers = Watchers(exclude)
        cancel_rng = random.Random(seed * 104729 + 3)

        def check_watchers(i, final=False):
            if not watching:
                return []
            out = []
            for d in watchers.check((a, b), gen, final, cancel_rng if final else None):
                out.append("DIFFERENCE seed=%d%s op=%d (watch check at revision %d): %s" % (
                    seed, label, i, gen.cur_rev, d))
            return out
        if fixed is not None:
            nops = len(fixed)
        restart_at = set(random.Random(seed * 7919 + 1).sample(range(1, nops), restarts)) \
            if 0 < restarts < nops else set()
        done = 0
        i = 0
        hist = None
        # True while the last write that went through raft was a Txn etcd
        # refused (e.g. a range at a future revision in a txn with puts): etcd
        # 3.4.23 does not record such an entry as applied, replays it after
        # a restart and then APPLIES its puts (seed 215 --ops 500: Txn
        # refused with "required revision is a future revision" at revision
        # 71; after SIGTERM + restart etcd is at 72 with the txn's put).
        # A restart waits until a later write has gone through.
        failed_txn_last = False
        while True:
            if i in restart_at and (gen.pending or failed_txn_last):
                restart_at.add(i + 1)     # a short lease's revoke goes first, see above
            elif i in restart_at:
                wd = check_watchers(i, final=True)
                for t in wd:
                    print(t)
                diffs += wd
                if len(diffs) >= max_diffs:
                    return done, diffs
                watchers.close_all()
                a.close()
                b.close()
                errs = restart_all([ref, tgt])
                if errs:
                    text = "DIFFERENCE seed=%d op=%d: %s" % (seed, i, "\n".join(errs))
                    print(text)
                    return done, diffs + [text]
                a, b = sides()
                if verbose:
                    print("#%d -- both servers stopped (quorum: kill -9) and restarted" % i)
            if i < nops:
                method, req = gen.next() if fixed is None else fixed[i]
            else:
                if hist is None:
                    wd = check_watchers(i, final=True)
                    for t in wd:
                        print(t)
                    diffs += wd
                    if len(diffs) >= max_diffs:
                        return done, diffs
                    hist = history_requests(gen)
                if i - nops >= len(hist):
                    break
                method, req = hist[i - nops]
            if method == "Watch":
                d = watchers.open((a, b), req, gen)
                if verbose:
                    print("#%d Watch %s" % (i, show(req)))
                if d:
                    text = "DIFFERENCE seed=%d%s op=%d method=Watch\n  request: %s\n  %s" % (
                        seed, label, i, show(req), d)
                    print(text)
                    diffs.append(text)
                    if len(diffs) >= max_diffs:
                        return done, diffs
                done += 1
                i += 1
                continue
            if method == "Compact" and watching:
                wd = check_watchers(i)
                for t in wd:
                    print(t)
                diffs += wd
                if len(diffs) >= max_diffs:
                    return done, diffs
            if method.startswith("Lease"):
                STATS["lease ops"] += 1
            fa = a.call_future(method, req)
            fb = b.call_future(method, req)
            if method == "LeaseGrant" and req.ID == 0 and gen.last_auto is not None:
                for sd, fut in ((a, fa), (b, fb)):
                    try:
                        sd.lmap[gen.last_auto] = fut.result().ID
                    except grpc.RpcError:
                        pass
            ra, rb = outcome(fa, a), outcome(fb, b)
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
            if method == "Txn" and isinstance(ra, tuple):
                failed_txn_last = True
            elif not isinstance(ra, tuple) and ra.header.revision > gen.cur_rev:
                failed_txn_last = False
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
    ap.add_argument("--cluster", action="store_true",
                    help="the target is a three-member quorum cluster, asked through member 1")
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
    ap.add_argument("--strict", action="store_true",
                    help="do not apply the default exclusions (%s): show the known "
                         "differences" % ", ".join(DEFAULT_EXCLUDE))
    ap.add_argument("-v", "--verbose", action="store_true", help="print every op")
    args = ap.parse_args()
    if not args.strict:
        args.exclude = sorted(set(args.exclude) | set(DEFAULT_EXCLUDE))
    if args.cluster:
        if args.target != "quorum":
            ap.error("--cluster runs quorum as three members")
        args.target = "quorum-cluster"

    t0 = time.time()
    total = 0
    ndiffs = 0
    runs = [(seed, None, "") for seed in range(args.seed, args.seed + args.seeds)]
    if not args.no_directed:
        runs[:0] = [(0, ops, " (directed group %s)" % g)
                    for g, ops in directed_requests(args.exclude)]
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
    print("differential: %d ops, %d differences (%s%d seeds from %d, target %s, %.1fs; %s)"
          % (total, ndiffs, "" if args.no_directed else "directed cases + ", args.seeds,
             args.seed, args.target, time.time() - t0,
             ", ".join("%d %s" % (v, k) for k, v in STATS.items())))
    return 1 if ndiffs else 0


if __name__ == "__main__":
    sys.exit(main())
