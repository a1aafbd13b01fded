"""Every runnable example under docs/examples/ runs against a fresh quorum
and ends with "ok" (each example asserts what its page claims); then runs
again at once against the same server, as a reader trying it twice would
(within the first run's lease TTLs: an example must clean up after itself)."""
import glob
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Server  # noqa: E402

EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "docs", "examples", "*.py")))


class DocsExamples(unittest.TestCase):
    def test_there_are_examples(self):
        self.assertGreaterEqual(len(EXAMPLES), 4)

    def test_examples_run(self):
        for ex in EXAMPLES:
            with self.subTest(example=os.path.basename(ex)):
                with Server(os.environ.get("TARGET", "quorum")) as s:
                    for run in ("first run", "run again"):
                        r = subprocess.run(["/usr/bin/python3", ex], capture_output=True,
                                           text=True, timeout=120,
                                           env=dict(os.environ, QUORUM_ENDPOINT=s.endpoint))
                        self.assertEqual(r.returncode, 0, "%s: %s" % (run, r.stdout + r.stderr))
                        self.assertEqual(r.stdout.strip().splitlines()[-1], "ok", run)


if __name__ == "__main__":
    unittest.main(verbosity=2)
