/* server/alarm.h: the member alarms (etcd's alarmStore) and the backend
 * quota (etcd's quotaKVServer / applierV3Capped).
 *
 * Alarms are persisted in BACKEND_DB_META under "alarm/<member id hex>/<type>"
 * (value 1), written inside the apply batch, so a raised NOSPACE survives a
 * restart as in etcd (its "alarm" bucket). While NOSPACE is raised, Put,
 * LeaseGrant and a Txn with a put in either branch fail RESOURCE_EXHAUSTED
 * "etcdserver: mvcc: database space exceeded"; Range, DeleteRange, Compact,
 * LeaseRevoke, Defragment still work (as etcd 3.4). While CORRUPT is
 * raised every write a client sends fails DATA_LOSS "etcdserver: corrupt
 * cluster" (etcd's applierV3Corrupt); reads still work.
 */
#ifndef QUORUM_SERVER_ALARM_H
#define QUORUM_SERVER_ALARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "rpc.pb-c.h"

#define ALARM_MAX 32

struct alarm_member {
    uint64_t member_id;
    int type; /* Etcdserverpb__AlarmType */
};

struct alarm_store {
    struct alarm_member a[ALARM_MAX];
    size_t n;
};

struct server;
struct entry;

/* server_alarms_load reads the persisted alarms into s->alarms (at start,
 * outside any batch). Errors: storage errors. */
int server_alarms_load(struct server *s);

/* server_alarm_active: an alarm of |type| is raised for any member. */
bool server_alarm_active(const struct server *s, int type);

/* server_alarm_apply applies an AlarmRequest inside the open batch, as
 * etcd's applierV3backend.Alarm: GET lists every alarm; ACTIVATE adds
 * (member, type) and answers it; DEACTIVATE removes it and answers it (or
 * nothing when it was not raised). Type NONE is activated too (etcd 3.4). The
 * response is built in |a|; the header is left for the caller to fill.
 * Errors: -ENOMEM, storage errors. */
int server_alarm_apply(struct server *s, const Etcdserverpb__AlarmRequest *req, struct arena *a,
                       Etcdserverpb__AlarmResponse **out);

/* server_quota_check runs before a write entry is applied (inside the
 * batch): QERR_CORRUPT for a client write while CORRUPT is raised;
 * QERR_NO_SPACE if NOSPACE is raised and the entry is a Put, a
 * LeaseGrant, a Txn with a put or a ZooKeeper write that adds data; or if
 * the database file plus the entry's cost (etcd's: 256 + key + value per
 * put, the larger txn branch, 64 per lease; zk_write_cost for a ZooKeeper
 * write) reaches --quota-backend-bytes, in which case NOSPACE is raised (in
 * the same batch) first. 0 when the entry may be applied. */
int server_quota_check(struct server *s, const struct entry *e);

/* server_alarm_string writes etcd's text form of an alarm, as
 * Status.errors and `etcdctl alarm list` show it:
 * "memberID:<decimal> alarm:NOSPACE " (Go's compact proto text: a trailing
 * space, zero fields left out, so type NONE is "memberID:<decimal> "). */
void server_alarm_string(const struct alarm_member *m, char *out, size_t outlen);

#endif
