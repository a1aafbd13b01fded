/* client/recipes.c: the coordination recipes of quorum/recipes.h, built
 * on the public calls of quorum/client.h only (KV, Txn, Lease, Watch).
 *
 * Every wait has the same shape: read the state (range at revision R);
 * return if the condition holds; else watch exactly the keys it depends on
 * from R + 1 (so nothing between the read and the watch is missed) until
 * one relevant event, and read again. A watch that ends early (compacted,
 * connection lost and the stream reopened) only costs one more read, so
 * correctness never rests on a watch event, only on reads and Txns. */
#include "quorum/recipes.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define NO_DEADLINE INT64_MAX

static int64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? NO_DEADLINE : now_ms() + timeout_ms;
}

/* ms left before |dl| (-1: none), at most INT_MAX */
static int left_ms(int64_t dl)
{
    if (dl == NO_DEADLINE)
        return -1;
    int64_t l = dl - now_ms();
    return l < 0 ? 0 : l > INT_MAX ? INT_MAX : (int)l;
}

static int status(struct qc_status *st, int rc, int code, const char *msg)
{
    if (st != NULL) {
        st->code = code;
        snprintf(st->message, sizeof(st->message), "%s", msg);
    }
    return rc;
}

static int ok(struct qc_status *st)
{
    return status(st, 0, QC_OK, "");
}

static int timed_out(struct qc_status *st)
{
    return status(st, QC_ETIMEDOUT, QC_DEADLINE_EXCEEDED, "context deadline exceeded");
}

static int lost(struct qc_status *st)
{
    return status(st, QC_ELOST, QC_NOT_FOUND, "etcdserver: requested lease not found");
}

static int nomem(struct qc_status *st)
{
    return status(st, -ENOMEM, QC_RESOURCE_EXHAUSTED, "out of memory");
}

static int invalid(struct qc_status *st, const char *msg)
{
    return status(st, -EINVAL, QC_INVALID_ARGUMENT, msg);
}

const char *qc_recipe_strerror(int err)
{
    switch (err) {
    case QC_ELOST:
        return "session lost";
    case QC_EBUSY:
        return "mutex: Locked by another session";
    case QC_ETOOMANY:
        return "too many clients";
    case QC_EEXIST:
        return "key already exists";
    case QC_EBADVALUE:
        return "counter: value is not an integer";
    default:
        return qc_strerror(err);
    }
}

/* cat: a + b + c in new memory (NULL on ENOMEM) */
static char *cat(const char *a, const char *b, const char *c)
{
    char *p;
    if (asprintf(&p, "%s%s%s", a, b ? b : "", c ? c : "") < 0)
        return NULL;
    return p;
}

static ProtobufCBinaryData bin(const char *s)
{
    return (ProtobufCBinaryData){.len = strlen(s), .data = (uint8_t *)s};
}

/* prefix_end: the range end of every key starting with |p| (etcd's
 * GetPrefixRangeEnd), in |out| of at least strlen(p)+1 bytes */
static ProtobufCBinaryData prefix_end(const char *p, uint8_t *out)
{
    size_t n = strlen(p);
    memcpy(out, p, n);
    while (n > 0) {
        if (out[n - 1] < 0xff) {
            out[n - 1]++;
            return (ProtobufCBinaryData){.len = n, .data = out};
        }
        n--;
    }
    out[0] = 0; /* all 0xff: to the end of the key space */
    return (ProtobufCBinaryData){.len = 1, .data = out};
}

static void free_msg(void *m)
{
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
}

static int valid_name(const char *name)
{
    return name != NULL && name[0] != '\0';
}

/* ---- reads, writes and waits the recipes share ---- */

struct rq {
    const char *key;
    int prefix;         /* the range is every key starting with key */
    int64_t max_create; /* 0: no bound */
    int sort_target;    /* Etcdserverpb__RangeRequest__SortTarget */
    int order;          /* Etcdserverpb__RangeRequest__SortOrder */
    int64_t limit;
    int count_only; /* (etcd counts before filtering by revision: never
                       together with max_create) */
    int keys_only;
};

static int get(qc_client *c, const struct rq *q, Etcdserverpb__RangeResponse **r,
               struct qc_status *st)
{
    uint8_t *end = NULL;
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = bin(q->key);
    if (q->prefix) {
        end = malloc(strlen(q->key) + 1);
        if (end == NULL)
            return nomem(st);
        req.range_end = prefix_end(q->key, end);
    }
    req.max_create_revision = q->max_create;
    req.sort_target = q->sort_target;
    req.sort_order = q->order;
    req.limit = q->limit;
    req.count_only = q->count_only;
    req.keys_only = q->keys_only;
    int rc = qc_range(c, &req, r, st);
    free(end);
    return rc;
}

static int64_t hdr_rev(const Etcdserverpb__ResponseHeader *h)
{
    return h != NULL ? h->revision : 0;
}

static int del_key(qc_client *c, const char *key, int prefix, struct qc_status *st)
{
    uint8_t *end = NULL;
    size_t elen = 0;
    if (prefix) {
        end = malloc(strlen(key) + 1);
        if (end == NULL)
            return nomem(st);
        ProtobufCBinaryData e = prefix_end(key, end);
        elen = e.len;
    }
    int rc = qc_delete(c, key, strlen(key), end, elen, 0, NULL, st);
    free(end);
    return rc;
}

/* create_put puts |key| = |val| with |lease| if it does not exist (a Txn on
 * its create revision 0): *|crev| is then the put's revision and *|created|
 * 1; else *|crev| is the existing key's create revision, *|lease_out| its
 * lease, and *|created| 0. */
static int create_put(qc_client *c, const char *key, const void *val, size_t vlen, int64_t lease,
                      int64_t *crev, int *created, int64_t *lease_out, struct qc_status *st)
{
    for (;;) {
        Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT, *pcmp = &cmp;
        cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
        cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
        cmp.key = bin(key);
        cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        cmp.create_revision = 0;
        Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
        put.key = bin(key);
        put.value.data = (uint8_t *)val;
        put.value.len = vlen;
        put.lease = lease;
        Etcdserverpb__RequestOp op_put = ETCDSERVERPB__REQUEST_OP__INIT, *pput = &op_put;
        op_put.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        op_put.request_put = &put;
        Etcdserverpb__RangeRequest rg = ETCDSERVERPB__RANGE_REQUEST__INIT;
        rg.key = bin(key);
        Etcdserverpb__RequestOp op_get = ETCDSERVERPB__REQUEST_OP__INIT, *pget = &op_get;
        op_get.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        op_get.request_range = &rg;
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_compare = 1;
        t.compare = &pcmp;
        t.n_success = 1;
        t.success = &pput;
        t.n_failure = 1;
        t.failure = &pget;
        Etcdserverpb__TxnResponse *r;
        int rc = qc_txn(c, &t, &r, st);
        if (rc < 0)
            return rc;
        if (r->succeeded) {
            *crev = hdr_rev(r->header);
            *created = 1;
            if (lease_out != NULL)
                *lease_out = lease;
            free_msg(r);
            return ok(st);
        }
        Etcdserverpb__RangeResponse *g =
            r->n_responses == 1 ? r->responses[0]->response_range : NULL;
        if (g != NULL && g->n_kvs == 1) {
            *crev = g->kvs[0]->create_revision;
            *created = 0;
            if (lease_out != NULL)
                *lease_out = g->kvs[0]->lease;
            free_msg(r);
            return ok(st);
        }
        free_msg(r); /* deleted in between: try again */
    }
}

