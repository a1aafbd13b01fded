/* server/front.c: front loops (front.h). */
#include "server/front.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <urcu/wfcqueue.h>

#include "base/err.h"
#include "base/tsan.h"
#include "base/log.h"
#include "server/server_int.h"
#include "server/zk_service.h"
#include "server/zk_tree.h"
#include "zk/zk.h"

/* What crosses between a front loop and the core. Front to core: MSG (one
 * request message), HALF (the client ended its side), CLOSE (the stream is
 * gone). Core to front: SEND (one response message), FINISH (status and
 * text), RELEASE (the core forgot the call: the front frees its record).
 * SEND_TAKE is SEND of a message built whole elsewhere (qcall_send_take):
 * |data| holds its struct buf (prefix room, then the message), handed
 * over.
 * Front to front: ADOPT (serve the accepted socket in |status|).
 * A linearizable read whose read index the core reached goes to the front
 * as READ (the request packed, |status| its entry kind, |rev| the
 * revision it must see); a front that cannot read that revision yet hands
 * it back (READ_BACK) and the core serves it.
 * ZooKeeper connections (struct zrelay; zk.h, "Relaying"): front to core
 * ZK_OPEN (a connection's first bytes came: peer, host and certificate
 * subject in |data|), ZK_DATA (bytes read), ZK_GONE (the socket is
 * closed); core to front ZK_SEND (bytes to write), ZK_PAUSE (|status|:
 * stop or resume reading), ZK_CLOSE, ZK_RELEASE (the core forgot it);
 * front to front ZK_ADOPT (serve the accepted socket in |status|, TLS if
 * |rev|); front to core ZK_SERVED (reads the front answered itself, a
 * struct zk_served in |data|: "ZooKeeper reads on the front loop"). */
enum xop {
    XM_MSG,
    XM_HALF,
    XM_CLOSE,
    XM_READ_BACK,
    XM_SEND,
    XM_SEND_TAKE,
    XM_FINISH,
    XM_RELEASE,
    XM_READ,
    XM_ADOPT,
    XM_ZK_OPEN,
    XM_ZK_DATA,
    XM_ZK_GONE,
    XM_ZK_SEND,
    XM_ZK_PAUSE,
    XM_ZK_CLOSE,
    XM_ZK_RELEASE,
    XM_ZK_ADOPT,
    XM_ZK_SERVED
};

struct fcall;
struct zrelay;

struct xmsg {
    struct cds_wfcq_node node;
    enum xop op;
    int status;
    struct fcall *fc;
    struct zrelay *zr; /* the ZK_ messages' */
    int64_t rev;
    size_t len;
    uint8_t data[]; /* MSG/SEND/READ: the message; FINISH: the text, NUL-terminated */
};

struct front;

/* A call forwarded to the core: shared by the two threads, each field
 * written by one side only (noted), the queues ordering the rest. */
struct fcall {
    struct front *fr;
    uint32_t method;
    grpc_call *gc;   /* front: NULL once grpc closed the stream */
    bool forwarded;  /* front: the core has seen it (it will RELEASE it) */
    bool in_plist;   /* front: on fr->plist */
    struct fcall *pnext, *pprev;
    qcall *qc;        /* core: the call the services see */
    size_t core_sent; /* core: response bytes posted */
    _Atomic size_t front_sent;   /* front: of those, handed to grpc */
    _Atomic size_t grpc_pending; /* front: grpc_call_pending_bytes, refreshed per pass */
    /* front, before the first MSG: the credentials the core copies */
    char *token;
    size_t token_len;
    char *cn;
};

/* A ZooKeeper connection whose socket a front loop serves and whose
 * session the core's ZooKeeper service runs (zk.h, "Relaying"). Freed by
 * the front on ZK_RELEASE (or by the core once the fronts are gone). */
struct zrelay {
    struct front *fr;
    zk_conn *fconn; /* front: the socket's connection, NULL once closed */
    zk_conn *cconn; /* core: the relayed connection, NULL before or after */
    /* front: its framing and the reads answered here ("ZooKeeper reads on
     * the front loop") */
    struct buf in;         /* the start of a packet not yet whole */
    struct zk_cutter cut;  /* the client's requests */
    struct zk_answers ans; /* the core's answers */
    bool watching;         /* a request that sets a watch went to the core */
    bool no_reads;         /* answer nothing here (out of memory at the start) */
    uint64_t at_core;      /* requests handed on, not answered yet */
    bool core_paused;      /* the core asked: read nothing for now */
    bool held;             /* not read until the core's next round ("Held") */
    bool no_hold;          /* never held: a request whose answer is not counted */
    uint64_t held_round;   /* the core's round count when held */
    struct zrelay *hnext;  /* the front's held connections */
    struct zrelay *hprev;  /* (a list both ways) */
    struct zk_served sv;   /* answered here since the last report */
    uint64_t sv_ms;        /* when the last report went */
    char *ids[2];          /* "ip:host" and "x509:subject", as the core's */
    size_t n_ids;
};

static void zrelay_free(struct zrelay *zr)
{
    buf_free(&zr->in);
    for (size_t i = 0; i < zr->n_ids; i++)
        free(zr->ids[i]);
    free(zr);
}

static void fcall_free(struct fcall *fc)
{
    free(fc->token);
    free(fc->cn);
    free(fc);
}

/* A mailbox is a wait-free queue and its wake-up: an eventfd the
 * receiving loop polls, written by a sender only when no wake-up is on its
 * way already (|armed|). libuv's uv_async_t did this before, but its
 * receiving side, finding a handle whose sender had not yet finished
 * uv_async_send (marked it, wrote the eventfd, not yet marked it done),
 * spins and then calls sched_yield until the sender carries on; on two
 * CPUs shared by the core, the front loops, the disk workers and the
 * clients the sender was often the very thread the wake-up had preempted,
 * and every such wait gave the CPU away for a time slice (0.3-0.9 ms each,
 * hundreds a second under a write load). Here the receiver never waits. */
struct mailbox {
    struct cds_wfcq_head head;
    struct cds_wfcq_tail tail;
    uv_poll_t poll;
    int efd;
    atomic_int armed; /* the eventfd was written and not yet read */
    /* the receiver's callback; its data is poll.data */
    void (*on_wake)(struct mailbox *mb);
};

