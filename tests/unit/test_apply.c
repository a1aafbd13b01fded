/* Unit tests for apply/apply.c on a real store in a temp dir: txn compares,
 * the request checks (etcd's v3rpc layer), and Range/Put/DeleteRange
 * semantics. The differential test compares all of it with etcd; these pin
 * the rules down one by one. */
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#ifdef __SANITIZE_ADDRESS__
size_t __sanitizer_get_current_allocated_bytes(void); /* ASan's runtime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply.h"
#include "base/err.h"

static char dir[64];
static backend *be;
static mvcc_store *kv;
static struct apply_env env;
static struct arena ar;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/apply-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    struct backend_options o = {.dir = dir, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &kv), 0);
    env = (struct apply_env){.kv = kv};
}

static void teardown(void)
{
    arena_free(&ar);
    mvcc_close(kv);
    backend_close(be);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(apply, .init = setup, .fini = teardown);

#define B(s) ((ProtobufCBinaryData){strlen(s), (uint8_t *)(s)})

static int put(const char *k, const char *v)
{
    Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
    r.key = B(k);
    r.value = B(v);
    Etcdserverpb__PutResponse *resp;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    int rv = apply_put(&env, &r, &ar, &resp);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    return rv == 0 ? (int)resp->header->revision : rv;
}

static int txn(const Etcdserverpb__TxnRequest *t, Etcdserverpb__TxnResponse **out)
{
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    int rv = apply_txn(&env, t, &ar, out);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    return rv;
}

/* one compare, no ops: did it hold? */
static bool holds(Etcdserverpb__Compare *c)
{
    Etcdserverpb__Compare *cs[1] = {c};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cs;
    t.n_compare = 1;
    Etcdserverpb__TxnResponse *r;
    cr_assert_eq(txn(&t, &r), 0);
    return r->succeeded;
}

static Etcdserverpb__Compare cmp_int(const char *key, Etcdserverpb__Compare__CompareTarget target,
                                     Etcdserverpb__Compare__CompareResult result, int64_t v)
{
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT;
    c.key = B(key);
    c.target = target;
    c.result = result;
    switch (target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION:
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c.version = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE:
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c.create_revision = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD:
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c.mod_revision = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE:
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        c.lease = v;
        break;
    default:
        cr_assert_fail("cmp_int is for integer targets");
    }
    return c;
}

#define EQ ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL
#define GT ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER
#define LT ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS
#define NE ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL
#define VER ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION
#define CRE ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE
#define MOD ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD
#define VAL ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE
#define LEA ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE

Test(apply, compare_every_int_target_and_result)
{
    put("k", "a"); /* rev 2: create 2, version 1 */
    put("k", "b"); /* rev 3: mod 3, version 2 */
    struct {
        Etcdserverpb__Compare__CompareTarget target;
        int64_t actual;
    } t[] = {{VER, 2}, {CRE, 2}, {MOD, 3}, {LEA, 0}};
    struct {
        Etcdserverpb__Compare__CompareResult result;
        int64_t delta;
        bool want;
    } cases[] = {{EQ, 0, true},  {EQ, 1, false}, {NE, 1, true}, {NE, 0, false},
                 {GT, -1, true}, {GT, 0, false}, {LT, 1, true}, {LT, 0, false}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            Etcdserverpb__Compare c =
                cmp_int("k", t[i].target, cases[k].result, t[i].actual + cases[k].delta);
            cr_assert_eq(holds(&c), cases[k].want, "target %d result %d value %lld", t[i].target,
                         cases[k].result, (long long)(t[i].actual + cases[k].delta));
        }
    }
}

Test(apply, compare_value_bytes_and_missing_keys)
{
    put("k", "b");
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT;
    c.key = B("k");
    c.target = VAL;
    c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    c.value = B("b");
    c.result = EQ;
    cr_assert(holds(&c));
    c.value = B("a");
    c.result = GT;
    cr_assert(holds(&c), "byte order: b > a");
    c.value = B("bb");
    c.result = LT;
    cr_assert(holds(&c), "a proper prefix is smaller");
    /* a missing key: VALUE compares always fail, others compare zero */
    c.key = B("missing");
    c.result = NE;
    c.value = B("x");
    cr_assert(!holds(&c), "no value to compare on a missing key, even with !=");
    Etcdserverpb__Compare v = cmp_int("missing", VER, EQ, 0);
    cr_assert(holds(&v), "a missing key has version 0");
    Etcdserverpb__Compare m = cmp_int("missing", CRE, EQ, 0);
    cr_assert(holds(&m));
}

