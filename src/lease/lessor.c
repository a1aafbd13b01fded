/* lease/lessor.c: see lessor.h. Leases live in an open-addressing hash
 * table by id; a primary keeps a min-heap of expiry times. */
#include "lease/lessor.h"
#include "base/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"

struct lkey {
    uint8_t *key;
    size_t len;
};

struct lease {
    int64_t id;
    int64_t ttl;          /* granted, seconds */
    int64_t remaining;    /* checkpointed seconds left; 0 = full TTL */
    int64_t expiry_ms;    /* primary only */
    int64_t last_ckpt_ms; /* when its remaining TTL was last checkpointed or renewed */
    long heap_idx;        /* -1 when not in the expiry heap */
    uint64_t epoch;       /* the promotion whose clock it runs on (primary) */
    bool revoking;
    struct lkey *keys;
    size_t nkeys, capkeys;
};

#define TOMB ((struct lease *)1)

struct lessor {
    backend *be;
    int64_t min_ttl;
    bool primary;
    struct lease **slots; /* NULL = empty, TOMB = deleted */
    size_t cap, count, used;
    struct lease **heap;
    size_t nheap, capheap;
    /* A promotion takes the leases into the heap a step at a time
     * (promote_step), so that a new leader with millions of leases does not
     * hold its loop for all of them at once (etcd issue 9496). A lease
     * belongs to this primary's clock once its epoch is the lessor's. */
    uint64_t epoch;
    int64_t promote_ms;
    size_t promote_next; /* the next slot to look at while promoting */
    bool promoting;
    size_t ckpt_next; /* where lessor_due_checkpoints goes on from */
};

/* leases taken into the heap per promote_step: a few ms */
#define PROMOTE_STEP 20000
/* slots lessor_due_checkpoints looks at per call, at most */
#define CHECKPOINT_SCAN 65536

/* ---- hash table ---- */

static size_t hash_id(int64_t id)
{
    uint64_t x = (uint64_t)id;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static struct lease **find_slot(const lessor *l, int64_t id)
{
    if (l->cap == 0)
        return NULL;
    size_t mask = l->cap - 1;
    for (size_t i = hash_id(id) & mask;; i = (i + 1) & mask) {
        struct lease *e = l->slots[i];
        if (e == NULL)
            return NULL;
        if (e != TOMB && e->id == id)
            return &l->slots[i];
    }
}

static struct lease *lookup(const lessor *l, int64_t id)
{
    struct lease **s = find_slot(l, id);
    return s ? *s : NULL;
}

static int table_insert(lessor *l, struct lease *e);

static int grow(lessor *l)
{
    size_t cap = l->cap ? l->cap * 2 : 64;
    if (l->count * 4 < l->cap)
        cap = l->cap; /* mostly tombstones: rehash at the same size */
    struct lease **old = l->slots;
    size_t oldcap = l->cap;
    l->slots = calloc(cap, sizeof(*l->slots));
    if (l->slots == NULL) {
        l->slots = old;
        return -ENOMEM;
    }
    l->cap = cap;
    l->count = l->used = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i] != NULL && old[i] != TOMB)
            table_insert(l, old[i]);
    free(old);
    l->promote_next = 0; /* the leases moved: look again (taken ones are skipped) */
    l->ckpt_next = 0;
    return 0;
}

static int table_insert(lessor *l, struct lease *e)
{
    if ((l->used + 1) * 4 > l->cap * 3) {
        int rv = grow(l);
        if (rv != 0)
            return rv;
    }
    size_t mask = l->cap - 1;
    size_t i = hash_id(e->id) & mask;
    while (l->slots[i] != NULL && l->slots[i] != TOMB)
        i = (i + 1) & mask;
    if (l->slots[i] == NULL)
        l->used++;
    l->slots[i] = e;
    l->count++;
    return 0;
}

/* ---- expiry heap ---- */

static void heap_swap(lessor *l, size_t a, size_t b)
{
    struct lease *t = l->heap[a];
    l->heap[a] = l->heap[b];
    l->heap[b] = t;
    l->heap[a]->heap_idx = (long)a;
    l->heap[b]->heap_idx = (long)b;
}

