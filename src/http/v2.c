/* http/v2.c: etcd's v2 keys API served from the v3 store (--enable-v2), as
 * etcd 3.4's v2v3 mode (--experimental-enable-v2v3=PFX) does it, with TTLs
 * that work. Reference: /work/notes/v2.md (etcd 3.4.23 observed) and the
 * executable spec tests/integration/test_v2.py.
 *
 * Everything is done through local calls of the v3 services (KV/Range,
 * KV/Txn, Lease/LeaseGrant, LeaseRevoke, LeaseTimeToLive, Watch/Watch,
 * Cluster/MemberList, Maintenance/Status) as a gRPC client would make them,
 * so writes go through Raft, any member answers, auth and quotas apply.
 * Files: v2.c (routing, the request form, reads, answers, members,
 * machines, stats), v2_write.c (writes), v2_watch.c (waits), v2_lease.c
 * (ttl and expiration), v2_node.c (nodes and JSON), v2_util.c (pure
 * helpers: paths, the key layout, forms, Go's JSON and times).
 *
 * The v3 layout is etcd's v2v3 one, unchanged: node /a/b is the v3 key
 * PFX/003/k//1/a/b ("/1" + path, depth = its number of "/", %03d), a
 * directory the same key with a trailing "/" (its value never shown);
 * every v2 write also puts PFX/act = its action in the same txn (the waits
 * label events with it); v2 index = v3 revision - 1. PFX is the flag's
 * value ("/v2v3" when empty). Reads, errors, bodies and headers are
 * v2v3's (X-Etcd-Cluster-Id "e7cd2f00d", X-Raft-Index/Term 0), including
 * its quirks the test pins (sorted sorts the first level, hidden keys
 * listed, waitIndex one early, error codes of notes section 9).
 *
 * Where quorum departs from etcd 3.4.23's v2v3 mode, on purpose:
 *
 * - A directory's children are the keys below its path and a "/": v2v3
 *   leaves the "/" out, so /d's listing shows /dx's children, a recursive
 *   wait on /d fires for /dx, and a recursive delete of /d deletes /dx's
 *   children too (data loss). quorum keeps each directory to itself.
 * - TTLs work (v2v3 refuses every ttl with 300 "TTLs are unsupported").
 *   A write with ttl=N grants a v3 lease of N seconds first (the lessor
 *   raises it to its minimum, 1.5 election timeouts rounded up to
 *   seconds, as etcd's does: ttl=0 lives that long) and puts the key with
 *   it; the key's own lease, one per key. A write without ttl puts the key
 *   without lease (permanent again, as the v2 store makes it). refresh=true
 *   (with ttl, no value) keeps the value (Put ignore_value) and moves the
 *   key to a fresh lease of the new ttl: a write, so modifiedIndex and the
 *   index move as the v2 store's refresh moves them, but its act is
 *   "refresh", which waits skip (the v2 store does not notify watchers of
 *   a refresh); the answer's action is the operation's (set, update,
 *   compareAndSwap). A fresh lease rather than a keep-alive: a refresh
 *   whose compare fails must not extend the holder's lease, and the ttl
 *   may change. A lease a write took its key off (refresh, set, delete) is
 *   revoked once LeaseTimeToLive shows it holds no key; a failed write
 *   revokes the lease it granted. Nodes show "ttl" (seconds left, rounded
 *   up as the v2 store does) and "expiration" (RFC 3339) from
 *   LeaseTimeToLive. An update (prevExist=true) with dir=true and a ttl
 *   sets a directory's ttl, "ttl=" removes it (the v2 docs' "PUT /dir
 *   ttl=30 dir=true prevExist=true"; v2v3 answers 102). A directory's
 *   expiry deletes the directory node only: children are not on its
 *   lease, they stay in the v3 store, unlisted under a missing parent (the
 *   v2 store deletes them). A wait event's prevNode shows ttl and
 *   expiration only while its lease exists (a write's own answer always
 *   does: the lease it replaced is revoked after the answer).
 *
 * - Expiry, as a wait sees it: the lessor's revocation deletes the key in
 *   a revision of its own, without PFX/act (nothing of ours runs in it). A
 *   wait labels a revision with no act key whose deletes took keys off a
 *   lease "expire" (the v2 store's action): node {key, modifiedIndex,
 *   createdIndex}, prevNode the key as it was with "expiration" = the
 *   time of the event. A v3 client's LeaseRevoke of such a key, or its
 *   DeleteRange of a key with a lease, looks the same and is labelled so.
 *   Any other revision without act (a v3 client's write under PFX) or with
 *   the act key alone (a DELETE of a missing key) is skipped: etcd 3.4.23
 *   crashes on both.
 *
 * - In-order keys (POST) are the v2 store's: the new key is <dir>/<20-digit
 *   zero-padded index>, the answer names it, and the directory is made
 *   (v2v3 names keys after Go's time.Now().String(), answers the directory
 *   and leaves it unmade). The name is the index the create is expected to
 *   get (the current revision); the create txn requires that no child
 *   named with a digit sorts at or after it, so names grow in creation
 *   order even with concurrent POSTs (a lost race reads the newest name
 *   and retries, 16 times at most). A POST below a file is 104 (v2v3
 *   writes below the file). The name may differ from createdIndex when
 *   other writes land between the read and the create.
 *
 * - /v2/members, /v2/members/leader and /v2/machines answer as plain
 *   --enable-v2 does (v2v3 closes the connection: a "STUB" panic); only
 *   GET (and HEAD for machines): member changes go through the v3 API.
 *   X-Etcd-Cluster-Id there is the real cluster id.
 *
 * Not done: v2 auth (/v2/auth; a "Basic" Authorization header is
 * ignored, a bare v3 token is passed to the services as the gateway does),
 * multipart/form-data bodies (curl -F; use -d), wait timeouts (a wait
 * lasts until an event or the client leaves). A malformed URL path gets
 * 400 "400 Bad Request" with the CORS headers Go's server leaves out.
 *
 * Life cycle: struct v2q owns a request while calls are in flight; the
 * hreq's on_abort cancels them and forgets the hreq (hreq_respond may free
 * it at once: q->r is cleared before answering). A callback may come
 * before lcall_unary returns: q->busy defers the free.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/text.h"
#include "http/v2_req.h"

#define JSON_CT "application/json"
#define CLUSTER_HDR "X-Etcd-Cluster-Id: e7cd2f00d\r\n"
#define MAX_LEVELS 1000 /* a recursive listing goes this deep at most */

