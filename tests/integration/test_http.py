#!/usr/bin/python3
"""etcd 3.4's HTTP face on the client port: the grpc-gateway JSON API under
/v3/ (and /v3beta/), GET /version, GET /health, HTTP/1.1 beside gRPC on one
port. Against quorum (TARGET=quorum, the default; QUORUM_BIN) or etcd 3.4.23
(TARGET=etcd), which every expectation here was taken from:

    cd /work/main && TARGET=etcd /usr/bin/python3 tests/integration/test_http.py
    /usr/bin/python3 tests/integration/test_http.py Streams.test_watch_put_appears
    /usr/bin/python3 tests/integration/test_http.py -k nospace

Only the standard library speaks HTTP here (http_util.py: raw sockets, so
status lines, headers, chunk framing and exact bodies are all visible);
etcdctl 3.4 is the gRPC client that checks the port still serves gRPC.
/work/notes/gateway.md has the reference behaviour in full; the essentials:

* Every gateway call is POST with a JSON body (proto field names, camelCase
  also accepted; unknown fields ignored; an empty body is {}). Answers are
  jsonpb with OrigName and no defaults: zero/false/empty fields are left out,
  int64/uint64 are JSON strings ("revision":"5"), uint32 numbers ("hash":12),
  bytes base64, enums by name ("type":"DELETE"; the zero value left out).
  Content-Type: application/json.
* A gRPC error: HTTP status from its code (grpc-gateway v1: Canceled 408,
  Unknown 500, InvalidArgument 400, NotFound 404, PermissionDenied 403,
  ResourceExhausted 429, FailedPrecondition 412, OutOfRange 400,
  Unavailable 503, Unauthenticated 401) and body
  {"error":MSG,"message":MSG,"code":N}. Bad JSON / bad base64 / a wrong type:
  400 with code 3 and the decoder's text.
* Streams (watch, lease/keepalive, election/observe, maintenance/snapshot):
  200, Transfer-Encoding: chunked, each message {"result":{...}} followed by
  "\\n". The body's JSON objects are the client's stream; when the body ends
  the send side closes (keepalive then ends its stream; watch stays open).
  An error before the first message: the status of its code and one
  {"error":{"grpc_code":N,"http_code":S,"message":M,"http_status":TEXT}}.
* GET /health: 200 {"health":"true"}; 503 {"health":"false"} with no leader
  or any alarm raised; ?exclude=NOSPACE ignores that alarm.

Incidental details of etcd's Go HTTP server (the text of 404/405 bodies and of
JSON decoder errors, the HTTP/1.0 status line, 417 for an unknown Expect, the
CORS headers, /health's text/plain and the newline after its 503 body, the
exact answers to a cut request) are asserted for TARGET=etcd, and for quorum
only with HTTP_STRICT=1; quorum's run checks the status codes, the headers a
client relies on and the JSON bodies.
"""
import json
import os
import resource
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Server, wait_for  # noqa: E402
from http_util import (  # noqa: E402
    Closed, Conn, Stream, Timeout, b64, call, normalise, post, unb64)

TARGET = os.environ.get("TARGET", "quorum")
STRICT = TARGET == "etcd" or os.environ.get("HTTP_STRICT") == "1"
MIB = 1024 * 1024

# grpc-gateway v1's runtime.HTTPStatusFromCode, as etcd 3.4 answers
HTTP_OF = {1: 408, 2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 412, 10: 409,
           11: 400, 12: 501, 13: 500, 14: 503, 15: 500, 16: 401}

KEY_NOT_PROVIDED = "etcdserver: key is not provided"
LEASE_NOT_FOUND = "etcdserver: requested lease not found"
COMPACTED = "etcdserver: mvcc: required revision has been compacted"
FUTURE_REV = "etcdserver: mvcc: required revision is a future revision"
NOSPACE = "etcdserver: mvcc: database space exceeded"


# ---------------------------------------------------------------- servers

_shared = {}


def shared_server():
    """one server for the classes that leave it usable (started on first use)"""
    if "s" not in _shared:
        _shared["s"] = Server(TARGET).start()
    return _shared["s"]


def tearDownModule():
    s = _shared.pop("s", None)
    if s:
        s.cleanup()


def ctl_status(server):
    """etcdctl endpoint status -w json: the Status dict (gRPC, not HTTP)"""
    r = server.etcdctl("endpoint", "status", "-w", "json")
    return json.loads(r.stdout)[0]["Status"]


class HttpCase(unittest.TestCase):
    """Helpers; self.srv is the server under test, self.ep its endpoint."""

    srv = None

    @classmethod
    def setUpClass(cls):
        cls.srv = shared_server()

    @property
    def ep(self):
        return self.srv.endpoint

    # ---- the member, as gRPC reports it ----
    def ident(self):
        st = ctl_status(self.srv)
        h = st["header"]
        return {"cluster_id": str(h["cluster_id"]), "member_id": str(h["member_id"]),
                "raft_term": str(h["raft_term"]), "revision": h["revision"],
                "version": st.get("version")}

    def rev(self):
        return self.ident()["revision"]

    def H(self, rev=None):
        """the ResponseHeader every KV/lease/auth answer carries"""
        i = self.ident() if not hasattr(self, "_ident") else self._ident
        self._ident = i
        h = {"cluster_id": i["cluster_id"], "member_id": i["member_id"],
             "raft_term": i["raft_term"]}
        if rev:
            h["revision"] = str(rev)
        return h

    # ---- requests and assertions ----
    def post(self, path, body=None, token=None, headers=()):
        return post(self.ep, path, body, token=token, headers=headers)

    def assertJsonCT(self, r):
        self.assertEqual(r.header("Content-Type"), "application/json", r)

    def ok(self, path, body=None, expect=None, token=None):
        """POST, 200, application/json; the JSON answer (== expect if given)"""
        r = self.post(path, body, token=token)
        self.assertEqual(r.status, 200, "%s %s -> %r" % (path, body, r))
        self.assertJsonCT(r)
        j = r.json()
        if expect is not None:
            self.assertEqual(j, expect, "%s %s" % (path, json.dumps(body)))
        return j

    def err(self, path, body, code, message, token=None, status=None):
        """POST answered by a gRPC error: its HTTP status and exact body"""
        r = self.post(path, body, token=token)
        self.assertErr(r, code, message, status, "%s %s" % (path, json.dumps(body)))
        return r

    def assertErr(self, r, code, message, status=None, what=""):
        self.assertEqual(r.status, status or HTTP_OF[code], "%s -> %r" % (what, r))
        self.assertJsonCT(r)
        self.assertEqual(r.json(), {"error": message, "message": message, "code": code}, what)

    def assertDecodeErr(self, r, what="", prefix=None, code=3, status=400):
        """an error of the gateway's JSON decoding: 400, code 3, error == message
        (the decoder's own text, Go's in etcd)"""
        self.assertEqual(r.status, status, "%s -> %r" % (what, r))
        self.assertJsonCT(r)
        j = r.json()
        self.assertEqual(sorted(j), ["code", "error", "message"], what)
        self.assertEqual(j["code"], code, what)
        self.assertEqual(j["error"], j["message"], what)
        self.assertTrue(j["message"], what)
        if prefix and STRICT:
            self.assertTrue(j["message"].startswith(prefix), "%s: %r" % (what, j["message"]))
        return j

    def lease(self, ttl=60):
        return self.ok("/v3/lease/grant", {"TTL": ttl})["ID"]

    def kv(self, key, value, create, mod, version, lease=None):
        d = {"key": b64(key), "create_revision": str(create), "mod_revision": str(mod),
             "version": str(version)}
        if value:
            d["value"] = b64(value)
        if lease:
            d["lease"] = lease
        return d

    def grpc_still_works(self, key="grpc-check"):
        """etcdctl (gRPC on the same port) puts and gets"""
        val = "v%d" % time.monotonic_ns()
        self.srv.etcdctl("put", key, val)
        self.assertEqual(self.srv.etcdctl("get", key, "--print-value-only").stdout.strip(), val)

    def http_still_works(self):
        r = call(self.ep, "GET", "/version")
        self.assertEqual(r.status, 200, r)
        self.ok("/v3/kv/range", {"key": b64("http-check")})


# ------------------------------------------------------------ unary paths

