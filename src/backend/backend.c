/* backend/backend.c: the LMDB environment under quorum's state.
 *
 * One environment, opened with MDB_NOSUBDIR on <dir>/data.mdb (the lock
 * file is <dir>/data.mdb-lock), MDB_NOTLS so read transactions are not tied
 * to threads, and one named database per enum backend_db. Writes go through
 * a single long write transaction (the batch) that the loop commits once
 * per pass, so many requests share one sync. */
#include "backend/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/metrics.h"

#define DEFAULT_MAP_SIZE ((size_t)8 << 30)

struct backend {
    MDB_env *env;
    MDB_dbi dbi[BACKEND_DB__COUNT];
    MDB_txn *batch;
    char *path; /* <dir>/data.mdb */
    size_t map_size;
    unsigned flags; /* as given to mdb_env_open, for backend_replace_file */
    int retired_fd; /* the replaced file, kept open (backend_take_retired) */
    struct backend_defrag *defrag; /* recording writes for it, or NULL */
    size_t mark;                   /* defrag->log.len when the batch began */
    uint64_t reserved_to;          /* backend_reserve: blocks allocated up to here */
    uint64_t reserved_ino;         /* ... in the file of this inode (a defrag swaps it) */
    bool no_reserve;               /* the file system has no FALLOC_FL_KEEP_SIZE */
    uint64_t changes;              /* commits and file swaps so far, from 1 (backend_changes) */
    int failed;                    /* a commit or sync failed (its error): the file may not hold
                                      what LMDB believes it wrote, so no write is tried again
                                      (a failed fdatasync is never retried: its dirty pages may
                                      be gone); backend_close and a reopen are the way back */
};

/* An online defragmentation (see backend.h). Its write log is records of
 * u8 db, u8 op (0 put, 1 delete), u32 key length, u32 value length (host
 * order: it never leaves the process), key, value. */
struct backend_defrag {
    backend *be;    /* NULL once stale */
    char *path;     /* the copy */
    MDB_txn *rt;    /* the snapshot being copied; NULL once copied */
    MDB_dbi from[BACKEND_DB__COUNT]; /* its databases */
    size_t map_size;
    bool copied;    /* backend_defrag_copy succeeded */
    struct buf log; /* recorded since the last take (loop thread) */
    struct buf out; /* taken, for backend_defrag_replay */
};

/* Names as etcd's bbolt buckets, so `mdb_stat -a` reads like `bbolt buckets`. */
static const char *const db_names[BACKEND_DB__COUNT] = {
    [BACKEND_DB_KEY] = "key",   [BACKEND_DB_META] = "meta",       [BACKEND_DB_LEASE] = "lease",
    [BACKEND_DB_AUTH] = "auth", [BACKEND_DB_MEMBERS] = "members",
    [BACKEND_DB_AUTH_USERS] = "authUsers", [BACKEND_DB_AUTH_ROLES] = "authRoles",
};

/* The last LMDB code backend_err mapped to a quorum error, per thread. */
static _Thread_local int last_rc;

int backend_err(int rc)
{
    if (rc == 0)
        return 0;
    last_rc = rc;
    if (rc == MDB_MAP_FULL)
        return QERR_NO_SPACE;
    if (rc > 0) /* a system error (LMDB's own codes are negative): keep the
                 * cause, so a full or failing disk (-ENOSPC, -EIO from a
                 * commit's write or fdatasync) is logged as what it is */
        return -rc;
    return QERR_STORAGE;
}

int backend_last_rc(void)
{
    return last_rc;
}

