/* Tests for backend/backend.c: the LMDB environment, batches, meta values
 * and sizes, on a real data.mdb in a temp directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/err.h"
#include "tmpdir.h"

static const char *dir;
static backend *be;

static void setup(void)
{
    dir = tmpdir_make();
    cr_assert_not_null(dir);
    struct backend_options o = {.dir = dir, .map_size = 64 << 20};
    cr_assert_eq(backend_open(&o, &be), 0);
}

static void teardown(void)
{
    backend_close(be);
    tmpdir_remove(dir);
}

TestSuite(backend, .init = setup, .fini = teardown);

Test(backend, creates_data_file_and_databases)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    cr_assert_eq(stat(p, &st), 0);
    cr_assert(S_ISREG(st.st_mode));
    cr_assert_not_null(backend_env(be));
    for (int i = 0; i < BACKEND_DB__COUNT; i++)
        for (int j = i + 1; j < BACKEND_DB__COUNT; j++)
            cr_assert_neq(backend_dbi(be, i), backend_dbi(be, j));
    cr_assert_gt(backend_size(be), 0);
    cr_assert_gt(backend_size_in_use(be), 0);
    cr_assert_leq(backend_size_in_use(be), backend_size(be));
}

Test(backend, nested_dir_is_created)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/member/db", dir);
    backend *b2;
    struct backend_options o = {.dir = p, .map_size = 1 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &b2), 0);
    backend_close(b2);
    snprintf(p, sizeof(p), "%s/member/db/data.mdb", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/member/db/data.mdb-lock", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/member/db", dir);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/member", dir);
    rmdir(p);
}

Test(backend, batch_one_at_a_time_and_meta)
{
    uint64_t v = 0;
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), -ENOENT);
    cr_assert_eq(backend_meta_put(be, "consistent_index", 5), -EBUSY); /* no batch */
    cr_assert_null(backend_batch_txn(be));
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_batch_begin(be), -EBUSY);
    cr_assert_not_null(backend_batch_txn(be));
    cr_assert_eq(backend_meta_put(be, "consistent_index", 0x0102030405060708ULL), 0);
    /* NULL txn reads through the open batch */
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), 0);
    cr_assert_eq(v, 0x0102030405060708ULL);
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_null(backend_batch_txn(be));

    MDB_txn *rt;
    cr_assert_eq(backend_read_begin(be, &rt), 0);
    v = 0;
    cr_assert_eq(backend_meta_get(be, rt, "consistent_index", &v), 0);
    cr_assert_eq(v, 0x0102030405060708ULL);
    /* stored big-endian */
    MDB_val k = {16, "consistent_index"}, d;
    cr_assert_eq(mdb_get(rt, backend_dbi(be, BACKEND_DB_META), &k, &d), 0);
    cr_assert_eq(d.mv_size, 8);
    cr_assert_eq(((uint8_t *)d.mv_data)[0], 1);
    cr_assert_eq(((uint8_t *)d.mv_data)[7], 8);
    backend_read_end(rt);

    /* an aborted batch leaves nothing */
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_meta_put(be, "term", 9), 0);
    backend_batch_abort(be);
    cr_assert_eq(backend_meta_get(be, NULL, "term", &v), -ENOENT);
}

Test(backend, map_full_is_no_space)
{
    backend_close(be);
    tmpdir_remove(dir);
    dir = tmpdir_make();
    struct backend_options o = {.dir = dir, .map_size = 1 << 20};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(backend_batch_begin(be), 0);
    static uint8_t val[4000];
    int rv = 0;
    for (int i = 0; i < 1000 && rv == 0; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%05d", i);
        MDB_val k = {strlen(key), key}, d = {sizeof(val), val};
        rv = backend_err(
            mdb_put(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_LEASE), &k, &d, 0));
    }
    cr_assert_eq(rv, QERR_NO_SPACE);
    backend_batch_abort(be);
}