Test(apply, compare_union_mismatch_compares_zero)
{
    put("k", "v");
    /* target MOD but the value given in the version field: compared as 0 */
    Etcdserverpb__Compare c = cmp_int("k", VER, GT, 0);
    c.target = MOD;
    cr_assert(holds(&c), "mod > 0 (the given version is ignored)");
    c.version = 1000000;
    cr_assert(holds(&c));
}

Test(apply, compare_over_a_range_needs_every_key)
{
    put("r/a", "1");
    put("r/b", "1");
    put("r/c", "2");
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT;
    c.key = B("r/");
    c.range_end = B("r0");
    c.target = VAL;
    c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    c.value = B("1");
    c.result = EQ;
    cr_assert(!holds(&c), "r/c differs");
    c.range_end = B("r/c");
    cr_assert(holds(&c), "[r/, r/c) are all 1");
}

Test(apply, nested_compares_see_the_state_before_the_txn)
{
    /* outer: put x; nested txn compares version(x) == 0: evaluated before
     * the put, so it holds (as in etcd's compareToPath) */
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = B("x");
    p.value = B("1");
    Etcdserverpb__RequestOp put_op = ETCDSERVERPB__REQUEST_OP__INIT;
    put_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    put_op.request_put = &p;
    Etcdserverpb__Compare inner_c = cmp_int("x", VER, EQ, 0);
    Etcdserverpb__Compare *inner_cs[1] = {&inner_c};
    Etcdserverpb__TxnRequest inner = ETCDSERVERPB__TXN_REQUEST__INIT;
    inner.compare = inner_cs;
    inner.n_compare = 1;
    Etcdserverpb__RequestOp inner_op = ETCDSERVERPB__REQUEST_OP__INIT;
    inner_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    inner_op.request_txn = &inner;
    Etcdserverpb__RequestOp *ops[2] = {&put_op, &inner_op};
    Etcdserverpb__TxnRequest outer = ETCDSERVERPB__TXN_REQUEST__INIT;
    outer.success = ops;
    outer.n_success = 2;
    Etcdserverpb__TxnResponse *r;
    cr_assert_eq(txn(&outer, &r), 0);
    cr_assert(r->succeeded);
    cr_assert(r->responses[1]->response_txn->succeeded);
    cr_assert_not_null(r->responses[1]->response_txn->header, "nested headers are present");
    cr_assert_eq(r->responses[1]->response_txn->header->revision, 0, "and empty, as etcd");
    cr_assert_eq(r->header->revision, 2);
}

/* ---- checks ---- */