class Gateway(HttpCase):
    """Every unary path, exact JSON bodies (one shared server; each test uses
    its own keys and reads the revision it starts from)."""

    def test_kv_put_range_deleterange(self):
        p = "/t/kv/"
        r0 = self.rev()
        H = self.H
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("1")}, {"header": H(r0 + 1)})
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("2"), "prev_kv": True},
                {"header": H(r0 + 2), "prev_kv": self.kv(p + "a", "1", r0 + 1, r0 + 1, 1)})
        # an empty value is left out, like every default
        self.ok("/v3/kv/put", {"key": b64(p + "b"), "value": ""}, {"header": H(r0 + 3)})
        a = self.kv(p + "a", "2", r0 + 1, r0 + 2, 2)
        b = self.kv(p + "b", "", r0 + 3, r0 + 3, 1)
        rng = {"key": b64(p + "a"), "range_end": b64(p + "c")}
        self.ok("/v3/kv/range", rng, {"header": H(r0 + 3), "kvs": [a, b], "count": "2"})
        self.ok("/v3/kv/range", dict(rng, limit=1),
                {"header": H(r0 + 3), "kvs": [a], "more": True, "count": "2"})
        ka = {k: v for k, v in a.items() if k != "value"}
        self.ok("/v3/kv/range", dict(rng, limit="1", keys_only=True),
                {"header": H(r0 + 3), "kvs": [ka], "more": True, "count": "2"})
        self.ok("/v3/kv/range", dict(rng, count_only=True), {"header": H(r0 + 3), "count": "2"})
        # sort_order by name and by number
        for order in ("DESCEND", 2):
            self.ok("/v3/kv/range", dict(rng, sort_order=order, sort_target="KEY"),
                    {"header": H(r0 + 3), "kvs": [b, a], "count": "2"})
        self.ok("/v3/kv/range", {"key": b64(p + "a"), "revision": str(r0 + 1)},
                {"header": H(r0 + 3), "kvs": [self.kv(p + "a", "1", r0 + 1, r0 + 1, 1)],
                 "count": "1"})
        self.ok("/v3/kv/range", {"key": b64(p + "zz")}, {"header": H(r0 + 3)})
        self.ok("/v3/kv/range", {"key": b64(p + "a"), "serializable": True},
                {"header": H(r0 + 3), "kvs": [a], "count": "1"})
        self.err("/v3/kv/range", {"key": b64(p + "a"), "revision": r0 + 100}, 11, FUTURE_REV)
        self.ok("/v3/kv/deleterange", {"key": b64(p + "b"), "prev_kv": True},
                {"header": H(r0 + 4), "deleted": "1", "prev_kvs": [b]})
        self.ok("/v3/kv/deleterange", {"key": b64(p + "b")}, {"header": H(r0 + 4)})
        self.ok("/v3/kv/deleterange", {"key": b64(p), "range_end": b64(p[:-1] + "0")},
                {"header": H(r0 + 5), "deleted": "1"})
        self.err("/v3/kv/put", {"key": b64(p + "l"), "value": b64("v"), "lease": "77"},
                 5, LEASE_NOT_FOUND)
        self.err("/v3/kv/put", {"value": b64("v")}, 3, KEY_NOT_PROVIDED)

    def test_kv_txn(self):
        p = "/t/txn/"
        r0 = self.rev()
        H = self.H
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("2")}, {"header": H(r0 + 1)})
        a = self.kv(p + "a", "2", r0 + 1, r0 + 1, 1)
        # the inner range's header carries the revision before the txn's writes
        self.ok("/v3/kv/txn", {
            "compare": [{"key": b64(p + "a"), "target": "VALUE", "result": "EQUAL",
                         "value": b64("2")}],
            "success": [{"request_range": {"key": b64(p + "a")}},
                        {"request_put": {"key": b64(p + "t"), "value": b64("x")}},
                        {"request_delete_range": {"key": b64(p + "nothing")}}],
            "failure": []},
            {"header": H(r0 + 2), "succeeded": True, "responses": [
                {"response_range": {"header": {"revision": str(r0 + 1)}, "kvs": [a],
                                    "count": "1"}},
                {"response_put": {"header": {"revision": str(r0 + 2)}}},
                {"response_delete_range": {"header": {"revision": str(r0 + 2)}}}]})
        # compare fails: succeeded (false) is left out
        self.ok("/v3/kv/txn", {
            "compare": [{"key": b64(p + "a"), "target": "VERSION", "result": "GREATER",
                         "version": "10"}],
            "failure": [{"request_range": {"key": b64(p + "a")}}]},
            {"header": H(r0 + 2), "responses": [
                {"response_range": {"header": {"revision": str(r0 + 2)}, "kvs": [a],
                                    "count": "1"}}]})
        self.ok("/v3/kv/txn", {}, {"header": H(r0 + 2), "succeeded": True})
        self.err("/v3/kv/txn", {"success": [
            {"request_put": {"key": b64(p + "d"), "value": b64("x")}},
            {"request_put": {"key": b64(p + "d"), "value": b64("y")}}]},
            3, "etcdserver: duplicate key given in txn request")
        # a nested txn: its header is an empty object
        self.ok("/v3/kv/txn", {"success": [{"request_txn": {"success": [
            {"request_put": {"key": b64(p + "n"), "value": b64("x")}}]}}]},
            {"header": H(r0 + 3), "succeeded": True, "responses": [
                {"response_txn": {"header": {}, "succeeded": True, "responses": [
                    {"response_put": {"header": {"revision": str(r0 + 3)}}}]}}]})

    def test_kv_compaction(self):
        p = "/t/compact/"
        r0 = self.rev()
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("1")})
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("2")})
        self.ok("/v3/kv/compaction", {"revision": str(r0 + 1)}, {"header": self.H(r0 + 2)})
        self.err("/v3/kv/range", {"key": b64(p + "a"), "revision": r0}, 11, COMPACTED)
        self.err("/v3/kv/compaction", {"revision": r0 + 1, "physical": True}, 11, COMPACTED)
        self.err("/v3/kv/compaction", {"revision": r0 + 1000}, 11, FUTURE_REV)
        self.ok("/v3/kv/range", {"key": b64(p + "a"), "revision": r0 + 1, "count_only": True},
                {"header": self.H(r0 + 2), "count": "1"})

    def test_lease_paths(self):
        H = self.H
        r0 = self.rev()
        lid = "%d" % (0x48540000 + os.getpid() % 0xffff)
        self.ok("/v3/lease/grant", {"TTL": 60, "ID": lid}, {"header": H(r0), "ID": lid,
                                                             "TTL": "60"})
        self.err("/v3/lease/grant", {"TTL": "60", "ID": int(lid)}, 9,
                 "etcdserver: lease already exists")
        auto = self.ok("/v3/lease/grant", {"TTL": "60"})
        self.assertEqual(sorted(auto), ["ID", "TTL", "header"])
        self.assertRegex(auto["ID"], r"^[1-9][0-9]*$")
        self.assertEqual((auto["header"], auto["TTL"]), (H(r0), "60"))
        self.ok("/v3/kv/put", {"key": b64("/t/lease/k"), "value": b64("v"), "lease": lid},
                {"header": H(r0 + 1)})
        for path in ("/v3/lease/timetolive", "/v3/kv/lease/timetolive"):
            j = self.ok(path, {"ID": lid, "keys": True})
            self.assertIn(j.get("TTL"), ("58", "59", "60"), j)
            self.assertEqual(j, {"header": H(r0 + 1), "ID": lid, "TTL": j["TTL"],
                                 "grantedTTL": "60", "keys": [b64("/t/lease/k")]})
            j = self.ok(path, {"ID": lid})
            self.assertEqual(j, {"header": H(r0 + 1), "ID": lid, "TTL": j["TTL"],
                                 "grantedTTL": "60"})
        self.ok("/v3/lease/timetolive", {"ID": "999"}, {"header": H(r0 + 1), "ID": "999",
                                                        "TTL": "-1"})
        for path in ("/v3/lease/leases", "/v3/kv/lease/leases"):
            j = self.ok(path, {})
            self.assertEqual(sorted(j), ["header", "leases"])
            self.assertEqual(j["header"], H(r0 + 1))
            for one in j["leases"]:
                self.assertEqual(sorted(one), ["ID"])
            ids = [one["ID"] for one in j["leases"]]
            self.assertIn(lid, ids)
            self.assertIn(auto["ID"], ids)
        # revoking deletes the attached key: a new revision
        self.ok("/v3/lease/revoke", {"ID": lid}, {"header": H(r0 + 2)})
        self.ok("/v3/kv/lease/revoke", {"ID": auto["ID"]}, {"header": H(r0 + 2)})
        for path in ("/v3/lease/revoke", "/v3/kv/lease/revoke"):
            self.err(path, {"ID": lid}, 5, LEASE_NOT_FOUND)
        self.ok("/v3/kv/range", {"key": b64("/t/lease/k")}, {"header": H(r0 + 2)})
        # TTL below the minimum: raised to it (etcd: 2 s with its default timing)
        j = self.ok("/v3/lease/grant", {"TTL": 1})
        self.assertGreaterEqual(int(j["TTL"]), 2)
        self.ok("/v3/lease/revoke", {"ID": j["ID"]})

    def test_cluster_member_paths(self):
        i = self.ident()
        s = self.srv
        me = {"ID": i["member_id"], "name": s.name,
              "peerURLs": ["http://127.0.0.1:%d" % s.peer_port],
              "clientURLs": ["http://%s" % s.endpoint]}
        hdr = {"cluster_id": i["cluster_id"], "member_id": i["member_id"],
               "raft_term": i["raft_term"]}      # no revision in membership answers
        self.ok("/v3/cluster/member/list", {}, {"header": hdr, "members": [me]})
        self.ok("/v3/cluster/member/list", {"linearizable": True},
                {"header": hdr, "members": [me]})
        self.ok("/v3/cluster/member/update", {"ID": i["member_id"], "peerURLs": me["peerURLs"]},
                {"header": hdr, "members": [me]})
        self.err("/v3/cluster/member/add", {"peerURLs": ["notaurl"]}, 3,
                 "etcdserver: given member URLs are invalid")
        self.err("/v3/cluster/member/add", {"peerURLs": me["peerURLs"]}, 9,
                 "etcdserver: Peer URLs already exists")
        # a learner that never starts: no vote, so the member keeps its quorum
        url = "http://127.0.0.1:%d" % harness.free_port()
        j = self.ok("/v3/cluster/member/add", {"peerURLs": [url], "isLearner": True})
        new = j["member"]["ID"]
        try:
            learner = {"ID": new, "peerURLs": [url], "isLearner": True}
            both = sorted([me, learner], key=lambda m: int(m["ID"]))  # listed by ID
            self.assertEqual(j, {"header": hdr, "member": learner, "members": both})
            self.ok("/v3/cluster/member/list", {}, {"header": hdr, "members": both})
            self.err("/v3/cluster/member/promote", {"ID": new}, 9,
                     "etcdserver: can only promote a learner member which is in sync with "
                     "leader")
            self.err("/v3/cluster/member/promote", {"ID": i["member_id"]}, 9,
                     "etcdserver: can only promote a learner member")
        finally:
            r = self.post("/v3/cluster/member/remove", {"ID": new})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"header": hdr, "members": [me]})
        for path in ("remove", "update", "promote"):
            self.err("/v3/cluster/member/" + path, {"ID": new}, 5, "etcdserver: member not found")

    def test_maintenance_paths(self):
        i = self.ident()
        H = self.H
        r0 = i["revision"]
        # Alarm, Defragment and MoveLeader answer without a header
        self.ok("/v3/maintenance/alarm", {}, {})
        self.ok("/v3/maintenance/alarm", {"action": "GET"}, {})
        self.ok("/v3/maintenance/alarm", {"action": 0, "memberID": "0", "alarm": "NONE"}, {})
        self.ok("/v3/maintenance/defragment", {}, {})
        st = self.ok("/v3/maintenance/status", {})
        self.assertEqual(sorted(st), sorted(["header", "version", "dbSize", "leader",
                                             "raftIndex", "raftTerm", "raftAppliedIndex",
                                             "dbSizeInUse"]), st)
        self.assertEqual(st["header"], H(r0))
        self.assertEqual(st["version"], i["version"])
        self.assertEqual(st["leader"], i["member_id"])
        self.assertEqual(st["raftTerm"], i["raft_term"])
        for k in ("dbSize", "raftIndex", "raftAppliedIndex", "dbSizeInUse"):
            self.assertRegex(st[k], r"^[1-9][0-9]*$", k)
        # /v3/maintenance/hash is Hash (HashKV shares the path and loses): no
        # compact_revision, the hash a JSON number (uint32)
        for body in ({}, {"revision": str(r0)}):
            j = self.ok("/v3/maintenance/hash", body)
            self.assertEqual(sorted(j), ["hash", "header"], j)
            self.assertEqual(j["header"], H(r0))
            self.assertIsInstance(j["hash"], int)
        self.ok("/v3/maintenance/transfer-leadership", {"targetID": i["member_id"]}, {})
        self.err("/v3/maintenance/transfer-leadership", {"targetID": "123"}, 9,
                 "etcdserver: bad leader transferee")

    def test_lock_paths(self):
        H = self.H
        lease = self.lease()
        r0 = self.rev()
        j = self.ok("/v3/lock/lock", {"name": b64("/t/mylock"), "lease": lease})
        key = "/t/mylock/%x" % int(lease)
        self.assertEqual(j, {"header": H(r0 + 1), "key": b64(key)})
        self.ok("/v3/kv/range", {"key": b64(key)},
                {"header": H(r0 + 1), "kvs": [self.kv(key, "", r0 + 1, r0 + 1, 1, lease)],
                 "count": "1"})
        self.ok("/v3/lock/unlock", {"key": b64(key)}, {"header": H(r0 + 2)})
        self.ok("/v3/lock/unlock", {"key": b64(key)}, {"header": H(r0 + 2)})
        self.ok("/v3/lock/unlock", {"key": b64("/t/no-such-lock")}, {"header": H(r0 + 2)})
        # v3lock's refusals come with code Unknown (2): HTTP 500
        self.err("/v3/lock/lock", {"name": b64("/t/mylock"), "lease": "12345"}, 2,
                 LEASE_NOT_FOUND)
        self.err("/v3/lock/unlock", {}, 2, KEY_NOT_PROVIDED)
        self.ok("/v3/lease/revoke", {"ID": lease})

    def test_election_paths(self):
        H = self.H
        name = "/t/election"
        self.err("/v3/election/leader", {"name": b64(name)}, 2, "election: no leader")
        lease = self.lease()
        r0 = self.rev()
        key = "%s/%x" % (name, int(lease))
        leader = {"name": b64(name), "key": b64(key), "rev": str(r0 + 1), "lease": lease}
        self.ok("/v3/election/campaign", {"name": b64(name), "lease": lease, "value": b64("v1")},
                {"header": H(r0 + 1), "leader": leader})
        self.ok("/v3/election/leader", {"name": b64(name)},
                {"header": H(r0 + 1), "kv": self.kv(key, "v1", r0 + 1, r0 + 1, 1, lease)})
        self.ok("/v3/election/proclaim", {"leader": leader, "value": b64("v2")},
                {"header": H(r0 + 2)})
        self.ok("/v3/election/leader", {"name": b64(name)},
                {"header": H(r0 + 2), "kv": self.kv(key, "v2", r0 + 1, r0 + 2, 2, lease)})
        self.err("/v3/election/proclaim", {"leader": dict(leader, rev="1"), "value": b64("v3")},
                 2, "election: not leader")
        self.err("/v3/election/proclaim", {"value": b64("v3")}, 2,
                 '"leader" field must be provided')
        self.ok("/v3/election/resign", {"leader": leader}, {"header": H(r0 + 3)})
        self.ok("/v3/election/resign", {"leader": leader}, {"header": H(r0 + 3)})
        self.err("/v3/election/resign", {}, 2, '"leader" field must be provided')
        self.err("/v3/election/leader", {"name": b64(name)}, 2, "election: no leader")
        self.err("/v3/election/campaign", {"name": b64(name), "lease": "12345",
                                           "value": b64("v")}, 2, LEASE_NOT_FOUND)
        self.ok("/v3/lease/revoke", {"ID": lease})

    def test_auth_paths_auth_off(self):
        H = self.H
        r0 = self.rev()
        h = {"header": H(r0)}          # auth answers carry the KV revision
        self.err("/v3/auth/authenticate", {"name": "root", "password": "x"}, 9,
                 "etcdserver: authentication is not enabled")
        self.err("/v3/auth/enable", {}, 9, "etcdserver: root user does not exist")
        self.ok("/v3/auth/disable", {}, h)
        self.ok("/v3/auth/user/add", {"name": "alice", "password": "pw"}, h)
        self.err("/v3/auth/user/add", {"name": "alice", "password": "pw"}, 9,
                 "etcdserver: user name already exists")
        self.ok("/v3/auth/user/add", {"name": "nopw", "options": {"no_password": True}}, h)
        self.ok("/v3/auth/role/add", {"name": "reader"}, h)
        self.ok("/v3/auth/role/grant", {"name": "reader", "perm": {
            "permType": "READWRITE", "key": b64("/a"), "range_end": b64("/b")}}, h)
        self.ok("/v3/auth/role/grant", {"name": "reader", "perm": {"permType": "READ",
                                                                   "key": b64("/x")}}, h)
        self.ok("/v3/auth/user/grant", {"user": "alice", "role": "reader"}, h)
        self.ok("/v3/auth/user/get", {"name": "alice"}, dict(h, roles=["reader"]))
        self.ok("/v3/auth/user/get", {"name": "nopw"}, h)
        self.ok("/v3/auth/user/list", {}, dict(h, users=["alice", "nopw"]))
        # READ is the enum's zero: left out
        self.ok("/v3/auth/role/get", {"role": "reader"}, dict(h, perm=[
            {"permType": "READWRITE", "key": b64("/a"), "range_end": b64("/b")},
            {"key": b64("/x")}]))
        self.ok("/v3/auth/role/list", {}, dict(h, roles=["reader"]))
        self.ok("/v3/auth/role/revoke", {"role": "reader", "key": b64("/x")}, h)
        self.err("/v3/auth/role/revoke", {"role": "reader", "key": b64("/x")}, 9,
                 "etcdserver: permission is not granted to the role")
        self.ok("/v3/auth/user/changepw", {"name": "alice", "password": "pw2"}, h)
        self.ok("/v3/auth/user/revoke", {"name": "alice", "role": "reader"}, h)
        self.err("/v3/auth/user/revoke", {"name": "alice", "role": "reader"}, 9,
                 "etcdserver: role is not granted to the user")
        self.ok("/v3/auth/user/delete", {"name": "alice"}, h)
        self.ok("/v3/auth/user/delete", {"name": "nopw"}, h)
        self.ok("/v3/auth/role/delete", {"role": "reader"}, h)
        self.ok("/v3/auth/user/list", {}, h)
        self.ok("/v3/auth/role/list", {}, h)
        self.err("/v3/auth/user/get", {"name": "alice"}, 9, "etcdserver: user name not found")
        self.err("/v3/auth/role/get", {"role": "reader"}, 9, "etcdserver: role name not found")

    # every unary path with a body it must refuse or may do harmlessly: the
    # answer of /v3/ and of /v3beta/ (an alias in 3.4); /v3alpha/ is gone
    PATHS = [
        ("kv/range", {}, 3, KEY_NOT_PROVIDED),
        ("kv/put", {}, 3, KEY_NOT_PROVIDED),
        ("kv/deleterange", {}, 3, KEY_NOT_PROVIDED),
        ("kv/txn", {}, 0, None),
        ("kv/compaction", {"revision": "100000000"}, 11, FUTURE_REV),
        ("lease/grant", {"TTL": 3}, 0, None),
        ("lease/revoke", {"ID": "1"}, 5, LEASE_NOT_FOUND),
        ("kv/lease/revoke", {"ID": "1"}, 5, LEASE_NOT_FOUND),
        ("lease/timetolive", {"ID": "1"}, 0, None),
        ("kv/lease/timetolive", {"ID": "1"}, 0, None),
        ("lease/leases", {}, 0, None),
        ("kv/lease/leases", {}, 0, None),
        ("cluster/member/add", {}, 3, "etcdserver: given member URLs are invalid"),
        ("cluster/member/remove", {}, 5, "etcdserver: member not found"),
        ("cluster/member/update", {}, 5, "etcdserver: member not found"),
        ("cluster/member/list", {}, 0, None),
        ("cluster/member/promote", {}, 5, "etcdserver: member not found"),
        ("maintenance/alarm", {}, 0, None),
        ("maintenance/status", {}, 0, None),
        ("maintenance/defragment", {}, 0, None),
        ("maintenance/hash", {}, 0, None),
        ("maintenance/transfer-leadership", {}, 9, "etcdserver: bad leader transferee"),
        ("auth/enable", {}, 9, "etcdserver: root user does not exist"),
        ("auth/disable", {}, 0, None),
        ("auth/authenticate", {}, 9, "etcdserver: authentication is not enabled"),
        ("auth/user/add", {}, 3, "etcdserver: user name is empty"),
        ("auth/user/get", {}, 9, "etcdserver: user name not found"),
        ("auth/user/list", {}, 0, None),
        ("auth/user/delete", {}, 9, "etcdserver: user name not found"),
        ("auth/user/changepw", {}, 9, "etcdserver: user name not found"),
        ("auth/user/grant", {}, 9, "etcdserver: user name not found"),
        ("auth/user/revoke", {}, 9, "etcdserver: user name not found"),
        ("auth/role/add", {}, 3, "etcdserver: role name is empty"),
        ("auth/role/get", {}, 9, "etcdserver: role name not found"),
        ("auth/role/list", {}, 0, None),
        ("auth/role/delete", {}, 9, "etcdserver: role name not found"),
        ("auth/role/grant", {}, 9, "etcdserver: role name not found"),
        ("auth/role/revoke", {}, 9, "etcdserver: role name not found"),
        ("lock/lock", {"name": b64("/t/paths"), "lease": "1"}, 2, LEASE_NOT_FOUND),
        ("lock/unlock", {}, 2, KEY_NOT_PROVIDED),
        ("election/campaign", {"name": b64("/t/paths"), "lease": "1"}, 2, LEASE_NOT_FOUND),
        ("election/proclaim", {}, 2, '"leader" field must be provided'),
        ("election/leader", {"name": b64("/t/paths")}, 2, "election: no leader"),
        ("election/resign", {}, 2, '"leader" field must be provided'),
    ]

    def test_every_path_v3_and_v3beta(self):
        for prefix in ("/v3/", "/v3beta/"):
            for path, body, code, msg in self.PATHS:
                with self.subTest(path=prefix + path):
                    r = self.post(prefix + path, body)
                    if code == 0:
                        self.assertEqual(r.status, 200, r)
                        self.assertJsonCT(r)
                        self.assertIsInstance(r.json(), dict)
                    else:
                        self.assertErr(r, code, msg, what=prefix + path)
        # the streaming paths answer 200 under both prefixes (a stream that ends
        # with its body: keepalive of a lease that does not exist; snapshot)
        for prefix in ("/v3/", "/v3beta/"):
            for path, body in (("lease/keepalive", {"ID": "1"}),
                               ("maintenance/snapshot", {})):
                with self.subTest(path=prefix + path):
                    r = self.post(prefix + path, body, headers=())
                    self.assertEqual(r.status, 200, r)
                    self.assertTrue(r.chunked, r)
                    self.assertTrue(r.messages()[0]["result"], r)
            with Stream(self.ep, prefix + "watch", {"create_request": {"key": b64("/t/p")}}) as w:
                self.assertEqual(w.next()["result"]["created"], True)
        streams = [("watch", {"create_request": {"key": b64("/t/p")}}, 0, 0),
                   ("lease/keepalive", {"ID": "1"}, 0, 0),
                   ("maintenance/snapshot", {}, 0, 0),
                   ("election/observe", {"name": b64("/t/paths")}, 0, 0)]
        for path, body, code, msg in self.PATHS + streams:
            with self.subTest(path="/v3alpha/" + path), Conn(self.ep) as c:
                # the status line only: were it served, a stream would not end
                c.request("POST", "/v3alpha/" + path, body)
                try:
                    h = c.read_final_head(timeout=3)
                except Timeout:
                    self.fail("served as a stream, not 404 (no status line within 3 s)")
                self.assertEqual(h.status, 404, "%s %s" % (h.status, h.reason))
                if STRICT:
                    self.assertEqual(c.read_response_body(h), b"404 page not found\n")

    def test_json_encodings_accepted(self):
        """int64 as string or number, enums by name or number, the camelCase
        (JSON) names as well as the proto names; unknown fields ignored"""
        p = "/t/enc/"
        self.ok("/v3/kv/put", {"key": b64(p + "a"), "value": b64("1")})
        self.ok("/v3/kv/put", {"key": b64(p + "b"), "value": b64("2")})
        r0 = self.rev()
        a = self.kv(p + "a", "1", r0 - 1, r0 - 1, 1)
        for body in ({"key": b64(p + "a"), "range_end": b64(p + "c"), "limit": 1},
                     {"key": b64(p + "a"), "range_end": b64(p + "c"), "limit": "1"},
                     {"key": b64(p + "a"), "rangeEnd": b64(p + "c"), "limit": 1},
                     {"key": b64(p + "a"), "range_end": b64(p + "c"), "limit": 1,
                      "sort_order": "ASCEND"},
                     {"key": b64(p + "a"), "range_end": b64(p + "c"), "limit": 1,
                      "sortOrder": 1, "sortTarget": "KEY"},
                     {"key": b64(p + "a"), "range_end": b64(p + "c"), "limit": 1,
                      "no_such_field": {"x": [1, 2]}, "another": None}):
            with self.subTest(body=body):
                self.ok("/v3/kv/range", body, {"header": self.H(r0), "kvs": [a], "more": True,
                                               "count": "2"})
        self.ok("/v3/kv/range", {"key": b64(p + "a"), "keysOnly": True, "countOnly": True},
                {"header": self.H(r0), "count": "1"})
        if STRICT:
            # base64 with a newline in it is accepted (Go's decoder skips \n, \r)
            self.ok("/v3/kv/range", {"key": b64(p + "a") + "\n", "count_only": True},
                    {"header": self.H(r0), "count": "1"})
        # a JSON null is the default
        self.err("/v3/kv/range", {"key": None}, 3, KEY_NOT_PROVIDED)


