/* tools/quorumctl/snapshot.c: the offline snapshot commands, as etcdctl
 * 3.4's (etcdutl's in later etcd): `snapshot status <file>` and
 * `snapshot restore <file> --data-dir ...`.
 *
 * A snapshot file is etcd's backup format, whoever wrote it (etcd 3.4's
 * Maintenance/Snapshot, or quorum's, through `etcdctl snapshot save` or
 * `quorumctl snapshot save`): a bbolt database with etcd 3.4's buckets,
 * then the 32-byte SHA-256 of the database's bytes. A file whose size is
 * 32 past a multiple of 512 carries the digest (etcdctl's rule).
 *
 * status prints what etcdctl prints (etcdfmt_status: bbolt's integrity
 * check, then the CRC-32C hash over bucket names, keys and values, the
 * last revision, the number of keys and the database size).
 *
 * restore checks the digest as etcdctl does (unless --skip-hash-check),
 * with its errors ("snapshot missing hash but --skip-hash-check=false",
 * "expected sha256 [..], got [..]" in Go's byte-slice notation), imports
 * the buckets into a quorum store (etcdfmt_db_import) and makes it a store
 * of no cluster yet: members, alarms and the consistent index are
 * cleared. Everything is built in a directory beside --data-dir and
 * renamed into place when complete, so a refused file leaves nothing. The
 * member then starts with --initial-cluster-state new and bootstraps a new
 * cluster on top of the restored keys, revisions, leases and auth. */
#include "quorumctl.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/sha256.h"
#include "etcdfmt/etcdfmt.h"
#include "mvcc/mvcc.h"

#define DIGEST 32

struct progress {
    bool on;
    const char *what;
    uint64_t total;
};

/* progress_show: ctl_progress on a terminal, the line ended when done */
static void progress_show(struct progress *p, uint64_t done)
{
    if (!p->on)
        return;
    ctl_progress(p->what, done, p->total);
    if (done == p->total)
        fputc('\n', stderr);
}

/* go_bytes writes |b| as Go's %v of a []byte: "[1 2 3]". */
static void go_bytes(const uint8_t *b, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '[';
    for (size_t i = 0; i < n && o + 5 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, i ? " %u" : "%u", b[i]);
    snprintf(out + o, cap - o, "]");
}

/* check_hash is etcdctl's saveDB check: a digest is there when the size is
 * 32 past a multiple of 512; without one the restore needs
 * --skip-hash-check; with one it must match the bytes before it. */
static int check_hash(const char *path, bool verify, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < DIGEST) {
        /* Go's Seek(-32, SeekEnd) on a shorter file */
        snprintf(err, errlen, "seek %s: invalid argument", path);
        close(fd);
        return -EINVAL;
    }
    uint64_t size = (uint64_t)st.st_size;
    bool has_hash = size % 512 == DIGEST;
    int rv = 0;
    if (!has_hash && verify) {
        snprintf(err, errlen, "snapshot missing hash but --skip-hash-check=false");
        rv = -EINVAL;
    }
    if (has_hash && verify) {
        uint64_t len = size - DIGEST;
        struct sha256 c;
        sha256_init(&c);
        static uint8_t buf[1 << 20];
        uint64_t off = 0;
        struct progress p = {.on = isatty(2), .what = "verifying", .total = len};
        while (off < len && rv == 0) {
            size_t want = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
            ssize_t n = pread(fd, buf, want, (off_t)off);
            if (n <= 0) {
                snprintf(err, errlen, "read %s: %s", path, n < 0 ? strerror(errno) : "EOF");
                rv = -EIO;
                break;
            }
            sha256_update(&c, buf, (size_t)n);
            off += (uint64_t)n;
            progress_show(&p, off);
        }
        uint8_t got[DIGEST], want_d[DIGEST];
        sha256_final(&c, got);
        if (rv == 0 && pread(fd, want_d, DIGEST, (off_t)len) != DIGEST) {
            snprintf(err, errlen, "read %s: %s", path, strerror(errno ? errno : EIO));
            rv = -EIO;
        }
        if (rv == 0 && memcmp(got, want_d, DIGEST) != 0) {
            char a[200], b[200];
            go_bytes(want_d, DIGEST, a, sizeof(a));
            go_bytes(got, DIGEST, b, sizeof(b));
            snprintf(err, errlen, "expected sha256 %s, got %s", a, b);
            rv = QERR_CORRUPT;
        }
    }
    close(fd);
    return rv;
}

/* open_store opens the database in |dir| as quorum's server does. */
static int open_store(const char *dir, backend **be, mvcc_store **kv, char *err, size_t errlen)
{
    struct backend_options bo = {.dir = dir};
    int rv = backend_open(&bo, be);
    if (rv == 0 && (rv = mvcc_open(*be, kv)) != 0) {
        backend_close(*be);
        *be = NULL;
    }
    if (rv != 0)
        snprintf(err, errlen, "the restored store does not open: %s", q_strerror(rv));
    return rv;
}

