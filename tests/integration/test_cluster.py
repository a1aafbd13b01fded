#!/usr/bin/python3
"""Integration tests of a replicated cluster: 3 members (and more), through
etcdctl 3.4 and raw gRPC, against quorum (TARGET=quorum, the default) or
etcd 3.4 (TARGET=etcd), which the expectations are proven against.

    TARGET=etcd /usr/bin/python3 test_cluster.py [case ...]   # default: every case

Each case starts its own cluster (cluster.Cluster: heartbeat 50 ms, election
500 ms, every process on 127.0.0.1 and signalled by its PID). Prints PASS or
FAIL per case and exits 1 if any failed. KEEP_CLUSTER=1 keeps data dirs and
logs. No timing assertions: every wait is a generous deadline.
"""
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402  (binaries, free ports, wait_for)
from cluster import Cluster  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
DEADLINE = 30.0          # generous bound for anything that should take ~1 s


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def wait_for(pred, timeout=DEADLINE, step=0.1, what="condition"):
    harness.wait_for(pred, timeout, step, what)


def get(c, i, key, serializable=False, check_rc=True):
    """The value of key read through member i with etcdctl (None if absent)."""
    args = ["get", key, "-w", "json"]
    if serializable:
        args.append("--consistency=s")
    r = c.etcdctl(i, *args, check=check_rc)
    kvs = json.loads(r.stdout).get("kvs") or []
    if not kvs:
        return None
    import base64
    return base64.b64decode(kvs[0]["value"]).decode()


def put(c, i, key, value):
    r = c.etcdctl(i, "put", key, value)
    check(r.stdout.strip() == "OK", "put through %s printed %r" % (c.members[i].name, r.stdout))


def members_view(c, i=None):
    """member list as {(name, peer URLs, client URLs, learner)}."""
    return {(m["name"], tuple(sorted(m["peerURLs"])), tuple(sorted(m["clientURLs"])),
             m["isLearner"]) for m in c.member_list(i)}


def expected_view(c, started=None, learners=(), peer_url=None):
    """What member list should show for the cluster's current members."""
    out = set()
    for i in c.current():
        m = c.members[i]
        purl = (peer_url or {}).get(i, m.peer_url)
        if started is None or i in started:
            out.add((m.name, (purl,), (m.client_url,), i in learners))
        else:
            out.add(("", (purl,), (), i in learners))
    return out


def statuses(c):
    return {i: c.status(i) for i in c.live() if not c.members[i].stopped}


def hashkv(c, i, rev):
    r = c.etcdctl(i, "endpoint", "hashkv", "--rev=%d" % rev, "-w", "json")
    h = json.loads(r.stdout)[0]["HashKV"]
    return h.get("hash", 0), h.get("compact_revision", 0), h["header"].get("revision", 0)


def kv_stub(c, i):
    ch = grpc.insecure_channel(c.endpoint(i))
    return ch, rpc_pb2_grpc.KVStub(ch)


def log_since_last_start(m):
    return m.log().split("\n==== ")[-1]


# -- a ------------------------------------------------------------------------

