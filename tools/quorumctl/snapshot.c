/* tools/quorumctl/snapshot.c: the offline snapshot commands, as etcdctl
 * 3.4's (etcdutl's in later etcd): `snapshot status <file>` and
 * `snapshot restore <file> --data-dir ...`.
 *
 * A snapshot file is what Maintenance.Snapshot streams (`etcdctl snapshot
 * save` against quorum writes it as it comes): the LMDB database, then the
 * 32-byte SHA-256 of the database's bytes. The database is a page multiple,
 * so a file whose size is 32 past a multiple of 4096 carries the digest.
 * restore checks it (unless --skip-hash-check), copies the database into
 * <data-dir>/member/db/data.mdb and makes it a store of no cluster yet:
 * members, alarms and the consistent index are cleared. The member then
 * starts with --initial-cluster-state new and bootstraps a new cluster on
 * top of the restored keys, revisions and leases. */
#include "quorumctl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/sha256.h"
#include "mvcc/mvcc.h"

#define DIGEST 32
#define PAGE 4096

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

/* check_file opens |path| and tells how many bytes are the database and
 * whether a digest follows; with |verify| the digest must match. */
static int check_file(const char *path, bool verify, int *fd_out, uint64_t *db_len, char *err,
                      size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < PAGE) {
        snprintf(err, errlen, "%s is not a snapshot (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -EINVAL;
    }
    uint64_t size = (uint64_t)st.st_size;
    bool has_hash = size % PAGE == DIGEST;
    *db_len = has_hash ? size - DIGEST : size;
    if (verify && !has_hash) {
        snprintf(err, errlen, "snapshot missing hash but --skip-hash-check=false");
        close(fd);
        return -EINVAL;
    }
    if (verify) {
        struct sha256 c;
        sha256_init(&c);
        static uint8_t buf[1 << 20];
        uint64_t off = 0;
        struct progress p = {.on = isatty(2), .what = "verifying", .total = *db_len};
        while (off < *db_len) {
            size_t want = *db_len - off < sizeof(buf) ? (size_t)(*db_len - off) : sizeof(buf);
            ssize_t n = pread(fd, buf, want, (off_t)off);
            if (n <= 0) {
                snprintf(err, errlen, "reading %s: %s", path, n < 0 ? strerror(errno) : "EOF");
                close(fd);
                return -EIO;
            }
            sha256_update(&c, buf, (size_t)n);
            off += (uint64_t)n;
            progress_show(&p, off);
        }
        uint8_t got[DIGEST], want_d[DIGEST];
        sha256_final(&c, got);
        if (pread(fd, want_d, DIGEST, (off_t)*db_len) != DIGEST ||
            memcmp(got, want_d, DIGEST) != 0) {
            char a[2 * DIGEST + 1], b[2 * DIGEST + 1];
            for (int i = 0; i < DIGEST; i++) {
                sprintf(a + 2 * i, "%02x", want_d[i]);
                sprintf(b + 2 * i, "%02x", got[i]);
            }
            snprintf(err, errlen,
                     "snapshot file integrity check failed: expected sha256 %s, got %s", a, b);
            close(fd);
            return QERR_CORRUPT;
        }
    }
    *fd_out = fd;
    return 0;
}

/* copy_db writes |len| bytes of |fd| to |dst| (new), synced. */
static int copy_db(int fd, uint64_t len, const char *dst, char *err, size_t errlen)
{
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        snprintf(err, errlen, "cannot create %s: %s", dst, strerror(errno));
        return -errno;
    }
    static uint8_t buf[1 << 20];
    struct progress p = {.on = isatty(2), .what = "restoring", .total = len};
    uint64_t off = 0;
    int rv = 0;
    while (off < len && rv == 0) {
        size_t want = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n <= 0 || write(out, buf, (size_t)n) != n) {
            snprintf(err, errlen, "copying into %s: %s", dst, strerror(errno ? errno : EIO));
            rv = -EIO;
            break;
        }
        off += (uint64_t)n;
        progress_show(&p, off);
    }
    if (rv == 0 && fsync(out) != 0)
        rv = -errno;
    close(out);
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
        snprintf(err, errlen, "not a quorum database: %s", q_strerror(rv));
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

