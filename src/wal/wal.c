/* wal/wal.c: segments of CRC'd records holding Raft entries, hard states and
 * snapshot markers; appending with one write() per save and one fdatasync
 * per sync; replay at open with the repair of a torn tail and the refusal of
 * corruption in the middle. The format and the recovery rule are in wal.h. */
#include "wal/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/crc32c.h"
#include "base/fs.h"
#include "base/err.h"
#include "base/metrics.h"
#include "base/log.h"
#include "wal/wal_int.h"
#include "base/text.h"

static struct metrics_series *fsync_seconds;
static metric_t write_bytes;

void wal_metrics_register(void)
{
    double b[14];
    fsync_seconds = metrics_histogram("etcd_disk_wal_fsync_duration_seconds",
                                      "The latency distributions of fsync called by WAL.",
                                      metrics_exp_buckets(0.001, 2, 14, b), 14);
    /* a gauge in etcd 3.4, for all its name */
    write_bytes = metrics_gauge("etcd_disk_wal_write_bytes_total",
                                "Total number of bytes written in WAL.");
}

#define REC_HDR 8
#define SEG_MAGIC 0x4c415751u
#define SEG_VERSION 1u
#define SEG_PAYLOAD 24
#define META_PAYLOAD 16
#define HS_PAYLOAD 24
#define ENTRY_FIXED 17
#define SNAP_PAYLOAD 17

struct segment {
    uint64_t seq;
    uint64_t first_index;
};

struct wal {
    char dir[PATH_MAX]; /* <data-dir>/member/wal */
    size_t seg_size;
    int fd;           /* the last segment, open for writing */
    uint64_t off;     /* where the next record goes in it */
    uint64_t hdr_end; /* end of its header records */
    uint64_t last_index;
    uint64_t node_id, cluster_id;
    bool has_hs, has_snap;
    struct raft_hard_state hs;
    uint64_t snap_index, snap_term;
    struct segment *segs; /* every segment file, in sequence order */
    size_t n_segs, cap_segs;
    struct buf wb; /* records of one save, reused */
    int failed;    /* a write or sync failed (its error): see wal_failed */
    /* a save the disk refused for space may have left bytes in [off,
     * dirty_end) of the last segment: zeroed before anything else goes
     * there (wal_save's ENOSPC rule) */
    uint64_t dirty_end;
    /* the next segment's file, written ahead on its own thread */
    bool ahead;           /* opts->written_ahead */
    bool spare_thread_on; /* spare_thread started and not joined */
    pthread_t spare_thread;
    atomic_int spare_state; /* enum spare_state */
    int spare_err;          /* why the last one failed (-errno) */
};

enum spare_state { SPARE_NONE, SPARE_FILLING, SPARE_READY, SPARE_FAILED };

const char *wal_record_type_name(int type)
{
    switch (type) {
    case WAL_REC_SEGMENT:
        return "segment";
    case WAL_REC_METADATA:
        return "metadata";
    case WAL_REC_HARD_STATE:
        return "hardstate";
    case WAL_REC_ENTRY:
        return "entry";
    case WAL_REC_SNAPSHOT:
        return "snapshot";
    default:
        return "unknown";
    }
}

/* ---------------------------------------------------------------- files */

void wal__fmt(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

int wal__fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rv = fsync(fd) != 0 ? -errno : 0;
    close(fd);
    return rv;
}

int wal__write_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t k = pwrite(fd, q, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            return -EIO;
        q += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

static int prealloc(int fd, size_t size)
{
    /* posix_fallocate returns the error number itself; glibc emulates it by
     * writing zeros where the file system has no fallocate. */
    int rv = posix_fallocate(fd, 0, (off_t)size);
    return rv == 0 ? 0 : -rv;
}

/* ---------------------------------------------------- SPACE WRITTEN AHEAD
 *
 * A preallocated extent is "unwritten" to the file system: the first write
 * into it changes the file's extent map, so the fdatasync after each append
 * also writes and waits for the inode, and on a journaling file system
 * commits the journal (ext4, XFS). Space that already holds written zeros
 * costs the sync the data only: 305 us instead of 910 for a 10 KB append
 * on ext4 with its journal (docs/architecture.md has the numbers). So with
 * opts->written_ahead (the member's WAL):
 *  - wal_open writes zeros over the rest of the open segment (at most one
 *    segment's size, once per start) where the file system reports an
 *    unwritten extent (wal__unwritten); on one without extent maps
 *    (tmpfs) there is nothing to gain and nothing is written ahead;
 *  - the next segment is made ahead, as etcd's WAL pipeline does, on a
 *    thread of its own: "spare.tmp" in the WAL directory, seg_size bytes of
 *    zeros, synced. A cut takes it (renamed to the new segment's temporary
 *    name, header written and synced, renamed into place) and starts the
 *    next one. A cut that finds it not ready does not wait: it
 *    preallocates as before. Leftovers are *.tmp, removed at open.
 * The spare thread touches only its own file and spare_state. */

static void spare_name(char *out, size_t outlen, const char *dir)
{
    wal__fmt(out, outlen, "%s/spare.tmp", dir);
}

#define ZERO_CHUNK ((size_t)1 << 20)

/* zero_range writes zeros over [from, to) of |fd|, a chunk at a time. */
static int zero_range(int fd, uint64_t from, uint64_t to)
{
    if (from >= to)
        return 0;
    size_t chunk = to - from < ZERO_CHUNK ? (size_t)(to - from) : ZERO_CHUNK;
    uint8_t *z = calloc(1, chunk);
    if (z == NULL)
        return -ENOMEM;
    int rv = 0;
    for (uint64_t off = from; off < to && rv == 0;) {
        size_t n = to - off < chunk ? (size_t)(to - off) : chunk;
        rv = wal__write_all(fd, z, n, off);
        off += n;
    }
    free(z);
    return rv;
}

/* zero_fill is zero_range, synced. */
static int zero_fill(int fd, uint64_t from, uint64_t to)
{
    int rv = zero_range(fd, from, to);
    if (rv == 0 && !wal_no_sync && fdatasync(fd) != 0)
        rv = -errno;
    return rv;
}

int wal__unwritten(int fd, uint64_t from, uint64_t to)
{
    enum { N = 32 };
    union {
        struct fiemap fm;
        uint8_t b[sizeof(struct fiemap) + N * sizeof(struct fiemap_extent)];
    } u;
    uint64_t at = from;
    while (at < to) {
        memset(&u, 0, sizeof(u));
        u.fm.fm_start = at;
        u.fm.fm_length = to - at;
        u.fm.fm_extent_count = N;
        if (ioctl(fd, FS_IOC_FIEMAP, &u.fm) != 0)
            return -errno;
        if (u.fm.fm_mapped_extents == 0)
            return 0; /* a hole: nothing unwritten (preallocated) there */
        for (uint32_t i = 0; i < u.fm.fm_mapped_extents; i++) {
            const struct fiemap_extent *x = &u.fm.fm_extents[i];
            if (x->fe_flags & FIEMAP_EXTENT_UNWRITTEN)
                return 1;
            at = x->fe_logical + x->fe_length;
            if (x->fe_flags & FIEMAP_EXTENT_LAST)
                return 0;
        }
    }
    return 0;
}

static void *spare_fill(void *arg)
{
    struct wal *w = arg;
    char p[PATH_MAX];
    spare_name(p, sizeof(p), w->dir);
    unlink(p);
    int rv = 0, fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
    } else {
        rv = zero_fill(fd, 0, w->seg_size);
        close(fd);
        if (rv != 0)
            unlink(p);
    }
    w->spare_err = rv; /* read after the join */
    atomic_store(&w->spare_state, rv == 0 ? SPARE_READY : SPARE_FAILED);
    return NULL;
}

