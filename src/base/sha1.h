/* base/sha1.h: SHA-1 (FIPS 180-4). Only for identifiers: etcd derives member
 * and cluster ids from SHA-1 of the peer URLs and cluster token, and quorum
 * must derive the same ids. Never for security. */
#ifndef QUORUM_BASE_SHA1_H
#define QUORUM_BASE_SHA1_H

#include <stddef.h>
#include <stdint.h>

/* sha1 writes the 20-byte digest of |n| bytes at |p| into |out|. */
void sha1(const void *p, size_t n, uint8_t out[20]);

#endif