struct front {
    struct fronts *all;
    unsigned idx;
    int cpu; /* -1: not pinned */
    uv_loop_t loop;
    uv_thread_t thread;
    grpc_server *grpc;
    zk_listener *zkl;  /* its ZooKeeper connections (relaying), or NULL */
    int closing;       /* front_stop: grpc and zkl still closing */
    struct mailbox in; /* from the core */
    uv_prepare_t prep; /* once per pass: wake the core, refresh pending bytes */
    uv_poll_t polls[2 * CONFIG_MAX_URLS]; /* the client listeners, then ZooKeeper's */
    size_t npolls;
    struct arena arena; /* reads answered here */
    struct buf out;
    bool wake_core;    /* something was posted to the core this pass */
    atomic_bool start_accept; /* set by the core (fronts_accept): poll the listeners */
    atomic_bool stop_accept; /* set by the core: close the listeners' polls */
    bool polls_closed;
    atomic_bool stop;  /* set by the core once no loop accepts any more */
    bool stopped;      /* front_stop ran */
    struct fcall *plist; /* calls whose output grpc has not written yet */
    struct zrelay *held; /* ZooKeeper connections held ("Held") */
    atomic_uint n_held;  /* how many: read by the core (fronts_round) */
};

struct fronts {
    struct server *s;
    unsigned n;
    struct front *f;
    struct mailbox in; /* to the core */
    uv_prepare_t prep; /* the core's: wake the fronts it posted to */
    bool wake[CONFIG_MAX_FRONTS];
    atomic_uint_fast64_t round; /* write rounds the core began (fronts_round) */
    int lfd[CONFIG_MAX_URLS];
    size_t nl;
    int zk_lfd[CONFIG_MAX_URLS]; /* ZooKeeper's listeners (fronts_add_zk) */
    bool zk_tls[CONFIG_MAX_URLS];
    size_t nzl;
    bool stopping;
    int closing;
    unsigned next_accept; /* __atomic: round-robin of accepted connections */
    unsigned quiet;       /* __atomic: loops that stopped accepting */
    void (*cb)(void *);
    void *arg;
};

static struct grpc_method *front_methods;

/* ---- messages ---- */

static struct xmsg *xmsg_new(enum xop op, struct fcall *fc, int status, const void *p, size_t len)
{
    struct xmsg *m = malloc(sizeof(*m) + len);
    if (m == NULL)
        return NULL;
    cds_wfcq_node_init(&m->node);
    m->op = op;
    m->status = status;
    m->fc = fc;
    m->zr = NULL;
    m->rev = 0;
    m->len = len;
    if (len && p != NULL) /* NULL: the caller fills the bytes */
        memcpy(m->data, p, len);
    return m;
}

static void mailbox_init(struct mailbox *mb)
{
    cds_wfcq_init(&mb->head, &mb->tail);
    mb->efd = -1;
}

static void on_mailbox_readable(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct mailbox *mb = caa_container_of(p, struct mailbox, poll);
    uint64_t v;
    ssize_t n = read(mb->efd, &v, sizeof(v));
    (void)n; /* EAGAIN: read by an earlier wake-up of this pass */
    /* the flag down, then the queue read: a sender that saw the flag up
     * posted before it went down (mailbox_wake) */
    atomic_store(&mb->armed, 0);
    atomic_thread_fence(memory_order_seq_cst);
    mb->on_wake(mb);
}

/* mailbox_listen: |loop| (the receiver's) calls |on_wake| after a wake-up
 * (mailbox_wake); |data| is the receiver's (mb->poll.data). At start:
 * aborts when the eventfd cannot be made. */
static void mailbox_listen(uv_loop_t *loop, struct mailbox *mb, void (*on_wake)(struct mailbox *),
                           void *data)
{
    mb->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rv = mb->efd < 0 ? -errno : uv_poll_init(loop, &mb->poll, mb->efd);
    if (rv == 0) {
        mb->poll.data = data; /* for on_wake and close callbacks */
        rv = uv_poll_start(&mb->poll, UV_READABLE, on_mailbox_readable);
    }
    if (rv != 0) {
        log_error("server", "a front loop's mailbox: %s", uv_strerror(rv));
        abort(); /* at start, with nothing served yet */
    }
    mb->on_wake = on_wake;
    atomic_init(&mb->armed, 0);
}

/* mailbox_wake wakes |mb|'s receiver for what was posted to it before; any
 * thread. One write per wake-up at most: none while one is on its way. */
static void mailbox_wake(struct mailbox *mb)
{
    atomic_thread_fence(memory_order_seq_cst); /* the posts, then the flag */
    if (atomic_load_explicit(&mb->armed, memory_order_relaxed) ||
        atomic_exchange(&mb->armed, 1) != 0)
        return;
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(mb->efd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
    /* EAGAIN would mean the counter is full: readable anyway */
}

/* mailbox_close stops |mb|'s polling; |cb| when the handle is closed. */
static void mailbox_close(struct mailbox *mb, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&mb->poll, cb); /* stops polling at once */
    close(mb->efd);
    mb->efd = -1;
}

/* take_all moves everything queued in |mb| to |h|/|t| (one consumer). */
static void take_all(struct mailbox *mb, struct cds_wfcq_head *h, struct cds_wfcq_tail *t)
{
    cds_wfcq_init(h, t);
    __cds_wfcq_splice_blocking(h, t, &mb->head, &mb->tail);
}

static struct xmsg *next_msg(struct cds_wfcq_head *h, struct cds_wfcq_tail *t)
{
    struct cds_wfcq_node *n = __cds_wfcq_dequeue_blocking(h, t);
    if (n == NULL)
        return NULL;
    struct xmsg *m = caa_container_of(n, struct xmsg, node);
    tsan_acquire(m); /* the queue (in liburcu, not instrumented) ordered it */
    return m;
}

static void post(struct mailbox *mb, struct xmsg *m)
{
    tsan_release(m);
    cds_wfcq_enqueue(&mb->head, &mb->tail, &m->node);
}

/* to_core posts from a front loop; the core is woken at the end of the pass. */
static void to_core(struct front *fr, enum xop op, struct fcall *fc, const void *p, size_t len)
{
    struct xmsg *m = xmsg_new(op, fc, 0, p, len);
    if (m == NULL) {
        log_error("front", "out of memory passing a request to the core");
        abort(); /* the call could never be answered or released */
    }
    post(&fr->all->in, m);
    fr->wake_core = true;
}

/* to_front posts from the core to |fc|'s front loop. */
static int to_front(struct fcall *fc, enum xop op, int status, const void *p, size_t len)
{
    struct front *fr = fc->fr;
    struct xmsg *m = xmsg_new(op, fc, status, p, len);
    if (m == NULL) {
        if (op == XM_RELEASE) {
            log_error("front", "out of memory releasing a call");
            abort();
        }
        return -ENOMEM;
    }
    post(&fr->in, m);
    fr->all->wake[fr->idx] = true;
    return 0;
}

/* ---- the core's side ---- */

static int r_send(qcall *c, const uint8_t *msg, size_t len)
{
    struct fcall *fc = c->face_ctx;
    int rv = to_front(fc, XM_SEND, 0, msg, len);
    if (rv == 0)
        fc->core_sent += len;
    return rv;
}

static int r_finish(qcall *c, int status, const char *message)
{
    if (message == NULL)
        message = "";
    return to_front(c->face_ctx, XM_FINISH, status, message, strlen(message) + 1);
}

