/* Tests for big revisions written in steps (mvcc_set_step, mvcc.h "Big
 * revisions in steps"): a write txn that commits every few changes gives
 * the records an uninterrupted one gives, never shows a partial revision,
 * and a restart between steps resumes the same revision to the same end. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"
#include "mvcc/mvcc.h"
#include "mvcc/mvcc_int.h"
#include "tmpdir.h"

#define S(x) (const uint8_t *)(x), strlen(x)
#define FROM_KEY (const uint8_t *)"", 1

struct store {
    char dir[64];
    backend *be;
    mvcc_store *s;
};

static void st_open(struct store *st)
{
    struct backend_options o = {.dir = st->dir, .map_size = 256 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &st->be), 0);
    cr_assert_eq(mvcc_open(st->be, &st->s), 0);
}

static void st_make(struct store *st)
{
    const char *d = tmpdir_make();
    cr_assert_not_null(d);
    snprintf(st->dir, sizeof(st->dir), "%s", d);
    st_open(st);
}

static void st_close(struct store *st)
{
    mvcc_close(st->s);
    backend_close(st->be);
    st->s = NULL;
    st->be = NULL;
}

static void st_free(struct store *st)
{
    if (st->s != NULL)
        st_close(st);
    tmpdir_remove(st->dir);
}

static uint64_t meta(struct store *st, const char *name)
{
    uint64_t v = 0;
    return backend_meta_get(st->be, NULL, name, &v) == 0 ? v : (uint64_t)-1;
}

static uint32_t hash(struct store *st)
{
    uint32_t h;
    int64_t c;
    cr_assert_eq(mvcc_hash_kv(st->s, 0, &h, &c), 0);
    return h;
}

static int64_t count_live(struct store *st, int64_t rev)
{
    mvcc_read *r;
    struct mvcc_range_opts o = {.rev = rev, .count_only = true};
    struct mvcc_range_result res;
    cr_assert_eq(mvcc_read_begin(st->s, &r), 0);
    cr_assert_eq(mvcc_read_range(r, FROM_KEY, FROM_KEY, &o, NULL, NULL, &res), 0);
    mvcc_read_end(r);
    return res.count;
}

/* seed: |n| keys p/00000.. and a few others, with two keys on lease 5, one
 * revision each */
static void seed(struct store *st, int n)
{
    char k[32], v[32];
    cr_assert_eq(mvcc_batch_begin(st->s), 0);
    for (int i = 0; i < n; i++) {
        mvcc_txn *t;
        snprintf(k, sizeof(k), "p/%05d", i);
        snprintf(v, sizeof(v), "v%d", i);
        cr_assert_eq(mvcc_txn_begin(st->s, &t), 0);
        cr_assert_eq(mvcc_txn_put(t, S(k), S(v), i % 50 == 0 ? 5 : 0, NULL, NULL), 0);
        mvcc_txn_end(t);
    }
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(st->s, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, S("a"), S("x"), 0, NULL, NULL), 0);
    cr_assert_eq(mvcc_txn_put(t, S("q"), S("x"), 0, NULL, NULL), 0);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(st->s), 0);
}

/* The big revision: a put, a delete of the prefix, a few more puts (one
 * with a lease), all in one txn. |stop_after| > 0: the step hook refuses
 * the step after that many, as a kill between steps would stop it. */
struct hook {
    struct store *st;
    int steps;
    int stop_after;
    int64_t seen_during; /* a shared reader's result while a step commits */
    int64_t visible_rev; /* what a fresh read txn saw at a step */
};

static void *shared_reader(void *arg)
{
    struct hook *h = arg;
    mvcc_read *r;
    int rv = mvcc_read_begin_shared(h->st->s, 0, &r);
    h->seen_during = rv;
    if (rv == 0)
        mvcc_read_end(r);
    return NULL;
}

static int on_step(void *arg)
{
    struct hook *h = arg;
    if (h->stop_after > 0 && h->steps >= h->stop_after)
        return -EINTR;
    h->steps++;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, shared_reader, h), 0);
    pthread_join(th, NULL);
    return 0;
}