/* wipe_cluster clears what belonged to the old cluster. */
static int wipe_cluster(backend *be, mvcc_store *kv)
{
    int rv = mvcc_batch_begin(kv);
    if (rv != 0)
        return rv;
    MDB_txn *txn = backend_batch_txn(be);
    int rc = mdb_drop(txn, backend_dbi(be, BACKEND_DB_MEMBERS), 0);
    MDB_cursor *cur = NULL;
    if (rc == 0)
        rc = mdb_cursor_open(txn, backend_dbi(be, BACKEND_DB_META), &cur);
    MDB_val k = {6, (void *)"alarm/"}, v;
    for (int r = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : rc; r == 0;
         r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size < 6 || memcmp(k.mv_data, "alarm/", 6) != 0)
            break;
        if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
    }
    if (cur)
        mdb_cursor_close(cur);
    if (rc != 0) {
        mvcc_batch_abort(kv);
        return backend_err(rc);
    }
    if ((rv = backend_meta_put(be, "consistent_index", 0)) != 0) {
        mvcc_batch_abort(kv);
        return rv;
    }
    return mvcc_batch_commit(kv);
}

int cmd_snapshot_status(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "Error: snapshot filename is not given\n");
        return 1;
    }
    struct stat sb;
    if (stat(argv[0], &sb) != 0) {
        fprintf(stderr, "Error: stat %s: %s\n", argv[0], strerror(errno));
        return 1;
    }
    char err[4096] = "";
    struct etcdfmt_status st;
    int rv = etcdfmt_status(argv[0], &st, err, sizeof(err));
    if (rv != 0) {
        fprintf(stderr, "Error: %s\n", err[0] ? err : q_strerror(rv));
        return 1;
    }
    ctl_print_snapshot_status(ctl, st.hash, st.revision, st.total_key, st.total_size);
    return 0;
}

int cmd_snapshot_restore(struct ctl *ctl, int argc, char **argv)
{
    const char *file = NULL, *data_dir = NULL, *name = "default";
    bool skip_hash = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (a[0] != '-') {
            file = a;
            continue;
        }
        while (*a == '-')
            a++;
        char key[64];
        const char *eq = strchr(a, '=');
        snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        if (strcmp(key, "skip-hash-check") == 0) {
            skip_hash = eq == NULL || strcmp(eq + 1, "true") == 0;
            continue;
        }
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL) {
            fprintf(stderr, "Error: flag needs an argument: --%s\n", key);
            return 1;
        }
        if (strcmp(key, "data-dir") == 0)
            data_dir = v;
        else if (strcmp(key, "name") == 0)
            name = v;
        /* the cluster flags and --wal-dir are etcdctl's and taken: the
         * restore writes the store only; quorum's first start on it builds
         * the log, in the --wal-dir it is given */
        else if (strcmp(key, "initial-cluster") != 0 && strcmp(key, "initial-cluster-token") != 0 &&
                 strcmp(key, "initial-advertise-peer-urls") != 0 && strcmp(key, "wal-dir") != 0) {
            fprintf(stderr, "Error: unknown flag: --%s\n", key);
            return 1;
        }
    }
    if (file == NULL) {
        fprintf(stderr, "Error: snapshot path must be provided\n");
        return 1;
    }
    char dir[1024];
    if (data_dir == NULL) {
        snprintf(dir, sizeof(dir), "%s.etcd", name); /* etcdctl's, and quorum's default */
        data_dir = dir;
    }
    struct stat st;
    if (stat(data_dir, &st) == 0) {
        fprintf(stderr, "Error: data-dir \"%s\" exists\n", data_dir);
        return 1;
    }
    char err[4096] = "";
    if (check_hash(file, !skip_hash, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        return 1;
    }
    /* build aside: a directory next to --data-dir, renamed into place */
    char stage[1100], dbdir[1200];
    snprintf(stage, sizeof(stage), "%s.restore-XXXXXX", data_dir);
    char parent[1100];
    snprintf(parent, sizeof(parent), "%s", data_dir);
    char *pd = dirname(parent);
    if (strcmp(pd, ".") != 0 && fs_mkdir_p(pd) != 0) {
        fprintf(stderr, "Error: mkdir %s: %s\n", pd, strerror(errno));
        return 1;
    }
    if (mkdtemp(stage) == NULL) {
        fprintf(stderr, "Error: mkdir %s: %s\n", stage, strerror(errno));
        return 1;
    }
    snprintf(dbdir, sizeof(dbdir), "%s/member/db", stage);
    struct etcdfmt_db_info *info = calloc(1, sizeof(*info));
    int rv = info ? etcdfmt_db_import(file, dbdir, info, err, sizeof(err)) : -ENOMEM;
    backend *be = NULL;
    mvcc_store *kv = NULL;
    if (rv == 0)
        rv = open_store(dbdir, &be, &kv, err, sizeof(err));
    int64_t rev = 0;
    if (rv == 0) {
        rev = mvcc_rev(kv);
        if ((rv = wipe_cluster(be, kv)) != 0)
            snprintf(err, sizeof(err), "cannot reset the restored store: %s", q_strerror(rv));
    }
    if (kv)
        mvcc_close(kv);
    if (be)
        backend_close(be);
    free(info);
    if (rv == 0) {
        char lock[1300];
        snprintf(lock, sizeof(lock), "%s/data.mdb-lock", dbdir);
        unlink(lock);
        if (rename(stage, data_dir) != 0) {
            snprintf(err, sizeof(err), "rename %s: %s", data_dir, strerror(errno));
            rv = -errno;
        }
    }
    if (rv != 0) {
        fs_remove_tree(stage);
        fprintf(stderr, "Error: %s\n", err[0] ? err : q_strerror(rv));
        return 1;
    }
    (void)ctl;
    printf("restored snapshot at revision %lld into %s\n", (long long)rev, data_dir);
    printf("start the member with --data-dir %s --initial-cluster-state new and the cluster's "
           "--initial-cluster and --initial-cluster-token\n",
           data_dir);
    return 0;
}
