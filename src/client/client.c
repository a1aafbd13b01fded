/* client/client.c: the transport of libquorum-client: endpoints and
 * failover, the I/O thread with its nghttp2 client sessions, gRPC framing,
 * flow control, and the stream and unary call primitives. The typed
 * helpers are in calls.c.
 *
 * The I/O thread owns the sockets and the nghttp2 sessions; callers queue
 * work under c->mu (new streams on the pending list, sends, cancels and
 * consumed input on the dirty list), write one byte to the wake pipe, and
 * wait on their stream's condition variable. Stream-level flow control is
 * manual: a DATA chunk is given back to the connection window at once, but
 * to the stream window only while the stream holds fewer than
 * stream_buffer bytes of messages its reader has not taken.
 *
 * QC_DEBUG=1 in the environment prints RST_STREAM and GOAWAY frames to
 * stderr. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "client/client_int.h"

#define DEFAULT_DIAL_MS 5000
#define DEFAULT_CALL_MS 10000
#define DEFAULT_MAX_MSG ((size_t)0x7fffffff)
#define DEFAULT_STREAM_BUF ((size_t)4 << 20)
#define CONN_WINDOW ((int32_t)1 << 30)
#define MAX_CONNS 8 /* the current one plus draining ones */
#define TLS_OUT_MAX ((size_t)4 << 20) /* ciphertext queued before nghttp2 waits */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_status(struct qc_status *st, int code, const char *msg)
{
    if (!st)
        return;
    st->code = code;
    snprintf(st->message, sizeof(st->message), "%s", msg ? msg : "");
}

const char *qc_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case QC_ESTATUS:
        return "the server returned an error status";
    case QC_EUNAVAILABLE:
        return "no connection to the server";
    case QC_ETIMEDOUT:
        return "deadline exceeded";
    case QC_EPROTO:
        return "malformed response";
    case QC_ECLOSED:
        return "client closed or call cancelled";
    default:
        return err < 0 && err > -4096 ? strerror(-err) : "unknown error";
    }
}

static void wake(qc_client *c)
{
    if (c->wake_pending)
        return;
    c->wake_pending = 1;
    char b = 1;
    ssize_t r = write(c->wake_wr, &b, 1);
    (void)r; /* a full pipe already wakes the thread */
}

/* ---- streams: life cycle ---- */