static void sift_up(lessor *l, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->heap[p]->expiry_ms <= l->heap[i]->expiry_ms)
            break;
        heap_swap(l, p, i);
        i = p;
    }
}

static void sift_down(lessor *l, size_t i)
{
    for (;;) {
        size_t m = i, a = 2 * i + 1, b = a + 1;
        if (a < l->nheap && l->heap[a]->expiry_ms < l->heap[m]->expiry_ms)
            m = a;
        if (b < l->nheap && l->heap[b]->expiry_ms < l->heap[m]->expiry_ms)
            m = b;
        if (m == i)
            return;
        heap_swap(l, m, i);
        i = m;
    }
}

static int heap_push(lessor *l, struct lease *e)
{
    if (l->nheap == l->capheap) {
        size_t cap = l->capheap ? l->capheap * 2 : 64;
        struct lease **h = realloc(l->heap, cap * sizeof(*h));
        if (h == NULL)
            return -ENOMEM;
        l->heap = h;
        l->capheap = cap;
    }
    e->heap_idx = (long)l->nheap;
    l->heap[l->nheap++] = e;
    sift_up(l, l->nheap - 1);
    return 0;
}

static void heap_remove(lessor *l, struct lease *e)
{
    if (e->heap_idx < 0)
        return;
    size_t i = (size_t)e->heap_idx;
    e->heap_idx = -1;
    l->nheap--;
    if (i == l->nheap)
        return;
    l->heap[i] = l->heap[l->nheap];
    l->heap[i]->heap_idx = (long)i;
    sift_up(l, i);
    sift_down(l, (size_t)l->heap[i]->heap_idx);
}

static void heap_update(lessor *l, struct lease *e)
{
    if (e->heap_idx < 0) {
        heap_push(l, e); /* on -ENOMEM the lease just never expires early */
        return;
    }
    sift_up(l, (size_t)e->heap_idx);
    sift_down(l, (size_t)e->heap_idx);
}

/* ---- persistence: leasepb.Lease under the 8-byte big-endian id ---- */

static void id_key(int64_t id, uint8_t k[8])
{
    for (int i = 0; i < 8; i++)
        k[i] = (uint8_t)((uint64_t)id >> (56 - 8 * i));
}

static int persist(lessor *l, const struct lease *e)
{
    MDB_txn *txn = backend_batch_txn(l->be);
    if (txn == NULL)
        return -EBUSY;
    uint8_t k[8], v[40];
    id_key(e->id, k);
    size_t n = 0;
    v[n++] = 0x08;
    n += varint_put(v + n, (uint64_t)e->id);
    if (e->ttl) {
        v[n++] = 0x10;
        n += varint_put(v + n, (uint64_t)e->ttl);
    }
    if (e->remaining) {
        v[n++] = 0x18;
        n += varint_put(v + n, (uint64_t)e->remaining);
    }
    MDB_val key = {8, k}, val = {n, v};
    int rc = backend_put(l->be, txn, BACKEND_DB_LEASE, &key, &val, 0);
    if (rc == MDB_MAP_FULL)
        return QERR_NO_SPACE;
    return rc ? QERR_STORAGE : 0;
}

static int decode(const uint8_t *p, size_t n, int64_t *id, int64_t *ttl, int64_t *rem)
{
    const uint8_t *end = p + n;
    *id = *ttl = *rem = 0;
    while (p < end) {
        uint64_t tag, v;
        size_t k = varint_get(p, end, &tag);
        if (k == 0)
            return QERR_CORRUPT;
        p += k;
        if ((tag & 7) != 0)
            return QERR_CORRUPT;
        k = varint_get(p, end, &v);
        if (k == 0)
            return QERR_CORRUPT;
        p += k;
        switch (tag >> 3) {
        case 1:
            *id = (int64_t)v;
            break;
        case 2:
            *ttl = (int64_t)v;
            break;
        case 3:
            *rem = (int64_t)v;
            break;
        default:
            break;
        }
    }
    return *id != 0 ? 0 : QERR_CORRUPT;
}

