/* server/maintenance_service.c: /etcdserverpb.Maintenance/ — Status,
 * HashKV and the read side of Alarm. Defragment, Snapshot, Hash, MoveLeader
 * and alarm changes come with the maintenance issue; until then the grpc
 * layer answers them UNIMPLEMENTED. */
#include "server/server_int.h"

#include "base/err.h"

/* The etcd API version quorum implements; etcd clients parse it. */
#define ETCD_VERSION "3.4.0"

static void on_status(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *req = server_unpack(call, &etcdserverpb__status_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__StatusResponse r = ETCDSERVERPB__STATUS_RESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    r.version = (char *)ETCD_VERSION;
    r.dbsize = (int64_t)backend_size(s->be);
    r.dbsizeinuse = (int64_t)backend_size_in_use(s->be);
    r.leader = s->member_id;
    r.raftindex = s->applied_index;
    r.raftappliedindex = s->applied_index;
    r.raftterm = s->term;
    server_reply(s, call, &r.base);
}

static void on_hash_kv(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__HashKVRequest *req = (Etcdserverpb__HashKVRequest *)server_unpack(
        call, &etcdserverpb__hash_kvrequest__descriptor, msg, len);
    if (req == NULL)
        return;
    uint32_t hash = 0;
    int64_t compact = 0;
    int rv = mvcc_hash_kv(s->kv, req->revision, &hash, &compact);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__HashKVResponse r = ETCDSERVERPB__HASH_KVRESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    r.hash = hash;
    r.compact_revision = compact;
    server_reply(s, call, &r.base);
}

static void on_alarm(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__AlarmRequest *req = (Etcdserverpb__AlarmRequest *)server_unpack(
        call, &etcdserverpb__alarm_request__descriptor, msg, len);
    if (req == NULL)
        return;
    int action = req->action;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (action != ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET) {
        grpc_call_finish(call, GRPC_STATUS_UNIMPLEMENTED,
                         "quorum: raising and clearing alarms is not implemented yet");
        return;
    }
    /* No alarm can be raised yet (quota and corruption checks come with
     * the maintenance issue), so the list is truly empty. */
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__AlarmResponse r = ETCDSERVERPB__ALARM_RESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    server_reply(s, call, &r.base);
}

const struct grpc_method server_maintenance_methods[] = {
    {"/etcdserverpb.Maintenance/Status", GRPC_UNARY, on_status, NULL, NULL},
    {"/etcdserverpb.Maintenance/HashKV", GRPC_UNARY, on_hash_kv, NULL, NULL},
    {"/etcdserverpb.Maintenance/Alarm", GRPC_UNARY, on_alarm, NULL, NULL},
};
const size_t server_maintenance_methods_n =
    sizeof(server_maintenance_methods) / sizeof(server_maintenance_methods[0]);
