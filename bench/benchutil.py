"""Shared helpers of bench/watch/watch-bench.py and bench/lease/lease-bench.py.

h2load with a fixed request count (-n), its summary parsed; the location of
grpc-stream-client (built next to the quorum binary); /proc readers.
"""
import os
import re
import struct
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def framed(msg):
    """The gRPC length-prefixed message: 0 (uncompressed), u32 BE length, body."""
    body = msg.SerializeToString()
    return b"\0" + struct.pack(">I", len(body)) + body


def client_binary(quorum_bin):
    """grpc-stream-client: $GRPC_STREAM_CLIENT, else next to the quorum binary's
    build dir (BUILD/src/server/quorum -> BUILD/bench/watch/grpc-stream-client)."""
    b = os.environ.get("GRPC_STREAM_CLIENT")
    if not b:
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(quorum_bin))))
        b = os.path.join(build, "bench", "watch", "grpc-stream-client")
    if not os.path.exists(b):
        raise RuntimeError("grpc-stream-client not found at %s (ninja -C BUILD "
                           "bench/watch/grpc-stream-client, or set GRPC_STREAM_CLIENT)" % b)
    return b


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (from /proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, field):
    """A KiB field of /proc/PID/status (VmHWM, RssAnon, ...)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def h2load(endpoint, path, body, n, clients, streams, workdir, threads=1, timeout=300):
    """Posts the framed body n times (h2load -n); returns the parsed summary dict."""
    data = os.path.join(workdir, "req-%d.bin" % os.getpid())
    with open(data, "wb") as f:
        f.write(body)
    cmd = ["h2load", "-n", str(n), "-t", str(threads), "-c", str(clients), "-m", str(streams),
           "-d", data, "-H", "content-type: application/grpc", "-H", "te: trailers",
           "http://%s%s" % (endpoint, path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError("h2load exited %d:\n%s" % (r.returncode, (r.stdout + r.stderr)[-2000:]))
    return parse_h2load(r.stdout)


def parse_h2load(text):
    s = {}
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", text)
    if not m:
        raise RuntimeError("cannot parse h2load output:\n" + text[-2000:])
    s["secs"] = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    s["rps"] = float(m.group(3))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if not m:
        raise RuntimeError("cannot parse h2load requests line:\n" + text[-2000:])
    for k, v in zip(("total", "started", "done", "succeeded", "failed", "errored", "timeout"),
                    m.groups()):
        s[k] = int(v)
    m = re.search(r"traffic: .*?, .*? headers .*?, [\d.]+\w*B \((\d+)\) data", text)
    if not m:
        raise RuntimeError("cannot parse h2load traffic line:\n" + text[-2000:])
    s["data_bytes"] = int(m.group(1))
    return s


def wait_line(proc, prefix, timeout):
    """Reads proc's stdout lines until one starts with prefix; returns it (None at EOF)."""
    deadline = time.time() + timeout
    import select
    buf = b""
    fd = proc.stdout.fileno()
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(prefix.encode()):
                return line.decode(), buf
    raise RuntimeError("no %r line from %s within %.0fs" % (prefix, proc.args[0], timeout))
