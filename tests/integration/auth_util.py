"""Helpers of test_auth.py: servers and clusters that stay usable once auth is
on, raw gRPC calls carrying a token, and etcdctl output parsing.

The harness waits for a server with `etcdctl endpoint health`, which etcd
refuses without credentials once auth is enabled ("user name is empty"), so
AuthServer / AuthCluster also try with root's credentials (`--user` is
harmless while auth is off: etcdctl ignores "authentication is not enabled").
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import grpc
from google.protobuf import message_factory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import pb34  # noqa: E402
from cluster import Cluster  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")

ROOT_PW = "rootpw"
ROOT = "root:" + ROOT_PW
FAST_HASH = ["--bcrypt-cost=4"]     # an etcd 3.4 flag; keeps bcrypt cheap

# gRPC status codes as etcdctl's retry warning spells them
C_FAILED_PRECONDITION = "FailedPrecondition"
C_INVALID_ARGUMENT = "InvalidArgument"
C_PERMISSION_DENIED = "PermissionDenied"
C_UNAUTHENTICATED = "Unauthenticated"
C_UNKNOWN = "Unknown"


def wait_for(pred, timeout=30.0, step=0.1, what="condition"):
    harness.wait_for(pred, timeout, step, what)


# -- etcdctl ------------------------------------------------------------------

def ctl_codes(r):
    """[(code, desc)] of the gRPC errors etcdctl's retry interceptor logged on
    stderr ("rpc error: code = X desc = Y"), in order."""
    return re.findall(r'rpc error: code = (\w+) desc = (.*?)"', r.stderr)


def ctl_error_line(r):
    """The last "Error: ..." line etcdctl printed on stderr (None if none)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")]
    return lines[-1] if lines else None


class AuthServer(harness.Server):
    """harness.Server whose readiness check also works with auth on."""

    def __init__(self, kind, **kw):
        if kind not in ("quorum", "etcd"):
            raise RuntimeError("test_auth runs against TARGET=quorum or TARGET=etcd, not %r"
                               % kind)
        super().__init__(kind, **kw)

    def wait_ready(self, timeout=30.0):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s; log:\n%s"
                                   % (self.kind, self.proc.returncode, self.log_tail()))
            for extra in ((), ("--user", ROOT)):
                try:
                    r = self.etcdctl(*(extra + ("endpoint", "health")), check=False, timeout=8)
                except subprocess.TimeoutExpired:
                    # still starting: asked again until the deadline
                    last = "etcdctl endpoint health took more than 8 s"
                    continue
                if r.returncode == 0:
                    return
                last = r.stderr
            time.sleep(0.1)
        raise RuntimeError("%s not healthy after %.0fs: %s\n%s"
                           % (self.kind, timeout, last, self.log_tail()))

    def ctl(self, user, *args, input=None, timeout=30):
        """etcdctl as |user| ("name:password", or None for no credentials)."""
        pre = ("--user", user) if user else ()
        return self.etcdctl(*(pre + args), check=False, input=input, timeout=timeout)

    def root(self, *args, input=None):
        """etcdctl as root; must succeed."""
        r = self.ctl(ROOT, *args, input=input)
        if r.returncode != 0:
            raise AssertionError("etcdctl --user root %s failed (%d): %s%s"
                                 % (" ".join(args), r.returncode, r.stderr, r.stdout))
        return r

    def restart(self, sig=signal.SIGTERM):
        self.kill(sig)
        self.start()


class AuthCluster(Cluster):
    """cluster.Cluster whose etcdctl calls (readiness checks, member add/remove)
    carry root's credentials once |user| is set."""

    user = None

    def etcdctl(self, i, *args, anon=False, **kw):
        if self.user and not anon and "--user" not in args:
            args = ("--user", self.user) + tuple(args)
        return super().etcdctl(i, *args, **kw)


def restore_snapshot(snap, server):
    """Make |server|'s (not yet existing) data dir from snapshot file |snap|:
    etcdctl snapshot restore for etcd, quorumctl snapshot restore for quorum."""
    purl = "http://127.0.0.1:%d" % server.peer_port
    if server.kind == "etcd":
        env = dict(os.environ, ETCDCTL_API="3")
        cmd = ["etcdctl", "snapshot", "restore", snap, "--name", server.name,
               "--data-dir", server.data_dir, "--initial-cluster",
               "%s=%s" % (server.name, purl), "--initial-advertise-peer-urls", purl]
    else:
        env = dict(os.environ)
        cmd = [harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl"),
               "snapshot", "restore", snap, "--name", server.name, "--data-dir",
               server.data_dir]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        raise AssertionError("%s failed: %s%s" % (" ".join(cmd), r.stderr, r.stdout))
    return r


# -- raw gRPC -------------------------------------------------------------------

def _cls(desc):
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pb34._load()).GetPrototype(desc)


def msg(name):
    """An etcd 3.4 message class: msg("etcdserverpb.Compare")."""
    return pb34.msg(name)


_PKG = {"Lock": "v3lockpb", "Election": "v3electionpb"}


