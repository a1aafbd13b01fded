/* base/crc32c.c: CRC-32C. On x86-64 processors with SSE4.2 the crc32
 * instruction does 8 bytes a step (the WAL's records at start-up, HashKV
 * over the whole store); elsewhere a table does one byte a step. The choice
 * and the table are made before main() runs (a constructor), so threads
 * (the WAL writer and the loop) never race to make them. */
#include "base/crc32c.h"

#include <string.h>

static uint32_t table[256];

uint32_t crc32c_update_table(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t update_sse42(uint32_t crc, const void *p,
                                                                size_t n)
{
    const uint8_t *b = p;
    uint64_t c = ~crc;
    while (n > 0 && ((uintptr_t)b & 7) != 0) {
        c = _mm_crc32_u8((uint32_t)c, *b++);
        n--;
    }
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = _mm_crc32_u64(c, w);
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *b++);
    return ~(uint32_t)c;
}
#define HAVE_SSE42_PATH 1
#endif

static uint32_t (*update_fn)(uint32_t, const void *, size_t) = crc32c_update_table;

__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        update_fn = update_sse42;
#endif
}

uint32_t crc32c_update(uint32_t crc, const void *p, size_t n)
{
    return update_fn(crc, p, n);
}
