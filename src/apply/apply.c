/* apply/apply.c: etcd's KV request semantics, restated in C.
 *
 * The shape follows etcd 3.4's applierV3backend (server/etcdserver/apply.go)
 * and the request checks of its v3rpc layer (key.go), because clients see
 * every detail: the header revision of a historical read is the current
 * revision; a Txn evaluates every compare (nested ones too) against the
 * state before it writes; nested TxnResponses carry an empty header; a Range
 * fetches limit+1 kvs to tell |more|. */
#include "apply/apply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/metrics.h"

/* etcd's mvcc counters (metrics_txn.go): per transaction, its ranges, puts
 * and deletes, and a txn when it made more than one of them; counted on
 * the thread that runs it (a front loop's reads on that loop's shard).
 * Each counts under two names in etcd 3.4. */
static struct {
    metric_t range, put, del, txn, put_size;
} am;

void apply_metrics_register(void)
{
    static const struct {
        metric_t *slot;
        const char *name, *debug, *help;
    } c[] = {
        {&am.range, "etcd_mvcc_range_total", "etcd_debugging_mvcc_range_total",
         "Total number of ranges seen by this member."},
        {&am.put, "etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total",
         "Total number of puts seen by this member."},
        {&am.del, "etcd_mvcc_delete_total", "etcd_debugging_mvcc_delete_total",
         "Total number of deletes seen by this member."},
        {&am.txn, "etcd_mvcc_txn_total", "etcd_debugging_mvcc_txn_total",
         "Total number of txns seen by this member."},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct metrics_family *f =
            metrics_family(c[i].name, c[i].help, METRICS_COUNTER, NULL, NULL, 0);
        *c[i].slot = metrics_slot(metrics_series(f, NULL));
        metrics_alias(c[i].debug, c[i].help, f);
    }
    am.put_size = metrics_gauge("etcd_debugging_mvcc_total_put_size_in_bytes",
                                "The total size of put kv pairs seen by this member.");
}

/* A view reads either through a read transaction or through the write txn
 * of the request being applied; |changed| tracks whether the latter wrote,
 * which decides the revision its reads and responses report. It counts
 * what it did for the metrics (view_done). */
struct view {
    const struct apply_env *env;
    mvcc_read *rd;
    mvcc_txn *tx;
    int64_t begin_rev;
    int64_t cmp_rev; /* compares read here (0: the view's revision) */
    bool changed;
    unsigned ranges, puts, deletes;
    uint64_t put_size;
};

/* read_again: a read that will be read again elsewhere or from the start
 * (past the budget, or a detached read ended under it) is counted then */
static bool read_again(int rv)
{
    return rv == -E2BIG || rv == -ESTALE;
}

static void view_done(const struct view *v)
{
    if (v->ranges + v->puts + v->deletes > 1)
        metrics_inc(am.txn);
    if (v->ranges)
        metrics_add(am.range, v->ranges);
    if (v->puts) {
        metrics_add(am.put, v->puts);
        metrics_add(am.put_size, v->put_size);
    }
    if (v->deletes)
        metrics_add(am.del, v->deletes);
}

static int64_t view_rev(const struct view *v)
{
    return v->begin_rev + (v->changed ? 1 : 0);
}

static int view_range(struct view *v, const ProtobufCBinaryData *key,
                      const ProtobufCBinaryData *end, const struct mvcc_range_opts *o,
                      mvcc_kv_fn fn, void *arg, struct mvcc_range_result *res)
{
    v->ranges++;
    if (v->tx != NULL)
        return mvcc_txn_range(v->tx, key->data, key->len, end->data, end->len, o, fn, arg, res);
    return mvcc_read_range(v->rd, key->data, key->len, end->data, end->len, o, fn, arg, res);
}

/* ---- kv lists copied into the arena ---- */

struct kvlist {
    struct arena *a;
    Mvccpb__KeyValue **kvs;
    size_t n, cap;
    /* reply bound (env->max_range_bytes; 0: none) and the encoded bytes
     * collected so far */
    size_t max_bytes, bytes;
};

static Mvccpb__KeyValue *kv_copy(struct arena *a, const struct mvcc_kv *kv)
{
    Mvccpb__KeyValue *o = arena_alloc(a, sizeof(*o));
    if (o == NULL)
        return NULL;
    mvccpb__key_value__init(o);
    if (kv->key_len) {
        o->key.data = arena_dup(a, kv->key, kv->key_len);
        if (o->key.data == NULL)
            return NULL;
        o->key.len = kv->key_len;
    }
    if (kv->value_len) {
        o->value.data = arena_dup(a, kv->value, kv->value_len);
        if (o->value.data == NULL)
            return NULL;
        o->value.len = kv->value_len;
    }
    o->create_revision = kv->create_revision;
    o->mod_revision = kv->mod_revision;
    o->version = kv->version;
    o->lease = kv->lease;
    return o;
}

static int kvlist_push(struct kvlist *l, Mvccpb__KeyValue *kv)
{
    if (kv == NULL)
        return -ENOMEM;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        Mvccpb__KeyValue **p = arena_alloc(l->a, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        if (l->n)
            memcpy(p, l->kvs, l->n * sizeof(*p));
        l->kvs = p;
        l->cap = cap;
    }
    l->kvs[l->n++] = kv;
    return 0;
}

