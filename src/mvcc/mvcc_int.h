/* mvcc/mvcc_int.h: mvcc's private pieces, included only by src/mvcc and its
 * tests: revision keys, the hand-written mvccpb.KeyValue codec, and the
 * in-memory key index. */
#ifndef QUORUM_MVCC_MVCC_INT_H
#define QUORUM_MVCC_MVCC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "mvcc/mvcc.h"

/* ---- revision keys (codec.c) ---------------------------------------- */

#define MVCC_REVKEY_LEN 17 /* main(8) '_' sub(8) */
#define MVCC_REVKEY_MAX 18 /* + 't' on tombstones */

/* mvcc_revkey_put writes the revision key of (main, sub) at |out| (room for
 * MVCC_REVKEY_MAX bytes), with a trailing 't' if |tomb|, and returns its
 * length (17 or 18). main and sub are written as 8-byte big-endian, so
 * memcmp order is (main, sub) order for non-negative revisions. */
size_t mvcc_revkey_put(uint8_t *out, int64_t main, int64_t sub, bool tomb);

/* mvcc_revkey_parse reads a revision key of |n| bytes. Returns 0, or
 * QERR_CORRUPT if it is not 17 bytes or 18 ending in 't', or the separator
 * is not '_'. */
int mvcc_revkey_parse(const uint8_t *p, size_t n, int64_t *main, int64_t *sub, bool *tomb);

/* ---- mvccpb.KeyValue (codec.c) --------------------------------------- */

/* mvcc_kv_encode appends the canonical protobuf encoding of |kv| to |b|:
 * fields in number order, zero/empty fields left out, exactly the bytes
 * protobuf-c or Go produce. |kv->raw| is ignored. Errors: -ENOMEM. */
int mvcc_kv_encode(struct buf *b, const struct mvcc_kv *kv);

/* mvcc_kv_encoded_size is the length mvcc_kv_encode would append. */
size_t mvcc_kv_encoded_size(const struct mvcc_kv *kv);

/* mvcc_kv_decode parses |n| bytes at |p| into |kv|, whose key/value/raw
 * then point into |p| (raw = p, raw_len = n). Absent fields are zero/empty
 * (key and value are then "" with length 0, never NULL). Unknown fields are
 * skipped. Errors: QERR_CORRUPT for malformed input. */
int mvcc_kv_decode(const uint8_t *p, size_t n, struct mvcc_kv *kv);

/* mvcc_set_rebuild_threads makes every later rebuild of the index (at
 * open) use |n| threads whatever the store's size and the CPUs (0: back
 * to choosing), so tests reach the threaded rebuild with small stores. */
void mvcc_set_rebuild_threads(int n);

/* ---- key index (kindex.c) --------------------------------------------- */

/* One revision of a key. Revisions of a key are kept in ascending order; a
 * tombstone ends a generation, so the key's state at revision R is given by
 * its latest revision <= R: absent if none or if that one is a tombstone. */
struct kindex_rev {
    int64_t main;
    uint32_t sub;
    uint32_t tomb; /* 1 = deletion */
};

/* An indexed key: one allocation holding the key bytes and its revisions.
 * It moves (realloc) when revisions are added: never keep a pointer to an
 * entry across a call that appends or compacts. */
struct kindex_entry {
    uint32_t klen;
    uint32_t nrev;
    uint32_t cap;
    uint8_t key[];
};

struct bt_leaf;
struct bt_inner;
struct bt_arena;

/* The index: a B+tree over the keys (memcmp order, shorter first on a tie)
 * whose leaves hold entry pointers and are chained for range scans. Inner
 * separators are truncated copies of keys kept in an arena. Keys are only
 * removed by compaction, which empties leaf slots in place and rebuilds the
 * tree when it becomes sparse. */
struct kindex {
    void *root;
    int height; /* 0 = root is a leaf */
    struct bt_leaf *first;
    size_t nkeys;
    size_t nleaves;
    size_t ninner;
    struct bt_arena *arena;
};

#define KINDEX_MAX_DEPTH 40

/* Where a key is or would go, with the path down to it, so a lookup can be
 * followed by an insert without a second descent. */
struct kindex_step {
    struct bt_inner *node;
    unsigned idx; /* child taken */
};
struct kindex_slot {
    struct bt_leaf *leaf;
    unsigned pos;
    bool found;
    struct kindex_step path[KINDEX_MAX_DEPTH];
};

/* Position in the leaf chain. */
struct kindex_iter {
    struct bt_leaf *leaf;
    unsigned i;
};

/* kindex_init makes an empty index. Errors: -ENOMEM. */
int kindex_init(struct kindex *ix);
/* kindex_free frees the index and every entry. */
void kindex_free(struct kindex *ix);

/* kindex_get returns the entry for |key|, or NULL. Valid until the next
 * call that changes the index. */
struct kindex_entry *kindex_get(const struct kindex *ix, const uint8_t *key, size_t klen);

/* kindex_append adds revision (main, sub, tomb) to |key|, creating the
 * entry if needed (a tombstone on an absent key is accepted, so a rebuild
 * tolerates any history; the store itself only deletes live keys).
 * Errors: -ENOMEM; -EINVAL if (main, sub) is not above the key's last
 * revision. */
int kindex_append(struct kindex *ix, const uint8_t *key, size_t klen, int64_t main, uint32_t sub,
                  bool tomb);

/* kindex_lookup returns the entry for |key| or NULL, like kindex_get, and
 * fills |slot| for kindex_slot_append. */
