/* mvcc/kindex.c: the in-memory key index, a B+tree from user key to the
 * key's revisions.
 *
 * Memory is what this is about: one allocation per key holding the key
 * bytes and an array of 16-byte revisions (no per-revision or per-generation
 * objects: a tombstone in the array ends a generation), leaves of 64 entry
 * pointers chained for range scans, and inner nodes whose separators are
 * the shortest prefixes that split their neighbours, copied into an arena.
 *
 * Keys only leave the index through compaction, which is a full pass
 * anyway, so there is no per-key delete with rebalancing: compaction empties
 * slots in place (separators stay valid routing bounds because no key moves
 * between leaves) and rebuilds the tree in one bulk load when it has become
 * sparse. Between rebuilds the tree is insert-only, so separators are never
 * freed and the arena is a bump allocator. */
#include "base/buf.h"
#include "mvcc/mvcc_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LEAF_MAX 64
#define INNER_MAX 64
#define BULK_LEAF_FILL 48 /* bulk-built leaves are 3/4 full: room for inserts */
#define BULK_INNER_FILL 48
#define MAX_DEPTH KINDEX_MAX_DEPTH
#define ARENA_CHUNK 65536

struct bt_sep {
    uint32_t len;
    uint8_t b[];
};

struct bt_leaf {
    uint32_t n;
    struct bt_leaf *next;
    struct kindex_entry *e[LEAF_MAX];
};

/* child[i] holds the keys k with sep[i] <= k < sep[i+1]; sep[0] is unused. */
struct bt_inner {
    uint32_t n;
    const struct bt_sep *sep[INNER_MAX];
    void *child[INNER_MAX];
};

struct bt_arena {
    struct bt_arena *next;
    size_t used, cap;
    uint8_t data[];
};

static size_t revs_off(size_t klen)
{
    return (offsetof(struct kindex_entry, key) + klen + 7) & ~(size_t)7;
}

/* ---- arena ----------------------------------------------------------- */

static size_t sep_size(size_t len)
{
    return (sizeof(struct bt_sep) + len + 7) & ~(size_t)7;
}

/* arena_reserve makes sure the next |need| bytes can be taken without
 * failing, so a split can be prepared before the tree is touched. */
static int arena_reserve(struct bt_arena **head, size_t need)
{
    if (*head != NULL && (*head)->cap - (*head)->used >= need)
        return 0;
    size_t cap = need > ARENA_CHUNK ? need : ARENA_CHUNK;
    struct bt_arena *a = malloc(sizeof(*a) + cap);
    if (a == NULL)
        return -ENOMEM;
    a->used = 0;
    a->cap = cap;
    a->next = *head;
    *head = a;
    return 0;
}

/* make_sep copies the shortest prefix of |hi| that is > |lo| (lo < hi): a
 * separator routes exactly like hi itself but is usually much shorter. The
 * arena must have sep_size(hi_len) reserved. */
static const struct bt_sep *make_sep(struct bt_arena *a, const struct kindex_entry *lo,
                                     const struct kindex_entry *hi)
{
    size_t m = lo->klen < hi->klen ? lo->klen : hi->klen, p = 0;
    while (p < m && lo->key[p] == hi->key[p])
        p++;
    size_t len = p + 1 <= hi->klen ? p + 1 : hi->klen;
    struct bt_sep *s = (struct bt_sep *)(a->data + a->used);
    a->used += sep_size(len);
    s->len = (uint32_t)len;
    memcpy(s->b, hi->key, len);
    return s;
}

static void arena_free(struct bt_arena *a)
{
    while (a != NULL) {
        struct bt_arena *next = a->next;
        free(a);
        a = next;
    }
}

/* ---- search ------------------------------------------------------------ */