/* ---- the request's life ---- */

void v2q_free(struct v2q *q)
{
    v2_ttls_reset(&q->ttls);
    v2_form_free(&q->form);
    buf_free(&q->kb);
    free(q->token);
    free(q->top);
    free(q->prev_level);
    arena_free(&q->a);
    free(q);
}

static void q_maybe_free(struct v2q *q)
{
    if (q->over && q->busy == 0 && q->lc == NULL && !q->ttls.active)
        v2q_free(q);
}

static void q_abort(struct hreq *r)
{
    struct v2q *q = r->ctx;
    q->r = NULL;
    q->over = true;
    if (q->lc != NULL) {
        lcall_cancel(q->lc);
        q->lc = NULL;
    }
    v2_ttls_reset(&q->ttls);
    q_maybe_free(q);
}

/* q_take gives the hreq to answer, cleared from q (answered once). */
static struct hreq *q_take(struct v2q *q)
{
    struct hreq *r = q->r;
    q->r = NULL;
    q->over = true;
    if (r != NULL)
        r->on_abort = NULL;
    return r;
}

static void on_lcall(void *arg, int status, const char *msg, const uint8_t *resp, size_t len)
{
    struct v2q *q = arg;
    q->lc = NULL;
    q->busy++;
    if (q->r != NULL)
        q->next(q, status, msg, resp, len);
    q->busy--;
    q_maybe_free(q);
}

