/* server/maintenance_service.c: /etcdserverpb.Maintenance/ — Status,
 * HashKV, Hash, Alarm, Defragment and Snapshot; MoveLeader is in
 * members.c.
 *
 * Snapshot: a worker thread writes the store as etcd 3.4's backup format,
 * a bbolt file with etcd's buckets (etcdfmt_db_export, from one LMDB read
 * transaction, so writers go on), into an unlinked temp file in the data
 * dir; the loop then streams it in 32 KiB messages with remaining_bytes,
 * and last a message with the 32-byte SHA-256 of the bytes sent, as etcd
 * 3.4 does (no response header, as 3.4). `etcdctl snapshot save` stores
 * it; `etcdctl snapshot status/restore` and quorumctl's read it.
 *
 * Defragment: online; see the section below. */
#include "server/server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/err.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/version.h"
#include "etcdfmt/etcdfmt.h"


#define SNAPSHOT_CHUNK (32 * 1024)         /* etcd's snapshotSendBufferSize */
#define SNAPSHOT_MAX_PENDING (1024 * 1024) /* queued, unwritten bytes per call */

/* Copies running on worker threads: the store must not close (or be
 * swapped by a defragmentation) under them. One server per process. */
static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t copy_cv = PTHREAD_COND_INITIALIZER;
static int copies_running;

void server_copy_begin(void)
{
    pthread_mutex_lock(&copy_mu);
    copies_running++;
    pthread_mutex_unlock(&copy_mu);
}

void server_copy_end(void)
{
    pthread_mutex_lock(&copy_mu);
    copies_running--;
    pthread_cond_broadcast(&copy_cv);
    pthread_mutex_unlock(&copy_mu);
}

void server_snapshot_copies_wait(void)
{
    pthread_mutex_lock(&copy_mu);
    while (copies_running > 0)
        pthread_cond_wait(&copy_cv, &copy_mu);
    pthread_mutex_unlock(&copy_mu);
}

