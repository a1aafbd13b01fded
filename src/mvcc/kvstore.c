/* mvcc/kvstore.c: the store itself: revisions, write and read transactions,
 * ranges, compaction, the index rebuild at open, and HashKV.
 *
 * LMDB's key database holds every retained revision (revision key ->
 * mvccpb.KeyValue); the in-memory index (kindex.c) says which revision of
 * a key a read at revision R must fetch. Writes go straight to both inside
 * the backend's open batch, so a read later in the same write txn sees them
 * (etcd's kvstore_txn.go does the same). */
#include "mvcc/mvcc.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/log.h"
#include "mvcc/mvcc_int.h"

/* Meta names as etcd's (mvcc/kvstore.go). */
#define META_SCHEDULED "scheduledCompactRev"
#define META_FINISHED "finishedCompactRev"
/* quorum only: where an unfinished compaction's removal from LMDB goes on */
#define META_PROGRESS "quorumCompactNextRev"
#define META_PROGRESS_SUB "quorumCompactNextSub"
/* quorum only: a revision whose first steps are committed, not its last */
#define META_STEP_REV "quorumStepRev"

/* The record memo: a put (and a delete) reads the kv it replaces, for
 * the create revision, the version and the observer's prev; mostly that
 * record was read or written a moment before (ZooKeeper's setData loads
 * the node it then writes, every ZooKeeper write reads its session's
 * record and a create its parent's; a Txn compares or ranges before it
 * puts). The owner's write txns keep copies of the records their
 * single-key reads fetch and of those their puts write, by revision
 * (main, sub), in a small direct-mapped table; their reads and the puts'
 * look there before descending LMDB's tree. A record never changes once
 * written and a revision is never written twice, except across a rebuild
 * of the index (load_from: after a batch abort, a failed commit, a file
 * swap), which empties the table. Only the owner's thread touches it. */
#define MEMO_SLOTS 64
#define MEMO_MAX 2048 /* bigger records are fetched again */
#define READ_SPARES 8

struct mvcc_txn {
    mvcc_store *s;
    int64_t begin_rev;
    uint32_t changes;
    uint32_t since_step;  /* changes since the last step's commit */
    uint32_t since_pause; /* changes since the last pause (or commit) */
    uint32_t steps;      /* step commits */
    bool open;
    bool resumed; /* goes on with the partial revision left by a restart */
};

/* Bytes a read txn must keep until it ends that LMDB does not hold for it
 * (the encoded delete events of mvcc_read_history). */
struct rd_chunk {
    struct rd_chunk *next;
    size_t used, cap;
    uint8_t data[];
};

struct mvcc_read {
    mvcc_store *s;
    MDB_txn *txn;
    int64_t rev;
    struct rd_chunk *chunks;
    bool borrowed; /* txn is the open batch's */
    bool shared;   /* begun by mvcc_read_begin_shared: holds the read lock */
    bool cached;   /* shared: kept by its thread for the next read (registered) */
    /* begun by mvcc_read_begin_detached: holds no lock between calls, reads
     * the index under the read lock in pieces; on the store's |det| list
     * (under reg_mu), whose txn release_shared aborts (txn NULL: dead) */
    bool detached;
    mvcc_read *dnext, *dprev;
};

#define SHARED_READERS 128 /* cached read txns of other threads, at most */

struct mvcc_store {
    backend *be;
    MDB_dbi kdb;
    struct kindex ix;
    int64_t rev;           /* current, including changes not yet committed */
    int64_t committed_rev; /* what a fresh LMDB read txn sees */
    int64_t compact_rev;   /* reads below fail: the scheduled compaction */
    /* A compaction still removing revisions (compacting); the second pass's
     * next step starts at key compact_next (empty: the first key). */
    bool compacting;
    int64_t compact_target;
    int64_t compact_pos; /* first pass: the revision (main, sub) it goes on from */
    int64_t compact_pos_sub;
    bool compact_index; /* in the second pass (the in-memory index) */
    struct buf compact_next;
    struct mvcc_compact_stats cstats;
    struct mvcc_txn txn; /* one write txn at a time: no allocation per txn */
    /* Big revisions in steps (mvcc.h): a commit every step_limit changes */
    size_t step_limit;
    mvcc_step_fn step_fn;
    void *step_arg;
    mvcc_step_fn pause_fn; /* after each step's commit (mvcc_set_step_pause) */
    void *pause_arg;
    size_t pause_every;   /* and every that many changes between commits */
    int64_t partial_rev;  /* left partial by a restart: resumed by the next txn */
    uint32_t partial_sub; /* its changes in LMDB */
    int sticky_err;       /* a failure mvcc_txn_end could not return */
    /* lease bindings gathered by mvcc_prepare_file, for the next
     * mvcc_live_leases after mvcc_reload_prepared */
    struct buf prep_leases;
    bool prep_leases_valid;
    mvcc_observer_fn obs;
    void *obs_arg;
    struct buf enc;  /* the kv being written */
    struct buf prev; /* copy of the kv being replaced (LMDB pages move under puts) */
    /* copies of records by revision (see "The record memo") */
    struct memo {
        int64_t main;
        uint32_t sub;
        bool used;
        uint32_t pins; /* visitors holding pointers into |raw| */
        struct buf raw;
    } memo[MEMO_SLOTS];
    struct buf aux;  /* tombstone event kv */
    /* Ended read txns kept reset for reuse: mdb_txn_renew skips the
     * allocation and reader-slot setup of a fresh mdb_txn_begin. */
    mvcc_read *spare[READ_SPARES];
    int nspare;
    /* Reads from other threads (mvcc_share): the owner takes |lock| for
     * writing around every change of the index and of the revision marks
     * (|excl| counts its nesting); other threads read under it, at the
     * published revisions (__atomic), through read txns each thread keeps
     * (registered in |reg| so the owner can free them when the file is
     * replaced; |gen| tells a thread its cached one is gone). */
    bool shared;
    int excl;
    pthread_rwlock_t lock;
    int64_t pub_rev;       /* s->rev as of the last change */
    int64_t pub_committed; /* committed_rev as of the last commit */
    uint64_t gen;
    pthread_mutex_t reg_mu;
    mvcc_read *reg[SHARED_READERS];
    int nreg;
    mvcc_read *det; /* detached reads under way (under reg_mu) */
};

/* ---- sharing reads with other threads ------------------------------------ */

static uint64_t gen_counter; /* store generations, unique in the process */

static __thread struct {
    uint64_t gen;
    mvcc_read *r;
} tl_read;

static void wlock(mvcc_store *s)
{
    if (s->shared && s->excl++ == 0)
        pthread_rwlock_wrlock(&s->lock);
}

static void wunlock(mvcc_store *s)
{
    if (s->shared && --s->excl == 0)
        pthread_rwlock_unlock(&s->lock);
}

static void publish(mvcc_store *s)
{
    __atomic_store_n(&s->pub_rev, s->rev, __ATOMIC_RELEASE);
    __atomic_store_n(&s->pub_committed, s->committed_rev, __ATOMIC_RELEASE);
}

int mvcc_share(mvcc_store *s)
{
    if (s->shared)
        return 0;
    pthread_rwlockattr_t at;
    pthread_rwlockattr_init(&at);
    /* apply must not starve behind a stream of readers */
    pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rv = pthread_rwlock_init(&s->lock, &at);
    pthread_rwlockattr_destroy(&at);
    if (rv != 0)
        return -rv;
    pthread_mutex_init(&s->reg_mu, NULL);
    s->gen = __atomic_add_fetch(&gen_counter, 1, __ATOMIC_RELAXED);
    publish(s);
    s->shared = true;
    return 0;
}

/* release_shared frees the read txns other threads keep (under the write
 * lock: none is in use). */
