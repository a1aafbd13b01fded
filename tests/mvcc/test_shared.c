/* tests/mvcc/test_shared.c: reads from other threads (mvcc_share,
 * mvcc_read_begin_shared) while the owner writes, commits, compacts and
 * replaces its read txns, on a real LMDB file. Run under ThreadSanitizer
 * too (tests/run's build-tsan). */
#ifdef SHARED_STANDALONE
/* Built without criterion for ThreadSanitizer, whose memory layout
 * criterion's shared arena cannot map: the same tests, plain asserts. */
#include <stdio.h>
#include <stdlib.h>
static void cr_fail_at(const char *file, int line)
{
    fprintf(stderr, "%s:%d: assertion failed\n", file, line);
    abort();
}
#define CR_FAIL(...) cr_fail_at(__FILE__, __LINE__)
#define cr_assert_eq(a, b, ...) ((a) == (b) ? (void)0 : CR_FAIL())
#define cr_assert_gt(a, b, ...) ((a) > (b) ? (void)0 : CR_FAIL())
#define cr_assert_not_null(a, ...) ((a) != NULL ? (void)0 : CR_FAIL())
#define cr_assert_str_eq(a, b, ...) (strcmp((a), (b)) == 0 ? (void)0 : CR_FAIL())
#define TestSuite(...)
#define Test(suite, name, ...) static void name(void)
#else
#include <criterion/criterion.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "mvcc/mvcc.h"
#include "tmpdir.h"

#define S(x) (const uint8_t *)(x), strlen(x)

static char dirbuf[64];
static backend *be;
static mvcc_store *s;

static void setup(void)
{
    const char *d = tmpdir_make();
    cr_assert_not_null(d);
    snprintf(dirbuf, sizeof(dirbuf), "%s", d);
    struct backend_options o = {.dir = dirbuf, .map_size = 256 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &s), 0);
}

static void teardown(void)
{
    mvcc_close(s);
    backend_close(be);
    tmpdir_remove(dirbuf);
}

TestSuite(shared, .init = setup, .fini = teardown);

#define NKEYS 16

/* put_all writes every key with |val| in one txn (one revision). */
static int64_t put_all(const char *val)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    for (int i = 0; i < NKEYS; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%02d", i);
        cr_assert_eq(mvcc_txn_put(t, S(k), S(val), 0, NULL, NULL), 0);
    }
    return mvcc_txn_end(t);
}

struct seen {
    int n;
    char first[32];
    bool mixed;
};

static int visit(const struct mvcc_kv *kv, void *arg)
{
    struct seen *w = arg;
    char v[32];
    snprintf(v, sizeof(v), "%.*s", (int)kv->value_len, (const char *)kv->value);
    if (w->n == 0)
        snprintf(w->first, sizeof(w->first), "%s", v);
    else if (strcmp(v, w->first) != 0)
        w->mixed = true;
    w->n++;
    return 0;
}

Test(shared, refused_until_shared_and_committed)
{
    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin_shared(s, 0, &r), -EAGAIN, "not shared yet");
    cr_assert_eq(mvcc_share(s), 0);
    cr_assert_eq(mvcc_read_begin_shared(s, 0, &r), 0);
    cr_assert_eq(mvcc_read_rev(r), 1);
    mvcc_read_end(r);

    cr_assert_eq(mvcc_batch_begin(s), 0);
    int64_t rev = put_all("a");
    /* applied, not committed: only the owner can read it */
    cr_assert_eq(mvcc_read_begin_shared(s, 0, &r), -EAGAIN);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    cr_assert_eq(mvcc_read_begin_shared(s, 0, &r), 0);
    cr_assert_eq(mvcc_read_rev(r), rev);
    struct seen w = {0};
    cr_assert_eq(mvcc_read_range(r, S("k"), S("l"), NULL, visit, &w, NULL), 0);
    cr_assert_eq(w.n, NKEYS);
    cr_assert_str_eq(w.first, "a");
    mvcc_read_end(r);
}

