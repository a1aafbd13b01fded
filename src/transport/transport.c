/* transport/transport.c: TCP links between members on the libuv loop.
 *
 * Objects and who frees them (libuv's rule: memory goes in close callbacks):
 *   struct transport  the whole thing; freed when its last handle or object
 *                     is gone after transport_close (t->refs counts them).
 *   struct peer       a member we send to: queue, backoff timer, stats. Freed
 *                     in the close callback of its timer.
 *   struct out_conn   one outgoing message connection of a peer. A failed
 *                     connection is detached from its peer at once and freed
 *                     in its close callback, so a new connection can start
 *                     while the old one is still closing.
 *   struct snap_out   one outgoing snapshot transfer (its own connection).
 *   struct conn       one accepted connection (messages or a snapshot).
 * Objects that may have a file-system request in flight (snap_out, conn)
 * count their handle and request in |refs| and are freed when both ended.
 *
 * A user callback may call transport_close or transport_remove_peer. Neither
 * frees memory synchronously, so after a callback the code only has to check
 * t->closing and whether its object was detached. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/log.h"
#include "base/metrics.h"
#include "tls/tls.h"
#include "transport/transport.h"

#define MOD "transport"
#define MAGIC "QRMT"
#define HS_LEN 32
#define REPLY_LEN 24
#define KIND_MSGS 0
#define KIND_SNAP 1
#define KIND_MEMBERS 2
#define MAX_MEMBERS_REPLY (1u << 20)
#define READ_CHUNK 65536
#define BIG_BUF (4u << 20)
/* handshake reply flags (its byte 7, which members before them send as 0
 * and ignore): the listener answers TRANSPORT_MSG_PING */
#define REPLY_FLAG_PING 1u
#define PING_MS_DEFAULT 4000 /* etcd's prober: every ConnReadTimeout - 1 s */

struct transport;

struct out_conn {
    struct transport *t;
    struct peer *peer; /* NULL once detached (closing) */
    struct tls_stream ts; /* the socket, with TLS or without */
    uv_connect_t creq;
    uv_write_t wreq;
    uint8_t hs[HS_LEN];
    bool ready; /* handshake accepted */
    bool ping_ok; /* the peer answers pings (REPLY_FLAG_PING) */
    bool writing;
    struct buf in;
    struct buf inflight; /* frames handed to the current write */
    size_t inflight_msgs;
};

enum snap_src { SRC_READER, SRC_FILE, SRC_MEM };

struct snap_out {
    struct transport *t;
    struct peer *peer; /* NULL once detached */
    uint64_t to;
    int refs;
    bool closing, reported, acked_ok, header_sent, crc_sent;
    struct tls_stream ts;
    uv_connect_t creq;
    uv_write_t hsreq; /* the handshake: may overlap the header write */
    uv_write_t wreq;  /* header, chunks, CRC: one after the other */
    uv_fs_t fsreq;
    uint8_t hs[HS_LEN];
    struct buf hdr; /* header frame + data size */
    struct buf chunk;
    struct buf in;
    enum snap_src src;
    struct transport_snap_reader reader;
    uv_file fd;
    uint8_t *mem;
    uint64_t size, off;
    uint32_t crc;
    uint8_t crcbuf[4];
    size_t wlen; /* bytes of the write in flight */
};

struct resolve;

struct peer {
    struct transport *t;
    struct peer *next;
    uint64_t id;
    struct sockaddr_storage addr;
    /* a peer URL with a host name: resolved before every dial (as Go's
     * dialer resolves), on libuv's thread pool */
    char host[256];
    int port;
    bool named;
    bool have_addr;  /* |addr| holds a resolved address */
    bool fresh_addr; /* resolved for the dial about to be made */
    struct resolve *rq;
    bool tls; /* dial with TLS (an https:// peer URL) */
    uv_timer_t timer;
    bool backoff_active;
    unsigned backoff_ms;
    struct out_conn *oc;
    struct snap_out *snap;
    struct buf pending; /* length-prefixed frames not yet written */
    size_t pending_msgs;
    size_t pending_pings; /* PING/PONG frames among them (not in |st|) */
    struct transport_peer_stats st;
    struct peer_metrics {
        metric_t sent_bytes, sent_failures, recv_bytes, recv_failures, active, disconnected;
        struct metrics_series *rtt;
    } m;
};

enum conn_state { C_HANDSHAKE, C_MSGS, C_SNAP_HEADER, C_SNAP_DATA, C_SNAP_CRC, C_DONE };

struct conn {
    struct transport *t;
    struct conn *next;
    int refs;
    bool closing;
    enum conn_state state;
    uint64_t from;
    metric_t recv_bytes, recv_failures; /* from's, once it said hello */
    struct tls_stream ts;
    uv_timer_t hs_timer; /* closes a connection that never says hello */
    uv_fs_t fsreq;
    bool fs_busy;
    struct buf in;
    size_t in_off; /* bytes of |in| already parsed */
    /* snapshot reception */
    struct buf hdr; /* the header frame; snapv points into it */
    struct transport_msg_view snapv;
    uint64_t size, got, written;
    uint32_t crc;
    struct buf chunk;
    uv_file fd;
    char *path;
};

struct transport {
    uv_loop_t *loop;
    struct transport_options o;
    char *snap_dir;
    int refs;
    bool closing;
    void (*close_cb)(void *);
    void *close_arg;
    uv_idle_t idle;
    bool idle_active;
    uv_timer_t ping_timer; /* RTT probes of the peers */
    uv_tcp_t *listener;
    struct sockaddr_storage local; /* ss_family 0: no local_addr */
    struct peer *peers;
    struct conn *conns;
};

/* ---- metrics ----
 *
 * etcd's rafthttp metrics, by peer (its member id in hex, as etcd's
 * types.ID prints it): bytes sent and received (messages and snapshots),
 * send failures (every message dropped: queue full, write failed, peer
 * refused, or queued while the peer is unreachable), receive failures (a
 * broken or undecodable link), the round
 * trip time of a PING answered by a PONG (every 4 s, like etcd's prober;
 * only to members whose handshake reply says they answer), and
 * etcd_network_active_peers / _disconnected_peers_total for the message
 * link. On the loop thread, the core's shard. */

static struct {
    struct metrics_family *sent, *recv, *sent_fail, *recv_fail, *rtt, *active, *disconnected;
} tf;

static void families_register(void)
{
    const char *const to[] = {"To", NULL}, *const from[] = {"From", NULL};
    const char *const pair[] = {"Local", "Remote", NULL};
    double b[16];
    tf.sent = metrics_family("etcd_network_peer_sent_bytes_total",
                             "The total number of bytes sent to peers.", METRICS_COUNTER, to,
                             NULL, 0);
    tf.recv = metrics_family("etcd_network_peer_received_bytes_total",
                             "The total number of bytes received from peers.", METRICS_COUNTER,
                             from, NULL, 0);
    tf.sent_fail = metrics_family("etcd_network_peer_sent_failures_total",
                                  "The total number of send failures from peers.",
                                  METRICS_COUNTER, to, NULL, 0);
    tf.recv_fail = metrics_family("etcd_network_peer_received_failures_total",
                                  "The total number of receive failures from peers.",
                                  METRICS_COUNTER, from, NULL, 0);
    tf.rtt = metrics_family("etcd_network_peer_round_trip_time_seconds",
                            "Round-Trip-Time histogram between peers", METRICS_HISTOGRAM, to,
                            metrics_exp_buckets(0.0001, 2, 16, b), 16);
    tf.active = metrics_family("etcd_network_active_peers",
                               "The current number of active peer connections.", METRICS_GAUGE,
                               pair, NULL, 0);
    tf.disconnected = metrics_family("etcd_network_disconnected_peers_total",
                                     "The total number of disconnected peers.", METRICS_COUNTER,
                                     pair, NULL, 0);
}

static void peer_metrics_init(const struct transport *t, struct peer *p)
{
    char id[24], local[24];
    snprintf(id, sizeof(id), "%" PRIx64, p->id);
    snprintf(local, sizeof(local), "%" PRIx64, t->o.id);
    const char *v1[] = {id}, *v2[] = {local, id};
    p->m.sent_bytes = metrics_slot(metrics_series(tf.sent, v1));
    p->m.sent_failures = metrics_slot(metrics_series(tf.sent_fail, v1));
    p->m.recv_bytes = metrics_slot(metrics_series(tf.recv, v1));
    p->m.recv_failures = metrics_slot(metrics_series(tf.recv_fail, v1));
    p->m.rtt = metrics_series(tf.rtt, v1);
    p->m.active = metrics_slot(metrics_series(tf.active, v2));
    p->m.disconnected = metrics_slot(metrics_series(tf.disconnected, v2));
}

static void peer_drop(struct peer *p, uint64_t n)
{
    p->st.dropped += n;
    metrics_add(p->m.sent_failures, n);
}

/* ---- helpers ---- */

static void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static uint16_t get_be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}
static uint32_t get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static int parse_addr(const char *host, int port, struct sockaddr_storage *ss)
{
    if (host == NULL || port < 0 || port > 65535)
        return -EINVAL;
    memset(ss, 0, sizeof(*ss));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return -EINVAL;
}

