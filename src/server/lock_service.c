/* server/lock_service.c: /v3lockpb.Lock/ — Lock and Unlock, as etcd's
 * v3lock server runs clientv3/concurrency's Mutex against itself:
 *
 *   key = name + "/" + hex(lease); one txn: if the key does not exist, put
 *   it (empty value, with the lease) else read it; either way read the
 *   prefix's first-created key. The lock is ours when nobody created a key
 *   under the prefix before us; otherwise wait until the newest key created
 *   before ours is deleted, and look again (waitDeletes).
 *
 * The same keys as `etcdctl lock` and every etcd client's Mutex, so all of
 * them exclude each other. The lock key's create revision is a fencing
 * token: it only grows, and a write guarded by a Txn comparing
 * create_revision(key) == token cannot happen after the lock was lost
 * (docs/locks.md). A client that leaves while waiting gets its key deleted,
 * as Mutex.Lock's cleanup does; a lease of 0 means a fresh 60 s lease, as a
 * concurrency.Session makes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/recipe.h"

struct lock_op {
    struct recipe r;
    int64_t lease;
    uint8_t *pfx; /* name "/" */
    size_t pfx_len;
    uint8_t *key; /* pfx hex(lease) */
    size_t key_len;
    int64_t my_rev;
    bool txn_sent, acquired, failed;
};

static void free_lock(struct recipe *r)
{
    struct lock_op *op = (struct lock_op *)r;
    arena_free(&op->r.a);
    free(op->pfx);
    free(op->key);
    free(op);
}

static void fail(struct lock_op *op, int err)
{
    op->failed = true;
    recipe_finish(&op->r, err, NULL);
}

static void acquired(struct lock_op *op, const Etcdserverpb__ResponseHeader *h)
{
    op->acquired = true;
    if (op->r.call == NULL)
        return; /* held until its lease ends, as etcd's orphaned session */
    Etcdserverpb__ResponseHeader hdr;
    recipe_fill_header(op->r.s, &hdr, h);
    V3lockpb__LockResponse resp = V3LOCKPB__LOCK_RESPONSE__INIT;
    resp.header = &hdr;
    resp.key = (ProtobufCBinaryData){op->key_len, op->key};
    server_reply(op->r.s, op->r.call, &resp.base);
}

static void on_no_older(struct recipe *r, int err, const Etcdserverpb__ResponseHeader *h)
{
    struct lock_op *op = (struct lock_op *)r;
    if (err != 0)
        fail(op, err);
    else
        acquired(op, h);
}

static void on_txn(struct recipe *r, int err, Etcdserverpb__TxnResponse *t)
{
    struct lock_op *op = (struct lock_op *)r;
    if (err != 0) {
        fail(op, err);
        return;
    }
    op->my_rev = t->header->revision;
    if (!t->succeeded)
        op->my_rev = t->responses[0]->response_range->kvs[0]->create_revision;
    Etcdserverpb__RangeResponse *owner = t->responses[1]->response_range;
    if (owner->n_kvs == 0 || owner->kvs[0]->create_revision == op->my_rev) {
        acquired(op, t->header);
        return;
    }
    if (r->call != NULL)
        recipe_wait_deletes(r, op->pfx, op->pfx_len, op->my_rev - 1, on_no_older);
}

static void send_txn(struct lock_op *op)
{
    char hex[24];
    int n = snprintf(hex, sizeof(hex), "%llx", (unsigned long long)op->lease);
    op->key = malloc(op->pfx_len + (size_t)n);
    if (op->key == NULL) {
        fail(op, -ENOMEM);
        return;
    }
    memcpy(op->key, op->pfx, op->pfx_len);
    memcpy(op->key + op->pfx_len, hex, (size_t)n);
    op->key_len = op->pfx_len + (size_t)n;

    uint8_t end[512];
    uint8_t *endp = op->pfx_len < sizeof(end) ? end : arena_alloc(&op->r.a, op->pfx_len);
    if (endp == NULL) {
        fail(op, -ENOMEM);
        return;
    }
    Etcdserverpb__Compare cmp;
    recipe_cmp_create(&cmp, op->key, op->key_len, 0);
    Etcdserverpb__RequestOp put_op, get_op, owner_op, owner_op2;
    Etcdserverpb__PutRequest put;
    Etcdserverpb__RangeRequest get, owner, owner2;
    recipe_op_put(&put_op, &put, op->key, op->key_len, NULL, 0, op->lease);
    recipe_op_get(&get_op, &get, op->key, op->key_len);
    recipe_op_get(&owner_op, &owner, op->pfx, op->pfx_len);
    owner.range_end = (ProtobufCBinaryData){recipe_prefix_end(op->pfx, op->pfx_len, endp), endp};
    owner.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    owner.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    owner.limit = 1;
    owner_op2 = owner_op;
    owner2 = owner;
    owner_op2.request_range = &owner2;
    Etcdserverpb__Compare *cmps[1] = {&cmp};
    Etcdserverpb__RequestOp *then[2] = {&put_op, &owner_op};
    Etcdserverpb__RequestOp *els[2] = {&get_op, &owner_op2};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cmps;
    t.n_compare = 1;
    t.success = then;
    t.n_success = 2;
    t.failure = els;
    t.n_failure = 2;
    op->txn_sent = true;
    recipe_txn(&op->r, &t, on_txn);
}

