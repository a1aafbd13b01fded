#!/usr/bin/python3
"""etcd's v2 keys API (/v2/keys/...) served on the v3 store, the way etcd 3.4.23
does it with `--enable-v2=true --experimental-enable-v2v3=/v2v3` ("v2v3 mode"),
against quorum (TARGET=quorum, the default; it gets the same two flags) or etcd
3.4 itself (TARGET=etcd), which every expectation was taken from.

    cd /work/main && TARGET=etcd /usr/bin/python3 tests/integration/test_v2.py [-k name]
    /usr/bin/python3 tests/integration/test_v2.py Keys.test_compare_and_swap

Requests go out as curl (the seed's three TTL-lock commands, verbatim) or over
http.client (what urllib uses); bodies are compared byte for byte, encoded the
way Go's encoding/json writes them (field order, "<>&" as \\u003c.., trailing
newline). Indexes are not normalised away: each case reads the current index
first and expects base+n. What is normalised: v2-store expiration times and
ttls (Ttl, V2StoreLock), and the wall-clock keys of etcd's in-order POSTs.

The full reference (key layout, every operation as the v3 requests it makes,
exact bodies, differences from the v2 store) is /work/notes/v2.md. In short:

* A v2 node /a/b is the v3 key "/v2v3/003/k//1/a/b" ("<prefix>/<depth %03d>/k/"
  + "/1" + path; depth = number of "/" in "/1/a/b"); a directory is the same key
  with a trailing "/" (value "" or whatever value the request carried); every
  mutating request also puts "<prefix>/act" = the action name in the same txn.
  v2 index = v3 revision - 1 (createdIndex, modifiedIndex, X-Etcd-Index, error
  index); every v3 write anywhere moves it.
* TTLs: etcd's v2v3 mode refuses any ttl (even 0), or refresh=true, with 500
  {"errorCode":300,"message":"Raft Internal Error","cause":"TTLs are
  unsupported","index":0}, so the classic TTL lock (the seed's three curls)
  cannot be taken there. quorum departs from it on purpose: each ttl is a v3
  lease of the key's own, and the lock works as with etcd's real v2 store
  (class Ttl asserts the refusal for TARGET=etcd and the working lock for
  quorum; class V2StoreLock runs the lock against etcd's plain --enable-v2
  and against quorum in v2v3 mode, with the same expectations).
* In-order keys (POST): v2v3 names them after Go's time.Now().String(),
  answers the directory's path and does not make the directory. quorum makes
  the v2 store's keys instead: <dir>/<20-digit index>, named in the answer,
  the directory made (test_in_order_post asserts each target's way).
* X-Etcd-Cluster-Id is the constant "e7cd2f00d"; X-Raft-Index and X-Raft-Term
  are "0" on success and absent on errors.
* Waits: waitIndex=N starts at v3 revision N, i.e. v2 index N-1 (one early);
  a compacted waitIndex gives 200 with an empty body (never 401); a recursive
  wait matches by string prefix (/d also sees /dx) and skips "_" keys below it;
  one event per revision (the longest key of it).

Gaps of etcd 3.4.23 that quorum is expected to close (see ETCD_GAPS)
* GET /v2/members, /v2/members/leader, /v2/machines, /version and /health hit
  "STUB" panics in v2v3 mode: the connection is closed without any response
  (curl: exit 52, "Empty reply from server"). quorum is expected to answer them
  as etcd does without v2v3 (members/machines of the real cluster).
* A wait whose v3 history holds a revision with no "<prefix>/act" put (a v3
  client's write under the prefix) or with nothing but the act put (a DELETE
  of a missing key writes one) panics in etcd's v2v3 watcher goroutine and
  kills the whole etcd process. quorum must survive and deliver the next v2
  event (it skips such a revision, unless its deletes took keys off a lease:
  that is a TTL's expiry, delivered as "expire" as the v2 store does).
TARGET=etcd asserts the 3.4.23 behaviour; TARGET=quorum asserts the closed one
(V2_EXPECT_ETCD_GAPS=1 makes quorum's run expect the 3.4.23 behaviour instead).

V2StoreLock (the TTL lock: acquire, second client refused, refresh, release,
expiry seen by a waiter, second client succeeds after the TTL) runs for
TARGET=etcd against plain --enable-v2 and for quorum with the v2v3 flags.
"""
import base64
import calendar
import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
ETCD_GAPS = TARGET == "etcd" or os.environ.get("V2_EXPECT_ETCD_GAPS") == "1"

PFX = "/v2v3"
V2V3_FLAGS = ["--enable-v2=true", "--experimental-enable-v2v3=" + PFX]
CLUSTER_ID = "e7cd2f00d"        # v2v3Server.ID(): a constant, not the cluster's id
JSON = "application/json"
CORS = {"Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": "POST, GET, OPTIONS, PUT, DELETE",
        "Access-Control-Allow-Headers": "accept, content-type, authorization"}

# the seed's TTL lock, verbatim ({P}: the client port)
SEED_ACQUIRE = ("curl http://127.0.0.1:{P}/v2/keys/foo -XPUT -d value=bar -d ttl=5 "
                "-d prevExist=false")
SEED_REFRESH = ("curl 'http://127.0.0.1:{P}/v2/keys/foo?prevValue=bar' -XPUT -d ttl=5 "
                "-d refresh=true -d prevExist=true")
SEED_RELEASE = "curl 'http://127.0.0.1:{P}/v2/keys/foo?prevValue=bar' -XDELETE"

MESSAGES = {
    100: "Key not found", 101: "Compare failed", 102: "Not a file", 104: "Not a directory",
    105: "Key already exists", 107: "Root is read only", 108: "Directory not empty",
    201: "PrevValue is Required in POST form",
    202: "The given TTL in POST form is not a number",
    203: "The given index in POST form is not a number", 209: "Invalid field",
    210: "Invalid POST form", 211: "Value provided on refresh",
    212: "A TTL must be provided on refresh", 300: "Raft Internal Error",
}
STATUS = {100: 404, 101: 412, 102: 403, 105: 412, 108: 403, 300: 500}   # others: 400
TTL_UNSUPPORTED = (300, "TTLs are unsupported")

# the wall clock Go's fmt.Sprintf("%020s", time.Now()) writes: the key of an
# in-order POST ("2026-11-25 12:33:56.952163331 +0000 UTC m=+53.110034891")
GO_TIME = (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})? [+-]\d{4} [A-Za-z0-9+-]+ "
           r"m=[+-]\d+\.\d{9}")


# -- expected bodies, in Go's field order ------------------------------------

def gojson(obj):
    """The bytes Go's json.Encoder writes for obj (HTML-safe escapes, newline)."""
    s = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                 ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(a, b)
    return s.encode() + b"\n"


def node(key=None, value=None, dir=False, nodes=None, m=0, c=0, exp=None, ttl=0):
    """v2store.NodeExtern: every field omitempty (value is a pointer: "" stays)."""
    d = {}
    if key:
        d["key"] = key
    if value is not None:
        d["value"] = value
    if dir:
        d["dir"] = True
    if exp is not None:
        d["expiration"] = exp
    if ttl:
        d["ttl"] = ttl
    if nodes:
        d["nodes"] = nodes
    if m:
        d["modifiedIndex"] = m
    if c:
        d["createdIndex"] = c
    return d


def event(action, n=None, prev=None):
    d = {"action": action}
    if n is not None:
        d["node"] = n
    if prev is not None:
        d["prevNode"] = prev
    return d


def error(code, cause, index):
    d = {"errorCode": code, "message": MESSAGES[code]}
    if cause:
        d["cause"] = cause
    d["index"] = index
    return d


def v3key(path, dir=False):
    """The v3 key of v2 node |path| ("/a/b" -> "/v2v3/003/k//1/a/b")."""
    full = "/1" + path
    return "%s/%03d/k/%s%s" % (PFX, full.count("/"), full, "/" if dir else "")


# -- HTTP ----------------------------------------------------------------------

class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def h(self, name):
        return self.headers.get(name.lower())

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<%d %r %r>" % (self.status, self.headers, self.body)


def request(ep, method, path, form=None, query=None, data=None, ctype=None, timeout=15):
    """One request on a fresh connection; |form| goes urlencoded in the body."""
    host, port = ep.rsplit(":", 1)
    url = path + ("?" + urllib.parse.urlencode(query) if query else "")
    headers = {}
    if form is not None:
        data = urllib.parse.urlencode(form)
        ctype = ctype or "application/x-www-form-urlencoded"
    if ctype:
        headers["Content-Type"] = ctype
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, url, body=data, headers=headers)
        r = conn.getresponse()
        return Resp(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def curl(template, port, timeout=20):
    """Runs a curl command line given verbatim ({P}: port) with -sS -D - added so
    the status and headers land on stdout before the body. (rc, Resp|None)."""
    argv = shlex.split(template.format(P=port)) + ["-sS", "-D", "-"]
    r = subprocess.run(argv, capture_output=True, timeout=timeout)
    if r.returncode != 0:
        return r.returncode, None
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:] if ":" in ln]
    return 0, Resp(status, headers, body)


class Waiter:
    """GET ...?wait=true. The constructor returns once the status line and
    headers arrived: etcd flushes them as soon as its watch exists, so a write
    made afterwards is seen. read_in_background() reads the body in a watcher
    thread; pending() tells whether it is still blocked."""

    def __init__(self, ep, path, query, timeout=20):
        host, port = ep.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.conn.request("GET", path + "?" + urllib.parse.urlencode(query))
        self.r = self.conn.getresponse()
        self.status = self.r.status
        self.headers = {k.lower(): v for k, v in self.r.getheaders()}
        self.thread = None
        self.result = None
        self.error = None

    def h(self, name):
        return self.headers.get(name.lower())

    def read_in_background(self):
        def run():
            try:
                self.result = self.r.read()
            except Exception as e:  # noqa: BLE001
                self.error = e
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def pending(self, settle=0.4):
        time.sleep(settle)
        return self.thread.is_alive()

    def body(self, timeout=15):
        """The whole body (a non-stream wait ends after one event)."""
        if self.thread is None:
            try:
                return self.r.read()
            finally:
                self.close()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("wait did not return within %ds" % timeout)
        self.close()
        if self.error:
            raise self.error
        return self.result

    def line(self):
        return self.r.readline()

    def close(self):
        try:
            self.conn.sock and self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()


# -- base class ----------------------------------------------------------------