/* spare_start starts making the next segment ahead, unless it is being
 * made or waits to be taken. */
static void spare_start(struct wal *w)
{
    if (!w->ahead || w->spare_thread_on || atomic_load(&w->spare_state) == SPARE_READY)
        return;
    atomic_store(&w->spare_state, SPARE_FILLING);
    if (pthread_create(&w->spare_thread, NULL, spare_fill, w) != 0) {
        atomic_store(&w->spare_state, SPARE_NONE); /* cuts preallocate */
        return;
    }
    w->spare_thread_on = true;
}

/* spare_join ends the spare thread (it is done, or |wait|) and tells
 * whether the spare file is ready. */
static bool spare_join(struct wal *w, bool wait)
{
    if (w->spare_thread_on) {
        if (!wait && atomic_load(&w->spare_state) == SPARE_FILLING)
            return false;
        pthread_join(w->spare_thread, NULL);
        w->spare_thread_on = false;
    }
    return atomic_load(&w->spare_state) == SPARE_READY;
}

int wal_wait_ahead(struct wal *w)
{
    if (spare_join(w, true))
        return 0;
    return atomic_load(&w->spare_state) == SPARE_FAILED ? w->spare_err : -ENOENT;
}

/* spare_take renames a ready spare to |tmp| and opens it; -1 if there is
 * none (the cut preallocates). */