static size_t varint_len(uint64_t x)
{
    size_t n = 1;
    while (x >= 0x80) {
        x >>= 7;
        n++;
    }
    return n;
}

static size_t int_field_len(int64_t v)
{
    return v == 0 ? 0 : 1 + varint_len((uint64_t)v); /* proto3 leaves 0 out */
}

/* kvlist_charge counts one KeyValue as the reply will carry it (its
 * encoding in the repeated field: tag, length, the fields that are not
 * zero) against the bound, before it is copied: a Range past the bound
 * stops here, with nothing more in memory than the bound. The reply's
 * header, count and more are not counted (a few dozen bytes). */
static int kvlist_charge(struct kvlist *l, const struct mvcc_kv *kv, bool with_value)
{
    if (l->max_bytes == 0)
        return 0;
    size_t vlen = with_value ? kv->value_len : 0;
    size_t n = (kv->key_len ? 1 + varint_len(kv->key_len) + kv->key_len : 0) +
               (vlen ? 1 + varint_len(vlen) + vlen : 0) + int_field_len(kv->create_revision) +
               int_field_len(kv->mod_revision) + int_field_len(kv->version) +
               int_field_len(kv->lease);
    l->bytes += 1 + varint_len(n) + n;
    return l->bytes > l->max_bytes ? QERR_RANGE_TOO_LARGE : 0;
}

static int collect(const struct mvcc_kv *kv, void *arg)
{
    struct kvlist *l = arg;
    int rv = kvlist_charge(l, kv, true);
    if (rv != 0)
        return rv;
    return kvlist_push(l, kv_copy(l->a, kv));
}

/* collect_keys is collect without the value: a keys_only Range over many
 * keys copies no value into the response's memory. */
static int collect_keys(const struct mvcc_kv *kv, void *arg)
{
    struct kvlist *l = arg;
    int rv = kvlist_charge(l, kv, false);
    if (rv != 0)
        return rv;
    struct mvcc_kv k = *kv;
    k.value = NULL;
    k.value_len = 0;
    return kvlist_push(l, kv_copy(l->a, &k));
}

static Etcdserverpb__ResponseHeader *new_header(struct arena *a, int64_t rev)
{
    Etcdserverpb__ResponseHeader *h = arena_alloc(a, sizeof(*h));
    if (h != NULL) {
        etcdserverpb__response_header__init(h);
        h->revision = rev;
    }
    return h;
}

/* ---- Range ---- */

static int bytes_cmp(const ProtobufCBinaryData *x, const ProtobufCBinaryData *y)
{
    return bytes_compare(x->data, x->len, y->data, y->len);
}

static int int_cmp(int64_t x, int64_t y)
{
    return x < y ? -1 : x > y;
}

static int kv_cmp(const Mvccpb__KeyValue *x, const Mvccpb__KeyValue *y, int target)
{
    switch (target) {
    case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VERSION:
        return int_cmp(x->version, y->version);
    case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE:
        return int_cmp(x->create_revision, y->create_revision);
    case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD:
        return int_cmp(x->mod_revision, y->mod_revision);
    case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE:
        return bytes_cmp(&x->value, &y->value);
    default:
        return bytes_cmp(&x->key, &y->key);
    }
}

/* Stable merge sort: ties keep key order, as Go's sort does for small n. */
static void sort_kvs(Mvccpb__KeyValue **v, Mvccpb__KeyValue **tmp, size_t n, int target, int dir)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_kvs(v, tmp, h, target, dir);
    sort_kvs(v + h, tmp, n - h, target, dir);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (dir * kv_cmp(v[j], v[i], target) < 0)
            tmp[k++] = v[j++];
        else
            tmp[k++] = v[i++];
    }
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(*v));
}

static bool pruned(const Etcdserverpb__RangeRequest *r, const Mvccpb__KeyValue *kv)
{
    return (r->max_mod_revision != 0 && kv->mod_revision > r->max_mod_revision) ||
           (r->min_mod_revision != 0 && kv->mod_revision < r->min_mod_revision) ||
           (r->max_create_revision != 0 && kv->create_revision > r->max_create_revision) ||
           (r->min_create_revision != 0 && kv->create_revision < r->min_create_revision);
}

