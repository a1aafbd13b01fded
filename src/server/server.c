/* server/server.c: start and stop a member; the apply hook that turns the
 * writes of one loop pass into one durable LMDB batch (see server.h). */
#include "server/server_int.h"
#include "server/zk_service.h"
#include "server/zk_tree.h"
#include "http/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/sha1.h"
#include "base/version.h"
#include "server/front.h"
#include "transport/transport.h"
#include "wal/wal.h"

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
    h->raft_term = server_term(s);
    if (h->revision == 0)
        h->revision = mvcc_rev(s->kv);
}

int server_pack(struct buf *b, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    buf_reset(b);
    int rv = buf_reserve(b, n ? n : 1);
    if (rv != 0)
        return rv;
    b->len = protobuf_c_message_pack(msg, b->data);
    return 0;
}

int server_send(struct server *s, qcall *call, const ProtobufCMessage *msg)
{
    int rv = server_pack(&s->scratch, msg);
    if (rv == 0)
        rv = qcall_send(call, s->scratch.data, s->scratch.len);
    return rv;
}

void server_reply(struct server *s, qcall *call, const ProtobufCMessage *msg)
{
    int rv = server_send(s, call, msg);
    if (rv != 0 && rv != -EPIPE) {
        server_reply_error(call, rv);
        return;
    }
    qcall_finish(call, GRPC_STATUS_OK, NULL);
}

void server_kv_to_pb(Mvccpb__KeyValue *o, const struct mvcc_kv *kv)
{
    mvccpb__key_value__init(o);
    o->key = (ProtobufCBinaryData){kv->key_len, (uint8_t *)kv->key};
    o->value = (ProtobufCBinaryData){kv->value_len, (uint8_t *)kv->value};
    o->create_revision = kv->create_revision;
    o->mod_revision = kv->mod_revision;
    o->version = kv->version;
    o->lease = kv->lease;
}

void server_reply_error(qcall *call, int code)
{
    qcall_finish(call, q_err_grpc_status(code), q_strerror(code));
}

ProtobufCMessage *server_unpack(qcall *call, const ProtobufCMessageDescriptor *d,
                                const uint8_t *msg, size_t len)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
    if (m == NULL)
        qcall_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "grpc: error unmarshalling request: invalid message");
    return m;
}

/* ---- applying one entry ---- */

uint64_t server_next_id(struct server *s)
{
    s->id_suffix++;
    return s->id_prefix | (s->id_suffix & ((1ull << 48) - 1));
}

/* apply_entry applies one entry inside the open batch and packs its reply.
 * A request error (a semantic one etcd also answers) is kept for the reply;
 * anything else means the store can no longer be trusted. */
#define APPLY_CASE(KIND, FN, REQ_T, RESP_T)                                                        \
    case KIND: {                                                                                   \
        RESP_T *r = NULL;                                                                          \
        rv = FN(&s->env, (const REQ_T *)e->req, &s->arena, &r);                                    \
        if (rv == 0) {                                                                             \
            resp = &r->base;                                                                       \
            h = r->header;                                                                         \
        }                                                                                          \
        break;                                                                                     \
    }

/* ---- the ZooKeeper face's keys (apply.h: apply_reserved_span) ---- */

static int first_live(const struct mvcc_kv *kv, void *arg)
{
    (void)kv;
    (void)arg;
    return 1; /* one is enough */
}

/* reserved_live: QERR_RESERVED_KEY when a key of |sp| (the reserved
 * prefix's part of a wider delete) is live: the delete would take znodes
 * apart; 0 when none is (as etcd, nothing of the face's is there) */
static int reserved_live(const struct apply_span *sp, void *arg)
{
    struct server *s = arg;
    mvcc_read *r;
    int rv = mvcc_read_begin(s->kv, &r);
    if (rv != 0)
        return rv;
    rv = mvcc_read_range(r, sp->key, sp->key_len, sp->end, sp->end_len, NULL, first_live, NULL,
                         NULL);
    mvcc_read_end(r);
    return rv == 1 ? QERR_RESERVED_KEY : rv;
}

