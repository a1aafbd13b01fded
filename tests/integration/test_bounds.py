#!/usr/bin/python3
"""Bounded resources under abuse (docs/faults.md).

1. A watcher that never reads (a hand-driven HTTP/2 client that sends no
   WINDOW_UPDATE and reads nothing) while N puts of 1 KiB go to its prefix:
   the member's anonymous RSS grows by less than RSS_BOUND_MIB (N KiB of
   events would be queued without a bound; the bound is the stream's share
   of --max-watch-buffer-bytes, here 4 MiB, plus the allocator's slack).
   Meanwhile a well-behaved watcher on the same prefix gets every event in
   order and the puts go on. When the slow watcher starts reading, it
   catches up from history: every event, in order, none twice (etcd's slow
   "victim" watchers do the same; a watcher that falls behind a compaction
   is canceled with its compact_revision, as etcd's).
2. Connections, on a member with --max-client-connections=8,
   --client-handshake-timeout=2s, --client-idle-timeout=2s: past the limit
   a new connection is closed unread; silent connections (no preface) are
   closed after the handshake timeout, which frees the places; an HTTP/2
   connection without streams gets GOAWAY and is closed when idle; a normal
   client is served again throughout once there is room.
3. A member out of file descriptors (RLIMIT_NOFILE 64, 120 connections)
   refuses the connections it cannot hold, warns once, and serves a normal
   client again once they are gone.
The full-size case (200,000 x 1 KiB) is bench/overload/overload-probe.py.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import h2raw  # noqa: E402
import harness  # noqa: E402

N = int(os.environ.get("BOUNDS_PUTS", "40000"))
RSS_BOUND_MIB = 20  # N=40000 unbounded would queue ~45 MiB of events


def put_many(endpoint, prefix, n, per_txn=100):
    ch = grpc.insecure_channel(endpoint)
    kv = rpc_pb2_grpc.KVStub(ch)
    val = b"v" * 1024
    last = 0
    for base in range(0, n, per_txn):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
            key=("%s%07d" % (prefix, i)).encode(), value=val))
            for i in range(base, min(n, base + per_txn))]
        r = kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=30)
        last = r.header.revision
    ch.close()
    return last


def watch_req(prefix, start_rev=0):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
        key=prefix.encode(), range_end=end.encode(), start_revision=start_rev))


def decode_watch(b):
    r = rpc_pb2.WatchResponse()
    r.ParseFromString(b)
    return r


class GoodWatcher:
    """A python-grpc watcher that reads everything: the revisions it saw."""

    def __init__(self, endpoint, prefix):
        self.revs = []
        self.canceled = None
        self.done = threading.Event()
        self.last_wanted = None
        self.ch = grpc.insecure_channel(endpoint)
        stub = rpc_pb2_grpc.WatchStub(self.ch)
        self.q = [watch_req(prefix)]
        self.stop = threading.Event()
        self.stream = stub.Watch(self._reqs())
        self.created = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        assert self.created.wait(10), "the good watcher was not created"

    def _reqs(self):
        for r in self.q:
            yield r
        self.stop.wait()

    def _run(self):
        try:
            for r in self.stream:
                if r.created:
                    self.created.set()
                if r.canceled:
                    self.canceled = r.cancel_reason
                    break
                for ev in r.events:
                    self.revs.append((ev.kv.mod_revision, ev.kv.key))
                if self.last_wanted and self.revs and self.revs[-1][0] >= self.last_wanted:
                    self.done.set()
        except grpc.RpcError:
            pass
        self.done.set()

    def close(self):
        self.stop.set()
        self.stream.cancel()
        self.ch.close()


def check_order(evs, first, last, who):
    """evs: (mod_revision, key) in the order received; a Txn's puts share
    a revision and come in the Txn's order (the keys ascend here)."""
    assert evs, "%s saw no event" % who
    assert evs == sorted(set(evs)), "%s: events out of order or twice" % who
    assert evs[0][0] == first and evs[-1][0] == last, "%s: events %d..%d, want %d..%d" % (
        who, evs[0][0], evs[-1][0], first, last)