void v2q_call(struct v2q *q, const char *method, const ProtobufCMessage *msg, v2q_cb cb)
{
    q->next = cb;
    q->busy++;
    if (q->oom) {
        cb(q, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
    } else {
        int rv = lcall_unary(q->srv, method, msg, q->token, on_lcall, q, &q->lc);
        if (rv != 0) {
            q->lc = NULL;
            cb(q, GRPC_STATUS_UNAVAILABLE,
               rv == -ENOENT   ? "unknown method"
               : rv == -ENOMEM ? "out of memory"
                               : "server closing",
               NULL, 0);
        }
    }
    q->busy--;
    q_maybe_free(q);
}

/* ---- answers ---- */

static void respond(struct v2q *q, int status, const char *extra, const struct buf *body)
{
    struct hreq *r = q_take(q);
    if (r != NULL)
        hreq_respond(r, status, JSON_CT, extra, body->data, body->len);
}

void v2q_error(struct v2q *q, int code, const char *cause, size_t cause_len, uint64_t index)
{
    if (q->lease != 0 && !q->written) { /* granted for a write that did not happen */
        v2_lease_revoke(q->srv, q->token, q->lease);
        q->lease = 0;
    }
    struct buf b = {0};
    char extra[128];
    snprintf(extra, sizeof(extra), CLUSTER_HDR "X-Etcd-Index: %llu\r\n", (unsigned long long)index);
    if (v2_error_json(&b, code, cause, cause_len, index) == 0)
        respond(q, v2_error_status(code), extra, &b);
    else
        respond(q, 500, extra, &b);
    buf_free(&b);
}

void v2q_path_error(struct v2q *q, int code, uint64_t index)
{
    /* the cause is the path without its "/1" */
    v2q_error(q, code, q->path + 2, q->path_len - 2, index);
}

void v2q_grpc_error(struct v2q *q, const char *msg)
{
    v2q_error(q, 300, msg ? msg : "", msg ? strlen(msg) : 0, 0);
}

static void answer_event(struct v2q *q);

/* event_decorated: the ttls are known (called by v2_lease.c, which
 * touches nothing of q after this returns: q may be freed here) */
static void event_decorated(void *arg)
{
    struct v2q *q = arg;
    q->busy++;
    if (q->r != NULL)
        answer_event(q);
    q->busy--;
    q_maybe_free(q);
}

static void answer_event(struct v2q *q)
{
    struct buf b = {0};
    struct v2_event ev = q->ev;
    if (q->no_value &&
        (strcmp(ev.action, "set") == 0 || strcmp(ev.action, "create") == 0 ||
         strcmp(ev.action, "update") == 0 || strcmp(ev.action, "compareAndSwap") == 0)) {
        ev.node = NULL;
        ev.prev = NULL;
    }
    char extra[160];
    snprintf(extra, sizeof(extra),
             CLUSTER_HDR "X-Etcd-Index: %llu\r\nX-Raft-Index: 0\r\n"
                         "X-Raft-Term: 0\r\n",
             (unsigned long long)q->index);
    if (v2_event_json(&b, &ev) == 0)
        respond(q, q->status, extra, &b);
    else
        v2q_grpc_error(q, "out of memory");
    buf_free(&b);
    /* the lease the write took its key off, if nothing else holds it */
    if (q->old_lease != 0 && q->old_lease != q->lease && v2_ttls_keyless(&q->ttls, q->old_lease))
        v2_lease_revoke(q->srv, q->token, q->old_lease);
    q->lease = 0;
}

/* collect_nodes lists |n| and every node below it into |out|. */
static int collect_nodes(struct v2_node *n, struct v2_node ***out, size_t *len, size_t *cap)
{
    if (n == NULL)
        return 0;
    if (*len == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct v2_node **p = realloc(*out, c * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        *out = p;
        *cap = c;
    }
    (*out)[(*len)++] = n;
    for (size_t i = 0; i < n->n_nodes; i++)
        if (collect_nodes(n->nodes[i], out, len, cap) != 0)
            return -ENOMEM;
    return 0;
}

void v2q_event(struct v2q *q)
{
    struct v2_node **nodes = NULL;
    size_t n = 0, cap = 0;
    /* the lease this write granted: known without asking */
    if (q->lease != 0 && q->ev.node != NULL && q->ev.node->lease == q->lease) {
        q->ev.node->has_exp = true;
        q->ev.node->ttl = q->lease_ttl;
        q->ev.node->exp_ns = q->grant_ns + q->lease_ttl * 1000000000;
    }
    if (collect_nodes(q->ev.node, &nodes, &n, &cap) != 0 ||
        collect_nodes(q->ev.prev, &nodes, &n, &cap) != 0) {
        free(nodes);
        v2q_grpc_error(q, "out of memory");
        return;
    }
    q->busy++;
    if (v2_ttls_run(&q->ttls, q->srv, q->token, nodes, n, event_decorated, q) != 0)
        event_decorated(q); /* without ttls */
    free(nodes);
    q->busy--;
    q_maybe_free(q);
}

/* ---- building requests ---- */

ProtobufCBinaryData v2q_bytes(struct v2q *q, const void *p, size_t n)
{
    ProtobufCBinaryData d = {n, arena_dup(&q->a, n ? p : "", n)};
    if (d.data == NULL) {
        q->oom = true;
        d.len = 0;
    }
    return d;
}

ProtobufCBinaryData v2q_key(struct v2q *q, const char *path, size_t n, int add, bool dir)
{
    if (v2_key(&q->kb, q->pfx, path, n, add, dir) != 0) {
        q->oom = true;
        return (ProtobufCBinaryData){0, NULL};
    }
    return v2q_bytes(q, q->kb.data, q->kb.len);
}

ProtobufCBinaryData v2q_prefix_end(struct v2q *q, ProtobufCBinaryData k)
{
    if (v2_prefix_end(&q->kb, k.data, k.len) != 0) {
        q->oom = true;
        return (ProtobufCBinaryData){0, NULL};
    }
    return v2q_bytes(q, q->kb.data, q->kb.len);
}

Etcdserverpb__TxnRequest *v2q_txn(struct v2q *q, size_t nc, size_t ns, size_t nf)
{
    Etcdserverpb__TxnRequest *t = arena_alloc(&q->a, sizeof(*t));
    if (t == NULL) {
        q->oom = true;
        return NULL;
    }
    etcdserverpb__txn_request__init(t);
    t->compare = arena_alloc(&q->a, (nc + 1) * sizeof(*t->compare));
    t->success = arena_alloc(&q->a, (ns + 1) * sizeof(*t->success));
    t->failure = arena_alloc(&q->a, (nf + 1) * sizeof(*t->failure));
    if (t->compare == NULL || t->success == NULL || t->failure == NULL) {
        q->oom = true;
        return NULL;
    }
    return t;
}

void v2q_cmp(struct v2q *q, Etcdserverpb__TxnRequest *t, ProtobufCBinaryData key,
             ProtobufCBinaryData end, int target, int result, int64_t num, ProtobufCBinaryData val)
{
    Etcdserverpb__Compare *c = arena_alloc(&q->a, sizeof(*c));
    if (c == NULL || t == NULL) {
        q->oom = true;
        return;
    }
    etcdserverpb__compare__init(c);
    c->key = key;
    c->range_end = end;
    c->target = (Etcdserverpb__Compare__CompareTarget)target;
    c->result = (Etcdserverpb__Compare__CompareResult)result;
    switch (target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c->version = num;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c->create_revision = num;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c->mod_revision = num;
        break;
    default:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
        c->value = val;
        break;
    }
    t->compare[t->n_compare++] = c;
}

static Etcdserverpb__RequestOp *new_op(struct v2q *q)
{
    Etcdserverpb__RequestOp *op = arena_alloc(&q->a, sizeof(*op));
    if (op == NULL) {
        q->oom = true;
        return NULL;
    }
    etcdserverpb__request_op__init(op);
    return op;
}

Etcdserverpb__RequestOp *v2q_range(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData end,
                                   int64_t limit)
{
    Etcdserverpb__RequestOp *op = new_op(q);
    Etcdserverpb__RangeRequest *r = arena_alloc(&q->a, sizeof(*r));
    if (op == NULL || r == NULL) {
        q->oom = true;
        return NULL;
    }
    etcdserverpb__range_request__init(r);
    r->key = key;
    r->range_end = end;
    r->limit = limit;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op->request_range = r;
    return op;
}

Etcdserverpb__RequestOp *v2q_put(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData val,
                                 int64_t lease, bool prev_kv, bool ignore_value)
{
    Etcdserverpb__RequestOp *op = new_op(q);
    Etcdserverpb__PutRequest *p = arena_alloc(&q->a, sizeof(*p));
    if (op == NULL || p == NULL) {
        q->oom = true;
        return NULL;
    }
    etcdserverpb__put_request__init(p);
    p->key = key;
    if (!ignore_value)
        p->value = val;
    p->lease = lease;
    p->prev_kv = prev_kv;
    p->ignore_value = ignore_value;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op->request_put = p;
    return op;
}

Etcdserverpb__RequestOp *v2q_del(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData end,
                                 bool prev_kv)
{
    Etcdserverpb__RequestOp *op = new_op(q);
    Etcdserverpb__DeleteRangeRequest *d = arena_alloc(&q->a, sizeof(*d));
    if (op == NULL || d == NULL) {
        q->oom = true;
        return NULL;
    }
    etcdserverpb__delete_range_request__init(d);
    d->key = key;
    d->range_end = end;
    d->prev_kv = prev_kv;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op->request_delete_range = d;
    return op;
}

Etcdserverpb__RequestOp *v2q_optxn(struct v2q *q, Etcdserverpb__TxnRequest *t)
{
    Etcdserverpb__RequestOp *op = new_op(q);
    if (op == NULL || t == NULL) {
        q->oom = true;
        return NULL;
    }
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    op->request_txn = t;
    return op;
}

void v2q_then(Etcdserverpb__TxnRequest *t, Etcdserverpb__RequestOp *op)
{
    if (t != NULL && op != NULL)
        t->success[t->n_success++] = op;
}

void v2q_else(Etcdserverpb__TxnRequest *t, Etcdserverpb__RequestOp *op)
{
    if (t != NULL && op != NULL)
        t->failure[t->n_failure++] = op;
}

Etcdserverpb__RequestOp *v2q_act(struct v2q *q, const char *action)
{
    size_t pl = strlen(q->pfx);
    char *k = arena_alloc(&q->a, pl + 5);
    if (k == NULL) {
        q->oom = true;
        return NULL;
    }
    memcpy(k, q->pfx, pl);
    memcpy(k + pl, "/act", 4);
    return v2q_put(q, (ProtobufCBinaryData){pl + 4, (uint8_t *)k},
                   (ProtobufCBinaryData){strlen(action), (uint8_t *)action}, 0, false, false);
}

size_t v2q_parent(const char *p, size_t n)
{
    if (n <= 2)
        return 0; /* "/1": the root */
    size_t i = n;
    while (i > 0 && p[i - 1] != '/')
        i--;
    /* p is clean: the parent is p[0..i-1); "/1" is the root */
    return i > 3 ? i - 1 : 0;
}

/* ---- GET: a node, or a directory's listing ---- */

static const Etcdserverpb__RangeResponse *txn_range(const Etcdserverpb__TxnResponse *t, size_t i)
{
    if (t == NULL || i >= t->n_responses ||
        t->responses[i]->response_case != ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
        return NULL;
    return t->responses[i]->response_range;
}

static int key_cmp(const struct v2_node *a, const struct v2_node *b)
{
    return bytes_compare(a->key, a->key_len, b->key, b->key_len);
}

static int node_order(const void *x, const void *y)
{
    return key_cmp(*(struct v2_node *const *)x, *(struct v2_node *const *)y);
}

static void get_level(struct v2q *q);

/* get_answer sorts the first level if asked and answers. */
static void get_answer(struct v2q *q)
{
    struct v2_node *n = q->ev.node;
    for (size_t i = 0; i < q->n_top; i++)
        if (v2_node_add_child(&q->a, n, q->top[i]) != 0)
            q->oom = true;
    if (q->sorted && n->n_nodes > 1)
        qsort(n->nodes, n->n_nodes, sizeof(*n->nodes), node_order);
    if (q->oom) {
        v2q_grpc_error(q, "out of memory");
        return;
    }
    q->status = 200;
    v2q_event(q);
}

/* find_parent: the last node of the previous level whose key is
 * key[0..n) (etcd keeps the last one of a key in its map). */
static struct v2_node *find_parent(struct v2q *q, const char *key, size_t n)
{
    size_t lo = 0, hi = q->n_prev_level;
    struct v2_node want = {.key = key, .key_len = n};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(q->prev_level[mid], &want) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || key_cmp(q->prev_level[lo - 1], &want) != 0)
        return NULL;
    return q->prev_level[lo - 1];
}

static void on_level(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    if (status != 0) {
        v2q_grpc_error(q, msg);
        return;
    }
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, len, resp);
    if (rr == NULL) {
        v2q_grpc_error(q, "bad range response");
        return;
    }
    struct v2_node **level = rr->n_kvs ? malloc(rr->n_kvs * sizeof(*level)) : NULL;
    size_t n = 0;
    if (rr->n_kvs && level == NULL)
        q->oom = true;
    for (size_t i = 0; level != NULL && i < rr->n_kvs; i++) {
        struct v2_node *nd = v2_node_from_kv(&q->a, q->pfx, rr->kvs[i]);
        if (nd != NULL)
            level[n++] = nd;
    }
    bool empty = rr->n_kvs == 0;
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    if (q->oom) {
        free(level);
        v2q_grpc_error(q, "out of memory");
        return;
    }
    if (q->level == 1) {
        q->top = level;
        q->n_top = n;
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t pl = v2q_parent(level[i]->key, level[i]->key_len);
            struct v2_node *p = pl ? find_parent(q, level[i]->key, pl) : NULL;
            if (p != NULL && v2_node_add_child(&q->a, p, level[i]) != 0)
                q->oom = true;
        }
    }
    if (q->level > 1)
        free(q->prev_level);
    /* the parents of the next level, in key order */
    q->prev_level = NULL;
    q->n_prev_level = 0;
    if (!empty && q->recursive && q->level < MAX_LEVELS) {
        q->prev_level = malloc((n ? n : 1) * sizeof(*q->prev_level));
        if (q->prev_level == NULL) {
            v2q_grpc_error(q, "out of memory");
            return;
        }
        if (n > 0)
            memcpy(q->prev_level, level, n * sizeof(*level));
        q->n_prev_level = n;
        qsort(q->prev_level, n, sizeof(*q->prev_level), node_order);
        if (q->level > 1)
            free(level);
        q->level++;
        get_level(q);
        return;
    }
    if (q->level > 1)
        free(level);
    get_answer(q);
}

