/* http/v2_write.c: the v2 writes as v3 txns (v2.c has the design).
 *
 * Each operation is one KV/Txn, atomic as etcd's STM makes set, create
 * and update (where etcd retries an STM, the txn's compares check what it
 * read, and the failure branch reads what the error needs). Missing
 * parent directories are made by nested txns ("if the marker is missing,
 * put it"). A ttl first grants the key's lease (Lease/LeaseGrant). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/v2_req.h"

#define NONE ((ProtobufCBinaryData){0, NULL})
#define VERSION ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION
#define MOD ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD
#define VALUE ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE
#define EQ ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL
#define GT ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER
#define POST_ATTEMPTS 16
#define MAX_DEPTH 63 /* etcd's maxPathDepth: a recursive delete's levels */
#define MAX_PARENTS 256 /* a set, create or POST makes its parents in one txn */

static ProtobufCBinaryData key(struct v2q *q, const char *p, size_t n, bool dir)
{
    return v2q_key(q, p, n, 0, dir);
}

static ProtobufCBinaryData val(struct v2q *q)
{
    return (ProtobufCBinaryData){q->value_len, (uint8_t *)q->value};
}

/* ancestors: the lengths of the store path's parents, nearest first (the
 * root excluded); *n gets their number. */
static size_t *ancestors(struct v2q *q, const char *p, size_t len, size_t *n)
{
    size_t depth = 0;
    for (size_t i = 0; i < len; i++)
        depth += p[i] == '/';
    size_t *out = arena_alloc(&q->a, (depth + 1) * sizeof(*out));
    *n = 0;
    if (out == NULL) {
        q->oom = true;
        return NULL;
    }
    for (size_t l = v2q_parent(p, len); l > 0; l = v2q_parent(p, l))
        out[(*n)++] = l;
    return out;
}

/* make_dirs adds to |t|'s success a nested txn per ancestor that puts its
 * marker if missing (etcd's set and create make them with value ""). */
static void make_dirs(struct v2q *q, Etcdserverpb__TxnRequest *t, const char *p, const size_t *al,
                      size_t na)
{
    for (size_t i = 0; i < na; i++) {
        Etcdserverpb__TxnRequest *m = v2q_txn(q, 1, 1, 0);
        ProtobufCBinaryData kd = key(q, p, al[i], true);
        v2q_cmp(q, m, kd, NONE, VERSION, EQ, 0, NONE);
        v2q_then(m, v2q_put(q, kd, NONE, 0, false, false));
        v2q_then(t, v2q_optxn(q, m));
    }
}

static Etcdserverpb__TxnResponse *txn_result(struct v2q *q, int status, const char *msg,
                                             const uint8_t *resp, size_t len)
{
    if (status != 0) {
        v2q_grpc_error(q, msg);
        return NULL;
    }
    Etcdserverpb__TxnResponse *t = etcdserverpb__txn_response__unpack(NULL, len, resp);
    if (t == NULL || t->header == NULL) {
        if (t != NULL)
            etcdserverpb__txn_response__free_unpacked(t, NULL);
        v2q_grpc_error(q, "bad txn response");
        return NULL;
    }
    q->index = v2_rev(t->header->revision);
    return t;
}

static const Etcdserverpb__ResponseOp *resp_op(const Etcdserverpb__TxnResponse *t, size_t i,
                                               int kind)
{
    if (i >= t->n_responses || (int)t->responses[i]->response_case != kind)
        return NULL;
    return t->responses[i];
}

