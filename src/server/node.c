/* server/node.c: the member's Raft side — the Ready loop, proposals and
 * their forwarding, linearizable reads, peers, snapshots and log compaction.
 *
 * THE PASS (server_node_pass, from a uv_check handle right after the loop
 * read everything that had arrived, and after each tick):
 *   1. writes queued in this pass are proposed: on the leader with
 *      raft_propose; on a follower they go to the leader in one
 *      TRANSPORT_MSG_PROP message; with no leader known they stay queued
 *      until one is (or until they time out, as etcd's proposals wait);
 *   2. linearizable reads that arrived ask for one read index together;
 *   3. Ready rounds: a received snapshot is installed, entries and hard
 *      state go to the WAL with one fdatasync, then messages are sent,
 *      committed entries are applied in one LMDB batch that also records
 *      the consistent index, the writes they belong to are answered, reads
 *      whose index is applied are served, raft_advance;
 *   4. every --snapshot-count applied entries a snapshot marker lets the
 *      WAL's older segments go; the core's in-memory log keeps the last
 *      LOG_KEEP_ENTRIES applied entries (more on a leader for a follower
 *      that needs them, until the next snapshot; fewer past
 *      --max-raft-log-bytes: trim_log, raft_compact_keep).
 *
 * A log entry's data: u8 kind (enum entry_kind), u8 flags (1: the server's
 * own write), u64 proposer member id, u64 proposal number (little-endian),
 * then the request as protobuf. Every member applies every entry; the
 * proposer recognises its own by (member id, number) and answers the
 * client then. So a follower needs nothing back from the leader: a lost
 * forward simply times out ("etcdserver: request timed out"), as etcd's.
 *
 * Snapshots: the Raft core's snapshots carry no data. The state is the LMDB
 * file: when the core wants to send a snapshot, this member copies its
 * database (consistent, at its applied index A >= the snapshot's index) and
 * streams the file; the receiver swaps its database for it and skips every
 * committed entry at or below the copy's consistent index, so entries
 * between the snapshot's index and A are not applied twice. */
#include "server/server_int.h"
#include "server/front.h"
#include "server/zk_service.h"
#include "server/zk_write.h"
#include "zk.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "transport/transport.h"
#include "wal/wal.h"

/* A log entry's header: server_int.h (ENTRY_HDR, server_entry_encode). */
#define SWEEP_MS 100
#define PURGE_INTERVAL_MS 30000 /* etcd's purgeFileInterval */
#define BATCH_INTERVAL_MS 100  /* etcd's --backend-batch-interval */
#define BATCH_MAX_ENTRIES 10000 /* etcd's --backend-batch-limit */
/* The Raft core keeps applied entries in memory for followers that lag
 * (raft_trim_log): LOG_KEEP_ENTRIES behind the applied index (etcd keeps
 * snapshotCatchUpEntries = 5000 after a snapshot), dropped LOG_TRIM_STEP at a
 * time. */
#define LOG_KEEP_ENTRIES 5000
#define LOG_TRIM_STEP 1024
/* A commit or sync that holds the loop longer than this is logged (as etcd
 * warns of a slow backend commit). */
#define SLOW_COMMIT_MS 50
/* An entry whose apply takes longer counts in etcd_server_slow_apply_total
 * (etcd's warnApplyDuration). */
#define SLOW_APPLY_NS (100 * 1000 * 1000ull)

static void defer_msg(struct server *s, const struct raft_msg *m);

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- entry lists ---- */

static void list_push(struct entry_list *l, struct entry *e)
{
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

static void list_remove(struct entry_list *l, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->next = e->prev = NULL;
}

static void free_entry(struct entry *e)
{
    if (e->seq != 0) /* a write this member proposed: no longer pending */
        metrics_gauge_add(server_metrics.proposals_pending, -1);
    if (e->req)
        protobuf_c_message_free_unpacked(e->req, NULL);
    buf_free(&e->data);
    buf_free(&e->out);
    free(e);
}

/* finish answers |e| (its err, or its packed response) and frees it. */
static void finish(struct server *s, struct entry *e)
{
    if (e->done != NULL)
        e->done(s, e->err, e->out.data, e->out.len, e->done_arg);
    if (e->call != NULL) {
        qcall_set_data(e->call, NULL);
        if (e->err != 0) {
            server_reply_error(e->call, e->err);
        } else {
            qcall_send(e->call, e->out.data, e->out.len);
            qcall_finish(e->call, GRPC_STATUS_OK, NULL);
        }
    }
    free_entry(e);
}

static void fail(struct server *s, struct entry *e, int err)
{
    if (e->seq != 0) /* not applied: timed out, refused by Raft, stopped */
        metrics_inc(server_metrics.proposals_failed);
    e->err = err;
    buf_reset(&e->out);
    finish(s, e);
}

/* ---- accessors ---- */

bool server_is_leader(const struct server *s)
{
    return s->raft != NULL && raft_get_role(s->raft) == RAFT_LEADER;
}

uint64_t server_leader(const struct server *s)
{
    return s->raft != NULL ? raft_get_leader(s->raft) : 0;
}

uint64_t server_term(const struct server *s)
{
    return s->raft != NULL ? raft_get_term(s->raft) : 0;
}

/* ---- queueing writes ---- */

static const ProtobufCMessageDescriptor *entry_desc(unsigned kind)
{
    switch (kind) {
    case ENTRY_PUT:
        return &etcdserverpb__put_request__descriptor;
    case ENTRY_DELETE_RANGE:
        return &etcdserverpb__delete_range_request__descriptor;
    case ENTRY_TXN:
        return &etcdserverpb__txn_request__descriptor;
    case ENTRY_COMPACT:
        return &etcdserverpb__compaction_request__descriptor;
    case ENTRY_LEASE_GRANT:
        return &etcdserverpb__lease_grant_request__descriptor;
    case ENTRY_LEASE_REVOKE:
        return &etcdserverpb__lease_revoke_request__descriptor;
    case ENTRY_LEASE_CHECKPOINT:
        return &etcdserverpb__lease_checkpoint_request__descriptor;
    case ENTRY_ALARM:
        return &etcdserverpb__alarm_request__descriptor;
    case ENTRY_MEMBER:
        return &etcdserverpb__member__descriptor;
    case ENTRY_AUTH_ENABLE:
        return &etcdserverpb__auth_enable_request__descriptor;
    case ENTRY_AUTH_DISABLE:
        return &etcdserverpb__auth_disable_request__descriptor;
    case ENTRY_AUTHENTICATE:
        return &etcdserverpb__internal_authenticate_request__descriptor;
    case ENTRY_AUTH_USER_ADD:
        return &etcdserverpb__auth_user_add_request__descriptor;
    case ENTRY_AUTH_USER_GET:
        return &etcdserverpb__auth_user_get_request__descriptor;
    case ENTRY_AUTH_USER_LIST:
        return &etcdserverpb__auth_user_list_request__descriptor;
    case ENTRY_AUTH_USER_DELETE:
        return &etcdserverpb__auth_user_delete_request__descriptor;
    case ENTRY_AUTH_USER_CHANGE_PASSWORD:
        return &etcdserverpb__auth_user_change_password_request__descriptor;
    case ENTRY_AUTH_USER_GRANT_ROLE:
        return &etcdserverpb__auth_user_grant_role_request__descriptor;
    case ENTRY_AUTH_USER_REVOKE_ROLE:
        return &etcdserverpb__auth_user_revoke_role_request__descriptor;
    case ENTRY_AUTH_ROLE_ADD:
        return &etcdserverpb__auth_role_add_request__descriptor;
    case ENTRY_AUTH_ROLE_GET:
        return &etcdserverpb__auth_role_get_request__descriptor;
    case ENTRY_AUTH_ROLE_LIST:
        return &etcdserverpb__auth_role_list_request__descriptor;
    case ENTRY_AUTH_ROLE_DELETE:
        return &etcdserverpb__auth_role_delete_request__descriptor;
    case ENTRY_AUTH_ROLE_GRANT_PERMISSION:
        return &etcdserverpb__auth_role_grant_permission_request__descriptor;
    case ENTRY_AUTH_ROLE_REVOKE_PERMISSION:
        return &etcdserverpb__auth_role_revoke_permission_request__descriptor;
    case ENTRY_ZK_WRITE:
        return &quorumzk__write__descriptor;
    default:
        return NULL;
    }
}

int server_entry_encode(struct buf *out, enum entry_kind kind, bool internal, uint64_t proposer,
                        uint64_t seq, const char *user, uint64_t auth_rev,
                        const ProtobufCMessage *msg, size_t *hdr_len)
{
    size_t ulen = user != NULL ? strlen(user) : 0;
    if (ulen > 0xffff)
        return -EINVAL;
    size_t hdr = ENTRY_HDR + (user != NULL ? ENTRY_AUTH_FIXED + ulen + 1 : 0);
    /* a ZooKeeper write, the one kind made for every write of its face,
     * is packed by hand (zk_write.h): the same bytes */
    bool zk = msg->descriptor == &quorumzk__write__descriptor;
    size_t n = zk ? zk_write_size((const Quorumzk__Write *)msg)
                  : protobuf_c_message_get_packed_size(msg);
    buf_reset(out);
    if (buf_reserve(out, hdr + n + 1) != 0)
        return -ENOMEM;
    uint8_t *d = out->data;
    d[0] = (uint8_t)kind;
    d[1] = (uint8_t)((internal ? ENTRY_FLAG_INTERNAL : 0) | (user != NULL ? ENTRY_FLAG_AUTH : 0));
    put_le64(d + 2, proposer);
    put_le64(d + 10, seq);
    if (user != NULL) {
        uint8_t *p = d + ENTRY_HDR;
        put_le64(p, auth_rev);
        p[8] = (uint8_t)ulen;
        p[9] = (uint8_t)(ulen >> 8);
        memcpy(p + ENTRY_AUTH_FIXED, user, ulen + 1);
    }
    out->len = hdr + (zk ? zk_write_pack((const Quorumzk__Write *)msg, d + hdr)
                         : protobuf_c_message_pack(msg, d + hdr));
    if (hdr_len != NULL)
        *hdr_len = hdr;
    return 0;
}

/* queue_write encodes |msg| as a log entry and queues it for this pass.
 * A client's write carries who sent it when auth is on (checked at apply);
 * an invalid token is refused here, as etcd refuses the proposal. */
static int queue_write(struct server *s, qcall *call, enum entry_kind kind,
                       const ProtobufCMessage *msg, server_done_fn done, void *arg, bool internal)
{
    struct auth_info ai = {NULL, 0};
    char user[AUTH_NAME_MAX];
    if (s->disk_full || s->db_full)
        return QERR_NO_SPACE; /* the disk cannot take it: hold_for_space, db_reserve */
    if (call != NULL && !internal) {
        int rv = server_call_identity(s, call, &ai, user, sizeof(user));
        if (rv != 0)
            return rv;
    }
    struct entry *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    size_t hdr = 0;
    int erv = server_entry_encode(&e->data, kind, internal, s->member_id, s->next_seq + 1, ai.user,
                                  ai.revision, msg, &hdr);
    if (erv != 0) {
        buf_free(&e->data);
        free(e);
        return erv;
    }
    e->seq = ++s->next_seq;
    metrics_gauge_add(server_metrics.proposals_pending, 1);
    if (msg->n_unknown_fields > 0) {
        /* a request with fields we do not know is passed on as it came;
         * make sure every member will be able to read it back */
        ProtobufCMessage *back = protobuf_c_message_unpack(msg->descriptor, NULL,
                                                           e->data.len - hdr, e->data.data + hdr);
        if (back == NULL) {
            free_entry(e);
            return QERR_UNDECODABLE;
        }
        protobuf_c_message_free_unpacked(back, NULL);
    }
    e->kind = kind;
    e->internal = internal;
    e->call = call;
    e->done = done;
    e->done_arg = arg;
    e->deadline = uv_now(s->loop) + s->request_timeout_ms;
    if (call != NULL)
        qcall_set_data(call, e);
    list_push(&s->queued, e);
    return 0;
}

/* retry_old_auth: a client's write that this member proposed with an auth
 * revision older than the one in force when it applied ("revision of auth
 * store is old": an auth change was applied between the proposal and the
 * entry) is proposed again with the identity as it is now, as etcd's
 * raftRequest loops on ErrAuthOldRevision; the client sees the error only
 * if its token no longer passes. Keeps the request's deadline. Returns
 * true when |e| was taken care of (re-proposed or answered) and freed. */
static bool retry_old_auth(struct server *s, struct entry *e)
{
    if (e->err != QERR_AUTH_OLD_REVISION || e->call == NULL || e->internal || e->done != NULL ||
        e->data.len < ENTRY_HDR)
        return false;
    const uint8_t *d = e->data.data;
    size_t hdr = ENTRY_HDR;
    if (!(d[1] & ENTRY_FLAG_AUTH) || e->data.len < ENTRY_HDR + ENTRY_AUTH_FIXED)
        return false;
    hdr += ENTRY_AUTH_FIXED + ((size_t)d[ENTRY_HDR + 8] | (size_t)d[ENTRY_HDR + 9] << 8) + 1;
    /* only when the identity now carries a newer revision: a JWT's is the
     * one it was minted at, and stays refused (as etcd answers it) */
    struct auth_info ai = {NULL, 0};
    char user[AUTH_NAME_MAX];
    if (server_call_identity(s, e->call, &ai, user, sizeof(user)) != 0 ||
        ai.revision <= get_le64(d + ENTRY_HDR))
        return false;
    const ProtobufCMessageDescriptor *desc = entry_desc(e->kind);
    if (desc == NULL || hdr > e->data.len)
        return false;
    ProtobufCMessage *req = protobuf_c_message_unpack(desc, NULL, e->data.len - hdr, d + hdr);
    if (req == NULL)
        return false;
    qcall *call = e->call;
    uint64_t deadline = e->deadline;
    qcall_set_data(call, NULL);
    int rv = queue_write(s, call, e->kind, req, NULL, NULL, false);
    protobuf_c_message_free_unpacked(req, NULL);
    if (rv != 0)
        server_reply_error(call, rv);
    else
        s->queued.tail->deadline = deadline;
    free_entry(e);
    return true;
}

void server_propose(struct server *s, qcall *call, enum entry_kind kind, ProtobufCMessage *req)
{
    int rv = queue_write(s, call, kind, req, NULL, NULL, false);
    protobuf_c_message_free_unpacked(req, NULL);
    if (rv != 0)
        server_reply_error(call, rv);
}

void server_propose_copy(struct server *s, qcall *call, enum entry_kind kind,
                         const ProtobufCMessage *req)
{
    int rv = queue_write(s, call, kind, req, NULL, NULL, false);
    if (rv != 0)
        server_reply_error(call, rv);
}

void server_propose_cb(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg,
                       server_done_fn done, void *arg)
{
    int rv = queue_write(s, NULL, kind, msg, done, arg, true);
    if (rv != 0) {
        log_error("server", "cannot queue an internal request: %s", q_strerror(rv));
        if (done != NULL)
            done(s, rv, NULL, 0, arg);
    }
}

void server_propose_internal(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg)
{
    server_propose_cb(s, kind, msg, NULL, NULL);
}

static void move_all(struct entry_list *from, struct entry_list *to)
{
    struct entry *e;
    while ((e = from->head) != NULL) {
        list_remove(from, e);
        list_push(to, e);
    }
}

/* propose_queued hands this pass's writes to Raft: see THE PASS. */
static void propose_queued(struct server *s)
{
    if (s->queued.head == NULL || s->raft == NULL || s->wal == NULL)
        return;
    uint64_t lead = raft_get_leader(s->raft);
    if (lead == RAFT_NONE)
        return;
    if (lead == s->member_id) {
        struct entry *e;
        while ((e = s->queued.head) != NULL) {
            int rv = raft_propose(s->raft, e->data.data, e->data.len, NULL);
            if (rv == -EBUSY)
                return; /* transferring leadership: after it */
            list_remove(&s->queued, e);
            if (rv != 0)
                fail(s, e, rv);
            else
                list_push(&s->waiting, e);
        }
        return;
    }
    size_t n = 0;
    for (struct entry *e = s->queued.head; e != NULL; e = e->next)
        n++;
    struct raft_entry *ents = calloc(n, sizeof(*ents));
    if (ents == NULL)
        return; /* next pass */
    n = 0;
    for (struct entry *e = s->queued.head; e != NULL; e = e->next)
        ents[n++] = (struct raft_entry){
            .type = RAFT_ENTRY_NORMAL, .data = e->data.data, .len = e->data.len};
    struct raft_msg m = {.type = TRANSPORT_MSG_PROP,
                         .from = s->member_id,
                         .to = lead,
                         .term = raft_get_term(s->raft),
                         .entries = ents,
                         .n_entries = n};
    int rv = transport_send(s->tp, &m);
    free(ents);
    if (rv == 0)
        move_all(&s->queued, &s->waiting);
}

/* on_forwarded: a follower's proposals, on the leader. */
static void on_forwarded(struct server *s, const struct raft_msg *m)
{
    if (!server_is_leader(s))
        return; /* the follower's requests time out, as etcd's */
    for (size_t i = 0; i < m->n_entries; i++) {
        const struct raft_entry *e = &m->entries[i];
        int rv;
        if (e->type == RAFT_ENTRY_CONF) {
            struct raft_membership next;
            rv = raft_membership_decode(e->data, e->len, &next);
            if (rv == 0)
                rv = raft_propose_conf(s->raft, &next, NULL);
        } else {
            rv = raft_propose(s->raft, e->data, e->len, NULL);
        }
        if (rv != 0)
            log_debug("raft", "dropped a proposal forwarded by %016llx: %s",
                      (unsigned long long)m->from, q_strerror(rv));
    }
}

int server_propose_conf(struct server *s, const struct raft_membership *next)
{
    uint64_t lead = server_leader(s);
    if (lead == RAFT_NONE)
        return QERR_NO_LEADER;
    if (lead == s->member_id && !s->persisting)
        return raft_propose_conf(s->raft, next, NULL);
    uint8_t buf[8 * 2 * RAFT_MAX_MEMBERS + 64];
    if (raft_membership_size(next) > sizeof(buf))
        return -EINVAL;
    size_t len = raft_membership_encode(next, buf);
    struct raft_entry e = {.type = RAFT_ENTRY_CONF, .data = buf, .len = len};
    struct raft_msg m = {.type = TRANSPORT_MSG_PROP,
                         .from = s->member_id,
                         .to = lead,
                         .term = raft_get_term(s->raft),
                         .entries = &e,
                         .n_entries = 1};
    return transport_send(s->tp, &m);
}

/* ---- linearizable reads ---- */

void server_read(struct server *s, qcall *call, enum entry_kind kind, ProtobufCMessage *req)
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
    e->deadline = uv_now(s->loop) + s->request_timeout_ms;
    qcall_set_data(call, e);
    list_push(&s->reads, e);
}