# ---------------------------------------------------------------- streams

class Streams(HttpCase):
    """watch, lease/keepalive, election/observe, maintenance/snapshot"""

    def assertStreamHead(self, st):
        h = st.read_head()
        self.assertEqual((h.version, h.status), ("HTTP/1.1", 200), h)
        self.assertEqual(h.header("Content-Type"), "application/json")
        self.assertEqual((h.header("Transfer-Encoding") or "").lower(), "chunked", h.headers)
        self.assertIsNone(h.header("Content-Length"))

    def test_watch_put_appears(self):
        k = "/t/w/one"
        r0 = self.rev()
        with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64(k)}}) as w:
            self.assertStreamHead(w)
            line = w.next_raw()
            self.assertEqual(json.loads(line), {"result": {"header": self.H(r0), "created": True}})
            # the message is followed by a newline, in the same chunk
            self.assertTrue(w.chunks[0].endswith(b"\n"), w.chunks)
            self.assertEqual(w.chunks[0], line + b"\n")
            self.ok("/v3/kv/put", {"key": b64(k), "value": b64("v1")})
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 1), "events": [
                {"kv": self.kv(k, "v1", r0 + 1, r0 + 1, 1)}]}})
            self.ok("/v3/kv/put", {"key": b64(k + "x"), "value": b64("other key")})
            self.ok("/v3/kv/deleterange", {"key": b64(k)})
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 3), "events": [
                {"type": "DELETE", "kv": {"key": b64(k), "mod_revision": str(r0 + 3)}}]}})
            # the body has ended, the watch stays open
            with self.assertRaises(Timeout):
                w.next(timeout=0.5)
            self.assertFalse(w.ended)

    def test_watch_several_requests_in_body(self):
        """the body is the client's stream: several JSON objects, back to back or
        separated by whitespace, each one WatchRequest"""
        k = "/t/w/several"
        r0 = self.rev()
        body = (json.dumps({"create_request": {"key": b64(k), "watch_id": 5}})
                + json.dumps({"create_request": {"key": b64(k), "range_end": b64(k + "z"),
                                                 "watch_id": 6, "prev_kv": True}})
                + "\n " + json.dumps({"cancel_request": {"watch_id": 5}}))
        with Stream(self.ep, "/v3/watch", body) as w:
            H = self.H(r0)
            self.assertEqual(w.next(), {"result": {"header": H, "watch_id": "5", "created": True}})
            self.assertEqual(w.next(), {"result": {"header": H, "watch_id": "6", "created": True}})
            self.assertEqual(w.next(), {"result": {"header": H, "watch_id": "5",
                                                   "canceled": True}})
            self.ok("/v3/kv/put", {"key": b64(k + "a"), "value": b64("1")})
            self.ok("/v3/kv/put", {"key": b64(k + "a"), "value": b64("2")})
            a1 = self.kv(k + "a", "1", r0 + 1, r0 + 1, 1)
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 1), "watch_id": "6",
                                                   "events": [{"kv": a1}]}})
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 2), "watch_id": "6",
                                                   "events": [{
                                                       "kv": self.kv(k + "a", "2", r0 + 1,
                                                                     r0 + 2, 2),
                                                       "prev_kv": a1}]}})

    def test_watch_from_revision_and_compacted(self):
        k = "/t/w/hist"
        r0 = self.rev()
        self.ok("/v3/kv/put", {"key": b64(k), "value": b64("1")})
        self.ok("/v3/kv/put", {"key": b64(k), "value": b64("2")})
        with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64(k),
                                                              "start_revision": r0 + 1}}) as w:
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 2), "created": True}})
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 2), "events": [
                {"kv": self.kv(k, "1", r0 + 1, r0 + 1, 1)},
                {"kv": self.kv(k, "2", r0 + 1, r0 + 2, 2)}]}})
        self.ok("/v3/kv/compaction", {"revision": r0 + 2})
        with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64(k),
                                                              "start_revision": r0 + 1}}) as w:
            self.assertEqual(w.next(), {"result": {"header": self.H(r0 + 2), "created": True}})
            # the compacted answer's header has no revision
            self.assertEqual(w.next(), {"result": {"header": self.H(), "canceled": True,
                                                   "compact_revision": str(r0 + 2)}})

    def test_watch_bad_json_first(self):
        """a stream whose first request does not decode: 500, code Unknown"""
        r = self.post("/v3/watch", "{bad")
        self.assertDecodeErr(r, "watch {bad", "invalid character", code=2, status=500)

    def test_lease_keepalive(self):
        lid = self.lease(60)
        r0 = self.rev()
        with Stream(self.ep, "/v3/lease/keepalive", [{"ID": lid}, {"ID": lid}, {"ID": "999"}]) as k:
            self.assertStreamHead(k)
            one = {"result": {"header": self.H(r0), "ID": lid, "TTL": "60"}}
            self.assertEqual(k.next(), one)
            self.assertEqual(k.next(), one)
            # a lease that does not exist: TTL 0, left out
            self.assertEqual(k.next(), {"result": {"header": self.H(r0), "ID": "999"}})
            # the body ended, so did the client's stream, so does the answer
            self.assertIsNone(k.next(timeout=5))
            self.assertTrue(k.ended)
            # and the connection serves the next request
            r = k.conn.call("GET", "/version")
            self.assertEqual(r.status, 200, r)
        self.ok("/v3/lease/revoke", {"ID": lid})

    def test_election_observe(self):
        name = "/t/observe"
        lease = self.lease()
        j = self.ok("/v3/election/campaign", {"name": b64(name), "lease": lease,
                                              "value": b64("v1")})
        r1 = int(j["header"]["revision"])
        key = "%s/%x" % (name, int(lease))
        with Stream(self.ep, "/v3/election/observe", {"name": b64(name)}) as o:
            self.assertStreamHead(o)
            self.assertEqual(o.next(), {"result": {
                "header": self.H(r1), "kv": self.kv(key, "v1", r1, r1, 1, lease)}})
            self.ok("/v3/election/proclaim", {"leader": j["leader"], "value": b64("v2")})
            self.assertEqual(o.next(), {"result": {
                "header": self.H(r1 + 1), "kv": self.kv(key, "v2", r1, r1 + 1, 2, lease)}})
        self.ok("/v3/election/resign", {"leader": j["leader"]})
        self.ok("/v3/lease/revoke", {"ID": lease})

    def test_snapshot_stream(self):
        import hashlib
        with Stream(self.ep, "/v3/maintenance/snapshot", {}, timeout=30) as s:
            self.assertStreamHead(s)
            first = s.next()
            self.assertEqual(list(first), ["result"])
            # no header; remaining_bytes left out when 0
            self.assertLessEqual(set(first["result"]), {"blob", "remaining_bytes"}, first)
            self.assertTrue(unb64(first["result"]["blob"]))
            msgs = [first] + s.finish()
        data = b"".join(unb64(m["result"]["blob"]) for m in msgs)
        for m in msgs:
            self.assertLessEqual(set(m["result"]), {"blob", "remaining_bytes"})
        self.assertEqual(msgs[-1]["result"].get("remaining_bytes", "0"), "0")
        # the last 32 bytes: SHA-256 of everything before (what etcdctl checks)
        self.assertEqual(hashlib.sha256(data[:-32]).digest(), data[-32:])


