"""cores-bench: throughput as the cores grow, quorum beside etcd 3.4.

For each N in --cores, each server (etcd, then quorum; one at a time, fresh
data dirs) is started pinned to N CPUs (taskset) and driven by h2load
pinned to the other CPUs (to the same ones when the server has them all),
posting the identical framed gRPC request. Per case it prints req/s, the
cores the server used (its CPU seconds / wall seconds), how many of its
threads did work (over 10% of a core), and quorum/etcd.

    /usr/bin/python3 bench/cores/cores-bench.py                   # N = 1, 2, 4, ... up to the CPUs
    /usr/bin/python3 bench/cores/cores-bench.py --cores 1,8 --members 3
    /usr/bin/python3 bench/cores/cores-bench.py --cases range-ser --duration 10

--members 3 starts three members, each pinned to its own N CPUs (wrapping
on a small machine), and sends Put to the leader, Range to a follower.
Cases: put (Put of a 100-byte value), range-ser (serializable Range of one
key), range-lin (linearizable Range of one key). h2load: -c 64 -m 16 and one
thread per load CPU, as the issue's table. quorum runs with its default
--front-loops (auto: from the CPUs it may run on); --quorum-args adds
flags. Needs h2load, etcd/etcdctl 3.4 and python3-etcd3; the quorum binary
at build-rel/src/server/quorum, else build/ (or $QUORUM_BIN).

On a machine without the Debian packages, carry the binaries (quorum,
etcd, h2load) and the libraries ldd lists into an ignored folder and set
LD_LIBRARY_PATH, QUORUM_BIN, ETCD_BIN and H2LOAD (see README.md here).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.dirname(HERE))

import harness  # noqa: E402
from cluster import Cluster  # noqa: E402
from benchutil import framed, parse_h2load  # noqa: E402

from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import grpc  # noqa: E402


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


def cpu_ticks(pid):
    """{tid: utime+stime ticks} of every thread of |pid|."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return out


CASES = {
    "put": ("/etcdserverpb.KV/Put", rpc_pb2.PutRequest(key=b"bench/put", value=b"v" * 100)),
    "range-ser": ("/etcdserverpb.KV/Range", rpc_pb2.RangeRequest(key=b"bench/one",
                                                                  serializable=True)),
    "range-lin": ("/etcdserverpb.KV/Range", rpc_pb2.RangeRequest(key=b"bench/one")),
}


def pin(member_or_server, cpus):
    orig = member_or_server.args
    member_or_server.args = lambda: ["taskset", "-c", ",".join(map(str, cpus))] + orig()


def run_h2load(endpoint, path, body, duration, cpus, workdir):
    data = os.path.join(workdir, "req.bin")
    with open(data, "wb") as f:
        f.write(body)
    h2 = os.environ.get("H2LOAD", "h2load")
    cmd = ["taskset", "-c", ",".join(map(str, cpus)), h2, "-D", str(duration),
           "-t", str(len(cpus)), "-c", "64", "-m", "16", "-d", data,
           "-H", "content-type: application/grpc", "-H", "te: trailers",
           "http://%s%s" % (endpoint, path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError("h2load exited %d: %s" % (r.returncode, (r.stdout + r.stderr)[-800:]))
    return parse_h2load(r.stdout)


def measure(pids, fn):
    before = {p: cpu_ticks(p) for p in pids}
    t0 = time.time()
    res = fn()
    wall = time.time() - t0
    hz = os.sysconf("SC_CLK_TCK")
    used = 0.0
    busy = 0
    for p in pids:
        after = cpu_ticks(p)
        for tid, t in after.items():
            d = (t - before[p].get(tid, 0)) / hz
            used += d
            if d > 0.1 * wall:
                busy += 1
    return res, used / wall, busy


def one(kind, n, members, cases, duration, extra):
    cpus = allowed_cpus()
    total = len(cpus)
    rows = {}
    if members == 1:
        srv = harness.Server(kind, extra_args=extra if kind == "quorum" else ())
        server_cpus = [cpus[i % total] for i in range(n)]
        pin(srv, server_cpus)
        srv.start(timeout=60)
        pids = [srv.proc.pid]
        ep_write = ep_read = srv.endpoint
        used_cpus = set(server_cpus)
        cleanup = srv.cleanup
    else:
        c = Cluster(kind, n=members, extra_args=extra if kind == "quorum" else ())
        used_cpus = set()
        for i, m in enumerate(c.members):
            mc = [cpus[(i * n + k) % total] for k in range(n)]
            used_cpus.update(mc)
            pin(m, mc)
        c.start(timeout=90)
        lead = c.leader_index()
        follower = (lead + 1) % members
        pids = [m.proc.pid for m in c.members]
        ep_write = c.endpoint(lead)
        ep_read = c.endpoint(follower)
        cleanup = c.cleanup
    try:
        ch = grpc.insecure_channel(ep_write)
        rpc_pb2_grpc.KVStub(ch).Put(rpc_pb2.PutRequest(key=b"bench/one", value=b"v" * 100),
                                    timeout=10)
        time.sleep(0.5)  # followers apply it
        load_cpus = [x for x in cpus if x not in used_cpus] or cpus
        with tempfile.TemporaryDirectory() as wd:
            for case in cases:
                path, req = CASES[case]
                ep = ep_write if case == "put" else ep_read
                summary, used, busy = measure(
                    pids, lambda: run_h2load(ep, path, framed(req), duration, load_cpus, wd))
                bad = summary["failed"] + summary["errored"] + summary["timeout"]
                rows[case] = (summary["rps"], used, busy, bad)
    finally:
        cleanup()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", default=None, help="comma list of N (default 1, 2, 4, ...)")
    ap.add_argument("--members", type=int, default=1, choices=(1, 3))
    ap.add_argument("--cases", default="put,range-ser,range-lin")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--only", choices=("quorum", "etcd"))
    ap.add_argument("--quorum-args", default="")
    a = ap.parse_args()
    total = len(allowed_cpus())
    if a.cores:
        ns = [int(x) for x in a.cores.split(",")]
    else:
        ns, k = [], 1
        while k <= total:
            ns.append(k)
            k *= 2
        if ns[-1] != total:
            ns.append(total)
    cases = a.cases.split(",")
    kinds = [a.only] if a.only else ["etcd", "quorum"]
    print("cores-bench: %d CPUs, %s member(s), h2load -c64 -m16, %d s per case"
          % (total, a.members, a.duration))
    print("%-5s %-10s %-30s %-30s %s" % ("N", "case", "etcd req/s (cores, threads)",
                                         "quorum req/s (cores, threads)", "quorum/etcd"))
    status = 0
    for n in ns:
        res = {}
        for kind in kinds:
            try:
                res[kind] = one(kind, n, a.members, cases, a.duration, a.quorum_args.split())
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print("cores-bench: %s with %d cores failed: %s" % (kind, n, e))
                status = 1
        for case in cases:
            cols = []
            for kind in ("etcd", "quorum"):
                r = res.get(kind, {}).get(case)
                if r is None:
                    cols.append("-")
                    continue
                cols.append("%.0f (%.2f, %d)%s" % (r[0], r[1], r[2],
                                                   " %d failed" % r[3] if r[3] else ""))
                if r[3]:
                    status = 1
            e, q = res.get("etcd", {}).get(case), res.get("quorum", {}).get(case)
            ratio = "x%.1f" % (q[0] / e[0]) if e and q and e[0] > 0 else "-"
            print("%-5s %-10s %-30s %-30s %s" % (n, case, cols[0], cols[1], ratio))
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
