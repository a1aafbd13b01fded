"""Every command block of README.md and docs/*.md runs as written.

The convention (docs/README.md states it for writers):

- A fenced block tagged ``sh`` or ``bash`` is a script: it runs with bash
  (``set -e -o pipefail``) and must exit 0. ``console`` is a terminal
  session: each ``$ `` line (with the lines after it that start with the
  shell's ``> `` prompt or follow a ``\\``) is a command,
  the lines up to the next ``$ `` are its output, compared after
  normalising (below); a command whose output shows a line starting with
  ``Error:`` must fail, every other must exit 0. ``python`` runs with
  /usr/bin/python3. Any other tag (``text`` for output, diagrams, file
  contents; ``ini``, ``json``, ...) is shown only. A fence with no tag fails
  this test, and so does an indented code block, so that no command block
  escapes by being unmarked.
- The blocks of one page run in order, in one temp directory, as one
  terminal session: variables and the working directory carry from block
  to block (``cd``, ``export``, ``E=...``). In that directory ``build``,
  ``docs`` and ``tools`` link to the tree, so commands written for the top
  of a checkout work. quorum, quorumctl, quorum-dump and etcdctl are on PATH.
- Each page gets a fresh three-member cluster started as ./tools/up starts
  it (same flags, --enable-v2 included). Every ``127.0.0.1:PORT`` and
  ``localhost:PORT`` is replaced by a free port, the same documented port by
  the same free one on a page: 2379, 2389, 2399 are the cluster's client
  ports, 2380, 2390, 2400 its peer ports and 2181, 2191, 2201 its ZooKeeper
  ports; any other port is a fresh free one. An id a console block's output shows (12 to 16 hex digits) is learnt:
  the same id in later commands of the page becomes the one the server gave.
  A port the page has mapped is replaced where it stands alone too
  (``etcd3.client("127.0.0.1", 2379)``).
- Normalising output: etcdctl's client log lines (``{"level":"warn",...}``)
  dropped, RFC 3339 times -> TIME, ids (12 to 16 hex digits) and every
  decimal number (revisions, TTLs, indexes, decimal ids) -> N; trailing
  blanks dropped.
- An HTML comment on the line(s) just before a fence changes how it runs:
  ``<!-- doc-test: skip (why) -->`` not run (a systemd unit, three machines,
  a foreground tool); ``<!-- doc-test: expect-fail (why) -->`` runs and must
  fail (when it passes, this test fails until the note is removed);
  ``<!-- doc-test: background (why) -->`` runs while the following blocks
  run, as in a second terminal, and gets Ctrl-C (SIGINT) when the page
  ends; ``<!-- doc-test: interrupt N (why) -->`` gets Ctrl-C after N
  seconds (a command that runs until interrupted: watch, observe). A block
  interrupted in either way passes if it had not failed before the
  interrupt and its output matches. Anywhere on a page,
  ``<!-- doc-test: no-cluster (why) -->`` runs it without the cluster.
  Processes a block leaves running (``quorum ... &``) get SIGTERM when the
  page ends.

Environment: QUORUM_BIN (else build/src/server/quorum); quorumctl and
quorum-dump are taken from the same build. DOC_TEST_ONLY=deploy.md runs one
page; KEEP_DOC_TEST=1 keeps the temp dirs.
"""
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, built_binary, free_port, quorum_binary  # noqa: E402

RUN_TAGS = {"sh", "bash", "console", "python"}
BLOCK_TIMEOUT = 120        # a script block, or one console command
CLUSTER_PORTS = {2379: ("client", 0), 2389: ("client", 1), 2399: ("client", 2),
                 2380: ("peer", 0), 2390: ("peer", 1), 2400: ("peer", 2)}
ANNOTATION = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
PORT = re.compile(r"(?<=127\.0\.0\.1:|localhost:)(\d{2,5})\b")
HEXID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{12,16}(?![0-9A-Za-z])")
CLIENT_LOG = re.compile(r'^\{"level":"(debug|info|warn|error)",')
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def pages():
    only = os.environ.get("DOC_TEST_ONLY")
    ps = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [p for p in ps if not only or os.path.basename(p) == only]


def rel(path):
    return os.path.relpath(path, ROOT)


# -- reading a page --------------------------------------------------------------

