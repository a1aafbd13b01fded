/* tests/zk/test_jute.c: src/zk's jute codec (jute.c, proto.c).
 *
 * The byte layouts below are zookeeper.jute's (ZooKeeper 3.8); the
 * captured streams under tests/fuzz/corpus/fuzz_jute were recorded from
 * kazoo and zkCli talking to Apache ZooKeeper 3.8 (tests/zk/capture_jute.py),
 * so decoding and re-encoding them byte for byte proves the tables against
 * the real thing. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jute_stream.h"
#include "zk/jute.h"
#include "zk/proto.h"

#define BYTES(s) ((struct jute_bytes){(const uint8_t *)(s), (int32_t)(sizeof(s) - 1)})

static void fail_cb(const char *what, size_t packet)
{
    cr_assert_fail("%s (packet %zu)", what, packet);
}

Test(jute, primitives_big_endian)
{
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    jute_put_int(&o, 0x01020304);
    jute_put_long(&o, -2);
    jute_put_bool(&o, true);
    jute_put_bytes(&o, BYTES("ab"));
    jute_put_bytes(&o, (struct jute_bytes){NULL, -1});
    cr_assert_eq(o.err, 0);
    const uint8_t want[] = {1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1,
                            0, 0, 0, 2, 'a', 'b', 0xff, 0xff, 0xff, 0xff};
    cr_assert_eq(b.len, sizeof(want));
    cr_assert_arr_eq(b.data, want, sizeof(want));

    struct jute_in in;
    jute_in_init(&in, b.data, b.len);
    cr_assert_eq(jute_get_int(&in), 0x01020304);
    cr_assert_eq(jute_get_long(&in), -2);
    cr_assert(jute_get_bool(&in));
    struct jute_bytes s = jute_get_bytes(&in);
    cr_assert_eq(s.len, 2);
    cr_assert_arr_eq(s.p, "ab", 2);
    s = jute_get_bytes(&in);
    cr_assert_eq(s.len, -1);
    cr_assert_null(s.p);
    cr_assert_eq(in.err, 0);
    cr_assert_eq(jute_in_left(&in), 0);
    /* past the end: sticky error, zero values */
    cr_assert_eq(jute_get_int(&in), 0);
    cr_assert_eq(in.err, -EBADMSG);
    cr_assert_eq(jute_get_long(&in), 0);
    cr_assert_eq(in.err, -EBADMSG);
    buf_free(&b);
}

Test(jute, bytes_length_checked)
{
    /* a length above what is left, and below -1 */
    const uint8_t over[] = {0, 0, 0, 5, 'a', 'b'};
    struct jute_in in;
    jute_in_init(&in, over, sizeof(over));
    struct jute_bytes s = jute_get_bytes(&in);
    cr_assert_eq(in.err, -EBADMSG);
    cr_assert_eq(s.len, -1);
    const uint8_t neg[] = {0xff, 0xff, 0xff, 0xfe};
    jute_in_init(&in, neg, sizeof(neg));
    jute_get_bytes(&in);
    cr_assert_eq(in.err, -EBADMSG);
}

