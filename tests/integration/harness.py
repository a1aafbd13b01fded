"""Start and stop quorum and etcd 3.4 for tests and benchmarks.

Every process listens on 127.0.0.1 on ports picked free, lives in a fresh
temp data dir, and is killed by its own PID (never by name). Run with
/usr/bin/python3 (Debian's python3-etcd3 and python3-grpcio live there).

    with Server("quorum") as s:      # or Server("etcd")
        s.endpoint                   # "127.0.0.1:PORT"
        s.etcdctl("put", "k", "v")   # runs etcdctl 3.4 against it
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def quorum_binary():
    """The quorum binary: $QUORUM_BIN, else build/src/server/quorum."""
    b = os.environ.get("QUORUM_BIN") or os.path.join(ROOT, "build", "src", "server", "quorum")
    if not os.path.exists(b):
        raise RuntimeError("quorum binary not found at %s (build first or set QUORUM_BIN)" % b)
    return b


def quorum_args():
    """Flags every quorum process of a test gets, from $QUORUM_ARGS (split
    on spaces): how meson runs a suite again in another configuration, e.g.
    QUORUM_ARGS=--front-loops=0 (the core loop serves clients itself)."""
    return os.environ.get("QUORUM_ARGS", "").split()


def built_binary(env, *path):
    """Another binary of the build: $env, else |path| in the build dir
    quorum_binary() comes from."""
    b = os.environ.get(env) or os.path.join(os.path.dirname(quorum_binary()), "..", "..", *path)
    if not os.path.exists(b):
        raise RuntimeError("%s not found at %s (build it or set %s)" % (path[-1], b, env))
    return b


def etcd_binary():
    b = os.environ.get("ETCD_BIN") or shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(b):
        raise RuntimeError("etcd not installed (apt-get install etcd-server)")
    return b


def wait_for(pred, timeout=30.0, step=0.1, what="condition"):
    """Polls pred() (exceptions count as not yet) until true; AssertionError
    naming |what| and the last exception after |timeout| seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(step)
    if pred():
        return
    raise AssertionError("%s not reached within %.0fs%s"
                         % (what, timeout, " (last error: %r)" % last if last else ""))


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = f.read().split()
            return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


# ports free_port has handed out in this process: a cluster's six ports are
# chosen before any member listens, and the same random port twice made a
# member's client URL another's peer URL ("bind: address already in use")
_GIVEN_PORTS = set()


def stop_and_clean(server, log_chars=20000):
    """Stop |server| (its stop() raises unless it exits cleanly), printing
    the tail of its log when that fails, and remove its files either way."""
    try:
        server.stop()
    except Exception:
        print(server.log_tail(log_chars), file=sys.stderr)
        raise
    finally:
        server.cleanup()


