/* server/watch_service.c: /etcdserverpb.Watch/Watch, the bidirectional
 * watch stream, in etcd's words (server/etcdserver/api/v3rpc/watch.go):
 * create answers "created" with the header revision at creation, then
 * events; watch_id 0 asks the server to pick one; cancel answers "canceled"
 * only for a known id; a progress request is answered with watch_id -1; a
 * compacted start revision is answered created, then canceled with
 * compact_revision; prev_kv is the key at mod_revision - 1 (none for a
 * creation); a watcher that asked for fragments gets responses over
 * --max-request-bytes split at event boundaries. The stream stays open
 * when the client half-closes it, as etcd's does. */
#include "server/server_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

/* A stream with more than its share of queued bytes is full: its watchers
 * fall back to history and catch up when it drains (etcd's victim
 * watchers). The shares split one budget (--max-watch-buffer-bytes, 64 MiB
 * by default) among all open streams, so a thousand streams cannot queue
 * gigabytes, and a client that never reads holds at most its share. */
#define STREAMS_PENDING_BUDGET (64u << 20)
#define STREAM_PENDING_MAX (4u << 20)
#define STREAM_PENDING_MIN (32u << 10)

struct wctx {
    struct wstream *st;
    watcher *w;
    int64_t id;
    bool prev_kv, fragment, progress;
    struct wctx *next;
};

struct wstream {
    struct server *s;
    qcall *call;
    struct wctx *watchers;
    int64_t next_id;
    struct wstream *prev, *next; /* in s->wstreams */
};

static void send_msg(struct wstream *st, const ProtobufCMessage *m)
{
    server_send(st->s, st->call, m);
}

/* header with an explicit revision (etcd leaves 0 in compaction notices) */
static void header_at(struct server *s, Etcdserverpb__ResponseHeader *h, int64_t rev)
{
    etcdserverpb__response_header__init(h);
    h->cluster_id = s->cluster_id;
    h->member_id = s->member_id;
    h->raft_term = server_term(s);
    h->revision = rev;
}

static void send_ctrl(struct wstream *st, int64_t id, bool created, bool canceled,
                      const char *reason, int64_t rev)
{
    Etcdserverpb__ResponseHeader h;
    header_at(st->s, &h, rev);
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    r.header = &h;
    r.watch_id = id;
    r.created = created;
    r.canceled = canceled;
    if (reason != NULL)
        r.cancel_reason = (char *)reason;
    send_msg(st, &r.base);
}

/* etcd's sendFragments: fill each response with events until adding one
 * more would reach the limit (at least one event each); all but the last
 * carry fragment = true. */
static void send_events(struct wstream *st, Etcdserverpb__WatchResponse *r, Mvccpb__Event **evs,
                        size_t n, bool fragment)
{
    size_t limit = st->s->cfg.max_request_bytes;
    r->events = evs;
    r->n_events = n;
    if (!fragment || n < 2 || protobuf_c_message_get_packed_size(&r->base) < limit) {
        send_msg(st, &r->base);
        return;
    }
    size_t idx = 0;
    while (idx < n) {
        r->events = evs + idx;
        r->n_events = 0;
        r->fragment = 1;
        while (idx + r->n_events < n) {
            r->n_events++;
            if (r->n_events > 1 && protobuf_c_message_get_packed_size(&r->base) >= limit) {
                r->n_events--;
                break;
            }
        }
        idx += r->n_events;
        if (idx == n)
            r->fragment = 0;
        send_msg(st, &r->base);
    }
}

static size_t stream_share(const struct server *s)
{
    size_t budget = s->cfg.max_watch_buffer_bytes ? (size_t)s->cfg.max_watch_buffer_bytes
                                                  : STREAMS_PENDING_BUDGET;
    size_t share = budget / (s->n_wstreams ? s->n_wstreams : 1);
    if (share > STREAM_PENDING_MAX)
        share = STREAM_PENDING_MAX;
    if (share < STREAM_PENDING_MIN)
        share = STREAM_PENDING_MIN;
    return share;
}

static bool stream_full(const struct wstream *st)
{
    return qcall_pending_bytes(st->call) >= stream_share(st->s);
}

static size_t on_room(watcher *w, void *arg)
{
    struct wctx *c = arg;
    (void)w;
    size_t share = stream_share(c->st->s), pending = qcall_pending_bytes(c->st->call);
    return pending >= share ? 0 : share - pending;
}

/* fill_event makes |ev| (with its kv and prev kv in |kvs[0..1]|) borrow
 * |e|'s data; a creation carries no prev_kv, as etcd's watch server. */
