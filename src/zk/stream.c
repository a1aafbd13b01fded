/* zk/stream.c: what a relaying side reads of a ZooKeeper connection's
 * streams (stream.h). */
#include "zk/stream.h"

#include <string.h>

#include "zk/jute.h"

bool zk_is_4lw(const uint8_t *p)
{
    static const char *const words[] = {"ruok", "srvr", "stat", "mntr", "conf", "cons",
                                        "crst", "dump", "envi", "gtmk", "stmk", "srst",
                                        "wchc", "wchp", "wchs", "dirs", "isro", "hash"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (memcmp(p, words[i], 4) == 0)
            return true;
    return false;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

enum zk_cut zk_cut_next(struct zk_cutter *c, const uint8_t *p, size_t n, size_t max_packet,
                        size_t *len)
{
    if (c->raw)
        return ZK_CUT_RAW;
    if (n < 4)
        return ZK_CUT_MORE;
    /* the handler's side tells a four-letter word by the stream's first
     * four bytes, as ZooKeeper does */
    if (!c->connect_seen && zk_is_4lw(p)) {
        c->raw = true;
        return ZK_CUT_RAW;
    }
    const uint8_t *pkt;
    size_t l, used;
    int rc = jute_frame(p, n, max_packet, &pkt, &l, &used);
    if (rc < 0) { /* the handler's side refuses it */
        c->raw = true;
        return ZK_CUT_RAW;
    }
    if (rc == 0)
        return ZK_CUT_MORE;
    *len = l;
    if (!c->connect_seen) {
        c->connect_seen = true;
        return ZK_CUT_CONNECT;
    }
    return ZK_CUT_PACKET;
}

/* the packet going by ended: what it was counts now (an answer's bytes
 * all went before anything after it may) */
static uint64_t packet_end(struct zk_answers *a)
{
    uint64_t n = a->answering ? 1 : 0;
    if (a->connecting)
        a->established = a->connect_ok;
    a->answering = a->connecting = false;
    return n;
}

uint64_t zk_answers_count(struct zk_answers *a, const uint8_t *p, size_t n)
{
    uint64_t answers = 0;
    size_t i = 0;
    while (i < n && !a->broken) {
        if (a->skip > 0) {
            size_t k = n - i < a->skip ? n - i : (size_t)a->skip;
            a->skip -= k;
            i += k;
            if (a->skip == 0)
                answers += packet_end(a);
            continue;
        }
        /* length and xid; the ConnectResponse's length, version, timeout */
        size_t need = a->connect_seen ? 8 : 12;
        size_t k = need - a->have < n - i ? need - a->have : n - i;
        memcpy(a->hdr + a->have, p + i, k);
        a->have += k;
        i += k;
        if (a->have < need)
            break;
        a->have = 0;
        uint64_t l = be32(a->hdr);
        if (l + 4 < need) { /* not a reply */
            a->broken = true;
            break;
        }
        a->skip = l + 4 - need;
        if (!a->connect_seen) {
            a->connect_seen = true;
            a->connecting = true;
            a->connect_ok = (int32_t)be32(a->hdr + 8) > 0;
        } else {
            a->answering = (int32_t)be32(a->hdr + 4) != -1;
        }
        if (a->skip == 0)
            answers += packet_end(a);
    }
    return answers;
}