def free_port():
    """A port free on 127.0.0.1 now, chosen BELOW the kernel's ephemeral
    range: a port the kernel hands out (bind to 0) can be taken again as the
    source port of any outgoing connection — a cluster's members dial each
    other — before the process meant to listen on it has started."""
    import random
    lo, _ = _ephemeral_range()
    top = min(lo, 32768) - 1
    for _ in range(200):
        port = random.randint(10000, top)
        if port in _GIVEN_PORTS:
            continue  # handed out already, maybe not yet listened on
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _GIVEN_PORTS.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TLS:
    """Certificates for a TLS test (paths), and the flags they make: both
    quorum and etcd take member_flags(); etcdctl takes etcdctl_flags().
    client/peer: whether the client URLs and the peer URLs are https://.
    The same object goes to Server(tls=...) and cluster.Cluster(tls=...);
    without one nothing changes."""

    def __init__(self, ca, server_cert, server_key, peer_cert=None, peer_key=None,
                 client_cert=None, client_key=None, client=True, peer=True,
                 client_cert_auth=True, peer_client_cert_auth=True, extra=()):
        self.ca = ca
        self.server_cert, self.server_key = server_cert, server_key
        self.peer_cert = peer_cert or server_cert
        self.peer_key = peer_key or server_key
        self.client_cert, self.client_key = client_cert, client_key
        self.client, self.peer = client, peer
        self.client_cert_auth = client_cert_auth
        self.peer_client_cert_auth = peer_client_cert_auth
        self.extra = list(extra)

    @property
    def client_scheme(self):
        return "https" if self.client else "http"

    @property
    def peer_scheme(self):
        return "https" if self.peer else "http"

    def member_flags(self):
        f = []
        if self.client:
            f += ["--cert-file", self.server_cert, "--key-file", self.server_key,
                  "--trusted-ca-file", self.ca]
            if self.client_cert_auth:
                f.append("--client-cert-auth")
        if self.peer:
            f += ["--peer-cert-file", self.peer_cert, "--peer-key-file", self.peer_key,
                  "--peer-trusted-ca-file", self.ca]
            if self.peer_client_cert_auth:
                f.append("--peer-client-cert-auth")
        return f + self.extra

    def etcdctl_flags(self):
        if not self.client:
            return []
        f = ["--cacert", self.ca]
        if self.client_cert:
            f += ["--cert", self.client_cert, "--key", self.client_key]
        return f

    def etcd3_kwargs(self):
        """python3-etcd3's etcd3.client(...) arguments"""
        if not self.client:
            return {}
        kw = {"ca_cert": self.ca}
        if self.client_cert:
            kw.update(cert_cert=self.client_cert, cert_key=self.client_key)
        return kw


class Server:
    """One single-member server: kind is "quorum" or "etcd". The kind
    "quorum-cluster" gives a ClusterServer instead: three quorum members
    standing in for one server, so a test written for one server runs
    against a cluster (TARGET=quorum-cluster)."""

    def __new__(cls, kind, *args, **kwargs):
        if cls is Server and kind == "quorum-cluster":
            return ClusterServer(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, kind, name="default", data_dir=None, extra_args=(), log=None, tls=None):
        self.kind = kind
        self.tls = tls
        self.name = name
        self.own_dir = data_dir is None
        self.tmp = tempfile.mkdtemp(prefix="%s-test-" % kind) if self.own_dir else None
        self.data_dir = data_dir or os.path.join(self.tmp, name + "." + kind)
        self.extra_args = list(extra_args)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc = None
        self.log_path = log or os.path.join(self.tmp or os.path.dirname(self.data_dir),
                                            "%s-%s.log" % (kind, name))

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.client_port

    def args(self):
        cs = self.tls.client_scheme if self.tls else "http"
        ps = self.tls.peer_scheme if self.tls else "http"
        curl = "%s://127.0.0.1:%d" % (cs, self.client_port)
        purl = "%s://127.0.0.1:%d" % (ps, self.peer_port)
        binary = quorum_binary() if self.kind == "quorum" else etcd_binary()
        return [binary, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", curl, "--advertise-client-urls", curl,
                "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                "--initial-cluster", "%s=%s" % (self.name, purl)] + (
                    self.tls.member_flags() if self.tls else []) + self.extra_args + (
                    quorum_args() if self.kind == "quorum" else [])

    def start(self, timeout=20.0):
        env = dict(os.environ)
        env.pop("ETCDCTL_API", None)
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args(), stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=20.0):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s; log:\n%s" % (self.kind, self.proc.returncode,
                                                                   self.log_tail()))
            try:
                r = self.etcdctl("endpoint", "health", check=False, timeout=5)
            except subprocess.TimeoutExpired:
                # a member still starting can take the whole call: not
                # ready yet, asked again until the deadline (its log then)
                last = "etcdctl endpoint health took more than 5 s"
                continue
            if r.returncode == 0:
                return
            last = r.stderr
            time.sleep(0.1)
        raise RuntimeError("%s not healthy after %.0fs: %s\n%s" % (self.kind, timeout, last,
                                                                   self.log_tail()))

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def etcdctl(self, *args, check=True, timeout=30, input=None):
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(["etcdctl", "--endpoints", self.endpoint, "--command-timeout=10s"]
                           + (self.tls.etcdctl_flags() if self.tls else [])
                           + list(args), capture_output=True, text=True, env=env,
                           timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                              r.stderr))
        return r

    def client(self):
        import etcd3
        return etcd3.client(host="127.0.0.1", port=self.client_port, timeout=10,
                            **(self.tls.etcd3_kwargs() if self.tls else {}))

    def kill(self, sig=signal.SIGKILL):
        """Kill by PID (SIGKILL by default) and reap. Returns False if the
        process had to be killed because |sig| did not end it in 20 s."""
        ended = True
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                ended = False
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if getattr(self, "log_file", None):
            self.log_file.close()
            self.log_file = None
        return ended

    def stop(self):
        """SIGTERM: the member must shut down cleanly (exit 0) within 20 s."""
        running = self.proc is not None and self.proc.poll() is None
        if not self.kill(signal.SIGTERM):
            raise RuntimeError("%s did not stop within 20 s of SIGTERM" % self.name)
        if running and self.kind == "quorum" and self.proc.returncode != 0:
            raise RuntimeError("%s exited %d on SIGTERM" % (self.name, self.proc.returncode))

    def rss_kib(self):
        """Current resident set size (KiB) of the running process."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def peak_rss_kib(self):
        """Peak resident set size (VmHWM, KiB) of the running process."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def cleanup(self):
        self.kill()
        if self.own_dir and self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()


