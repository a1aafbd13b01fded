/* tests/etcdwal: src/etcdwal over WAL and .snap files the real etcd 3.4
 * wrote (run in a temp dir by the test), and surgery on copies of them. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "etcd_run.h"
#include "etcdwal/etcdwal.h"
#include "raft_internal.pb-c.h"
#include "raftpb.pb-c.h"
#include "wal/wal.h"
#include "walgen.h"

static char *tmp_make(void)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(256);
    snprintf(path, 256, "%s/qetcdwal-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(path));
    return path;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void tmp_remove(char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(path);
}

/* the single segment's path */
static void first_segment(const char *member, char *out, size_t cap)
{
    char dir[800];
    snprintf(dir, sizeof(dir), "%s/wal", member);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *de;
    out[0] = '\0';
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".wal") != NULL && strlen(de->d_name) == 37 &&
            (out[0] == '\0' || strcmp(de->d_name, strrchr(out, '/') + 1) < 0))
            snprintf(out, cap, "%s/%s", dir, de->d_name);
    closedir(d);
    cr_assert(out[0] != '\0');
}

/* frames: the offsets of the records of a segment, up to the zero tail */
static size_t frames(const char *path, uint64_t *offs, uint64_t *lens, size_t max)
{
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0);
    size_t n = 0;
    uint64_t off = 0;
    uint8_t w[8];
    while (n < max && pread(fd, w, 8, (off_t)off) == 8) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
            v = v << 8 | w[i];
        if (v == 0)
            break;
        uint64_t len = v & ~(0xffull << 56), pad = (v >> 63) ? (v >> 56) & 7 : 0;
        offs[n] = off;
        lens[n++] = len;
        off += 8 + len + pad;
    }
    close(fd);
    return n;
}

