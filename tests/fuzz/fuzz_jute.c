/* tests/fuzz/fuzz_jute.c: libFuzzer target for src/zk's jute codec (the
 * ZooKeeper face's decoder of client bytes). Byte 0 picks the mode:
 *
 *   0  the rest is a client's stream: framed packets, a ConnectRequest
 *      first, then requests (the server's decode path);
 *   1  a connection both ways: a u32 big-endian length n, n bytes of the
 *      client's stream, then the server's stream (answers typed by the
 *      requests' xids: the client-side decoders);
 *   2  one record: byte 1 picks a record table (below), the rest is its
 *      encoding.
 *
 * Whatever decodes must round trip stably: encode, decode, encode gives
 * the same bytes (tests/zk/jute_stream.h). Modes 0 and 1 also give the
 * streams to src/zk/stream.c (what a front loop reads of them): cut and
 * counted whole or in pieces, the results must agree, and no packet cut
 * may reach past the bytes held. Anything else aborts. The
 * kept corpus (corpus/fuzz_jute) holds real kazoo and zkCli connections
 * to Apache ZooKeeper 3.8 (tests/zk/capture_jute.py) and what fuzzing
 * found. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../zk/cut_pieces.h"
#include "../zk/jute_stream.h"
#include "zk/proto.h"
#include "zk/stream.h"

static void fail(const char *what, size_t packet)
{
    (void)what;
    (void)packet;
    abort();
}

static const struct jute_record *const records[] = {
    &zk_rec_stat,          &zk_rec_acl,           &zk_rec_connect_req,
    &zk_rec_connect_resp,  &zk_rec_auth_packet,   &zk_rec_create_req,
    &zk_rec_create_ttl_req, &zk_rec_set_acl_req,  &zk_rec_set_watches,
    &zk_rec_set_watches2,  &zk_rec_watcher_event, &zk_rec_get_acl_resp,
    &zk_rec_get_children2_resp, &zk_rec_get_data_resp, &zk_rec_who_am_i_resp,
};

/* big enough for any record struct above */
union any_record {
    struct zk_stat a;
    struct zk_create_req b;
    struct zk_set_watches c;
    struct zk_get_acl_resp d;
    struct zk_children_resp e;
    struct zk_get_data_resp f;
    struct zk_connect_req g;
    struct zk_auth_packet h;
    struct zk_who_am_i_resp i;
    struct zk_set_acl_req j;
};

static void one_record(const uint8_t *p, size_t len)
{
    if (len < 1)
        return;
    const struct jute_record *r = records[p[0] % (sizeof(records) / sizeof(records[0]))];
    if (r->size > sizeof(union any_record))
        abort();
    struct arena a = {0};
    struct buf e1 = {0}, e2 = {0};
    union any_record v1, v2;
    struct jute_in in;
    jute_in_init(&in, p + 1, len - 1);
    if (jute_decode(r, &in, &v1, &a) == 0) {
        struct jute_out o1 = {&e1, 0}, o2 = {&e2, 0};
        if (jute_encode(r, &o1, &v1) != 0)
            abort();
        jute_in_init(&in, e1.data, e1.len);
        if (jute_decode(r, &in, &v2, &a) != 0 || jute_in_left(&in) != 0)
            abort();
        if (jute_encode(r, &o2, &v2) != 0 || !js_same(&e1, &e2))
            abort();
    }
    arena_free(&a);
    buf_free(&e1);
    buf_free(&e2);
}

/* src/zk/stream.c on the same bytes: the client's stream cut whole and
 * in pieces of |step| bytes (held and appended to, as a front loop does)
 * gives the same packets; the server's stream counted whole and in
 * pieces gives the same answers and state. */
static void stream_views(const uint8_t *client, size_t cn, const uint8_t *server, size_t sn,
                         size_t step)
{
    enum { MAX = 4096 };
    size_t *a = calloc(MAX, sizeof(size_t)), *b = calloc(MAX, sizeof(size_t));
    enum zk_cut *ka = calloc(MAX, sizeof(*ka)), *kb = calloc(MAX, sizeof(*kb));
    if (a == NULL || b == NULL || ka == NULL || kb == NULL)
        abort();
    size_t na = cut_pieces(client, cn, cn ? cn : 1, JUTE_MAX_BUFFER, ka, a, MAX);
    size_t nb = cut_pieces(client, cn, step, JUTE_MAX_BUFFER, kb, b, MAX);
    size_t cmp = na < MAX ? na : MAX;
    if (na != nb || memcmp(a, b, cmp * sizeof(size_t)) != 0 ||
        memcmp(ka, kb, cmp * sizeof(*ka)) != 0)
        abort();
    free(a);
    free(b);
    free(ka);
    free(kb);
    struct zk_answers w = {0}, q = {0};
    uint64_t whole = zk_answers_count(&w, server, sn), pieces = 0;
    for (size_t at = 0; at < sn; at += step)
        pieces += zk_answers_count(&q, server + at, sn - at < step ? sn - at : step);
    if (whole != pieces || w.established != q.established || w.broken != q.broken ||
        w.skip != q.skip || w.have != q.have)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct js_xids *x = calloc(1, sizeof(*x));
    struct js_stats st = {0};
    if (x == NULL)
        return 0;
    switch (data[0] % 3) {
    case 0:
        js_client(data + 1, size - 1, false, x, &st, fail);
        stream_views(data + 1, size - 1, data + 1, size - 1, 1 + data[0] / 3 % 13);
        break;
    case 1: {
        if (size < 5)
            break;
        size_t n = (size_t)data[1] << 24 | (size_t)data[2] << 16 | (size_t)data[3] << 8 | data[4];
        if (n > size - 5)
            n = size - 5;
        js_client(data + 5, n, false, x, &st, fail);
        js_server(data + 5 + n, size - 5 - n, false, x, &st, fail);
        stream_views(data + 5, n, data + 5 + n, size - 5 - n, 1 + data[0] / 3 % 13);
        break;
    }
    default:
        one_record(data + 1, size - 1);
        break;
    }
    free(x);
    return 0;
}