static int range_view(struct view *v, const Etcdserverpb__RangeRequest *r, struct arena *a,
                      Etcdserverpb__RangeResponse **out)
{
    Etcdserverpb__RangeResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__range_response__init(resp);

    int64_t limit = r->limit;
    bool filtered = r->min_mod_revision || r->max_mod_revision || r->min_create_revision ||
                    r->max_create_revision;
    if (r->sort_order != ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE || filtered)
        limit = 0; /* fetch all; sort and cut afterwards */
    if (limit > 0)
        limit++; /* one more tells |more| */

    struct mvcc_range_opts o = {.rev = r->revision, .limit = limit, .count_only = r->count_only};
    struct mvcc_range_result res = {0};
    struct kvlist l = {.a = a};
    /* the reply bound, on reads outside the batch only: a Range in a
     * write txn is part of an entry every member must apply alike, and
     * members' flags may differ */
    if (v->tx == NULL && v->env != NULL) {
        l.max_bytes = v->env->max_range_bytes;
        o.budget = v->env->read_budget;
    }
    /* count_only fetches nothing (mvcc); keys_only leaves the values in
     * the store unless they are sorted on */
    bool values = !r->keys_only || r->sort_target == ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    int rv = view_range(v, &r->key, &r->range_end, &o, values ? collect : collect_keys, &l, &res);
    if (rv != 0)
        return rv;

    if (filtered) {
        size_t k = 0;
        for (size_t i = 0; i < l.n; i++)
            if (!pruned(r, l.kvs[i]))
                l.kvs[k++] = l.kvs[i];
        l.n = k;
    }
    int order = r->sort_order;
    if (r->sort_target != ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY &&
        order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE)
        order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    if (order != ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE && l.n > 1) {
        Mvccpb__KeyValue **tmp = arena_alloc(a, l.n * sizeof(*tmp));
        if (tmp == NULL)
            return -ENOMEM;
        sort_kvs(l.kvs, tmp, l.n, r->sort_target,
                 order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND ? -1 : 1);
    }
    if (r->limit > 0 && l.n > (size_t)r->limit) {
        l.n = (size_t)r->limit;
        resp->more = 1;
    }
    if (r->keys_only)
        for (size_t i = 0; i < l.n; i++)
            l.kvs[i]->value = (ProtobufCBinaryData){0, NULL};

    resp->header = new_header(a, view_rev(v));
    if (resp->header == NULL)
        return -ENOMEM;
    resp->kvs = l.kvs;
    resp->n_kvs = l.n;
    resp->count = res.count;
    *out = resp;
    return 0;
}

int apply_range(const struct apply_env *env, mvcc_read *rd, const Etcdserverpb__RangeRequest *r,
                struct arena *a, Etcdserverpb__RangeResponse **out)
{
    struct view v = {.env = env, .rd = rd, .begin_rev = mvcc_read_rev(rd)};
    int rv = range_view(&v, r, a, out);
    if (!read_again(rv))
        view_done(&v);
    return rv;
}

/* ---- Put and DeleteRange inside a write txn ---- */

static const ProtobufCBinaryData no_end = {0, NULL};

static int put_view(struct view *v, const Etcdserverpb__PutRequest *r, struct arena *a,
                    Etcdserverpb__PutResponse **out)
{
    Etcdserverpb__PutResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__put_response__init(resp);

    const uint8_t *val = r->value.data;
    size_t val_len = r->value.len;
    int64_t lease = r->lease;
    if (r->ignore_value || r->ignore_lease || r->prev_kv) {
        struct mvcc_range_opts o = {0};
        struct mvcc_range_result res;
        struct kvlist l = {.a = a};
        int rv = view_range(v, &r->key, &no_end, &o, collect, &l, &res);
        if (rv != 0)
            return rv;
        if ((r->ignore_value || r->ignore_lease) && l.n == 0)
            return QERR_KEY_NOT_FOUND;
        if (r->ignore_value) {
            val = l.kvs[0]->value.data;
            val_len = l.kvs[0]->value.len;
        }
        if (r->ignore_lease)
            lease = l.kvs[0]->lease;
        if (r->prev_kv && l.n)
            resp->prev_kv = l.kvs[0];
    }
    int rv = mvcc_txn_put(v->tx, r->key.data, r->key.len, val, val_len, lease, NULL, NULL);
    if (rv != 0)
        return rv;
    v->puts++;
    v->put_size += r->key.len + val_len;
    v->changed = true;
    resp->header = new_header(a, view_rev(v));
    if (resp->header == NULL)
        return -ENOMEM;
    *out = resp;
    return 0;
}

static int delete_view(struct view *v, const Etcdserverpb__DeleteRangeRequest *r, struct arena *a,
                       Etcdserverpb__DeleteRangeResponse **out)
{
    Etcdserverpb__DeleteRangeResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__delete_range_response__init(resp);
    if (r->prev_kv) {
        struct mvcc_range_opts o = {0};
        struct mvcc_range_result res;
        struct kvlist l = {.a = a};
        int rv = view_range(v, &r->key, &r->range_end, &o, collect, &l, &res);
        if (rv != 0)
            return rv;
        resp->prev_kvs = l.kvs;
        resp->n_prev_kvs = l.n;
    }
    int64_t deleted = 0;
    int rv = mvcc_txn_delete_range(v->tx, r->key.data, r->key.len, r->range_end.data,
                                   r->range_end.len, NULL, NULL, &deleted);
    if (rv != 0)
        return rv;
    v->deletes++;
    if (deleted > 0)
        v->changed = true;
    resp->deleted = deleted;
    resp->header = new_header(a, view_rev(v));
    if (resp->header == NULL)
        return -ENOMEM;
    *out = resp;
    return 0;
}

static bool lease_exists(const struct apply_env *env, int64_t id)
{
    return env->leases != NULL && lessor_exists(env->leases, id);
}

int apply_put(const struct apply_env *env, const Etcdserverpb__PutRequest *r, struct arena *a,
              Etcdserverpb__PutResponse **out)
{
    if (r->lease != 0 && !lease_exists(env, r->lease))
        return QERR_LEASE_NOT_FOUND;
    struct view v = {.env = env, .begin_rev = mvcc_rev(env->kv)};
    int rv = mvcc_txn_begin(env->kv, &v.tx);
    if (rv != 0)
        return rv;
    rv = put_view(&v, r, a, out);
    mvcc_txn_end(v.tx);
    view_done(&v);
    return rv;
}