# ----------------------------------------------------------------- errors

class Errors(HttpCase):
    def test_malformed_json(self):
        for body in ("{bad", '{"key":', "[]", '{"key":"YQ=="', "nonsense"):
            with self.subTest(body=body):
                self.assertDecodeErr(self.post("/v3/kv/range", body), body)
        j = self.assertDecodeErr(self.post("/v3/kv/range", "{bad"), "{bad")
        if STRICT:
            self.assertEqual(j["message"],
                             "invalid character 'b' looking for beginning of object key string")

    def test_bad_base64(self):
        for s, at in (("!!!", 0), ("YW Jj", 2), ("_-8=", 0)):
            with self.subTest(key=s):
                j = self.assertDecodeErr(self.post("/v3/kv/range", {"key": s}), s,
                                         "illegal base64 data at input byte")
                if STRICT:
                    self.assertEqual(j["message"], "illegal base64 data at input byte %d" % at)
        self.assertDecodeErr(self.post("/v3/kv/put", {"key": b64("k"), "value": "%%"}), "value")

    def test_wrong_json_types(self):
        for body in ({"key": b64("a"), "count_only": "true"},
                     {"key": b64("a"), "serializable": 1},
                     {"key": 12},
                     {"key": b64("a"), "limit": 1.5},
                     {"key": b64("a"), "limit": "x1"},
                     {"key": b64("a"), "limit": "9223372036854775808"},
                     {"key": b64("a"), "sort_order": "BOGUS"}):
            with self.subTest(body=body):
                self.assertDecodeErr(self.post("/v3/kv/range", body), json.dumps(body))

    def test_unknown_field_ignored(self):
        r0 = self.rev()
        self.ok("/v3/kv/range", {"key": b64("/t/unknown"), "bogus": 1, "nested": {"a": [1]}},
                {"header": self.H(r0)})

    def test_empty_body(self):
        """an empty body is the empty message"""
        r0 = self.rev()
        self.assertErr(call(self.ep, "POST", "/v3/kv/range", b""), 3, KEY_NOT_PROVIDED)
        r = call(self.ep, "POST", "/v3/cluster/member/list", b"")
        self.assertEqual(r.status, 200, r)
        r = call(self.ep, "POST", "/v3/kv/txn", b"")
        self.assertEqual((r.status, r.json()), (200, {"header": self.H(r0), "succeeded": True}))
        # without Content-Length at all (HTTP/1.1: no body)
        r = call(self.ep, "POST", "/v3/kv/range", None)
        self.assertErr(r, 3, KEY_NOT_PROVIDED)

    def test_wrong_method(self):
        for method in ("GET", "PUT", "DELETE"):
            for path in ("/v3/kv/range", "/v3/watch", "/v3/maintenance/status"):
                with self.subTest(method=method, path=path):
                    r = call(self.ep, method, path, b"{}" if method != "GET" else None)
                    self.assertEqual(r.status, 405, r)
                    if STRICT:
                        self.assertEqual(r.body, b"Method Not Allowed\n")
                        self.assertEqual(r.header("Content-Type"), "text/plain; charset=utf-8")
        # /version and /health are GET only
        for path in ("/version", "/health"):
            r = call(self.ep, "POST", path, b"{}")
            self.assertEqual(r.status, 405, r)
            if STRICT:
                self.assertEqual(r.header("Allow"), "GET")

    def test_unknown_paths(self):
        cases = [("POST", "/nope", b"404 page not found\n"),
                 ("GET", "/", b"404 page not found\n"),
                 ("GET", "/v2/keys", b"404 page not found\n"),     # no --enable-v2
                 ("GET", "/version/", b"404 page not found\n"),
                 ("POST", "/v3alpha/kv/range", b"404 page not found\n"),
                 # under /v3/: grpc-gateway's own 404
                 ("POST", "/v3/", b"Not Found\n"),
                 ("POST", "/v3/kv/nope", b"Not Found\n"),
                 ("POST", "/v3/kv/range/", b"Not Found\n"),
                 ("POST", "/v3/maintenance/hashkv", b"Not Found\n"),
                 ("POST", "/v3/auth/status", b"Not Found\n"),
                 ("POST", "/v3/maintenance/downgrade", b"Not Found\n")]
        for method, path, body in cases:
            with self.subTest(path=path):
                r = call(self.ep, method, path, b"{}" if method == "POST" else None)
                self.assertEqual(r.status, 404, r)
                if STRICT:
                    self.assertEqual(r.body, body)
                    self.assertEqual(r.header("Content-Type"), "text/plain; charset=utf-8")

    def test_error_keeps_connection(self):
        """error answers do not close the connection (chunked, with a trailer in
        etcd: grpc-gateway sets Trailer: Grpc-Trailer-Content-Type)"""
        with Conn(self.ep) as c:
            for _ in range(3):
                r = c.call("POST", "/v3/lease/revoke", {"ID": "1"})
                self.assertErr(r, 5, LEASE_NOT_FOUND)
                self.assertFalse(r.closed)
                r = c.call("POST", "/v3/kv/range", "{bad")
                self.assertEqual(r.status, 400)
                self.assertFalse(r.closed)


