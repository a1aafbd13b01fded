/* tests/wal/test_snap.c: src/wal/snap.c, snapshot files on real disk. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "helpers.h"
#include "wal/wal.h"

static char *dir;

static void setup(void)
{
    dir = tmp_make();
    cr_assert_not_null(dir);
}

static void teardown(void)
{
    tmp_remove(dir);
}

TestSuite(snap, .init = setup, .fini = teardown);

static struct raft_snapshot snap(uint64_t index, uint64_t term, const void *data, size_t len)
{
    struct raft_snapshot s = {.index = index, .term = term, .data = data, .len = len};
    s.conf.n_voters = 2;
    s.conf.voters[0] = 0xaa;
    s.conf.voters[1] = 0xbb;
    s.conf.n_learners = 1;
    s.conf.learners[0] = 0xcc;
    return s;
}

static void path_of(char *out, size_t n, uint64_t term, uint64_t index)
{
    snprintf(out, n, "%s/member/snap/%016lx-%016lx.snap", dir, (unsigned long)term,
             (unsigned long)index);
}

Test(snap, round_trip)
{
    static uint8_t big[100000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    struct raft_snapshot s = snap(1234, 7, big, sizeof(big)), out;
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_snap_load(dir, 7, 1234, &out), 0);
    cr_assert_eq(out.index, 1234);
    cr_assert_eq(out.term, 7);
    cr_assert_eq(out.len, sizeof(big));
    cr_assert(memcmp(out.data, big, sizeof(big)) == 0);
    cr_assert_eq(out.conf.n_voters, 2);
    cr_assert_eq(out.conf.voters[1], 0xbb);
    cr_assert_eq(out.conf.n_learners, 1);
    cr_assert_eq(out.conf.learners[0], 0xcc);
    free((void *)out.data);
    /* Empty data is fine too. */
    s = snap(5, 1, NULL, 0);
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_snap_load(dir, 1, 5, &out), 0);
    cr_assert_eq(out.len, 0);
    free((void *)out.data);
    cr_assert_eq(wal_snap_load(dir, 1, 6, &out), -ENOENT);
}

Test(snap, every_flipped_byte_is_detected)
{
    const char *data = "some application state";
    struct raft_snapshot s = snap(10, 2, data, strlen(data)), out;
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    char p[600];
    path_of(p, sizeof(p), 2, 10);
    size_t n;
    uint8_t *b = file_get(p, &n);
    cr_assert_not_null(b);
    for (size_t i = 0; i < n; i++) {
        b[i] ^= 0x04;
        cr_assert_eq(file_put(p, b, n), 0);
        b[i] ^= 0x04;
        cr_assert_eq(wal_snap_load(dir, 2, 10, &out), QERR_CORRUPT, "byte %zu", i);
    }
    for (size_t cut = 0; cut < n; cut++) {
        cr_assert_eq(file_put(p, b, cut), 0);
        cr_assert_eq(wal_snap_load(dir, 2, 10, &out), QERR_CORRUPT, "cut at %zu", cut);
    }
    cr_assert_eq(file_put(p, b, n), 0);
    cr_assert_eq(wal_snap_load(dir, 2, 10, &out), 0);
    free((void *)out.data);
    free(b);
}

Test(snap, renamed_file_is_refused)
{
    struct raft_snapshot s = snap(10, 2, "x", 1), out;
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    char from[600], to[600];
    path_of(from, sizeof(from), 2, 10);
    path_of(to, sizeof(to), 2, 11);
    cr_assert_eq(rename(from, to), 0);
    cr_assert_eq(wal_snap_load(dir, 2, 11, &out), QERR_CORRUPT);
}

Test(snap, purge_keeps_newest)
{
    for (uint64_t i = 1; i <= 5; i++) {
        struct raft_snapshot s = snap(i * 10, 1, "d", 1);
        cr_assert_eq(wal_snap_save(dir, &s), 0);
    }
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s/member/snap/junk.snap.tmp", dir);
    cr_assert_eq(file_put(tmp, "x", 1), 0);
    cr_assert_eq(wal_snap_purge(dir, 2), 0);
    struct raft_snapshot out;
    cr_assert_eq(wal_snap_load(dir, 1, 10, &out), -ENOENT);
    cr_assert_eq(wal_snap_load(dir, 1, 30, &out), -ENOENT);
    cr_assert_eq(wal_snap_load(dir, 1, 40, &out), 0);
    free((void *)out.data);
    cr_assert_eq(wal_snap_load(dir, 1, 50, &out), 0);
    free((void *)out.data);
    cr_assert_neq(access(tmp, F_OK), 0);
}

Test(snap, purge_zero_keeps_all)
{
    for (uint64_t i = 1; i <= 3; i++) {
        struct raft_snapshot s = snap(i * 10, 1, "d", 1);
        cr_assert_eq(wal_snap_save(dir, &s), 0);
    }
    cr_assert_eq(wal_snap_purge(dir, 0), 0); /* --max-snapshots 0: unlimited */
    struct raft_snapshot out;
    for (uint64_t i = 1; i <= 3; i++) {
        cr_assert_eq(wal_snap_load(dir, 1, i * 10, &out), 0);
        free((void *)out.data);
    }
}

Test(snap, too_many_members)
{
    struct raft_snapshot s = snap(1, 1, "x", 1);
    s.conf.n_voters = RAFT_MAX_MEMBERS + 1;
    cr_assert_eq(wal_snap_save(dir, &s), -EINVAL);
}