static void on_status(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *req =
        server_unpack(call, &etcdserverpb__status_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__StatusResponse r = ETCDSERVERPB__STATUS_RESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    r.version = (char *)QUORUM_ETCD_VERSION; /* etcd clients parse it: base/version.h */
    r.dbsize = (int64_t)backend_size(s->be);
    r.dbsizeinuse = (int64_t)backend_size_in_use(s->be);
    r.leader = server_leader(s);
    r.raftindex = s->raft ? raft_get_commit(s->raft) : 0;
    r.raftappliedindex = s->applied_index;
    r.raftterm = server_term(s);
    r.islearner = s->raft && raft_membership_is_learner(raft_get_membership(s->raft), s->member_id);
    /* etcd lists each alarm's text form */
    char text[ALARM_MAX][96];
    char *errs[ALARM_MAX];
    for (size_t i = 0; i < s->alarms.n; i++) {
        server_alarm_string(&s->alarms.a[i], text[i], sizeof(text[i]));
        errs[i] = text[i];
    }
    r.errors = errs;
    r.n_errors = s->alarms.n;
    server_reply(s, call, &r.base);
}

static void on_hash_kv(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin_raw(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__HashKVRequest *req = (Etcdserverpb__HashKVRequest *)server_unpack(
        call, &etcdserverpb__hash_kvrequest__descriptor, msg, len);
    if (req == NULL)
        return;
    uint32_t hash = 0;
    int64_t compact = 0;
    uint64_t t0 = metrics_now_ns();
    int rv = mvcc_hash_kv(s->kv, req->revision, &hash, &compact);
    if (rv == 0)
        metrics_observe_since(server_metrics.hash_rev_seconds, t0);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__HashKVResponse r = ETCDSERVERPB__HASH_KVRESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    r.hash = hash;
    r.compact_revision = compact;
    server_reply(s, call, &r.base);
}

/* ---- Hash ---- */

/* The databases in byte order of their names, as bbolt walks its buckets. */
static const struct {
    const char *name;
    enum backend_db db;
} hash_dbs[] = {
    {"auth", BACKEND_DB_AUTH},       {"authRoles", BACKEND_DB_AUTH_ROLES},
    {"authUsers", BACKEND_DB_AUTH_USERS}, {"key", BACKEND_DB_KEY},
    {"lease", BACKEND_DB_LEASE},     {"members", BACKEND_DB_MEMBERS},
    {"meta", BACKEND_DB_META},
};

/* Meta records that differ between members holding the same data. */
static bool hash_ignored(enum backend_db db, const MDB_val *k)
{
    if (db != BACKEND_DB_META)
        return false;
    static const char *const names[] = {"consistent_index", "term", SERVER_META_HAS_LOG};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (k->mv_size == strlen(names[i]) && memcmp(k->mv_data, names[i], k->mv_size) == 0)
            return true;
    return false;
}

/* hash_db is etcd's backend.Hash over LMDB: crc32c over each database's
 * name, then its keys and values in key order. The bytes are quorum's own
 * encodings, so the value is comparable between quorum members only. */
static int hash_db(struct server *s, uint32_t *out)
{
    MDB_txn *txn;
    int rv = backend_read_begin(s->be, &txn);
    if (rv != 0)
        return rv;
    uint32_t crc = 0;
    for (size_t i = 0; i < sizeof(hash_dbs) / sizeof(hash_dbs[0]) && rv == 0; i++) {
        crc = crc32c_update(crc, hash_dbs[i].name, strlen(hash_dbs[i].name));
        MDB_cursor *cur;
        int rc = mdb_cursor_open(txn, backend_dbi(s->be, hash_dbs[i].db), &cur);
        if (rc != 0) {
            rv = backend_err(rc);
            break;
        }
        MDB_val k, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (hash_ignored(hash_dbs[i].db, &k))
                continue;
            crc = crc32c_update(crc, k.mv_data, k.mv_size);
            crc = crc32c_update(crc, v.mv_data, v.mv_size);
        }
        if (rc != MDB_NOTFOUND)
            rv = backend_err(rc);
        mdb_cursor_close(cur);
    }
    backend_read_end(txn);
    *out = crc;
    return rv;
}

static void on_hash(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin_raw(call))
        return;
    struct server *s = server_of(call);
    ProtobufCMessage *req = server_unpack(call, &etcdserverpb__hash_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    uint32_t hash = 0;
    server_flush(s); /* hash_db reads committed state */
    uint64_t t0 = metrics_now_ns();
    int rv = hash_db(s, &hash);
    if (rv == 0)
        metrics_observe_since(server_metrics.hash_seconds, t0);
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__HashResponse r = ETCDSERVERPB__HASH_RESPONSE__INIT;
    server_fill_header(s, &h);
    r.header = &h;
    r.hash = hash;
    server_reply(s, call, &r.base);
}

/* ---- Alarm ---- */

static void on_alarm(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *req = server_unpack(call, &etcdserverpb__alarm_request__descriptor, msg, len);
    if (req == NULL)
        return;
    /* etcd's alarm path hands a bad token's error back untranslated */
    struct auth_info ai;
    char who[AUTH_NAME_MAX];
    if (server_call_identity(s, call, &ai, who, sizeof(who)) == QERR_INVALID_TOKEN) {
        qcall_finish(call, GRPC_STATUS_UNKNOWN, "auth: invalid auth token");
        protobuf_c_message_free_unpacked(req, NULL);
        return;
    }
    /* raising or clearing an alarm is an operator's act: root only (etcd
     * 3.4 lets anyone; listing stays open to all) */
    if (((Etcdserverpb__AlarmRequest *)req)->action != ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET &&
        !server_require_admin(call)) {
        protobuf_c_message_free_unpacked(req, NULL);
        return;
    }
    /* every action goes through the log, as etcd's (GET too: linearizable) */
    server_propose(s, call, ENTRY_ALARM, req);
}

/* ---- Defragment ----
 *
 * Online, in steps (backend_defrag_*): the loop commits the batch and opens
 * a read txn on the committed state; a worker thread rewrites that state
 * into data.mdb.defrag while the member goes on applying and serving, the
 * backend recording every write made meanwhile. Back on the loop, when
 * more than DEFRAG_CATCHUP_BYTES of writes came in, a worker replays them
 * into the copy while the next ones are recorded (at most DEFRAG_ROUNDS
 * times); then the loop writes the rest, syncs and swaps the copy in. The
 * loop is held only for that last step. Calls arriving meanwhile wait for
 * the one in progress. A snapshot installed meanwhile replaces the file
 * under the copy: the defragmentation starts over. */

#define DEFRAG_CATCHUP_BYTES (256 * 1024)
#define DEFRAG_ROUNDS 8
#define DEFRAG_RESTARTS 3

struct defrag_call {
    qcall *call;
    struct defrag_call *next;
};

struct defrag {
    struct server *s; /* NULL once the server closed */
    backend_defrag *job;
    uv_work_t work;
    bool copying; /* the worker's step: the copy (else a replay) */
    int err;
    int rounds, restarts;
    uint64_t t0, before, before_in_use;
    struct defrag_call *calls; /* waiting for the answer */
};

static void defrag_path(struct server *s, char *p, size_t n)
{
    snprintf(p, n, "%s/member/db/data.mdb.defrag", s->cfg.data_dir);
}

static void defrag_work(uv_work_t *w)
{
    struct defrag *d = w->data;
    if (d->copying) {
        d->err = backend_defrag_copy(d->job);
        server_copy_end(); /* done reading the store */
    } else {
        d->err = backend_defrag_replay(d->job);
    }
}

static void defrag_after(uv_work_t *w, int status);

static int defrag_queue(struct defrag *d, bool copying)
{
    d->copying = copying;
    if (copying)
        server_copy_begin();
    int rv = uv_queue_work(d->s->loop, &d->work, defrag_work, defrag_after);
    if (rv != 0 && copying)
        server_copy_end();
    return rv != 0 ? -ENOMEM : 0;
}

static void defrag_end(struct defrag *d, int rv);
static int defrag_begin(struct defrag *d);

/* defrag_begin_later and defrag_swap_later: what waited for an entry
 * applied across loop passes (server_apply_wait). */
static void defrag_begin_later(void *arg)
{
    struct defrag *d = arg;
    int rv = d->s == NULL ? QERR_STOPPED : defrag_begin(d);
    if (rv != 0)
        defrag_end(d, rv);
}

static int defrag_swap(struct defrag *d);

static void defrag_swap_later(void *arg)
{
    struct defrag *d = arg;
    defrag_end(d, d->s == NULL ? QERR_STOPPED : defrag_swap(d));
}

/* defrag_begin starts a copy of the committed state: not between the
 * steps of a revision (the revision's txn is open on the file), it waits
 * for its end. */
static int defrag_begin(struct defrag *d)
{
    if (server_apply_wait(d->s, defrag_begin_later, d))
        return 0;
    char tmp[1200];
    defrag_path(d->s, tmp, sizeof(tmp));
    server_flush(d->s);
    int rv = backend_defrag_begin(d->s->be, tmp, &d->job);
    if (rv == 0 && (rv = defrag_queue(d, true)) != 0) {
        backend_defrag_cancel(d->job);
        d->job = NULL;
    }
    return rv;
}

/* defrag_end answers every waiting call and frees |d|. */
static void defrag_end(struct defrag *d, int rv)
{
    if (d->job != NULL)
        backend_defrag_cancel(d->job);
    if (d->s != NULL)
        d->s->defrag = NULL;
    metrics_gauge_add(server_metrics.defrag_inflight, -1);
    struct defrag_call *c;
    while ((c = d->calls) != NULL) {
        d->calls = c->next;
        qcall_set_data(c->call, NULL);
        if (rv != 0) {
            server_reply_error(c->call, rv);
        } else {
            /* etcd 3.4 answers an empty DefragmentResponse (no header) */
            Etcdserverpb__DefragmentResponse r = ETCDSERVERPB__DEFRAGMENT_RESPONSE__INIT;
            server_reply(d->s, c->call, &r.base);
        }
        free(c);
    }
    free(d);
}

/* ---- retired database files ---- */

struct retired {
    uv_work_t work;
    int fd;
};

/* The file is shrunk a piece at a time before the last close: freeing a
 * gigabyte of blocks in one go makes one large journal transaction, and
 * the loop's next fdatasync of the live database waited for it (140 ms
 * seen on ext4 after a defragmentation of 1.8 GB). */
#define RETIRE_STEP_BYTES (32 << 20)

static void retired_close(uv_work_t *w)
{
    struct retired *r = w->data;
    struct stat st;
    if (fstat(r->fd, &st) == 0 && st.st_nlink == 0) { /* unlinked: nobody else sees it */
        int wfd = -1;
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
        wfd = open(path, O_WRONLY | O_CLOEXEC); /* |fd| is read-only */
        for (off_t size = st.st_size; wfd >= 0 && size > 0;) {
            size = size > RETIRE_STEP_BYTES ? size - RETIRE_STEP_BYTES : 0;
            if (ftruncate(wfd, size) != 0)
                break;
            struct timespec pause = {0, 2000000};
            nanosleep(&pause, NULL);
        }
        if (wfd >= 0)
            close(wfd);
    }
    close(r->fd); /* the file's last reference: what is left is freed here */
}

static void retired_done(uv_work_t *w, int status)
{
    free(w->data);
}

void server_close_retired(struct server *s)
{
    int fd = backend_take_retired(s->be);
    if (fd < 0)
        return;
    struct retired *r = malloc(sizeof(*r));
    if (r != NULL) {
        r->fd = fd;
        r->work.data = r;
        if (uv_queue_work(s->loop, &r->work, retired_close, retired_done) == 0)
            return;
        free(r);
    }
    close(fd);
}

/* defrag_swap writes the last writes into the copy and swaps it in: the
 * only step that holds the loop. */
static int defrag_swap(struct defrag *d)
{
    struct server *s = d->s;
    uint64_t t = uv_hrtime();
    size_t rest = backend_defrag_pending(d->job);
    server_snapshot_copies_wait(); /* the old file goes */
    mvcc_exclusive_begin(s->kv);   /* front loops' reads of it end first */
    mvcc_release_reads(s->kv);     /* its spare read txns too */
    int rv = backend_defrag_finish(d->job);
    mvcc_exclusive_end(s->kv);
    d->job = NULL;
    if (rv != 0 && backend_env(s->be) == NULL) {
        /* neither file could be reopened: nothing can be served (etcd
         * panics when its defragmented db does not open) */
        log_error("maintenance", "defragment: cannot reopen the database: %s; stopping",
                  q_strerror(rv));
        abort();
    }
    if (rv != 0) {
        log_error("maintenance", "defragment: swapping the copy in failed: %s", q_strerror(rv));
        return rv;
    }
    server_close_retired(s);
    uint64_t now = uv_hrtime();
    metrics_observe(server_metrics.defrag_seconds, (double)(now - d->t0) / 1e9);
    server_metrics_db_changed();
    /* etcd's mvcc/backend line, then quorum's own figures: the catch-up
     * rounds, and how long the last one and the swap held the loop */
    uint64_t size = backend_size(s->be), in_use = backend_size_in_use(s->be);
    char path[1100], h_size[32], h_in_use[32];
    snprintf(path, sizeof(path), "%s/member/db/data.mdb", s->cfg.data_dir);
    log_human_bytes(h_size, sizeof(h_size), size);
    log_human_bytes(h_in_use, sizeof(h_in_use), in_use);
    log_kv(LOG_INFO, "maintenance", "defragmented", LF_STR("path", path),
           LF_INT("current-db-size-bytes-diff", (int64_t)size - (int64_t)d->before),
           LF_UINT("current-db-size-bytes", size), LF_STR("current-db-size", h_size),
           LF_INT("current-db-size-in-use-bytes-diff", (int64_t)in_use - (int64_t)d->before_in_use),
           LF_UINT("current-db-size-in-use-bytes", in_use),
           LF_STR("current-db-size-in-use", h_in_use), LF_DUR("took", now - d->t0),
           LF_INT("catch-up-rounds", d->rounds), LF_UINT("last-catch-up-bytes", rest),
           LF_DUR("loop-held", now - t));
    log_info("maintenance", "finished defragment");
    return 0;
}

static void defrag_after(uv_work_t *w, int status)
{
    struct defrag *d = w->data;
    if (d->s == NULL) { /* the server closed meanwhile */
        defrag_end(d, QERR_STOPPED);
        return;
    }
    int rv = status != 0 ? -ECANCELED : d->err;
    if (rv == 0 && backend_defrag_stale(d->job)) {
        /* a snapshot replaced the store under the copy */
        backend_defrag_cancel(d->job);
        d->job = NULL;
        if (++d->restarts > DEFRAG_RESTARTS) {
            rv = QERR_STORAGE;
        } else {
            log_info("maintenance", "defragment: the database was replaced; starting over");
            d->rounds = 0;
            if ((rv = defrag_begin(d)) == 0)
                return;
        }
    }
    if (rv != 0) {
        log_kv(LOG_WARN, "maintenance", "failed to defragment", LF_STR("error", q_strerror(rv)),
               LF_STR("step", d->copying ? "copying the database" : "catching the copy up"));
        defrag_end(d, rv);
        return;
    }
    server_flush(d->s); /* what was applied is recorded: commit it */
    if (backend_defrag_pending(d->job) > DEFRAG_CATCHUP_BYTES && d->rounds < DEFRAG_ROUNDS) {
        d->rounds++;
        backend_defrag_take(d->job);
        if ((rv = defrag_queue(d, false)) == 0)
            return;
        defrag_end(d, rv);
        return;
    }
    if (server_apply_wait(d->s, defrag_swap_later, d))
        return; /* the swap replaces the file the revision's txn is open on */
    defrag_end(d, defrag_swap(d));
}

static void on_defragment(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin_raw(call))
        return;
    struct server *s = server_of(call);
    ProtobufCMessage *req =
        server_unpack(call, &etcdserverpb__defragment_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    struct defrag_call *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        server_reply_error(call, -ENOMEM);
        return;
    }
    c->call = call;
    struct defrag *d = s->defrag;
    if (d == NULL) {
        d = calloc(1, sizeof(*d));
        if (d == NULL) {
            free(c);
            server_reply_error(call, -ENOMEM);
            return;
        }
        d->s = s;
        d->work.data = d;
        d->t0 = uv_hrtime();
        d->before = backend_size(s->be);
        d->before_in_use = backend_size_in_use(s->be);
        /* etcd's two lines at the start (v3rpc, then mvcc/backend) */
        log_info("maintenance", "starting defragment");
        char path[1100], h_size[32], h_in_use[32];
        snprintf(path, sizeof(path), "%s/member/db/data.mdb", s->cfg.data_dir);
        log_human_bytes(h_size, sizeof(h_size), d->before);
        log_human_bytes(h_in_use, sizeof(h_in_use), d->before_in_use);
        log_kv(LOG_INFO, "maintenance", "defragmenting", LF_STR("path", path),
               LF_UINT("current-db-size-bytes", d->before), LF_STR("current-db-size", h_size),
               LF_UINT("current-db-size-in-use-bytes", d->before_in_use),
               LF_STR("current-db-size-in-use", h_in_use));
        int rv = defrag_begin(d);
        if (rv != 0) {
            log_error("maintenance", "defragment: starting failed: %s", q_strerror(rv));
            free(d);
            free(c);
            server_reply_error(call, rv);
            return;
        }
        s->defrag = d;
        metrics_gauge_add(server_metrics.defrag_inflight, 1);
    }
    /* a call arriving during a defragmentation waits for it: what it
     * asked for (a compact file) is what that one makes */
    c->next = d->calls;
    d->calls = c;
    qcall_set_data(call, c);
}

