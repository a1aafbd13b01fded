#!/usr/bin/python3
"""Authentication and authorization (users, roles, permissions, tokens) through
etcdctl 3.4, raw gRPC and python3-etcd3, against quorum (TARGET=quorum, the
default) or etcd 3.4 (TARGET=etcd), which every expectation was taken from.

    cd /work/main && TARGET=etcd /usr/bin/python3 tests/integration/test_auth.py [-k name]

The servers run with --bcrypt-cost=4 (an etcd 3.4 flag) so hashing stays cheap.
Each class starts its own servers (tests/integration/auth_util.py: the harness's
Server/Cluster, made to wait for readiness with root's credentials once auth is on).
No timing assertions; waits are generous deadlines (the token TTL cases wait past
the TTL they configure).

Reference behaviours of etcd 3.4.23 an implementer may not expect
--------------------------------------------------------------------
(gRPC code, then the exact status message; etcdctl prints "Error: <message>".)

Errors and codes
* No token while auth is on: InvalidArgument "etcdserver: user name is empty"
  (KV, Auth, Cluster member add/remove, LeaseRevoke). A token that is not live:
  Unauthenticated "etcdserver: invalid auth token". Not permitted: PermissionDenied
  "etcdserver: permission denied".
* Hash, HashKV, Defragment and Snapshot are root-only, and refuse with code *Unknown*
  and an untranslated "auth: ..." text: "auth: permission denied", "auth: user name
  is empty", "auth: invalid auth token". Alarm is open to anyone, but a bad token
  gives Unknown "auth: invalid auth token".
* v3lock Lock and v3election Campaign refuse with code *Unknown* and the text
  "etcdserver: permission denied" / "etcdserver: user name is empty".
* Authenticate, wrong password / unknown user / empty name: InvalidArgument
  "etcdserver: authentication failed, invalid user ID or password" (etcdctl exits 2).
  A --no-password user given any password (even ""): Unknown "auth: authentication
  failed, password was given for no password user" (etcdctl: "Error: rpc error:
  code = Unknown desc = auth: ..."). `user passwd` on such a user answers "Password
  updated" and the user still cannot log in. A user added as "name:" (empty password)
  logs in with "". Auth off: FailedPrecondition "etcdserver: authentication is not
  enabled", whatever the password. Authenticate carrying a stale token in its metadata
  (right password): Unauthenticated "etcdserver: invalid auth token"; wrong password:
  the "authentication failed" error (the password is checked first).
* AuthEnable: no root user -> FailedPrecondition "etcdserver: root user does not
  exist"; root without the root role -> FailedPrecondition "etcdserver: root user does
  not have root role". etcdctl `auth enable` then adds role root itself, grants it to
  root and retries (prints "Authentication Enabled"); if role root exists but is not
  granted, etcdctl fails with "etcdserver: role name already exists". AuthEnable /
  AuthDisable are idempotent.
* With auth on: deleting user root, revoking role root from root, deleting role root:
  InvalidArgument "etcdserver: invalid auth management".
* Management refusals (all FailedPrecondition): "etcdserver: user name already
  exists", "etcdserver: user name not found", "etcdserver: role name already exists",
  "etcdserver: role name not found", "etcdserver: role is not granted to the user"
  (also when the role does not exist), "etcdserver: permission is not granted to the
  role" (revoke must name the exact key and range end). Empty names: InvalidArgument
  "etcdserver: user name is empty" / "etcdserver: role name is empty". Granting a
  role twice, or a permission on the same key/range again, succeeds (a re-grant
  replaces the permission type: read then write leaves write only).
* Deleting a role removes it from every user. `user get` of oneself and `role get` of
  a role one holds are allowed to any user; user/role list and all changes are root's.

Tokens
* Simple token: "<16 letters>.<raft index>", valid on every member (Authenticate
  goes through Raft). It is dropped by `user delete`, `user passwd` and `auth disable`
  (then Unauthenticated "etcdserver: invalid auth token"), but not by role
  grants/revokes (the next request is checked against the new permissions). Whether a
  token survives a restart depends on whether etcd replays its Authenticate entry (it
  did after a kill -9): not asserted. --auth-token-ttl=N: a token unused for N s is
  dropped; each use restarts the clock.
* A request checked against the permissions of one auth revision and applied after an
  auth change (e.g. a put racing a `role revoke-permission`, any user's) is refused
  with InvalidArgument "etcdserver: revision of auth store is old"; clients retry.
* With auth *off*, a request carrying a token that is not live (e.g. one from before
  `auth disable`) is still refused: Unauthenticated "etcdserver: invalid auth token".
* Quirk not tested (a quorum need not copy it): a simple token whose index is above
  the applied index makes the request wait for that index (until its deadline).
* JWT (--auth-token jwt,pub-key=,priv-key=,sign-method=RS256|ES256,ttl=): header
  {"alg","typ":"JWT"}, claims {"exp","revision","username"}, verifiable with the
  public key. Expired or tampered: Unauthenticated "etcdserver: invalid auth token".
  After any auth change a JWT minted before it is refused for KV requests with
  InvalidArgument "etcdserver: revision of auth store is old" (the claim revision no
  longer matches).

Enforcement
* Range needs read on the whole [key, range_end); Put needs write, and read too with
  prev_kv; DeleteRange needs write, and read too with prev_kv. Txn: every compare
  needs read, and every op of *both* branches is checked, taken or not -- but a put
  with prev_kv inside a Txn needs write only (a delete with prev_kv needs read too).
* Watch of a key not readable: the stream stays open and answers
  {watch_id: -1, created: true, canceled: true, cancel_reason: "rpc error: code =
  PermissionDenied desc = etcdserver: permission denied"} (the requested watch_id is
  ignored); without token the reason is the "user name is empty" InvalidArgument one,
  with a bad token the "invalid auth token" Unauthenticated one. A watch created while
  permitted keeps delivering after the permission is revoked.
* LeaseGrant, LeaseTimeToLive (without keys), LeaseLeases, Status, MemberList, Alarm,
  Compact, MoveLeader need no credentials at all. LeaseRevoke needs write on every key
  attached to the lease (a lease without keys: a token, or none at all). A Put
  attaching a lease needs write on the lease's other keys too.
* etcdctl exits 1 on a refused request, but 2 when the login fails and when
  `lease timetolive` fails (ExitBadConnection).
* MemberAdd/MemberRemove are root's (PermissionDenied / InvalidArgument user name is
  empty / Unauthenticated invalid token).
* `etcdctl endpoint health` without credentials reports unhealthy ("failed to commit
  proposal: etcdserver: user name is empty"); with a non-root user it is healthy.

Gaps of etcd 3.4.23 that quorum is expected to close (see ETCD_GAPS)
* A nested Txn (RequestOp.request_txn) is not checked at all: anyone, even without
  a token, can read and write any key through one (etcd applies it; its
  checkTxnReqsPermission has no case for request_txn).
* LeaseTimeToLive with keys=true lists the attached keys to anyone
  (CVE-2023-32082, fixed in etcd 3.4.26: read on every attached key is needed;
  PermissionDenied, or "user name is empty" without a token).
TARGET=etcd asserts the 3.4.23 behaviour; TARGET=quorum asserts the closed one
(AUTH_EXPECT_ETCD_GAPS=1 makes quorum's run expect the 3.4.23 behaviour instead).

Where quorum is stricter than etcd 3.4 on purpose (STRICT, TARGET=quorum): an
operator's acts need root: MoveLeader, and Alarm activate/deactivate (etcd 3.4
lets anyone move the leader or disarm a NOSPACE alarm). Listing alarms stays
open. Refused as the membership calls are: PermissionDenied, or "user name is
empty" without a token.

Client side (python3-etcd3 0.12 with grpcio 1.51): etcd3.client(user=, password=)
authenticates, then attaches the token both as metadata and as call credentials;
grpcio refuses call credentials on an insecure channel, so every call fails
client-side with Unauthenticated "Established channel does not have a sufficient
security level to transfer call credential." (no request reaches the server).
The tests drop the call credentials and keep the metadata. python3-etcd3 re-raises
PermissionDenied / InvalidArgument / Unknown as plain grpc.RpcError (it maps only
FailedPrecondition, Unavailable, DeadlineExceeded, Internal, and not during the login
in etcd3.client(), which raises the plain FailedPrecondition "authentication is not
enabled" while auth is off); a refused watch is "created" with watch id -1 and never
calls back.
"""
import base64
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from auth_util import (  # noqa: E402
    BOB, FAST_HASH, NOBODY, R, ROOT, W, AuthCluster, AuthServer, Rpc, WatchStream, cast,
    ctl_codes, ctl_error_line, login, msg, restore_snapshot, wait_for)

TARGET = os.environ.get("TARGET", "quorum")
ETCD_GAPS = TARGET == "etcd" or os.environ.get("AUTH_EXPECT_ETCD_GAPS") == "1"
STRICT = TARGET != "etcd"

SC = grpc.StatusCode
PD = (SC.PERMISSION_DENIED, "etcdserver: permission denied")
UE = (SC.INVALID_ARGUMENT, "etcdserver: user name is empty")
IT = (SC.UNAUTHENTICATED, "etcdserver: invalid auth token")
OLD_REV = (SC.INVALID_ARGUMENT, "etcdserver: revision of auth store is old")
AUTH_FAILED = (SC.INVALID_ARGUMENT,
               "etcdserver: authentication failed, invalid user ID or password")
NOT_ENABLED = (SC.FAILED_PRECONDITION, "etcdserver: authentication is not enabled")
NO_PW_USER = (SC.UNKNOWN, "auth: authentication failed, password was given for no "
              "password user")