static size_t r_pending(const qcall *c)
{
    const struct fcall *fc = c->face_ctx;
    size_t handed = atomic_load_explicit(&fc->front_sent, memory_order_acquire);
    return fc->core_sent - handed +
           atomic_load_explicit(&fc->grpc_pending, memory_order_relaxed);
}

static int r_send_take(qcall *c, struct buf *msg)
{
    struct fcall *fc = c->face_ctx;
    size_t len = msg->len - GRPC_MSG_PREFIX;
    int rv = to_front(fc, XM_SEND_TAKE, 0, msg, sizeof(*msg));
    if (rv == 0) {
        *msg = (struct buf){0}; /* the front loop's now */
        fc->core_sent += len;
    }
    return rv;
}

static const struct qcall_face remote_face = {r_send, r_finish, r_pending, r_send_take};

/* ---- ZooKeeper connections, the core's side ---- */

static int to_front_zk(struct zrelay *zr, enum xop op, int status, const void *p, size_t len)
{
    struct front *fr = zr->fr;
    struct xmsg *m = xmsg_new(op, NULL, status, p, len);
    if (m == NULL) {
        if (op == XM_ZK_RELEASE || op == XM_ZK_CLOSE) {
            log_error("front", "out of memory closing a ZooKeeper connection");
            abort(); /* the connection would stay open forever */
        }
        return -ENOMEM;
    }
    m->zr = zr;
    post(&fr->in, m);
    fr->all->wake[fr->idx] = true;
    return 0;
}

static int zr_send(void *ctx, const uint8_t *p, size_t len)
{
    return to_front_zk(ctx, XM_ZK_SEND, 0, p, len);
}

static void zr_pause(void *ctx, bool paused)
{
    /* lost when out of memory: the core still holds back its packets */
    (void)to_front_zk(ctx, XM_ZK_PAUSE, paused, NULL, 0);
}

static void zr_close(void *ctx)
{
    to_front_zk(ctx, XM_ZK_CLOSE, 0, NULL, 0);
}

static const struct zk_relay zk_relay_ops = {zr_send, zr_pause, zr_close};

/* core_zk_open: a front's ZooKeeper connection sent its first bytes */
static void core_zk_open(struct fronts *all, struct zrelay *zr, const struct xmsg *m)
{
    const char *peer = (const char *)m->data;
    const char *host = peer + strlen(peer) + 1;
    const char *subject = m->status ? host + strlen(host) + 1 : NULL;
    zk_listener *l = server_zk_relay_listener(all->s);
    if (l == NULL || zk_conn_relayed(l, &zk_relay_ops, zr, peer, host, subject, &zr->cconn) != 0)
        to_front_zk(zr, XM_ZK_CLOSE, 0, NULL, 0); /* no ZooKeeper service (closing) */
}

/* core_zk_gone: a front's ZooKeeper connection is closed */
static void core_zk_gone(struct fronts *all, struct zrelay *zr)
{
    zk_conn *c = zr->cconn;
    zr->cconn = NULL;
    if (c != NULL)
        zk_conn_relay_gone(c);
    if (all->stopping)
        zrelay_free(zr); /* no front loop to release it */
    else
        to_front_zk(zr, XM_ZK_RELEASE, 0, NULL, 0);
}

static void core_close_call(struct fcall *fc)
{
    qcall *c = fc->qc;
    if (c != NULL) {
        c->finished = true;
        c->m->on_close(c);
        qcall_free(c);
        fc->qc = NULL;
    }
}

static void core_handle(struct fronts *all, struct xmsg *m)
{
    struct fcall *fc = m->fc;
    if (all->stopping) {
        /* the front loops are gone: only the services' close matters */
        if (m->op == XM_CLOSE) {
            core_close_call(fc);
            fcall_free(fc);
        } else if (m->op == XM_ZK_GONE) {
            core_zk_gone(all, m->zr);
        }
        return;
    }
    switch (m->op) {
    case XM_ZK_OPEN:
        core_zk_open(all, m->zr, m);
        break;
    case XM_ZK_DATA:
        if (m->zr->cconn != NULL)
            zk_conn_relay_input(m->zr->cconn, m->data, m->len);
        break;
    case XM_ZK_GONE:
        core_zk_gone(all, m->zr);
        break;
    case XM_ZK_SERVED:
        if (m->zr->cconn != NULL) {
            struct zk_served sv;
            memcpy(&sv, m->data, sizeof(sv));
            zk_conn_relay_served(m->zr->cconn, &sv);
        }
        break;
    case XM_MSG:
    case XM_HALF:
        if (fc->qc == NULL) {
            fc->qc = qcall_new(all->s, server_methods[fc->method], &remote_face, fc);
            if (fc->qc != NULL &&
                qcall_set_credentials(fc->qc, fc->token, fc->token_len, fc->cn) != 0) {
                qcall_free(fc->qc);
                fc->qc = NULL;
            }
            if (fc->qc == NULL) {
                r_finish(&(qcall){.face_ctx = fc}, GRPC_STATUS_RESOURCE_EXHAUSTED,
                         "out of memory");
                break;
            }
        }
        if (m->op == XM_MSG)
            fc->qc->m->on_message(fc->qc, m->data, m->len);
        else if (fc->qc->m->on_half_close != NULL)
            fc->qc->m->on_half_close(fc->qc);
        break;
    case XM_CLOSE:
        core_close_call(fc);
        to_front(fc, XM_RELEASE, 0, NULL, 0);
        break;
    case XM_READ_BACK: {
        /* its read index was reached before it went out: serve it now */
        const ProtobufCMessageDescriptor *d = m->status == ENTRY_READ_RANGE
                                                  ? &etcdserverpb__range_request__descriptor
                                                  : &etcdserverpb__txn_request__descriptor;
        ProtobufCMessage *req = protobuf_c_message_unpack(d, NULL, m->len, m->data);
        if (fc->qc == NULL || req == NULL) {
            if (fc->qc != NULL)
                qcall_finish(fc->qc, GRPC_STATUS_INTERNAL, "out of memory");
        } else {
            server_serve_read(all->s, fc->qc, (enum entry_kind)m->status, req);
        }
        if (req != NULL)
            protobuf_c_message_free_unpacked(req, NULL);
        break;
    }
    default:
        break;
    }
}

bool fronts_read_elsewhere(qcall *call, int kind, const void *request, int64_t rev)
{
    if (call->face != &remote_face)
        return false;
    struct fcall *fc = call->face_ctx;
    const ProtobufCMessage *req = request;
    size_t n = protobuf_c_message_get_packed_size(req);
    struct xmsg *m = xmsg_new(XM_READ, fc, kind, NULL, n);
    if (m == NULL)
        return false;
    protobuf_c_message_pack(req, m->data);
    m->rev = rev;
    post(&fc->fr->in, m);
    fc->fr->all->wake[fc->fr->idx] = true;
    return true;
}

