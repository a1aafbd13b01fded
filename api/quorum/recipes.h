/* quorum/recipes.h: coordination recipes on the etcd v3 API, in the C
 * client library (libquorum-client): sessions, mutexes with fencing
 * tokens, read/write locks, semaphores, barriers, double barriers, FIFO and
 * priority queues, group membership, two-phase commit and counters. They
 * use only KV, Txn, Lease and Watch, so they work against quorum and etcd
 * alike, and a C program gets ZooKeeper's recipes without a ZooKeeper
 * client. docs/recipes.md describes each one and the keys it writes.
 *
 * The building blocks
 *   - Ordering: a key's create revision (unique, cluster-wide, growing)
 *     orders waiters, as ZooKeeper's sequential znodes do.
 *   - Liveness: a session is a lease kept alive by a background thread; a
 *     waiter's or holder's key is bound to it, so a crashed process's holds
 *     vanish once its lease expires (its TTL, in seconds).
 *   - Waiting: read, then watch from the read's revision + 1 exactly the
 *     keys that matter; every wait re-reads after a change, so a missed or
 *     spurious wake-up (a compacted watch, a reconnect) is harmless.
 *   - Acting: a Txn compares create or mod revision, so two clients never
 *     both take the same item or both decide an outcome.
 *
 * Conventions
 *   Names are NUL-terminated strings; a recipe's keys live under
 *   "<name>/". Every call returns 0 (or a documented positive value) on
 *   success and a negative code on failure, and fills |st| (may be NULL)
 *   as the calls of quorum/client.h do: the server's status, or for a local
 *   failure the status a Go client would report. Blocking calls take
 *   |timeout_ms| for the whole wait (-1: forever, 0: do not wait); when it
 *   passes they return QC_ETIMEDOUT with DEADLINE_EXCEEDED "context
 *   deadline exceeded" and take back what they had put (a waiter's key), as
 *   etcd's clientv3/concurrency does when its context ends.
 *   A session is used by any number of threads; a lock object (mutex,
 *   rwlock, semaphore) by one thread at a time. A session holds one key per
 *   lock name (the key ends in its lease ID, as etcd's mutex keys do, so
 *   `etcdctl lock` and quorumctl lock interoperate with qc_mutex): to
 *   contend within one process, give each contender its own session.
 */
#ifndef QUORUM_RECIPES_H
#define QUORUM_RECIPES_H

#include <stddef.h>
#include <stdint.h>

#include "quorum/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Recipe error codes (negative), besides the client's and -EINVAL,
 * -ENOMEM: */
#define QC_ELOST                                                                                   \
    (-30101) /* the session's lease expired or was revoked:                                        \
                every hold of it is gone (status NOT_FOUND                                         \
                "etcdserver: requested lease not found") */
#define QC_EBUSY                                                                                   \
    (-30102) /* a try-lock found the lock held (status                                             \
                FAILED_PRECONDITION "mutex: Locked by another                                      \
                session") */
#define QC_ETOOMANY                                                                                \
    (-30103) /* a double barrier already has n participants                                        \
                (status FAILED_PRECONDITION "too many                                              \
                clients") */
#define QC_EEXIST                                                                                  \
    (-30104) /* membership: the member ID is taken (status                                         \
                ALREADY_EXISTS "key already exists") */
#define QC_EBADVALUE                                                                               \
    (-30105) /* counter: the stored value is not an integer                                        \
                (status INVALID_ARGUMENT) */

/* qc_recipe_strerror is qc_strerror that also knows the codes above. */
const char *qc_recipe_strerror(int err);

/* ---- sessions ---- */

typedef struct qc_session qc_session;

/* qc_session_open grants a lease of |ttl_s| seconds (> 0; etcd's default
 * is 60) and keeps it alive from a background thread (a LeaseKeepAlive
 * stream, a renewal every TTL/3). The session is lost (qc_session_lost)
 * when the server answers that the lease is gone, or when no renewal
 * succeeded for a whole TTL (the server may have let it expire): its keys
 * are, or will shortly be, deleted, and every recipe call on it fails with
 * QC_ELOST. |c| must outlive the session. */
int qc_session_open(qc_client *c, int ttl_s, qc_session **out, struct qc_status *st);
/* qc_session_lease: the lease ID; qc_session_client: the client */
int64_t qc_session_lease(const qc_session *s);
qc_client *qc_session_client(const qc_session *s);
/* qc_session_lost returns 1 once the lease is known to be gone, else 0 */
int qc_session_lost(const qc_session *s);
/* qc_session_wait_lost blocks until the session is lost (returns 1) or
 * |timeout_ms| passes (returns 0; -1 waits forever) */
