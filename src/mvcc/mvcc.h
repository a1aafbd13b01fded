/* mvcc/mvcc.h: the multi-version key-value store.
 *
 * Every change takes a revision (main, sub): one main revision per write
 * transaction that changes something, sub numbering the changes inside it.
 * LMDB's BACKEND_DB_KEY maps the 17- or 18-byte revision key
 *     8-byte big-endian main | '_' | 8-byte big-endian sub [| 't' on tombstones]
 * to a serialized mvccpb.KeyValue (a tombstone stores only the key), so byte
 * order is revision order. An in-memory index maps each user key to its
 * generations (the revisions where it was created, modified and deleted),
 * rebuilt from LMDB at open.
 *
 * A fresh store is at revision 1 (as etcd): the first change takes 2.
 *
 * Threading: one thread (the core loop, "the owner") owns the store: it
 * alone writes, compacts and reads through the open batch. Once
 * mvcc_share is called, other threads may read too, with
 * mvcc_read_begin_shared: a reader never waits (it is told to leave the
 * read to the owner instead), and the owner waits only for reads under
 * way (the index is guarded by a writer-preferring RW lock, taken by the
 * owner around each write txn and compaction step; see
 * docs/architecture.md). A worker thread reading a big range uses
 * mvcc_read_begin_detached instead: it waits for the lock, a piece of
 * the index at a time, and the owner waits for one piece at most.
 *
 * Failure model: an error from LMDB inside a batch leaves the in-memory
 * index ahead of the disk; the caller must stop the process (etcd panics in
 * the same place) or drop the batch with mvcc_batch_abort, which rebuilds
 * memory from the last commit (a failed mvcc_batch_commit does that
 * itself). Requests are validated (apply/) before they write, so semantic
 * errors never happen half-way through a transaction.
 *
 * Big revisions in steps (mvcc_set_step). One write txn (one revision) may
 * change millions of keys: a DeleteRange over a prefix, a Txn, a lease
 * revocation. LMDB holds a write transaction's dirty pages in memory, up
 * to a limit (MDB_TXN_FULL past it), and an entry that cannot be applied
 * would be applied again by every restart: a crash loop. So a write txn
 * commits the batch every |limit| changes ("a step") and goes on in a
 * new LMDB transaction:
 *   - before each step's commit the step hook runs (the server records
 *     the consistent index of the entries applied before this one, so the
 *     restart applies this entry again and not the ones before), and
 *     meta "quorumStepRev" = R, the revision under way, goes into the
 *     same transaction;
 *   - the revision is not visible until its last change commits: during
 *     the txn the owner holds the index's write lock (shared readers hand
 *     their reads to the owner), except while it pauses between steps
 *     (below), and committed_rev, the revision a shared read or a fresh
 *     read txn reads at, is R-1 through the steps; reads pick, per key, the
 *     latest revision at or below the revision they read at, so the
 *     records of R already in LMDB are invisible to them;
 *   - mvcc_txn_end deletes quorumStepRev in the batch that holds the
 *     revision's last changes, so it commits with them;
 *   - at open, quorumStepRev = R with records of R in LMDB means R is
 *     partial: the index holds its records but the store's revision is
 *     R-1 (reads, HashKV, history and watches stop at R-1) until the
 *     next write txn, which must be the same entry applied again (the
 *     consistent index is the one before it), resumes R: it continues the
 *     sub-revisions where LMDB's stop, reads in it see the changes already
 *     made, a put of a key already written at R is not written again (a
 *     txn writes a key at most once: apply/'s duplicate checks), and a
 *     delete finds only the keys still live. The result is the records an
 *     uninterrupted txn writes: the same HashKV. A Txn's compares must be
 *     evaluated at R-1 (mvcc_txn_resumed says so; etcd evaluates them all
 *     before the first write).
 * The limit is a count of changes (--experimental-apply-step-limit,
 * default 100000: every request etcd's limits allow is one step except
 * ranges over that many keys).
 *
 * Pausing between steps (mvcc_set_step_pause). After each step's commit
 * the store reads as committed at R-1 (everything before the revision is
 * in LMDB; committed_rev = R-1, published to shared readers), the owner
 * lets go of the index's write lock and calls the pause hook; so it does
 * every |every| changes between two commits (a step's LMDB transaction
 * may stay big while the time between pauses stays short: the changes
 * not yet committed are in the open write txn, which no reader uses, and
 * in the index at R, which no reader at R-1 sees). The server
 * goes back to its loop there (a coroutine, base/coro.h) and serves reads
 * until it continues the txn. Meanwhile the owner may read
 * (mvcc_read_begin: an LMDB read txn at R-1; mvcc_hash_kv) but must not
 * change the store: no other write txn (-EBUSY anyway), no
 * mvcc_batch_commit (-EBUSY), no compaction step, reload, abort or file
 * replacement, since the txn's own position (a cursor over the index)
 * lives on across the pause.
 */
