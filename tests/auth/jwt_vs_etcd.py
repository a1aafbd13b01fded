#!/usr/bin/python3
"""tests/auth/jwt_vs_etcd.py: interop of src/auth/jwt.c with a real etcd 3.4.

For each sign-method it starts /usr/bin/etcd with
--auth-token jwt,priv-key=...,sign-method=...,ttl=... on free 127.0.0.1
ports, adds a root user and enables auth with etcdctl, then:
  - gets a token from etcd (Authenticate over gRPC), checks its header and
    claims, and that our verifier (jwt_tool verify) accepts it;
  - for the deterministic methods (RS*, HS*) checks that our signer makes the
    byte-identical token for the same claims;
  - uses a token our signer made as `token` metadata on a Range: etcd must
    accept it;
  - checks what etcd answers for an expired, a tampered, an alg=none and an
    old-auth-revision token, and that our verifier rejects the same ones;
  - and runs an etcd with only pub-key (verify-only).

usage: jwt_vs_etcd.py [path/to/jwt_tool]
(without an argument jwt_tool is built with gcc from src/auth/jwt.c and
tests/auth/jwt_tool.c into a temp dir). Exit status 0 when all checks pass.
"""
import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc
from etcd3 import etcdrpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
TTL = "7m"
TTL_S = 420

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if cond:
        print("  ok   " + what)
    else:
        print("  FAIL " + what)
        failures.append(what)


def b64d(seg):
    return base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4))


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def free_port():
    # harness's: below the ephemeral range, where no outgoing connection of
    # a test running beside this one can take the port before etcd listens
    return harness.free_port()


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def tool(*args):
    r = run([TOOL] + list(args))
    return r.returncode, r.stdout.strip()


class Etcd:
    def __init__(self, tmp, auth_token):
        self.dir = tempfile.mkdtemp(dir=tmp)
        self.cport, self.pport = free_port(), free_port()
        self.ep = "127.0.0.1:%d" % self.cport
        curl = "http://" + self.ep
        purl = "http://127.0.0.1:%d" % self.pport
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "n1", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "n1=" + purl, "--auth-token", auth_token],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.channel = None

    def wait_ready(self):
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            r = run([ETCDCTL, "--endpoints", self.ep, "endpoint", "health"],
                    env=dict(os.environ, ETCDCTL_API="3"))
            if r.returncode == 0:
                self.channel = grpc.insecure_channel(self.ep)
                return True
            time.sleep(0.1)
        return False

    def ctl(self, *args):
        r = run([ETCDCTL, "--endpoints", self.ep] + list(args),
                env=dict(os.environ, ETCDCTL_API="3"))
        if r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (args, r.stderr))
        return r.stdout

    def authenticate(self, user="root", pw="rootpw"):
        stub = etcdrpc.AuthStub(self.channel)
        return stub.Authenticate(etcdrpc.AuthenticateRequest(name=user, password=pw),
                                 timeout=5).token

    def range_with(self, token):
        """None on success, else (grpc code name, details)"""
        stub = etcdrpc.KVStub(self.channel)
        try:
            stub.Range(etcdrpc.RangeRequest(key=b"foo"), metadata=[("token", token)],
                       timeout=5)
            return None
        except grpc.RpcError as e:
            return (e.code().name, e.details())

    def stop(self):
        if self.channel is not None:
            self.channel.close()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def logtext(self):
        with open(os.path.join(self.dir, "log")) as f:
            return f.read()


def gen_keys(d):
    def ossl(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    k = {}
    ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
         "-out", d + "/rsa.pem")  # PKCS#8
    ossl("pkey", "-in", d + "/rsa.pem", "-pubout", "-out", d + "/rsa.pub")
    k["RS"] = (d + "/rsa.pem", d + "/rsa.pub")
    for curve, m in (("prime256v1", "ES256"), ("secp384r1", "ES384"), ("secp521r1", "ES512")):
        ossl("ecparam", "-name", curve, "-genkey", "-noout", "-out", d + "/%s.pem" % m)  # SEC1
        ossl("pkey", "-in", d + "/%s.pem" % m, "-pubout", "-out", d + "/%s.pub" % m)
        k[m] = (d + "/%s.pem" % m, d + "/%s.pub" % m)
    with open(d + "/hmac.key", "wb") as f:
        f.write(os.urandom(48) + b"\n")
    k["HS"] = (d + "/hmac.key", None)
    return k


def method_keys(keys, m):
    if m.startswith(("RS", "PS")):
        return keys["RS"]
    if m.startswith("HS"):
        return keys["HS"]
    return keys[m]


