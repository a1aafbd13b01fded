/* tests/etcdwal/test_etcd_import.c: server/etcd_import.c on member dirs the
 * real etcd 3.4 wrote: the log quorum gets (ids, hard state, a snapshot at
 * the store's consistent index, etcd's later entries at the same index and
 * term, translated), and what it leaves alone. */
#include <criterion/criterion.h>
#include <dirent.h>
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
#include "server/etcd_import.h"
#include "server/server_int.h"
#include "wal/wal.h"
#include "walgen.h"

static char *tmp_make(void)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(256);
    snprintf(path, 256, "%s/qetcdimp-XXXXXX", base && *base ? base : "/tmp");
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

static bool exists(const char *dir, const char *name)
{
    char p[1200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* etcd: 5 puts, stopped (SIGTERM: its store commits); started again with
 * its store held back (it commits once an hour), 15 puts, a lease, a
 * delete; then kill -9: the store is at the first run's end, the rest
 * (and the second start's own entries) only in etcd's log. */
static char *etcd_killed(void)
{
    char *t = tmp_make();
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/d", t);
    struct etcd_run r;
    cr_assert_eq(etcd_start(&r, dir, NULL), 0, "etcd did not start");
    for (int i = 0; i < 5; i++)
        cr_assert_eq(etcdctl(&r, "put k%02d v%02d", i, i), 0);
    etcd_stop(&r, SIGTERM);
    cr_assert_eq(
        etcd_start(&r, dir, "--backend-batch-interval=1h", "--backend-batch-limit=100000000", NULL),
        0, "etcd did not start again");
    for (int i = 5; i < 20; i++)
        cr_assert_eq(etcdctl(&r, "put k%02d v%02d", i, i), 0);
    cr_assert_eq(etcdctl(&r, "lease grant 600"), 0);
    cr_assert_eq(etcdctl(&r, "del k00"), 0);
    etcd_stop(&r, SIGKILL);
    return t;
}

Test(etcd_import, translates_the_log_after_the_store)
{
    char *t = etcd_killed();
    char data[700], orig[800], err[1024] = "";
    snprintf(data, sizeof(data), "%s/d", t);
    snprintf(orig, sizeof(orig), "%s/member.etcd", data);
    /* what etcd's log says, before */
    struct etcdwal_state es;
    char member[800];
    snprintf(member, sizeof(member), "%s/member", data);
    cr_assert_eq(etcdwal_read(member, &es, err, sizeof(err)), 0, "%s", err);

    cr_assert_eq(server_etcd_import(data, err, sizeof(err)), 0, "%s", err);
    cr_assert(exists(data, "member.etcd"));
    cr_assert(!exists(data, "member.etcd-import"));
    cr_assert(exists(data, "member/db/data.mdb"));
    cr_assert(etcdwal_is_etcd(orig));
    cr_assert(!etcdwal_is_etcd(member));

    struct wal_options wo = {.data_dir = data};
    struct wal *w = NULL;
    struct wal_state st;
    char werr[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&wo, &w, &st, werr, sizeof(werr)), 0, "%s", werr);
    cr_assert_eq(st.node_id, es.node_id);
    cr_assert_eq(st.cluster_id, es.cluster_id);
    cr_assert_eq(st.hs.term, es.term);
    cr_assert_eq(st.hs.vote, es.vote);
    cr_assert_eq(st.hs.commit, es.commit);
    /* the store's consistent index is the snapshot's; after it, etcd's
     * entries at the same index and term */
    cr_assert(st.has_snapshot);
    uint64_t ci = st.snapshot.index;
    cr_assert_gt(ci, 5);
    cr_assert_lt(ci, es.commit);
    cr_assert_eq(st.n_entries, es.n_entries - (size_t)ci);
    cr_assert_eq(st.snapshot.term, es.entries[ci - 1].term);
    cr_assert_eq(st.snapshot.conf.n_voters, 1);
    cr_assert_eq(st.snapshot.conf.voters[0], es.node_id);
    int puts = 0, deletes = 0, grants = 0, members = 0;
    for (size_t i = 0; i < st.n_entries; i++) {
        const struct raft_entry *q = &st.entries[i];
        const struct etcdwal_entry *e = &es.entries[ci + i];
        cr_assert_eq(q->index, e->index);
        cr_assert_eq(q->term, e->term);
        if (q->type != RAFT_ENTRY_NORMAL || q->len < 18)
            continue;
        const uint8_t *d = q->data;
        for (int k = 2; k < 18; k++)
            cr_assert_eq(d[k], 0, "no proposer: nobody waits for a converted entry");
        if (d[0] == ENTRY_PUT) {
            Etcdserverpb__PutRequest *p =
                etcdserverpb__put_request__unpack(NULL, q->len - 18, d + 18);
            cr_assert_not_null(p);
            Etcdserverpb__InternalRaftRequest *r =
                etcdserverpb__internal_raft_request__unpack(NULL, e->len, e->data);
            cr_assert_not_null(r);
            cr_assert_not_null(r->put);
            cr_assert_eq(p->key.len, r->put->key.len);
            cr_assert_eq(memcmp(p->key.data, r->put->key.data, p->key.len), 0);
            etcdserverpb__internal_raft_request__free_unpacked(r, NULL);
            etcdserverpb__put_request__free_unpacked(p, NULL);
            puts++;
        }
        deletes += d[0] == ENTRY_DELETE_RANGE;
        grants += d[0] == ENTRY_LEASE_GRANT;
        members += d[0] == ENTRY_MEMBER; /* etcd's v2 publish at its start */
    }
    cr_assert_eq(puts, 15);
    cr_assert_eq(members, 1);
    cr_assert_eq(deletes, 1);
    cr_assert_eq(grants, 1);
    wal_state_free(&st);
    wal_close(w);
    etcdwal_state_free(&es);

    /* a second start: quorum's member now, nothing to do */
    cr_assert_eq(server_etcd_import(data, err, sizeof(err)), 0, "%s", err);
    cr_assert(etcdwal_is_etcd(orig));
    tmp_remove(t);
}

Test(etcd_import, leaves_other_dirs_alone)
{
    char *t = tmp_make();
    char err[1024] = "";
    /* empty, a quorum member, a missing dir: nothing happens */
    cr_assert_eq(server_etcd_import(t, err, sizeof(err)), 0, "%s", err);
    cr_assert(!exists(t, "member"));
    struct wal_options wo = {.data_dir = t, .node_id = 1, .cluster_id = 2};
    struct wal *w = NULL;
    cr_assert_eq(wal_create(&wo, &w, err, sizeof(err)), 0);
    wal_close(w);
    cr_assert_eq(server_etcd_import(t, err, sizeof(err)), 0, "%s", err);
    cr_assert(!exists(t, "member.etcd"));
    tmp_remove(t);
}

Test(etcd_import, refuses_to_overwrite_a_kept_original)
{
    char *t = etcd_killed();
    char data[700], err[1024] = "", cmd[1600];
    snprintf(data, sizeof(data), "%s/d", t);
    snprintf(cmd, sizeof(cmd), "cp -a '%s/member' '%s/member.etcd'", data, data);
    cr_assert_eq(system(cmd), 0);
    int rv = server_etcd_import(data, err, sizeof(err));
    cr_assert_eq(rv, -EEXIST);
    cr_assert_neq(strstr(err, "member.etcd"), NULL, "%s", err);
    char member[800];
    snprintf(member, sizeof(member), "%s/member", data);
    cr_assert(etcdwal_is_etcd(member), "etcd's member is still there");
    cr_assert(!exists(data, "member.etcd-import"));
    tmp_remove(t);
}

/* digest: a fingerprint of every file under |dir| (names, sizes,
 * contents), to show nothing changed */
static unsigned long long fp_acc;
static int fp_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    for (const char *c = p; *c; c++)
        fp_acc = fp_acc * 131 + (unsigned char)*c;
    if (flag == FTW_F) {
        FILE *f = fopen(p, "rb");
        int ch;
        while (f != NULL && (ch = fgetc(f)) != EOF)
            fp_acc = fp_acc * 131 + (unsigned)ch;
        if (f != NULL)
            fclose(f);
        fp_acc += (unsigned long long)sb->st_size;
    }
    return 0;
}

static unsigned long long digest(const char *dir)
{
    fp_acc = 0;
    nftw(dir, fp_one, 16, FTW_PHYS);
    return fp_acc;
}

/* An etcd member dir (etcd wrote it: one put, stopped) whose log is
 * rewritten by hand: the same ids and terms, the entries after the first
 * empty, then |more| adds entries from index last + 1 on (its return: the
 * last index written). The data dir is returned; *node the member id. */
typedef uint64_t (*more_fn)(struct walgen *g, uint64_t term, uint64_t next, uint64_t node,
                            void *arg);
static char *handmade(more_fn more, void *arg, uint64_t *node)
{
    char *t = tmp_make();
    char dir[600], member[700], seg[900], err[1024] = "";
    snprintf(dir, sizeof(dir), "%s/d", t);
    snprintf(member, sizeof(member), "%s/member", dir);
    struct etcd_run r;
    cr_assert_eq(etcd_start(&r, dir, NULL), 0, "etcd did not start");
    cr_assert_eq(etcdctl(&r, "put k v"), 0);
    etcd_stop(&r, SIGTERM);
    struct etcdwal_state es;
    cr_assert_eq(etcdwal_read(member, &es, err, sizeof(err)), 0, "%s", err);
    uint64_t last = es.entries[es.n_entries - 1].index;
    struct walgen g = {0};
    walgen_record(&g, ETCDWAL_REC_CRC, NULL, 0);
    walgen_meta(&g, es.node_id, es.cluster_id);
    walgen_snap(&g, 0, 0);
    walgen_add_node(&g, es.entries[0].term, 1, es.node_id, "http://127.0.0.1:1");
    for (uint64_t i = 2; i <= last; i++)
        walgen_entry(&g, es.entries[i - 1].term, i, 0, NULL, 0);
    uint64_t end = more(&g, es.term, last + 1, es.node_id, arg);
    walgen_state(&g, es.term, es.vote, end);
    *node = es.node_id;
    etcdwal_state_free(&es);
    snprintf(seg, sizeof(seg), "%s/wal/0000000000000000-0000000000000000.wal", member);
    cr_assert_eq(walgen_write(&g, seg), 0);
    free(g.p);
    return t;
}

struct bad_entry {
    int type;
    const uint8_t *data;
    size_t n;
};

static uint64_t more_bad(struct walgen *g, uint64_t term, uint64_t next, uint64_t node, void *arg)
{
    (void)node;
    const struct bad_entry *b = arg;
    walgen_entry(g, term, next, b->type, b->data, b->n);
    return next;
}

/* The log ends in an entry of |type| with |bad| as data: the conversion
 * is refused with |want| in its reason, and nothing is changed. */
static void refused(int type, const uint8_t *bad, size_t n, const char *want)
{
    struct bad_entry be = {type, bad, n};
    uint64_t node;
    char *t = handmade(more_bad, &be, &node);
    char dir[600], err[1024] = "";
    snprintf(dir, sizeof(dir), "%s/d", t);
    unsigned long long before = digest(dir);
    int rv = server_etcd_import(dir, err, sizeof(err));
    cr_assert_lt(rv, 0);
    cr_assert_neq(strstr(err, want), NULL, "%s", err);
    cr_assert_neq(strstr(err, "nothing was changed"), NULL, "%s", err);
    cr_assert_eq(digest(dir), before, "the etcd dir changed");
    cr_assert(!exists(dir, "member.etcd"));
    cr_assert(!exists(dir, "member.etcd-import"));
    tmp_remove(t);
}

static uint64_t more_conf(struct walgen *g, uint64_t term, uint64_t next, uint64_t node, void *arg)
{
    (void)arg, (void)node;
    walgen_add_node(g, term, next, 0x1234, "http://127.0.0.1:7"); /* a member added */
    Raftpb__ConfChange cc = RAFTPB__CONF_CHANGE__INIT;
    cc.has_type = cc.has_node_id = cc.has_context = 1;
    const char *ctx = "{\"id\":4660,\"peerURLs\":[\"http://127.0.0.1:8\"]}";
    cc.type = RAFTPB__CONF_CHANGE_TYPE__ConfChangeUpdateNode; /* its URL changed */
    cc.node_id = 0x1234;
    cc.context.data = (uint8_t *)ctx;
    cc.context.len = strlen(ctx);
    uint8_t b[256];
    walgen_entry(g, term, next + 1, 1, b, raftpb__conf_change__pack(&cc, b));
    cc.type = RAFTPB__CONF_CHANGE_TYPE__ConfChangeRemoveNode; /* and removed */
    cc.has_context = 0;
    walgen_entry(g, term, next + 2, 1, b, raftpb__conf_change__pack(&cc, b));
    return next + 2;
}

Test(etcd_import, translates_conf_changes)
{
    uint64_t node;
    char *t = handmade(more_conf, NULL, &node);
    char dir[600], err[1024] = "";
    snprintf(dir, sizeof(dir), "%s/d", t);
    cr_assert_eq(server_etcd_import(dir, err, sizeof(err)), 0, "%s", err);
    struct wal_options wo = {.data_dir = dir};
    struct wal *w = NULL;
    struct wal_state st;
    char werr[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&wo, &w, &st, werr, sizeof(werr)), 0, "%s", werr);
    cr_assert_geq(st.n_entries, 3);
    const struct raft_entry *e = &st.entries[st.n_entries - 3];
    struct raft_membership m;
    cr_assert_eq(e->type, RAFT_ENTRY_CONF);
    cr_assert_eq(raft_membership_decode(e->data, e->len, &m), 0);
    cr_assert_eq(m.n_voters, 2);
    cr_assert(raft_membership_is_voter(&m, node));
    cr_assert(raft_membership_is_voter(&m, 0x1234));
    e++; /* the update: a member entry with the new URL */
    cr_assert_eq(e->type, RAFT_ENTRY_NORMAL);
    cr_assert_eq(((const uint8_t *)e->data)[0], ENTRY_MEMBER);
    Etcdserverpb__Member *pm =
        etcdserverpb__member__unpack(NULL, e->len - 18, (const uint8_t *)e->data + 18);
    cr_assert_not_null(pm);
    cr_assert_eq(pm->id, 0x1234);
    cr_assert_eq(pm->n_peerurls, 1);
    cr_assert_str_eq(pm->peerurls[0], "http://127.0.0.1:8");
    etcdserverpb__member__free_unpacked(pm, NULL);
    e++;
    cr_assert_eq(e->type, RAFT_ENTRY_CONF);
    cr_assert_eq(raft_membership_decode(e->data, e->len, &m), 0);
    cr_assert_eq(m.n_voters, 1);
    cr_assert_eq(m.voters[0], node);
    wal_state_free(&st);
    wal_close(w);
    tmp_remove(t);
}