static int big_txn(struct store *st, int64_t *deleted)
{
    mvcc_txn *t;
    int rv;
    cr_assert_eq(mvcc_txn_begin(st->s, &t), 0);
    rv = mvcc_txn_put(t, S("b"), S("1"), 0, NULL, NULL);
    if (rv == 0)
        rv = mvcc_txn_delete_range(t, S("p/"), S("p0"), NULL, NULL, deleted);
    char k[32];
    for (int i = 0; i < 10 && rv == 0; i++) {
        snprintf(k, sizeof(k), "z%02d", i);
        rv = mvcc_txn_put(t, S(k), S("2"), i == 3 ? 6 : 0, NULL, NULL);
    }
    mvcc_txn_end(t);
    return rv;
}

/* A twin store applies the same history without steps. */
static void twin_result(int n, uint32_t *before, uint32_t *after, int64_t *rev_after)
{
    struct store tw;
    st_make(&tw);
    seed(&tw, n);
    *before = hash(&tw);
    int64_t d = 0;
    cr_assert_eq(mvcc_batch_begin(tw.s), 0);
    cr_assert_eq(big_txn(&tw, &d), 0);
    cr_assert_eq(d, n);
    cr_assert_eq(mvcc_batch_commit(tw.s), 0);
    *after = hash(&tw);
    *rev_after = mvcc_rev(tw.s);
    st_free(&tw);
}

TestSuite(steps);

/* Uninterrupted in steps: the records (HashKV) of one LMDB transaction,
 * the revision invisible to other threads while the steps commit, and no
 * mark left behind. */
Test(steps, stepped_revision_equals_one_transaction)
{
    const int n = 500;
    uint32_t h_before, h_after;
    int64_t rev_after;
    twin_result(n, &h_before, &h_after, &rev_after);

    struct store st;
    st_make(&st);
    seed(&st, n);
    cr_assert_eq(hash(&st), h_before);
    cr_assert_eq(mvcc_share(st.s), 0);
    struct hook h = {.st = &st};
    mvcc_set_step(st.s, 7, on_step, &h);
    int64_t rev0 = mvcc_rev(st.s), d = 0;
    cr_assert_eq(mvcc_batch_begin(st.s), 0);
    cr_assert_eq(big_txn(&st, &d), 0);
    cr_assert_eq(d, n);
    /* 511 changes, a step before every 7th past the first 7 */
    cr_assert_eq(h.steps, (1 + n + 10 - 1) / 7, "steps: %d", h.steps);
    cr_assert_eq(h.seen_during, -EAGAIN, "a shared read waits for the revision");
    cr_assert_eq(mvcc_batch_commit(st.s), 0);
    cr_assert_eq(mvcc_rev(st.s), rev0 + 1);
    cr_assert_eq(mvcc_rev(st.s), rev_after);
    cr_assert_eq(hash(&st), h_after);
    cr_assert_eq(meta(&st, "quorumStepRev"), (uint64_t)-1, "the mark went with the last step");
    cr_assert_eq(mvcc_partial_rev(st.s), 0);
    st_close(&st);
    st_open(&st);
    cr_assert_eq(mvcc_partial_rev(st.s), 0);
    cr_assert_eq(mvcc_rev(st.s), rev_after);
    cr_assert_eq(hash(&st), h_after);
    st_free(&st);
}

/* Paused between steps (mvcc_set_step_pause): after each step's commit
 * the index is unlocked and the store reads as committed at the revision
 * before, from the owner and from other threads; nothing of the revision
 * shows; the batch cannot be committed under the txn; the txn then goes on
 * to the records of one transaction. */
struct pause {
    struct store *st;
    int64_t rev0;
    int n, pauses, bad;
    uint32_t h_before;
    int shared_rv;
    int64_t shared_rev, shared_count;
};