/* reserved_check refuses, at apply (the same verdict on every member), an
 * etcd DeleteRange or Txn whose range reaches across the reserved prefix
 * while znodes or sessions live there; what lies inside the prefix was
 * refused before it was proposed (kv_service.c) */
static int reserved_check(struct server *s, const struct entry *e)
{
    if (e->kind == ENTRY_DELETE_RANGE) {
        const Etcdserverpb__DeleteRangeRequest *d =
            (const Etcdserverpb__DeleteRangeRequest *)e->req;
        struct apply_span sp;
        if (apply_reserved_span(d->key.data, d->key.len, d->range_end.data, d->range_end.len,
                                &sp) == APPLY_RESERVED_WIDE)
            return reserved_live(&sp, s);
    } else if (e->kind == ENTRY_TXN) {
        return apply_txn_wide_deletes((const Etcdserverpb__TxnRequest *)e->req, reserved_live, s);
    }
    return 0;
}

int server_apply_entry(struct server *s, struct entry *e)
{
    ProtobufCMessage *resp = NULL;
    Etcdserverpb__ResponseHeader *h = NULL;
    int rv;
    arena_reset(&s->arena);
    /* the backend quota and the NOSPACE/CORRUPT alarms (alarm.c) */
    if ((rv = server_quota_check(s, e)) != 0) {
        e->err = rv;
        return (rv == QERR_NO_SPACE || rv == QERR_CORRUPT) ? 0 : rv;
    }
    if ((rv = server_auth_check_entry(s, e)) != 0) {
        e->err = rv;
        return 0;
    }
    if ((rv = reserved_check(s, e)) != 0) {
        e->err = rv;
        return rv == QERR_RESERVED_KEY ? 0 : rv;
    }
    /* a lease that is a ZooKeeper session: its ephemerals go first, with
     * their parents' child stat, in one revision (zk_tree.c) */
    if (e->kind == ENTRY_LEASE_REVOKE &&
        (rv = server_zk_session_end(s, ((const Etcdserverpb__LeaseRevokeRequest *)e->req)->id)) !=
            0)
        return rv;
    /* a ZooKeeper session's record: the system nodes first (zk_tree.c) */
    if (e->kind == ENTRY_PUT) {
        const Etcdserverpb__PutRequest *p = (const Etcdserverpb__PutRequest *)e->req;
        if ((rv = server_zk_session_begin(s, p->key.data, p->key.len, p->lease)) != 0)
            return rv;
    }
    if (e->kind >= ENTRY_AUTH_ENABLE && e->kind <= ENTRY_AUTH_ROLE_REVOKE_PERMISSION) {
        rv = server_auth_apply(s, e, &resp, &h);
        goto done;
    }
    switch (e->kind) {
        APPLY_CASE(ENTRY_PUT, apply_put, Etcdserverpb__PutRequest, Etcdserverpb__PutResponse)
        APPLY_CASE(ENTRY_DELETE_RANGE, apply_delete_range, Etcdserverpb__DeleteRangeRequest,
                   Etcdserverpb__DeleteRangeResponse)
        APPLY_CASE(ENTRY_TXN, apply_txn, Etcdserverpb__TxnRequest, Etcdserverpb__TxnResponse)
        APPLY_CASE(ENTRY_COMPACT, apply_compact, Etcdserverpb__CompactionRequest,
                   Etcdserverpb__CompactionResponse)
        APPLY_CASE(ENTRY_LEASE_GRANT, apply_lease_grant, Etcdserverpb__LeaseGrantRequest,
                   Etcdserverpb__LeaseGrantResponse)
        APPLY_CASE(ENTRY_LEASE_REVOKE, apply_lease_revoke, Etcdserverpb__LeaseRevokeRequest,
                   Etcdserverpb__LeaseRevokeResponse)
        APPLY_CASE(ENTRY_LEASE_CHECKPOINT, apply_lease_checkpoint,
                   Etcdserverpb__LeaseCheckpointRequest, Etcdserverpb__LeaseCheckpointResponse)
    case ENTRY_ALARM: {
        Etcdserverpb__AlarmResponse *r = NULL;
        rv = server_alarm_apply(s, (const Etcdserverpb__AlarmRequest *)e->req, &s->arena, &r);
        if (rv == 0) {
            resp = &r->base;
            h = NULL; /* etcd's AlarmResponse carries no header */
        }
        break;
    }
    case ENTRY_MEMBER:
        return server_member_apply(s, (const Etcdserverpb__Member *)e->req);
    case ENTRY_ZK_WRITE:
        return server_zk_apply(s, e); /* e->out: the ZooKeeper answer */
    default:
        rv = -EINVAL;
    }
done:
    if (rv != 0) {
        bool request_error =
            q_is_qerr(rv) && rv != QERR_STORAGE && rv != QERR_CORRUPT && rv != QERR_NO_SPACE;
        if (!request_error)
            return rv;
        e->err = rv;
        return 0;
    }
    if (e->call == NULL && e->done == NULL)
        return 0; /* nobody to answer */
    if (h != NULL)
        server_fill_header(s, h);
    return server_pack(&e->out, resp);
}