Test(shared, compacted_revision_refused)
{
    cr_assert_eq(mvcc_share(s), 0);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    int64_t r1 = put_all("a");
    put_all("b");
    cr_assert_eq(mvcc_compact(s, r1 + 1), 0);
    bool done = false;
    while (!done)
        cr_assert_eq(mvcc_compact_step(s, 3, &done), 0);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin_shared(s, 0, &r), 0);
    struct mvcc_range_opts o = {.rev = r1};
    cr_assert_eq(mvcc_read_range(r, S("k"), S("l"), &o, visit, &(struct seen){0}, NULL),
                 QERR_COMPACTED);
    struct seen w = {0};
    cr_assert_eq(mvcc_read_range(r, S("k"), S("l"), NULL, visit, &w, NULL), 0);
    cr_assert_str_eq(w.first, "b");
    mvcc_read_end(r);
}

/* Readers on other threads while the owner writes rounds (every key in one
 * revision), commits most of them, compacts and drops the read txns: each
 * read sees one revision whole, revisions never go back for a reader, and
 * a read at an older revision sees that revision's round. */
static atomic_bool stop;
static atomic_long reads_done, refused;
/* what a reader found wrong (criterion's asserts belong to the test's own
 * thread) */
static char failure[256];
static pthread_mutex_t failure_mu = PTHREAD_MUTEX_INITIALIZER;

#define READER_CHECK(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            pthread_mutex_lock(&failure_mu);                                                       \
            if (failure[0] == '\0')                                                                \
                snprintf(failure, sizeof(failure), __VA_ARGS__);                                   \
            pthread_mutex_unlock(&failure_mu);                                                     \
            atomic_store(&stop, true);                                                             \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

static void *reader(void *arg)
{
    (void)arg;
    int64_t last = 0;
    while (!atomic_load(&stop)) {
        mvcc_read *r;
        int rv = mvcc_read_begin_shared(s, 0, &r);
        if (rv == -EAGAIN) {
            atomic_fetch_add(&refused, 1);
            continue;
        }
        READER_CHECK(rv == 0, "mvcc_read_begin_shared: %d", rv);
        int64_t rev = mvcc_read_rev(r);
        struct seen w = {0};
        struct mvcc_range_result res;
        rv = mvcc_read_range(r, S("k"), S("l"), NULL, visit, &w, &res);
        mvcc_read_end(r); /* before any check: the owner waits for it */
        READER_CHECK(rev >= last, "a later read went back from %lld to %lld", (long long)last,
                     (long long)rev);
        last = rev;
        READER_CHECK(rv == 0, "range at %lld: %d", (long long)rev, rv);
        READER_CHECK(res.rev == rev, "range read at %lld, not %lld", (long long)res.rev,
                     (long long)rev);
        READER_CHECK(!w.mixed, "revision %lld read partly", (long long)rev);
        if (rev > 1) {
            READER_CHECK(w.n == NKEYS, "%d keys at %lld", w.n, (long long)rev);
            /* round N was written at revision N + 1 */
            char want[32];
            snprintf(want, sizeof(want), "v%lld", (long long)(rev - 1));
            READER_CHECK(strcmp(w.first, want) == 0, "revision %lld holds %s, not %s",
                         (long long)rev, w.first, want);
        }
        atomic_fetch_add(&reads_done, 1);
    }
    return NULL;
}

Test(shared, readers_see_whole_revisions_while_the_owner_writes, .timeout = 60)
{
    cr_assert_eq(mvcc_share(s), 0);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, reader, NULL), 0);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    for (int round = 1; round <= 400; round++) {
        char v[32];
        snprintf(v, sizeof(v), "v%d", round);
        cr_assert_eq(put_all(v), round + 1);
        if (round % 3 != 0) { /* some rounds stay uncommitted for a while */
            cr_assert_eq(mvcc_batch_commit(s), 0);
            usleep(200); /* let readers in */
            cr_assert_eq(mvcc_batch_begin(s), 0);
        }
        if (round % 50 == 0) {
            cr_assert_eq(mvcc_compact(s, round - 10), 0);
            bool done = false;
            while (!done)
                cr_assert_eq(mvcc_compact_step(s, 7, &done), 0);
        }
        if (round % 97 == 0) {
            /* as before a file swap: readers out, their txns freed */
            cr_assert_eq(mvcc_batch_commit(s), 0);
            mvcc_exclusive_begin(s);
            mvcc_release_reads(s);
            mvcc_exclusive_end(s);
            cr_assert_eq(mvcc_batch_begin(s), 0);
        }
    }
    cr_assert_eq(mvcc_batch_commit(s), 0);
    usleep(20000);
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(failure[0], '\0', "%s", failure);
    cr_assert_gt(atomic_load(&reads_done), 0, "no shared read ever succeeded (%ld refused)",
                 atomic_load(&refused));
}

