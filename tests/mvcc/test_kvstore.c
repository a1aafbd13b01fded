/* Tests for mvcc/kvstore.c: revisions, versions, ranges, write and read
 * txns, the observer, compaction, restart and HashKV, on real LMDB files. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "mvcc/mvcc.h"
#include "mvcc/mvcc_int.h"
#include "tmpdir.h"

#define S(x) (const uint8_t *)(x), strlen(x)
#define FROM_KEY (const uint8_t *)"", 1

static const char *dir;
static char dirbuf[64];
static backend *be;
static mvcc_store *s;

static void open_store(void)
{
    struct backend_options o = {.dir = dirbuf, .map_size = 256 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &s), 0);
}

static void close_store(void)
{
    mvcc_close(s);
    backend_close(be);
    s = NULL;
    be = NULL;
}

static void reopen(void)
{
    close_store();
    open_store();
}

static void setup(void)
{
    dir = tmpdir_make();
    cr_assert_not_null(dir);
    snprintf(dirbuf, sizeof(dirbuf), "%s", dir);
    open_store();
}

static void teardown(void)
{
    if (s != NULL || be != NULL)
        close_store();
    tmpdir_remove(dirbuf);
}

TestSuite(kvstore, .init = setup, .fini = teardown);

/* ---- helpers ---- */

static int64_t put_lease(mvcc_store *st, const char *k, const char *v, int64_t lease)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(st), 0);
    cr_assert_eq(mvcc_txn_begin(st, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S(k), S(v), lease, NULL, NULL), 0);
    int64_t rev = mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(st), 0);
    return rev;
}

static int64_t put(const char *k, const char *v)
{
    return put_lease(s, k, v, 0);
}

static int64_t del_range(mvcc_store *st, const uint8_t *k, size_t kl, const uint8_t *e, size_t el,
                         int64_t *n)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(st), 0);
    cr_assert_eq(mvcc_txn_begin(st, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, k, kl, e, el, NULL, NULL, n), 0);
    int64_t rev = mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(st), 0);
    return rev;
}

static int64_t del(const char *k)
{
    int64_t n;
    return del_range(s, S(k), NULL, 0, &n);
}

/* compact schedules a compaction and runs its steps to the end, a few
 * revisions a step (sizes vary so steps stop inside keys and leaves), with
 * a commit now and then, as the server does. */
static void compact(mvcc_store *st, int64_t rev, int want)
{
    cr_assert_eq(mvcc_batch_begin(st), 0);
    cr_assert_eq(mvcc_compact(st, rev), want);
    bool done = false;
    for (int i = 1; !done; i++) {
        cr_assert_eq(mvcc_compact_step(st, 1 + (size_t)(rand() % 3), &done), 0);
        if (i % 4 == 0) {
            cr_assert_eq(mvcc_batch_commit(st), 0);
            cr_assert_eq(mvcc_batch_begin(st), 0);
        }
    }
    cr_assert_not(mvcc_compacting(st));
    cr_assert_eq(mvcc_batch_commit(st), 0);
}

struct got {
    int n;
    char key[64][32];
    char val[64][32];
    int64_t create[64], mod[64], ver[64], lease[64];
};

static int collect(const struct mvcc_kv *kv, void *arg)
{
    struct got *g = arg;
    cr_assert_lt(g->n, 64);
    snprintf(g->key[g->n], 32, "%.*s", (int)kv->key_len, (const char *)kv->key);
    snprintf(g->val[g->n], 32, "%.*s", (int)kv->value_len, (const char *)kv->value);
    g->create[g->n] = kv->create_revision;
    g->mod[g->n] = kv->mod_revision;
    g->ver[g->n] = kv->version;
    g->lease[g->n] = kv->lease;
    /* raw is the stored KeyValue: it decodes to the same fields */
    struct mvcc_kv d;
    cr_assert_eq(mvcc_kv_decode(kv->raw, kv->raw_len, &d), 0);
    cr_assert_eq(d.mod_revision, kv->mod_revision);
    cr_assert_eq(d.key_len, kv->key_len);
    g->n++;
    return 0;
}

static int rng(const uint8_t *k, size_t kl, const uint8_t *e, size_t el, int64_t rev, int64_t limit,
               bool count_only, struct got *g, struct mvcc_range_result *res)
{
    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    struct mvcc_range_opts o = {.rev = rev, .limit = limit, .count_only = count_only};
    memset(g, 0, sizeof(*g));
    int rv = mvcc_read_range(r, k, kl, e, el, &o, collect, g, res);
    mvcc_read_end(r);
    return rv;
}

/* get1 reads |k| at |rev| and returns the number of kvs (0 or 1). */
static int get1(const char *k, int64_t rev, struct got *g)
{
    struct mvcc_range_result res;
    cr_assert_eq(rng(S(k), NULL, 0, rev, 0, false, g, &res), 0);
    return g->n;
}

static size_t key_db_entries_of(backend *b)
{
    MDB_txn *t;
    MDB_stat st;
    cr_assert_eq(backend_read_begin(b, &t), 0);
    cr_assert_eq(mdb_stat(t, backend_dbi(b, BACKEND_DB_KEY), &st), 0);
    backend_read_end(t);
    return st.ms_entries;
}

static size_t key_db_entries(void)
{
    return key_db_entries_of(be);
}

/* A second store in a directory of its own, for tests that compare two. */
struct twin {
    char dir[64];
    backend *be;
    mvcc_store *s;
};

static void twin_open(struct twin *t)
{
    const char *d = tmpdir_make();
    cr_assert_not_null(d);
    snprintf(t->dir, sizeof(t->dir), "%s", d);
    struct backend_options o = {.dir = t->dir, .map_size = 256 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &t->be), 0);
    cr_assert_eq(mvcc_open(t->be, &t->s), 0);
}

static void twin_close(struct twin *t)
{
    mvcc_close(t->s);
    backend_close(t->be);
    tmpdir_remove(t->dir);
}

/* ---- tests ---- */

Test(kvstore, fresh_store_is_at_revision_one)
{
    cr_assert_eq(mvcc_rev(s), 1);
    cr_assert_eq(mvcc_compact_rev(s), -1, "never compacted, as etcd");
    struct got g;
    cr_assert_eq(get1("foo", 0, &g), 0);
}

Test(kvstore, put_delete_versions_and_revisions)
{
    cr_assert_eq(put("foo", "v1"), 2);
    struct got g;
    cr_assert_eq(get1("foo", 0, &g), 1);
    cr_assert_str_eq(g.val[0], "v1");
    cr_assert_eq(g.create[0], 2);
    cr_assert_eq(g.mod[0], 2);
    cr_assert_eq(g.ver[0], 1);

    cr_assert_eq(put_lease(s, "foo", "v2", 0x1234), 3);
    cr_assert_eq(get1("foo", 0, &g), 1);
    cr_assert_str_eq(g.val[0], "v2");
    cr_assert_eq(g.create[0], 2);
    cr_assert_eq(g.mod[0], 3);
    cr_assert_eq(g.ver[0], 2);
    cr_assert_eq(g.lease[0], 0x1234);

    cr_assert_eq(del("foo"), 4);
    cr_assert_eq(get1("foo", 0, &g), 0);
    /* a new generation starts over */
    cr_assert_eq(put("foo", "v3"), 5);
    cr_assert_eq(get1("foo", 0, &g), 1);
    cr_assert_eq(g.create[0], 5);
    cr_assert_eq(g.ver[0], 1);
    cr_assert_eq(g.lease[0], 0);
    cr_assert_eq(mvcc_rev(s), 5);

    /* the tombstone is stored under a 't' key and holds only the key */
    MDB_txn *t;
    cr_assert_eq(backend_read_begin(be, &t), 0);
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, 4, 0, true), rk}, d;
    cr_assert_eq(mdb_get(t, backend_dbi(be, BACKEND_DB_KEY), &k, &d), 0);
    static const uint8_t want[] = {0x0a, 0x03, 'f', 'o', 'o'};
    cr_assert_eq(d.mv_size, sizeof(want));
    cr_assert_arr_eq(d.mv_data, want, sizeof(want));
    backend_read_end(t);
}

static void seed_abc(void)
{
    const char *keys[] = {"a", "ab", "abc", "b", "c", "d"};
    for (int i = 0; i < 6; i++)
        put(keys[i], keys[i]);
}