static void on_granted(struct recipe *r, int err, int64_t id)
{
    struct lock_op *op = (struct lock_op *)r;
    if (err != 0) {
        fail(op, err);
        return;
    }
    op->lease = id;
    if (r->call != NULL)
        send_txn(op);
}

static void on_lock(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    V3lockpb__LockRequest *req =
        (V3lockpb__LockRequest *)server_unpack(call, &v3lockpb__lock_request__descriptor, msg, len);
    if (req == NULL)
        return;
    struct lock_op *op = calloc(1, sizeof(*op));
    if (op != NULL)
        op->pfx = malloc(req->name.len + 1);
    if (op == NULL || op->pfx == NULL) {
        free(op);
        v3lockpb__lock_request__free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    op->r.s = s;
    op->r.call = call;
    op->r.refs = 1; /* the call's, dropped in on_close */
    op->r.free_op = free_lock;
    if (req->name.len)
        memcpy(op->pfx, req->name.data, req->name.len);
    op->pfx[req->name.len] = '/';
    op->pfx_len = req->name.len + 1;
    op->lease = req->lease;
    v3lockpb__lock_request__free_unpacked(req, NULL);
    if (!recipe_auth(call, (const uint8_t *)op->pfx, op->pfx_len, true, false)) {
        free(op->pfx);
        free(op);
        return;
    }
    qcall_set_data(call, op);
    if (op->lease == 0)
        recipe_grant(&op->r, 60, on_granted);
    else
        send_txn(op);
}

static void on_lock_close(qcall *call)
{
    struct lock_op *op = qcall_get_data(call);
    if (op == NULL)
        return;
    op->r.call = NULL;
    recipe_stop_wait(&op->r);
    if (op->txn_sent && !op->acquired && !op->failed) {
        /* Mutex.Lock's cleanup: our key goes; proposed after our txn, so
         * it applies after it whatever that txn still does */
        Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
        d.key = (ProtobufCBinaryData){op->key_len, op->key};
        server_propose_internal(op->r.s, ENTRY_DELETE_RANGE, &d.base);
    }
    recipe_unref(&op->r);
}

/* Unlock deletes the key and answers with the delete's header. */
static void on_unlocked(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    struct recipe *r = arg;
    if (r->call != NULL) {
        Etcdserverpb__DeleteRangeResponse *d = NULL;
        if (err == 0 && (d = etcdserverpb__delete_range_response__unpack(NULL, len, resp)) == NULL)
            err = -ENOMEM;
        if (err != 0) {
            recipe_finish(r, err, NULL);
        } else {
            Etcdserverpb__ResponseHeader hdr;
            recipe_fill_header(s, &hdr, d->header);
            V3lockpb__UnlockResponse u = V3LOCKPB__UNLOCK_RESPONSE__INIT;
            u.header = &hdr;
            server_reply(s, r->call, &u.base);
        }
        if (d != NULL)
            etcdserverpb__delete_range_response__free_unpacked(d, NULL);
    }
    recipe_unref(r);
}

static void free_plain(struct recipe *r)
{
    free(r);
}

static void on_unlock(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    V3lockpb__UnlockRequest *req = (V3lockpb__UnlockRequest *)server_unpack(
        call, &v3lockpb__unlock_request__descriptor, msg, len);
    if (req == NULL)
        return;
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = req->key;
    int rv = apply_check_delete_range(&d);
    if (rv == 0 && !recipe_auth(call, req->key.data, req->key.len, true, true)) {
        v3lockpb__unlock_request__free_unpacked(req, NULL);
        return;
    }
    if (rv != 0) {
        v3lockpb__unlock_request__free_unpacked(req, NULL);
        qcall_finish(call, GRPC_STATUS_UNKNOWN, q_strerror(rv)); /* as etcd */
        return;
    }
    struct recipe *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        v3lockpb__unlock_request__free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    r->s = s;
    r->call = call;
    r->refs = 2; /* the call and the proposal */
    r->free_op = free_plain;
    qcall_set_data(call, r);
    server_propose_cb(s, ENTRY_DELETE_RANGE, &d.base, on_unlocked, r);
    v3lockpb__unlock_request__free_unpacked(req, NULL);
}

static void on_plain_close(qcall *call)
{
    struct recipe *r = qcall_get_data(call);
    if (r == NULL)
        return;
    r->call = NULL;
    recipe_unref(r);
}

const struct qcall_method server_lock_methods[] = {
    {"/v3lockpb.Lock/Lock", QCALL_UNARY, on_lock, NULL, on_lock_close},
    {"/v3lockpb.Lock/Unlock", QCALL_UNARY, on_unlock, NULL, on_plain_close},
};
const size_t server_lock_methods_n = sizeof(server_lock_methods) / sizeof(server_lock_methods[0]);
