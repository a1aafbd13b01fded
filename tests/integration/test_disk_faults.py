#!/usr/bin/python3
"""Disk faults under a write load (docs/faults.md), through the LD_PRELOAD
shim tests/faults/diskfault.c ($DISKFAULT_LIB, else the build's).

Each case starts a member with the shim disarmed, runs a put load whose
acknowledged writes are recorded, arms the fault at one call of the WAL or
the store, and checks the member's reaction:
- a failed fdatasync (WAL or store), a failed write (EIO), or a write of
  the store the disk refuses (ENOSPC): the member logs the cause and exits
  with status 1, never answering a write it could not make durable;
- the WAL's write refused for space (ENOSPC): the member stays up, refuses
  writes with etcd's "database space exceeded", serves reads, and takes
  writes again once the space is back (the shim's control file); stopped
  while it waits, it exits 0;
- a slow fdatasync: the member stays up, logs etcd's "slow fdatasync", and
  the writes succeed.
Then it restarts without the fault: every acknowledged write is there with
its value and revision, and HashKV at that revision is the same after
another restart. One case does it on a follower of three members: the
others keep serving, and after its restart all three have the same HashKV.
"""
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402
from cluster import Cluster  # noqa: E402


def shim_path():
    p = os.environ.get("DISKFAULT_LIB") or os.path.join(
        os.path.dirname(harness.quorum_binary()), "..", "..", "tests", "faults",
        "libdiskfault.so")
    if not os.path.exists(p):
        raise RuntimeError("the disk fault shim is not built: %s" % p)
    return os.path.abspath(p)


def fault_env(control, **kv):
    """The environment that loads the shim, disarmed until |control| says "on"."""
    env = {"LD_PRELOAD": shim_path(), "DISKFAULT_CONTROL": control}
    # an ASan build's runtime must come first unless told not to check
    asan = os.environ.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    for k, v in kv.items():
        env["DISKFAULT_" + k.upper()] = str(v)
    with open(control, "w") as f:
        f.write("off")
    return env


class FaultServer(harness.Server):
    """A single member started with extra environment (the shim)."""

    def __new__(cls, *a, **kw):
        return object.__new__(cls)

    def __init__(self, *a, **kw):
        super().__init__("quorum", *a, **kw)
        self.env = {}

    def start(self, timeout=20.0):
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            return super().start(timeout)
        finally:
            os.environ.clear()
            os.environ.update(saved)


class Load:
    """Puts of unique keys from one thread; acks[key] = (value, revision)."""

    def __init__(self, endpoint, prefix, value_size=100):
        self.endpoint = endpoint
        self.prefix = prefix
        self.pad = "x" * value_size
        self.acks = {}
        self.errors = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        ch = grpc.insecure_channel(self.endpoint)
        kv = rpc_pb2_grpc.KVStub(ch)
        i = 0
        while not self.stop.is_set():
            key = "%s/%06d" % (self.prefix, i)
            val = "v%d-%s" % (i, self.pad)
            i += 1
            try:
                r = kv.Put(rpc_pb2.PutRequest(key=key.encode(), value=val.encode()), timeout=3)
                self.acks[key] = (val, r.header.revision)
            except grpc.RpcError as e:
                self.errors.append((e.code(), e.details()))
                time.sleep(0.05)
        ch.close()

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(timeout=10)

    def wait_acks(self, n, timeout=20):
        harness.wait_for(lambda: len(self.acks) >= n, timeout=timeout,
                         what="%d acknowledged puts" % n)


def check_acks(endpoint, acks):
    """Every acknowledged put is there with its value and revision."""
    ch = grpc.insecure_channel(endpoint)
    kv = rpc_pb2_grpc.KVStub(ch)
    for key, (val, rev) in acks.items():
        r = kv.Range(rpc_pb2.RangeRequest(key=key.encode()), timeout=10)
        assert r.count == 1, "acknowledged %s lost" % key
        got = r.kvs[0]
        assert got.value.decode() == val, "%s: value %r" % (key, got.value[:20])
        assert got.mod_revision == rev, "%s: revision %d, acked at %d" % (key, got.mod_revision,
                                                                          rev)
    ch.close()


def hash_kv(endpoint, rev=0):
    ch = grpc.insecure_channel(endpoint)
    m = rpc_pb2_grpc.MaintenanceStub(ch)
    r = m.HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=10)
    ch.close()
    return r.hash, r.header.revision


