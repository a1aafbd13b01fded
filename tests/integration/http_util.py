"""HTTP/1.1 on the client port, spoken byte by byte: a small client for
test_http.py that sees everything a server sends (status line, every header,
chunk framing, trailers, the exact body) and can do what a library would not
(pipelining, HTTP/1.0, Expect, a request cut in half, a body left open).

Only the standard library (socket, base64, json).

    c = Conn(endpoint)                     # "127.0.0.1:PORT"
    r = c.call("POST", "/v3/kv/range", {"key": b64("k")})
    r.status, r.header("content-type"), r.json(), r.body, r.chunked
    st = Stream(endpoint, "/v3/watch", {"create_request": {...}})
    st.next()                              # the next {"result": ...} as a dict
"""
import base64
import json
import socket
import time


def b64(s):
    """base64 of a str (UTF-8) or bytes, as the gateway writes bytes fields"""
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def unb64(s):
    return base64.b64decode(s)


def hostport(endpoint):
    h, p = endpoint.rsplit(":", 1)
    return h, int(p)


class Closed(Exception):
    """the server closed (or reset) the connection"""


class Timeout(Exception):
    """nothing (more) arrived in time"""


class Response:
    def __init__(self, version, status, reason, headers):
        self.version, self.status, self.reason = version, status, reason
        self.headers = headers          # [(name, value)] in the order sent
        self.body = b""
        self.chunked = False
        self.chunks = []                # the chunk sizes as framed (chunked only)
        self.trailers = []
        self.closed = False             # the server closed the connection after it

    def header(self, name, default=None):
        n = name.lower()
        for k, v in self.headers:
            if k.lower() == n:
                return v
        return default

    def header_all(self, name):
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def json(self):
        return json.loads(self.body)

    def messages(self):
        """a streamed body as its newline-delimited JSON objects"""
        return [json.loads(x) for x in self.body.split(b"\n") if x.strip()]

    def __repr__(self):
        return "<%s %d %s %r%s>" % (self.version, self.status, self.reason, self.body[:300],
                                    " chunked" if self.chunked else "")


