/* client/calls.c: the typed helpers of libquorum-client: each builds one
 * etcd request, calls qc_unary and hands back the typed response. */
#include <errno.h>
#include <stdlib.h>

#include "quorum/client.h"

/* BIN makes a ProtobufCBinaryData that borrows |p| (never written) */
#define BIN(p, n) ((ProtobufCBinaryData){.len = (n), .data = (uint8_t *)(p)})

/* call runs one unary call; when the caller passed no |out|, the response
 * is freed here. */
static int call(qc_client *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, void *out, int timeout_ms,
                struct qc_status *st)
{
    ProtobufCMessage *m = NULL;
    int r = qc_unary_timeout(c, method, req, desc, &m, timeout_ms, st);
    if (out)
        *(ProtobufCMessage **)out = m;
    else if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return r;
}

/* ---- KV ---- */

int qc_put(qc_client *c, const void *key, size_t klen, const void *val, size_t vlen, int64_t lease,
           Etcdserverpb__PutResponse **resp, struct qc_status *st)
{
    Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
    r.key = BIN(key, klen);
    r.value = BIN(val, vlen);
    r.lease = lease;
    return call(c, "/etcdserverpb.KV/Put", &r.base, &etcdserverpb__put_response__descriptor, resp,
                0, st);
}

int qc_range(qc_client *c, const Etcdserverpb__RangeRequest *req,
             Etcdserverpb__RangeResponse **resp, struct qc_status *st)
{
    return call(c, "/etcdserverpb.KV/Range", &req->base, &etcdserverpb__range_response__descriptor,
                resp, 0, st);
}

int qc_get(qc_client *c, const void *key, size_t klen, const struct qc_get_opts *o,
           Etcdserverpb__RangeResponse **resp, struct qc_status *st)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = BIN(key, klen);
    if (o) {
        if (o->range_end)
            r.range_end = BIN(o->range_end, o->range_end_len);
        r.revision = o->revision;
        r.limit = o->limit;
        r.serializable = o->serializable != 0;
        r.keys_only = o->keys_only != 0;
        r.count_only = o->count_only != 0;
        r.sort_order = o->sort_order;
        r.sort_target = o->sort_target;
    }
    return qc_range(c, &r, resp, st);
}

int qc_delete(qc_client *c, const void *key, size_t klen, const void *range_end,
              size_t range_end_len, int prev_kv, Etcdserverpb__DeleteRangeResponse **resp,
              struct qc_status *st)
{
    Etcdserverpb__DeleteRangeRequest r = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    r.key = BIN(key, klen);
    if (range_end)
        r.range_end = BIN(range_end, range_end_len);
    r.prev_kv = prev_kv != 0;
    return call(c, "/etcdserverpb.KV/DeleteRange", &r.base,
                &etcdserverpb__delete_range_response__descriptor, resp, 0, st);
}

int qc_txn(qc_client *c, const Etcdserverpb__TxnRequest *req, Etcdserverpb__TxnResponse **resp,
           struct qc_status *st)
{
    return call(c, "/etcdserverpb.KV/Txn", &req->base, &etcdserverpb__txn_response__descriptor,
                resp, 0, st);
}

int qc_compact(qc_client *c, int64_t revision, int physical,
               Etcdserverpb__CompactionResponse **resp, struct qc_status *st)
{
    Etcdserverpb__CompactionRequest r = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    r.revision = revision;
    r.physical = physical != 0;
    return call(c, "/etcdserverpb.KV/Compact", &r.base,
                &etcdserverpb__compaction_response__descriptor, resp, 0, st);
}

/* ---- Lease ---- */

int qc_lease_grant(qc_client *c, int64_t ttl, int64_t id, Etcdserverpb__LeaseGrantResponse **resp,
                   struct qc_status *st)
{
    Etcdserverpb__LeaseGrantRequest r = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    r.ttl = ttl;
    r.id = id;
    return call(c, "/etcdserverpb.Lease/LeaseGrant", &r.base,
                &etcdserverpb__lease_grant_response__descriptor, resp, 0, st);
}

int qc_lease_revoke(qc_client *c, int64_t id, Etcdserverpb__LeaseRevokeResponse **resp,
                    struct qc_status *st)
{
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    return call(c, "/etcdserverpb.Lease/LeaseRevoke", &r.base,
                &etcdserverpb__lease_revoke_response__descriptor, resp, 0, st);
}

