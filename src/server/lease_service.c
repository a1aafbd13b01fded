/* server/lease_service.c: /etcdserverpb.Lease/ — LeaseGrant, LeaseRevoke,
 * LeaseKeepAlive (a bidirectional stream, any number of leases on it),
 * LeaseTimeToLive, LeaseLeases.
 *
 * Grant and revoke are log entries; keep-alive and time-to-live are
 * answered by the primary from its lease clocks, as etcd's leader does. */
#include "server/server_int.h"

#include <stdlib.h>

#include "base/err.h"

static void on_grant(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__LeaseGrantRequest *r = (Etcdserverpb__LeaseGrantRequest *)server_unpack(
        call, &etcdserverpb__lease_grant_request__descriptor, msg, len);
    if (r == NULL)
        return;
    /* the id is chosen before proposing, so every member applies the same */
    while (r->id == 0)
        r->id = (int64_t)(server_next_id(s) & ((1ull << 63) - 1));
    server_propose(s, call, ENTRY_LEASE_GRANT, &r->base);
}

static void on_revoke(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *r =
        server_unpack(call, &etcdserverpb__lease_revoke_request__descriptor, msg, len);
    if (r != NULL)
        server_propose(s, call, ENTRY_LEASE_REVOKE, r);
}

static void on_keep_alive(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__LeaseKeepAliveRequest *r = (Etcdserverpb__LeaseKeepAliveRequest *)
        protobuf_c_message_unpack(&etcdserverpb__lease_keep_alive_request__descriptor, NULL, len,
                                  msg);
    if (r == NULL) {
        grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "grpc: error unmarshalling request: invalid message");
        return;
    }
    int64_t ttl = 0;
    bool needs_checkpoint = false;
    int rv = lessor_renew(s->leases, r->id, (int64_t)uv_now(s->loop), &ttl, &needs_checkpoint);
    if (rv == QERR_LEASE_NOT_FOUND) {
        ttl = 0; /* etcd answers an unknown lease with TTL 0, not an error */
    } else if (rv != 0) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        server_reply_error(call, rv);
        return;
    }
    if (needs_checkpoint) {
        /* renewed: a new primary must use the full TTL, not the old
         * checkpoint */
        Etcdserverpb__LeaseCheckpoint cp = ETCDSERVERPB__LEASE_CHECKPOINT__INIT;
        cp.id = r->id;
        Etcdserverpb__LeaseCheckpoint *cps[1] = {&cp};
        Etcdserverpb__LeaseCheckpointRequest cr = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
        cr.checkpoints = cps;
        cr.n_checkpoints = 1;
        server_propose_internal(s, ENTRY_LEASE_CHECKPOINT, &cr.base);
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__LeaseKeepAliveResponse resp = ETCDSERVERPB__LEASE_KEEP_ALIVE_RESPONSE__INIT;
    server_fill_header(s, &h);
    resp.header = &h;
    resp.id = r->id;
    resp.ttl = ttl;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    int rv2 = server_send(s, call, &resp.base);
    if (rv2 != 0 && rv2 != -EPIPE)
        server_reply_error(call, rv2);
}

static void on_keep_alive_end(grpc_call *call)
{
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

struct key_out {
    ProtobufCBinaryData *keys;
    size_t n;
};

static void collect_key(const uint8_t *key, size_t len, void *arg)
{
    struct key_out *o = arg;
    o->keys[o->n++] = (ProtobufCBinaryData){len, (uint8_t *)key};
}

static void on_time_to_live(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__LeaseTimeToLiveRequest *r = (Etcdserverpb__LeaseTimeToLiveRequest *)
        server_unpack(call, &etcdserverpb__lease_time_to_live_request__descriptor, msg, len);
    if (r == NULL)
        return;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__LeaseTimeToLiveResponse resp = ETCDSERVERPB__LEASE_TIME_TO_LIVE_RESPONSE__INIT;
    resp.header = &h;
    resp.id = r->id;
    int64_t remaining = 0, granted = 0;
    struct key_out ko = {0};
    if (lessor_remaining(s->leases, r->id, (int64_t)uv_now(s->loop), &remaining, &granted) != 0) {
        resp.ttl = -1; /* etcd: not an error, TTL -1 */
    } else {
        resp.ttl = remaining;
        resp.grantedttl = granted;
        if (r->keys) {
            long n = lessor_keys(s->leases, r->id, NULL, NULL);
            ko.keys = calloc((size_t)(n > 0 ? n : 1), sizeof(*ko.keys));
            if (ko.keys == NULL) {
                protobuf_c_message_free_unpacked(&r->base, NULL);
                server_reply_error(call, -ENOMEM);
                return;
            }
            lessor_keys(s->leases, r->id, collect_key, &ko);
            resp.keys = ko.keys;
            resp.n_keys = ko.n;
        }
    }
    server_fill_header(s, &h);
    server_reply(s, call, &resp.base);
    free(ko.keys);
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void on_leases(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *r =
        server_unpack(call, &etcdserverpb__lease_leases_request__descriptor, msg, len);
    if (r == NULL)
        return;
    protobuf_c_message_free_unpacked(r, NULL);
    size_t n = lessor_count(s->leases);
    int64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    Etcdserverpb__LeaseStatus *st = calloc(n ? n : 1, sizeof(*st));
    Etcdserverpb__LeaseStatus **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    if (ids == NULL || st == NULL || ptrs == NULL) {
        server_reply_error(call, -ENOMEM);
    } else {
        lessor_ids(s->leases, ids, n);
        for (size_t i = 0; i < n; i++) {
            etcdserverpb__lease_status__init(&st[i]);
            st[i].id = ids[i];
            ptrs[i] = &st[i];
        }
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        Etcdserverpb__LeaseLeasesResponse resp = ETCDSERVERPB__LEASE_LEASES_RESPONSE__INIT;
        server_fill_header(s, &h);
        resp.header = &h;
        resp.leases = ptrs;
        resp.n_leases = n;
        server_reply(s, call, &resp.base);
    }
    free(ids);
    free(st);
    free(ptrs);
}

const struct grpc_method server_lease_methods[] = {
    {"/etcdserverpb.Lease/LeaseGrant", GRPC_UNARY, on_grant, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseRevoke", GRPC_UNARY, on_revoke, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseKeepAlive", GRPC_BIDI_STREAMING, on_keep_alive,
     on_keep_alive_end, NULL},
    {"/etcdserverpb.Lease/LeaseTimeToLive", GRPC_UNARY, on_time_to_live, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseLeases", GRPC_UNARY, on_leases, NULL, NULL},
};
const size_t server_lease_methods_n =
    sizeof(server_lease_methods) / sizeof(server_lease_methods[0]);
