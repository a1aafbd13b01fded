"""kazoo's recipes under concurrency on the ZooKeeper face: Lock,
ReadLock/WriteLock, Semaphore, Barrier, DoubleBarrier, Queue,
LockingQueue, Election, Party, Counter, TreeCache, each driven by several
clients (own sessions) at once, checking what the recipe promises (no
overlap, nothing lost, FIFO where promised, everyone released).

TARGET=quorum (default) runs it against quorum; TARGET=quorum-cluster
against three quorum members (each client given all three ZooKeeper
ports); TARGET=zookeeper against Apache ZooKeeper 3.8, which proves the
test."""
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402
from harness import Server, free_port, wait_for  # noqa: E402
import zkref  # noqa: E402

from kazoo.client import KazooClient  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
HOSTS = None
SRV = None


def setUpModule():
    global HOSTS, SRV
    if TARGET == "zookeeper":
        if not zkref.available():
            raise unittest.SkipTest("zookeeper not installed")
        SRV = zkref.ZooKeeper().start()
        HOSTS = SRV.hostport
    elif TARGET == "quorum-cluster":
        ports = [free_port() for _ in range(3)]
        SRV = Cluster("quorum", n=3)
        for i, m in enumerate(SRV.members):
            m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % ports[i]]
        SRV.start()
        HOSTS = ",".join("127.0.0.1:%d" % p for p in ports)
    else:
        port = free_port()
        SRV = Server("quorum", extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port])
        SRV.start()
        HOSTS = "127.0.0.1:%d" % port


def tearDownModule():
    if TARGET == "quorum-cluster":
        SRV.cleanup()
        return
    SRV.stop()
    if TARGET != "zookeeper":
        SRV.cleanup()


class Clients:
    """n kazoo clients, each its own session."""

    def __init__(self, n):
        self.c = []
        for _ in range(n):
            k = KazooClient(hosts=HOSTS, timeout=10)
            k.start(timeout=15)
            self.c.append(k)

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        for k in self.c:
            k.stop()
            k.close()


def run_all(fns):
    errors = []

    def wrap(f):
        try:
            f()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(40)
    if errors:
        raise errors[0]


