#!/usr/bin/python3
"""quorum's own fault campaign: a seeded run of network partitions, pauses,
kills and slow disks against a quorum cluster under register, watch and lock clients,
checked at the end for linearizability, watch guarantees, lock safety and
equal HashKV. See tools/faults/README.md and docs/campaign.md.

    campaign.py [--seed S] [--seconds N | --minutes M] [--members 3|5]
                [--planted-bug NAME] [--expect-violation] [--keep]

Runs in a private network namespace (the tool re-executes itself under
`unshare --net`; root needed, exit 77 otherwise): member i listens on
127.0.0.(i+2), client port 2379 and peer port 2380, started with
--experimental-set-member-localaddr so its peer links leave from its own
address; the faults are nftables rules on that namespace's output hook
(dropping packets from one member address to another), SIGSTOP/SIGCONT and
SIGKILL by PID. Clients connect from 127.0.0.1, which no rule matches.
Slow disks: tests/faults/diskfault.c preloaded into every quorum member
(not into an ASan build, nor etcd, whose Go runtime makes raw syscalls),
armed for one member at a time by its control file: each fsync and
fdatasync sleeps that member's delay (200, 500 or 1000 ms, by the seed).

Prints one summary line starting "campaign:" and exits 0 when every check
holds, 1 on a violation, 2 when the cluster itself failed (did not start,
a member did not come back), 77 when no network namespace can be made.
With --expect-violation the exit is 0 when a violation was found, 1 when
none was (for a build with a planted bug: -Dfault_injection=true and
--planted-bug follower-local-read).
"""
import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import grpc  # noqa: E402

import cluster as qcluster  # noqa: E402
import durability  # noqa: E402  (hashkv_all)
import linearizability  # noqa: E402
import pb34  # noqa: E402

M = pb34.msg
NETNS_ENV = "QUORUM_CAMPAIGN_NETNS"
CLIENT_PORT, PEER_PORT = 2379, 2380
RPC_TIMEOUT = 1.5
REG, LOCKP = b"reg/", b"lock/"
LOCK_NAME = b"lock/campaign"
EPOCH_S = 10.0       # register keys change every EPOCH_S: an unknown op stays
#                      pending on its own keys only (the checker's cost)
LEASE_TTL = 3
FAULT_KINDS = ("partition", "isolate-leader", "bridge", "one-way", "pause", "kill",
               "slow-disk")
# slow-disk: tests/faults/diskfault.c preloaded into every member, disarmed
# (its control file says "off") but while the fault holds one member's; then
# each fdatasync/fsync of that member (WAL and LMDB) sleeps its delay
SLOW_DISK_CALLS = "fdatasync,fsync"
SLOW_DISK_DELAYS_MS = (200, 500, 1000)


def log(*a):
    """One line, or several each with the prefix (a checker's explanation)."""
    lines = " ".join(str(x) for x in a).splitlines() or [""]
    if len(lines) > 60:
        lines = lines[:60] + ["... (%d more lines)" % (len(lines) - 60)]
    print("\n".join("campaign: " + ("" if k == 0 else "  ") + ln
                    for k, ln in enumerate(lines)), flush=True)


def addr(i):
    return "127.0.0.%d" % (i + 2)


# ------------------------------------------------------------ the cluster