static struct bt_leaf *descend(const struct kindex *ix, const uint8_t *key, size_t klen,
                               struct kindex_slot *path)
{
    void *node = ix->root;
    for (int d = 0; d < ix->height; d++) {
        struct bt_inner *in = node;
        unsigned lo = 1, hi = in->n;
        while (lo < hi) {
            unsigned mid = (lo + hi) / 2;
            if (bytes_compare(in->sep[mid]->b, in->sep[mid]->len, key, klen) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (path != NULL) {
            path->path[d].node = in;
            path->path[d].idx = lo - 1;
        }
        node = in->child[lo - 1];
    }
    return node;
}

/* leaf_find is the first slot whose key is >= |key|; *eq tells a match. */
static unsigned leaf_find(const struct bt_leaf *l, const uint8_t *key, size_t klen, int *eq)
{
    unsigned lo = 0, hi = l->n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        const struct kindex_entry *e = l->e[mid];
        if (bytes_compare(e->key, e->klen, key, klen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *eq = lo < l->n && bytes_compare(l->e[lo]->key, l->e[lo]->klen, key, klen) == 0;
    return lo;
}

struct kindex_entry *kindex_get(const struct kindex *ix, const uint8_t *key, size_t klen)
{
    int eq;
    struct bt_leaf *l = descend(ix, key, klen, NULL);
    unsigned i = leaf_find(l, key, klen, &eq);
    return eq ? l->e[i] : NULL;
}

const struct kindex_rev *kentry_at(const struct kindex_entry *e, int64_t rev)
{
    const struct kindex_rev *r = kentry_revs(e);
    size_t n = e->nrev;
    /* The common case: reading at or after the key's last change. */
    if (n == 0)
        return NULL;
    if (r[n - 1].main <= rev)
        return &r[n - 1];
    size_t lo = 0, hi = n - 1; /* first index with main > rev is in [lo, hi] */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid].main <= rev)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? NULL : &r[lo - 1];
}

/* ---- insert ------------------------------------------------------------ */

static int entry_append(struct kindex_entry **slot, int64_t main, uint32_t sub, bool tomb)
{
    struct kindex_entry *e = *slot;
    struct kindex_rev *r = kentry_revs(e);
    if (e->nrev > 0) {
        const struct kindex_rev *last = &r[e->nrev - 1];
        if (main < last->main || (main == last->main && sub <= last->sub))
            return -EINVAL;
    }
    if (e->nrev == e->cap) {
        uint32_t cap = e->cap ? e->cap * 2 : 1;
        if (cap < e->cap)
            return -ENOMEM;
        e = realloc(e, revs_off(e->klen) + (size_t)cap * sizeof(struct kindex_rev));
        if (e == NULL)
            return -ENOMEM;
        e->cap = cap;
        *slot = e;
        r = kentry_revs(e);
    }
    r[e->nrev].main = main;
    r[e->nrev].sub = sub;
    r[e->nrev].tomb = tomb;
    e->nrev++;
    return 0;
}

static struct kindex_entry *entry_new_cap(const uint8_t *key, size_t klen, int64_t main,
                                          uint32_t sub, bool tomb, uint32_t cap)
{
    if (klen > UINT32_MAX)
        return NULL;
    struct kindex_entry *e = malloc(revs_off(klen) + cap * sizeof(struct kindex_rev));
    if (e == NULL)
        return NULL;
    e->klen = (uint32_t)klen;
    e->nrev = 1;
    e->cap = cap;
    if (klen)
        memcpy(e->key, key, klen);
    struct kindex_rev *r = kentry_revs(e);
    r->main = main;
    r->sub = sub;
    r->tomb = tomb;
    return e;
}

static struct kindex_entry *entry_new(const uint8_t *key, size_t klen, int64_t main, uint32_t sub,
                                      bool tomb)
{
    return entry_new_cap(key, klen, main, sub, tomb, 1);
}

static void inner_insert_at(struct bt_inner *in, unsigned pos, const struct bt_sep *sep,
                            void *child)
{
    memmove(&in->child[pos + 1], &in->child[pos], (in->n - pos) * sizeof(in->child[0]));
    memmove(&in->sep[pos + 1], &in->sep[pos], (in->n - pos) * sizeof(in->sep[0]));
    in->child[pos] = child;
    in->sep[pos] = sep;
    in->n++;
}

static void leaf_insert_at(struct bt_leaf *l, unsigned pos, struct kindex_entry *e)
{
    memmove(&l->e[pos + 1], &l->e[pos], (l->n - pos) * sizeof(l->e[0]));
    l->e[pos] = e;
    l->n++;
}

/* insert_entry puts |e| at slot |pos| of |leaf| (reached through |path|),
 * splitting up the tree as needed. Everything a split needs is allocated
 * first, so on -ENOMEM the tree is unchanged. */
static int insert_entry(struct kindex *ix, struct kindex_slot *slot, struct bt_leaf *leaf,
                        unsigned pos, struct kindex_entry *e)
{
    struct kindex_step *path = slot->path;
    if (leaf->n < LEAF_MAX) {
        leaf_insert_at(leaf, pos, e);
        return 0;
    }
    /* How many inner nodes split, and is a new root needed? */
    int d = ix->height - 1;
    while (d >= 0 && path[d].node->n == INNER_MAX)
        d--;
    int nsplit = ix->height - 1 - d; /* inner nodes that split */
    bool new_root = d < 0;
    void *fresh[MAX_DEPTH + 2];
    int nfresh = 1 + nsplit + (new_root ? 1 : 0);
    size_t maxk = e->klen;
    if (leaf->e[LEAF_MAX / 2]->klen > maxk)
        maxk = leaf->e[LEAF_MAX / 2]->klen;
    if (leaf->e[LEAF_MAX / 2 - 1]->klen > maxk)
        maxk = leaf->e[LEAF_MAX / 2 - 1]->klen;
    if (arena_reserve(&ix->arena, sep_size(maxk)) != 0)
        return -ENOMEM;
    for (int i = 0; i < nfresh; i++) {
        fresh[i] = calloc(1, i == 0 ? sizeof(struct bt_leaf) : sizeof(struct bt_inner));
        if (fresh[i] == NULL) {
            while (i-- > 0)
                free(fresh[i]);
            return -ENOMEM;
        }
    }

    /* Split the leaf in halves and put |e| in the one it belongs to. */
    struct bt_leaf *right = fresh[0];
    unsigned mid = LEAF_MAX / 2;
    right->n = LEAF_MAX - mid;
    memcpy(right->e, &leaf->e[mid], right->n * sizeof(leaf->e[0]));
    leaf->n = mid;
    right->next = leaf->next;
    leaf->next = right;
    ix->nleaves++;
    if (pos <= mid)
        leaf_insert_at(leaf, pos, e);
    else
        leaf_insert_at(right, pos - mid, e);
    const struct bt_sep *sep = make_sep(ix->arena, leaf->e[leaf->n - 1], right->e[0]);
    void *child = right;

    /* Carry (sep, child) up. */
    int f = 1;
    for (d = ix->height - 1; d >= 0; d--) {
        struct bt_inner *in = path[d].node;
        unsigned at = path[d].idx + 1;
        if (in->n < INNER_MAX) {
            inner_insert_at(in, at, sep, child);
            return 0;
        }
        struct bt_inner *r = fresh[f++];
        unsigned m = INNER_MAX / 2;
        const struct bt_sep *up = in->sep[m];
        r->n = INNER_MAX - m;
        memcpy(r->child, &in->child[m], r->n * sizeof(in->child[0]));
        memcpy(&r->sep[1], &in->sep[m + 1], (r->n - 1) * sizeof(in->sep[0]));
        r->sep[0] = NULL;
        in->n = m;
        ix->ninner++;
        if (at <= m)
            inner_insert_at(in, at, sep, child);
        else
            inner_insert_at(r, at - m, sep, child);
        sep = up;
        child = r;
    }
    struct bt_inner *root = fresh[f];
    root->n = 2;
    root->child[0] = ix->root;
    root->child[1] = child;
    root->sep[1] = sep;
    ix->root = root;
    ix->height++;
    ix->ninner++;
    return 0;
}

struct kindex_entry *kindex_lookup(const struct kindex *ix, const uint8_t *key, size_t klen,
                                   struct kindex_slot *slot)
{
    int eq;
    slot->leaf = descend(ix, key, klen, slot);
    slot->pos = leaf_find(slot->leaf, key, klen, &eq);
    slot->found = eq;
    return eq ? slot->leaf->e[slot->pos] : NULL;
}

int kindex_slot_append(struct kindex *ix, struct kindex_slot *slot, const uint8_t *key, size_t klen,
                       int64_t main, uint32_t sub, bool tomb)
{
    if (slot->found)
        return entry_append(&slot->leaf->e[slot->pos], main, sub, tomb);
    if (ix->height >= MAX_DEPTH)
        return -ENOMEM; /* cannot happen with fan-out >= 32 */
    struct kindex_entry *e = entry_new(key, klen, main, sub, tomb);
    if (e == NULL)
        return -ENOMEM;
    int rv = insert_entry(ix, slot, slot->leaf, slot->pos, e);
    if (rv != 0) {
        free(e);
        return rv;
    }
    ix->nkeys++;
    return 0;
}

int kindex_append(struct kindex *ix, const uint8_t *key, size_t klen, int64_t main, uint32_t sub,
                  bool tomb)
{
    struct kindex_slot slot;
    kindex_lookup(ix, key, klen, &slot);
    return kindex_slot_append(ix, &slot, key, klen, main, sub, tomb);
}

/* ---- iteration ----------------------------------------------------------- */

void kindex_seek(const struct kindex *ix, const uint8_t *key, size_t klen, struct kindex_iter *it)
{
    int eq;
    it->leaf = descend(ix, key, klen, NULL);
    it->i = leaf_find(it->leaf, key, klen, &eq);
}

struct kindex_entry *kindex_iter_get(struct kindex_iter *it)
{
    /* Compaction can leave empty leaves: skip them. */
    while (it->leaf != NULL && it->i >= it->leaf->n) {
        it->leaf = it->leaf->next;
        it->i = 0;
    }
    return it->leaf ? it->leaf->e[it->i] : NULL;
}

void kindex_iter_next(struct kindex_iter *it)
{
    it->i++;
}

int kindex_iter_append(struct kindex_iter *it, int64_t main, uint32_t sub, bool tomb)
{
    if (kindex_iter_get(it) == NULL)
        return -EINVAL;
    return entry_append(&it->leaf->e[it->i], main, sub, tomb);
}

/* ---- init / free / rebuild ----------------------------------------------- */

int kindex_init(struct kindex *ix)
{
    memset(ix, 0, sizeof(*ix));
    struct bt_leaf *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    ix->root = ix->first = l;
    ix->nleaves = 1;
    return 0;
}

static void free_nodes(void *node, int height)
{
    if (height > 0) {
        struct bt_inner *in = node;
        for (unsigned i = 0; i < in->n; i++)
            free_nodes(in->child[i], height - 1);
    }
    free(node);
}

void kindex_free(struct kindex *ix)
{
    if (ix->root == NULL)
        return;
    for (struct bt_leaf *l = ix->first; l != NULL; l = l->next)
        for (unsigned i = 0; i < l->n; i++)
            free(l->e[i]);
    free_nodes(ix->root, ix->height);
    arena_free(ix->arena);
    memset(ix, 0, sizeof(*ix));
}

/* bulk_build makes a fresh, densely packed tree in |nx| (zeroed) from |n|
 * entries in key order. On -ENOMEM nothing is left allocated (the entries
 * are the caller's). */
static int bulk_build(struct kindex *nx, struct kindex_entry *const *ents, size_t n)
{
    size_t nleaves = n ? (n + BULK_LEAF_FILL - 1) / BULK_LEAF_FILL : 1;
    void **nodes = calloc(nleaves, sizeof(*nodes));
    const struct bt_sep **lows = calloc(nleaves, sizeof(*lows));
    void **all = NULL; /* every node allocated, for cleanup on failure */
    size_t nall = 0, cap_all = nleaves * 2 + 64;
    all = calloc(cap_all, sizeof(*all));
    if (nodes == NULL || lows == NULL || all == NULL)
        goto fail;

    /* Leaves. */
    size_t next = 0;
    struct bt_leaf *prev = NULL;
    for (size_t j = 0; j < nleaves; j++) {
        struct bt_leaf *l = calloc(1, sizeof(*l));
        if (l == NULL)
            goto fail;
        all[nall++] = l;
        while (l->n < BULK_LEAF_FILL && next < n)
            l->e[l->n++] = ents[next++];
        if (prev != NULL) {
            prev->next = l;
            size_t need = sep_size(l->e[0]->klen);
            if (arena_reserve(&nx->arena, need) != 0)
                goto fail;
            lows[j] = make_sep(nx->arena, prev->e[prev->n - 1], l->e[0]);
        }
        nodes[j] = l;
        prev = l;
    }
    nx->first = nodes[0];
    nx->nleaves = nleaves;

    /* Inner levels, bottom up; the parent's low separator is its first
     * child's, and needs no new copy. */
    size_t count = nleaves;
    while (count > 1) {
        size_t np = (count + BULK_INNER_FILL - 1) / BULK_INNER_FILL;
        for (size_t p = 0; p < np; p++) {
            struct bt_inner *in = calloc(1, sizeof(*in));
            if (in == NULL || nall == cap_all) {
                free(in);
                goto fail;
            }
            all[nall++] = in;
            size_t k = p * BULK_INNER_FILL;
            size_t c = count - k < BULK_INNER_FILL ? count - k : BULK_INNER_FILL;
            for (size_t i = 0; i < c; i++) {
                in->child[i] = nodes[k + i];
                in->sep[i] = i ? lows[k + i] : NULL;
            }
            in->n = (uint32_t)c;
            const struct bt_sep *low = lows[k];
            nodes[p] = in; /* p <= k: already consumed */
            lows[p] = low;
            nx->ninner++;
        }
        count = np;
        nx->height++;
    }
    nx->root = nodes[0];
    nx->nkeys = n;
    free(nodes);
    free(lows);
    free(all);
    return 0;

fail:
    for (size_t i = 0; i < nall; i++)
        free(all[i]);
    arena_free(nx->arena);
    memset(nx, 0, sizeof(*nx));
    free(nodes);
    free(lows);
    free(all);
    return -ENOMEM;
}

/* rebuild bulk-loads a fresh, densely packed tree from the current keys and
 * swaps it in. On -ENOMEM the old (valid, just sparse) tree stays. */
static int rebuild(struct kindex *ix)
{
    struct kindex_entry **ents = malloc((ix->nkeys ? ix->nkeys : 1) * sizeof(*ents));
    if (ents == NULL)
        return -ENOMEM;
    size_t n = 0;
    for (struct bt_leaf *l = ix->first; l != NULL; l = l->next)
        for (unsigned i = 0; i < l->n; i++)
            ents[n++] = l->e[i];
    struct kindex nx = {0};
    int rv = bulk_build(&nx, ents, n);
    free(ents);
    if (rv != 0)
        return rv;
    free_nodes(ix->root, ix->height);
    arena_free(ix->arena);
    *ix = nx;
    return 0;
}

/* ---- loading ------------------------------------------------------------
 *
 * Records arrive in revision order, so their keys come in no order: one
 * tree descent per record means a handful of cache misses each (the leaf's
 * binary search reads the entries' keys). The loader finds a key's entry
 * in an open-addressing hash table instead (the hash stored beside the
 * pointer, so a probe rarely reads an entry it does not want), then sorts
 * the entries once and bulk-builds the tree. */

static uint64_t hash_seed = 0x9e3779b97f4a7c15ull;

static uint64_t key_hash(const uint8_t *k, size_t n)
{
    uint64_t h = hash_seed ^ (n * 0xc2b2ae3d27d4eb4full);
    for (; n >= 8; n -= 8, k += 8) {
        uint64_t w;
        memcpy(&w, k, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, k, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static int loader_grow(struct kindex_loader *ld)
{
    size_t cap = ld->cap ? ld->cap * 2 : 1024;
    struct kindex_entry **ent = calloc(cap, sizeof(*ent));
    uint64_t *hash = malloc(cap * sizeof(*hash));
    if (ent == NULL || hash == NULL) {
        free(ent);
        free(hash);
        return -ENOMEM;
    }
    for (size_t i = 0; i < ld->cap; i++) {
        if (ld->ent[i] == NULL)
            continue;
        size_t j = ld->hash[i] & (cap - 1);
        while (ent[j] != NULL)
            j = (j + 1) & (cap - 1);
        ent[j] = ld->ent[i];
        hash[j] = ld->hash[i];
    }
    free(ld->ent);
    free(ld->hash);
    ld->ent = ent;
    ld->hash = hash;
    ld->cap = cap;
    return 0;
}

void kindex_load_begin(struct kindex_loader *ld)
{
    memset(ld, 0, sizeof(*ld));
    /* a seed of this process's own, so crafted keys cannot make every
     * restart's table degenerate */
    static uint64_t counter;
    if (counter++ == 0)
        hash_seed ^= ((uint64_t)(uintptr_t)&counter << 16) ^ (uint64_t)(uintptr_t)ld;
}

/* A new entry starts with room for a few revisions (keys are usually
 * written more than once): fewer reallocs, and finish trims the rest. */
#define LOAD_FIRST_CAP 4

static int load_add_hashed(struct kindex_loader *ld, const struct kindex_load_rec *rec,
                           uint64_t h)
{
    size_t mask = ld->cap - 1, i = h & mask;
    for (; ld->ent[i] != NULL; i = (i + 1) & mask) {
        struct kindex_entry *e = ld->ent[i];
        if (ld->hash[i] == h && e->klen == rec->klen && memcmp(e->key, rec->key, rec->klen) == 0)
            return entry_append(&ld->ent[i], rec->main, rec->sub, rec->tomb);
    }
    struct kindex_entry *e =
        entry_new_cap(rec->key, rec->klen, rec->main, rec->sub, rec->tomb, LOAD_FIRST_CAP);
    if (e == NULL)
        return -ENOMEM;
    ld->ent[i] = e;
    ld->hash[i] = h;
    ld->n++;
    return 0;
}

int kindex_load_add(struct kindex_loader *ld, const uint8_t *key, size_t klen, int64_t main,
                    uint32_t sub, bool tomb)
{
    struct kindex_load_rec rec = {key, klen, main, sub, tomb};
    return kindex_load_add_many(ld, &rec, 1);
}

/* The records' keys are in no order, so nearly every probe misses the
 * cache (the table's slot, then the entry). Records are taken in groups:
 * every slot of the group is fetched ahead, then every entry found there,
 * then the group is added while they arrive. */
int kindex_load_add_many(struct kindex_loader *ld, const struct kindex_load_rec *recs, size_t n)
{
    while (2 * (ld->n + n) > ld->cap)
        if (loader_grow(ld) != 0)
            return -ENOMEM;
    uint64_t hs[KINDEX_LOAD_GROUP];
    for (size_t base = 0; base < n; base += KINDEX_LOAD_GROUP) {
        size_t m = n - base < KINDEX_LOAD_GROUP ? n - base : KINDEX_LOAD_GROUP;
        size_t mask = ld->cap - 1;
        for (size_t j = 0; j < m; j++) {
            hs[j] = key_hash(recs[base + j].key, recs[base + j].klen);
            __builtin_prefetch(&ld->hash[hs[j] & mask]);
            __builtin_prefetch(&ld->ent[hs[j] & mask]);
        }
        for (size_t j = 0; j < m; j++) {
            const struct kindex_entry *e = ld->ent[hs[j] & mask];
            if (e != NULL) {
                __builtin_prefetch(e);
                __builtin_prefetch((const uint8_t *)e + 64);
            }
        }
        for (size_t j = 0; j < m; j++) {
            int rv = load_add_hashed(ld, &recs[base + j], hs[j]);
            if (rv != 0)
                return rv;
        }
    }
    return 0;
}

/* Sorting: the first 8 key bytes, big-endian, decide most comparisons
 * without reading the entries. */
struct sort_item {
    uint64_t prefix;
    struct kindex_entry *e;
};

static int item_cmp(const void *a, const void *b)
{
    const struct sort_item *x = a, *y = b;
    if (x->prefix != y->prefix)
        return x->prefix < y->prefix ? -1 : 1;
    return bytes_compare(x->e->key, x->e->klen, y->e->key, y->e->klen);
}

int kindex_load_finish(struct kindex_loader *ld, struct kindex *ix)
{
    struct sort_item *items = malloc((ld->n ? ld->n : 1) * sizeof(*items));
    if (items == NULL)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < ld->cap; i++) {
        struct kindex_entry *e = ld->ent[i];
        if (e == NULL)
            continue;
        if (e->cap > e->nrev) {
            /* doubling left up to half the array unused: give it back */
            struct kindex_entry *t =
                realloc(e, revs_off(e->klen) + e->nrev * sizeof(struct kindex_rev));
            if (t != NULL) {
                e = ld->ent[i] = t;
                e->cap = e->nrev;
            }
        }
        uint8_t p[8] = {0};
        memcpy(p, e->key, e->klen < 8 ? e->klen : 8);
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v = v << 8 | p[k];
        items[n].prefix = v;
        items[n++].e = e;
    }
    qsort(items, n, sizeof(*items), item_cmp);
    /* the hash table's slots are free now: reuse them for the sorted list */
    struct kindex_entry **ents = ld->ent;
    for (size_t i = 0; i < n; i++)
        ents[i] = items[i].e;
    for (size_t i = n; i < ld->cap; i++)
        ents[i] = NULL;
    free(items);
    struct kindex nx = {0};
    int rv = bulk_build(&nx, ents, n);
    if (rv != 0)
        return rv; /* the entries are still the loader's: abort frees them */
    kindex_free(ix);
    *ix = nx;
    free(ld->ent);
    free(ld->hash);
    memset(ld, 0, sizeof(*ld));
    return 0;
}

int kindex_load_merge(struct kindex_loader *into, struct kindex_loader *from)
{
    while (2 * (into->n + from->n) > into->cap)
        if (loader_grow(into) != 0)
            return -ENOMEM;
    for (size_t i = 0; i < from->cap; i++) {
        struct kindex_entry *e = from->ent[i];
        if (e == NULL)
            continue;
        uint64_t h = from->hash[i];
        size_t mask = into->cap - 1, j = h & mask;
        for (; into->ent[j] != NULL; j = (j + 1) & mask) {
            struct kindex_entry *x = into->ent[j];
            if (into->hash[j] == h && x->klen == e->klen && memcmp(x->key, e->key, e->klen) == 0)
                break;
        }
        struct kindex_entry *x = into->ent[j];
        if (x == NULL) { /* a key of |from| only: the entry moves */
            into->ent[j] = e;
            into->hash[j] = h;
            into->n++;
        } else {
            const struct kindex_rev *xr = kentry_revs(x), *er = kentry_revs(e);
            const struct kindex_rev *xl = &xr[x->nrev - 1];
            if (er->main < xl->main || (er->main == xl->main && er->sub <= xl->sub))
                return -EINVAL;
            uint32_t nrev = x->nrev + e->nrev;
            if (nrev < x->nrev)
                return -ENOMEM;
            if (nrev > x->cap) {
                struct kindex_entry *t =
                    realloc(x, revs_off(x->klen) + (size_t)nrev * sizeof(struct kindex_rev));
                if (t == NULL)
                    return -ENOMEM;
                x = into->ent[j] = t;
                x->cap = nrev;
            }
            memcpy(kentry_revs(x) + x->nrev, kentry_revs(e), e->nrev * sizeof(struct kindex_rev));
            x->nrev = nrev;
            free(e);
        }
        from->ent[i] = NULL;
    }
    kindex_load_abort(from); /* empty now: frees the table */
    return 0;
}

void kindex_load_abort(struct kindex_loader *ld)
{
    /* after a failed finish the entries are at the front, the rest NULL */
    for (size_t i = 0; i < ld->cap; i++)
        free(ld->ent[i]);
    free(ld->ent);
    free(ld->hash);
    memset(ld, 0, sizeof(*ld));
}

/* ---- compaction ---------------------------------------------------------- */

/* leaf_remove takes slot |i| out of |l| (the entry is freed by the caller). */
static void leaf_remove(struct bt_leaf *l, unsigned i)
{
    memmove(&l->e[i], &l->e[i + 1], (l->n - i - 1) * sizeof(l->e[0]));
    l->n--;
}

int kindex_compact_step(struct kindex *ix, int64_t rev, const uint8_t *from, size_t from_len,
                        size_t max_revs, size_t max_keys, kindex_compact_fn fn, void *arg,
                        const struct kindex_entry **stop)
{
    int rv = 0;
    size_t revs = 0, keys = 0, removed = 0;
    struct kindex_iter it;
    struct kindex_entry *e;
    *stop = NULL;
    kindex_seek(ix, from, from_len, &it);
    while ((e = kindex_iter_get(&it)) != NULL) {
        if (revs >= max_revs || keys >= max_keys) {
            *stop = e;
            break;
        }
        keys++;
        const struct kindex_rev *at = kentry_at(e, rev);
        struct kindex_rev *r = kentry_revs(e);
        size_t drop = at != NULL ? (size_t)(at - r) + (at->tomb ? 1 : 0) : 0;
        bool clipped = drop > max_revs - revs;
        if (clipped)
            drop = max_revs - revs; /* the oldest first: the rest next step */
        if (drop == 0) {
            kindex_iter_next(&it);
            continue;
        }
        if (fn != NULL && (rv = fn(e->key, e->klen, r, drop, arg)) != 0) {
            *stop = e;
            break;
        }
        revs += drop;
        e->nrev -= (uint32_t)drop;
        if (e->nrev == 0) {
            free(e);
            leaf_remove(it.leaf, it.i);
            removed++;
            continue; /* the next entry moved into this slot */
        }
        memmove(r, r + drop, e->nrev * sizeof(*r));
        if (e->cap >= 4 * e->nrev) {
            struct kindex_entry *small = realloc(e, revs_off(e->klen) + e->nrev * sizeof(*r));
            if (small != NULL) {
                small->cap = small->nrev;
                it.leaf->e[it.i] = small;
            }
        }
        if (!clipped)
            kindex_iter_next(&it);
    }
    ix->nkeys -= removed;
    /* Rebuild once the whole pass is over, not in the middle of it. */
    if (*stop == NULL && rv == 0 && ix->nkeys < ix->nleaves * LEAF_MAX / 4 && ix->nleaves > 1)
        (void)rebuild(ix); /* on failure the sparse tree is still correct */
    return rv;
}

int kindex_compact(struct kindex *ix, int64_t rev, kindex_compact_fn fn, void *arg)
{
    const struct kindex_entry *stop;
    return kindex_compact_step(ix, rev, NULL, 0, SIZE_MAX, SIZE_MAX, fn, arg, &stop);
}

size_t kindex_mem_bytes(const struct kindex *ix)
{
    size_t b = ix->nleaves * sizeof(struct bt_leaf) + ix->ninner * sizeof(struct bt_inner);
    for (const struct bt_arena *a = ix->arena; a != NULL; a = a->next)
        b += sizeof(*a) + a->cap;
    for (const struct bt_leaf *l = ix->first; l != NULL; l = l->next)
        for (unsigned i = 0; i < l->n; i++)
            b += revs_off(l->e[i]->klen) + l->e[i]->cap * sizeof(struct kindex_rev);
    return b;
}