Test(backend, size_in_use_grows_with_data_and_survives_reopen)
{
    uint64_t before = backend_size_in_use(be);
    cr_assert_eq(backend_batch_begin(be), 0);
    static uint8_t val[1000];
    for (int i = 0; i < 2000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%05d", i);
        MDB_val k = {strlen(key), key}, d = {sizeof(val), val};
        cr_assert_eq(mdb_put(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_LEASE), &k, &d, 0),
                     0);
    }
    cr_assert_eq(backend_batch_commit(be), 0);
    uint64_t after = backend_size_in_use(be);
    cr_assert_gt(after, before + 1000 * 1000);
    cr_assert_leq(after, backend_size(be));

    /* delete it all: pages go to the freelist, in-use shrinks */
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(mdb_drop(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_LEASE), 0), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    /* LMDB frees pages one txn late: commit an empty one */
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_meta_put(be, "x", 1), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_lt(backend_size_in_use(be), after / 2);

    backend_close(be);
    struct backend_options o = {.dir = dir, .map_size = 64 << 20};
    cr_assert_eq(backend_open(&o, &be), 0);
    uint64_t v;
    cr_assert_eq(backend_meta_get(be, NULL, "x", &v), 0);
    cr_assert_eq(v, 1);
}

/* backend_changes moves with each commit and file swap, and only then may
 * the file's size change: the core reads the size again only when it
 * moved (node.c apply_run). An aborted batch or an open one changes
 * neither. */
Test(backend, changes_count_commits_and_swaps)
{
    uint64_t c0 = backend_changes(be), size0 = backend_size(be);
    cr_assert_geq(c0, 1);
    cr_assert_eq(backend_batch_begin(be), 0);
    static uint8_t val[1000];
    for (int i = 0; i < 4000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%05d", i);
        MDB_val k = {strlen(key), key}, d = {sizeof(val), val};
        cr_assert_eq(mdb_put(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_LEASE), &k, &d, 0),
                     0);
    }
    cr_assert_eq(backend_changes(be), c0, "an open batch is no change yet");
    cr_assert_eq(backend_size(be), size0, "nor does the file grow before its commit");
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_eq(backend_changes(be), c0 + 1);
    cr_assert_gt(backend_size(be), size0 + 4000 * 1000);

    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_meta_put(be, "x", 1), 0);
    backend_batch_abort(be);
    cr_assert_eq(backend_changes(be), c0 + 1);

    /* drop it all and swap in a packed copy: the file shrinks, a change */
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(mdb_drop(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_LEASE), 0), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_eq(backend_changes(be), c0 + 2);
    uint64_t big = backend_size(be);
    char other[300];
    snprintf(other, sizeof(other), "%s/packed.mdb", dir);
    cr_assert_eq(backend_rewrite_copy(be, other), 0);
    cr_assert_eq(backend_replace_file(be, other), 0);
    cr_assert_eq(backend_changes(be), c0 + 3);
    cr_assert_lt(backend_size(be), big / 2);
}

/* backend_rewrite_copy packs what deletions left half empty (a plain
 * compacting copy keeps such pages), and keeps every record. */
Test(backend, rewrite_copy_packs_and_keeps_records)
{
    static uint8_t val[200];
    cr_assert_eq(backend_batch_begin(be), 0);
    for (int i = 0; i < 20000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%06d", i);
        memset(val, i & 0xff, sizeof(val));
        MDB_val k = {strlen(key), key}, d = {sizeof(val), val};
        cr_assert_eq(mdb_put(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_KEY), &k, &d, 0),
                     0);
    }
    cr_assert_eq(backend_meta_put(be, "consistent_index", 77), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    /* every other record goes: every leaf stays about half full */
    cr_assert_eq(backend_batch_begin(be), 0);
    for (int i = 0; i < 20000; i += 2) {
        char key[16];
        snprintf(key, sizeof(key), "k%06d", i);
        MDB_val k = {strlen(key), key};
        cr_assert_eq(mdb_del(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_KEY), &k, NULL), 0);
    }
    cr_assert_eq(backend_batch_commit(be), 0);
    uint64_t used = backend_size_in_use(be);

    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s/rewrite.mdb", dir);
    cr_assert_eq(backend_rewrite_copy(be, tmp), 0);
    cr_assert_eq(backend_replace_file(be, tmp), 0);
    uint64_t packed = backend_size(be);
    cr_assert_lt(packed, used * 7 / 10, "packed %llu, was %llu in use",
                 (unsigned long long)packed, (unsigned long long)used);
    MDB_txn *rt;
    cr_assert_eq(backend_read_begin(be, &rt), 0);
    MDB_stat st;
    cr_assert_eq(mdb_stat(rt, backend_dbi(be, BACKEND_DB_KEY), &st), 0);
    cr_assert_eq(st.ms_entries, 10000);
    for (int i = 1; i < 20000; i += 2) {
        char key[16];
        snprintf(key, sizeof(key), "k%06d", i);
        MDB_val k = {strlen(key), key}, d;
        cr_assert_eq(mdb_get(rt, backend_dbi(be, BACKEND_DB_KEY), &k, &d), 0);
        cr_assert_eq(d.mv_size, sizeof(val));
        cr_assert_eq(((uint8_t *)d.mv_data)[0], (uint8_t)(i & 0xff));
    }
    backend_read_end(rt);
    uint64_t v = 0;
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), 0);
    cr_assert_eq(v, 77);
}