/* ---- leases ---- */

/* The store's change observer keeps each lease's set of keys. */
static void on_change(enum mvcc_event_type type, const struct mvcc_kv *kv,
                      const struct mvcc_kv *prev, void *arg)
{
    struct server *s = arg;
    watch_hub_observe(type, kv, prev, s->watches);
    if (s->zk != NULL)
        server_zk_observe(s, type, kv, prev); /* ZooKeeper watches */
    if (prev != NULL && prev->lease != 0 && (type == MVCC_EVENT_DELETE || prev->lease != kv->lease))
        lessor_detach(s->leases, prev->lease, prev->key, prev->key_len);
    if (type == MVCC_EVENT_PUT && kv->lease != 0 &&
        lessor_attach(s->leases, kv->lease, kv->key, kv->key_len) != 0)
        log_warn("lease", "cannot attach a key to lease %016llx", (unsigned long long)kv->lease);
}

static void attach_existing(const uint8_t *key, size_t len, int64_t lease, void *arg)
{
    struct server *s = arg;
    if (lessor_attach(s->leases, lease, key, len) != 0)
        log_warn("lease", "key bound to a missing lease %016llx", (unsigned long long)lease);
}

/* how often the primary checkpoints the remaining TTL of a lease; a new
 * primary (or a restart) can at worst give a lease this much extra time */
#define LEASE_CHECKPOINT_INTERVAL_MS 5000
#define LEASE_REVOKES_PER_TICK 100 /* 1000/s, etcd's leaseRevokeRate */
#define LEASE_CHECKPOINTS_PER_ENTRY 1000