static void on_defragment_close(qcall *call)
{
    struct defrag_call *c = qcall_get_data(call);
    struct server *s = server_of(call);
    if (c == NULL || s->defrag == NULL)
        return;
    for (struct defrag_call **pp = &s->defrag->calls; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            free(c);
            return;
        }
}

void server_defrag_detach(struct server *s)
{
    if (s->defrag == NULL)
        return;
    /* its calls are closed; the worker's step ends in defrag_after */
    struct defrag_call *c;
    while ((c = s->defrag->calls) != NULL) {
        s->defrag->calls = c->next;
        free(c);
    }
    s->defrag->s = NULL;
    s->defrag = NULL;
}

/* ---- Snapshot ---- */

struct snap {
    qcall *call; /* NULL once the client went away */
    struct server *s;
    uv_work_t work;
    struct etcdfmt_export_opts opts;
    uint64_t learners[RAFT_MAX_MEMBERS];
    char errtext[256];
    uv_timer_t timer; /* retries while the call's output is backed up */
    bool timer_inited, working;
    int fd;
    int err; /* worker's result: 0 or quorum's code (errtext says more) */
    uint64_t total, sent;
    uint64_t t0; /* etcd_disk_backend_snapshot_duration_seconds: copy and send */
    struct sha256 sha;
};