struct kindex_entry *kindex_lookup(const struct kindex *ix, const uint8_t *key, size_t klen,
                                   struct kindex_slot *slot);

/* kindex_slot_append is kindex_append at a |slot| filled by kindex_lookup
 * for the same key, with no change to the index in between. */
int kindex_slot_append(struct kindex *ix, struct kindex_slot *slot, const uint8_t *key, size_t klen,
                       int64_t main, uint32_t sub, bool tomb);

/* kindex_seek positions |it| on the first key >= |key|. */
void kindex_seek(const struct kindex *ix, const uint8_t *key, size_t klen, struct kindex_iter *it);
/* kindex_iter_get is the entry at |it|, or NULL at the end. */
struct kindex_entry *kindex_iter_get(struct kindex_iter *it);
/* kindex_iter_next moves past the current entry. */
void kindex_iter_next(struct kindex_iter *it);
/* kindex_iter_append appends to the entry at |it| (which must be valid),
 * as kindex_append, without a lookup; the iterator stays valid. */
int kindex_iter_append(struct kindex_iter *it, int64_t main, uint32_t sub, bool tomb);

static inline struct kindex_rev *kentry_revs(const struct kindex_entry *e)
{
    size_t off = (offsetof(struct kindex_entry, key) + e->klen + 7) & ~(size_t)7;
    return (struct kindex_rev *)((uint8_t *)e + off);
}

/* kentry_at returns the key's latest revision with main <= |rev| (possibly
 * a tombstone), or NULL if it has none. */
const struct kindex_rev *kentry_at(const struct kindex_entry *e, int64_t rev);

/* kindex_compact_fn is told the revisions about to be dropped from one key
 * (|n| of them, oldest first) so they can be deleted from LMDB. Non-zero
 * stops the compaction with that value. */
typedef int (*kindex_compact_fn)(const uint8_t *key, size_t klen, const struct kindex_rev *revs,
                                 size_t n, void *arg);

/* kindex_compact drops, from every key, the revisions below its latest one
 * with main <= |rev|, and that one too if it is a tombstone; keys left with
 * nothing are removed. Returns 0 or the first non-zero value of |fn|; on
 * such a stop the keys visited so far are compacted and the rest are not. */
int kindex_compact(struct kindex *ix, int64_t rev, kindex_compact_fn fn, void *arg);

/* kindex_compact_step is one bounded piece of kindex_compact: it starts at
 * the first key >= |from| (|from_len| 0: the first key), hands |fn| at most
 * |max_revs| revisions in all (a key with more gives its oldest ones and is
 * finished by a later step) and looks at no more than |max_keys| keys.
 * *|stop| is the entry where the next step must start (valid until the
 * index changes: copy its key), or NULL when the pass reached the end; the
 * tree is rebuilt then if compaction left it sparse. Between steps the
 * index may take any appends: keys added behind the position have nothing
 * at or below |rev| to drop. Returns 0 or |fn|'s non-zero value (then
 * *|stop| is the entry it refused, untouched). */
int kindex_compact_step(struct kindex *ix, int64_t rev, const uint8_t *from, size_t from_len,
                        size_t max_revs, size_t max_keys, kindex_compact_fn fn, void *arg,
                        const struct kindex_entry **stop);

/* Loading: an index built from records given in revision order (the
 * key database's order), for the rebuild at open. Much faster than
 * kindex_append per record: a hash table finds each key's entry, and the
 * tree is bulk-built once at the end.
 *   kindex_load_begin   starts an empty loader.
 *   kindex_load_add     as kindex_append (errors -ENOMEM, -EINVAL).
 *   kindex_load_finish  sorts the keys and builds the tree into |ix|
 *                       (whose old contents are freed); the loader is
 *                       then empty. On -ENOMEM |ix| is unchanged and the
 *                       loader still holds the entries: abort it.
 *   kindex_load_abort   frees everything the loader holds. */
struct kindex_loader {
    struct kindex_entry **ent; /* open addressing, |cap| a power of two */
    uint64_t *hash;
    size_t cap, n;
};
void kindex_load_begin(struct kindex_loader *ld);
int kindex_load_add(struct kindex_loader *ld, const uint8_t *key, size_t klen, int64_t main,
                    uint32_t sub, bool tomb);
/* kindex_load_add_many adds |n| records in order, as kindex_load_add each,
 * fetching the table's slots and entries of KINDEX_LOAD_GROUP records ahead
 * of the compares (the keys' memory must stay valid during the call). On an
 * error the records before the failing one were added. */
#define KINDEX_LOAD_GROUP 16
struct kindex_load_rec {
    const uint8_t *key;
    size_t klen;
    int64_t main;
    uint32_t sub;
    bool tomb;
};
int kindex_load_add_many(struct kindex_loader *ld, const struct kindex_load_rec *recs, size_t n);
/* kindex_load_merge moves everything |from| holds into |into|, where every
 * revision in |from| is above every revision of the same key in |into|
 * (loaders that read consecutive stretches of the history, in order): so
 * threads can each load a stretch. |from| is left empty. Errors: -ENOMEM,
 * -EINVAL (revisions out of order); then both still hold what they hold:
 * abort both. */
int kindex_load_merge(struct kindex_loader *into, struct kindex_loader *from);
int kindex_load_finish(struct kindex_loader *ld, struct kindex *ix);
void kindex_load_abort(struct kindex_loader *ld);

/* kindex_mem_bytes estimates the heap the index uses (entries, nodes,
 * arena), without malloc's own overhead. */
size_t kindex_mem_bytes(const struct kindex *ix);

#endif
