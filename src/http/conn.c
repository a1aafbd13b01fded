/* http/conn.c: HTTP/1.1 connections on the client port (http.h).
 *
 * Bytes come from grpc/ (struct grpc_http1) and go to libhttp-parser; a
 * request is gathered whole (headers and body, within the limits of
 * http.h), then routed. While it is answered, the parser is paused and
 * any further bytes (a pipelined request) wait in |in|; reading stops
 * when they pass 64 KiB. Responses go back through grpc_conn_write.
 */
#include <errno.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#include "base/log.h"
#include "http/http_int.h"
#include "base/text.h"

#define HEAD_MAX (64 * 1024)       /* request line and headers */
#define URL_MAX (16 * 1024)
#define IN_MAX (64 * 1024)         /* pipelined bytes held before reading stops */
#define REQUEST_MS 30000           /* a request must arrive within this */
#define IDLE_MS (5 * 60 * 1000)    /* an idle keep-alive connection closes */
#define DEFAULT_MAX_BODY ((size_t)4 << 20)

struct http_config http_cfg;

struct hconn {
    grpc_conn *c;
    http_parser parser;
    struct hreq *req; /* being parsed, or answered */
    struct buf in;    /* bytes read while a request is answered */
    size_t head;      /* header bytes of the request being parsed */
    struct buf hname; /* the header being parsed */
    struct buf hval;
    bool in_value;
    bool answering; /* req is complete */
    bool routed;    /* ... and handed to its handler */
    bool closing;   /* no more requests: shut down after this response */
    bool gone;      /* grpc closed the connection */
    bool feeding;   /* inside feed(): a finished request resumes there */
    bool metrics_only; /* a --listen-metrics-urls connection */
    uv_timer_t timer;
    int error_status; /* set by a parser callback: answer and close */
    const char *error_detail;
};

static const http_parser_settings settings;

/* ---- status texts and small helpers ---- */

const char *http_status_text(int s)
{
    switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Request Entity Too Large";
    case 414: return "Request URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "";
    }
}

int http_percent_decode(const char *s, size_t n, bool plus, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int a = hex_digit(s[i + 1]), b = hex_digit(s[i + 2]);
            if (a < 0 || b < 0)
                return -1;
            c = a * 16 + b;
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    if (cap > 0)
        out[o] = 0;
    return (int)o;
}

/* query_find decodes the |nth| value of |name| into |out|; -1: absent. */
static int query_find(const struct hreq *r, const char *name, int nth, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *q = r->query;
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', len);
        size_t kl = eq ? (size_t)(eq - q) : len;
        char key[256];
        int dk = http_percent_decode(q, kl, true, key, sizeof(key));
        if (dk >= 0 && (size_t)dk == nl && memcmp(key, name, nl) == 0 && nth-- == 0) {
            if (eq == NULL) {
                if (cap > 0)
                    out[0] = 0;
                return 0;
            }
            return http_percent_decode(eq + 1, len - kl - 1, true, out, cap);
        }
        q += len;
        if (*q == '&')
            q++;
    }
    return -1;
}

int hreq_query_get(const struct hreq *r, const char *name, char *out, size_t cap)
{
    return query_find(r, name, 0, out, cap);
}

bool hreq_query_has(const struct hreq *r, const char *name, const char *value, size_t vlen)
{
    char v[256];
    for (int i = 0; i < 64; i++) {
        int n = query_find(r, name, i, v, sizeof(v));
        if (n < 0)
            return false;
        if ((size_t)n == vlen && memcmp(v, value, vlen) == 0)
            return true;
    }
    return false;
}

/* ---- requests ---- */

void hreq_free(struct hreq *r)
{
    if (r == NULL)
        return;
    free(r->path);
    free(r->query);
    free(r->authorization);
    free(r->content_type);
    free(r->if_none_match);
    buf_free(&r->body);
    free(r);
}

static void on_timer(uv_timer_t *t);

static void arm(struct hconn *hc, uint64_t ms)
{
    if (ms == 0)
        uv_timer_stop(&hc->timer);
    else
        uv_timer_start(&hc->timer, on_timer, ms, 0);
}

static void feed(struct hconn *hc);

/* simple_error answers a request the connection itself refuses (the way
 * Go's net/http does: text/plain, "Connection: close") and stops. */
static void simple_error_detail(struct hconn *hc, int status, const char *detail)
{
    char out[384];
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Connection: close\r\n\r\n%d %s%s%s",
                     status, http_status_text(status), status, http_status_text(status),
                     detail ? ": " : "", detail ? detail : "");
    grpc_conn_write(hc->c, out, (size_t)n);
    hc->closing = true;
    grpc_conn_shutdown(hc->c);
}

