#!/usr/bin/python3
"""kill -9 crash test: no acknowledged write may be lost.

Each round starts the server (quorum by default, etcd with --target etcd)
on the same data dir and the same ports, checks everything acknowledged so
far, runs a put load from several threads (every put a unique key with a
unique value), and after a random 1-3 s kills the server with SIGKILL (by
PID, through harness.Server.kill) while the load is running. After the last
round the server is started once more and checked.

The check after every restart:
- every acknowledged put (the RPC returned OK) is present with its exact
  value, and its create/mod revision equal the header revision of its ack;
- no two acks carry the same revision;
- every key present under the test prefix is one that was attempted, with
  the value attempted for it (unacknowledged puts may or may not be there);
- the current revision >= number of acknowledged puts + 1.

    crash.py [--target quorum|etcd] [--rounds R] [--threads T] [--seed S] [--keep]

Exit 0 with "crash: R rounds, N acknowledged writes, 0 lost"; exit 1 with a
message naming the lost or wrong writes; exit 2 when the server does not
start (or restart) at all.
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402

PREFIX = b"crash/"
RPC_TIMEOUT = 5.0


def channel(server):
    ch = grpc.insecure_channel(server.endpoint, options=[
        ("grpc.max_receive_message_length", 512 * 1024 * 1024)])
    grpc.channel_ready_future(ch).result(timeout=20)
    return ch


class Writer(threading.Thread):
    """Puts unique keys until stopped or the server goes away."""

    def __init__(self, server, rnd, tid, seed, killing, stop):
        super().__init__(daemon=True)
        self.server, self.rnd, self.tid = server, rnd, tid
        self.killing, self.stop = killing, stop
        self.r = random.Random(seed)
        self.attempted = {}          # key -> value
        self.acked = []              # (key, value, revision)
        self.errors_before_stop = []

    def run(self):
        ch = channel(self.server)
        kv = rpc_pb2_grpc.KVStub(ch)
        i = 0
        try:
            while not self.stop.is_set():
                key = PREFIX + b"r%d/t%d/%06d" % (self.rnd, self.tid, i)
                value = b"%d-%d-%d-" % (self.rnd, self.tid, i) + \
                    bytes(self.r.getrandbits(8) for _ in range(self.r.randint(0, 200)))
                i += 1
                self.attempted[key] = value
                try:
                    resp = kv.Put(rpc_pb2.PutRequest(key=key, value=value), timeout=RPC_TIMEOUT)
                except grpc.RpcError as e:
                    if self.killing.is_set():
                        return
                    # Any error ends this writer (a retry of the same key
                    # could not be told apart from the first attempt).
                    self.errors_before_stop.append("%s %s" % (e.code().name, e.details()))
                    return
                self.acked.append((key, value, resp.header.revision))
        finally:
            ch.close()


def verify(server, acked, attempted):
    """Returns a list of problems (empty when all is well)."""
    problems = []
    ch = channel(server)
    try:
        kv = rpc_pb2_grpc.KVStub(ch)
        end = PREFIX[:-1] + bytes([PREFIX[-1] + 1])
        resp = kv.Range(rpc_pb2.RangeRequest(key=PREFIX, range_end=end), timeout=60)
    finally:
        ch.close()
    have = {kv_.key: kv_ for kv_ in resp.kvs}
    for key, (value, rev) in sorted(acked.items()):
        got = have.get(key)
        if got is None:
            problems.append("LOST acknowledged put %r (ack revision %d)" % (key, rev))
        elif got.value != value:
            problems.append("WRONG value for acknowledged put %r: %r..., expected %r..."
                            % (key, got.value[:40], value[:40]))
        elif got.mod_revision != rev or got.create_revision != rev or got.version != 1:
            problems.append("WRONG revisions for %r: create %d mod %d version %d, ack said %d"
                            % (key, got.create_revision, got.mod_revision, got.version, rev))
    for key, got in have.items():
        if key not in attempted:
            problems.append("PHANTOM key %r present but never written" % key)
        elif attempted[key] != got.value:
            problems.append("CORRUPT unacknowledged key %r: value %r..., attempted %r..."
                            % (key, got.value[:40], attempted[key][:40]))
    if resp.header.revision < len(acked) + 1:
        problems.append("REVISION %d < acknowledged writes %d + 1"
                        % (resp.header.revision, len(acked)))
    return problems, len(have), resp.header.revision


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="quorum", choices=["quorum", "etcd"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data dir and log")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    r = random.Random(seed)
    print("crash: target %s, seed %d" % (args.target, seed))

    tmp = tempfile.mkdtemp(prefix="crash-%s-" % args.target)
    server = harness.Server(args.target, name="crash",
                            data_dir=os.path.join(tmp, "crash." + args.target))
    acked = {}            # key -> (value, revision)
    attempted = {}        # key -> value
    revs = {}             # revision -> key, over all acks
    failed = False
    try:
        for rnd in range(1, args.rounds + 2):
            try:
                server.start()
            except Exception as e:  # noqa: BLE001
                print("crash: round %d: server did not %s: %s"
                      % (rnd, "start" if rnd == 1 else "restart after kill -9", e))
                failed = True
                return 2
            if rnd > 1:
                problems, nkeys, rev = verify(server, acked, attempted)
                print("crash: after restart %d: %d acked, %d keys present, revision %d"
                      % (rnd - 1, len(acked), nkeys, rev))
                if problems:
                    print("crash: FAILED after kill -9 #%d: %d problems" % (rnd - 1, len(problems)))
                    for p in problems[:30]:
                        print("  " + p)
                    failed = True
                    return 1
            if rnd == args.rounds + 1:
                break
            killing, stop = threading.Event(), threading.Event()
            writers = [Writer(server, rnd, t, r.randrange(1 << 30), killing, stop)
                       for t in range(args.threads)]
            for w in writers:
                w.start()
            delay = r.uniform(1.0, 3.0)
            time.sleep(delay)
            killing.set()                       # errors from here on are expected
            server.kill()                       # SIGKILL by PID, reaped
            stop.set()
            for w in writers:
                w.join(timeout=RPC_TIMEOUT + 10)
                if w.is_alive():
                    print("crash: round %d: writer %d still blocked after kill" % (rnd, w.tid))
                    failed = True
                    return 1
            n = 0
            for w in writers:
                attempted.update(w.attempted)
                for key, value, rev in w.acked:
                    if rev in revs:
                        print("crash: FAILED: two acks with revision %d: %r and %r"
                              % (rev, revs[rev], key))
                        failed = True
                        return 1
                    revs[rev] = key
                    acked[key] = (value, rev)
                    n += 1
                for e in w.errors_before_stop:
                    print("crash: round %d: writer %d: error before the kill: %s" % (rnd, w.tid, e))
            print("crash: round %d: killed after %.2fs, %d puts acknowledged" % (rnd, delay, n))
        print("crash: %d rounds, %d acknowledged writes, 0 lost" % (args.rounds, len(acked)))
        return 0
    finally:
        server.kill()
        if failed or args.keep:
            print("crash: data dir and log kept in %s" % tmp)
            if failed:
                print("--- log tail ---\n" + server.log_tail(2000))
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