static struct lease *new_lease(int64_t id, int64_t ttl, int64_t rem)
{
    struct lease *e = calloc(1, sizeof(*e));
    if (e != NULL) {
        e->id = id;
        e->ttl = ttl;
        e->remaining = rem;
        e->expiry_ms = INT64_MAX;
        e->heap_idx = -1;
    }
    return e;
}

static void free_lease(struct lease *e)
{
    for (size_t i = 0; i < e->nkeys; i++)
        free(e->keys[i].key);
    free(e->keys);
    free(e);
}

int lessor_open(backend *be, int64_t min_ttl, lessor **out)
{
    lessor *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->be = be;
    l->min_ttl = min_ttl;
    MDB_txn *txn;
    int rv = backend_read_begin(be, &txn);
    if (rv != 0) {
        free(l);
        return rv;
    }
    MDB_cursor *cur;
    if (mdb_cursor_open(txn, backend_dbi(be, BACKEND_DB_LEASE), &cur) != 0) {
        backend_read_end(txn);
        free(l);
        return QERR_STORAGE;
    }
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && rv == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        int64_t id, ttl, rem;
        rv = decode(v.mv_data, v.mv_size, &id, &ttl, &rem);
        if (rv != 0)
            break;
        struct lease *e = new_lease(id, ttl, rem);
        if (e == NULL || table_insert(l, e) != 0) {
            free(e);
            rv = -ENOMEM;
        }
    }
    mdb_cursor_close(cur);
    backend_read_end(txn);
    if (rv != 0) {
        lessor_close(l);
        return rv;
    }
    *out = l;
    return 0;
}

void lessor_close(lessor *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->cap; i++)
        if (l->slots[i] != NULL && l->slots[i] != TOMB)
            free_lease(l->slots[i]);
    free(l->slots);
    free(l->heap);
    free(l);
}

bool lessor_exists(const lessor *l, int64_t id)
{
    return lookup(l, id) != NULL;
}

size_t lessor_count(const lessor *l)
{
    return l->count;
}

size_t lessor_ids(const lessor *l, int64_t *ids, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < l->cap; i++) {
        struct lease *e = l->slots[i];
        if (e == NULL || e == TOMB)
            continue;
        if (n < max)
            ids[n] = e->id;
        n++;
    }
    return n;
}

static struct {
    metric_t granted, revoked, renewed;
    struct metrics_series *ttls;
} lm;

void lessor_metrics_register(void)
{
    double b[24];
    lm.granted = metrics_counter("etcd_debugging_lease_granted_total",
                                 "The total number of granted leases.");
    lm.revoked = metrics_counter("etcd_debugging_lease_revoked_total",
                                 "The total number of revoked leases.");
    lm.renewed = metrics_counter("etcd_debugging_lease_renewed_total",
                                 "The number of renewed leases seen by the leader.");
    lm.ttls = metrics_histogram("etcd_debugging_lease_ttl_total", "Bucketed histogram of lease TTLs.",
                                metrics_exp_buckets(1, 2, 24, b), 24);
}

int lessor_grant(lessor *l, int64_t id, int64_t ttl, int64_t now_ms, int64_t *granted)
{
    if (id == 0)
        return -EINVAL; /* the server picks ids for 0 before proposing */
    if (ttl > LEASE_MAX_TTL)
        return QERR_LEASE_TTL_TOO_LARGE;
    if (lookup(l, id) != NULL)
        return QERR_LEASE_EXISTS;
    if (ttl < l->min_ttl)
        ttl = l->min_ttl;
    struct lease *e = new_lease(id, ttl, 0);
    if (e == NULL)
        return -ENOMEM;
    int rv = persist(l, e);
    if (rv == 0)
        rv = table_insert(l, e);
    if (rv != 0) {
        free_lease(e);
        return rv;
    }
    e->last_ckpt_ms = now_ms;
    if (l->primary) {
        e->expiry_ms = now_ms + ttl * 1000;
        e->epoch = l->epoch;
        heap_push(l, e);
    }
    *granted = ttl;
    metrics_inc(lm.granted);
    metrics_observe(lm.ttls, (double)ttl);
    return 0;
}