M_PD = (SC.UNKNOWN, "auth: permission denied")
M_UE = (SC.UNKNOWN, "auth: user name is empty")
M_IT = (SC.UNKNOWN, "auth: invalid auth token")
BOGUS_TOKENS = ("bogus", "abcdefghijklmnop.1")

Cmp, Op, Txn = msg("etcdserverpb.Compare"), msg("etcdserverpb.RequestOp"), msg(
    "etcdserverpb.TxnRequest")
RangeReq, PutReq, DelReq = (msg("etcdserverpb.RangeRequest"), msg("etcdserverpb.PutRequest"),
                            msg("etcdserverpb.DeleteRangeRequest"))


def outcome(fn, *a, **kw):
    """"ok" or (status code, details)."""
    try:
        fn(*a, **kw)
        return "ok"
    except grpc.RpcError as e:
        return (e.code(), e.details())


def cmp_exists(key, range_end=b""):
    return Cmp(key=key, range_end=range_end, target=Cmp.VERSION, result=Cmp.GREATER, version=0)


def op_get(key, **kw):
    return Op(request_range=RangeReq(key=key, **kw))


def op_put(key, **kw):
    return Op(request_put=PutReq(key=key, value=b"v", **kw))


def op_del(key, **kw):
    return Op(request_delete_range=DelReq(key=key, **kw))


def op_txn(compare=(), success=(), failure=()):
    return Op(request_txn=Txn(compare=list(compare), success=list(success),
                              failure=list(failure)))


class Base(unittest.TestCase):
    maxDiff = None

    def refused(self, r, code, text, rc=1, error_line=None):
        """etcdctl result |r| failed with exit code rc, the gRPC error (code, text) in
        its retry warning (when code is given) and "Error: <text>" as last line."""
        self.assertEqual(r.returncode, rc, "rc %d\nstdout: %s\nstderr: %s"
                         % (r.returncode, r.stdout, r.stderr))
        self.assertEqual(ctl_error_line(r), error_line or "Error: " + text, r.stderr)
        if code:
            self.assertIn((code, text), ctl_codes(r), r.stderr)

    def ok(self, r, out=None):
        self.assertEqual(r.returncode, 0, "stdout: %s\nstderr: %s" % (r.stdout, r.stderr))
        if out is not None:
            self.assertEqual(r.stdout, out)
        return r


# == 1. every Auth RPC through etcdctl ==========================================