/* txn_delete deletes |key| if its mod revision is still |mod|: 1 deleted,
 * 0 not (someone else changed or took it) */
static int txn_delete(qc_client *c, const ProtobufCBinaryData *key, int64_t mod,
                      struct qc_status *st)
{
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT, *pcmp = &cmp;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
    cmp.key = *key;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
    cmp.mod_revision = mod;
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = *key;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT, *pop = &op;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op.request_delete_range = &d;
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = &pcmp;
    t.n_success = 1;
    t.success = &pop;
    Etcdserverpb__TxnResponse *r;
    int rc = qc_txn(c, &t, &r, st);
    if (rc < 0)
        return rc;
    int done = r->succeeded ? 1 : 0;
    free_msg(r);
    return done;
}

enum {
    EV_ANY = -1,
    EV_PUT = MVCCPB__EVENT__EVENT_TYPE__PUT,
    EV_DELETE = MVCCPB__EVENT__EVENT_TYPE__DELETE
};

/* wait_change watches |key| (a prefix when |prefix|) from revision |from|
 * until an event of |type| (EV_ANY: any): 0 then, or when the watch ended
 * early (compacted, the server closed it): the caller reads again.
 * QC_ETIMEDOUT at |dl|, QC_ELOST when |sess| (may be NULL) is lost. */
static int wait_change(qc_client *c, qc_session *sess, const char *key, int prefix, int64_t from,
                       int type, int64_t dl, struct qc_status *st)
{
    uint8_t *end = NULL;
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchCreateRequest__FilterType filter =
        ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
    struct qc_status ls;
    cr.key = bin(key);
    if (prefix) {
        end = malloc(strlen(key) + 1);
        if (end == NULL)
            return nomem(st);
        cr.range_end = prefix_end(key, end);
    }
    cr.start_revision = from;
    if (type == EV_PUT)
        filter = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE;
    else if (type == EV_DELETE)
        filter = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
    if (type != EV_ANY) {
        cr.n_filters = 1;
        cr.filters = &filter;
    }
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    qc_stream *s = NULL;
    int rc = qc_stream_open(c, QC_METHOD_WATCH, &s);
    if (rc == 0)
        rc = qc_stream_send(s, &wr.base);
    free(end);
    if (rc < 0) {
        qc_stream_free(s);
        return status(st, rc, rc == QC_ECLOSED ? QC_CANCELLED : QC_UNAVAILABLE, qc_strerror(rc));
    }
    for (;;) {
        if (sess != NULL && qc_session_lost(sess)) {
            rc = lost(st);
            break;
        }
        int left = left_ms(dl);
        if (left == 0) {
            rc = timed_out(st);
            break;
        }
        /* with a session, look at it every quarter second */
        int slice = sess == NULL ? left : (left < 0 || left > 250 ? 250 : left);
        Etcdserverpb__WatchResponse *r = NULL;
        rc = qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, (ProtobufCMessage **)&r,
                            slice, &ls);
        if (rc == QC_ETIMEDOUT)
            continue;
        if (rc == 1) { /* the server ended the watch: read again */
            rc = ls.code != QC_OK ? status(st, QC_ESTATUS, ls.code, ls.message) : ok(st);
            break;
        }
        if (rc == QC_EUNAVAILABLE) {
            /* the connection broke (a member restarted, a failover): the
             * caller reads again, which reconnects or fails for good */
            rc = ok(st);
            break;
        }
        if (rc < 0) {
            status(st, rc, ls.code, ls.message);
            break;
        }
        int done = r->canceled || r->n_events > 0;
        free_msg(r);
        if (done) {
            rc = ok(st);
            break;
        }
    }
    qc_stream_free(s);
    return rc;
}

/* ---- sessions ---- */

struct qc_session {
    qc_client *c;
    int64_t lease;
    int ttl;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int stop;
    int lost;
};

