/* server/rangeread.c: big reads on reader threads.
 *
 * A Range (or a read-only Txn of Ranges) is first tried where it arrives,
 * on its loop, with a budget (apply_env.read_budget: index entries visited
 * and KiB fetched); most reads end well within it and are answered there,
 * as before. One that runs past it (-E2BIG) is handed to the core (a
 * front loop forwards the call), which gives it here: a reader thread
 * reads it whole from a detached read (mvcc_read_begin_detached: its own
 * LMDB read txn, the key index read under the shared read lock a thousand
 * entries at a time), encodes the reply and hands the bytes back to the
 * core, which sends them. No loop builds a big reply: the core's part is
 * the hand-off and one LMDB commit (below); the finished bytes are handed
 * to the call's output without a copy (qcall_send_take: the buffer moves
 * to grpc/, or to the front loop that owns the call).
 *
 * Revisions: the core commits its open batch before handing a read over,
 * so the last committed revision is the store's current one and the
 * reader reads at least there (serializable: everything the member has
 * answered; linearizable: the read index was reached before the core
 * served it, so the current revision is at or past it). A read at an
 * older revision fails "required revision has been compacted" exactly as
 * inline (mvcc checks it when the read starts). A compaction scheduled
 * above that revision, a defragmentation's swap or a snapshot's install
 * while a reader reads ends its read (-ESTALE at its next piece: the swap
 * does not wait for it); the core gives the read to a reader again, from
 * the start, at the then current revision (a read at an older revision
 * then fails compacted, as if it had arrived a moment later).
 *
 * The --max-range-response-bytes bound is apply's, on the reader as
 * inline: a Range past it stops there, with no more than the bound in
 * memory. At most READERS reads run at once (each holds at most the bound,
 * and its copy once encoded); more wait in the queue holding only their
 * request. Auth was checked where the request arrived, before its first
 * try. The readers are threads of their own, not libuv's pool, so that a
 * long read never delays a WAL fsync queued behind it.
 */
#include "server/server_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

#define READERS 2
/* a read ended under a reader this many times (swaps, compactions
 * scheduled above it) is read inline, whole, as before readers existed */
#define MAX_TRIES 8

struct rr_job {
    struct entry e; /* first: the call's data slot points here (its on_close
                       sets e.call to NULL: server_entry_call_closed) */
    struct rr_job *next;
    struct apply_env env; /* the server's, without the budget */
    int64_t min_rev;
    uint64_t cluster_id, member_id, term;
    unsigned tries;
    int rv;
    struct buf out;
};

struct rangereads {
    struct server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rr_job *q, *q_tail;       /* waiting for a reader (under mu) */
    struct rr_job *done, *done_tail; /* read, for the core (under mu) */
    bool stop;                       /* under mu */
    pthread_t th[READERS];
    int n;
    uv_async_t async;
};

static void job_free(struct rr_job *j)
{
    if (j->e.req != NULL)
        protobuf_c_message_free_unpacked(j->e.req, NULL);
    buf_free(&j->out);
    free(j);
}