def single_case(name, want_log, want_exit=1, **fault):
    """One member, the fault armed mid-load; returns the seconds it took."""
    t0 = time.monotonic()
    s = FaultServer(name=name)
    control = os.path.join(s.tmp, "diskfault.control")
    s.env = fault_env(control, **fault)
    try:
        s.start()
        with Load(s.endpoint, "/df/" + name) as load:
            load.wait_acks(50)
            with open(control, "w") as f:
                f.write("on")
            armed_at = len(load.acks)
            if want_exit is None:
                load.wait_acks(armed_at + 30, timeout=40)
            else:
                try:
                    s.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise AssertionError("%s: the member did not stop on the fault; log:\n%s"
                                         % (name, s.log_tail()))
        log = s.log_tail(20000)
        assert "diskfault: " in log, "%s: the fault never fired:\n%s" % (name, log[-3000:])
        for w in want_log:
            assert w in log, "%s: %r not in the log:\n%s" % (name, w, log[-3000:])
        if want_exit is None:
            assert s.proc.poll() is None, "%s: the member stopped:\n%s" % (name, log[-3000:])
            s.stop()
        else:
            assert s.proc.returncode == want_exit, "%s: exit %s, want %d:\n%s" % (
                name, s.proc.returncode, want_exit, log[-3000:])
            # the write in flight failed: nothing was answered wrongly
            assert load.errors, "%s: no client saw the member stop" % name
        if s.log_file:
            s.log_file.close()
            s.log_file = None
        acks = dict(load.acks)
        # restart without the shim: everything acknowledged survived
        s.env = {}
        s.start()
        check_acks(s.endpoint, acks)
        h1, rev = hash_kv(s.endpoint)
        assert rev >= max(r for _, r in acks.values())
        s.stop()
        s.start()
        h2, _ = hash_kv(s.endpoint, rev)
        assert h1 == h2, "%s: HashKV at %d changed across a restart" % (name, rev)
        check_acks(s.endpoint, acks)
        s.stop()
        took = time.monotonic() - t0
        print("ok   %-28s %4d acked, exit %s, %.1fs" % (name, len(acks), want_exit, took))
    except Exception:
        print("---- %s log:\n%s" % (name, s.log_tail(6000)))
        raise
    finally:
        s.cleanup()


def hold_case(stop_while_held):
    """The WAL's write refused for space: the member stays up, refuses
    writes with etcd's NOSPACE text, serves reads, and takes writes again
    once space is back (or, stopped meanwhile, exits 0 and restarts)."""
    name = "wal-write-ENOSPC" + ("-stopped" if stop_while_held else "")
    t0 = time.monotonic()
    s = FaultServer(name=name)
    control = os.path.join(s.tmp, "diskfault.control")
    s.env = fault_env(control, calls="pwrite", path="/member/wal/", errno="ENOSPC", after=5)
    try:
        s.start()
        with Load(s.endpoint, "/df/" + name) as load:
            load.wait_acks(50)
            with open(control, "w") as f:
                f.write("on")
            harness.wait_for(lambda: any(c == grpc.StatusCode.RESOURCE_EXHAUSTED
                                         for c, _ in load.errors),
                             timeout=20, what="a write refused for space")
            refused = [d for c, d in load.errors if c == grpc.StatusCode.RESOURCE_EXHAUSTED]
            assert refused[0] == "etcdserver: mvcc: database space exceeded", refused[0]
            assert s.proc.poll() is None, "the member stopped:\n" + s.log_tail()
            log = s.log_tail(20000)
            assert ("wal: writing the log failed: No space left on device; refusing writes "
                    "until the disk has space") in log, log[-3000:]
            # reads are served meanwhile (serializable: from the store)
            some = next(iter(load.acks))
            r = s.etcdctl("get", "--consistency=s", "--print-value-only", some)
            assert r.stdout.strip() == load.acks[some][0], r.stdout
            held = len(load.acks)
            if not stop_while_held:
                with open(control, "w") as f:
                    f.write("off")  # space is back
                load.wait_acks(held + 50)
                assert "the log takes writes again" in s.log_tail(20000)
        acks = dict(load.acks)
        s.stop()  # SIGTERM: exit 0, held or not
        s.env = {}
        s.start()
        check_acks(s.endpoint, acks)
        h1, rev = hash_kv(s.endpoint)
        assert rev >= max(r for _, r in acks.values())
        s.stop()
        s.start()
        assert hash_kv(s.endpoint, rev)[0] == h1, "HashKV changed across a restart"
        s.stop()
        print("ok   %-28s %4d acked, %d refused, %.1fs" % (name, len(acks), len(refused),
                                                         time.monotonic() - t0))
    except Exception:
        print("---- %s log:\n%s" % (name, s.log_tail(6000)))
        raise
    finally:
        s.cleanup()