int apply_delete_range(const struct apply_env *env, const Etcdserverpb__DeleteRangeRequest *r,
                       struct arena *a, Etcdserverpb__DeleteRangeResponse **out)
{
    struct view v = {.env = env, .begin_rev = mvcc_rev(env->kv)};
    int rv = mvcc_txn_begin(env->kv, &v.tx);
    if (rv != 0)
        return rv;
    rv = delete_view(&v, r, a, out);
    mvcc_txn_end(v.tx);
    view_done(&v);
    return rv;
}

/* ---- Txn ---- */

struct path {
    bool *b;
    size_t n, cap;
    struct arena *a;
};

static int path_push(struct path *p, bool x)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        bool *b = arena_alloc(p->a, cap);
        if (b == NULL)
            return -ENOMEM;
        if (p->n)
            memcpy(b, p->b, p->n);
        p->b = b;
        p->cap = cap;
    }
    p->b[p->n++] = x;
    return 0;
}

static bool compare_kv(const Etcdserverpb__Compare *c, const Mvccpb__KeyValue *kv)
{
    int result = 0;
    int64_t want = 0;
    switch (c->target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE: {
        ProtobufCBinaryData v = {0, NULL};
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE)
            v = c->value;
        result = bytes_cmp(&kv->value, &v);
        break;
    }
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE:
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION)
            want = c->create_revision;
        result = int_cmp(kv->create_revision, want);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD:
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION)
            want = c->mod_revision;
        result = int_cmp(kv->mod_revision, want);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION:
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION)
            want = c->version;
        result = int_cmp(kv->version, want);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE:
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE)
            want = c->lease;
        result = int_cmp(kv->lease, want);
        break;
    default:
        break;
    }
    switch (c->result) {
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL:
        return result == 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL:
        return result != 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER:
        return result > 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS:
        return result < 0;
    default:
        return true;
    }
}

/* compare_one: every kv in the compare's range must satisfy it; an empty
 * range compares a zero kv, except that a VALUE compare always fails (there
 * is no way to name a missing value). A read error fails the compare. */
static int compare_one(struct view *v, const Etcdserverpb__Compare *c, struct arena *a, bool *ok)
{
    struct mvcc_range_opts o = {.rev = v->cmp_rev};
    struct mvcc_range_result res;
    struct kvlist l = {.a = a};
    int rv = view_range(v, &c->key, &c->range_end, &o, collect, &l, &res);
    if (rv == -ENOMEM)
        return rv;
    if (rv != 0) {
        *ok = false;
        return 0;
    }
    if (l.n == 0) {
        Mvccpb__KeyValue zero;
        mvccpb__key_value__init(&zero);
        *ok = c->target != ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE && compare_kv(c, &zero);
        return 0;
    }
    *ok = true;
    for (size_t i = 0; i < l.n && *ok; i++)
        *ok = compare_kv(c, l.kvs[i]);
    return 0;
}

/* txn_path evaluates the compares of |r| and of every nested txn on the
 * branch taken, depth first, all before anything is written. */
static int txn_path(struct view *v, const Etcdserverpb__TxnRequest *r, struct path *p)
{
    bool ok = true;
    for (size_t i = 0; i < r->n_compare && ok; i++) {
        int rv = compare_one(v, r->compare[i], p->a, &ok);
        if (rv != 0)
            return rv;
    }
    int rv = path_push(p, ok);
    if (rv != 0)
        return rv;
    size_t n = ok ? r->n_success : r->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? r->success : r->failure;
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
            continue;
        rv = txn_path(v, ops[i]->request_txn, p);
        if (rv != 0)
            return rv;
    }
    return 0;
}

enum check_kind { CHECK_PUT, CHECK_RANGE };

static int check_op(struct view *v, const Etcdserverpb__RequestOp *op, enum check_kind kind,
                    struct arena *a)
{
    if (kind == CHECK_PUT && op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT) {
        const Etcdserverpb__PutRequest *r = op->request_put;
        if (r->ignore_value || r->ignore_lease) {
            struct mvcc_range_opts o = {0};
            struct mvcc_range_result res = {0};
            int rv = view_range(v, &r->key, &no_end, &o, NULL, NULL, &res);
            if (rv != 0)
                return rv;
            if (res.count == 0)
                return QERR_KEY_NOT_FOUND;
        }
        if (r->lease != 0 && !lease_exists(v->env, r->lease))
            return QERR_LEASE_NOT_FOUND;
    }
    if (kind == CHECK_RANGE &&
        op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE) {
        int64_t rev = op->request_range->revision;
        if (rev == 0)
            return 0;
        if (rev > view_rev(v))
            return QERR_FUTURE_REV;
        if (rev < mvcc_compact_rev(v->env->kv))
            return QERR_COMPACTED;
    }
    (void)a;
    return 0;
}

/* check_path runs |kind| over the ops on the path taken, as etcd's
 * checkRequests; |*pi| walks the path in the order txn_path wrote it. */
