"""A ZooKeeper history on a three-member quorum cluster under kill -9 and
SIGSTOP of members, checked with the project's linearizability checker
(linearizability.py): setData writes and sync+getData reads on a few
znodes from several kazoo clients (own sessions, each free to move
between members), members killed and paused meanwhile.

ZooKeeper promises linearizable writes and, for a client that calls sync
before it reads, a read that sees every write completed before the sync
began: on quorum sync is a log entry, so the whole history of writes and
sync+reads must be linearizable. Writes whose answer was lost count as
"unknown" (they may or may not have happened); reads that failed are
dropped. quorum only: Apache ZooKeeper's sync is not a full barrier in
every case, and a three-server ensemble would double this test's time."""
import os
import random
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402
from harness import free_port  # noqa: E402
import linearizability  # noqa: E402

from kazoo.client import KazooClient  # noqa: E402
from kazoo.retry import KazooRetry  # noqa: E402

KEYS = ["/lin/a", "/lin/b", "/lin/c"]
SECONDS = float(os.environ.get("ZK_LIN_SECONDS", "20"))


class ZkLinearizability(unittest.TestCase):
    def test_history_under_kills_and_pauses(self):
        c = Cluster("quorum", n=3)
        ports = [free_port() for _ in range(3)]
        for i, m in enumerate(c.members):
            m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % ports[i]]
        c.start()
        hosts = ",".join("127.0.0.1:%d" % p for p in ports)
        history, lock = [], threading.Lock()
        stop = threading.Event()
        try:
            setup = KazooClient(hosts=hosts, timeout=10)
            setup.start(timeout=30)
            for k in KEYS:
                setup.ensure_path(k)
                setup.set(k, b"init")
            setup.stop()
            setup.close()

            def client(cid):
                rng = random.Random(cid)
                # no automatic retries: every lost answer is recorded
                zk = KazooClient(hosts=hosts, timeout=10,
                                 connection_retry=KazooRetry(max_tries=-1, max_delay=0.5))
                zk.start(timeout=30)
                n = 0
                while not stop.is_set():
                    key = rng.choice(KEYS)
                    if rng.random() < 0.5:
                        n += 1
                        val = "c%d-%d" % (cid, n)
                        t0 = time.monotonic()
                        try:
                            zk.set(key, val.encode())
                            op = dict(client=cid, kind="put", key=key, value=val, call=t0,
                                      ret=time.monotonic())
                        except Exception:  # noqa: BLE001
                            op = dict(client=cid, kind="put", key=key, value=val, call=t0,
                                      status="unknown")
                            time.sleep(0.2)
                    else:
                        t0 = time.monotonic()
                        try:
                            zk.sync(key)
                            v = zk.get(key)[0].decode()
                            op = dict(client=cid, kind="get", key=key, result=v, call=t0,
                                      ret=time.monotonic())
                        except Exception:  # noqa: BLE001
                            op = None  # a failed read tells nothing
                            time.sleep(0.2)
                    if op is not None:
                        with lock:
                            history.append(op)
                zk.stop()
                zk.close()

            def chaos():
                rng = random.Random(7)
                while not stop.is_set():
                    time.sleep(3)
                    if stop.is_set():
                        break
                    i = rng.randrange(3)
                    if rng.random() < 0.5:
                        c.kill(i)
                        time.sleep(1)
                        c.restart(i, wait=False)
                    else:
                        c.kill(i, signal.SIGSTOP)
                        time.sleep(1.5)
                        c.kill(i, signal.SIGCONT)

            ts = [threading.Thread(target=client, args=(i,)) for i in range(4)]
            ts.append(threading.Thread(target=chaos))
            for t in ts:
                t.start()
            time.sleep(SECONDS)
            stop.set()
            for t in ts:
                t.join(60)
            for i in range(3):
                if not c.members[i].running():
                    c.restart(i, wait=False)
            done = [o for o in history if o.get("status", "ok") == "ok"]
            self.assertGreater(len(done), 50, "too few operations completed")
            self.assertTrue(any(o["kind"] == "get" for o in done))
            ok, info = linearizability.check(history, initial={k: "init" for k in KEYS})
            self.assertTrue(ok, info)
            print("zk history: %s (%d ops, %d unknown)"
                  % (info, len(history), len(history) - len(done)))
        finally:
            stop.set()
            for m in c.members:
                if m.stopped:
                    m.signal(signal.SIGCONT)
            c.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