def case_a_every_member_serves():
    """3 members: a put through any member is read (linearizable, then serializable)
    through every other; member list and endpoint status agree."""
    with Cluster(TARGET) as c:
        for i in range(3):
            put(c, i, "a/key%d" % i, "value-from-m%d" % i)
            for j in range(3):
                if j == i:
                    continue
                got = get(c, j, "a/key%d" % i)
                check(got == "value-from-m%d" % i,
                      "linearizable get on m%d of a put through m%d: %r" % (j, i, got))
                got = get(c, j, "a/key%d" % i, serializable=True)
                check(got == "value-from-m%d" % i,
                      "serializable get on m%d after its linearizable read: %r" % (j, got))
        for i in range(3):
            view = members_view(c, i)
            check(view == expected_view(c), "member list through m%d: %s\nexpected %s"
                  % (i, sorted(view), sorted(expected_view(c))))
        ids = {m["ID"] for m in c.member_list()}
        check(len(ids) == 3 and 0 not in ids, "member ids %s" % ids)

        # The same leader and term on every member; an election between two of the
        # reads could make them differ for a moment, so look again until they agree.
        seen = {}

        def agree():
            st = statuses(c)
            seen["st"] = {c.members[i].name: (st[i]["header"]["member_id"], st[i]["leader"],
                                              st[i]["raftTerm"]) for i in st}
            return (len({s["leader"] for s in st.values()}) == 1
                    and len({s["raftTerm"] for s in st.values()}) == 1
                    and next(iter(st.values()))["leader"] in ids
                    and {s["header"]["member_id"] for s in st.values()} == ids)
        wait_for(agree, what="one leader and term on every member")
        print("  statuses (member id, leader, term): %s" % seen["st"])
        # --cluster asks every member at its client URL, scheme included
        # (grpc-go then sends ":authority: http://..."; nghttp2's checks
        # refused that before)
        for cmd in (["endpoint", "status", "--cluster"], ["endpoint", "health", "--cluster"]):
            r = c.etcdctl(0, *cmd)
            out = r.stdout + r.stderr
            check(all(m.client_url in out for m in c.members),
                  "%s misses a member: %s" % (" ".join(cmd), out))


# -- b ------------------------------------------------------------------------

def case_b_leader_kill():
    """SIGKILL of the leader: a new leader, writes go on through the survivors, the
    old leader restarted catches up."""
    with Cluster(TARGET) as c:
        put(c, 0, "b/before", "1")
        old = c.wait_leader()
        old_id = c.status(old)["header"]["member_id"]
        c.kill(old)
        new = c.wait_leader(timeout=20 * c.election_ms / 1000.0 + DEADLINE)
        check(new != old, "leader after the kill is the killed member")
        check(c.status(new)["leader"] != old_id, "the survivors still name the dead leader")
        survivors = [i for i in range(3) if i != old]
        for n, i in enumerate(survivors):
            put(c, i, "b/after%d" % n, "v%d" % n)
        for i in survivors:
            for n in range(len(survivors)):
                check(get(c, i, "b/after%d" % n) == "v%d" % n, "survivor m%d misses b/after%d"
                      % (i, n))
        c.restart(old)
        wait_for(lambda: all(get(c, old, "b/after%d" % n, serializable=True) == "v%d" % n
                             for n in range(len(survivors))),
                 what="the restarted old leader's serializable reads see the new writes")
        check(get(c, old, "b/before", serializable=True) == "1", "old data lost")
        put(c, old, "b/through-old", "x")
        check(get(c, survivors[0], "b/through-old") == "x", "write through the restarted member")
        print("  leader m%d killed, new leader m%d" % (old, new))


# -- c ------------------------------------------------------------------------

# etcd 3.4 keeps 5000 entries after a snapshot (SnapshotCatchUpEntries, not a flag
# before 3.5.14's --experimental-snapshot-catchup-entries), so a follower less than
# ~5100 entries behind catches up from the log; quorum keeps as many
# (LOG_KEEP_ENTRIES). The test writes enough to make the leader send a snapshot.
SNAP_KEYS = 7000
# quorum logs "applied snapshot at index N"; etcd 3.4 "raft applied incoming
# snapshot at index N" (and "finished applying incoming snapshot at index N").
SNAP_RECEIVED = re.compile(r"applied (incoming )?snapshot at index \d+")


