/* tests/transport/test_codec.c: the raft message codec (src/transport/codec.c):
 * round trips of every message type with every field set, and decoding of
 * truncated, extended and random input, which must fail cleanly. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

static struct raft_entry ents[3];
static struct raft_snapshot snap;
static char payload[3][40];
static char snapdata[1000];

/* sample builds a message of |type| with every field non-zero. */
static struct raft_msg sample(int type)
{
    struct raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = (uint8_t)type;
    m.reject = type % 2 == 1;
    m.force = type == RAFT_MSG_VOTE;
    m.from = 0x8e9e05c52164694dULL;
    m.to = 2;
    m.term = 7 + (uint64_t)type;
    m.log_term = 6;
    m.index = UINT64_MAX - 1;
    m.commit = 300;
    m.reject_hint = 1234567;
    m.ctx = 0xdeadbeef;
    if (type == RAFT_MSG_APP) {
        for (int i = 0; i < 3; i++) {
            snprintf(payload[i], sizeof(payload[i]), "entry-%d", i);
            ents[i] = (struct raft_entry){.term = 5,
                                          .index = 100 + (uint64_t)i,
                                          .type = i == 1 ? RAFT_ENTRY_CONF : RAFT_ENTRY_NORMAL,
                                          .data = i == 2 ? NULL : payload[i],
                                          .len = i == 2 ? 0 : strlen(payload[i])};
        }
        m.entries = ents;
        m.n_entries = 3;
    }
    if (type == RAFT_MSG_SNAP) {
        for (size_t i = 0; i < sizeof(snapdata); i++)
            snapdata[i] = (char)(i * 7);
        memset(&snap, 0, sizeof(snap));
        snap.index = 99;
        snap.term = 4;
        snap.conf.n_voters = 3;
        snap.conf.voters[0] = 1;
        snap.conf.voters[1] = 2;
        snap.conf.voters[2] = UINT64_MAX;
        snap.conf.n_learners = 1;
        snap.conf.learners[0] = 9;
        snap.data = snapdata;
        snap.len = sizeof(snapdata);
        m.snapshot = &snap;
    }
    return m;
}

static void assert_same(const struct raft_msg *a, const struct raft_msg *b)
{
    cr_assert_eq(a->type, b->type);
    cr_assert_eq(a->reject, b->reject);
    cr_assert_eq(a->force, b->force);
    cr_assert_eq(a->from, b->from);
    cr_assert_eq(a->to, b->to);
    cr_assert_eq(a->term, b->term);
    cr_assert_eq(a->log_term, b->log_term);
    cr_assert_eq(a->index, b->index);
    cr_assert_eq(a->commit, b->commit);
    cr_assert_eq(a->reject_hint, b->reject_hint);
    cr_assert_eq(a->ctx, b->ctx);
    cr_assert_eq(a->n_entries, b->n_entries);
    for (size_t i = 0; i < a->n_entries; i++) {
        cr_assert_eq(a->entries[i].term, b->entries[i].term);
        cr_assert_eq(a->entries[i].index, b->entries[i].index);
        cr_assert_eq(a->entries[i].type, b->entries[i].type);
        cr_assert_eq(a->entries[i].len, b->entries[i].len);
        if (a->entries[i].len > 0)
            cr_assert_eq(memcmp(a->entries[i].data, b->entries[i].data, a->entries[i].len), 0);
    }
    cr_assert_eq(a->snapshot == NULL, b->snapshot == NULL);
    if (a->snapshot != NULL) {
        const struct raft_snapshot *x = a->snapshot, *y = b->snapshot;
        cr_assert_eq(x->index, y->index);
        cr_assert_eq(x->term, y->term);
        cr_assert_eq(memcmp(&x->conf, &y->conf, sizeof(x->conf)), 0);
        cr_assert_eq(x->len, y->len);
        cr_assert_eq(memcmp(x->data, y->data, x->len), 0);
    }
}

Test(codec, round_trip_every_type)
{
    for (int type = 0; type < RAFT_MSG__COUNT; type++) {
        struct raft_msg m = sample(type);
        struct buf b = {0};
        cr_assert_eq(transport_msg_encode(&m, &b), 0);
        cr_assert_eq(b.len, transport_msg_size(&m), "type %d", type);
        struct transport_msg_view v;
        cr_assert_eq(transport_msg_decode(b.data, b.len, &v), 0, "type %d", type);
        assert_same(&m, &v.msg);
        transport_msg_view_free(&v);
        buf_free(&b);
    }
}

Test(codec, zero_message_round_trips)
{
    struct raft_msg m;
    memset(&m, 0, sizeof(m));
    struct buf b = {0};
    cr_assert_eq(transport_msg_encode(&m, &b), 0);
    struct transport_msg_view v;
    cr_assert_eq(transport_msg_decode(b.data, b.len, &v), 0);
    assert_same(&m, &v.msg);
    transport_msg_view_free(&v);
    transport_msg_view_free(&v); /* twice is allowed */
    buf_free(&b);
}

Test(codec, encode_appends)
{
    struct raft_msg a = sample(RAFT_MSG_HEARTBEAT), c = sample(RAFT_MSG_APP);
    struct buf b = {0};
    cr_assert_eq(transport_msg_encode(&a, &b), 0);
    size_t first = b.len;
    cr_assert_eq(transport_msg_encode(&c, &b), 0);
    struct transport_msg_view v;
    cr_assert_eq(transport_msg_decode(b.data + first, b.len - first, &v), 0);
    assert_same(&c, &v.msg);
    transport_msg_view_free(&v);
    buf_free(&b);
}

