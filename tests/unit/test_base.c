/* Unit tests for base/: the error table, buffers and varints, crc32c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "base/buf.h"
#include "base/crc32c.h"
#include "base/err.h"

Test(err, etcd_texts_and_statuses)
{
    cr_assert_str_eq(q_strerror(QERR_COMPACTED),
                     "etcdserver: mvcc: required revision has been compacted");
    cr_assert_eq(q_err_grpc_status(QERR_COMPACTED), GRPC_STATUS_OUT_OF_RANGE);
    cr_assert_str_eq(q_strerror(QERR_EMPTY_KEY), "etcdserver: key is not provided");
    cr_assert_eq(q_err_grpc_status(QERR_LEASE_NOT_FOUND), GRPC_STATUS_NOT_FOUND);
    cr_assert_eq(q_err_grpc_status(QERR_NO_LEADER), GRPC_STATUS_UNAVAILABLE);
    cr_assert_eq(q_err_grpc_status(QERR_INVALID_SORT), GRPC_STATUS_INVALID_ARGUMENT);
}

Test(err, codes_are_distinct_negative_and_known)
{
    int codes[] = {
#define C_(name, status, text) name,
        QERR_TABLE(C_)
#undef C_
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    cr_assert_eq(n, (size_t)QERR__COUNT);
    for (size_t i = 0; i < n; i++) {
        cr_assert(codes[i] < QERR_BASE);
        cr_assert(q_is_qerr(codes[i]));
        cr_assert_str_neq(q_strerror(codes[i]), "unknown error");
        for (size_t j = i + 1; j < n; j++)
            cr_assert_neq(codes[i], codes[j]);
    }
    cr_assert(!q_is_qerr(-ENOMEM));
    cr_assert(!q_is_qerr(QERR_BASE - 1 - QERR__COUNT));
}

Test(err, errno_mapping)
{
    cr_assert_eq(q_err_grpc_status(-EINVAL), GRPC_STATUS_INVALID_ARGUMENT);
    cr_assert_eq(q_err_grpc_status(-ENOMEM), GRPC_STATUS_RESOURCE_EXHAUSTED);
    cr_assert_eq(q_err_grpc_status(-EIO), GRPC_STATUS_INTERNAL);
    cr_assert_eq(q_err_grpc_status(0), GRPC_STATUS_OK);
    cr_assert_str_eq(q_strerror(-ENOENT), strerror(ENOENT));
}

Test(buf, append_grow_consume)
{
    struct buf b = {0};
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(buf_append_byte(&b, (uint8_t)i), 0);
    cr_assert_eq(b.len, 1000);
    cr_assert_geq(b.cap, 1000);
    buf_consume(&b, 990);
    cr_assert_eq(b.len, 10);
    cr_assert_eq(b.data[0], (uint8_t)990);
    buf_consume(&b, 50);
    cr_assert_eq(b.len, 0);
    buf_free(&b);
    cr_assert_null(b.data);
}

Test(buf, varint_round_trip_and_bounds)
{
    uint64_t vals[] = {0, 1, 127, 128, 300, 16383, 16384, UINT32_MAX, INT64_MAX, UINT64_MAX};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        uint8_t p[10];
        size_t n = varint_put(p, vals[i]);
        cr_assert_eq(n, varint_size(vals[i]));
        uint64_t v = 0;
        cr_assert_eq(varint_get(p, p + n, &v), n);
        cr_assert_eq(v, vals[i]);
        if (n > 1) /* truncated */
            cr_assert_eq(varint_get(p, p + n - 1, &v), 0);
    }
    uint8_t over[11];
    memset(over, 0xff, sizeof(over));
    uint64_t v;
    cr_assert_eq(varint_get(over, over + 11, &v), 0, "an 11-byte varint is refused");
    uint8_t p[300] = {0};
    /* 300 as a varint is ac 02 */
    p[0] = 0xac;
    p[1] = 0x02;
    cr_assert_eq(varint_get(p, p + 2, &v), 2);
    cr_assert_eq(v, 300);
}

/* The fast path (the crc32 instruction, where there is one) agrees with the
 * table at every length and alignment, and across split updates. */
Test(crc32c, fast_path_matches_table)
{
    static uint8_t data[1031];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(data); i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (uint8_t)(x >> 16);
    }
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof(data); n += (n < 40 ? 1 : 97)) {
            uint32_t want = crc32c_update_table(7, data + off, n);
            cr_assert_eq(crc32c_update(7, data + off, n), want, "off %zu len %zu", off, n);
            size_t h = n / 3;
            cr_assert_eq(crc32c_update(crc32c_update(7, data + off, h), data + off + h, n - h),
                         want);
        }
}

Test(crc32c, known_vectors)
{
    /* RFC 3720 B.4: 32 bytes of zeros -> 0x8a9136aa; "123456789" -> 0xe3069283 */
    uint8_t zeros[32] = {0};
    cr_assert_eq(crc32c_update(0, zeros, 32), 0x8a9136aau);
    cr_assert_eq(crc32c_update(0, "123456789", 9), 0xe3069283u);
    /* incremental == one shot */
    uint32_t c = crc32c_update(0, "1234", 4);
    cr_assert_eq(crc32c_update(c, "56789", 5), 0xe3069283u);
}

#include "base/arena.h"
#include "base/sha1.h"

Test(arena, alloc_aligned_zeroed_and_big)
{
    struct arena a = {0};
    for (int i = 0; i < 5000; i++) {
        unsigned char *p = arena_alloc(&a, (size_t)(i % 37) + 1);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % _Alignof(max_align_t), 0);
        for (int k = 0; k < i % 37 + 1; k++)
            cr_assert_eq(p[k], 0);
        memset(p, 0xab, (size_t)(i % 37) + 1);
    }
    char *big = arena_alloc(&a, 1 << 20);
    cr_assert_not_null(big);
    big[(1 << 20) - 1] = 1;
    char *d = arena_dup(&a, "hello", 5);
    cr_assert_eq(memcmp(d, "hello", 5), 0);
    arena_reset(&a);
    cr_assert_eq(a.used, 0);
    cr_assert_not_null(arena_alloc(&a, 10));
    arena_free(&a);
    cr_assert_null(a.head);
}

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < 20; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

Test(sha1, fips_vectors)
{
    uint8_t d[20];
    char h[41];
    sha1("abc", 3, d);
    hex(d, h);
    cr_assert_str_eq(h, "a9993e364706816aba3e25717850c26c9cd0d89d");
    sha1("", 0, d);
    hex(d, h);
    cr_assert_str_eq(h, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
    sha1(m, strlen(m), d);
    hex(d, h);
    cr_assert_str_eq(h, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

Test(buf, bytes_compare_is_key_order)
{
    cr_assert_eq(bytes_compare("a", 1, "a", 1), 0);
    cr_assert_lt(bytes_compare("a", 1, "ab", 2), 0, "a proper prefix sorts first");
    cr_assert_gt(bytes_compare("b", 1, "ab", 2), 0);
    cr_assert_lt(bytes_compare("", 0, "\0", 1), 0);
    cr_assert_gt(bytes_compare("\xff", 1, "\x01", 1), 0, "bytes compare unsigned");
    cr_assert_eq(bytes_compare(NULL, 0, NULL, 0), 0);
}
