/* apply/apply.h: etcd's KV request semantics on top of mvcc/.
 *
 * Two halves, as in etcd:
 *  - checks (etcd's v3rpc layer): what is wrong with a request whatever the
 *    state (empty key, too many txn ops, duplicate keys in a txn, a value
 *    given with ignore_value). The server runs them before a request is
 *    queued for the log; they need no store.
 *  - appliers (etcd's applierV3backend): a request against the store's
 *    state. Reads run on a read view; writes inside the open batch, one
 *    mvcc write txn (at most one revision) per request.
 *
 * Responses and everything they point to are allocated from the caller's
 * arena and live until the caller resets it. The appliers set
 * header->revision only; the server fills cluster_id, member_id and
 * raft_term of the top-level header.
 *
 * Known difference from etcd: sorting is stable. etcd sorts with Go's
 * sort.Sort, which is stable (insertion sort) for up to 12 kvs and
 * unspecified for ties beyond that.
 */
#ifndef QUORUM_APPLY_APPLY_H
#define QUORUM_APPLY_APPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "lease/lessor.h"
#include "mvcc/mvcc.h"
#include "rpc.pb-c.h"

struct apply_env {
    mvcc_store *kv;
    lessor *leases; /* NULL: no lease exists (every lease is NOT_FOUND) */
    int64_t now_ms; /* monotonic time of the apply, for lease clocks */
    /* bound on one Range's reply (encoded KeyValues, bytes); a Range past
     * it fails QERR_RANGE_TOO_LARGE as soon as the collected part passes
     * it, so neither its memory nor its time grows past the bound. 0:
     * unlimited. Applies to Ranges read outside the batch (apply_range,
     * apply_txn_read), each Range op of a txn on its own. */
    size_t max_range_bytes;
    /* > 0: a Range read outside the batch gives up with -E2BIG once it has
     * cost more than this (mvcc_range_opts.budget): the server tries a read
     * inline with a budget and hands it to a worker past it. */
    int64_t read_budget;
};

/* Checks. Errors: QERR_EMPTY_KEY, QERR_VALUE_PROVIDED, QERR_LEASE_PROVIDED,
 * QERR_TOO_MANY_OPS, QERR_DUPLICATE_KEY, QERR_KEY_NOT_FOUND (an empty
 * RequestOp, as etcd answers). */
int apply_check_range(const Etcdserverpb__RangeRequest *r);
int apply_check_put(const Etcdserverpb__PutRequest *r);
int apply_check_delete_range(const Etcdserverpb__DeleteRangeRequest *r);
int apply_check_txn(const Etcdserverpb__TxnRequest *r, size_t max_txn_ops);

/* The ZooKeeper face's keys ("\0zk" + anything, docs/zookeeper.md) are
 * written only by it. apply_reserved_span places a key range (etcd's
 * rules: no |end| is one key, "\0" every key from |key| on) against the
 * prefix: NONE (apart), INSIDE (one reserved key, or a range within the
 * prefix: refused as it stands), or WIDE (a range reaching beyond the
 * prefix on either side: refused only if keys of the prefix live in
 * *|overlap| (may be NULL), which the server checks at apply, so a delete
 * of everything works while no znode exists, as in etcd). */
enum apply_reserved { APPLY_RESERVED_NONE, APPLY_RESERVED_INSIDE, APPLY_RESERVED_WIDE };
struct apply_span {
    const uint8_t *key, *end; /* [key, end), pointing into the request or static */
    size_t key_len, end_len;
};
enum apply_reserved apply_reserved_span(const uint8_t *key, size_t key_len, const uint8_t *end,
                                        size_t end_len, struct apply_span *overlap);
/* QERR_RESERVED_KEY for a Put of a reserved key, a DeleteRange INSIDE the
 * prefix, or a Txn with either in any branch (nested txns included);
 * reads (Range, compares) may touch the prefix. */
