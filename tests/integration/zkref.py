"""Apache ZooKeeper 3.8 (Debian's zookeeper package) as the reference for
the ZooKeeper face: one standalone server on a free port of 127.0.0.1 in a
temp dir with its own zoo.cfg (tickTime 2000, extendedTypesEnabled for
TTL nodes, ZooKeeper's defaults otherwise; extra_cfg lines added, jvm_props
as -D system properties, e.g. -Dznode.container.checkIntervalMs=1000),
killed by its own PID.

    with ZooKeeper() as zk:
        zk.hostport            # "127.0.0.1:PORT"
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

from harness import free_port

ZK_JAR = "/usr/share/java/zookeeper.jar"


def four_letter(host, port, word, timeout=10):
    """|word| (bytes, e.g. b"mntr") sent to a ZooKeeper port, the whole
    answer read until the server closes, as text."""
    with socket.create_connection((host, int(port)), timeout) as s:
        s.sendall(word)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out.decode()
            out += b


def available():
    return os.path.exists(ZK_JAR) and shutil.which("java") is not None


class ZooKeeper:
    def __init__(self, extra_cfg="", jvm_props=()):
        self.jvm_props = list(jvm_props)  # "-Dname=value" system properties
        self.tmp = tempfile.mkdtemp(prefix="zookeeper-test-")
        self.port = free_port()
        self.extra_cfg = extra_cfg
        self.proc = None

    @property
    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=90.0):
        conf = os.path.join(self.tmp, "conf")
        os.makedirs(conf)
        with open(os.path.join(conf, "zoo.cfg"), "w") as f:
            f.write("tickTime=2000\ndataDir=%s/data\nclientPort=%d\n"
                    "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                    "extendedTypesEnabled=true\n%s" % (self.tmp, self.port, self.extra_cfg))
        with open(os.path.join(conf, "log4j.properties"), "w") as f:
            f.write("log4j.rootLogger=INFO, F\n"
                    "log4j.appender.F=org.apache.log4j.FileAppender\n"
                    "log4j.appender.F.File=%s/zookeeper.log\n"
                    "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                    "log4j.appender.F.layout.ConversionPattern=%%d %%p %%c{1}: %%m%%n\n" % self.tmp)
        self.out = open(os.path.join(self.tmp, "zookeeper.out"), "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", conf + ":" + ZK_JAR, "-Dzookeeper.log.dir=" + self.tmp,
             *self.jvm_props, "org.apache.zookeeper.server.ZooKeeperServerMain", os.path.join(conf, "zoo.cfg")],
            stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("zookeeper exited: %s" % self.log_tail())
            try:
                # srvr is ZooKeeper's default-whitelisted four-letter word
                with socket.create_connection(("127.0.0.1", self.port), 1) as s:
                    s.sendall(b"srvr")
                    if s.recv(100).startswith(b"Zookeeper version"):
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("zookeeper not up after %.0fs: %s" % (timeout, self.log_tail()))

    def log_tail(self, n=3000):
        try:
            with open(os.path.join(self.tmp, "zookeeper.log"), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # by its own PID
            self.proc.wait()
        self.proc = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
