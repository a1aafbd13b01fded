/* tests/wal/test_wal.c: src/wal/wal.c on real files in temp dirs: round
 * trips across reopen, overwritten tails, segment cuts, snapshot markers and
 * release, and the recovery rule at every byte of a torn or damaged record. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "helpers.h"
#include "base/log.h"
#include "wal/wal.h"
#include "wal/wal_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#define NODE 0x1111
#define CLUSTER 0x2222

static char *dir;

static void setup(void)
{
    dir = tmp_make();
    cr_assert_not_null(dir);
}

static void teardown(void)
{
    tmp_remove(dir);
    dir = NULL;
}

TestSuite(wal, .init = setup, .fini = teardown);

static struct wal_options opts(size_t seg)
{
    struct wal_options o = {
        .data_dir = dir, .segment_size = seg, .node_id = NODE, .cluster_id = CLUSTER};
    return o;
}

static int fmt_data(char *buf, uint64_t index, uint64_t term)
{
    return sprintf(buf, "entry-%" PRIu64 "-term-%" PRIu64 "-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                   index, term);
}

/* save_range saves entries [from, to] of |term| in batches of |batch|, with
 * a hard state {term, 1, to} after each batch. */
static void save_range(struct wal *w, uint64_t from, uint64_t to, uint64_t term, size_t batch)
{
    static char data[64][128];
    struct raft_entry ents[64];
    cr_assert(batch <= 64);
    for (uint64_t i = from; i <= to;) {
        size_t n = 0;
        for (; n < batch && i <= to; n++, i++) {
            ents[n] = (struct raft_entry){
                .term = term, .index = i, .type = RAFT_ENTRY_NORMAL, .data = data[n]};
            ents[n].len = (size_t)fmt_data(data[n], i, term);
        }
        struct raft_hard_state hs = {.term = term, .vote = 1, .commit = i - 1};
        cr_assert_eq(wal_save(w, &hs, ents, n), 0);
    }
}

/* save_one saves entry |index| of |term| alone: no hard state after it. */
static void save_one(struct wal *w, uint64_t index, uint64_t term)
{
    char data[128];
    struct raft_entry e = {.term = term, .index = index, .data = data};
    e.len = (size_t)fmt_data(data, index, term);
    cr_assert_eq(wal_save(w, NULL, &e, 1), 0);
}

static void check_entry(const struct raft_entry *e, uint64_t index, uint64_t term)
{
    char want[128];
    int n = fmt_data(want, index, term);
    cr_assert_eq(e->index, index, "index %" PRIu64 " want %" PRIu64, e->index, index);
    cr_assert_eq(e->term, term, "term of %" PRIu64 ": %" PRIu64 " want %" PRIu64, index, e->term,
                 term);
    cr_assert_eq(e->len, (size_t)n);
    cr_assert(memcmp(e->data, want, (size_t)n) == 0);
}

static int open_state(size_t seg, struct wal **w, struct wal_state *st, char *err)
{
    struct wal_options o = opts(seg);
    err[0] = '\0';
    return wal_open(&o, w, st, err, WAL_ERR_LEN);
}

static struct wal *create(size_t seg)
{
    struct wal_options o = opts(seg);
    struct wal *w;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), 0, "%s", err);
    return w;
}

Test(wal, create_and_open_errors)
{
    struct wal *w;
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_not(wal_exist(dir));
    cr_assert_eq(open_state(0, &w, &st, err), -ENOENT);
    w = create(0);
    cr_assert(wal_exist(dir));
    wal_close(w);
    struct wal_options o = opts(0);
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), -EEXIST);
    /* An empty WAL opens to an empty state with the metadata. */
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.node_id, NODE);
    cr_assert_eq(st.cluster_id, CLUSTER);
    cr_assert_eq(st.n_entries, 0);
    cr_assert_not(st.has_snapshot);
    cr_assert_not(st.repaired);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, round_trip)
{
    struct wal *w = create(0);
    save_range(w, 1, 100, 1, 7);
    save_range(w, 101, 150, 2, 50);
    struct raft_hard_state hs = {.term = 3, .vote = 2, .commit = 140};
    cr_assert_eq(wal_save(w, &hs, NULL, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(wal_last_index(w), 150);
    wal_close(w);

    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 150);
    for (uint64_t i = 1; i <= 150; i++)
        check_entry(&st.entries[i - 1], i, i <= 100 ? 1 : 2);
    cr_assert_eq(st.hs.term, 3);
    cr_assert_eq(st.hs.vote, 2);
    cr_assert_eq(st.hs.commit, 140);
    cr_assert_eq(wal_last_index(w), 150);
    struct raft_storage rs;
    wal_state_storage(&st, &rs);
    cr_assert_eq(rs.n_entries, 150);
    cr_assert_eq(rs.entries, st.entries);
    cr_assert_null(rs.snapshot);
    cr_assert_eq(rs.hs.commit, 140);
    /* Append after reopen, then reopen again. */
    save_range(w, 151, 160, 3, 3);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
    wal_state_free(&st);
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 160);
    check_entry(&st.entries[159], 160, 3);
    cr_assert_eq(st.hs.commit, 160);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, empty_entry_and_conf_type)
{
    struct wal *w = create(0);
    uint8_t conf[3] = {1, 2, 3};
    struct raft_entry e[2] = {
        {.term = 1, .index = 1, .type = RAFT_ENTRY_CONF, .data = conf, .len = 3},
        {.term = 1, .index = 2, .type = RAFT_ENTRY_NORMAL}};
    cr_assert_eq(wal_save(w, NULL, e, 2), 0);
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 2);
    cr_assert_eq(st.entries[0].type, RAFT_ENTRY_CONF);
    cr_assert_eq(st.entries[0].len, 3);
    cr_assert(memcmp(st.entries[0].data, conf, 3) == 0);
    cr_assert_eq(st.entries[1].len, 0);
    cr_assert_eq(st.hs.term, 0);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, overwrite_uncommitted_tail)
{
    struct wal *w = create(0);
    save_range(w, 1, 10, 1, 10);
    save_range(w, 6, 8, 2, 2); /* a new leader replaced 6..10 with 6..8 */
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 8);
    for (uint64_t i = 1; i <= 8; i++)
        check_entry(&st.entries[i - 1], i, i <= 5 ? 1 : 2);
    /* And across a reopen: replace 3.. with 3..4 of term 3. */
    save_range(w, 3, 4, 3, 5);
    wal_close(w);
    wal_state_free(&st);
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 4);
    check_entry(&st.entries[1], 2, 1);
    check_entry(&st.entries[2], 3, 3);
    check_entry(&st.entries[3], 4, 3);
    cr_assert_eq(wal_last_index(w), 4);
    wal_state_free(&st);
    wal_close(w);
}

