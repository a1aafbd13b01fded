/* server/kv_service.c: /etcdserverpb.KV/ — Range, Put, DeleteRange, Txn,
 * Compact. Serializable reads are answered at once from a read transaction
 * of this member; linearizable ones (and read-only txns that have one)
 * wait for a read index (node.c); writes are checked (etcd's v3rpc
 * checks), then proposed to the log. */
#include "server/server_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* etcd refuses a proposal whose InternalRaftRequest (the request plus a
 * header with a request id) exceeds --max-request-bytes; the wrapping adds
 * about this many bytes to the request's own encoding. */
#define PROPOSAL_OVERHEAD 16

static bool too_large(struct server *s, size_t len)
{
    return len + PROPOSAL_OVERHEAD > s->cfg.max_request_bytes;
}

/* range_read and txn_read answer a read on the core: inline, within the
 * read budget (s->env.read_budget), and past it on a reader thread
 * (rangeread.c); |whole|: inline whatever it costs. */
static void range_read(struct server *s, qcall *call, const Etcdserverpb__RangeRequest *r,
                       bool whole)
{
    mvcc_read *rd;
    int rv = server_auth_check_call_read(s, call, true, &r->base);
    if (rv == 0)
        rv = mvcc_read_begin(s->kv, &rd);
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    struct apply_env env = s->env;
    if (whole)
        env.read_budget = 0;
    arena_reset(&s->arena);
    Etcdserverpb__RangeResponse *resp = NULL;
    rv = apply_range(&env, rd, r, &s->arena, &resp);
    if (rv == 0) {
        server_fill_header(s, resp->header);
        server_reply(s, call, &resp->base);
    } else if (rv != -E2BIG) {
        server_reply_error(call, rv);
    }
    mvcc_read_end(rd);
    if (rv == -E2BIG)
        server_read_elsewhere(s, call, ENTRY_READ_RANGE, &r->base);
}

static void txn_read(struct server *s, qcall *call, const Etcdserverpb__TxnRequest *r, bool whole)
{
    mvcc_read *rd;
    int rv = server_auth_check_call_read(s, call, false, &r->base);
    if (rv == 0 && (rv = mvcc_read_begin(s->kv, &rd)) == 0) {
        struct apply_env env = s->env;
        if (whole)
            env.read_budget = 0;
        arena_reset(&s->arena);
        Etcdserverpb__TxnResponse *resp = NULL;
        rv = apply_txn_read(&env, rd, r, &s->arena, &resp);
        if (rv == 0) {
            server_fill_header(s, resp->header);
            server_reply(s, call, &resp->base);
        }
        mvcc_read_end(rd);
    }
    if (rv == -E2BIG)
        server_read_elsewhere(s, call, ENTRY_READ_TXN, &r->base);
    else if (rv != 0)
        server_reply_error(call, rv);
}

/* etcd's isTxnSerializable: every op of both branches is a range that
 * asks for a serializable read (a nested txn makes it linearizable) */
static bool ops_serializable(Etcdserverpb__RequestOp **ops, size_t n);

static bool txn_serializable(const Etcdserverpb__TxnRequest *r)
{
    return ops_serializable(r->success, r->n_success) && ops_serializable(r->failure, r->n_failure);
}

static bool ops_serializable(Etcdserverpb__RequestOp **ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const Etcdserverpb__RequestOp *op = ops[i];
        if (op->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE ||
            !op->request_range->serializable)
            return false;
    }
    return true;
}

void server_serve_read(struct server *s, qcall *call, enum entry_kind kind,
                       const ProtobufCMessage *req)
{
    if (kind == ENTRY_READ_RANGE)
        range_read(s, call, (const Etcdserverpb__RangeRequest *)req, false);
    else
        txn_read(s, call, (const Etcdserverpb__TxnRequest *)req, false);
}

void server_serve_read_whole(struct server *s, qcall *call, enum entry_kind kind,
                             const ProtobufCMessage *req)
{
    if (kind == ENTRY_READ_RANGE)
        range_read(s, call, (const Etcdserverpb__RangeRequest *)req, true);
    else
        txn_read(s, call, (const Etcdserverpb__TxnRequest *)req, true);
}

