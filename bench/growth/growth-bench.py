#!/usr/bin/python3
"""growth-bench: what a big history costs, quorum and etcd 3.4 in one run.

Each kind gets a fresh single member (tests/integration/harness.py). On it:

  load      --keys keys of 32 bytes with 100-byte values in key order, then
            updates of random keys up to --revisions revisions in all
            (bench/load/qbench, 10 connections x 100 clients, as etcd's
            benchmark tool)
  disk      the data dir's allocated bytes after the load
  restart   SIGTERM, start, until a serializable Range answers
  memory    RSS split into anonymous memory and mapped file pages, after
            the load and after the restart
  count     a count_only Range over every key
  reads     random serializable single-key Ranges over the keys
  leases    --leases leases of 15 s granted, a key put with each (qbench
            lease-put, 10 connections x 100 clients; keys of their own,
            "L<n>"): the grant rate; then, while they expire (both servers
            revoke at most 1,000 a second), the one-connection probe's
            longest wait, until every leased key is gone
  compact   while a put load, a read load and a one-connection probe run
            (the probe: one serializable Range, then 10 ms pause, repeated),
            a physical Compact of half the revisions, then a Defragment: each
            one's duration, the probe's longest wait and the number of
            requests that failed (a request's deadline is 5 s)
  big       a physical Compact to the current revision, the member killed
            with SIGKILL a second into it and started again (the restart
            must finish it; etcd resumes a scheduled compaction too), then
            a DeleteRange of the prefix holding every key, killed the same
            way; the member must come back, finish, and answer. quorum
            writes that revision in steps (--apply-step-limit changes per
            LMDB transaction, its default 100000 when not given): the
            figures say how much the kill left committed, how many steps
            the resumed entry took and when it finished

  cluster   (--cluster) three members: the same load, then the compaction of
            half the revisions while a put load on the leader and a read
            load and a probe on a follower run: leader changes, failures,
            the probe's longest wait, and whether every member's HashKV
            agrees afterwards

and it prints every figure side by side with quorum/etcd ratios. The
targets of the big-data issue are checked at the end (printed, not
asserted: this is a measurement).

    QUORUM_BIN=build-bench/src/server/quorum QBENCH_BIN=build-bench/bench/load/qbench \\
        /usr/bin/python3 bench/growth/growth-bench.py [--keys N] [--revisions N]

The full size (1M keys, 10M revisions) takes about an hour on two cores,
most of it etcd's load and restart; --keys 100000 --revisions 1000000 is a
quick look.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import benchutil  # noqa: E402
import harness  # noqa: E402

QB_LINE = re.compile(r"qbench \S+: (\d+) ok, (\d+) failed, ([\d.]+)s, (\d+) req/s, latency ms "
                     r"p50 ([\d.]+) p90 ([\d.]+) p99 ([\d.]+) p99.9 ([\d.]+) max ([\d.]+)")


def qbench_bin():
    b = os.environ.get("QBENCH_BIN")
    if not b:
        build = os.path.dirname(os.path.dirname(os.path.dirname(harness.quorum_binary())))
        b = os.path.join(build, "bench", "load", "qbench")
    if not os.path.exists(b):
        raise RuntimeError("qbench not found at %s (set QBENCH_BIN)" % b)
    return b


def qbench_args(ep, *args):
    return [qbench_bin(), "--endpoints", ep, "--key-size", "32", "--val-size", "100"] + list(args)


def parse_qbench(out):
    m = QB_LINE.search(out)
    if not m:
        raise RuntimeError("cannot parse qbench output: %s" % out[-1000:])
    ok, failed, secs, rps = int(m.group(1)), int(m.group(2)), float(m.group(3)), int(m.group(4))
    return {"ok": ok, "failed": failed, "secs": secs, "rps": rps, "p99": float(m.group(7)),
            "max": float(m.group(9))}


def qbench(ep, *args, timeout=7200):
    r = subprocess.run(qbench_args(ep, *args), capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    res = parse_qbench(r.stdout)
    if r.returncode != 0 and res["failed"] == 0:
        raise RuntimeError("qbench failed: %s" % (r.stdout + r.stderr)[-1000:])
    return res


class Background:
    """A qbench run that goes on until stop() (SIGTERM: it prints and exits)."""

    def __init__(self, ep, *args):
        self.p = subprocess.Popen(qbench_args(ep, "--duration", "36000", "--timeout-ms", "5000",
                                              *args),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        out, err = self.p.communicate(timeout=60)
        return parse_qbench(out)


def load_history(ep, a):
    """--keys puts in key order, then random updates up to --revisions:
    returns the two rates (puts/s)."""
    x = qbench(ep, "--conns", "10", "--clients", "100", "--total", str(a.keys),
               "--key-space", str(a.keys), "--sequential-keys", "put")
    if a.revisions <= a.keys:
        return x["rps"], None
    y = qbench(ep, "--conns", "10", "--clients", "100", "--total", str(a.revisions - a.keys),
               "--key-space", str(a.keys), "put")
    return x["rps"], y["rps"]


class Loads:
    """A put load on |wep|, and a read load and the one-connection probe on
    |rep|, until stop(): which returns (puts, reads, probe) results."""

    def __init__(self, wep, rep, keys):
        self.runs = [
            Background(wep, "--conns", "2", "--clients", "10", "--key-space", str(keys), "put"),
            Background(rep, "--conns", "2", "--clients", "10", "--key-space", str(keys),
                       "--no-preload", "range", "--consistency", "s"),
            Background(rep, "--conns", "1", "--clients", "1", "--pause-ms", "10",
                       "--key-space", "1", "--no-preload", "range", "--consistency", "s"),
        ]

    def stop(self):
        return tuple(b.stop() for b in self.runs)


def disk_bytes(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return total


def memory(pid):
    return {"anon": benchutil.status_kib(pid, "RssAnon") * 1024,
            "mapped": benchutil.status_kib(pid, "RssFile") * 1024}


def kv_stub(srv):
    return rpc_pb2_grpc.KVStub(grpc.insecure_channel(srv.endpoint))


def current_rev(srv):
    return kv_stub(srv).Range(rpc_pb2.RangeRequest(key=b"\0", serializable=True),
                              timeout=60).header.revision


def start_until_read(srv, timeout):
    """Starts |srv| and returns the seconds until a serializable Range answers."""
    t0 = time.monotonic()
    env = dict(os.environ)
    srv.log_file = open(srv.log_path, "ab")
    srv.proc = subprocess.Popen(srv.args(), stdout=srv.log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    while time.monotonic() - t0 < timeout:
        if srv.proc.poll() is not None:
            raise RuntimeError("%s exited %s while starting:\n%s" % (srv.kind, srv.proc.returncode,
                                                                   srv.log_tail()))
        # a fresh channel each time: a channel whose connect failed waits
        # out gRPC's reconnect backoff (1 s, then longer) before trying again
        ch = grpc.insecure_channel(srv.endpoint)
        try:
            rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"probe", serializable=True),
                                          timeout=1)
            return time.monotonic() - t0
        except grpc.RpcError:
            time.sleep(0.05)
        finally:
            ch.close()
    raise RuntimeError("%s did not answer within %ds" % (srv.kind, timeout))


def wait_log(srv, pattern, timeout):
    """Waits until the member's log has a line matching |pattern| (after the
    last start), returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        tail = srv.log_tail(200000)
        if re.search(pattern, tail):
            return time.monotonic() - t0
        if srv.proc.poll() is not None:
            raise RuntimeError("%s exited %s:\n%s" % (srv.kind, srv.proc.returncode,
                                                      srv.log_tail()))
        time.sleep(0.2)
    raise RuntimeError("%s: no log line /%s/ within %ds" % (srv.kind, pattern, timeout))