#ifndef QUORUM_MVCC_MVCC_H
#define QUORUM_MVCC_MVCC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct mvcc_store mvcc_store;
typedef struct mvcc_txn mvcc_txn;
typedef struct mvcc_read mvcc_read;

/* A key-value at one revision, borrowed from the store: see each function
 * for how long the pointers live. |raw| is the whole mvccpb.KeyValue as
 * stored (fields key=1, create_revision=2, mod_revision=3, version=4,
 * value=5, lease=6), so a response can copy it without re-encoding. */
struct mvcc_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
    const uint8_t *raw;
    size_t raw_len;
};

/* What a change did to a key (observer, history). */
enum mvcc_event_type { MVCC_EVENT_PUT = 0, MVCC_EVENT_DELETE = 1 };

/* Visitors get one kv at a time, in ascending key order. Return 0 to go on,
 * non-zero to stop (that value is returned by the range call, and the
 * result's count is then partial). Visitors and observers must not call the
 * store's write functions. */
typedef int (*mvcc_kv_fn)(const struct mvcc_kv *kv, void *arg);

struct mvcc_range_opts {
    int64_t rev;     /* read at this revision; <= 0 = current */
    int64_t limit;   /* at most this many kvs to the visitor; <= 0 = no limit */
    bool count_only; /* no kvs to the visitor, only the count */
    /* > 0: give up with -E2BIG once the read has cost more than this: one
     * per index entry visited, one more per KiB of record fetched (a read
     * that must not hold a loop tries inline with a budget, and goes to a
     * worker past it: mvcc_read_begin_detached) */
    int64_t budget;
};

struct mvcc_range_result {
    int64_t count; /* keys in the range at |rev|, regardless of limit */
    int64_t rev;   /* the revision that was read (the current one for rev <= 0) */
};
/* (|opts| may be NULL = current revision, no limit; |res| may be NULL; |fn|
 * may be NULL to only count.) */

/* Key ranges follow etcd: |end| NULL/empty = the single key |key|;
 * end = "\0" (len 1) = every key >= key; otherwise [key, end). An empty
 * |key| with end "\0" is every key. */

/* mvcc_open opens the store on |be|, rebuilding the index from LMDB. The
 * store borrows |be| until mvcc_close. Errors: -ENOMEM, QERR_STORAGE,
 * QERR_CORRUPT (undecodable record). */
int mvcc_open(backend *be, mvcc_store **out);
void mvcc_close(mvcc_store *s);

/* mvcc_reload forgets the in-memory index and rebuilds it (and the
 * revision and compaction marks) from the backend: after the backend's file
 * was replaced by another member's snapshot. No batch or read may be open.
 * Errors: as mvcc_open (then the store is unusable: close it). */
int mvcc_reload(mvcc_store *s);

/* Installing another member's database without rebuilding the index on the
 * owner's thread: mvcc_prepare_file builds, on any thread, the key index of
 * the database file |path| (opened read-only, not by any backend; nothing
 * may write it meanwhile), while the store keeps serving from its own
 * file. Once the backend's file was replaced by that one,
 * mvcc_reload_prepared is mvcc_reload with that index (it only reads the
 * meta marks): the owner's part takes no time in proportion to the store.
 * |p| is consumed either way; mvcc_prepared_free drops one not used.
 * Errors: -ENOMEM, QERR_STORAGE, QERR_CORRUPT (as mvcc_open). */
