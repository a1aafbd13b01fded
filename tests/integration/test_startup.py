#!/usr/bin/python3
"""What an operator trips on at start (issue 16), against quorum (TARGET=quorum, the
default) or etcd 3.4 (TARGET=etcd), which the expectations are proven against:

  a. a bad flag is refused with etcd's words and exit code, before anything is
     bound or created (bad --election-timeout, --heartbeat-interval 0, a listen URL
     with a host name, an unparsable URL, --initial-cluster-state, advertised URLs);
  b. a busy client or peer port stops the start before anything is created, and
     the next start with corrected flags is a first start (another --name takes);
  c. --initial-cluster problems (a --name not in it, a URL twice, advertised peer
     URLs that differ, an unreadable URL) are refused with etcd's words and leave no
     member behind (etcd: no log; quorum: nothing at all);
  d. a data dir that cannot be listed or written is refused with etcd's words;
  e. host names in advertise URLs and --initial-cluster resolve: members named by
     DNS form a cluster; localhost may be bound; a name that never resolves is
     refused after etcd's 30 s of retries (run beside the other cases);
  f. joining with --initial-cluster-state existing: a member added with member add
     joins with another (the default) --initial-cluster-token and serves; one not
     added, or whose peers cannot be reached, is refused; one that cannot join
     never says it is ready and does not answer member list;
  g. versions: the binary, the ctl tool, endpoint status and /version agree.

    TARGET=etcd /usr/bin/python3 test_startup.py [case ...]

Every process on 127.0.0.1 on free ports, signalled by its PID. Prints PASS or
FAIL per case; exits 1 if any failed.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from cluster import Cluster, Member  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
NAME = "quorum" if TARGET == "quorum" else "etcd"
TMP = tempfile.mkdtemp(prefix="startup-%s-" % TARGET)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def binary():
    return harness.quorum_binary() if TARGET == "quorum" else harness.etcd_binary()


class Flags:
    """A single member's flags on fresh ports and a fresh data dir."""

    def __init__(self, name="default"):
        self.name = name
        self.cport, self.pport = harness.free_port(), harness.free_port()
        self.dir = tempfile.mkdtemp(dir=TMP)
        self.data = os.path.join(self.dir, "data")

    @property
    def curl(self):
        return "http://127.0.0.1:%d" % self.cport

    @property
    def purl(self):
        return "http://127.0.0.1:%d" % self.pport

    def args(self, *extra, name=None, cluster=None):
        name = name or self.name
        return ["--name", name, "--data-dir", self.data,
                "--listen-client-urls", self.curl, "--advertise-client-urls", self.curl,
                "--listen-peer-urls", self.purl, "--initial-advertise-peer-urls", self.purl,
                "--initial-cluster", cluster or "%s=%s" % (name, self.purl)] + list(extra)

    def files(self):
        """What the start left in the data dir: None if it does not exist."""
        if not os.path.exists(self.data):
            return None
        return sorted(os.path.relpath(os.path.join(r, f), self.data)
                      for r, ds, fs in os.walk(self.data) for f in ds + fs)

    def has_log(self):
        wal = os.path.join(self.data, "member", "wal")
        return os.path.isdir(wal) and any(f.endswith(".wal") for f in os.listdir(wal))