static void on_lease_tick(uv_timer_t *t)
{
    struct server *s = t->data;
    if (!lessor_is_primary(s->leases))
        return; /* only the leader expires and checkpoints leases */
    int64_t now = (int64_t)uv_now(s->loop);
    int64_t ids[LEASE_REVOKES_PER_TICK];
    size_t n = lessor_expired(s->leases, now, ids, LEASE_REVOKES_PER_TICK);
    metrics_add(server_metrics.lease_expired, n);
    for (size_t i = 0; i < n; i++) {
        Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
        r.id = ids[i];
        server_propose_internal(s, ENTRY_LEASE_REVOKE, &r.base);
    }
    if (now - s->last_checkpoint_ms < 1000)
        return;
    s->last_checkpoint_ms = now;
    static int64_t cids[LEASE_CHECKPOINTS_PER_ENTRY], rem[LEASE_CHECKPOINTS_PER_ENTRY];
    n = lessor_due_checkpoints(s->leases, now, LEASE_CHECKPOINT_INTERVAL_MS, cids, rem,
                               LEASE_CHECKPOINTS_PER_ENTRY);
    if (n == 0)
        return;
    Etcdserverpb__LeaseCheckpoint cps[LEASE_CHECKPOINTS_PER_ENTRY];
    Etcdserverpb__LeaseCheckpoint *ptrs[LEASE_CHECKPOINTS_PER_ENTRY];
    for (size_t i = 0; i < n; i++) {
        etcdserverpb__lease_checkpoint__init(&cps[i]);
        cps[i].id = cids[i];
        cps[i].remaining_ttl = rem[i];
        ptrs[i] = &cps[i];
    }
    Etcdserverpb__LeaseCheckpointRequest r = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
    r.checkpoints = ptrs;
    r.n_checkpoints = n;
    server_propose_internal(s, ENTRY_LEASE_CHECKPOINT, &r.base);
}

/* load_leases opens the lessor and attaches every key with a lease. */
static int load_leases(struct server *s)
{
    /* etcd's minimum TTL: 1.5 election timeouts in whole ticks, rounded up
     * to seconds */
    uint64_t hb = s->cfg.heartbeat_ms ? s->cfg.heartbeat_ms : 100;
    uint64_t min_ms = (3 * (s->cfg.election_ms / hb) / 2) * hb;
    int64_t min_ttl = (int64_t)((min_ms + 999) / 1000);
    int rv = lessor_open(s->be, min_ttl, &s->leases);
    if (rv != 0)
        return rv;
    s->env.leases = s->leases;
    if (lessor_count(s->leases) == 0)
        return 0; /* no key can be bound to a lease */
    return mvcc_live_leases(s->kv, attach_existing, s);
}

int server_leases_reload(struct server *s)
{
    bool primary = lessor_is_primary(s->leases);
    lessor_close(s->leases);
    s->leases = NULL;
    int rv = load_leases(s);
    if (rv == 0 && primary)
        lessor_promote(s->leases, (int64_t)uv_now(s->loop));
    return rv;
}

static int open_leases(struct server *s)
{
    int rv = load_leases(s);
    if (rv != 0)
        return rv;
    mvcc_set_observer(s->kv, on_change, s);
    /* the leader's lessor is promoted when it becomes leader (node.c) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    s->id_prefix = (s->member_id & 0xffff) << 48;
    s->id_suffix = (now_ms & ((1ull << 40) - 1)) << 8;
    return 0;
}

/* ---- watches ---- */

static void on_watch_sync(uv_timer_t *t)
{
    struct server *s = t->data;
    if (!watch_hub_sync(s->watches))
        uv_timer_stop(t);
}

void server_watch_kick(struct server *s)
{
    if (watch_hub_unsynced_count(s->watches) > 0 && !uv_is_active((uv_handle_t *)&s->watch_sync))
        uv_timer_start(&s->watch_sync, on_watch_sync, 0, 2);
}

static void on_watch_progress(uv_timer_t *t)
{
    server_watch_progress(t->data);
}

/* ---- start and stop ---- */

static void on_signal(uv_signal_t *h, int signum)
{
    struct server *s = h->data;
    log_info("server", "received %s, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(s, NULL, NULL);
}

static void on_pass(uv_check_t *h);

/* publish_state stores what front loops put in the headers of the reads
 * they answer themselves. */
static void publish_state(struct server *s)
{
    __atomic_store_n(&s->pub_term, server_term(s), __ATOMIC_RELAXED);
    __atomic_store_n(&s->pub_cluster_id, s->cluster_id, __ATOMIC_RELAXED);
}

/* ---- serving clients ---- */

static void on_client_poll(uv_poll_t *h, int status, int events)
{
    struct server *s = h->data;
    (void)events;
    if (status < 0 || s->closing || s->grpc == NULL)
        return;
    int fd;
    uv_fileno((uv_handle_t *)h, &fd);
    const struct url *u = &s->cfg.listen_client[h - s->client_polls];
    unsigned flags = (u->tls ? GRPC_ADOPT_TLS : 0) | (u->unix_sock ? GRPC_ADOPT_UNIX : 0);
    for (int k = 0; k < 64; k++) { /* a burst, not forever */
        int c = server_accept_client(fd);
        if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR)
                log_warn("server", "accept: %s", strerror(errno));
            return;
        }
        grpc_server_adopt_flags(s->grpc, c, flags);
    }
}