static void release_shared(mvcc_store *s)
{
    if (!s->shared)
        return;
    pthread_mutex_lock(&s->reg_mu);
    for (int i = 0; i < s->nreg; i++) {
        mdb_txn_abort(s->reg[i]->txn);
        free(s->reg[i]);
    }
    s->nreg = 0;
    /* detached reads: their thread learns it at its next piece (it reads
     * txn under the read lock, and we hold the write lock) */
    for (mvcc_read *r = s->det; r != NULL; r = r->dnext)
        if (r->txn != NULL) {
            mdb_txn_abort(r->txn);
            r->txn = NULL;
        }
    __atomic_store_n(&s->gen, __atomic_add_fetch(&gen_counter, 1, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->reg_mu);
}

void mvcc_exclusive_begin(mvcc_store *s)
{
    wlock(s);
}

void mvcc_exclusive_end(mvcc_store *s)
{
    wunlock(s);
}

int mvcc_read_begin_shared(mvcc_store *s, int64_t min_rev, mvcc_read **out)
{
    *out = NULL;
    if (!s->shared)
        return -EAGAIN;
    if (pthread_rwlock_tryrdlock(&s->lock) != 0)
        return -EAGAIN; /* the owner is changing the index: it answers */
    /* Only a read that sees everything the owner has answered: its
     * revision committed, so an LMDB read txn begun now holds it. */
    int64_t rev = min_rev > 0 ? min_rev : __atomic_load_n(&s->pub_rev, __ATOMIC_ACQUIRE);
    int64_t committed = __atomic_load_n(&s->pub_committed, __ATOMIC_ACQUIRE);
    if (committed < rev) {
        pthread_rwlock_unlock(&s->lock);
        return -EAGAIN;
    }
    mvcc_read *r = NULL;
    uint64_t gen = __atomic_load_n(&s->gen, __ATOMIC_RELAXED);
    if (tl_read.r != NULL && tl_read.gen == gen && tl_read.r->s == s) {
        r = tl_read.r;
        if (mdb_txn_renew(r->txn) != 0)
            r = NULL; /* stays registered; freed with the others */
    }
    if (r == NULL) {
        r = calloc(1, sizeof(*r));
        int rv = r != NULL ? backend_read_begin(s->be, &r->txn) : -ENOMEM;
        if (rv != 0) {
            free(r);
            pthread_rwlock_unlock(&s->lock);
            return rv;
        }
        r->s = s;
        r->shared = true;
        pthread_mutex_lock(&s->reg_mu);
        if (s->nreg < SHARED_READERS) {
            s->reg[s->nreg++] = r;
            r->cached = true;
            tl_read.r = r;
            tl_read.gen = gen;
        }
        pthread_mutex_unlock(&s->reg_mu);
    }
    /* a compaction scheduled above |committed| may have removed, in a
     * commit this txn sees, revisions a read at |committed| needs */
    if (__atomic_load_n(&s->compact_rev, __ATOMIC_ACQUIRE) > committed) {
        mvcc_read_end(r);
        return -EAGAIN;
    }
    r->rev = committed;
    *out = r;
    return 0;
}

int mvcc_read_begin_detached(mvcc_store *s, int64_t min_rev, mvcc_read **out)
{
    *out = NULL;
    if (!s->shared)
        return -EAGAIN;
    /* a worker may wait for the owner's write txn or step to end */
    pthread_rwlock_rdlock(&s->lock);
    int64_t rev = min_rev > 0 ? min_rev : __atomic_load_n(&s->pub_rev, __ATOMIC_ACQUIRE);
    int64_t committed = __atomic_load_n(&s->pub_committed, __ATOMIC_ACQUIRE);
    int rv = 0;
    mvcc_read *r = NULL;
    if (committed < rev || __atomic_load_n(&s->compact_rev, __ATOMIC_ACQUIRE) > committed)
        rv = -EAGAIN; /* as mvcc_read_begin_shared */
    else if ((r = calloc(1, sizeof(*r))) == NULL)
        rv = -ENOMEM;
    else if ((rv = backend_read_begin(s->be, &r->txn)) != 0)
        free(r);
    if (rv == 0) {
        r->s = s;
        r->detached = true;
        r->rev = committed;
        pthread_mutex_lock(&s->reg_mu);
        r->dnext = s->det;
        if (s->det != NULL)
            s->det->dprev = r;
        s->det = r;
        pthread_mutex_unlock(&s->reg_mu);
        *out = r;
    }
    pthread_rwlock_unlock(&s->lock);
    return rv;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- open / close -------------------------------------------------------- */

/* record_key finds the user key in a stored mvccpb.KeyValue: field 1 comes
 * first in the canonical encoding (mvcc_kv_encode, and etcd's), so most
 * records need no full decode. */
static int record_key(const MDB_val *d, const uint8_t **key, size_t *klen)
{
    const uint8_t *p = d->mv_data;
    size_t n = d->mv_size;
    if (n >= 2 && p[0] == 0x0a && p[1] < 0x80 && (size_t)p[1] + 2 <= n) {
        *key = p + 2;
        *klen = p[1];
        return 0;
    }
    struct mvcc_kv kv;
    int rv = mvcc_kv_decode(p, n, &kv);
    if (rv == 0) {
        *key = kv.key;
        *klen = kv.key_len;
    }
    return rv;
}

/* One stretch of the key database, [from, to) in main revisions, loaded
 * by one thread. */
struct scan_part {
    MDB_env *env;
    MDB_dbi kdb;
    int64_t from, to;
    struct kindex_loader ld;
    int64_t last;
    size_t nrecords;
    int rv;
    pthread_t th;
};

static void *scan_part_run(void *arg)
{
    struct scan_part *p = arg;
    MDB_txn *txn;
    int rv = 0;
    int rc = mdb_txn_begin(p->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        p->rv = backend_err(rc);
        return NULL;
    }
    MDB_cursor *cur;
    rc = mdb_cursor_open(txn, p->kdb, &cur);
    if (rc != 0) {
        mdb_txn_abort(txn);
        p->rv = backend_err(rc);
        return NULL;
    }
    /* records are handed over in groups (their bytes stay valid in the
     * read txn's map), so the loader can fetch ahead */
    struct kindex_load_rec recs[4 * KINDEX_LOAD_GROUP];
    size_t nrec = 0;
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, p->from, 0, false), rk}, d;
    for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);;
         rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        int64_t main = 0, sub = 0;
        bool tomb = false;
        if (rc == 0 && (rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &main, &sub, &tomb)) != 0) {
            log_error("mvcc", "cannot index a record: %s", q_strerror(rv));
            break;
        }
        if (rc == 0 && main >= p->to)
            rc = MDB_NOTFOUND; /* the next part's */
        if (rc == 0) {
            const uint8_t *key = NULL;
            size_t klen = 0;
            rv = record_key(&d, &key, &klen);
            if (rv == 0 && (main <= 0 || sub < 0 || sub > UINT32_MAX))
                rv = QERR_CORRUPT;
            if (rv != 0) {
                log_error("mvcc", "cannot index record %lld_%lld: %s", (long long)main,
                          (long long)sub, q_strerror(rv));
                break;
            }
            recs[nrec++] = (struct kindex_load_rec){key, klen, main, (uint32_t)sub, tomb};
            p->nrecords++;
            p->last = main;
        }
        if (nrec > 0 && (rc != 0 || nrec == sizeof(recs) / sizeof(recs[0]))) {
            rv = kindex_load_add_many(&p->ld, recs, nrec);
            if (rv == -EINVAL)
                rv = QERR_CORRUPT;
            if (rv != 0) {
                log_error("mvcc", "cannot index records up to revision %lld: %s",
                          (long long)p->last, q_strerror(rv));
                break;
            }
            nrec = 0;
        }
        if (rc != 0)
            break;
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = backend_err(rc);
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    p->rv = rv;
    return NULL;
}

/* Threads the rebuild uses: the CPUs this process may run on, at most
 * this many, and one for a store too small to be worth it. */
#define REBUILD_MAX_THREADS 8
#define REBUILD_RECORDS_PER_THREAD 500000

static int forced_threads; /* mvcc_set_rebuild_threads, for tests */

void mvcc_set_rebuild_threads(int n)
{
    forced_threads = n < 0 ? 0 : n > REBUILD_MAX_THREADS ? REBUILD_MAX_THREADS : n;
}

static int rebuild_threads(size_t records)
{
    if (forced_threads > 0)
        return (size_t)forced_threads <= records ? forced_threads : 1;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    size_t by_size = records / REBUILD_RECORDS_PER_THREAD;
    int n = cpus < REBUILD_MAX_THREADS ? cpus : REBUILD_MAX_THREADS;
    if ((size_t)n > by_size)
        n = (int)by_size;
    return n < 1 ? 1 : n;
}

/* rebuild_index makes the key index |ix| from every record of the key
 * database |kdb| of |env|: the key database is cut into stretches of
 * revisions, each loaded by a thread in one sequential pass (kindex_load_*),
 * and the loaders merged in order. *|top| gets the last main revision (left
 * alone when there is no record). Any thread may run it. */
static int rebuild_index(MDB_env *env, MDB_dbi kdb, struct kindex *ix, int64_t *top_out)
{
    uint64_t t0 = now_ns();
    MDB_txn *txn;
    int rv = 0;
    int rc0 = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc0 != 0)
        return backend_err(rc0);
    MDB_stat st;
    MDB_cursor *cur = NULL;
    MDB_val k, d;
    int64_t first = 0, last = 0, sub;
    bool tomb;
    int rc = mdb_stat(txn, kdb, &st);
    if (rc == 0)
        rc = mdb_cursor_open(txn, kdb, &cur);
    if (rc == 0 && (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST)) == 0)
        rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &first, &sub, &tomb);
    if (rc == 0 && rv == 0 && (rc = mdb_cursor_get(cur, &k, &d, MDB_LAST)) == 0)
        rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &last, &sub, &tomb);
    if (cur != NULL)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
        return 0; /* no record: an empty index */
    if (rc != 0)
        return backend_err(rc);
    if (rv != 0)
        return rv;

    int n = rebuild_threads(st.ms_entries);
    if ((int64_t)n > last - first + 1)
        n = 1;
    struct scan_part parts[REBUILD_MAX_THREADS];
    memset(parts, 0, sizeof(parts));
    for (int i = 0; i < n; i++) {
        parts[i].env = env;
        parts[i].kdb = kdb;
        parts[i].from = first + (last - first + 1) * i / n;
        parts[i].to = i + 1 < n ? first + (last - first + 1) * (i + 1) / n : INT64_MAX;
        kindex_load_begin(&parts[i].ld);
    }
    int started = 1;
    for (int i = 1; i < n; i++, started++)
        if (pthread_create(&parts[i].th, NULL, scan_part_run, &parts[i]) != 0)
            break;
    /* parts no thread could take are loaded here, in turn */
    for (int i = started; i < n; i++)
        scan_part_run(&parts[i]);
    scan_part_run(&parts[0]);
    for (int i = 1; i < started; i++)
        pthread_join(parts[i].th, NULL);
    uint64_t t_scan = now_ns();

    size_t nrecords = 0;
    int64_t top = 0;
    for (int i = 0; i < n; i++) {
        if (rv == 0)
            rv = parts[i].rv;
        nrecords += parts[i].nrecords;
        if (parts[i].last > top)
            top = parts[i].last;
    }
    for (int i = 1; i < n && rv == 0; i++) {
        rv = kindex_load_merge(&parts[0].ld, &parts[i].ld);
        if (rv == -EINVAL)
            rv = QERR_CORRUPT;
    }
    size_t nkeys = parts[0].ld.n;
    if (rv == 0)
        rv = kindex_load_finish(&parts[0].ld, ix);
    for (int i = 0; i < n; i++)
        kindex_load_abort(&parts[i].ld); /* what a failure left; nothing otherwise */
    if (rv != 0)
        return rv;
    uint64_t t_end = now_ns();
    log_info("mvcc",
             "key index rebuilt: %zu keys, %zu revisions in %.2f s (%d thread%s: scan %.2f s, "
             "merge, sort and build %.2f s)",
             nkeys, nrecords, (double)(t_end - t0) / 1e9, n, n == 1 ? "" : "s",
             (double)(t_scan - t0) / 1e9, (double)(t_end - t_scan) / 1e9);
    *top_out = top;
