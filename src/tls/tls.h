/* tls/tls.h: TLS with OpenSSL for every link (the client port, the peer
 * listener and outgoing peer links, the C client library), the way etcd
 * 3.4 configures Go's crypto/tls.
 *
 * Three layers:
 *
 * 1. CONTEXTS (struct tls_ctx). One per role: the client port's server
 *    side, the peer listener's server side, the peer dialer's client side,
 *    a client library connection's client side. A context is built from
 *    certificate, key, CA and CRL files (or a self-signed certificate made
 *    here: --auto-tls), holds the current OpenSSL SSL_CTX and may be shared
 *    by any number of threads (the front loops). It can be reloaded: on
 *    tls_request_reload (the server's SIGHUP) or when one of its files
 *    changed (mtime or size; checked at most once a second, when the
 *    context starts a connection) a new SSL_CTX is built for connections
 *    started afterwards. Connections keep the SSL_CTX they started with
 *    (OpenSSL counts references), so a reload never disturbs them; a
 *    reload that fails (a half-written file) is logged and the old
 *    SSL_CTX stays.
 *
 *    etcd's rules, copied: a server context asks for and verifies a client
 *    certificate when client_cert_auth is set or a trusted CA file is given
 *    (Go's RequireAndVerifyClientCert); TLS 1.2 is the minimum; cipher
 *    suites are given with Go's names (--cipher-suites) and apply to TLS
 *    1.2 (TLS 1.3 keeps its own, as in Go); an unknown name is the start-up
 *    error "unexpected TLS cipher suite \"X\"". A context with allowed_cn
 *    refuses a peer certificate whose common name differs
 *    (--peer-cert-allowed-cn; etcd checks it on both sides of a link). With ALPN "h2" (the client port) the server
 *    selects h2 when offered.
 *
 * 2. CONNECTIONS (tls_conn): one OpenSSL SSL on a pair of memory BIOs, so
 *    it runs on any transport: ciphertext in (tls_conn_feed), plaintext out
 *    (tls_conn_read), plaintext in (tls_conn_write; buffered while the
 *    handshake runs), ciphertext out (tls_conn_take_output). It never
 *    touches a socket and never blocks. Errors carry a text for the log
 *    (tls_conn_error). After the handshake the verified peer certificate's
 *    common name is tls_conn_peer_cn.
 *
 * 3. STREAMS (struct tls_stream, tls_uv.c): a tls_conn on a libuv stream
 *    with libuv's own calling conventions (read_start with alloc and read
 *    callbacks, write requests with a completion callback, close), so code
 *    written for a uv_tcp_t gets TLS by calling tls_stream_* instead of
 *    uv_*. Without a tls_conn the calls go straight to libuv.
 *
 * THREADING: contexts may be used from any thread. A connection or stream
 * belongs to one thread (its loop's).
 *
 * ERRORS: 0 or a negative errno; functions that can fail for a reason a
 * person must read take |err|/|errlen| and write one line there.
 */
#ifndef QUORUM_TLS_TLS_H
#define QUORUM_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "base/buf.h"

enum tls_role { TLS_SERVER, TLS_CLIENT };

struct tls_config {
    enum tls_role role;
    const char *cert_file; /* PEM; NULL/"" with auto_tls, or a client without a cert */
    const char *key_file;
    const char *ca_file;   /* PEM bundle of trusted CAs; NULL: none (a client then
                              uses the system's default paths) */
    const char *crl_file;  /* PEM CRL; NULL: none */
    /* server: require a client certificate signed by ca_file (etcd's
     * --client-cert-auth; a ca_file alone implies it, as in etcd) */
    bool client_cert_auth;
    /* --auto-tls: make (or reuse) a self-signed certificate and key in
     * auto_dir (cert.pem, key.pem), valid for auto_hosts (comma-separated
     * IPs or names, e.g. the listen URLs' hosts). A client context with
     * auto_tls does not verify the server (etcd's peers do the same). */
    bool auto_tls;
    const char *auto_dir;
    const char *auto_hosts;
    /* client: do not verify the server's certificate
     * (--insecure-skip-tls-verify) */
    bool insecure_skip_verify;
    const char *cipher_suites; /* Go names, comma-separated; NULL/"": defaults */
    const char *alpn;          /* "h2" or NULL */
    const char *allowed_cn;    /* the peer's certificate's CN must be this (both roles) */
    const char *label;         /* for log lines: "client", "peer", ... */
};

typedef struct tls_ctx tls_ctx;
typedef struct tls_conn tls_conn;

/* tls_ctx_new builds a context from |cfg| (strings are copied). Errors:
 * -EINVAL with a reason in |err| (unreadable or mismatched files, unknown
 * cipher suite, ...), -ENOMEM. */
int tls_ctx_new(const struct tls_config *cfg, tls_ctx **out, char *err, size_t errlen);

/* tls_ctx_free drops the context; connections started from it keep
 * their SSL_CTX until they are freed. */
