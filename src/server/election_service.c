/* server/election_service.c: /v3electionpb.Election/ — Campaign, Proclaim,
 * Leader, Observe, Resign, as etcd's v3election server runs
 * clientv3/concurrency's Election against itself:
 *
 *   Campaign: key = name "/" hex(lease); if it does not exist put the value
 *   with the lease, else read it (and Proclaim the new value if it
 *   differs); then wait until every key created under the name before ours
 *   is gone (waitDeletes). The leader is the key created first.
 *   Proclaim/Resign: a put/delete guarded by create_revision(key) == rev.
 *   Leader: the first-created key under the name.
 *   Observe: the leader now and every change of it, across successions.
 *
 * Errors that etcd returns as plain Go errors come as UNKNOWN with etcd's
 * text ("election: no leader", "election: not leader"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/recipe.h"

#define ERR_NO_LEADER "election: no leader"
#define ERR_NOT_LEADER "election: not leader"
#define ERR_MISSING_LEADER "\"leader\" field must be provided"

static uint8_t *make_pfx(const ProtobufCBinaryData *name, size_t *len)
{
    uint8_t *p = malloc(name->len + 1);
    if (p != NULL) {
        if (name->len)
            memcpy(p, name->data, name->len);
        p[name->len] = '/';
        *len = name->len + 1;
    }
    return p;
}

/* ---- Campaign ---- */

struct camp_op {
    struct recipe r;
    ProtobufCBinaryData name, value;
    uint8_t *pfx, *key;
    size_t pfx_len, key_len;
    int64_t lease, leader_rev;
    Etcdserverpb__ResponseHeader hdr; /* the campaign txn's: etcd answers with it */
    bool txn_sent, known_rev, elected, failed;
};

static void free_camp(struct recipe *r)
{
    struct camp_op *op = (struct camp_op *)r;
    arena_free(&r->a);
    free(op->name.data);
    free(op->value.data);
    free(op->pfx);
    free(op->key);
    free(op);
}

/* a put (|put|) or delete of our key, guarded by its create revision */
static void guarded_txn(struct recipe *r, const uint8_t *key, size_t klen, int64_t rev, bool put,
                        const ProtobufCBinaryData *val, int64_t lease, recipe_txn_fn fn)
{
    Etcdserverpb__Compare cmp;
    recipe_cmp_create(&cmp, key, klen, rev);
    Etcdserverpb__RequestOp op;
    Etcdserverpb__PutRequest p;
    Etcdserverpb__DeleteRangeRequest d;
    if (put)
        recipe_op_put(&op, &p, key, klen, val->data, val->len, lease);
    else
        recipe_op_delete(&op, &d, key, klen);
    Etcdserverpb__Compare *cmps[1] = {&cmp};
    Etcdserverpb__RequestOp *then[1] = {&op};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cmps;
    t.n_compare = 1;
    t.success = then;
    t.n_success = 1;
    if (fn != NULL)
        recipe_txn(r, &t, fn);
    else
        server_propose_internal(r->s, ENTRY_TXN, &t.base);
}

static void camp_resign(struct camp_op *op)
{
    guarded_txn(&op->r, op->key, op->key_len, op->leader_rev, false, NULL, 0, NULL);
}

static void camp_fail(struct camp_op *op, int err, const char *text)
{
    op->failed = true;
    recipe_finish(&op->r, err, text);
}

static void on_elected(struct recipe *r, int err, const Etcdserverpb__ResponseHeader *h)
{
    struct camp_op *op = (struct camp_op *)r;
    (void)h;
    if (err != 0) {
        camp_fail(op, err, NULL);
        return;
    }
    op->elected = true;
    if (r->call == NULL)
        return;
    Etcdserverpb__ResponseHeader hdr;
    recipe_fill_header(r->s, &hdr, &op->hdr);
    V3electionpb__LeaderKey lk = V3ELECTIONPB__LEADER_KEY__INIT;
    lk.name = op->name;
    lk.key = (ProtobufCBinaryData){op->key_len, op->key};
    lk.rev = op->leader_rev;
    lk.lease = op->lease;
    V3electionpb__CampaignResponse resp = V3ELECTIONPB__CAMPAIGN_RESPONSE__INIT;
    resp.header = &hdr;
    resp.leader = &lk;
    server_reply(r->s, r->call, &resp.base);
}

