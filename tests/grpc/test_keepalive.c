/* tests/grpc/test_keepalive.c: the gRPC transport options etcd 3.4 has
 * flags for, as grpc-go's server behaves with them:
 *   --max-concurrent-streams   SETTINGS_MAX_CONCURRENT_STREAMS advertised
 *                              and enforced
 *   --grpc-keepalive-min-time  a client pinging too often gets GOAWAY
 *                              ENHANCE_YOUR_CALM "too_many_pings"
 *   --grpc-keepalive-interval/-timeout  the server pings a quiet
 *                              connection and closes it when nothing comes
 * The first two through connections without a socket; the server's pings
 * over real TCP on 127.0.0.1 with a raw HTTP/2 client. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"
#include "grpc/grpc_int.h"

static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void frame(struct buf *b, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n)
{
    uint8_t h[9] = {
        (uint8_t)(n >> 16),   (uint8_t)(n >> 8),    (uint8_t)n,          type,        flags,
        (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
    cr_assert_eq(buf_append(b, h, 9), 0);
    if (n > 0)
        cr_assert_eq(buf_append(b, p, n), 0);
}

/* request HEADERS for |path| (HPACK literals only) */
static void request(struct buf *b, uint32_t sid, const char *path)
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
    frame(b, 1, 4, sid, hb, n);
}

static void ping(struct buf *b, uint8_t flags)
{
    frame(b, 6, flags, 0, "12345678", 8);
}

/* a frame of the server's output */
struct fr {
    uint8_t type, flags;
    uint32_t sid;
    const uint8_t *p;
    size_t len;
};

/* nth_frame finds the |n|th frame of |type| in |out|; 0 if none */
static int nth_frame(const uint8_t *out, size_t len, uint8_t type, int n, struct fr *f)
{
    for (size_t off = 0; off + 9 <= len;) {
        size_t fl = (size_t)out[off] << 16 | (size_t)out[off + 1] << 8 | out[off + 2];
        if (off + 9 + fl > len)
            break;
        if (out[off + 3] == type && n-- == 0) {
            f->type = type;
            f->flags = out[off + 4];
            f->sid = ((uint32_t)out[off + 5] & 0x7f) << 24 | (uint32_t)out[off + 6] << 16 |
                     (uint32_t)out[off + 7] << 8 | out[off + 8];
            f->p = out + off + 9;
            f->len = fl;
            return 1;
        }
        off += 9 + fl;
    }
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* the value of setting |id| in the server's first SETTINGS; -1 if absent */
static long long setting(const struct buf *out, uint16_t id)
{
    struct fr f;
    cr_assert(nth_frame(out->data, out->len, 4, 0, &f), "no SETTINGS");
    for (size_t i = 0; i + 6 <= f.len; i += 6)
        if ((f.p[i] << 8 | f.p[i + 1]) == id)
            return be32(f.p + i + 2);
    return -1;
}

/* ---- a server with two methods ---- */

static grpc_call *held[8];
static int nheld;

static void hold_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    held[nheld++] = call;
}

static void hold_close(grpc_call *call)
{
    for (int i = 0; i < nheld; i++)
        if (held[i] == call)
            held[i] = NULL;
}

/* Talk answers its call at once with a message (HEADERS and DATA) but
 * keeps it open */
static void talk_msg(grpc_call *call, const uint8_t *m, size_t len)
{
    grpc_call_send(call, m, len);
}

static const struct grpc_method methods[] = {
    {"/t.S/Hold", GRPC_CLIENT_STREAMING, hold_msg, NULL, hold_close},
    {"/t.S/Talk", GRPC_BIDI_STREAMING, talk_msg, NULL, NULL},
};

static uv_loop_t loop;
static grpc_server *srv;

static void serve(const struct grpc_server_options *o)
{
    nheld = 0;
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(grpc_server_new(&loop, methods, 2, o, NULL, &srv), 0);
}

static void stop(void)
{
    grpc_server_close(srv, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0, "a handle was left open");
}

Test(keepalive, max_concurrent_streams_advertised_only_when_limited)
{
    struct buf in = {0};
    buf_append(&in, preface, sizeof(preface) - 1);
    frame(&in, 4, 0, 0, NULL, 0);
    grpc_conn *c;
    /* 0, unlimited: not in our SETTINGS */
    serve(NULL);
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(setting(grpc_conn_mem_output(c), 3), -1);
    grpc_conn_mem_free(c);
    stop();
    struct grpc_server_options o = {.max_concurrent_streams = 2};
    serve(&o);
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert_eq(setting(grpc_conn_mem_output(c), 3), 2);
    grpc_conn_mem_free(c);
    stop();
    buf_free(&in);
}

Test(keepalive, max_concurrent_streams_enforced)
{
    struct grpc_server_options o = {.max_concurrent_streams = 2};
    serve(&o);
    grpc_conn *c;
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    struct buf in = {0};
    buf_append(&in, preface, sizeof(preface) - 1);
    frame(&in, 4, 0, 0, NULL, 0);
    request(&in, 1, "/t.S/Hold");
    request(&in, 3, "/t.S/Hold");
    request(&in, 5, "/t.S/Hold"); /* one too many */
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    struct buf *out = grpc_conn_mem_output(c);
    struct fr f;
    cr_assert(nth_frame(out->data, out->len, 3, 0, &f), "the third stream was not refused");
    cr_assert_eq(f.sid, 5);
    cr_assert_eq(be32(f.p), 7, "RST_STREAM REFUSED_STREAM");
    cr_assert(!nth_frame(out->data, out->len, 3, 1, &f), "only the third is refused");
    /* once one ends, another may start */
    buf_reset(&in);
    buf_reset(out);
    frame(&in, 3, 0, 1, "\0\0\0\x08", 4); /* client cancels stream 1 */
    request(&in, 7, "/t.S/Hold");
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    cr_assert(!nth_frame(out->data, out->len, 3, 0, &f), "stream 7 refused");
    grpc_conn_mem_free(c);
    buf_free(&in);
    stop();
}

