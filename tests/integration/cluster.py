"""Start, kill, restart and reconfigure a multi-member quorum or etcd 3.4 cluster.

Every member listens on 127.0.0.1 on its own free client and peer ports, has
its own data dir and log in one temp dir, and is signalled by its own PID
(never by name). Run with /usr/bin/python3.

    with Cluster("etcd") as c:             # or Cluster("quorum"); n=3 by default
        c.endpoints                        # ["127.0.0.1:P0", ...] of the live members
        c.etcdctl(0, "put", "k", "v")      # etcdctl 3.4 against member 0 only
        i = c.leader_index()
        c.kill(i)                          # SIGKILL by PID, reaped
        c.wait_leader()
        c.restart(i)                       # same data dir, ports and flags
        j = c.add_member("m3")             # etcdctl member add + start with state existing
        c.remove_member(j)

Members are named m0..m(n-1) and keep their index for the life of the
cluster (an added member gets the next index; a removed one keeps its slot,
marked removed). Heartbeat 50 ms / election 500 ms unless overridden, so a
leader change takes about a second.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import traceback

import harness

TERMINATING = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def _hex(member_id):
    return "%x" % member_id


class Member:
    """One member: its name, ports, data dir, log and (while running) process."""

    def __init__(self, cluster, index, name, state, initial_cluster, token, extra_args,
                 client_port=None, peer_port=None):
        self.cluster = cluster
        self.index = index
        self.name = name
        self.client_port = client_port or harness.free_port()
        self.peer_port = peer_port or harness.free_port()
        self.data_dir = os.path.join(cluster.tmp, "%s.%s" % (name, cluster.kind))
        self.log_path = os.path.join(cluster.tmp, "%s-%s.log" % (cluster.kind, name))
        self.state = state
        self.initial_cluster = initial_cluster
        self.token = token
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_file = None
        self.removed = False
        self.learner = False
        self.stopped = False          # SIGSTOP'ed (and not yet SIGCONT'ed)

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.client_port

    @property
    def client_url(self):
        return "%s://127.0.0.1:%d" % (self.cluster.client_scheme, self.client_port)

    @property
    def peer_url(self):
        return "%s://127.0.0.1:%d" % (self.cluster.peer_scheme, self.peer_port)

    def args(self):
        c = self.cluster
        binary = harness.quorum_binary() if c.kind == "quorum" else harness.etcd_binary()
        return [binary, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", self.client_url,
                "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", self.initial_cluster,
                "--initial-cluster-state", self.state,
                "--initial-cluster-token", self.token,
                "--heartbeat-interval", str(c.heartbeat_ms),
                "--election-timeout", str(c.election_ms)] + (
                    c.tls.member_flags() if c.tls else []) + c.extra_args + self.extra_args + (
                    harness.quorum_args() if c.kind == "quorum" else [])

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        assert not self.running(), "%s already running" % self.name
        env = dict(os.environ)
        env.pop("ETCDCTL_API", None)
        self.log_file = open(self.log_path, "ab")
        self.log_file.write(("\n==== %s start: %s\n" % (time.strftime("%H:%M:%S"),
                                                      " ".join(self.args()))).encode())
        self.log_file.flush()
        self.proc = subprocess.Popen(self.args(), stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        self.stopped = False

    def signal(self, sig):
        """Send sig by PID; a terminating signal is waited for (and the process reaped)."""
        if not self.running():
            return
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
            return
        if sig == signal.SIGCONT:
            self.stopped = False
            return
        if sig in TERMINATING:
            if self.stopped and sig != signal.SIGKILL:
                os.kill(self.proc.pid, signal.SIGCONT)   # a stopped process can't act on TERM
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.stopped = False
            self._close_log()

    def _close_log(self):
        if self.log_file:
            self.log_file.close()
            self.log_file = None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=3000):
        return self.log()[-n:]


class Cluster:
    """n members m0..m(n-1) of kind "quorum" or "etcd", started all at once."""

    def __init__(self, kind, n=3, extra_args=(), token="test-cluster", heartbeat_ms=50,
                 election_ms=500, command_timeout="15s", keep=None, tls=None):
        """tls: a harness.TLS: https:// client and/or peer URLs, its flags to every
        member and its --cacert/--cert/--key to etcdctl."""
        self.kind = kind
        self.tls = tls
        self.client_scheme = tls.client_scheme if tls else "http"
        self.peer_scheme = tls.peer_scheme if tls else "http"
        self.n = n
        self.extra_args = list(extra_args)
        self.token = token
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.command_timeout = command_timeout
        self.keep = keep if keep is not None else bool(os.environ.get("KEEP_CLUSTER"))
        self.tmp = tempfile.mkdtemp(prefix="%s-cluster-" % kind)
        self.members = []
        ports = [(harness.free_port(), harness.free_port()) for _ in range(n)]
        initial = ",".join("m%d=%s://127.0.0.1:%d" % (i, self.peer_scheme, p[1])
                           for i, p in enumerate(ports))
        for i in range(n):
            self.members.append(Member(self, i, "m%d" % i, "new", initial, token, (),
                                       client_port=ports[i][0], peer_port=ports[i][1]))

    # -- lifecycle -------------------------------------------------------------

    def start(self, timeout=60.0):
        for m in self.members:
            m.start()
        try:
            for i in range(len(self.members)):
                self.wait_member(i, timeout)
            self.wait_leader(timeout)
        except Exception:
            self.cleanup()
            raise
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.dump_logs()
            # after the logs, so that a reader of the output's last lines
            # (CI shows the tail) sees what failed, not just the logs
            print("---- the test failed here ----\n%s"
                  % "".join(traceback.format_exception(exc_type, exc, tb)), flush=True)
        self.cleanup()

    def stop(self):
        """SIGTERM every running member (by PID) and wait for it."""
        for m in self.members:
            m.signal(signal.SIGTERM)

    def cleanup(self):
        for m in self.members:
            if m.running():
                m.signal(signal.SIGKILL)
            m._close_log()
        if self.keep:
            print("cluster: data dirs and logs kept in %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def dump_logs(self, n=2500):
        for m in self.members:
            print("---- %s log tail (%s) ----\n%s" % (m.name, m.log_path, m.log_tail(n)))

    # -- addressing ------------------------------------------------------------

    def live(self):
        """Indices of the members that are not removed and whose process runs."""
        return [m.index for m in self.members if not m.removed and m.running()]

    def current(self):
        """Indices of the members that are not removed (running or not)."""
        return [m.index for m in self.members if not m.removed]

    @property
    def endpoints(self):
        return [self.members[i].endpoint for i in self.current()]

    def endpoint(self, i):
        return self.members[i].endpoint

    def etcdctl(self, i, *args, check=True, timeout=None, input=None, command_timeout=None):
        """etcdctl 3.4 against member i only (ETCDCTL_API defaults to 3)."""
        env = dict(os.environ)
        env.setdefault("ETCDCTL_API", "3")
        ct = command_timeout or self.command_timeout
        if timeout is None:
            timeout = _seconds(ct) + 30
        cmd = ["etcdctl", "--endpoints", self.members[i].endpoint,
               "--command-timeout=%s" % ct] + (
                   self.tls.etcdctl_flags() if self.tls else []) + list(args)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                           input=input)
        if check and r.returncode != 0:
            raise RuntimeError("etcdctl [%s] %s failed (%d): %s%s"
                               % (self.members[i].name, " ".join(args), r.returncode,
                                  r.stderr, r.stdout))
        return r

    def status(self, i, timeout=10):
        """etcdctl endpoint status -w json of member i, as a dict (the "Status" part)."""
        r = self.etcdctl(i, "endpoint", "status", "-w", "json", timeout=timeout + 10,
                         command_timeout="%ds" % timeout)
        st = json.loads(r.stdout)[0]["Status"]
        # etcdctl's JSON leaves out zero fields (e.g. "leader" while there is none)
        for k in ("leader", "raftIndex", "raftTerm", "raftAppliedIndex"):
            st.setdefault(k, 0)
        for k in ("member_id", "revision", "raft_term", "cluster_id"):
            st.setdefault("header", {}).setdefault(k, 0)
        return st

    def member_list(self, i=None):
        """The members as member i (default: any live member) lists them: a list of dicts
        with ID, name, peerURLs, clientURLs, isLearner."""
        for j in ([i] if i is not None else self.live()):
            r = self.etcdctl(j, "member", "list", "-w", "json", check=i is not None)
            if r.returncode == 0:
                out = json.loads(r.stdout)["members"]
                for mem in out:
                    mem.setdefault("name", "")
                    mem.setdefault("clientURLs", [])
                    mem.setdefault("peerURLs", [])
                    mem["isLearner"] = bool(mem.get("isLearner", False))
                return out
        raise RuntimeError("no live member answers member list")

    @property
    def member_ids(self):
        """{index: member id} for the current members, from member list (by name) and,
        for a member not started yet, by peer URL."""
        out = {}
        for mem in self.member_list():
            for m in self.members:
                if m.removed:
                    continue
                if mem["name"] == m.name or m.peer_url in mem["peerURLs"]:
                    out[m.index] = mem["ID"]
        return out

    def leader_index(self):
        """The index of the leader that every running, not-stopped member reports
        (each asked with endpoint status), or None while they disagree, some report no
        leader, or the reported leader is not a running member."""
        ids = {}
        leaders = set()
        for i in self.live():
            m = self.members[i]
            if m.stopped:
                continue
            try:
                st = self.status(i, timeout=3)
            except Exception:  # noqa: BLE001
                return None
            ids[st["header"]["member_id"]] = i
            leaders.add(st["leader"])
        if len(leaders) != 1:
            return None
        lead = leaders.pop()
        return ids.get(lead)

    def wait_leader(self, timeout=None):
        """Wait until leader_index() is not None; timeout default 20 election timeouts
        (at least 30 s)."""
        if timeout is None:
            timeout = max(30.0, 20 * self.election_ms / 1000.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.leader_index()
            if i is not None:
                return i
            time.sleep(0.1)
        raise RuntimeError("no agreed leader after %.0fs; statuses: %s"
                           % (timeout, self._statuses()))

    def _statuses(self):
        out = []
        for i in self.live():
            try:
                st = self.status(i, timeout=3)
                out.append("%s: id %x leader %x term %d" % (
                    self.members[i].name, st["header"]["member_id"], st["leader"],
                    st["raftTerm"]))
            except Exception as e:  # noqa: BLE001
                out.append("%s: %s" % (self.members[i].name, str(e).strip()[-200:]))
        return "; ".join(out)

    def wait_member(self, i, timeout=60.0):
        """Wait until member i answers endpoint status with a leader and, if it is a
        voter, endpoint health (a linearizable read through the leader)."""
        m = self.members[i]
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not m.running():
                raise RuntimeError("%s exited with %s; log:\n%s"
                                   % (m.name, m.proc.returncode if m.proc else None,
                                      m.log_tail()))
            try:
                st = self.status(i, timeout=3)
                if st["leader"] != 0:
                    if m.learner:
                        return
                    r = self.etcdctl(i, "endpoint", "health", check=False,
                                     command_timeout="5s")
                    if r.returncode == 0:
                        return
                    last = r.stderr + r.stdout
                else:
                    last = "no leader"
            except Exception as e:  # noqa: BLE001
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError("%s not ready after %.0fs: %s\n%s"
                           % (m.name, timeout, last.strip(), m.log_tail()))

    # -- faults ----------------------------------------------------------------

    def kill(self, i, sig=signal.SIGKILL):
        """Send sig to member i by PID. SIGKILL/SIGTERM are waited for; SIGSTOP and
        SIGCONT return at once."""
        self.members[i].signal(sig)

    def restart(self, i, wait=True, timeout=60.0):
        """Start member i again on its data dir with the same flags (etcd ignores the
        --initial-cluster* flags once the data dir exists)."""
        m = self.members[i]
        if m.running():
            m.signal(signal.SIGTERM)
        m.start()
        if wait:
            self.wait_member(i, timeout)
        return i

    # -- membership ------------------------------------------------------------

    def add_member(self, name, learner=False, via=None, token=None, start=True, wait=True,
                   timeout=60.0, extra_args=()):
        """etcdctl member add on a live member (via), then start the new process with
        --initial-cluster-state existing and the ETCD_INITIAL_CLUSTER line etcdctl
        printed. Returns the new member's index."""
        via = via if via is not None else self.live()[0]
        client_port, peer_port = harness.free_port(), harness.free_port()
        purl = "%s://127.0.0.1:%d" % (self.peer_scheme, peer_port)
        args = ["member", "add", name, "--peer-urls=%s" % purl]
        if learner:
            args.append("--learner")
        r = self.reconfigure(via, *args)
        mid = re.search(r"Member\s+([0-9a-f]+) added", r.stdout)   # "%16x": may be space-padded
        ic = re.search(r'ETCD_INITIAL_CLUSTER="([^"]*)"', r.stdout)
        if not mid or not ic:
            raise RuntimeError("unexpected member add output: %r" % r.stdout)
        m = Member(self, len(self.members), name, "existing", ic.group(1),
                   token or self.token, extra_args, client_port=client_port,
                   peer_port=peer_port)
        m.learner = learner
        m.added_id = int(mid.group(1), 16)
        self.members.append(m)
        if start:
            m.start()
            if wait:
                self.wait_member(m.index, timeout)
        return m.index

    def reconfigure(self, via, *args, timeout=60.0):
        """etcdctl member add/remove/promote/update through member via, retried while
        etcd answers "unhealthy cluster" (its --strict-reconfig-check refuses a change
        until every voter has been connected for 5 s, e.g. just after a (re)start) or a
        learner is "not ready" to be promoted (not caught up yet). Nothing was changed
        when those errors come back, so the retry cannot apply a change twice."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.etcdctl(via, *args, check=False)
            if r.returncode == 0:
                return r
            err = r.stderr + r.stdout
            if time.monotonic() > deadline or not (
                    "unhealthy cluster" in err or "can only promote a learner member which is "
                    "in sync with leader" in err):
                raise RuntimeError("etcdctl [%s] %s failed (%d): %s"
                                   % (self.members[via].name, " ".join(args), r.returncode, err))
            time.sleep(0.5)

    def promote(self, i, via=None):
        via = via if via is not None else self.voter_other_than(i)
        r = self.reconfigure(via, "member", "promote", _hex(self.member_ids[i]))
        self.members[i].learner = False
        return r

    def voter_other_than(self, i):
        for j in self.live():
            if j != i and not self.members[j].learner and not self.members[j].stopped:
                return j
        raise RuntimeError("no other live voter")

    def remove_member(self, i, via=None, timeout=30.0):
        """etcdctl member remove of member i (through another live member); its process
        is then expected to exit (etcd exits on its own) and is SIGTERM'ed otherwise."""
        mid = self.member_ids[i]
        via = via if via is not None else self.voter_other_than(i)
        r = self.reconfigure(via, "member", "remove", _hex(mid))
        m = self.members[i]
        m.removed = True
        if m.proc is not None:
            try:
                m.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            m.signal(signal.SIGTERM)
            m._close_log()
        return r


def _seconds(d):
    d = str(d)
    if d.endswith("ms"):
        return float(d[:-2]) / 1000.0
    if d.endswith("s"):
        return float(d[:-1])
    if d.endswith("m"):
        return float(d[:-1]) * 60
    return float(d)