def watch_load(with_slow):
    """One member, a good watcher, N puts of 1 KiB to its prefix, and (with
    |with_slow|) a watcher on the same prefix that reads nothing. Returns
    the growth of anonymous RSS (MiB, peak over the run)."""
    with harness.Server("quorum", extra_args=["--max-watch-buffer-bytes", str(64 << 20)]) as s:
        pid = s.proc.pid
        host, port = s.endpoint.split(":")
        if with_slow:
            slow = h2raw.Conn(host, int(port))
            slow.handshake()
            sid = slow.open_stream("/etcdserverpb.Watch/Watch", watch_req("/slow/"))
        good = GoodWatcher(s.endpoint, "/slow/")
        first = put_many(s.endpoint, "/warm/", 100) + 1
        time.sleep(0.3)
        base = h2raw.rss_anon_kib(pid)
        peak = base
        stop = threading.Event()

        def sample():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, h2raw.rss_anon_kib(pid))
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        last = put_many(s.endpoint, "/slow/", N)
        good.last_wanted = last
        if good.revs and good.revs[-1][0] >= last:
            good.done.set()
        assert good.done.wait(60), "the good watcher fell behind: %d events" % len(good.revs)
        stop.set()
        sampler.join()
        peak = max(peak, h2raw.rss_anon_kib(pid))
        # the good watcher saw all N, in order, as the puts went on
        assert len(good.revs) == N, "good watcher: %d events, want %d" % (len(good.revs), N)
        check_order(good.revs, first, last, "the good watcher")
        good.close()
        if not with_slow:
            return (peak - base) / 1024.0
        # a normal request is served at once meanwhile
        s.etcdctl("put", "/other", "x")
        # now the slow watcher reads: it catches up, every event once, in order
        revs = []
        for r in slow.messages(sid, decode_watch,
                               lambda m: bool(m.events) and m.events[-1].kv.mod_revision >= last,
                               timeout=120):
            assert not r.canceled, "slow watcher canceled: %s" % r.cancel_reason
            revs.extend((ev.kv.mod_revision, ev.kv.key) for ev in r.events)
        assert len(revs) == N, "slow watcher caught up %d of %d events" % (len(revs), N)
        check_order(revs, first, last, "the slow watcher")
        slow.close()
        return (peak - base) / 1024.0


def slow_watcher_case():
    """The same load without and with a watcher that never reads: what the
    never-reader costs is the difference (the store's own growth, its index
    and the in-memory log, is in both)."""
    t0 = time.monotonic()
    control = watch_load(False)
    abuse = watch_load(True)
    extra = abuse - control
    assert extra < RSS_BOUND_MIB, (
        "a watcher that never reads cost %.1f MiB of anonymous RSS over %d puts of 1 KiB "
        "(bound %d MiB; %.1f without it, %.1f with it)" % (extra, N, RSS_BOUND_MIB, control,
                                                           abuse))
    print("ok   slow watcher: %d puts of 1 KiB, anon RSS +%.1f MiB without it, +%.1f with it "
          "(bound +%d), caught up; %.1fs" % (N, control, abuse, RSS_BOUND_MIB,
                                             time.monotonic() - t0))


