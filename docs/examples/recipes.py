#!/usr/bin/env python3
"""ZooKeeper's recipes on quorum, with python3-etcd3: a barrier, a double
barrier, a FIFO queue with exactly-once delivery, a read/write lock, and
group membership. (Locks and leader election: locks.md, elections.md.)

Each recipe runs with several threads and asserts what it promises.
Run:  QUORUM_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 docs/examples/recipes.py

The building blocks are the same in every recipe: a key's create revision
orders contenders (like ZooKeeper's sequential znodes), a lease makes a key
ephemeral, a Txn makes check-and-act atomic, and a watch from a known
revision waits without missing anything (no ZooKeeper-style herd: each
waiter watches exactly one key or prefix).
"""
import os
import threading
import time

import etcd3

host, port = os.environ.get("QUORUM_ENDPOINT", "127.0.0.1:2379").split(":")


def client():
    return etcd3.client(host=host, port=int(port))


def wait_event(c, key, from_rev, kind):
    """Return once |key| has an event of |kind| at a revision >= from_rev."""
    events, cancel = c.watch(key, start_revision=from_rev)
    try:
        for ev in events:
            if isinstance(ev, kind):
                return
    finally:
        cancel()


def wait_deleted(c, key, from_rev):
    wait_event(c, key, from_rev, etcd3.events.DeleteEvent)


def current_revision(c):
    # any read answers with the store's revision in its header
    return c.kvstub.Range(etcd3.etcdrpc.RangeRequest(key=b"\0")).header.revision


# ---- barrier: everyone waits until the barrier key is removed ----------