/* mkdir -p: the data directory may be several levels deep. */
static int mkdirs(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -errno;
        tmp[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return 0;
}

/* env_err maps what mdb_env_create/open answer: an errno (positive) as
 * -errno, an LMDB code as QERR_STORAGE. */
static int env_err(int rc)
{
    return rc == 0 ? 0 : rc > 0 ? -rc : QERR_STORAGE;
}

/* env_open opens an environment on the file |path| (MDB_NOSUBDIR | flags,
 * created with |mode|) with room for every named database; |map_size| 0
 * keeps LMDB's (a read-only open maps the whole file anyway). On error
 * *out is NULL and LMDB's or errno's code is returned. */
static int env_open(const char *path, size_t map_size, unsigned flags, mdb_mode_t mode,
                    MDB_env **out)
{
    MDB_env *env = NULL;
    int rc = mdb_env_create(&env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(env, BACKEND_DB__COUNT);
    if (rc == 0 && map_size != 0)
        rc = mdb_env_set_mapsize(env, map_size);
    if (rc == 0)
        rc = mdb_env_open(env, path, MDB_NOSUBDIR | flags, mode);
    if (rc != 0 && env != NULL) {
        mdb_env_close(env);
        env = NULL;
    }
    *out = env;
    return rc;
}

/* open_env opens be->env on be->path and its named databases (in enum
 * order, so the dbi handles are the same on every open). On error be->env
 * is NULL. */
static int open_env(backend *be)
{
    int rv;
    int rc = env_open(be->path, be->map_size, be->flags, 0600, &be->env);
    if (rc != 0) {
        log_error("backend", "cannot open %s: %s", be->path, mdb_strerror(rc));
        return env_err(rc);
    }
    MDB_txn *txn;
    rc = mdb_txn_begin(be->env, NULL, 0, &txn);
    for (int i = 0; rc == 0 && i < BACKEND_DB__COUNT; i++)
        rc = mdb_dbi_open(txn, db_names[i], MDB_CREATE, &be->dbi[i]);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc != 0) {
        log_error("backend", "cannot open databases in %s: %s", be->path, mdb_strerror(rc));
        rv = backend_err(rc);
        goto err_env;
    }
    return 0;

err_env:
    mdb_env_close(be->env);
    be->env = NULL;
    return rv;
}

int backend_replace_file(backend *be, const char *path)
{
    if (be->batch != NULL)
        return -EBUSY;
    if (be->defrag != NULL) { /* its copy is of the file going away */
        be->defrag->be = NULL;
        be->defrag = NULL;
    }
    MDB_dbi old[BACKEND_DB__COUNT];
    memcpy(old, be->dbi, sizeof(old));
    /* The old file's last link goes with the rename; freeing its blocks
     * would make the rename take time in proportion to its size (about 30
     * ms per 100 MB on ext4). An open descriptor keeps the inode, and its
     * last close, wherever the caller puts it, frees the blocks. */
    int keep = open(be->path, O_RDONLY | O_CLOEXEC);
    mdb_env_close(be->env);
    be->env = NULL;
    be->changes++;
    int rv = 0;
    if (rename(path, be->path) != 0) {
        rv = -errno;
        log_error("backend", "cannot rename %s to %s: %s", path, be->path, strerror(errno));
        if (keep >= 0)
            close(keep);
    } else {
        if (be->retired_fd >= 0)
            close(be->retired_fd);
        be->retired_fd = keep;
        /* the rename is durable once the directory is */
        char *dir = strdup(be->path);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash != NULL) {
            *slash = '\0';
            int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd >= 0) {
                fsync(fd);
                close(fd);
            }
        }
        free(dir);
    }
    /* reopen whichever file is at be->path now */
    int orv = open_env(be);
    if (orv != 0) {
        log_error("backend", "cannot reopen %s: %s", be->path, q_strerror(orv));
        return orv;
    }
    if (memcmp(old, be->dbi, sizeof(old)) != 0) {
        log_error("backend", "database handles changed on reopening %s", be->path);
        return QERR_STORAGE;
    }
    return rv;
}