#define SMALL (16 * 1024)

Test(wal, segment_cut_and_reopen)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 600, 1, 16); /* ~88 bytes a record: about 4 segments */
    cr_assert_eq(wal_sync(w), 0);
    size_t nseg = wal_segment_count(w);
    cr_assert_geq(nseg, 3, "%zu segments", nseg);
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert_eq(wal_segment_count(w), nseg);
    cr_assert_eq(st.n_entries, 600);
    for (uint64_t i = 1; i <= 600; i++)
        check_entry(&st.entries[i - 1], i, 1);
    /* Overwrite across a segment boundary, then keep going. */
    save_range(w, 100, 700, 2, 64);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_gt(wal_segment_count(w), nseg);
    wal_close(w);
    wal_state_free(&st);
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 700);
    check_entry(&st.entries[98], 99, 1);
    check_entry(&st.entries[99], 100, 2);
    check_entry(&st.entries[699], 700, 2);
    cr_assert_eq(st.hs.commit, 700);
    /* Every segment's name carries its first index: check with wal_dump. */
    static struct rec_list l;
    l.n = 0;
    cr_assert_eq(wal_dump(dir, rec_collect, &l, err, sizeof(err)), 0, "%s", err);
    size_t segs = 0;
    for (size_t i = 0; i < l.n; i++)
        if (l.v[i].type == WAL_REC_SEGMENT)
            segs++;
    cr_assert_eq(segs, wal_segment_count(w));
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, batch_larger_than_segment)
{
    struct wal *w = create(4096);
    save_range(w, 1, 64, 1, 64); /* one write of ~5.6 KiB */
    save_range(w, 65, 70, 1, 64);
    cr_assert_eq(wal_segment_count(w), 2);
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(4096, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 70);
    wal_state_free(&st);
    wal_close(w);
}

static struct raft_snapshot make_snap(uint64_t index, uint64_t term, const char *data)
{
    struct raft_snapshot s = {.index = index, .term = term, .data = data, .len = strlen(data)};
    s.conf.n_voters = 3;
    s.conf.voters[0] = 1;
    s.conf.voters[1] = 2;
    s.conf.voters[2] = 3;
    s.conf.n_learners = 1;
    s.conf.learners[0] = 9;
    return s;
}

Test(wal, snapshot_marker_and_release)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 600, 1, 16);
    struct raft_hard_state hs = {.term = 5, .vote = 3, .commit = 450};
    cr_assert_eq(wal_save(w, &hs, NULL, 0), 0);
    save_range(w, 601, 700, 5, 16);
    size_t before = wal_segment_count(w);
    struct raft_snapshot s = make_snap(450, 1, "state-at-450");
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_save_snapshot(w, 450, 1, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(wal_release_to(w, 450), 0);
    size_t after = wal_segment_count(w);
    cr_assert_lt(after, before, "%zu -> %zu", before, after);
    cr_assert_geq(after, 1);
    wal_close(w);

    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert(st.has_snapshot);
    cr_assert_eq(st.snapshot.index, 450);
    cr_assert_eq(st.snapshot.term, 1);
    cr_assert_eq(st.snapshot.len, strlen("state-at-450"));
    cr_assert(memcmp(st.snapshot.data, "state-at-450", st.snapshot.len) == 0);
    cr_assert_eq(st.snapshot.conf.n_voters, 3);
    cr_assert_eq(st.snapshot.conf.learners[0], 9);
    cr_assert_eq(st.n_entries, 250);
    check_entry(&st.entries[0], 451, 1);
    check_entry(&st.entries[249], 700, 5);
    cr_assert_eq(st.hs.term, 5);
    cr_assert_eq(st.node_id, NODE);
    struct raft_storage rs;
    wal_state_storage(&st, &rs);
    cr_assert_eq(rs.snapshot, &st.snapshot);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, release_keeps_needed_segments)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 600, 1, 16);
    size_t before = wal_segment_count(w);
    cr_assert_eq(wal_release_to(w, 0), 0);
    cr_assert_eq(wal_segment_count(w), before);
    cr_assert_eq(wal_release_to(w, 1000000), 0);
    cr_assert_eq(wal_segment_count(w), 1); /* never the last one */
    wal_close(w);
    /* Without a snapshot file for what was released, the log does not
     * start where it must: refused, not silently short. */
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), QERR_CORRUPT);
    cr_assert(strstr(err, "snapshot") != NULL, "%s", err);
}