int qc_lease_timetolive(qc_client *c, int64_t id, int keys,
                        Etcdserverpb__LeaseTimeToLiveResponse **resp, struct qc_status *st)
{
    Etcdserverpb__LeaseTimeToLiveRequest r = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    r.id = id;
    r.keys = keys != 0;
    return call(c, "/etcdserverpb.Lease/LeaseTimeToLive", &r.base,
                &etcdserverpb__lease_time_to_live_response__descriptor, resp, 0, st);
}

int qc_lease_leases(qc_client *c, Etcdserverpb__LeaseLeasesResponse **resp, struct qc_status *st)
{
    Etcdserverpb__LeaseLeasesRequest r = ETCDSERVERPB__LEASE_LEASES_REQUEST__INIT;
    return call(c, "/etcdserverpb.Lease/LeaseLeases", &r.base,
                &etcdserverpb__lease_leases_response__descriptor, resp, 0, st);
}

/* ---- Cluster ---- */

int qc_member_list(qc_client *c, Etcdserverpb__MemberListResponse **resp, struct qc_status *st)
{
    Etcdserverpb__MemberListRequest r = ETCDSERVERPB__MEMBER_LIST_REQUEST__INIT;
    return call(c, "/etcdserverpb.Cluster/MemberList", &r.base,
                &etcdserverpb__member_list_response__descriptor, resp, 0, st);
}

int qc_member_add(qc_client *c, const char *const *peer_urls, size_t n, int is_learner,
                  Etcdserverpb__MemberAddResponse **resp, struct qc_status *st)
{
    Etcdserverpb__MemberAddRequest r = ETCDSERVERPB__MEMBER_ADD_REQUEST__INIT;
    r.n_peerurls = n;
    r.peerurls = (char **)peer_urls; /* only read by pack */
    r.islearner = is_learner != 0;
    return call(c, "/etcdserverpb.Cluster/MemberAdd", &r.base,
                &etcdserverpb__member_add_response__descriptor, resp, 0, st);
}

int qc_member_remove(qc_client *c, uint64_t id, Etcdserverpb__MemberRemoveResponse **resp,
                     struct qc_status *st)
{
    Etcdserverpb__MemberRemoveRequest r = ETCDSERVERPB__MEMBER_REMOVE_REQUEST__INIT;
    r.id = id;
    return call(c, "/etcdserverpb.Cluster/MemberRemove", &r.base,
                &etcdserverpb__member_remove_response__descriptor, resp, 0, st);
}

int qc_member_update(qc_client *c, uint64_t id, const char *const *peer_urls, size_t n,
                     Etcdserverpb__MemberUpdateResponse **resp, struct qc_status *st)
{
    Etcdserverpb__MemberUpdateRequest r = ETCDSERVERPB__MEMBER_UPDATE_REQUEST__INIT;
    r.id = id;
    r.n_peerurls = n;
    r.peerurls = (char **)peer_urls;
    return call(c, "/etcdserverpb.Cluster/MemberUpdate", &r.base,
                &etcdserverpb__member_update_response__descriptor, resp, 0, st);
}

int qc_member_promote(qc_client *c, uint64_t id, Etcdserverpb__MemberPromoteResponse **resp,
                      struct qc_status *st)
{
    Etcdserverpb__MemberPromoteRequest r = ETCDSERVERPB__MEMBER_PROMOTE_REQUEST__INIT;
    r.id = id;
    return call(c, "/etcdserverpb.Cluster/MemberPromote", &r.base,
                &etcdserverpb__member_promote_response__descriptor, resp, 0, st);
}

/* ---- Maintenance ---- */

int qc_maint_status(qc_client *c, Etcdserverpb__StatusResponse **resp, struct qc_status *st)
{
    Etcdserverpb__StatusRequest r = ETCDSERVERPB__STATUS_REQUEST__INIT;
    return call(c, "/etcdserverpb.Maintenance/Status", &r.base,
                &etcdserverpb__status_response__descriptor, resp, 0, st);
}

int qc_maint_hashkv(qc_client *c, int64_t revision, Etcdserverpb__HashKVResponse **resp,
                    struct qc_status *st)
{
    Etcdserverpb__HashKVRequest r = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    r.revision = revision;
    return call(c, "/etcdserverpb.Maintenance/HashKV", &r.base,
                &etcdserverpb__hash_kvresponse__descriptor, resp, 0, st);
}

int qc_maint_hash(qc_client *c, Etcdserverpb__HashResponse **resp, struct qc_status *st)
{
    Etcdserverpb__HashRequest r = ETCDSERVERPB__HASH_REQUEST__INIT;
    return call(c, "/etcdserverpb.Maintenance/Hash", &r.base,
                &etcdserverpb__hash_response__descriptor, resp, 0, st);
}