/* get_level reads the directory's children |level| levels down, at the
 * revision of the first read (etcd's getDirDepth). */
static void get_level(struct v2q *q)
{
    /* below the directory: its path and a "/" (etcd's v2v3 leaves the "/"
     * out, and /d's listing then holds /dx's children) */
    ProtobufCBinaryData k = v2q_key(q, q->path, q->path_len, (int)q->level, true);
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key = k;
    rr.range_end = v2q_prefix_end(q, k);
    rr.revision = q->rev;
    rr.serializable = true; /* at a revision this member answered */
    v2q_call(q, "/etcdserverpb.KV/Range", &rr.base, on_level);
}

static void on_get(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    if (status != 0) {
        v2q_grpc_error(q, msg);
        return;
    }
    Etcdserverpb__TxnResponse *t = etcdserverpb__txn_response__unpack(NULL, len, resp);
    const Etcdserverpb__RangeResponse *d = txn_range(t, 0), *f = txn_range(t, 1);
    if (t == NULL || t->header == NULL || d == NULL || f == NULL) {
        if (t != NULL)
            etcdserverpb__txn_response__free_unpacked(t, NULL);
        v2q_grpc_error(q, "bad txn response");
        return;
    }
    q->rev = t->header->revision;
    q->index = v2_rev(q->rev);
    bool root = q->path_len == 2;
    if (d->n_kvs > 0 || root) {
        struct v2_node *n = v2_node_new(&q->a, q->path, q->path_len);
        if (n != NULL) {
            n->dir = true;
            if (d->n_kvs > 0) {
                n->created = v2_rev(d->kvs[0]->create_revision);
                n->modified = v2_rev(d->kvs[0]->mod_revision);
                n->lease = d->kvs[0]->lease;
            }
        }
        etcdserverpb__txn_response__free_unpacked(t, NULL);
        if (n == NULL) {
            v2q_grpc_error(q, "out of memory");
            return;
        }
        q->ev = (struct v2_event){"get", n, NULL};
        q->level = 1;
        get_level(q);
        return;
    }
    struct v2_node *n = f->n_kvs > 0 ? v2_node_from_kv(&q->a, q->pfx, f->kvs[0]) : NULL;
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    if (n == NULL) {
        v2q_path_error(q, 100, q->index);
        return;
    }
    q->ev = (struct v2_event){"get", n, NULL};
    q->status = 200;
    v2q_event(q);
}

