/*
 * grpc-stream-client: the client side of the watch and lease benchmarks.
 *
 * Python cannot receive millions of watch events per second and h2load
 * only does unary calls, so this small program speaks gRPC's bidi streams
 * itself: an nghttp2 client session on non-blocking loopback TCP sockets,
 * driven by poll(). Messages are hand-encoded and responses are scanned
 * field by field (no protobuf-c): only the few fields counted are read.
 *
 *   watch:     W watchers on one key prefix, spread over S Watch streams on
 *              C connections; waits for every "created", prints READY, then
 *              counts events per watcher and checks each watcher sees
 *              revisions start_rev, start_rev+1, ... exactly once, in order.
 *   keepalive: K LeaseKeepAlive requests for the leases listed in a file,
 *              round-robin, over S streams with at most D in flight each;
 *              counts responses with TTL > 0.
 *
 * Both print one JSON object on stdout at the end. See bench/watch/README.md.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum mode { MODE_WATCH, MODE_KEEPALIVE };

struct watcher {
	int64_t id;        /* server-assigned watch id, -1 until created */
	int64_t next_rev;  /* revision the next event must carry (0: unknown yet) */
	int64_t count;     /* events received in order */
	int64_t gaps;      /* revisions skipped */
	int64_t dups;      /* an event with the revision just seen */
	int64_t ooo;       /* an event older than the last one seen */
};

struct conn;

struct stream {
	struct conn *conn;
	int32_t id;
	/* outbound bytes the data provider hands to nghttp2 */
	uint8_t *out;
	size_t out_len, out_pos, out_cap;
	bool deferred;
	/* inbound reassembly of length-prefixed gRPC messages */
	uint8_t *in;
	size_t in_len, in_pos, in_cap;
	/* watch: watchers of this stream in creation order, id -> index map */
	int *watchers;
	int n_watchers;
	int n_created;
	int *id_map;       /* id_map[watch_id] = watcher index (ids are small per stream) */
	int64_t id_map_cap;
	/* keepalive */
	int64_t ka_sent, ka_recv;
	int next_lease;
	bool closed;
	char grpc_status[16];
	char grpc_message[200];
};

struct conn {
	int fd;
	nghttp2_session *session;
	bool dead;
};

static enum mode mode;
static struct watcher *watchers;
static int n_watchers = 1000;
static int n_streams = 1;
static int n_conns = 1;
static int64_t events_per_watcher = 1000;
static int64_t start_rev;
static double idle_timeout = 10.0;
static const char *host = "127.0.0.1";
static int port;
static const char *prefix = "bench/watch/";
static int64_t *leases;
static int n_leases;
static int64_t ka_total = 100000;
static int ka_depth = 64;
static struct stream *streams;
static struct conn *conns;
static int64_t complete_watchers; /* watchers that have all their events */
static int64_t total_events, total_ka_ok, total_ka_expired, total_ka_bad_id;
static int64_t canceled, compacted, stream_errors;
static char first_error[300];
static double t_first_event, t_last_event, t_complete;
static double grace = 1.0; /* seconds to keep reading after the last watcher completed */
static int trace_watcher = -1; /* --trace: print this watcher's responses to stderr */

/* CPU seconds (user + system) this process has used so far. */
static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "grpc-stream-client: %s\n", what);
	exit(2);
}

static void note_error(const char *fmt, const char *arg)
{
	if (!first_error[0])
		snprintf(first_error, sizeof(first_error), fmt, arg);
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p)
		die("out of memory");
	return p;
}

/* ---- protobuf: the few encodings and scans needed ---- */

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Reads a varint at *p (< end); returns false on truncation. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

/*
 * Iterates over the top-level fields of a message. For varint fields *val is
 * the value; for length-delimited ones *sub and *sub_len the payload. Returns 1
 * per field, 0 at the end, -1 on malformed input.
 */