static Mvccpb__Event *fill_event(Mvccpb__Event *ev, Mvccpb__KeyValue *kvs,
                                 const struct watch_event *e, bool prev_kv)
{
    mvccpb__event__init(ev);
    ev->type = e->type == MVCC_EVENT_DELETE ? MVCCPB__EVENT__EVENT_TYPE__DELETE
                                            : MVCCPB__EVENT__EVENT_TYPE__PUT;
    server_kv_to_pb(&kvs[0], &e->kv);
    ev->kv = &kvs[0];
    bool create = e->type == MVCC_EVENT_PUT && e->kv.create_revision == e->kv.mod_revision;
    if (prev_kv && e->has_prev && !create) {
        server_kv_to_pb(&kvs[1], &e->prev);
        ev->prev_kv = &kvs[1];
    }
    return ev;
}

/* The general path: protobuf-c builds each response (fragments too). */
static int deliver_general(struct wctx *c, const struct watch_event *evs, size_t n, int64_t rev)
{
    struct wstream *st = c->st;
    Mvccpb__Event *ev = calloc(n, sizeof(*ev));
    Mvccpb__Event **ptrs = calloc(n, sizeof(*ptrs));
    Mvccpb__KeyValue *kvs = calloc(2 * n, sizeof(*kvs));
    if (ev == NULL || ptrs == NULL || kvs == NULL) {
        free(ev);
        free(ptrs);
        free(kvs);
        return -EAGAIN;
    }
    for (size_t i = 0; i < n; i++)
        ptrs[i] = fill_event(&ev[i], &kvs[2 * i], &evs[i], c->prev_kv);
    Etcdserverpb__ResponseHeader h;
    header_at(st->s, &h, rev);
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    r.header = &h;
    r.watch_id = c->id;
    send_events(st, &r, ptrs, n, c->fragment);
    free(ev);
    free(ptrs);
    free(kvs);
    return 0;
}

/* Fan-out: every watcher of a revision is sent the same events, so the
 * encoded events are kept and reused while the next delivery carries the
 * very same events (same kv storage, revision and type, same prev_kv
 * choice); only the header and watch_id are encoded per watcher. The
 * bytes equal what protobuf-c writes for the whole WatchResponse. */
struct ev_id {
    const uint8_t *key, *value, *prev_value;
    int64_t mod;
    int type;
};

struct ev_cache {
    struct buf bytes; /* field 11 (events), encoded, for every event */
    struct ev_id *ids;
    size_t n, cap;
    bool prev_kv;
};

/* a few slots: catch-up hands each watcher the same few ~32 KiB pieces in
 * turn, so consecutive deliveries alternate between them */
#define EV_CACHE_SLOTS 8
static struct ev_cache caches[EV_CACHE_SLOTS];
static unsigned cache_next;

static struct ev_id ev_id_of(const struct watch_event *e, bool prev_kv)
{
    return (struct ev_id){e->kv.key, e->kv.value, prev_kv && e->has_prev ? e->prev.value : NULL,
                          e->kv.mod_revision, (int)e->type};
}

static bool cache_hit(const struct ev_cache *cache, const struct watch_event *evs, size_t n,
                      bool prev_kv)
{
    if (cache->n != n || cache->prev_kv != prev_kv)
        return false;
    for (size_t i = 0; i < n; i++) {
        struct ev_id id = ev_id_of(&evs[i], prev_kv);
        const struct ev_id *c = &cache->ids[i];
        if (id.key != c->key || id.value != c->value || id.prev_value != c->prev_value ||
            id.mod != c->mod || id.type != c->type)
            return false;
    }
    return true;
}

static int cache_fill(struct ev_cache *cache, const struct watch_event *evs, size_t n, bool prev_kv)
{
    if (cache->cap < n) {
        struct ev_id *ids = realloc(cache->ids, n * sizeof(*ids));
        if (ids == NULL)
            return -ENOMEM;
        cache->ids = ids;
        cache->cap = n;
    }
    cache->n = 0;
    buf_reset(&cache->bytes);
    for (size_t i = 0; i < n; i++) {
        Mvccpb__Event ev;
        Mvccpb__KeyValue kvs[2];
        fill_event(&ev, kvs, &evs[i], prev_kv);
        size_t len = protobuf_c_message_get_packed_size(&ev.base);
        int rv = buf_reserve(&cache->bytes, 1 + 10 + len);
        if (rv != 0)
            return rv;
        buf_append_byte(&cache->bytes, 11 << 3 | 2);
        buf_append_varint(&cache->bytes, len);
        cache->bytes.len += protobuf_c_message_pack(&ev.base, cache->bytes.data + cache->bytes.len);
        cache->ids[i] = ev_id_of(&evs[i], prev_kv);
    }
    cache->n = n;
    cache->prev_kv = prev_kv;
    return 0;
}