class T1Commands(Base):
    """Each case on a fresh server, auth off at first."""

    def setUp(self):
        self.s = AuthServer(TARGET, extra_args=FAST_HASH).start()
        self.ep = self.s.endpoint

    def tearDown(self):
        self.s.cleanup()

    def test_users(self):
        s = self.s
        self.ok(s.ctl(None, "user", "add", "u1:pw1", "--interactive=false"), "User u1 created\n")
        self.refused(s.ctl(None, "user", "add", "u1:other", "--interactive=false"),
                     "FailedPrecondition", "etcdserver: user name already exists")
        self.ok(s.ctl(None, "user", "add", "u2", "--no-password"), "User u2 created\n")
        self.ok(s.ctl(None, "user", "add", "a b:pw", "--interactive=false"), "User a b created\n")
        self.refused(s.ctl(None, "user", "add", "", "--no-password"),
                     "InvalidArgument", "etcdserver: user name is empty")
        self.ok(s.ctl(None, "user", "get", "u1"), "User: u1\nRoles:\n")
        self.ok(s.ctl(None, "user", "get", "u1", "--detail"), "User: u1\n")
        self.refused(s.ctl(None, "user", "get", "nosuch"),
                     "FailedPrecondition", "etcdserver: user name not found")
        self.ok(s.ctl(None, "user", "list"), "a b\nu1\nu2\n")
        out = json.loads(self.ok(s.ctl(None, "user", "list", "-w", "json")).stdout)
        self.assertEqual(out["users"], ["a b", "u1", "u2"])
        self.ok(s.ctl(None, "user", "passwd", "u1", "--interactive=false", input="pw1b\n"),
                "Password updated\n")
        self.refused(s.ctl(None, "user", "passwd", "nosuch", "--interactive=false",
                           input="x\n"),
                     "FailedPrecondition", "etcdserver: user name not found")
        self.ok(s.ctl(None, "user", "delete", "a b"), "User a b deleted\n")
        self.refused(s.ctl(None, "user", "delete", "a b"),
                     "FailedPrecondition", "etcdserver: user name not found")
        self.ok(s.ctl(None, "user", "list"), "u1\nu2\n")
        # the new password is the one that works once auth is on
        self.ok(s.ctl(None, "user", "add", ROOT, "--interactive=false"))
        self.ok(s.ctl(None, "auth", "enable"))
        rpc = Rpc(self.ep)
        self.assertEqual(rpc.error("Auth", "Authenticate", name="u1", password="pw1"),
                         AUTH_FAILED)
        self.assertTrue(rpc.call("Auth", "Authenticate", name="u1", password="pw1b").token)
        # a --no-password user cannot log in, even after `user passwd`
        self.assertEqual(rpc.error("Auth", "Authenticate", name="u2", password=""), NO_PW_USER)
        self.assertEqual(rpc.error("Auth", "Authenticate", name="u2", password="x"), NO_PW_USER)
        self.ok(s.ctl(ROOT, "user", "passwd", "u2", "--interactive=false", input="u2pw\n"),
                "Password updated\n")
        self.assertEqual(rpc.error("Auth", "Authenticate", name="u2", password="u2pw"),
                         NO_PW_USER)
        r = s.ctl("u2:u2pw", "get", "k")
        self.refused(r, "Unknown", NO_PW_USER[1], rc=2,
                     error_line="Error: rpc error: code = Unknown desc = " + NO_PW_USER[1])
        # a user added with an empty password logs in with ""
        self.ok(s.ctl(ROOT, "user", "add", "emp:", "--interactive=false"), "User emp created\n")
        self.assertTrue(rpc.call("Auth", "Authenticate", name="emp", password="").token)
        self.assertEqual(rpc.error("Auth", "Authenticate", name="emp", password="x"),
                         AUTH_FAILED)
        rpc.close()

    def test_roles(self):
        s = self.s
        self.ok(s.ctl(None, "role", "add", "r1"), "Role r1 created\n")
        self.refused(s.ctl(None, "role", "add", "r1"),
                     "FailedPrecondition", "etcdserver: role name already exists")
        self.refused(s.ctl(None, "role", "add", ""),
                     "InvalidArgument", "etcdserver: role name is empty")
        self.ok(s.ctl(None, "role", "add", "r2"), "Role r2 created\n")
        self.ok(s.ctl(None, "role", "get", "r1"), "Role r1\nKV Read:\nKV Write:\n")
        self.refused(s.ctl(None, "role", "get", "nope"),
                     "FailedPrecondition", "etcdserver: role name not found")
        self.ok(s.ctl(None, "role", "list"), "r1\nr2\n")
        self.assertEqual(json.loads(s.ctl(None, "role", "list", "-w", "json").stdout)["roles"],
                         ["r1", "r2"])
        self.ok(s.ctl(None, "role", "delete", "r2"), "Role r2 deleted\n")
        self.refused(s.ctl(None, "role", "delete", "r2"),
                     "FailedPrecondition", "etcdserver: role name not found")
        self.ok(s.ctl(None, "role", "list"), "r1\n")

    def test_grant_revoke_role(self):
        s = self.s
        for a in (("user", "add", "u1:p", "--interactive=false"), ("role", "add", "r1"),
                  ("role", "add", "r2"), ("role", "grant-permission", "r1", "read", "k")):
            self.ok(s.ctl(None, *a))
        self.ok(s.ctl(None, "user", "grant-role", "u1", "r1"), "Role r1 is granted to user u1\n")
        self.ok(s.ctl(None, "user", "grant-role", "u1", "r1"), "Role r1 is granted to user u1\n")
        self.ok(s.ctl(None, "user", "get", "u1"), "User: u1\nRoles: r1\n")
        self.ok(s.ctl(None, "user", "grant-role", "u1", "r2"))
        self.ok(s.ctl(None, "user", "get", "u1"), "User: u1\nRoles: r1 r2\n")
        self.ok(s.ctl(None, "user", "get", "u1", "--detail"),
                "User: u1\n\nRole r1\nKV Read:\n\tk\nKV Write:\n\nRole r2\nKV Read:\nKV Write:\n")
        self.assertEqual(json.loads(s.ctl(None, "user", "get", "u1", "-w", "json").stdout)
                         ["roles"], ["r1", "r2"])
        self.refused(s.ctl(None, "user", "grant-role", "nosuch", "r1"),
                     "FailedPrecondition", "etcdserver: user name not found")
        self.refused(s.ctl(None, "user", "grant-role", "u1", "nope"),
                     "FailedPrecondition", "etcdserver: role name not found")
        self.ok(s.ctl(None, "user", "revoke-role", "u1", "r1"), "Role r1 is revoked from user u1\n")
        self.refused(s.ctl(None, "user", "revoke-role", "u1", "r1"),
                     "FailedPrecondition", "etcdserver: role is not granted to the user")
        self.refused(s.ctl(None, "user", "revoke-role", "u1", "nope"),
                     "FailedPrecondition", "etcdserver: role is not granted to the user")
        self.refused(s.ctl(None, "user", "revoke-role", "nosuch", "r1"),
                     "FailedPrecondition", "etcdserver: user name not found")
        # deleting a role takes it away from its users
        self.ok(s.ctl(None, "role", "delete", "r2"))
        self.ok(s.ctl(None, "user", "get", "u1"), "User: u1\nRoles:\n")

    def test_permissions(self):
        s = self.s
        self.ok(s.ctl(None, "role", "add", "r1"))
        for a, out in [(("read", "k1"), None), (("write", "pre/", "--prefix"), None),
                       (("readwrite", "fk", "--from-key"), None), (("readwrite", "a", "b"), None),
                       (("read", "m", "a"), None)]:
            self.ok(s.ctl(None, "role", "grant-permission", "r1", *a), "Role r1 updated\n")
        self.ok(s.ctl(None, "role", "get", "r1"),
                "Role r1\nKV Read:\n\t[a, b) (prefix a)\n\t[fk, <open ended>\n\tk1\n\t[m, a)\n"
                "KV Write:\n\t[a, b) (prefix a)\n\t[fk, <open ended>\n"
                "\t[pre/, pre0) (prefix pre/)\n")
        perms = json.loads(s.ctl(None, "role", "get", "r1", "-w", "json").stdout)["perm"]

        def dec(p):
            return (p.get("permType", 0), base64.b64decode(p.get("key", "")),
                    base64.b64decode(p.get("range_end", "")))
        self.assertEqual([dec(p) for p in perms],
                         [(2, b"a", b"b"), (2, b"fk", b"\x00"), (0, b"k1", b""),
                          (0, b"m", b"a"), (1, b"pre/", b"pre0")])
        # the same key again replaces the type
        self.ok(s.ctl(None, "role", "grant-permission", "r1", "write", "k1"))
        self.ok(s.ctl(None, "role", "grant-permission", "r1", "read", "pre/", "--prefix"))
        self.ok(s.ctl(None, "role", "get", "r1"),
                "Role r1\nKV Read:\n\t[a, b) (prefix a)\n\t[fk, <open ended>\n\t[m, a)\n"
                "\t[pre/, pre0) (prefix pre/)\n"
                "KV Write:\n\t[a, b) (prefix a)\n\t[fk, <open ended>\n\tk1\n")
        self.refused(s.ctl(None, "role", "grant-permission", "nope", "read", "z"),
                     "FailedPrecondition", "etcdserver: role name not found")
        # revoke names the exact key and range end
        NG = "etcdserver: permission is not granted to the role"
        self.refused(s.ctl(None, "role", "revoke-permission", "r1", "x"), "FailedPrecondition", NG)
        self.refused(s.ctl(None, "role", "revoke-permission", "r1", "a"), "FailedPrecondition", NG)
        self.refused(s.ctl(None, "role", "revoke-permission", "r1", "pre/"),
                     "FailedPrecondition", NG)
        self.refused(s.ctl(None, "role", "revoke-permission", "nope", "k1"),
                     "FailedPrecondition", "etcdserver: role name not found")
        self.ok(s.ctl(None, "role", "revoke-permission", "r1", "k1"),
                "Permission of key k1 is revoked from role r1\n")
        self.ok(s.ctl(None, "role", "revoke-permission", "r1", "pre/", "--prefix"),
                "Permission of range [pre/, pre0) is revoked from role r1\n")
        self.ok(s.ctl(None, "role", "revoke-permission", "r1", "fk", "--from-key"),
                "Permission of range [fk, <open ended> is revoked from role r1\n")
        self.ok(s.ctl(None, "role", "revoke-permission", "r1", "a", "b"),
                "Permission of range [a, b) is revoked from role r1\n")
        self.ok(s.ctl(None, "role", "revoke-permission", "r1", "m", "a"))
        self.ok(s.ctl(None, "role", "get", "r1"), "Role r1\nKV Read:\nKV Write:\n")
        # etcdctl sends "" --prefix as [\x00, \x00): every key
        self.ok(s.ctl(None, "role", "grant-permission", "r1", "read", "", "--prefix"))
        self.ok(s.ctl(None, "role", "get", "r1"),
                "Role r1\nKV Read:\n\t[\x00, <open ended>\nKV Write:\n")
        # ... which lets a user holding it read any key, and write none
        for a in (("user", "add", ROOT, "--interactive=false"), ("role", "add", "root"),
                  ("user", "grant-role", "root", "root"), ("user", "add", "u:p",
                  "--interactive=false"), ("user", "grant-role", "u", "r1"),
                  ("put", "any/key", "1"), ("auth", "enable")):
            self.ok(s.ctl(None, *a))
        self.ok(s.ctl("u:p", "get", "any/key"), "any/key\n1\n")
        self.refused(s.ctl("u:p", "put", "any/key", "2"), "PermissionDenied",
                     "etcdserver: permission denied")

    def test_enable_disable(self):
        s = self.s
        self.refused(s.ctl(None, "auth", "enable"),
                     "FailedPrecondition", "etcdserver: root user does not exist")
        self.ok(s.ctl(None, "user", "add", ROOT, "--interactive=false"))
        rpc = Rpc(self.ep)
        self.assertEqual(rpc.error("Auth", "AuthEnable"),
                         (SC.FAILED_PRECONDITION, "etcdserver: root user does not have root role"))
        self.assertEqual(rpc.error("Auth", "Authenticate", name="root", password="rootpw"),
                         NOT_ENABLED)
        self.assertEqual(rpc.error("Auth", "Authenticate", name="root", password="bad"),
                         NOT_ENABLED)
        # etcdctl adds role root itself when AuthEnable says root lacks it, but fails
        # if role root exists, not granted
        self.ok(s.ctl(None, "role", "add", "root"))
        r = s.ctl(None, "auth", "enable")
        self.refused(r, "FailedPrecondition", "etcdserver: role name already exists")
        self.assertIn(("FailedPrecondition", "etcdserver: root user does not have root role"),
                      ctl_codes(r))
        self.ok(s.ctl(None, "role", "delete", "root"))
        r = self.ok(s.ctl(None, "auth", "enable"), "Authentication Enabled\n")
        self.assertIn(("FailedPrecondition", "etcdserver: root user does not have root role"),
                      ctl_codes(r))
        # now on: nothing without credentials
        for a in (("user", "list"), ("get", "k"), ("put", "k", "v"), ("auth", "disable"),
                  ("auth", "enable"), ("role", "add", "x")):
            self.refused(s.ctl(None, *a), "InvalidArgument", "etcdserver: user name is empty")
        self.ok(s.ctl(ROOT, "user", "get", "root"), "User: root\nRoles: root\n")
        self.ok(s.ctl(ROOT, "role", "list"), "root\n")
        self.ok(s.ctl(ROOT, "auth", "enable"), "Authentication Enabled\n")   # idempotent
        self.ok(s.ctl(ROOT, "put", "k", "v"), "OK\n")
        self.ok(s.ctl(ROOT, "get", "k"), "k\nv\n")
        r = s.ctl("root:bad", "get", "k")
        self.refused(r, "InvalidArgument", AUTH_FAILED[1], rc=2)
        r = s.ctl("nosuch:bad", "get", "k")
        self.refused(r, "InvalidArgument", AUTH_FAILED[1], rc=2)
        for name, pw in (("root", "bad"), ("nosuch", "x"), ("", "")):
            self.assertEqual(rpc.error("Auth", "Authenticate", name=name, password=pw),
                             AUTH_FAILED)
        # root's own role and user are protected while auth is on
        IM = "etcdserver: invalid auth management"
        self.refused(s.ctl(ROOT, "user", "delete", "root"), "InvalidArgument", IM)
        self.refused(s.ctl(ROOT, "user", "revoke-role", "root", "root"), "InvalidArgument", IM)
        self.refused(s.ctl(ROOT, "role", "delete", "root"), "InvalidArgument", IM)
        self.ok(s.ctl(ROOT, "role", "grant-permission", "root", "read", "x"), "Role root updated\n")
        self.ok(s.ctl(ROOT, "role", "get", "root"), "Role root\nKV Read:\n\tx\nKV Write:\n")
        self.ok(s.ctl(ROOT, "role", "revoke-permission", "root", "x"))
        # off again (idempotent), then root may go
        self.ok(s.ctl(ROOT, "auth", "disable"), "Authentication Disabled\n")
        self.ok(s.ctl(None, "auth", "disable"), "Authentication Disabled\n")
        self.ok(s.ctl(None, "get", "k"), "k\nv\n")
        self.ok(s.ctl(None, "user", "revoke-role", "root", "root"))
        self.ok(s.ctl(None, "user", "delete", "root"), "User root deleted\n")
        self.ok(s.ctl(None, "role", "delete", "root"), "Role root deleted\n")
        self.refused(s.ctl(None, "auth", "enable"),
                     "FailedPrecondition", "etcdserver: root user does not exist")
        rpc.close()


# == 2. enforcement, one server with the usual cast =============================