static void snap_free_cb(uv_handle_t *h)
{
    free(h->data);
}

static void snap_free(struct snap *st)
{
    if (st->fd >= 0)
        close(st->fd);
    st->fd = -1;
    if (st->timer_inited) {
        uv_close((uv_handle_t *)&st->timer, snap_free_cb);
        return;
    }
    free(st);
}

static void snap_copy(uv_work_t *w)
{
    struct snap *st = w->data;
    st->err = etcdfmt_db_export(st->s->be, st->fd, &st->opts, NULL, NULL, st->errtext,
                                sizeof(st->errtext));
    server_copy_end();
}

static void snap_pump(uv_timer_t *t);

/* send_some streams chunks while the call's output is not backed up;
 * returns true when the stream is finished (or failed). */
static bool send_some(struct snap *st)
{
    uint8_t buf[SNAPSHOT_CHUNK];
    while (st->sent < st->total) {
        if (qcall_pending_bytes(st->call) >= SNAPSHOT_MAX_PENDING)
            return false;
        size_t want = st->total - st->sent < SNAPSHOT_CHUNK ? st->total - st->sent : SNAPSHOT_CHUNK;
        ssize_t n = pread(st->fd, buf, want, (off_t)st->sent);
        if (n <= 0) {
            log_error("maintenance", "snapshot: reading the copy failed: %s",
                      n < 0 ? strerror(errno) : "short file");
            server_reply_error(st->call, QERR_STORAGE);
            return true;
        }
        st->sent += (uint64_t)n;
        sha256_update(&st->sha, buf, (size_t)n);
        Etcdserverpb__SnapshotResponse r = ETCDSERVERPB__SNAPSHOT_RESPONSE__INIT;
        r.remaining_bytes = st->total - st->sent;
        r.blob = (ProtobufCBinaryData){(size_t)n, buf};
        int rv = server_send(st->s, st->call, &r.base);
        if (rv != 0) {
            if (rv != -EPIPE)
                server_reply_error(st->call, rv);
            return true;
        }
    }
    /* the digest etcd's client checks on restore */
    uint8_t digest[32];
    sha256_final(&st->sha, digest);
    Etcdserverpb__SnapshotResponse r = ETCDSERVERPB__SNAPSHOT_RESPONSE__INIT;
    r.blob = (ProtobufCBinaryData){sizeof(digest), digest};
    server_reply(st->s, st->call, &r.base);
    metrics_observe_since(server_metrics.snapshot_seconds, st->t0);
    log_info("maintenance", "sent a database snapshot of %llu bytes",
             (unsigned long long)st->total);
    return true;
}