static Etcdserverpb__RequestOp *op_put(const char *k)
{
    Etcdserverpb__PutRequest *p = arena_alloc(&ar, sizeof(*p));
    etcdserverpb__put_request__init(p);
    p->key = B(k);
    Etcdserverpb__RequestOp *o = arena_alloc(&ar, sizeof(*o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o->request_put = p;
    return o;
}

static Etcdserverpb__RequestOp *op_del(const char *k, const char *end)
{
    Etcdserverpb__DeleteRangeRequest *d = arena_alloc(&ar, sizeof(*d));
    etcdserverpb__delete_range_request__init(d);
    d->key = B(k);
    if (end != NULL)
        d->range_end = (ProtobufCBinaryData){end[0] ? strlen(end) : 1, (uint8_t *)end};
    Etcdserverpb__RequestOp *o = arena_alloc(&ar, sizeof(*o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    o->request_delete_range = d;
    return o;
}

static Etcdserverpb__TxnRequest *txn_of(Etcdserverpb__RequestOp **then, size_t nt,
                                        Etcdserverpb__RequestOp **els, size_t ne)
{
    Etcdserverpb__TxnRequest *t = arena_alloc(&ar, sizeof(*t));
    etcdserverpb__txn_request__init(t);
    t->success = then;
    t->n_success = nt;
    t->failure = els;
    t->n_failure = ne;
    return t;
}

static Etcdserverpb__RequestOp *op_txn(Etcdserverpb__TxnRequest *t)
{
    Etcdserverpb__RequestOp *o = arena_alloc(&ar, sizeof(*o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    o->request_txn = t;
    return o;
}

Test(apply, check_txn_duplicates_as_etcd)
{
    Etcdserverpb__RequestOp *a1[] = {op_put("a"), op_put("a")};
    cr_assert_eq(apply_check_txn(txn_of(a1, 2, NULL, 0), 128), QERR_DUPLICATE_KEY);
    Etcdserverpb__RequestOp *a2[] = {op_del("a", "z"), op_put("m")};
    cr_assert_eq(apply_check_txn(txn_of(a2, 2, NULL, 0), 128), QERR_DUPLICATE_KEY,
                 "a put inside a deleted range");
    Etcdserverpb__RequestOp *a3[] = {op_del("a", ""), op_put("m")};
    cr_assert_eq(apply_check_txn(txn_of(a3, 2, NULL, 0), 128), 0,
                 "range_end \"\\0\" overlaps nothing in etcd's interval check");
    Etcdserverpb__RequestOp *a4[] = {op_put("a")};
    Etcdserverpb__RequestOp *a5[] = {op_put("a")};
    cr_assert_eq(apply_check_txn(txn_of(a4, 1, a5, 1), 128), 0, "then and else may share a key");
    /* the case the differential test found: then/else of a nested txn put
     * the same key, and the outer else puts it again */
    Etcdserverpb__RequestOp *in_then[] = {op_put("a/2")}, *in_else[] = {op_put("a/2")};
    Etcdserverpb__RequestOp *mid_then[] = {op_txn(txn_of(in_then, 1, in_else, 1))};
    Etcdserverpb__RequestOp *mid_else[] = {op_put("a/2")};
    Etcdserverpb__RequestOp *top[] = {op_txn(txn_of(mid_then, 1, mid_else, 1))};
    cr_assert_eq(apply_check_txn(txn_of(top, 1, NULL, 0), 128), 0);
    /* but a nested put and an outer put of the same key collide */
    Etcdserverpb__RequestOp *n_then[] = {op_put("b")};
    Etcdserverpb__RequestOp *coll[] = {op_txn(txn_of(n_then, 1, NULL, 0)), op_put("b")};
    cr_assert_eq(apply_check_txn(txn_of(coll, 2, NULL, 0), 128), QERR_DUPLICATE_KEY);
}

Test(apply, check_txn_limits_and_empty_ops)
{
    Etcdserverpb__RequestOp *ops[129];
    char keys[129][8];
    for (int i = 0; i < 129; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        ops[i] = op_put(keys[i]);
    }
    cr_assert_eq(apply_check_txn(txn_of(ops, 128, NULL, 0), 128), 0);
    cr_assert_eq(apply_check_txn(txn_of(ops, 129, NULL, 0), 128), QERR_TOO_MANY_OPS);
    Etcdserverpb__RequestOp empty = ETCDSERVERPB__REQUEST_OP__INIT;
    Etcdserverpb__RequestOp *e[] = {&empty};
    cr_assert_eq(apply_check_txn(txn_of(e, 1, NULL, 0), 128), QERR_KEY_NOT_FOUND,
                 "etcd answers an empty op with 'key not found'");
    Etcdserverpb__RequestOp *ek[] = {op_put("")};
    cr_assert_eq(apply_check_txn(txn_of(ek, 1, NULL, 0), 128), QERR_EMPTY_KEY);
}

/* ---- Range, Put, DeleteRange ---- */

static Etcdserverpb__RangeResponse *range(Etcdserverpb__RangeRequest *r, int *err)
{
    mvcc_read *rd;
    cr_assert_eq(mvcc_read_begin(kv, &rd), 0);
    Etcdserverpb__RangeResponse *resp = NULL;
    *err = apply_range(&env, rd, r, &ar, &resp);
    mvcc_read_end(rd);
    return resp;
}

Test(apply, range_sort_limit_filters)
{
    put("a", "3");
    put("b", "1");
    put("c", "2");
    put("b", "1x"); /* b: version 2, mod 5 */
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = B("a");
    r.range_end = B("z");
    r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    int err;
    Etcdserverpb__RangeResponse *x = range(&r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(x->n_kvs, 3);
    cr_assert_eq(memcmp(x->kvs[0]->key.data, "b", 1), 0, "VALUE with order NONE sorts ascending");
    r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    r.limit = 2;
    x = range(&r, &err);
    cr_assert_eq(x->n_kvs, 2);
    cr_assert(x->more);
    cr_assert_eq(x->count, 3);
    cr_assert_eq(memcmp(x->kvs[0]->key.data, "a", 1), 0, "value 3 first");
    Etcdserverpb__RangeRequest f = ETCDSERVERPB__RANGE_REQUEST__INIT;
    f.key = B("a");
    f.range_end = B("z");
    f.min_mod_revision = 4;
    x = range(&f, &err);
    cr_assert_eq(x->n_kvs, 2, "c (mod 4) and b (mod 5)");
    cr_assert_eq(x->count, 3, "count is before filtering, as etcd");
    f.min_mod_revision = 0;
    f.max_create_revision = 2;
    f.keys_only = 1;
    x = range(&f, &err);
    cr_assert_eq(x->n_kvs, 1);
    cr_assert_eq(x->kvs[0]->value.len, 0);
    Etcdserverpb__RangeRequest h = ETCDSERVERPB__RANGE_REQUEST__INIT;
    h.key = B("b");
    h.revision = 3;
    x = range(&h, &err);
    cr_assert_eq(x->kvs[0]->version, 1);
    cr_assert_eq(x->header->revision, 5, "a historical read's header is the current revision");
    h.revision = 6;
    range(&h, &err);
    cr_assert_eq(err, QERR_FUTURE_REV);
}

Test(apply, put_ignore_value_prev_kv_and_leases)
{
    Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
    Etcdserverpb__PutResponse *resp;
    r.key = B("k");
    r.ignore_value = 1;
    cr_assert_eq(apply_check_put(&r), 0);
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_put(&env, &r, &ar, &resp), QERR_KEY_NOT_FOUND);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    cr_assert_eq(mvcc_rev(kv), 1, "a refused put writes nothing");
    put("k", "v1");
    r.prev_kv = 1;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_put(&env, &r, &ar, &resp), 0);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    cr_assert_eq(resp->prev_kv->value.len, 2);
    int err;
    Etcdserverpb__RangeRequest g = ETCDSERVERPB__RANGE_REQUEST__INIT;
    g.key = B("k");
    cr_assert_eq(memcmp(range(&g, &err)->kvs[0]->value.data, "v1", 2), 0,
                 "ignore_value keeps the value");
    Etcdserverpb__PutRequest l = ETCDSERVERPB__PUT_REQUEST__INIT;
    l.key = B("k");
    l.lease = 42;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_put(&env, &l, &ar, &resp), QERR_LEASE_NOT_FOUND);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    Etcdserverpb__PutRequest bad = ETCDSERVERPB__PUT_REQUEST__INIT;
    bad.key = B("k");
    bad.ignore_value = 1;
    bad.value = B("x");
    cr_assert_eq(apply_check_put(&bad), QERR_VALUE_PROVIDED);
}

Test(apply, delete_range_prev_kvs_and_no_op)
{
    put("d/1", "a");
    put("d/2", "b");
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    Etcdserverpb__DeleteRangeResponse *resp;
    d.key = B("d/");
    d.range_end = B("d0");
    d.prev_kv = 1;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_delete_range(&env, &d, &ar, &resp), 0);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    cr_assert_eq(resp->deleted, 2);
    cr_assert_eq(resp->n_prev_kvs, 2);
    cr_assert_eq(resp->header->revision, 4, "both deletions share one revision");
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_delete_range(&env, &d, &ar, &resp), 0);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    cr_assert_eq(resp->deleted, 0);
    cr_assert_eq(resp->header->revision, 4, "deleting nothing takes no revision");
}

/* ---- a revision resumed after a restart (mvcc.h, "Big revisions in steps") ---- */

static int stop_steps;
static int refuse_after(void *arg)
{
    (void)arg;
    return --stop_steps < 0 ? -EINTR : 0;
}

static int64_t count(const char *k, const char *end)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = B(k);
    if (end != NULL)
        r.range_end = B(end);
    r.count_only = true;
    int err;
    Etcdserverpb__RangeResponse *resp = range(&r, &err);
    cr_assert_eq(err, 0);
    return resp->count;
}

/* A Txn stopped between steps and applied again takes the branch it took:
 * its compares read the revision before it, not what it already wrote
 * (here the key its compare asks about). */
Test(apply, resumed_txn_takes_the_branch_it_took)
{
    char k[16];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "p/%03d", i);
        put(k, "v");
    }
    Etcdserverpb__Compare c = cmp_int("b", VER, EQ, 0);
    Etcdserverpb__Compare *cs[1] = {&c};
    Etcdserverpb__RequestOp *then[3] = {op_put("b"), op_del("p/", "p0"), op_put("c")};
    Etcdserverpb__RequestOp *els[1] = {op_put("f")};
    Etcdserverpb__TxnRequest *t = txn_of(then, 3, els, 1);
    t->compare = cs;
    t->n_compare = 1;
    Etcdserverpb__TxnResponse *resp;

    stop_steps = 2; /* b and 19 deletes committed, then the member dies */
    mvcc_set_step(kv, 10, refuse_after, NULL);
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(apply_txn(&env, t, &ar, &resp), -EINTR);
    mvcc_close(kv);
    backend_close(be);
    struct backend_options o = {.dir = dir, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &kv), 0);
    env.kv = kv;
    cr_assert_neq(mvcc_partial_rev(kv), 0);
    cr_assert_eq(count("b", NULL), 0, "the partial revision is not read");

    cr_assert_eq(txn(t, &resp), 0);
    cr_assert(resp->succeeded, "the branch taken before the restart");
    cr_assert_eq(count("f", NULL), 0);
    cr_assert_eq(count("b", NULL), 1);
    cr_assert_eq(count("c", NULL), 1);
    cr_assert_eq(count("p/", "p0"), 0);
    cr_assert_eq(mvcc_rev(kv), 102);
}