/* serve starts accepting clients, once: the member has joined (a leader
 * is known, its attributes are in the log). Until then the listeners are
 * bound and connections wait in their backlog, as etcd's do until its
 * ReadyNotify: a member that cannot serve does not answer. */
static void serve(struct server *s)
{
    s->serving = true;
    if (s->fronts != NULL) {
        fronts_accept(s->fronts);
    } else {
        for (size_t i = 0; i < s->n_client_polls; i++)
            uv_poll_start(&s->client_polls[i], UV_READABLE, on_client_poll);
    }
    for (size_t i = 0; i < s->cfg.n_listen_client; i++)
        log_info("server", "ready to serve client requests on %s", s->cfg.listen_client[i].text);
    server_zk_serve(s);
}

/* mark_has_log: this store has its log now (SERVER_META_HAS_LOG); once,
 * before anything else is written */
static int mark_has_log(backend *be)
{
    uint64_t v = 0;
    if (backend_meta_get(be, NULL, SERVER_META_HAS_LOG, &v) == 0 && v == 1)
        return 0;
    int rv = backend_batch_begin(be);
    if (rv != 0)
        return rv;
    if ((rv = backend_meta_put(be, SERVER_META_HAS_LOG, 1)) != 0) {
        backend_batch_abort(be);
        return rv;
    }
    return backend_batch_commit(be);
}

