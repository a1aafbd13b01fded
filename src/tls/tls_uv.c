/* tls/tls_uv.c: a tls_conn on a libuv stream, with libuv's conventions
 * (tls.h, struct tls_stream). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "tls/tls.h"

#define MOD "tls"
#define SOCK_READ 65536
#define DELIVER_CHUNK 16384
/* decrypted bytes held while the caller does not read: reading from the
 * socket pauses above this */
#define PT_HIGH (256u * 1024)

struct wreq {
    uv_write_t req;
    uv_write_t *outer; /* NULL: a write of our own (handshake, alert) */
    uv_write_cb cb;
    struct tls_stream *ts; /* only for our own writes */
    bool report;          /* our own: report pending_err when written */
    size_t len;
    uint8_t data[];
};

static void sock_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void sock_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);
static void deliver(struct tls_stream *ts);

static struct tls_stream *ts_of(uv_handle_t *h);
static void peer_addr(struct tls_stream *ts, char *out, size_t cap);

static int stream_init(struct tls_stream *ts, uv_loop_t *loop, tls_conn *conn, const char *label,
                       bool pipe)
{
    memset(ts, 0, sizeof(*ts));
    ts->s = pipe ? (uv_stream_t *)&ts->pipe : (uv_stream_t *)&ts->tcp;
    int rv = pipe ? uv_pipe_init(loop, &ts->pipe, 0) : uv_tcp_init(loop, &ts->tcp);
    if (rv != 0) {
        tls_conn_free(conn);
        return rv;
    }
    tls_stream_set_label(ts, label);
    ts->conn = conn;
    if (conn == NULL)
        return 0;
    /* cannot fail on a valid loop */
    uv_idle_init(loop, &ts->idle);
    ts->idle.data = ts;
    uv_timer_init(loop, &ts->hs_timer);
    ts->hs_timer.data = ts;
    return 0;
}

/* log_refused: a failed TLS exchange with |addr|, once per stream. A
 * handshake refused on a listener is etcd's "rejected connection" line
 * (remote-addr, server-name, error; and which listener); one dialed out, or
 * a record error after the handshake, a warning of its own. Port probes
 * that sent nothing are debug lines. */
static void log_refused(struct tls_stream *ts, enum log_level level, const char *why)
{
    if (!log_enabled(level))
        return;
    char addr[300];
    peer_addr(ts, addr, sizeof(addr));
    if (tls_conn_is_server(ts->conn) && !tls_conn_done(ts->conn))
        log_kv(level, MOD, "rejected connection", LF_STR("remote-addr", addr),
               LF_STR("server-name", tls_conn_server_name(ts->conn)), LF_STR("error", why),
               LF_STR("listener", ts->label));
    else
        log_kv(level, MOD,
               tls_conn_done(ts->conn) ? "TLS connection failed" : "TLS handshake failed",
               LF_STR("remote-addr", addr), LF_STR("error", why), LF_STR("link", ts->label));
}

static void on_hs_timeout(uv_timer_t *h)
{
    struct tls_stream *ts = h->data;
    if (ts->closing || tls_conn_done(ts->conn) || ts->pending_err != 0)
        return;
    if (!ts->hs_logged) {
        ts->hs_logged = true;
        char why[64];
        snprintf(why, sizeof(why), "handshake not completed within %u ms", ts->hs_timeout_ms);
        log_refused(ts, LOG_WARN, why);
    }
    ts->pending_err = UV_ETIMEDOUT;
    if (ts->sock_reading) {
        uv_read_stop(ts->s);
        ts->sock_reading = false;
    }
    deliver(ts);
}

void tls_stream_set_handshake_timeout(struct tls_stream *ts, unsigned ms)
{
    if (ts->conn == NULL || ms == 0 || tls_conn_done(ts->conn))
        return;
    ts->hs_timeout_ms = ms;
    uv_timer_start(&ts->hs_timer, on_hs_timeout, ms, 0);
}

int tls_stream_init(struct tls_stream *ts, uv_loop_t *loop, tls_conn *conn, const char *label)
{
    return stream_init(ts, loop, conn, label, false);
}

int tls_stream_init_pipe(struct tls_stream *ts, uv_loop_t *loop, tls_conn *conn,
                         const char *label)
{
    return stream_init(ts, loop, conn, label, true);
}