#ifdef __GLIBC__
    /* the loaders' tables and the entries' trimmed tails are free now: hand
     * the memory back (without this the member keeps ~2x the index) */
    malloc_trim(0);
#endif
    return 0;
}

/* load builds the in-memory state (index, revisions) from the last commit. */
static int scan_live_leases(MDB_txn *txn, MDB_dbi kdb, const struct kindex *ix, int64_t at_rev,
                            mvcc_lease_fn fn, void *arg);

/* An index built off the loop from a database file before it replaces the
 * store's (mvcc_prepare_file). */
struct mvcc_prepared {
    struct kindex ix;
    int64_t top;
    /* the live keys bound to leases (mvcc_live_leases), when the file has
     * a lease: records of lease (8), key length (4), key */
    struct buf leases;
    bool leases_valid;
    int err;
};

/* load_from builds the in-memory state (index, revisions) from the last
 * commit, taking the index from |prep| instead of rebuilding it when given
 * (then |prep| is consumed). */
static int load_from(mvcc_store *s, mvcc_prepared *prep)
{
    for (int i = 0; i < MEMO_SLOTS; i++)
        s->memo[i].used = false;
    s->rev = 1;
    s->compact_rev = -1; /* never compacted, as etcd's compactMainRev */
    s->compacting = false;
    s->compact_index = false;
    s->compact_pos = 1;
    s->compact_pos_sub = 0;
    buf_reset(&s->compact_next);
    memset(&s->cstats, 0, sizeof(s->cstats));
    int rv = 0;
    if (prep != NULL) {
        s->ix = prep->ix;
        memset(&prep->ix, 0, sizeof(prep->ix));
    } else if ((rv = kindex_init(&s->ix)) != 0) {
        return rv;
    }
    uint64_t fin = 0, sched = 0;
    MDB_txn *txn;
    rv = backend_read_begin(s->be, &txn);
    if (rv != 0)
        return rv;
    uint64_t pos = 1, pos_sub = 0;
    rv = backend_meta_get(s->be, txn, META_FINISHED, &fin);
    bool compacted = rv == 0, scheduled = false;
    if (rv == 0 || rv == -ENOENT) {
        rv = backend_meta_get(s->be, txn, META_SCHEDULED, &sched);
        scheduled = rv == 0;
    }
    if (rv == 0 || rv == -ENOENT)
        rv = backend_meta_get(s->be, txn, META_PROGRESS, &pos);
    if (rv == 0 || rv == -ENOENT)
        rv = backend_meta_get(s->be, txn, META_PROGRESS_SUB, &pos_sub);
    uint64_t step_rev = 0;
    int64_t last_main = 0, last_sub = -1, top = 0;
    if (rv == 0 || rv == -ENOENT)
        rv = backend_meta_get(s->be, txn, META_STEP_REV, &step_rev);
    if (rv == 0 && step_rev != 0) {
        /* where LMDB's records of the partial revision stop */
        MDB_cursor *cur;
        MDB_val k, d;
        bool tomb;
        int rc = mdb_cursor_open(txn, s->kdb, &cur);
        if (rc == 0) {
            rc = mdb_cursor_get(cur, &k, &d, MDB_LAST);
            if (rc == 0)
                rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &last_main, &last_sub, &tomb);
            mdb_cursor_close(cur);
        }
        if (rc != 0 && rc != MDB_NOTFOUND)
            rv = backend_err(rc);
    }
    backend_read_end(txn);
    if (rv == -ENOENT)
        rv = 0;
    if (rv == 0)
        rv = prep != NULL ? 0 : rebuild_index(backend_env(s->be), s->kdb, &s->ix, &top);
    if (prep != NULL)
        top = prep->top;
    if (top > s->rev)
        s->rev = top;
    if (rv != 0)
        return rv;
    if (compacted)
        s->compact_rev = (int64_t)fin;
    /* A compaction removes its revisions over many batches; the scheduled
     * mark commits with the first, the finished one with the last. Reads
     * below the scheduled revision are refused from the start, and the
     * removal resumes where its last committed step recorded it was. */
    if (scheduled && (!compacted || sched > fin)) {
        s->compact_rev = (int64_t)sched;
        s->compacting = true;
        s->compact_target = (int64_t)sched;
        bool valid = pos >= 1 && pos <= sched && pos_sub <= UINT32_MAX;
        s->compact_pos = valid ? (int64_t)pos : 1;
        s->compact_pos_sub = valid ? (int64_t)pos_sub : 0;
        s->cstats.start_ns = now_ns();
        log_info("mvcc",
                 "resuming the compaction at revision %llu from revision %lld "
                 "(finished: %llu)",
                 (unsigned long long)sched, (long long)s->compact_pos, (unsigned long long)fin);
    }
    /* A revision written in steps whose last step did not commit: the
     * index holds its records, but the store is at the revision before it
     * until the same entry, applied again, resumes it (mvcc.h). */
    s->partial_rev = 0;
    s->partial_sub = 0;
    if (step_rev != 0 && (int64_t)step_rev == last_main && s->rev == last_main && last_sub >= 0 &&
        last_sub < UINT32_MAX) {
        s->partial_rev = (int64_t)step_rev;
        s->partial_sub = (uint32_t)last_sub + 1;
        s->rev = s->partial_rev - 1;
        log_info("mvcc",
                 "revision %lld is partial (%u changes committed in steps): "
                 "the store is at revision %lld until its entry is applied again",
                 (long long)s->partial_rev, s->partial_sub, (long long)s->rev);
    } else if (step_rev != 0) {
        log_warn("mvcc",
                 "ignoring the mark of a revision in steps (%llu): the last record "
                 "is of revision %lld",
                 (unsigned long long)step_rev, (long long)last_main);
    }
    /* Everything up to a compaction may have been deleted (etcd restore). */
    if (s->rev < s->compact_rev)
        s->rev = s->compact_rev;
    s->committed_rev = s->rev;
    publish(s);
    return 0;
}

static int load(mvcc_store *s)
{
    return load_from(s, NULL);
}

static void gather_lease(const uint8_t *key, size_t key_len, int64_t lease, void *arg)
{
    mvcc_prepared *p = arg;
    uint32_t klen = (uint32_t)key_len;
    if (p->err == 0)
        p->err = buf_append(&p->leases, &lease, 8);
    if (p->err == 0)
        p->err = buf_append(&p->leases, &klen, 4);
    if (p->err == 0)
        p->err = buf_append(&p->leases, key, key_len);
}

int mvcc_prepare_file(const char *path, mvcc_prepared **out)
{
    *out = NULL;
    mvcc_prepared *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi kdb = 0;
    int rc = mdb_env_create(&env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(env, 16);
    if (rc == 0)
        rc = mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK, 0644);
    if (rc == 0)
        rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    bool nokey = false;
    if (rc == 0) {
        rc = mdb_dbi_open(txn, "key", 0, &kdb);
        nokey = rc == MDB_NOTFOUND; /* a store without a key database yet */
        if (nokey)
            rc = 0;
    }
    if (txn != NULL) {
        /* committed, not aborted: an aborted txn closes the handle */
        int rc2 = mdb_txn_commit(txn);
        if (rc == 0)
            rc = rc2;
    }
    int rv = rc == 0 ? kindex_init(&p->ix) : backend_err(rc);
    if (rv == 0 && !nokey)
        rv = rebuild_index(env, kdb, &p->ix, &p->top);
    /* the lessor's pass over the file too, when a lease exists */
    MDB_dbi ldb;
    MDB_stat lst;
    if (rv == 0 && !nokey && (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) == 0) {
        /* (without a lease the server asks for no binding: no pass) */
        if (mdb_dbi_open(txn, "lease", 0, &ldb) == 0 && mdb_stat(txn, ldb, &lst) == 0 &&
            lst.ms_entries > 0) {
            rv = scan_live_leases(txn, kdb, &p->ix, INT64_MAX, gather_lease, p);
            if (rv == 0)
                rv = p->err;
            p->leases_valid = rv == 0;
        }
        mdb_txn_abort(txn);
    } else if (rv == 0 && !nokey) {
        rv = backend_err(rc);
    }
    if (env != NULL)
        mdb_env_close(env);
    if (rv != 0) {
        int lrc = rc != 0 ? rc : backend_last_rc();
        log_error("mvcc", "cannot index the database %s: %s (LMDB: %s)", path, q_strerror(rv),
                  lrc != 0 ? mdb_strerror(lrc) : "none");
        mvcc_prepared_free(p);
        return rv;
    }
    *out = p;
    return 0;
}