static int check_path(struct view *v, const Etcdserverpb__TxnRequest *r, const struct path *p,
                      size_t *pi, enum check_kind kind, struct arena *a)
{
    bool ok = p->b[(*pi)++];
    size_t n = ok ? r->n_success : r->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? r->success : r->failure;
    for (size_t i = 0; i < n; i++) {
        int rv;
        if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
            rv = check_path(v, ops[i]->request_txn, p, pi, kind, a);
        else
            rv = check_op(v, ops[i], kind, a);
        if (rv != 0)
            return rv;
    }
    return 0;
}

static int txn_exec(struct view *v, const Etcdserverpb__TxnRequest *r, const struct path *p,
                    size_t *pi, struct arena *a, Etcdserverpb__TxnResponse **out)
{
    bool ok = p->b[(*pi)++];
    size_t n = ok ? r->n_success : r->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? r->success : r->failure;

    Etcdserverpb__TxnResponse *resp = arena_alloc(a, sizeof(*resp));
    Etcdserverpb__ResponseOp **rops = arena_alloc(a, (n ? n : 1) * sizeof(*rops));
    if (resp == NULL || rops == NULL)
        return -ENOMEM;
    etcdserverpb__txn_response__init(resp);
    resp->header = new_header(a, 0);
    if (resp->header == NULL)
        return -ENOMEM;
    resp->succeeded = ok;
    resp->responses = rops;
    resp->n_responses = n;
    for (size_t i = 0; i < n; i++) {
        Etcdserverpb__ResponseOp *ro = arena_alloc(a, sizeof(*ro));
        if (ro == NULL)
            return -ENOMEM;
        etcdserverpb__response_op__init(ro);
        rops[i] = ro;
        int rv = 0;
        switch (ops[i]->request_case) {
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
            ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
            rv = range_view(v, ops[i]->request_range, a, &ro->response_range);
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
            ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
            rv = put_view(v, ops[i]->request_put, a, &ro->response_put);
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
            ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE;
            rv = delete_view(v, ops[i]->request_delete_range, a, &ro->response_delete_range);
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
            ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
            rv = txn_exec(v, ops[i]->request_txn, p, pi, a, &ro->response_txn);
            break;
        default:
            break; /* refused by apply_check_txn */
        }
        if (rv != 0)
            return rv;
    }
    *out = resp;
    return 0;
}

static int txn_view(struct view *v, const Etcdserverpb__TxnRequest *r, bool write, struct arena *a,
                    Etcdserverpb__TxnResponse **out)
{
    struct path p = {.a = a};
    int rv = txn_path(v, r, &p);
    size_t pi = 0;
    if (rv == 0 && write)
        rv = check_path(v, r, &p, &pi, CHECK_PUT, a);
    pi = 0;
    if (rv == 0)
        rv = check_path(v, r, &p, &pi, CHECK_RANGE, a);
    pi = 0;
    if (rv == 0)
        rv = txn_exec(v, r, &p, &pi, a, out);
    return rv;
}

int apply_txn_read(const struct apply_env *env, mvcc_read *rd, const Etcdserverpb__TxnRequest *r,
                   struct arena *a, Etcdserverpb__TxnResponse **out)
{
    struct view v = {.env = env, .rd = rd, .begin_rev = mvcc_read_rev(rd)};
    int rv = txn_view(&v, r, false, a, out);
    if (!read_again(rv))
        view_done(&v);
    if (rv == 0)
        (*out)->header->revision = view_rev(&v);
    return rv;
}

int apply_txn(const struct apply_env *env, const Etcdserverpb__TxnRequest *r, struct arena *a,
              Etcdserverpb__TxnResponse **out)
{
    struct view v = {.env = env, .begin_rev = mvcc_rev(env->kv)};
    int rv = mvcc_txn_begin(env->kv, &v.tx);
    if (rv != 0)
        return rv;
    /* a revision resumed after a restart (mvcc.h, "Big revisions in
     * steps"): the compares were read before its first write, so they
     * are read at the revision before it, whatever it has written */
    if (mvcc_txn_resumed(v.tx))
        v.cmp_rev = mvcc_txn_begin_rev(v.tx);
    rv = txn_view(&v, r, !apply_txn_is_read_only(r), a, out);
    int64_t rev = mvcc_txn_end(v.tx);
    view_done(&v);
    if (rv == 0)
        (*out)->header->revision = rev;
    return rv;
}

int apply_compact(const struct apply_env *env, const Etcdserverpb__CompactionRequest *r,
                  struct arena *a, Etcdserverpb__CompactionResponse **out)
{
    int rv = mvcc_compact(env->kv, r->revision);
    if (rv != 0)
        return rv;
    Etcdserverpb__CompactionResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__compaction_response__init(resp);
    resp->header = new_header(a, mvcc_rev(env->kv));
    if (resp->header == NULL)
        return -ENOMEM;
    *out = resp;
    return 0;
}

/* ---- checks (etcd's v3rpc layer) ---- */

int apply_check_range(const Etcdserverpb__RangeRequest *r)
{
    if (r->key.len == 0)
        return QERR_EMPTY_KEY;
    if ((unsigned)r->sort_order > ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND ||
        (unsigned)r->sort_target > ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE)
        return QERR_INVALID_SORT;
    return 0;
}