static int next_field(const uint8_t **p, const uint8_t *end, uint32_t *field, uint64_t *val,
		      const uint8_t **sub, size_t *sub_len)
{
	uint64_t tag, len;
	if (*p >= end)
		return 0;
	if (!get_varint(p, end, &tag))
		return -1;
	*field = (uint32_t)(tag >> 3);
	switch (tag & 7) {
	case 0:
		return get_varint(p, end, val) ? 1 : -1;
	case 1:
		if (end - *p < 8)
			return -1;
		*p += 8;
		return 1;
	case 5:
		if (end - *p < 4)
			return -1;
		*p += 4;
		return 1;
	case 2:
		if (!get_varint(p, end, &len) || len > (uint64_t)(end - *p))
			return -1;
		*sub = *p;
		*sub_len = (size_t)len;
		*p += len;
		return 1;
	default:
		return -1;
	}
}

/* ---- outbound gRPC messages ---- */

static void stream_append(struct stream *s, const uint8_t *msg, size_t len)
{
	size_t need = s->out_len + 5 + len;
	if (s->out_pos == s->out_len) {
		s->out_pos = s->out_len = 0;
		need = 5 + len;
	}
	if (need > s->out_cap) {
		s->out_cap = need * 2;
		s->out = xrealloc(s->out, s->out_cap);
	}
	uint8_t *o = s->out + s->out_len;
	o[0] = 0;
	o[1] = (uint8_t)(len >> 24);
	o[2] = (uint8_t)(len >> 16);
	o[3] = (uint8_t)(len >> 8);
	o[4] = (uint8_t)len;
	memcpy(o + 5, msg, len);
	s->out_len += 5 + len;
	if (s->deferred && s->id > 0) {
		s->deferred = false;
		nghttp2_session_resume_data(s->conn->session, s->id);
	}
}

static void send_watch_create(struct stream *s)
{
	uint8_t inner[600], msg[620];
	size_t plen = strlen(prefix), n = 0;
	if (plen == 0 || plen > 500)
		die("prefix must be 1..500 bytes");
	inner[n++] = 0x0a; /* key = 1 */
	n += put_varint(inner + n, plen);
	memcpy(inner + n, prefix, plen);
	n += plen;
	inner[n++] = 0x12; /* range_end = 2: prefix with its last byte + 1 */
	n += put_varint(inner + n, plen);
	memcpy(inner + n, prefix, plen);
	inner[n + plen - 1]++;
	n += plen;
	if (start_rev > 0) {
		inner[n++] = 0x18; /* start_revision = 3 */
		n += put_varint(inner + n, (uint64_t)start_rev);
	}
	size_t m = 0;
	msg[m++] = 0x0a; /* WatchRequest.create_request = 1 */
	m += put_varint(msg + m, n);
	memcpy(msg + m, inner, n);
	m += n;
	stream_append(s, msg, m);
}

static void send_keepalive(struct stream *s)
{
	uint8_t msg[16];
	size_t n = 0;
	msg[n++] = 0x08; /* LeaseKeepAliveRequest.ID = 1 */
	n += put_varint(msg + n, (uint64_t)leases[s->next_lease]);
	s->next_lease = (s->next_lease + 1) % n_leases;
	s->ka_sent++;
	stream_append(s, msg, n);
}

static ssize_t data_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
			    size_t length, uint32_t *data_flags, nghttp2_data_source *source,
			    void *user_data)
{
	struct stream *s = source->ptr;
	size_t avail = s->out_len - s->out_pos;
	if (avail == 0) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	if (avail > length)
		avail = length;
	memcpy(buf, s->out + s->out_pos, avail);
	s->out_pos += avail;
	return (ssize_t)avail;
}

/* ---- inbound messages ---- */

static void map_id(struct stream *s, int64_t id, int widx)
{
	if (id < 0 || id > 100000000)
		die("watch id out of range for the id map");
	if (id >= s->id_map_cap) {
		int64_t cap = s->id_map_cap ? s->id_map_cap : 64;
		while (cap <= id)
			cap *= 2;
		s->id_map = xrealloc(s->id_map, (size_t)cap * sizeof(int));
		for (int64_t i = s->id_map_cap; i < cap; i++)
			s->id_map[i] = -1;
		s->id_map_cap = cap;
	}
	s->id_map[id] = widx;
}

