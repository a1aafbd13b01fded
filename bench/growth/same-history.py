#!/usr/bin/python3
"""same-history: the big requests of growth-bench on one history, etcd
3.4's and quorum's, and their HashKV compared.

etcd 3.4 loads --keys keys in key order, then random updates up to
--revisions revisions (bench/load/qbench, as growth-bench.py), and stops.
quorum starts on a copy of etcd's data dir with etcd's flags and converts
it (server/etcd_import.c): both now hold the same revisions. Then each
server, one after the other:

  compact   a physical Compact to the current revision, SIGKILL
            --kill-after seconds into it, start again, until the
            compaction is logged finished; HashKV at the current revision
            (that one)
  delete    a DeleteRange of every key, killed the same way, start again
            (and delete again if the kill came before it was committed);
            HashKV at the revision after it

It prints, per case, the seconds from the restart to finished and both
servers' HashKV, and whether they are equal. A measurement, not a test:
nothing is asserted but that the members come back and finish.

    QUORUM_BIN=build-bench/src/server/quorum QBENCH_BIN=build-bench/bench/load/qbench \\
        /usr/bin/python3 bench/growth/same-history.py [--keys N] [--revisions N]
"""
import argparse
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("growth_bench",
                                               os.path.join(HERE, "growth-bench.py"))
gb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gb)

harness = gb.harness
rpc_pb2, rpc_pb2_grpc, grpc = gb.rpc_pb2, gb.rpc_pb2_grpc, gb.grpc


def hash_at(srv, rev):
    mt = rpc_pb2_grpc.MaintenanceStub(grpc.insecure_channel(srv.endpoint))
    r = mt.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=1800)
    return r.hash, r.compact_revision


def big_cases(srv, a):
    """The two cases on a stopped |srv|: returns its figures."""
    r = {}
    gb.start_until_read(srv, 3600)
    kv = gb.kv_stub(srv)
    top = gb.current_rev(srv)
    r["revision before"] = top
    print("[%s] compacting to revision %d, killed %.2f s in" % (srv.kind, top, a.kill_after),
          flush=True)
    gb.kill_during(srv, lambda: kv.Compact(rpc_pb2.CompactionRequest(
        revision=top, physical=True), timeout=7200), a.kill_after)
    t0 = time.monotonic()
    gb.start_until_read(srv, 3600)
    gb.wait_log(srv, r"finished scheduled compaction.*%d" % top, 3600)
    r["compact, restart to finished (s)"] = time.monotonic() - t0
    # at the current revision (the compacted one itself is refused)
    r["HashKV after the compaction"], r["compact revision"] = hash_at(srv, 0)

    print("[%s] deleting every key, killed %.2f s in" % (srv.kind, a.kill_after), flush=True)
    kv = gb.kv_stub(srv)
    gb.kill_during(srv, lambda: kv.DeleteRange(rpc_pb2.DeleteRangeRequest(
        key=b"\0", range_end=b"\0"), timeout=7200), a.kill_after)
    t0 = time.monotonic()
    gb.start_until_read(srv, 3600)
    kv = gb.kv_stub(srv)
    if srv.kind == "quorum":
        # a resumed entry answers reads before it is done: wait for its end
        m = re.search(r"resuming entry (\d+) \(DeleteRangeRequest\)", srv.log_tail(10 ** 9))
        if m:
            gb.wait_log(srv, r"applied entry %s \(DeleteRangeRequest\)" % m.group(1), 3600)
    left = kv.Range(rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", count_only=True),
                    timeout=600).count
    r["delete: committed before the kill"] = int(left == 0)
    if left:
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"\0", range_end=b"\0"), timeout=7200)
    r["delete, restart to finished (s)"] = time.monotonic() - t0
    end = gb.current_rev(srv)
    r["revision after"] = end
    r["HashKV after the delete"] = hash_at(srv, end)[0]
    srv.stop()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--revisions", type=int, default=10000000)
    ap.add_argument("--kill-after", type=float, default=1.0)
    a = ap.parse_args()
    extra = ["--quota-backend-bytes", str(16 << 30)]
    e = harness.Server("etcd", extra_args=extra)
    q = None
    try:
        e.start()
        print("[etcd] loading %d keys, %d revisions" % (a.keys, a.revisions), flush=True)
        gb.load_history(e.endpoint, a)
        e.stop()
        qdir = os.path.join(e.tmp, "quorum-copy")
        shutil.copytree(e.data_dir, qdir, symlinks=True)
        q = harness.Server("quorum", name=e.name, data_dir=qdir, extra_args=extra,
                           log=os.path.join(e.tmp, "quorum.log"))
        print("[quorum] converting etcd's data dir", flush=True)
        t0 = time.monotonic()
        gb.start_until_read(q, 3600)
        convert = time.monotonic() - t0
        q.stop()
        res = {"etcd": big_cases(e, a), "quorum": big_cases(q, a)}
    finally:
        if q is not None and q.proc is not None and q.proc.poll() is None:
            q.kill()
        e.cleanup()
    print("\nsame-history: %d keys, %d revisions; quorum converted etcd's data dir in %.1f s"
          % (a.keys, a.revisions, convert))
    print("%-40s %14s %14s" % ("", "etcd", "quorum"))
    for n in res["etcd"]:
        fmt = lambda v: ("%14.2f" % v) if isinstance(v, float) else "%14d" % v
        print("%-40s %s %s" % (n, fmt(res["etcd"][n]), fmt(res["quorum"][n])))
    for n in ("HashKV after the compaction", "HashKV after the delete"):
        print("%s: %s" % (n, "equal" if res["etcd"][n] == res["quorum"][n] else "DIFFERENT"))


if __name__ == "__main__":
    main()
