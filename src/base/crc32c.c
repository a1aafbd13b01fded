/* base/crc32c.c: table-driven CRC-32C, one byte at a time. The table is
 * built before main() runs (a constructor), so threads (the WAL writer and
 * the loop) never race to build it. */
#include "base/crc32c.h"

static uint32_t table[256];

__attribute__((constructor)) static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32c_update(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