/* drain hands everything queued in |mb| to |fn|, in order, and frees it. */
static void drain(struct mailbox *mb, void (*fn)(void *arg, struct xmsg *m), void *arg)
{
    struct cds_wfcq_head h;
    struct cds_wfcq_tail t;
    take_all(mb, &h, &t);
    struct xmsg *m;
    while ((m = next_msg(&h, &t)) != NULL) {
        fn(arg, m);
        free(m);
    }
}

static void core_handle_fn(void *all, struct xmsg *m)
{
    core_handle(all, m);
}

static void core_drain(struct fronts *all)
{
    drain(&all->in, core_handle_fn, all);
}

static void on_core_wake(struct mailbox *mb)
{
    core_drain(mb->poll.data);
}

/* once per core pass: wake the front loops that were posted to */
static void on_core_prepare(uv_prepare_t *p)
{
    struct fronts *all = p->data;
    for (unsigned i = 0; i < all->n; i++)
        if (all->wake[i]) {
            all->wake[i] = false;
            mailbox_wake(&all->f[i].in);
        }
}

void fronts_round(struct fronts *all)
{
    if (all == NULL)
        return;
    /* the round is counted before the holders are: see fz_hold */
    atomic_fetch_add(&all->round, 1);
    for (unsigned i = 0; i < all->n; i++)
        if (atomic_load(&all->f[i].n_held) > 0)
            all->wake[i] = true; /* on_core_prepare wakes it */
}

/* ---- a front loop's side ---- */

static void plist_add(struct front *fr, struct fcall *fc)
{
    if (fc->in_plist)
        return;
    fc->in_plist = true;
    fc->pprev = NULL;
    fc->pnext = fr->plist;
    if (fr->plist)
        fr->plist->pprev = fc;
    fr->plist = fc;
}

static void plist_remove(struct front *fr, struct fcall *fc)
{
    if (!fc->in_plist)
        return;
    fc->in_plist = false;
    if (fc->pprev)
        fc->pprev->pnext = fc->pnext;
    else
        fr->plist = fc->pnext;
    if (fc->pnext)
        fc->pnext->pprev = fc->pprev;
}

/* answer_local finishes |gc| with what a front loop read (|rv| 1: the
 * response in |out|; negative: the error), as server_reply does. */
static void answer_local(grpc_call *gc, int rv, const struct buf *out)
{
    if (rv > 0) {
        rv = grpc_call_send(gc, out->data, out->len);
        if (rv == -EPIPE)
            rv = 0;
    }
    if (rv < 0)
        grpc_call_finish(gc, q_err_grpc_status(rv), q_strerror(rv));
    else
        grpc_call_finish(gc, GRPC_STATUS_OK, NULL);
}

