/* tests/grpc/test_server.c: unit tests for src/grpc/server.c through
 * connections without a socket (grpc_conn_new_mem): the call life cycle
 * (on_close exactly once, sends after finish, grpc_server_close with open
 * calls and from inside a callback), backpressure accounting
 * (grpc_call_pending_bytes against HTTP/2 flow control) and listen errors.
 * The black-box tests over real TCP are in test_grpcio.py. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grpc/grpc_int.h"

static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void frame(struct buf *b, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n)
{
    uint8_t h[9] = {
        (uint8_t)(n >> 16),   (uint8_t)(n >> 8),    (uint8_t)n,          type,        flags,
        (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    cr_assert_eq(buf_append(b, h, 9), 0);
    cr_assert_eq(buf_append(b, p, n), 0);
}

/* request HEADERS for |path| (HPACK literals only) */
static void request(struct buf *b, uint32_t sid, const char *path, int end_stream)
{
    uint8_t hb[256];
    size_t n = 0, pl = strlen(path);
    hb[n++] = 0x83; /* :method POST */
    hb[n++] = 0x86; /* :scheme http */
    hb[n++] = 0x04; /* :path, literal value */
    hb[n++] = (uint8_t)pl;
    memcpy(hb + n, path, pl);
    n += pl;
    hb[n++] = 0x01; /* :authority */
    hb[n++] = 1;
    hb[n++] = 'x';
    hb[n++] = 0x0f; /* content-type (index 31) */
    hb[n++] = 0x10;
    hb[n++] = 16;
    memcpy(hb + n, "application/grpc", 16);
    n += 16;
    frame(b, 1, 4 | (end_stream ? 1 : 0), sid, hb, n);
}

static void message(struct buf *b, uint32_t sid, const char *m, int end_stream)
{
    size_t n = strlen(m);
    uint8_t p[256] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    memcpy(p + 5, m, n);
    frame(b, 0, end_stream ? 1 : 0, sid, p, 5 + n);
}

/* ---- a tiny application ---- */

static int closes, messages, half_closes, close_cb_runs;
static grpc_call *held[16];
static int nheld;
static grpc_server *srv;
static size_t big_len;

static void on_close(grpc_call *call)
{
    cr_assert_eq(grpc_call_get_data(call), (void *)0x1, "on_close twice or for a stranger");
    grpc_call_set_data(call, (void *)0x2);
    /* after on_close starts, the call refuses output */
    cr_assert_eq(grpc_call_send(call, (const uint8_t *)"x", 1), -EPIPE);
    cr_assert_eq(grpc_call_finish(call, 0, NULL), -EPIPE);
    for (int i = 0; i < nheld; i++)
        if (held[i] == call)
            held[i] = NULL;
    closes++;
}

static void hold_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_set_data(call, (void *)0x1);
    cr_assert_str_eq(grpc_call_path(call), "/t.S/Hold");
    cr_assert_eq(grpc_call_server_data(call), (void *)&closes);
    held[nheld++] = call;
    messages++;
}

static void echo_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_set_data(call, (void *)0x1);
    messages++;
    cr_assert_eq(grpc_call_send(call, m, len), 0);
    cr_assert_eq(grpc_call_finish(call, GRPC_STATUS_OK, NULL), 0);
    cr_assert_eq(grpc_call_send(call, m, len), -EPIPE);
    cr_assert_eq(grpc_call_finish(call, GRPC_STATUS_OK, NULL), -EPIPE);
}

static void bidi_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_set_data(call, (void *)0x1);
    messages++;
    grpc_call_send(call, m, len);
}

static void bidi_half(grpc_call *call)
{
    half_closes++;
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void big_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_set_data(call, (void *)0x1);
    uint8_t *p = calloc(1, big_len);
    cr_assert_eq(grpc_call_send(call, p, big_len), 0);
    free(p);
    held[nheld++] = call;
}

static void on_server_closed(void *arg)
{
    close_cb_runs++;
}

static void kill_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_set_data(call, (void *)0x1);
    grpc_server_close(srv, on_server_closed, NULL);
    /* the connection is going: output is refused, the call stays valid */
    cr_assert_eq(grpc_call_send(call, m, len), -EPIPE);
}

static const struct grpc_method methods[] = {
    {"/t.S/Hold", GRPC_UNARY, hold_msg, NULL, on_close},
    {"/t.S/Echo", GRPC_UNARY, echo_msg, NULL, on_close},
    {"/t.S/Bidi", GRPC_BIDI_STREAMING, bidi_msg, bidi_half, on_close},
    {"/t.S/Big", GRPC_SERVER_STREAMING, big_msg, NULL, on_close},
    {"/t.S/Kill", GRPC_UNARY, kill_msg, NULL, on_close},
};

static uv_loop_t loop;

static void setup(void)
{
    closes = messages = half_closes = close_cb_runs = nheld = 0;
    memset(held, 0, sizeof(held));
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(
        grpc_server_new(&loop, methods, sizeof(methods) / sizeof(methods[0]), NULL, &closes, &srv),
        0);
}

static void teardown(void)
{
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0, "a handle was left open");
}

static void start(struct buf *in)
{
    cr_assert_eq(buf_append(in, preface, sizeof(preface) - 1), 0);
    frame(in, 4, 0, 0, NULL, 0); /* SETTINGS */
}

