"""The ZooKeeper face (docs/zookeeper.md): connect, session timeout
negotiation, ping, reconnect with the session's id and password, a wrong
password, closeSession, expiry, the connect refusals and the four-letter
words; the operations (every create mode, versions, ZooKeeper's errors,
multi, ACLs with digest auth, the Stat's fields, FIFO order of pipelined
requests, multiRead), over the raw jute protocol, with kazoo and zkCli.

TARGET=quorum (default) runs it against quorum started with
--listen-zk-urls; TARGET=zookeeper against Apache ZooKeeper 3.8 (Debian's
zookeeper package, standalone, tickTime 2000), which proves every
expectation. One server per run (the JVM starts slowly)."""
import os
import re
import socket
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, stop_and_clean, wait_for  # noqa: E402
import zkref  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
SERVER = None  # (host, port) of the ZooKeeper port under test
QUORUM = None  # the quorum Server (TARGET=quorum)
LINGER = None  # a connection left open until the member stops
# the four-letter words allowed (ZooKeeper's 4lw.commands.whitelist, as
# both read it: blanks around a word do not count; srvr always runs)
WHITELIST = "ruok, stat,mntr ,conf,cons,wchs,envi,isro,srst,crst,dirs,wchc,wchp,dump,gtmk,stmk"
# how often containers and TTL nodes are swept (ZooKeeper's
# znode.container.checkIntervalMs, quorum's --zk-container-check-interval)
SWEEP_MS = 1000


def setUpModule():
    global SERVER, QUORUM, ZK
    if TARGET == "zookeeper":
        if not zkref.available():
            raise unittest.SkipTest("zookeeper not installed (apt-get install zookeeper)")
        ZK = zkref.ZooKeeper(extra_cfg="4lw.commands.whitelist=%s\n" % WHITELIST,
                             jvm_props=["-Dznode.container.checkIntervalMs=%d" % SWEEP_MS]).start()
        SERVER = ("127.0.0.1", ZK.port)
    else:
        port = free_port()
        QUORUM = Server("quorum", extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port,
                                              "--zk-4lw-commands-whitelist", WHITELIST,
                                              "--zk-container-check-interval",
                                              "%dms" % SWEEP_MS])
        QUORUM.start()
        SERVER = ("127.0.0.1", port)
        # a client still connected when the member stops (tearDownModule):
        # the stop must be clean (exit 0, no sanitizer report)
        global LINGER
        LINGER = Raw()
        LINGER.connect()
        LINGER.send_packet(struct.pack(">ii", -2, 11))


def tearDownModule():
    if TARGET == "zookeeper":
        ZK.stop()
    elif QUORUM is not None:
        try:
            stop_and_clean(QUORUM)
        finally:
            LINGER.close()


# ---- a raw jute client: just enough of the protocol to see the bytes ----

def jstr(b):
    return struct.pack(">i", len(b)) + b


