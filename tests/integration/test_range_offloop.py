#!/usr/bin/python3
"""A big Range is read on a reader thread, not on a loop (issues 15, 19),
and answers exactly what the inline path answers.

A read that costs more than the loops' read budget (server_int.h
SERVER_READ_BUDGET: 4096 index entries, or fewer kvs of more than a KiB)
is read on a reader thread (server/rangeread.c); a Range over fewer keys
is read inline as before. So the same data read whole (off the loop) and
in pages of 500 keys (each inline) must agree: kvs, count, more and the
header's revision. For each of --front-loops 0 (the core) and 2 (front
loops, which hand big reads to the core):

- at three revisions (explicit), serializable and linearizable, with a
  defragmentation running meanwhile (its swap ends a reader's read, which
  is then read again): whole == pages, header revision equal;
- limit past the budget (more, count), keys_only, count_only, a sort, and
  a read-only Txn of two big Ranges;
- with concurrent writes (a Txn rewriting 64 keys inside the range at
  once, puts elsewhere) and compactions at the current revision (which a
  reader meets mid-read): a whole read at the current revision shows the
  static keys as they are and the 64 keys all from one Txn (not torn);
- a read below the compaction fails "required revision has been
  compacted", whole as in pages;
- --max-range-response-bytes still refuses a big reply (RESOURCE_EXHAUSTED)
  read off the loop (the budget runs out before the bound), and keys_only
  of the same range is served.

Correctness only: no timing is asserted (bench/overload measures stalls).
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402

N = 12000          # static keys under k/
PAGE = 500         # keys per inline page (well under the budget)
TEAR = 64          # keys rewritten together by one Txn
BOUND = 2 << 20    # --max-range-response-bytes
FAT = 8000         # keys of 300 bytes under fat/: 2.6 MB, past the bound (and
                   # past the budget before it: refused by a reader)
PFX, PFX_END = b"k/", b"k0"
COMPACTED = "etcdserver: mvcc: required revision has been compacted"


def key(i):
    return b"k/%06d" % i


def put_many(kv, items):
    for i in range(0, len(items), 128):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=v))
               for k, v in items[i:i + 128]]
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=30)


def kvs_of(resp):
    return [(x.key, x.value, x.create_revision, x.mod_revision, x.version, x.lease)
            for x in resp.kvs]


def pages(kv, rev, serializable, lo=0, hi=N):
    """The static keys [lo, hi) read in pages (each inline)."""
    out, count, hdr = [], 0, set()
    for i in range(lo, hi, PAGE):
        r = kv.Range(rpc_pb2.RangeRequest(key=key(i), range_end=key(min(i + PAGE, hi)),
                                          revision=rev, serializable=serializable), timeout=30)
        assert not r.more
        out += kvs_of(r)
        count += r.count
        hdr.add(r.header.revision)
    return out, count, hdr


def whole(kv, rev, serializable, **kw):
    return kv.Range(rpc_pb2.RangeRequest(key=key(0), range_end=key(N), revision=rev,
                                         serializable=serializable, **kw), timeout=60)


def expect_error(fn, code, text):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, (e.code(), e.details())
        assert e.details() == text, e.details()
        return
    raise AssertionError("served; expected %s" % text)


class Background(threading.Thread):
    """Runs fn() in a loop until stopped; keeps the first error."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.stopping, self.err, self.runs = fn, threading.Event(), None, 0

    def run(self):
        try:
            while not self.stopping.is_set():
                self.fn()
                self.runs += 1
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.err = e

    def stop(self):
        self.stopping.set()
        self.join(60)
        if self.err is not None:
            raise self.err


