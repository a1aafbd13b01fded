#!/usr/bin/python3
"""kv-bench: quorum vs etcd 3.4, side by side, driven by h2load over gRPC.

Each case starts a fresh single-member server (its own temp data dir, free
loopback ports; see tests/integration/harness.py), preloads what the case
needs, checks one request of the case with python gRPC, then drives the
server with h2load posting the IDENTICAL framed gRPC message for both
servers. The two servers run one after the other, never at the same time,
so they don't compete for the machine's cores.

Put cases send a FIXED number of requests (h2load -n, the same for both
servers), so both stores end with the same number of revisions and their
peak RSS is comparable; Range cases, which write nothing, run for a fixed
duration (h2load -D).

Per case and server it prints req/s, p99 latency (from h2load's per-request
--log-file; h2load itself prints no percentiles) and peak RSS (VmHWM of the
server at the end of the run; RssAnon, its anonymous part, alongside), then the ratio quorum/etcd, and at the end
the project's targets with met / not met.

h2load counts an HTTP 200 as a success even when the gRPC call failed (the
failure is in the grpc-status trailer, and such a response carries no DATA).
So every run is cross-checked and marked INVALID when the check fails:
  - Put: the store revision grew by at least the number of requests h2load
    says succeeded and at most the number it started;
  - every case: the DATA bytes h2load received average at least the framed
    size of the response python gRPC got for the same request (an error
    response carries no message, so failures show up as missing bytes);
  - Range: the python gRPC call returned exactly the expected kvs.

Run with /usr/bin/python3 (Debian's python3-etcd3 / python3-grpcio).
"""
import argparse
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchutil import parse_h2load  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import harness  # noqa: E402

VALUE = b"v" * 100              # every stored value is 100 bytes
PUT_KEY = b"bench/put"
ONE_KEY = b"bench/one"
PREFIX = b"bench/pfx/"
PREFIX_KEYS = [PREFIX + b"%03d" % i for i in range(100)]
# Put cases: fixed request counts, the same for both servers (etcd 3.4 did
# ~3,800 req/s at 1x1 and ~21,000 at 10x10 here, so each is ~10 s of etcd).
PUT_1X1_REQUESTS = 40000
PUT_10X10_REQUESTS = 200000


def prefix_end(p):
    """etcd's range_end for "every key with prefix p"."""
    b = bytearray(p)
    b[-1] += 1
    return bytes(b)


class Case:
    """One benchmark case: a gRPC method, the request, concurrency, checks."""

    def __init__(self, name, method, request, clients, streams, preload=(), expect_keys=None,
                 requests=None):
        self.name = name
        self.requests = requests        # fixed h2load -n (Put cases); None: timed (-D)
        self.method = method            # "Put" or "Range"
        self.request = request          # protobuf message posted by every h2load request
        self.clients = clients
        self.streams = streams
        self.preload = list(preload)    # (key, value) pairs put before the run
        self.expect_keys = expect_keys  # Range: the exact keys the response must hold

    @property
    def path(self):
        return "/etcdserverpb.KV/" + self.method

    def framed(self):
        """The gRPC length-prefixed message: 0 (uncompressed), u32 BE length, body."""
        body = self.request.SerializeToString()
        return b"\0" + struct.pack(">I", len(body)) + body


def make_cases():
    one = [(ONE_KEY, VALUE)]
    pfx = [(k, VALUE) for k in PREFIX_KEYS]
    return [
        Case("put-1x1", "Put", rpc_pb2.PutRequest(key=PUT_KEY, value=VALUE), 1, 1,
             requests=PUT_1X1_REQUESTS),
        Case("put-10x10", "Put", rpc_pb2.PutRequest(key=PUT_KEY, value=VALUE), 10, 10,
             requests=PUT_10X10_REQUESTS),
        Case("range-ser", "Range", rpc_pb2.RangeRequest(key=ONE_KEY, serializable=True),
             10, 10, preload=one, expect_keys=[ONE_KEY]),
        Case("range-lin", "Range", rpc_pb2.RangeRequest(key=ONE_KEY),
             10, 10, preload=one, expect_keys=[ONE_KEY]),
        Case("range-100", "Range",
             rpc_pb2.RangeRequest(key=PREFIX, range_end=prefix_end(PREFIX)),
             10, 10, preload=pfx, expect_keys=PREFIX_KEYS),
    ]