static void snap_pump(uv_timer_t *t)
{
    struct snap *st = t->data;
    if (st->call == NULL || send_some(st)) {
        if (st->call != NULL)
            qcall_set_data(st->call, NULL);
        uv_timer_stop(t);
        snap_free(st);
    }
}

static void snap_copied(uv_work_t *w, int status)
{
    struct snap *st = w->data;
    st->working = false;
    if (st->call == NULL) {
        snap_free(st); /* the client left while we copied */
        return;
    }
    off_t end = st->err == 0 ? lseek(st->fd, 0, SEEK_END) : -1;
    if (status != 0 || st->err != 0 || end < 0) {
        log_error("maintenance", "snapshot: writing the database failed: %s",
                  st->err ? st->errtext : strerror(errno));
        server_reply_error(st->call, QERR_STORAGE);
        qcall_set_data(st->call, NULL);
        snap_free(st);
        return;
    }
    st->total = (uint64_t)end;
    log_info("maintenance", "sending a database snapshot of %llu bytes",
             (unsigned long long)st->total);
    uv_timer_init(st->s->loop, &st->timer);
    st->timer.data = st;
    st->timer_inited = true;
    /* first pass now; then every 2 ms while the output is backed up */
    uv_timer_start(&st->timer, snap_pump, 0, 2);
}