typedef struct mvcc_prepared mvcc_prepared;
int mvcc_prepare_file(const char *path, mvcc_prepared **out);
int mvcc_reload_prepared(mvcc_store *s, mvcc_prepared *p);
void mvcc_prepared_free(mvcc_prepared *p);
/* mvcc_release_reads frees the ended read txns the store keeps for reuse,
 * its own and other threads', before the backend's environment is
 * replaced (backend_replace_file). No read may be open. */
void mvcc_release_reads(mvcc_store *s);

int64_t mvcc_rev(const mvcc_store *s); /* current revision */
/* mvcc_compact_rev is the last compaction revision, -1 if the store was
 * never compacted (etcd's compactMainRev: so Compact(0) succeeds once, and a
 * Txn may read at a negative revision until the first compaction). */
int64_t mvcc_compact_rev(const mvcc_store *s);

/* Batches: begin/commit wrap backend_batch_begin/commit; every mvcc_txn and
 * mvcc_compact happens inside one. */
int mvcc_batch_begin(mvcc_store *s);
/* mvcc_batch_commit: errors as backend_batch_commit, plus -EBUSY while a
 * txn is open. A failed commit loses the batch; the store then rebuilds its
 * index and revisions from the last commit (O(keys)), so it stays usable at
 * the committed state. */
int mvcc_batch_commit(mvcc_store *s);
/* mvcc_batch_abort drops the open batch (if any) and rebuilds the index and
 * revisions from the last commit, O(keys): the way back after an LMDB
 * error such as QERR_NO_SPACE in a batch. Reads must not be open across it
 * (their revision may no longer exist). Errors: as mvcc_open; on error the
 * store is unusable and must be closed. */
int mvcc_batch_abort(mvcc_store *s);

/* mvcc_txn_begin starts one write transaction (at most one revision) inside
 * the open batch. Reads in it see its own earlier writes (etcd: a range
 * after a put in the same Txn sees the put). Errors: -EBUSY (no batch, or a
 * txn already open), -ENOMEM. */
int mvcc_txn_begin(mvcc_store *s, mvcc_txn **out);

/* Reads inside a write txn. Errors: QERR_COMPACTED (rev < compact rev),
 * QERR_FUTURE_REV (rev > current), storage errors, or the visitor's value.
 * kv pointers are valid only during the visitor call. */
int mvcc_txn_range(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *end,
                   size_t end_len, const struct mvcc_range_opts *opts, mvcc_kv_fn fn, void *arg,
                   struct mvcc_range_result *res);

/* mvcc_txn_key_rev is the revision of the version of |key| the txn sees
 * (its mod revision: *|sub| gets its sub-revision), 0 when there is none
 * (never written, or deleted). From the key index alone: nothing is read
 * from the database. A revision names one write: a caller may keep what
 * it read of the value until the key's revision moves. */
int64_t mvcc_txn_key_rev(mvcc_txn *t, const uint8_t *key, size_t key_len, uint32_t *sub);

/* mvcc_txn_put writes |key| = |value| with |lease| (0 = none). If the key
 * exists, |prev_fn| (may be NULL) is called first with its current kv; a
 * non-zero return from it cancels the put (nothing written) and is returned.
 * Errors: -EBUSY (txn ended), QERR_EMPTY_KEY, QERR_NO_SPACE, storage errors
 * (also of a step's commit, mvcc_set_step: the batch is then lost and the
 * caller must stop; a restart resumes from the last committed step), the
 * step hook's value. */
int mvcc_txn_put(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *value,
                 size_t value_len, int64_t lease, mvcc_kv_fn prev_fn, void *arg);