static void on_camp_proclaimed(struct recipe *r, int err, Etcdserverpb__TxnResponse *t)
{
    struct camp_op *op = (struct camp_op *)r;
    if (err != 0 || !t->succeeded) {
        camp_resign(op);
        camp_fail(op, err, err ? NULL : ERR_NOT_LEADER);
        return;
    }
    if (r->call == NULL) {
        camp_resign(op);
        return;
    }
    recipe_wait_deletes(r, op->pfx, op->pfx_len, op->leader_rev - 1, on_elected);
}

static void on_camp_txn(struct recipe *r, int err, Etcdserverpb__TxnResponse *t)
{
    struct camp_op *op = (struct camp_op *)r;
    if (err != 0) {
        camp_fail(op, err, NULL);
        return;
    }
    op->hdr = *t->header;
    op->hdr.base.descriptor = &etcdserverpb__response_header__descriptor;
    op->leader_rev = t->header->revision;
    op->known_rev = true;
    if (!t->succeeded) {
        Mvccpb__KeyValue *kv = t->responses[0]->response_range->kvs[0];
        op->leader_rev = kv->create_revision;
        if (kv->value.len != op->value.len ||
            (kv->value.len && memcmp(kv->value.data, op->value.data, kv->value.len) != 0)) {
            guarded_txn(r, op->key, op->key_len, op->leader_rev, true, &op->value, op->lease,
                        on_camp_proclaimed);
            return;
        }
    }
    if (r->call == NULL) {
        camp_resign(op);
        return;
    }
    recipe_wait_deletes(r, op->pfx, op->pfx_len, op->leader_rev - 1, on_elected);
}

static void camp_send(struct camp_op *op)
{
    char hex[24];
    int n = snprintf(hex, sizeof(hex), "%llx", (unsigned long long)op->lease);
    op->key = malloc(op->pfx_len + (size_t)n);
    if (op->key == NULL) {
        camp_fail(op, -ENOMEM, NULL);
        return;
    }
    memcpy(op->key, op->pfx, op->pfx_len);
    memcpy(op->key + op->pfx_len, hex, (size_t)n);
    op->key_len = op->pfx_len + (size_t)n;
    Etcdserverpb__Compare cmp;
    recipe_cmp_create(&cmp, op->key, op->key_len, 0);
    Etcdserverpb__RequestOp put_op, get_op;
    Etcdserverpb__PutRequest put;
    Etcdserverpb__RangeRequest get;
    recipe_op_put(&put_op, &put, op->key, op->key_len, op->value.data, op->value.len, op->lease);
    recipe_op_get(&get_op, &get, op->key, op->key_len);
    Etcdserverpb__Compare *cmps[1] = {&cmp};
    Etcdserverpb__RequestOp *then[1] = {&put_op}, *els[1] = {&get_op};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cmps;
    t.n_compare = 1;
    t.success = then;
    t.n_success = 1;
    t.failure = els;
    t.n_failure = 1;
    op->txn_sent = true;
    recipe_txn(&op->r, &t, on_camp_txn);
}

static void on_camp_granted(struct recipe *r, int err, int64_t id)
{
    struct camp_op *op = (struct camp_op *)r;
    if (err != 0) {
        camp_fail(op, err, NULL);
        return;
    }
    op->lease = id;
    if (r->call != NULL)
        camp_send(op);
}

static bool copy_bytes(ProtobufCBinaryData *dst, const ProtobufCBinaryData *src)
{
    dst->len = src->len;
    dst->data = malloc(src->len ? src->len : 1);
    if (dst->data != NULL && src->len)
        memcpy(dst->data, src->data, src->len);
    return dst->data != NULL;
}