def kill_during(srv, call, after):
    """Runs |call| (a blocking request) and kills the member with SIGKILL
    |after| seconds into it; returns whether the call finished first."""
    import threading
    done = threading.Event()

    def run():
        try:
            call()
        except grpc.RpcError:
            pass
        done.set()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    finished = done.wait(after)
    srv.kill()
    t.join(30)
    return finished


def lease_storm(srv, a, r):
    """The leases phase: grants with a key each, then the probe while they
    expire."""
    ep = srv.endpoint
    x = qbench(ep, "--conns", "10", "--clients", "100", "--total", str(a.leases),
               "--key-space", str(a.leases), "--sequential-keys", "--key-prefix", "L",
               "--ttl", "15", "lease-put")
    r["lease grants with a key (per s)"] = x["rps"]
    probe = Background(ep, "--conns", "1", "--clients", "1", "--pause-ms", "10",
                       "--key-space", "1", "--no-preload", "range", "--consistency", "s")
    kv = kv_stub(srv)
    t0 = time.monotonic()
    left = -1
    while time.monotonic() - t0 < 15 + a.leases / 1000 + 120:
        left = kv.Range(rpc_pb2.RangeRequest(key=b"L", range_end=b"M", count_only=True,
                                             serializable=True), timeout=60).count
        if left == 0:
            break
        time.sleep(0.5)
    pr = probe.stop()
    r["leases: expiry until no key left (s)"] = time.monotonic() - t0
    r["leases: leased keys left"] = left
    r["leases: probe's longest wait (ms)"] = pr["max"]
    r["leases: failed requests"] = pr["failed"] + x["failed"]