class V2Case(unittest.TestCase):
    """One server per class (flags: cls.flags), shared by its cases; each case
    works below its own top-level directory self.ns ("/<case name>~": no case's
    directory is a string prefix of another's, which matters, see
    test_directory_prefix_siblings)."""
    maxDiff = None
    flags = V2V3_FLAGS
    v2v3 = True

    @classmethod
    def setUpClass(cls):
        cls.s = harness.Server(TARGET, extra_args=cls.flags).start()
        cls.ep = cls.s.endpoint

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def setUp(self):
        self.ns = "/" + self._testMethodName[len("test_"):] + "~"

    # requests
    def req(self, method, key, form=None, query=None, **kw):
        return request(self.ep, method, "/v2/keys" + urllib.parse.quote(key), form, query, **kw)

    def get(self, key, **query):
        return self.req("GET", key, query=query or None)

    def put(self, key, query=None, **form):
        return self.req("PUT", key, form=form, query=query)

    def post(self, key, query=None, **form):
        return self.req("POST", key, form=form, query=query)

    def delete(self, key, **query):
        return self.req("DELETE", key, query=query or None)

    def wait(self, key, **query):
        return Waiter(self.ep, "/v2/keys" + urllib.parse.quote(key), dict(wait="true", **query))

    def index(self):
        """The current v2 index (X-Etcd-Index of a GET of the root)."""
        r = self.get("/")
        self.assertEqual(r.status, 200, r)
        return int(r.h("X-Etcd-Index"))

    def v3(self, prefix=PFX):
        """[(key, value, create_revision, mod_revision, version, lease)] below prefix."""
        out = json.loads(self.s.etcdctl("get", "--prefix", prefix, "-w", "json").stdout)
        def dec(b64):
            return base64.b64decode(b64).decode()
        return [(dec(kv["key"]), dec(kv.get("value", "")), kv["create_revision"],
                 kv["mod_revision"], kv["version"], kv.get("lease", 0))
                for kv in out.get("kvs", [])]

    def leases(self):
        """The ids of the v3 leases that exist."""
        out = self.s.etcdctl("lease", "list").stdout.split()
        return {int(x, 16) for x in out[3:]}

    def lease_of(self, path, dir=False):
        """The v3 lease of v2 node |path| (0: none)."""
        (lease,) = [kv[5] for kv in self.v3() if kv[0] == v3key(path, dir)]
        return lease

    def norm(self, r, ttls=(5,)):
        """Checks and replaces each expiration (RFC 3339, UTC, about ttl s ahead)
        and each ttl (one of |ttls|) by "E" / 0 so that ok()/err() compare the rest."""
        now = time.time()
        body = r.body.decode()
        for exp in re.findall(r'"expiration":"([^"]*)"', body):
            m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", exp)
            self.assertTrue(m, exp)
            t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
            self.assertTrue(now - 2 < t < now + 7, (exp, now))
        for ttl in re.findall(r'"ttl":(\d+)', body):
            self.assertIn(int(ttl), ttls, body)
        body = re.sub(r'"expiration":"[^"]*"', '"expiration":"E"', body)
        body = re.sub(r'"ttl":\d+', '"ttl":5', body)
        r.body = body.encode()
        r.headers.pop("content-length", None)
        return r

    # assertions
    def cluster_headers(self, r):
        if self.v2v3:
            self.assertEqual(r.h("X-Etcd-Cluster-Id"), CLUSTER_ID, r)
        else:
            self.assertRegex(r.h("X-Etcd-Cluster-Id") or "", r"^[0-9a-f]+$", r)

    def raft_headers(self, r):
        if self.v2v3:
            self.assertEqual((r.h("X-Raft-Index"), r.h("X-Raft-Term")), ("0", "0"), r)
        else:
            self.assertRegex(r.h("X-Raft-Index") or "", r"^[1-9][0-9]*$", r)
            self.assertRegex(r.h("X-Raft-Term") or "", r"^[1-9][0-9]*$", r)

    def ok(self, r, status, body, index):
        """A successful keys response: status, headers, exact body."""
        self.assertEqual((r.status, r.body.decode(errors="replace")),
                         (status, gojson(body).decode()), r)
        self.assertEqual(r.h("Content-Type"), JSON)
        self.assertEqual(r.h("X-Etcd-Index"), str(index), r)
        self.cluster_headers(r)
        self.raft_headers(r)
        if r.h("Content-Length") is not None:
            self.assertEqual(int(r.h("Content-Length")), len(r.body))

    def err(self, r, code, cause, index):
        """A v2 error: status of the code, exact body, X-Etcd-Index, no X-Raft-*."""
        self.assertEqual((r.status, r.body.decode(errors="replace")),
                         (STATUS.get(code, 400), gojson(error(code, cause, index)).decode()), r)
        self.assertEqual(r.h("Content-Type"), JSON)
        self.assertEqual(r.h("X-Etcd-Index"), str(index), r)
        self.cluster_headers(r)
        self.assertIsNone(r.h("X-Raft-Index"), r)
        self.assertIsNone(r.h("X-Raft-Term"), r)

    def wait_headers(self, w, index):
        """The headers of a wait: 200, chunked, X-Etcd-Index = the index when the
        watch started (before its event)."""
        self.assertEqual(w.status, 200)
        self.assertEqual(w.h("Content-Type"), JSON)
        self.assertEqual(w.h("Transfer-Encoding"), "chunked")
        self.assertEqual(w.h("X-Etcd-Index"), str(index))
        self.cluster_headers(w)
        self.raft_headers(w)


