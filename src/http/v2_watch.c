/* http/v2_watch.c: GET /v2/keys/...?wait=true, a long poll (or with
 * stream=true a stream) of v2 events, from a Watch/Watch local call on
 * PFX's prefix (v2.c has the design).
 *
 * As etcd's v2v3 watcher: the watch starts at waitIndex as a v3 revision
 * (one early) or now, with prev_kv; once it is created the headers go out
 * (200, chunked, X-Etcd-Index = the created response's revision - 1).
 * Each revision becomes one v2 event: action = the value PFX/act was put
 * to, node = the longest other key of the revision (the first of equal
 * length). A recursive wait matches its path and the keys below it whose
 * rest holds no "/_" (etcd's v2v3 matches by string prefix, so a wait on
 * /d also fires for /dx; quorum does not); a plain one its path only. The
 * first match is written and the response ends (stream=true: every match,
 * until the client leaves); a compacted start ends it with an empty body.
 *
 * Beyond etcd (which crashes there): a revision without the act key is
 * an expiry when its deletes took keys off a lease (action "expire"), else
 * skipped; one with the act key alone, or act "refresh", is skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "http/v2_req.h"

#define JSON_CT "application/json"
#define CLUSTER_HDR "X-Etcd-Cluster-Id: e7cd2f00d\r\n"

struct pend {
    struct pend *next;
    struct arena a;
    struct v2_event ev;
};

struct v2w {
    struct hreq *r;  /* NULL once answered or gone */
    grpc_call *call; /* the watch; NULL once finished or cancelled */
    grpc_server *srv;
    char *token;
    const char *pfx;
    char *path; /* the store path "/1..." */
    size_t path_len;
    bool recursive, stream;
    uint64_t wait_index;
    bool started;    /* headers out */
    bool closing;    /* no more events will come: end when written */
    bool over;       /* answered or gone */
    bool decorating; /* the head's ttls are being asked */
    bool pumping;
    bool failed; /* a send to us failed: -ENOMEM */
    int busy;
    struct pend *head, **tail;
    struct v2_ttls ttls;
    struct buf out;
};

static void pend_free(struct pend *p)
{
    arena_free(&p->a);
    free(p);
}

static void w_free(struct v2w *w)
{
    while (w->head != NULL) {
        struct pend *p = w->head;
        w->head = p->next;
        pend_free(p);
    }
    v2_ttls_reset(&w->ttls);
    buf_free(&w->out);
    free(w->token);
    free(w->path);
    free(w);
}

static void w_maybe_free(struct v2w *w)
{
    if (w->over && w->busy == 0 && w->call == NULL && !w->ttls.active)
        w_free(w);
}

static void w_cancel(struct v2w *w)
{
    if (w->call != NULL) {
        grpc_call_local_cancel(w->call);
        w->call = NULL;
    }
}

/* w_take: the hreq, now ours alone to finish */
static struct hreq *w_take(struct v2w *w)
{
    struct hreq *r = w->r;
    w->r = NULL;
    w->over = true;
    if (r != NULL)
        r->on_abort = NULL;
    w_cancel(w);
    v2_ttls_reset(&w->ttls);
    return r;
}

static void w_end(struct v2w *w)
{
    struct hreq *r = w_take(w);
    if (r != NULL)
        hreq_stream_end(r);
}

/* w_error: the watch could not be made: etcd's 300 with the path */
static void w_error(struct v2w *w, const char *cause, size_t cause_len)
{
    struct hreq *r = w_take(w);
    if (r == NULL)
        return;
    struct buf b = {0};
    if (v2_error_json(&b, 300, cause, cause_len, 0) == 0)
        hreq_respond(r, 500, JSON_CT, CLUSTER_HDR "X-Etcd-Index: 0\r\n", b.data, b.len);
    else
        hreq_respond(r, 500, NULL, NULL, NULL, 0);
    buf_free(&b);
}

static void w_abort(struct hreq *r)
{
    struct v2w *w = r->ctx;
    w->r = NULL;
    w->over = true;
    w_cancel(w);
    v2_ttls_reset(&w->ttls);
    w_maybe_free(w);
}

/* ---- writing events, in order, each after its ttls are known ---- */

static void pump(struct v2w *w);

/* decorated: the head's ttls are known; it is written (called by
 * v2_lease.c, which touches nothing of w after this returns: w may be
 * freed here) */
static void decorated(void *arg)
{
    struct v2w *w = arg;
    struct pend *p = w->head;
    w->decorating = false;
    w->busy++;
    if (w->r != NULL && p != NULL) {
        w->head = p->next;
        if (w->head == NULL)
            w->tail = &w->head;
        buf_reset(&w->out);
        if (v2_event_json(&w->out, &p->ev) == 0)
            hreq_stream_write(w->r, w->out.data, w->out.len);
        pend_free(p);
        if (!w->stream)
            w_end(w);
        else
            pump(w);
    }
    w->busy--;
    w_maybe_free(w);
}

