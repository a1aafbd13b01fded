/* Tests for mvcc/kindex.c: the in-memory key index (B+tree of keys, each
 * with its revisions and generations). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/mvcc_int.h"

#define K(s) (const uint8_t *)(s), strlen(s)

static struct kindex ix;

static void setup(void)
{
    cr_assert_eq(kindex_init(&ix), 0);
}

static void teardown(void)
{
    kindex_free(&ix);
}

TestSuite(kindex, .init = setup, .fini = teardown);

/* state_at: -1 absent, else the main revision visible at |rev|. */
static int64_t state_at(const char *key, int64_t rev)
{
    struct kindex_entry *e = kindex_get(&ix, K(key));
    if (e == NULL)
        return -2;
    const struct kindex_rev *r = kentry_at(e, rev);
    if (r == NULL || r->tomb)
        return -1;
    return r->main;
}

Test(kindex, generations_and_lookups)
{
    /* foo: put 2, put 4, delete 6, put 8, put 9 */
    cr_assert_eq(kindex_append(&ix, K("foo"), 2, 0, false), 0);
    cr_assert_eq(kindex_append(&ix, K("foo"), 4, 0, false), 0);
    cr_assert_eq(kindex_append(&ix, K("foo"), 6, 1, true), 0);
    cr_assert_eq(kindex_append(&ix, K("foo"), 8, 0, false), 0);
    cr_assert_eq(kindex_append(&ix, K("foo"), 9, 0, false), 0);
    cr_assert_eq(state_at("foo", 1), -1);
    cr_assert_eq(state_at("foo", 2), 2);
    cr_assert_eq(state_at("foo", 3), 2);
    cr_assert_eq(state_at("foo", 4), 4);
    cr_assert_eq(state_at("foo", 5), 4);
    cr_assert_eq(state_at("foo", 6), -1); /* deleted at 6 */
    cr_assert_eq(state_at("foo", 7), -1);
    cr_assert_eq(state_at("foo", 8), 8);
    cr_assert_eq(state_at("foo", 100), 9);
    cr_assert_eq(state_at("bar", 100), -2);
    struct kindex_entry *e = kindex_get(&ix, K("foo"));
    cr_assert_eq(e->nrev, 5);
    cr_assert_eq(kentry_revs(e)[2].sub, 1);
    cr_assert_eq(ix.nkeys, 1);
}

Test(kindex, rejects_revisions_out_of_order)
{
    cr_assert_eq(kindex_append(&ix, K("a"), 5, 1, false), 0);
    cr_assert_eq(kindex_append(&ix, K("a"), 5, 1, false), -EINVAL);
    cr_assert_eq(kindex_append(&ix, K("a"), 5, 0, false), -EINVAL);
    cr_assert_eq(kindex_append(&ix, K("a"), 4, 9, false), -EINVAL);
    cr_assert_eq(kindex_append(&ix, K("a"), 5, 2, false), 0);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Many keys in random order, with shared prefixes and varied lengths, so
 * leaves and inner nodes split several levels deep. */
Test(kindex, many_keys_ordered_iteration)
{
    enum { N = 50000 };
    char **keys = malloc(N * sizeof(*keys));
    srand(7);
    for (int i = 0; i < N; i++) {
        char b[64];
        int r = rand();
        snprintf(b, sizeof(b), "/registry/%s/%d/%0*d", (r & 1) ? "pods" : "svc", r % 97, 1 + r % 9,
                 i);
        keys[i] = strdup(b);
        cr_assert_eq(kindex_append(&ix, K(keys[i]), 2 + i, 0, false), 0);
    }
    cr_assert_eq(ix.nkeys, N);
    cr_assert_gt(ix.height, 1);
    qsort(keys, N, sizeof(*keys), cmp_str);
    struct kindex_iter it;
    kindex_seek(&ix, NULL, 0, &it);
    int i = 0;
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it), i++) {
        cr_assert_lt(i, N);
        cr_assert_eq(e->klen, strlen(keys[i]));
        cr_assert_eq(memcmp(e->key, keys[i], e->klen), 0, "at %d: %s", i, keys[i]);
    }
    cr_assert_eq(i, N);
    for (i = 0; i < N; i += 97)
        cr_assert_not_null(kindex_get(&ix, K(keys[i])));
    /* seek lands on the first key >= the probe */
    kindex_seek(&ix, K("/registry/pods/5"), &it);
    struct kindex_entry *e = kindex_iter_get(&it);
    cr_assert_not_null(e);
    cr_assert_geq(memcmp(e->key, "/registry/pods/5", 16), 0);
    kindex_seek(&ix, K("~"), &it);
    cr_assert_null(kindex_iter_get(&it));
    for (i = 0; i < N; i++)
        free(keys[i]);
    free(keys);
}