# -------------------------------------------------------------- HTTP/1.1

class OverHttp2(unittest.TestCase):
    """the same requests over HTTP/2: curl on an https:// URL picks h2 by ALPN
    (etcd routes a non-gRPC h2 request to its HTTP handlers); and over h2c
    with prior knowledge, which quorum routes the same way (etcd 3.4 sends
    every cleartext HTTP/2 connection to gRPC, which drops such a request)"""

    def curl(self, url, *args):
        r = subprocess.run(["curl", "-sk", "-w", "\\n%{http_code} %{http_version}", *args, url],
                           capture_output=True, text=True, timeout=30)
        body, _, tail = r.stdout.rpartition("\n")
        code, version = tail.split()
        return int(code), version, body

    def check(self, base, h2flag, expect_h2=True):
        key, val = b64("/t/h2"), b64("v")
        code, ver, _ = self.curl(base + "/v3/kv/put", h2flag, "-d",
                                 json.dumps({"key": key, "value": val}))
        self.assertEqual((code, ver), (200, "2" if expect_h2 else "1.1"))
        code, ver, body = self.curl(base + "/v3/kv/range", h2flag, "-d", json.dumps({"key": key}))
        self.assertEqual(code, 200, body)
        self.assertEqual(json.loads(body)["kvs"][0]["value"], val)
        code, _, body = self.curl(base + "/v3/kv/range", h2flag, "-d", "{bad")
        self.assertEqual(code, 400, body)
        self.assertEqual(json.loads(body)["code"], 3)
        code, _, body = self.curl(base + "/health", h2flag)
        self.assertEqual((code, json.loads(body)), (200, {"health": "true"}))
        code, _, body = self.curl(base + "/v3/kv/nope", h2flag, "-d", "{}")
        self.assertEqual(code, 404)

    def test_tls_alpn(self):
        s = Server(TARGET, extra_args=["--auto-tls"])
        url = "https://127.0.0.1:%d" % s.client_port
        args = s.args()
        args[args.index("--listen-client-urls") + 1] = url
        args[args.index("--advertise-client-urls") + 1] = url
        s.args = lambda: args
        s.wait_ready = lambda timeout=20.0: wait_for(
            lambda: self.curl(url + "/health")[0] == 200, timeout=timeout, what="https /health")
        try:
            s.start()
            self.check(url, "--http2")
            self.check(url, "--http1.1", expect_h2=False)
        finally:
            s.cleanup()

    def test_h2c_prior_knowledge(self):
        url = "http://%s" % shared_server().endpoint
        if TARGET == "etcd":
            code, _, _ = self.curl(url + "/v3/kv/range", "--http2-prior-knowledge", "-d", "{}")
            self.assertNotEqual(code, 200)
        else:
            self.check(url, "--http2-prior-knowledge")