int server_start(uv_loop_t *loop, const struct config *cfg, struct server **out)
{
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->cfg = *cfg;
    s->peer_fd = -1;
    for (size_t i = 0; i < CONFIG_MAX_URLS; i++)
        s->client_fds[i] = -1;
    metrics_thread_attach(); /* the core's shard (base/metrics.h) */
    server_metrics_register(s);

    /* nothing is created before the flags, the data dir, the ports and
     * the cluster have been checked (bootstrap.c) */
    static char why[4096];
    const char *what = NULL;
    int rv;
    cfg = &s->cfg; /* the data dir may be an earlier release's default */
    if ((rv = server_pick_data_dir(&s->cfg, why, sizeof(why))) != 0 ||
        (rv = server_check_data_dir(cfg->data_dir, cfg->wal_dir, why, sizeof(why))) != 0 ||
        (rv = server_listen(s, why, sizeof(why))) != 0) {
        log_error("server", "%s", why);
        goto fail;
    }
    what = "set up TLS";
    if ((rv = server_tls_open(cfg, &s->tls)) != 0)
        goto fail;
    char waldir[1100];
    server_wal_dir(cfg, waldir, sizeof(waldir));
    if (!wal_exist_dir(waldir) && (rv = server_bootstrap(s, why, sizeof(why))) != 0) {
        log_error("server", "%s", why);
        what = NULL;
        goto fail;
    }
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/member/db", cfg->data_dir);
    what = "open the store";
    if ((rv = fs_mkdir_p(dir)) != 0)
        goto fail;
    uint64_t map = cfg->quota_backend_bytes * 2;
    if (map < (8ull << 30))
        map = 8ull << 30;
    /* the WAL is the durability point: one sync per LMDB commit is enough */
    struct backend_options bo = {
        .dir = dir, .map_size = (size_t)map, .no_sync = cfg->unsafe_no_fsync, .no_meta_sync = true};
    if ((rv = backend_open(&bo, &s->be)) != 0 || (rv = mark_has_log(s->be)) != 0 ||
        (rv = mvcc_open(s->be, &s->kv)) != 0)
        goto fail;
    s->env.kv = s->kv;
    s->env.max_range_bytes = (size_t)cfg->max_range_response_bytes;
    /* a read past this (index entries visited, plus KiB fetched) goes to
     * a reader thread (rangeread.c): a few milliseconds of a loop at most */
    s->env.read_budget = SERVER_READ_BUDGET;
    what = "open the watch hub";
    if ((rv = watch_hub_new(s->kv, &s->watches)) != 0)
        goto fail;
    what = "open the leases";
    if ((rv = open_leases(s)) != 0)
        goto fail;

    what = "open the auth store";
    char aerr[512] = "";
    struct auth_options ao = {.token_opts = cfg->auth_token,
                              .token_ttl_ms = cfg->auth_token_ttl_s * 1000,
                              .bcrypt_cost = (unsigned)cfg->bcrypt_cost};
    if ((rv = auth_open(s->be, &ao, &s->auth, aerr, sizeof(aerr))) != 0) {
        if (aerr[0] != '\0')
            log_error("server", "%s", aerr);
        goto fail;
    }

    what = "read the alarms";
    if ((rv = server_alarms_load(s)) != 0)
        goto fail;
    uint64_t v = 0;
    if (backend_meta_get(s->be, NULL, "consistent_index", &v) == 0)
        s->applied_index = v;
    what = "start the Raft member";
    if ((rv = server_node_start(s)) != 0)
        goto fail;
    s->id_prefix = (s->member_id & 0xffff) << 48; /* the lease id generator */

    what = "start the gRPC server";
    struct http_config hc = {
        .server_version = QUORUM_ETCD_VERSION, /* as Maintenance/Status reports it */
        .cluster_version = QUORUM_ETCD_CLUSTER_VERSION,
        .gateway = cfg->enable_grpc_gateway,
        .v2 = cfg->enable_v2,
        /* JSON (base64 bytes) is larger than the protobuf it carries */
        .max_body = 2 * (cfg->max_request_bytes + 512 * 1024),
    };
    snprintf(hc.v2v3_prefix, sizeof(hc.v2v3_prefix), "%s", cfg->v2v3_prefix);
    struct grpc_server_options go = {
        .max_recv_msg_size = cfg->max_request_bytes + 512 * 1024,
        .tls = s->tls.client,
        .http1 = http_face(&hc),
        .handling_seconds = cfg->metrics_extensive,
        .max_conns =
            cfg->max_client_conns > UINT32_MAX ? UINT32_MAX : (unsigned)cfg->max_client_conns,
        .conn_count = &s->client_conns, /* one count for every front loop */
        .preface_ms = cfg->client_handshake_ms,
        .idle_ms = cfg->client_idle_ms,
        /* etcd 3.4's gRPC options: the stream limit is always advertised,
         * math.MaxUint32 by default (grpc-go takes 0 for that too);
         * keepalive as etcd hands it to grpc-go, whose defaults apply to a
         * 0 (the interval and timeout only when both are set) */
        .max_concurrent_streams =
            cfg->max_concurrent_streams == 0 || cfg->max_concurrent_streams >= UINT32_MAX
                ? UINT32_MAX
                : (uint32_t)cfg->max_concurrent_streams,
        .keepalive_min_time_ms = cfg->grpc_keepalive_min_time_ms,
        .keepalive_time_ms = cfg->grpc_keepalive_interval_ms && cfg->grpc_keepalive_timeout_ms
                                 ? cfg->grpc_keepalive_interval_ms
                                 : 0,
        .keepalive_timeout_ms = cfg->grpc_keepalive_interval_ms && cfg->grpc_keepalive_timeout_ms
                                    ? cfg->grpc_keepalive_timeout_ms
                                    : 0,
    };
    unsigned nf = cfg->front_loops == CONFIG_FRONT_AUTO ? fronts_count_auto() : cfg->front_loops;
    /* the reader threads read the store (rangeread.c), as the front loops */
    what = "share the store with the reader threads";
    if ((rv = mvcc_share(s->kv)) != 0)
        goto fail;
    what = "start the reader threads";
    if ((rv = server_rangereads_start(s)) != 0)
        goto fail;
    if (nf > 0) {
        publish_state(s);
        what = "start the front loops";
        rv = fronts_start(s, nf, cfg->pin_threads, &go, s->client_fds, s->n_client_fds,
                          &s->fronts);
        if (rv != 0)
            goto fail;
    } else if ((rv = server_grpc_core_new(s, &go, &s->grpc)) != 0) {
        goto fail;
    }
    /* the core's own listeners: polled once the member serves (serve) */
    for (size_t i = 0; nf == 0 && i < s->n_client_fds; i++) {
        uv_poll_init(loop, &s->client_polls[i], s->client_fds[i]);
        s->client_polls[i].data = s;
        s->n_client_polls++;
    }
    what = "listen for metrics";
    if ((rv = server_metrics_listen(s, &go)) != 0)
        goto fail;
    what = "listen for ZooKeeper clients";
    if ((rv = server_zk_listen(s)) != 0)
        goto fail;

    uv_timer_init(loop, &s->watch_sync);
    s->watch_sync.data = s;
    uv_timer_init(loop, &s->watch_progress);
    s->watch_progress.data = s;
    if (cfg->watch_progress_ms > 0)
        uv_timer_start(&s->watch_progress, on_watch_progress, cfg->watch_progress_ms,
                       cfg->watch_progress_ms);
    uv_timer_init(loop, &s->lease_tick);
    s->lease_tick.data = s;
    uv_timer_start(&s->lease_tick, on_lease_tick, 100, 100);
    server_autocompact_start(s);
    server_corrupt_start(s);
    server_compact_kick(s); /* initializes the handle; resumes a compaction */
    uv_check_init(loop, &s->apply_hook);
    s->apply_hook.data = s;
    uv_check_start(&s->apply_hook, on_pass);
    int signums[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        uv_signal_init(loop, &s->sigs[i]);
        s->sigs[i].data = s;
        uv_signal_start(&s->sigs[i], on_signal, signums[i]);
    }
    log_info("server", "%s (member %016llx, cluster %016llx) at revision %lld, applied index %llu",
             cfg->name, (unsigned long long)s->member_id, (unsigned long long)s->cluster_id,
             (long long)mvcc_rev(s->kv), (unsigned long long)s->applied_index);
    if (nf > 0)
        log_info("server", "serving clients on %u front loops beside the core loop%s", nf,
                 cfg->pin_threads ? ", each thread pinned to a CPU" : "");
    else
        log_info("server", "serving clients on the core loop (no front loops)");
    *out = s;
    return 0;

fail:
    if (what != NULL)
        log_error("server", "cannot %s (data dir %s): %s", what, cfg->data_dir, q_strerror(rv));
    if (s->grpc)
        grpc_server_close(s->grpc, NULL, NULL); /* nothing was accepted yet */
    if (s->metrics_grpc)
        grpc_server_close(s->metrics_grpc, NULL, NULL);
    server_zk_close(s);
    server_rangereads_stop(s);
    server_apply_finish(s); /* the start may have paused one (node.c) */
    if (s->apply_idle.data != NULL)
        uv_close((uv_handle_t *)&s->apply_idle, NULL);
    if (s->tick.type == UV_TIMER) {
        server_node_close(s, NULL, NULL);
    } else if (s->tp != NULL) {
        transport_close(s->tp, NULL, NULL);
        s->tp = NULL;
    }
    uv_run(loop, UV_RUN_DEFAULT); /* let what was opened close */
    raft_free(s->raft);
    wal_close(s->wal);
    lessor_close(s->leases);
    auth_close(s->auth);
    watch_hub_free(s->watches);
    if (s->kv)
        mvcc_close(s->kv);
    if (s->be)
        backend_close(s->be);
    server_tls_close(&s->tls);
    server_listeners_close(s);
    coro_free(s->apply_coro);
    arena_free(&s->apply_arena);
    free(s);
    return rv;
}

