/* lease/lessor.h: leases — grant, revoke, renew, expiry, checkpoints.
 *
 * What is replicated (applied from committed entries, inside the batch):
 * grant, the removal at revoke, and checkpoints of remaining TTLs. What is
 * local to the leader: renewing (keep-alive) and noticing expiry, which the
 * leader turns into a revoke entry. Only a primary (the leader; the single
 * member) expires leases; others keep them forever until told.
 *
 * Beyond etcd's default: the remaining TTL survives a leader change and a
 * restart. The leader checkpoints remaining TTLs through the log; a new
 * primary restarts each lease's clock from its checkpointed remaining TTL
 * (or the full TTL if it was renewed since), never from a fresh full TTL and
 * never shorter than what is left.
 *
 * Time is given by the caller in monotonic milliseconds, so tests and the
 * simulator decide what time it is.
 *
 * Attached keys are not persisted here: mvcc stores each key's lease, and
 * the server attaches them again at start from a scan of the store.
 *
 * Persistence: BACKEND_DB_LEASE maps the 8-byte big-endian id to an
 * etcd leasepb.Lease {ID=1, TTL=2, RemainingTTL=3}.
 */
#ifndef QUORUM_LEASE_LESSOR_H
#define QUORUM_LEASE_LESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define LEASE_MAX_TTL 9000000000LL /* seconds, as etcd's MaxLeaseTTL */

typedef struct lessor lessor;

/* lessor_open loads every lease from |be| (read outside a batch). Leases
 * shorter than |min_ttl| seconds are raised to it at grant. Errors: -ENOMEM,
 * QERR_STORAGE, QERR_CORRUPT. */
int lessor_open(backend *be, int64_t min_ttl, lessor **out);
void lessor_close(lessor *l);

bool lessor_exists(const lessor *l, int64_t id);
size_t lessor_count(const lessor *l);

/* lessor_ids writes up to |max| lease ids into |ids| (any order) and
 * returns how many there are in all. */
size_t lessor_ids(const lessor *l, int64_t *ids, size_t max);

/* ---- replicated: call inside the open batch ---- */

/* lessor_grant creates lease |id| (any non-zero id: etcd accepts negative
 * ones) with |ttl| seconds (raised to the minimum); *|granted| gets the TTL
 * it has. A primary starts its clock at |now_ms|. Errors:
 * QERR_LEASE_EXISTS, QERR_LEASE_TTL_TOO_LARGE, -EINVAL (id 0), -ENOMEM,
 * storage errors. */
int lessor_grant(lessor *l, int64_t id, int64_t ttl, int64_t now_ms, int64_t *granted);

/* lessor_remove deletes lease |id| (its keys must already be deleted: see
 * apply/). Errors: QERR_LEASE_NOT_FOUND, storage errors. */
int lessor_remove(lessor *l, int64_t id);

/* lessor_checkpoint records |remaining| seconds left on lease |id| (0 =
 * the full TTL). A missing lease is ignored (it was revoked since). */
int lessor_checkpoint(lessor *l, int64_t id, int64_t remaining);

/* ---- attached keys (from the store's change observer) ---- */

int lessor_attach(lessor *l, int64_t id, const uint8_t *key, size_t len);
void lessor_detach(lessor *l, int64_t id, const uint8_t *key, size_t len);

/* lessor_keys calls |fn| with each key attached to |id| (pointers valid
 * during the call; do not attach or detach from |fn|). Returns the number
 * of keys, or -1 if there is no such lease. */
typedef void (*lessor_key_fn)(const uint8_t *key, size_t len, void *arg);
long lessor_keys(const lessor *l, int64_t id, lessor_key_fn fn, void *arg);

/* ---- primary only ---- */

/* lessor_promote makes this lessor the primary at |now_ms|: every lease
 * expires at now + its checkpointed remaining TTL (full TTL if none). The
 * leases are taken into the expiry heap a bounded number at a time (here,
 * then at each lessor_expired), so millions of them do not hold the loop
 * at once; one not yet taken expires that much later (20,000 a call: a
 * million leases are all taken after 50 calls), and lessor_remaining
 * answers for it on the promotion's clock all the same. */
void lessor_promote(lessor *l, int64_t now_ms);
void lessor_demote(lessor *l);
bool lessor_is_primary(const lessor *l);

/* lessor_renew restarts the clock of |id| at |now_ms| and gives its TTL.
 * *|needs_checkpoint| is set when a checkpointed remaining TTL must be
 * cleared through the log (so a new primary would use the full TTL).
 * Errors: QERR_LEASE_NOT_FOUND, QERR_NO_LEADER when not primary. */
int lessor_renew(lessor *l, int64_t id, int64_t now_ms, int64_t *ttl, bool *needs_checkpoint);

/* lessor_remaining gives the seconds left (rounded down, as etcd) and the
 * granted TTL. Errors: QERR_LEASE_NOT_FOUND. */
int lessor_remaining(const lessor *l, int64_t id, int64_t now_ms, int64_t *remaining,
                     int64_t *granted);

/* lessor_expired writes up to |max| ids of leases whose time is up at
 * |now_ms| and marks them as being revoked, so they are not returned again
 * until lessor_revoke_failed. Returns how many it wrote. */
size_t lessor_expired(lessor *l, int64_t now_ms, int64_t *ids, size_t max);
void lessor_revoke_failed(lessor *l, int64_t id);

/* lessor_due_checkpoints writes up to |max| (id, remaining seconds) pairs
 * of leases whose remaining TTL should be checkpointed now: leases whose
 * last checkpoint is older than |interval_ms| and with at least a second
 * left. Each call looks at a bounded number of leases, going on round the
 * table from where the last one stopped, so every lease gets its turn
 * however many there are. */
size_t lessor_due_checkpoints(lessor *l, int64_t now_ms, int64_t interval_ms, int64_t *ids,
                              int64_t *remaining, size_t max);

/* lessor_metrics_register registers etcd's etcd_debugging_lease_* counters
 * (granted and revoked as applied, renewed on the primary) and TTL
 * histogram (base/metrics.h). */
void lessor_metrics_register(void);

/* lessor_next_expiry is the earliest expiry (ms) of a lease not being
 * revoked, or INT64_MAX. */
int64_t lessor_next_expiry(const lessor *l);

#endif