/* ask_reads asks for one read index for every read not asked for yet. */
static void ask_reads(struct server *s)
{
    if (s->raft == NULL || raft_get_leader(s->raft) == RAFT_NONE)
        return;
    bool any = false;
    for (struct entry *e = s->reads.head; e != NULL && !any; e = e->next)
        any = e->ctx == 0;
    if (!any)
        return;
    uint64_t ctx = ++s->next_read_ctx;
    if (raft_read_index(s->raft, ctx) != 0)
        return;
    for (struct entry *e = s->reads.head; e != NULL; e = e->next)
        if (e->ctx == 0)
            e->ctx = ctx;
}

static void serve_reads(struct server *s)
{
    for (struct entry *e = s->reads.head, *next; e != NULL; e = next) {
        next = e->next;
        if (!e->ready || e->index > s->applied_index)
            continue;
        list_remove(&s->reads, e);
        if (e->call != NULL) {
            qcall_set_data(e->call, NULL);
            /* a front loop's client is read on its loop when it can */
            if (!fronts_read_elsewhere(e->call, e->kind, e->req, mvcc_rev(s->kv)))
                server_serve_read(s, e->call, e->kind, e->req);
        }
        free_entry(e);
    }
}

/* ---- peers ---- */

static const struct member_cfg *initial_member(const struct server *s, uint64_t id)
{
    for (size_t i = 0; i < s->cfg.n_initial_cluster; i++)
        if (s->initial_ids[i] == id)
            return &s->cfg.initial_cluster[i];
    return NULL;
}

/* sync_peers keeps the transport's peers equal to the membership (or, for
 * a member that knows no membership yet, the initial cluster), at the
 * first peer URL the members database (or the flags) give. */
static void sync_peers(struct server *s)
{
    uint64_t ids[2 * RAFT_MAX_MEMBERS + CONFIG_MAX_MEMBERS];
    size_t n = 0;
    const struct raft_membership *m = raft_get_membership(s->raft);
    for (uint32_t i = 0; i < m->n_voters; i++)
        ids[n++] = m->voters[i];
    for (uint32_t i = 0; i < m->n_learners; i++)
        ids[n++] = m->learners[i];
    if (n == 0) {
        /* no membership yet (a joining member): the members it was told
         * of (bootstrap.c), else --initial-cluster's */
        int k = server_members_ids(s, ids, CONFIG_MAX_MEMBERS);
        if (k > 0)
            n = (size_t)k;
        else
            for (size_t i = 0; i < s->cfg.n_initial_cluster; i++)
                ids[n++] = s->initial_ids[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == s->member_id)
            continue;
        struct member_info mi;
        const char *url = NULL;
        if (server_member_get(s, ids[i], &mi) == 0 && mi.n_peer > 0) {
            url = mi.peer[0];
        } else {
            const struct member_cfg *mc = initial_member(s, ids[i]);
            if (mc != NULL && mc->n_peer_urls > 0)
                url = mc->peer_urls[0].text;
        }
        if (url == NULL)
            continue;
        struct url u;
        size_t nu = 0;
        char err[200];
        if (config_parse_urls(url, &u, 1, &nu, err, sizeof(err)) != 0 || nu != 1) {
            log_warn("server", "member %016llx: bad peer URL %s: %s", (unsigned long long)ids[i],
                     url, err);
            continue;
        }
        size_t k = 0;
        while (k < s->n_peers && s->peers[k].id != ids[i])
            k++;
        if (k == s->n_peers) {
            if (k == CONFIG_MAX_MEMBERS || transport_add_peer(s->tp, ids[i], u.host, u.port) != 0)
                continue;
            s->n_peers++;
            s->peers[k].last_heartbeat_ms = 0;
            s->peers[k].active_since_ms = 0;
        } else if (strcmp(s->peers[k].url, url) == 0) {
            continue;
        } else if (transport_update_peer(s->tp, ids[i], u.host, u.port) != 0) {
            continue;
        }
        transport_peer_set_tls(s->tp, ids[i], u.tls);
        s->peers[k].id = ids[i];
        snprintf(s->peers[k].url, sizeof(s->peers[k].url), "%s", url);
    }
    for (size_t k = 0; k < s->n_peers;) {
        bool keep = false;
        for (size_t i = 0; i < n && !keep; i++)
            keep = ids[i] == s->peers[k].id;
        if (keep) {
            k++;
            continue;
        }
        transport_remove_peer(s->tp, s->peers[k].id);
        /* a transfer to a removed peer never reports back */
        for (size_t j = 0; j < CONFIG_MAX_MEMBERS; j++)
            if (s->snap_out[j].to == s->peers[k].id) {
                unlink(s->snap_out[j].path);
                s->snap_out[j].to = 0;
            }
        s->peers[k] = s->peers[--s->n_peers];
    }
}

/* ---- snapshots ---- */

static void db_dir(const struct server *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s/member/db", s->cfg.data_dir);
}

/* A copy of the database for a peer, made on a worker thread (one LMDB
 * read transaction: writes go on meanwhile). */
struct snap_job {
    uv_work_t work;
    struct server *s;
    struct raft_msg m;
    struct raft_snapshot snap;
    size_t slot;
    int fd, err;
    uint64_t t0; /* etcd_disk_backend_snapshot_duration_seconds */
};

static void clear_slot(struct server *s, size_t slot)
{
    unlink(s->snap_out[slot].path);
    s->snap_out[slot].to = 0;
    s->snap_out[slot].path[0] = '\0';
}

static void snap_job_copy(uv_work_t *w)
{
    struct snap_job *j = w->data;
    j->err = mdb_env_copyfd2(backend_env(j->s->be), j->fd, 0);
    close(j->fd);
    server_copy_end();
}

static void node_closed_step(struct node_close *nc);

static void snap_job_done(uv_work_t *w, int status)
{
    (void)status;
    struct snap_job *j = w->data;
    struct server *s = j->s;
    s->snap_jobs--;
    if (s->node_closing != NULL) {
        clear_slot(s, j->slot);
        free(j);
        node_closed_step(s->node_closing);
        return;
    }
    int rv = j->err;
    if (rv == 0)
        metrics_observe_since(server_metrics.snapshot_seconds, j->t0);
    if (rv != 0)
        log_error("raft", "cannot copy the database for a snapshot: %s", mdb_strerror(rv));
    else if (s->snap_out[j->slot].to != j->m.to) /* the peer was removed meanwhile */
        rv = -ENOENT;
    else
        rv = transport_send_snapshot(s->tp, &j->m, s->snap_out[j->slot].path, NULL);
    if (rv != 0) {
        if (s->snap_out[j->slot].to == j->m.to)
            clear_slot(s, j->slot);
    } else {
        log_info("raft", "sending a snapshot at index %llu to %016llx",
                 (unsigned long long)j->snap.index, (unsigned long long)j->m.to);
    }
    free(j);
}