static void on_campaign(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    V3electionpb__CampaignRequest *req = (V3electionpb__CampaignRequest *)server_unpack(
        call, &v3electionpb__campaign_request__descriptor, msg, len);
    if (req == NULL)
        return;
    struct camp_op *op = calloc(1, sizeof(*op));
    if (op == NULL || !copy_bytes(&op->name, &req->name) || !copy_bytes(&op->value, &req->value) ||
        (op->pfx = make_pfx(&req->name, &op->pfx_len)) == NULL) {
        if (op)
            free_camp(&op->r);
        v3electionpb__campaign_request__free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    op->r.s = s;
    op->r.call = call;
    op->r.refs = 1;
    op->r.free_op = free_camp;
    op->lease = req->lease;
    v3electionpb__campaign_request__free_unpacked(req, NULL);
    if (!recipe_auth(call, op->pfx, op->pfx_len, true, false)) {
        free_camp(&op->r);
        return;
    }
    qcall_set_data(call, op);
    if (op->lease == 0)
        recipe_grant(&op->r, 60, on_camp_granted);
    else
        camp_send(op);
}

static void on_campaign_close(qcall *call)
{
    struct camp_op *op = qcall_get_data(call);
    if (op == NULL)
        return;
    op->r.call = NULL;
    recipe_stop_wait(&op->r);
    /* a campaign given up while waiting resigns (etcd: on ctx cancel); a
     * txn still in flight resigns when it completes */
    if (op->known_rev && !op->elected && !op->failed)
        camp_resign(op);
    recipe_unref(&op->r);
}

/* ---- Proclaim and Resign: one guarded txn ---- */

struct simple_op {
    struct recipe r;
    bool proclaim;
};

static void free_simple(struct recipe *r)
{
    arena_free(&r->a);
    free(r);
}

static void on_guarded_done(struct recipe *r, int err, Etcdserverpb__TxnResponse *t)
{
    struct simple_op *op = (struct simple_op *)r;
    if (r->call == NULL)
        return;
    if (err != 0) {
        recipe_finish(r, err, NULL);
        return;
    }
    if (op->proclaim && !t->succeeded) {
        recipe_finish(r, 0, ERR_NOT_LEADER);
        return;
    }
    Etcdserverpb__ResponseHeader hdr;
    recipe_fill_header(r->s, &hdr, t->header);
    if (op->proclaim) {
        V3electionpb__ProclaimResponse resp = V3ELECTIONPB__PROCLAIM_RESPONSE__INIT;
        resp.header = &hdr;
        server_reply(r->s, r->call, &resp.base);
    } else {
        V3electionpb__ResignResponse resp = V3ELECTIONPB__RESIGN_RESPONSE__INIT;
        resp.header = &hdr;
        server_reply(r->s, r->call, &resp.base);
    }
}

static void start_guarded(qcall *call, const V3electionpb__LeaderKey *lk,
                          const ProtobufCBinaryData *value, bool proclaim)
{
    struct server *s = server_of(call);
    if (lk == NULL) {
        qcall_finish(call, GRPC_STATUS_UNKNOWN, ERR_MISSING_LEADER);
        return;
    }
    if (!recipe_auth(call, lk->key.data, lk->key.len, true, true))
        return;
    struct simple_op *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        server_reply_error(call, -ENOMEM);
        return;
    }
    op->r.s = s;
    op->r.call = call;
    op->r.refs = 1;
    op->r.free_op = free_simple;
    op->proclaim = proclaim;
    qcall_set_data(call, op);
    guarded_txn(&op->r, lk->key.data, lk->key.len, lk->rev, proclaim, value, lk->lease,
                on_guarded_done);
}

static void on_proclaim(qcall *call, const uint8_t *msg, size_t len)
{
    V3electionpb__ProclaimRequest *req = (V3electionpb__ProclaimRequest *)server_unpack(
        call, &v3electionpb__proclaim_request__descriptor, msg, len);
    if (req == NULL)
        return;
    start_guarded(call, req->leader, &req->value, true);
    v3electionpb__proclaim_request__free_unpacked(req, NULL);
}

static void on_resign(qcall *call, const uint8_t *msg, size_t len)
{
    V3electionpb__ResignRequest *req = (V3electionpb__ResignRequest *)server_unpack(
        call, &v3electionpb__resign_request__descriptor, msg, len);
    if (req == NULL)
        return;
    start_guarded(call, req->leader, NULL, false);
    v3electionpb__resign_request__free_unpacked(req, NULL);
}

