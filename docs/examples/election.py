#!/usr/bin/env python3
"""Leader election through quorum's Election RPC: campaign, observe the
leader, proclaim a new value, resign, and a second candidate takes over.

Run:  QUORUM_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 docs/examples/election.py

It can be run again at once: on the way out it revokes both candidates'
leases, which removes their keys, so the next run's campaign finds the
election empty. (A run killed with SIGKILL cannot clean up: its candidate
stays leader until its 15 s lease expires, as any crashed leader does, and
the next run's campaign waits for that.)
"""
import os
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import pb34

M = pb34.msg
ep = os.environ.get("QUORUM_ENDPOINT", "127.0.0.1:2379")
ch = grpc.insecure_channel(ep)


def unary(path, resp):
    return ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=M(resp).FromString)


def call(name, resp, stream=False):
    make = ch.unary_stream if stream else ch.unary_unary
    return make("/v3electionpb.Election/" + name, request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=M("v3electionpb." + resp).FromString)


grant = unary("/etcdserverpb.Lease/LeaseGrant", "etcdserverpb.LeaseGrantResponse")
revoke = unary("/etcdserverpb.Lease/LeaseRevoke", "etcdserverpb.LeaseRevokeResponse")
campaign, proclaim = call("Campaign", "CampaignResponse"), call("Proclaim", "ProclaimResponse")
resign, observe = call("Resign", "ResignResponse"), call("Observe", "LeaderResponse", stream=True)

leases = []


def candidate_lease():
    lease = grant(M("etcdserverpb.LeaseGrantRequest")(TTL=15)).ID
    leases.append(lease)
    return lease


seen = []
watch = observe(M("v3electionpb.LeaderRequest")(name=b"scheduler"))


def observer():
    try:
        for r in watch:
            seen.append(r.kv.value)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:   # we cancel it at the end
            raise


threading.Thread(target=observer, daemon=True).start()
try:
    l1 = candidate_lease()
    me = campaign(M("v3electionpb.CampaignRequest")(name=b"scheduler", lease=l1, value=b"node-a"))
    print("elected:", me.leader.key.decode(), "rev", me.leader.rev)

    l2 = candidate_lease()
    other = []
    t = threading.Thread(target=lambda: other.append(campaign(
        M("v3electionpb.CampaignRequest")(name=b"scheduler", lease=l2, value=b"node-b"))))
    t.start()
    proclaim(M("v3electionpb.ProclaimRequest")(leader=me.leader, value=b"node-a (busy)"))
    time.sleep(0.3)
    assert not other, "node-b cannot win while node-a leads"
    resign(M("v3electionpb.ResignRequest")(leader=me.leader))
    t.join(10)
    print("node-b elected after node-a resigned:", other[0].leader.key.decode())
    deadline = time.time() + 5
    while seen[-1:] != [b"node-b"] and time.time() < deadline:
        time.sleep(0.05)
    print("observer saw:", [v.decode() for v in seen])
    assert seen == [b"node-a", b"node-a (busy)", b"node-b"]
finally:
    watch.cancel()
    # a candidate that leaves revokes its lease: its key goes, and whoever
    # campaigns next (this example run again, say) is not kept waiting
    for lease in leases:
        revoke(M("etcdserverpb.LeaseRevokeRequest")(ID=lease))
print("ok")