/* The mod_revision (KeyValue field 3) of an Event's kv (field 2), or -1. */
static int64_t event_mod_rev(const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len, *sub = NULL;
	size_t sub_len = 0;
	uint32_t f;
	uint64_t v = 0;
	int r;
	while ((r = next_field(&p, end, &f, &v, &sub, &sub_len)) == 1) {
		if (f != 2)
			continue;
		const uint8_t *q = sub, *qend = sub + sub_len, *s2;
		size_t s2_len;
		while ((r = next_field(&q, qend, &f, &v, &s2, &s2_len)) == 1)
			if (f == 3)
				return (int64_t)v;
		return -1;
	}
	return -1;
}

static void on_watch_response(struct stream *s, const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len, *sub = NULL;
	size_t sub_len = 0;
	uint32_t f;
	uint64_t v = 0;
	int64_t id = 0, compact = 0;
	bool created = false, cancel = false;
	int r;
	/* First pass: the scalar fields (they may follow the events on the wire). */
	const uint8_t *q = p;
	while ((r = next_field(&q, end, &f, &v, &sub, &sub_len)) == 1) {
		if (f == 2)
			id = (int64_t)v;
		else if (f == 3)
			created = v != 0;
		else if (f == 4)
			cancel = v != 0;
		else if (f == 5)
			compact = (int64_t)v;
	}
	if (r < 0) {
		stream_errors++;
		note_error("%s", "malformed WatchResponse");
		return;
	}
	if (created) {
		if (s->n_created >= s->n_watchers) {
			stream_errors++;
			note_error("%s", "more created responses than create requests");
			return;
		}
		int widx = s->watchers[s->n_created++];
		watchers[widx].id = id;
		map_id(s, id, widx);
		if (cancel) {
			canceled++;
			note_error("%s", "a watch create was refused (created+canceled)");
		}
		return;
	}
	if (cancel) {
		canceled++;
		note_error("%s", "a watcher was canceled by the server");
	}
	if (compact) {
		compacted++;
		note_error("%s", "compact_revision set: a watcher fell behind compaction");
	}
	if (id < 0 || id >= s->id_map_cap || s->id_map[id] < 0) {
		if (!cancel && !compact) {
			stream_errors++;
			note_error("%s", "events for an unknown watch id");
		}
		return;
	}
	struct watcher *w = &watchers[s->id_map[id]];
	int64_t n = 0;
	bool trace = s->id_map[id] == trace_watcher;
	while ((r = next_field(&p, end, &f, &v, &sub, &sub_len)) == 1) {
		if (f != 11)
			continue;
		int64_t rev = event_mod_rev(sub, sub_len);
		n++;
		if (trace || (trace_watcher == -2 && rev != w->next_rev && w->next_rev != 0))
			fprintf(stderr, "watcher %d (id %" PRId64 "): event rev %" PRId64
				" (expected %" PRId64 ")\n", s->id_map[id], id, rev, w->next_rev);
		if (w->next_rev == 0)
			w->next_rev = rev; /* no --start-rev: the first event sets the base */
		if (rev == w->next_rev) {
			w->count++;
			w->next_rev++;
			complete_watchers += w->count == events_per_watcher;
		} else if (rev > w->next_rev) {
			w->gaps += rev - w->next_rev;
			w->count++;
			w->next_rev = rev + 1;
			complete_watchers += w->count == events_per_watcher;
		} else if (rev == w->next_rev - 1) {
			w->dups++;
		} else {
			w->ooo++;
		}
	}
	if (trace)
		fprintf(stderr, "watcher %d (id %" PRId64 "): response with %" PRId64 " events\n",
			trace_watcher, id, n);
	if (n) {
		double t = now();
		if (total_events == 0)
			t_first_event = t;
		t_last_event = t;
		total_events += n;
		if (complete_watchers == n_watchers && t_complete == 0)
			t_complete = t;
	}
}

