/* Tests for mvcc/codec.c: revision keys and the mvccpb.KeyValue codec. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "mvcc/mvcc_int.h"

Test(revkey, layout)
{
    uint8_t k[MVCC_REVKEY_MAX];
    size_t n = mvcc_revkey_put(k, 0x0102030405060708, 9, false);
    static const uint8_t want[] = {1, 2, 3, 4, 5, 6, 7, 8, '_', 0, 0, 0, 0, 0, 0, 0, 9};
    cr_assert_eq(n, 17);
    cr_assert_arr_eq(k, want, 17);
    n = mvcc_revkey_put(k, 5, 0, true);
    cr_assert_eq(n, 18);
    cr_assert_eq(k[17], 't');
    cr_assert_eq(k[7], 5);
}

Test(revkey, parse_round_trip_and_errors)
{
    uint8_t k[MVCC_REVKEY_MAX];
    int64_t main, sub;
    bool tomb;
    size_t n = mvcc_revkey_put(k, 123456789, 42, true);
    cr_assert_eq(mvcc_revkey_parse(k, n, &main, &sub, &tomb), 0);
    cr_assert_eq(main, 123456789);
    cr_assert_eq(sub, 42);
    cr_assert(tomb);
    n = mvcc_revkey_put(k, 7, 0, false);
    cr_assert_eq(mvcc_revkey_parse(k, n, &main, &sub, &tomb), 0);
    cr_assert(!tomb);
    cr_assert_eq(mvcc_revkey_parse(k, 16, &main, &sub, &tomb), QERR_CORRUPT);
    k[17] = 'x';
    cr_assert_eq(mvcc_revkey_parse(k, 18, &main, &sub, &tomb), QERR_CORRUPT);
    k[8] = '.';
    cr_assert_eq(mvcc_revkey_parse(k, 17, &main, &sub, &tomb), QERR_CORRUPT);
}

static int revkey_cmp(int64_t am, int64_t as, bool at, int64_t bm, int64_t bs, bool bt)
{
    uint8_t a[MVCC_REVKEY_MAX], b[MVCC_REVKEY_MAX];
    size_t an = mvcc_revkey_put(a, am, as, at), bn = mvcc_revkey_put(b, bm, bs, bt);
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an < bn ? -1 : an > bn);
}

Test(revkey, byte_order_is_revision_order)
{
    cr_assert_lt(revkey_cmp(1, 0, false, 2, 0, false), 0);
    cr_assert_lt(revkey_cmp(2, 0, false, 2, 1, false), 0);
    cr_assert_lt(revkey_cmp(2, 255, false, 2, 256, false), 0);
    cr_assert_lt(revkey_cmp(255, 9, false, 256, 0, false), 0);
    cr_assert_lt(revkey_cmp(2, 1, true, 2, 2, false), 0);
    cr_assert_lt(revkey_cmp(2, 1, false, 2, 1, true), 0);
    cr_assert_lt(revkey_cmp(1LL << 40, 0, true, (1LL << 40) + 1, 0, false), 0);
}

Test(kvpb, canonical_bytes)
{
    /* Bytes from python protobuf: KeyValue(key=b'foo', create_revision=2,
     * mod_revision=3, version=1, value=b'bar', lease=300). */
    static const uint8_t want[] = {0x0a, 0x03, 'f',  'o', 'o', 0x10, 0x02, 0x18, 0x03, 0x20,
                                   0x01, 0x2a, 0x03, 'b', 'a', 'r',  0x30, 0xac, 0x02};
    struct mvcc_kv kv = {.key = (const uint8_t *)"foo",
                         .key_len = 3,
                         .value = (const uint8_t *)"bar",
                         .value_len = 3,
                         .create_revision = 2,
                         .mod_revision = 3,
                         .version = 1,
                         .lease = 300};
    struct buf b = {0};
    cr_assert_eq(mvcc_kv_encode(&b, &kv), 0);
    cr_assert_eq(b.len, sizeof(want));
    cr_assert_eq(mvcc_kv_encoded_size(&kv), sizeof(want));
    cr_assert_arr_eq(b.data, want, sizeof(want));
    buf_free(&b);
}