static void v2_get(struct v2q *q)
{
    Etcdserverpb__TxnRequest *t = v2q_txn(q, 0, 2, 0);
    v2q_then(t, v2q_range(q, v2q_key(q, q->path, q->path_len, 0, true),
                          (ProtobufCBinaryData){0, NULL}, 0));
    v2q_then(t, v2q_range(q, v2q_key(q, q->path, q->path_len, 0, false),
                          (ProtobufCBinaryData){0, NULL}, 0));
    if (t == NULL || q->oom) {
        v2q_grpc_error(q, "out of memory");
        return;
    }
    v2q_call(q, "/etcdserverpb.KV/Txn", &t->base, on_get);
}

/* ---- parsing the request (etcd's v2http parseKeyRequest) ---- */

static const struct v2_field *field(struct v2q *q, const char *name)
{
    return v2_form_get(&q->form, name);
}

/* form_bool: absent: false; present and not a Go bool: -1 */
static int form_bool(struct v2q *q, const char *name, bool *out)
{
    const struct v2_field *f = field(q, name);
    *out = false;
    if (f == NULL)
        return 0;
    return v2_parse_bool(f->v, f->vn, out) ? 0 : -1;
}

static int form_uint(struct v2q *q, const char *name, uint64_t *out)
{
    const struct v2_field *f = field(q, name);
    *out = 0;
    if (f == NULL)
        return 0;
    return v2_parse_uint(f->v, f->vn, out) ? 0 : -1;
}