/* send_snapshot streams a copy of the database to m->to (see the top):
 * the copy is made on a worker thread, then the transport sends the file.
 * One transfer per peer at a time; the core asks again if it is lost. */
static void send_snapshot(struct server *s, const struct raft_msg *m)
{
    size_t k = 0, free_slot = CONFIG_MAX_MEMBERS;
    for (k = 0; k < CONFIG_MAX_MEMBERS; k++) {
        if (s->snap_out[k].to == m->to)
            return;
        if (s->snap_out[k].to == 0 && free_slot == CONFIG_MAX_MEMBERS)
            free_slot = k;
    }
    if (free_slot == CONFIG_MAX_MEMBERS)
        return;
    struct snap_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    char dir[1100];
    db_dir(s, dir, sizeof(dir));
    char *path = s->snap_out[free_slot].path;
    snprintf(path, sizeof(s->snap_out[free_slot].path), "%.1000s/send-%016llx.mdb", dir,
             (unsigned long long)m->to);
    j->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        log_error("raft", "cannot create %s: %s", path, strerror(errno));
        free(j);
        return;
    }
    j->s = s;
    j->t0 = metrics_now_ns();
    j->m = *m;
    j->snap = *m->snapshot;
    j->m.snapshot = &j->snap;
    j->m.entries = NULL;
    j->m.n_entries = 0;
    j->slot = free_slot;
    j->work.data = j;
    s->snap_out[free_slot].to = m->to;
    server_flush(s); /* the copy reads committed state */
    server_copy_begin();
    if (uv_queue_work(s->loop, &j->work, snap_job_copy, snap_job_done) != 0) {
        server_copy_end();
        close(j->fd);
        clear_slot(s, free_slot);
        free(j);
        return;
    }
    s->snap_jobs++;
}

static void on_snapshot_sent(uint64_t to, bool ok, void *arg)
{
    struct server *s = arg;
    for (size_t k = 0; k < CONFIG_MAX_MEMBERS; k++) {
        if (s->snap_out[k].to != to)
            continue;
        unlink(s->snap_out[k].path);
        s->snap_out[k].to = 0;
        s->snap_out[k].path[0] = '\0';
    }
    log_info("raft", "snapshot to %016llx %s", (unsigned long long)to, ok ? "sent" : "failed");
}

/* A received database is indexed on a worker (mvcc_prepare_file) before
 * the core hears of the snapshot: the member keeps serving from its own
 * store meanwhile, and installing it (install_snapshot) only swaps the file
 * and the index. The leader waits for the follower's answer to the
 * snapshot as long as it takes; one arriving while another is indexed is
 * dropped (the leader sends again). */
struct recv_job {
    uv_work_t w;
    struct server *s;
    char path[1100];
    struct raft_msg m;
    struct raft_snapshot snap;
    mvcc_prepared *prep;
    int rv;
    uint64_t t0;
};

static void recv_job_work(uv_work_t *w)
{
    struct recv_job *j = w->data;
    j->rv = mvcc_prepare_file(j->path, &j->prep);
}

static void recv_job_done(uv_work_t *w, int status)
{
    (void)status;
    struct recv_job *j = w->data;
    struct server *s = j->s;
    s->snap_jobs--;
    s->recv_preparing = false;
    if (s->node_closing != NULL || s->raft == NULL || s->removed) {
        mvcc_prepared_free(j->prep);
        struct node_close *nc = s->node_closing;
        free(j);
        if (nc != NULL)
            node_closed_step(nc);
        return;
    }
    if (j->rv != 0) {
        log_error("raft", "cannot index the snapshot received at index %llu: %s; dropped",
                  (unsigned long long)j->snap.index, q_strerror(j->rv));
        unlink(j->path);
        s->recv_path[0] = '\0';
        free(j);
        return;
    }
    log_info("raft", "indexed the snapshot received at index %llu in %.3f s",
             (unsigned long long)j->snap.index, (double)(uv_hrtime() - j->t0) / 1e9);
    mvcc_prepared_free(s->recv_prepared);
    s->recv_prepared = j->prep;
    /* one the core has committed past (a leader that sent again while
     * this member was indexing the first) only gets an answer: its file
     * and index go now, not with the next snapshot */
    bool stale = j->snap.index <= raft_get_commit(s->raft);
    j->m.snapshot = &j->snap;
    if (s->persisting)
        defer_msg(s, &j->m);
    else
        raft_step(s->raft, &j->m);
    if (stale) {
        log_info("raft", "the snapshot at index %llu is behind the commit index %llu; dropped",
                 (unsigned long long)j->snap.index,
                 (unsigned long long)raft_get_commit(s->raft));
        mvcc_prepared_free(s->recv_prepared);
        s->recv_prepared = NULL;
        unlink(j->path);
        s->recv_path[0] = '\0';
    }
    free(j);
}

static void on_snapshot(const struct raft_msg *m, const char *path, void *arg)
{
    struct server *s = arg;
    char dir[1100], target[1100];
    if (s->recv_preparing) {
        log_warn("raft", "dropping the snapshot at index %llu from %016llx: the one before is "
                 "still being indexed",
                 (unsigned long long)m->snapshot->index, (unsigned long long)m->from);
        unlink(path);
        return;
    }
    db_dir(s, dir, sizeof(dir));
    snprintf(target, sizeof(target), "%.1000s/recv.mdb", dir);
    struct recv_job *j = calloc(1, sizeof(*j));
    if (s->raft == NULL || j == NULL || rename(path, target) != 0) {
        log_error("raft", "cannot keep a received snapshot: %s", strerror(errno));
        unlink(path);
        free(j);
        return;
    }
    mvcc_prepared_free(s->recv_prepared); /* of a file just replaced */
    s->recv_prepared = NULL;
    snprintf(s->recv_path, sizeof(s->recv_path), "%s", target);
    s->recv_index = m->snapshot->index;
    s->recv_term = m->snapshot->term;
    log_info("raft", "received a snapshot at index %llu from %016llx",
             (unsigned long long)m->snapshot->index, (unsigned long long)m->from);
    j->s = s;
    snprintf(j->path, sizeof(j->path), "%s", target);
    j->snap = *m->snapshot;
    j->snap.data = NULL;
    j->snap.len = 0;
    j->m = *m;
    j->m.snapshot = NULL;
    j->t0 = uv_hrtime();
    j->w.data = j;
    if (uv_queue_work(s->loop, &j->w, recv_job_work, recv_job_done) != 0) {
        log_error("raft", "cannot index a received snapshot; dropped");
        unlink(target);
        s->recv_path[0] = '\0';
        free(j);
        return;
    }
    s->recv_preparing = true;
    s->snap_jobs++;
}

/* install_snapshot swaps the database for the received copy and reloads
 * everything built on it. A failure here leaves the member without a
 * usable store: it stops (a restart reopens whichever file is in place). */
static void install_snapshot(struct server *s, const struct raft_snapshot *snap)
{
    if (s->apply_paused) { /* the core does not restore one meanwhile (raft.h) */
        log_error("raft", "a snapshot at %llu while an entry is applied in steps",
                  (unsigned long long)snap->index);
        abort();
    }
    if (s->recv_path[0] == '\0' || s->recv_index != snap->index || s->recv_term != snap->term) {
        log_error("raft", "the core restored a snapshot at %llu whose database is not here",
                  (unsigned long long)snap->index);
        abort();
    }
    server_flush(s);
    /* The copy is the sender's database as it was, at or past the snapshot
     * index; ours may be further still (we applied entries the sender had
     * not when it copied). Going back would show serializable reads and
     * watches an older revision: keep ours, durable first (the WAL below
     * the snapshot may go). */
    uint64_t recv_ci = 0;
    if (backend_file_meta(s->recv_path, "consistent_index", &recv_ci) == 0 &&
        recv_ci < s->applied_index && s->applied_index >= snap->index) {
        int srv = backend_sync(s->be);
        if (srv != 0) {
            int lrc = backend_last_rc();
            log_error("raft", "syncing the database before the snapshot at %llu failed: %s "
                      "(LMDB: %s)",
                      (unsigned long long)snap->index, q_strerror(srv),
                      lrc ? mdb_strerror(lrc) : "none");
            server_storage_fatal("raft", "syncing the database", srv);
        }
        log_info("raft", "snapshot at index %llu: the received database (index %llu) is behind "
                 "ours (index %llu); keeping ours",
                 (unsigned long long)snap->index, (unsigned long long)recv_ci,
                 (unsigned long long)s->applied_index);
        unlink(s->recv_path);
        s->recv_path[0] = '\0';
        mvcc_prepared_free(s->recv_prepared);
        s->recv_prepared = NULL;
        return;
    }
    uint64_t t0 = uv_hrtime();
    server_snapshot_copies_wait();
    uint64_t t_copies = uv_hrtime();
    metrics_gauge_add(server_metrics.snapshot_applying, 1);
    server_metrics_db_changed();
    mvcc_exclusive_begin(s->kv); /* front loops read from the old file until here */
    mvcc_release_reads(s->kv);
    int rv = backend_replace_file(s->be, s->recv_path);
    if (rv == 0) {
        server_close_retired(s);
        /* the index was built from this file on a worker (on_snapshot) */
        rv = s->recv_prepared != NULL ? mvcc_reload_prepared(s->kv, s->recv_prepared)
                                      : mvcc_reload(s->kv);
        s->recv_prepared = NULL;
    }
    mvcc_exclusive_end(s->kv);
    uint64_t t_swap = uv_hrtime();
    if (rv == 0)
        rv = server_leases_reload(s);
    if (rv == 0)
        rv = server_alarms_load(s);
    if (rv == 0)
        rv = auth_reload(s->auth);
    uint64_t ci = 0;
    if (rv == 0)
        rv = backend_meta_get(s->be, NULL, "consistent_index", &ci);
    if (rv != 0) {
        int lrc = backend_last_rc();
        log_error("raft", "installing the snapshot at %llu failed: %s (LMDB: %s)",
                  (unsigned long long)snap->index, q_strerror(rv),
                  lrc ? mdb_strerror(lrc) : "none");
        server_storage_fatal("raft", "installing a snapshot", rv);
    }
    s->recv_path[0] = '\0';
    metrics_gauge_add(server_metrics.snapshot_applying, -1);
    s->applied_index = ci;
    s->peers_dirty = true; /* members' addresses came with the database */
    server_compact_kick(s);  /* the copy may hold a compaction under way */
    watch_hub_restored(s->watches);
    server_watch_kick(s);
    server_zk_store_replaced(s);
    uint64_t t_end = uv_hrtime();
    log_info("raft",
             "applied snapshot at index %llu (database at index %llu, revision %lld) in %.1f ms "
             "(waiting for copies %.1f, file and index swap %.1f, leases, alarms, auth and "
             "watches %.1f)",
             (unsigned long long)snap->index, (unsigned long long)ci, (long long)mvcc_rev(s->kv),
             (double)(t_end - t0) / 1e6, (double)(t_copies - t0) / 1e6,
             (double)(t_swap - t_copies) / 1e6, (double)(t_end - t_swap) / 1e6);
}

/* purge_files is etcd's purge of old files (--max-snapshots, --max-wals):
 * the oldest .snap files beyond the limit, and the oldest WAL segments
 * beyond it that the newest snapshot covers (a segment still needed stops
 * it). After each snapshot this member takes and every PURGE_INTERVAL_MS
 * (etcd's purgeFileInterval), never while a worker writes the WAL. */
static void purge_files(struct server *s)
{
    if (s->wal == NULL || s->persisting)
        return;
    int rv = wal_purge(s->wal, s->snap_index, (size_t)s->cfg.max_wals);
    if (rv >= 0)
        rv = wal_snap_purge(s->cfg.data_dir, (size_t)s->cfg.max_snapshots);
    if (rv < 0)
        log_warn("raft", "purging old files: %s", q_strerror(rv));
}

/* maybe_compact takes a Raft snapshot every --snapshot-count entries:
 * the store is made durable first, then the snapshot marker, then the WAL
 * segments it covers go. */
