/* server/server.c: start and stop a member; the apply hook that turns the
 * writes of one loop pass into one durable LMDB batch (see server.h). */
#include "server/server_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "base/sha1.h"

struct server *server_of(grpc_call *call)
{
    return grpc_call_server_data(call);
}

/* ---- ids, as etcd derives them ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

uint64_t server_member_id(const char *const *peer_urls, size_t n, const char *token)
{
    const char *sorted[CONFIG_MAX_URLS];
    if (n > CONFIG_MAX_URLS)
        n = CONFIG_MAX_URLS;
    memcpy(sorted, peer_urls, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), cmp_str);
    struct buf b = {0};
    for (size_t i = 0; i < n; i++)
        buf_append(&b, sorted[i], strlen(sorted[i]));
    buf_append(&b, token, strlen(token));
    uint8_t d[20];
    sha1(b.data ? b.data : (const uint8_t *)"", b.len, d);
    buf_free(&b);
    return be64(d);
}

uint64_t server_cluster_id(const uint64_t *member_ids, size_t n)
{
    uint64_t ids[CONFIG_MAX_MEMBERS];
    if (n > CONFIG_MAX_MEMBERS)
        n = CONFIG_MAX_MEMBERS;
    memcpy(ids, member_ids, n * sizeof(*ids));
    qsort(ids, n, sizeof(*ids), cmp_u64);
    uint8_t b[8 * CONFIG_MAX_MEMBERS];
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            b[8 * i + k] = (uint8_t)(ids[i] >> (56 - 8 * k));
    uint8_t d[20];
    sha1(b, 8 * n, d);
    return be64(d);
}

/* ---- replies ---- */

void server_fill_header(struct server *s, Etcdserverpb__ResponseHeader *h)
{
    h->cluster_id = s->cluster_id;
    h->member_id = s->member_id;
    h->raft_term = s->term;
    if (h->revision == 0)
        h->revision = mvcc_rev(s->kv);
}

static int pack(struct buf *b, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    buf_reset(b);
    int rv = buf_reserve(b, n ? n : 1);
    if (rv != 0)
        return rv;
    b->len = protobuf_c_message_pack(msg, b->data);
    return 0;
}

void server_reply(struct server *s, grpc_call *call, const ProtobufCMessage *msg)
{
    if (pack(&s->scratch, msg) != 0) {
        server_reply_error(call, -ENOMEM);
        return;
    }
    int rv = grpc_call_send(call, s->scratch.data, s->scratch.len);
    if (rv != 0 && rv != -EPIPE) {
        server_reply_error(call, rv);
        return;
    }
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

void server_reply_error(grpc_call *call, int code)
{
    grpc_call_finish(call, q_err_grpc_status(code), q_strerror(code));
}

ProtobufCMessage *server_unpack(grpc_call *call, const ProtobufCMessageDescriptor *d,
                                const uint8_t *msg, size_t len)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
    if (m == NULL)
        grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "grpc: error unmarshalling request: invalid message");
    return m;
}

/* ---- the single-member log and the apply hook ---- */

static void entry_call_closed(grpc_call *call)
{
    struct entry *e = grpc_call_get_data(call);
    if (e != NULL)
        e->call = NULL;
}

void server_propose(struct server *s, grpc_call *call, enum entry_kind kind, ProtobufCMessage *req)
{
    struct entry *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        protobuf_c_message_free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    e->call = call;
    e->kind = kind;
    e->req = req;
    grpc_call_set_data(call, e);
    if (s->tail)
        s->tail->next = e;
    else
        s->head = e;
    s->tail = e;
}

/* apply_entry applies one entry inside the open batch and packs its reply.
 * A request error (a semantic one etcd also answers) is kept for the reply;
 * anything else means the store can no longer be trusted. */
