/* http/http_int.h: internals of the http module, shared by its .c files
 * and its tests.
 *
 * A request (struct hreq) is parsed whole, body included, before it is
 * routed; a handler answers it at once or later (after a local call),
 * either with one response (hreq_respond) or a stream (hreq_stream_*:
 * chunked on HTTP/1.1, until the close on HTTP/1.0). A handler that
 * answers later sets |on_abort|: it runs if the client goes away first,
 * and then the request must be forgotten (it is freed after on_abort).
 */
#ifndef QUORUM_HTTP_HTTP_INT_H
#define QUORUM_HTTP_HTTP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "grpc/grpc.h"
#include "http/http.h"

struct hconn;
struct hreq;

/* How a request's response leaves: HTTP/1.1 (conn.c) or an HTTP/2 stream
 * (h2.c). |length| -1: a stream of pieces of unknown total. end: the
 * response is complete (HTTP/1.1 goes on to the next request). */
struct hreq_io {
    void (*head)(struct hreq *r, int status, const char *ctype, const char *extra,
                 long long length);
    int (*body)(struct hreq *r, const void *p, size_t n);
    void (*end)(struct hreq *r);
    size_t (*pending)(const struct hreq *r);
    grpc_server *(*server)(const struct hreq *r);
};

struct hreq {
    const struct hreq_io *io;
    struct hconn *hc;      /* HTTP/1.1 */
    grpc_call *h2;         /* HTTP/2 */
    bool gone;             /* the client went away (after on_abort) */
    const char *method; /* "GET", "POST", ... */
    char *path;         /* the URL's path, undecoded */
    char *query;        /* after '?', undecoded; "" when none */
    struct buf body;
    char *authorization; /* the Authorization header or NULL */
    char *content_type;
    char *if_none_match; /* If-None-Match or NULL (the console's files) */
    bool http10;
    bool keep_alive;
    bool expect_continue; /* Expect: 100-continue */
    bool expect_other;    /* another Expect: 417 */
    bool has_host;
    bool metrics_only; /* on a --listen-metrics-urls listener */
    /* the handler's */
    void (*on_abort)(struct hreq *r);
    void *ctx;
    /* the response */
    bool answered;  /* a response (or a stream's head) went out */
    bool streaming; /* a stream is open */
    bool done;      /* the response is complete */
};

extern struct http_config http_cfg;

/* etcd answers everything with these (its --cors defaults to "*") */
#define HTTP_CORS_HEADERS                                                                          \
    "Access-Control-Allow-Headers: accept, content-type, authorization\r\n"                        \
    "Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"                            \
    "Access-Control-Allow-Origin: *\r\n"
/* a handler's answer to a method it does not take: Go's 405 */
void http_method_not_allowed(struct hreq *r, const char *allow);

/* hreq_respond sends a whole response: |status|, Content-Type |ctype|,
 * |extra| more header lines ("Name: value\r\n"..., may be NULL), and the
 * body. The request is done. */
void hreq_respond(struct hreq *r, int status, const char *ctype, const char *extra,
                  const void *body, size_t len);
/* hreq_stream_start sends the head of a streamed response; then
 * hreq_stream_write per piece (it is one chunk) and hreq_stream_end. */
void hreq_stream_start(struct hreq *r, int status, const char *ctype, const char *extra);
int hreq_stream_write(struct hreq *r, const void *p, size_t n);
void hreq_stream_end(struct hreq *r);
/* hreq_pending: response bytes queued and not yet written. */
size_t hreq_pending(const struct hreq *r);
/* hreq_server: the grpc server of the request's loop (local calls). */
grpc_server *hreq_server(const struct hreq *r);
/* hreq_query_get finds |name| in the query string and writes its value,
 * percent-decoded, to |out| (NUL-terminated, truncated to |cap|). Returns
 * the decoded length, or -1 when absent. */
int hreq_query_get(const struct hreq *r, const char *name, char *out, size_t cap);
/* hreq_query_has tells whether one of the values of |name| is |value|. */
bool hreq_query_has(const struct hreq *r, const char *name, const char *value, size_t vlen);
/* http_status_text: the reason phrase Go's net/http uses. */
const char *http_status_text(int status);
/* http_percent_decode decodes |n| bytes of |s| (and '+' as a space when
 * |plus|) into |out| of |cap|; returns the length or -1 (bad escape or too
 * long). */
int http_percent_decode(const char *s, size_t n, bool plus, char *out, size_t cap);

/* ---- one unary local call (lcall.c) ----
 * lcall_unary calls |method| with |req| as the client |token| (may be
 * NULL) would, on |srv|'s loop; |cb| gets the final status and the
 * response (valid during |cb|), possibly before lcall_unary returns. The
 * handle in *|out| is only for lcall_cancel (a client that went away) and
 * is invalid once |cb| ran. Errors: grpc_call_open_local's, -ENOMEM. */
#include <protobuf-c/protobuf-c.h>
struct lcall;
typedef void (*lcall_cb)(void *arg, int status, const char *msg, const uint8_t *resp,
                         size_t len);
int lcall_unary(grpc_server *srv, const char *method, const ProtobufCMessage *req,
                const char *token, lcall_cb cb, void *arg, struct lcall **out);
void lcall_cancel(struct lcall *lc);

/* http_route hands a complete request to its handler. */
void http_route(struct hreq *r);
/* http_h2_request and http_h2_closed: the grpc_http1 hooks of h2.c. */
void *http_h2_request(void *arg, grpc_call *stream, const struct grpc_h2_request *req);
void http_h2_closed(void *h);
/* hreq_free frees a request's own memory. */
void hreq_free(struct hreq *r);

/* The handlers (each returns after answering or after arranging to). */
void http_serve_version(struct hreq *r);
void http_serve_health(struct hreq *r, const char *which); /* health, livez, readyz */
void http_serve_gateway(struct hreq *r, const char *rest);  /* path after /v3/ */
void http_serve_v2(struct hreq *r, const char *rest);       /* path after /v2/ */
void http_serve_metrics(struct hreq *r);                    /* metrics.c */
void http_serve_ui(struct hreq *r, const char *rest);       /* ui.c: path after /ui */

/* The HTTP face's own metrics (metrics.c): registered by http_face. */
#include "base/metrics.h"
struct http_metrics {
    metric_t health_success, health_failures; /* /health outcomes, as etcd counts them */
};
extern struct http_metrics http_metrics;
void http_metrics_register(void);

#endif
