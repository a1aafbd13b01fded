/* server/lease_service.c: /etcdserverpb.Lease/ — LeaseGrant, LeaseRevoke,
 * LeaseKeepAlive (a bidirectional stream, any number of leases on it),
 * LeaseTimeToLive, LeaseLeases.
 *
 * Grant and revoke are log entries; keep-alive and time-to-live are
 * answered from the leader's lease clocks, as etcd's: a follower forwards
 * them to the leader. */
#include "server/server_int.h"

#include <stdlib.h>

#include "base/err.h"
#include "transport/transport.h"

static void on_grant(qcall *call, const uint8_t *msg, size_t len)
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

static void on_revoke(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *r =
        server_unpack(call, &etcdserverpb__lease_revoke_request__descriptor, msg, len);
    if (r != NULL)
        server_propose(s, call, ENTRY_LEASE_REVOKE, r);
}

int server_lease_renew_local(struct server *s, int64_t id, int64_t *ttl)
{
    bool needs_checkpoint = false;
    int rv = lessor_renew(s->leases, id, (int64_t)uv_now(s->loop), ttl, &needs_checkpoint);
    if (rv == 0 && needs_checkpoint) {
        /* renewed: a new leader must use the full TTL, not the old
         * checkpoint */
        Etcdserverpb__LeaseCheckpoint cp = ETCDSERVERPB__LEASE_CHECKPOINT__INIT;
        cp.id = id;
        Etcdserverpb__LeaseCheckpoint *cps[1] = {&cp};
        Etcdserverpb__LeaseCheckpointRequest cr = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
        cr.checkpoints = cps;
        cr.n_checkpoints = 1;
        server_propose_internal(s, ENTRY_LEASE_CHECKPOINT, &cr.base);
    }
    return rv;
}

/* ---- forwarding to the leader ----
 *
 * Only the leader's lease clocks count (it alone expires leases), so a
 * follower passes keep-alives and time-to-live queries to it over the peer
 * link and answers its client when the leader replies. */

struct lease_fwd {
    struct lease_fwd *next;
    uint64_t ctx;
    qcall *call;
    int64_t id;
    bool renew, keys;
    bool finish_call; /* the client half-closed: end the stream after this */
    uint64_t deadline;
};

static bool call_has_fwd(struct server *s, qcall *call)
{
    for (struct lease_fwd *f = s->lease_fwds; f != NULL; f = f->next)
        if (f->call == call)
            return true;
    return false;
}

/* after_fwd ends a keep-alive stream whose client half-closed once its
 * last forwarded request is answered (etcd answers each request before it
 * reads the end of the stream). */
static void after_fwd(struct server *s, qcall *call, bool finish_call)
{
    if (finish_call && !call_has_fwd(s, call))
        qcall_finish(call, GRPC_STATUS_OK, NULL);
}

static int forward(struct server *s, qcall *call, int64_t id, bool renew, bool keys)
{
    uint64_t lead = server_leader(s);
    if (lead == 0)
        return QERR_NO_LEADER;
    struct lease_fwd *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->ctx = ++s->next_lease_ctx;
    f->call = call;
    f->id = id;
    f->renew = renew;
    f->keys = keys;
    f->deadline = uv_now(s->loop) + s->request_timeout_ms;
    struct raft_msg m = {.type = TRANSPORT_MSG_LEASE,
                         .from = s->member_id,
                         .to = lead,
                         .term = server_term(s),
                         .index = (uint64_t)id,
                         .ctx = f->ctx,
                         .force = renew};
    int rv = transport_send(s->tp, &m);
    if (rv != 0) {
        free(f);
        return rv == -ENOENT ? QERR_NO_LEADER : rv;
    }
    f->next = s->lease_fwds;
    s->lease_fwds = f;
    return 0;
}

static void send_keep_alive(struct server *s, qcall *call, int64_t id, int64_t ttl)
{
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__LeaseKeepAliveResponse resp = ETCDSERVERPB__LEASE_KEEP_ALIVE_RESPONSE__INIT;
    server_fill_header(s, &h);
    resp.header = &h;
    resp.id = id;
    resp.ttl = ttl;
    int rv = server_send(s, call, &resp.base);
    if (rv != 0 && rv != -EPIPE)
        server_reply_error(call, rv);
}

static void reply_time_to_live(struct server *s, qcall *call, int64_t id, bool keys, bool found,
                               int64_t remaining, int64_t granted);

void server_lease_on_request(struct server *s, const struct raft_msg *m)
{
    if (!server_is_leader(s))
        return; /* the follower's request times out */
    int64_t id = (int64_t)m->index, ttl = 0, granted = 0;
    int rv;
    if (m->force)
        rv = server_lease_renew_local(s, id, &ttl);
    else
        rv = lessor_remaining(s->leases, id, (int64_t)uv_now(s->loop), &ttl, &granted);
    struct raft_msg r = {.type = TRANSPORT_MSG_LEASE_RESP,
                         .from = s->member_id,
                         .to = m->from,
                         .term = server_term(s),
                         .ctx = m->ctx,
                         .index = (uint64_t)ttl,
                         .commit = (uint64_t)granted,
                         .reject = rv != 0};
    transport_send(s->tp, &r);
}