class ServerPerTest(V2Case):
    """A V2Case whose tests each get a fresh server."""

    @classmethod
    def setUpClass(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        pass

    def setUp(self):
        super().setUp()
        self.s = harness.Server(TARGET, extra_args=self.flags).start()
        self.ep = self.s.endpoint
        self.addCleanup(self.s.cleanup)


# == 1. the keys API: reads, writes, CAS, deletes, directories, errors ==========

class Keys(V2Case):

    def test_get_set(self):
        n, b = self.ns, self.index()
        self.ok(self.put(n + "/foo", value="bar"), 201,
                event("set", node(n + "/foo", "bar", m=b + 1, c=b + 1)), b + 1)
        self.ok(self.get(n + "/foo"), 200,
                event("get", node(n + "/foo", "bar", m=b + 1, c=b + 1)), b + 1)
        self.ok(self.put(n + "/foo", value="baz"), 200,
                event("set", node(n + "/foo", "baz", m=b + 2, c=b + 1),
                      node(n + "/foo", "bar", m=b + 1, c=b + 1)), b + 2)
        # no value at all: value ""
        self.ok(self.put(n + "/empty"), 201,
                event("set", node(n + "/empty", "", m=b + 3, c=b + 3)), b + 3)
        # value from the query when the body has none; the body's wins over the query's
        self.ok(self.req("PUT", n + "/q", query={"value": "fromquery"}), 201,
                event("set", node(n + "/q", "fromquery", m=b + 4, c=b + 4)), b + 4)
        self.ok(self.put(n + "/q", query={"value": "query"}, value="body"), 200,
                event("set", node(n + "/q", "body", m=b + 5, c=b + 4),
                      node(n + "/q", "fromquery", m=b + 4, c=b + 4)), b + 5)
        self.err(self.get(n + "/missing"), 100, n + "/missing", b + 5)
        # quorum=true: the same read
        self.ok(self.get(n + "/foo", quorum="true"), 200,
                event("get", node(n + "/foo", "baz", m=b + 2, c=b + 1)), b + 5)
        # quorum=true turns a wait into a plain GET (its QGET path ignores wait)
        self.ok(self.get(n + "/foo", wait="true", quorum="true"), 200,
                event("get", node(n + "/foo", "baz", m=b + 2, c=b + 1)), b + 5)
        self.err(self.get(n + "/missing", wait="true", quorum="true"), 100, n + "/missing", b + 5)
        # HEAD: a GET's status and headers (Content-Length of its body), no body
        full = self.get(n + "/foo")
        h = self.req("HEAD", n + "/foo")
        self.assertEqual((h.status, h.body), (200, b""))
        self.assertEqual(h.h("Content-Length"), str(len(full.body)))
        self.assertEqual((h.h("X-Etcd-Index"), h.h("X-Raft-Index"), h.h("Content-Type")),
                         (str(b + 5), "0", JSON))
        h = self.req("HEAD", n + "/missing")
        self.assertEqual((h.status, h.body, h.h("X-Etcd-Index")), (404, b"", str(b + 5)))
        # noValueOnSuccess: writes answer the action alone; GET ignores it
        self.ok(self.put(n + "/foo", query={"noValueOnSuccess": "true"}, value="nv"), 200,
                event("set"), b + 6)
        self.ok(self.post(n + "/nvq", query={"noValueOnSuccess": "true"}, value="1"), 201,
                event("create"), b + 7)
        self.ok(self.get(n + "/foo", noValueOnSuccess="true"), 200,
                event("get", node(n + "/foo", "nv", m=b + 6, c=b + 1)), b + 7)
        # Go's HTML-safe JSON escapes; a key with a space; a trailing slash is cleaned
        self.ok(self.put(n + "/esc", value="<a&b>"), 201,
                event("set", node(n + "/esc", "<a&b>", m=b + 8, c=b + 8)), b + 8)
        self.assertIn(b'"value":"\\u003ca\\u0026b\\u003e"', self.get(n + "/esc").body)
        self.ok(self.put(n + "/a b", value="sp"), 201,
                event("set", node(n + "/a b", "sp", m=b + 9, c=b + 9)), b + 9)
        self.ok(self.put(n + "/slash/", value="s"), 201,
                event("set", node(n + "/slash", "s", m=b + 10, c=b + 10)), b + 10)
        # what the v3 store holds: the parent directory made by the first set, the act key
        kv = {k: (v, c, m) for k, v, c, m, _, _ in self.v3()}
        self.assertEqual(kv[v3key(n, dir=True)], ("", b + 2, b + 2))
        self.assertEqual(kv[v3key(n + "/foo")], ("nv", b + 2, b + 7))
        self.assertEqual(kv[v3key(n + "/a b")], ("sp", b + 10, b + 10))
        self.assertEqual(kv[PFX + "/act"][0], "set")
        self.assertEqual(kv[PFX + "/act"][2], b + 11)

    def test_http_details(self):
        n = self.ns
        self.put(n + "/k", value="v")
        r = self.get(n + "/k")
        for k, v in CORS.items():
            self.assertEqual(r.h(k), v)
        r = self.req("PATCH", n + "/k")
        self.assertEqual((r.status, r.body, r.h("Allow"), r.h("Content-Type")),
                         (405, b"Method Not Allowed\n", "HEAD,GET,PUT,POST,DELETE",
                          "text/plain; charset=utf-8"))
        r = self.req("OPTIONS", n + "/k")             # the CORS preflight
        self.assertEqual((r.status, r.body, r.h("Access-Control-Allow-Origin")), (200, b"", "*"))
        r = request(self.ep, "GET", "/v2")
        self.assertEqual((r.status, r.body), (404, b"404 page not found\n"))
        # Go's ServeMux cleans paths with a redirect
        r = request(self.ep, "GET", "/v2/keys%s//k" % n)
        self.assertEqual((r.status, r.h("Location")), (301, "/v2/keys%s/k" % n))
        r = request(self.ep, "GET", "/v2/keys%s/x/../k" % n)
        self.assertEqual((r.status, r.h("Location")), (301, "/v2/keys%s/k" % n))
        # only an urlencoded body is read: other bodies give no value ("")
        b = self.index()
        self.ok(self.req("PUT", n + "/raw", data="value=raw", ctype="text/plain"), 201,
                event("set", node(n + "/raw", "", m=b + 1, c=b + 1)), b + 1)
        self.ok(self.req("PUT", n + "/raw", data='{"value":"j"}', ctype=JSON), 200,
                event("set", node(n + "/raw", "", m=b + 2, c=b + 1),
                      node(n + "/raw", "", m=b + 1, c=b + 1)), b + 2)

    def test_root_is_read_only(self):
        for method, path, form, query in (
                ("PUT", "/v2/keys/", {"value": "x"}, None),
                ("PUT", "/v2/keys", {"value": "x"}, None),
                ("PUT", "/v2/keys/", {"dir": "true"}, None),
                ("POST", "/v2/keys/", {"value": "x"}, None),
                ("DELETE", "/v2/keys/", None, None),
                ("DELETE", "/v2/keys/", None, {"recursive": "true"}),
                ("DELETE", "/v2/keys/", None, {"prevValue": "x"})):
            with self.subTest(method=method, path=path, form=form, query=query):
                self.err(request(self.ep, method, path, form, query), 107, "", 0)
        for path in ("/v2/keys", "/v2/keys/"):
            r = request(self.ep, "GET", path)
            self.assertEqual(r.status, 200)
            self.assertTrue(r.body.startswith(b'{"action":"get","node":{"dir":true'), r)

    def test_create(self):
        n, b = self.ns, self.index()
        self.ok(self.put(n + "/c", value="1", prevExist="false"), 201,
                event("create", node(n + "/c", "1", m=b + 1, c=b + 1)), b + 1)
        self.err(self.put(n + "/c", value="2", prevExist="false"), 105, n + "/c", b + 1)
        # prevExist=false wins over prevValue: a create
        self.err(self.put(n + "/c", value="2", prevExist="false", prevValue="1"), 105, n + "/c",
                 b + 1)
        # missing directories are made in the same txn
        self.ok(self.put(n + "/deep/x/y", value="v", prevExist="false"), 201,
                event("create", node(n + "/deep/x/y", "v", m=b + 2, c=b + 2)), b + 2)
        self.ok(self.get(n + "/deep"), 200,
                event("get", node(n + "/deep", dir=True, m=b + 2, c=b + 2, nodes=[
                    node(n + "/deep/x", dir=True, m=b + 2, c=b + 2)])), b + 2)
        # below a file: 104 naming the whole path
        self.err(self.put(n + "/c/z", value="v", prevExist="false"), 104, n + "/c/z", b + 2)
        self.ok(self.put(n + "/cd", dir="true", prevExist="false"), 201,
                event("create", node(n + "/cd", dir=True, m=b + 3, c=b + 3)), b + 3)
        self.err(self.put(n + "/cd", dir="true", prevExist="false"), 105, n + "/cd", b + 3)
        self.err(self.put(n + "/cd", value="f", prevExist="false"), 105, n + "/cd", b + 3)
        self.err(self.put(n + "/c", dir="true", prevExist="false"), 105, n + "/c", b + 3)

    def test_update(self):
        n, b = self.ns, self.index()
        self.put(n + "/u", value="1")
        self.ok(self.put(n + "/u", value="2", prevExist="true"), 200,
                event("update", node(n + "/u", "2", m=b + 2, c=b + 1),
                      node(n + "/u", "1", m=b + 1, c=b + 1)), b + 2)
        # a missing key: 102 Not a file (the v2 store says 100)
        self.err(self.put(n + "/missing", value="1", prevExist="true"), 102, n + "/missing",
                 b + 2)
        self.put(n + "/ud", dir="true")
        self.err(self.put(n + "/ud", value="1", prevExist="true"), 102, n + "/ud", b + 3)
        self.err(self.put(n + "/ud", dir="true", prevExist="true"), 102, n + "/ud", b + 3)
        # dir=true is ignored by an update: the file gets the value ""
        self.ok(self.put(n + "/u", dir="true", prevExist="true"), 200,
                event("update", node(n + "/u", "", m=b + 4, c=b + 1),
                      node(n + "/u", "2", m=b + 2, c=b + 1)), b + 4)

    def test_compare_and_swap(self):
        n, b = self.ns, self.index()
        self.put(n + "/s", value="a")
        self.ok(self.put(n + "/s", value="b", prevValue="a"), 200,
                event("compareAndSwap", node(n + "/s", "b", m=b + 2, c=b + 1),
                      node(n + "/s", "a", m=b + 1, c=b + 1)), b + 2)
        self.err(self.put(n + "/s", value="c", prevValue="zz"), 101, "[zz != b]", b + 2)
        # prevIndex is a v2 index (compared as v3 mod revision prevIndex+1) ...
        self.ok(self.put(n + "/s", value="c", prevIndex=str(b + 2)), 200,
                event("compareAndSwap", node(n + "/s", "c", m=b + 3, c=b + 1),
                      node(n + "/s", "b", m=b + 2, c=b + 1)), b + 3)
        # ... but a failure's cause shows the v3 mod revision (modifiedIndex + 1)
        rev = b + 4
        self.err(self.put(n + "/s", value="d", prevIndex=str(b + 2)), 101,
                 "[%d != %d]" % (b + 2, rev), b + 3)
        self.err(self.put(n + "/s", value="d", prevIndex=str(b + 2), prevValue="zz"), 101,
                 "[zz != c] [%d != %d]" % (b + 2, rev), b + 3)
        self.err(self.put(n + "/s", value="d", prevIndex=str(b + 2), prevValue="c"), 101,
                 "[%d != %d]" % (b + 2, rev), b + 3)
        # the cause's index test compares prevIndex with the v3 mod revision itself:
        # a right prevIndex with a wrong value names both, a prevIndex equal to
        # the v3 revision (one too high) with the right value names both "equal"
        self.err(self.put(n + "/s", value="d", prevIndex=str(b + 3), prevValue="zz"), 101,
                 "[zz != c] [%d != %d]" % (b + 3, rev), b + 3)
        self.err(self.put(n + "/s", value="d", prevIndex=str(rev), prevValue="zz"), 101,
                 "[zz != c]", b + 3)
        self.err(self.put(n + "/s", value="d", prevIndex=str(rev), prevValue="c"), 101,
                 "[c != c] [%d != %d]" % (rev, rev), b + 3)
        self.err(self.put(n + "/s", value="d", prevIndex=str(rev)), 101,
                 "[ != c] [%d != %d]" % (rev, rev), b + 3)
        self.err(self.put(n + "/missing", value="d", prevValue="a"), 100, n + "/missing", b + 3)
        self.err(self.put(n + "/missing", value="d", prevIndex="1"), 100, n + "/missing", b + 3)
        self.put(n + "/sd", dir="true")
        self.err(self.put(n + "/sd", value="d", prevValue="a"), 102, n + "/sd", b + 4)
        # prevIndex with prevExist=true: still a compare-and-swap
        self.ok(self.put(n + "/s", value="e", prevIndex=str(b + 3), prevExist="true"), 200,
                event("compareAndSwap", node(n + "/s", "e", m=b + 5, c=b + 1),
                      node(n + "/s", "c", m=b + 3, c=b + 1)), b + 5)
        # both given and both matching
        self.ok(self.put(n + "/s", value="f", prevIndex=str(b + 5), prevValue="e"), 200,
                event("compareAndSwap", node(n + "/s", "f", m=b + 6, c=b + 1),
                      node(n + "/s", "e", m=b + 5, c=b + 1)), b + 6)
        # form errors (before anything is read: index 0)
        self.err(self.put(n + "/s", value="x", prevValue=""), 201, '"prevValue" cannot be empty', 0)
        self.err(self.put(n + "/s", value="x", prevIndex="abc"), 203,
                 'invalid value for "prevIndex"', 0)
        self.err(self.put(n + "/s", value="x", prevIndex="-1"), 203,
                 'invalid value for "prevIndex"', 0)

    def test_compare_and_delete(self):
        n, b = self.ns, self.index()
        self.put(n + "/d", value="a")
        self.put(n + "/e", value="x")
        self.err(self.delete(n + "/d", prevValue="zz"), 101, "[zz != a]", b + 2)
        self.err(self.delete(n + "/d", prevIndex=str(b + 5)), 101,
                 "[%d != %d]" % (b + 5, b + 2), b + 2)
        self.ok(self.delete(n + "/d", prevValue="a"), 200,
                event("compareAndDelete", node(n + "/d", m=b + 3, c=b + 1),
                      node(n + "/d", "a", m=b + 1, c=b + 1)), b + 3)
        self.ok(self.delete(n + "/e", prevIndex=str(b + 2)), 200,
                event("compareAndDelete", node(n + "/e", m=b + 4, c=b + 2),
                      node(n + "/e", "x", m=b + 2, c=b + 2)), b + 4)
        self.err(self.delete(n + "/d", prevValue="a"), 100, n + "/d", b + 4)
        self.put(n + "/dd", dir="true")
        self.err(self.delete(n + "/dd", prevValue="a"), 102, n + "/dd", b + 5)
        # a DELETE's body is not read: prevValue there is ignored, a plain delete
        self.put(n + "/f", value="v")
        self.ok(self.req("DELETE", n + "/f", form={"prevValue": "zz"}), 200,
                event("delete", node(n + "/f", m=b + 7, c=b + 6),
                      node(n + "/f", "v", m=b + 6, c=b + 6)), b + 7)

    def test_delete(self):
        n, b = self.ns, self.index()
        self.put(n + "/f", value="v")
        self.ok(self.delete(n + "/f"), 200,
                event("delete", node(n + "/f", m=b + 2, c=b + 1),
                      node(n + "/f", "v", m=b + 1, c=b + 1)), b + 2)
        # a missing key: 100, and the index moved (the txn put the act key anyway)
        self.err(self.delete(n + "/f"), 100, n + "/f", b + 3)
        self.assertEqual(self.index(), b + 3)
        self.put(n + "/d/a", value="1")                                   # b+4
        self.err(self.delete(n + "/d"), 102, n + "/d", b + 4)
        self.err(self.delete(n + "/d", dir="true"), 108, n + "/d", b + 4)
        # dir=true on a missing directory or on a file: 105, index moved
        self.err(self.delete(n + "/nodir", dir="true"), 105, n + "/nodir", b + 5)
        self.put(n + "/file", value="1")                                  # b+6
        self.err(self.delete(n + "/file", dir="true"), 105, n + "/file", b + 7)
        self.ok(self.get(n + "/file"), 200,
                event("get", node(n + "/file", "1", m=b + 6, c=b + 6)), b + 7)
        # recursive=true on a missing directory or on a file: 105, nothing written
        self.err(self.delete(n + "/nodir", recursive="true"), 105, n + "/nodir", b + 7)
        self.err(self.delete(n + "/file", recursive="true"), 105, n + "/file", b + 7)
        self.err(self.delete(n + "/file", recursive="true", dir="true"), 105, n + "/file", b + 7)
        # an empty directory: no "node", only "prevNode"
        self.put(n + "/e", dir="true")                                    # b+8
        self.ok(self.delete(n + "/e", dir="true"), 200,
                event("delete", prev=node(n + "/e", dir=True, m=b + 8, c=b + 8)), b + 9)
        self.put(n + "/d/sub/x", value="2")                               # b+10
        self.ok(self.delete(n + "/d", recursive="true"), 200,
                event("delete", prev=node(n + "/d", dir=True, m=b + 4, c=b + 4)), b + 11)
        self.err(self.get(n + "/d"), 100, n + "/d", b + 11)
        self.err(self.get(n + "/d/sub/x"), 100, n + "/d/sub/x", b + 11)
        self.assertEqual([k for k, *_ in self.v3() if "/1%s/d/" % n in k], [])

    def test_dirs(self):
        n, b = self.ns, self.index()
        self.ok(self.put(n + "/d", dir="true"), 201,
                event("set", node(n + "/d", dir=True, m=b + 1, c=b + 1)), b + 1)
        # set dir=true on an existing directory succeeds (the v2 store: 102)
        self.ok(self.put(n + "/d", dir="true"), 200,
                event("set", node(n + "/d", dir=True, m=b + 2, c=b + 1),
                      node(n + "/d", dir=True, m=b + 1, c=b + 1)), b + 2)
        self.err(self.put(n + "/d", value="x"), 102, n + "/d", b + 2)
        self.put(n + "/f", value="1")                                     # b+3
        # dir=true on a file, and anything below a file: 104 (the v2 store
        # replaces the file by a directory; its 104 names the file)
        self.err(self.put(n + "/f", dir="true"), 104, n + "/f", b + 3)
        self.err(self.put(n + "/f/x", value="1"), 104, n + "/f/x", b + 3)
        self.err(self.put(n + "/f/x/y", value="1"), 104, n + "/f/x/y", b + 3)
        self.err(self.get(n + "/f/x"), 100, n + "/f/x", b + 3)           # (v2 store: 104)
        self.put(n + "/d/sub/leaf", value="l")                            # b+4
        self.put(n + "/d/file", value="f")                                # b+5
        sub = node(n + "/d/sub", dir=True, m=b + 4, c=b + 4)
        self.ok(self.get(n + "/d"), 200,
                event("get", node(n + "/d", dir=True, m=b + 2, c=b + 1, nodes=[
                    node(n + "/d/file", "f", m=b + 5, c=b + 5), sub])), b + 5)
        sub = node(n + "/d/sub", dir=True, m=b + 4, c=b + 4, nodes=[
            node(n + "/d/sub/leaf", "l", m=b + 4, c=b + 4)])
        self.ok(self.get(n + "/d", recursive="true"), 200,
                event("get", node(n + "/d", dir=True, m=b + 2, c=b + 1, nodes=[
                    node(n + "/d/file", "f", m=b + 5, c=b + 5), sub])), b + 5)
        # a directory made with a value keeps it in its v3 marker, never shows it
        self.ok(self.put(n + "/dv", dir="true", value="zz"), 201,
                event("set", node(n + "/dv", dir=True, m=b + 6, c=b + 6)), b + 6)
        self.assertEqual([(k, v) for k, v, *_ in self.v3(v3key(n + "/dv", dir=True))],
                         [(v3key(n + "/dv", dir=True), "zz")])
        self.ok(self.get(n + "/dv"), 200,
                event("get", node(n + "/dv", dir=True, m=b + 6, c=b + 6)), b + 6)

    def test_sorted_recursive_listing(self):
        n, b = self.ns, self.index()
        for i, k in enumerate(("/s/b", "/s/a.x", "/s/a/z", "/s/a/y.x", "/s/a/y/q", "/s/_h")):
            self.ok(self.put(n + k, value=str(i)), 201,
                    event("set", node(n + k, str(i), m=b + 1 + i, c=b + 1 + i)), b + 1 + i)
        B, AX, Z, YX, Q, H = (node(n + k, str(i), m=b + 1 + i, c=b + 1 + i) for i, k in enumerate(
            ("/s/b", "/s/a.x", "/s/a/z", "/s/a/y.x", "/s/a/y/q", "/s/_h")))
        A = node(n + "/s/a", dir=True, m=b + 3, c=b + 3)
        Y = node(n + "/s/a/y", dir=True, m=b + 5, c=b + 5, nodes=[Q])
        AR = node(n + "/s/a", dir=True, m=b + 3, c=b + 3, nodes=[YX, Y, Z])

        def listing(nodes):
            return event("get", node(n + "/s", dir=True, m=b + 1, c=b + 1, nodes=nodes))
        # v3 key order ("a.x" < "a/"), hidden "_h" listed too (the v2 store hides it)
        self.ok(self.get(n + "/s"), 200, listing([H, AX, A, B]), b + 6)
        self.ok(self.get(n + "/s", sorted="true"), 200, listing([H, A, AX, B]), b + 6)
        self.ok(self.get(n + "/s", recursive="true"), 200, listing([H, AX, AR, B]), b + 6)
        # sorted sorts the first level only: below it v3 order stays ("y.x" before "y")
        self.ok(self.get(n + "/s", recursive="true", sorted="true"), 200,
                listing([H, AR, AX, B]), b + 6)
        self.ok(self.get(n + "/s/_h"), 200, event("get", H), b + 6)
        # Go's ParseBool spellings
        self.ok(self.get(n + "/s", recursive="T", sorted="1"), 200,
                listing([H, AR, AX, B]), b + 6)
        self.ok(self.get(n + "/s", recursive="FALSE", sorted="True", quorum="t"), 200,
                listing([H, A, AX, B]), b + 6)

    def test_directory_prefix_siblings(self):
        """etcd's v2v3 reads and deletes a directory's children by v3 key prefix
        without a trailing "/": /d lists, and a recursive delete of /d removes,
        /dx's children (data loss). quorum keeps /d to itself."""
        n, b = self.ns, self.index()
        self.put(n + "/d/a", value="1")
        self.put(n + "/dx/b", value="2")
        self.put(n + "/dx/c/e", value="3")
        if TARGET != "etcd":
            self.ok(self.get(n + "/d"), 200, event("get", node(
                n + "/d", dir=True, m=b + 1, c=b + 1, nodes=[
                    node(n + "/d/a", "1", m=b + 1, c=b + 1)])), b + 3)
            self.ok(self.delete(n + "/d", recursive="true"), 200,
                    event("delete", prev=node(n + "/d", dir=True, m=b + 1, c=b + 1)), b + 4)
            self.ok(self.get(n + "/dx/b"), 200, event("get", node(n + "/dx/b", "2", m=b + 2,
                                                                  c=b + 2)), b + 4)
            self.ok(self.get(n + "/dx/c/e"), 200, event("get", node(n + "/dx/c/e", "3",
                                                                    m=b + 3, c=b + 3)), b + 4)
            return
        self.ok(self.get(n + "/d"), 200, event("get", node(
            n + "/d", dir=True, m=b + 1, c=b + 1, nodes=[
                node(n + "/d/a", "1", m=b + 1, c=b + 1),
                node(n + "/dx/b", "2", m=b + 2, c=b + 2),
                node(n + "/dx/c", dir=True, m=b + 3, c=b + 3)])), b + 3)
        self.ok(self.delete(n + "/d", recursive="true"), 200,
                event("delete", prev=node(n + "/d", dir=True, m=b + 1, c=b + 1)), b + 4)
        self.ok(self.get(n + "/dx", recursive="true"), 200,
                event("get", node(n + "/dx", dir=True, m=b + 2, c=b + 2)), b + 4)

    def test_in_order_post(self):
        if TARGET == "etcd":
            self.in_order_post_v2v3()
        else:
            self.in_order_post_v2_store()

    def in_order_post_v2v3(self):
        """etcd's v2v3: the key is named after the wall clock, the answer names
        the directory, which is not made."""
        n, b = self.ns, self.index()
        # the answer names the directory itself, not the new key ...
        self.ok(self.post(n + "/q", value="j1"), 201,
                event("create", node(n + "/q", "j1", m=b + 1, c=b + 1)), b + 1)
        self.ok(self.post(n + "/q", value="j2"), 201,
                event("create", node(n + "/q", "j2", m=b + 2, c=b + 2)), b + 2)
        # ... which is not made: the new keys are unreachable through v2
        self.err(self.get(n + "/q"), 100, n + "/q", b + 2)
        self.err(self.get(n + "/q", recursive="true", sorted="true"), 100, n + "/q", b + 2)
        self.ok(self.post(n + "/q", dir="true", value="j3"), 201,
                event("create", node(n + "/q", dir=True, m=b + 3, c=b + 3)), b + 3)
        # the new key: <dir>/<Go's time.Now().String()>, its v3 depth one below
        items = self.v3(v3key(n + "/q/"))
        pat = re.compile("^" + re.escape(v3key(n + "/q/")) + "(" + GO_TIME + ")(/?)$")
        got = [(pat.match(k) is not None, bool(pat.match(k) and pat.match(k).group(2)), v, c)
               for k, v, c, *_ in items]
        self.assertEqual(got, [(True, False, "j1", b + 2), (True, False, "j2", b + 3),
                               (True, True, "j3", b + 4)], items)
        # into an existing directory they can be listed
        self.put(n + "/dq", dir="true")                                   # b+4
        self.ok(self.post(n + "/dq", value="x1"), 201,
                event("create", node(n + "/dq", "x1", m=b + 5, c=b + 5)), b + 5)
        self.ok(self.post(n + "/dq", value="x2"), 201,
                event("create", node(n + "/dq", "x2", m=b + 6, c=b + 6)), b + 6)
        r = self.get(n + "/dq", recursive="true", sorted="true")
        stamps = re.findall(re.escape(n + "/dq/") + "(" + GO_TIME + ")", r.body.decode())
        self.assertEqual(len(stamps), 2, r)
        self.assertLess(stamps[0], stamps[1])
        r.body = r.body.replace(stamps[0].encode(), b"T1").replace(stamps[1].encode(), b"T2")
        r.headers.pop("content-length")
        self.ok(r, 200, event("get", node(n + "/dq", dir=True, m=b + 4, c=b + 4, nodes=[
            node(n + "/dq/T1", "x1", m=b + 5, c=b + 5),
            node(n + "/dq/T2", "x2", m=b + 6, c=b + 6)])), b + 6)
        # POST on a file is not refused: the new key goes below the file
        self.put(n + "/file", value="f")                                  # b+7
        self.ok(self.post(n + "/file", value="c"), 201,
                event("create", node(n + "/file", "c", m=b + 8, c=b + 8)), b + 8)
        self.ok(self.get(n + "/file"), 200,
                event("get", node(n + "/file", "f", m=b + 7, c=b + 7)), b + 8)
        self.err(self.post(n + "/q", value="t", ttl="5"), *TTL_UNSUPPORTED, 0)

    def in_order_post_v2_store(self):
        """quorum: the v2 store's in-order keys, <dir>/<index as 20 digits>, named
        in the answer; the directory (and its parents) made in the same txn."""
        n, b = self.ns, self.index()

        def key(i):
            return "%s/q/%020d" % (n, i)
        self.ok(self.post(n + "/q", value="j1"), 201,
                event("create", node(key(b + 1), "j1", m=b + 1, c=b + 1)), b + 1)
        self.ok(self.post(n + "/q", value="j2"), 201,
                event("create", node(key(b + 2), "j2", m=b + 2, c=b + 2)), b + 2)
        self.ok(self.post(n + "/q", dir="true", value="j3"), 201,
                event("create", node(key(b + 3), dir=True, m=b + 3, c=b + 3)), b + 3)
        self.ok(self.get(n + "/q", recursive="true", sorted="true"), 200, event("get", node(
            n + "/q", dir=True, m=b + 1, c=b + 1, nodes=[
                node(key(b + 1), "j1", m=b + 1, c=b + 1),
                node(key(b + 2), "j2", m=b + 2, c=b + 2),
                node(key(b + 3), dir=True, m=b + 3, c=b + 3)])), b + 3)
        kv = {k: (v, c) for k, v, c, *_ in self.v3()}
        self.assertEqual(kv[v3key(n + "/q", dir=True)], ("", b + 2))
        self.assertEqual(kv[v3key(key(b + 1))], ("j1", b + 2))
        self.assertEqual(kv[v3key(key(b + 3), dir=True)], ("j3", b + 4))
        self.assertEqual(kv[PFX + "/act"][0], "create")
        # deeper: every missing directory is made; a wait sees the create
        w = self.wait(n + "/p", recursive="true").read_in_background()
        self.ok(self.post(n + "/p/a/b", value="x"), 201,
                event("create", node("%s/p/a/b/%020d" % (n, b + 4), "x", m=b + 4, c=b + 4)),
                b + 4)
        self.assertEqual(w.body(), gojson(event("create", node(
            "%s/p/a/b/%020d" % (n, b + 4), "x", m=b + 4, c=b + 4))))
        self.assertEqual(self.get(n + "/p/a").status, 200)
        # names only grow: a name above the index (a v3 client's, or a lost
        # race's) is followed by the next number, not by the index
        self.s.etcdctl("put", v3key("%s/q/%020d" % (n, b + 100)), "v3")          # b+5
        self.ok(self.post(n + "/q", value="j4"), 201,
                event("create", node(key(b + 101), "j4", m=b + 6, c=b + 6)), b + 6)
        # below a file: 104, nothing written
        self.put(n + "/file", value="f")                                  # b+7
        self.err(self.post(n + "/file", value="c"), 104, n + "/file", b + 7)
        self.err(self.post(n + "/file/sub", value="c"), 104, n + "/file/sub", b + 7)
        self.ok(self.get(n + "/file"), 200,
                event("get", node(n + "/file", "f", m=b + 7, c=b + 7)), b + 7)
        # with a ttl: the key's own lease
        r = self.norm(self.post(n + "/q", value="t", ttl="5"), (5,))
        self.ok(r, 201, event("create", node(key(b + 102), "t", exp="E", ttl=5, m=b + 8,
                                             c=b + 8)), b + 8)
        # concurrent POSTs: distinct keys, in the order of their indexes
        out = []

        def poster():
            for _ in range(5):
                out.append(self.post(n + "/c", value="x").json()["node"])
        ts = [threading.Thread(target=poster) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        names = [x["key"] for x in sorted(out, key=lambda x: x["createdIndex"])]
        self.assertEqual(len(set(names)), 20)
        self.assertEqual(names, sorted(names))

    def test_form_errors(self):
        n = self.ns
        cases = [
            (("PUT", {"value": "v", "ttl": "abc"}, None), (202, 'invalid value for "ttl"')),
            (("PUT", {"value": "v", "ttl": "-1"}, None), (202, 'invalid value for "ttl"')),
            (("PUT", {"value": "v", "prevIndex": "x"}, None),
             (203, 'invalid value for "prevIndex"')),
            (("GET", None, {"waitIndex": "x"}), (203, 'invalid value for "waitIndex"')),
            (("PUT", {"value": "v", "prevExist": "maybe"}, None),
             (209, "invalid value for prevExist")),
            (("PUT", {"value": "v", "refresh": "maybe"}, None), (209, "invalid value for refresh")),
            (("PUT", {"value": "v", "wait": "true"}, None),
             (209, '"wait" can only be used with GET requests')),
            (("DELETE", None, {"wait": "true"}),
             (209, '"wait" can only be used with GET requests')),
            (("PUT", {"value": "v", "prevValue": ""}, None), (201, '"prevValue" cannot be empty')),
            (("PUT", {"refresh": "true"}, None), (212, "No TTL value set")),
            (("PUT", {"refresh": "true", "value": "v"}, None),
             (211, "A value was provided on a refresh")),
            (("PUT", {"refresh": "true", "value": "v", "ttl": "5"}, None),
             (211, "A value was provided on a refresh")),
        ]
        for f in ("recursive", "sorted", "wait", "dir", "quorum", "stream", "noValueOnSuccess"):
            cases.append((("GET", None, {f: "yes"}), (209, 'invalid value for "%s"' % f)))
        for (method, form, query), (code, cause) in cases:
            with self.subTest(method=method, form=form, query=query):
                self.err(self.req(method, n + "/k", form=form, query=query), code, cause, 0)
        for args in (dict(data=None, raw="?a=%zz"), dict(data="value=%zz", raw="")):
            r = request(self.ep, "PUT", "/v2/keys%s/k%s" % (n, args["raw"]), data=args["data"],
                        ctype="application/x-www-form-urlencoded")
            self.err(r, 210, 'invalid URL escape "%zz"', 0)


# == 2. waits =========================================================================
# No case here may leave an act-only revision (DELETE of a missing key) or a v3
# write under the prefix in the history a later wait replays: etcd would crash
# (see Gaps).

class Waits(V2Case):

    def test_wait_blocks_until_change(self):
        n, b = self.ns, self.index()
        self.put(n + "/foo", value="a")                                   # b+1
        w = self.wait(n + "/foo").read_in_background()
        self.wait_headers(w, b + 1)
        self.put(n + "/other", value="o")                                 # b+2
        self.assertTrue(w.pending(), "a write elsewhere ended the wait")
        self.put(n + "/foo", value="b")                                   # b+3
        self.assertEqual(w.body().decode(), gojson(event(
            "set", node(n + "/foo", "b", m=b + 3, c=b + 1),
            node(n + "/foo", "a", m=b + 1, c=b + 1))).decode())
        # a wait on a key that does not exist yet
        w = self.wait(n + "/new").read_in_background()
        self.wait_headers(w, b + 3)
        self.assertTrue(w.pending())
        self.put(n + "/new", value="n", prevExist="false")                # b+4
        self.assertEqual(w.body(), gojson(event("create", node(n + "/new", "n", m=b + 4, c=b + 4))))

    def test_wait_recursive_and_dir(self):
        n, b = self.ns, self.index()
        self.put(n + "/dir", dir="true")                                  # b+1
        w = self.wait(n + "/dir", recursive="true").read_in_background()
        self.wait_headers(w, b + 1)
        self.put(n + "/dir/a/b", value="1")                               # b+2
        self.assertEqual(w.body(),
                         gojson(event("set", node(n + "/dir/a/b", "1", m=b + 2, c=b + 2))))
        # without recursive: changes below do not count, the directory's own do
        w = self.wait(n + "/dir").read_in_background()
        self.put(n + "/dir/c", value="2")                                 # b+3
        self.assertTrue(w.pending())
        self.put(n + "/dir", dir="true")                                  # b+4
        self.assertEqual(w.body(), gojson(event(
            "set", node(n + "/dir", dir=True, m=b + 4, c=b + 1),
            node(n + "/dir", dir=True, m=b + 1, c=b + 1))))
        # the root, recursive: everything
        w = self.wait("/", recursive="true").read_in_background()
        self.put(n + "/r", value="r")                                     # b+5
        self.assertEqual(w.body(), gojson(event("set", node(n + "/r", "r", m=b + 5, c=b + 5))))

    def test_wait_index_history(self):
        """waitIndex=N replays from v3 revision N = v2 index N-1: one early."""
        n, b = self.ns, self.index()
        self.put(n + "/h", value="1")                                     # b+1
        self.put(n + "/h", value="2")                                     # b+2
        self.put(n + "/o", value="o")                                     # b+3
        self.put(n + "/h", value="3")                                     # b+4
        e1 = gojson(event("set", node(n + "/h", "1", m=b + 1, c=b + 1)))
        e2 = gojson(event("set", node(n + "/h", "2", m=b + 2, c=b + 1),
                          node(n + "/h", "1", m=b + 1, c=b + 1)))
        e4 = gojson(event("set", node(n + "/h", "3", m=b + 4, c=b + 1),
                          node(n + "/h", "2", m=b + 2, c=b + 1)))
        for wi, want in ((b + 1, e1), (b + 2, e1), (b + 3, e2), (b + 4, e4), (b + 5, e4)):
            with self.subTest(waitIndex=wi):
                w = self.wait(n + "/h", waitIndex=str(wi))
                self.wait_headers(w, b + 4)
                self.assertEqual(w.body(), want)
                w.close()
        # ahead of the store: blocks until then (and again one early)
        w = self.wait(n + "/h", waitIndex=str(b + 6)).read_in_background()
        self.wait_headers(w, b + 4)
        self.assertTrue(w.pending())
        self.put(n + "/h", value="5")                                     # b+5
        self.assertEqual(w.body(), gojson(event("set", node(n + "/h", "5", m=b + 5, c=b + 1),
                                                node(n + "/h", "3", m=b + 4, c=b + 1))))
        # waitIndex without wait: a plain GET
        self.ok(self.get(n + "/h", waitIndex=str(b + 1)), 200,
                event("get", node(n + "/h", "5", m=b + 5, c=b + 1)), b + 5)

    def test_wait_stream(self):
        n, b = self.ns, self.index()
        w = self.wait(n + "/st", stream="true")
        self.wait_headers(w, b)
        for i in range(3):
            self.put(n + "/st", value=str(i))
        lines = [w.line() for _ in range(3)]
        w.close()
        want = [gojson(event("set", node(n + "/st", "0", m=b + 1, c=b + 1)))]
        for i in (1, 2):
            want.append(gojson(event("set", node(n + "/st", str(i), m=b + 1 + i, c=b + 1),
                                     node(n + "/st", str(i - 1), m=b + i, c=b + 1))))
        self.assertEqual(lines, want)

    def test_wait_delete_events(self):
        """A delete seen by a wait: node.value "" and no createdIndex (the deleted
        v3 kv), unlike the DELETE's own answer. A recursive delete is one event,
        for the longest key of its revision (the first child)."""
        n, b = self.ns, self.index()
        self.put(n + "/x", value="v")                                     # b+1
        w = self.wait(n + "/x")
        self.delete(n + "/x")                                             # b+2
        self.assertEqual(w.body(), gojson(event("delete", node(n + "/x", "", m=b + 2),
                                                node(n + "/x", "v", m=b + 1, c=b + 1))))
        self.put(n + "/y", value="v")                                     # b+3
        w = self.wait(n + "/y")
        self.delete(n + "/y", prevValue="v")                              # b+4
        self.assertEqual(w.body(), gojson(event("compareAndDelete", node(n + "/y", "", m=b + 4),
                                                node(n + "/y", "v", m=b + 3, c=b + 3))))
        self.put(n + "/r/a", value="1")                                   # b+5
        self.put(n + "/r/b", value="2")                                   # b+6
        wb = self.wait(n + "/r/b").read_in_background()
        wr = self.wait(n + "/r", recursive="true").read_in_background()
        self.delete(n + "/r", recursive="true")                           # b+7
        self.assertEqual(wr.body(), gojson(event("delete", node(n + "/r/a", "", m=b + 7),
                                                 node(n + "/r/a", "1", m=b + 5, c=b + 5))))
        self.assertTrue(wb.pending(), "the wait on /r/b saw the recursive delete")
        wb.close()
        # the same, replayed from the history
        w = self.wait(n + "/r", recursive="true", waitIndex=str(b + 8))
        self.assertEqual(w.body(), gojson(event("delete", node(n + "/r/a", "", m=b + 7),
                                                node(n + "/r/a", "1", m=b + 5, c=b + 5))))

    def test_wait_recursive_prefix_and_hidden(self):
        n, b = self.ns, self.index()
        self.put(n + "/d/a", value="1")                                   # b+1
        self.put(n + "/dx", value="2")                                    # b+2
        self.put(n + "/h/_x", value="3")                                  # b+3
        self.put(n + "/h/y", value="4")                                   # b+4
        if TARGET == "etcd":
            # a recursive wait on /d matches /dx: a string prefix
            w = self.wait(n + "/d", recursive="true", waitIndex=str(b + 3))
            self.assertEqual(w.body(), gojson(event("set", node(n + "/dx", "2", m=b + 2,
                                                                c=b + 2))))
        else:
            # quorum: /dx is not below /d; the wait finds the next write under /d
            w = self.wait(n + "/d", recursive="true", waitIndex=str(b + 3))
            self.put(n + "/d/z", value="5")                               # b+5
            self.assertEqual(w.body(), gojson(event("set", node(n + "/d/z", "5", m=b + 5,
                                                                c=b + 5))))
        # keys starting with "_" below the waited directory are skipped ...
        w = self.wait(n + "/h", recursive="true", waitIndex=str(b + 3))
        self.assertEqual(w.body(), gojson(event("set", node(n + "/h/y", "4", m=b + 4, c=b + 4))))
        # ... but not when waited on directly
        hx = gojson(event("set", node(n + "/h/_x", "3", m=b + 3, c=b + 3)))
        for rec in ("false", "true"):
            w = self.wait(n + "/h/_x", recursive=rec, waitIndex=str(b + 4))
            self.assertEqual(w.body(), hx)

    def test_wait_compacted(self):
        """A waitIndex below the v3 compaction: 200, headers, an empty body (the
        v2 store answers 401 "The event in requested index is outdated and
        cleared" when its 1000-event history no longer has it)."""
        n, b = self.ns, self.index()
        for i in (1, 2, 3):
            self.put(n + "/c", value=str(i))                              # b+1..b+3
        self.s.etcdctl("compact", str(b + 3))                             # v3 revision b+3
        for wi in (1, b + 2):
            with self.subTest(waitIndex=wi):
                w = self.wait(n + "/c", waitIndex=str(wi))
                self.wait_headers(w, b + 3)
                self.assertEqual(w.body(), b"")
        # the oldest revision left: its event has no prevNode (compacted away)
        w = self.wait(n + "/c", waitIndex=str(b + 3))
        self.assertEqual(w.body(), gojson(event("set", node(n + "/c", "2", m=b + 2, c=b + 1))))
        w = self.wait(n + "/c", waitIndex=str(b + 4))
        self.assertEqual(w.body(), gojson(event("set", node(n + "/c", "3", m=b + 3, c=b + 1),
                                                node(n + "/c", "2", m=b + 2, c=b + 1))))


# == 3. TTLs: none in v2v3 mode =======================================================

class Ttl(ServerPerTest):
    """etcd's v2v3 refuses every ttl; quorum keeps each on a v3 lease of the
    key's own (its deliberate departure from v2v3, see the module doc and
    src/http/v2.c). Each test on a member of its own: the keys one leaves
    on 5 s leases expire while the next runs, and every expiry moves the
    index it counts on (seen when the suite ran two tests at a time)."""

    def test_seed_lock_commands_verbatim(self):
        if TARGET == "etcd":
            self.seed_lock_refused()
        else:
            self.seed_lock_works()

    def test_every_ttl(self):
        if TARGET == "etcd":
            self.every_ttl_refused()
        else:
            self.every_ttl_works()

    # -- etcd 3.4.23 v2v3: refused --

    def seed_lock_refused(self):
        """The classic TTL lock cannot be taken: acquire and refresh are refused
        with 300 (whoever sends them, whenever), release finds no key."""
        p = self.s.client_port
        b = self.index()
        for who in ("first client", "second client", "second client again"):
            with self.subTest(who=who):
                rc, r = curl(SEED_ACQUIRE, p)
                self.assertEqual(rc, 0)
                self.err(r, *TTL_UNSUPPORTED, 0)
        self.err(self.get("/foo"), 100, "/foo", b)
        rc, r = curl(SEED_REFRESH, p)
        self.err(r, *TTL_UNSUPPORTED, 0)
        rc, r = curl(SEED_RELEASE, p)
        self.err(r, 100, "/foo", b)
        self.assertEqual(self.index(), b)                 # nothing was written
        self.assertEqual(self.s.etcdctl("lease", "list").stdout, "found 0 leases\n")
        # with the key there, it is the same
        self.put("/foo", value="bar")                                     # b+1
        for cmd in (SEED_ACQUIRE, SEED_REFRESH):
            rc, r = curl(cmd, p)
            self.err(r, *TTL_UNSUPPORTED, 0)
        rc, r = curl(SEED_RELEASE, p)
        self.ok(r, 200, event("compareAndDelete", node("/foo", m=b + 2, c=b + 1),
                              node("/foo", "bar", m=b + 1, c=b + 1)), b + 2)

    def every_ttl_refused(self):
        n, b = self.ns, self.index()
        self.put(n + "/k", value="v")                                     # b+1
        self.put(n + "/d", dir="true")                                    # b+2
        for form in ({"value": "x", "ttl": "5"},
                     {"value": "x", "ttl": "0"},
                     {"value": "x", "ttl": "5", "prevExist": "false"},
                     {"value": "x", "ttl": "5", "prevExist": "true"},
                     {"value": "x", "ttl": "5", "prevValue": "v"},
                     {"value": "x", "ttl": "5", "prevIndex": str(b + 1)},
                     {"ttl": "5", "refresh": "true"},
                     {"ttl": "5", "refresh": "true", "prevExist": "true"},
                     {"ttl": "5", "refresh": "true", "prevValue": "v"},
                     {"dir": "true", "ttl": "5"}):
            for key in (n + "/k", n + "/new", n + "/d"):
                with self.subTest(form=form, key=key):
                    self.err(self.put(key, **form), *TTL_UNSUPPORTED, 0)
        self.err(self.post(n + "/d", value="x", ttl="5"), *TTL_UNSUPPORTED, 0)
        self.err(self.req("PUT", n + "/k", query={"ttl": "5", "value": "q"}), *TTL_UNSUPPORTED, 0)
        self.assertEqual(self.index(), b + 2)
        # an empty ttl is no ttl; refresh=false is no refresh
        self.ok(self.put(n + "/k", value="w", ttl=""), 200,
                event("set", node(n + "/k", "w", m=b + 3, c=b + 1),
                      node(n + "/k", "v", m=b + 1, c=b + 1)), b + 3)
        self.ok(self.put(n + "/k", value="x", refresh="false"), 200,
                event("set", node(n + "/k", "x", m=b + 4, c=b + 1),
                      node(n + "/k", "w", m=b + 3, c=b + 1)), b + 4)
        # no lease anywhere
        self.assertEqual([kv[5] for kv in self.v3()], [0] * len(self.v3()))

    # -- quorum: TTLs on leases --

    def seed_lock_works(self):
        """The seed's three curls take, keep and give back the lock; a second
        client is refused while it is held (105, as etcd's v2 store says)."""
        p = self.s.client_port
        before = self.leases()
        b = self.index()
        rc, r = curl(SEED_ACQUIRE, p)
        self.assertEqual(rc, 0)
        self.ok(self.norm(r), 201, event("create", node("/foo", "bar", exp="E", ttl=5,
                                                        m=b + 1, c=b + 1)), b + 1)
        lease = self.lease_of("/foo")
        self.assertNotEqual(lease, 0)
        self.assertIn("granted with TTL(5s)",
                      self.s.etcdctl("lease", "timetolive", "%x" % lease).stdout)
        # a second client: refused, nothing written, the lease it got revoked
        for who in ("second client", "second client again"):
            with self.subTest(who=who):
                rc, r = curl(SEED_ACQUIRE, p)
                self.err(r, 105, "/foo", b + 1)
        harness.wait_for(lambda: self.leases() - before == {lease},
                         what="the refused acquires' leases revoked")
        self.ok(self.norm(self.get("/foo"), (4, 5)), 200,
                event("get", node("/foo", "bar", exp="E", ttl=5, m=b + 1, c=b + 1)), b + 1)
        # the holder refreshes: same value, a fresh lease, the old one revoked;
        # the index moves (as the v2 store's refresh moves it)
        rc, r = curl(SEED_REFRESH, p)
        self.ok(self.norm(r, (4, 5)), 200, event(
            "compareAndSwap", node("/foo", "bar", exp="E", ttl=5, m=b + 2, c=b + 1),
            node("/foo", "bar", exp="E", ttl=5, m=b + 1, c=b + 1)), b + 2)
        lease2 = self.lease_of("/foo")
        self.assertNotIn(lease2, (0, lease))
        harness.wait_for(lambda: self.leases() - before == {lease2},
                         what="the refreshed-away lease revoked")
        self.assertEqual(self.s.etcdctl("get", PFX + "/act", "--print-value-only").stdout,
                         "refresh\n")
        # someone else's refresh (another value) fails and changes nothing
        rc, r = curl(SEED_REFRESH.replace("prevValue=bar", "prevValue=other"), p)
        self.err(r, 101, "[other != bar]", b + 2)
        self.assertEqual(self.lease_of("/foo"), lease2)
        # release
        rc, r = curl(SEED_RELEASE, p)
        self.ok(self.norm(r, (4, 5)), 200, event(
            "compareAndDelete", node("/foo", m=b + 3, c=b + 1),
            node("/foo", "bar", exp="E", ttl=5, m=b + 2, c=b + 1)), b + 3)
        harness.wait_for(lambda: self.leases() - before == set(), what="the lock's lease revoked")
        rc, r = curl(SEED_RELEASE, p)
        self.err(r, 100, "/foo", b + 3)
        # and the second client gets it
        rc, r = curl(SEED_ACQUIRE, p)
        self.ok(self.norm(r), 201, event("create", node("/foo", "bar", exp="E", ttl=5,
                                                        m=b + 4, c=b + 4)), b + 4)

    def every_ttl_works(self):
        """Every write takes a ttl (its own lease); a write without one makes
        the key permanent; refresh keeps the value and is not seen by waits."""
        n, b = self.ns, self.index()
        self.put(n + "/k", value="v")                                     # b+1
        self.put(n + "/d", dir="true")                                    # b+2

        def ok(r, status, ev, index, ttls=(5,)):
            self.ok(self.norm(r, ttls), status, ev, index)
        ok(self.put(n + "/k", value="x", ttl="5"), 200,
           event("set", node(n + "/k", "x", exp="E", ttl=5, m=b + 3, c=b + 1),
                 node(n + "/k", "v", m=b + 1, c=b + 1)), b + 3)
        # ttl=0: the lessor's minimum (1.5 election timeouts, in whole seconds)
        ok(self.put(n + "/z", value="x", ttl="0"), 201,
           event("set", node(n + "/z", "x", exp="E", ttl=5, m=b + 4, c=b + 4)), b + 4, (1, 2, 3))
        ok(self.put(n + "/c", value="x", ttl="5", prevExist="false"), 201,
           event("create", node(n + "/c", "x", exp="E", ttl=5, m=b + 5, c=b + 5)), b + 5)
        ok(self.put(n + "/k", value="y", ttl="5", prevExist="true"), 200,
           event("update", node(n + "/k", "y", exp="E", ttl=5, m=b + 6, c=b + 1),
                 node(n + "/k", "x", exp="E", ttl=5, m=b + 3, c=b + 1)), b + 6, (4, 5))
        ok(self.put(n + "/k", value="w", ttl="5", prevValue="y"), 200,
           event("compareAndSwap", node(n + "/k", "w", exp="E", ttl=5, m=b + 7, c=b + 1),
                 node(n + "/k", "y", exp="E", ttl=5, m=b + 6, c=b + 1)), b + 7, (4, 5))
        ok(self.put(n + "/k", value="u", ttl="5", prevIndex=str(b + 7)), 200,
           event("compareAndSwap", node(n + "/k", "u", exp="E", ttl=5, m=b + 8, c=b + 1),
                 node(n + "/k", "w", exp="E", ttl=5, m=b + 7, c=b + 1)), b + 8, (4, 5))
        # refresh, for each kind of PUT: the value stays, the index moves, the
        # act key says "refresh" and a wait does not see it
        w = self.wait(n + "/k").read_in_background()
        for i, (form, action) in enumerate((({}, "set"), ({"prevExist": "true"}, "update"),
                                            ({"prevValue": "u"}, "compareAndSwap"))):
            with self.subTest(refresh=action):
                ok(self.put(n + "/k", ttl="5", refresh="true", **form), 200,
                   event(action, node(n + "/k", "u", exp="E", ttl=5, m=b + 9 + i, c=b + 1),
                         node(n + "/k", "u", exp="E", ttl=5, m=b + 8 + i, c=b + 1)),
                   b + 9 + i, (4, 5))
        self.assertEqual(self.s.etcdctl("get", PFX + "/act", "--print-value-only").stdout,
                         "refresh\n")
        self.assertTrue(w.pending(), "a wait saw a refresh")
        self.err(self.put(n + "/new", ttl="5", refresh="true"), 100, n + "/new", b + 11)
        self.err(self.put(n + "/new", ttl="5", refresh="true", prevExist="true"), 102,
                 n + "/new", b + 11)
        self.err(self.put(n + "/k", ttl="5", refresh="true", prevValue="zz"), 101, "[zz != u]",
                 b + 11)
        # a set without ttl: permanent again; the wait sees it (its prevNode's
        # ttl only while the lease it names still exists: dropped here)
        ok(self.put(n + "/k", value="p"), 200,
           event("set", node(n + "/k", "p", m=b + 12, c=b + 1),
                 node(n + "/k", "u", exp="E", ttl=5, m=b + 11, c=b + 1)), b + 12, (4, 5))
        got = json.loads(w.body())
        got["prevNode"].pop("expiration", None)
        got["prevNode"].pop("ttl", None)
        self.assertEqual(got, event("set", node(n + "/k", "p", m=b + 12, c=b + 1),
                                    node(n + "/k", "u", m=b + 11, c=b + 1)))
        self.assertEqual(self.lease_of(n + "/k"), 0)
        # directories: set with a ttl, update one's ttl (dir=true prevExist=true:
        # the v2 docs' way; v2v3 answers 102), refresh it
        ok(self.put(n + "/dt", dir="true", ttl="5"), 201,
           event("set", node(n + "/dt", dir=True, exp="E", ttl=5, m=b + 13, c=b + 13)), b + 13)
        ok(self.put(n + "/d", dir="true", ttl="5", prevExist="true"), 200,
           event("update", node(n + "/d", dir=True, exp="E", ttl=5, m=b + 14, c=b + 2),
                 node(n + "/d", dir=True, m=b + 2, c=b + 2)), b + 14)
        ok(self.put(n + "/d", dir="true", ttl="5", refresh="true"), 200,
           event("set", node(n + "/d", dir=True, exp="E", ttl=5, m=b + 15, c=b + 2),
                 node(n + "/d", dir=True, exp="E", ttl=5, m=b + 14, c=b + 2)), b + 15, (4, 5))
        # POST; a ttl from the query
        ok(self.post(n + "/d", value="x", ttl="5"), 201,
           event("create", node("%s/d/%020d" % (n, b + 16), "x", exp="E", ttl=5, m=b + 16,
                                c=b + 16)), b + 16)
        ok(self.req("PUT", n + "/q", query={"ttl": "5", "value": "q"}), 201,
           event("set", node(n + "/q", "q", exp="E", ttl=5, m=b + 17, c=b + 17)), b + 17)
        # a listing shows every node's ttl
        ok(self.get(n + "/d", recursive="true"), 200, event("get", node(
            n + "/d", dir=True, exp="E", ttl=5, m=b + 15, c=b + 2, nodes=[
                node("%s/d/%020d" % (n, b + 16), "x", exp="E", ttl=5, m=b + 16, c=b + 16)])),
           b + 17, (3, 4, 5))
        # each key written with a ttl has a lease of its own
        leases = [self.lease_of(n + k, d) for k, d in (
            ("/z", False), ("/c", False), ("/dt", True), ("/d", True), ("/q", False))]
        self.assertEqual(len(set(leases) - {0}), 5, leases)
        # an empty ttl is no ttl; refresh=false is no refresh
        self.ok(self.put(n + "/e", value="w", ttl=""), 201,
                event("set", node(n + "/e", "w", m=b + 18, c=b + 18)), b + 18)
        self.ok(self.put(n + "/e", value="x", refresh="false"), 200,
                event("set", node(n + "/e", "x", m=b + 19, c=b + 18),
                      node(n + "/e", "w", m=b + 18, c=b + 18)), b + 19)
        # "ttl=" with dir=true prevExist=true: the directory is permanent again
        ok(self.put(n + "/d", dir="true", ttl="", prevExist="true"), 200,
           event("update", node(n + "/d", dir=True, m=b + 20, c=b + 2),
                 node(n + "/d", dir=True, exp="E", ttl=5, m=b + 15, c=b + 2)), b + 20, (3, 4, 5))
        self.assertEqual(self.lease_of(n + "/d", dir=True), 0)


# == 4. the v3 layout, on a fresh server per case ======================================

class Layout(ServerPerTest):
    pass

    def test_fresh_store_and_v3_keys(self):
        self.ok(self.get("/"), 200, event("get", node(dir=True)), 0)
        self.ok(request(self.ep, "GET", "/v2/keys"), 200, event("get", node(dir=True)), 0)
        self.put("/foo", value="bar")                                     # 1 (rev 2)
        self.put("/dir/a", value="1")                                     # 2
        self.put("/dir/sub", dir="true")                                  # 3
        self.put("/foo", value="baz")                                     # 4
        self.delete("/dir/a")                                             # 5
        self.put("/e", dir="true", value="m")                             # 6
        self.err(self.delete("/missing"), 100, "/missing", 7)             # 7: act only
        self.assertEqual(self.v3(""), [
            ("/v2v3/002/k//1/dir/", "", 3, 3, 1, 0),
            ("/v2v3/002/k//1/e/", "m", 7, 7, 1, 0),
            ("/v2v3/002/k//1/foo", "baz", 2, 5, 2, 0),
            ("/v2v3/003/k//1/dir/sub/", "", 4, 4, 1, 0),
            ("/v2v3/act", "delete", 2, 8, 7, 0),
        ])
        self.ok(self.get("/", recursive="true"), 200, event("get", node(dir=True, nodes=[
            node("/dir", dir=True, m=2, c=2, nodes=[node("/dir/sub", dir=True, m=3, c=3)]),
            node("/e", dir=True, m=6, c=6),
            node("/foo", "baz", m=4, c=1)])), 7)

    def test_v3_writes_show_through_v2(self):
        self.s.etcdctl("put", "/v2v3/002/k//1/fromv3", "hello")           # rev 2: index 1
        self.ok(self.get("/fromv3"), 200, event("get", node("/fromv3", "hello", m=1, c=1)), 1)
        self.s.etcdctl("put", "outside", "x")                             # every revision counts
        self.s.etcdctl("put", "/v2v3/002/k//1/vdir/", "")
        self.s.etcdctl("put", "/v2v3/003/k//1/vdir/x", "1")
        self.ok(self.get("/", recursive="true"), 200, event("get", node(dir=True, nodes=[
            node("/fromv3", "hello", m=1, c=1),
            node("/vdir", dir=True, m=3, c=3, nodes=[node("/vdir/x", "1", m=4, c=4)])])), 4)
        self.ok(self.put("/fromv3", value="v2"), 200,
                event("set", node("/fromv3", "v2", m=5, c=1), node("/fromv3", "hello", m=1, c=1)),
                5)
        self.assertEqual(self.s.etcdctl("get", "/v2v3/act", "--print-value-only").stdout, "set\n")


# == 5. the other v2 endpoints ========================================================

class Endpoints(V2Case):

    def empty_reply(self, path):
        """etcd 3.4 in v2v3 mode: a "STUB" panic; the connection closes with no
        response at all (curl exit 52), the server lives on."""
        with self.assertRaises((http.client.RemoteDisconnected, ConnectionResetError)):
            request(self.ep, "GET", path)
        r = subprocess.run(["curl", "-sS", "http://%s%s" % (self.ep, path)], capture_output=True,
                           text=True, timeout=20)
        self.assertEqual((r.returncode, r.stdout), (52, ""))
        self.assertIn("Empty reply from server", r.stderr)
        self.assertEqual(self.get("/").status, 200)

    def member(self):
        out = json.loads(self.s.etcdctl("member", "list", "-w", "json").stdout)
        (m,) = out["members"]
        return {"id": "%x" % m["ID"], "name": m["name"], "peerURLs": m["peerURLs"],
                "clientURLs": m["clientURLs"]}

    def test_members(self):
        if ETCD_GAPS:
            self.empty_reply("/v2/members")
            self.empty_reply("/v2/members/leader")
            return
        m = self.member()
        self.assertEqual(m["clientURLs"], ["http://" + self.ep])
        r = request(self.ep, "GET", "/v2/members")
        self.assertEqual((r.status, r.h("Content-Type"), r.body),
                         (200, JSON, gojson({"members": [m]})))
        r = request(self.ep, "GET", "/v2/members/leader")
        self.assertEqual((r.status, r.h("Content-Type"), r.body), (200, JSON, gojson(m)))

    def test_machines(self):
        if ETCD_GAPS:
            self.empty_reply("/v2/machines")
            return
        r = request(self.ep, "GET", "/v2/machines")
        self.assertEqual((r.status, r.body), (200, ("http://" + self.ep).encode()))
        self.assertEqual(r.h("Content-Type"), "text/plain; charset=utf-8")

    def test_version_and_health(self):
        if ETCD_GAPS:
            self.empty_reply("/version")
            self.empty_reply("/health")
            return
        r = request(self.ep, "GET", "/version")
        self.assertEqual((r.status, r.h("Content-Type")), (200, JSON))
        self.assertEqual(sorted(r.json()), ["etcdcluster", "etcdserver"])
        r = request(self.ep, "GET", "/health")
        self.assertEqual((r.status, r.json()), (200, {"health": "true"}))

    def test_stats(self):
        # v2v3 mode has no stats: self and store are empty, leader is refused
        for path in ("/v2/stats/self", "/v2/stats/store"):
            r = request(self.ep, "GET", path)
            self.assertEqual((r.status, r.h("Content-Type"), r.body), (200, JSON, b""), path)
        r = request(self.ep, "GET", "/v2/stats/leader")
        self.assertEqual((r.status, r.h("Content-Type"), r.body),
                         (403, JSON, b'{"message":"not current leader"}'))
        r = request(self.ep, "POST", "/v2/stats/self")
        self.assertEqual((r.status, r.h("Allow"), r.body), (405, "GET", b"Method Not Allowed\n"))


# == 6. the gaps: what kills etcd 3.4.23 ===============================================

class Gaps(Layout):
    """Fresh server per case (setUp of Layout). A wait whose replayed v3 history
    holds a revision without the act key, or with only the act key, kills etcd
    (a nil dereference in v2v3 mkV2Events); quorum must skip such a revision."""

    def dies_or_delivers(self, key, want, **query):
        if ETCD_GAPS:
            host, port = self.ep.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=15)
            try:
                conn.request("GET", "/v2/keys%s?%s" % (key, urllib.parse.urlencode(
                    dict(wait="true", **query))))
                conn.getresponse().read()
            except Exception:  # noqa: BLE001 (the connection breaks)
                pass
            finally:
                conn.close()
            harness.wait_for(lambda: self.s.proc.poll() is not None, timeout=15,
                             what="etcd to die")
            self.assertIn("nil pointer dereference", self.s.log_tail(20000))
            return
        self.assertEqual(self.wait(key, **query).body(), gojson(want))
        self.assertEqual(self.get("/").status, 200)

    def test_wait_over_act_only_revision(self):
        self.put("/a", value="1")                                         # 1
        self.err(self.delete("/missing"), 100, "/missing", 2)             # 2: act only
        self.put("/a", value="2")                                         # 3
        self.dies_or_delivers("/a", event("set", node("/a", "2", m=3, c=1),
                                          node("/a", "1", m=1, c=1)), waitIndex="3")

    def test_wait_over_v3_write_under_prefix(self):
        self.s.etcdctl("put", "/v2v3/002/k//1/raw", "x")                  # 1: no act key
        self.put("/a", value="1")                                         # 2
        self.dies_or_delivers("/a", event("set", node("/a", "1", m=2, c=2)), waitIndex="2")


# == 7. reference: the TTL lock on etcd's real v2 store ================================

class V2StoreLock(V2Case):
    """What the seed's lock does with TTLs that work: etcd 3.4 with plain
    --enable-v2 (its own v2 store, not v2v3), and quorum with the v2v3 flags
    (its TTLs on leases) answering the same."""
    flags = ["--enable-v2=true"] if TARGET == "etcd" else V2V3_FLAGS
    v2v3 = TARGET != "etcd"

    def test_seed_lock(self):
        p = self.s.client_port
        rc, r = curl(SEED_ACQUIRE, p)
        self.assertEqual(rc, 0)
        i = int(r.h("X-Etcd-Index"))
        self.ok(self.norm(r, (5,)), 201,
                event("create", node("/foo", "bar", exp="E", ttl=5, m=i, c=i)), i)
        # a second client while it is held
        rc, r = curl(SEED_ACQUIRE, p)
        self.err(r, 105, "/foo", i)
        rc, r = curl(SEED_REFRESH, p)
        self.ok(self.norm(r, (4, 5)), 200, event(
            "compareAndSwap", node("/foo", "bar", exp="E", ttl=5, m=i + 1, c=i),
            node("/foo", "bar", exp="E", ttl=5, m=i, c=i)), i + 1)
        rc, r = curl(SEED_RELEASE, p)
        self.ok(self.norm(r, (4, 5)), 200, event(
            "compareAndDelete", node("/foo", m=i + 2, c=i),
            node("/foo", "bar", exp="E", ttl=5, m=i + 1, c=i)), i + 2)
        rc, r = curl(SEED_RELEASE, p)
        self.err(r, 100, "/foo", i + 2)
        # held again, then left to expire: a waiter sees "expire", then a second
        # client gets it
        rc, r = curl(SEED_ACQUIRE, p)
        self.assertEqual(r.status, 201)
        w = self.wait("/foo").read_in_background()
        rc, r = curl(SEED_ACQUIRE, p)
        self.err(r, 105, "/foo", i + 3)
        t0 = time.monotonic()
        body = w.body(timeout=12)
        self.assertGreater(time.monotonic() - t0, 3.0)
        r = self.norm(Resp(200, [], body), (5,))
        self.assertEqual(r.body, gojson(event("expire", node("/foo", m=i + 4, c=i + 3),
                                              node("/foo", "bar", exp="E", m=i + 3, c=i + 3))))
        rc, r = curl(SEED_ACQUIRE, p)
        self.ok(self.norm(r, (5,)), 201,
                event("create", node("/foo", "bar", exp="E", ttl=5, m=i + 5, c=i + 5)), i + 5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