class Recipes(unittest.TestCase):
    def test_lock_mutual_exclusion(self):
        with Clients(4) as cs:
            cs[0].ensure_path("/r/lock-count")
            inside, seen = [0], []
            lk = threading.Lock()

            def worker(k):
                lock = k.Lock("/r/lock", "w")
                for _ in range(5):
                    with lock:
                        with lk:
                            inside[0] += 1
                            seen.append(inside[0])
                        v = int(k.get("/r/lock-count")[0] or b"0")
                        k.set("/r/lock-count", str(v + 1).encode())
                        with lk:
                            inside[0] -= 1
            run_all([lambda k=k: worker(k) for k in cs])
            self.assertEqual(max(seen), 1)
            cs[0].sync("/r/lock-count")  # the others' writes (another member)
            self.assertEqual(cs[0].get("/r/lock-count")[0], b"20")

    def test_read_write_lock(self):
        # (four threads contending at once make kazoo 2.8's ReadLock and
        # WriteLock time out against Apache ZooKeeper 3.8 too: the steps
        # are taken one at a time here)
        with Clients(3) as cs:
            w = cs[0].WriteLock("/r/rw")
            self.assertTrue(w.acquire(timeout=10))
            got = []
            r1 = cs[1].ReadLock("/r/rw")
            t = threading.Thread(target=lambda: got.append(r1.acquire(timeout=20)))
            t.start()
            time.sleep(0.5)
            self.assertEqual(got, [])        # a reader waits for the writer
            w.release()
            t.join(30)
            self.assertEqual(got, [True])
            r2 = cs[2].ReadLock("/r/rw")
            self.assertTrue(r2.acquire(timeout=10))  # readers share
            w2 = cs[0].WriteLock("/r/rw")
            wgot = []
            t = threading.Thread(target=lambda: wgot.append(w2.acquire(timeout=20)))
            t.start()
            time.sleep(0.5)
            self.assertEqual(wgot, [])       # a writer waits for both readers
            r1.release()
            time.sleep(0.3)
            self.assertEqual(wgot, [])
            r2.release()
            t.join(30)
            self.assertEqual(wgot, [True])
            w2.release()

    def test_semaphore(self):
        with Clients(4) as cs:
            now, peak = [0], [0]
            lk = threading.Lock()

            def worker(k):
                sem = k.Semaphore("/r/sem", max_leases=2)
                for _ in range(3):
                    with sem:
                        with lk:
                            now[0] += 1
                            peak[0] = max(peak[0], now[0])
                        time.sleep(0.05)
                        with lk:
                            now[0] -= 1
            run_all([lambda k=k: worker(k) for k in cs])
            self.assertLessEqual(peak[0], 2)
            self.assertGreaterEqual(peak[0], 1)

    def test_barrier_and_double_barrier(self):
        with Clients(4) as cs:
            b = cs[0].Barrier("/r/barrier")
            b.create()
            passed = []
            # (another client made the barrier: sync, so a member behind does
            # not answer that there is none)
            ts = [threading.Thread(target=lambda k=k: (k.sync("/r/barrier"), passed.append(
                k.Barrier("/r/barrier").wait(20)))) for k in cs[1:]]
            for t in ts:
                t.start()
            time.sleep(0.5)
            self.assertEqual(passed, [])
            b.remove()
            for t in ts:
                t.join(30)
            self.assertEqual(passed, [True, True, True])
            entered, left = [], []

            def member(k, i):
                db = k.DoubleBarrier("/r/dbl", 4, identifier="m%d" % i)
                db.enter()
                entered.append(len(entered))
                time.sleep(0.1)
                db.leave()
                left.append(i)
            run_all([lambda k=k, i=i: member(k, i) for i, k in enumerate(cs)])
            self.assertEqual((len(entered), sorted(left)), (4, [0, 1, 2, 3]))

    def test_queues(self):
        with Clients(3) as cs:
            q = cs[0].Queue("/r/queue")
            for i in range(10):
                q.put(b"a%d" % i)
            self.assertEqual([q.get() for _ in range(10)], [b"a%d" % i for i in range(10)])
            self.assertIsNone(q.get())
            # two producers, two consumers of a LockingQueue: nothing lost,
            # nothing twice
            got = []
            lk = threading.Lock()

            def producer(k, tag):
                lq = k.LockingQueue("/r/lq")
                for i in range(8):
                    lq.put(b"%s%d" % (tag, i))

            def consumer(k):
                lq = k.LockingQueue("/r/lq")
                while True:
                    with lk:
                        if len(got) >= 16:
                            return
                    item = lq.get(1)
                    if item is None:
                        continue
                    with lk:
                        got.append(item)
                    lq.consume()
            run_all([lambda: producer(cs[0], b"x"), lambda: producer(cs[1], b"y"),
                     lambda: consumer(cs[1]), lambda: consumer(cs[2])])
            self.assertEqual(sorted(got), sorted([b"x%d" % i for i in range(8)]
                                                 + [b"y%d" % i for i in range(8)]))

    def test_election_party_counter(self):
        with Clients(3) as cs:
            leaders, now = [], [0]
            lk = threading.Lock()

            def candidate(k, name):
                def lead():
                    with lk:
                        now[0] += 1
                        leaders.append((name, now[0]))
                    time.sleep(0.2)
                    with lk:
                        now[0] -= 1
                k.Election("/r/election", name).run(lead)
            run_all([lambda k=k, i=i: candidate(k, "c%d" % i) for i, k in enumerate(cs)])
            self.assertEqual(sorted(n for n, _ in leaders), ["c0", "c1", "c2"])
            self.assertEqual(max(c for _, c in leaders), 1)
            parties = [k.Party("/r/party", "p%d" % i) for i, k in enumerate(cs)]
            for p in parties:
                p.join()
            self.assertEqual(len(parties[0]), 3)
            parties[1].leave()
            cs[2].sync("/r/party")  # another client's change: sync, then read
            self.assertEqual(sorted(parties[2]), ["p0", "p2"])
            counters = [k.Counter("/r/counter") for k in cs]

            def bump(c):
                for _ in range(10):
                    c += 1
            run_all([lambda c=c: bump(c) for c in counters])
            cs[0].sync("/r/counter")
            self.assertEqual(cs[0].Counter("/r/counter").value, 30)

    def test_tree_cache(self):
        from kazoo.recipe.cache import TreeCache
        with Clients(2) as cs:
            cs[0].ensure_path("/r/tree")
            cache = TreeCache(cs[0], "/r/tree")
            events = []
            cache.listen(lambda e: events.append((e.event_type, e.event_data.path
                                                  if e.event_data else None)))
            cache.start()
            wait_for(lambda: any(t == 6 for t, _ in events), 10, what="TreeCache initialized")  # INITIALIZED
            def data(p):
                d = cache.get_data(p)
                return d.data if d is not None else None
            # one step at a time, each seen by the cache before the next
            cs[1].create("/r/tree/a", b"1")
            wait_for(lambda: data("/r/tree/a") == b"1", 10, what="a added")
            cs[1].create("/r/tree/a/b", b"2")
            wait_for(lambda: data("/r/tree/a/b") == b"2", 10, what="a/b added")
            cs[1].set("/r/tree/a", b"3")
            wait_for(lambda: data("/r/tree/a") == b"3", 10, what="a updated")
            cs[1].delete("/r/tree/a/b")
            wait_for(lambda: cache.get_data("/r/tree/a/b") is None, 10, what="a/b removed")
            # NODE_ADDED 0 (a, a/b), NODE_UPDATED 1, NODE_REMOVED 2 (the
            # listeners run on kazoo's event thread, after the cache's state)
            wait_for(lambda: [t for t, p in list(events)
                              if p and p.startswith("/r/tree/a")] == [0, 0, 1, 2],
                     10, what="TreeCache events in order")
            cache.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