void tls_ctx_free(tls_ctx *ctx);

/* tls_ctx_reload builds a new SSL_CTX from the files now. On failure the
 * old one stays and |err| says why. */
int tls_ctx_reload(tls_ctx *ctx, char *err, size_t errlen);

/* tls_ctx_generation counts successful reloads (tests). */
unsigned tls_ctx_generation(tls_ctx *ctx);

/* tls_request_reload asks every context to reload before its next
 * connection. Async-signal-safe. */
void tls_request_reload(void);

/* tls_install_sighup makes SIGHUP call tls_request_reload (sigaction; a
 * flag set in the handler, nothing else). */
int tls_install_sighup(void);

/* tls_cipher_openssl_name maps one of Go's cipher suite names (as etcd's
 * --cipher-suites takes them) to OpenSSL's, or NULL if unknown. */
const char *tls_cipher_openssl_name(const char *go_name);

/* tls_cn_from_der writes the subject common name of the DER certificate
 * |der| (|len| bytes) to |out| (|cap| bytes, NUL-terminated, UTF-8).
 * Errors: -EINVAL (not a certificate, no CN, a NUL inside), -ENOSPC. */
int tls_cn_from_der(const uint8_t *der, size_t len, char *out, size_t cap);

/* tls_make_self_signed writes a new self-signed ECDSA P-256 certificate
 * (one year, SANs from |hosts|: comma-separated IPs or DNS names) and its
 * key to |cert_path| and |key_path| (0600). */
int tls_make_self_signed(const char *cert_path, const char *key_path, const char *hosts, char *err,
                         size_t errlen);

/* ---- connections ---- */

/* tls_conn_new starts a connection on |ctx|'s current SSL_CTX (the
 * context first reloads if a reload is due). |server_name| (client role;
 * may be NULL) is checked against the server certificate (an IP address
 * against its IP SANs, a name against DNS SANs, and sent as SNI). */
int tls_conn_new(tls_ctx *ctx, const char *server_name, tls_conn **out);
void tls_conn_free(tls_conn *c);

/* Results of tls_conn_read / tls_conn_handshake besides a byte count. */
enum {
    TLS_WANT = -1001,   /* nothing yet: feed more ciphertext */
    TLS_EOF = -1002,    /* the peer closed the TLS session (close_notify) */
    TLS_FAILED = -1003, /* handshake or record error: tls_conn_error says why */
};

/* tls_conn_feed hands |n| bytes of ciphertext from the peer. */
int tls_conn_feed(tls_conn *c, const void *p, size_t n);

/* tls_conn_handshake drives the handshake with what was fed: 1 done, 0
 * in progress (send the output, feed more), TLS_FAILED. */
int tls_conn_handshake(tls_conn *c);

/* tls_conn_read decrypts up to |cap| bytes into |dst|: a count > 0,
 * TLS_WANT, TLS_EOF or TLS_FAILED. Runs the handshake first if needed. */
ssize_t tls_conn_read(tls_conn *c, void *dst, size_t cap);

/* tls_conn_write encrypts |n| bytes (or keeps them until the handshake is
 * done). Errors: TLS_FAILED, -ENOMEM. */
int tls_conn_write(tls_conn *c, const void *p, size_t n);

/* tls_conn_take_output appends the ciphertext waiting to be sent to |out|
 * and returns how many bytes it appended (or -ENOMEM). */
ssize_t tls_conn_take_output(tls_conn *c, struct buf *out);

/* tls_conn_output_size is how much ciphertext waits to be sent;
 * tls_conn_read_output moves up to |n| bytes of it to |dst| and returns
 * how many (no intermediate buffer). */
size_t tls_conn_output_size(const tls_conn *c);
size_t tls_conn_read_output(tls_conn *c, void *dst, size_t n);

/* tls_conn_done tells whether the handshake completed. */
bool tls_conn_done(const tls_conn *c);

/* tls_conn_error is the reason of the last TLS_FAILED ("" if none). */
const char *tls_conn_error(const tls_conn *c);

/* tls_conn_is_server tells whether |c| is the accepting side;
 * tls_conn_server_name is the name the client asked for (SNI; "" if none). */
bool tls_conn_is_server(const tls_conn *c);
const char *tls_conn_server_name(const tls_conn *c);

/* tls_conn_peer_cn is the common name of the peer's certificate once the
 * handshake completed and the certificate was verified, else NULL. */
const char *tls_conn_peer_cn(const tls_conn *c);

/* tls_conn_peer_subject writes the verified peer certificate's subject
 * in RFC 2253 form ("CN=root,O=example", as Java's X500Principal names
 * it) into |out|. Errors: -ENOENT (no verified certificate),
 * -ENAMETOOLONG, -ENOMEM. */
int tls_conn_peer_subject(const tls_conn *c, char *out, size_t cap);