int backend_open(const struct backend_options *opts, backend **out)
{
    *out = NULL;
    if (opts == NULL || opts->dir == NULL)
        return -EINVAL;
    int rv = mkdirs(opts->dir);
    if (rv != 0)
        return rv;
    backend *be = calloc(1, sizeof(*be));
    if (be == NULL)
        return -ENOMEM;
    if (asprintf(&be->path, "%s/data.mdb", opts->dir) < 0) {
        be->path = NULL;
        rv = -ENOMEM;
        goto err_free;
    }
    be->map_size = opts->map_size ? opts->map_size : DEFAULT_MAP_SIZE;
    be->retired_fd = -1;
    be->changes = 1;
    be->flags = MDB_NOTLS | (opts->no_sync ? MDB_NOSYNC : 0) |
                (opts->no_meta_sync ? MDB_NOMETASYNC : 0);
    rv = open_env(be);
    if (rv != 0)
        goto err_free;
    *out = be;
    return 0;

err_free:
    free(be->path);
    free(be);
    return rv;
}

void backend_close(backend *be)
{
    if (be == NULL)
        return;
    if (be->batch != NULL)
        mdb_txn_abort(be->batch);
    if (be->defrag != NULL)
        be->defrag->be = NULL;
    if (be->retired_fd >= 0)
        close(be->retired_fd);
    mdb_env_close(be->env);
    free(be->path);
    free(be);
}

MDB_env *backend_env(backend *be)
{
    return be->env;
}

MDB_dbi backend_dbi(backend *be, enum backend_db db)
{
    return be->dbi[db];
}

int backend_batch_begin(backend *be)
{
    if (be->batch != NULL)
        return -EBUSY;
    if (be->failed != 0)
        return be->failed;
    int rc = mdb_txn_begin(be->env, NULL, 0, &be->batch);
    if (rc != 0) {
        be->batch = NULL;
        log_error("backend", "batch begin: %s", mdb_strerror(rc));
        return backend_err(rc);
    }
    if (be->defrag != NULL)
        be->mark = be->defrag->log.len;
    return 0;
}

MDB_txn *backend_batch_txn(backend *be)
{
    return be->batch;
}

static struct metrics_series *commit_seconds;

void backend_metrics_register(void)
{
    double b[14];
    commit_seconds = metrics_histogram("etcd_disk_backend_commit_duration_seconds",
                                       "The latency distributions of commit called by backend.",
                                       metrics_exp_buckets(0.001, 2, 14, b), 14);
}

int backend_batch_commit(backend *be)
{
    if (be->batch == NULL)
        return -EINVAL;
    uint64_t t0 = metrics_now_ns();
    int rc = mdb_txn_commit(be->batch); /* frees the txn even on failure */
    be->batch = NULL;
    be->changes++;
    if (rc != 0) {
        log_error("backend", "batch commit: %s", mdb_strerror(rc));
        int rv = backend_err(rc);
        if (rc > 0) /* the disk's error, not LMDB's (a full map is not final) */
            be->failed = rv;
        return rv;
    }
    metrics_observe_since(commit_seconds, t0);
    return 0;
}

void backend_batch_abort(backend *be)
{
    if (be->batch == NULL)
        return;
    mdb_txn_abort(be->batch);
    be->batch = NULL;
    if (be->defrag != NULL && be->defrag->log.len > be->mark)
        be->defrag->log.len = be->mark; /* those writes never happened */
}

int backend_read_begin(backend *be, MDB_txn **out)
{
    int rc = mdb_txn_begin(be->env, NULL, MDB_RDONLY, out);
    if (rc != 0) {
        *out = NULL;
        log_error("backend", "read begin: %s", mdb_strerror(rc));
        return rc == ENOMEM ? -ENOMEM : QERR_STORAGE;
    }
    return 0;
}

void backend_read_end(MDB_txn *txn)
{
    if (txn != NULL)
        mdb_txn_abort(txn);
}