Test(codec, encode_rejects_bad_messages)
{
    struct buf b = {0};
    struct raft_msg m = sample(RAFT_MSG_HEARTBEAT);
    m.type = RAFT_MSG__COUNT;
    cr_assert_eq(transport_msg_encode(&m, &b), -EINVAL);
    m = sample(RAFT_MSG_SNAP);
    snap.conf.n_voters = RAFT_MAX_MEMBERS + 1;
    cr_assert_eq(transport_msg_encode(&m, &b), -EINVAL);
    m = sample(RAFT_MSG_APP);
    ents[0].data = NULL;
    cr_assert_eq(transport_msg_encode(&m, &b), -EINVAL);
    m.entries = NULL;
    cr_assert_eq(transport_msg_encode(&m, &b), -EINVAL);
    cr_assert_eq(b.len, 0);
    buf_free(&b);
}

Test(codec, every_truncation_fails)
{
    for (int type = 0; type < RAFT_MSG__COUNT; type++) {
        struct raft_msg m = sample(type);
        struct buf b = {0};
        cr_assert_eq(transport_msg_encode(&m, &b), 0);
        for (size_t n = 0; n < b.len; n++) {
            /* a fresh copy of exactly n bytes so ASan sees any overread */
            uint8_t *p = malloc(n ? n : 1);
            memcpy(p, b.data, n);
            struct transport_msg_view v;
            cr_assert_eq(transport_msg_decode(p, n, &v), -EINVAL, "type %d len %zu", type, n);
            free(p);
        }
        buf_free(&b);
    }
}

Test(codec, trailing_bytes_fail)
{
    struct raft_msg m = sample(RAFT_MSG_APP);
    struct buf b = {0};
    cr_assert_eq(transport_msg_encode(&m, &b), 0);
    buf_append_byte(&b, 0);
    struct transport_msg_view v;
    cr_assert_eq(transport_msg_decode(b.data, b.len, &v), -EINVAL);
    buf_free(&b);
}

Test(codec, bad_type_flags_and_counts_fail)
{
    struct transport_msg_view v;
    uint8_t badtype[] = {RAFT_MSG__COUNT, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(transport_msg_decode(badtype, sizeof(badtype), &v), -EINVAL);
    uint8_t badflags[] = {0, 8, 1, 2, 3, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(transport_msg_decode(badflags, sizeof(badflags), &v), -EINVAL);
    uint8_t ok[] = {0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(transport_msg_decode(ok, sizeof(ok), &v), 0);
    transport_msg_view_free(&v);
    /* a huge entry count with nothing behind it: rejected, not allocated */
    uint8_t huge[] = {0,    0,    1,    2,    3,    0,    0,    0,    0,    0,
                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    cr_assert_eq(transport_msg_decode(huge, sizeof(huge), &v), -EINVAL);
    /* an entry length past the end */
    uint8_t longent[] = {0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 1, 1, 1, 0, 100, 'x', 'y', 'z', 'w'};
    cr_assert_eq(transport_msg_decode(longent, sizeof(longent), &v), -EINVAL);
    /* a snapshot with 17 voters */
    uint8_t voters[64] = {RAFT_MSG_SNAP, 4, 1, 2, 3, 0, 0, 0, 0, 0, 0, 1, 1, 17};
    for (int i = 0; i < 17; i++)
        voters[14 + i] = 1;
    voters[31] = 0;
    voters[32] = 0;
    cr_assert_eq(transport_msg_decode(voters, 33, &v), -EINVAL);
    /* 16 voters is the limit: the 17th "1" then reads as n_learners = 1
     * (learner 0) and the final 0 as an empty data length */
    voters[13] = 16;
    cr_assert_eq(transport_msg_decode(voters, 33, &v), 0);
    cr_assert_eq(v.snap.conf.n_voters, 16);
    cr_assert_eq(v.snap.conf.n_learners, 1);
    transport_msg_view_free(&v);
    cr_assert_eq(transport_msg_decode(voters, 32, &v), -EINVAL);
    /* an over-long varint */
    uint8_t longvar[] = {0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    cr_assert_eq(transport_msg_decode(longvar, sizeof(longvar), &v), -EINVAL);
}

Test(codec, random_garbage_never_crashes)
{
    srand(42);
    uint8_t p[256];
    int decoded = 0;
    for (int i = 0; i < 200000; i++) {
        size_t n = (size_t)(rand() % 64);
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)rand();
        /* small type and flags values make the fields after them reachable */
        if (n > 0)
            p[0] %= RAFT_MSG__COUNT + 1;
        if (n > 1)
            p[1] &= 7;
        uint8_t *q = malloc(n ? n : 1);
        memcpy(q, p, n);
        struct transport_msg_view v;
        int rv = transport_msg_decode(q, n, &v);
        cr_assert(rv == 0 || rv == -EINVAL);
        if (rv == 0) {
            decoded++;
            struct buf b = {0};
            /* whatever decodes re-encodes to an equal message (not always
             * the same bytes: a varint may have been padded) */
            cr_assert_eq(transport_msg_encode(&v.msg, &b), 0);
            cr_assert_leq(b.len, n);
            struct transport_msg_view w;
            cr_assert_eq(transport_msg_decode(b.data, b.len, &w), 0);
            assert_same(&v.msg, &w.msg);
            transport_msg_view_free(&w);
            buf_free(&b);
        }
        transport_msg_view_free(&v);
        free(q);
    }
    cr_assert_gt(decoded, 0);
}
