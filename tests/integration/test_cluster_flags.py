#!/usr/bin/python3
"""etcd 3.4's cluster-behaviour flags (docs/cluster-flags.md), against quorum
(TARGET=quorum, the default) or etcd 3.4 (TARGET=etcd), which the expectations
are proven against:

  --strict-reconfig-check        member add/remove refused when they risk the
                                 quorum, with etcd's two errors; skipped when false
  --force-new-cluster            a stopped 3-member cluster restarted as one member
                                 keeping every key; a member added back
  --max-snapshots                old .snap files purged (quorum only: etcd purges
                                 every 30 s, too slow to wait for here)
  --unsafe-no-fsync              no WAL fdatasync (etcd_disk_wal_fsync_duration_seconds
                                 stays at 0), the data still there after a restart
  --experimental-initial-corrupt-check
                                 a member whose store differs refuses to start
                                 (quorum only: editing bbolt by hand is out of scope)
  --discovery-srv(-name)         bootstrap from DNS SRV records served by dnsmasq
                                 on a loopback port (quorum only: etcd's resolver
                                 reads /etc/resolv.conf, which a test cannot point
                                 at a port)

    TARGET=etcd /usr/bin/python3 test_cluster_flags.py [case ...]   # default: all

Every process runs on 127.0.0.1 on free ports and is signalled by its PID. No
timing assertions: every wait is a generous deadline.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from cluster import Cluster, Member  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
DEADLINE = 30.0


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def wait_for(pred, timeout=DEADLINE, step=0.1, what="condition"):
    harness.wait_for(pred, timeout, step, what)


def put(c, i, key, value):
    r = c.etcdctl(i, "put", key, value)
    check(r.stdout.strip() == "OK", "put through %s printed %r" % (c.members[i].name, r.stdout))


def get(c, i, key, serializable=False):
    args = ["get", key, "--print-value-only"]
    if serializable:
        args.append("--consistency=s")
    r = c.etcdctl(i, *args, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def etcdctl_fails(c, via, *args):
    """etcdctl through member via must fail; its stderr."""
    r = c.etcdctl(via, *args, check=False)
    check(r.returncode != 0, "etcdctl %s succeeded: %s" % (" ".join(args), r.stdout))
    return r.stderr


def add_unstarted(c, name, via):
    """member add without starting the member: (index, etcdctl result)."""
    return c.add_member(name, via=via, start=False)


# -- strict reconfiguration check ---------------------------------------------

def case_strict_reconfig_check():
    """A member down: adding one, or removing a live one, would leave no
    fault tolerance: "etcdserver: unhealthy cluster"; removing the member
    that is down is allowed. One started member of two cannot add a third:
    "re-configuration failed due to not enough started members"."""
    with Cluster(TARGET) as c:
        lead = c.wait_leader()
        follower, down = [i for i in range(3) if i != lead]
        c.kill(down, signal.SIGTERM)
        # etcd counts a peer as connected once its link has been up 5 s
        # (HealthInterval): the retry of a refusal that comes from that
        # (the cluster just started) ends once the links are old enough; a
        # member that is down keeps the refusal for good
        time.sleep(0.5)
        err = etcdctl_fails(c, lead, "member", "add", "extra",
                            "--peer-urls=http://127.0.0.1:%d" % harness.free_port())
        check("etcdserver: unhealthy cluster" in err, "member add with one down: %r" % err)
        fid = c.member_ids[follower]
        err = etcdctl_fails(c, lead, "member", "remove", "%x" % fid)
        check("etcdserver: unhealthy cluster" in err,
              "removing a live member with one down: %r" % err)
        check(fid in {m["ID"] for m in c.member_list(lead)}, "the refused remove removed it")
        # the member that is down is no part of the active quorum
        c.reconfigure(lead, "member", "remove", "%x" % c.member_ids[down])
        c.members[down].removed = True
        check(len(c.member_list(lead)) == 2, "the down member was not removed")
        put(c, lead, "strict/after", "1")
        print("  one down: add and live remove refused (unhealthy cluster); the down one removed")

    with Cluster(TARGET, n=1) as c:
        add_unstarted(c, "second", 0)          # one started of two: etcd's special case
        err = etcdctl_fails(c, 0, "member", "add", "third",
                            "--peer-urls=http://127.0.0.1:%d" % harness.free_port())
        check("etcdserver: re-configuration failed due to not enough started members" in err,
              "a third member with one started: %r" % err)
        check(len(c.member_list(0)) == 2, "the refused add was applied")
        print("  %s" % err.strip().splitlines()[-1][:150])


def case_strict_reconfig_check_off():
    """--strict-reconfig-check=false: the same add with a member down goes
    through (the cluster is then 4 voters with 2 up)."""
    with Cluster(TARGET, extra_args=["--strict-reconfig-check=false"]) as c:
        lead = c.wait_leader()
        down = next(i for i in range(3) if i != lead)
        c.kill(down, signal.SIGTERM)
        r = c.etcdctl(lead, "member", "add", "extra",
                      "--peer-urls=http://127.0.0.1:%d" % harness.free_port(), check=False)
        check(r.returncode == 0 and "added to cluster" in r.stdout,
              "member add with the check off: %s" % (r.stdout + r.stderr))
        print("  added with one member down: %s" % r.stdout.strip().splitlines()[0])


# -- force new cluster -------------------------------------------------------------

def case_force_new_cluster():
    """Three members with data, all stopped; m0 restarted with
    --force-new-cluster serves every key alone, lists one member, takes
    writes, and a new member added back replicates everything."""
    with Cluster(TARGET) as c:
        for k in range(30):
            put(c, k % 3, "fnc/k%02d" % k, "v%02d" % k)
        lead = c.wait_leader()
        wait_for(lambda: all(get(c, i, "fnc/k29", serializable=True) == "v29"
                             for i in range(3)), what="every member has every key")
        id0 = c.member_ids[0]
        c.stop()
        m0 = c.members[0]
        m0.extra_args.append("--force-new-cluster")
        for i in (1, 2):
            c.members[i].removed = True
        c.restart(0)
        c.wait_leader()
        ms = c.member_list(0)
        check(len(ms) == 1 and ms[0]["name"] == "m0", "member list after the restart: %s" % ms)
        check(ms[0]["ID"] == id0, "the member kept its id")
        r = c.etcdctl(0, "get", "fnc/", "--prefix", "--keys-only")
        keys = [k for k in r.stdout.split() if k]
        check(keys == ["fnc/k%02d" % k for k in range(30)], "keys after the restart: %s" % keys)
        put(c, 0, "fnc/after", "alone")
        j = c.add_member("m3", via=0)
        wait_for(lambda: get(c, j, "fnc/after", serializable=True) == "alone",
                 what="the added member has the write made alone")
        check(get(c, j, "fnc/k07", serializable=True) == "v07", "the added member lacks k07")
        put(c, j, "fnc/two", "2")
        check(get(c, 0, "fnc/two") == "2", "a write through the added member")
        check(len(c.member_list(0)) == 2, "member list after the add: %s" % c.member_list(0))
        # (a restart with the flag still set would drop m3 again, in both)
        print("  m0 alone with %d keys; m3 added back and replicating" % len(keys))


# -- max snapshots ---------------------------------------------------------------

def _snaps(data_dir):
    d = os.path.join(data_dir, "member", "snap")
    return sorted(f for f in os.listdir(d) if f.endswith(".snap")) if os.path.isdir(d) else []


def case_max_snapshots():
    """--snapshot-count 10 with --max-snapshots 2 keeps 2 .snap files;
    --max-snapshots 0 keeps every one."""
    if TARGET == "etcd":
        print("  (quorum only: etcd purges every 30 s)")
        return
    for limit in (2, 0):
        with harness.Server(TARGET, extra_args=["--snapshot-count", "10", "--max-snapshots",
                                                str(limit)]) as srv:
            for k in range(8):
                srv.etcdctl("put", "snap/k%d" % k, "x" * 10)
            # each etcdctl put is one entry: 8 puts plus the member's own
            # entries pass 10 applied entries a few times
            for k in range(8, 70):
                srv.etcdctl("put", "snap/k%d" % k, "y")
            snaps = _snaps(srv.data_dir)
            if limit:
                wait_for(lambda: len(_snaps(srv.data_dir)) == limit,
                         what="%d snapshots left (%s)" % (limit, _snaps(srv.data_dir)))
            else:
                check(len(snaps) >= 5, "--max-snapshots 0 kept %s" % snaps)
            print("  --max-snapshots %d: %s" % (limit, _snaps(srv.data_dir)))


# -- unsafe no fsync -------------------------------------------------------------

def _fsyncs(endpoint):
    body = urllib.request.urlopen("http://%s/metrics" % endpoint, timeout=10).read().decode()
    m = re.search(r"^etcd_disk_wal_fsync_duration_seconds_count (\d+)", body, re.M)
    check(m is not None, "no etcd_disk_wal_fsync_duration_seconds_count in /metrics")
    return int(m.group(1))


def case_unsafe_no_fsync():
    """--unsafe-no-fsync: puts without a WAL fdatasync (the fsync histogram
    does not move; without the flag every put counts one), still there
    after a restart by SIGTERM. (Both servers sync while creating the
    member, before the flag applies.)"""
    tmp = tempfile.mkdtemp(prefix="nofsync-")
    try:
        with harness.Server(TARGET, data_dir=os.path.join(tmp, "a")) as srv:
            before = _fsyncs(srv.endpoint)
            for k in range(5):
                srv.etcdctl("put", "k%d" % k, "v")
            with_sync = _fsyncs(srv.endpoint) - before
        check(with_sync >= 5, "%d fsyncs counted for 5 puts without the flag" % with_sync)
        d = os.path.join(tmp, "b")
        srv = harness.Server(TARGET, data_dir=d, extra_args=["--unsafe-no-fsync"])
        with srv:
            before = _fsyncs(srv.endpoint)
            for k in range(5):
                srv.etcdctl("put", "nf/k%d" % k, "v%d" % k)
            n = _fsyncs(srv.endpoint) - before
            check(n == 0, "%d WAL fsyncs counted for 5 puts with --unsafe-no-fsync" % n)
            srv.kill(signal.SIGTERM)
            srv.start()
            r = srv.etcdctl("get", "nf/k4", "--print-value-only")
            check(r.stdout.strip() == "v4", "after the restart: %r" % r.stdout)
        print("  WAL fsyncs for 5 puts: %d without the flag, 0 with it; data kept over a "
              "restart" % with_sync)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- initial corruption check --------------------------------------------------------

def _corrupt_one_value(db_path, old, new):
    dump = subprocess.run(["mdb_dump", "-n", "-s", "key", db_path], capture_output=True,
                          text=True, check=True).stdout
    h_old, h_new = old.encode().hex(), new.encode().hex()
    check(h_old in dump, "value %r not found in the dump" % old)
    subprocess.run(["mdb_load", "-n", "-s", "key", db_path], input=dump.replace(h_old, h_new),
                   capture_output=True, text=True, check=True)


def case_initial_corrupt_check():
    """A healthy member restarted with --experimental-initial-corrupt-check
    serves; one whose store was edited exits with etcd's error."""
    if TARGET == "etcd":
        print("  (quorum only: editing a member's bbolt file by hand is out of scope)")
        return
    with Cluster(TARGET) as c:
        for k in range(10):
            put(c, k % 3, "icc/k%d" % k, "value-%d" % k)
        lead = c.wait_leader()
        victim = next(i for i in range(3) if i != lead)
        wait_for(lambda: get(c, victim, "icc/k9", serializable=True) == "value-9",
                 what="the victim has every key")
        m = c.members[victim]
        m.extra_args.append("--experimental-initial-corrupt-check")
        c.restart(victim)
        check("no corruption" in m.log(), "the healthy restart logged no check")
        check(get(c, victim, "icc/k3") == "value-3", "the checked member does not serve")
        c.kill(victim, signal.SIGTERM)
        _corrupt_one_value(os.path.join(m.data_dir, "member", "db", "data.mdb"),
                           "value-7", "value-x")
        m.start()
        try:
            m.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the corrupted member still runs: %s" % m.log_tail())
        m._close_log()
        check(m.proc.returncode != 0, "exit status %d" % m.proc.returncode)
        check("found data inconsistency with peers" in m.log(), "no error: %s" % m.log_tail())
        line = next(ln for ln in m.log().splitlines() if "data inconsistency" in ln)
        print("  %s (exit %d)" % (line.strip()[:160], m.proc.returncode))
        m.removed = True
        put(c, lead, "icc/after", "1")