static size_t put_field_varint(uint8_t *p, unsigned field, uint64_t v)
{
    if (v == 0)
        return 0; /* proto3 leaves zero scalars out */
    p[0] = (uint8_t)(field << 3);
    return 1 + varint_put(p + 1, v);
}

static int on_deliver(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg)
{
    struct wctx *c = arg;
    struct wstream *st = c->st;
    struct server *s = st->s;
    (void)w;
    if (stream_full(st))
        return -EAGAIN;
    if (c->fragment) {
        int rv = deliver_general(c, evs, n, rev);
        if (rv == 0)
            metrics_add(server_metrics.events, n);
        return rv;
    }
    struct ev_cache *cache = NULL;
    for (unsigned i = 0; i < EV_CACHE_SLOTS && cache == NULL; i++)
        if (cache_hit(&caches[i], evs, n, c->prev_kv))
            cache = &caches[i];
    if (cache == NULL) {
        cache = &caches[cache_next++ % EV_CACHE_SLOTS];
        if (cache_fill(cache, evs, n, c->prev_kv) != 0) {
            cache->n = 0;
            return -EAGAIN;
        }
    }
    uint8_t head[64];
    size_t hl = 0;
    hl += put_field_varint(head + hl, 1, s->cluster_id);
    hl += put_field_varint(head + hl, 2, s->member_id);
    hl += put_field_varint(head + hl, 3, (uint64_t)rev);
    hl += put_field_varint(head + hl, 4, server_term(s));
    uint8_t pre[96];
    size_t pl = 0;
    pre[pl++] = 1 << 3 | 2; /* header */
    pl += varint_put(pre + pl, hl);
    memcpy(pre + pl, head, hl);
    pl += hl;
    pl += put_field_varint(pre + pl, 2, (uint64_t)c->id);
    struct buf *b = &s->scratch;
    buf_reset(b);
    if (buf_append(b, pre, pl) != 0 || buf_append(b, cache->bytes.data, cache->bytes.len) != 0)
        return -EAGAIN;
    qcall_send(st->call, b->data, b->len);
    metrics_add(server_metrics.events, n);
    return 0;
}