int qc_session_wait_lost(qc_session *s, int timeout_ms);
/* qc_session_close stops the keep-alive, revokes the lease (releasing every
 * hold and key bound to it at once) unless it is already lost, and frees
 * the session. Objects made from it must be freed first. |s| may be NULL. */
void qc_session_close(qc_session *s);
/* qc_session_abandon stops the keep-alive and frees the session without
 * revoking the lease: its keys stay until the TTL passes (what a crash
 * does; tests and hand-overs use it). */
void qc_session_abandon(qc_session *s);

/* ---- mutex (clientv3/concurrency's Mutex, etcd's Lock RPC) ----
 * Key "<name>/<lease hex>"; the holder is the key with the lowest create
 * revision under "<name>/", and a waiter waits for the deletion of the key
 * just before its own. The holder's create revision is its fencing token:
 * a resource guarded by the lock refuses writes that carry an older one
 * (with a Txn, compare the lock key's create revision). */
typedef struct qc_mutex qc_mutex;
int qc_mutex_new(qc_session *s, const char *name, qc_mutex **out);
int qc_mutex_lock(qc_mutex *m, int timeout_ms, struct qc_status *st);
/* QC_EBUSY when another session holds it (nothing is left behind) */
int qc_mutex_trylock(qc_mutex *m, struct qc_status *st);
int qc_mutex_unlock(qc_mutex *m, struct qc_status *st);
/* the lock key (NUL-terminated) and fencing token while held, else
 * NULL / 0 */
const char *qc_mutex_key(const qc_mutex *m);
int64_t qc_mutex_token(const qc_mutex *m);
void qc_mutex_free(qc_mutex *m); /* does not unlock */

/* ---- read/write lock (etcd's contrib/recipes RWMutex) ----
 * Keys "<name>/read/<lease hex>" and "<name>/write/<lease hex>". A reader
 * holds once no writer key older than its own is left; a writer once no
 * key at all older than its own is left. So readers share, a writer is
 * alone, and the lock is fair: nobody overtakes an earlier waiter of the
 * other kind (a reader queued behind a waiting writer waits). */
typedef struct qc_rwlock qc_rwlock;
int qc_rwlock_new(qc_session *s, const char *name, qc_rwlock **out);
int qc_rwlock_rlock(qc_rwlock *l, int timeout_ms, struct qc_status *st);
int qc_rwlock_wlock(qc_rwlock *l, int timeout_ms, struct qc_status *st);
int qc_rwlock_unlock(qc_rwlock *l, struct qc_status *st);
const char *qc_rwlock_key(const qc_rwlock *l);
int64_t qc_rwlock_token(const qc_rwlock *l); /* create revision of the key */
void qc_rwlock_free(qc_rwlock *l);

/* ---- semaphore: at most n holders ----
 * Key "<name>/<lease hex>"; a waiter holds once fewer than n keys older
 * than its own are left (first come, first served). Every user of a name
 * must pass the same n. */
typedef struct qc_semaphore qc_semaphore;
int qc_semaphore_new(qc_session *s, const char *name, int n, qc_semaphore **out);
int qc_semaphore_acquire(qc_semaphore *sem, int timeout_ms, struct qc_status *st);
int qc_semaphore_release(qc_semaphore *sem, struct qc_status *st);
const char *qc_semaphore_key(const qc_semaphore *sem);
void qc_semaphore_free(qc_semaphore *sem);

/* ---- barrier (contrib/recipes Barrier) ----
 * The key "<name>" holds the barrier (no lease: it stays until released);
 * qc_barrier_wait returns once it is absent. */
int qc_barrier_hold(qc_client *c, const char *name, struct qc_status *st);
int qc_barrier_release(qc_client *c, const char *name, struct qc_status *st);
int qc_barrier_wait(qc_client *c, const char *name, int timeout_ms, struct qc_status *st);

/* ---- double barrier (contrib/recipes DoubleBarrier) ----
 * Enter puts "<name>/waiters/<lease hex>" and returns once |n| participants
 * have entered (the n-th puts "<name>/ready"); QC_ETOOMANY when n already
 * had. Leave deletes the key and returns once every participant of this
 * round has left (the last one deletes "<name>/ready"). Leave looks only at
 * the keys created before this round's "ready", so the name can be entered
 * again at once (a fast participant's next round does not hold up the slow
 * one still leaving this one). A crashed participant's key goes with its
 * lease. Every participant must pass the same n. */
typedef struct qc_dbarrier qc_dbarrier;
int qc_dbarrier_new(qc_session *s, const char *name, int n, qc_dbarrier **out);
int qc_dbarrier_enter(qc_dbarrier *b, int timeout_ms, struct qc_status *st);
int qc_dbarrier_leave(qc_dbarrier *b, int timeout_ms, struct qc_status *st);
void qc_dbarrier_free(qc_dbarrier *b);

