/* tests/etcdwal/walgen.h: write etcd 3.4-format WAL segments by hand (the
 * framing, walpb records and the chained CRC-32C of etcdwal.h), for cases
 * the real etcd does not produce on demand: overwritten tails, gaps,
 * conflicting metadata, entries quorum cannot translate. */
#ifndef QUORUM_TESTS_ETCDWAL_WALGEN_H
#define QUORUM_TESTS_ETCDWAL_WALGEN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "etcdserver.pb-c.h"
#include "raftpb.pb-c.h"
#include "walpb.pb-c.h"

struct walgen {
    uint8_t *p;
    size_t len, cap;
    uint32_t crc;
};

static inline void walgen_bytes(struct walgen *g, const void *d, size_t n)
{
    if (g->len + n > g->cap) {
        g->cap = (g->len + n) * 2 + 4096;
        g->p = realloc(g->p, g->cap);
    }
    memcpy(g->p + g->len, d, n);
    g->len += n;
}

/* walgen_record appends one frame of |type| (a crc record restates the
 * running CRC; any other extends it over |data|). */
static inline void walgen_record(struct walgen *g, int64_t type, const uint8_t *data, size_t n)
{
    Walpb__Record rec = WALPB__RECORD__INIT;
    rec.has_type = 1;
    rec.type = type;
    rec.has_crc = 1;
    if (type == 4) {
        rec.crc = g->crc; /* a crc record restates the running value */
    } else {
        g->crc = crc32c_update(g->crc, data, n);
        rec.crc = g->crc;
        rec.has_data = data != NULL;
        rec.data.data = (uint8_t *)data;
        rec.data.len = n;
    }
    size_t rl = walpb__record__get_packed_size(&rec);
    uint8_t *buf = malloc(rl + 8);
    walpb__record__pack(&rec, buf);
    size_t pad = (8 - rl % 8) % 8;
    uint64_t word = rl | (pad ? (uint64_t)(0x80 | pad) << 56 : 0);
    uint8_t w[8];
    for (int i = 0; i < 8; i++)
        w[i] = (uint8_t)(word >> (8 * i));
    walgen_bytes(g, w, 8);
    memset(buf + rl, 0, pad);
    walgen_bytes(g, buf, rl + pad);
    free(buf);
}

static inline void walgen_meta(struct walgen *g, uint64_t node, uint64_t cluster)
{
    Etcdserverpb__Metadata m = ETCDSERVERPB__METADATA__INIT;
    m.has_nodeid = m.has_clusterid = 1;
    m.nodeid = node;
    m.clusterid = cluster;
    uint8_t b[64];
    walgen_record(g, 1, b, etcdserverpb__metadata__pack(&m, b));
}

static inline void walgen_snap(struct walgen *g, uint64_t index, uint64_t term)
{
    Walpb__Snapshot s = WALPB__SNAPSHOT__INIT;
    s.has_index = s.has_term = 1;
    s.index = index;
    s.term = term;
    uint8_t b[64];
    walgen_record(g, 5, b, walpb__snapshot__pack(&s, b));
}

static inline void walgen_state(struct walgen *g, uint64_t term, uint64_t vote, uint64_t commit)
{
    Raftpb__HardState h = RAFTPB__HARD_STATE__INIT;
    h.has_term = h.has_vote = h.has_commit = 1;
    h.term = term;
    h.vote = vote;
    h.commit = commit;
    uint8_t b[64];
    walgen_record(g, 3, b, raftpb__hard_state__pack(&h, b));
}

static inline void walgen_entry(struct walgen *g, uint64_t term, uint64_t index, int type,
                                const uint8_t *data, size_t n)
{
    Raftpb__Entry e = RAFTPB__ENTRY__INIT;
    e.has_term = e.has_index = e.has_type = 1;
    e.term = term;
    e.index = index;
    e.type = (Raftpb__EntryType)type;
    e.has_data = data != NULL;
    e.data.data = (uint8_t *)data;
    e.data.len = n;
    size_t sz = raftpb__entry__get_packed_size(&e);
    uint8_t *b = malloc(sz + 1);
    walgen_record(g, 2, b, raftpb__entry__pack(&e, b));
    free(b);
}

/* walgen_add_node appends a ConfChangeAddNode entry for |id|. */
static inline void walgen_add_node(struct walgen *g, uint64_t term, uint64_t index, uint64_t id,
                                   const char *peer_url)
{
    char ctx[512];
    snprintf(ctx, sizeof(ctx), "{\"id\":%llu,\"peerURLs\":[\"%s\"],\"name\":\"\"}",
             (unsigned long long)id, peer_url);
    Raftpb__ConfChange cc = RAFTPB__CONF_CHANGE__INIT;
    cc.has_type = cc.has_node_id = cc.has_context = 1;
    cc.type = RAFTPB__CONF_CHANGE_TYPE__ConfChangeAddNode;
    cc.node_id = id;
    cc.context.data = (uint8_t *)ctx;
    cc.context.len = strlen(ctx);
    uint8_t b[1024];
    walgen_entry(g, term, index, 1, b, raftpb__conf_change__pack(&cc, b));
}

static inline int walgen_write(const struct walgen *g, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(g->p, 1, g->len, f);
    fclose(f);
    return n == g->len ? 0 : -1;
}

#endif
