/* base/sha256.h: SHA-256 (FIPS 180-4), for the digest etcd appends to a
 * Snapshot stream. */
#ifndef QUORUM_BASE_SHA256_H
#define QUORUM_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t block[64];
    size_t used; /* bytes waiting in |block| */
};

/* sha256_init starts a digest; sha256_update hashes |n| bytes at |p|;
 * sha256_final writes the 32-byte digest to |out| (the state is then
 * spent). */
void sha256_init(struct sha256 *c);
void sha256_update(struct sha256 *c, const void *p, size_t n);
void sha256_final(struct sha256 *c, uint8_t out[32]);

#endif
