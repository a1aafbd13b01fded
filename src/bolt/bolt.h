/* bolt/bolt.h: bbolt's file format (etcd's backend), read and written.
 *
 * The format (etcd-io/bbolt v1.3, as etcd 3.4 vendors it), little-endian:
 *
 *   page      16-byte header: id u64, flags u16 (0x01 branch, 0x02 leaf,
 *             0x04 meta, 0x10 freelist), count u16, overflow u32 (the page
 *             spans 1+overflow pages), then its data.
 *   meta      pages 0 and 1: magic u32 0xED0CDAED, version u32 2, pageSize
 *             u32, flags u32, root bucket {root pgid u64, sequence u64},
 *             freelist pgid u64, pgid u64 (pages in use: the file's high
 *             water mark), txid u64, checksum u64 (FNV-1a 64 of the 56
 *             bytes before it). The valid one with the higher txid wins.
 *   branch    count elements {pos u32, ksize u32, pgid u64}; the key is at
 *             the element's address + pos.
 *   leaf      count elements {flags u32 (0x01: a bucket), pos u32, ksize
 *             u32, vsize u32}; key at element + pos, value right after.
 *   bucket    a leaf value {root pgid u64, sequence u64}; root 0 means an
 *             inline bucket: the rest of the value is a leaf page.
 *   freelist  count ids u64 (count 0xFFFF: the first u64 is the count).
 *             etcd writes none (NoFreelistSync: the meta's freelist is
 *             2^64-1); bbolt then takes the unreachable pages as free.
 *
 * The READER never trusts the file: every page id, offset and length is
 * checked against the file, keys must ascend, trees are at most
 * BOLT_MAX_DEPTH deep and a cursor refuses a page it already visited (so a
 * hostile file ends in an error, never a crash, an endless loop or an
 * exponential walk). Errors are QERR_CORRUPT with a text in err.
 *
 * The WRITER streams a compact file (page size 4096) from buckets fed in
 * key order: pages are given ids in the order they are written (2, 3,
 * ...), leaves as they fill, branch levels and the bucket's root when the
 * bucket ends, the root bucket last, then an empty freelist page and the
 * two meta pages (written last at offsets 0 and 4096, so the fd must be a
 * regular file). Every page is used, so bbolt's tx.Check finds nothing to
 * say. Buckets are never written inline. */
#ifndef QUORUM_BOLT_BOLT_H
#define QUORUM_BOLT_BOLT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BOLT_MAGIC 0xED0CDAEDu
#define BOLT_VERSION 2u
#define BOLT_PAGE 4096u
#define BOLT_MAX_DEPTH 64

/* ---- reader ---- */

typedef struct bolt_db bolt_db;

/* A bucket as found: its root page, or its inline page (root 0). */
struct bolt_bucket {
    uint64_t root;
    uint64_t sequence;
    const uint8_t *inl; /* inline leaf page (root == 0) */
    size_t inl_len;
};

/* bolt_open_mem reads a db held in |data| (|len| bytes; bytes past the
 * meta's high water mark, e.g. a snapshot's digest, are ignored). |data|
 * must outlive the db. bolt_open_file maps |path| read-only; |limit| > 0
 * reads only its first |limit| bytes. Errors: QERR_CORRUPT (the texts are
 * bbolt's: "invalid database", "version mismatch", "checksum error", or
 * what is out of bounds), -errno, -ENOMEM. */
int bolt_open_mem(const uint8_t *data, size_t len, bolt_db **out, char *err, size_t errlen);
int bolt_open_file(const char *path, uint64_t limit, bolt_db **out, char *err, size_t errlen);
void bolt_close(bolt_db *db);

uint32_t bolt_page_size(const bolt_db *db);
uint64_t bolt_txid(const bolt_db *db);
uint64_t bolt_pgid(const bolt_db *db);       /* pages in use */
uint64_t bolt_size(const bolt_db *db);       /* pgid * page size: bbolt's tx.Size() */
struct bolt_bucket bolt_root(const bolt_db *db);

