#!/usr/bin/python3
"""quorumctl with one member of three down, as etcdctl 3.4 behaves.

With a member killed, etcdctl 3.4 reports that member per endpoint and
carries on with the others: endpoint status and hashkv print the live
members and a "Failed to get the status/hash of endpoint ..." line for the
dead one, defrag defragments the others, endpoint health checks all at
once, --cluster finds the members through any live endpoint, and member
list and alarm fail over to the next endpoint. Each case below is written
out as etcdctl 3.4.23 prints it against etcd 3.4.23 (normalized: see
Norm), with its exit code; the same cases hold for quorumctl against
quorum.

TARGET=quorum (default): quorumctl ($QUORUMCTL_BIN) against three quorum
members ($QUORUM_BIN); TARGET=etcd: etcdctl against three etcd members, which
proves the expectations are etcdctl's.

Phases: (1) member m1 killed (its port refuses connections), (2) m1
restarted and then stopped with SIGSTOP (its port accepts but never
answers), (3) m1 killed again with auth enabled (--user, a wrong password,
no user). m0 is made the leader first, so "is leader" is known.

Time: etcdctl gives a dead member the whole --command-timeout (grpc-go
retries the connection until the call's deadline); quorumctl gives it at
most --dial-timeout. Each case's time is printed beside its bound (per
dead endpoint asked in turn, the command timeout (etcdctl) or the dial
timeout (quorumctl), and once for endpoint health, which asks every
endpoint at once), as a measurement: on a loaded machine a correct run can
pass a bound by a second, so only the case with a command timeout far
above the dial timeout (stopped: the command timeout not waited out) is
asserted on.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
QCTL = os.environ.get("QUORUMCTL_BIN") or os.path.join(harness.ROOT, "build", "tools",
                                                          "quorumctl", "quorumctl")
FAILS = []
CHECKS = [0]
# --record: print each case's normalized output as a case of this file
RECORD = "--record" in sys.argv

DIAL, CMD = 1.0, 2.0          # the timeouts most cases run with
T = ["--dial-timeout=1s", "--command-timeout=2s"]
SLACK = 2.0                   # process start, live members' calls


def run(endpoints, args, timeout=120):
    exe = ["etcdctl"] if TARGET == "etcd" else [QCTL]
    env = dict(os.environ, ETCDCTL_API="3")
    t0 = time.monotonic()
    r = subprocess.run(exe + ["--endpoints", endpoints] + list(args), capture_output=True,
                       text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    # etcdctl's zap logger: a warning line per failed call, not the command's output
    err = "".join(l for l in r.stderr.splitlines(True) if not l.startswith('{"level":'))
    return r.returncode, r.stdout, err, took


class Norm:
    """What differs between two clusters, or two runs, as placeholders: the
    members' client and peer endpoints (<EPi>, <PEERi>), member ids (<IDi>,
    hex and decimal), the cluster id (<CID>), the version (etcd 3.4.23,
    quorum 3.4.0), database sizes, raft terms and indexes, revisions,
    durations ("took"), hashes (numbered in order of appearance, so equal
    hashes stay equal) and tables' column widths."""

    def __init__(self, c):
        self.ports = {}
        for i, m in enumerate(c.members):
            self.ports[str(m.client_port)] = "<EP%d>" % i
            self.ports[str(m.peer_port)] = "<PEER%d>" % i
        self.ids = {}
        for i, mid in c.member_ids.items():
            self.ids["%x" % mid] = "<ID%d>" % i
            self.ids[str(mid)] = "<ID%d>" % i
        cid = c.status(0)["header"]["cluster_id"]
        self.ids["%x" % cid] = "<CID>"
        self.ids[str(cid)] = "<CID>"

    def port(self, port, name):
        self.ports[str(port)] = name

    def __call__(self, s):
        s = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: self.ports.get(m.group(1), m.group(0)), s)
        s = re.sub(r"\b[0-9a-f]+\b", lambda m: self.ids.get(m.group(0), m.group(0)), s)
        hashes = {}

        def h(m):
            v = hashes.setdefault(m.group(2), "<HASH%d>" % len(hashes))
            return m.group(1) + v + m.group(3)
        s = re.sub(r'("hash":)(\d+)()', h, s)
        s = re.sub(r'(?m)^("Hash" : )(\d+)()$', h, s)
        s = re.sub(r"(?m)^(\S+, )(\d+)()$", h, s)                      # hashkv simple
        s = re.sub(r"(?m)^(\| \S+ +\| +)(\d+)( \|)$", h, s)             # hashkv table
        s = re.sub(r"\b3\.4\.\d+\b", "<VER>", s)
        s = re.sub(r"\b[\d.]+ [kMG]?B\b", "<SIZE>", s)
        s = re.sub(r'"(revision|raft_term|raftIndex|raftTerm|raftAppliedIndex|dbSize|'
                   r'dbSizeInUse)":\d+', r'"\1":N', s)
        s = re.sub(r'(?m)^"(Revision|RaftTerm|RaftIndex|RaftAppliedIndex|DBSize)" : \d+$',
                   r'"\1" : N', s)
        s = re.sub(r", (true|false), (true|false), \d+, \d+, \d+, ", r", \1, \2, N, N, N, ", s)
        s = re.sub(r"\| +(true|false) +\| +(true|false) +\| +\d+ +\| +\d+ +\| +\d+ +\|",
                   r"| \1 | \2 | N | N | N |", s)
        s = re.sub(r"\b\d+(\.\d+)?(ns|µs|ms|s)\b", "<DUR>", s)
        # table widths follow the contents
        s = re.sub(r"(?m)^([+-]+)$", lambda m: re.sub(r"-+", "-", m.group(1)), s)
        s = re.sub(r"(?m)^(\|.*)$", lambda m: re.sub(r" +", " ", m.group(1)), s)
        return s