Test(kvstore, range_forms)
{
    seed_abc(); /* revisions 2..7 */
    struct got g;
    struct mvcc_range_result res;

    cr_assert_eq(rng(S("ab"), NULL, 0, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 1);
    cr_assert_str_eq(g.key[0], "ab");
    cr_assert_eq(res.count, 1);
    cr_assert_eq(res.rev, 7);

    /* prefix "a" = [a, b) */
    cr_assert_eq(rng(S("a"), S("b"), 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 3);
    cr_assert_str_eq(g.key[0], "a");
    cr_assert_str_eq(g.key[1], "ab");
    cr_assert_str_eq(g.key[2], "abc");
    cr_assert_eq(res.count, 3);

    /* from key: every key >= "b" */
    cr_assert_eq(rng(S("b"), FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 3);
    cr_assert_str_eq(g.key[0], "b");
    cr_assert_str_eq(g.key[2], "d");

    /* all keys: "" + "\0", and "\0" + "\0" (what etcdctl --from-key "" sends) */
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 6);
    cr_assert_eq(res.count, 6);
    cr_assert_eq(rng((const uint8_t *)"", 1, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 6);

    /* empty key, empty end: nothing */
    cr_assert_eq(rng((const uint8_t *)"", 0, NULL, 0, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    cr_assert_eq(res.count, 0);

    /* empty results: missing key, empty interval, reversed interval */
    cr_assert_eq(rng(S("abd"), NULL, 0, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    cr_assert_eq(rng(S("x"), S("z"), 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    cr_assert_eq(rng(S("c"), S("a"), 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    cr_assert_eq(res.count, 0);

    /* end is exclusive, and "ab" < "abc" < "b" */
    cr_assert_eq(rng(S("ab"), S("abc"), 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 1);
    cr_assert_str_eq(g.key[0], "ab");
}

Test(kvstore, range_limit_and_count)
{
    seed_abc();
    del("c"); /* deleted keys are not counted */
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 2, false, &g, &res), 0);
    cr_assert_eq(g.n, 2);
    cr_assert_str_eq(g.key[1], "ab");
    cr_assert_eq(res.count, 5);
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 0, true, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    cr_assert_eq(res.count, 5);
    cr_assert_eq(rng(S("a"), S("b"), 0, 100, false, &g, &res), 0);
    cr_assert_eq(g.n, 3);
    cr_assert_eq(res.count, 3);
}

static int stop_after_one(const struct mvcc_kv *kv, void *arg)
{
    ++*(int *)arg;
    return 42;
}

Test(kvstore, visitor_can_stop)
{
    seed_abc();
    mvcc_read *r;
    int calls = 0;
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    cr_assert_eq(
        mvcc_read_range(r, (const uint8_t *)"", 0, FROM_KEY, NULL, stop_after_one, &calls, NULL),
        42);
    cr_assert_eq(calls, 1);
    mvcc_read_end(r);
}

Test(kvstore, historical_future_and_compacted)
{
    put("k", "1");     /* 2 */
    put("k", "2");     /* 3 */
    put("other", "x"); /* 4 */
    del("k");          /* 5 */
    put("k", "3");     /* 6 */
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(get1("k", 2, &g), 1);
    cr_assert_str_eq(g.val[0], "1");
    cr_assert_eq(get1("k", 4, &g), 1);
    cr_assert_str_eq(g.val[0], "2");
    cr_assert_eq(g.ver[0], 2);
    cr_assert_eq(get1("k", 5, &g), 0);
    cr_assert_eq(get1("k", 6, &g), 1);
    cr_assert_str_eq(g.val[0], "3");
    cr_assert_eq(get1("other", 3, &g), 0);
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 4, 0, false, &g, &res), 0);
    cr_assert_eq(res.count, 2);
    cr_assert_eq(res.rev, 4);
    cr_assert_eq(rng(S("k"), NULL, 0, 7, 0, false, &g, &res), QERR_FUTURE_REV);

    compact(s, 4, 0);
    cr_assert_eq(mvcc_compact_rev(s), 4);
    cr_assert_eq(rng(S("k"), NULL, 0, 3, 0, false, &g, &res), QERR_COMPACTED);
    /* the compaction revision itself is still readable */
    cr_assert_eq(get1("k", 4, &g), 1);
    cr_assert_str_eq(g.val[0], "2");
    cr_assert_eq(get1("k", 5, &g), 0);
    cr_assert_eq(get1("k", 0, &g), 1);
    compact(s, 4, QERR_COMPACTED);
    compact(s, 3, QERR_COMPACTED);
    compact(s, 7, QERR_FUTURE_REV);
}

struct rw {
    int puts, prevs;
};

static int count_prev(const struct mvcc_kv *kv, void *arg)
{
    struct rw *x = arg;
    x->prevs++;
    cr_assert_eq(kv->key_len, 1);
    cr_assert_eq(kv->value_len, 3);
    cr_assert_eq(memcmp(kv->value, "old", 3), 0);
    return 0;
}

Test(kvstore, txn_reads_its_own_writes)
{
    put("a", "old"); /* 2 */
    mvcc_txn *t;
    struct got g;
    struct mvcc_range_result res;
    struct mvcc_range_opts o = {0};
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    /* before it writes, the txn reads at the begin revision */
    o.rev = 3;
    cr_assert_eq(mvcc_txn_range(t, S("a"), NULL, 0, &o, collect, &g, &res), QERR_FUTURE_REV);
    struct rw x = {0};
    cr_assert_eq(mvcc_txn_put(t, S("a"), S("new"), 0, count_prev, &x), 0);
    cr_assert_eq(x.prevs, 1);
    cr_assert_eq(mvcc_txn_put(t, S("b"), S("bbb"), 0, count_prev, &x), 0);
    cr_assert_eq(x.prevs, 1); /* b did not exist */
    memset(&g, 0, sizeof(g));
    o.rev = 0;
    cr_assert_eq(mvcc_txn_range(t, (const uint8_t *)"", 0, FROM_KEY, &o, collect, &g, &res), 0);
    cr_assert_eq(g.n, 2);
    cr_assert_str_eq(g.val[0], "new");
    cr_assert_eq(g.mod[0], 3);
    cr_assert_eq(g.ver[0], 2);
    cr_assert_eq(g.mod[1], 3);
    cr_assert_eq(res.rev, 3);
    /* 3 is now readable in the txn, the old value at 2 too */
    memset(&g, 0, sizeof(g));
    o.rev = 2;
    cr_assert_eq(mvcc_txn_range(t, S("a"), NULL, 0, &o, collect, &g, &res), 0);
    cr_assert_str_eq(g.val[0], "old");
    o.rev = 4;
    cr_assert_eq(mvcc_txn_range(t, S("a"), NULL, 0, &o, collect, &g, &res), QERR_FUTURE_REV);
    int64_t n;
    cr_assert_eq(mvcc_txn_delete_range(t, S("b"), NULL, 0, NULL, NULL, &n), 0);
    cr_assert_eq(n, 1);
    memset(&g, 0, sizeof(g));
    o.rev = 0;
    cr_assert_eq(mvcc_txn_range(t, S("b"), NULL, 0, &o, collect, &g, &res), 0);
    cr_assert_eq(g.n, 0);
    /* the store's revision moves at txn end, not before */
    cr_assert_eq(mvcc_rev(s), 2);
    cr_assert_eq(mvcc_txn_end(t), 3);
    cr_assert_eq(mvcc_rev(s), 3);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(get1("b", 3, &g), 0);
    cr_assert_eq(get1("a", 3, &g), 1);
    cr_assert_eq(g.ver[0], 2);
}

/* mvcc_txn_key_rev names the version a range in the txn would read (its
 * mod revision and sub-revision), from the index alone */
Test(kvstore, txn_key_rev_names_the_version_a_read_sees)
{
    int64_t r2 = put("a", "one"); /* 2 */
    put("b", "x");                /* 3 */
    mvcc_txn *t;
    uint32_t sub = 99;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_key_rev(t, S("a"), &sub), r2);
    cr_assert_eq(sub, 0);
    cr_assert_eq(mvcc_txn_key_rev(t, S("nothing"), &sub), 0);
    cr_assert_eq(mvcc_txn_key_rev(t, (const uint8_t *)"a\0", 2, &sub), 0); /* a longer key */
    /* the txn's own writes: this revision, their sub-revisions */
    cr_assert_eq(mvcc_txn_put(t, S("c"), S("1"), 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_put(t, S("a"), S("two"), 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_key_rev(t, S("a"), &sub), 4);
    cr_assert_eq(sub, 1);
    cr_assert_eq(mvcc_txn_key_rev(t, S("c"), &sub), 4);
    cr_assert_eq(sub, 0);
    int64_t n;
    cr_assert_eq(mvcc_txn_delete_range(t, S("b"), NULL, 0, NULL, NULL, &n), 0);
    cr_assert_eq(mvcc_txn_key_rev(t, S("b"), &sub), 0, "deleted: none");
    cr_assert_eq(mvcc_txn_end(t), 4);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    /* a key written again names a new revision; deleted and put back too */
    cr_assert_eq(put("b", "y"), 5);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_key_rev(t, S("b"), &sub), 5);
    cr_assert_eq(mvcc_txn_key_rev(t, S("a"), &sub), 4);
    cr_assert_eq(sub, 1);
    cr_assert_eq(mvcc_txn_end(t), 5);
    cr_assert_eq(mvcc_batch_commit(s), 0);
}

Test(kvstore, txn_without_change_does_not_advance)
{
    put("a", "1");
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    struct got g = {0};
    cr_assert_eq(mvcc_txn_range(t, S("a"), NULL, 0, NULL, collect, &g, NULL), 0);
    cr_assert_eq(g.n, 1);
    cr_assert_eq(mvcc_txn_end(t), 2);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_end(t), 2);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(mvcc_rev(s), 2);
    cr_assert_eq(put("b", "2"), 3);
}

static int events;
static void count_events(enum mvcc_event_type type, const struct mvcc_kv *kv,
                         const struct mvcc_kv *prev, void *arg)
{
    events++;
}

Test(kvstore, delete_range_of_nothing)
{
    put("a", "1");
    del("a");
    mvcc_set_observer(s, count_events, NULL);
    int64_t n = -1;
    cr_assert_eq(del_range(s, S("a"), NULL, 0, &n), 3);
    cr_assert_eq(n, 0);
    cr_assert_eq(del_range(s, S("x"), S("z"), &n), 3);
    cr_assert_eq(n, 0);
    cr_assert_eq(del_range(s, (const uint8_t *)"", 0, FROM_KEY, &n), 3);
    cr_assert_eq(n, 0);
    cr_assert_eq(events, 0);
    cr_assert_eq(mvcc_rev(s), 3);
}

static int seen_deleted;
static int note_deleted(const struct mvcc_kv *kv, void *arg)
{
    seen_deleted++;
    cr_assert_gt(kv->version, 0);
    return 0;
}

Test(kvstore, delete_range_prefix)
{
    seed_abc();
    mvcc_txn *t;
    int64_t n;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, S("a"), S("b"), note_deleted, NULL, &n), 0);
    cr_assert_eq(mvcc_txn_end(t), 8);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(seen_deleted, 3);
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 3);
    cr_assert_str_eq(g.key[0], "b");
    /* all three tombstones share revision 8, subs 0..2 */
    MDB_txn *rt;
    cr_assert_eq(backend_read_begin(be, &rt), 0);
    for (int sub = 0; sub < 3; sub++) {
        uint8_t rk[MVCC_REVKEY_MAX];
        MDB_val k = {mvcc_revkey_put(rk, 8, sub, true), rk}, d;
        cr_assert_eq(mdb_get(rt, backend_dbi(be, BACKEND_DB_KEY), &k, &d), 0);
    }
    backend_read_end(rt);
}

struct ev {
    int type;
    char key[16];
    char val[16];
    int64_t mod, create, ver;
    bool has_prev;
    char prev_val[16];
    int64_t prev_mod;
};
static struct ev evs[16];
static int nevs;

static void record(enum mvcc_event_type type, const struct mvcc_kv *kv, const struct mvcc_kv *prev,
                   void *arg)
{
    cr_assert_eq(arg, (void *)&nevs);
    struct ev *e = &evs[nevs++];
    e->type = type;
    snprintf(e->key, 16, "%.*s", (int)kv->key_len, (const char *)kv->key);
    snprintf(e->val, 16, "%.*s", (int)kv->value_len, (const char *)kv->value);
    e->mod = kv->mod_revision;
    e->create = kv->create_revision;
    e->ver = kv->version;
    e->has_prev = prev != NULL;
    if (prev) {
        snprintf(e->prev_val, 16, "%.*s", (int)prev->value_len, (const char *)prev->value);
        e->prev_mod = prev->mod_revision;
    }
    struct mvcc_kv d;
    cr_assert_eq(mvcc_kv_decode(kv->raw, kv->raw_len, &d), 0);
    cr_assert_eq(d.mod_revision, kv->mod_revision);
    cr_assert_eq(d.version, kv->version);
    cr_assert_eq(d.key_len, kv->key_len);
}

Test(kvstore, observer_events_order_and_content)
{
    put("x", "old"); /* 2 */
    mvcc_set_observer(s, record, &nevs);
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("y"), S("new"), 7, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_put(t, S("x"), S("upd"), 0, NULL, NULL), 0);
    int64_t n;
    cr_assert_eq(mvcc_txn_delete_range(t, S("y"), NULL, 0, NULL, NULL, &n), 0);
    cr_assert_eq(nevs, 3);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(s), 0);

    cr_assert_eq(evs[0].type, MVCC_EVENT_PUT);
    cr_assert_str_eq(evs[0].key, "y");
    cr_assert_str_eq(evs[0].val, "new");
    cr_assert_eq(evs[0].mod, 3);
    cr_assert_eq(evs[0].create, 3);
    cr_assert_eq(evs[0].ver, 1);
    cr_assert(!evs[0].has_prev);

    cr_assert_eq(evs[1].type, MVCC_EVENT_PUT);
    cr_assert_str_eq(evs[1].key, "x");
    cr_assert_eq(evs[1].create, 2);
    cr_assert_eq(evs[1].ver, 2);
    cr_assert(evs[1].has_prev);
    cr_assert_str_eq(evs[1].prev_val, "old");
    cr_assert_eq(evs[1].prev_mod, 2);

    cr_assert_eq(evs[2].type, MVCC_EVENT_DELETE);
    cr_assert_str_eq(evs[2].key, "y");
    cr_assert_str_eq(evs[2].val, "");
    cr_assert_eq(evs[2].mod, 3);
    cr_assert_eq(evs[2].create, 0);
    cr_assert_eq(evs[2].ver, 0);
    cr_assert(evs[2].has_prev);
    cr_assert_str_eq(evs[2].prev_val, "new");
    cr_assert_eq(evs[2].prev_mod, 3);
}

Test(kvstore, busy_states)
{
    mvcc_txn *t, *t2;
    cr_assert_eq(mvcc_txn_begin(s, &t), -EBUSY); /* no batch */
    cr_assert_eq(mvcc_compact(s, 1), -EBUSY);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t2), -EBUSY);
    cr_assert_eq(mvcc_compact(s, 1), -EBUSY);
    cr_assert_eq(mvcc_batch_commit(s), -EBUSY);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(s), 0);
}