def test_method(tmp, keys, m):
    print("== %s" % m)
    priv, pub = method_keys(keys, m)
    opts = "priv-key=%s,sign-method=%s,ttl=%s" % (priv, m, TTL)
    if pub:
        opts = "pub-key=%s,%s" % (pub, opts)
    rc, out = tool("load", opts)
    check(rc == 0 and out.startswith("ok %s %d 1" % (m, TTL_S * 1000)), "jwt_tool load: " + out)
    e = Etcd(tmp, "jwt," + opts)
    try:
        if not e.wait_ready():
            check(False, "etcd started:\n" + e.logtext()[-2000:])
            return
        e.ctl("user", "add", "root:rootpw")
        e.ctl("auth", "enable")
        t0 = int(time.time())
        tok = e.authenticate()
        t1 = int(time.time())
        parts = tok.split(".")
        check(len(parts) == 3 and all("=" not in p for p in parts), "etcd token: 3 unpadded segments")
        hdr = json.loads(b64d(parts[0]))
        claims = json.loads(b64d(parts[1]))
        check(hdr == {"alg": m, "typ": "JWT"}, "etcd header %s" % hdr)
        check(sorted(claims) == ["exp", "revision", "username"]
              and claims["username"] == "root" and isinstance(claims["revision"], int)
              and isinstance(claims["exp"], int), "etcd claims %s" % claims)
        check(t0 + TTL_S <= claims["exp"] <= t1 + TTL_S, "etcd exp = now + ttl")
        rev = claims["revision"]
        rc, out = tool("verify", opts, tok)
        check(rc == 0 and out == "ok root %d" % rev, "our verifier accepts etcd's token: " + out)
        # with only the public key (or the secret) too
        if pub:
            rc, out = tool("verify", "pub-key=%s,sign-method=%s" % (pub, m), tok)
            check(rc == 0 and out == "ok root %d" % rev, "verify-only accepts etcd's token: " + out)
        if m[:2] in ("RS", "HS"):
            rc, out = tool("sign-exp", opts, "root", str(rev), str(claims["exp"]))
            check(rc == 0 and out == tok, "our token is byte-identical to etcd's")
        rc, mine = tool("sign", opts, "root", str(rev))
        check(rc == 0, "we sign")
        check(e.range_with(mine) is None, "etcd accepts our token on Range: %s" % (e.range_with(mine),))
        check(e.range_with(tok) is None, "etcd accepts its own token on Range")

        # expired (correctly signed): exp = now - 10
        rc, old = tool("sign-exp", opts, "root", str(rev), str(int(time.time()) - 10))
        r = e.range_with(old)
        check(r == ("UNAUTHENTICATED", "etcdserver: invalid auth token"),
              "etcd on expired token: %s" % (r,))
        rc, out = tool("verify", opts, old)
        check(rc == 1 and out == "error -110", "we say ETIMEDOUT on it: " + out)
        # a token valid for a few more seconds (the exp == now boundary,
        # jwt-go's now <= exp, is in test_jwt.c)
        rc, edge = tool("sign-exp", opts, "root", str(rev), str(int(time.time()) + 3))
        check(e.range_with(edge) is None, "etcd accepts exp = now + 3s")
        # tampered payload: username admin
        c2 = dict(claims, username="admin")
        forged = parts[0] + "." + b64e(json.dumps(c2, separators=(",", ":")).encode()) + "." + parts[2]
        r = e.range_with(forged)
        check(r == ("UNAUTHENTICATED", "etcdserver: invalid auth token"), "etcd on tampered payload: %s" % (r,))
        rc, out = tool("verify", opts, forged)
        check(rc == 1 and out == "error -22", "we reject it: " + out)
        # alg none
        none = b64e(b'{"alg":"none","typ":"JWT"}') + "." + parts[1] + "."
        r = e.range_with(none)
        check(r == ("UNAUTHENTICATED", "etcdserver: invalid auth token"), "etcd on alg none: %s" % (r,))
        rc, out = tool("verify", opts, none)
        check(rc == 1 and out == "error -22", "we reject alg none: " + out)
        # padding: etcd 3.4.23's jwt-go (golang-jwt v3.2) decodes segments
        # with RawURLEncoding, so '=' is refused even on the signature
        # (whose text the signature does not cover)
        for what, segs in (("header", [parts[0] + "=" * (-len(parts[0]) % 4)] + parts[1:]),
                           ("signature", parts[:2] + [parts[2] + "=" * (-len(parts[2]) % 4)])):
            padded = ".".join(segs)
            if padded == tok:
                continue
            r = e.range_with(padded)
            rc, out = tool("verify", opts, padded)
            check((r is None) == (rc == 0), "padded %s: etcd %s, we %s" % (what, r, out))
        # non-zero unused trailing bits in the signature's last character
        alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        unused = (6 * len(parts[2])) % 8
        if unused:
            v = alpha.index(parts[2][-1])
            odd = parts[0] + "." + parts[1] + "." + parts[2][:-1] + alpha[v ^ 1]
            r = e.range_with(odd)
            rc, out = tool("verify", opts, odd)
            check((r is None) == (rc == 0), "non-canonical last char: etcd %s, we %s" % (r, out))
        if m == "HS256":
            crafted_claims(e, opts, priv, rev)
        # old auth revision: a correctly signed token from before the last
        # auth change
        e.ctl("--user", "root:rootpw", "user", "add", "u2:pw2")
        r = e.range_with(tok)
        check(r == ("INVALID_ARGUMENT", "etcdserver: revision of auth store is old"),
              "etcd on old auth revision: %s" % (r,))
    finally:
        e.stop()