static void maybe_compact(struct server *s)
{
    uint64_t applied = raft_get_applied(s->raft);
    if (s->cfg.snapshot_count == 0 || applied < s->snap_index + s->cfg.snapshot_count)
        return;
    const struct raft_entry *e = raft_get_entry(s->raft, applied);
    if (e == NULL || s->applied_index < applied)
        return;
    uint64_t term = e->term;
    if (s->snap_retry_ms != 0 && uv_now(s->loop) < s->snap_retry_ms)
        return;
    server_flush(s);
    uint64_t t0 = uv_hrtime();
    int rv = s->cfg.unsafe_no_fsync ? 0 : backend_sync(s->be);
    uint64_t sync_ms = (uv_hrtime() - t0) / 1000000;
    if (sync_ms >= SLOW_COMMIT_MS)
        log_warn("raft", "syncing the database for a snapshot took %llu ms",
                 (unsigned long long)sync_ms);
    /* the in-memory log keeps LOG_KEEP_ENTRIES (etcd's
     * snapshotCatchUpEntries): compacting it up to |applied| sent the whole
     * database to every follower a few entries behind at this moment, as
     * they usually are under load */
    if (rv == 0)
        rv = raft_compact_keep(s->raft, LOG_KEEP_ENTRIES);
    struct raft_snapshot snap = {.index = applied, .term = term};
    if (rv == 0) {
        snap.conf = *raft_get_membership(s->raft);
        rv = wal_snap_save(s->cfg.data_dir, &snap);
    }
    if (rv == 0)
        rv = wal_save_snapshot(s->wal, applied, term, 0);
    if (rv == 0)
        rv = wal_sync(s->wal);
    if (rv != 0 && (rv == -ENOSPC || rv == -EDQUOT) && wal_failed(s->wal) == 0) {
        /* the snapshot file or its marker did not fit: the log keeps every
         * entry (nothing was released), so it waits for space */
        if (s->snap_retry_ms == 0)
            log_warn("raft",
                     "taking a snapshot at %llu: %s; trying again every 10 s (the log "
                     "keeps every entry meanwhile)",
                     (unsigned long long)applied, q_strerror(rv));
        s->snap_retry_ms = uv_now(s->loop) + 10000;
        return;
    }
    if (rv != 0) {
        int lrc = backend_last_rc();
        log_error("raft", "taking a snapshot at %llu failed: %s (LMDB's last error: %s)",
                  (unsigned long long)applied, q_strerror(rv), lrc ? mdb_strerror(lrc) : "none");
        server_storage_fatal("raft", "taking a snapshot", rv);
    }
    s->snap_retry_ms = 0;
    s->snap_index = applied;
    purge_files(s);
    log_info("raft", "snapshot at index %llu (term %llu); log compacted",
             (unsigned long long)applied, (unsigned long long)term);
}

/* trim_log bounds the Raft core's in-memory log between snapshots: the
 * entries applied more than LOG_KEEP_ENTRIES ago go (on a leader only those
 * every follower has; raft_trim_log). Without it the core would hold every
 * entry since the last snapshot, up to --snapshot-count (100,000 by default;
 * ~20 MB with 100-byte values). Disk and restart are unchanged: the WAL
 * keeps every entry until maybe_compact's snapshot. A follower that needs a
 * dropped entry gets the database instead, as after a snapshot. */
static void trim_log(struct server *s)
{
    uint64_t applied = raft_get_applied(s->raft);
    uint64_t first = raft_get_first_index(s->raft);
    uint64_t to = 0;
    if (applied >= LOG_KEEP_ENTRIES && applied - LOG_KEEP_ENTRIES >= first + LOG_TRIM_STEP)
        to = applied - LOG_KEEP_ENTRIES;
    /* and by bytes (--max-raft-log-bytes): past the bound, the oldest
     * applied entries go until what stays is 3/4 of it, so big entries do
     * not keep 5000 x 1.5 MiB in memory and a pass does not trim again at
     * once */
    size_t bytes = raft_get_log_bytes(s->raft), max = (size_t)s->cfg.max_raft_log_bytes;
    if (max > 0 && bytes > max) {
        size_t drop = bytes - max / 4 * 3, dropped = 0;
        uint64_t i = first;
        for (; i <= applied && dropped < drop; i++) {
            const struct raft_entry *e = raft_get_entry(s->raft, i);
            if (e == NULL)
                break;
            dropped += e->len;
        }
        if (i > first && i - 1 > to)
            to = i - 1;
    }
    if (to < first)
        return;
    int rv = raft_trim_log(s->raft, to);
    if (rv != 0)
        log_warn("raft", "trimming the in-memory log: %s", q_strerror(rv));
}

/* ---- applying ----
 *
 * Applied entries go into one LMDB write transaction that stays open across
 * loop passes and is committed (one sync) every BATCH_INTERVAL_MS or
 * BATCH_MAX_ENTRIES entries, as etcd's backend batches its bbolt commits:
 * the WAL is the durability point, so a client is answered once its entry
 * is applied, and reads go through the open transaction (mvcc_read_begin)
 * and see it. A crash loses only the uncommitted batch, which the restart
 * replays from the WAL (the consistent index commits with it). Whatever
 * reads the store from another thread or replaces it flushes first
 * (server_flush). */

_Noreturn void server_storage_fatal(const char *module, const char *what, int rv)
{
    const char *why = rv == -ENOSPC || rv == -EDQUOT
                          ? "the disk is full: free space and restart the member"
                      : rv == -EIO ? "the disk failed to store it: check the device, then restart"
                                   : "restart the member once the cause is fixed";
    log_error(module,
              "%s failed: %s; stopping (%s; the restart replays the log from what the "
              "database holds, and a failed sync is never retried)",
              what, q_strerror(rv), why);
    _exit(1); /* no atexit handlers: nothing may be written or answered any more */
}

/* db_reserve keeps the database's space reserve (backend_reserve) after
 * each commit: when the disk cannot give it, the member stops taking
 * writes (QERR_NO_SPACE, as hold_for_space does for the log) while the
 * entries already in the log apply into what is left, and tries again
 * every DB_RETRY_MS from the tick. */
#define DB_RESERVE_BYTES (64u << 20)
#define DB_RETRY_MS 1000

static void db_reserve(struct server *s)
{
    int rv = backend_reserve(s->be, DB_RESERVE_BYTES);
    if (rv == 0) {
        if (s->db_full) {
            s->db_full = false;
            log_info("backend",
                     "the database has its space reserve again after %llu ms; "
                     "taking writes",
                     (unsigned long long)(uv_now(s->loop) - s->db_full_since_ms));
        }
        return;
    }
    s->db_retry_ms = uv_now(s->loop) + DB_RETRY_MS;
    if (s->db_full)
        return;
    s->db_full = true;
    s->db_full_since_ms = uv_now(s->loop);
    log_error("backend",
              "reserving %u MiB of disk for the database failed: %s; refusing writes "
              "until the disk has space (trying again every %d ms; reads are served)",
              DB_RESERVE_BYTES >> 20, q_strerror(rv), DB_RETRY_MS);
}

void server_flush(struct server *s)
{
    /* paused in a revision: the batch holds only its changes since its
     * last step (which committed the entries before it), and its txn is
     * open: they commit with its next step */
    if (backend_batch_txn(s->be) == NULL || s->apply_paused)
        return;
    uint64_t t0 = uv_hrtime();
    int rv = mvcc_batch_commit(s->kv);
    if (rv != 0) {
        int lrc = backend_last_rc();
        log_error("server",
                  "committing applied entries (a batch of %llu, up to entry %llu) failed: %s "
                  "(LMDB: %s); stopping",
                  (unsigned long long)s->batch_entries, (unsigned long long)s->applied_index,
                  q_strerror(rv), lrc ? mdb_strerror(lrc) : "none");
        server_storage_fatal("server", "committing applied entries to the database", rv);
    }
    db_reserve(s);
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    if (ms >= SLOW_COMMIT_MS)
        log_warn("server", "committing the batch (%llu entries) took %llu ms",
                 (unsigned long long)s->batch_entries, (unsigned long long)ms);
}


/* ---- compaction in steps ----
 *
 * An applied Compact only schedules the compaction (mvcc_compact: reads
 * below it fail from then on). Its revisions are removed by
 * mvcc_compact_step, --experimental-compaction-batch-limit at a time, one
 * step per loop iteration (an idle handle keeps the loop from sleeping
 * while steps remain; or a timer, --experimental-compaction-sleep-interval
 * between steps, when that is set),
 * inside the open batch, which commits as it does for
 * applied entries (each revision removed counts as an entry). Requests and
 * heartbeats are served between steps, and no LMDB transaction holds more
 * than BATCH_MAX_ENTRIES removals. A physical Compact is answered by the
 * member it was sent to once the removal there has finished and committed
 * (etcd's --physical). A restart resumes an unfinished removal (mvcc.h). */

#define COMPACT_LIMIT_DEFAULT 1000 /* etcd's defaultCompactBatchLimit */

static void compact_answer_waits(struct server *s)
{
    struct entry *e;
    while ((e = s->compact_waits.head) != NULL) {
        list_remove(&s->compact_waits, e);
        finish(s, e);
    }
}

static void compact_step(struct server *s);

static void on_compact_idle(uv_idle_t *h)
{
    compact_step(h->data);
}

static void on_compact_timer(uv_timer_t *h)
{
    compact_step(h->data);
}

/* compact_schedule runs the next step on the next loop iteration (an idle
 * handle: a timer of 0 ms restarted from its own callback would run again
 * at once, before any I/O is read), or after the sleep interval. */
static void compact_schedule(struct server *s)
{
    if (s->cfg.compaction_sleep_ms == 0) {
        uv_idle_start(&s->compact_idle, on_compact_idle);
    } else {
        uv_idle_stop(&s->compact_idle);
        uv_timer_start(&s->compact_timer, on_compact_timer, s->cfg.compaction_sleep_ms, 0);
    }
}

/* compact_measured ends the metrics of a removal that finished */
static void compact_measured(struct server *s)
{
    if (s->compact_t0_ns == 0)
        return;
    metrics_observe(server_metrics.compaction_total,
                    (double)(metrics_now_ns() - s->compact_t0_ns) / 1e6);
    s->compact_t0_ns = 0;
    server_metrics_db_changed();
}

static void compact_step(struct server *s)
{
    if (s->apply_paused) {
        /* not between the steps of a revision (its cursor over the index
         * lives on): the end of its apply kicks the compaction again */
        uv_idle_stop(&s->compact_idle);
        uv_timer_stop(&s->compact_timer);
        return;
    }
    if (!mvcc_compacting(s->kv)) {
        compact_measured(s);
        uv_idle_stop(&s->compact_idle);
        server_flush(s); /* the finishing step is durable before the answer */
        compact_answer_waits(s);
        return;
    }
    int rv = 0;
    if (backend_batch_txn(s->be) == NULL) {
        rv = mvcc_batch_begin(s->kv);
        s->batch_opened_ms = uv_now(s->loop);
        s->batch_entries = 0;
    }
    size_t limit = s->cfg.compaction_batch_limit ? (size_t)s->cfg.compaction_batch_limit
                                                 : COMPACT_LIMIT_DEFAULT;
    bool done = false;
    struct mvcc_compact_stats before, after;
    mvcc_compact_progress(s->kv, &before);
    uint64_t t0 = metrics_now_ns();
    if (s->compact_t0_ns == 0)
        s->compact_t0_ns = t0;
    if (rv == 0)
        rv = mvcc_compact_step(s->kv, limit, &done);
    /* etcd's pause: a batch of removals holding the loop, observed for
     * each but the last (as etcd's scheduleCompaction does) */
    if (!done)
        metrics_observe(server_metrics.compaction_pause, (double)(metrics_now_ns() - t0) / 1e6);
    mvcc_compact_progress(s->kv, &after);
    if (rv == 0 && after.dropped > before.dropped)
        metrics_add(server_metrics.compaction_keys, (uint64_t)(after.dropped - before.dropped));
    if (rv != 0) {
        /* entries applied in this batch were answered: stop, as for an
         * apply failure; the restart resumes the removal */
        int lrc = backend_last_rc();
        log_error("server", "compaction at revision %lld: a step failed: %s (LMDB: %s)",
                  (long long)mvcc_compact_rev(s->kv), q_strerror(rv),
                  lrc ? mdb_strerror(lrc) : "none");
        server_storage_fatal("server", "a compaction step", rv);
    }
    s->batch_entries += limit;
    if (done || s->batch_entries >= BATCH_MAX_ENTRIES ||
        uv_now(s->loop) - s->batch_opened_ms >= BATCH_INTERVAL_MS)
        server_flush(s);
    if (done) {
        compact_measured(s);
        uv_idle_stop(&s->compact_idle);
        compact_answer_waits(s);
    } else {
        compact_schedule(s);
    }
}

void server_compact_kick(struct server *s)
{
    if (s->closing)
        return;
    if (s->compact_timer.data == NULL) {
        uv_timer_init(s->loop, &s->compact_timer);
        s->compact_timer.data = s;
        uv_idle_init(s->loop, &s->compact_idle);
        s->compact_idle.data = s;
    }
    if ((mvcc_compacting(s->kv) || s->compact_waits.head != NULL) &&
        !uv_is_active((uv_handle_t *)&s->compact_timer) &&
        !uv_is_active((uv_handle_t *)&s->compact_idle))
        uv_idle_start(&s->compact_idle, on_compact_idle);
}

/* ---- big revisions in steps ----
 *
 * A revision that changes more than --experimental-apply-step-limit keys
 * commits the batch every that many changes (mvcc.h, "Big revisions in
 * steps"). The open batch also holds the entries applied before this one
 * (answered already): on_apply_step records their consistent index in
 * each step's commit, so that a restart applies this entry again (it
 * resumes the partial revision) and none of those twice. Between two
 * steps the loop goes on (below, "applying across loop passes"). */

