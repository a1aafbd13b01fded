#!/usr/bin/env python3
"""A leased lock with a fencing token, through quorum's Lock RPC.

Run:  QUORUM_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 docs/examples/lock_fencing.py

1. grant a lease and keep it alive; 2. Lock("jobs") with it; 3. the lock
key's create_revision is the fencing token; 4. every protected write is a
Txn that only succeeds while that exact key still exists. A holder that
stalls past its lease loses the key, so its late write fails instead of
clobbering the next holder's work.
"""
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import pb34  # etcd 3.4 message classes from quorum's proto/ (python3-etcd3 lacks v3lock)

M = pb34.msg
ep = os.environ.get("QUORUM_ENDPOINT", "127.0.0.1:2379")
ch = grpc.insecure_channel(ep)


def unary(path, resp):
    return ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=M(resp).FromString)


grant = unary("/etcdserverpb.Lease/LeaseGrant", "etcdserverpb.LeaseGrantResponse")
lock = unary("/v3lockpb.Lock/Lock", "v3lockpb.LockResponse")
unlock = unary("/v3lockpb.Lock/Unlock", "v3lockpb.UnlockResponse")
get = unary("/etcdserverpb.KV/Range", "etcdserverpb.RangeResponse")
txn = unary("/etcdserverpb.KV/Txn", "etcdserverpb.TxnResponse")
revoke = unary("/etcdserverpb.Lease/LeaseRevoke", "etcdserverpb.LeaseRevokeResponse")
Cmp = M("etcdserverpb.Compare")


def fenced_put(lock_key, token, key, value):
    """Write |key| only while we still hold the lock with this token."""
    r = txn(M("etcdserverpb.TxnRequest")(
        compare=[Cmp(key=lock_key, target=Cmp.CREATE, result=Cmp.EQUAL, create_revision=token)],
        success=[M("etcdserverpb.RequestOp")(request_put={"key": key, "value": value})]))
    return r.succeeded


lease = grant(M("etcdserverpb.LeaseGrantRequest")(TTL=10)).ID
held = lock(M("v3lockpb.LockRequest")(name=b"jobs", lease=lease))
token = get(M("etcdserverpb.RangeRequest")(key=held.key)).kvs[0].create_revision
print("holding", held.key.decode(), "fencing token", token)
assert fenced_put(held.key, token, b"/jobs/result", b"written under the lock")

# Simulate losing the lock (lease expired while we were paused):
revoke(M("etcdserverpb.LeaseRevokeRequest")(ID=lease))
ok = fenced_put(held.key, token, b"/jobs/result", b"late write from a stale holder")
print("stale write accepted?", ok)
assert not ok, "a stale holder must not be able to write"

# The next holder gets a larger token.
lease2 = grant(M("etcdserverpb.LeaseGrantRequest")(TTL=10)).ID
held2 = lock(M("v3lockpb.LockRequest")(name=b"jobs", lease=lease2))
token2 = get(M("etcdserverpb.RangeRequest")(key=held2.key)).kvs[0].create_revision
print("next holder's token", token2)
assert token2 > token
unlock(M("v3lockpb.UnlockRequest")(key=held2.key))
print("ok")