int lessor_remove(lessor *l, int64_t id)
{
    struct lease **s = find_slot(l, id);
    if (s == NULL)
        return QERR_LEASE_NOT_FOUND;
    MDB_txn *txn = backend_batch_txn(l->be);
    if (txn == NULL)
        return -EBUSY;
    uint8_t k[8];
    id_key(id, k);
    MDB_val key = {8, k};
    int rc = backend_del(l->be, txn, BACKEND_DB_LEASE, &key);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return QERR_STORAGE;
    struct lease *e = *s;
    *s = TOMB;
    l->count--;
    heap_remove(l, e);
    free_lease(e);
    metrics_inc(lm.revoked);
    return 0;
}

int lessor_checkpoint(lessor *l, int64_t id, int64_t remaining)
{
    struct lease *e = lookup(l, id);
    if (e == NULL)
        return 0;
    e->remaining = remaining;
    return persist(l, e);
}

int lessor_attach(lessor *l, int64_t id, const uint8_t *key, size_t len)
{
    struct lease *e = lookup(l, id);
    if (e == NULL)
        return QERR_LEASE_NOT_FOUND;
    for (size_t i = 0; i < e->nkeys; i++)
        if (e->keys[i].len == len && memcmp(e->keys[i].key, key, len) == 0)
            return 0;
    if (e->nkeys == e->capkeys) {
        size_t cap = e->capkeys ? e->capkeys * 2 : 2;
        struct lkey *k = realloc(e->keys, cap * sizeof(*k));
        if (k == NULL)
            return -ENOMEM;
        e->keys = k;
        e->capkeys = cap;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, key, len);
    e->keys[e->nkeys++] = (struct lkey){copy, len};
    return 0;
}

void lessor_detach(lessor *l, int64_t id, const uint8_t *key, size_t len)
{
    struct lease *e = lookup(l, id);
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->nkeys; i++) {
        if (e->keys[i].len == len && memcmp(e->keys[i].key, key, len) == 0) {
            free(e->keys[i].key);
            e->keys[i] = e->keys[--e->nkeys];
            return;
        }
    }
}

long lessor_keys(const lessor *l, int64_t id, lessor_key_fn fn, void *arg)
{
    const struct lease *e = lookup(l, id);
    if (e == NULL)
        return -1;
    if (fn != NULL)
        for (size_t i = 0; i < e->nkeys; i++)
            fn(e->keys[i].key, e->keys[i].len, arg);
    return (long)e->nkeys;
}

/* promoted_expiry: when |e| expires on the clock of the promotion (now +
 * its checkpointed remaining TTL, or its full TTL if none). */
static int64_t promoted_expiry(const lessor *l, const struct lease *e)
{
    int64_t left = e->remaining > 0 ? e->remaining : e->ttl;
    return l->promote_ms + left * 1000;
}

/* promote_step takes up to |budget| slots' leases into the heap, on the
 * promotion's clock. A lease renewed, granted or put back since the
 * promotion is already on it (its epoch) and is left as it is. */
static void promote_step(lessor *l, size_t budget)
{
    while (l->promoting && budget-- > 0) {
        if (l->promote_next >= l->cap) {
            l->promoting = false;
            break;
        }
        struct lease *e = l->slots[l->promote_next++];
        if (e == NULL || e == TOMB || e->epoch == l->epoch)
            continue;
        e->epoch = l->epoch;
        e->expiry_ms = promoted_expiry(l, e);
        e->last_ckpt_ms = l->promote_ms;
        e->revoking = false;
        e->heap_idx = -1;
        heap_push(l, e);
    }
}

void lessor_promote(lessor *l, int64_t now_ms)
{
    l->primary = true;
    for (size_t i = 0; i < l->nheap; i++)
        l->heap[i]->heap_idx = -1;
    l->nheap = 0;
    l->epoch++;
    l->promote_ms = now_ms;
    l->promote_next = 0;
    l->promoting = true;
    promote_step(l, PROMOTE_STEP);
}