/* --max-wals: the oldest segments go while more than the limit exist and
 * the snapshot covers them; a segment still needed stops the purge; 0
 * keeps every file. */
Test(wal, purge_keeps_max_files_and_needed_segments)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 1200, 1, 16);
    size_t before = wal_segment_count(w);
    cr_assert_geq(before, 6, "%zu segments", before);
    cr_assert_eq(wal_purge(w, 1200, 0), 0); /* unlimited */
    cr_assert_eq(wal_segment_count(w), before);
    cr_assert_eq(wal_purge(w, 0, 2), 0); /* nothing covered by a snapshot */
    cr_assert_eq(wal_segment_count(w), before);
    cr_assert_eq(wal_purge(w, 1200, before), 0); /* not over the limit */
    cr_assert_eq(wal_purge(w, 1200, 3), (int)before - 3);
    cr_assert_eq(wal_segment_count(w), 3);
    cr_assert_eq(wal_purge(w, 1000000, 1), 2);
    cr_assert_eq(wal_segment_count(w), 1); /* never the last one */
    wal_close(w);
}

Test(wal, purge_stops_at_the_segment_holding_the_snapshot)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 1200, 1, 16);
    size_t before = wal_segment_count(w);
    /* entry 2 is in the first segment: nothing before it may go */
    cr_assert_eq(wal_purge(w, 2, 1), 0);
    cr_assert_eq(wal_segment_count(w), before);
    wal_close(w);
}

Test(wal, no_sync_skips_fdatasync)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 50, 1, 16);
    wal_no_sync = true;
    cr_assert_eq(wal_sync(w), 0);
    wal_no_sync = false;
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 50); /* written, only not forced to disk */
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, received_snapshot_drops_entries)
{
    struct wal *w = create(0);
    save_range(w, 1, 20, 1, 5);
    struct raft_snapshot s = make_snap(50, 2, "leader-state");
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_save_snapshot(w, 50, 2, WAL_SNAP_DROP_ENTRIES), 0);
    cr_assert_eq(wal_last_index(w), 50);
    save_range(w, 51, 55, 2, 5);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert(st.has_snapshot);
    cr_assert_eq(st.snapshot.index, 50);
    cr_assert_eq(st.n_entries, 5);
    check_entry(&st.entries[0], 51, 2);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, snapshot_file_choice)
{
    struct wal *w = create(0);
    save_range(w, 1, 30, 1, 5);
    struct raft_snapshot s10 = make_snap(10, 1, "ten"), s20 = make_snap(20, 1, "twenty"),
                         s25 = make_snap(25, 1, "unmarked");
    cr_assert_eq(wal_snap_save(dir, &s10), 0);
    cr_assert_eq(wal_save_snapshot(w, 10, 1, 0), 0);
    cr_assert_eq(wal_snap_save(dir, &s20), 0);
    cr_assert_eq(wal_save_snapshot(w, 20, 1, 0), 0);
    cr_assert_eq(wal_snap_save(dir, &s25), 0); /* crashed before its marker */
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.snapshot.index, 20);
    cr_assert_eq(st.n_entries, 10);
    check_entry(&st.entries[0], 21, 1);
    wal_state_free(&st);
    wal_close(w);
    /* Damage snapshot 20: the older one (10) is used, entries from 11. */
    char p[600];
    snprintf(p, sizeof(p), "%s/member/snap/%016x-%016x.snap", dir, 1, 20);
    size_t n;
    uint8_t *b = file_get(p, &n);
    cr_assert_not_null(b);
    b[n / 2] ^= 0x10;
    cr_assert_eq(file_put(p, b, n), 0);
    free(b);
    cr_assert_eq(open_state(0, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.snapshot.index, 10);
    cr_assert_eq(st.n_entries, 20);
    check_entry(&st.entries[0], 11, 1);
    wal_state_free(&st);
    wal_close(w);
}

/* ------------------------------------------------ recovery, byte by byte */

static struct rec_list recs;

static void collect(void)
{
    char err[WAL_ERR_LEN];
    recs.n = 0;
    cr_assert_eq(wal_dump(dir, rec_collect, &recs, err, sizeof(err)), 0, "%s", err);
}

/* find_entry is the position of the last record of entry |index|. */
static const struct rec_pos *find_entry(uint64_t index)
{
    const struct rec_pos *p = NULL;
    for (size_t i = 0; i < recs.n; i++)
        if (recs.v[i].type == WAL_REC_ENTRY && recs.v[i].index == index)
            p = &recs.v[i];
    cr_assert_not_null(p, "no record for entry %" PRIu64, index);
    return p;
}

