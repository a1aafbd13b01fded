#!/usr/bin/python3
"""overload-probe: each abuse against quorum and etcd 3.4, side by side.

Per target (a fresh single member each, real TCP on 127.0.0.1, a temp data
dir), the cases run one after another on the same member:

  watch-never-reads  a watcher (hand-driven HTTP/2, no WINDOW_UPDATE, reads
                     nothing) on a prefix while PUTS puts of 1 KiB go there
                     (single Puts, 64 in flight)
  idle-conns         IDLE connections that finish the HTTP/2 preface and
                     SETTINGS, then stay silent
  half-open-h2       HALF connections that send half of the preface and stop
  huge-range         RANGE_KEYS keys of 1 KiB written, then one unlimited
                     Range over all of them (the reply is RANGE_KEYS KiB)
  lease-storm        LEASES leases granted (TTL 5 s + 1 s per 4,000), each
                     with a key, left to expire together

Meanwhile a well-behaved client puts and reads back one key every 10 ms; per
case the probe prints whether the member stayed up, the peak RSS sampled
during the case, the longest single request (put or get) that client saw (and its p99),
and whether every write acknowledged before and during the case is still
there afterwards. RSS is VmRSS (the store's mapped file pages count: both
LMDB and bbolt are mmap'd) and, in brackets, RssAnon (the heap). The cases
share one member, so the store grows from case to case.

    overload-probe.py [--targets quorum,etcd] [--full] [--puts N] ...
                      [--quorum-flags "--max-range-response-bytes=N ..."]
                      [--cases huge-range --range-keys N --good-conns 3 --good-process]

--full uses the issue's sizes (200,000 puts, 10,000 idle connections, 2,000
half-open, 1,000,000 keys, 100,000 leases); the default is reduced to run
in a couple of minutes. The quorum binary is $QUORUM_BIN or build/'s.
"""
import argparse
import multiprocessing
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import h2raw  # noqa: E402
import harness  # noqa: E402


def rss_kib(pid, field="VmRSS:"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Good:
    """The well-behaved client: put then get of its own key every 10 ms,
    over |conns| connections in turn (one each by default: quorum's front
    loops take connections in turn, so with as many connections as loops a
    stall of any loop shows)."""

    def __init__(self, endpoint, conns=1):
        # a pool of its own per channel: one TCP connection each
        self.chs = [grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(max(1, conns))]
        self.kvs = [rpc_pb2_grpc.KVStub(c) for c in self.chs]
        self.acks = {}
        self.worst = 0.0
        self.lat = []
        self.failures = 0
        self.stop = threading.Event()
        self.i = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            key = ("/probe/good/%08d" % self.i).encode()
            val = ("v%d" % self.i).encode()
            self.i += 1
            kv = self.kvs[self.i % len(self.kvs)]
            for op in ("put", "get"):
                t0 = time.monotonic()
                try:
                    if op == "put":
                        kv.Put(rpc_pb2.PutRequest(key=key, value=val), timeout=30)
                        self.acks[key] = val
                    else:
                        kv.Range(rpc_pb2.RangeRequest(key=key), timeout=30)
                except grpc.RpcError:
                    self.failures += 1
                took = time.monotonic() - t0
                self.worst = max(self.worst, took)
                self.lat.append(took)
            time.sleep(0.01)

    def reset(self):
        self.worst = 0.0
        self.lat = []
        self.failures = 0

    def p99(self):
        lat = sorted(self.lat)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0

    def report(self):
        pass  # the figures are this object's own

    def close(self):
        self.stop.set()
        self.t.join(timeout=40)
        for c in self.chs:
            c.close()


def _good_main(endpoint, conns, pipe):
    g = Good(endpoint, conns)
    while True:
        cmd = pipe.recv()
        if cmd == "reset":
            g.reset()
            pipe.send(None)
        elif cmd == "report":
            pipe.send((g.worst, g.p99(), g.failures, dict(g.acks)))
        else:
            g.close()
            pipe.send(None)
            return


class GoodProcess:
    """Good in a process of its own (--good-process): the probe's own
    process decodes the huge Range's reply while holding Python's GIL, which
    a client thread beside it would count as the member's stall."""

    def __init__(self, endpoint, conns=1):
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(target=_good_main, args=(endpoint, conns, child), daemon=True)
        self.proc.start()
        self.worst, self._p99, self.failures, self.acks = 0.0, 0.0, 0, {}

    def reset(self):
        self.pipe.send("reset")
        self.pipe.recv()

    def report(self):
        self.pipe.send("report")
        self.worst, self._p99, self.failures, self.acks = self.pipe.recv()

    def p99(self):
        return self._p99

    def close(self):
        self.pipe.send("close")
        self.pipe.recv()
        self.proc.join(timeout=40)


def put_many(kv, prefix, n, size=1024, per_txn=100):
    val = b"v" * size
    for base in range(0, n, per_txn):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
            key=("%s%08d" % (prefix, i)).encode(), value=val))
            for i in range(base, min(n, base + per_txn))]
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)