Test(kvstore, read_txn_is_a_snapshot)
{
    put("a", "1"); /* 2 */
    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    put("a", "2"); /* 3 */
    put("b", "2"); /* 4 */
    struct got g = {0};
    struct mvcc_range_result res;
    cr_assert_eq(mvcc_read_range(r, (const uint8_t *)"", 0, FROM_KEY, NULL, collect, &g, &res), 0);
    cr_assert_eq(res.rev, 2);
    cr_assert_eq(g.n, 1);
    cr_assert_str_eq(g.val[0], "1");
    struct mvcc_range_opts o = {.rev = 3};
    cr_assert_eq(mvcc_read_range(r, S("a"), NULL, 0, &o, collect, &g, &res), QERR_FUTURE_REV);
    mvcc_read_end(r);

    /* a read begun while a batch is open goes through the batch: it sees
     * what the batch applied, at the current revision (the server answers
     * writes before their batch commits) */
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("c"), S("3"), 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_end(t), 5);
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    memset(&g, 0, sizeof(g));
    cr_assert_eq(mvcc_read_range(r, (const uint8_t *)"", 0, FROM_KEY, NULL, collect, &g, &res), 0);
    cr_assert_eq(res.rev, 5);
    cr_assert_eq(g.n, 3);
    cr_assert_str_eq(g.val[2], "3");
    mvcc_read_end(r);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    /* and after the commit, a read txn of its own sees the same */
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    memset(&g, 0, sizeof(g));
    cr_assert_eq(mvcc_read_range(r, (const uint8_t *)"", 0, FROM_KEY, NULL, collect, &g, &res), 0);
    cr_assert_eq(res.rev, 5);
    cr_assert_eq(g.n, 3);
    mvcc_read_end(r);
}