/* expect_entries opens the WAL and checks it holds entries 1..|last|. */
static void expect_entries(size_t seg, uint64_t last, bool repaired, const char *what)
{
    struct wal *w;
    struct wal_state st;
    char err[WAL_ERR_LEN];
    int rv = open_state(seg, &w, &st, err);
    cr_assert_eq(rv, 0, "%s: %d %s", what, rv, err);
    cr_assert_eq(st.n_entries, last, "%s: %zu entries, want %" PRIu64, what, st.n_entries, last);
    for (uint64_t i = 1; i <= last; i++)
        check_entry(&st.entries[i - 1], i, 1);
    cr_assert_eq(st.repaired, repaired, "%s: repaired %d (%s)", what, st.repaired, err);
    wal_state_free(&st);
    wal_close(w);
}

static void expect_corrupt(size_t seg, const char *file, uint64_t offset, const char *what)
{
    struct wal *w;
    struct wal_state st;
    char err[WAL_ERR_LEN], want[64];
    int rv = open_state(seg, &w, &st, err);
    cr_assert_eq(rv, QERR_CORRUPT, "%s: got %d (%s)", what, rv, err);
    const char *base = strrchr(file, '/');
    cr_assert(strstr(err, base + 1) != NULL, "%s: error names no file: %s", what, err);
    snprintf(want, sizeof(want), "offset %" PRIu64 " ", offset);
    cr_assert(strstr(err, want) != NULL, "%s: error lacks \"%s\": %s", what, want, err);
    cr_assert_eq(st.n_entries, 0);
}

Test(wal, torn_last_record_every_offset)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 19, 1, 1);
    save_one(w, 20, 1); /* the very last record */
    wal_close(w);
    collect();
    const struct rec_pos *last = find_entry(20);
    cr_assert_eq(last, &recs.v[recs.n - 1]);
    char path[512];
    strcpy(path, last->path);
    size_t size, total = rec_total(last->len);
    uint8_t *orig = file_get(path, &size);
    cr_assert_eq(size, SMALL);
    for (size_t cut = last->offset; cut < last->offset + total; cut++) {
        char what[64];
        /* A truncated file... */
        cr_assert_eq(file_put(path, orig, cut), 0);
        snprintf(what, sizeof(what), "truncated at %zu", cut);
        expect_entries(SMALL, 19, cut > last->offset, what);
        /* ...repaired for good: a reopen needs no repair, and appends work. */
        expect_entries(SMALL, 19, false, what);
        /* ...and a full-size file with zeros from |cut| on. */
        uint8_t *z = malloc(size);
        memcpy(z, orig, cut);
        memset(z + cut, 0, size - cut);
        cr_assert_eq(file_put(path, z, size), 0);
        free(z);
        snprintf(what, sizeof(what), "zeroed from %zu", cut);
        /* Zeros only over the padding leave a valid record (CRC covers
         * padding zeros): 20 entries then. */
        bool intact = cut >= last->offset + 8 + last->len;
        expect_entries(SMALL, intact ? 20 : 19, !intact && cut > last->offset, what);
    }
    /* After a repair the WAL takes new records where the torn one was. */
    cr_assert_eq(file_put(path, orig, last->offset + 11), 0);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert(strstr(err, "repaired") != NULL, "%s", err);
    save_range(w, 20, 25, 1, 2);
    wal_close(w);
    wal_state_free(&st);
    expect_entries(SMALL, 25, false, "appended after repair");
    free(orig);
}

Test(wal, flipped_bit_in_last_record_is_torn)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 9, 1, 1);
    save_one(w, 10, 1);
    wal_close(w);
    collect();
    const struct rec_pos *last = find_entry(10);
    cr_assert_eq(last, &recs.v[recs.n - 1]);
    char path[512];
    strcpy(path, last->path);
    size_t size, total = rec_total(last->len);
    uint8_t *orig = file_get(path, &size);
    for (size_t i = last->offset; i < last->offset + total; i++) {
        char what[64];
        snprintf(what, sizeof(what), "bit %zu flipped at %zu", i % 8, i);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        cr_assert_eq(file_put(path, orig, size), 0);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        expect_entries(SMALL, 9, true, what);
    }
    free(orig);
}

Test(wal, flipped_bit_in_middle_record_is_refused)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 10, 1, 1);
    wal_close(w);
    collect();
    const struct rec_pos *mid = find_entry(7);
    char path[512];
    strcpy(path, mid->path);
    size_t size, total = rec_total(mid->len);
    uint8_t *orig = file_get(path, &size);
    for (size_t i = mid->offset; i < mid->offset + total; i++) {
        char what[64];
        snprintf(what, sizeof(what), "bit %zu flipped at %zu", i % 8, i);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        cr_assert_eq(file_put(path, orig, size), 0);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        expect_corrupt(SMALL, path, mid->offset, what);
    }
    /* Nothing was changed on disk by the refusals. */
    size_t n2;
    uint8_t *now = file_get(path, &n2);
    cr_assert_eq(n2, size);
    free(now);
    free(orig);
}

Test(wal, zeroed_middle_record_is_refused)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 10, 1, 1);
    wal_close(w);
    collect();
    const struct rec_pos *mid = find_entry(5);
    size_t size;
    uint8_t *b = file_get(mid->path, &size);
    memset(b + mid->offset, 0, rec_total(mid->len)); /* a lost sector */
    cr_assert_eq(file_put(mid->path, b, size), 0);
    expect_corrupt(SMALL, mid->path, mid->offset, "zeroed record");
    free(b);
}