static void *pause_reader(void *arg)
{
    struct pause *p = arg;
    mvcc_read *r;
    p->shared_rv = mvcc_read_begin_shared(p->st->s, 0, &r);
    if (p->shared_rv != 0)
        return NULL;
    struct mvcc_range_opts o = {.count_only = true};
    struct mvcc_range_result res;
    if (mvcc_read_range(r, S("p/"), S("p0"), &o, NULL, NULL, &res) == 0) {
        p->shared_rev = res.rev;
        p->shared_count = res.count;
    }
    mvcc_read_end(r);
    return NULL;
}

static int on_pause(void *arg)
{
    struct pause *p = arg;
    p->pauses++;
    pthread_t th;
    p->shared_rv = -1;
    cr_assert_eq(pthread_create(&th, NULL, pause_reader, p), 0);
    pthread_join(th, NULL);
    if (p->shared_rv != 0 || p->shared_rev != p->rev0 || p->shared_count != p->n)
        p->bad++;
    mvcc_read *r;
    struct mvcc_range_opts o = {.count_only = true};
    struct mvcc_range_result res;
    cr_assert_eq(mvcc_read_begin(p->st->s, &r), 0);
    cr_assert_eq(mvcc_read_range(r, S("p/"), S("p0"), &o, NULL, NULL, &res), 0);
    mvcc_read_end(r);
    if (res.rev != p->rev0 || res.count != p->n || mvcc_rev(p->st->s) != p->rev0)
        p->bad++;
    if (hash(p->st) != p->h_before)
        p->bad++;
    if (mvcc_batch_commit(p->st->s) != -EBUSY)
        p->bad++;
    return 0;
}

Test(steps, paused_between_steps_reads_the_revision_before)
{
    const int n = 300;
    uint32_t h_before, h_after;
    int64_t rev_after;
    twin_result(n, &h_before, &h_after, &rev_after);

    struct store st;
    st_make(&st);
    seed(&st, n);
    cr_assert_eq(mvcc_share(st.s), 0);
    struct hook h = {.st = &st};
    struct pause p = {.st = &st, .rev0 = mvcc_rev(st.s), .n = n, .h_before = h_before};
    mvcc_set_step(st.s, 7, on_step, &h);
    mvcc_set_step_pause(st.s, 0, on_pause, &p);
    int64_t d = 0;
    cr_assert_eq(mvcc_batch_begin(st.s), 0);
    cr_assert_eq(big_txn(&st, &d), 0);
    cr_assert_eq(d, n);
    cr_assert_eq(p.pauses, h.steps);
    cr_assert_gt(p.pauses, 10);
    cr_assert_eq(p.bad, 0, "%d pauses read something else than revision %lld", p.bad,
                 (long long)p.rev0);
    cr_assert_eq(mvcc_batch_commit(st.s), 0);
    cr_assert_eq(mvcc_rev(st.s), rev_after);
    cr_assert_eq(hash(&st), h_after);
    cr_assert_eq(meta(&st, "quorumStepRev"), (uint64_t)-1);
    st_free(&st);
}

/* Pauses between commits too (|every| below the step limit): the first
 * step commits after |every| changes, then the txn pauses every |every|
 * changes and commits every step limit; the reads of every pause are of
 * the revision before, and the end is the records of one transaction. */
