"""The ZooKeeper face on a three-member quorum cluster (docs/zookeeper.md):
every member serves ZooKeeper clients on its own --listen-zk-urls port; a
session lives in the replicated store, so it is renewed through any
member (a follower forwards renewals to the leader), can be resumed on
another member with its id and password, and survives kill -9 of the
member its client was connected to, ephemerals included; when the client
closes it, its ephemerals vanish on every member.

These are ZooKeeper's documented session semantics; test_zk.py proves the
single-server protocol against Apache ZooKeeper 3.8 itself."""
import os
import signal
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402
from harness import free_port, wait_for  # noqa: E402
import zkref  # noqa: E402

from kazoo.client import KazooClient, KazooState  # noqa: E402


def raw_connect(port, session, passwd, timeout_ms=10000, last_zxid=0):
    """A bare ConnectRequest: (negotiated timeout, session id) or None (the
    member closed the connection without an answer)."""
    with socket.create_connection(("127.0.0.1", port), 10) as s:
        body = struct.pack(">iqiq", 0, last_zxid, timeout_ms, session) + \
            struct.pack(">i", 16) + passwd
        body += b"\0"
        s.sendall(struct.pack(">i", len(body)) + body)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            b = s.recv(4096)
            if not b:
                return None
            buf += b
        to, sid = struct.unpack(">iq", buf[8:20])
        return to, sid


class ZkCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster("quorum", n=3)
        cls.zk_ports = [free_port() for _ in range(3)]
        for i, m in enumerate(cls.c.members):
            m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % cls.zk_ports[i],
                            "--zk-4lw-commands-whitelist", "mntr",
                            "--zk-container-check-interval", "500ms"]
        cls.c.start()

    @classmethod
    def tearDownClass(cls):
        cls.c.cleanup()

    def client(self, idx, timeout=4.0):
        hosts = ",".join("127.0.0.1:%d" % self.zk_ports[i] for i in idx)
        zk = KazooClient(hosts=hosts, timeout=timeout)
        zk.start(timeout=20)
        return zk

    def test_sessions_across_members(self):
        c = self.c
        leader = c.leader_index()
        followers = [i for i in range(3) if i != leader]
        # a client on a follower only, with a 4 s session: it lives on for
        # three timeouts (renewals forwarded to the leader)
        zk = self.client([followers[0]], timeout=4.0)
        other = self.client([followers[1]])
        try:
            sid, pw = zk.client_id
            zk.create("/cl-eph", b"e", ephemeral=True)
            zk.create("/cl-p", b"p")
            other.sync("/cl-eph")
            self.assertEqual(other.exists("/cl-eph").ephemeralOwner, sid)
            time.sleep(12)
            self.assertEqual(zk.state, KazooState.CONNECTED)
            self.assertEqual(other.exists("/cl-eph").ephemeralOwner, sid)
            # the same session from the leader's port, by id and password
            to, got = raw_connect(self.zk_ports[leader], sid, pw)
            self.assertEqual((to > 0, got), (True, sid))
            # and a wrong password is refused there too
            self.assertEqual(raw_connect(self.zk_ports[leader], sid, bytes(16))[0], 0)
        finally:
            zk.stop()
            zk.close()
        # closed on one member: the ephemeral is gone on the others
        wait_for(lambda: other.exists("/cl-eph") is None, 20, what="ephemeral gone")
        self.assertIsNotNone(other.exists("/cl-p"))
        other.delete("/cl-p")
        other.stop()
        other.close()

    def test_session_moved_closes_the_old_connection(self):
        """ZooKeeper's session owner (its testSessionMoved): once the
        session reconnects through another member, a write on the old
        connection is not applied; the old member closes that connection
        (SESSIONMOVED is a connection-level error), the client reconnects
        with its session, and goes on where it was."""
        from kazoo.exceptions import ConnectionLoss
        zk = self.client([0])
        try:
            sid, pw = zk.client_id
            zk.create("/mv-eph", b"e", ephemeral=True)
            zk.create("/mv", b"0")
            # the same session taken up on member 1 (a bare connect)
            to, got = raw_connect(self.zk_ports[1], sid, pw)
            self.assertEqual((to > 0, got), (True, sid))
            with self.assertRaises(ConnectionLoss):
                zk.set("/mv", b"old connection")
            self.assertEqual(zk.retry(zk.get, "/mv")[0], b"0",
                             "the write of the old connection was not applied")
            wait_for(lambda: zk.state == KazooState.CONNECTED, 20, what="reconnected")
            self.assertEqual(zk.client_id[0], sid, "the same session")
            zk.set("/mv", b"1")
            self.assertEqual(zk.get("/mv")[0], b"1")
            self.assertEqual(zk.exists("/mv-eph").ephemeralOwner, sid)
            zk.delete("/mv")
        finally:
            zk.stop()
            zk.close()

    def test_leader_sweeps_containers_and_mntr_modes(self):
        """the leader alone sweeps (ZooKeeper's ContainerManager); a
        container emptied through a follower goes on every member; mntr
        says which member leads"""
        c = self.c
        leader = c.leader_index()
        followers = [i for i in range(3) if i != leader]

        def mntr(i):
            out = zkref.four_letter("127.0.0.1", self.zk_ports[i], b"mntr")
            return dict(ln.split("\t", 1) for ln in out.splitlines())
        m = mntr(leader)
        self.assertEqual(m["zk_server_state"], "leader")
        self.assertEqual(m["zk_learners"], "2")
        wait_for(lambda: mntr(leader)["zk_synced_followers"] == "2", 20, what="followers synced")
        for i in followers:
            self.assertEqual(mntr(i)["zk_server_state"], "follower")
            self.assertNotIn("zk_learners", mntr(i))
        zk = self.client([followers[0]])
        other = self.client([followers[1]])
        try:
            zk.create("/cl-cont")
            zk.create("/cl-cont/box", b"")
            # a container through the raw protocol (kazoo has no container mode)
            self._create_container(self.zk_ports[followers[0]], "/cl-cont/ct")
            zk.create("/cl-cont/ct/child", b"")
            zk.delete("/cl-cont/ct/child")
            wait_for(lambda: other.exists("/cl-cont/ct") is None, 30,
                     what="the emptied container swept")
            self.assertIsNotNone(other.exists("/cl-cont/box"))
            zk.delete("/cl-cont", recursive=True)
        finally:
            zk.stop()
            zk.close()
            other.stop()
            other.close()

    def _create_container(self, port, path):
        with socket.create_connection(("127.0.0.1", port), 10) as s:
            body = struct.pack(">iqiq", 0, 0, 10000, 0) + struct.pack(">i", 16) + bytes(16) + b"\0"
            s.sendall(struct.pack(">i", len(body)) + body)

            def packet():
                buf = b""
                while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                    b = s.recv(4096)
                    self.assertTrue(b)
                    buf += b
                return buf[4:]
            packet()
            p = path.encode()
            acl = struct.pack(">i", 1) + struct.pack(">i", 31) + struct.pack(">i", 5) + \
                b"world" + struct.pack(">i", 6) + b"anyone"
            req = struct.pack(">ii", 1, 19) + struct.pack(">i", len(p)) + p + \
                struct.pack(">i", 0) + acl + struct.pack(">i", 4)
            s.sendall(struct.pack(">i", len(req)) + req)
            self.assertEqual(struct.unpack(">iqi", packet()[:16])[2], 0)

    def test_never_back_in_time_on_a_lagging_member(self):
        """A client that has seen zxid Z is never served by a member that
        has not applied Z: a member behind it refuses the connection (the
        client tries another); one that accepts shows the state at Z."""
        c = self.c
        leader = c.leader_index()
        lag = [i for i in range(3) if i != leader][0]
        zk = self.client([leader])
        try:
            zk.create("/lag", b"0")
            c.kill(lag, signal.SIGSTOP)  # it falls behind
            for i in range(1, 40):
                zk.set("/lag", b"%d" % i)
            seen = zk.exists("/lag").mzxid
            sid, pw = zk.client_id
            c.kill(lag, signal.SIGCONT)
            # refused while behind, accepted once caught up: then it reads
            # the state at Z (a fresh session there, no sync)
            wait_for(lambda: raw_connect(self.zk_ports[lag], sid, pw, last_zxid=seen)
                     is not None, 20, what="the lagging member caught up")
            other = KazooClient(hosts="127.0.0.1:%d" % self.zk_ports[lag], timeout=10)
            other.start(timeout=20)
            self.assertEqual(other.get("/lag")[0], b"39")
            other.stop()
            other.close()
            # the raw connect took zk's session over to the lagging member:
            # zk's next write on the leader closes its connection
            # (SESSIONMOVED), and the retry goes through after it reconnects
            zk.retry(zk.delete, "/lag")
        finally:
            if c.members[lag].stopped:
                c.kill(lag, signal.SIGCONT)
            zk.stop()
            zk.close()

    def test_session_survives_kill_of_its_member(self):
        c = self.c
        zk = self.client(range(3), timeout=10.0)
        watcher = None
        try:
            sid = zk.client_id[0]
            zk.create("/kill-eph", b"", ephemeral=True)
            port = zk._connection._socket.getpeername()[1]
            victim = self.zk_ports.index(port)
            states = []
            zk.add_listener(states.append)
            c.kill(victim)
            c.wait_leader()
            # the client moves to another member within its timeout and keeps
            # its session; nothing was lost
            wait_for(lambda: KazooState.SUSPENDED in states and zk.state == KazooState.CONNECTED,
                     30, what="the client reconnected to another member")
            self.assertNotIn(KazooState.LOST, states)
            self.assertEqual(zk.client_id[0], sid)
            others = [i for i in range(3) if i != victim]
            watcher = self.client(others)
            # another client's writes: sync, then read (ZooKeeper's rule)
            watcher.sync("/kill-eph")
            self.assertEqual(watcher.exists("/kill-eph").ephemeralOwner, sid)
            zk.create("/kill-after", b"x")
            watcher.sync("/kill-after")
            self.assertEqual(watcher.get("/kill-after")[0], b"x")
            watcher.delete("/kill-after")
        finally:
            zk.stop()
            zk.close()
            if watcher is not None:
                wait_for(lambda: watcher.exists("/kill-eph") is None, 20, what="ephemeral gone")
                watcher.stop()
                watcher.close()
            for i in range(3):
                if not c.members[i].running():
                    c.restart(i)
            c.wait_leader()