static void abs_time(struct timespec *ts, int64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms_from_now / 1000;
    ts->tv_nsec += (ms_from_now % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void mark_lost(qc_session *s)
{
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->lost, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* keepalive: a renewal every TTL/3 on one LeaseKeepAlive stream (reopened
 * when it fails); lost when the server says TTL 0 or nothing succeeded for
 * a whole TTL (as clientv3 closes its keep-alive channel then) */
static void *keepalive(void *arg)
{
    qc_session *s = arg;
    qc_stream *ks = NULL;
    int64_t interval = (int64_t)s->ttl * 1000 / 3;
    if (interval < 100)
        interval = 100;
    int64_t last_ok = now_ms();
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = s->lease;
    for (;;) {
        struct timespec ts;
        abs_time(&ts, interval);
        pthread_mutex_lock(&s->mu);
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
            ;
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        int rc = 0;
        if (ks == NULL)
            rc = qc_stream_open(s->c, QC_METHOD_LEASE_KEEPALIVE, &ks);
        if (rc == 0)
            rc = qc_stream_send(ks, &req.base);
        int got = 0;
        /* wait for the answer in slices, so that a close is not held up */
        for (int64_t until = now_ms() + 3000; rc == 0 && !got && now_ms() < until;) {
            Etcdserverpb__LeaseKeepAliveResponse *r = NULL;
            struct qc_status st;
            rc = qc_stream_recv(ks, &etcdserverpb__lease_keep_alive_response__descriptor,
                                (ProtobufCMessage **)&r, 200, &st);
            if (rc == QC_ETIMEDOUT) {
                rc = 0;
                pthread_mutex_lock(&s->mu);
                stop = s->stop;
                pthread_mutex_unlock(&s->mu);
                if (stop)
                    break;
                continue;
            }
            if (rc != 0)
                break;
            got = 1;
            int64_t ttl = r->ttl;
            free_msg(r);
            if (ttl <= 0) {
                qc_stream_free(ks);
                mark_lost(s);
                return NULL;
            }
            last_ok = now_ms();
        }
        if (stop)
            break;
        if (rc != 0) {
            qc_stream_free(ks);
            ks = NULL;
        }
        if (!got && now_ms() - last_ok >= (int64_t)s->ttl * 1000) {
            qc_stream_free(ks);
            mark_lost(s);
            return NULL;
        }
    }
    qc_stream_free(ks);
    return NULL;
}

int qc_session_open(qc_client *c, int ttl_s, qc_session **out, struct qc_status *st)
{
    *out = NULL;
    if (c == NULL || ttl_s <= 0)
        return invalid(st, "session: TTL must be positive");
    qc_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return nomem(st);
    s->c = c;
    s->ttl = ttl_s;
    Etcdserverpb__LeaseGrantResponse *g;
    int rc = qc_lease_grant(c, ttl_s, 0, &g, st);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->lease = g->id;
    if (g->ttl > 0) /* the server may raise a TTL to its minimum */
        s->ttl = (int)(g->ttl < INT_MAX ? g->ttl : INT_MAX);
    free_msg(g);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->thread, NULL, keepalive, s) != 0) {
        qc_lease_revoke(c, s->lease, NULL, NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return status(st, -EAGAIN, QC_RESOURCE_EXHAUSTED, "session: no thread");
    }
    *out = s;
    return ok(st);
}

int64_t qc_session_lease(const qc_session *s)
{
    return s->lease;
}

qc_client *qc_session_client(const qc_session *s)
{
    return s->c;
}

int qc_session_lost(const qc_session *s)
{
    return __atomic_load_n(&s->lost, __ATOMIC_ACQUIRE);
}

int qc_session_wait_lost(qc_session *s, int timeout_ms)
{
    struct timespec ts;
    if (timeout_ms >= 0)
        abs_time(&ts, timeout_ms);
    pthread_mutex_lock(&s->mu);
    int r = 0;
    while (!s->lost && r != ETIMEDOUT)
        r = timeout_ms < 0 ? pthread_cond_wait(&s->cv, &s->mu)
                           : pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    int l = s->lost;
    pthread_mutex_unlock(&s->mu);
    return l;
}

static void session_end(qc_session *s, int revoke)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (revoke && !s->lost)
        qc_lease_revoke(s->c, s->lease, NULL, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void qc_session_close(qc_session *s)
{
    session_end(s, 1);
}

void qc_session_abandon(qc_session *s)
{
    session_end(s, 0);
}

/* the key "<pfx><lease hex>" of |s| */
static char *lease_key(qc_session *s, const char *pfx)
{
    char *p;
    if (asprintf(&p, "%s%" PRIx64, pfx, (uint64_t)s->lease) < 0)
        return NULL;
    return p;
}

/* ---- ordered holds: mutex, rwlock, semaphore ---- */

/* wait_turn waits until fewer than |n| keys under |range| have a create
 * revision below |mine| (n = 1: none), watching only the newest older key
 * when n is 1 (no herd) and the range's deletions otherwise. Then checks
 * that |key| (the waiter's own) still exists: QC_ELOST when it is gone. */
static int wait_turn(qc_session *s, const char *range, const char *key, int64_t mine, int n,
                     int64_t dl, struct qc_status *st)
{
    qc_client *c = s->c;
    for (;;) {
        if (qc_session_lost(s))
            return lost(st);
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = range, .prefix = 1, .max_create = mine - 1};
        if (n == 1) {
            q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
            q.order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
            q.limit = 1;
            q.count_only = 0;
        } else {
            q.keys_only = 1;
        }
        int rc = get(c, &q, &r, st);
        if (rc < 0)
            return rc;
        int64_t rev = hdr_rev(r->header);
        int rc2;
        if (n == 1 && r->n_kvs == 1) {
            char *older = strndup((const char *)r->kvs[0]->key.data, r->kvs[0]->key.len);
            free_msg(r);
            if (older == NULL)
                return nomem(st);
            rc2 = wait_change(c, s, older, 0, rev + 1, EV_DELETE, dl, st);
            free(older);
        } else if (n > 1 && r->n_kvs >= (size_t)n) {
            free_msg(r);
            rc2 = wait_change(c, s, range, 1, rev + 1, EV_DELETE, dl, st);
        } else {
            free_msg(r);
            break;
        }
        if (rc2 < 0)
            return rc2;
    }
    /* our key may have gone with the lease while we waited */
    Etcdserverpb__RangeResponse *r;
    struct rq q = {.key = key};
    int rc = get(c, &q, &r, st);
    if (rc < 0)
        return rc;
    int there = r->n_kvs == 1 && r->kvs[0]->create_revision == mine;
    free_msg(r);
    return there ? ok(st) : lost(st);
}

/* a hold: the key of one session under a name, and its create revision */
struct hold {
    qc_session *s;
    char *pfx; /* "<name>/" */
    char *key;
    int64_t rev; /* 0: not held */
};

static int hold_init(struct hold *h, qc_session *s, const char *name)
{
    h->s = s;
    h->pfx = cat(name, "/", NULL);
    return h->pfx == NULL ? -ENOMEM : 0;
}

static void hold_fini(struct hold *h)
{
    free(h->pfx);
    free(h->key);
}

/* hold_acquire puts "<pfx><sub><lease hex>" and waits for its turn within
 * "<pfx><wait_sub>" (n holders at once); on failure the key is deleted */
static int hold_acquire(struct hold *h, const char *sub, const char *wait_sub, int n,
                        int timeout_ms, struct qc_status *st)
{
    if (h->rev != 0)
        return invalid(st, "lock: already held by this object");
    if (qc_session_lost(h->s))
        return lost(st);
    int64_t dl = deadline_of(timeout_ms);
    char *kp = cat(h->pfx, sub, NULL);
    char *range = cat(h->pfx, wait_sub, NULL);
    char *key = kp != NULL ? lease_key(h->s, kp) : NULL;
    free(kp);
    if (range == NULL || key == NULL) {
        free(range);
        free(key);
        return nomem(st);
    }
    int64_t rev, lease;
    int created = 0;
    /* a key of this session that is already there (a retry after a lost
     * answer) is ours and keeps its place in line, as in clientv3's Mutex */
    int rc = create_put(h->s->c, key, "", 0, h->s->lease, &rev, &created, &lease, st);
    if (rc == 0 && lease != h->s->lease)
        rc = invalid(st, "lock: the key is held under another lease");
    if (rc == 0)
        rc = wait_turn(h->s, range, key, rev, n, dl, st);
    free(range);
    if (rc < 0) {
        /* take back our place (as clientv3's Mutex.Lock on a cancelled
         * context); the lease takes it anyway if this fails */
        if (rc != QC_ELOST && created)
            del_key(h->s->c, key, 0, NULL);
        free(key);
        return rc;
    }
    free(h->key);
    h->key = key;
    h->rev = rev;
    return ok(st);
}

static int hold_release(struct hold *h, struct qc_status *st)
{
    if (h->rev == 0)
        return invalid(st, "lock: not held");
    int rc = del_key(h->s->c, h->key, 0, st);
    if (rc < 0)
        return rc;
    h->rev = 0;
    return ok(st);
}

struct qc_mutex {
    struct hold h;
};

int qc_mutex_new(qc_session *s, const char *name, qc_mutex **out)
{
    *out = NULL;
    if (s == NULL || !valid_name(name))
        return -EINVAL;
    qc_mutex *m = calloc(1, sizeof(*m));
    if (m == NULL || hold_init(&m->h, s, name) < 0) {
        free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

int qc_mutex_lock(qc_mutex *m, int timeout_ms, struct qc_status *st)
{
    return hold_acquire(&m->h, "", "", 1, timeout_ms, st);
}

int qc_mutex_trylock(qc_mutex *m, struct qc_status *st)
{
    struct hold *h = &m->h;
    if (h->rev != 0)
        return invalid(st, "lock: already held by this object");
    if (qc_session_lost(h->s))
        return lost(st);
    char *key = lease_key(h->s, h->pfx);
    if (key == NULL)
        return nomem(st);
    int64_t rev, lease;
    int created;
    int rc = create_put(h->s->c, key, "", 0, h->s->lease, &rev, &created, &lease, st);
    Etcdserverpb__RangeResponse *r = NULL;
    if (rc == 0) {
        struct rq q = {
            .key = h->pfx, .prefix = 1, .max_create = rev - 1, .keys_only = 1, .limit = 1};
        rc = get(h->s->c, &q, &r, st);
    }
    if (rc == 0 && r->n_kvs > 0) {
        if (created)
            del_key(h->s->c, key, 0, NULL);
        rc = status(st, QC_EBUSY, QC_FAILED_PRECONDITION, "mutex: Locked by another session");
    }
    free_msg(r);
    if (rc < 0) {
        free(key);
        return rc;
    }
    free(h->key);
    h->key = key;
    h->rev = rev;
    return ok(st);
}

int qc_mutex_unlock(qc_mutex *m, struct qc_status *st)
{
    return hold_release(&m->h, st);
}

const char *qc_mutex_key(const qc_mutex *m)
{
    return m->h.rev != 0 ? m->h.key : NULL;
}

int64_t qc_mutex_token(const qc_mutex *m)
{
    return m->h.rev;
}

void qc_mutex_free(qc_mutex *m)
{
    if (m == NULL)
        return;
    hold_fini(&m->h);
    free(m);
}

struct qc_rwlock {
    struct hold h;
};

int qc_rwlock_new(qc_session *s, const char *name, qc_rwlock **out)
{
    *out = NULL;
    if (s == NULL || !valid_name(name))
        return -EINVAL;
    qc_rwlock *l = calloc(1, sizeof(*l));
    if (l == NULL || hold_init(&l->h, s, name) < 0) {
        free(l);
        return -ENOMEM;
    }
    *out = l;
    return 0;
}

int qc_rwlock_rlock(qc_rwlock *l, int timeout_ms, struct qc_status *st)
{
    /* a reader waits for the writers before it */
    return hold_acquire(&l->h, "read/", "write/", 1, timeout_ms, st);
}

int qc_rwlock_wlock(qc_rwlock *l, int timeout_ms, struct qc_status *st)
{
    /* a writer waits for everyone before it */
    return hold_acquire(&l->h, "write/", "", 1, timeout_ms, st);
}

int qc_rwlock_unlock(qc_rwlock *l, struct qc_status *st)
{
    return hold_release(&l->h, st);
}

const char *qc_rwlock_key(const qc_rwlock *l)
{
    return l->h.rev != 0 ? l->h.key : NULL;
}

int64_t qc_rwlock_token(const qc_rwlock *l)
{
    return l->h.rev;
}

void qc_rwlock_free(qc_rwlock *l)
{
    if (l == NULL)
        return;
    hold_fini(&l->h);
    free(l);
}

struct qc_semaphore {
    struct hold h;
    int n;
};

int qc_semaphore_new(qc_session *s, const char *name, int n, qc_semaphore **out)
{
    *out = NULL;
    if (s == NULL || !valid_name(name) || n < 1)
        return -EINVAL;
    qc_semaphore *m = calloc(1, sizeof(*m));
    if (m == NULL || hold_init(&m->h, s, name) < 0) {
        free(m);
        return -ENOMEM;
    }
    m->n = n;
    *out = m;
    return 0;
}

int qc_semaphore_acquire(qc_semaphore *m, int timeout_ms, struct qc_status *st)
{
    return hold_acquire(&m->h, "", "", m->n, timeout_ms, st);
}

int qc_semaphore_release(qc_semaphore *m, struct qc_status *st)
{
    return hold_release(&m->h, st);
}

const char *qc_semaphore_key(const qc_semaphore *m)
{
    return m->h.rev != 0 ? m->h.key : NULL;
}

void qc_semaphore_free(qc_semaphore *m)
{
    if (m == NULL)
        return;
    hold_fini(&m->h);
    free(m);
}

/* ---- barrier ---- */

int qc_barrier_hold(qc_client *c, const char *name, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "barrier: empty name");
    return qc_put(c, name, strlen(name), "", 0, 0, NULL, st);
}

int qc_barrier_release(qc_client *c, const char *name, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "barrier: empty name");
    return del_key(c, name, 0, st);
}

int qc_barrier_wait(qc_client *c, const char *name, int timeout_ms, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "barrier: empty name");
    int64_t dl = deadline_of(timeout_ms);
    for (;;) {
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = name};
        int rc = get(c, &q, &r, st);
        if (rc < 0)
            return rc;
        int held = r->n_kvs > 0;
        int64_t rev = hdr_rev(r->header);
        free_msg(r);
        if (!held)
            return ok(st);
        rc = wait_change(c, NULL, name, 0, rev + 1, EV_DELETE, dl, st);
        if (rc < 0)
            return rc;
    }
}