Test(kvstore, compaction_removes_superseded_revisions)
{
    put("foo", "1"); /* 2 */
    put("foo", "2"); /* 3 */
    put("foo", "3"); /* 4 */
    put("bar", "1"); /* 5 */
    del("bar");      /* 6 */
    put("baz", "1"); /* 7 */
    del("baz");      /* 8: after the compaction point */
    cr_assert_eq(key_db_entries(), 7);
    compact(s, 7, 0);
    /* foo keeps 4; bar is gone; baz keeps 7 and its tombstone 8 */
    cr_assert_eq(key_db_entries(), 3);
    struct got g;
    cr_assert_eq(get1("foo", 7, &g), 1);
    cr_assert_str_eq(g.val[0], "3");
    cr_assert_eq(g.ver[0], 3);
    cr_assert_eq(g.create[0], 2);
    cr_assert_eq(get1("bar", 7, &g), 0);
    cr_assert_eq(get1("baz", 7, &g), 1);
    cr_assert_eq(get1("baz", 8, &g), 0);
    uint64_t v;
    cr_assert_eq(backend_meta_get(be, NULL, "finishedCompactRev", &v), 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(backend_meta_get(be, NULL, "scheduledCompactRev", &v), 0);
    cr_assert_eq(v, 7);

    /* a put after compaction keeps counting versions */
    cr_assert_eq(put("foo", "4"), 9);
    cr_assert_eq(get1("foo", 0, &g), 1);
    cr_assert_eq(g.ver[0], 4);
    cr_assert_eq(g.create[0], 2);
    compact(s, 9, 0);
    cr_assert_eq(key_db_entries(), 1);
}

static void check_state_after_ops(void)
{
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(mvcc_rev(s), 9);
    cr_assert_eq(mvcc_compact_rev(s), 5);
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(g.n, 2);
    cr_assert_str_eq(g.key[0], "a");
    cr_assert_str_eq(g.val[0], "a3");
    cr_assert_eq(g.ver[0], 3);
    cr_assert_eq(g.create[0], 2);
    cr_assert_str_eq(g.key[1], "c");
    cr_assert_eq(g.lease[1], 99);
    cr_assert_eq(get1("a", 5, &g), 1);
    cr_assert_str_eq(g.val[0], "a2");
    cr_assert_eq(get1("b", 5, &g), 1);
    cr_assert_eq(get1("b", 6, &g), 0);
    cr_assert_eq(rng(S("a"), NULL, 0, 4, 0, false, &g, &res), QERR_COMPACTED);
}

static void do_ops(mvcc_store *st)
{
    put_lease(st, "a", "a1", 0); /* 2 */
    put_lease(st, "b", "b1", 0); /* 3 */
    put_lease(st, "a", "a2", 0); /* 4 */
    put_lease(st, "x", "x1", 0); /* 5 */
    int64_t n;
    del_range(st, S("b"), NULL, 0, &n); /* 6 */
    put_lease(st, "c", "c1", 99);       /* 7 */
    put_lease(st, "a", "a3", 0);        /* 8 */
    del_range(st, S("x"), S("y"), &n);  /* 9 */
}

Test(kvstore, restart_rebuilds_same_state)
{
    do_ops(s);
    compact(s, 5, 0);
    check_state_after_ops();
    uint32_t h1, h2;
    int64_t c1, c2;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h1, &c1), 0);
    reopen();
    check_state_after_ops();
    cr_assert_eq(mvcc_hash_kv(s, 0, &h2, &c2), 0);
    cr_assert_eq(h1, h2);
    cr_assert_eq(c2, 5);
    /* writing continues where it stopped */
    cr_assert_eq(put("a", "a4"), 10);
    struct got g;
    cr_assert_eq(get1("a", 0, &g), 1);
    cr_assert_eq(g.ver[0], 4);
    cr_assert_eq(g.create[0], 2);
}

Test(kvstore, restart_after_everything_compacted)
{
    put("a", "1"); /* 2 */
    del("a");      /* 3 */
    compact(s, 3, 0);
    cr_assert_eq(key_db_entries(), 0);
    reopen();
    cr_assert_eq(mvcc_rev(s), 3);
    cr_assert_eq(mvcc_compact_rev(s), 3);
    cr_assert_eq(put("a", "2"), 4);
    struct got g;
    cr_assert_eq(get1("a", 0, &g), 1);
    cr_assert_eq(g.create[0], 4);
    cr_assert_eq(g.ver[0], 1);
}

Test(kvstore, restart_without_compaction_keeps_history)
{
    do_ops(s);
    reopen();
    struct got g;
    cr_assert_eq(mvcc_rev(s), 9);
    cr_assert_eq(mvcc_compact_rev(s), -1);
    cr_assert_eq(get1("a", 2, &g), 1);
    cr_assert_str_eq(g.val[0], "a1");
    cr_assert_eq(get1("b", 6, &g), 0);
    cr_assert_eq(get1("x", 8, &g), 1);
    cr_assert_eq(get1("x", 9, &g), 0);
}

Test(kvstore, hash_kv_equal_stores_equal_hashes)
{
    struct twin tw;
    twin_open(&tw);
    mvcc_store *s2 = tw.s;

    uint32_t h1, h2, h0;
    int64_t c;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h0, &c), 0);
    do_ops(s);
    do_ops(s2);
    cr_assert_eq(mvcc_hash_kv(s, 0, &h1, &c), 0);
    cr_assert_eq(mvcc_hash_kv(s2, 0, &h2, &c), 0);
    cr_assert_eq(h1, h2);
    cr_assert_neq(h1, h0);
    cr_assert_eq(c, -1, "never compacted: -1, as etcd 3.4 answers HashKV");

    /* one more change on s2: hashes differ at the current revision, and
     * agree at the revision both have */
    put_lease(s2, "a", "different", 0);
    uint32_t h3;
    cr_assert_eq(mvcc_hash_kv(s2, 0, &h3, &c), 0);
    cr_assert_neq(h3, h1);
    cr_assert_eq(mvcc_hash_kv(s2, 9, &h3, &c), 0);
    cr_assert_eq(h3, h1);

    /* a different value at the same revisions differs */
    put_lease(s, "a", "other", 0);
    uint32_t h4, h5;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h4, &c), 0);
    cr_assert_eq(mvcc_hash_kv(s2, 0, &h5, &c), 0);
    cr_assert_neq(h4, h5);

    /* compaction on both keeps them equal; errors around it */
    compact(s, 6, 0);
    compact(s2, 6, 0);
    cr_assert_eq(mvcc_hash_kv(s, 9, &h4, &c), 0);
    cr_assert_eq(c, 6);
    cr_assert_eq(mvcc_hash_kv(s2, 9, &h5, &c), 0);
    cr_assert_eq(h4, h5);
    cr_assert_eq(mvcc_hash_kv(s, 6, &h4, &c), QERR_COMPACTED);
    cr_assert_eq(mvcc_hash_kv(s, 11, &h4, &c), QERR_FUTURE_REV);

    twin_close(&tw);
}

/* Many keys, then reopen: the rebuilt index matches a full scan. */
Test(kvstore, many_keys_survive_restart)
{
    enum { N = 3000 };
    mvcc_txn *t;
    char k[32], v[32];
    cr_assert_eq(mvcc_batch_begin(s), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(mvcc_txn_begin(s, &t), 0);
        snprintf(k, sizeof(k), "key/%05d", (i * 31) % N);
        snprintf(v, sizeof(v), "v%d", i);
        cr_assert_eq(mvcc_txn_put(t, S(k), S(v), 0, NULL, NULL), 0);
        mvcc_txn_end(t);
    }
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(mvcc_rev(s), N + 1);
    reopen();
    cr_assert_eq(mvcc_rev(s), N + 1);
    mvcc_read *r;
    struct mvcc_range_result res;
    struct mvcc_range_opts o = {.count_only = true};
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    cr_assert_eq(mvcc_read_range(r, S("key/"), S("key0"), &o, NULL, NULL, &res), 0);
    cr_assert_eq(res.count, N);
    o = (struct mvcc_range_opts){.limit = 10};
    struct got g = {0};
    cr_assert_eq(mvcc_read_range(r, S("key/01000"), FROM_KEY, &o, collect, &g, &res), 0);
    cr_assert_eq(g.n, 10);
    cr_assert_str_eq(g.key[0], "key/01000");
    cr_assert_str_eq(g.key[9], "key/01009");
    cr_assert_eq(res.count, N - 1000);
    mvcc_read_end(r);
}