static void make_handshake(const struct transport *t, uint8_t kind, uint64_t to, uint8_t *hs)
{
    memcpy(hs, MAGIC, 4);
    put_be16(hs + 4, TRANSPORT_PROTOCOL_VERSION);
    hs[6] = kind;
    hs[7] = 0;
    put_be64(hs + 8, t->o.cluster_id);
    put_be64(hs + 16, t->o.id);
    put_be64(hs + 24, to);
}

static void t_unref(struct transport *t)
{
    if (--t->refs == 0 && t->closing) {
        void (*cb)(void *) = t->close_cb;
        void *arg = t->close_arg;
        free(t->snap_dir);
        free(t);
        if (cb != NULL)
            cb(arg);
    }
}

static struct peer *peer_find(const struct transport *t, uint64_t id)
{
    for (struct peer *p = t->peers; p != NULL; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

static void alloc_in(struct buf *in, uv_buf_t *b)
{
    if (buf_reserve(in, READ_CHUNK) != 0) {
        b->base = NULL;
        b->len = 0;
        return;
    }
    b->base = (char *)in->data + in->len;
    b->len = in->cap - in->len;
}

/* Handshake reply parsing shared by both kinds of outgoing connection:
 * returns 1 accepted, 0 need more bytes, -1 rejected (|reason| filled),
 * -2 garbage. */
static int parse_reply(const struct buf *in, char *reason, size_t rcap)
{
    if (in->len < REPLY_LEN + 2)
        return 0;
    const uint8_t *p = in->data;
    if (memcmp(p, MAGIC, 4) != 0 || p[6] > 1)
        return -2;
    size_t n = get_be16(p + 24);
    if (in->len < REPLY_LEN + 2 + n)
        return 0;
    if (p[6] == 0)
        return n == 0 && in->len == REPLY_LEN + 2 ? 1 : -2;
    size_t k = n < rcap - 1 ? n : rcap - 1;
    memcpy(reason, p + REPLY_LEN + 2, k);
    reason[k] = '\0';
    return -1;
}

/* set_peer_host records where |p| is: a numeric address at once, a name
 * for resolution at each dial. */
static int set_peer_host(struct peer *p, const char *host, int port)
{
    struct sockaddr_storage ss;
    if (host == NULL || port < 0 || port > 65535 || strlen(host) >= sizeof(p->host) ||
        host[0] == '\0')
        return -EINVAL;
    snprintf(p->host, sizeof(p->host), "%s", host);
    p->port = port;
    p->fresh_addr = false;
    if (parse_addr(host, port, &ss) == 0) {
        p->addr = ss;
        p->named = false;
        p->have_addr = true;
    } else {
        p->named = true;
        p->have_addr = false;
    }
    return 0;
}

/* A name being resolved for a peer; outlives the peer if it must (the
 * peer is then NULL). */
struct resolve {
    uv_getaddrinfo_t req;
    struct transport *t;
    struct peer *peer;
};

static void peer_connect(struct peer *p);
static void peer_fail(struct peer *p);

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct resolve *rq = req->data;
    struct transport *t = rq->t;
    struct peer *p = rq->peer;
    if (p != NULL)
        p->rq = NULL;
    if (p != NULL && !t->closing) {
        const struct addrinfo *pick = NULL;
        for (const struct addrinfo *a = res; status == 0 && a != NULL; a = a->ai_next)
            if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
                (pick == NULL || (pick->ai_family == AF_INET6 && a->ai_family == AF_INET)))
                pick = a; /* the first IPv4 address, as Go's "tcp" resolver */
        if (pick != NULL) {
            memset(&p->addr, 0, sizeof(p->addr));
            memcpy(&p->addr, pick->ai_addr, pick->ai_addrlen);
            p->have_addr = true;
            p->fresh_addr = true;
            peer_connect(p);
        } else {
            log_warn(MOD, "cannot resolve %s for member %" PRIx64 ": %s", p->host, p->id,
                     status != 0 ? uv_strerror(status) : "no address");
            peer_fail(p);
        }
    }
    uv_freeaddrinfo(res);
    free(rq);
    t_unref(t);
}

/* peer_resolve looks the peer's name up; peer_connect follows. */
static void peer_resolve(struct peer *p)
{
    struct transport *t = p->t;
    if (p->rq != NULL)
        return;
    struct resolve *rq = calloc(1, sizeof(*rq));
    if (rq == NULL) {
        peer_fail(p);
        return;
    }
    rq->t = t;
    rq->peer = p;
    rq->req.data = rq;
    char port[8];
    snprintf(port, sizeof(port), "%d", p->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rv = uv_getaddrinfo(t->loop, &rq->req, on_resolved, p->host, port, &hints);
    if (rv != 0) {
        free(rq);
        log_warn(MOD, "cannot resolve %s for member %" PRIx64 ": %s", p->host, p->id,
                 uv_strerror(rv));
        peer_fail(p);
        return;
    }
    p->rq = rq;
    t->refs++;
}

/* link_init sets up the socket of a connection: to peer |p| (TLS when its
 * URL is https://), or accepted (|p| NULL: TLS when the listener is). */
static int link_init(struct transport *t, struct tls_stream *ts, const struct peer *p)
{
    tls_conn *tc = NULL;
    bool tls = p != NULL ? p->tls : t->o.tls_server != NULL;
    if (tls) {
        struct tls_ctx *ctx = p != NULL ? t->o.tls_client : t->o.tls_server;
        char host[256] = "";
        if (ctx == NULL) {
            log_warn(MOD, "member %" PRIx64 " has an https:// peer URL but no peer TLS is "
                          "configured (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file)",
                     p->id);
            return -EINVAL;
        }
        if (p != NULL && p->named) {
            snprintf(host, sizeof(host), "%s", p->host);
        } else if (p != NULL) {
            if (p->addr.ss_family == AF_INET6)
                uv_ip6_name((const struct sockaddr_in6 *)&p->addr, host, sizeof(host));
            else
                uv_ip4_name((const struct sockaddr_in *)&p->addr, host, sizeof(host));
        }
        int rv = tls_conn_new(ctx, p != NULL ? host : NULL, &tc);
        if (rv != 0)
            return rv;
    }
    return tls_stream_init(ts, t->loop, tc, "peer");
}

/* bind_local binds an outgoing connection's socket to the local address
 * of the options (port 0), when there is one of the peer's family. */
static int bind_local(const struct transport *t, uv_tcp_t *tcp, const struct peer *p)
{
    if (t->local.ss_family == 0 || t->local.ss_family != p->addr.ss_family)
        return 0;
    return uv_tcp_bind(tcp, (const struct sockaddr *)&t->local, 0);
}

/* ---- outgoing message connections ---- */

static void peer_connect(struct peer *p);
static void flush_peer(struct peer *p);
static void backoff_fired(uv_timer_t *h);
static void ping_received(struct transport *t, const struct raft_msg *m);

static void oc_closed(uv_handle_t *h)
{
    struct out_conn *oc = h->data;
    struct transport *t = oc->t;
    buf_free(&oc->in);
    buf_free(&oc->inflight);
    free(oc);
    t_unref(t);
}

/* oc_detach closes the peer's message connection. */
static void oc_detach(struct peer *p)
{
    struct out_conn *oc = p->oc;
    if (oc == NULL)
        return;
    p->oc = NULL;
    oc->peer = NULL;
    if (p->st.connected) {
        metrics_gauge_add(p->m.active, -1);
        metrics_inc(p->m.disconnected);
    }
    p->st.connected = false;
    if (oc->writing)
        peer_drop(p, oc->inflight_msgs); /* the write will be cancelled */
    tls_stream_close(&oc->ts, oc_closed);
}

/* peer_fail drops the connection and retries after the backoff. */
static void peer_fail(struct peer *p)
{
    struct transport *t = p->t;
    oc_detach(p);
    if (t->closing)
        return;
    p->backoff_active = true;
    uv_timer_start(&p->timer, backoff_fired, p->backoff_ms, 0);
    unsigned max = t->o.backoff_max_ms;
    p->backoff_ms = p->backoff_ms > max / 2 ? max : p->backoff_ms * 2;
}

static void backoff_fired(uv_timer_t *h)
{
    struct peer *p = h->data;
    p->backoff_active = false;
    if (p->pending_msgs > 0)
        peer_connect(p);
}

static void drop_pending(struct peer *p)
{
    peer_drop(p, p->pending_msgs);
    p->pending_msgs = 0;
    p->pending_pings = 0;
    buf_reset(&p->pending);
}

static void oc_write_done(uv_write_t *req, int status)
{
    struct out_conn *oc = req->data;
    struct peer *p = oc->peer;
    oc->writing = false;
    if (p == NULL) /* detached: counted as dropped already */
        return;
    if (status < 0) {
        log_debug(MOD, "write to member %" PRIx64 " failed: %s", p->id, uv_strerror(status));
        peer_drop(p, oc->inflight_msgs);
        oc->inflight_msgs = 0;
        peer_fail(p);
        return;
    }
    p->st.sent += oc->inflight_msgs;
    metrics_add(p->m.sent_bytes, oc->inflight.len);
    oc->inflight_msgs = 0;
    /* a burst must not pin its memory for the life of the link */
    if (oc->inflight.cap > BIG_BUF)
        buf_free(&oc->inflight);
    else
        buf_reset(&oc->inflight);
    /* everything queued while this write ran goes out in the next one */
    flush_peer(p);
}

/* flush_peer hands all queued frames to one write if the link is ready. */
static void flush_peer(struct peer *p)
{
    struct out_conn *oc = p->oc;
    if (oc == NULL || !oc->ready || oc->writing || (p->pending_msgs == 0 && p->pending_pings == 0))
        return;
    struct buf tmp = oc->inflight;
    oc->inflight = p->pending;
    p->pending = tmp;
    buf_reset(&p->pending);
    oc->inflight_msgs = p->pending_msgs;
    p->pending_msgs = 0;
    p->pending_pings = 0;
    uv_buf_t b = uv_buf_init((char *)oc->inflight.data, (unsigned)oc->inflight.len);
    oc->wreq.data = oc;
    int rv = tls_stream_write(&oc->ts, &oc->wreq, &b, 1, oc_write_done);
    if (rv != 0) {
        peer_drop(p, oc->inflight_msgs);
        oc->inflight_msgs = 0;
        peer_fail(p);
        return;
    }
    oc->writing = true;
    p->st.writes++;
}

static void oc_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct out_conn *oc = h->data;
    alloc_in(&oc->in, b);
}

