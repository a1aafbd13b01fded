/* grpc/grpc.h: gRPC server over HTTP/2, cleartext (h2c with prior
 * knowledge, as etcd serves an http:// client URL) or over TLS (an https://
 * URL; tls/ does the handshake), nghttp2 on libuv TCP.
 *
 * This module moves bytes: it frames and unframes gRPC messages (the 5-byte
 * length prefix), answers HTTP/2, and reports events through the method
 * table. It never decodes protobuf; server/ does.
 *
 * Threading: everything runs on the loop thread passed to grpc_server_new.
 *
 * Life cycle of a call (one HTTP/2 stream), in the manner of libuv handles:
 *   on_message*  ->  (server calls grpc_call_send*, then grpc_call_finish)
 *   on_close, exactly once, last. After on_close returns the grpc_call
 *   pointer is invalid; before it, it stays valid even after
 *   grpc_call_finish (sending is then a no-op returning -EPIPE).
 * on_close also comes when the peer resets the stream or the connection
 * drops: a server that answers later (after a disk sync, after Raft commits)
 * must forget the call in on_close. on_close comes for every call whose
 * method was found, even one that never got an on_message (the client reset
 * it first); requests answered by the grpc layer itself (below) never reach
 * the method table and get no callbacks.
 *
 * Answered by the grpc layer itself, with grpc-go's statuses and texts:
 *   :method not POST         HTTP 405, INTERNAL
 *   content-type not gRPC    HTTP 415, INVALID_ARGUMENT
 *                            "invalid gRPC request content-type \"...\""
 *   unknown path             UNIMPLEMENTED "unknown service S" /
 *                            "unknown method M for service S" /
 *                            "malformed method name: \"...\""
 *   grpc-encoding not identity  UNIMPLEMENTED
 *                            "grpc: Decompressor is not installed for ..."
 *   message > max_recv       RESOURCE_EXHAUSTED "grpc: received message
 *                            larger than max (N vs. M)"
 *   compressed flag 1        INTERNAL "grpc: compressed flag set with
 *                            identity or empty encoding" (no encoding is
 *                            supported); other flag values: INTERNAL
 *                            "grpc: received unexpected payload format N"
 *   stream ends mid-message  INTERNAL "unexpected EOF"
 *   unary / server-streaming call with no message or a second message:
 *                            INTERNAL
 *   more than 256 MiB held in partly received messages on one connection:
 *                            RESOURCE_EXHAUSTED for the call that crosses it
 * Input is consumed as it is processed (nghttp2's automatic WINDOW_UPDATE
 * after each DATA chunk is decoded); only a message split across chunks is
 * gathered, bounded by max_recv_msg_size per call and the limit above per
 * connection. Our SETTINGS: initial stream window 1 MiB, connection window
 * 16 MiB, max_concurrent_streams as configured. Keepalive PINGs both ways
 * as grpc-go's server (options below).
 * An HTTP/2 connection error (bad preface, bad frame) sends GOAWAY and
 * closes that connection only. When our side of a stream has ended and the
 * client is still sending, the stream is reset with NO_ERROR (as grpc-go
 * does) so on_close comes without waiting for the client.
 *
 * When output is written: grpc_call_send / grpc_call_finish only queue. A
 * uv_prepare handle (it runs once per loop pass, right before the loop
 * blocks for I/O) serializes every connection that has new frames and
 * issues one uv_write per connection (up to 1 MiB; the rest follows as soon
 * as that write completes). While a connection's write is in flight its
 * calls' output stays queued (grpc_call_pending_bytes). Reading from a
 * connection pauses while more than 64 KiB of a write could not go into
 * the socket, so a client that stops reading cannot make the server buffer
 * its requests or their answers.
 *
 * Metrics (base/metrics.h): each method's calls started, handled (by
 * code; a call that ends without a status counts as Canceled), messages
 * received and sent, as go-grpc-prometheus counts them for etcd, and the
 * request and response bytes (etcd_network_client_grpc_*); with
 * handling_seconds, the time from start to status. Local calls count as
 * calls (etcd's gateway is a gRPC client), unless their ops are
 * unmetered. Registered when a server is made, for its method table.
 *
 * Caveats: grpc_server_close may be called from any callback (a second
 * call is ignored). Request metadata is kept for the first 64 non-pseudo
 * headers of a request only. grpc-timeout is not enforced (the server's
 * own request timeout applies).
 */