Test(etcd_import, refuses_a_conf_change_v2)
{
    const uint8_t cc2[] = {0x08, 0x01}; /* ConfChangeV2{transition: 1} */
    refused(ETCDWAL_ENTRY_CONF_CHANGE_V2, cc2, sizeof(cc2), "ConfChangeV2");
}

Test(etcd_import, refuses_a_request_of_no_known_kind)
{
    /* header {ID: 1} and field 1300 (3.5's cluster_version_set), empty */
    const uint8_t req[] = {0xa2, 0x06, 0x02, 0x08, 0x01, 0xa2, 0x51, 0x00};
    refused(ETCDWAL_ENTRY_NORMAL, req, sizeof(req), "a request of a kind etcd 3.4 does not write");
}

Test(etcd_import, refuses_an_entry_that_does_not_decode)
{
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    refused(ETCDWAL_ENTRY_NORMAL, junk, sizeof(junk), "does not decode");
}

static uint64_t more_many(struct walgen *g, uint64_t term, uint64_t next, uint64_t node, void *arg)
{
    (void)node, (void)arg;
    for (uint64_t i = 0; i < 10000; i++)
        walgen_entry(g, term, next + i, 0, NULL, 0);
    return next + 9999;
}

/* A long tail is written in chunks: every entry there, the hard state last */
Test(etcd_import, a_long_tail)
{
    uint64_t node;
    char *t = handmade(more_many, NULL, &node);
    char dir[600], err[1024] = "";
    snprintf(dir, sizeof(dir), "%s/d", t);
    cr_assert_eq(server_etcd_import(dir, err, sizeof(err)), 0, "%s", err);
    struct wal_options wo = {.data_dir = dir};
    struct wal *w = NULL;
    struct wal_state st;
    char werr[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&wo, &w, &st, werr, sizeof(werr)), 0, "%s", werr);
    cr_assert_geq(st.n_entries, 10000);
    cr_assert_eq(st.entries[st.n_entries - 1].index, st.hs.commit);
    for (size_t i = 1; i < st.n_entries; i++)
        cr_assert_eq(st.entries[i].index, st.entries[i - 1].index + 1);
    wal_state_free(&st);
    wal_close(w);
    tmp_remove(t);
}