/* The hash is crc32c over "key" then each record's revision key and value,
 * as etcd computes it: recompute it by hand for a two-record store. */
Test(kvstore, hash_kv_matches_etcd_formula)
{
    put("a", "1"); /* 2 */
    del("a");      /* 3 */
    uint8_t rk1[MVCC_REVKEY_MAX], rk2[MVCC_REVKEY_MAX];
    size_t n1 = mvcc_revkey_put(rk1, 2, 0, false), n2 = mvcc_revkey_put(rk2, 3, 0, true);
    static const uint8_t v1[] = {0x0a, 0x01, 'a',  0x10, 0x02, 0x18,
                                 0x02, 0x20, 0x01, 0x2a, 0x01, '1'};
    static const uint8_t v2[] = {0x0a, 0x01, 'a'};
    uint32_t want = crc32c_update(0, "key", 3);
    want = crc32c_update(want, rk1, n1);
    want = crc32c_update(want, v1, sizeof(v1));
    uint32_t want2 = crc32c_update(want, rk2, n2);
    want2 = crc32c_update(want2, v2, sizeof(v2));
    uint32_t h;
    int64_t c;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h, &c), 0);
    cr_assert_eq(h, want2);
    cr_assert_eq(mvcc_hash_kv(s, 2, &h, &c), 0);
    cr_assert_eq(h, want);
    cr_assert_eq(mvcc_hash_kv(s, 1, &h, &c), 0);
    cr_assert_eq(h, crc32c_update(0, "key", 3));
}

Test(kvstore, map_full_is_no_space)
{
    close_store();
    struct backend_options o = {.dir = dirbuf, .map_size = 1 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &s), 0);
    static char val[3000];
    memset(val, 'v', sizeof(val) - 1);
    int rv = 0;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    for (int i = 0; i < 1000 && rv == 0; i++) {
        mvcc_txn *t;
        char k[16];
        snprintf(k, sizeof(k), "k%04d", i);
        cr_assert_eq(mvcc_txn_begin(s, &t), 0);
        rv = mvcc_txn_put(t, S(k), S(val), 0, NULL, NULL);
        mvcc_txn_end(t);
    }
    cr_assert_eq(rv, QERR_NO_SPACE);
    cr_assert_neq(mvcc_batch_commit(s), 0); /* the batch is lost */
    /* the store is back at the last commit and usable */
    cr_assert_eq(mvcc_rev(s), 1);
    struct got g;
    cr_assert_eq(get1("k0000", 0, &g), 0);
    cr_assert_eq(put("small", "1"), 2);

    /* abort drops an open batch the same way */
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("gone"), S("x"), 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_end(t), 3);
    cr_assert_eq(mvcc_batch_abort(s), 0);
    cr_assert_eq(mvcc_rev(s), 2);
    cr_assert_eq(get1("gone", 0, &g), 0);
    cr_assert_eq(get1("small", 0, &g), 1);
    cr_assert_eq(put("again", "1"), 3);
}

Test(kvstore, index_bytes_grow_with_keys)
{
    size_t b0 = mvcc_index_bytes(s);
    seed_abc();
    size_t b1 = mvcc_index_bytes(s);
    cr_assert_gt(b1, b0 + 6 * 16);
}

/* ---- randomized comparison against a naive model ---- */

#define MK 16  /* keys */
#define MH 512 /* history entries per key */

struct mver {
    int64_t main, sub, create, ver, lease;
    bool tomb;
    char val[12];
};
static struct mver hist[MK][MH];
static int nhist[MK];

/* model_at: the version of key |k| visible at |rev|, or NULL. */
static const struct mver *model_at(int k, int64_t rev)
{
    const struct mver *r = NULL;
    for (int i = 0; i < nhist[k]; i++)
        if (hist[k][i].main <= rev)
            r = &hist[k][i];
    return r && !r->tomb ? r : NULL;
}

static void check_model(int64_t rev)
{
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, rev, 0, false, &g, &res), 0, "rev %lld",
                 (long long)rev);
    int j = 0;
    for (int k = 0; k < MK; k++) {
        const struct mver *m = model_at(k, rev);
        if (m == NULL)
            continue;
        char key[8];
        snprintf(key, sizeof(key), "k%02d", k);
        cr_assert_lt(j, g.n, "rev %lld: missing %s", (long long)rev, key);
        cr_assert_str_eq(g.key[j], key, "rev %lld", (long long)rev);
        cr_assert_str_eq(g.val[j], m->val);
        cr_assert_eq(g.mod[j], m->main, "rev %lld key %s", (long long)rev, key);
        cr_assert_eq(g.create[j], m->create, "rev %lld key %s", (long long)rev, key);
        cr_assert_eq(g.ver[j], m->ver, "rev %lld key %s", (long long)rev, key);
        cr_assert_eq(g.lease[j], m->lease);
        j++;
    }
    cr_assert_eq(j, g.n, "rev %lld", (long long)rev);
    cr_assert_eq(res.count, j);
    /* a sub-range with a limit counts the same keys */
    struct got g2;
    cr_assert_eq(rng(S("k03"), S("k11"), rev, 2, false, &g2, &res), 0);
    int want = 0;
    for (int k = 3; k < 11; k++)
        want += model_at(k, rev) != NULL;
    cr_assert_eq(res.count, want);
    cr_assert_eq(g2.n, want < 2 ? want : 2);
}

/* txn_read_check reads key |k| inside |t| (a single-key range, which the
 * txn's read memo keeps) and checks it against |want| (NULL: absent) */
static void txn_read_check(mvcc_txn *t, int k, const struct mver *want)
{
    char key[8];
    snprintf(key, sizeof(key), "k%02d", k);
    struct got g;
    memset(&g, 0, sizeof(g));
    cr_assert_eq(mvcc_txn_range(t, S(key), NULL, 0, NULL, collect, &g, NULL), 0);
    cr_assert_eq(g.n, want != NULL ? 1 : 0, "txn read of %s", key);
    if (want != NULL) {
        cr_assert_str_eq(g.val[0], want->val);
        cr_assert_eq(g.mod[0], want->main);
        cr_assert_eq(g.create[0], want->create);
        cr_assert_eq(g.ver[0], want->ver);
    }
}

/* the kv a put or a delete replaces, as the store hands it to prev_fn */
static int prev_check(const struct mvcc_kv *kv, void *arg)
{
    const struct mver *want = arg;
    cr_assert_not_null(want, "a prev for a key the model has not");
    cr_assert_eq(kv->mod_revision, want->main);
    cr_assert_eq(kv->create_revision, want->create);
    cr_assert_eq(kv->version, want->ver);
    cr_assert_eq(kv->lease, want->lease);
    cr_assert_eq(kv->value_len, strlen(want->val));
    cr_assert_eq(memcmp(kv->value, want->val, kv->value_len), 0);
    return 0;
}