def put_singly(kv, prefix, n, size=1024, inflight=64):
    """|n| Puts of their own (one log entry each), |inflight| at a time."""
    val = b"v" * size
    futs = []
    for i in range(n):
        futs.append(kv.Put.future(rpc_pb2.PutRequest(key=("%s%08d" % (prefix, i)).encode(),
                                                     value=val), timeout=60))
        if len(futs) >= inflight:
            futs.pop(0).result()
    for f in futs:
        f.result()


def watch_req(prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
        key=prefix.encode(), range_end=end.encode()))


def case_watch(s, kv, a):
    host, port = s.endpoint.split(":")
    c = h2raw.Conn(host, int(port))
    c.handshake()
    c.open_stream("/etcdserverpb.Watch/Watch", watch_req("/probe/w/"))
    put_singly(kv, "/probe/w/", a.puts)
    time.sleep(1)
    c.close()
    return "%d puts" % a.puts


def case_idle(s, kv, a, half=False):
    host, port = s.endpoint.split(":")
    conns = []
    failed = 0
    for i in range(a.half if half else a.idle):
        try:
            c = h2raw.Conn(host, int(port), timeout=5)
            if half:
                c.send(h2raw.PREFACE[:12])
            else:
                c.handshake()
            conns.append(c)
        except OSError:
            failed += 1
    time.sleep(2)
    # how many the member still holds open
    alive = 0
    for c in conns:
        c.sock.setblocking(False)
        try:
            b = c.sock.recv(1 << 16)
            alive += 1 if b else 0
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    for c in conns:
        c.close()
    return "%d opened, %d refused, %d open after 2 s" % (len(conns), failed, alive)


def case_range(s, kv, a):
    put_many(kv, "/probe/r/", a.range_keys)
    # a client that takes any size (etcdctl's default is 2 GiB too)
    ch = grpc.insecure_channel(s.endpoint, options=[("grpc.max_receive_message_length", -1)])
    big = rpc_pb2_grpc.KVStub(ch)
    t0 = time.monotonic()
    try:
        r = big.Range(rpc_pb2.RangeRequest(key=b"/probe/r/", range_end=b"/probe/r0"),
                      timeout=120)
        got = "%d keys in %.1fs" % (len(r.kvs), time.monotonic() - t0)
    except grpc.RpcError as e:
        got = "refused: %s %s" % (e.code().name, (e.details() or "")[:60])
    ch.close()
    return "%d x 1 KiB; %s" % (a.range_keys, got)


def case_leases(s, kv, a):
    ch = grpc.insecure_channel(s.endpoint)
    lease = rpc_pb2_grpc.LeaseStub(ch)
    ids = []
    futs = []
    # long enough to grant them all and attach their keys first
    ttl = 5 + a.leases // 4000
    for i in range(a.leases):
        futs.append(lease.LeaseGrant.future(rpc_pb2.LeaseGrantRequest(TTL=ttl), timeout=60))
        if len(futs) >= 200:
            ids += [f.result().ID for f in futs]
            futs = []
    ids += [f.result().ID for f in futs]
    for base in range(0, len(ids), 100):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
            key=("/probe/l/%08d" % (base + j)).encode(), value=b"x", lease=lid))
            for j, lid in enumerate(ids[base:base + 100])]
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
    # wait for them to go: both revoke at most 1,000 a second (etcd's
    # leaseRevokeRate), so 100,000 take 100 s past their TTL
    deadline = time.monotonic() + ttl + a.leases / 1000 + 30
    left = -1
    while time.monotonic() < deadline:
        r = kv.Range(rpc_pb2.RangeRequest(key=b"/probe/l/", range_end=b"/probe/l0",
                                          count_only=True), timeout=30)
        left = r.count
        if left == 0:
            break
        time.sleep(0.5)
    ch.close()
    return "%d leases of TTL %d s; %d keys left after expiry" % (len(ids), ttl, left)


