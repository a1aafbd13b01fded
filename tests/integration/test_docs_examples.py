"""Every runnable example under docs/examples/ runs against a fresh quorum
and ends with "ok" (each example asserts what its page claims)."""
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
                    r = subprocess.run(["/usr/bin/python3", ex], capture_output=True, text=True,
                                       timeout=120, env=dict(os.environ, QUORUM_ENDPOINT=s.endpoint))
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    self.assertEqual(r.stdout.strip().splitlines()[-1], "ok")


if __name__ == "__main__":
    unittest.main(verbosity=2)