/* ---- double barrier ---- */

struct qc_dbarrier {
    qc_session *s;
    int n;
    char *waiters;     /* "<name>/waiters/" */
    char *ready;       /* "<name>/ready" */
    char *key;         /* our waiter key */
    int64_t ready_rev; /* mod revision of this round's "ready"; 0: not in */
};

int qc_dbarrier_new(qc_session *s, const char *name, int n, qc_dbarrier **out)
{
    *out = NULL;
    if (s == NULL || !valid_name(name) || n < 1)
        return -EINVAL;
    qc_dbarrier *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->s = s;
    b->n = n;
    b->waiters = cat(name, "/waiters/", NULL);
    b->ready = cat(name, "/ready", NULL);
    b->key = b->waiters != NULL ? lease_key(s, b->waiters) : NULL;
    if (b->ready == NULL || b->key == NULL) {
        qc_dbarrier_free(b);
        return -ENOMEM;
    }
    *out = b;
    return 0;
}

void qc_dbarrier_free(qc_dbarrier *b)
{
    if (b == NULL)
        return;
    free(b->waiters);
    free(b->ready);
    free(b->key);
    free(b);
}

int qc_dbarrier_enter(qc_dbarrier *b, int timeout_ms, struct qc_status *st)
{
    qc_session *s = b->s;
    if (b->ready_rev != 0)
        return invalid(st, "double barrier: already entered");
    if (qc_session_lost(s))
        return lost(st);
    int64_t dl = deadline_of(timeout_ms);
    int64_t mine, lease;
    int created;
    int rc = create_put(s->c, b->key, "", 0, s->lease, &mine, &created, &lease, st);
    if (rc < 0)
        return rc;
    Etcdserverpb__RangeResponse *r;
    struct rq q = {.key = b->waiters, .prefix = 1, .count_only = 1};
    rc = get(s->c, &q, &r, st);
    if (rc < 0)
        goto undo;
    int64_t count = r->count;
    free_msg(r);
    if (count > b->n) {
        rc = status(st, QC_ETOOMANY, QC_FAILED_PRECONDITION, "too many clients");
        goto undo;
    }
    if (count == b->n) {
        /* put "ready" once (two may count n at the same time), replacing
         * one left from an older round whose last participant died */
        for (;;) {
            int64_t rrev;
            rc = create_put(s->c, b->ready, "", 0, 0, &rrev, &created, NULL, st);
            if (rc < 0)
                goto undo;
            if (created || rrev > mine) {
                b->ready_rev = rrev;
                return ok(st);
            }
            ProtobufCBinaryData rk = bin(b->ready);
            rc = txn_delete(s->c, &rk, rrev, st);
            if (rc < 0)
                goto undo;
        }
    }
    /* wait for a put of "ready" after our own key */
    for (;;) {
        struct rq qr = {.key = b->ready};
        rc = get(s->c, &qr, &r, st);
        if (rc < 0)
            goto undo;
        int64_t rev = hdr_rev(r->header);
        if (r->n_kvs == 1 && r->kvs[0]->mod_revision > mine) {
            b->ready_rev = r->kvs[0]->mod_revision;
            free_msg(r);
            return ok(st);
        }
        free_msg(r);
        rc = wait_change(s->c, s, b->ready, 0, rev + 1, EV_PUT, dl, st);
        if (rc < 0)
            goto undo;
    }
undo:
    if (rc != QC_ELOST)
        del_key(s->c, b->key, 0, NULL);
    return rc;
}

