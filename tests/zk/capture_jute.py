#!/usr/bin/python3
"""Capture real ZooKeeper client traffic for the jute fuzz corpus.

Starts Apache ZooKeeper 3.8 (Debian's zookeeper package) standalone on a
free port in a temp dir, puts a recording TCP proxy in front of it, drives
kazoo and zkCli through it, and writes what each direction carried:

  OUT/c2s-<client>-<n>: the client's bytes of one connection (framed
                        packets, the ConnectRequest first)
  OUT/s2c-<client>-<n>: the server's bytes of that connection

Usage: tests/zk/capture_jute.py OUTDIR
(re-run it to refresh tests/fuzz/corpus/fuzz_jute; see tests/fuzz/README.md).
Every process it starts is killed by its own PID.
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ZK_CP = "/usr/share/java/zookeeper.jar"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_zk(tmp, port):
    conf = os.path.join(tmp, "conf")
    os.makedirs(conf)
    with open(os.path.join(conf, "zoo.cfg"), "w") as f:
        f.write(f"tickTime=2000\ndataDir={tmp}/data\nclientPort={port}\n"
                "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                "4lw.commands.whitelist=*\nextendedTypesEnabled=true\n")
    with open(os.path.join(conf, "log4j.properties"), "w") as f:
        f.write("log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                f"log4j.appender.F.File={tmp}/zk.log\n"
                "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n")
    p = subprocess.Popen(["java", "-cp", conf + ":" + ZK_CP,
                          "-Dzookeeper.log.dir=" + tmp,
                          "org.apache.zookeeper.server.ZooKeeperServerMain",
                          os.path.join(conf, "zoo.cfg")],
                         stdout=open(os.path.join(tmp, "zk.out"), "w"),
                         stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 1) as s:
                s.sendall(b"ruok")
                if s.recv(4) == b"imok":
                    return p
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError("zookeeper did not start")


class Recorder:
    def __init__(self, target_port, outdir):
        self.target = target_port
        self.outdir = outdir
        self.tag = "x"
        self.n = 0
        self.lock = threading.Lock()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            with self.lock:
                self.n += 1
                name = f"{self.tag}-{self.n}"
            u = socket.create_connection(("127.0.0.1", self.target))
            for src, dst, d in ((c, u, "c2s"), (u, c, "s2c")):
                threading.Thread(target=self.pump,
                                 args=(src, dst, os.path.join(self.outdir, f"{d}-{name}")),
                                 daemon=True).start()

    @staticmethod
    def pump(src, dst, path):
        with open(path, "wb") as f:
            while True:
                try:
                    b = src.recv(65536)
                except OSError:
                    b = b""
                if not b:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                f.write(b)
                f.flush()
                try:
                    dst.sendall(b)
                except OSError:
                    return


def drive_kazoo(port):
    from kazoo.client import KazooClient
    from kazoo.security import make_digest_acl
    zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
    zk.start()
    zk.ensure_path("/a/b")
    zk.create("/a/b/c", b"hello")
    zk.create("/a/seq-", b"", sequence=True)
    zk.create("/a/eph", b"x", ephemeral=True)
    zk.create("/a/eseq-", b"", ephemeral=True, sequence=True)
    zk.get("/a/b/c", watch=lambda e: None)
    zk.set("/a/b/c", b"world", version=0)
    zk.exists("/nope", watch=lambda e: None)
    zk.get_children("/a", watch=lambda e: None, include_data=True)
    zk.get_children("/a")
    try:
        zk.delete("/a", version=5)
    except Exception:
        pass
    t = zk.transaction()
    t.create("/t1", b"1")
    t.check("/a/b/c", 1)
    t.set_data("/a/b/c", b"v")
    t.delete("/t1")
    t.commit()
    t = zk.transaction()
    t.create("/a/b/c", b"dup")
    t.commit()
    zk.sync("/a")
    zk.add_auth("digest", "user:pw")
    zk.create("/secret", b"s", acl=[make_digest_acl("user", "pw", all=True)])
    zk.get_acls("/secret")
    zk.set_acls("/secret", [make_digest_acl("user", "pw", read=True, write=True)])
    zk.delete("/a", recursive=True)
    zk.stop()
    zk.close()


def drive_zkcli(port):
    cmds = ["create /z data", "create -s /z/s- x", "create -e /z/e y", "get -s /z",
            "set /z more", "stat /z", "ls -s /z", "getAllChildrenNumber /z",
            "getEphemerals /z", "addWatch -m PERSISTENT_RECURSIVE /z", "removewatches /z",
            "setAcl /z world:anyone:cdrwa", "getAcl /z", "sync /z", "create -t 5000 /zt t",
            "create -c /zc", "deleteall /z", "delete /zt", "whoami"]
    subprocess.run(["/usr/share/zookeeper/bin/zkCli.sh", "-server", f"127.0.0.1:{port}"],
                   input="\n".join(cmds + ["quit"]) + "\n", text=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        zk = start_zk(tmp, port)
        try:
            rec = Recorder(port, outdir)
            rec.tag = "kazoo"
            drive_kazoo(rec.port)
            time.sleep(0.5)
            rec.tag = "zkcli"
            drive_zkcli(rec.port)
            time.sleep(0.5)
        finally:
            zk.kill()
            zk.wait()


if __name__ == "__main__":
    main()