int apply_check_reserved_put(const Etcdserverpb__PutRequest *r);
int apply_check_reserved_delete_range(const Etcdserverpb__DeleteRangeRequest *r);
int apply_check_reserved_txn(const Etcdserverpb__TxnRequest *r);
/* apply_txn_wide_deletes calls |fn| with the overlap of every WIDE
 * DeleteRange of |r| (both branches, nested txns); a non-zero return
 * stops and is returned. */
int apply_txn_wide_deletes(const Etcdserverpb__TxnRequest *r,
                           int (*fn)(const struct apply_span *overlap, void *arg), void *arg);

/* apply_txn_is_read_only: every op of both branches is a Range (a nested
 * txn counts as a write, as in etcd). Read-only txns are served as reads. */
bool apply_txn_is_read_only(const Etcdserverpb__TxnRequest *r);

/* Reads on a read view (outside any batch). Errors: QERR_COMPACTED,
 * QERR_FUTURE_REV, QERR_RANGE_TOO_LARGE (env->max_range_bytes), -E2BIG
 * (env->read_budget), -ESTALE (a detached read to do again: mvcc.h),
 * -ENOMEM, storage errors. */
int apply_range(const struct apply_env *env, mvcc_read *rd, const Etcdserverpb__RangeRequest *r,
                struct arena *a, Etcdserverpb__RangeResponse **out);
int apply_txn_read(const struct apply_env *env, mvcc_read *rd, const Etcdserverpb__TxnRequest *r,
                   struct arena *a, Etcdserverpb__TxnResponse **out);

/* Writes, inside the open batch (mvcc_batch_begin). On error nothing was
 * written. Errors: QERR_KEY_NOT_FOUND (ignore_value/ignore_lease on a
 * missing key), QERR_LEASE_NOT_FOUND, QERR_COMPACTED, QERR_FUTURE_REV,
 * -ENOMEM, storage errors (fatal: see mvcc.h). */
int apply_put(const struct apply_env *env, const Etcdserverpb__PutRequest *r, struct arena *a,
              Etcdserverpb__PutResponse **out);
int apply_delete_range(const struct apply_env *env, const Etcdserverpb__DeleteRangeRequest *r,
                       struct arena *a, Etcdserverpb__DeleteRangeResponse **out);
/* apply_txn serves any txn inside a batch (read-only ones too). */
int apply_txn(const struct apply_env *env, const Etcdserverpb__TxnRequest *r, struct arena *a,
              Etcdserverpb__TxnResponse **out);
int apply_compact(const struct apply_env *env, const Etcdserverpb__CompactionRequest *r,
                  struct arena *a, Etcdserverpb__CompactionResponse **out);

/* Leases, inside the batch. grant needs r->id > 0 (the server picks one
 * for id 0 before proposing, so every member applies the same id). revoke
 * deletes every attached key in one revision (keys in byte order, one
 * sub-revision each, as etcd), then the lease. Errors: QERR_LEASE_EXISTS,
 * QERR_LEASE_TTL_TOO_LARGE, QERR_LEASE_NOT_FOUND, storage errors. */
int apply_lease_grant(const struct apply_env *env, const Etcdserverpb__LeaseGrantRequest *r,
                      struct arena *a, Etcdserverpb__LeaseGrantResponse **out);
int apply_lease_revoke(const struct apply_env *env, const Etcdserverpb__LeaseRevokeRequest *r,
                       struct arena *a, Etcdserverpb__LeaseRevokeResponse **out);
/* apply_metrics_register registers etcd's etcd_mvcc_{range,put,delete,txn}_total
 * (and their etcd_debugging_mvcc_ twins) and the put size, counted per
 * request as etcd's metricsTxnWrite counts them (base/metrics.h). */
void apply_metrics_register(void);

int apply_lease_checkpoint(const struct apply_env *env,
                           const Etcdserverpb__LeaseCheckpointRequest *r, struct arena *a,
                           Etcdserverpb__LeaseCheckpointResponse **out);

#endif