Test(etcd_import, refuses_an_unknown_conf_change)
{
    const uint8_t cc[] = {0x10, 0x09, 0x18, 0x05}; /* ConfChange{Type: 9, NodeID: 5} */
    refused(ETCDWAL_ENTRY_CONF_CHANGE, cc, sizeof(cc), "an unknown change or node id 0");
}

/* etcd's store without its log (etcd ran with --wal-dir): refused, not
 * started empty beside it */
Test(etcd_import, refuses_a_store_without_its_log)
{
    char *t = etcd_killed();
    char data[700], wal[800], moved[800], err[1024] = "";
    snprintf(data, sizeof(data), "%s/d", t);
    snprintf(wal, sizeof(wal), "%s/member/wal", data);
    snprintf(moved, sizeof(moved), "%s/wal-elsewhere", t);
    cr_assert_eq(rename(wal, moved), 0);
    unsigned long long before = digest(data);
    int rv = server_etcd_import(data, err, sizeof(err));
    cr_assert_eq(rv, -ENOENT);
    cr_assert_neq(strstr(err, "--wal-dir"), NULL, "%s", err);
    cr_assert_eq(digest(data), before);
    /* given where the log is (--wal-dir), it converts: quorum's log
     * there, etcd's beside it as <wal-dir>.etcd */
    char wal_orig[900], wal_stage[900];
    snprintf(wal_orig, sizeof(wal_orig), "%s.etcd", moved);
    snprintf(wal_stage, sizeof(wal_stage), "%s.etcd-import", moved);
    cr_assert_eq(server_etcd_import_wal(data, moved, err, sizeof(err)), 0, "%s", err);
    cr_assert(exists(data, "member.etcd"));
    cr_assert(!exists(data, "member/wal"));
    cr_assert(etcdwal_is_etcd_dir(wal_orig));
    cr_assert(!etcdwal_is_etcd_dir(moved));
    cr_assert(wal_exist_dir(moved));
    cr_assert(!exists(t, "wal-elsewhere.etcd-import"));
    struct wal_options wo = {.data_dir = data, .wal_dir = moved};
    struct wal *w = NULL;
    struct wal_state st;
    char werr[WAL_ERR_LEN] = "";
    cr_assert_eq(wal_open(&wo, &w, &st, werr, sizeof(werr)), 0, "%s", werr);
    uint64_t commit = st.hs.commit;
    cr_assert_gt(commit, 0);
    wal_state_free(&st);
    wal_close(w);
    unsigned long long etcd_wal = digest(wal_orig);
    /* what a kill -9 between the renames leaves (made by hand from the
     * converted dirs): each start finishes or redoes it */
    char cmd[4000];
    const char *states[] = {
        /* etcd's member aside, its log not yet */
        "mkdir D/member.etcd-import && mv D/member D/member.etcd-import/ && "
        "touch D/member.etcd-import/COMPLETE && mv W W.etcd-import && mv W.etcd W",
        /* both aside, ours not yet in place */
        "mkdir D/member.etcd-import && mv D/member D/member.etcd-import/ && "
        "touch D/member.etcd-import/COMPLETE && mv W W.etcd-import",
        /* our member in place, our log not yet */
        "mkdir D/member.etcd-import && touch D/member.etcd-import/COMPLETE && mv W W.etcd-import",
        /* aside without the mark (cannot happen by itself): undone, redone */
        "mkdir D/member.etcd-import && mv D/member D/member.etcd-import/ && "
        "mv W W.etcd-import && mv W.etcd W",
    };
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        char sh[1200];
        size_t o = 0;
        for (const char *c = states[i]; *c && o + 800 < sizeof(sh); c++) {
            if (*c == 'D' && (c[1] == '/' || c[1] == ' '))
                o += (size_t)snprintf(sh + o, sizeof(sh) - o, "'%s'", data);
            else if (*c == 'W' && (c[1] == '.' || c[1] == ' ' || c[1] == '\0'))
                o += (size_t)snprintf(sh + o, sizeof(sh) - o, "'%s'", moved);
            else
                sh[o++] = *c;
        }
        sh[o] = '\0';
        snprintf(cmd, sizeof(cmd), "set -e; %s", sh);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        cr_assert_eq(server_etcd_import_wal(data, moved, err, sizeof(err)), 0, "%zu: %s", i, err);
        cr_assert(!exists(data, "member.etcd-import"), "%zu", i);
        cr_assert(!exists(t, "wal-elsewhere.etcd-import"), "%zu", i);
        cr_assert(exists(data, "member/db/data.mdb"), "%zu", i);
        cr_assert(!exists(data, "member/wal"), "%zu", i);
        cr_assert_eq(digest(wal_orig), etcd_wal, "%zu: etcd's log kept as it was", i);
        cr_assert(wal_exist_dir(moved), "%zu", i);
        cr_assert_eq(wal_open(&wo, &w, &st, werr, sizeof(werr)), 0, "%zu: %s", i, werr);
        cr_assert_eq(st.hs.commit, commit, "%zu", i);
        wal_state_free(&st);
        wal_close(w);
    }
    (void)wal_stage;
    tmp_remove(t);
}