def crafted_claims(e, opts, keyfile, rev):
    """HS256 only (we know the secret): correctly signed tokens with unusual
    header / claims JSON; etcd and our verifier must agree. (Tokens without
    a string username or a numeric revision are left out: etcd 3.4 panics on
    them, claims["username"].(string).)"""
    with open(keyfile, "rb") as f:
        secret = f.read()
    now = int(time.time())
    std = '{"alg":"HS256","typ":"JWT"}'
    cases = [
        (std, '{"exp":%d,"revision":%d,"username":"root"} trailing junk' % (now + 60, rev)),
        (std, '{"revision":%d,"username":"root"}' % rev),  # no exp
        (std, '{"exp":0,"revision":%d,"username":"root"}' % rev),
        (std, '{"exp":"soon","revision":%d,"username":"root"}' % rev),
        (std, '{"exp":null,"revision":%d,"username":"root"}' % rev),
        (std, '{"iat":"x","revision":%d,"username":"root"}' % rev),
        (std, '{"nbf":{},"revision":%d,"username":"root"}' % rev),
        (std, '{"iat":1e300,"revision":%d,"username":"root"}' % rev),
        (std, '{"exp":1e300,"revision":%d,"username":"root"}' % rev),
        (std, '{"exp":%d.9,"revision":%d,"username":"root"}' % (now - 1, rev)),
        (std, '{"exp":%d,"revision":%d.7,"username":"root"}' % (now + 60, rev)),
        (std, '{"exp":%d,"iat":%d,"revision":%d,"username":"root"}' % (now + 60, now + 30, rev)),
        (std, '{"exp":%d,"nbf":%d,"revision":%d,"username":"root"}' % (now + 60, now + 30, rev)),
        (std, '{"exp":%d,"nbf":1e300,"revision":%d,"username":"root"}' % (now + 60, rev)),
        (std, '{"username":"nobody","exp":%d,"revision":%d,"username":"root"}' % (now + 60, rev)),
        ('{"alg":"HS256"}', '{"exp":%d,"revision":%d,"username":"root"}' % (now + 60, rev)),
        ('{"typ":"x","kid":"k","alg":"HS256"}', '{"revision":%d,"username":"root"}' % rev),
        ('{"alg":"HS256"} x', '{"revision":%d,"username":"root"}' % rev),
        ('{"alg":"HS256","alg":"none"}', '{"revision":%d,"username":"root"}' % rev),
        ('{"alg":"none","alg":"HS256"}', '{"revision":%d,"username":"root"}' % rev),
        (' {"alg":"HS256"}\n', ' {"revision":%d,"username":"root"}\n' % rev),
    ]
    for h, c in cases:
        si = b64e(h.encode()) + "." + b64e(c.encode())
        tok = si + "." + b64e(hmac.new(secret, si.encode(), hashlib.sha256).digest())
        r = e.range_with(tok)
        rc, out = tool("verify", opts, tok)
        check((r is None) == (rc == 0), "crafted %s %s: etcd %s, we %s" % (h, c, r, out))