/* parse returns 0, or answers the form error and returns -1. */
static int parse(struct v2q *q, const struct hreq *r)
{
    char err[256] = "", qerr[256] = "";
    int rv = 0;
    bool body = strcmp(r->method, "PUT") == 0 || strcmp(r->method, "POST") == 0;
    if (body && v2_ctype_is_form(r->content_type))
        rv = v2_form_parse(&q->form, (const char *)r->body.data, r->body.len, err, sizeof(err));
    if (rv >= 0) {
        int qrv = v2_form_parse(&q->form, r->query, strlen(r->query), qerr, sizeof(qerr));
        if (qrv < 0)
            rv = qrv;
        else if (rv == 0 && qrv == 1) {
            rv = 1;
            memcpy(err, qerr, sizeof(err));
        }
    }
    if (rv < 0) {
        v2q_grpc_error(q, "out of memory");
        return -1;
    }
    if (rv == 1) {
        v2q_error(q, 210, err, strlen(err), 0);
        return -1;
    }
#define FAIL(code, text)                                                                           \
    do {                                                                                           \
        v2q_error(q, code, text, strlen(text), 0);                                                 \
        return -1;                                                                                 \
    } while (0)
    if (form_uint(q, "prevIndex", &q->prev_index) != 0)
        FAIL(203, "invalid value for \"prevIndex\"");
    if (form_uint(q, "waitIndex", &q->wait_index) != 0)
        FAIL(203, "invalid value for \"waitIndex\"");
    if (form_bool(q, "recursive", &q->recursive) != 0)
        FAIL(209, "invalid value for \"recursive\"");
    if (form_bool(q, "sorted", &q->sorted) != 0)
        FAIL(209, "invalid value for \"sorted\"");
    if (form_bool(q, "wait", &q->wait) != 0)
        FAIL(209, "invalid value for \"wait\"");
    if (form_bool(q, "dir", &q->dir) != 0)
        FAIL(209, "invalid value for \"dir\"");
    if (form_bool(q, "quorum", &q->quorum) != 0)
        FAIL(209, "invalid value for \"quorum\"");
    if (form_bool(q, "stream", &q->stream) != 0)
        FAIL(209, "invalid value for \"stream\"");
    if (q->wait && strcmp(r->method, "GET") != 0)
        FAIL(209, "\"wait\" can only be used with GET requests");
    const struct v2_field *pv = field(q, "prevValue");
    if (pv != NULL && pv->vn == 0)
        FAIL(201, "\"prevValue\" cannot be empty");
    if (pv != NULL) {
        q->prev_value = pv->v;
        q->prev_value_len = pv->vn;
    }
    if (form_bool(q, "noValueOnSuccess", &q->no_value) != 0)
        FAIL(209, "invalid value for \"noValueOnSuccess\"");
    const struct v2_field *ttl = field(q, "ttl");
    q->ttl_field = ttl != NULL;
    if (ttl != NULL && ttl->vn > 0) {
        if (!v2_parse_uint(ttl->v, ttl->vn, &q->ttl))
            FAIL(202, "invalid value for \"ttl\"");
        q->has_ttl = true;
    }
    q->prev_exist = -1;
    if (field(q, "prevExist") != NULL) {
        bool b;
        if (form_bool(q, "prevExist", &b) != 0)
            FAIL(209, "invalid value for prevExist");
        q->prev_exist = b;
    }
    const struct v2_field *val = field(q, "value");
    if (val != NULL) {
        q->value = val->v;
        q->value_len = val->vn;
    } else {
        q->value = "";
    }
    if (field(q, "refresh") != NULL) {
        if (form_bool(q, "refresh", &q->refresh) != 0)
            FAIL(209, "invalid value for refresh");
        if (q->refresh && q->value_len > 0)
            FAIL(211, "A value was provided on a refresh");
        if (q->refresh && !q->has_ttl)
            FAIL(212, "No TTL value set");
    }
#undef FAIL
    return 0;
}

/* ---- /v2/keys ---- */

/* token_of: the v3 token the request carries, as the gateway takes it (the
 * bare Authorization header). A v2 client's "Basic ..." credentials are
 * for etcd's v2 auth, which quorum does not have: they are not a token
 * (passing them would fail every request with "invalid auth token"). */
static const char *token_of(const struct hreq *r)
{
    const char *a = r->authorization;
    if (a == NULL || a[0] == 0 || strncasecmp(a, "Basic ", 6) == 0)
        return NULL;
    return a;
}

static void serve_keys(struct hreq *r, const char *kp, size_t kn)
{
    static const char *const methods[] = {"HEAD", "GET", "PUT", "POST", "DELETE"};
    bool allowed = false;
    for (size_t i = 0; i < 5; i++)
        allowed |= strcmp(r->method, methods[i]) == 0;
    if (!allowed) {
        http_method_not_allowed(r, "HEAD,GET,PUT,POST,DELETE");
        return;
    }
    struct v2q *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        hreq_respond(r, 500, NULL, NULL, NULL, 0);
        return;
    }
    q->r = r;
    q->srv = hreq_server(r);
    q->method = r->method;
    q->pfx = http_cfg.v2v3_prefix[0] ? http_cfg.v2v3_prefix : "/v2v3";
    r->ctx = q;
    r->on_abort = q_abort;
    q->busy++;
    /* the store path: path.Join("/1", key) */
    q->path = arena_alloc(&q->a, kn + 6);
    char *tmp = malloc(kn + 3);
    const char *tok = token_of(r);
    if (tok != NULL)
        q->token = strdup(tok);
    if (q->path == NULL || tmp == NULL || (tok != NULL && q->token == NULL)) {
        free(tmp);
        v2q_grpc_error(q, "out of memory");
        goto out;
    }
    tmp[0] = '/';
    tmp[1] = '1';
    memcpy(tmp + 2, kp, kn);
    q->path_len = v2_path_clean(tmp, kn + 2, q->path);
    free(tmp);
    if (parse(q, r) != 0)
        goto out;
    bool root = q->path_len == 2;
    const char *m = r->method;
    if (strcmp(m, "GET") == 0 && q->wait && !q->quorum) {
        q->busy--;
        v2_wait(q);
        return;
    }
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) {
        v2_get(q);
        goto out;
    }
    if (root) {
        v2q_error(q, 107, NULL, 0, 0);
        goto out;
    }
    if (strcmp(m, "POST") == 0) {
        q->op = V2_POST;
    } else if (strcmp(m, "PUT") == 0) {
        if (q->prev_exist == 1)
            q->op = q->prev_index == 0 && q->prev_value == NULL ? V2_UPDATE : V2_CAS;
        else if (q->prev_exist == 0)
            q->op = V2_CREATE;
        else if (q->prev_index > 0 || q->prev_value != NULL)
            q->op = V2_CAS;
        else
            q->op = V2_SET;
    } else {
        q->op = q->prev_index > 0 || q->prev_value != NULL ? V2_CAD : V2_DELETE;
    }
    v2_write(q);
out:
    q->busy--;
    q_maybe_free(q);
}

/* ---- /v2/members, /v2/machines, /v2/stats ---- */