class Block:
    def __init__(self, path, line, tag, body, notes):
        self.path, self.line, self.tag, self.body = path, line, tag, body
        self.notes = notes          # {"skip": why, "interrupt": (secs, why), ...}

    @property
    def where(self):
        return "%s:%d" % (rel(self.path), self.line)


def parse_note(text, where):
    """'skip (why)' -> ("skip", why); 'interrupt 3 (why)' -> ("interrupt", (3.0, why))."""
    m = re.match(r"^([a-z-]+)\s*(\d+(?:\.\d+)?)?\s*(?:\((.+)\))?$", text)
    if not m:
        raise ValueError("%s: cannot read the doc-test note %r" % (where, text))
    kind, num, why = m.group(1), m.group(2), m.group(3)
    if kind not in ("skip", "expect-fail", "background", "interrupt", "no-cluster"):
        raise ValueError("%s: unknown doc-test note %r" % (where, kind))
    if not why:
        raise ValueError("%s: the doc-test note %r needs its reason in parentheses" % (where, kind))
    if kind == "interrupt":
        if num is None:
            raise ValueError("%s: 'interrupt' needs the seconds: interrupt 3 (why)" % where)
        return kind, (float(num), why)
    if num is not None:
        raise ValueError("%s: %r takes no number" % (where, kind))
    return kind, why


