/* tests/wal/test_faults.c: src/wal/wal.c when the disk fails: a failed
 * fdatasync or write is final for the open WAL (never retried as if the
 * data were safe), and a reopen recovers exactly what was synced before.
 * The faults come from tests/faults/interpose.h (this binary's own
 * fdatasync, pwrite and posix_fallocate). */
#include "faults/interpose.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>

#include "helpers.h"
#include "wal/wal.h"

static char *dir;

static void setup(void)
{
    fault_reset();
    dir = tmp_make();
    cr_assert_not_null(dir);
}

static void teardown(void)
{
    fault_reset();
    tmp_remove(dir);
    dir = NULL;
}

TestSuite(wal_faults, .init = setup, .fini = teardown);

static struct wal_options opts(size_t seg)
{
    return (struct wal_options){
        .data_dir = dir, .segment_size = seg, .node_id = 7, .cluster_id = 9};
}

static int save(struct wal *w, uint64_t index)
{
    char data[200];
    memset(data, 'a' + (int)(index % 26), sizeof(data));
    struct raft_entry e = {.term = 1, .index = index, .data = data, .len = sizeof(data)};
    struct raft_hard_state hs = {.term = 1, .vote = 1, .commit = index};
    return wal_save(w, &hs, &e, 1);
}

/* reopen closes |w| and opens the WAL again: the entries it holds. */
static uint64_t reopen_last(struct wal *w, size_t seg)
{
    wal_close(w);
    fault_reset();
    struct wal_options o = opts(seg);
    struct wal_state st = {0};
    char err[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    uint64_t last = st.n_entries ? st.entries[st.n_entries - 1].index : 0;
    for (size_t i = 0; i < st.n_entries; i++)
        cr_assert_eq(st.entries[i].index, i + 1);
    /* and it takes appends again */
    cr_assert_eq(save(w, last + 1), 0);
    cr_assert_eq(wal_sync(w), 0);
    wal_state_free(&st);
    wal_close(w);
    return last;
}

static struct wal *create(size_t seg)
{
    struct wal_options o = opts(seg);
    struct wal *w = NULL;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), 0, "%s", err);
    return w;
}