class Transport(HttpCase):
    def test_keep_alive_many_requests(self):
        """one connection, every kind of answer, no reconnect (http.client would
        reconnect silently, so raw sockets)"""
        with Conn(self.ep) as c:
            for i in range(5):
                r = c.call("POST", "/v3/kv/put", {"key": b64("/t/ka"), "value": b64(str(i))})
                self.assertEqual(r.status, 200, r)
                r = c.call("POST", "/v3/kv/range", {"key": b64("/t/ka")})
                self.assertEqual(unb64(r.json()["kvs"][0]["value"]), str(i).encode())
                for method, path, body, st in (("POST", "/v3/kv/range", {}, 400),
                                               ("POST", "/v3/kv/range", "{bad", 400),
                                               ("GET", "/v3/kv/range", None, 405),
                                               ("POST", "/nope", {}, 404),
                                               ("POST", "/v3/nope", {}, 404),
                                               ("GET", "/version", None, 200),
                                               ("GET", "/health", None, 200),
                                               ("POST", "/v3/lease/keepalive", {"ID": "1"}, 200)):
                    r = c.call(method, path, body)
                    self.assertEqual(r.status, st, (path, r))
                    self.assertFalse(r.closed, (path, r))
        # and with http.client, the way most Python code talks to it
        import http.client
        hc = http.client.HTTPConnection("127.0.0.1", self.srv.client_port, timeout=10)
        socks = set()
        for i in range(10):
            hc.request("POST", "/v3/kv/range", body=json.dumps({"key": b64("/t/ka")}))
            resp = hc.getresponse()
            self.assertEqual(resp.status, 200)
            json.loads(resp.read())
            socks.add(id(hc.sock))
        hc.close()
        self.assertEqual(len(socks), 1)

    def test_pipelined_requests(self):
        """requests sent back to back before any answer: answered in order"""
        with Conn(self.ep) as c:
            reqs = b"".join(Conn.encode_request("POST", "/v3/kv/put",
                                                {"key": b64("/t/pipe%d" % i), "value": b64("v")})
                            for i in range(5))
            reqs += Conn.encode_request("POST", "/v3/kv/range",
                                        {"key": b64("/t/pipe"), "range_end": b64("/t/piq"),
                                         "count_only": True})
            reqs += Conn.encode_request("GET", "/version")
            reqs += Conn.encode_request("POST", "/v3/kv/range", {})
            c.send(reqs)
            revs = [int(c.read_response().json()["header"]["revision"]) for _ in range(5)]
            self.assertEqual(revs, list(range(revs[0], revs[0] + 5)))
            self.assertEqual(c.read_response().json()["count"], "5")
            self.assertIn("etcdserver", c.read_response().json())
            self.assertEqual(c.read_response().status, 400)

    def test_http10(self):
        body = {"key": b64("/t/h10")}
        with Conn(self.ep) as c:
            r = c.call("POST", "/v3/kv/range", body, version="HTTP/1.0", host=False)
            self.assertEqual(r.status, 200, r)
            self.assertIsNotNone(r.header("Content-Length"))
            self.assertIsNone(r.header("Transfer-Encoding"))
            if STRICT:
                self.assertEqual(r.version, "HTTP/1.0")
            self.assertTrue(c.closed_by_peer(), "HTTP/1.0 without keep-alive: closed")
        with Conn(self.ep) as c:
            for _ in range(2):
                r = c.call("POST", "/v3/kv/range", body, [("Connection", "keep-alive")],
                           version="HTTP/1.0", host=False)
                self.assertEqual(r.status, 200, r)
                self.assertEqual((r.header("Connection") or "").lower(), "keep-alive")
            r = c.call("GET", "/version", None, version="HTTP/1.0", host=False)
            self.assertEqual(r.status, 200)
            self.assertTrue(c.closed_by_peer())
        # a stream to an HTTP/1.0 client: no chunking, the end is the close
        with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64("/t/h10")}},
                    version="HTTP/1.0") as w:
            h = w.read_head()
            self.assertEqual(h.status, 200)
            self.assertIsNone(h.header("Transfer-Encoding"))
            self.assertIsNone(h.header("Content-Length"))
            self.assertEqual(w.next()["result"]["created"], True)
            self.ok("/v3/kv/put", {"key": b64("/t/h10"), "value": b64("x")})
            self.assertEqual(w.next()["result"]["events"][0]["kv"]["value"], b64("x"))

    def test_expect_100_continue(self):
        body = json.dumps({"key": b64("/t/expect"), "value": b64("v")}).encode()
        with Conn(self.ep) as c:
            c.request("POST", "/v3/kv/put", None, [("Expect", "100-continue"),
                                                  ("Content-Length", str(len(body)))])
            h = c.read_head(timeout=3)
            self.assertEqual(h.status, 100, h)
            c.send(body)
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            # the connection goes on
            self.assertEqual(c.call("GET", "/version").status, 200)
        if STRICT:
            r = call(self.ep, "POST", "/v3/kv/range", {"key": b64("a")}, [("Expect", "bogus")])
            self.assertEqual(r.status, 417)

    def test_no_interim_100_unasked(self):
        """no "100 Continue" unless the client sent Expect: 100-continue (legal in
        HTTP/1.1 but not what etcd does, and naive clients take it for the
        answer), and never to an HTTP/1.0 client, Expect or not (RFC 9110 15.2)"""
        cases = [("POST", "/v3/kv/range", {"key": b64("a")}, (), "HTTP/1.1"),
                 ("POST", "/v3/kv/put", {"key": b64("/t/100"), "value": ""}, (), "HTTP/1.1"),
                 ("POST", "/v3/kv/range", "{bad", (), "HTTP/1.1"),
                 ("POST", "/v3/watch", {"create_request": {"key": b64("a")}}, (), "HTTP/1.1"),
                 ("POST", "/v3/kv/range", {"key": b64("a")}, (), "HTTP/1.0"),
                 ("POST", "/v3/kv/range", {"key": b64("a")}, [("Expect", "100-continue")],
                  "HTTP/1.0")]
        for method, path, body, headers, version in cases:
            with self.subTest(path=path, version=version, headers=headers), Conn(self.ep) as c:
                c.request(method, path, body, headers, version=version,
                          host=version == "HTTP/1.1")
                h = c.read_head()
                self.assertGreaterEqual(h.status, 200, "%s %s" % (h.status, h.reason))

    def test_connection_close_and_chunked_request(self):
        with Conn(self.ep) as c:
            r = c.call("GET", "/version", None, [("Connection", "close")])
            self.assertEqual(r.status, 200)
            self.assertEqual((r.header("Connection") or "").lower(), "close")
            self.assertTrue(c.closed_by_peer())
        # a request body in chunks
        with Conn(self.ep) as c:
            c.send(b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\n{\"key\r\n9\r\n\":\"YQ==\"}\r\n0\r\n\r\n")
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            self.assertIn("header", r.json())
            self.assertEqual(c.call("GET", "/version").status, 200)
        # a query string is ignored for the body's fields
        r = call(self.ep, "POST", "/v3/kv/range?key=YQ==", {})
        self.assertErr(r, 3, KEY_NOT_PROVIDED)

    def test_response_headers(self):
        """unary: application/json with Content-Length (small) or chunked
        (etcd: Go chunks a body above 2048 bytes); /version application/json;
        /health JSON text (etcd: text/plain, Go's sniffing)"""
        r = self.post("/v3/kv/range", {"key": b64("/t/hdr")})
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertTrue(r.header("Content-Length") or r.chunked)
        r = call(self.ep, "GET", "/version")
        self.assertEqual(r.header("Content-Type"), "application/json")
        if STRICT:
            r = call(self.ep, "GET", "/health")
            self.assertEqual(r.header("Content-Type"), "text/plain; charset=utf-8")

    def test_cors_headers(self):
        """etcd 3.4 answers everything with CORS headers (--cors default "*") and
        OPTIONS with an empty 200"""
        if not STRICT:
            self.skipTest("etcd's CORS headers: HTTP_STRICT=1 to check them on quorum")
        want = [("Access-Control-Allow-Headers", "accept, content-type, authorization"),
                ("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE"),
                ("Access-Control-Allow-Origin", "*")]
        for method, path in (("POST", "/v3/kv/range"), ("GET", "/version"),
                             ("GET", "/health"), ("POST", "/nope")):
            r = call(self.ep, method, path, {} if method == "POST" else None)
            for k, v in want:
                self.assertEqual(r.header(k), v, (path, k))
        r = call(self.ep, "OPTIONS", "/v3/kv/range")
        self.assertEqual((r.status, r.body), (200, b""))


# ------------------------------------------------ /version, /health, probes

class Health(HttpCase):
    def test_version(self):
        r = call(self.ep, "GET", "/version")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Content-Type"), "application/json")
        j = r.json()
        self.assertEqual(sorted(j), ["etcdcluster", "etcdserver"])
        self.assertRegex(j["etcdserver"], r"^3\.4\.[0-9]+$")
        self.assertEqual(j["etcdcluster"], "3.4.0")
        if TARGET == "etcd":
            self.assertEqual(r.body, b'{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}')
        # HTTP/1.0, HEAD
        r = call(self.ep, "GET", "/version", version="HTTP/1.0", host=False)
        self.assertEqual((r.status, r.json()), (200, j))

    def test_health_ok(self):
        for q in ("", "?serializable=true", "?serializable=false", "?exclude=NOSPACE"):
            with self.subTest(q=q):
                r = call(self.ep, "GET", "/health" + q)
                self.assertEqual((r.status, r.json()), (200, {"health": "true"}), r)
                if STRICT:
                    self.assertEqual(r.body, b'{"health":"true"}')

    def test_livez_readyz(self):
        """etcd 3.4.23 has neither (added in 3.5.x); quorum serves them as etcd
        3.6 does: 200 "ok" on a member that is live / ready, 405 for POST"""
        for path in ("/livez", "/readyz"):
            r = call(self.ep, "GET", path)
            if TARGET == "etcd":
                self.assertEqual((r.status, r.body), (404, b"404 page not found\n"))
            else:
                self.assertEqual((r.status, r.body), (200, b"ok"), r)
                self.assertEqual(call(self.ep, "POST", path, b"").status, 405)


class HealthNospace(HttpCase):
    """a NOSPACE alarm raised for real (a 16 MiB quota filled over HTTP)"""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(TARGET, extra_args=["--quota-backend-bytes", str(16 * MIB)]).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()

    def test_health_nospace(self):
        filler = b64(b"x" * (256 * 1024))
        for i in range(400):
            r = self.post("/v3/kv/put", {"key": b64("/fill/%d" % (i % 8)), "value": filler})
            if r.status != 200:
                break
        else:
            self.fail("the quota was never reached")
        self.assertErr(r, 8, NOSPACE)               # ResourceExhausted: 429
        self.assertGreater(i, 20)
        mid = self.ident()["member_id"]
        alarm = {"alarms": [{"memberID": mid, "alarm": "NOSPACE"}]}
        self.ok("/v3/maintenance/alarm", {"action": "GET"}, alarm)
        st = self.ok("/v3/maintenance/status", {})
        self.assertEqual(st["errors"], ["memberID:%s alarm:NOSPACE " % mid])
        for q, status in (("", 503), ("?serializable=true", 503), ("?exclude=nospace", 503),
                          ("?exclude=CORRUPT", 503), ("?exclude=NOSPACE", 200),
                          ("?exclude=NOSPACE&serializable=true", 200)):
            with self.subTest(q=q):
                r = call(self.ep, "GET", "/health" + q)
                self.assertEqual((r.status, r.json()), (status, {"health": str(status == 200)
                                                                 .lower()}), r)
                if STRICT and status == 503:
                    # http.Error: a newline after the JSON
                    self.assertEqual(r.body, b'{"health":"false"}\n')
        # refused writes, allowed reads and deletes
        self.err("/v3/kv/put", {"key": b64("new"), "value": b64("v")}, 8, NOSPACE)
        self.err("/v3/lease/grant", {"TTL": 10}, 8, NOSPACE)
        self.err("/v3/kv/txn", {"success": [{"request_put": {"key": b64("n"), "value": ""}}]},
                 8, NOSPACE)
        self.ok("/v3/kv/range", {"key": b64("/fill/0"), "keys_only": True})
        self.ok("/v3/kv/deleterange", {"key": b64("/fill/7")})
        # disarm over HTTP: the answer lists what was disarmed
        self.ok("/v3/maintenance/alarm", {"action": "DEACTIVATE", "memberID": mid,
                                          "alarm": "NOSPACE"}, alarm)
        self.ok("/v3/maintenance/alarm", {}, {})
        r = call(self.ep, "GET", "/health")
        self.assertEqual((r.status, r.json()), (200, {"health": "true"}))


class HealthNoLeader(unittest.TestCase):
    """two members, one killed: the other has no leader; /health 503"""

    def test_health_no_leader(self):
        import cluster
        kind = "quorum" if TARGET != "etcd" else "etcd"
        with cluster.Cluster(kind, n=2) as c:
            ep = c.endpoint(0)
            r = call(ep, "GET", "/health")
            self.assertEqual((r.status, r.json()), (200, {"health": "true"}), r)
            c.kill(1)
            wait_for(lambda: call(ep, "GET", "/health", timeout=8).status == 503, timeout=20,
                     what="/health 503 without a leader")
            for q in ("", "?serializable=true", "?exclude=NOSPACE"):
                r = call(ep, "GET", "/health" + q, timeout=8)
                self.assertEqual((r.status, r.json()), (503, {"health": "false"}), (q, r))
            r = call(ep, "GET", "/version")
            self.assertEqual(r.status, 200)
            # serializable reads are served locally
            r = post(ep, "/v3/kv/range", {"key": b64("a"), "serializable": True})
            self.assertEqual(r.status, 200, r)


class ThreeMembers(unittest.TestCase):
    """any member answers every path: a put through each member, a
    linearizable range through another sees it, a watch on one member sees a
    put made through a second, and after the leader is killed the others
    still answer (writes through Raft, reads by ReadIndex, as gRPC)"""

    def test_any_member(self):
        import cluster
        kind = "quorum" if TARGET != "etcd" else "etcd"
        with cluster.Cluster(kind, n=3) as c:
            eps = [c.endpoint(i) for i in range(3)]
            for i, ep in enumerate(eps):
                r = post(ep, "/v3/kv/put", {"key": b64("/m/%d" % i), "value": b64("v%d" % i)})
                self.assertEqual(r.status, 200, r)
                other = eps[(i + 1) % 3]
                r = post(other, "/v3/kv/range", {"key": b64("/m/%d" % i)})
                self.assertEqual(r.json()["kvs"][0]["value"], b64("v%d" % i), r)
            with Stream(eps[0], "/v3/watch", {"create_request": {"key": b64("/m/w")}}) as w:
                self.assertTrue(w.next()["result"]["created"])
                self.assertEqual(post(eps[1], "/v3/kv/put",
                                      {"key": b64("/m/w"), "value": b64("x")}).status, 200)
                self.assertEqual(w.next()["result"]["events"][0]["kv"]["value"], b64("x"))
            lead = c.leader_index()
            c.kill(lead)
            rest = [eps[i] for i in range(3) if i != lead]
            wait_for(lambda: call(rest[0], "GET", "/health", timeout=5).status == 200,
                     timeout=30, what="/health 200 under a new leader")
            r = post(rest[0], "/v3/kv/put", {"key": b64("/m/after"), "value": b64("y")})
            self.assertEqual(r.status, 200, r)
            r = post(rest[1], "/v3/kv/range", {"key": b64("/m/after")})
            self.assertEqual(r.json()["kvs"][0]["value"], b64("y"), r)


# ------------------------------------------------------------------- auth

class Auth(HttpCase):
    """auth on: the token of /v3/auth/authenticate in the Authorization header
    (the bare token, no "Bearer"); set up with etcdctl, checked over HTTP"""

    @classmethod
    def setUpClass(cls):
        s = cls.srv = Server(TARGET, extra_args=["--bcrypt-cost=4"]).start()
        for args in (("user", "add", "root:rootpw"), ("role", "add", "root"),
                     ("user", "grant-role", "root", "root"),
                     ("user", "add", "bob:bobpw"), ("role", "add", "r1"),
                     ("role", "grant-permission", "r1", "readwrite", "/bob/", "/bob0"),
                     ("user", "grant-role", "bob", "r1"), ("auth", "enable")):
            s.etcdctl(*args)

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()

    def login(self, name, pw):
        j = self.ok("/v3/auth/authenticate", {"name": name, "password": pw})
        self.assertEqual(sorted(j), ["header", "token"])
        self.assertEqual(j["header"], self.H(self.rev()))
        return j["token"]

    def test_no_token(self):
        UE = "etcdserver: user name is empty"
        self.err("/v3/kv/range", {"key": b64("a")}, 3, UE)
        self.err("/v3/kv/put", {"key": b64("a"), "value": ""}, 3, UE)
        self.err("/v3/auth/user/list", {}, 3, UE)
        self.err("/v3/auth/enable", {}, 3, UE)
        # Hash, Defragment, Snapshot: code Unknown and "auth: ..." text
        self.err("/v3/maintenance/hash", {}, 2, "auth: user name is empty")
        # open to anyone
        self.ok("/v3/maintenance/status", {})
        self.ok("/v3/maintenance/alarm", {}, {})
        self.ok("/v3/cluster/member/list", {})
        lid = self.ok("/v3/lease/grant", {"TTL": 5})["ID"]
        self.ok("/v3/lease/revoke", {"ID": lid})
        r = call(self.ep, "GET", "/health")
        self.assertEqual((r.status, r.json()), (200, {"health": "true"}))
        self.assertEqual(call(self.ep, "GET", "/version").status, 200)

    def test_authenticate(self):
        self.assertRegex(self.login("root", "rootpw"), r"^[A-Za-z]{16}\.[0-9]+$"
                         if TARGET == "etcd" else r".")
        for name, pw in (("root", "bad"), ("nobody", "x"), ("", "")):
            self.err("/v3/auth/authenticate", {"name": name, "password": pw}, 3,
                     "etcdserver: authentication failed, invalid user ID or password")

    def test_authorization_header(self):
        tok = self.login("root", "rootpw")
        r0 = self.rev()
        self.ok("/v3/kv/range", {"key": b64("a")}, {"header": self.H(r0)}, token=tok)
        # header names are case-insensitive; surrounding blanks are not part of it
        r = self.post("/v3/kv/range", {"key": b64("a")}, headers=[("authorization", tok)])
        self.assertEqual(r.status, 200, r)
        r = self.post("/v3/kv/range", {"key": b64("a")}, headers=[("Authorization", " " + tok)])
        self.assertEqual(r.status, 200, r)
        IT = "etcdserver: invalid auth token"
        for bad in ("Bearer " + tok, "bogus", "abcdefghijklmnop.1", tok + "x"):
            with self.subTest(token=bad):
                self.err("/v3/kv/range", {"key": b64("a")}, 16, IT, token=bad)
        # a Token header is not a credential (only Authorization, or grpc-gateway's
        # Grpc-Metadata-Token, reach the server's metadata)
        r = self.post("/v3/kv/range", {"key": b64("a")}, headers=[("Token", tok)])
        self.assertErr(r, 3, "etcdserver: user name is empty")
        # the same token over keep-alive, many requests
        with Conn(self.ep) as c:
            for i in range(5):
                r = c.call("POST", "/v3/kv/put", {"key": b64("/t/a%d" % i), "value": ""},
                           [("Authorization", tok)])
                self.assertEqual(r.status, 200, r)

    def test_permissions(self):
        tok = self.login("bob", "bobpw")
        PD = "etcdserver: permission denied"
        self.ok("/v3/kv/put", {"key": b64("/bob/x"), "value": b64("1")}, token=tok)
        self.ok("/v3/kv/range", {"key": b64("/bob/x"), "count_only": True}, token=tok)
        self.err("/v3/kv/range", {"key": b64("/other")}, 7, PD, token=tok)
        self.err("/v3/kv/put", {"key": b64("/other"), "value": ""}, 7, PD, token=tok)
        self.err("/v3/auth/user/list", {}, 7, PD, token=tok)
        self.ok("/v3/auth/user/get", {"name": "bob"},
                {"header": self.H(self.rev()), "roles": ["r1"]}, token=tok)
        self.err("/v3/maintenance/hash", {}, 2, "auth: permission denied", token=tok)
        self.err("/v3/maintenance/defragment", {}, 2, "auth: permission denied", token=tok)
        lease = self.ok("/v3/lease/grant", {"TTL": 30})["ID"]
        self.err("/v3/lock/lock", {"name": b64("/other"), "lease": lease}, 2, PD, token=tok)
        self.err("/v3/election/campaign", {"name": b64("/other"), "lease": lease,
                                           "value": ""}, 2, PD, token=tok)

    def test_streams_with_auth(self):
        bob = self.login("bob", "bobpw")
        r0 = self.rev()
        # a refused watch: created and canceled at once, watch_id -1, the stream open
        for tok, reason in (
                (None, "rpc error: code = InvalidArgument desc = etcdserver: user name is empty"),
                ("bogus", "rpc error: code = Unauthenticated desc = etcdserver: invalid auth "
                 "token"),
                (bob, "rpc error: code = PermissionDenied desc = etcdserver: permission denied")):
            with self.subTest(token=tok):
                h = [("Authorization", tok)] if tok else []
                with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64("/other")}},
                            headers=h) as w:
                    self.assertEqual(w.next(), {"result": {
                        "header": self.H(r0), "watch_id": "-1", "created": True,
                        "canceled": True, "cancel_reason": reason}})
        with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64("/bob/w")}},
                    headers=[("Authorization", bob)]) as w:
            self.assertEqual(w.next(), {"result": {"header": self.H(r0), "created": True}})
        # a stream refused before its first message: the status of the code and
        # grpc-gateway's stream error object
        for tok, msg in ((bob, "auth: permission denied"), (None, "auth: user name is empty")):
            with self.subTest(snapshot=msg):
                r = self.post("/v3/maintenance/snapshot", {}, token=tok)
                self.assertEqual(r.status, 500, r)
                self.assertJsonCT(r)
                self.assertEqual(r.json(), {"error": {
                    "grpc_code": 2, "http_code": 500, "message": msg,
                    "http_status": "Internal Server Error"}})
        root = self.login("root", "rootpw")
        r = self.post("/v3/maintenance/snapshot", {}, token=root)
        self.assertEqual(r.status, 200, r)
        self.assertIn("blob", r.messages()[0]["result"])

    def test_zz_disable(self):
        """last (by name): auth off over HTTP, old tokens then refused"""
        root = self.login("root", "rootpw")
        self.ok("/v3/auth/disable", {}, token=root)
        try:
            self.err("/v3/kv/range", {"key": b64("a")}, 16, "etcdserver: invalid auth token",
                     token=root)
            self.ok("/v3/kv/range", {"key": b64("a")})
            self.err("/v3/auth/authenticate", {"name": "root", "password": "rootpw"}, 9,
                     "etcdserver: authentication is not enabled")
        finally:
            self.srv.etcdctl("auth", "enable")