def connections_case():
    t0 = time.monotonic()
    limit = 8
    with harness.Server("quorum", extra_args=[
            "--max-client-connections", str(limit), "--client-handshake-timeout", "2s",
            "--client-idle-timeout", "2s", "--front-loops", "2"]) as s:
        host, port = s.endpoint.split(":")
        port = int(port)
        # fill every place with silent connections (no preface)
        silent = [h2raw.Conn(host, port) for _ in range(limit)]
        time.sleep(0.3)
        # past the limit: closed at once, unread
        extra = h2raw.Conn(host, port)
        extra.handshake()
        assert extra.wait_eof(5) is not None, "a connection past the limit was served"
        extra.close()
        assert "refusing client connections: %d open" % limit in s.log_tail(), s.log_tail()
        # the silent ones go after the handshake timeout...
        for c in silent:
            assert c.wait_eof(10) is not None, "a silent connection outlived the handshake timeout"
            c.close()
        # ...and a normal client is served again
        harness.wait_for(lambda: s.etcdctl("put", "k", "v", check=False, timeout=5).returncode
                         == 0, timeout=10, what="a put once the places are free")
        # an HTTP/2 connection that opens no stream is closed idle, with GOAWAY
        idle = h2raw.Conn(host, port)
        idle.handshake()
        seen = idle.wait_eof(10)
        assert seen is not None, "an idle connection was never closed"
        assert h2raw.GOAWAY in seen, "no GOAWAY before the idle close: frames %s" % seen
        idle.close()
        # a connection with an open stream (a watch) is not idle
        w = h2raw.Conn(host, port)
        w.handshake()
        sid = w.open_stream("/etcdserverpb.Watch/Watch", watch_req("/w/"))
        time.sleep(3.5)
        s.etcdctl("put", "/w/1", "x")
        got = []
        for r in w.messages(sid, decode_watch, lambda m: bool(m.events), timeout=10):
            got.extend(r.events)
        assert got, "the watch connection was closed as idle"
        w.close()
        print("ok   connections: limit %d, handshake and idle timeouts; %.1fs"
              % (limit, time.monotonic() - t0))


class LimitedServer(harness.Server):
    """A quorum member whose descriptor limit is |nofile|."""

    def __new__(cls, *a, **kw):
        return object.__new__(cls)

    def __init__(self, nofile, *a, **kw):
        super().__init__("quorum", *a, **kw)
        self.nofile = nofile

    def start(self, timeout=20.0):
        import resource
        import subprocess
        env = dict(os.environ)
        env.pop("ETCDCTL_API", None)
        self.log_file = open(self.log_path, "ab")
        n = self.nofile
        self.proc = subprocess.Popen(
            self.args(), stdout=self.log_file, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)))
        self.wait_ready(timeout)
        return self


def fd_exhaustion_case():
    """More connections than the member has descriptors for: each one past
    the limit is taken and closed (refused) instead of left in the backlog
    with the listener readable, which made the loop spin and log every
    wake; the warning comes once per 10 s, and once the clients go a normal
    one is served."""
    t0 = time.monotonic()
    with LimitedServer(64) as s:
        host, port = s.endpoint.split(":")
        conns = []
        for _ in range(120):
            try:
                conns.append(h2raw.Conn(host, int(port), timeout=5))
            except OSError:
                pass
        last = conns[-40:]
        harness.wait_for(lambda: any(c.wait_eof(0.2) is not None for c in last), timeout=30,
                         what="a connection past the descriptor limit refused")
        closed = sum(1 for c in last if c.wait_eof(0.2) is not None)
        for c in conns:
            c.close()
        assert s.proc.poll() is None, s.log_tail()
        harness.wait_for(lambda: s.etcdctl("put", "k", "v", check=False, timeout=5).returncode
                         == 0, timeout=20, what="a put once the connections are gone")
        log = s.log_tail(200000)
        n = log.count("out of file descriptors: refusing client connections")
        assert 1 <= n <= 2, "%d warnings about descriptors:\n%s" % (n, log[-2000:])
        print("ok   descriptors: 120 connections to a member with 64 descriptors, %d of the last "
              "40 refused, %d warning(s); %.1fs" % (closed, n, time.monotonic() - t0))


def main():
    t0 = time.monotonic()
    slow_watcher_case()
    connections_case()
    fd_exhaustion_case()
    print("test_bounds: ok (%.1fs)" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