static void remove_ctx(struct wstream *st, struct wctx *c)
{
    for (struct wctx **p = &st->watchers; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    free(c);
}

static void on_compacted(watcher *w, int64_t compact_rev, void *arg)
{
    struct wctx *c = arg;
    struct wstream *st = c->st;
    (void)w;
    Etcdserverpb__ResponseHeader h;
    header_at(st->s, &h, 0);
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    r.header = &h;
    r.watch_id = c->id;
    r.canceled = 1;
    r.compact_revision = compact_rev;
    send_msg(st, &r.base);
    /* the hub frees the watcher; its id stays on the stream until the
     * client cancels it, which etcd answers "canceled" as for any other */
    c->w = NULL;
}

static const struct watcher_ops watch_ops = {on_deliver, on_compacted, on_room};

static struct wctx *find(struct wstream *st, int64_t id)
{
    for (struct wctx *c = st->watchers; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void create_watch(struct wstream *st, const Etcdserverpb__WatchCreateRequest *cr)
{
    struct server *s = st->s;
    static const uint8_t zero = 0;
    const uint8_t *key = cr->key.data, *end = cr->range_end.data;
    size_t key_len = cr->key.len, end_len = cr->range_end.len;
    if (key_len == 0) { /* "\0" is the smallest key */
        key = &zero;
        key_len = 1;
    }
    int64_t wsrev = mvcc_rev(s->kv);
    if (s->auth != NULL && (auth_enabled(s->auth) || st->call->token != NULL)) {
        /* etcd checks read permission on the range when a watch is created
         * (not on its events later): refused as created and canceled, with
         * id -1 and the error as grpc-go prints it */
        Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
        rr.key = cr->key;
        rr.range_end = cr->range_end;
        int rv = server_auth_check_call_read(s, st->call, true, &rr.base);
        if (rv != 0) {
            static const char *const names[] = {
                "OK",       "Canceled",      "Unknown",          "InvalidArgument",
                "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
                "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
                "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"};
            int code = q_err_grpc_status(rv);
            char reason[256];
            snprintf(reason, sizeof(reason), "rpc error: code = %s desc = %s",
                     code >= 0 && code <= 16 ? names[code] : "Unknown", q_strerror(rv));
            send_ctrl(st, -1, true, true, reason, wsrev);
            return;
        }
    }
    int64_t start = cr->start_revision ? cr->start_revision : wsrev + 1;
    const char *err = NULL;
    int64_t id = cr->watch_id;
    bool open_end = end_len == 1 && end[0] == 0;
    if (end_len != 0 && !open_end) {
        size_t m = key_len < end_len ? key_len : end_len;
        int c = memcmp(key, end, m);
        if (c > 0 || (c == 0 && key_len >= end_len))
            err = "mvcc: watcher range is empty";
    }
    if (err == NULL && id == 0) {
        while (find(st, st->next_id) != NULL)
            st->next_id++;
        id = st->next_id++;
    } else if (err == NULL && find(st, id) != NULL) {
        err = "mvcc: duplicate watch ID provided on the WatchStream";
    }
    struct wctx *c = NULL;
    if (err == NULL && (c = calloc(1, sizeof(*c))) == NULL)
        err = "etcdserver: out of memory";
    if (err != NULL) {
        send_ctrl(st, -1, true, true, err, wsrev);
        return;
    }
    c->st = st;
    c->id = id;
    c->prev_kv = cr->prev_kv;
    c->fragment = cr->fragment;
    c->progress = cr->progress_notify;
    unsigned filters = 0;
    for (size_t i = 0; i < cr->n_filters; i++) {
        if (cr->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT)
            filters |= WATCH_FILTER_NOPUT;
        else if (cr->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE)
            filters |= WATCH_FILTER_NODELETE;
    }
    /* "created" goes out before any event of the watcher */
    send_ctrl(st, id, true, false, NULL, wsrev);
    if (watcher_new(s->watches, key, key_len, end, end_len, start, filters, &watch_ops, c, &c->w) !=
        0) {
        send_ctrl(st, id, false, true, "etcdserver: out of memory", wsrev);
        free(c);
        return;
    }
    c->next = st->watchers;
    st->watchers = c;
    server_watch_kick(s);
}

static void on_watch_message(qcall *call, const uint8_t *msg, size_t len)
{
    struct wstream *st = qcall_get_data(call);
    struct server *s = server_of(call);
    if (st == NULL) {
        st = calloc(1, sizeof(*st));
        if (st == NULL) {
            server_reply_error(call, -ENOMEM);
            return;
        }
        st->s = s;
        st->call = call;
        st->next = s->wstreams;
        if (s->wstreams)
            s->wstreams->prev = st;
        s->wstreams = st;
        s->n_wstreams++;
        qcall_set_data(call, st);
    }
    Etcdserverpb__WatchRequest *r = (Etcdserverpb__WatchRequest *)protobuf_c_message_unpack(
        &etcdserverpb__watch_request__descriptor, NULL, len, msg);
    if (r == NULL) {
        qcall_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "grpc: error unmarshalling request: invalid message");
        return;
    }
    switch (r->request_union_case) {
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST:
        create_watch(st, r->create_request);
        break;
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST: {
        struct wctx *c = find(st, r->cancel_request->watch_id);
        if (c != NULL) {
            watcher_cancel(c->w);
            int64_t id = c->id;
            remove_ctx(st, c);
            send_ctrl(st, id, false, true, NULL, mvcc_rev(s->kv));
        }
        break;
    }
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST:
        send_ctrl(st, -1, false, false, NULL, mvcc_rev(s->kv));
        break;
    default:
        break;
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void on_watch_close(qcall *call)
{
    struct wstream *st = qcall_get_data(call);
    if (st == NULL)
        return;
    struct server *s = st->s;
    while (st->watchers != NULL) {
        struct wctx *c = st->watchers;
        st->watchers = c->next;
        watcher_cancel(c->w);
        free(c);
    }
    if (st->prev)
        st->prev->next = st->next;
    else
        s->wstreams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    s->n_wstreams--;
    free(st);
}

void server_watch_progress(struct server *s)
{
    int64_t rev = mvcc_rev(s->kv);
    for (struct wstream *st = s->wstreams; st != NULL; st = st->next)
        for (struct wctx *c = st->watchers; c != NULL; c = c->next)
            if (c->progress && c->w != NULL && watcher_is_synced(c->w))
                send_ctrl(st, c->id, false, false, NULL, rev);
}

const struct qcall_method server_watch_methods[] = {
    {"/etcdserverpb.Watch/Watch", QCALL_BIDI_STREAMING, on_watch_message, NULL, on_watch_close},
};
const size_t server_watch_methods_n =
    sizeof(server_watch_methods) / sizeof(server_watch_methods[0]);
