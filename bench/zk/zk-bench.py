#!/usr/bin/python3
"""ZooKeeper load against Apache ZooKeeper 3.8 and quorum's ZooKeeper face
in one run, with the same client (zk-bench.c on libzookeeper-mt): create,
setData, getData and exists with many requests in flight, one member and
three members; prints each rate, the quorum/ZooKeeper ratios and the
servers' peak RSS (VmHWM, summed over members).

    bench/zk/zk-bench.py [--seconds 5] [--clients 4] [--inflight 128] [--members 1,3]

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


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


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
                   "maxClientCnxns=0\n" % (d, self.ports[i]))
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
                                                  "http://127.0.0.1:%d" % self.ports[0]])
            self.s.start()
        else:
            self.c = Cluster("quorum", n=self.n)
            for i, m in enumerate(self.c.members):
                m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % self.ports[i]]
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


def run(binary, target, args):
    """Each op with --clients zk-bench processes at once (a session each):
    the rates summed, and the CPU microseconds per operation of the
    servers and of the clients (setup included: the nodes each client
    creates first)."""
    rates, cpu = {}, {}
    for op in OPS:
        s0 = sum(cpu_seconds(p) for p in target.pids())
        c0 = children_cpu_seconds()
        ops = 0
        procs = [subprocess.Popen([binary, target.hosts, op, str(args.seconds),
                                   str(args.inflight), str(args.value_size)],
                                  stdout=subprocess.PIPE, text=True)
                 for _ in range(args.clients)]
        rates[op] = 0.0
        for p in procs:
            out, _ = p.communicate(timeout=args.seconds * 4 + 120)
            fields = dict(kv.split("=") for kv in out.split())
            rates[op] += float(fields.get("rate", 0))
            ops += int(fields.get("ops", 0))
            if int(fields.get("errors", 1)) != 0:
                print("  %s: %s errors" % (op, fields.get("errors")), file=sys.stderr)
        s1 = sum(cpu_seconds(p) for p in target.pids())
        c1 = children_cpu_seconds()
        cpu[op] = ((s1 - s0) * 1e6 / max(ops, 1), (c1 - c0) * 1e6 / max(ops, 1))
    rss = sum(peak_rss_kib(p) for p in target.pids())
    return rates, rss, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--inflight", type=int, default=128)
    ap.add_argument("--clients", type=int, default=4,
                    help="zk-bench processes at once (one session each)")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--members", default="1,3")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cpu", action="store_true",
                    help="also print CPU us per op of the servers and of the clients")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "zk", "zk-bench")
    os.environ.setdefault("QUORUM_BIN", os.path.join(args.build, "src", "server", "quorum"))
    for n in [int(x) for x in args.members.split(",")]:
        res = {}
        for name, cls in (("zookeeper", ZkEnsemble), ("quorum", QuorumTarget)):
            t = cls(n).start()
            try:
                res[name] = run(binary, t, args)
            finally:
                t.stop()
        print("%d member%s, %d clients x %d in flight, %d-byte values, %.0f s per op"
              % (n, "s" if n > 1 else "", args.clients, args.inflight, args.value_size,
                 args.seconds))
        print("  %-8s %14s %14s %8s" % ("op", "zookeeper/s", "quorum/s", "ratio"))
        for op in OPS:
            z, q = res["zookeeper"][0][op], res["quorum"][0][op]
            print("  %-8s %14.0f %14.0f %8.2f" % (op, z, q, q / z if z else 0))
        if args.cpu:
            print("  CPU us/op %-8s %18s %18s" % ("", "zookeeper srv/cli", "quorum srv/cli"))
            for op in OPS:
                (zs, zc), (qs, qc) = res["zookeeper"][2][op], res["quorum"][2][op]
                print("  %-18s %9.1f %8.1f %9.1f %8.1f" % (op, zs, zc, qs, qc))
        zr, qr = res["zookeeper"][1], res["quorum"][1]
        print("  peak RSS: zookeeper %d MiB, quorum %d MiB (ratio %.2f)"
              % (zr // 1024, qr // 1024, qr / zr if zr else 0))


if __name__ == "__main__":
    main()
