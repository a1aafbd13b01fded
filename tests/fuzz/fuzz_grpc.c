/* tests/fuzz/fuzz_grpc.c: libFuzzer target for src/grpc. Arbitrary bytes
 * go, in one or more chunks, into a server connection that has no socket
 * (grpc_conn_new_mem): the HTTP/2 session, the gRPC framing decoder, method
 * dispatch, trailers and stream life cycles all run as they do on a socket.
 *
 * Input layout: byte 0 is a control byte. Bit 0 set: a valid client
 * preface and empty SETTINGS are sent first (so mutations reach deeper).
 * Bit 7 clear (raw mode): bits 1..6 (k) feed the rest as raw bytes in
 * chunks of 1 + 13 * k bytes (k = 0: in one chunk). Between chunks the
 * pending "Later" calls are answered, as a server answering after a disk
 * sync would. Bit 7 set (structured mode): the rest is a list of records
 * "type flags stream len payload[len]" turned into well-formed frames, so
 * mutations explore HTTP/2 and gRPC semantics rather than framing:
 * types 0..9 are HTTP/2 frames as given; 10 is a request HEADERS block
 * built here (payload[0] picks the path and content-type, the rest is a
 * "token" value); 11 is DATA holding one gRPC message (flags bit 4: the
 * compressed flag); 12 answers the pending calls; 13 flushes.
 *
 * Invariants checked (trap on violation): on_close runs exactly once for
 * every call that reached a method, after which the call is never touched;
 * no call is left open once the connection is freed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grpc/grpc_int.h"

#define MAGIC 0x6772706cu

struct node {
    uint32_t magic;
    grpc_call *call;
    struct node *prev, *next; /* pending list ("Later" calls) */
    int pending;
    long count;
};

static struct node *pending;
static long live;

static struct node *node_of(grpc_call *call)
{
    struct node *n = grpc_call_get_data(call);
    if (n == NULL) {
        n = calloc(1, sizeof(*n));
        if (n == NULL)
            abort();
        n->magic = MAGIC;
        n->call = call;
        grpc_call_set_data(call, n);
        live++;
    }
    if (n->magic != MAGIC || n->call != call)
        __builtin_trap();
    return n;
}

static void unlink_pending(struct node *n)
{
    if (!n->pending)
        return;
    if (n->prev)
        n->prev->next = n->next;
    else
        pending = n->next;
    if (n->next)
        n->next->prev = n->prev;
    n->pending = 0;
}

static void on_close(grpc_call *call)
{
    struct node *n = grpc_call_get_data(call);
    if (n == NULL)
        return;
    if (n->magic != MAGIC)
        __builtin_trap(); /* second on_close or a stray pointer */
    unlink_pending(n);
    n->magic = 0;
    grpc_call_set_data(call, NULL);
    live--;
    free(n);
}

static void unary_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    node_of(call);
    grpc_call_send(call, m, len);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
    /* after finish every send fails */
    if (grpc_call_send(call, m, len) != -EPIPE || grpc_call_finish(call, 0, NULL) != -EPIPE)
        __builtin_trap();
}

static void later_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    struct node *n = node_of(call);
    if (n->pending)
        __builtin_trap(); /* unary: one message only */
    n->pending = 1;
    n->prev = NULL;
    n->next = pending;
    if (pending)
        pending->prev = n;
    pending = n;
}

static void stream_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    node_of(call);
    for (int i = 0; i < 3; i++)
        grpc_call_send(call, m, len);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void bidi_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    struct node *n = node_of(call);
    if (++n->count > 5)
        grpc_call_finish(call, GRPC_STATUS_ABORTED, "too many \xe2\x9c\x93 100%");
    else
        grpc_call_send(call, m, len);
}

static void half_close(grpc_call *call)
{
    struct node *n = node_of(call);
    char out[32];
    int k = snprintf(out, sizeof(out), "%ld", n->count);
    grpc_call_send(call, (const uint8_t *)out, (size_t)k);
    grpc_call_finish(call, n->count % 2 ? GRPC_STATUS_OK : GRPC_STATUS_INVALID_ARGUMENT,
                     "etcdserver: \x01\xff odd");
}

static void client_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    node_of(call)->count++;
}

static void meta_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    size_t vlen = 0;
    const char *v = grpc_call_metadata(call, "token", &vlen);
    if (strcmp(grpc_call_path(call), "/f.S/Meta") != 0)
        __builtin_trap();
    grpc_call_send(call, (const uint8_t *)(v ? v : ""), v ? vlen : 0);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static const struct grpc_method methods[] = {
    {"/f.S/Unary", GRPC_UNARY, unary_msg, NULL, on_close},
    {"/f.S/Later", GRPC_UNARY, later_msg, NULL, on_close},
    {"/f.S/Stream", GRPC_SERVER_STREAMING, stream_msg, NULL, on_close},
    {"/f.S/Bidi", GRPC_BIDI_STREAMING, bidi_msg, half_close, on_close},
    {"/f.S/Client", GRPC_CLIENT_STREAMING, client_msg, half_close, on_close},
    {"/f.S/Meta", GRPC_UNARY, meta_msg, NULL, NULL},
};

static grpc_server *server;
static uv_loop_t loop;