class Raw:
    def __init__(self, timeout=10.0):
        self.s = socket.create_connection(SERVER, timeout)
        self.buf = b""

    def close(self):
        self.s.close()

    def send_packet(self, body):
        self.s.sendall(struct.pack(">i", len(body)) + body)

    def recv_packet(self):
        """One packet's body, or None when the server closed the connection."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">i", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    p, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return p
            try:
                b = self.s.recv(65536)
            except ConnectionResetError:
                b = b""
            if not b:
                return None
            self.buf += b

    def closed_by_server(self):
        """True when the server closes the connection without sending more."""
        return self.recv_packet() is None

    def connect(self, timeout_ms=30000, session=0, passwd=b"\0" * 16, last_zxid=0):
        self.send_packet(struct.pack(">iqiq", 0, last_zxid, timeout_ms, session) + jstr(passwd)
                         + b"\0")
        p = self.recv_packet()
        if p is None:
            return None
        proto, to, sid = struct.unpack(">iiq", p[:16])
        plen = struct.unpack(">i", p[16:20])[0]
        pw = p[20:20 + plen]
        ro = p[20 + plen:21 + plen]
        return {"timeout": to, "session": sid, "passwd": pw, "readonly": ro, "protocol": proto}

    def request(self, xid, op, body=b""):
        self.send_packet(struct.pack(">ii", xid, op) + body)
        p = self.recv_packet()
        if p is None:
            return None
        x, zxid, err = struct.unpack(">iqi", p[:16])
        return {"xid": x, "zxid": zxid, "err": err, "body": p[16:]}


def four(word):
    return zkref.four_letter(SERVER[0], SERVER[1], word)


def front_loops():
    """quorum answers some reads on its front loops (docs/zookeeper.md):
    whether the member under test has any (not with --front-loops=0)."""
    return TARGET == "quorum" and \
        "serving clients on the core loop" not in QUORUM.log_tail(n=1 << 30)


def front_reads():
    """quorum_zk_front_loop_reads_total of the member under test (0 for ZooKeeper)."""
    if TARGET != "quorum":
        return 0
    import urllib.request
    with urllib.request.urlopen("http://%s/metrics" % QUORUM.endpoint, timeout=10) as f:
        for line in f.read().decode().splitlines():
            if line.startswith("quorum_zk_front_loop_reads_total "):
                return int(float(line.split()[1]))
    raise AssertionError("no quorum_zk_front_loop_reads_total in /metrics")


class Session(unittest.TestCase):
    def test_new_session_and_timeout_negotiation(self):
        # ZooKeeper 3.8: the asked timeout clamped to [2, 20] x tickTime
        for asked, want in ((100000, 40000), (1000, 4000), (12345, 12345)):
            c = Raw()
            r = c.connect(timeout_ms=asked)
            self.assertIsNotNone(r)
            self.assertEqual(r["timeout"], want, asked)
            self.assertNotEqual(r["session"], 0)
            self.assertEqual(len(r["passwd"]), 16)
            self.assertEqual(r["readonly"], b"\0")
            self.assertEqual(r["protocol"], 0)
            c.close()

    def test_ping(self):
        c = Raw()
        c.connect()
        for _ in range(3):
            r = c.request(-2, 11)
            self.assertEqual((r["xid"], r["err"], r["body"]), (-2, 0, b""))
        c.close()

    def test_reconnect_keeps_session_wrong_password_expires(self):
        c = Raw()
        r = c.connect(timeout_ms=30000)
        sid, pw = r["session"], r["passwd"]
        c.close()
        d = Raw()
        r2 = d.connect(timeout_ms=30000, session=sid, passwd=pw)
        self.assertEqual(r2["session"], sid)
        self.assertEqual(r2["passwd"], pw)
        self.assertEqual(r2["timeout"], 30000)
        self.assertEqual(d.request(-2, 11)["err"], 0)
        # the session moved: its older connection to this server is closed
        old = Raw()
        old.connect(timeout_ms=30000, session=sid, passwd=pw)
        newer = Raw()
        newer.connect(timeout_ms=30000, session=sid, passwd=pw)
        self.assertTrue(old.closed_by_server())
        self.assertEqual(newer.request(-2, 11)["err"], 0)
        old.close()
        newer.close()
        d.close()
        if QUORUM is not None:
            # quorum keeps the session's first timeout (its lease's TTL)
            # where ZooKeeper would negotiate the new ask
            e2 = Raw()
            self.assertEqual(e2.connect(timeout_ms=10000, session=sid, passwd=pw)["timeout"],
                             30000)
            e2.close()
        # a wrong password: answered as an expired session, then closed
        e = Raw()
        bad = bytes([pw[0] ^ 1]) + pw[1:]
        r3 = e.connect(timeout_ms=30000, session=sid, passwd=bad)
        self.assertEqual(r3["timeout"], 0)
        self.assertTrue(e.closed_by_server())
        e.close()
        # an id that never existed: the same
        f = Raw()
        r4 = f.connect(timeout_ms=30000, session=0x1234567, passwd=pw)
        self.assertEqual(r4["timeout"], 0)
        self.assertTrue(f.closed_by_server())
        f.close()

    def test_close_session(self):
        c = Raw()
        r = c.connect()
        sid, pw = r["session"], r["passwd"]
        if QUORUM is not None:
            # a session is a lease (docs/zookeeper.md)
            self.assertIn("%x" % sid, QUORUM.etcdctl("lease", "list").stdout)
        rep = c.request(7, -11)
        self.assertEqual((rep["xid"], rep["err"]), (7, 0))
        self.assertTrue(c.closed_by_server())
        c.close()
        if QUORUM is not None:
            self.assertNotIn("%x" % sid, QUORUM.etcdctl("lease", "list").stdout)
        d = Raw()
        self.assertEqual(d.connect(session=sid, passwd=pw)["timeout"], 0)
        d.close()

    def test_expiry(self):
        c = Raw()
        r = c.connect(timeout_ms=4000)
        sid, pw = r["session"], r["passwd"]
        c.close()  # gone without closeSession: the session expires by itself

        def expired():
            d = Raw()
            try:
                got = d.connect(timeout_ms=4000, session=sid, passwd=pw)
                return got is not None and got["timeout"] == 0
            finally:
                d.close()
        # each reconnect renews a live session, so poll less often than the
        # session timeout; ZooKeeper expires within about two ticks of it
        deadline = time.time() + 30
        while time.time() < deadline:
            time.sleep(5)
            if expired():
                return
        self.fail("session 0x%x not expired" % sid)

    def test_session_kept_alive_by_pings(self):
        c = Raw()
        r = c.connect(timeout_ms=4000)
        end = time.time() + 9  # more than twice the timeout
        while time.time() < end:
            self.assertEqual(c.request(-2, 11)["err"], 0)
            time.sleep(1)
        d = Raw()
        self.assertEqual(d.connect(timeout_ms=4000, session=r["session"],
                                   passwd=r["passwd"])["session"], r["session"])
        d.close()
        c.close()


    def test_session_kept_alive_by_reads(self):
        # a client busy with reads sends no pings (ZooKeeper's clients ping
        # only when idle): its reads alone keep the session. On quorum most
        # are answered on a front loop, without the core (the counter says
        # so), and the session lives on what the front loop reports
        c = Raw()
        r = c.connect(timeout_ms=4000)
        before = front_reads()
        end = time.time() + 9  # more than twice the timeout
        n = 0
        while time.time() < end:
            self.assertEqual(c.request(n, 3, jpath("/") + b"\0")["err"], 0)  # exists
            n += 1
            time.sleep(0.02)
        if front_loops():
            self.assertGreater(front_reads() - before, n // 2)
        d = Raw()
        self.assertEqual(d.connect(timeout_ms=4000, session=r["session"],
                                   passwd=r["passwd"])["session"], r["session"])
        d.close()
        c.close()


class Refusals(unittest.TestCase):
    def test_client_ahead_of_server(self):
        # a client that has seen a newer zxid than the server's must try
        # another server: the connection closes without an answer
        c = Raw()
        self.assertIsNone(c.connect(last_zxid=1 << 50))
        c.close()

    def test_packet_over_jute_maxbuffer(self):
        c = Raw()
        c.connect()
        c.s.sendall(struct.pack(">i", 1048576) + b"\0" * 1024)
        self.assertTrue(c.closed_by_server())
        c.close()

    def test_garbage_requests_never_stop_the_server(self):
        """Seeded random bodies behind valid headers of every op type, one
        connection each: answered or closed, and the server still serves."""
        import random
        rng = random.Random(1234)
        types = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                 100, 101, 102, 103, 104, 105, 106, 107, 999, -11, -10, 0]
        for i in range(120):
            c = Raw(timeout=10)
            if c.connect() is None:
                c.close()
                continue
            t = types[i % len(types)]
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
            if rng.random() < 0.5:
                # a plausible start: a path, then garbage
                body = jpath("/g%d" % i) + body
            try:
                c.send_packet(struct.pack(">ii", i + 1, t) + body)
                c.recv_packet()
            except OSError:
                pass
            c.close()
        self.assertTrue(four(b"srvr").startswith("Zookeeper version"))
        c = Raw()
        self.assertIsNotNone(c.connect())
        self.assertEqual(c.request(-2, 11)["err"], 0)
        c.close()

    def test_what_clients_never_send(self):
        """ZooKeeper 3.8's answers to requests its clients never send: a
        body it cannot read (cut short, an op a multi may not hold, a null
        path where one is looked up) is MARSHALLINGERROR on a connection
        that goes on; an unknown type is UNIMPLEMENTED and the connection
        closes; a client's deleteContainer is BADARGUMENTS; "" reads the
        root; addWatch takes any path."""
        null = struct.pack(">i", -1)
        end = struct.pack(">i?i", -1, True, -1)
        kept = [
            ("exists cut short", 3, jpath("/"), -5),
            ("multi holding a sync", 14, struct.pack(">i?i", 9, False, -1) + jpath("/") + end, -5),
            ("createSession", -10, b"", -5),
            ("deleteContainer", 20, jpath("/zookeeper") + struct.pack(">i", -1), -8),
            ("exists of null", 3, null + b"\0", -5),
            ("create of null", 1, null + jstr(b"") + OPEN_ACL + struct.pack(">i", 0), -5),
            ("setData of null", 5, null + jstr(b"") + struct.pack(">i", -1), -8),
            ("check of null in a multi", 14,
             struct.pack(">i?i", 13, False, -1) + null + struct.pack(">i", -1) + end, -5),
            ("getData of the empty path", 4, jpath("") + b"\0", 0),
            ("getACL of the empty path", 6, jpath(""), 0),
            ("addWatch of a path without a slash", 106, jpath("noslash") + struct.pack(">i", 1), 0),
            ("addWatch of null", 106, null + struct.pack(">i", 0), 0),
        ]
        for i, (what, op, body, want) in enumerate(kept):
            c = Raw()
            c.connect()
            r = c.request(i + 1, op, body)
            self.assertIsNotNone(r, what)
            self.assertEqual(r["err"], want, what)
            self.assertEqual(c.request(100, 11)["err"], 0, what + ": the connection goes on")
            c.close()
        c = Raw()
        c.connect()
        self.assertEqual(c.request(1, 106, jpath("noslash") + struct.pack(">i", 0))["err"], 0)
        self.assertEqual(c.request(2, 18, jpath("noslash") + struct.pack(">i", 3))["err"], 0)
        # removeWatches of a null path names no watch: the others stay
        self.assertEqual(c.request(3, 106, jpath("/zookeeper") + struct.pack(">i", 0))["err"], 0)
        self.assertEqual(c.request(4, 18, null + struct.pack(">i", 3))["err"], -121)
        self.assertEqual(c.request(5, 17, jpath("/zookeeper") + struct.pack(">i", 3))["err"], 0)
        # a SASL token, where no SASL server runs: OK, zxid 0, a null token
        r = c.request(6, 102, jstr(b"token"))
        self.assertEqual((r["err"], r["zxid"], r["body"]), (0, 0, null))
        self.assertEqual(c.request(7, 99)["err"], -6)
        self.assertTrue(c.closed_by_server(), "an unknown type closes the connection")
        c.close()
        c = Raw()
        c.connect()
        c.send_packet(struct.pack(">ii", 1, 102) + null)
        self.assertTrue(c.closed_by_server(), "a null SASL token closes the connection")
        c.close()

    def test_negative_length(self):
        c = Raw()
        c.s.sendall(struct.pack(">i", -5))
        self.assertTrue(c.closed_by_server())
        c.close()


class FourLetterWords(unittest.TestCase):
    def test_srvr_always_runs(self):
        out = four(b"srvr")
        self.assertTrue(out.startswith("Zookeeper version: 3.8."), out)
        for field in ("Latency min/avg/max:", "Received:", "Sent:", "Connections:",
                      "Outstanding:", "Zxid: 0x", "Mode: standalone\n", "Node count:"):
            self.assertIn(field, out)

    def test_others_only_when_whitelisted(self):
        for w in (b"hash",):
            self.assertEqual(four(w), "%s is not executed because it is not in the whitelist.\n"
                             % w.decode())
        self.assertEqual(four(b"ruok"), "imok")
        self.assertEqual(four(b"isro"), "rw")

    def test_stat_and_cons_list_the_connections(self):
        from kazoo.client import KazooClient
        zk = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        zk.start(timeout=15)
        try:
            zk.exists("/")
            out = four(b"stat")
            head, rest = out.split("Clients:\n", 1)
            self.assertTrue(head.startswith("Zookeeper version: 3.8."), out)
            clients, stats = rest.split("\n\n", 1)
            lines = clients.split("\n")
            self.assertGreaterEqual(len(lines), 2, out)  # the kazoo client and this one
            for ln in lines:
                self.assertRegex(ln, r"^ /127\.0\.0\.1:\d+\[[01]\]\(queued=\d+,recved=\d+,"
                                     r"sent=\d+\)$")
            self.assertTrue(stats.startswith("Latency min/avg/max: "), out)
            self.assertIn("Mode: standalone\nNode count: ", stats)
            out = four(b"cons")
            self.assertTrue(out.endswith("\n\n"), out)
            sid = ",sid=0x%x," % zk.client_id[0]
            mine = [ln for ln in out.split("\n") if sid in ln]
            self.assertEqual(len(mine), 1, out)
            self.assertRegex(mine[0], r"^ /127\.0\.0\.1:\d+\[1\]\(queued=\d+,recved=\d+,sent=\d+"
                                      r",sid=0x[0-9a-f]+,lop=[A-Z]+,est=\d+,to=10000,"
                                      r"lcxid=0x[0-9a-f]+,lzxid=0x[0-9a-f]+,lresp=\d+,llat=\d+,"
                                      r"minlat=\d+,avglat=\d+,maxlat=\d+\)$")
        finally:
            zk.stop()
            zk.close()

    def test_mntr_keys_tab_separated(self):
        out = four(b"mntr")
        self.assertTrue(out.endswith("\n"))
        vals = {}
        for ln in out[:-1].split("\n"):
            k, v = ln.split("\t")
            self.assertTrue(k.startswith("zk_"), ln)
            vals[k] = v
        self.assertTrue(vals["zk_version"].startswith("3.8."), out)
        self.assertEqual(vals["zk_server_state"], "standalone")
        for k in ("zk_avg_latency", "zk_max_latency", "zk_min_latency", "zk_packets_received",
                  "zk_packets_sent", "zk_num_alive_connections", "zk_outstanding_requests",
                  "zk_znode_count", "zk_watch_count", "zk_ephemerals_count",
                  "zk_approximate_data_size", "zk_open_file_descriptor_count",
                  "zk_max_file_descriptor_count", "zk_uptime", "zk_global_sessions"):
            self.assertGreaterEqual(float(vals[k]), 0, k)
        self.assertGreaterEqual(int(vals["zk_num_alive_connections"]), 1)
        self.assertGreater(int(vals["zk_open_file_descriptor_count"]), 0)

    def test_mntr_counts_the_tree_and_the_latencies(self):
        """zk_znode_count, zk_ephemerals_count, zk_global_sessions and
        zk_approximate_data_size (each node's path and data lengths) move
        by what a session adds and takes away; srvr's Node count is
        mntr's; latencies are whole ms, the average a decimal. Sessions of
        earlier tests may still be expiring: the measure is taken again
        until nothing else moved."""
        import re
        from kazoo.client import KazooClient

        def mntr():
            return dict(ln.split("\t") for ln in four(b"mntr")[:-1].split("\n"))

        def figures(m):
            return [int(m[k]) for k in ("zk_znode_count", "zk_ephemerals_count",
                                        "zk_global_sessions", "zk_approximate_data_size")]

        base = "/mntr%d" % os.getpid()
        want = None
        for attempt in range(6):
            before = figures(mntr())
            zk = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
            zk.start(timeout=15)
            try:
                zk.create(base, b"12345")
                zk.create(base + "/a", b"x" * 100)
                zk.create(base + "/e", b"xyz", ephemeral=True)
                for _ in range(20):
                    zk.get(base)
                during = figures(mntr())
                m = mntr()
                srvr = four(b"srvr")
                zk.delete(base, recursive=True)
            finally:
                zk.stop()
                zk.close()
            after = figures(mntr())
            size = (len(base) + 5) + (len(base) + 2 + 100) + (len(base) + 2 + 3)
            want = [before[0] + 3, before[1] + 1, before[2] + 1, before[3] + size]
            if during == want and after == before:
                break
            time.sleep(2)
        self.assertEqual(during, want)
        self.assertEqual(after, before)
        self.assertIn("Node count: %d\n" % want[0], srvr)
        lat = re.search(r"Latency min/avg/max: (\d+)/(\d+\.\d+)/(\d+)\n", srvr)
        self.assertIsNotNone(lat, srvr)
        self.assertLessEqual(int(lat.group(1)), int(lat.group(3)))
        self.assertRegex(m["zk_avg_latency"], r"^\d+\.\d+$")
        self.assertLessEqual(int(m["zk_min_latency"]), int(m["zk_max_latency"]))
        self.assertLessEqual(float(m["zk_avg_latency"]), float(m["zk_max_latency"]))

    def test_mntr_figures_of_a_big_tree(self):
        """zk_znode_count and zk_approximate_data_size stay exact for a
        tree of 40,000 znodes (each node's path and data lengths; quorum
        keeps them as the tree changes rather than walking it, which it
        once gave up on past about 32,000 znodes and showed -1)."""
        from kazoo.client import KazooClient
        zk = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        zk.start(timeout=15)

        def figures():
            m = dict(ln.split("\t") for ln in four(b"mntr")[:-1].split("\n"))
            return int(m["zk_znode_count"]), int(m["zk_approximate_data_size"])

        base = "/bigtree%d" % os.getpid()
        n, per = 40000, 1000
        try:
            size = len(base) + 3
            for attempt in range(4):
                before = figures()
                zk.create(base, b"top")
                for lo in range(0, n, per):
                    t = zk.transaction()
                    for i in range(lo, lo + per):
                        t.create("%s/n%05d" % (base, i), b"%07d" % i)
                    self.assertTrue(all(r.startswith(base) for r in t.commit()))
                during = figures()
                for lo in range(0, n, per):
                    t = zk.transaction()
                    for i in range(lo, lo + per):
                        t.delete("%s/n%05d" % (base, i))
                    t.commit()
                zk.delete(base)
                after = figures()
                want = (before[0] + n + 1,
                        before[1] + size + n * (len(base) + len("/n00000") + 7))
                if during == want and after == before:
                    break
                time.sleep(2)  # sessions of earlier tests still expiring
            self.assertEqual(during, want)
            self.assertEqual(after, before)
        finally:
            zk.stop()
            zk.close()

    def test_dirs_and_the_trace_mask(self):
        self.assertRegex(four(b"dirs"), r"^datadir_size: \d+\nlogdir_size: \d+\n$")

        def stmk(mask):
            return four(b"stmk" + struct.pack(">q", mask))
        self.assertEqual(four(b"gtmk"), "306")
        try:
            self.assertEqual(stmk(123), "123")
            self.assertEqual(four(b"gtmk"), "123")
        finally:
            self.assertEqual(stmk(306), "306")

    def test_dump_wchc_and_wchp_list_sessions_watches_and_ephemerals(self):
        """wchc (data-side watches by session), wchp (by path) and dump
        (sessions by expiry, their ephemerals, the connections) in
        ZooKeeper's layouts. ZooKeeper lists in its hash maps' order:
        compared as sets, and only for this test's sessions."""
        import re
        from kazoo.client import KazooClient

        def blocks(text, head):
            """'head\n\titem\n...' blocks into {head: {items}}"""
            out, cur = {}, None
            for ln in text.split("\n"):
                if ln.startswith("\t") and cur is not None:
                    out[cur].add(ln[1:])
                elif re.fullmatch(head, ln):
                    cur = ln.rstrip(":")
                    out.setdefault(cur, set())
                else:
                    cur = None
            return out

        a = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        b = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        a.start(timeout=15)
        b.start(timeout=15)
        base = "/dump%d" % os.getpid()
        try:
            a.create(base, b"x")
            a.create(base + "/a", b"", ephemeral=True)
            a.create(base + "/b", b"", ephemeral=True)
            b.create(base + "/c", b"", ephemeral=True)
            a.get(base, watch=lambda e: None)
            a.exists(base + "/none", watch=lambda e: None)
            a.get_children(base, watch=lambda e: None)  # a child watch: not listed
            b.get(base, watch=lambda e: None)
            sa, sb = "0x%x" % a.client_id[0], "0x%x" % b.client_id[0]

            wchc = blocks(four(b"wchc"), r"0x[0-9a-f]+")
            self.assertEqual(wchc.get(sa), {base, base + "/none"})
            self.assertEqual(wchc.get(sb), {base})
            wchp = blocks(four(b"wchp"), r"/.*")
            self.assertEqual(wchp.get(base, set()) & {sa, sb}, {sa, sb})
            self.assertEqual(wchp.get(base + "/none", set()) & {sa, sb}, {sa})

            dump = four(b"dump")
            m = re.match(r"SessionTracker dump:\nSession Sets \((\d+)\)/\((\d+)\):\n", dump)
            self.assertIsNotNone(m, dump)
            sessions, rest = dump.split("ephemeral nodes dump:\n", 1)
            eph, conns = rest.split("Connections dump:\n", 1)
            self.assertIn("\t%s\n" % sa, sessions)
            self.assertIn("\t%s\n" % sb, sessions)
            for expiry in re.findall(r"\n(\d+) expire at (.+):\n", sessions):
                self.assertRegex(expiry[1], r"^\w{3} \w{3} \d\d \d\d:\d\d:\d\d \w+ \d{4}$")
            self.assertRegex(eph, r"^Sessions with Ephemerals \(\d+\):\n")
            e = blocks(eph, r"0x[0-9a-f]+:")
            self.assertEqual(e.get(sa), {base + "/a", base + "/b"})
            self.assertEqual(e.get(sb), {base + "/c"})
            self.assertRegex(conns, r"^Connections Sets \(\d+\)/\(\d+\):\n")
            for sid in (sa, sb):
                self.assertRegex(conns, r"\tip: /127\.0\.0\.1:\d+ sessionId: %s\n" % sid)
        finally:
            a.delete(base, recursive=True)
            a.stop()
            a.close()
            b.stop()
            b.close()

    def test_srst_and_crst_reset_the_counts(self):
        import re
        from kazoo.client import KazooClient
        zk = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        zk.start(timeout=15)
        try:
            for _ in range(30):
                zk.exists("/")
            self.assertEqual(four(b"srst"), "Server stats reset.\n")
            out = four(b"srvr")
            # no request was answered since (ZooKeeper counts the
            # four-letter words' own packets: 1, where quorum shows 0)
            self.assertIn("Latency min/avg/max: 0/0.0/0\n", out)
            for field in ("Received", "Sent"):
                n = int(re.search(r"%s: (\d+)\n" % field, out).group(1))
                self.assertLess(n, 5, out)
            sid = ",sid=0x%x," % zk.client_id[0]
            mine = [ln for ln in four(b"cons").split("\n") if sid in ln]
            self.assertRegex(mine[0], r"recved=(\d\d+),")
            self.assertEqual(four(b"crst"), "Connection stats reset.\n")
            mine = [ln for ln in four(b"cons").split("\n") if sid in ln]
            self.assertEqual(len(mine), 1)
            self.assertIn("(queued=0,recved=0,sent=0,", mine[0])
            self.assertIn(",lop=NA,", mine[0])
            self.assertIn(",llat=0,minlat=0,avglat=0,maxlat=0)", mine[0])
        finally:
            zk.stop()
            zk.close()

    def test_conf_and_envi(self):
        conf = dict(ln.split("=", 1) for ln in four(b"conf").splitlines())
        self.assertEqual(conf["clientPort"], str(SERVER[1]))
        self.assertEqual(conf["tickTime"], "2000")
        self.assertEqual(conf["minSessionTimeout"], "4000")
        self.assertEqual(conf["maxSessionTimeout"], "40000")
        for k in ("secureClientPort", "dataDir", "dataLogDir", "serverId"):
            self.assertIn(k, conf)
        out = four(b"envi")
        self.assertTrue(out.startswith("Environment:\nzookeeper.version=3.8."), out)
        env = dict(ln.split("=", 1) for ln in out.splitlines()[1:])
        self.assertEqual(env["os.name"], "Linux")
        for k in ("host.name", "os.arch", "os.version", "user.name", "user.dir"):
            self.assertIn(k, env)
        # as Java sets them: the password entry's user, Java's machine name
        import platform
        import pwd
        self.assertEqual(env["user.name"], pwd.getpwuid(os.geteuid()).pw_name)
        self.assertEqual(env["os.arch"], {"x86_64": "amd64"}.get(platform.machine(),
                                                                 platform.machine()))

    def test_wchs_counts_data_watches(self):
        import re
        from kazoo.client import KazooClient

        def wchs():
            m = re.fullmatch(r"(\d+) connections watching (\d+) paths\nTotal watches:(\d+)\n",
                             four(b"wchs"))
            self.assertIsNotNone(m)
            return tuple(int(x) for x in m.groups())
        base = wchs()
        a = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        b = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
        a.start(timeout=15)
        b.start(timeout=15)
        try:
            # data-side watches count (exist and data ones), child ones do not
            a.exists("/wchs-none", watch=lambda e: None)
            a.get_children("/", watch=lambda e: None)
            b.exists("/wchs-none", watch=lambda e: None)
            b.get("/", watch=lambda e: None)
            got = wchs()
            self.assertEqual((got[0] - base[0], got[1] - base[1], got[2] - base[2]), (2, 2, 3))
        finally:
            a.stop()
            a.close()
            b.stop()
            b.close()
        wait_for(lambda: wchs() == base, 20, what="the watches gone with their sessions")


class Kazoo(unittest.TestCase):
    def test_start_stop_and_reconnect_with_client_id(self):
        from kazoo.client import KazooClient, KazooState
        hosts = "%s:%d" % SERVER
        zk = KazooClient(hosts=hosts, timeout=10)
        zk.start(timeout=15)
        sid, pw = zk.client_id
        self.assertNotEqual(sid, 0)
        zk2 = KazooClient(hosts=hosts, client_id=(sid, pw), timeout=10)
        zk2.start(timeout=15)
        self.assertEqual(zk2.client_id[0], sid)
        zk2.stop()  # closeSession: the session ends for both
        zk2.close()
        states = []
        zk.add_listener(states.append)
        wait_for(lambda: KazooState.LOST in states or zk.client_id[0] != sid, 30,
                 what="kazoo notices its session closed elsewhere")
        zk.stop()
        zk.close()


def jpath(p):
    return jstr(p.encode())


def unpack_stat(b):
    f = struct.unpack(">qqqqiiiqiiq", b[:68])
    keys = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
            "ephemeralOwner", "dataLength", "numChildren", "pzxid")
    return dict(zip(keys, f))