int apply_check_put(const Etcdserverpb__PutRequest *r)
{
    if (r->key.len == 0)
        return QERR_EMPTY_KEY;
    if (r->ignore_value && r->value.len != 0)
        return QERR_VALUE_PROVIDED;
    if (r->ignore_lease && r->lease != 0)
        return QERR_LEASE_PROVIDED;
    return 0;
}

int apply_check_delete_range(const Etcdserverpb__DeleteRangeRequest *r)
{
    return r->key.len == 0 ? QERR_EMPTY_KEY : 0;
}

/* bytewise order of two strings, as the store orders keys */
static int key_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

static const uint8_t reserved_lo[] = {0, 'z', 'k'}, reserved_hi[] = {0, 'z', 'l'};

enum apply_reserved apply_reserved_span(const uint8_t *key, size_t key_len, const uint8_t *end,
                                        size_t end_len, struct apply_span *overlap)
{
    const uint8_t *lo = reserved_lo, *hi = reserved_hi;
    size_t n = sizeof(reserved_lo);
    if (end_len == 0) { /* one key */
        if (key_len < n || memcmp(key, lo, n) != 0)
            return APPLY_RESERVED_NONE;
        return APPLY_RESERVED_INSIDE;
    }
    bool from_key = end_len == 1 && end[0] == 0;
    if (key_cmp(key, key_len, hi, n) >= 0 || (!from_key && key_cmp(end, end_len, lo, n) <= 0) ||
        (!from_key && key_cmp(key, key_len, end, end_len) >= 0))
        return APPLY_RESERVED_NONE; /* above, below, or an empty range */
    bool starts_inside = key_cmp(key, key_len, lo, n) >= 0;
    bool ends_inside = !from_key && key_cmp(end, end_len, hi, n) <= 0;
    if (starts_inside && ends_inside)
        return APPLY_RESERVED_INSIDE;
    if (overlap != NULL) {
        overlap->key = starts_inside ? key : lo;
        overlap->key_len = starts_inside ? key_len : n;
        overlap->end = ends_inside ? end : hi;
        overlap->end_len = ends_inside ? end_len : n;
    }
    return APPLY_RESERVED_WIDE;
}

int apply_check_reserved_put(const Etcdserverpb__PutRequest *r)
{
    return apply_reserved_span(r->key.data, r->key.len, NULL, 0, NULL) == APPLY_RESERVED_INSIDE
               ? QERR_RESERVED_KEY
               : 0;
}

int apply_check_reserved_delete_range(const Etcdserverpb__DeleteRangeRequest *r)
{
    return apply_reserved_span(r->key.data, r->key.len, r->range_end.data, r->range_end.len,
                               NULL) == APPLY_RESERVED_INSIDE
               ? QERR_RESERVED_KEY
               : 0;
}

/* txn_ops_each calls |fn| with every op of |r| that is not a Txn, those of
 * nested Txns included, success branch before failure, in order; the first
 * non-zero answer ends the walk and is returned. */
static int txn_ops_each(const Etcdserverpb__TxnRequest *r,
                        int (*fn)(const Etcdserverpb__RequestOp *op, void *arg), void *arg)
{
    Etcdserverpb__RequestOp *const *br[2] = {r->success, r->failure};
    size_t nb[2] = {r->n_success, r->n_failure};
    for (int b = 0; b < 2; b++) {
        for (size_t i = 0; i < nb[b]; i++) {
            const Etcdserverpb__RequestOp *op = br[b][i];
            int rv = op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN
                         ? txn_ops_each(op->request_txn, fn, arg)
                         : fn(op, arg);
            if (rv != 0)
                return rv;
        }
    }
    return 0;
}

struct wide_deletes {
    int (*fn)(const struct apply_span *overlap, void *arg);
    void *arg;
};

static int wide_delete_op(const Etcdserverpb__RequestOp *op, void *arg)
{
    const struct wide_deletes *w = arg;
    struct apply_span sp;
    if (op->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE)
        return 0;
    const Etcdserverpb__DeleteRangeRequest *d = op->request_delete_range;
    if (apply_reserved_span(d->key.data, d->key.len, d->range_end.data, d->range_end.len, &sp) !=
        APPLY_RESERVED_WIDE)
        return 0;
    return w->fn(&sp, w->arg);
}

int apply_txn_wide_deletes(const Etcdserverpb__TxnRequest *r,
                           int (*fn)(const struct apply_span *overlap, void *arg), void *arg)
{
    struct wide_deletes w = {fn, arg};
    return txn_ops_each(r, wide_delete_op, &w);
}

static int reserved_op(const Etcdserverpb__RequestOp *op, void *arg)
{
    (void)arg;
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
        return apply_check_reserved_put(op->request_put);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
        return apply_check_reserved_delete_range(op->request_delete_range);
    default:
        return 0;
    }
}

int apply_check_reserved_txn(const Etcdserverpb__TxnRequest *r)
{
    return txn_ops_each(r, reserved_op, NULL);
}

static int check_request_op(const Etcdserverpb__RequestOp *op, size_t max_ops);

