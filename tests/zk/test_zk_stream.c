/* tests/zk/test_zk_stream.c: src/zk/stream.c, what a relaying side reads
 * of a ZooKeeper connection's streams: the client's requests cut out of
 * a stream that arrives in pieces of every size, the streams it must not
 * frame (a four-letter word, a length past jute.maxbuffer or negative),
 * and the handler's answers counted (events answer nothing), whatever the
 * pieces. Checked on made-up streams and on real ones: kazoo and zkCli
 * talking to Apache ZooKeeper 3.8 (tests/fuzz/corpus/fuzz_jute's
 * captures), where every request the client sent was answered. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/jute.h"
#include "zk/stream.h"

#include "cut_pieces.h"

struct cuts {
    enum zk_cut kinds[64];
    size_t lens[64];
    size_t n;
    bool raw;
};

/* feed |p| in pieces of |step| bytes to a cutter, as a front loop does */
static void cut_all(const uint8_t *p, size_t n, size_t step, size_t max, struct cuts *out)
{
    memset(out, 0, sizeof(*out));
    out->n = cut_pieces(p, n, step, max, out->kinds, out->lens, 64);
    cr_assert_leq(out->n, 64);
    if (out->n > 0 && out->kinds[out->n - 1] == ZK_CUT_RAW) {
        out->raw = true;
        out->n--; /* the packets cut before */
    }
}

static size_t put_packet(uint8_t *p, const void *body, uint32_t len)
{
    p[0] = (uint8_t)(len >> 24);
    p[1] = (uint8_t)(len >> 16);
    p[2] = (uint8_t)(len >> 8);
    p[3] = (uint8_t)len;
    memcpy(p + 4, body, len);
    return 4 + len;
}

Test(zk_stream, requests_cut_whatever_the_pieces)
{
    uint8_t s[256], body[64];
    memset(body, 7, sizeof(body));
    size_t n = put_packet(s, body, 45); /* the ConnectRequest */
    n += put_packet(s + n, body, 12);   /* requests */
    n += put_packet(s + n, body, 0);    /* an empty one: the handler refuses it */
    n += put_packet(s + n, body, 64);
    n += put_packet(s + n, body, 30) - 10; /* the last one not whole */
    for (size_t step = 1; step <= n; step++) {
        struct cuts c;
        cut_all(s, n, step, JUTE_MAX_BUFFER, &c);
        cr_assert_not(c.raw);
        cr_assert_eq(c.n, 4, "step %zu: %zu cut", step, c.n);
        cr_assert_eq(c.kinds[0], ZK_CUT_CONNECT);
        for (size_t i = 1; i < 4; i++)
            cr_assert_eq(c.kinds[i], ZK_CUT_PACKET);
        cr_assert_eq(c.lens[0], 45);
        cr_assert_eq(c.lens[1], 12);
        cr_assert_eq(c.lens[2], 0);
        cr_assert_eq(c.lens[3], 64);
    }
}

Test(zk_stream, streams_not_to_frame)
{
    struct zk_cutter c = {0};
    size_t len = 0;
    /* a four-letter word as the first bytes; not once a connect went by */
    cr_assert_eq(zk_cut_next(&c, (const uint8_t *)"ruo", 3, JUTE_MAX_BUFFER, &len), ZK_CUT_MORE);
    cr_assert_eq(zk_cut_next(&c, (const uint8_t *)"ruok", 4, JUTE_MAX_BUFFER, &len), ZK_CUT_RAW);
    cr_assert(c.raw);
    const uint8_t conn[] = {0, 0, 0, 0};
    cr_assert_eq(zk_cut_next(&c, conn, 4, JUTE_MAX_BUFFER, &len), ZK_CUT_RAW, "raw stays raw");

    /* past the limit, and negative */
    const uint8_t big[] = {0, 0, 3, 233, 1, 2}; /* 1001 */
    const uint8_t neg[] = {0xff, 0xff, 0xff, 0xfe};
    struct zk_cutter d = {0};
    cr_assert_eq(zk_cut_next(&d, big, sizeof(big), 1000, &len), ZK_CUT_RAW);
    struct zk_cutter e = {0};
    cr_assert_eq(zk_cut_next(&e, neg, sizeof(neg), JUTE_MAX_BUFFER, &len), ZK_CUT_RAW);
    struct zk_cutter f = {0};
    const uint8_t edge[] = {0, 0, 3, 232}; /* 1000: at the limit, waits for its bytes */
    cr_assert_eq(zk_cut_next(&f, edge, sizeof(edge), 1000, &len), ZK_CUT_MORE);

    /* after the connect, "ruok"'s bytes are a length like any other */
    struct zk_cutter g = {0};
    uint8_t s[64] = {0};
    size_t n = put_packet(s, s + 40, 0);
    cr_assert_eq(zk_cut_next(&g, s, n, JUTE_MAX_BUFFER, &len), ZK_CUT_CONNECT);
    cr_assert_eq(zk_cut_next(&g, (const uint8_t *)"stat", 4, 0x7fffffff, &len), ZK_CUT_MORE);
}