def run_kind(kind, a):
    r = {}
    extra = ["--quota-backend-bytes", str(16 << 30)]
    if kind == "quorum" and a.apply_step_limit:
        extra += ["--experimental-apply-step-limit", str(a.apply_step_limit)]
    srv = harness.Server(kind, extra_args=extra)
    try:
        srv.start()
        ep = srv.endpoint
        print("[%s] loading %d keys, %d revisions" % (kind, a.keys, a.revisions), flush=True)
        r["load keys (puts/s)"], r["load updates (puts/s)"] = load_history(ep, a)
        rev = current_rev(srv)
        r["disk after load (MB)"] = disk_bytes(srv.data_dir) / 1e6
        m = memory(srv.proc.pid)
        r["anon memory after load (MB)"] = m["anon"] / 1e6
        r["mapped memory after load (MB)"] = m["mapped"] / 1e6

        print("[%s] restarting" % kind, flush=True)
        srv.stop()
        r["restart (s)"] = start_until_read(srv, 1800)
        m = memory(srv.proc.pid)
        r["anon memory after restart (MB)"] = m["anon"] / 1e6
        r["mapped memory after restart (MB)"] = m["mapped"] / 1e6
        r["anon bytes per key after restart"] = m["anon"] / a.keys
        r["anon bytes per revision after restart"] = m["anon"] / a.revisions

        kv = kv_stub(srv)
        t0 = time.monotonic()
        n = kv.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", count_only=True,
                                          serializable=True), timeout=600).count
        r["count all keys (s)"] = time.monotonic() - t0
        if n != a.keys:
            raise RuntimeError("%s counts %d keys, not %d" % (kind, n, a.keys))
        x = qbench(ep, "--conns", "10", "--clients", "100", "--total", str(a.reads),
                   "--key-space", str(a.keys), "--no-preload", "range", "--consistency", "s")
        r["random reads (req/s)"] = x["rps"]
        r["random reads p99 (ms)"] = x["p99"]
        if a.leases:
            print("[%s] %d leases with a key each, then their expiry" % (kind, a.leases),
                  flush=True)
            lease_storm(srv, a, r)
        if a.stop_after_leases:
            return r

        print("[%s] compacting half the revisions under load" % kind, flush=True)
        mt = rpc_pb2_grpc.MaintenanceStub(grpc.insecure_channel(ep))
        loads = Loads(ep, ep, a.keys)
        time.sleep(2)
        t0 = time.monotonic()
        kv.Compact(rpc_pb2.CompactionRequest(revision=rev // 2, physical=True), timeout=7200)
        r["compact half (s)"] = time.monotonic() - t0
        time.sleep(1)
        t0 = time.monotonic()
        mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=7200)
        r["defrag (s)"] = time.monotonic() - t0
        time.sleep(1)
        p, rd, pr = loads.stop()
        r["probe's longest wait (ms)"] = pr["max"]
        r["failed requests"] = p["failed"] + rd["failed"] + pr["failed"]
        r["puts meanwhile (req/s)"] = p["rps"]
        r["reads meanwhile (req/s)"] = rd["rps"]
        r["disk after defrag (MB)"] = disk_bytes(srv.data_dir) / 1e6

        if not a.skip_big:
            print("[%s] compacting to the current revision, killed %.2f s in"
                  % (kind, a.kill_after), flush=True)
            top = current_rev(srv)
            kill_during(srv, lambda: kv.Compact(rpc_pb2.CompactionRequest(
                revision=top, physical=True), timeout=7200), a.kill_after)
            t0 = time.monotonic()
            start_until_read(srv, 1800)
            # both log etcd's line (quorum's fields: compact-revision,
            # removed-revisions, steps, longest-step)
            done = r"finished scheduled compaction.*%d" % top
            wait_log(srv, done, 3600)
            r["full compact, restart to finished (s)"] = time.monotonic() - t0
            if kind == "quorum":
                m = re.search(r"finished scheduled compaction .*\"compact-revision\": %d, .*"
                              r"\"removed-revisions\": (\d+), \"steps\": (\d+)"
                              % top, srv.log_tail(200000))
                if m:
                    r["full compact: revisions dropped"] = int(m.group(1))
                    r["full compact: steps"] = int(m.group(2))
            print("[%s] deleting every key, killed %.2f s in" % (kind, a.kill_after), flush=True)
            kv = kv_stub(srv)
            before = len(srv.log_tail(10 ** 9))
            r["delete every key: finished before the kill"] = int(kill_during(
                srv, lambda: kv.DeleteRange(rpc_pb2.DeleteRangeRequest(
                    key=b"\0", range_end=b"\0"), timeout=7200), a.kill_after))
            t0 = time.monotonic()
            r["delete every key, restart to answered (s)"] = start_until_read(srv, 1800)
            if kind == "quorum":
                # the entry is applied again from the log and resumes the
                # partial revision where the last committed step left it
                log = srv.log_tail(10 ** 9)[before:]
                m = re.search(r"resuming entry (\d+) \(DeleteRangeRequest\): revision \d+ has "
                              r"(\d+) changes committed", log)
                r["delete every key: changes committed before the kill"] = \
                    int(m.group(2)) if m else 0
                if m:
                    wait_log(srv, r"applied entry %s \(DeleteRangeRequest\) at revision \d+ in "
                             r"\d+ steps" % m.group(1), 3600)
            kv = kv_stub(srv)
            left = kv.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", count_only=True),
                            timeout=600).count
            r["delete every key: keys left after the restart"] = left
            if left:  # the kill came before the delete was committed: again
                t1 = time.monotonic()
                kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"\0", range_end=b"\0"),
                               timeout=7200)
                r["delete every key (s)"] = time.monotonic() - t1
            r["delete every key, restart to finished (s)"] = time.monotonic() - t0
            if kind == "quorum":
                m = re.findall(r"applied entry \d+ \(DeleteRangeRequest\) at revision \d+ in "
                               r"(\d+) steps", srv.log_tail(10 ** 9)[before:])
                r["delete every key: steps after the restart"] = int(m[-1]) if m else 1
    finally:
        srv.cleanup()
    return r