/* ---- online defragmentation ---- */

#define DF_KEYS 6000
static int df_model[DF_KEYS]; /* value byte + 1, or 0 when absent */

static void df_put(int i, int v)
{
    char key[16];
    static uint8_t val[100];
    snprintf(key, sizeof(key), "k%06d", i);
    memset(val, v, sizeof(val));
    MDB_val k = {strlen(key), key}, d = {sizeof(val), val};
    cr_assert_eq(backend_put(be, backend_batch_txn(be), BACKEND_DB_KEY, &k, &d, 0), 0);
}

static void df_del(int i)
{
    char key[16];
    snprintf(key, sizeof(key), "k%06d", i);
    MDB_val k = {strlen(key), key};
    int rc = backend_del(be, backend_batch_txn(be), BACKEND_DB_KEY, &k);
    cr_assert(rc == 0 || rc == MDB_NOTFOUND);
}

/* df_writes puts and deletes a spread of keys in one committed batch (or
 * an aborted one, which the model does not see), deleting a few through a
 * cursor as compaction does. */
static void df_writes(int round, bool commit)
{
    cr_assert_eq(backend_batch_begin(be), 0);
    for (int i = round; i < DF_KEYS; i += 7) {
        if ((i + round) % 3 == 0) {
            df_del(i);
            if (commit)
                df_model[i] = 0;
        } else {
            df_put(i, round + 1);
            if (commit)
                df_model[i] = round + 2;
        }
    }
    MDB_cursor *mc;
    cr_assert_eq(mdb_cursor_open(backend_batch_txn(be), backend_dbi(be, BACKEND_DB_KEY), &mc), 0);
    char key[16];
    snprintf(key, sizeof(key), "k%06d", DF_KEYS - 1 - round);
    MDB_val k = {strlen(key), key}, d;
    if (mdb_cursor_get(mc, &k, &d, MDB_SET) == 0) {
        cr_assert_eq(backend_cursor_del(be, mc, BACKEND_DB_KEY), 0);
        if (commit)
            df_model[DF_KEYS - 1 - round] = 0;
    }
    mdb_cursor_close(mc);
    cr_assert_eq(backend_meta_put(be, "consistent_index", commit ? 1000 + round : 1), 0);
    if (commit)
        cr_assert_eq(backend_batch_commit(be), 0);
    else
        backend_batch_abort(be);
}

static void df_check(uint64_t ci)
{
    MDB_txn *rt;
    cr_assert_eq(backend_read_begin(be, &rt), 0);
    size_t live = 0;
    for (int i = 0; i < DF_KEYS; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%06d", i);
        MDB_val k = {strlen(key), key}, d;
        int rc = mdb_get(rt, backend_dbi(be, BACKEND_DB_KEY), &k, &d);
        if (df_model[i] == 0) {
            cr_assert_eq(rc, MDB_NOTFOUND, "key %d should be gone", i);
        } else {
            live++;
            cr_assert_eq(rc, 0, "key %d missing", i);
            cr_assert_eq(((uint8_t *)d.mv_data)[0], (uint8_t)(df_model[i] - 1), "key %d value", i);
        }
    }
    MDB_stat st;
    cr_assert_eq(mdb_stat(rt, backend_dbi(be, BACKEND_DB_KEY), &st), 0);
    cr_assert_eq(st.ms_entries, live);
    backend_read_end(rt);
    uint64_t v = 0;
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), 0);
    cr_assert_eq(v, ci);
}