#define APPLY_STEP_DEFAULT 100000

/* QUORUM_FAILPOINT_APPLY_STEP_KILL=N (tests): SIGKILL when the (N+1)th
 * step of an entry is about to commit, i.e. after N steps committed: a
 * kill -9 between steps that lands there every time. */
static long failpoint_step_kill(void)
{
    static long n = -2;
    if (n == -2) {
        const char *e = getenv("QUORUM_FAILPOINT_APPLY_STEP_KILL");
        n = e != NULL && *e ? strtol(e, NULL, 10) : -1;
    }
    return n;
}

static int on_apply_step(void *arg)
{
    struct server *s = arg;
    s->applying_steps++;
    if (s->applying_steps == 1)
        log_info("server", "applying entry %llu (%s) in steps of %llu changes",
                 (unsigned long long)s->applying_index, s->applying_kind,
                 (unsigned long long)(s->cfg.apply_step_limit ? s->cfg.apply_step_limit
                                                              : APPLY_STEP_DEFAULT));
    long kill_after = failpoint_step_kill();
    if (kill_after >= 0 && s->applying_steps > (uint64_t)kill_after) {
        log_warn("server", "failpoint: killed before step %llu of entry %llu commits",
                 (unsigned long long)s->applying_steps, (unsigned long long)s->applying_index);
        raise(SIGKILL);
    }
    return backend_meta_put(s->be, "consistent_index", s->applied_index);
}

static struct entry *find_waiting(struct server *s, uint64_t seq)
{
    for (struct entry *e = s->waiting.head; e != NULL; e = e->next)
        if (e->seq == seq)
            return e;
    return NULL;
}

static int apply_normal(struct server *s, const struct raft_entry *le, struct entry_list *done)
{
    const uint8_t *d = le->data;
    unsigned kind = d[0];
    const ProtobufCMessageDescriptor *desc = entry_desc(kind);
    if (desc == NULL) {
        log_warn("server", "entry %llu: unknown kind %u, skipped", (unsigned long long)le->index,
                 kind);
        return 0;
    }
    size_t hdr = ENTRY_HDR;
    const char *auth_user = NULL;
    uint64_t auth_rev = 0;
    if (d[1] & ENTRY_FLAG_AUTH) {
        size_t ulen = le->len >= ENTRY_HDR + ENTRY_AUTH_FIXED
                          ? (size_t)d[ENTRY_HDR + 8] | (size_t)d[ENTRY_HDR + 9] << 8
                          : SIZE_MAX;
        if (ulen == SIZE_MAX || le->len < ENTRY_HDR + ENTRY_AUTH_FIXED + ulen + 1 ||
            d[ENTRY_HDR + ENTRY_AUTH_FIXED + ulen] != 0) {
            log_error("server", "entry %llu: bad auth header, skipped",
                      (unsigned long long)le->index);
            return 0;
        }
        auth_rev = get_le64(d + ENTRY_HDR);
        auth_user = (const char *)d + ENTRY_HDR + ENTRY_AUTH_FIXED;
        hdr += ENTRY_AUTH_FIXED + ulen + 1;
    }
    /* a ZooKeeper write in the layout zk_write_pack makes is read by hand
     * (zk_write.h), anything else by protobuf-c */
    ProtobufCMessage *req =
        kind == ENTRY_ZK_WRITE ? (ProtobufCMessage *)zk_write_unpack(d + hdr, le->len - hdr) : NULL;
    bool plain = req != NULL; /* one block from malloc */
    if (req == NULL)
        req = protobuf_c_message_unpack(desc, NULL, le->len - hdr, d + hdr);
    if (req == NULL) {
        log_error("server", "entry %llu: undecodable request, skipped",
                  (unsigned long long)le->index);
        return 0;
    }
    struct entry *w = NULL, tmp = {0};
    if (get_le64(d + 2) == s->member_id)
        w = find_waiting(s, get_le64(d + 10));
    /* out of s->waiting while it is applied: the apply may pause between
     * steps, and a timeout must not free it meanwhile (it is answered
     * once applied) */
    if (w != NULL)
        list_remove(&s->waiting, w);
    struct entry *e = w != NULL ? w : &tmp;
    e->kind = (enum entry_kind)kind;
    e->internal = (d[1] & ENTRY_FLAG_INTERNAL) != 0;
    e->auth_user = auth_user;
    e->auth_rev = auth_rev;
    e->index = le->index;
    e->req = req;
    e->err = 0;
    s->applying_index = le->index;
    s->applying_kind = desc->short_name;
    s->applying_steps = 0;
    s->applying_pauses = 0;
    int64_t partial = mvcc_partial_rev(s->kv);
    uint64_t db_size = s->db_size;
    if (partial != 0) {
        log_info("server",
                 "resuming entry %llu (%s): revision %lld has %u changes committed in steps",
                 (unsigned long long)le->index, desc->short_name, (long long)partial,
                 mvcc_partial_changes(s->kv));
        /* it passed the quota check the first time (a refused entry writes
         * nothing), at a smaller file than its own steps have left */
        s->db_size = 0;
    }
    uint64_t t0 = uv_hrtime();
    int rv = server_apply_entry(s, e);
    if (partial != 0)
        s->db_size = db_size;
    if (rv == 0 && s->applying_steps > 0)
        log_info(
            "server", "applied entry %llu (%s) at revision %lld in %llu steps (%llu loop passes)",
            (unsigned long long)le->index, desc->short_name, (long long)mvcc_rev(s->kv),
            (unsigned long long)s->applying_steps + 1, (unsigned long long)s->applying_pauses + 1);
    if (rv == 0 && partial != 0 && mvcc_partial_rev(s->kv) != 0) {
        log_error("server", "entry %llu (%s) did not resume the partial revision %lld",
                  (unsigned long long)le->index, desc->short_name, (long long)partial);
        rv = QERR_CORRUPT;
    }
    /* etcd's ID: the proposer's low 16 bits over its proposal number */
    server_log_apply(s, e, get_le64(d + 2) << 48 | (get_le64(d + 10) & 0xffffffffffffull),
                     uv_hrtime() - t0);
    if (rv == 0 && kind == ENTRY_COMPACT && e->err == 0 && w != NULL &&
        ((const Etcdserverpb__CompactionRequest *)req)->physical)
        w->physical = true;
    if (rv != 0) {
        int lrc = backend_last_rc();
        log_error("server",
                  "applying entry %llu (%s) failed after %llu committed steps: %s (LMDB: %s)",
                  (unsigned long long)le->index, desc->short_name,
                  (unsigned long long)s->applying_steps, q_strerror(rv),
                  lrc ? mdb_strerror(lrc) : "none");
    }
    if (plain)
        free(req);
    else
        protobuf_c_message_free_unpacked(req, NULL);
    e->req = NULL;
    e->auth_user = NULL; /* it pointed into the log entry (so did a
                            ZooKeeper write's request, read by hand) */
    buf_free(&tmp.out);
    if (w != NULL)
        list_push(done, w);
    return rv;
}

/* ---- applying across loop passes ----
 *
 * Committed entries are applied on a coroutine (base/coro.h), one run
 * each time a Ready hands some out. A step of a big revision ends in
 * on_apply_pause: the coroutine yields and the loop goes on (Raft ticks,
 * heartbeats and appends go out, the WAL persists new entries, reads are
 * served at the revision before the big one, and linearizable reads wait
 * for their index as always); |apply_idle| continues it one step per loop
 * pass. Meanwhile:
 *  - nothing later is applied, and Raft does not count the entry applied:
 *    it hands each committed entry out once (raft_advance_applied) and its
 *    applied index stays at what s->applied_index says; the run applies
 *    the entries handed out meanwhile (up to handed_index, read from the
 *    core's log with raft_get_entry) once the big one is done;
 *  - the entry's waiting request is out of s->waiting (apply_normal): it
 *    is answered once the entry is applied, never timed out under it;
 *  - s->arena, which holds the apply's response, is set aside for a spare
 *    one that the reads meanwhile use;
 *  - nothing changes the store behind the revision's txn: server_flush
 *    returns (the batch holds only the revision's changes since its last
 *    step: mvcc_set_step_pause commits the first step before the first
 *    pause); compaction steps wait; a Snapshot and
 *    a defragmentation's start and swap wait for the end of the run
 *    (server_apply_wait); a snapshot from the leader is not restored (the
 *    Raft core drops it: the leader sends it again); a database sent to a
 *    follower is the committed state, the steps so far with quorumStepRev
 *    and the consistent index before the entry, which the follower resumes
 *    from its log as a restart would;
 *  - the watchers get the entries applied before the big one in the run
 *    at its first pause (apply_paused_publish), its own events once it
 *    ends, with the rest of the run;
 *  - closing finishes the run at once (server_apply_finish).
 */

#define APPLY_STACK_BYTES (8u << 20)
/* changes between two pauses (mvcc_set_step_pause), whatever the step
 * limit: about 3 ms of deletes */
#define APPLY_PAUSE_CHANGES 1000

struct apply_wait {
    void (*fn)(void *);
    void *arg;
    struct apply_wait *next;
};

static void on_apply_idle(uv_idle_t *h);

/* QUORUM_FAILPOINT_APPLY_PAUSE_SLEEP_MS=N (tests): the work before each
 * pause of a big revision takes N ms more, as a slow disk would, so that a
 * test's clients certainly run between its passes. */
static long failpoint_pause_sleep_ms(void)
{
    static long n = -2;
    if (n == -2) {
        const char *e = getenv("QUORUM_FAILPOINT_APPLY_PAUSE_SLEEP_MS");
        n = e != NULL && *e ? strtol(e, NULL, 10) : 0;
    }
    return n;
}

static int on_apply_pause(void *arg)
{
    struct server *s = arg;
    if (s->apply_no_pause || !coro_running(s->apply_coro))
        return 0;
    if (failpoint_pause_sleep_ms() > 0)
        usleep((useconds_t)failpoint_pause_sleep_ms() * 1000);
    /* a pause follows each step's commit: top the space reserve up there
     * too, not only after the whole revision (a full disk then stops new
     * writes while this one goes on into what is left) */
    db_reserve(s);
    if (s->apply_idle.data == NULL) {
        uv_idle_init(s->loop, &s->apply_idle);
        s->apply_idle.data = s;
    }
    struct arena a = s->arena;
    s->arena = s->apply_arena;
    s->apply_arena = a;
    s->apply_paused = true;
    s->applying_pauses++;
    uv_idle_start(&s->apply_idle, on_apply_idle);
    coro_yield(s->apply_coro);
    s->apply_paused = false;
    a = s->arena;
    s->arena = s->apply_arena;
    s->apply_arena = a;
    s->env.now_ms = (int64_t)uv_now(s->loop);
    return 0;
}

/* apply_run applies the entries Raft handed out, in order, into the open
 * batch (on the coroutine, or directly when it could not be made). */