static void simple_error(struct hconn *hc, int status)
{
    simple_error_detail(hc, status, NULL);
}

void http_method_not_allowed(struct hreq *r, const char *allow)
{
    static const char na[] = "Method Not Allowed\n";
    char extra[128];
    snprintf(extra, sizeof(extra), "%s%s%sX-Content-Type-Options: nosniff\r\n",
             allow ? "Allow: " : "", allow ? allow : "", allow ? "\r\n" : "");
    hreq_respond(r, 405, "text/plain; charset=utf-8", extra, na, sizeof(na) - 1);
}

static void not_found(struct hreq *r)
{
    static const char nf[] = "404 page not found\n";
    hreq_respond(r, 404, "text/plain; charset=utf-8", "X-Content-Type-Options: nosniff\r\n", nf,
                 sizeof(nf) - 1);
}

void http_route(struct hreq *r)
{
    const char *p = r->path;
    if (r->metrics_only) {
        /* etcd's metrics listener: /metrics and /health, nothing else */
        if (strcmp(p, "/metrics") == 0)
            http_serve_metrics(r);
        else if (strcmp(p, "/health") == 0)
            http_serve_health(r, "health");
        else
            not_found(r);
    } else if (strcmp(r->method, "OPTIONS") == 0) {
        hreq_respond(r, 200, NULL, NULL, NULL, 0); /* CORS preflight, as etcd's --cors=* */
    } else if (strcmp(p, "/version") == 0) {
        http_serve_version(r);
    } else if (strcmp(p, "/health") == 0 || strcmp(p, "/livez") == 0 ||
               strcmp(p, "/readyz") == 0) {
        http_serve_health(r, p + 1);
    } else if (http_cfg.gateway && strncmp(p, "/v3/", 4) == 0) {
        http_serve_gateway(r, p + 4);
    } else if (http_cfg.gateway && strncmp(p, "/v3beta/", 8) == 0) {
        http_serve_gateway(r, p + 8);
    } else if (http_cfg.v2 && strncmp(p, "/v2/", 4) == 0) {
        http_serve_v2(r, p + 4);
    } else if (strcmp(p, "/metrics") == 0) {
        http_serve_metrics(r);
    } else if (strcmp(p, "/ui") == 0 || strncmp(p, "/ui/", 4) == 0) {
        http_serve_ui(r, p + 3);
    } else {
        not_found(r);
    }
}

/* request_done runs when a response is complete: the next request (if
 * any is waiting) is parsed. */
static void request_done(struct hconn *hc)
{
    struct hreq *r = hc->req;
    hc->req = NULL;
    hc->answering = false;
    hc->routed = false;
    bool keep = r->keep_alive && !hc->closing;
    hreq_free(r);
    if (!keep) {
        hc->closing = true;
        grpc_conn_shutdown(hc->c);
        return;
    }
    arm(hc, IDLE_MS);
    http_parser_pause(&hc->parser, 0);
    if (!hc->feeding)
        feed(hc);
}

/* ---- responses: the generic part ---- */

void hreq_respond(struct hreq *r, int status, const char *ctype, const char *extra,
                  const void *body, size_t len)
{
    if (r->done)
        return;
    r->done = true;
    if (r->gone)
        return;
    r->io->head(r, status, ctype, extra, (long long)len);
    r->answered = true;
    /* HEAD, and a 304, carry the head alone (Content-Length the body's) */
    if (len > 0 && strcmp(r->method, "HEAD") != 0 && status != 304)
        r->io->body(r, body, len);
    r->io->end(r);
}

void hreq_stream_start(struct hreq *r, int status, const char *ctype, const char *extra)
{
    if (r->answered || r->gone)
        return;
    r->io->head(r, status, ctype, extra, -1);
    r->answered = true;
    r->streaming = true;
}

int hreq_stream_write(struct hreq *r, const void *p, size_t n)
{
    if (!r->streaming || r->done || r->gone)
        return -EPIPE;
    return n == 0 ? 0 : r->io->body(r, p, n);
}

void hreq_stream_end(struct hreq *r)
{
    if (r->done)
        return;
    r->done = true;
    if (!r->gone)
        r->io->end(r);
}

size_t hreq_pending(const struct hreq *r)
{
    return r->gone ? 0 : r->io->pending(r);
}