Test(wal_faults, failed_fdatasync_is_never_retried)
{
    struct wal *w = create(0);
    for (uint64_t i = 1; i <= 5; i++)
        cr_assert_eq(save(w, i), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(save(w, 6), 0);
    fault_errno[F_FDATASYNC] = EIO;
    cr_assert_eq(wal_sync(w), -EIO);
    cr_assert_eq(fault_hits[F_FDATASYNC], 1);
    /* the disk "heals": the WAL still refuses, and does not sync again */
    fault_errno[F_FDATASYNC] = 0;
    cr_assert_eq(wal_sync(w), -EIO);
    cr_assert_eq(save(w, 7), -EIO);
    cr_assert_eq(wal_save_snapshot(w, 5, 1, 0), -EIO);
    cr_assert_eq(wal_failed(w), -EIO);
    /* 6 reached the page cache (the fault did not drop it), so a reopen
     * reads it; what matters is that 1..5 are all there */
    uint64_t last = reopen_last(w, 0);
    cr_assert(last == 5 || last == 6, "last %" PRIu64, last);
}

Test(wal_faults, enospc_on_write_is_retried_once_space_is_back)
{
    struct wal *w = create(0);
    for (uint64_t i = 1; i <= 4; i++)
        cr_assert_eq(save(w, i), 0);
    cr_assert_eq(wal_sync(w), 0);
    fault_errno[F_PWRITE] = ENOSPC;
    cr_assert_eq(save(w, 5), -ENOSPC);
    cr_assert_eq(save(w, 5), -ENOSPC);
    cr_assert_eq(wal_failed(w), 0, "out of space is not a broken WAL");
    fault_errno[F_PWRITE] = 0; /* space is back */
    cr_assert_eq(save(w, 5), 0);
    cr_assert_eq(save(w, 6), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(reopen_last(w, 0), 6);
}

/* save_n saves entries [from, from + n) in one wal_save. */
static int save_n(struct wal *w, uint64_t from, size_t n)
{
    static char data[8][200];
    struct raft_entry e[8];
    for (size_t k = 0; k < n; k++) {
        memset(data[k], 'a' + (int)k, sizeof(data[k]));
        e[k] = (struct raft_entry){
            .term = 1, .index = from + k, .data = data[k], .len = sizeof(data[k])};
    }
    struct raft_hard_state hs = {.term = 1, .vote = 1, .commit = from + n - 1};
    return wal_save(w, &hs, e, n);
}

Test(wal_faults, a_refused_write_leaves_no_stale_record_behind)
{
    struct wal *w = create(0);
    for (uint64_t i = 1; i <= 4; i++)
        cr_assert_eq(save(w, i), 0);
    cr_assert_eq(wal_sync(w), 0);
    /* half of entries 5..8 reach the file (two whole records), then ENOSPC */
    fault_errno[F_PWRITE] = ENOSPC;
    fault_partial = 1;
    cr_assert_eq(save_n(w, 5, 4), -ENOSPC);
    fault_errno[F_PWRITE] = 0;
    /* a shorter save goes there now: the hard state alone */
    struct raft_hard_state hs = {.term = 2, .vote = 1, .commit = 4};
    cr_assert_eq(wal_save(w, &hs, NULL, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
    /* without the zeroing, whole stale records 6.. would follow it: the
     * reopen would call that corruption */
    struct wal_options o = opts(0);
    struct wal_state st = {0};
    char err[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.n_entries, 4);
    cr_assert_eq(st.hs.term, 2);
    wal_state_free(&st);
    wal_close(w);
}

static size_t count_tmp(void)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/member/wal", dir);
    DIR *d = opendir(p);
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

Test(wal_faults, enospc_when_cutting_a_segment)
{
    size_t seg = 4096; /* a cut every dozen entries */
    struct wal *w = create(seg);
    uint64_t i = 1;
    fault_errno[F_FALLOCATE] = ENOSPC;
    int rv = 0;
    for (; i <= 200 && (rv = save(w, i)) == 0; i++)
        cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(rv, -ENOSPC, "no cut failed in 200 entries");
    cr_assert_eq(fault_hits[F_FALLOCATE], 1);
    cr_assert_eq(count_tmp(), 0, "the half-made segment is left behind");
    cr_assert_eq(wal_failed(w), 0);
    cr_assert_eq(wal_sync(w), 0, "the synced log is intact");
    fault_errno[F_FALLOCATE] = 0; /* space is back: the same save goes in */
    cr_assert_eq(save(w, i), 0);
    cr_assert_eq(save(w, i + 1), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_geq(wal_segment_count(w), 2);
    cr_assert_eq(reopen_last(w, seg), i + 1);
}

Test(wal_faults, failed_sync_before_a_cut_is_final)
{
    size_t seg = 4096;
    struct wal *w = create(seg);
    fault_errno[F_FDATASYNC] = EIO;
    fault_path = "/member/wal/";
    int rv = 0;
    uint64_t i = 1;
    /* wal_sync would hit the fault first: save without syncing until the
     * cut's own fdatasync of the full segment fails */
    for (; i <= 200 && (rv = save(w, i)) == 0; i++) {
    }
    cr_assert_eq(rv, -EIO);
    fault_errno[F_FDATASYNC] = 0;
    cr_assert_eq(save(w, i), -EIO);
    cr_assert_eq(wal_sync(w), -EIO);
    wal_close(w);
    /* nothing was ever synced; whatever the page cache kept reads back
     * as a chain without gaps (reopen_last checks 1..last) */
    struct wal_options o = opts(seg);
    struct wal_state st = {0};
    char err[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_leq(st.n_entries, i - 1);
    wal_state_free(&st);
    wal_close(w);
}