static void snap_start(void *arg);

static void on_snapshot(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin_raw(call))
        return;
    struct server *s = server_of(call);
    ProtobufCMessage *req =
        server_unpack(call, &etcdserverpb__snapshot_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    struct snap *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        server_reply_error(call, -ENOMEM);
        return;
    }
    st->fd = -1;
    char path[1200];
    snprintf(path, sizeof(path), "%s/member/db/snapshot.XXXXXX", s->cfg.data_dir);
    st->fd = mkostemp(path, O_CLOEXEC);
    if (st->fd < 0) {
        log_error("maintenance", "snapshot: cannot create %s: %s", path, strerror(errno));
        free(st);
        server_reply_error(call, QERR_STORAGE);
        return;
    }
    unlink(path); /* gone with the last close, whatever happens */
    st->call = call;
    st->s = s;
    st->t0 = metrics_now_ns();
    st->working = true;
    qcall_set_data(call, st);
    /* not between the steps of a revision: the committed state is then
     * the steps so far, a partial revision (quorumStepRev) that only its
     * log entry completes, and a restore has no log */
    if (!server_apply_wait(s, snap_start, st))
        snap_start(st);
}

/* snap_start copies the committed state on a worker. */
static void snap_start(void *arg)
{
    struct snap *st = arg;
    struct server *s = st->s;
    if (st->call == NULL) {
        snap_free(st); /* the client left while the copy waited */
        return;
    }
    server_flush(s); /* the copy is of committed state: make it current */
    /* who is a learner is Raft's to say, not the members database's */
    if (s->raft != NULL) {
        const struct raft_membership *m = raft_get_membership(s->raft);
        for (uint32_t i = 0; i < m->n_learners && i < RAFT_MAX_MEMBERS; i++)
            st->learners[i] = m->learners[i];
        st->opts.learners = st->learners;
        st->opts.n_learners = m->n_learners < RAFT_MAX_MEMBERS ? m->n_learners : RAFT_MAX_MEMBERS;
    }
    sha256_init(&st->sha);
    st->work.data = st;
    server_copy_begin();
    int rv = uv_queue_work(s->loop, &st->work, snap_copy, snap_copied);
    if (rv != 0) {
        server_copy_end();
        qcall_set_data(st->call, NULL);
        server_reply_error(st->call, -ENOMEM);
        snap_free(st);
    }
}