/* ---- FIFO queue (contrib/recipes Queue) ----
 * An item is a key "<name>/<unique>" put with a Txn that it is new; the
 * head is the key with the lowest create revision, taken by deleting it
 * with a Txn guarded by its mod revision, so each item goes to exactly one
 * consumer, in the order the puts were applied. Items are not leased. */
int qc_queue_put(qc_client *c, const char *name, const void *val, size_t vlen,
                 struct qc_status *st);
/* qc_queue_take waits for an item; *|val| (malloc'd, NUL-terminated after
 * *|vlen| bytes; free it) is the item's value */
int qc_queue_take(qc_client *c, const char *name, int timeout_ms, char **val, size_t *vlen,
                  struct qc_status *st);

/* ---- priority queue (contrib/recipes PriorityQueue) ----
 * Keys "<name>/<prio, 10 digits>/<unique>": the lowest |prio| first, FIFO
 * (create revision) among equal priorities. */
int qc_pqueue_put(qc_client *c, const char *name, uint32_t prio, const void *val, size_t vlen,
                  struct qc_status *st);
/* *|prio| (may be NULL) is the taken item's priority */
int qc_pqueue_take(qc_client *c, const char *name, int timeout_ms, char **val, size_t *vlen,
                   uint32_t *prio, struct qc_status *st);

/* ---- group membership ----
 * A member is the key "<group>/<id>" bound to its session: it leaves when
 * it calls qc_group_leave, closes the session, or dies (after the TTL). */
int qc_group_join(qc_session *s, const char *group, const char *id, const void *val, size_t vlen,
                  struct qc_status *st); /* QC_EEXIST when taken */
int qc_group_leave(qc_session *s, const char *group, const char *id, struct qc_status *st);

struct qc_member {
    char *id;    /* NUL-terminated */
    char *value; /* NUL-terminated after vlen bytes */
    size_t vlen;
    int64_t joined; /* create revision of the member's key */
};
struct qc_members {
    int64_t revision; /* the store's revision the list was read at */
    size_t n;
    struct qc_member *m; /* by id */
};
int qc_group_list(qc_client *c, const char *group, struct qc_members **out, struct qc_status *st);
void qc_members_free(struct qc_members *ms);

/* qc_group_watch reports the changes after |from_rev| (a list's revision):
 * it waits up to |timeout_ms| for the next change and returns 1 with *|id|
 * (malloc'd; free it) and *|joined| (1 joined, 0 left), QC_ETIMEDOUT when
 * none came. A qc_group_watcher is used by one thread at a time. */
typedef struct qc_group_watcher qc_group_watcher;
int qc_group_watch_open(qc_client *c, const char *group, int64_t from_rev, qc_group_watcher **out,
                        struct qc_status *st);
int qc_group_watch_next(qc_group_watcher *w, int timeout_ms, char **id, int *joined,
                        struct qc_status *st);
void qc_group_watch_close(qc_group_watcher *w);

/* ---- two-phase commit ----
 * Under "<name>/": each participant puts its vote "votes/<lease hex>"
 * ("commit" or "abort", bound to its session); the decision is the key
 * "outcome", written once with a Txn that it is new (the first decision
 * wins, and never changes). The coordinator decides commit iff |n| commit
 * votes are in before its timeout, abort on any abort vote or at the
 * timeout; a participant voting abort decides abort itself. Every
 * participant waits for the outcome and learns it. qc_2pc_reset deletes
 * "<name>/" for another round. */
enum qc_2pc_outcome { QC_2PC_ABORT = 0, QC_2PC_COMMIT = 1 };
int qc_2pc_coordinate(qc_client *c, const char *name, int n, int timeout_ms, int *outcome,
                      struct qc_status *st);
int qc_2pc_vote(qc_session *s, const char *name, int commit, int timeout_ms, int *outcome,
                struct qc_status *st);
/* qc_2pc_outcome: 1 and *|outcome| when decided, 0 when not yet */
int qc_2pc_outcome(qc_client *c, const char *name, int *outcome, struct qc_status *st);
int qc_2pc_reset(qc_client *c, const char *name, struct qc_status *st);

/* ---- counter ----
 * The key "<name>" holds a decimal integer (absent: 0); add is a Txn that
 * compares the mod revision it read, retried until it applies. */
int qc_counter_add(qc_client *c, const char *name, int64_t delta, int64_t *value,
                   struct qc_status *st);
int qc_counter_get(qc_client *c, const char *name, int64_t *value, struct qc_status *st);

#ifdef __cplusplus
}
#endif

#endif