CASES = [
    ("watch-never-reads", case_watch),
    ("idle-conns", lambda s, kv, a: case_idle(s, kv, a)),
    ("half-open-h2", lambda s, kv, a: case_idle(s, kv, a, half=True)),
    ("huge-range", case_range),
    ("lease-storm", case_leases),
]


def run_target(kind, a):
    rows = []
    flags = a.quorum_flags.split() if kind == "quorum" and a.quorum_flags else []
    with harness.Server(kind, extra_args=flags) as s:
        pid = s.proc.pid
        ch = grpc.insecure_channel(s.endpoint)
        kv = rpc_pb2_grpc.KVStub(ch)
        # earlier writes that must survive everything
        put_many(kv, "/probe/base/", 1000, size=100)
        good = (GoodProcess if a.good_process else Good)(s.endpoint, a.good_conns)
        for name, fn in CASES:
            if a.cases and name not in a.cases.split(","):
                continue
            good.reset()
            peak = [rss_kib(pid), rss_kib(pid, "RssAnon:")]
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    peak[0] = max(peak[0], rss_kib(pid))
                    peak[1] = max(peak[1], rss_kib(pid, "RssAnon:"))
                    time.sleep(0.05)
            smp = threading.Thread(target=sample, daemon=True)
            smp.start()
            t0 = time.monotonic()
            try:
                note = fn(s, kv, a)
            except grpc.RpcError as e:
                note = "error: %s %s" % (e.code().name, e.details())
            except Exception as e:  # noqa: BLE001
                note = "error: %r" % (e,)
            took = time.monotonic() - t0
            good.report()
            stop.set()
            smp.join()
            up = s.proc.poll() is None
            survived = "-"
            if up:
                try:
                    r = kv.Range(rpc_pb2.RangeRequest(key=b"/probe/base/",
                                                      range_end=b"/probe/base0",
                                                      count_only=True), timeout=30)
                    ok = r.count == 1000
                    for k, v in list(good.acks.items()):
                        g = kv.Range(rpc_pb2.RangeRequest(key=k), timeout=30)
                        ok = ok and g.count == 1 and g.kvs[0].value == v
                    survived = "yes" if ok else "NO"
                except grpc.RpcError as e:
                    survived = "? (%s)" % e.code().name
            rows.append((kind, name, "yes" if up else "NO", peak[0] / 1024.0, peak[1] / 1024.0,
                         good.worst * 1000, good.p99() * 1000, good.failures, survived, took,
                         note))
            print("  %-7s %-18s up=%-3s peak %7.1f MiB (anon %7.1f)  stall %7.1f ms (p99 %.1f)  "
                  "fails %d  writes %s  %.1fs  %s" % rows[-1], flush=True)
            if not up:
                break
        good.close()
        ch.close()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--targets", default="quorum,etcd")
    p.add_argument("--full", action="store_true")
    p.add_argument("--puts", type=int)
    p.add_argument("--idle", type=int)
    p.add_argument("--half", type=int)
    p.add_argument("--range-keys", type=int)
    p.add_argument("--leases", type=int)
    p.add_argument("--quorum-flags", default="",
                   help="more flags for quorum, space-separated (e.g. "
                        "--max-range-response-bytes=67108864)")
    p.add_argument("--cases", help="comma list of the cases to run (default: all)")
    p.add_argument("--good-conns", type=int, default=1,
                   help="connections the well-behaved client uses in turn (default 1; as "
                        "many as quorum's loops to see a stall of any of them)")
    p.add_argument("--good-process", action="store_true",
                   help="run the well-behaved client in a process of its own (the probe's "
                        "process holds Python's GIL while it decodes a huge reply)")
    a = p.parse_args()
    full = dict(puts=200000, idle=10000, half=2000, range_keys=1000000, leases=100000)
    small = dict(puts=20000, idle=1000, half=500, range_keys=50000, leases=10000)
    for k, v in (full if a.full else small).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    print("overload-probe: puts %d, idle %d, half-open %d, range %d keys, leases %d"
          % (a.puts, a.idle, a.half, a.range_keys, a.leases))
    rows = []
    for kind in a.targets.split(","):
        print("%s:" % kind, flush=True)
        rows += run_target(kind, a)
    print()
    print("| case | target | stayed up | peak RSS MiB (anon) | longest stall ms (p99) "
          "| failed requests | earlier writes | note |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _ in CASES:
        for r in rows:
            if r[1] == name:
                print("| %s | %s | %s | %.0f (%.0f) | %.0f (%.0f) | %d | %s | %s |"
                      % (name, r[0], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[10]))


if __name__ == "__main__":
    main()