static void on_pass(uv_check_t *h)
{
    struct server *s = h->data;
    if (!s->closing)
        server_node_pass(s);
    publish_state(s);
    if (!s->serving && !s->closing && s->published && server_leader(s) != RAFT_NONE &&
        !s->corrupt.initial)
        serve(s);
    if (!s->closing)
        server_metrics_publish(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct server *s = h->data;
    if (--s->closing > 0)
        return;
    server_flush(s); /* nothing may have reopened a batch, but be sure */
    server_snapshot_copies_wait(); /* worker threads reading the store */
    server_defrag_detach(s);
    server_auth_detach(s);
    lessor_close(s->leases);
    auth_close(s->auth);
    watch_hub_free(s->watches);
    mvcc_close(s->kv);
    backend_close(s->be);
    arena_free(&s->arena);
    arena_free(&s->apply_arena);
    coro_free(s->apply_coro); /* its run ended in server_apply_finish */
    buf_free(&s->scratch);
    server_tls_close(&s->tls); /* every connection is closed */
    server_listeners_close(s);
    void (*cb)(void *) = s->stop_cb;
    void *arg = s->stop_arg;
    free(s);
    if (cb)
        cb(arg);
}

static void on_node_closed(void *arg)
{
    struct server *s = arg;
    on_handle_closed((uv_handle_t *)&s->apply_hook);
}

static void on_grpc_closed(void *arg)
{
    struct server *s = arg;
    /* the clients are gone; the server's own waiting requests learn that
     * the member stops (what was committed is in the WAL: a restart applies
     * it) */
    /* an entry applied across loop passes is finished first (its request
     * is answered, if its client is still there) */
    server_apply_finish(s);
    server_node_fail_all(s, QERR_STOPPED);
    server_rangereads_stop(s);
    server_flush(s); /* applied entries reach the store before it closes */
    s->closing = 11 + (int)s->n_client_polls + (s->apply_idle.data != NULL ? 1 : 0);
    if (s->apply_idle.data != NULL)
        uv_close((uv_handle_t *)&s->apply_idle, on_handle_closed);
    for (size_t i = 0; i < s->n_client_polls; i++)
        uv_close((uv_handle_t *)&s->client_polls[i], on_handle_closed);
    server_node_close(s, on_node_closed, s);
    server_corrupt_close(s, on_handle_closed);
    server_autocompact_close(s, on_handle_closed);
    uv_close((uv_handle_t *)&s->watch_sync, on_handle_closed);
    uv_close((uv_handle_t *)&s->watch_progress, on_handle_closed);
    uv_close((uv_handle_t *)&s->lease_tick, on_handle_closed);
    uv_close((uv_handle_t *)&s->apply_hook, on_handle_closed);
    uv_close((uv_handle_t *)&s->compact_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->compact_idle, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigs[0], on_handle_closed);
    uv_close((uv_handle_t *)&s->sigs[1], on_handle_closed);
}

static void close_clients(void *arg)
{
    struct server *s = arg;
    if (s->fronts != NULL)
        fronts_close(s->fronts, on_grpc_closed, s);
    else
        grpc_server_close(s->grpc, on_grpc_closed, s);
}

void server_stop(struct server *s, void (*cb)(void *arg), void *arg)
{
    if (s->stop_cb != NULL || s->closing)
        return;
    s->stop_cb = cb;
    s->stop_arg = arg;
    s->closing = -1;
    for (size_t i = 0; i < s->n_client_polls; i++)
        uv_poll_stop(&s->client_polls[i]); /* no more connections */
    server_zk_close(s);
    server_metrics_close(s, close_clients, s);
}