static void poke(const char *path, uint64_t off, uint8_t xor)
{
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= xor;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static void zero_from(const char *path, uint64_t off, uint64_t n)
{
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint8_t z[4096] = {0};
    while (n > 0) {
        size_t k = n > sizeof(z) ? sizeof(z) : (size_t)n;
        cr_assert_eq(pwrite(fd, z, k, (off_t)off), (ssize_t)k);
        off += k;
        n -= k;
    }
    close(fd);
}

/* put_key: the key of an entry that is a Put, or NULL */
static char *put_key(const struct etcdwal_entry *e)
{
    if (e->type != ETCDWAL_ENTRY_NORMAL || e->len == 0)
        return NULL;
    Etcdserverpb__InternalRaftRequest *r =
        etcdserverpb__internal_raft_request__unpack(NULL, e->len, e->data);
    char *k = NULL;
    if (r != NULL && r->put != NULL)
        k = strndup((const char *)r->put->key.data, r->put->key.len);
    if (r != NULL)
        etcdserverpb__internal_raft_request__free_unpacked(r, NULL);
    return k;
}

/* An etcd member dir written by etcd: 30 puts and a lease, stopped by
 * SIGTERM. With |snap_count| > 0 etcd also writes .snap files. */
static char *etcd_dir(const char *snap_count)
{
    char *t = tmp_make();
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/d", t);
    struct etcd_run r;
    char sc[64];
    snprintf(sc, sizeof(sc), "--snapshot-count=%s", snap_count);
    cr_assert_eq(etcd_start(&r, dir, sc, NULL), 0, "etcd did not start");
    for (int i = 0; i < 30; i++)
        cr_assert_eq(etcdctl(&r, "put key%02d value%02d", i, i), 0);
    cr_assert_eq(etcdctl(&r, "lease grant 600"), 0);
    etcd_stop(&r, SIGTERM);
    return t;
}

Test(etcdwal, reads_what_etcd_wrote)
{
    char *t = etcd_dir("100000");
    char member[700], err[ETCDWAL_ERR_LEN] = "";
    snprintf(member, sizeof(member), "%s/d/member", t);
    cr_assert(etcdwal_is_etcd(member));
    struct etcdwal_state st;
    int rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert_neq(st.node_id, 0);
    cr_assert_neq(st.cluster_id, 0);
    cr_assert(!st.has_snap);
    cr_assert(!st.torn);
    cr_assert_gt(st.n_entries, 30);
    cr_assert_neq(st.term, 0);
    cr_assert_eq(st.vote, st.node_id, "a lone member votes for itself");
    cr_assert_eq(st.commit, st.entries[st.n_entries - 1].index);
    /* contiguous from 1; the first is the bootstrap conf change adding us */
    for (size_t i = 0; i < st.n_entries; i++)
        cr_assert_eq(st.entries[i].index, i + 1);
    cr_assert_eq(st.entries[0].type, ETCDWAL_ENTRY_CONF_CHANGE);
    Raftpb__ConfChange *cc =
        raftpb__conf_change__unpack(NULL, st.entries[0].len, st.entries[0].data);
    cr_assert_not_null(cc);
    cr_assert_eq(cc->node_id, st.node_id);
    struct etcdwal_member m;
    cr_assert_eq(etcdwal_member_json(cc->context.data, cc->context.len, &m), 0);
    cr_assert_eq(m.n_peer, 1);
    cr_assert(strncmp(m.peer[0], "http://127.0.0.1:", 17) == 0);
    raftpb__conf_change__free_unpacked(cc, NULL);
    /* the puts, in order */
    int next = 0;
    for (size_t i = 0; i < st.n_entries; i++) {
        char *k = put_key(&st.entries[i]);
        if (k == NULL)
            continue;
        char want[16];
        snprintf(want, sizeof(want), "key%02d", next++);
        cr_assert_str_eq(k, want);
        free(k);
    }
    cr_assert_eq(next, 30);
    etcdwal_state_free(&st);

    /* the same log, its last entry's write torn: a sector of it zeros */
    char seg[900];
    first_segment(member, seg, sizeof(seg));
    uint64_t offs[4096], lens[4096];
    size_t nf = frames(seg, offs, lens, 4096);
    cr_assert_gt(nf, 30);
    zero_from(seg, offs[nf - 1] + 8, lens[nf - 1]);
    rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert(st.torn);
    cr_assert_neq(strstr(st.torn_at, seg), NULL);
    etcdwal_state_free(&st);

    /* a flipped bit in an entry in the middle: corruption, with where */
    poke(seg, offs[nf / 2] + 8 + lens[nf / 2] - 1, 0x10);
    rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, QERR_CORRUPT);
    cr_assert_neq(strstr(err, seg), NULL, "%s", err);
    char at[64];
    snprintf(at, sizeof(at), "offset %llu", (unsigned long long)offs[nf / 2]);
    cr_assert_neq(strstr(err, at), NULL, "%s", err);
    cr_assert_eq(st.n_entries, 0);
    tmp_remove(t);
}

Test(etcdwal, reads_from_the_newest_snapshot)
{
    char *t = etcd_dir("10");
    char member[700], err[ETCDWAL_ERR_LEN] = "";
    snprintf(member, sizeof(member), "%s/d/member", t);
    struct etcdwal_state st;
    int rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert(st.has_snap);
    cr_assert_geq(st.snap.index, 10);
    cr_assert_eq(st.snap.conf.n_voters, 1);
    cr_assert_eq(st.snap.conf.voters[0], st.node_id);
    cr_assert_gt(st.n_entries, 0);
    cr_assert_eq(st.entries[0].index, st.snap.index + 1);
    for (size_t i = 1; i < st.n_entries; i++)
        cr_assert_eq(st.entries[i].index, st.entries[i - 1].index + 1);
    /* the v2 store in the snapshot names the member */
    struct etcdwal_member ms[4];
    int n = etcdwal_v2_members(st.snap.data, st.snap.len, ms, 4);
    cr_assert_eq(n, 1);
    cr_assert_eq(ms[0].id, st.node_id);
    cr_assert_str_eq(ms[0].name, "n1");
    cr_assert_eq(ms[0].n_peer, 1);
    cr_assert_eq(ms[0].n_client, 1);
    uint64_t snap_index = st.snap.index;
    etcdwal_state_free(&st);

    /* a newer .snap that is broken is passed over, as etcd's snap.Load */
    char path[900];
    snprintf(path, sizeof(path), "%s/snap/%016llx-%016llx.snap", member, 99ull, 0xfffffull);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("not a snapshot", f);
    fclose(f);
    rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert_eq(st.snap.index, snap_index);
    etcdwal_state_free(&st);
    tmp_remove(t);
}