int qc_dbarrier_leave(qc_dbarrier *b, int timeout_ms, struct qc_status *st)
{
    qc_session *s = b->s;
    if (b->ready_rev == 0)
        return invalid(st, "double barrier: not entered");
    int64_t dl = deadline_of(timeout_ms);
    int rc;
    /* contrib/recipes' order: the oldest participant leaves last, waiting
     * for the newest; everyone else deletes its key and waits for the
     * oldest, so all return after the last one is gone. Only this round's
     * keys count: those created before its "ready". */
    size_t klen = strlen(b->key);
    for (;;) {
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = b->waiters,
                       .prefix = 1,
                       .max_create = b->ready_rev - 1,
                       .sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE,
                       .order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND,
                       .keys_only = 1};
        rc = get(s->c, &q, &r, st);
        if (rc < 0)
            return rc;
        if (r->n_kvs == 0) {
            free_msg(r);
            break;
        }
        Mvccpb__KeyValue *low = r->kvs[0], *high = r->kvs[r->n_kvs - 1];
        int low_mine = low->key.len == klen && memcmp(low->key.data, b->key, klen) == 0;
        int64_t rev = hdr_rev(r->header);
        if (r->n_kvs == 1 && low_mine) {
            free_msg(r);
            /* the last one: this round's "ready" (not a later one), then us */
            ProtobufCBinaryData rk = bin(b->ready);
            rc = txn_delete(s->c, &rk, b->ready_rev, st);
            if (rc >= 0)
                rc = del_key(s->c, b->key, 0, st);
            if (rc < 0)
                return rc;
            break;
        }
        char *wait_for = low_mine ? strndup((const char *)high->key.data, high->key.len)
                                  : strndup((const char *)low->key.data, low->key.len);
        int mine_there = 0;
        for (size_t i = 0; i < r->n_kvs; i++)
            mine_there |=
                r->kvs[i]->key.len == klen && memcmp(r->kvs[i]->key.data, b->key, klen) == 0;
        free_msg(r);
        if (wait_for == NULL)
            return nomem(st);
        if (!low_mine && mine_there) {
            rc = del_key(s->c, b->key, 0, st);
            if (rc < 0) {
                free(wait_for);
                return rc;
            }
        }
        rc = wait_change(s->c, NULL, wait_for, 0, rev + 1, EV_DELETE, dl, st);
        free(wait_for);
        if (rc < 0)
            return rc;
    }
    b->ready_rev = 0;
    return ok(st);
}

/* ---- queues ---- */

/* unique_suffix: a name no other put picks: the wall clock in ns, this
 * process and a counter */
