#!/usr/bin/python3
"""quorumctl snapshot save/status/restore, end to end.

A three-member quorum cluster takes writes from a client thread while
`etcdctl snapshot save` streams a snapshot from a follower; quorumctl
restores that file into three fresh data dirs, a new cluster starts on
them, and its keys equal the source's at the snapshot's revision (every
key, value and revision). A snapshot with one byte changed is refused with
a clear error and no data dir is created. No progress bar when stderr is
not a terminal.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster import Cluster  # noqa: E402


def qctl(*args, check=True):
    r = subprocess.run([harness.built_binary("QUORUMCTL_BIN", "tools", "quorumctl", "quorumctl")]
                       + list(args), capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("quorumctl %s failed: %s" % (" ".join(args), r.stderr))
    return r


def kvs(c, i, rev=None):
    args = ["get", "", "--prefix", "-w", "json"]
    if rev:
        args.append("--rev=%d" % rev)
    out = json.loads(c.etcdctl(i, *args).stdout)
    return out["header"]["revision"], [
        (k["key"], k.get("value"), k["create_revision"], k["mod_revision"], k["version"])
        for k in out.get("kvs", [])]


def main():
    tmp = tempfile.mkdtemp(prefix="quorum-restore-")
    snap = os.path.join(tmp, "snap.db")
    with Cluster("quorum") as src:
        stop = threading.Event()
        count = [0]

        def writer():
            while not stop.is_set():
                src.etcdctl(0, "put", "r/k%04d" % (count[0] % 300), "v%d" % count[0])
                count[0] += 1
        t = threading.Thread(target=writer)
        t.start()
        while count[0] < 100:
            stop.wait(0.05)
        src.etcdctl(1, "snapshot", "save", snap)
        while count[0] < 200:
            stop.wait(0.05)
        stop.set()
        t.join()
        st = json.loads(qctl("-w", "json", "snapshot", "status", snap).stdout)
        rev = st["revision"]
        assert 100 <= rev <= count[0] + 1, "snapshot revision %d, %d writes" % (rev, count[0])
        _, want = kvs(src, 0, rev)
        print("source: %d writes, snapshot at revision %d holds %d keys (status: %s)"
              % (count[0], rev, len(want), st))

    bad = os.path.join(tmp, "bad.db")
    with open(snap, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    with open(bad, "wb") as f:
        f.write(data)
    bad_dir = os.path.join(tmp, "bad.quorum")
    r = qctl("snapshot", "restore", bad, "--data-dir", bad_dir, check=False)
    assert r.returncode != 0, "a corrupted snapshot was restored"
    assert "Error: expected sha256 [" in r.stderr, r.stderr  # etcdctl's words
    assert not os.path.exists(bad_dir), "restore of a bad snapshot left a data dir"
    print("corrupted snapshot refused: %s" % r.stderr.strip()[:120])

    dst = Cluster("quorum")
    try:
        for m in dst.members:
            r = qctl("snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir)
            assert "[" not in r.stderr, "a progress bar on a pipe: %r" % r.stderr
        dst.start()
        for i in range(3):
            got_rev, got = kvs(dst, i)
            assert got == want, "member %d: restored keys differ from the source at %d" % (i, rev)
            assert got_rev == rev, "member %d at revision %d, snapshot at %d" % (i, got_rev, rev)
        dst.etcdctl(2, "put", "r/after", "x")
        assert kvs(dst, 0)[0] == rev + 1
        ids = {m["ID"] for m in dst.member_list()}
        assert len(ids) == 3, "the restored cluster lists %s" % ids
        print("restored cluster: 3 members, %d keys equal to the source at revision %d" %
              (len(want), rev))
    finally:
        dst.cleanup()
    subprocess.run(["rm", "-rf", tmp])
    print("test_restore: OK")


if __name__ == "__main__":
    main()
