/* base/crc32c.h: CRC-32C (Castagnoli), the checksum of WAL records and
 * snapshots, as etcd's WAL uses. */
#ifndef QUORUM_BASE_CRC32C_H
#define QUORUM_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c_update extends |crc| (0 to start) over |n| bytes at |p|. */
uint32_t crc32c_update(uint32_t crc, const void *p, size_t n);

/* crc32c_update_table is the same computed with a table, one byte a step:
 * what crc32c_update uses where the processor has no crc32 instruction
 * (and what tests check the fast path against). */
uint32_t crc32c_update_table(uint32_t crc, const void *p, size_t n);

#endif