static void oc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct out_conn *oc = s->data;
    struct peer *p = oc->peer;
    if (p == NULL || nread == 0)
        return;
    if (nread < 0) {
        log_debug(MOD, "message link to member %" PRIx64 " closed: %s", p->id,
                  uv_strerror((int)nread));
        peer_fail(p);
        return;
    }
    oc->in.len += (size_t)nread;
    if (oc->ready) { /* the listener never writes after the reply */
        log_warn(MOD, "member %" PRIx64 " sent unexpected bytes on the message link", p->id);
        peer_fail(p);
        return;
    }
    char reason[300];
    int r = parse_reply(&oc->in, reason, sizeof(reason));
    if (r == 0)
        return;
    struct transport *t = p->t;
    if (r == 1) {
        oc->ready = true;
        oc->ping_ok = (oc->in.data[7] & REPLY_FLAG_PING) != 0;
        p->backoff_ms = t->o.backoff_min_ms;
        p->st.connects++;
        p->st.connected = true;
        metrics_gauge_add(p->m.active, 1);
        buf_reset(&oc->in);
        log_debug(MOD, "message link to member %" PRIx64 " is up", p->id);
        flush_peer(p);
        return;
    }
    if (r == -2) {
        log_warn(MOD, "member %" PRIx64 " answered the handshake with garbage", p->id);
        peer_fail(p);
        return;
    }
    p->st.rejections++;
    log_warn(MOD, "member %" PRIx64 " rejected our connection: %s", p->id, reason);
    drop_pending(p);
    peer_fail(p);
    if (t->o.cb.on_peer_rejected != NULL)
        t->o.cb.on_peer_rejected(p->id, reason, t->o.arg);
}

static void oc_connected(uv_connect_t *req, int status)
{
    struct out_conn *oc = req->data;
    struct peer *p = oc->peer;
    if (p == NULL)
        return;
    if (status < 0) {
        log_debug(MOD, "connect to member %" PRIx64 " failed: %s", p->id, uv_strerror(status));
        peer_fail(p);
        return;
    }
    uv_tcp_nodelay(&oc->ts.tcp, 1);
    uv_tcp_keepalive(&oc->ts.tcp, 1, 30);
    make_handshake(p->t, KIND_MSGS, p->id, oc->hs);
    uv_buf_t b = uv_buf_init((char *)oc->hs, HS_LEN);
    oc->wreq.data = oc;
    oc->writing = true; /* no inflight messages: a failure counts nothing */
    if (tls_stream_write(&oc->ts, &oc->wreq, &b, 1, oc_write_done) != 0 ||
        tls_stream_read_start(&oc->ts, oc_alloc, oc_read) != 0) {
        peer_fail(p);
    }
}

static void peer_connect(struct peer *p)
{
    struct transport *t = p->t;
    if (p->oc != NULL || p->backoff_active || t->closing)
        return;
    if (p->named && !p->fresh_addr) {
        peer_resolve(p);
        return;
    }
    p->fresh_addr = false;
    struct out_conn *oc = calloc(1, sizeof(*oc));
    if (oc == NULL) {
        peer_fail(p);
        return;
    }
    if (link_init(t, &oc->ts, p) != 0) {
        free(oc);
        peer_fail(p);
        return;
    }
    t->refs++;
    p->st.dials++;
    oc->t = t;
    oc->ts.tcp.data = oc;
    oc->peer = p;
    p->oc = oc;
    oc->creq.data = oc;
    int rv = bind_local(t, &oc->ts.tcp, p);
    if (rv == 0)
        rv = uv_tcp_connect(&oc->creq, &oc->ts.tcp, (struct sockaddr *)&p->addr, oc_connected);
    if (rv != 0) {
        log_debug(MOD, "connect to member %" PRIx64 ": %s", p->id, uv_strerror(rv));
        peer_fail(p);
    }
}

static void idle_run(uv_idle_t *h)
{
    struct transport *t = h->data;
    uv_idle_stop(h);
    t->idle_active = false;
    for (struct peer *p = t->peers; p != NULL; p = p->next) {
        if (p->oc == NULL && p->pending_msgs > 0)
            peer_connect(p);
        else
            flush_peer(p);
    }
}

/* ---- outgoing snapshot transfers ---- */

static void snap_closed(uv_handle_t *h);

static void snap_unref(struct snap_out *s)
{
    if (--s->refs > 0)
        return;
    struct transport *t = s->t;
    if (s->reader.release_fn != NULL)
        s->reader.release_fn(s->reader.rarg);
    if (s->src == SRC_FILE && s->fd >= 0) {
        uv_fs_t req;
        uv_fs_close(NULL, &req, s->fd, NULL);
        uv_fs_req_cleanup(&req);
    }
    free(s->mem);
    buf_free(&s->hdr);
    buf_free(&s->chunk);
    buf_free(&s->in);
    free(s);
    t_unref(t);
}

static void snap_closed(uv_handle_t *h)
{
    snap_unref(h->data);
}

/* snap_finish reports the outcome (once) and closes the connection. */
static void snap_finish(struct snap_out *s, bool ok)
{
    if (s->closing)
        return;
    s->closing = true;
    struct peer *p = s->peer;
    struct transport *t = s->t;
    tls_stream_close(&s->ts, snap_closed);
    if (p == NULL)
        return;
    p->snap = NULL;
    s->peer = NULL;
    if (ok)
        log_info(MOD, "sent snapshot (%" PRIu64 " bytes) to member %" PRIx64, s->size, s->to);
    else
        log_warn(MOD, "failed to send snapshot to member %" PRIx64, s->to);
    if (!t->closing && t->o.cb.on_snapshot_sent != NULL)
        t->o.cb.on_snapshot_sent(s->to, ok, t->o.arg);
}

static void snap_next(struct snap_out *s);

static void snap_write_done(uv_write_t *req, int status)
{
    struct snap_out *s = req->data;
    if (s->closing)
        return;
    if (status < 0) {
        log_warn(MOD, "snapshot to member %" PRIx64 ": write failed: %s", s->to,
                 uv_strerror(status));
        snap_finish(s, false);
        return;
    }
    if (s->peer != NULL)
        metrics_add(s->peer->m.sent_bytes, s->wlen);
    if (!s->crc_sent)
        snap_next(s);
    /* else: wait for the receiver's one-byte answer */
}

static void snap_write(struct snap_out *s, const void *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    s->wreq.data = s;
    s->wlen = n;
    if (tls_stream_write(&s->ts, &s->wreq, &b, 1, snap_write_done) != 0)
        snap_finish(s, false);
}

static void snap_send_chunk(struct snap_out *s, size_t n)
{
    s->crc = crc32c_update(s->crc, s->chunk.data, n);
    s->off += n;
    snap_write(s, s->chunk.data, n);
}

static void snap_file_read(uv_fs_t *req)
{
    struct snap_out *s = req->data;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    if (s->closing) {
        snap_unref(s);
        return;
    }
    snap_unref(s); /* still referenced by its handle: not freed */
    size_t want = s->chunk.len;
    if (n <= 0 || (size_t)n != want) {
        log_warn(MOD, "snapshot to member %" PRIx64 ": read failed: %s", s->to,
                 n < 0 ? uv_strerror((int)n) : "short read");
        snap_finish(s, false);
        return;
    }
    snap_send_chunk(s, (size_t)n);
}

