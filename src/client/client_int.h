/* client/client_int.h: what the files of src/client share (not public).
 *
 * Locking: one mutex per client (c->mu) guards everything below: the
 * connection list, the pending and dirty lists, and every stream field.
 * The I/O thread holds it while it runs nghttp2 (callbacks included) and
 * drops it only around poll(); callers hold it to queue work and wait on
 * their stream's condition variable. */
#ifndef QUORUM_CLIENT_CLIENT_INT_H
#define QUORUM_CLIENT_CLIENT_INT_H

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <pthread.h>

#include "quorum/client.h"

/* one received message (payload only, no 5-byte prefix) */
struct qc_msg {
    struct qc_msg *next;
    size_t len;
    uint8_t data[];
};

/* one queued request message (with its prefix) */
struct qc_chunk {
    struct qc_chunk *next;
    size_t len, off;
    uint8_t data[];
};

enum { S_PENDING, S_OPEN, S_DONE };
enum { C_CONNECTING, C_TLS, C_HANDSHAKE, C_READY };

struct qc_conn;

struct qc_stream {
    qc_client *c;
    char *path;
    int unary;        /* consume input at once; one response */
    int no_token;     /* sent without the client's token (Authenticate) */
    int64_t deadline; /* ms, monotonic; 0 = none (grpc-timeout) */
    int state;        /* S_* */
    int refs;         /* user, I/O side (pending or on a conn), dirty list */
    struct qc_conn *conn;
    int32_t id;
    struct qc_stream *pnext;         /* pending list */
    struct qc_stream *cnext, *cprev; /* conn's stream list */
    struct qc_stream *dnext;         /* dirty list */
    int in_dirty, on_pending;
    int sent;     /* HEADERS written to a socket */
    int attempts; /* submissions so far */
    int cancel, rst_sent;
    /* send side */
    struct qc_chunk *sq, *sq_tail;
    size_t sq_bytes;
    int half_close, deferred;
    /* receive side: gRPC message decoder */
    uint8_t hdr[5];
    size_t hdr_have;
    struct qc_msg *cur; /* message being assembled */
    size_t cur_have;
    struct qc_msg *rq, *rq_tail; /* complete messages not yet taken */
    size_t rq_bytes;
    size_t rq_peak;    /* largest rq_bytes seen (tests check the bound) */
    size_t unconsumed; /* stream-level bytes not yet given back to the window */
    int http_status, got_grpc_status;
    struct qc_status srv; /* grpc-status / grpc-message as received */
    /* outcome */
    int done;
    int err; /* 0: ended with OK; QC_ESTATUS: ended with srv; other: failed */
    struct qc_status st;
    pthread_cond_t cv;
};

struct qc_endpoint {
    char *given; /* as in the options */
    char *host;  /* without brackets */
    char *port;
    char *authority; /* host:port for :authority */
    int tls;         /* dial with TLS */
    int unix_sock;   /* unix:// or unixs://: |host| is the socket's path */
};

struct qc_conn {
    struct qc_conn *next;
    qc_client *c;
    int fd;
    int ep;
    int state; /* C_* */
    int64_t dial_deadline;
    nghttp2_session *sess;
    /* TLS: OpenSSL on memory BIOs; ciphertext not yet sent in tout */
    SSL *ssl;
    BIO *rbio, *wbio;
    uint8_t *tout;
    size_t tout_len, tout_off, tout_cap;
    int draining, dead;
    struct qc_stream *streams;
    size_t nstreams;
};

struct qc_client {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* qc_connect waits here */
    pthread_t thread;
    int thread_started;
    int wake_rd, wake_wr, wake_pending;
    struct qc_endpoint *eps;
    size_t n_eps;
    int dial_timeout_ms, call_timeout_ms;
    size_t max_recv, max_send, stream_buffer;
    int stop;
    int debug; /* QC_DEBUG set: log resets and GOAWAYs to stderr */
    int refs;  /* the user's (until qc_close) + one per live stream */
    struct qc_conn *conns;
    struct qc_conn *cur; /* the connection new calls go to (any state) */
    int next_ep;
    size_t fail_streak;
    char last_err[160];
    int want_connect, connect_result;
    struct qc_stream *pending, *pending_tail;
    struct qc_stream *dirty;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *h2opt;
    SSL_CTX *ssl_ctx; /* NULL: no endpoint uses TLS */
    /* qc_authenticate: the credentials, and the token every call carries */
    char *user, *password, *token;
};

/* qc__stream_peak_buffered returns the most bytes of received, untaken
 * messages |s| ever held (for tests of the flow-control bound). */
size_t qc__stream_peak_buffered(qc_stream *s);

#endif