Test(steps, paused_every_few_changes_between_commits)
{
    const int n = 300;
    uint32_t h_before, h_after;
    int64_t rev_after;
    twin_result(n, &h_before, &h_after, &rev_after);

    struct store st;
    st_make(&st);
    seed(&st, n);
    cr_assert_eq(mvcc_share(st.s), 0);
    struct hook h = {.st = &st};
    struct pause p = {.st = &st, .rev0 = mvcc_rev(st.s), .n = n, .h_before = h_before};
    mvcc_set_step(st.s, 100, on_step, &h);
    mvcc_set_step_pause(st.s, 9, on_pause, &p);
    int64_t d = 0;
    cr_assert_eq(mvcc_batch_begin(st.s), 0);
    cr_assert_eq(big_txn(&st, &d), 0);
    cr_assert_eq(d, n);
    /* 311 changes: a commit at 9, then at 109, 209, 309; a pause before
     * every 9th change in between and after each commit */
    cr_assert_eq(h.steps, 4, "steps: %d", h.steps);
    cr_assert_gt(p.pauses, 30, "pauses: %d", p.pauses);
    cr_assert_eq(p.bad, 0, "%d pauses read something else than revision %lld", p.bad,
                 (long long)p.rev0);
    cr_assert_eq(mvcc_batch_commit(st.s), 0);
    cr_assert_eq(mvcc_rev(st.s), rev_after);
    cr_assert_eq(hash(&st), h_after);
    st_close(&st);
    st_open(&st);
    cr_assert_eq(hash(&st), h_after);
    st_free(&st);
}

/* Stopped between steps (the batch after the last committed step lost, as
 * a kill loses it): the restart opens at the revision before, shows
 * nothing of the partial one (reads, HashKV), reports it partial; the same
 * txn applied again resumes it and ends with the uninterrupted records. */
Test(steps, restart_between_steps_resumes_the_revision)
{
    const int n = 500;
    uint32_t h_before, h_after;
    int64_t rev_after;
    twin_result(n, &h_before, &h_after, &rev_after);

    for (int stop = 1; stop <= 70; stop += 23) {
        struct store st;
        st_make(&st);
        seed(&st, n);
        int64_t rev0 = mvcc_rev(st.s), d = 0;
        struct hook h = {.st = &st, .stop_after = stop};
        mvcc_set_step(st.s, 7, on_step, &h);
        cr_assert_eq(mvcc_batch_begin(st.s), 0);
        cr_assert_eq(big_txn(&st, &d), -EINTR);
        st_close(&st); /* the open batch is lost with the process */
        st_open(&st);
        cr_assert_eq(meta(&st, "quorumStepRev"), (uint64_t)(rev0 + 1));
        cr_assert_eq(mvcc_partial_rev(st.s), rev0 + 1);
        cr_assert_eq(mvcc_partial_changes(st.s), (uint32_t)(7 * stop), "stop %d", stop);
        cr_assert_eq(mvcc_rev(st.s), rev0, "the store is at the revision before");
        cr_assert_eq(hash(&st), h_before, "nothing of the partial revision is hashed");
        cr_assert_eq(count_live(&st, 0), n + 2, "nothing of it is read");
        struct mvcc_range_opts o = {.rev = rev0 + 1};
        mvcc_read *r;
        cr_assert_eq(mvcc_read_begin(st.s, &r), 0);
        cr_assert_eq(mvcc_read_range(r, FROM_KEY, FROM_KEY, &o, NULL, NULL, NULL), QERR_FUTURE_REV);
        mvcc_read_end(r);

        /* resumed in steps again, not stopped */
        h = (struct hook){.st = &st};
        mvcc_set_step(st.s, 7, on_step, &h);
        cr_assert_eq(mvcc_batch_begin(st.s), 0);
        cr_assert_eq(big_txn(&st, &d), 0);
        cr_assert_eq(d, n - (7 * stop - 1), "only the keys still live are deleted");
        cr_assert_eq(mvcc_batch_commit(st.s), 0);
        cr_assert_eq(mvcc_rev(st.s), rev_after);
        cr_assert_eq(hash(&st), h_after, "stop %d", stop);
        cr_assert_eq(meta(&st, "quorumStepRev"), (uint64_t)-1);
        cr_assert_eq(count_live(&st, 0), 2 + 1 + 10);
        st_close(&st);
        st_open(&st);
        cr_assert_eq(hash(&st), h_after);
        cr_assert_eq(mvcc_partial_rev(st.s), 0);
        st_free(&st);
    }
}

struct lease_seen {
    int n;
    int lease6;
};

static void seen_lease(const uint8_t *key, size_t len, int64_t lease, void *arg)
{
    (void)key;
    (void)len;
    struct lease_seen *ls = arg;
    ls->n++;
    if (lease == 6)
        ls->lease6++;
}

