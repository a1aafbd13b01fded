/* wal/snap.c: Raft snapshots as files, <data-dir>/member/snap/<term>-<index>.snap,
 * written atomically (temp file, fsync, rename, directory fsync) and checked
 * by a CRC-32C on load, like etcd's snap package. Format in wal.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/fs.h"
#include "base/err.h"
#include "base/log.h"
#include "wal/wal.h"
#include "wal/wal_int.h"

#define SNAP_MAGIC 0x504e5351u
#define SNAP_VERSION 1u
#define SNAP_FIXED 32 /* magic, version, term, index, n_voters, n_learners */

static void snap_dir(char *out, size_t n, const char *data_dir)
{
    wal__fmt(out, n, "%s/member/snap", data_dir);
}

static void snap_path(char *out, size_t n, const char *data_dir, uint64_t term, uint64_t index)
{
    wal__fmt(out, n, "%s/member/snap/%016" PRIx64 "-%016" PRIx64 ".snap", data_dir, term, index);
}

int wal_snap_save(const char *data_dir, const struct raft_snapshot *snap)
{
    const struct raft_membership *m = &snap->conf;
    if (m->n_voters > RAFT_MAX_MEMBERS || m->n_learners > RAFT_MAX_MEMBERS)
        return -EINVAL;
    size_t n_ids = m->n_voters + m->n_learners;
    size_t head_len = SNAP_FIXED + 8 * n_ids + 8;
    uint8_t *head = malloc(head_len);
    if (head == NULL)
        return -ENOMEM;
    put32(head, SNAP_MAGIC);
    put32(head + 4, SNAP_VERSION);
    put64(head + 8, snap->term);
    put64(head + 16, snap->index);
    put32(head + 24, m->n_voters);
    put32(head + 28, m->n_learners);
    uint8_t *p = head + SNAP_FIXED;
    for (uint32_t i = 0; i < m->n_voters; i++, p += 8)
        put64(p, m->voters[i]);
    for (uint32_t i = 0; i < m->n_learners; i++, p += 8)
        put64(p, m->learners[i]);
    put64(p, snap->len);
    uint8_t crc[4];
    put32(crc, crc32c_update(crc32c_update(0, head, head_len), snap->data, snap->len));

    char dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 8];
    snap_dir(dir, sizeof(dir), data_dir);
    snap_path(path, sizeof(path), data_dir, snap->term, snap->index);
    wal__fmt(tmp, sizeof(tmp), "%s.tmp", path);
    char member[PATH_MAX];
    wal__fmt(member, sizeof(member), "%s/member", data_dir);
    int rv = fs_mkdir_p(dir);
    /* member/snap may be new: make its entry durable too. */
    if (rv != 0 || (rv = wal__fsync_dir(member)) != 0)
        goto out;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
        goto out;
    }
    if ((rv = wal__write_all(fd, head, head_len, 0)) == 0 &&
        (rv = wal__write_all(fd, snap->data, snap->len, head_len)) == 0 &&
        (rv = wal__write_all(fd, crc, 4, head_len + snap->len)) == 0 && fsync(fd) != 0)
        rv = -errno;
    close(fd);
    if (rv == 0 && rename(tmp, path) != 0)
        rv = -errno;
    if (rv != 0)
        unlink(tmp);
    else
        rv = wal__fsync_dir(dir);
out:
    free(head);
    return rv;
}

int wal_snap_load(const char *data_dir, uint64_t term, uint64_t index, struct raft_snapshot *out)
{
    char path[PATH_MAX];
    snap_path(path, sizeof(path), data_dir, term, index);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    uint8_t *buf = NULL;
    int rv = 0;
    if (fstat(fd, &sb) != 0) {
        rv = -errno;
        goto out;
    }
    size_t size = (size_t)sb.st_size;
    if (size < SNAP_FIXED + 12) {
        rv = QERR_CORRUPT;
        goto out;
    }
    if ((buf = malloc(size)) == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t got = 0; got < size;) {
        ssize_t k = pread(fd, buf + got, size - got, (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rv = k < 0 ? -errno : QERR_CORRUPT;
            goto out;
        }
        got += (size_t)k;
    }
    if (get32(buf) != SNAP_MAGIC || get32(buf + 4) != SNAP_VERSION ||
        get32(buf + size - 4) != crc32c_update(0, buf, size - 4)) {
        rv = QERR_CORRUPT;
        goto out;
    }
    memset(out, 0, sizeof(*out));
    out->term = get64(buf + 8);
    out->index = get64(buf + 16);
    uint32_t nv = get32(buf + 24), nl = get32(buf + 28);
    size_t ids_end = SNAP_FIXED + 8 * (size_t)(nv + nl);
    if (nv > RAFT_MAX_MEMBERS || nl > RAFT_MAX_MEMBERS || ids_end + 12 > size ||
        get64(buf + ids_end) != size - ids_end - 12 || out->term != term || out->index != index) {
        rv = QERR_CORRUPT;
        goto out;
    }
    out->conf.n_voters = nv;
    out->conf.n_learners = nl;
    for (uint32_t i = 0; i < nv; i++)
        out->conf.voters[i] = get64(buf + SNAP_FIXED + 8 * i);
    for (uint32_t i = 0; i < nl; i++)
        out->conf.learners[i] = get64(buf + SNAP_FIXED + 8 * (nv + i));
    out->len = size - ids_end - 12;
    /* Hand out the data where it already is: move it to the front. */
    memmove(buf, buf + ids_end + 8, out->len);
    out->data = buf;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rv;
}

struct snap_name {
    uint64_t index;
    char name[64];
};

static int snap_name_cmp(const void *a, const void *b)
{
    const struct snap_name *x = a, *y = b;
    return x->index < y->index ? 1 : x->index > y->index ? -1 : 0;
}

int wal_snap_purge(const char *data_dir, size_t keep)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snap_dir(dir, sizeof(dir), data_dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    struct snap_name *v = NULL;
    size_t n = 0;
    int rv = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        uint64_t term, index;
        if (len > 4 && len < 64 && strcmp(de->d_name + len - 4, ".tmp") == 0) {
            wal__fmt(path, sizeof(path), "%s/%s", dir, de->d_name);
            unlink(path);
            continue;
        }
        if (len != 38 || sscanf(de->d_name, "%16" SCNx64 "-%16" SCNx64, &term, &index) != 2 ||
            strcmp(de->d_name + 33, ".snap") != 0)
            continue;
        void *nv = realloc(v, (n + 1) * sizeof(*v));
        if (nv == NULL) {
            rv = -ENOMEM;
            break;
        }
        v = nv;
        v[n].index = index;
        memcpy(v[n].name, de->d_name, len + 1);
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(v, n, sizeof(*v), snap_name_cmp);
    if (keep == 0)
        keep = n; /* unlimited */
    for (size_t i = keep; rv == 0 && i < n; i++) {
        wal__fmt(path, sizeof(path), "%s/%s", dir, v[i].name);
        if (unlink(path) != 0 && errno != ENOENT)
            rv = -errno;
        else
            log_info("wal", "purged file %s successfully", path); /* etcd's fileutil line */
    }
    free(v);
    if (rv == 0 && n > keep)
        rv = wal__fsync_dir(dir);
    return rv;
}