class HostMember(qcluster.Member):
    """A cluster.Member on its own loopback address instead of 127.0.0.1,
    with the disk-fault shim preloaded when |disk_env| is set."""

    disk_env = None
    disk_control = None

    def start(self):
        if self.disk_env is None:
            return super().start()
        # cluster.Member.start with the shim's environment added
        assert not self.running(), "%s already running" % self.name
        env = dict(os.environ, **self.disk_env)
        env.pop("ETCDCTL_API", None)
        self.log_file = open(self.log_path, "ab")
        self.log_file.write(("\n==== %s start (diskfault %s): %s\n" % (
            time.strftime("%H:%M:%S"), self.disk_env["DISKFAULT_DELAY_MS"] + " ms",
            " ".join(self.args()))).encode())
        self.log_file.flush()
        self.proc = subprocess.Popen(self.args(), stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        self.stopped = False

    def slow_disk(self, on):
        with open(self.disk_control, "w") as f:
            f.write("on" if on else "off")

    @property
    def endpoint(self):
        return "%s:%d" % (addr(self.index), self.client_port)

    @property
    def client_url(self):
        return "http://%s:%d" % (addr(self.index), self.client_port)

    @property
    def peer_url(self):
        return "http://%s:%d" % (addr(self.index), self.peer_port)


def shim_path():
    """The disk-fault shim ($DISKFAULT_LIB, else the build's), or None when
    it is not built or cannot be preloaded (an ASan build of quorum wants
    its runtime first: the slow disks are skipped there)."""
    p = os.environ.get("DISKFAULT_LIB") or os.path.join(
        os.path.dirname(qcluster.harness.quorum_binary()), "..", "..", "tests", "faults",
        "libdiskfault.so")
    if not os.path.exists(p):
        return None
    ldd = subprocess.run(["ldd", qcluster.harness.quorum_binary()], capture_output=True,
                         text=True).stdout
    if "libasan" in ldd:
        return None
    return os.path.abspath(p)


def make_cluster(n, kind="quorum", rnd=None):
    c = qcluster.Cluster(kind, n=n, token="campaign", extra_args=(
        ["--experimental-set-member-localaddr"] if kind == "quorum" else []))
    initial = ",".join("m%d=http://%s:%d" % (i, addr(i), PEER_PORT) for i in range(n))
    shim = shim_path() if kind == "quorum" else None   # etcd (Go) makes raw syscalls
    for m in c.members:
        m.__class__ = HostMember
        m.client_port, m.peer_port = CLIENT_PORT, PEER_PORT
        m.initial_cluster = initial
        if shim is not None:
            m.disk_control = os.path.join(c.tmp, "diskfault-%s.control" % m.name)
            m.slow_disk(False)
            m.disk_env = {"LD_PRELOAD": shim, "DISKFAULT_CONTROL": m.disk_control,
                          "DISKFAULT_CALLS": SLOW_DISK_CALLS, "DISKFAULT_ERRNO": "none",
                          "DISKFAULT_DELAY_MS": str((rnd or random).choice(SLOW_DISK_DELAYS_MS))}
    return c


class Net:
    """nftables rules of the private namespace: drop packets from one member
    address to another."""

    def __init__(self):
        self._nft("add table inet campaign\n"
                  "add chain inet campaign out { type filter hook output priority 0; }\n")
        self.blocked = set()

    def _nft(self, script):
        subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True)

    def block(self, pairs):
        """pairs: (src index, dst index): packets from src to dst are dropped."""
        self.blocked |= set(pairs)
        self._apply()

    def heal(self):
        self.blocked = set()
        self._apply()

    def _apply(self):
        s = "flush chain inet campaign out\n" + "".join(
            "add rule inet campaign out ip saddr %s ip daddr %s drop\n" % (addr(a), addr(b))
            for a, b in sorted(self.blocked))
        self._nft(s)


def both(group_a, group_b):
    return [(a, b) for a in group_a for b in group_b] + [(b, a) for a in group_a for b in group_b]


# -------------------------------------------------------------- gRPC

def channel(c, i):
    return grpc.insecure_channel(c.members[i].endpoint)


class Stub:
    def __init__(self, ch):
        def u(path, resp):
            return ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=M(resp).FromString)
        self.range = u("/etcdserverpb.KV/Range", "etcdserverpb.RangeResponse")
        self.put = u("/etcdserverpb.KV/Put", "etcdserverpb.PutResponse")
        self.delete = u("/etcdserverpb.KV/DeleteRange", "etcdserverpb.DeleteRangeResponse")
        self.txn = u("/etcdserverpb.KV/Txn", "etcdserverpb.TxnResponse")
        self.grant = u("/etcdserverpb.Lease/LeaseGrant", "etcdserverpb.LeaseGrantResponse")
        self.revoke = u("/etcdserverpb.Lease/LeaseRevoke", "etcdserverpb.LeaseRevokeResponse")
        self.lock = u("/v3lockpb.Lock/Lock", "v3lockpb.LockResponse")
        self.unlock = u("/v3lockpb.Lock/Unlock", "v3lockpb.UnlockResponse")
        self.status = u("/etcdserverpb.Maintenance/Status", "etcdserverpb.StatusResponse")
        self.keepalive = ch.stream_stream(
            "/etcdserverpb.Lease/LeaseKeepAlive", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=M("etcdserverpb.LeaseKeepAliveResponse").FromString)
        self.watch = ch.stream_stream(
            "/etcdserverpb.Watch/Watch", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=M("etcdserverpb.WatchResponse").FromString)


def prefix_end(p):
    return p[:-1] + bytes([p[-1] + 1])


def err_text(e):
    if isinstance(e, grpc.RpcError):
        try:
            return "%s: %s" % (e.code().name, e.details())
        except Exception:  # noqa: BLE001
            pass
    return type(e).__name__


def definite_failure(e):
    """A refusal that says the request was not applied (etcd's errors before
    proposing); anything else (timeouts, lost connections) is unknown."""
    if not isinstance(e, grpc.RpcError):
        return False
    code = e.code()
    return code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED)


class Worker(threading.Thread):
    """A client thread pinned to one member, moving to the next after an error."""

    def __init__(self, name, c, member, seed, stop):
        super().__init__(daemon=True, name=name)
        self.c, self.member, self.stop = c, member, stop
        self.r = random.Random(seed)
        self.ch = None
        self.stub = None
        self.errors = {}
        self.crash = None

    def connect(self):
        if self.ch is not None:
            self.ch.close()
        self.ch = channel(self.c, self.member)
        self.stub = Stub(self.ch)

    def switch(self, e):
        t = err_text(e)
        self.errors[t] = self.errors.get(t, 0) + 1
        self.member = (self.member + 1) % len(self.c.members)
        self.connect()

    def run(self):
        try:
            self.connect()
            self.body()
        except Exception:  # noqa: BLE001
            self.crash = traceback.format_exc()
        finally:
            if self.ch is not None:
                self.ch.close()


