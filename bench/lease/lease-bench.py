#!/usr/bin/python3
"""lease-bench: lease grant and keep-alive rates, quorum vs etcd 3.4.

Two cases, each on a fresh single-member server per kind (one after the
other, never at the same time; see tests/integration/harness.py):

  grant      h2load posts exactly N framed LeaseGrantRequest{TTL, ID=0}
             (unary, -c 10 -m 10), so both servers create the same number of
             leases. Checked: every request succeeded, LeaseLeases lists N
             more leases afterwards, and h2load got a full response's worth
             of DATA bytes per request (a gRPC error carries none).
  keepalive  L leases are granted with python gRPC, then grpc-stream-client
             (bench/watch/) sends K LeaseKeepAliveRequests for them,
             round-robin, on S bidi streams with at most D in flight per
             stream, and counts the responses with TTL > 0.

Per case and server: req/s and peak RSS, then the ratio quorum/etcd.
Run with /usr/bin/python3 (Debian's python3-etcd3 / python3-grpcio).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench", "watch"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import benchutil  # noqa: E402
import harness  # noqa: E402

TTL = 600   # long enough that no lease expires during a run


class Result:
    def __init__(self, case, kind):
        self.case = case
        self.kind = kind
        self.rps = None
        self.rss_kib = None
        self.anon_kib = None
        self.srv_cpu = None
        self.detail = ""
        self.problems = []
        self.failed = None

    @property
    def valid(self):
        return self.failed is None and not self.problems and self.rps is not None


def lease_count(stub):
    return len(stub.LeaseLeases(rpc_pb2.LeaseLeasesRequest(), timeout=30).leases)


def run_grant(r, server, args, workdir):
    stub = rpc_pb2_grpc.LeaseStub(grpc.insecure_channel(server.endpoint))
    req = rpc_pb2.LeaseGrantRequest(TTL=TTL, ID=0)
    one = stub.LeaseGrant(req, timeout=10)          # python gRPC check + response size
    if one.ID == 0 or one.TTL != TTL or one.error:
        r.problems.append("python gRPC LeaseGrant returned ID=%d TTL=%d error=%r"
                          % (one.ID, one.TTL, one.error))
    resp_size = 5 + len(one.SerializeToString())
    before = lease_count(stub)
    cpu0 = benchutil.cpu_seconds(server.proc.pid)
    t0 = time.time()
    s = benchutil.h2load(server.endpoint, "/etcdserverpb.Lease/LeaseGrant",
                         benchutil.framed(req), args.grants, 10, 10, workdir)
    r.srv_cpu = (benchutil.cpu_seconds(server.proc.pid) - cpu0) / (time.time() - t0)
    r.rss_kib = server.peak_rss_kib()
    r.anon_kib = benchutil.status_kib(server.proc.pid, "RssAnon")
    r.rps = s["rps"]
    r.detail = "%d grants in %.2fs" % (s["succeeded"], s["secs"])
    if s["succeeded"] != args.grants:
        r.problems.append("h2load: %d of %d succeeded (%d failed, %d errored, %d timeout)" % (
            s["succeeded"], args.grants, s["failed"], s["errored"], s["timeout"]))
    grew = lease_count(stub) - before
    if grew != args.grants:
        r.problems.append("LeaseLeases grew by %d, expected %d" % (grew, args.grants))
    # IDs are varints of about the same size; allow a few bytes of slack.
    if s["succeeded"] and s["data_bytes"] / s["succeeded"] < resp_size - 3:
        r.problems.append("h2load got %.1f DATA bytes per request, a response is ~%d: "
                          "some gRPC calls failed" % (s["data_bytes"] / s["succeeded"], resp_size))


def run_keepalive(r, server, args, workdir, client_bin):
    stub = rpc_pb2_grpc.LeaseStub(grpc.insecure_channel(server.endpoint))
    ids = [stub.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=TTL), timeout=10).ID
           for _ in range(args.leases)]
    path = os.path.join(workdir, "leases.txt")
    with open(path, "w") as f:
        f.write("\n".join(str(i) for i in ids) + "\n")
    port = server.endpoint.rsplit(":", 1)[1]
    cpu0 = benchutil.cpu_seconds(server.proc.pid)
    t0 = time.time()
    p = subprocess.run([client_bin, "keepalive", "--port", port, "--leases", path,
                        "--requests", str(args.keepalives), "--streams", str(args.streams),
                        "--depth", str(args.depth)],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    r.srv_cpu = (benchutil.cpu_seconds(server.proc.pid) - cpu0) / (time.time() - t0)
    r.rss_kib = server.peak_rss_kib()
    r.anon_kib = benchutil.status_kib(server.proc.pid, "RssAnon")
    lines = p.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise RuntimeError("client printed no result (exit %d): %s" % (p.returncode,
                                                                      p.stderr[-500:]))
    c = json.loads(lines[-1])
    r.rps = c["per_sec"]
    r.detail = "ttl>0 %d/%d in %.2fs" % (c["ttl_positive"], c["requests"], c["secs"])
    if not c["ok"]:
        r.problems.append("keep-alive: %d responses, %d with TTL > 0, %d expired, %d bad, "
                          "%d stream errors %s" % (c["responses"], c["ttl_positive"],
                                                   c["expired"], c["bad"], c["stream_errors"],
                                                   c["error"]))


def run_one(case, kind, args, client_bin):
    r = Result(case, kind)
    workdir = tempfile.mkdtemp(prefix="lease-bench-")
    server = harness.Server(kind)
    try:
        server.start()
        if case == "grant":
            run_grant(r, server, args, workdir)
        else:
            run_keepalive(r, server, args, workdir, client_bin)
    except Exception as e:
        r.failed = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e) else "")
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return r


def fmt_result(r):
    head = "%-15s %-6s " % ("lease-" + r.case, r.kind)
    if r.failed:
        return head + "FAILED: " + r.failed
    line = head + "req/s=%6.0f  (%s)  rss=%6.1fMiB (anon=%5.1fMiB)  cpu(server)=%3.0f%%" % (
        r.rps, r.detail, r.rss_kib / 1024.0, r.anon_kib / 1024.0, 100 * r.srv_cpu)
    if r.problems:
        line += "  INVALID"
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grants", type=int, default=50000,
                    help="LeaseGrant requests (h2load -n, default 50000)")
    ap.add_argument("--leases", type=int, default=100,
                    help="leases kept alive (default 100)")
    ap.add_argument("--keepalives", type=int, default=300000,
                    help="keep-alive requests in all (default 300000)")
    ap.add_argument("--streams", type=int, default=1,
                    help="keep-alive streams (default 1, like clientv3's one stream per client)")
    ap.add_argument("--depth", type=int, default=100,
                    help="keep-alive requests in flight per stream (default 100)")
    ap.add_argument("--cases", default="grant,keepalive", help="grant,keepalive (default both)")
    ap.add_argument("--only", choices=("etcd", "quorum"), help="run one server only")
    args = ap.parse_args()

    if not shutil.which("h2load"):
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    kinds = [args.only] if args.only else ["etcd", "quorum"]
    cases = [c for c in args.cases.split(",") if c]
    if set(cases) - {"grant", "keepalive"}:
        sys.exit("unknown case in --cases (have: grant, keepalive)")
    try:
        client_bin = benchutil.client_binary(harness.quorum_binary())
    except RuntimeError as e:
        sys.exit(str(e))

    print("lease-bench: %s, %d grants (h2load -n, -c10 -m10), %d keep-alives for %d leases on "
          "%d stream(s), depth %d, %d cores, load average %.2f" % (
              " vs ".join(kinds), args.grants, args.keepalives, args.leases, args.streams,
              args.depth, os.cpu_count(), os.getloadavg()[0]))
    sys.stdout.flush()
    results = {}
    for case in cases:
        for kind in kinds:
            r = run_one(case, kind, args, client_bin)
            results[(case, kind)] = r
            print(fmt_result(r))
            for p in r.problems:
                print("WARNING lease-%s %s INVALID: %s" % (case, kind, p))
            sys.stdout.flush()
        q, e = results.get((case, "quorum")), results.get((case, "etcd"))
        if q and e:
            head = "%-15s ratio quorum/etcd: " % ("lease-" + case)
            if q.rps and e.rps and q.rss_kib and e.rss_kib:
                print(head + "req/s x%.2f  rss x%.2f%s" % (
                    q.rps / e.rps, q.rss_kib / e.rss_kib,
                    "" if q.valid and e.valid else "  (INVALID: see warnings)"))
            else:
                print(head + "n/a")
    print()
    print("targets (issue): none named for leases; the ratios above are informational")
    print("load average at the end: %.2f (other load on the machine skews the numbers)"
          % os.getloadavg()[0])
    return 0 if all(r.valid for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
