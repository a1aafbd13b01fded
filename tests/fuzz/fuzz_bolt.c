/* tests/fuzz/fuzz_bolt.c: libFuzzer target for src/bolt's reader. The
 * input is a whole bbolt file (its meta checksums recomputed unless byte 0
 * says not to: fix_checksums): it is opened (meta pages checked), every
 * bucket is walked in key order, nested buckets up to 6 deep, every sub-
 * bucket is looked up again by name, and bolt_check runs over it. Whatever
 * the bytes, each of these must end in an answer or an error: no crash,
 * no read outside the input, no endless walk. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bolt/bolt.h"

static void walk(bolt_db *db, const struct bolt_bucket *b, int nest)
{
    bolt_cursor c;
    char err[200];
    if (bolt_cursor_open(&c, db, b, err, sizeof(err)) != 0)
        return;
    struct bolt_item it;
    unsigned sum = 0;
    while (bolt_cursor_next(&c, &it) == 1) {
        /* touch every byte handed out */
        for (size_t i = 0; i < it.klen; i++)
            sum += it.key[i];
        for (size_t i = 0; i < it.vlen; i++)
            sum += it.val[i];
        if (!it.bucket || nest >= 6)
            continue;
        struct bolt_bucket s, again;
        if (bolt_item_bucket(db, &it, &s, err, sizeof(err)) != 0)
            continue;
        walk(db, &s, nest + 1);
        if (nest == 0)
            (void)bolt_bucket_get(db, b, it.key, it.klen, &again, err, sizeof(err));
    }
    bolt_cursor_close(&c);
    if (sum == 0x7fffffff)
        abort(); /* keeps the sum alive; practically never */
}

/* fix_checksums: the meta checksums stop nearly every mutation of a meta
 * page at the door. Byte 0 (the low byte of meta 0's page id, which no
 * reader looks at) picks: 0 (as in every real file) recomputes both
 * checksums so that the fields behind them get fuzzed; anything else
 * leaves the file as it is. */
static void fix_checksums(uint8_t *b, size_t n)
{
    if (n < 16 + 64 || b[0] != 0)
        return;
    uint32_t ps = (uint32_t)b[16 + 8] | (uint32_t)b[16 + 9] << 8 | (uint32_t)b[16 + 10] << 16 |
                  (uint32_t)b[16 + 11] << 24;
    if (ps < 512 || ps > 65536 || (ps & (ps - 1)) != 0)
        ps = BOLT_PAGE;
    size_t offs[2] = {16, (size_t)ps + 16};
    for (int i = 0; i < 2; i++) {
        if (offs[i] + 64 > n)
            continue;
        uint64_t h = bolt_fnv64a(b + offs[i], 56);
        for (int j = 0; j < 8; j++)
            b[offs[i] + 56 + j] = (uint8_t)(h >> (8 * j));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly |size| bytes, so that ASan sees any read past it */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    fix_checksums(copy, size);
    bolt_db *db;
    char err[512];
    if (bolt_open_mem(copy, size, &db, err, sizeof(err)) == 0) {
        struct bolt_bucket root = bolt_root(db);
        walk(db, &root, 0);
        (void)bolt_check(db, 6, err, sizeof(err));
        bolt_close(db);
    }
    free(copy);
    return 0;
}