/* meta_read reads meta value |name| through |txn| from database |dbi|. */
static int meta_read(MDB_txn *txn, MDB_dbi dbi, const char *name, uint64_t *v)
{
    MDB_val k = {strlen(name), (void *)name}, d;
    int rc = mdb_get(txn, dbi, &k, &d);
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (rc != 0)
        return backend_err(rc);
    if (d.mv_size != 8)
        return QERR_CORRUPT;
    const uint8_t *p = d.mv_data;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | p[i];
    *v = x;
    return 0;
}

int backend_meta_get(backend *be, MDB_txn *txn, const char *name, uint64_t *v)
{
    MDB_txn *own = NULL;
    if (txn == NULL)
        txn = be->batch;
    if (txn == NULL) {
        int rv = backend_read_begin(be, &own);
        if (rv != 0)
            return rv;
        txn = own;
    }
    int rv = meta_read(txn, be->dbi[BACKEND_DB_META], name, v);
    backend_read_end(own);
    return rv;
}

int backend_file_meta(const char *path, const char *name, uint64_t *v)
{
    MDB_env *env;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    int rc = env_open(path, 0, MDB_RDONLY | MDB_NOLOCK, 0, &env);
    if (rc != 0)
        return env_err(rc);
    rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc == 0)
        rc = mdb_dbi_open(txn, db_names[BACKEND_DB_META], 0, &dbi);
    int rv = rc == 0 ? meta_read(txn, dbi, name, v) : rc == MDB_NOTFOUND ? -ENOENT : env_err(rc);
    if (txn != NULL)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    return rv;
}

int backend_meta_put(backend *be, const char *name, uint64_t v)
{
    if (be->batch == NULL)
        return -EBUSY;
    uint8_t b[8];
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
    MDB_val k = {strlen(name), (void *)name}, d = {8, b};
    return backend_err(backend_put(be, be->batch, BACKEND_DB_META, &k, &d, 0));
}

uint64_t backend_changes(const backend *be)
{
    return be->changes;
}

uint64_t backend_size(backend *be)
{
    struct stat st;
    if (stat(be->path, &st) != 0)
        return 0;
    return (uint64_t)st.st_size;
}

/* Pages up to the high-water mark minus the pages on LMDB's freelist (the
 * FREE_DBI, handle 0, read as mdb_stat -f does): what bbolt calls size
 * minus free pages. */
uint64_t backend_size_in_use(backend *be)
{
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(be->env, &info) != 0 || mdb_env_stat(be->env, &st) != 0)
        return 0;
    uint64_t pages = (uint64_t)info.me_last_pgno + 1;
    MDB_txn *txn;
    if (backend_read_begin(be, &txn) != 0)
        return pages * st.ms_psize;
    /* The read txn sees the last committed state; take its high-water mark
     * rather than the env info above, which may be newer. */
    mdb_env_info(be->env, &info);
    pages = (uint64_t)info.me_last_pgno + 1;
    MDB_cursor *cur;
    uint64_t free_pages = 0;
    if (mdb_cursor_open(txn, 0, &cur) == 0) {
        MDB_val k, d;
        while (mdb_cursor_get(cur, &k, &d, MDB_NEXT) == 0) {
            size_t cnt;
            if (d.mv_size < sizeof(cnt))
                continue;
            memcpy(&cnt, d.mv_data, sizeof(cnt));
            free_pages += cnt;
        }
        mdb_cursor_close(cur);
    }
    backend_read_end(txn);
    if (free_pages > pages)
        free_pages = pages;
    return (pages - free_pages) * st.ms_psize;
}