/* The lessor learns a partial revision's bindings: a put with a lease made
 * before the stop is not made again, so the restart must know it. */
Test(steps, live_leases_include_the_partial_revision)
{
    struct store st;
    st_make(&st);
    seed(&st, 100);
    /* 111 changes, z03's put the 105th: 21 steps of 5 commit it */
    struct hook h = {.st = &st, .stop_after = 21};
    mvcc_set_step(st.s, 5, on_step, &h);
    int64_t d;
    cr_assert_eq(mvcc_batch_begin(st.s), 0);
    cr_assert_eq(big_txn(&st, &d), -EINTR);
    st_close(&st);
    st_open(&st);
    cr_assert_neq(mvcc_partial_rev(st.s), 0);
    struct lease_seen ls = {0};
    cr_assert_eq(mvcc_live_leases(st.s, seen_lease, &ls), 0);
    cr_assert_eq(ls.lease6, 1, "z03's binding, made in the partial revision");
    cr_assert_eq(ls.n, 1, "the p/ keys on lease 5 are deleted in it");
    st_free(&st);
}

/* A limit that a txn does not reach takes no step and leaves no mark. */
Test(steps, small_txn_is_one_step)
{
    struct store st;
    st_make(&st);
    struct hook h = {.st = &st};
    mvcc_set_step(st.s, 1000, on_step, &h);
    seed(&st, 999);
    int64_t d;
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(st.s), 0);
    cr_assert_eq(mvcc_txn_begin(st.s, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, S("p/"), S("p0"), NULL, NULL, &d), 0);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(st.s), 0);
    cr_assert_eq(d, 999);
    cr_assert_eq(h.steps, 0);
    cr_assert_eq(meta(&st, "quorumStepRev"), (uint64_t)-1);
    st_free(&st);
}

/* A database file indexed aside (mvcc_prepare_file, as a follower does with
 * a received snapshot while it keeps serving) and swapped in gives the
 * store the state mvcc_reload gives: revision, reads, HashKV, compaction
 * and a partial revision's marks. */