struct members {
    struct v2q q;
    int kind; /* 0 list, 1 leader, 2 machines */
    uint64_t leader;
};

static int member_order(const void *x, const void *y)
{
    const Etcdserverpb__Member *a = *(Etcdserverpb__Member *const *)x;
    const Etcdserverpb__Member *b = *(Etcdserverpb__Member *const *)y;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int str_order(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static int member_json(struct buf *b, const Etcdserverpb__Member *m)
{
    char id[40];
    snprintf(id, sizeof(id), "{\"id\":\"%llx\",\"name\":", (unsigned long long)m->id);
    int rv = buf_append(b, id, strlen(id)) || v2_json_string(b, m->name, strlen(m->name)) ||
             buf_append(b, ",\"peerURLs\":[", 13);
    for (size_t i = 0; rv == 0 && i < m->n_peerurls; i++)
        rv = (i > 0 && buf_append_byte(b, ',')) ||
             v2_json_string(b, m->peerurls[i], strlen(m->peerurls[i]));
    if (rv == 0)
        rv = buf_append(b, "],\"clientURLs\":[", 16);
    for (size_t i = 0; rv == 0 && i < m->n_clienturls; i++)
        rv = (i > 0 && buf_append_byte(b, ',')) ||
             v2_json_string(b, m->clienturls[i], strlen(m->clienturls[i]));
    if (rv == 0)
        rv = buf_append(b, "]}", 2);
    return rv ? -ENOMEM : 0;
}

static void plain_error(struct v2q *q, int status, const char *extra, const char *msg)
{
    struct buf b = {0};
    if (buf_append(&b, "{\"message\":", 11) == 0 && v2_json_string(&b, msg, strlen(msg)) == 0 &&
        buf_append_byte(&b, '}') == 0)
        respond(q, status, extra, &b);
    else
        respond(q, 500, extra, &b);
    buf_free(&b);
}

static void on_members(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    struct members *m = (struct members *)q;
    Etcdserverpb__MemberListResponse *ml =
        status == 0 ? etcdserverpb__member_list_response__unpack(NULL, len, resp) : NULL;
    if (ml == NULL) {
        plain_error(q, 500, NULL, status != 0 && msg ? msg : "bad member list");
        return;
    }
    qsort(ml->members, ml->n_members, sizeof(*ml->members), member_order);
    char extra[96];
    snprintf(extra, sizeof(extra), "X-Etcd-Cluster-Id: %llx\r\n",
             (unsigned long long)(ml->header ? ml->header->cluster_id : 0));
    struct buf b = {0};
    int rv = 0;
    if (m->kind == 0) {
        rv = buf_append(&b, "{\"members\":[", 12);
        for (size_t i = 0; rv == 0 && i < ml->n_members; i++)
            rv = (i > 0 && buf_append_byte(&b, ',')) || member_json(&b, ml->members[i]);
        if (rv == 0)
            rv = buf_append(&b, "]}\n", 3);
    } else if (m->kind == 1) {
        const Etcdserverpb__Member *l = NULL;
        for (size_t i = 0; i < ml->n_members; i++)
            if (ml->members[i]->id == m->leader)
                l = ml->members[i];
        if (l == NULL) {
            etcdserverpb__member_list_response__free_unpacked(ml, NULL);
            plain_error(q, 503, extra, "During election");
            return;
        }
        rv = member_json(&b, l) || buf_append_byte(&b, '\n');
    } else {
        size_t n = 0;
        for (size_t i = 0; i < ml->n_members; i++)
            n += ml->members[i]->n_clienturls;
        char **urls = calloc(n + 1, sizeof(*urls));
        n = 0;
        for (size_t i = 0; urls != NULL && i < ml->n_members; i++)
            for (size_t k = 0; k < ml->members[i]->n_clienturls; k++)
                urls[n++] = ml->members[i]->clienturls[k];
        if (urls == NULL)
            rv = -ENOMEM;
        else
            qsort(urls, n, sizeof(*urls), str_order);
        for (size_t i = 0; rv == 0 && i < n; i++)
            rv = (i > 0 && buf_append(&b, ", ", 2)) || buf_append(&b, urls[i], strlen(urls[i]));
        free(urls);
        etcdserverpb__member_list_response__free_unpacked(ml, NULL);
        struct hreq *r = q_take(q);
        if (r != NULL)
            hreq_respond(r, rv ? 500 : 200, "text/plain; charset=utf-8", NULL, b.data, b.len);
        buf_free(&b);
        return;
    }
    etcdserverpb__member_list_response__free_unpacked(ml, NULL);
    if (rv == 0)
        respond(q, 200, extra, &b);
    else
        plain_error(q, 500, extra, "out of memory");
    buf_free(&b);
}

static void members_list(struct v2q *q)
{
    Etcdserverpb__MemberListRequest req = ETCDSERVERPB__MEMBER_LIST_REQUEST__INIT;
    v2q_call(q, "/etcdserverpb.Cluster/MemberList", &req.base, on_members);
}

static void on_status(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len)
{
    struct members *m = (struct members *)q;
    Etcdserverpb__StatusResponse *st =
        status == 0 ? etcdserverpb__status_response__unpack(NULL, len, resp) : NULL;
    if (st == NULL) {
        plain_error(q, 500, NULL, status != 0 && msg ? msg : "bad status");
        return;
    }
    m->leader = st->leader;
    etcdserverpb__status_response__free_unpacked(st, NULL);
    if (m->leader == 0) {
        plain_error(q, 503, NULL, "During election");
        return;
    }
    members_list(q);
}

static void serve_members(struct hreq *r, int kind, const char *sub)
{
    if (kind == 2 ? strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0
                  : strcmp(r->method, "GET") != 0) {
        http_method_not_allowed(r, kind == 2 ? "GET,HEAD" : "GET");
        return;
    }
    if (kind != 2 && sub[0] != 0 && strcmp(sub, "leader") != 0) {
        static const char nf[] = "{\"message\":\"Not found\"}";
        hreq_respond(r, 404, JSON_CT, NULL, nf, sizeof(nf) - 1);
        return;
    }
    struct members *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        hreq_respond(r, 500, NULL, NULL, NULL, 0);
        return;
    }
    struct v2q *q = &m->q;
    m->kind = kind != 2 && strcmp(sub, "leader") == 0 ? 1 : kind;
    q->r = r;
    q->srv = hreq_server(r);
    q->token = token_of(r) ? strdup(token_of(r)) : NULL;
    r->ctx = q;
    r->on_abort = q_abort;
    q->busy++;
    if (m->kind == 1) {
        Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
        v2q_call(q, "/etcdserverpb.Maintenance/Status", &req.base, on_status);
    } else {
        members_list(q);
    }
    q->busy--;
    q_maybe_free(q);
}

/* v2v3 mode has no stats: self and store are empty, leader is refused */
static void serve_stats(struct hreq *r, const char *which)
{
    if (strcmp(r->method, "GET") != 0) {
        http_method_not_allowed(r, "GET");
        return;
    }
    if (strcmp(which, "leader") == 0) {
        static const char nl[] = "{\"message\":\"not current leader\"}";
        hreq_respond(r, 403, JSON_CT, NULL, nl, sizeof(nl) - 1);
        return;
    }
    hreq_respond(r, 200, JSON_CT, NULL, NULL, 0);
}

/* ---- routing (Go's ServeMux: a cleaned path, or a redirect to it) ---- */

static void not_found(struct hreq *r)
{
    static const char nf[] = "404 page not found\n";
    hreq_respond(r, 404, "text/plain; charset=utf-8", "X-Content-Type-Options: nosniff\r\n", nf,
                 sizeof(nf) - 1);
}

/* path_decode: Go's unescape of a URL path (no '+' for ' '); -1 on a bad
 * escape. */
static long path_decode(const char *s, size_t n, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int a = i + 2 < n ? hex_digit((unsigned char)s[i + 1]) : -1;
            int b = i + 2 < n ? hex_digit((unsigned char)s[i + 2]) : -1;
            if (a < 0 || b < 0)
                return -1;
            c = (char)(a * 16 + b);
            i += 2;
        }
        out[w++] = c;
    }
    return (long)w;
}

