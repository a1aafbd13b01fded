/* Tests for server/zk_write.c: the ZooKeeper write's log entry packed and
 * unpacked by hand, held to protobuf-c's own codec on the same messages:
 * the same bytes out, the same fields back, and every layout but
 * protobuf-c's own left to protobuf-c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/zk_write.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13; /* xorshift64 */
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* a value of one of the sizes that matter: 0 (left out), small, the
 * 7-bit boundaries, negative (ten bytes) */
static uint64_t any_varint(void)
{
    switch (next() % 6) {
    case 0:
        return 0;
    case 1:
        return next() % 200;
    case 2:
        return (1ull << (7 * (1 + next() % 9))) - (next() % 2);
    case 3:
        return 0 - (uint64_t)(1 + next() % 1000);
    default:
        return next();
    }
}

struct sample {
    Quorumzk__Write w;
    char *ids[4];
    char id_text[4][300];
    uint8_t req[600];
};

static void make(struct sample *x)
{
    memset(x, 0, sizeof(*x));
    x->w = (Quorumzk__Write)QUORUMZK__WRITE__INIT;
    x->w.session = (int64_t)any_varint();
    x->w.now_ms = (int64_t)any_varint();
    x->w.member = any_varint();
    x->w.n_ids = next() % 4;
    for (size_t i = 0; i < x->w.n_ids; i++) {
        size_t l = next() % 3 == 0 ? 0 : next() % 299; /* empty ids too */
        for (size_t k = 0; k < l; k++)
            x->id_text[i][k] = (char)(1 + next() % 255);
        x->ids[i] = x->id_text[i];
    }
    x->w.ids = x->w.n_ids ? x->ids : NULL;
    x->w.request.len = next() % 4 == 0 ? 0 : next() % sizeof(x->req);
    for (size_t k = 0; k < x->w.request.len; k++)
        x->req[k] = (uint8_t)next();
    x->w.request.data = x->w.request.len ? x->req : NULL;
}

static void assert_same(const Quorumzk__Write *a, const Quorumzk__Write *b)
{
    cr_assert_eq(a->session, b->session);
    cr_assert_eq(a->now_ms, b->now_ms);
    cr_assert_eq(a->member, b->member);
    cr_assert_eq(a->n_ids, b->n_ids);
    for (size_t i = 0; i < a->n_ids; i++)
        cr_assert_str_eq(a->ids[i], b->ids[i]);
    cr_assert_eq(a->request.len, b->request.len);
    if (a->request.len)
        cr_assert_eq(memcmp(a->request.data, b->request.data, a->request.len), 0);
    cr_assert_eq(b->base.descriptor, &quorumzk__write__descriptor);
    cr_assert_eq(b->base.n_unknown_fields, 0);
}

Test(zk_write, packs_what_protobuf_c_packs)
{
    for (int round = 0; round < 5000; round++) {
        struct sample x;
        make(&x);
        size_t n = protobuf_c_message_get_packed_size(&x.w.base);
        cr_assert_eq(zk_write_size(&x.w), n, "round %d", round);
        uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
        cr_assert_eq(protobuf_c_message_pack(&x.w.base, want), n);
        cr_assert_eq(zk_write_pack(&x.w, got), n);
        cr_assert_eq(memcmp(want, got, n), 0, "round %d", round);
        free(want);
        free(got);
    }
}

Test(zk_write, unpacks_what_protobuf_c_unpacks)
{
    for (int round = 0; round < 5000; round++) {
        struct sample x;
        make(&x);
        size_t n = zk_write_size(&x.w);
        uint8_t *b = malloc(n + 1);
        zk_write_pack(&x.w, b);
        Quorumzk__Write *mine = zk_write_unpack(b, n);
        cr_assert_not_null(mine, "round %d", round);
        Quorumzk__Write *theirs =
            (Quorumzk__Write *)protobuf_c_message_unpack(&quorumzk__write__descriptor, NULL, n, b);
        cr_assert_not_null(theirs);
        assert_same(theirs, mine);
        assert_same(&x.w, mine);
        if (mine->request.len) /* read in place, not copied */
            cr_assert(mine->request.data > b && mine->request.data < b + n);
        /* the apply log prints it through its descriptor (applylog.c) */
        cr_assert_eq(protobuf_c_message_get_packed_size(&mine->base), n);
        protobuf_c_message_free_unpacked(&theirs->base, NULL);
        free(mine);
        free(b);
    }
}