def db_reserve_case():
    """The database's space reserve cannot be topped up (fallocate
    ENOSPC): the member stays up and refuses writes while what is in the log
    applies into the reserve; once space is back it takes writes again."""
    name = "db-reserve-ENOSPC"
    t0 = time.monotonic()
    s = FaultServer(name=name)
    fs = subprocess.run(["stat", "-f", "-c", "%T", s.tmp], capture_output=True, text=True)
    if fs.stdout.strip() == "tmpfs":
        print("skip %-28s the temp dir is a tmpfs: the member keeps no reserve there" % name)
        s.cleanup()
        return
    control = os.path.join(s.tmp, "diskfault.control")
    s.env = fault_env(control, calls="fallocate", path="/member/db/data.mdb", errno="ENOSPC")
    try:
        s.start()
        # 100 KiB values: half the 64 MiB reserve is used in a few hundred puts
        with Load(s.endpoint, "/df/" + name, value_size=100 << 10) as load:
            load.wait_acks(20)
            with open(control, "w") as f:
                f.write("on")
            harness.wait_for(lambda: any(c == grpc.StatusCode.RESOURCE_EXHAUSTED
                                         for c, _ in load.errors),
                             timeout=40, what="a write refused for the database's space")
            refused = [d for c, d in load.errors if c == grpc.StatusCode.RESOURCE_EXHAUSTED]
            assert refused[0] == "etcdserver: mvcc: database space exceeded", refused[0]
            assert s.proc.poll() is None, "the member stopped:\n" + s.log_tail()
            assert "reserving 64 MiB of disk for the database failed: No space left on device; "\
                "refusing writes" in s.log_tail(20000), s.log_tail()
            some = next(iter(load.acks))
            r = s.etcdctl("get", "--consistency=s", "--print-value-only", some)
            assert r.stdout.strip() == load.acks[some][0]
            held = len(load.acks)
            with open(control, "w") as f:
                f.write("off")
            load.wait_acks(held + 10)
            assert "the database has its space reserve again" in s.log_tail(20000)
        acks = dict(load.acks)
        s.stop()
        s.env = {}
        s.start()
        check_acks(s.endpoint, acks)
        s.stop()
        print("ok   %-28s %4d acked, %d refused, %.1fs" % (name, len(acks), len(refused),
                                                         time.monotonic() - t0))
    except Exception:
        print("---- %s log:\n%s" % (name, s.log_tail(6000)))
        raise
    finally:
        s.cleanup()


def follower_case():
    """Three members; a follower's WAL fdatasync fails: it stops, the others
    go on, and once it restarts healthy all three hold the same data."""
    t0 = time.monotonic()
    with Cluster("quorum", n=3) as c:
        lead = c.wait_leader()
        f = (lead + 1) % 3
        # restart the follower with the shim, disarmed
        control = os.path.join(tempfile.gettempdir(), "diskfault-%d.control" % os.getpid())
        env = fault_env(control, calls="fdatasync", path="/member/wal/", errno="EIO", after=3)
        c.kill(f)
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            c.restart(f, wait=False)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        c.wait_member(f)
        m = c.members[f]
        lead = c.wait_leader()
        with Load(c.endpoint(lead), "/df/follower") as load:
            load.wait_acks(50)
            with open(control, "w") as fh:
                fh.write("on")
            try:
                m.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError("the follower did not stop:\n%s" % m.log_tail())
            n = len(load.acks)
            load.wait_acks(n + 50)  # the other two still commit
        os.unlink(control)
        assert m.proc.returncode == 1, "follower exit %s:\n%s" % (m.proc.returncode, m.log_tail())
        log = m.log()
        assert "fdatasync of the log failed: Input/output error; stopping" in log, m.log_tail()
        m._close_log()
        acks = dict(load.acks)
        c.restart(f)
        for i in range(3):
            check_acks(c.endpoint(i), acks)
        rev = max(r for _, r in acks.values())
        harness.wait_for(lambda: all(hash_kv(c.endpoint(i))[1] >= rev for i in range(3)),
                         what="every member at revision %d" % rev)
        hashes = [hash_kv(c.endpoint(i), rev)[0] for i in range(3)]
        assert len(set(hashes)) == 1, "HashKV at %d differs: %s" % (rev, hashes)
        print("ok   %-28s %4d acked, %.1fs" % ("follower-wal-fdatasync-EIO", len(acks),
                                               time.monotonic() - t0))


def main():
    t0 = time.monotonic()
    single_case("wal-fdatasync-EIO",
                ["diskfault: fdatasync(", "wal: fdatasync of the log failed: Input/output error; "
                 "stopping"],
                calls="fdatasync", path="/member/wal/", errno="EIO", after=5)
    hold_case(stop_while_held=False)
    hold_case(stop_while_held=True)
    single_case("wal-write-EIO",
                ["wal: writing the log failed: Input/output error; stopping"],
                calls="pwrite", path="/member/wal/", errno="EIO", after=5)
    single_case("db-write-ENOSPC",
                ["committing applied entries to the database failed: "
                 "No space left on device; stopping"],
                calls="writev,pwrite", path="/member/db/data.mdb", errno="ENOSPC", after=0)
    single_case("db-fdatasync-EIO",
                ["committing applied entries to the database failed: Input/output error; "
                 "stopping"],
                calls="fdatasync", path="/member/db/data.mdb", errno="EIO", after=0)
    db_reserve_case()
    single_case("wal-fdatasync-slow", ["slow fdatasync"], want_exit=None,
                calls="fdatasync", path="/member/wal/", errno="none", delay_ms=1100, count=2)
    follower_case()
    print("test_disk_faults: ok (%.1fs)" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