static void apply_run(void *arg)
{
    struct server *s = arg;
    struct entry_list *done = &s->applied_done;
    s->env.now_ms = (int64_t)uv_now(s->loop);
    uint64_t changes = backend_changes(s->be);
    if (changes != s->db_size_changes) { /* the file grows only at commit */
        s->db_size = backend_size(s->be);
        s->db_size_changes = changes;
    }
    struct raft_membership cur = *raft_get_membership(s->raft);
    int rv = 0;
    mvcc_set_step(s->kv, s->cfg.apply_step_limit ? s->cfg.apply_step_limit : APPLY_STEP_DEFAULT,
                  on_apply_step, s);
    mvcc_set_step_pause(s->kv, APPLY_PAUSE_CHANGES, on_apply_pause, s);
    struct raft_entry le = {0};
    bool failed = false;
    if (backend_batch_txn(s->be) == NULL) {
        rv = mvcc_batch_begin(s->kv);
        s->batch_opened_ms = uv_now(s->loop);
        s->batch_entries = 0;
    }
    while (rv == 0 && s->applied_index < s->handed_index) {
        /* handed out and not applied: still in the core's log (raft.h) */
        const struct raft_entry *p = raft_get_entry(s->raft, s->applied_index + 1);
        uint64_t first = raft_get_first_index(s->raft);
        if (p == NULL && s->applied_index + 1 < first) {
            /* a store behind the core's snapshot: what Raft hands out
             * starts after it (as rd.committed did) */
            log_warn("server", "the store's index %llu is behind the log's first entry %llu",
                     (unsigned long long)s->applied_index, (unsigned long long)first);
            s->applied_index = first - 1;
            continue;
        }
        if (p == NULL) {
            log_error("server", "entry %llu was handed out but is not in the log",
                      (unsigned long long)s->applied_index + 1);
            abort();
        }
        le = *p;
        if (le.type == RAFT_ENTRY_CONF) {
            struct raft_membership next;
            if (raft_membership_decode(le.data, le.len, &next) == 0) {
                rv = server_members_conf_applied(s, &cur, &next);
                cur = next;
            }
        } else if (le.len >= ENTRY_HDR) {
            uint64_t t0 = metrics_now_ns();
            rv = apply_normal(s, &le, done);
            if (metrics_now_ns() - t0 > SLOW_APPLY_NS)
                metrics_inc(server_metrics.slow_apply);
        }
        if (rv == 0) {
            s->applied_index = le.index;
            s->batch_entries++;
        } else {
            failed = true;
        }
    }
    if (rv == 0)
        rv = backend_meta_put(s->be, "consistent_index", s->applied_index);
    if (rv != 0) {
        /* The index in memory is ahead of the disk and nothing of this
         * batch was answered: stop, and let the restart replay the WAL
         * from what LMDB holds (as etcd panics on a backend failure). */
        int lrc = backend_last_rc();
        const uint8_t *d = failed ? le.data : NULL;
        const ProtobufCMessageDescriptor *desc =
            failed && le.type != RAFT_ENTRY_CONF && le.len >= ENTRY_HDR ? entry_desc(d[0]) : NULL;
        if (failed)
            log_error("server",
                      "applying a batch failed at entry %llu (%s): %s (LMDB: %s); stopping: "
                      "the restart applies it again from the log",
                      (unsigned long long)le.index,
                      le.type == RAFT_ENTRY_CONF ? "membership change"
                      : desc != NULL             ? desc->short_name
                                                 : "unknown",
                      q_strerror(rv), lrc ? mdb_strerror(lrc) : "none");
        else
            log_error("server",
                      "applying a batch failed recording the consistent index %llu: %s "
                      "(LMDB: %s); stopping",
                      (unsigned long long)s->applied_index, q_strerror(rv),
                      lrc ? mdb_strerror(lrc) : "none");
        server_storage_fatal("server", "applying a batch", rv);
    }
    server_compact_kick(s);
    /* durable in the WAL: watchers may see it (the store commits later) */
    watch_hub_commit(s->watches);
    server_watch_kick(s);
    if (s->batch_entries >= BATCH_MAX_ENTRIES ||
        uv_now(s->loop) - s->batch_opened_ms >= BATCH_INTERVAL_MS)
        server_flush(s);
    if (s->peers_dirty) {
        s->peers_dirty = false;
        sync_peers(s);
    }
}

/* apply_paused_publish: at the first pause of a big revision, the entries
 * applied before it in the run are whole and durable in the WAL: their
 * watchers get them now, not when the big one ends (watch_hub_commit
 * leaves the big revision's changes pending). On the loop's stack. */
static void apply_paused_publish(struct server *s)
{
    if (!s->apply_paused || s->applying_pauses != 1)
        return;
    watch_hub_commit(s->watches);
    server_watch_kick(s);
}

/* apply_pending starts a run for the entries handed out and not applied,
 * unless one is paused (it applies them when it goes on). */
static void apply_pending(struct server *s)
{
    if (s->apply_paused || coro_running(s->apply_coro) || s->applied_index >= s->handed_index)
        return;
    if (s->apply_coro == NULL && coro_new(APPLY_STACK_BYTES, &s->apply_coro) != 0) {
        apply_run(s); /* no stack for it: the steps hold the loop, as they used to */
        return;
    }
    coro_start(s->apply_coro, apply_run, s);
    apply_paused_publish(s);
}

static void apply_waits_run(struct server *s)
{
    struct apply_wait *w;
    while (!s->apply_paused && (w = s->apply_waits) != NULL) {
        s->apply_waits = w->next;
        if (s->apply_waits == NULL)
            s->apply_waits_tail = NULL;
        void (*fn)(void *) = w->fn;
        void *arg = w->arg;
        free(w);
        fn(arg);
    }
}

bool server_apply_wait(struct server *s, void (*fn)(void *), void *arg)
{
    if (!s->apply_paused)
        return false;
    struct apply_wait *w = calloc(1, sizeof(*w));
    if (w == NULL)
        abort(); /* tiny; nothing sensible to do without it */
    w->fn = fn;
    w->arg = arg;
    if (s->apply_waits_tail != NULL)
        *s->apply_waits_tail = w;
    else
        s->apply_waits = w;
    s->apply_waits_tail = &w->next;
    return true;
}

static void answer_applied(struct server *s, const struct raft_membership *before);
static void check_leader(struct server *s);

/* on_apply_idle continues a paused run by one step. A run that ends here
 * reports its entries to Raft (unless a Ready is out: its finish_round
 * does) and has them answered. */
static void on_apply_idle(uv_idle_t *h)
{
    struct server *s = h->data;
    if (s->apply_paused)
        coro_resume(s->apply_coro);
    if (s->apply_paused) {
        apply_paused_publish(s);
        return;
    }
    uv_idle_stop(h);
    apply_waits_run(s);
    if (s->persisting || s->raft == NULL || s->removed || s->closing)
        return;
    struct raft_membership before = *raft_get_membership(s->raft);
    raft_set_applied(s->raft, s->applied_index);
    answer_applied(s, &before);
    check_leader(s);
    serve_reads(s);
}

void server_apply_finish(struct server *s)
{
    s->apply_no_pause = true;
    if (s->apply_paused)
        coro_resume(s->apply_coro); /* it yields no more */
    if (s->apply_idle.data != NULL)
        uv_idle_stop(&s->apply_idle);
    apply_waits_run(s);
    struct entry *e;
    while ((e = s->applied_done.head) != NULL) {
        list_remove(&s->applied_done, e);
        finish(s, e);
    }
}

/* ---- leadership ---- */

static void check_leader(struct server *s)
{
    uint64_t lead = raft_get_leader(s->raft);
    if (lead != s->last_leader) {
        /* etcd's raft/node.go lines, word for word (ids in %x) */
        unsigned long long me = s->member_id, old = s->last_leader, term = raft_get_term(s->raft);
        if (lead == me)
            log_info("raft", "%llx became leader at term %llu", me, term);
        if (lead != RAFT_NONE && old == RAFT_NONE)
            log_info("raft", "raft.node: %llx elected leader %llx at term %llu", me,
                     (unsigned long long)lead, term);
        else if (lead != RAFT_NONE)
            log_info("raft", "raft.node: %llx changed leader from %llx to %llx at term %llu", me,
                     old, (unsigned long long)lead, term);
        else
            log_info("raft", "raft.node: %llx lost leader %llx at term %llu", me, old, term);
        s->last_leader = lead;
        if (lead != RAFT_NONE) /* as etcd counts: a new leader, the first included */
            metrics_inc(server_metrics.leader_changes);
        /* reads asked of the old leader are dropped by the core: ask again */
        for (struct entry *e = s->reads.head; e != NULL; e = e->next)
            if (!e->ready)
                e->ctx = 0;
    }
    bool leader = raft_get_role(s->raft) == RAFT_LEADER;
    if (leader && !s->was_leader) {
        lessor_promote(s->leases, (int64_t)uv_now(s->loop));
        for (size_t k = 0; k < s->n_peers; k++) /* heartbeat_sent starts over */
            s->peers[k].last_heartbeat_ms = 0;
    }
    else if (!leader && s->was_leader)
        lessor_demote(s->leases);
    s->was_leader = leader;
    if (lead != RAFT_NONE && !s->published)
        server_members_publish(s);
}

static bool is_member(const struct raft_membership *m, uint64_t id)
{
    return raft_membership_is_voter(m, id) || raft_membership_is_learner(m, id);
}

/* ---- the Ready loop ---- */

/* heartbeat_sent is etcd's timeout detector: a heartbeat to a peer more
 * than two heartbeat intervals after the last one counts as a failure to
 * send it on time (the leader was held up, usually by a slow disk). */
static void heartbeat_sent(struct server *s, uint64_t to)
{
    uint64_t now = uv_now(s->loop), hb = s->cfg.heartbeat_ms ? s->cfg.heartbeat_ms : 100;
    for (size_t k = 0; k < s->n_peers; k++) {
        if (s->peers[k].id != to)
            continue;
        uint64_t last = s->peers[k].last_heartbeat_ms;
        s->peers[k].last_heartbeat_ms = now;
        if (last != 0 && now - last > 2 * hb) {
            metrics_inc(server_metrics.heartbeat_failures);
            log_warn("raft", "leader failed to send out heartbeat on time to %016llx; took %llu "
                             "ms (heartbeat interval %llu ms), likely held up by a slow disk",
                     (unsigned long long)to, (unsigned long long)(now - last),
                     (unsigned long long)hb);
        }
        return;
    }
}

static void send_msgs(struct server *s, const struct raft_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].type == RAFT_MSG_HEARTBEAT)
            heartbeat_sent(s, msgs[i].to);
        if (msgs[i].type == RAFT_MSG_SNAP)
            send_snapshot(s, &msgs[i]);
        else
            transport_send(s->tp, &msgs[i]); /* unknown peers: dropped */
    }
}

/* finish_round does the rest of a Ready once its state is durable: send,
 * apply, advance, and what follows from it. */
static void finish_round(struct server *s)
{
    struct raft_ready *rd = &s->rd;
    if (!s->rd_sent)
        send_msgs(s, rd->msgs, rd->n_msgs);
    s->rd_sent = false;
    if (rd->n_committed > 0 && rd->committed[rd->n_committed - 1].index > s->handed_index)
        s->handed_index = rd->committed[rd->n_committed - 1].index;
    apply_pending(s);
    for (size_t i = 0; i < rd->n_reads; i++)
        for (struct entry *e = s->reads.head; e != NULL; e = e->next)
            if (e->ctx == rd->reads[i].ctx) {
                e->index = rd->reads[i].index;
                e->ready = true;
            }
    struct raft_membership before = *raft_get_membership(s->raft);
    /* what is applied: an entry paused between steps is not, nor what
     * came after it */
    raft_advance_applied(s->raft, s->applied_index);
    trim_log(s);
    answer_applied(s, &before);
    check_leader(s);
    serve_reads(s);
}

/* answer_applied answers the applied writes and acts on a change of the
 * applied membership (|before|: the one before Raft was told). */
static void answer_applied(struct server *s, const struct raft_membership *before_p)
{
    struct raft_membership before = *before_p;
    /* answers run callbacks that may propose: only now, after advance */
    struct entry *e;
    while ((e = s->applied_done.head) != NULL) {
        list_remove(&s->applied_done, e);
        if (e->physical && e->err == 0 && mvcc_compacting(s->kv)) {
            list_push(&s->compact_waits, e); /* answered when the removal ends */
            server_compact_kick(s);
        } else if (!retry_old_auth(s, e)) {
            finish(s, e);
        }
    }
    const struct raft_membership *after = raft_get_membership(s->raft);
    if (s->peers_dirty) {
        s->peers_dirty = false;
        sync_peers(s);
    }
    if (memcmp(&before, after, sizeof(before)) != 0) {
        sync_peers(s);
        server_members_check_waits(s);
        if (is_member(&before, s->member_id) && !is_member(after, s->member_id)) {
            log_warn("server", "this member (%016llx) was removed from the cluster; stopping",
                     (unsigned long long)s->member_id);
            s->removed = true;
            server_stop(s, NULL, NULL);
        }
    }
}

/* persist_work runs on a worker thread: the Ready's entries and hard state
 * go to the WAL with one fdatasync. The loop thread does not change the
 * core meanwhile (inputs are deferred), so the Ready's memory is stable. */
static void persist_work(uv_work_t *w)
{
    struct server *s = w->data;
    struct raft_ready *rd = &s->rd;
    int rv = 0;
    s->work_sync_failed = false;
    s->work_space = false;
    if (rd->n_entries > 0 || rd->hs_changed)
        rv = wal_save(s->wal, rd->hs_changed ? &rd->hs : NULL, rd->entries, rd->n_entries);
    if (rv == -ENOSPC || rv == -EDQUOT)
        s->work_space = wal_failed(s->wal) == 0; /* the same save can be tried again */
    if (rv == 0 && (rv = wal_sync(s->wal)) != 0)
        s->work_sync_failed = true;
    s->work_rv = rv;
}

static void replay_deferred(struct server *s);
static void node_closed_step(struct node_close *nc);

/* hold_for_space keeps the Ready whose write the disk refused for space
 * (ENOSPC, EDQUOT: nothing it had taken is in doubt, unlike a failed
 * sync) and has on_tick write it again every DISK_RETRY_MS. Meanwhile the
 * core stays as it is (inputs are deferred as during any write), new
 * writes are refused with etcd's "database space exceeded", and reads of
 * the store are served. Once the write goes through the member carries on
 * where it was; nothing was sent or answered for what was not durable. */
#define DISK_RETRY_MS 1000

static void persist_done(uv_work_t *w, int status);