static void *free_index_thread(void *arg)
{
    uint64_t t0 = now_ns();
    size_t keys = ((struct kindex *)arg)->nkeys;
    kindex_free(arg);
    free(arg);
    uint64_t t1 = now_ns();
#ifdef __GLIBC__
    /* The entries were freed into the arena of the thread that made them
     * (the loop's, or an indexing thread's) and glibc gives back only the
     * top of a heap: without this a member that installed a snapshot
     * kept both indexes' memory, 2x the index for as long as it ran. */
    malloc_trim(0);
#endif
    log_info("mvcc", "freed a replaced key index of %zu keys in %.3f s (given back to the "
             "system in %.3f s)", keys, (double)(t1 - t0) / 1e9, (double)(now_ns() - t1) / 1e9);
    return NULL;
}

/* free_index_aside frees |ix| (left empty) on a thread of its own: a key
 * index of a million keys takes about 90 ms to free, which a snapshot
 * install (or a dropped one) would otherwise hold the loop for. Nothing
 * can reach the old index once it is taken out (under the write lock, for
 * the store's). */
static void free_index_aside(struct kindex *ix)
{
    if (ix->root == NULL)
        return;
    struct kindex *old = malloc(sizeof(*old));
    if (old != NULL) {
        *old = *ix;
        memset(ix, 0, sizeof(*ix));
        pthread_attr_t at;
        pthread_t t;
        bool started = pthread_attr_init(&at) == 0;
        if (started) {
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            started = pthread_create(&t, &at, free_index_thread, old) == 0;
            pthread_attr_destroy(&at);
        }
        if (started)
            return;
        *ix = *old;
        free(old);
    }
    kindex_free(ix); /* no memory or no thread for it: here */
}

void mvcc_prepared_free(mvcc_prepared *p)
{
    if (p == NULL)
        return;
    free_index_aside(&p->ix); /* a snapshot dropped after it was indexed */
    buf_free(&p->leases);
    free(p);
}

int mvcc_reload_prepared(mvcc_store *s, mvcc_prepared *p)
{
    wlock(s);
    mvcc_release_reads(s);
    free_index_aside(&s->ix); /* leaves it empty */
    int rv = load_from(s, p);
    buf_free(&s->prep_leases);
    s->prep_leases = p->leases;
    s->prep_leases_valid = rv == 0 && p->leases_valid;
    memset(&p->leases, 0, sizeof(p->leases));
    wunlock(s);
    mvcc_prepared_free(p);
    return rv;
}

int mvcc_open(backend *be, mvcc_store **out)
{
    *out = NULL;
    mvcc_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->be = be;
    s->kdb = backend_dbi(be, BACKEND_DB_KEY);
    s->txn.s = s;
    int rv = load(s);
    if (rv != 0) {
        mvcc_close(s);
        return rv;
    }
    *out = s;
    return 0;
}

int mvcc_reload(mvcc_store *s)
{
    buf_free(&s->prep_leases);
    s->prep_leases_valid = false;
    wlock(s);
    mvcc_release_reads(s);
    free_index_aside(&s->ix); /* leaves it empty */
    int rv = load(s);
    wunlock(s);
    return rv;
}

void mvcc_release_reads(mvcc_store *s)
{
    wlock(s);
    release_shared(s);
    wunlock(s);
    while (s->nspare > 0) {
        mvcc_read *r = s->spare[--s->nspare];
        mdb_txn_abort(r->txn);
        free(r);
    }
}

void mvcc_close(mvcc_store *s)
{
    if (s == NULL)
        return;
    mvcc_release_reads(s);
    if (s->shared) {
        pthread_rwlock_destroy(&s->lock);
        pthread_mutex_destroy(&s->reg_mu);
    }
    kindex_free(&s->ix);
    buf_free(&s->enc);
    buf_free(&s->prev);
    for (int i = 0; i < MEMO_SLOTS; i++)
        buf_free(&s->memo[i].raw);
    buf_free(&s->aux);
    buf_free(&s->compact_next);
    buf_free(&s->prep_leases);
    free(s);
}

int64_t mvcc_rev(const mvcc_store *s)
{
    return s->rev;
}

int64_t mvcc_compact_rev(const mvcc_store *s)
{
    return s->compact_rev;
}

void mvcc_set_observer(mvcc_store *s, mvcc_observer_fn fn, void *arg)
{
    s->obs = fn;
    s->obs_arg = arg;
}

/* ---- batches ------------------------------------------------------------- */

int mvcc_batch_begin(mvcc_store *s)
{
    return backend_batch_begin(s->be);
}

int mvcc_batch_abort(mvcc_store *s)
{
    backend_batch_abort(s->be);
    if (s->txn.open)
        wunlock(s); /* the txn's */
    s->txn.open = false;
    s->txn.changes = 0;
    s->sticky_err = 0;
    /* The index has no undo log: rebuild it from what LMDB has. */
    wlock(s);
    kindex_free(&s->ix);
    int rv = load(s);
    wunlock(s);
    if (rv != 0)
        log_error("mvcc", "reload after abort failed: %s", q_strerror(rv));
    return rv;
}

int mvcc_batch_commit(mvcc_store *s)
{
    if (s->txn.open)
        return -EBUSY;
    int rv = s->sticky_err;
    s->sticky_err = 0;
    if (rv != 0)
        backend_batch_abort(s->be);
    else
        rv = backend_batch_commit(s->be);
    if (rv == 0) {
        s->committed_rev = s->rev;
        __atomic_store_n(&s->pub_committed, s->committed_rev, __ATOMIC_RELEASE);
        return 0;
    }
    /* The batch is gone: bring memory back to what the disk has. */
    wlock(s);
    kindex_free(&s->ix);
    int rv2 = load(s);
    wunlock(s);
    if (rv2 != 0)
        log_error("mvcc", "reload after failed commit failed: %s", q_strerror(rv2));
    return rv;
}

/* ---- ranges -------------------------------------------------------------- */

/* fetch reads the kv of revision |r| through |lt| (or |cur|, a cursor on
 * the key database, if not NULL) into |kv|. */
static int fetch(mvcc_store *s, MDB_txn *lt, MDB_cursor *cur, const struct kindex_rev *r,
                 struct mvcc_kv *kv)
{
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, r->main, r->sub, r->tomb), rk}, d;
    /* A positioned cursor first checks its current leaf page, so keys
     * written together are found without a descent from the root. */
    int rc = cur ? mdb_cursor_get(cur, &k, &d, MDB_SET) : mdb_get(lt, s->kdb, &k, &d);
    if (rc == MDB_NOTFOUND) {
        /* The index names a revision LMDB does not have. */
        log_error("mvcc", "revision %lld_%u missing from the key database", (long long)r->main,
                  r->sub);
        return QERR_CORRUPT;
    }
    if (rc != 0)
        return backend_err(rc);
    return mvcc_kv_decode(d.mv_data, d.mv_size, kv);
}

static struct memo *memo_slot(mvcc_store *s, int64_t main, uint32_t sub)
{
    uint64_t h = ((uint64_t)main * 0x9E3779B97F4A7C15ull) ^ sub;
    return &s->memo[(h >> 32) % MEMO_SLOTS];
}

/* memo_keep copies the record |raw| of revision (main, sub) into its slot,
 * unless a visitor holds that slot's copy (an allocation failure only
 * leaves it out) */
static void memo_keep(mvcc_store *s, int64_t main, uint32_t sub, const uint8_t *raw, size_t n)
{
    struct memo *m = memo_slot(s, main, sub);
    if (n > MEMO_MAX || m->pins > 0)
        return;
    buf_reset(&m->raw);
    m->used = buf_append(&m->raw, raw, n) == 0;
    m->main = main;
    m->sub = sub;
}

static struct memo *memo_find(mvcc_store *s, int64_t main, uint32_t sub)
{
    struct memo *m = memo_slot(s, main, sub);
    return m->used && m->main == main && m->sub == sub ? m : NULL;
}

static bool is_from_key(const uint8_t *end, size_t end_len)
{
    return end_len == 1 && end[0] == 0;
}

/* past_end: has a scan from |key| reached an entry beyond the range? An
 * empty |end| is the single key; |unbounded| (end "\0") never ends. */
static bool past_end(const struct kindex_entry *e, const uint8_t *key, size_t key_len,
                     const uint8_t *end, size_t end_len, bool unbounded)
{
    if (end_len == 0)
        return e->klen != key_len || memcmp(e->key, key, key_len) != 0;
    return !unbounded && bytes_compare(e->key, e->klen, end, end_len) >= 0;
}

/* Entries a detached read visits under one hold of the read lock: about a
 * millisecond of work, after which the owner's waiting writer goes first. */