static int apply_entry(struct server *s, struct entry *e)
{
    ProtobufCMessage *resp = NULL;
    Etcdserverpb__ResponseHeader *h = NULL;
    int rv;
    arena_reset(&s->arena);
    switch (e->kind) {
    case ENTRY_PUT: {
        Etcdserverpb__PutResponse *r = NULL;
        rv = apply_put(&s->env, (Etcdserverpb__PutRequest *)e->req, &s->arena, &r);
        if (rv == 0) {
            resp = &r->base;
            h = r->header;
        }
        break;
    }
    case ENTRY_DELETE_RANGE: {
        Etcdserverpb__DeleteRangeResponse *r = NULL;
        rv = apply_delete_range(&s->env, (Etcdserverpb__DeleteRangeRequest *)e->req, &s->arena,
                                &r);
        if (rv == 0) {
            resp = &r->base;
            h = r->header;
        }
        break;
    }
    case ENTRY_TXN: {
        Etcdserverpb__TxnResponse *r = NULL;
        rv = apply_txn(&s->env, (Etcdserverpb__TxnRequest *)e->req, &s->arena, &r);
        if (rv == 0) {
            resp = &r->base;
            h = r->header;
        }
        break;
    }
    case ENTRY_COMPACT: {
        Etcdserverpb__CompactionResponse *r = NULL;
        rv = apply_compact(&s->env, (Etcdserverpb__CompactionRequest *)e->req, &s->arena, &r);
        if (rv == 0) {
            resp = &r->base;
            h = r->header;
        }
        break;
    }
    default:
        rv = -EINVAL;
    }
    s->applied_index++;
    if (rv != 0) {
        bool request_error = q_is_qerr(rv) && rv != QERR_STORAGE && rv != QERR_CORRUPT &&
                             rv != QERR_NO_SPACE;
        if (!request_error)
            return rv;
        e->err = rv;
        return 0;
    }
    server_fill_header(s, h);
    return pack(&e->out, resp);
}

static void free_entry(struct entry *e)
{
    protobuf_c_message_free_unpacked(e->req, NULL);
    buf_free(&e->out);
    free(e);
}

static void on_apply_hook(uv_check_t *h)
{
    struct server *s = h->data;
    struct entry *list = s->head;
    if (list == NULL)
        return;
    s->head = s->tail = NULL;

    int rv = mvcc_batch_begin(s->kv);
    for (struct entry *e = list; e != NULL && rv == 0; e = e->next)
        rv = apply_entry(s, e);
    if (rv == 0)
        rv = backend_meta_put(s->be, "consistent_index", s->applied_index);
    if (rv == 0)
        rv = mvcc_batch_commit(s->kv);
    if (rv != 0) {
        /* The index in memory is ahead of the disk and nothing of this
         * batch was acknowledged: stop, and let the restart rebuild from
         * what LMDB holds (as etcd panics on a backend failure). */
        log_error("server", "applying a batch failed: %s; stopping", q_strerror(rv));
        abort();
    }
    for (struct entry *e = list, *next; e != NULL; e = next) {
        next = e->next;
        if (e->call != NULL) {
            grpc_call_set_data(e->call, NULL);
            if (e->err != 0) {
                server_reply_error(e->call, e->err);
            } else {
                grpc_call_send(e->call, e->out.data, e->out.len);
                grpc_call_finish(e->call, GRPC_STATUS_OK, NULL);
            }
        }
        free_entry(e);
    }
}

/* ---- start and stop ---- */

static int mkdir_p(const char *path)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct server *s = h->data;
    log_info("server", "received %s, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(s, NULL, NULL);
}

/* Every call of every service: entries of a closed call must be forgotten. */
static struct grpc_method *build_methods(size_t *n)
{
    const struct grpc_method *tables[] = {server_kv_methods, server_maintenance_methods,
                                          server_cluster_methods};
    size_t counts[] = {server_kv_methods_n, server_maintenance_methods_n,
                       server_cluster_methods_n};
    size_t total = 0;
    for (size_t i = 0; i < 3; i++)
        total += counts[i];
    struct grpc_method *m = calloc(total, sizeof(*m));
    if (m == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < counts[i]; j++) {
            m[k] = tables[i][j];
            if (m[k].on_close == NULL)
                m[k].on_close = entry_call_closed;
            k++;
        }
    *n = total;
    return m;
}

static struct grpc_method *methods;