struct dropped {
    int nkeys;
    int nrevs;
};

static int count_drop(const uint8_t *key, size_t klen, const struct kindex_rev *revs, size_t n,
                      void *arg)
{
    struct dropped *d = arg;
    d->nkeys++;
    d->nrevs += (int)n;
    return 0;
}

Test(kindex, compaction_keeps_latest_and_drops_tombstones)
{
    /* a: 2, 3, 5        -> compact 4 keeps 3, 5
     * b: 2, tomb 3      -> gone
     * c: 2, tomb 3, 4   -> keeps 4 (the new generation)
     * d: 6              -> untouched
     * e: 2, tomb 5      -> keeps 2 and tomb 5 (deleted after 4) */
    kindex_append(&ix, K("a"), 2, 0, false);
    kindex_append(&ix, K("b"), 2, 1, false);
    kindex_append(&ix, K("c"), 2, 2, false);
    kindex_append(&ix, K("e"), 2, 3, false);
    kindex_append(&ix, K("a"), 3, 0, false);
    kindex_append(&ix, K("b"), 3, 1, true);
    kindex_append(&ix, K("c"), 3, 2, true);
    kindex_append(&ix, K("c"), 4, 0, false);
    kindex_append(&ix, K("a"), 5, 0, false);
    kindex_append(&ix, K("e"), 5, 1, true);
    kindex_append(&ix, K("d"), 6, 0, false);
    struct dropped d = {0};
    cr_assert_eq(kindex_compact(&ix, 4, count_drop, &d), 0);
    cr_assert_eq(d.nkeys, 3); /* a, b, c */
    cr_assert_eq(d.nrevs, 1 + 2 + 2);
    cr_assert_null(kindex_get(&ix, K("b")));
    cr_assert_eq(ix.nkeys, 4);
    struct kindex_entry *e = kindex_get(&ix, K("a"));
    cr_assert_eq(e->nrev, 2);
    cr_assert_eq(kentry_revs(e)[0].main, 3);
    cr_assert_eq(state_at("a", 4), 3);
    cr_assert_eq(state_at("c", 4), 4);
    cr_assert_eq(kindex_get(&ix, K("c"))->nrev, 1);
    cr_assert_eq(state_at("e", 4), 2);
    cr_assert_eq(state_at("e", 5), -1);
    cr_assert_eq(state_at("d", 6), 6);

    /* Compacting at 5 removes e (latest <= 5 is its tombstone). */
    d = (struct dropped){0};
    cr_assert_eq(kindex_compact(&ix, 5, count_drop, &d), 0);
    cr_assert_null(kindex_get(&ix, K("e")));
    cr_assert_eq(kindex_get(&ix, K("a"))->nrev, 1);
    cr_assert_eq(d.nrevs, 1 + 2);
    cr_assert_eq(ix.nkeys, 3);
}

static int stop_at_second(const uint8_t *key, size_t klen, const struct kindex_rev *revs, size_t n,
                          void *arg)
{
    int *calls = arg;
    return ++*calls == 2 ? -77 : 0;
}

Test(kindex, compaction_stops_on_callback_error)
{
    kindex_append(&ix, K("a"), 2, 0, false);
    kindex_append(&ix, K("b"), 2, 1, false);
    kindex_append(&ix, K("a"), 3, 0, false);
    kindex_append(&ix, K("b"), 3, 1, false);
    int calls = 0;
    cr_assert_eq(kindex_compact(&ix, 3, stop_at_second, &calls), -77);
    cr_assert_eq(kindex_get(&ix, K("a"))->nrev, 1);
    cr_assert_eq(kindex_get(&ix, K("b"))->nrev, 2); /* untouched */
}

/* Removing most keys makes the tree sparse and triggers a rebuild; the
 * survivors must still be found and iterate in order, and inserts work. */