/* A translated request as node.c's entries (server_entry_encode, the one
 * encoder): with a user in etcd's header, the auth flag, the revision and
 * the name; without, a server's own write keeps the internal flag. */
Test(etcd_import, entry_header_is_node_c_s)
{
    Etcdserverpb__RequestHeader h = ETCDSERVERPB__REQUEST_HEADER__INIT;
    h.username = "root";
    h.auth_revision = 0x0107;
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key.data = (uint8_t *)"k";
    put.key.len = 1;
    Etcdserverpb__InternalRaftRequest r = ETCDSERVERPB__INTERNAL_RAFT_REQUEST__INIT;
    r.header = &h;
    r.put = &put;
    uint8_t in[256];
    size_t n = etcdserverpb__internal_raft_request__pack(&r, in);
    struct raft_membership conf = {0};
    struct buf out = {0};
    uint8_t type = 99;
    char err[512] = "";
    cr_assert_eq(server_etcd_translate(ETCDWAL_ENTRY_NORMAL, in, n, &conf, &out, &type, err,
                                       sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(type, RAFT_ENTRY_NORMAL);
    const uint8_t want[] = {ENTRY_PUT, ENTRY_FLAG_AUTH, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0,         0,               0, 0x07, 0x01, 0, 0, 0, 0, 0, 0, 4, 0,
                            'r',       'o',             'o', 't', 0};
    cr_assert_geq(out.len, sizeof(want));
    cr_assert_eq(memcmp(out.data, want, sizeof(want)), 0);
    Etcdserverpb__PutRequest *back = etcdserverpb__put_request__unpack(
        NULL, out.len - sizeof(want), out.data + sizeof(want));
    cr_assert_not_null(back);
    cr_assert_eq(back->key.len, 1);
    etcdserverpb__put_request__free_unpacked(back, NULL);
    /* an etcd compaction of its own (no user): internal */
    Etcdserverpb__CompactionRequest cr = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    cr.revision = 5;
    Etcdserverpb__InternalRaftRequest r2 = ETCDSERVERPB__INTERNAL_RAFT_REQUEST__INIT;
    r2.compaction = &cr;
    n = etcdserverpb__internal_raft_request__pack(&r2, in);
    cr_assert_eq(server_etcd_translate(ETCDWAL_ENTRY_NORMAL, in, n, &conf, &out, &type, err,
                                       sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(out.data[0], ENTRY_COMPACT);
    cr_assert_eq(out.data[1], ENTRY_FLAG_INTERNAL);
    buf_free(&out);
}