def kz():
    from kazoo.client import KazooClient
    c = KazooClient(hosts="%s:%d" % SERVER, timeout=10)
    c.start(timeout=15)
    return c


def err_name(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return "ok"


class Operations(unittest.TestCase):
    def test_kazoo_operations_and_errors(self):
        zk = kz()
        try:
            zk.ensure_path("/ops/b")
            self.assertEqual(zk.create("/ops/b/c", b"hello"), "/ops/b/c")
            self.assertEqual(zk.create("/ops/seq-", b"", sequence=True), "/ops/seq-0000000001")
            self.assertEqual(zk.create("/ops/seq-", b"", sequence=True), "/ops/seq-0000000002")
            self.assertEqual(zk.create("/ops/eph", b"x", ephemeral=True), "/ops/eph")
            d, st = zk.get("/ops/b/c")
            self.assertEqual((d, st.version, st.dataLength, st.numChildren), (b"hello", 0, 5, 0))
            self.assertEqual(zk.set("/ops/b/c", b"world", version=0).version, 1)
            self.assertEqual(err_name(lambda: zk.set("/ops/b/c", b"x", version=0)),
                             "BadVersionError")
            self.assertEqual(sorted(zk.get_children("/ops")),
                             ["b", "eph", "seq-0000000001", "seq-0000000002"])
            st = zk.exists("/ops")
            self.assertEqual((st.numChildren, st.cversion), (4, 4))
            self.assertIsNone(zk.exists("/nope"))
            self.assertEqual(err_name(lambda: zk.delete("/ops")), "NotEmptyError")
            self.assertEqual(err_name(lambda: zk.create("/ops/eph/x", b"")),
                             "NoChildrenForEphemeralsError")
            self.assertEqual(err_name(lambda: zk.create("/x/y", b"")), "NoNodeError")
            self.assertEqual(err_name(lambda: zk.create("/ops/b/c", b"")), "NodeExistsError")
            self.assertEqual(err_name(lambda: zk.delete("/ops/b/c", version=7)),
                             "BadVersionError")
            self.assertEqual(err_name(lambda: zk.get("/ops/none")), "NoNodeError")
            # a deleted node's name is free again; sequence numbers go on,
            # counting the children created (ZooKeeper 3.8: not cversion,
            # which deletes advance too)
            zk.delete("/ops/seq-0000000001")
            self.assertEqual(zk.exists("/ops").cversion, 5)
            self.assertEqual(zk.create("/ops/seq-", b"", sequence=True), "/ops/seq-0000000004")
            zk.delete("/ops/eph")
            self.assertEqual(zk.create("/ops/seq-", b"", sequence=True), "/ops/seq-0000000005")
            zk.delete("/ops", recursive=True)
            self.assertIsNone(zk.exists("/ops"))
        finally:
            zk.stop()
            zk.close()

    def test_multi_atomic(self):
        zk = kz()
        try:
            zk.create("/m", b"0")
            t = zk.transaction()
            t.create("/m/t1", b"1")
            t.check("/m", 0)
            t.set_data("/m", b"v")
            t.delete("/m/t1")
            r = t.commit()
            self.assertEqual(r[0], "/m/t1")
            self.assertEqual((r[1], r[3]), (True, True))
            self.assertEqual(r[2].version, 1)
            # one zxid for the whole multi
            self.assertEqual(zk.exists("/m").mzxid, r[2].mzxid)
            t = zk.transaction()
            t.create("/m/t2", b"1")
            t.create("/m", b"dup")
            t.create("/m/t3", b"")
            r = t.commit()
            self.assertEqual([type(x).__name__ for x in r],
                             ["RolledBackError", "NodeExistsError", "RuntimeInconsistency"])
            self.assertIsNone(zk.exists("/m/t2"))
            self.assertEqual(zk.get("/m")[0], b"v")
            zk.delete("/m", recursive=True)
        finally:
            zk.stop()
            zk.close()

    def test_acls_and_digest_auth(self):
        from kazoo.security import make_digest_acl
        zk = kz()
        other = kz()
        try:
            zk.add_auth("digest", "user:pw")
            zk.create("/secret", b"s", acl=[make_digest_acl("user", "pw", all=True)])
            acl = zk.get_acls("/secret")[0]
            self.assertEqual([(a.perms, a.id.scheme, a.id.id) for a in acl],
                             [(31, "digest", "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=")])
            self.assertEqual(err_name(lambda: other.get("/secret")), "NoAuthError")
            self.assertEqual(err_name(lambda: other.get_acls("/secret")), "NoAuthError")
            self.assertEqual(err_name(lambda: other.set("/secret", b"")), "NoAuthError")
            self.assertEqual(err_name(lambda: other.create("/secret/x", b"")), "NoAuthError")
            self.assertEqual(zk.get("/secret")[0], b"s")
            # read-only for everyone, all for the user
            zk.set_acls("/secret", [make_digest_acl("user", "pw", all=True),
                                    make_digest_acl("x", "y", read=True)])
            self.assertEqual(zk.get_acls("/secret")[1].aversion, 1)
            self.assertEqual(err_name(lambda: zk.set_acls("/secret", [], version=0)),
                             "InvalidACLError")
            from kazoo.security import ACL, Id
            self.assertEqual(err_name(lambda: zk.create("/bad", b"",
                                                        acl=[ACL(31, Id("world", "someone"))])),
                             "InvalidACLError")
            other.add_auth("digest", "x:y")
            self.assertEqual(other.get("/secret")[0], b"s")
            self.assertEqual(err_name(lambda: other.set("/secret", b"")), "NoAuthError")
            zk.delete("/secret")
        finally:
            zk.stop()
            zk.close()
            other.stop()
            other.close()

    def test_stat_fields(self):
        zk = kz()
        try:
            zk.create("/st", b"")
            p0 = zk.exists("/st")
            self.assertEqual((p0.czxid, p0.pzxid), (p0.mzxid, p0.czxid))
            self.assertEqual(p0.ephemeralOwner, 0)
            zk.create("/st/c", b"abc")
            c = zk.exists("/st/c")
            p1 = zk.exists("/st")
            self.assertGreater(c.czxid, p0.czxid)
            self.assertEqual(p1.pzxid, c.czxid)       # the last child change
            self.assertEqual(p1.mzxid, p0.mzxid)      # a child is not a data change
            self.assertEqual((p1.cversion, p1.numChildren), (1, 1))
            s2 = zk.set("/st/c", b"abcd")
            self.assertGreater(s2.mzxid, c.mzxid)
            self.assertEqual((s2.czxid, s2.ctime, s2.dataLength), (c.czxid, c.ctime, 4))
            self.assertGreaterEqual(s2.mtime, c.mtime)
            zk.create("/st/e", b"", ephemeral=True)
            self.assertEqual(zk.exists("/st/e").ephemeralOwner, zk.client_id[0])
            zk.delete("/st/c")
            p2 = zk.exists("/st")
            self.assertEqual((p2.cversion, p2.numChildren), (3, 1))
            self.assertGreater(p2.pzxid, p1.pzxid)
            zk.delete("/st", recursive=True)
        finally:
            zk.stop()
            zk.close()

    def test_ephemeral_goes_with_its_session(self):
        zk = kz()
        watcher = kz()
        try:
            watcher.create("/eph-parent", b"")
            zk.create("/eph-parent/owner", b"", ephemeral=True)
            ev = []
            self.assertIsNotNone(watcher.exists("/eph-parent/owner", watch=ev.append))
            kids = []
            watcher.get_children("/eph-parent", watch=kids.append)
            zk.stop()  # closeSession
            wait_for(lambda: watcher.exists("/eph-parent/owner") is None, 20,
                     what="the ephemeral gone with its session")
            wait_for(lambda: len(ev) == 1 and len(kids) == 1, 10, what="the watches fired")
            self.assertEqual((ev[0].type, kids[0].type), ("DELETED", "CHILD"))
            # the parent's child stat follows, so it can be deleted
            st = watcher.exists("/eph-parent")
            self.assertEqual((st.numChildren, st.cversion), (0, 2))
            watcher.delete("/eph-parent")
        finally:
            zk.close()
            watcher.stop()
            watcher.close()

    def test_ephemeral_goes_with_an_expired_session(self):
        watcher = kz()
        try:
            watcher.create("/exp-parent", b"")
            c = Raw()
            c.connect(timeout_ms=4000)
            acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
            r = c.request(1, 1, jpath("/exp-parent/e") + jstr(b"") + acl + struct.pack(">i", 1))
            self.assertEqual(r["err"], 0)
            c.close()  # no closeSession: it expires
            wait_for(lambda: watcher.exists("/exp-parent/e") is None, 30,
                     what="the ephemeral gone with its expired session")
            self.assertEqual(watcher.exists("/exp-parent").numChildren, 0)
            watcher.delete("/exp-parent")
        finally:
            watcher.stop()
            watcher.close()


class RootAndSystemNodes(unittest.TestCase):
    def test_root_and_zookeeper_nodes(self):
        zk = kz()
        try:
            zk.create("/warm", b"")
            ev = []
            zk.get("/", watch=ev.append)
            self.assertEqual(zk.set("/", b"rootdata").version, 1)
            wait_for(lambda: len(ev) == 1, 10, what="the data watch on /")
            self.assertEqual((ev[0].type, ev[0].path), ("CHANGED", "/"))
            d, st = zk.get("/")
            self.assertEqual((d, st.czxid), (b"rootdata", 0))
            self.assertIn("zookeeper", zk.get_children("/"))
            self.assertEqual(sorted(zk.get_children("/zookeeper"))[:2], ["config", "quota"])
            self.assertEqual(err_name(lambda: zk.delete("/zookeeper")), "BadArgumentsError")
            self.assertEqual(err_name(lambda: zk.delete("/")), "BadArgumentsError")
            self.assertEqual(err_name(lambda: zk.create("/", b"")), "NodeExistsError")
            self.assertEqual([(a.perms, a.id.scheme, a.id.id) for a in zk.get_acls("/")[0]],
                             [(31, "world", "anyone")])
            self.assertEqual(zk.sync("/nope"), "/nope")
            zk.set("/", b"")
            zk.delete("/warm")
        finally:
            zk.stop()
            zk.close()


class FreshStore(unittest.TestCase):
    """A server of its own, never written: the first client sees /zookeeper
    and its two children, as on a fresh ZooKeeper"""

    @classmethod
    def setUpClass(cls):
        if TARGET == "zookeeper":
            cls.zk = zkref.ZooKeeper(extra_cfg="4lw.commands.whitelist=mntr,srvr\n").start()
            cls.addr = ("127.0.0.1", cls.zk.port)
        else:
            port = free_port()
            cls.zk = Server("quorum", name="fresh",
                            extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port,
                                        "--zk-4lw-commands-whitelist", "mntr,srvr"])
            cls.zk.start()
            cls.addr = ("127.0.0.1", port)

    @classmethod
    def tearDownClass(cls):
        cls.zk.stop()
        if TARGET != "zookeeper":
            cls.zk.cleanup()

    def test_the_first_client_sees_the_system_nodes(self):
        from kazoo.client import KazooClient
        c = KazooClient(hosts="%s:%d" % self.addr, timeout=10)
        c.start(timeout=15)
        try:
            self.assertEqual(c.get_children("/"), ["zookeeper"])
            self.assertEqual(sorted(c.get_children("/zookeeper")), ["config", "quota"])
            self.assertEqual(c.exists("/zookeeper").numChildren, 2)
            self.assertEqual(c.exists("/").numChildren, 1)
            data, st = c.get("/zookeeper/config")
            self.assertEqual((data, st.aversion, st.ephemeralOwner), (b"", -1, 0))
            self.assertEqual(c.get("/zookeeper/quota")[0], b"")
            self.assertEqual(err_name(lambda: c.delete("/zookeeper/quota")), "BadArgumentsError")
            # "/" counted twice, as ZooKeeper's DataTree holds it
            mntr = dict(line.split("\t", 1) for line in
                        zkref.four_letter(self.addr[0], self.addr[1], b"mntr").splitlines() if "\t" in line)
            self.assertEqual(mntr["zk_znode_count"], "5")
            srvr = zkref.four_letter(self.addr[0], self.addr[1], b"srvr")
            self.assertIn("Node count: 5\n", srvr)
        finally:
            c.stop()
            c.close()


