"""The ZooKeeper face (docs/zookeeper.md): connect, session timeout
negotiation, ping, reconnect with the session's id and password, a wrong
password, closeSession, expiry, the connect refusals and the four-letter
words, over the raw jute protocol and with kazoo.

TARGET=quorum (default) runs it against quorum started with
--listen-zk-urls; TARGET=zookeeper against Apache ZooKeeper 3.8 (Debian's
zookeeper package, standalone, tickTime 2000), which proves every
expectation. One server per run (the JVM starts slowly)."""
import os
import socket
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, free_port, wait_for  # noqa: E402
import zkref  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
SERVER = None  # (host, port) of the ZooKeeper port under test
QUORUM = None  # the quorum Server (TARGET=quorum)
LINGER = None  # a connection left open until the member stops


def setUpModule():
    global SERVER, QUORUM, ZK
    if TARGET == "zookeeper":
        if not zkref.available():
            raise unittest.SkipTest("zookeeper not installed (apt-get install zookeeper)")
        ZK = zkref.ZooKeeper().start()
        SERVER = ("127.0.0.1", ZK.port)
    else:
        port = free_port()
        QUORUM = Server("quorum", extra_args=["--listen-zk-urls", "http://127.0.0.1:%d" % port])
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
            QUORUM.stop()
        except Exception:
            print(QUORUM.log_tail(20000), file=sys.stderr)
            raise
        finally:
            QUORUM.cleanup()
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
    with socket.create_connection(SERVER, 10) as s:
        s.sendall(word)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out.decode()
            out += b


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
        d.close()
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

    def test_negative_length(self):
        c = Raw()
        c.s.sendall(struct.pack(">i", -5))
        self.assertTrue(c.closed_by_server())
        c.close()


class FourLetterWords(unittest.TestCase):
    def test_srvr_whitelisted_by_default(self):
        out = four(b"srvr")
        self.assertTrue(out.startswith("Zookeeper version: 3.8."), out)
        for field in ("Latency min/avg/max:", "Received:", "Sent:", "Connections:",
                      "Outstanding:", "Zxid: 0x", "Mode: ", "Node count:"):
            self.assertIn(field, out)

    def test_others_not_whitelisted(self):
        for w in (b"ruok", b"stat", b"mntr", b"cons", b"envi"):
            self.assertEqual(four(w), "%s is not executed because it is not in the whitelist.\n"
                             % w.decode())


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