static void pump(struct v2w *w)
{
    if (w->pumping)
        return; /* the loop below goes on */
    w->pumping = true;
    w->busy++;
    while (w->r != NULL && w->head != NULL && !w->decorating) {
        struct v2_node *nodes[2] = {w->head->ev.node, w->head->ev.prev};
        w->decorating = true;
        if (v2_ttls_run(&w->ttls, w->srv, w->token, nodes, 2, decorated, w) != 0)
            decorated(w); /* without ttls */
    }
    w->pumping = false;
    if (w->r != NULL && w->head == NULL && w->closing)
        w_end(w);
    w->busy--;
}

/* ---- v3 events to v2 events ---- */

static bool is_act(const struct v2w *w, const Mvccpb__Event *e)
{
    size_t pl = strlen(w->pfx);
    return e->type == MVCCPB__EVENT__EVENT_TYPE__PUT && e->kv->key.len == pl + 4 &&
           memcmp(e->kv->key.data, w->pfx, pl) == 0 && memcmp(e->kv->key.data + pl, "/act", 4) == 0;
}

static bool is_node(const struct v2w *w, const Mvccpb__KeyValue *kv, struct buf *tmp)
{
    bool dir;
    return v2_key_path(w->pfx, kv->key.data, kv->key.len, tmp, &dir);
}

/* matches: etcd's filter on the node's store path */
static bool matches(const struct v2w *w, const struct v2_node *n)
{
    if (!w->recursive)
        return n->key_len == w->path_len && memcmp(n->key, w->path, n->key_len) == 0;
    if (n->key_len < w->path_len || memcmp(n->key, w->path, w->path_len) != 0)
        return false;
    /* "/" + the rest must not hold "/_" */
    const char *rest = n->key + w->path_len;
    size_t rn = n->key_len - w->path_len;
    if (rn > 0 && rest[0] != '/')
        return false; /* /dx is not below /d (etcd's v2v3 takes it: a string prefix) */
    for (size_t i = 0; i + 1 < rn; i++)
        if (rest[i] == '/' && rest[i + 1] == '_')
            return false;
    return true;
}

/* revision_event makes the v2 event of one revision's events [i, j) into
 * |p|; false when the revision has none. */
static bool revision_event(struct v2w *w, Mvccpb__Event **evs, size_t i, size_t j, struct pend *p,
                           struct buf *tmp)
{
    const Mvccpb__Event *act = NULL, *best = NULL, *gone = NULL;
    for (size_t k = i; k < j; k++) {
        const Mvccpb__Event *e = evs[k];
        if (is_act(w, e)) {
            if (act == NULL)
                act = e;
            continue;
        }
        if (!is_node(w, e->kv, tmp))
            continue;
        if (best == NULL || e->kv->key.len > best->kv->key.len)
            best = e;
        if (e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE && e->prev_kv != NULL &&
            e->prev_kv->lease != 0 && (gone == NULL || e->kv->key.len > gone->kv->key.len))
            gone = e;
    }
    if (act != NULL) {
        if (best == NULL)
            return false; /* the act key alone: a DELETE of nothing */
        const ProtobufCBinaryData *v = &act->kv->value;
        if (v->len == 7 && memcmp(v->data, "refresh", 7) == 0)
            return false; /* the v2 store does not notify refreshes */
        char *a = arena_alloc(&p->a, v->len + 1);
        if (a == NULL)
            return false;
        if (v->len)
            memcpy(a, v->data, v->len);
        p->ev.action = a;
        p->ev.node = v2_node_from_kv(&p->a, w->pfx, best->kv);
        p->ev.prev = v2_node_from_kv(&p->a, w->pfx, best->prev_kv);
        return p->ev.node != NULL;
    }
    if (gone == NULL)
        return false; /* a v3 client's write under the prefix */
    /* a lease's revocation: the v2 store's expiry */
    struct v2_node *prev = v2_node_from_kv(&p->a, w->pfx, gone->prev_kv);
    if (prev == NULL)
        return false;
    struct v2_node *n = v2_node_new(&p->a, prev->key, prev->key_len);
    if (n == NULL)
        return false;
    n->dir = prev->dir;
    n->modified = v2_rev(gone->kv->mod_revision);
    n->created = prev->created;
    prev->lease = 0;
    prev->has_exp = true;
    prev->exp_ns = v2_now_ns();
    p->ev = (struct v2_event){"expire", n, prev};
    return true;
}

static void events(struct v2w *w, const Etcdserverpb__WatchResponse *wr)
{
    struct buf tmp = {0};
    size_t i = 0;
    while (i < wr->n_events && !w->closing) {
        if (wr->events[i]->kv == NULL) {
            i++;
            continue;
        }
        int64_t rev = wr->events[i]->kv->mod_revision;
        size_t j = i + 1;
        while (j < wr->n_events && wr->events[j]->kv != NULL &&
               wr->events[j]->kv->mod_revision == rev)
            j++;
        struct pend *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            w->failed = true;
            break;
        }
        if (revision_event(w, wr->events, i, j, p, &tmp) && matches(w, p->ev.node)) {
            *w->tail = p;
            w->tail = &p->next;
            if (!w->stream) {
                w->closing = true; /* the first match is the answer */
                w_cancel(w);
            }
        } else {
            pend_free(p);
        }
        i = j;
    }
    buf_free(&tmp);
}