/* found: the i-th response is a range that found something */
static bool found(const Etcdserverpb__TxnResponse *t, size_t i)
{
    const Etcdserverpb__ResponseOp *r =
        resp_op(t, i, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
    return r != NULL && r->response_range->n_kvs > 0;
}

static const Mvccpb__KeyValue *put_prev(const Etcdserverpb__TxnResponse *t, size_t i)
{
    const Etcdserverpb__ResponseOp *r =
        resp_op(t, i, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT);
    const Mvccpb__KeyValue *kv = r ? r->response_put->prev_kv : NULL;
    return kv != NULL && kv->create_revision > 0 ? kv : NULL;
}

static const Mvccpb__KeyValue *del_prev(const Etcdserverpb__TxnResponse *t, size_t i)
{
    const Etcdserverpb__ResponseOp *r =
        resp_op(t, i, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE);
    return r && r->response_delete_range->n_prev_kvs > 0 ? r->response_delete_range->prev_kvs[0]
                                                         : NULL;
}

/* answer builds the event: node |path| with |value| (NULL: none), dir,
 * modifiedIndex = the txn's index, createdIndex from |prev| (else the
 * index), the key's new lease; prevNode from |prev|. */
static void answer(struct v2q *q, Etcdserverpb__TxnResponse *t, const char *action, int status,
                   const char *path, size_t plen, const uint8_t *value, size_t vlen, bool dir,
                   const Mvccpb__KeyValue *prev, bool node)
{
    q->written = true;
    struct v2_node *n = node ? v2_node_new(&q->a, path, plen) : NULL;
    struct v2_node *p = prev ? v2_node_from_kv(&q->a, q->pfx, prev) : NULL;
    if ((node && n == NULL) || (prev && p == NULL && q->oom)) {
        etcdserverpb__txn_response__free_unpacked(t, NULL);
        v2q_grpc_error(q, "out of memory");
        return;
    }
    if (n != NULL) {
        n->dir = dir;
        if (value != NULL) {
            n->value = arena_dup(&q->a, vlen ? value : (const uint8_t *)"", vlen);
            n->value_len = vlen;
        }
        n->modified = q->index;
        n->created = prev ? v2_rev(prev->create_revision) : q->index;
        n->lease = q->lease;
    }
    q->old_lease = prev ? prev->lease : 0;
    q->ev = (struct v2_event){action, n, p};
    q->status = status;
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    v2q_event(q);
}

static void error_free(struct v2q *q, Etcdserverpb__TxnResponse *t, int code)
{
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    v2q_path_error(q, code, q->index);
}

static void txn(struct v2q *q, Etcdserverpb__TxnRequest *t, v2q_cb cb)
{
    if (t == NULL || q->oom) {
        v2q_grpc_error(q, "out of memory");
        return;
    }
    v2q_call(q, "/etcdserverpb.KV/Txn", &t->base, cb);
}

/* ---- set, and a refresh of any PUT ---- */

static void on_set(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    size_t na;
    ancestors(q, q->path, q->path_len, &na);
    if (!t->succeeded) {
        for (size_t i = 0; i < na; i++)
            if (found(t, i)) {
                error_free(q, t, 104);
                return;
            }
        error_free(q, t, q->dir ? 104 : found(t, na + 1) ? 102 : 104);
        return;
    }
    const Mvccpb__KeyValue *prev = put_prev(t, na);
    answer(q, t, "set", prev ? 200 : 201, q->path, q->path_len,
           q->dir ? NULL : (const uint8_t *)q->value, q->value_len, q->dir, prev, true);
}

static void do_set(struct v2q *q)
{
    size_t na;
    const size_t *al = ancestors(q, q->path, q->path_len, &na);
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, na + 1, na + 2, na + 2);
    for (size_t i = 0; i < na && al != NULL; i++)
        v2q_cmp(q, t, key(q, q->path, al[i], false), NONE, VERSION, EQ, 0, NONE);
    v2q_cmp(q, t, q->dir ? k : kd, NONE, VERSION, EQ, 0, NONE);
    if (al != NULL)
        make_dirs(q, t, q->path, al, na);
    v2q_then(t, v2q_put(q, q->dir ? kd : k, val(q), q->lease, true, false));
    v2q_then(t, v2q_act(q, "set"));
    for (size_t i = 0; i < na && al != NULL; i++)
        v2q_else(t, v2q_range(q, key(q, q->path, al[i], false), NONE, 1));
    v2q_else(t, v2q_range(q, k, NONE, 1));
    v2q_else(t, v2q_range(q, kd, NONE, 1));
    txn(q, t, on_set);
}