# ------------------------------------------------------- register clients

class Register(Worker):
    """put / get (linearizable) / delete / cas on the value / cas on the
    mod_revision, every written value unique; each op recorded for the
    linearizability checker."""

    def __init__(self, cid, c, member, seed, stop, t0):
        super().__init__("reg-%d" % cid, c, member, seed, stop)
        self.cid, self.t0 = cid, t0
        self.history = []
        self.left_out = 0
        self.seen = {}          # key -> (value, mod_revision) this client last saw
        self.n = 0

    def key(self):
        epoch = int((time.monotonic() - self.t0) / EPOCH_S)
        return REG + b"e%d/k%d" % (epoch, self.r.randrange(6))

    def body(self):
        while not self.stop.is_set():
            self.one()
            time.sleep(self.r.uniform(0, 0.005))

    def one(self):
        r, s = self.r, self.stub
        key = self.key()
        ks = key.decode()
        self.n += 1
        value = "c%d-%d" % (self.cid, self.n)
        x = r.random()
        kind = ("put" if x < 0.3 else "get" if x < 0.6 else "delete" if x < 0.68
                else "cas" if x < 0.84 else "casrev")
        seen = self.seen.get(key)
        if kind == "casrev" and seen is None:
            kind = "cas"
        op = {"client": "%d@m%d" % (self.cid, self.member), "op": "cas" if kind == "casrev"
              else kind, "key": ks}
        if kind in ("put", "cas", "casrev"):
            op["value"] = value
        if kind == "cas":
            op["expected"] = None if r.random() < 0.3 or seen is None else seen[0]
        elif kind == "casrev":
            op["expected"] = seen[0]
        call = time.monotonic()
        try:
            if kind == "put":
                h = s.put(M("etcdserverpb.PutRequest")(key=key, value=value.encode()),
                          timeout=RPC_TIMEOUT)
                result = h.header.revision
                self.seen[key] = (value, h.header.revision)
            elif kind == "get":
                g = s.range(M("etcdserverpb.RangeRequest")(key=key), timeout=RPC_TIMEOUT)
                if g.kvs:
                    result = g.kvs[0].value.decode()
                    self.seen[key] = (result, g.kvs[0].mod_revision)
                else:
                    result = None
                    self.seen[key] = (None, 0)
            elif kind == "delete":
                d = s.delete(M("etcdserverpb.DeleteRangeRequest")(key=key), timeout=RPC_TIMEOUT)
                result = d.deleted
                self.seen[key] = (None, 0)
            else:
                C = M("etcdserverpb.Compare")
                if kind == "casrev":   # mod_revision == R; an absent key's is 0
                    cmp = C(key=key, target=C.MOD, result=C.EQUAL, mod_revision=seen[1])
                elif op["expected"] is None:
                    cmp = C(key=key, target=C.VERSION, result=C.EQUAL, version=0)
                else:
                    cmp = C(key=key, target=C.VALUE, result=C.EQUAL,
                            value=op["expected"].encode())
                put = M("etcdserverpb.RequestOp")(request_put=M("etcdserverpb.PutRequest")(
                    key=key, value=value.encode()))
                t = s.txn(M("etcdserverpb.TxnRequest")(compare=[cmp], success=[put]),
                          timeout=RPC_TIMEOUT)
                result = bool(t.succeeded)
                if result:
                    self.seen[key] = (value, t.header.revision)
                    op["rev"] = t.header.revision
            op.update(call=call, ret=time.monotonic(), result=result, status="ok")
            if kind == "put":
                op["rev"] = result
            self.history.append(op)
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, grpc.RpcError):
                raise
            if kind == "get" or definite_failure(e):
                self.left_out += 1
            else:
                op.update(call=call, ret=None, status="unknown")
                self.history.append(op)
            self.seen.pop(key, None)
            self.switch(e)


# --------------------------------------------------------------- watchers

