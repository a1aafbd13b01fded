/* http/h2.c: plain HTTP requests over HTTP/2 (http_int.h).
 *
 * etcd's client port answers a JSON gateway request, /health or /version
 * over HTTP/2 as well as over HTTP/1.1 (Go's server routes by
 * content-type: gRPC's to gRPC, the rest to the HTTP handlers); curl on an
 * https:// URL picks h2 by ALPN. grpc/ hands such a stream over whole
 * (struct grpc_http1.h2_request); the request is routed like an HTTP/1.1
 * one and answered on the stream. The request lives until the stream
 * closes (http_h2_closed), when it is freed. */
#include <stdlib.h>
#include <string.h>

#include "http/http_int.h"

/* head turns the HTTP/1.1-style |extra| lines into HTTP/2 header pairs
 * (lower-case names). */
static void h2_head(struct hreq *r, int status, const char *ctype, const char *extra,
                    long long length)
{
    const char *h[32];
    char names[8][64], values[8][256];
    size_t n = 0, k = 0;
    if (ctype != NULL) {
        h[n++] = "content-type";
        h[n++] = ctype;
    }
    h[n++] = "access-control-allow-headers";
    h[n++] = "accept, content-type, authorization";
    h[n++] = "access-control-allow-methods";
    h[n++] = "POST, GET, OPTIONS, PUT, DELETE";
    h[n++] = "access-control-allow-origin";
    h[n++] = "*";
    for (const char *p = extra; p != NULL && *p && k < 8;) {
        const char *colon = strchr(p, ':'), *eol = strstr(p, "\r\n");
        if (colon == NULL || eol == NULL || colon > eol)
            break;
        size_t nl = (size_t)(colon - p);
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        size_t vl = (size_t)(eol - v);
        if (nl < sizeof(names[k]) && vl < sizeof(values[k])) {
            for (size_t i = 0; i < nl; i++)
                names[k][i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
            names[k][nl] = 0;
            memcpy(values[k], v, vl);
            values[k][vl] = 0;
            h[n++] = names[k];
            h[n++] = values[k];
            k++;
        }
        p = eol + 2;
    }
    h[n] = NULL;
    grpc_h2_respond(r->h2, status, h, length);
}

static int h2_body(struct hreq *r, const void *p, size_t n)
{
    return grpc_h2_write(r->h2, p, n);
}

static void h2_end(struct hreq *r)
{
    grpc_h2_end(r->h2);
}

static size_t h2_pending(const struct hreq *r)
{
    return grpc_call_pending_bytes(r->h2);
}

static grpc_server *h2_server(const struct hreq *r)
{
    return grpc_call_h2_server(r->h2);
}

static const struct hreq_io h2_io = {h2_head, h2_body, h2_end, h2_pending, h2_server};

void *http_h2_request(void *arg, grpc_call *stream, const struct grpc_h2_request *q)
{
    (void)arg;
    struct hreq *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->io = &h2_io;
    r->h2 = stream;
    r->keep_alive = true;
    const char *qm = strchr(q->path, '?');
    size_t plen = qm ? (size_t)(qm - q->path) : strlen(q->path);
    r->path = strndup(q->path, plen);
    r->query = strdup(qm ? qm + 1 : "");
    r->method = q->method; /* only read while routing: kept below */
    if (q->authorization != NULL)
        r->authorization = strdup(q->authorization);
    if (q->content_type != NULL)
        r->content_type = strdup(q->content_type);
    if (q->if_none_match != NULL)
        r->if_none_match = strdup(q->if_none_match);
    if (r->path == NULL || r->query == NULL || buf_append(&r->body, q->body, q->body_len) != 0) {
        hreq_free(r);
        return NULL;
    }
    /* the handlers compare the method with the usual names: keep ours */
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS",
                                        "PATCH"};
    r->method = "OTHER";
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(q->method, known[i]) == 0)
            r->method = known[i];
    http_route(r);
    return r;
}

void http_h2_closed(void *h)
{
    struct hreq *r = h;
    r->gone = true;
    if (r->on_abort != NULL && !r->done)
        r->on_abort(r);
    hreq_free(r);
}