class EdgeCases(unittest.TestCase):
    def test_ip_acls_bad_acls_null_data_mixed_multis(self):
        from kazoo.security import ACL, Id
        zk = kz()
        try:
            zk.create("/ipn", b"d", acl=[ACL(1, Id("ip", "127.0.0.1"))])
            self.assertEqual(zk.get("/ipn")[0], b"d")
            self.assertEqual(err_name(lambda: zk.set("/ipn", b"x")), "NoAuthError")
            zk.create("/ipo", b"d", acl=[ACL(31, Id("ip", "10.0.0.0/8"))])
            self.assertEqual(err_name(lambda: zk.get("/ipo")), "NoAuthError")
            for acl in (Id("digest", "nocolon"), Id("sasl", "x"), Id("auth", "")):
                self.assertEqual(err_name(lambda: zk.create("/bad-acl", b"", acl=[ACL(31, acl)])),
                                 "InvalidACLError", acl)
        finally:
            zk.stop()
            zk.close()
        c = Raw()
        c.connect()
        world = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        # an invalid addWatch mode: MARSHALLINGERROR
        self.assertEqual(c.request(1, 106, jpath("/ipn") + struct.pack(">i", 2))["err"], -5)
        # null data stays null (length -1), its dataLength 0
        r = c.request(2, 1, jpath("/nulldata") + struct.pack(">i", -1) + world
                      + struct.pack(">i", 0))
        self.assertEqual(r["err"], 0)
        r = c.request(3, 4, jpath("/nulldata") + b"\0")
        self.assertEqual((r["err"], r["body"][:4]), (0, b"\xff\xff\xff\xff"))
        self.assertEqual(unpack_stat(r["body"][4:])["dataLength"], 0)
        # a read inside a multi, a write inside a multiRead: MARSHALLINGERROR
        done = struct.pack(">i?i", -1, True, -1)
        mr = struct.pack(">i?i", 4, False, -1) + jpath("/ipn") + b"\0" + done
        self.assertEqual(c.request(4, 14, mr)["err"], -5)
        mr = (struct.pack(">i?i", 4, False, -1) + jpath("/ipn") + b"\0"
              + struct.pack(">i?i", 2, False, -1) + jpath("/ipn") + struct.pack(">i", -1) + done)
        self.assertEqual(c.request(5, 22, mr)["err"], -5)
        self.assertIsNotNone(c.request(6, 3, jpath("/ipn") + b"\0"), "the connection stays")
        for p in ("/ipn", "/ipo", "/nulldata"):
            self.assertEqual(c.request(7, 2, jpath(p) + struct.pack(">i", -1))["err"], 0)
        c.close()