int server_start(uv_loop_t *loop, const struct config *cfg, struct server **out)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->cfg = *cfg;
    if (cfg->n_initial_cluster != 1) {
        log_error("server", "--initial-cluster names %zu members: multi-member clusters need the "
                            "replicated server, which is not built yet",
                  cfg->n_initial_cluster);
        free(s);
        return -EINVAL;
    }

    /* ids as etcd: from the advertised peer URLs and the token */
    const char *urls[CONFIG_MAX_URLS];
    for (size_t i = 0; i < cfg->initial_cluster[0].n_peer_urls; i++)
        urls[i] = cfg->initial_cluster[0].peer_urls[i].text;
    s->member_id = server_member_id(urls, cfg->initial_cluster[0].n_peer_urls,
                                    cfg->initial_cluster_token);
    s->cluster_id = server_cluster_id(&s->member_id, 1);

    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/member/db", cfg->data_dir);
    int rv = mkdir_p(dir);
    if (rv != 0) {
        log_error("server", "cannot create data dir %s: %s", dir, q_strerror(rv));
        free(s);
        return rv;
    }
    uint64_t map = cfg->quota_backend_bytes * 2;
    if (map < (8ull << 30))
        map = 8ull << 30;
    struct backend_options bo = {.dir = dir, .map_size = (size_t)map, .no_sync = false};
    rv = backend_open(&bo, &s->be);
    if (rv == 0)
        rv = mvcc_open(s->be, &s->kv);
    if (rv != 0) {
        log_error("server", "cannot open the store in %s: %s", dir, q_strerror(rv));
        if (s->be)
            backend_close(s->be);
        free(s);
        return rv;
    }
    s->env.kv = s->kv;
    uint64_t v = 0;
    if (backend_meta_get(s->be, NULL, "consistent_index", &v) == 0)
        s->applied_index = v;
    /* Each start is a new single-member election: the term goes up by one,
     * as a restarted one-member etcd's does. */
    s->term = 1;
    if (backend_meta_get(s->be, NULL, "term", &v) == 0)
        s->term = v;
    s->term++;
    if ((rv = mvcc_batch_begin(s->kv)) == 0 && (rv = backend_meta_put(s->be, "term", s->term)) == 0)
        rv = mvcc_batch_commit(s->kv);
    if (rv != 0) {
        log_error("server", "cannot write the term: %s", q_strerror(rv));
        mvcc_close(s->kv);
        backend_close(s->be);
        free(s);
        return rv;
    }

    size_t n_methods = 0;
    if (methods == NULL)
        methods = build_methods(&n_methods);
    else
        n_methods = server_kv_methods_n + server_maintenance_methods_n + server_cluster_methods_n;
    struct grpc_server_options go = {
        .max_recv_msg_size = cfg->max_request_bytes + 512 * 1024,
        .max_send_msg_size = 0,
        .max_concurrent_streams = 0,
    };
    rv = methods ? grpc_server_new(loop, methods, n_methods, &go, s, &s->grpc) : -ENOMEM;
    for (size_t i = 0; rv == 0 && i < cfg->n_listen_client; i++) {
        rv = grpc_server_listen(s->grpc, cfg->listen_client[i].host, cfg->listen_client[i].port,
                                NULL);
        if (rv != 0)
            log_error("server", "cannot listen on %s: %s", cfg->listen_client[i].text,
                      uv_strerror(rv));
    }
    if (rv != 0) {
        if (s->grpc)
            grpc_server_close(s->grpc, NULL, NULL);
        mvcc_close(s->kv);
        backend_close(s->be);
        free(s);
        return rv;
    }
    uv_check_init(loop, &s->apply_hook);
    s->apply_hook.data = s;
    uv_check_start(&s->apply_hook, on_apply_hook);
    int signums[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        uv_signal_init(loop, &s->sigs[i]);
        s->sigs[i].data = s;
        uv_signal_start(&s->sigs[i], on_signal, signums[i]);
    }
    log_info("server", "%s (member %016llx, cluster %016llx) at revision %lld, term %llu",
             cfg->name, (unsigned long long)s->member_id, (unsigned long long)s->cluster_id,
             (long long)mvcc_rev(s->kv), (unsigned long long)s->term);
    for (size_t i = 0; i < cfg->n_listen_client; i++)
        log_info("server", "ready to serve client requests on %s", cfg->listen_client[i].text);
    *out = s;
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    struct server *s = h->data;
    if (--s->closing > 0)
        return;
    mvcc_close(s->kv);
    backend_close(s->be);
    arena_free(&s->arena);
    buf_free(&s->scratch);
    void (*cb)(void *) = s->stop_cb;
    void *arg = s->stop_arg;
    free(s);
    if (cb)
        cb(arg);
}

static void on_grpc_closed(void *arg)
{
    struct server *s = arg;
    /* writes whose clients left are still applied: they may have been seen
     * as sent; the apply hook commits them before the store closes */
    on_apply_hook(&s->apply_hook);
    s->closing = 3;
    uv_close((uv_handle_t *)&s->apply_hook, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigs[0], on_handle_closed);
    uv_close((uv_handle_t *)&s->sigs[1], on_handle_closed);
}

void server_stop(struct server *s, void (*cb)(void *arg), void *arg)
{
    if (s->stop_cb != NULL || s->closing)
        return;
    s->stop_cb = cb;
    s->stop_arg = arg;
    s->closing = -1;
    grpc_server_close(s->grpc, on_grpc_closed, s);
}
