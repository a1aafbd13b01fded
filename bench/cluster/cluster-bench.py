#!/usr/bin/python3
"""cluster-bench: a 3-member quorum cluster vs a 3-member etcd 3.4 cluster, with h2load.

    /usr/bin/python3 bench/cluster/cluster-bench.py            # all cases (~1.5 min here)
    /usr/bin/python3 bench/cluster/cluster-bench.py --quick    # smoke run (~30 s)
    /usr/bin/python3 bench/cluster/cluster-bench.py --only quorum
    /usr/bin/python3 bench/cluster/cluster-bench.py --cases put-10x10-leader,range-lin-follower
    /usr/bin/python3 bench/cluster/cluster-bench.py --put-scale 2 --duration 20
    KEEP_CLUSTER=1 ...   # keep every cluster's data dirs and member logs (path printed)

Needs h2load (nghttp2-client), etcd/etcdctl 3.4, python3-etcd3, python3-grpcio
and the quorum binary ($QUORUM_BIN, else build/src/server/quorum; build a
release one for numbers: meson setup build-rel --buildtype=release). Exit
status 1 if any run failed or is INVALID.

Each case and kind gets a FRESH 3-member cluster (tests/integration/cluster.py:
members m0..m2 on free loopback ports, temp data dirs, killed by PID) with
etcd's default timing for both kinds: --heartbeat-interval 100
--election-timeout 1000 (--snapshot-count 100000, also both defaults, passed
explicitly). The quorum cluster and the etcd cluster run one after the other,
never at the same time (the machine has 2 cores). h2load posts the IDENTICAL
framed gRPC message to both (built with python3-etcd3's stubs), to the client
endpoint of ONE member: the leader (as every member reports it through
`etcdctl endpoint status`) or a follower.

Cases (h2load -c CLIENTS -m STREAMS, one h2load thread):

  put-1x1-leader      Put bench/put = 100-byte value, 1x1, -n 10000, on the leader
  put-10x10-leader    the same Put, 10x10, -n 100000, on the leader
  range-lin-follower  linearizable Range of bench/one (preloaded), 10x10, -D 12 s, on a follower
  range-ser-follower  serializable Range of bench/one, 10x10, -D 12 s, on a follower

Put cases use ONE key, as kv-bench does: h2load posts one body (-d) for
every request, so distinct keys would need a different load tool. They send a
fixed request count (the same for both kinds) so both clusters end with the
same revisions and their memory is comparable; Range cases are timed.

Per case and kind it prints req/s (h2load's), p99 latency (nearest rank over
h2load's --log-file, kv-bench's p99_ms), peak RSS = the SUM of the three
members' VmHWM read right after h2load exits (RssAnon sum alongside), the
CPU of the three members together and of h2load (fraction of one core),
then the ratio quorum/etcd, and at the end the targets (both >= 3x etcd).

Every run is validated as kv-bench does and marked INVALID when a check fails:
  - before the run, one request of the case with python gRPC on the same
    member (Put: the revision grows by exactly 1; Range: exactly the
    preloaded key and value come back) -- that response's framed size is the
    least number of DATA bytes each h2load success must have brought (a gRPC
    error comes back as HTTP 200 with no DATA, which h2load counts as success);
  - Put: the leader's revision grew by at least h2load's succeeded and at
    most its started count, and every member then reaches the leader's
    revision (replication caught up; serializable Range on each member);
  - after the run: the same python gRPC check passes again on the same member
    (no stall left behind), all three members still run, and the leader and
    Raft term are unchanged (a change is reported as a note: an election
    happened under load).
Member log lines written during the run that look like warnings or errors are
counted and a few are shown (etcd logs "took too long" warnings under load).

Reuses kv-bench's Case, run_h2load, p99_ms and check_once (loaded from
bench/kv/kv-bench.py) and benchutil's readers, so both benches measure alike.
"""
import argparse
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchutil import cpu_seconds, status_kib  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402