/* has_goaway/has_rst look for a frame type in the server's output */
static int count_frames(const struct buf *out, uint8_t type)
{
    int n = 0;
    for (size_t off = 0; off + 9 <= out->len;) {
        size_t len =
            (size_t)out->data[off] << 16 | (size_t)out->data[off + 1] << 8 | out->data[off + 2];
        if (out->data[off + 3] == type)
            n++;
        off += 9 + len;
    }
    return n;
}

TestSuite(server, .init = setup, .fini = teardown);

Test(server, unary_and_on_close_once)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Echo", 0);
    message(&in, 1, "hi", 1);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(messages, 1);
    cr_assert_eq(closes, 1, "stream closed once both sides ended");
    struct buf *out = grpc_conn_mem_output(c);
    cr_assert_geq(count_frames(out, 1), 2, "response headers and trailers");
    cr_assert_eq(count_frames(out, 0), 1, "one DATA frame");
    grpc_conn_mem_free(c);
    cr_assert_eq(closes, 1);
    buf_free(&in);
    grpc_server_close(srv, on_server_closed, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(close_cb_runs, 1);
}

Test(server, held_calls_close_when_connection_goes)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    for (uint32_t sid = 1; sid <= 9; sid += 2) {
        request(&in, sid, "/t.S/Hold", 0);
        message(&in, sid, "x", 1);
    }
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(messages, 5);
    cr_assert_eq(closes, 0);
    /* answering one of them closes just that one */
    cr_assert_eq(grpc_call_finish(held[0], GRPC_STATUS_NOT_FOUND, "gone 100%"), 0);
    cr_assert_eq(grpc_conn_mem_feed(c, NULL, 0), 0);
    cr_assert_eq(closes, 1);
    grpc_conn_mem_free(c);
    cr_assert_eq(closes, 5, "every open call got on_close");
    buf_free(&in);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, client_reset_closes_call)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Hold", 0);
    message(&in, 1, "x", 1);
    uint8_t cancel[4] = {0, 0, 0, 8};
    frame(&in, 3, 0, 1, cancel, 4); /* RST_STREAM CANCEL */
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(closes, 1);
    cr_assert_null(held[0]);
    grpc_conn_mem_free(c);
    cr_assert_eq(closes, 1);
    buf_free(&in);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, bidi_half_close)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Bidi", 0);
    message(&in, 1, "a", 0);
    message(&in, 1, "b", 0);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(messages, 2);
    cr_assert_eq(half_closes, 0);
    buf_reset(&in);
    frame(&in, 0, 1, 1, NULL, 0);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(half_closes, 1);
    cr_assert_eq(closes, 1);
    grpc_conn_mem_free(c);
    buf_free(&in);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, pending_bytes_follow_flow_control)
{
    grpc_conn *c;
    struct buf in = {0};
    big_len = 200000;
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Big", 0);
    message(&in, 1, "x", 1);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    /* the client's windows are 65535: the rest stays queued */
    size_t pending = grpc_call_pending_bytes(held[0]);
    cr_assert_eq(pending, big_len + 5 - 65535, "pending %zu", pending);
    buf_reset(&in);
    uint8_t inc[4] = {0, 1, 0, 0}; /* +65536 */
    frame(&in, 8, 0, 0, inc, 4);
    frame(&in, 8, 0, 1, inc, 4);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(grpc_call_pending_bytes(held[0]), pending - 65536);
    grpc_conn_mem_free(c);
    cr_assert_eq(closes, 1);
    buf_free(&in);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, server_close_from_a_callback)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Hold", 0);
    message(&in, 1, "x", 1);
    request(&in, 3, "/t.S/Kill", 0);
    message(&in, 3, "x", 1);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), -EPROTO, "connection closed");
    cr_assert_eq(closes, 2, "both calls closed");
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), -EPROTO);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(close_cb_runs, 1);
    grpc_conn_mem_free(c); /* after the server is gone: still fine */
    buf_free(&in);
}

Test(server, protocol_error_sends_goaway)
{
    grpc_conn *c;
    struct buf in = {0};
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    start(&in);
    request(&in, 1, "/t.S/Hold", 0);
    message(&in, 1, "x", 0);
    frame(&in, 0, 0, 0, "oops", 4); /* DATA on stream 0 */
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), -EPROTO);
    cr_assert_eq(count_frames(grpc_conn_mem_output(c), 7), 1, "GOAWAY sent");
    cr_assert_eq(closes, 1);
    grpc_conn_mem_free(c);
    buf_free(&in);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, bad_preface_sends_goaway)
{
    grpc_conn *c;
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    const char *junk = "GET / HTTP/1.1\r\n\r\n";
    cr_assert_eq(grpc_conn_mem_feed(c, (const uint8_t *)junk, strlen(junk)), -EPROTO);
    cr_assert_eq(count_frames(grpc_conn_mem_output(c), 7), 1);
    grpc_conn_mem_free(c);
    grpc_server_close(srv, NULL, NULL);
}

Test(server, listen_errors)
{
    int port = 0;
    cr_assert_eq(grpc_server_listen(srv, "127.0.0.1", 0, &port), 0);
    cr_assert_gt(port, 0);
    cr_assert_eq(grpc_server_listen(srv, "127.0.0.1", port, NULL), UV_EADDRINUSE);
    cr_assert_eq(grpc_server_listen(srv, "not an address", 0, NULL), UV_EINVAL);
    grpc_server_close(srv, on_server_closed, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(close_cb_runs, 1);
}