/* heap_in_use: bytes malloc has handed out (ASan's allocator replaces
 * glibc's under the sanitizers) */
static size_t heap_in_use(void)
{
#ifdef __SANITIZE_ADDRESS__
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#endif
}

/* keys_only and count_only over big values: the values are not copied into
 * the response's memory (a Range over millions of keys would hold them
 * all); sorted on the value, keys_only still sorts by it. */
Test(apply, keys_only_and_count_only_copy_no_values)
{
    static char big[64 * 1024];
    memset(big, 'v', sizeof(big) - 1);
    char k[16];
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof(k), "big/%03d", i);
        big[0] = (char)('a' + i % 26);
        put(k, big);
    }
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = B("big/");
    r.range_end = B("big0");
    int err;
    for (int mode = 0; mode < 3; mode++) {
        r.keys_only = mode == 0;
        r.count_only = mode == 1;
        arena_free(&ar);
        size_t m0 = heap_in_use();
        Etcdserverpb__RangeResponse *resp = range(&r, &err);
        size_t grew = heap_in_use() - m0;
        cr_assert_eq(err, 0);
        cr_assert_eq(resp->count, 200);
        if (mode < 2) {
            cr_assert_eq(resp->n_kvs, mode == 0 ? 200u : 0u);
            cr_assert_lt(grew, 1u << 20, "mode %d: %zu bytes for 200 keys", mode, grew);
        } else {
            cr_assert_gt(grew, 200u * sizeof(big) - 200, "with values: %zu bytes", grew);
        }
    }
    r.keys_only = true;
    r.count_only = false;
    r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    Etcdserverpb__RangeResponse *resp = range(&r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(resp->n_kvs, 200);
    cr_assert(resp->kvs[0]->key.len == 7 && memcmp(resp->kvs[0]->key.data, "big/025", 7) == 0,
              "z sorts first");
    cr_assert_eq(resp->kvs[0]->value.len, 0);
}