Test(jute, vector_count_checked_before_allocation)
{
    /* GetChildrenResponse claiming 2^31-1 strings in 8 bytes: refused
     * without allocating 2^31 elements */
    const uint8_t p[] = {0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    struct jute_in in;
    jute_in_init(&in, p, sizeof(p));
    struct arena a = {0};
    struct zk_children_resp r;
    cr_assert_eq(jute_decode(&zk_rec_get_children_resp, &in, &r, &a), -EBADMSG);
    cr_assert_eq(a.head, NULL, "nothing allocated");
    /* an ACL vector of 3 in the room of 2 minimal ACLs (12 bytes each) */
    const uint8_t q[] = {0, 0, 0, 3, 0, 0, 0, 31, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, 0, 31, 0, 0, 0, 0, 0, 0, 0, 0};
    struct zk_get_acl_resp g;
    jute_in_init(&in, q, sizeof(q));
    cr_assert_eq(jute_decode(&zk_rec_get_acl_resp, &in, &g, &a), -EBADMSG);
    /* -1 is a null vector, -2 malformed */
    const uint8_t nul[] = {0xff, 0xff, 0xff, 0xff};
    jute_in_init(&in, nul, sizeof(nul));
    cr_assert_eq(jute_decode(&zk_rec_get_children_resp, &in, &r, &a), 0);
    cr_assert_eq(r.children.n, -1);
    const uint8_t m2[] = {0xff, 0xff, 0xff, 0xfe};
    jute_in_init(&in, m2, sizeof(m2));
    cr_assert_eq(jute_decode(&zk_rec_get_children_resp, &in, &r, &a), -EBADMSG);
    arena_free(&a);
}

Test(jute, record_min_sizes)
{
    cr_assert_eq(jute_record_min(&zk_rec_stat), 68); /* 6 longs, 5 ints */
    cr_assert_eq(jute_record_min(&zk_rec_acl), 12);
    cr_assert_eq(jute_record_min(&zk_rec_reply_header), 16);
    cr_assert_eq(jute_record_min(&zk_rec_multi_header), 9);
}

Test(jute, framing)
{
    const uint8_t *pkt;
    size_t plen, used;
    const uint8_t p[] = {0, 0, 0, 2, 'h', 'i', 0, 0};
    cr_assert_eq(jute_frame(p, 3, 100, &pkt, &plen, &used), 0);
    cr_assert_eq(jute_frame(p, 5, 100, &pkt, &plen, &used), 0);
    cr_assert_eq(jute_frame(p, sizeof(p), 100, &pkt, &plen, &used), 1);
    cr_assert_eq(plen, 2);
    cr_assert_eq(used, 6);
    cr_assert_eq(pkt, p + 4);
    /* over the limit, and negative: ZooKeeper's "Len error" */
    cr_assert_eq(jute_frame(p, sizeof(p), 1, &pkt, &plen, &used), -EMSGSIZE);
    const uint8_t big[] = {0x00, 0x10, 0x00, 0x00}; /* 1 MiB: one over jute.maxbuffer */
    cr_assert_eq(jute_frame(big, 4, JUTE_MAX_BUFFER, &pkt, &plen, &used), -EMSGSIZE);
    const uint8_t neg[] = {0x80, 0, 0, 0};
    cr_assert_eq(jute_frame(neg, 4, JUTE_MAX_BUFFER, &pkt, &plen, &used), -EMSGSIZE);
    /* writing: the prefix filled in afterwards */
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    size_t at = jute_frame_begin(&o);
    jute_put_int(&o, 7);
    jute_frame_end(&o, at);
    const uint8_t want[] = {0, 0, 0, 4, 0, 0, 0, 7};
    cr_assert_arr_eq(b.data, want, sizeof(want));
    buf_free(&b);
}

Test(jute, connect_request_read_only_optional)
{
    /* as kazoo 2.8 sends it (captured): protocol 0, lastZxidSeen 0,
     * timeOut 10000, session 0, a 16-byte zero password, readOnly false */
    uint8_t p[45] = {0};
    p[14] = 0x27; /* timeOut at 12 */
    p[15] = 0x10;
    p[27] = 16; /* passwd length at 24 */
    struct jute_in in;
    struct zk_connect_req c;
    jute_in_init(&in, p, sizeof(p));
    cr_assert_eq(zk_connect_req_decode(&in, &c), 0);
    cr_assert_eq(c.timeout, 10000);
    cr_assert_eq(c.passwd.len, 16);
    cr_assert(c.has_read_only);
    cr_assert_not(c.read_only);
    /* a 3.3-era client: no readOnly byte */
    jute_in_init(&in, p, 44);
    cr_assert_eq(zk_connect_req_decode(&in, &c), 0);
    cr_assert_not(c.has_read_only);
    /* truncated inside the password */
    jute_in_init(&in, p, 30);
    cr_assert_eq(zk_connect_req_decode(&in, &c), -EBADMSG);

    struct buf b = {0};
    struct jute_out o = {&b, 0};
    struct zk_connect_resp r = {0, 30000, 0x1234, {(const uint8_t *)"0123456789abcdef", 16}, false};
    cr_assert_eq(zk_connect_resp_encode(&o, &r), 0);
    cr_assert_eq(b.len, 4 + 4 + 8 + 4 + 16 + 1);
    struct zk_connect_resp r2;
    jute_in_init(&in, b.data, b.len);
    cr_assert_eq(zk_connect_resp_decode(&in, &r2), 0);
    cr_assert_eq(r2.timeout, 30000);
    cr_assert_eq(r2.session_id, 0x1234);
    cr_assert_arr_eq(r2.passwd.p, "0123456789abcdef", 16);
    buf_free(&b);
}

/* every prefix of a valid request is malformed (or, for a prefix that ends
 * exactly after the header of a body-less request, valid): never a crash,
 * never a read past the end (ASan run) */
Test(jute, truncated_requests)
{
    struct arena a = {0};
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    struct zk_acl acl = {ZK_PERM_ALL, {BYTES("world"), BYTES("anyone")}};
    struct zk_request r = {.h = {5, ZK_OP_CREATE}, .rec = &zk_rec_create_req};
    r.u.create = (struct zk_create_req){BYTES("/a"), BYTES("data"), {&acl, 1}, 0, 0};
    cr_assert_eq(zk_request_encode(&o, &r), 0);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, b.data, n);
        struct zk_request d;
        cr_assert_eq(zk_request_decode(cut, n, &a, &d), -EBADMSG, "prefix %zu", n);
        free(cut);
        arena_reset(&a);
    }
    struct zk_request d;
    cr_assert_eq(zk_request_decode(b.data, b.len, &a, &d), 0);
    cr_assert_eq(d.h.xid, 5);
    cr_assert_eq(d.u.create.acl.n, 1);
    struct zk_acl *got = d.u.create.acl.v;
    cr_assert_eq(got->perms, 31);
    cr_assert_arr_eq(got->id.scheme.p, "world", 5);
    cr_assert_arr_eq(d.u.create.data.p, "data", 4);
    arena_free(&a);
    buf_free(&b);
}

