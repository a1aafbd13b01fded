#!/usr/bin/python3
"""ZooKeeper load against Apache ZooKeeper 3.8 and quorum's ZooKeeper face
in one run, with the same client (zk-bench.c on libzookeeper-mt): create,
setData, getData and exists with many requests in flight, one member and
three members; prints each rate and the quorum/ZooKeeper ratios, then the
servers' peak RSS (VmHWM, summed over members) at equal data, and last
how each figure stands against the targets (3x the rate on every op, 1/5
of the peak RSS). Both servers are up at once and each op runs on one,
then the other, --repeat times in turn.

    bench/zk/zk-bench.py [--seconds 5] [--clients 4] [--inflight 128] [--members 1,3]
                         [--repeat N] [--cpu] [--memory N] [--memory-only]

Memory at equal data: after the rates, fresh servers of each kind are
given the same --memory N znodes (default 200000; 0 skips it; the same
paths, sizes and order), which are then read for --seconds, and the
resident memory of each server is printed (peak and current, summed over
members) with the znode counts mntr reports. The rate runs end with each
server holding what it had time to create, so their RSS line is not one
of equal data. --memory-only skips the rates.

Needs: zookeeper, libzookeeper-mt-dev (tools/deps.sh), a build dir with
bench/zk/zk-bench (ninja -C build). Every process is killed by its PID.
"""
import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from cluster import Cluster  # noqa: E402
from harness import Server, free_port  # noqa: E402
import zkref  # noqa: E402

OPS = ("create", "set", "get", "exists")
FAILED = []  # ops that had an error or did nothing: the exit status is 1


def status_kib(pid, field):
    """A memory figure of /proc/PID/status (VmHWM: peak RSS, VmRSS), KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def peak_rss_kib(pid):
    return status_kib(pid, "VmHWM")


class ZkEnsemble:
    """n Apache ZooKeeper servers (n=1: standalone), in a temp dir."""

    def __init__(self, n):
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="zk-bench-")
        self.ports = [free_port() for _ in range(n)]
        self.procs = []

    def start(self):
        peers = [(free_port(), free_port()) for _ in range(self.n)]
        for i in range(self.n):
            d = os.path.join(self.tmp, "s%d" % i)
            os.makedirs(os.path.join(d, "data"))
            with open(os.path.join(d, "data", "myid"), "w") as f:
                f.write("%d\n" % (i + 1))
            cfg = ("tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%d\n"
                   "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                   "maxClientCnxns=0\n4lw.commands.whitelist=srvr,mntr\n" % (d, self.ports[i]))
            if self.n > 1:
                for j, (p1, p2) in enumerate(peers):
                    cfg += "server.%d=127.0.0.1:%d:%d\n" % (j + 1, p1, p2)
            with open(os.path.join(d, "zoo.cfg"), "w") as f:
                f.write(cfg)
            with open(os.path.join(d, "log4j.properties"), "w") as f:
                f.write("log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                        "log4j.appender.F.File=%s/zk.log\n"
                        "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n" % d)
            main = ("org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.n > 1
                    else "org.apache.zookeeper.server.ZooKeeperServerMain")
            self.procs.append(subprocess.Popen(
                ["java", "-cp", d + ":" + zkref.ZK_JAR, main, os.path.join(d, "zoo.cfg")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 120
        for p in self.ports:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", p), 1) as s:
                        s.sendall(b"srvr")
                        if b"Mode: " in s.recv(1000):
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError("zookeeper ensemble not up")
                time.sleep(0.3)
        return self

    @property
    def hosts(self):
        return ",".join("127.0.0.1:%d" % p for p in self.ports)

    def pids(self):
        return [p.pid for p in self.procs]

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


class QuorumTarget:
    def __init__(self, n):
        self.n = n
        self.ports = [free_port() for _ in range(n)]

    def start(self):
        if self.n == 1:
            self.s = Server("quorum", extra_args=["--listen-zk-urls",
                                                  "http://127.0.0.1:%d" % self.ports[0],
                                                  "--zk-4lw-commands-whitelist", "srvr,mntr"])
            self.s.start()
        else:
            self.c = Cluster("quorum", n=self.n)
            for i, m in enumerate(self.c.members):
                m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % self.ports[i],
                                "--zk-4lw-commands-whitelist", "srvr,mntr"]
            self.c.start()
        return self

    @property
    def hosts(self):
        return ",".join("127.0.0.1:%d" % p for p in self.ports)

    def pids(self):
        if self.n == 1:
            return [self.s.proc.pid]
        return [m.proc.pid for m in self.c.members]

    def stop(self):
        if self.n == 1:
            self.s.stop()
            self.s.cleanup()
        else:
            self.c.cleanup()


def cpu_seconds(pid):
    """utime + stime of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_op(binary, target, args, op):
    """One op with --clients zk-bench processes at once (a session each):
    the summed rate, and the CPU microseconds per operation of the servers
    and of the clients (setup included: the nodes each client creates
    first)."""
    s0 = sum(cpu_seconds(p) for p in target.pids())
    c0 = children_cpu_seconds()
    ops = 0
    procs = [subprocess.Popen([binary, target.hosts, op, str(args.seconds),
                               str(args.inflight), str(args.value_size)],
                              stdout=subprocess.PIPE, text=True)
             for _ in range(args.clients)]
    rate = 0.0
    for p in procs:
        out, _ = p.communicate(timeout=args.seconds * 4 + 120)
        fields = dict(kv.split("=") for kv in out.split())
        rate += float(fields.get("rate", 0))
        ops += int(fields.get("ops", 0))
        if p.returncode != 0 or int(fields.get("errors", 1)) != 0 or ops == 0:
            print("  %s on %s: exit %d, %s errors, %d ops" % (op, target.hosts, p.returncode,
                                                            fields.get("errors"), ops),
                  file=sys.stderr)
            FAILED.append(op)
    s1 = sum(cpu_seconds(p) for p in target.pids())
    c1 = children_cpu_seconds()
    return rate, ((s1 - s0) * 1e6 / max(ops, 1), (c1 - c0) * 1e6 / max(ops, 1))