#ifndef QUORUM_GRPC_GRPC_H
#define QUORUM_GRPC_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct grpc_server grpc_server;
struct tls_ctx;
typedef struct grpc_call grpc_call;
typedef struct grpc_conn grpc_conn;
struct grpc_http1;
struct grpc_h2_request;

enum grpc_method_kind {
    GRPC_UNARY,
    GRPC_SERVER_STREAMING,
    GRPC_CLIENT_STREAMING,
    GRPC_BIDI_STREAMING,
};

struct grpc_method {
    const char *path; /* "/etcdserverpb.KV/Range" */
    enum grpc_method_kind kind;
    /* on_message: one complete request message arrived. |msg| is valid only
     * during the callback. Unary and server-streaming methods get exactly one
     * on_message (as soon as the message is complete; a second message is a
     * protocol error the grpc layer answers itself). Required. */
    void (*on_message)(grpc_call *call, const uint8_t *msg, size_t len);
    /* on_half_close: the client ended its side of a client/bidi stream.
     * Optional (may be NULL). */
    void (*on_half_close)(grpc_call *call);
    /* on_close: the call is over (see the life cycle above). Optional. */
    void (*on_close)(grpc_call *call);
};

struct grpc_server_options {
    /* largest request message accepted; a larger one is answered
     * RESOURCE_EXHAUSTED "grpc: received message larger than max (N vs. M)"
     * and the stream is closed. etcd: --max-request-bytes + 512 KiB.
     * 0 = 4 MiB (grpc-go's default). */
    size_t max_recv_msg_size;
    /* largest response message (larger sends fail with -EMSGSIZE). 0 = 2 GiB */
    size_t max_send_msg_size;
    /* HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, advertised; 0 = unlimited
     * and not advertised (server/ passes etcd's default, math.MaxUint32,
     * which etcd advertises). A client that opens more is refused: RST_STREAM REFUSED_STREAM while
     * our SETTINGS are unacknowledged, GOAWAY PROTOCOL_ERROR after
     * (nghttp2; grpc-go refuses the stream in both cases). */
    uint32_t max_concurrent_streams;
    /* keepalive, as grpc-go's server (etcd's --grpc-keepalive-* flags):
     * keepalive_min_time_ms (EnforcementPolicy.MinTime, 0 = 5 min): a
     *   client PING sooner than this after the previous one, while a call
     *   is open (2 h when none is: PermitWithoutStream false), is a strike
     *   unless the server sent HEADERS or DATA since; the third strike gets
     *   GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and the connection closes.
     * keepalive_time_ms (ServerParameters.Time, 0 = 2 h, at least 1 s) and
     * keepalive_timeout_ms (Timeout, 0 = 20 s): a connection that sent
     *   nothing for Time gets a PING; nothing for Timeout more, it is closed.
     * HTTP/2 connections only. */
    uint64_t keepalive_min_time_ms;
    uint64_t keepalive_time_ms;
    uint64_t keepalive_timeout_ms;
    /* TLS for the connections of grpc_server_listen_tls and
     * grpc_server_adopt_tls (a server context of tls/, ALPN "h2"; shared,
     * not owned: it must outlive the server). NULL: no TLS. */
    struct tls_ctx *tls;
    /* HTTP/1.1 on the same port (http/): a connection whose first bytes
     * are not HTTP/2's client preface is handed to it. NULL: every
     * connection is HTTP/2 (a bad preface gets GOAWAY). */
    const struct grpc_http1 *http1;
    /* every connection goes to |http1|, none is HTTP/2 (the plain-HTTP
     * listener of --listen-metrics-urls) */
    bool http_only;
    /* grpc_server_handling_seconds besides the counters (etcd's
     * --metrics=extensive) */
    bool handling_seconds;
    /* Connection bounds (docs/faults.md). max_conns: a connection accepted
     * (or adopted) while |max_conns| are open is closed at once, unread;
     * 0 = unlimited (etcd's). The count is *conn_count when not NULL (an
     * atomic shared by several servers, e.g. every front loop's, for one
     * limit on the member), else the server's own. */
    unsigned max_conns;
    unsigned *conn_count; /* __atomic */
    /* A socket connection (not TLS: tls/ has its own handshake deadline)
     * whose first bytes (HTTP/2's preface or an HTTP/1.1 request line) are
     * not all in within preface_ms is closed (grpc-go's ConnectionTimeout,
     * 120 s in etcd); 0 = never. idle_ms: an HTTP/2 connection with no open
     * stream that has read nothing for idle_ms gets GOAWAY and is closed
     * (grpc-go's MaxConnectionIdle; etcd sets none); 0 = never. Checked
     * once a second. */
    uint64_t preface_ms;
    uint64_t idle_ms;
};