grpc_server *hreq_server(const struct hreq *r)
{
    return r->io->server(r);
}

/* ---- responses on HTTP/1.1 ---- */

static void h1_head(struct hreq *r, int status, const char *ctype, const char *extra,
                    long long length)
{
    struct hconn *hc = r->hc;
    if (length < 0 && r->http10)
        r->keep_alive = false; /* the end of the stream is the close */
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    char h[1024];
    int n = snprintf(h, sizeof(h), "HTTP/1.%d %d %s\r\n", r->http10 ? 0 : 1, status,
                     http_status_text(status));
    if (ctype != NULL)
        n += snprintf(h + n, sizeof(h) - (size_t)n, "Content-Type: %s\r\n", ctype);
    n += snprintf(h + n, sizeof(h) - (size_t)n, "Date: %s\r\n", date);
    if (length >= 0)
        n += snprintf(h + n, sizeof(h) - (size_t)n, "Content-Length: %lld\r\n", length);
    else if (!r->http10)
        n += snprintf(h + n, sizeof(h) - (size_t)n, "Transfer-Encoding: chunked\r\n");
    if (!r->metrics_only) /* etcd's --cors applies to the client port only */
        n += snprintf(h + n, sizeof(h) - (size_t)n, "%s", HTTP_CORS_HEADERS);
    if (!r->keep_alive || hc->closing)
        n += snprintf(h + n, sizeof(h) - (size_t)n, "Connection: close\r\n");
    else if (r->http10)
        n += snprintf(h + n, sizeof(h) - (size_t)n, "Connection: keep-alive\r\n");
    if ((size_t)n >= sizeof(h))
        n = (int)sizeof(h) - 1;
    grpc_conn_write(hc->c, h, (size_t)n);
    if (extra != NULL)
        grpc_conn_write(hc->c, extra, strlen(extra));
    grpc_conn_write(hc->c, "\r\n", 2);
}

/* head_plain writes the head of a response to |r| outside the handlers. */
static void head_plain(struct hconn *hc, struct hreq *r, int status, const char *ctype,
                       size_t len)
{
    (void)hc;
    r->keep_alive = false;
    h1_head(r, status, ctype, NULL, (long long)len);
}

static int h1_body(struct hreq *r, const void *p, size_t n)
{
    grpc_conn *c = r->hc->c;
    if (!r->streaming || r->http10)
        return grpc_conn_write(c, p, n);
    char sz[32];
    int k = snprintf(sz, sizeof(sz), "%zx\r\n", n);
    int rv = grpc_conn_write(c, sz, (size_t)k);
    if (rv == 0)
        rv = grpc_conn_write(c, p, n);
    if (rv == 0)
        rv = grpc_conn_write(c, "\r\n", 2);
    return rv;
}

static void h1_end(struct hreq *r)
{
    if (r->streaming && !r->http10)
        grpc_conn_write(r->hc->c, "0\r\n\r\n", 5);
    request_done(r->hc);
}

static size_t h1_pending(const struct hreq *r)
{
    return grpc_conn_pending(r->hc->c);
}

static grpc_server *h1_server(const struct hreq *r)
{
    return grpc_conn_server(r->hc->c);
}

static const struct hreq_io h1_io = {h1_head, h1_body, h1_end, h1_pending, h1_server};

/* ---- parsing ---- */

static struct hconn *hc_of(http_parser *p)
{
    return p->data;
}

static int on_begin(http_parser *p)
{
    struct hconn *hc = hc_of(p);
    struct hreq *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -1;
    r->hc = hc;
    r->io = &h1_io;
    r->metrics_only = hc->metrics_only;
    hc->req = r;
    hc->head = 0;
    hc->in_value = false;
    buf_reset(&hc->hname);
    buf_reset(&hc->hval);
    arm(hc, REQUEST_MS);
    return 0;
}