static int count_keys(const struct mvcc_kv *kv, void *arg)
{
    (void)kv;
    (*(uint64_t *)arg)++;
    return 0;
}

int cmd_snapshot_status(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "Error: snapshot filename is not given\n");
        return 1;
    }
    char err[600] = "", tmp[] = "/tmp/quorumctl-status-XXXXXX";
    int fd = -1;
    uint64_t len = 0;
    if (check_file(argv[0], false, &fd, &len, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        return 1;
    }
    if (mkdtemp(tmp) == NULL) {
        fprintf(stderr, "Error: %s\n", strerror(errno));
        close(fd);
        return 1;
    }
    char db[1100];
    snprintf(db, sizeof(db), "%s/data.mdb", tmp);
    int ret = 1;
    backend *be = NULL;
    mvcc_store *kv = NULL;
    if (copy_db(fd, len, db, err, sizeof(err)) == 0 &&
        open_store(tmp, &be, &kv, err, sizeof(err)) == 0) {
        uint32_t hash = 0;
        int64_t compact = 0, rev = mvcc_rev(kv);
        uint64_t keys = 0;
        mvcc_read *rd = NULL;
        struct mvcc_range_opts o = {0};
        struct mvcc_range_result res;
        if (mvcc_hash_kv(kv, 0, &hash, &compact) == 0 && mvcc_read_begin(kv, &rd) == 0 &&
            mvcc_read_range(rd, (const uint8_t *)"", 0, (const uint8_t *)"", 1, &o, count_keys,
                            &keys, &res) == 0) {
            ctl_print_snapshot_status(ctl, hash, rev, keys, len);
            ret = 0;
        } else {
            snprintf(err, sizeof(err), "cannot read the database");
        }
        if (rd)
            mvcc_read_end(rd);
    }
    if (ret != 0)
        fprintf(stderr, "Error: %s\n", err);
    if (kv)
        mvcc_close(kv);
    if (be)
        backend_close(be);
    close(fd);
    unlink(db);
    char lock[1200];
    snprintf(lock, sizeof(lock), "%s-lock", db);
    unlink(lock);
    rmdir(tmp);
    return ret;
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
        snprintf(dir, sizeof(dir), "%s.quorum", name);
        data_dir = dir;
    }
    struct stat st;
    if (stat(data_dir, &st) == 0) {
        fprintf(stderr, "Error: data-dir \"%s\" exists\n", data_dir);
        return 1;
    }
    char err[600] = "";
    int fd = -1;
    uint64_t len = 0;
    if (check_file(file, !skip_hash, &fd, &len, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        return 1;
    }
    char dbdir[1100], db[1200];
    snprintf(dbdir, sizeof(dbdir), "%s/member/db", data_dir);
    snprintf(db, sizeof(db), "%s/data.mdb", dbdir);
    int rv = fs_mkdir_p(dbdir);
    if (rv != 0)
        snprintf(err, sizeof(err), "cannot create %.400s: %s", dbdir, strerror(-rv));
    backend *be = NULL;
    mvcc_store *kv = NULL;
    if (rv == 0)
        rv = copy_db(fd, len, db, err, sizeof(err));
    close(fd);
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
    if (rv != 0) {
        fprintf(stderr, "Error: %s\n", err);
        return 1;
    }
    (void)ctl;
    printf("restored snapshot at revision %lld into %s\n", (long long)rev, data_dir);
    printf("start the member with --data-dir %s --initial-cluster-state new and the cluster's "
           "--initial-cluster and --initial-cluster-token\n",
           data_dir);
    return 0;
}
