#!/usr/bin/python3
"""Durability and linearizability of a 3-member cluster under kill -9.

    durability.py [--seconds 60] [--target quorum|etcd] [--clients 6] [--keys 30]
                  [--seed S] [--history FILE] [--keep]

A 3-member cluster (cluster.Cluster; quorum by default, or $TARGET) serves
--clients python3-etcd3 clients, each pinned to one member and moving to the
next member after an error, doing random put / get (linearizable) / delete /
cas (a Txn comparing the value, or version == 0 for "absent", then a put) on
--keys keys, every written value unique. Each op is recorded with its call and
return time (time.monotonic) and a status: "ok" (answered), "unknown" (a write
that timed out or lost its connection: it may or may not have happened). A read
that failed, and any definite refusal (FAILED_PRECONDITION), is left out.

Meanwhile a chaos thread SIGKILLs a random member (by PID) every 2-5 s and
restarts it after 0.5-2 s, never more than one member down at a time.

At the end: the chaos stops and every member runs, the clients stop, the
cluster settles; every member answers a linearizable range of all the keys and
then a serializable one (both added to the history as reads); the whole history
must pass linearizability.check(); `etcdctl endpoint hashkv` at one revision
must be equal on every member. Prints the counts and the checker's verdict;
exits 0 when all holds, 1 on a violation, 2 when the cluster itself failed
(did not start, a member did not come back).
"""
import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import etcd3  # noqa: E402
import grpc  # noqa: E402
from etcd3 import exceptions as etcd3_exc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402

import linearizability  # noqa: E402
from cluster import Cluster  # noqa: E402

PREFIX = "dur/"
RPC_TIMEOUT = 5.0


def detail(e):
    """The gRPC code and message behind an etcd3 exception (etcd3 drops them)."""
    inner = e if isinstance(e, grpc.RpcError) else e.__context__
    if isinstance(inner, grpc.RpcError):
        try:
            return "%s: %s" % (inner.code().name, inner.details())
        except Exception:  # noqa: BLE001
            pass
    return type(e).__name__


class Client(threading.Thread):
    def __init__(self, cid, cluster, member, keys, seed, stop):
        super().__init__(daemon=True, name="client-%d" % cid)
        self.cid, self.cluster, self.member = cid, cluster, member
        self.keys, self.stop = keys, stop
        self.r = random.Random(seed)
        self.history = []
        self.errors = {}            # error text -> count
        self.left_out = 0
        self.seen = {}              # key -> last value this client saw or wrote
        self.n = 0
        self.switches = 0
        self.crash = None
        self.cli = None

    def connect(self):
        if self.cli is not None:
            try:
                self.cli.close()
            except Exception:  # noqa: BLE001
                pass
        m = self.cluster.members[self.member]
        self.cli = etcd3.client(host="127.0.0.1", port=m.client_port, timeout=RPC_TIMEOUT)

    def switch(self):
        cur = self.cluster.current()
        self.member = cur[(cur.index(self.member) + 1) % len(cur)]
        self.switches += 1
        self.connect()

    def one(self):
        r = self.r
        key = PREFIX + self.keys[r.randrange(len(self.keys))]
        x = r.random()
        self.n += 1
        value = "c%d-%d" % (self.cid, self.n)
        if x < 0.35:
            kind = "put"
        elif x < 0.70:
            kind = "get"
        elif x < 0.80:
            kind = "delete"
        else:
            kind = "cas"
        op = {"client": "%d@m%d" % (self.cid, self.member), "op": kind, "key": key}
        if kind in ("put", "cas"):
            op["value"] = value
        if kind == "cas":
            op["expected"] = None if r.random() < 0.25 else self.seen.get(key)
        call = time.monotonic()
        try:
            if kind == "put":
                self.cli.put(key, value)
                result = None
                self.seen[key] = value
            elif kind == "get":
                v, _ = self.cli.get(key)
                result = None if v is None else v.decode()
                self.seen[key] = result
            elif kind == "delete":
                result = self.cli.delete(key, return_response=True).deleted
                self.seen[key] = None
            else:
                t = self.cli.transactions
                cmp = (t.version(key) == 0) if op["expected"] is None \
                    else (t.value(key) == op["expected"])
                result, _ = self.cli.transaction(compare=[cmp], success=[t.put(key, value)],
                                                 failure=[])
                result = bool(result)
                if result:
                    self.seen[key] = value
            ret = time.monotonic()
            op.update(call=call, ret=ret, result=result, status="ok")
            self.history.append(op)
        except Exception as e:  # noqa: BLE001
            ret = time.monotonic()
            text = detail(e)
            self.errors[text] = self.errors.get(text, 0) + 1
            if kind == "get" or isinstance(e, etcd3_exc.PreconditionFailedError):
                self.left_out += 1            # no information / definitely not applied
            else:
                op.update(call=call, ret=None, status="unknown", error=text, failed_at=ret)
                self.history.append(op)
            self.switch()

    def run(self):
        try:
            self.connect()
            while not self.stop.is_set():
                self.one()
                time.sleep(self.r.uniform(0, 0.01))
        except Exception:  # noqa: BLE001
            self.crash = traceback.format_exc()
        finally:
            if self.cli is not None:
                self.cli.close()


