/* bolt/bolt.c: see bolt.h. The reader checks every number the file gives
 * before using it; the writer lays pages out bottom-up in one pass. */
#include "bolt/bolt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

#define HDR 16  /* page header */
#define ELEM 16 /* branch and leaf element headers are both 16 bytes */
#define META_SUM_LEN 56
#define F_BRANCH 0x01
#define F_LEAF 0x02
#define F_META 0x04
#define F_FREELIST 0x10
#define LEAF_BUCKET 0x01
#define MAX_KEY 32768
#define MAX_VALUE ((1ull << 31) - 2)

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t bolt_fnv64a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return QERR_CORRUPT;
}

/* ---- reader ---- */

struct bolt_db {
    const uint8_t *data;
    size_t len;
    void *map;
    size_t maplen;
    uint32_t psize;
    uint64_t pgid, txid, freelist;
    struct bolt_bucket root;
};

struct meta {
    uint32_t magic, version, psize, flags;
    uint64_t root, seq, freelist, pgid, txid, sum;
};

/* read_meta decodes the meta at |off| (bbolt's meta.validate order: magic,
 * version, checksum). */
static int read_meta(const uint8_t *data, size_t len, size_t off, struct meta *m, const char **why)
{
    if (off > len || len - off < HDR + 64) {
        *why = "invalid database";
        return -1;
    }
    const uint8_t *p = data + off + HDR;
    m->magic = le32(p);
    m->version = le32(p + 4);
    m->psize = le32(p + 8);
    m->flags = le32(p + 12);
    m->root = le64(p + 16);
    m->seq = le64(p + 24);
    m->freelist = le64(p + 32);
    m->pgid = le64(p + 40);
    m->txid = le64(p + 48);
    m->sum = le64(p + 56);
    if (m->magic != BOLT_MAGIC) {
        *why = "invalid database";
        return -1;
    }
    if (m->version != BOLT_VERSION) {
        *why = "version mismatch";
        return -1;
    }
    if (m->sum != bolt_fnv64a(p, META_SUM_LEN)) {
        *why = "checksum error";
        return -1;
    }
    return 0;
}

int bolt_open_mem(const uint8_t *data, size_t len, bolt_db **out, char *err, size_t errlen)
{
    *out = NULL;
    struct meta m0, m1;
    const char *why0 = NULL, *why1 = NULL;
    int r0 = read_meta(data, len, 0, &m0, &why0);
    /* as bbolt: the page size is meta 0's, or the OS page size when meta 0
     * is unreadable */
    uint32_t psize = BOLT_PAGE;
    if (r0 == 0) {
        if (m0.psize < 512 || m0.psize > 65536 || (m0.psize & (m0.psize - 1)) != 0)
            return fail(err, errlen, "invalid database");
        psize = m0.psize;
    }
    int r1 = read_meta(data, len, psize, &m1, &why1);
    if (r1 == 0 && m1.psize != psize)
        r1 = -1, why1 = "invalid database";
    if (r0 != 0 && r1 != 0)
        return fail(err, errlen, "%s", why0);
    const struct meta *m = r0 != 0 ? &m1 : r1 != 0 ? &m0 : m1.txid > m0.txid ? &m1 : &m0;
    uint64_t have = len / psize;
    if (m->pgid < 3)
        return fail(err, errlen, "invalid database: high water mark %llu",
                    (unsigned long long)m->pgid);
    if (m->pgid > have)
        return fail(err, errlen, "file size too small: %zu bytes, the database spans %llu pages",
                    len, (unsigned long long)m->pgid);
    if (m->root < 2 || m->root >= m->pgid)
        return fail(err, errlen, "root bucket page %llu: out of bounds: %llu",
                    (unsigned long long)m->root, (unsigned long long)m->pgid);
    if (m->freelist >= m->pgid && m->freelist != UINT64_MAX)
        return fail(err, errlen, "freelist page %llu: out of bounds: %llu",
                    (unsigned long long)m->freelist, (unsigned long long)m->pgid);
    bolt_db *db = calloc(1, sizeof(*db));
    if (db == NULL)
        return -ENOMEM;
    db->data = data;
    db->len = len;
    db->psize = psize;
    db->pgid = m->pgid;
    db->txid = m->txid;
    db->freelist = m->freelist;
    db->root.root = m->root;
    db->root.sequence = m->seq;
    *out = db;
    return 0;
}