class Rpc:
    """A gRPC channel to one endpoint that sends a `token` metadata entry
    (etcd's) when it has one. call("KV", "Range", key=b"k") builds the request
    from the 3.4 descriptors of proto/ (pb34)."""

    def __init__(self, endpoint, token=None):
        self.endpoint = endpoint
        # own subchannels: grpcio shares them between channels to one address
        # otherwise, and a new channel would inherit a connection to a killed server
        self.chan = grpc.insecure_channel(endpoint,
                                          options=[("grpc.use_local_subchannel_pool", 1)])
        self.token = token

    @classmethod
    def login(cls, endpoint, name, password):
        r = cls(endpoint)
        r.token = r.call("Auth", "Authenticate", name=name, password=password).token
        return r

    def _method(self, svc, method):
        pkg = _PKG.get(svc, "etcdserverpb")
        md = pb34._load().FindServiceByName(pkg + "." + svc).methods_by_name[method]
        return "/%s.%s/%s" % (pkg, svc, method), _cls(md.input_type), _cls(md.output_type)

    def metadata(self, token=None):
        tok = self.token if token is None else token
        return (("token", tok),) if tok else None

    def call(self, svc, method, req=None, token=None, timeout=15, **fields):
        path, rq, rs = self._method(svc, method)
        if req is None:
            req = rq(**fields)
        fn = self.chan.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=rs.FromString)
        return fn(req, timeout=timeout, metadata=self.metadata(token))

    def stream(self, svc, method, reqs, token=None, timeout=None):
        path, rq, rs = self._method(svc, method)
        fn = self.chan.stream_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=rs.FromString)
        return fn(reqs, timeout=timeout, metadata=self.metadata(token))

    def unary_stream(self, svc, method, token=None, timeout=15, **fields):
        path, rq, rs = self._method(svc, method)
        fn = self.chan.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=rs.FromString)
        return fn(rq(**fields), timeout=timeout, metadata=self.metadata(token))

    def error(self, svc, method, **kw):
        """(status code, details) of a call that must fail."""
        try:
            r = self.call(svc, method, **kw)
        except grpc.RpcError as e:
            return e.code(), e.details()
        raise AssertionError("%s/%s succeeded: %s" % (svc, method, r))

    def close(self):
        self.chan.close()


class WatchStream:
    """One Watch stream kept open: send() requests, next() responses (or the
    stream's grpc.RpcError, returned, not raised)."""

    def __init__(self, rpc, token=None):
        import queue
        import threading
        self._q = queue.Queue()
        self._out = queue.Queue()
        self._Empty = queue.Empty

        def gen():
            while True:
                r = self._q.get()
                if r is None:
                    return
                yield r
        self._it = rpc.stream("Watch", "Watch", gen(), token=token)

        def reader():
            try:
                for resp in self._it:
                    self._out.put(resp)
            except grpc.RpcError as e:
                self._out.put(e)
        self._t = threading.Thread(target=reader, daemon=True)
        self._t.start()

    def create(self, key, range_end=b"", **kw):
        WR, WC = msg("etcdserverpb.WatchRequest"), msg("etcdserverpb.WatchCreateRequest")
        self._q.put(WR(create_request=WC(key=key, range_end=range_end, **kw)))

    def next(self, timeout=15.0):
        try:
            return self._out.get(timeout=timeout)
        except self._Empty:
            raise AssertionError("no watch response within %.0fs" % timeout)

    def idle(self, timeout):
        """True if nothing arrives within |timeout| seconds."""
        try:
            got = self._out.get(timeout=timeout)
        except self._Empty:
            return True
        raise AssertionError("unexpected watch response: %s" % got)

    def close(self):
        self._q.put(None)
        self._it.cancel()


# -- the usual cast ---------------------------------------------------------------

BOB, W, R, NOBODY = "bob:bobpw", "w:wpw", "r:rpw", "nobody:npw"


def cast(s):
    """root (role root); bob: readwrite on p/ (role rw); w: write on p/ (role wo);
    r: read on p/ (role ro); nobody: no role. Keys p/a and x exist. Auth on."""
    for args in [("user", "add", ROOT, "--interactive=false"),
                 ("role", "add", "root"), ("user", "grant-role", "root", "root"),
                 ("user", "add", BOB, "--interactive=false"), ("role", "add", "rw"),
                 ("role", "grant-permission", "rw", "readwrite", "p/", "--prefix"),
                 ("user", "grant-role", "bob", "rw"),
                 ("user", "add", W, "--interactive=false"), ("role", "add", "wo"),
                 ("role", "grant-permission", "wo", "write", "p/", "--prefix"),
                 ("user", "grant-role", "w", "wo"),
                 ("user", "add", R, "--interactive=false"), ("role", "add", "ro"),
                 ("role", "grant-permission", "ro", "read", "p/", "--prefix"),
                 ("user", "grant-role", "r", "ro"),
                 ("user", "add", NOBODY, "--interactive=false"),
                 ("put", "p/a", "1"), ("put", "x", "1"), ("auth", "enable")]:
        r = s.etcdctl(*args, check=False)
        if r.returncode != 0:
            raise AssertionError("setup: etcdctl %s failed: %s" % (" ".join(args), r.stderr))


def login(endpoint, who):
    name, pw = who.split(":", 1)
    return Rpc.login(endpoint, name, pw)


def json_out(r):
    return json.loads(r.stdout)