static int spare_take(struct wal *w, const char *tmp)
{
    if (!spare_join(w, false))
        return -1;
    char p[PATH_MAX];
    spare_name(p, sizeof(p), w->dir);
    atomic_store(&w->spare_state, SPARE_NONE);
    if (rename(p, tmp) != 0) {
        unlink(p);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        unlink(tmp);
    return fd;
}

static void seg_name(char *out, size_t outlen, const char *dir, uint64_t seq, uint64_t first)
{
    wal__fmt(out, outlen, "%s/%016" PRIx64 "-%016" PRIx64 ".wal", dir, seq, first);
}

static int seg_cmp(const void *a, const void *b)
{
    const struct segment *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* list_segments collects the segment files of |dir| in sequence order.
 * With |remove_tmp| it also unlinks leftovers of an interrupted cut. */
static int list_segments(const char *dir, bool remove_tmp, struct segment **out, size_t *n_out)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    struct segment *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rv = 0;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (remove_tmp && len > 4 && strcmp(name + len - 4, ".tmp") == 0) {
            char p[PATH_MAX];
            wal__fmt(p, sizeof(p), "%s/%s", dir, name);
            unlink(p);
            continue;
        }
        uint64_t seq, first;
        char tail[8];
        if (len != 37 || sscanf(name, "%16" SCNx64 "-%16" SCNx64 "%7s", &seq, &first, tail) != 3 ||
            strcmp(tail, ".wal") != 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct segment *nv = realloc(v, nc * sizeof(*v));
            if (nv == NULL) {
                rv = -ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        v[n].seq = seq;
        v[n].first_index = first;
        n++;
    }
    closedir(d);
    if (rv != 0) {
        free(v);
        return rv;
    }
    if (n > 0)
        qsort(v, n, sizeof(*v), seg_cmp);
    *out = v;
    *n_out = n;
    return 0;
}

/* wal_dir_of: the segments' directory, --wal-dir when given */
static void wal_dir_of(char *out, size_t outlen, const char *data_dir, const char *wal_dir)
{
    if (wal_dir != NULL && wal_dir[0] != '\0')
        wal__fmt(out, outlen, "%s", wal_dir);
    else
        wal__fmt(out, outlen, "%s/member/wal", data_dir);
}

bool wal_exist(const char *data_dir)
{
    char dir[PATH_MAX];
    wal_dir_of(dir, sizeof(dir), data_dir, NULL);
    return wal_exist_dir(dir);
}

bool wal_exist_dir(const char *dir)
{
    struct segment *v = NULL;
    size_t n = 0;
    if (list_segments(dir, false, &v, &n) != 0)
        return false;
    free(v);
    return n > 0;
}

/* -------------------------------------------------------------- records */

static inline size_t padded(size_t len)
{
    return (REC_HDR + len + 7) & ~(size_t)7;
}

/* rec_begin starts a record of |type| with |payload| bytes in |b| and
 * returns where the payload goes; rec_end pads and seals it. */
static uint8_t *rec_begin(struct buf *b, uint8_t type, size_t payload, size_t *start)
{
    size_t total = padded(1 + payload);
    if (buf_reserve(b, total) != 0)
        return NULL;
    *start = b->len;
    uint8_t *p = b->data + b->len;
    memset(p + REC_HDR + 1 + payload, 0, total - REC_HDR - 1 - payload);
    p[REC_HDR] = type;
    b->len += total;
    return p + REC_HDR + 1;
}

static void rec_end(struct buf *b, size_t start, size_t payload)
{
    uint8_t *p = b->data + start;
    size_t total = padded(1 + payload);
    put32(p, (uint32_t)(1 + payload));
    put32(p + 4, crc32c_update(crc32c_update(0, p, 4), p + REC_HDR, total - REC_HDR));
}

static int add_hs(struct buf *b, const struct raft_hard_state *hs)
{
    size_t s;
    uint8_t *p = rec_begin(b, WAL_REC_HARD_STATE, HS_PAYLOAD, &s);
    if (p == NULL)
        return -ENOMEM;
    put64(p, hs->term);
    put64(p + 8, hs->vote);
    put64(p + 16, hs->commit);
    rec_end(b, s, HS_PAYLOAD);
    return 0;
}

static int add_snap(struct buf *b, uint64_t index, uint64_t term, unsigned flags)
{
    size_t s;
    uint8_t *p = rec_begin(b, WAL_REC_SNAPSHOT, SNAP_PAYLOAD, &s);
    if (p == NULL)
        return -ENOMEM;
    put64(p, index);
    put64(p + 8, term);
    p[16] = (uint8_t)flags;
    rec_end(b, s, SNAP_PAYLOAD);
    return 0;
}

static int add_header(struct buf *b, const struct wal *w, uint64_t seq, uint64_t first)
{
    size_t s;
    uint8_t *p = rec_begin(b, WAL_REC_SEGMENT, SEG_PAYLOAD, &s);
    if (p == NULL)
        return -ENOMEM;
    put32(p, SEG_MAGIC);
    put32(p + 4, SEG_VERSION);
    put64(p + 8, seq);
    put64(p + 16, first);
    rec_end(b, s, SEG_PAYLOAD);
    p = rec_begin(b, WAL_REC_METADATA, META_PAYLOAD, &s);
    if (p == NULL)
        return -ENOMEM;
    put64(p, w->node_id);
    put64(p + 8, w->cluster_id);
    rec_end(b, s, META_PAYLOAD);
    if (w->has_hs && add_hs(b, &w->hs) != 0)
        return -ENOMEM;
    if (w->has_snap && add_snap(b, w->snap_index, w->snap_term, 0) != 0)
        return -ENOMEM;
    return 0;
}

static size_t payload_min(uint8_t type)
{
    switch (type) {
    case WAL_REC_SEGMENT:
        return SEG_PAYLOAD;
    case WAL_REC_METADATA:
        return META_PAYLOAD;
    case WAL_REC_HARD_STATE:
        return HS_PAYLOAD;
    case WAL_REC_ENTRY:
        return ENTRY_FIXED;
    case WAL_REC_SNAPSHOT:
        return SNAP_PAYLOAD;
    default:
        return SIZE_MAX;
    }
}

/* record_at checks the record at |off| of [buf, buf+size): its padded size
 * on success, 0 if it is not a valid record. */
static size_t record_at(const uint8_t *buf, size_t size, size_t off)
{
    if (size - off < REC_HDR + 1)
        return 0;
    uint32_t len = get32(buf + off);
    if (len == 0 || (uint64_t)len > size - off - REC_HDR)
        return 0;
    size_t total = padded(len);
    if (total > size - off)
        return 0;
    uint8_t type = buf[off + REC_HDR];
    size_t min = payload_min(type);
    if (min == SIZE_MAX || len - 1 < min)
        return 0;
    uint32_t crc = crc32c_update(0, buf + off, 4);
    if (crc32c_update(crc, buf + off + REC_HDR, total - REC_HDR) != get32(buf + off + 4))
        return 0;
    return total;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

enum scan_status { SCAN_CLEAN, SCAN_TORN, SCAN_CORRUPT };

/* Zeros are checked this much at a time, and the mapping's pages given
 * back after each piece (see read_segment). */
#define ZERO_WINDOW (4u << 20)

/* scan finds how far |buf| holds valid records (*end) and what follows:
 * nothing or zeros (clean), something with no valid record after it (torn)
 * or a valid record further on (corrupt; *next is where). |map| is the
 * page-aligned mapping |buf| lies in, or NULL: with one, the zeros of a
 * preallocated tail are dropped from memory as they are checked. */
static enum scan_status scan(const uint8_t *buf, size_t size, size_t *end, size_t *next,
                             uint8_t *map)
{
    size_t off = 0, k;
    while (off < size && (k = record_at(buf, size, off)) != 0)
        off += k;
    *end = off;
    bool zeros = true;
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    for (size_t c = off; zeros && c < size;) {
        size_t w = ZERO_WINDOW - c % ZERO_WINDOW, n = size - c < w ? size - c : w;
        zeros = all_zero(buf + c, n);
        /* whole pages past the records only (c >= off): the records stay
         * mapped */
        size_t lo = (c + page - 1) / page * page, hi = (c + n) / page * page;
        if (map != NULL && zeros && hi > lo)
            madvise(map + lo, hi - lo, MADV_DONTNEED);
        c += n;
    }
    if (zeros)
        return SCAN_CLEAN;
    for (size_t c = off + REC_HDR; c + REC_HDR < size; c += 8) {
        if (get32(buf + c) == 0)
            continue;
        if (record_at(buf, size, c) != 0) {
            *next = c;
            return SCAN_CORRUPT;
        }
    }
    return SCAN_TORN;
}

/* read_segment reads a segment file's valid records into memory
 * (*out, *end bytes) and says what follows them (see scan). The file is
 * mapped to be scanned, not read into a buffer its size: a segment is
 * preallocated (64 MiB by default) and mostly zeros when a member starts,
 * and reading it whole made every start hold that much memory at once. */
static int read_segment(const char *path, uint8_t **out, size_t *end, size_t *next,
                        enum scan_status *status)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int rv = -errno;
        close(fd);
        return rv;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *map = NULL;
    if (n > 0) {
        map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int rv = -errno;
            close(fd);
            return rv;
        }
    }
    close(fd);
    *next = 0;
    *end = 0;
    *status = n > 0 ? scan(map, n, end, next, map) : SCAN_CLEAN;
    uint8_t *p = malloc(*end > 0 ? *end : 1);
    if (p != NULL && *end > 0)
        memcpy(p, map, *end);
    if (map != NULL)
        munmap(map, n);
    if (p == NULL)
        return -ENOMEM;
    *out = p;
    return 0;
}

static void decode(const uint8_t *rec, struct wal_record *r)
{
    r->len = get32(rec);
    r->type = rec[REC_HDR];
    const uint8_t *p = rec + REC_HDR + 1;
    switch (r->type) {
    case WAL_REC_SEGMENT:
        r->u.segment.version = get32(p + 4);
        r->u.segment.seq = get64(p + 8);
        r->u.segment.first_index = get64(p + 16);
        break;
    case WAL_REC_METADATA:
        r->u.meta.node_id = get64(p);
        r->u.meta.cluster_id = get64(p + 8);
        break;
    case WAL_REC_HARD_STATE:
        r->u.hs.term = get64(p);
        r->u.hs.vote = get64(p + 8);
        r->u.hs.commit = get64(p + 16);
        break;
    case WAL_REC_ENTRY:
        r->u.entry.term = get64(p);
        r->u.entry.index = get64(p + 8);
        r->u.entry.type = p[16];
        r->u.entry.data = p + ENTRY_FIXED;
        r->u.entry.len = r->len - 1 - ENTRY_FIXED;
        break;
    case WAL_REC_SNAPSHOT:
        r->u.snap.index = get64(p);
        r->u.snap.term = get64(p + 8);
        r->u.snap.flags = p[16];
        break;
    }
}

/* ----------------------------------------------------------- the writer */

static int wal_alloc(const struct wal_options *opts, struct wal **out)
{
    struct wal *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    wal_dir_of(w->dir, sizeof(w->dir), opts->data_dir, opts->wal_dir);
    w->seg_size = opts->segment_size ? opts->segment_size : WAL_SEGMENT_SIZE_DEFAULT;
    w->ahead = opts->written_ahead;
    w->fd = -1;
    *out = w;
    return 0;
}

static int push_segment(struct wal *w, uint64_t seq, uint64_t first)
{
    if (w->n_segs == w->cap_segs) {
        size_t nc = w->cap_segs ? w->cap_segs * 2 : 8;
        struct segment *nv = realloc(w->segs, nc * sizeof(*nv));
        if (nv == NULL)
            return -ENOMEM;
        w->segs = nv;
        w->cap_segs = nc;
    }
    w->segs[w->n_segs].seq = seq;
    w->segs[w->n_segs].first_index = first;
    w->n_segs++;
    return 0;
}

/* new_segment writes segment |seq| (header records re-stating the current
 * state) under a temporary name, syncs it and renames it into place, then
 * makes it the one appended to. */
static int new_segment(struct wal *w, uint64_t seq, uint64_t first)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    seg_name(path, sizeof(path), w->dir, seq, first);
    wal__fmt(tmp, sizeof(tmp), "%s.tmp", path);
    struct buf hb = {0};
    int rv = add_header(&hb, w, seq, first);
    if (rv != 0)
        goto out;
    unlink(tmp);
    int fd = spare_take(w, tmp);
    bool spare = fd >= 0;
    if (!spare && (fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        rv = -errno;
        goto out;
    }
    if ((!spare && (rv = prealloc(fd, w->seg_size)) != 0) ||
        (rv = wal__write_all(fd, hb.data, hb.len, 0)) != 0)
        goto fail;
    if (fsync(fd) != 0 || rename(tmp, path) != 0) {
        rv = -errno;
        goto fail;
    }
    if ((rv = wal__fsync_dir(w->dir)) != 0 || (rv = push_segment(w, seq, first)) != 0) {
        /* the segment is in place under its name but may not be durable
         * there: no going on from here */
        if (w->failed == 0)
            w->failed = rv;
        close(fd);
        goto out;
    }
    if (w->fd >= 0)
        close(w->fd);
    w->fd = fd;
    w->off = w->hdr_end = hb.len;
    spare_start(w);
    goto out;
fail:
    close(fd);
    unlink(tmp);
out:
    buf_free(&hb);
    return rv;
}

bool wal_no_sync;

static int cut(struct wal *w)
{
    if (!wal_no_sync && fdatasync(w->fd) != 0) {
        w->failed = -errno; /* never synced again: see wal_failed */
        return w->failed;
    }
    return new_segment(w, w->segs[w->n_segs - 1].seq + 1, w->last_index + 1);
}

/* out_of_space: an error after which a save may be tried again (the disk
 * refused to allocate; nothing it had taken is in doubt) */
static bool out_of_space(int rv)
{
    return rv == -ENOSPC || rv == -EDQUOT;
}

/* scrub zeroes what a save refused for space may have left after w->off
 * (an all-zero header is where the log ends), so that no stale record can
 * follow the next one. */
static int scrub(struct wal *w)
{
    int rv = zero_range(w->fd, w->off, w->dirty_end);
    if (rv == 0)
        w->dirty_end = 0;
    return rv;
}

/* flush writes w->wb at the end of the last segment, cutting first when it
 * does not fit (unless the segment holds nothing but its header). */
static int flush(struct wal *w)
{
    int rv = w->failed;
    if (rv == 0 && w->dirty_end > w->off)
        rv = scrub(w);
    if (rv == 0 && w->off + w->wb.len > w->seg_size && w->off > w->hdr_end)
        rv = cut(w);
    if (rv == 0) {
        rv = wal__write_all(w->fd, w->wb.data, w->wb.len, w->off);
        if (rv != 0 && w->off + w->wb.len > w->dirty_end)
            w->dirty_end = w->off + w->wb.len;
    }
    if (rv == 0) {
        w->off += w->wb.len;
        metrics_add(write_bytes, w->wb.len);
    } else if (w->failed == 0 && !out_of_space(rv)) {
        w->failed = rv;
    }
    buf_reset(&w->wb);
    return rv;
}

int wal_create(const struct wal_options *opts, struct wal **out, char *err, size_t errlen)
{
    struct wal *w;
    int rv = wal_alloc(opts, &w);
    if (rv != 0)
        return rv;
    if ((rv = fs_mkdir_p(w->dir)) != 0) {
        set_errf(err, errlen, "wal: cannot create %s: %s", w->dir, strerror(-rv));
        goto fail;
    }
    if (wal_exist_dir(w->dir)) {
        rv = -EEXIST;
        set_errf(err, errlen, "wal: %s already holds a WAL", w->dir);
        goto fail;
    }
    w->node_id = opts->node_id;
    w->cluster_id = opts->cluster_id;
    if ((rv = new_segment(w, 0, 1)) != 0) {
        set_errf(err, errlen, "wal: cannot create the first segment in %s: %s", w->dir,
                strerror(-rv));
        goto fail;
    }
    /* The directory and its parent may be new too (member/wal and member,
     * or --wal-dir's): make their entries durable. */
    char parent[PATH_MAX];
    wal__fmt(parent, sizeof(parent), "%s", w->dir);
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(parent, '/');
        while (slash != NULL && slash > parent && slash[1] == '\0') { /* trailing '/' */
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        if (slash == NULL)
            wal__fmt(parent, sizeof(parent), ".");
        else
            slash[slash == parent ? 1 : 0] = '\0';
        if ((rv = wal__fsync_dir(parent)) != 0)
            goto fail;
    }
    *out = w;
    return 0;
fail:
    wal_close(w);
    return rv;
}

void wal_close(struct wal *w)
{
    if (w == NULL)
        return;
    if (w->spare_thread_on || atomic_load(&w->spare_state) == SPARE_READY) {
        spare_join(w, true);
        char p[PATH_MAX];
        spare_name(p, sizeof(p), w->dir);
        unlink(p);
    }
    if (w->fd >= 0)
        close(w->fd);
    free(w->segs);
    buf_free(&w->wb);
    free(w);
}

int wal_save(struct wal *w, const struct raft_hard_state *hs, const struct raft_entry *ents,
             size_t n)
{
    size_t need = hs ? padded(1 + HS_PAYLOAD) : 0;
    for (size_t i = 0; i < n; i++) {
        if (ents[i].len > UINT32_MAX - 1 - ENTRY_FIXED)
            return -EINVAL;
        need += padded(1 + ENTRY_FIXED + ents[i].len);
    }
    if (need == 0)
        return 0;
    if (buf_reserve(&w->wb, need) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct raft_entry *e = &ents[i];
        size_t s = 0;
        uint8_t *p = rec_begin(&w->wb, WAL_REC_ENTRY, ENTRY_FIXED + e->len, &s);
        put64(p, e->term);
        put64(p + 8, e->index);
        p[16] = e->type;
        if (e->len > 0)
            memcpy(p + ENTRY_FIXED, e->data, e->len);
        rec_end(&w->wb, s, ENTRY_FIXED + e->len);
    }
    if (hs)
        add_hs(&w->wb, hs);
    int rv = flush(w);
    if (rv != 0)
        return rv;
    if (n > 0)
        w->last_index = ents[n - 1].index;
    if (hs) {
        w->hs = *hs;
        w->has_hs = true;
    }
    return 0;
}

int wal_save_snapshot(struct wal *w, uint64_t index, uint64_t term, unsigned flags)
{
    int rv = add_snap(&w->wb, index, term, flags & WAL_SNAP_DROP_ENTRIES);
    if (rv != 0)
        return rv;
    if ((rv = flush(w)) != 0)
        return rv;
    if (!w->has_snap || index >= w->snap_index) {
        w->has_snap = true;
        w->snap_index = index;
        w->snap_term = term;
    }
    if (flags & WAL_SNAP_DROP_ENTRIES)
        w->last_index = index;
    return 0;
}

uint64_t wal_warn_sync_ns = 1000000000; /* etcd's warnSyncDuration */

int wal_sync(struct wal *w)
{
    if (w->failed != 0)
        return w->failed; /* never sync again after a failure and go on */
    if (wal_no_sync)
        return 0;
    uint64_t t0 = metrics_now_ns();
    int rv = fdatasync(w->fd) != 0 ? -errno : 0;
    if (rv != 0)
        w->failed = rv;
    uint64_t took = metrics_now_ns() - t0;
    metrics_observe(fsync_seconds, (double)took / 1e9);
    if (took > wal_warn_sync_ns)
        log_kv(LOG_WARN, "wal", "slow fdatasync", LF_DUR("took", took),
               LF_DUR("expected-duration", wal_warn_sync_ns));
    return rv;
}

int wal_release_to(struct wal *w, uint64_t index)
{
    /* every covered segment: the purge that keeps only the newest one */
    int rv = wal_purge(w, index, 1);
    return rv < 0 ? rv : 0;
}

int wal_failed(const struct wal *w)
{
    return w->failed;
}

int wal_purge(struct wal *w, uint64_t index, size_t max_files)
{
    if (max_files == 0)
        return 0;
    size_t k = 0;
    int rv = 0;
    while (w->n_segs - k > max_files && k + 1 < w->n_segs &&
           w->segs[k + 1].first_index <= index + 1) {
        char path[PATH_MAX];
        seg_name(path, sizeof(path), w->dir, w->segs[k].seq, w->segs[k].first_index);
        if (unlink(path) != 0 && errno != ENOENT) {
            rv = -errno;
            break;
        }
        log_info("wal", "purged file %s successfully", path);
        k++;
    }
    if (k == 0)
        return rv;
    memmove(w->segs, w->segs + k, (w->n_segs - k) * sizeof(*w->segs));
    w->n_segs -= k;
    int sr = wal__fsync_dir(w->dir);
    return rv ? rv : sr ? sr : (int)k;
}

uint64_t wal_last_index(const struct wal *w)
{
    return w->last_index;
}

size_t wal_segment_count(const struct wal *w)
{
    return w->n_segs;
}

/* ---------------------------------------------------------------- replay */

struct replay {
    struct wal_state *st;
    struct raft_entry *ents;
    size_t n, cap;
    struct {
        uint64_t index, term;
    } * marks;
    size_t n_marks, cap_marks;
};

static int keep_block(struct wal_state *st, void *p)
{
    void **nb = realloc(st->blocks, (st->n_blocks + 1) * sizeof(*nb));
    if (nb == NULL)
        return -ENOMEM;
    st->blocks = nb;
    st->blocks[st->n_blocks++] = p;
    return 0;
}

static int replay_entry(struct replay *rp, const struct raft_entry *e)
{
    if (rp->n > 0) {
        uint64_t first = rp->ents[0].index, last = rp->ents[rp->n - 1].index;
        if (e->index < first || e->index > last + 1)
            rp->n = 0; /* below everything held, or a gap: checked at the end */
        else if (e->index <= last)
            rp->n = (size_t)(e->index - first);
    }
    if (rp->n == rp->cap) {
        size_t nc = rp->cap ? rp->cap * 2 : 1024;
        struct raft_entry *nv = realloc(rp->ents, nc * sizeof(*nv));
        if (nv == NULL)
            return -ENOMEM;
        rp->ents = nv;
        rp->cap = nc;
    }
    rp->ents[rp->n++] = *e;
    return 0;
}

static int replay_mark(struct replay *rp, uint64_t index, uint64_t term)
{
    if (rp->n_marks == rp->cap_marks) {
        size_t nc = rp->cap_marks ? rp->cap_marks * 2 : 8;
        void *nv = realloc(rp->marks, nc * sizeof(*rp->marks));
        if (nv == NULL)
            return -ENOMEM;
        rp->marks = nv;
        rp->cap_marks = nc;
    }
    rp->marks[rp->n_marks].index = index;
    rp->marks[rp->n_marks].term = term;
    rp->n_marks++;
    return 0;
}

/* replay_segment applies the valid records [0, end) of one segment. */
static int replay_segment(struct wal *w, struct replay *rp, const char *path, const uint8_t *buf,
                          size_t end, const struct segment *sg, bool first_seg, char *err,
                          size_t errlen)
{
    size_t off = 0;
    int idx = 0;
    int rv;
    while (off < end) {
        struct wal_record r;
        decode(buf + off, &r);
        if ((idx == 0) != (r.type == WAL_REC_SEGMENT) || (idx == 1) != (r.type == WAL_REC_METADATA))
            goto bad_order;
        switch (r.type) {
        case WAL_REC_SEGMENT:
            if (get32(buf + off + REC_HDR + 1) != SEG_MAGIC || r.u.segment.version != SEG_VERSION ||
                r.u.segment.seq != sg->seq || r.u.segment.first_index != sg->first_index) {
                set_errf(err, errlen, "wal: %s: bad segment header (magic, version or name)", path);
                return QERR_CORRUPT;
            }
            if (first_seg)
                w->last_index = sg->first_index - 1;
            else if (sg->first_index != w->last_index + 1) {
                set_errf(err, errlen,
                        "wal: %s: segment starts at index %" PRIu64 " but the previous one "
                        "ends at %" PRIu64 " (records missing at its end)",
                        path, sg->first_index, w->last_index);
                return QERR_CORRUPT;
            }
            break;
        case WAL_REC_METADATA:
            if (first_seg) {
                w->node_id = r.u.meta.node_id;
                w->cluster_id = r.u.meta.cluster_id;
            } else if (r.u.meta.node_id != w->node_id || r.u.meta.cluster_id != w->cluster_id) {
                set_errf(err, errlen, "wal: %s: metadata differs from the first segment's", path);
                return QERR_CORRUPT;
            }
            break;
        case WAL_REC_HARD_STATE:
            w->hs = r.u.hs;
            w->has_hs = true;
            break;
        case WAL_REC_ENTRY:
            if ((rv = replay_entry(rp, &r.u.entry)) != 0)
                return rv;
            w->last_index = r.u.entry.index;
            break;
        case WAL_REC_SNAPSHOT:
            if ((rv = replay_mark(rp, r.u.snap.index, r.u.snap.term)) != 0)
                return rv;
            if (!w->has_snap || r.u.snap.index >= w->snap_index) {
                w->has_snap = true;
                w->snap_index = r.u.snap.index;
                w->snap_term = r.u.snap.term;
            }
            if (r.u.snap.flags & WAL_SNAP_DROP_ENTRIES) {
                rp->n = 0;
                w->last_index = r.u.snap.index;
            }
            break;
        }
        off += padded(r.len);
        idx++;
    }
    if (idx < 2)
        goto bad_order;
    return 0;
bad_order:
    set_errf(err, errlen, "wal: %s: record at offset %zu out of order (missing segment header)",
            path, off);
    return QERR_CORRUPT;
}

static int snap_name_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b; /* {index, term}, newest first */
    if (x[0] != y[0])
        return x[0] < y[0] ? 1 : -1;
    return x[1] < y[1] ? 1 : x[1] > y[1] ? -1 : 0;
}