void tls_stream_set_label(struct tls_stream *ts, const char *label)
{
    snprintf(ts->label, sizeof(ts->label), "%s", label ? label : "TLS");
}

static void wreq_done(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    if (w->outer != NULL) {
        w->cb(w->outer, status);
    } else if (w->report && !w->ts->closing) {
        /* the alert of a failed handshake is out: now say it failed */
        deliver(w->ts);
    }
    free(w);
}

/* send_output writes the ciphertext waiting in the connection, with the
 * caller's request (|outer|, may be NULL) completing when it is written. */
static int send_output(struct tls_stream *ts, uv_write_t *outer, uv_write_cb cb, bool report)
{
    size_t n = tls_conn_output_size(ts->conn);
    if (n == 0 && outer == NULL && !report)
        return 0;
    struct wreq *w = malloc(sizeof(*w) + n);
    if (w == NULL)
        return UV_ENOMEM;
    w->outer = outer;
    w->cb = cb;
    w->ts = ts;
    w->report = report;
    w->len = tls_conn_read_output(ts->conn, w->data, n);
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)w->len);
    int rv = uv_write(&w->req, ts->s, &b, 1, wreq_done);
    if (rv != 0) {
        free(w);
        return rv;
    }
    return 0;
}

static void peer_addr(struct tls_stream *ts, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    out[0] = '\0';
    if (ts->s->type == UV_NAMED_PIPE) {
        char name[256];
        size_t n = sizeof(name);
        if (uv_pipe_getsockname(&ts->pipe, name, &n) == 0 && n < sizeof(name)) {
            name[n] = '\0';
            snprintf(out, cap, "unix socket %s", name);
        } else {
            snprintf(out, cap, "a unix socket");
        }
        return;
    }
    if (ts->s->type != UV_TCP || uv_tcp_getpeername((uv_tcp_t *)ts->s, (struct sockaddr *)&ss,
                                                    &len) != 0) {
        snprintf(out, cap, "?");
        return;
    }
    char ip[64] = "?";
    int port;
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(out, cap, "[%s]:%d", ip, port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(out, cap, "%s:%d", ip, port);
    }
}

/* failed: TLS failed; log why once, send the alert, and report UV_EPROTO
 * to the reader once the alert is written. */
static void failed(struct tls_stream *ts)
{
    if (ts->pending_err != 0)
        return;
    ts->pending_err = UV_EPROTO;
    if (!ts->hs_logged) {
        ts->hs_logged = true;
        log_refused(ts, LOG_WARN, tls_conn_error(ts->conn));
    }
    if (ts->sock_reading) {
        uv_read_stop(ts->s);
        ts->sock_reading = false;
    }
    if (send_output(ts, NULL, NULL, true) != 0)
        deliver(ts); /* cannot send the alert: report now */
}

/* pump decrypts what was fed into ts->pt, runs the handshake and sends
 * its output. */
static void pump(struct tls_stream *ts)
{
    while (ts->pending_err == 0 && !ts->eof && ts->pt.len < PT_HIGH) {
        if (buf_reserve(&ts->pt, DELIVER_CHUNK) != 0) {
            ts->pending_err = UV_ENOMEM;
            break;
        }
        ssize_t n = tls_conn_read(ts->conn, ts->pt.data + ts->pt.len, DELIVER_CHUNK);
        if (n > 0) {
            ts->pt.len += (size_t)n;
            continue;
        }
        if (n == TLS_WANT)
            break;
        if (n == TLS_EOF) {
            ts->eof = true;
            break;
        }
        /* the handshake or a record failed */
        failed(ts);
        return;
    }
    if (ts->hs_timeout_ms && tls_conn_done(ts->conn)) {
        uv_timer_stop(&ts->hs_timer);
        ts->hs_timeout_ms = 0;
    }
    /* handshake messages, tickets, key updates, early plaintext */
    if (ts->pending_err == 0 && send_output(ts, NULL, NULL, false) != 0)
        ts->pending_err = UV_ENOMEM;
}

/* deliver hands decrypted bytes to the caller while it reads, then a
 * pending error or end of stream. */