/* snap_next sends the next chunk of data, or the CRC after the last. */
static void snap_next(struct snap_out *s)
{
    if (s->off == s->size) {
        put_be32(s->crcbuf, s->crc);
        s->crc_sent = true;
        snap_write(s, s->crcbuf, 4);
        return;
    }
    uint64_t left = s->size - s->off;
    size_t n = left < s->t->o.snap_chunk ? (size_t)left : s->t->o.snap_chunk;
    buf_reset(&s->chunk);
    if (buf_reserve(&s->chunk, n) != 0) {
        snap_finish(s, false);
        return;
    }
    switch (s->src) {
    case SRC_MEM:
        memcpy(s->chunk.data, s->mem + s->off, n);
        snap_send_chunk(s, n);
        return;
    case SRC_READER: {
        int rv = s->reader.read_fn(s->reader.rarg, s->off, s->chunk.data, n);
        if (s->closing)
            return;
        if (rv != 0) {
            log_warn(MOD, "snapshot to member %" PRIx64 ": reader failed (%d)", s->to, rv);
            snap_finish(s, false);
            return;
        }
        snap_send_chunk(s, n);
        return;
    }
    case SRC_FILE: {
        s->chunk.len = n; /* remembered for the callback */
        uv_buf_t b = uv_buf_init((char *)s->chunk.data, (unsigned)n);
        s->fsreq.data = s;
        if (uv_fs_read(s->t->loop, &s->fsreq, s->fd, &b, 1, (int64_t)s->off, snap_file_read) != 0) {
            snap_finish(s, false);
            return;
        }
        s->refs++;
        return;
    }
    }
}

static void snap_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct snap_out *s = h->data;
    alloc_in(&s->in, b);
}

static void snap_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct snap_out *s = st->data;
    if (s->closing || nread == 0)
        return;
    if (nread < 0) {
        snap_finish(s, false);
        return;
    }
    s->in.len += (size_t)nread;
    if (!s->header_sent) {
        char reason[300];
        int r = parse_reply(&s->in, reason, sizeof(reason));
        if (r == 0)
            return;
        if (r != 1) {
            if (r == -1) {
                log_warn(MOD, "member %" PRIx64 " rejected our snapshot connection: %s", s->to,
                         reason);
                if (s->peer != NULL)
                    s->peer->st.rejections++;
            }
            struct transport *t = s->t;
            uint64_t to = s->to;
            snap_finish(s, false);
            if (r == -1 && !t->closing && t->o.cb.on_peer_rejected != NULL)
                t->o.cb.on_peer_rejected(to, reason, t->o.arg);
            return;
        }
        buf_reset(&s->in);
        s->header_sent = true;
        snap_write(s, s->hdr.data, s->hdr.len);
        return;
    }
    /* the receiver's answer: one byte after our CRC */
    if (!s->crc_sent || s->in.len != 1) {
        snap_finish(s, false);
        return;
    }
    snap_finish(s, s->in.data[0] == 0);
}

static void snap_hs_written(uv_write_t *req, int status)
{
    struct snap_out *s = req->data;
    if (status < 0 && !s->closing)
        snap_finish(s, false);
}

static void snap_connected(uv_connect_t *req, int status)
{
    struct snap_out *s = req->data;
    if (s->closing)
        return;
    if (status < 0) {
        log_warn(MOD, "snapshot to member %" PRIx64 ": connect failed: %s", s->to,
                 uv_strerror(status));
        snap_finish(s, false);
        return;
    }
    uv_tcp_nodelay(&s->ts.tcp, 1);
    make_handshake(s->t, KIND_SNAP, s->to, s->hs);
    if (tls_stream_read_start(&s->ts, snap_alloc, snap_read) != 0) {
        snap_finish(s, false);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)s->hs, HS_LEN);
    s->hsreq.data = s;
    if (tls_stream_write(&s->ts, &s->hsreq, &b, 1, snap_hs_written) != 0)
        snap_finish(s, false);
}

int transport_send_snapshot(struct transport *t, const struct raft_msg *m, const char *path,
                            const struct transport_snap_reader *reader)
{
    if (t->closing)
        return -ESHUTDOWN;
    if (m->type != RAFT_MSG_SNAP || m->snapshot == NULL)
        return -EINVAL;
    struct peer *p = peer_find(t, m->to);
    if (p == NULL)
        return -ENOENT;
    if (p->snap != NULL)
        return -EBUSY;
    if (!p->have_addr)
        return -EAGAIN; /* a name not resolved yet: the message link resolves it */
    if (reader != NULL && reader->read_fn == NULL)
        return -EINVAL;
    struct snap_out *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->t = t;
    s->to = m->to;
    s->fd = -1;
    int rv;
    if (reader != NULL) {
        s->src = SRC_READER;
        s->size = reader->size;
    } else if (path != NULL) {
        s->src = SRC_FILE;
        uv_fs_t req;
        rv = uv_fs_open(NULL, &req, path, O_RDONLY | O_CLOEXEC, 0, NULL);
        uv_fs_req_cleanup(&req);
        if (rv < 0)
            goto fail;
        s->fd = rv;
        struct stat st;
        if (fstat(s->fd, &st) != 0) {
            rv = -errno;
            goto fail;
        }
        s->size = (uint64_t)st.st_size;
    } else {
        s->src = SRC_MEM;
        s->size = m->snapshot->len;
        if (s->size > 0) {
            rv = -ENOMEM;
            if ((s->mem = malloc(s->size)) == NULL)
                goto fail;
            memcpy(s->mem, m->snapshot->data, s->size);
        }
    }
    /* header frame: the message with its data left out, then the size */
    struct raft_snapshot meta = *m->snapshot;
    meta.data = NULL;
    meta.len = 0;
    struct raft_msg hm = *m;
    hm.snapshot = &meta;
    hm.from = t->o.id;
    uint8_t be[8] = {0};
    if ((rv = buf_append(&s->hdr, be, 4)) != 0 || (rv = transport_msg_encode(&hm, &s->hdr)) != 0)
        goto fail;
    put_be32(s->hdr.data, (uint32_t)(s->hdr.len - 4));
    put_be64(be, s->size);
    if ((rv = buf_append(&s->hdr, be, 8)) != 0)
        goto fail;
    if ((rv = link_init(t, &s->ts, p)) != 0)
        goto fail;
    s->ts.tcp.data = s;
    s->refs = 1;
    t->refs++;
    s->peer = p;
    p->snap = s;
    s->creq.data = s;
    rv = bind_local(t, &s->ts.tcp, p);
    if (rv == 0)
        rv = uv_tcp_connect(&s->creq, &s->ts.tcp, (struct sockaddr *)&p->addr, snap_connected);
    if (rv != 0) {
        /* report through the callback like any other failed transfer, but
         * not from inside this call */
        p->snap = NULL;
        s->peer = NULL;
        s->closing = true;
        tls_stream_close(&s->ts, snap_closed);
        return rv;
    }
    if (reader != NULL) /* released with the transfer from now on */
        s->reader = *reader;
    return 0;
fail:
    if (s->fd >= 0)
        close(s->fd);
    free(s->mem);
    buf_free(&s->hdr);
    free(s);
    return rv;
}

/* ---- incoming connections ---- */

static void conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    struct transport *t = c->t;
    if (c->fd >= 0) {
        uv_fs_t req;
        uv_fs_close(NULL, &req, c->fd, NULL);
        uv_fs_req_cleanup(&req);
    }
    if (c->path != NULL) { /* not handed to on_snapshot: remove */
        unlink(c->path);
        free(c->path);
    }
    transport_msg_view_free(&c->snapv);
    buf_free(&c->hdr);
    buf_free(&c->in);
    buf_free(&c->chunk);
    free(c);
    t_unref(t);
}

static void conn_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    struct transport *t = c->t;
    for (struct conn **pp = &t->conns; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    tls_stream_close(&c->ts, conn_closed);
    uv_close((uv_handle_t *)&c->hs_timer, conn_closed);
}

/* A write on an accepted connection. The listener writes only short
 * answers (handshake reply, snapshot verdict), possibly while an earlier one
 * is still in flight, so each gets its own request and copy. */
struct conn_wreq {
    uv_write_t req;
    struct conn *c;
    bool then_close;
    uint8_t data[];
};

static void conn_written(uv_write_t *req, int status)
{
    struct conn_wreq *w = (struct conn_wreq *)req;
    struct conn *c = w->c;
    bool then_close = w->then_close;
    free(w);
    if (status < 0 || then_close)
        conn_close(c);
}

/* conn_write sends |n| bytes and, if |then_close|, closes once they went. */
static void conn_write(struct conn *c, const void *p, size_t n, bool then_close)
{
    struct conn_wreq *w = malloc(sizeof(*w) + n);
    if (w == NULL) {
        conn_close(c);
        return;
    }
    w->c = c;
    w->then_close = then_close;
    memcpy(w->data, p, n);
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)n);
    if (tls_stream_write(&c->ts, &w->req, &b, 1, conn_written) != 0) {
        free(w);
        conn_close(c);
    }
}

static void conn_reply(struct conn *c, bool ok, const char *reason)
{
    struct transport *t = c->t;
    size_t n = ok ? 0 : strlen(reason);
    uint8_t h[REPLY_LEN + 2 + 256];
    if (n > 256)
        n = 256;
    memcpy(h, MAGIC, 4);
    put_be16(h + 4, TRANSPORT_PROTOCOL_VERSION);
    h[6] = ok ? 0 : 1;
    h[7] = ok ? REPLY_FLAG_PING : 0;
    put_be64(h + 8, t->o.cluster_id);
    put_be64(h + 16, t->o.id);
    put_be16(h + 24, (uint16_t)n);
    if (n > 0)
        memcpy(h + REPLY_LEN + 2, reason, n);
    conn_write(c, h, REPLY_LEN + 2 + n, !ok);
}