/* grpc_server_new creates a server with |n| methods (the table and its
 * strings must outlive the server). |data| is returned by
 * grpc_call_server_data. Errors: -ENOMEM. */
int grpc_server_new(uv_loop_t *loop, const struct grpc_method *methods, size_t n,
                    const struct grpc_server_options *opts, void *data, grpc_server **out);

/* grpc_server_listen binds and listens on |host|:|port| (numeric IPv4/IPv6
 * address). Port 0 picks a free port; the chosen port is stored in
 * *|bound_port| if not NULL. May be called more than once (several
 * listeners). Errors: libuv's (negative errno), e.g. -EADDRINUSE. */
int grpc_server_listen(grpc_server *srv, const char *host, int port, int *bound_port);

/* grpc_server_listen_tls is grpc_server_listen for an https:// URL: every
 * connection completes a TLS handshake (options.tls) before HTTP/2. A
 * handshake that fails (plain text, no or a wrong client certificate, a
 * truncated hello, or none completed within 10 s) is logged with its
 * reason ("client TLS handshake with ADDR failed: ...") and the connection
 * closed. Errors: -EINVAL when the
 * server has no TLS context, else grpc_server_listen's. */
int grpc_server_listen_tls(grpc_server *srv, const char *host, int port, int *bound_port);

/* grpc_server_adopt serves connected socket |fd|, accepted elsewhere (a
 * front loop's share of a listener; server/front.c). On success the server
 * owns it; on error (-ENOMEM, -ESHUTDOWN when closing, libuv's) the socket
 * is closed. */
int grpc_server_adopt(grpc_server *srv, uv_os_sock_t fd);

/* grpc_server_adopt_tls is grpc_server_adopt for a socket accepted on an
 * https:// listener: TLS first, as grpc_server_listen_tls. -EINVAL (and
 * the socket closed) when the server has no TLS context. */
int grpc_server_adopt_tls(grpc_server *srv, uv_os_sock_t fd);

/* grpc_server_listen_unix listens on the unix socket |path| (etcd's
 * unix:// and, with |tls|, unixs:// URLs); a file already there is
 * removed first and the socket file is removed when the server closes.
 * Errors: -EINVAL (|tls| without a TLS context), libuv's. */
int grpc_server_listen_unix(grpc_server *srv, const char *path, bool tls);

/* grpc_server_adopt_flags is grpc_server_adopt with GRPC_ADOPT_* flags:
 * TLS first, and/or |fd| is a unix socket. */
enum { GRPC_ADOPT_TLS = 1, GRPC_ADOPT_UNIX = 2 };
int grpc_server_adopt_flags(grpc_server *srv, uv_os_sock_t fd, unsigned flags);

/* grpc_server_close stops listening, resets every open call (each gets
 * on_close), closes every connection, and calls |cb| when all handles are
 * closed; the server is freed before |cb| runs. |cb| may be NULL. */
void grpc_server_close(grpc_server *srv, void (*cb)(void *arg), void *arg);

/* grpc_call_server_data returns the |data| given to grpc_server_new. */
void *grpc_call_server_data(const grpc_call *call);

/* per-call slot for the server's own state */
void grpc_call_set_data(grpc_call *call, void *data);
void *grpc_call_get_data(const grpc_call *call);

/* grpc_call_method returns the entry of the method table the call was
 * routed to (a pointer into the table given to grpc_server_new). */
const struct grpc_method *grpc_call_method(const grpc_call *call);

/* grpc_call_path returns the method path; valid for the call's life. */
const char *grpc_call_path(const grpc_call *call);