/* a refresh of a set or an update (a compare-and-swap's is do_cas's):
 * the target keeps its value and moves to the new lease; act "refresh" */
static void on_refresh(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    bool target_dir = q->dir;
    if (!t->succeeded) {
        int code;
        if (q->op == V2_UPDATE)
            code = 102; /* v2v3's update says 102 for everything */
        else if (target_dir)
            code = found(t, 0) ? 104 : 100;
        else
            code = found(t, 1) ? 102 : 100;
        error_free(q, t, code);
        return;
    }
    const Mvccpb__KeyValue *prev = put_prev(t, 0);
    const char *action = q->op == V2_UPDATE ? "update" : "set";
    const uint8_t *v = NULL;
    if (!target_dir)
        v = prev && prev->value.data ? prev->value.data : (const uint8_t *)"";
    answer(q, t, action, 200, q->path, q->path_len, v, prev ? prev->value.len : 0, target_dir, prev,
           true);
}

static void do_refresh(struct v2q *q)
{
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    bool target_dir = q->dir;
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 2, 2, 2);
    if (q->op == V2_UPDATE && !target_dir)
        v2q_cmp(q, t, kd, NONE, VERSION, EQ, 0, NONE);
    v2q_cmp(q, t, target_dir ? kd : k, NONE, VERSION, GT, 0, NONE);
    v2q_then(t, v2q_put(q, target_dir ? kd : k, NONE, q->lease, true, true));
    v2q_then(t, v2q_act(q, "refresh"));
    v2q_else(t, v2q_range(q, k, NONE, 1));
    v2q_else(t, v2q_range(q, kd, NONE, 1));
    txn(q, t, on_refresh);
}

/* ---- create (PUT prevExist=false) ---- */

static void on_create(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    size_t na;
    ancestors(q, q->path, q->path_len, &na);
    if (!t->succeeded) {
        error_free(q, t, found(t, 0) || found(t, 1) ? 105 : 104);
        return;
    }
    answer(q, t, "create", 201, q->path, q->path_len, q->dir ? NULL : (const uint8_t *)q->value,
           q->value_len, q->dir, NULL, true);
}

static void do_create(struct v2q *q)
{
    size_t na;
    const size_t *al = ancestors(q, q->path, q->path_len, &na);
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, na + 2, na + 2, na + 2);
    v2q_cmp(q, t, k, NONE, VERSION, EQ, 0, NONE);
    v2q_cmp(q, t, kd, NONE, VERSION, EQ, 0, NONE);
    for (size_t i = 0; i < na && al != NULL; i++)
        v2q_cmp(q, t, key(q, q->path, al[i], false), NONE, VERSION, EQ, 0, NONE);
    if (al != NULL)
        make_dirs(q, t, q->path, al, na);
    v2q_then(t, v2q_put(q, q->dir ? kd : k, val(q), q->lease, false, false));
    v2q_then(t, v2q_act(q, "create"));
    v2q_else(t, v2q_range(q, k, NONE, 1));
    v2q_else(t, v2q_range(q, kd, NONE, 1));
    for (size_t i = 0; i < na && al != NULL; i++)
        v2q_else(t, v2q_range(q, key(q, q->path, al[i], false), NONE, 1));
    txn(q, t, on_create);
}

/* ---- update (PUT prevExist=true) ---- */

static void on_update(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    if (!t->succeeded) {
        error_free(q, t, 102);
        return;
    }
    bool target_dir = q->dir && q->ttl_field;
    const Mvccpb__KeyValue *prev = put_prev(t, 0);
    answer(q, t, "update", 200, q->path, q->path_len, target_dir ? NULL : (const uint8_t *)q->value,
           q->value_len, target_dir, prev, true);
}

