#!/usr/bin/python3
"""gateway-bench: etcd's JSON gateway, quorum vs etcd 3.4, in one run.

What a shell script or a language client without gRPC does: POST JSON over
HTTP/1.1 keep-alive connections to /v3/kv/put and /v3/kv/range. Each server
is started fresh (its own temp dir, free loopback ports), one after the
other, never at the same time; h2load --h1 posts the IDENTICAL JSON body to
both. Put runs a fixed number of requests (-n, the same for both), Range a
fixed time (-D).

Every run is checked, and marked INVALID when a check fails:
  - h2load's succeeded count equals its done count (an HTTP error status
    counts as failed: the gateway answers errors with 4xx/5xx);
  - Put: the store's revision grew by exactly the number of requests;
  - Range: the answer to one identical request (urllib) has the key.

Prints req/s per case and server, and the ratio quorum/etcd, then the target
(>= 3x) with met / not met. Run with /usr/bin/python3.
"""
import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchutil import parse_h2load  # noqa: E402
import harness  # noqa: E402

TARGET_RATIO = 3.0


def b64(s):
    return base64.b64encode(s).decode()


def post(ep, path, body):
    req = urllib.request.Request("http://%s%s" % (ep, path), data=json.dumps(body).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def revision(ep):
    return int(post(ep, "/v3/kv/range", {"key": b64(b"\0")})["header"]["revision"])


def run_h2load(ep, path, body, workdir, clients, n=None, secs=None):
    data = os.path.join(workdir, "body.json")
    with open(data, "w") as f:
        f.write(json.dumps(body))
    cmd = ["h2load", "--h1", "-c", str(clients), "-m", "1", "-t", "1", "-d", data,
           "-H", "content-type: application/json"]
    cmd += ["-n", str(n)] if n else ["-D", str(secs)]
    cmd.append("http://%s%s" % (ep, path))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError("h2load exited %d:\n%s" % (r.returncode, (r.stdout + r.stderr)[-2000:]))
    return parse_h2load(r.stdout)


def bench(kind, args):
    out = {}
    with harness.Server(kind) as s:
        ep = s.endpoint
        key = b"bench/one"
        post(ep, "/v3/kv/put", {"key": b64(key), "value": b64(b"v" * 100)})
        with tempfile.TemporaryDirectory() as wd:
            # Put: fixed count
            r0 = revision(ep)
            put = run_h2load(ep, "/v3/kv/put", {"key": b64(b"bench/put"),
                                                "value": b64(b"v" * 100)},
                             wd, args.clients, n=args.puts)
            grew = revision(ep) - r0  # a Range writes nothing
            put["valid"] = put["succeeded"] == put["done"] == args.puts and grew == args.puts
            out["put"] = put
            # Range: fixed time
            rng = run_h2load(ep, "/v3/kv/range", {"key": b64(key)}, wd, args.clients,
                             secs=args.seconds)
            got = post(ep, "/v3/kv/range", {"key": b64(key)})
            rng["valid"] = (rng["succeeded"] == rng["done"] and rng["done"] > 0 and
                            got.get("kvs", [{}])[0].get("key") == b64(key))
            out["range"] = rng
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=10, help="keep-alive connections")
    ap.add_argument("--puts", type=int, default=20000)
    ap.add_argument("--seconds", type=int, default=10, help="Range duration")
    args = ap.parse_args()
    res = {k: bench(k, args) for k in ("etcd", "quorum")}
    print("JSON gateway over HTTP/1.1, %d keep-alive connections (h2load --h1)" % args.clients)
    print("%-8s %14s %14s %8s" % ("case", "etcd req/s", "quorum req/s", "ratio"))
    ok = True
    for case in ("put", "range"):
        e, q = res["etcd"][case], res["quorum"][case]
        valid = e["valid"] and q["valid"]
        ratio = q["rps"] / e["rps"] if e["rps"] else 0
        met = valid and ratio >= TARGET_RATIO
        ok = ok and met
        print("%-8s %14.0f %14.0f %7.2fx  %s" % (case, e["rps"], q["rps"], ratio,
              ("target >= %.0fx met" % TARGET_RATIO) if met else
              ("INVALID run" if not valid else "target >= %.0fx NOT MET" % TARGET_RATIO)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