Test(kvstore, random_ops_match_model)
{
    srand(12345);
    memset(nhist, 0, sizeof(nhist));
    int64_t rev = 1, compact_rev = -1;
    for (int step = 0; step < 400; step++) {
        int op = rand() % 100;
        if (op < 75) {
            /* a txn of 1-3 ops on distinct keys: put or delete-range */
            mvcc_txn *t;
            int saved[MK];
            memcpy(saved, nhist, sizeof(saved));
            cr_assert_eq(mvcc_batch_begin(s), 0);
            cr_assert_eq(mvcc_txn_begin(s, &t), 0);
            int nops = 1 + rand() % 3, used[3] = {-1, -1, -1}, changes = 0;
            for (int o = 0; o < nops; o++) {
                int k = rand() % MK;
                if (k == used[0] || k == used[1])
                    continue;
                used[o] = k;
                char key[8];
                snprintf(key, sizeof(key), "k%02d", k);
                const struct mver *cur = model_at(k, rev + (changes ? 1 : 0));
                /* reads in the txn before its writes: of this key or another
                 * (what a put then replaces may come from the read memo) */
                if (rand() % 2)
                    txn_read_check(t, k, cur);
                if (rand() % 3 == 0) {
                    int other = rand() % MK;
                    txn_read_check(t, other, model_at(other, rev + (changes ? 1 : 0)));
                }
                if (rand() % 4) {
                    char val[12];
                    snprintf(val, sizeof(val), "v%d", step);
                    int64_t lease = rand() % 3;
                    cr_assert_eq(mvcc_txn_put(t, S(key), S(val), lease, prev_check, (void *)cur),
                                 0);
                    struct mver *m = &hist[k][nhist[k]++];
                    *m = (struct mver){.main = rev + 1,
                                       .sub = changes,
                                       .create = cur ? cur->create : rev + 1,
                                       .ver = cur ? cur->ver + 1 : 1,
                                       .lease = lease};
                    snprintf(m->val, sizeof(m->val), "%s", val);
                    changes++;
                    if (rand() % 3 == 0)
                        txn_read_check(t, k, m);
                } else {
                    int64_t n;
                    cr_assert_eq(
                        mvcc_txn_delete_range(t, S(key), NULL, 0, prev_check, (void *)cur, &n), 0);
                    cr_assert_eq(n, cur ? 1 : 0);
                    if (cur) {
                        hist[k][nhist[k]++] =
                            (struct mver){.main = rev + 1, .sub = changes, .tomb = true};
                        changes++;
                    }
                }
            }
            int64_t after = mvcc_txn_end(t);
            if (rand() % 10 == 0) {
                /* the batch is dropped: the store and the model go back
                 * (the revision its puts took is written again after) */
                cr_assert_eq(mvcc_batch_abort(s), 0);
                memcpy(nhist, saved, sizeof(saved));
            } else {
                cr_assert_eq(mvcc_batch_commit(s), 0);
                if (changes)
                    rev++;
                cr_assert_eq(after, rev);
            }
        } else if (op < 85) {
            int64_t at = compact_rev + 1 + rand() % 5;
            if (at > rev) {
                compact(s, at, QERR_FUTURE_REV);
                continue;
            }
            compact(s, at, 0);
            compact_rev = at;
        } else if (op < 90) {
            reopen();
        } else {
            /* wide delete-range */
            int a = rand() % MK, b = a + rand() % 6;
            char ka[8], kb[8];
            snprintf(ka, sizeof(ka), "k%02d", a);
            snprintf(kb, sizeof(kb), "k%02d", b);
            int64_t n, want = 0;
            for (int k = a; k < b && k < MK; k++)
                if (model_at(k, rev)) {
                    hist[k][nhist[k]++] = (struct mver){.main = rev + 1, .sub = want, .tomb = true};
                    want++;
                }
            cr_assert_eq(del_range(s, S(ka), S(kb), &n), want ? rev + 1 : rev);
            cr_assert_eq(n, want);
            if (want)
                rev++;
        }
        cr_assert_eq(mvcc_rev(s), rev);
        cr_assert_eq(mvcc_compact_rev(s), compact_rev);
        /* check the current revision and a few retained ones */
        check_model(rev);
        for (int i = 0; i < 3; i++) {
            int64_t lo = compact_rev > 1 ? compact_rev : 1;
            check_model(lo + rand() % (rev - lo + 1));
        }
        if (compact_rev > 1) {
            struct got g;
            struct mvcc_range_result res;
            cr_assert_eq(rng(S("k00"), NULL, 0, compact_rev - 1, 0, false, &g, &res),
                         QERR_COMPACTED);
        }
    }
    cr_assert_gt(rev, 150);
    cr_assert_gt(compact_rev, 10);
}

Test(kvstore, binary_keys_order_by_bytes)
{
    static const uint8_t k1[] = {'a'}, k2[] = {'a', 0}, k3[] = {'a', 0, 'b'}, k4[] = {'a', 1},
                         k5[] = {0xff, 0xff};
    const uint8_t *keys[] = {k5, k3, k1, k4, k2};
    size_t lens[] = {2, 3, 1, 2, 2};
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mvcc_txn_put(t, keys[i], lens[i], (const uint8_t *)"v", 1, 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_end(t), 2);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    struct got g;
    struct mvcc_range_result res;
    /* [a\0, a\1) */
    cr_assert_eq(rng(k2, 2, k4, 2, 0, 0, false, &g, &res), 0);
    cr_assert_eq(res.count, 2);
    cr_assert_eq(rng((const uint8_t *)"", 0, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(res.count, 5);
    cr_assert_eq(rng(k5, 2, FROM_KEY, 0, 0, false, &g, &res), 0);
    cr_assert_eq(res.count, 1);
    cr_assert_eq(rng(k1, 1, NULL, 0, 0, 0, false, &g, &res), 0);
    cr_assert_eq(res.count, 1);
}

Test(kvstore, undecodable_record_is_corrupt)
{
    put("a", "1");
    close_store();
    struct backend_options o = {.dir = dirbuf, .map_size = 64 << 20};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(backend_batch_begin(be), 0);
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, 3, 0, false), rk}, d = {2, "\x0a\x05"};
    cr_assert_eq(mdb_put(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_KEY), &k, &d, 0), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_eq(mvcc_open(be, &s), QERR_CORRUPT);
    cr_assert_null(s);
    backend_close(be);
    be = NULL;
}

struct hrec {
    int n;
    int type[32];
    char key[32][8];
    char val[32][8];
    int64_t mod[32], ver[32];
    struct mvcc_kv kvs[32];
};

static int on_hist(enum mvcc_event_type type, const struct mvcc_kv *kv, void *arg)
{
    struct hrec *h = arg;
    cr_assert_lt(h->n, 32);
    h->type[h->n] = type;
    snprintf(h->key[h->n], 8, "%.*s", (int)kv->key_len, (const char *)kv->key);
    snprintf(h->val[h->n], 8, "%.*s", (int)kv->value_len, (const char *)kv->value);
    h->mod[h->n] = kv->mod_revision;
    h->ver[h->n] = kv->version;
    h->kvs[h->n] = *kv; /* pointers must outlive the call */
    h->n++;
    return 0;
}

Test(kvstore, read_history_in_revision_order)
{
    do_ops(s); /* 2 a, 3 b, 4 a, 5 x, 6 del b, 7 c, 8 a, 9 del x */
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(s), 0); /* 10: two changes */
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("z"), S("z1"), 0, NULL, NULL), 0);
    int64_t n;
    cr_assert_eq(mvcc_txn_delete_range(t, S("c"), NULL, 0, NULL, NULL, &n), 0);
    cr_assert_eq(mvcc_txn_end(t), 10);
    cr_assert_eq(mvcc_batch_commit(s), 0);

    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    cr_assert_eq(mvcc_read_rev(r), 10);
    struct hrec h = {0};
    cr_assert_eq(mvcc_read_history(r, 4, 10, on_hist, &h), 0);
    cr_assert_eq(h.n, 8);
    const char *keys[] = {"a", "x", "b", "c", "a", "x", "z", "c"};
    int64_t mods[] = {4, 5, 6, 7, 8, 9, 10, 10};
    int types[] = {0, 0, 1, 0, 0, 1, 0, 1};
    for (int i = 0; i < 8; i++) {
        cr_assert_str_eq(h.key[i], keys[i], "event %d", i);
        cr_assert_eq(h.mod[i], mods[i], "event %d", i);
        cr_assert_eq(h.type[i], types[i], "event %d", i);
    }
    cr_assert_str_eq(h.val[0], "a2");
    cr_assert_eq(h.ver[4], 3);
    cr_assert_eq(h.ver[2], 0);
    /* pointers stay valid until the read ends: check them now */
    for (int i = 0; i < 8; i++) {
        struct mvcc_kv d;
        cr_assert_eq(mvcc_kv_decode(h.kvs[i].raw, h.kvs[i].raw_len, &d), 0);
        cr_assert_eq(d.mod_revision, mods[i]);
        cr_assert_eq(d.key_len, 1);
        cr_assert_eq(d.key[0], keys[i][0]);
    }
    /* a window in the middle; an empty one */
    memset(&h, 0, sizeof(h));
    cr_assert_eq(mvcc_read_history(r, 6, 6, on_hist, &h), 0);
    cr_assert_eq(h.n, 1);
    memset(&h, 0, sizeof(h));
    cr_assert_eq(mvcc_read_history(r, 11, 20, on_hist, &h), 0);
    cr_assert_eq(h.n, 0);
    mvcc_read_end(r);

    /* after compaction only what it kept is left below it */
    compact(s, 8, 0);
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    memset(&h, 0, sizeof(h));
    cr_assert_eq(mvcc_read_history(r, 0, 10, on_hist, &h), 0);
    /* kept: 7 c, 8 a (latest at 8), 5 x (x is live at 8); then 9, 10, 10 */
    cr_assert_eq(h.n, 6);
    cr_assert_eq(h.mod[0], 5);
    cr_assert_eq(h.mod[1], 7);
    cr_assert_eq(h.mod[2], 8);
    cr_assert_eq(h.mod[3], 9);
    mvcc_read_end(r);
}