class Watcher(Worker):
    """Watches REG from the revision it starts at, resuming after the last
    event it got on another member after any error, and now and then
    rewinds on purpose to an earlier revision it has seen: the events
    replayed must be the ones it got before."""

    def __init__(self, wid, c, member, seed, stop, start_rev):
        super().__init__("watch-%d" % wid, c, member, seed, stop)
        self.wid = wid
        self.start_rev = start_rev
        self.events = []          # (revision, type, key, value)
        self.problems = []
        self.reconnects = self.rewinds = self.replayed = 0
        self.call = None

    def stream(self, from_rev):
        reqs = queue.Queue()
        done = threading.Event()

        def gen():
            yield M("etcdserverpb.WatchRequest")(create_request=M(
                "etcdserverpb.WatchCreateRequest")(key=REG, range_end=prefix_end(REG),
                                                  start_revision=from_rev))
            while not done.is_set():
                try:
                    yield reqs.get(timeout=0.5)
                except queue.Empty:
                    pass
        call = self.stub.watch(gen())
        return call, done

    def body(self):
        next_rev = self.start_rev
        rewind_at = time.monotonic() + self.r.uniform(3, 10)
        while not self.stop.is_set():
            replay = []
            if self.events and time.monotonic() >= rewind_at:
                rewind_at = time.monotonic() + self.r.uniform(3, 10)
                k = self.r.randrange(len(self.events))
                replay = self.events[k:]
                from_rev = self.events[k][0]
                self.rewinds += 1
            else:
                from_rev = next_rev
            call, done = self.stream(from_rev)
            self.call = call
            timer = threading.Timer(max(0.1, rewind_at - time.monotonic()), call.cancel)
            timer.daemon = True
            timer.start()
            try:
                last = from_rev - 1
                for resp in call:
                    if resp.canceled:
                        raise RuntimeError("watch canceled: %s (compact %d)"
                                           % (resp.cancel_reason, resp.compact_revision))
                    for ev in resp.events:
                        e = (ev.kv.mod_revision, int(ev.type), ev.kv.key.decode(),
                             ev.kv.value.decode())
                        if e[0] <= last:
                            self.problems.append("watch %d: event at revision %d after %d "
                                                 "(out of order or duplicate) from m%d"
                                                 % (self.wid, e[0], last, self.member))
                        last = e[0]
                        if replay:
                            want = replay.pop(0)
                            self.replayed += 1
                            if want != e:
                                self.problems.append(
                                    "watch %d: rewound to %d, replayed %r where it first got %r"
                                    % (self.wid, from_rev, e, want))
                                replay = []
                            continue
                        if self.events and e[0] <= self.events[-1][0]:
                            self.problems.append("watch %d: event at revision %d after %d "
                                                 "(duplicate or out of order)"
                                                 % (self.wid, e[0], self.events[-1][0]))
                        self.events.append(e)
                        next_rev = e[0] + 1
                    if self.stop.is_set():
                        break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    self.reconnects += 1
                    self.switch(e)
                    time.sleep(0.1)
            except RuntimeError as e:
                self.problems.append("watch %d: %s" % (self.wid, e))
                break
            finally:
                timer.cancel()
                done.set()
                call.cancel()

    def halt(self):
        if self.call is not None:
            self.call.cancel()


# ------------------------------------------------------------ lock clients

class FencedResource:
    """A resource outside the store that accepts a write only with a fencing
    token at least the highest it has seen."""

    def __init__(self):
        self.mu = threading.Lock()
        self.highest = 0
        self.accepted = []        # (token, client, time)
        self.refused = []

    def write(self, token, who):
        with self.mu:
            now = time.monotonic()
            if token < self.highest:
                self.refused.append((token, who, now, self.highest))
                return False
            self.highest = token
            self.accepted.append((token, who, now))
            return True


class Locker(Worker):
    """Takes LOCK_NAME with the Lock RPC on a lease kept alive, writes to the
    fenced resource with the lock key's create revision as its token, then
    unlocks (or, now and then, stalls past its lease and writes late)."""

    def __init__(self, lid, c, member, seed, stop, resource):
        super().__init__("lock-%d" % lid, c, member, seed, stop)
        self.lid, self.res = lid, resource
        self.acquired = []        # dicts: key, token, call, ret, rev
        self.stalled = 0

    def keepalive(self, lease, done):
        def gen():
            while not done.is_set():
                yield M("etcdserverpb.LeaseKeepAliveRequest")(ID=lease)
                done.wait(LEASE_TTL / 3.0)
        try:
            for _ in self.stub.keepalive(gen(), timeout=120):
                if done.is_set():
                    break
        except Exception:  # noqa: BLE001
            pass

    def body(self):
        s = self.stub
        while not self.stop.is_set():
            done = threading.Event()
            lease = 0
            try:
                lease = s.grant(M("etcdserverpb.LeaseGrantRequest")(TTL=LEASE_TTL),
                                timeout=RPC_TIMEOUT).ID
                threading.Thread(target=self.keepalive, args=(lease, done), daemon=True).start()
                call = time.monotonic()
                held = s.lock(M("v3lockpb.LockRequest")(name=LOCK_NAME, lease=lease), timeout=8)
                ret = time.monotonic()
                g = s.range(M("etcdserverpb.RangeRequest")(key=held.key), timeout=RPC_TIMEOUT)
                if not g.kvs:     # lost already (lease expired meanwhile)
                    continue
                token = g.kvs[0].create_revision
                self.acquired.append({"client": self.lid, "key": held.key.decode(),
                                      "token": token, "call": call, "ret": ret,
                                      "rev": g.header.revision})
                for _ in range(self.r.randint(1, 4)):
                    self.res.write(token, self.lid)
                    time.sleep(self.r.uniform(0.02, 0.1))
                if self.r.random() < 0.15:
                    # a holder that stalls (a GC pause, a VM host) past its
                    # lease: another client takes the lock meanwhile, and
                    # this late write must be refused by its older token
                    self.stalled += 1
                    done.set()
                    lease = 0
                    time.sleep(LEASE_TTL + 2.0)
                    self.res.write(token, self.lid)
                    continue
                s.unlock(M("v3lockpb.UnlockRequest")(key=held.key), timeout=RPC_TIMEOUT)
            except grpc.RpcError as e:
                self.switch(e)
                s = self.stub
                time.sleep(0.1)
            finally:
                done.set()
                if lease:
                    try:
                        s.revoke(M("etcdserverpb.LeaseRevokeRequest")(ID=lease),
                                 timeout=RPC_TIMEOUT)
                    except grpc.RpcError:
                        pass
            time.sleep(self.r.uniform(0, 0.05))