# ------------------------------------------------------ hostile clients

class Robustness(HttpCase):
    """requests cut short, a 10 MB body, thousands of idle connections: the
    server stays up and gRPC (etcdctl) keeps working on the same port"""

    @classmethod
    def setUpClass(cls):
        # room for 5,000 idle connections on both ends (the server inherits it)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 6500:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 6500), hard))
            except (ValueError, OSError):
                pass
        cls.srv = Server(TARGET).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.cleanup()

    def assertRefusedOrClosed(self, c, what, timeout=10):
        """the server answers 4xx (then may close) or closes without answering"""
        try:
            r = c.read_response(timeout=timeout)
        except Closed:
            return None
        except Timeout:
            self.fail("%s: neither an answer nor a close within %ds" % (what, timeout))
        self.assertTrue(400 <= r.status < 500, "%s -> %r" % (what, r))
        return r

    def test_request_cut_in_half(self):
        body = json.dumps({"key": b64("/t/cut"), "value": b64("must not be written")}).encode()
        head = b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        # 1. half of the headers, then the client's half-close
        with Conn(self.ep) as c:
            c.send(head[:30])
            c.sock.shutdown(socket.SHUT_WR)
            r = self.assertRefusedOrClosed(c, "headers cut")
            if STRICT:
                self.assertEqual((r.status, r.body), (400, b"400 Bad Request"))
        # 2. headers and half of the body, then the half-close
        with Conn(self.ep) as c:
            c.send(head + body[:len(body) // 2])
            c.sock.shutdown(socket.SHUT_WR)
            r = self.assertRefusedOrClosed(c, "body cut")
            if STRICT:
                self.assertEqual(r.status, 400)
                self.assertEqual(r.json(), {"error": "unexpected EOF",
                                            "message": "unexpected EOF", "code": 3})
        # 3. half of the body, then gone (close, no answer to read)
        for cut in (10, len(body) - 1):
            c = Conn(self.ep)
            c.send(head + body[:cut])
            c.close()
        # 4. half of the body and the client stays: the request is not served
        with Conn(self.ep) as c:
            c.send(head + body[:10])
            with self.assertRaises(Timeout):
                c.read_response(timeout=1)
            # the rest arrives: the request completes
            c.send(body[10:])
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
        self.ok("/v3/kv/deleterange", {"key": b64("/t/cut")})
        # 5. a gRPC client and HTTP still work; nothing of 1-3 was written
        time.sleep(0.2)
        self.grpc_still_works()
        self.http_still_works()
        self.assertEqual(self.srv.etcdctl("get", "/t/cut").stdout, "")

    def test_ten_megabyte_body(self):
        value = b64(b"x" * (10 * MIB))
        body = json.dumps({"key": b64("/t/big"), "value": value}).encode()
        head = b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        with Conn(self.ep, timeout=30) as c:
            try:
                c.send(head + body)
            except (BrokenPipeError, ConnectionResetError):
                pass                        # refused before the end of the body
            r = self.assertRefusedOrClosed(c, "10 MB body", timeout=30)
            if r is not None:
                self.assertIn(r.status, (413, 429), r)
            if TARGET == "etcd":
                # etcd reads it all; gRPC refuses it (limit 1.5 MiB + 512 KiB)
                self.assertEqual(r.status, 429)
                self.assertEqual(r.json()["code"], 8)
                self.assertRegex(r.json()["message"], r"^grpc: received message larger than "
                                 r"max \([0-9]+ vs\. 2097152\)$")
        # with Expect: 100-continue the server may refuse before the body
        with Conn(self.ep, timeout=30) as c:
            c.request("POST", "/v3/kv/put", None, [("Expect", "100-continue"),
                                                  ("Content-Length", str(len(body)))])
            h = c.read_head(timeout=10)
            if h.status == 100:
                try:
                    c.send(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.assertRefusedOrClosed(c, "10 MB body after 100-continue", timeout=30)
            else:
                self.assertIn(h.status, (413, 417), h)
        self.grpc_still_works()
        self.http_still_works()
        self.assertEqual(self.srv.etcdctl("get", "/t/big").stdout, "")
        # just under etcd's request limit (1.5 MiB) is fine
        self.ok("/v3/kv/put", {"key": b64("/t/big1m"), "value": b64(b"y" * MIB)})

    def test_many_idle_connections(self):
        n = 5000
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < n + 500:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
            except (ValueError, OSError):
                pass
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        # the server runs with the limit this process had when it started
        with open("/proc/%d/limits" % self.srv.proc.pid) as f:
            server_limit = int(next(l for l in f if l.startswith("Max open files")).split()[3])
        n = min(n, soft - 200, server_limit - 200)
        self.assertGreaterEqual(n, 500, "open-file limits too low (%d, server %d)"
                                % (soft, server_limit))
        socks = []
        try:
            # half never send a byte; half finish one request and stay (keep-alive)
            for _ in range(n // 2):
                socks.append(socket.create_connection(("127.0.0.1", self.srv.client_port)))
            ka = []
            for _ in range(n - n // 2):
                c = Conn(self.ep)
                c.request("GET", "/version")
                ka.append(c)
            for c in ka:
                self.assertEqual(c.read_response().status, 200)
            self.grpc_still_works("idle-check")
            self.http_still_works()
            # a watch over HTTP while they sit there
            with Stream(self.ep, "/v3/watch", {"create_request": {"key": b64("/t/idle")}}) as w:
                self.assertTrue(w.next()["result"]["created"])
                self.srv.etcdctl("put", "/t/idle", "x")
                self.assertEqual(w.next()["result"]["events"][0]["kv"]["value"], b64("x"))
            # the idle keep-alive connections still serve
            for c in ka[:: max(1, len(ka) // 20)]:
                self.assertEqual(c.call("GET", "/version").status, 200)
            ka = [c.sock for c in ka]
            socks += ka
        finally:
            for s in socks:
                s.close()
        self.assertIsNone(self.srv.proc.poll(), "the server died")
        self.grpc_still_works()
        self.http_still_works()


# -------------------------------------------------- quorum next to etcd

class VsEtcd(unittest.TestCase):
    """The same requests to the target and to etcd 3.4 (TARGET=etcd: to a
    second etcd, which proves the comparison deterministic); status codes
    and normalised bodies compared field by field."""

    def script(self):
        k = b64
        steps = [
            ("/v3/kv/put", {"key": k("a"), "value": k("1")}),
            ("/v3/kv/put", {"key": k("a"), "value": k("2"), "prev_kv": True}),
            ("/v3/kv/put", {"key": k("b"), "value": ""}),
            ("/v3/kv/range", {"key": k("a"), "range_end": k("c")}),
            ("/v3/kv/range", {"key": k("a"), "range_end": k("c"), "limit": 1, "keys_only": True}),
            ("/v3/kv/range", {"key": k("a"), "range_end": k("c"), "count_only": True}),
            ("/v3/kv/range", {"key": k("a"), "revision": 2}),
            ("/v3/kv/range", {"key": k("a"), "revision": 99}),
            ("/v3/kv/range", {"key": k("zz")}),
            ("/v3/kv/range", {}),
            ("/v3/kv/deleterange", {"key": k("b"), "prev_kv": True}),
            ("/v3/kv/deleterange", {"key": k("b")}),
            ("/v3/kv/txn", {"compare": [{"key": k("a"), "target": "VALUE", "result": "EQUAL",
                                         "value": k("2")}],
                            "success": [{"request_range": {"key": k("a")}},
                                        {"request_put": {"key": k("t"), "value": k("x")}},
                                        {"request_delete_range": {"key": k("t2")}}]}),
            ("/v3/kv/txn", {"compare": [{"key": k("a"), "target": "MOD", "result": "LESS",
                                         "mod_revision": "1"}],
                            "failure": [{"request_range": {"key": k("t")}}]}),
            ("/v3/kv/txn", {"success": [{"request_put": {"key": k("d"), "value": ""}},
                                        {"request_put": {"key": k("d"), "value": ""}}]}),
            ("/v3/kv/compaction", {"revision": "3"}),
            ("/v3/kv/range", {"key": k("a"), "revision": 2}),
            ("/v3/kv/compaction", {"revision": 3}),
            ("/v3/lease/grant", {"TTL": 60, "ID": 1000}),
            ("/v3/lease/grant", {"TTL": 60, "ID": "1000"}),
            ("/v3/kv/put", {"key": k("l"), "value": k("v"), "lease": "1000"}),
            ("/v3/kv/put", {"key": k("l"), "value": k("v"), "lease": "1001"}),
            ("/v3/lease/timetolive", {"ID": "1000", "keys": True}),
            ("/v3/lease/timetolive", {"ID": "1001"}),
            ("/v3/lease/leases", {}),
            ("/v3/kv/lease/leases", {}),
            ("/v3/lock/lock", {"name": k("L"), "lease": "1000"}),
            ("/v3/lock/unlock", {"key": k("L/3e8")}),
            ("/v3/lock/unlock", {}),
            ("/v3/election/campaign", {"name": k("E"), "lease": "1000", "value": k("e1")}),
            ("/v3/election/leader", {"name": k("E")}),
            ("/v3/election/proclaim", {"leader": {"name": k("E"), "key": k("E/3e8"),
                                                  "rev": "0", "lease": "1000"},
                                       "value": k("e2")}),
            ("/v3/election/resign", {"leader": {"name": k("E"), "key": k("E/3e8"),
                                                "lease": "1000"}}),
            ("/v3/election/leader", {"name": k("E")}),
            ("/v3/lease/revoke", {"ID": "1000"}),
            ("/v3/kv/lease/revoke", {"ID": "1000"}),
            ("/v3/kv/range", {"key": k("l")}),
            ("/v3/cluster/member/list", {}),
            ("/v3/cluster/member/remove", {"ID": "1"}),
            ("/v3/cluster/member/add", {"peerURLs": ["bad"]}),
            ("/v3/maintenance/alarm", {}),
            ("/v3/maintenance/status", {}),
            ("/v3/maintenance/defragment", {}),
            ("/v3/maintenance/hash", {}),
            ("/v3/maintenance/transfer-leadership", {"targetID": "5"}),
            ("/v3/auth/user/add", {"name": "u", "password": "p"}),
            ("/v3/auth/role/add", {"name": "r"}),
            ("/v3/auth/role/grant", {"name": "r", "perm": {"permType": "WRITE",
                                                          "key": k("a")}}),
            ("/v3/auth/user/grant", {"user": "u", "role": "r"}),
            ("/v3/auth/user/get", {"name": "u"}),
            ("/v3/auth/role/get", {"role": "r"}),
            ("/v3/auth/user/list", {}),
            ("/v3/auth/role/list", {}),
            ("/v3/auth/authenticate", {"name": "u", "password": "p"}),
            ("/v3/auth/enable", {}),
            ("/v3/auth/user/delete", {"name": "u"}),
            ("/v3/auth/role/delete", {"role": "r"}),
            ("/v3/kv/range", "{bad"),
            ("/v3/kv/range", {"key": "!!!"}),
        ]
        return steps

    def test_same_answers_as_etcd(self):
        kind = TARGET if TARGET in ("quorum", "etcd") else "quorum"
        k = b64
        with Server("etcd", name="ref") as ref, Server(kind, name="ref") as tgt:
            ids_ref, ids_tgt = {}, {}
            for i, (path, body) in enumerate(self.script()):
                a = post(ref.endpoint, path, body)
                b = post(tgt.endpoint, path, body)
                what = "step %d: %s %s" % (i, path, json.dumps(body))
                self.assertEqual(b.status, a.status, "%s\netcd: %r\n%s: %r" % (what, a, kind, b))
                ja, jb = a.json(), b.json()
                if "error" in ja and isinstance(ja["error"], str) and a.status == 400 and (
                        ja["error"].startswith(("invalid character", "illegal base64"))):
                    # the decoder's text is Go's: compare the shape only
                    self.assertEqual(sorted(jb), sorted(ja), what)
                    self.assertEqual(jb["code"], ja["code"], what)
                    continue
                na, nb = normalise(ja, ids_ref), normalise(jb, ids_tgt)
                if path == "/v3/maintenance/status":
                    na.pop("version"), nb.pop("version")
                if path == "/v3/lease/timetolive" and "TTL" in na and na["TTL"] != "-1":
                    self.assertLessEqual(abs(int(na["TTL"]) - int(nb["TTL"])), 2, what)
                    na["TTL"] = nb["TTL"] = "<ttl>"
                self.assertEqual(nb, na, "%s\netcd: %s\n%s: %s" % (what, a.body, kind, b.body))
            # streams: a watch seeing a put and a delete, a keepalive, an observe
            for srv, ids in ((ref, ids_ref), (tgt, ids_tgt)):
                post(srv.endpoint, "/v3/lease/grant", {"TTL": 60, "ID": "2000"})
                post(srv.endpoint, "/v3/election/campaign", {"name": k("O"), "lease": "2000",
                                                             "value": k("o")})
            got = []
            for srv, ids in ((ref, ids_ref), (tgt, ids_tgt)):
                out = []
                with Stream(srv.endpoint, "/v3/watch", [
                        {"create_request": {"key": k("w"), "prev_kv": True}},
                        {"create_request": {"key": k("w"), "watch_id": 9}}]) as w:
                    out += [w.next(), w.next()]
                    post(srv.endpoint, "/v3/kv/put", {"key": k("w"), "value": k("1")})
                    post(srv.endpoint, "/v3/kv/deleterange", {"key": k("w")})
                    out += [w.next() for _ in range(4)]
                with Stream(srv.endpoint, "/v3/lease/keepalive", [{"ID": "2000"},
                                                                  {"ID": "3"}]) as ka:
                    out += ka.finish()
                with Stream(srv.endpoint, "/v3/election/observe", {"name": k("O")}) as o:
                    out.append(o.next())
                # the two watches' events come in either order
                out[2:6] = sorted(out[2:6], key=lambda m: (m["result"]["header"]["revision"],
                                                           m["result"].get("watch_id", "0")))
                got.append(normalise(out, ids))
            self.assertEqual(got[1], got[0])


if __name__ == "__main__":
    if TARGET not in ("quorum", "etcd"):
        sys.exit("test_http runs against TARGET=quorum or TARGET=etcd, not %r" % TARGET)
    unittest.main(verbosity=2)