static void on_simple_close(qcall *call)
{
    struct recipe *r = qcall_get_data(call);
    if (r == NULL)
        return;
    r->call = NULL;
    recipe_unref(r);
}

/* ---- Leader ---- */

static void send_leader(struct server *s, qcall *call, const Etcdserverpb__ResponseHeader *h,
                        Mvccpb__KeyValue *kv, bool stream)
{
    Etcdserverpb__ResponseHeader hdr;
    recipe_fill_header(s, &hdr, h);
    V3electionpb__LeaderResponse resp = V3ELECTIONPB__LEADER_RESPONSE__INIT;
    resp.header = &hdr;
    resp.kv = kv;
    if (stream)
        server_send(s, call, &resp.base);
    else
        server_reply(s, call, &resp.base);
}

static void on_leader(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    V3electionpb__LeaderRequest *req = (V3electionpb__LeaderRequest *)server_unpack(
        call, &v3electionpb__leader_request__descriptor, msg, len);
    if (req == NULL)
        return;
    size_t plen;
    uint8_t *pfx = make_pfx(&req->name, &plen);
    v3electionpb__leader_request__free_unpacked(req, NULL);
    if (pfx != NULL && !recipe_auth(call, pfx, plen, false, false)) {
        free(pfx);
        return;
    }
    struct arena a = {0};
    Mvccpb__KeyValue *kv = NULL;
    Etcdserverpb__ResponseHeader *h = NULL;
    int rv = pfx ? recipe_read_edge(s, pfx, plen, false, 0, &a, &kv, &h) : -ENOMEM;
    if (rv != 0)
        server_reply_error(call, rv);
    else if (kv == NULL)
        qcall_finish(call, GRPC_STATUS_UNKNOWN, ERR_NO_LEADER);
    else
        send_leader(s, call, h, kv, false);
    arena_free(&a);
    free(pfx);
}

/* ---- Observe: the leader, then its changes, then its successors ---- */

struct obs_op {
    struct recipe r;
    uint8_t *pfx;
    size_t pfx_len;
    watcher *w;
};

static void free_obs(struct recipe *r)
{
    struct obs_op *op = (struct obs_op *)r;
    arena_free(&r->a);
    free(op->pfx);
    free(op);
}

static void obs_round(struct obs_op *op);

static int obs_stop_watch(struct obs_op *op)
{
    if (op->w != NULL) {
        watcher_cancel(op->w);
        op->w = NULL;
    }
    return 0;
}

/* watching the leader's key: puts are new values, a delete ends its reign */
static int obs_on_leader_key(watcher *w, const struct watch_event *evs, size_t n, int64_t rev,
                             void *arg)
{
    struct obs_op *op = arg;
    (void)w;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].type == MVCC_EVENT_DELETE) {
            obs_stop_watch(op);
            obs_round(op);
            return 0;
        }
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        h.revision = rev;
        Mvccpb__KeyValue kv;
        server_kv_to_pb(&kv, &evs[i].kv);
        send_leader(op->r.s, op->r.call, &h, &kv, true);
    }
    return 0;
}

static void obs_on_compacted(watcher *w, int64_t compact_rev, void *arg)
{
    struct obs_op *op = arg;
    (void)w;
    (void)compact_rev;
    op->w = NULL;
    obs_round(op); /* look again from the present */
}

static const struct watcher_ops leader_key_ops = {obs_on_leader_key, obs_on_compacted, NULL};

static void obs_follow(struct obs_op *op, const uint8_t *key, size_t len, int64_t from)
{
    if (watcher_new(op->r.s->watches, key, len, NULL, 0, from, 0, &leader_key_ops, op, &op->w) !=
        0) {
        op->w = NULL;
        recipe_finish(&op->r, -ENOMEM, NULL);
        return;
    }
    server_watch_kick(op->r.s);
}