#define DETACHED_PIECE 1000

/* next_piece lets the owner in between two pieces of a detached read: it
 * drops the read lock and takes it again, checks that the read still holds
 * (its txn was not released for a file swap, no compaction was scheduled
 * above |rev|: the index keeps what a read at |rev| sees only then) and
 * seeks |it| back to |e|'s key (copied first: the entry may move). Errors:
 * -ESTALE (read it again), -ENOMEM. The read lock is held on return. */
static int next_piece(mvcc_store *s, mvcc_read *det, int64_t rev, struct kindex_iter *it,
                      const struct kindex_entry *e, struct buf *resume, MDB_cursor **mc)
{
    buf_reset(resume);
    int rv = buf_append(resume, e->key, e->klen);
    if (*mc != NULL) {
        mdb_cursor_close(*mc);
        *mc = NULL;
    }
    pthread_rwlock_unlock(&s->lock);
    pthread_rwlock_rdlock(&s->lock);
    if (rv != 0)
        return rv;
    if (det->txn == NULL || rev < __atomic_load_n(&s->compact_rev, __ATOMIC_ACQUIRE))
        return -ESTALE;
    kindex_seek(&s->ix, resume->data, resume->len, it);
    return 0;
}

static int do_range(mvcc_store *s, MDB_txn *lt, int64_t cur, const uint8_t *key, size_t key_len,
                    const uint8_t *end, size_t end_len, const struct mvcc_range_opts *opts,
                    mvcc_kv_fn fn, void *arg, struct mvcc_range_result *res, mvcc_read *det,
                    bool memo)
{
    static const struct mvcc_range_opts none = {0};
    struct mvcc_range_result dummy;
    if (opts == NULL)
        opts = &none;
    if (res == NULL)
        res = &dummy;
    int64_t rev = opts->rev;
    res->count = 0;
    res->rev = cur;
    if (rev > cur)
        return QERR_FUTURE_REV;
    if (rev <= 0)
        rev = cur;
    if (rev < __atomic_load_n(&s->compact_rev, __ATOMIC_ACQUIRE))
        return QERR_COMPACTED;
    res->rev = rev;
    if (end == NULL)
        end_len = 0;
    if (key_len == 0 && end_len == 0)
        return 0;

    int64_t sent = 0;
    bool want = !opts->count_only && fn != NULL;
    MDB_cursor *mc = NULL;
    int rv = 0;
    struct kindex_iter it;
    kindex_seek(&s->ix, key, key_len, &it);
    bool unbounded = is_from_key(end, end_len);
    int64_t spent = 0; /* against opts->budget */
    unsigned piece = 0;
    struct buf resume = {0};
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it)) {
        if (det != NULL && ++piece > DETACHED_PIECE) {
            piece = 0;
            if ((rv = next_piece(s, det, rev, &it, e, &resume, &mc)) != 0)
                break;
            if ((e = kindex_iter_get(&it)) == NULL)
                break;
            lt = det->txn;
        }
        if (past_end(e, key, key_len, end, end_len, unbounded))
            break;
        if (opts->budget > 0 && ++spent > opts->budget) {
            rv = -E2BIG;
            break;
        }
        const struct kindex_rev *r = kentry_at(e, rev);
        if (r == NULL || r->tomb)
            continue;
        res->count++;
        if (want && (opts->limit <= 0 || sent < opts->limit)) {
            if (mc == NULL && end_len != 0 && mdb_cursor_open(lt, s->kdb, &mc) != 0)
                mc = NULL; /* mdb_get works too, only slower */
            struct mvcc_kv kv;
            struct memo *m = memo ? memo_find(s, r->main, r->sub) : NULL;
            rv = m != NULL ? mvcc_kv_decode(m->raw.data, m->raw.len, &kv) : fetch(s, lt, mc, r, &kv);
            if (rv != 0)
                break;
            if (memo && m == NULL && end_len == 0)
                memo_keep(s, r->main, r->sub, kv.raw, kv.raw_len);
            spent += (int64_t)(kv.raw_len >> 10);
            sent++;
            if (m != NULL)
                m->pins++; /* kv points into its copy */
            rv = fn(&kv, arg);
            if (m != NULL)
                m->pins--;
            if (rv != 0)
                break;
        }
        if (end_len == 0)
            break;
    }
    if (mc != NULL)
        mdb_cursor_close(mc);
    buf_free(&resume);
    return rv;
}

/* ---- write txns ---------------------------------------------------------- */

int mvcc_txn_begin(mvcc_store *s, mvcc_txn **out)
{
    *out = NULL;
    if (backend_batch_txn(s->be) == NULL || s->txn.open)
        return -EBUSY;
    if (s->prep_leases_valid) { /* a write makes them stale */
        buf_free(&s->prep_leases);
        s->prep_leases_valid = false;
    }
    wlock(s); /* until mvcc_txn_end: the txn changes the index */
    s->txn.begin_rev = s->rev;
    s->txn.changes = 0;
    s->txn.since_step = 0;
    s->txn.since_pause = 0;
    s->txn.steps = 0;
    s->txn.resumed = false;
    if (s->partial_rev != 0) {
        /* the entry that wrote it, applied again: go on where LMDB stops */
        s->txn.begin_rev = s->partial_rev - 1;
        s->txn.changes = s->partial_sub;
        s->txn.resumed = true;
    }
    s->txn.open = true;
    *out = &s->txn;
    return 0;
}

/* The revision reads in |t| see: its own writes once it has any. */
static int64_t txn_read_rev(const mvcc_txn *t)
{
    return t->begin_rev + (t->changes > 0 ? 1 : 0);
}

int mvcc_txn_range(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *end,
                   size_t end_len, const struct mvcc_range_opts *opts, mvcc_kv_fn fn, void *arg,
                   struct mvcc_range_result *res)
{
    mvcc_store *s = t->s;
    return do_range(s, backend_batch_txn(s->be), txn_read_rev(t), key, key_len, end, end_len, opts,
                    fn, arg, res, NULL, true);
}

int64_t mvcc_txn_key_rev(mvcc_txn *t, const uint8_t *key, size_t key_len, uint32_t *sub)
{
    *sub = 0;
    struct kindex_entry *e = kindex_get(&t->s->ix, key, key_len);
    const struct kindex_rev *r = e != NULL ? kentry_at(e, txn_read_rev(t)) : NULL;
    if (r == NULL || r->tomb)
        return 0;
    *sub = r->sub;
    return r->main;
}

/* load_prev copies the live kv of |r| into s->prev and decodes it. */
static int load_prev(mvcc_store *s, MDB_txn *lt, const struct kindex_rev *r, struct mvcc_kv *kv)
{
    const struct memo *m = memo_find(s, r->main, r->sub);
    struct mvcc_kv tmp = {0};
    if (m != NULL) {
        tmp.raw = m->raw.data;
        tmp.raw_len = m->raw.len;
    } else {
        int rv = fetch(s, lt, NULL, r, &tmp);
        if (rv != 0)
            return rv;
    }
    buf_reset(&s->prev);
    int rv = buf_append(&s->prev, tmp.raw, tmp.raw_len);
    return rv != 0 ? rv : mvcc_kv_decode(s->prev.data, s->prev.len, kv);
}

/* Revision keys only grow, so every write is an append: MDB_APPEND skips
 * the search and fills pages completely. */
static int write_rev(mvcc_store *s, MDB_txn *lt, int64_t main, uint32_t sub, bool tomb,
                     const struct buf *val)
{
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, main, sub, tomb), rk}, d = {val->len, val->data};
    int rc = backend_put(s->be, lt, BACKEND_DB_KEY, &k, &d, MDB_APPEND);
    if (rc == MDB_KEYEXIST) {
        log_error("mvcc", "revision %lld_%u is not above the last one stored", (long long)main,
                  sub);
        return QERR_CORRUPT;
    }
    return backend_err(rc);
}

void mvcc_set_step(mvcc_store *s, size_t limit, mvcc_step_fn fn, void *arg)
{
    s->step_limit = limit;
    s->step_fn = fn;
    s->step_arg = arg;
}

int64_t mvcc_partial_rev(const mvcc_store *s)
{
    return s->partial_rev;
}

uint32_t mvcc_partial_changes(const mvcc_store *s)
{
    return s->partial_sub;
}

bool mvcc_txn_resumed(const mvcc_txn *t)
{
    return t->resumed;
}

int64_t mvcc_txn_begin_rev(const mvcc_txn *t)
{
    return t->begin_rev;
}

uint32_t mvcc_txn_steps(const mvcc_txn *t)
{
    return t->steps;
}

/* txn_step commits what the batch holds, this txn's changes so far
 * included, with the mark of the revision under way, and opens the next
 * LMDB transaction, when the txn has made step_limit changes since the last
 * step: called before each change. The revision stays invisible (mvcc.h).
 * A failed commit loses the batch: the caller must stop (the restart
 * resumes from the last committed step). */
static int pause(mvcc_txn *t)
{
    mvcc_store *s = t->s;
    t->since_pause = 0;
    /* the owner goes off to serve reads: the index is consistent between
     * two changes, and nothing but this txn changes it */
    wunlock(s);
    int rv = s->pause_fn(s->pause_arg);
    wlock(s);
    return rv;
}