Test(kvpb, zero_fields_omitted_and_negative_lease)
{
    /* KeyValue(key=b'k', mod_revision=129, lease=-1) */
    static const uint8_t want[] = {0x0a, 0x01, 'k',  0x18, 0x81, 0x01, 0x30, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    struct mvcc_kv kv = {
        .key = (const uint8_t *)"k", .key_len = 1, .mod_revision = 129, .lease = -1};
    struct buf b = {0};
    cr_assert_eq(mvcc_kv_encode(&b, &kv), 0);
    cr_assert_eq(b.len, sizeof(want));
    cr_assert_arr_eq(b.data, want, sizeof(want));
    struct mvcc_kv d;
    cr_assert_eq(mvcc_kv_decode(b.data, b.len, &d), 0);
    cr_assert_eq(d.lease, -1);
    cr_assert_eq(d.mod_revision, 129);
    cr_assert_eq(d.create_revision, 0);
    cr_assert_eq(d.value_len, 0);
    cr_assert_not_null(d.value);
    buf_free(&b);

    struct mvcc_kv empty = {0};
    cr_assert_eq(mvcc_kv_encode(&b, &empty), 0);
    cr_assert_eq(b.len, 0);
    buf_free(&b);
}

Test(kvpb, round_trip_long_fields)
{
    static uint8_t key[300], val[70000];
    memset(key, 'k', sizeof(key));
    memset(val, 'v', sizeof(val));
    struct mvcc_kv kv = {.key = key,
                         .key_len = sizeof(key),
                         .value = val,
                         .value_len = sizeof(val),
                         .create_revision = 1LL << 40,
                         .mod_revision = (1LL << 40) + 5,
                         .version = 77,
                         .lease = 0x7fffffffffffffff};
    struct buf b = {0};
    cr_assert_eq(mvcc_kv_encode(&b, &kv), 0);
    cr_assert_eq(b.data[0], 0x0a);
    cr_assert_eq(b.data[1], 0xac); /* 300 = 0xac 0x02 */
    cr_assert_eq(b.data[2], 0x02);
    struct mvcc_kv d;
    cr_assert_eq(mvcc_kv_decode(b.data, b.len, &d), 0);
    cr_assert_eq(d.key_len, sizeof(key));
    cr_assert_eq(memcmp(d.key, key, sizeof(key)), 0);
    cr_assert_eq(d.value_len, sizeof(val));
    cr_assert_eq(memcmp(d.value, val, sizeof(val)), 0);
    cr_assert_eq(d.create_revision, kv.create_revision);
    cr_assert_eq(d.mod_revision, kv.mod_revision);
    cr_assert_eq(d.version, 77);
    cr_assert_eq(d.lease, kv.lease);
    cr_assert_eq(d.raw, b.data);
    cr_assert_eq(d.raw_len, b.len);
    buf_free(&b);
}

Test(kvpb, decode_skips_unknown_and_rejects_garbage)
{
    /* key "a", unknown field 9 (varint), unknown field 10 (bytes), version 3 */
    static const uint8_t ok[] = {0x0a, 0x01, 'a', 0x48, 0x05, 0x52, 0x02, 'x', 'y', 0x20, 0x03};
    struct mvcc_kv d;
    cr_assert_eq(mvcc_kv_decode(ok, sizeof(ok), &d), 0);
    cr_assert_eq(d.key_len, 1);
    cr_assert_eq(d.version, 3);

    static const uint8_t trunc[] = {0x0a, 0x05, 'a'};
    cr_assert_eq(mvcc_kv_decode(trunc, sizeof(trunc), &d), QERR_CORRUPT);
    static const uint8_t badwt[] = {0x08, 0x01}; /* key as varint */
    cr_assert_eq(mvcc_kv_decode(badwt, sizeof(badwt), &d), QERR_CORRUPT);
    static const uint8_t group[] = {0x0b};
    cr_assert_eq(mvcc_kv_decode(group, sizeof(group), &d), QERR_CORRUPT);
    static const uint8_t badvarint[] = {0x10, 0x80};
    cr_assert_eq(mvcc_kv_decode(badvarint, sizeof(badvarint), &d), QERR_CORRUPT);
}