def test_verify_only(tmp, keys, m):
    print("== %s verify-only (pub-key alone)" % m)
    priv, pub = method_keys(keys, m)
    vopts = "pub-key=%s,sign-method=%s" % (pub, m)
    sopts = "priv-key=%s,sign-method=%s" % (priv, m)
    rc, out = tool("load", vopts)
    check(rc == 0 and out == "ok %s 300000 0" % m, "jwt_tool load verify-only: " + out)
    rc, out = tool("sign", vopts, "root", "2")
    check(rc == 1 and out == "error -1", "we refuse to sign (EPERM): " + out)
    e = Etcd(tmp, "jwt," + vopts)
    try:
        if not e.wait_ready():
            check(False, "etcd started:\n" + e.logtext()[-2000:])
            return
        e.ctl("user", "add", "root:rootpw")
        e.ctl("auth", "enable")
        try:
            e.authenticate()
            check(False, "etcd Authenticate fails when verify-only")
        except grpc.RpcError as ex:
            check(True, "etcd Authenticate fails when verify-only: %s %r" % (ex.code().name, ex.details()))
        # auth revision after user add + auth enable
        for rev in range(1, 6):
            rc, mine = tool("sign", sopts, "root", str(rev))
            if e.range_with(mine) is None:
                break
        check(e.range_with(mine) is None, "verify-only etcd accepts our token (revision %d)" % rev)
    finally:
        e.stop()


def test_key_forms(tmp, keys):
    """key files etcd accepts or refuses at start: jwt_keys_load must agree"""
    print("== key forms: etcd starts <=> jwt_keys_load succeeds")
    d = tmp
    def ossl(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    ossl("rsa", "-in", d + "/rsa.pem", "-traditional", "-out", d + "/rsa_pkcs1.pem")
    ossl("req", "-x509", "-new", "-key", d + "/rsa.pem", "-subj", "/CN=jwt", "-days", "2",
         "-out", d + "/rsa_cert.pem")
    ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-pkeyopt",
         "rsa_keygen_pubexp:3", "-out", d + "/rsa_e3.pem")
    ossl("pkey", "-in", d + "/rsa_e3.pem", "-pubout", "-out", d + "/rsa_e3.pub")
    ossl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", d + "/rsa2.pem")
    ossl("pkey", "-in", d + "/rsa2.pem", "-pubout", "-out", d + "/rsa2.pub")
    ossl("pkey", "-in", d + "/ES256.pem", "-out", d + "/ec_pkcs8.pem")
    ossl("ecparam", "-name", "secp256k1", "-genkey", "-noout", "-out", d + "/k1.pem")
    with open(d + "/junk_rsa.pem", "w") as f, open(d + "/rsa.pem") as k:
        f.write("some text before the key\n" * 200 + k.read())
    cases = [
        "priv-key=%s/rsa_pkcs1.pem,sign-method=RS256" % d,
        "pub-key=%s/rsa_cert.pem,sign-method=RS256" % d,
        "priv-key=%s/junk_rsa.pem,sign-method=RS256" % d,
        "priv-key=%s/rsa.pem,pub-key=%s/rsa2.pub,sign-method=RS256" % (d, d),  # etcd: E equal
        "priv-key=%s/rsa.pem,pub-key=%s/rsa_e3.pub,sign-method=RS256" % (d, d),  # N, E differ
        "priv-key=%s/ec_pkcs8.pem,sign-method=ES256" % d,
        "priv-key=%s/ES384.pem,sign-method=ES256" % d,  # loads; signing fails
        "priv-key=%s/ES256.pem,pub-key=%s/ES384.pub,sign-method=ES256" % (d, d),
        "priv-key=%s/k1.pem,sign-method=ES256" % d,
        "priv-key=%s/rsa.pem,sign-method=RS256,unknown-opt=1" % d,
        "priv-key=%s/rsa.pem,sign-method=RS256,ttl=-1m" % d,
        "priv-key=%s/rsa.pem,sign-method=RS256,ttl=1h2m3.5s" % d,
        "priv-key=%s/rsa.pem,sign-method=RS256,ttl=1d" % d,
    ]
    for c in cases:
        rc, out = tool("load", c)
        e = Etcd(tmp, "jwt," + c)
        try:
            started = e.wait_ready()
        finally:
            e.stop()
        check(started == (rc == 0), "%s: etcd %s, we %s" % (c.replace(tmp, "$T"),
              "starts" if started else "refuses", out))
    # ES256 with a P-384 key: etcd starts but Authenticate fails
    c = "priv-key=%s/ES384.pem,sign-method=ES256" % d
    e = Etcd(tmp, "jwt," + c)
    try:
        if e.wait_ready():
            e.ctl("user", "add", "root:rootpw")
            e.ctl("auth", "enable")
            try:
                e.authenticate()
                ok, what = False, "succeeds"
            except grpc.RpcError as ex:
                ok, what = True, "%s %r" % (ex.code().name, ex.details())
            rc, out = tool("sign", c, "root", "4")
            check(ok and out == "error -22", "ES256 + P-384 key: etcd Authenticate %s, we sign %s" % (what, out))
    finally:
        e.stop()


