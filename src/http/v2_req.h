/* http/v2_req.h: one v2 request in flight, shared by v2.c (parsing,
 * reads, answers), v2_write.c (writes), v2_watch.c (waits) and v2_lease.c
 * (ttl and expiration from leases). See v2.c for the whole design. */
#ifndef QUORUM_HTTP_V2_REQ_H
#define QUORUM_HTTP_V2_REQ_H

#include "http/http_int.h"
#include "http/v2_int.h"
#include "rpc.pb-c.h"

/* ---- ttl and expiration of nodes (v2_lease.c) ----
 * v2_ttls_run asks Lease/LeaseTimeToLive (with keys) about every distinct
 * lease of |nodes| that has no expiration yet, fills in "ttl" and
 * "expiration" of each node whose lease exists, and calls |done| (possibly
 * before it returns). A node whose lease is gone gets neither field.
 * v2_ttls_reset cancels calls in flight (a client that went away) and
 * frees; call it before running again and when done with the struct. */
struct v2_ttl_slot;
struct v2_ttls {
    grpc_server *srv;
    const char *token;
    struct v2_node **nodes;
    size_t n_nodes;
    struct v2_ttl_slot *slots; /* one per distinct lease, in id order */
    size_t n_slots, next, inflight;
    bool pumping, active;
    void (*done)(void *arg);
    void *arg;
};

int v2_ttls_run(struct v2_ttls *t, grpc_server *srv, const char *token, struct v2_node **nodes,
                size_t n, void (*done)(void *arg), void *arg);
/* v2_ttls_keyless: after a run, lease |id| exists and holds no key. */
bool v2_ttls_keyless(const struct v2_ttls *t, int64_t id);
void v2_ttls_reset(struct v2_ttls *t);
/* v2_lease_revoke revokes lease |id|, answer unheard (no key holds it). */
void v2_lease_revoke(grpc_server *srv, const char *token, int64_t id);
/* the wall clock, unix ns */
int64_t v2_now_ns(void);

/* ---- a request ---- */

enum v2_op { V2_GET, V2_SET, V2_CREATE, V2_UPDATE, V2_CAS, V2_CAD, V2_DELETE, V2_POST };

struct v2q;
typedef void (*v2q_cb)(struct v2q *q, int status, const char *msg, const uint8_t *resp, size_t len);

struct v2q {
    struct hreq *r; /* NULL once answered or gone */
    grpc_server *srv;
    char *token; /* the Authorization header, as the gateway passes it */
    const char *pfx;
    struct arena a;
    struct v2_form form;
    int busy;  /* inside our own functions: free later */
    bool over; /* answered or gone: freed when idle */
    bool oom;
    struct lcall *lc;
    v2q_cb next;
    /* the request */
    enum v2_op op;
    const char *method;
    char *path; /* the store path, "/1..." */
    size_t path_len;
    const char *value, *prev_value;
    size_t value_len, prev_value_len;
    uint64_t prev_index, wait_index;
    bool recursive, sorted, dir, wait, quorum, stream, no_value, refresh;
    int prev_exist; /* -1: not given */
    bool has_ttl;   /* a ttl (non-empty) */
    bool ttl_field; /* "ttl" given, maybe empty ("ttl=": none) */
    uint64_t ttl;
    /* a write's state */
    int64_t lease, lease_ttl, grant_ns; /* the lease this request granted */
    bool written;                       /* the write happened (keep the lease) */
    int64_t old_lease;                  /* the lease the key was taken off */
    int attempts;
    char *new_path; /* a POST's new key */
    size_t new_path_len;
    int64_t rev; /* a read's revision */
    size_t level;
    struct v2_node **top, **prev_level;
    size_t n_top, n_prev_level;
    struct buf kb; /* scratch */
    /* the answer */
    struct v2_event ev;
    int status;
    uint64_t index;
    struct v2_ttls ttls;
};

/* v2q_call makes one unary call; |cb| runs once (maybe before this
 * returns), with the error of a call that could not start. */
void v2q_call(struct v2q *q, const char *method, const ProtobufCMessage *msg, v2q_cb cb);
/* v2q_error answers a v2 error; v2q_grpc_error a failed call (300 with
 * the service's message, index 0, as etcd's writeKeyError). */
void v2q_error(struct v2q *q, int code, const char *cause, size_t cause_len, uint64_t index);
void v2q_path_error(struct v2q *q, int code, uint64_t index);
void v2q_grpc_error(struct v2q *q, const char *msg);
/* v2q_event decorates q->ev's nodes with ttls and answers it (status,
 * X-Etcd-Index q->index), then revokes q->old_lease if it is left
 * without keys. */
void v2q_event(struct v2q *q);

/* v2q_free frees a request that no call or hreq refers to. */
void v2q_free(struct v2q *q);
/* v2_write starts a PUT, POST or DELETE (v2_write.c). */
void v2_write(struct v2q *q);
/* v2_wait starts a GET ?wait=true (v2_watch.c); it takes the request
 * from |q|, which is freed. */
void v2_wait(struct v2q *q);

/* ---- building requests in q's arena (v2.c) ---- */
ProtobufCBinaryData v2q_key(struct v2q *q, const char *path, size_t n, int add, bool dir);
ProtobufCBinaryData v2q_bytes(struct v2q *q, const void *p, size_t n);
ProtobufCBinaryData v2q_prefix_end(struct v2q *q, ProtobufCBinaryData k);
Etcdserverpb__TxnRequest *v2q_txn(struct v2q *q, size_t nc, size_t ns, size_t nf);
/* compares: |target| VERSION/CREATE/MOD/VALUE, |result| EQUAL/GREATER/...,
 * |end| may be {0, NULL} */
void v2q_cmp(struct v2q *q, Etcdserverpb__TxnRequest *t, ProtobufCBinaryData key,
             ProtobufCBinaryData end, int target, int result, int64_t num, ProtobufCBinaryData val);
Etcdserverpb__RequestOp *v2q_range(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData end,
                                   int64_t limit);
Etcdserverpb__RequestOp *v2q_put(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData val,
                                 int64_t lease, bool prev_kv, bool ignore_value);
Etcdserverpb__RequestOp *v2q_del(struct v2q *q, ProtobufCBinaryData key, ProtobufCBinaryData end,
                                 bool prev_kv);
Etcdserverpb__RequestOp *v2q_optxn(struct v2q *q, Etcdserverpb__TxnRequest *t);
void v2q_then(Etcdserverpb__TxnRequest *t, Etcdserverpb__RequestOp *op);
void v2q_else(Etcdserverpb__TxnRequest *t, Etcdserverpb__RequestOp *op);
/* v2q_act: the put of PFX/act = |action| */
Etcdserverpb__RequestOp *v2q_act(struct v2q *q, const char *action);
/* v2q_parent: the length of the parent of store path p[0..n) ("/1/a/b"
 * -> 4); 0 when p or its parent is the root */
size_t v2q_parent(const char *p, size_t n);

#endif
