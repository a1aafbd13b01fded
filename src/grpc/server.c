/* grpc/server.c: the gRPC server proper. Listeners accept TCP connections;
 * each connection owns an nghttp2 server session fed with the bytes read
 * (nghttp2_session_mem_recv) and drained into one output buffer
 * (nghttp2_session_mem_send) that goes out in a single uv_write. Each HTTP/2
 * stream is a grpc_call; its request DATA runs through the framing decoder
 * (frame.c) straight into the method's on_message.
 *
 * Output coalescing: anything that queues frames marks the connection
 * dirty; a uv_prepare handle (run once per loop pass, just before the loop
 * blocks for I/O) serializes every dirty connection and issues one write.
 * While a write is in flight no more frames are taken from nghttp2: the
 * response bytes wait in each call's queue, which is what
 * grpc_call_pending_bytes reports, and nghttp2's flow control bounds the
 * rest. When the socket is backed up, reading stops until the write
 * completes, so a client that does not read cannot make us buffer.
 *
 * Life cycles follow libuv: connection memory is freed only in its close
 * callback, the server's when its last handle is closed. nghttp2 sessions
 * are never deleted from inside their own callbacks: a close requested
 * there (in_session > 0) is carried out when the session call returns. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "base/err.h"
#include "base/log.h"
#include "base/metrics.h"
#include "grpc/grpc_int.h"
#include "tls/tls.h"

/* a drained response queue larger than this is freed, not kept */
#define OUT_KEEP_BYTES (64u << 10)
#define READ_BUF_SIZE (256 * 1024)
#define FLUSH_MAX (1024 * 1024)        /* bytes serialized per write */
#define WRITE_BACKLOG (64 * 1024)      /* unwritten bytes that stop reading */
#define STREAM_WINDOW (1024 * 1024)    /* our SETTINGS_INITIAL_WINDOW_SIZE */
#define CONN_WINDOW (16 * 1024 * 1024) /* our connection receive window */
#define MAX_STORED_HEADERS 64
/* memory all calls of one connection may hold in partly received messages;
 * beyond it the call that grows it fails RESOURCE_EXHAUSTED */
#define CONN_GATHER_MAX ((size_t)256 * 1024 * 1024)
#define INLINE_HEADERS 8
/* a TLS client must complete its handshake within this (half a hello
 * would otherwise hold a connection for ever) */
#define TLS_HANDSHAKE_MS 10000

struct hdr {
    nghttp2_rcbuf *name;
    nghttp2_rcbuf *value;
};

/* A method's metrics (go-grpc-prometheus's, as etcd registers them):
 * counted where a call is bound to its method, receives, sends and ends,
 * on the thread of the call's loop. */
#define GRPC_CODES 17
struct grpc_mstats {
    metric_t started, received, sent;
    metric_t handled[GRPC_CODES];
    struct metrics_series *seconds; /* --metrics=extensive only */
};

struct grpc_call {
    grpc_conn *conn; /* NULL for a local call */
    grpc_server *srv;
    int32_t stream_id;
    const struct grpc_method *method; /* NULL until dispatched */
    const struct grpc_mstats *ms;     /* its metrics; NULL: not counted */
    uint64_t t0;                      /* when it started (handling seconds) */
    grpc_call *prev, *next;           /* conn->calls */
    void *data;

    struct grpc_decoder dec;
    struct buf out; /* framed response messages not yet given to nghttp2 */
    size_t out_off; /* first byte of |out| not yet given */

    nghttp2_rcbuf *path;
    nghttp2_rcbuf *http_method;
    struct hdr *hdrs; /* hdr_inline or malloc'd */
    size_t nhdrs, hdrs_cap;
    struct hdr hdr_inline[INLINE_HEADERS];

    int status; /* set by finish */
    char *tmsg; /* percent-encoded grpc-message for the trailers */
    size_t tmsg_len;

    unsigned headers_sent : 1;
    unsigned finished : 1; /* trailers decided; sends fail */
    unsigned closed : 1;   /* on_close delivered */
    unsigned got_message : 1;
    unsigned deferred : 1; /* nghttp2 data item is deferred */
    unsigned handled : 1;  /* counted in grpc_server_handled_total */

    /* a local call (grpc_call_open_local): its face's outputs and state */
    const struct grpc_local_ops *lops;
    void *lctx;
    char *ltoken;
    size_t ltoken_len;
    grpc_call *lprev, *lnext; /* srv->locals */
    grpc_call *reap_next;     /* srv->reap */
    unsigned lreaping : 1;    /* on srv->reap: on_close and free next pass */
    /* input waiting for the next pass: [u32 length][message]... */
    struct buf lin;
    unsigned lhalf : 1;   /* then the half-close */
    unsigned lqueued : 1; /* on srv->lq */
    unsigned lmsgs;       /* messages given so far */
    grpc_call *lq_next;

    /* a plain HTTP request over HTTP/2 (grpc_http1.h2_request) */
    unsigned raw : 1;
    unsigned raw_too_big : 1;
    void *rawh;       /* the handler's state, once the request is complete */
    struct buf rbody; /* the request body being gathered */
};

struct listener {
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe; /* a unix socket (grpc_server_listen_unix) */
    };
    grpc_server *srv;
    bool tls;
    bool unix_sock;
    char *path; /* unix: removed when the listener closes */
    struct listener *next;
};

struct grpc_conn {
    grpc_server *srv;
    struct tls_stream ts; /* the socket, with TLS or without */
    int is_mem;
    nghttp2_session *sess;
    grpc_conn *prev, *next;   /* srv->conns */
    grpc_conn *dprev, *dnext; /* srv->dirty */
    int dirty;
    grpc_call *calls;
    struct buf obuf; /* frames being gathered */
    struct buf wbuf; /* frames being written */
    uv_write_t wreq;
    int writing;
    int in_session; /* depth of nghttp2 calls on the stack */
    int want_close; /* close once in_session drops to 0 */
    int closed;     /* calls closed, session deleted */
    /* 0 reading; 1 stopped while a write is backed up (on_write resumes);
     * 2 stopped for good; 3 paused by the HTTP/1.1 handler */
    int read_stopped;
    int linked;    /* in srv->conns */
    size_t gather; /* sum of the calls' decoder buffer capacities */
    /* what the connection speaks, from its first bytes (grpc_http1) */
    enum { MODE_SNIFF, MODE_H2, MODE_H1 } mode;
    uint8_t sniff[24]; /* first bytes while they match HTTP/2's preface */
    size_t nsniff;
    void *h1;          /* the HTTP/1.1 handler's state (MODE_H1) */
    int shutdown;      /* MODE_H1: close once the output is written */
    int counted;       /* holds one of srv's max_conns places */
    int idle_goaway;   /* sent GOAWAY for being idle (grpc_server_options) */
    uint64_t born_ms, read_ms; /* uv_now at accept, at the last bytes read */
    uint64_t nread;            /* bytes read so far (up to the preface's) */
    /* keepalive (grpc-go's server): */
    uint64_t ka_deadline;     /* next check (uv_now ms) */
    unsigned ka_activity : 1; /* read something since the last check */
    unsigned ka_ping_sent : 1;
    unsigned ping_seen : 1;     /* last_ping_at is set */
    unsigned reset_strikes : 1; /* we sent HEADERS or DATA since the last PING */
    unsigned calm : 1;          /* GOAWAY ENHANCE_YOUR_CALM queued: close once sent */
    unsigned calm_sent : 1;
    unsigned ping_strikes;
    uint64_t last_ping_at;
};

struct grpc_server {
    uv_loop_t *loop;
    const struct grpc_method *methods;
    size_t n;
    const struct grpc_method **sorted; /* by path, for binary search */
    size_t max_recv;
    size_t max_send;
    uint32_t max_streams;
    uint64_t ka_min_time, ka_time, ka_timeout; /* ms */
    uv_timer_t ka_timer;
    tls_ctx *tls;
    const struct grpc_http1 *http1;
    bool http_only;
    const struct grpc_mstats *mstats; /* per method */
    void *data;
    struct listener *listeners;
    grpc_call *locals; /* open local calls */
    grpc_call *reap;   /* local calls to close and free next pass */
    grpc_call *lq_head, *lq_tail; /* local calls with input to deliver */
    uv_idle_t lq_idle;            /* runs while there is (or just was) local input */
    grpc_conn *conns;
    grpc_conn *dirty;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    uv_prepare_t prepare;
    uint8_t *rbuf;
    int rbuf_busy;
    int closing;
    unsigned handles; /* open uv handles: listeners, socket conns, prepare */
    unsigned max_conns, own_count, *conn_count; /* grpc_server_options */
    uint64_t preface_ms, idle_ms;
    uv_timer_t sweep; /* the bounds' check, once a second */
    uint64_t refused, refused_logged_ms;
    void (*close_cb)(void *arg);
    void *close_arg;
};