/* mvcc_txn_delete_range deletes every live key in the range, calling |fn|
 * (may be NULL) with each one's kv before it goes; *|deleted| gets the
 * number deleted. Deleting nothing is not an error and takes no revision.
 * A non-zero return from |fn| stops there (that key stays) and is returned;
 * keys deleted before it stay deleted. Errors: -EBUSY, QERR_NO_SPACE,
 * storage errors, a step's (as mvcc_txn_put). */
int mvcc_txn_delete_range(mvcc_txn *t, const uint8_t *key, size_t key_len, const uint8_t *end,
                          size_t end_len, mvcc_kv_fn fn, void *arg, int64_t *deleted);

/* mvcc_set_step: from now on a write txn commits the batch every |limit|
 * changes (0: never), calling |fn| (may be NULL) first inside the batch;
 * a non-zero return from |fn| fails the change with that value. See
 * "Big revisions in steps" above. Owner only. */
typedef int (*mvcc_step_fn)(void *arg);
void mvcc_set_step(mvcc_store *s, size_t limit, mvcc_step_fn fn, void *arg);

/* mvcc_set_step_pause: |fn| (may be NULL) runs after each step's commit
 * and, with |every| > 0, every |every| changes between two commits too,
 * without the index's write lock (see "Pausing between steps" above); a
 * non-zero return fails the change with that value, as a step hook's.
 * With |every| > 0 the first step of a txn commits after |every| changes
 * (not the step limit): from then on the batch holds only the txn's own
 * changes. Owner only. */
void mvcc_set_step_pause(mvcc_store *s, size_t every, mvcc_step_fn fn, void *arg);

/* mvcc_partial_rev is the revision a restart left partial (its first steps
 * committed, not its last), 0 if none; mvcc_partial_changes is how many of
 * its changes LMDB holds. */
int64_t mvcc_partial_rev(const mvcc_store *s);
uint32_t mvcc_partial_changes(const mvcc_store *s);

/* mvcc_txn_resumed: |t| goes on with a partial revision (mvcc_partial_rev):
 * its reads see the changes already made; what the txn decided before its
 * first write (a Txn's compares) must be read at mvcc_txn_begin_rev. */
bool mvcc_txn_resumed(const mvcc_txn *t);
int64_t mvcc_txn_begin_rev(const mvcc_txn *t);

/* mvcc_txn_steps is the number of step commits |t| made so far. */
uint32_t mvcc_txn_steps(const mvcc_txn *t);

/* mvcc_txn_end closes the txn and returns the store's revision after it:
 * a new main revision if anything changed, else the current one. */
int64_t mvcc_txn_end(mvcc_txn *t);

/* Read transactions: a consistent view at the current revision. kv
 * pointers stay valid until mvcc_read_end. Outside a batch the view is the
 * last commit, in an LMDB read txn of its own (any thread may read). While
 * a batch is open, a read begun on the batch's thread (outside
 * mvcc_txn_begin/end) goes through the batch's write txn and sees its
 * changes at the current revision: it must end before the batch's next
 * change and before its commit. Ended read txns are reset and reused
 * (mdb_txn_renew), so begin/end are cheap; a read must end before
 * mvcc_close. Errors (begin): -ENOMEM, QERR_STORAGE. */
int mvcc_read_begin(mvcc_store *s, mvcc_read **out);
int mvcc_read_range(mvcc_read *r, const uint8_t *key, size_t key_len, const uint8_t *end,
                    size_t end_len, const struct mvcc_range_opts *opts, mvcc_kv_fn fn, void *arg,
                    struct mvcc_range_result *res);
void mvcc_read_end(mvcc_read *r);

/* mvcc_share lets other threads read (mvcc_read_begin_shared) from now
 * on; the owner pays a lock per write txn. Errors: negative errno. */
int mvcc_share(mvcc_store *s);