def distinct_hashes(endpoints, rev, tries=300):
    """How many different HashKV at |rev| the members at |endpoints| give
    (a member that has not applied |rev| yet is asked again)."""
    hashes = set()
    for ep in endpoints:
        mt = rpc_pb2_grpc.MaintenanceStub(grpc.insecure_channel(ep))
        for _ in range(tries):
            try:
                hashes.add(mt.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=600).hash)
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.OUT_OF_RANGE:
                    raise
                time.sleep(0.1)
    return len(hashes)


def run_cluster(kind, a):
    """Three members (heartbeat 100 ms, election 1 s, as etcd's defaults):
    the load, then the compaction of half the revisions while a put load on
    the leader, a read load and a probe on a follower run; leader changes,
    failures, the probe's longest wait, and whether every member's HashKV
    agrees afterwards."""
    import cluster
    r = {}
    c = cluster.Cluster(kind, n=3, extra_args=["--quota-backend-bytes", str(16 << 30)],
                        heartbeat_ms=100, election_ms=1000)
    try:
        c.start()
        lead = c.wait_leader()
        follower = (lead + 1) % 3
        ep, fep = c.endpoint(lead), c.endpoint(follower)
        print("[%s x3] loading %d keys, %d revisions" % (kind, a.keys, a.revisions), flush=True)
        r["3 members: load updates (puts/s)"] = load_history(ep, a)[1]
        term = c.status(lead)["header"]["raft_term"]
        kv = rpc_pb2_grpc.KVStub(grpc.insecure_channel(ep))
        rev = kv.Range(rpc_pb2.RangeRequest(key=b"\0", serializable=True),
                       timeout=60).header.revision
        loads = Loads(ep, fep, a.keys)
        time.sleep(2)
        print("[%s x3] compacting half the revisions under load" % kind, flush=True)
        t0 = time.monotonic()
        kv.Compact(rpc_pb2.CompactionRequest(revision=rev // 2, physical=True), timeout=7200)
        r["3 members: compact half (s)"] = time.monotonic() - t0
        time.sleep(2)
        p, rd, pr = loads.stop()
        r["3 members: probe's longest wait (ms)"] = pr["max"]
        r["3 members: failed requests"] = p["failed"] + rd["failed"] + pr["failed"]
        r["3 members: leader changes"] = int(c.leader_index() != lead or
                                             c.status(lead)["header"]["raft_term"] != term)
        top = kv.Range(rpc_pb2.RangeRequest(key=b"\0"), timeout=60).header.revision
        r["3 members: distinct HashKV afterwards"] = distinct_hashes(
            [c.endpoint(i) for i in range(3)], top)
    finally:
        c.cleanup()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--revisions", type=int, default=10000000)
    ap.add_argument("--reads", type=int, default=200000)
    ap.add_argument("--kinds", default="quorum,etcd")
    ap.add_argument("--leases", type=int, default=100000,
                    help="leases of the leases phase (0: none)")
    ap.add_argument("--stop-after-leases", action="store_true",
                    help="end each kind's run after the leases phase (no compaction, no "
                         "kill -9 cases)")
    ap.add_argument("--skip-big", action="store_true", help="leave out the kill -9 cases")
    ap.add_argument("--kill-after", type=float, default=1.0,
                    help="seconds into the big requests when the member is killed (less at "
                    "reduced sizes, so that the kill lands in the middle)")
    ap.add_argument("--apply-step-limit", type=int, default=0,
                    help="quorum's --experimental-apply-step-limit (default: its own, 100000)")
    ap.add_argument("--cluster", action="store_true",
                    help="also the compaction case on three members")
    ap.add_argument("--cluster-kinds", default=None,
                    help="which servers run the three-member case (default: --kinds)")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    res = {k: run_kind(k, a) for k in kinds}
    if a.cluster:
        for k in (a.cluster_kinds or a.kinds).split(","):
            res[k].update(run_cluster(k, a))
    print("\ngrowth-bench: %d keys, %d revisions%s" % (
        a.keys, a.revisions, ", quorum's apply step limit %d" % a.apply_step_limit
        if a.apply_step_limit else ""))
    names = list(res[kinds[0]].keys())
    print("%-44s %14s %14s %9s" % ("", kinds[0], kinds[1] if len(kinds) > 1 else "", "ratio"))
    for n in names:
        q = res[kinds[0]].get(n)
        e = res[kinds[1]].get(n) if len(kinds) > 1 else None
        ratio = "x%.2f" % (q / e) if q is not None and e else ""
        fmt = lambda v: "" if v is None else ("%14.2f" % v if isinstance(v, float) else "%14d" % v)
        print("%-44s %s %s %9s" % (n, fmt(q), fmt(e), ratio))
    if "quorum" in res:
        q = res["quorum"]
        print("\ntargets (quorum):")

        def target(text, key, ok, fmt):
            if key in q:
                print("  %-60s %s (%s)" % (text, "met" if ok(q[key]) else "NOT MET",
                                            fmt % q[key]))
        target("probe's longest wait < 100 ms during compaction and defrag",
               "probe's longest wait (ms)", lambda v: v < 100, "%.1f ms")
        target("no failed request during compaction and defrag", "failed requests",
               lambda v: v == 0, "%d")
        target("restart < 5 s", "restart (s)", lambda v: v < 5, "%.1f s")
        target("probe's longest wait < 100 ms while leases expire",
               "leases: probe's longest wait (ms)", lambda v: v < 100, "%.1f ms")
        if a.cluster:
            ok = (q["3 members: failed requests"] == 0 and q["3 members: leader changes"] == 0
                  and q["3 members: distinct HashKV afterwards"] == 1)
            print("  %-60s %s" % ("3 members: no failure, no leader change, equal HashKV",
                                  "met" if ok else "NOT MET"))

if __name__ == "__main__":
    main()
