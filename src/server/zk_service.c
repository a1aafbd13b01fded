/* server/zk_service.c: the ZooKeeper face's service (docs/zookeeper.md).
 *
 * Connections come from zk/ (zk.h) on the core loop: relayed from the
 * front loops, which own their sockets (server/front.c), or the core's
 * own with --front-loops=0; the two look the same here. Everything a
 * ZooKeeper request needs from the store goes through the face-neutral
 * call of call.h, as a gRPC or JSON request does: this file is a face
 * whose calls are its own (struct zcall: the face's context, answers
 * delivered to callbacks).
 *
 * Sessions are leases. A new session (ConnectRequest with session id 0):
 * the member picks the id (the lease id generator, as LeaseGrant with id
 * 0 does) and a 16-byte password, grants the lease (TTL: the negotiated
 * timeout rounded up to seconds), puts the session key ("\0zkS" + the id,
 * big-endian) holding the timeout and password attached to the lease, and
 * answers the ConnectResponse once both are applied. A reconnect (id and
 * password) reads the session key: a match keeps the session, anything
 * else is answered as ZooKeeper answers an expired session (timeOut 0) and
 * closed. Every packet renews the lease, at most every third of the
 * timeout, on a LeaseKeepAlive stream the connection keeps open (a
 * follower forwards renewals to the leader, lease_service.c); a renewal
 * answered with TTL 0 means the lease expired: the connection is closed
 * and the client's reconnect learns it is expired. closeSession revokes
 * the lease.
 *
 * Replies leave in the order the requests came (ZooKeeper's FIFO client
 * order): each request takes a slot in its connection's queue, and slots
 * are written from the head as they are answered. Packets that arrive
 * before the session is established (the Java client sends setWatches
 * and auth right behind its ConnectRequest) wait for it.
 */
#include "server/server_int.h"
#include "server/zk_service.h"
#include "server/zk_tree.h"
#include "server/front.h"
#include "zk.pb-c.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "base/sha1.h"
#include "base/version.h"
#include "zk/zk.h"

#define ZK_TICK_MS 2000 /* ZooKeeper's default tickTime */
/* ZooTrace's default text trace mask (client pings, server packets,
 * sessions: 0b100110010), which gtmk shows and stmk replaces; quorum
 * keeps it for those two words only (it traces nothing by it) */
#define ZK_TRACE_MASK_DEFAULT 306
#define ZK_PASSWD_LEN ZK_SESSION_PASSWD_LEN /* the session record: zk_tree.h */
/* a connection with this many requests not yet answered is not read
 * until it is down to half (ZooKeeper throttles at 1000 outstanding) */
#define ZK_MAX_OUTSTANDING 1000
/* what srvr and mntr may spend summing the tree's data size on the loop
 * (mvcc_range_opts.budget: about one unit per znode): -1 past it */
#define ZK_STATS_BUDGET (1 << 15)
/* keys of the figures' count a loop pass: about a millisecond */
#define ZK_FIG_STEP 4096
/* znodes the container sweep reads per loop pass (a few ms at most) */
#define ZK_SWEEP_STEP 256

struct zsess;

/* One call of this face (the face context of a qcall). */
struct zcall {
    qcall *call;
    struct zsvc *svc;
    struct zsess *zs; /* NULL once the connection is gone */
    struct zcall *next, *prev; /* the service's live calls */
    struct zcall *next_dead;
    bool ended;
    void (*on_msg)(struct zcall *zc, const uint8_t *msg, size_t len);
    void (*on_end)(struct zcall *zc, int status, const char *message);
    struct zslot *slot; /* the request it answers, if any */
    int32_t xid;
};

/* Request latencies in ms, as ZooKeeper's ServerStats and ServerCnxn
 * keep them: from the request's arrival to its reply leaving. */
struct zlat {
    uint64_t min, max, total, count, last;
};

static void lat_add(struct zlat *l, uint64_t ms)
{
    if (l->count == 0 || ms < l->min)
        l->min = ms;
    if (ms > l->max)
        l->max = ms;
    l->total += ms;
    l->count++;
    l->last = ms;
}

/* lat_add_zeros adds |n| latencies of 0 ms (answered as they came) */
static void lat_add_zeros(struct zlat *l, uint64_t n)
{
    l->min = 0;
    l->count += n;
    l->last = 0;
}

/* A reply slot, in request order. */
struct zslot {
    struct zslot *next;
    uint64_t t0; /* its request's arrival (loop ms) */
    bool ready;
    bool close_after; /* closeSession: the connection closes once it is out */
    struct buf out;
};

/* A packet that came before the session was established. */
struct zearly {
    struct zearly *next;
    uint64_t t0; /* arrival (loop ms), for the latency */
    size_t len;
    uint8_t data[];
};

struct zsess {
    struct zsvc *svc;
    zk_conn *c;
    int64_t id;
    uint8_t passwd[ZK_PASSWD_LEN];
    int32_t timeout_ms;
    uint64_t owner; /* a reconnect: the member its record names (0: none) */
    bool established;
    bool closing; /* closeSession seen: nothing more is read */
    uint64_t last_renew_ms;
    struct zcall *ka; /* the LeaseKeepAlive stream */
    struct zslot *head, *tail;
    struct zearly *early, *early_tail;
    /* FIFO order: a read waits for the writes before it; while anything
     * waits, what comes after waits behind it */
    unsigned pending_writes;
    struct zearly *deferred, *deferred_tail;
    size_t outstanding; /* requests read and not yet answered (slots, deferred) */
    /* the connection's identities for ACLs: "ip:<addr>" first, then what
     * addAuth added ("digest:user:hash") */
    char **ids;
    size_t n_ids;
    uint64_t told_gen; /* the event it was last notified of (fire) */
    /* for cons: when it was established (wall clock ms), the last
     * request's op, its xid and zxid, when it was answered */
    int64_t est_ms, last_resp_ms;
    int32_t last_op;
    int64_t last_cxid, last_zxid;
    size_t n_dwatches; /* its data-side watches (wchs) */
    uint64_t pkt_ms; /* the arrival of the request being handled */
    struct zlat lat;  /* cons' llat, minlat, avglat, maxlat (crst resets) */
};

/* A connection's watch on a path, as ZooKeeper 3.8 keeps it: a half in
 * its data table (getData and exists watches, one-shot; addWatch's) and
 * a half in its child table (getChildren's, one-shot; addWatch's), each
 * with one mode per connection and path (WatchManager with its
 * WatcherModeManager: the mode set last replaces the one before). A
 * persistent or recursive addWatch sets both halves. */
enum { WT_DATA = 0, WT_CHILD = 1 };                        /* the tables */
enum { W_DATA = 1u << WT_DATA, W_CHILD = 1u << WT_CHILD }; /* sets of them */
enum { WM_NONE, WM_STANDARD, WM_PERSISTENT, WM_RECURSIVE };
struct zwatch {
    struct zwatch *next;
    struct zsess *zs;
    uint8_t mode[2]; /* by WT_ */
    size_t n;
    uint8_t path[];
};

struct zsvc {
    /* the watches, by a hash of their path; an event looks up its path,
     * and each parent's while there are recursive halves (n_recursive) */
    struct zwatch **tab;
    size_t cap; /* a power of two, or 0 */
    size_t n_entries;
    size_t n_halves[2]; /* by WT_: ZooKeeper's two tables' sizes (mntr) */
    size_t n_recursive;
    uint64_t fire_gen; /* one notification per session and event */
    struct server *s;
    zk_listener *l;
    uv_check_t reaper;
    struct zcall *live;
    struct zcall *dead;
    struct buf scratch; /* read_now's reply */
    const struct qcall_method *m_grant, *m_put, *m_range, *m_keepalive, *m_revoke;
    uint64_t started_ms;
    uint64_t packets_in, packets_out;
    struct zlat lat; /* srvr's and mntr's latencies (srst resets) */
    /* wchs, as ZooKeeper's data watch table counts: watches of the data
     * side (data, exist, persistent, persistent recursive), the paths
     * they are on and the connections that hold them */
    size_t wchs_total, wchs_paths, wchs_conns;
    /* the container sweep (leader only): a pass every
     * --zk-container-check-interval, in steps of ZK_SWEEP_STEP znodes */
    uv_timer_t sweep_tick, sweep_step;
    struct buf sweep_cursor;
    bool sweeping;
    /* the tree's figures for srvr and mntr (zk_tree.h), counted after
     * start and after a snapshot replaced the store, ZK_FIG_STEP keys a
     * loop pass, then kept by the change observer */
    struct zk_figures fig;
    uv_timer_t fig_step;
    int64_t trace_mask; /* gtmk and stmk's (ZooTrace's text trace mask) */
    uint64_t fig_ns; /* the count's time on the loop, for the log */
    int close_refs; /* closing: the listener and the reaper, not yet closed */
};

int server_zk_negotiate_timeout(int asked_ms, int tick_ms)
{
    int lo = 2 * tick_ms, hi = 20 * tick_ms;
    return asked_ms < lo ? lo : asked_ms > hi ? hi : asked_ms;
}