static void conn_close(grpc_conn *c);
static void conn_flush(grpc_conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/* ---- small helpers ---- */

static int vec_eq(nghttp2_vec v, const char *s)
{
    size_t n = strlen(s);
    return v.len == n && memcmp(v.base, s, n) == 0;
}

static nghttp2_vec rc_vec(nghttp2_rcbuf *rc)
{
    if (rc == NULL) {
        nghttp2_vec v = {(uint8_t *)"", 0};
        return v;
    }
    return nghttp2_rcbuf_get_buf(rc);
}

/* go_quote writes |v| quoted like Go's %q for the ASCII cases that matter
 * (", \ and non-printable bytes escaped) into |out| of |cap| bytes. */
static void go_quote(nghttp2_vec v, char *out, size_t cap)
{
    size_t o = 0;
    if (cap < 8)
        return;
    out[o++] = '"';
    for (size_t i = 0; i < v.len && o + 6 < cap; i++) {
        unsigned char c = v.base[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = 0;
}

static void mark_dirty(grpc_conn *c)
{
    if (c->dirty || c->closed || c->is_mem)
        return;
    grpc_server *srv = c->srv;
    c->dirty = 1;
    c->dprev = NULL;
    c->dnext = srv->dirty;
    if (srv->dirty)
        srv->dirty->dprev = c;
    srv->dirty = c;
}

static void unmark_dirty(grpc_conn *c)
{
    if (!c->dirty)
        return;
    if (c->dprev)
        c->dprev->dnext = c->dnext;
    else
        c->srv->dirty = c->dnext;
    if (c->dnext)
        c->dnext->dprev = c->dprev;
    c->dirty = 0;
    c->dprev = c->dnext = NULL;
}

static void maybe_free_server(grpc_server *srv)
{
    if (!srv->closing || srv->handles > 0)
        return;
    void (*cb)(void *) = srv->close_cb;
    void *arg = srv->close_arg;
    if (srv->cbs)
        nghttp2_session_callbacks_del(srv->cbs);
    if (srv->opt)
        nghttp2_option_del(srv->opt);
    free(srv->sorted);
    free(srv->rbuf);
    free(srv);
    if (cb)
        cb(arg);
}

/* ---- metrics ----
 *
 * grpc_server_{started,handled,msg_received,msg_sent}_total by method (and
 * code), grpc_server_handling_seconds with --metrics=extensive, and etcd's
 * etcd_network_client_grpc_{received,sent}_bytes_total (request and
 * response message sizes). Every face passes here: HTTP/2 streams on any
 * loop and the local calls of the JSON gateway and the v2 emulation (as
 * etcd's gateway is a gRPC client of its own server); the probes of
 * /health are not counted (etcd's /health makes no gRPC call). A call
 * that ends without a status (the client went away) counts as Canceled. */

static const char *const code_names[GRPC_CODES] = {
    "OK",           "Canceled",           "Unknown",       "InvalidArgument",
    "DeadlineExceeded", "NotFound",       "AlreadyExists", "PermissionDenied",
    "ResourceExhausted", "FailedPrecondition", "Aborted",  "OutOfRange",
    "Unimplemented", "Internal",          "Unavailable",   "DataLoss",
    "Unauthenticated"};
static const char *const type_names[] = {
    [GRPC_UNARY] = "unary",
    [GRPC_SERVER_STREAMING] = "server_stream",
    [GRPC_CLIENT_STREAMING] = "client_stream",
    [GRPC_BIDI_STREAMING] = "bidi_stream",
};

static metric_t recv_bytes, sent_bytes;

/* Method tables already registered (the front loops share one): their
 * metrics are read-only once made and shared by every server of the
 * table. */
struct mstats_cache {
    struct mstats_cache *next;
    uint64_t key; /* the paths and kinds of the table */
    size_t n;
    bool extensive;
    struct grpc_mstats *ms;
};
static struct mstats_cache *mcache; /* servers are made on one thread */

static uint64_t table_key(const struct grpc_method *methods, size_t n)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        for (const char *p = methods[i].path; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211u;
        h = (h ^ (uint8_t)methods[i].kind) * 1099511628211u;
    }
    return h;
}

static const struct grpc_mstats *register_metrics(const struct grpc_method *methods, size_t n,
                                                  bool extensive)
{
    uint64_t key = table_key(methods, n);
    for (struct mstats_cache *c = mcache; c != NULL; c = c->next)
        if (c->key == key && c->n == n && c->extensive == extensive)
            return c->ms;
    struct mstats_cache *c = calloc(1, sizeof(*c));
    struct grpc_mstats *ms = calloc(n ? n : 1, sizeof(*ms));
    if (c == NULL || ms == NULL) {
        free(c);
        free(ms);
        return NULL;
    }
    recv_bytes = metrics_counter("etcd_network_client_grpc_received_bytes_total",
                                 "The total number of bytes received from grpc clients.");
    sent_bytes = metrics_counter("etcd_network_client_grpc_sent_bytes_total",
                                 "The total number of bytes sent to grpc clients.");
    const char *const l3[] = {"grpc_type", "grpc_service", "grpc_method", NULL};
    const char *const l4[] = {"grpc_type", "grpc_service", "grpc_method", "grpc_code", NULL};
    struct metrics_family *started = metrics_family(
        "grpc_server_started_total", "Total number of RPCs started on the server.",
        METRICS_COUNTER, l3, NULL, 0);
    struct metrics_family *handled = metrics_family(
        "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        METRICS_COUNTER, l4, NULL, 0);
    struct metrics_family *received = metrics_family(
        "grpc_server_msg_received_total",
        "Total number of RPC stream messages received on the server.", METRICS_COUNTER, l3,
        NULL, 0);
    struct metrics_family *sent = metrics_family(
        "grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.",
        METRICS_COUNTER, l3, NULL, 0);
    /* go-grpc-prometheus's DefBuckets */
    static const double secs[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    struct metrics_family *seconds =
        extensive ? metrics_family("grpc_server_handling_seconds",
                                   "Histogram of response latency (seconds) of gRPC that had "
                                   "been application-level handled by the server.",
                                   METRICS_HISTOGRAM, l3, secs, sizeof(secs) / sizeof(secs[0]))
                  : NULL;
    for (size_t i = 0; i < n; i++) {
        const char *path = methods[i].path[0] == '/' ? methods[i].path + 1 : methods[i].path;
        const char *slash = strrchr(path, '/');
        char service[256];
        snprintf(service, sizeof(service), "%.*s", slash ? (int)(slash - path) : 0, path);
        const char *v[] = {type_names[methods[i].kind], service, slash ? slash + 1 : path, NULL,
                           NULL};
        ms[i].started = metrics_slot(metrics_series(started, v));
        ms[i].received = metrics_slot(metrics_series(received, v));
        ms[i].sent = metrics_slot(metrics_series(sent, v));
        ms[i].seconds = metrics_series(seconds, v);
        for (int k = 0; k < GRPC_CODES; k++) {
            v[3] = code_names[k];
            ms[i].handled[k] = metrics_slot(metrics_series(handled, v));
        }
    }
    c->key = key;
    c->n = n;
    c->extensive = extensive;
    c->ms = ms;
    c->next = mcache;
    mcache = c;
    return ms;
}

static void call_started(grpc_call *call)
{
    const struct grpc_mstats *ms = call->srv->mstats;
    if (ms == NULL)
        return;
    call->ms = &ms[call->method - call->srv->methods];
    metrics_inc(call->ms->started);
    if (call->ms->seconds != NULL)
        call->t0 = metrics_now_ns();
}

static void call_handled(grpc_call *call, int status)
{
    if (call->ms == NULL || call->handled)
        return;
    call->handled = 1;
    metrics_inc(call->ms->handled[status >= 0 && status < GRPC_CODES ? status : 2]);
    if (call->ms->seconds != NULL)
        metrics_observe_since(call->ms->seconds, call->t0);
}

static void call_received(grpc_call *call, size_t len)
{
    if (call->ms == NULL)
        return;
    metrics_inc(call->ms->received);
    metrics_add(recv_bytes, len);
}

static void call_sent(grpc_call *call, size_t len)
{
    if (call->ms == NULL)
        return;
    metrics_inc(call->ms->sent);
    metrics_add(sent_bytes, len);
}

/* ---- calls ---- */

static grpc_call *call_new(grpc_conn *c, int32_t stream_id)
{
    grpc_call *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return NULL;
    call->conn = c;
    call->srv = c->srv;
    call->stream_id = stream_id;
    call->hdrs = call->hdr_inline;
    call->hdrs_cap = INLINE_HEADERS;
    grpc_decoder_init(&call->dec, c->srv->max_recv);
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    return call;
}

/* call_destroy delivers on_close (if the call reached a method and has not
 * had it yet) and frees the call. */
static void call_destroy(grpc_call *call)
{
    grpc_conn *c = call->conn;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    if (c->sess)
        nghttp2_session_set_stream_user_data(c->sess, call->stream_id, NULL);
    if (call->method && !call->closed) {
        call_handled(call, GRPC_STATUS_CANCELLED); /* no status was sent */
        call->closed = 1;
        call->finished = 1;
        if (call->method->on_close)
            call->method->on_close(call);
    }
    if (call->rawh != NULL) {
        void *h = call->rawh;
        call->rawh = NULL;
        call->closed = 1;
        call->finished = 1;
        c->srv->http1->h2_closed(h);
    }
    buf_free(&call->rbody);
    c->gather -= call->dec.msg.cap;
    grpc_decoder_free(&call->dec);
    buf_free(&call->out);
    if (call->path)
        nghttp2_rcbuf_decref(call->path);
    if (call->http_method)
        nghttp2_rcbuf_decref(call->http_method);
    for (size_t i = 0; i < call->nhdrs; i++) {
        nghttp2_rcbuf_decref(call->hdrs[i].name);
        nghttp2_rcbuf_decref(call->hdrs[i].value);
    }
    if (call->hdrs != call->hdr_inline)
        free(call->hdrs);
    free(call->tmsg);
    free(call);
}

static int header_add(grpc_call *call, nghttp2_rcbuf *name, nghttp2_rcbuf *value)
{
    if (call->nhdrs == call->hdrs_cap) {
        if (call->hdrs_cap >= MAX_STORED_HEADERS)
            return 0; /* beyond the cap headers are ignored */
        size_t cap = call->hdrs_cap * 2;
        struct hdr *h = malloc(cap * sizeof(*h));
        if (h == NULL)
            return -ENOMEM;
        memcpy(h, call->hdrs, call->nhdrs * sizeof(*h));
        if (call->hdrs != call->hdr_inline)
            free(call->hdrs);
        call->hdrs = h;
        call->hdrs_cap = cap;
    }
    nghttp2_rcbuf_incref(name);
    nghttp2_rcbuf_incref(value);
    call->hdrs[call->nhdrs].name = name;
    call->hdrs[call->nhdrs].value = value;
    call->nhdrs++;
    return 0;
}

static const nghttp2_rcbuf *header_find(const grpc_call *call, const char *name)
{
    for (size_t i = 0; i < call->nhdrs; i++)
        if (vec_eq(nghttp2_rcbuf_get_buf(call->hdrs[i].name), name))
            return call->hdrs[i].value;
    return NULL;
}

#define NV_STATIC(n, v)                                                                            \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,                              \
            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                           \
    }

static ssize_t data_read(nghttp2_session *sess, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user);

static int submit_trailers(grpc_call *call)
{
    char st[16];
    int stlen = snprintf(st, sizeof(st), "%d", call->status);
    nghttp2_nv nv[2] = {
        {(uint8_t *)"grpc-status", (uint8_t *)st, 11, (size_t)stlen, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)call->tmsg, 12, call->tmsg_len,
         NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    int rv = nghttp2_submit_trailer(call->conn->sess, call->stream_id, nv, call->tmsg ? 2 : 1);
    free(call->tmsg);
    call->tmsg = NULL;
    return rv;
}

/* respond_now sends a trailers-only response (HEADERS with END_STREAM)
 * carrying |http_status|, |status| and the encoded |msg| (may be NULL). */
static void respond_now(grpc_call *call, const char *http_status, int status, const char *msg,
                        size_t msg_len)
{
    char st[16];
    int stlen = snprintf(st, sizeof(st), "%d", status);
    nghttp2_nv nv[4] = {
        {(uint8_t *)":status", (uint8_t *)http_status, 7, strlen(http_status),
         NGHTTP2_NV_FLAG_NO_COPY_NAME},
        NV_STATIC("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)st, 11, (size_t)stlen, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        {(uint8_t *)"grpc-message", (uint8_t *)msg, 12, msg_len, NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    call->headers_sent = 1;
    call->finished = 1;
    if (nghttp2_submit_response(call->conn->sess, call->stream_id, nv, msg ? 4 : 3, NULL) != 0)
        nghttp2_submit_rst_stream(call->conn->sess, NGHTTP2_FLAG_NONE, call->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
    mark_dirty(call->conn);
}

/* encode_message percent-encodes |message| into a new allocation stored in
 * *out (NULL for an empty message). */
static int encode_message(const char *message, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (message == NULL || *message == 0)
        return 0;
    size_t n = strlen(message);
    size_t elen = grpc_percent_encoded_len(message, n);
    char *e = malloc(elen);
    if (e == NULL)
        return -ENOMEM;
    *out_len = grpc_percent_encode(message, n, e);
    *out = e;
    return 0;
}

/* call_end is grpc_call_finish without the caller checks: the grpc layer
 * uses it for errors it answers itself. */
static int call_end(grpc_call *call, int status, const char *message)
{
    call_handled(call, status);
    char *enc;
    size_t enc_len;
    int rv = encode_message(message, &enc, &enc_len);
    if (rv != 0) {
        enc = NULL;
        enc_len = 0;
    }
    if (!call->headers_sent) {
        respond_now(call, "200", status, enc, enc_len);
        free(enc);
        return 0;
    }
    call->finished = 1;
    call->status = status;
    call->tmsg = enc;
    call->tmsg_len = enc_len;
    if (call->deferred) {
        call->deferred = 0;
        nghttp2_session_resume_data(call->conn->sess, call->stream_id);
    }
    mark_dirty(call->conn);
    return 0;
}

/* call_fail answers an error the grpc layer found on its own, with a
 * printf-style message. */
static void call_fail(grpc_call *call, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void call_fail(grpc_call *call, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    if (call->finished)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    call_end(call, status, msg);
}

/* early_abort answers a request that never reaches a method, the way
 * grpc-go's earlyAbortStream does: |http_status| plus a gRPC status. */
static void early_abort(grpc_call *call, const char *http_status, int status, const char *msg)
{
    char *enc;
    size_t enc_len;
    if (encode_message(msg, &enc, &enc_len) != 0) {
        enc = NULL;
        enc_len = 0;
    }
    respond_now(call, http_status, status, enc, enc_len);
    free(enc);
}

/* ---- method lookup ---- */

static int path_cmp(const uint8_t *p, size_t n, const char *s)
{
    size_t sn = strlen(s);
    int r = memcmp(p, s, n < sn ? n : sn);
    if (r != 0)
        return r;
    return n < sn ? -1 : n > sn ? 1 : 0;
}

static const struct grpc_method *method_find(const grpc_server *srv, nghttp2_vec path)
{
    size_t lo = 0, hi = srv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = path_cmp(path.base, path.len, srv->sorted[mid]->path);
        if (r == 0)
            return srv->sorted[mid];
        if (r < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* unknown_method answers a path that names no method with grpc-go's
 * texts: "unknown service S" or "unknown method M for service S". */
static void unknown_method(grpc_call *call, nghttp2_vec path)
{
    char msg[600];
    const uint8_t *p = path.base;
    size_t n = path.len;
    if (n > 256)
        n = 256; /* keep the message bounded */
    if (n > 0 && p[0] == '/') {
        p++;
        n--;
    }
    const uint8_t *slash = NULL;
    for (size_t i = n; i > 0; i--)
        if (p[i - 1] == '/') {
            slash = p + i - 1;
            break;
        }
    if (slash == NULL) {
        char q[300];
        go_quote(path, q, sizeof(q));
        snprintf(msg, sizeof(msg), "malformed method name: %s", q);
    } else {
        size_t slen = (size_t)(slash - p);
        int known = 0;
        for (size_t i = 0; i < call->conn->srv->n && !known; i++) {
            const char *mp = call->conn->srv->methods[i].path;
            if (mp[0] == '/')
                mp++;
            known = strncmp(mp, (const char *)p, slen) == 0 && mp[slen] == '/';
        }
        if (known)
            snprintf(msg, sizeof(msg), "unknown method %.*s for service %.*s", (int)(n - slen - 1),
                     (const char *)slash + 1, (int)slen, (const char *)p);
        else
            snprintf(msg, sizeof(msg), "unknown service %.*s", (int)slen, (const char *)p);
    }
    early_abort(call, "200", GRPC_STATUS_UNIMPLEMENTED, msg);
}

/* valid_content_type is grpc-go's check: "application/grpc" optionally
 * followed by "+subtype" or ";params". */
static int valid_content_type(nghttp2_vec v)
{
    static const char pre[] = "application/grpc";
    size_t n = sizeof(pre) - 1;
    if (v.len < n || strncasecmp((const char *)v.base, pre, n) != 0)
        return 0;
    return v.len == n || v.base[n] == '+' || v.base[n] == ';';
}

/* call_start runs when the request HEADERS are complete: it checks them
 * and binds the call to its method, or answers at once. */
static void call_start(grpc_call *call)
{
    char q[300], msg[400];
    if (call->conn->srv->http1 != NULL && call->conn->srv->http1->h2_request != NULL &&
        !valid_content_type(rc_vec((nghttp2_rcbuf *)header_find(call, "content-type")))) {
        call->raw = 1; /* the HTTP handlers' (the JSON gateway over h2) */
        return;
    }
    nghttp2_vec m = rc_vec(call->http_method);
    if (!vec_eq(m, "POST")) {
        go_quote(m, q, sizeof(q));
        snprintf(msg, sizeof(msg), "Received a HEADERS frame with :method %s which should be POST",
                 q);
        early_abort(call, "405", GRPC_STATUS_INTERNAL, msg);
        return;
    }
    const nghttp2_rcbuf *ct = header_find(call, "content-type");
    nghttp2_vec ctv = rc_vec((nghttp2_rcbuf *)ct);
    if (!valid_content_type(ctv)) {
        go_quote(ctv, q, sizeof(q));
        snprintf(msg, sizeof(msg), "invalid gRPC request content-type %s", q);
        early_abort(call, "415", GRPC_STATUS_INVALID_ARGUMENT, msg);
        return;
    }
    nghttp2_vec path = rc_vec(call->path);
    const struct grpc_method *meth = method_find(call->conn->srv, path);
    if (meth == NULL) {
        unknown_method(call, path);
        return;
    }
    const nghttp2_rcbuf *enc = header_find(call, "grpc-encoding");
    if (enc != NULL) {
        nghttp2_vec ev = nghttp2_rcbuf_get_buf((nghttp2_rcbuf *)enc);
        if (ev.len > 0 && !vec_eq(ev, "identity")) {
            go_quote(ev, q, sizeof(q));
            snprintf(msg, sizeof(msg), "grpc: Decompressor is not installed for grpc-encoding %s",
                     q);
            early_abort(call, "200", GRPC_STATUS_UNIMPLEMENTED, msg);
            return;
        }
    }
    call->method = meth;
    call_started(call);
}

static int deliver(void *arg, const uint8_t *msg, size_t len)
{
    grpc_call *call = arg;
    if (call->finished)
        return 1;
    enum grpc_method_kind k = call->method->kind;
    if (call->got_message && (k == GRPC_UNARY || k == GRPC_SERVER_STREAMING)) {
        call_fail(call, GRPC_STATUS_INTERNAL,
                  "grpc: received more than one request message for a unary request");
        return 1;
    }
    call->got_message = 1;
    call_received(call, len);
    call->method->on_message(call, msg, len);
    return call->finished ? 1 : 0;
}

static void call_data(grpc_call *call, const uint8_t *p, size_t n)
{
    if (call->raw) {
        if (call->rbody.len + n > 2 * call->conn->srv->max_recv)
            call->raw_too_big = 1;
        else if (!call->raw_too_big && buf_append(&call->rbody, p, n) != 0)
            call->raw_too_big = 1;
        return;
    }
    if (call->method == NULL || call->finished)
        return;
    grpc_conn *c = call->conn;
    size_t cap0 = call->dec.msg.cap;
    int rv = grpc_decoder_feed(&call->dec, p, n, deliver, call);
    c->gather += call->dec.msg.cap - cap0; /* modular: shrinking works too */
    if (rv == 0 && c->gather > CONN_GATHER_MAX)
        rv = GRPC_DEC_NOMEM;
    if (rv < 0 && rv != GRPC_DEC_STOPPED) {
        /* a failed call never decodes again: give its memory back now */
        c->gather -= call->dec.msg.cap;
        grpc_decoder_free(&call->dec);
    }
    switch (rv) {
    case 0:
    case GRPC_DEC_STOPPED:
        break;
    case GRPC_DEC_TOO_LARGE:
        call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                  "grpc: received message larger than max (%" PRIu32 " vs. %zu)", call->dec.bad_len,
                  call->dec.max);
        break;
    case GRPC_DEC_COMPRESSED:
        call_fail(call, GRPC_STATUS_INTERNAL,
                  "grpc: compressed flag set with identity or empty encoding");
        break;
    case GRPC_DEC_BAD_FLAG:
        call_fail(call, GRPC_STATUS_INTERNAL, "grpc: received unexpected payload format %d",
                  call->dec.bad_flag);
        break;
    default:
        call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                  "grpc: too much request data buffered on this connection");
        break;
    }
}

/* call_half_close: the client sent END_STREAM. */
static void raw_request(grpc_call *call);

static void call_half_close(grpc_call *call)
{
    if (call->raw) {
        raw_request(call);
        return;
    }
    if (call->method == NULL || call->finished)
        return;
    if (grpc_decoder_partial(&call->dec)) {
        call_fail(call, GRPC_STATUS_INTERNAL, "unexpected EOF");
        return;
    }
    enum grpc_method_kind k = call->method->kind;
    if (k == GRPC_UNARY || k == GRPC_SERVER_STREAMING) {
        if (!call->got_message)
            call_fail(call, GRPC_STATUS_INTERNAL, "grpc: received no request message");
        return;
    }
    if (call->method->on_half_close)
        call->method->on_half_close(call);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    grpc_conn *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    grpc_call *call = call_new(c, frame->hd.stream_id);
    if (call == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(sess, frame->hd.stream_id, call);
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, nghttp2_rcbuf *name,
                     nghttp2_rcbuf *value, uint8_t flags, void *user)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client carry nothing we use */
    grpc_call *call = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    nghttp2_vec n = nghttp2_rcbuf_get_buf(name);
    if (n.len > 0 && n.base[0] == ':') {
        nghttp2_rcbuf **slot = NULL;
        if (vec_eq(n, ":path"))
            slot = &call->path;
        else if (vec_eq(n, ":method"))
            slot = &call->http_method;
        if (slot != NULL && *slot == NULL) {
            nghttp2_rcbuf_incref(value);
            *slot = value;
        }
        return 0;
    }
    if (header_add(call, name, value) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

#define MAX_PING_STRIKES 2                           /* grpc-go's maxPingStrikes */
#define IDLE_PING_MIN_MS ((uint64_t)2 * 3600 * 1000) /* grpc-go's defaultPingTimeout */

/* on_ping: grpc-go's keepalive enforcement (http2_server.go handlePing)
 * for a PING from the client. */
static void on_ping(grpc_conn *c)
{
    grpc_server *srv = c->srv;
    uint64_t now = uv_now(srv->loop);
    uint64_t last = c->last_ping_at;
    bool seen = c->ping_seen;
    c->last_ping_at = now;
    c->ping_seen = 1;
    if (c->reset_strikes) { /* we have written since: not abuse */
        c->reset_strikes = 0;
        c->ping_strikes = 0;
        return;
    }
    uint64_t min = c->calls != NULL ? srv->ka_min_time : IDLE_PING_MIN_MS;
    if (seen && last + min > now)
        c->ping_strikes++;
    if (c->ping_strikes > MAX_PING_STRIKES && !c->calm) {
        static const char why[] = "too_many_pings";
        c->calm = 1;
        nghttp2_submit_goaway(c->sess, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->sess),
                              NGHTTP2_ENHANCE_YOUR_CALM, (const uint8_t *)why, sizeof(why) - 1);
    }
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    if (frame->hd.type == NGHTTP2_PING && !(frame->hd.flags & NGHTTP2_FLAG_ACK))
        on_ping(user);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    grpc_call *call = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        call_start(call);
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        call_half_close(call);
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    grpc_call *call = nghttp2_session_get_stream_user_data(sess, stream_id);
    if (call != NULL)
        call_data(call, data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    grpc_conn *c = user;
    if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA)
        c->reset_strikes = 1; /* grpc-go: a ping after our write is no strike */
    if (frame->hd.type == NGHTTP2_GOAWAY && c->calm)
        c->calm_sent = 1;
    /* Once our side ended, a client still sending gets RST_STREAM
     * NO_ERROR (RFC 9113 8.1, as grpc-go does) so the stream closes and
     * on_close runs without waiting for the client. */
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(sess, frame->hd.stream_id) == 0)
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    grpc_call *call = nghttp2_session_get_stream_user_data(sess, stream_id);
    if (call != NULL)
        call_destroy(call);
    return 0;
}

static ssize_t data_read(nghttp2_session *sess, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    grpc_call *call = src->ptr;
    size_t avail = call->out.len - call->out_off;
    if (avail == 0 && !call->finished) {
        call->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = avail < length ? avail : length;
    if (n > 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (n == avail && call->finished && call->raw) {
        *flags |= NGHTTP2_DATA_FLAG_EOF; /* a plain HTTP response: no trailers */
    } else if (n == avail && call->finished) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (submit_trailers(call) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* send_data writes a DATA frame straight from the call's queue into the
 * connection's output buffer (one copy instead of two). */
static int send_data(nghttp2_session *sess, nghttp2_frame *frame, const uint8_t *framehd,
                     size_t length, nghttp2_data_source *src, void *user)
{
    grpc_conn *c = user;
    grpc_call *call = src->ptr;
    size_t pad = frame->data.padlen;
    if (buf_reserve(&c->obuf, 9 + pad + length) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    uint8_t *o = c->obuf.data + c->obuf.len;
    memcpy(o, framehd, 9);
    o += 9;
    if (pad > 0)
        *o++ = (uint8_t)(pad - 1);
    memcpy(o, call->out.data + call->out_off, length);
    o += length;
    if (pad > 1) {
        memset(o, 0, pad - 1);
        o += pad - 1;
    }
    c->obuf.len = (size_t)(o - c->obuf.data);
    call->out_off += length;
    if (call->out_off == call->out.len) {
        call->out_off = 0;
        /* drained: give back a queue that grew large, or a thousand idle
         * streams would each keep their high-water mark */
        if (call->out.cap > OUT_KEEP_BYTES)
            buf_free(&call->out);
        else
            buf_reset(&call->out);
    }
    return 0;
}

/* ---- connections ---- */

/* serialize drains nghttp2's ready frames into c->obuf, up to |limit|
 * bytes. Returns 0 or a negative nghttp2 error. */
static int serialize(grpc_conn *c, size_t limit)
{
    int rv = 0;
    c->in_session++;
    while (c->obuf.len < limit) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->sess, &p);
        if (n < 0) {
            rv = (int)n;
            break;
        }
        if (n == 0)
            break;
        if (buf_append(&c->obuf, p, (size_t)n) != 0) {
            rv = NGHTTP2_ERR_NOMEM;
            break;
        }
    }
    c->in_session--;
    return rv;
}

/* conn_admit takes one of the server's max_conns places for |c|: false
 * when they are all taken (the caller refuses the connection). */
static bool conn_admit(grpc_server *srv, grpc_conn *c)
{
    if (srv->max_conns == 0)
        return true;
    unsigned n = __atomic_add_fetch(srv->conn_count, 1, __ATOMIC_RELAXED);
    if (n > srv->max_conns) {
        __atomic_sub_fetch(srv->conn_count, 1, __ATOMIC_RELAXED);
        srv->refused++;
        uint64_t now = uv_now(srv->loop);
        if (srv->refused_logged_ms == 0 || now - srv->refused_logged_ms >= 10000) {
            log_warn("grpc",
                     "refusing client connections: %u open, the most allowed "
                     "(--max-client-connections); %llu refused so far on this loop",
                     srv->max_conns, (unsigned long long)srv->refused);
            srv->refused_logged_ms = now ? now : 1;
        }
        return false;
    }
    c->counted = 1;
    return true;
}

static void conn_release(grpc_conn *c)
{
    if (c->counted) {
        c->counted = 0;
        __atomic_sub_fetch(c->srv->conn_count, 1, __ATOMIC_RELAXED);
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    grpc_conn *c = h->data;
    grpc_server *srv = c->srv;
    conn_release(c);
    buf_free(&c->obuf);
    buf_free(&c->wbuf);
    free(c);
    srv->handles--;
    maybe_free_server(srv);
}

static void conn_unlink(grpc_conn *c)
{
    if (!c->linked)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->linked = 0;
}

/* conn_close tears the connection down now: every call gets on_close, the
 * session is deleted and the handle closed. Inside an nghttp2 callback it
 * only marks the connection; the session caller finishes the job. */
static void conn_close(grpc_conn *c)
{
    if (c->closed)
        return;
    conn_unlink(c);
    if (c->in_session) {
        c->want_close = 1;
        return;
    }
    c->closed = 1;
    unmark_dirty(c);
    while (c->calls)
        call_destroy(c->calls);
    nghttp2_session_del(c->sess);
    c->sess = NULL;
    if (c->mode == MODE_H1 && c->h1 != NULL) {
        void *h1 = c->h1;
        c->h1 = NULL;
        c->srv->http1->closed(h1);
    }
    if (!c->is_mem)
        tls_stream_close(&c->ts, on_conn_closed);
}

/* conn_check closes |c| if a deferred close is due or the session is done
 * (GOAWAY exchanged, nothing left to send). Returns 1 if it closed. */
static int conn_check(grpc_conn *c)
{
    if (c->closed)
        return 1;
    if (c->mode != MODE_H2) {
        if (c->want_close || (c->shutdown && c->obuf.len == 0 && !c->writing)) {
            conn_close(c);
            return 1;
        }
        return 0;
    }
    if (c->want_close || ((c->calm_sent || (!nghttp2_session_want_read(c->sess) &&
                                            !nghttp2_session_want_write(c->sess))) &&
                          (c->is_mem || (c->obuf.len == 0 && !c->writing)))) {
        conn_close(c);
        return 1;
    }
    return 0;
}

static void on_write(uv_write_t *req, int status)
{
    grpc_conn *c = req->data;
    c->writing = 0;
    buf_reset(&c->wbuf);
    if (c->closed)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->read_stopped == 1) {
        c->read_stopped = 0;
        /* errors here surface on the next write or read */
        (void)tls_stream_read_start(&c->ts, on_alloc, on_read);
    }
    conn_flush(c);
    if (!c->closed && c->mode == MODE_H1 && !c->writing && c->srv->http1->drained != NULL)
        c->srv->http1->drained(c->h1);
}

static void conn_flush(grpc_conn *c)
{
    if (c->closed || c->writing)
        return;
    if (c->mode == MODE_H2 && serialize(c, FLUSH_MAX) != 0) {
        conn_close(c);
        return;
    }
    if (c->obuf.len == 0) {
        conn_check(c);
        return;
    }
    if (c->want_close) {
        conn_close(c);
        return;
    }
    struct buf t = c->wbuf;
    c->wbuf = c->obuf;
    c->obuf = t;
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    c->wreq.data = c;
    c->writing = 1;
    if (tls_stream_write(&c->ts, &c->wreq, &b, 1, on_write) != 0) {
        c->writing = 0;
        conn_close(c);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    grpc_conn *c = h->data;
    grpc_server *srv = c->srv;
    if (!srv->rbuf_busy && srv->rbuf != NULL) {
        srv->rbuf_busy = 1;
        *b = uv_buf_init((char *)srv->rbuf, READ_BUF_SIZE);
        return;
    }
    char *p = malloc(65536);
    *b = uv_buf_init(p, p ? 65536 : 0);
}

static void release_rbuf(grpc_server *srv, const uv_buf_t *b)
{
    if (b->base == (char *)srv->rbuf)
        srv->rbuf_busy = 0;
    else
        free(b->base);
}

/* conn_input feeds |n| bytes to the session. On a protocol error nghttp2
 * has queued GOAWAY (or we queue it) and reading ends; the connection
 * closes once GOAWAY is out. Returns 0 or -EPROTO. */
static int conn_input(grpc_conn *c, const uint8_t *p, size_t n)
{
    c->in_session++;
    ssize_t rv = nghttp2_session_mem_recv(c->sess, p, n);
    c->in_session--;
    if (c->want_close) {
        conn_close(c);
        return -EPROTO;
    }
    if (rv < 0) {
        /* fatal: a bad preface, a callback failure or no memory. Try to
         * say goodbye; the session still serializes frames. */
        if (rv == NGHTTP2_ERR_NOMEM ||
            nghttp2_session_terminate_session(c->sess, NGHTTP2_PROTOCOL_ERROR) != 0) {
            conn_close(c);
            return -EPROTO;
        }
    }
    return rv < 0 ? -EPROTO : 0;
}

/* stop_reading stops reading |c| for good (the HTTP/1.1 handler is done
 * with its input). */
static void stop_reading(grpc_conn *c)
{
    if (!c->is_mem && (c->read_stopped == 0 || c->read_stopped == 3))
        tls_stream_read_stop(&c->ts);
    c->read_stopped = 2;
}

/* sniff decides what a connection speaks from its first bytes, as etcd's
 * cmux does: HTTP/2's client preface means gRPC (and the JSON gateway over
 * h2), anything else HTTP/1.1 when the server has a handler for it. Bytes
 * that match the preface so far are kept until it is complete. On return,
 * p and n point at what the chosen protocol reads next; nonzero: nothing
 * to read yet (or the connection closed). */
static int sniff(grpc_conn *c, const uint8_t **p, size_t *n)
{
    static const char preface[] = NGHTTP2_CLIENT_MAGIC;
    size_t take = sizeof(c->sniff) - c->nsniff < *n ? sizeof(c->sniff) - c->nsniff : *n;
    if (!c->srv->http_only && memcmp(*p, preface + c->nsniff, take) == 0) {
        memcpy(c->sniff + c->nsniff, *p, take);
        c->nsniff += take;
        *p += take;
        *n -= take;
        if (c->nsniff < sizeof(c->sniff))
            return 1;
        c->mode = MODE_H2;
        mark_dirty(c); /* our SETTINGS */
        if (conn_input(c, c->sniff, c->nsniff) != 0 || c->closed)
            return 1;
        return *n == 0;
    }
    c->mode = MODE_H1;
    nghttp2_session_del(c->sess);
    c->sess = NULL;
    c->h1 = c->srv->http1->open(c->srv->http1->arg, c);
    if (c->h1 == NULL) {
        conn_close(c);
        return 1;
    }
    if (c->nsniff > 0 && c->srv->http1->input(c->h1, c->sniff, c->nsniff) != 0) {
        stop_reading(c);
        return 1;
    }
    return c->closed || *n == 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    grpc_conn *c = s->data;
    grpc_server *srv = c->srv;
    if (nread <= 0) {
        release_rbuf(srv, b);
        if (nread == UV_EOF && c->mode == MODE_H1 && srv->http1->eof != NULL) {
            /* the client's side ended: the handler may still answer */
            stop_reading(c);
            srv->http1->eof(c->h1);
            mark_dirty(c);
        } else if (nread < 0) {
            conn_close(c);
        }
        return;
    }
    const uint8_t *p = (const uint8_t *)b->base;
    size_t n = (size_t)nread;
    c->read_ms = uv_now(srv->loop);
    if (c->nread < 64)
        c->nread += n;
    if (c->mode == MODE_SNIFF && sniff(c, &p, &n) != 0) {
        release_rbuf(srv, b);
        return;
    }
    if (c->mode == MODE_H1) {
        int hv = srv->http1->input(c->h1, p, n);
        release_rbuf(srv, b);
        if (hv != 0 && !c->closed)
            stop_reading(c); /* for good: the handler closes */
        return;
    }
    c->ka_activity = 1;
    int rv = conn_input(c, p, n);
    release_rbuf(srv, b);
    if (c->closed)
        return;
    if (rv != 0 || !nghttp2_session_want_read(c->sess)) {
        /* no more input is wanted: send what is left (GOAWAY) and close */
        tls_stream_read_stop(&c->ts);
        c->read_stopped = 0;
    } else if (c->writing && tls_stream_write_queue_size(&c->ts) > WRITE_BACKLOG) {
        tls_stream_read_stop(&c->ts);
        c->read_stopped = 1;
    }
    mark_dirty(c);
}

static int session_new(grpc_conn *c)
{
    grpc_server *srv = c->srv;
    int rv = nghttp2_session_server_new2(&c->sess, srv->cbs, c, srv->opt);
    if (rv != 0)
        return -ENOMEM;
    nghttp2_settings_entry iv[2] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW}};
    size_t niv = 1;
    if (srv->max_streams) {
        iv[1].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
        iv[1].value = srv->max_streams;
        niv = 2;
    }
    if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, niv) != 0 ||
        nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0) {
        nghttp2_session_del(c->sess);
        c->sess = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void conn_link(grpc_conn *c)
{
    grpc_server *srv = c->srv;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    c->linked = 1;
}

static void on_reject_closed(uv_handle_t *h)
{
    grpc_conn *c = h->data;
    grpc_server *srv = c->srv;
    conn_release(c);
    free(c);
    srv->handles--;
    maybe_free_server(srv);
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* conn_start serves a connection: from a listener of ours (|ls|) or a
 * socket accepted elsewhere (|fd|, when |ls| is NULL); with TLS first when
 * GRPC_ADOPT_TLS, a unix socket when GRPC_ADOPT_UNIX. */
static int conn_start(grpc_server *srv, uv_stream_t *ls, uv_os_sock_t fd, unsigned flags)
{
    bool tls = flags & GRPC_ADOPT_TLS, unix_sock = flags & GRPC_ADOPT_UNIX;
    grpc_conn *c = calloc(1, sizeof(*c));
    tls_conn *tc = NULL;
    int rv = c != NULL ? 0 : -ENOMEM;
    if (rv == 0 && !conn_admit(srv, c))
        rv = -ECONNREFUSED; /* unread, closed at once */
    if (rv == 0 && tls)
        rv = srv->tls != NULL ? tls_conn_new(srv->tls, NULL, &tc) : -EINVAL;
    if (rv == 0)
        rv = (unix_sock ? tls_stream_init_pipe : tls_stream_init)(&c->ts, srv->loop, tc,
                                                                 "client");
    if (rv != 0) {
        if (ls != NULL) { /* take it off the backlog all the same */
            uv_pipe_t *t = malloc(sizeof(uv_pipe_t) > sizeof(uv_tcp_t) ? sizeof(uv_pipe_t)
                                                                        : sizeof(uv_tcp_t));
            if (t != NULL && (unix_sock ? uv_pipe_init(srv->loop, t, 0)
                                        : uv_tcp_init(srv->loop, (uv_tcp_t *)t)) == 0) {
                (void)uv_accept(ls, (uv_stream_t *)t);
                uv_close((uv_handle_t *)t, free_handle);
            } else {
                free(t);
            }
        }
        if (c != NULL && c->counted) {
            c->srv = srv;
            conn_release(c);
        }
        free(c);
        if (ls == NULL)
            close(fd);
        return rv;
    }
    c->srv = srv;
    c->born_ms = c->read_ms = uv_now(srv->loop);
    c->ts.tcp.data = c;
    srv->handles++;
    rv = ls != NULL    ? uv_accept(ls, c->ts.s)
         : unix_sock ? uv_pipe_open(&c->ts.pipe, fd)
                     : uv_tcp_open(&c->ts.tcp, fd);
    if (rv != 0 && ls == NULL)
        close(fd); /* not the handle's: uv_close would leave it open */
    else if (rv == 0 && session_new(c) != 0)
        rv = -ENOMEM;
    if (rv != 0) {
        tls_stream_close(&c->ts, on_reject_closed);
        return rv;
    }
    if (!unix_sock)
        uv_tcp_nodelay(&c->ts.tcp, 1);
    tls_stream_set_handshake_timeout(&c->ts, TLS_HANDSHAKE_MS);
    conn_link(c);
    c->mode = srv->http1 != NULL ? MODE_SNIFF : MODE_H2;
    if (tls_stream_read_start(&c->ts, on_alloc, on_read) != 0) {
        conn_close(c);
        return 0;
    }
    if (c->mode == MODE_H2)
        mark_dirty(c); /* our SETTINGS; when sniffing, once the preface is in */
    return 0;
}

static void on_connection(uv_stream_t *ls, int status)
{
    struct listener *l = ls->data;
    grpc_server *srv = l->srv;
    if (status < 0 || srv->closing)
        return;
    conn_start(srv, ls, -1, (l->tls ? GRPC_ADOPT_TLS : 0) | (l->unix_sock ? GRPC_ADOPT_UNIX : 0));
}

int grpc_server_adopt(grpc_server *srv, uv_os_sock_t fd)
{
    if (srv->closing) {
        close(fd);
        return -ESHUTDOWN;
    }
    return conn_start(srv, NULL, fd, 0);
}

int grpc_server_adopt_tls(grpc_server *srv, uv_os_sock_t fd)
{
    if (srv->closing) {
        close(fd);
        return -ESHUTDOWN;
    }
    return conn_start(srv, NULL, fd, GRPC_ADOPT_TLS);
}

int grpc_server_adopt_flags(grpc_server *srv, uv_os_sock_t fd, unsigned flags)
{
    if (srv->closing) {
        close(fd);
        return -ESHUTDOWN;
    }
    return conn_start(srv, NULL, fd, flags);
}

static void local_free(grpc_call *call);
static void local_deliver(grpc_call *call);

/* Local input is delivered by an idle handle: it runs early in the next
 * loop pass, before the prepare handles (a front loop's, which wakes the
 * core for what the delivery forwarded, among them), and while it is
 * active the loop does not block, so the pass's check handles (the core's
 * Ready processing) follow at once. It stops on the first pass that finds
 * nothing to deliver. */
static void on_lq_idle(uv_idle_t *h)
{
    grpc_server *srv = h->data;
    if (srv->lq_head == NULL) {
        uv_idle_stop(h);
        return;
    }
    while (srv->lq_head) {
        grpc_call *call = srv->lq_head;
        srv->lq_head = call->lq_next;
        if (srv->lq_head == NULL)
            srv->lq_tail = NULL;
        call->lqueued = 0;
        local_deliver(call);
    }
}

/* on_ka_timer: grpc-go's server keepalive (http2_server.go keepalive),
 * for every HTTP/2 connection whose check is due: read something since
 * the last check, wait Time again; else send a PING and wait Timeout;
 * nothing read after a PING, close. */
static void on_ka_timer(uv_timer_t *t)
{
    grpc_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    for (grpc_conn *c = srv->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->mode != MODE_H2 || c->closed || c->is_mem)
            continue;
        if (c->ka_deadline == 0) { /* new since the last pass */
            c->ka_deadline = now + srv->ka_time;
            continue;
        }
        if (now < c->ka_deadline)
            continue;
        if (c->ka_activity) {
            c->ka_activity = 0;
            c->ka_ping_sent = 0;
            c->ka_deadline = now + srv->ka_time;
        } else if (c->ka_ping_sent) {
            conn_close(c);
        } else {
            c->ka_ping_sent = 1;
            c->ka_deadline = now + srv->ka_timeout;
            if (nghttp2_submit_ping(c->sess, NGHTTP2_FLAG_NONE, NULL) == 0)
                mark_dirty(c);
        }
    }
}

static void on_prepare(uv_prepare_t *p)
{
    grpc_server *srv = p->data;
    while (srv->reap) {
        grpc_call *call = srv->reap;
        srv->reap = call->reap_next;
        local_free(call);
    }
    while (srv->dirty) {
        grpc_conn *c = srv->dirty;
        unmark_dirty(c);
        conn_flush(c);
    }
}

/* on_sweep closes the connections past a bound of grpc_server_options:
 * no full preface within preface_ms, or idle (HTTP/2, no stream, nothing
 * read) for idle_ms. One walk of the list a second: a few microseconds per
 * thousand connections. */
static void on_sweep(uv_timer_t *t)
{
    grpc_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    unsigned early = 0, idle = 0;
    for (grpc_conn *c = srv->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->closed || c->is_mem || c->want_close)
            continue;
        bool tls = c->ts.conn != NULL;
        if (srv->preface_ms && !tls && c->nread < 24 && c->mode != MODE_H1 &&
            now - c->born_ms >= srv->preface_ms) {
            early++;
            conn_close(c);
        } else if (c->idle_goaway && now - c->read_ms >= srv->idle_ms + 1000) {
            conn_close(c); /* the GOAWAY could not be written in a second */
        } else if (srv->idle_ms && !c->idle_goaway && c->mode == MODE_H2 && c->calls == NULL &&
                   c->sess != NULL && now - c->read_ms >= srv->idle_ms) {
            /* GOAWAY, then the session is done and conn_check closes it
             * once the frame is written */
            idle++;
            c->idle_goaway = 1;
            nghttp2_submit_goaway(c->sess, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(c->sess),
                                  NGHTTP2_NO_ERROR, NULL, 0);
            mark_dirty(c);
        }
    }
    if (early || idle)
        log_debug("grpc",
                  "closed %u connections without a preface in %llu ms and %u idle "
                  "for %llu ms",
                  early, (unsigned long long)srv->preface_ms, idle,
                  (unsigned long long)srv->idle_ms);
}

/* ---- public API ---- */

static int method_sort_cmp(const void *a, const void *b)
{
    const struct grpc_method *const *x = a, *const *y = b;
    return strcmp((*x)->path, (*y)->path);
}

int grpc_server_new(uv_loop_t *loop, const struct grpc_method *methods, size_t n,
                    const struct grpc_server_options *opts, void *data, grpc_server **out)
{
    grpc_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return -ENOMEM;
    srv->loop = loop;
    srv->methods = methods;
    srv->n = n;
    srv->data = data;
    srv->max_recv =
        opts && opts->max_recv_msg_size ? opts->max_recv_msg_size : GRPC_DEFAULT_MAX_RECV;
    if (srv->max_recv > UINT32_MAX)
        srv->max_recv = UINT32_MAX;
    srv->max_send =
        opts && opts->max_send_msg_size ? opts->max_send_msg_size : GRPC_DEFAULT_MAX_SEND;
    if (srv->max_send > GRPC_DEFAULT_MAX_SEND)
        srv->max_send = GRPC_DEFAULT_MAX_SEND;
    srv->max_streams = opts ? opts->max_concurrent_streams : 0;
    /* grpc-go's defaults and its 1 s floor on Time */
    srv->ka_min_time =
        opts && opts->keepalive_min_time_ms ? opts->keepalive_min_time_ms : 5 * 60 * 1000;
    srv->ka_time = opts && opts->keepalive_time_ms ? opts->keepalive_time_ms : 2 * 3600 * 1000;
    if (srv->ka_time < 1000)
        srv->ka_time = 1000;
    srv->ka_timeout = opts && opts->keepalive_timeout_ms ? opts->keepalive_timeout_ms : 20000;
    srv->tls = opts ? opts->tls : NULL;
    srv->http1 = opts ? opts->http1 : NULL;
    srv->http_only = opts && opts->http_only && srv->http1 != NULL;
    srv->mstats = register_metrics(methods, n, opts && opts->handling_seconds);
    srv->sorted = malloc((n ? n : 1) * sizeof(*srv->sorted));
    srv->rbuf = malloc(READ_BUF_SIZE);
    if (srv->sorted == NULL || srv->rbuf == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++)
        srv->sorted[i] = &methods[i];
    qsort(srv->sorted, n, sizeof(*srv->sorted), method_sort_cmp);

    if (nghttp2_session_callbacks_new(&srv->cbs) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_headers_callback(srv->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback2(srv->cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(srv->cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(srv->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(srv->cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(srv->cbs, on_stream_close);
    nghttp2_session_callbacks_set_send_data_callback(srv->cbs, send_data);
    if (nghttp2_option_new(&srv->opt) != 0)
        goto fail;
    nghttp2_option_set_no_closed_streams(srv->opt, 1);
    /* nghttp2's HTTP checks refuse an :authority like "http://127.0.0.1:2379",
     * which grpc-go sends when etcdctl is given endpoints with a scheme
     * (as `--cluster` does with the client URLs); Go's server, and so etcd,
     * accepts it. The checks gRPC needs (:method POST, content-type, :path)
     * are made here on the headers themselves. */
    nghttp2_option_set_no_http_messaging(srv->opt, 1);

    if (uv_prepare_init(loop, &srv->prepare) != 0)
        goto fail;
    srv->prepare.data = srv;
    uv_prepare_start(&srv->prepare, on_prepare);
    /* the prepare handle alone must not keep the loop running */
    uv_unref((uv_handle_t *)&srv->prepare);
    uv_idle_init(loop, &srv->lq_idle);
    srv->lq_idle.data = srv;
    /* keepalive checks: a tick a fraction of the shorter period (at least
     * 50 ms, at most 10 s); deadlines are kept per connection */
    uint64_t tick = (srv->ka_time < srv->ka_timeout ? srv->ka_time : srv->ka_timeout) / 4;
    tick = tick < 50 ? 50 : tick > 10000 ? 10000 : tick;
    uv_timer_init(loop, &srv->ka_timer);
    srv->ka_timer.data = srv;
    uv_timer_start(&srv->ka_timer, on_ka_timer, tick, tick);
    uv_unref((uv_handle_t *)&srv->ka_timer);
    srv->handles = 3;
    srv->max_conns = opts ? opts->max_conns : 0;
    srv->conn_count = opts && opts->conn_count ? opts->conn_count : &srv->own_count;
    srv->preface_ms = opts ? opts->preface_ms : 0;
    srv->idle_ms = opts ? opts->idle_ms : 0;
    uv_timer_init(loop, &srv->sweep);
    srv->sweep.data = srv;
    srv->handles++;
    if (srv->preface_ms || srv->idle_ms) {
        uv_timer_start(&srv->sweep, on_sweep, 1000, 1000);
        uv_unref((uv_handle_t *)&srv->sweep);
    }
    *out = srv;
    return 0;
fail:
    if (srv->cbs)
        nghttp2_session_callbacks_del(srv->cbs);
    if (srv->opt)
        nghttp2_option_del(srv->opt);
    free(srv->sorted);
    free(srv->rbuf);
    free(srv);
    return -ENOMEM;
}

static void on_listener_closed(uv_handle_t *h)
{
    struct listener *l = h->data;
    grpc_server *srv = l->srv;
    if (l->path != NULL) {
        unlink(l->path);
        free(l->path);
    }
    free(l);
    srv->handles--;
    maybe_free_server(srv);
}

static int listen_on(grpc_server *srv, const char *host, int port, bool tls, int *bound_port);

int grpc_server_listen(grpc_server *srv, const char *host, int port, int *bound_port)
{
    return listen_on(srv, host, port, false, bound_port);
}

int grpc_server_listen_tls(grpc_server *srv, const char *host, int port, int *bound_port)
{
    if (srv->tls == NULL)
        return -EINVAL;
    return listen_on(srv, host, port, true, bound_port);
}

int grpc_server_listen_unix(grpc_server *srv, const char *path, bool tls)
{
    if (tls && srv->tls == NULL)
        return -EINVAL;
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->srv = srv;
    l->tls = tls;
    l->unix_sock = true;
    int rv = uv_pipe_init(srv->loop, &l->pipe, 0);
    if (rv != 0) {
        free(l);
        return rv;
    }
    l->pipe.data = l;
    srv->handles++;
    /* as etcd: a stale socket file from an earlier run is removed first */
    if (unlink(path) != 0 && errno != ENOENT)
        rv = -errno;
    if (rv == 0)
        rv = uv_pipe_bind(&l->pipe, path);
    if (rv == 0) {
        l->path = strdup(path);
        rv = l->path != NULL ? uv_listen((uv_stream_t *)&l->pipe, 511, on_connection) : -ENOMEM;
    }
    if (rv != 0) {
        uv_close((uv_handle_t *)&l->pipe, on_listener_closed);
        return rv;
    }
    l->next = srv->listeners;
    srv->listeners = l;
    return 0;
}

static int listen_on(grpc_server *srv, const char *host, int port, bool tls, int *bound_port)
{
    struct sockaddr_storage ss;
    int rv = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
    if (rv != 0)
        rv = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
    if (rv != 0)
        return rv;
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->srv = srv;
    l->tls = tls;
    rv = uv_tcp_init(srv->loop, &l->tcp);
    if (rv != 0) {
        free(l);
        return rv;
    }
    l->tcp.data = l;
    srv->handles++;
    rv = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&ss, 0);
    if (rv == 0)
        rv = uv_listen((uv_stream_t *)&l->tcp, 511, on_connection);
    if (rv == 0 && bound_port) {
        struct sockaddr_storage name;
        int len = sizeof(name);
        rv = uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&name, &len);
        if (rv == 0)
            *bound_port = name.ss_family == AF_INET6
                              ? ntohs(((struct sockaddr_in6 *)&name)->sin6_port)
                              : ntohs(((struct sockaddr_in *)&name)->sin_port);
    }
    if (rv != 0) {
        uv_close((uv_handle_t *)&l->tcp, on_listener_closed);
        return rv;
    }
    l->next = srv->listeners;
    srv->listeners = l;
    return 0;
}

static void on_prepare_closed(uv_handle_t *h)
{
    grpc_server *srv = h->data;
    srv->handles--;
    maybe_free_server(srv);
}

void grpc_server_close(grpc_server *srv, void (*cb)(void *arg), void *arg)
{
    if (srv->closing)
        return;
    srv->closing = 1;
    srv->close_cb = cb;
    srv->close_arg = arg;
    while (srv->listeners) {
        struct listener *l = srv->listeners;
        srv->listeners = l->next;
        uv_close((uv_handle_t *)&l->tcp, on_listener_closed);
    }
    while (srv->conns)
        conn_close(srv->conns); /* unlinks even when deferred */
    /* the HTTP/1.1 connections let their local calls go as they closed;
     * any other local call is cancelled: on_close for each, now */
    while (srv->reap) {
        grpc_call *call = srv->reap;
        srv->reap = call->reap_next;
        local_free(call);
    }
    srv->lq_head = srv->lq_tail = NULL;
    while (srv->locals)
        local_free(srv->locals);
    uv_prepare_stop(&srv->prepare);
    uv_close((uv_handle_t *)&srv->prepare, on_prepare_closed);
    uv_close((uv_handle_t *)&srv->lq_idle, on_prepare_closed);
    uv_timer_stop(&srv->sweep);
    uv_close((uv_handle_t *)&srv->sweep, on_prepare_closed);
    uv_timer_stop(&srv->ka_timer);
    uv_close((uv_handle_t *)&srv->ka_timer, on_prepare_closed);
}

void *grpc_call_server_data(const grpc_call *call)
{
    return call->srv->data;
}

void grpc_call_set_data(grpc_call *call, void *data)
{
    call->data = data;
}

void *grpc_call_get_data(const grpc_call *call)
{
    return call->data;
}

const struct grpc_method *grpc_call_method(const grpc_call *call)
{
    return call->method;
}

const char *grpc_call_path(const grpc_call *call)
{
    return call->method ? call->method->path : "";
}

const char *grpc_call_metadata(const grpc_call *call, const char *name, size_t *len)
{
    if (call->lops != NULL) {
        if (call->ltoken == NULL || strcmp(name, "token") != 0)
            return NULL;
        if (len)
            *len = call->ltoken_len;
        return call->ltoken;
    }
    const nghttp2_rcbuf *v = header_find(call, name);
    if (v == NULL)
        return NULL;
    nghttp2_vec vec = nghttp2_rcbuf_get_buf((nghttp2_rcbuf *)v);
    if (len)
        *len = vec.len;
    return (const char *)vec.base;
}

static void put_prefix(uint8_t *p, size_t len)
{
    p[0] = 0;
    p[1] = (uint8_t)(len >> 24);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 8);
    p[4] = (uint8_t)len;
}

static int queued(grpc_call *call, grpc_conn *c, size_t len);

int grpc_call_send(grpc_call *call, const uint8_t *msg, size_t len)
{
    if (call->lops != NULL) {
        if (call->finished || call->closed || call->lreaping)
            return -EPIPE;
        if (len > call->srv->max_send)
            return -EMSGSIZE;
        int rv = call->lops->send(call->lctx, msg, len);
        if (rv == 0)
            call_sent(call, len);
        return rv;
    }
    grpc_conn *c = call->conn;
    if (call->finished || call->closed || c->closed || c->want_close)
        return -EPIPE;
    if (len > c->srv->max_send)
        return -EMSGSIZE;
    /* keep the queue from creeping: drop consumed bytes when they are
     * the bigger part (amortized O(1) per byte) */
    if (call->out_off > 0 && call->out_off >= 65536 && call->out_off * 2 >= call->out.len) {
        buf_consume(&call->out, call->out_off);
        call->out_off = 0;
    }
    if (buf_reserve(&call->out, 5 + len) != 0)
        return -ENOMEM;
    uint8_t *p = call->out.data + call->out.len;
    put_prefix(p, len);
    if (len)
        memcpy(p + 5, msg, len);
    call->out.len += 5 + len;
    return queued(call, c, len);
}

int grpc_call_send_take(grpc_call *call, struct buf *msg)
{
    size_t len = msg->len - GRPC_MSG_PREFIX;
    if (call->lops != NULL || call->out.len != call->out_off)
        return grpc_call_send(call, msg->data + GRPC_MSG_PREFIX, len);
    grpc_conn *c = call->conn;
    if (call->finished || call->closed || c->closed || c->want_close)
        return -EPIPE;
    if (len > c->srv->max_send)
        return -EMSGSIZE;
    buf_free(&call->out);
    call->out = *msg;
    call->out_off = 0;
    *msg = (struct buf){0};
    put_prefix(call->out.data, len);
    return queued(call, c, len);
}

/* queued: the message of |len| bytes (and its prefix) ends call->out:
 * submit the response (first send) or resume its data. */
static int queued(grpc_call *call, grpc_conn *c, size_t len)
{
    if (!call->headers_sent) {
        nghttp2_nv nv[2] = {NV_STATIC(":status", "200"),
                            NV_STATIC("content-type", "application/grpc")};
        nghttp2_data_provider prd;
        prd.source.ptr = call;
        prd.read_callback = data_read;
        if (nghttp2_submit_response(c->sess, call->stream_id, nv, 2, &prd) != 0) {
            call->out.len -= 5 + len;
            return -EPIPE;
        }
        call->headers_sent = 1;
    } else if (call->deferred) {
        call->deferred = 0;
        nghttp2_session_resume_data(c->sess, call->stream_id);
    }
    call_sent(call, len);
    mark_dirty(c);
    return 0;
}

static void local_reap(grpc_call *call);

int grpc_call_finish(grpc_call *call, int status, const char *message)
{
    if (call->lops != NULL) {
        if (call->finished || call->closed || call->lreaping)
            return -EPIPE;
        call->finished = 1;
        call_handled(call, status);
        call->lops->finish(call->lctx, status, message);
        local_reap(call);
        return 0;
    }
    grpc_conn *c = call->conn;
    if (call->finished || call->closed || c->closed || c->want_close)
        return -EPIPE;
    return call_end(call, status, message);
}

const char *grpc_call_tls_common_name(const grpc_call *call)
{
    const grpc_conn *c = call->conn;
    return c == NULL || c->is_mem ? NULL : tls_stream_peer_cn(&c->ts);
}

size_t grpc_call_pending_bytes(const grpc_call *call)
{
    if (call->lops != NULL)
        return call->lops->pending != NULL && !call->lreaping ? call->lops->pending(call->lctx)
                                                              : 0;
    return call->out.len - call->out_off;
}

/* ---- plain HTTP requests over HTTP/2 ---- */

static char *hdr_dup(const grpc_call *call, const char *name)
{
    size_t n = 0;
    const char *v = grpc_call_metadata(call, name, &n);
    return v != NULL ? strndup(v, n) : NULL;
}

static void raw_request(grpc_call *call)
{
    grpc_conn *c = call->conn;
    if (call->rawh != NULL || call->finished)
        return;
    if (call->raw_too_big) {
        static const char tl[] = "http: request body too large\n";
        const char *h[] = {"content-type", "text/plain; charset=utf-8", NULL};
        grpc_h2_respond(call, 413, h, sizeof(tl) - 1);
        grpc_h2_write(call, tl, sizeof(tl) - 1);
        grpc_h2_end(call);
        return;
    }
    nghttp2_vec m = rc_vec(call->http_method), p = rc_vec(call->path);
    char *method = strndup((const char *)m.base, m.len);
    char *path = strndup((const char *)p.base, p.len);
    char *auth = hdr_dup(call, "authorization");
    char *ct = hdr_dup(call, "content-type");
    char *inm = hdr_dup(call, "if-none-match");
    struct grpc_h2_request req = {method, path, auth, ct, call->rbody.data, call->rbody.len, inm};
    if (method != NULL && path != NULL)
        call->rawh = c->srv->http1->h2_request(c->srv->http1->arg, call, &req);
    free(method);
    free(path);
    free(auth);
    free(ct);
    free(inm);
    buf_free(&call->rbody);
    if (call->rawh == NULL && !call->finished)
        nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, call->stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
    mark_dirty(c);
}

int grpc_h2_respond(grpc_call *call, int status, const char *const *headers, long long length)
{
    grpc_conn *c = call->conn;
    if (!call->raw || call->headers_sent || call->closed || c->closed)
        return -EPIPE;
    nghttp2_nv nv[24];
    size_t n = 0;
    char st[8], len[24];
    snprintf(st, sizeof(st), "%d", status);
    nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7, strlen(st), 0};
    for (size_t i = 0; headers != NULL && headers[i] != NULL && headers[i + 1] != NULL &&
                       n < sizeof(nv) / sizeof(nv[0]) - 1;
         i += 2)
        nv[n++] = (nghttp2_nv){(uint8_t *)headers[i], (uint8_t *)headers[i + 1],
                               strlen(headers[i]), strlen(headers[i + 1]), 0};
    if (length >= 0) {
        snprintf(len, sizeof(len), "%lld", length);
        nv[n++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)len, 14, strlen(len), 0};
    }
    nghttp2_data_provider prd;
    prd.source.ptr = call;
    prd.read_callback = data_read;
    if (nghttp2_submit_response(c->sess, call->stream_id, nv, n, &prd) != 0)
        return -EPIPE;
    call->headers_sent = 1;
    mark_dirty(c);
    return 0;
}

int grpc_h2_write(grpc_call *call, const void *p, size_t n)
{
    grpc_conn *c = call->conn;
    if (!call->raw || !call->headers_sent || call->finished || call->closed || c->closed)
        return -EPIPE;
    if (buf_append(&call->out, p, n) != 0)
        return -ENOMEM;
    if (call->deferred) {
        call->deferred = 0;
        nghttp2_session_resume_data(c->sess, call->stream_id);
    }
    mark_dirty(c);
    return 0;
}

grpc_server *grpc_call_h2_server(const grpc_call *call)
{
    return call->srv;
}

void grpc_h2_end(grpc_call *call)
{
    grpc_conn *c = call->conn;
    if (!call->raw || !call->headers_sent || call->finished || call->closed || c->closed)
        return;
    call->finished = 1;
    if (call->deferred) {
        call->deferred = 0;
        nghttp2_session_resume_data(c->sess, call->stream_id);
    }
    mark_dirty(c);
}

/* ---- local calls ---- */

int grpc_call_open_local(grpc_server *srv, const char *path, const struct grpc_local_ops *ops,
                         void *ctx, const char *token, size_t token_len, grpc_call **out)
{
    if (srv->closing)
        return -ESHUTDOWN;
    nghttp2_vec pv = {(uint8_t *)path, strlen(path)};
    const struct grpc_method *m = method_find(srv, pv);
    if (m == NULL)
        return -ENOENT;
    grpc_call *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return -ENOMEM;
    if (token != NULL && (call->ltoken = strndup(token, token_len)) == NULL) {
        free(call);
        return -ENOMEM;
    }
    call->ltoken_len = token_len;
    call->srv = srv;
    call->method = m;
    call->lops = ops;
    call->lctx = ctx;
    if (!ops->unmetered)
        call_started(call);
    call->lnext = srv->locals;
    if (srv->locals)
        srv->locals->lprev = call;
    srv->locals = call;
    *out = call;
    return 0;
}

/* local_free delivers on_close (once) and frees a local call. */
static void local_free(grpc_call *call)
{
    grpc_server *srv = call->srv;
    if (call->lprev)
        call->lprev->lnext = call->lnext;
    else
        srv->locals = call->lnext;
    if (call->lnext)
        call->lnext->lprev = call->lprev;
    if (call->lqueued) { /* rare: freed with input still queued */
        grpc_call **pp = &srv->lq_head, *prev = NULL;
        while (*pp != call) {
            prev = *pp;
            pp = &(*pp)->lq_next;
        }
        *pp = call->lq_next;
        if (srv->lq_tail == call)
            srv->lq_tail = prev;
    }
    buf_free(&call->lin);
    call->lreaping = 1; /* the face is gone: sends fail, finish is dropped */
    call_handled(call, GRPC_STATUS_CANCELLED); /* if it had no status */
    if (!call->closed) {
        call->closed = 1;
        call->finished = 1;
        if (call->method->on_close)
            call->method->on_close(call);
    }
    free(call->ltoken);
    free(call);
}

/* local_reap schedules on_close and the free for the next loop pass: a
 * call ends inside the service's own stack (its finish), which must not
 * see its on_close before it returns. */
static void local_reap(grpc_call *call)
{
    if (call->lreaping)
        return;
    call->lreaping = 1;
    call->reap_next = call->srv->reap;
    call->srv->reap = call;
}

/* local_fail ends a local call with an error the grpc layer found, as the
 * HTTP/2 face does (the face hears it through its finish). */
static void local_fail(grpc_call *call, int status, const char *msg)
{
    if (call->finished || call->lreaping)
        return;
    call->finished = 1;
    call_handled(call, status);
    call->lops->finish(call->lctx, status, msg);
    local_reap(call);
}

static void local_enqueue(grpc_call *call)
{
    grpc_server *srv = call->srv;
    if (call->lqueued)
        return;
    call->lqueued = 1;
    call->lq_next = NULL;
    if (srv->lq_tail)
        srv->lq_tail->lq_next = call;
    else
        srv->lq_head = call;
    srv->lq_tail = call;
    if (!uv_is_active((uv_handle_t *)&srv->lq_idle))
        uv_idle_start(&srv->lq_idle, on_lq_idle);
}

int grpc_call_local_message(grpc_call *call, const uint8_t *msg, size_t len)
{
    if (call->finished || call->lreaping)
        return -EPIPE;
    if (len > call->srv->max_recv) {
        char text[128];
        snprintf(text, sizeof(text), "grpc: received message larger than max (%zu vs. %zu)", len,
                 call->srv->max_recv);
        local_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, text);
        return -EMSGSIZE;
    }
    enum grpc_method_kind k = call->method->kind;
    if (call->lmsgs > 0 && (k == GRPC_UNARY || k == GRPC_SERVER_STREAMING)) {
        local_fail(call, GRPC_STATUS_INTERNAL,
                   "grpc: received more than one request message for a unary request");
        return -EPROTO;
    }
    uint32_t n = (uint32_t)len;
    if (buf_reserve(&call->lin, 4 + len) != 0) {
        local_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return -ENOMEM;
    }
    memcpy(call->lin.data + call->lin.len, &n, 4);
    if (len > 0)
        memcpy(call->lin.data + call->lin.len + 4, msg, len);
    call->lin.len += 4 + len;
    call->lmsgs++;
    local_enqueue(call);
    return 0;
}

void grpc_call_local_half_close(grpc_call *call)
{
    if (call->finished || call->lreaping)
        return;
    call->lhalf = 1;
    local_enqueue(call);
}

/* local_deliver hands a local call its queued input, from the loop (the
 * server's prepare handle), never from the stack of whoever gave it: a
 * face that answers one request and starts the next from inside a
 * service's finish would otherwise run a second service call nested in
 * the first (inside its read or write transaction). */
static void local_deliver(grpc_call *call)
{
    struct buf in = call->lin;
    call->lin = (struct buf){0};
    size_t off = 0;
    while (off + 4 <= in.len && !call->finished && !call->lreaping) {
        uint32_t n;
        memcpy(&n, in.data + off, 4);
        off += 4;
        call->got_message = 1;
        call_received(call, n);
        call->method->on_message(call, in.data + off, n);
        off += n;
    }
    buf_free(&in);
    if (!call->lhalf || call->finished || call->lreaping || call->lin.len > 0)
        return; /* more input came meanwhile: it is queued again, the half-close after it */
    call->lhalf = 0;
    enum grpc_method_kind k = call->method->kind;
    if (k == GRPC_UNARY || k == GRPC_SERVER_STREAMING) {
        if (!call->got_message)
            local_fail(call, GRPC_STATUS_INTERNAL, "grpc: received no request message");
        return;
    }
    if (call->method->on_half_close)
        call->method->on_half_close(call);
}

void grpc_call_local_cancel(grpc_call *call)
{
    local_reap(call);
}

/* ---- HTTP/1.1 connections (grpc_http1) ---- */

grpc_server *grpc_conn_server(const grpc_conn *c)
{
    return c->srv;
}

uv_loop_t *grpc_server_loop(const grpc_server *srv)
{
    return srv->loop;
}

int grpc_conn_write(grpc_conn *c, const void *p, size_t n)
{
    if (c->closed || c->shutdown || c->want_close)
        return -EPIPE;
    if (n > 0 && buf_append(&c->obuf, p, n) != 0)
        return -ENOMEM;
    mark_dirty(c);
    return 0;
}

size_t grpc_conn_pending(const grpc_conn *c)
{
    return c->obuf.len + (c->writing ? c->wbuf.len : 0);
}

void grpc_conn_shutdown(grpc_conn *c)
{
    if (c->closed || c->shutdown)
        return;
    c->shutdown = 1;
    stop_reading(c);
    mark_dirty(c); /* conn_flush -> conn_check closes once written */
}

void grpc_conn_pause_read(grpc_conn *c, bool pause)
{
    if (c->closed || c->read_stopped == 2 || c->is_mem)
        return;
    if (pause && c->read_stopped == 0) {
        tls_stream_read_stop(&c->ts);
        c->read_stopped = 3;
    } else if (!pause && c->read_stopped == 3) {
        c->read_stopped = 0;
        if (tls_stream_read_start(&c->ts, on_alloc, on_read) != 0)
            conn_close(c);
    }
}

const char *grpc_conn_tls_common_name(const grpc_conn *c)
{
    return c->is_mem ? NULL : tls_stream_peer_cn(&c->ts);
}

/* ---- connections without a socket ---- */

int grpc_conn_new_mem(grpc_server *srv, grpc_conn **out)
{
    grpc_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->srv = srv;
    c->is_mem = 1;
    c->mode = srv->http1 != NULL ? MODE_SNIFF : MODE_H2;
    if (session_new(c) != 0) {
        free(c);
        return -ENOMEM;
    }
    conn_link(c);
    *out = c;
    return 0;
}

int grpc_conn_mem_feed(grpc_conn *c, const uint8_t *p, size_t n)
{
    if (c->closed)
        return -EPROTO;
    if (c->mode == MODE_SNIFF && sniff(c, &p, &n) != 0)
        return c->closed ? -EPROTO : 0;
    if (c->mode == MODE_H1) {
        if (c->read_stopped != 2 && c->srv->http1->input(c->h1, p, n) != 0 && !c->closed)
            stop_reading(c);
        if (conn_check(c))
            return -EPROTO;
        return 0;
    }
    int rv = conn_input(c, p, n);
    if (c->closed)
        return -EPROTO;
    if (serialize(c, SIZE_MAX) != 0) {
        conn_close(c);
        return -EPROTO;
    }
    if (conn_check(c))
        return -EPROTO;
    return rv;
}

struct buf *grpc_conn_mem_output(grpc_conn *c)
{
    return &c->obuf;
}

void grpc_conn_mem_free(grpc_conn *c)
{
    conn_close(c);
    buf_free(&c->obuf);
    buf_free(&c->wbuf);
    free(c);
}