static void deliver(struct tls_stream *ts)
{
    while (ts->reading && !ts->closing) {
        if (ts->pt.len == 0) {
            pump(ts);
            if (ts->pt.len == 0)
                break;
        }
        uv_buf_t b = uv_buf_init(NULL, 0);
        ts->alloc_cb((uv_handle_t *)ts->s, ts->pt.len < SOCK_READ ? SOCK_READ : ts->pt.len, &b);
        if (b.base == NULL || b.len == 0) {
            ts->read_cb(ts->s, UV_ENOBUFS, &b);
            return;
        }
        size_t n = ts->pt.len < b.len ? ts->pt.len : b.len;
        memcpy(b.base, ts->pt.data, n);
        buf_consume(&ts->pt, n);
        ts->read_cb(ts->s, (ssize_t)n, &b);
    }
    if (!ts->reading || ts->closing || ts->pt.len > 0)
        return;
    if (ts->pending_err != 0 || ts->eof) {
        int err = ts->pending_err ? ts->pending_err : UV_EOF;
        /* an alert still being written reports when it is out */
        if (ts->pending_err == UV_EPROTO && uv_stream_get_write_queue_size(ts->s) > 0 &&
            !ts->eof)
            return;
        ts->reading = false;
        uv_buf_t b = uv_buf_init(NULL, 0);
        ts->read_cb(ts->s, err, &b);
        return;
    }
    /* wants more from the socket */
    if (!ts->sock_reading && !ts->eof) {
        int rv = uv_read_start(ts->s, sock_alloc, sock_read);
        if (rv != 0) {
            ts->pending_err = rv;
            deliver(ts);
            return;
        }
        ts->sock_reading = true;
    }
}

static void on_idle(uv_idle_t *h)
{
    struct tls_stream *ts = h->data;
    uv_idle_stop(h);
    ts->idle_on = false;
    deliver(ts);
}

static void sock_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    char *p = malloc(SOCK_READ);
    *b = uv_buf_init(p, p ? SOCK_READ : 0);
}

static void sock_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct tls_stream *ts = ts_of((uv_handle_t *)s);
    if (nread == 0 || ts->closing) {
        free(b->base);
        return;
    }
    if (nread < 0) {
        free(b->base);
        uv_read_stop(s);
        ts->sock_reading = false;
        if (nread == UV_EOF) {
            if (!tls_conn_done(ts->conn) && ts->pending_err == 0 && !ts->hs_logged) {
                ts->hs_logged = true;
                /* a connection that sent nothing at all is a port probe,
                 * not a TLS client: not worth a warning */
                log_refused(ts, ts->got_bytes ? LOG_WARN : LOG_DEBUG,
                            ts->got_bytes ? "EOF: the peer closed the connection during the "
                                            "handshake"
                                          : "EOF: the peer closed the connection during the "
                                            "handshake (it sent nothing)");
            }
            ts->eof = true;
        } else if (ts->pending_err == 0) {
            ts->pending_err = (int)nread;
        }
        deliver(ts);
        return;
    }
    ts->got_bytes = true;
    int rv = tls_conn_feed(ts->conn, b->base, (size_t)nread);
    free(b->base);
    if (rv != 0) {
        ts->pending_err = UV_ENOMEM;
        deliver(ts);
        return;
    }
    pump(ts);
    if (ts->pt.len >= PT_HIGH || !ts->reading) {
        uv_read_stop(s);
        ts->sock_reading = false;
    }
    deliver(ts);
}

static struct tls_stream *ts_of(uv_handle_t *h)
{
    return (struct tls_stream *)((char *)h - offsetof(struct tls_stream, tcp));
}

int tls_stream_start(struct tls_stream *ts)
{
    if (ts->conn == NULL)
        return 0;
    int h = tls_conn_handshake(ts->conn);
    if (h < 0) {
        failed(ts);
        return 0;
    }
    int rv = send_output(ts, NULL, NULL, false);
    if (rv != 0)
        return rv;
    if (!ts->sock_reading && !ts->eof && ts->pending_err == 0) {
        rv = uv_read_start(ts->s, sock_alloc, sock_read);
        if (rv != 0)
            return rv;
        ts->sock_reading = true;
    }
    return 0;
}

