#!/usr/bin/python3
"""etcd 3.4's configuration surface (docs/configuration.md), against quorum
(TARGET=quorum, the default) or etcd 3.4.23 (TARGET=etcd), which every
expectation here is proven against:

  a. every flag of `etcd --help` (and the ones etcd 3.4 takes without listing
     them) is accepted with a sample value: parsed (`BIN --flag=value
     --version` exits 0), and all that can share one member at once start one
     member that serves;
  b. Go's flag syntax and its errors: -flag and --flag, = or the next
     argument, booleans alone, "--" and non-flag arguments, an unknown flag,
     a bad value: etcd's texts, streams and exit codes (2 for a flag error,
     1 for "error verifying flags"); --help's layout;
  c. ETCD_* variables: the same member from flags, from the environment and
     from a YAML --config-file (name, member list, client URLs, as etcdctl
     shows them); the variable a flag shadows stops the start, an unknown
     ETCD_ one is warned about; a config file wins over flags;
  d. config file errors: a missing file, bad YAML, a value of the wrong type;
  e. (quorum only) what quorum refuses rather than ignore: --discovery,
     --proxy=on, --cors and --host-whitelist lists, *-cert-allowed-hostname;
  f. the gRPC transport flags over a raw HTTP/2 connection, as grpc-go does
     them: the stream limit in SETTINGS (2^32-1 by default), GOAWAY
     ENHANCE_YOUR_CALM "too_many_pings" for a client pinging too often, a PING
     to a silent connection and its close.

    TARGET=etcd /usr/bin/python3 test_flags.py [case ...]

Every process on 127.0.0.1 on free ports, signalled by its PID.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")
NAME = "quorum" if TARGET == "quorum" else "etcd"
TMP = tempfile.mkdtemp(prefix="flags-%s-" % TARGET)

# Every flag etcd 3.4.23 prints in --help, and those it takes without
# listing them, with a value both accept. batch: the flag can join the one
# member case a starts with all of them (False: it needs files, DNS, a
# discovery service, or quorum refuses that value: see case e).
TABLE = [
    # Member
    ("name", "sample", False), ("data-dir", "DIR", False), ("wal-dir", "WALDIR", True),
    ("snapshot-count", "5000", True), ("heartbeat-interval", "50", True),
    ("election-timeout", "500", True), ("initial-election-tick-advance", "false", True),
    ("listen-peer-urls", "http://127.0.0.1:2380", False),
    ("listen-client-urls", "http://127.0.0.1:2379", False),
    ("max-snapshots", "3", True), ("max-wals", "3", True),
    ("quota-backend-bytes", "4294967296", True), ("backend-batch-interval", "50ms", True),
    ("backend-batch-limit", "5000", True), ("max-txn-ops", "256", True),
    ("max-request-bytes", "2097152", True), ("max-concurrent-streams", "1000", True),
    ("grpc-keepalive-min-time", "10s", True), ("grpc-keepalive-interval", "1h", True),
    ("grpc-keepalive-timeout", "30s", True),
    # Clustering
    ("initial-advertise-peer-urls", "http://127.0.0.1:2380", False),
    ("initial-cluster", "sample=http://127.0.0.1:2380", False),
    ("initial-cluster-state", "new", True), ("initial-cluster-token", "tok-flags", True),
    ("advertise-client-urls", "http://127.0.0.1:2379", False),
    ("discovery", "https://discovery.etcd.io/3e86b59982e49066c5d813af1c2e2579", False),
    ("discovery-fallback", "exit", True), ("discovery-proxy", "http://127.0.0.1:3128", True),
    ("discovery-srv", "example.com", False), ("discovery-srv-name", "dev", False),
    ("strict-reconfig-check", "false", True), ("pre-vote", "true", True),
    ("auto-compaction-retention", "1", True), ("auto-compaction-mode", "periodic", True),
    ("enable-v2", "true", True),
    # Security
    ("cert-file", "/nonexistent/server.crt", False), ("key-file", "/nonexistent/server.key", False),
    ("client-cert-auth", "true", False), ("client-crl-file", "/nonexistent/crl.pem", False),
    ("client-cert-allowed-hostname", "client.example", False),
    ("trusted-ca-file", "/nonexistent/ca.crt", False), ("auto-tls", "true", False),
    ("peer-cert-file", "/nonexistent/peer.crt", False),
    ("peer-key-file", "/nonexistent/peer.key", False), ("peer-client-cert-auth", "true", False),
    ("peer-trusted-ca-file", "/nonexistent/ca.crt", False),
    ("peer-cert-allowed-cn", "member", True),
    ("peer-cert-allowed-hostname", "member.example", False), ("peer-auto-tls", "true", False),
    ("peer-crl-file", "/nonexistent/crl.pem", False),
    ("cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", True),
    ("cors", "*", True), ("host-whitelist", "*", True),
    # Auth
    ("auth-token", "simple", True), ("bcrypt-cost", "4", True), ("auth-token-ttl", "600", True),
    # Profiling and Monitoring
    ("enable-pprof", "true", True), ("metrics", "extensive", True),
    ("listen-metrics-urls", "METRICS", True),
    # Logging
    ("logger", "zap", True), ("log-outputs", "stderr", True), ("log-level", "info", True),
    # v2 Proxy
    ("proxy", "off", True), ("proxy-failure-wait", "4000", True),
    ("proxy-refresh-interval", "20000", True), ("proxy-dial-timeout", "2000", True),
    ("proxy-write-timeout", "4000", True), ("proxy-read-timeout", "100", True),
    # Experimental
    ("experimental-initial-corrupt-check", "true", True),
    ("experimental-corrupt-check-time", "1m", True),
    ("experimental-enable-v2v3", "/v2/", True),
    ("experimental-backend-bbolt-freelist-type", "map", True),
    ("experimental-enable-lease-checkpoint", "true", True),
    ("experimental-compaction-batch-limit", "500", True),
    ("experimental-peer-skip-client-san-verification", "true", True),
    ("experimental-watch-progress-notify-interval", "5m", True),
    ("experimental-warning-apply-duration", "200ms", True),
    # Unsafe
    ("force-new-cluster", "true", True),
    # To be deprecated
    ("debug", "true", False), ("log-package-levels", "etcdmain=INFO", True),
    # not in etcd 3.4's --help, taken all the same
    ("enable-grpc-gateway", "false", True), ("unsafe-no-fsync", "true", True),
    ("log-output", "stderr", False), ("experimental-enable-lease-checkpoint-persist", "true", True),
    ("config-file", "/nonexistent.yaml", False),
]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def binary():
    return harness.quorum_binary() if TARGET == "quorum" else harness.etcd_binary()


def run(args, env=None, timeout=20):
    """Runs the binary to its end: (exit code, stdout, stderr)."""
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("ETCD_"):
            del e[k]
    e.update(env or {})
    r = subprocess.run([binary()] + args, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env=e)
    return r.returncode, r.stdout, r.stderr


def log_text(line):
    """A log line's text: what follows "X | module: " (capnslog)."""
    m = re.match(r"^\S+ \S+ [DIWEC] \| [^:]*: (.*)$", line)
    return m.group(1) if m else line