# ------------------------------------------------------------------ faults

class Faults(threading.Thread):
    def __init__(self, c, net, seed, stop, election_s):
        super().__init__(daemon=True, name="faults")
        self.c, self.net, self.stop = c, net, stop
        self.r = random.Random(seed)
        self.election_s = election_s
        # etcd 3.4 cannot bind its peer links: only the faults of processes
        self.kinds = FAULT_KINDS if c.kind == "quorum" else ("pause", "kill")
        if c.members[0].disk_env is None:
            self.kinds = tuple(k for k in self.kinds if k != "slow-disk")
        self.count = {k: 0 for k in self.kinds}
        self.done = []            # (time, kind, detail)
        self.error = None

    def leader(self):
        """The leader the members with the highest term report, or None."""
        best = (-1, 0)
        ids = {}
        for m in self.c.members:
            if not m.running() or m.stopped:
                continue
            ch = channel(self.c, m.index)
            try:
                st = Stub(ch).status(M("etcdserverpb.StatusRequest")(), timeout=0.5)
                ids[st.header.member_id] = m.index
                if st.raftTerm > best[0] and st.leader:
                    best = (st.raftTerm, st.leader)
            except grpc.RpcError:
                pass
            finally:
                ch.close()
        return ids.get(best[1])

    def target(self):
        n = len(self.c.members)
        lead = self.leader()
        if lead is not None and self.r.random() < 0.5:
            return lead
        return self.r.randrange(n)

    def targets(self):
        """One member (the leader half the time); with five, now and then a
        second one too (a minority still)."""
        first = self.target()
        if len(self.c.members) == 5 and self.r.random() < 0.3:
            return [first, self.r.choice([i for i in range(5) if i != first])]
        return [first]

    def one(self, kind):
        n, r = len(self.c.members), self.r
        hold = r.uniform(2.0, 5.0)
        everyone = list(range(n))
        if kind in ("partition", "isolate-leader"):
            if kind == "isolate-leader":
                lead = self.leader()
                minority = [lead if lead is not None else r.randrange(n)]
            else:
                minority = r.sample(everyone, r.randint(1, (n - 1) // 2))
            if n == 5 and kind == "isolate-leader" and r.random() < 0.5:
                minority.append(r.choice([i for i in everyone if i not in minority]))
            majority = [i for i in everyone if i not in minority]
            self.net.block(both(minority, majority))
            detail = "%s | %s" % (minority, majority)
        elif kind == "bridge":
            order = everyone[:]
            r.shuffle(order)
            mid = n // 2
            left, bridge, right = order[:mid], order[mid], order[mid + 1:]
            self.net.block(both(left, right))
            detail = "%s - %d - %s" % (left, bridge, right)
        elif kind == "one-way":
            src = self.target()
            dst = [i for i in everyone if i != src]
            if r.random() < 0.5:      # src cannot send / cannot receive
                pairs = [(src, d) for d in dst]
                detail = "m%d -/-> others" % src
            else:
                pairs = [(d, src) for d in dst]
                detail = "others -/-> m%d" % src
            self.net.block(pairs)
        elif kind == "pause":
            hold = r.uniform(1.5, 4.0) * self.election_s + 0.5
            who = self.targets()
            for i in who:
                self.c.kill(i, signal.SIGSTOP)
            detail = "%s for %.1fs" % (" ".join("m%d" % i for i in who), hold)
        elif kind == "slow-disk":
            hold = r.uniform(2.0, 6.0)
            who = self.targets()
            for i in who:
                self.c.members[i].slow_disk(True)
            detail = "%s for %.1fs (%s)" % (" ".join("m%d" % i for i in who), hold, " ".join(
                self.c.members[i].disk_env["DISKFAULT_DELAY_MS"] + " ms" for i in who))
        else:                         # kill -9, restart after a while
            hold = r.uniform(0.5, 3.0)
            who = self.targets()
            for i in who:
                self.c.kill(i, signal.SIGKILL)
            detail = "%s down %.1fs" % (" ".join("m%d" % i for i in who), hold)
        self.count[kind] += 1
        self.done.append((time.monotonic(), kind, detail))
        log("fault %-14s %s" % (kind, detail))
        self.stop.wait(hold)
        self.heal()

    def heal(self):
        self.net.heal()
        for m in self.c.members:
            if m.disk_env is not None:
                m.slow_disk(False)
            if m.stopped:
                self.c.kill(m.index, signal.SIGCONT)
            elif not m.running():
                m.start()

    def run(self):
        try:
            kinds = []
            while not self.stop.wait(self.r.uniform(1.0, 3.0)):
                if not kinds:
                    kinds = list(self.kinds)
                    self.r.shuffle(kinds)
                self.one(kinds.pop())
        except Exception:  # noqa: BLE001
            self.error = traceback.format_exc()
        finally:
            try:
                self.heal()
            except Exception:  # noqa: BLE001
                self.error = (self.error or "") + traceback.format_exc()


# ------------------------------------------------------------------ checks

def slow_syncs(c):
    """How many fsync/fdatasync calls the disk-fault shim delayed, from the
    line it prints for each in the member's log."""
    n = 0
    for m in c.members:
        try:
            with open(m.log_path, "rb") as f:
                n += sum(1 for ln in f if ln.startswith(b"diskfault: ") and b" delayed " in ln)
        except OSError:
            pass
    return n


def leader_term(c):
    """The Raft term the leader reports (elections the faults caused)."""
    ch = channel(c, c.wait_leader())
    try:
        return Stub(ch).status(M("etcdserverpb.StatusRequest")(), timeout=10).raftTerm
    finally:
        ch.close()


def sentinel(c, i, prefix):
    """Puts prefix + "~end" through member i: the last event under |prefix|,
    at the returned revision (the watchers and the history read up to it)."""
    ch = channel(c, i)
    try:
        return Stub(ch).put(M("etcdserverpb.PutRequest")(key=prefix + b"~end", value=b"end"),
                            timeout=30).header.revision
    finally:
        ch.close()


def reference_events(c, i, prefix, end_rev):
    """Every event under |prefix| from revision 1 to |end_rev| (a sentinel's)
    as member i's MVCC history gives them: no compaction runs during a
    campaign. -> [(revision, type, key, value, create revision)]"""
    ch = channel(c, i)
    out = []
    done = threading.Event()
    try:
        def gen():
            yield M("etcdserverpb.WatchRequest")(create_request=M(
                "etcdserverpb.WatchCreateRequest")(key=prefix, range_end=prefix_end(prefix),
                                                  start_revision=1))
            done.wait(120)
        call = Stub(ch).watch(gen(), timeout=120)
        for resp in call:
            for ev in resp.events:
                out.append((ev.kv.mod_revision, int(ev.type), ev.kv.key.decode(),
                            ev.kv.value.decode(), ev.kv.create_revision))
            if out and out[-1][0] >= end_rev:
                break
        call.cancel()
    finally:
        done.set()
        ch.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--members", type=int, default=3, choices=[3, 5])
    ap.add_argument("--target", default="quorum", choices=["quorum", "etcd"],
                    help="etcd: the same clients and checks against etcd 3.4 (the checks "
                         "hold there: a sanity check of the campaign), pauses and kills only")
    ap.add_argument("--planted-bug", default=None,
                    help="QUORUM_PLANTED_BUG for the members (a -Dfault_injection=true build)")
    ap.add_argument("--expect-violation", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.environ.get(NETNS_ENV) != "1":
        return reexec()
    seconds = args.seconds if args.seconds is not None else (
        args.minutes * 60 if args.minutes is not None else 60)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.planted_bug:
        os.environ["QUORUM_PLANTED_BUG"] = args.planted_bug
    # a violation keeps the logs and data dirs, unless one is expected
    rc, summary = run(seed, seconds, args.members, args.keep, not args.expect_violation,
                      args.target)
    log(summary)
    if args.expect_violation:
        return 0 if rc == 1 else 1
    return rc


def reexec():
    if shutil.which("unshare") is None or shutil.which("nft") is None:
        print("campaign: needs unshare (util-linux) and nft (nftables)", flush=True)
        return 77
    env = dict(os.environ, **{NETNS_ENV: "1"})
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        print("campaign: cannot make a network namespace (root needed): %s"
              % probe.stderr.decode().strip(), flush=True)
        return 77
    script = ("ip link set lo up && exec /usr/bin/python3 \"$0\" \"$@\"")
    # in a PID namespace of its own too: whatever ends this process (a test
    # runner's timeout, SIGKILL) ends unshare (parent-death signal), its
    # child (--kill-child) and with it every member the campaign started
    return subprocess.call(["unshare", "--net", "--pid", "--fork", "--kill-child",
                            "sh", "-c", script, os.path.abspath(__file__)] + sys.argv[1:],
                           env=env, preexec_fn=die_with_parent)


def die_with_parent():
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run(seed, seconds, n, keep, keep_on_failure=True, kind="quorum"):
    rnd = random.Random(seed)
    head = "seed=%d members=%d duration=%.0fs" % (seed, n, seconds)
    if kind != "quorum":
        head = "target=%s %s" % (kind, head)
    log("start", head, "binary", qcluster.harness.quorum_binary() if kind == "quorum"
        else qcluster.harness.etcd_binary(),
        "planted-bug", os.environ.get("QUORUM_PLANTED_BUG", "none"))
    net = Net()
    c = make_cluster(n, kind, random.Random(rnd.randrange(1 << 30)))
    try:
        c.start()
    except Exception as e:  # noqa: BLE001
        return 2, "%s cluster did not start: %s => ERROR" % (head, e)
    ok = False
    try:
        rc, summary = campaign(c, net, rnd, seconds, head)
        ok = rc == 0
        return rc, summary
    except Exception:  # noqa: BLE001
        return 2, "%s campaign failed: %s => ERROR" % (head, traceback.format_exc())
    finally:
        if not ok and keep_on_failure:
            c.dump_logs(1500)
        if (not ok and keep_on_failure) or keep:
            c.keep = True
        c.cleanup()


def peer_links_bound(n):
    """The established connections to a peer port, as ss shows them: each
    must come from a member's own address, or the faults (rules on address
    pairs) would not bite. -> (ok, the source addresses seen)"""
    out = subprocess.run(["ss", "-Htn", "state", "established", "( dport = :%d )" % PEER_PORT],
                         capture_output=True, text=True).stdout
    srcs = sorted({ln.split()[-2].rsplit(":", 1)[0] for ln in out.splitlines() if ln.strip()})
    mine = {addr(i) for i in range(n)}
    return bool(srcs) and all(a in mine for a in srcs), srcs


def campaign(c, net, rnd, seconds, head):
    n = len(c.members)
    ok, srcs = peer_links_bound(n)
    if not ok and c.kind == "quorum":
        return 2, "%s peer links do not leave from the members' addresses (%s): the " \
                  "faults would not bite => ERROR" % (head, srcs)
    start_term = leader_term(c)
    t0 = time.monotonic()
    stop_clients, stop_faults = threading.Event(), threading.Event()
    ch = channel(c, 0)
    start_rev = Stub(ch).range(M("etcdserverpb.RangeRequest")(key=b"x"), timeout=10).header.revision
    ch.close()
    resource = FencedResource()
    regs = [Register(k, c, k % n, rnd.randrange(1 << 30), stop_clients, t0) for k in range(2 * n)]
    stop_watchers = threading.Event()   # after they have seen the end
    watchers = [Watcher(k, c, k % n, rnd.randrange(1 << 30), stop_watchers, start_rev + 1)
                for k in range(n)]
    lockers = [Locker(k, c, k % n, rnd.randrange(1 << 30), stop_clients, resource)
               for k in range(3)]
    faults = Faults(c, net, rnd.randrange(1 << 30), stop_faults, c.election_ms / 1000.0)
    workers = regs + watchers + lockers
    for w in workers:
        w.start()
    faults.start()
    while time.monotonic() - t0 < seconds and not faults.error:
        time.sleep(0.5)
        if any(w.crash for w in workers):
            break
    stop_faults.set()
    faults.join(timeout=120)
    if faults.error:
        return 2, "%s fault thread failed: %s => ERROR" % (head, faults.error)
    for i in range(n):
        c.wait_member(i, timeout=90)
    c.wait_leader()
    time.sleep(2)                     # the clients on the whole cluster a moment
    stop_clients.set()
    for w in regs + lockers:
        w.join(timeout=60)
    crashed = [w for w in workers if w.crash]
    if crashed:
        return 2, "%s client %s crashed: %s => ERROR" % (head, crashed[0].name, crashed[0].crash)
    stuck = [w.name for w in regs + lockers if w.is_alive()]
    if stuck:
        return 2, "%s clients stuck: %s => ERROR" % (head, stuck)
    duration = time.monotonic() - t0
    problems = []

    # the store's final revision, then every watcher must reach it
    lead = c.wait_leader()
    end_reg = sentinel(c, lead, REG)
    ref_reg = reference_events(c, lead, REG, end_reg)
    last_reg = end_reg
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            (w.events[-1][0] if w.events else 0) < last_reg for w in watchers):
        time.sleep(0.2)
    stop_watchers.set()
    for w in watchers:
        w.halt()
    for w in watchers:
        w.join(timeout=30)

    # 1. linearizability of the registers, final reads through every member
    history = [op for w in regs for op in w.history]
    keys = sorted({op["key"] for op in history})
    for i in range(n):
        s = Stub(channel(c, i))
        call = time.monotonic()
        resp = s.range(M("etcdserverpb.RangeRequest")(key=REG, range_end=prefix_end(REG)),
                       timeout=30)
        ret = time.monotonic()
        got = {kv.key.decode(): kv.value.decode() for kv in resp.kvs}
        for k in keys:
            history.append({"client": "final-m%d" % i, "op": "get", "key": k,
                            "call": call, "ret": ret, "result": got.get(k), "status": "ok"})
    checked = [{k: v for k, v in op.items() if k != "rev"} for op in history]
    n_ok = sum(1 for op in history if op["status"] == "ok")
    n_unknown = len(history) - n_ok
    try:
        lin_ok, info = linearizability.check(checked, max_states=5_000_000)
    except linearizability.CheckTooExpensive as e:
        lin_ok, info = False, "too expensive: %s" % e
    lin_verdict = "OK" if lin_ok else "FAIL"
    if not lin_ok:
        problems.append("linearizability: %s" % info)

    # 2. every acknowledged write is in the MVCC history at its revision
    by_rev = {e[0]: e for e in ref_reg}
    lost = 0
    for op in history:
        if op.get("rev") and op["status"] == "ok":
            e = by_rev.get(op["rev"])
            if e is None or e[1] != 0 or e[2] != op["key"] or e[3] != op["value"]:
                lost += 1
                if lost <= 3:
                    problems.append("acknowledged %s of %s=%s at revision %d: history has %r"
                                    % (op["op"], op["key"], op["value"], op["rev"], e))

    # 3. watches: ordered, no gap, no duplicate, resumable
    watch_ok = True
    ev_total = 0
    for w in watchers:
        ev_total += len(w.events)
        for p in w.problems:
            problems.append(p)
            watch_ok = False
        want = [e[:4] for e in ref_reg if e[0] >= w.start_rev]
        if w.events != want:
            watch_ok = False
            k = next((j for j in range(min(len(want), len(w.events))) if want[j] != w.events[j]),
                     min(len(want), len(w.events)))
            problems.append("watch %d (m%d at the end): %d events, the history has %d from "
                            "revision %d; first difference at #%d: got %r, history %r"
                            % (w.wid, w.member, len(w.events), len(want), w.start_rev, k,
                               w.events[k] if k < len(w.events) else None,
                               want[k] if k < len(want) else None))
    if lost:
        watch_ok = False

    # 4. locks: unique tokens in real-time order, one owner at a time in the
    #    MVCC history, the fenced resource never took an older token
    lock_ok = True
    ref_lock = reference_events(c, lead, LOCKP, sentinel(c, lead, LOCKP))
    acq = [a for w in lockers for a in w.acquired]
    tokens = [a["token"] for a in acq]
    if len(set(tokens)) != len(tokens):
        lock_ok = False
        problems.append("locks: a token was handed out twice")
    for a in acq:
        for b in acq:
            if a["ret"] < b["call"] and a["token"] >= b["token"]:
                lock_ok = False
                problems.append("locks: client %d got token %d before client %d asked and got "
                                "%d" % (a["client"], a["token"], b["client"], b["token"]))
    live = {}
    ev_at = sorted(ref_lock)
    j = 0
    for a in sorted(acq, key=lambda a: a["rev"]):
        while j < len(ev_at) and ev_at[j][0] <= a["rev"]:
            e = ev_at[j]
            if e[1] == 0:
                live[e[2]] = e[4]
            else:
                live.pop(e[2], None)
            j += 1
        older = [k for k, cr in live.items() if cr < a["token"] and k.startswith(LOCK_NAME.decode())]
        if older:   # a linearizable read right after Lock returned showed an
            #         older waiter's key: two owners at that revision
            lock_ok = False
            problems.append("locks: client %d holds token %d at revision %d while %s "
                            "still held an older key" % (a["client"], a["token"], a["rev"], older))
    acc = [t for t, _, _ in resource.accepted]
    if acc != sorted(acc):
        lock_ok = False
        problems.append("locks: the fenced resource took an older token")

    # 5. no lease left behind: every lock key goes once its lease is revoked
    #    or expires
    s = Stub(channel(c, lead))
    deadline = time.monotonic() + 4 * LEASE_TTL + 10
    left = None
    while time.monotonic() < deadline:
        left = s.range(M("etcdserverpb.RangeRequest")(
            key=LOCK_NAME, range_end=prefix_end(LOCK_NAME), count_only=True), timeout=10).count
        if left == 0:
            break
        time.sleep(0.5)
    if left:
        lock_ok = False
        problems.append("leases: %d lock keys still there %ds after the clients stopped"
                        % (left, 4 * LEASE_TTL + 10))

    end_term = leader_term(c)

    # 6. equal HashKV on every member
    equal, rev, hashes = durability.hashkv_all(c)
    if not equal:
        problems.append("hashkv differs at revision %d: %s" % (rev, hashes))

    for p in problems[:20]:
        log("VIOLATION:", p)
    faults_s = " ".join("%s=%d" % (k, v) for k, v in faults.count.items())
    if "slow-disk" not in faults.count:
        faults_s += " slow-disk=skipped"
    else:   # the syncs the shim delayed (its lines in the members' logs)
        faults_s += " slow-syncs=%d" % slow_syncs(c)
    if c.kind != "quorum":
        faults_s += " network=skipped"
    errs = {}
    for w in workers:
        for e, v in w.errors.items():
            errs[e.split(":")[0]] = errs.get(e.split(":")[0], 0) + v
    log("client errors (switched member):", json.dumps(errs, sort_keys=True))
    verdict = "PASS" if not problems else "FAIL"
    summary = ("%s ran=%.0fs ops=%d (ok %d, unknown %d) watch-events=%d rewinds=%d "
               "locks=%d stalled=%d fenced-refused=%d terms=%d faults: %s | linearizable=%s watch=%s locks=%s "
               "hashkv=%s => %s"
               % (head, duration, len(history), n_ok, n_unknown, ev_total,
                  sum(w.rewinds for w in watchers), len(acq), sum(w.stalled for w in lockers),
                  len(resource.refused), end_term - start_term, faults_s,
                  lin_verdict, "OK" if watch_ok else "FAIL", "OK" if lock_ok else "FAIL",
                  "OK" if equal else "FAIL", verdict))
    return (0 if not problems else 1), summary


if __name__ == "__main__":
    sys.exit(main())
