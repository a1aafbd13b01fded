/* base/crc32c.c: table-driven CRC-32C, slicing by one byte; the table is
 * built once on first use. */
#include "base/crc32c.h"

static uint32_t table[256];
static int table_ready;

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t crc32c_update(uint32_t crc, const void *p, size_t n)
{
    if (!table_ready)
        build_table();
    const uint8_t *b = p;
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