void lessor_demote(lessor *l)
{
    l->primary = false;
    l->promoting = false;
    for (size_t i = 0; i < l->nheap; i++) {
        l->heap[i]->heap_idx = -1;
        l->heap[i]->expiry_ms = INT64_MAX;
    }
    l->nheap = 0;
}

bool lessor_is_primary(const lessor *l)
{
    return l->primary;
}

int lessor_renew(lessor *l, int64_t id, int64_t now_ms, int64_t *ttl, bool *needs_checkpoint)
{
    if (!l->primary)
        return QERR_NO_LEADER;
    struct lease *e = lookup(l, id);
    if (e == NULL || e->revoking)
        return QERR_LEASE_NOT_FOUND; /* an expired lease is on its way out */
    *needs_checkpoint = e->remaining > 0;
    e->expiry_ms = now_ms + e->ttl * 1000;
    e->last_ckpt_ms = now_ms;
    e->epoch = l->epoch; /* on this primary's clock now, promoted or not */
    heap_update(l, e);
    *ttl = e->ttl;
    metrics_inc(lm.renewed);
    return 0;
}

int lessor_remaining(const lessor *l, int64_t id, int64_t now_ms, int64_t *remaining,
                     int64_t *granted)
{
    const struct lease *e = lookup(l, id);
    if (e == NULL)
        return QERR_LEASE_NOT_FOUND;
    *granted = e->ttl;
    if (!l->primary)
        *remaining = e->remaining > 0 ? e->remaining : e->ttl;
    else /* rounds toward zero, as etcd; one the promotion has not reached
          * yet runs on its clock all the same */
        *remaining = ((e->epoch == l->epoch ? e->expiry_ms : promoted_expiry(l, e)) - now_ms) /
                     1000;
    return 0;
}

size_t lessor_expired(lessor *l, int64_t now_ms, int64_t *ids, size_t max)
{
    promote_step(l, PROMOTE_STEP);
    size_t n = 0;
    while (n < max && l->nheap > 0 && l->heap[0]->expiry_ms <= now_ms) {
        struct lease *e = l->heap[0];
        heap_remove(l, e);
        e->revoking = true;
        ids[n++] = e->id;
    }
    return n;
}

void lessor_revoke_failed(lessor *l, int64_t id)
{
    struct lease *e = lookup(l, id);
    if (e == NULL || !e->revoking)
        return;
    e->revoking = false;
    if (l->primary) {
        e->epoch = l->epoch;
        heap_push(l, e);
    }
}

size_t lessor_due_checkpoints(lessor *l, int64_t now_ms, int64_t interval_ms, int64_t *ids,
                              int64_t *remaining, size_t max)
{
    size_t n = 0;
    if (!l->primary || l->cap == 0)
        return 0;
    /* round the table from where the last call stopped, a bounded number
     * of slots a call: from slot 0 every time, the first |max| due leases
     * were the only ones ever checkpointed once there were more than
     * max * interval / (the caller's period) of them */
    size_t scan = l->cap < CHECKPOINT_SCAN ? l->cap : CHECKPOINT_SCAN;
    size_t i = l->ckpt_next % l->cap;
    for (; scan > 0 && n < max; scan--, i = (i + 1) % l->cap) {
        struct lease *e = l->slots[i];
        if (e == NULL || e == TOMB || e->revoking || e->epoch != l->epoch)
            continue; /* not yet promoted: its checkpoint is the one it has */
        if (now_ms - e->last_ckpt_ms < interval_ms)
            continue;
        int64_t left = (e->expiry_ms - now_ms) / 1000;
        if (left < 1)
            continue;
        ids[n] = e->id;
        remaining[n] = left;
        e->last_ckpt_ms = now_ms;
        n++;
    }
    l->ckpt_next = i;
    return n;
}

int64_t lessor_next_expiry(const lessor *l)
{
    return l->nheap ? l->heap[0]->expiry_ms : INT64_MAX;
}