/* bolt_bucket_get finds the sub-bucket |name| of |parent|. 0, -ENOENT
 * (absent, or a plain key of that name), QERR_CORRUPT. */
int bolt_bucket_get(bolt_db *db, const struct bolt_bucket *parent, const void *name, size_t len,
                    struct bolt_bucket *out, char *err, size_t errlen);

/* A cursor over one bucket's elements in key order. */
struct bolt_cursor_frame {
    const uint8_t *page; /* page start */
    size_t span;         /* bytes the page may use */
    unsigned count, index;
    bool leaf;
};

typedef struct bolt_cursor {
    bolt_db *db;
    struct bolt_cursor_frame st[BOLT_MAX_DEPTH];
    int depth; /* frames in use; -1 before first, done when 0 after the start */
    bool started, done;
    uint8_t *seen;     /* visited-page bitmap */
    uint8_t *last_key; /* previous key (ascending check) */
    size_t last_len, last_cap;
    char *err;
    size_t errlen;
} bolt_cursor;

struct bolt_item {
    const uint8_t *key, *val;
    size_t klen, vlen;
    bool bucket; /* the value is a bucket header (bolt_item_bucket) */
};

/* bolt_cursor_open starts a cursor over |b|; bolt_cursor_next gives the
 * next element: 1 and *it, 0 at the end, QERR_CORRUPT (err filled) or
 * -ENOMEM. bolt_cursor_close frees it. */
int bolt_cursor_open(bolt_cursor *c, bolt_db *db, const struct bolt_bucket *b, char *err,
                     size_t errlen);
int bolt_cursor_next(bolt_cursor *c, struct bolt_item *it);
void bolt_cursor_close(bolt_cursor *c);

/* bolt_item_bucket decodes an element's bucket header. QERR_CORRUPT. */
int bolt_item_bucket(bolt_db *db, const struct bolt_item *it, struct bolt_bucket *out, char *err,
                     size_t errlen);

/* bolt_check does what bbolt's tx.Check does: every page below the high
 * water mark is reachable exactly once from the root (buckets nested at
 * most |max_nest| deep) or free, every reachable page is a branch or leaf.
 * 0, or the number of errors (> 0) with the first in |err| in bbolt's
 * words ("page 5: unreachable unfreed"); < 0 on a read error. */
int bolt_check(bolt_db *db, int max_nest, char *err, size_t errlen);

/* ---- writer ---- */

typedef struct bolt_writer bolt_writer;

/* bolt_writer_new starts a db on |fd| (a regular file, empty, written from
 * offset 0; the caller keeps and closes it). */
int bolt_writer_new(int fd, bolt_writer **out);
/* bolt_writer_begin opens bucket |name| inside the bucket open now (the
 * root first); bolt_writer_put adds a key/value to the bucket open now;
 * bolt_writer_end closes the bucket open now. Within a bucket keys (and
 * the names of buckets begun in it) must strictly ascend: -EINVAL.
 * Errors also -errno (write), -ENOMEM, -EFBIG (a key over 32 KiB or a
 * value over 2 GiB). */
int bolt_writer_begin(bolt_writer *w, const void *name, size_t len);
int bolt_writer_put(bolt_writer *w, const void *k, size_t klen, const void *v, size_t vlen);
int bolt_writer_end(bolt_writer *w);
/* bolt_writer_finish writes the root bucket, the freelist and the meta
 * pages (transaction |txid|, at least 1); every bucket must be ended.
 * |size| (may be NULL) gets the file's length. Does not fsync. */
int bolt_writer_finish(bolt_writer *w, uint64_t txid, uint64_t *size);
void bolt_writer_free(bolt_writer *w);

/* bolt_fnv64a is FNV-1a 64 (the meta checksum). */
uint64_t bolt_fnv64a(const void *p, size_t n);

#endif