Test(steps, prepared_index_equals_reload)
{
    struct store a, b;
    st_make(&a);
    st_make(&b);
    seed(&a, 300);
    /* a compaction under way and a partial revision travel with the file */
    cr_assert_eq(mvcc_batch_begin(a.s), 0);
    cr_assert_eq(mvcc_compact(a.s, 200), 0);
    bool done;
    cr_assert_eq(mvcc_compact_step(a.s, 10, &done), 0);
    cr_assert_eq(mvcc_batch_commit(a.s), 0);
    /* a lease record, so the worker gathers the bindings too */
    cr_assert_eq(mvcc_batch_begin(a.s), 0);
    MDB_val lk = {8, "lease005"}, lv = {3, "rec"};
    cr_assert_eq(backend_put(a.be, backend_batch_txn(a.be), BACKEND_DB_LEASE, &lk, &lv, 0), 0);
    cr_assert_eq(mvcc_batch_commit(a.s), 0);
    struct hook h = {.st = &a, .stop_after = 3};
    mvcc_set_step(a.s, 7, on_step, &h);
    int64_t d;
    cr_assert_eq(mvcc_batch_begin(a.s), 0);
    cr_assert_eq(big_txn(&a, &d), -EINTR);
    st_close(&a);
    st_open(&a);
    struct lease_seen want_ls = {0};
    cr_assert_eq(mvcc_live_leases(a.s, seen_lease, &want_ls), 0);
    cr_assert_eq(want_ls.n, 5, "p/00050 .. p/00250: p/00000 went in the partial revision");
    uint32_t want = hash(&a);
    int64_t want_rev = mvcc_rev(a.s), want_partial = mvcc_partial_rev(a.s);
    cr_assert_neq(want_partial, 0);
    cr_assert(mvcc_compacting(a.s));
    st_close(&a);

    seed(&b, 10);
    char copy[128], src[128];
    snprintf(src, sizeof(src), "%s/data.mdb", a.dir);
    snprintf(copy, sizeof(copy), "%s/recv.mdb", b.dir);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "cp %s %s", src, copy);
    cr_assert_eq(system(cmd), 0);
    mvcc_prepared *p;
    mvcc_set_rebuild_threads(3); /* the worker's rebuild is threaded too */
    cr_assert_eq(mvcc_prepare_file(copy, &p), 0);
    mvcc_set_rebuild_threads(0);
    /* b serves its own data meanwhile */
    cr_assert_eq(count_live(&b, 0), 12);
    mvcc_release_reads(b.s);
    cr_assert_eq(backend_replace_file(b.be, copy), 0);
    cr_assert_eq(mvcc_reload_prepared(b.s, p), 0);
    cr_assert_eq(mvcc_rev(b.s), want_rev);
    cr_assert_eq(mvcc_partial_rev(b.s), want_partial);
    cr_assert(mvcc_compacting(b.s));
    cr_assert_eq(mvcc_compact_rev(b.s), 200);
    cr_assert_eq(hash(&b), want);
    cr_assert_eq(count_live(&b, 0), 302);
    struct lease_seen ls = {0};
    cr_assert_eq(mvcc_live_leases(b.s, seen_lease, &ls), 0);
    cr_assert_eq(ls.n, want_ls.n, "the bindings gathered aside");
    memset(&ls, 0, sizeof(ls));
    cr_assert_eq(mvcc_live_leases(b.s, seen_lease, &ls), 0);
    cr_assert_eq(ls.n, want_ls.n, "and again from the file");
    /* and it goes on as the original would: the compaction, the revision */
    cr_assert_eq(mvcc_batch_begin(b.s), 0);
    while (mvcc_compacting(b.s))
        cr_assert_eq(mvcc_compact_step(b.s, 50, &done), 0);
    cr_assert_eq(big_txn(&b, &d), 0);
    cr_assert_eq(mvcc_batch_commit(b.s), 0);
    cr_assert_eq(count_live(&b, 0), 13);

    /* a file that is not a database is refused, not crashed on */
    snprintf(copy, sizeof(copy), "%s/junk.mdb", b.dir);
    FILE *f = fopen(copy, "w");
    cr_assert_not_null(f);
    fputs("not an LMDB file, only some bytes of text", f);
    fclose(f);
    cr_assert_neq(mvcc_prepare_file(copy, &p), 0);
    /* one indexed and then dropped (a snapshot the leader sent again):
     * its index is freed aside, and the store is untouched */
    snprintf(copy, sizeof(copy), "%s/data.mdb", a.dir);
    cr_assert_eq(mvcc_prepare_file(copy, &p), 0);
    mvcc_prepared_free(p);
    cr_assert_eq(count_live(&b, 0), 13);
    cr_assert_eq(mvcc_reload(b.s), 0);
    cr_assert_eq(count_live(&b, 0), 13);
    st_free(&a);
    st_free(&b);
}

/* Random txns (puts, deletes of random ranges, puts with leases, keys
 * written again after a delete in the same txn are left out as apply/'s
 * checks leave them out), random step limits and random stops: the store
 * stopped and resumed ends where a twin that wrote each txn in one
 * transaction ends (HashKV, revision, lease bindings). */
struct rop {
    int kind; /* 0 put, 1 delete range */
    char key[16], end[16];
    int64_t lease;
};

static int run_ops(struct store *st, const struct rop *ops, int n)
{
    mvcc_txn *t;
    int rv = 0;
    cr_assert_eq(mvcc_txn_begin(st->s, &t), 0);
    for (int i = 0; i < n && rv == 0; i++) {
        int64_t d;
        if (ops[i].kind == 0)
            rv = mvcc_txn_put(t, S(ops[i].key), S("v"), ops[i].lease, NULL, NULL);
        else
            rv = mvcc_txn_delete_range(t, S(ops[i].key), S(ops[i].end), NULL, NULL, &d);
    }
    mvcc_txn_end(t);
    return rv;
}

