"""TLS on every link: a three-member cluster with https:// client and peer
URLs and client-certificate auth on both, its certificates made by running
exactly the recipe in docs/security.md. etcdctl 3.4 and python3-etcd3 work
with the right certificate and are refused without one or with one from
another CA; plain text, a truncated ClientHello and a peer without a
certificate are refused while the cluster keeps serving; certificates are
reloaded; --cipher-suites takes Go's names.

TARGET=etcd runs the same test against three etcd 3.4 members: the
expectations are etcd's (a few log checks are quorum's own and skipped)."""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import harness  # noqa: E402
from harness import ROOT, TLS, Server  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
DOC = os.path.join(ROOT, "docs", "security.md")
FAST = ["--dial-timeout=2s", "--command-timeout=4s"]


def refused_line(listener, error='[^"]*'):
    """etcd's "rejected connection" line for a refused TLS handshake on
    |listener| (client or peer), in quorum's default (capnslog) format."""
    return (r'W \| tls: rejected connection \{"remote-addr": "127\.0\.0\.1:\d+", '
            r'"server-name": "[^"]*", "error": "%s", "listener": "%s"\}' % (error, listener))


def recipe():
    """The shell lines of the certificate recipe in docs/security.md."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- tls-recipe-begin -->\s*```sh\n(.*?)```\s*<!-- tls-recipe-end -->", text,
                  re.S)
    if not m:
        raise RuntimeError("no tls-recipe block in docs/security.md")
    return m.group(1)


def run_recipe(d):
    r = subprocess.run(["bash", "-e", "-c", recipe()], cwd=d, capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError("the recipe failed: %s%s" % (r.stdout, r.stderr))
    for f in ("ca.crt", "server.crt", "server.key", "peer.crt", "peer.key", "client.crt",
              "client.key"):
        assert os.path.exists(os.path.join(d, f)), f


def tls_of(d, **kw):
    p = lambda f: os.path.join(d, f)  # noqa: E731
    return TLS(p("ca.crt"), p("server.crt"), p("server.key"), p("peer.crt"), p("peer.key"),
               p("client.crt"), p("client.key"), **kw)


def etcdctl(endpoint, *args, flags=(), timeout=30):
    env = dict(os.environ, ETCDCTL_API="3")
    return subprocess.run(["etcdctl", "--endpoints", endpoint] + FAST + list(flags) + list(args),
                          capture_output=True, text=True, env=env, timeout=timeout)


def client_hello():
    """A real TLS ClientHello, as Python's ssl module writes it."""
    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def peer_cn(port, ca):
    """The common name of the certificate a fresh TLS connection to port sees."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            subj = dict(x[0] for x in t.getpeercert()["subject"])
            return subj.get("commonName")


class TLSCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tls-test-")
        cls.good = os.path.join(cls.tmp, "good")
        cls.other = os.path.join(cls.tmp, "other")  # the same recipe: another CA
        os.mkdir(cls.good)
        os.mkdir(cls.other)
        run_recipe(cls.good)
        run_recipe(cls.other)
        cls.tls = tls_of(cls.good)
        cls.c = cluster.Cluster(TARGET, n=3, tls=cls.tls)
        cls.c.start()

    @classmethod
    def tearDownClass(cls):
        cls.c.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ep(self, i=0):
        return "https://" + self.c.endpoint(i)

    def ctl(self, *args, i=0, **kw):
        r = self.c.etcdctl(i, *args, **kw)
        return r

    def assertServing(self):
        """every member still answers a linearizable read over TLS"""
        for i in range(3):
            r = self.c.etcdctl(i, "get", "serving-check", command_timeout="10s")
            self.assertEqual(r.returncode, 0, r.stderr)

    def member_logs(self):
        return "".join(m.log() for m in self.c.members)

    # ---- the right certificate: everything works ----

    def test_etcdctl_with_certificate(self):
        self.assertEqual(self.ctl("put", "tls/k", "v").stdout, "OK\n")
        self.assertEqual(self.ctl("get", "tls/k", i=1).stdout, "tls/k\nv\n")
        txn = 'value("tls/k") = "v"\n\nput tls/t yes\n\nput tls/t no\n\n'
        r = self.ctl("txn", input=txn, i=2)
        self.assertEqual(r.stdout, "SUCCESS\n\nOK\n")
        self.assertEqual(self.ctl("get", "tls/t").stdout, "tls/t\nyes\n")
        self.assertEqual(self.ctl("del", "tls/t").stdout, "1\n")
        # lease
        r = self.ctl("lease", "grant", "60")
        m = re.match(r"lease ([0-9a-f]+) granted with TTL\(60s\)", r.stdout)
        self.assertTrue(m, r.stdout)
        self.assertEqual(self.ctl("put", "tls/l", "x", "--lease=" + m.group(1)).stdout, "OK\n")
        self.assertIn("revoked", self.ctl("lease", "revoke", m.group(1)).stdout)
        self.assertEqual(self.ctl("get", "tls/l").stdout, "")
        # lock: runs the command while holding it
        r = self.ctl("lock", "tls-lock", "echo", "locked")
        self.assertEqual(r.stdout.strip(), "locked")
        # member list: the advertised URLs keep their https scheme
        r = self.ctl("member", "list")
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 3, r.stdout)
        for ln in lines:
            f = [x.strip() for x in ln.split(",")]
            self.assertTrue(f[3].startswith("https://127.0.0.1:"), ln)
            self.assertTrue(f[4].startswith("https://127.0.0.1:"), ln)
        # endpoint health over --cluster uses those URLs
        r = self.ctl("endpoint", "health", "--cluster")
        self.assertEqual((r.stdout + r.stderr).count("is healthy"), 3, r.stdout + r.stderr)

    def test_etcdctl_watch(self):
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.Popen(["etcdctl", "--endpoints", self.c.endpoint(1)]
                             + self.tls.etcdctl_flags() + ["watch", "tls/w"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            got = []

            def reader():
                for line in p.stdout:
                    got.append(line)
                    if len(got) >= 3:
                        return
            t = threading.Thread(target=reader, daemon=True)
            t.start()
            # the watch is created asynchronously: put until it sees one
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                self.ctl("put", "tls/w", "hello")
                time.sleep(0.2)
            t.join(timeout=30)
            self.assertEqual(got[:3], ["PUT\n", "tls/w\n", "hello\n"])
        finally:
            p.kill()
            p.wait()

    def test_python_etcd3(self):
        import etcd3
        c = etcd3.client("127.0.0.1", self.c.members[2].client_port, timeout=10,
                         **self.tls.etcd3_kwargs())
        c.put("tls/py", "from python")
        v, _ = c.get("tls/py")
        self.assertEqual(v, b"from python")
        ok, _ = c.transaction(compare=[c.transactions.value("tls/py") == "from python"],
                              success=[c.transactions.put("tls/py2", "y")], failure=[])
        self.assertTrue(ok)
        lease = c.lease(30)
        c.put("tls/pyl", "z", lease=lease)
        self.assertEqual(c.get("tls/pyl")[0], b"z")
        lease.revoke()
        self.assertEqual(c.get("tls/pyl")[0], None)
        c.close()

    def test_quorumctl(self):
        """quorumctl takes etcdctl's TLS flags"""
        q = harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")
        flags = ["--endpoints", self.ep(1), "--dial-timeout=2s", "--command-timeout=4s"]
        r = subprocess.run([q] + flags + self.tls.etcdctl_flags() + ["put", "tls/q", "qv"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout), (0, "OK\n"), r.stderr)
        r = subprocess.run([q] + flags + self.tls.etcdctl_flags() + ["get", "tls/q"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.stdout, "tls/q\nqv\n", r.stderr)
        # no client certificate: refused
        r = subprocess.run([q] + flags + ["--cacert", self.tls.ca, "get", "tls/q"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("Error:", r.stderr)
        # the server's certificate is not from the CA given: refused, and why
        o = tls_of(self.other)
        r = subprocess.run([q] + flags + o.etcdctl_flags() + ["get", "tls/q"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        # ... unless verification is skipped
        r = subprocess.run([q] + flags + ["--insecure-skip-tls-verify", "--cert",
                                          self.tls.client_cert, "--key", self.tls.client_key,
                                          "get", "tls/q"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.stdout, "tls/q\nqv\n", r.stderr)
        # a CA file that is not there: etcdctl's words and exit code
        missing = os.path.join(self.tmp, "missing-ca.crt")
        want = etcdctl(self.ep(1), "get", "x", flags=["--cacert", missing])
        r = subprocess.run([q] + flags + ["--cacert", missing, "get", "x"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stderr), (want.returncode, want.stderr))
        self.assertEqual(r.stderr, "Error: open %s: no such file or directory\n" % missing)

    def test_member_add_and_remove_over_tls(self):
        """a member added with an https:// peer URL catches up over TLS
        links (messages and, if the leader chooses, a snapshot stream)"""
        self.ctl("put", "tls/before-add", "1")
        j = self.c.add_member("m3")
        try:
            r = self.c.etcdctl(j, "get", "tls/before-add", "--consistency=s")
            self.assertEqual(r.stdout, "tls/before-add\n1\n")
            self.assertEqual(len(self.ctl("member", "list").stdout.strip().splitlines()), 4)
        finally:
            self.c.remove_member(j)
        self.assertServing()

    # ---- refusals ----

    def test_etcdctl_without_certificate_refused(self):
        r = etcdctl(self.ep(), "get", "x", flags=["--cacert", self.tls.ca])
        self.assertEqual(r.returncode, 1)
        self.assertIn("Error: context deadline exceeded", r.stderr)
        self.assertServing()

    def test_etcdctl_with_other_ca_certificate_refused(self):
        o = tls_of(self.other)
        r = etcdctl(self.ep(1), "get", "x",
                    flags=["--cacert", self.tls.ca, "--cert", o.client_cert, "--key",
                           o.client_key])
        self.assertEqual(r.returncode, 1)
        self.assertIn("Error: context deadline exceeded", r.stderr)
        # and a client that trusts another CA refuses the server
        r = etcdctl(self.ep(1), "get", "x", flags=o.etcdctl_flags())
        self.assertEqual(r.returncode, 1)
        self.assertIn("Error: context deadline exceeded", r.stderr)
        self.assertServing()

    def test_python_etcd3_other_ca_refused(self):
        import etcd3
        o = tls_of(self.other)
        c = etcd3.client("127.0.0.1", self.c.members[0].client_port, timeout=3, ca_cert=o.ca,
                         cert_key=self.tls.client_key, cert_cert=self.tls.client_cert)
        with self.assertRaises(Exception):
            c.get("x")
        c.close()
        c = etcd3.client("127.0.0.1", self.c.members[0].client_port, timeout=3,
                         ca_cert=self.tls.ca, cert_key=o.client_key, cert_cert=o.client_cert)
        with self.assertRaises(Exception):
            c.get("x")
        c.close()
        self.assertServing()

    def test_plain_text_client_refused(self):
        r = etcdctl("http://" + self.c.endpoint(0), "get", "x")
        self.assertEqual(r.returncode, 1)
        self.assertIn("Error: context deadline exceeded", r.stderr)
        # the raw HTTP/2 preface: the connection is closed, with a TLS alert at most
        with socket.create_connection(("127.0.0.1", self.c.members[0].client_port),
                                      timeout=10) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0" * 64)
            data = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                data += b
            self.assertLess(len(data), 64)
            self.assertFalse(data.startswith(b"\x00\x00"), "no HTTP/2 frames: %r" % data)
        self.assertServing()
        if TARGET == "quorum":
            self.assertRegex(self.member_logs(), refused_line("client"))

    def test_truncated_handshake(self):
        hello = client_hello()
        self.assertGreater(len(hello), 40)
        for port in (self.c.members[1].client_port, self.c.members[1].peer_port):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(hello[:len(hello) // 2])
            # and one that sends half then waits for an answer that never comes
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(hello[:len(hello) // 2])
            with self.assertRaises(socket.timeout):
                s.recv(100)
            if TARGET == "quorum":
                # quorum gives up on it after its handshake timeout (10 s)
                s.settimeout(60)
                self.assertEqual(s.recv(100), b"")
            s.close()
        self.assertServing()
        if TARGET == "quorum":
            logs = self.member_logs()
            self.assertIn("the peer closed the connection during the handshake", logs)
            self.assertRegex(logs, refused_line("client"))
            self.assertIn("handshake not completed within 10000 ms", logs)

    def test_peer_without_certificate_refused(self):
        port = self.c.members[2].peer_port
        ctx = ssl.create_default_context(cafile=self.tls.ca)
        ctx.check_hostname = False
        refused = False
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                with ctx.wrap_socket(s) as t:
                    # TLS 1.3: the client's side completes; the refusal comes next
                    t.sendall(b"QRMT\0\1\0\0" + b"\0" * 24)
                    refused = t.recv(100) == b""
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                refused = True
        self.assertTrue(refused)
        # a member certificate from another CA
        o = tls_of(self.other)
        ctx = ssl.create_default_context(cafile=self.tls.ca)
        ctx.check_hostname = False
        ctx.load_cert_chain(o.peer_cert, o.peer_key)
        refused = False
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                with ctx.wrap_socket(s) as t:
                    t.sendall(b"QRMT\0\1\0\0" + b"\0" * 24)
                    refused = t.recv(100) == b""
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                refused = True
        self.assertTrue(refused)
        self.assertServing()
        if TARGET == "quorum":
            log = self.c.members[2].log()
            self.assertRegex(log, refused_line("peer", "[^\"]*peer did not return a certificate"))

    def test_member_with_plain_peer_urls_cannot_join(self):
        """a fourth process that dials the members' peer ports in plain text
        never reaches them: the three keep serving"""
        purls = ",".join("m%d=http://127.0.0.1:%d" % (m.index, m.peer_port)
                         for m in self.c.members)
        d = tempfile.mkdtemp(dir=self.tmp)
        cp, pp = harness.free_port(), harness.free_port()
        binary = harness.quorum_binary() if TARGET == "quorum" else harness.etcd_binary()
        log = open(os.path.join(d, "rogue.log"), "wb")
        p = subprocess.Popen([binary, "--name", "rogue", "--data-dir", os.path.join(d, "data"),
                              "--listen-client-urls", "http://127.0.0.1:%d" % cp,
                              "--advertise-client-urls", "http://127.0.0.1:%d" % cp,
                              "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                              "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
                              "--initial-cluster", purls + ",rogue=http://127.0.0.1:%d" % pp,
                              "--initial-cluster-token", "test-cluster"],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            time.sleep(2)
            self.assertServing()
            r = self.ctl("member", "list")
            self.assertEqual(len(r.stdout.strip().splitlines()), 3)
        finally:
            p.kill()
            p.wait()
            log.close()

    def test_the_recipe_is_the_one_in_the_doc(self):
        """the certificates above came from the doc's lines; check what they say"""
        out = subprocess.run(["openssl", "x509", "-in", self.tls.server_cert, "-noout", "-text"],
                             capture_output=True, text=True).stdout
        self.assertIn("IP Address:127.0.0.1", out)
        out = subprocess.run(["openssl", "x509", "-in", self.tls.client_cert, "-noout",
                              "-subject"], capture_output=True, text=True).stdout
        self.assertIn("CN = root", out)


class TLSReloadAndCiphers(unittest.TestCase):
    """Single members with their own copies of the certificates."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tls-test-")
        cls.good = os.path.join(cls.tmp, "good")
        os.mkdir(cls.good)
        run_recipe(cls.good)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def copy_certs(self):
        d = tempfile.mkdtemp(dir=self.tmp)
        for f in os.listdir(self.good):
            shutil.copy(os.path.join(self.good, f), d)
        return d

    def reissue(self, d, cn):
        """a new server certificate with common name |cn|, moved into place
        over server.crt/server.key (key first: the pair is checked)"""
        sub = subprocess.run(
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout new.key -out new.csr -subj /CN=%s && "
            "openssl x509 -req -in new.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
            "-days 825 -extfile member.ext -out new.crt && "
            "cat new.crt > both.tmp && mv new.key server.key && mv new.crt server.crt" % cn,
            shell=True, cwd=d, capture_output=True, text=True)
        self.assertEqual(sub.returncode, 0, sub.stderr)

    def test_reload_on_changed_files(self):
        d = self.copy_certs()
        t = tls_of(d, peer=False)
        with Server(TARGET, tls=t) as s:
            self.assertEqual(peer_cn(s.client_port, t.ca), "server")
            s.etcdctl("put", "k", "before")
            self.reissue(d, "server-renewed")
            # picked up by new connections (quorum looks at the files at most
            # once a second; etcd reads them at each handshake)
            deadline = time.monotonic() + 30
            cn = None
            while time.monotonic() < deadline:
                cn = peer_cn(s.client_port, t.ca)
                if cn == "server-renewed":
                    break
                time.sleep(0.2)
            self.assertEqual(cn, "server-renewed")
            self.assertEqual(s.etcdctl("get", "k").stdout, "k\nbefore\n")

    @unittest.skipIf(TARGET != "quorum", "etcd 3.4 exits on SIGHUP")
    def test_reload_on_sighup_keeps_open_connections(self):
        d = self.copy_certs()
        t = tls_of(d, peer=False)
        with Server(TARGET, tls=t) as s:
            import etcd3
            c = etcd3.client("127.0.0.1", s.client_port, timeout=10, **t.etcd3_kwargs())
            c.put("k", "v1")
            self.reissue(d, "server-sighup")
            os.kill(s.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 30
            cn = None
            while time.monotonic() < deadline:
                cn = peer_cn(s.client_port, t.ca)
                if cn == "server-sighup":
                    break
                time.sleep(0.1)
            self.assertEqual(cn, "server-sighup")
            # the connection opened before the reload still works
            c.put("k", "v2")
            self.assertEqual(c.get("k")[0], b"v2")
            c.close()
            self.assertIsNone(s.proc.poll())
            self.assertIn("reloaded the certificates", s.log_tail(20000))
            # a broken file: logged, the old certificate stays
            with open(os.path.join(d, "server.crt"), "w") as f:
                f.write("garbage\n")
            os.kill(s.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                # the reload is tried when the next connection starts
                self.assertEqual(peer_cn(s.client_port, t.ca), "server-sighup")
                if "keeping the old ones" in s.log_tail(20000):
                    break
                time.sleep(0.1)
            self.assertIn("keeping the old ones", s.log_tail(20000))

    def test_cipher_suites(self):
        d = self.copy_certs()
        t = tls_of(d, peer=False, client_cert_auth=False,
                   extra=["--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"])
        with Server(TARGET, tls=t) as s:
            def tls12(cipher):
                ctx = ssl.create_default_context(cafile=t.ca)
                ctx.load_cert_chain(t.client_cert, t.client_key)
                ctx.maximum_version = ssl.TLSVersion.TLSv1_2
                ctx.set_ciphers(cipher)
                with socket.create_connection(("127.0.0.1", s.client_port), timeout=10) as so:
                    with ctx.wrap_socket(so, server_hostname="127.0.0.1") as x:
                        return x.cipher()[0]
            self.assertEqual(tls12("ECDHE-ECDSA-AES128-GCM-SHA256"),
                             "ECDHE-ECDSA-AES128-GCM-SHA256")
            with self.assertRaises(ssl.SSLError):
                tls12("ECDHE-ECDSA-AES256-GCM-SHA384")
        # an unknown name stops the start with etcd's words
        s = Server(TARGET, extra_args=["--cipher-suites", "TLS_NOT_A_SUITE"])
        try:
            r = subprocess.run(s.args(), capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn('unexpected TLS cipher suite "TLS_NOT_A_SUITE"', r.stdout + r.stderr)
        finally:
            s.cleanup()

    def test_peer_cert_allowed_cn(self):
        """--peer-cert-allowed-cn: members whose certificates have that
        common name form a cluster; with another name they refuse each
        other (etcd's words: "client certificate authentication failed")"""
        t = tls_of(self.good, extra=["--peer-cert-allowed-cn", "peer"])
        with cluster.Cluster(TARGET, n=3, tls=t) as c:
            self.assertEqual(c.etcdctl(0, "put", "cn", "ok").stdout, "OK\n")
            self.assertEqual(c.etcdctl(2, "get", "cn").stdout, "cn\nok\n")
        t = tls_of(self.good, extra=["--peer-cert-allowed-cn", "somebody-else"])
        c = cluster.Cluster(TARGET, n=3, tls=t)
        try:
            for m in c.members:
                m.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if any("client certificate authentication failed" in m.log()
                       for m in c.members):
                    break
                time.sleep(0.2)
            self.assertTrue(any("client certificate authentication failed" in m.log()
                                for m in c.members))
            r = c.etcdctl(0, "put", "cn", "no", check=False, command_timeout="2s")
            self.assertNotEqual(r.returncode, 0)
        finally:
            c.cleanup()

    def test_unix_sockets(self):
        """unix:// and unixs:// client URLs (etcd's): a unix socket each, the
        second with TLS and client certificates. Named as etcd's docs do,
        "unix://localhost:PORT": a socket file of that name in the working
        directory (the server's certificate is valid for localhost)"""
        d = self.copy_certs()
        t = tls_of(d, peer=False)
        plain = "localhost:%d" % harness.free_port()
        secure = "localhost:%d" % harness.free_port()
        cwd = os.getcwd()
        os.chdir(d)
        s = Server(TARGET, tls=t)
        args = s.args()
        i = args.index("--listen-client-urls") + 1
        args[i] += ",unix://%s,unixs://%s" % (plain, secure)
        s.args = lambda: args
        try:
            s.start()
            r = etcdctl("unix://" + plain, "put", "u", "plain")
            self.assertEqual(r.stdout, "OK\n", r.stderr)
            r = etcdctl("unixs://" + secure, "get", "u", flags=t.etcdctl_flags())
            self.assertEqual(r.stdout, "u\nplain\n", r.stderr)
            # no client certificate on the TLS socket: refused
            r = etcdctl("unixs://" + secure, "get", "u", flags=["--cacert", t.ca])
            self.assertEqual(r.returncode, 1)
            self.assertIn("Error: context deadline exceeded", r.stderr)
            # quorumctl too
            q = harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")
            r = subprocess.run([q, "--endpoints", "unixs://" + secure, "--dial-timeout=2s"]
                               + t.etcdctl_flags() + ["get", "u"], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.stdout, "u\nplain\n", r.stderr)
            s.stop()
            if TARGET == "quorum":  # the socket files go with the member
                self.assertFalse(os.path.exists(plain))
                self.assertFalse(os.path.exists(secure))
        finally:
            s.cleanup()
            os.chdir(cwd)

    def client_cert(self, d, cn):
        """a client certificate with common name |cn| from the recipe's CA"""
        r = subprocess.run(
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
            "-keyout {0}.key -out {0}.csr -subj /CN={0} && "
            "openssl x509 -req -in {0}.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
            "-days 825 -extfile client.ext -out {0}.crt".format(cn),
            shell=True, cwd=d, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return ["--cacert", os.path.join(d, "ca.crt"), "--cert", os.path.join(d, cn + ".crt"),
                "--key", os.path.join(d, cn + ".key")]

    def test_common_name_is_the_user(self):
        """with auth on and --client-cert-auth, a request without a token is
        made as the user its client certificate names (etcd's
        AuthInfoFromTLS); a token, when given, wins"""
        d = self.copy_certs()
        t = tls_of(d, peer=False)
        with Server(TARGET, tls=t) as s:
            ep = "https://" + s.endpoint
            root = t.etcdctl_flags()  # the recipe's client certificate: CN root
            app = self.client_cert(d, "app")
            ghost = self.client_cert(d, "ghost")

            def ctl(flags, *args):
                return etcdctl(ep, *args, flags=flags)
            for cmd in (["user", "add", "root:rootpw"], ["user", "add", "app:apppw"],
                        ["role", "add", "approle"],
                        ["role", "grant-permission", "approle", "readwrite", "/app/",
                         "--prefix"],
                        ["user", "grant-role", "app", "approle"], ["auth", "enable"]):
                r = ctl(root, *cmd)
                self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(ctl(root, "put", "/other", "by-root").stdout, "OK\n")
            self.assertEqual(ctl(app, "put", "/app/x", "by-app").stdout, "OK\n")
            r = ctl(app, "put", "/other", "by-app")
            self.assertEqual(r.returncode, 1)
            self.assertIn("Error: etcdserver: permission denied", r.stderr)
            r = ctl(app, "get", "/other")
            self.assertIn("Error: etcdserver: permission denied", r.stderr)
            r = ctl(ghost, "put", "/app/y", "by-ghost")
            self.assertEqual(r.returncode, 1)
            # a name that is no user: as etcd, permission denied
            self.assertIn("Error: etcdserver: permission denied", r.stderr)
            # a token wins over the certificate's name
            r = ctl(app + ["--user", "root:rootpw"], "put", "/other", "root-by-token")
            self.assertEqual(r.stdout, "OK\n", r.stderr)
            self.assertEqual(ctl(root, "get", "/other", "--print-value-only").stdout,
                             "root-by-token\n")
            # python3-etcd3 with the certificate alone
            import etcd3
            c = etcd3.client("127.0.0.1", s.client_port, timeout=10, ca_cert=t.ca,
                             cert_cert=os.path.join(d, "app.crt"),
                             cert_key=os.path.join(d, "app.key"))
            c.put("/app/py", "1")
            self.assertEqual(c.get("/app/py")[0], b"1")
            c.close()

    def test_https_without_certificate_refused_at_start(self):
        s = Server(TARGET)
        try:
            args = s.args()
            curl = "https://127.0.0.1:%d" % s.client_port
            args[args.index("--listen-client-urls") + 1] = curl
            args[args.index("--advertise-client-urls") + 1] = curl
            r = subprocess.run(args, capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("TLS key/cert (--cert-file, --key-file) must be provided for client "
                          "url %s with HTTPS scheme" % curl, r.stdout + r.stderr)
        finally:
            s.cleanup()
        s = Server(TARGET)
        try:
            args = s.args()
            purl = "https://127.0.0.1:%d" % s.peer_port
            args[args.index("--listen-peer-urls") + 1] = purl
            args[args.index("--initial-advertise-peer-urls") + 1] = purl
            args[args.index("--initial-cluster") + 1] = "default=" + purl
            r = subprocess.run(args, capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("cannot listen on TLS for 127.0.0.1:%d: KeyFile and CertFile are not "
                          "presented" % s.peer_port, r.stdout + r.stderr)
        finally:
            s.cleanup()

    def test_auto_tls(self):
        with tempfile.TemporaryDirectory(dir=self.tmp) as d:
            s = Server(TARGET, data_dir=os.path.join(d, "data"), extra_args=["--auto-tls"])
            curl = "https://127.0.0.1:%d" % s.client_port
            args = s.args()
            args[args.index("--listen-client-urls") + 1] = curl
            args[args.index("--advertise-client-urls") + 1] = curl
            s.args = lambda: args
            s.etcdctl = lambda *a, check=True, timeout=30, input=None: etcdctl(
                curl, *a, flags=["--insecure-skip-tls-verify", "--insecure-transport=false"],
                timeout=timeout)
            s.log_path = os.path.join(d, "auto.log")
            try:
                s.start()
                self.assertEqual(s.etcdctl("put", "a", "b").stdout, "OK\n")
                for f in ("cert.pem", "key.pem"):
                    self.assertTrue(os.path.exists(os.path.join(d, "data", "fixtures", "client",
                                                                f)), f)
            finally:
                s.kill()


class TLSZooKeeper(unittest.TestCase):
    """--listen-zk-urls https://...: ZooKeeper's secureClientPort with the
    client port's certificate flags. kazoo with the client certificate
    works; kazoo without TLS, without a certificate or with one from
    another CA is refused, and the member keeps serving."""

    @unittest.skipIf(TARGET != "quorum", "quorum's ZooKeeper face")
    def test_kazoo_over_tls(self):
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        tmp = tempfile.mkdtemp(prefix="tls-zk-")
        try:
            good, other = os.path.join(tmp, "good"), os.path.join(tmp, "other")
            os.mkdir(good)
            os.mkdir(other)
            run_recipe(good)
            run_recipe(other)
            p = lambda f: os.path.join(good, f)  # noqa: E731
            port = harness.free_port()
            srv = Server("quorum", extra_args=[
                "--listen-zk-urls", "https://127.0.0.1:%d" % port,
                "--cert-file", p("server.crt"), "--key-file", p("server.key"),
                "--trusted-ca-file", p("ca.crt"), "--client-cert-auth"])
            srv.start()
            try:
                hosts = "127.0.0.1:%d" % port

                def client(**kw):
                    return KazooClient(hosts=hosts, timeout=5, connection_retry={"max_tries": 0},
                                       **kw)
                # a second client certificate from the same CA, another name
                sub = subprocess.run(
                    "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                    "-keyout other.key -out other.csr -subj /CN=other/O=apps && "
                    "openssl x509 -req -in other.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                    "-days 825 -extfile member.ext -out other.crt",
                    shell=True, cwd=good, capture_output=True, text=True)
                self.assertEqual(sub.returncode, 0, sub.stderr)

                def subject(crt):
                    out = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-subject",
                                          "-nameopt", "RFC2253"], capture_output=True,
                                         text=True, check=True).stdout
                    return out.strip().split("=", 1)[1]
                from kazoo.exceptions import NoAuthError
                from kazoo.security import ACL, Id
                zk = client(use_ssl=True, ca=p("ca.crt"), certfile=p("client.crt"),
                            keyfile=p("client.key"), verify_certs=True)
                zk.start(timeout=15)
                two = client(use_ssl=True, ca=p("ca.crt"), certfile=p("other.crt"),
                             keyfile=p("other.key"), verify_certs=True)
                two.start(timeout=15)
                try:
                    zk.create("/tls", b"secret", ephemeral=True)
                    self.assertEqual(zk.get("/tls")[0], b"secret")
                    # the certificate is the identity of ZooKeeper's x509
                    # scheme: its subject, RFC 2253; "auth" means it too
                    self.assertEqual(subject(p("other.crt")), "O=apps,CN=other")
                    mine = ACL(31, Id("x509", subject(p("client.crt"))))
                    zk.create("/x509", b"mine", acl=[mine])
                    zk.create("/auth", b"mine too", acl=[ACL(31, Id("auth", ""))])
                    self.assertEqual(zk.get_acls("/auth")[0], [mine])
                    for path in ("/x509", "/auth"):
                        self.assertEqual(zk.get(path)[0][:4], b"mine")
                        with self.assertRaises(NoAuthError):
                            two.get(path)
                    zk.delete("/x509")
                    zk.delete("/auth")
                finally:
                    two.stop()
                    two.close()
                    zk.stop()
                    zk.close()
                o = lambda f: os.path.join(other, f)  # noqa: E731
                for name, kw in (
                        ("plain text", {}),
                        ("no certificate", dict(use_ssl=True, ca=p("ca.crt"))),
                        ("another CA's certificate",
                         dict(use_ssl=True, ca=p("ca.crt"), certfile=o("client.crt"),
                              keyfile=o("client.key")))):
                    bad = client(**kw)
                    with self.assertRaises(KazooTimeoutError, msg=name):
                        bad.start(timeout=4)
                    bad.stop()
                    bad.close()
                # still serving
                zk = client(use_ssl=True, ca=p("ca.crt"), certfile=p("client.crt"),
                            keyfile=p("client.key"), verify_certs=True)
                zk.start(timeout=15)
                self.assertIsNone(zk.exists("/tls"))
                zk.stop()
                zk.close()
                with open(srv.log_path, errors="replace") as f:
                    log = f.read()
                for why in ("handshake: wrong version number",
                            "handshake: peer did not return a certificate",
                            "handshake: certificate verify failed: unable to get local issuer "
                            "certificate"):
                    self.assertRegex(log, refused_line("zk", re.escape(why)))
            finally:
                srv.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
