/* tests/bolt/test_etcdfmt.c: etcdfmt/ — a db etcd 3.4 wrote imported into
 * a quorum store, exported back and read by etcdctl; status as etcdctl's;
 * refusals leave nothing behind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "bolt/bolt.h"
#include "etcdfmt/etcdfmt.h"
#include "rpc.pb-c.h"

static char dir[256];

static void setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/qetcdfmt-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(etcdfmt, .init = setup, .fini = teardown, .timeout = 120);

static void make_etcd(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "%s '%s'", getenv("MAKE_ETCD_DB"), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void run(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
}

/* etcdctl_status parses `etcdctl snapshot status -w json` */
static struct etcdfmt_status etcdctl_status(const char *path)
{
    char cmd[600], out[1024];
    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 /usr/bin/etcdctl snapshot status -w json '%s'", path);
    run(cmd, out, sizeof(out));
    struct etcdfmt_status st;
    unsigned long long tk, ts;
    long long rev;
    unsigned h;
    cr_assert_eq(sscanf(out, "{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":%llu}", &h,
                        &rev, &tk, &ts),
                 4, "%s", out);
    st.hash = h;
    st.revision = rev;
    st.total_key = tk;
    st.total_size = ts;
    return st;
}

static void status_equal(const char *path)
{
    struct etcdfmt_status a = etcdctl_status(path), b;
    char err[512];
    cr_assert_eq(etcdfmt_status(path, &b, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(a.hash, b.hash, "%s: hash %x vs %x", path, a.hash, b.hash);
    cr_assert_eq(a.revision, b.revision);
    cr_assert_eq(a.total_key, b.total_key);
    cr_assert_eq(a.total_size, b.total_size);
}

static uint64_t count_db(backend *be, enum backend_db d)
{
    MDB_txn *txn;
    cr_assert_eq(backend_read_begin(be, &txn), 0);
    MDB_stat ms;
    cr_assert_eq(mdb_stat(txn, backend_dbi(be, d), &ms), 0);
    backend_read_end(txn);
    return ms.ms_entries;
}

Test(etcdfmt, import_export_round_trip)
{
    make_etcd();
    char snap[300], store[300], out[300], err[512];
    snprintf(snap, sizeof(snap), "%s/snap.db", dir);
    snprintf(store, sizeof(store), "%s/q/member/db", dir);
    status_equal(snap);

    struct etcdfmt_db_info info;
    int rv = etcdfmt_db_import(snap, store, &info, err, sizeof(err));
    cr_assert_eq(rv, 0, "%d %s", rv, err);
    cr_assert_eq(info.revision, 88, "rev %lld keys %llu ci %llu err %s", (long long)info.revision, (unsigned long long)info.total_keys, (unsigned long long)info.consistent_index, err);
    cr_assert_eq(info.compact_revision, 3);
    cr_assert_eq(info.scheduled_compact, 3);
    cr_assert_gt(info.consistent_index, 80);
    cr_assert_eq(info.total_keys, 87);
    cr_assert_eq(info.leases, 1);
    cr_assert_eq(info.n_members, 1);
    cr_assert_str_eq(info.members[0].name, "e0");
    cr_assert_eq(info.members[0].n_peer, 1);
    cr_assert_eq(info.members[0].n_client, 1);
    cr_assert_eq(strncmp(info.members[0].client[0], "http://127.0.0.1:", 17), 0);
    cr_assert(!info.members[0].learner);
    cr_assert_eq(info.cluster_id, 0);
    /* nothing left aside */
    char tmpname[400];
    snprintf(tmpname, sizeof(tmpname), "ls -A '%s' | grep -v '^data.mdb$' | grep -c . || true", store);
    char lsout[64];
    run(tmpname, lsout, sizeof(lsout));
    cr_assert_eq(atoi(lsout), 0, "stray files in the store dir");
    /* again: the store is there */
    cr_assert_eq(etcdfmt_db_import(snap, store, NULL, err, sizeof(err)), -EEXIST);

    backend *be;
    struct backend_options bo = {.dir = store};
    cr_assert_eq(backend_open(&bo, &be), 0);
    cr_assert_eq(count_db(be, BACKEND_DB_KEY), 87);
    cr_assert_eq(count_db(be, BACKEND_DB_LEASE), 1);
    uint64_t v;
    cr_assert_eq(backend_meta_get(be, NULL, "finishedCompactRev", &v), 0);
    cr_assert_eq(v, 3);
    cr_assert_eq(backend_meta_get(be, NULL, "consistent_index", &v), 0);
    cr_assert_eq(v, info.consistent_index);
    /* the member record as server/members.c keeps it */
    MDB_txn *txn;
    cr_assert_eq(backend_read_begin(be, &txn), 0);
    uint8_t k[9] = {'m'};
    for (int i = 0; i < 8; i++)
        k[1 + i] = (uint8_t)(info.members[0].id >> (56 - 8 * i));
    MDB_val key = {9, k}, val;
    cr_assert_eq(mdb_get(txn, backend_dbi(be, BACKEND_DB_MEMBERS), &key, &val), 0);
    Etcdserverpb__Member *m = etcdserverpb__member__unpack(NULL, val.mv_size, val.mv_data);
    cr_assert_not_null(m);
    cr_assert_str_eq(m->name, "e0");
    etcdserverpb__member__free_unpacked(m, NULL);
    backend_read_end(txn);

    /* and back: etcd's own reader takes it, with the same key records */
    snprintf(out, sizeof(out), "%s/out.db", dir);
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    struct etcdfmt_db_info einfo;
    uint64_t learners[] = {info.members[0].id};
    struct etcdfmt_export_opts eo = {.learners = learners, .n_learners = 1, .txid = 5};
    rv = etcdfmt_db_export(be, fd, &eo, &einfo, NULL, err, sizeof(err));
    cr_assert_eq(rv, 0, "%s", err);
    close(fd);
    backend_close(be);
    cr_assert_eq(einfo.revision, 88);
    cr_assert_eq(einfo.total_keys, 87);
    cr_assert_eq(einfo.compact_revision, 3);
    cr_assert_eq(einfo.n_members, 1);
    cr_assert(einfo.members[0].learner);
    status_equal(out);
    struct etcdfmt_status a = etcdctl_status(snap), b = etcdctl_status(out);
    cr_assert_eq(a.revision, b.revision);
    /* the exported db imports to the same records */
    char store2[300];
    snprintf(store2, sizeof(store2), "%s/q2", dir);
    struct etcdfmt_db_info info2;
    cr_assert_eq(etcdfmt_db_import(out, store2, &info2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(info2.revision, info.revision);
    cr_assert_eq(info2.total_keys, info.total_keys);
    cr_assert_eq(info2.consistent_index, info.consistent_index);
    cr_assert_eq(info2.n_members, 1);
    cr_assert(info2.members[0].learner);
    cr_assert_str_eq(info2.members[0].peer[0], info.members[0].peer[0]);
}

Test(etcdfmt, member_json_as_go)
{
    char *peer[] = {"http://a:1", "http://b:2"};
    char *client[] = {"http://c<&>:3"};
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    m.id = 13668033151171901709ull;
    m.name = "n\"1";
    m.peerurls = peer;
    m.n_peerurls = 2;
    m.clienturls = client;
    m.n_clienturls = 1;
    char out[512];
    cr_assert_gt(etcdfmt_member_json(&m, false, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "{\"id\":13668033151171901709,\"peerURLs\":[\"http://a:1\",\"http://b:2\"],"
                          "\"name\":\"n\\\"1\",\"clientURLs\":[\"http://c\\u003c\\u0026\\u003e:3\"]}");
    m.name = "";
    m.n_clienturls = 0;
    cr_assert_gt(etcdfmt_member_json(&m, true, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "{\"id\":13668033151171901709,\"peerURLs\":[\"http://a:1\",\"http://b:2\"],"
                          "\"isLearner\":true}");
    cr_assert_eq(etcdfmt_member_json(&m, true, out, 20), -ENOSPC);
}

Test(etcdfmt, refusals_leave_nothing)
{
    char bad[300], store[300], err[512];
    snprintf(bad, sizeof(bad), "%s/random.db", dir);
    FILE *f = fopen(bad, "wb");
    for (int i = 0; i < 20000; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    snprintf(store, sizeof(store), "%s/new/member/db", dir);
    int rv = etcdfmt_db_import(bad, store, NULL, err, sizeof(err));
    cr_assert_eq(rv, QERR_CORRUPT);
    cr_assert_str_eq(err, "invalid database");
    struct stat st;
    cr_assert_neq(stat(store, &st), 0, "the store dir was not made");
    /* a bbolt file with a key bucket holding something that is no revision */
    char wb[300];
    snprintf(wb, sizeof(wb), "%s/w.db", dir);
    int fd = open(wb, O_RDWR | O_CREAT | O_TRUNC, 0600);
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "key", 3), 0);
    cr_assert_eq(bolt_writer_put(w, "abc", 3, "x", 1), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 1, NULL), 0);
    bolt_writer_free(w);
    close(fd);
    snprintf(store, sizeof(store), "%s/existing", dir);
    cr_assert_eq(mkdir(store, 0700), 0);
    rv = etcdfmt_db_import(wb, store, NULL, err, sizeof(err));
    cr_assert_eq(rv, QERR_CORRUPT, "%d %s", rv, err);
    char cmd[400], out[64];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", store);
    run(cmd, out, sizeof(out));
    cr_assert_eq(atoi(out), 0, "an existing store dir stays empty: %s", out);
    cr_assert_eq(etcdfmt_db_import("/nonexistent/x.db", store, NULL, err, sizeof(err)), -ENOENT);
}

static void put_rev(uint8_t *k, uint64_t main)
{
    memset(k, 0, 17);
    for (int i = 0; i < 8; i++)
        k[i] = (uint8_t)(main >> (56 - 8 * i));
    k[8] = '_';
}

/* get_item finds |key| in bucket |bucket| of a bbolt file: its value. */
static bool get_item(bolt_db *db, const char *bucket, const void *key, size_t kl, char *val,
                     size_t *vl)
{
    struct bolt_bucket root = bolt_root(db), b;
    char err[256];
    if (bolt_bucket_get(db, &root, bucket, strlen(bucket), &b, err, sizeof(err)) != 0)
        return false;
    bolt_cursor c;
    cr_assert_eq(bolt_cursor_open(&c, db, &b, err, sizeof(err)), 0);
    struct bolt_item it;
    bool found = false;
    while (bolt_cursor_next(&c, &it) == 1) {
        if (it.klen == kl && memcmp(it.key, key, kl) == 0) {
            memcpy(val, it.val, it.vlen);
            *vl = it.vlen;
            found = true;
        }
    }
    bolt_cursor_close(&c);
    return found;
}

/* alarms, removed members, a learner and a compaction under way: the
 * records quorum keeps otherwise, both ways */
Test(etcdfmt, alarms_members_compaction)
{
    char src[300], store[300], out[300], err[512];
    snprintf(src, sizeof(src), "%s/src.db", dir);
    int fd = open(src, O_RDWR | O_CREAT | O_TRUNC, 0600);
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    Etcdserverpb__AlarmMember a = ETCDSERVERPB__ALARM_MEMBER__INIT;
    a.memberid = 0xabc;
    a.alarm = ETCDSERVERPB__ALARM_TYPE__NOSPACE;
    uint8_t ab[32];
    size_t an = etcdserverpb__alarm_member__pack(&a, ab);
    cr_assert_eq(bolt_writer_begin(w, "alarm", 5), 0);
    cr_assert_eq(bolt_writer_put(w, ab, an, "", 0), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "key", 3), 0);
    uint8_t k[17];
    const uint8_t v4[] = {0x0a, 1, 'x', 0x10, 4, 0x18, 4, 0x20, 1};
    put_rev(k, 4);
    cr_assert_eq(bolt_writer_put(w, k, 17, v4, sizeof(v4)), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "members", 7), 0);
    const char *j = "{\"id\":2748,\"peerURLs\":[\"http://p:1\"],\"isLearner\":true}";
    cr_assert_eq(bolt_writer_put(w, "abc", 3, j, strlen(j)), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "members_removed", 15), 0);
    cr_assert_eq(bolt_writer_put(w, "f00d", 4, "removed", 7), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "meta", 4), 0);
    const uint8_t ci[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    cr_assert_eq(bolt_writer_put(w, "consistent_index", 16, ci, 8), 0);
    put_rev(k, 2);
    cr_assert_eq(bolt_writer_put(w, "finishedCompactRev", 18, k, 17), 0);
    put_rev(k, 3);
    cr_assert_eq(bolt_writer_put(w, "scheduledCompactRev", 19, k, 17), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "zz-unknown", 10), 0);
    cr_assert_eq(bolt_writer_put(w, "a", 1, "b", 1), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 1, NULL), 0);
    bolt_writer_free(w);
    close(fd);

    snprintf(store, sizeof(store), "%s/store", dir);
    struct etcdfmt_db_info info;
    cr_assert_eq(etcdfmt_db_import(src, store, &info, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(info.n_members, 1);
    cr_assert_eq(info.members[0].id, 0xabc);
    cr_assert(info.members[0].learner);
    cr_assert_eq(info.n_removed, 1);
    cr_assert_eq(info.removed[0], 0xf00d);
    cr_assert_eq(info.compact_revision, 2);
    cr_assert_eq(info.scheduled_compact, 3);
    cr_assert_eq(info.consistent_index, 9);
    cr_assert_eq(info.revision, 4);
    backend *be;
    struct backend_options bo = {.dir = store};
    cr_assert_eq(backend_open(&bo, &be), 0);
    uint64_t v;
    cr_assert_eq(backend_meta_get(be, NULL, "alarm/0000000000000abc/1", &v), 0);
    cr_assert_eq(backend_meta_get(be, NULL, "scheduledCompactRev", &v), 0);
    cr_assert_eq(v, 3);

    snprintf(out, sizeof(out), "%s/out.db", dir);
    fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_eq(etcdfmt_db_export(be, fd, NULL, NULL, NULL, err, sizeof(err)), 0, "%s", err);
    close(fd);
    backend_close(be);
    bolt_db *db;
    cr_assert_eq(bolt_open_file(out, 0, &db, err, sizeof(err)), 0, "%s", err);
    char val[512];
    size_t vl;
    cr_assert(get_item(db, "alarm", ab, an, val, &vl));
    cr_assert(get_item(db, "members_removed", "f00d", 4, val, &vl));
    cr_assert(vl == 7 && memcmp(val, "removed", 7) == 0);
    cr_assert(get_item(db, "members", "abc", 3, val, &vl));
    val[vl] = '\0';
    cr_assert_str_eq(val, "{\"id\":2748,\"peerURLs\":[\"http://p:1\"],\"isLearner\":true}");
    cr_assert(get_item(db, "meta", "scheduledCompactRev", 19, val, &vl));
    put_rev(k, 3);
    cr_assert(vl == 17 && memcmp(val, k, 17) == 0);
    cr_assert(get_item(db, "cluster", "clusterVersion", 14, val, &vl));
    cr_assert(vl == 5 && memcmp(val, "3.4.0", 5) == 0);
    cr_assert(!get_item(db, "meta", "quorumCompactNextRev", 20, val, &vl), "quorum's own stays");
    cr_assert(!get_item(db, "zz-unknown", "a", 1, val, &vl), "unknown buckets are not imported");
    bolt_close(db);
}