static int head_bytes(struct hconn *hc, size_t n)
{
    hc->head += n;
    if (hc->head > HEAD_MAX) {
        hc->error_status = 431;
        return -1;
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct hconn *hc = hc_of(p);
    if (hc->hname.len + n > URL_MAX) {
        hc->error_status = 414;
        return -1;
    }
    /* the URL is gathered in hname until the first header */
    return head_bytes(hc, n) != 0 || buf_append(&hc->hname, at, n) != 0 ? -1 : 0;
}

static char *dup_buf(const struct buf *b)
{
    char *s = malloc(b->len + 1);
    if (s != NULL) {
        if (b->len > 0)
            memcpy(s, b->data, b->len);
        s[b->len] = 0;
    }
    return s;
}

static int take_url(struct hconn *hc)
{
    struct hreq *r = hc->req;
    if (r->path != NULL)
        return 0;
    struct buf *u = &hc->hname;
    const char *q = u->len > 0 ? memchr(u->data, '?', u->len) : NULL;
    size_t plen = q ? (size_t)(q - (const char *)u->data) : u->len;
    r->path = strndup(plen > 0 ? (const char *)u->data : "", plen);
    r->query = q ? strndup(q + 1, u->len - plen - 1) : strdup("");
    buf_reset(u);
    return r->path != NULL && r->query != NULL ? 0 : -1;
}

/* header_done keeps the headers the handlers read. */
static int header_done(struct hconn *hc)
{
    struct hreq *r = hc->req;
    struct buf *n = &hc->hname, *v = &hc->hval;
    char **slot = NULL;
    if (n->len == 13 && strncasecmp((char *)n->data, "authorization", 13) == 0)
        slot = &r->authorization;
    else if (n->len == 12 && strncasecmp((char *)n->data, "content-type", 12) == 0)
        slot = &r->content_type;
    else if (n->len == 13 && strncasecmp((char *)n->data, "if-none-match", 13) == 0)
        slot = &r->if_none_match;
    else if (n->len == 4 && strncasecmp((char *)n->data, "host", 4) == 0)
        r->has_host = true;
    else if (n->len == 6 && strncasecmp((char *)n->data, "expect", 6) == 0) {
        if (v->len == 12 && strncasecmp((char *)v->data, "100-continue", 12) == 0)
            r->expect_continue = true;
        else
            r->expect_other = true;
    }
    if (slot != NULL && *slot == NULL && (*slot = dup_buf(v)) == NULL)
        return -1;
    buf_reset(n);
    buf_reset(v);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct hconn *hc = hc_of(p);
    if (take_url(hc) != 0 || head_bytes(hc, n) != 0)
        return -1;
    if (hc->in_value) {
        if (header_done(hc) != 0)
            return -1;
        hc->in_value = false;
    }
    return buf_append(&hc->hname, at, n) != 0 ? -1 : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct hconn *hc = hc_of(p);
    hc->in_value = true;
    if (head_bytes(hc, n) != 0)
        return -1;
    return buf_append(&hc->hval, at, n) != 0 ? -1 : 0;
}

static int on_headers_complete(http_parser *p)
{
    struct hconn *hc = hc_of(p);
    struct hreq *r = hc->req;
    if (take_url(hc) != 0 || (hc->in_value && header_done(hc) != 0))
        return -1;
    hc->in_value = false;
    r->method = http_method_str((enum http_method)p->method);
    r->http10 = p->http_major == 1 && p->http_minor == 0;
    r->keep_alive = http_should_keep_alive(p);
    /* Go's net/http refuses these before any handler runs */
    if (!r->http10 && !r->has_host) {
        hc->error_status = 400;
        hc->error_detail = "missing required Host header";
        return -1;
    }
    if (r->expect_other) {
        hc->error_status = 417;
        return -1;
    }
    size_t max = http_cfg.max_body ? http_cfg.max_body : DEFAULT_MAX_BODY;
    if (p->content_length != ULLONG_MAX && p->content_length > max) {
        hc->error_status = 413;
        return -1;
    }
    /* Expect: 100-continue (curl sends it for bodies over 1 KiB) */
    if (r->expect_continue && !r->http10) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        grpc_conn_write(hc->c, cont, sizeof(cont) - 1);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct hconn *hc = hc_of(p);
    struct hreq *r = hc->req;
    size_t max = http_cfg.max_body ? http_cfg.max_body : DEFAULT_MAX_BODY;
    if (r->body.len + n > max) {
        hc->error_status = 413;
        return -1;
    }
    return buf_append(&r->body, at, n) != 0 ? -1 : 0;
}

static int on_complete(http_parser *p)
{
    struct hconn *hc = hc_of(p);
    hc->answering = true;
    arm(hc, 0);
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

/* feed runs the parser over the waiting bytes, routing each complete
 * request; it stops while a request is being answered. */
static void feed(struct hconn *hc)
{
    hc->feeding = true;
    while (!hc->gone && !hc->closing) {
        if (hc->answering) {
            if (hc->routed)
                break; /* being answered: wait for it */
            hc->routed = true;
            http_route(hc->req);
            continue; /* if answered at once, request_done unpaused the parser */
        }
        if (hc->in.len == 0)
            break;
        size_t n = http_parser_execute(&hc->parser, &settings, (const char *)hc->in.data,
                                       hc->in.len);
        enum http_errno e = HTTP_PARSER_ERRNO(&hc->parser);
        buf_consume(&hc->in, n);
        if (e == HPE_PAUSED)
            continue;
        if (e != HPE_OK) {
            int status = hc->error_status ? hc->error_status : 400;
            if (hc->req != NULL && hc->req->answered)
                status = 0;
            if (status)
                simple_error_detail(hc, status, hc->error_detail);
            else
                grpc_conn_shutdown(hc->c);
            break;
        }
    }
    hc->feeding = false;
    if (!hc->gone && !hc->closing)
        grpc_conn_pause_read(hc->c, hc->in.len > IN_MAX);
}

/* ---- the grpc_http1 callbacks ---- */

static void on_timer(uv_timer_t *t)
{
    struct hconn *hc = t->data;
    if (hc->gone || hc->closing)
        return;
    if (hc->req != NULL && !hc->answering) {
        simple_error(hc, 408); /* half a request for too long */
        return;
    }
    if (hc->req == NULL) {
        hc->closing = true; /* idle */
        grpc_conn_shutdown(hc->c);
    }
}

static void *h_open(void *arg, grpc_conn *c)
{
    struct hconn *hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return NULL;
    hc->c = c;
    hc->metrics_only = arg != NULL;
    http_parser_init(&hc->parser, HTTP_REQUEST);
    hc->parser.data = hc;
    uv_timer_init(grpc_server_loop(grpc_conn_server(c)), &hc->timer);
    hc->timer.data = hc;
    arm(hc, REQUEST_MS); /* the first request must come */
    return hc;
}

static int h_input(void *h, const uint8_t *p, size_t n)
{
    struct hconn *hc = h;
    if (hc->closing)
        return 1;
    if (buf_append(&hc->in, p, n) != 0) {
        simple_error(hc, 500);
        return 1;
    }
    feed(hc);
    return hc->closing ? 1 : 0;
}

/* the client half-closed: as Go's server, a request cut short gets 400
 * (the gateway's JSON "unexpected EOF" once the body had begun); one being
 * answered is finished first; then the connection closes. */
static void h_eof(void *h)
{
    struct hconn *hc = h;
    if (hc->closing)
        return;
    struct hreq *r = hc->req;
    if (r != NULL && hc->answering) {
        hc->closing = true; /* request_done shuts down after the answer */
        return;
    }
    if (r != NULL && r->method != NULL && strncmp(r->path, "/v3/", 4) == 0) {
        static const char eof[] =
            "{\"error\":\"unexpected EOF\",\"message\":\"unexpected EOF\",\"code\":3}";
        hc->closing = true;
        head_plain(hc, r, 400, "application/json", sizeof(eof) - 1);
        grpc_conn_write(hc->c, eof, sizeof(eof) - 1);
        grpc_conn_shutdown(hc->c);
        return;
    }
    if (r != NULL) {
        simple_error(hc, 400);
        return;
    }
    hc->closing = true;
    grpc_conn_shutdown(hc->c);
}

static void on_timer_closed(uv_handle_t *t)
{
    free(t->data);
}

static void h_closed(void *h)
{
    struct hconn *hc = h;
    hc->gone = true;
    struct hreq *r = hc->req;
    hc->req = NULL;
    if (r != NULL) {
        r->gone = true;
        if (r->on_abort != NULL && !r->done)
            r->on_abort(r);
        hreq_free(r);
    }
    buf_free(&hc->in);
    buf_free(&hc->hname);
    buf_free(&hc->hval);
    uv_close((uv_handle_t *)&hc->timer, on_timer_closed);
}

static struct grpc_http1 face = {
    .open = h_open,
    .input = h_input,
    .closed = h_closed,
    .eof = h_eof,
    .h2_request = http_h2_request,
    .h2_closed = http_h2_closed,
};

/* the metrics listener's connections: the same, with |arg| marking them */
static bool metrics_mark;
static struct grpc_http1 metrics_face = {
    .arg = &metrics_mark,
    .open = h_open,
    .input = h_input,
    .closed = h_closed,
    .eof = h_eof,
};

const struct grpc_http1 *http_face(const struct http_config *cfg)
{
    http_cfg = *cfg;
    http_metrics_register();
    return &face;
}

const struct grpc_http1 *http_metrics_face(void)
{
    return &metrics_face;
}