static void on_keepalive_response(struct stream *s, const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len, *sub = NULL;
	size_t sub_len = 0;
	uint32_t f;
	uint64_t v = 0;
	int64_t id = 0, ttl = 0;
	int r;
	while ((r = next_field(&p, end, &f, &v, &sub, &sub_len)) == 1) {
		if (f == 2)
			id = (int64_t)v;
		else if (f == 3)
			ttl = (int64_t)v;
	}
	s->ka_recv++;
	if (r < 0 || id == 0)
		total_ka_bad_id++;
	else if (ttl > 0)
		total_ka_ok++;
	else
		total_ka_expired++;
	if (s->ka_sent < ka_total / n_streams + (s - streams < ka_total % n_streams))
		send_keepalive(s);
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
			 const uint8_t *data, size_t len, void *user_data)
{
	struct stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
	if (!s)
		return 0;
	if (s->in_pos == s->in_len)
		s->in_pos = s->in_len = 0;
	if (s->in_len + len > s->in_cap) {
		if (s->in_pos) {
			memmove(s->in, s->in + s->in_pos, s->in_len - s->in_pos);
			s->in_len -= s->in_pos;
			s->in_pos = 0;
		}
		if (s->in_len + len > s->in_cap) {
			s->in_cap = (s->in_len + len) * 2;
			s->in = xrealloc(s->in, s->in_cap);
		}
	}
	memcpy(s->in + s->in_len, data, len);
	s->in_len += len;
	while (s->in_len - s->in_pos >= 5) {
		const uint8_t *h = s->in + s->in_pos;
		size_t mlen = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
		if (h[0] != 0)
			die("compressed gRPC message received");
		if (s->in_len - s->in_pos < 5 + mlen)
			break;
		if (mode == MODE_WATCH)
			on_watch_response(s, h + 5, mlen);
		else
			on_keepalive_response(s, h + 5, mlen);
		s->in_pos += 5 + mlen;
	}
	return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	struct stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (!s)
		return 0;
	if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
		snprintf(s->grpc_status, sizeof(s->grpc_status), "%.*s", (int)valuelen, value);
	else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
		snprintf(s->grpc_message, sizeof(s->grpc_message), "%.*s", (int)valuelen, value);
	return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	struct stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
	if (!s)
		return 0;
	s->closed = true;
	stream_errors++;
	if (!first_error[0])
		snprintf(first_error, sizeof(first_error),
			 "stream closed by server: h2 error %u grpc-status %s %s", error_code,
			 s->grpc_status[0] ? s->grpc_status : "-", s->grpc_message);
	return 0;
}

static ssize_t send_cb(nghttp2_session *session, const uint8_t *data, size_t len, int flags,
		       void *user_data)
{
	struct conn *c = user_data;
	ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return NGHTTP2_ERR_WOULDBLOCK;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return n;
}

/* ---- connections ---- */

static void conn_open(struct conn *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("bad --host (IPv4 address expected)");
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		die("socket failed");
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
		die("connect failed");
	struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
	if (poll(&pfd, 1, 5000) != 1)
		die("connect timed out");
	int err = 0;
	socklen_t el = sizeof(err);
	getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err)
		die("connect refused");

	nghttp2_session_callbacks *cb;
	nghttp2_session_callbacks_new(&cb);
	nghttp2_session_callbacks_set_send_callback(cb, send_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	if (nghttp2_session_client_new(&c->session, cb, c) != 0)
		die("nghttp2_session_client_new failed");
	nghttp2_session_callbacks_del(cb);
	/* Big windows: flow control must not be what limits the event rate. */
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 10000 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24 },
		{ NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20 },
	};
	nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 3);
	nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 30);
}

static void stream_open(struct stream *s, const char *path)
{
	char authority[64];
	snprintf(authority, sizeof(authority), "%s:%d", host, port);
#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }
	nghttp2_nv nv[] = {
		NV(":method", "POST"),
		NV(":scheme", "http"),
		NV(":path", path),
		NV(":authority", authority),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
	};
#undef NV
	nghttp2_data_provider dp = { .source.ptr = s, .read_callback = data_read_cb };
	s->id = nghttp2_submit_request(s->conn->session, NULL, nv, sizeof(nv) / sizeof(nv[0]), &dp,
				       s);
	if (s->id < 0)
		die("nghttp2_submit_request failed");
}