/* handshake checks the peer's 32 bytes: true when accepted. */
static bool handshake(struct conn *c, const uint8_t *hs)
{
    struct transport *t = c->t;
    char reason[200];
    if (memcmp(hs, MAGIC, 4) != 0) {
        log_warn(MOD, "closed a connection that did not start with a handshake");
        conn_close(c);
        return false;
    }
    uint16_t ver = get_be16(hs + 4);
    uint8_t kind = hs[6];
    uint64_t cid = get_be64(hs + 8), from = get_be64(hs + 16), to = get_be64(hs + 24);
    bool learn = t->o.cluster_id == 0 && cid != 0 && to == t->o.id;
    if (ver == TRANSPORT_PROTOCOL_VERSION && kind == KIND_MEMBERS) {
        /* a member about to join asks who the cluster is (etcd's GET
         * /members on the peer port): anyone the peer TLS lets in may */
        struct buf list = {0};
        if (t->o.cb.members_query == NULL || t->o.cb.members_query(&list, t->o.arg) != 0 ||
            list.len > MAX_MEMBERS_REPLY) {
            buf_free(&list);
            conn_reply(c, false, "the member list cannot be served");
            c->state = C_DONE;
            return false;
        }
        uv_timer_stop(&c->hs_timer);
        c->state = C_DONE;
        struct buf out = {0};
        uint8_t h[REPLY_LEN + 2 + 4];
        memcpy(h, MAGIC, 4);
        put_be16(h + 4, TRANSPORT_PROTOCOL_VERSION);
        h[6] = 0;
        h[7] = 0;
        put_be64(h + 8, t->o.cluster_id);
        put_be64(h + 16, t->o.id);
        put_be16(h + 24, 0);
        put_be32(h + 26, (uint32_t)list.len);
        if (buf_append(&out, h, sizeof(h)) != 0 || buf_append(&out, list.data, list.len) != 0) {
            buf_free(&out);
            buf_free(&list);
            conn_close(c);
            return false;
        }
        buf_free(&list);
        conn_write(c, out.data, out.len, true);
        buf_free(&out);
        return false;
    }
    if (ver != TRANSPORT_PROTOCOL_VERSION)
        snprintf(reason, sizeof(reason), "unsupported protocol version %u (local %u)", ver,
                 TRANSPORT_PROTOCOL_VERSION);
    else if (t->o.cluster_id == 0 && to != t->o.id)
        snprintf(reason, sizeof(reason),
                 "member ID mismatch (local %" PRIx64 ", remote expects %" PRIx64
                 "; joining, cluster ID not known yet)",
                 t->o.id, to);
    else if (cid != t->o.cluster_id && !learn)
        snprintf(reason, sizeof(reason),
                 "cluster ID mismatch (local %" PRIx64 ", remote %" PRIx64 ")", t->o.cluster_id,
                 cid);
    else if (to != t->o.id)
        snprintf(reason, sizeof(reason),
                 "member ID mismatch (local %" PRIx64 ", remote expects %" PRIx64 ")", t->o.id, to);
    else if (from == 0 || from == t->o.id)
        snprintf(reason, sizeof(reason), "invalid sender member ID %" PRIx64, from);
    else if (kind > KIND_SNAP)
        snprintf(reason, sizeof(reason), "unknown connection kind %u", kind);
    else if (kind == KIND_SNAP && t->o.cb.on_snapshot == NULL)
        snprintf(reason, sizeof(reason), "snapshots are not accepted");
    else if (t->o.cb.refuse_peer == NULL ||
             !t->o.cb.refuse_peer(from, reason, sizeof(reason), t->o.arg))
        reason[0] = '\0';
    if (reason[0] != '\0') {
        log_warn(MOD, "rejected connection from member %" PRIx64 ": %s", from, reason);
        conn_reply(c, false, reason);
        c->state = C_DONE;
        return false;
    }
    if (learn) {
        log_info(MOD, "joined cluster %" PRIx64 " (learned from member %" PRIx64 ")", cid, from);
        t->o.cluster_id = cid;
        if (t->o.cb.on_cluster_id != NULL)
            t->o.cb.on_cluster_id(cid, t->o.arg);
    }
    uv_timer_stop(&c->hs_timer);
    c->from = from;
    struct peer *p = peer_find(t, from);
    char id[24];
    snprintf(id, sizeof(id), "%" PRIx64, from);
    c->recv_bytes = p != NULL ? p->m.recv_bytes
                              : metrics_slot(metrics_series(tf.recv, (const char *[]){id}));
    c->recv_failures = p != NULL
                           ? p->m.recv_failures
                           : metrics_slot(metrics_series(tf.recv_fail, (const char *[]){id}));
    c->state = kind == KIND_MSGS ? C_MSGS : C_SNAP_HEADER;
    conn_reply(c, true, NULL);
    return true;
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);
static void snap_in_process(struct conn *c);

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct conn *c = h->data;
    /* drop what was parsed before growing */
    if (c->in_off > 0) {
        buf_consume(&c->in, c->in_off);
        c->in_off = 0;
    }
    if (c->in.len == 0 && c->in.cap > BIG_BUF)
        buf_free(&c->in); /* after a big frame */
    alloc_in(&c->in, b);
}

/* msgs_process delivers every complete frame in |in|. */
static void msgs_process(struct conn *c)
{
    struct transport *t = c->t;
    while (!c->closing && !t->closing) {
        size_t avail = c->in.len - c->in_off;
        if (avail < 4)
            return;
        const uint8_t *p = c->in.data + c->in_off;
        uint32_t n = get_be32(p);
        if (n == 0 || n > TRANSPORT_MAX_FRAME) {
            log_warn(MOD, "member %" PRIx64 " sent a bad frame length %" PRIu32, c->from, n);
            metrics_inc(c->recv_failures);
            conn_close(c);
            return;
        }
        if (avail - 4 < n) {
            /* make room for the whole frame at once */
            if (c->in_off > 0) {
                buf_consume(&c->in, c->in_off);
                c->in_off = 0;
            }
            if (buf_reserve(&c->in, (size_t)n + 4 - c->in.len) != 0)
                conn_close(c);
            return;
        }
        struct transport_msg_view v;
        int rv = transport_msg_decode(p + 4, n, &v);
        c->in_off += 4 + (size_t)n;
        if (rv != 0) {
            log_warn(MOD, "member %" PRIx64 " sent an undecodable message (%d)", c->from, rv);
            metrics_inc(c->recv_failures);
            conn_close(c);
            return;
        }
        if (v.msg.to != t->o.id || v.msg.from != c->from) {
            log_warn(MOD,
                     "dropped a message from member %" PRIx64 " addressed %" PRIx64 " -> %" PRIx64,
                     c->from, v.msg.from, v.msg.to);
        } else if (v.msg.type == RAFT_MSG_SNAP) {
            log_warn(MOD, "dropped a snapshot message on the message link of member %" PRIx64,
                     c->from);
        } else if (v.msg.type == TRANSPORT_MSG_PING || v.msg.type == TRANSPORT_MSG_PONG) {
            ping_received(t, &v.msg);
        } else {
            t->o.cb.on_message(&v.msg, t->o.arg);
        }
        transport_msg_view_free(&v);
    }
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = s->data;
    if (c->closing || nread == 0)
        return;
    if (nread < 0) {
        if (c->state == C_SNAP_HEADER || c->state == C_SNAP_DATA || c->state == C_SNAP_CRC)
            log_warn(MOD, "snapshot from member %" PRIx64 " broke off: %s", c->from,
                     uv_strerror((int)nread));
        if (nread != UV_EOF || (c->state != C_MSGS && c->state != C_DONE))
            metrics_inc(c->recv_failures);
        conn_close(c);
        return;
    }
    c->in.len += (size_t)nread;
    metrics_add(c->recv_bytes, (uint64_t)nread);
    if (c->state == C_HANDSHAKE) {
        if (c->in.len - c->in_off < HS_LEN)
            return;
        const uint8_t *hs = c->in.data + c->in_off;
        c->in_off += HS_LEN;
        uv_timer_stop(&c->hs_timer);
        if (!handshake(c, hs))
            return;
    }
    switch (c->state) {
    case C_MSGS:
        msgs_process(c);
        return;
    case C_SNAP_HEADER:
    case C_SNAP_DATA:
    case C_SNAP_CRC:
        snap_in_process(c);
        return;
    case C_HANDSHAKE:
        return;
    case C_DONE:
        /* a rejected or finished peer keeps talking: ignore until closed */
        c->in_off = c->in.len;
        return;
    }
}

/* ---- snapshot reception ---- */

static void snap_in_fail(struct conn *c, const char *why)
{
    log_warn(MOD, "rejected snapshot from member %" PRIx64 ": %s", c->from, why);
    metrics_inc(c->recv_failures);
    c->state = C_DONE;
    tls_stream_read_stop(&c->ts);
    uint8_t verdict = 1;
    conn_write(c, &verdict, 1, true);
}

