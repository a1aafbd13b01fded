/* tools/quorum-dump/main.c: offline inspection of a quorum data directory,
 * like etcd-dump-logs and mdb_stat. Never run it on the data dir of a live
 * member: `db` opens the LMDB environment (read-only use, but LMDB still
 * takes its lock file).
 *
 *   quorum-dump wal <data-dir>   every WAL record: segment, offset, type,
 *                                index, term, size, a preview of entry data;
 *                                given a directory of segments (a member's
 *                                --wal-dir), those
 *   quorum-dump db <data-dir>    LMDB statistics, the meta values, the
 *                                current revision and the number of keys
 *
 * Exit status: 0 fine, 1 usage or I/O error, 2 the WAL has a torn tail or
 * is corrupt (the text says where). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/err.h"
#include "mvcc/mvcc.h"
#include "wal/wal.h"

#define PREVIEW 24

struct counts {
    uint64_t records, entries, bytes;
};

static void preview(const uint8_t *p, size_t n)
{
    size_t m = n < PREVIEW ? n : PREVIEW;
    fputs(" hex=", stdout);
    for (size_t i = 0; i < m; i++)
        printf("%02x", p[i]);
    fputs(" ascii=\"", stdout);
    for (size_t i = 0; i < m; i++)
        putchar(isprint(p[i]) && p[i] != '"' ? p[i] : '.');
    printf("\"%s", n > m ? "..." : "");
}

static int print_record(const struct wal_record *r, void *arg)
{
    struct counts *c = arg;
    if (r->offset == 0) { /* every segment's first record */
        const char *base = strrchr(r->path, '/');
        printf("file %s\n", base ? base + 1 : r->path);
    }
    c->records++;
    c->bytes += r->len;
    printf("  off=%-10" PRIu64 " %-9s len=%-6" PRIu32, r->offset, wal_record_type_name(r->type),
           r->len);
    switch (r->type) {
    case WAL_REC_SEGMENT:
        printf(" seq=%" PRIu64 " first_index=%" PRIu64 " version=%" PRIu32, r->u.segment.seq,
               r->u.segment.first_index, r->u.segment.version);
        break;
    case WAL_REC_METADATA:
        printf(" node_id=%" PRIx64 " cluster_id=%" PRIx64, r->u.meta.node_id, r->u.meta.cluster_id);
        break;
    case WAL_REC_HARD_STATE:
        printf(" term=%" PRIu64 " vote=%" PRIx64 " commit=%" PRIu64, r->u.hs.term, r->u.hs.vote,
               r->u.hs.commit);
        break;
    case WAL_REC_ENTRY:
        c->entries++;
        printf(" index=%" PRIu64 " term=%" PRIu64 " type=%s size=%zu", r->u.entry.index,
               r->u.entry.term, r->u.entry.type == RAFT_ENTRY_CONF ? "conf" : "normal",
               r->u.entry.len);
        if (r->u.entry.len > 0)
            preview(r->u.entry.data, r->u.entry.len);
        break;
    case WAL_REC_SNAPSHOT:
        printf(" index=%" PRIu64 " term=%" PRIu64 "%s", r->u.snap.index, r->u.snap.term,
               r->u.snap.flags & WAL_SNAP_DROP_ENTRIES ? " drop_entries" : "");
        break;
    }
    putchar('\n');
    return 0;
}

static int dump_wal(const char *data_dir)
{
    struct counts c = {0};
    char err[WAL_ERR_LEN] = "";
    /* a --wal-dir holds the segments themselves */
    int rv = wal_exist_dir(data_dir) ? wal_dump_dir(data_dir, print_record, &c, err, sizeof(err))
                                     : wal_dump(data_dir, print_record, &c, err, sizeof(err));
    printf("records %" PRIu64 " entries %" PRIu64 " bytes %" PRIu64 "\n", c.records, c.entries,
           c.bytes);
    if (rv == 0) {
        printf("status ok\n");
        return 0;
    }
    if (rv == 1) {
        printf("status torn: %s\n", err);
        return 2;
    }
    printf("status %s: %s\n", rv == QERR_CORRUPT ? "corrupt" : "error", err);
    return rv == QERR_CORRUPT ? 2 : 1;
}