int qc_maint_alarm(qc_client *c, Etcdserverpb__AlarmRequest__AlarmAction action, uint64_t member_id,
                   Etcdserverpb__AlarmType alarm, Etcdserverpb__AlarmResponse **resp,
                   struct qc_status *st)
{
    Etcdserverpb__AlarmRequest r = ETCDSERVERPB__ALARM_REQUEST__INIT;
    r.action = action;
    r.memberid = member_id;
    r.alarm = alarm;
    return call(c, "/etcdserverpb.Maintenance/Alarm", &r.base,
                &etcdserverpb__alarm_response__descriptor, resp, 0, st);
}

int qc_maint_defragment(qc_client *c, int timeout_ms, Etcdserverpb__DefragmentResponse **resp,
                        struct qc_status *st)
{
    Etcdserverpb__DefragmentRequest r = ETCDSERVERPB__DEFRAGMENT_REQUEST__INIT;
    return call(c, "/etcdserverpb.Maintenance/Defragment", &r.base,
                &etcdserverpb__defragment_response__descriptor, resp, timeout_ms, st);
}

int qc_maint_move_leader(qc_client *c, uint64_t target_id, Etcdserverpb__MoveLeaderResponse **resp,
                         struct qc_status *st)
{
    Etcdserverpb__MoveLeaderRequest r = ETCDSERVERPB__MOVE_LEADER_REQUEST__INIT;
    r.targetid = target_id;
    return call(c, "/etcdserverpb.Maintenance/MoveLeader", &r.base,
                &etcdserverpb__move_leader_response__descriptor, resp, 0, st);
}

/* ---- Lock and Election ---- */

int qc_lock(qc_client *c, const void *name, size_t nlen, int64_t lease, int timeout_ms,
            V3lockpb__LockResponse **resp, struct qc_status *st)
{
    V3lockpb__LockRequest r = V3LOCKPB__LOCK_REQUEST__INIT;
    r.name = BIN(name, nlen);
    r.lease = lease;
    return call(c, "/v3lockpb.Lock/Lock", &r.base, &v3lockpb__lock_response__descriptor, resp,
                timeout_ms, st);
}

int qc_unlock(qc_client *c, const void *key, size_t klen, V3lockpb__UnlockResponse **resp,
              struct qc_status *st)
{
    V3lockpb__UnlockRequest r = V3LOCKPB__UNLOCK_REQUEST__INIT;
    r.key = BIN(key, klen);
    return call(c, "/v3lockpb.Lock/Unlock", &r.base, &v3lockpb__unlock_response__descriptor, resp,
                0, st);
}

int qc_election_campaign(qc_client *c, const void *name, size_t nlen, int64_t lease,
                         const void *val, size_t vlen, int timeout_ms,
                         V3electionpb__CampaignResponse **resp, struct qc_status *st)
{
    V3electionpb__CampaignRequest r = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    r.name = BIN(name, nlen);
    r.lease = lease;
    r.value = BIN(val, vlen);
    return call(c, "/v3electionpb.Election/Campaign", &r.base,
                &v3electionpb__campaign_response__descriptor, resp, timeout_ms, st);
}

int qc_election_proclaim(qc_client *c, const V3electionpb__LeaderKey *leader, const void *val,
                         size_t vlen, V3electionpb__ProclaimResponse **resp, struct qc_status *st)
{
    V3electionpb__ProclaimRequest r = V3ELECTIONPB__PROCLAIM_REQUEST__INIT;
    r.leader = (V3electionpb__LeaderKey *)leader; /* only read by pack */
    r.value = BIN(val, vlen);
    return call(c, "/v3electionpb.Election/Proclaim", &r.base,
                &v3electionpb__proclaim_response__descriptor, resp, 0, st);
}

int qc_election_leader(qc_client *c, const void *name, size_t nlen,
                       V3electionpb__LeaderResponse **resp, struct qc_status *st)
{
    V3electionpb__LeaderRequest r = V3ELECTIONPB__LEADER_REQUEST__INIT;
    r.name = BIN(name, nlen);
    return call(c, "/v3electionpb.Election/Leader", &r.base,
                &v3electionpb__leader_response__descriptor, resp, 0, st);
}

int qc_election_resign(qc_client *c, const V3electionpb__LeaderKey *leader,
                       V3electionpb__ResignResponse **resp, struct qc_status *st)
{
    V3electionpb__ResignRequest r = V3ELECTIONPB__RESIGN_REQUEST__INIT;
    r.leader = (V3electionpb__LeaderKey *)leader;
    return call(c, "/v3electionpb.Election/Resign", &r.base,
                &v3electionpb__resign_response__descriptor, resp, 0, st);
}