def znode_count(target):
    """mntr's zk_znode_count from the first server of |target| (the
    whitelist of both lets mntr run)."""
    host, port = target.hosts.split(",")[0].split(":")
    try:
        for line in zkref.four_letter(host, port, b"mntr").splitlines():
            if line.startswith("zk_znode_count\t"):
                return line.split("\t")[1]
    except OSError:
        pass
    return "?"


def memory_run(binary, args, n):
    """The ratio of peak RSS, quorum/ZooKeeper, at N znodes of --value-size bytes on each server, one after the other
    (both up at once, so neither gets the machine to itself): |clients|
    zk-bench processes each create N/clients nodes under a parent of their
    own, then read them for --seconds. Prints the servers' resident
    memory and returns the ratio of the peaks."""
    per = max(1, args.memory // args.clients)
    targets = {}
    out = {}
    try:
        targets["zookeeper"] = ZkEnsemble(n).start()
        targets["quorum"] = QuorumTarget(n).start()
        for name in ("zookeeper", "quorum"):
            t = targets[name]
            procs = [subprocess.Popen([binary, t.hosts, "get", str(args.seconds),
                                       str(args.inflight), str(args.value_size), str(per)],
                                      stdout=subprocess.PIPE, text=True)
                     for _ in range(args.clients)]
            for p in procs:
                o, _ = p.communicate(timeout=per * 0.01 + args.seconds * 4 + 300)
                fields = dict(kv.split("=") for kv in o.split())
                if p.returncode != 0 or int(fields.get("errors", 1)) != 0:
                    print("  memory run on %s: exit %d, %s errors" % (name, p.returncode,
                                                                    fields.get("errors")),
                          file=sys.stderr)
                    FAILED.append("memory")
            time.sleep(1)  # let the last replies and any GC settle
            out[name] = (sum(peak_rss_kib(p) for p in t.pids()),
                         sum(status_kib(p, "VmRSS") for p in t.pids()), znode_count(t))
    finally:
        for t in targets.values():
            t.stop()
    print("%d member%s, %d znodes of %d bytes (%d clients x %d), then read for %g s"
          % (n, "s" if n > 1 else "", per * args.clients, args.value_size, args.clients, per,
             args.seconds))
    print("  %-10s %14s %14s %10s" % ("", "peak RSS MiB", "RSS MiB", "znodes"))
    for name in ("zookeeper", "quorum"):
        hwm, rss, nodes = out[name]
        print("  %-10s %14d %14d %10s" % (name, hwm // 1024, rss // 1024, nodes))
    if out["zookeeper"][2] != out["quorum"][2] or out["quorum"][2] == "?":
        # the comparison is only fair at equal data
        print("  znode counts differ: zookeeper %s, quorum %s" % (out["zookeeper"][2],
                                                                 out["quorum"][2]),
              file=sys.stderr)
        FAILED.append("memory")
    zh, qh = out["zookeeper"][0], out["quorum"][0]
    zr, qr = out["zookeeper"][1], out["quorum"][1]
    print("  ratio quorum/zookeeper: peak %.2f, now %.2f" % (qh / zh if zh else 0,
                                                             qr / zr if zr else 0))
    return qh / zh if zh else 0


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--inflight", type=int, default=128)
    ap.add_argument("--clients", type=int, default=4,
                    help="zk-bench processes at once (one session each)")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--members", default="1,3")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each op on each server, taken in turns (ZooKeeper, "
                         "quorum, ZooKeeper, ...); the median rate is printed")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cpu", action="store_true",
                    help="also print CPU us per op of the servers and of the clients")
    ap.add_argument("--warmup", type=float, default=2,
                    help="seconds of each op on each server before measuring, unmeasured "
                         "(the JVM compiles ZooKeeper's hot paths during the first runs)")
    ap.add_argument("--memory", type=int, default=200000, metavar="N",
                    help="after the rates, measure memory at equal data: N znodes on fresh "
                         "servers of each kind (0: not)")
    ap.add_argument("--memory-only", action="store_true",
                    help="measure memory at equal data only, not the rates")
    args = ap.parse_args()
    if not zkref.available():
        print("zookeeper not installed (apt-get install zookeeper): skipped", file=sys.stderr)
        sys.exit(77)
    binary = os.environ.get("ZK_BENCH_BIN", os.path.join(args.build, "bench", "zk", "zk-bench"))
    os.environ.setdefault("QUORUM_BIN", os.path.join(args.build, "src", "server", "quorum"))
    # (members, what, ratio, target, met) for the summary at the end
    standing = []
    for n in [int(x) for x in args.members.split(",")]:
        if not args.memory_only:
            rate_run(binary, args, n, standing)
        if args.memory > 0:
            r = memory_run(binary, args, n)
            standing.append((n, "peak RSS at equal data", r, "<= 0.20", 0 < r <= 0.20))
    if standing:
        print("against the targets (ratios quorum/zookeeper):")
        for n, what, r, target, met in standing:
            print("  %d member%s  %-26s %6.2f  target %-7s %s"
                  % (n, "s" if n > 1 else " ", what, r, target, "met" if met else "NOT MET"))


def rate_run(binary, args, n, standing):
    """Each op's rate on both servers (|n| members each), the ratios
    printed and added to |standing|."""
    names = ("zookeeper", "quorum")
    # both up at once, each op run on one then the other in turn, so a
    # change in the machine's load hits both alike
    targets = {}
    try:
        targets["zookeeper"] = ZkEnsemble(n).start()
        targets["quorum"] = QuorumTarget(n).start()
        rates = {name: {op: [] for op in OPS} for name in names}
        cpu = {name: {op: [] for op in OPS} for name in names}
        if args.warmup > 0:
            warm = argparse.Namespace(**vars(args))
            warm.seconds = args.warmup
            for op in OPS:
                for name in names:
                    run_op(binary, targets[name], warm, op)
        for op in OPS:
            for _ in range(args.repeat):
                for name in names:
                    r, c = run_op(binary, targets[name], args, op)
                    rates[name][op].append(r)
                    cpu[name][op].append(c)
        rss = {name: sum(peak_rss_kib(p) for p in targets[name].pids()) for name in names}
        nodes = {name: znode_count(targets[name]) for name in names}
    finally:
        for t in targets.values():
            t.stop()
    print("%d member%s, %d clients x %d in flight, %d-byte values, %g s per op%s"
          % (n, "s" if n > 1 else "", args.clients, args.inflight, args.value_size,
             args.seconds, ", median of %d runs in turn" % args.repeat
             if args.repeat > 1 else ""))
    print("  %-8s %14s %14s %8s" % ("op", "zookeeper/s", "quorum/s", "ratio"))
    for op in OPS:
        z, q = median(rates["zookeeper"][op]), median(rates["quorum"][op])
        line = "  %-8s %14.0f %14.0f %8.2f" % (op, z, q, q / z if z else 0)
        if args.repeat > 1:
            pairs = zip(rates["zookeeper"][op], rates["quorum"][op])
            line += "   (each run: %s)" % " ".join("%.2f" % (b / a if a else 0)
                                                  for a, b in pairs)
        print(line)
        standing.append((n, op + " rate", q / z if z else 0, ">= 3", z > 0 and q / z >= 3))
    if args.cpu:
        # the servers' CPU per operation, and its ratio: what the rates
        # would show where the clients did not share the server's cores
        print("  CPU us/op %-8s %18s %18s %10s" % ("", "zookeeper srv/cli", "quorum srv/cli",
                                                  "srv ratio"))
        for op in OPS:
            zs = median([c[0] for c in cpu["zookeeper"][op]])
            zc = median([c[1] for c in cpu["zookeeper"][op]])
            qs = median([c[0] for c in cpu["quorum"][op]])
            qc = median([c[1] for c in cpu["quorum"][op]])
            print("  %-18s %9.1f %8.1f %9.1f %8.1f %10.2f" % (op, zs, zc, qs, qc,
                                                             zs / qs if qs else 0))
    zr, qr = rss["zookeeper"], rss["quorum"]
    print("  peak RSS after these runs: zookeeper %d MiB, quorum %d MiB (ratio %.2f), not at "
          "equal data: znodes at the end zookeeper %s, quorum %s (mntr; quorum also keeps "
          "every revision until compacted)"
          % (zr // 1024, qr // 1024, qr / zr if zr else 0, nodes["zookeeper"],
             nodes["quorum"]))


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILED else 0)