/* grpc_call_metadata returns the value of request header |name| (lower
 * case, e.g. "token" or "authorization") and its length in *|len|, or NULL.
 * Valid for the call's life. */
const char *grpc_call_metadata(const grpc_call *call, const char *name, size_t *len);

/* grpc_call_tls_common_name returns the common name of the verified
 * client certificate of the call's connection, or NULL: no TLS, no client
 * certificate, or one that was not verified (a server that does not ask
 * for client certificates). Valid for the call's life. etcd uses it as
 * the user name when authentication is on and the request has no token. */
const char *grpc_call_tls_common_name(const grpc_call *call);

/* grpc_call_send queues one response message (the bytes are copied; the
 * 5-byte prefix is added here). The first send also sends the response
 * HEADERS. Output is written before the loop next blocks for I/O; all frames
 * of a connection queued in one loop pass go out in one write. Errors:
 * -EPIPE (call finished or closing), -EMSGSIZE, -ENOMEM. */
int grpc_call_send(grpc_call *call, const uint8_t *msg, size_t len);

/* grpc_call_send_take is grpc_call_send of a message built in a buffer of
 * the caller's: |msg| holds GRPC_MSG_PREFIX bytes (filled here) then the
 * message. When nothing of the call's output is waiting, the call takes
 * the buffer (*|msg| is then zeroed) instead of copying it: a big reply
 * costs the loop no copy. Otherwise it is copied, and *|msg| stays the
 * caller's; either way the caller frees it after (buf_free). Errors: as
 * grpc_call_send. */
#define GRPC_MSG_PREFIX 5
struct buf;
int grpc_call_send_take(grpc_call *call, struct buf *msg);

/* grpc_call_finish ends the call with |status| (enum grpc_status in
 * base/err.h) and |message| (UTF-8, may be NULL; percent-encoded here),
 * sent as trailers (trailers-only response when nothing was sent). on_close
 * follows once the stream is closed. Errors: -EPIPE if already finished. */
int grpc_call_finish(grpc_call *call, int status, const char *message);

/* grpc_call_pending_bytes is how many response bytes of this call are queued
 * but not yet written to the socket: a streaming producer (watch) uses it
 * for backpressure. */
size_t grpc_call_pending_bytes(const grpc_call *call);

/* ---- HTTP/1.1 beside HTTP/2 ----
 *
 * As etcd's cmux does, a connection's first bytes choose its protocol:
 * HTTP/2's client preface ("PRI * HTTP/2.0...") means gRPC; anything else
 * goes to the grpc_http1 handler of the options. The grpc layer keeps the
 * socket (and its TLS) and the output queue; the handler parses and
 * answers. Its callbacks run on the loop thread. */
struct grpc_http1 {
    void *arg;
    /* open: a new HTTP/1.1 connection; returns the handler's state for it
     * or NULL (the connection is closed). */
    void *(*open)(void *arg, grpc_conn *c);
    /* input: bytes read from the client, in order. Nonzero: stop reading
     * for good (the handler shuts the connection down). */
    int (*input)(void *h, const uint8_t *p, size_t n);
    /* eof: the client ended its side (half-close); reading has stopped.
     * The handler answers what it can and shuts the connection down.
     * Optional: without it the connection is closed at once. */
    void (*eof)(void *h);
    /* drained: all output queued so far reached the socket (optional). */
    void (*drained)(void *h);
    /* closed: the connection is gone (client left, write error, shutdown
     * done, server closing); exactly once, last. The handler frees |h|
     * and must let go of its local calls here (grpc_call_local_cancel). */
    void (*closed)(void *h);
    /* h2_request: a complete HTTP/2 request whose content-type is not
     * gRPC's (the JSON gateway over h2, /health, ...). |stream| answers
     * it (grpc_h2_respond, _write, _end). Returns the handler's state,
     * or NULL (the stream is reset). Optional: without it such requests
     * get gRPC's 415 as before. */
    void *(*h2_request)(void *arg, grpc_call *stream, const struct grpc_h2_request *req);
    /* h2_closed: the stream is gone (answered, reset, connection closed);
     * exactly once for every state h2_request returned. */
    void (*h2_closed)(void *h);
};