int backend_reserve(backend *be, uint64_t bytes)
{
    if (be->env == NULL || be->no_reserve || bytes == 0)
        return 0;
    int fd;
    struct stat st;
    if (mdb_env_get_fd(be->env, &fd) != 0 || fstat(fd, &st) != 0)
        return 0;
    if (be->reserved_ino == 0) {
        struct statfs fs;
        if (fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
            be->no_reserve = true; /* blocks there are memory: none held back */
            log_info("backend", "no space reserve for %s: a tmpfs", be->path);
            return 0;
        }
    }
    uint64_t end = (uint64_t)st.st_size;
    if (be->reserved_to >= end + bytes / 2 && be->reserved_ino == st.st_ino)
        return 0; /* still at least half the reserve ahead of the file's end */
    /* blocks past the end, the size unchanged: the quota and Status see
     * the same file size, and LMDB's page writes there need no allocation */
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)end, (off_t)bytes) != 0) {
        int e = errno;
        if (e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
            be->no_reserve = true; /* this file system cannot: no reserve */
            log_info("backend", "no space reserve for %s: %s", be->path, strerror(e));
            return 0;
        }
        return -e;
    }
    be->reserved_to = end + bytes;
    be->reserved_ino = st.st_ino;
    return 0;
}

int backend_sync(backend *be)
{
    if (be->failed != 0)
        return be->failed;
    int rc = mdb_env_sync(be->env, 1);
    int rv = backend_err(rc);
    if (rc > 0)
        be->failed = rv;
    return rv;
}

/* ---- writes ---- */

/* record appends one write to the defragmentation's log. A record that
 * cannot be kept makes the copy unusable: the job goes stale. */
static void record(backend *be, enum backend_db db, int op, const MDB_val *k, const MDB_val *v)
{
    struct backend_defrag *job = be->defrag;
    uint32_t kl = (uint32_t)k->mv_size, vl = v ? (uint32_t)v->mv_size : 0;
    uint8_t h[10] = {(uint8_t)db, (uint8_t)op};
    memcpy(h + 2, &kl, 4);
    memcpy(h + 6, &vl, 4);
    if (buf_reserve(&job->log, sizeof(h) + kl + vl) != 0) {
        log_error("backend", "defragment: out of memory recording writes; giving up the copy");
        job->be = NULL;
        be->defrag = NULL;
        return;
    }
    buf_append(&job->log, h, sizeof(h));
    buf_append(&job->log, k->mv_data, kl);
    if (vl)
        buf_append(&job->log, v->mv_data, vl);
}

int backend_put(backend *be, MDB_txn *txn, enum backend_db db, MDB_val *k, MDB_val *v,
                unsigned flags)
{
    int rc = mdb_put(txn, be->dbi[db], k, v, flags);
    if (rc == 0 && be->defrag != NULL)
        record(be, db, 0, k, v);
    return rc;
}

int backend_del(backend *be, MDB_txn *txn, enum backend_db db, MDB_val *k)
{
    int rc = mdb_del(txn, be->dbi[db], k, NULL);
    if (rc == 0 && be->defrag != NULL)
        record(be, db, 1, k, NULL);
    return rc;
}

int backend_cursor_del(backend *be, MDB_cursor *mc, enum backend_db db)
{
    MDB_val k = {0, NULL}, v;
    if (be->defrag != NULL) {
        int rc = mdb_cursor_get(mc, &k, &v, MDB_GET_CURRENT);
        if (rc != 0)
            return rc;
        /* the key lives in the page the delete changes: keep a copy */
        size_t at = be->defrag->log.len;
        record(be, db, 1, &k, NULL);
        rc = mdb_cursor_del(mc, 0);
        if (rc != 0 && be->defrag != NULL)
            be->defrag->log.len = at;
        return rc;
    }
    return mdb_cursor_del(mc, 0);
}

/* ---- copies ---- */

static void unlink_copy(const char *path, bool with_data)
{
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof(lock), "%s-lock", path);
    unlink(lock);
    if (with_data)
        unlink(path);
}

/* open_copy opens the environment of a copy at |path| (unsynced writes:
 * the copy is synced once, when written). */
static int open_copy(const char *path, size_t map_size, MDB_env **out)
{
    return env_open(path, map_size, MDB_NOTLS | MDB_NOSYNC, 0644, out);
}