/* ---- the watch call ---- */

static int w_send(void *ctx, const uint8_t *msg, size_t len)
{
    struct v2w *w = ctx;
    if (w->r == NULL)
        return -EPIPE;
    Etcdserverpb__WatchResponse *wr = etcdserverpb__watch_response__unpack(NULL, len, msg);
    if (wr == NULL)
        return 0;
    w->busy++;
    if (!w->started) {
        if (!wr->created || wr->canceled) {
            /* etcd: NewError(EcodeRaftInternal, path, 0) */
            w_error(w, w->path + 2, w->path_len - 2);
        } else {
            char extra[192];
            snprintf(extra, sizeof(extra),
                     CLUSTER_HDR "X-Etcd-Index: %llu\r\nX-Raft-Index: 0\r\nX-Raft-Term: 0\r\n",
                     (unsigned long long)v2_rev(wr->header ? wr->header->revision : 0));
            w->started = true;
            hreq_stream_start(w->r, 200, JSON_CT, extra);
        }
    } else if (wr->canceled || wr->compact_revision != 0) {
        /* compacted (or cancelled): etcd ends the body there */
        w->closing = true;
        w_cancel(w);
        pump(w);
    } else if (wr->n_events > 0) {
        events(w, wr);
        pump(w);
    }
    etcdserverpb__watch_response__free_unpacked(wr, NULL);
    int rv = w->failed ? -ENOMEM : 0;
    w->busy--;
    w_maybe_free(w);
    return rv;
}

static void w_finish(void *ctx, int status, const char *message)
{
    struct v2w *w = ctx;
    w->call = NULL;
    w->busy++;
    if (w->r != NULL && !w->started) {
        const char *m = status != 0 && message ? message : "watch ended";
        w_error(w, m, strlen(m));
    } else if (w->r != NULL) {
        w->closing = true;
        pump(w);
    }
    w->busy--;
    w_maybe_free(w);
}

static size_t w_pending(void *ctx)
{
    struct v2w *w = ctx;
    return w->r != NULL ? hreq_pending(w->r) : 0;
}

/* not a gRPC call in etcd's v2 API: not counted in grpc_server_* */
static const struct grpc_local_ops w_ops = {
    .send = w_send, .finish = w_finish, .pending = w_pending, .unmetered = true};

void v2_wait(struct v2q *q)
{
    struct hreq *r = q->r;
    struct v2w *w = calloc(1, sizeof(*w));
    if (w != NULL) {
        w->path = malloc(q->path_len + 1);
        if (q->token != NULL)
            w->token = strdup(q->token);
    }
    if (w == NULL || w->path == NULL || (q->token != NULL && w->token == NULL)) {
        if (w != NULL) {
            free(w->path);
            free(w->token);
            free(w);
        }
        v2q_grpc_error(q, "out of memory");
        v2q_free(q); /* answered: nothing in flight */
        return;
    }
    memcpy(w->path, q->path, q->path_len + 1);
    w->path_len = q->path_len;
    w->srv = q->srv;
    w->pfx = q->pfx;
    w->recursive = q->recursive;
    w->stream = q->stream;
    w->wait_index = q->wait_index;
    w->tail = &w->head;
    w->r = r;
    q->r = NULL;
    v2q_free(q);
    r->ctx = w;
    r->on_abort = w_abort;

    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    struct buf end = {0};
    size_t pl = strlen(w->pfx);
    cr.key = (ProtobufCBinaryData){pl, (uint8_t *)w->pfx};
    if (v2_prefix_end(&end, (const uint8_t *)w->pfx, pl) != 0) {
        w_error(w, "out of memory", 13);
        w_maybe_free(w);
        return;
    }
    cr.range_end = (ProtobufCBinaryData){end.len, end.data};
    cr.start_revision = w->wait_index > INT64_MAX ? INT64_MAX : (int64_t)w->wait_index;
    cr.prev_kv = true;
    Etcdserverpb__WatchRequest wreq = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wreq.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wreq.create_request = &cr;
    size_t n = protobuf_c_message_get_packed_size(&wreq.base);
    uint8_t *msg = malloc(n ? n : 1);
    w->busy++;
    int rv = msg == NULL
                 ? -ENOMEM
                 : grpc_call_open_local(w->srv, "/etcdserverpb.Watch/Watch", &w_ops, w, w->token,
                                        w->token ? strlen(w->token) : 0, &w->call);
    if (rv != 0) {
        w->call = NULL;
        w_error(w, "server closing", 14);
    } else {
        protobuf_c_message_pack(&wreq.base, msg);
        grpc_call_local_message(w->call, msg, n);
    }
    free(msg);
    buf_free(&end);
    w->busy--;
    w_maybe_free(w);
}
