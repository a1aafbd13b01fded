"""The gRPC health service (grpc.health.v1.Health) as etcd 3.4 serves it:
grpc-go's health server with service "" set to SERVING once at start and
never changed (not without a leader, not on shutdown). Load balancers and
grpc-health-probe call Check with {"service": ""}.

  Check ""             -> {status: SERVING}
  Check any other name -> NOT_FOUND "unknown service" (etcd's own service
                          names too: only "" is registered)
  Watch ""             -> {status: SERVING} at once, then nothing; the
                          stream stays open until the client ends it
  Watch other name     -> {status: SERVICE_UNKNOWN}, open likewise

Messages are hand-encoded (HealthCheckRequest: field 1 string service;
HealthCheckResponse: field 1 enum status). TARGET=etcd runs the same
expectations against etcd 3.4."""
import os
import sys
import threading
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

TARGET = os.environ.get("TARGET", "quorum")

CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"
UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN = 0, 1, 2, 3


def request(service):
    """HealthCheckRequest{service}: field 1, wire type 2 (omitted when "")."""
    b = service.encode()
    assert len(b) < 128
    return b"\x0a" + bytes([len(b)]) + b if b else b""


def status_of(resp):
    """HealthCheckResponse.status: field 1, varint (absent means UNKNOWN)."""
    if resp == b"":
        return UNKNOWN
    assert resp[0] == 0x08 and len(resp) == 2, resp
    return resp[1]


class Health(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(TARGET).start()
        cls.chan = grpc.insecure_channel(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.chan.close()
        cls.server.cleanup()

    def check(self, service, **kw):
        return status_of(self.chan.unary_unary(CHECK)(request(service), timeout=10, **kw))

    def watch(self, service, timeout=None):
        return self.chan.unary_stream(WATCH)(request(service), timeout=timeout)

    def test_check_serving(self):
        self.assertEqual(self.check(""), SERVING)
        # the field spelled out empty is the same request
        self.assertEqual(status_of(self.chan.unary_unary(CHECK)(b"\x0a\x00", timeout=10)),
                         SERVING)

    def test_check_unknown_service(self):
        for name in ("x", "etcdserverpb.KV", "grpc.health.v1.Health"):
            with self.subTest(service=name):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.check(name)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
                self.assertEqual(cm.exception.details(), "unknown service")
        self.assertEqual(self.check(""), SERVING)

    def test_check_undecodable(self):
        # field 1 cut short: etcd (grpc-go) answers INTERNAL, quorum
        # INVALID_ARGUMENT as for every method (test_python_client)
        with self.assertRaises(grpc.RpcError) as cm:
            self.chan.unary_unary(CHECK)(b"\x0a\x05ab", timeout=10)
        want = grpc.StatusCode.INTERNAL if TARGET == "etcd" else grpc.StatusCode.INVALID_ARGUMENT
        self.assertEqual(cm.exception.code(), want)
        self.assertTrue(cm.exception.details().startswith("grpc: error unmarshalling request"))
        self.assertEqual(self.check(""), SERVING)

    def test_watch_first_message_then_open(self):
        for name, want in (("", SERVING), ("x", SERVICE_UNKNOWN)):
            with self.subTest(service=name):
                w = self.watch(name, timeout=2)
                it = iter(w)
                self.assertEqual(status_of(next(it)), want)
                # nothing more, and the server does not end the stream: the
                # client's deadline does
                with self.assertRaises(grpc.RpcError) as cm:
                    next(it)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_watch_cancel(self):
        streams = [self.watch("" if i % 2 else "y") for i in range(20)]
        for i, w in enumerate(streams):
            self.assertEqual(status_of(next(iter(w))), SERVING if i % 2 else SERVICE_UNKNOWN)
        for w in streams:
            w.cancel()
        for w in streams:
            self.assertEqual(w.code(), grpc.StatusCode.CANCELLED)
        self.assertEqual(self.check(""), SERVING)


class HealthOwnServer(unittest.TestCase):
    """Tests that change the server: each its own."""

    def setUp(self):
        self.server = Server(TARGET).start()
        self.chan = grpc.insecure_channel(self.server.endpoint)

    def tearDown(self):
        self.chan.close()
        self.server.cleanup()

    def test_no_auth_check(self):
        # with auth on, health answers without a token and ignores a bad one
        ctl = self.server.etcdctl
        ctl("user", "add", "root:rootpw", "--interactive=false")
        ctl("role", "add", "root")
        ctl("user", "grant-role", "root", "root")
        ctl("auth", "enable")
        check = self.chan.unary_unary(CHECK)
        self.assertEqual(status_of(check(b"", timeout=10)), SERVING)
        self.assertEqual(status_of(check(b"", timeout=10, metadata=(("token", "bogus"),))),
                         SERVING)
        w = self.chan.unary_stream(WATCH)(b"", timeout=10, metadata=(("token", "bogus"),))
        self.assertEqual(status_of(next(iter(w))), SERVING)
        w.cancel()
        # while other calls need one
        with self.assertRaises(grpc.RpcError) as cm:
            self.chan.unary_unary("/etcdserverpb.KV/Range")(b"\x0a\x01k", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_shutdown_with_open_watch(self):
        # SIGTERM: no NOT_SERVING is sent, the connection just goes; the
        # server still shuts down cleanly (stop() checks quorum's exit 0)
        w = self.chan.unary_stream(WATCH)(b"", timeout=30)
        it = iter(w)
        self.assertEqual(status_of(next(it)), SERVING)
        got = []

        def read():
            try:
                for m in it:
                    got.append(status_of(m))
            except grpc.RpcError as e:
                got.append(e.code())

        t = threading.Thread(target=read)
        t.start()
        self.server.stop()
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(got, [grpc.StatusCode.UNAVAILABLE])


if __name__ == "__main__":
    unittest.main(verbosity=2)