def barrier():
    c = client()
    c.put("/barrier/deploy", "holding")
    passed = []

    def waiter(i):
        wc = client()
        rev = current_revision(wc)
        if wc.get("/barrier/deploy")[0] is not None:
            wait_deleted(wc, "/barrier/deploy", rev + 1)
        passed.append(i)

    ts = [threading.Thread(target=waiter, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    assert passed == [], "nobody passes a raised barrier"
    c.delete("/barrier/deploy")
    for t in ts:
        t.join(10)
    assert sorted(passed) == [0, 1, 2]
    print("barrier: 3 waiters released together")


# ---- double barrier: start together when N arrived, finish together -----

def wait_until(c, prefix, ok):
    """Read the number of keys under |prefix|; until ok(count), wait for the
    next change after that read (watching from its revision + 1)."""
    while True:
        rev = current_revision(c)
        if ok(len(list(c.get_prefix(prefix)))):
            return
        events, cancel = c.watch_prefix(prefix, start_revision=rev + 1)
        next(iter(events))
        cancel()


def double_barrier(n=3):
    prefix = "/dbarrier/job/"
    ready = "/dbarrier/job-ready"     # raised by the n-th to arrive
    lock = threading.Lock()

    arrived, finished, bad = [], [], []

    def participant(i):
        c = client()
        lease = c.lease(30)
        with lock:
            arrived.append(i)
        c.put(prefix + "p%d" % i, "", lease=lease)
        # enter: whoever finds n participants present raises the ready flag;
        # the others wait for it. (Waiting to count n themselves could hang:
        # a fast participant may enter and leave before a slow one counts.)
        rev = current_revision(c)
        if len(list(c.get_prefix(prefix))) >= n:
            c.put(ready, "")
        else:
            wait_event(c, ready, rev + 1, etcd3.events.PutEvent)
        with lock:
            if len(arrived) != n:
                bad.append("%d entered before all arrived" % i)
        time.sleep(0.05 * i)  # work of different lengths
        with lock:
            finished.append(i)
        # leave: remove ourselves, wait until everyone has left
        c.delete(prefix + "p%d" % i)
        wait_until(c, prefix, lambda count: count == 0)
        c.delete(ready)   # everyone entered long ago: lower the flag for the next round
        with lock:
            if len(finished) != n:
                bad.append("%d left before all finished" % i)
        lease.revoke()

    ts = [threading.Thread(target=participant, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
        time.sleep(0.1)
    for t in ts:
        t.join(20)
    assert bad == [], bad
    assert sorted(finished) == list(range(n))
    print("double barrier: %d entered together and left together" % n)


# ---- FIFO queue: every item delivered exactly once, in order ------------

def enqueue(c, name, item):
    # the key's create revision orders the queue; the suffix makes it unique
    key = "/queue/%s/%020d-%s" % (name, time.time_ns(), os.urandom(4).hex())
    c.put(key, item)


def dequeue(c, name, timeout=10):
    prefix = "/queue/%s/" % name
    deadline = time.time() + timeout
    while time.time() < deadline:
        rev = current_revision(c)
        first = list(c.get_prefix(prefix, sort_order="ascend", sort_target="create"))
        for value, meta in first[:1]:
            # take it only if nobody else did: delete guarded by its revision
            ok, _ = c.transaction(
                compare=[c.transactions.mod(meta.key) == meta.mod_revision],
                success=[c.transactions.delete(meta.key)], failure=[])
            if ok:
                return value.decode()
            break
        else:
            # empty: wait for the next change under the prefix, or give up
            try:
                c.watch_prefix_once(prefix, timeout=max(0.01, deadline - time.time()),
                                    start_revision=rev + 1)
            except etcd3.exceptions.WatchTimedOut:
                return None
    return None


def queue(producers=3, items=20, consumers=3):
    got = []
    lock = threading.Lock()

    def produce(p):
        c = client()
        for i in range(items):
            enqueue(c, "jobs", "%d:%d" % (p, i))

    def consume():
        c = client()
        while True:
            item = dequeue(c, "jobs", timeout=3)
            if item is None:
                return
            with lock:
                got.append(item)

    ts = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    ts += [threading.Thread(target=consume) for _ in range(consumers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(got) == producers * items, "every item delivered"
    assert len(set(got)) == len(got), "no item delivered twice"
    for p in range(producers):
        mine = [int(x.split(":")[1]) for x in got if x.startswith("%d:" % p)]
        assert mine == sorted(mine), "one producer's items come out in order"
    print("queue: %d items, %d consumers, each item once, FIFO per producer" %
          (len(got), consumers))


# ---- read/write lock: readers share, a writer is alone ------------------

class RWLock:
    """etcd's RWMutex recipe: a reader waits for every writer that came
    before it, a writer for everyone that came before it."""

    def __init__(self, c, name):
        self.c, self.pfx = c, "/rwlock/%s/" % name

    def _acquire(self, kind):
        self.lease = self.c.lease(30)
        self.key = "%s%s/%x" % (self.pfx, kind, self.lease.id)
        self.c.put(self.key, "", lease=self.lease)
        mine = self.c.get(self.key)[1].create_revision
        while True:
            # read, then watch from that read's revision + 1: a key deleted
            # between the two is still seen (watching from a revision taken
            # after the read could start past its DELETE and wait forever)
            rev = current_revision(self.c)
            before = [m for _, m in self.c.get_prefix(self.pfx)
                      if m.create_revision < mine and
                      (kind == "write" or m.key.decode().startswith(self.pfx + "write/"))]
            if not before:
                return
            last = max(before, key=lambda m: m.create_revision)
            wait_deleted(self.c, last.key.decode(), rev + 1)

    def read_lock(self):
        self._acquire("read")

    def write_lock(self):
        self._acquire("write")

    def unlock(self):
        self.lease.revoke()


def rwlock():
    state = {"readers": 0, "writers": 0, "max_readers": 0, "bad": 0}
    lock = threading.Lock()

    def reader():
        l = RWLock(client(), "cfg")
        for _ in range(3):
            l.read_lock()
            with lock:
                state["readers"] += 1
                state["max_readers"] = max(state["max_readers"], state["readers"])
                state["bad"] += state["writers"] != 0
            time.sleep(0.05)
            with lock:
                state["readers"] -= 1
            l.unlock()

    def writer():
        l = RWLock(client(), "cfg")
        for _ in range(3):
            l.write_lock()
            with lock:
                state["writers"] += 1
                state["bad"] += state["writers"] != 1 or state["readers"] != 0
            time.sleep(0.03)
            with lock:
                state["writers"] -= 1
            l.unlock()

    ts = [threading.Thread(target=reader) for _ in range(4)]
    ts += [threading.Thread(target=writer) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert state["bad"] == 0, "a writer shared the lock"
    assert state["max_readers"] >= 2, "readers share the lock"
    print("rwlock: readers shared (up to %d at once), writers were alone" % state["max_readers"])


# ---- group membership: ephemeral members, watched ------------------------

def membership():
    c = client()
    seen = []
    rev = current_revision(c)
    events, cancel = c.watch_prefix("/group/web/", start_revision=rev + 1)

    def observe():
        for ev in events:
            kind = "join" if isinstance(ev, etcd3.events.PutEvent) else "leave"
            seen.append((kind, ev.key.decode().rsplit("/", 1)[1]))

    t = threading.Thread(target=observe, daemon=True)
    t.start()
    alive = client().lease(2)   # a member that keeps its lease alive
    dead = client().lease(2)    # a member that crashes (stops refreshing)
    c.put("/group/web/a", "10.0.0.1", lease=alive)
    c.put("/group/web/b", "10.0.0.2", lease=dead)
    deadline = time.time() + 20
    while ("leave", "b") not in seen and time.time() < deadline:
        alive.refresh()
        time.sleep(0.5)
    members = sorted(m.key.decode() for _, m in c.get_prefix("/group/web/"))
    cancel()
    assert ("join", "a") in seen and ("join", "b") in seen
    assert ("leave", "b") in seen, "a crashed member leaves when its lease ends"
    assert members == ["/group/web/a"], members
    alive.revoke()
    print("membership: b left when its lease expired, a stayed:", members)


barrier()
double_barrier()
queue()
rwlock()
membership()
print("ok")