static void snap_in_synced(uv_fs_t *req)
{
    struct conn *c = req->data;
    ssize_t res = req->result;
    uv_fs_req_cleanup(req);
    c->fs_busy = false;
    struct transport *t = c->t;
    if (c->closing || t->closing) {
        conn_unref(c);
        return;
    }
    conn_unref(c); /* the handle still holds one reference */
    if (res < 0) {
        snap_in_fail(c, uv_strerror((int)res));
        return;
    }
    uv_fs_t creq;
    uv_fs_close(NULL, &creq, c->fd, NULL);
    uv_fs_req_cleanup(&creq);
    c->fd = -1;
    char *path = c->path;
    c->path = NULL; /* the file is the callee's now */
    c->state = C_DONE;
    struct raft_snapshot snap = c->snapv.snap;
    snap.data = NULL;
    snap.len = (size_t)c->size;
    struct raft_msg m = c->snapv.msg;
    m.snapshot = &snap;
    log_info(MOD,
             "received snapshot [index %" PRIu64 ", term %" PRIu64 ", %" PRIu64
             " bytes] from member %" PRIx64,
             snap.index, snap.term, c->size, c->from);
    /* acknowledge first: the callback may close the transport */
    uint8_t verdict = 0;
    conn_write(c, &verdict, 1, true);
    t->o.cb.on_snapshot(&m, path, t->o.arg);
    free(path);
}

static void snap_in_written(uv_fs_t *req);

/* snap_in_flush writes the collected chunk; reading pauses meanwhile, which
 * is the backpressure that keeps a fast sender from filling our memory. */
static void snap_in_flush(struct conn *c)
{
    tls_stream_read_stop(&c->ts);
    uv_buf_t b = uv_buf_init((char *)c->chunk.data, (unsigned)c->chunk.len);
    c->fsreq.data = c;
    int rv = uv_fs_write(c->t->loop, &c->fsreq, c->fd, &b, 1, (int64_t)c->written, snap_in_written);
    if (rv != 0) {
        snap_in_fail(c, uv_strerror(rv));
        return;
    }
    c->fs_busy = true;
    c->refs++;
}

static void snap_in_written(uv_fs_t *req)
{
    struct conn *c = req->data;
    ssize_t res = req->result;
    uv_fs_req_cleanup(req);
    c->fs_busy = false;
    if (c->closing || c->t->closing) {
        conn_unref(c);
        return;
    }
    conn_unref(c);
    if (res < 0 || (size_t)res != c->chunk.len) {
        snap_in_fail(c, res < 0 ? uv_strerror((int)res) : "short write");
        return;
    }
    c->written += c->chunk.len;
    buf_reset(&c->chunk);
    if (tls_stream_read_start(&c->ts, conn_alloc, conn_read) != 0) {
        conn_close(c);
        return;
    }
    snap_in_process(c);
}

static void snap_in_process(struct conn *c)
{
    struct transport *t = c->t;
    if (c->state == C_SNAP_HEADER) {
        size_t avail = c->in.len - c->in_off;
        if (avail < 4)
            return;
        uint32_t n = get_be32(c->in.data + c->in_off);
        if (n == 0 || n > TRANSPORT_MAX_FRAME) {
            snap_in_fail(c, "bad header length");
            return;
        }
        if (avail < 4 + (size_t)n + 8)
            return;
        if (buf_append(&c->hdr, c->in.data + c->in_off + 4, n) != 0) {
            conn_close(c);
            return;
        }
        c->size = get_be64(c->in.data + c->in_off + 4 + n);
        c->in_off += 4 + (size_t)n + 8;
        if (transport_msg_decode(c->hdr.data, c->hdr.len, &c->snapv) != 0 ||
            c->snapv.msg.type != RAFT_MSG_SNAP || c->snapv.msg.snapshot == NULL ||
            c->snapv.snap.len != 0) {
            snap_in_fail(c, "undecodable header");
            return;
        }
        if (c->snapv.msg.to != t->o.id || c->snapv.msg.from != c->from) {
            snap_in_fail(c, "misaddressed header");
            return;
        }
        char tmpl[64];
        snprintf(tmpl, sizeof(tmpl), "/snap-%" PRIx64 "-%" PRIu64 "-XXXXXX.tmp", c->from,
                 c->snapv.snap.index);
        size_t dl = strlen(t->snap_dir);
        c->path = malloc(dl + strlen(tmpl) + 5);
        if (c->path == NULL) {
            conn_close(c);
            return;
        }
        memcpy(c->path, t->snap_dir, dl);
        strcpy(c->path + dl, tmpl);
        int fd = mkstemps(c->path, 4);
        if (fd < 0) {
            free(c->path);
            c->path = NULL;
            snap_in_fail(c, strerror(errno));
            return;
        }
        c->fd = fd;
        c->state = C_SNAP_DATA;
        log_info(MOD,
                 "receiving snapshot [index %" PRIu64 ", %" PRIu64 " bytes] from member %" PRIx64,
                 c->snapv.snap.index, c->size, c->from);
    }
    if (c->state == C_SNAP_DATA) {
        size_t avail = c->in.len - c->in_off;
        uint64_t left = c->size - c->got;
        size_t room = t->o.snap_chunk - c->chunk.len;
        size_t n = avail;
        if (n > left)
            n = (size_t)left;
        if (n > room)
            n = room;
        if (n > 0) {
            const uint8_t *p = c->in.data + c->in_off;
            if (buf_append(&c->chunk, p, n) != 0) {
                conn_close(c);
                return;
            }
            c->crc = crc32c_update(c->crc, p, n);
            c->in_off += n;
            c->got += n;
        }
        if (c->chunk.len == t->o.snap_chunk || (c->got == c->size && c->chunk.len > 0)) {
            snap_in_flush(c);
            return;
        }
        if (c->got < c->size)
            return;
        c->state = C_SNAP_CRC;
    }
    if (c->state == C_SNAP_CRC) {
        if (c->in.len - c->in_off < 4)
            return;
        uint32_t want = get_be32(c->in.data + c->in_off);
        c->in_off += 4;
        if (want != c->crc) {
            char why[80];
            snprintf(why, sizeof(why), "CRC mismatch (computed %08" PRIx32 ", sent %08" PRIx32 ")",
                     c->crc, want);
            snap_in_fail(c, why);
            return;
        }
        c->state = C_DONE;
        tls_stream_read_stop(&c->ts);
        c->fsreq.data = c;
        int rv = uv_fs_fdatasync(t->loop, &c->fsreq, c->fd, snap_in_synced);
        if (rv != 0) {
            snap_in_fail(c, uv_strerror(rv));
            return;
        }
        c->fs_busy = true;
        c->refs++;
    }
}

static void hs_timeout(uv_timer_t *h)
{
    struct conn *c = h->data;
    log_warn(MOD, "closed a connection that sent no handshake");
    conn_close(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct transport *t = server->data;
    if (status < 0 || t->closing) {
        log_warn(MOD, "accept failed: %s", uv_strerror(status));
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->t = t;
    c->fd = -1;
    if (link_init(t, &c->ts, NULL) != 0) {
        free(c);
        return;
    }
    c->ts.tcp.data = c;
    uv_timer_init(t->loop, &c->hs_timer); /* cannot fail */
    c->hs_timer.data = c;
    c->refs = 2; /* the connection and the timer */
    t->refs++;
    c->next = t->conns;
    t->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->ts.tcp) != 0 ||
        uv_timer_start(&c->hs_timer, hs_timeout, t->o.handshake_timeout_ms, 0) != 0 ||
        tls_stream_read_start(&c->ts, conn_alloc, conn_read) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->ts.tcp, 1);
}

/* ---- RTT probes ----
 *
 * A PING carries the sender's monotonic time in |ctx|; the receiver
 * answers a PONG with it on its own link to the sender, at once (it never
 * waits for the receiver's Raft work); the sender observes now - ctx.
 * Neither reaches on_message, nor counts in the peer's message stats. The
 * probe also dials a peer no message has needed yet (followers send only
 * to the leader), so every link is up and measured, as etcd's are. */

static void queue_internal(struct transport *t, struct peer *p, const struct raft_msg *m)
{
    size_t n = transport_msg_size(m);
    if (p->pending.len + 4 + n > t->o.max_queue_bytes)
        return;
    size_t at = p->pending.len;
    uint8_t len[4];
    put_be32(len, (uint32_t)n);
    if (buf_append(&p->pending, len, 4) != 0)
        return;
    if (transport_msg_encode(m, &p->pending) != 0) {
        p->pending.len = at;
        return;
    }
    p->pending_pings++;
    if (!t->idle_active) {
        uv_idle_start(&t->idle, idle_run);
        t->idle_active = true;
    }
}

static void ping_all(uv_timer_t *h)
{
    struct transport *t = h->data;
    if (t->closing)
        return;
    for (struct peer *p = t->peers; p != NULL; p = p->next) {
        if (p->oc == NULL) {
            /* a link to every peer, as etcd keeps its streams up: probed,
             * counted as active, and ready when an election needs it */
            peer_connect(p);
            continue;
        }
        if (!p->oc->ready || !p->oc->ping_ok)
            continue;
        struct raft_msg m = {
            .type = TRANSPORT_MSG_PING, .from = t->o.id, .to = p->id, .ctx = uv_hrtime()};
        queue_internal(t, p, &m);
    }
}

static void ping_received(struct transport *t, const struct raft_msg *m)
{
    struct peer *p = peer_find(t, m->from);
    if (p == NULL)
        return;
    if (m->type == TRANSPORT_MSG_PING) {
        if (p->oc == NULL || !p->oc->ready)
            return; /* an answer that waited for a connection would lie */
        struct raft_msg pong = {
            .type = TRANSPORT_MSG_PONG, .from = t->o.id, .to = m->from, .ctx = m->ctx};
        queue_internal(t, p, &pong);
        return;
    }
    uint64_t now = uv_hrtime();
    if (m->ctx != 0 && m->ctx <= now && now - m->ctx < 60ull * 1000000000)
        metrics_observe(p->m.rtt, (double)(now - m->ctx) / 1e9);
}