Test(kindex, compaction_rebuild_keeps_order)
{
    enum { N = 20000 };
    char b[32];
    for (int i = 0; i < N; i++) {
        snprintf(b, sizeof(b), "k%06d", (i * 7919) % N);
        cr_assert_eq(kindex_append(&ix, K(b), 2 + i, 0, false), 0);
    }
    for (int i = 0; i < N; i++) {
        int k = (i * 7919) % N;
        if (k % 10 == 0)
            continue;
        snprintf(b, sizeof(b), "k%06d", k);
        cr_assert_eq(kindex_append(&ix, K(b), N + 2 + i, 0, true), 0);
    }
    size_t leaves_before = ix.nleaves;
    cr_assert_eq(kindex_compact(&ix, 2 * N + 2, NULL, NULL), 0);
    cr_assert_eq(ix.nkeys, N / 10);
    cr_assert_lt(ix.nleaves, leaves_before);
    struct kindex_iter it;
    kindex_seek(&ix, NULL, 0, &it);
    int i = 0;
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it)) {
        snprintf(b, sizeof(b), "k%06d", i * 10);
        cr_assert_eq(e->klen, strlen(b));
        cr_assert_eq(memcmp(e->key, b, e->klen), 0);
        i++;
    }
    cr_assert_eq(i, N / 10);
    for (int j = 0; j < N; j++) {
        snprintf(b, sizeof(b), "k%06d", j);
        if (j % 10 == 0)
            cr_assert_not_null(kindex_get(&ix, K(b)));
        else
            cr_assert_null(kindex_get(&ix, K(b)));
        cr_assert_eq(kindex_append(&ix, K(b), 3 * N + j, 0, false), 0);
    }
    cr_assert_eq(ix.nkeys, N);
    kindex_seek(&ix, NULL, 0, &it);
    i = 0;
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it), i++) {
        snprintf(b, sizeof(b), "k%06d", i);
        cr_assert_eq(memcmp(e->key, b, e->klen), 0);
    }
    cr_assert_eq(i, N);
}

Test(kindex, iter_append_keeps_iterator)
{
    char b[16];
    for (int i = 0; i < 200; i++) {
        snprintf(b, sizeof(b), "x%03d", i);
        kindex_append(&ix, K(b), 2, (uint32_t)i, false);
    }
    struct kindex_iter it;
    kindex_seek(&ix, K("x050"), &it);
    int n = 0;
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it)) {
        /* grow each entry several times: it moves, the slot follows */
        for (int j = 0; j < 5; j++)
            cr_assert_eq(kindex_iter_append(&it, 3 + j, 0, j == 4), 0);
        n++;
    }
    cr_assert_eq(n, 150);
    cr_assert_eq(state_at("x049", 100), 2);
    cr_assert_eq(state_at("x050", 6), 6);
    cr_assert_eq(state_at("x199", 7), -1);
    cr_assert_gt(kindex_mem_bytes(&ix), 200 * 16);
}

/* The loader (kindex_load_*) builds the same index as kindex_append from
 * the same records: every key, in order, with the same revisions; keys of
 * every length (empty, sharing prefixes of 8 bytes and more, binary), and
 * a tree that then takes appends and lookups as usual. Out-of-order
 * revisions of a key are refused as kindex_append refuses them. */
Test(kindex, loader_builds_what_appends_build)
{
    struct kindex_loader ld;
    kindex_load_begin(&ld);
    char key[64];
    unsigned seed = 7;
    int64_t main = 1;
    for (int i = 0; i < 30000; i++, main++) {
        int k = rand_r(&seed) % 5000;
        int len;
        switch (k % 4) {
        case 0:
            len = snprintf(key, sizeof(key), "prefix/shared/%07d", k);
            break;
        case 1:
            len = snprintf(key, sizeof(key), "%d", k);
            break;
        case 2:
            len = snprintf(key, sizeof(key), "k%c%c", (char)(k & 0xff), 0);
            break;
        default:
            len = snprintf(key, sizeof(key), "prefix/%d", k);
        }
        bool tomb = rand_r(&seed) % 7 == 0;
        cr_assert_eq(kindex_append(&ix, (const uint8_t *)key, (size_t)len, main, 0, tomb), 0);
        cr_assert_eq(kindex_load_add(&ld, (const uint8_t *)key, (size_t)len, main, 0, tomb), 0);
    }
    /* the last key again at its own revision: not above its last one */
    cr_assert_eq(kindex_load_add(&ld, (const uint8_t *)key, strlen(key), main - 1, 0, false),
                 -EINVAL);
    struct kindex built;
    cr_assert_eq(kindex_init(&built), 0);
    cr_assert_eq(kindex_load_finish(&ld, &built), 0);
    cr_assert_eq(ld.n, 0);
    cr_assert_eq(built.nkeys, ix.nkeys);

    struct kindex_iter a, b;
    kindex_seek(&ix, NULL, 0, &a);
    kindex_seek(&built, NULL, 0, &b);
    size_t n = 0;
    for (;; kindex_iter_next(&a), kindex_iter_next(&b), n++) {
        struct kindex_entry *x = kindex_iter_get(&a), *y = kindex_iter_get(&b);
        if (x == NULL || y == NULL) {
            cr_assert_eq(x, y, "same number of keys");
            break;
        }
        cr_assert_eq(x->klen, y->klen);
        cr_assert_eq(memcmp(x->key, y->key, x->klen), 0, "key %zu in the same order", n);
        cr_assert_eq(x->nrev, y->nrev);
        cr_assert_eq(memcmp(kentry_revs(x), kentry_revs(y), x->nrev * sizeof(struct kindex_rev)),
                     0);
        /* every key is found by a lookup in the built tree */
        cr_assert_eq(kindex_get(&built, x->key, x->klen), y);
    }
    cr_assert_eq(n, ix.nkeys);
    /* the built tree goes on like any other */
    for (int i = 0; i < 3000; i++, main++) {
        int len = snprintf(key, sizeof(key), "new/%05d", i);
        cr_assert_eq(kindex_append(&built, (const uint8_t *)key, (size_t)len, main, 0, false), 0);
    }
    cr_assert_eq(built.nkeys, ix.nkeys + 3000);
    cr_assert_not_null(kindex_get(&built, K("new/02999")));
    kindex_free(&built);

    /* an empty load gives an empty, usable index */
    kindex_load_begin(&ld);
    struct kindex empty;
    cr_assert_eq(kindex_init(&empty), 0);
    cr_assert_eq(kindex_load_finish(&ld, &empty), 0);
    cr_assert_eq(empty.nkeys, 0);
    cr_assert_eq(kindex_append(&empty, K("a"), 1, 0, false), 0);
    cr_assert_not_null(kindex_get(&empty, K("a")));
    kindex_free(&empty);

    /* abort frees what was loaded (LeakSanitizer checks it) */
    kindex_load_begin(&ld);
    cr_assert_eq(kindex_load_add(&ld, K("x"), 1, 0, false), 0);
    kindex_load_abort(&ld);
}