static struct fcall *fcall_of(grpc_call *gc)
{
    struct fcall *fc = grpc_call_get_data(gc);
    if (fc == NULL) {
        fc = calloc(1, sizeof(*fc));
        if (fc == NULL) {
            grpc_call_finish(gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return NULL;
        }
        fc->fr = grpc_call_server_data(gc);
        fc->gc = gc;
        fc->method = (uint32_t)(grpc_call_method(gc) - front_methods);
        size_t tl = 0;
        const char *tok = grpc_call_metadata(gc, "token", &tl);
        if (tok == NULL) /* etcd 3.4 reads "authorization" when there is no "token" */
            tok = grpc_call_metadata(gc, "authorization", &tl);
        const char *cn = grpc_call_tls_common_name(gc);
        if ((tok != NULL && (fc->token = strndup(tok, tl)) == NULL) ||
            (cn != NULL && (fc->cn = strdup(cn)) == NULL)) {
            fcall_free(fc);
            grpc_call_finish(gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return NULL;
        }
        fc->token_len = tl;
        grpc_call_set_data(gc, fc);
    }
    return fc;
}

static void f_on_message(grpc_call *gc, const uint8_t *msg, size_t len)
{
    struct fcall *fc = fcall_of(gc);
    if (fc == NULL)
        return;
    if (!fc->forwarded) {
        struct front *fr = fc->fr;
        struct qcreds cr = {fc->token, fc->token_len, fc->cn};
        int rv = server_kv_serve_local(fr->all->s, server_methods[fc->method], msg, len, &cr,
                                       &fr->arena, &fr->out);
        if (rv != 0) {
            answer_local(gc, rv, &fr->out);
            return;
        }
    }
    fc->forwarded = true;
    to_core(fc->fr, XM_MSG, fc, msg, len);
}

static void f_on_half_close(grpc_call *gc)
{
    struct fcall *fc = fcall_of(gc);
    if (fc == NULL)
        return;
    fc->forwarded = true;
    to_core(fc->fr, XM_HALF, fc, NULL, 0);
}

static void f_on_close(grpc_call *gc)
{
    struct fcall *fc = grpc_call_get_data(gc);
    if (fc == NULL)
        return;
    fc->gc = NULL;
    plist_remove(fc->fr, fc);
    if (fc->forwarded)
        to_core(fc->fr, XM_CLOSE, fc, NULL, 0);
    else
        fcall_free(fc);
}

/* ---- ZooKeeper connections, a front loop's side ---- */

static void to_core_zk(struct front *fr, enum xop op, struct zrelay *zr, int status,
                       const void *p, size_t len)
{
    struct xmsg *m = xmsg_new(op, NULL, status, p, len);
    if (m == NULL) {
        log_error("front", "out of memory passing ZooKeeper input to the core");
        abort(); /* the stream would have a hole */
    }
    m->zr = zr;
    post(&fr->all->in, m);
    fr->wake_core = true;
}

/* ---- ZooKeeper reads on the front loop ----
 *
 * A front loop cuts what its ZooKeeper connections send into requests
 * (zk/stream.h, zk_cut_next) and answers some reads itself from a shared
 * read of the store (zk_read_shared), with no trip to the core: exists,
 * getData, getChildren and getChildren2 without a watch, on a connection
 *  - whose session is established: the core's ConnectResponse went by,
 *    with a timeout (an expired session's answer has none);
 *  - with nothing at the core: every request handed on was answered (the
 *    core's answers are counted as they go by, zk_answers_count; an
 *    event, xid -1, answers nothing), so the replies keep the requests'
 *    order;
 *  - that never set a watch (getData, exists or getChildren with the watch
 *    flag, addWatch, setWatches): ZooKeeper promises that a client sees a
 *    watch's event before the data that fired it, and events come from
 *    the core; a connection with no watch gets none;
 * and only when the shared read is at the store's current revision (the
 * newest the member answered: the connection has seen no later zxid) and
 * the ACL lets the identities known here read (ip, x509: a subset of the
 * session's, so a grant here is one at the core too); a NOAUTH here goes
 * to the core, which knows the session's addAuth digests as well.
 * Everything else goes to the core as before, in order. A stream not to
 * be framed here (a four-letter word; a length past jute.maxbuffer or
 * negative) goes to the core unframed from there on, where it is refused
 * as before. What was answered here is reported to the core (ZK_SERVED)
 * before the next bytes handed on and every FZ_REPORT_MS while reads go
 * on: it keeps the session alive as any packet does, and counts in cons
 * and mntr. */
#define FZ_REPORT_MS 100

static uint32_t be32_at(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fz_report(struct zrelay *zr)
{
    if (zr->sv.packets == 0)
        return;
    to_core_zk(zr->fr, XM_ZK_SERVED, zr, 0, &zr->sv, sizeof(zr->sv));
    memset(&zr->sv, 0, sizeof(zr->sv));
    zr->sv_ms = uv_now(&zr->fr->loop);
}

static void fz_forward(struct zrelay *zr, const uint8_t *p, size_t len)
{
    if (len == 0)
        return;
    fz_report(zr);
    to_core_zk(zr->fr, XM_ZK_DATA, zr, 0, p, len);
}

/* ---- Held: a connection read once a core round ----
 *
 * A write the core is handed while it waits for the disk (a round's
 * fdatasync) waits with the core for the next round, and so does a
 * request behind it on its connection (ZooKeeper answers a session's
 * requests in order: a read behind a write waits for the write). Reading
 * such requests as they trickle in would cost the front loop a wake-up
 * each (a ZooKeeper client writes requests one by one as its callbacks
 * issue them, its C library a packet's length apart from its body) and
 * gain nothing. So once what a connection sent went to the core and is
 * not all answered (at_core), its socket is not read until the core
 * begins its next write round (fronts_round: what is read from then on
 * goes with the round after) or answers everything (a read, a ping: no
 * round follows). One wake-up a round then reads all the connection sent
 * meanwhile, in one batch for the core. A connection with nothing at the
 * core is read as it comes: the reads answered here wait for nothing. */

static void fz_pause_apply(struct zrelay *zr)
{
    if (zr->fconn != NULL)
        zk_conn_pause(zr->fconn, zr->core_paused || zr->held);
}

static void fz_hold(struct zrelay *zr)
{
    struct front *fr = zr->fr;
    zr->held = true;
    zr->hprev = NULL;
    zr->hnext = fr->held;
    if (fr->held != NULL)
        fr->held->hprev = zr;
    fr->held = zr;
    /* counted before the round is read, as fronts_round counts the round
     * before it reads this: one of the two sees the other's (seq_cst) */
    atomic_fetch_add(&fr->n_held, 1);
    zr->held_round = atomic_load(&fr->all->round);
    fz_pause_apply(zr);
}

static void fz_unhold(struct zrelay *zr)
{
    struct front *fr = zr->fr;
    if (!zr->held)
        return;
    zr->held = false;
    if (zr->hprev != NULL)
        zr->hprev->hnext = zr->hnext;
    else
        fr->held = zr->hnext;
    if (zr->hnext != NULL)
        zr->hnext->hprev = zr->hprev;
    zr->hnext = zr->hprev = NULL;
    atomic_fetch_sub(&fr->n_held, 1);
    fz_pause_apply(zr);
}

/* a round began since these were held: read them again */
static void fz_release_due(struct front *fr)
{
    if (fr->held == NULL)
        return;
    uint64_t r = atomic_load(&fr->all->round);
    for (struct zrelay *zr = fr->held, *next; zr != NULL; zr = next) {
        next = zr->hnext;
        if (r != zr->held_round)
            fz_unhold(zr);
    }
}

/* fz_answers: the core's bytes for the client going by */
static void fz_answers(struct zrelay *zr, const uint8_t *p, size_t len)
{
    uint64_t n = zk_answers_count(&zr->ans, p, len);
    zr->at_core = n < zr->at_core ? zr->at_core - n : 0;
    if (zr->at_core == 0 || zr->ans.broken || zr->no_hold)
        fz_unhold(zr);
}

/* fz_packet takes one whole request (|pkt|, without its length): true
 * when it was answered here, false when it must go to the core (counted
 * there) */
static bool fz_packet(struct zrelay *zr, const uint8_t *pkt, size_t len)
{
    struct front *fr = zr->fr;
    int32_t type = len >= 8 ? (int32_t)be32_at(pkt + 4) : 0;
    /* its answer would have xid -1, an event's, and not be counted:
     * at_core stays above 0 from here on (no reads here, no holding) */
    if (len < 4 || (int32_t)be32_at(pkt) == -1)
        zr->no_hold = true;
    if (type == ZK_OP_ADD_WATCH || type == ZK_OP_SET_WATCHES || type == ZK_OP_SET_WATCHES2)
        zr->watching = true;
    if (!zk_read_shareable(type))
        goto core;
    arena_reset(&fr->arena);
    struct zk_request req;
    if (zk_request_decode(pkt, len, &fr->arena, &req) != 0)
        goto core;
    if (req.u.pw.watch)
        zr->watching = true;
    if (!zr->ans.established || zr->ans.broken || zr->watching || zr->no_reads ||
        zr->at_core > 0 || zr->fconn == NULL)
        goto core;
    struct buf *out = &fr->out;
    buf_reset(out);
    static const uint8_t room[4];
    int32_t err = 0;
    struct zk_ids who = {(const char *const *)zr->ids, zr->n_ids};
    if (buf_append(out, room, 4) != 0 ||
        zk_read_shared(fr->all->s->kv, &req, &who, &fr->arena, out, &err) != 1 ||
        err == ZK_NOAUTH)
        goto core;
    uint32_t n = (uint32_t)(out->len - 4);
    out->data[0] = (uint8_t)(n >> 24);
    out->data[1] = (uint8_t)(n >> 16);
    out->data[2] = (uint8_t)(n >> 8);
    out->data[3] = (uint8_t)n;
    if (zk_conn_write(zr->fconn, out->data, out->len) != 0) {
        zk_conn_close(zr->fconn);
        return true;
    }
    zr->sv.packets++;
    zr->sv.bytes_in += len + 4;
    zr->sv.bytes_out += out->len;
    zr->sv.last_op = type;
    zr->sv.last_xid = req.h.xid;
    zr->sv.last_zxid = (int64_t)((uint64_t)be32_at(out->data + 8) << 32 | be32_at(out->data + 12));
    metrics_inc(server_metrics.zk_front_reads);
    return true;
core:
    zr->at_core++;
    return false;
}

/* fz_input cuts what the client sent into requests: each is answered
 * here or handed on, runs of handed-on bytes as one message */
static void fz_input(struct zrelay *zr, const uint8_t *p, size_t len)
{
    if (zr->cut.raw) {
        fz_forward(zr, p, len);
        return;
    }
    if (buf_append(&zr->in, p, len) != 0) {
        log_warn("front", "closing ZooKeeper client %s: out of memory for its input",
                 zk_conn_peer(zr->fconn));
        zk_conn_close(zr->fconn);
        return;
    }
    const uint8_t *b = zr->in.data;
    size_t n = zr->in.len, off = 0, from = 0; /* [from, off): to hand on */
    for (;;) {
        size_t plen = 0;
        enum zk_cut k = zk_cut_next(&zr->cut, b + off, n - off, JUTE_MAX_BUFFER, &plen);
        if (k == ZK_CUT_MORE)
            break;
        if (k == ZK_CUT_RAW) {
            off = n; /* the core answers or refuses it */
            break;
        }
        if (k == ZK_CUT_PACKET && fz_packet(zr, b + off + 4, plen)) {
            fz_forward(zr, b + from, off - from); /* empty: see fz_packet's checks */
            from = off + 4 + plen;
        }
        off += 4 + plen;
        if (zr->fconn == NULL)
            return;
    }
    fz_forward(zr, b + from, off - from);
    buf_consume(&zr->in, off);
    if (zr->in.len == 0 && zr->in.cap > (1u << 18))
        buf_free(&zr->in); /* a big packet went by: not kept for every connection */
    if (zr->sv.packets > 0 && uv_now(&zr->fr->loop) - zr->sv_ms >= FZ_REPORT_MS)
        fz_report(zr);
    if (zr->at_core > 0 && !zr->held && !zr->no_hold && !zr->ans.broken && !zr->cut.raw &&
        zr->fconn != NULL)
        fz_hold(zr);
}

/* join_id makes "scheme:id" (malloc'd, NULL when out of memory) */
static char *join_id(const char *scheme, const char *id)
{
    size_t n = strlen(scheme) + 1 + strlen(id) + 1;
    char *e = malloc(n);
    if (e != NULL)
        snprintf(e, n, "%s:%s", scheme, id);
    return e;
}

static void fz_on_bytes(zk_conn *c, const uint8_t *p, size_t len)
{
    struct zrelay *zr = zk_conn_get_data(c);
    if (zr == NULL) {
        /* the first bytes: the core learns of the connection now, its
         * TLS handshake (if any) done */
        struct front *fr = zk_listener_arg(zk_conn_listener(c));
        zr = calloc(1, sizeof(*zr));
        if (zr == NULL) {
            zk_conn_close(c);
            return;
        }
        zr->fr = fr;
        zr->fconn = c;
        zk_conn_set_data(c, zr);
        /* peer, host and subject, each NUL-terminated (zk_conn's
         * peer and host fit 64 and 48 bytes) */
        char open[64 + 48 + 1024];
        const char *peer = zk_conn_peer(c), *host = zk_conn_host(c);
        size_t np = strlen(peer) + 1, nh = strlen(host) + 1;
        memcpy(open, peer, np);
        memcpy(open + np, host, nh);
        size_t n = np + nh;
        bool has_subject = zk_conn_peer_subject(c, open + n, sizeof(open) - n) == 0;
        /* the identities the core gives the session at its start */
        if (host[0] != '\0')
            zr->ids[zr->n_ids++] = join_id("ip", host);
        if (has_subject)
            zr->ids[zr->n_ids++] = join_id("x509", open + n);
        for (size_t i = 0; i < zr->n_ids; i++)
            if (zr->ids[i] == NULL)
                zr->no_reads = true; /* out of memory */
        if (has_subject)
            n += strlen(open + n) + 1;
        to_core_zk(fr, XM_ZK_OPEN, zr, has_subject, open, n);
    }
    fz_input(zr, p, len);
}

static void fz_on_close(zk_conn *c)
{
    struct zrelay *zr = zk_conn_get_data(c);
    if (zr == NULL)
        return; /* the core never heard of it */
    fz_report(zr);
    fz_unhold(zr);
    zr->fconn = NULL;
    to_core_zk(zr->fr, XM_ZK_GONE, zr, 0, NULL, 0);
}

static const struct zk_conn_handler fz_handler = {NULL,        NULL, NULL, fz_on_close,
                                                  fz_on_bytes, NULL};

/* adopt_here serves an accepted socket |c| on |fr|: a client one (|op|
 * XM_ADOPT, |flags| GRPC_ADOPT_* of its listener) or a ZooKeeper one
 * (XM_ZK_ADOPT, |flags| non-zero for TLS); closed if |fr| is stopping */
static void adopt_here(struct front *fr, enum xop op, int c, unsigned flags)
{
    if (op == XM_ADOPT && fr->grpc != NULL)
        grpc_server_adopt_flags(fr->grpc, c, flags);
    else if (op == XM_ZK_ADOPT && fr->zkl != NULL && !fr->stopped)
        zk_listener_adopt_conn(fr->zkl, c, flags ? fr->all->s->tls.zk : NULL);
    else
        close(c);
}

static void front_handle(struct front *fr, struct xmsg *m)
{
    struct fcall *fc = m->fc;
    switch (m->op) {
    case XM_SEND:
        if (fc->gc != NULL) {
            grpc_call_send(fc->gc, m->data, m->len);
            size_t p = grpc_call_pending_bytes(fc->gc);
            atomic_store_explicit(&fc->grpc_pending, p, memory_order_relaxed);
            if (p > 0)
                plist_add(fr, fc);
        }
        atomic_fetch_add_explicit(&fc->front_sent, m->len, memory_order_release);
        break;
    case XM_SEND_TAKE: {
        struct buf b;
        memcpy(&b, m->data, sizeof(b));
        size_t len = b.len - GRPC_MSG_PREFIX;
        if (fc->gc != NULL) {
            grpc_call_send_take(fc->gc, &b);
            size_t p = grpc_call_pending_bytes(fc->gc);
            atomic_store_explicit(&fc->grpc_pending, p, memory_order_relaxed);
            if (p > 0)
                plist_add(fr, fc);
        }
        buf_free(&b);
        atomic_fetch_add_explicit(&fc->front_sent, len, memory_order_release);
        break;
    }
    case XM_FINISH:
        if (fc->gc != NULL)
            grpc_call_finish(fc->gc, m->status, m->data[0] ? (const char *)m->data : NULL);
        break;
    case XM_RELEASE:
        fcall_free(fc);
        break;
    case XM_READ: {
        if (fc->gc == NULL)
            break; /* gone: its CLOSE is on the way to the core */
        struct qcreds cr = {fc->token, fc->token_len, fc->cn};
        int rv = server_kv_serve_read_local(fr->all->s, (enum entry_kind)m->status, m->data,
                                            m->len, m->rev, &cr, &fr->arena, &fr->out);
        if (rv != 0) {
            answer_local(fc->gc, rv, &fr->out);
        } else {
            struct xmsg *back = xmsg_new(XM_READ_BACK, fc, m->status, m->data, m->len);
            if (back == NULL) {
                grpc_call_finish(fc->gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                break;
            }
            post(&fr->all->in, back);
            fr->wake_core = true;
        }
        break;
    }
    case XM_ADOPT:
    case XM_ZK_ADOPT:
        adopt_here(fr, m->op, m->status, (unsigned)m->rev);
        break;
    case XM_ZK_SEND:
        fz_answers(m->zr, m->data, m->len);
        if (m->zr->fconn != NULL && zk_conn_write(m->zr->fconn, m->data, m->len) == -ENOMEM)
            zk_conn_close(m->zr->fconn); /* a hole in the stream: the client starts over */
        break;
    case XM_ZK_PAUSE:
        m->zr->core_paused = m->status != 0;
        fz_pause_apply(m->zr);
        break;
    case XM_ZK_CLOSE:
        if (m->zr->fconn != NULL)
            zk_conn_close(m->zr->fconn);
        break;
    case XM_ZK_RELEASE:
        zrelay_free(m->zr);
        break;
    default:
        break;
    }
}

static void front_stop(struct front *fr);
static void on_front_handle_closed(uv_handle_t *h);
static void on_poll(uv_poll_t *h, int status, int events);

static void front_handle_fn(void *fr, struct xmsg *m)
{
    front_handle(fr, m);
}

static void on_front_wake(struct mailbox *mb)
{
    struct front *fr = mb->poll.data;
    drain(&fr->in, front_handle_fn, fr);
    fz_release_due(fr);
    if (atomic_load(&fr->start_accept) && !atomic_load(&fr->stop_accept) && fr->npolls == 0) {
        for (size_t k = 0; k < fr->all->nl + fr->all->nzl; k++) {
            int lfd = k < fr->all->nl ? fr->all->lfd[k] : fr->all->zk_lfd[k - fr->all->nl];
            uv_poll_init(&fr->loop, &fr->polls[k], lfd);
            fr->polls[k].data = fr;
            uv_poll_start(&fr->polls[k], UV_READABLE, on_poll);
            fr->npolls++;
        }
    }
    if (atomic_load(&fr->stop_accept) && !fr->polls_closed) {
        fr->polls_closed = true;
        for (size_t i = 0; i < fr->npolls; i++)
            uv_close((uv_handle_t *)&fr->polls[i], on_front_handle_closed);
        __atomic_add_fetch(&fr->all->quiet, 1, __ATOMIC_RELEASE);
    }
    if (atomic_load(&fr->stop))
        front_stop(fr);
}

static void on_front_prepare(uv_prepare_t *p)
{
    struct front *fr = p->data;
    for (struct fcall *fc = fr->plist, *next; fc != NULL; fc = next) {
        next = fc->pnext;
        size_t n = grpc_call_pending_bytes(fc->gc);
        atomic_store_explicit(&fc->grpc_pending, n, memory_order_relaxed);
        if (n == 0)
            plist_remove(fr, fc);
    }
    if (fr->wake_core) {
        fr->wake_core = false;
        mailbox_wake(&fr->all->in);
    }
}

/* the descriptor given up to shed a connection when there are none left.
 * Every accept takes spare_mu: the loops all poll the same listeners, and a
 * loop that accepted while another had just closed the spare took the freed
 * descriptor; the spare could not be opened again and, with no descriptor
 * left to shed with, waiting connections stayed in the backlog until some
 * other connection closed (test_bounds saw 20 s). An accept is one
 * non-blocking system call per connection: the lock costs nothing. */
static int spare_fd = -1;
static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shed_logged_ms, shed_count; /* under spare_mu */

static int open_spare(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int server_accept_client(int lfd)
{
    pthread_mutex_lock(&spare_mu);
    int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0 || (errno != EMFILE && errno != ENFILE)) {
        int e = errno;
        if (c >= 0 && spare_fd < 0)
            spare_fd = open_spare();
        pthread_mutex_unlock(&spare_mu);
        errno = e;
        return c;
    }
    int e = errno;
    if (spare_fd < 0) /* lost to another thread's open: try again */
        spare_fd = open_spare();
    if (spare_fd >= 0) {
        close(spare_fd);
        int t = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (t >= 0)
            close(t);
        spare_fd = open_spare();
    }
    shed_count++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    bool say = shed_logged_ms == 0 || now - shed_logged_ms >= 10000;
    if (say)
        shed_logged_ms = now;
    uint64_t n = shed_count;
    pthread_mutex_unlock(&spare_mu);
    if (say)
        log_warn("server",
                 "accept: %s: out of file descriptors: refusing client connections "
                 "(%llu so far; raise the limit, or set --max-client-connections below it)",
                 strerror(e), (unsigned long long)n);
    errno = EAGAIN;
    return -1;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct front *fr = h->data;
    (void)events;
    if (status < 0 || fr->grpc == NULL)
        return;
    int fd;
    uv_fileno((uv_handle_t *)h, &fd);
    /* whichever loop wakes first accepts; the connections go round the
     * loops in turn (a burst of them would otherwise all land on the loop
     * that happened to be awake) */
    int c = server_accept_client(fd);
    if (c < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR)
            log_warn("front", "accept: %s", strerror(errno));
        return;
    }
    struct fronts *all = fr->all;
    size_t k = (size_t)(h - fr->polls);
    enum xop op = XM_ADOPT;
    unsigned flags;
    if (k >= all->nl) { /* a ZooKeeper listener */
        op = XM_ZK_ADOPT;
        flags = all->zk_tls[k - all->nl];
    } else {
        const struct url *u = &all->s->cfg.listen_client[k];
        flags = (u->tls ? GRPC_ADOPT_TLS : 0) | (u->unix_sock ? GRPC_ADOPT_UNIX : 0);
    }
    unsigned to = __atomic_fetch_add(&all->next_accept, 1, __ATOMIC_RELAXED) % all->n;
    struct xmsg *m = to == fr->idx ? NULL : xmsg_new(op, NULL, c, NULL, 0);
    if (m == NULL) {
        adopt_here(fr, op, c, flags);
        return;
    }
    m->rev = flags;
    post(&all->f[to].in, m);
    mailbox_wake(&all->f[to].in);
}

static void on_front_handle_closed(uv_handle_t *h)
{
    (void)h; /* the loop ends when the last handle is closed */
}

static void on_front_closed(struct front *fr)
{
    if (--fr->closing > 0)
        return;
    arena_free(&fr->arena);
    buf_free(&fr->out);
    /* the resets above posted CLOSEs: the core learns of them when it
     * drains after the join */
    mailbox_close(&fr->in, on_front_handle_closed);
    uv_close((uv_handle_t *)&fr->prep, on_front_handle_closed);
}

static void on_front_grpc_closed(void *arg)
{
    struct front *fr = arg;
    fr->grpc = NULL;
    on_front_closed(fr);
}

static void on_front_zk_closed(void *arg)
{
    struct front *fr = arg;
    fr->zkl = NULL;
    on_front_closed(fr);
}

static void front_stop(struct front *fr)
{
    if (fr->stopped)
        return;
    fr->stopped = true;
    fr->closing = fr->zkl != NULL ? 2 : 1;
    /* every ZooKeeper connection's on_close posts its ZK_GONE */
    if (fr->zkl != NULL)
        zk_listener_close(fr->zkl, on_front_zk_closed, fr);
    grpc_server_close(fr->grpc, on_front_grpc_closed, fr);
}

static void pin_to(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int rv = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rv != 0)
        log_warn("front", "pinning to CPU %d: %s", cpu, strerror(rv));
}

static void front_run(void *arg)
{
    struct front *fr = arg;
    pin_to(fr->cpu);
    metrics_thread_attach(); /* this loop's shard (base/metrics.h) */
    /* the prepare handle must not keep a loop alive by itself: the loop
     * ends when every handle is closed */
    uv_run(&fr->loop, UV_RUN_DEFAULT);
    metrics_thread_detach();
}

/* ---- start and stop ---- */

unsigned fronts_count_auto(void)
{
    cpu_set_t set;
    int n = 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 1)
        return 0;
    if (n == 2)
        return 2;
    return n - 1 > CONFIG_MAX_FRONTS ? CONFIG_MAX_FRONTS : (unsigned)(n - 1);
}

static int allowed_cpus(int *cpus, int max)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

static void fronts_free(struct fronts *all)
{
    for (size_t i = 0; i < all->nl; i++) {
        close(all->lfd[i]);
        if (all->s->cfg.listen_client[i].unix_sock)
            unlink(all->s->cfg.listen_client[i].host);
    }
    for (size_t i = 0; i < all->nzl; i++)
        close(all->zk_lfd[i]);
    free(all->f);
    free(all);
}

int fronts_start(struct server *s, unsigned n, bool pin, const struct grpc_server_options *go,
                 int *fds, size_t nfds, struct fronts **out)
{
    if (front_methods == NULL)
        front_methods = server_grpc_methods(f_on_message, f_on_half_close, f_on_close);
    struct fronts *all = calloc(1, sizeof(*all));
    if (front_methods == NULL || all == NULL) {
        free(all);
        return -ENOMEM;
    }
    all->s = s;
    all->f = calloc(n, sizeof(*all->f));
    if (all->f == NULL) {
        free(all);
        return -ENOMEM;
    }
    /* the listeners are the server's, bound at start: ours from now */
    for (size_t i = 0; i < nfds; i++) {
        all->lfd[i] = fds[i];
        fds[i] = -1;
    }
    all->nl = nfds;
    int cpus[CPU_SETSIZE];
    int ncpu = pin ? allowed_cpus(cpus, CPU_SETSIZE) : 0;
    if (ncpu > 0)
        pin_to(cpus[0]);
    mailbox_init(&all->in);
    mailbox_listen(s->loop, &all->in, on_core_wake, all);
    uv_prepare_init(s->loop, &all->prep);
    all->prep.data = all;
    uv_prepare_start(&all->prep, on_core_prepare);
    uv_unref((uv_handle_t *)&all->prep);
    for (unsigned i = 0; i < n; i++) {
        struct front *fr = &all->f[i];
        fr->all = all;
        fr->idx = i;
        fr->cpu = ncpu > 0 ? cpus[(i + 1) % (unsigned)ncpu] : -1;
        mailbox_init(&fr->in);
        int rv = uv_loop_init(&fr->loop);
        if (rv == 0)
            rv = grpc_server_new(&fr->loop, front_methods, server_methods_n, go, fr, &fr->grpc);
        if (rv == 0 && s->cfg.n_listen_zk > 0)
            rv = zk_listener_new(&fr->loop, &fz_handler, fr, JUTE_MAX_BUFFER, &fr->zkl);
        if (rv != 0) {
            log_error("server", "starting front loop %u: %s", i, uv_strerror(rv));
            abort(); /* at start, with nothing served yet */
        }
        mailbox_listen(&fr->loop, &fr->in, on_front_wake, fr);
        uv_prepare_init(&fr->loop, &fr->prep);
        fr->prep.data = fr;
        uv_prepare_start(&fr->prep, on_front_prepare);
        /* the listeners are polled from fronts_accept on */
    }
    all->n = n; /* before any thread runs: they read it */
    for (unsigned i = 0; i < n; i++) {
        int rv = uv_thread_create(&all->f[i].thread, front_run, &all->f[i]);
        if (rv != 0) {
            log_error("server", "starting front loop %u: %s", i, uv_strerror(rv));
            abort();
        }
    }
    *out = all;
    return 0;
}

void fronts_add_zk(struct fronts *all, int fd, bool tls)
{
    all->zk_lfd[all->nzl] = fd;
    all->zk_tls[all->nzl] = tls;
    all->nzl++;
}

void fronts_accept(struct fronts *all)
{
    for (unsigned i = 0; i < all->n; i++) {
        atomic_store(&all->f[i].start_accept, true);
        mailbox_wake(&all->f[i].in);
    }
}

static void on_core_handle_closed(uv_handle_t *h)
{
    struct fronts *all = h->data;
    if (--all->closing > 0)
        return;
    void (*cb)(void *) = all->cb;
    void *arg = all->arg;
    fronts_free(all);
    if (cb)
        cb(arg);
}

void fronts_close(struct fronts *all, void (*cb)(void *arg), void *arg)
{
    all->cb = cb;
    all->arg = arg;
    /* first no loop accepts (so none hands a socket to a loop that is
     * closing), then they close */
    for (unsigned i = 0; i < all->n; i++) {
        atomic_store(&all->f[i].stop_accept, true);
        mailbox_wake(&all->f[i].in);
    }
    while (__atomic_load_n(&all->quiet, __ATOMIC_ACQUIRE) < all->n)
        usleep(200);
    for (unsigned i = 0; i < all->n; i++) {
        atomic_store(&all->f[i].stop, true);
        mailbox_wake(&all->f[i].in);
    }
    for (unsigned i = 0; i < all->n; i++) {
        uv_thread_join(&all->f[i].thread);
        uv_loop_close(&all->f[i].loop);
    }
    /* what the front loops posted last, then what they never read */
    all->stopping = true;
    core_drain(all);
    for (unsigned i = 0; i < all->n; i++) {
        struct cds_wfcq_head h;
        struct cds_wfcq_tail t;
        take_all(&all->f[i].in, &h, &t);
        struct xmsg *m;
        while ((m = next_msg(&h, &t)) != NULL) {
            if (m->op == XM_RELEASE) {
                free(m->fc);
            } else if (m->op == XM_SEND_TAKE) {
                struct buf b;
                memcpy(&b, m->data, sizeof(b));
                buf_free(&b);
            } else if (m->op == XM_ADOPT || m->op == XM_ZK_ADOPT) {
                close(m->status);
            } else if (m->op == XM_ZK_RELEASE) {
                zrelay_free(m->zr);
            }
            free(m);
        }
    }
    all->closing = 2;
    mailbox_close(&all->in, on_core_handle_closed);
    uv_close((uv_handle_t *)&all->prep, on_core_handle_closed);
}