static void print_stat(const char *name, const MDB_stat *s)
{
    printf("db %-8s entries=%zu depth=%u branch_pages=%zu leaf_pages=%zu overflow_pages=%zu\n",
           name, s->ms_entries, s->ms_depth, s->ms_branch_pages, s->ms_leaf_pages,
           s->ms_overflow_pages);
}

static int dump_db(const char *data_dir)
{
    char dir[PATH_MAX], file[PATH_MAX + 16];
    snprintf(dir, sizeof(dir), "%s/member/db", data_dir);
    snprintf(file, sizeof(file), "%s/data.mdb", dir);
    struct stat sb;
    if (stat(file, &sb) != 0) {
        fprintf(stderr, "quorum-dump: %s: %s\n", file, strerror(errno));
        return 1;
    }
    struct backend_options bo = {.dir = dir};
    backend *be;
    int rv = backend_open(&bo, &be);
    if (rv != 0) {
        fprintf(stderr, "quorum-dump: cannot open %s: %s\n", dir, q_strerror(rv));
        return 1;
    }
    MDB_env *env = backend_env(be);
    MDB_envinfo info;
    MDB_stat st;
    mdb_env_info(env, &info);
    mdb_env_stat(env, &st);
    printf("file %s\n", file);
    printf("size %" PRIu64 " in_use %" PRIu64 " map_size %zu page_size %u last_txn %zu\n",
           backend_size(be), backend_size_in_use(be), info.me_mapsize, st.ms_psize,
           info.me_last_txnid);
    MDB_txn *txn;
    if ((rv = backend_read_begin(be, &txn)) != 0) {
        fprintf(stderr, "quorum-dump: read txn: %s\n", q_strerror(rv));
        backend_close(be);
        return 1;
    }
    static const char *names[BACKEND_DB__COUNT] = {"key", "meta", "lease", "auth", "members",
                                                   "authUsers", "authRoles"};
    for (int i = 0; i < BACKEND_DB__COUNT; i++) {
        MDB_stat ds;
        if (mdb_stat(txn, backend_dbi(be, (enum backend_db)i), &ds) == 0)
            print_stat(names[i], &ds);
    }
    static const char *metas[] = {"consistent_index", "term", "scheduledCompactRev",
                                  "finishedCompactRev"};
    for (size_t i = 0; i < sizeof(metas) / sizeof(metas[0]); i++) {
        uint64_t v;
        if (backend_meta_get(be, txn, metas[i], &v) == 0)
            printf("meta %s %" PRIu64 "\n", metas[i], v);
        else
            printf("meta %s (unset)\n", metas[i]);
    }
    backend_read_end(txn);

    mvcc_store *kv;
    if ((rv = mvcc_open(be, &kv)) != 0) {
        fprintf(stderr, "quorum-dump: mvcc: %s\n", q_strerror(rv));
        backend_close(be);
        return 1;
    }
    mvcc_read *rd;
    struct mvcc_range_result res = {0};
    struct mvcc_range_opts ro = {.count_only = true};
    if ((rv = mvcc_read_begin(kv, &rd)) == 0) {
        rv = mvcc_read_range(rd, (const uint8_t *)"", 0, (const uint8_t *)"\0", 1, &ro, NULL, NULL,
                             &res);
        mvcc_read_end(rd);
    }
    printf("revision %" PRId64 " compact_revision %" PRId64 "\n", mvcc_rev(kv),
           mvcc_compact_rev(kv));
    if (rv == 0)
        printf("keys %" PRId64 "\n", res.count);
    else
        fprintf(stderr, "quorum-dump: counting keys: %s\n", q_strerror(rv));
    mvcc_close(kv);
    backend_close(be);
    return rv == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "wal") == 0)
        return dump_wal(argv[2]);
    if (argc == 3 && strcmp(argv[1], "db") == 0)
        return dump_db(argv[2]);
    fprintf(stderr, "usage: quorum-dump wal <data-dir or wal-dir>\n"
                    "       quorum-dump db <data-dir>\n");
    return 1;
}