def _load_kv_bench():
    """bench/kv/kv-bench.py as a module (its name has a dash: not importable by name)."""
    spec = importlib.util.spec_from_file_location(
        "kv_bench", os.path.join(ROOT, "bench", "kv", "kv-bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


kvb = _load_kv_bench()

VALUE = kvb.VALUE                 # 100 bytes
PUT_KEY = kvb.PUT_KEY             # bench/put
ONE_KEY = kvb.ONE_KEY             # bench/one
HEARTBEAT_MS = 100                # etcd's defaults
ELECTION_MS = 1000
SNAPSHOT_COUNT = 100000
# Fixed Put counts, the same for both kinds (each ~10 s of the etcd cluster here).
PUT_1X1_REQUESTS = 10000
PUT_10X10_REQUESTS = 100000
# Lines of a member log that look like trouble (quorum's and etcd's formats).
TROUBLE = re.compile(r"\b(warn|warning|error|fatal|panic|abort|assert)", re.IGNORECASE)


class Case(kvb.Case):
    """kv-bench's case plus the member it targets: "leader" or "follower"."""

    def __init__(self, name, method, request, clients, streams, target, **kw):
        super().__init__(name, method, request, clients, streams, **kw)
        self.target = target


def make_cases():
    one = [(ONE_KEY, VALUE)]
    put = rpc_pb2.PutRequest(key=PUT_KEY, value=VALUE)
    return [
        Case("put-1x1-leader", "Put", put, 1, 1, "leader", requests=PUT_1X1_REQUESTS),
        Case("put-10x10-leader", "Put", put, 10, 10, "leader", requests=PUT_10X10_REQUESTS),
        Case("range-lin-follower", "Range", rpc_pb2.RangeRequest(key=ONE_KEY), 10, 10,
             "follower", preload=one, expect_keys=[ONE_KEY]),
        Case("range-ser-follower", "Range",
             rpc_pb2.RangeRequest(key=ONE_KEY, serializable=True), 10, 10, "follower",
             preload=one, expect_keys=[ONE_KEY]),
    ]


class Result(kvb.Result):
    def __init__(self, case, kind):
        super().__init__(case, kind)
        self.member = None            # "m1 (leader)" etc.
        self.trouble = {}             # member name -> [log lines that look like trouble]


def serializable_revision(endpoint):
    ch = grpc.insecure_channel(endpoint)
    try:
        return rpc_pb2_grpc.KVStub(ch).Range(
            rpc_pb2.RangeRequest(key=PUT_KEY, serializable=True), timeout=5).header.revision
    finally:
        ch.close()


def wait_replicated(c, revision, timeout=30.0):
    """Waits until every member's serializable revision reaches |revision|; returns
    the members that did not (name -> last revision seen or error)."""
    deadline = time.monotonic() + timeout
    behind = {}
    while True:
        behind = {}
        for i in c.live():
            try:
                rev = serializable_revision(c.endpoint(i))
            except grpc.RpcError as e:
                rev = "%s %s" % (e.code(), e.details())
            if rev != revision:
                behind[c.members[i].name] = rev
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(0.2)


def leader_and_term(c):
    """(leader index, raft term of the leader) as the members report them."""
    i = c.wait_leader(timeout=30)
    return i, c.status(i)["raftTerm"]


def log_sizes(c):
    return {m.name: len(m.log()) for m in c.members}


def new_trouble(c, offsets):
    out = {}
    for m in c.members:
        lines = [ln for ln in m.log()[offsets.get(m.name, 0):].splitlines()
                 if TROUBLE.search(ln)]
        if lines:
            out[m.name] = lines
    return out


def run_one(case, kind, duration, threads, put_scale):
    """Runs one case against a fresh 3-member cluster of the given kind."""
    r = Result(case, kind)
    workdir = tempfile.mkdtemp(prefix="cluster-bench-")
    c = Cluster(kind, n=3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                token="cluster-bench", extra_args=["--snapshot-count", str(SNAPSHOT_COUNT)])
    channels = []
    try:
        c.start(timeout=60)
        leader, term0 = leader_and_term(c)
        if case.target == "leader":
            target = leader
        else:
            target = [i for i in c.live() if i != leader][0]
        r.member = "%s/%s" % (c.members[target].name, case.target)
        endpoint = c.endpoint(target)
        lch = grpc.insecure_channel(c.endpoint(leader))
        tch = grpc.insecure_channel(endpoint)
        channels += [lch, tch]
        lstub = rpc_pb2_grpc.KVStub(lch)      # the leader: preload, revisions
        tstub = rpc_pb2_grpc.KVStub(tch)      # the member h2load talks to
        for k, v in case.preload:
            lstub.Put(rpc_pb2.PutRequest(key=k, value=v), timeout=10)
        if case.preload:
            # a follower's serializable read sees the key only once it has applied it
            behind = wait_replicated(c, kvb.current_revision(lstub))
            if behind:
                r.problems.append("preload not replicated: %r" % behind)
        try:
            resp_size = kvb.check_once(case, tstub)
        except AssertionError as e:
            r.problems.append("python gRPC check failed: %s" % e)
            resp_size = None
        except grpc.RpcError as e:
            r.problems.append("python gRPC check failed: %s %s" % (e.code(), e.details()))
            resp_size = None
        rev_before = kvb.current_revision(lstub) if case.method == "Put" else None
        pids = [c.members[i].proc.pid for i in c.live()]
        offsets = log_sizes(c)

        cpu0 = sum(cpu_seconds(p) for p in pids)
        requests = max(1, int(case.requests * put_scale)) if case.requests else None
        summary, log, r.h2_cpu = kvb.run_h2load(case, endpoint, duration, requests, threads,
                                                workdir)
        r.requests = requests
        dead = [m for m in c.members if not m.running()]
        if dead:
            raise RuntimeError("member(s) %s exited during the run: %s" % (
                ", ".join(m.name for m in dead),
                ", ".join(str(m.proc.returncode) for m in dead)))
        r.srv_cpu = (sum(cpu_seconds(p) for p in pids) - cpu0) / summary["secs"]
        r.rss_kib = sum(status_kib(p, "VmHWM") for p in pids)
        r.anon_kib = sum(status_kib(p, "RssAnon") for p in pids)
        r.rps = summary["rps"]
        r.p99_ms = kvb.p99_ms(log)

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
            rev_after = kvb.current_revision(lstub)
            delta = rev_after - rev_before
            if not ok <= delta <= summary["started"]:
                r.problems.append("leader's revision grew by %d but h2load reports %d "
                                  "succeeded, %d started" % (delta, ok, summary["started"]))
            behind = wait_replicated(c, rev_after)
            if behind:
                r.problems.append("members behind the leader's revision %d 30 s after the "
                                  "run: %r" % (rev_after, behind))
        if resp_size is not None and ok:
            per_req = summary["data_bytes"] / ok
            if per_req < resp_size * 0.999:
                r.problems.append("h2load got %.1f DATA bytes per succeeded request, a real "
                                  "response is %d: some gRPC calls failed" % (per_req, resp_size))
        try:
            kvb.check_once(case, tstub)
        except AssertionError as e:
            r.problems.append("python gRPC check after the run failed: %s" % e)
        except grpc.RpcError as e:
            r.problems.append("python gRPC check after the run failed: %s %s"
                              % (e.code(), e.details()))
        leader2, term2 = leader_and_term(c)
        if (leader2, term2) != (leader, term0):
            r.notes.append("election during the run: leader %s term %d -> leader %s term %d"
                           % (c.members[leader].name, term0, c.members[leader2].name, term2))
        r.trouble = new_trouble(c, offsets)
    except Exception as e:  # report the case as failed, go on with the others
        r.failed = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e) else "")
        for m in c.members:
            r.notes.append("%s log tail (%s):\n%s" % (m.name, "running" if m.running() else
                                                       "exited %s" % (m.proc.returncode
                                                                      if m.proc else None),
                                                       m.log_tail(1500)))
    finally:
        for ch in channels:
            ch.close()
        c.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return r