/* ---- public ---- */

static void idle_closed(uv_handle_t *h)
{
    t_unref(h->data);
}

static void listener_closed(uv_handle_t *h)
{
    struct transport *t = h->data;
    free(h);
    t_unref(t);
}

int transport_new(uv_loop_t *loop, const struct transport_options *opts, struct transport **out)
{
    if (loop == NULL || opts == NULL || out == NULL || opts->id == 0 || opts->cb.on_message == NULL)
        return -EINVAL;
    struct sockaddr_storage local = {0};
    if (opts->local_addr != NULL && opts->local_addr[0] != '\0' &&
        parse_addr(opts->local_addr, 0, &local) != 0)
        return -EINVAL;
    struct transport *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->loop = loop;
    t->o = *opts;
    t->o.local_addr = NULL; /* kept parsed in |local| */
    t->local = local;
    if (t->o.max_queue_msgs == 0)
        t->o.max_queue_msgs = 4096;
    if (t->o.max_queue_bytes == 0)
        t->o.max_queue_bytes = 64u << 20;
    if (t->o.backoff_min_ms == 0)
        t->o.backoff_min_ms = 100;
    if (t->o.backoff_max_ms == 0)
        t->o.backoff_max_ms = 5000;
    if (t->o.backoff_max_ms < t->o.backoff_min_ms)
        t->o.backoff_max_ms = t->o.backoff_min_ms;
    if (t->o.handshake_timeout_ms == 0)
        t->o.handshake_timeout_ms = 10000;
    if (t->o.snap_chunk == 0)
        t->o.snap_chunk = 1u << 20;
    t->snap_dir = strdup(opts->snap_dir != NULL ? opts->snap_dir : ".");
    if (t->snap_dir == NULL) {
        free(t);
        return -ENOMEM;
    }
    t->o.snap_dir = t->snap_dir;
    int rv = uv_idle_init(loop, &t->idle);
    if (rv != 0) {
        free(t->snap_dir);
        free(t);
        return rv;
    }
    t->idle.data = t;
    t->refs = 1;
    families_register();
    if ((rv = uv_timer_init(loop, &t->ping_timer)) == 0) {
        t->ping_timer.data = t;
        t->refs++;
        unsigned ms = t->o.ping_interval_ms ? t->o.ping_interval_ms : PING_MS_DEFAULT;
        uv_timer_start(&t->ping_timer, ping_all, ms, ms);
        uv_unref((uv_handle_t *)&t->ping_timer); /* it keeps no loop alive */
    }
    *out = t;
    return 0;
}

/* listener_new makes the transport's listener handle (closed with
 * listener_closed, which drops the reference taken here). */
static int listener_new(struct transport *t, uv_tcp_t **out)
{
    uv_tcp_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    int rv = uv_tcp_init(t->loop, l);
    if (rv != 0) {
        free(l);
        return rv;
    }
    l->data = t;
    t->listener = l;
    t->refs++;
    *out = l;
    return 0;
}

int transport_listen(struct transport *t, const char *host, int port, int *bound_port)
{
    struct sockaddr_storage ss;
    if (t->closing)
        return -ESHUTDOWN;
    if (t->listener != NULL || parse_addr(host, port, &ss) != 0)
        return -EINVAL;
    uv_tcp_t *l;
    int rv = listener_new(t, &l);
    if (rv != 0)
        return rv;
    if ((rv = uv_tcp_bind(l, (struct sockaddr *)&ss, 0)) != 0 ||
        (rv = uv_listen((uv_stream_t *)l, 128, on_connection)) != 0)
        goto fail;
    if (bound_port != NULL) {
        struct sockaddr_storage name;
        int len = sizeof(name);
        if ((rv = uv_tcp_getsockname(l, (struct sockaddr *)&name, &len)) != 0)
            goto fail;
        *bound_port = ntohs(name.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&name)->sin6_port
                                                       : ((struct sockaddr_in *)&name)->sin_port);
    }
    return 0;
fail:
    /* the listener handle closes asynchronously; listener_closed frees it
     * and a later transport_listen may try again */
    uv_close((uv_handle_t *)l, listener_closed);
    t->listener = NULL;
    return rv;
}

int transport_listen_fd(struct transport *t, int fd)
{
    if (t->closing)
        return -ESHUTDOWN;
    if (t->listener != NULL)
        return -EINVAL;
    uv_tcp_t *l;
    int rv = listener_new(t, &l);
    if (rv != 0)
        return rv;
    if ((rv = uv_tcp_open(l, fd)) != 0 ||
        (rv = uv_listen((uv_stream_t *)l, 128, on_connection)) != 0) {
        uv_close((uv_handle_t *)l, listener_closed); /* closes |fd| if it took it */
        t->listener = NULL;
        return rv;
    }
    return 0;
}

/* ---- asking a member for the member list ---- */

struct fetch {
    uv_loop_t *loop;
    struct tls_stream ts;
    bool stream_open;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_timer_t timer;
    uv_getaddrinfo_t gai;
    bool gai_busy;
    int handles; /* open: the timer, the stream */
    bool done;
    struct buf in;
    uint8_t hs[HS_LEN];
    char host[256];
    int port;
    char addr[80]; /* "ip:port" once resolved, for messages */
    struct tls_ctx *tls;
    transport_members_cb cb;
    void *arg;
};

/* fetch_release frees |f| once its handles are closed and no lookup runs */
static void fetch_release(struct fetch *f)
{
    if (f->handles > 0 || f->gai_busy)
        return;
    buf_free(&f->in);
    free(f);
}

static void fetch_closed(uv_handle_t *h)
{
    struct fetch *f = h->data;
    f->handles--;
    fetch_release(f);
}

static void fetch_finish(struct fetch *f, int status, uint64_t cid, const uint8_t *p, size_t n,
                         const char *err)
{
    if (f->done)
        return;
    f->done = true;
    f->cb(status, cid, p, n, err, f->arg);
    uv_timer_stop(&f->timer);
    uv_close((uv_handle_t *)&f->timer, fetch_closed);
    if (f->stream_open)
        tls_stream_close(&f->ts, fetch_closed);
}

static void fetch_fail(struct fetch *f, int status, const char *fmt, const char *what)
{
    char err[1024]; /* host (<= 256) and reason (<= 340) whole */
    snprintf(err, sizeof(err), fmt, f->addr[0] ? f->addr : f->host, what);
    fetch_finish(f, status, 0, NULL, 0, err);
}

static void fetch_timeout(uv_timer_t *h)
{
    struct fetch *f = h->data;
    fetch_fail(f, UV_ETIMEDOUT, "%s: %s", "no answer in time");
}

static void fetch_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct fetch *f = h->data;
    alloc_in(&f->in, b);
}

static void fetch_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct fetch *f = st->data;
    if (f->done || nread == 0)
        return;
    if (nread < 0) {
        fetch_fail(f, (int)nread, "read %s: %s", uv_strerror((int)nread));
        return;
    }
    f->in.len += (size_t)nread;
    if (f->in.len < REPLY_LEN + 2)
        return;
    const uint8_t *p = f->in.data;
    if (memcmp(p, MAGIC, 4) != 0 || p[6] > 1) {
        fetch_fail(f, -EPROTO, "%s: %s", "not a quorum peer port");
        return;
    }
    if (p[6] == 1) {
        char reason[300];
        int r = parse_reply(&f->in, reason, sizeof(reason));
        if (r == -1) {
            char why[340];
            snprintf(why, sizeof(why), "rejected: %s", reason);
            fetch_fail(f, -ECONNREFUSED, "%s: %s", why);
        }
        return;
    }
    if (f->in.len < REPLY_LEN + 2 + 4)
        return;
    uint32_t n = get_be32(p + REPLY_LEN + 2);
    if (n > MAX_MEMBERS_REPLY) {
        fetch_fail(f, -EPROTO, "%s: %s", "member list too large");
        return;
    }
    if (f->in.len < REPLY_LEN + 2 + 4 + n)
        return;
    fetch_finish(f, 0, get_be64(p + 8), p + REPLY_LEN + 6, n, NULL);
}

static void fetch_written(uv_write_t *req, int status)
{
    struct fetch *f = req->data;
    if (status < 0 && !f->done)
        fetch_fail(f, status, "write %s: %s", uv_strerror(status));
}

static void fetch_connected(uv_connect_t *req, int status)
{
    struct fetch *f = req->data;
    if (f->done)
        return;
    if (status < 0) {
        fetch_fail(f, status, "dial tcp %s: connect: %s", uv_strerror(status));
        return;
    }
    memcpy(f->hs, MAGIC, 4);
    put_be16(f->hs + 4, TRANSPORT_PROTOCOL_VERSION);
    f->hs[6] = KIND_MEMBERS;
    f->hs[7] = 0;
    memset(f->hs + 8, 0, 24); /* no cluster, no sender, no receiver yet */
    uv_buf_t b = uv_buf_init((char *)f->hs, HS_LEN);
    f->wreq.data = f;
    if (tls_stream_write(&f->ts, &f->wreq, &b, 1, fetch_written) != 0 ||
        tls_stream_read_start(&f->ts, fetch_alloc, fetch_read) != 0)
        fetch_fail(f, -EIO, "%s: %s", "cannot start the exchange");
}