/* etcd's compactMainRev starts at -1: Compact(0) succeeds once on a store
 * never compacted, is remembered across a restart, and then fails. */
Test(kvstore, compact_zero_once_as_etcd)
{
    compact(s, -1, QERR_COMPACTED);
    compact(s, 0, 0);
    cr_assert_eq(mvcc_compact_rev(s), 0);
    compact(s, 0, QERR_COMPACTED);
    reopen();
    cr_assert_eq(mvcc_compact_rev(s), 0);
    compact(s, 0, QERR_COMPACTED);
    compact(s, 1, 0);
    cr_assert_eq(mvcc_compact_rev(s), 1);
}

/* ---- compaction in steps ---- */

/* digest folds every kv a range visits (key, value, revisions) into a crc:
 * two reads that see the same data give the same digest. */
struct digest {
    uint32_t crc;
    int64_t n;
};

static int digest_kv(const struct mvcc_kv *kv, void *arg)
{
    struct digest *d = arg;
    d->crc = crc32c_update(d->crc, kv->raw, kv->raw_len);
    d->n++;
    return 0;
}

static struct digest digest_at(mvcc_store *st, int64_t rev)
{
    mvcc_read *r;
    struct digest d = {0};
    struct mvcc_range_opts o = {.rev = rev};
    cr_assert_eq(mvcc_read_begin(st, &r), 0);
    cr_assert_eq(mvcc_read_range(r, FROM_KEY, FROM_KEY, &o, digest_kv, &d, NULL), 0);
    mvcc_read_end(r);
    return d;
}

static void put_in(mvcc_store *st, const char *k, const char *v)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(st, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S(k), S(v), 0, NULL, NULL), 0);
    mvcc_txn_end(t);
}

static void del_in(mvcc_store *st, const char *k)
{
    mvcc_txn *t;
    int64_t n;
    cr_assert_eq(mvcc_txn_begin(st, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, S(k), NULL, 0, NULL, NULL, &n), 0);
    mvcc_txn_end(t);
}

/* history writes |nkeys| keys |rounds| times each in one batch, deleting
 * every fifth key in the last round, and one hot key |hot| times more. */
static void history(mvcc_store *st, int nkeys, int rounds, int hot)
{
    char k[32], v[32];
    cr_assert_eq(mvcc_batch_begin(st), 0);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nkeys; i++) {
            snprintf(k, sizeof(k), "k%05d", i);
            snprintf(v, sizeof(v), "v%d.%d", i, r);
            put_in(st, k, v);
        }
    for (int i = 0; i < nkeys; i += 5) {
        snprintf(k, sizeof(k), "k%05d", i);
        del_in(st, k);
    }
    for (int i = 0; i < hot; i++) {
        snprintf(v, sizeof(v), "h%d", i);
        put_in(st, "hot", v);
    }
    cr_assert_eq(mvcc_batch_commit(st), 0);
}

static uint64_t meta(mvcc_store *st, backend *b, const char *name)
{
    (void)st;
    uint64_t v = 0;
    int rv = backend_meta_get(b, NULL, name, &v);
    return rv == 0 ? v : (uint64_t)-1;
}

/* Reads below the compaction fail as soon as it is scheduled; reads at and
 * above it see the same data before, between and after the steps, while
 * writes land between steps; the end result equals a compaction done in
 * one piece on a twin store that took the same writes. */
Test(kvstore, compaction_in_steps_with_writes_between)
{
    struct twin tw;
    twin_open(&tw);
    mvcc_store *s2 = tw.s;

    history(s, 400, 6, 300);
    history(s2, 400, 6, 300);
    int64_t at = mvcc_rev(s) - 500; /* inside the hot key's history */
    int64_t top = mvcc_rev(s);
    struct digest d_at = digest_at(s, at), d_mid = digest_at(s, at + 250), d_top = digest_at(s, 0);
    cr_assert_gt(d_at.n, 300);
    size_t before = key_db_entries();

    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_compact(s, at), 0);
    cr_assert(mvcc_compacting(s));
    cr_assert_eq(mvcc_batch_commit(s), 0);
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(rng(FROM_KEY, FROM_KEY, at - 1, 0, true, &g, &res), QERR_COMPACTED,
                 "refused once scheduled, before any step");
    cr_assert_eq(key_db_entries(), before, "nothing removed yet");

    compact(s2, at, 0); /* the twin: all at once (before its writes) */
    int steps = 0;
    bool done = false;
    char k[32], v[32];
    while (!done) {
        cr_assert_eq(mvcc_batch_begin(s), 0);
        cr_assert_eq(mvcc_compact_step(s, 7, &done), 0);
        steps++;
        /* writes between steps, behind and ahead of the step's position,
         * on both stores */
        snprintf(k, sizeof(k), "k%05d", (steps * 37) % 420);
        snprintf(v, sizeof(v), "w%d", steps);
        mvcc_store *both[2] = {s, s2};
        for (int i = 0; i < 2; i++) {
            if (i == 1)
                cr_assert_eq(mvcc_batch_begin(s2), 0);
            if (steps % 3 == 0)
                del_in(both[i], k);
            else
                put_in(both[i], k, v);
            cr_assert_eq(mvcc_batch_commit(both[i]), 0);
        }
        if (steps % 25 == 0) {
            struct digest d = digest_at(s, at);
            cr_assert_eq(d.crc, d_at.crc, "a read at the compaction revision, step %d", steps);
            cr_assert_eq(digest_at(s, at + 250).crc, d_mid.crc);
            cr_assert_eq(digest_at(s, top).crc, d_top.crc);
        }
    }
    cr_assert_gt(steps, 100, "many small steps (%d)", steps);
    cr_assert_not(mvcc_compacting(s));
    cr_assert_eq(meta(s, be, "finishedCompactRev"), (uint64_t)at);
    cr_assert_eq(digest_at(s, at).crc, d_at.crc);
    cr_assert_eq(digest_at(s, top).crc, d_top.crc);
    cr_assert_eq(digest_at(s, 0).crc, digest_at(s2, 0).crc);
    cr_assert_eq(key_db_entries(), key_db_entries_of(tw.be));
    uint32_t h1, h2;
    int64_t c1, c2;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h1, &c1), 0);
    cr_assert_eq(mvcc_hash_kv(s2, 0, &h2, &c2), 0);
    cr_assert_eq(h1, h2);
    cr_assert_eq(c1, at);
    cr_assert_eq(c2, at);

    twin_close(&tw);
}

/* A restart in the middle: the scheduled mark is above the finished one,
 * the store comes back compacting (reads below still refused), and the
 * resumed pass finishes with the same data and hash as one that never
 * stopped. Also through mvcc_batch_abort, which reloads the same way. */