class ZkFiguresAfterSnapshot(unittest.TestCase):
    """mntr's figures (zk_znode_count, zk_approximate_data_size) are kept
    as the tree changes and counted again when a snapshot replaces a
    member's store: a member that was down while more entries went than
    the leader's log keeps catches up from a snapshot and shows the same
    figures as the others (exact past the 32,000 znodes where they used to
    be walked and given up as -1)."""

    def test_figures_recounted_after_a_snapshot(self):
        ports = [free_port() for _ in range(3)]
        c = Cluster("quorum", n=3)
        for i, m in enumerate(c.members):
            m.extra_args = ["--listen-zk-urls", "http://127.0.0.1:%d" % ports[i],
                            "--zk-4lw-commands-whitelist", "mntr", "--snapshot-count", "100"]
        c.start()
        try:
            def figures(i):
                out = zkref.four_letter("127.0.0.1", ports[i], b"mntr")
                m = dict(ln.split("\t") for ln in out[:-1].split("\n"))
                return int(m["zk_znode_count"]), int(m["zk_approximate_data_size"])

            leader = c.leader_index()
            lag = [i for i in range(3) if i != leader][0]
            c.kill(lag, signal.SIGTERM)
            zk = KazooClient(hosts="127.0.0.1:%d" % ports[leader], timeout=10)
            zk.start(timeout=20)
            try:
                zk.create("/fig", b"")
                for lo in range(0, 40000, 1000):
                    t = zk.transaction()
                    for i in range(lo, lo + 1000):
                        t.create("/fig/n%05d" % i, b"%07d" % i)
                    t.commit()
                # more entries than the leader's log keeps (5000) after
                # its snapshots, one a message: the messages queued for the
                # stopped member (256 in flight) hold only the first ones,
                # so it needs a snapshot for the rest
                for i in range(7000):
                    zk.create("/fig/s%05d" % i, b"s")
            finally:
                zk.stop()
                zk.close()
            n = 1 + 40000 + 7000
            size = len("/fig") + 40000 * (len("/fig/n00000") + 7) + 7000 * (len("/fig/s00000") + 1)
            want = figures(leader)
            self.assertGreaterEqual(want[0], n + 2)
            self.assertGreaterEqual(want[1], size)
            c.restart(lag)
            wait_for(lambda: figures(lag) == want, timeout=60,
                     what="the restarted member's figures to be the leader's %s" % (want,))
            for i in range(3):
                self.assertEqual(figures(i), want, "member %d" % i)
            self.assertIn("applied snapshot", c.members[lag].log())
            self.assertGreaterEqual(c.members[lag].log().count("counted the tree's figures"), 2,
                                    "counted at start and again after the snapshot")
        finally:
            c.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