static int txn_step(mvcc_txn *t)
{
    mvcc_store *s = t->s;
    if (s->step_limit == 0)
        return 0;
    bool pausing = s->pause_fn != NULL && s->pause_every > 0;
    /* with pauses, the first step commits early: the batch's entries
     * before this one are then committed, so what a fresh read txn sees
     * during a pause is everything answered */
    bool commit = t->since_step >= s->step_limit ||
                  (pausing && t->steps == 0 && t->since_step >= s->pause_every);
    if (!commit) {
        if (pausing && t->steps > 0 && t->since_pause >= s->pause_every)
            return pause(t);
        return 0;
    }
    int rv = s->step_fn != NULL ? s->step_fn(s->step_arg) : 0;
    if (rv == 0)
        rv = backend_meta_put(s->be, META_STEP_REV, (uint64_t)(t->begin_rev + 1));
    if (rv == 0)
        rv = backend_batch_commit(s->be);
    if (rv != 0)
        return rv;
    rv = backend_batch_begin(s->be);
    if (rv != 0)
        return rv;
    t->since_step = 0;
    t->steps++;
    /* everything before this revision is committed now: a fresh read txn
     * (the owner's, while the txn is open) or a shared read may read it */
    s->committed_rev = t->begin_rev;
    __atomic_store_n(&s->pub_committed, s->committed_rev, __ATOMIC_RELEASE);
    return s->pause_fn != NULL ? pause(t) : 0;
}

void mvcc_set_step_pause(mvcc_store *s, size_t every, mvcc_step_fn fn, void *arg)
{
    s->pause_every = every;
    s->pause_fn = fn;
    s->pause_arg = arg;
}

int mvcc_txn_put(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *value,
                 size_t value_len, int64_t lease, mvcc_kv_fn prev_fn, void *arg)
{
    mvcc_store *s = t->s;
    MDB_txn *lt = backend_batch_txn(s->be);
    if (!t->open || lt == NULL)
        return -EBUSY;
    if (key_len == 0)
        return QERR_EMPTY_KEY;
    if (t->changes == UINT32_MAX)
        return QERR_TOO_MANY_OPS;
    int rv = txn_step(t);
    if (rv != 0)
        return rv;
    lt = backend_batch_txn(s->be);
    int64_t rev = t->begin_rev + 1;
    uint32_t sub = t->changes;
    struct mvcc_kv prev, kv = {
                             .key = key,
                             .key_len = key_len,
                             .value = value,
                             .value_len = value_len,
                             .create_revision = rev,
                             .mod_revision = rev,
                             .version = 1,
                             .lease = lease,
                         };
    bool have_prev = false;
    /* One descent serves both the lookup and the append below: nothing
     * changes the index in between (callbacks must not write). */
    struct kindex_slot slot;
    struct kindex_entry *e = kindex_lookup(&s->ix, key, key_len, &slot);
    if (e != NULL) {
        const struct kindex_rev *last = &kentry_revs(e)[e->nrev - 1];
        /* resumed: this put was made before the restart (a txn writes a
         * key once) */
        if (t->resumed && last->main == rev)
            return 0;
        if (!last->tomb) {
            rv = load_prev(s, lt, last, &prev);
            if (rv != 0)
                return rv;
            have_prev = true;
            kv.create_revision = prev.create_revision;
            kv.version = prev.version + 1;
            if (prev_fn != NULL && (rv = prev_fn(&prev, arg)) != 0)
                return rv;
        }
    }
    buf_reset(&s->enc);
    rv = mvcc_kv_encode(&s->enc, &kv);
    if (rv == 0)
        rv = write_rev(s, lt, rev, sub, false, &s->enc);
    if (rv == 0) {
        memo_keep(s, rev, sub, s->enc.data, s->enc.len);
        rv = kindex_slot_append(&s->ix, &slot, key, key_len, rev, sub, false);
    }
    if (rv != 0)
        return rv;
    t->changes++;
    t->since_step++;
    t->since_pause++;
    if (s->obs != NULL) {
        kv.raw = s->enc.data;
        kv.raw_len = s->enc.len;
        s->obs(MVCC_EVENT_PUT, &kv, have_prev ? &prev : NULL, s->obs_arg);
    }
    return 0;
}

int mvcc_txn_delete_range(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *end,
                          size_t end_len, mvcc_kv_fn fn, void *arg, int64_t *deleted)
{
    mvcc_store *s = t->s;
    MDB_txn *lt = backend_batch_txn(s->be);
    int64_t n = 0;
    if (deleted != NULL)
        *deleted = 0;
    if (!t->open || lt == NULL)
        return -EBUSY;
    if (end == NULL)
        end_len = 0;
    if (key_len == 0 && end_len == 0)
        return 0;
    int64_t rrev = txn_read_rev(t), rev = t->begin_rev + 1;
    bool unbounded = is_from_key(end, end_len);
    struct kindex_iter it;
    int rv = 0;
    kindex_seek(&s->ix, key, key_len, &it);
    /* Appending a tombstone reallocates the entry but never changes the
     * tree's shape, so the iterator stays valid. */
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it)) {
        if (past_end(e, key, key_len, end, end_len, unbounded))
            break;
        const struct kindex_rev *r = kentry_at(e, rrev);
        if (r == NULL || r->tomb)
            continue;
        if (t->changes == UINT32_MAX) {
            rv = QERR_TOO_MANY_OPS;
            break;
        }
        if ((rv = txn_step(t)) != 0)
            break;
        lt = backend_batch_txn(s->be);
        struct mvcc_kv prev;
        rv = load_prev(s, lt, r, &prev);
        if (rv != 0)
            break;
        if (fn != NULL && (rv = fn(&prev, arg)) != 0)
            break;
        uint32_t sub = t->changes;
        /* The stored tombstone is a KeyValue with only the key. */
        struct mvcc_kv tomb = {.key = prev.key, .key_len = prev.key_len};
        buf_reset(&s->enc);
        rv = mvcc_kv_encode(&s->enc, &tomb);
        if (rv == 0)
            rv = write_rev(s, lt, rev, sub, true, &s->enc);
        if (rv == 0)
            rv = kindex_iter_append(&it, rev, sub, true);
        if (rv != 0)
            break;
        t->changes++;
        t->since_step++;
        t->since_pause++;
        n++;
        if (s->obs != NULL) {
            /* The event's kv carries the deleting revision, as etcd's. */
            tomb.mod_revision = rev;
            buf_reset(&s->aux);
            rv = mvcc_kv_encode(&s->aux, &tomb);
            if (rv != 0)
                break;
            tomb.raw = s->aux.data;
            tomb.raw_len = s->aux.len;
            s->obs(MVCC_EVENT_DELETE, &tomb, &prev, s->obs_arg);
        }
        if (end_len == 0)
            break;
    }
    if (deleted != NULL)
        *deleted = n;
    return rv;
}

int64_t mvcc_txn_end(mvcc_txn *t)
{
    mvcc_store *s = t->s;
    if (t->open && (t->steps > 0 || t->resumed)) {
        /* the revision's last changes are in this batch: its mark goes
         * with them (a failure fails the batch's commit) */
        MDB_val k = {strlen(META_STEP_REV), (void *)META_STEP_REV};
        int rc = backend_del(s->be, backend_batch_txn(s->be), BACKEND_DB_META, &k);
        if (rc != 0 && rc != MDB_NOTFOUND && s->sticky_err == 0)
            s->sticky_err = backend_err(rc);
        s->partial_rev = 0;
        s->partial_sub = 0;
    }
    if (t->open && t->changes > 0) {
        s->rev = t->begin_rev + 1;
        __atomic_store_n(&s->pub_rev, s->rev, __ATOMIC_RELEASE);
    }
    if (t->open)
        wunlock(s);
    t->open = false;
    t->changes = 0;
    return s->rev;
}

/* ---- read txns ----------------------------------------------------------- */

