"""The console (/ui) in a real browser: headless Chromium, driven by
selenium through Debian's chromedriver, loads the page from a follower of a
three-member quorum cluster and must show what the cluster is: the three
members and the leader, a key's history and a diff of two of its
revisions, a put appearing live in the watch pane, a lock's holder and
waiter with the fencing token and an election's leader, the leases; then,
with the leader killed, the new leader, and a key browse that still
works; and when the member that served the page dies, a page that says so.
With auth on (one member), the page asks for a user and password and reads
with the token it gets.

Screenshots are artefacts: they go to $CONSOLE_SCREENSHOTS (default: a
directory in the test's temp dir), whose path is printed. With
$CONSOLE_DOCS_IMAGES set (docs/images), three of them are copied there for
docs/observability.md.

Skipped (exit 77, meson's SKIP) only when chromium or chromedriver is not
installed (apt-get install chromium chromium-driver python3-selenium).
Run with /usr/bin/python3."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster  # noqa: E402
from harness import Server, wait_for  # noqa: E402
from http_util import Conn, b64  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    print("SKIP: test_console needs Debian's chromium and chromium-driver "
          "(apt-get install chromium chromium-driver python3-selenium)")
    sys.exit(77)
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
except ImportError:
    print("SKIP: test_console needs python3-selenium (apt-get install python3-selenium)")
    sys.exit(77)

WAIT = 30.0   # seconds for anything the page shows after the cluster changed


def make_driver():
    """headless Chromium through Debian's chromedriver (no driver download),
    its console messages kept; returns (profile dir, driver)"""
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1700", "--no-first-run", "--disable-extensions",
              "--user-data-dir=" + profile):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.set_page_load_timeout(30)
    return profile, d


def shots_dir():
    d = os.environ.get("CONSOLE_SCREENSHOTS")
    if not d:
        d = os.path.join(tempfile.gettempdir(), "quorum-console-screenshots-%d" % os.getpid())
    os.makedirs(d, exist_ok=True)
    return d


class Console(unittest.TestCase):
    """One story, in order (the tests are numbered): one cluster, one page."""

    @classmethod
    def setUpClass(cls):
        cls.shots = shots_dir()
        print("test_console: screenshots in %s" % cls.shots, flush=True)
        cls.procs = []
        cls.load = None
        cls.cluster = Cluster("quorum", n=3).start()
        try:
            cls.leader = cls.cluster.wait_leader()
            cls.names = [m.name for m in cls.cluster.members]
            # the page is served by a follower, which outlives the leader's kill
            cls.serving = [i for i in range(3) if i != cls.leader][0]
            cls.ep = cls.cluster.endpoint(cls.serving)
            cls.profile, cls.d = make_driver()
        except Exception:
            cls.cluster.dump_logs()
            cls.cluster.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.load is not None:
            cls.stop_load.set()
            cls.load.join(10)
            print("test_console: the write load made %d puts; errors: %s"
                  % (cls.load_puts, cls.load_errors[:5]))
        for p in cls.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            p.stdout.close()
        try:
            cls.d.quit()
        finally:
            shutil.rmtree(cls.profile, ignore_errors=True)
            cls.cluster.cleanup()
        print("test_console: screenshots in %s: %s"
              % (cls.shots, " ".join(sorted(os.listdir(cls.shots)))), flush=True)

    def run(self, result=None):
        # a failure shows the page as it was and the members' logs
        failures = len(result.failures) + len(result.errors) if result else 0
        out = super().run(result)
        if result and len(result.failures) + len(result.errors) > failures:
            self.shot("failed-" + self._testMethodName)
            print("page text:\n" + self.d.find_element(By.TAG_NAME, "body").text[:4000])
            self.cluster.dump_logs(1500)
        return out

    # -- helpers ---------------------------------------------------------------

    def shot(self, name, element=None):
        path = os.path.join(self.shots, name + ".png")
        # the whole page (its body: no empty viewport below), or one panel
        (element or self.d.find_element(By.TAG_NAME, "body")).screenshot(path)
        return path

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def text(self, css):
        # the page redraws its panels as answers arrive: an element found
        # may be replaced before its text is read; read the new one then
        for _ in range(20):
            els = self.d.find_elements(By.CSS_SELECTOR, css)
            try:
                return els[0].text if els else ""
            except StaleElementReferenceException:
                time.sleep(0.05)
        raise AssertionError("%s kept being replaced while read" % css)

    def wait(self, pred, what, timeout=WAIT):
        wait_for(pred, timeout=timeout, step=0.2, what=what)

    def type_into(self, elem_id, text):
        el = self.d.find_element(By.ID, elem_id)
        el.clear()
        el.send_keys(text)

    def put(self, key, value):
        self.cluster.etcdctl(self.serving, "put", key, value)

    def member_rows(self):
        return self.js("""return Array.from(document.querySelectorAll('#members tbody tr')).map(
            (tr) => ({name: tr.dataset.name, role: tr.dataset.role, leader: tr.classList.contains('leader'),
                      status: tr.cells[10].textContent}))""")

    def browse_history(self, prefix, key):
        self.type_into("prefix", prefix)
        self.d.find_element(By.CSS_SELECTOR, "#browse-form button").click()
        self.wait(lambda: self.js("""return Array.from(document.querySelectorAll('#key-list button'))
                                      .some((b) => b.textContent === arguments[0])""", key),
                  "key %s listed" % key)
        self.js("""Array.from(document.querySelectorAll('#key-list button'))
                    .find((b) => b.textContent === arguments[0]).click()""", key)
        self.wait(lambda: self.text("#detail-key") == key and
                  len(self.d.find_elements(By.CSS_SELECTOR, "#history tbody tr")) >= 3,
                  "history of %s" % key)

    def page_errors(self):
        """the browser's console: script errors and refusals (CSP), not the
        failed requests to a killed member"""
        out = []
        for e in self.d.get_log("browser"):
            msg = e.get("message", "")
            if e.get("level") != "SEVERE":
                continue
            if "Failed to load resource" in msg or "net::ERR_" in msg:
                continue
            out.append(msg)
        return out

    # -- the story ---------------------------------------------------------------

    @classmethod
    def start_load(cls):
        """a light write load (about 20 puts/s, at most 90 s) so the charts move;
        errors (the leader being killed) are ignored"""
        def load():
            n = 0
            cls.load_errors = []
            deadline = time.monotonic() + 90
            while not cls.stop_load.is_set() and time.monotonic() < deadline:
                try:
                    with Conn(cls.ep, timeout=5) as c:
                        while not cls.stop_load.wait(0.05) and time.monotonic() < deadline:
                            c.call("POST", "/v3/kv/put", {"key": b64("load/%d" % (n % 50)),
                                                          "value": b64("v%d" % n)})
                            n += 1
                except Exception as e:  # noqa: BLE001
                    cls.load_errors.append(repr(e))
                    cls.stop_load.wait(0.5)
            cls.load_puts = n
        cls.stop_load = threading.Event()
        cls.load = threading.Thread(target=load, daemon=True)
        cls.load.start()

    def test_0_static_files(self):
        with Conn(self.ep) as c:
            self.static_files(c)

    def static_files(self, c):
        r = c.call("GET", "/ui")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-type"), "text/html; charset=utf-8")
        self.assertIn(b'<script src="/ui/app.js">', r.body)
        self.assertEqual(r.header("cache-control"), "no-cache")
        self.assertIn("script-src 'self'", r.header("content-security-policy"))
        etag = r.header("etag")
        self.assertRegex(etag, r'^"[0-9a-f]{16}"$')
        self.assertEqual(c.call("GET", "/ui/").body, r.body)
        r = c.call("GET", "/ui/app.js")
        self.assertEqual((r.status, r.header("content-type")),
                         (200, "text/javascript; charset=utf-8"))
        js_len = len(r.body)
        r = c.call("GET", "/ui/app.js", headers=[("If-None-Match", r.header("etag"))])
        self.assertEqual((r.status, r.body, r.header("content-length")), (304, b"", str(js_len)))
        r = c.call("HEAD", "/ui/app.css")
        self.assertEqual((r.status, r.header("content-type"), r.body),
                         (200, "text/css; charset=utf-8", b""))
        self.assertEqual(c.call("GET", "/ui/nope.js").status, 404)
        self.assertEqual(c.call("GET", "/ui/../metrics").status, 404)
        self.assertEqual(c.call("POST", "/ui/", body=b"{}").status, 405)

    def test_1_members_and_leader(self):
        # a key with three versions, for the browser below
        for v in (1, 2, 3):
            self.put("console/config", "listen: 0.0.0.0\nworkers: %d\nmode: steady\n" % (v * 4))
        self.put("console/other", "x")
        self.start_load()
        self.d.get("http://%s/ui" % self.ep)
        self.assertEqual(self.d.title, "quorum console")
        leader = self.names[self.leader]
        self.wait(lambda: len(self.member_rows()) == 3 and
                  all(r["status"] == "ok" for r in self.member_rows()), "three members, ok")
        self.wait(lambda: self.text("#leader") == leader, "leader %s shown" % leader)
        rows = self.member_rows()
        self.assertEqual(sorted(r["name"] for r in rows), sorted(self.names))
        self.assertEqual([r["name"] for r in rows if r["leader"]], [leader])
        self.assertEqual(sorted(r["role"] for r in rows), ["follower", "follower", "leader"])
        self.assertEqual(self.text("#member-count"), "3 of 3 answering")
        self.assertEqual(self.text("#alarms"), "none")
        st = self.cluster.status(self.serving)
        self.assertEqual(self.text("#term"), str(st["raftTerm"]))
        self.assertEqual(self.text("#conn"), "connected")
        # the charts fill from /metrics (a point needs two scrapes)
        self.wait(lambda: self.js("""return ['chart-proposals', 'chart-watchers'].every(
                      (id) => document.getElementById(id).dataset.last !== '')"""),
                  "charts drawn")
        self.shot("01-cluster")

    def test_2_key_history_and_diff(self):
        self.browse_history("console/", "console/config")
        revs = self.js("""return Array.from(document.querySelectorAll('#history tbody tr'))
                          .map((tr) => [tr.dataset.revision, tr.cells[3].textContent, tr.cells[4].textContent])""")
        got = json.loads(self.cluster.etcdctl(self.serving, "get", "console/config",
                                              "-w", "json").stdout)["kvs"][0]
        self.assertEqual(len(revs), 3)
        self.assertEqual(revs[0][0], str(got["mod_revision"]))
        self.assertEqual([r[1] for r in revs], ["3", "2", "1"])
        self.assertEqual([int(r[0]) for r in revs],
                         [got["mod_revision"], got["mod_revision"] - 1, got["mod_revision"] - 2])
        self.assertIn("workers: 12", revs[0][2])
        self.assertIn("3 versions since its creation at revision %d" % got["create_revision"],
                      self.text("#history-note"))
        # the default diff: the previous version against the latest
        diff = self.js("""return Array.from(document.querySelectorAll('#diff span'))
                          .map((s) => [s.className, s.textContent])""")
        self.assertIn(["del", "- workers: 8"], diff)
        self.assertIn(["add", "+ workers: 12"], diff)
        self.assertIn(["", "  mode: steady"], diff)
        # another pair: version 1 against version 3
        self.js("document.querySelector('input[name=diff-a][value=\"2\"]').click()")
        self.wait(lambda: "- workers: 4" in self.text("#diff"), "diff of versions 1 and 3")
        self.assertIn("+ workers: 12", self.text("#diff"))
        self.shot("02-keys", self.d.find_element(By.ID, "keys-card"))

    def test_3_watch_shows_a_put_live(self):
        self.type_into("watch-key", "console/")
        self.d.find_element(By.ID, "watch-start").click()
        self.wait(lambda: "(live)" in self.text("#watch-state"), "watch created")
        self.put("console/live", "hello from etcdctl")
        self.wait(lambda: self.js("""return Array.from(document.querySelectorAll('#watch-events li'))
                      .some((li) => li.dataset.key === 'console/live' && li.textContent.includes('hello from etcdctl'))"""),
                  "the put in the watch pane")
        self.cluster.etcdctl(self.serving, "del", "console/live")
        self.wait(lambda: self.js("""return Array.from(document.querySelectorAll('#watch-events li'))
                      .some((li) => li.dataset.key === 'console/live' && li.dataset.type === 'DELETE')"""),
                  "the delete in the watch pane")

    def etcdctl_bg(self, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.Popen(["etcdctl", "--endpoints", self.ep] + list(args),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.procs.append(p)
        return p

    def test_4_lock_holder_and_election(self):
        holder = self.etcdctl_bg("lock", "job")
        key = holder.stdout.readline().strip()
        self.assertTrue(key.startswith("job/"), key)
        waiter = self.etcdctl_bg("lock", "job")
        elect = self.etcdctl_bg("elect", "leader-election", "candidate-1")
        self.assertTrue(elect.stdout.readline().startswith("leader-election/"))
        kv = json.loads(self.cluster.etcdctl(self.serving, "get", key, "-w", "json").stdout)["kvs"][0]
        # the waiter's key appears once its campaign is written
        self.wait(lambda: json.loads(self.cluster.etcdctl(
            self.serving, "get", "job/", "--prefix", "-w", "json").stdout).get("count") == 2,
            "the waiter's key")
        self.assertIsNone(waiter.poll(), "the second etcdctl lock must wait")
        self.type_into("lock-names", "job leader-election")
        self.d.find_element(By.CSS_SELECTOR, "#locks-form button[type=submit]").click()
        self.wait(lambda: self.text(".lock[data-name='job'] tr.holder td:nth-child(2)") == key,
                  "the holder of job")
        self.assertEqual(self.text(".lock[data-name='job'] .fencing"), str(kv["create_revision"]))
        self.assertEqual(len(self.d.find_elements(By.CSS_SELECTOR, ".lock[data-name='job'] tr.waiter")), 1)
        self.assertEqual(self.text(".lock[data-name='job'] tr.holder td:nth-child(3)"),
                         "%x" % kv["lease"])
        self.wait(lambda: self.text(".lock[data-name='leader-election'] tr.holder td:nth-child(5)")
                  == "candidate-1", "the elected leader's value")
        # the leases pane: the lock's lease with its key and a TTL counting down
        self.wait(lambda: key in self.text("#leases tr[data-id='%x']" % kv["lease"]),
                  "the holder's lease and key")
        ttl = self.text("#leases tr[data-id='%x'] td:nth-child(2)" % kv["lease"])
        self.assertRegex(ttl, r"^\d+ s$")
        self.assertLessEqual(int(ttl.split()[0]), 60)
        # discover finds both by their keys' layout (prefix/lease-in-hex)
        self.type_into("lock-names", "")
        self.d.find_element(By.ID, "locks-discover").click()
        self.wait(lambda: sorted(self.d.find_element(By.ID, "lock-names").get_attribute("value")
                                 .split()) == ["job", "leader-election"], "discovered")
        self.wait(lambda: self.text(".lock[data-name='job'] tr.holder td:nth-child(2)") == key,
                  "the holder of job after discover")
        if os.environ.get("CONSOLE_DOCS_IMAGES"):
            # for the docs: let the charts fill under the write load first
            time.sleep(40)
        self.shot("03-locks-leases-watch")

    def test_5_leader_killed(self):
        old = self.names[self.leader]
        self.cluster.kill(self.leader)
        new = self.cluster.wait_leader()
        self.assertNotEqual(new, self.leader)
        self.wait(lambda: self.text("#leader") == self.names[new], "the new leader shown")
        self.wait(lambda: [r["status"] != "ok" for r in self.member_rows()
                           if r["name"] == old] == [True], "the killed member shown down")
        self.assertEqual(self.text("#member-count"), "2 of 3 answering")
        self.assertEqual(self.text("#conn"), "connected")
        # the page still reads and writes through its member
        self.put("console/config", "listen: 0.0.0.0\nworkers: 16\nmode: steady\n")
        self.browse_history("console/", "console/config")
        self.wait(lambda: len(self.d.find_elements(By.CSS_SELECTOR, "#history tbody tr")) == 4,
                  "four versions now")
        self.wait(lambda: "+ workers: 16" in self.text("#diff"), "the diff of the new version")
        # the watch went on across the leader change
        self.put("console/after", "new leader")
        self.wait(lambda: self.js("""return Array.from(document.querySelectorAll('#watch-events li'))
                      .some((li) => li.dataset.key === 'console/after')"""),
                  "a put after the leader change in the watch pane")
        self.wait(lambda: self.text(".lock[data-name='job'] tr.holder td:nth-child(2)") != "",
                  "the lock still shown")
        self.shot("04-after-leader-kill")

    def test_6_serving_member_killed(self):
        self.cluster.kill(self.serving)
        self.wait(lambda: self.d.find_element(By.ID, "banner").is_displayed() and
                  "not answering" in self.text("#banner"), "the page says its member is gone")
        self.assertEqual(self.text("#conn"), "not answering")
        self.shot("05-serving-member-down")
        self.assertEqual(self.page_errors(), [], "errors in the browser's console")

    @classmethod
    def copy_for_docs(cls):
        dest = os.environ.get("CONSOLE_DOCS_IMAGES")
        if not dest:
            return
        os.makedirs(dest, exist_ok=True)
        for src, name in (("03-locks-leases-watch", "console-overview"),
                          ("02-keys", "console-keys"),
                          ("04-after-leader-kill", "console-leader-killed")):
            path = os.path.join(cls.shots, src + ".png")
            if os.path.exists(path):
                shutil.copyfile(path, os.path.join(dest, name + ".png"))
                print("test_console: %s -> %s" % (path, os.path.join(dest, name + ".png")))


class ConsoleAuth(unittest.TestCase):
    """With auth on, the page asks for a user and password, then sends the
    token with every request; the cluster view needs none meanwhile."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("quorum").start()
        try:
            cls.server.etcdctl("user", "add", "root:pw")
            cls.server.etcdctl("--user", "root:pw", "put", "secret/a", "1")
            cls.server.etcdctl("auth", "enable")
            cls.profile, cls.d = make_driver()
        except Exception:
            print(cls.server.log_tail())
            cls.server.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.d.quit()
        finally:
            shutil.rmtree(cls.profile, ignore_errors=True)
            cls.server.cleanup()

    def test_login(self):
        d = self.d
        d.get("http://%s/ui/" % self.server.endpoint)
        wait_for(lambda: d.find_element(By.ID, "login").is_displayed(), timeout=WAIT,
                 what="the login box")
        wait_for(lambda: d.execute_script(
            "return document.querySelectorAll('#members tbody tr').length") == 1, timeout=WAIT,
            what="the member shown before logging in")
        d.find_element(By.ID, "login-user").send_keys("root")
        d.find_element(By.ID, "login-password").send_keys("wrong")
        d.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_for(lambda: "authentication failed" in d.find_element(By.ID, "login-error").text,
                 timeout=WAIT, what="a wrong password refused")
        d.find_element(By.ID, "login-password").clear()
        d.find_element(By.ID, "login-password").send_keys("pw")
        d.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_for(lambda: not d.find_element(By.ID, "login").is_displayed(), timeout=WAIT,
                 what="the login box gone")
        self.assertEqual(d.find_element(By.ID, "auth-user").text, "user: root")
        wait_for(lambda: d.execute_script("""return Array.from(document.querySelectorAll(
                     '#key-list button')).some((b) => b.textContent === 'secret/a')"""),
                 timeout=WAIT, what="keys read with the token")
        self.assertEqual(d.find_element(By.ID, "keys-error").text, "")
        d.find_element(By.ID, "logout").click()
        d.find_element(By.CSS_SELECTOR, "#browse-form button").click()
        wait_for(lambda: d.find_element(By.ID, "login").is_displayed(), timeout=WAIT,
                 what="the login box after logging out")


if __name__ == "__main__":
    prog = unittest.main(verbosity=2, exit=False)
    Console.copy_for_docs()
    sys.exit(0 if prog.result.wasSuccessful() else 1)