/* no leader yet: the first put under the prefix makes one */
static int obs_on_prefix(watcher *w, const struct watch_event *evs, size_t n, int64_t rev,
                         void *arg)
{
    struct obs_op *op = arg;
    (void)w;
    (void)rev;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].type != MVCC_EVENT_PUT)
            continue;
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        h.revision = evs[i].kv.mod_revision;
        Mvccpb__KeyValue kv;
        server_kv_to_pb(&kv, &evs[i].kv);
        send_leader(op->r.s, op->r.call, &h, &kv, true);
        /* copy the key: the event goes away with this callback */
        uint8_t *key = arena_dup(&op->r.a, evs[i].kv.key, evs[i].kv.key_len);
        size_t klen = evs[i].kv.key_len;
        int64_t from = evs[i].kv.mod_revision + 1;
        obs_stop_watch(op);
        if (key == NULL)
            recipe_finish(&op->r, -ENOMEM, NULL);
        else
            obs_follow(op, key, klen, from);
        return 0;
    }
    return 0;
}

static const struct watcher_ops prefix_ops = {obs_on_prefix, obs_on_compacted, NULL};

static void obs_round(struct obs_op *op)
{
    if (op->r.call == NULL)
        return;
    arena_reset(&op->r.a);
    Mvccpb__KeyValue *kv;
    Etcdserverpb__ResponseHeader *h;
    int rv = recipe_read_edge(op->r.s, op->pfx, op->pfx_len, false, 0, &op->r.a, &kv, &h);
    if (rv != 0) {
        recipe_finish(&op->r, rv, NULL);
        return;
    }
    if (kv != NULL) {
        send_leader(op->r.s, op->r.call, h, kv, true);
        obs_follow(op, kv->key.data, kv->key.len, h->revision + 1);
        return;
    }
    uint8_t *end = arena_alloc(&op->r.a, op->pfx_len);
    if (end == NULL) {
        recipe_finish(&op->r, -ENOMEM, NULL);
        return;
    }
    size_t elen = recipe_prefix_end(op->pfx, op->pfx_len, end);
    if (watcher_new(op->r.s->watches, op->pfx, op->pfx_len, end, elen, h->revision, 0, &prefix_ops,
                    op, &op->w) != 0) {
        op->w = NULL;
        recipe_finish(&op->r, -ENOMEM, NULL);
        return;
    }
    server_watch_kick(op->r.s);
}

static void on_observe(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    V3electionpb__LeaderRequest *req = (V3electionpb__LeaderRequest *)server_unpack(
        call, &v3electionpb__leader_request__descriptor, msg, len);
    if (req == NULL)
        return;
    struct obs_op *op = calloc(1, sizeof(*op));
    if (op == NULL || (op->pfx = make_pfx(&req->name, &op->pfx_len)) == NULL) {
        free(op);
        v3electionpb__leader_request__free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    v3electionpb__leader_request__free_unpacked(req, NULL);
    if (!recipe_auth(call, op->pfx, op->pfx_len, false, false)) {
        free(op->pfx);
        free(op);
        return;
    }
    op->r.s = s;
    op->r.call = call;
    op->r.refs = 1;
    op->r.free_op = free_obs;
    qcall_set_data(call, op);
    obs_round(op);
}

static void on_observe_close(qcall *call)
{
    struct obs_op *op = qcall_get_data(call);
    if (op == NULL)
        return;
    op->r.call = NULL;
    obs_stop_watch(op);
    recipe_unref(&op->r);
}

const struct qcall_method server_election_methods[] = {
    {"/v3electionpb.Election/Campaign", QCALL_UNARY, on_campaign, NULL, on_campaign_close},
    {"/v3electionpb.Election/Proclaim", QCALL_UNARY, on_proclaim, NULL, on_simple_close},
    {"/v3electionpb.Election/Leader", QCALL_UNARY, on_leader, NULL, NULL},
    {"/v3electionpb.Election/Observe", QCALL_SERVER_STREAMING, on_observe, NULL, on_observe_close},
    {"/v3electionpb.Election/Resign", QCALL_UNARY, on_resign, NULL, on_simple_close},
};
const size_t server_election_methods_n =
    sizeof(server_election_methods) / sizeof(server_election_methods[0]);