static void on_snapshot_close(qcall *call)
{
    struct snap *st = qcall_get_data(call);
    if (st == NULL)
        return;
    qcall_set_data(call, NULL);
    st->call = NULL;
    /* a copy in flight frees |st| when it completes; a stream in progress
     * does on its next timer tick */
}

const struct qcall_method server_maintenance_methods[] = {
    {"/etcdserverpb.Maintenance/Status", QCALL_UNARY, on_status, NULL, NULL},
    {"/etcdserverpb.Maintenance/MoveLeader", QCALL_UNARY, server_on_move_leader, NULL, NULL},
    {"/etcdserverpb.Maintenance/HashKV", QCALL_UNARY, on_hash_kv, NULL, NULL},
    {"/etcdserverpb.Maintenance/Hash", QCALL_UNARY, on_hash, NULL, NULL},
    {"/etcdserverpb.Maintenance/Alarm", QCALL_UNARY, on_alarm, NULL, NULL},
    {"/etcdserverpb.Maintenance/Defragment", QCALL_UNARY, on_defragment, NULL,
     on_defragment_close},
    {"/etcdserverpb.Maintenance/Snapshot", QCALL_SERVER_STREAMING, on_snapshot, NULL,
     on_snapshot_close},
};
const size_t server_maintenance_methods_n =
    sizeof(server_maintenance_methods) / sizeof(server_maintenance_methods[0]);