/* The last entry record of the second segment. */
static const struct rec_pos *middle_segment_last_entry(void)
{
    collect();
    const char *first_path = recs.v[0].path;
    const char *mid_path = NULL;
    for (size_t i = 0; i < recs.n && mid_path == NULL; i++)
        if (strcmp(recs.v[i].path, first_path) != 0)
            mid_path = recs.v[i].path;
    cr_assert_not_null(mid_path);
    const struct rec_pos *last = NULL;
    for (size_t i = 0; i < recs.n; i++)
        if (strcmp(recs.v[i].path, mid_path) == 0 && recs.v[i].type == WAL_REC_ENTRY)
            last = &recs.v[i];
    cr_assert_not_null(last);
    return last;
}

Test(wal, cut_inside_middle_segment_is_refused)
{
    struct wal *w = create(4096);
    save_range(w, 1, 150, 1, 4);
    cr_assert_geq(wal_segment_count(w), 3);
    wal_close(w);
    const struct rec_pos *last = middle_segment_last_entry();
    char path[512];
    strcpy(path, last->path);
    size_t size, total = rec_total(last->len);
    uint8_t *orig = file_get(path, &size);
    for (size_t cut = last->offset + 1; cut < last->offset + total; cut++) {
        char what[64];
        snprintf(what, sizeof(what), "middle segment cut at %zu", cut);
        cr_assert_eq(file_put(path, orig, cut), 0);
        expect_corrupt(4096, path, last->offset, what);
    }
    /* Cut exactly between records: the next segment's first index shows
     * that entries are missing. */
    cr_assert_eq(file_put(path, orig, last->offset), 0);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(4096, &w, &st, err), QERR_CORRUPT);
    cr_assert(strstr(err, "missing") != NULL, "%s", err);
    /* Intact again: opens. */
    cr_assert_eq(file_put(path, orig, size), 0);
    expect_entries(4096, 150, false, "restored");
    free(orig);
}

Test(wal, flipped_bit_in_middle_segment_is_refused)
{
    struct wal *w = create(4096);
    save_range(w, 1, 150, 1, 4);
    wal_close(w);
    const struct rec_pos *last = middle_segment_last_entry();
    char path[512];
    strcpy(path, last->path);
    size_t size, total = rec_total(last->len);
    uint8_t *orig = file_get(path, &size);
    /* Even the last record of a middle segment is not a torn tail. */
    for (size_t i = last->offset; i < last->offset + total; i++) {
        char what[64];
        snprintf(what, sizeof(what), "middle segment bit flipped at %zu", i);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        cr_assert_eq(file_put(path, orig, size), 0);
        orig[i] ^= (uint8_t)(1u << (i % 8));
        expect_corrupt(4096, path, last->offset, what);
    }
    free(orig);
}

Test(wal, preallocated_zero_tail)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 5, 1, 5);
    wal_close(w);
    collect();
    struct stat sb;
    cr_assert_eq(stat(recs.v[0].path, &sb), 0);
    cr_assert_eq((size_t)sb.st_size, SMALL, "segment not preallocated");
    expect_entries(SMALL, 5, false, "zero tail");
    /* A zero tail of odd length (a file system that lost the allocation). */
    size_t size;
    uint8_t *b = file_get(recs.v[0].path, &size);
    cr_assert_eq(file_put(recs.v[0].path, b, size - 3), 0);
    free(b);
    expect_entries(SMALL, 5, false, "odd zero tail");
    /* Garbage after the zeros of the tail segment: a torn write of data
     * that never was valid is still a torn tail. */
    b = file_get(recs.v[0].path, &size);
    memset(b + size - 100, 0xab, 50);
    cr_assert_eq(file_put(recs.v[0].path, b, size), 0);
    free(b);
    expect_entries(SMALL, 5, true, "garbage in the tail");
}