static void bindings(struct store *st, struct lease_seen *ls)
{
    memset(ls, 0, sizeof(*ls));
    cr_assert_eq(mvcc_live_leases(st->s, seen_lease, ls), 0);
}

Test(steps, random_txns_stopped_and_resumed_equal_one_transaction)
{
    srand(1919);
    int stopped = 0, twice = 0;
    for (int iter = 0; iter < 40; iter++) {
        struct store a, b;
        st_make(&a);
        st_make(&b);
        seed(&a, 200);
        seed(&b, 200);
        struct rop ops[40];
        int n = 1 + rand() % 40;
        /* keys put in this txn: p/<3 digits>x (outside every p/NNNNN
         * range's own keys only by the suffix), deletes over p/NN.. */
        for (int i = 0; i < n; i++) {
            if (rand() % 3 == 0) {
                int lo = rand() % 20;
                ops[i].kind = 1;
                snprintf(ops[i].key, sizeof(ops[i].key), "p/%03d", lo * 10);
                snprintf(ops[i].end, sizeof(ops[i].end), "p/%03d", lo * 10 + 1 + rand() % 30);
            } else {
                ops[i].kind = 0;
                snprintf(ops[i].key, sizeof(ops[i].key), "n/%02d", i);
                ops[i].lease = rand() % 4 == 0 ? 6 : 0;
            }
        }
        size_t limit = 1 + (size_t)(rand() % 8);
        cr_assert_eq(mvcc_batch_begin(b.s), 0);
        cr_assert_eq(run_ops(&b, ops, n), 0);
        cr_assert_eq(mvcc_batch_commit(b.s), 0);

        struct hook h = {.st = &a, .stop_after = 1 + rand() % 5};
        mvcc_set_step(a.s, limit, on_step, &h);
        cr_assert_eq(mvcc_batch_begin(a.s), 0);
        int rv = run_ops(&a, ops, n);
        if (rv == 0) {
            cr_assert_eq(mvcc_batch_commit(a.s), 0); /* fewer steps than the stop */
        } else {
            cr_assert_eq(rv, -EINTR);
            stopped++;
            st_close(&a);
            st_open(&a);
            cr_assert_eq(mvcc_partial_changes(a.s), (uint32_t)(limit * (size_t)h.stop_after));
            h = (struct hook){.st = &a, .stop_after = 1 + rand() % 3}; /* stopped again? */
            mvcc_set_step(a.s, limit, on_step, &h);
            cr_assert_eq(mvcc_batch_begin(a.s), 0);
            rv = run_ops(&a, ops, n);
            if (rv == -EINTR) {
                twice++;
                st_close(&a);
                st_open(&a);
                cr_assert_eq(mvcc_batch_begin(a.s), 0);
                rv = run_ops(&a, ops, n); /* no hook now: one transaction */
            }
            cr_assert_eq(rv, 0);
            cr_assert_eq(mvcc_batch_commit(a.s), 0);
        }
        cr_assert_eq(mvcc_rev(a.s), mvcc_rev(b.s), "iter %d", iter);
        cr_assert_eq(hash(&a), hash(&b), "iter %d (%d ops, limit %zu)", iter, n, limit);
        cr_assert_eq(mvcc_partial_rev(a.s), 0);
        struct lease_seen la, lb;
        st_close(&a);
        st_open(&a);
        bindings(&a, &la);
        bindings(&b, &lb);
        cr_assert_eq(la.n, lb.n, "iter %d", iter);
        cr_assert_eq(la.lease6, lb.lease6, "iter %d", iter);
        cr_assert_eq(hash(&a), hash(&b));
        st_free(&a);
        st_free(&b);
    }
    cr_assert_geq(stopped, 15, "stopped in %d txns", stopped);
    cr_assert_geq(twice, 3, "stopped twice in %d", twice);
}