static void unique_suffix(char *out, size_t cap)
{
    static unsigned long seq;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    snprintf(out, cap, "%016" PRIx64 "-%x-%lx",
             (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, (unsigned)getpid(), n);
}

static int put_new(qc_client *c, const char *pfx, const void *val, size_t vlen,
                   struct qc_status *st)
{
    for (;;) {
        char suf[64];
        unique_suffix(suf, sizeof(suf));
        char *key = cat(pfx, suf, NULL);
        if (key == NULL)
            return nomem(st);
        int64_t rev;
        int created;
        int rc = create_put(c, key, val, vlen, 0, &rev, &created, NULL, st);
        free(key);
        if (rc < 0 || created)
            return rc;
    }
}

/* take_first deletes and returns the oldest key under |pfx| (*|key| and
 * *|val| malloc'd): 1 taken, 0 empty (then *|rev| is the read's revision),
 * or an error */
static int take_first(qc_client *c, const char *pfx, char **key, char **val, size_t *vlen,
                      int64_t *rev, struct qc_status *st)
{
    for (;;) {
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = pfx,
                       .prefix = 1,
                       .sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE,
                       .order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND,
                       .limit = 1};
        int rc = get(c, &q, &r, st);
        if (rc < 0)
            return rc;
        *rev = hdr_rev(r->header);
        if (r->n_kvs == 0) {
            free_msg(r);
            return 0;
        }
        Mvccpb__KeyValue *kv = r->kvs[0];
        rc = txn_delete(c, &kv->key, kv->mod_revision, st);
        if (rc == 1) {
            *val = malloc(kv->value.len + 1);
            *key = strndup((const char *)kv->key.data, kv->key.len);
            if (*val == NULL || *key == NULL) {
                free(*val);
                free(*key);
                free_msg(r);
                return nomem(st);
            }
            if (kv->value.len > 0)
                memcpy(*val, kv->value.data, kv->value.len);
            (*val)[kv->value.len] = '\0';
            *vlen = kv->value.len;
        }
        free_msg(r);
        if (rc != 0)
            return rc; /* taken, or an error */
        /* another consumer took it first: the next one */
    }
}

int qc_queue_put(qc_client *c, const char *name, const void *val, size_t vlen, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "queue: empty name");
    char *pfx = cat(name, "/", NULL);
    if (pfx == NULL)
        return nomem(st);
    int rc = put_new(c, pfx, val, vlen, st);
    free(pfx);
    return rc;
}

int qc_queue_take(qc_client *c, const char *name, int timeout_ms, char **val, size_t *vlen,
                  struct qc_status *st)
{
    *val = NULL;
    *vlen = 0;
    if (!valid_name(name))
        return invalid(st, "queue: empty name");
    int64_t dl = deadline_of(timeout_ms);
    char *pfx = cat(name, "/", NULL);
    if (pfx == NULL)
        return nomem(st);
    int rc;
    for (;;) {
        char *key = NULL;
        int64_t rev;
        rc = take_first(c, pfx, &key, val, vlen, &rev, st);
        free(key);
        if (rc != 0)
            break;
        if (left_ms(dl) == 0) {
            rc = timed_out(st);
            break;
        }
        rc = wait_change(c, NULL, pfx, 1, rev + 1, EV_PUT, dl, st);
        if (rc < 0)
            break;
    }
    free(pfx);
    return rc < 0 ? rc : ok(st);
}

int qc_pqueue_put(qc_client *c, const char *name, uint32_t prio, const void *val, size_t vlen,
                  struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "priority queue: empty name");
    char *pfx;
    if (asprintf(&pfx, "%s/%010" PRIu32 "/", name, prio) < 0)
        return nomem(st);
    int rc = put_new(c, pfx, val, vlen, st);
    free(pfx);
    return rc;
}

int qc_pqueue_take(qc_client *c, const char *name, int timeout_ms, char **val, size_t *vlen,
                   uint32_t *prio, struct qc_status *st)
{
    *val = NULL;
    *vlen = 0;
    if (!valid_name(name))
        return invalid(st, "priority queue: empty name");
    int64_t dl = deadline_of(timeout_ms);
    char *pfx = cat(name, "/", NULL);
    if (pfx == NULL)
        return nomem(st);
    size_t plen = strlen(pfx);
    int rc;
    for (;;) {
        /* the lowest priority present, then the oldest item of it */
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = pfx,
                       .prefix = 1,
                       .sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY,
                       .order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND,
                       .limit = 1};
        rc = get(c, &q, &r, st);
        if (rc < 0)
            break;
        int64_t rev = hdr_rev(r->header);
        if (r->n_kvs == 1 && r->kvs[0]->key.len >= plen + 11) {
            char *sub = strndup((const char *)r->kvs[0]->key.data, plen + 11);
            free_msg(r);
            if (sub == NULL) {
                rc = nomem(st);
                break;
            }
            char *key = NULL;
            rc = take_first(c, sub, &key, val, vlen, &rev, st);
            if (rc == 1 && prio != NULL)
                *prio = (uint32_t)strtoul(sub + plen, NULL, 10);
            free(sub);
            free(key);
            if (rc != 0)
                break;
            continue; /* that priority emptied meanwhile: look again */
        }
        free_msg(r);
        if (left_ms(dl) == 0) {
            rc = timed_out(st);
            break;
        }
        rc = wait_change(c, NULL, pfx, 1, rev + 1, EV_PUT, dl, st);
        if (rc < 0)
            break;
    }
    free(pfx);
    return rc < 0 ? rc : ok(st);
}

/* ---- group membership ---- */

static char *member_key(const char *group, const char *id)
{
    return cat(group, "/", id);
}

int qc_group_join(qc_session *s, const char *group, const char *id, const void *val, size_t vlen,
                  struct qc_status *st)
{
    if (s == NULL || !valid_name(group) || !valid_name(id))
        return invalid(st, "membership: empty group or member id");
    if (qc_session_lost(s))
        return lost(st);
    char *key = member_key(group, id);
    if (key == NULL)
        return nomem(st);
    int64_t rev, lease;
    int created;
    int rc = create_put(s->c, key, val, vlen, s->lease, &rev, &created, &lease, st);
    if (rc == 0 && !created) {
        if (lease == s->lease) /* joined again by the same session */
            rc = qc_put(s->c, key, strlen(key), val, vlen, s->lease, NULL, st);
        else
            rc = status(st, QC_EEXIST, QC_ALREADY_EXISTS, "key already exists");
    }
    free(key);
    return rc;
}

int qc_group_leave(qc_session *s, const char *group, const char *id, struct qc_status *st)
{
    if (s == NULL || !valid_name(group) || !valid_name(id))
        return invalid(st, "membership: empty group or member id");
    char *key = member_key(group, id);
    if (key == NULL)
        return nomem(st);
    int rc = del_key(s->c, key, 0, st);
    free(key);
    return rc;
}

void qc_members_free(struct qc_members *ms)
{
    if (ms == NULL)
        return;
    for (size_t i = 0; i < ms->n; i++) {
        free(ms->m[i].id);
        free(ms->m[i].value);
    }
    free(ms->m);
    free(ms);
}