static int check_txn_ops(const Etcdserverpb__TxnRequest *r, size_t max_ops)
{
    size_t opc = r->n_compare;
    if (opc < r->n_success)
        opc = r->n_success;
    if (opc < r->n_failure)
        opc = r->n_failure;
    if (opc > max_ops)
        return QERR_TOO_MANY_OPS;
    for (size_t i = 0; i < r->n_compare; i++)
        if (r->compare[i]->key.len == 0)
            return QERR_EMPTY_KEY;
    for (size_t i = 0; i < r->n_success; i++) {
        int rv = check_request_op(r->success[i], max_ops);
        if (rv != 0)
            return rv;
    }
    for (size_t i = 0; i < r->n_failure; i++) {
        int rv = check_request_op(r->failure[i], max_ops);
        if (rv != 0)
            return rv;
    }
    return 0;
}

static int check_request_op(const Etcdserverpb__RequestOp *op, size_t max_ops)
{
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
        return apply_check_range(op->request_range);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
        return apply_check_put(op->request_put);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
        return apply_check_delete_range(op->request_delete_range);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
        return check_txn_ops(op->request_txn, max_ops);
    default:
        return QERR_KEY_NOT_FOUND; /* an empty op, as etcd answers */
    }
}

/* Duplicate-key detection, etcd's checkIntervals: a put may not share its
 * key with another put or fall inside a delete of the same branch, across
 * nesting levels; the then- and else-branches of one nested txn may put the
 * same key (only one of them runs). Delete ranges compare as byte strings,
 * so a from-key delete (range_end "\0") overlaps nothing, as in etcd. */
struct keyset {
    const ProtobufCBinaryData **k;
    size_t n, cap;
};
struct ivset {
    const ProtobufCBinaryData **begin, **end; /* end NULL: the point begin */
    size_t n, cap;
};

static bool key_eq(const ProtobufCBinaryData *x, const ProtobufCBinaryData *y)
{
    return x->len == y->len && (x->len == 0 || memcmp(x->data, y->data, x->len) == 0);
}

static bool keyset_has(const struct keyset *s, const ProtobufCBinaryData *k)
{
    for (size_t i = 0; i < s->n; i++)
        if (key_eq(s->k[i], k))
            return true;
    return false;
}

static int keyset_add(struct keyset *s, const ProtobufCBinaryData *k)
{
    if (keyset_has(s, k))
        return 0; /* a set, as etcd's map */
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        const ProtobufCBinaryData **p = realloc(s->k, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        s->k = p;
        s->cap = cap;
    }
    s->k[s->n++] = k;
    return 0;
}

static int ivset_add(struct ivset *s, const ProtobufCBinaryData *b, const ProtobufCBinaryData *e)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        const ProtobufCBinaryData **pb = realloc(s->begin, cap * sizeof(*pb));
        if (pb == NULL)
            return -ENOMEM;
        s->begin = pb;
        const ProtobufCBinaryData **pe = realloc(s->end, cap * sizeof(*pe));
        if (pe == NULL)
            return -ENOMEM;
        s->end = pe;
        s->cap = cap;
    }
    s->begin[s->n] = b;
    s->end[s->n] = e;
    s->n++;
    return 0;
}

static bool ivset_hits(const struct ivset *s, const ProtobufCBinaryData *k)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->end[i] == NULL) {
            if (key_eq(s->begin[i], k))
                return true;
        } else if (bytes_cmp(s->begin[i], k) <= 0 && bytes_cmp(k, s->end[i]) < 0) {
            return true;
        }
    }
    return false;
}

static void sets_free(struct keyset *p, struct ivset *d)
{
    free(p->k);
    free(d->begin);
    free(d->end);
    memset(p, 0, sizeof(*p));
    memset(d, 0, sizeof(*d));
}