# -- DNS SRV discovery ------------------------------------------------------------

class Dnsmasq:
    """dnsmasq (Debian's dnsmasq-base) answering for one domain on a free
    loopback port, nothing else (no upstream, no /etc/hosts); killed by PID."""

    def __init__(self, tmp, srv_records):
        self.port = harness.free_port()
        self.log_path = os.path.join(tmp, "dnsmasq.log")
        binary = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
        args = [binary, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                "--no-hosts", "--pid-file=", "--bind-interfaces", "--listen-address=127.0.0.1",
                "--port=%d" % self.port, "--local=/example.test/", "--log-queries",
                "--log-facility=%s" % self.log_path]
        if os.getuid() == 0:
            args.append("--user=root")
        for name, target, port in srv_records:
            args.append("--srv-host=%s,%s,%d,0,0" % (name, target, port))
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        wait_for(lambda: self.proc.poll() is not None or os.path.exists(self.log_path),
                 what="dnsmasq up")
        time.sleep(0.2)
        check(self.proc.poll() is None, "dnsmasq exited: %s" % self.proc.stderr.read())

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)


def _srv_member(tmp, name, cport, pport, dns_port, domain, extra=()):
    """A quorum process bootstrapping from DNS: no --initial-cluster."""
    curl, purl = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    # advertised as the SRV target names it: etcd compares "localhost" as
    # written, without resolving it
    aurl = "http://localhost:%d" % pport
    args = [harness.quorum_binary(), "--name", name,
            "--data-dir", os.path.join(tmp, name + ".quorum"),
            "--listen-client-urls", curl, "--advertise-client-urls", curl,
            "--listen-peer-urls", purl, "--initial-advertise-peer-urls", aurl,
            "--discovery-srv", domain, "--heartbeat-interval", "50",
            "--election-timeout", "500"] + list(extra) + harness.quorum_args()
    env = dict(os.environ, QUORUM_DNS_SERVER="127.0.0.1:%d" % dns_port)
    env.pop("ETCDCTL_API", None)
    log = open(os.path.join(tmp, name + ".log"), "ab")
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         env=env)
    p.log_path = log.name
    log.close()
    return p


