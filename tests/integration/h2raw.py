"""A hand-driven HTTP/2 gRPC client for abuse tests: it decides when (and
whether) to read, and sends no WINDOW_UPDATE unless told, so it can stand in
for a watcher that stops reading, a connection that never finishes its
preface, or one that goes idle. Frames are built by hand (no h2 package in
Debian's python3 here); HPACK literals without Huffman coding only."""
import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8


def frame(ftype, flags, stream, payload=b""):
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, stream) + payload


def _lit(name, value):
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_headers(path, authority="localhost"):
    return b"".join(_lit(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path),
        (":authority", authority), ("content-type", "application/grpc"), ("te", "trailers")))


def grpc_message(pb):
    body = pb.SerializeToString()
    return b"\x00" + struct.pack(">I", len(body)) + body


class Conn:
    """One TCP connection to host:port."""

    def __init__(self, host, port, timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rbuf = b""
        self.next_stream = 1

    def send(self, b):
        self.sock.sendall(b)

    def handshake(self, window=65535):
        """Preface and our SETTINGS (initial stream window |window|)."""
        self.send(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, window)))

    def open_stream(self, path, msg=None, end=False):
        sid = self.next_stream
        self.next_stream += 2
        self.send(frame(HEADERS, 0x4 | (0x1 if end and msg is None else 0), sid,
                        grpc_headers(path)))
        if msg is not None:
            self.send(frame(DATA, 0x1 if end else 0, sid, grpc_message(msg)))
        return sid

    def read_frame(self):
        """The next frame (type, flags, stream, payload); None at EOF."""
        while len(self.rbuf) < 9:
            b = self.sock.recv(1 << 16)
            if not b:
                return None
            self.rbuf += b
        n = (self.rbuf[0] << 16) | (self.rbuf[1] << 8) | self.rbuf[2]
        while len(self.rbuf) < 9 + n:
            b = self.sock.recv(1 << 16)
            if not b:
                return None
            self.rbuf += b
        ftype, flags = self.rbuf[3], self.rbuf[4]
        stream = struct.unpack(">I", self.rbuf[5:9])[0] & 0x7FFFFFFF
        payload = self.rbuf[9:9 + n]
        self.rbuf = self.rbuf[9 + n:]
        return ftype, flags, stream, payload

    def messages(self, stream, decode, until, timeout=60):
        """Reads frames, answering SETTINGS and PING and opening the windows
        as DATA is consumed, and yields decode(bytes) for each gRPC message
        on |stream| until until(msg) is true. Returns at EOF, stream end or
        |timeout| seconds."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(5)
        buf = b""
        while time.monotonic() < deadline:
            try:
                f = self.read_frame()
            except socket.timeout:
                continue
            if f is None:
                return
            ftype, flags, sid, payload = f
            if ftype == SETTINGS and not flags & 1:
                self.send(frame(SETTINGS, 1, 0))
            elif ftype == PING and not flags & 1:
                self.send(frame(PING, 1, 0, payload))
            elif ftype == DATA:
                if payload:
                    inc = struct.pack(">I", len(payload))
                    self.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, sid, inc))
                if sid == stream:
                    buf += payload
                    while len(buf) >= 5:
                        n = struct.unpack(">I", buf[1:5])[0]
                        if len(buf) < 5 + n:
                            break
                        m = decode(buf[5:5 + n])
                        buf = buf[5 + n:]
                        yield m
                        if until(m):
                            return
            elif ftype in (RST, GOAWAY) or (ftype == HEADERS and sid == stream and flags & 1):
                return

    def wait_eof(self, timeout):
        """Reads (and drops) until the server closes: the frame types seen,
        or None if it did not close within |timeout| seconds."""
        deadline = time.monotonic() + timeout
        seen = []
        self.sock.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                b = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return seen
            if not b:
                return seen
            self.rbuf += b
            while len(self.rbuf) >= 9:
                n = (self.rbuf[0] << 16) | (self.rbuf[1] << 8) | self.rbuf[2]
                if len(self.rbuf) < 9 + n:
                    break
                seen.append(self.rbuf[3])
                self.rbuf = self.rbuf[9 + n:]
        return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def rss_anon_kib(pid):
    """Anonymous resident memory (KiB): the heap, not the store's mapped
    file, which the kernel may keep or drop as it likes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0