struct grpc_h2_request {
    const char *method, *path; /* path with the query */
    const char *authorization, *content_type; /* or NULL */
    const uint8_t *body;
    size_t body_len; /* bodies over 2 x max_recv_msg_size get 413 here */
    const char *if_none_match; /* or NULL (the console's static files) */
};

/* grpc_h2_respond sends the response head: |status|, then |headers|
 * (name, value, ..., NULL; names in lower case), and content-length when
 * |length| >= 0. grpc_h2_write queues body bytes; grpc_h2_end ends the
 * stream. Errors: -EPIPE (the stream is gone or answered), -ENOMEM. */
int grpc_h2_respond(grpc_call *stream, int status, const char *const *headers, long long length);
int grpc_h2_write(grpc_call *stream, const void *p, size_t n);
void grpc_h2_end(grpc_call *stream);
/* grpc_call_h2_server: the server of a plain HTTP/2 stream. */
grpc_server *grpc_call_h2_server(const grpc_call *stream);

grpc_server *grpc_conn_server(const grpc_conn *c);
uv_loop_t *grpc_server_loop(const grpc_server *srv);
/* grpc_conn_write queues |n| bytes for the client (copied); written before
 * the loop next blocks. Errors: -EPIPE (closing), -ENOMEM. */
int grpc_conn_write(grpc_conn *c, const void *p, size_t n);
/* grpc_conn_pending is how many queued bytes are not yet in the socket. */
size_t grpc_conn_pending(const grpc_conn *c);
/* grpc_conn_shutdown stops reading and closes the connection once the
 * queued output is written (closed comes then). */
void grpc_conn_shutdown(grpc_conn *c);
/* grpc_conn_pause_read stops (|pause|) or resumes reading. */
void grpc_conn_pause_read(grpc_conn *c, bool pause);
/* grpc_conn_tls_common_name: as grpc_call_tls_common_name. */
const char *grpc_conn_tls_common_name(const grpc_conn *c);

/* ---- local calls ----
 *
 * A call made on this loop by another face (the JSON gateway, the v2 keys
 * emulation, /health) rather than by an HTTP/2 stream: the method table
 * sees an ordinary grpc_call (same on_message/on_close life cycle, the
 * same services and checks), while its output goes to |ops|. */
struct grpc_local_ops {
    /* send: one response message (valid during the call). Nonzero fails
     * the service's send (-EPIPE, -ENOMEM). */
    int (*send)(void *ctx, const uint8_t *msg, size_t len);
    /* finish: the final status; the last the face hears of the call.
     * The call pointer must not be used after it (the grpc layer closes
     * and frees it on the next loop pass). */
    void (*finish)(void *ctx, int status, const char *message);
    /* pending: output the face holds but has not written (backpressure);
     * optional. */
    size_t (*pending)(void *ctx);
    /* not counted in the grpc_server_* metrics (the server's own probes:
     * /health) */
    bool unmetered;
};

/* grpc_call_open_local starts a call of method |path| on |srv|'s loop.
 * |token| (may be NULL) is what grpc_call_metadata returns for "token".
 * Errors: -ENOENT (no such method), -ESHUTDOWN, -ENOMEM. */
int grpc_call_open_local(grpc_server *srv, const char *path, const struct grpc_local_ops *ops,
                         void *ctx, const char *token, size_t token_len, grpc_call **out);
/* grpc_call_local_message gives one request message (copied). It reaches
 * the method from the loop, before it next blocks, never from inside this
 * call: a face may answer one request and start the next from a finish
 * callback without running a service nested in another. A message larger
 * than the server's max_recv_msg_size, or a second one for a unary method,
 * fails the call at once (|ops| finish runs before this returns), as over
 * HTTP/2. Errors: -EPIPE (finished), -EMSGSIZE, -EPROTO, -ENOMEM. */
int grpc_call_local_message(grpc_call *call, const uint8_t *msg, size_t len);
/* grpc_call_local_half_close: the client's side ended (after the messages
 * given before it). */
void grpc_call_local_half_close(grpc_call *call);
/* grpc_call_local_cancel: the face is gone before finish; |ops| is not
 * called again and on_close reaches the method on the next pass. */
void grpc_call_local_cancel(grpc_call *call);

#endif