/* vm_kib reads a figure of /proc/self/status (VmRSS, VmHWM) in KiB. */
static long vm_kib(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    long v = -1;
    size_t n = strlen(name);
    while (v < 0 && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    cr_assert_geq(v, 0, "no %s in /proc/self/status", name);
    return v;
}

Test(wal, big_preallocated_tail_is_read_in_pieces)
{
    /* a member's first segment as it starts: 64 MiB, a few records */
    const size_t seg = 64u << 20;
    struct wal *w = create(seg);
    save_range(w, 1, 5, 1, 5);
    wal_close(w);
    collect();
    const struct rec_pos *last = find_entry(5);
    char path[512];
    strcpy(path, last->path);
    const struct rec_pos *tail = &recs.v[recs.n - 1]; /* the hard state after 5 */
    uint64_t end = tail->offset + rec_total(tail->len);
    /* opening holds the records, not the segment: the peak resident set
     * (reset by clear_refs 5) grows by far less than 64 MiB */
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    cr_assert_not_null(cr);
    cr_assert_gt(fputs("5", cr), -1);
    cr_assert_eq(fclose(cr), 0);
    long before = vm_kib("VmHWM");
    expect_entries(seg, 5, false, "64 MiB segment");
    long grew = vm_kib("VmHWM") - before;
    cr_assert_lt(grew, 16 * 1024, "opening a 64 MiB segment raised the peak by %ld KiB", grew);
    /* a valid record 40 MiB in, past pieces already dropped from memory,
     * is still found: corruption, not a torn tail */
    size_t size;
    uint8_t *b = file_get(path, &size);
    cr_assert_eq(size, seg);
    memcpy(b + (40u << 20), b + last->offset, rec_total(last->len));
    cr_assert_eq(file_put(path, b, size), 0);
    expect_corrupt(seg, path, end, "a valid record 40 MiB in");
    /* garbage there instead: a torn tail, cut off */
    memset(b + (40u << 20), 0xab, rec_total(last->len));
    cr_assert_eq(file_put(path, b, size), 0);
    free(b);
    expect_entries(seg, 5, true, "garbage 40 MiB in");
}

Test(wal, leftover_tmp_segment_is_removed)
{
    struct wal *w = create(0);
    save_range(w, 1, 3, 1, 3);
    wal_close(w);
    char p[600];
    snprintf(p, sizeof(p), "%s/member/wal/%016x-%016x.wal.tmp", dir, 1, 4);
    cr_assert_eq(file_put(p, "partial", 7), 0);
    expect_entries(0, 3, false, "tmp left over");
    cr_assert_neq(access(p, F_OK), 0);
}

/* ------------------------------------------- space written ahead */

static struct wal_options ahead_opts(size_t seg)
{
    struct wal_options o = opts(seg);
    o.written_ahead = true;
    return o;
}

/* unwritten_in tells whether the file |name| in the WAL directory has
 * preallocated space not yet written (wal__unwritten on the whole file). */
static int unwritten_in(const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/member/wal/%s", dir, name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0, "%s: %s", p, strerror(errno));
    struct stat sb;
    cr_assert_eq(fstat(fd, &sb), 0);
    int rv = wal__unwritten(fd, 0, (uint64_t)sb.st_size);
    close(fd);
    return rv;
}

/* last_segment_name: the name of the segment with the highest sequence */
static void last_segment_name(char *out, size_t n)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/member/wal", dir);
    DIR *d = opendir(p);
    cr_assert_not_null(d);
    struct dirent *de;
    out[0] = '\0';
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 4 && strcmp(de->d_name + len - 4, ".wal") == 0 && strcmp(de->d_name, out) > 0)
            snprintf(out, n, "%s", de->d_name);
    }
    closedir(d);
    cr_assert_neq(out[0], '\0');
}

static off_t spare_size(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/member/wal/spare.tmp", dir);
    struct stat sb;
    return stat(p, &sb) == 0 ? sb.st_size : -1;
}

/* small_log_of_ten: a log of SMALL segments holding entries 1..10, closed
 * (made as wal_create makes it: preallocated, nothing written ahead) */
static void small_log_of_ten(void)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 10, 1, 5);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
}

Test(wal, written_ahead_segments)
{
    /* preallocated (the default): the file system must report unwritten
     * space, or this file system cannot tell the two apart */
    small_log_of_ten();
    struct wal *w;
    char seg[300];
    last_segment_name(seg, sizeof(seg));
    int u = unwritten_in(seg);
    if (u < 0)
        cr_skip_test("no extent maps here (FIEMAP: %s)", strerror(-u));
    if (u == 0)
        cr_skip_test("this file system preallocates written space");
    /* open written ahead: the open segment's rest is written, and the
     * spare is made beside it */
    struct wal_options o = ahead_opts(SMALL);
    struct wal_state st;
    char err[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.n_entries, 10);
    wal_state_free(&st);
    cr_assert_eq(unwritten_in(seg), 0, "the open segment is still preallocated only");
    cr_assert_eq(wal_wait_ahead(w), 0);
    cr_assert_eq(spare_size(), (off_t)SMALL);
    cr_assert_eq(unwritten_in("spare.tmp"), 0);
    /* a cut takes the spare, and the next one is made */
    size_t nseg = wal_segment_count(w);
    uint64_t i = 11;
    while (wal_segment_count(w) == nseg) {
        save_one(w, i++, 1);
        cr_assert_eq(wal_sync(w), 0);
        cr_assert_lt(i, 10000, "no cut");
    }
    char seg2[300];
    last_segment_name(seg2, sizeof(seg2));
    cr_assert_str_neq(seg2, seg);
    cr_assert_eq(unwritten_in(seg2), 0, "the new segment was not the spare");
    cr_assert_eq(wal_wait_ahead(w), 0);
    cr_assert_eq(spare_size(), (off_t)SMALL);
    /* many cuts in a row, each waiting for its spare or not: every entry
     * is read back, and the spare is gone after the close */
    save_range(w, i, i + 599, 1, 16);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
    cr_assert_eq(spare_size(), -1, "the spare is left behind");
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.n_entries, i + 599);
    for (uint64_t k = 1; k <= i + 599; k++)
        check_entry(&st.entries[k - 1], k, 1);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, written_ahead_spare_left_over_or_failing)
{
    small_log_of_ten();
    struct wal *w;
    /* a spare left by a crash while it was made: removed at open and
     * made again, all zeros */
    char p[600];
    snprintf(p, sizeof(p), "%s/member/wal/spare.tmp", dir);
    cr_assert_eq(file_put(p, "half-made", 9), 0);
    struct wal_options o = ahead_opts(SMALL);
    struct wal_state st;
    char err[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    wal_state_free(&st);
    cr_assert_eq(wal_wait_ahead(w), 0);
    size_t n = 0;
    uint8_t *b = file_get(p, &n);
    cr_assert_not_null(b);
    cr_assert_eq(n, (size_t)SMALL);
    for (size_t k = 0; k < n; k++)
        cr_assert_eq(b[k], 0, "byte %zu of the spare is %u", k, b[k]);
    free(b);
    wal_close(w);
    /* a spare that cannot be made (a directory holds its name): the cuts
     * preallocate as without it, and nothing is lost */
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    wal_state_free(&st);
    cr_assert_eq(wal_wait_ahead(w), -EEXIST);
    size_t nseg = wal_segment_count(w);
    save_range(w, 11, 400, 1, 16);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_gt(wal_segment_count(w), nseg);
    wal_close(w);
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.n_entries, 400);
    check_entry(&st.entries[399], 400, 1);
    wal_state_free(&st);
    wal_close(w);
    rmdir(p);
}