int mvcc_read_begin(mvcc_store *s, mvcc_read **out)
{
    *out = NULL;
    mvcc_read *r = NULL;
    MDB_txn *batch = backend_batch_txn(s->be);
    if (batch != NULL && !s->txn.open) {
        /* a batch stays open across loop passes: read through it, so
         * what was applied (and answered) is what is read */
        r = calloc(1, sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        r->s = s;
        r->txn = batch;
        r->borrowed = true;
        r->rev = s->rev;
        *out = r;
        return 0;
    }
    while (r == NULL && s->nspare > 0) {
        r = s->spare[--s->nspare];
        if (mdb_txn_renew(r->txn) != 0) {
            mdb_txn_abort(r->txn);
            free(r);
            r = NULL;
        }
    }
    if (r == NULL) {
        r = calloc(1, sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        int rv = backend_read_begin(s->be, &r->txn);
        if (rv != 0) {
            free(r);
            return rv;
        }
    }
    r->s = s;
    /* An LMDB read txn sees the last commit: read at that revision, not at
     * one an open batch has reached but not yet committed. */
    r->rev = s->committed_rev;
    *out = r;
    return 0;
}

int mvcc_read_range(mvcc_read *r, const uint8_t *key, size_t key_len, const uint8_t *end,
                    size_t end_len, const struct mvcc_range_opts *opts, mvcc_kv_fn fn, void *arg,
                    struct mvcc_range_result *res)
{
    if (!r->detached)
        return do_range(r->s, r->txn, r->rev, key, key_len, end, end_len, opts, fn, arg, res, NULL,
                        false);
    mvcc_store *s = r->s;
    pthread_rwlock_rdlock(&s->lock);
    int rv = r->txn == NULL
                 ? -ESTALE
                 : do_range(s, r->txn, r->rev, key, key_len, end, end_len, opts, fn, arg, res, r,
                            false);
    pthread_rwlock_unlock(&s->lock);
    return rv;
}

void mvcc_read_end(mvcc_read *r)
{
    if (r == NULL)
        return;
    while (r->chunks != NULL) {
        struct rd_chunk *next = r->chunks->next;
        free(r->chunks);
        r->chunks = next;
    }
    mvcc_store *s = r->s;
    if (r->borrowed) {
        free(r);
        return;
    }
    if (r->detached) {
        pthread_mutex_lock(&s->reg_mu);
        if (r->dprev != NULL)
            r->dprev->dnext = r->dnext;
        else
            s->det = r->dnext;
        if (r->dnext != NULL)
            r->dnext->dprev = r->dprev;
        MDB_txn *txn = r->txn; /* NULL: release_shared aborted it */
        pthread_mutex_unlock(&s->reg_mu);
        if (txn != NULL)
            mdb_txn_abort(txn);
        free(r);
        return;
    }
    if (r->shared) {
        if (r->cached) {
            mdb_txn_reset(r->txn);
        } else {
            mdb_txn_abort(r->txn);
            free(r);
        }
        pthread_rwlock_unlock(&s->lock);
        return;
    }
    if (s->nspare < READ_SPARES) {
        mdb_txn_reset(r->txn); /* releases the snapshot now, as an abort would */
        s->spare[s->nspare++] = r;
        return;
    }
    backend_read_end(r->txn);
    free(r);
}

int64_t mvcc_read_rev(const mvcc_read *r)
{
    return r->rev;
}

/* rd_alloc takes |n| bytes that live until mvcc_read_end. */
static uint8_t *rd_alloc(mvcc_read *r, size_t n)
{
    struct rd_chunk *c = r->chunks;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        c = malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = r->chunks;
        r->chunks = c;
    }
    uint8_t *p = c->data + c->used;
    c->used += n;
    return p;
}

int mvcc_read_history(mvcc_read *r, int64_t from, int64_t to, mvcc_history_fn fn, void *arg)
{
    mvcc_store *s = r->s;
    if (from < 1)
        from = 1;
    if (to < from)
        return 0;
    MDB_cursor *mc;
    int rc = mdb_cursor_open(r->txn, s->kdb, &mc);
    if (rc != 0)
        return backend_err(rc);
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, from, 0, false), rk}, d;
    int rv = 0;
    for (rc = mdb_cursor_get(mc, &k, &d, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(mc, &k, &d, MDB_NEXT)) {
        int64_t main, sub;
        bool tomb;
        struct mvcc_kv kv;
        rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &main, &sub, &tomb);
        if (rv != 0 || main > to)
            break;
        rv = mvcc_kv_decode(d.mv_data, d.mv_size, &kv);
        if (rv != 0)
            break;
        if (!tomb) {
            rv = fn(MVCC_EVENT_PUT, &kv, arg);
        } else {
            /* The stored tombstone has only the key; the event carries the
             * deleting revision too, as the observer's does. */
            struct mvcc_kv ev = {.key = kv.key, .key_len = kv.key_len, .mod_revision = main};
            size_t n = mvcc_kv_encoded_size(&ev);
            uint8_t *raw = rd_alloc(r, n);
            if (raw == NULL) {
                rv = -ENOMEM;
                break;
            }
            struct buf b = {raw, 0, n}; /* exactly n bytes: encode never grows it */
            mvcc_kv_encode(&b, &ev);
            ev.raw = raw;
            ev.raw_len = n;
            rv = fn(MVCC_EVENT_DELETE, &ev, arg);
        }
        if (rv != 0)
            break;
    }
    if (rv == 0 && rc != 0 && rc != MDB_NOTFOUND)
        rv = backend_err(rc);
    mdb_cursor_close(mc);
    return rv;
}

/* scan_live_leases is mvcc_live_leases's pass over the key database |kdb|
 * in |txn|, with the index |ix| read at |at|. */
static int scan_live_leases(MDB_txn *txn, MDB_dbi kdb, const struct kindex *ix, int64_t at_rev,
                            mvcc_lease_fn fn, void *arg)
{
    int rv = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, kdb, &cur);
    if (rc != 0)
        return backend_err(rc);
    MDB_val k, d;
    for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
        int64_t main, sub;
        bool tomb;
        struct mvcc_kv kv;
        if ((rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &main, &sub, &tomb)) != 0 ||
            (rv = mvcc_kv_decode(d.mv_data, d.mv_size, &kv)) != 0)
            break;
        if (tomb || kv.lease == 0)
            continue;
        /* bound to a lease: is this the key's current revision? */
        struct kindex_entry *e = kindex_get(ix, kv.key, kv.key_len);
        const struct kindex_rev *at = e != NULL ? kentry_at(e, at_rev) : NULL;
        if (at != NULL && !at->tomb && at->main == main && (int64_t)at->sub == sub)
            fn(kv.key, kv.key_len, kv.lease, arg);
    }
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = backend_err(rc);
    mdb_cursor_close(cur);
    return rv;
}

int mvcc_live_leases(mvcc_store *s, mvcc_lease_fn fn, void *arg)
{
    if (s->prep_leases_valid) {
        /* gathered on the worker that indexed the file (mvcc_prepare_file) */
        const uint8_t *p = s->prep_leases.data, *end = p + s->prep_leases.len;
        while (p + 12 <= end) {
            int64_t lease;
            uint32_t klen;
            memcpy(&lease, p, 8);
            memcpy(&klen, p + 8, 4);
            if (klen > (size_t)(end - p) - 12)
                break; /* never: the records are ours */
            fn(p + 12, klen, lease, arg);
            p += 12 + klen;
        }
        buf_free(&s->prep_leases);
        s->prep_leases_valid = false;
        return 0;
    }
    MDB_txn *txn;
    int rv = backend_read_begin(s->be, &txn);
    if (rv != 0)
        return rv;
    /* a partial revision's keys too: its entry resumes it, and a put it
     * made is not made again (mvcc.h) */
    rv = scan_live_leases(txn, s->kdb, &s->ix, s->partial_rev ? s->partial_rev : s->committed_rev,
                          fn, arg);
    backend_read_end(txn);
    return rv;
}

size_t mvcc_index_bytes(const mvcc_store *s)
{
    return kindex_mem_bytes(&s->ix) + sizeof(*s);
}

/* ---- compaction ----------------------------------------------------------
 *
 * mvcc_compact only schedules: it records the revision (reads below it fail
 * from then on) and mvcc_compact_step removes the revisions in bounded
 * pieces, each inside whatever batch is open, so no write transaction
 * grows with the history and the loop serves requests between steps.
 *
 * Two passes. The first walks the key database in revision order up to
 * the compaction revision and deletes each record the index says no read
 * at or above it can see: deletions follow the B+tree's own order, so a
 * step empties neighbouring records of the same leaf pages and a commit
 * writes few pages (walking keys instead scattered each step's deletions
 * over the whole file: ten times the pages per commit). Its position is
 * recorded in the meta database with every step, so a restart resumes
 * there. The second pass compacts the in-memory index, key by key: it only
 * frees memory, and after a restart the index is rebuilt from what the
 * first pass left, so it needs no mark of its own. */
/* A step looks at no more records (first pass) or keys (second) than this
 * many per revision it may drop, so a stretch with nothing to drop is
 * still a bounded step. */
#define COMPACT_VISITS_PER_REV 8
#define COMPACT_KEYS_PER_REV 16

/* dropped_at tells whether record (main, sub) of |key| goes in a
 * compaction at |rev| (main <= rev): anything below the key's latest
 * revision at or below |rev|, and that one too if it is a tombstone (etcd's
 * keyIndex.compact). A key the index no longer has at or below |rev| had
 * its last generation end there: everything goes. */
static bool dropped_at(mvcc_store *s, const uint8_t *key, size_t klen, int64_t rev, int64_t main,
                       int64_t sub)
{
    struct kindex_entry *e = kindex_get(&s->ix, key, klen);
    const struct kindex_rev *at = e != NULL ? kentry_at(e, rev) : NULL;
    if (at == NULL)
        return true;
    if (main != at->main)
        return main < at->main;
    if (sub != (int64_t)at->sub)
        return sub < (int64_t)at->sub;
    return at->tomb != 0;
}

/* compact_disk_step is one piece of the first pass: *|finished| once it
 * has passed the compaction revision. */