/* ---- the WAL's thread ----
 *
 * Each round's write and fdatasync (persist_work) run on a thread of the
 * member's own, not on libuv's pool: the pool's four threads took the
 * rounds in turn, so each round began on a thread whose cache held
 * nothing of the last, and snapshot copies, defragmentation and bcrypt,
 * which share the pool, could make a round wait behind them. One round is
 * handed over at a time (s->persisting); its end comes back to the loop
 * through an async handle, which calls persist_done as the pool did.
 * When the thread cannot be made, the pool takes the rounds as before. */
struct persister {
    struct server *s;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool job;    /* a round handed over, not written yet */
    bool done;   /* written: persist_done not called yet */
    bool stop;   /* server_node_close: end once no round is left */
    bool exited; /* the thread returned: join it */
    uv_async_t async;
    struct node_close *nc; /* the close waiting for the handle */
};

static void *persister_main(void *arg)
{
    struct persister *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->job && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (!p->job)
            break;
        pthread_mutex_unlock(&p->mu);
        persist_work(&p->s->work);
        pthread_mutex_lock(&p->mu);
        p->job = false;
        p->done = true;
        uv_async_send(&p->async);
    }
    p->exited = true;
    uv_async_send(&p->async);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void on_persister_closed(uv_handle_t *h)
{
    struct persister *p = h->data;
    struct node_close *nc = p->nc;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    node_closed_step(nc);
}

static void on_persister(uv_async_t *a)
{
    struct persister *p = a->data;
    pthread_mutex_lock(&p->mu);
    bool done = p->done, exited = p->exited;
    p->done = false;
    pthread_mutex_unlock(&p->mu);
    if (done)
        persist_done(&p->s->work, 0);
    if (exited && !uv_is_closing((uv_handle_t *)&p->async)) {
        pthread_join(p->th, NULL);
        p->s->persister = NULL;
        uv_close((uv_handle_t *)&p->async, on_persister_closed);
    }
}

static void free_persister(uv_handle_t *h)
{
    free(h->data);
}

static void persister_start(struct server *s)
{
    struct persister *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return;
    p->s = s;
    int rv = uv_async_init(s->loop, &p->async, on_persister);
    if (rv != 0) {
        free(p);
        log_warn("wal", "no thread of its own for the log (%s): libuv's pool writes it",
                 uv_strerror(rv));
        return;
    }
    p->async.data = p;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if ((rv = pthread_create(&p->th, NULL, persister_main, p)) != 0) {
        log_warn("wal", "no thread of its own for the log (%s): libuv's pool writes it",
                 strerror(rv));
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        uv_close((uv_handle_t *)&p->async, free_persister);
        return;
    }
    s->persister = p;
}

/* persister_stop ends the thread once the round it may have has come back
 * (persist_done) and then closes the handle: one step of |nc| */
static void persister_stop(struct persister *p, struct node_close *nc)
{
    p->nc = nc;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* persist_submit hands the Ready in s->rd to the WAL's thread (or the
 * pool): persist_done follows. */
static int persist_submit(struct server *s)
{
    s->work.data = s;
    struct persister *p = s->persister;
    if (p != NULL) {
        pthread_mutex_lock(&p->mu);
        bool taken = !p->stop; /* after server_node_close it takes no more */
        if (taken) {
            p->job = true;
            pthread_cond_signal(&p->cv);
        }
        pthread_mutex_unlock(&p->mu);
        if (taken)
            return 0;
    }
    return uv_queue_work(s->loop, &s->work, persist_work, persist_done);
}

static void hold_for_space(struct server *s)
{
    uint64_t now = uv_now(s->loop);
    s->persisting = true;
    s->persist_waiting = true;
    s->disk_retry_ms = now + DISK_RETRY_MS;
    if (s->disk_full)
        return;
    s->disk_full = true;
    s->disk_full_since_ms = now;
    log_error("wal",
              "writing the log failed: %s; refusing writes until the disk has space "
              "(trying again every %d ms; reads are served)",
              q_strerror(s->work_rv), DISK_RETRY_MS);
    struct entry *e;
    while ((e = s->queued.head) != NULL) {
        list_remove(&s->queued, e);
        fail(s, e, QERR_NO_SPACE);
    }
}

static void persist_retry(struct server *s)
{
    s->persist_waiting = false;
    if (persist_submit(s) != 0) {
        s->persist_waiting = true;
        s->disk_retry_ms = uv_now(s->loop) + DISK_RETRY_MS;
    }
}

static void persist_done(uv_work_t *w, int status)
{
    (void)status;
    struct server *s = w->data;
    s->persisting = false;
    if (s->work_rv != 0 && s->work_space && s->node_closing == NULL) {
        hold_for_space(s);
        return;
    }
    if (s->work_rv != 0 && !s->work_space) /* nothing of this Ready may be sent or
                                            * applied: the disk did not take it
                                            * (etcd's lg.Fatal here too) */
        server_storage_fatal(
            "wal", s->work_sync_failed ? "fdatasync of the log" : "writing the log", s->work_rv);
    if (s->disk_full && s->work_rv == 0) {
        s->disk_full = false;
        log_info("wal", "the log takes writes again, after %llu ms without space",
                 (unsigned long long)(uv_now(s->loop) - s->disk_full_since_ms));
    }
    if (s->node_closing != NULL) {
        node_closed_step(s->node_closing);
        return;
    }
    s->synced_term = s->rd.hs.term;
    s->synced_vote = s->rd.hs.vote;
    finish_round(s);
    replay_deferred(s);
    server_node_pass(s);
}

/* run_ready takes Ready rounds until there is nothing to do or one waits
 * for the disk. A round that must persist entries, a new term or vote, or a
 * snapshot hands the fdatasync to a worker thread and continues in
 * persist_done; one that only advances the commit index writes it without
 * a sync (the commit index can be learned again after a crash, as etcd's
 * MustSync reasons) and continues at once. */
static void run_ready(struct server *s)
{
    while (!s->persisting && s->wal != NULL && !s->removed && raft_has_ready(s->raft)) {
        struct raft_ready *rd = &s->rd;
        if (raft_ready(s->raft, rd) != 0)
            return;
        int rv = 0;
        if (rd->snapshot != NULL) {
            install_snapshot(s, rd->snapshot);
            rv = wal_snap_save(s->cfg.data_dir, rd->snapshot);
            if (rv == 0)
                rv = wal_save_snapshot(s->wal, rd->snapshot->index, rd->snapshot->term,
                                       WAL_SNAP_DROP_ENTRIES);
            s->snap_index = rd->snapshot->index;
            if (rd->snapshot->index > s->handed_index)
                s->handed_index = rd->snapshot->index;
        }
        bool must_sync =
            rd->snapshot != NULL || rd->n_entries > 0 ||
            (rd->hs_changed && (rd->hs.term != s->synced_term || rd->hs.vote != s->synced_vote));
        if (rv == 0 && must_sync) {
            /* A leader sends its appends while its own disk write runs
             * (raft.h: its term and vote are durable, and no message is
             * stepped before the write completes, so its commit index
             * never counts entries only it holds unsynced). */
            if (rd->snapshot == NULL && raft_get_role(s->raft) == RAFT_LEADER &&
                (!rd->hs_changed ||
                 (rd->hs.term == s->synced_term && rd->hs.vote == s->synced_vote))) {
                send_msgs(s, rd->msgs, rd->n_msgs);
                s->rd_sent = true;
            }
            s->persisting = true;
            rv = persist_submit(s);
            if (rv == 0) {
                fronts_round(s->fronts);
                return;
            }
            s->persisting = false;
        } else if (rv == 0 && rd->hs_changed) {
            rv = wal_save(s->wal, &rd->hs, NULL, 0);
            if ((rv == -ENOSPC || rv == -EDQUOT) && wal_failed(s->wal) == 0)
                rv = 0; /* only the commit index: learned again after a restart */
        }
        if (rv != 0)
            server_storage_fatal("wal", "writing the log", rv);
        finish_round(s);
    }
}

/* ---- inputs that arrive while a Ready is being persisted ---- */

/* defer_msg keeps an encoded copy of |m| (u32 length, bytes) to step once
 * the round is over. */
#define DEFERRED_MAX_BYTES (64u << 20)

static void defer_msg(struct server *s, const struct raft_msg *m)
{
    size_t at = s->deferred.len;
    uint8_t len[4] = {0};
    if (at > DEFERRED_MAX_BYTES)
        return; /* a long wait for the disk: dropped, as a lossy network would */
    if (buf_append(&s->deferred, len, 4) != 0)
        return; /* dropped, as a lossy network would */
    if (transport_msg_encode(m, &s->deferred) != 0) {
        s->deferred.len = at;
        return;
    }
    uint32_t n = (uint32_t)(s->deferred.len - at - 4);
    memcpy(s->deferred.data + at, &n, 4);
}

static void dispatch(struct server *s, const struct raft_msg *m);

static void replay_deferred(struct server *s)
{
    while (s->deferred_ticks > 0) {
        s->deferred_ticks--;
        raft_tick(s->raft);
    }
    if (s->deferred_transfer != 0) {
        if (server_is_leader(s))
            raft_transfer_leader(s->raft, s->deferred_transfer);
        s->deferred_transfer = 0;
    }
    struct buf b = s->deferred;
    memset(&s->deferred, 0, sizeof(s->deferred));
    for (size_t off = 0; off + 4 <= b.len;) {
        uint32_t n;
        memcpy(&n, b.data + off, 4);
        struct transport_msg_view v;
        if (transport_msg_decode(b.data + off + 4, n, &v) == 0) {
            dispatch(s, &v.msg);
            transport_msg_view_free(&v);
        }
        off += 4 + n;
    }
    buf_free(&b);
}

int server_transfer_leader(struct server *s, uint64_t to)
{
    if (s->persisting) {
        s->deferred_transfer = to;
        return 0;
    }
    return raft_transfer_leader(s->raft, to);
}

void server_node_pass(struct server *s)
{
    if (s->raft == NULL || s->removed || s->persisting)
        return;
    check_leader(s);
    propose_queued(s);
    ask_reads(s);
    run_ready(s);
    if (s->wal != NULL && !s->removed)
        maybe_compact(s);
}

/* ---- timers ---- */

static void on_tick(uv_timer_t *t)
{
    struct server *s = t->data;
    if (s->raft == NULL)
        return;
    if (s->db_full && uv_now(s->loop) >= s->db_retry_ms)
        db_reserve(s);
    if (s->persisting) {
        s->deferred_ticks++;
        if (s->persist_waiting && uv_now(s->loop) >= s->disk_retry_ms)
            persist_retry(s);
        return;
    }
    raft_tick(s->raft);
    server_node_pass(s);
}

static void on_purge(uv_timer_t *t)
{
    purge_files(t->data);
}

static void expire(struct server *s, struct entry_list *l, uint64_t now)
{
    for (struct entry *e = l->head, *next; e != NULL; e = next) {
        next = e->next;
        if (e->deadline > now)
            continue;
        list_remove(l, e);
        fail(s, e, QERR_TIMEOUT);
    }
}

/* sample_links notes since when each peer's message link has been up
 * (the strict reconfiguration check asks, members.c). */
static void sample_links(struct server *s, uint64_t now)
{
    for (size_t k = 0; k < s->n_peers; k++) {
        struct transport_peer_stats st;
        bool up = transport_peer_stats(s->tp, s->peers[k].id, &st) == 0 && st.connected;
        if (!up)
            s->peers[k].active_since_ms = 0;
        else if (s->peers[k].active_since_ms == 0)
            s->peers[k].active_since_ms = now;
    }
}

uint64_t server_peer_active_since(const struct server *s, uint64_t id)
{
    for (size_t k = 0; k < s->n_peers; k++)
        if (s->peers[k].id == id)
            return s->peers[k].active_since_ms;
    return 0;
}

static void on_sweep(uv_timer_t *t)
{
    struct server *s = t->data;
    uint64_t now = uv_now(s->loop);
    sample_links(s, now);
    if (backend_batch_txn(s->be) != NULL && now - s->batch_opened_ms >= BATCH_INTERVAL_MS)
        server_flush(s);
    expire(s, &s->queued, now);
    expire(s, &s->waiting, now);
    expire(s, &s->reads, now);
    server_members_fail_waits(s, QERR_TIMEOUT, true);
    server_lease_expire_fwds(s, now);
    if (s->auth != NULL)
        auth_tokens_expire(s->auth);
}

void server_node_fail_all(struct server *s, int err)
{
    struct entry_list *lists[] = {&s->queued, &s->waiting, &s->reads, &s->compact_waits};
    for (size_t i = 0; i < 4; i++) {
        struct entry *e;
        while ((e = lists[i]->head) != NULL) {
            list_remove(lists[i], e);
            fail(s, e, err);
        }
    }
    server_members_fail_waits(s, err, false);
}

/* ---- transport callbacks ---- */