Test(etcdwal, quorum_logs_are_not_etcd_logs)
{
    char *t = tmp_make();
    struct wal_options wo = {.data_dir = t, .node_id = 1, .cluster_id = 2};
    struct wal *w = NULL;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_create(&wo, &w, err, sizeof(err)), 0);
    wal_close(w);
    char member[600];
    snprintf(member, sizeof(member), "%s/member", t);
    cr_assert(!etcdwal_is_etcd(member));
    struct etcdwal_state st;
    cr_assert_eq(etcdwal_read(member, &st, err, sizeof(err)), QERR_CORRUPT);
    snprintf(member, sizeof(member), "%s/none", t);
    cr_assert(!etcdwal_is_etcd(member));
    cr_assert_eq(etcdwal_read(member, &st, err, sizeof(err)), -ENOENT);
    tmp_remove(t);
}

Test(etcdwal, snap_decode_refuses_garbage)
{
    struct etcdwal_snap s;
    char err[256];
    cr_assert_eq(etcdwal_snap_decode((const uint8_t *)"", 0, &s, err, sizeof(err)), QERR_CORRUPT);
    /* field 1 crc = 5, field 2 data = "x": CRC mismatch */
    const uint8_t bad[] = {0x08, 0x05, 0x12, 0x01, 'x'};
    cr_assert_eq(etcdwal_snap_decode(bad, sizeof(bad), &s, err, sizeof(err)), QERR_CORRUPT);
    cr_assert_neq(strstr(err, "CRC"), NULL);
    cr_assert_eq(etcdwal_v2_members((const uint8_t *)"[]", 2, NULL, 0), QERR_CORRUPT);
}

/* A log over several 64 MB segments (etcd cuts at 64 MB): the CRC chains
 * across them, each segment's crc record restating it, and with snapshots
 * taken meanwhile the reader starts at the segment holding the newest
 * snapshot's index. */
