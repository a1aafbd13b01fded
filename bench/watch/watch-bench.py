#!/usr/bin/python3
"""watch-bench: watch fan-out, quorum vs etcd 3.4, with a no-loss check.

Per server (fresh single-member server each, one after the other, never at
the same time): grpc-stream-client opens W watchers on the prefix
bench/watch/ (spread over S Watch streams), all with start_revision = the
store revision + 1, and waits until every watcher is created. Then h2load
posts exactly N framed PutRequests to bench/watch/k (-c 10 -m 10), so every
watcher must receive exactly N events, revisions R+1 .. R+N, in order. The
client counts them per watcher and reports gaps, duplicates and out-of-order
events. Printed per server: events delivered per second (first to last
event), put req/s while watched, min/max events per watcher, loss check,
peak RSS; then the ratio quorum/etcd and the target (events/s >= 3x etcd
with no loss).

Run with /usr/bin/python3 (Debian's python3-etcd3 / python3-grpcio).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: benchutil

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import benchutil  # noqa: E402
import harness  # noqa: E402

PREFIX = b"bench/watch/"
PUT_KEY = PREFIX + b"k"
VALUE = b"v" * 100


class Result:
    def __init__(self, kind):
        self.kind = kind
        self.client = None      # the client's JSON
        self.puts = None        # h2load summary
        self.rss_kib = None
        self.anon_kib = None
        self.srv_cpu = None
        self.problems = []
        self.failed = None

    @property
    def valid(self):
        return self.failed is None and not self.problems and self.client is not None


def run_one(kind, args, client_bin):
    r = Result(kind)
    workdir = tempfile.mkdtemp(prefix="watch-bench-")
    server = harness.Server(kind)
    client = None
    try:
        server.start()
        channel = grpc.insecure_channel(server.endpoint)
        kv = rpc_pb2_grpc.KVStub(channel)
        rev0 = kv.Range(rpc_pb2.RangeRequest(key=PUT_KEY), timeout=10).header.revision
        port = server.endpoint.rsplit(":", 1)[1]
        client = subprocess.Popen(
            [client_bin, "watch", "--port", port, "--watchers", str(args.watchers),
             "--streams", str(args.streams), "--conns", str(args.conns),
             "--prefix", PREFIX.decode(), "--events", str(args.puts),
             "--start-rev", str(rev0 + 1), "--idle-timeout", str(args.idle_timeout)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        got = benchutil.wait_line(client, "READY", 60)
        if got is None or int(got[0].split()[1]) != args.watchers:
            raise RuntimeError("not all watchers were created: %r %s" % (
                got and got[0], client.stderr.read().decode(errors="replace")[-500:]))
        leftover = got[1]
        cpu0 = benchutil.cpu_seconds(server.proc.pid)
        r.puts = benchutil.h2load(server.endpoint, "/etcdserverpb.KV/Put",
                                  benchutil.framed(rpc_pb2.PutRequest(key=PUT_KEY, value=VALUE)),
                                  args.puts, 10, 10, workdir)
        out, err = client.communicate(timeout=args.puts / 100 + 120)
        cpu1 = benchutil.cpu_seconds(server.proc.pid)
        r.rss_kib = server.peak_rss_kib()
        r.anon_kib = benchutil.status_kib(server.proc.pid, "RssAnon")
        lines = (leftover + out).decode(errors="replace").strip().splitlines()
        if not lines or not lines[-1].startswith("{"):
            raise RuntimeError("client printed no result (exit %d): %s" % (
                client.returncode, err.decode(errors="replace")[-500:]))
        r.client = json.loads(lines[-1])
        # per second of the client's wait for the events (READY to the last
        # watcher complete), which leaves out its --grace second of idling
        r.srv_cpu = (cpu1 - cpu0) / max(r.client["wait_secs"], 1e-3)
        rev1 = kv.Range(rpc_pb2.RangeRequest(key=PUT_KEY), timeout=10).header.revision
        if r.puts["succeeded"] != args.puts:
            r.problems.append("h2load: %d of %d puts succeeded (%d failed, %d errored)" % (
                r.puts["succeeded"], args.puts, r.puts["failed"], r.puts["errored"]))
        if rev1 - rev0 != args.puts:
            r.problems.append("revision grew by %d, expected %d" % (rev1 - rev0, args.puts))
        if not r.client["no_loss"]:
            c = r.client
            r.problems.append("LOSS: missing=%d gaps=%d duplicates=%d out_of_order=%d "
                              "canceled=%d compacted=%d stream_errors=%d %s" % (
                                  c["missing"], c["gaps"], c["duplicates"], c["out_of_order"],
                                  c["canceled"], c["compacted"], c["stream_errors"], c["error"]))
        channel.close()
    except Exception as e:
        r.failed = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e) else "")
    finally:
        if client and client.poll() is None:
            os.kill(client.pid, 9)
            client.wait()
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return r


def fmt_result(name, r):
    head = "%-13s %-6s " % (name, r.kind)
    if r.failed:
        return head + "FAILED: " + r.failed
    c = r.client
    line = head + "events/s=%8.0f  puts/s=%6.0f  per-watcher min/max=%d/%d of %d  loss=%s  " \
        "rss=%6.1fMiB (anon=%5.1fMiB)  cpu(server/client)=%3.0f%%/%3.0f%%" % (
            c["events_per_sec"], r.puts["rps"], c["min_per_watcher"], c["max_per_watcher"],
            c["events_per_watcher"], "none" if c["no_loss"] else "YES",
            r.rss_kib / 1024.0, r.anon_kib / 1024.0, 100 * r.srv_cpu, 100 * c["client_cpu"])
    if r.problems:
        line += "  INVALID"
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--watchers", type=int, default=1000, help="watchers (default 1000)")
    ap.add_argument("--streams", type=int, default=1,
                    help="Watch streams the watchers are spread over (default 1: like clientv3, "
                         "which multiplexes the watchers of one context on one stream)")
    ap.add_argument("--conns", type=int, default=1, help="TCP connections (default 1)")
    ap.add_argument("--puts", type=int, default=10000,
                    help="puts, so events per watcher (default 10000)")
    ap.add_argument("--idle-timeout", type=float, default=15,
                    help="client gives up after this many seconds without an event (default 15)")
    ap.add_argument("--only", choices=("etcd", "quorum"), help="run one server only")
    args = ap.parse_args()

    if not shutil.which("h2load"):
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    kinds = [args.only] if args.only else ["etcd", "quorum"]
    try:
        client_bin = benchutil.client_binary(harness.quorum_binary())
    except RuntimeError as e:
        sys.exit(str(e))

    name = "watch-%d" % args.watchers
    print("watch-bench: %s, %d watchers on %d stream(s) / %d conn(s), %d puts (h2load -n, "
          "-c10 -m10, value %d bytes), %d cores, load average %.2f" % (
              " vs ".join(kinds), args.watchers, min(args.streams, args.watchers), args.conns,
              args.puts, len(VALUE), os.cpu_count(), os.getloadavg()[0]))
    sys.stdout.flush()
    results = {}
    for kind in kinds:
        r = run_one(kind, args, client_bin)
        results[kind] = r
        print(fmt_result(name, r))
        for p in r.problems:
            print("WARNING %s %s INVALID: %s" % (name, kind, p))
        sys.stdout.flush()
    q, e = results.get("quorum"), results.get("etcd")
    if q and e:
        head = "%-13s ratio quorum/etcd: " % name
        if q.client and e.client and q.puts and e.puts:
            print(head + "events/s x%.2f  puts/s x%.2f  rss x%.2f%s" % (
                q.client["events_per_sec"] / e.client["events_per_sec"],
                q.puts["rps"] / e.puts["rps"], q.rss_kib / e.rss_kib,
                "" if q.valid and e.valid else "  (INVALID: see warnings)"))
        else:
            print(head + "n/a")
    print()
    print("targets (issue):")
    label = "watch events/s >= 3x etcd, no loss"
    if not (q and e):
        print("  n/a: needs both servers (ran --only %s)" % kinds[0])
    elif not (q.valid and e.valid):
        print("  %-40s NOT MET (a run is invalid, failed or lost events)" % label)
    else:
        x = q.client["events_per_sec"] / e.client["events_per_sec"]
        print("  %-40s %s (x%.2f)" % (label, "met" if x >= 3 else "NOT MET", x))
    print("load average at the end: %.2f (other load on the machine skews the numbers)"
          % os.getloadavg()[0])
    return 0 if all(r.valid for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