static void dispatch(struct server *s, const struct raft_msg *m)
{
    switch (m->type) {
    case TRANSPORT_MSG_PROP:
        on_forwarded(s, m);
        break;
    case TRANSPORT_MSG_LEASE:
        server_lease_on_request(s, m);
        break;
    case TRANSPORT_MSG_LEASE_RESP:
        server_lease_on_response(s, m);
        break;
    case TRANSPORT_MSG_HASH:
        server_corrupt_on_request(s, m);
        break;
    case TRANSPORT_MSG_HASH_RESP:
        server_corrupt_on_response(s, m);
        break;
    default:
        raft_step(s->raft, m);
    }
}

static void on_message(const struct raft_msg *m, void *arg)
{
    struct server *s = arg;
    if (s->raft == NULL || s->removed)
        return;
    /* only what changes the core waits for the round to end */
    if (s->persisting && (m->type < RAFT_MSG__COUNT || m->type == TRANSPORT_MSG_PROP))
        defer_msg(s, m);
    else
        dispatch(s, m);
}

/* A removed member may not know it was removed (it was cut off before the
 * change reached it): the others refuse it by name, and it stops when it
 * hears that, as etcd's removed members do. */
#define REMOVED_REASON "the member has been permanently removed from the cluster"

static bool refuse_peer(uint64_t from, char *reason, size_t cap, void *arg)
{
    struct server *s = arg;
    if (!server_member_removed(s, from))
        return false;
    snprintf(reason, cap, "%s", REMOVED_REASON);
    return true;
}

static void on_peer_rejected(uint64_t id, const char *reason, void *arg)
{
    struct server *s = arg;
    if (strstr(reason, REMOVED_REASON) == NULL || s->removed)
        return;
    log_warn("server", "member %016llx says %s; stopping", (unsigned long long)id, reason);
    s->removed = true;
    server_stop(s, NULL, NULL);
}

/* members_query: the member list for a member about to join. */
static int members_query(struct buf *out, void *arg)
{
    struct server *s = arg;
    if (s->raft == NULL || raft_get_membership(s->raft)->n_voters == 0)
        return -EAGAIN; /* a member that has not joined knows no cluster */
    return server_members_pack(s, out);
}

/* ---- start and stop ---- */

/* force_new_cluster is etcd's restartAsStandaloneNode (--force-new-cluster):
 * the membership in force at the commit index (the snapshot's, then every
 * committed configuration entry) is replaced by this member alone, with
 * one configuration entry appended right after the commit index and
 * committed with it. The uncommitted tail of the log goes (the new entry
 * overwrites it on replay, wal.h), every committed entry stays, and
 * applying the entry records the others as removed (members.c), so the
 * member leads alone and new members can be added. Returns 1 when it
 * wrote the log (reopen it), 0 when the member is alone already. */
static int force_new_cluster(struct server *s, const struct wal_state *st)
{
    struct raft_membership m = {0};
    uint64_t commit = st->hs.commit;
    if (st->has_snapshot) {
        m = st->snapshot.conf;
        if (commit < st->snapshot.index)
            commit = st->snapshot.index;
    }
    for (size_t i = 0; i < st->n_entries && st->entries[i].index <= commit; i++) {
        const struct raft_entry *e = &st->entries[i];
        struct raft_membership next;
        if (e->type == RAFT_ENTRY_CONF && raft_membership_decode(e->data, e->len, &next) == 0)
            m = next;
    }
    if (m.n_voters == 1 && m.voters[0] == s->member_id && m.n_learners == 0)
        return 0;
    struct raft_membership alone = {.n_voters = 1};
    alone.voters[0] = s->member_id;
    uint8_t buf[8 * (2 + 2 * RAFT_MAX_MEMBERS)];
    size_t len = raft_membership_encode(&alone, buf);
    uint64_t term = st->hs.term ? st->hs.term : 1;
    struct raft_entry e = {
        .term = term, .index = commit + 1, .type = RAFT_ENTRY_CONF, .data = buf, .len = len};
    struct raft_hard_state hs = {.term = term, .vote = st->hs.vote, .commit = commit + 1};
    int rv = wal_save(s->wal, &hs, &e, 1);
    if (rv == 0)
        rv = wal_sync(s->wal);
    if (rv != 0)
        return rv;
    log_warn("server", "forcing restart of member %016llx in cluster %016llx at commit index %llu: "
                       "%u other member(s) removed from the configuration",
             (unsigned long long)s->member_id, (unsigned long long)s->cluster_id,
             (unsigned long long)(commit + 1), m.n_voters + m.n_learners - 1);
    return 1;
}

/* member_localaddr: config_member_localaddr, with a warning when the flag
 * finds no address to use */
static const char *member_localaddr(const struct config *c)
{
    const char *a = config_member_localaddr(c);
    if (a == NULL && c->set_member_localaddr)
        log_warn("server", "--experimental-set-member-localaddr: no advertised peer URL has a "
                           "specified IP address; peer links leave from the system's choice");
    return a;
}

int server_node_start(struct server *s)
{
    const struct config *c = &s->cfg;
    /* --initial-cluster's ids: a joining member's are the cluster's
     * (bootstrap.c); otherwise etcd's derivation from the token */
    for (size_t i = 0; i < c->n_initial_cluster && !s->have_initial_ids; i++) {
        const char *urls[CONFIG_MAX_URLS];
        for (size_t k = 0; k < c->initial_cluster[i].n_peer_urls; k++)
            urls[k] = c->initial_cluster[i].peer_urls[k].text;
        s->initial_ids[i] =
            server_member_id(urls, c->initial_cluster[i].n_peer_urls, c->initial_cluster_token);
    }
    s->request_timeout_ms = 5000 + 2 * c->election_ms;
    struct raft_config rc;
    uint64_t hb = c->heartbeat_ms ? c->heartbeat_ms : 100;
    int rv;
    char err[WAL_ERR_LEN] = "";
    struct wal_options wo = {.data_dir = c->data_dir, .wal_dir = c->wal_dir, .written_ahead = true};
    wal_no_sync = c->unsafe_no_fsync;
    /* the member is its log: built by server_bootstrap on a first start */
    struct wal_state st;
    rv = wal_open(&wo, &s->wal, &st, err, sizeof(err));
    if (rv != 0) {
        log_error("wal", "cannot open the log: %s", err[0] ? err : q_strerror(rv));
        return rv;
    }
    if (st.repaired)
        log_warn("wal", "%s", err);
    s->member_id = st.node_id;
    s->cluster_id = st.cluster_id;
    if (c->force_new_cluster && s->boot == SERVER_BOOT_RESTART) {
        rv = force_new_cluster(s, &st);
        wal_state_free(&st);
        if (rv >= 0) {
            wal_close(s->wal);
            s->wal = NULL;
            rv = wal_open(&wo, &s->wal, &st, err, sizeof(err));
        }
        if (rv != 0) {
            log_error("wal", "--force-new-cluster: %s", err[0] ? err : q_strerror(rv));
            return rv;
        }
    }
    raft_config_default(&rc, s->member_id);
    struct raft_storage rs;
    wal_state_storage(&st, &rs);
    rs.applied = s->applied_index < rs.hs.commit ? s->applied_index : rs.hs.commit;
    s->synced_term = rs.hs.term; /* what the WAL already holds */
    s->synced_vote = rs.hs.vote;
    if (rs.snapshot != NULL && rs.applied < rs.snapshot->index) {
        log_error("server", "the store is at index %llu, behind the snapshot at %llu",
                  (unsigned long long)s->applied_index, (unsigned long long)rs.snapshot->index);
        wal_state_free(&st);
        return QERR_CORRUPT;
    }
    s->snap_index = st.has_snapshot ? st.snapshot.index : 0;
    rc.election_tick = (unsigned)(c->election_ms / hb);
    rc.heartbeat_tick = 1;
    rc.seed = s->member_id ^ uv_hrtime();
    rv = raft_new(&rc, &rs, NULL, &s->raft);
    wal_state_free(&st);
    if (rv != 0) {
        log_error("raft", "cannot restart from the log: %s", q_strerror(rv));
        return rv;
    }
    if (s->boot == SERVER_BOOT_NEW)
        log_info("server", "starting new member %016llx of cluster %016llx",
                 (unsigned long long)s->member_id, (unsigned long long)s->cluster_id);
    else if (s->boot == SERVER_BOOT_JOIN)
        log_info("server",
                 "joining cluster %016llx as member %016llx (waiting for the leader to contact "
                 "us)",
                 (unsigned long long)s->cluster_id, (unsigned long long)s->member_id);
    else
        log_info("server",
                 "restarted member %016llx of cluster %016llx from the log (commit "
                 "%llu, applied %llu)",
                 (unsigned long long)s->member_id, (unsigned long long)s->cluster_id,
                 (unsigned long long)raft_get_commit(s->raft),
                 (unsigned long long)s->applied_index);

    char dir[1100];
    db_dir(s, dir, sizeof(dir));
    struct transport_options to = {
        .id = s->member_id,
        .cluster_id = s->cluster_id,
        .snap_dir = dir,
        .cb = {.on_message = on_message,
               .on_snapshot = on_snapshot,
               .on_snapshot_sent = on_snapshot_sent,
               .on_peer_rejected = on_peer_rejected,
               .refuse_peer = refuse_peer,
               .members_query = members_query},
        .arg = s,
        .tls_server = c->n_listen_peer > 0 && c->listen_peer[0].tls ? s->tls.peer_server : NULL,
        .tls_client = s->tls.peer_client,
        .local_addr = member_localaddr(c),
    };
    if (to.local_addr != NULL)
        log_info("server", "peer links leave from %s", to.local_addr);
    if ((rv = transport_new(s->loop, &to, &s->tp)) != 0)
        return rv;
    if (s->peer_fd >= 0) { /* bound at start (bootstrap.c) */
        rv = transport_listen_fd(s->tp, s->peer_fd);
        s->peer_fd = -1;
        if (rv != 0) {
            log_error("server", "cannot listen for peers on %s: %s", c->listen_peer[0].text,
                      uv_strerror(rv));
            return rv;
        }
    }
    sync_peers(s);
    s->last_leader = RAFT_NONE;
    /* a lone voter need not wait an election timeout to lead */
    const struct raft_membership *m = raft_get_membership(s->raft);
    if (m->n_voters == 1 && m->voters[0] == s->member_id && s->wal != NULL)
        raft_campaign(s->raft);
    persister_start(s);
    uv_timer_init(s->loop, &s->tick);
    s->tick.data = s;
    uv_timer_start(&s->tick, on_tick, hb, hb);
    uv_timer_init(s->loop, &s->sweep);
    s->sweep.data = s;
    uv_timer_start(&s->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_timer_init(s->loop, &s->purge);
    s->purge.data = s;
    uv_timer_start(&s->purge, on_purge, PURGE_INTERVAL_MS, PURGE_INTERVAL_MS);
    server_node_pass(s);
    return 0;
}

struct node_close {
    struct server *s;
    int pending;
    void (*cb)(void *);
    void *arg;
};

static void node_closed_step(struct node_close *nc)
{
    if (--nc->pending > 0)
        return;
    struct server *s = nc->s;
    buf_free(&s->deferred);
    buf_free(&s->zk_body);
    buf_free(&s->zk_rec);
    mvcc_prepared_free(s->recv_prepared);
    s->recv_prepared = NULL;
    raft_free(s->raft);
    s->raft = NULL;
    wal_close(s->wal);
    s->wal = NULL;
    for (size_t k = 0; k < CONFIG_MAX_MEMBERS; k++)
        if (s->snap_out[k].to != 0)
            unlink(s->snap_out[k].path);
    void (*cb)(void *) = nc->cb;
    void *arg = nc->arg;
    free(nc);
    if (cb)
        cb(arg);
}

static void on_node_handle_closed(uv_handle_t *h)
{
    node_closed_step(h->data);
}

static void on_tp_closed(void *arg)
{
    node_closed_step(arg);
}

void server_node_close(struct server *s, void (*cb)(void *), void *arg)
{
    struct node_close *nc = calloc(1, sizeof(*nc));
    if (nc == NULL)
        abort(); /* tiny; nothing sensible to do without it */
    nc->s = s;
    nc->cb = cb;
    nc->arg = arg;
    /* a Ready held for space has no write under way: it is given up */
    nc->pending = 4 + (s->persisting && !s->persist_waiting ? 1 : 0) + (int)s->snap_jobs;
    if (nc->pending > 4)
        s->node_closing = nc; /* persist_done and snap_job_done finish it */
    if (s->persister != NULL) {
        nc->pending++; /* the WAL's thread: on_persister_closed */
        persister_stop(s->persister, nc);
    }
    s->tick.data = nc;
    s->sweep.data = nc;
    s->purge.data = nc;
    uv_close((uv_handle_t *)&s->tick, on_node_handle_closed);
    uv_close((uv_handle_t *)&s->sweep, on_node_handle_closed);
    uv_close((uv_handle_t *)&s->purge, on_node_handle_closed);
    transport_close(s->tp, on_tp_closed, nc);
    s->tp = NULL;
}