static int64_t zxid_now(struct zsvc *z)
{
    return mvcc_rev(z->s->kv);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the face ---- */

static int zf_send(qcall *c, const uint8_t *msg, size_t len)
{
    struct zcall *zc = c->face_ctx;
    if (zc->on_msg != NULL && zc->zs != NULL)
        zc->on_msg(zc, msg, len);
    return 0;
}

static void zcall_unlink(struct zcall *zc)
{
    struct zsvc *z = zc->svc;
    if (zc->prev != NULL)
        zc->prev->next = zc->next;
    else
        z->live = zc->next;
    if (zc->next != NULL)
        zc->next->prev = zc->prev;
    zc->next = zc->prev = NULL;
}

static int zf_finish(qcall *c, int status, const char *message)
{
    struct zcall *zc = c->face_ctx;
    if (zc->ended)
        return 0;
    zc->ended = true;
    if (zc->on_end != NULL && zc->zs != NULL)
        zc->on_end(zc, status, message);
    /* freed on the next check phase: the service may still hold it now */
    zcall_unlink(zc);
    zc->next_dead = zc->svc->dead;
    zc->svc->dead = zc;
    return 0;
}

static size_t zf_pending(const qcall *c)
{
    (void)c;
    return 0;
}

static const struct qcall_face zk_face = {zf_send, zf_finish, zf_pending, NULL};

static void zcall_free(struct zcall *zc)
{
    zc->call->finished = true;
    zc->call->m->on_close(zc->call);
    qcall_free(zc->call);
    free(zc);
}

static void on_reap(uv_check_t *h)
{
    struct zsvc *z = h->data;
    while (z->dead != NULL) {
        struct zcall *zc = z->dead;
        z->dead = zc->next_dead;
        zcall_free(zc);
    }
}

/* zcall_msg hands one more request message to an open call. */
static void zcall_msg(struct zcall *zc, const ProtobufCMessage *req)
{
    struct zsvc *z = zc->svc;
    struct buf *b = &z->s->scratch;
    if (server_pack(b, req) != 0) {
        qcall_finish(zc->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* the service may pack its answer into the same scratch buffer */
    uint8_t *copy = malloc(b->len ? b->len : 1);
    if (copy == NULL) {
        qcall_finish(zc->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    size_t len = b->len;
    memcpy(copy, b->data, len);
    zc->call->m->on_message(zc->call, copy, len);
    free(copy);
}

/* zcall_new makes a call of |m| for session |zs| (nothing sent yet). */
static struct zcall *zcall_make(struct zsvc *z, struct zsess *zs, const struct qcall_method *m,
                                void (*on_msg)(struct zcall *, const uint8_t *, size_t),
                                void (*on_end)(struct zcall *, int, const char *),
                                struct zslot *slot, int32_t xid)
{
    struct zcall *zc = calloc(1, sizeof(*zc));
    if (zc == NULL)
        return NULL;
    zc->call = qcall_new(z->s, m, &zk_face, zc);
    if (zc->call == NULL) {
        free(zc);
        return NULL;
    }
    zc->call->zk_face = true;
    zc->svc = z;
    zc->zs = zs;
    zc->on_msg = on_msg;
    zc->on_end = on_end;
    zc->slot = slot;
    zc->xid = xid;
    zc->next = z->live;
    if (z->live != NULL)
        z->live->prev = zc;
    z->live = zc;
    return zc;
}

static struct zcall *zcall_new(struct zsess *zs, const struct qcall_method *m,
                               void (*on_msg)(struct zcall *, const uint8_t *, size_t),
                               void (*on_end)(struct zcall *, int, const char *),
                               struct zslot *slot, int32_t xid)
{
    return zcall_make(zs->svc, zs, m, on_msg, on_end, slot, xid);
}

/* zcall_start opens a call of |m| for session |zs| and sends |req|. */
static struct zcall *zcall_start(struct zsess *zs, const struct qcall_method *m,
                                 const ProtobufCMessage *req,
                                 void (*on_msg)(struct zcall *, const uint8_t *, size_t),
                                 void (*on_end)(struct zcall *, int, const char *),
                                 struct zslot *slot, int32_t xid)
{
    struct zcall *zc = zcall_new(zs, m, on_msg, on_end, slot, xid);
    if (zc != NULL)
        zcall_msg(zc, req);
    return zc;
}

/* ---- replies in order ---- */

static struct zslot *slot_new(struct zsess *zs)
{
    struct zslot *sl = calloc(1, sizeof(*sl));
    if (sl == NULL)
        return NULL;
    sl->t0 = zs->pkt_ms;
    zs->outstanding++;
    if (zs->tail != NULL)
        zs->tail->next = sl;
    else
        zs->head = sl;
    zs->tail = sl;
    return sl;
}

/* replied notes the latency of a reply that left (arrival |t0|) */
static void replied(struct zsess *zs, uint64_t t0)
{
    uint64_t now = uv_now(zs->svc->s->loop);
    uint64_t ms = now > t0 ? now - t0 : 0;
    lat_add(&zs->lat, ms);
    lat_add(&zs->svc->lat, ms);
}

static void slots_flush(struct zsess *zs)
{
    while (zs->head != NULL && zs->head->ready) {
        struct zslot *sl = zs->head;
        zs->head = sl->next;
        if (zs->head == NULL)
            zs->tail = NULL;
        bool close_after = sl->close_after;
        if (sl->out.len > 0 && zk_conn_send(zs->c, sl->out.data, sl->out.len) == 0) {
            zs->svc->packets_out++;
            replied(zs, sl->t0);
        }
        buf_free(&sl->out);
        free(sl);
        zs->outstanding--;
        if (close_after) {
            zk_conn_close(zs->c); /* on_close follows from the loop */
            return;
        }
    }
    if (zs->outstanding <= ZK_MAX_OUTSTANDING / 2)
        zk_conn_pause(zs->c, false);
}

/* answered notes a reply for cons (lcxid, lzxid, lresp) */
static void answered(struct zsess *zs, const struct zk_reply_header *h)
{
    zs->last_cxid = h->xid;
    zs->last_zxid = h->zxid;
    zs->last_resp_ms = wall_ms();
}

/* slot_fill: |sl|'s answer is |h| and, when |rec| is not NULL, |body|
 * (whatever h's err) */
static void slot_fill(struct zslot *sl, const struct zk_reply_header *h,
                      const struct jute_record *rec, const void *body)
{
    struct jute_out o = {&sl->out, 0};
    jute_encode(&zk_rec_reply_header, &o, h);
    if (rec != NULL)
        jute_encode(rec, &o, body);
    sl->ready = true;
}

/* slot_reply: slot_fill, noted for cons, then what is ready is written */
static void slot_reply(struct zsess *zs, struct zslot *sl, const struct zk_reply_header *h,
                       const struct jute_record *rec, const void *body)
{
    slot_fill(sl, h, rec, body);
    answered(zs, h);
    slots_flush(zs);
}

/* slot_answer fills |sl| with a ReplyHeader (and |body| of record |rec|
 * when err is 0) and writes what is ready. */
static void slot_answer(struct zsess *zs, struct zslot *sl, int32_t xid, int32_t err,
                        const struct jute_record *rec, const void *body)
{
    struct zk_reply_header h = {xid, zxid_now(zs->svc), err};
    slot_reply(zs, sl, &h, err == 0 ? rec : NULL, body);
}

/* ---- sessions ---- */

static void ka_msg(struct zcall *zc, const uint8_t *msg, size_t len)
{
    struct zsess *zs = zc->zs;
    Etcdserverpb__LeaseKeepAliveResponse *r =
        (Etcdserverpb__LeaseKeepAliveResponse *)protobuf_c_message_unpack(
            &etcdserverpb__lease_keep_alive_response__descriptor, NULL, len, msg);
    if (r == NULL)
        return;
    int64_t ttl = r->ttl;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (ttl <= 0) {
        log_info("zk", "session 0x%llx expired: closing %s", (unsigned long long)zs->id,
                 zk_conn_peer(zs->c));
        zk_conn_close(zs->c);
    }
}

static void ka_end(struct zcall *zc, int status, const char *message)
{
    (void)status;
    (void)message;
    if (zc->zs != NULL && zc->zs->ka == zc)
        zc->zs->ka = NULL; /* the next renewal opens another stream */
}

static void renew(struct zsess *zs, bool force)
{
    struct zsvc *z = zs->svc;
    uint64_t now = uv_now(z->s->loop);
    if (!zs->established || zs->closing)
        return;
    if (!force && now - zs->last_renew_ms < (uint64_t)zs->timeout_ms / 3)
        return;
    zs->last_renew_ms = now;
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = zs->id;
    if (zs->ka != NULL && !zs->ka->ended)
        zcall_msg(zs->ka, &r.base);
    else
        zs->ka = zcall_start(zs, z->m_keepalive, &r.base, ka_msg, ka_end, NULL, 0);
}

static void on_packet(zk_conn *c, const uint8_t *pkt, size_t len);
static int add_id(struct zsess *zs, const char *scheme, const char *id);

static void established(struct zsess *zs)
{
    struct zk_connect_resp r = {0, zs->timeout_ms, zs->id, {zs->passwd, ZK_PASSWD_LEN}, false};
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    zk_connect_resp_encode(&o, &r);
    if (o.err == 0 && zk_conn_send(zs->c, b.data, b.len) == 0)
        zs->svc->packets_out++;
    buf_free(&b);
    zs->established = true;
    zs->last_renew_ms = uv_now(zs->svc->s->loop);
    zs->est_ms = wall_ms();
    zs->last_cxid = -1;
    /* the packets that came meanwhile, in order */
    struct zearly *e = zs->early;
    zs->early = zs->early_tail = NULL;
    zk_conn *conn = zs->c;
    while (e != NULL) {
        struct zearly *n = e->next;
        if (zk_conn_get_data(conn) == zs && !zs->closing)
            on_packet(conn, e->data, e->len);
        free(e);
        e = n;
    }
}

/* refuse answers a connect as ZooKeeper answers an unknown or expired
 * session (timeOut 0, session 0, a zero password) and closes. */
static void refuse(struct zsess *zs)
{
    uint8_t zero[ZK_PASSWD_LEN] = {0};
    struct zk_connect_resp r = {0, 0, 0, {zero, ZK_PASSWD_LEN}, false};
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    zk_connect_resp_encode(&o, &r);
    if (o.err == 0)
        zk_conn_send(zs->c, b.data, b.len);
    buf_free(&b);
    zk_conn_close(zs->c);
}

static void put_end(struct zcall *zc, int status, const char *message)
{
    struct zsess *zs = zc->zs;
    if (status != GRPC_STATUS_OK) {
        log_warn("zk", "cannot store session 0x%llx: %s", (unsigned long long)zs->id,
                 message != NULL ? message : "");
        zk_conn_close(zs->c);
        return;
    }
    log_info("zk", "session 0x%llx established for %s, timeout %d ms", (unsigned long long)zs->id,
             zk_conn_peer(zs->c), zs->timeout_ms);
    established(zs);
}

/* session_put writes the session's record (zk_tree.h), naming this
 * member as the one it is connected to, on its lease */
static void session_put(struct zsess *zs, void (*end)(struct zcall *, int, const char *))
{
    uint8_t key[ZK_SESSION_KEY_LEN], val[ZK_SESSION_V2_LEN];
    zk_session_key(zs->id, key);
    val[0] = 2; /* the record's version */
    val[1] = (uint8_t)((uint32_t)zs->timeout_ms >> 24);
    val[2] = (uint8_t)((uint32_t)zs->timeout_ms >> 16);
    val[3] = (uint8_t)((uint32_t)zs->timeout_ms >> 8);
    val[4] = (uint8_t)zs->timeout_ms;
    memcpy(val + 5, zs->passwd, ZK_PASSWD_LEN);
    uint64_t me = zs->svc->s->member_id;
    for (int i = 0; i < 8; i++)
        val[ZK_SESSION_V1_LEN + i] = (uint8_t)(me >> (56 - 8 * i));
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = key;
    p.key.len = sizeof(key);
    p.value.data = val;
    p.value.len = sizeof(val);
    p.lease = zs->id;
    if (zcall_start(zs, zs->svc->m_put, &p.base, NULL, end, NULL, 0) == NULL)
        zk_conn_close(zs->c);
}

static void grant_end(struct zcall *zc, int status, const char *message)
{
    struct zsess *zs = zc->zs;
    if (status != GRPC_STATUS_OK) {
        log_warn("zk", "cannot grant the lease of a new session: %s",
                 message != NULL ? message : "");
        zk_conn_close(zs->c);
        return;
    }
    session_put(zs, put_end);
}

static void new_session(struct zsess *zs)
{
    struct server *s = zs->svc->s;
    do
        zs->id = (int64_t)(server_next_id(s) & (uint64_t)INT64_MAX);
    while (zs->id == 0);
    if (getrandom(zs->passwd, sizeof(zs->passwd), 0) != (ssize_t)sizeof(zs->passwd)) {
        zk_conn_close(zs->c);
        return;
    }
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = zs->id;
    g.ttl = (zs->timeout_ms + 999) / 1000;
    if (zcall_start(zs, zs->svc->m_grant, &g.base, NULL, grant_end, NULL, 0) == NULL)
        zk_conn_close(zs->c);
}

/* reconnect: the session key's record against the password given (the
 * lookup call's |xid| says what it found: 1 a match) */

static void lookup_msg(struct zcall *zc, const uint8_t *msg, size_t len)
{
    struct zsess *zs = zc->zs;
    Etcdserverpb__RangeResponse *r = (Etcdserverpb__RangeResponse *)protobuf_c_message_unpack(
        &etcdserverpb__range_response__descriptor, NULL, len, msg);
    if (r == NULL)
        return;
    zc->xid = 0;
    const ProtobufCBinaryData *v = r->n_kvs == 1 ? &r->kvs[0]->value : NULL;
    if (v != NULL &&
        ((v->len == ZK_SESSION_V1_LEN && v->data[0] == 1) ||
         (v->len == ZK_SESSION_V2_LEN && v->data[0] == 2)) &&
        memcmp(v->data + 5, zs->passwd, ZK_PASSWD_LEN) == 0) {
        zc->xid = 1; /* found, and the password matches */
        zs->owner = zk_session_owner(v->data, v->len);
        /* the session keeps the timeout its lease was granted with (the
         * lease TTL does not change on a reconnect), whatever this
         * reconnect asked: the client then pings often enough */
        const uint8_t *v = r->kvs[0]->value.data;
        int32_t to = (int32_t)((uint32_t)v[1] << 24 | (uint32_t)v[2] << 16 |
                               (uint32_t)v[3] << 8 | v[4]);
        if (to > 0)
            zs->timeout_ms = to;
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* a session that reconnects here closes its older connection on this
 * member, as ZooKeeper does */
struct moved {
    struct zsess *now;
};

static void close_older(zk_conn *c, void *arg)
{
    struct moved *m = arg;
    struct zsess *zs = zk_conn_get_data(c);
    if (zs != NULL && zs != m->now && zs->established && zs->id == m->now->id) {
        log_info("zk", "session 0x%llx moved to %s: closing %s", (unsigned long long)zs->id,
                 zk_conn_peer(m->now->c), zk_conn_peer(c));
        zk_conn_close(c);
    }
}

static void moved_end(struct zcall *zc, int status, const char *message)
{
    struct zsess *zs = zc->zs;
    if (status != GRPC_STATUS_OK) {
        log_warn("zk", "cannot move session 0x%llx here: %s", (unsigned long long)zs->id,
                 message != NULL ? message : "");
        zk_conn_close(zs->c); /* it tries again, here or elsewhere */
        return;
    }
    log_info("zk", "session 0x%llx moved here from %016llx for %s", (unsigned long long)zs->id,
             (unsigned long long)zs->owner, zk_conn_peer(zs->c));
    established(zs);
    renew(zs, true);
}

static void lookup_end(struct zcall *zc, int status, const char *message)
{
    (void)message;
    struct zsess *zs = zc->zs;
    if (status != GRPC_STATUS_OK) {
        zk_conn_close(zs->c); /* let the client try again (another member) */
        return;
    }
    if (zc->xid != 1) {
        log_info("zk", "session 0x%llx of %s is expired or its password is wrong",
                 (unsigned long long)zs->id, zk_conn_peer(zs->c));
        refuse(zs);
        return;
    }
    struct moved m = {zs};
    zk_conn_foreach(zs->svc->l, close_older, &m);
    if (zs->owner != zs->svc->s->member_id) {
        /* it was connected to another member: from now on that member's
         * writes for it are answered SESSIONMOVED (ZooKeeper's owner) */
        session_put(zs, moved_end);
        return;
    }
    established(zs);
    renew(zs, true);
}

static void on_connect(zk_conn *c, const struct zk_connect_req *req)
{
    struct zsvc *z = zk_listener_arg(zk_conn_listener(c));
    z->packets_in++;
    struct zsess *zs = calloc(1, sizeof(*zs));
    if (zs == NULL) {
        zk_conn_close(c);
        return;
    }
    zs->svc = z;
    zs->c = c;
    zk_conn_set_data(c, zs);
    if (zk_conn_host(c)[0] != '\0' && add_id(zs, "ip", zk_conn_host(c)) != 0) {
        zk_conn_close(c);
        return;
    }
    /* a verified client certificate is an identity, as ZooKeeper's
     * X509AuthenticationProvider makes it: x509:<subject, RFC 2253> */
    char subject[512];
    if (zk_conn_peer_subject(c, subject, sizeof(subject)) == 0 &&
        add_id(zs, "x509", subject) != 0) {
        zk_conn_close(c);
        return;
    }
    int64_t ours = zxid_now(z);
    if (req->last_zxid_seen > ours) {
        /* ZooKeeper's answer: the client has seen a newer state than this
         * member's; it must try another one */
        log_info("zk",
                 "refusing session request for client %s as it has seen zxid 0x%llx our last "
                 "zxid is 0x%llx client must try another server",
                 zk_conn_peer(c), (unsigned long long)req->last_zxid_seen,
                 (unsigned long long)ours);
        zk_conn_close(c);
        return;
    }
    zs->timeout_ms = server_zk_negotiate_timeout(req->timeout, ZK_TICK_MS);
    if (req->session_id == 0) {
        new_session(zs);
        return;
    }
    zs->id = req->session_id;
    if (req->passwd.len != ZK_PASSWD_LEN) {
        refuse(zs);
        return;
    }
    memcpy(zs->passwd, req->passwd.p, ZK_PASSWD_LEN);
    uint8_t key[ZK_SESSION_KEY_LEN];
    zk_session_key(zs->id, key);
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = key;
    r.key.len = sizeof(key);
    r.serializable = true;
    if (zcall_start(zs, z->m_range, &r.base, lookup_msg, lookup_end, NULL, 0) == NULL)
        zk_conn_close(c);
}

static void revoke_end(struct zcall *zc, int status, const char *message)
{
    (void)message;
    struct zsess *zs = zc->zs;
    /* a lease already gone is a session already closed: fine either way,
     * as ZooKeeper answers closeSession */
    (void)status;
    zc->slot->close_after = true;
    slot_answer(zs, zc->slot, zc->xid, 0, NULL, NULL);
}

/* ---- watches ---- */

/* the chain of |p|'s entries */
static struct zwatch **chain(struct zsvc *z, const uint8_t *p, size_t n)
{
    return &z->tab[zk_hash(ZK_HASH_START, p, n) & (z->cap - 1)];
}

static bool on_path(const struct zwatch *w, const uint8_t *p, size_t n)
{
    return w->n == n && memcmp(w->path, p, n) == 0;
}

static struct zwatch *watch_find(struct zsvc *z, struct zsess *zs, const uint8_t *p, size_t n)
{
    if (z->cap == 0)
        return NULL;
    for (struct zwatch *w = *chain(z, p, n); w != NULL; w = w->next)
        if (w->zs == zs && on_path(w, p, n))
            return w;
    return NULL;
}

/* grow doubles the table (rehashing) once it holds as many entries as
 * buckets */
static int grow(struct zsvc *z)
{
    size_t cap = z->cap ? z->cap * 2 : 64;
    struct zwatch **tab = calloc(cap, sizeof(*tab));
    if (tab == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < z->cap; i++) {
        struct zwatch *w = z->tab[i];
        while (w != NULL) {
            struct zwatch *next = w->next;
            size_t b = zk_hash(ZK_HASH_START, w->path, w->n) & (cap - 1);
            w->next = tab[b];
            tab[b] = w;
            w = next;
        }
    }
    free(z->tab);
    z->tab = tab;
    z->cap = cap;
    return 0;
}

/* data_side_on: another entry than |self| on |p| has a data-table half */
static bool data_side_on(struct zsvc *z, const struct zwatch *self, const uint8_t *p, size_t n)
{
    for (struct zwatch *w = z->cap ? *chain(z, p, n) : NULL; w != NULL; w = w->next)
        if (w != self && w->mode[WT_DATA] != WM_NONE && on_path(w, p, n))
            return true;
    return false;
}

/* set_mode gives |w|'s half in |t| the mode |m| (WM_NONE: removes it),
 * keeping the counts (mntr's tables, wchs's data table) */
static void set_mode(struct zsvc *z, struct zwatch *w, int t, uint8_t m)
{
    uint8_t old = w->mode[t];
    if (old == m)
        return;
    if (old == WM_RECURSIVE)
        z->n_recursive--;
    if (m == WM_RECURSIVE)
        z->n_recursive++;
    if (old == WM_NONE || m == WM_NONE) {
        bool on = m != WM_NONE;
        z->n_halves[t] += on ? 1 : (size_t)-1;
        if (t == WT_DATA) {
            /* wchs: ZooKeeper's data table, its watches, paths and
             * connections */
            z->wchs_total += on ? 1 : (size_t)-1;
            if (on ? w->zs->n_dwatches++ == 0 : --w->zs->n_dwatches == 0)
                z->wchs_conns += on ? 1 : (size_t)-1;
            if (!data_side_on(z, w, w->path, w->n))
                z->wchs_paths += on ? 1 : (size_t)-1;
        }
    }
    w->mode[t] = m;
}

/* unlink_if_empty frees the entry at *pp when neither table has it any
 * more; true when it did (*pp is then the next entry) */
static bool unlink_if_empty(struct zsvc *z, struct zwatch **pp)
{
    struct zwatch *w = *pp;
    if (w->mode[WT_DATA] != WM_NONE || w->mode[WT_CHILD] != WM_NONE)
        return false;
    *pp = w->next;
    free(w);
    z->n_entries--;
    return true;
}

/* watch_add: |zs|'s watch on |p| in each table of |tables| (a bit per
 * WT_) gets mode |m|, as ZooKeeper's WatchManager.addWatch: one mode per
 * watcher and path in each table, the last set replaces the one before
 * (a getData watch after addWatch makes the data half one-shot) */
static void watch_add(struct zsess *zs, const uint8_t *p, size_t n, unsigned tables, uint8_t m)
{
    struct zsvc *z = zs->svc;
    struct zwatch *w = watch_find(z, zs, p, n);
    if (w == NULL) {
        if (z->n_entries >= z->cap && grow(z) != 0 && z->cap == 0)
            return;
        w = malloc(sizeof(*w) + n);
        if (w == NULL)
            return;
        w->zs = zs;
        w->mode[WT_DATA] = w->mode[WT_CHILD] = WM_NONE;
        w->n = n;
        memcpy(w->path, p, n);
        struct zwatch **c = chain(z, p, n);
        w->next = *c;
        *c = w;
        z->n_entries++;
    }
    for (int t = 0; t < 2; t++)
        if (tables & (1u << t))
            set_mode(z, w, t, m);
}

/* watch_remove takes |zs|'s halves in |tables| off |p| (every path when p
 * is NULL: O(buckets), on close only), as ZooKeeper's removeWatcher does
 * whatever their mode; the number of halves taken */
static size_t watch_remove(struct zsvc *z, struct zsess *zs, const uint8_t *p, size_t n,
                           unsigned tables)
{
    size_t k = 0;
    for (size_t b = 0; b < z->cap; b++) {
        struct zwatch **pp = p != NULL ? chain(z, p, n) : &z->tab[b];
        while (*pp != NULL) {
            struct zwatch *w = *pp;
            if (w->zs == zs && (p == NULL || on_path(w, p, n))) {
                for (int t = 0; t < 2; t++)
                    if ((tables & (1u << t)) && w->mode[t] != WM_NONE) {
                        set_mode(z, w, t, WM_NONE);
                        k++;
                    }
                if (unlink_if_empty(z, pp))
                    continue;
            }
            pp = &w->next;
        }
        if (p != NULL)
            break;
    }
    return k;
}

/* watch_count: how many of |zs|'s halves in |tables| are on |p| */
static size_t watch_count(struct zsvc *z, struct zsess *zs, const uint8_t *p, size_t n,
                          unsigned tables)
{
    struct zwatch *w = watch_find(z, zs, p, n);
    size_t k = 0;
    for (int t = 0; w != NULL && t < 2; t++)
        k += (tables & (1u << t)) && w->mode[t] != WM_NONE;
    return k;
}

static void notify(struct zsess *zs, int32_t type, const uint8_t *p, size_t n)
{
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    struct zk_reply_header h = {ZK_XID_NOTIFICATION, -1, 0};
    struct zk_watcher_event ev = {type, ZK_STATE_SYNC_CONNECTED, {p, (int32_t)n}};
    jute_encode(&zk_rec_reply_header, &o, &h);
    jute_encode(&zk_rec_watcher_event, &o, &ev);
    if (o.err == 0 && zk_conn_send(zs->c, b.data, b.len) == 0)
        zs->svc->packets_out++;
    buf_free(&b);
}

/* session_ids: the identities |zs| has for ACL checks */
static struct zk_ids session_ids(const struct zsess *zs)
{
    return (struct zk_ids){(const char *const *)zs->ids, zs->n_ids};
}

/* trigger: ZooKeeper's WatchManager.triggerWatch on table |t| for an
 * event |type| at |p|: the halves on |p| fire (one-shot ones go), and
 * the recursive ones on |p| or above it unless |type| is
 * NodeChildrenChanged; each session is told once for |gen| (a NodeDeleted
 * goes through the data table, then the child table with the same gen:
 * no session hears it twice), and only when |acl| lets it READ (a used
 * one-shot watch goes either way, as ZooKeeper's) */
static void trigger(struct zsvc *z, int t, int32_t type, const uint8_t *p, size_t n, uint64_t gen,
                    const struct zk_acl *acl, int32_t n_acl)
{
    if (z->cap == 0)
        return;
    size_t ln = n; /* the path looked at: |p|, then each parent up to "/" */
    for (;;) {
        bool at_p = ln == n;
        for (struct zwatch **pp = chain(z, p, ln); *pp != NULL;) {
            struct zwatch *w = *pp;
            uint8_t m = w->mode[t];
            bool tell = false, once = false;
            if (m != WM_NONE && on_path(w, p, ln)) {
                if (m == WM_RECURSIVE)
                    tell = type != ZK_EVENT_NODE_CHILDREN_CHANGED;
                else if (at_p)
                    tell = true, once = m == WM_STANDARD;
            }
            if (tell && w->zs->told_gen != gen) {
                w->zs->told_gen = gen;
                struct zk_ids who = session_ids(w->zs);
                if (n_acl != ZK_ACL_UNKNOWN && zk_acl_permits(acl, n_acl, ZK_PERM_READ, &who))
                    notify(w->zs, type, p, n);
            }
            if (once) {
                set_mode(z, w, t, WM_NONE);
                if (unlink_if_empty(z, pp))
                    continue;
            }
            pp = &w->next;
        }
        if (z->n_recursive == 0 || type == ZK_EVENT_NODE_CHILDREN_CHANGED || ln <= 1)
            return;
        ln = zk_path_parent_len(p, ln);
    }
}

static void fire_change(struct zsvc *z, const struct zk_change_rec *r);

void server_zk_observe(struct server *s, int type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev)
{
    struct zsvc *z = s->zk;
    if (z == NULL)
        return;
    zk_figures_change(&z->fig, type, kv, prev);
    if (z->n_entries == 0 || s->zk_own_changes)
        return;
    /* a change no ZooKeeper write listed (none does so today: the
     * face's writes, a session's end and the sweep all list theirs): its
     * ACLs are not known, so its one-shot watches go and no one is told */
    struct zk_change_rec r = {
        .acl = NULL, .parent_acl = NULL, .n_acl = ZK_ACL_UNKNOWN, .n_parent_acl = ZK_ACL_UNKNOWN};
    r.c = zk_tree_change(type, kv, prev, &r.path, &r.n);
    fire_change(z, &r);
}

void server_zk_fire(struct server *s, const struct zk_change_rec *ch, size_t n)
{
    struct zsvc *z = s->zk;
    if (z == NULL || z->n_entries == 0)
        return;
    for (size_t i = 0; i < n; i++)
        fire_change(z, &ch[i]);
}

/* fire_change: the events of a change, as ZooKeeper's DataTree fires
 * them (createNode, deleteNode, setData), each to the sessions that may
 * READ the node it is of (a NodeChildrenChanged: the parent) */
static void fire_change(struct zsvc *z, const struct zk_change_rec *r)
{
    if (r->c == ZK_CHANGE_NONE)
        return;
    const uint8_t *p = r->path;
    size_t n = r->n;
    size_t pl = zk_path_parent_len(p, n);
    uint64_t gen = ++z->fire_gen;
    switch (r->c) {
    case ZK_CHANGE_CREATED:
        trigger(z, WT_DATA, ZK_EVENT_NODE_CREATED, p, n, gen, r->acl, r->n_acl);
        trigger(z, WT_CHILD, ZK_EVENT_NODE_CHILDREN_CHANGED, p, pl, ++z->fire_gen, r->parent_acl,
                r->n_parent_acl);
        break;
    case ZK_CHANGE_DELETED:
        trigger(z, WT_DATA, ZK_EVENT_NODE_DELETED, p, n, gen, r->acl, r->n_acl);
        trigger(z, WT_CHILD, ZK_EVENT_NODE_DELETED, p, n, gen, r->acl, r->n_acl);
        trigger(z, WT_CHILD, ZK_EVENT_NODE_CHILDREN_CHANGED, p, pl, ++z->fire_gen, r->parent_acl,
                r->n_parent_acl);
        break;
    case ZK_CHANGE_DATA:
        trigger(z, WT_DATA, ZK_EVENT_NODE_DATA_CHANGED, p, n, gen, r->acl, r->n_acl);
        break;
    default:
        break;
    }
}

/* setWatches(2) on reconnect, as ZooKeeper's DataTree.setWatches: what
 * changed since |rel| fires now, the rest is armed */
static void set_watches(struct zsess *zs, const struct zk_set_watches *sw)
{
    struct zsvc *z = zs->svc;
    struct arena *a = &z->s->arena;
    const struct jute_vec *lists[5] = {&sw->data, &sw->exist, &sw->child, &sw->persistent,
                                       &sw->persistent_recursive};
    for (int l = 0; l < 5; l++) {
        const struct jute_bytes *v = lists[l]->v;
        for (int32_t i = 0; i < lists[l]->n; i++) {
            const uint8_t *p = v[i].p;
            size_t n = v[i].len > 0 ? (size_t)v[i].len : 0;
            bool exists = false;
            int64_t mzxid = 0, pzxid = 0;
            if (n == 0 || zk_node_info(z->s->kv, p, n, a, &exists, &mzxid, &pzxid) != 0)
                continue;
            switch (l) {
            case 0:
                if (!exists)
                    notify(zs, ZK_EVENT_NODE_DELETED, p, n);
                else if (mzxid > sw->relative_zxid)
                    notify(zs, ZK_EVENT_NODE_DATA_CHANGED, p, n);
                else
                    watch_add(zs, p, n, W_DATA, WM_STANDARD);
                break;
            case 1:
                if (exists)
                    notify(zs, ZK_EVENT_NODE_CREATED, p, n);
                else
                    watch_add(zs, p, n, W_DATA, WM_STANDARD);
                break;
            case 2:
                if (!exists)
                    notify(zs, ZK_EVENT_NODE_DELETED, p, n);
                else if (pzxid > sw->relative_zxid)
                    notify(zs, ZK_EVENT_NODE_CHILDREN_CHANGED, p, n);
                else
                    watch_add(zs, p, n, W_CHILD, WM_STANDARD);
                break;
            case 3:
                watch_add(zs, p, n, W_DATA | W_CHILD, WM_PERSISTENT);
                break;
            default:
                watch_add(zs, p, n, W_DATA | W_CHILD, WM_RECURSIVE);
                break;
            }
        }
    }
}

static bool is_write(int32_t type)
{
    switch (type) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
    case ZK_OP_DELETE:
    case ZK_OP_SET_DATA:
    case ZK_OP_SET_ACL:
    case ZK_OP_CHECK:
    case ZK_OP_MULTI:
    case ZK_OP_SYNC:
        return true;
    default:
        return false;
    }
}

static void run_deferred(struct zsess *zs);

/* a write's log entry answered (e->out: i64 zxid, i32 err, the record) */
static void write_msg(struct zcall *zc, const uint8_t *msg, size_t len)
{
    struct zsess *zs = zc->zs;
    struct zslot *sl = zc->slot;
    if (sl == NULL || sl->ready)
        return;
    struct jute_in in;
    jute_in_init(&in, msg, len);
    int64_t zxid = jute_get_long(&in);
    int32_t err = jute_get_int(&in);
    if (in.err != 0) {
        zxid = zxid_now(zs->svc);
        err = ZK_SYSTEMERROR;
    }
    if (err == ZK_SESSIONMOVED && zs != NULL) {
        /* ZooKeeper's FinalRequestProcessor: a connection-level error; the
         * connection is closed, not answered (the client reconnects) */
        log_info("zk", "session 0x%llx moved to another member: closing %s",
                 (unsigned long long)zs->id, zk_conn_peer(zs->c));
        sl->ready = true;
        zk_conn_close(zs->c);
        return;
    }
    struct jute_out o = {&sl->out, 0};
    /* room for the header (16 bytes) and the body at once (if it cannot
     * be had, the puts below ask again and fail as they would have) */
    (void)buf_reserve(&sl->out, 16 + (err == 0 ? jute_in_left(&in) : 0));
    struct zk_reply_header h = {zc->xid, zxid, err};
    jute_encode(&zk_rec_reply_header, &o, &h);
    if (err == 0)
        jute_put_raw(&o, in.p, jute_in_left(&in));
    sl->ready = true;
    if (zs != NULL)
        answered(zs, &h);
}

static void write_end(struct zcall *zc, int status, const char *message)
{
    struct zsess *zs = zc->zs;
    struct zslot *sl = zc->slot;
    if (sl != NULL && !sl->ready) {
        /* not applied: timed out, no leader, stopping */
        log_info("zk", "session 0x%llx: a write failed: %s", (unsigned long long)zs->id,
                 message != NULL ? message : "");
        /* NOSPACE (--quota-backend-bytes) answers SYSTEMERROR, not
         * QUOTAEXCEEDED (-125): kazoo 2.8's reader thread dies on a code it
         * does not know (its caller then waits forever) and the 3.8 C
         * client has no name for it (docs/zookeeper.md) */
        slot_answer(zs, sl, zc->xid,
                    status == GRPC_STATUS_UNAVAILABLE || status == GRPC_STATUS_DEADLINE_EXCEEDED
                        ? ZK_OPERATIONTIMEOUT
                        : ZK_SYSTEMERROR,
                    NULL, NULL);
    } else {
        slots_flush(zs);
    }
    if (zs->pending_writes > 0)
        zs->pending_writes--;
    run_deferred(zs);
}

static void write_on_message(qcall *call, const uint8_t *msg, size_t len)
{
    (void)call;
    (void)msg;
    (void)len;
}

/* the face's own method: writes are proposed directly (server_propose) */
static const struct qcall_method zk_write_method = {"/quorum.ZooKeeper/Write", QCALL_UNARY,
                                                    write_on_message, NULL,
                                                    server_entry_call_closed};

static void propose_write(struct zsess *zs, struct zslot *sl, int32_t xid, const uint8_t *pkt,
                          size_t len)
{
    struct zsvc *z = zs->svc;
    struct zcall *zc = zcall_new(zs, &zk_write_method, write_msg, write_end, sl, xid);
    if (zc == NULL) {
        slot_answer(zs, sl, xid, ZK_SYSTEMERROR, NULL, NULL);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    Quorumzk__Write w = QUORUMZK__WRITE__INIT;
    w.session = zs->id;
    w.member = z->s->member_id;
    w.now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    w.ids = zs->ids;
    w.n_ids = zs->n_ids;
    w.request.data = (uint8_t *)pkt;
    w.request.len = len;
    zs->pending_writes++;
    server_propose_copy(z->s, zc->call, ENTRY_ZK_WRITE, &w.base);
}

static void who_am_i(struct zsess *zs, struct zslot *sl, int32_t xid)
{
    struct arena *a = &zs->svc->s->arena;
    struct zk_client_info *ci = arena_alloc(a, sizeof(*ci) * (zs->n_ids ? zs->n_ids : 1));
    size_t k = 0;
    for (size_t i = 0; ci != NULL && i < zs->n_ids; i++) {
        const char *w = zs->ids[i];
        const char *colon = strchr(w, ':');
        if (colon == NULL)
            continue;
        ci[k].scheme = (struct jute_bytes){(const uint8_t *)w, (int32_t)(colon - w)};
        /* digest ids show the user only, as ZooKeeper's whoAmI */
        const char *user = colon + 1;
        size_t ul = strlen(user);
        if (strncmp(w, "digest:", 7) == 0 && strchr(user, ':') != NULL)
            ul = (size_t)(strchr(user, ':') - user);
        ci[k].user = (struct jute_bytes){(const uint8_t *)user, (int32_t)ul};
        k++;
    }
    struct zk_who_am_i_resp r = {{ci, (int32_t)k}};
    slot_answer(zs, sl, xid, 0, &zk_rec_who_am_i_resp, &r);
}

static int add_id(struct zsess *zs, const char *scheme, const char *id)
{
    for (size_t i = 0; i < zs->n_ids; i++) {
        const char *w = zs->ids[i];
        size_t sl = strlen(scheme);
        if (strncmp(w, scheme, sl) == 0 && w[sl] == ':' && strcmp(w + sl + 1, id) == 0)
            return 0;
    }
    char **v = realloc(zs->ids, sizeof(*v) * (zs->n_ids + 1));
    if (v == NULL)
        return -ENOMEM;
    zs->ids = v;
    size_t n = strlen(scheme) + 1 + strlen(id) + 1;
    char *e = malloc(n);
    if (e == NULL)
        return -ENOMEM;
    snprintf(e, n, "%s:%s", scheme, id);
    zs->ids[zs->n_ids++] = e;
    return 0;
}

static void base64(const uint8_t *p, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[k++] = t[(v >> 18) & 63];
        out[k++] = t[(v >> 12) & 63];
        out[k++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[k] = '\0';
}

/* auth_answer: ZooKeeper answers addAuth with zxid 0 (its ReplyHeader
 * for an auth packet carries no zxid), OK or AUTHFAILED, and leaves
 * cons' lcxid, lzxid and lresp as they were */
static void auth_answer(struct zsess *zs, struct zslot *sl, int32_t xid, int32_t err)
{
    struct zk_reply_header h = {xid, 0, err};
    slot_fill(sl, &h, NULL, NULL);
    slots_flush(zs);
}

/* addAuth: the digest scheme ("user:password" -> "user:base64(sha1(...))"),
 * as ZooKeeper's DigestAuthenticationProvider; anything else fails the
 * authentication and closes the connection, as ZooKeeper does */
static void add_auth(struct zsess *zs, struct zslot *sl, const struct zk_request *req)
{
    const struct zk_auth_packet *ap = &req->u.auth;
    char cred[1024];
    if (ap->scheme.len == 2 && memcmp(ap->scheme.p, "ip", 2) == 0) {
        /* ZooKeeper's ip provider takes any credentials and gives the
         * connection its peer's address, which it has had from the start */
        auth_answer(zs, sl, req->h.xid, 0);
        return;
    }
    if (ap->scheme.len == 6 && memcmp(ap->scheme.p, "digest", 6) == 0 && ap->auth.len >= 0 &&
        (size_t)ap->auth.len < sizeof(cred) &&
        (ap->auth.len == 0 || memchr(ap->auth.p, 0, (size_t)ap->auth.len) == NULL)) {
        if (ap->auth.len > 0)
            memcpy(cred, ap->auth.p, (size_t)ap->auth.len);
        cred[ap->auth.len] = '\0';
        /* ZooKeeper's generateDigest: the user is what comes before the
         * first ':' (all of it when there is none), the hash is of it all */
        char *colon = strchr(cred, ':');
        size_t ul = colon != NULL ? (size_t)(colon - cred) : strlen(cred);
        uint8_t d[20];
        sha1(cred, strlen(cred), d);
        char b64[32], id[1100];
        base64(d, sizeof(d), b64);
        snprintf(id, sizeof(id), "%.*s:%s", (int)ul, cred, b64);
        if (add_id(zs, "digest", id) == 0) {
            auth_answer(zs, sl, req->h.xid, 0);
            return;
        }
    }
    auth_answer(zs, sl, req->h.xid, ZK_AUTHFAILED);
    sl->close_after = true; /* written already: close now */
    zk_conn_close(zs->c);
}

/* read_now answers a read from the store. The reply (ReplyHeader's xid
 * and zxid, then zk_read's err and record) is built in the service's
 * scratch buffer; when no earlier reply of the connection waits (the
 * usual case: a read behind a write in flight is deferred, see
 * on_packet) it goes to the connection at once, with no reply slot. */
static void read_now(struct zsess *zs, const struct zk_request *req)
{
    struct zsvc *z = zs->svc;
    int32_t type = req->h.type;
    struct buf *out = &z->scratch;
    buf_reset(out);
    struct jute_out o = {out, 0};
    int64_t zxid = zxid_now(z);
    jute_put_int(&o, req->h.xid);
    jute_put_long(&o, zxid);
    struct zk_ids who = session_ids(zs);
    int rv = o.err;
    if (rv == 0)
        rv = zk_read(z->s->kv, z->s->leases, req, zs->id, &who, &z->s->arena, out);
    int32_t err = ZK_SYSTEMERROR;
    if (rv == 0 && out->len >= 16)
        err = (int32_t)((uint32_t)out->data[12] << 24 | (uint32_t)out->data[13] << 16 |
                        (uint32_t)out->data[14] << 8 | out->data[15]);
    else
        out->len = 0;
    /* the watch flag: exists arms a watch whether the node exists or
     * not, getData and getChildren only when they succeed */
    if ((type == ZK_OP_EXISTS || type == ZK_OP_GET_DATA || type == ZK_OP_GET_CHILDREN ||
         type == ZK_OP_GET_CHILDREN2) &&
        req->u.pw.watch && req->u.pw.path.len > 0 &&
        (err == 0 || (type == ZK_OP_EXISTS && err == ZK_NONODE)))
        watch_add(zs, req->u.pw.path.p, (size_t)req->u.pw.path.len,
                  type == ZK_OP_GET_CHILDREN || type == ZK_OP_GET_CHILDREN2 ? W_CHILD : W_DATA,
                  WM_STANDARD);
    if (out->len == 0) {
        struct zslot *sl = slot_new(zs);
        if (sl == NULL)
            zk_conn_close(zs->c);
        else
            slot_answer(zs, sl, req->h.xid, ZK_SYSTEMERROR, NULL, NULL);
        return;
    }
    struct zk_reply_header h = {req->h.xid, zxid, err};
    answered(zs, &h);
    if (zs->head == NULL) {
        if (zk_conn_send(zs->c, out->data, out->len) == 0) {
            z->packets_out++;
            replied(zs, zs->pkt_ms);
        }
        /* deferred reads counted as outstanding until now (run_deferred):
         * reading resumes here as slots_flush would */
        if (zs->outstanding <= ZK_MAX_OUTSTANDING / 2)
            zk_conn_pause(zs->c, false);
        return;
    }
    struct zslot *sl = slot_new(zs);
    if (sl == NULL || buf_append(&sl->out, out->data, out->len) != 0) {
        zk_conn_close(zs->c);
        return;
    }
    sl->ready = true;
    slots_flush(zs);
}

/* null_path_refused: |req| holds a null path where ZooKeeper 3.8 looks
 * one up and fails (MARSHALLINGERROR): the reads of one node, creates,
 * delete, checkWatches, and any operation of a multi or multiRead. Its
 * setData and setACL find it invalid (BADARGUMENTS), getEphemerals,
 * sync and addWatch take it, removeWatches finds no watch there: those
 * are left to their handling. */
static bool null_path_refused(const struct zk_request *req)
{
    switch (req->h.type) {
    case ZK_OP_EXISTS:
    case ZK_OP_GET_DATA:
    case ZK_OP_GET_CHILDREN:
    case ZK_OP_GET_CHILDREN2:
    case ZK_OP_GET_ACL:
    case ZK_OP_GET_ALL_CHILDREN_NUMBER:
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
    case ZK_OP_DELETE:
    case ZK_OP_CHECK_WATCHES:
        /* the first field of each of those requests */
        return ((const struct jute_bytes *)&req->u)->len < 0;
    case ZK_OP_MULTI:
    case ZK_OP_MULTI_READ:
        for (size_t i = 0; i < req->n_multi; i++)
            if (((const struct jute_bytes *)&req->multi[i].u)->len < 0)
                return true;
        return false;
    default:
        return false;
    }
}

/* handle serves one request now (its turn has come) */
static void handle(struct zsess *zs, const uint8_t *pkt, size_t len)
{
    struct zsvc *z = zs->svc;
    zk_conn *c = zs->c;
    struct arena *a = &z->s->arena;
    arena_reset(a);
    struct zk_request req;
    int rv = zk_request_decode(pkt, len, a, &req);
    /* a SASL token ZooKeeper cannot read (none, or null) ends its
     * connection there too */
    if ((rv != 0 && len < 8) ||
        (len >= 8 && req.h.type == ZK_OP_SASL && (rv != 0 || req.u.sasl.token.len < 0))) {
        log_warn("zk", "closing %s (session 0x%llx): %s", zk_conn_peer(c),
                 (unsigned long long)zs->id,
                 len < 8 ? "a request without its header" : "a SASL request without a token");
        zk_conn_close(c);
        return;
    }
    int32_t type = req.h.type;
    /* ZooKeeper 3.8's answers to what its clients never send: a body it
     * cannot read (cut short, a multi holding an op it may not, a null
     * path where one is looked up) is MARSHALLINGERROR, the connection
     * kept; a type it does not know is UNIMPLEMENTED, and the connection
     * closed; a client's deleteContainer is BADARGUMENTS */
    int32_t refused = 0;
    bool close_after = false, empty_multi = false;
    if (type == ZK_OP_DELETE_CONTAINER) {
        refused = ZK_BADARGUMENTS;
    } else if (rv == -ENOTSUP && type != ZK_OP_CREATE_SESSION) {
        refused = ZK_UNIMPLEMENTED;
        close_after = true;
    } else if (rv != 0) {
        refused = ZK_MARSHALLINGERROR;
    } else if (null_path_refused(&req)) {
        refused = ZK_MARSHALLINGERROR;
        /* ZooKeeper meets this one while answering: a multi's answer
         * still carries its (empty) MultiResponse */
        empty_multi = type == ZK_OP_MULTI || type == ZK_OP_MULTI_READ;
    }
    if (rv == 0 && refused == 0 && zk_is_read(type)) {
        zs->last_op = type;
        read_now(zs, &req);
        return;
    }
    struct zslot *sl = slot_new(zs);
    if (sl == NULL) {
        zk_conn_close(c);
        return;
    }
    if (refused != 0) {
        if (close_after) {
            log_warn("zk", "closing %s (session 0x%llx): request type %d unknown", zk_conn_peer(c),
                     (unsigned long long)zs->id, (int)type);
            zs->closing = true; /* nothing more is read */
            sl->close_after = true;
        }
        /* an empty MultiResponse is its closing header alone */
        struct zk_reply_header h = {req.h.xid, zxid_now(z), refused};
        struct zk_multi_header done = {-1, true, -1};
        slot_reply(zs, sl, &h, empty_multi ? &zk_rec_multi_header : NULL, &done);
        return;
    }
    zs->last_op = type;
    if (is_write(type)) {
        propose_write(zs, sl, req.h.xid, pkt, len);
        return;
    }
    switch (type) {
    case ZK_OP_PING:
        slot_answer(zs, sl, req.h.xid, 0, NULL, NULL);
        return;
    case ZK_OP_AUTH:
        add_auth(zs, sl, &req);
        return;
    case ZK_OP_WHO_AM_I:
        who_am_i(zs, sl, req.h.xid);
        return;
    case ZK_OP_SET_WATCHES:
    case ZK_OP_SET_WATCHES2:
        set_watches(zs, &req.u.sw);
        slot_answer(zs, sl, req.h.xid, 0, NULL, NULL);
        return;
    case ZK_OP_ADD_WATCH: {
        const struct zk_path_int *r = &req.u.pi;
        if (r->n != ZK_ADD_WATCH_PERSISTENT && r->n != ZK_ADD_WATCH_PERSISTENT_RECURSIVE) {
            slot_answer(zs, sl, req.h.xid, ZK_MARSHALLINGERROR, NULL, NULL); /* as ZooKeeper */
            return;
        }
        /* ZooKeeper's server takes any path here, even a null one (a
         * watch on a path no change names never fires) */
        if (r->path.len >= 0)
            watch_add(zs, r->path.p, (size_t)r->path.len, W_DATA | W_CHILD,
                      r->n == ZK_ADD_WATCH_PERSISTENT ? WM_PERSISTENT : WM_RECURSIVE);
        struct zk_int ok = {0};
        slot_answer(zs, sl, req.h.xid, 0, &zk_rec_error_resp, &ok);
        return;
    }
    case ZK_OP_REMOVE_WATCHES:
    case ZK_OP_CHECK_WATCHES: {
        const struct zk_path_int *r = &req.u.pi;
        if (r->n < ZK_WATCHER_CHILDREN || r->n > ZK_WATCHER_ANY) {
            /* ZooKeeper's WatcherType.fromInt refuses it; nothing removed */
            slot_answer(zs, sl, req.h.xid, ZK_MARSHALLINGERROR, NULL, NULL);
            return;
        }
        /* the tables ZooKeeper's ZKDatabase.removeWatch and
         * containsWatcher look in, whatever the mode there */
        unsigned kinds = r->n == ZK_WATCHER_CHILDREN ? W_CHILD
                         : r->n == ZK_WATCHER_DATA   ? W_DATA
                                                     : W_DATA | W_CHILD;
        if (r->path.len < 0) {
            /* a null path names no watch (ZooKeeper: NOWATCHER); never
             * watch_remove's NULL, every path */
            slot_answer(zs, sl, req.h.xid, ZK_NOWATCHER, NULL, NULL);
            return;
        }
        size_t n = (size_t)r->path.len;
        size_t k = 0;
        if (type == ZK_OP_REMOVE_WATCHES)
            k = watch_remove(z, zs, r->path.p, n, kinds);
        else
            k = watch_count(z, zs, r->path.p, n, kinds);
        slot_answer(zs, sl, req.h.xid, k > 0 ? 0 : ZK_NOWATCHER, NULL, NULL);
        return;
    }
    case ZK_OP_CLOSE_SESSION: {
        zs->closing = true;
        Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
        r.id = zs->id;
        log_info("zk", "closing session 0x%llx of %s", (unsigned long long)zs->id,
                 zk_conn_peer(c));
        if (zcall_start(zs, z->m_revoke, &r.base, NULL, revoke_end, sl, req.h.xid) == NULL)
            zk_conn_close(c);
        return;
    }
    case ZK_OP_RECONFIG:
        slot_answer(zs, sl, req.h.xid, ZK_RECONFIGDISABLED, NULL, NULL);
        return;
    case ZK_OP_SASL: {
        /* ZooKeeper without a SASL server answers a token OK, zxid 0,
         * with a null token back (Kafka and HBase clients with a JAAS
         * Client section then go on without SASL) */
        struct zk_reply_header h = {req.h.xid, 0, 0};
        struct zk_sasl_req none = {{NULL, -1}}; /* SetSASLResponse: the same record */
        slot_reply(zs, sl, &h, &zk_rec_sasl_req, &none);
        return;
    }
    default:
        slot_answer(zs, sl, req.h.xid, ZK_UNIMPLEMENTED, NULL, NULL);
        return;
    }
}

static int defer(struct zsess *zs, const uint8_t *pkt, size_t len)
{
    struct zearly *e = malloc(sizeof(*e) + len);
    if (e == NULL)
        return -ENOMEM;
    e->next = NULL;
    e->t0 = uv_now(zs->svc->s->loop);
    e->len = len;
    memcpy(e->data, pkt, len);
    if (zs->deferred_tail != NULL)
        zs->deferred_tail->next = e;
    else
        zs->deferred = e;
    zs->deferred_tail = e;
    return 0;
}

static int32_t type_of(const uint8_t *pkt, size_t len)
{
    if (len < 8)
        return 0;
    return (int32_t)((uint32_t)pkt[4] << 24 | (uint32_t)pkt[5] << 16 | (uint32_t)pkt[6] << 8 |
                     pkt[7]);
}

/* run_deferred serves what waited, in order, until a read must wait for
 * a write again */
static void run_deferred(struct zsess *zs)
{
    while (zs->deferred != NULL && !zs->closing) {
        struct zearly *e = zs->deferred;
        int32_t t = type_of(e->data, e->len);
        if (zs->pending_writes > 0 && !is_write(t))
            return;
        zs->deferred = e->next;
        if (zs->deferred == NULL)
            zs->deferred_tail = NULL;
        zs->outstanding--; /* its slot counts from now on */
        zs->pkt_ms = e->t0;
        handle(zs, e->data, e->len);
        free(e);
    }
}

static void on_packet(zk_conn *c, const uint8_t *pkt, size_t len)
{
    struct zsess *zs = zk_conn_get_data(c);
    if (zs == NULL || zs->closing)
        return;
    struct zsvc *z = zs->svc;
    if (!zs->established) {
        struct zearly *e = malloc(sizeof(*e) + len);
        if (e == NULL) {
            zk_conn_close(c);
            return;
        }
        e->next = NULL;
        e->len = len;
        memcpy(e->data, pkt, len);
        if (zs->early_tail != NULL)
            zs->early_tail->next = e;
        else
            zs->early = e;
        zs->early_tail = e;
        return;
    }
    z->packets_in++;
    renew(zs, false);
    int32_t t = type_of(pkt, len);
    /* FIFO: behind anything waiting, and a read behind a write in flight
     * (pings too: their answers keep their place) */
    if (zs->deferred != NULL || (zs->pending_writes > 0 && !is_write(t))) {
        if (defer(zs, pkt, len) != 0) {
            zk_conn_close(c);
            return;
        }
        zs->outstanding++; /* until it is handled (then its slot counts) */
    } else {
        zs->pkt_ms = uv_now(z->s->loop);
        handle(zs, pkt, len);
    }
    if (zs->outstanding >= ZK_MAX_OUTSTANDING) {
        log_debug("zk", "session 0x%llx: %zu requests outstanding, not reading %s for now",
                  (unsigned long long)zs->id, zs->outstanding, zk_conn_peer(c));
        zk_conn_pause(c, true);
    }
}

static void on_close(zk_conn *c)
{
    struct zsess *zs = zk_conn_get_data(c);
    zk_conn_set_data(c, NULL);
    if (zs == NULL)
        return;
    struct zsvc *z = zs->svc;
    watch_remove(z, zs, NULL, 0, W_DATA | W_CHILD);
    for (struct zcall *zc = z->live; zc != NULL; zc = zc->next)
        if (zc->zs == zs) {
            zc->zs = NULL;
            zc->slot = NULL;
        }
    /* the session stays (its lease) until it expires or the client comes
     * back: the keep-alive stream ends with the connection */
    if (zs->ka != NULL && !zs->ka->ended)
        qcall_finish(zs->ka->call, GRPC_STATUS_CANCELLED, NULL);
    while (zs->head != NULL) {
        struct zslot *sl = zs->head;
        zs->head = sl->next;
        buf_free(&sl->out);
        free(sl);
    }
    while (zs->early != NULL) {
        struct zearly *e = zs->early;
        zs->early = e->next;
        free(e);
    }
    while (zs->deferred != NULL) {
        struct zearly *e = zs->deferred;
        zs->deferred = e->next;
        free(e);
    }
    for (size_t i = 0; i < zs->n_ids; i++)
        free(zs->ids[i]);
    free(zs->ids);
    free(zs);
}

/* ---- four-letter words ---- */

static void appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(struct buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        buf_append(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* the short names cons shows for a connection's last operation
 * (ZooKeeper's ServerCnxn lastOp) */
static const char *op_short(int32_t op)
{
    switch (op) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
        return "CREA";
    case ZK_OP_DELETE:
        return "DELE";
    case ZK_OP_EXISTS:
        return "EXIS";
    case ZK_OP_GET_DATA:
        return "GETD";
    case ZK_OP_SET_DATA:
        return "SETD";
    case ZK_OP_GET_ACL:
        return "GETA";
    case ZK_OP_SET_ACL:
        return "SETA";
    case ZK_OP_GET_CHILDREN:
    case ZK_OP_GET_CHILDREN2:
        return "GETC";
    case ZK_OP_SYNC:
        return "SYNC";
    case ZK_OP_PING:
        return "PING";
    case ZK_OP_CHECK:
        return "CHEC";
    case ZK_OP_MULTI:
        return "MULT";
    case ZK_OP_MULTI_READ:
        return "MLTR";
    case ZK_OP_SET_WATCHES:
        return "SETW";
    case ZK_OP_CLOSE_SESSION:
        return "CLOS";
    default:
        return "NA";
    }
}

struct conn_walk {
    struct buf *out;
    bool brief;         /* stat's lines, not cons' */
    size_t outstanding; /* mntr's zk_outstanding_requests */
};

/* avg_text writes ZooKeeper's average latency: rounded to 4 decimals and
 * printed as Java prints a double (0.0, 1.5, 0.5254) */
static const char *avg_text(const struct zlat *l, char b[32])
{
    double avg = l->count > 0 ? (double)l->total / (double)l->count : 0.0;
    snprintf(b, 32, "%.4f", avg);
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == '0' && b[n - 2] != '.')
        b[--n] = '\0';
    return b;
}

/* one connection as ZooKeeper's ServerCnxn.dumpConnectionInfo writes it:
 * " /ip:port[interest](queued=,recved=,sent=" and, for cons, the
 * session's figures (avglat as ZooKeeper's: whole ms) */
static void conn_line(zk_conn *c, void *arg)
{
    struct conn_walk *cw = arg;
    struct zsess *zs = zk_conn_get_data(c);
    const struct zk_conn_stats *st = zk_conn_stats(c);
    bool reading = zs != NULL && zs->established && !zs->closing;
    size_t queued = zs != NULL ? zs->outstanding : 0;
    if (cw->out == NULL) {
        cw->outstanding += queued;
        return;
    }
    appendf(cw->out, " /%s[%d](queued=%zu,recved=%llu,sent=%llu", zk_conn_peer(c), reading ? 1 : 0,
            queued, (unsigned long long)st->packets_in, (unsigned long long)st->packets_out);
    if (!cw->brief && zs != NULL && zs->established && zs->id != 0) {
        appendf(cw->out, ",sid=0x%llx,lop=%s,est=%lld,to=%d", (unsigned long long)zs->id,
                op_short(zs->last_op), (long long)zs->est_ms, zs->timeout_ms);
        if (zs->last_cxid >= 0)
            appendf(cw->out, ",lcxid=0x%llx", (unsigned long long)zs->last_cxid);
        appendf(cw->out, ",lzxid=0x%llx,lresp=%lld,llat=%llu,minlat=%llu,avglat=%llu,maxlat=%llu",
                (unsigned long long)zs->last_zxid, (long long)zs->last_resp_ms,
                (unsigned long long)zs->lat.last, (unsigned long long)zs->lat.min,
                (unsigned long long)(zs->lat.count > 0 ? zs->lat.total / zs->lat.count : 0),
                (unsigned long long)zs->lat.max);
    }
    appendf(cw->out, ")\n");
}

static const char *zk_mode(struct server *s)
{
    return s->raft == NULL || s->n_peers == 0 ? "standalone"
           : server_is_leader(s)              ? "leader"
                                              : "follower";
}

static size_t outstanding(struct zsvc *z)
{
    struct conn_walk cw = {NULL, true, 0};
    zk_conn_foreach(z->l, conn_line, &cw);
    return cw.outstanding;
}

/* ZooKeeper's version line; monitoring tools read 3.8 from it */
#define ZK_VERSION_TEXT "3.8.0-quorum-" QUORUM_VERSION ", built on quorum"

/* the tree's figures: kept ones once counted, else read now (a failed
 * read shows -1 and is logged) */
static void tree_stats(struct zsvc *z, struct zk_tree_stats *ts)
{
    if (zk_figures_stats(&z->fig, z->s->leases, ts))
        return;
    int rv = zk_tree_stats(z->s->kv, z->s->leases, ZK_STATS_BUDGET, ts);
    if (rv != 0) {
        log_warn("zk", "reading the tree's figures: %s", q_strerror(rv));
        *ts = (struct zk_tree_stats){-1, -1, -1, -1};
    }
}

/* srvr and stat's common part: ZooKeeper's ServerStats and the node
 * count */
static void server_stats(struct zsvc *z, struct buf *out)
{
    char avg[32];
    struct zk_tree_stats ts;
    tree_stats(z, &ts);
    appendf(out, "Latency min/avg/max: %llu/%s/%llu\n", (unsigned long long)z->lat.min,
            avg_text(&z->lat, avg), (unsigned long long)z->lat.max);
    appendf(out, "Received: %llu\n", (unsigned long long)z->packets_in);
    appendf(out, "Sent: %llu\n", (unsigned long long)z->packets_out);
    appendf(out, "Connections: %zu\n", zk_listener_conns(z->l));
    appendf(out, "Outstanding: %zu\n", outstanding(z));
    appendf(out, "Zxid: 0x%llx\n", (unsigned long long)zxid_now(z));
    appendf(out, "Mode: %s\n", zk_mode(z->s));
    appendf(out, "Node count: %lld\n", (long long)ts.znodes);
    if (server_is_leader(z->s) && z->s->n_peers > 0)
        appendf(out, "Proposal sizes last/min/max: -1/-1/-1\n");
}

static size_t open_fds(void)
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n > 3 ? n - 3 : 0; /* ".", ".." and the directory's own fd */
}

static void mntr(struct zsvc *z, struct buf *out)
{
    struct server *s = z->s;
    struct rlimit rl = {0};
    getrlimit(RLIMIT_NOFILE, &rl);
    char avg[32];
    struct zk_tree_stats ts;
    tree_stats(z, &ts);
    appendf(out, "zk_version\t%s\n", ZK_VERSION_TEXT);
    appendf(out, "zk_server_state\t%s\n", zk_mode(s));
    appendf(out, "zk_ephemerals_count\t%lld\n", (long long)ts.ephemerals);
    appendf(out, "zk_num_alive_connections\t%zu\n", zk_listener_conns(z->l));
    appendf(out, "zk_avg_latency\t%s\n", avg_text(&z->lat, avg));
    appendf(out, "zk_outstanding_requests\t%zu\n", outstanding(z));
    appendf(out, "zk_znode_count\t%lld\n", (long long)ts.znodes);
    appendf(out, "zk_global_sessions\t%lld\n", (long long)ts.sessions);
    appendf(out, "zk_non_mtls_remote_conn_count\t0\n");
    appendf(out, "zk_last_client_response_size\t-1\n");
    appendf(out, "zk_packets_sent\t%llu\n", (unsigned long long)z->packets_out);
    appendf(out, "zk_packets_received\t%llu\n", (unsigned long long)z->packets_in);
    appendf(out, "zk_max_client_response_size\t-1\n");
    appendf(out, "zk_connection_drop_probability\t0.0\n");
    /* ZooKeeper's data and child watch tables together: a persistent or
     * recursive watch is in both */
    appendf(out, "zk_watch_count\t%zu\n", z->n_halves[WT_DATA] + z->n_halves[WT_CHILD]);
    appendf(out, "zk_auth_failed_count\t0\n");
    appendf(out, "zk_min_latency\t%llu\n", (unsigned long long)z->lat.min);
    appendf(out, "zk_max_file_descriptor_count\t%llu\n", (unsigned long long)rl.rlim_cur);
    appendf(out, "zk_approximate_data_size\t%lld\n", (long long)ts.data_size);
    appendf(out, "zk_open_file_descriptor_count\t%zu\n", open_fds());
    appendf(out, "zk_local_sessions\t0\n");
    appendf(out, "zk_uptime\t%llu\n", (unsigned long long)(uv_now(s->loop) - z->started_ms));
    appendf(out, "zk_max_latency\t%llu\n", (unsigned long long)z->lat.max);
    appendf(out, "zk_outstanding_tls_handshake\t0\n");
    appendf(out, "zk_min_client_response_size\t-1\n");
    appendf(out, "zk_non_mtls_local_conn_count\t0\n");
    appendf(out, "zk_proposal_count\t0\n");
    appendf(out, "zk_watch_bytes\t0\n");
    if (server_is_leader(s) && s->n_peers > 0) {
        size_t synced = 0;
        for (size_t i = 0; i < s->n_peers; i++)
            synced += raft_get_match(s->raft, s->peers[i].id) > 0;
        appendf(out, "zk_learners\t%zu\n", s->n_peers);
        appendf(out, "zk_synced_followers\t%zu\n", synced);
        appendf(out, "zk_synced_non_voting_followers\t0\n");
        appendf(out, "zk_synced_observers\t0\n");
        appendf(out, "zk_pending_syncs\t0\n");
        appendf(out, "zk_leader_uptime\t%llu\n",
                (unsigned long long)(uv_now(s->loop) - z->started_ms));
        appendf(out, "zk_last_proposal_size\t-1\n");
        appendf(out, "zk_max_proposal_size\t-1\n");
        appendf(out, "zk_min_proposal_size\t-1\n");
    }
}

static uint64_t wal_bytes(struct server *s);

/* conf: ZooKeeper's standalone lines, from quorum's configuration */
static void conf(struct zsvc *z, struct buf *out)
{
    struct server *s = z->s;
    char wal[1100];
    server_wal_dir(&s->cfg, wal, sizeof(wal));
    appendf(out, "clientPort=%d\n", s->cfg.n_listen_zk > 0 ? s->cfg.listen_zk[0].port : 0);
    appendf(out, "secureClientPort=-1\n");
    appendf(out, "dataDir=%s\n", s->cfg.data_dir);
    appendf(out, "dataDirSize=%llu\n", (unsigned long long)s->db_size);
    appendf(out, "dataLogDir=%s\n", wal);
    appendf(out, "dataLogSize=%llu\n", (unsigned long long)wal_bytes(s));
    appendf(out, "tickTime=%d\n", ZK_TICK_MS);
    appendf(out, "maxClientCnxns=0\n");
    appendf(out, "minSessionTimeout=%d\n", 2 * ZK_TICK_MS);
    appendf(out, "maxSessionTimeout=%d\n", 20 * ZK_TICK_MS);
    appendf(out, "clientPortListenBacklog=-1\n");
    appendf(out, "serverId=%llu\n", (unsigned long long)s->member_id);
}

static void envi(struct buf *out)
{
    struct utsname u;
    char host[256] = "", cwd[1024] = "";
    gethostname(host, sizeof(host) - 1);
    if (getcwd(cwd, sizeof(cwd)) == NULL)
        cwd[0] = '\0';
    /* user.name and user.home as Java sets them: from the password
     * entry of the process's user, not the environment */
    struct passwd pw, *pwp = NULL;
    char pwbuf[1024];
    getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &pwp);
    const char *user = pwp != NULL ? pwp->pw_name : getenv("USER");
    const char *home = pwp != NULL ? pwp->pw_dir : getenv("HOME");
    const char *tmp = getenv("TMPDIR");
    appendf(out, "Environment:\n");
    appendf(out, "zookeeper.version=%s\n", ZK_VERSION_TEXT);
    appendf(out, "host.name=%s\n", host);
    appendf(out, "java.io.tmpdir=%s\n", tmp != NULL ? tmp : "/tmp");
    if (uname(&u) == 0) {
        appendf(out, "os.name=%s\n", u.sysname);
        /* Java's name for the machine: amd64 for x86_64 */
        appendf(out, "os.arch=%s\n", strcmp(u.machine, "x86_64") == 0 ? "amd64" : u.machine);
        appendf(out, "os.version=%s\n", u.release);
    }
    appendf(out, "user.name=%s\n", user != NULL ? user : "");
    appendf(out, "user.home=%s\n", home != NULL ? home : "");
    appendf(out, "user.dir=%s\n", cwd);
}

/* crst: a connection's packet counts and latencies start again */
static void conn_reset(zk_conn *c, void *arg)
{
    (void)arg;
    zk_conn_stats_reset(c);
    struct zsess *zs = zk_conn_get_data(c);
    if (zs != NULL) {
        /* as ServerCnxn.resetStats */
        zs->lat = (struct zlat){0};
        zs->last_op = 0; /* "NA" */
        zs->last_cxid = -1;
        zs->last_zxid = -1;
        zs->last_resp_ms = 0;
    }
}

/* ---- dirs, wchc, wchp, dump ---- */

/* dir_bytes: the sizes of the regular files in |dir| (not below it) */
static uint64_t dir_bytes(const char *dir)
{
    uint64_t n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            n += (uint64_t)st.st_size;
    }
    closedir(d);
    return n;
}

static uint64_t wal_bytes(struct server *s)
{
    char wal[1100];
    server_wal_dir(&s->cfg, wal, sizeof(wal));
    return dir_bytes(wal);
}

/* a data-side watch of a session: wchc and wchp list these, as
 * ZooKeeper's data watch table (wchs counts the same) */
struct wpair {
    int64_t sid;
    const uint8_t *p;
    size_t n;
};

static int wpair_by_session(const void *a, const void *b)
{
    const struct wpair *x = a, *y = b;
    if (x->sid != y->sid)
        return x->sid < y->sid ? -1 : 1;
    return bytes_compare(x->p, x->n, y->p, y->n);
}

static int wpair_by_path(const void *a, const void *b)
{
    const struct wpair *x = a, *y = b;
    int c = bytes_compare(x->p, x->n, y->p, y->n);
    return c != 0 ? c : x->sid < y->sid ? -1 : x->sid > y->sid;
}

/* data_watches: every data-side watch, sorted by |cmp|, each (session,
 * path) once (a data and an exist watch on one path are one line in
 * ZooKeeper's table); NULL with *n 0 when there are none or no memory */
static struct wpair *data_watches(struct zsvc *z, int (*cmp)(const void *, const void *),
                                  size_t *n)
{
    *n = 0;
    size_t cap = z->wchs_total;
    struct wpair *v = cap > 0 ? malloc(sizeof(*v) * cap) : NULL;
    if (v == NULL)
        return NULL;
    for (size_t b = 0; b < z->cap; b++) {
        for (struct zwatch *w = z->tab[b]; w != NULL; w = w->next)
            if (w->mode[WT_DATA] != WM_NONE && *n < cap)
                v[(*n)++] = (struct wpair){w->zs->id, w->path, w->n};
    }
    qsort(v, *n, sizeof(*v), cmp);
    size_t k = 0;
    for (size_t i = 0; i < *n; i++)
        if (k == 0 || v[k - 1].sid != v[i].sid || v[k - 1].n != v[i].n ||
            memcmp(v[k - 1].p, v[i].p, v[i].n) != 0)
            v[k++] = v[i];
    *n = k;
    return v;
}

/* wchc (by session) and wchp (by path), as WatchManager.dumpWatches */
static void watch_dump(struct zsvc *z, struct buf *out, bool by_path)
{
    size_t n;
    struct wpair *v = data_watches(z, by_path ? wpair_by_path : wpair_by_session, &n);
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || (by_path ? v[i - 1].n != v[i].n ||
                                              memcmp(v[i - 1].p, v[i].p, v[i].n) != 0
                                        : v[i - 1].sid != v[i].sid);
        if (by_path) {
            if (first)
                appendf(out, "%.*s\n", (int)v[i].n, (const char *)v[i].p);
            appendf(out, "\t0x%llx\n", (unsigned long long)v[i].sid);
        } else {
            if (first)
                appendf(out, "0x%llx\n", (unsigned long long)v[i].sid);
            appendf(out, "\t%.*s\n", (int)v[i].n, (const char *)v[i].p);
        }
    }
    free(v);
    appendf(out, "\n");
}

/* ZooKeeper's expiry buckets: the next multiple of tickTime after |ms| */
static int64_t expiry_bucket(int64_t ms)
{
    return (ms / ZK_TICK_MS + 1) * ZK_TICK_MS;
}

/* Java's Date.toString: "Sun Nov 29 01:34:22 UTC 2026" */
static void java_date(int64_t ms, char *b, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    if (strftime(b, cap, "%a %b %d %H:%M:%S %Z %Y", &tm) == 0)
        snprintf(b, cap, "%lld", (long long)ms);
}

struct dump_item {
    int64_t at; /* expiry bucket (sessions, connections) */
    int64_t sid;
    const char *peer; /* connections */
};

static int dump_item_cmp(const void *a, const void *b)
{
    const struct dump_item *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x->sid < y->sid ? -1 : x->sid > y->sid;
}

/* dump_sets prints items sorted by bucket as SessionTrackerImpl and the
 * connection expiry queue do: "Sets (buckets)/(items):", then each
 * bucket's items */
static void dump_sets(struct buf *out, const char *title, struct dump_item *v, size_t n)
{
    if (n > 0)
        qsort(v, n, sizeof(*v), dump_item_cmp);
    size_t buckets = 0;
    for (size_t i = 0; i < n; i++)
        buckets += i == 0 || v[i].at != v[i - 1].at;
    appendf(out, "%s Sets (%zu)/(%zu):\n", title, buckets, n);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].at == v[i].at)
            j++;
        char date[64];
        java_date(v[i].at, date, sizeof(date));
        appendf(out, "%zu expire at %s:\n", j - i, date);
        for (; i < j; i++) {
            if (v[i].peer != NULL)
                appendf(out, "\tip: /%s sessionId: 0x%llx\n", v[i].peer,
                        (unsigned long long)v[i].sid);
            else
                appendf(out, "\t0x%llx\n", (unsigned long long)v[i].sid);
        }
    }
}

struct sess_keys {
    bool session;     /* the lease holds a session key: a ZooKeeper session */
    struct buf paths; /* its ephemerals' paths, NUL-separated */
    size_t n_paths;
};

static void sess_key(const uint8_t *key, size_t len, void *arg)
{
    struct sess_keys *k = arg;
    if (len < 4 || key[0] != 0 || key[1] != 'z' || key[2] != 'k')
        return;
    if (zk_is_session_key(key, len)) {
        k->session = true;
    } else if (key[3] == 'D' && len > 6) {
        if (buf_append(&k->paths, key + 6, len - 6) == 0 && buf_append(&k->paths, "", 1) == 0)
            k->n_paths++;
    }
}

static int i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cstr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

struct conn_items {
    struct zsvc *z;
    struct dump_item *v;
    size_t n, cap;
    int64_t now;
};

static void conn_item(zk_conn *c, void *arg)
{
    struct conn_items *ci = arg;
    if (ci->n == ci->cap)
        return;
    struct zsess *zs = zk_conn_get_data(c);
    int64_t sid = zs != NULL && zs->established ? zs->id : 0;
    int64_t to = zs != NULL && zs->timeout_ms > 0 ? zs->timeout_ms : 2 * ZK_TICK_MS;
    ci->v[ci->n++] = (struct dump_item){expiry_bucket(ci->now + to), sid, zk_conn_peer(c)};
}

/* dump: ZooKeeper's SessionTracker dump (every session of the cluster,
 * by the expiry its lease has on this member), the ephemerals of each
 * session, and this member's connections */
static void dump(struct zsvc *z, struct buf *out)
{
    struct server *s = z->s;
    int64_t now = wall_ms(), mono = (int64_t)uv_now(s->loop);
    size_t n = lessor_ids(s->leases, NULL, 0);
    int64_t *ids = n > 0 ? malloc(sizeof(*ids) * n) : NULL;
    struct dump_item *sess = n > 0 ? malloc(sizeof(*sess) * n) : NULL;
    struct sess_keys *keys = n > 0 ? calloc(n, sizeof(*keys)) : NULL;
    size_t conns = zk_listener_conns(z->l);
    struct conn_items ci = {z, conns > 0 ? malloc(sizeof(*ci.v) * conns) : NULL, 0, conns, now};
    if (n > 0 && (ids == NULL || sess == NULL || keys == NULL))
        n = 0; /* no memory: the sessions are left out */
    if (ci.v == NULL)
        ci.cap = 0;
    if (n > 0) {
        lessor_ids(s->leases, ids, n);
        qsort(ids, n, sizeof(*ids), i64_cmp);
    }
    size_t ns = 0, with_eph = 0;
    for (size_t i = 0; i < n; i++) {
        lessor_keys(s->leases, ids[i], sess_key, &keys[i]);
        int64_t left = 0, granted = 0;
        if (!keys[i].session || lessor_remaining(s->leases, ids[i], mono, &left, &granted) != 0)
            continue;
        sess[ns++] = (struct dump_item){expiry_bucket(now + left * 1000), ids[i], NULL};
        with_eph += keys[i].n_paths > 0;
    }
    appendf(out, "SessionTracker dump:\n");
    dump_sets(out, "Session", sess, ns);
    appendf(out, "ephemeral nodes dump:\nSessions with Ephemerals (%zu):\n", with_eph);
    /* sessions by id, each with its ephemerals' paths sorted */
    for (size_t i = 0; i < n; i++) {
        if (!keys[i].session || keys[i].n_paths == 0)
            continue;
        const char **p = malloc(sizeof(*p) * keys[i].n_paths);
        if (p == NULL)
            continue;
        size_t m = 0;
        for (size_t off = 0; off < keys[i].paths.len && m < keys[i].n_paths; m++) {
            p[m] = (const char *)keys[i].paths.data + off;
            off += strlen(p[m]) + 1;
        }
        qsort(p, m, sizeof(*p), cstr_cmp);
        appendf(out, "0x%llx:\n", (unsigned long long)ids[i]);
        for (size_t j = 0; j < m; j++)
            appendf(out, "\t%s\n", p[j]);
        free(p);
    }
    zk_conn_foreach(z->l, conn_item, &ci);
    appendf(out, "Connections dump:\n");
    dump_sets(out, "Connections", ci.v, ci.n);
    for (size_t i = 0; i < n; i++)
        buf_free(&keys[i].paths);
    free(keys);
    free(sess);
    free(ids);
    free(ci.v);
}

static void on_4lw(zk_conn *c, const char *cmd, const uint8_t *arg, size_t n_arg,
                   struct buf *out)
{
    struct zsvc *z = zk_listener_arg(zk_conn_listener(c));
    struct server *s = z->s;
    if (!zk_4lw_allowed(s->cfg.zk_4lw_whitelist, cmd)) {
        appendf(out, "%s is not executed because it is not in the whitelist.\n", cmd);
        return;
    }
    if (strcmp(cmd, "ruok") == 0) {
        appendf(out, "imok");
    } else if (strcmp(cmd, "isro") == 0) {
        appendf(out, "rw"); /* no read-only mode: a member serves read-write or not at all */
    } else if (strcmp(cmd, "srvr") == 0 || strcmp(cmd, "stat") == 0) {
        appendf(out, "Zookeeper version: %s\n", ZK_VERSION_TEXT);
        if (strcmp(cmd, "stat") == 0) {
            appendf(out, "Clients:\n");
            struct conn_walk cw = {out, true, 0};
            zk_conn_foreach(z->l, conn_line, &cw);
            appendf(out, "\n");
        }
        server_stats(z, out);
    } else if (strcmp(cmd, "cons") == 0) {
        struct conn_walk cw = {out, false, 0};
        zk_conn_foreach(z->l, conn_line, &cw);
        appendf(out, "\n");
    } else if (strcmp(cmd, "mntr") == 0) {
        mntr(z, out);
    } else if (strcmp(cmd, "conf") == 0) {
        conf(z, out);
    } else if (strcmp(cmd, "wchs") == 0) {
        appendf(out, "%zu connections watching %zu paths\nTotal watches:%zu\n", z->wchs_conns,
                z->wchs_paths, z->wchs_total);
    } else if (strcmp(cmd, "envi") == 0) {
        envi(out);
    } else if (strcmp(cmd, "srst") == 0) {
        z->lat = (struct zlat){0};
        z->packets_in = z->packets_out = 0;
        appendf(out, "Server stats reset.\n");
    } else if (strcmp(cmd, "crst") == 0) {
        zk_conn_foreach(z->l, conn_reset, NULL);
        appendf(out, "Connection stats reset.\n");
    } else if (strcmp(cmd, "dirs") == 0) {
        appendf(out, "datadir_size: %llu\nlogdir_size: %llu\n", (unsigned long long)s->db_size,
                (unsigned long long)wal_bytes(s));
    } else if (strcmp(cmd, "wchc") == 0 || strcmp(cmd, "wchp") == 0) {
        watch_dump(z, out, strcmp(cmd, "wchp") == 0);
    } else if (strcmp(cmd, "dump") == 0) {
        dump(z, out);
    } else if (strcmp(cmd, "gtmk") == 0) {
        appendf(out, "%lld", (long long)z->trace_mask);
    } else if (strcmp(cmd, "stmk") == 0) {
        /* the mask is the 8 bytes after the word; without them ZooKeeper
         * closes the connection without an answer */
        if (n_arg >= 8) {
            uint64_t m = 0;
            for (int i = 0; i < 8; i++)
                m = m << 8 | arg[i];
            z->trace_mask = (int64_t)m;
            appendf(out, "%lld", (long long)z->trace_mask);
        }
    }
    /* hash: ZooKeeper 3.8 answers nothing unless digests are kept
     * (zookeeper.digest.enabled with a digest log); quorum keeps none */
}

/* on_served: reads the front loop answered itself (server/front.c): they
 * keep the session alive as any packet does, and count in the figures
 * (cons, mntr) as if answered here, at once */
static void on_served(zk_conn *c, const struct zk_served *sv)
{
    struct zsess *zs = zk_conn_get_data(c);
    if (zs == NULL || zs->closing || !zs->established || sv->packets == 0)
        return;
    struct zsvc *z = zs->svc;
    z->packets_in += sv->packets;
    z->packets_out += sv->packets;
    renew(zs, false);
    zs->last_op = sv->last_op;
    struct zk_reply_header h = {sv->last_xid, sv->last_zxid, 0};
    answered(zs, &h);
    lat_add_zeros(&zs->lat, sv->packets);
    lat_add_zeros(&z->lat, sv->packets);
}

static const struct zk_conn_handler handler = {on_connect, on_packet, on_4lw,
                                               on_close,   NULL,      on_served};

/* ---- the container sweep (ZooKeeper's ContainerManager) ---- */

/* sweep_due proposes a deleteContainer of |path| (session 0: the
 * sweep's own; the apply checks again that it is due and at |version|,
 * so a concurrent change wins); its answer is not waited for */
static void sweep_due(const uint8_t *path, size_t n, int32_t version, void *arg)
{
    struct zsvc *z = arg;
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    struct zk_request_header h = {0, ZK_OP_DELETE_CONTAINER};
    struct zk_path_version d = {{path, (int32_t)n}, version};
    jute_encode(&zk_rec_request_header, &o, &h);
    jute_encode(&zk_rec_delete_req, &o, &d);
    struct zcall *zc =
        o.err == 0 ? zcall_make(z, NULL, &zk_write_method, NULL, NULL, NULL, 0) : NULL;
    if (zc != NULL) {
        Quorumzk__Write w = QUORUMZK__WRITE__INIT;
        w.session = 0;
        w.now_ms = wall_ms();
        w.request.data = b.data;
        w.request.len = b.len;
        log_debug("zk", "container sweep: deleting %.*s", (int)n, (const char *)path);
        server_propose_copy(z->s, zc->call, ENTRY_ZK_WRITE, &w.base);
    }
    buf_free(&b);
}

static void on_sweep_step(uv_timer_t *t)
{
    struct zsvc *z = t->data;
    struct server *s = z->s;
    if (!server_is_leader(s) || !s->serving) {
        z->sweeping = false; /* a new leader sweeps from its own start */
        buf_reset(&z->sweep_cursor);
        return;
    }
    bool done = false;
    arena_reset(&s->arena);
    int rv = zk_sweep_step(s->kv, &s->arena, &z->sweep_cursor, ZK_SWEEP_STEP, wall_ms(), sweep_due,
                           z, &done);
    if (rv != 0) {
        log_warn("zk", "container sweep: %s", q_strerror(rv));
        done = true;
        buf_reset(&z->sweep_cursor);
    }
    if (done)
        z->sweeping = false;
    else
        uv_timer_start(&z->sweep_step, on_sweep_step, 0, 0); /* the next step, next pass */
}

/* one step of the figures' count, then the next on the next pass; not
 * while an apply is paused between the steps of a big revision (reads
 * see the store before it while the observer has seen part of it) */
static void on_fig_step(uv_timer_t *t)
{
    struct zsvc *z = t->data;
    struct server *s = z->s;
    if (s->apply_paused) {
        uv_timer_start(&z->fig_step, on_fig_step, 1, 0);
        return;
    }
    bool done = false;
    uint64_t t0 = uv_hrtime();
    int rv = zk_figures_step(&z->fig, s->kv, ZK_FIG_STEP, &done);
    z->fig_ns += uv_hrtime() - t0;
    if (rv != 0) {
        log_warn("zk", "counting the tree's figures: %s; counting again in 1 s", q_strerror(rv));
        uv_timer_start(&z->fig_step, on_fig_step, 1000, 0);
    } else if (!done) {
        uv_timer_start(&z->fig_step, on_fig_step, 0, 0);
    } else {
        log_info("zk", "counted the tree's figures: %lld znodes, %lld sessions in %.1f ms of the loop",
                 (long long)z->fig.nodes + 2, (long long)z->fig.sessions, (double)z->fig_ns / 1e6);
    }
}

static void figures_count(struct zsvc *z)
{
    zk_figures_restart(&z->fig);
    z->fig_ns = 0;
    uv_timer_start(&z->fig_step, on_fig_step, 0, 0);
}

void server_zk_store_replaced(struct server *s)
{
    s->zk_sys_nodes = false; /* looked up again by the next write */
    /* the sessions' records are read again by their next writes (their
     * revisions would tell, but the store is a new one: nothing is kept) */
    memset(s->zk_owners, 0, sizeof(s->zk_owners));
    if (s->zk != NULL)
        figures_count(s->zk);
}

static void on_sweep_tick(uv_timer_t *t)
{
    struct zsvc *z = t->data;
    if (z->sweeping || !server_is_leader(z->s))
        return;
    z->sweeping = true;
    on_sweep_step(&z->sweep_step);
}

/* ---- start and stop ---- */

static const struct qcall_method *method(const char *path)
{
    for (size_t i = 0; i < server_methods_n; i++)
        if (strcmp(server_methods[i]->path, path) == 0)
            return server_methods[i];
    return NULL;
}

int server_zk_listen(struct server *s)
{
    if (s->cfg.n_listen_zk == 0)
        return 0;
    int rv = server_methods_init();
    if (rv != 0)
        return rv;
    struct zsvc *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return -ENOMEM;
    z->s = s;
    z->m_grant = method("/etcdserverpb.Lease/LeaseGrant");
    z->m_put = method("/etcdserverpb.KV/Put");
    z->m_range = method("/etcdserverpb.KV/Range");
    z->m_keepalive = method("/etcdserverpb.Lease/LeaseKeepAlive");
    z->m_revoke = method("/etcdserverpb.Lease/LeaseRevoke");
    if (!z->m_grant || !z->m_put || !z->m_range || !z->m_keepalive || !z->m_revoke) {
        free(z);
        return -ENOENT;
    }
    if ((rv = zk_listener_new(s->loop, &handler, z, JUTE_MAX_BUFFER, &z->l)) != 0) {
        free(z);
        return rv;
    }
    s->zk = z;
    uv_check_init(s->loop, &z->reaper);
    z->reaper.data = z;
    uv_check_start(&z->reaper, on_reap);
    z->started_ms = uv_now(s->loop);
    z->trace_mask = ZK_TRACE_MASK_DEFAULT;
    uv_timer_init(s->loop, &z->sweep_tick);
    uv_timer_init(s->loop, &z->sweep_step);
    z->sweep_tick.data = z->sweep_step.data = z;
    uint64_t every = s->cfg.zk_container_check_ms ? s->cfg.zk_container_check_ms : 60000;
    uv_timer_start(&z->sweep_tick, on_sweep_tick, every, every);
    uv_timer_init(s->loop, &z->fig_step);
    z->fig_step.data = z;
    for (size_t i = 0; i < s->cfg.n_listen_zk; i++) {
        const struct url *u = &s->cfg.listen_zk[i];
        char err[300];
        int fd;
        if (u->unix_sock) {
            log_error("zk", "cannot listen for ZooKeeper clients on %s: only http:// and "
                            "https:// URLs",
                      u->text);
            return -EINVAL;
        }
        if (u->tls && s->tls.zk == NULL) {
            log_error("zk", "cannot listen for ZooKeeper clients on %s: https:// needs "
                            "--cert-file and --key-file, or --auto-tls",
                      u->text);
            return -EINVAL;
        }
        if ((rv = server_listen_fd(u, &fd, err, sizeof(err))) != 0) {
            log_error("zk", "cannot listen for ZooKeeper clients: %s", err);
            return rv;
        }
        if (s->fronts != NULL) {
            fronts_add_zk(s->fronts, fd, u->tls);
            continue;
        }
        if ((rv = zk_listener_adopt(z->l, fd, u->tls ? s->tls.zk : NULL)) != 0) {
            log_error("zk", "cannot listen for ZooKeeper clients on %s: %s", u->text,
                      uv_strerror(rv));
            return rv;
        }
    }
    return 0;
}

zk_listener *server_zk_relay_listener(struct server *s)
{
    return s->zk != NULL ? s->zk->l : NULL;
}

void server_zk_serve(struct server *s)
{
    struct zsvc *z = s->zk;
    if (z == NULL)
        return;
    figures_count(z); /* the store as the member starts to serve it */
    int rv = zk_listener_start(z->l);
    if (rv != 0) {
        log_error("zk", "cannot accept ZooKeeper clients: %s", uv_strerror(rv));
        return;
    }
    for (size_t i = 0; i < s->cfg.n_listen_zk; i++)
        log_info("zk", "ready to serve ZooKeeper clients on %s", s->cfg.listen_zk[i].text);
}

/* the service is freed once both the listener (every connection's
 * on_close has run) and the reaper are closed, in whatever order libuv
 * calls their close callbacks */
static void zsvc_unref(struct zsvc *z)
{
    if (--z->close_refs == 0) {
        free(z->tab); /* every watch went with its connection */
        buf_free(&z->sweep_cursor);
        zk_figures_free(&z->fig);
        buf_free(&z->scratch);
        free(z);
    }
}

static void on_reaper_closed(uv_handle_t *h)
{
    zsvc_unref(h->data);
}

static void on_listener_closed(void *arg)
{
    zsvc_unref(arg);
}

void server_zk_close(struct server *s)
{
    struct zsvc *z = s->zk;
    if (z == NULL)
        return;
    s->zk = NULL;
    /* every connection closes; their on_close runs from the close
     * callbacks */
    z->close_refs = 5;
    zk_listener_close(z->l, on_listener_closed, z);
    on_reap(&z->reaper);
    /* calls still waiting for the store: the services forget them, now,
     * while the services are still there */
    while (z->live != NULL) {
        struct zcall *zc = z->live;
        if (zc->zs != NULL && zc->zs->ka == zc)
            zc->zs->ka = NULL;
        zcall_unlink(zc);
        zcall_free(zc);
    }
    uv_close((uv_handle_t *)&z->reaper, on_reaper_closed);
    uv_close((uv_handle_t *)&z->sweep_tick, on_reaper_closed);
    uv_close((uv_handle_t *)&z->sweep_step, on_reaper_closed);
    uv_close((uv_handle_t *)&z->fig_step, on_reaper_closed);
}