class Chaos(threading.Thread):
    def __init__(self, cluster, seed, stop):
        super().__init__(daemon=True, name="chaos")
        self.cluster, self.stop = cluster, stop
        self.r = random.Random(seed)
        self.kills = []             # (time, member name, was leader)
        self.error = None

    def run(self):
        c = self.cluster
        try:
            while not self.stop.wait(self.r.uniform(2.0, 5.0)):
                i = self.r.choice(c.current())
                lead = c.leader_index()
                c.kill(i, signal.SIGKILL)
                self.kills.append((time.monotonic(), c.members[i].name, lead == i))
                time.sleep(self.r.uniform(0.5, 2.0))
                c.restart(i, wait=True, timeout=120)
        except Exception:  # noqa: BLE001
            self.error = traceback.format_exc()
            # leave no member down
            for i in c.current():
                if not c.members[i].running():
                    try:
                        c.restart(i, wait=False)
                    except Exception:  # noqa: BLE001
                        pass


def final_reads(c, keys):
    """Linearizable then serializable range of every key through every member, as
    per-key get ops. -> (ops, problems)."""
    ops, problems = [], []
    end = PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)
    for i in c.current():
        cli = etcd3.client(host="127.0.0.1", port=c.members[i].client_port, timeout=30)
        try:
            for mode in ("linearizable", "serializable"):
                call = time.monotonic()
                req = rpc_pb2.RangeRequest(key=PREFIX.encode(), range_end=end.encode(),
                                                 serializable=(mode == "serializable"))
                resp = cli.kvstub.Range(req, timeout=30)
                ret = time.monotonic()
                got = {kv.key.decode(): kv.value.decode() for kv in resp.kvs}
                for k in keys:
                    ops.append({"client": "final-%s-m%d" % (mode[:3], i), "op": "get",
                                "key": PREFIX + k, "call": call, "ret": ret,
                                "result": got.get(PREFIX + k), "status": "ok"})
                if mode == "linearizable":
                    lin_rev = resp.header.revision
                elif resp.header.revision < lin_rev:
                    problems.append("m%d: serializable read at revision %d after a "
                                    "linearizable one at %d" % (i, resp.header.revision, lin_rev))
        finally:
            cli.close()
    return ops, problems