static void stream_destroy(struct qc_stream *s)
{
    for (struct qc_chunk *k = s->sq, *n; k; k = n) {
        n = k->next;
        free(k);
    }
    for (struct qc_msg *m = s->rq, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    free(s->cur);
    free(s->path);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* stream_unref drops one reference (c->mu held). Returns 1 when that was
 * the last reference to the client too: the caller must then unlock and
 * call client_destroy. */
static int stream_unref(struct qc_stream *s)
{
    if (--s->refs > 0)
        return 0;
    qc_client *c = s->c;
    stream_destroy(s);
    return --c->refs == 0;
}

static void add_dirty(struct qc_stream *s)
{
    if (s->in_dirty)
        return;
    s->in_dirty = 1;
    s->refs++;
    s->dnext = s->c->dirty;
    s->c->dirty = s;
    wake(s->c);
}

/* finish records the outcome of |s| once and wakes its waiters. */
static void finish(struct qc_stream *s, int err, int code, const char *msg)
{
    if (s->done)
        return;
    s->done = 1;
    s->err = err;
    set_status(&s->st, code, msg);
    pthread_cond_broadcast(&s->cv);
}

static void pending_push(qc_client *c, struct qc_stream *s, int front)
{
    s->state = S_PENDING;
    s->on_pending = 1;
    if (front) {
        s->pnext = c->pending;
        c->pending = s;
        if (!c->pending_tail)
            c->pending_tail = s;
    } else {
        s->pnext = NULL;
        if (c->pending_tail)
            c->pending_tail->pnext = s;
        else
            c->pending = s;
        c->pending_tail = s;
    }
}

static struct qc_stream *pending_pop(qc_client *c)
{
    struct qc_stream *s = c->pending;
    if (!s)
        return NULL;
    c->pending = s->pnext;
    if (!c->pending)
        c->pending_tail = NULL;
    s->pnext = NULL;
    s->on_pending = 0;
    return s;
}

static void pending_remove(qc_client *c, struct qc_stream *s)
{
    struct qc_stream **pp = &c->pending, *prev = NULL;
    while (*pp && *pp != s) {
        prev = *pp;
        pp = &(*pp)->pnext;
    }
    if (!*pp)
        return;
    *pp = s->pnext;
    if (c->pending_tail == s)
        c->pending_tail = prev;
    s->pnext = NULL;
    s->on_pending = 0;
}

/* fail every pending stream (the I/O side's reference is dropped) */
static void fail_pending(qc_client *c, int err, int code, const char *msg)
{
    struct qc_stream *s;
    while ((s = pending_pop(c))) {
        finish(s, err, code, msg);
        s->state = S_DONE;
        stream_unref(s);
    }
}

static void conn_attach(struct qc_conn *cn, struct qc_stream *s)
{
    s->conn = cn;
    s->cprev = NULL;
    s->cnext = cn->streams;
    if (cn->streams)
        cn->streams->cprev = s;
    cn->streams = s;
    cn->nstreams++;
}

static void conn_detach(struct qc_stream *s)
{
    struct qc_conn *cn = s->conn;
    if (!cn)
        return;
    if (s->cprev)
        s->cprev->cnext = s->cnext;
    else
        cn->streams = s->cnext;
    if (s->cnext)
        s->cnext->cprev = s->cprev;
    s->cnext = s->cprev = NULL;
    s->conn = NULL;
    cn->nstreams--;
}

/* reset_recv forgets what a stream received, before it is sent again */
static void reset_recv(struct qc_stream *s)
{
    free(s->cur);
    s->cur = NULL;
    s->cur_have = s->hdr_have = 0;
    s->http_status = s->got_grpc_status = 0;
    s->unconsumed = 0;
    s->rst_sent = 0;
    memset(&s->srv, 0, sizeof(s->srv));
}

/* ---- connections ---- */

static void conn_stop_using(qc_client *c, struct qc_conn *cn)
{
    cn->draining = 1;
    if (c->cur == cn) {
        c->cur = NULL;
        c->next_ep = (int)((size_t)(cn->ep + 1) % c->n_eps);
    }
}

/* dial_failed counts a failed connect; once every endpoint failed in a row,
 * the waiting calls (and qc_connect) give up. */
static void dial_failed(qc_client *c, struct qc_conn *cn, const char *why)
{
    snprintf(c->last_err, sizeof(c->last_err), "dial %s: %s", c->eps[cn->ep].given, why);
    if (++c->fail_streak < c->n_eps)
        return;
    c->fail_streak = 0;
    char msg[256];
    snprintf(msg, sizeof(msg), "all endpoints unreachable; last error: %s", c->last_err);
    fail_pending(c, QC_EUNAVAILABLE, QC_UNAVAILABLE, msg);
    if (c->want_connect) {
        c->want_connect = 0;
        c->connect_result = QC_EUNAVAILABLE;
        pthread_cond_broadcast(&c->cv);
    }
}

/* conn_fail marks |cn| dead: streams whose request never reached the
 * socket go back to the pending list (once), the others fail UNAVAILABLE.
 * The connection is freed by reap_conns. */
static void conn_fail(struct qc_conn *cn, const char *why)
{
    qc_client *c = cn->c;
    if (cn->dead)
        return;
    cn->dead = 1;
    int was_up = cn->state == C_READY;
    int was_cur = c->cur == cn;
    conn_stop_using(c, cn);
    char msg[256];
    snprintf(msg, sizeof(msg), "connection to %s lost: %s", c->eps[cn->ep].given, why);
    struct qc_stream *s;
    while ((s = cn->streams)) {
        conn_detach(s);
        if (cn->sess)
            nghttp2_session_set_stream_user_data(cn->sess, s->id, NULL);
        if (!s->done && !s->sent && s->attempts < 2 && !c->stop) {
            reset_recv(s);
            pending_push(c, s, 1);
            continue;
        }
        finish(s, QC_EUNAVAILABLE, QC_UNAVAILABLE, msg);
        s->state = S_DONE;
        stream_unref(s);
    }
    if (!was_up && was_cur)
        dial_failed(c, cn, why);
}

static void conn_free(struct qc_conn *cn)
{
    if (cn->sess)
        nghttp2_session_del(cn->sess);
    if (cn->ssl)
        SSL_free(cn->ssl); /* and its BIOs */
    free(cn->tout);
    if (cn->fd >= 0)
        close(cn->fd);
    free(cn);
}

/* reap_conns frees dead connections and closes drained ones */
static void reap_conns(qc_client *c)
{
    for (struct qc_conn **pp = &c->conns; *pp;) {
        struct qc_conn *cn = *pp;
        if (!cn->dead && cn->draining && cn->nstreams == 0)
            conn_fail(cn, "drained");
        if (cn->dead) {
            *pp = cn->next;
            conn_free(cn);
        } else {
            pp = &cn->next;
        }
    }
}

/* ---- nghttp2 callbacks (c->mu held: they run inside session calls) ---- */

/* ---- TLS (c->mu held) ---- */

/* ssl_reason describes the last OpenSSL error of |cn| after |ret|. */
static void ssl_reason(struct qc_conn *cn, int ret, const char *when, char *out, size_t cap)
{
    long vr = SSL_get_verify_result(cn->ssl);
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = e;
    if (vr != X509_V_OK)
        snprintf(out, cap, "%s: certificate verify failed: %s", when,
                 X509_verify_cert_error_string(vr));
    else if (last != 0)
        snprintf(out, cap, "%s: %s", when, ERR_reason_error_string(last));
    else
        snprintf(out, cap, "%s: the server closed the connection (%d)", when,
                 SSL_get_error(cn->ssl, ret));
}

/* tls_flush moves the ciphertext OpenSSL produced to the socket, keeping
 * what the socket does not take. Returns 0 or -errno. */
static int tls_flush(struct qc_conn *cn)
{
    size_t pend = BIO_ctrl_pending(cn->wbio);
    if (pend > 0) {
        if (cn->tout_off > 0 && cn->tout_off == cn->tout_len)
            cn->tout_off = cn->tout_len = 0;
        if (cn->tout_len + pend > cn->tout_cap) {
            size_t cap = cn->tout_cap ? cn->tout_cap : 65536;
            while (cap < cn->tout_len + pend)
                cap *= 2;
            uint8_t *t = realloc(cn->tout, cap);
            if (!t)
                return -ENOMEM;
            cn->tout = t;
            cn->tout_cap = cap;
        }
        int r = BIO_read(cn->wbio, cn->tout + cn->tout_len, (int)pend);
        if (r > 0)
            cn->tout_len += (size_t)r;
    }
    while (cn->tout_off < cn->tout_len) {
        ssize_t n = send(cn->fd, cn->tout + cn->tout_off, cn->tout_len - cn->tout_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            return -errno;
        }
        cn->tout_off += (size_t)n;
    }
    cn->tout_off = cn->tout_len = 0;
    return 0;
}

static size_t tls_backlog(const struct qc_conn *cn)
{
    return cn->tout_len - cn->tout_off;
}

static void tcp_up(struct qc_conn *cn);

/* tls_step drives the handshake; HTTP/2 starts once it is done. */
static void tls_step(struct qc_conn *cn)
{
    ERR_clear_error();
    int r = SSL_do_handshake(cn->ssl);
    int fr = tls_flush(cn);
    if (r == 1) {
        if (fr != 0) {
            conn_fail(cn, strerror(-fr));
            return;
        }
        tcp_up(cn);
        return;
    }
    int e = SSL_get_error(cn->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (fr != 0)
            conn_fail(cn, strerror(-fr));
        return;
    }
    char why[300];
    ssl_reason(cn, r, "TLS handshake", why, sizeof(why));
    conn_fail(cn, why);
}

/* tls_start begins the handshake on a connected socket. */
static void tls_start(struct qc_conn *cn)
{
    qc_client *c = cn->c;
    cn->ssl = SSL_new(c->ssl_ctx);
    cn->rbio = BIO_new(BIO_s_mem());
    cn->wbio = BIO_new(BIO_s_mem());
    if (!cn->ssl || !cn->rbio || !cn->wbio) {
        if (cn->ssl) {
            SSL_free(cn->ssl);
            cn->ssl = NULL;
        }
        BIO_free(cn->rbio);
        BIO_free(cn->wbio);
        cn->rbio = cn->wbio = NULL;
        conn_fail(cn, "out of memory");
        return;
    }
    BIO_set_mem_eof_return(cn->rbio, -1);
    SSL_set_bio(cn->ssl, cn->rbio, cn->wbio);
    SSL_set_connect_state(cn->ssl);
    char name[256];
    snprintf(name, sizeof(name), "%s", c->eps[cn->ep].host);
    if (c->eps[cn->ep].unix_sock) {
        /* "unixs://localhost:2379": the name before the colon; a path
         * names no host (the CA check alone) */
        char *colon = strchr(name, ':');
        if (colon != NULL)
            *colon = '\0';
        if (name[0] == '/' || name[0] == '.' || strchr(name, '/') != NULL)
            name[0] = '\0';
    }
    const char *host = name;
    unsigned char ab[16];
    X509_VERIFY_PARAM *vp = SSL_get0_param(cn->ssl);
    if (host[0] == '\0') {
        /* no name to check */
    } else if (inet_pton(AF_INET, host, ab) == 1 || inet_pton(AF_INET6, host, ab) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, host);
    } else {
        SSL_set_tlsext_host_name(cn->ssl, host);
        X509_VERIFY_PARAM_set1_host(vp, host, 0);
    }
    cn->state = C_TLS;
    tls_step(cn);
}

/* build_ssl_ctx makes the client's TLS context from its options. */
static int build_ssl_ctx(qc_client *c, const struct qc_options *o, struct qc_status *st)
{
    char m[256];
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    if (!x) {
        set_status(st, QC_RESOURCE_EXHAUSTED, "out of memory");
        return -ENOMEM;
    }
    SSL_CTX_set_min_proto_version(x, TLS1_2_VERSION);
    SSL_CTX_set_mode(x, SSL_MODE_RELEASE_BUFFERS);
    static const unsigned char alpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(x, alpn, sizeof(alpn));
    const char *what = NULL, *file = NULL;
    const char *files[] = {o->ca_file, o->cert_file, o->key_file};
    for (int i = 0; i < 3; i++) {
        if (files[i] == NULL || *files[i] == '\0')
            continue;
        FILE *f = fopen(files[i], "r");
        if (f != NULL) {
            fclose(f);
            continue;
        }
        /* etcdctl's (Go's) words: "open ca.crt: no such file or directory" */
        char e[128];
        snprintf(e, sizeof(e), "%s", strerror(errno));
        if (e[0] >= 'A' && e[0] <= 'Z')
            e[0] = (char)(e[0] - 'A' + 'a');
        snprintf(m, sizeof(m), "open %.120s: %.100s", files[i], e);
        SSL_CTX_free(x);
        set_status(st, QC_INVALID_ARGUMENT, m);
        return -EINVAL;
    }
    if (o->ca_file && *o->ca_file) {
        if (SSL_CTX_load_verify_locations(x, o->ca_file, NULL) != 1)
            what = "cannot load the CA file", file = o->ca_file;
    } else {
        SSL_CTX_set_default_verify_paths(x);
    }
    if (!what && o->cert_file && *o->cert_file) {
        const char *key = o->key_file && *o->key_file ? o->key_file : o->cert_file;
        if (SSL_CTX_use_certificate_chain_file(x, o->cert_file) != 1)
            what = "cannot load the certificate", file = o->cert_file;
        else if (SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) != 1)
            what = "cannot load the key", file = key;
        else if (SSL_CTX_check_private_key(x) != 1)
            what = "the key does not match the certificate", file = key;
    } else if (!what && o->key_file && *o->key_file) {
        what = "a key without a certificate", file = o->key_file;
    }
    if (what) {
        unsigned long e = ERR_peek_last_error();
        snprintf(m, sizeof(m), "%s %.100s: %s", what, file,
                 e ? ERR_reason_error_string(e) : "invalid");
        ERR_clear_error();
        SSL_CTX_free(x);
        set_status(st, QC_INVALID_ARGUMENT, m);
        return -EINVAL;
    }
    SSL_CTX_set_verify(x, o->insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    c->ssl_ctx = x;
    return 0;
}

static ssize_t cb_send(nghttp2_session *sess, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    struct qc_conn *cn = user;
    if (cn->ssl) {
        if (tls_backlog(cn) >= TLS_OUT_MAX) {
            if (tls_flush(cn) != 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            if (tls_backlog(cn) >= TLS_OUT_MAX)
                return NGHTTP2_ERR_WOULDBLOCK;
        }
        ERR_clear_error();
        int w = SSL_write(cn->ssl, data, len > 0x7fffffff ? 0x7fffffff : (int)len);
        if (w <= 0) {
            errno = EPROTO;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (tls_flush(cn) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        return w;
    }
    ssize_t n = send(cn->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return NGHTTP2_ERR_WOULDBLOCK;
        if (errno == EINTR)
            return NGHTTP2_ERR_WOULDBLOCK;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return n;
}

static int cb_frame_send(nghttp2_session *sess, const nghttp2_frame *f, void *user)
{
    if (((struct qc_conn *)user)->c->debug &&
        (f->hd.type == NGHTTP2_RST_STREAM || f->hd.type == NGHTTP2_GOAWAY))
        fprintf(stderr, "qc: sent type %d stream %d code %u\n", f->hd.type, f->hd.stream_id,
                f->hd.type == NGHTTP2_RST_STREAM ? f->rst_stream.error_code : f->goaway.error_code);
    if (f->hd.type == NGHTTP2_HEADERS) {
        struct qc_stream *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
        if (s)
            s->sent = 1;
    }
    return 0;
}

static int cb_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *user)
{
    struct qc_conn *cn = user;
    qc_client *c = cn->c;
    if (c->debug && f->hd.type == NGHTTP2_RST_STREAM)
        fprintf(stderr, "qc: recv RST stream %d code %u\n", f->hd.stream_id,
                f->rst_stream.error_code);
    if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK) &&
        cn->state == C_HANDSHAKE) {
        cn->state = C_READY;
        c->fail_streak = 0;
        if (c->want_connect) {
            c->want_connect = 0;
            c->connect_result = 1;
            pthread_cond_broadcast(&c->cv);
        }
    } else if (f->hd.type == NGHTTP2_GOAWAY) {
        /* streams above last_stream_id are closed by nghttp2 with
         * REFUSED_STREAM (not processed: retried); the rest finish here */
        conn_stop_using(c, cn);
    }
    return 0;
}

static const char *h2_code_name(uint32_t code)
{
    switch (code) {
    case NGHTTP2_NO_ERROR:
        return "NO_ERROR";
    case NGHTTP2_PROTOCOL_ERROR:
        return "PROTOCOL_ERROR";
    case NGHTTP2_INTERNAL_ERROR:
        return "INTERNAL_ERROR";
    case NGHTTP2_FLOW_CONTROL_ERROR:
        return "FLOW_CONTROL_ERROR";
    case NGHTTP2_REFUSED_STREAM:
        return "REFUSED_STREAM";
    case NGHTTP2_CANCEL:
        return "CANCEL";
    case NGHTTP2_ENHANCE_YOUR_CALM:
        return "ENHANCE_YOUR_CALM";
    default:
        return "error";
    }
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* grpc-message is percent-encoded (gRPC over HTTP/2 spec) */
static void percent_decode(const uint8_t *v, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        int hi, lo;
        if (v[i] == '%' && i + 2 < n && (hi = hexval(v[i + 1])) >= 0 &&
            (lo = hexval(v[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = (char)v[i];
        }
    }
    out[o] = 0;
}

static int cb_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct qc_stream *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (!s)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        s->http_status = 0;
        for (size_t i = 0; i < valuelen && value[i] >= '0' && value[i] <= '9'; i++)
            s->http_status = s->http_status * 10 + (value[i] - '0');
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int code = 0;
        for (size_t i = 0; i < valuelen && i < 4 && value[i] >= '0' && value[i] <= '9'; i++)
            code = code * 10 + (value[i] - '0');
        s->got_grpc_status = 1;
        s->srv.code = code;
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        percent_decode(value, valuelen, s->srv.message, sizeof(s->srv.message));
    }
    return 0;
}

/* proto_fail ends |s| with a local error and resets it */
static void proto_fail(nghttp2_session *sess, struct qc_stream *s, int err, int code,
                       const char *msg)
{
    finish(s, err, code, msg);
    if (!s->rst_sent) {
        s->rst_sent = 1;
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    }
}

static void give_back(nghttp2_session *sess, struct qc_stream *s)
{
    if (s->unconsumed && (s->unary || s->rq_bytes < s->c->stream_buffer)) {
        nghttp2_session_consume_stream(sess, s->id, s->unconsumed);
        s->unconsumed = 0;
    }
}

static int cb_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *p,
                         size_t len, void *user)
{
    nghttp2_session_consume_connection(sess, len);
    struct qc_stream *s = nghttp2_session_get_stream_user_data(sess, id);
    if (!s || s->done) {
        nghttp2_session_consume_stream(sess, id, len);
        return 0;
    }
    qc_client *c = s->c;
    s->unconsumed += len;
    while (len > 0) {
        if (!s->cur) {
            size_t k = 5 - s->hdr_have;
            if (k > len)
                k = len;
            memcpy(s->hdr + s->hdr_have, p, k);
            s->hdr_have += k;
            p += k;
            len -= k;
            if (s->hdr_have < 5)
                break;
            size_t n = (size_t)s->hdr[1] << 24 | (size_t)s->hdr[2] << 16 | (size_t)s->hdr[3] << 8 |
                       s->hdr[4];
            if (s->hdr[0] != 0) {
                char m[96];
                snprintf(m, sizeof(m), "grpc: received unexpected payload format %u", s->hdr[0]);
                proto_fail(sess, s, QC_EPROTO, QC_INTERNAL, m);
                nghttp2_session_consume_stream(sess, id, s->unconsumed);
                s->unconsumed = 0;
                return 0;
            }
            if (n > c->max_recv) {
                char m[128];
                snprintf(m, sizeof(m), "grpc: received message larger than max (%zu vs. %zu)", n,
                         c->max_recv);
                proto_fail(sess, s, QC_EPROTO, QC_RESOURCE_EXHAUSTED, m);
                nghttp2_session_consume_stream(sess, id, s->unconsumed);
                s->unconsumed = 0;
                return 0;
            }
            s->cur = malloc(sizeof(struct qc_msg) + (n ? n : 1));
            if (!s->cur) {
                proto_fail(sess, s, -ENOMEM, QC_RESOURCE_EXHAUSTED, "out of memory");
                nghttp2_session_consume_stream(sess, id, s->unconsumed);
                s->unconsumed = 0;
                return 0;
            }
            s->cur->next = NULL;
            s->cur->len = n;
            s->cur_have = 0;
        }
        size_t k = s->cur->len - s->cur_have;
        if (k > len)
            k = len;
        memcpy(s->cur->data + s->cur_have, p, k);
        s->cur_have += k;
        p += k;
        len -= k;
        if (s->cur_have == s->cur->len) {
            struct qc_msg *m = s->cur;
            s->cur = NULL;
            s->hdr_have = 0;
            if (s->rq_tail)
                s->rq_tail->next = m;
            else
                s->rq = m;
            s->rq_tail = m;
            s->rq_bytes += m->len + 5;
            if (s->rq_bytes > s->rq_peak)
                s->rq_peak = s->rq_bytes;
            pthread_cond_broadcast(&s->cv);
        }
    }
    give_back(sess, s);
    return 0;
}

static int http_to_grpc(int http)
{
    switch (http) {
    case 400:
        return QC_INTERNAL;
    case 401:
        return QC_UNAUTHENTICATED;
    case 403:
        return QC_PERMISSION_DENIED;
    case 404:
        return QC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return QC_UNAVAILABLE;
    default:
        return QC_UNKNOWN;
    }
}

static int is_leader_loss(const struct qc_status *st)
{
    return st->code == QC_UNAVAILABLE && (strcmp(st->message, "etcdserver: no leader") == 0 ||
                                          strcmp(st->message, "etcdserver: leader changed") == 0);
}

static int cb_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *user)
{
    struct qc_conn *cn = user;
    qc_client *c = cn->c;
    struct qc_stream *s = nghttp2_session_get_stream_user_data(sess, id);
    if (!s)
        return 0;
    nghttp2_session_set_stream_user_data(sess, id, NULL);
    conn_detach(s);
    if (!s->done) {
        char m[160];
        if (s->got_grpc_status && !s->cur && s->hdr_have == 0) {
            if (s->srv.code == 0)
                finish(s, 0, 0, "");
            else
                finish(s, QC_ESTATUS, s->srv.code, s->srv.message);
            if (is_leader_loss(&s->srv))
                conn_stop_using(c, cn);
        } else if (s->got_grpc_status) {
            finish(s, QC_EPROTO, QC_INTERNAL, "unexpected EOF");
        } else if (code == NGHTTP2_REFUSED_STREAM && s->attempts < 2 && !c->stop) {
            reset_recv(s);
            pending_push(c, s, 1);
            return 0;
        } else if (s->http_status && s->http_status != 200) {
            snprintf(m, sizeof(m), "unexpected HTTP status code received from server: %d",
                     s->http_status);
            finish(s, QC_EPROTO, http_to_grpc(s->http_status), m);
        } else {
            snprintf(m, sizeof(m), "stream terminated by RST_STREAM with error code: %s",
                     h2_code_name(code));
            int g = code == NGHTTP2_REFUSED_STREAM      ? QC_UNAVAILABLE
                    : code == NGHTTP2_CANCEL            ? QC_CANCELLED
                    : code == NGHTTP2_ENHANCE_YOUR_CALM ? QC_RESOURCE_EXHAUSTED
                                                        : QC_INTERNAL;
            finish(s,
                   g == QC_UNAVAILABLE ? QC_EUNAVAILABLE
                   : g == QC_CANCELLED ? QC_ECLOSED
                                       : QC_EPROTO,
                   g, m);
        }
    }
    s->state = S_DONE;
    stream_unref(s);
    return 0;
}

static ssize_t data_read(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct qc_stream *s = src->ptr;
    size_t n = 0;
    while (n < length && s->sq) {
        struct qc_chunk *k = s->sq;
        size_t t = k->len - k->off;
        if (t > length - n)
            t = length - n;
        memcpy(buf + n, k->data + k->off, t);
        k->off += t;
        n += t;
        if (k->off == k->len) {
            s->sq = k->next;
            if (!s->sq)
                s->sq_tail = NULL;
            free(k);
        }
    }
    size_t before = s->sq_bytes;
    s->sq_bytes -= n;
    if (before > s->c->stream_buffer && s->sq_bytes <= s->c->stream_buffer)
        pthread_cond_broadcast(&s->cv);
    if (!s->sq && s->half_close) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
        s->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* ---- the I/O thread ---- */

static void start_dial(qc_client *c)
{
    int ep = c->next_ep;
    struct qc_conn *cn = calloc(1, sizeof(*cn));
    if (!cn) {
        fail_pending(c, -ENOMEM, QC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    cn->c = c;
    cn->fd = -1;
    cn->ep = ep;
    cn->state = C_CONNECTING;
    cn->dial_deadline = now_ms() + c->dial_timeout_ms;
    cn->next = c->conns;
    c->conns = cn;
    c->cur = cn;

    struct qc_endpoint *e = &c->eps[ep];
    if (e->unix_sock) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        /* qc_connect refused longer paths */
        size_t hl = strnlen(e->host, sizeof(sa.sun_path) - 1);
        memcpy(sa.sun_path, e->host, hl);
        sa.sun_path[hl] = '\0';
        cn->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (cn->fd < 0) {
            conn_fail(cn, strerror(errno));
            return;
        }
        if (connect(cn->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS &&
            errno != EAGAIN) {
            conn_fail(cn, strerror(errno));
            return;
        }
        return;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int r = getaddrinfo(e->host, e->port, &hints, &ai);
    if (r != 0) {
        conn_fail(cn, gai_strerror(r));
        return;
    }
    cn->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (cn->fd < 0) {
        freeaddrinfo(ai);
        conn_fail(cn, strerror(errno));
        return;
    }
    int one = 1;
    setsockopt(cn->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r = connect(cn->fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (r < 0 && errno != EINPROGRESS) {
        conn_fail(cn, strerror(errno));
        return;
    }
}

/* tcp_up starts HTTP/2 on a connected socket: preface, SETTINGS, a large
 * connection window. READY comes with the server's SETTINGS. */
static void tcp_up(struct qc_conn *cn)
{
    qc_client *c = cn->c;
    if (nghttp2_session_client_new2(&cn->sess, c->cbs, cn, c->h2opt) != 0) {
        cn->sess = NULL;
        conn_fail(cn, "out of memory");
        return;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)c->stream_buffer},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20},
    };
    if (nghttp2_submit_settings(cn->sess, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
        nghttp2_session_set_local_window_size(cn->sess, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0) {
        conn_fail(cn, "out of memory");
        return;
    }
    cn->state = C_HANDSHAKE;
}

static void submit_pending(qc_client *c)
{
    struct qc_conn *cn = c->cur;
    if (!cn || cn->state != C_READY || cn->draining)
        return;
    struct qc_stream *s;
    while ((s = pending_pop(c))) {
        if (s->done) { /* cancelled or timed out while waiting */
            s->state = S_DONE;
            stream_unref(s);
            continue;
        }
        char tmo[32];
        nghttp2_nv nva[10]; /* the 9 below at most */
        size_t n = 0;
#define NV(N, V, VL)                                                                               \
    nva[n++] = (nghttp2_nv)                                                                        \
    {                                                                                              \
        (uint8_t *)(N), (uint8_t *)(V), sizeof(N) - 1, (VL),                                       \
            NGHTTP2_NV_FLAG_NO_COPY_NAME /* values are copied: tmo is on the stack */              \
    }
        const char *auth = c->eps[cn->ep].authority;
        NV(":method", "POST", 4);
        if (c->eps[cn->ep].tls)
            NV(":scheme", "https", 5);
        else
            NV(":scheme", "http", 4);
        NV(":path", s->path, strlen(s->path));
        NV(":authority", auth, strlen(auth));
        NV("content-type", "application/grpc", 16);
        NV("te", "trailers", 8);
        NV("user-agent", "quorum-client/0.1", 17);
        if (c->token != NULL && !s->no_token)
            NV("token", c->token, strlen(c->token));
        if (s->deadline) {
            int64_t left = s->deadline - now_ms();
            if (left <= 0) {
                finish(s, QC_ETIMEDOUT, QC_DEADLINE_EXCEEDED, "context deadline exceeded");
                s->state = S_DONE;
                stream_unref(s);
                continue;
            }
            int tl = snprintf(tmo, sizeof(tmo), "%lldm", (long long)left);
            NV("grpc-timeout", tmo, (size_t)tl);
        }
#undef NV
        nghttp2_data_provider dp = {.source.ptr = s, .read_callback = data_read};
        s->deferred = 0;
        int32_t id = nghttp2_submit_request(cn->sess, NULL, nva, n, &dp, s);
        if (id < 0) {
            if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) {
                pending_push(c, s, 1);
                conn_stop_using(c, cn);
                return;
            }
            finish(s, QC_EPROTO, QC_INTERNAL, nghttp2_strerror(id));
            s->state = S_DONE;
            stream_unref(s);
            continue;
        }
        s->id = id;
        s->state = S_OPEN;
        s->sent = 0;
        s->attempts++;
        conn_attach(cn, s);
    }
}

static void process_dirty(qc_client *c)
{
    struct qc_stream *s;
    while ((s = c->dirty)) {
        c->dirty = s->dnext;
        s->dnext = NULL;
        s->in_dirty = 0;
        if (s->state == S_PENDING && s->on_pending && s->cancel) {
            pending_remove(c, s);
            s->state = S_DONE;
            /* the I/O side's reference; the dirty list's, dropped below, is
             * still held, so this one is never the last */
            s->refs--;
        } else if (s->state == S_OPEN && s->conn && !s->conn->dead) {
            nghttp2_session *sess = s->conn->sess;
            if (s->cancel) {
                if (!s->rst_sent) {
                    s->rst_sent = 1;
                    nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
                }
            } else {
                if (s->deferred && (s->sq || s->half_close)) {
                    s->deferred = 0;
                    nghttp2_session_resume_data(sess, s->id);
                }
                give_back(sess, s);
            }
        }
        stream_unref(s); /* the dirty list's */
    }
}

static void flush(struct qc_conn *cn)
{
    if (cn->dead || !cn->sess)
        return;
    int r = nghttp2_session_send(cn->sess);
    if (r != 0)
        conn_fail(cn, r == NGHTTP2_ERR_CALLBACK_FAILURE ? strerror(errno) : nghttp2_strerror(r));
    else if (!nghttp2_session_want_read(cn->sess) && !nghttp2_session_want_write(cn->sess))
        conn_fail(cn, "connection closed");
}

/* tls_input feeds |n| bytes of ciphertext and hands the plaintext to
 * nghttp2 (or drives the handshake). Returns 0, or -1 when |cn| failed. */
static int tls_input(struct qc_conn *cn, const uint8_t *p, size_t n)
{
    if (BIO_write(cn->rbio, p, (int)n) != (int)n) {
        conn_fail(cn, "out of memory");
        return -1;
    }
    if (cn->state == C_TLS) {
        tls_step(cn);
        if (cn->dead || cn->state == C_TLS)
            return cn->dead ? -1 : 0;
    }
    uint8_t pt[16384];
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(cn->ssl, pt, sizeof(pt));
        if (r > 0) {
            ssize_t k = nghttp2_session_mem_recv(cn->sess, pt, (size_t)r);
            if (k < 0) {
                conn_fail(cn, nghttp2_strerror((int)k));
                return -1;
            }
            continue;
        }
        int e = SSL_get_error(cn->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        if (e == SSL_ERROR_ZERO_RETURN) {
            conn_fail(cn, "EOF");
            return -1;
        }
        char why[300];
        ssl_reason(cn, r, "TLS", why, sizeof(why));
        conn_fail(cn, why);
        return -1;
    }
    int fr = tls_flush(cn); /* post-handshake messages */
    if (fr != 0) {
        conn_fail(cn, strerror(-fr));
        return -1;
    }
    return 0;
}

static void on_readable(struct qc_conn *cn)
{
    uint8_t buf[65536];
    for (int i = 0; i < 16 && !cn->dead; i++) {
        ssize_t n = recv(cn->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0) {
            conn_fail(cn, "EOF");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            conn_fail(cn, strerror(errno));
            return;
        }
        if (cn->ssl) {
            if (tls_input(cn, buf, (size_t)n) != 0)
                return;
            if ((size_t)n < sizeof(buf))
                return;
            continue;
        }
        ssize_t r = nghttp2_session_mem_recv(cn->sess, buf, (size_t)n);
        if (r < 0) {
            conn_fail(cn, nghttp2_strerror((int)r));
            return;
        }
        if ((size_t)n < sizeof(buf))
            return;
    }
}

static void on_connected(struct qc_conn *cn)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(cn->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        conn_fail(cn, strerror(err));
        return;
    }
    if (cn->c->eps[cn->ep].tls)
        tls_start(cn);
    else
        tcp_up(cn);
}

static void shutdown_all(qc_client *c)
{
    fail_pending(c, QC_ECLOSED, QC_CANCELLED, "grpc: the client connection is closing");
    for (struct qc_conn *cn = c->conns; cn; cn = cn->next) {
        struct qc_stream *s;
        while ((s = cn->streams)) {
            conn_detach(s);
            if (cn->sess)
                nghttp2_session_set_stream_user_data(cn->sess, s->id, NULL);
            finish(s, QC_ECLOSED, QC_CANCELLED, "grpc: the client connection is closing");
            s->state = S_DONE;
            stream_unref(s);
        }
        cn->dead = 1;
    }
    reap_conns(c);
    c->cur = NULL;
    struct qc_stream *s;
    while ((s = c->dirty)) {
        c->dirty = s->dnext;
        s->in_dirty = 0;
        stream_unref(s);
    }
    if (c->want_connect) {
        c->want_connect = 0;
        c->connect_result = QC_ECLOSED;
        pthread_cond_broadcast(&c->cv);
    }
}

static void *io_main(void *arg)
{
    qc_client *c = arg;
    struct pollfd pfd[MAX_CONNS + 2];
    struct qc_conn *pc[MAX_CONNS + 2];
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        process_dirty(c);
        while (!c->cur && (c->pending || c->want_connect) && !c->stop)
            start_dial(c);
        submit_pending(c);
        for (struct qc_conn *cn = c->conns; cn; cn = cn->next)
            if (cn->state != C_CONNECTING)
                flush(cn);
        reap_conns(c);

        /* too many draining connections: drop the oldest */
        size_t nconn = 0;
        for (struct qc_conn *cn = c->conns; cn; cn = cn->next)
            nconn++;
        if (nconn > MAX_CONNS) {
            struct qc_conn *last = c->conns;
            while (last->next)
                last = last->next;
            conn_fail(last, "too many draining connections");
            reap_conns(c);
        }

        size_t np = 0;
        pfd[np] = (struct pollfd){.fd = c->wake_rd, .events = POLLIN};
        pc[np++] = NULL;
        int64_t now = now_ms(), next = -1;
        for (struct qc_conn *cn = c->conns; cn && np < MAX_CONNS + 2; cn = cn->next) {
            short ev = 0;
            if (cn->state == C_CONNECTING)
                ev = POLLOUT;
            else if (cn->state == C_TLS)
                ev = POLLIN | (tls_backlog(cn) ? POLLOUT : 0);
            else
                ev = POLLIN | (nghttp2_session_want_write(cn->sess) || (cn->ssl && tls_backlog(cn))
                                   ? POLLOUT
                                   : 0);
            if (cn->state != C_READY) {
                int64_t left = cn->dial_deadline - now;
                if (left < 0)
                    left = 0;
                if (next < 0 || left < next)
                    next = left;
            }
            pfd[np] = (struct pollfd){.fd = cn->fd, .events = ev};
            pc[np++] = cn;
        }
        c->wake_pending = 0;
        pthread_mutex_unlock(&c->mu);
        int n = poll(pfd, np, next < 0 ? -1 : (int)(next > 60000 ? 60000 : next));
        pthread_mutex_lock(&c->mu);
        if (n < 0)
            continue;
        if (pfd[0].revents) {
            char b[256];
            while (read(c->wake_rd, b, sizeof(b)) > 0) {
            }
        }
        for (size_t i = 1; i < np; i++) {
            struct qc_conn *cn = pc[i];
            if (cn->dead || !pfd[i].revents)
                continue;
            if (cn->state == C_CONNECTING) {
                on_connected(cn);
                continue;
            }
            if (cn->ssl && (pfd[i].revents & POLLOUT) && tls_backlog(cn)) {
                int fr = tls_flush(cn);
                if (fr != 0) {
                    conn_fail(cn, strerror(-fr));
                    continue;
                }
            }
            if (pfd[i].revents & (POLLIN | POLLERR | POLLHUP))
                on_readable(cn);
        }
        now = now_ms();
        for (struct qc_conn *cn = c->conns; cn; cn = cn->next)
            if (!cn->dead && cn->state != C_READY && now >= cn->dial_deadline)
                conn_fail(cn,
                          cn->state == C_CONNECTING ? "dial timeout"
                          : cn->state == C_TLS      ? "TLS handshake timeout"
                                                    : "HTTP/2 handshake timeout");
        reap_conns(c);
    }
    shutdown_all(c);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- client ---- */

static void client_destroy(qc_client *c)
{
    for (size_t i = 0; i < c->n_eps; i++) {
        free(c->eps[i].given);
        free(c->eps[i].host);
        free(c->eps[i].port);
        free(c->eps[i].authority);
    }
    free(c->eps);
    if (c->wake_rd >= 0)
        close(c->wake_rd);
    if (c->wake_wr >= 0)
        close(c->wake_wr);
    if (c->cbs)
        nghttp2_session_callbacks_del(c->cbs);
    if (c->h2opt)
        nghttp2_option_del(c->h2opt);
    if (c->ssl_ctx)
        SSL_CTX_free(c->ssl_ctx);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->user);
    if (c->password != NULL) {
        explicit_bzero(c->password, strlen(c->password));
        free(c->password);
    }
    free(c->token);
    free(c);
}

/* parse_endpoint splits "[http[s]://]host:port"; without a scheme the
 * endpoint uses TLS when |tls| (a TLS option was given, as etcdctl) */
static int parse_endpoint(const char *given, struct qc_endpoint *e, int tls)
{
    const char *p = given;
    e->tls = tls;
    if (strncmp(p, "http://", 7) == 0) {
        p += 7;
        e->tls = 0;
    } else if (strncmp(p, "https://", 8) == 0) {
        p += 8;
        e->tls = 1;
    } else if (strncmp(p, "unix://", 7) == 0 || strncmp(p, "unixs://", 8) == 0) {
        /* etcd's unix sockets: the path is everything after the scheme */
        e->tls = p[4] == 's';
        e->unix_sock = 1;
        p += e->tls ? 8 : 7;
        if (*p == '\0' || strlen(p) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return -EINVAL;
        e->given = strdup(given);
        e->host = strdup(p);
        e->port = strdup("");
        e->authority = strdup("localhost");
        if (!e->given || !e->host || !e->port || !e->authority)
            return -ENOMEM;
        return 0;
    } else if (strstr(p, "://")) {
        return -EINVAL;
    }
    size_t len = strlen(p);
    while (len > 0 && p[len - 1] == '/')
        len--;
    const char *host = p, *hend, *port;
    if (*p == '[') {
        hend = memchr(p, ']', len);
        if (!hend || hend + 1 >= p + len || hend[1] != ':')
            return -EINVAL;
        host = p + 1;
        port = hend + 2;
    } else {
        const char *colon = NULL;
        for (const char *q = p; q < p + len; q++)
            if (*q == ':')
                colon = q;
        if (!colon)
            return -EINVAL;
        hend = colon;
        port = colon + 1;
    }
    size_t plen = (size_t)(p + len - port);
    if (hend == host || plen == 0 || plen > 5)
        return -EINVAL;
    for (size_t i = 0; i < plen; i++)
        if (port[i] < '0' || port[i] > '9')
            return -EINVAL;
    e->given = strdup(given);
    e->host = strndup(host, (size_t)(hend - host));
    e->port = strndup(port, plen);
    e->authority = strndup(p, len);
    if (!e->given || !e->host || !e->port || !e->authority)
        return -ENOMEM;
    return 0;
}

int qc_connect(const struct qc_options *o, qc_client **out, struct qc_status *st)
{
    *out = NULL;
    set_status(st, 0, "");
    if (!o || !o->endpoints || o->n_endpoints == 0) {
        set_status(st, QC_INVALID_ARGUMENT, "no endpoints");
        return -EINVAL;
    }
    if (o->max_recv_msg_size && o->max_recv_msg_size < ((size_t)64 << 20)) {
        set_status(st, QC_INVALID_ARGUMENT, "max_recv_msg_size must be at least 64 MiB");
        return -EINVAL;
    }
    qc_client *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->wake_rd = c->wake_wr = -1;
    c->refs = 1;
    c->debug = getenv("QC_DEBUG") != NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->dial_timeout_ms = o->dial_timeout_ms > 0 ? o->dial_timeout_ms : DEFAULT_DIAL_MS;
    c->call_timeout_ms = o->call_timeout_ms > 0   ? o->call_timeout_ms
                         : o->call_timeout_ms < 0 ? -1
                                                  : DEFAULT_CALL_MS;
    c->max_recv = o->max_recv_msg_size ? o->max_recv_msg_size : DEFAULT_MAX_MSG;
    c->max_send = o->max_send_msg_size ? o->max_send_msg_size : DEFAULT_MAX_MSG;
    c->stream_buffer = o->stream_buffer ? o->stream_buffer : DEFAULT_STREAM_BUF;
    if (c->stream_buffer > 0x7fffffff)
        c->stream_buffer = 0x7fffffff;
    if (c->stream_buffer < 65535)
        c->stream_buffer = 65535;

    int err = -ENOMEM;
    c->eps = calloc(o->n_endpoints, sizeof(*c->eps));
    if (!c->eps)
        goto fail;
    c->n_eps = o->n_endpoints;
    int want_tls = (o->ca_file && *o->ca_file) || (o->cert_file && *o->cert_file) ||
                   (o->key_file && *o->key_file) || o->insecure_skip_verify;
    int any_tls = 0;
    for (size_t i = 0; i < o->n_endpoints; i++) {
        err = o->endpoints[i] ? parse_endpoint(o->endpoints[i], &c->eps[i], want_tls) : -EINVAL;
        if (!err)
            any_tls |= c->eps[i].tls;
        if (err) {
            char m[200];
            snprintf(m, sizeof(m), "bad endpoint \"%.150s\"",
                     o->endpoints[i] ? o->endpoints[i] : "(null)");
            set_status(st, err == -EINVAL ? QC_INVALID_ARGUMENT : QC_RESOURCE_EXHAUSTED, m);
            goto fail;
        }
    }
    if (any_tls && (err = build_ssl_ctx(c, o, st)) != 0) {
        client_destroy(c);
        return err;
    }
    err = -ENOMEM;
    if (nghttp2_session_callbacks_new(&c->cbs) != 0 || nghttp2_option_new(&c->h2opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_send_callback(c->cbs, cb_send);
    nghttp2_session_callbacks_set_on_frame_send_callback(c->cbs, cb_frame_send);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c->cbs, cb_frame_recv);
    nghttp2_session_callbacks_set_on_header_callback(c->cbs, cb_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c->cbs, cb_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c->cbs, cb_stream_close);
    nghttp2_option_set_no_auto_window_update(c->h2opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(c->h2opt, 100);

    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) {
        err = -errno;
        goto fail;
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];

    c->want_connect = 1;
    if (pthread_create(&c->thread, NULL, io_main, c) != 0) {
        err = -EAGAIN;
        goto fail;
    }
    c->thread_started = 1;
    pthread_mutex_lock(&c->mu);
    while (c->want_connect)
        pthread_cond_wait(&c->cv, &c->mu);
    int res = c->connect_result;
    char last[sizeof(c->last_err)];
    memcpy(last, c->last_err, sizeof(last));
    pthread_mutex_unlock(&c->mu);
    if (res != 1) {
        char m[256];
        snprintf(m, sizeof(m), "all endpoints unreachable; last error: %s", last);
        set_status(st, QC_UNAVAILABLE, m);
        qc_close(c);
        return QC_EUNAVAILABLE;
    }
    *out = c;
    return 0;
fail:
    if (err == -ENOMEM)
        set_status(st, QC_RESOURCE_EXHAUSTED, "out of memory");
    client_destroy(c);
    return err;
}

void qc_close(qc_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    wake(c);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        client_destroy(c);
}

const char *qc_endpoint(qc_client *c)
{
    pthread_mutex_lock(&c->mu);
    const char *e = c->cur && c->cur->state == C_READY ? c->eps[c->cur->ep].given : NULL;
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* ---- streams: the caller's side ---- */

static struct qc_stream *stream_new(qc_client *c, const char *method, int unary)
{
    struct qc_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->path = strdup(method);
    if (!s->path) {
        free(s);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->c = c;
    s->unary = unary;
    s->state = S_PENDING;
    return s;
}

/* pack_chunk packs |msg| with its gRPC prefix */
static int pack_chunk(qc_client *c, const ProtobufCMessage *msg, struct qc_chunk **out)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > c->max_send || n > 0xffffffffu)
        return -EMSGSIZE;
    struct qc_chunk *k = malloc(sizeof(*k) + 5 + n);
    if (!k)
        return -ENOMEM;
    k->next = NULL;
    k->off = 0;
    k->len = 5 + n;
    k->data[0] = 0;
    k->data[1] = (uint8_t)(n >> 24);
    k->data[2] = (uint8_t)(n >> 16);
    k->data[3] = (uint8_t)(n >> 8);
    k->data[4] = (uint8_t)n;
    protobuf_c_message_pack(msg, k->data + 5);
    *out = k;
    return 0;
}

static void queue_chunk(struct qc_stream *s, struct qc_chunk *k)
{
    if (s->sq_tail)
        s->sq_tail->next = k;
    else
        s->sq = k;
    s->sq_tail = k;
    s->sq_bytes += k->len;
}

/* start queues |s| for the I/O thread (c->mu held). Refs: user + I/O. */
static int start(qc_client *c, struct qc_stream *s)
{
    if (c->stop)
        return QC_ECLOSED;
    c->refs++;
    s->refs = 2;
    pending_push(c, s, 0);
    wake(c);
    return 0;
}

static void timespec_at(int64_t ms, struct timespec *ts)
{
    ts->tv_sec = ms / 1000;
    ts->tv_nsec = (long)(ms % 1000) * 1000000;
}

/* cancel_locked ends |s| locally and asks the I/O thread to reset it */
static void cancel_locked(struct qc_stream *s, int err, int code, const char *msg)
{
    finish(s, err, code, msg);
    if (!s->cancel) {
        s->cancel = 1;
        if (s->state != S_DONE)
            add_dirty(s);
    }
}

static int status_err(const struct qc_status *st, struct qc_status *out, int err)
{
    if (out)
        *out = *st;
    return err;
}

static int unary_once(qc_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                      int timeout_ms, struct qc_status *st, int no_token)
{
    *resp = NULL;
    set_status(st, 0, "");
    if (!method || !req || !resp_desc) {
        set_status(st, QC_INVALID_ARGUMENT, "missing argument");
        return -EINVAL;
    }
    struct qc_chunk *k;
    int err = pack_chunk(c, req, &k);
    if (err) {
        set_status(st, QC_RESOURCE_EXHAUSTED,
                   err == -EMSGSIZE ? "request message larger than max" : "out of memory");
        return err;
    }
    struct qc_stream *s = stream_new(c, method, 1);
    if (!s) {
        free(k);
        set_status(st, QC_RESOURCE_EXHAUSTED, "out of memory");
        return -ENOMEM;
    }
    queue_chunk(s, k);
    s->half_close = 1;
    s->no_token = no_token;
    if (timeout_ms == 0)
        timeout_ms = c->call_timeout_ms;
    if (timeout_ms > 0)
        s->deadline = now_ms() + timeout_ms;

    pthread_mutex_lock(&c->mu);
    err = start(c, s);
    if (err) {
        pthread_mutex_unlock(&c->mu);
        stream_destroy(s);
        set_status(st, QC_CANCELLED, "grpc: the client connection is closing");
        return err;
    }
    struct timespec ts;
    timespec_at(s->deadline, &ts);
    while (!s->done) {
        if (!s->deadline) {
            pthread_cond_wait(&s->cv, &c->mu);
        } else if (pthread_cond_timedwait(&s->cv, &c->mu, &ts) == ETIMEDOUT && !s->done) {
            cancel_locked(s, QC_ETIMEDOUT, QC_DEADLINE_EXCEEDED, "context deadline exceeded");
        }
    }
    err = s->err;
    struct qc_status fin = s->st;
    struct qc_msg *m = NULL;
    if (err == 0) {
        m = s->rq;
        if (m && m->next) {
            err = QC_EPROTO;
            set_status(&fin, QC_INTERNAL, "grpc: more than one response message");
        } else if (!m) {
            err = QC_EPROTO;
            set_status(&fin, QC_INTERNAL, "grpc: no response message");
        } else {
            s->rq = s->rq_tail = NULL; /* taken */
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (err == 0) {
        *resp = protobuf_c_message_unpack(resp_desc, NULL, m->len, m->data);
        if (!*resp) {
            err = QC_EPROTO;
            set_status(&fin, QC_INTERNAL, "grpc: failed to unmarshal the received message");
        }
    }
    free(m);
    pthread_mutex_lock(&c->mu);
    int last = stream_unref(s);
    pthread_mutex_unlock(&c->mu);
    if (last)
        client_destroy(c);
    return status_err(&fin, st, err);
}

/* reauthenticate: Authenticate with the stored credentials and keep the
 * token. */
static int reauthenticate(qc_client *c, struct qc_status *st)
{
    pthread_mutex_lock(&c->mu);
    char *user = c->user ? strdup(c->user) : NULL;
    char *pw = c->password ? strdup(c->password) : NULL;
    pthread_mutex_unlock(&c->mu);
    int err = -ENOMEM;
    if (user != NULL && pw != NULL) {
        Etcdserverpb__AuthenticateRequest r = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
        r.name = user;
        r.password = pw;
        Etcdserverpb__AuthenticateResponse *resp = NULL;
        /* without the old token: a stale one would refuse the login */
        err = unary_once(c, "/etcdserverpb.Auth/Authenticate", &r.base,
                         &etcdserverpb__authenticate_response__descriptor,
                         (ProtobufCMessage **)&resp, 0, st, 1);
        if (err == 0) {
            char *tok = strdup(resp->token);
            pthread_mutex_lock(&c->mu);
            free(c->token);
            c->token = tok;
            pthread_mutex_unlock(&c->mu);
            err = tok != NULL ? 0 : -ENOMEM;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    }
    free(user);
    if (pw != NULL) {
        explicit_bzero(pw, strlen(pw));
        free(pw);
    }
    return err;
}

int qc_authenticate(qc_client *c, const char *user, const char *password, struct qc_status *st)
{
    char *u = strdup(user), *p = strdup(password);
    if (u == NULL || p == NULL) {
        free(u);
        free(p);
        set_status(st, QC_RESOURCE_EXHAUSTED, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    free(c->user);
    if (c->password != NULL) {
        explicit_bzero(c->password, strlen(c->password));
        free(c->password);
    }
    c->user = u;
    c->password = p;
    pthread_mutex_unlock(&c->mu);
    return reauthenticate(c, st);
}

int qc_set_token(qc_client *c, const char *token)
{
    char *t = token != NULL ? strdup(token) : NULL;
    if (token != NULL && t == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&c->mu);
    free(c->token);
    c->token = t;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* a token that expired (simple tokens after --auth-token-ttl idle, jwt at
 * "exp") or predates an auth change: worth one new Authenticate */
static bool token_stale(const struct qc_status *st)
{
    return (st->code == QC_UNAUTHENTICATED &&
            strcmp(st->message, "etcdserver: invalid auth token") == 0) ||
           (st->code == QC_INVALID_ARGUMENT &&
            strcmp(st->message, "etcdserver: revision of auth store is old") == 0);
}

int qc_unary_timeout(qc_client *c, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                     int timeout_ms, struct qc_status *st)
{
    struct qc_status mine;
    if (st == NULL)
        st = &mine;
    int err = unary_once(c, method, req, resp_desc, resp, timeout_ms, st, 0);
    if (err == 0 || !token_stale(st))
        return err;
    pthread_mutex_lock(&c->mu);
    bool can = c->user != NULL;
    pthread_mutex_unlock(&c->mu);
    struct qc_status ast;
    if (!can || reauthenticate(c, &ast) != 0)
        return err;
    return unary_once(c, method, req, resp_desc, resp, timeout_ms, st, 0);
}

int qc_unary(qc_client *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
             struct qc_status *st)
{
    return qc_unary_timeout(c, method, req, resp_desc, resp, 0, st);
}

int qc_stream_open(qc_client *c, const char *method, qc_stream **out)
{
    *out = NULL;
    if (!method || method[0] != '/')
        return -EINVAL;
    struct qc_stream *s = stream_new(c, method, 0);
    if (!s)
        return -ENOMEM;
    pthread_mutex_lock(&c->mu);
    int err = start(c, s);
    pthread_mutex_unlock(&c->mu);
    if (err) {
        stream_destroy(s);
        return err;
    }
    *out = s;
    return 0;
}

int qc_stream_send(qc_stream *s, const ProtobufCMessage *msg)
{
    qc_client *c = s->c;
    struct qc_chunk *k;
    int err = pack_chunk(c, msg, &k);
    if (err)
        return err;
    pthread_mutex_lock(&c->mu);
    if (s->done || s->half_close || s->cancel) {
        err = s->done && s->err != 0 && s->err != QC_ESTATUS ? s->err : QC_ECLOSED;
        pthread_mutex_unlock(&c->mu);
        free(k);
        return err;
    }
    queue_chunk(s, k);
    if (s->state == S_OPEN)
        add_dirty(s);
    while (s->sq_bytes > c->stream_buffer && !s->done)
        pthread_cond_wait(&s->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int qc_stream_close_send(qc_stream *s)
{
    qc_client *c = s->c;
    pthread_mutex_lock(&c->mu);
    if (!s->half_close) {
        s->half_close = 1;
        if (s->state == S_OPEN)
            add_dirty(s);
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int qc_stream_recv(qc_stream *s, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                   int timeout_ms, struct qc_status *st)
{
    qc_client *c = s->c;
    *out = NULL;
    struct timespec ts;
    if (timeout_ms > 0)
        timespec_at(now_ms() + timeout_ms, &ts);
    pthread_mutex_lock(&c->mu);
    while (!s->rq && !s->done) {
        if (timeout_ms == 0)
            break;
        if (timeout_ms < 0)
            pthread_cond_wait(&s->cv, &c->mu);
        else if (pthread_cond_timedwait(&s->cv, &c->mu, &ts) == ETIMEDOUT)
            break;
    }
    struct qc_msg *m = s->rq;
    if (m) {
        s->rq = m->next;
        if (!s->rq)
            s->rq_tail = NULL;
        s->rq_bytes -= m->len + 5;
        if (s->unconsumed && s->rq_bytes < c->stream_buffer && s->state == S_OPEN)
            add_dirty(s);
        pthread_mutex_unlock(&c->mu);
        *out = protobuf_c_message_unpack(desc, NULL, m->len, m->data);
        free(m);
        if (!*out) {
            set_status(st, QC_INTERNAL, "grpc: failed to unmarshal the received message");
            return QC_EPROTO;
        }
        set_status(st, 0, "");
        return 0;
    }
    int r;
    if (!s->done) {
        set_status(st, QC_DEADLINE_EXCEEDED, "no message within the timeout");
        r = QC_ETIMEDOUT;
    } else {
        if (st)
            *st = s->st;
        r = s->err == 0 || s->err == QC_ESTATUS ? 1 : s->err;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

void qc_stream_free(qc_stream *s)
{
    if (!s)
        return;
    qc_client *c = s->c;
    pthread_mutex_lock(&c->mu);
    if (!s->done)
        cancel_locked(s, QC_ECLOSED, QC_CANCELLED, "context canceled");
    int last = stream_unref(s);
    pthread_mutex_unlock(&c->mu);
    if (last)
        client_destroy(c);
}

size_t qc__stream_peak_buffered(qc_stream *s)
{
    pthread_mutex_lock(&s->c->mu);
    size_t n = s->rq_peak;
    pthread_mutex_unlock(&s->c->mu);
    return n;
}