/* ------------------------------------------- with the real Raft core */

/* drive runs Ready loop passes of a single-node core, persisting to |w| as
 * the server will, until nothing is left to do. */
static void drive(struct raft *r, struct wal *w)
{
    while (raft_has_ready(r)) {
        struct raft_ready rd;
        cr_assert_eq(raft_ready(r, &rd), 0);
        cr_assert_null(rd.snapshot);
        cr_assert_eq(wal_save(w, rd.hs_changed ? &rd.hs : NULL, rd.entries, rd.n_entries), 0);
        cr_assert_eq(wal_sync(w), 0);
        raft_advance(r);
    }
}

Test(wal, restart_raft_core_from_wal)
{
    struct raft_config cfg;
    raft_config_default(&cfg, 1);
    struct raft_membership m = {.voters = {1}, .n_voters = 1};
    struct raft *r;
    cr_assert_eq(raft_new(&cfg, NULL, &m, &r), 0);
    struct wal *w = create(SMALL);
    raft_campaign(r);
    drive(r, w);
    cr_assert_eq(raft_get_role(r), RAFT_LEADER);
    char data[64];
    for (int i = 0; i < 300; i++) {
        int n = sprintf(data, "proposal-%d", i);
        cr_assert_eq(raft_propose(r, data, (size_t)n, NULL), 0);
        if (i % 7 == 0)
            drive(r, w);
    }
    drive(r, w);
    /* Compact at the applied index, as the server will. */
    uint64_t applied = raft_get_applied(r);
    cr_assert_geq(applied, 250);
    struct raft_snapshot s = {.index = applied,
                              .term = raft_get_entry(r, applied)->term,
                              .conf = *raft_get_membership(r),
                              .data = "APP",
                              .len = 3};
    cr_assert_eq(raft_compact(r, "APP", 3), 0);
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_save_snapshot(w, s.index, s.term, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_eq(wal_release_to(w, s.index), 0);
    for (int i = 300; i < 320; i++) {
        int n = sprintf(data, "proposal-%d", i);
        cr_assert_eq(raft_propose(r, data, (size_t)n, NULL), 0);
    }
    drive(r, w);
    uint64_t last = raft_get_last_index(r), term = raft_get_term(r), commit = raft_get_commit(r);
    raft_free(r);
    wal_close(w);

    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(SMALL, &w, &st, err), 0, "%s", err);
    struct raft_storage rs;
    wal_state_storage(&st, &rs);
    rs.applied = s.index;
    cr_assert_eq(raft_new(&cfg, &rs, NULL, &r), 0);
    cr_assert_eq(raft_get_last_index(r), last);
    cr_assert_eq(raft_get_term(r), term);
    cr_assert_eq(raft_get_commit(r), commit);
    cr_assert_eq(raft_get_first_index(r), s.index + 1);
    const struct raft_entry *e = raft_get_entry(r, last);
    cr_assert_not_null(e);
    cr_assert_eq(e->len, strlen("proposal-319"));
    cr_assert(memcmp(e->data, "proposal-319", e->len) == 0);
    wal_state_free(&st);
    /* It carries on: campaign again and commit a new entry. */
    raft_campaign(r);
    drive(r, w);
    cr_assert_eq(raft_get_role(r), RAFT_LEADER);
    cr_assert_eq(raft_propose(r, "again", 5, NULL), 0);
    drive(r, w);
    cr_assert_eq(raft_get_commit(r), raft_get_last_index(r));
    raft_free(r);
    wal_close(w);
}

Test(wal, hard_state_survives_release)
{
    struct wal *w = create(4096);
    struct raft_hard_state hs = {.term = 9, .vote = 4, .commit = 100};
    cr_assert_eq(wal_save(w, &hs, NULL, 0), 0); /* only in the first segment */
    for (uint64_t i = 1; i <= 200; i++)
        save_one(w, i, 1);
    cr_assert_geq(wal_segment_count(w), 3);
    struct raft_snapshot s = make_snap(150, 1, "s");
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_save_snapshot(w, 150, 1, 0), 0);
    cr_assert_eq(wal_release_to(w, 150), 0);
    wal_close(w);
    static struct rec_list l;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_dump(dir, rec_collect, &l, err, sizeof(err)), 0, "%s", err);
    cr_assert_null(strstr(l.v[0].path, "/0000000000000000-"), "first segment not released");
    struct wal_state st;
    cr_assert_eq(open_state(4096, &w, &st, err), 0, "%s", err);
    cr_assert_eq(st.hs.term, 9);
    cr_assert_eq(st.hs.vote, 4);
    cr_assert_eq(st.hs.commit, 100);
    cr_assert_eq(st.n_entries, 50);
    check_entry(&st.entries[0], 151, 1);
    wal_state_free(&st);
    wal_close(w);
}

