/* server/recipe.c: see recipe.h. */
#include "server/recipe.h"

#include <stdlib.h>
#include <string.h>

#include "apply/apply.h"
#include "base/err.h"

void recipe_ref(struct recipe *r)
{
    r->refs++;
}

void recipe_unref(struct recipe *r)
{
    if (--r->refs == 0)
        r->free_op(r);
}

struct txn_wait {
    struct recipe *r;
    recipe_txn_fn fn;
};

static void txn_done(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    struct txn_wait *tw = arg;
    (void)s;
    Etcdserverpb__TxnResponse *t = NULL;
    if (err == 0) {
        t = etcdserverpb__txn_response__unpack(NULL, len, resp);
        if (t == NULL)
            err = -ENOMEM;
    }
    tw->fn(tw->r, err, t);
    if (t != NULL)
        etcdserverpb__txn_response__free_unpacked(t, NULL);
    recipe_unref(tw->r);
    free(tw);
}

void recipe_txn(struct recipe *r, const Etcdserverpb__TxnRequest *t, recipe_txn_fn fn)
{
    struct txn_wait *tw = malloc(sizeof(*tw));
    if (tw == NULL) {
        fn(r, -ENOMEM, NULL);
        return;
    }
    tw->r = r;
    tw->fn = fn;
    recipe_ref(r);
    server_propose_cb(r->s, ENTRY_TXN, &t->base, txn_done, tw);
}

struct grant_wait {
    struct recipe *r;
    recipe_grant_fn fn;
};

static void grant_done(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    struct grant_wait *gw = arg;
    (void)s;
    int64_t id = 0;
    if (err == 0) {
        Etcdserverpb__LeaseGrantResponse *g =
            etcdserverpb__lease_grant_response__unpack(NULL, len, resp);
        if (g == NULL) {
            err = -ENOMEM;
        } else {
            id = g->id;
            etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
        }
    }
    gw->fn(gw->r, err, id);
    recipe_unref(gw->r);
    free(gw);
}

void recipe_grant(struct recipe *r, int64_t ttl, recipe_grant_fn fn)
{
    struct grant_wait *gw = malloc(sizeof(*gw));
    if (gw == NULL) {
        fn(r, -ENOMEM, 0);
        return;
    }
    gw->r = r;
    gw->fn = fn;
    recipe_ref(r);
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = ttl;
    while (g.id == 0)
        g.id = (int64_t)(server_next_id(r->s) & ((1ull << 63) - 1));
    server_propose_cb(r->s, ENTRY_LEASE_GRANT, &g.base, grant_done, gw);
}

bool recipe_auth(qcall *call, const uint8_t *pfx, size_t len, bool write, bool exact)
{
    struct server *s = server_of(call);
    /* the keys it would write are inside the ZooKeeper face's prefix, which
     * the etcd face only reads (kv_service.c refuses a Put there the same) */
    if (write && apply_reserved_span(pfx, len, NULL, 0, NULL) == APPLY_RESERVED_INSIDE) {
        server_reply_error(call, QERR_RESERVED_KEY);
        return false;
    }
    if (s->auth == NULL || !auth_enabled(s->auth))
        return true;
    struct auth_info ai;
    char buf[AUTH_NAME_MAX];
    uint8_t *end = exact ? NULL : malloc(len + 1);
    if (!exact && end == NULL) {
        server_reply_error(call, -ENOMEM);
        return false;
    }
    size_t elen = exact ? 0 : recipe_prefix_end(pfx, len, end);
    int rv = server_call_identity(s, call, &ai, buf, sizeof(buf));
    if (rv == 0)
        rv = auth_check(s->auth, &ai, pfx, len, end, elen, AUTH_READ);
    if (rv == 0 && write)
        rv = auth_check(s->auth, &ai, pfx, len, end, elen, AUTH_WRITE);
    free(end);
    if (rv != 0) {
        qcall_finish(call, GRPC_STATUS_UNKNOWN, q_strerror(rv));
        return false;
    }
    return true;
}

size_t recipe_prefix_end(const uint8_t *p, size_t n, uint8_t *out)
{
    memcpy(out, p, n);
    for (size_t i = n; i > 0; i--) {
        if (out[i - 1] < 0xff) {
            out[i - 1]++;
            return i;
        }
    }
    out[0] = 0;
    return 1;
}

int recipe_read_edge(struct server *s, const uint8_t *pfx, size_t len, bool last,
                     int64_t max_create, struct arena *a, Mvccpb__KeyValue **kv,
                     Etcdserverpb__ResponseHeader **hdr)
{
    uint8_t *end = arena_alloc(a, len + 1);
    if (end == NULL)
        return -ENOMEM;
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = (ProtobufCBinaryData){len, (uint8_t *)pfx};
    r.range_end = (ProtobufCBinaryData){recipe_prefix_end(pfx, len, end), end};
    r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    r.sort_order = last ? ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND
                        : ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    r.limit = 1;
    if (last)
        r.max_create_revision = max_create;
    mvcc_read *rd;
    int rv = mvcc_read_begin(s->kv, &rd);
    if (rv != 0)
        return rv;
    Etcdserverpb__RangeResponse *resp = NULL;
    struct apply_env env = s->env;
    env.read_budget = 0; /* a recipe's read is answered on the core, whole */
    rv = apply_range(&env, rd, &r, a, &resp);
    mvcc_read_end(rd);
    if (rv != 0)
        return rv;
    *kv = resp->n_kvs ? resp->kvs[0] : NULL;
    *hdr = resp->header;
    return 0;
}