class ClusterServer:
    """Three quorum members behind the interface of Server. Clients talk to
    member 1, a follower or the leader: writes may be forwarded, linearizable
    reads go through ReadIndex. kill(sig) signals every member; start()
    after a kill restarts all three on their data dirs. etcd's timing
    (heartbeat 100 ms, election 1 s) so lease minimums match a single
    server's."""
    kind = "quorum"

    def __init__(self, name="default", data_dir=None, extra_args=(), log=None, via=1):
        import cluster  # cluster imports this module
        self.c = cluster.Cluster("quorum", n=3, extra_args=extra_args, heartbeat_ms=100,
                                 election_ms=1000)
        self.via = via
        self.started = False

    @property
    def endpoint(self):
        return self.c.endpoint(self.via)

    @property
    def client_port(self):
        return int(self.endpoint.rsplit(":", 1)[1])

    def start(self, timeout=60.0):
        if not self.started:
            self.c.start()
            self.started = True
            return self
        for i in range(self.c.n):
            self.c.restart(i, wait=False)
        for i in range(self.c.n):
            self.c.wait_member(i, timeout)
        self.c.wait_leader()
        return self

    def etcdctl(self, *args, check=True, timeout=30, input=None):
        return self.c.etcdctl(self.via, *args, check=check, timeout=timeout, input=input,
                              command_timeout="10s")

    def client(self):
        import etcd3
        return etcd3.client(host="127.0.0.1", port=self.client_port, timeout=10)

    def kill(self, sig=signal.SIGKILL):
        for i in range(self.c.n):
            self.c.kill(i, sig)

    def stop(self):
        self.kill(signal.SIGTERM)

    def log_tail(self, n=4000):
        return "\n".join(m.log_tail(n // self.c.n) for m in self.c.members)

    def cleanup(self):
        self.c.cleanup()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()


def run_cases(cases):
    """Runs each (name, fn) in turn, printing "PASS name (s)" or the
    traceback and "FAIL name (s)"; returns the names that failed."""
    failed = []
    for name, fn in cases:
        t0 = time.monotonic()
        print("%s ..." % name, flush=True)
        try:
            fn()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed.append(name)
            print("FAIL %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
        else:
            print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
    return failed