/* tls_conn_alpn is the protocol selected by ALPN ("h2"), or "". */
const char *tls_conn_alpn(const tls_conn *c);

/* ---- libuv streams (tls_uv.c) ----
 *
 * struct tls_stream holds a uv_tcp_t (ts->tcp; or a uv_pipe_t, ts->pipe,
 * for a unix socket) in place of the caller's own; the caller accepts into it or connects it and sets its data as
 * before. The callbacks get that handle, as they would from libuv, so
 * handle->data works as before. With TLS:
 *  - reading: ciphertext is read from the handle and fed to the
 *    connection; plaintext goes to the caller's alloc/read callbacks, as
 *    much per buffer as fits. tls_stream_read_stop stops delivery at once
 *    (and reading from the socket); read_start resumes it, delivering what
 *    was already decrypted from the next loop pass, never from inside
 *    read_start. Read errors: UV_EOF at the end, UV_EPROTO when TLS failed
 *    (the reason was logged: "<label> TLS handshake with <addr> failed:
 *    <why>"), or the socket's error.
 *  - writing: the plaintext is encrypted at once (the caller's buffers
 *    are free when tls_stream_write returns) and written in order; the
 *    callback runs when the ciphertext was written. Writes made before the
 *    handshake completed are sent when it does (their callbacks may run
 *    earlier, once their bytes are in the connection's buffer).
 *  - a failed handshake sends its alert before the read error is reported.
 *  - closing: tls_stream_close closes the handle (and the stream's own
 *    idle and timer handles) and then calls |cb| with the wrapped handle; pending
 *    write callbacks run with UV_ECANCELED before it, as libuv does. */
struct tls_stream {
    union { /* the socket (its data is the caller's): TCP or a unix socket */
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    };
    uv_stream_t *s; /* &tcp or &pipe */
    tls_conn *conn; /* NULL: plaintext, straight to libuv */
    uv_idle_t idle; /* TLS: delivers decrypted bytes after read_start */
    uv_timer_t hs_timer; /* TLS: tls_stream_set_handshake_timeout */
    unsigned hs_timeout_ms;
    uv_alloc_cb alloc_cb;
    uv_read_cb read_cb;
    uv_close_cb close_cb;
    struct buf pt;  /* decrypted, not yet delivered */
    int pending_err; /* read error to report once delivered data is out */
    int closing_handles;
    bool reading;      /* the caller wants data */
    bool sock_reading; /* uv_read_start is active on the handle */
    bool idle_on;
    bool closing;
    bool hs_logged;
    bool got_bytes; /* anything came from the peer */
    bool eof;
    char label[96];
};

/* tls_stream_init initializes |ts| and its socket handle ts->tcp
 * (uv_tcp_init on |loop|: accept into it, open an fd on it or connect it)
 * with connection |conn| (the stream owns it from now, also on error;
 * NULL: plaintext) and |label| for log lines ("client"). Errors: libuv's
 * (then nothing needs closing). */
int tls_stream_init(struct tls_stream *ts, uv_loop_t *loop, tls_conn *conn, const char *label);

/* tls_stream_init_pipe is tls_stream_init for a unix socket: ts->pipe
 * (uv_pipe_init) in place of ts->tcp. */
int tls_stream_init_pipe(struct tls_stream *ts, uv_loop_t *loop, tls_conn *conn,
                         const char *label);

/* tls_stream_set_label changes the label of the log lines. */
void tls_stream_set_label(struct tls_stream *ts, const char *label);

/* tls_stream_set_handshake_timeout: a TLS handshake not completed |ms|
 * after this call fails: logged ("... not completed within N ms") and
 * UV_ETIMEDOUT to the reader (a client that sends half a hello and
 * waits). No-op without TLS. */
void tls_stream_set_handshake_timeout(struct tls_stream *ts, unsigned ms);

/* tls_stream_start (TLS, client role) sends the ClientHello now; it is
 * also sent by the first write or read_start. */
int tls_stream_start(struct tls_stream *ts);

int tls_stream_read_start(struct tls_stream *ts, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
int tls_stream_read_stop(struct tls_stream *ts);
int tls_stream_write(struct tls_stream *ts, uv_write_t *req, const uv_buf_t bufs[], unsigned n,
                     uv_write_cb cb);

/* tls_stream_write_queue_size is the ciphertext (or plaintext) not yet
 * written to the socket (uv_stream_get_write_queue_size). */
size_t tls_stream_write_queue_size(const struct tls_stream *ts);

/* tls_stream_close closes the handle; |cb| gets the handle when every
 * handle of the stream is closed; the stream's memory (connection,
 * buffers) is released before |cb|. */
void tls_stream_close(struct tls_stream *ts, uv_close_cb cb);

/* tls_stream_peer_cn: tls_conn_peer_cn of the stream's connection, or
 * NULL (plaintext). */
const char *tls_stream_peer_cn(const struct tls_stream *ts);

#endif