/* bytes protobuf-c reads (or refuses) that are not zk_write_pack's layout:
 * the hand reader declines them all, so protobuf-c's answer stands */
Test(zk_write, leaves_other_layouts_to_protobuf_c)
{
    static const struct {
        const char *what;
        uint8_t b[16];
        size_t n;
        bool protobuf_c_reads;
    } cases[] = {
        {"member before session", {0x28, 0x05, 0x08, 0x01}, 4, true},
        {"session twice (the last one wins)", {0x08, 0x01, 0x08, 0x02}, 4, true},
        {"request before an id", {0x22, 0x01, 0x41, 0x1a, 0x01, 0x42}, 6, true},
        {"an unknown field 6", {0x08, 0x01, 0x30, 0x07}, 4, true},
        {"a tag in two bytes", {0x88, 0x00, 0x01}, 3, true},
        {"session as a fixed64", {0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 9, false},
        {"a truncated varint", {0x08, 0x80}, 2, false},
        {"a length past the end", {0x22, 0x05, 0x41}, 3, false},
        {"a length in six bytes", {0x22, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x41}, 8, false},
        {"an eleven-byte varint",
         {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
         12,
         false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_null(zk_write_unpack(cases[i].b, cases[i].n), "%s", cases[i].what);
        ProtobufCMessage *m =
            protobuf_c_message_unpack(&quorumzk__write__descriptor, NULL, cases[i].n, cases[i].b);
        cr_assert_eq(m != NULL, cases[i].protobuf_c_reads, "%s", cases[i].what);
        if (m != NULL)
            protobuf_c_message_free_unpacked(m, NULL);
    }
    /* an empty message is every field's zero value, for both */
    Quorumzk__Write *w = zk_write_unpack((const uint8_t *)"", 0);
    cr_assert_not_null(w);
    cr_assert(w->session == 0 && w->now_ms == 0 && w->member == 0 && w->n_ids == 0 &&
              w->request.len == 0);
    free(w);
}

/* random bytes, and packed messages with bytes changed: whatever the hand
 * reader takes, protobuf-c reads the same */
Test(zk_write, never_reads_what_protobuf_c_reads_otherwise)
{
    /* the layout's tags and the bytes of small varints and lengths */
    static const uint8_t bytes[] = {0x08, 0x10, 0x1a, 0x22, 0x28, 0x00, 0x01, 0x02, 0x80};
    int taken = 0;
    for (int round = 0; round < 20000; round++) {
        uint8_t b[700];
        size_t n;
        if (round % 2) {
            n = next() % 40;
            for (size_t k = 0; k < n; k++)
                b[k] = round % 4 == 1 ? (uint8_t)next() : bytes[next() % sizeof(bytes)];
        } else {
            struct sample x;
            make(&x);
            n = zk_write_size(&x.w);
            if (n > sizeof(b))
                continue;
            zk_write_pack(&x.w, b);
            if (n > 0)
                b[next() % n] ^= (uint8_t)(1u << (next() % 8));
        }
        Quorumzk__Write *mine = zk_write_unpack(b, n);
        if (mine == NULL)
            continue;
        taken++;
        Quorumzk__Write *theirs =
            (Quorumzk__Write *)protobuf_c_message_unpack(&quorumzk__write__descriptor, NULL, n, b);
        cr_assert_not_null(theirs, "round %d: read by hand, refused by protobuf-c", round);
        assert_same(theirs, mine);
        protobuf_c_message_free_unpacked(&theirs->base, NULL);
        free(mine);
    }
    cr_assert_gt(taken, 1000); /* the comparison was made, not skipped */
}