static void do_update(struct v2q *q)
{
    /* dir=true with a ttl: the directory's ttl ("ttl=": none) (v2v3
     * refuses updates of directories; the v2 docs set a directory's ttl
     * this way) */
    bool target_dir = q->dir && q->ttl_field;
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 2, 2, 0);
    if (!target_dir)
        v2q_cmp(q, t, kd, NONE, VERSION, EQ, 0, NONE);
    v2q_cmp(q, t, target_dir ? kd : k, NONE, VERSION, GT, 0, NONE);
    v2q_then(t, v2q_put(q, target_dir ? kd : k, val(q), q->lease, true, target_dir));
    v2q_then(t, v2q_act(q, "update"));
    txn(q, t, on_update);
}

/* ---- compare-and-swap, compare-and-delete ---- */

/* cas_fail: etcd's compareFail (its index test compares prevIndex with
 * the v3 mod revision itself, and the cause shows that revision). */
static void cas_fail(struct v2q *q, Etcdserverpb__TxnResponse *t)
{
    if (found(t, 1)) {
        error_free(q, t, 102);
        return;
    }
    if (!found(t, 0)) {
        error_free(q, t, 100);
        return;
    }
    const Mvccpb__KeyValue *kv = t->responses[0]->response_range->kvs[0];
    bool im = q->prev_index == 0 || kv->mod_revision == (int64_t)q->prev_index;
    bool vm = q->prev_value == NULL ||
              (kv->value.len == q->prev_value_len &&
               (kv->value.len == 0 || memcmp(kv->value.data, q->prev_value, kv->value.len) == 0));
    struct buf c = {0};
    char num[64];
    int rv = 0;
    if (!(vm && !im)) { /* the value part */
        rv = buf_append_byte(&c, '[') || buf_append(&c, q->prev_value, q->prev_value_len) ||
             buf_append(&c, " != ", 4) || buf_append(&c, kv->value.data, kv->value.len) ||
             buf_append_byte(&c, ']');
    }
    if (rv == 0 && !(im && !vm)) { /* the index part */
        int n = snprintf(num, sizeof(num), "%s[%" PRIu64 " != %" PRId64 "]", c.len ? " " : "",
                         q->prev_index, kv->mod_revision);
        rv = buf_append(&c, num, (size_t)n);
    }
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    if (rv == 0)
        v2q_error(q, 101, (const char *)c.data, c.len, q->index);
    else
        v2q_grpc_error(q, "out of memory");
    buf_free(&c);
}

static void on_cas(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    if (!t->succeeded) {
        cas_fail(q, t);
        return;
    }
    const Mvccpb__KeyValue *prev = q->op == V2_CAD ? del_prev(t, 0) : put_prev(t, 0);
    if (q->op == V2_CAD) {
        answer(q, t, "compareAndDelete", 200, q->path, q->path_len, NULL, 0, false, prev, true);
        return;
    }
    const uint8_t *v = (const uint8_t *)q->value;
    size_t vl = q->value_len;
    if (q->refresh && prev != NULL) {
        v = prev->value.data ? prev->value.data : (const uint8_t *)"";
        vl = prev->value.len;
    }
    answer(q, t, "compareAndSwap", 200, q->path, q->path_len, v, vl, false, prev, true);
}