/* mvcc_read_begin_shared begins a read on a thread other than the owner's:
 * at the last committed revision, and only when that is at least
 * |min_rev|, or, for |min_rev| <= 0, the store's current revision (so it
 * sees everything the owner has answered, as a read on the owner's thread
 * would). -EAGAIN when it cannot be done now
 * without waiting (uncommitted changes, a write txn or compaction step
 * under way, the file being replaced, or the store not shared): the
 * owner must serve the read. Each thread keeps one read txn for reuse.
 * End it with mvcc_read_end, soon: the owner's next change waits for it.
 * Other errors: -ENOMEM, storage errors. */
int mvcc_read_begin_shared(mvcc_store *s, int64_t min_rev, mvcc_read **out);

/* mvcc_read_begin_detached begins a read for a worker thread (any thread
 * but the owner's, which must not wait for itself): at the last committed
 * revision, when that is at least |min_rev| (or, for |min_rev| <= 0, the
 * store's current revision); -EAGAIN otherwise (as mvcc_read_begin_shared).
 * Unlike a shared read it holds no lock between calls: its LMDB read txn
 * (a fresh one, not cached) keeps the records it reads, and each
 * mvcc_read_range takes the index's read lock (waiting for it) for a piece
 * of about a thousand entries at a time, so the owner waits for a piece at
 * most, never for the whole read. Between pieces it checks that the read
 * still holds, and fails -ESTALE when it does not: the file was replaced
 * (mvcc_release_reads ends its txn) or a compaction was scheduled above
 * the revision it reads (the index may no longer hold what it must see).
 * The caller then reads again from the start (a compaction makes that
 * QERR_COMPACTED for a read at an older revision, as it would have been a
 * moment later). Only mvcc_read_range and mvcc_read_rev may be used on it;
 * end it with mvcc_read_end on any thread. Errors: -EAGAIN, -ENOMEM,
 * storage errors. */
int mvcc_read_begin_detached(mvcc_store *s, int64_t min_rev, mvcc_read **out);

/* mvcc_exclusive_begin waits for shared reads under way and keeps new ones
 * out until mvcc_exclusive_end (nestable, owner only): around replacing
 * the backend's file (with mvcc_release_reads and mvcc_reload). */
void mvcc_exclusive_begin(mvcc_store *s);
void mvcc_exclusive_end(mvcc_store *s);

/* mvcc_read_rev is the revision |r| reads at (the last committed one when
 * it began): history beyond it is not in its snapshot, so a caller walking
 * history up to "now" should stop there, not at mvcc_rev. */
int64_t mvcc_read_rev(const mvcc_read *r);

/* mvcc_read_history calls |fn| for every change kept in LMDB with main
 * revision in [|from|, |to|], in revision order (main, then sub): a put
 * with its kv as stored, a delete with the key and mod_revision = the
 * deleting revision (everything else zero). kv pointers stay valid until
 * mvcc_read_end. Stops when |fn| returns non-zero and returns that value.
 * History below the compaction revision is partly gone: callers check
 * mvcc_compact_rev first (watch/ does). Errors: storage errors,
 * QERR_CORRUPT. */
typedef int (*mvcc_history_fn)(enum mvcc_event_type type, const struct mvcc_kv *kv, void *arg);
int mvcc_read_history(mvcc_read *r, int64_t from, int64_t to, mvcc_history_fn fn, void *arg);

/* Compaction drops every revision that no read at a revision >= |rev| can
 * see: for each key, all revisions below its latest one at or below |rev|,
 * and that one too if it is a tombstone.
 *
 * mvcc_compact only schedules it, inside the open batch: it records |rev|
 * as scheduledCompactRev in BACKEND_DB_META, and from then on reads below
 * |rev| fail QERR_COMPACTED (as etcd answers once a compaction is
 * accepted). A compaction still under way is superseded: the new one
 * starts its removal over from the oldest record. Errors: -EBUSY (no batch, or a txn open),
 * QERR_COMPACTED (rev <= current compact rev), QERR_FUTURE_REV
 * (rev > current), storage errors. */
int mvcc_compact(mvcc_store *s, int64_t rev);