Test(jute, unknown_type_keeps_header)
{
    const uint8_t p[] = {0, 0, 0, 9, 0, 0, 0, 99};
    struct arena a = {0};
    struct zk_request r;
    cr_assert_eq(zk_request_decode(p, sizeof(p), &a, &r), -ENOTSUP);
    cr_assert_eq(r.h.xid, 9);
    cr_assert_eq(r.h.type, 99);
    /* ping: the header is the whole request */
    const uint8_t ping[] = {0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11};
    cr_assert_eq(zk_request_decode(ping, sizeof(ping), &a, &r), 0);
    cr_assert_eq(r.h.type, ZK_OP_PING);
    cr_assert_null(r.rec);
    arena_free(&a);
}

Test(jute, multi_round_trip_and_bad_op)
{
    struct arena a = {0};
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    struct zk_multi_op ops[3] = {
        {ZK_OP_CREATE, .u.create = {BYTES("/t"), BYTES("1"), {NULL, 0}, 0, 0}},
        {ZK_OP_CHECK, .u.pv = {BYTES("/t"), 0}},
        {ZK_OP_DELETE, .u.pv = {BYTES("/t"), -1}},
    };
    struct zk_request r = {.h = {3, ZK_OP_MULTI}, .multi = ops, .n_multi = 3};
    cr_assert_eq(zk_request_encode(&o, &r), 0);
    struct zk_request d;
    cr_assert_eq(zk_request_decode(b.data, b.len, &a, &d), 0);
    cr_assert_eq(d.n_multi, 3);
    cr_assert_eq(d.multi[1].type, ZK_OP_CHECK);
    cr_assert_eq(d.multi[2].u.pv.version, -1);
    cr_assert_arr_eq(d.multi[0].u.create.path.p, "/t", 2);
    /* an op a multi cannot hold (sync, type 9) in place of the check */
    b.data[8 + 9 + (4 + 2) + (4 + 1) + 4 + 4 + 3] = ZK_OP_SYNC; /* 2nd header's type, low byte */
    cr_assert_eq(zk_request_decode(b.data, b.len, &a, &d), -EBADMSG);
    /* no done header */
    cr_assert_eq(zk_request_decode(b.data, 8 + 9, &a, &d), -EBADMSG);

    /* a failed multi's answer: an error per op, then done */
    struct zk_multi_result res[2] = {{.type = ZK_OP_ERROR, .err = ZK_NODEEXISTS},
                                     {.type = ZK_OP_ERROR, .err = ZK_RUNTIMEINCONSISTENCY}};
    buf_reset(&b);
    cr_assert_eq(zk_multi_resp_encode(&o, res, 2), 0);
    cr_assert_eq(b.len, 2 * (9 + 4) + 9);
    const uint8_t first[] = {0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0x92,
                             0xff, 0xff, 0xff, 0x92};
    cr_assert_arr_eq(b.data, first, sizeof(first));
    struct jute_in in;
    jute_in_init(&in, b.data, b.len);
    struct zk_multi_result *got;
    size_t n;
    cr_assert_eq(zk_multi_resp_decode(&in, &a, &got, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(got[1].err, ZK_RUNTIMEINCONSISTENCY);
    arena_free(&a);
    buf_free(&b);
}

Test(jute, names)
{
    cr_assert_str_eq(zk_op_name(ZK_OP_GET_CHILDREN2), "getChildren2");
    cr_assert_str_eq(zk_op_name(12345), "unknown");
    cr_assert_str_eq(zk_err_name(ZK_NOCHILDRENFOREPHEMERALS), "NOCHILDRENFOREPHEMERALS");
    cr_assert_null(zk_err_name(-9999));
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* The corpus's captures (mode byte 1: u32 length, the client's bytes, the
 * server's bytes) decode and re-encode byte for byte. */
Test(jute, real_traffic_byte_identical)
{
    DIR *d = opendir(ZK_CORPUS_DIR);
    cr_assert_not_null(d);
    struct dirent *e;
    size_t captures = 0, requests = 0, replies = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "capture-", 8) != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", ZK_CORPUS_DIR, e->d_name);
        size_t len;
        uint8_t *p = slurp(path, &len);
        cr_assert(len >= 5 && p[0] == 1, "%s: mode 1", e->d_name);
        size_t clen = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        cr_assert(clen <= len - 5);
        struct js_xids x = {.n = 0};
        struct js_stats st = {0};
        js_client(p + 5, clen, true, &x, &st, fail_cb);
        cr_assert_eq(st.bad, 0, "%s: client packets that did not decode", e->d_name);
        js_server(p + 5 + clen, len - 5 - clen, true, &x, &st, fail_cb);
        cr_assert_eq(st.bad, 0, "%s: server packets that did not decode", e->d_name);
        requests += st.requests;
        replies += st.replies;
        captures++;
        free(p);
    }
    closedir(d);
    cr_assert_geq(captures, 2);
    cr_assert_geq(requests, 30);
    cr_assert_geq(replies, 30);
}