static bool is(const char *p, size_t n, const char *s)
{
    return strlen(s) == n && memcmp(p, s, n) == 0;
}

static bool under(const char *p, size_t n, const char *s)
{
    size_t l = strlen(s);
    return n >= l && memcmp(p, s, l) == 0;
}

void http_serve_v2(struct hreq *r, const char *rest)
{
    (void)rest;
    size_t n = strlen(r->path);
    char *dec = calloc(1, n + 1), *clean = calloc(1, n + 4);
    long dn = dec && clean ? path_decode(r->path, n, dec) : -2;
    if (dn == -2) {
        hreq_respond(r, 500, NULL, NULL, NULL, 0);
        goto out;
    }
    if (dn < 0) { /* Go's server refuses the request line */
        static const char bad[] = "400 Bad Request";
        r->keep_alive = false;
        hreq_respond(r, 400, "text/plain; charset=utf-8", NULL, bad, sizeof(bad) - 1);
        goto out;
    }
    size_t cn = v2_mux_clean(dec, (size_t)dn, clean);
    if (cn != (size_t)dn || memcmp(clean, dec, cn) != 0) {
        struct buf loc = {0};
        int rv = buf_append(&loc, "Location: ", 10) || v2_path_escape(&loc, clean, cn);
        if (rv == 0 && r->query[0])
            rv = buf_append_byte(&loc, '?') || buf_append(&loc, r->query, strlen(r->query));
        if (rv == 0)
            rv = buf_append(&loc, "\r\n", 3); /* with the NUL */
        bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
        struct buf body = {0};
        if (rv == 0 && strcmp(r->method, "GET") == 0) {
            rv = buf_append(&body, "<a href=\"", 9) ||
                 buf_append(&body, loc.data + 10, loc.len - 13) ||
                 buf_append(&body, "\">Moved Permanently</a>.\n\n", 26);
        }
        if (rv == 0)
            hreq_respond(r, 301, get ? "text/html; charset=utf-8" : NULL, (char *)loc.data,
                         body.data, body.len);
        else
            hreq_respond(r, 500, NULL, NULL, NULL, 0);
        buf_free(&loc);
        buf_free(&body);
        goto out;
    }
    if (memchr(clean, 0, cn) != NULL && !under(clean, cn, "/v2/keys/")) {
        not_found(r);
        goto out;
    }
    if (is(clean, cn, "/v2/keys") || under(clean, cn, "/v2/keys/")) {
        serve_keys(r, clean + 8, cn - 8);
    } else if (is(clean, cn, "/v2/members") || under(clean, cn, "/v2/members/")) {
        const char *sub = clean + 11;
        while (*sub == '/')
            sub++;
        serve_members(r, 0, sub);
    } else if (is(clean, cn, "/v2/machines")) {
        serve_members(r, 2, "");
    } else if (is(clean, cn, "/v2/stats/self") || is(clean, cn, "/v2/stats/store") ||
               is(clean, cn, "/v2/stats/leader")) {
        serve_stats(r, clean + 10);
    } else {
        not_found(r);
    }
out:
    free(dec);
    free(clean);
}