def hashkv_all(c):
    """endpoint hashkv at one revision on every member. -> (equal, {name: (hash, rev)})."""
    revs = [c.status(i)["header"]["revision"] for i in c.current()]
    rev = max(revs)
    out = {}
    deadline = time.monotonic() + 60
    while True:
        out = {}
        for i in c.current():
            r = c.etcdctl(i, "endpoint", "hashkv", "--rev=%d" % rev, "-w", "json")
            h = json.loads(r.stdout)[0]["HashKV"]
            out[c.members[i].name] = (h.get("hash", 0), h.get("compact_revision", 0))
        if len(set(out.values())) == 1 or time.monotonic() > deadline:
            return len(set(out.values())) == 1, rev, out
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--target", default=os.environ.get("TARGET", "quorum"),
                    choices=["quorum", "etcd"])
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--keys", type=int, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--history", help="write the history here (JSON lines)")
    ap.add_argument("--keep", action="store_true", help="keep data dirs and logs")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    keys = ["k%02d" % i for i in range(args.keys)]
    print("durability: target %s, %d clients, %d keys, %.0fs, seed %d"
          % (args.target, args.clients, args.keys, args.seconds, seed), flush=True)

    try:
        c = Cluster(args.target, keep=False).start()
    except Exception as e:  # noqa: BLE001
        print("durability: the cluster did not start: %s" % e)
        return 2
    ok = False
    try:
        stop_clients, stop_chaos = threading.Event(), threading.Event()
        clients = [Client(n, c, n % 3, keys, rnd.randrange(1 << 30), stop_clients)
                   for n in range(args.clients)]
        chaos = Chaos(c, rnd.randrange(1 << 30), stop_chaos)
        t0 = time.monotonic()
        for cl in clients:
            cl.start()
        chaos.start()
        while time.monotonic() - t0 < args.seconds:
            time.sleep(1)
            if chaos.error or any(cl.crash for cl in clients):
                break
        stop_chaos.set()
        chaos.join(timeout=300)
        time.sleep(2)                 # the clients on a whole cluster for a moment
        stop_clients.set()
        for cl in clients:
            cl.join(timeout=60)
        if chaos.error:
            print("durability: the chaos thread failed (a member did not come back?):\n%s"
                  % chaos.error)
            c.dump_logs()
            return 2
        crashed = [cl for cl in clients if cl.crash or cl.is_alive()]
        if crashed:
            for cl in crashed:
                print("durability: client %d %s:\n%s" % (
                    cl.cid, "is stuck" if cl.is_alive() else "crashed", cl.crash))
            return 2

        for i in c.current():
            c.wait_member(i, timeout=60)
        c.wait_leader()
        fin, problems = final_reads(c, keys)
        history = [op for cl in clients for op in cl.history]
        count = {}
        for op in history:
            k = (op["op"], op["status"])
            count[k] = count.get(k, 0) + 1
        n_ok = sum(v for (_, s), v in count.items() if s == "ok")
        n_unknown = sum(v for (_, s), v in count.items() if s == "unknown")
        left_out = sum(cl.left_out for cl in clients)
        print("durability: %d ops recorded: %d ok, %d unknown, %d left out (failed reads); "
              "%d final reads" % (len(history), n_ok, n_unknown, left_out, len(fin)))
        print("durability: by kind: %s" % ", ".join(
            "%s %s=%d" % (k[0], k[1], v) for k, v in sorted(count.items())))
        cas_ok = sum(1 for op in history if op["op"] == "cas" and op.get("result") is True)
        print("durability: cas succeeded %d of %d answered" % (
            cas_ok, count.get(("cas", "ok"), 0)))
        lead_kills = sum(1 for k in chaos.kills if k[2])
        print("durability: %d kills (%d of the leader): %s" % (
            len(chaos.kills), lead_kills, " ".join(k[1] + ("*" if k[2] else "")
                                                   for k in chaos.kills)))
        errs = {}
        for cl in clients:
            for e, v in cl.errors.items():
                errs[e] = errs.get(e, 0) + v
        for e, v in sorted(errs.items(), key=lambda x: -x[1]):
            print("durability:   error x%d: %s" % (v, e))
        print("durability: client member switches %d" % sum(cl.switches for cl in clients))

        full = history + fin
        path = args.history or os.path.join(c.tmp, "history.jsonl")
        with open(path, "w") as f:
            for op in sorted(full, key=lambda o: o["call"]):
                f.write(json.dumps(op) + "\n")
        checked = [{k: v for k, v in op.items() if k not in ("error", "failed_at")}
                   for op in full]
        t1 = time.monotonic()
        lin_ok, info = linearizability.check(checked)
        print("durability: checker (%.1fs): %s" % (time.monotonic() - t1, info))
        for p in problems:
            print("durability: FAILED: %s" % p)
        equal, rev, hashes = hashkv_all(c)
        print("durability: hashkv at revision %d: %s" % (rev, hashes))
        if not equal:
            print("durability: FAILED: hashkv differs between members")
        ok = lin_ok and equal and not problems
        kept = args.history or not ok or args.keep
        print("durability: %s%s" % ("OK" if ok else "FAILED",
                                    " (history in %s)" % path if kept else ""))
        return 0 if ok else 1
    finally:
        if not ok or args.keep:
            c.keep = True
            print("durability: data dirs, logs and history kept in %s" % c.tmp)
        c.cleanup()

if __name__ == "__main__":
    sys.exit(main())