/* commit_synced ends a copy's write txn: commits it and syncs the copy if
 * |rc| (the writes' result) is 0, else aborts it. Returns LMDB's code. */
static int commit_synced(MDB_txn *wt, MDB_env *dst, int rc)
{
    if (rc != 0) {
        mdb_txn_abort(wt);
        return rc;
    }
    rc = mdb_txn_commit(wt);
    if (rc == 0)
        rc = mdb_env_sync(dst, 1);
    return rc;
}

/* A copy is committed and synced every this many bytes: a copy written in
 * one transaction left a gigabyte of dirty pages for the kernel to write
 * at the end, and every fdatasync of the live database meanwhile (one per
 * batch commit, on the loop) waited behind it on the filesystem's journal
 * (300 ms and more, seen with ext4). Small synced pieces keep that wait
 * short. */
#define COPY_SYNC_BYTES (8u << 20)

/* rewrite copies every database of the snapshot |rt| into |dst| record by
 * record in key order (appending fills every page), and syncs it. */
static int rewrite(MDB_txn *rt, const MDB_dbi *from, MDB_env *dst)
{
    MDB_txn *wt;
    int rc = mdb_txn_begin(dst, NULL, 0, &wt);
    if (rc != 0)
        return rc;
    size_t pending = 0;
    for (int i = 0; i < BACKEND_DB__COUNT && rc == 0; i++) {
        MDB_dbi to;
        MDB_cursor *cur = NULL;
        rc = mdb_dbi_open(wt, db_names[i], MDB_CREATE, &to);
        if (rc == 0)
            rc = mdb_cursor_open(rt, from[i], &cur);
        MDB_val k, v;
        int g = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : rc;
        for (; g == 0 && rc == 0; g = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            rc = mdb_put(wt, to, &k, &v, MDB_APPEND);
            pending += k.mv_size + v.mv_size + 16;
            if (rc == 0 && pending >= COPY_SYNC_BYTES) {
                /* the handle |to| stays valid in the next txn */
                pending = 0;
                rc = commit_synced(wt, dst, 0);
                wt = NULL;
                if (rc == 0)
                    rc = mdb_txn_begin(dst, NULL, 0, &wt);
            }
        }
        if (rc == 0 && g != MDB_NOTFOUND)
            rc = g;
        if (cur != NULL)
            mdb_cursor_close(cur);
    }
    if (wt == NULL)
        return rc;
    return commit_synced(wt, dst, rc);
}

int backend_rewrite_copy(backend *be, const char *path)
{
    MDB_env *dst;
    MDB_txn *rt = NULL;
    int rc = open_copy(path, be->map_size, &dst);
    if (rc == 0)
        rc = mdb_txn_begin(be->env, NULL, MDB_RDONLY, &rt);
    if (rc == 0)
        rc = rewrite(rt, be->dbi, dst);
    if (rt != NULL)
        mdb_txn_abort(rt);
    if (dst != NULL)
        mdb_env_close(dst);
    unlink_copy(path, rc != 0);
    return backend_err(rc);
}

/* ---- online defragmentation ---- */

int backend_defrag_begin(backend *be, const char *path, backend_defrag **out)
{
    *out = NULL;
    if (be->defrag != NULL || be->batch != NULL)
        return -EBUSY;
    struct backend_defrag *job = calloc(1, sizeof(*job));
    if (job == NULL || (job->path = strdup(path)) == NULL) {
        free(job);
        return -ENOMEM;
    }
    int rc = mdb_txn_begin(be->env, NULL, MDB_RDONLY, &job->rt);
    if (rc != 0) {
        free(job->path);
        free(job);
        return backend_err(rc);
    }
    unlink_copy(path, true); /* a leftover of an earlier attempt */
    memcpy(job->from, be->dbi, sizeof(job->from));
    job->map_size = be->map_size;
    job->be = be;
    be->defrag = job;
    *out = job;
    return 0;
}