def order_free(s, mode):
    """Outputs whose order is not fixed: endpoint health prints in order of
    completion, and --cluster lists members in member list's order (by id,
    and the ids differ between clusters): sorted here."""
    if mode == "lines":
        lines = s.splitlines()
        keep = [l for l in lines if l.startswith("Error:")]
        return "\n".join(sorted(l for l in lines if not l.startswith("Error:")) + keep) + (
            "\n" if s else "")
    if mode == "json" and s.startswith("["):
        v = json.loads(s)
        v.sort(key=lambda e: json.dumps(e, sort_keys=True))
        return json.dumps(v) + "\n"
    if mode == "table" and s.startswith("+"):
        lines = s.splitlines()
        seps = [i for i, l in enumerate(lines) if l.startswith("+")]
        body = sorted(lines[seps[1] + 1:seps[2]])
        return "\n".join(lines[:seps[1] + 1] + body + lines[seps[2]:]) + "\n"
    if mode == "blocks" and s.endswith("\n\n"):
        blocks = [b for b in s.split("\n\n") if b]
        return "\n\n".join(sorted(blocks)) + ("\n\n" if blocks else "")
    return s


def check(c, norm, name, eps, args, want, n_dead, sort=None, per=None):
    """Runs args against eps ("ALL", "LIVE", "DEAD", "DEAD,LIVE": m0..m2, m0, m1,
    m1 then m0) and compares (rc, stdout, stderr) normalized with want; the
    time taken with n_dead dead endpoints asked in turn, each bounded by per
    (default: etcdctl's command timeout, quorumctl's dial timeout)."""
    CHECKS[0] += 1
    ep = {"ALL": ",".join(c.endpoint(i) for i in range(3)), "LIVE": c.endpoint(0),
          "DEAD": c.endpoint(1), "DEAD,LIVE": c.endpoint(1) + "," + c.endpoint(0)}.get(eps, eps)
    rc, out, err, took = run(ep, args)
    got = (rc, order_free(norm(out), sort), order_free(norm(err), sort))
    if RECORD:
        print("    check(c, n, %r, %r, %r,\n          (%d, %r,\n           %r), %d%s)"
              % (name, eps, args, got[0], got[1], got[2], n_dead,
                 ", sort=%r" % sort if sort else ""))
    if got != want:
        FAILS.append(name)
        print("DIFF %s (%s)" % (name, " ".join(args)))
        for what, a, b in (("rc", got[0], want[0]), ("stdout", got[1], want[1]),
                           ("stderr", got[2], want[2])):
            if a != b:
                print("  %s got:\n    %s\n  %s wanted:\n    %s" % (
                    what, "\n    ".join(str(a).splitlines()), what,
                    "\n    ".join(str(b).splitlines())))
    else:
        print("same %s (%.2fs)" % (name, took))
    if per is None:
        per = CMD if TARGET == "etcd" else DIAL
    bound = n_dead * per + SLACK
    if took > bound:  # measured, not asserted (see the top)
        print("SLOW %s: %.2fs, bound %.1fs" % (name, took, bound))