static void fetch_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct fetch *f = req->data;
    f->gai_busy = false;
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; status == 0 && a != NULL; a = a->ai_next)
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            (pick == NULL || (pick->ai_family == AF_INET6 && a->ai_family == AF_INET)))
            pick = a;
    if (f->done) {
        uv_freeaddrinfo(res);
        fetch_release(f);
        return;
    }
    if (pick == NULL) {
        uv_freeaddrinfo(res);
        fetch_fail(f, status ? status : -ENOENT, "lookup %s: %s",
                   status ? uv_strerror(status) : "no address");
        return;
    }
    char ip[64] = "";
    if (pick->ai_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)pick->ai_addr, ip, sizeof(ip));
        snprintf(f->addr, sizeof(f->addr), "[%s]:%d", ip, f->port);
    } else {
        uv_ip4_name((const struct sockaddr_in *)pick->ai_addr, ip, sizeof(ip));
        snprintf(f->addr, sizeof(f->addr), "%s:%d", ip, f->port);
    }
    tls_conn *tc = NULL;
    int rv = 0;
    if (f->tls != NULL)
        rv = tls_conn_new(f->tls, f->host, &tc);
    if (rv == 0)
        rv = tls_stream_init(&f->ts, f->loop, tc, "peer");
    if (rv == 0) {
        f->stream_open = true;
        f->handles++;
        f->ts.tcp.data = f;
        f->creq.data = f;
        rv = uv_tcp_connect(&f->creq, &f->ts.tcp, pick->ai_addr, fetch_connected);
    }
    uv_freeaddrinfo(res);
    if (rv != 0)
        fetch_fail(f, rv, "dial tcp %s: %s", uv_strerror(rv));
}

int transport_fetch_members(uv_loop_t *loop, const char *host, int port, struct tls_ctx *tls,
                            unsigned timeout_ms, transport_members_cb cb, void *arg)
{
    if (loop == NULL || host == NULL || cb == NULL || strlen(host) >= 256)
        return -EINVAL;
    struct fetch *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->loop = loop;
    snprintf(f->host, sizeof(f->host), "%s", host);
    f->port = port;
    f->tls = tls;
    f->cb = cb;
    f->arg = arg;
    uv_timer_init(loop, &f->timer);
    f->timer.data = f;
    f->handles = 1;
    uv_timer_start(&f->timer, fetch_timeout, timeout_ms ? timeout_ms : 10000, 0);
    char ps[8];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    f->gai.data = f;
    int rv = uv_getaddrinfo(loop, &f->gai, fetch_resolved, host, ps, &hints);
    if (rv != 0) {
        uv_close((uv_handle_t *)&f->timer, fetch_closed);
        return rv;
    }
    f->gai_busy = true;
    return 0;
}

static void peer_timer_closed(uv_handle_t *h)
{
    struct peer *p = h->data;
    struct transport *t = p->t;
    buf_free(&p->pending);
    free(p);
    t_unref(t);
}

int transport_add_peer(struct transport *t, uint64_t id, const char *host, int port)
{
    if (t->closing)
        return -ESHUTDOWN;
    if (id == 0 || id == t->o.id)
        return -EINVAL;
    if (peer_find(t, id) != NULL)
        return -EEXIST;
    struct peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    if (set_peer_host(p, host, port) != 0) {
        free(p);
        return -EINVAL;
    }
    int rv = uv_timer_init(t->loop, &p->timer);
    if (rv != 0) {
        free(p);
        return rv;
    }
    p->timer.data = p;
    p->t = t;
    p->id = id;
    p->backoff_ms = t->o.backoff_min_ms;
    peer_metrics_init(t, p);
    p->next = t->peers;
    t->peers = p;
    t->refs++;
    return 0;
}

int transport_update_peer(struct transport *t, uint64_t id, const char *host, int port)
{
    struct peer *p = peer_find(t, id);
    if (p == NULL)
        return -ENOENT;
    struct peer tmp = *p;
    if (set_peer_host(&tmp, host, port) != 0)
        return -EINVAL;
    set_peer_host(p, host, port);
    /* A link that is up stays up (as etcd's peers keep their streams): the
     * member may still listen where it did until it restarts with its new
     * URL. Only the next dial uses the new address. */
    if (p->oc != NULL && p->oc->ready)
        return 0;
    oc_detach(p);
    /* a new address deserves a prompt first try */
    uv_timer_stop(&p->timer);
    p->backoff_active = false;
    p->backoff_ms = t->o.backoff_min_ms;
    if (p->pending_msgs > 0 && !t->idle_active) {
        uv_idle_start(&t->idle, idle_run);
        t->idle_active = true;
    }
    return 0;
}

static void peer_destroy(struct peer *p)
{
    if (p->rq != NULL) {
        p->rq->peer = NULL;
        p->rq = NULL;
    }
    oc_detach(p);
    struct snap_out *s = p->snap;
    if (s != NULL) {
        p->snap = NULL;
        s->peer = NULL;
        s->closing = true;
        tls_stream_close(&s->ts, snap_closed);
    }
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, peer_timer_closed);
}

int transport_peer_set_tls(struct transport *t, uint64_t id, bool tls)
{
    struct peer *p = peer_find(t, id);
    if (p == NULL)
        return -ENOENT;
    if (p->tls == tls)
        return 0;
    p->tls = tls;
    /* a link being made the old way is dropped; one that is up stays */
    if (p->oc != NULL && !p->oc->ready)
        oc_detach(p);
    return 0;
}

int transport_remove_peer(struct transport *t, uint64_t id)
{
    /* its connections to us go too: if it dials again, the handshake
     * (refuse_peer) can tell it why it is not welcome */
    for (struct conn *c = t->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->from == id && !c->closing)
            conn_close(c);
    }
    for (struct peer **pp = &t->peers; *pp != NULL; pp = &(*pp)->next) {
        struct peer *p = *pp;
        if (p->id == id) {
            *pp = p->next;
            peer_destroy(p);
            return 0;
        }
    }
    return -ENOENT;
}

int transport_send(struct transport *t, const struct raft_msg *m)
{
    if (t->closing)
        return -ESHUTDOWN;
    struct peer *p = peer_find(t, m->to);
    if (p == NULL)
        return -ENOENT;
    if (m->type == RAFT_MSG_SNAP) {
        int rv = transport_send_snapshot(t, m, NULL, NULL);
        if (rv == -EBUSY) {
            peer_drop(p, 1);
            return 0;
        }
        return rv;
    }
    size_t n = transport_msg_size(m);
    if (n > TRANSPORT_MAX_FRAME)
        return -EINVAL;
    if (p->pending_msgs > 0 &&
        (p->pending_msgs >= t->o.max_queue_msgs || p->pending.len + 4 + n > t->o.max_queue_bytes)) {
        peer_drop(p, 1);
        return 0;
    }
    size_t at = p->pending.len;
    uint8_t zero[4] = {0};
    int rv = buf_append(&p->pending, zero, 4);
    if (rv != 0)
        return rv;
    if ((rv = transport_msg_encode(m, &p->pending)) != 0) {
        p->pending.len = at;
        return rv;
    }
    put_be32(p->pending.data + at, (uint32_t)n);
    p->pending_msgs++;
    /* the peer is unreachable (its last dial or link failed): kept for the
     * next dial, but counted as etcd counts a message it cannot send to a
     * peer whose stream is down (etcdMembersDown watches this rate) */
    if (p->oc == NULL && p->backoff_active)
        metrics_inc(p->m.sent_failures);
    /* written once per loop pass (idle_run), so that every message of this
     * pass shares one write */
    if (!t->idle_active) {
        uv_idle_start(&t->idle, idle_run);
        t->idle_active = true;
    }
    return 0;
}

int transport_peer_stats(const struct transport *t, uint64_t id, struct transport_peer_stats *out)
{
    const struct peer *p = peer_find(t, id);
    if (p == NULL)
        return -ENOENT;
    *out = p->st;
    out->queued = p->pending_msgs + (p->oc != NULL ? p->oc->inflight_msgs : 0);
    out->queued_bytes = p->pending.len + (p->oc != NULL ? p->oc->inflight.len : 0);
    return 0;
}

void transport_close(struct transport *t, void (*cb)(void *arg), void *arg)
{
    if (t->closing)
        return;
    t->closing = true;
    t->close_cb = cb;
    t->close_arg = arg;
    uv_idle_stop(&t->idle);
    uv_close((uv_handle_t *)&t->idle, idle_closed);
    if (t->ping_timer.data != NULL) {
        uv_timer_stop(&t->ping_timer);
        uv_close((uv_handle_t *)&t->ping_timer, idle_closed);
    }
    if (t->listener != NULL) {
        uv_close((uv_handle_t *)t->listener, listener_closed);
        t->listener = NULL;
    }
    while (t->peers != NULL) {
        struct peer *p = t->peers;
        t->peers = p->next;
        peer_destroy(p);
    }
    while (t->conns != NULL)
        conn_close(t->conns);
}