void server_lease_on_response(struct server *s, const struct raft_msg *m)
{
    for (struct lease_fwd **pp = &s->lease_fwds; *pp != NULL; pp = &(*pp)->next) {
        struct lease_fwd *f = *pp;
        if (f->ctx != m->ctx)
            continue;
        *pp = f->next;
        if (f->renew)
            send_keep_alive(s, f->call, f->id, m->reject ? 0 : (int64_t)m->index);
        else
            reply_time_to_live(s, f->call, f->id, f->keys, !m->reject, (int64_t)m->index,
                               (int64_t)m->commit);
        qcall *call = f->call;
        bool fin = f->finish_call;
        free(f);
        after_fwd(s, call, fin);
        return;
    }
}

void server_lease_expire_fwds(struct server *s, uint64_t now)
{
    for (struct lease_fwd **pp = &s->lease_fwds; *pp != NULL;) {
        struct lease_fwd *f = *pp;
        if (f->deadline > now) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        /* a lost keep-alive goes unanswered: the client sends the next */
        if (!f->renew)
            server_reply_error(f->call, QERR_TIMEOUT);
        qcall *call = f->call;
        bool fin = f->renew && f->finish_call;
        free(f);
        after_fwd(s, call, fin);
    }
}

static void lease_call_closed(qcall *call)
{
    struct server *s = server_of(call);
    for (struct lease_fwd **pp = &s->lease_fwds; *pp != NULL;) {
        struct lease_fwd *f = *pp;
        if (f->call != call) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        free(f);
    }
}

static void on_keep_alive(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__LeaseKeepAliveRequest *r =
        (Etcdserverpb__LeaseKeepAliveRequest *)protobuf_c_message_unpack(
            &etcdserverpb__lease_keep_alive_request__descriptor, NULL, len, msg);
    if (r == NULL) {
        qcall_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "grpc: error unmarshalling request: invalid message");
        return;
    }
    int64_t id = r->id, ttl = 0;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    int rv;
    if (!server_is_leader(s)) {
        rv = forward(s, call, id, true, false);
        if (rv != 0)
            server_reply_error(call, rv);
        return;
    }
    rv = server_lease_renew_local(s, id, &ttl);
    if (rv == QERR_LEASE_NOT_FOUND) {
        ttl = 0; /* etcd answers an unknown lease with TTL 0, not an error */
    } else if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    send_keep_alive(s, call, id, ttl);
}

static void on_keep_alive_end(qcall *call)
{
    struct server *s = server_of(call);
    for (struct lease_fwd *f = s->lease_fwds; f != NULL; f = f->next)
        if (f->call == call)
            f->finish_call = true; /* answered first, then the end */
    after_fwd(s, call, true);
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

static void reply_time_to_live(struct server *s, qcall *call, int64_t id, bool keys, bool found,
                               int64_t remaining, int64_t granted)
{
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__LeaseTimeToLiveResponse resp = ETCDSERVERPB__LEASE_TIME_TO_LIVE_RESPONSE__INIT;
    resp.header = &h;
    resp.id = id;
    struct key_out ko = {0};
    if (!found || !lessor_exists(s->leases, id)) {
        resp.ttl = -1; /* etcd: not an error, TTL -1 */
    } else {
        resp.ttl = remaining;
        resp.grantedttl = granted;
        if (keys) {
            long n = lessor_keys(s->leases, id, NULL, NULL);
            ko.keys = calloc((size_t)(n > 0 ? n : 1), sizeof(*ko.keys));
            if (ko.keys == NULL) {
                server_reply_error(call, -ENOMEM);
                return;
            }
            lessor_keys(s->leases, id, collect_key, &ko);
            resp.keys = ko.keys;
            resp.n_keys = ko.n;
        }
    }
    server_fill_header(s, &h);
    server_reply(s, call, &resp.base);
    free(ko.keys);
}

static void on_time_to_live(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__LeaseTimeToLiveRequest *r = (Etcdserverpb__LeaseTimeToLiveRequest *)server_unpack(
        call, &etcdserverpb__lease_time_to_live_request__descriptor, msg, len);
    if (r == NULL)
        return;
    int64_t id = r->id;
    bool keys = r->keys;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    int arv = keys ? server_auth_lease_keys(call, id) : 0;
    if (arv != 0) {
        server_reply_error(call, arv);
        return;
    }
    if (!server_is_leader(s)) {
        int rv = forward(s, call, id, false, keys);
        if (rv != 0)
            server_reply_error(call, rv);
        return;
    }
    int64_t remaining = 0, granted = 0;
    bool found =
        lessor_remaining(s->leases, id, (int64_t)uv_now(s->loop), &remaining, &granted) == 0;
    reply_time_to_live(s, call, id, keys, found, remaining, granted);
}

static void on_leases(qcall *call, const uint8_t *msg, size_t len)
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

const struct qcall_method server_lease_methods[] = {
    {"/etcdserverpb.Lease/LeaseGrant", QCALL_UNARY, on_grant, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseRevoke", QCALL_UNARY, on_revoke, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseKeepAlive", QCALL_BIDI_STREAMING, on_keep_alive, on_keep_alive_end,
     lease_call_closed},
    {"/etcdserverpb.Lease/LeaseTimeToLive", QCALL_UNARY, on_time_to_live, NULL, lease_call_closed},
    {"/etcdserverpb.Lease/LeaseLeases", QCALL_UNARY, on_leases, NULL, NULL},
};
const size_t server_lease_methods_n =
    sizeof(server_lease_methods) / sizeof(server_lease_methods[0]);
