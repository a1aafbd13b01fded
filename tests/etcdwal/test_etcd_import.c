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
