#!/usr/bin/python3
"""The fault campaign (tools/faults/campaign.py), short and seeded.

    test_campaign.py              # 40 s, seed 2, 3 members: must pass, with
                                  # every fault kind injected at least once
    test_campaign.py --planted    # the same against a -Dfault_injection=true
                                  # build with QUORUM_PLANTED_BUG=follower-local-read:
                                  # the campaign must find a violation

Exit 77 (meson: skipped) when the campaign cannot make a network namespace
(not root). The quorum binary is $QUORUM_BIN, as for every integration test.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "faults", "campaign.py")
SEED, SECONDS = 2, 40
KINDS = ("partition", "isolate-leader", "bridge", "one-way", "pause", "kill", "slow-disk")


def main():
    planted = "--planted" in sys.argv[1:]
    cmd = ["/usr/bin/python3", TOOL, "--seed", str(SEED), "--seconds", str(SECONDS),
           "--members", "3"]
    if planted:
        # --expect-violation: exit 0 only for a violation found (not for a
        # cluster that failed), and no data dirs kept for it
        cmd += ["--planted-bug", "follower-local-read", "--expect-violation"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    lines = [l for l in r.stdout.splitlines() if l.startswith("campaign:")]
    print("\n".join(lines))
    if r.returncode == 77:
        print("test_campaign: skipped (no network namespace)")
        return 77
    summary = lines[-1] if lines else ""
    if planted:
        if r.returncode != 0 or not summary.endswith("=> FAIL"):
            print(r.stdout[-6000:])
            print("test_campaign: FAILED: the planted bug was not caught (exit %d)" % r.returncode)
            return 1
        print("test_campaign: the planted bug was caught")
        return 0
    if r.returncode != 0 or not summary.endswith("=> PASS"):
        print(r.stdout[-12000:])
        print("test_campaign: FAILED (exit %d)" % r.returncode)
        return 1
    counts = dict(re.findall(r"\b([a-z-]+)=(\d+)\b", summary.split("faults:")[1]))
    missing = [k for k in KINDS if int(counts.get(k, 0)) == 0]
    if "slow-disk" in KINDS and int(counts.get("slow-syncs", 0)) == 0:
        missing.append("slow-disk (no sync was delayed)")
    if missing:
        print("test_campaign: FAILED: fault kinds never injected: %s" % missing)
        return 1
    print("test_campaign: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
