"""Many connections at once over every front loop: writes, serializable and
linearizable reads, compare-and-swap txns, watches, leases, compaction and
defragmentation, for a few seconds; then every outcome is checked and the
member must stop cleanly. tests/run runs it with the ThreadSanitizer build
of quorum too (a data race makes the member exit 66, and stop() fails).

    /usr/bin/python3 tests/integration/stress_threads.py [--seconds N] [--fronts N] [--tls]

--tls serves the client port over TLS with client-certificate auth (the
certificates from docs/security.md's recipe) and sends the member SIGHUP
(certificate reload) every half second meanwhile.

What must hold:
  - every acknowledged put is what a later read of that key returns (its
    writer reads it back, serializable, on the same member, at once);
  - a CAS counter ends equal to the number of successful CAS txns;
  - a watcher from the start sees every put on its prefix, in revision
    order, none missing (compactions only drop history behind it);
  - a revoked lease's keys are gone, a kept-alive one's are there;
  - no request fails except as etcd would (none here);
  - SIGTERM stops the member with exit status 0.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

# a connection of its own per channel (grpcio shares subchannels otherwise)
OPTS = [("grpc.use_local_subchannel_pool", 1)]


CREDS = None  # --tls: grpc.ssl_channel_credentials


def channel(srv):
    if CREDS is not None:
        return grpc.secure_channel(srv.endpoint, CREDS, options=OPTS)
    return grpc.insecure_channel(srv.endpoint, options=OPTS)


class Failures:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, what):
        with self.lock:
            if len(self.items) < 20:
                self.items.append(what)


def writer(srv, idx, stop, fails, stats):
    kv = rpc_pb2_grpc.KVStub(channel(srv))
    n = 0
    while not stop.is_set():
        key = b"stress/w%d/k%d" % (idx, n % 10)
        val = b"%d" % n
        try:
            kv.Put(rpc_pb2.PutRequest(key=key, value=val), timeout=10)
            r = kv.Range(rpc_pb2.RangeRequest(key=key, serializable=True), timeout=10)
            if not r.kvs or r.kvs[0].value != val:
                fails.add("writer %d: read %r back as %r" % (idx, val, r.kvs[0].value if r.kvs else None))
            if n % 7 == 0:
                r = kv.Range(rpc_pb2.RangeRequest(key=key), timeout=10)  # linearizable
                if not r.kvs or r.kvs[0].value != val:
                    fails.add("writer %d: linearizable read of %r gave %r" % (idx, val, r.kvs))
        except grpc.RpcError as e:
            fails.add("writer %d: %s %s" % (idx, e.code(), e.details()))
            return
        n += 1
    stats["puts"] = stats.get("puts", 0) + n


def reader(srv, idx, stop, fails, stats):
    kv = rpc_pb2_grpc.KVStub(channel(srv))
    n = 0
    last = 0
    while not stop.is_set():
        try:
            r = kv.Range(rpc_pb2.RangeRequest(key=b"stress/", range_end=b"stress0",
                                              serializable=True, count_only=n % 2 == 0),
                         timeout=10)
            if r.header.revision < last:
                fails.add("reader %d: revision went back %d -> %d" % (idx, last, r.header.revision))
            last = r.header.revision
            t = kv.Txn(rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(
                key=b"stress/cas", serializable=True))]), timeout=10)
            if not t.succeeded:
                fails.add("reader %d: empty txn did not succeed" % idx)
        except grpc.RpcError as e:
            fails.add("reader %d: %s %s" % (idx, e.code(), e.details()))
            return
        n += 1
    stats["reads"] = stats.get("reads", 0) + n


def casser(srv, idx, stop, fails, stats, lock):
    kv = rpc_pb2_grpc.KVStub(channel(srv))
    wins = 0
    while not stop.is_set():
        try:
            r = kv.Range(rpc_pb2.RangeRequest(key=b"stress/cas"), timeout=10)
            cur = int(r.kvs[0].value) if r.kvs else 0
            mod = r.kvs[0].mod_revision if r.kvs else 0
            t = kv.Txn(rpc_pb2.TxnRequest(
                compare=[rpc_pb2.Compare(key=b"stress/cas", target=rpc_pb2.Compare.MOD,
                                         result=rpc_pb2.Compare.EQUAL, mod_revision=mod)],
                success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
                    key=b"stress/cas", value=b"%d" % (cur + 1)))]), timeout=10)
            if t.succeeded:
                wins += 1
        except grpc.RpcError as e:
            fails.add("cas %d: %s %s" % (idx, e.code(), e.details()))
            return
    with lock:
        stats["cas"] = stats.get("cas", 0) + wins


def leaser(srv, stop, fails, stats):
    ch = channel(srv)
    lease = rpc_pb2_grpc.LeaseStub(ch)
    kv = rpc_pb2_grpc.KVStub(ch)
    n = 0
    try:
        kept = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=30), timeout=10).ID
        kv.Put(rpc_pb2.PutRequest(key=b"stress/lease/kept", value=b"x", lease=kept), timeout=10)
        while not stop.is_set():
            g = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=30), timeout=10)
            key = b"stress/lease/%d" % n
            kv.Put(rpc_pb2.PutRequest(key=key, value=b"x", lease=g.ID), timeout=10)
            for resp in lease.LeaseKeepAlive(iter([rpc_pb2.LeaseKeepAliveRequest(ID=kept)]),
                                             timeout=10):
                if resp.TTL <= 0:
                    fails.add("keepalive of a live lease answered TTL %d" % resp.TTL)
                break
            lease.LeaseRevoke(rpc_pb2.LeaseRevokeRequest(ID=g.ID), timeout=10)
            r = kv.Range(rpc_pb2.RangeRequest(key=key, serializable=True), timeout=10)
            if r.kvs:
                fails.add("key %r of a revoked lease still there" % key)
            n += 1
        r = kv.Range(rpc_pb2.RangeRequest(key=b"stress/lease/kept"), timeout=10)
        if not r.kvs:
            fails.add("the kept-alive lease's key is gone")
    except grpc.RpcError as e:
        fails.add("leaser: %s %s" % (e.code(), e.details()))
    stats["leases"] = n


def maintainer(srv, stop, fails, stats):
    ch = channel(srv)
    kv = rpc_pb2_grpc.KVStub(ch)
    mt = rpc_pb2_grpc.MaintenanceStub(ch)
    n = d = 0
    while not stop.wait(1.0):
        try:
            rev = kv.Range(rpc_pb2.RangeRequest(key=b"x", serializable=True), timeout=10).header.revision
            if rev > 200:
                kv.Compact(rpc_pb2.CompactionRequest(revision=rev - 100, physical=n % 2 == 0),
                           timeout=30)
                n += 1
            if n % 3 == 1:
                mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=60)
                d += 1
        except grpc.RpcError as e:
            fails.add("maintainer: %s %s" % (e.code(), e.details()))
            return
    stats["compactions"] = n
    stats["defrags"] = d


def watcher(srv, idx, ready, stop, fails, result):
    """Watches writer |idx|'s prefix from the start; records every put."""
    w = rpc_pb2_grpc.WatchStub(channel(srv))
    prefix = b"stress/w%d/" % idx
    reqs = [rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
        key=prefix, range_end=prefix[:-1] + b"0"))]
    events = []
    last = 0

    def gen():
        yield reqs[0]
        stop.wait()

    call = w.Watch(gen(), timeout=600)

    def cancel_later():
        stop.wait()
        time.sleep(2.0)  # the last events drain first
        call.cancel()  # a watch stream stays open until the client cancels (as etcd's)

    threading.Thread(target=cancel_later, daemon=True).start()
    try:
        for resp in call:
            if resp.created:
                ready.set()
            for ev in resp.events:
                if ev.kv.mod_revision <= last:
                    fails.add("watch %d: revision %d after %d" % (idx, ev.kv.mod_revision, last))
                last = ev.kv.mod_revision
                events.append(ev)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED or not stop.is_set():
            fails.add("watch %d: %s %s" % (idx, e.code(), e.details()))
    result[idx] = events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--fronts", default="auto")
    ap.add_argument("--tls", action="store_true")
    a = ap.parse_args()
    tls = None
    if a.tls:
        global CREDS
        import tempfile
        import test_tls
        d = tempfile.mkdtemp(prefix="stress-tls-")
        import atexit
        import shutil
        atexit.register(shutil.rmtree, d, True)
        test_tls.run_recipe(d)
        tls = test_tls.tls_of(d, peer=False)
        rd = lambda f: open(f, "rb").read()  # noqa: E731
        CREDS = grpc.ssl_channel_credentials(rd(tls.ca), rd(tls.client_key), rd(tls.client_cert))
    srv = Server("quorum", extra_args=["--front-loops", a.fronts], tls=tls).start(timeout=60)
    fails = Failures()
    stats = {}
    lock = threading.Lock()
    stop = threading.Event()
    nwriters = 4
    wres = {}
    readies = [threading.Event() for _ in range(nwriters)]
    wthreads = [threading.Thread(target=watcher, args=(srv, i, readies[i], stop, fails, wres))
                for i in range(nwriters)]
    for t in wthreads:
        t.start()
    for r in readies:
        if not r.wait(20):
            print("stress: a watch was not created")
            srv.cleanup()
            return 1
    wstats = [dict() for _ in range(nwriters)]
    threads = [threading.Thread(target=writer, args=(srv, i, stop, fails, wstats[i]))
               for i in range(nwriters)]
    threads += [threading.Thread(target=reader, args=(srv, i, stop, fails, stats))
                for i in range(3)]
    threads += [threading.Thread(target=casser, args=(srv, i, stop, fails, stats, lock))
                for i in range(3)]
    threads += [threading.Thread(target=leaser, args=(srv, stop, fails, stats)),
                threading.Thread(target=maintainer, args=(srv, stop, fails, stats))]
    for t in threads:
        t.start()
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        time.sleep(0.5)
        if a.tls:  # reloads while connections are accepted on every loop
            os.kill(srv.proc.pid, signal.SIGHUP)
            # and new connections meanwhile
            kv = rpc_pb2_grpc.KVStub(channel(srv))
            try:
                kv.Range(rpc_pb2.RangeRequest(key=b"stress/new-conn"), timeout=10)
            except grpc.RpcError as e:
                fails.add("a new TLS connection: %s %s" % (e.code(), e.details()))
    stop.set()
    for t in threads:
        t.join(120)
    for t in wthreads:
        t.join(120)

    kv = rpc_pb2_grpc.KVStub(channel(srv))
    r = kv.Range(rpc_pb2.RangeRequest(key=b"stress/cas"), timeout=10)
    counter = int(r.kvs[0].value) if r.kvs else 0
    if counter != stats.get("cas", 0):
        fails.add("CAS counter %d after %d successful CAS txns" % (counter, stats.get("cas", 0)))
    for i in range(nwriters):
        puts = wstats[i].get("puts", 0)
        got = len(wres.get(i, []))
        if got != puts:
            fails.add("watch %d saw %d puts of %d acknowledged" % (i, got, puts))
    stats["puts"] = sum(w.get("puts", 0) for w in wstats)
    try:
        srv.stop()
    except RuntimeError as e:
        fails.add(str(e))
    log = open(srv.log_path, errors="replace").read()
    races = log.count("WARNING: ThreadSanitizer")
    if races:
        fails.add("%d ThreadSanitizer reports in %s" % (races, srv.log_path))
    print("stress: %s" % ", ".join("%s %d" % kv_ for kv_ in sorted(stats.items())))
    if fails.items or stats.get("puts", 0) == 0 or stats.get("reads", 0) == 0:
        for f in fails.items:
            print("stress: FAIL %s" % f)
        if races:
            i = log.find("WARNING: ThreadSanitizer")
            print(log[i:i + 6000])
        print("stress: server log %s" % srv.log_path)
        return 1
    srv.cleanup()
    print("stress: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