class T2Enforcement(Base):
    @classmethod
    def setUpClass(cls):
        cls.s = s = AuthServer(TARGET, extra_args=FAST_HASH).start()
        cast(s)
        s.root("role", "grant-permission", "rw", "readwrite", "lk/", "--prefix")
        ep = s.endpoint
        cls.c = {"root": login(ep, ROOT), "bob": login(ep, BOB), "w": login(ep, W),
                 "r": login(ep, R), "nobody": login(ep, NOBODY), "anon": Rpc(ep)}
        for i, t in enumerate(BOGUS_TOKENS):
            cls.c["bogus%d" % i] = Rpc(ep, token=t)

    @classmethod
    def tearDownClass(cls):
        for c in cls.c.values():
            c.close()
        cls.s.cleanup()

    def matrix(self, expect, call):
        """expect: {who: "ok" | (code, details)}; call(rpc) does the request."""
        got = {who: outcome(call, self.c[who]) for who in expect}
        self.assertEqual(got, expect)

    def who(self, root="ok", bob="ok", w="ok", r="ok", nobody=PD, anon=UE, bogus=IT):
        out = {"root": root, "bob": bob, "w": w, "r": r, "nobody": nobody, "anon": anon}
        for i in range(len(BOGUS_TOKENS)):
            out["bogus%d" % i] = bogus
        return out

    def test_kv(self):
        kv = lambda m, **f: (lambda c: c.call("KV", m, **f))  # noqa: E731
        self.matrix(self.who(w=PD), kv("Range", key=b"p/a"))
        self.matrix(self.who(bob=PD, w=PD, r=PD), kv("Range", key=b"x"))
        self.matrix(self.who(w=PD), kv("Range", key=b"p/", range_end=b"p0"))
        self.matrix(self.who(bob=PD, w=PD, r=PD), kv("Range", key=b"p/", range_end=b"q"))
        self.matrix(self.who(bob=PD, w=PD, r=PD), kv("Range", key=b"p/", range_end=b"\x00"))
        self.matrix(self.who(r=PD), kv("Put", key=b"p/b", value=b"v"))
        self.matrix(self.who(w=PD, r=PD), kv("Put", key=b"p/b", value=b"v", prev_kv=True))
        self.matrix(self.who(bob=PD, w=PD, r=PD), kv("Put", key=b"x", value=b"v"))
        self.matrix(self.who(r=PD), kv("DeleteRange", key=b"p/zz"))
        self.matrix(self.who(r=PD), kv("DeleteRange", key=b"p/", range_end=b"p/\x00"))
        self.matrix(self.who(w=PD, r=PD), kv("DeleteRange", key=b"p/zz", prev_kv=True))
        self.matrix(self.who(bob=PD, w=PD, r=PD), kv("DeleteRange", key=b"xx"))
        # etcdctl's view
        s = self.s
        self.ok(s.ctl(BOB, "put", "p/c", "3"), "OK\n")
        self.ok(s.ctl(BOB, "get", "p/c"), "p/c\n3\n")
        self.ok(s.ctl(BOB, "get", "p/c", "p/d"), "p/c\n3\n")
        for who, a in ((BOB, ("get", "x")), (BOB, ("put", "x", "2")), (BOB, ("del", "x")),
                       (BOB, ("get", "p/", "--from-key")), (BOB, ("get", "p/", "p1")),
                       (W, ("get", "p/c")), (W, ("put", "p/c", "4", "--prev-kv")),
                       (R, ("put", "p/c", "4")), (NOBODY, ("get", "p/c"))):
            self.refused(s.ctl(who, *a), "PermissionDenied", "etcdserver: permission denied")
        for a in (("get", "p/c"), ("put", "p/c", "1"), ("del", "p/c")):
            self.refused(s.ctl(None, *a), "InvalidArgument", "etcdserver: user name is empty")
        self.ok(s.ctl(ROOT, "get", "x"), "x\nv\n")      # root's put of the matrix

    def test_txn(self):
        cases = [
            # name, txn, {who: expected} for bob, w, r, anon
            ("compare permitted", Txn(compare=[cmp_exists(b"p/a")]),
             dict(bob="ok", w=PD, r="ok", anon=UE)),
            ("compare forbidden", Txn(compare=[cmp_exists(b"x")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("compare over a range", Txn(compare=[cmp_exists(b"p/", b"p0")]),
             dict(bob="ok", w=PD, r="ok", anon=UE)),
            ("compare over a wider range", Txn(compare=[cmp_exists(b"p/", b"q")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("forbidden put in the taken branch",
             Txn(compare=[cmp_exists(b"p/a")], success=[op_put(b"x")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("forbidden put in the branch not taken",
             Txn(compare=[cmp_exists(b"p/a")], failure=[op_put(b"x")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("forbidden get in failure", Txn(failure=[op_get(b"x")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("forbidden delete", Txn(success=[op_del(b"x")]), dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("permitted ops", Txn(success=[op_get(b"p/a"), op_put(b"p/t1"), op_del(b"p/t2")]),
             dict(bob="ok", w=PD, r=PD, anon=UE)),
            ("put with prev_kv", Txn(success=[op_put(b"p/t1", prev_kv=True)]),
             dict(bob="ok", w="ok", r=PD, anon=UE)),
            ("delete with prev_kv", Txn(success=[op_del(b"p/t1", prev_kv=True)]),
             dict(bob="ok", w=PD, r=PD, anon=UE)),
            ("range over the prefix", Txn(success=[op_get(b"p/", range_end=b"p0")]),
             dict(bob="ok", w=PD, r="ok", anon=UE)),
            ("range past the prefix", Txn(success=[op_get(b"p/", range_end=b"q")]),
             dict(bob=PD, w=PD, r=PD, anon=UE)),
            ("nested, every op permitted to bob",
             Txn(success=[op_txn([cmp_exists(b"p/a")], [op_put(b"p/n")], [op_get(b"p/a")])]),
             dict(bob="ok", w="ok" if ETCD_GAPS else PD, r="ok" if ETCD_GAPS else PD,
                  anon="ok" if ETCD_GAPS else UE)),
        ]
        forbidden_nested = [
            ("nested forbidden put", Txn(success=[op_txn(success=[op_put(b"x")])])),
            ("nested forbidden put, branch not taken",
             Txn(success=[op_txn(failure=[op_put(b"x")])])),
            ("nested forbidden compare", Txn(success=[op_txn(compare=[cmp_exists(b"x")])])),
            ("nested forbidden get under failure", Txn(failure=[op_txn(success=[op_get(b"x")])])),
            ("doubly nested forbidden delete",
             Txn(success=[op_txn(success=[op_txn(success=[op_del(b"nx-none")])])])),
        ]
        for name, t in forbidden_nested:
            cases.append((name, t, dict(bob="ok" if ETCD_GAPS else PD,
                                        w="ok" if ETCD_GAPS else PD,
                                        r="ok" if ETCD_GAPS else PD,
                                        anon="ok" if ETCD_GAPS else UE)))
        got, want = {}, {}
        for name, t, exp in cases:
            for who, e in exp.items():
                want[(name, who)] = e
                got[(name, who)] = outcome(self.c[who].call, "KV", "Txn", req=t)
        self.assertEqual(got, want)
        # the root sees what a nested put without any token did
        t = Txn(success=[op_txn(success=[op_put(b"nx")])])
        self.assertEqual(outcome(self.c["anon"].call, "KV", "Txn", req=t),
                         "ok" if ETCD_GAPS else UE)
        n = self.c["root"].call("KV", "Range", key=b"nx").count
        self.assertEqual(n, 1 if ETCD_GAPS else 0)
        # etcdctl txn as bob: a forbidden compare
        r = self.s.ctl(BOB, "txn", input='value("x") = "1"\n\nput p/t "1"\n\n\n')
        self.refused(r, "PermissionDenied", "etcdserver: permission denied")
        r = self.ok(self.s.ctl(BOB, "txn", input='value("p/a") = "1"\n\nput p/t "1"\n\n\n'))
        self.assertEqual(r.stdout, "SUCCESS\n\nOK\n")

    def test_watch(self):
        WC = "rpc error: code = %s desc = %s"
        pd = WC % ("PermissionDenied", PD[1])
        for who, ok_reason, bad_reason in (("bob", None, pd), ("w", pd, pd),
                                           ("anon",) + (WC % ("InvalidArgument", UE[1]),) * 2,
                                           ("bogus0",) + (WC % ("Unauthenticated", IT[1]),) * 2):
            ws = WatchStream(self.c[who])
            try:
                for key, range_end, reason, wid in ((b"x", b"", bad_reason, 0),
                                                    (b"x", b"", bad_reason, 7),
                                                    (b"p/", b"q", bad_reason, 0),
                                                    (b"p/a", b"", ok_reason, 0)):
                    ws.create(key, range_end, watch_id=wid)
                    resp = ws.next()
                    self.assertNotIsInstance(resp, grpc.RpcError, "%s: %s" % (who, resp))
                    self.assertTrue(resp.created, resp)
                    if reason is None:
                        self.assertFalse(resp.canceled, resp)
                        self.assertGreaterEqual(resp.watch_id, 0)
                        self.c["root"].call("KV", "Put", key=b"p/a", value=b"1")
                        ev = ws.next()
                        self.assertEqual([(e.kv.key, e.kv.value) for e in ev.events],
                                         [(b"p/a", b"1")])
                    else:
                        self.assertEqual((resp.watch_id, resp.canceled, resp.cancel_reason),
                                         (-1, True, reason), "%s watching %r" % (who, key))
            finally:
                ws.close()
        # etcdctl watch on a forbidden key
        r = self.s.ctl(BOB, "watch", "x", timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("watch was canceled (%s)" % pd, r.stderr)
        self.assertEqual(ctl_error_line(r), "Error: watch is canceled by the server")

    def lease_with(self, *keys, ttl=300):
        root = self.c["root"]
        lid = root.call("Lease", "LeaseGrant", TTL=ttl).ID
        for k in keys:
            root.call("KV", "Put", key=k, value=b"v", lease=lid)
        return lid

    def test_leases(self):
        grant = lambda c: c.call("Lease", "LeaseGrant", TTL=100)  # noqa: E731
        self.matrix(dict(root="ok", bob="ok", anon="ok", bogus0=IT), grant)
        # revoke needs write on every attached key
        for who, exp in (("bob", "ok"), ("w", "ok"), ("r", PD), ("nobody", PD), ("anon", UE),
                         ("bogus0", IT)):
            lid = self.lease_with(b"p/l1")
            self.assertEqual(outcome(self.c[who].call, "Lease", "LeaseRevoke", ID=lid), exp, who)
        for who in ("bob", "w", "r", "anon"):
            lid = self.lease_with(b"p/l2", b"x2")
            self.assertEqual(outcome(self.c[who].call, "Lease", "LeaseRevoke", ID=lid),
                             UE if who == "anon" else PD, who)
            self.assertEqual(self.c["root"].call("KV", "Range", key=b"x2").count, 1)
        for who in ("nobody", "anon"):
            lid = self.lease_with()
            self.assertEqual(outcome(self.c[who].call, "Lease", "LeaseRevoke", ID=lid), "ok")
        self.assertEqual(outcome(self.c["bob"].call, "Lease", "LeaseRevoke", ID=0x7777),
                         (SC.NOT_FOUND, "etcdserver: requested lease not found"))
        # a put attaching a lease needs write on the lease's other keys
        lid = self.lease_with(b"x5")
        self.assertEqual(outcome(self.c["bob"].call, "KV", "Put", key=b"p/l5", value=b"v",
                                 lease=lid), PD)
        lid = self.lease_with()
        self.assertEqual(outcome(self.c["bob"].call, "KV", "Put", key=b"p/l4", value=b"v",
                                 lease=lid), "ok")
        self.assertEqual(outcome(self.c["r"].call, "KV", "Put", key=b"p/l4", value=b"v",
                                 lease=lid), PD)
        # TimeToLive: without keys open to anyone; with keys, see ETCD_GAPS
        lid = self.lease_with(b"p/q", b"x9")
        for who in ("bob", "anon", "nobody"):
            r = self.c[who].call("Lease", "LeaseTimeToLive", ID=lid)
            self.assertEqual((r.ID, r.grantedTTL, list(r.keys)), (lid, 300, []))
        for who, closed in (("root", "ok"), ("bob", PD), ("r", PD), ("anon", UE)):
            got = outcome(self.c[who].call, "Lease", "LeaseTimeToLive", ID=lid, keys=True)
            self.assertEqual(got, "ok" if ETCD_GAPS else closed, who)
        lid2 = self.lease_with(b"p/q2")
        r = self.c["bob"].call("Lease", "LeaseTimeToLive", ID=lid2, keys=True)
        self.assertEqual(list(r.keys), [b"p/q2"])
        r = self.s.ctl(BOB, "lease", "timetolive", "%x" % lid, "--keys")
        if ETCD_GAPS:
            self.ok(r)
            # etcd lists a lease's keys from a Go map: in any order
            m = re.search(r"attached keys\(\[(.*)\]\)", r.stdout)
            self.assertTrue(m, r.stdout)
            self.assertEqual(sorted(m.group(1).split()), ["p/q", "x9"], r.stdout)
        else:   # etcdctl exits 2 (ExitBadConnection) when TimeToLive fails
            self.refused(r, "PermissionDenied", PD[1], rc=2)
        r = self.c["root"].call("Lease", "LeaseLeases")
        self.assertIn(lid, [le.ID for le in r.leases])

    def test_lock_elect(self):
        s = self.s
        self.ok(s.ctl(BOB, "lock", "lk/l1", "echo", "held"), "held\n")
        self.ok(s.ctl(ROOT, "lock", "zz", "echo", "held"), "held\n")
        self.refused(s.ctl(BOB, "lock", "zz", "echo", "held"), "PermissionDenied", PD[1])
        self.refused(s.ctl(None, "lock", "lk/l1", "echo", "held"), "InvalidArgument", UE[1])
        # the v3lock and v3election services: code Unknown on refusal
        bob = self.c["bob"]
        lid = bob.call("Lease", "LeaseGrant", TTL=60).ID
        r = bob.call("Lock", "Lock", name=b"lk/a", lease=lid)
        self.assertEqual(r.key, b"lk/a/%x" % lid)
        bob.call("Lock", "Unlock", key=r.key)
        self.assertEqual(outcome(bob.call, "Lock", "Lock", name=b"zz", lease=lid),
                         (SC.UNKNOWN, PD[1]))
        self.assertEqual(outcome(self.c["anon"].call, "Lock", "Lock", name=b"lk/a", lease=lid),
                         (SC.UNKNOWN, UE[1]))
        r = bob.call("Election", "Campaign", name=b"lk/e", lease=lid, value=b"me")
        self.assertEqual((r.leader.name, r.leader.key), (b"lk/e", b"lk/e/%x" % lid))
        bob.call("Election", "Resign", leader=r.leader)
        self.assertEqual(outcome(bob.call, "Election", "Campaign", name=b"zz", lease=lid,
                                 value=b"me"), (SC.UNKNOWN, PD[1]))
        self.assertEqual(outcome(self.c["w"].call, "Election", "Campaign", name=b"lk/e",
                                 lease=lid, value=b"me"), (SC.UNKNOWN, PD[1]))
        self.assertEqual(outcome(self.c["anon"].call, "Election", "Campaign", name=b"lk/e",
                                 lease=lid, value=b"me"), (SC.UNKNOWN, UE[1]))
        bob.call("Lease", "LeaseRevoke", ID=lid)
        # etcdctl elect: elected on a permitted name (then killed by PID), refused on another
        p = subprocess.Popen(["etcdctl", "--endpoints", s.endpoint, "--user", BOB, "elect",
                              "lk/e2", "me"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, ETCDCTL_API="3"))
        try:
            line = [None]
            t = threading.Thread(target=lambda: line.__setitem__(0, p.stdout.readline()))
            t.start()
            t.join(30)
            self.assertIsNotNone(line[0], "etcdctl elect printed nothing in 30 s")
            self.assertRegex(line[0], r"^lk/e2/[0-9a-f]+\n$")
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
        self.refused(s.ctl(BOB, "elect", "zz", "me"), "PermissionDenied", PD[1])

    def test_maintenance_and_cluster(self):
        s, c = self.s, self.c
        # open to anyone, even with a bad token
        for who in ("anon", "bob", "bogus0", "bogus1"):
            self.assertEqual(c[who].call("Maintenance", "Status").version != "", True)
            self.assertEqual(len(c[who].call("Cluster", "MemberList").members), 1)
        # root-only, refused with code Unknown and "auth: ..." texts
        for m in ("Hash", "HashKV", "Defragment"):
            self.matrix(dict(root="ok", bob=M_PD, nobody=M_PD, anon=M_UE, bogus0=M_IT),
                        lambda cl: cl.call("Maintenance", m))

        def snap(cl):
            it = cl.unary_stream("Maintenance", "Snapshot", timeout=30)
            try:
                return next(it)
            finally:
                it.cancel()
        self.matrix(dict(root="ok", bob=M_PD, anon=M_UE, bogus0=M_IT), snap)
        # alarms: anyone (quorum: listing only, changes are root's); a bad token: Unknown
        self.matrix(dict(root="ok", bob="ok", anon="ok", bogus0=M_IT),
                    lambda cl: cl.call("Maintenance", "Alarm", action=0))
        self.matrix(dict(root="ok", bob=PD if STRICT else "ok", anon=UE if STRICT else "ok",
                         bogus0=M_IT),
                    lambda cl: cl.call("Maintenance", "Alarm", action=2))
        # compaction: anyone
        for who in ("anon", "bob"):
            rev = c["root"].call("KV", "Put", key=b"p/cmp", value=b"1").header.revision
            self.assertEqual(outcome(c[who].call, "KV", "Compact", revision=rev), "ok")
        rev = c["root"].call("KV", "Put", key=b"p/cmp", value=b"2").header.revision
        self.ok(s.ctl(BOB, "compact", str(rev)), "compacted revision %d\n" % rev)
        # member add / remove: root only
        peer = ["http://127.0.0.1:%d" % harness.free_port()]
        for who, exp in (("bob", PD), ("anon", UE), ("bogus0", IT)):
            self.assertEqual(outcome(c[who].call, "Cluster", "MemberAdd", peerURLs=peer,
                                     isLearner=True), exp, who)
        added = c["root"].call("Cluster", "MemberAdd", peerURLs=peer, isLearner=True).member.ID
        for who, exp in (("bob", PD), ("anon", UE), ("bogus0", IT)):
            self.assertEqual(outcome(c[who].call, "Cluster", "MemberRemove", ID=added), exp, who)
        c["root"].call("Cluster", "MemberRemove", ID=added)
        self.assertEqual(len(c["root"].call("Cluster", "MemberList").members), 1)
        # move-leader: no auth check before the target is looked at (quorum, STRICT:
        # root only, checked first)
        bad_target = (SC.FAILED_PRECONDITION, "etcdserver: bad leader transferee")
        for who, strict in (("anon", UE), ("bob", PD), ("root", bad_target)):
            self.assertEqual(outcome(c[who].call, "Maintenance", "MoveLeader", targetID=0x1234),
                             strict if STRICT else bad_target, who)
        # etcdctl's view
        ep = s.endpoint
        self.ok(s.ctl(ROOT, "defrag"), "Finished defragmenting etcd member[%s]\n" % ep)
        r = s.ctl(BOB, "defrag")
        self.assertEqual(r.returncode, 1)
        self.assertIn("Failed to defragment etcd member[%s] (rpc error: code = Unknown desc = "
                      "auth: permission denied)" % ep, r.stderr)
        r = s.ctl(None, "endpoint", "hash")
        self.refused(r, "Unknown", M_UE[1],
                     error_line="Error: rpc error: code = Unknown desc = " + M_UE[1])
        self.assertIn("Failed to get the hash of endpoint %s (rpc error: code = Unknown desc = "
                      "auth: user name is empty)" % ep, r.stderr)
        self.assertRegex(self.ok(s.ctl(ROOT, "endpoint", "hash")).stdout,
                         r"^%s, \d+\n$" % re.escape(ep))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.db")
            r = s.ctl(BOB, "snapshot", "save", path)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(ctl_error_line(r),
                             "Error: rpc error: code = Unknown desc = auth: permission denied")
            self.ok(s.ctl(ROOT, "snapshot", "save", path), "Snapshot saved at %s\n" % path)
            self.assertGreater(os.path.getsize(path), 0)
        self.ok(s.ctl(None, "alarm", "list"), "")
        self.ok(s.ctl(BOB, "alarm", "disarm"), "")
        self.assertEqual(self.ok(s.ctl(None, "member", "list")).stdout.count("\n"), 1)
        self.ok(s.ctl(None, "endpoint", "status"))
        r = s.ctl(None, "endpoint", "health")
        self.assertEqual(r.returncode, 1)
        self.assertIn("%s is unhealthy: failed to commit proposal: etcdserver: user name is "
                      "empty" % ep, r.stderr)
        self.assertEqual(ctl_error_line(r), "Error: unhealthy cluster")
        r = self.ok(s.ctl(BOB, "endpoint", "health"))
        self.assertIn("%s is healthy: successfully committed proposal" % ep, r.stderr)
        self.assertRegex(self.ok(s.ctl(None, "lease", "grant", "100")).stdout,
                         r"^lease [0-9a-f]+ granted with TTL\(100s\)\n$")

    def test_management_by_a_user(self):
        s = self.s
        for a in (("user", "list"), ("role", "list"), ("user", "add", "z:z",
                  "--interactive=false"), ("role", "add", "z"), ("user", "delete", "r"),
                  ("user", "grant-role", "bob", "ro"), ("user", "revoke-role", "bob", "rw"),
                  ("role", "grant-permission", "rw", "readwrite", "x"),
                  ("role", "revoke-permission", "rw", "p/", "--prefix"),
                  ("auth", "disable"), ("auth", "enable"), ("user", "get", "r"),
                  ("role", "get", "ro"), ("role", "get", "root"), ("role", "delete", "rw")):
            self.refused(s.ctl(BOB, *a), "PermissionDenied", PD[1])
        self.refused(s.ctl(BOB, "user", "passwd", "bob", "--interactive=false", input="x\n"),
                     "PermissionDenied", PD[1])
        self.ok(s.ctl(BOB, "user", "get", "bob"), "User: bob\nRoles: rw\n")
        self.ok(s.ctl(NOBODY, "user", "get", "nobody"), "User: nobody\nRoles:\n")
        self.ok(s.ctl(BOB, "role", "get", "rw"),
                "Role rw\nKV Read:\n\t[lk/, lk0) (prefix lk/)\n\t[p/, p0) (prefix p/)\n"
                "KV Write:\n\t[lk/, lk0) (prefix lk/)\n\t[p/, p0) (prefix p/)\n")
        rpc = self.c["r"]
        self.assertEqual(outcome(rpc.call, "Auth", "UserList"), PD)
        self.assertEqual(list(rpc.call("Auth", "UserGet", name="r").roles), ["ro"])
        self.assertEqual(outcome(self.c["anon"].call, "Auth", "UserGet", name="r"), UE)
        self.assertEqual(outcome(self.c["bogus0"].call, "Auth", "UserGet", name="r"), IT)
        self.assertEqual(sorted(self.c["root"].call("Auth", "UserList").users),
                         ["bob", "nobody", "r", "root", "w"])
        # two logins of one user: two tokens, both live
        a, b = login(s.endpoint, BOB), login(s.endpoint, BOB)
        self.assertNotEqual(a.token, b.token)
        for x in (a, b):
            self.assertEqual(x.call("KV", "Range", key=b"p/a").count, 1)
            x.close()


# == 3. python3-etcd3 ==============================================================

def _quiet_closed_watchers(args, _orig=threading.excepthook):
    """python3-etcd3's watch thread reopens its stream when the old one ends; once
    the client is closed that raises "Channel closed" and ends the thread: not news."""
    if (args.thread is not None and args.thread.name.startswith("etcd3_watch_")
            and isinstance(args.exc_value, ValueError)):
        return
    _orig(args)


threading.excepthook = _quiet_closed_watchers


def py_client(s, user=None, password=None):
    """etcd3.client with user/password, its token kept as metadata only: grpcio
    refuses call credentials over an insecure channel (see the docstring)."""
    import etcd3
    cl = etcd3.client(host="127.0.0.1", port=s.client_port, timeout=15, user=user,
                      password=password)
    if user is not None:
        assert cl.metadata and cl.metadata[0][0] == "token" and cl.metadata[0][1]
        cl.call_credentials = None
        cl.watcher._credentials = None
    return cl


class T3PythonClient(Base):
    @classmethod
    def setUpClass(cls):
        cls.s = AuthServer(TARGET, extra_args=FAST_HASH).start()
        cast(cls.s)

    @classmethod
    def tearDownClass(cls):
        cls.s.cleanup()

    def rpc_err(self, fn):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        return cm.exception.code(), cm.exception.details()

    def test_python_client(self):
        import etcd3
        s = self.s
        self.assertEqual(self.rpc_err(lambda: etcd3.client(
            host="127.0.0.1", port=s.client_port, timeout=15, user="bob", password="bad")),
            AUTH_FAILED)
        bob, anon, root = py_client(s, "bob", "bobpw"), py_client(s), py_client(s, "root",
                                                                                "rootpw")
        try:
            self.assertEqual(bob.get("p/a")[0], b"1")
            bob.put("p/py", "1")
            self.assertTrue(bob.delete("p/py"))
            self.assertEqual([v for v, _ in bob.get_prefix("p/")], [b"1"])
            self.assertEqual(self.rpc_err(lambda: bob.get("x")), PD)
            self.assertEqual(self.rpc_err(lambda: bob.put("x", "2")), PD)
            self.assertEqual(self.rpc_err(lambda: bob.delete("x")), PD)
            self.assertEqual(self.rpc_err(lambda: list(bob.get_all())), PD)
            t = bob.transactions
            ok, _ = bob.transaction(compare=[t.version("p/a") > 0],
                                    success=[t.put("p/t", "1")], failure=[])
            self.assertTrue(ok)
            self.assertEqual(self.rpc_err(lambda: bob.transaction(
                compare=[t.version("x") > 0], success=[], failure=[])), PD)
            lease = bob.lease(100)
            bob.put("p/leased", "1", lease=lease)
            self.assertEqual(lease.keys, [b"p/leased"])
            lease.revoke()
            self.assertIsNone(bob.get("p/leased")[0])
            # watch: a permitted key delivers; a forbidden one is "created" as id -1
            events, cancel = bob.watch("p/w")
            root.put("p/w", "hello")
            ev = next(events)
            self.assertEqual((ev.key, ev.value), (b"p/w", b"hello"))
            cancel()
            self.assertEqual(bob.add_watch_callback("x", lambda r: None), -1)
            for fn in (lambda: anon.get("p/a"), lambda: anon.put("p/a", "1"),
                       lambda: anon.delete("p/a")):
                self.assertEqual(self.rpc_err(fn), UE)
            self.assertEqual(anon.add_watch_callback("p/a", lambda r: None), -1)
            self.assertGreater(anon.lease(100).id, 0)
            self.assertEqual(anon.status().version != "", True)
            self.assertEqual(self.rpc_err(lambda: anon.defragment()), M_UE)
            self.assertEqual(self.rpc_err(lambda: bob.defragment()), M_PD)
            root.defragment()
            self.assertEqual(root.get("x")[0], b"1")
        finally:
            for cl in (bob, anon, root):
                cl.close()


# == 4. tokens and changes while in use ================================================

class T4Tokens(Base):
    def setUp(self):
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.cleanup()

    def server(self, *extra):
        s = AuthServer(TARGET, extra_args=FAST_HASH + list(extra)).start()
        self.servers.append(s)
        cast(s)
        return s

    def range_pa(self, rpc):
        return outcome(rpc.call, "KV", "Range", key=b"p/a")

    def test_invalidation(self):
        s = self.server()
        ep = s.endpoint
        s.root("user", "add", "carol:cpw", "--interactive=false")
        s.root("user", "grant-role", "carol", "rw")
        carol = login(ep, "carol:cpw")
        self.assertEqual(self.range_pa(carol), "ok")
        s.root("user", "delete", "carol")
        self.assertEqual(self.range_pa(carol), IT)
        self.assertEqual(outcome(carol.call, "KV", "Put", key=b"p/a", value=b"1"), IT)
        # passwd drops the user's tokens
        bob = login(ep, BOB)
        s.root("user", "passwd", "bob", "--interactive=false", input="bobpw2\n")
        self.assertEqual(self.range_pa(bob), IT)
        self.assertEqual(Rpc(ep).error("Auth", "Authenticate", name="bob", password="bobpw"),
                         AUTH_FAILED)
        # Authenticate carrying a token that is not live
        self.assertEqual(Rpc(ep, token=bob.token).error("Auth", "Authenticate", name="bob",
                                                        password="bobpw2"), IT)
        self.assertEqual(Rpc(ep, token="bogus").error("Auth", "Authenticate", name="bob",
                                                      password="wrong"), AUTH_FAILED)
        # role changes keep the token; each request sees the permissions of now
        bob = login(ep, "bob:bobpw2")
        s.root("user", "revoke-role", "bob", "rw")
        self.assertEqual(self.range_pa(bob), PD)
        s.root("user", "grant-role", "bob", "rw")
        self.assertEqual(self.range_pa(bob), "ok")
        s.root("role", "add", "extra")
        s.root("user", "grant-role", "bob", "extra")
        s.root("role", "delete", "extra")
        self.assertEqual(self.range_pa(bob), "ok")
        # auth disable drops every token; a request carrying one is refused even with auth off
        root = login(ep, ROOT)
        root.call("Auth", "AuthDisable")
        self.assertEqual(self.range_pa(root), IT)
        self.assertEqual(self.range_pa(Rpc(ep, token="bogus")), IT)
        self.assertEqual(self.range_pa(Rpc(ep)), "ok")
        self.assertEqual(Rpc(ep).error("Auth", "Authenticate", name="root", password="rootpw"),
                         NOT_ENABLED)
        import etcd3
        with self.assertRaises(grpc.RpcError) as cm:
            etcd3.client(host="127.0.0.1", port=s.client_port, timeout=15, user="root",
                         password="rootpw")
        self.assertEqual((cm.exception.code(), cm.exception.details()), NOT_ENABLED)
        Rpc(ep).call("Auth", "AuthEnable")
        self.assertEqual(self.range_pa(root), IT)
        self.assertEqual(self.range_pa(bob), IT)
        self.assertEqual(self.range_pa(login(ep, ROOT)), "ok")

    def test_simple_token_ttl(self):
        s = self.server("--auth-token-ttl=2")
        bob = login(s.endpoint, BOB)
        # in use: stays live past the TTL (each use restarts its clock)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            self.assertEqual(self.range_pa(bob), "ok")
            time.sleep(0.2)
        # idle: dropped. A check that finds it live restarts its clock, so each check
        # follows an idle spell well past the TTL
        for idle in (5, 8, 12):
            time.sleep(idle)
            got = self.range_pa(bob)
            if got != "ok":
                break
        self.assertEqual(got, IT)
        self.assertEqual(outcome(bob.call, "KV", "Put", key=b"p/a", value=b"1"), IT)
        self.assertEqual(self.range_pa(login(s.endpoint, BOB)), "ok")

    def test_revoke_during_watch_and_txns(self):
        s = self.server()
        root, bob = login(s.endpoint, ROOT), login(s.endpoint, BOB)
        ws = WatchStream(bob)
        try:
            ws.create(b"p/w", b"p/x")
            self.assertTrue(ws.next().created)
            root.call("KV", "Put", key=b"p/w1", value=b"1")
            self.assertEqual([e.kv.key for e in ws.next().events], [b"p/w1"])
            # a txn loop while the permission goes
            results, stop = [], threading.Event()

            def loop():
                t = Txn(compare=[cmp_exists(b"p/a")], success=[op_put(b"p/loop")])
                while not stop.is_set():
                    results.append(outcome(bob.call, "KV", "Txn", req=t))
            th = threading.Thread(target=loop)
            th.start()
            wait_for(lambda: len(results) >= 20, what="20 txns before the revoke")
            s.root("role", "revoke-permission", "rw", "p/", "--prefix")
            n_at_revoke = len(results)
            wait_for(lambda: len(results) >= n_at_revoke + 20, what="20 txns after the revoke")
            stop.set()
            th.join()
            # ok, ok, ..., then refused for good; the one txn checked before the revoke
            # and applied after it may get "revision of auth store is old"
            letters = "".join({"ok": "o", PD: "d", OLD_REV: "r"}.get(x, "?") for x in results)
            self.assertRegex(letters, r"^o+r?d+$")
            first_bad = len(letters) - len(letters.lstrip("o"))
            self.assertGreaterEqual(first_bad, 20)
            self.assertLessEqual(first_bad, n_at_revoke + 1)
            # the open watch keeps delivering (etcd checks a watch when it is created)
            root.call("KV", "Put", key=b"p/w2", value=b"2")
            self.assertEqual([e.kv.key for e in ws.next().events], [b"p/w2"])
            # a new watch, on this stream or another, is refused
            ws.create(b"p/a")
            resp = ws.next()
            self.assertEqual((resp.watch_id, resp.created, resp.canceled, resp.cancel_reason),
                             (-1, True, True,
                              "rpc error: code = PermissionDenied desc = " + PD[1]))
            self.assertEqual(self.range_pa(bob), PD)
        finally:
            ws.close()

    def jwt_case(self, method, keygen):
        d = tempfile.mkdtemp(prefix="auth-jwt-")
        priv, pub = os.path.join(d, "priv.pem"), os.path.join(d, "pub.pem")
        for cmd in keygen(priv, pub):
            subprocess.run(cmd, check=True, capture_output=True)
        s = self.server("--auth-token", "jwt,pub-key=%s,priv-key=%s,sign-method=%s,ttl=2s"
                        % (pub, priv, method))
        before = time.time()
        bob = login(s.endpoint, BOB)
        after = time.time()
        parts = bob.token.split(".")
        self.assertEqual(len(parts), 3, bob.token)

        def b64(x):
            return base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        header, claims, sig = json.loads(b64(parts[0])), json.loads(b64(parts[1])), b64(parts[2])
        self.assertEqual(header, {"alg": method, "typ": "JWT"})
        self.assertEqual(claims["username"], "bob")
        self.assertIsInstance(claims["revision"], int)
        self.assertGreater(claims["revision"], 0)
        self.assertTrue(int(before) + 2 - 1 <= claims["exp"] <= after + 2 + 1, (claims, before))
        # the signature verifies with the public key (openssl)
        signed, sigf = os.path.join(d, "signed"), os.path.join(d, "sig")
        with open(signed, "w") as f:
            f.write(parts[0] + "." + parts[1])
        if method.startswith("ES"):
            self.assertEqual(len(sig), 64)
            sig = der_ecdsa(sig[:32], sig[32:])
        with open(sigf, "wb") as f:
            f.write(sig)
        r = subprocess.run(["openssl", "dgst", "-sha256", "-verify", pub, "-signature", sigf,
                            signed], capture_output=True, text=True)
        self.assertEqual(r.stdout.strip(), "Verified OK", r.stderr)
        # in use; tampered; after an auth change; expired
        self.assertEqual(self.range_pa(bob), "ok")
        self.assertEqual(outcome(bob.call, "KV", "Range", key=b"x"), PD)
        forged = parts[0] + "." + parts[1] + "." + parts[2][:-6] + (
            "AAAAAA" if not parts[2].endswith("AAAAAA") else "BBBBBB")
        self.assertEqual(self.range_pa(Rpc(s.endpoint, token=forged)), IT)
        other = login(s.endpoint, BOB)
        other_claims = json.loads(b64(other.token.split(".")[1]))
        s.root("role", "add", "changed")
        self.assertEqual(self.range_pa(other), OLD_REV)
        self.assertEqual(outcome(other.call, "KV", "Put", key=b"p/a", value=b"1"), OLD_REV)
        fresh = login(s.endpoint, BOB)
        self.assertGreater(json.loads(b64(fresh.token.split(".")[1]))["revision"],
                           other_claims["revision"])
        self.assertEqual(self.range_pa(fresh), "ok")
        wait_for(lambda: time.time() > claims["exp"] + 1.5, timeout=30, what="past exp")
        wait_for(lambda: self.range_pa(fresh) != "ok", timeout=20, what="the JWT to expire")
        self.assertEqual(self.range_pa(fresh), IT)
        self.assertEqual(outcome(fresh.call, "KV", "Put", key=b"p/a", value=b"1"), IT)
        # etcdctl logs in again by itself
        self.ok(s.ctl(BOB, "get", "p/a"), "p/a\n1\n")
        subprocess.run(["rm", "-rf", d])

    def test_jwt_rs256(self):
        self.jwt_case("RS256", lambda priv, pub: [
            ["openssl", "genrsa", "-out", priv, "2048"],
            ["openssl", "rsa", "-in", priv, "-pubout", "-out", pub]])

    def test_jwt_es256(self):
        self.jwt_case("ES256", lambda priv, pub: [
            ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", priv],
            ["openssl", "ec", "-in", priv, "-pubout", "-out", pub]])


def der_ecdsa(r, s):
    """An ECDSA signature r||s (JWS) as the DER SEQUENCE openssl verifies."""
    def integer(b):
        b = b.lstrip(b"\x00") or b"\x00"
        if b[0] & 0x80:
            b = b"\x00" + b
        return b"\x02" + bytes([len(b)]) + b
    body = integer(r) + integer(s)
    return b"\x30" + bytes([len(body)]) + body


# == 5. persistence ==================================================================

def auth_view(s):
    """What root sees of the auth state, through etcdctl."""
    out = []
    for a in (("user", "list"), ("role", "list"), ("user", "get", "bob", "--detail"),
              ("user", "get", "r"), ("role", "get", "wo"), ("role", "get", "root")):
        out.append(s.root(*a).stdout)
    return out


class T5Persistence(Base):
    def test_restart(self):
        s = AuthServer(TARGET, extra_args=FAST_HASH).start()
        try:
            cast(s)
            s.root("user", "add", "late:lpw", "--interactive=false")
            s.root("role", "grant-permission", "ro", "read", "x")
            want = auth_view(s)
            late_roles = ""
            for sig in (signal.SIGKILL, signal.SIGTERM):
                s.kill(sig)
                s.start()
                self.assertEqual(auth_view(s), want, "after signal %d" % sig)
                self.refused(s.ctl(None, "get", "p/a"), "InvalidArgument", UE[1])
                # (a simple token from before the restart may or may not work: etcd
                # re-creates it when it replays the Authenticate entry; not asserted)
                bob = login(s.endpoint, BOB)
                self.assertEqual(bob.call("KV", "Range", key=b"p/a").count, 1)
                self.assertEqual(outcome(bob.call, "KV", "Range", key=b"x"), PD)
                self.ok(s.ctl(R, "get", "x"), "x\n1\n")
                self.ok(s.ctl("late:lpw", "user", "get", "late"), "User: late\nRoles:%s\n"
                        % late_roles)
                # a change after the restart, seen after the next one
                s.root("user", "grant-role", "late", "ro")
                late_roles = " ro"
                want = auth_view(s)
                self.ok(s.ctl("late:lpw", "get", "p/a"), "p/a\n1\n")
            # auth off survives too
            s.root("auth", "disable")
            s.kill(signal.SIGKILL)
            s.start()
            self.ok(s.ctl(None, "get", "x"), "x\n1\n")
            self.ok(s.ctl(None, "user", "list"), "bob\nlate\nnobody\nr\nroot\nw\n")
        finally:
            s.cleanup()

    def test_snapshot_restore(self):
        s = AuthServer(TARGET, extra_args=FAST_HASH).start()
        d = tempfile.mkdtemp(prefix="auth-snap-")
        t = None
        try:
            cast(s)
            want = auth_view(s)
            snap = os.path.join(d, "snap.db")
            self.ok(s.ctl(ROOT, "snapshot", "save", snap))
            s.cleanup()
            t = AuthServer(TARGET, data_dir=os.path.join(d, "restored." + TARGET),
                           extra_args=FAST_HASH)
            restore_snapshot(snap, t)
            t.start()
            self.assertEqual(auth_view(t), want)
            self.refused(t.ctl(None, "get", "p/a"), "InvalidArgument", UE[1])
            self.ok(t.ctl(BOB, "get", "p/a"), "p/a\n1\n")
            self.refused(t.ctl(BOB, "get", "x"), "PermissionDenied", PD[1])
            self.refused(t.ctl("bob:wrong", "get", "p/a"), "InvalidArgument", AUTH_FAILED[1],
                         rc=2)
        finally:
            s.cleanup()
            if t:
                t.kill()
            subprocess.run(["rm", "-rf", d])


# == 6. three members ================================================================

SNAP_KEYS = 7000   # as test_cluster.py: the leader sends a
SNAP_RECEIVED = re.compile(r"applied (incoming )?snapshot at index \d+")  # snapshot past 5000


class T6Cluster(Base):
    def test_cluster(self):
        c = AuthCluster(TARGET, n=3, extra_args=FAST_HASH + ["--snapshot-count", "100"])
        c.start()
        try:
            self.cluster_case(c)
        except Exception:
            c.dump_logs()
            raise
        finally:
            c.cleanup()

    def cluster_case(self, c):
        class Via:       # AuthServer-like etcdctl through member i
            def __init__(self, i):
                self.i = i

            def etcdctl(self, *args, check=False, **kw):
                return c.etcdctl(self.i, *args, check=check, **kw)

            def ctl(self, user, *args, input=None):
                pre = ("--user", user) if user else ()
                return c.etcdctl(self.i, *(pre + args), check=False, input=input,
                                 anon=user is None)

            def root(self, *args):
                r = self.ctl(ROOT, *args)
                if r.returncode != 0:
                    raise AssertionError("etcdctl %s: %s" % (" ".join(args), r.stderr))
                return r
        lead = c.wait_leader()
        f1, f2 = [i for i in range(3) if i != lead]
        cast(Via(lead))
        c.user = ROOT
        eps = [c.endpoint(i) for i in range(3)]
        # every member shows the same state, each answering itself
        views = [auth_view(Via(i)) for i in range(3)]
        self.assertEqual(views[f1], views[lead])
        self.assertEqual(views[f2], views[lead])
        # a token minted by one member works on the others
        bob = login(eps[f1], BOB)
        for i in range(3):
            self.assertEqual(Rpc(eps[i], token=bob.token).call("KV", "Range", key=b"p/a").count,
                             1)
        # grant on the leader: permitted at once through a follower; revoke through the
        # other follower: refused at once through the leader
        Via(lead).root("role", "grant-permission", "rw", "readwrite", "q/", "--prefix")
        on_f1 = Rpc(eps[f1], token=bob.token)
        # never denied; but a put f1 checked before it applied the grant comes
        # back "revision of auth store is old", which clients ask again (etcd:
        # seen in CI, the grant a millisecond behind on f1)
        for _ in range(100):
            got = outcome(on_f1.call, "KV", "Put", key=b"q/1", value=b"1")
            if got != OLD_REV:
                break
        self.assertEqual(got, "ok")
        self.assertEqual(on_f1.call("KV", "Range", key=b"q/1").count, 1)
        self.ok(Via(f2).ctl(BOB, "get", "q/1"), "q/1\n1\n")
        Via(f2).root("role", "revoke-permission", "rw", "q/", "--prefix")
        self.assertEqual(outcome(Rpc(eps[lead], token=bob.token).call, "KV", "Range",
                                 key=b"q/1"), PD)
        self.ok(Via(f1).ctl(ROOT, "role", "get", "rw"),
                "Role rw\nKV Read:\n\t[p/, p0) (prefix p/)\nKV Write:\n\t[p/, p0) (prefix p/)\n")
        # a follower down while keys and auth changes go through: it catches up (by a
        # snapshot: more entries than a leader keeps) and enforces the new state
        c.kill(f1, signal.SIGTERM)
        root = login(eps[lead], ROOT)
        errors, old_rev = [], []

        def writer(t, n):
            # a put checked before an auth change and applied after it is refused with
            # "revision of auth store is old" (etcd; clients retry it)
            try:
                for k in range(t, SNAP_KEYS, n):
                    while True:
                        got = outcome(root.call, "KV", "Put", key=b"s/%06d" % k, value=b"v",
                                      timeout=30)
                        if got != OLD_REV:
                            break
                        old_rev.append(k)
                    if got != "ok":
                        errors.append(got)
                        return
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        ths = [threading.Thread(target=writer, args=(t, 4)) for t in range(4)]
        for th in ths:
            th.start()
        v = Via(lead)
        v.root("user", "add", "late:lpw", "--interactive=false")
        v.root("role", "add", "lr")
        v.root("role", "grant-permission", "lr", "read", "x")
        v.root("user", "grant-role", "late", "lr")
        v.root("role", "revoke-permission", "ro", "p/", "--prefix")
        v.root("user", "delete", "nobody")
        for th in ths:
            th.join()
        self.assertEqual(errors, [])
        want = auth_view(v)
        c.restart(f1)
        wait_for(lambda: Rpc(eps[f1]).call("KV", "Range", key=b"s/", range_end=b"s0",
                                           count_only=True, serializable=True,
                                           token=login(eps[f1], ROOT).token).count == SNAP_KEYS,
                 timeout=120, what="the restarted follower's keys")
        self.assertRegex(c.members[f1].log().rsplit("==== ", 1)[-1], SNAP_RECEIVED)
        self.assertEqual(auth_view(Via(f1)), want)
        # Authenticate checks the password on the member that serves it
        late = login(eps[f1], "late:lpw")
        rng = dict(key=b"x", serializable=True)
        self.assertEqual(late.call("KV", "Range", **rng).count, 1)
        self.assertEqual(outcome(late.call, "KV", "Range", key=b"p/a", serializable=True), PD)
        rr = login(eps[f1], R)
        self.assertEqual(outcome(rr.call, "KV", "Range", key=b"p/a", serializable=True), PD)
        self.assertEqual(Rpc(eps[f1]).error("Auth", "Authenticate", name="nobody",
                                            password="npw"), AUTH_FAILED)
        # a member added now learns it all
        m3 = c.add_member("m3")
        ep3 = c.endpoint(m3)
        self.assertEqual(auth_view(Via(m3)), want)
        self.refused(Via(m3).ctl(None, "get", "x"), "InvalidArgument", UE[1])
        late3 = login(ep3, "late:lpw")
        self.assertEqual(late3.call("KV", "Range", key=b"x", serializable=True).count, 1)
        self.assertEqual(outcome(late3.call, "KV", "Range", key=b"p/a", serializable=True), PD)
        self.ok(Via(m3).ctl(BOB, "put", "p/m3", "1"), "OK\n")
        self.ok(Via(lead).ctl(BOB, "get", "p/m3"), "p/m3\n1\n")
        # member add/remove by a user that is not root
        self.refused(Via(lead).ctl(BOB, "member", "remove", "%x" % c.member_ids[m3]),
                     "PermissionDenied", PD[1])
        self.refused(Via(lead).ctl(None, "member", "remove", "%x" % c.member_ids[m3]),
                     "InvalidArgument", UE[1])
        # move-leader needs no credentials at all (etcd 3.4); root (quorum, STRICT)
        ids = c.member_ids
        if STRICT:
            lead = c.wait_leader()
            to = next(i for i in c.current() if i != lead)
            self.refused(Via(lead).ctl(None, "move-leader", "%x" % ids[to]),
                         "InvalidArgument", UE[1])
            self.refused(Via(lead).ctl(BOB, "move-leader", "%x" % ids[to]),
                         "PermissionDenied", PD[1])
        for who in ((ROOT,) if STRICT else (None, BOB)):
            lead = c.wait_leader()
            to = next(i for i in c.current() if i != lead)
            self.ok(Via(lead).ctl(who, "move-leader", "%x" % ids[to]),
                    "Leadership transferred from %x to %x\n" % (ids[lead], ids[to]))
            wait_for(lambda: c.leader_index() == to, what="m%d leading" % to)


if __name__ == "__main__":
    unittest.main(verbosity=2)