class Member:
    """A member started from flags, the environment or a file; stopped by PID."""

    def __init__(self, name="m1"):
        self.name = name
        self.cport, self.pport = harness.free_port(), harness.free_port()
        self.dir = tempfile.mkdtemp(dir=TMP)
        self.data = os.path.join(self.dir, "data")
        self.proc = None

    @property
    def curl(self):
        return "http://127.0.0.1:%d" % self.cport

    @property
    def purl(self):
        return "http://127.0.0.1:%d" % self.pport

    def settings(self):
        """The member as (flag, value) pairs."""
        return [("name", self.name), ("data-dir", self.data),
                ("listen-client-urls", self.curl), ("advertise-client-urls", self.curl),
                ("listen-peer-urls", self.purl), ("initial-advertise-peer-urls", self.purl),
                ("initial-cluster", "%s=%s" % (self.name, self.purl)),
                ("initial-cluster-token", "tok-" + self.name)]

    def flags(self):
        return [a for k, v in self.settings() for a in ("--" + k, v)]

    def start(self, args, env=None):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("ETCD_"):
                del e[k]
        e.update(env or {})
        self.log_path = os.path.join(self.dir, "log")
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen([binary()] + args, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=e)
        harness.wait_for(lambda: self.proc.poll() is not None or
                         self.etcdctl("endpoint", "health").returncode == 0,
                         timeout=30, what="%s ready" % self.name)
        check(self.proc.poll() is None, "%s exited %s:\n%s" % (self.name, self.proc.returncode,
                                                               self.log()[-3000:]))
        return self

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def etcdctl(self, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run(["etcdctl", "--endpoints", self.curl, "--dial-timeout=2s",
                               "--command-timeout=5s"] + list(args),
                              capture_output=True, text=True, env=env, timeout=60)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            self.log_file.close()
        self.proc = None

    def seen(self):
        """The member as etcdctl sees it: (name, peer URLs, client URLs)."""
        r = self.etcdctl("member", "list", "-w", "json")
        check(r.returncode == 0, "member list: %s" % r.stderr)
        ms = json.loads(r.stdout)["members"]
        check(len(ms) == 1, "one member: %s" % ms)
        return ms[0].get("name"), ms[0].get("peerURLs"), ms[0].get("clientURLs")


def case_a_every_flag_accepted():
    # parsed: the flags are read before --version is answered
    bad = []
    for flag, value, _ in TABLE:
        value = {"WALDIR": "/tmp/wal", "METRICS": "http://127.0.0.1:2381",
                 "DIR": "/tmp/data"}.get(value, value)
        code, out, err = run(["--%s=%s" % (flag, value), "--version"])
        if code != 0 or "Version" not in out:
            bad.append("--%s=%s: exit %d %s" % (flag, value, code, err.strip()[:200]))
    check(not bad, "refused:\n  " + "\n  ".join(bad))
    # the ones etcd 3.4 still takes from etcd 0.4, and warns about
    code, out, err = run(["--peer-heartbeat-interval", "--v", "--version"])
    check(code == 0, "ignored flags: %d %s" % (code, err))
    check(any(log_text(line) == 'flag "-peer-heartbeat-interval" is no longer supported - '
              'ignoring.' for line in err.splitlines()), err)
    # one member with every flag that can go with the others: it serves
    m = Member("allflags")
    args = list(m.flags())
    # a client URL listed twice is served once (etcd keys its listeners by address)
    args[args.index("--listen-client-urls") + 1] = "%s,%s" % (m.curl, m.curl)
    metrics = "http://127.0.0.1:%d" % harness.free_port()
    for flag, value, batch in TABLE:
        if not batch:
            continue
        value = {"WALDIR": os.path.join(m.dir, "wal"), "METRICS": metrics}.get(value, value)
        args.append("--%s=%s" % (flag, value))
    try:
        m.start(args)
        check(m.etcdctl("put", "k", "v").returncode == 0, "put")
        r = m.etcdctl("get", "k", "--print-value-only")
        check(r.stdout.strip() == "v", "get: %r" % r.stdout)
        check(m.seen()[0] == "allflags", "name")
    finally:
        m.stop()
    print("    %d flags parsed, %d at once in one member" % (len(TABLE),
                                                            sum(b for _, _, b in TABLE)))


def usage_line():
    return ("Usage:\n\n  {n} [flags]\n").format(n=NAME)


def case_b_go_flag_syntax():
    # an unknown flag: Go's line and the usage on stderr, exit 2
    code, out, err = run(["--no-such-flag"])
    check(code == 2 and out == "", "unknown flag: exit %d, stdout %r" % (code, out))
    check(err.startswith("flag provided but not defined: -no-such-flag\n" + usage_line()), err)
    check("--config-file" in err and "Member:" not in err, "the usage line only: %s" % err)
    # bad values
    for args, line in [
        (["--heartbeat-interval", "abc"], 'invalid value "abc" for flag -heartbeat-interval: '
                                          'parse error'),
        (["--max-concurrent-streams=-1"], 'invalid value "-1" for flag -max-concurrent-streams: '
                                          'strconv.ParseUint: parsing "-1": invalid syntax'),
        (["--grpc-keepalive-min-time=5"], 'invalid value "5" for flag -grpc-keepalive-min-time: '
                                          'parse error'),
        (["--auto-tls=maybe"], 'invalid boolean value "maybe" for -auto-tls: parse error'),
        (["--initial-cluster-state=EXISTING"], 'invalid value "EXISTING" for flag '
                                               '-initial-cluster-state: invalid value'),
        (["--proxy=bad"], 'invalid value "bad" for flag -proxy: invalid value'),
        (["--name"], "flag needs an argument: -name"),
        (["---name", "x"], "bad flag syntax: ---name"),
    ]:
        code, out, err = run(args)
        check(code == 2 and err.split("\n")[0] == line,
              "%s: exit %d, %r (want %r)" % (args, code, err[:200], line))
    # not flags: "error verifying flags", exit 1; a bool takes no argument;
    # "--" ends the flags
    for args, word in [(["extra"], "extra"), (["--force-new-cluster", "false"], "false"),
                       (["--name", "a", "--", "--name", "b"], "--name"), (["-"], "-")]:
        code, out, err = run(args)
        want = "error verifying flags, '%s' is not a valid flag. See '%s --help'." % (word, NAME)
        check(code == 1 and any(log_text(line) == want for line in err.splitlines()),
              "%s: exit %d %r" % (args, code, err[-300:]))
    # values read after the flags: etcd's checks of them
    code, out, err = run(["--auto-compaction-mode=foo"])
    want = "error verifying flags, unknown auto-compaction-mode \"foo\". See '%s --help'." % NAME
    check(code == 1 and any(log_text(line) == want for line in err.splitlines()),
          "auto-compaction-mode: %d %r" % (code, err[-300:]))
    code, out, err = run(["--auto-compaction-retention=x"])
    want = 'error parsing CompactionRetention: time: invalid duration "x"'
    check(code == 1 and any(" C | " in line and log_text(line) == want
                            for line in err.splitlines()), "retention: %d %r" % (code, err[-300:]))
    # one dash or two, = or not, any of Go's bool spellings: all parse
    code, out, err = run(["-name", "a", "--snapshot-count=7", "-auto-tls=T", "--enable-v2",
                          "-heartbeat-interval=0x10", "--version"])
    check(code == 0, "Go spellings: %d %s" % (code, err))
    # --help: the usage line on stderr, the flags on stdout, by section
    code, out, err = run(["--help"])
    check(code == 0 and err.startswith(usage_line()), "--help: %d %r" % (code, err[:100]))
    check(out.startswith("\nMember:\n  --name 'default'\n    Human-readable name for this "
                         "member.\n"), out[:200])
    sections = re.findall(r"^(\S[^\n]*):$", out, re.M)
    want = ["Member", "Clustering", "Security", "Auth", "Profiling and Monitoring", "Logging",
            "v2 Proxy (to be deprecated in v4)", "Experimental feature", "Unsafe feature"]
    check(sections[:len(want)] == want, "sections: %s" % sections)
    listed = set(re.findall(r"^  --([a-z0-9.-]+) ", out, re.M))
    missing = [f for f, _, _ in TABLE if f not in listed and f not in (
        "enable-grpc-gateway", "unsafe-no-fsync", "log-output",
        "experimental-enable-lease-checkpoint-persist", "config-file")]
    check(not missing, "not in --help: %s" % missing)
    code2, _, _ = run(["-h"])
    check(code2 == 0, "-h")
    if TARGET == "quorum":
        # etcd's --help line for line, but for quorum's notes under a flag,
        # --unsafe-no-fsync listed, and its own section
        r = subprocess.run([harness.etcd_binary(), "--help"], capture_output=True, text=True)
        etcd_help = r.stdout
        ours = out.split("\nquorum's own:\n")[0] + "\n"
        ours = re.sub(r"^    quorum: .*\n", "", ours, flags=re.M)
        ours = ours.replace("  --unsafe-no-fsync 'false'\n    Disables fsync, unsafe, will cause "
                            "data loss.\n", "")
        check(ours == etcd_help, "--help differs from etcd's")


def same_member(m, how, args, env=None):
    try:
        m.start(args, env)
        seen = m.seen()
        check(seen == (m.name, [m.purl], [m.curl]), "%s: member list %s" % (how, seen))
        r = m.etcdctl("endpoint", "status", "-w", "json")
        check(r.returncode == 0, "status: %s" % r.stderr)
        st = json.loads(r.stdout)[0]
        check(st["Endpoint"] == m.curl, "status %s" % st)
        return m.log()
    finally:
        m.stop()


def case_c_env_and_config_file():
    m = Member("same")
    same_member(m, "flags", m.flags())
    # the same member from ETCD_* variables, with one unknown variable
    m = Member("same")
    env = {"ETCD_" + k.upper().replace("-", "_"): v for k, v in m.settings()}
    env["ETCD_NO_SUCH_THING"] = "1"
    log = same_member(m, "environment", [], env)
    lines = [log_text(line) for line in log.splitlines()]
    check("recognized and used environment variable ETCD_NAME=same" in lines, log[:2000])
    check("unrecognized environment variable ETCD_NO_SUCH_THING=1" in lines, log[:2000])
    # and from a YAML file; flags and variables given too are ignored
    m = Member("same")
    path = os.path.join(m.dir, "conf.yml")
    with open(path, "w") as f:
        for k, v in m.settings():
            f.write("%s: '%s'\n" % (k, v))
        f.write("log-outputs: [stderr]\nclient-transport-security:\n  client-cert-auth: false\n")
    log = same_member(m, "config file", ["--config-file", path, "--name", "other"],
                      {"ETCD_NAME": "other", "ETCD_SNAPSHOT_COUNT": "x"})
    check(any(log_text(line).startswith('Loading server configuration from "%s"' % path)
              for line in log.splitlines()), log[:2000])
    # ETCD_CONFIG_FILE names the file just the same
    m2 = Member("same")
    m2.cport, m2.pport, m2.data = m.cport, m.pport, m.data
    same_member(m2, "ETCD_CONFIG_FILE", [], {"ETCD_CONFIG_FILE": path})
    # a variable the command line shadows: etcd 3.4 stops (C, exit 1)
    code, out, err = run(["--name", "a"], {"ETCD_NAME": "b"})
    want = ('conflicting environment variable "ETCD_NAME" is shadowed by corresponding '
            'command-line flag (either unset environment variable or disable flag)')
    check(code == 1 and any(" C | " in line and log_text(line) == want
                            for line in err.splitlines()), "shadowed: %d %r" % (code, err))
    # a bad value in a variable
    code, out, err = run([], {"ETCD_HEARTBEAT_INTERVAL": "abc"})
    want = ("error verifying flags, invalid value \"abc\" for ETCD_HEARTBEAT_INTERVAL: parse "
            "error. See '%s --help'." % NAME)
    check(code == 1 and any(log_text(line) == want for line in err.splitlines()),
          "bad variable: %d %r" % (code, err))


def case_d_config_file_errors():
    d = tempfile.mkdtemp(dir=TMP)

    def file(text):
        p = os.path.join(d, "c%d.yml" % len(os.listdir(d)))
        with open(p, "w") as f:
            f.write(text)
        return p

    for path, why in [
        ("/nonexistent/etcd.conf.yml", "open /nonexistent/etcd.conf.yml: no such file or "
                                       "directory"),
        (file("name: [\n"), "error converting YAML to JSON: yaml: line 1: did not find expected "
                            "node content"),
        (file("name: x\nheartbeat-interval: abc\n"),
         "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go "
         "struct field configYAML.heartbeat-interval of type uint"),
        (file("grpc-keepalive-min-time: 5s\n"),
         "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go "
         "struct field configYAML.grpc-keepalive-min-time of type time.Duration"),
    ]:
        code, out, err = run(["--config-file", path])
        want = "error verifying flags, %s. See '%s --help'." % (why, NAME)
        check(code == 1 and any(log_text(line) == want for line in err.splitlines()),
              "%s: exit %d, %r\nwant %r" % (path, code, err[-400:], want))


def case_e_refused_by_quorum():
    if TARGET != "quorum":
        print("    (quorum only: etcd does these)")
        return
    m = Member("refuse")
    for extra, text in [
        (["--discovery", "https://discovery.etcd.io/x"], "--discovery is not supported"),
        (["--proxy", "on"], "--proxy is not supported"),
        (["--cors", "http://a.example:80"], "--cors with a list of origins is not supported"),
        (["--host-whitelist", "a.example"], "--host-whitelist with a list of hosts"),
        (["--client-cert-allowed-hostname", "x"], "--client-cert-allowed-hostname is not "
                                                  "supported"),
        (["--peer-cert-allowed-hostname", "x"], "--peer-cert-allowed-hostname is not supported"),
    ]:
        # (without --initial-cluster: etcd refuses it beside --discovery)
        code, out, err = run(m.flags()[:-4] + extra)
        check(code == 1 and text in err, "%s: exit %d %r" % (extra, code, err[-300:]))
        check(not os.path.exists(m.data), "%s: the data dir was made" % extra)
    # a flag without effect says so when it asks for something
    code, out, err = run(["--enable-pprof", "--heartbeat-interval=0"])
    check(any(log_text(line).startswith("--enable-pprof has no effect in quorum")
              for line in err.splitlines()), err)


def h2_connect(port):
    """A raw HTTP/2 connection: the client preface and an empty SETTINGS."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b""))
    return sock


def h2_frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(
        ">I", sid) + payload


def h2_frames(sock, until, limit=15.0):
    """Reads frames (type, flags, payload) until until(frames) or EOF (then
    None is appended) or |limit| seconds."""
    frames, buf = [], b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            frames.append((buf[3], buf[4], buf[9:9 + n]))
            buf = buf[9 + n:]
        if until(frames):
            return frames
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            b = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            b = b""
        if not b:
            frames.append(None)
            return frames
        buf += b
    return frames


def case_f_grpc_transport():
    m = Member("grpc")
    try:
        m.start(m.flags() + ["--max-concurrent-streams=3", "--grpc-keepalive-interval=1s",
                             "--grpc-keepalive-timeout=1s"])
        # the stream limit, in the server's first SETTINGS
        sock = h2_connect(m.cport)
        fr = h2_frames(sock, lambda f: any(x and x[0] == 4 and not x[1] & 1 for x in f))
        settings = next(x[2] for x in fr if x and x[0] == 4 and not x[1] & 1)
        values = {int.from_bytes(settings[i:i + 2], "big"):
                  int.from_bytes(settings[i + 2:i + 6], "big") for i in range(0, len(settings), 6)}
        check(values.get(3) == 3, "SETTINGS_MAX_CONCURRENT_STREAMS: %s" % values)
        # a client that pings again and again with no call open: GOAWAY
        # ENHANCE_YOUR_CALM "too_many_pings", then the connection closes
        sock.sendall(b"".join(h2_frame(6, 0, 0, b"%08d" % i) for i in range(4)))
        fr = h2_frames(sock, lambda f: f and f[-1] is None)
        goaway = [x for x in fr if x and x[0] == 7]
        check(goaway and int.from_bytes(goaway[0][2][4:8], "big") == 11 and
              goaway[0][2][8:] == b"too_many_pings", "no GOAWAY too_many_pings: %s" % fr)
        check(fr[-1] is None, "still open after GOAWAY")
        sock.close()
        # a client that says nothing: a PING after the interval, closed
        # after the timeout
        sock = h2_connect(m.cport)
        fr = h2_frames(sock, lambda f: f and f[-1] is None)
        check(fr[-1] is None, "a silent connection stays open")
        check(any(x and x[0] == 6 and not x[1] & 1 for x in fr), "closed without a PING: %s" % fr)
        sock.close()
    finally:
        m.stop()
    # unlimited (etcd's default): advertised as math.MaxUint32
    m = Member("grpc2")
    try:
        m.start(m.flags())
        sock = h2_connect(m.cport)
        fr = h2_frames(sock, lambda f: any(x and x[0] == 4 and not x[1] & 1 for x in f))
        settings = next(x[2] for x in fr if x and x[0] == 4 and not x[1] & 1)
        values = {int.from_bytes(settings[i:i + 2], "big"):
                  int.from_bytes(settings[i + 2:i + 6], "big") for i in range(0, len(settings), 6)}
        check(values.get(3) == 2**32 - 1, "SETTINGS_MAX_CONCURRENT_STREAMS: %s" % values)
        sock.close()
    finally:
        m.stop()


CASES = [
    ("a_every_flag_accepted", case_a_every_flag_accepted),
    ("b_go_flag_syntax", case_b_go_flag_syntax),
    ("c_env_and_config_file", case_c_env_and_config_file),
    ("d_config_file_errors", case_d_config_file_errors),
    ("e_refused_by_quorum", case_e_refused_by_quorum),
    ("f_grpc_transport", case_f_grpc_transport),
]


def main(argv):
    want = argv[1:]
    cases = [(n, f) for n, f in CASES if not want or any(n.startswith(w) for w in want)]
    print("test_flags: target %s" % TARGET)
    t00 = time.monotonic()
    failed = harness.run_cases(cases)
    print("%d passed, %d failed (%.0fs)" % (len(cases) - len(failed), len(failed),
                                            time.monotonic() - t00))
    if failed:
        print("failed: %s (logs in %s)" % (" ".join(failed), TMP))
    else:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
