#!/usr/bin/python3
"""tests/grpc/test_h2load.py: h2load smoke test of grpc-test-server
(src/grpc): thousands of unary calls over 4 connections with 10 streams
each must all succeed. No timing assertion; the throughput is printed.

Usage: test_h2load.py PATH/TO/grpc-test-server
"""
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    h2load = shutil.which("h2load")
    if not h2load:
        print("h2load not installed")
        return 77  # meson: skipped
    srv = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    port = int(srv.stdout.readline())
    ok = True
    try:
        with tempfile.NamedTemporaryFile() as f:
            msg = b"a framed gRPC message for h2load"
            f.write(b"\x00" + len(msg).to_bytes(4, "big") + msg)
            f.flush()
            for path, n in (("/test.Echo/Unary", 4000), ("/test.Echo/Later", 2000)):
                out = subprocess.run(
                    [h2load, "-n", str(n), "-c", "4", "-m", "10", "-d", f.name,
                     "-H", "content-type: application/grpc", "-H", "te: trailers",
                     "http://127.0.0.1:%d%s" % (port, path)],
                    capture_output=True, timeout=120).stdout.decode()
                print(out)
                m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                              r"(\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", out)
                s = re.search(r"status codes: (\d+) 2xx", out)
                if not m or int(m.group(4)) != n or int(m.group(5)) or int(m.group(6)) \
                        or int(m.group(7)) or not s or int(s.group(1)) != n:
                    print("FAIL: not all %d requests to %s succeeded" % (n, path))
                    ok = False
    finally:
        srv.stdin.close()
        rc = srv.wait(timeout=20)
        if rc != 0:
            print("FAIL: server exit status %d" % rc)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