/* ---- detached reads (mvcc_read_begin_detached): a big range on a worker,
 * the index read a piece at a time ---- */

#define NBIG 2500 /* more than two pieces */

static int64_t put_big(const char *val)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(s, &t), 0);
    for (int i = 0; i < NBIG; i++) {
        char k[16];
        snprintf(k, sizeof(k), "b%05d", i);
        cr_assert_eq(mvcc_txn_put(t, S(k), S(val), 0, NULL, NULL), 0);
    }
    return mvcc_txn_end(t);
}

/* a digest of what a read visited: keys in order, values */
struct digest {
    int n;
    uint32_t h;
    char first[32];
    bool mixed;
};

static int digest_kv(const struct mvcc_kv *kv, void *arg)
{
    struct digest *d = arg;
    for (size_t i = 0; i < kv->key_len; i++)
        d->h = d->h * 31 + kv->key[i];
    for (size_t i = 0; i < kv->value_len; i++)
        d->h = d->h * 31 + kv->value[i];
    d->h = d->h * 31 + (uint32_t)kv->mod_revision;
    char v[32];
    snprintf(v, sizeof(v), "%.*s", (int)kv->value_len, (const char *)kv->value);
    if (d->n == 0)
        snprintf(d->first, sizeof(d->first), "%s", v);
    else if (strcmp(v, d->first) != 0)
        d->mixed = true;
    d->n++;
    return 0;
}

struct detached_arg {
    int64_t rev;
    int rv;
    struct digest d;
    struct mvcc_range_result res;
};

static void *detached_once(void *arg)
{
    struct detached_arg *a = arg;
    mvcc_read *r;
    a->rv = mvcc_read_begin_detached(s, 0, &r);
    if (a->rv != 0)
        return NULL;
    struct mvcc_range_opts o = {.rev = a->rev};
    a->rv = mvcc_read_range(r, S("b"), S("c"), &o, digest_kv, &a->d, &a->res);
    mvcc_read_end(r);
    return NULL;
}

Test(shared, detached_read_equals_inline_at_every_revision)
{
    cr_assert_eq(mvcc_share(s), 0);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    int64_t revs[3] = {put_big("x"), put_big("y"), put_big("z")};
    cr_assert_eq(mvcc_batch_commit(s), 0);
    for (int i = 0; i < 3; i++) {
        mvcc_read *r;
        cr_assert_eq(mvcc_read_begin(s, &r), 0);
        struct digest want = {0};
        struct mvcc_range_result wres;
        struct mvcc_range_opts o = {.rev = revs[i]};
        cr_assert_eq(mvcc_read_range(r, S("b"), S("c"), &o, digest_kv, &want, &wres), 0);
        mvcc_read_end(r);
        struct detached_arg a = {.rev = revs[i]};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, detached_once, &a), 0);
        pthread_join(th, NULL);
        cr_assert_eq(a.rv, 0);
        cr_assert_eq(a.d.n, NBIG);
        cr_assert_eq(a.d.h, want.h);
        cr_assert_eq(a.res.count, wres.count);
        cr_assert_eq(a.res.rev, wres.rev);
    }
    /* a budget stops an inline read */
    mvcc_read *r;
    cr_assert_eq(mvcc_read_begin(s, &r), 0);
    struct mvcc_range_opts o = {.budget = 100};
    cr_assert_eq(mvcc_read_range(r, S("b"), S("c"), &o, digest_kv, &(struct digest){0}, NULL),
                 -E2BIG);
    o.budget = NBIG + 1;
    cr_assert_eq(mvcc_read_range(r, S("b"), S("c"), &o, digest_kv, &(struct digest){0}, NULL), 0);
    mvcc_read_end(r);
}