static void do_cas(struct v2q *q)
{
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 3, 2, 2);
    v2q_cmp(q, t, k, NONE, VERSION, GT, 0, NONE);
    if (q->prev_index != 0) /* etcd's mkV3Rev */
        v2q_cmp(q, t, k, NONE, MOD, EQ, (int64_t)(q->prev_index + 1), NONE);
    if (q->prev_value != NULL)
        v2q_cmp(q, t, k, NONE, VALUE, EQ, 0,
                (ProtobufCBinaryData){q->prev_value_len, (uint8_t *)q->prev_value});
    if (q->op == V2_CAD) {
        v2q_then(t, v2q_del(q, k, NONE, true));
        v2q_then(t, v2q_act(q, "compareAndDelete"));
    } else {
        v2q_then(t, v2q_put(q, k, val(q), q->lease, true, q->refresh));
        v2q_then(t, v2q_act(q, q->refresh ? "refresh" : "compareAndSwap"));
    }
    v2q_else(t, v2q_range(q, k, NONE, 1));
    v2q_else(t, v2q_range(q, kd, NONE, 1));
    txn(q, t, on_cas);
}

/* ---- delete ---- */

static void on_delete(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    if (!q->dir && !q->recursive) {
        if (!t->succeeded) {
            error_free(q, t, 102);
            return;
        }
        const Mvccpb__KeyValue *prev = del_prev(t, 0);
        if (prev == NULL) { /* the act key was written all the same */
            error_free(q, t, 100);
            return;
        }
        answer(q, t, "delete", 200, q->path, q->path_len, NULL, 0, false, prev, true);
        return;
    }
    if (!t->succeeded) {
        error_free(q, t, q->recursive ? 105 : 108);
        return;
    }
    const Mvccpb__KeyValue *prev = del_prev(t, 0);
    if (prev == NULL) {
        error_free(q, t, 105);
        return;
    }
    answer(q, t, "delete", 200, q->path, q->path_len, NULL, 0, true, prev, false);
}

static void do_delete(struct v2q *q)
{
    ProtobufCBinaryData k = key(q, q->path, q->path_len, false);
    ProtobufCBinaryData kd = key(q, q->path, q->path_len, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 1, MAX_DEPTH + 1, 0);
    if (!q->dir && !q->recursive) {
        v2q_cmp(q, t, kd, NONE, VERSION, EQ, 0, NONE);
        v2q_then(t, v2q_del(q, k, NONE, true));
    } else if (!q->recursive) {
        ProtobufCBinaryData c = v2q_key(q, q->path, q->path_len, 1, true);
        v2q_cmp(q, t, c, v2q_prefix_end(q, c), VERSION, EQ, 0, NONE);
        v2q_then(t, v2q_del(q, kd, NONE, true));
    } else {
        /* etcd's recursive delete: every level below by prefix; with the
         * trailing "/" (etcd's v2v3 leaves it out and so deletes /dx's
         * children with /d's: data loss quorum does not copy) */
        v2q_cmp(q, t, kd, NONE, VERSION, GT, 0, NONE);
        v2q_then(t, v2q_del(q, kd, NONE, true));
        for (int i = 1; i < MAX_DEPTH; i++) {
            ProtobufCBinaryData c = v2q_key(q, q->path, q->path_len, i, true);
            v2q_then(t, v2q_del(q, c, v2q_prefix_end(q, c), false));
        }
    }
    v2q_then(t, v2q_act(q, "delete"));
    txn(q, t, on_delete);
}

/* ---- in-order keys (POST) ---- */

/* post_name: the name for the next in-order key: the revision the create
 * is expected to land after (its index), and above the newest name
 * already there. *ordered: that newest name is ours (20 digits), so the
 * create may require nothing at or above its own name. */
