/* http/v2_lease.c: the "ttl" and "expiration" of v2 nodes from their v3
 * leases (v2_req.h). One Lease/LeaseTimeToLive local call per distinct
 * lease, at most TTL_INFLIGHT at a time. A callback may come before
 * lcall_unary returns, so the calls are started by one loop (pump) that
 * a completion re-enters only by counting; nothing recurses per lease. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/v2_req.h"
#include "rpc.pb-c.h"

#define TTL_INFLIGHT 32

struct v2_ttl_slot {
    struct v2_ttls *t;
    struct lcall *lc;
    int64_t id;
    bool found;
    int64_t ttl, granted;
    size_t nkeys;
};

int64_t v2_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int id_order(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* find: the slot of lease |id| (the slots are in id order). */
static const struct v2_ttl_slot *find(const struct v2_ttls *t, int64_t id)
{
    size_t lo = 0, hi = t->n_slots;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->slots[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_slots && t->slots[lo].id == id ? &t->slots[lo] : NULL;
}

static void fill(struct v2_ttls *t)
{
    int64_t now = v2_now_ns();
    for (size_t i = 0; i < t->n_nodes; i++) {
        struct v2_node *n = t->nodes[i];
        const struct v2_ttl_slot *s = find(t, n->lease);
        if (s != NULL && s->found) {
            /* LeaseTimeToLive rounds the time left down; the v2 store
             * rounds up (a fresh 5 s key shows 5) */
            int64_t left = s->ttl < 0 ? 0 : s->ttl;
            int64_t shown = left + 1;
            int64_t exp = now + left * 1000000000 + 500000000;
            if (s->granted > 0 && shown > s->granted) {
                shown = s->granted;
                exp = now + s->granted * 1000000000;
            }
            n->has_exp = true;
            n->exp_ns = exp;
            n->ttl = shown;
        }
    }
}

static void pump(struct v2_ttls *t);

static void on_ttl(void *arg, int status, const char *msg, const uint8_t *resp, size_t len)
{
    (void)msg;
    struct v2_ttl_slot *s = arg;
    struct v2_ttls *t = s->t;
    s->lc = NULL;
    if (status == 0) {
        Etcdserverpb__LeaseTimeToLiveResponse *r =
            etcdserverpb__lease_time_to_live_response__unpack(NULL, len, resp);
        if (r != NULL && r->ttl >= 0) {
            s->found = true;
            s->ttl = r->ttl;
            s->granted = r->grantedttl;
            s->nkeys = r->n_keys;
        }
        if (r != NULL)
            etcdserverpb__lease_time_to_live_response__free_unpacked(r, NULL);
    }
    t->inflight--;
    pump(t);
}

static void pump(struct v2_ttls *t)
{
    if (t->pumping)
        return; /* the loop below goes on */
    t->pumping = true;
    while (t->active && t->next < t->n_slots && t->inflight < TTL_INFLIGHT) {
        struct v2_ttl_slot *s = &t->slots[t->next++];
        Etcdserverpb__LeaseTimeToLiveRequest req = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
        req.id = s->id;
        req.keys = true;
        t->inflight++;
        if (lcall_unary(t->srv, "/etcdserverpb.Lease/LeaseTimeToLive", &req.base, t->token, on_ttl,
                        s, &s->lc) != 0) {
            s->lc = NULL;
            t->inflight--;
        }
    }
    t->pumping = false;
    if (t->active && t->next == t->n_slots && t->inflight == 0) {
        t->active = false;
        fill(t);
        t->done(t->arg);
    }
}

int v2_ttls_run(struct v2_ttls *t, grpc_server *srv, const char *token, struct v2_node **nodes,
                size_t n, void (*done)(void *arg), void *arg)
{
    v2_ttls_reset(t);
    t->srv = srv;
    t->token = token;
    t->done = done;
    t->arg = arg;
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        if (nodes[i] != NULL && nodes[i]->lease != 0 && !nodes[i]->has_exp)
            want++;
    if (want > 0) {
        t->nodes = malloc(want * sizeof(*t->nodes));
        int64_t *ids = malloc(want * sizeof(*ids));
        t->slots = calloc(want, sizeof(*t->slots));
        if (t->nodes == NULL || ids == NULL || t->slots == NULL) {
            free(ids);
            v2_ttls_reset(t);
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
            if (nodes[i] != NULL && nodes[i]->lease != 0 && !nodes[i]->has_exp) {
                ids[t->n_nodes] = nodes[i]->lease;
                t->nodes[t->n_nodes++] = nodes[i];
            }
        qsort(ids, want, sizeof(*ids), id_order);
        for (size_t i = 0; i < want; i++)
            if (i == 0 || ids[i] != ids[i - 1]) {
                t->slots[t->n_slots].t = t;
                t->slots[t->n_slots++].id = ids[i];
            }
        free(ids);
    }
    t->active = true;
    pump(t);
    return 0;
}

bool v2_ttls_keyless(const struct v2_ttls *t, int64_t id)
{
    const struct v2_ttl_slot *s = find(t, id);
    return s != NULL && s->found && s->nkeys == 0;
}

void v2_ttls_reset(struct v2_ttls *t)
{
    for (size_t k = 0; k < t->n_slots; k++)
        if (t->slots[k].lc != NULL) {
            lcall_cancel(t->slots[k].lc);
            t->slots[k].lc = NULL;
        }
    free(t->slots);
    free(t->nodes);
    memset(t, 0, sizeof(*t));
}

void v2_lease_revoke(grpc_server *srv, const char *token, int64_t id)
{
    Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    req.id = id;
    struct lcall *lc;
    lcall_unary(srv, "/etcdserverpb.Lease/LeaseRevoke", &req.base, token, NULL, NULL, &lc);
}