int tls_stream_read_start(struct tls_stream *ts, uv_alloc_cb alloc_cb, uv_read_cb read_cb)
{
    if (ts->conn == NULL)
        return uv_read_start(ts->s, alloc_cb, read_cb);
    if (ts->closing)
        return UV_EINVAL;
    ts->alloc_cb = alloc_cb;
    ts->read_cb = read_cb;
    ts->reading = true;
    if (ts->pt.len > 0 || ts->pending_err != 0 || ts->eof) {
        /* deliver from the next loop pass, never from here */
        if (!ts->idle_on) {
            uv_idle_start(&ts->idle, on_idle);
            ts->idle_on = true;
        }
        return 0;
    }
    if (!ts->sock_reading) {
        int rv = uv_read_start(ts->s, sock_alloc, sock_read);
        if (rv != 0)
            return rv;
        ts->sock_reading = true;
    }
    /* a client sends its hello without waiting for a write */
    if (!tls_conn_done(ts->conn)) {
        int h = tls_conn_handshake(ts->conn);
        if (h < 0)
            failed(ts);
        else if (send_output(ts, NULL, NULL, false) != 0)
            return UV_ENOMEM;
    }
    return 0;
}

int tls_stream_read_stop(struct tls_stream *ts)
{
    if (ts->conn == NULL)
        return uv_read_stop(ts->s);
    ts->reading = false;
    if (ts->sock_reading && tls_conn_done(ts->conn)) {
        uv_read_stop(ts->s);
        ts->sock_reading = false;
    }
    if (ts->idle_on) {
        uv_idle_stop(&ts->idle);
        ts->idle_on = false;
    }
    return 0;
}

int tls_stream_write(struct tls_stream *ts, uv_write_t *req, const uv_buf_t bufs[], unsigned n,
                     uv_write_cb cb)
{
    if (ts->conn == NULL)
        return uv_write(req, ts->s, bufs, n, cb);
    if (ts->closing)
        return UV_EPIPE;
    if (ts->pending_err != 0)
        return ts->pending_err == UV_EPROTO ? UV_EPROTO : UV_EPIPE;
    for (unsigned i = 0; i < n; i++) {
        if (bufs[i].len == 0)
            continue;
        int rv = tls_conn_write(ts->conn, bufs[i].base, bufs[i].len);
        if (rv == TLS_FAILED) {
            failed(ts);
            return UV_EPROTO;
        }
        if (rv != 0)
            return UV_ENOMEM;
    }
    /* a client's hello goes out with its first write; make sure the
     * socket is read for the answer */
    if (!ts->sock_reading && !tls_conn_done(ts->conn) && !ts->eof) {
        int rv = uv_read_start(ts->s, sock_alloc, sock_read);
        if (rv == 0)
            ts->sock_reading = true;
    }
    req->handle = ts->s;
    return send_output(ts, req, cb, false);
}

size_t tls_stream_write_queue_size(const struct tls_stream *ts)
{
    return uv_stream_get_write_queue_size(ts->s);
}

static void closed_one(uv_handle_t *h)
{
    struct tls_stream *ts = h->type == UV_TCP || h->type == UV_NAMED_PIPE ? ts_of(h) : h->data;
    if (--ts->closing_handles > 0)
        return;
    tls_conn_free(ts->conn);
    ts->conn = NULL;
    buf_free(&ts->pt);
    uv_close_cb cb = ts->close_cb;
    uv_stream_t *s = ts->s;
    if (cb)
        cb((uv_handle_t *)s);
}

void tls_stream_close(struct tls_stream *ts, uv_close_cb cb)
{
    if (ts->conn == NULL) {
        uv_close((uv_handle_t *)ts->s, cb);
        return;
    }
    if (ts->closing)
        return;
    ts->closing = true;
    ts->close_cb = cb;
    ts->closing_handles = 3;
    uv_close((uv_handle_t *)&ts->idle, closed_one);
    uv_close((uv_handle_t *)&ts->hs_timer, closed_one);
    uv_close((uv_handle_t *)ts->s, closed_one);
}

const char *tls_stream_peer_cn(const struct tls_stream *ts)
{
    return ts->conn ? tls_conn_peer_cn(ts->conn) : NULL;
}