int qc_group_list(qc_client *c, const char *group, struct qc_members **out, struct qc_status *st)
{
    *out = NULL;
    if (!valid_name(group))
        return invalid(st, "membership: empty group");
    char *pfx = cat(group, "/", NULL);
    if (pfx == NULL)
        return nomem(st);
    Etcdserverpb__RangeResponse *r;
    struct rq q = {.key = pfx, .prefix = 1};
    int rc = get(c, &q, &r, st);
    size_t plen = strlen(pfx);
    free(pfx);
    if (rc < 0)
        return rc;
    struct qc_members *ms = calloc(1, sizeof(*ms));
    if (ms == NULL || (r->n_kvs > 0 && (ms->m = calloc(r->n_kvs, sizeof(*ms->m))) == NULL)) {
        free(ms);
        free_msg(r);
        return nomem(st);
    }
    ms->revision = hdr_rev(r->header);
    for (size_t i = 0; i < r->n_kvs; i++) {
        Mvccpb__KeyValue *kv = r->kvs[i];
        struct qc_member *m = &ms->m[ms->n++];
        m->id = strndup((const char *)kv->key.data + plen, kv->key.len - plen);
        m->value = malloc(kv->value.len + 1);
        if (m->id == NULL || m->value == NULL) {
            qc_members_free(ms);
            free_msg(r);
            return nomem(st);
        }
        if (kv->value.len > 0)
            memcpy(m->value, kv->value.data, kv->value.len);
        m->value[kv->value.len] = '\0';
        m->vlen = kv->value.len;
        m->joined = kv->create_revision;
    }
    free_msg(r);
    *out = ms;
    return ok(st);
}

struct qc_group_watcher {
    qc_stream *s;
    size_t plen;
    Etcdserverpb__WatchResponse *cur; /* events not yet reported */
    size_t next;
};

int qc_group_watch_open(qc_client *c, const char *group, int64_t from_rev, qc_group_watcher **out,
                        struct qc_status *st)
{
    *out = NULL;
    if (!valid_name(group))
        return invalid(st, "membership: empty group");
    qc_group_watcher *w = calloc(1, sizeof(*w));
    char *pfx = cat(group, "/", NULL);
    uint8_t *end = pfx != NULL ? malloc(strlen(pfx) + 1) : NULL;
    if (w == NULL || end == NULL) {
        free(w);
        free(pfx);
        return nomem(st);
    }
    w->plen = strlen(pfx);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = bin(pfx);
    cr.range_end = prefix_end(pfx, end);
    cr.start_revision = from_rev > 0 ? from_rev + 1 : 0;
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    int rc = qc_stream_open(c, QC_METHOD_WATCH, &w->s);
    if (rc == 0)
        rc = qc_stream_send(w->s, &wr.base);
    free(pfx);
    free(end);
    if (rc < 0) {
        qc_stream_free(w->s);
        free(w);
        return status(st, rc, QC_UNAVAILABLE, qc_strerror(rc));
    }
    *out = w;
    return ok(st);
}

int qc_group_watch_next(qc_group_watcher *w, int timeout_ms, char **id, int *joined,
                        struct qc_status *st)
{
    *id = NULL;
    int64_t dl = deadline_of(timeout_ms);
    for (;;) {
        while (w->cur != NULL && w->next < w->cur->n_events) {
            Mvccpb__Event *e = w->cur->events[w->next++];
            if (e->kv == NULL || e->kv->key.len < w->plen)
                continue;
            int j = e->type == MVCCPB__EVENT__EVENT_TYPE__PUT;
            if (j && e->kv->version != 1)
                continue; /* a member's new value, not a join */
            *id = strndup((const char *)e->kv->key.data + w->plen, e->kv->key.len - w->plen);
            if (*id == NULL)
                return nomem(st);
            *joined = j;
            ok(st);
            return 1;
        }
        free_msg(w->cur);
        w->cur = NULL;
        w->next = 0;
        struct qc_status ls;
        int rc = qc_stream_recv(w->s, &etcdserverpb__watch_response__descriptor,
                                (ProtobufCMessage **)&w->cur, left_ms(dl), &ls);
        if (rc == QC_ETIMEDOUT)
            return timed_out(st);
        if (rc == 1)
            return ls.code != QC_OK ? status(st, QC_ESTATUS, ls.code, ls.message)
                                    : status(st, QC_ECLOSED, QC_CANCELLED, "watch closed");
        if (rc < 0)
            return status(st, rc, ls.code, ls.message);
        if (w->cur->canceled) {
            int64_t cr = w->cur->compact_revision;
            free_msg(w->cur);
            w->cur = NULL;
            if (cr > 0)
                return status(st, QC_ESTATUS, QC_OUT_OF_RANGE,
                              "etcdserver: mvcc: required revision has been compacted");
            return status(st, QC_ECLOSED, QC_CANCELLED, "watch canceled");
        }
    }
}

void qc_group_watch_close(qc_group_watcher *w)
{
    if (w == NULL)
        return;
    free_msg(w->cur);
    qc_stream_free(w->s);
    free(w);
}

/* ---- two-phase commit ---- */

static const char *outcome_text(int o)
{
    return o == QC_2PC_COMMIT ? "commit" : "abort";
}

/* read_outcome: 1 and *|o| when "<name>/outcome" is there, 0 (and the
 * read's revision in *|rev|) when not */
static int read_outcome(qc_client *c, const char *okey, int *o, int64_t *rev, struct qc_status *st)
{
    Etcdserverpb__RangeResponse *r;
    struct rq q = {.key = okey};
    int rc = get(c, &q, &r, st);
    if (rc < 0)
        return rc;
    *rev = hdr_rev(r->header);
    int there = r->n_kvs == 1;
    if (there)
        *o = r->kvs[0]->value.len == 6 && memcmp(r->kvs[0]->value.data, "commit", 6) == 0
                 ? QC_2PC_COMMIT
                 : QC_2PC_ABORT;
    free_msg(r);
    return there;
}

/* decide writes the outcome unless one is already there; *|o| is the one
 * that stands */
static int decide(qc_client *c, const char *okey, int want, int *o, struct qc_status *st)
{
    for (;;) {
        const char *v = outcome_text(want);
        int64_t rev;
        int created;
        int rc = create_put(c, okey, v, strlen(v), 0, &rev, &created, NULL, st);
        if (rc < 0)
            return rc;
        if (created) {
            *o = want;
            return ok(st);
        }
        rc = read_outcome(c, okey, o, &rev, st);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return ok(st);
        /* reset in between: decide again */
    }
}