static uint64_t post_name(struct v2q *q, const Etcdserverpb__TxnResponse *t, size_t i,
                          bool *ordered)
{
    uint64_t n = t->header->revision > 0 ? (uint64_t)t->header->revision : 0;
    *ordered = true;
    const Etcdserverpb__ResponseOp *r =
        resp_op(t, i, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
    if (r == NULL || r->response_range->n_kvs == 0)
        return n;
    const Mvccpb__KeyValue *kv = r->response_range->kvs[0];
    ProtobufCBinaryData c = v2q_key(q, q->path, q->path_len, 1, true);
    if (kv->key.len < c.len)
        return n;
    const char *name = (const char *)kv->key.data + c.len;
    size_t nl = kv->key.len - c.len;
    if (nl > 0 && name[nl - 1] == '/')
        nl--;
    uint64_t last;
    if (nl != 20 || !v2_parse_uint(name, nl, &last)) {
        *ordered = false;
        return n;
    }
    return last + 1 > n ? last + 1 : n;
}

static void post_create(struct v2q *q, uint64_t name, bool ordered);

static bool post_file(struct v2q *q, const Etcdserverpb__TxnResponse *t, size_t na)
{
    for (size_t i = 0; i <= na; i++)
        if (found(t, i))
            return true;
    return false;
}

static void on_post(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    Etcdserverpb__TxnResponse *t = txn_result(q, status, msg, resp, len);
    if (t == NULL)
        return;
    size_t na;
    ancestors(q, q->path, q->path_len, &na);
    if (!t->succeeded || q->attempts == 0) { /* the read, or a lost race */
        if (post_file(q, t, na)) {
            error_free(q, t, 104);
            return;
        }
        if (++q->attempts > POST_ATTEMPTS) {
            etcdserverpb__txn_response__free_unpacked(t, NULL);
            v2q_error(q, 300, "too many concurrent in-order creates", 36, 0);
            return;
        }
        bool ordered;
        uint64_t name = post_name(q, t, na + 1, &ordered);
        etcdserverpb__txn_response__free_unpacked(t, NULL);
        post_create(q, name, ordered);
        return;
    }
    answer(q, t, "create", 201, q->new_path, q->new_path_len,
           q->dir ? NULL : (const uint8_t *)q->value, q->value_len, q->dir, NULL, true);
}

/* post_reads adds the ranges that tell a file at or above the directory
 * and the newest child named with a digit. */
static void post_reads(struct v2q *q, Etcdserverpb__TxnRequest *t, const size_t *al, size_t na,
                       bool then)
{
    void (*add)(Etcdserverpb__TxnRequest *, Etcdserverpb__RequestOp *) = then ? v2q_then : v2q_else;
    add(t, v2q_range(q, key(q, q->path, q->path_len, false), NONE, 1));
    for (size_t i = 0; i < na && al != NULL; i++)
        add(t, v2q_range(q, key(q, q->path, al[i], false), NONE, 1));
    ProtobufCBinaryData c = v2q_key(q, q->path, q->path_len, 1, true);
    uint8_t *e = arena_alloc(&q->a, c.len + 1);
    if (e == NULL || c.data == NULL) {
        q->oom = true;
        return;
    }
    memcpy(e, c.data, c.len);
    e[c.len] = ':'; /* after every digit */
    Etcdserverpb__RequestOp *op = v2q_range(q, c, (ProtobufCBinaryData){c.len + 1, e}, 1);
    if (op != NULL) {
        op->request_range->sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
        op->request_range->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
        op->request_range->keys_only = true;
    }
    add(t, op);
}

static void post_create(struct v2q *q, uint64_t name, bool ordered)
{
    size_t na;
    const size_t *al = ancestors(q, q->path, q->path_len, &na);
    /* the new key: dir "/" 20 digits */
    char nm[24];
    snprintf(nm, sizeof(nm), "/%020" PRIu64, name);
    size_t pl = q->path_len + 21;
    char *p = arena_alloc(&q->a, pl + 1);
    if (p == NULL) {
        v2q_grpc_error(q, "out of memory");
        return;
    }
    memcpy(p, q->path, q->path_len);
    memcpy(p + q->path_len, nm, 21);
    q->new_path = p;
    q->new_path_len = pl;
    ProtobufCBinaryData k = key(q, p, pl, false), kd = key(q, p, pl, true);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, na + 3, na + 3, na + 2);
    v2q_cmp(q, t, key(q, q->path, q->path_len, false), NONE, VERSION, EQ, 0, NONE);
    for (size_t i = 0; i < na && al != NULL; i++)
        v2q_cmp(q, t, key(q, q->path, al[i], false), NONE, VERSION, EQ, 0, NONE);
    if (ordered) {
        ProtobufCBinaryData c = v2q_key(q, q->path, q->path_len, 1, true);
        uint8_t *e = arena_alloc(&q->a, c.len + 1);
        if (e != NULL && c.data != NULL) {
            memcpy(e, c.data, c.len);
            e[c.len] = ':';
            v2q_cmp(q, t, k, (ProtobufCBinaryData){c.len + 1, e}, VERSION, EQ, 0, NONE);
        } else {
            q->oom = true;
        }
    } else {
        v2q_cmp(q, t, k, NONE, VERSION, EQ, 0, NONE);
        v2q_cmp(q, t, kd, NONE, VERSION, EQ, 0, NONE);
    }
    /* the directory itself, then its parents */
    size_t *all = arena_alloc(&q->a, (na + 1) * sizeof(*all));
    if (all != NULL) {
        all[0] = q->path_len;
        for (size_t i = 0; i < na && al != NULL; i++)
            all[i + 1] = al[i];
        make_dirs(q, t, q->path, all, na + 1);
    } else {
        q->oom = true;
    }
    v2q_then(t, v2q_put(q, q->dir ? kd : k, val(q), q->lease, false, false));
    v2q_then(t, v2q_act(q, "create"));
    post_reads(q, t, al, na, false);
    txn(q, t, on_post);
}