def fmt_result(r):
    head = "%-19s %-6s " % (r.case.name, r.kind)
    if r.failed:
        return head + "FAILED: " + r.failed
    line = head + "req/s=%6.0f  p99=%7.2fms  rss(sum of 3)=%6.1fMiB (anon=%5.1fMiB)" % (
        r.rps, r.p99_ms if r.p99_ms is not None else float("nan"), r.rss_kib / 1024.0,
        r.anon_kib / 1024.0)
    line += "  cpu(3 members/h2load)=%3.0f%%/%3.0f%%  on %s" % (
        100 * r.srv_cpu, 100 * r.h2_cpu, r.member)
    if r.problems:
        line += "  INVALID"
    return line


def fmt_ratio(name, q, e):
    head = "%-19s ratio quorum/etcd: " % name
    if not (q and e) or q.failed or e.failed or q.rps is None or e.rps is None:
        return head + "n/a"
    rp = kvb.ratio(q.p99_ms, e.p99_ms)
    line = head + "req/s x%.2f  p99 x%s  rss x%.2f (anon x%.2f)" % (
        q.rps / e.rps, "%.2f" % rp if rp is not None else "n/a",
        q.rss_kib / e.rss_kib, q.anon_kib / e.anon_kib)
    if not (q.valid and e.valid):
        line += "  (INVALID: see warnings)"
    return line


