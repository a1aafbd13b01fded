/* zk/conn.c: the ZooKeeper face's listener and connections (zk.h). */
#include "zk/zk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/log.h"
#include "tls/tls.h"

#define ZK_MAX_LISTEN_FDS 16
#define READ_CHUNK 65536
/* a TLS client that has not finished its handshake by then is dropped */
#define TLS_HANDSHAKE_MS 10000

struct zk_conn {
    struct tls_stream ts; /* the socket, with TLS on an https:// listener */
    zk_listener *l;
    zk_conn *next, *prev;
    struct buf in;
    bool connected; /* the ConnectRequest was read */
    bool closing;   /* nothing more is read or sent */
    bool closed;    /* uv_close was called */
    bool told;      /* on_close was called */
    unsigned writes; /* in flight */
    /* answers of this loop pass, written together by the listener's idle
     * handle (one write for many pipelined answers) */
    struct buf out;
    bool dirty;
    bool listed;         /* in the listener's dirty list */
    bool paused;         /* the handler asked: read nothing more for now */
    bool resume_pending; /* buffered input to process after a resume */
    zk_conn *dnext;
    void *data;
    char peer[64];
    char host[48];
    struct zk_conn_stats st;
    /* a relayed connection (zk_conn_relayed): its socket is on another
     * loop; |ts| is unused */
    const struct zk_relay *relay;
    void *relay_ctx;
    char *subject; /* the client certificate's, or NULL */
};

struct zk_listener {
    uv_loop_t *loop;
    const struct zk_conn_handler *h;
    void *arg;
    size_t max_packet;
    uv_tcp_t lis[ZK_MAX_LISTEN_FDS];
    tls_ctx *tls[ZK_MAX_LISTEN_FDS]; /* each listener's TLS context, or NULL */
    size_t n_lis;
    bool started, closing;
    zk_conn *conns;
    size_t n_conns;
    unsigned open_handles; /* listeners and connections not yet closed */
    uv_idle_t flush;       /* writes the dirty connections' output */
    bool flush_init;
    zk_conn *dirty;
    void (*close_cb)(void *);
    void *close_arg;
};

struct zk_write {
    uv_write_t req;
    zk_conn *c;
    size_t len;
    uint8_t data[];
};

bool zk_4lw_allowed(const char *whitelist, const char *cmd)
{
    size_t n = strlen(cmd);
    if (n == 4 && memcmp(cmd, "srvr", 4) == 0)
        return true; /* ZooKeeper adds srvr whatever the list (zkServer.sh needs it) */
    for (const char *p = whitelist; p != NULL && *p != '\0';) {
        const char *e = strchr(p, ',');
        const char *end = e != NULL ? e : p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t l = (size_t)(end - p);
        if (l == 1 && *p == '*')
            return zk_is_4lw((const uint8_t *)cmd) && n == 4;
        if (l == n && memcmp(p, cmd, n) == 0)
            return true;
        if (e == NULL)
            break;
        p = e + 1;
    }
    return false;
}

static void maybe_done(zk_listener *l)
{
    if (l->closing && l->open_handles == 0) {
        void (*cb)(void *) = l->close_cb;
        void *arg = l->close_arg;
        free(l);
        if (cb != NULL)
            cb(arg);
    }
}

static void tell_closed(zk_conn *c)
{
    if (!c->told) {
        c->told = true;
        if (c->l->h->on_close != NULL)
            c->l->h->on_close(c);
    }
}

static void conn_free(zk_conn *c)
{
    zk_listener *l = c->l;
    tell_closed(c); /* from the loop: never inside a handler's own call */
    for (zk_conn **pp = &l->dirty; *pp != NULL; pp = &(*pp)->dnext)
        if (*pp == c) {
            *pp = c->dnext;
            break;
        }
    buf_free(&c->out);
    buf_free(&c->in);
    free(c->subject);
    free(c);
    l->open_handles--;
    maybe_done(l);
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_free(h->data);
}

/* conn_end: the connection is over (either side): unlink it and close the
 * handle; the handler hears of it from the close callback */
static void conn_end(zk_conn *c)
{
    if (c->closed)
        return;
    bool was_closing = c->closing;
    c->closed = true;
    c->closing = true;
    zk_listener *l = c->l;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    l->n_conns--;
    if (c->relay == NULL)
        tls_stream_close(&c->ts, on_conn_closed);
    else if (!was_closing)
        c->relay->close(c->relay_ctx); /* freed at zk_conn_relay_gone */
}