/* One round of I/O on every connection: send what is pending, read what came. */
static void pump(int timeout_ms)
{
	struct pollfd pfd[n_conns];
	for (int i = 0; i < n_conns; i++) {
		struct conn *c = &conns[i];
		if (!c->dead && nghttp2_session_send(c->session) != 0) {
			c->dead = true;
			note_error("%s", "nghttp2_session_send failed");
		}
		pfd[i].fd = c->dead ? -1 : c->fd;
		pfd[i].events = POLLIN | (nghttp2_session_want_write(c->session) ? POLLOUT : 0);
		pfd[i].revents = 0;
	}
	if (poll(pfd, (nfds_t)n_conns, timeout_ms) < 0 && errno != EINTR)
		die("poll failed");
	static uint8_t buf[1 << 18];
	for (int i = 0; i < n_conns; i++) {
		struct conn *c = &conns[i];
		if (c->dead || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		for (int rounds = 0; rounds < 16; rounds++) {
			ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				break;
			if (n <= 0) {
				c->dead = true;
				stream_errors++;
				note_error("%s", "connection closed by server");
				break;
			}
			ssize_t r = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
			if (r < 0) {
				c->dead = true;
				note_error("nghttp2_session_mem_recv: %s", nghttp2_strerror((int)r));
				break;
			}
			if ((size_t)n < sizeof(buf))
				break;
		}
	}
}

static bool any_dead(void)
{
	for (int i = 0; i < n_conns; i++)
		if (conns[i].dead)
			return true;
	return false;
}

/* ---- modes ---- */

static int run_watch(void)
{
	watchers = calloc((size_t)n_watchers, sizeof(*watchers));
	for (int i = 0; i < n_watchers; i++) {
		watchers[i].id = -1;
		watchers[i].next_rev = start_rev;
	}
	for (int i = 0; i < n_streams; i++) {
		struct stream *s = &streams[i];
		s->watchers = calloc((size_t)n_watchers / (size_t)n_streams + 1, sizeof(int));
	}
	/* Watcher w lives on stream w % S; stream s on connection s % C. */
	for (int w = 0; w < n_watchers; w++) {
		struct stream *s = &streams[w % n_streams];
		s->watchers[s->n_watchers++] = w;
	}
	for (int i = 0; i < n_streams; i++) {
		stream_open(&streams[i], "/etcdserverpb.Watch/Watch");
		for (int k = 0; k < streams[i].n_watchers; k++)
			send_watch_create(&streams[i]);
	}
	double t0 = now();
	int created = 0;
	while (created < n_watchers) {
		if (any_dead() || stream_errors || now() - t0 > 30)
			break;
		pump(100);
		created = 0;
		for (int i = 0; i < n_streams; i++)
			created += streams[i].n_created;
	}
	double t_created = now();
	printf("READY %d\n", created);
	fflush(stdout);
	double cpu0 = cpu_now();

	double last_progress = now();
	int64_t last_total = -1;
	int64_t want = (int64_t)n_watchers * events_per_watcher;
	/* Until every watcher has its N events (duplicates don't count). */
	while (created == n_watchers && complete_watchers < n_watchers && !any_dead() &&
	       !stream_errors) {
		pump(100);
		if (total_events != last_total) {
			last_total = total_events;
			last_progress = now();
		} else if (now() - last_progress > idle_timeout) {
			break;
		}
	}
	double t_end = now();
	/* The client's own CPU use: near 100% it, not the server, is the limit. */
	double client_cpu = t_end > t_created ? (cpu_now() - cpu0) / (t_end - t_created) : 0;
	/* Keep reading a little: a duplicate sent after the last expected event
	 * must not go unnoticed. */
	while (t_complete > 0 && now() - t_complete < grace && !any_dead())
		pump(50);

	int64_t min = INT64_MAX, max = 0, gaps = 0, dups = 0, ooo = 0, complete = 0;
	for (int i = 0; i < n_watchers; i++) {
		struct watcher *w = &watchers[i];
		if (w->count < min)
			min = w->count;
		if (w->count > max)
			max = w->count;
		gaps += w->gaps;
		dups += w->dups;
		ooo += w->ooo;
		complete += w->count >= events_per_watcher;
	}
	/* Any gap at the end (a watcher short of N events) is missing events too. */
	int64_t missing = 0;
	for (int i = 0; i < n_watchers; i++)
		if (watchers[i].count < events_per_watcher)
			missing += events_per_watcher - watchers[i].count;
	/* Delivery rate: in-order events from the first event to the moment the
	 * last watcher had all of its events (or the last event, if never). */
	int64_t good = 0;
	for (int i = 0; i < n_watchers; i++)
		good += watchers[i].count;
	double t_stop = t_complete > 0 ? t_complete : t_last_event;
	double span = t_stop > t_first_event ? t_stop - t_first_event : 0;
	bool ok = created == n_watchers && missing == 0 && gaps == 0 && dups == 0 && ooo == 0 &&
		  canceled == 0 && compacted == 0 && stream_errors == 0;
	printf("{\"mode\": \"watch\", \"watchers\": %d, \"streams\": %d, \"conns\": %d, "
	       "\"created\": %d, \"create_secs\": %.3f, \"events_per_watcher\": %" PRId64 ", "
	       "\"start_rev\": %" PRId64 ", \"events\": %" PRId64 ", \"expected\": %" PRId64 ", "
	       "\"secs\": %.3f, \"events_per_sec\": %.0f, \"wait_secs\": %.3f, "
	       "\"min_per_watcher\": %" PRId64 ", \"max_per_watcher\": %" PRId64 ", "
	       "\"complete_watchers\": %" PRId64 ", \"missing\": %" PRId64 ", \"gaps\": %" PRId64
	       ", \"duplicates\": %" PRId64 ", \"out_of_order\": %" PRId64 ", \"canceled\": %" PRId64
	       ", \"compacted\": %" PRId64 ", \"stream_errors\": %" PRId64 ", \"no_loss\": %s, "
	       "\"client_cpu\": %.2f, \"error\": \"%s\"}\n",
	       n_watchers, n_streams, n_conns, created, t_created - t0, events_per_watcher,
	       start_rev, total_events, want, span, span > 0 ? (double)good / span : 0.0,
	       t_end - t_created, min == INT64_MAX ? 0 : min, max, complete, missing, gaps, dups,
	       ooo, canceled, compacted, stream_errors, ok ? "true" : "false", client_cpu,
	       first_error);
	return ok ? 0 : 1;
}

static void read_leases(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("cannot open --leases file");
	long long id;
	int cap = 0;
	while (fscanf(f, "%lld", &id) == 1) {
		if (n_leases == cap) {
			cap = cap ? cap * 2 : 64;
			leases = xrealloc(leases, (size_t)cap * sizeof(*leases));
		}
		leases[n_leases++] = id;
	}
	fclose(f);
	if (n_leases == 0)
		die("no lease ids in --leases file");
}

static int run_keepalive(void)
{
	for (int i = 0; i < n_streams; i++) {
		struct stream *s = &streams[i];
		s->next_lease = (int)((int64_t)i * n_leases / n_streams);
		stream_open(s, "/etcdserverpb.Lease/LeaseKeepAlive");
		int64_t quota = ka_total / n_streams + (i < ka_total % n_streams);
		for (int k = 0; k < ka_depth && s->ka_sent < quota; k++)
			send_keepalive(s);
	}
	double t0 = now(), last_progress = t0;
	int64_t last = -1, n_recv = 0;
	while (n_recv < ka_total && !any_dead() && !stream_errors) {
		pump(100);
		n_recv = 0;
		for (int i = 0; i < n_streams; i++)
			n_recv += streams[i].ka_recv;
		if (n_recv != last) {
			last = n_recv;
			last_progress = now();
		} else if (now() - last_progress > idle_timeout) {
			break;
		}
	}
	double secs = now() - t0;
	bool ok = n_recv == ka_total && total_ka_ok == ka_total && stream_errors == 0;
	printf("{\"mode\": \"keepalive\", \"leases\": %d, \"streams\": %d, \"conns\": %d, "
	       "\"depth\": %d, \"requests\": %" PRId64 ", \"responses\": %" PRId64 ", "
	       "\"ttl_positive\": %" PRId64 ", \"expired\": %" PRId64 ", \"bad\": %" PRId64 ", "
	       "\"secs\": %.3f, \"per_sec\": %.0f, \"stream_errors\": %" PRId64 ", \"ok\": %s, "
	       "\"error\": \"%s\"}\n",
	       n_leases, n_streams, n_conns, ka_depth, ka_total, n_recv, total_ka_ok,
	       total_ka_expired, total_ka_bad_id, secs, secs > 0 ? (double)n_recv / secs : 0.0,
	       stream_errors, ok ? "true" : "false", first_error);
	return ok ? 0 : 1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: grpc-stream-client watch --port P [--watchers W] [--streams S] [--conns C]\n"
		"            [--prefix P] [--events N] [--start-rev R] [--idle-timeout SECS]\n"
		"            [--grace SECS] [--trace WATCHER_INDEX]  (that watcher's events to stderr;\n"
		"            -2: every out-of-sequence event of any watcher)\n"
		"       grpc-stream-client keepalive --port P --leases FILE [--requests K]\n"
		"            [--streams S] [--conns C] [--depth D] [--idle-timeout SECS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "watch") == 0)
		mode = MODE_WATCH;
	else if (strcmp(argv[1], "keepalive") == 0)
		mode = MODE_KEEPALIVE;
	else
		usage();
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'h' },
		{ "port", required_argument, NULL, 'p' },
		{ "watchers", required_argument, NULL, 'w' },
		{ "streams", required_argument, NULL, 's' },
		{ "conns", required_argument, NULL, 'c' },
		{ "prefix", required_argument, NULL, 'x' },
		{ "events", required_argument, NULL, 'n' },
		{ "start-rev", required_argument, NULL, 'r' },
		{ "idle-timeout", required_argument, NULL, 't' },
		{ "leases", required_argument, NULL, 'l' },
		{ "requests", required_argument, NULL, 'k' },
		{ "depth", required_argument, NULL, 'd' },
		{ "trace", required_argument, NULL, 'T' },
		{ "grace", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	const char *lease_file = NULL;
	int o;
	optind = 2;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'w': n_watchers = atoi(optarg); break;
		case 's': n_streams = atoi(optarg); break;
		case 'c': n_conns = atoi(optarg); break;
		case 'x': prefix = optarg; break;
		case 'n': events_per_watcher = atoll(optarg); break;
		case 'r': start_rev = atoll(optarg); break;
		case 't': idle_timeout = atof(optarg); break;
		case 'l': lease_file = optarg; break;
		case 'k': ka_total = atoll(optarg); break;
		case 'd': ka_depth = atoi(optarg); break;
		case 'T': trace_watcher = atoi(optarg); break;
		case 'g': grace = atof(optarg); break;
		default: usage();
		}
	}
	if (port <= 0 || n_watchers <= 0 || n_streams <= 0 || n_conns <= 0 || ka_depth <= 0 ||
	    ka_total <= 0 || events_per_watcher <= 0)
		usage();
	if (mode == MODE_WATCH && n_streams > n_watchers)
		n_streams = n_watchers;
	if (n_conns > n_streams)
		n_conns = n_streams;
	if (mode == MODE_KEEPALIVE) {
		if (!lease_file)
			usage();
		read_leases(lease_file);
	}
	conns = calloc((size_t)n_conns, sizeof(*conns));
	streams = calloc((size_t)n_streams, sizeof(*streams));
	for (int i = 0; i < n_conns; i++)
		conn_open(&conns[i]);
	for (int i = 0; i < n_streams; i++)
		streams[i].conn = &conns[i % n_conns];
	return mode == MODE_WATCH ? run_watch() : run_keepalive();
}