static int compact_disk_step(mvcc_store *s, MDB_txn *lt, size_t limit, bool *finished)
{
    int64_t rev = s->compact_target;
    size_t max_visits =
        limit > SIZE_MAX / COMPACT_VISITS_PER_REV ? SIZE_MAX : limit * COMPACT_VISITS_PER_REV;
    MDB_cursor *mc;
    int rc = mdb_cursor_open(lt, s->kdb, &mc);
    if (rc != 0)
        return backend_err(rc);
    uint8_t rk[MVCC_REVKEY_MAX];
    MDB_val k = {mvcc_revkey_put(rk, s->compact_pos, s->compact_pos_sub, false), rk}, d;
    size_t deleted = 0, visited = 0;
    int rv = 0;
    *finished = false;
    rc = mdb_cursor_get(mc, &k, &d, MDB_SET_RANGE);
    while (rc == 0) {
        int64_t main, sub;
        bool tomb;
        struct mvcc_kv kv;
        if ((rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &main, &sub, &tomb)) != 0)
            break;
        if (main > rev) {
            *finished = true;
            break;
        }
        if (deleted >= limit || visited >= max_visits) {
            s->compact_pos = main;    /* exactly here: a revision may hold */
            s->compact_pos_sub = sub; /* more kept records than a step visits */
            break;
        }
        visited++;
        if ((rv = mvcc_kv_decode(d.mv_data, d.mv_size, &kv)) != 0)
            break;
        if (!dropped_at(s, kv.key, kv.key_len, rev, main, sub)) {
            rc = mdb_cursor_get(mc, &k, &d, MDB_NEXT);
            continue;
        }
        if ((rc = backend_cursor_del(s->be, mc, BACKEND_DB_KEY)) != 0)
            break;
        deleted++;
        /* after a delete the cursor stands on the record that followed:
         * MDB_NEXT returns that one, not the one after it */
        rc = mdb_cursor_get(mc, &k, &d, MDB_NEXT);
    }
    mdb_cursor_close(mc);
    s->cstats.dropped += (int64_t)deleted;
    if (rv == 0 && rc == MDB_NOTFOUND)
        *finished = true;
    else if (rv == 0 && rc != 0) {
        log_error("mvcc", "compaction at %lld: deleting revisions: %s", (long long)rev,
                  mdb_strerror(rc));
        rv = backend_err(rc);
    }
    if (rv == 0 && !*finished)
        rv = backend_meta_put(s->be, META_PROGRESS, (uint64_t)s->compact_pos);
    if (rv == 0 && !*finished)
        rv = backend_meta_put(s->be, META_PROGRESS_SUB, (uint64_t)s->compact_pos_sub);
    return rv;
}

int mvcc_compact(mvcc_store *s, int64_t rev)
{
    MDB_txn *lt = backend_batch_txn(s->be);
    if (lt == NULL || s->txn.open)
        return -EBUSY;
    if (rev <= s->compact_rev)
        return QERR_COMPACTED;
    if (rev > s->rev)
        return QERR_FUTURE_REV;
    int rv = backend_meta_put(s->be, META_SCHEDULED, (uint64_t)rev);
    if (rv == 0)
        rv = backend_meta_put(s->be, META_PROGRESS, 1);
    if (rv == 0)
        rv = backend_meta_put(s->be, META_PROGRESS_SUB, 0);
    if (rv != 0)
        return rv;
    if (s->compacting)
        log_info("mvcc", "compaction at revision %lld superseded by one at %lld",
                 (long long)s->compact_target, (long long)rev);
    wlock(s);
    __atomic_store_n(&s->compact_rev, rev, __ATOMIC_RELEASE);
    wunlock(s);
    s->compacting = true;
    s->compact_target = rev;
    s->compact_pos = 1;
    s->compact_pos_sub = 0;
    s->compact_index = false;
    buf_reset(&s->compact_next);
    memset(&s->cstats, 0, sizeof(s->cstats));
    s->cstats.start_ns = now_ns();
    return 0;
}

bool mvcc_compacting(const mvcc_store *s)
{
    return s->compacting;
}

void mvcc_compact_progress(const mvcc_store *s, struct mvcc_compact_stats *out)
{
    *out = s->cstats;
    out->rev = s->compacting ? s->compact_target : -1;
    out->next_rev = s->compacting && !s->compact_index ? s->compact_pos : 0;
}

static int compact_step(mvcc_store *s, MDB_txn *lt, size_t limit, bool *done);

int mvcc_compact_step(mvcc_store *s, size_t limit, bool *done)
{
    *done = !s->compacting;
    if (*done)
        return 0;
    MDB_txn *lt = backend_batch_txn(s->be);
    if (lt == NULL || s->txn.open)
        return -EBUSY;
    if (limit == 0)
        limit = 1;
    s->cstats.steps++;
    uint64_t t0 = now_ns();
    wlock(s);
    int rv = compact_step(s, lt, limit, done);
    wunlock(s);
    uint64_t took = now_ns() - t0;
    if (took > s->cstats.max_step_ns)
        s->cstats.max_step_ns = took;
    if (rv == 0 && *done)
        /* etcd's mvcc/kvstore_compaction.go line, and quorum's step figures */
        log_kv(LOG_INFO, "mvcc", "finished scheduled compaction",
               LF_INT("compact-revision", s->cstats.rev),
               LF_DUR("took", now_ns() - s->cstats.start_ns),
               LF_INT("removed-revisions", s->cstats.dropped), LF_UINT("steps", s->cstats.steps),
               LF_DUR("longest-step", s->cstats.max_step_ns));
    return rv;
}

static int compact_step(mvcc_store *s, MDB_txn *lt, size_t limit, bool *done)
{
    int rv;
    if (!s->compact_index) {
        bool finished = false;
        rv = compact_disk_step(s, lt, limit, &finished);
        if (rv != 0)
            return rv; /* the batch holds a partial step: the caller aborts it */
        if (finished) {
            s->compact_index = true;
            buf_reset(&s->compact_next);
        }
        return 0;
    }
    const struct kindex_entry *stop = NULL;
    size_t max_keys =
        limit > SIZE_MAX / COMPACT_KEYS_PER_REV ? SIZE_MAX : limit * COMPACT_KEYS_PER_REV;
    rv = kindex_compact_step(&s->ix, s->compact_target, s->compact_next.data, s->compact_next.len,
                             SIZE_MAX, max_keys, NULL, NULL, &stop);
    if (rv != 0)
        return rv;
    if (stop != NULL) {
        buf_reset(&s->compact_next);
        return buf_append(&s->compact_next, stop->key, stop->klen);
    }
    rv = backend_meta_put(s->be, META_FINISHED, (uint64_t)s->compact_target);
    if (rv != 0)
        return rv;
    s->cstats.rev = s->compact_target;
    s->compacting = false;
    buf_reset(&s->compact_next);
    *done = true;
    return 0;
}

/* ---- hash ---------------------------------------------------------------- */

/* kept_at tells whether revision (main, sub) of the key in |v| is what a
 * compaction at |rev| would keep: the key's latest revision <= rev, unless
 * that is a tombstone (etcd's keyIndex.keep). */
static bool kept_at(mvcc_store *s, const MDB_val *v, int64_t rev, int64_t main, int64_t sub)
{
    struct mvcc_kv kv;
    if (mvcc_kv_decode(v->mv_data, v->mv_size, &kv) != 0)
        return false;
    struct kindex_entry *e = kindex_get(&s->ix, kv.key, kv.key_len);
    if (e == NULL)
        return false;
    const struct kindex_rev *r = kentry_at(e, rev);
    return r != NULL && !r->tomb && r->main == main && r->sub == sub;
}

static bool any_kept(mvcc_store *s, int64_t rev)
{
    struct kindex_iter it;
    kindex_seek(&s->ix, NULL, 0, &it);
    for (struct kindex_entry *e; (e = kindex_iter_get(&it)) != NULL; kindex_iter_next(&it)) {
        const struct kindex_rev *r = kentry_at(e, rev);
        if (r != NULL && !r->tomb)
            return true;
    }
    return false;
}

int mvcc_hash_kv(mvcc_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev)
{
    int64_t cur = s->rev, compact = s->compact_rev;
    if (compact_rev != NULL)
        *compact_rev = compact;
    *hash = 0;
    if (rev > 0 && rev <= compact)
        return QERR_COMPACTED;
    if (rev > cur)
        return QERR_FUTURE_REV;
    if (rev <= 0)
        rev = cur;
    MDB_txn *own = NULL, *lt = backend_batch_txn(s->be);
    if (lt == NULL) {
        int rv = backend_read_begin(s->be, &own);
        if (rv != 0)
            return rv;
        lt = own;
    }
    MDB_cursor *cur_;
    int rc = mdb_cursor_open(lt, s->kdb, &cur_);
    if (rc != 0) {
        backend_read_end(own);
        return backend_err(rc);
    }
    bool has_keep = any_kept(s, rev);
    uint32_t h = crc32c_update(0, "key", 3); /* etcd hashes the bucket name first */
    MDB_val k, d;
    int rv = 0;
    for (rc = mdb_cursor_get(cur_, &k, &d, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur_, &k, &d, MDB_NEXT)) {
        int64_t main, sub;
        bool tomb;
        rv = mvcc_revkey_parse(k.mv_data, k.mv_size, &main, &sub, &tomb);
        if (rv != 0)
            break;
        if (main > rev)
            break;
        /* At or below the compaction only what it kept is left; count it
         * if a compaction at |rev| would keep it too (etcd's rule). */
        if (main <= compact && has_keep && !kept_at(s, &d, rev, main, sub))
            continue;
        h = crc32c_update(h, k.mv_data, k.mv_size);
        h = crc32c_update(h, d.mv_data, d.mv_size);
    }
    if (rv == 0 && rc != 0 && rc != MDB_NOTFOUND)
        rv = backend_err(rc);
    mdb_cursor_close(cur_);
    backend_read_end(own);
    if (rv == 0)
        *hash = h;
    return rv;
}
