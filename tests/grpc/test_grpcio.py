#!/usr/bin/python3
"""tests/grpc/test_grpcio.py: drives grpc-test-server (src/grpc) with the
real gRPC client, grpcio, plus raw sockets and nghttp for what grpcio cannot
send. Every kind of call, many concurrent calls, error statuses, limits,
cancellation, and garbage input that must close one connection but leave
the server serving.

Usage: test_grpcio.py PATH/TO/grpc-test-server
"""
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

SERVER = None
PORT = None
MAX_RECV = 1024 * 1024
ident = lambda b: b  # noqa: E731  identity (de)serializer on bytes


def setUpModule():
    global SERVER, PORT
    SERVER = subprocess.Popen([sys.argv[1], "--max-recv", str(MAX_RECV)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    PORT = int(SERVER.stdout.readline())


def tearDownModule():
    SERVER.stdin.close()
    try:
        rc = SERVER.wait(timeout=20)
    except subprocess.TimeoutExpired:
        SERVER.kill()
        raise AssertionError("server did not exit when stdin closed")
    if rc != 0:
        raise AssertionError("server exited with %d" % rc)


def channel():
    return grpc.insecure_channel("127.0.0.1:%d" % PORT)


def unary(ch, method):
    return ch.unary_unary("/test.Echo/" + method, request_serializer=ident,
                          response_deserializer=ident)


def stats(ch):
    out = unary(ch, "Stats")(b"", timeout=10).decode()
    return dict(kv.split("=") for kv in out.split())


def frame(t, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + \
        struct.pack(">I", sid) + payload


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def request_headers(method):
    """an HPACK block (literals only, no dynamic table) for a request to
    /test.Echo/<method>"""
    path = b"/test.Echo/" + method.encode()
    return bytes([0x83, 0x86, 0x04, len(path)]) + path + \
        bytes([0x01, 9]) + b"127.0.0.1" + \
        bytes([0x0f, 0x10, 16]) + b"application/grpc"


def read_frames_until_eof(s, limit=5.0):
    """reads until the server closes; returns the list of (type, flags,
    stream, payload) frames received, or raises on timeout"""
    s.settimeout(limit)
    data = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        data += b
    frames = []
    while len(data) >= 9:
        n = int.from_bytes(data[:3], "big")
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7fffffff,
                       data[9:9 + n]))
        data = data[9 + n:]
    return frames


class Calls(unittest.TestCase):
    def setUp(self):
        self.ch = channel()

    def tearDown(self):
        self.ch.close()

    def test_unary_echo(self):
        u = unary(self.ch, "Unary")
        self.assertEqual(u(b"hello", timeout=10), b"hello")
        self.assertEqual(u(b"", timeout=10), b"")
        big = os.urandom(MAX_RECV)  # exactly the limit is accepted
        self.assertEqual(u(big, timeout=30), big)

    def test_unary_later(self):
        self.assertEqual(unary(self.ch, "Later")(b"from a timer", timeout=10), b"from a timer")

    def test_error_status_and_message(self):
        text = "caf\u00e9 100% \u2713 done\nsecond line"
        with self.assertRaises(grpc.RpcError) as cm:
            unary(self.ch, "Fail")(bytes([9]) + text.encode(), timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(cm.exception.details(), text)
        with self.assertRaises(grpc.RpcError) as cm:
            unary(self.ch, "Fail")(bytes([14]) + b"etcdserver: no leader", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(cm.exception.details(), "etcdserver: no leader")

    def test_server_streaming(self):
        s = self.ch.unary_stream("/test.Echo/ServerStream", request_serializer=ident,
                                 response_deserializer=ident)
        got = list(s(b"1000", timeout=30))
        self.assertEqual(got, [str(i).encode() for i in range(1000)])
        # bigger than the pacing threshold and the flow-control windows
        got = list(s(b"300,20000", timeout=30))
        self.assertEqual(len(got), 300)
        self.assertTrue(all(len(m) == 20000 for m in got))
        self.assertEqual(list(s(b"0", timeout=10)), [])

    def test_bidi_echo(self):
        b = self.ch.stream_stream("/test.Echo/Bidi", request_serializer=ident,
                                  response_deserializer=ident)
        msgs = [("m%d" % i).encode() * (i + 1) for i in range(200)]
        self.assertEqual(list(b(iter(msgs), timeout=30)), msgs)
        self.assertEqual(list(b(iter([]), timeout=10)), [])

    def test_client_streaming_sum(self):
        s = self.ch.stream_unary("/test.Echo/Sum", request_serializer=ident,
                                 response_deserializer=ident)
        self.assertEqual(s(iter(str(i).encode() for i in range(1, 101)), timeout=10), b"5050")
        self.assertEqual(s(iter([]), timeout=10), b"0")

    def test_200_concurrent_calls_one_channel(self):
        u = unary(self.ch, "Unary")
        later = unary(self.ch, "Later")
        futs = []
        for i in range(200):
            f = (later if i % 2 else u).future(b"call %d" % i, timeout=30)
            futs.append((i, f))
        for i, f in futs:
            self.assertEqual(f.result(), b"call %d" % i)

    def test_oversize_message(self):
        with self.assertRaises(grpc.RpcError) as cm:
            unary(self.ch, "Unary")(b"x" * (MAX_RECV + 1), timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(cm.exception.details(),
                         "grpc: received message larger than max (%d vs. %d)"
                         % (MAX_RECV + 1, MAX_RECV))
        # the connection is still good
        self.assertEqual(unary(self.ch, "Unary")(b"after", timeout=10), b"after")

    def test_oversize_in_client_stream(self):
        s = self.ch.stream_unary("/test.Echo/Sum", request_serializer=ident,
                                 response_deserializer=ident)
        msgs = [b"1", b"2", b"x" * (MAX_RECV + 10)] + [b"3"] * 100
        with self.assertRaises(grpc.RpcError) as cm:
            s(iter(msgs), timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_unknown_method_and_service(self):
        with self.assertRaises(grpc.RpcError) as cm:
            unary(self.ch, "Bar")(b"", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(cm.exception.details(), "unknown method Bar for service test.Echo")
        u = self.ch.unary_unary("/etcdserverpb.Foo/Range", request_serializer=ident,
                                response_deserializer=ident)
        with self.assertRaises(grpc.RpcError) as cm:
            u(b"", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(cm.exception.details(), "unknown service etcdserverpb.Foo")

    def test_compression_refused(self):
        with grpc.insecure_channel("127.0.0.1:%d" % PORT,
                                   compression=grpc.Compression.Gzip) as ch:
            with self.assertRaises(grpc.RpcError) as cm:
                unary(ch, "Unary")(b"a" * 1000, timeout=10)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("grpc-encoding", cm.exception.details())

    def test_cancel_stream_midway(self):
        before = stats(self.ch)
        s = self.ch.unary_stream("/test.Echo/ServerStream", request_serializer=ident,
                                 response_deserializer=ident)
        call = s(b"100000000,1000", timeout=60)
        for i, m in enumerate(call):
            if i == 10:
                break
        call.cancel()
        # the server must see the reset: its on_close runs and it stops
        deadline = time.time() + 10
        while True:
            st = stats(self.ch)
            if int(st["closes"]) > int(before["closes"]) and st["live"] == before["live"]:
                break
            self.assertLess(time.time(), deadline, "on_close did not run: %r" % st)
            time.sleep(0.05)
        self.assertEqual(unary(self.ch, "Unary")(b"still here", timeout=10), b"still here")

    def test_cancel_pending_unary(self):
        before = stats(self.ch)
        f = unary(self.ch, "Later").future(b"x", timeout=30)
        time.sleep(0.005)
        f.cancel()
        deadline = time.time() + 10
        while True:
            st = stats(self.ch)
            if st["live"] == before["live"]:
                break
            self.assertLess(time.time(), deadline, "pending call leaked: %r" % st)
            time.sleep(0.05)

    def test_metadata_and_deadline_headers_accepted(self):
        u = unary(self.ch, "Unary")
        self.assertEqual(u(b"m", timeout=5, metadata=(("token", "abc"), ("x-bin", b"\x00\x01"))),
                         b"m")


class Garbage(unittest.TestCase):
    def still_serving(self):
        with channel() as ch:
            self.assertEqual(unary(ch, "Unary")(b"alive", timeout=10), b"alive")

    def test_http1_garbage(self):
        s = socket.create_connection(("127.0.0.1", PORT))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(200))
        frames = read_frames_until_eof(s)
        s.close()
        # nghttp2 answers a bad preface with SETTINGS then GOAWAY
        self.assertIn(7, [f[0] for f in frames], frames)
        self.still_serving()

    def test_truncated_preface(self):
        s = socket.create_connection(("127.0.0.1", PORT))
        s.sendall(PREFACE[:10])
        s.shutdown(socket.SHUT_WR)
        read_frames_until_eof(s)
        s.close()
        self.still_serving()

    def test_random_bytes_after_preface(self):
        for seed in range(20):
            s = socket.create_connection(("127.0.0.1", PORT))
            rnd = os.urandom(100 + seed * 50)
            s.sendall(PREFACE + frame(4, 0, 0, b"") + rnd)
            s.shutdown(socket.SHUT_WR)
            read_frames_until_eof(s)
            s.close()
        self.still_serving()

    def test_protocol_error_goaway(self):
        s = socket.create_connection(("127.0.0.1", PORT))
        # DATA on stream 0 is a connection error PROTOCOL_ERROR
        s.sendall(PREFACE + frame(4, 0, 0, b"") + frame(0, 0, 0, b"oops"))
        frames = read_frames_until_eof(s)
        s.close()
        goaway = [f for f in frames if f[0] == 7]
        self.assertTrue(goaway, frames)
        self.assertEqual(int.from_bytes(goaway[0][3][4:8], "big"), 1)  # PROTOCOL_ERROR
        self.still_serving()

    def test_abrupt_close_mid_call(self):
        # a HEADERS for a valid method then the socket closes: on_close runs
        with channel() as ch:
            before = stats(ch)
        s = socket.create_connection(("127.0.0.1", PORT))
        # HPACK: :method POST (idx 3), :scheme http (idx 6), :path literal
        # (idx 4 name), content-type literal
        s.sendall(PREFACE + frame(4, 0, 0, b"") + frame(1, 4, 1, request_headers("Later")) +
                  frame(0, 1, 1, b"\x00\x00\x00\x00\x01z"))
        with channel() as ch:
            # the call must really have started (now pending on its timer)
            deadline = time.time() + 10
            while stats(ch)["live"] == before["live"]:
                self.assertLess(time.time(), deadline)
                time.sleep(0.001)
        s.close()
        with channel() as ch:
            deadline = time.time() + 10
            while stats(ch)["live"] != before["live"]:
                self.assertLess(time.time(), deadline)
                time.sleep(0.05)
        self.still_serving()


class SlowReader(unittest.TestCase):
    def test_client_that_does_not_read(self):
        """A client floods unary requests with big answers and never reads.
        The server must stop reading it (TCP backpressure) instead of
        queueing every answer: the client can get only a bounded amount
        of its 200 MB of requests in."""
        s = socket.create_connection(("127.0.0.1", PORT))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        big = (1 << 31) - 1
        s.sendall(PREFACE + frame(4, 0, 0, struct.pack(">HI", 4, big)) +
                  frame(8, 0, 0, struct.pack(">I", big - 65535)))
        # the server's windows apply once its SETTINGS is acknowledged
        hd = s.recv(9, socket.MSG_WAITALL)
        self.assertEqual(hd[3], 4)
        s.recv(int.from_bytes(hd[:3], "big"), socket.MSG_WAITALL)
        s.sendall(frame(4, 1, 0, b""))
        hb = request_headers("Unary")
        body = b"\x00" + struct.pack(">I", 512 * 1024) + os.urandom(512 * 1024)
        data = b"".join(frame(0, 0, 0, body[i:i + 16384]) for i in range(0, len(body), 16384))
        s.setblocking(False)
        sent = 0
        total = 400 * (len(data) + 100)
        last_progress = time.time()
        sid = 1
        pending = b""
        while sent < total and time.time() - last_progress < 1.5:
            if not pending:
                d = bytearray(data)
                for off in range(0, len(d), 16384 + 9):  # patch stream ids
                    d[off + 5:off + 9] = struct.pack(">I", sid)
                d[-9 - (len(body) - (len(body) // 16384) * 16384 or 16384) + 4] |= 1
                pending = frame(1, 4, sid, hb) + bytes(d)
                sid += 2
            try:
                n = s.send(pending)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            pending = pending[n:]
            sent += n
            last_progress = time.time()
        rss = 0
        with open("/proc/%d/status" % SERVER.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        s.close()
        self.assertLess(sent, 100 << 20, "server kept reading a client that does not read")
        self.assertLess(rss, 150 << 20, "server RSS %d" % rss)
        with channel() as ch:
            self.assertEqual(unary(ch, "Unary")(b"alive", timeout=10), b"alive")


@unittest.skipUnless(shutil.which("nghttp"), "nghttp not installed")
class RawRequests(unittest.TestCase):
    """requests grpcio will not send, made with nghttp"""

    def nghttp(self, path, body, headers):
        with tempfile.NamedTemporaryFile() as f:
            if body is not None:
                f.write(body)
                f.flush()
            args = ["nghttp", "-v"]
            if body is not None:
                args += ["-d", f.name]
            for h in headers:
                args += ["-H", h]
            out = subprocess.run(args + ["http://127.0.0.1:%d%s" % (PORT, path)],
                                 capture_output=True, timeout=20).stdout.decode("utf-8", "replace")
        hdrs = {}
        for line in out.splitlines():
            if "recv (stream_id=" in line:
                k, _, v = line.split(") ", 1)[1].partition(": ")
                hdrs[k] = v
        return hdrs

    def test_content_type(self):
        h = self.nghttp("/test.Echo/Unary", b"\0\0\0\0\0", ["content-type: text/plain"])
        self.assertEqual(h.get(":status"), "415")
        self.assertEqual(h.get("grpc-status"), "3")
        self.assertEqual(h.get("grpc-message"), 'invalid gRPC request content-type "text/plain"')

    def test_get(self):
        h = self.nghttp("/test.Echo/Unary", None, [])
        self.assertEqual(h.get(":status"), "405")

    def test_compressed_flag_without_encoding(self):
        h = self.nghttp("/test.Echo/Unary", b"\x01\0\0\0\x02hi", ["content-type: application/grpc"])
        self.assertEqual(h.get("grpc-status"), "13")
        self.assertEqual(h.get("grpc-message"),
                         "grpc: compressed flag set with identity or empty encoding")

    def test_truncated_message(self):
        h = self.nghttp("/test.Echo/Unary", b"\0\0\0\0\x09abc", ["content-type: application/grpc"])
        self.assertEqual(h.get("grpc-status"), "13")

    def test_two_messages_to_unary(self):
        h = self.nghttp("/test.Echo/Unary", b"\0\0\0\0\x01a\0\0\0\0\x01b",
                        ["content-type: application/grpc"])
        # the first message is answered; the second cannot change that
        self.assertEqual(h.get(":status"), "200")
        self.assertIn(h.get("grpc-status"), ("0", "13"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
