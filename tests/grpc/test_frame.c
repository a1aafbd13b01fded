/* tests/grpc/test_frame.c: unit tests for src/grpc/frame.c, the gRPC
 * message framing decoder and grpc-message percent-encoding. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc_int.h"

/* collected messages, concatenated with their lengths */
struct got {
    size_t n;
    size_t lens[64];
    uint8_t data[8192];
    size_t used;
    int stop_after; /* return nonzero after this many messages (0 = never) */
};

static int collect(void *arg, const uint8_t *msg, size_t len)
{
    struct got *g = arg;
    cr_assert(g->n < 64);
    cr_assert(g->used + len <= sizeof(g->data));
    memcpy(g->data + g->used, msg, len);
    g->used += len;
    g->lens[g->n++] = len;
    return g->stop_after && (int)g->n >= g->stop_after;
}

static size_t frame(uint8_t *out, uint8_t flag, const char *msg, size_t len)
{
    out[0] = flag;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    memcpy(out + 5, msg, len);
    return 5 + len;
}

/* three messages (one empty) laid out in one wire buffer */
static size_t sample(uint8_t *w)
{
    size_t n = 0;
    n += frame(w + n, 0, "hello", 5);
    n += frame(w + n, 0, "", 0);
    n += frame(w + n, 0, "a somewhat longer third message", 31);
    return n;
}

static void check_sample(const struct got *g)
{
    cr_assert_eq(g->n, 3);
    cr_assert_eq(g->lens[0], 5);
    cr_assert_eq(g->lens[1], 0);
    cr_assert_eq(g->lens[2], 31);
    cr_assert(memcmp(g->data, "helloa somewhat longer third message", 36) == 0);
}

Test(decoder, several_messages_in_one_chunk)
{
    uint8_t w[256];
    size_t n = sample(w);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 1024);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), 0);
    check_sample(&g);
    cr_assert_not(grpc_decoder_partial(&d));
    grpc_decoder_free(&d);
}

Test(decoder, split_at_every_boundary)
{
    uint8_t w[256];
    size_t n = sample(w);
    for (size_t cut = 0; cut <= n; cut++) {
        struct grpc_decoder d;
        struct got g = {0};
        grpc_decoder_init(&d, 1024);
        cr_assert_eq(grpc_decoder_feed(&d, w, cut, collect, &g), 0);
        cr_assert_eq(grpc_decoder_feed(&d, w + cut, n - cut, collect, &g), 0);
        check_sample(&g);
        cr_assert_not(grpc_decoder_partial(&d), "cut %zu", cut);
        grpc_decoder_free(&d);
    }
}

Test(decoder, split_at_every_pair_of_boundaries)
{
    uint8_t w[256];
    size_t n = sample(w);
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            struct grpc_decoder d;
            struct got g = {0};
            grpc_decoder_init(&d, 1024);
            cr_assert_eq(grpc_decoder_feed(&d, w, a, collect, &g), 0);
            cr_assert_eq(grpc_decoder_feed(&d, w + a, b - a, collect, &g), 0);
            cr_assert_eq(grpc_decoder_feed(&d, w + b, n - b, collect, &g), 0);
            check_sample(&g);
            grpc_decoder_free(&d);
        }
}

Test(decoder, one_byte_at_a_time)
{
    uint8_t w[256];
    size_t n = sample(w);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 1024);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(grpc_decoder_feed(&d, w + i, 1, collect, &g), 0);
        if (i + 1 < n)
            cr_assert(grpc_decoder_partial(&d) || g.n == 1 || g.n == 2);
    }
    check_sample(&g);
    grpc_decoder_free(&d);
}

Test(decoder, zero_length_messages_only)
{
    uint8_t w[15] = {0};
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 0);
    cr_assert_eq(grpc_decoder_feed(&d, w, sizeof(w), collect, &g), 0);
    cr_assert_eq(g.n, 3);
    cr_assert_eq(g.used, 0);
    grpc_decoder_free(&d);
}

Test(decoder, partial_prefix_and_body)
{
    uint8_t w[64];
    size_t n = frame(w, 0, "abcdef", 6);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 1024);
    cr_assert_not(grpc_decoder_partial(&d));
    cr_assert_eq(grpc_decoder_feed(&d, w, 3, collect, &g), 0);
    cr_assert(grpc_decoder_partial(&d));
    cr_assert_eq(grpc_decoder_feed(&d, w + 3, 4, collect, &g), 0);
    cr_assert(grpc_decoder_partial(&d));
    cr_assert_eq(grpc_decoder_feed(&d, w + 7, n - 7, collect, &g), 0);
    cr_assert_not(grpc_decoder_partial(&d));
    cr_assert_eq(g.n, 1);
    grpc_decoder_free(&d);
}

Test(decoder, oversize)
{
    uint8_t w[64];
    size_t n = frame(w, 0, "0123456789", 10);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 9);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), GRPC_DEC_TOO_LARGE);
    cr_assert_eq(d.bad_len, 10);
    cr_assert_eq(g.n, 0);
    grpc_decoder_free(&d);

    /* exactly max is fine */
    grpc_decoder_init(&d, 10);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), 0);
    cr_assert_eq(g.n, 1);
    grpc_decoder_free(&d);

    /* a 4 GiB announcement fails at once, without allocating */
    uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
    grpc_decoder_init(&d, 4u << 20);
    cr_assert_eq(grpc_decoder_feed(&d, huge, 5, collect, &g), GRPC_DEC_TOO_LARGE);
    cr_assert_eq(d.bad_len, 0xffffffffu);
    cr_assert_eq(d.msg.cap, 0);
    grpc_decoder_free(&d);
}