int backend_defrag_copy(backend_defrag *job)
{
    MDB_env *dst;
    int rc = open_copy(job->path, job->map_size, &dst);
    if (rc == 0) {
        rc = rewrite(job->rt, job->from, dst);
        mdb_env_close(dst); /* unmapping a large file takes a while: here */
    }
    mdb_txn_abort(job->rt);
    job->rt = NULL;
    job->copied = rc == 0;
    return backend_err(rc);
}

size_t backend_defrag_pending(const backend_defrag *job)
{
    return job->log.len;
}

void backend_defrag_take(backend_defrag *job)
{
    if (job->out.len == 0) {
        struct buf t = job->out;
        job->out = job->log;
        job->log = t;
    } else if (buf_append(&job->out, job->log.data, job->log.len) != 0) {
        return; /* stays in the log, for the next take or finish */
    }
    buf_reset(&job->log);
}

/* apply writes the log |b| into the copy (one write txn) and syncs it. */
static int apply(backend_defrag *job, const struct buf *b)
{
    if (!job->copied)
        return QERR_STORAGE;
    if (b->len == 0)
        return 0;
    MDB_env *dst;
    MDB_txn *wt;
    MDB_dbi to[BACKEND_DB__COUNT];
    int rc = open_copy(job->path, job->map_size, &dst);
    if (rc != 0)
        return backend_err(rc);
    rc = mdb_txn_begin(dst, NULL, 0, &wt);
    if (rc != 0) {
        mdb_env_close(dst);
        return backend_err(rc);
    }
    for (int i = 0; i < BACKEND_DB__COUNT && rc == 0; i++)
        rc = mdb_dbi_open(wt, db_names[i], 0, &to[i]);
    for (size_t at = 0; at < b->len && rc == 0;) {
        const uint8_t *h = b->data + at;
        uint32_t kl, vl;
        memcpy(&kl, h + 2, 4);
        memcpy(&vl, h + 6, 4);
        MDB_val k = {kl, (void *)(h + 10)}, v = {vl, (void *)(h + 10 + kl)};
        if (h[1] == 0) {
            rc = mdb_put(wt, to[h[0]], &k, &v, 0);
        } else {
            rc = mdb_del(wt, to[h[0]], &k, NULL);
            if (rc == MDB_NOTFOUND)
                rc = 0;
        }
        at += 10 + (size_t)kl + vl;
    }
    rc = commit_synced(wt, dst, rc);
    mdb_env_close(dst);
    return backend_err(rc);
}

int backend_defrag_replay(backend_defrag *job)
{
    int rv = apply(job, &job->out);
    buf_reset(&job->out);
    return rv;
}

bool backend_defrag_stale(const backend_defrag *job)
{
    return job->be == NULL;
}

void backend_defrag_cancel(backend_defrag *job)
{
    if (job == NULL)
        return;
    if (job->be != NULL)
        job->be->defrag = NULL;
    if (job->rt != NULL)
        mdb_txn_abort(job->rt);
    unlink_copy(job->path, true);
    buf_free(&job->log);
    buf_free(&job->out);
    free(job->path);
    free(job);
}

int backend_defrag_finish(backend_defrag *job)
{
    backend *be = job->be;
    if (be == NULL) {
        backend_defrag_cancel(job);
        return QERR_STORAGE;
    }
    if (be->batch != NULL)
        return -EBUSY;
    int rv = apply(job, &job->out);
    if (rv == 0)
        rv = apply(job, &job->log);
    if (rv != 0) {
        backend_defrag_cancel(job);
        return rv;
    }
    be->defrag = NULL;
    job->be = NULL;
    unlink_copy(job->path, false);
    rv = backend_replace_file(be, job->path);
    backend_defrag_cancel(job); /* frees it; the copy is data.mdb now (or removed on error) */
    return rv;
}

int backend_take_retired(backend *be)
{
    int fd = be->retired_fd;
    be->retired_fd = -1;
    return fd;
}