def test_sec1_stale_point(tmp, keys):
    """a SEC1 EC key whose stored public point is another key's: Go (and so
    etcd) ignores the stored point and uses d*G; so must we"""
    print("== ES256 key file with a stale public point")
    d = tmp
    def der(path):
        return subprocess.run(["openssl", "ec", "-in", path, "-outform", "DER"],
                              check=True, capture_output=True).stdout
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                    "-out", d + "/other.pem"], check=True, capture_output=True)
    a, b = der(keys["ES256"][0]), der(d + "/other.pem")
    assert len(a) == len(b) == 121
    with open(d + "/stale.pem", "w") as f:
        f.write("-----BEGIN EC PRIVATE KEY-----\n%s\n-----END EC PRIVATE KEY-----\n"
                % base64.b64encode(a[:56] + b[56:]).decode())
    opts = "priv-key=%s/stale.pem,sign-method=ES256" % d
    e = Etcd(tmp, "jwt," + opts)
    try:
        if not e.wait_ready():
            check(False, "etcd started:\n" + e.logtext()[-2000:])
            return
        e.ctl("user", "add", "root:rootpw")
        e.ctl("auth", "enable")
        tok = e.authenticate()
        rev = json.loads(b64d(tok.split(".")[1]))["revision"]
        rc, out = tool("verify", opts, tok)
        check(rc == 0, "we verify etcd's token with the stale-point key: " + out)
        rc, out = tool("verify", "pub-key=%s,sign-method=ES256" % keys["ES256"][1], tok)
        check(rc == 0, "etcd signed with d (its d*G verifies): " + out)
        rc, mine = tool("sign", opts, "root", str(rev))
        check(e.range_with(mine) is None, "etcd accepts our token: %s" % (e.range_with(mine),))
    finally:
        e.stop()


def test_bad_options(tmp, keys):
    print("== option errors: etcd's startup error vs jwt_keys_load's")
    rsa, rsapub = keys["RS"]
    cases = [
        "sign-method=RS256",
        "priv-key=/nonexistent,sign-method=RS256",
        "priv-key=%s" % rsa,
        "priv-key=%s,sign-method=XX256" % rsa,
        "priv-key=%s,sign-method=none" % rsa,
        "priv-key=%s,sign-method=RS256,ttl=5x" % rsa,
        "priv-key=%s,sign-method=RS256,ttl=5m,ttl=6m" % rsa,
        "priv-key=%s,sign-method=RS256," % rsa,
        "priv-key=%s,sign-method=HS256" % os.devnull,
        "priv-key=%s,sign-method=ES256" % rsa,
        "pub-key=%s,sign-method=RS256" % keys["ES256"][1],
    ]
    for c in cases:
        rc, out = tool("load", c)
        e = Etcd(tmp, "jwt," + c)
        try:
            code = e.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        log = e.logtext()
        e.stop()
        crit = [ln.split(" C | etcdmain: ", 1)[1] for ln in log.splitlines() if " C | etcdmain: " in ln]
        etcd_err = crit[0] if crit else None
        ours = out.split(": ", 1)[1] if rc == 1 and ": " in out else None
        same = etcd_err == ours or (etcd_err and ours and etcd_err.startswith(("x509:", "asn1:"))
                                    and ours.startswith(("x509:", "key is not")))
        check(code not in (None, 0) and rc == 1 and same,
              "%s -> etcd exit %s %r, ours %r" % (c.replace(tmp, "$T"), code, etcd_err, ours))


def main():
    global TOOL
    tmp = tempfile.mkdtemp(prefix="jwt_vs_etcd.")
    try:
        if len(sys.argv) > 1:
            TOOL = os.path.abspath(sys.argv[1])
        else:
            TOOL = os.path.join(tmp, "jwt_tool")
            subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                            "-I" + ROOT + "/src", ROOT + "/src/auth/jwt.c",
                            ROOT + "/tests/auth/jwt_tool.c", "-o", TOOL,
                            "-lssl", "-lcrypto", "-ljansson"], check=True)
        keys = gen_keys(tmp)
        print(run([ETCD, "--version"]).stdout.splitlines()[0])
        for m in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                  "ES256", "ES384", "ES512", "HS256", "HS384", "HS512"):
            test_method(tmp, keys, m)
        test_verify_only(tmp, keys, "RS256")
        test_verify_only(tmp, keys, "ES256")
        test_key_forms(tmp, keys)
        test_sec1_stale_point(tmp, keys)
        test_bad_options(tmp, keys)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d checks, %d failed" % (checks, len(failures)))
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