class AclAndCheckOrder(unittest.TestCase):
    """ZooKeeper 3.8's ACL rules and the order of its checks where a
    client can tell them apart (found by running the same probes against
    both servers)."""

    def acl(self, zk, path):
        a, st = zk.get_acls(path)
        return [(x.perms, x.id.scheme, x.id.id) for x in a], st.aversion

    def test_acl_ids_checked_and_duplicates_dropped(self):
        from kazoo.security import ACL, Id
        zk = kz()
        try:
            # ip: IPv4, a mask of 0-32; anything else is INVALIDACL (a bad
            # mask must not become "everyone")
            for ident in ("127.0.0.1/abc", "127.0.0.1/33", "127.0.0.1/-1", "127.0.0.1/",
                          "::1", "127.0.0.1/8/9"):
                self.assertEqual(err_name(lambda: zk.create("/acl-ip", b"d",
                                                            acl=[ACL(1, Id("ip", ident))])),
                                 "InvalidACLError", ident)
            zk.create("/acl-ip", b"d", acl=[ACL(1, Id("ip", "10.9.9.9/0"))])
            self.assertEqual(zk.get("/acl-ip")[0], b"d", "/0 takes every address")
            zk.delete("/acl-ip")
            # digest: two fields once split at ':' as Java splits
            for ident, want in (("user:", "InvalidACLError"), ("a::b", "InvalidACLError"),
                                ("a:b:", "ok"), (":h", "ok")):
                self.assertEqual(err_name(lambda: zk.create("/acl-dg", b"",
                                                            acl=[ACL(31, Id("digest", ident))])),
                                 want, ident)
                if want == "ok":
                    zk.delete("/acl-dg")
            world = ACL(31, Id("world", "anyone"))
            zk.create("/acl-dup", b"", acl=[world, world, ACL(1, Id("ip", "10.0.0.1")), world])
            self.assertEqual(self.acl(zk, "/acl-dup")[0],
                             [(31, "world", "anyone"), (1, "ip", "10.0.0.1")])
            zk.set_acls("/acl-dup", [world, world])
            self.assertEqual(self.acl(zk, "/acl-dup")[0], [(31, "world", "anyone")])
            zk.delete("/acl-dup")
            # a long list (quorum's apply hashes what it has seen)
            many = [ACL(1 + i % 2, Id("ip", "10.0.%d.%d" % (i // 250 % 250, i % 250)))
                    for i in range(3000)] * 5 + [world]
            zk.create("/acl-many", b"", acl=many)
            got = self.acl(zk, "/acl-many")[0]
            self.assertEqual(len(got), 3001)
            self.assertEqual(got[:2], [(1, "ip", "10.0.0.0"), (2, "ip", "10.0.0.1")])
            self.assertEqual(got[-1], (31, "world", "anyone"))
            zk.delete("/acl-many")
        finally:
            zk.stop()
            zk.close()

    def test_get_acl_without_admin_hides_digest_hashes(self):
        from kazoo.security import ACL, Id, make_digest_acl
        owner, other = kz(), kz()
        try:
            owner.add_auth("digest", "user:pw")
            owner.create("/acl-hash", b"", acl=[make_digest_acl("user", "pw", all=True),
                                                ACL(1, Id("world", "anyone"))])
            full = self.acl(owner, "/acl-hash")[0]
            self.assertEqual(full[0][:2], (31, "digest"))
            self.assertNotEqual(full[0][2], "user:x")
            self.assertEqual(self.acl(other, "/acl-hash")[0],
                             [(31, "digest", "user:x"), (1, "world", "anyone")])
            owner.delete("/acl-hash")
        finally:
            for c in (owner, other):
                c.stop()
                c.close()

    def test_check_and_get_all_children_number_need_read(self):
        from kazoo.security import ACL, Id
        zk = kz()
        try:
            zk.create("/acl-unread", b"s", acl=[ACL(31 & ~1, Id("world", "anyone"))])
            zk.create("/acl-unread/kid", b"")
            t = zk.transaction()
            t.check("/acl-unread", 0)
            t.create("/acl-after-check", b"")
            self.assertEqual([type(r).__name__ for r in t.commit()],
                             ["NoAuthError", "RuntimeInconsistency"])
            self.assertIsNone(zk.exists("/acl-after-check"), "nothing of the multi written")
            c = Raw()
            c.connect()
            self.assertEqual(c.request(1, 104, jpath("/acl-unread"))["err"], -102)
            self.assertEqual(c.request(2, 104, jpath("/acl-nothing"))["err"], -101)
            c.close()
            zk.delete("/acl-unread/kid")
            zk.delete("/acl-unread")
        finally:
            zk.stop()
            zk.close()

    def test_delete_and_set_acl_check_order(self):
        from kazoo.security import ACL, Id
        zk = kz()
        try:
            zk.create("/ord", b"")
            zk.create("/ord/nodel", b"", acl=[ACL(31 & ~8, Id("world", "anyone"))])
            # the parent's DELETE permission before the node itself
            self.assertEqual(err_name(lambda: zk.delete("/ord/nodel/nope")), "NoAuthError")
            self.assertEqual(err_name(lambda: zk.delete("/ord/none/nope")), "NoNodeError")
            # setACL: the new ACL before the node and its ADMIN permission
            bad = [ACL(31, Id("world", "someone"))]
            self.assertEqual(err_name(lambda: zk.set_acls("/ord/missing", bad)),
                             "InvalidACLError")
            zk.create("/ord/noadmin", b"", acl=[ACL(31 & ~16, Id("world", "anyone"))])
            self.assertEqual(err_name(lambda: zk.set_acls("/ord/noadmin", bad)),
                             "InvalidACLError")
            self.assertEqual(err_name(lambda: zk.set_acls("/ord/noadmin",
                                                          [ACL(31, Id("world", "anyone"))])),
                             "NoAuthError")
            zk.delete("/ord", recursive=True)
        finally:
            zk.stop()
            zk.close()

    def test_system_nodes_stay(self):
        zk = kz()
        try:
            zk.create("/sys-warm", b"")  # quorum makes /zookeeper with the first write
            self.assertEqual(self.acl(zk, "/zookeeper/config"), ([(1, "world", "anyone")], -1))
            self.assertEqual(err_name(lambda: zk.set("/zookeeper/config", b"x")), "NoAuthError")
            for p in ("/zookeeper/config", "/zookeeper/quota", "/zookeeper", "/"):
                self.assertEqual(err_name(lambda: zk.delete(p)), "BadArgumentsError", p)
            self.assertEqual(sorted(zk.get_children("/zookeeper"))[:2], ["config", "quota"])
            zk.delete("/sys-warm")
        finally:
            zk.stop()
            zk.close()

    def test_add_auth_ip_and_a_digest_without_colon(self):
        for scheme, cred in ((b"ip", b"whatever"), (b"digest", b"nocolon")):
            d = Raw()
            d.connect()
            d.send_packet(struct.pack(">ii", -4, 100) + struct.pack(">i", 0) + jstr(scheme)
                          + jstr(cred))
            p = d.recv_packet()
            self.assertIsNotNone(p, scheme)
            self.assertEqual(struct.unpack(">iqi", p[:16])[2], 0, scheme)
            r = d.request(9, 3, jpath("/") + b"\0")
            self.assertIsNotNone(r, "the connection stays")
            self.assertEqual(r["err"], 0)
            d.close()
        # the user of "nocolon" is all of it: a digest ACL naming it lets in
        # the connection that added it
        import base64
        import hashlib
        from kazoo.security import ACL, Id
        ident = "nocolon:" + base64.b64encode(hashlib.sha1(b"nocolon").digest()).decode()
        zk = kz()
        try:
            zk.add_auth("digest", "nocolon")
            zk.create("/auth-nocolon", b"d", acl=[ACL(31, Id("digest", ident))])
            self.assertEqual(zk.get("/auth-nocolon")[0], b"d")
            zk.delete("/auth-nocolon")
        finally:
            zk.stop()
            zk.close()

    def test_malformed_paths_on_reads_and_delete_name_no_node(self):
        c = Raw()
        c.connect()
        for xid, p in enumerate(("/q/", "/q//a", "/q/./a", "/q/a/."), start=1):
            self.assertEqual(c.request(xid, 3, jpath(p) + b"\0")["err"], -101, p)  # exists
            self.assertEqual(c.request(xid, 4, jpath(p) + b"\0")["err"], -101, p)  # getData
            self.assertEqual(c.request(xid, 2, jpath(p) + struct.pack(">i", -1))["err"], -101,
                             p)  # delete
        self.assertEqual(c.request(9, 5, jpath("/q/") + jstr(b"") + struct.pack(">i", -1))["err"],
                         -8, "setData still validates its path")
        self.assertEqual(c.request(10, 3, jstr(b"/q\0a") + b"\0")["err"], -8, "a NUL")
        # getEphemerals: a prefix that trims to nothing or "/" lists them all
        world = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        self.assertEqual(c.request(11, 1, jpath("/eph-trim") + jstr(b"") + world
                                   + struct.pack(">i", 1))["err"], 0)
        for pfx in (" ", " / ", "", "/eph"):
            r = c.request(12, 103, jpath(pfx))
            self.assertEqual((r["err"], struct.unpack(">i", r["body"][:4])[0]), (0, 1), pfx)
        self.assertEqual(struct.unpack(">i", c.request(13, 103, jpath("/x"))["body"][:4])[0], 0)
        c.close()


class ForeignWrites(unittest.TestCase):
    def test_etcd_writes_under_the_prefix_refused(self):
        """quorum only: an etcd client's Put, DeleteRange or Txn touching the
        ZooKeeper face's keys ("\\0zk...") is refused PERMISSION_DENIED
        and the znode is untouched; reads of those keys are allowed."""
        if QUORUM is None:
            self.skipTest("quorum only")
        import etcd3
        import grpc
        denied = ("etcdserver: permission denied: keys under the prefix \\x00zk belong to "
                  "the ZooKeeper face")
        zk = kz()
        e = etcd3.client("127.0.0.1", QUORUM.client_port)
        try:
            zk.create("/junk", b"x")
            key = b"\0zkD\0\x01/junk"
            tx = e.transactions
            for f in (lambda: e.put(key, b"not a znode"), lambda: e.delete(key),
                      lambda: e.delete_prefix(b"\0"),
                      lambda: e.transaction(compare=[], success=[tx.get(b"a")],
                                            failure=[tx.put(b"\0zkS" + bytes(8), b"")]),
                      lambda: e.transaction(compare=[], success=[tx.delete(key)], failure=[])):
                with self.assertRaises(grpc.RpcError) as cm:
                    f()
                self.assertEqual((cm.exception.code(), cm.exception.details()),
                                 (grpc.StatusCode.PERMISSION_DENIED, denied))
            # the lock and election services write keys under their name
            import pb34

            def rpc(path, resp):
                return grpc.insecure_channel(QUORUM.endpoint).unary_unary(
                    path, request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=pb34.msg(resp).FromString)
            lease = e.lease(60).id
            for f in (lambda: rpc("/v3lockpb.Lock/Lock", "v3lockpb.LockResponse")(
                          pb34.msg("v3lockpb.LockRequest")(name=b"\0zkD\0\x01/lk", lease=lease),
                          timeout=10),
                      lambda: rpc("/v3electionpb.Election/Campaign",
                                  "v3electionpb.CampaignResponse")(
                          pb34.msg("v3electionpb.CampaignRequest")(
                              name=b"\0zkS", lease=lease, value=b"v"), timeout=10)):
                with self.assertRaises(grpc.RpcError) as cm:
                    f()
                self.assertEqual((cm.exception.code(), cm.exception.details()),
                                 (grpc.StatusCode.PERMISSION_DENIED, denied))
            self.assertEqual(list(e.get_prefix(b"\0zkD\0\x01/lk")), [], "no lock key written")
            self.assertIsNotNone(e.get(key)[0], "reads are allowed")
            self.assertEqual(zk.get("/junk")[0], b"x")
            zk.set("/junk", b"y")
            e.put(b"\0zj", b"just below the prefix")
            e.put(b"\0zl", b"just above")
            e.delete(b"\0zj")
            e.delete(b"\0zl")
            zk.delete("/junk")
        finally:
            e.close()
            zk.stop()
            zk.close()


class Quota(unittest.TestCase):
    def test_writes_past_quota_backend_bytes_refused(self):
        """quorum only: ZooKeeper writes count against --quota-backend-bytes
        as etcd's Puts do: past it the NOSPACE alarm is raised and writes
        that add data answer SYSTEMERROR (not QUOTAEXCEEDED, -125, which
        kazoo 2.8 cannot take: docs/zookeeper.md), while reads, deletes and
        checks go on; kazoo sees SystemZookeeperError."""
        if QUORUM is None:
            self.skipTest("quorum only")
        import etcd3
        global SERVER
        port = free_port()
        srv = Server("quorum", extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port,
                                           "--quota-backend-bytes", str(16 * 1024 * 1024)])
        srv.start()
        saved, SERVER = SERVER, ("127.0.0.1", port)
        try:
            c = Raw()
            c.connect()
            # a session made before: new ones cannot be while NOSPACE is
            # raised (a session is a lease; etcd refuses LeaseGrant then)
            zk = kz()
            acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + \
                jpath("anyone")
            data = b"q" * (900 * 1024)

            def create(path, d=b""):
                return c.request(1, 1, jpath(path) + jstr(d) + acl + struct.pack(">i", 0))["err"]
            refused = None
            for i in range(100):
                err = create("/fill%d" % i, data)
                if err != 0:
                    refused = (i, err)
                    break
            self.assertIsNotNone(refused, "the quota was never reached")
            self.assertEqual(refused[1], -1)  # SYSTEMERROR
            self.assertGreater(refused[0], 5)
            self.assertEqual(create("/small"), -1, "the alarm refuses any create")
            r = c.request(2, 5, jpath("/fill0") + jstr(b"x") + struct.pack(">i", -1))
            self.assertEqual(r["err"], -1, "setData too")
            r = c.request(3, 4, jpath("/fill0") + b"\0")
            self.assertEqual((r["err"], len(r["body"]) > len(data)), (0, True), "reads go on")
            r = c.request(4, 2, jpath("/fill1") + struct.pack(">i", -1))
            self.assertEqual(r["err"], 0, "deletes go on")
            self.assertEqual(c.request(5, 13, jpath("/fill0") + struct.pack(">i", 0))["err"], 0,
                             "checks go on")
            e = etcd3.client("127.0.0.1", srv.client_port)
            alarms = [a.alarm_type for a in e.list_alarms()]
            self.assertEqual(len(alarms), 1)
            e.close()
            c.close()
            try:
                self.assertEqual(err_name(lambda: zk.create("/k", b"")), "SystemZookeeperError")
                self.assertEqual(len(zk.get("/fill0")[0]), len(data))
                fresh = Raw()
                self.assertIsNone(fresh.connect(), "no new session: the connection closes")
                fresh.close()
            finally:
                zk.stop()
                zk.close()
        finally:
            SERVER = saved
            srv.stop()
            srv.cleanup()


class RawOperations(unittest.TestCase):
    def test_pipelined_requests_answered_in_order(self):
        # a read sent right behind a write, before its answer, sees the
        # write (ZooKeeper's FIFO client order), and answers keep the order
        c = Raw()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        reqs = b""
        for i in range(5):
            body = jpath("/fifo%d" % i) + jstr(b"v%d" % i) + acl + struct.pack(">i", 0)
            pkt = struct.pack(">ii", 100 + 2 * i, 1) + body
            reqs += struct.pack(">i", len(pkt)) + pkt
            pkt = struct.pack(">ii", 101 + 2 * i, 4) + jpath("/fifo%d" % i) + b"\0"
            reqs += struct.pack(">i", len(pkt)) + pkt
        c.s.sendall(reqs)
        last = 0
        for i in range(10):
            p = c.recv_packet()
            xid, zxid, err = struct.unpack(">iqi", p[:16])
            self.assertEqual((xid, err), (100 + i, 0))
            self.assertGreaterEqual(zxid, last)
            last = zxid
            if i % 2 == 1:
                n = struct.unpack(">i", p[16:20])[0]
                self.assertEqual(p[20:20 + n], b"v%d" % (i // 2))
        for i in range(5):
            r = c.request(200 + i, 2, jpath("/fifo%d" % i) + struct.pack(">i", -1))
            self.assertEqual(r["err"], 0)
        c.close()

    def test_many_pipelined_reads_behind_a_write(self):
        # 3000 reads sent behind a create, before any answer: they wait for
        # it (FIFO), the server stops reading past 1000 outstanding and goes
        # on as answers leave; every one is answered, in order, and sees it
        c = Raw(timeout=30)
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        body = jpath("/pipe") + jstr(b"p") + acl + struct.pack(">i", 0)
        pkt = struct.pack(">ii", 1, 1) + body
        out = struct.pack(">i", len(pkt)) + pkt
        for i in range(3000):
            pkt = struct.pack(">ii", 2 + i, 4) + jpath("/pipe") + b"\0"
            out += struct.pack(">i", len(pkt)) + pkt
        import threading
        t = threading.Thread(target=c.s.sendall, args=(out,))
        t.start()
        for i in range(3001):
            p = c.recv_packet()
            xid, zxid, err = struct.unpack(">iqi", p[:16])
            self.assertEqual((xid, err), (1 + i, 0))
            if i > 0:
                self.assertEqual(p[16:21], b"\0\0\0\1p")
        t.join()
        self.assertEqual(c.request(9999, 2, jpath("/pipe") + struct.pack(">i", -1))["err"], 0)
        c.close()

    def test_request_with_the_event_xid_leaves_the_connection_working(self):
        # xid -1 is the one events carry: a request sent with it is answered
        # with it (an answer nothing can tell from an event), and the
        # requests after it are answered as usual. (quorum's front loops
        # count answers to know what a connection has at the core; this one
        # is not counted, so such a connection is never held for a round,
        # front.c "Held": held, it would wait for the member's next write,
        # which the session's own lease writes bring within seconds, so
        # this cannot tell that apart; it checks the answers and their order.)
        c = Raw()
        c.connect()
        self.assertEqual(c.request(1, 3, jpath("/") + b"\0")["err"], 0)
        c.send_packet(struct.pack(">ii", -1, 4) + jpath("/") + b"\1")  # getData, watch
        p = c.recv_packet()
        self.assertIsNotNone(p)
        xid, zxid, err = struct.unpack(">iqi", p[:16])
        self.assertEqual((xid, err), (-1, 0))
        for i in range(3):
            r = c.request(7 + i, 3, jpath("/") + b"\0")  # exists
            self.assertEqual((r["xid"], r["err"]), (7 + i, 0))
        c.close()

    def test_watch_event_before_the_reads_that_show_the_change(self):
        # a connection with a data watch pipelines reads of the node while
        # another connection changes it: whatever the interleaving, every
        # answer before the event shows the old data, every answer after it
        # the new, the event comes once, and zxids never go back
        w, c = Raw(timeout=30), Raw()
        w.connect()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        r = c.request(1, 1, jpath("/wev") + jstr(b"old") + acl + struct.pack(">i", 0))
        self.assertEqual(r["err"], 0)
        r = w.request(2, 4, jpath("/wev") + b"\1")  # getData, watch
        self.assertEqual(r["err"], 0)
        n = 2000
        out = b""
        for i in range(n):
            pkt = struct.pack(">ii", 3 + i, 4) + jpath("/wev") + b"\0"
            out += struct.pack(">i", len(pkt)) + pkt
        import threading
        t = threading.Thread(target=w.s.sendall, args=(out,))
        t.start()
        r = c.request(5000, 5, jpath("/wev") + jstr(b"new") + struct.pack(">i", -1))
        self.assertEqual(r["err"], 0)
        events, seen, last, xid = 0, [], 0, 3
        while xid < 3 + n or events == 0:
            p = w.recv_packet()
            px, zxid, err = struct.unpack(">iqi", p[:16])
            if px == -1:
                self.assertEqual(struct.unpack(">ii", p[16:24]), (3, 3))  # NodeDataChanged
                events += 1
                continue
            self.assertEqual((px, err), (xid, 0))
            self.assertGreaterEqual(zxid, last)
            last = zxid
            xid += 1
            m = struct.unpack(">i", p[16:20])[0]
            seen.append((p[20:20 + m], events))
        t.join()
        self.assertEqual(events, 1)
        for data, before in seen:
            self.assertEqual(data, b"new" if before else b"old")
        c.request(5001, 2, jpath("/wev") + struct.pack(">i", -1))
        w.close()
        c.close()

    def test_reconfig_disabled(self):
        """reconfig (16) is answered RECONFIGDISABLED, as by a ZooKeeper
        without reconfigEnabled, and the connection goes on."""
        c = Raw()
        c.connect()
        body = struct.pack(">i", -1) + jpath("1") + struct.pack(">i", -1) + struct.pack(">q", -1)
        self.assertEqual(c.request(1, 16, body)["err"], -123)
        self.assertEqual(c.request(2, 3, jpath("/") + b"\0")["err"], 0)
        c.close()

    def test_path_characters_as_the_server_reads_them(self):
        """ZooKeeper reads a path as Java does: a character past U+FFFF is
        a surrogate pair and malformed UTF-8 is U+FFFD, both refused."""
        c = Raw()
        c.connect()
        cases = [(b"/pc\xc3\xa9", 0), (b"/pc\xe4\xb8\xad", 0), (b"/pc\xef\xbf\xaf", 0),
                 (b"/pc\xf0\x9f\x98\x80", -8), (b"/pc\x80", -8), (b"/pc\xc0\x80", -8),
                 (b"/pc\xe0\x80\x80", -8), (b"/pc\xed\xa0\x80", -8), (b"/pc\xe2\x82", -8)]
        for i, (path, want) in enumerate(cases):
            r = c.request(i + 1, 1, jstr(path) + jstr(b"") + OPEN_ACL + struct.pack(">i", 0))
            self.assertEqual(r["err"], want, path)
            if want == 0:
                self.assertEqual(c.request(50 + i, 2, jstr(path) + struct.pack(">i", -1))["err"],
                                 0)
        c.close()

    def test_large_multi_one_zxid(self):
        c = Raw()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        n = 3000
        ops = struct.pack(">i?i", 1, False, -1) + jpath("/big") + jstr(b"") + acl + \
            struct.pack(">i", 0)
        for i in range(n):
            ops += (struct.pack(">i?i", 1, False, -1) + jpath("/big/n%d" % i) + jstr(b"x")
                    + acl + struct.pack(">i", 0))
        ops += struct.pack(">i?i", -1, True, -1)
        r = c.request(1, 14, ops)
        self.assertEqual(r["err"], 0)
        self.assertEqual(struct.unpack(">i?i", r["body"][:9]), (1, False, 0))
        cnt = c.request(2, 104, jpath("/big"))
        self.assertEqual(struct.unpack(">i", cnt["body"])[0], n)
        zx = set()
        for p in ("/big", "/big/n0", "/big/n%d" % (n - 1)):
            st = unpack_stat(c.request(3, 3, jpath(p) + b"\0")["body"])
            zx.add(st["czxid"])
        self.assertEqual(len(zx), 1, "one zxid for the whole multi")
        c.close()
        zk = kz()
        zk.delete("/big", recursive=True)
        zk.stop()
        zk.close()

    def test_create_modes_and_counts(self):
        c = Raw()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")

        def create(path, flags, op=15, ttl=None):
            body = jpath(path) + jstr(b"d") + acl + struct.pack(">i", flags)
            if ttl is not None:
                body += struct.pack(">q", ttl)
            return c.request(1, op, body)
        r = create("/modes", 0)
        self.assertEqual(r["err"], 0)
        n = struct.unpack(">i", r["body"][:4])[0]
        self.assertEqual(r["body"][4:4 + n], b"/modes")
        st = unpack_stat(r["body"][4 + n:])
        self.assertEqual((st["czxid"], st["mzxid"], st["pzxid"]), (r["zxid"],) * 3)
        # container (createContainer, 19): ephemeralOwner 0 (ZooKeeper 3.8)
        r = create("/modes/cont", 4, op=19)
        self.assertEqual(r["err"], 0)
        n = struct.unpack(">i", r["body"][:4])[0]
        self.assertEqual(unpack_stat(r["body"][4 + n:])["ephemeralOwner"], 0)
        # TTL (createTTL, 21): ephemeralOwner 0 too
        r = create("/modes/ttl", 5, op=21, ttl=5000)
        self.assertEqual(r["err"], 0)
        n = struct.unpack(">i", r["body"][:4])[0]
        self.assertEqual(unpack_stat(r["body"][4 + n:])["ephemeralOwner"], 0)
        self.assertEqual(create("/modes/ttl2", 5, op=21, ttl=0)["err"], -8)   # BADARGUMENTS
        self.assertEqual(create("/modes/ttl3", 0, op=21, ttl=100)["err"], -8)
        self.assertEqual(create("/modes/eph", 1)["err"], 0)
        self.assertEqual(create("/modes/cont/x", 0)["err"], 0)
        self.assertEqual(create("bad", 0)["err"], -8)
        self.assertEqual(create("/modes/", 0)["err"], -8)
        # the parent is looked up before the whole path is checked: "/modes/"
        # and "/modes/." do not exist (NONODE); "/modes/." itself is invalid
        self.assertEqual(create("/modes//x", 0)["err"], -101)
        self.assertEqual(create("/modes/./x", 0)["err"], -101)
        self.assertEqual(create("/modes/.", 0)["err"], -8)
        self.assertEqual(create("/modes/..", 0)["err"], -8)
        # getAllChildrenNumber (104): every node below
        r = c.request(2, 104, jpath("/modes"))
        self.assertEqual((r["err"], struct.unpack(">i", r["body"])[0]), (0, 4))
        self.assertEqual(c.request(2, 104, jpath("/nope"))["err"], -101)
        # getEphemerals (103): this session's, under a prefix
        r = c.request(3, 103, jpath("/modes"))
        self.assertEqual(r["err"], 0)
        cnt = struct.unpack(">i", r["body"][:4])[0]
        n = struct.unpack(">i", r["body"][4:8])[0]
        self.assertEqual((cnt, r["body"][8:8 + n]), (1, b"/modes/eph"))
        # multiRead (22): getData and getChildren, each with its own result
        mr = (struct.pack(">i?i", 4, False, -1) + jpath("/modes") + b"\0"
              + struct.pack(">i?i", 8, False, -1) + jpath("/modes/cont") + b"\0"
              + struct.pack(">i?i", 4, False, -1) + jpath("/missing") + b"\0"
              + struct.pack(">i?i", -1, True, -1))
        r = c.request(4, 22, mr)
        self.assertEqual(r["err"], 0)
        b = r["body"]
        t, done, e = struct.unpack(">i?i", b[:9])
        self.assertEqual((t, done, e), (4, False, 0))
        n = struct.unpack(">i", b[9:13])[0]
        self.assertEqual(b[13:13 + n], b"d")
        b = b[13 + n + 68:]
        t, done, e = struct.unpack(">i?i", b[:9])
        self.assertEqual((t, e), (8, 0))
        cnt = struct.unpack(">i", b[9:13])[0]
        n = struct.unpack(">i", b[13:17])[0]
        self.assertEqual((cnt, b[17:17 + n]), (1, b"x"))
        b = b[17 + n:]
        t, done, e = struct.unpack(">i?i", b[:9])
        self.assertEqual((t, e), (-1, -101))
        self.assertEqual(struct.unpack(">i", b[9:13])[0], -101)
        self.assertEqual(struct.unpack(">i?i", b[13:22]), (-1, True, -1))
        c.close()
        zk = kz()
        zk.delete("/modes", recursive=True)
        zk.stop()
        zk.close()


class ContainerSweep(unittest.TestCase):
    def test_empty_containers_and_expired_ttl_nodes_go(self):
        """ZooKeeper's ContainerManager: a container that had a child and
        has none goes, one never used stays, one with a child stays; a TTL
        node past its TTL without children goes, others stay; watches fire
        as for any delete."""
        import threading
        c = Raw()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")

        def create(path, flags=0, op=1, ttl=None):
            body = jpath(path) + jstr(b"") + acl + struct.pack(">i", flags)
            if ttl is not None:
                body += struct.pack(">q", ttl)
            r = c.request(1, op, body)
            self.assertEqual(r["err"], 0, path)

        def delete(path):
            self.assertEqual(c.request(2, 2, jpath(path) + struct.pack(">i", -1))["err"], 0)
        create("/sw")
        create("/sw/used", 4, op=19)
        create("/sw/used/child")
        # the watch goes on while the container has its child: the sweep
        # cannot have taken it before the watch is set (under ASan the
        # client's connect took longer than a sweep interval)
        zk = kz()
        gone = threading.Event()
        self.assertIsNotNone(zk.exists("/sw/used",
                                       watch=lambda e: e.type == "DELETED" and gone.set()))
        delete("/sw/used/child")
        create("/sw/new", 4, op=19)
        create("/sw/full", 4, op=19)
        create("/sw/full/child")
        create("/sw/ttl-old", 5, op=21, ttl=300)
        create("/sw/ttl-long", 5, op=21, ttl=3600 * 1000)
        create("/sw/ttl-parent", 5, op=21, ttl=300)
        create("/sw/ttl-parent/child")
        try:
            wait_for(lambda: zk.exists("/sw/used") is None and zk.exists("/sw/ttl-old") is None,
                     30, what="the used container and the old TTL node swept")
            self.assertTrue(gone.wait(10), "the watch on the swept container fired")
            self.assertEqual(sorted(zk.get_children("/sw")),
                             ["full", "new", "ttl-long", "ttl-parent"])
            # the child keeps its parent; once it goes, the parent goes too
            zk.delete("/sw/full/child")
            zk.delete("/sw/ttl-parent/child")
            wait_for(lambda: sorted(zk.get_children("/sw")) == ["new", "ttl-long"], 30,
                     what="the emptied container and TTL node swept")
            zk.delete("/sw", recursive=True)
        finally:
            zk.stop()
            zk.close()
            c.close()


    def test_which_creates_make_containers(self):
        """As ZooKeeper 3.8: createContainer makes a container whatever its
        flags (which still say sequential); create and create2 with the
        container flag make a plain node; in a multi each create is made
        again from its flags alone (result type and container-ness follow
        them), and TTL flags on another op than createTTL refuse the whole
        multi."""
        c = Raw()
        c.connect()
        xid = [0]

        def req(op, body):
            xid[0] += 1
            return c.request(xid[0], op, body)

        def body(path, flags, ttl=None):
            b = jpath(path) + jstr(b"") + OPEN_ACL + struct.pack(">i", flags)
            return b + (struct.pack(">q", ttl) if ttl is not None else b"")

        def one_op_multi(op, path, flags, ttl=None):
            r = req(14, struct.pack(">i?i", op, False, -1) + body(path, flags, ttl)
                    + struct.pack(">i?i", -1, True, -1))
            if r["err"] != 0:
                return r["err"], None
            t, _, e = struct.unpack(">i?i", r["body"][:9])
            return t, r["body"][9:]

        self.assertEqual(req(1, body("/cm", 0))["err"], 0)
        made = ["/cm/t1", "/cm/t15", "/cm/t19_0000000002", "/cm/m1", "/cm/m19"]
        self.assertEqual(req(1, body("/cm/t1", 4))["err"], 0)
        self.assertEqual(req(15, body("/cm/t15", 4))["err"], 0)
        r = req(19, body("/cm/t19_", 2))
        self.assertEqual((r["err"], r["body"][4:22]), (0, b"/cm/t19_0000000002"))
        self.assertEqual(req(19, body("/cm/t19ttl", 5))["err"], -8)
        t, rest = one_op_multi(1, "/cm/m1", 4)
        self.assertEqual((t, len(rest)), (15, 4 + 6 + 68 + 9), "a container's result has a Stat")
        t, rest = one_op_multi(19, "/cm/m19", 0)
        self.assertEqual((t, len(rest)), (1, 4 + 7 + 9), "a plain create's result has no Stat")
        t, rest = one_op_multi(15, "/cm/m15", 0)
        self.assertEqual(t, 1)
        self.assertEqual(one_op_multi(1, "/cm/mttl", 5)[0], -5)
        self.assertEqual(one_op_multi(21, "/cm/m21", 1, 60000)[0], 1)
        st = unpack_stat(req(3, jpath("/cm/m21") + b"\0")["body"])
        self.assertNotEqual(st["ephemeralOwner"], 0, "createTTL with flags 1 in a multi: ephemeral")
        # a child comes and goes under each: the sweep takes containers only
        for p in made:
            self.assertEqual(req(1, body(p + "/k", 0))["err"], 0)
            self.assertEqual(req(2, jpath(p + "/k") + struct.pack(">i", -1))["err"], 0)
        containers = {"/cm/t19_0000000002", "/cm/m1"}
        wait_for(lambda: all(req(3, jpath(p) + b"\0")["err"] == -101 for p in containers),
                 SWEEP_MS / 1000 * 10, what="the containers swept")
        time.sleep(SWEEP_MS / 1000 * 2)
        for p in made:
            want = -101 if p in containers else 0
            self.assertEqual(req(3, jpath(p) + b"\0")["err"], want, p)
        c.close()
        zk = kz()
        zk.delete("/cm", recursive=True)
        zk.stop()
        zk.close()

    def test_many_containers_swept(self):
        """more containers than one sweep step reads (quorum sweeps in
        steps of 256 znodes): every emptied one goes"""
        c = Raw()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")
        n = 700

        def multi(ops):
            r = c.request(1, 14, ops + struct.pack(">i?i", -1, True, -1))
            self.assertEqual(r["err"], 0)
            self.assertEqual(struct.unpack(">i?i", r["body"][:9])[2], 0)

        def op_create(path, op=1, flags=0):
            return (struct.pack(">i?i", op, False, -1) + jpath(path) + jstr(b"") + acl
                    + struct.pack(">i", flags))
        ops = op_create("/swm")
        for i in range(n):
            ops += op_create("/swm/c%d" % i, 19, 4) + op_create("/swm/c%d/x" % i)
        multi(ops)
        multi(b"".join(struct.pack(">i?i", 2, False, -1) + jpath("/swm/c%d/x" % i)
                       + struct.pack(">i", -1) for i in range(n)))

        def left():
            r = c.request(2, 104, jpath("/swm"))  # getAllChildrenNumber
            return struct.unpack(">i", r["body"])[0]
        wait_for(lambda: left() == 0, 60, what="every emptied container swept")
        self.assertEqual(c.request(3, 2, jpath("/swm") + struct.pack(">i", -1))["err"], 0)
        c.close()


class ZkCli(unittest.TestCase):
    def test_zkcli_drives_the_basic_commands(self):
        cli = "/usr/share/zookeeper/bin/zkCli.sh"
        if not os.path.exists(cli):
            self.skipTest("zkCli not installed")
        cmds = ["create /cli data", "create -s /cli/s- x", "create -e /cli/e y",
                "addWatch -m PERSISTENT_RECURSIVE /cli", "create /cli/w 1", "set /cli/w 2",
                "get /cli", "set /cli more", "get /cli", "stat /cli", "ls /cli",
                "getAllChildrenNumber /cli", "delete /cli",
                "create /cli2 z", "setAcl /cli2 world:anyone:r", "getAcl /cli2", "set /cli2 no",
                "delete /cli2", "getEphemerals /cli", "whoami", "sync /cli",
                "deleteall /cli", "ls /", "quit"]
        r = subprocess.run([cli, "-server", "%s:%d" % SERVER], input="\n".join(cmds) + "\n",
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        out = r.stdout.split("Welcome to ZooKeeper!")[-1]
        for want in ("Created /cli\n", "Created /cli/s-0000000000\n", "Created /cli/e\n",
                     "type:NodeCreated path:/cli/w\n", "type:NodeDataChanged path:/cli/w\n",
                     "data\n", "more\n", "dataVersion = 1\n", "numChildren = 3\n",
                     "[e, s-0000000000, w]\n", "\n3\n",
                     "Node not empty: /cli\n", "'world,'anyone\n: r\n",
                     "Insufficient permission : /cli2\n", "[/cli/e]\n",
                     "ip: 127.0.0.1\n", "Sync is OK\n"):
            self.assertIn(want, out, out[-3000:])
        self.assertNotIn("Failed to delete", out)
        lists = [ln for ln in out.splitlines() if ln.startswith("[")]
        self.assertIn("zookeeper", lists[-1])  # ls / after deleteall
        self.assertNotIn("cli", lists[-1])


class Watches(unittest.TestCase):
    def test_one_shot_watches_and_kazoo_watchers(self):
        import threading
        from kazoo.recipe.watchers import ChildrenWatch, DataWatch
        zk, zk2 = kz(), kz()
        try:
            ev = []
            zk.create("/w", b"0")
            zk.get("/w", watch=lambda e: ev.append(("get", e.type, e.path)))
            zk.exists("/w/new", watch=lambda e: ev.append(("exists", e.type, e.path)))
            zk.get_children("/w", watch=lambda e: ev.append(("children", e.type, e.path)))
            zk2.set("/w", b"1")
            zk2.create("/w/new", b"")
            zk2.set("/w", b"2")  # one-shot: the get watch fired already
            wait_for(lambda: len(ev) >= 3, 10, what="three events")
            time.sleep(0.3)
            self.assertEqual(sorted(ev), [("children", "CHILD", "/w"),
                                          ("exists", "CREATED", "/w/new"),
                                          ("get", "CHANGED", "/w")])
            datas, kids = [], []
            DataWatch(zk, "/w", lambda d, s: datas.append(d))
            ChildrenWatch(zk, "/w", lambda c: kids.append(sorted(c)))
            zk2.set("/w", b"3")
            wait_for(lambda: datas[-1:] == [b"3"], 10, what="DataWatch")
            zk2.create("/w/k2", b"")
            wait_for(lambda: kids[-1:] == [["k2", "new"]], 10, what="ChildrenWatch")
            zk2.delete("/w/new")
            wait_for(lambda: kids[-1:] == [["k2"]], 10, what="ChildrenWatch after delete")
            self.assertEqual(datas, [b"2", b"3"])
            self.assertEqual(kids, [["new"], ["k2", "new"], ["k2"]])
            # a lock: the second waits for the first's release (watch on
            # the node before it)
            lock, lock2 = zk.Lock("/lock", "a"), zk2.Lock("/lock", "b")
            lock.acquire()
            got = []
            t = threading.Thread(target=lambda: (lock2.acquire(timeout=10), got.append("b")))
            t.start()
            time.sleep(0.5)
            self.assertEqual(got, [])
            lock.release()
            t.join()
            self.assertEqual(got, ["b"])
            lock2.release()
            zk.delete("/w", recursive=True)
        finally:
            for c in (zk, zk2):
                c.stop()
                c.close()

    def test_persistent_watch_events_and_removal(self):
        zk, zk2 = kz(), kz()
        c = Raw()
        c.connect()
        try:
            ev = []
            zk.create("/pw", b"")
            zk.create("/pw/c", b"")
            zk.get("/pw/c", watch=lambda e: ev.append(("data", e.type)))
            zk.get_children("/pw/c", watch=lambda e: ev.append(("child", e.type)))
            zk2.delete("/pw/c")
            wait_for(lambda: len(ev) == 2, 10, what="data and child watches on a deleted node")
            self.assertEqual(sorted(ev), [("child", "DELETED"), ("data", "DELETED")])
            self.assertEqual(c.request(1, 106, jpath("/pw") + struct.pack(">i", 0))["err"], 0)
            zk2.create("/pw/d", b"")
            zk2.set("/pw", b"x")
            zk2.delete("/pw/d")
            got = []
            for _ in range(3):
                p = c.recv_packet()
                t, st, n = struct.unpack(">iii", p[16:28])
                got.append((t, p[28:28 + n].decode()))
            # a persistent watch on /pw: children changed, data changed, ...
            self.assertEqual(got, [(4, "/pw"), (3, "/pw"), (4, "/pw")])
            self.assertEqual(c.request(2, 8, jpath("/pw") + b"\1")["err"], 0)  # + a child watch
            # removing DATA takes the persistent watch (a data and a child watch)
            self.assertEqual(c.request(3, 18, jpath("/pw") + struct.pack(">i", 2))["err"], 0)
            self.assertEqual(c.request(4, 18, jpath("/pw") + struct.pack(">i", 1))["err"], 0)
            self.assertEqual(c.request(5, 18, jpath("/pw") + struct.pack(">i", 1))["err"], -121)
            self.assertEqual(c.request(6, 17, jpath("/pw") + struct.pack(">i", 3))["err"], -121)
            zk.delete("/pw", recursive=True)
        finally:
            c.close()
            for k in (zk, zk2):
                k.stop()
                k.close()

    def test_watch_count_and_a_bad_watcher_type(self):
        """mntr's zk_watch_count adds ZooKeeper's data and child watch
        tables: a persistent or recursive watch is in both; removeWatches
        and checkWatches of a watcher type ZooKeeper does not know are
        MARSHALLINGERROR and remove nothing."""
        def count():
            for line in four(b"mntr").splitlines():
                if line.startswith("zk_watch_count\t"):
                    return int(line.split("\t")[1])
            raise AssertionError("no zk_watch_count")
        c = Raw()
        c.connect()
        self.assertEqual(c.request(1, 1, m_create("/wc")[9:])["err"], 0)
        base = count()
        self.assertEqual(c.request(2, 106, jpath("/wc") + struct.pack(">i", 0))["err"], 0)
        self.assertEqual(count(), base + 2)
        self.assertEqual(c.request(3, 106, jpath("/wc/r") + struct.pack(">i", 1))["err"], 0)
        self.assertEqual(count(), base + 4)
        self.assertEqual(c.request(4, 3, jpath("/wc/x") + b"\1")["err"], -101)  # exists
        self.assertEqual(count(), base + 5)
        for t in (0, 4):
            self.assertEqual(c.request(5, 18, jpath("/wc") + struct.pack(">i", t))["err"], -5)
            self.assertEqual(c.request(6, 17, jpath("/wc") + struct.pack(">i", t))["err"], -5)
        self.assertEqual(count(), base + 5, "nothing removed")
        self.assertEqual(c.request(7, 18, jpath("/wc/r") + struct.pack(">i", 3))["err"], 0)
        self.assertEqual(count(), base + 3)
        c.close()
        wait_for(lambda: count() == base, 10, what="the connection's watches gone")
        zk = kz()
        zk.delete("/wc", recursive=True)
        zk.stop()
        zk.close()

    def test_raw_watch_protocol(self):
        """addWatch persistent recursive, removeWatches/checkWatches, and
        setWatches on reconnect delivering what changed while away."""
        w, c = Raw(), Raw()
        w.connect()
        c.connect()
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")

        def create(conn, path):
            r = conn.request(1, 1, jpath(path) + jstr(b"") + acl + struct.pack(">i", 0))
            self.assertEqual(r["err"], 0)
            return r

        def event(conn):
            p = conn.recv_packet()
            xid, zxid, err = struct.unpack(">iqi", p[:16])
            self.assertEqual((xid, err), (-1, 0))
            t, st, n = struct.unpack(">iii", p[16:28])
            return t, st, p[28:28 + n].decode()
        create(c, "/rw")
        r = w.request(2, 106, jpath("/rw") + struct.pack(">i", 1))  # addWatch recursive
        self.assertEqual((r["err"], r["body"]), (0, b"\0\0\0\0"))
        create(c, "/rw/a")
        self.assertEqual(event(w), (1, 3, "/rw/a"))  # NodeCreated, SyncConnected
        c.request(3, 5, jpath("/rw/a") + jstr(b"x") + struct.pack(">i", -1))
        self.assertEqual(event(w), (3, 3, "/rw/a"))  # NodeDataChanged
        c.request(4, 2, jpath("/rw/a") + struct.pack(">i", -1))
        self.assertEqual(event(w), (2, 3, "/rw/a"))  # NodeDeleted (and no child event)
        # checkWatches / removeWatches: ANY on the path, then none left
        self.assertEqual(w.request(5, 17, jpath("/rw") + struct.pack(">i", 3))["err"], 0)
        self.assertEqual(w.request(6, 18, jpath("/rw") + struct.pack(">i", 3))["err"], 0)
        self.assertEqual(w.request(7, 18, jpath("/rw") + struct.pack(">i", 3))["err"], -121)
        # a data watch, then away: the change made meanwhile is delivered by
        # setWatches on reconnect (data, exist and child lists); a watch on
        # what did not change is armed
        create(c, "/rw/b")
        v = Raw()
        got = v.connect()
        sid, pw = got["session"], got["passwd"]
        r = v.request(10, 4, jpath("/rw/b") + b"\1")
        self.assertEqual(r["err"], 0)
        seen = r["zxid"]
        v.close()
        c.request(11, 5, jpath("/rw/b") + jstr(b"newer") + struct.pack(">i", -1))
        create(c, "/rw/c")
        v = Raw()
        self.assertEqual(v.connect(session=sid, passwd=pw, last_zxid=seen)["session"], sid)
        sw = (struct.pack(">q", seen) + struct.pack(">i", 1) + jpath("/rw/b")
              + struct.pack(">i", 2) + jpath("/rw/c") + jpath("/rw/zz")
              + struct.pack(">i", 1) + jpath("/rw/gone"))
        v.send_packet(struct.pack(">ii", -8, 101) + sw)
        got = []
        for _ in range(4):
            p = v.recv_packet()
            xid = struct.unpack(">i", p[:4])[0]
            if xid == -1:
                t, st, n = struct.unpack(">iii", p[16:28])
                got.append((t, p[28:28 + n].decode()))
            else:
                got.append(("reply", xid, struct.unpack(">i", p[12:16])[0]))
        # /rw/b changed since |seen|, /rw/c exists now, /rw/gone's child
        # watch finds no node; /rw/zz is armed
        self.assertEqual(sorted(got, key=str),
                         sorted([(3, "/rw/b"), (1, "/rw/c"), (2, "/rw/gone"), ("reply", -8, 0)],
                                key=str))
        create(c, "/rw/zz")
        self.assertEqual(event(v), (1, 3, "/rw/zz"))
        v.close()
        c.close()
        zk = kz()
        zk.delete("/rw", recursive=True)
        zk.stop()
        zk.close()


OPEN_ACL = struct.pack(">i", 1) + struct.pack(">i", 31) + jpath("world") + jpath("anyone")


def m_create(path, data=b""):
    return struct.pack(">i?i", 1, False, -1) + jpath(path) + jstr(data) + OPEN_ACL + \
        struct.pack(">i", 0)


def m_set(path, data=b"x"):
    return struct.pack(">i?i", 5, False, -1) + jpath(path) + jstr(data) + struct.pack(">i", -1)


def m_delete(path):
    return struct.pack(">i?i", 2, False, -1) + jpath(path) + struct.pack(">i", -1)


def multi_body(*ops):
    return b"".join(ops) + struct.pack(">i?i", -1, True, -1)


class WatcherAndWriter:
    """A watching connection |w| and a writing one |c|, with /mwe made;
    events() gives what |w| was told of the writes so far."""

    names = {1: "created", 2: "deleted", 3: "changed", 4: "child"}

    def setUp(self):
        self.w = Raw()
        self.w.connect()
        self.c = Raw()
        self.c.connect()
        self.xid = 100
        self.assertEqual(self.c.request(1, 1, m_create("/mwe")[9:])["err"], 0)

    def tearDown(self):
        self.w.close()
        self.c.close()
        zk = kz()
        zk.delete("/mwe", recursive=True)
        zk.stop()
        zk.close()

    def req(self, conn, op, body, err=0):
        self.xid += 1
        r = conn.request(self.xid, op, body)
        self.assertEqual(r["err"], err, (op, body))
        return r

    def multi(self, *ops):
        r = self.req(self.c, 14, multi_body(*ops))
        self.assertEqual(struct.unpack(">i?i", r["body"][:9])[2], 0, "the multi went through")

    def events(self):
        """The events the watcher got: those queued before the answer to a
        read sent after the multi was answered."""
        self.xid += 1
        self.w.send_packet(struct.pack(">ii", self.xid, 3) + jpath("/") + b"\0")
        got = []
        while True:
            p = self.w.recv_packet()
            self.assertIsNotNone(p)
            xid = struct.unpack(">i", p[:4])[0]
            if xid == self.xid:
                return got
            self.assertEqual(xid, -1)
            t, _, n = struct.unpack(">iii", p[16:28])
            got.append((self.names[t], p[28:28 + n].decode()))



class EventsNeedRead(WatcherAndWriter, unittest.TestCase):
    """A watch fires for a session only when it may READ the node the event
    is of (a NodeChildrenChanged: the parent); a one-shot watch is used up
    either way (ZooKeeper 3.8 with CVE-2024-23944's fix, as Debian's)"""

    def test_events_of_nodes_the_watcher_may_not_read(self):
        import base64
        import hashlib
        port = self.c.s.getsockname()[1]

        def last_cxid_zxid():
            line = [ln for ln in four(b"cons").split("\n")
                    if ln.startswith(" /127.0.0.1:%d[" % port)]
            self.assertEqual(len(line), 1)
            return re.search(r"lcxid=([^,]*),lzxid=([^,]*)", line[0]).groups()

        before = last_cxid_zxid()
        # addAuth's reply carries zxid 0, and cons goes on showing the
        # request before it
        r = self.c.request(-4, 100, struct.pack(">i", 0) + jpath("digest") + jstr(b"alice:secret"))
        self.assertEqual((r["xid"], r["zxid"], r["err"]), (-4, 0, 0))
        self.assertEqual(last_cxid_zxid(), before)
        digest = base64.b64encode(hashlib.sha1(b"alice:secret").digest()).decode()
        alice = struct.pack(">ii", 1, 31) + jpath("digest") + jpath("alice:" + digest)

        def create(path, acl):
            self.req(self.c, 1, jpath(path) + jstr(b"v") + acl + struct.pack(">i", 0))

        create("/mwe/s", alice)
        self.req(self.w, 3, jpath("/mwe/s") + b"\1")  # exists asks no permission
        self.req(self.w, 4, jpath("/mwe/s") + b"\1", err=-102)  # NOAUTH: no watch
        self.req(self.c, 5, jpath("/mwe/s") + jstr(b"x") + struct.pack(">i", -1))
        self.assertEqual(self.events(), [], "no READ on /mwe/s: no NodeDataChanged")
        self.req(self.c, 7, jpath("/mwe/s") + OPEN_ACL + struct.pack(">i", -1))
        self.req(self.c, 5, jpath("/mwe/s") + jstr(b"y") + struct.pack(">i", -1))
        self.assertEqual(self.events(), [], "the one-shot watch went with the event it was not told")
        self.req(self.w, 17, jpath("/mwe/s") + struct.pack(">i", 3), err=-121)  # NOWATCHER

        create("/mwe/r", OPEN_ACL)
        create("/mwe/p", OPEN_ACL)
        self.req(self.w, 106, jpath("/mwe/r") + struct.pack(">i", 1))  # persistent recursive
        self.req(self.w, 8, jpath("/mwe") + b"\1")  # child watches on /mwe and /mwe/p
        self.req(self.w, 8, jpath("/mwe/p") + b"\1")
        self.req(self.c, 7, jpath("/mwe/p") + alice + struct.pack(">i", -1))
        try:
            create("/mwe/t", alice)
            self.assertEqual(self.events(), [("child", "/mwe")],
                             "NodeChildrenChanged asks READ on the parent")
            create("/mwe/p/k", OPEN_ACL)
            self.assertEqual(self.events(), [], "no READ on /mwe/p: no NodeChildrenChanged")
            create("/mwe/r/a", alice)
            self.assertEqual(self.events(), [], "no READ on /mwe/r/a: no NodeCreated")
            create("/mwe/r/b", OPEN_ACL)
            self.assertEqual(self.events(), [("created", "/mwe/r/b")])
            self.req(self.c, 2, jpath("/mwe/r/a") + struct.pack(">i", -1))
            self.req(self.c, 5, jpath("/mwe/r/b") + jstr(b"z") + struct.pack(">i", -1))
            self.assertEqual(self.events(), [("changed", "/mwe/r/b")], "no NodeDeleted of /mwe/r/a")
        finally:
            # what the unauthenticated cleanup could not list
            for path in ("/mwe/p/k", "/mwe/p", "/mwe/t", "/mwe/r/a"):
                self.c.request(9000, 2, jpath(path) + struct.pack(">i", -1))


class MultiWatchEvents(WatcherAndWriter, unittest.TestCase):
    """A multi fires the watches of each of its operations in turn, as
    ZooKeeper's DataTree applies it sub-transaction by sub-transaction:
    a node created and deleted in one multi, or set twice, fires for each
    step, though the store keeps only the node's last state."""

    def test_one_shot_watches_fire_on_the_step_that_fires_them(self):
        self.req(self.w, 3, jpath("/mwe/m") + b"\1", -101)  # exists: armed on no node
        self.req(self.w, 8, jpath("/mwe") + b"\1")  # getChildren
        self.multi(m_create("/mwe/m"), m_set("/mwe/m"), m_delete("/mwe/m"))
        self.assertEqual(self.events(), [("created", "/mwe/m"), ("child", "/mwe")])
        # both one-shots went: a later create of the same node fires nothing
        self.req(self.c, 1, m_create("/mwe/m")[9:])
        self.assertEqual(self.events(), [])

    def test_persistent_watches_see_every_step(self):
        self.req(self.w, 106, jpath("/mwe/m") + struct.pack(">i", 0))  # persistent
        self.req(self.w, 106, jpath("/mwe") + struct.pack(">i", 0))
        self.multi(m_create("/mwe/m"), m_set("/mwe/m"), m_set("/mwe/m", b"y"),
                   m_delete("/mwe/m"))
        self.assertEqual(self.events(), [("created", "/mwe/m"), ("child", "/mwe"),
                                         ("changed", "/mwe/m"), ("changed", "/mwe/m"),
                                         ("deleted", "/mwe/m"), ("child", "/mwe")])

    def test_recursive_watch_sees_every_step(self):
        self.req(self.w, 106, jpath("/mwe") + struct.pack(">i", 1))  # persistent recursive
        self.multi(m_create("/mwe/n"), m_create("/mwe/n/y"), m_set("/mwe/n"),
                   m_delete("/mwe/n/y"), m_delete("/mwe/n"))
        self.assertEqual(self.events(), [("created", "/mwe/n"), ("created", "/mwe/n/y"),
                                         ("changed", "/mwe/n"), ("deleted", "/mwe/n/y"),
                                         ("deleted", "/mwe/n")])

    def test_a_data_watch_fires_on_the_set_before_the_delete(self):
        self.req(self.c, 1, m_create("/mwe/x")[9:])
        self.req(self.w, 4, jpath("/mwe/x") + b"\1")  # getData
        self.req(self.w, 106, jpath("/mwe") + struct.pack(">i", 0))
        self.multi(m_set("/mwe/x"), m_delete("/mwe/x"))
        self.assertEqual(self.events(), [("changed", "/mwe/x"), ("child", "/mwe")])

    def test_delete_then_create_fires_both(self):
        self.req(self.c, 1, m_create("/mwe/d")[9:])
        self.req(self.w, 106, jpath("/mwe/d") + struct.pack(">i", 0))
        self.multi(m_delete("/mwe/d"), m_create("/mwe/d"))
        self.assertEqual(self.events(), [("deleted", "/mwe/d"), ("created", "/mwe/d")])


class WatchModes(WatcherAndWriter, unittest.TestCase):
    """One watch per connection and path in each of ZooKeeper's two
    tables (data, child), with one mode each, the last set replacing the
    one before; removeWatches and checkWatches act on a table whatever
    the mode there."""

    def create(self, path):
        self.req(self.c, 1, m_create(path)[9:])

    def set(self, path):
        self.req(self.c, 5, m_set(path)[9:])

    def delete(self, path):
        self.req(self.c, 2, m_delete(path)[9:])

    def add_watch(self, path, mode):
        self.req(self.w, 106, jpath(path) + struct.pack(">i", mode))

    def test_recursive_after_persistent_replaces_it(self):
        self.add_watch("/mwe", 0)
        self.add_watch("/mwe", 1)
        self.create("/mwe/a")
        self.create("/mwe/a/x")
        self.set("/mwe")
        self.delete("/mwe/a/x")
        self.assertEqual(self.events(), [("created", "/mwe/a"), ("created", "/mwe/a/x"),
                                         ("changed", "/mwe"), ("deleted", "/mwe/a/x")])

    def test_persistent_after_recursive_replaces_it(self):
        self.add_watch("/mwe", 1)
        self.add_watch("/mwe", 0)
        self.create("/mwe/a")
        self.create("/mwe/a/x")
        self.set("/mwe")
        self.assertEqual(self.events(), [("child", "/mwe"), ("changed", "/mwe")])

    def test_a_one_shot_after_persistent_makes_that_half_one_shot(self):
        self.add_watch("/mwe", 0)
        self.req(self.w, 4, jpath("/mwe") + b"\1")  # getData with a watch
        self.set("/mwe")
        self.set("/mwe")
        self.create("/mwe/a")
        self.create("/mwe/b")
        self.assertEqual(self.events(), [("changed", "/mwe"), ("child", "/mwe"),
                                         ("child", "/mwe")])

    def test_removing_one_table_of_a_recursive_watch(self):
        self.create("/mwe/a")
        self.add_watch("/mwe", 1)
        self.assertEqual(self.req(self.w, 18, jpath("/mwe") + struct.pack(">i", 1))["err"], 0)
        self.req(self.w, 17, jpath("/mwe") + struct.pack(">i", 1), -121)
        self.req(self.w, 17, jpath("/mwe") + struct.pack(">i", 2))
        self.create("/mwe/a/k")  # the data half: still every event below
        self.assertEqual(self.events(), [("created", "/mwe/a/k")])
        self.add_watch("/mwe", 1)
        self.req(self.w, 18, jpath("/mwe") + struct.pack(">i", 2))  # the data half goes
        self.set("/mwe/a")
        self.delete("/mwe/a/k")  # the child table's half hears deletes below
        self.assertEqual(self.events(), [("deleted", "/mwe/a/k")])


class FreezableProxy:
    """A TCP proxy to the server under test that can stop forwarding (a
    client cut off from the server without either side closing)."""

    def __init__(self):
        import threading
        self.frozen = threading.Event()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection(SERVER)
            self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        while True:
            try:
                d = a.recv(65536)
            except OSError:
                d = b""
            if not d:
                for x in (a, b):
                    try:
                        x.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            while self.frozen.is_set():
                time.sleep(0.05)
            try:
                b.sendall(d)
            except OSError:
                return

    def close(self):
        self.ls.close()
        for x in self.socks:
            try:
                x.close()
            except OSError:
                pass


class CutOff(unittest.TestCase):
    def test_client_cut_off_longer_than_its_timeout(self):
        """Its ephemerals vanish, other clients' watches fire, and the
        client learns its session expired when it gets through again."""
        from kazoo.client import KazooClient, KazooState
        proxy = FreezableProxy()
        cut = KazooClient(hosts="127.0.0.1:%d" % proxy.port, timeout=4)
        cut.start(timeout=15)
        other = kz()
        states = []
        try:
            sid = cut.client_id[0]
            cut.create("/cut-eph", b"", ephemeral=True)
            ev = []
            self.assertIsNotNone(other.exists("/cut-eph", watch=ev.append))
            cut.add_listener(states.append)
            proxy.frozen.set()
            wait_for(lambda: len(ev) == 1, 30, what="the ephemeral's watch fired")
            self.assertEqual(ev[0].type, "DELETED")
            self.assertIsNone(other.exists("/cut-eph"))
            proxy.frozen.clear()
            wait_for(lambda: KazooState.LOST in states, 30, what="the client saw its session lost")
            wait_for(lambda: cut.connected and cut.client_id[0] != sid, 30,
                     what="kazoo's new session")
        finally:
            cut.stop()
            cut.close()
            other.stop()
            other.close()
            proxy.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