Test(kvstore, compaction_resumes_after_restart)
{
    history(s, 300, 5, 200);
    int64_t at = mvcc_rev(s) - 100;
    uint32_t want;
    int64_t c;
    cr_assert_eq(mvcc_hash_kv(s, 0, &want, &c), 0);
    struct digest d_top = digest_at(s, 0);

    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_compact(s, at), 0);
    bool done = false;
    for (int i = 0; i < 40; i++)
        cr_assert_eq(mvcc_compact_step(s, 5, &done), 0);
    cr_assert_not(done);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    /* a step after the commit is lost with its batch */
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_compact_step(s, 5, &done), 0);
    cr_assert_eq(mvcc_batch_abort(s), 0);
    cr_assert(mvcc_compacting(s));
    cr_assert_eq(mvcc_compact_rev(s), at);

    reopen();
    cr_assert(mvcc_compacting(s), "resumes after a restart");
    cr_assert_eq(mvcc_compact_rev(s), at);
    cr_assert_eq(meta(s, be, "scheduledCompactRev"), (uint64_t)at);
    cr_assert_eq(meta(s, be, "finishedCompactRev"), (uint64_t)-1, "never finished");
    uint64_t pos = meta(s, be, "quorumCompactNextRev");
    cr_assert(pos > 1 && pos < (uint64_t)at, "the position of the last committed step (%llu)",
              (unsigned long long)pos);
    struct mvcc_compact_stats cs;
    mvcc_compact_progress(s, &cs);
    cr_assert_eq(cs.rev, at);
    cr_assert_eq(cs.next_rev, (int64_t)pos, "resumes there");
    struct got g;
    struct mvcc_range_result res;
    cr_assert_eq(rng(FROM_KEY, FROM_KEY, at - 1, 0, true, &g, &res), QERR_COMPACTED);
    cr_assert_eq(digest_at(s, 0).crc, d_top.crc);

    cr_assert_eq(mvcc_batch_begin(s), 0);
    while (!done)
        cr_assert_eq(mvcc_compact_step(s, 64, &done), 0);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(meta(s, be, "finishedCompactRev"), (uint64_t)at);
    reopen();
    cr_assert_not(mvcc_compacting(s));
    cr_assert_eq(digest_at(s, 0).crc, d_top.crc);
    uint32_t got;
    cr_assert_eq(mvcc_hash_kv(s, 0, &got, &c), 0);
    cr_assert_eq(c, at);
    /* a store compacted without interruption has the same hash */
    struct twin tw;
    twin_open(&tw);
    mvcc_store *s2 = tw.s;
    history(s2, 300, 5, 200);
    compact(s2, at, 0);
    uint32_t h2;
    cr_assert_eq(mvcc_hash_kv(s2, 0, &h2, &c), 0);
    cr_assert_eq(got, h2);
    twin_close(&tw);
}

/* A second compaction while one is under way takes over; the finished mark
 * is the later one. */
Test(kvstore, compaction_superseded_while_under_way)
{
    history(s, 200, 4, 0);
    int64_t first = mvcc_rev(s) - 300, second = mvcc_rev(s) - 10;
    cr_assert_eq(mvcc_batch_begin(s), 0);
    cr_assert_eq(mvcc_compact(s, first), 0);
    bool done = false;
    for (int i = 0; i < 10; i++)
        cr_assert_eq(mvcc_compact_step(s, 3, &done), 0);
    cr_assert_eq(mvcc_compact(s, first), QERR_COMPACTED);
    cr_assert_eq(mvcc_compact(s, second), 0);
    while (!done)
        cr_assert_eq(mvcc_compact_step(s, 50, &done), 0);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(meta(s, be, "finishedCompactRev"), (uint64_t)second);
    cr_assert_eq(meta(s, be, "scheduledCompactRev"), (uint64_t)second);
    /* kept: each key's latest revision at or below |second| unless it is a
     * tombstone (the keys live at |second|), and every later revision (one
     * change each here) */
    size_t kept = (size_t)digest_at(s, second).n + (size_t)(mvcc_rev(s) - second);
    cr_assert_eq(key_db_entries(), kept);
}

/* One revision holding many more kept records than a step may visit (a txn
 * of 300 puts): steps resume exactly where the last one stopped, inside the
 * revision, so the pass still ends (resuming at the revision's start would
 * visit the same kept records forever). */
/* txn_puts writes keys printf(|fmt|, 0..|n|-1) = |v| in one txn of the
 * open batch (one revision of |n| records) and returns its revision. */
static int64_t txn_puts(mvcc_store *st, const char *fmt, int n, const char *v)
{
    char k[32];
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(st, &t), 0);
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), fmt, i);
        cr_assert_eq(mvcc_txn_put(t, S(k), S(v), 0, NULL, NULL), 0);
    }
    return mvcc_txn_end(t);
}

Test(kvstore, compaction_steps_through_a_large_revision)
{
    cr_assert_eq(mvcc_batch_begin(s), 0);
    int64_t r1 = txn_puts(s, "t%03d", 300, "a");
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("t299"), S("b"), 0, NULL, NULL), 0);
    int64_t r2 = mvcc_txn_end(t);
    cr_assert_eq(r2, r1 + 1);
    cr_assert_eq(mvcc_compact(s, r2), 0);
    bool done = false;
    int steps = 0;
    while (!done && steps < 1000) {
        cr_assert_eq(mvcc_compact_step(s, 1, &done), 0);
        steps++;
    }
    cr_assert(done, "the pass ended (%d steps)", steps);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(key_db_entries(), 300, "299 kept at r1, t299 at r2");
    cr_assert_eq(digest_at(s, 0).n, 300);
}

struct lease_seen {
    int n;
    char key[8][16];
    int64_t lease[8];
};

static void seen_lease(const uint8_t *key, size_t len, int64_t lease, void *arg)
{
    struct lease_seen *ls = arg;
    cr_assert_lt(ls->n, 8);
    snprintf(ls->key[ls->n], sizeof(ls->key[0]), "%.*s", (int)len, (const char *)key);
    ls->lease[ls->n++] = lease;
}

/* mvcc_live_leases reports exactly the live keys whose current revision is
 * bound to a lease, with that lease: not a key's older binding, not a
 * deleted key, not a key put again without one. */
Test(kvstore, live_leases_are_the_current_bindings)
{
    put_lease(s, "a", "1", 7);
    put_lease(s, "b", "1", 7);
    put_lease(s, "c", "1", 8);
    put_lease(s, "a", "2", 0); /* a leaves lease 7 */
    del("b");                  /* b is gone */
    put_lease(s, "d", "1", 7);
    put_lease(s, "c", "2", 9); /* c moves to lease 9 */
    put_lease(s, "e", "1", 0);
    struct lease_seen ls = {0};
    cr_assert_eq(mvcc_live_leases(s, seen_lease, &ls), 0);
    cr_assert_eq(ls.n, 2);
    /* revision order: c's binding (9) comes after d's (7) */
    cr_assert_str_eq(ls.key[0], "d");
    cr_assert_eq(ls.lease[0], 7);
    cr_assert_str_eq(ls.key[1], "c");
    cr_assert_eq(ls.lease[1], 9);
    reopen();
    memset(&ls, 0, sizeof(ls));
    cr_assert_eq(mvcc_live_leases(s, seen_lease, &ls), 0);
    cr_assert_eq(ls.n, 2);
}

/* The index rebuilt at open by several threads, each loading a stretch of
 * revisions (keys written in every stretch, deleted and put again across
 * the cuts, one revision of many records), is the index a single pass
 * builds: the same reads at every revision, the same hash. */
Test(kvstore, threaded_rebuild_equals_single)
{
    history(s, 500, 7, 200);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    txn_puts(s, "k%05d", 300, "big");
    cr_assert_eq(mvcc_batch_commit(s), 0);
    int64_t top = mvcc_rev(s);
    int64_t revs[] = {2, top / 3, top / 2, top - 250, top - 1, top};
    struct digest want[6];
    for (int i = 0; i < 6; i++)
        want[i] = digest_at(s, revs[i]);
    uint32_t h0;
    int64_t c;
    cr_assert_eq(mvcc_hash_kv(s, 0, &h0, &c), 0);
    size_t ix0 = mvcc_index_bytes(s);
    for (int n = 1; n <= 5; n += 2) {
        mvcc_set_rebuild_threads(n);
        reopen();
        mvcc_set_rebuild_threads(0);
        cr_assert_eq(mvcc_rev(s), top);
        for (int i = 0; i < 6; i++) {
            struct digest d = digest_at(s, revs[i]);
            cr_assert_eq(d.crc, want[i].crc, "%d threads, revision %lld", n, (long long)revs[i]);
            cr_assert_eq(d.n, want[i].n);
        }
        uint32_t h;
        cr_assert_eq(mvcc_hash_kv(s, 0, &h, &c), 0);
        cr_assert_eq(h, h0);
        cr_assert_leq(mvcc_index_bytes(s), ix0, "trimmed entries (%d threads)", n);
        put("k00001", "after"); /* and the index goes on taking writes */
        struct got g;
        cr_assert_eq(get1("k00001", 0, &g), 1);
        cr_assert_str_eq(g.val[0], "after");
        top = mvcc_rev(s);
        want[5] = digest_at(s, top);
        revs[5] = top;
        cr_assert_eq(mvcc_hash_kv(s, 0, &h0, &c), 0);
        ix0 = mvcc_index_bytes(s);
    }
}