static int wait_deliver(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg)
{
    struct recipe *r = arg;
    (void)rev;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].type == MVCC_EVENT_DELETE) {
            watcher_cancel(w);
            r->w = NULL;
            recipe_fn fn = r->on_deleted;
            fn(r, 0);
            recipe_unref(r);
            return 0;
        }
    }
    return 0;
}

static void wait_compacted(watcher *w, int64_t compact_rev, void *arg)
{
    struct recipe *r = arg;
    (void)w;
    (void)compact_rev;
    r->w = NULL;
    r->on_deleted(r, QERR_COMPACTED);
    recipe_unref(r);
}

static const struct watcher_ops wait_ops = {wait_deliver, wait_compacted, NULL};

void recipe_wait_delete(struct recipe *r, const uint8_t *key, size_t len, int64_t from,
                        recipe_fn fn)
{
    r->on_deleted = fn;
    recipe_ref(r);
    int rv = watcher_new(r->s->watches, key, len, NULL, 0, from, WATCH_FILTER_NOPUT, &wait_ops, r,
                         &r->w);
    if (rv != 0) {
        r->w = NULL;
        fn(r, rv);
        recipe_unref(r);
        return;
    }
    server_watch_kick(r->s);
}

static void wait_next(struct recipe *r);

static void on_wd_deleted(struct recipe *r, int err)
{
    if (r->call == NULL)
        return;
    if (err != 0)
        r->wd_done(r, err, NULL);
    else
        wait_next(r);
}

static void wait_next(struct recipe *r)
{
    arena_reset(&r->a);
    Mvccpb__KeyValue *kv;
    Etcdserverpb__ResponseHeader *h;
    int rv = recipe_read_edge(r->s, r->wd_pfx, r->wd_len, true, r->wd_max, &r->a, &kv, &h);
    if (rv != 0)
        r->wd_done(r, rv, NULL);
    else if (kv == NULL)
        r->wd_done(r, 0, h);
    else
        recipe_wait_delete(r, kv->key.data, kv->key.len, h->revision, on_wd_deleted);
}

void recipe_wait_deletes(struct recipe *r, const uint8_t *pfx, size_t len, int64_t max_create,
                         recipe_hdr_fn fn)
{
    r->wd_pfx = pfx;
    r->wd_len = len;
    r->wd_max = max_create;
    r->wd_done = fn;
    wait_next(r);
}

void recipe_stop_wait(struct recipe *r)
{
    if (r->w == NULL)
        return;
    watcher_cancel(r->w);
    r->w = NULL;
    recipe_unref(r);
}

void recipe_cmp_create(Etcdserverpb__Compare *c, const uint8_t *key, size_t len, int64_t rev)
{
    etcdserverpb__compare__init(c);
    c->key = (ProtobufCBinaryData){len, (uint8_t *)key};
    c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    c->create_revision = rev;
}

void recipe_op_put(Etcdserverpb__RequestOp *op, Etcdserverpb__PutRequest *p, const uint8_t *key,
                   size_t len, const uint8_t *val, size_t vlen, int64_t lease)
{
    etcdserverpb__request_op__init(op);
    etcdserverpb__put_request__init(p);
    p->key = (ProtobufCBinaryData){len, (uint8_t *)key};
    p->value = (ProtobufCBinaryData){vlen, (uint8_t *)val};
    p->lease = lease;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op->request_put = p;
}

void recipe_op_get(Etcdserverpb__RequestOp *op, Etcdserverpb__RangeRequest *g, const uint8_t *key,
                   size_t len)
{
    etcdserverpb__request_op__init(op);
    etcdserverpb__range_request__init(g);
    g->key = (ProtobufCBinaryData){len, (uint8_t *)key};
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op->request_range = g;
}

void recipe_op_delete(Etcdserverpb__RequestOp *op, Etcdserverpb__DeleteRangeRequest *d,
                      const uint8_t *key, size_t len)
{
    etcdserverpb__request_op__init(op);
    etcdserverpb__delete_range_request__init(d);
    d->key = (ProtobufCBinaryData){len, (uint8_t *)key};
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op->request_delete_range = d;
}

void recipe_fill_header(struct server *s, Etcdserverpb__ResponseHeader *out,
                        const Etcdserverpb__ResponseHeader *h)
{
    etcdserverpb__response_header__init(out);
    out->revision = h ? h->revision : 0;
    server_fill_header(s, out);
}

void recipe_finish(struct recipe *r, int err, const char *text)
{
    /* etcd's Lock and Election servers return their internal client's
     * errors as plain Go errors: gRPC status UNKNOWN with the text */
    if (r->call != NULL)
        qcall_finish(r->call, GRPC_STATUS_UNKNOWN, text ? text : q_strerror(err));
}