/* A Range past env.max_range_bytes (--max-range-response-bytes) fails
 * RESOURCE_EXHAUSTED with grpc-go's text, and stops collecting at the
 * bound: the heap grows by about the bound, not by the range's size. A
 * reply that is served fits the bound (the charge is an upper bound of the
 * encoding); keys_only and a limit that keeps it small are served; a Range
 * inside a write txn (part of an entry every member applies) is not
 * bounded. */
Test(apply, range_reply_bound_refuses_before_building)
{
    static char big[64 * 1024];
    memset(big, 'v', sizeof(big) - 1);
    char k[16];
    for (int i = 0; i < 200; i++) { /* 12.8 MB of values */
        snprintf(k, sizeof(k), "big/%03d", i);
        put(k, big);
    }
    env.max_range_bytes = 1u << 20;
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = B("big/");
    r.range_end = B("big0");
    int err;
    arena_free(&ar);
    size_t m0 = heap_in_use();
    cr_assert_null(range(&r, &err));
    size_t grew = heap_in_use() - m0;
    cr_assert_eq(err, QERR_RANGE_TOO_LARGE);
    cr_assert_lt(grew, 3u << 20, "refused after %zu bytes", grew);
    cr_assert_eq(q_err_grpc_status(err), GRPC_STATUS_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(q_strerror(err), "grpc: trying to send message larger than max");

    r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    range(&r, &err);
    cr_assert_eq(err, QERR_RANGE_TOO_LARGE, "sorted: refused too");

    r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE;
    r.limit = 14; /* 14 and the one more that tells more: 15 x 64 KiB < 1 MiB */
    Etcdserverpb__RangeResponse *x = range(&r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(x->n_kvs, 14);
    cr_assert(x->more);
    cr_assert_eq(x->count, 200);
    cr_assert_leq(etcdserverpb__range_response__get_packed_size(x), env.max_range_bytes);

    r.limit = 0;
    r.keys_only = true;
    x = range(&r, &err);
    cr_assert_eq(err, 0, "keys only: 200 small keys");
    cr_assert_eq(x->n_kvs, 200);

    r.keys_only = false;
    r.count_only = true;
    x = range(&r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(x->count, 200);

    /* the charge is the KeyValues' exact encoding: one byte under it is
     * refused, at it served */
    Etcdserverpb__RangeRequest one = ETCDSERVERPB__RANGE_REQUEST__INIT;
    one.key = B("big/000");
    env.max_range_bytes = 0;
    x = range(&one, &err);
    cr_assert_eq(err, 0);
    size_t kvsz = mvccpb__key_value__get_packed_size(x->kvs[0]);
    size_t charge = 1 + 3 /* the length of 64 KiB and a few bytes, a varint */ + kvsz;
    cr_assert_lt(charge, etcdserverpb__range_response__get_packed_size(x));
    env.max_range_bytes = charge - 1;
    range(&one, &err);
    cr_assert_eq(err, QERR_RANGE_TOO_LARGE);
    env.max_range_bytes = charge;
    range(&one, &err);
    cr_assert_eq(err, 0);

    /* inside a write txn: not bounded */
    env.max_range_bytes = 1u << 20;
    Etcdserverpb__RangeRequest all = ETCDSERVERPB__RANGE_REQUEST__INIT;
    all.key = B("big/");
    all.range_end = B("big0");
    Etcdserverpb__RequestOp ro = ETCDSERVERPB__REQUEST_OP__INIT;
    ro.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    ro.request_range = &all;
    Etcdserverpb__RequestOp *ops[] = {&ro, op_put("w")};
    Etcdserverpb__TxnResponse *tr;
    cr_assert_eq(txn(txn_of(ops, 2, NULL, 0), &tr), 0);
    cr_assert_eq(tr->responses[0]->response_range->n_kvs, 200);
}

static int count_span(const struct apply_span *sp, void *arg)
{
    cr_assert(sp->key_len == 3 && memcmp(sp->key, "\0zk", 3) == 0);
    (*(int *)arg)++;
    return 0;
}

/* the ZooKeeper face's keys ("\0zk...") are refused to etcd writes */
#define BN(s) ((ProtobufCBinaryData){sizeof(s) - 1, (uint8_t *)(s)})
Test(apply, reserved_prefix_refused)
{
#define SPAN(k, e, o)                                                                              \
    apply_reserved_span((const uint8_t *)(k), sizeof(k) - 1, (const uint8_t *)(e), sizeof(e) - 1,  \
                        (o))
    struct apply_span sp;
    cr_assert_eq(SPAN("\0zkD\0\1/a", "", NULL), APPLY_RESERVED_INSIDE, "a znode's key");
    cr_assert_eq(SPAN("\0zk", "", NULL), APPLY_RESERVED_INSIDE, "the prefix itself");
    cr_assert_eq(SPAN("\0z", "", NULL), APPLY_RESERVED_NONE);
    cr_assert_eq(SPAN("\0zl", "", NULL), APPLY_RESERVED_NONE);
    cr_assert_eq(SPAN("a", "", NULL), APPLY_RESERVED_NONE);
    cr_assert_eq(SPAN("\0zkS", "\0zkT", NULL), APPLY_RESERVED_INSIDE, "a range inside");
    cr_assert_eq(SPAN("\0zk", "\0zl", NULL), APPLY_RESERVED_INSIDE, "the whole prefix");
    cr_assert_eq(SPAN("\0zkD", "\0", NULL), APPLY_RESERVED_WIDE, "from inside on");
    cr_assert_eq(SPAN("\0", "\0", &sp), APPLY_RESERVED_WIDE, "every key");
    cr_assert(sp.key_len == 3 && memcmp(sp.key, "\0zk", 3) == 0);
    cr_assert(sp.end_len == 3 && memcmp(sp.end, "\0zl", 3) == 0);
    cr_assert_eq(SPAN("\0a", "\0zk\1", &sp), APPLY_RESERVED_WIDE, "a range ending inside");
    cr_assert(sp.key_len == 3 && memcmp(sp.key, "\0zk", 3) == 0);
    cr_assert(sp.end_len == 4 && memcmp(sp.end, "\0zk\1", 4) == 0);
    cr_assert_eq(SPAN("\0a", "\0zk", NULL), APPLY_RESERVED_NONE, "ending just below");
    cr_assert_eq(SPAN("\0zl", "\0", NULL), APPLY_RESERVED_NONE, "from just above on");
    cr_assert_eq(SPAN("a", "\0", NULL), APPLY_RESERVED_NONE, "from a printable key on");
    cr_assert_eq(SPAN("\0zkT", "\0zkS", NULL), APPLY_RESERVED_NONE, "an empty range");
#undef SPAN
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = BN("\0zkD\0\1/junk");
    cr_assert_eq(apply_check_reserved_put(&p), QERR_RESERVED_KEY);
    p.key = B("fine");
    cr_assert_eq(apply_check_reserved_put(&p), 0);
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = BN("\0");
    d.range_end = BN("\0");
    cr_assert_eq(apply_check_reserved_delete_range(&d), 0, "wide: checked at apply");
    d.key = BN("\0zkD");
    d.range_end = BN("\0zkE");
    cr_assert_eq(apply_check_reserved_delete_range(&d), QERR_RESERVED_KEY, "every znode's D key");
    d.key = B("a");
    cr_assert_eq(apply_check_reserved_delete_range(&d), 0);
    /* a txn: any branch, nested too; reads are fine */
    Etcdserverpb__RequestOp *ok[] = {op_put("x"), op_del("a", "b")};
    cr_assert_eq(apply_check_reserved_txn(txn_of(ok, 2, NULL, 0)), 0);
    Etcdserverpb__RequestOp *bad_put = op_put("x");
    bad_put->request_put->key = BN("\0zkS12345678");
    Etcdserverpb__RequestOp *els[] = {bad_put};
    cr_assert_eq(apply_check_reserved_txn(txn_of(ok, 2, els, 1)), QERR_RESERVED_KEY);
    Etcdserverpb__RequestOp *nested[] = {op_txn(txn_of(NULL, 0, els, 1))};
    cr_assert_eq(apply_check_reserved_txn(txn_of(nested, 1, NULL, 0)), QERR_RESERVED_KEY);
    /* wide deletes of a txn, for the check at apply */
    Etcdserverpb__RequestOp *wide[] = {op_del("a", "")};
    wide[0]->request_delete_range->key = BN("\0");
    Etcdserverpb__RequestOp *outer[] = {op_put("y"), op_txn(txn_of(ok, 2, wide, 1))};
    int calls = 0;
    cr_assert_eq(apply_txn_wide_deletes(txn_of(NULL, 0, outer, 2), count_span, &calls), 0);
    cr_assert_eq(calls, 1);
    cr_assert_eq(apply_check_reserved_txn(txn_of(NULL, 0, outer, 2)), 0);
    cr_assert_str_eq(q_strerror(QERR_RESERVED_KEY),
                     "etcdserver: permission denied: keys under the prefix \\x00zk belong to "
                     "the ZooKeeper face");
    cr_assert_eq(q_err_grpc_status(QERR_RESERVED_KEY), GRPC_STATUS_PERMISSION_DENIED);
}