class Result:
    def __init__(self, case, kind):
        self.case = case
        self.kind = kind
        self.rps = None
        self.p99_ms = None
        self.rss_kib = None             # VmHWM at the end of the run
        self.anon_kib = None            # RssAnon at the end of the run (no mmap'd file pages)
        self.srv_cpu = None             # server CPU seconds / wall seconds of the run
        self.h2_cpu = None              # h2load CPU seconds / wall seconds of the run
        self.problems = []              # why the run is INVALID (empty: valid)
        self.notes = []                 # warnings that don't invalidate it
        self.failed = None              # the run could not be done at all
        self.requests = None            # the fixed request count (Put cases)

    @property
    def valid(self):
        return self.failed is None and not self.problems and self.rps is not None


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (from /proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_anon_kib(pid):
    """RssAnon (KiB): resident memory that is not file-backed, e.g. not the
    pages of an mmap'd database file (LMDB, bbolt), which VmHWM counts too."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


# --security: what each mode turns on. "auth": a root user, a user "bench"
# with readwrite on bench/ and auth enabled; every request (python gRPC and
# h2load) carries that user's token, as clients send it. The same for both
# servers, with their default --bcrypt-cost and simple tokens.
# "tls": the client port on https:// with a certificate from the recipe in
# docs/security.md (no client certificates: h2load cannot present one), so
# every connection handshakes TLS 1.3 and every byte is encrypted.
MODES = ("plain", "auth", "tls", "tls+auth")
MD = []  # the metadata of the current run: [("token", T)] with auth
CERTS = {}  # "dir": the recipe's certificates, made once per run


def certs():
    if "dir" not in CERTS:
        import test_tls
        d = tempfile.mkdtemp(prefix="kv-bench-certs-")
        test_tls.run_recipe(d)
        CERTS["dir"] = d
        t = test_tls.tls_of(d, client=True, peer=False, client_cert_auth=False)
        # only the server's certificate: a --trusted-ca-file alone makes
        # etcd 3.4 (and quorum) require client certificates
        t.member_flags = lambda: ["--cert-file", t.server_cert, "--key-file", t.server_key]
        CERTS["tls"] = t
    return CERTS["tls"]


def channel_for(endpoint, tls):
    if tls is None:
        return grpc.insecure_channel(endpoint)
    with open(tls.ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return grpc.secure_channel(endpoint, creds)


def setup_auth(endpoint, tls=None):
    """Users and roles over the Auth API, auth enabled; returns a token of "bench"."""
    channel = channel_for(endpoint, tls)
    a = rpc_pb2_grpc.AuthStub(channel)
    from etcd3.etcdrpc import auth_pb2
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="rootpw"), timeout=30)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="bench"), timeout=10)
    a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
        name="bench", perm=auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE,
                                               key=b"bench/", range_end=b"bench0")), timeout=10)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="bench", password="benchpw"), timeout=30)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="bench", role="bench"), timeout=10)
    a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)
    tok = a.Authenticate(rpc_pb2.AuthenticateRequest(name="bench", password="benchpw"),
                         timeout=30).token
    channel.close()
    return tok


def current_revision(stub):
    return stub.Range(rpc_pb2.RangeRequest(key=PUT_KEY), timeout=10, metadata=MD).header.revision


def run_h2load(case, endpoint, duration, requests, threads, workdir, headers=(), scheme="http"):
    """Runs h2load for one case, for |requests| requests (-n) when not None,
    else for |duration| seconds (-D); returns (parsed summary dict, log path,
    h2load's cpu fraction)."""
    data = os.path.join(workdir, "req.bin")
    with open(data, "wb") as f:
        f.write(case.framed())
    log = os.path.join(workdir, "h2load.log")
    out = os.path.join(workdir, "h2load.out")
    limit = ["-n", str(requests)] if requests else ["-D", str(duration)]
    cmd = ["h2load"] + limit + ["-t", str(threads),
           "-c", str(case.clients), "-m", str(case.streams),
           "-d", data, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    for h in headers:
        cmd += ["-H", h]
    cmd += ["--log-file", log, "%s://%s%s" % (scheme, endpoint, case.path)]
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    # wait4 rather than wait(): it also gives h2load's own CPU use, which tells
    # whether the client (not the server) was the bottleneck.
    start = time.time()
    budget = 600 if requests else duration + 60
    deadline = start + budget
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.time() > deadline:
            os.kill(proc.pid, 9)
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise RuntimeError("h2load did not finish within %ds" % budget)
        time.sleep(0.05)
    with open(out, errors="replace") as f:
        text = f.read()
    if proc.returncode != 0:
        raise RuntimeError("h2load exited %d:\n%s" % (proc.returncode, text[-2000:]))
    summary = parse_h2load(text)
    return summary, log, (ru.ru_utime + ru.ru_stime) / max(summary["secs"], 1e-6)


def p99_ms(log_path):
    """Nearest-rank p99 of per-request times (µs, 3rd column) of HTTP-200 rows, in ms."""
    times = []
    with open(log_path) as f:
        for line in f:
            cols = line.split("\t")
            if len(cols) >= 3 and cols[1] == "200":
                times.append(int(cols[2]))
    if not times:
        return None
    times.sort()
    return times[max(0, math.ceil(0.99 * len(times)) - 1)] / 1000.0


def check_once(case, stub):
    """Does one request of the case with python gRPC; returns the framed response size."""
    if case.method == "Put":
        before = current_revision(stub)
        resp = stub.Put(case.request, timeout=10, metadata=MD)
        if resp.header.revision != before + 1:
            raise AssertionError("Put returned revision %d, expected %d"
                                 % (resp.header.revision, before + 1))
    else:
        resp = stub.Range(case.request, timeout=10, metadata=MD)
        keys = [kv.key for kv in resp.kvs]
        if keys != case.expect_keys or resp.count != len(case.expect_keys):
            raise AssertionError("Range returned count=%d keys=%r..., expected %d keys %r..."
                                 % (resp.count, keys[:3], len(case.expect_keys),
                                    case.expect_keys[:3]))
        bad = [kv.key for kv in resp.kvs if kv.value != VALUE]
        if bad:
            raise AssertionError("Range returned wrong values for %r..." % bad[:3])
    return 5 + len(resp.SerializeToString())


def run_one(case, kind, duration, threads, put_scale=1.0, mode="plain", json_log=False):
    """Runs one case against a fresh server of the given kind; json_log: with
    --logger=zap --log-outputs=<a file> (the --logging comparison)."""
    r = Result(case, kind + "+log" if json_log else kind)
    workdir = tempfile.mkdtemp(prefix="kv-bench-")
    tls = certs() if "tls" in mode else None
    log_path = os.path.join(workdir, "member.log")
    server = harness.Server(kind, tls=tls, extra_args=["--logger=zap", "--log-outputs=" + log_path]
                            if json_log else ())
    headers = []
    try:
        server.start()
        MD[:] = []
        if "auth" in mode:
            tok = setup_auth(server.endpoint, tls)
            MD[:] = [("token", tok)]
            headers.append("token: " + tok)
        channel = channel_for(server.endpoint, tls)
        stub = rpc_pb2_grpc.KVStub(channel)
        for k, v in case.preload:
            stub.Put(rpc_pb2.PutRequest(key=k, value=v), timeout=10, metadata=MD)
        try:
            resp_size = check_once(case, stub)
        except AssertionError as e:
            r.problems.append("python gRPC check failed: %s" % e)
            resp_size = None
        except grpc.RpcError as e:
            r.problems.append("python gRPC check failed: %s %s" % (e.code(), e.details()))
            resp_size = None
        rev_before = current_revision(stub) if case.method == "Put" else None

        cpu0 = cpu_seconds(server.proc.pid)
        requests = max(1, int(case.requests * put_scale)) if case.requests else None
        summary, log, r.h2_cpu = run_h2load(case, server.endpoint, duration, requests, threads,
                                            workdir, headers, "https" if tls else "http")
        r.requests = requests
        r.srv_cpu = (cpu_seconds(server.proc.pid) - cpu0) / summary["secs"]
        r.rss_kib = server.peak_rss_kib()
        r.anon_kib = rss_anon_kib(server.proc.pid)

        r.rps = summary["rps"]
        r.p99_ms = p99_ms(log)
        ok = summary["succeeded"]
        if ok == 0:
            r.problems.append("h2load: no request succeeded")
        bad = summary["failed"] + summary["errored"] + summary["timeout"]
        if bad:
            r.notes.append("h2load: %d failed, %d errored, %d timeout"
                           % (summary["failed"], summary["errored"], summary["timeout"]))
        if requests and ok != requests:
            r.problems.append("h2load: %d of %d requests succeeded" % (ok, requests))
        if case.method == "Put":
            time.sleep(0.2)     # let requests still in flight at h2load's stop land
            delta = current_revision(stub) - rev_before
            if not ok <= delta <= summary["started"]:
                r.problems.append("revision grew by %d but h2load reports %d succeeded, "
                                  "%d started" % (delta, ok, summary["started"]))
        if resp_size is not None and ok:
            per_req = summary["data_bytes"] / ok
            # Put responses grow by a byte now and then (the revision varint),
            # never shrink; a failed call brings no DATA at all.
            if per_req < resp_size * 0.999:
                r.problems.append("h2load got %.1f DATA bytes per succeeded request, a real "
                                  "response is %d: some gRPC calls failed" % (per_req, resp_size))
        channel.close()
        if json_log:
            with open(log_path, "rb") as f:
                r.notes.append("JSON logging on: %d lines written" % f.read().count(b"\n"))
    except Exception as e:  # report the case as failed, go on with the others
        r.failed = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e) else "")
        tail = server.log_tail(1500) if server.proc else ""
        if tail:
            r.notes.append("server log tail:\n" + tail)
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return r


def logging_cost(case, off1, duration, threads, put_scale, mode, rounds):
    """Runs |case| on quorum |rounds| times with JSON logging on, each
    followed by a run without, prints the throughput cost of logging (the
    median run with against the median without, |off1| included) and the
    server CPU per request of each, and returns the throughput cost in %,
    or None. Other load on the machine moves single runs by several %:
    the spread of the runs without logging is the error bar."""
    ons, offs = [], [off1]
    for _ in range(rounds):
        ons.append(run_one(case, "quorum", duration, threads, put_scale, mode, json_log=True))
        offs.append(run_one(case, "quorum", duration, threads, put_scale, mode))
        for r in (ons[-1], offs[-1]):
            print(fmt_result(r))
            for n in r.notes + ["INVALID: " + p for p in r.problems]:
                print("note %s %s: %s" % (case.name, r.kind, n))
        sys.stdout.flush()
    head = "%-13s JSON logging cost: " % case.name
    if not all(r.valid for r in ons + offs):
        print(head + "n/a (a run is invalid)")
        return None

    def median(xs):
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    on, off = median([r.rps for r in ons]), median([r.rps for r in offs])
    cpu_on = median([r.srv_cpu / r.rps * 1e6 for r in ons])
    cpu_off = median([r.srv_cpu / r.rps * 1e6 for r in offs])
    cost = 100 * (1 - on / off)
    print(head + "req/s median on %.0f vs off %.0f (off runs %s): %.1f%% (target < 3%%: %s); "
          "server CPU per request %.2f vs %.2f us" % (
              on, off, "/".join("%.0f" % r.rps for r in offs), cost,
              "met" if cost < 3 else "NOT MET", cpu_on, cpu_off))
    sys.stdout.flush()
    return cost


def fmt_result(r):
    head = "%-13s %-6s " % (r.case.name, r.kind)
    if r.failed:
        return head + "FAILED: " + r.failed
    line = head + "req/s=%6.0f  p99=%6.2fms  rss=%6.1fMiB" % (
        r.rps, r.p99_ms if r.p99_ms is not None else float("nan"), r.rss_kib / 1024.0)
    line += " (anon=%5.1fMiB)" % (r.anon_kib / 1024.0)
    line += "  cpu(server/h2load)=%3.0f%%/%3.0f%%" % (100 * r.srv_cpu, 100 * r.h2_cpu)
    if r.problems:
        line += "  INVALID"
    return line


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_ratio(name, q, e):
    head = "%-13s ratio quorum/etcd: " % name
    if not (q and e and q.rps is not None and e.rps is not None) or q.failed or e.failed:
        return head + "n/a"
    rp = ratio(q.p99_ms, e.p99_ms)
    ra = ratio(q.anon_kib, e.anon_kib)
    line = head + "req/s x%.2f  p99 x%s  rss x%.2f (anon x%s)" % (
        ratio(q.rps, e.rps), "%.2f" % rp if rp is not None else "n/a",
        ratio(q.rss_kib, e.rss_kib), "%.2f" % ra if ra is not None else "n/a")
    if not (q.valid and e.valid):
        line += "  (INVALID: see warnings)"
    return line


def print_targets(results, kinds):
    print()
    print("targets (issue):")
    if kinds != ["etcd", "quorum"]:
        print("  n/a: needs both servers (ran --only %s)" % kinds[0])
        return

    def rps_target(label, case_name, factor):
        q, e = results.get((case_name, "quorum")), results.get((case_name, "etcd"))
        if not (q and e):
            print("  %-45s not run (case %s not selected)" % (label, case_name))
            return
        if not (q.valid and e.valid):
            print("  %-45s NOT MET (case %s invalid or failed)" % (label, case_name))
            return
        x = q.rps / e.rps
        print("  %-45s %s (x%.2f)" % (label, "met" if x >= factor else "NOT MET", x))

    rps_target("Put 10x10 req/s >= 3x etcd", "put-10x10", 3.0)
    rps_target("serializable Range req/s >= 10x etcd", "range-ser", 10.0)
    worst = None
    for (name, kind), q in results.items():
        if kind != "quorum":
            continue
        e = results.get((name, "etcd"))
        if not (q.rss_kib and e and e.rss_kib):
            worst = float("inf")
            break
        x = q.rss_kib / e.rss_kib
        worst = x if worst is None or x > worst else worst
    label = "peak RSS (VmHWM) <= 1/3 etcd's (every case)"
    if worst is None or worst == float("inf"):
        print("  %-45s NOT MET (a case has no RSS for both servers)" % label)
    else:
        print("  %-45s %s (worst x%.2f)" % (label, "met" if worst <= 1 / 3 else "NOT MET", worst))
    # Extra, not a target: anonymous memory only (RssAnon at the end of the
    # run), which leaves out the resident pages of the mmap'd database file.
    worst_anon = None
    for (name, kind), q in results.items():
        e = results.get((name, "etcd"))
        if kind != "quorum" or not (q.anon_kib and e and e.anon_kib):
            continue
        x = q.anon_kib / e.anon_kib
        worst_anon = x if worst_anon is None or x > worst_anon else worst_anon
    if worst_anon is not None:
        print("  %-45s %s (worst x%.2f; extra, the target is VmHWM)" % (
            "anon RSS (RssAnon) <= 1/3 etcd's", "yes" if worst_anon <= 1 / 3 else "no",
            worst_anon))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=12,
                    help="h2load -D seconds per Range case and server (default 12)")
    ap.add_argument("--put-scale", type=float, default=1.0,
                    help="multiply the Put cases' fixed request counts (default 1: %d at 1x1, "
                         "%d at 10x10, ~10 s of etcd each)" % (PUT_1X1_REQUESTS,
                                                              PUT_10X10_REQUESTS))
    ap.add_argument("--quick", action="store_true",
                    help="3 s per Range case, Put counts x0.25 (about 1 minute)")
    ap.add_argument("--only", choices=("etcd", "quorum"), help="run one server only")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--threads", type=int, default=1, help="h2load -t (default 1)")
    ap.add_argument("--security", default="plain",
                    help="comma-separated modes, each running every case for both servers: "
                         "%s (default plain); with more than one, the cost of each mode is "
                         "printed as its quorum/etcd ratio over plain's" % ", ".join(MODES))
    ap.add_argument("--logging", type=int, nargs="?", const=2, default=0, metavar="ROUNDS",
                    help="also run every quorum case ROUNDS times (default 2) with JSON logging "
                         "to a file (--logger=zap --log-outputs=FILE), each followed by a run "
                         "without, and print the throughput cost (issue target: under 3%%)")
    args = ap.parse_args()
    modes = args.security.split(",")
    if set(modes) - set(MODES):
        sys.exit("unknown --security mode(s): %s" % ", ".join(sorted(set(modes) - set(MODES))))
    duration = 3 if args.quick else args.duration
    put_scale = 0.25 if args.quick else args.put_scale
    duration = int(duration) if duration == int(duration) else duration

    if not shutil.which("h2load"):
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    kinds = [args.only] if args.only else ["etcd", "quorum"]
    if "quorum" in kinds:
        try:
            harness.quorum_binary()
        except RuntimeError as e:
            sys.exit("%s; use --only etcd to run etcd alone" % e)

    cases = make_cases()
    if args.cases:
        want = args.cases.split(",")
        unknown = set(want) - {c.name for c in cases}
        if unknown:
            sys.exit("unknown case(s): %s (have: %s)" % (", ".join(sorted(unknown)),
                                                        ", ".join(c.name for c in cases)))
        cases = [c for c in cases if c.name in want]

    print("kv-bench: %s, Put cases h2load -n %d (1x1) / %d (10x10), Range cases %ss, "
          "per case and server, h2load -t%d, value %d bytes, %d cores, load average %.2f" % (
              " vs ".join(kinds), max(1, int(PUT_1X1_REQUESTS * put_scale)),
              max(1, int(PUT_10X10_REQUESTS * put_scale)), duration, args.threads, len(VALUE),
              os.cpu_count(), os.getloadavg()[0]))
    sys.stdout.flush()
    results = {}
    by_mode = {}
    log_costs = []
    for mode in modes:
        if len(modes) > 1:
            print("--- security mode: %s" % mode)
        results = by_mode.setdefault(mode, {})
        for case in cases:
            for kind in kinds:
                r = run_one(case, kind, duration, args.threads, put_scale, mode)
                results[(case.name, kind)] = r
                print(fmt_result(r))
                for p in r.problems:
                    print("WARNING %s %s INVALID: %s" % (case.name, kind, p))
                for n in r.notes:
                    print("note %s %s: %s" % (case.name, kind, n))
                sys.stdout.flush()
            if len(kinds) == 2:
                print(fmt_ratio(case.name, results[(case.name, "quorum")],
                                results[(case.name, "etcd")]))
                sys.stdout.flush()
            if args.logging and "quorum" in kinds:
                log_costs.append(logging_cost(case, results[(case.name, "quorum")], duration,
                                              args.threads, put_scale, mode, args.logging))
    if len(kinds) == 2 and "plain" in by_mode and len(by_mode) > 1:
        print()
        print("what each mode costs quorum's lead (issue target: its quorum/etcd ratio >= 90%"
              " of plain's)")
        base = by_mode["plain"]
        for mode in modes:
            if mode == "plain":
                continue
            for case in cases:
                q, e = by_mode[mode][(case.name, "quorum")], by_mode[mode][(case.name, "etcd")]
                q0, e0 = base[(case.name, "quorum")], base[(case.name, "etcd")]
                if not all(x.valid for x in (q, e, q0, e0)):
                    print("  %-9s %-13s n/a (a run is invalid)" % (mode, case.name))
                    continue
                x, x0 = q.rps / e.rps, q0.rps / e0.rps
                print("  %-9s %-13s ratio x%.2f vs plain x%.2f: %3.0f%% %s" % (
                    mode, case.name, x, x0, 100 * x / x0, "met" if x >= 0.9 * x0 else "NOT MET"))
        results = base
    all_results = {(n, k, m): r for m, rs in by_mode.items() for (n, k), r in rs.items()}
    print_targets(results, kinds)
    if args.logging:
        known = [c for c in log_costs if c is not None]
        print("  %-45s %s" % ("JSON logging costs < 3% req/s", "n/a (no valid run)" if not known
                               else "%s (worst %.1f%%)" % ("met" if max(known) < 3 else "NOT MET",
                                                          max(known))))
    if "dir" in CERTS:
        shutil.rmtree(CERTS["dir"], ignore_errors=True)
    print("load average at the end: %.2f (other load on the machine skews the numbers)"
          % os.getloadavg()[0])
    invalid = [k for k, r in all_results.items() if not r.valid]
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