static void on_write(uv_write_t *req, int status)
{
    struct zk_write *w = req->data;
    zk_conn *c = w->c;
    free(w);
    c->writes--;
    if (status != 0 && !c->closed) {
        conn_end(c);
        return;
    }
    if (c->closing && c->writes == 0)
        conn_end(c);
}

static int write_raw(zk_conn *c, const uint8_t *hdr, size_t hlen, const uint8_t *p, size_t len)
{
    if (c->relay != NULL) {
        int rv = 0;
        if (hlen > 0)
            rv = c->relay->send(c->relay_ctx, hdr, hlen);
        if (rv == 0 && len > 0)
            rv = c->relay->send(c->relay_ctx, p, len);
        if (rv == 0)
            c->st.bytes_out += hlen + len;
        return rv;
    }
    struct zk_write *w = malloc(sizeof(*w) + hlen + len);
    if (w == NULL)
        return -ENOMEM;
    w->c = c;
    w->len = hlen + len;
    if (hlen > 0)
        memcpy(w->data, hdr, hlen);
    if (len > 0)
        memcpy(w->data + hlen, p, len);
    w->req.data = w;
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)w->len);
    int rv = tls_stream_write(&c->ts, &w->req, &b, 1, on_write);
    if (rv != 0) {
        free(w);
        return rv;
    }
    c->writes++;
    c->st.bytes_out += w->len;
    return 0;
}

static void flush_conn(zk_conn *c)
{
    c->dirty = false;
    if (c->out.len == 0 || c->closed)
        return;
    /* the socket takes it at once in the usual case: no copy, no write
     * request; what it does not take is queued behind (and nothing is
     * tried while a queued write is pending: the bytes keep their order) */
    size_t done = 0;
    /* (TLS encrypts in tls_stream_write; a relayed connection posts) */
    if (c->relay == NULL && c->writes == 0 && c->ts.conn == NULL) {
        uv_buf_t b = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
        int n = uv_try_write(c->ts.s, &b, 1);
        if (n > 0) {
            done = (size_t)n;
            c->st.bytes_out += done;
        } else if (n != UV_EAGAIN && n != UV_ENOSYS) {
            buf_reset(&c->out);
            conn_end(c);
            return;
        }
    }
    if (done < c->out.len && write_raw(c, NULL, 0, c->out.data + done, c->out.len - done) != 0 &&
        !c->closed) {
        buf_reset(&c->out);
        conn_end(c);
        return;
    }
    buf_reset(&c->out);
}

static void process(zk_conn *c);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);
static void on_flush(uv_idle_t *h);

static void list_dirty(zk_conn *c)
{
    if (c->listed)
        return;
    c->listed = true;
    c->dnext = c->l->dirty;
    c->l->dirty = c;
    uv_idle_start(&c->l->flush, on_flush);
}

static void on_flush(uv_idle_t *h)
{
    zk_listener *l = h->data;
    while (l->dirty != NULL) {
        zk_conn *c = l->dirty;
        l->dirty = c->dnext;
        c->dnext = NULL;
        c->listed = false;
        if (c->resume_pending && !c->closing && !c->paused) {
            c->resume_pending = false;
            process(c); /* what was read before the pause */
        }
        if (c->dirty)
            flush_conn(c);
    }
    if (l->dirty == NULL)
        uv_idle_stop(h);
}