/* a reply: length, then xid, zxid, err */
static size_t put_reply(uint8_t *p, int32_t xid, uint32_t extra)
{
    uint8_t body[256] = {0};
    body[0] = (uint8_t)((uint32_t)xid >> 24);
    body[1] = (uint8_t)((uint32_t)xid >> 16);
    body[2] = (uint8_t)((uint32_t)xid >> 8);
    body[3] = (uint8_t)xid;
    return put_packet(p, body, 16 + extra);
}

static size_t put_connect_resp(uint8_t *p, int32_t timeout)
{
    uint8_t body[40] = {0};
    body[4] = (uint8_t)((uint32_t)timeout >> 24);
    body[5] = (uint8_t)((uint32_t)timeout >> 16);
    body[6] = (uint8_t)((uint32_t)timeout >> 8);
    body[7] = (uint8_t)timeout;
    body[19] = 16; /* the password's length */
    return put_packet(p, body, 36 + 1);
}

static uint64_t count_in_pieces(const uint8_t *p, size_t n, size_t step, struct zk_answers *a)
{
    memset(a, 0, sizeof(*a));
    uint64_t total = 0;
    for (size_t at = 0; at < n; at += step)
        total += zk_answers_count(a, p + at, n - at < step ? n - at : step);
    return total;
}

Test(zk_stream, answers_counted_whatever_the_pieces)
{
    uint8_t s[512];
    size_t n = put_connect_resp(s, 30000);
    n += put_reply(s + n, 1, 20);  /* an answer with a record */
    n += put_reply(s + n, -1, 12); /* a watch event: answers nothing */
    n += put_reply(s + n, -2, 0);  /* a ping's answer */
    n += put_reply(s + n, -4, 0);  /* auth's */
    n += put_reply(s + n, 2, 100);
    for (size_t step = 1; step <= n; step++) {
        struct zk_answers a;
        cr_assert_eq(count_in_pieces(s, n, step, &a), 4, "step %zu", step);
        cr_assert(a.established);
        cr_assert_not(a.broken);
        cr_assert_eq(a.skip, 0);
        cr_assert_eq(a.have, 0);
    }
    /* the ConnectResponse counts once whole */
    struct zk_answers b = {0};
    size_t cr = put_connect_resp(s + 400, 30000);
    cr_assert_eq(zk_answers_count(&b, s + 400, cr - 1), 0);
    cr_assert_not(b.established);
    cr_assert_eq(zk_answers_count(&b, s + 400 + cr - 1, 1), 0);
    cr_assert(b.established);
    /* the last one not whole: not counted yet */
    struct zk_answers a;
    cr_assert_eq(count_in_pieces(s, n - 1, 7, &a), 3);
    cr_assert_eq(zk_answers_count(&a, s + n - 1, 1), 1);
}

Test(zk_stream, expired_session_and_broken_streams)
{
    uint8_t s[128];
    size_t n = put_connect_resp(s, 0); /* an expired session's answer */
    struct zk_answers a;
    cr_assert_eq(count_in_pieces(s, n, n, &a), 0);
    cr_assert(a.connect_seen);
    cr_assert_not(a.established);

    n = put_connect_resp(s, 4000);
    const uint8_t tiny[] = {0, 0, 0, 2, 0, 0, 0, 9, 9, 9};
    memcpy(s + n, tiny, sizeof(tiny));
    n += sizeof(tiny);
    n += put_reply(s + n, 5, 0);
    cr_assert_eq(count_in_pieces(s, n, 3, &a), 0);
    cr_assert(a.broken, "a length shorter than a reply header stops the count");
}

/* the captures hold a whole session of a real client: every request it
 * sent after the connect was answered once (closeSession too), events
 * aside; cut and counted in pieces of every size, the two agree */
static void capture(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", ZK_CORPUS_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static uint8_t d[1 << 16];
    size_t size = fread(d, 1, sizeof(d), f);
    fclose(f);
    cr_assert_gt(size, 5);
    size_t n = (size_t)d[1] << 24 | (size_t)d[2] << 16 | (size_t)d[3] << 8 | d[4];
    cr_assert_leq(n, size - 5);
    const uint8_t *client = d + 5, *server = d + 5 + n;
    size_t server_n = size - 5 - n;
    size_t requests = 0;
    for (size_t step = 1; step <= 64; step++) {
        struct cuts c;
        cut_all(client, n, step, JUTE_MAX_BUFFER, &c);
        cr_assert_not(c.raw);
        cr_assert_eq(c.kinds[0], ZK_CUT_CONNECT);
        if (step == 1)
            requests = c.n - 1;
        cr_assert_eq(c.n - 1, requests, "step %zu", step);
        struct zk_answers a;
        cr_assert_eq(count_in_pieces(server, server_n, step, &a), requests, "%s, step %zu", name,
                     step);
        cr_assert(a.established);
    }
    cr_assert_gt(requests, 5, "%s: a real session", name);
}

Test(zk_stream, kazoo_capture)
{
    capture("capture-kazoo");
}

Test(zk_stream, zkcli_capture)
{
    capture("capture-zkcli");
}