/* Writes made during every step of an online defragmentation (before and
 * after the copy, between take and replay, and an aborted batch) all reach
 * the swapped-in copy, and nothing else does. */
Test(backend, online_defrag_keeps_writes_made_while_copying)
{
    memset(df_model, 0, sizeof(df_model));
    cr_assert_eq(backend_batch_begin(be), 0);
    for (int i = 0; i < DF_KEYS; i++) {
        df_put(i, 0);
        df_model[i] = 1;
    }
    cr_assert_eq(backend_batch_commit(be), 0);

    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s/online.mdb", dir);
    backend_defrag *job;
    cr_assert_eq(backend_defrag_begin(be, tmp, &job), 0);
    backend_defrag *other;
    cr_assert_eq(backend_defrag_begin(be, tmp, &other), -EBUSY);
    df_writes(1, true); /* after the snapshot, before the copy */
    cr_assert_gt(backend_defrag_pending(job), 0);
    cr_assert_eq(backend_defrag_copy(job), 0);
    df_writes(2, true);
    df_writes(3, false); /* aborted: never happened */
    backend_defrag_take(job);
    cr_assert_eq(backend_defrag_pending(job), 0);
    df_writes(4, true); /* between take and replay */
    cr_assert_eq(backend_defrag_replay(job), 0);
    df_writes(5, true);
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_defrag_finish(job), -EBUSY); /* a batch is open */
    backend_batch_abort(be);
    cr_assert_eq(backend_defrag_finish(job), 0);
    df_check(1005);
    struct stat st;
    cr_assert_neq(stat(tmp, &st), 0, "the copy was renamed over data.mdb");
    /* recording stopped with the swap: writes go on as usual */
    df_writes(6, true);
    df_check(1006);
    cr_assert_eq(backend_defrag_begin(be, tmp, &job), 0);
    backend_defrag_cancel(job);
}

/* A file replaced under the copy (a snapshot installed) makes the job
 * stale; cancelling it removes the copy and the store is untouched. */
Test(backend, online_defrag_goes_stale_when_the_file_is_replaced)
{
    memset(df_model, 0, sizeof(df_model));
    df_writes(0, true);
    char tmp[300], other[300];
    snprintf(tmp, sizeof(tmp), "%s/online.mdb", dir);
    snprintf(other, sizeof(other), "%s/other.mdb", dir);
    backend_defrag *job;
    cr_assert_eq(backend_defrag_begin(be, tmp, &job), 0);
    cr_assert_eq(backend_defrag_copy(job), 0);
    cr_assert_not(backend_defrag_stale(job));
    cr_assert_eq(backend_rewrite_copy(be, other), 0);
    cr_assert_eq(backend_replace_file(be, other), 0);
    cr_assert(backend_defrag_stale(job));
    df_writes(1, true);
    backend_defrag_cancel(job);
    struct stat st;
    cr_assert_neq(stat(tmp, &st), 0, "the stale copy was removed");
    df_check(1001);
}

/* backend_file_meta reads a file that is not the open one (a received
 * snapshot's database) without disturbing it. */
Test(backend, file_meta_reads_another_database_file)
{
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(backend_meta_put(be, "consistent_index", 4242), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    char copy[300], missing[300];
    snprintf(copy, sizeof(copy), "%s/copy.mdb", dir);
    snprintf(missing, sizeof(missing), "%s/missing.mdb", dir);
    cr_assert_eq(backend_rewrite_copy(be, copy), 0);
    uint64_t v = 0;
    cr_assert_eq(backend_file_meta(copy, "consistent_index", &v), 0);
    cr_assert_eq(v, 4242);
    cr_assert_eq(backend_file_meta(copy, "no_such_value", &v), -ENOENT);
    cr_assert_neq(backend_file_meta(missing, "consistent_index", &v), 0);
    /* the open store is untouched and the copy can still replace it */
    cr_assert_eq(backend_replace_file(be, copy), 0);
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), 0);
    cr_assert_eq(v, 4242);
}