/* Readers of the big range on other threads while the owner writes
 * rounds, compacts and drops the read txns (as a file swap does): a read
 * that ends is one revision whole, or -ESTALE (read it again), or, at an
 * explicit revision, QERR_COMPACTED. */
static atomic_long det_ok, det_stale;

static void *detached_reader(void *arg)
{
    (void)arg;
    for (int k = 0; !atomic_load(&stop); k++) {
        mvcc_read *r;
        int rv = mvcc_read_begin_detached(s, 0, &r);
        if (rv == -EAGAIN) {
            atomic_fetch_add(&refused, 1);
            continue;
        }
        READER_CHECK(rv == 0, "mvcc_read_begin_detached: %d", rv);
        int64_t at = mvcc_read_rev(r);
        struct mvcc_range_opts o = {.rev = k % 2 ? at - 1 : 0};
        struct digest d = {0};
        struct mvcc_range_result res;
        rv = mvcc_read_range(r, S("b"), S("c"), &o, digest_kv, &d, &res);
        mvcc_read_end(r);
        if (rv == -ESTALE) {
            atomic_fetch_add(&det_stale, 1);
            continue;
        }
        if (rv == QERR_COMPACTED && o.rev != 0)
            continue;
        READER_CHECK(rv == 0, "detached range at %lld: %d", (long long)res.rev, rv);
        READER_CHECK(!d.mixed, "revision %lld read partly", (long long)res.rev);
        if (res.rev > 1) {
            READER_CHECK(d.n == NBIG && res.count == NBIG, "%d keys at %lld", d.n,
                         (long long)res.rev);
            char want[32];
            snprintf(want, sizeof(want), "v%lld", (long long)(res.rev - 1));
            READER_CHECK(strcmp(d.first, want) == 0, "revision %lld holds %s, not %s",
                         (long long)res.rev, d.first, want);
        }
        atomic_fetch_add(&det_ok, 1);
    }
    return NULL;
}

Test(shared, detached_readers_while_the_owner_writes_compacts_and_swaps)
{
    cr_assert_eq(mvcc_share(s), 0);
    atomic_store(&stop, false); /* the plain build runs the tests in one process */
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, detached_reader, NULL), 0);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    for (int round = 1; round <= 60; round++) {
        char v[32];
        snprintf(v, sizeof(v), "v%d", round);
        cr_assert_eq(put_big(v), round + 1);
        cr_assert_eq(mvcc_batch_commit(s), 0);
        usleep(2000); /* let readers in */
        cr_assert_eq(mvcc_batch_begin(s), 0);
        if (round % 5 == 0) {
            cr_assert_eq(mvcc_compact(s, round), 0);
            bool done = false;
            while (!done) {
                cr_assert_eq(mvcc_compact_step(s, 500, &done), 0);
                cr_assert_eq(mvcc_batch_commit(s), 0);
                cr_assert_eq(mvcc_batch_begin(s), 0);
            }
        }
        if (round % 7 == 0) {
            cr_assert_eq(mvcc_batch_commit(s), 0);
            mvcc_exclusive_begin(s);
            mvcc_release_reads(s);
            mvcc_exclusive_end(s);
            cr_assert_eq(mvcc_batch_begin(s), 0);
        }
    }
    cr_assert_eq(mvcc_batch_commit(s), 0);
    usleep(20000);
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(failure[0], '\0', "%s", failure);
    cr_assert_gt(atomic_load(&det_ok), 0, "no detached read ever ended (%ld stale)",
                 atomic_load(&det_stale));
}

#ifdef SHARED_STANDALONE
int main(void)
{
    void (*tests[])(void) = {refused_until_shared_and_committed, compacted_revision_refused,
                             readers_see_whole_revisions_while_the_owner_writes,
                             detached_read_equals_inline_at_every_revision,
                             detached_readers_while_the_owner_writes_compacts_and_swaps};
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        setup();
        tests[i]();
        teardown();
    }
    printf("test_shared: 5 passed\n");
    return 0;
}
#endif