def check(front_loops):
    with harness.Server("quorum", extra_args=[
            "--front-loops=%d" % front_loops,
            "--max-range-response-bytes=%d" % BOUND]) as s:
        ch = grpc.insecure_channel(s.endpoint, options=[
            ("grpc.max_receive_message_length", 64 << 20)])
        kv = rpc_pb2_grpc.KVStub(ch)
        mt = rpc_pb2_grpc.MaintenanceStub(ch)

        # three revisions: half the keys, all of them, a third rewritten, some
        # deleted
        put_many(kv, [(key(i), b"a%05d" % i + b"." * 90) for i in range(N // 2)])
        r1 = kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=10).header.revision
        put_many(kv, [(key(i), b"b%05d" % i + b"." * 90) for i in range(N // 2, N)])
        r2 = kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=10).header.revision
        put_many(kv, [(key(i), b"c%05d" % i) for i in range(0, N, 3)])
        for i in range(0, N, 500):
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key(i)), timeout=10)
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key(N - 1000), range_end=key(N - 800)),
                       timeout=10)
        r3 = kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=10).header.revision

        # quiet, with defragmentations meanwhile: equal, header included
        defrag = Background(lambda: mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=60))
        defrag.start()
        for rev in (r1, r2, r3):
            for ser in (True, False):
                p, count, hdr = pages(kv, rev, ser)
                w = whole(kv, rev, ser)
                assert kvs_of(w) == p, (front_loops, rev, ser, len(w.kvs), len(p))
                assert w.count == count and not w.more, (w.count, count)
                assert hdr == {w.header.revision}, (hdr, w.header.revision)
                assert len(p) > 4096
        defrag.stop()
        assert defrag.runs > 0

        # the other shapes of a big Range
        p, count, _ = pages(kv, r3, True)
        lim = whole(kv, r3, False, limit=len(p) - 7)
        assert kvs_of(lim) == p[:-7] and lim.more and lim.count == count
        ko = whole(kv, r3, True, keys_only=True)
        assert [(x[0], b"") + x[2:] for x in p] == kvs_of(ko)
        co = whole(kv, r3, False, count_only=True)
        assert co.count == count and not co.kvs
        desc = whole(kv, r3, True, sort_order=rpc_pb2.RangeRequest.DESCEND,
                     sort_target=rpc_pb2.RangeRequest.MOD)
        assert sorted(kvs_of(desc), key=lambda x: (-x[3], x[0])) == kvs_of(desc)
        assert sorted(kvs_of(desc)) == p
        big = rpc_pb2.RangeRequest(key=key(0), range_end=key(N), revision=r3)
        t = kv.Txn(rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_range=big),
                                               rpc_pb2.RequestOp(request_range=big)]), timeout=60)
        assert [kvs_of(x.response_range) for x in t.responses] == [p, p]
        assert t.header.revision == r3

        # writes and compactions meanwhile: a whole read at the current
        # revision is one revision's (the 64 keys from one Txn)
        static = p
        tear_keys = [b"k/~tear/%02d" % i for i in range(TEAR)]
        gen = [0]

        def rewrite():
            gen[0] += 1
            put_many(kv, [(k, b"g%d" % gen[0]) for k in tear_keys])
            kv.Put(rpc_pb2.PutRequest(key=b"noise", value=b"%d" % gen[0]), timeout=10)

        def compact():
            cur = kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=10).header.revision
            kv.Compact(rpc_pb2.CompactionRequest(revision=cur), timeout=30)
            time.sleep(0.05)

        rewrite()
        bg = [Background(rewrite), Background(compact), Background(
            lambda: mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=60))]
        for b in bg:
            b.start()
        for k in range(6):
            ser = k % 2 == 0
            w = kv.Range(rpc_pb2.RangeRequest(key=PFX, range_end=PFX_END, serializable=ser),
                         timeout=60)
            got = kvs_of(w)
            assert got[:len(static)] == static, front_loops
            tear = got[len(static):]
            assert [x[0] for x in tear] == tear_keys, len(tear)
            assert len({(x[1], x[3]) for x in tear}) == 1, "torn: %s" % set(x[1] for x in tear)
            assert w.count == len(got) and w.header.revision >= tear[0][3] >= r3
        for b in bg:
            b.stop()
        assert all(b.runs > 0 for b in bg), [b.runs for b in bg]

        # below the compaction: refused, whole and in pages
        for ser in (True, False):
            expect_error(lambda: whole(kv, r2, ser), grpc.StatusCode.OUT_OF_RANGE, COMPACTED)
            expect_error(lambda: pages(kv, r2, ser, 0, PAGE), grpc.StatusCode.OUT_OF_RANGE,
                         COMPACTED)

        # the response bound, off the loop as inline
        put_many(kv, [(b"fat/%05d" % i, b"f" * 300) for i in range(FAT)])
        fat = rpc_pb2.RangeRequest(key=b"fat/", range_end=b"fat0")
        for ser in (True, False):
            fat.serializable = ser
            expect_error(lambda: kv.Range(fat, timeout=60), grpc.StatusCode.RESOURCE_EXHAUSTED,
                         "grpc: trying to send message larger than max")
        fat.keys_only = True
        assert len(kv.Range(fat, timeout=60).kvs) == FAT
        s.etcdctl("put", "after", "ok")
        assert s.etcdctl("get", "after", "--print-value-only").stdout.strip() == "ok"
        ch.close()
        s.stop()


def main():
    t0 = time.monotonic()
    for fl in (0, 2):
        check(fl)
    print("test_range_offloop: ok (%.1fs)" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
