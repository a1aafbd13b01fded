/* tests/zk/cut_pieces.h: a client stream fed to src/zk/stream.c's cutter
 * in pieces of a given size, as a front loop's reads hand it on (what is
 * not cut yet is kept and the next piece appended), for the unit tests
 * (test_zk_stream.c) and tests/fuzz/fuzz_jute.c. */
#ifndef QUORUM_TESTS_ZK_CUT_PIECES_H
#define QUORUM_TESTS_ZK_CUT_PIECES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zk/stream.h"

/* cut_pieces feeds |p| (|n| bytes) |step| bytes at a time to a fresh
 * cutter with packets up to |max| bytes, and notes each cut's kind and
 * length in |kinds|/|lens| (the first |cap| of them): ZK_CUT_CONNECT or
 * ZK_CUT_PACKET and the packet's length, or ZK_CUT_RAW and SIZE_MAX where
 * the stream stops being framed (nothing is cut after it). Returns how
 * many cuts there were; aborts on a packet cut past the bytes held. */
static inline size_t cut_pieces(const uint8_t *p, size_t n, size_t step, size_t max,
                                enum zk_cut *kinds, size_t *lens, size_t cap)
{
    struct zk_cutter c = {0};
    uint8_t *held = malloc(n + 1);
    size_t have = 0, count = 0;
    if (held == NULL)
        abort();
    for (size_t at = 0; at < n && !c.raw; at += step) {
        size_t k = n - at < step ? n - at : step;
        memcpy(held + have, p + at, k);
        have += k;
        size_t off = 0;
        for (;;) {
            size_t len = 0;
            enum zk_cut r = zk_cut_next(&c, held + off, have - off, max, &len);
            if (r == ZK_CUT_MORE)
                break;
            if (r == ZK_CUT_RAW) {
                len = SIZE_MAX;
                off = have;
            } else if (len > max || 4 + len > have - off) {
                abort(); /* a packet past what was held */
            }
            if (count < cap) {
                kinds[count] = r;
                lens[count] = len;
            }
            count++;
            if (r == ZK_CUT_RAW)
                break;
            off += 4 + len;
        }
        memmove(held, held + off, have - off);
        have -= off;
    }
    free(held);
    return count;
}

#endif