/* Two loaders over consecutive stretches of one history, merged, give what
 * one loader over all of it gives; a merge whose revisions go backwards is
 * refused. */
Test(kindex, loaders_merge_in_order)
{
    struct kindex_loader one, a, b;
    kindex_load_begin(&one);
    kindex_load_begin(&a);
    kindex_load_begin(&b);
    char key[32];
    unsigned seed = 3;
    for (int64_t main = 1; main <= 20000; main++) {
        int len = snprintf(key, sizeof(key), "key/%d", (int)(rand_r(&seed) % 3000));
        bool tomb = rand_r(&seed) % 9 == 0;
        cr_assert_eq(kindex_load_add(&one, (const uint8_t *)key, (size_t)len, main, 0, tomb), 0);
        struct kindex_loader *part = main <= 12000 ? &a : &b;
        cr_assert_eq(kindex_load_add(part, (const uint8_t *)key, (size_t)len, main, 0, tomb), 0);
    }
    cr_assert_eq(kindex_load_merge(&a, &b), 0);
    cr_assert_eq(b.n, 0);
    struct kindex x, y;
    cr_assert_eq(kindex_init(&x), 0);
    cr_assert_eq(kindex_init(&y), 0);
    cr_assert_eq(kindex_load_finish(&one, &x), 0);
    cr_assert_eq(kindex_load_finish(&a, &y), 0);
    cr_assert_eq(x.nkeys, y.nkeys);
    struct kindex_iter i, j;
    kindex_seek(&x, NULL, 0, &i);
    kindex_seek(&y, NULL, 0, &j);
    for (;; kindex_iter_next(&i), kindex_iter_next(&j)) {
        struct kindex_entry *p = kindex_iter_get(&i), *q = kindex_iter_get(&j);
        if (p == NULL || q == NULL) {
            cr_assert_eq(p, q);
            break;
        }
        cr_assert_eq(p->klen, q->klen);
        cr_assert_eq(memcmp(p->key, q->key, p->klen), 0);
        cr_assert_eq(p->nrev, q->nrev);
        cr_assert_eq(memcmp(kentry_revs(p), kentry_revs(q), p->nrev * sizeof(struct kindex_rev)),
                     0);
    }
    kindex_free(&x);
    kindex_free(&y);

    /* out of order: the later loader holds an older revision of a key */
    kindex_load_begin(&a);
    kindex_load_begin(&b);
    cr_assert_eq(kindex_load_add(&a, K("k"), 10, 0, false), 0);
    cr_assert_eq(kindex_load_add(&b, K("k"), 5, 0, false), 0);
    cr_assert_eq(kindex_load_merge(&a, &b), -EINVAL);
    kindex_load_abort(&a);
    kindex_load_abort(&b);
}