static void push(struct rr_job **head, struct rr_job **tail, struct rr_job *j)
{
    j->next = NULL;
    if (*tail != NULL)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

/* read_job reads |j| on a reader: its packed reply in j->out, or j->rv. */
static void read_job(struct rangereads *p, struct rr_job *j)
{
    mvcc_read *rd;
    int rv = mvcc_read_begin_detached(p->s->kv, j->min_rev, &rd);
    if (rv != 0) {
        j->rv = rv;
        return;
    }
    struct arena a = {0};
    Etcdserverpb__ResponseHeader *h = NULL;
    const ProtobufCMessage *resp = NULL;
    if (j->e.kind == ENTRY_READ_RANGE) {
        Etcdserverpb__RangeResponse *r = NULL;
        rv = apply_range(&j->env, rd, (const Etcdserverpb__RangeRequest *)j->e.req, &a, &r);
        if (rv == 0) {
            h = r->header;
            resp = &r->base;
        }
    } else {
        Etcdserverpb__TxnResponse *r = NULL;
        rv = apply_txn_read(&j->env, rd, (const Etcdserverpb__TxnRequest *)j->e.req, &a, &r);
        if (rv == 0) {
            h = r->header;
            resp = &r->base;
        }
    }
    mvcc_read_end(rd);
    if (rv == 0) {
        /* as server_fill_header, with what the core saw when it handed
         * the read over (the reader must not read Raft's state) */
        h->cluster_id = j->cluster_id;
        h->member_id = j->member_id;
        h->raft_term = j->term;
        /* with room for the gRPC prefix: the call takes the buffer */
        size_t n = protobuf_c_message_get_packed_size(resp);
        buf_reset(&j->out);
        rv = buf_reserve(&j->out, GRPC_MSG_PREFIX + n);
        if (rv == 0)
            j->out.len =
                GRPC_MSG_PREFIX + protobuf_c_message_pack(resp, j->out.data + GRPC_MSG_PREFIX);
    }
    arena_free(&a);
    j->rv = rv;
}

static void *reader_main(void *arg)
{
    struct rangereads *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->q == NULL)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        struct rr_job *j = p->q;
        p->q = j->next;
        if (p->q == NULL)
            p->q_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        read_job(p, j);
        pthread_mutex_lock(&p->mu);
        push(&p->done, &p->done_tail, j);
        uv_async_send(&p->async);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* submit makes sure a reader can read what the core would answer now (the
 * open batch committed) and queues |j|. */
static void submit(struct server *s, struct rr_job *j)
{
    struct rangereads *p = s->rangereads;
    if (backend_batch_txn(s->be) != NULL)
        server_flush(s);
    j->min_rev = mvcc_rev(s->kv);
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    server_fill_header(s, &h);
    j->cluster_id = h.cluster_id;
    j->member_id = h.member_id;
    j->term = h.raft_term;
    j->rv = 0;
    buf_reset(&j->out);
    qcall_set_data(j->e.call, &j->e);
    pthread_mutex_lock(&p->mu);
    push(&p->q, &p->q_tail, j);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void server_read_elsewhere(struct server *s, qcall *call, enum entry_kind kind,
                           const ProtobufCMessage *req)
{
    struct rr_job *j = NULL;
    if (s->rangereads != NULL && (j = calloc(1, sizeof(*j))) != NULL) {
        /* the request is the caller's: a copy of our own */
        size_t n = protobuf_c_message_get_packed_size(req);
        uint8_t *b = malloc(n ? n : 1);
        if (b != NULL) {
            protobuf_c_message_pack(req, b);
            j->e.req = protobuf_c_message_unpack(req->descriptor, NULL, n, b);
            free(b);
        }
        if (j->e.req == NULL) {
            free(j);
            j = NULL;
        }
    }
    if (j == NULL) { /* no readers (or no memory for the job): as before */
        server_serve_read_whole(s, call, kind, req);
        return;
    }
    j->e.call = call;
    j->e.kind = kind;
    j->env = s->env;
    j->env.read_budget = 0;
    submit(s, j);
}

static void on_done(uv_async_t *a)
{
    struct rangereads *p = a->data;
    struct server *s = p->s;
    pthread_mutex_lock(&p->mu);
    struct rr_job *j = p->done;
    p->done = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    for (struct rr_job *next; j != NULL; j = next) {
        next = j->next;
        qcall *call = j->e.call;
        if (call == NULL) { /* the client went away */
            job_free(j);
            continue;
        }
        qcall_set_data(call, NULL);
        if (j->rv == -ESTALE || j->rv == -EAGAIN) {
            /* its read was ended under it: read it again, from the start */
            if (++j->tries < MAX_TRIES) {
                submit(s, j);
                continue;
            }
            server_serve_read_whole(s, call, j->e.kind, j->e.req);
        } else if (j->rv != 0) {
            server_reply_error(call, j->rv);
        } else {
            int rv = qcall_send_take(call, &j->out);
            if (rv != 0 && rv != -EPIPE)
                server_reply_error(call, rv);
            else
                qcall_finish(call, GRPC_STATUS_OK, NULL);
        }
        job_free(j);
    }
}

static void on_async_closed(uv_handle_t *h)
{
    struct rangereads *p = h->data;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int server_rangereads_start(struct server *s)
{
    struct rangereads *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->s = s;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rv = uv_async_init(s->loop, &p->async, on_done);
    if (rv != 0) {
        free(p);
        return rv;
    }
    p->async.data = p;
    uv_unref((uv_handle_t *)&p->async); /* the server's handles keep the loop */
    for (; p->n < READERS; p->n++) {
        rv = pthread_create(&p->th[p->n], NULL, reader_main, p);
        if (rv != 0) {
            log_warn("server", "starting a reader thread: %s", strerror(rv));
            break;
        }
    }
    if (p->n == 0) { /* no reader: big reads are read inline, as before */
        uv_close((uv_handle_t *)&p->async, on_async_closed);
        return 0;
    }
    s->rangereads = p;
    return 0;
}

void server_rangereads_stop(struct server *s)
{
    struct rangereads *p = s->rangereads;
    if (p == NULL)
        return;
    s->rangereads = NULL;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    /* end the reads under way (they fail -ESTALE at their next piece) */
    mvcc_exclusive_begin(s->kv);
    mvcc_release_reads(s->kv);
    mvcc_exclusive_end(s->kv);
    for (int i = 0; i < p->n; i++)
        pthread_join(p->th[i], NULL);
    /* the clients are gone: what is left is only freed */
    struct rr_job *lists[2] = {p->q, p->done};
    for (int k = 0; k < 2; k++)
        for (struct rr_job *j = lists[k], *next; j != NULL; j = next) {
            next = j->next;
            if (j->e.call != NULL)
                qcall_set_data(j->e.call, NULL);
            job_free(j);
        }
    p->q = p->done = NULL;
    uv_close((uv_handle_t *)&p->async, on_async_closed);
}