int zk_conn_send(zk_conn *c, const uint8_t *pkt, size_t len)
{
    if (c->closing)
        return -EPIPE;
    uint8_t hdr[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    if (buf_reserve(&c->out, 4 + len) != 0)
        return -ENOMEM;
    buf_append(&c->out, hdr, 4);
    buf_append(&c->out, pkt, len);
    c->st.packets_out++;
    c->dirty = true;
    list_dirty(c);
    return 0;
}

void zk_conn_close(zk_conn *c)
{
    if (c->closing)
        return;
    flush_conn(c); /* what was sent goes out first */
    if (c->closed)
        return;
    if (c->relay != NULL) {
        conn_end(c); /* the other loop closes once it has written it all */
        return;
    }
    c->closing = true;
    tls_stream_read_stop(&c->ts);
    if (c->writes == 0)
        conn_end(c);
}

/* forget_fd takes a plaintext socket whose reading stopped out of the
 * loop's epoll set at once. libuv leaves it there until it next reports
 * readable and only then removes it, so each pause would cost the loop a
 * wake-up as soon as the client sent more, which is what pausing a
 * pipelining client is for avoiding (front.c, "Held"). libuv adds it back
 * at the next read start (it holds the socket as not in the set since the
 * stop: an add, which now finds nothing there) and does not mind a removal
 * that finds nothing when the socket closes. */
static void forget_fd(zk_conn *c)
{
    uv_os_fd_t fd;
    /* only while libuv watches it for nothing (no write waiting either):
     * its next change is then an add */
    if (c->ts.conn != NULL || c->ts.s->io_watcher.pevents != 0 ||
        uv_fileno((const uv_handle_t *)c->ts.s, &fd) != 0)
        return;
    (void)epoll_ctl(uv_backend_fd(c->ts.s->loop), EPOLL_CTL_DEL, fd, NULL);
}

void zk_conn_pause(zk_conn *c, bool paused)
{
    if (c->closing || c->paused == paused)
        return;
    c->paused = paused;
    if (c->relay != NULL)
        c->relay->pause(c->relay_ctx, paused);
    if (paused) {
        if (c->relay == NULL) {
            tls_stream_read_stop(&c->ts);
            forget_fd(c);
        }
        return;
    }
    if (c->relay == NULL)
        tls_stream_read_start(&c->ts, on_alloc, on_read);
    c->resume_pending = true; /* from the loop, not inside the caller */
    list_dirty(c);
}

void zk_conn_set_data(zk_conn *c, void *data)
{
    c->data = data;
}
void *zk_conn_get_data(const zk_conn *c)
{
    return c->data;
}
zk_listener *zk_conn_listener(const zk_conn *c)
{
    return c->l;
}
const char *zk_conn_peer(const zk_conn *c)
{
    return c->peer;
}
const char *zk_conn_host(const zk_conn *c)
{
    return c->host;
}
int zk_conn_peer_subject(const zk_conn *c, char *out, size_t cap)
{
    if (c->relay != NULL) {
        if (c->subject == NULL)
            return -ENOENT;
        if (strlen(c->subject) >= cap)
            return -ENOSPC;
        strcpy(out, c->subject);
        return 0;
    }
    return c->ts.conn != NULL ? tls_conn_peer_subject(c->ts.conn, out, cap) : -ENOENT;
}
const struct zk_conn_stats *zk_conn_stats(const zk_conn *c)
{
    return &c->st;
}
void zk_conn_stats_reset(zk_conn *c)
{
    c->st = (struct zk_conn_stats){0};
}

void zk_conn_foreach(zk_listener *l, void (*fn)(zk_conn *c, void *arg), void *arg)
{
    for (zk_conn *c = l->conns, *n; c != NULL; c = n) {
        n = c->next;
        fn(c, arg);
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    zk_conn *c = h->data;
    if (buf_reserve(&c->in, READ_CHUNK) != 0) {
        *b = uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

/* process cuts what was read into packets and hands them on, until the
 * connection closes or more bytes are needed */
static void process(zk_conn *c)
{
    zk_listener *l = c->l;
    size_t off = 0;
    if (l->h->on_bytes != NULL) { /* a relaying listener: the bytes as they came */
        if (!c->closing && !c->paused && c->in.len > 0) {
            size_t n = c->in.len;
            c->in.len = 0; /* the handler may send, pause or close */
            l->h->on_bytes(c, c->in.data, n);
        }
        return;
    }
    while (!c->closing && !c->paused) {
        const uint8_t *p = c->in.data + off;
        size_t left = c->in.len - off;
        if (!c->connected && c->st.packets_in == 0 && left >= 4 && zk_is_4lw(p)) {
            struct buf out = {0};
            char cmd[5];
            memcpy(cmd, p, 4);
            cmd[4] = '\0';
            if (l->h->on_4lw != NULL)
                l->h->on_4lw(c, cmd, p + 4, left - 4, &out);
            if (out.len > 0)
                write_raw(c, NULL, 0, out.data, out.len);
            buf_free(&out);
            zk_conn_close(c);
            break;
        }
        const uint8_t *pkt;
        size_t plen, used;
        int rc = jute_frame(p, left, l->max_packet, &pkt, &plen, &used);
        if (rc == 0)
            break;
        if (rc < 0) {
            log_warn("zk", "closing %s: packet length %u out of range (jute.maxbuffer %zu)",
                     c->peer,
                     (unsigned)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                (uint32_t)p[2] << 8 | p[3]),
                     l->max_packet);
            zk_conn_close(c);
            break;
        }
        off += used;
        c->st.packets_in++;
        if (!c->connected) {
            struct zk_connect_req req;
            struct jute_in in;
            jute_in_init(&in, pkt, plen);
            if (zk_connect_req_decode(&in, &req) != 0) {
                log_warn("zk", "closing %s: malformed ConnectRequest", c->peer);
                zk_conn_close(c);
                break;
            }
            c->connected = true;
            l->h->on_connect(c, &req);
        } else {
            l->h->on_packet(c, pkt, plen);
        }
    }
    if (off > 0 && !c->closed) {
        buf_consume(&c->in, off);
        if (c->in.len == 0 && c->in.cap > (1u << 18))
            buf_free(&c->in); /* a big packet went by: not kept for every connection */
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    zk_conn *c = s->data;
    if (n < 0) {
        if (!c->closed)
            conn_end(c);
        return;
    }
    if (n == 0 || c->closing)
        return;
    c->in.len += (size_t)n;
    c->st.bytes_in += (uint64_t)n;
    process(c);
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* conn_link lists |c| among |l|'s connections (counted in open_handles
 * already) */
static void conn_link(zk_listener *l, zk_conn *c)
{
    c->l = l;
    c->next = l->conns;
    if (l->conns != NULL)
        l->conns->prev = c;
    l->conns = c;
    l->n_conns++;
}

/* conn_new: a connection of |l| on a fresh socket handle (TLS with |ctx|),
 * not yet listed; NULL when out of memory */
static zk_conn *conn_new(zk_listener *l, tls_ctx *ctx)
{
    zk_conn *c = calloc(1, sizeof(*c));
    tls_conn *tc = NULL;
    if (c != NULL && ctx != NULL && tls_conn_new(ctx, NULL, &tc) != 0) {
        free(c);
        return NULL;
    }
    if (c == NULL || tls_stream_init(&c->ts, l->loop, tc, "zk") != 0) {
        free(c);
        return NULL;
    }
    c->l = l;
    c->ts.tcp.data = c;
    l->open_handles++;
    return c;
}

/* conn_begin: |c|'s socket is connected: note the peer, list it, read */
static void conn_begin(zk_conn *c)
{
    zk_listener *l = c->l;
    uv_tcp_nodelay(&c->ts.tcp, 1);
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    snprintf(c->peer, sizeof(c->peer), "unknown");
    if (uv_tcp_getpeername(&c->ts.tcp, (struct sockaddr *)&ss, &sl) == 0) {
        int port = 0;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, c->host, sizeof(c->host));
            port = ntohs(a->sin_port);
            snprintf(c->peer, sizeof(c->peer), "%s:%d", c->host, port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, c->host, sizeof(c->host));
            port = ntohs(a->sin6_port);
            snprintf(c->peer, sizeof(c->peer), "[%s]:%d", c->host, port);
        }
    }
    if (c->ts.conn != NULL)
        tls_stream_set_handshake_timeout(&c->ts, TLS_HANDSHAKE_MS);
    conn_link(l, c);
    tls_stream_read_start(&c->ts, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status)
{
    zk_listener *l = server->data;
    if (status != 0 || l->closing)
        return;
    tls_ctx *ctx = NULL;
    for (size_t i = 0; i < l->n_lis; i++)
        if ((uv_stream_t *)&l->lis[i] == server)
            ctx = l->tls[i];
    zk_conn *c = conn_new(l, ctx);
    if (c == NULL) {
        /* off the backlog all the same: libuv accepts nothing more until
         * this one is taken */
        uv_tcp_t *t = malloc(sizeof(*t));
        if (t != NULL && uv_tcp_init(l->loop, t) == 0) {
            (void)uv_accept(server, (uv_stream_t *)t);
            uv_close((uv_handle_t *)t, free_handle);
        } else {
            free(t);
        }
        return;
    }
    if (uv_accept(server, c->ts.s) != 0) {
        c->closed = true;
        tls_stream_close(&c->ts, on_conn_closed);
        return;
    }
    conn_begin(c);
}

int zk_listener_adopt_conn(zk_listener *l, int fd, tls_ctx *tls)
{
    if (l->closing) {
        close(fd);
        return -ECANCELED;
    }
    zk_conn *c = conn_new(l, tls);
    if (c == NULL) {
        close(fd);
        return -ENOMEM;
    }
    int rv = uv_tcp_open(&c->ts.tcp, fd);
    if (rv != 0) {
        close(fd);
        c->closed = true;
        tls_stream_close(&c->ts, on_conn_closed);
        return rv;
    }
    conn_begin(c);
    return 0;
}

int zk_conn_write(zk_conn *c, const uint8_t *p, size_t len)
{
    if (c->closing)
        return -EPIPE;
    if (buf_append(&c->out, p, len) != 0)
        return -ENOMEM;
    c->dirty = true;
    list_dirty(c);
    return 0;
}

int zk_conn_relayed(zk_listener *l, const struct zk_relay *r, void *ctx, const char *peer,
                    const char *host, const char *subject, zk_conn **out)
{
    zk_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || (subject != NULL && (c->subject = strdup(subject)) == NULL)) {
        free(c);
        return -ENOMEM;
    }
    c->relay = r;
    c->relay_ctx = ctx;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    snprintf(c->host, sizeof(c->host), "%s", host);
    l->open_handles++; /* until zk_conn_relay_gone */
    conn_link(l, c);
    *out = c;
    return 0;
}

void zk_conn_relay_input(zk_conn *c, const uint8_t *p, size_t len)
{
    if (c->closing || len == 0)
        return;
    if (buf_append(&c->in, p, len) != 0) {
        log_warn("zk", "closing %s: out of memory for its input", c->peer);
        zk_conn_close(c);
        return;
    }
    c->st.bytes_in += len;
    process(c);
}

void zk_conn_relay_served(zk_conn *c, const struct zk_served *sv)
{
    if (c->closing)
        return;
    c->st.packets_in += sv->packets;
    c->st.packets_out += sv->packets;
    c->st.bytes_in += sv->bytes_in;
    c->st.bytes_out += sv->bytes_out;
    if (c->l->h->on_served != NULL)
        c->l->h->on_served(c, sv);
}

void zk_conn_relay_gone(zk_conn *c)
{
    c->closing = true; /* nothing more to tell the other loop */
    conn_end(c);
    conn_free(c);
}

int zk_listener_new(uv_loop_t *loop, const struct zk_conn_handler *h, void *arg,
                    size_t max_packet, zk_listener **out)
{
    zk_listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->loop = loop;
    l->h = h;
    l->arg = arg;
    l->max_packet = max_packet;
    uv_idle_init(loop, &l->flush);
    l->flush.data = l;
    l->flush_init = true;
    l->open_handles++;
    *out = l;
    return 0;
}

void *zk_listener_arg(const zk_listener *l)
{
    return l->arg;
}

size_t zk_listener_conns(const zk_listener *l)
{
    return l->n_conns;
}

int zk_listener_adopt(zk_listener *l, int fd, tls_ctx *tls)
{
    if (l->n_lis >= ZK_MAX_LISTEN_FDS)
        return -ENOSPC;
    uv_tcp_t *t = &l->lis[l->n_lis];
    int rv = uv_tcp_init(l->loop, t);
    if (rv != 0)
        return rv;
    t->data = l;
    l->tls[l->n_lis] = tls;
    l->open_handles++;
    l->n_lis++;
    return uv_tcp_open(t, fd);
}

int zk_listener_start(zk_listener *l)
{
    if (l->started)
        return 0;
    l->started = true;
    for (size_t i = 0; i < l->n_lis; i++) {
        int rv = uv_listen((uv_stream_t *)&l->lis[i], 511, on_connection);
        if (rv != 0)
            return rv;
    }
    return 0;
}

static void on_lis_closed(uv_handle_t *h)
{
    zk_listener *l = h->data;
    l->open_handles--;
    maybe_done(l);
}

void zk_listener_close(zk_listener *l, void (*cb)(void *arg), void *arg)
{
    l->closing = true;
    l->close_cb = cb;
    l->close_arg = arg;
    while (l->conns != NULL)
        conn_end(l->conns);
    l->dirty = NULL;
    for (size_t i = 0; i < l->n_lis; i++)
        uv_close((uv_handle_t *)&l->lis[i], on_lis_closed);
    if (l->flush_init)
        uv_close((uv_handle_t *)&l->flush, on_lis_closed);
    l->open_handles++; /* the reference this call holds */
    l->open_handles--;
    maybe_done(l);
}