def run(args, timeout=20, prefix=()):
    """Runs the binary to its end: (exit code, stdout + stderr)."""
    r = subprocess.run(list(prefix) + [binary()] + args, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


class Proc:
    """A member left running: its log, ready or not, stopped by PID."""

    def __init__(self, args):
        self.log_path = os.path.join(TMP, "proc-%d.log" % harness.free_port())
        self.f = open(self.log_path, "wb")
        self.p = subprocess.Popen([binary()] + args, stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.f.close()


def etcdctl(endpoint, *args, timeout="5s"):
    env = dict(os.environ, ETCDCTL_API="3")
    return subprocess.run(["etcdctl", "--endpoints", endpoint, "--dial-timeout=2s",
                           "--command-timeout=%s" % timeout] + list(args),
                          capture_output=True, text=True, env=env, timeout=60)


def wait_serving(endpoint, proc=None, timeout=30.0):
    def ok():
        if proc is not None and proc.p.poll() is not None:
            raise AssertionError("exited %s: %s" % (proc.p.returncode, proc.log()[-2000:]))
        return etcdctl(endpoint, "endpoint", "health", timeout="2s").returncode == 0
    harness.wait_for(ok, timeout=timeout, what="%s serving" % endpoint)


def refused(args, code, text, f=None, prefix=()):
    """The start fails with |code| and says |text| (a substring of one line)."""
    rc, out = run(args, prefix=prefix)
    check(rc == code, "exit %d, want %d; output:\n%s" % (rc, code, out[-3000:]))
    check(text in out, "no %r in:\n%s" % (text, out[-3000:]))
    line = next(ln for ln in out.splitlines() if text in ln)
    print("    exit %d: %s" % (rc, line.strip()[:220]))
    return out


def hostname_to_loopback():
    """A host name other than localhost that resolves to 127.0.0.1 (the machine's own
    name in /etc/hosts), or None."""
    for name in (socket.gethostname(), "localhost.localdomain"):
        try:
            if name and name != "localhost" and socket.gethostbyname(name) == "127.0.0.1":
                return name
        except OSError:
            pass
    return None


# -- a ------------------------------------------------------------------------

def case_a_bad_flags():
    """Each bad flag: etcd's line and exit code, nothing bound, nothing created."""
    see = "See '%s --help'." % NAME
    f = Flags()
    cases = [
        (["--election-timeout", "50"], 1,
         "error verifying flags, --election-timeout[50ms] should be at least as 5 times as "
         "--heartbeat-interval[100ms]. " + see),
        (["--heartbeat-interval", "0"], 1,
         "error verifying flags, --heartbeat-interval must be >0 (set to 0ms). " + see),
        (["--election-timeout", "60000"], 1,
         "error verifying flags, --election-timeout[60000ms] is too long, and should be set "
         "less than 50000ms. " + see),
        (["--listen-client-urls", "http://db1.example:%d" % f.cport], 1,
         "error verifying flags, expected IP in URL for binding (http://db1.example:%d). %s"
         % (f.cport, see)),
        (["--listen-peer-urls", "http://db1.example:%d" % f.pport], 1,
         "error verifying flags, expected IP in URL for binding (http://db1.example:%d). %s"
         % (f.pport, see)),
        (["--advertise-client-urls", "http://:%d" % f.cport], 1,
         "error verifying flags, --advertise-client-urls \"http://:%d\" must be \"host:port\" "
         "(unexpected empty host (http://:%d)). %s" % (f.cport, f.cport, see)),
        (["--listen-client-urls", "http://127.0.0.1:abc"], 2,
         "invalid value \"http://127.0.0.1:abc\" for flag -listen-client-urls: parse "
         "\"http://127.0.0.1:abc\": invalid port \":abc\" after host"),
        (["--listen-peer-urls", "127.0.0.1:%d" % f.pport], 2,
         "invalid value \"127.0.0.1:%d\" for flag -listen-peer-urls: parse \"127.0.0.1:%d\": "
         "first path segment in URL cannot contain colon" % (f.pport, f.pport)),
        (["--advertise-client-urls", "ftp://127.0.0.1:%d" % f.cport], 2,
         "invalid value \"ftp://127.0.0.1:%d\" for flag -advertise-client-urls: URL scheme "
         "must be http, https, unix, or unixs: ftp://127.0.0.1:%d" % (f.cport, f.cport)),
        (["--listen-client-urls", "http://127.0.0.1"], 2,
         "invalid value \"http://127.0.0.1\" for flag -listen-client-urls: URL address does "
         "not have the form \"host:port\": http://127.0.0.1"),
        (["--initial-cluster-state", "bogus"], 2,
         "invalid value \"bogus\" for flag -initial-cluster-state: invalid value"),
        (["--heartbeat-interval", "abc"], 2,
         "invalid value \"abc\" for flag -heartbeat-interval: parse error"),
    ]
    for extra, code, text in cases:
        refused(f.args(*extra), code, text)
        check(f.files() is None, "%s: the data dir was created: %s" % (extra, f.files()))
    # --listen-client-urls without --advertise-client-urls
    args = f.args()
    i = args.index("--advertise-client-urls")
    del args[i:i + 2]
    refused(args, 1, "error verifying flags, --advertise-client-urls is required when "
            "--listen-client-urls is set explicitly. " + see)
    check(f.files() is None, "the data dir was created: %s" % f.files())
    # the ports were never taken: the same flags, corrected, start
    p = Proc(f.args())
    try:
        wait_serving(f.curl, p)
    finally:
        p.stop()


# -- b ------------------------------------------------------------------------

def hold(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def case_b_port_in_use():
    """A busy client port, then a busy peer port: etcd's line, exit 1, nothing created.
    Started again with the ports free and another --name, the member is new and has
    that name (not a member resumed from the failed start)."""
    f = Flags()
    for port in (f.cport, f.pport):
        s = hold(port)
        try:
            refused(f.args(), 1, "listen tcp 127.0.0.1:%d: bind: address already in use" % port)
        finally:
            s.close()
        check(f.files() is None, "the data dir was created: %s" % f.files())
    p = Proc(f.args(name="other"))
    try:
        wait_serving(f.curl, p)
        r = etcdctl(f.curl, "member", "list", "-w", "json")
        members = json.loads(r.stdout)["members"]
        check([m.get("name") for m in members] == ["other"], "member list: %s" % members)
        check("restarted member" not in p.log(), "it resumed the failed start:\n%s" % p.log())
        print("    started again as \"other\": member list %s"
              % [(m.get("name"), m["peerURLs"]) for m in members])
    finally:
        p.stop()


# -- c ------------------------------------------------------------------------

def no_member_left(f):
    """etcd leaves member/snap/db (no log) after these; quorum nothing at all."""
    check(not f.has_log(), "a log was created: %s" % f.files())
    if TARGET == "quorum":
        check(f.files() is None, "quorum created %s" % f.files())


def case_c_initial_cluster():
    """--initial-cluster errors: etcd's words, exit 1, no member left behind; then the
    corrected flags start a new member."""
    f = Flags()
    refused(f.args(name="x", cluster="default=%s" % f.purl), 1,
            "couldn't find local name \"x\" in the initial cluster configuration")
    no_member_left(f)
    refused(f.args(cluster="default=%s,other=%s" % (f.purl, f.purl)), 1,
            "initial cluster default=%s,other=%s has duplicate url" % (f.purl, f.purl))
    no_member_left(f)
    local = "http://localhost:%d" % f.pport
    refused(f.args(cluster="default=%s" % local), 1,
            "--initial-cluster has default=%s but missing from --initial-advertise-peer-urls=%s "
            "(resolved urls: \"%s\" != \"%s\")" % (local, f.purl, f.purl, local))
    no_member_left(f)
    other = "http://127.0.0.1:%d" % harness.free_port()
    refused(f.args(cluster="default=%s,default=%s" % (f.purl, other)), 1,
            "--initial-cluster has default=%s but missing from --initial-advertise-peer-urls=%s"
            % (other, f.purl))
    no_member_left(f)
    refused(f.args(cluster="default=http://127.0.0.1"), 1,
            "error setting up initial cluster: URL address does not have the form "
            "\"host:port\": http://127.0.0.1")
    no_member_left(f)
    p = Proc(f.args(name="fixed"))
    try:
        wait_serving(f.curl, p)
        members = json.loads(etcdctl(f.curl, "member", "list", "-w", "json").stdout)["members"]
        check([m.get("name") for m in members] == ["fixed"], "member list: %s" % members)
    finally:
        p.stop()


# -- d ------------------------------------------------------------------------

def case_d_data_dir():
    """A data dir that cannot be listed or written."""
    f = Flags()
    afile = os.path.join(f.dir, "afile")
    open(afile, "w").close()
    for d in (afile, os.path.join(afile, "sub")):
        args = f.args()
        args[args.index("--data-dir") + 1] = d
        refused(args, 1, "error listing data dir: %s" % d)
    # not writable: as an unprivileged user (root may write anywhere)
    prefix = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            print("    (no setpriv: the permission cases are skipped as root)")
            return
        prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        os.chmod(TMP, 0o755)
        os.chmod(f.dir, 0o755)
    ro = os.path.join(f.dir, "ro")
    os.mkdir(ro, 0o555)
    os.chmod(ro, 0o555)
    for d, text in ((os.path.join(ro, "sub"), "cannot access data directory: mkdir %s/sub: "
                     "permission denied" % ro),
                    (ro, "cannot access data directory: open %s/.touch: permission denied" % ro)):
        args = f.args()
        args[args.index("--data-dir") + 1] = d
        refused(args, 1, text, prefix=prefix)


# -- e ------------------------------------------------------------------------

class Background:
    """A start expected to end by itself, run beside the other cases."""

    def __init__(self, args, timeout):
        self.result = None
        self.t = threading.Thread(target=self._run, args=(args, timeout), daemon=True)
        self.t.start()

    def _run(self, args, timeout):
        try:
            self.result = run(args, timeout=timeout)
        except Exception as e:  # noqa: BLE001
            self.result = (None, repr(e))

    def join(self):
        self.t.join()
        return self.result


UNRESOLVABLE = {}


def start_unresolvable():
    """Started first: etcd retries a name for 30 s before it gives up."""
    f = Flags()
    purl = "http://nosuch.invalid:%d" % f.pport
    args = f.args()
    args[args.index("--initial-advertise-peer-urls") + 1] = purl
    UNRESOLVABLE.update(f=f, purl=purl, bg=Background(args, timeout=90))


def case_e_host_names():
    """Members named by DNS (a name of 127.0.0.1 other than localhost): advertised
    peer and client URLs and --initial-cluster by name, listeners on addresses or
    localhost; three members form a cluster and serve, a fourth added by name joins."""
    host = hostname_to_loopback()
    if host is None:
        print("    (no host name of 127.0.0.1 besides localhost: skipped)")
    else:
        # one member: advertised by name, its --initial-cluster entry by address, and
        # the client listener on localhost (etcd binds localhost as 127.0.0.1)
        f = Flags()
        args = f.args()
        args[args.index("--listen-client-urls") + 1] = "http://localhost:%d" % f.cport
        args[args.index("--advertise-client-urls") + 1] = "http://%s:%d" % (host, f.cport)
        args[args.index("--initial-advertise-peer-urls") + 1] = "http://%s:%d" % (host, f.pport)
        p = Proc(args)
        try:
            wait_serving(f.curl, p)
            m = json.loads(etcdctl(f.curl, "member", "list", "-w", "json").stdout)["members"]
            check(m[0]["clientURLs"] == ["http://%s:%d" % (host, f.cport)], "member list %s" % m)
        finally:
            p.stop()
        with NamedCluster(host) as c:
            c.start()
            for i in range(3):
                c.etcdctl(i, "put", "e/%d" % i, "v")
            view = sorted((m.get("name"), tuple(m["peerURLs"])) for m in c.member_list(0))
            check(all(u.startswith("http://%s:" % host) for _, us in view for u in us),
                  "member list %s" % view)
            k = c.add_member("m3")
            check(c.etcdctl(k, "get", "e/0", "--print-value-only").stdout.strip() == "v",
                  "the member added by name does not serve")
            print("    members named %s: %s" % (host, [n for n, _ in sorted(view)] + ["m3"]))
    # a name that never resolves (started first, beside the other cases)
    u = UNRESOLVABLE
    rc, out = u["bg"].join()
    f = u["f"]
    text = ("--initial-cluster has default=%s but missing from --initial-advertise-peer-urls=%s "
            "(failed to resolve \"%s\" (lookup nosuch.invalid" % (f.purl, u["purl"], u["purl"]))
    check(rc == 1, "exit %s, want 1:\n%s" % (rc, out[-3000:]))
    check(text in out, "no %r in:\n%s" % (text, out[-3000:]))
    no_member_left(f)
    print("    unresolvable: exit 1: %s" % next(ln for ln in out.splitlines() if text in ln)
          .strip()[:200])


class NamedCluster(Cluster):
    """A cluster whose members advertise and list each other by |host|."""

    def __init__(self, host):
        super().__init__(TARGET)
        self.host = host
        named = ",".join("m%d=http://%s:%d" % (m.index, host, m.peer_port) for m in self.members)
        for m in self.members:
            m.initial_cluster = named
            m.__class__ = NamedMember

    def add_member(self, name, **kw):
        # the peer URL by name too
        client_port, peer_port = harness.free_port(), harness.free_port()
        purl = "http://%s:%d" % (self.host, peer_port)
        r = self.reconfigure(self.live()[0], "member", "add", name, "--peer-urls=%s" % purl)
        ic = re.search(r'ETCD_INITIAL_CLUSTER="([^"]*)"', r.stdout).group(1)
        m = NamedMember(self, len(self.members), name, "existing", ic, self.token, (),
                        client_port=client_port, peer_port=peer_port)
        self.members.append(m)
        m.start()
        self.wait_member(m.index, 60)
        return m.index

    def __enter__(self):
        return self


class NamedMember(Member):
    def args(self):
        a = super().args()
        host = self.cluster.host
        a[a.index("--initial-advertise-peer-urls") + 1] = "http://%s:%d" % (host, self.peer_port)
        a[a.index("--advertise-client-urls") + 1] = "http://%s:%d" % (host, self.client_port)
        return a


# -- f ------------------------------------------------------------------------

def case_f_join():
    """Joining with --initial-cluster-state existing."""
    with Cluster(TARGET, n=2) as c:
        # added with member add, started without --initial-cluster-token (the default,
        # "etcd-cluster", not the cluster's "test-cluster"): joins and serves
        k = c.add_member("m2", start=False)
        m = c.members[k]
        plain = m.args
        m.args = lambda: _without(plain(), "--initial-cluster-token")
        m.start()
        c.wait_member(k, timeout=60)
        r = c.etcdctl(k, "member", "list", "-w", "json")
        names = sorted(x.get("name") for x in json.loads(r.stdout)["members"])
        check(names == ["m0", "m1", "m2"], "member list through m2: %s" % names)
        c.etcdctl(k, "put", "f/joined", "yes")
        check(c.etcdctl(0, "get", "f/joined", "--print-value-only").stdout.strip() == "yes",
              "a put through the joined member is not seen")
        print("    m2 joined with the default token; member list through it: %s" % names)

        ic = ",".join("%s=%s" % (x.name, x.peer_url) for x in c.members)
        # not added: refused, no member left
        f = Flags("x")
        out = refused(f.args("--initial-cluster-state", "existing",
                             cluster=ic + ",x=%s" % f.purl), 1, "member count is unequal")
        check("error validating peerURLs {ClusterID:" in out, out[-2000:])
        no_member_left(f)
        # the peers it was given cannot be reached
        gone = "http://127.0.0.1:%d" % harness.free_port()
        refused(f.args("--initial-cluster-state", "existing",
                       cluster="m0=%s,x=%s" % (gone, f.purl)), 1,
                "cannot fetch cluster info from peer urls: could not retrieve cluster "
                "information from the given URLs")
        no_member_left(f)

        # added, but started as a new cluster with another token: its peers refuse it,
        # it cannot join; it must not say it is ready, nor answer member list
        k = c.add_member("m3", token="another-token", start=False)
        m = c.members[k]
        m.state = "new"
        m.start()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            check(m.running(), "m3 exited: %s" % m.log_tail())
            r = c.etcdctl(k, "member", "list", check=False, command_timeout="2s", timeout=30)
            check(r.returncode != 0, "member list through a member that cannot join answered "
                  "(exit 0): %r" % r.stdout)
            time.sleep(0.5)
        check("ready to serve client requests" not in m.log(),
              "a member that cannot join says it is ready:\n%s" % m.log_tail())
        print("    m3 (cannot join): no \"ready\" in its log; member list through it: exit %d, %s"
              % (r.returncode, (r.stderr.strip().splitlines() or [""])[-1][:120]))
        m.signal(signal.SIGKILL)


def _without(args, flag):
    a = list(args)
    if flag in a:
        i = a.index(flag)
        del a[i:i + 2]
    return a


# -- g ------------------------------------------------------------------------

def case_g_versions():
    """One version story: the binary's --version, the ctl tool's version, endpoint
    status and /version."""
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True).stdout
    f = Flags()
    p = Proc(f.args())
    try:
        wait_serving(f.curl, p)
        st = json.loads(etcdctl(f.curl, "endpoint", "status", "-w", "json").stdout)[0]["Status"]
        with urllib.request.urlopen(f.curl + "/version", timeout=10) as r:
            ver = json.loads(r.read())
    finally:
        p.stop()
    if TARGET == "etcd":
        etcd_ver = re.search(r"^etcd Version: (\S+)$", out, re.M).group(1)
        ctl = subprocess.run(["etcdctl", "version"], capture_output=True, text=True,
                             env=dict(os.environ, ETCDCTL_API="3")).stdout
        check(st["version"] == etcd_ver == ver["etcdserver"], "%s %s %s" % (out, st, ver))
        check(re.search(r"^API version: 3\.4$", ctl, re.M), ctl)
        print("    etcd %s: status %s, /version %s; etcdctl: %s"
              % (etcd_ver, st["version"], ver, ctl.strip().replace("\n", ", ")))
        return
    own = re.search(r"^quorum Version: (\S+)$", out, re.M)
    api = re.search(r"^API Version: (\S+)$", out, re.M)
    reported = re.search(r"^etcd Version reported to clients: (\S+)$", out, re.M)
    check(own and api and reported, "quorum --version: %r" % out)
    qctl = harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")
    for args in (["version"], ["--version"]):
        ctl = subprocess.run([qctl] + args, capture_output=True, text=True).stdout
        check(ctl == "quorumctl version: %s\nAPI version: %s\n" % (own.group(1), api.group(1)),
              "quorumctl %s: %r" % (args, ctl))
    check(api.group(1) == "3.4", out)
    check(re.match(r"^3\.4\.\d+$", reported.group(1)), out)
    check(st["version"] == reported.group(1) == ver["etcdserver"],
          "status %s, /version %s, --version %r" % (st["version"], ver, out))
    print("    quorum %s speaks etcd API %s, reports %s (status %s, /version %s)"
          % (own.group(1), api.group(1), reported.group(1), st["version"], ver))


CASES = [
    ("a_bad_flags", case_a_bad_flags),
    ("b_port_in_use", case_b_port_in_use),
    ("c_initial_cluster", case_c_initial_cluster),
    ("d_data_dir", case_d_data_dir),
    ("e_host_names", case_e_host_names),
    ("f_join", case_f_join),
    ("g_versions", case_g_versions),
]


def main(argv):
    want = argv[1:]
    cases = [(n, f) for n, f in CASES if not want or any(n.startswith(w) for w in want)]
    print("test_startup: target %s" % TARGET)
    if any(n.startswith("e_") for n, _ in cases):
        start_unresolvable()
    t00 = time.monotonic()
    failed = harness.run_cases(cases)
    print("%d passed, %d failed (%.0fs)" % (len(cases) - len(failed), len(failed),
                                            time.monotonic() - t00))
    if failed:
        print("failed: %s" % " ".join(failed))
    else:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