def parse(path):
    """The page's fenced blocks, its page notes, and its format errors."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, page_notes, errors = [], {}, []
    pending = {}            # notes on the lines just before the next fence
    prev_blank, in_list = True, False
    i = 0
    while i < len(lines):
        ln = lines[i]
        where = "%s:%d" % (rel(path), i + 1)
        m = FENCE.match(ln)
        if m:
            fence, tag = m.group(2), m.group(3)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            if j == len(lines):
                errors.append("%s: a fence that never closes" % where)
                break
            indent = len(m.group(1))
            body = "\n".join(x[indent:] if x[:indent].strip() == "" else x for x in lines[i + 1:j])
            if not tag:
                errors.append("%s: a fence without a tag: write sh, console or python to have "
                              "it run, text (or ini, json, ...) if it is not commands" % where)
            if tag == "console":
                try:
                    if not console_commands(body):
                        errors.append("%s: a console block without a '$ ' command" % where)
                except ValueError as e:
                    errors.append("%s: %s" % (where, e))
            blocks.append(Block(path, i + 1, tag, body, pending))
            pending = {}
            i, prev_blank = j + 1, False
            continue
        a = ANNOTATION.match(ln)
        if a:
            try:
                kind, val = parse_note(a.group(1), where)
            except ValueError as e:
                errors.append(str(e))
            else:
                if kind == "no-cluster":
                    page_notes[kind] = val
                else:
                    pending[kind] = val
            i += 1
            continue
        if pending:
            errors.append("%s: a doc-test note must be on the line just before its fence" % where)
            pending = {}
        if re.match(r"^\s*([-*+]|\d+\.)\s", ln):
            in_list = True
        elif ln.strip() and not ln.startswith(" "):
            in_list = False
        if prev_blank and not in_list and ln.startswith("    ") and ln.strip():
            errors.append("%s: an indented code block: fence it (```sh, ```console or ```text) "
                          "so the doc test sees it" % where)
        prev_blank = ln.strip() == ""
        i += 1
    return blocks, page_notes, errors


def console_commands(body):
    """[(command, expected output)] of a console block."""
    cmds = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln.startswith("$ "):
            if ln.strip() and not cmds:
                raise ValueError("output before the first '$ ' command: %r" % ln)
            if cmds:
                cmds[-1][1].append(ln)
            i += 1
            continue
        cmd = [ln[2:]]
        # a command goes on after a line ending in \ and on lines shown with
        # the shell's "> " prompt (an open quote, a pipe at the end)
        while i + 1 < len(lines) and (cmd[-1].endswith("\\") or lines[i + 1].startswith("> ")):
            i += 1
            cmd.append(lines[i][2:] if lines[i].startswith("> ") else lines[i])
        cmds.append(("\n".join(cmd), []))
        i += 1
    return [(c, "\n".join(out)) for c, out in cmds]


def normalise(text):
    out = []
    for ln in text.strip("\n").split("\n"):
        if CLIENT_LOG.match(ln):
            continue            # etcdctl's client library logging on stderr
        ln = TIME.sub("TIME", ln)
        ln = HEXID.sub("N", ln)   # as a number: a decimal id may have as few digits
        ln = re.sub(r"\d+", "N", ln)
        out.append(ln.rstrip())
    while out and out[-1] == "":
        out.pop()
    return out


# -- running a page --------------------------------------------------------------

def tools_up_flags():
    """The flags ./tools/up gives every member (so the cluster here keeps up with it)."""
    with open(os.path.join(ROOT, "tools", "up"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("./build/src/server/quorum")
    cmd = text[start:text.index(">", start)]
    return sorted(set(re.findall(r"(--[a-z0-9-]+)", cmd)))


class Cluster:
    """Three members as ./tools/up starts them: m0..m2, token quorum-local, --enable-v2,
    ZooKeeper ports (documented 2181, 2191, 2201)."""
    FLAGS = ["--name", "--data-dir", "--listen-client-urls", "--advertise-client-urls",
             "--listen-peer-urls", "--initial-advertise-peer-urls", "--initial-cluster",
             "--initial-cluster-token", "--enable-v2", "--listen-zk-urls"]

    def __init__(self, tmp, ports):
        self.dir = os.path.join(tmp, "cluster")
        os.makedirs(self.dir)
        self.client = [ports.get(2379), ports.get(2389), ports.get(2399)]
        self.peer = [ports.get(2380), ports.get(2390), ports.get(2400)]
        self.zk = [ports.get(2181), ports.get(2191), ports.get(2201)]
        self.procs, self.logs = [], []

    def args(self, i):
        initial = ",".join("m%d=http://127.0.0.1:%d" % (k, p) for k, p in enumerate(self.peer))
        c, p = "http://127.0.0.1:%d" % self.client[i], "http://127.0.0.1:%d" % self.peer[i]
        return [quorum_binary(), "--name", "m%d" % i,
                "--data-dir", os.path.join(self.dir, "m%d.quorum" % i),
                "--listen-client-urls", c, "--advertise-client-urls", c,
                "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                "--initial-cluster", initial, "--initial-cluster-token", "quorum-local",
                "--enable-v2", "--listen-zk-urls", "http://127.0.0.1:%d" % self.zk[i]]

    def start(self, env):
        for i in range(3):
            log = open(os.path.join(self.dir, "m%d.log" % i), "ab")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(self.args(i), stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, env=env))
        deadline = time.time() + 30
        for i in range(3):
            while True:
                if self.procs[i].poll() is not None:
                    raise RuntimeError("m%d exited %d:\n%s" % (i, self.procs[i].returncode,
                                                              self.log_tail(i)))
                r = subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % self.client[i],
                                    "--command-timeout=3s", "endpoint", "health"],
                                   capture_output=True, env=env, timeout=20)
                if r.returncode == 0:
                    break
                if time.time() > deadline:
                    raise RuntimeError("m%d not healthy in 30 s:\n%s" % (i, self.log_tail(i)))
                time.sleep(0.1)

    def log_tail(self, i, n=1500):
        try:
            with open(os.path.join(self.dir, "m%d.log" % i), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        """SIGTERM; every member must have run until then and exit 0 (a crash or, under
        ASan, a leak that a page's commands caused). Returns what went wrong."""
        bad = []
        for i, p in enumerate(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            else:
                bad.append("m%d had exited (%d) before the page ended" % (i, p.returncode))
        for i, p in enumerate(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                bad.append("m%d did not stop within 20 s of SIGTERM" % i)
        for log in self.logs:
            log.close()
        for i, p in enumerate(self.procs):
            if p.returncode != 0 and not any(b.startswith("m%d " % i) for b in bad):
                bad.append("m%d exited %d on SIGTERM" % (i, p.returncode))
        return ["%s; its log ends:\n%s" % (b, self.log_tail(int(b[1]))) for b in bad]


class Ports:
    """Documented port -> free port, one page's worth."""

    def __init__(self):
        self.map = {}

    def get(self, doc_port):
        if doc_port not in self.map:
            used = set(self.map.values())
            p = free_port()
            while p in used:
                p = free_port()
            self.map[doc_port] = p
        return self.map[doc_port]


class Page:
    """One page's terminal: its directory, its shell state, its cluster and processes."""

    def __init__(self, path, page_notes):
        self.path = path
        self.tmp = tempfile.mkdtemp(prefix="doc-test-%s-" % os.path.basename(path)[:-3])
        self.work = os.path.join(self.tmp, "work")
        os.makedirs(self.work)
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(quorum_binary()))))
        os.symlink(build, os.path.join(self.work, "build"))
        for d in ("docs", "tools"):
            os.symlink(os.path.join(ROOT, d), os.path.join(self.work, d))
        self.state = os.path.join(self.tmp, "state.sh")
        self.ports = Ports()
        self.ids = {}                  # id in the doc -> id the server gave
        self.groups = []               # process groups of the blocks run (pid == pgid)
        self.background = []           # (block, Popen, output file)
        self.env = self.make_env()
        self.cluster = None
        if "no-cluster" not in page_notes:
            for port in CLUSTER_PORTS:
                self.ports.get(port)
            self.cluster = Cluster(self.tmp, self.ports)
            try:
                self.cluster.start(self.env)
            except Exception:
                self.cluster.stop()
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise

    def make_env(self):
        bins = [os.path.dirname(os.path.abspath(quorum_binary())),
                os.path.dirname(built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")),
                os.path.dirname(built_binary("QUORUM_DUMP_BIN", "tools", "quorum-dump",
                                             "quorum-dump"))]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ETCDCTL_", "QUORUM_", "MESON_", "ASAN_", "UBSAN_"))}
        # the sanitizers' settings stay for the binaries under test
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        env["PATH"] = os.pathsep.join(bins + [os.environ.get("PATH", "/usr/bin:/bin")])
        env["HOME"] = self.tmp
        return env

    # -- text substitution

    def substitute(self, text):
        text = PORT.sub(lambda m: str(self.ports.get(int(m.group(1)))), text)
        # a port the page has used, written alone (etcd3.client("127.0.0.1", 2379))
        for doc_port, port in list(self.ports.map.items()):
            text = re.sub(r"(?<![\w.:/-])%d(?![\w.])" % doc_port, str(port), text)
        for doc_id, real in self.ids.items():
            text = re.sub(r"(?<![0-9a-f])%s(?![0-9a-f])" % doc_id, real, text)
        return text

    def learn_ids(self, expected, actual):
        e, a = HEXID.findall(expected), HEXID.findall(actual)
        if len(e) == len(a):
            for x, y in zip(e, a):
                if x != y and x not in self.ids:
                    self.ids[x] = y

    # -- running one script in the page's shell state

    def script(self, body, strict):
        q = shlex.quote
        return "\n".join([
            "cd %s" % q(self.work),
            "[ -f %s ] && . %s" % (q(self.state), q(self.state)),
            "[ -n \"${__dt_cwd:-}\" ] && cd \"$__dt_cwd\"",
            "set -e -o pipefail" if strict else "",
            body,
            "__dt_rc=$?",
            "set +e",
            "__dt_cwd=$(pwd)",
            "{ for __dt_v in $(compgen -v); do case \" $__DT_BASE \" in *\" $__dt_v \"*) ;; "
            "*) declare -p \"$__dt_v\" 2>/dev/null;; esac; done; } > %s.new && mv %s.new %s"
            % (q(self.state), q(self.state), q(self.state)),
            "exit $__dt_rc",
        ]) + "\n"

    def base_vars(self):
        if not hasattr(self, "_base"):
            r = subprocess.run(["bash", "-c", "compgen -v"], capture_output=True, text=True,
                               env=self.env)
            self._base = " ".join(sorted(set(r.stdout.split()) | {
                "__dt_v", "__dt_rc", "__DT_BASE", "BASH_REMATCH", "PIPESTATUS", "_"}))
        return self._base

    def spawn(self, script, out_path):
        env = dict(self.env, __DT_BASE=self.base_vars())
        out = open(out_path, "wb")
        p = subprocess.Popen(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, cwd=self.work,
                             start_new_session=True)
        self.groups.append(p.pid)
        return p, out

    def run(self, script, interrupt=None, timeout=BLOCK_TIMEOUT):
        """(exit status, output, interrupted) of one script."""
        out_path = os.path.join(self.tmp, "out-%d" % len(self.groups))
        p, out = self.spawn(script, out_path)
        interrupted = False
        try:
            p.wait(timeout=interrupt if interrupt is not None else timeout)
        except subprocess.TimeoutExpired:
            if interrupt is None:
                self.signal_group(p.pid, signal.SIGKILL)
                p.wait()
                out.close()
                raise AssertionError("did not end within %d s; it printed:\n%s"
                                     % (timeout, read(out_path)))
            interrupted = True
            self.ctrl_c(p)
        out.close()
        return p.returncode, read(out_path), interrupted

    def ctrl_c(self, p):
        self.signal_group(p.pid, signal.SIGINT)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.signal_group(p.pid, signal.SIGKILL)
            p.wait()

    @staticmethod
    def signal_group(pgid, sig):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def close(self):
        """Ctrl-C the background blocks, SIGTERM whatever the blocks left running, stop the
        cluster. Returns the background blocks' (block, status, output, still running) and
        what went wrong with the cluster."""
        done = []
        for block, p, out_path in self.background:
            running = p.poll() is None
            if running:
                self.ctrl_c(p)
            done.append((block, p.returncode, read(out_path), running))
        for pgid in self.groups:
            self.signal_group(pgid, signal.SIGTERM)
        deadline = time.time() + 20
        for pgid in self.groups:
            while time.time() < deadline and group_alive(pgid):
                time.sleep(0.05)
            self.signal_group(pgid, signal.SIGKILL)
        cluster_bad = self.cluster.stop() if self.cluster else []
        if os.environ.get("KEEP_DOC_TEST"):
            print("  kept %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return done, cluster_bad


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


# -- one block ---------------------------------------------------------------------

def run_block(page, b):
    """Runs block b in page; raises AssertionError saying what went wrong."""
    interrupt = b.notes.get("interrupt", (None, None))[0]
    if b.tag in ("sh", "bash"):
        script = page.script(page.substitute(b.body), strict=True)
        if "background" in b.notes:
            out_path = os.path.join(page.tmp, "bg-%d" % b.line)
            p, out = page.spawn(script, out_path)
            out.close()
            page.background.append((b, p, out_path))
            time.sleep(0.5)
            if p.poll() not in (None, 0):
                raise AssertionError("exited %d at once:\n%s" % (p.returncode, read(out_path)))
            return
        rc, out, interrupted = page.run(script, interrupt=interrupt)
        if rc != 0 and not interrupted:
            raise AssertionError("exited %d; it printed:\n%s" % (rc, out))
        return
    if b.tag == "python":
        name = os.path.join(page.tmp, "block-%d.py" % b.line)
        with open(name, "w") as f:
            f.write(page.substitute(b.body))
        rc, out, interrupted = page.run("cd %s && /usr/bin/python3 %s" % (
            shlex.quote(page.work), shlex.quote(name)), interrupt=interrupt)
        if rc != 0 and not interrupted:
            raise AssertionError("exited %d; it printed:\n%s" % (rc, out))
        return
    # console (its format was checked by test_format)
    try:
        cmds = console_commands(b.body)
    except ValueError as e:
        raise AssertionError(str(e))
    if ("background" in b.notes or interrupt is not None) and len(cmds) != 1:
        raise AssertionError("a background or interrupted console block holds one command")
    for cmd, expected in cmds:
        script = page.script(page.substitute(cmd), strict=False)
        if "background" in b.notes:
            out_path = os.path.join(page.tmp, "bg-%d" % b.line)
            p, out = page.spawn(script, out_path)
            out.close()
            page.background.append((b, p, out_path))
            time.sleep(1.0)
            if p.poll() not in (None, 0):
                raise AssertionError("exited %d at once:\n%s" % (p.returncode, read(out_path)))
            return
        rc, out, interrupted = page.run(script, interrupt=interrupt)
        check_console(page, cmd, expected, rc, out, interrupted)


def check_console(page, cmd, expected, rc, out, interrupted):
    want_fail = any(x.startswith("Error:") for x in expected.split("\n"))
    if not interrupted:
        if want_fail and rc == 0:
            raise AssertionError("$ %s\nexited 0, but the doc shows an error:\n%s" % (cmd, out))
        if not want_fail and rc != 0:
            raise AssertionError("$ %s\nexited %d; it printed:\n%s" % (cmd, rc, out))
    if normalise(expected) != normalise(out):
        raise AssertionError("$ %s\nthe doc shows:\n%s\nit printed:\n%s"
                             % (cmd, expected.rstrip(), out.rstrip()))
    page.learn_ids(expected, out)


# -- the test ----------------------------------------------------------------------------

class DocBlocks(unittest.TestCase):
    def test_format(self):
        """Every fence tagged, every note readable and just before a fence."""
        errors = []
        for p in pages():
            errors += parse(p)[2]
        self.assertEqual(errors, [], "\n".join(errors))

    def test_cluster_as_tools_up(self):
        """The cluster here is started with ./tools/up's flags, no more, no fewer."""
        self.assertEqual(sorted(Cluster.FLAGS), tools_up_flags())

    def test_blocks_run(self):
        counts = {"ran": 0, "skipped": 0, "expected to fail": 0, "shown only": 0}
        failures = []
        t0 = time.monotonic()
        for path in pages():
            blocks, page_notes, _ = parse(path)
            runnable = [b for b in blocks if b.tag in RUN_TAGS]
            counts["shown only"] += len(blocks) - len(runnable)
            todo = [b for b in runnable if "skip" not in b.notes]
            for b in runnable:
                if "skip" in b.notes:
                    counts["skipped"] += 1
                    print("  skip  %s (%s)" % (b.where, b.notes["skip"]))
            if not todo:
                continue
            tp = time.monotonic()
            try:
                page = Page(path, page_notes)
            except Exception as e:  # noqa: BLE001
                print("  FAIL  %s: the cluster did not start: %s" % (rel(path), e))
                failures.append("%s: the cluster did not start: %s" % (rel(path), e))
                continue
            results = []
            try:
                for b in todo:
                    tb = time.monotonic()
                    try:
                        run_block(page, b)
                        err = None
                    except AssertionError as e:
                        err = str(e)
                    if "background" not in b.notes:
                        results.append((b, err, time.monotonic() - tb))
                    elif err:
                        results.append((b, err, time.monotonic() - tb))
            finally:
                bg, cluster_bad = page.close()
            for b in cluster_bad:
                print("  FAIL  %s: the cluster: %s" % (rel(path), b))
                failures.append("%s: the cluster: %s" % (rel(path), b))
            for b, rc, out, running in bg:
                if any(r[0] is b for r in results):
                    continue
                err = None
                if not running and rc != 0:
                    err = "exited %d before the page ended:\n%s" % (rc, out)
                elif b.tag == "console":
                    cmd, expected = console_commands(b.body)[0]
                    if normalise(expected) != normalise(out):
                        err = "$ %s\nthe doc shows:\n%s\nit printed:\n%s" % (
                            cmd, expected.rstrip(), out.rstrip())
                results.append((b, err, 0.0))
            for b, err, secs in sorted(results, key=lambda r: r[0].line):
                if "expect-fail" in b.notes:
                    if err is None:
                        failures.append("%s: passed, but is marked expect-fail (%s): remove the "
                                        "note" % (b.where, b.notes["expect-fail"]))
                        print("  XPASS %s" % b.where)
                    else:
                        counts["expected to fail"] += 1
                        print("  xfail %s (%s): %s" % (b.where, b.notes["expect-fail"],
                                                      err.splitlines()[0][:160]))
                    continue
                counts["ran"] += 1
                if err is None:
                    print("  ok    %s %s (%.1f s)" % (b.where, b.tag, secs))
                else:
                    print("  FAIL  %s %s\n%s" % (b.where, b.tag, indent(err)))
                    failures.append("%s: %s" % (b.where, err))
            print("%s: %.1f s" % (rel(path), time.monotonic() - tp))
        print("doc blocks: %d ran and passed, %d ran and failed as expected (expect-fail), "
              "%d skipped, %d shown only (not commands); %.0f s"
              % (counts["ran"], counts["expected to fail"], counts["skipped"],
                 counts["shown only"], time.monotonic() - t0))
        self.assertEqual(failures, [], "\n\n".join(failures))
        if not os.environ.get("DOC_TEST_ONLY"):
            self.assertGreater(counts["ran"], 20, "too few blocks ran: did the parsing break?")


def indent(text):
    return "\n".join("        " + x for x in text.splitlines())


if __name__ == "__main__":
    unittest.main(verbosity=2)