#ifdef QUORUM_FAULT_INJECTION
/* A planted bug, compiled in only with meson -Dfault_injection=true, for
 * tools/faults/campaign.py to show that it catches one (docs/campaign.md):
 * QUORUM_PLANTED_BUG=follower-local-read makes a follower answer a
 * linearizable Range from its own store at once, without a read index, as
 * a serializable one: a stale read once it lags (a partition, a pause). */
static bool planted_local_read(struct server *s)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("QUORUM_PLANTED_BUG");
        on = v != NULL && strcmp(v, "follower-local-read") == 0;
    }
    return on && !server_is_leader(s);
}
#else
#define planted_local_read(s) false
#endif

static void on_range(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)server_unpack(
        call, &etcdserverpb__range_request__descriptor, msg, len);
    if (r == NULL)
        return;
    int rv = apply_check_range(r);
    if (rv != 0) {
        server_reply_error(call, rv);
    } else if (!r->serializable && !planted_local_read(s)) {
        server_read(s, call, ENTRY_READ_RANGE, &r->base); /* takes |r| */
        return;
    } else {
        range_read(s, call, r, false);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static int first_error(int a, int b)
{
    return a != 0 ? a : b;
}

/* propose_checked answers |rv| (a check's verdict) or, when the request
 * passed, refuses it if too large for the log or proposes it. */
static void propose_checked(qcall *call, enum entry_kind kind, ProtobufCMessage *r, size_t len,
                            int rv)
{
    struct server *s = server_of(call);
    if (rv == 0 && too_large(s, len))
        rv = QERR_REQUEST_TOO_LARGE;
    if (rv != 0) {
        server_reply_error(call, rv);
        protobuf_c_message_free_unpacked(r, NULL);
        return;
    }
    server_propose(s, call, kind, r);
}

static void on_put(qcall *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__PutRequest *r = (Etcdserverpb__PutRequest *)server_unpack(
        call, &etcdserverpb__put_request__descriptor, msg, len);
    if (r != NULL)
        propose_checked(
            call, ENTRY_PUT, &r->base, len,
            first_error(apply_check_put(r), call->zk_face ? 0 : apply_check_reserved_put(r)));
}

static void on_delete_range(qcall *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__DeleteRangeRequest *r = (Etcdserverpb__DeleteRangeRequest *)server_unpack(
        call, &etcdserverpb__delete_range_request__descriptor, msg, len);
    if (r != NULL)
        propose_checked(call, ENTRY_DELETE_RANGE, &r->base, len,
                        first_error(apply_check_delete_range(r),
                                    call->zk_face ? 0 : apply_check_reserved_delete_range(r)));
}

static void on_txn(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__TxnRequest *r = (Etcdserverpb__TxnRequest *)server_unpack(
        call, &etcdserverpb__txn_request__descriptor, msg, len);
    if (r == NULL)
        return;
    int rv = apply_check_txn(r, s->cfg.max_txn_ops);
    if (rv != 0) {
        server_reply_error(call, rv);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return;
    }
    if (apply_txn_is_read_only(r)) {
        if (!txn_serializable(r)) {
            server_read(s, call, ENTRY_READ_TXN, &r->base); /* takes |r| */
            return;
        }
        txn_read(s, call, r, false);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return;
    }
    propose_checked(call, ENTRY_TXN, &r->base, len,
                    call->zk_face ? 0 : apply_check_reserved_txn(r));
}

static void on_compact(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    Etcdserverpb__CompactionRequest *r = (Etcdserverpb__CompactionRequest *)server_unpack(
        call, &etcdserverpb__compaction_request__descriptor, msg, len);
    if (r == NULL)
        return;
    server_propose(s, call, ENTRY_COMPACT, &r->base);
}

/* ---- on a front loop ---- */

/* local_header fills a header from what the core published (the front
 * loop must not read the core's Raft state). */
static void local_header(struct server *s, Etcdserverpb__ResponseHeader *h)
{
    h->cluster_id = __atomic_load_n(&s->pub_cluster_id, __ATOMIC_RELAXED);
    h->member_id = s->member_id;
    h->raft_term = __atomic_load_n(&s->pub_term, __ATOMIC_RELAXED);
}

/* serve_shared answers |req| (a Range or a read-only Txn) from a shared
 * read at |min_rev| or later (mvcc_read_begin_shared): 1 with the packed
 * response in |out|, 0 when it cannot be read from here now, or an error.
 * The client's credentials are checked here, on the front loop. */
static int serve_shared(struct server *s, bool range, const ProtobufCMessage *req, int64_t min_rev,
                        const struct qcreds *cr, struct arena *a, struct buf *out)
{
    if (s->auth != NULL && (auth_enabled(s->auth) || cr->token != NULL)) {
        struct auth_info ai;
        char buf[AUTH_NAME_MAX];
        int rv = server_auth_identity(s, cr->token, cr->token_len, cr->cn, &ai, buf, sizeof(buf));
        if (rv == 0)
            rv = server_auth_check_read(s, &ai, range, req);
        if (rv != 0)
            return rv;
    }
    mvcc_read *rd;
    if (mvcc_read_begin_shared(s->kv, min_rev, &rd) != 0)
        return 0;
    arena_reset(a);
    int rv;
    if (range) {
        Etcdserverpb__RangeResponse *resp = NULL;
        rv = apply_range(&s->env, rd, (const Etcdserverpb__RangeRequest *)req, a, &resp);
        if (rv == 0) {
            local_header(s, resp->header);
            rv = server_pack(out, &resp->base);
        }
    } else {
        Etcdserverpb__TxnResponse *resp = NULL;
        rv = apply_txn_read(&s->env, rd, (const Etcdserverpb__TxnRequest *)req, a, &resp);
        if (rv == 0) {
            local_header(s, resp->header);
            rv = server_pack(out, &resp->base);
        }
    }
    mvcc_read_end(rd);
    if (rv == -E2BIG)
        return 0; /* past the read budget: the core hands it to a reader */
    return rv == 0 ? 1 : rv;
}

int server_kv_serve_local(struct server *s, const struct qcall_method *m, const uint8_t *msg,
                          size_t len, const struct qcreds *cr, struct arena *a, struct buf *out)
{
    bool range = m->on_message == on_range;
    if (!range && m->on_message != on_txn)
        return 0;
    const ProtobufCMessageDescriptor *d =
        range ? &etcdserverpb__range_request__descriptor : &etcdserverpb__txn_request__descriptor;
    ProtobufCMessage *req = protobuf_c_message_unpack(d, NULL, len, msg);
    if (req == NULL)
        return 0; /* the core answers it, with the error it always gives */
    int rv = 0;
    if (range) {
        const Etcdserverpb__RangeRequest *r = (const Etcdserverpb__RangeRequest *)req;
        if (r->serializable && apply_check_range(r) == 0)
            rv = serve_shared(s, true, req, 0, cr, a, out);
    } else {
        const Etcdserverpb__TxnRequest *r = (const Etcdserverpb__TxnRequest *)req;
        if (apply_check_txn(r, s->cfg.max_txn_ops) == 0 && apply_txn_is_read_only(r) &&
            txn_serializable(r))
            rv = serve_shared(s, false, req, 0, cr, a, out);
    }
    protobuf_c_message_free_unpacked(req, NULL);
    return rv;
}

int server_kv_serve_read_local(struct server *s, enum entry_kind kind, const uint8_t *msg,
                               size_t len, int64_t min_rev, const struct qcreds *cr,
                               struct arena *a, struct buf *out)
{
    bool range = kind == ENTRY_READ_RANGE;
    const ProtobufCMessageDescriptor *d =
        range ? &etcdserverpb__range_request__descriptor : &etcdserverpb__txn_request__descriptor;
    ProtobufCMessage *req = protobuf_c_message_unpack(d, NULL, len, msg);
    if (req == NULL)
        return 0;
    int rv = serve_shared(s, range, req, min_rev, cr, a, out);
    protobuf_c_message_free_unpacked(req, NULL);
    return rv;
}

const struct qcall_method server_kv_methods[] = {
    {"/etcdserverpb.KV/Range", QCALL_UNARY, on_range, NULL, NULL},
    {"/etcdserverpb.KV/Put", QCALL_UNARY, on_put, NULL, NULL},
    {"/etcdserverpb.KV/DeleteRange", QCALL_UNARY, on_delete_range, NULL, NULL},
    {"/etcdserverpb.KV/Txn", QCALL_UNARY, on_txn, NULL, NULL},
    {"/etcdserverpb.KV/Compact", QCALL_UNARY, on_compact, NULL, NULL},
};
const size_t server_kv_methods_n = sizeof(server_kv_methods) / sizeof(server_kv_methods[0]);