static void do_post(struct v2q *q)
{
    size_t na;
    const size_t *al = ancestors(q, q->path, q->path_len, &na);
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 0, na + 2, 0);
    post_reads(q, t, al, na, true);
    q->attempts = 0;
    txn(q, t, on_post);
}

/* ---- dispatch ---- */

static void write_txn(struct v2q *q)
{
    if (q->refresh && (q->op == V2_SET || q->op == V2_UPDATE)) {
        do_refresh(q);
        return;
    }
    switch (q->op) {
    case V2_SET:
        do_set(q);
        break;
    case V2_CREATE:
        do_create(q);
        break;
    case V2_UPDATE:
        do_update(q);
        break;
    case V2_CAS:
    case V2_CAD:
        do_cas(q);
        break;
    case V2_DELETE:
        do_delete(q);
        break;
    case V2_POST:
        do_post(q);
        break;
    default:
        v2q_grpc_error(q, "unknown operation");
        break;
    }
}

static void on_grant(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    if (status != 0) {
        v2q_grpc_error(q, msg);
        return;
    }
    Etcdserverpb__LeaseGrantResponse *g =
        etcdserverpb__lease_grant_response__unpack(NULL, len, resp);
    if (g == NULL || g->id == 0) {
        if (g != NULL)
            etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
        v2q_grpc_error(q, "bad lease grant response");
        return;
    }
    q->lease = g->id;
    q->lease_ttl = g->ttl;
    q->grant_ns = v2_now_ns();
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    write_txn(q);
}

void v2_write(struct v2q *q)
{
    bool deletes = q->op == V2_DELETE || q->op == V2_CAD;
    size_t depth = 0;
    for (size_t i = 0; i < q->path_len; i++)
        depth += q->path[i] == '/';
    if (depth > MAX_PARENTS && (q->op == V2_SET || q->op == V2_CREATE || q->op == V2_POST)) {
        /* a txn op per parent: what the service would answer, without
         * building a txn the size of the path squared */
        static const char many[] = "etcdserver: too many operations in txn request";
        v2q_error(q, 300, many, sizeof(many) - 1, 0);
        return;
    }
    if (q->has_ttl && !deletes) {
        Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
        g.ttl = q->ttl > INT64_MAX ? INT64_MAX : (int64_t)q->ttl;
        v2q_call(q, "/etcdserverpb.Lease/LeaseGrant", &g.base, on_grant);
        return;
    }
    write_txn(q);
}
