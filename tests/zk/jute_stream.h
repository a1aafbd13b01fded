/* tests/zk/jute_stream.h: walk a captured ZooKeeper connection (both
 * directions) through the decoders and encoders of src/zk, for the unit
 * tests and tests/fuzz/fuzz_jute.c.
 *
 * A client stream is framed packets: the ConnectRequest, then requests. A
 * server stream: the ConnectResponse, then answers, matched to their
 * requests by xid (pings, auth and setWatches by their special xids,
 * notifications by xid -1).
 *
 * Each packet is decoded, encoded, decoded and encoded again: the two
 * encodings must be equal (a stable round trip), and |exact| asks the
 * first encoding to equal the packet's bytes (true for real traffic:
 * clients write canonical jute). A check that fails calls |fail|. */
#ifndef QUORUM_TESTS_ZK_JUTE_STREAM_H
#define QUORUM_TESTS_ZK_JUTE_STREAM_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "zk/proto.h"

#define JS_MAX_XIDS 4096

struct js_xids {
    int32_t xid[JS_MAX_XIDS];
    int32_t type[JS_MAX_XIDS];
    size_t n;
};

struct js_stats {
    size_t packets, requests, replies, bad;
};

typedef void (*js_fail_fn)(const char *what, size_t packet);

static int32_t js_type_of(const struct js_xids *x, int32_t xid)
{
    switch (xid) {
    case ZK_XID_PING:
        return ZK_OP_PING;
    case ZK_XID_AUTH:
        return ZK_OP_AUTH;
    case ZK_XID_SET_WATCHES:
        return ZK_OP_SET_WATCHES;
    default:
        break;
    }
    for (size_t i = 0; i < x->n; i++)
        if (x->xid[i] == xid)
            return x->type[i];
    return ZK_OP_ERROR;
}

static bool js_same(const struct buf *a, const struct buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* js_client walks a client stream; fills |x| with the requests' types. */
static void js_client(const uint8_t *p, size_t len, bool exact, struct js_xids *x,
                      struct js_stats *st, js_fail_fn fail)
{
    struct arena a = {0};
    struct buf e1 = {0}, e2 = {0};
    bool first = true;
    while (len > 0) {
        const uint8_t *pkt;
        size_t plen, used;
        int rc = jute_frame(p, len, JUTE_MAX_BUFFER, &pkt, &plen, &used);
        if (rc <= 0)
            break;
        p += used;
        len -= used;
        st->packets++;
        struct jute_out o1 = {&e1, 0}, o2 = {&e2, 0};
        buf_reset(&e1);
        buf_reset(&e2);
        arena_reset(&a);
        if (first) {
            first = false;
            struct zk_connect_req c, c2;
            struct jute_in in;
            jute_in_init(&in, pkt, plen);
            if (zk_connect_req_decode(&in, &c) != 0) {
                st->bad++;
                continue;
            }
            zk_connect_req_encode(&o1, &c);
            jute_in_init(&in, e1.data, e1.len);
            if (zk_connect_req_decode(&in, &c2) != 0)
                fail("connect: re-decode", st->packets);
            zk_connect_req_encode(&o2, &c2);
            if (!js_same(&e1, &e2))
                fail("connect: unstable round trip", st->packets);
            if (exact && (e1.len != plen || memcmp(e1.data, pkt, plen) != 0))
                fail("connect: not byte-identical", st->packets);
            continue;
        }
        struct zk_request r, r2;
        rc = zk_request_decode(pkt, plen, &a, &r);
        if (rc != 0) {
            st->bad++;
            if (exact)
                fail("request: decode failed", st->packets);
            continue;
        }
        st->requests++;
        if (x->n < JS_MAX_XIDS) {
            x->xid[x->n] = r.h.xid;
            x->type[x->n] = r.h.type;
            x->n++;
        }
        zk_request_encode(&o1, &r);
        if (zk_request_decode(e1.data, e1.len, &a, &r2) != 0)
            fail("request: re-decode", st->packets);
        zk_request_encode(&o2, &r2);
        if (!js_same(&e1, &e2))
            fail("request: unstable round trip", st->packets);
        if (exact && (e1.len != plen || memcmp(e1.data, pkt, plen) != 0))
            fail("request: not byte-identical", st->packets);
    }
    arena_free(&a);
    buf_free(&e1);
    buf_free(&e2);
}

/* js_server walks a server stream, typing answers by |x|. */
static void js_server(const uint8_t *p, size_t len, bool exact, const struct js_xids *x,
                      struct js_stats *st, js_fail_fn fail)
{
    struct arena a = {0};
    struct buf e1 = {0}, e2 = {0};
    bool first = true;
    while (len > 0) {
        const uint8_t *pkt;
        size_t plen, used;
        int rc = jute_frame(p, len, JUTE_MAX_BUFFER, &pkt, &plen, &used);
        if (rc <= 0)
            break;
        p += used;
        len -= used;
        st->packets++;
        struct jute_out o1 = {&e1, 0}, o2 = {&e2, 0};
        buf_reset(&e1);
        buf_reset(&e2);
        arena_reset(&a);
        if (first) {
            first = false;
            struct zk_connect_resp c, c2;
            struct jute_in in;
            jute_in_init(&in, pkt, plen);
            if (zk_connect_resp_decode(&in, &c) != 0) {
                st->bad++;
                continue;
            }
            zk_connect_resp_encode(&o1, &c);
            jute_in_init(&in, e1.data, e1.len);
            if (zk_connect_resp_decode(&in, &c2) != 0)
                fail("connect response: re-decode", st->packets);
            zk_connect_resp_encode(&o2, &c2);
            if (!js_same(&e1, &e2))
                fail("connect response: unstable", st->packets);
            if (exact && (e1.len != plen || memcmp(e1.data, pkt, plen) != 0))
                fail("connect response: not byte-identical", st->packets);
            continue;
        }
        int32_t xid = plen >= 4 ? (int32_t)((uint32_t)pkt[0] << 24 | (uint32_t)pkt[1] << 16 |
                                            (uint32_t)pkt[2] << 8 | pkt[3])
                                : 0;
        int32_t type = js_type_of(x, xid);
        struct zk_reply r, r2;
        if (zk_reply_decode(pkt, plen, type, &a, &r) != 0) {
            st->bad++;
            if (exact)
                fail("reply: decode failed", st->packets);
            continue;
        }
        st->replies++;
        zk_reply_encode(&o1, type, &r);
        if (zk_reply_decode(e1.data, e1.len, type, &a, &r2) != 0)
            fail("reply: re-decode", st->packets);
        zk_reply_encode(&o2, type, &r2);
        if (!js_same(&e1, &e2))
            fail("reply: unstable round trip", st->packets);
        if (exact && (e1.len != plen || memcmp(e1.data, pkt, plen) != 0))
            fail("reply: not byte-identical", st->packets);
    }
    arena_free(&a);
    buf_free(&e1);
    buf_free(&e2);
}

#endif