static void answer_pending(void)
{
    while (pending) {
        struct node *n = pending;
        unlink_pending(n);
        grpc_call_send(n->call, (const uint8_t *)"later", 5);
        grpc_call_finish(n->call, GRPC_STATUS_OK, NULL);
    }
}

static void setup(void)
{
    struct grpc_server_options o = {
        .max_recv_msg_size = 4096, .max_send_msg_size = 1 << 20, .max_concurrent_streams = 64};
    if (uv_loop_init(&loop) != 0 ||
        grpc_server_new(&loop, methods, sizeof(methods) / sizeof(methods[0]), &o, NULL, &server) !=
            0)
        abort();
}

static void put_frame(struct buf *b, uint8_t type, uint8_t flags, uint32_t sid, const uint8_t *p,
                      size_t n)
{
    uint8_t h[9] = {
        (uint8_t)(n >> 16),   (uint8_t)(n >> 8),    (uint8_t)n,          type,        flags,
        (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    if (buf_append(b, h, 9) != 0 || buf_append(b, p, n) != 0)
        abort();
}

/* request_block builds an HPACK block (literals, no indexing) for a
 * request to the path picked by |sel| */
static void request_block(struct buf *hb, uint8_t sel, const uint8_t *tok, size_t toklen)
{
    static const char *const paths[] = {
        "/f.S/Unary", "/f.S/Later", "/f.S/Stream", "/f.S/Bidi", "/f.S/Client",
        "/f.S/Meta",  "/f.S/Nope",  "/x.Y/Z",      "nopath",    ""};
    static const char *const ctypes[] = {"application/grpc", "application/grpc+proto", "text/plain",
                                         "application/grpc;x=y"};
    const char *path = paths[sel % 10];
    const char *ct = ctypes[(sel >> 4) & 3];
    uint8_t m = (sel & 0x40) ? 0x82 : 0x83; /* GET or POST */
    if (buf_append(hb, &m, 1) || buf_append(hb, "\x86\x04", 2) ||
        buf_append_byte(hb, (uint8_t)strlen(path)) || buf_append(hb, path, strlen(path)) ||
        buf_append(hb, "\x01\x01x\x0f\x10", 5) || buf_append_byte(hb, (uint8_t)strlen(ct)) ||
        buf_append(hb, ct, strlen(ct)))
        abort();
    if (sel & 0x80) {
        if (buf_append(hb, "\x00\x0dgrpc-encoding\x04gzip", 20))
            abort();
    }
    if (toklen > 100)
        toklen = 100;
    if (buf_append(hb, "\x00\x05token", 7) || buf_append_byte(hb, (uint8_t)toklen) ||
        buf_append(hb, tok, toklen))
        abort();
}

static int structured(grpc_conn *c, const uint8_t *p, size_t n)
{
    struct buf b = {0}, hb = {0};
    int rv = 0;
    while (n >= 4 && rv == 0) {
        uint8_t type = p[0], flags = p[1];
        uint32_t sid = p[2];
        size_t len = p[3];
        p += 4;
        n -= 4;
        if (len > n)
            len = n;
        buf_reset(&hb);
        switch (type) {
        case 10:
            request_block(&hb, len ? p[0] : 0, p + (len > 0), len ? len - 1 : 0);
            put_frame(&b, 1, flags, sid, hb.data, hb.len);
            break;
        case 11: {
            uint8_t pre[5] = {(uint8_t)((flags >> 4) & 1), 0, 0, 0, (uint8_t)len};
            if (buf_append(&hb, pre, 5) || buf_append(&hb, p, len))
                abort();
            put_frame(&b, 0, flags & 0x09, sid, hb.data, hb.len);
            break;
        }
        case 12:
        case 13:
            rv = grpc_conn_mem_feed(c, b.data, b.len);
            buf_reset(&b);
            buf_reset(grpc_conn_mem_output(c));
            if (type == 12)
                answer_pending();
            break;
        default:
            put_frame(&b, type, flags, sid, p, len);
            break;
        }
        p += len;
        n -= len;
    }
    if (rv == 0)
        grpc_conn_mem_feed(c, b.data, b.len);
    buf_free(&b);
    buf_free(&hb);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                     "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    if (server == NULL)
        setup();
    if (size == 0)
        return 0;
    uint8_t ctl = data[0];
    data++;
    size--;
    grpc_conn *c;
    if (grpc_conn_new_mem(server, &c) != 0)
        abort();
    int rv = 0;
    if (ctl & 1)
        rv = grpc_conn_mem_feed(c, preface, sizeof(preface) - 1);
    if (ctl & 0x80) {
        if (rv == 0)
            structured(c, data, size);
    } else {
        size_t k = (ctl >> 1) & 0x3f;
        size_t chunk = k ? 1 + 13 * k : size;
        for (size_t off = 0; off < size && rv == 0; off += chunk) {
            size_t n = size - off < chunk ? size - off : chunk;
            rv = grpc_conn_mem_feed(c, data + off, n);
            buf_reset(grpc_conn_mem_output(c));
            answer_pending();
            if (rv == 0)
                rv = grpc_conn_mem_feed(c, NULL, 0); /* flush the answers */
            buf_reset(grpc_conn_mem_output(c));
        }
    }
    grpc_conn_mem_free(c);
    if (live != 0 || pending != NULL)
        __builtin_trap(); /* a call never got on_close */
    return 0;
}