int bolt_open_file(const char *path, uint64_t limit, bolt_db **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "open %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        snprintf(err, errlen, "stat %s: %s", path, strerror(e));
        return -e;
    }
    size_t len = (size_t)st.st_size;
    if (limit > 0 && limit < len)
        len = (size_t)limit;
    if (len == 0) {
        close(fd);
        return fail(err, errlen, "invalid database");
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "mmap %s: %s", path, strerror(e));
        return -e;
    }
    int rv = bolt_open_mem(map, len, out, err, errlen);
    if (rv != 0) {
        munmap(map, len);
        return rv;
    }
    (*out)->map = map;
    (*out)->maplen = len;
    return 0;
}

void bolt_close(bolt_db *db)
{
    if (db == NULL)
        return;
    if (db->map != NULL)
        munmap(db->map, db->maplen);
    free(db);
}

uint32_t bolt_page_size(const bolt_db *db) { return db->psize; }
uint64_t bolt_txid(const bolt_db *db) { return db->txid; }
uint64_t bolt_pgid(const bolt_db *db) { return db->pgid; }
uint64_t bolt_size(const bolt_db *db) { return db->pgid * db->psize; }
struct bolt_bucket bolt_root(const bolt_db *db) { return db->root; }

/* page_at checks page |id| (its overflow included) and answers its start
 * and span. */
static int page_at(const bolt_db *db, uint64_t id, const uint8_t **pg, size_t *span, char *err,
                   size_t errlen)
{
    if (id < 2 || id >= db->pgid)
        return fail(err, errlen, "page %llu: out of bounds: %llu", (unsigned long long)id,
                    (unsigned long long)db->pgid);
    const uint8_t *p = db->data + id * db->psize;
    uint64_t ovf = le32(p + 12);
    if (ovf >= db->pgid - id)
        return fail(err, errlen, "page %llu: overflow %llu past the high water mark %llu",
                    (unsigned long long)id, (unsigned long long)ovf, (unsigned long long)db->pgid);
    if (le64(p) != id)
        return fail(err, errlen, "page %llu: header says page %llu", (unsigned long long)id,
                    (unsigned long long)le64(p));
    *pg = p;
    *span = (size_t)((ovf + 1) * db->psize);
    return 0;
}

static const char *type_name(uint16_t f)
{
    switch (f) {
    case F_BRANCH:
        return "branch";
    case F_LEAF:
        return "leaf";
    case F_META:
        return "meta";
    case F_FREELIST:
        return "freelist";
    default:
        return "unknown";
    }
}

/* frame_set checks a branch or leaf page's element table. */
static int frame_set(struct bolt_cursor_frame *f, const uint8_t *pg, size_t span, uint64_t id,
                     char *err, size_t errlen)
{
    uint16_t flags = le16(pg + 8);
    unsigned count = le16(pg + 10);
    if (flags != F_BRANCH && flags != F_LEAF)
        return fail(err, errlen, "page %llu: invalid type: %s", (unsigned long long)id,
                    type_name(flags));
    if (HDR + (size_t)count * ELEM > span)
        return fail(err, errlen, "page %llu: %u elements do not fit", (unsigned long long)id,
                    count);
    if (flags == F_BRANCH && count == 0)
        return fail(err, errlen, "page %llu: empty branch", (unsigned long long)id);
    f->page = pg;
    f->span = span;
    f->count = count;
    f->index = 0;
    f->leaf = flags == F_LEAF;
    return 0;
}

static int push_page(bolt_cursor *c, uint64_t id)
{
    if (c->depth >= BOLT_MAX_DEPTH)
        return fail(c->err, c->errlen, "page %llu: tree deeper than %d", (unsigned long long)id,
                    BOLT_MAX_DEPTH);
    if (id < c->db->pgid && (c->seen[id / 8] & (1u << (id % 8))))
        return fail(c->err, c->errlen, "page %llu: multiple references", (unsigned long long)id);
    const uint8_t *pg = NULL;
    size_t span = 0; /* set by page_at when it succeeds; gcc -O3 cannot tell */
    int rv = page_at(c->db, id, &pg, &span, c->err, c->errlen);
    if (rv == 0)
        rv = frame_set(&c->st[c->depth], pg, span, id, c->err, c->errlen);
    if (rv != 0)
        return rv;
    c->seen[id / 8] |= (uint8_t)(1u << (id % 8));
    c->depth++;
    return 0;
}