int qc_2pc_coordinate(qc_client *c, const char *name, int n, int timeout_ms, int *outcome,
                      struct qc_status *st)
{
    if (!valid_name(name) || n < 1)
        return invalid(st, "2pc: bad arguments");
    int64_t dl = deadline_of(timeout_ms);
    char *pfx = cat(name, "/", NULL);
    char *votes = cat(name, "/votes/", NULL);
    char *okey = cat(name, "/outcome", NULL);
    int rc;
    if (pfx == NULL || votes == NULL || okey == NULL) {
        rc = nomem(st);
        goto out;
    }
    for (;;) {
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = pfx, .prefix = 1};
        rc = get(c, &q, &r, st);
        if (rc < 0)
            goto out;
        int64_t rev = hdr_rev(r->header);
        int commits = 0, aborts = 0, decided = -1;
        size_t vl = strlen(votes), ol = strlen(okey);
        for (size_t i = 0; i < r->n_kvs; i++) {
            Mvccpb__KeyValue *kv = r->kvs[i];
            int is_commit = kv->value.len == 6 && memcmp(kv->value.data, "commit", 6) == 0;
            if (kv->key.len == ol && memcmp(kv->key.data, okey, ol) == 0)
                decided = is_commit ? QC_2PC_COMMIT : QC_2PC_ABORT;
            else if (kv->key.len > vl && memcmp(kv->key.data, votes, vl) == 0)
                is_commit ? commits++ : aborts++;
        }
        free_msg(r);
        if (decided >= 0) {
            *outcome = decided;
            rc = ok(st);
            goto out;
        }
        if (aborts > 0 || commits >= n) {
            rc = decide(c, okey, aborts > 0 ? QC_2PC_ABORT : QC_2PC_COMMIT, outcome, st);
            goto out;
        }
        rc = wait_change(c, NULL, pfx, 1, rev + 1, EV_PUT, dl, st);
        if (rc == QC_ETIMEDOUT) { /* not all votes in time: abort */
            rc = decide(c, okey, QC_2PC_ABORT, outcome, st);
            goto out;
        }
        if (rc < 0)
            goto out;
    }
out:
    free(pfx);
    free(votes);
    free(okey);
    return rc;
}

int qc_2pc_vote(qc_session *s, const char *name, int commit, int timeout_ms, int *outcome,
                struct qc_status *st)
{
    if (s == NULL || !valid_name(name))
        return invalid(st, "2pc: bad arguments");
    if (qc_session_lost(s))
        return lost(st);
    int64_t dl = deadline_of(timeout_ms);
    char *votes = cat(name, "/votes/", NULL);
    char *okey = cat(name, "/outcome", NULL);
    char *key = votes != NULL ? lease_key(s, votes) : NULL;
    int rc;
    if (okey == NULL || key == NULL) {
        rc = nomem(st);
        goto out;
    }
    const char *v = outcome_text(commit ? QC_2PC_COMMIT : QC_2PC_ABORT);
    rc = qc_put(s->c, key, strlen(key), v, strlen(v), s->lease, NULL, st);
    if (rc < 0)
        goto out;
    if (!commit) { /* a "no" decides: nobody can commit now */
        rc = decide(s->c, okey, QC_2PC_ABORT, outcome, st);
        goto out;
    }
    for (;;) {
        int64_t rev;
        rc = read_outcome(s->c, okey, outcome, &rev, st);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            rc = ok(st);
            goto out;
        }
        rc = wait_change(s->c, s, okey, 0, rev + 1, EV_PUT, dl, st);
        if (rc < 0)
            goto out;
    }
out:
    free(votes);
    free(okey);
    free(key);
    return rc;
}

int qc_2pc_outcome(qc_client *c, const char *name, int *outcome, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "2pc: empty name");
    char *okey = cat(name, "/outcome", NULL);
    if (okey == NULL)
        return nomem(st);
    int64_t rev;
    int rc = read_outcome(c, okey, outcome, &rev, st);
    free(okey);
    return rc;
}

int qc_2pc_reset(qc_client *c, const char *name, struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "2pc: empty name");
    char *pfx = cat(name, "/", NULL);
    if (pfx == NULL)
        return nomem(st);
    int rc = del_key(c, pfx, 1, st);
    free(pfx);
    return rc;
}

/* ---- counter ---- */

static int parse_counter(const Mvccpb__KeyValue *kv, int64_t *v, struct qc_status *st)
{
    char buf[32];
    if (kv->value.len == 0 || kv->value.len >= sizeof(buf))
        return status(st, QC_EBADVALUE, QC_INVALID_ARGUMENT, "counter: value is not an integer");
    memcpy(buf, kv->value.data, kv->value.len);
    buf[kv->value.len] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0')
        return status(st, QC_EBADVALUE, QC_INVALID_ARGUMENT, "counter: value is not an integer");
    *v = x;
    return 0;
}

int qc_counter_get(qc_client *c, const char *name, int64_t *value, struct qc_status *st)
{
    *value = 0;
    if (!valid_name(name))
        return invalid(st, "counter: empty name");
    Etcdserverpb__RangeResponse *r;
    struct rq q = {.key = name};
    int rc = get(c, &q, &r, st);
    if (rc < 0)
        return rc;
    if (r->n_kvs == 1)
        rc = parse_counter(r->kvs[0], value, st);
    free_msg(r);
    return rc < 0 ? rc : ok(st);
}

int qc_counter_add(qc_client *c, const char *name, int64_t delta, int64_t *value,
                   struct qc_status *st)
{
    if (!valid_name(name))
        return invalid(st, "counter: empty name");
    for (;;) {
        Etcdserverpb__RangeResponse *r;
        struct rq q = {.key = name};
        int rc = get(c, &q, &r, st);
        if (rc < 0)
            return rc;
        int64_t cur = 0, mod = 0, next;
        if (r->n_kvs == 1) {
            mod = r->kvs[0]->mod_revision;
            rc = parse_counter(r->kvs[0], &cur, st);
        }
        free_msg(r);
        if (rc < 0)
            return rc;
        if (__builtin_add_overflow(cur, delta, &next))
            return status(st, QC_EBADVALUE, QC_OUT_OF_RANGE, "counter: overflow");
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRId64, next);
        /* unchanged since the read: mod revision equal, or still absent
         * (create revision 0) */
        Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT, *pcmp = &cmp;
        cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
        cmp.key = bin(name);
        if (mod != 0) {
            cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
            cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
            cmp.mod_revision = mod;
        } else {
            cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
            cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
            cmp.create_revision = 0;
        }
        Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
        put.key = bin(name);
        put.value = bin(buf);
        Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT, *pop = &op;
        op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        op.request_put = &put;
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_compare = 1;
        t.compare = &pcmp;
        t.n_success = 1;
        t.success = &pop;
        Etcdserverpb__TxnResponse *tr;
        rc = qc_txn(c, &t, &tr, st);
        if (rc < 0)
            return rc;
        int done = tr->succeeded;
        free_msg(tr);
        if (done) {
            if (value != NULL)
                *value = next;
            return ok(st);
        }
    }
}