def _ctl(cport, *args):
    env = dict(os.environ, ETCDCTL_API="3")
    return subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % cport,
                           "--command-timeout=10s"] + list(args), capture_output=True,
                          text=True, env=env, timeout=30)


def case_discovery_srv():
    """Three members started with --discovery-srv example.test and
    --discovery-srv-name q find each other through the SRV records of
    _etcd-server-q._tcp.example.test (targets "localhost": the member whose
    advertised peer URL has the record's address is itself, the others
    are named 0, 1 until they publish); a member of a domain without
    records, or not in them, exits with etcd's error."""
    if TARGET == "etcd":
        print("  (quorum only: etcd 3.4's resolver reads /etc/resolv.conf, which cannot name "
              "a port; see docs/cluster-flags.md for what etcd 3.4.23 does)")
        return
    tmp = tempfile.mkdtemp(prefix="srv-")
    procs, dns = [], None
    ports = [(harness.free_port(), harness.free_port()) for _ in range(4)]
    try:
        recs = [("_etcd-server-q._tcp.example.test", "localhost", pp) for _, pp in ports[:3]]
        dns = Dnsmasq(tmp, recs)
        for i in range(3):
            procs.append(_srv_member(tmp, "m%d" % i, ports[i][0], ports[i][1], dns.port,
                                     "example.test", ["--discovery-srv-name", "q"]))

        def all_healthy():
            for p in procs:
                check(p.poll() is None, "a member exited: %s" % open(p.log_path).read()[-3000:])
            return all(_ctl(cp, "endpoint", "health").returncode == 0 for cp, _ in ports[:3])
        wait_for(all_healthy, timeout=60, what="the three members serve")
        r = _ctl(ports[0][0], "put", "srv/k", "v")
        check(r.returncode == 0, "put: %s" % r.stderr)
        r = _ctl(ports[2][0], "get", "srv/k", "--print-value-only")
        check(r.stdout.strip() == "v", "get through m2: %r" % r.stdout)

        def names():
            r = _ctl(ports[1][0], "member", "list", "-w", "json")
            ms = json.loads(r.stdout)["members"] if r.returncode == 0 else []
            return sorted((m.get("name", ""), tuple(m.get("peerURLs", []))) for m in ms)
        want = sorted(("m%d" % i, ("http://localhost:%d" % ports[i][1],)) for i in range(3))
        wait_for(lambda: names() == want, what="member list %s" % want)
        log0 = open(procs[0].log_path).read()
        check("got bootstrap from DNS for etcd-server at m0=http://localhost:%d" % ports[0][1]
              in log0, "m0 did not log its own record")
        check(re.search(r"got bootstrap from DNS for etcd-server at [01]=http://localhost:", log0),
              "m0 did not name the others 0 and 1")
        print("  3 members from _etcd-server-q._tcp.example.test: %s" % [n for n, _ in names()])

        # a domain without records; a member whose address is not in them
        bad = [_srv_member(tmp, "lost", ports[3][0], ports[3][1], dns.port, "nowhere.example.test"),
               _srv_member(tmp, "stranger", harness.free_port(), harness.free_port(), dns.port,
                           "example.test", ["--discovery-srv-name", "q"])]
        outs = []
        for p in bad:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                raise AssertionError("a member without SRV records runs: %s"
                                     % open(p.log_path).read()[-2000:])
            check(p.returncode == 1, "exit status %d" % p.returncode)
            outs.append(open(p.log_path).read())
        check("error setting up initial cluster: error querying DNS SRV records for "
              "_etcd-server-ssl lookup _etcd-server-ssl._tcp.nowhere.example.test on 127.0.0.1:%d: "
              "no such host" % dns.port in outs[0], "no-record error: %s" % outs[0][-1500:])
        check('cannot find local etcd member "stranger" in SRV records' in outs[1],
              "not-found error: %s" % outs[1][-1500:])
        for o in outs:
            line = next(ln for ln in o.splitlines() if "error setting up initial cluster" in ln)
            print("  %s" % line.strip()[:170])
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
        if dns is not None:
            dns.stop()
        shutil.rmtree(tmp, ignore_errors=True)


CASES = [
    ("strict_reconfig_check", case_strict_reconfig_check),
    ("strict_reconfig_check_off", case_strict_reconfig_check_off),
    ("force_new_cluster", case_force_new_cluster),
    ("max_snapshots", case_max_snapshots),
    ("unsafe_no_fsync", case_unsafe_no_fsync),
    ("initial_corrupt_check", case_initial_corrupt_check),
    ("discovery_srv", case_discovery_srv),
]


def main(argv):
    want = argv[1:]
    cases = [(n, f) for n, f in CASES if not want or any(n == w for w in want)]
    if not cases:
        print("no case matches %s; cases: %s" % (want, [n for n, _ in CASES]))
        return 2
    print("test_cluster_flags: target %s" % TARGET)
    failed = []
    for name, fn in cases:
        t0 = time.monotonic()
        print("%s ..." % name, flush=True)
        try:
            fn()
            print("PASS %s (%.1f s)" % (name, time.monotonic() - t0), flush=True)
        except Exception:
            traceback.print_exc()
            print("FAIL %s" % name, flush=True)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