int bolt_cursor_open(bolt_cursor *c, bolt_db *db, const struct bolt_bucket *b, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->db = db;
    c->err = err;
    c->errlen = errlen;
    c->seen = calloc((size_t)(db->pgid / 8 + 1), 1);
    if (c->seen == NULL)
        return -ENOMEM;
    int rv;
    if (b->root == 0) {
        if (b->inl == NULL || b->inl_len < HDR)
            rv = fail(err, errlen, "inline bucket: %zu bytes", b->inl_len);
        else if (le16(b->inl + 8) != F_LEAF)
            rv = fail(err, errlen, "inline bucket: invalid type: %s", type_name(le16(b->inl + 8)));
        else if ((rv = frame_set(&c->st[0], b->inl, b->inl_len, 0, err, errlen)) == 0)
            c->depth = 1;
    } else {
        rv = push_page(c, b->root);
    }
    if (rv != 0) {
        bolt_cursor_close(c);
        return rv;
    }
    return 0;
}

void bolt_cursor_close(bolt_cursor *c)
{
    free(c->seen);
    free(c->last_key);
    c->seen = NULL;
    c->last_key = NULL;
    c->depth = 0;
    c->done = true;
}

int bolt_cursor_next(bolt_cursor *c, struct bolt_item *it)
{
    if (c->done || c->seen == NULL)
        return 0;
    while (c->depth > 0) {
        struct bolt_cursor_frame *f = &c->st[c->depth - 1];
        if (f->index >= f->count) {
            c->depth--;
            continue;
        }
        size_t eoff = HDR + (size_t)f->index * ELEM;
        const uint8_t *e = f->page + eoff;
        f->index++;
        if (!f->leaf) {
            uint64_t pos = le32(e), ks = le32(e + 4);
            if (eoff + pos + ks > f->span)
                return fail(c->err, c->errlen, "branch element out of its page");
            int rv = push_page(c, le64(e + 8));
            if (rv != 0)
                return rv;
            continue;
        }
        uint32_t flags = le32(e);
        uint64_t pos = le32(e + 4), ks = le32(e + 8), vs = le32(e + 12);
        if (eoff + pos + ks + vs > f->span)
            return fail(c->err, c->errlen, "leaf element out of its page");
        const uint8_t *k = f->page + eoff + pos;
        if (c->started) {
            size_t n = ks < c->last_len ? ks : c->last_len;
            int cmp = n ? memcmp(c->last_key, k, n) : 0;
            if (cmp > 0 || (cmp == 0 && c->last_len >= ks))
                return fail(c->err, c->errlen, "keys out of order");
        }
        if (ks > c->last_cap) {
            uint8_t *nk = realloc(c->last_key, ks);
            if (nk == NULL)
                return -ENOMEM;
            c->last_key = nk;
            c->last_cap = ks;
        }
        if (ks > 0)
            memcpy(c->last_key, k, ks);
        c->last_len = ks;
        c->started = true;
        it->key = k;
        it->klen = ks;
        it->val = k + ks;
        it->vlen = vs;
        it->bucket = (flags & LEAF_BUCKET) != 0;
        return 1;
    }
    c->done = true;
    return 0;
}

int bolt_item_bucket(bolt_db *db, const struct bolt_item *it, struct bolt_bucket *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!it->bucket || it->vlen < 16)
        return fail(err, errlen, "bucket header of %zu bytes", it->vlen);
    out->root = le64(it->val);
    out->sequence = le64(it->val + 8);
    if (out->root == 0) {
        out->inl = it->val + 16;
        out->inl_len = it->vlen - 16;
        if (out->inl_len < HDR)
            return fail(err, errlen, "inline bucket of %zu bytes", out->inl_len);
    } else if (out->root < 2 || out->root >= db->pgid) {
        return fail(err, errlen, "page %llu: out of bounds: %llu", (unsigned long long)out->root,
                    (unsigned long long)db->pgid);
    }
    return 0;
}