Test(wal, dump_reports_corruption)
{
    struct wal *w = create(SMALL);
    save_range(w, 1, 10, 1, 1);
    wal_close(w);
    collect();
    const struct rec_pos *mid = find_entry(4);
    size_t size;
    uint8_t *b = file_get(mid->path, &size);
    b[mid->offset + 20] ^= 0x80;
    cr_assert_eq(file_put(mid->path, b, size), 0);
    free(b);
    static struct rec_list l;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_dump(dir, rec_collect, &l, err, sizeof(err)), QERR_CORRUPT);
    cr_assert_eq(l.v[l.n - 1].offset + rec_total(l.v[l.n - 1].len), mid->offset);
    cr_assert(strstr(err, "corrupt record at offset") != NULL, "%s", err);
}

Test(wal, received_snapshot_without_file_is_refused)
{
    struct wal *w = create(0);
    save_range(w, 1, 20, 1, 5);
    cr_assert_eq(wal_save_snapshot(w, 50, 2, WAL_SNAP_DROP_ENTRIES), 0); /* file lost */
    save_range(w, 51, 55, 2, 5);
    wal_close(w);
    struct wal_state st;
    char err[WAL_ERR_LEN];
    cr_assert_eq(open_state(0, &w, &st, err), QERR_CORRUPT);
    cr_assert(strstr(err, "resume at index 51") != NULL, "%s", err);
}

/* a sync over wal_warn_sync_ns is etcd's "slow fdatasync" line */
Test(wal, slow_fdatasync_is_logged)
{
    struct wal *w = create(0);
    save_range(w, 1, 10, 1, 7);
    char *dir = tmp_make();
    char path[512], err[512] = "";
    snprintf(path, sizeof(path), "%s/log.json", dir);
    cr_assert_eq(log_setup("zap", path, "info", "quorum", err, sizeof(err)), 0, "%s", err);
    uint64_t keep = wal_warn_sync_ns;
    wal_warn_sync_ns = 0; /* every sync is slow */
    cr_assert_eq(wal_sync(w), 0);
    wal_warn_sync_ns = keep;
    cr_assert_eq(wal_sync(w), 0); /* not slow: no line */
    log_defaults();
    size_t n;
    char *text = (char *)file_get(path, &n);
    cr_assert_not_null(text);
    text = realloc(text, n + 1);
    text[n] = '\0';
    cr_expect(strstr(text, "\"level\":\"warn\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\"caller\":\"wal/wal.c:") != NULL, "%s", text);
    cr_expect(strstr(text, "\"msg\":\"slow fdatasync\",\"took\":\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\",\"expected-duration\":\"0s\"}\n") != NULL, "%s", text);
    cr_expect_eq(strchr(text, '\n'), text + n - 1, "one line: %s", text);
    free(text);
    wal_close(w);
    tmp_remove(dir);
}

static int count_records(const struct wal_record *r, void *arg)
{
    (void)r;
    ++*(size_t *)arg;
    return 0;
}

/* A dedicated directory for the segments (--wal-dir): the segments are
 * there and nowhere else, the snapshot files stay in <data-dir>/member/snap,
 * and a reopen reads both. */
Test(wal, dedicated_dir)
{
    char waldir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(waldir, sizeof(waldir), "%s/disk2/wal", dir);
    struct wal_options o = opts(SMALL);
    o.wal_dir = waldir;
    struct wal *w;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), 0, "%s", err);
    save_range(w, 1, 300, 1, 16);
    struct raft_snapshot s = make_snap(200, 1, "state-at-200");
    cr_assert_eq(wal_snap_save(dir, &s), 0);
    cr_assert_eq(wal_save_snapshot(w, 200, 1, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    cr_assert_gt(wal_segment_count(w), 1);
    wal_close(w);
    cr_assert(wal_exist_dir(waldir));
    cr_assert_not(wal_exist(dir));
    snprintf(path, sizeof(path), "%s/member/wal", dir);
    cr_assert_neq(access(path, F_OK), 0, "nothing in the data dir's member/wal");
    snprintf(path, sizeof(path), "%s/member/snap/%016x-%016x.snap", dir, 1, 200);
    cr_assert_eq(access(path, F_OK), 0);
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), -EEXIST);

    struct wal_state st;
    cr_assert_eq(wal_open(&o, &w, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert(st.has_snapshot);
    cr_assert_eq(st.snapshot.index, 200);
    cr_assert_eq(st.n_entries, 100);
    cr_assert_eq(st.entries[0].index, 201);
    wal_state_free(&st);
    wal_close(w);
    /* the same segments, dumped from that directory */
    size_t n = 0;
    cr_assert_eq(wal_dump_dir(waldir, count_records, &n, err, sizeof(err)), 0, "%s", err);
    cr_assert_gt(n, 300);
    cr_assert_eq(wal_dump(dir, count_records, &n, err, sizeof(err)), -ENOENT);
}