/* pings: |n| PINGs at once on a connection with an open call */
static int pings_until_goaway(const struct grpc_server_options *o, bool talk_between,
                              struct buf *goaway_debug)
{
    serve(o);
    grpc_conn *c;
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    struct buf in = {0};
    buf_append(&in, preface, sizeof(preface) - 1);
    frame(&in, 4, 0, 0, NULL, 0);
    request(&in, 1, "/t.S/Talk");
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    int sent = 0, rv = 0;
    struct buf *out = grpc_conn_mem_output(c);
    for (; sent < 6 && rv == 0; sent++) {
        buf_reset(&in);
        if (talk_between) /* the server answers a message between pings */
            frame(&in, 0, 0, 1, "\0\0\0\0\x01x", 6);
        ping(&in, 0);
        rv = grpc_conn_mem_feed(c, in.data, in.len);
    }
    struct fr f;
    int got = nth_frame(out->data, out->len, 7, 0, &f);
    if (got) {
        cr_assert_eq(be32(f.p + 4), 11, "GOAWAY ENHANCE_YOUR_CALM");
        buf_append(goaway_debug, f.p + 8, f.len - 8);
        cr_assert_eq(rv, -EPROTO, "connection still open after GOAWAY");
    }
    grpc_conn_mem_free(c);
    buf_free(&in);
    stop();
    return got ? sent : 0;
}

Test(keepalive, too_many_pings_get_goaway)
{
    struct buf dbg = {0};
    struct grpc_server_options o = {.keepalive_min_time_ms = 60000};
    /* grpc-go: the first ping is free, three strikes follow */
    cr_assert_eq(pings_until_goaway(&o, false, &dbg), 4);
    cr_assert_eq(dbg.len, 14);
    cr_assert_eq(memcmp(dbg.data, "too_many_pings", 14), 0);
    /* a ping that follows something the server sent is no strike */
    cr_assert_eq(pings_until_goaway(&o, true, &dbg), 0);
    buf_free(&dbg);
}

Test(keepalive, pings_spaced_by_min_time_are_fine)
{
    struct grpc_server_options o = {.keepalive_min_time_ms = 20};
    serve(&o);
    grpc_conn *c;
    cr_assert_eq(grpc_conn_new_mem(srv, &c), 0);
    struct buf in = {0};
    buf_append(&in, preface, sizeof(preface) - 1);
    frame(&in, 4, 0, 0, NULL, 0);
    request(&in, 1, "/t.S/Hold");
    cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0);
    for (int i = 0; i < 6; i++) {
        usleep(30000);
        uv_update_time(&loop);
        buf_reset(&in);
        ping(&in, 0);
        cr_assert_eq(grpc_conn_mem_feed(c, in.data, in.len), 0, "ping %d refused", i);
    }
    struct buf *out = grpc_conn_mem_output(c);
    struct fr f;
    cr_assert(!nth_frame(out->data, out->len, 7, 0, &f));
    cr_assert(nth_frame(out->data, out->len, 6, 5, &f), "six PING ACKs");
    grpc_conn_mem_free(c);
    buf_free(&in);
    stop();
}

/* ---- the server's pings, over TCP ---- */

static int client_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct buf in = {0};
    buf_append(&in, preface, sizeof(preface) - 1);
    frame(&in, 4, 0, 0, NULL, 0);
    cr_assert_eq(write(fd, in.data, in.len), (ssize_t)in.len);
    buf_free(&in);
    return fd;
}

/* pump runs the server's loop and reads what it sends to |fd| into |got|
 * until |until| holds or 20 s pass; returns 1 once the server closed. */
static int pump(int fd, struct buf *got, int (*until)(const struct buf *, int), int arg)
{
    for (int i = 0; i < 2000; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) == 1) {
            uint8_t b[4096];
            ssize_t n = read(fd, b, sizeof(b));
            if (n <= 0)
                return 1;
            buf_append(got, b, (size_t)n);
        }
        if (until(got, arg))
            return 0;
    }
    cr_assert_fail("nothing happened in 20 s");
    return 0;
}

static int has_pings(const struct buf *b, int n)
{
    struct fr f;
    int k = 0;
    for (int i = 0; nth_frame(b->data, b->len, 6, i, &f); i++)
        k += !(f.flags & 1);
    return k >= n;
}

static int never(const struct buf *b, int n)
{
    return 0;
}

Test(keepalive, server_pings_and_closes_a_silent_connection)
{
    struct grpc_server_options o = {.keepalive_time_ms = 1000, .keepalive_timeout_ms = 200};
    serve(&o);
    int port;
    cr_assert_eq(grpc_server_listen(srv, "127.0.0.1", 0, &port), 0);
    /* a client that answers the pings stays: two pings come */
    int fd = client_connect(port);
    struct buf got = {0};
    for (int k = 1; k <= 2; k++) {
        cr_assert_eq(pump(fd, &got, has_pings, k), 0, "closed though it answered");
        struct buf ack = {0};
        ping(&ack, 1);
        cr_assert_eq(write(fd, ack.data, ack.len), (ssize_t)ack.len);
        buf_free(&ack);
    }
    close(fd);
    /* one that does not is closed after its ping */
    buf_reset(&got);
    fd = client_connect(port);
    cr_assert_eq(pump(fd, &got, never, 0), 1);
    cr_assert(has_pings(&got, 1), "closed without a ping first");
    close(fd);
    buf_free(&got);
    stop();
}