Test(etcdwal, reads_across_segments, .timeout = 120)
{
    char *t = tmp_make();
    char dir[600], val[700];
    snprintf(dir, sizeof(dir), "%s/d", t);
    snprintf(val, sizeof(val), "%s/value", t);
    FILE *f = fopen(val, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 1000 * 1000; i++)
        fputc('a' + i % 26, f);
    fclose(f);
    struct etcd_run r;
    cr_assert_eq(etcd_start(&r, dir, "--snapshot-count=50", NULL), 0, "etcd did not start");
    for (int i = 0; i < 75; i++)
        cr_assert_eq(etcdctl(&r, "put big%02d < %s", i, val), 0);
    cr_assert_eq(etcdctl(&r, "put last done"), 0);
    etcd_stop(&r, SIGTERM);

    char member[700], wal[800], err[ETCDWAL_ERR_LEN] = "";
    snprintf(member, sizeof(member), "%s/member", dir);
    snprintf(wal, sizeof(wal), "%s/wal", member);
    int segments = 0;
    DIR *d = opendir(wal);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        segments += strstr(de->d_name, ".wal") != NULL && strstr(de->d_name, ".tmp") == NULL;
    closedir(d);
    cr_assert_geq(segments, 2);

    struct etcdwal_state st;
    int rv = etcdwal_read(member, &st, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert(st.has_snap);
    cr_assert_geq(st.snap.index, 50);
    cr_assert_gt(st.n_entries, 0);
    cr_assert_eq(st.entries[0].index, st.snap.index + 1);
    for (size_t i = 1; i < st.n_entries; i++)
        cr_assert_eq(st.entries[i].index, st.entries[i - 1].index + 1);
    cr_assert_eq(st.commit, st.entries[st.n_entries - 1].index);
    char *k = NULL;
    for (size_t i = st.n_entries; i-- > 0 && k == NULL;)
        k = put_key(&st.entries[i]);
    cr_assert_str_eq(k, "last");
    free(k);
    etcdwal_state_free(&st);
    tmp_remove(t);
}

/* ---- hand-made segments: ReadAll's rules ---- */

/* gen_dir: <t>/member/wal/<name> holding |g| (freed); the member dir in
 * |member| */
static void gen_dir(const char *t, const char *name, struct walgen *g, char *member, size_t cap)
{
    char dir[700], path[900];
    snprintf(member, cap, "%s/member", t);
    snprintf(dir, sizeof(dir), "%s/wal", member);
    mkdir(member, 0700);
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(walgen_write(g, path), 0);
    free(g->p);
    memset(g, 0, sizeof(*g));
}

static struct walgen gen_start(void)
{
    struct walgen g = {0};
    walgen_record(&g, ETCDWAL_REC_CRC, NULL, 0);
    walgen_meta(&g, 7, 9);
    walgen_snap(&g, 0, 0);
    return g;
}

#define SEG0 "0000000000000000-0000000000000000.wal"

Test(etcdwal_gen, a_later_entry_overwrites_the_tail)
{
    char *t = tmp_make(), member[600], err[ETCDWAL_ERR_LEN] = "";
    struct walgen g = gen_start();
    walgen_add_node(&g, 1, 1, 7, "http://127.0.0.1:1");
    walgen_entry(&g, 1, 2, 0, (const uint8_t *)"a", 1);
    walgen_entry(&g, 1, 3, 0, (const uint8_t *)"b", 1);
    walgen_entry(&g, 1, 4, 0, (const uint8_t *)"c", 1);
    walgen_state(&g, 1, 7, 2);
    walgen_entry(&g, 2, 3, 0, (const uint8_t *)"B", 1); /* a new leader's */
    walgen_state(&g, 2, 0, 3);
    gen_dir(t, SEG0, &g, member, sizeof(member));
    struct etcdwal_state st;
    cr_assert_eq(etcdwal_read(member, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.node_id, 7);
    cr_assert_eq(st.cluster_id, 9);
    cr_assert_eq(st.n_entries, 3);
    cr_assert_eq(st.entries[2].index, 3);
    cr_assert_eq(st.entries[2].term, 2);
    cr_assert_eq(st.entries[2].data[0], 'B');
    cr_assert_eq(st.term, 2);
    cr_assert_eq(st.commit, 3);
    etcdwal_state_free(&st);
    tmp_remove(t);
}

Test(etcdwal_gen, refusals)
{
    char member[600], err[ETCDWAL_ERR_LEN];
    struct etcdwal_state st;
    struct {
        const char *what, *want;
    } cases[] = {
        {"gap", "a gap in the log"},   {"metadata", "ErrMetadataConflict"},
        {"type", "unexpected type 9"}, {"nosnap", "ErrSnapshotNotFound"},
        {"crc", "crc record"},         {"seq", "sequence numbers"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *t = tmp_make();
        struct walgen g = {0};
        if (strcmp(cases[i].what, "nosnap") == 0) {
            walgen_record(&g, ETCDWAL_REC_CRC, NULL, 0);
            walgen_meta(&g, 7, 9);
        } else {
            g = gen_start();
        }
        walgen_entry(&g, 1, 1, 0, NULL, 0);
        if (strcmp(cases[i].what, "gap") == 0)
            walgen_entry(&g, 1, 3, 0, NULL, 0);
        if (strcmp(cases[i].what, "metadata") == 0)
            walgen_meta(&g, 8, 9);
        if (strcmp(cases[i].what, "type") == 0)
            walgen_record(&g, 9, (const uint8_t *)"x", 1);
        gen_dir(t, SEG0, &g, member, sizeof(member));
        if (strcmp(cases[i].what, "crc") == 0 || strcmp(cases[i].what, "seq") == 0) {
            /* a second segment whose crc record does not restate the chain,
             * or that skips a sequence number */
            struct walgen g2 = {.crc = 0x12345678};
            walgen_record(&g2, ETCDWAL_REC_CRC, NULL, 0);
            walgen_meta(&g2, 7, 9);
            gen_dir(t,
                    strcmp(cases[i].what, "crc") == 0 ? "0000000000000001-0000000000000002.wal"
                                                      : "0000000000000002-0000000000000002.wal",
                    &g2, member, sizeof(member));
        }
        err[0] = '\0';
        cr_assert_eq(etcdwal_read(member, &st, err, sizeof(err)), QERR_CORRUPT, "%s",
                     cases[i].what);
        cr_assert_neq(strstr(err, cases[i].want), NULL, "%s: %s", cases[i].what, err);
        cr_assert_eq(st.n_entries, 0);
        tmp_remove(t);
    }
}