static int check_intervals(Etcdserverpb__RequestOp **ops, size_t n, struct keyset *puts,
                           struct ivset *dels)
{
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0; i++) {
        if (ops[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE)
            continue;
        const Etcdserverpb__DeleteRangeRequest *d = ops[i]->request_delete_range;
        rv = ivset_add(dels, &d->key, d->range_end.len ? &d->range_end : NULL);
    }
    for (size_t i = 0; i < n && rv == 0; i++) {
        if (ops[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
            continue;
        const Etcdserverpb__TxnRequest *t = ops[i]->request_txn;
        struct keyset pthen = {0}, pelse = {0};
        struct ivset dthen = {0}, delse = {0};
        rv = check_intervals(t->success, t->n_success, &pthen, &dthen);
        if (rv == 0)
            rv = check_intervals(t->failure, t->n_failure, &pelse, &delse);
        for (size_t k = 0; rv == 0 && k < pthen.n; k++) {
            if (keyset_has(puts, pthen.k[k]) || ivset_hits(dels, pthen.k[k]))
                rv = QERR_DUPLICATE_KEY;
            else
                rv = keyset_add(puts, pthen.k[k]);
        }
        for (size_t k = 0; rv == 0 && k < pelse.n; k++) {
            if ((keyset_has(puts, pelse.k[k]) && !keyset_has(&pthen, pelse.k[k])) ||
                ivset_hits(dels, pelse.k[k]))
                rv = QERR_DUPLICATE_KEY;
            else
                rv = keyset_add(puts, pelse.k[k]);
        }
        for (size_t k = 0; rv == 0 && k < dthen.n; k++)
            rv = ivset_add(dels, dthen.begin[k], dthen.end[k]);
        for (size_t k = 0; rv == 0 && k < delse.n; k++)
            rv = ivset_add(dels, delse.begin[k], delse.end[k]);
        sets_free(&pthen, &dthen);
        sets_free(&pelse, &delse);
    }
    for (size_t i = 0; i < n && rv == 0; i++) {
        if (ops[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
            continue;
        const ProtobufCBinaryData *k = &ops[i]->request_put->key;
        if (keyset_has(puts, k) || ivset_hits(dels, k))
            rv = QERR_DUPLICATE_KEY;
        else
            rv = keyset_add(puts, k);
    }
    return rv;
}

int apply_check_txn(const Etcdserverpb__TxnRequest *r, size_t max_txn_ops)
{
    int rv = check_txn_ops(r, max_txn_ops);
    if (rv != 0)
        return rv;
    struct keyset puts = {0};
    struct ivset dels = {0};
    rv = check_intervals(r->success, r->n_success, &puts, &dels);
    sets_free(&puts, &dels);
    if (rv == 0)
        rv = check_intervals(r->failure, r->n_failure, &puts, &dels);
    sets_free(&puts, &dels);
    return rv;
}

bool apply_txn_is_read_only(const Etcdserverpb__TxnRequest *r)
{
    for (size_t i = 0; i < r->n_success; i++)
        if (r->success[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE)
            return false;
    for (size_t i = 0; i < r->n_failure; i++)
        if (r->failure[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE)
            return false;
    return true;
}

/* ---- leases ---- */

int apply_lease_grant(const struct apply_env *env, const Etcdserverpb__LeaseGrantRequest *r,
                      struct arena *a, Etcdserverpb__LeaseGrantResponse **out)
{
    if (env->leases == NULL)
        return -ENOTSUP;
    int64_t granted = 0;
    int rv = lessor_grant(env->leases, r->id, r->ttl, env->now_ms, &granted);
    if (rv != 0)
        return rv;
    Etcdserverpb__LeaseGrantResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__lease_grant_response__init(resp);
    resp->header = new_header(a, mvcc_rev(env->kv));
    if (resp->header == NULL)
        return -ENOMEM;
    resp->id = r->id;
    resp->ttl = granted;
    *out = resp;
    return 0;
}

struct keylist {
    struct arena *a;
    ProtobufCBinaryData *k;
    size_t n;
    int err;
};

static void key_copy(const uint8_t *key, size_t len, void *arg)
{
    struct keylist *l = arg;
    uint8_t *p = arena_dup(l->a, key, len);
    if (p == NULL)
        l->err = -ENOMEM;
    l->k[l->n++] = (ProtobufCBinaryData){len, p};
}

static int key_order(const void *x, const void *y)
{
    return bytes_cmp(x, y);
}

int apply_lease_revoke(const struct apply_env *env, const Etcdserverpb__LeaseRevokeRequest *r,
                       struct arena *a, Etcdserverpb__LeaseRevokeResponse **out)
{
    if (env->leases == NULL || !lessor_exists(env->leases, r->id))
        return QERR_LEASE_NOT_FOUND;
    long n = lessor_keys(env->leases, r->id, NULL, NULL);
    struct keylist l = {.a = a, .k = arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof(*l.k))};
    if (l.k == NULL)
        return -ENOMEM;
    lessor_keys(env->leases, r->id, key_copy, &l);
    if (l.err != 0)
        return l.err;
    qsort(l.k, l.n, sizeof(*l.k), key_order);
    /* the deletions detach the keys through the store's observer */
    mvcc_txn *tx;
    int rv = mvcc_txn_begin(env->kv, &tx);
    if (rv != 0)
        return rv;
    for (size_t i = 0; i < l.n && rv == 0; i++) {
        int64_t deleted;
        rv = mvcc_txn_delete_range(tx, l.k[i].data, l.k[i].len, NULL, 0, NULL, NULL, &deleted);
    }
    mvcc_txn_end(tx);
    view_done(&(struct view){.deletes = (unsigned)l.n}); /* etcd: a DeleteRange per key */
    if (rv == 0)
        rv = lessor_remove(env->leases, r->id);
    if (rv != 0)
        return rv;
    Etcdserverpb__LeaseRevokeResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__lease_revoke_response__init(resp);
    resp->header = new_header(a, mvcc_rev(env->kv));
    if (resp->header == NULL)
        return -ENOMEM;
    *out = resp;
    return 0;
}

int apply_lease_checkpoint(const struct apply_env *env,
                           const Etcdserverpb__LeaseCheckpointRequest *r, struct arena *a,
                           Etcdserverpb__LeaseCheckpointResponse **out)
{
    if (env->leases == NULL)
        return -ENOTSUP;
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        int rv =
            lessor_checkpoint(env->leases, r->checkpoints[i]->id, r->checkpoints[i]->remaining_ttl);
        if (rv != 0)
            return rv;
    }
    Etcdserverpb__LeaseCheckpointResponse *resp = arena_alloc(a, sizeof(*resp));
    if (resp == NULL)
        return -ENOMEM;
    etcdserverpb__lease_checkpoint_response__init(resp);
    resp->header = new_header(a, mvcc_rev(env->kv));
    if (resp->header == NULL)
        return -ENOMEM;
    *out = resp;
    return 0;
}