def print_targets(results, kinds):
    print()
    print("targets (issue):")
    if kinds != ["quorum", "etcd"]:
        print("  n/a: needs both kinds (ran --only %s)" % kinds[0])
        return
    for label, case_name, factor in (
            ("Put 10x10 on the leader req/s >= 3x etcd", "put-10x10-leader", 3.0),
            ("lin. Range 10x10 on a follower req/s >= 3x etcd", "range-lin-follower", 3.0)):
        q, e = results.get((case_name, "quorum")), results.get((case_name, "etcd"))
        if not (q and e):
            print("  %-50s not run (case %s not selected)" % (label, case_name))
        elif not (q.valid and e.valid):
            print("  %-50s NOT MET (case %s invalid or failed)" % (label, case_name))
        else:
            x = q.rps / e.rps
            print("  %-50s %s (x%.2f)" % (label, "met" if x >= factor else "NOT MET", x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=12,
                    help="h2load -D seconds per Range case and kind (default 12)")
    ap.add_argument("--put-scale", type=float, default=1.0,
                    help="multiply the Put cases' fixed request counts (default 1: %d at 1x1, "
                         "%d at 10x10)" % (PUT_1X1_REQUESTS, PUT_10X10_REQUESTS))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 3 s per Range case, Put counts x0.2")
    ap.add_argument("--only", choices=("etcd", "quorum"), help="run one kind only")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--threads", type=int, default=1, help="h2load -t (default 1)")
    args = ap.parse_args()
    duration = 3 if args.quick else args.duration
    duration = int(duration) if duration == int(duration) else duration
    put_scale = 0.2 if args.quick else args.put_scale

    if not shutil.which("h2load"):
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    kinds = [args.only] if args.only else ["quorum", "etcd"]
    if "quorum" in kinds:
        try:
            qbin = harness.quorum_binary()
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

    print("cluster-bench: 3-member %s clusters, heartbeat %d ms, election %d ms, Put h2load "
          "-n %d (1x1) / %d (10x10), Range %ss, h2load -t%d, value %d bytes, %d cores, "
          "load average %.2f" % (
              " vs ".join(kinds), HEARTBEAT_MS, ELECTION_MS,
              max(1, int(PUT_1X1_REQUESTS * put_scale)),
              max(1, int(PUT_10X10_REQUESTS * put_scale)), duration, args.threads, len(VALUE),
              os.cpu_count(), os.getloadavg()[0]))
    if "quorum" in kinds:
        print("quorum binary: %s" % qbin)
    sys.stdout.flush()
    results = {}
    for case in cases:
        for kind in kinds:
            r = run_one(case, kind, duration, args.threads, put_scale)
            results[(case.name, kind)] = r
            print(fmt_result(r))
            for p in r.problems:
                print("WARNING %s %s INVALID: %s" % (case.name, kind, p))
            for n in r.notes:
                print("note %s %s: %s" % (case.name, kind, n))
            for name, lines in sorted(r.trouble.items()):
                print("note %s %s: %s logged %d warning/error line(s) during the run, e.g.:"
                      % (case.name, kind, name, len(lines)))
                for ln in lines[:2]:
                    print("    " + ln[:300])
            sys.stdout.flush()
        if len(kinds) == 2:
            print(fmt_ratio(case.name, results.get((case.name, "quorum")),
                            results.get((case.name, "etcd"))))
            sys.stdout.flush()
    print_targets(results, kinds)
    print("load average at the end: %.2f (other load on the machine skews the numbers)"
          % os.getloadavg()[0])
    return 1 if any(not r.valid for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