/* pick_snapshot loads the newest snapshot file the WAL has a marker for. */
static int pick_snapshot(const char *data_dir, struct replay *rp, struct wal_state *st)
{
    char dir[PATH_MAX];
    wal__fmt(dir, sizeof(dir), "%s/member/snap", data_dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    uint64_t(*v)[2] = NULL;
    size_t n = 0;
    struct dirent *de;
    int rv = 0;
    while ((de = readdir(d)) != NULL) {
        uint64_t term, index;
        char tail[8];
        if (strlen(de->d_name) != 38 ||
            sscanf(de->d_name, "%16" SCNx64 "-%16" SCNx64 "%7s", &term, &index, tail) != 3 ||
            strcmp(tail, ".snap") != 0)
            continue;
        void *nv = realloc(v, (n + 1) * sizeof(*v));
        if (nv == NULL) {
            rv = -ENOMEM;
            break;
        }
        v = nv;
        v[n][0] = index;
        v[n][1] = term;
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(v, n, sizeof(*v), snap_name_cmp);
    for (size_t i = 0; rv == 0 && i < n; i++) {
        bool marked = false;
        for (size_t j = 0; j < rp->n_marks && !marked; j++)
            marked = rp->marks[j].index == v[i][0] && rp->marks[j].term == v[i][1];
        if (!marked)
            continue;
        int lr = wal_snap_load(data_dir, v[i][1], v[i][0], &st->snapshot);
        if (lr == 0) {
            st->has_snapshot = true;
            if (st->snapshot.data != NULL && (rv = keep_block(st, (void *)st->snapshot.data)) != 0)
                free((void *)st->snapshot.data);
            break;
        }
        if (lr != QERR_CORRUPT && lr != -ENOENT)
            rv = lr; /* a damaged file is skipped for an older one, as etcd does */
    }
    free(v);
    return rv;
}

void wal_state_free(struct wal_state *st)
{
    for (size_t i = 0; i < st->n_blocks; i++)
        free(st->blocks[i]);
    free(st->blocks);
    free(st->entries);
    memset(st, 0, sizeof(*st));
}

void wal_state_storage(const struct wal_state *st, struct raft_storage *out)
{
    memset(out, 0, sizeof(*out));
    out->hs = st->hs;
    out->snapshot = st->has_snapshot ? &st->snapshot : NULL;
    out->entries = st->entries;
    out->n_entries = st->n_entries;
}

/* repair_tail cuts the last segment after its last valid record and
 * preallocates it again (the cut-off part reads as zeros). */
static int repair_tail(const char *path, size_t end, size_t seg_size)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rv = 0;
    if (ftruncate(fd, (off_t)end) != 0 || fdatasync(fd) != 0)
        rv = -errno;
    if (rv == 0)
        rv = prealloc(fd, seg_size);
    if (rv == 0 && fdatasync(fd) != 0)
        rv = -errno;
    close(fd);
    return rv;
}

int wal_open(const struct wal_options *opts, struct wal **out, struct wal_state *st, char *err,
             size_t errlen)
{
    memset(st, 0, sizeof(*st));
    struct wal *w;
    int rv = wal_alloc(opts, &w);
    if (rv != 0)
        return rv;
    struct segment *segs = NULL;
    size_t n_segs = 0;
    struct replay rp = {.st = st};
    if ((rv = list_segments(w->dir, true, &segs, &n_segs)) != 0 || n_segs == 0) {
        rv = rv ? rv : -ENOENT;
        set_errf(err, errlen, "wal: no WAL in %s: %s", w->dir, strerror(-rv));
        goto fail;
    }
    char path[PATH_MAX];
    size_t tail_end = 0;
    bool torn = false;
    for (size_t i = 0; i < n_segs; i++) {
        const struct segment *sg = &segs[i];
        bool last = i + 1 == n_segs;
        seg_name(path, sizeof(path), w->dir, sg->seq, sg->first_index);
        if (i > 0 && sg->seq != segs[i - 1].seq + 1) {
            rv = QERR_CORRUPT;
            set_errf(err, errlen, "wal: %s: segment %" PRIu64 " is missing", path,
                    segs[i - 1].seq + 1);
            goto fail;
        }
        uint8_t *buf;
        size_t end, next;
        enum scan_status ss;
        if ((rv = read_segment(path, &buf, &end, &next, &ss)) != 0) {
            set_errf(err, errlen, "wal: cannot read %s: %s", path, strerror(-rv));
            goto fail;
        }
        if (ss == SCAN_CORRUPT || (ss == SCAN_TORN && !last)) {
            free(buf);
            rv = QERR_CORRUPT;
            if (ss == SCAN_CORRUPT)
                set_errf(err, errlen,
                        "wal: %s: corrupt record at offset %zu (a valid record follows at "
                        "offset %zu)",
                        path, end, next);
            else
                set_errf(err, errlen,
                        "wal: %s: corrupt or partial record at offset %zu of a segment that "
                        "is not the last",
                        path, end);
            goto fail;
        }
        if (last) {
            torn = ss == SCAN_TORN;
            tail_end = end;
        }
        /* the valid part only (read_segment): entries point into it from
         * here on */
        if ((rv = keep_block(st, buf)) != 0) {
            free(buf);
            goto fail;
        }
        rv = replay_segment(w, &rp, path, buf, end, sg, i == 0, err, errlen);
        if (rv != 0)
            goto fail;
    }
    /* The snapshot, then the entries after it, which must follow on. */
    if ((rv = pick_snapshot(opts->data_dir, &rp, st)) != 0) {
        set_errf(err, errlen, "wal: cannot load a snapshot: %s", q_strerror(rv));
        goto fail;
    }
    uint64_t base = st->has_snapshot ? st->snapshot.index : 0;
    size_t skip = 0;
    while (skip < rp.n && rp.ents[skip].index <= base)
        skip++;
    if (skip < rp.n && rp.ents[skip].index != base + 1) {
        rv = QERR_CORRUPT;
        set_errf(err, errlen,
                "wal: %s: entries resume at index %" PRIu64 " but the snapshot ends at %" PRIu64
                " (entries or a snapshot file are missing)",
                w->dir, rp.ents[skip].index, base);
        goto fail;
    }
    if (skip > 0)
        memmove(rp.ents, rp.ents + skip, (rp.n - skip) * sizeof(*rp.ents));
    st->entries = rp.ents;
    st->n_entries = rp.n - skip;
    rp.ents = NULL;
    st->hs = w->hs;
    st->node_id = w->node_id;
    st->cluster_id = w->cluster_id;
    /* Open the tail for appending, repairing a torn write first. */
    const struct segment *tl = &segs[n_segs - 1];
    seg_name(path, sizeof(path), w->dir, tl->seq, tl->first_index);
    if (torn) {
        if ((rv = repair_tail(path, tail_end, w->seg_size)) != 0) {
            set_errf(err, errlen, "wal: cannot repair %s: %s", path, strerror(-rv));
            goto fail;
        }
        st->repaired = true;
        set_errf(err, errlen, "wal: %s: repaired a torn tail at offset %zu", path, tail_end);
    }
    w->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (w->fd < 0 || (!torn && (rv = prealloc(w->fd, w->seg_size)) != 0)) {
        rv = rv ? rv : -errno;
        set_errf(err, errlen, "wal: cannot open %s: %s", path, strerror(-rv));
        goto fail;
    }
    if (w->ahead) {
        /* where extents cannot be told (no FIEMAP: tmpfs, ...), writing
         * ahead gains nothing and a spare would only take the space; a
         * zero fill that fails leaves the rest as it was (zeros to the
         * reader either way), and the appends find out about the disk */
        int u = wal__unwritten(w->fd, tail_end, w->seg_size);
        if (u < 0)
            w->ahead = false;
        else if (u == 1)
            (void)zero_fill(w->fd, tail_end, w->seg_size);
    }
    w->off = tail_end;
    w->hdr_end = padded(1 + SEG_PAYLOAD) + padded(1 + META_PAYLOAD);
    w->segs = segs;
    w->n_segs = w->cap_segs = n_segs;
    free(rp.marks);
    spare_start(w);
    *out = w;
    return 0;
fail:
    free(rp.ents);
    free(rp.marks);
    free(segs);
    wal_state_free(st);
    wal_close(w);
    return rv;
}

/* ------------------------------------------------------------------ dump */

int wal_dump(const char *data_dir, wal_record_fn fn, void *arg, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    wal_dir_of(dir, sizeof(dir), data_dir, NULL);
    return wal_dump_dir(dir, fn, arg, err, errlen);
}

int wal_dump_dir(const char *dir, wal_record_fn fn, void *arg, char *err, size_t errlen)
{
    char path[PATH_MAX];
    struct segment *segs = NULL;
    size_t n_segs = 0;
    int rv = list_segments(dir, false, &segs, &n_segs);
    if (rv == 0 && n_segs == 0)
        rv = -ENOENT;
    if (rv != 0) {
        set_errf(err, errlen, "wal: no WAL in %s: %s", dir, strerror(-rv));
        free(segs);
        return rv;
    }
    for (size_t i = 0; i < n_segs && rv == 0; i++) {
        seg_name(path, sizeof(path), dir, segs[i].seq, segs[i].first_index);
        uint8_t *buf;
        size_t end, next;
        enum scan_status ss;
        if ((rv = read_segment(path, &buf, &end, &next, &ss)) != 0) {
            set_errf(err, errlen, "wal: cannot read %s: %s", path, strerror(-rv));
            break;
        }
        for (size_t off = 0; off < end && rv == 0;) {
            struct wal_record r;
            r.path = path;
            r.offset = off;
            decode(buf + off, &r);
            rv = fn(&r, arg);
            off += padded(r.len);
        }
        free(buf);
        if (rv != 0)
            break;
        if (ss == SCAN_CORRUPT) {
            set_errf(err, errlen,
                    "%s: corrupt record at offset %zu (a valid record follows at offset %zu)", path,
                    end, next);
            rv = QERR_CORRUPT;
        } else if (ss == SCAN_TORN && i + 1 < n_segs) {
            set_errf(err, errlen,
                    "%s: corrupt or partial record at offset %zu (not the last segment)", path,
                    end);
            rv = QERR_CORRUPT;
        } else if (ss == SCAN_TORN) {
            set_errf(err, errlen, "%s: torn tail at offset %zu (wal_open would cut it there)", path,
                    end);
            rv = 1;
        }
    }
    free(segs);
    return rv;
}