Test(decoder, oversize_detected_on_split_prefix)
{
    uint8_t w[64];
    frame(w, 0, "0123456789", 10);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 9);
    cr_assert_eq(grpc_decoder_feed(&d, w, 4, collect, &g), 0);
    cr_assert_eq(grpc_decoder_feed(&d, w + 4, 1, collect, &g), GRPC_DEC_TOO_LARGE);
    grpc_decoder_free(&d);
}

Test(decoder, compressed_flag)
{
    uint8_t w[64];
    size_t n = frame(w, 0, "ok", 2);
    n += frame(w + n, 1, "zz", 2);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 100);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), GRPC_DEC_COMPRESSED);
    cr_assert_eq(g.n, 1, "the message before the compressed one is delivered");
    cr_assert_eq(d.bad_flag, 1);
    grpc_decoder_free(&d);
}

Test(decoder, size_checked_before_flag)
{
    /* grpc-go: an oversize compressed message is RESOURCE_EXHAUSTED */
    uint8_t w[64];
    size_t n = frame(w, 1, "0123456789", 10);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 5);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), GRPC_DEC_TOO_LARGE);
    grpc_decoder_free(&d);
}

Test(decoder, bad_flag)
{
    uint8_t w[64];
    size_t n = frame(w, 7, "x", 1);
    struct grpc_decoder d;
    struct got g = {0};
    grpc_decoder_init(&d, 100);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), GRPC_DEC_BAD_FLAG);
    cr_assert_eq(d.bad_flag, 7);
    grpc_decoder_free(&d);
}

Test(decoder, callback_stops)
{
    uint8_t w[256];
    size_t n = sample(w);
    struct grpc_decoder d;
    struct got g = {.stop_after = 1};
    grpc_decoder_init(&d, 1024);
    cr_assert_eq(grpc_decoder_feed(&d, w, n, collect, &g), GRPC_DEC_STOPPED);
    cr_assert_eq(g.n, 1);
    grpc_decoder_free(&d);
}

struct big {
    const char *m;
    size_t len;
    size_t calls;
    int ok;
};

static int check_big(void *arg, const uint8_t *msg, size_t l)
{
    struct big *r = arg;
    r->calls++;
    r->ok = l == r->len && memcmp(msg, r->m, l) == 0;
    return 0;
}

Test(decoder, large_split_message)
{
    size_t len = 100000;
    uint8_t *w = malloc(5 + len);
    char *m = malloc(len);
    for (size_t i = 0; i < len; i++)
        m[i] = (char)(i * 7);
    frame(w, 0, m, len);
    struct grpc_decoder d;
    grpc_decoder_init(&d, len);
    struct big r = {m, len, 0, 0};
    /* fed in 1000-byte chunks, the message is gathered and handed out once */
    size_t total = 5 + len, off = 0;
    while (off < total) {
        size_t k = total - off < 1000 ? total - off : 1000;
        if (off > 0)
            cr_assert(grpc_decoder_partial(&d));
        cr_assert_eq(grpc_decoder_feed(&d, w + off, k, check_big, &r), 0);
        off += k;
    }
    cr_assert_eq(r.calls, 1);
    cr_assert(r.ok);
    cr_assert_not(grpc_decoder_partial(&d));
    grpc_decoder_free(&d);
    free(w);
    free(m);
}

static void check_encode(const char *in, const char *want)
{
    size_t n = strlen(in);
    char out[256];
    cr_assert_eq(grpc_percent_encoded_len(in, n), strlen(want));
    size_t k = grpc_percent_encode(in, n, out);
    cr_assert_eq(k, strlen(want));
    cr_assert(memcmp(out, want, k) == 0, "encode(%s) = %.*s, want %s", in, (int)k, out, want);
    char back[256];
    size_t b = grpc_percent_decode(out, k, back);
    cr_assert_eq(b, n);
    cr_assert(memcmp(back, in, n) == 0);
}

Test(percent, encode)
{
    check_encode("", "");
    check_encode("plain text ~!", "plain text ~!");
    check_encode("100%", "100%25");
    check_encode("a\nb\tc", "a%0Ab%09c");
    check_encode("\x7f", "%7F");
    check_encode("caf\xc3\xa9", "caf%C3%A9");            /* é */
    check_encode("\xe2\x9c\x93 done", "%E2%9C%93 done"); /* ✓ */
    check_encode("etcdserver: key not found", "etcdserver: key not found");
}

Test(percent, decode_tolerates_bad_escapes)
{
    char out[32];
    size_t k = grpc_percent_decode("50%", 3, out);
    cr_assert_eq(k, 3);
    cr_assert(memcmp(out, "50%", 3) == 0);
    k = grpc_percent_decode("%zz%4", 5, out);
    cr_assert_eq(k, 5);
    cr_assert(memcmp(out, "%zz%4", 5) == 0);
    k = grpc_percent_decode("%41%62", 6, out);
    cr_assert_eq(k, 2);
    cr_assert(memcmp(out, "Ab", 2) == 0);
}