def write_while_down(c, victim, via, prefix, n):
    """Stops follower |victim|, puts n keys <prefix>NNNNNN (and <prefix>last)
    through member |via| from four threads, restarts the victim and waits
    until it serves the last key and hashkv at that revision is equal on
    every member. Returns (revision, {member: hashkv})."""
    c.kill(victim, signal.SIGTERM)
    ch, kv = kv_stub(c, via)
    errors = []
    p = prefix.encode()

    def writer(t, nthreads):
        try:
            for k in range(t, n, nthreads):
                kv.Put(rpc_pb2.PutRequest(key=p + b"%06d" % k, value=b"value-%d" % k),
                       timeout=30)
        except grpc.RpcError as e:
            errors.append("%s %s" % (e.code(), e.details()))
    ts = [threading.Thread(target=writer, args=(t, 4)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "puts through m%d failed: %s" % (via, errors[:3]))
    last = kv.Put(rpc_pb2.PutRequest(key=p + b"last", value=b"the-end"), timeout=30)
    ch.close()
    rev = last.header.revision
    c.restart(victim)
    wait_for(lambda: get(c, victim, prefix + "last", serializable=True) == "the-end",
             timeout=120, what="the restarted follower's serializable get of the last key")
    hashes = {}

    def equal():
        for i in range(3):
            hashes[c.members[i].name] = hashkv(c, i, rev)
        return len({h[:2] for h in hashes.values()}) == 1
    wait_for(equal, what="equal hashkv at revision %d" % rev)
    return rev, hashes


def case_c_snapshot_catch_up():
    """A follower stopped while SNAP_KEYS puts go through another member catches up
    (by a snapshot from the leader) after a restart; hashkv equal everywhere."""
    with Cluster(TARGET, extra_args=["--snapshot-count", "100"]) as c:
        lead = c.wait_leader()
        followers = [i for i in range(3) if i != lead]
        victim, via = followers
        rev, hashes = write_while_down(c, victim, via, "c/", SNAP_KEYS)
        for i in range(3):
            ch, kv = kv_stub(c, i)
            r = kv.Range(rpc_pb2.RangeRequest(key=b"c/", range_end=b"c0", count_only=True,
                                              serializable=True), timeout=30)
            ch.close()
            check(r.count == SNAP_KEYS + 1, "m%d holds %d keys, not %d"
                  % (i, r.count, SNAP_KEYS + 1))
        log = log_since_last_start(c.members[victim])
        got = SNAP_RECEIVED.search(log)
        check(got is not None, "the restarted follower's log does not say it applied a "
              "snapshot (%r)" % SNAP_RECEIVED.pattern)
        print("  %d keys written while m%d was down; it logged %r; hashkv at rev %d: %s"
              % (SNAP_KEYS, victim, got.group(0), rev, hashes))


# -- d ------------------------------------------------------------------------

def case_d_membership():
    """member add (voter), add --learner + promote, remove, update."""
    with Cluster(TARGET) as c:
        put(c, 0, "d/k", "before")
        m3 = c.add_member("m3")
        put(c, m3, "d/k3", "through-m3")
        check(get(c, 0, "d/k3") == "through-m3", "m0 does not see a put through m3")
        check(get(c, m3, "d/k") == "before", "m3 does not have the data from before it joined")
        view = members_view(c)
        check(view == expected_view(c), "after add m3: %s" % sorted(view))

        m4 = c.add_member("m4", learner=True)
        view = members_view(c)
        check(view == expected_view(c, learners={m4}), "after add --learner m4: %s"
              % sorted(view))
        wait_for(lambda: get(c, m4, "d/k3", serializable=True) == "through-m3",
                 what="the learner's serializable get")
        c.promote(m4)
        view = members_view(c)
        check(view == expected_view(c), "after promote m4: %s" % sorted(view))
        check(get(c, m4, "d/k3") == "through-m3", "linearizable get on the promoted m4")

        lead = c.wait_leader()
        gone = next(i for i in (1, 2, 0) if i != lead)
        gone_id = c.member_ids[gone]
        c.remove_member(gone)
        view = members_view(c)
        check(view == expected_view(c), "after remove m%d: %s" % (gone, sorted(view)))
        check(gone_id not in {m["ID"] for m in c.member_list()}, "removed id still listed")
        check(not c.members[gone].running(), "the removed member's process still runs")
        put(c, m4, "d/after-remove", "1")
        check(get(c, m3, "d/after-remove") == "1", "writes after the remove")

        target = next(i for i in c.current() if i != c.wait_leader())
        new_purl = "http://127.0.0.1:%d" % harness.free_port()
        c.reconfigure(c.voter_other_than(target), "member", "update",
                      "%x" % c.member_ids[target], "--peer-urls=%s" % new_purl)
        want = expected_view(c, peer_url={target: new_purl})
        wait_for(lambda: members_view(c) == want, what="member list after member update")
        print("  added m3, learner m4 promoted, removed m%d, updated m%d's peer URL"
              % (gone, target))


# -- e ------------------------------------------------------------------------

REFUSE_WAIT = 10.0       # 20 election timeouts: long enough to have joined


def _refused(c, k, state):
    """Member k, started with another --initial-cluster-token, must not join."""
    m = c.members[k]
    deadline = time.monotonic() + REFUSE_WAIT
    while time.monotonic() < deadline and m.running():
        r = c.etcdctl(k, "endpoint", "health", check=False, command_timeout="2s", timeout=20)
        check(r.returncode != 0, "the member with the wrong token became healthy: %s"
              % (r.stdout + r.stderr))
        time.sleep(0.5)
    exited = None if m.running() else m.proc.returncode
    check(exited is None or exited != 0, "the member with the wrong token exited 0")
    lst = c.member_list(0)
    mine = [x for x in lst if c.members[k].peer_url in x["peerURLs"]]
    check(len(mine) == 1 and mine[0]["name"] == "" and not mine[0]["clientURLs"],
          "the cluster does not list it as unstarted: %s" % mine)
    logs = {x.name: x.log() for x in c.members}
    # a new member with another token computes another cluster id; a joining
    # one (quorum) another member id, which is what its peers address
    what = "cluster ID mismatch" if state == "new" else "ID mismatch"
    where = [n for n, text in logs.items() if what in text]
    check(where, "no log says \"%s\"" % what)
    line = next(ln for ln in logs[where[0]].splitlines() if what in ln)
    put(c, 0, "e/still", "serving")
    check(get(c, 1, "e/still") == "serving", "the cluster stopped serving")
    print("  state %s: %s; \"%s\" in the logs of %s, e.g. %s"
          % (state, "still running, never healthy" if exited is None else
             "exited %d" % exited, what, where, line.strip()[:200]))


def case_e_wrong_token_new():
    """A 4th member added with member add but started with --initial-cluster-state new
    and another token computes another cluster ID: refused on both sides."""
    with Cluster(TARGET) as c:
        k = c.add_member("m3", token="another-token", start=False)
        c.members[k].state = "new"
        c.members[k].start()
        _refused(c, k, "new")


def case_e_wrong_token_existing():
    """The same with --initial-cluster-state existing: etcd 3.4 takes the cluster ID and the
    member ids from the peers (by peer URL) and never looks at --initial-cluster-token, so
    the member joins and serves; quorum does the same (tests/integration/test_startup.py
    has the member that cannot join)."""
    with Cluster(TARGET) as c:
        k = c.add_member("m3", token="another-token", wait=False)
        c.wait_member(k, timeout=DEADLINE)
        view = members_view(c)
        check(view == expected_view(c), "member list %s" % sorted(view))
        put(c, k, "e/joined", "yes")
        check(get(c, 0, "e/joined") == "yes", "a put through the joined member is not seen")
        print("  --initial-cluster-token is ignored with state existing: the member joined")


# -- f ------------------------------------------------------------------------

def case_f_follower_reads():
    """200 times: a put on the leader, then a linearizable get on a follower
    (alternating) sees it."""
    with Cluster(TARGET) as c:
        lead = c.wait_leader()
        followers = [i for i in range(3) if i != lead]
        chans = {i: kv_stub(c, i) for i in range(3)}
        try:
            for n in range(200):
                f = followers[n % 2]
                key, value = b"f/key%d" % (n % 7), b"value-%d" % n
                chans[lead][1].Put(rpc_pb2.PutRequest(key=key, value=value), timeout=15)
                r = chans[f][1].Range(rpc_pb2.RangeRequest(key=key), timeout=15)
                got = r.kvs[0].value if r.kvs else None
                check(got == value, "round %d: follower m%d read %r after the leader "
                      "acknowledged %r (stale read)" % (n, f, got, value))
        finally:
            for ch, _ in chans.values():
                ch.close()
        now = c.wait_leader()
        print("  200 follower reads after leader writes, leader m%d%s" % (
            lead, "" if now == lead else " (now m%d)" % now))


# -- g ------------------------------------------------------------------------

# What a member without a quorum answers. etcd 3.4 answers a put, once it knows it
# has no leader, with "rpc error: code = Unknown desc = context deadline exceeded"
# after its request timeout (5 s + 2 election timeouts): raft's Propose blocks
# while there is no leader and the raw context error comes back. A put still
# proposed under the old leader gets "etcdserver: request timed out". A
# linearizable get gets "etcdserver: request timed out" (ReadIndex), which
# clientv3 retries until etcdctl's --command-timeout, so its last line is
# "Error: context deadline exceeded" and the retries show the server's text.
ISOLATED_ERRORS = ("no leader", "timed out", "leader changed")
ETCD_EXTRA = ("context deadline exceeded",)


def case_g_isolated_member():
    """The other two SIGSTOP'ed: put and linearizable get on the isolated (former
    leader) member fail with a no-leader/timeout error, a serializable get answers."""
    with Cluster(TARGET) as c:
        put(c, 0, "g/k", "v")
        for i in range(3):
            wait_for(lambda: get(c, i, "g/k", serializable=True) == "v",
                     what="m%d has g/k" % i)
        iso = c.wait_leader()
        others = [i for i in range(3) if i != iso]
        for o in others:
            c.kill(o, signal.SIGSTOP)
        try:
            # a leader that cannot reach a quorum steps down (CheckQuorum)
            wait_for(lambda: c.status(iso, timeout=3)["leader"] == 0,
                     timeout=20 * c.election_ms / 1000.0 + DEADLINE,
                     what="the isolated leader reports no leader")
            accepted = ISOLATED_ERRORS + (ETCD_EXTRA if TARGET == "etcd" else ())
            seen = {}
            for what, args in (("put", ["put", "g/k", "w"]), ("linearizable get", ["get", "g/k"])):
                t0 = time.monotonic()
                r = c.etcdctl(iso, *args, check=False, timeout=15 + 30)  # 15 s command timeout
                took = time.monotonic() - t0
                err = r.stderr + r.stdout
                check(r.returncode != 0, "%s on the isolated member succeeded: %r"
                      % (what, r.stdout))
                last = [ln for ln in err.splitlines() if ln.startswith("Error:")]
                found = [a for a in accepted if a in err]
                check(found, "%s on the isolated member: unexpected error %r" % (what, err))
                servers = sorted(set(re.findall(r'desc = ([^"]*)"', err)))
                seen[what] = (found, last, servers, took)
                print("  %s: %s after %.1fs; server said %s; matched %s"
                      % (what, last[-1] if last else err.strip()[-120:], took, servers, found))
            r = c.etcdctl(iso, "get", "g/k", "--consistency=s", "--print-value-only",
                          command_timeout="5s")
            check(r.stdout.strip() == "v", "serializable get on the isolated member: %r"
                  % r.stdout)
        finally:
            for o in others:
                c.kill(o, signal.SIGCONT)
        c.wait_leader()
        wait_for(lambda: c.etcdctl(iso, "put", "g/after", "1", check=False,
                                   command_timeout="5s").returncode == 0,
                 what="a put through the formerly isolated member after SIGCONT")
        check(get(c, others[0], "g/after") == "1", "the put after recovery")


# -- h ------------------------------------------------------------------------

def _ttl(c, i, lease_id):
    r = c.etcdctl(i, "lease", "timetolive", "%x" % lease_id, "-w", "json")
    return json.loads(r.stdout)["ttl"]


def case_h_lease_ttl_survives_leader_change():
    """A lease's remaining TTL survives a leader change (quorum checkpoints
    it through Raft every 5 s); etcd 3.4 hands the lease a fresh TTL."""
    with Cluster(TARGET) as c:
        lead = c.wait_leader()
        other = next(i for i in range(3) if i != lead)
        r = c.etcdctl(other, "lease", "grant", "30", "-w", "json")
        lease = json.loads(r.stdout)["ID"]
        c.etcdctl(other, "put", "h/k", "v", "--lease=%x" % lease)
        # through a follower: forwarded to the leader
        check(0 < _ttl(c, other, lease) <= 30, "timetolive through a follower")
        time.sleep(8)             # past the first checkpoint (every 5 s)
        before = _ttl(c, lead, lease)
        c.kill(lead)
        new = c.wait_leader()
        check(new != lead, "no new leader")
        after = _ttl(c, new, lease)
        print("  TTL 30: %d s left before the leader was killed, %d s on the new leader"
              % (before, after))
        check(get(c, new, "h/k") == "v", "the leased key vanished at the leader change")
        if TARGET == "etcd":
            return                # etcd: the new leader's TTL starts over (printed above)
        # at most what the last checkpoint recorded (and not a fresh 30)
        check(0 < after <= 30 - 5, "the new leader gave the lease %d s" % after)
        c.restart(lead)


# -- i ------------------------------------------------------------------------

def _corrupt_one_value(db_path, old, new):
    """Rewrite one stored value in a stopped member's LMDB file with LMDB's
    own tools (lmdb-utils): the member's store then differs from the others."""
    import subprocess
    dump = subprocess.run(["mdb_dump", "-n", "-s", "key", db_path], capture_output=True,
                          text=True, check=True).stdout
    h_old, h_new = old.encode().hex(), new.encode().hex()
    check(h_old in dump, "value %r not found in the dump" % old)
    subprocess.run(["mdb_load", "-n", "-s", "key", db_path], input=dump.replace(h_old, h_new),
                   capture_output=True, text=True, check=True)


def case_i_corruption_check():
    """--experimental-corrupt-check-time: a member whose store differs gets
    the CORRUPT alarm, writes fail with etcd's error, reads go on."""
    if TARGET == "etcd":
        print("  (quorum only: editing a member's bbolt file by hand is out of scope)")
        return
    with Cluster(TARGET, extra_args=["--experimental-corrupt-check-time", "300ms"]) as c:
        for k in range(20):
            put(c, k % 3, "i/k%02d" % k, "value-%02d" % k)
        lead = c.wait_leader()
        victim = next(i for i in range(3) if i != lead)
        wait_for(lambda: get(c, victim, "i/k19", serializable=True) == "value-19",
                 what="the victim has every key")
        c.kill(victim, signal.SIGTERM)
        m = c.members[victim]
        _corrupt_one_value(os.path.join(m.data_dir, "member", "db", "data.mdb"),
                           "value-07", "value-xx")
        c.restart(victim)
        vid = c.member_ids[victim]

        def alarmed():
            r = c.etcdctl(lead, "alarm", "list", check=False)
            return ("memberID:%d alarm:CORRUPT" % vid) in r.stdout
        wait_for(alarmed, what="the CORRUPT alarm for the edited member")
        r = c.etcdctl(lead, "put", "i/after", "x", check=False)
        check(r.returncode != 0 and "etcdserver: corrupt cluster" in r.stderr,
              "a write under CORRUPT: %s" % (r.stdout + r.stderr))
        check(get(c, lead, "i/k07") == "value-07", "reads stop under CORRUPT")
        logs = c.members[c.wait_leader()].log()
        check("raising the CORRUPT alarm" in logs, "the leader did not log the mismatch")
        line = next(ln for ln in logs.splitlines() if "raising the CORRUPT alarm" in ln)
        print("  %s" % line.strip()[:220])


# -- j ------------------------------------------------------------------------

def case_j_removed_while_cut_off():
    """A follower removed while it was stopped (SIGSTOP) never applies its
    own removal; when it runs again the others tell it, and it exits."""
    with Cluster(TARGET) as c:
        lead = c.wait_leader()
        victim = next(i for i in range(3) if i != lead)
        vid = c.member_ids[victim]
        m = c.members[victim]
        c.kill(victim, signal.SIGSTOP)
        c.reconfigure(lead, "member", "remove", "%x" % vid)  # etcd: retried while "unhealthy"
        c.kill(victim, signal.SIGCONT)
        wait_for(lambda: not m.running(), timeout=DEADLINE,
                 what="the removed member's exit")
        check(vid not in {x["ID"] for x in c.member_list(lead)}, "still listed")
        m.removed = True
        put(c, lead, "j/after", "1")
        print("  m%d removed while stopped; it exited with %s" % (victim, m.proc.returncode))


# -- k ------------------------------------------------------------------------

# More than the entries a quorum member keeps in memory behind its applied index
# (LOG_KEEP_ENTRIES 5000 in src/server/node.c, trimmed 1024 at a time), far
# fewer than --snapshot-count (100000 by default, for both servers).
LOG_KEYS = 7000


def case_k_log_catch_up():
    """A follower stopped while LOG_KEYS puts go through the other follower catches
    up from the leader's log, not from a snapshot: the leader keeps, in memory,
    every entry a member it knows has not acknowledged (quorum trims its
    in-memory log to 5000 entries behind the applied index otherwise)."""
    with Cluster(TARGET) as c:
        catches_up_from_the_log(c, "k/", LOG_KEYS)


def catches_up_from_the_log(c, prefix, n):
    """A follower stopped while n puts go through the other one restarts and
    catches up without a snapshot (write_while_down checks its data)."""
    lead = c.wait_leader()
    victim, via = [i for i in range(3) if i != lead]
    rev, hashes = write_while_down(c, victim, via, prefix, n)
    log = log_since_last_start(c.members[victim])
    got = SNAP_RECEIVED.search(log)
    check(got is None, "the restarted follower applied a snapshot (%r), it should have "
          "caught up from the log" % got.group(0) if got else "")
    print("  %d keys written while m%d was down; it caught up from the log; hashkv at "
          "rev %d: %s" % (n, victim, rev, hashes))


# -- l ------------------------------------------------------------------------

CATCH_UP_KEYS = 2000   # well under the 5000 entries a snapshot keeps


def case_l_log_catch_up_across_snapshots():
    """With --snapshot-count 100 (twenty snapshots while it is down), a follower
    stopped for CATCH_UP_KEYS puts still catches up from the leader's log: a
    snapshot keeps the last 5000 entries in memory (etcd's
    SnapshotCatchUpEntries). quorum's snapshot used to drop every applied entry,
    so a follower only a little behind at that moment, as followers are under
    load, was sent the whole database."""
    with Cluster(TARGET, extra_args=["--snapshot-count", "100"]) as c:
        catches_up_from_the_log(c, "l/", CATCH_UP_KEYS)


CASES = [
    ("a_every_member_serves", case_a_every_member_serves),
    ("b_leader_kill", case_b_leader_kill),
    ("c_snapshot_catch_up", case_c_snapshot_catch_up),
    ("d_membership", case_d_membership),
    ("e_wrong_token_new", case_e_wrong_token_new),
    ("e_wrong_token_existing", case_e_wrong_token_existing),
    ("f_follower_reads", case_f_follower_reads),
    ("g_isolated_member", case_g_isolated_member),
    ("h_lease_ttl_survives_leader_change", case_h_lease_ttl_survives_leader_change),
    ("i_corruption_check", case_i_corruption_check),
    ("j_removed_while_cut_off", case_j_removed_while_cut_off),
    ("k_log_catch_up", case_k_log_catch_up),
    ("l_log_catch_up_across_snapshots", case_l_log_catch_up_across_snapshots),
]


def main(argv):
    want = argv[1:]
    cases = [(n, f) for n, f in CASES if not want or any(n.startswith(w) for w in want)]
    if not cases:
        print("no case matches %s; cases: %s" % (want, [n for n, _ in CASES]))
        return 2
    print("test_cluster: target %s" % TARGET)
    failed = harness.run_cases(cases)
    print("%d passed, %d failed" % (len(cases) - len(failed), len(failed)))
    if failed:
        print("failed: %s" % " ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
