/* Unit tests for server/sha256.c (the checksum that ends a Snapshot
 * stream): FIPS 180-4 vectors, and incremental updates across block
 * boundaries equal one shot. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/sha256.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void digest(const void *p, size_t n, char *out)
{
    struct sha256 c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, p, n);
    sha256_final(&c, d);
    hex(d, out);
}

Test(sha256, fips_vectors)
{
    char h[65];
    digest("abc", 3, h);
    cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    digest("", 0, h);
    cr_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    digest(m, strlen(m), h);
    cr_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(sha256, incremental_equals_one_shot)
{
    static uint8_t data[1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7 + 3);
    char one[65], inc[65];
    digest(data, sizeof(data), one);
    struct sha256 c;
    uint8_t d[32];
    sha256_init(&c);
    size_t steps[] = {1, 63, 64, 65, 7, 300, 500};
    size_t off = 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        sha256_update(&c, data + off, steps[i]);
        off += steps[i];
    }
    sha256_final(&c, d);
    hex(d, inc);
    cr_assert_eq(off, sizeof(data));
    cr_assert_str_eq(inc, one);
}