/* mvcc_compact_step removes, inside the open batch, at most |limit|
 * revisions of the scheduled compaction (and looks at a bounded number of
 * records, or of keys in the index's pass), so that no write transaction
 * and no step grows with the history (etcd's
 * --experimental-compaction-batch-limit). Each step records where the
 * next one starts (quorumCompactNextRev/Sub in meta); the step that reaches
 * the end records finishedCompactRev in the same batch and sets *|done|;
 * *|done| is also set when nothing is scheduled. Reads at or above the
 * compaction revision see the same data before, during and after. A
 * restart (or mvcc_batch_abort) with the scheduled mark above the finished
 * one resumes the removal where the last committed step left it. Errors: -EBUSY, -ENOMEM,
 * storage errors (then the batch holds part of a step: abort it). */
int mvcc_compact_step(mvcc_store *s, size_t limit, bool *done);

/* mvcc_compacting: a scheduled compaction is still removing revisions (its
 * revision is mvcc_compact_rev). */
bool mvcc_compacting(const mvcc_store *s);

/* What the compaction under way has done since it was scheduled (or since
 * the store opened, when it resumed). */
struct mvcc_compact_stats {
    int64_t rev;      /* its revision; -1 if none is under way */
    int64_t next_rev; /* where the removal from LMDB goes on; 0 once past it */
    uint64_t steps;   /* mvcc_compact_step calls */
    int64_t dropped;  /* revisions deleted from LMDB */
    uint64_t max_step_ns; /* the longest mvcc_compact_step */
    uint64_t start_ns;    /* CLOCK_MONOTONIC when it was scheduled (or resumed) */
};
void mvcc_compact_progress(const mvcc_store *s, struct mvcc_compact_stats *out);

/* Change observer (for watch/): called once per change of a write txn, in
 * sub-revision order, before mvcc_txn_end returns (all changes of one
 * revision share its main revision; group them by mod_revision). For a put,
 * |kv| is the new kv and |prev| the previous one or NULL; for a delete,
 * |kv| is the tombstone (key, mod_revision = the deleting revision, all
 * else zero) and |prev| the deleted kv. Pointers valid during the call.
 * The batch is not yet committed when it runs: hold events until it is. */
typedef void (*mvcc_observer_fn)(enum mvcc_event_type type, const struct mvcc_kv *kv,
                                 const struct mvcc_kv *prev, void *arg);
void mvcc_set_observer(mvcc_store *s, mvcc_observer_fn fn, void *arg);

/* mvcc_hash_kv hashes (crc32c) every revision key and value kept in LMDB
 * with main revision in (compact rev, |rev|] (|rev| <= 0 = current), as
 * etcd's HashKV does with crc32 Castagnoli; equal stores give equal hashes.
 * Precisely as etcd 3.4 (mvcc/kvstore.go HashByRev): the crc starts over the
 * bucket name "key", then takes each LMDB record (revision key, then value)
 * in revision order up to |rev|; records at or below the compact revision
 * (what the compaction kept) count only if a compaction at |rev| would keep
 * them too, unless no key is live at |rev|. *|compact_rev| gets the compact
 * revision. Reads through the open batch if there is one.
 * Errors: QERR_COMPACTED (0 < rev <= compact rev, as etcd),
 * QERR_FUTURE_REV, storage errors. */
int mvcc_hash_kv(mvcc_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev);

/* mvcc_live_leases calls |fn| with every live key (at the current
 * committed revision) that is bound to a lease, in no particular order:
 * for the lessor to learn its keys at open. One sequential pass over the
 * key database, reading the index only for records that carry a lease, so
 * a store of keys without leases costs a read of the file and no random
 * access. Errors: storage errors, QERR_CORRUPT. */
typedef void (*mvcc_lease_fn)(const uint8_t *key, size_t key_len, int64_t lease, void *arg);
int mvcc_live_leases(mvcc_store *s, mvcc_lease_fn fn, void *arg);

/* mvcc_index_bytes is the heap the in-memory key index holds (entries,
 * tree nodes, separators; malloc's own overhead not counted), for metrics
 * and benchmarks. O(keys). */
size_t mvcc_index_bytes(const mvcc_store *s);

#endif