def leader_m0(c):
    """Makes m0 the leader (so that is-leader is the same on both targets)."""
    for _ in range(5):
        li = c.wait_leader()
        if li == 0:
            return
        c.etcdctl(li, "move-leader", "%x" % c.member_ids[0])
        time.sleep(1.0)
    raise RuntimeError("m0 did not become the leader")


def phase_killed(c, n):
    print("--- m1 killed: its port refuses connections")
    U = T
    check(c, n, "endpoint status", "ALL", U + ["endpoint", "status"],
          (1, '<EP0>, <ID0>, <VER>, <SIZE>, true, false, N, N, N, \n'
              '<EP2>, <ID2>, <VER>, <SIZE>, false, false, N, N, N, \n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    check(c, n, "endpoint status -w table", "ALL", U + ["endpoint", "status", "-w", "table"],
          (1, '+-+-+-+-+-+-+-+-+-+-+\n'
              '| ENDPOINT | ID | VERSION | DB SIZE | IS LEADER | IS LEARNER | RAFT TERM | '
              'RAFT INDEX | RAFT APPLIED INDEX | ERRORS |\n'
              '+-+-+-+-+-+-+-+-+-+-+\n'
              '| <EP0> | <ID0> | <VER> | <SIZE> | true | false | N | N | N | |\n'
              '| <EP2> | <ID2> | <VER> | <SIZE> | false | false | N | N | N | |\n'
              '+-+-+-+-+-+-+-+-+-+-+\n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    check(c, n, "endpoint status -w json", "ALL", U + ["endpoint", "status", "-w", "json"],
          (1, '[{"Endpoint":"<EP0>","Status":{"header":{"cluster_id":<CID>,"member_id":<ID0>,'
              '"revision":N,"raft_term":N},"version":"<VER>","dbSize":N,"leader":<ID0>,'
              '"raftIndex":N,"raftTerm":N,"raftAppliedIndex":N,"dbSizeInUse":N}},'
              '{"Endpoint":"<EP2>","Status":{"header":{"cluster_id":<CID>,"member_id":<ID2>,'
              '"revision":N,"raft_term":N},"version":"<VER>","dbSize":N,"leader":<ID0>,'
              '"raftIndex":N,"raftTerm":N,"raftAppliedIndex":N,"dbSizeInUse":N}}]\n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    fields = ''.join(
        '"ClusterID" : <CID>\n"MemberID" : <ID%d>\n"Revision" : N\n"RaftTerm" : N\n'
        '"Version" : "<VER>"\n"DBSize" : N\n"Leader" : <ID0>\n"IsLearner" : false\n'
        '"RaftIndex" : N\n"RaftTerm" : N\n"RaftAppliedIndex" : N\n"Errors" : []\n'
        '"Endpoint" : "<EP%d>"\n\n' % (i, i) for i in (0, 2))
    check(c, n, "endpoint status -w fields", "ALL", U + ["endpoint", "status", "-w", "fields"],
          (1, fields,
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)

    health_err = ('<EP0> is healthy: successfully committed proposal: took = <DUR>\n'
                  '<EP1> is unhealthy: failed to commit proposal: context deadline exceeded\n'
                  '<EP2> is healthy: successfully committed proposal: took = <DUR>\n'
                  'Error: unhealthy cluster\n')
    check(c, n, "endpoint health", "ALL", U + ["endpoint", "health"],
          (1, '', health_err), 1, sort="lines")
    check(c, n, "endpoint health -w table", "ALL", U + ["endpoint", "health", "-w", "table"],
          (1, '+-+-+-+-+\n| ENDPOINT | HEALTH | TOOK | ERROR |\n+-+-+-+-+\n'
              '| <EP0> | true | <DUR> | |\n'
              '| <EP1> | false | <DUR> | context deadline exceeded |\n'
              '| <EP2> | true | <DUR> | |\n+-+-+-+-+\n',
           'Error: unhealthy cluster\n'), 1, sort="table")
    check(c, n, "endpoint health -w json", "ALL", U + ["endpoint", "health", "-w", "json"],
          (1, '[{"endpoint": "<EP0>", "health": true, "took": "<DUR>"}, '
              '{"endpoint": "<EP1>", "health": false, "took": "<DUR>", '
              '"error": "context deadline exceeded"}, '
              '{"endpoint": "<EP2>", "health": true, "took": "<DUR>"}]\n',
           'Error: unhealthy cluster\n'), 1, sort="json")
    check(c, n, "endpoint health -w fields", "ALL", U + ["endpoint", "health", "-w", "fields"],
          (1, '"Endpoint" : "<EP0>"\n"Health" : true\n"Took" : <DUR>\n"Error" : \n\n'
              '"Endpoint" : "<EP1>"\n"Health" : false\n"Took" : <DUR>\n'
              '"Error" : context deadline exceeded\n\n'
              '"Endpoint" : "<EP2>"\n"Health" : true\n"Took" : <DUR>\n"Error" : \n\n',
           'Error: unhealthy cluster\n'), 1, sort="blocks")

    hash_err = ('Failed to get the hash of endpoint <EP1> (context deadline exceeded)\n'
                'Error: context deadline exceeded\n')
    check(c, n, "endpoint hashkv", "ALL", U + ["endpoint", "hashkv"],
          (1, '<EP0>, <HASH0>\n<EP2>, <HASH0>\n', hash_err), 1)
    check(c, n, "endpoint hashkv -w table", "ALL", U + ["endpoint", "hashkv", "-w", "table"],
          (1, '+-+-+\n| ENDPOINT | HASH |\n+-+-+\n| <EP0> | <HASH0> |\n| <EP2> | <HASH0> |\n'
              '+-+-+\n', hash_err), 1)
    check(c, n, "endpoint hashkv -w json", "ALL", U + ["endpoint", "hashkv", "-w", "json"],
          (1, '[{"Endpoint":"<EP0>","HashKV":{"header":{"cluster_id":<CID>,"member_id":<ID0>,'
              '"revision":N,"raft_term":N},"hash":<HASH0>,"compact_revision":-1}},'
              '{"Endpoint":"<EP2>","HashKV":{"header":{"cluster_id":<CID>,"member_id":<ID2>,'
              '"revision":N,"raft_term":N},"hash":<HASH0>,"compact_revision":-1}}]\n',
           hash_err), 1)
    check(c, n, "endpoint hashkv -w fields", "ALL", U + ["endpoint", "hashkv", "-w", "fields"],
          (1, ''.join('"ClusterID" : <CID>\n"MemberID" : <ID%d>\n"Revision" : N\n'
                      '"RaftTerm" : N\n"Endpoint" : "<EP%d>"\n"Hash" : <HASH0>\n\n' % (i, i)
                      for i in (0, 2)), hash_err), 1)
    check(c, n, "endpoint hashkv --rev", "ALL", U + ["endpoint", "hashkv", "--rev=2"],
          (1, '<EP0>, <HASH0>\n<EP2>, <HASH0>\n', hash_err), 1)

    check(c, n, "defrag", "ALL", U + ["defrag"],
          (1, 'Finished defragmenting etcd member[<EP0>]\n'
              'Finished defragmenting etcd member[<EP2>]\n',
           'Failed to defragment etcd member[<EP1>] (context deadline exceeded)\n'), 1)
    # the dead one first: defrag still reaches the next
    check(c, n, "defrag, the dead endpoint first", "DEAD,LIVE", U + ["defrag"],
          (1, 'Finished defragmenting etcd member[<EP0>]\n',
           'Failed to defragment etcd member[<EP1>] (context deadline exceeded)\n'), 1)

    # --cluster: the members' client URLs from member list (of any live endpoint)
    check(c, n, "endpoint status --cluster", "LIVE", U + ["endpoint", "status", "--cluster"],
          (1, 'http://<EP0>, <ID0>, <VER>, <SIZE>, true, false, N, N, N, \n'
              'http://<EP2>, <ID2>, <VER>, <SIZE>, false, false, N, N, N, \n',
           'Failed to get the status of endpoint http://<EP1> (context deadline exceeded)\n'),
          1, sort="lines")
    check(c, n, "endpoint status --cluster -w table", "LIVE",
          U + ["endpoint", "status", "--cluster", "-w", "table"],
          (1, '+-+-+-+-+-+-+-+-+-+-+\n'
              '| ENDPOINT | ID | VERSION | DB SIZE | IS LEADER | IS LEARNER | RAFT TERM | '
              'RAFT INDEX | RAFT APPLIED INDEX | ERRORS |\n'
              '+-+-+-+-+-+-+-+-+-+-+\n'
              '| http://<EP0> | <ID0> | <VER> | <SIZE> | true | false | N | N | N | |\n'
              '| http://<EP2> | <ID2> | <VER> | <SIZE> | false | false | N | N | N | |\n'
              '+-+-+-+-+-+-+-+-+-+-+\n',
           'Failed to get the status of endpoint http://<EP1> (context deadline exceeded)\n'),
          1, sort="table")
    check(c, n, "endpoint status --cluster, the dead endpoint first", "DEAD,LIVE",
          U + ["endpoint", "status", "--cluster"],
          (1, 'http://<EP0>, <ID0>, <VER>, <SIZE>, true, false, N, N, N, \n'
              'http://<EP2>, <ID2>, <VER>, <SIZE>, false, false, N, N, N, \n',
           'Failed to get the status of endpoint http://<EP1> (context deadline exceeded)\n'),
          1, sort="lines")
    check(c, n, "endpoint health --cluster", "DEAD,LIVE", U + ["endpoint", "health", "--cluster"],
          (1, '', health_err.replace("<EP", "http://<EP")), 1, sort="lines")
    check(c, n, "endpoint health --cluster -w json", "LIVE",
          U + ["endpoint", "health", "--cluster", "-w", "json"],
          (1, '[{"endpoint": "http://<EP0>", "health": true, "took": "<DUR>"}, '
              '{"endpoint": "http://<EP1>", "health": false, "took": "<DUR>", '
              '"error": "context deadline exceeded"}, '
              '{"endpoint": "http://<EP2>", "health": true, "took": "<DUR>"}]\n',
           'Error: unhealthy cluster\n'), 1, sort="json")
    check(c, n, "endpoint hashkv --cluster", "LIVE", U + ["endpoint", "hashkv", "--cluster"],
          (1, 'http://<EP0>, <HASH0>\nhttp://<EP2>, <HASH0>\n',
           'Failed to get the hash of endpoint http://<EP1> (context deadline exceeded)\n'
           'Error: context deadline exceeded\n'), 1, sort="lines")
    check(c, n, "defrag --cluster", "DEAD,LIVE", U + ["defrag", "--cluster"],
          (1, 'Finished defragmenting etcd member[http://<EP0>]\n'
              'Finished defragmenting etcd member[http://<EP2>]\n',
           'Failed to defragment etcd member[http://<EP1>] (context deadline exceeded)\n'),
          1, sort="lines")
    fetch = 'Error: failed to fetch endpoints from etcd cluster member list: ' \
            'context deadline exceeded\n'
    for args in (["endpoint", "status", "--cluster"], ["endpoint", "health", "--cluster"],
                 ["endpoint", "hashkv", "--cluster"], ["defrag", "--cluster"]):
        check(c, n, " ".join(args) + " of the dead endpoint alone", "DEAD", U + args,
              (1, '', fetch), 1)

    # the dead endpoint alone
    check(c, n, "endpoint status of the dead endpoint alone", "DEAD", U + ["endpoint", "status"],
          (1, '', 'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    check(c, n, "endpoint status -w table of the dead endpoint alone", "DEAD",
          U + ["endpoint", "status", "-w", "table"],
          (1, '+-+-+-+-+-+-+-+-+-+-+\n'
              '| ENDPOINT | ID | VERSION | DB SIZE | IS LEADER | IS LEARNER | RAFT TERM | '
              'RAFT INDEX | RAFT APPLIED INDEX | ERRORS |\n'
              '+-+-+-+-+-+-+-+-+-+-+\n+-+-+-+-+-+-+-+-+-+-+\n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    check(c, n, "endpoint status -w json of the dead endpoint alone", "DEAD",
          U + ["endpoint", "status", "-w", "json"],
          (1, '[]\n', 'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'),
          1)
    check(c, n, "endpoint hashkv -w json of the dead endpoint alone", "DEAD",
          U + ["endpoint", "hashkv", "-w", "json"],
          (1, '[]\n', hash_err), 1)
    check(c, n, "defrag of the dead endpoint alone", "DEAD", U + ["defrag"],
          (1, '', 'Failed to defragment etcd member[<EP1>] (context deadline exceeded)\n'), 1)
    check(c, n, "endpoint health of the dead endpoint alone", "DEAD", U + ["endpoint", "health"],
          (1, '', '<EP1> is unhealthy: failed to commit proposal: context deadline exceeded\n'
                  'Error: unhealthy cluster\n'), 1)

    # endpoint health asks every endpoint at once: four endpoints that accept
    # connections and never answer (a listening socket nobody accepts on) cost
    # one timeout, not four
    holes = []
    try:
        for k in range(4):
            h = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            h.bind(("127.0.0.1", 0))
            h.listen(16)
            holes.append(h)
            n.port(h.getsockname()[1], "<HOLE%d>" % k)
        eps = ",".join(["127.0.0.1:%d" % h.getsockname()[1] for h in holes] +
                       [c.endpoint(i) for i in range(3)])
        check(c, n, "endpoint health, four endpoints that never answer", eps,
              U + ["endpoint", "health"],
              (1, '', health_err.replace("Error: unhealthy cluster\n", "") +
               ''.join('<HOLE%d> is unhealthy: failed to commit proposal: context '
                       'deadline exceeded\n' % k for k in range(4)) +
               'Error: unhealthy cluster\n'),
              1, sort="lines")
    finally:
        for h in holes:
            h.close()

    # one client of every endpoint: the next one answers
    check(c, n, "member list, the dead endpoint first", "DEAD,LIVE", U + ["member", "list"],
          (0, '<ID0>, started, m0, http://<PEER0>, http://<EP0>, false\n'
              '<ID1>, started, m1, http://<PEER1>, http://<EP1>, false\n'
              '<ID2>, started, m2, http://<PEER2>, http://<EP2>, false\n', ''), 0, sort="lines")
    check(c, n, "member list of the dead endpoint alone", "DEAD", U + ["member", "list"],
          (1, '', 'Error: context deadline exceeded\n'), 1)
    check(c, n, "alarm list", "ALL", U + ["alarm", "list"], (0, '', ''), 0)
    check(c, n, "alarm list, the dead endpoint first", "DEAD,LIVE", U + ["alarm", "list"],
          (0, '', ''), 0)
    check(c, n, "alarm disarm, the dead endpoint first", "DEAD,LIVE", U + ["alarm", "disarm"],
          (0, '', ''), 0)
    check(c, n, "alarm list of the dead endpoint alone", "DEAD", U + ["alarm", "list"],
          (1, '', 'Error: context deadline exceeded\n'), 1)


def phase_stopped(c, n):
    print("--- m1 stopped (SIGSTOP): its port accepts and never answers")
    # etcdctl waits out the command timeout (4s), quorumctl the dial timeout (1s)
    U = ["--dial-timeout=1s", "--command-timeout=4s"]
    per = 4.0 if TARGET == "etcd" else 1.0
    check(c, n, "stopped: endpoint status", "ALL", U + ["endpoint", "status"],
          (1, '<EP0>, <ID0>, <VER>, <SIZE>, true, false, N, N, N, \n'
              '<EP2>, <ID2>, <VER>, <SIZE>, false, false, N, N, N, \n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1, per=per)
    check(c, n, "stopped: endpoint health", "ALL", U + ["endpoint", "health"],
          (1, '', '<EP0> is healthy: successfully committed proposal: took = <DUR>\n'
                  '<EP1> is unhealthy: failed to commit proposal: context deadline exceeded\n'
                  '<EP2> is healthy: successfully committed proposal: took = <DUR>\n'
                  'Error: unhealthy cluster\n'), 1, sort="lines", per=per)
    check(c, n, "stopped: endpoint hashkv", "ALL", U + ["endpoint", "hashkv"],
          (1, '<EP0>, <HASH0>\n<EP2>, <HASH0>\n',
           'Failed to get the hash of endpoint <EP1> (context deadline exceeded)\n'
           'Error: context deadline exceeded\n'), 1, per=per)
    check(c, n, "stopped: defrag", "ALL", U + ["defrag"],
          (1, 'Finished defragmenting etcd member[<EP0>]\n'
              'Finished defragmenting etcd member[<EP2>]\n',
           'Failed to defragment etcd member[<EP1>] (context deadline exceeded)\n'), 1, per=per)
    if TARGET != "etcd":
        # quorumctl gives a member that never answers its dial timeout, not
        # the command timeout: with 30 s of command timeout and 1 s of dial
        # timeout, waiting out the former is 30 s, the latter about 1 s
        # (etcdctl waits the 30 s: not run against etcd)
        CHECKS[0] += 1
        rc, out, err, took = run(c.endpoint(1) + "," + c.endpoint(0),
                                 ["--dial-timeout=1s", "--command-timeout=30s", "endpoint",
                                  "status"])
        if rc != 1 or took >= 20:
            FAILS.append("stopped: the command timeout waited out (rc %d, %.1fs)" % (rc, took))
            print("DIFF stopped: command timeout waited out: rc %d, %.1fs\n%s%s"
                  % (rc, took, out, err))
        else:
            print("same stopped: 30 s command timeout not waited out (%.2fs)" % took)


def phase_auth(c, n):
    print("--- auth enabled, m1 killed")
    U = T + ["--user", "root:pw"]
    B = T + ["--user", "root:bad"]
    check(c, n, "auth: endpoint status", "ALL", U + ["endpoint", "status"],
          (1, '<EP0>, <ID0>, <VER>, <SIZE>, true, false, N, N, N, \n'
              '<EP2>, <ID2>, <VER>, <SIZE>, false, false, N, N, N, \n',
           'Failed to get the status of endpoint <EP1> (context deadline exceeded)\n'), 1)
    check(c, n, "auth: endpoint hashkv", "ALL", U + ["endpoint", "hashkv"],
          (1, '<EP0>, <HASH0>\n<EP2>, <HASH0>\n',
           'Failed to get the hash of endpoint <EP1> (context deadline exceeded)\n'
           'Error: context deadline exceeded\n'), 1)
    # a client per endpoint that logs in as it is made: no time taken when that fails
    check(c, n, "auth: endpoint health -w json", "ALL", U + ["endpoint", "health", "-w", "json"],
          (1, '[{"endpoint": "<EP0>", "health": true, "took": "<DUR>"}, '
              '{"endpoint": "<EP1>", "health": false, "took": "", '
              '"error": "context deadline exceeded"}, '
              '{"endpoint": "<EP2>", "health": true, "took": "<DUR>"}]\n',
           'Error: unhealthy cluster\n'), 1, sort="json", per=DIAL)
    check(c, n, "auth: defrag", "ALL", U + ["defrag"],
          (1, 'Finished defragmenting etcd member[<EP0>]\n'
              'Finished defragmenting etcd member[<EP2>]\n',
           'Failed to defragment etcd member[<EP1>] (context deadline exceeded)\n'), 1)
    check(c, n, "auth: defrag --cluster", "LIVE", U + ["defrag", "--cluster"],
          (1, 'Finished defragmenting etcd member[http://<EP0>]\n'
              'Finished defragmenting etcd member[http://<EP2>]\n',
           'Failed to defragment etcd member[http://<EP1>] (context deadline exceeded)\n'),
          1, sort="lines")
    # the login is refused: the command ends (exit 2); endpoint health says so per endpoint
    bad = 'etcdserver: authentication failed, invalid user ID or password'
    check(c, n, "auth: endpoint status, a wrong password", "ALL", B + ["endpoint", "status"],
          (2, '', 'Error: %s\n' % bad), 0)
    check(c, n, "auth: defrag, a wrong password", "ALL", B + ["defrag"],
          (2, '', 'Error: %s\n' % bad), 0)
    check(c, n, "auth: endpoint health -w json, a wrong password", "ALL",
          B + ["endpoint", "health", "-w", "json"],
          (1, '[{"endpoint": "<EP0>", "health": false, "took": "", "error": "%s"}, '
              '{"endpoint": "<EP1>", "health": false, "took": "", '
              '"error": "context deadline exceeded"}, '
              '{"endpoint": "<EP2>", "health": false, "took": "", "error": "%s"}]\n'
              % (bad, bad), 'Error: unhealthy cluster\n'), 1, sort="json", per=DIAL)
    # no endpoint to log in at: exit 2 after the dial timeout
    check(c, n, "auth: defrag of the dead endpoint alone", "DEAD", U + ["defrag"],
          (2, '', 'Error: context deadline exceeded\n'), 1, per=DIAL)
    # status, hashkv and defrag log in before they ask for the member list;
    # health asks for it first (without logging in)
    check(c, n, "auth: defrag --cluster of the dead endpoint alone", "DEAD",
          U + ["defrag", "--cluster"], (2, '', 'Error: context deadline exceeded\n'), 1, per=DIAL)
    check(c, n, "auth: endpoint status --cluster of the dead endpoint alone", "DEAD",
          U + ["endpoint", "status", "--cluster"], (2, '', 'Error: context deadline exceeded\n'),
          1, per=DIAL)
    check(c, n, "auth: endpoint health --cluster of the dead endpoint alone", "DEAD",
          U + ["endpoint", "health", "--cluster"],
          (1, '', 'Error: failed to fetch endpoints from etcd cluster member list: '
                  'context deadline exceeded\n'), 1)
    check(c, n, "auth: member list, the dead endpoint first", "DEAD,LIVE",
          U + ["member", "list"],
          (0, '<ID0>, started, m0, http://<PEER0>, http://<EP0>, false\n'
              '<ID1>, started, m1, http://<PEER1>, http://<EP1>, false\n'
              '<ID2>, started, m2, http://<PEER2>, http://<EP2>, false\n', ''), 0, sort="lines")
    # without --user: the get of "health" is refused
    check(c, n, "auth: endpoint health without a user", "ALL", T + ["endpoint", "health"],
          (1, '', '<EP0> is unhealthy: failed to commit proposal: etcdserver: user name is empty\n'
                  '<EP1> is unhealthy: failed to commit proposal: context deadline exceeded\n'
                  '<EP2> is unhealthy: failed to commit proposal: etcdserver: user name is empty\n'
                  'Error: unhealthy cluster\n'), 1, sort="lines")


def main():
    kind = "etcd" if TARGET == "etcd" else "quorum"
    with Cluster(kind) as c:
        c.etcdctl(0, "put", "k", "v")
        leader_m0(c)
        n = Norm(c)
        c.kill(1)
        c.wait_leader()
        leader_m0(c)
        phase_killed(c, n)

        c.restart(1)
        leader_m0(c)
        c.members[1].signal(signal.SIGSTOP)
        try:
            phase_stopped(c, n)
        finally:
            c.members[1].signal(signal.SIGCONT)

        c.wait_member(1)
        leader_m0(c)  # (m1 may have called an election when it woke up)
        c.etcdctl(0, "user", "add", "root:pw")
        c.etcdctl(0, "auth", "enable")
        c.kill(1)
        leader_m0(c)
        phase_auth(c, n)


if __name__ == "__main__":
    if TARGET != "etcd" and not os.path.exists(QCTL):
        print("quorumctl not found at %s (build first or set QUORUMCTL_BIN)" % QCTL)
        sys.exit(1)
    main()
    print("%d checks, %d failed" % (CHECKS[0], len(FAILS)))
    if FAILS:
        print("FAILED: %s" % "; ".join(FAILS))
        sys.exit(1)
    print("test_quorumctl_down: OK")