class Conn:
    """One TCP connection to the client port. Requests are written as given;
    responses are read one at a time, exactly."""

    def __init__(self, endpoint, timeout=10.0):
        self.endpoint = endpoint
        self.timeout = timeout
        self.sock = socket.create_connection(hostport(endpoint), timeout=timeout)
        self.buf = b""
        self.eof = False

    # ---- writing ----
    def send(self, data):
        self.sock.sendall(data)

    @staticmethod
    def encode_request(method, path, body=None, headers=(), version="HTTP/1.1", host=True,
                       length=True):
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        lines = ["%s %s %s" % (method, path, version)]
        if host:
            lines.append("Host: quorum-test")
        lines += ["%s: %s" % kv for kv in headers]
        if body is not None and length:
            lines.append("Content-Length: %d" % len(body))
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")

    def request(self, method, path, body=None, headers=(), **kw):
        self.send(self.encode_request(method, path, body, headers, **kw))

    def call(self, method, path, body=None, headers=(), timeout=None, **kw):
        """request + read_response"""
        self.request(method, path, body, headers, **kw)
        return self.read_response(timeout=timeout, head=(method == "HEAD"))

    # ---- reading ----
    def _fill(self, deadline):
        if self.eof:
            raise Closed("connection closed by the server")
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout("no data within the deadline")
        self.sock.settimeout(left)
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            raise Timeout("no data within the deadline")
        except (ConnectionResetError, BrokenPipeError):
            self.eof = True
            raise Closed("connection reset by the server")
        if not d:
            self.eof = True
            raise Closed("connection closed by the server")
        self.buf += d

    def _line(self, deadline, limit=1 << 20):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit:
                raise AssertionError("line longer than %d bytes" % limit)
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def read_head(self, timeout=None):
        """status line and headers; interim 1xx responses are returned too"""
        deadline = time.monotonic() + (timeout or self.timeout)
        status = self._line(deadline).decode("latin-1")
        parts = status.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise AssertionError("not an HTTP status line: %r" % status)
        headers = []
        while True:
            line = self._line(deadline).decode("latin-1")
            if not line:
                break
            k, v = line.split(":", 1)
            headers.append((k.strip(), v.strip()))
        return Response(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else "", headers)

    def read_final_head(self, timeout=None):
        """read_head, skipping interim 1xx answers"""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            r = self.read_head(deadline - time.monotonic())
            if r.status >= 200:
                return r

    def read_chunk(self, deadline):
        """one chunk's data (b"" for the last chunk, after which trailers are read)"""
        line = self._line(deadline).decode("latin-1")
        size = int(line.split(";")[0].strip(), 16)
        if size == 0:
            return b""
        data = self._exact(size, deadline)
        if self._exact(2, deadline) != b"\r\n":
            raise AssertionError("chunk of %d bytes not followed by CRLF" % size)
        return data

    def read_response(self, timeout=None, head=False, skip_interim=True):
        """one whole response: Content-Length, chunked (trailers kept) or until EOF"""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            r = self.read_head(timeout=deadline - time.monotonic())
            if not (skip_interim and 100 <= r.status < 200):
                break
        if head or r.status in (204, 304):
            return r
        self.read_body(r, deadline - time.monotonic())
        return r

    def read_response_body(self, r, timeout=None):
        """the body of the response whose head |r| was read with read_head"""
        return self.read_body(r, timeout).body

    def read_body(self, r, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        te = (r.header("transfer-encoding") or "").lower()
        cl = r.header("content-length")
        if "chunked" in te:
            r.chunked = True
            while True:
                d = self.read_chunk(deadline)
                if not d:
                    break
                r.chunks.append(len(d))
                r.body += d
            while True:
                line = self._line(deadline).decode("latin-1")
                if not line:
                    break
                k, v = line.split(":", 1)
                r.trailers.append((k.strip(), v.strip()))
        elif cl is not None:
            r.body = self._exact(int(cl), deadline)
        else:
            try:
                while True:
                    self._fill(deadline)
            except Closed:
                pass
            r.body, self.buf = self.buf, b""
            r.closed = True
        conn = (r.header("connection") or "").lower()
        if conn == "close" or (r.version == "HTTP/1.0" and conn != "keep-alive"):
            r.closed = True
        return r

    def closed_by_peer(self, timeout=2.0):
        """True if the server closes (FIN or RST) within |timeout| without sending
        anything more; False if the connection stays open that long. Data sent
        instead raises AssertionError."""
        deadline = time.monotonic() + timeout
        try:
            self._fill(deadline)
        except Closed:
            return True
        except Timeout:
            return False
        raise AssertionError("unexpected data: %r" % self.buf[:300])

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def call(endpoint, method, path, body=None, headers=(), timeout=10.0, **kw):
    """one request on a fresh connection"""
    with Conn(endpoint, timeout=timeout) as c:
        return c.call(method, path, body, headers, timeout=timeout, **kw)


def post(endpoint, path, body=None, token=None, headers=(), timeout=10.0):
    """POST |body| (a dict is sent as JSON; None as an empty body)"""
    h = list(headers)
    if token is not None:
        h.append(("Authorization", token))
    return call(endpoint, "POST", path, {} if body is None else body, h, timeout=timeout)


class Stream:
    """A streaming call (watch, lease/keepalive, election/observe, snapshot):
    the request body is sent whole (Content-Length) and the response read
    incrementally, de-chunked, one newline-delimited JSON object at a time."""

    def __init__(self, endpoint, path, bodies, headers=(), timeout=10.0, version="HTTP/1.1"):
        if isinstance(bodies, dict):
            bodies = [bodies]
        data = "".join(json.dumps(b) if not isinstance(b, str) else b for b in bodies)
        self.conn = Conn(endpoint, timeout=timeout)
        self.conn.request("POST", path, data, headers, version=version)
        self.head = None
        self.text = b""
        self.ended = False          # the last chunk (or EOF) was seen
        self.chunks = []
        self.timeout = timeout

    def read_head(self, timeout=None):
        """the final status line and headers (interim 1xx answers, which a client
        must accept even unasked, are skipped)"""
        deadline = time.monotonic() + (timeout or self.timeout)
        while self.head is None or 100 <= self.head.status < 200:
            self.head = self.conn.read_head(deadline - time.monotonic())
        return self.head

    def _more(self, deadline):
        h = self.head
        if "chunked" in (h.header("transfer-encoding") or "").lower():
            d = self.conn.read_chunk(deadline)
            if not d:
                while self.conn._line(deadline):      # trailers
                    pass
                self.ended = True
            else:
                self.chunks.append(d)
            self.text += d
        elif h.header("content-length") is not None:
            self.text += self.conn._exact(int(h.header("content-length")), deadline)
            self.ended = True
        else:                               # HTTP/1.0: the body ends at the close
            if not self.conn.buf:
                try:
                    self.conn._fill(deadline)
                except Closed:
                    self.ended = True
            self.text += self.conn.buf
            self.conn.buf = b""

    def next_raw(self, timeout=None):
        """the next newline-terminated line as bytes (without the newline); at
        the end of the stream any unterminated rest (b"" if none)"""
        deadline = time.monotonic() + (timeout or self.timeout)
        self.read_head(deadline - time.monotonic())
        while b"\n" not in self.text:
            if self.ended:
                rest, self.text = self.text, b""
                return rest
            self._more(deadline)
        line, self.text = self.text.split(b"\n", 1)
        return line

    def next(self, timeout=None):
        """the next message as a dict; None at the end of the stream"""
        line = self.next_raw(timeout)
        if not line and self.ended:
            return None
        return json.loads(line)

    def finish(self, timeout=None):
        """every remaining message until the stream ends"""
        out = []
        while True:
            m = self.next(timeout)
            if m is None:
                return out
            out.append(m)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- comparing two servers' answers ----

# fields that name the cluster, the member, the term or a time, or depend on
# the storage format: replaced by a placeholder that keeps their JSON type
VOLATILE = {"cluster_id", "member_id", "raft_term", "raftTerm", "leader", "dbSize",
            "dbSizeInUse", "raftIndex", "raftAppliedIndex", "hash", "token", "blob",
            "remaining_bytes"}


def normalise(obj, ids=None, path=""):
    """A JSON answer made comparable between two servers: cluster/member ids,
    terms, sizes, indexes, hashes and tokens become "<name:type>"; lease and
    member IDs become "<id#n>" numbered in order of appearance (|ids| maps
    the real ones, shared across one run so a lease named twice stays the
    same); lock/election keys (name/<hex lease>) get the same treatment."""
    if ids is None:
        ids = {}

    def idname(v):
        if v not in ids:
            ids[v] = "<id#%d>" % (len(ids) + 1)
        return ids[v]

    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in VOLATILE:
                out[k] = "<%s:%s>" % (k, type(v).__name__)
            elif k in ("ID", "lease", "memberID") and isinstance(v, str) and v not in ("0",):
                out[k] = idname(v)
            elif k == "key" and isinstance(v, str):
                out[k] = _norm_key(v, idname)
            elif k == "members" and isinstance(v, list):
                out[k] = sorted((normalise(m, ids, path + "/" + k) for m in v),
                                key=lambda m: json.dumps(m, sort_keys=True))
            elif k in ("peerURLs", "clientURLs"):
                out[k] = ["<url>" for _ in v]
            else:
                out[k] = normalise(v, ids, path + "/" + k)
        return out
    if isinstance(obj, list):
        return [normalise(x, ids, path) for x in obj]
    return obj


def _norm_key(v, idname):
    """a lock or election key "<name>/<lease hex>" -> "<name>/<id#n>" """
    try:
        raw = base64.b64decode(v, validate=True)
    except ValueError:
        return v
    if b"/" in raw:
        name, tail = raw.rsplit(b"/", 1)
        if tail and all(c in b"0123456789abcdef" for c in tail) and len(tail) >= 8:
            return "%s/%s" % (name.decode(errors="replace"), idname(str(int(tail, 16))))
    return v


def json_type(v):
    """int64/uint64 come as JSON strings of digits; uint32 (hash) as numbers"""
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return "int-string"
    return type(v).__name__