int bolt_bucket_get(bolt_db *db, const struct bolt_bucket *parent, const void *name, size_t len,
                    struct bolt_bucket *out, char *err, size_t errlen)
{
    bolt_cursor c;
    int rv = bolt_cursor_open(&c, db, parent, err, errlen);
    if (rv != 0)
        return rv;
    struct bolt_item it;
    rv = -ENOENT;
    int r;
    while ((r = bolt_cursor_next(&c, &it)) == 1) {
        if (it.klen == len && memcmp(it.key, name, len) == 0) {
            rv = it.bucket ? bolt_item_bucket(db, &it, out, err, errlen) : -ENOENT;
            break;
        }
    }
    if (r < 0)
        rv = r;
    bolt_cursor_close(&c);
    return rv;
}

/* ---- check ---- */

struct check {
    bolt_db *db;
    uint8_t *reach, *freed;
    int errors;
    char *err;
    size_t errlen, used;
};

static void check_err(struct check *k, const char *fmt, ...)
{
    k->errors++;
    if (k->err == NULL || k->used + 2 >= k->errlen)
        return;
    if (k->used > 0)
        k->err[k->used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(k->err + k->used, k->errlen - k->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        k->used += (size_t)n < k->errlen - k->used ? (size_t)n : k->errlen - k->used - 1;
}

static bool bit(const uint8_t *m, uint64_t i) { return (m[i / 8] >> (i % 8)) & 1; }
static void set_bit(uint8_t *m, uint64_t i) { m[i / 8] |= (uint8_t)(1u << (i % 8)); }

static int check_bucket(struct check *k, const struct bolt_bucket *b, int nest, int max_nest);

/* check_page walks the tree under page |id| marking what it reaches. */
static int check_page(struct check *k, uint64_t id, int depth, int nest, int max_nest)
{
    bolt_db *db = k->db;
    if (id >= db->pgid || id < 2) {
        check_err(k, "page %llu: out of bounds: %llu", (unsigned long long)id,
                  (unsigned long long)db->pgid);
        return 0;
    }
    if (depth > BOLT_MAX_DEPTH) {
        check_err(k, "page %llu: tree deeper than %d", (unsigned long long)id, BOLT_MAX_DEPTH);
        return 0;
    }
    char tmp[160];
    const uint8_t *pg;
    size_t span;
    if (page_at(db, id, &pg, &span, tmp, sizeof(tmp)) != 0) {
        check_err(k, "%s", tmp);
        return 0;
    }
    uint64_t ovf = le32(pg + 12);
    for (uint64_t i = id; i <= id + ovf; i++) {
        if (bit(k->reach, i)) {
            check_err(k, "page %llu: multiple references", (unsigned long long)i);
            return 0;
        }
        set_bit(k->reach, i);
    }
    struct bolt_cursor_frame f;
    if (frame_set(&f, pg, span, id, tmp, sizeof(tmp)) != 0) {
        check_err(k, "%s", tmp);
        return 0;
    }
    for (unsigned i = 0; i < f.count; i++) {
        size_t eoff = HDR + (size_t)i * ELEM;
        const uint8_t *e = pg + eoff;
        if (!f.leaf) {
            if (eoff + (uint64_t)le32(e) + le32(e + 4) > span) {
                check_err(k, "page %llu: element %u out of its page", (unsigned long long)id, i);
                continue;
            }
            int rv = check_page(k, le64(e + 8), depth + 1, nest, max_nest);
            if (rv < 0)
                return rv;
            continue;
        }
        uint64_t pos = le32(e + 4), ks = le32(e + 8), vs = le32(e + 12);
        if (eoff + pos + ks + vs > span) {
            check_err(k, "page %llu: element %u out of its page", (unsigned long long)id, i);
            continue;
        }
        if (le32(e) & LEAF_BUCKET) {
            struct bolt_item it = {.key = pg + eoff + pos, .klen = ks, .val = pg + eoff + pos + ks,
                                   .vlen = vs, .bucket = true};
            struct bolt_bucket sub;
            if (bolt_item_bucket(db, &it, &sub, tmp, sizeof(tmp)) != 0) {
                check_err(k, "%s", tmp);
                continue;
            }
            int rv = check_bucket(k, &sub, nest + 1, max_nest);
            if (rv < 0)
                return rv;
        }
    }
    return 0;
}

static int check_bucket(struct check *k, const struct bolt_bucket *b, int nest, int max_nest)
{
    if (nest > max_nest) {
        check_err(k, "buckets nested deeper than %d", max_nest);
        return 0;
    }
    if (b->root != 0)
        return check_page(k, b->root, 0, nest, max_nest);
    /* an inline bucket: no pages, but its own sub-buckets */
    char tmp[160];
    bolt_cursor c;
    int rv = bolt_cursor_open(&c, k->db, b, tmp, sizeof(tmp));
    if (rv == QERR_CORRUPT) {
        check_err(k, "%s", tmp);
        return 0;
    }
    if (rv != 0)
        return rv;
    struct bolt_item it;
    while ((rv = bolt_cursor_next(&c, &it)) == 1) {
        if (!it.bucket)
            continue;
        struct bolt_bucket sub;
        if (bolt_item_bucket(k->db, &it, &sub, tmp, sizeof(tmp)) != 0) {
            check_err(k, "%s", tmp);
            continue;
        }
        if ((rv = check_bucket(k, &sub, nest + 1, max_nest)) < 0)
            break;
    }
    if (rv == QERR_CORRUPT) {
        check_err(k, "%s", tmp);
        rv = 0;
    }
    bolt_cursor_close(&c);
    return rv;
}

int bolt_check(bolt_db *db, int max_nest, char *err, size_t errlen)
{
    struct check k = {.db = db, .err = err, .errlen = errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    size_t mlen = (size_t)(db->pgid / 8 + 1);
    k.reach = calloc(mlen, 1);
    k.freed = calloc(mlen, 1);
    if (k.reach == NULL || k.freed == NULL) {
        free(k.reach);
        free(k.freed);
        return -ENOMEM;
    }
    set_bit(k.reach, 0);
    set_bit(k.reach, 1);
    /* the freelist page and the ids it lists */
    if (db->freelist != UINT64_MAX) {
        const uint8_t *pg;
        size_t span;
        char tmp[160];
        if (page_at(db, db->freelist, &pg, &span, tmp, sizeof(tmp)) != 0) {
            check_err(&k, "%s", tmp);
        } else if (le16(pg + 8) != F_FREELIST) {
            check_err(&k, "page %llu: invalid freelist page: %s",
                      (unsigned long long)db->freelist, type_name(le16(pg + 8)));
        } else {
            for (uint64_t i = db->freelist; i <= db->freelist + le32(pg + 12); i++)
                set_bit(k.reach, i);
            uint64_t n = le16(pg + 10), off = HDR;
            if (n == 0xFFFF) {
                n = span >= HDR + 8 ? le64(pg + HDR) : 0;
                off += 8;
            }
            if (n > (span - off) / 8) {
                check_err(&k, "freelist page %llu: %llu ids do not fit",
                          (unsigned long long)db->freelist, (unsigned long long)n);
                n = 0;
            }
            for (uint64_t i = 0; i < n; i++) {
                uint64_t id = le64(pg + off + i * 8);
                if (id >= db->pgid) {
                    check_err(&k, "page %llu: out of bounds: %llu", (unsigned long long)id,
                              (unsigned long long)db->pgid);
                    continue;
                }
                if (bit(k.freed, id))
                    check_err(&k, "page %llu: already freed", (unsigned long long)id);
                set_bit(k.freed, id);
            }
        }
    }
    int rv = check_bucket(&k, &db->root, 0, max_nest);
    for (uint64_t i = 0; rv == 0 && i < db->pgid; i++) {
        /* without a freelist page (etcd syncs none: NoFreelistSync) the
         * free pages are the unreachable ones, as bbolt rebuilds them */
        bool r = bit(k.reach, i), f = bit(k.freed, i) || db->freelist == UINT64_MAX;
        if (!r && !f)
            check_err(&k, "page %llu: unreachable unfreed", (unsigned long long)i);
        else if (r && bit(k.freed, i))
            check_err(&k, "page %llu: reachable freed", (unsigned long long)i);
    }
    free(k.reach);
    free(k.freed);
    return rv < 0 ? rv : k.errors;
}

/* ---- writer ---- */

struct went {
    uint8_t *k, *v;
    size_t kl, vl;
    uint32_t flags;
};

struct wref {
    uint8_t *k;
    size_t kl;
    uint64_t pgid;
};

struct wbucket {
    uint8_t *name;
    size_t nlen;
    struct went *ents;
    size_t n, cap, bytes; /* bytes: keys and values of ents */
    struct wref *refs;
    size_t nrefs, caprefs;
    uint8_t *last;
    size_t lastlen;
    bool has_last;
};

struct bolt_writer {
    int fd;
    uint64_t next; /* next page id */
    uint8_t *out;  /* pages not yet written, starting at page out_first */
    size_t out_len, out_cap;
    uint64_t out_first;
    struct wbucket *stack;
    size_t depth, stack_cap;
    int error;
};

static int w_flush_out(bolt_writer *w)
{
    size_t off = 0;
    while (off < w->out_len) {
        ssize_t n = pwrite(w->fd, w->out + off, w->out_len - off,
                           (off_t)(w->out_first * BOLT_PAGE + off));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (size_t)n;
    }
    w->out_first += w->out_len / BOLT_PAGE;
    w->out_len = 0;
    return 0;
}

/* w_page reserves |npages| zeroed pages at the end of the output. */
static uint8_t *w_page(bolt_writer *w, size_t npages, uint64_t *id)
{
    size_t need = npages * BOLT_PAGE;
    if (w->out_len > 0 && w->out_len + need > (1u << 20)) {
        if ((w->error = w_flush_out(w)) != 0)
            return NULL;
    }
    if (w->out_len + need > w->out_cap) {
        size_t cap = w->out_cap ? w->out_cap : (1u << 20);
        while (cap < w->out_len + need)
            cap *= 2;
        uint8_t *o = realloc(w->out, cap);
        if (o == NULL) {
            w->error = -ENOMEM;
            return NULL;
        }
        w->out = o;
        w->out_cap = cap;
    }
    uint8_t *p = w->out + w->out_len;
    memset(p, 0, need);
    w->out_len += need;
    *id = w->next;
    w->next += npages;
    put64(p, *id);
    put32(p + 12, (uint32_t)(npages - 1));
    return p;
}

static int add_ref(struct wbucket *b, const uint8_t *k, size_t kl, uint64_t pgid)
{
    if (b->nrefs == b->caprefs) {
        size_t cap = b->caprefs ? 2 * b->caprefs : 16;
        struct wref *r = realloc(b->refs, cap * sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        b->refs = r;
        b->caprefs = cap;
    }
    uint8_t *c = malloc(kl ? kl : 1);
    if (c == NULL)
        return -ENOMEM;
    if (kl)
        memcpy(c, k, kl);
    b->refs[b->nrefs++] = (struct wref){c, kl, pgid};
    return 0;
}

/* flush_leaf writes the buffered elements as one leaf page (with
 * overflow when one element is larger than a page). */
static int flush_leaf(bolt_writer *w, struct wbucket *b)
{
    size_t size = HDR + b->n * ELEM + b->bytes;
    size_t npages = (size + BOLT_PAGE - 1) / BOLT_PAGE;
    uint64_t id;
    uint8_t *p = w_page(w, npages, &id);
    if (p == NULL)
        return w->error;
    put16(p + 8, F_LEAF);
    put16(p + 10, (uint16_t)b->n);
    size_t data = HDR + b->n * ELEM;
    for (size_t i = 0; i < b->n; i++) {
        struct went *e = &b->ents[i];
        uint8_t *el = p + HDR + i * ELEM;
        put32(el, e->flags);
        put32(el + 4, (uint32_t)(data - (HDR + i * ELEM)));
        put32(el + 8, (uint32_t)e->kl);
        put32(el + 12, (uint32_t)e->vl);
        if (e->kl)
            memcpy(p + data, e->k, e->kl);
        data += e->kl;
        if (e->vl)
            memcpy(p + data, e->v, e->vl);
        data += e->vl;
    }
    int rv = add_ref(b, b->n ? b->ents[0].k : (const uint8_t *)"", b->n ? b->ents[0].kl : 0, id);
    for (size_t i = 0; i < b->n; i++) {
        free(b->ents[i].k);
        free(b->ents[i].v);
    }
    b->n = 0;
    b->bytes = 0;
    return rv;
}

static int leaf_add(bolt_writer *w, struct wbucket *b, const void *k, size_t kl, const void *v,
                    size_t vl, uint32_t flags)
{
    if (kl == 0 || kl > MAX_KEY || vl > MAX_VALUE)
        return kl == 0 ? -EINVAL : -EFBIG;
    if (b->has_last) {
        size_t n = kl < b->lastlen ? kl : b->lastlen;
        int cmp = memcmp(b->last, k, n);
        if (cmp > 0 || (cmp == 0 && b->lastlen >= kl))
            return -EINVAL;
    }
    if (b->n > 0 && (HDR + (b->n + 1) * ELEM + b->bytes + kl + vl > BOLT_PAGE || b->n == 0xFFFF)) {
        int rv = flush_leaf(w, b);
        if (rv != 0)
            return rv;
    }
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        struct went *e = realloc(b->ents, cap * sizeof(*e));
        if (e == NULL)
            return -ENOMEM;
        b->ents = e;
        b->cap = cap;
    }
    struct went e = {.kl = kl, .vl = vl, .flags = flags};
    e.k = malloc(kl);
    e.v = malloc(vl ? vl : 1);
    uint8_t *last = realloc(b->last, kl);
    if (e.k == NULL || e.v == NULL || last == NULL) {
        free(e.k);
        free(e.v);
        if (last != NULL)
            b->last = last;
        return -ENOMEM;
    }
    memcpy(e.k, k, kl);
    if (vl)
        memcpy(e.v, v, vl);
    b->last = last;
    memcpy(b->last, k, kl);
    b->lastlen = kl;
    b->has_last = true;
    b->ents[b->n++] = e;
    b->bytes += kl + vl;
    return 0;
}

/* build_branches turns the bucket's leaves into a tree; answers its root. */
static int build_branches(bolt_writer *w, struct wbucket *b, uint64_t *root)
{
    if (b->n > 0 || b->nrefs == 0) {
        int rv = flush_leaf(w, b);
        if (rv != 0)
            return rv;
    }
    while (b->nrefs > 1) {
        struct wref *lvl = b->refs;
        size_t n = b->nrefs;
        b->refs = NULL;
        b->nrefs = b->caprefs = 0;
        int rv = 0;
        size_t i = 0;
        while (i < n && rv == 0) {
            size_t j = i, bytes = 0;
            while (j < n && (j == i || (HDR + (j - i + 1) * ELEM + bytes + lvl[j].kl <= BOLT_PAGE &&
                                        j - i < 0xFFFF))) {
                bytes += lvl[j].kl;
                j++;
            }
            size_t size = HDR + (j - i) * ELEM + bytes;
            uint64_t id;
            uint8_t *p = w_page(w, (size + BOLT_PAGE - 1) / BOLT_PAGE, &id);
            if (p == NULL) {
                rv = w->error;
                break;
            }
            put16(p + 8, F_BRANCH);
            put16(p + 10, (uint16_t)(j - i));
            size_t data = HDR + (j - i) * ELEM;
            for (size_t x = i; x < j; x++) {
                uint8_t *el = p + HDR + (x - i) * ELEM;
                put32(el, (uint32_t)(data - (HDR + (x - i) * ELEM)));
                put32(el + 4, (uint32_t)lvl[x].kl);
                put64(el + 8, lvl[x].pgid);
                if (lvl[x].kl)
                    memcpy(p + data, lvl[x].k, lvl[x].kl);
                data += lvl[x].kl;
            }
            rv = add_ref(b, lvl[i].k, lvl[i].kl, id);
            i = j;
        }
        for (size_t x = 0; x < n; x++)
            free(lvl[x].k);
        free(lvl);
        if (rv != 0)
            return rv;
    }
    *root = b->refs[0].pgid;
    return 0;
}

static void wbucket_free(struct wbucket *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->ents[i].k);
        free(b->ents[i].v);
    }
    for (size_t i = 0; i < b->nrefs; i++)
        free(b->refs[i].k);
    free(b->ents);
    free(b->refs);
    free(b->last);
    free(b->name);
    memset(b, 0, sizeof(*b));
}

int bolt_writer_new(int fd, bolt_writer **out)
{
    bolt_writer *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->fd = fd;
    w->next = 2;
    w->out_first = 2;
    w->stack = calloc(8, sizeof(*w->stack));
    if (w->stack == NULL) {
        free(w);
        return -ENOMEM;
    }
    w->stack_cap = 8;
    w->depth = 1; /* the root bucket */
    *out = w;
    return 0;
}

int bolt_writer_begin(bolt_writer *w, const void *name, size_t len)
{
    if (w->error)
        return w->error;
    if (len == 0 || len > MAX_KEY)
        return len == 0 ? -EINVAL : -EFBIG;
    struct wbucket *parent = &w->stack[w->depth - 1];
    if (parent->has_last) {
        size_t n = len < parent->lastlen ? len : parent->lastlen;
        int cmp = memcmp(parent->last, name, n);
        if (cmp > 0 || (cmp == 0 && parent->lastlen >= len))
            return -EINVAL;
    }
    if (w->depth == w->stack_cap) {
        struct wbucket *s = realloc(w->stack, 2 * w->stack_cap * sizeof(*s));
        if (s == NULL)
            return -ENOMEM;
        memset(s + w->stack_cap, 0, w->stack_cap * sizeof(*s));
        w->stack = s;
        w->stack_cap *= 2;
    }
    struct wbucket *b = &w->stack[w->depth];
    memset(b, 0, sizeof(*b));
    b->name = malloc(len);
    if (b->name == NULL)
        return -ENOMEM;
    memcpy(b->name, name, len);
    b->nlen = len;
    w->depth++;
    return 0;
}

int bolt_writer_put(bolt_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    if (w->error)
        return w->error;
    return leaf_add(w, &w->stack[w->depth - 1], k, klen, v, vlen, 0);
}

int bolt_writer_end(bolt_writer *w)
{
    if (w->error)
        return w->error;
    if (w->depth < 2)
        return -EINVAL;
    struct wbucket *b = &w->stack[w->depth - 1];
    uint64_t root;
    int rv = build_branches(w, b, &root);
    if (rv != 0)
        return w->error = rv;
    uint8_t hdr[16];
    put64(hdr, root);
    put64(hdr + 8, 0);
    rv = leaf_add(w, &w->stack[w->depth - 2], b->name, b->nlen, hdr, sizeof(hdr), LEAF_BUCKET);
    wbucket_free(b);
    w->depth--;
    return rv;
}

int bolt_writer_finish(bolt_writer *w, uint64_t txid, uint64_t *size)
{
    if (w->error)
        return w->error;
    if (w->depth != 1 || txid == 0)
        return -EINVAL;
    uint64_t root, fl;
    int rv = build_branches(w, &w->stack[0], &root);
    if (rv != 0)
        return w->error = rv;
    uint8_t *p = w_page(w, 1, &fl);
    if (p == NULL)
        return w->error;
    put16(p + 8, F_FREELIST);
    if ((rv = w_flush_out(w)) != 0)
        return w->error = rv;
    uint8_t meta[2 * BOLT_PAGE];
    memset(meta, 0, sizeof(meta));
    for (int i = 0; i < 2; i++) {
        uint8_t *pg = meta + i * BOLT_PAGE, *m = pg + HDR;
        put64(pg, (uint64_t)i);
        put16(pg + 8, F_META);
        put32(m, BOLT_MAGIC);
        put32(m + 4, BOLT_VERSION);
        put32(m + 8, BOLT_PAGE);
        put32(m + 12, 0);
        put64(m + 16, root);
        put64(m + 24, 0);
        put64(m + 32, fl);
        put64(m + 40, w->next);
        /* meta 1 one transaction behind, as bbolt leaves a file after a
         * commit: both valid, the newer one wins */
        put64(m + 48, i == 0 ? txid : txid - 1);
        put64(m + 56, bolt_fnv64a(m, META_SUM_LEN));
    }
    size_t off = 0;
    while (off < sizeof(meta)) {
        ssize_t n = pwrite(w->fd, meta + off, sizeof(meta) - off, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return w->error = -errno;
        }
        off += (size_t)n;
    }
    if (size != NULL)
        *size = w->next * BOLT_PAGE;
    return 0;
}

void bolt_writer_free(bolt_writer *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->depth; i++)
        wbucket_free(&w->stack[i]);
    free(w->stack);
    free(w->out);
    free(w);
}
