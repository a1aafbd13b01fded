/* tests/mvcc/test_backend_faults.c: backend/backend.c when the disk fails
 * under a commit: the error is the disk's own (-EIO, -ENOSPC), it is final
 * for the open backend (a failed fdatasync is never retried and taken for
 * success), and a reopen finds the last good commit. Faults come from
 * tests/faults/interpose.h: this binary's own fdatasync and writev/pwrite,
 * which liblmdb's calls reach. */
#include "faults/interpose.h"

#include <criterion/criterion.h>

#include "backend/backend.h"
#include "base/err.h"
#include "tmpdir.h"

static const char *dir;
static backend *be;

static void open_be(void)
{
    struct backend_options o = {.dir = dir, .map_size = 64 << 20, .no_meta_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
}

static void setup(void)
{
    fault_reset();
    dir = tmpdir_make();
    cr_assert_not_null(dir);
    open_be();
}

static void teardown(void)
{
    fault_reset();
    backend_close(be);
    tmpdir_remove(dir);
}

TestSuite(backend_faults, .init = setup, .fini = teardown);

/* commit_n writes meta "n" = |n| plus some bulk in one batch. */
static int commit_n(uint64_t n)
{
    cr_assert_eq(backend_batch_begin(be), 0);
    MDB_txn *t = backend_batch_txn(be);
    char val[3000];
    memset(val, (int)n, sizeof(val));
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%llu-%d", (unsigned long long)n, i);
        MDB_val k = {strlen(key), key}, v = {sizeof(val), val};
        cr_assert_eq(backend_put(be, t, BACKEND_DB_KEY, &k, &v, 0), 0);
    }
    cr_assert_eq(backend_meta_put(be, "n", n), 0);
    return backend_batch_commit(be);
}

static uint64_t reopen_n(void)
{
    backend_close(be);
    fault_reset();
    open_be();
    uint64_t n = 0;
    cr_assert_eq(backend_meta_get(be, NULL, "n", &n), 0);
    return n;
}

static void fails_and_stays_failed(enum fault_call c, int e)
{
    cr_assert_eq(commit_n(1), 0);
    cr_assert_eq(commit_n(2), 0);
    fault_path = "data.mdb";
    fault_errno[c] = e;
    cr_assert_eq(commit_n(3), -e);
    cr_assert_geq(fault_hits[c], 1);
    fault_errno[c] = 0; /* the disk is back */
    cr_assert_eq(backend_batch_begin(be), -e, "a failed commit is final");
    cr_assert_eq(backend_sync(be), -e);
    cr_assert_eq(reopen_n(), 2);
    cr_assert_eq(commit_n(4), 0, "the reopened backend takes commits");
    cr_assert_eq(reopen_n(), 4);
}

Test(backend_faults, eio_on_fdatasync)
{
    fails_and_stays_failed(F_FDATASYNC, EIO);
}

Test(backend_faults, enospc_on_page_write)
{
    fails_and_stays_failed(F_WRITEV, ENOSPC);
}

Test(backend_faults, eio_on_sync)
{
    cr_assert_eq(commit_n(1), 0);
    fault_path = "data.mdb";
    fault_errno[F_FDATASYNC] = EIO;
    cr_assert_eq(backend_sync(be), -EIO);
    fault_errno[F_FDATASYNC] = 0;
    cr_assert_eq(backend_sync(be), -EIO, "a failed sync is final");
    cr_assert_eq(backend_batch_begin(be), -EIO);
    cr_assert_eq(reopen_n(), 1);
}

Test(backend_faults, space_reserve)
{
    char p[512];
    struct stat st0, st1;
    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    cr_assert_eq(commit_n(1), 0);
    cr_assert_eq(stat(p, &st0), 0);
    int rv = backend_reserve(be, 8 << 20);
    cr_assert_eq(rv, 0);
    cr_assert_eq(stat(p, &st1), 0);
    cr_assert_eq(st1.st_size, st0.st_size, "the reserve changed the file's size");
    if (st1.st_blocks * 512 < st0.st_size + (4 << 20))
        cr_skip_test("no reserve on this file system (tmpfs, or no FALLOC_FL_KEEP_SIZE)");
    /* the disk is full: a top-up (needed once half the reserve is used)
     * fails, commits into the reserve still work */
    fault_path = "data.mdb";
    fault_errno[F_FALLOCATE] = ENOSPC;
    cr_assert_eq(backend_reserve(be, 8 << 20), 0, "half of it is still there");
    cr_assert_eq(backend_reserve(be, 64 << 20), -ENOSPC);
    cr_assert_eq(commit_n(2), 0);
    fault_errno[F_FALLOCATE] = 0; /* space is back */
    cr_assert_eq(backend_reserve(be, 64 << 20), 0);
    cr_assert_eq(reopen_n(), 2);
}
