/* server/etcd_import.c: start quorum on an etcd 3.4 data directory.
 *
 * etcd's member directory (what a stopped etcd or `etcdctl snapshot
 * restore` leaves):
 *   member/snap/db                  the bbolt store (keys, leases, members,
 *                                   auth, the consistent index)
 *   member/snap/%016x-%016x.snap    Raft snapshots (v2 store JSON)
 *   member/wal/%016x-%016x.wal      the Raft log (src/etcdwal)
 * quorum's: member/db/data.mdb, member/wal and member/snap in its own
 * formats (wal/wal.h). The names collide, so the conversion is done once,
 * aside, and the directories swapped:
 *
 *   1. read etcd's log (etcdwal_read): metadata (member and cluster id),
 *      hard state, the snapshot's membership, the entries after it;
 *   2. <data-dir>/member.etcd-import/member/db: the store, from etcd's
 *      bbolt file (etcdfmt_db_import), at etcd's consistent index C;
 *   3. every entry after C translated to quorum's log entry (node.c's
 *      format) at the same index and term, so every member of an etcd
 *      cluster converts to the same log; quorum's log gets a snapshot at C
 *      (its term, the membership at C) when C > 0, those entries and etcd's
 *      hard state; a member named in the membership the store does not
 *      know gets its URLs from the conf change or the v2 store;
 *   4. everything synced, the file COMPLETE written in the stage;
 *   5. rename member -> member.etcd, rename the stage's member -> member,
 *      remove the stage.
 *
 * With --wal-dir (etcd's log in <wal-dir>, its .snap files and store in
 * <data-dir>/member/snap): etcd's log is read there, quorum's is built in
 * <wal-dir>.etcd-import, and the swap is four renames: member ->
 * member.etcd, <wal-dir> -> <wal-dir>.etcd, the stage's member -> member,
 * <wal-dir>.etcd-import -> <wal-dir> (quorum's .snap files stay in
 * member/snap, as etcd's).
 *
 * Crash safety: before 5 nothing of etcd's has changed and a restart
 * removes the stage and converts again. Between the renames (member gone,
 * member.etcd there) a restart finishes with the second rename if the
 * stage is COMPLETE (every rename not yet done, in the same order), and
 * else renames member.etcd (and <wal-dir>.etcd) back and converts again.
 * An entry quorum cannot translate, or a log or store that does not read,
 * stops the conversion with the reason; etcd's directory stays as it was.
 *
 * What is translated: Put, DeleteRange, Txn, Compaction, LeaseGrant,
 * LeaseRevoke, LeaseCheckpoint, Alarm and the Auth requests to their
 * quorum entries (the header's user and auth revision kept for the check
 * at apply); raftpb ConfChange (add, add learner, remove) to quorum's
 * membership entry; update node and the v2 publish of a member's
 * attributes to quorum's member entry. A leader's empty entry, etcd's v2
 * SYNC and cluster-version writes, Authenticate (simple tokens do not
 * outlive a restart) and Range become empty entries (no-ops). Writes of
 * the v2 API (etcd's v2 store, which quorum does not carry over) become
 * no-ops with a warning. A UserAdd or ChangePassword: etcd 3.4 logs the
 * password, quorum's entry gets its bcrypt hash instead (etcd's cost, 10),
 * as auth_service.c proposes it. Refused: ConfChangeV2 (etcd 3.4 writes
 * none), a conf change of no known type or for node id 0, a request of no
 * known kind, anything that does not decode; and etcd's store without its
 * log (etcd ran with --wal-dir and quorum was started without it, or the
 * other way round), which would otherwise start an empty member. */
#include "server/etcd_import.h"
#include "server/server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/fs.h"
#include "auth/auth.h"
#include "base/log.h"
#include "etcdfmt/etcdfmt.h"
#include "etcdserver.pb-c.h"
#include "etcdwal/etcdwal.h"
#include "raft_internal.pb-c.h"
#include "raftpb.pb-c.h"
#include "wal/wal.h"

#define STAGE "member.etcd-import"
#define ORIG "member.etcd"
/* beside --wal-dir: */
#define WAL_STAGE ".etcd-import"
#define WAL_ORIG ".etcd"

_Static_assert(ETCDWAL_MAX_MEMBERS <= RAFT_MAX_MEMBERS, "a snapshot's members fit a membership");
_Static_assert(ETCDWAL_MAX_URLS <= CONFIG_MAX_URLS, "etcd's URLs fit a member");

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static int fail(char *err, size_t cap, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int rv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return rv;
}

/* ---- membership ---- */

static bool has(const uint64_t *v, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

static void drop(uint64_t *v, uint32_t *n, uint64_t id)
{
    for (uint32_t i = 0; i < *n; i++)
        if (v[i] == id) {
            v[i] = v[--*n];
            return;
        }
}

/* conf_change applies etcd raft's ConfChange to |m| (as raft's
 * applyConfChange: add promotes a learner, add learner of a voter is
 * refused by etcd before logging). */
static int conf_change(struct raft_membership *m, int type, uint64_t id)
{
    if (id == 0)
        return -EINVAL; /* raft's "none" */
    switch (type) {
    case RAFTPB__CONF_CHANGE_TYPE__ConfChangeAddNode:
        drop(m->learners, &m->n_learners, id);
        if (!has(m->voters, m->n_voters, id)) {
            if (m->n_voters >= RAFT_MAX_MEMBERS)
                return -E2BIG;
            m->voters[m->n_voters++] = id;
        }
        return 0;
    case RAFTPB__CONF_CHANGE_TYPE__ConfChangeAddLearnerNode:
        if (has(m->voters, m->n_voters, id) || has(m->learners, m->n_learners, id))
            return 0;
        if (m->n_learners >= RAFT_MAX_MEMBERS)
            return -E2BIG;
        m->learners[m->n_learners++] = id;
        return 0;
    case RAFTPB__CONF_CHANGE_TYPE__ConfChangeRemoveNode:
        drop(m->voters, &m->n_voters, id);
        drop(m->learners, &m->n_learners, id);
        return 0;
    case RAFTPB__CONF_CHANGE_TYPE__ConfChangeUpdateNode: /* no change of membership */
        return 0;
    default:
        return -EINVAL;
    }
}

/* ---- entries ---- */

struct conv {
    struct etcdwal_state st;
    uint64_t ci, ci_term;
    struct raft_membership conf; /* running membership */
    struct raft_entry *out;      /* translated entries after ci */
    size_t n_out;
    struct buf *bufs; /* their data */
    /* members whose URLs the store may lack: from conf changes */
    struct etcdwal_member added[ETCDWAL_MAX_MEMBERS];
    size_t n_added;
    size_t v2_dropped;
};

/* put_entry: quorum's log entry (server_entry_encode) for a request of
 * etcd's log: the user and auth revision of its header kept for the check
 * at apply, proposer 0 (nobody waits for a converted entry) */
static int put_entry(struct buf *b, enum entry_kind kind, unsigned flags,
                     const Etcdserverpb__RequestHeader *h, const ProtobufCMessage *msg)
{
    const char *user = h != NULL && h->username != NULL && h->username[0] ? h->username : NULL;
    return server_entry_encode(b, kind, user == NULL && (flags & ENTRY_FLAG_INTERNAL), 0, 0, user,
                               user != NULL ? h->auth_revision : 0, msg, NULL);
}

/* hash_password: etcd 3.4 logs a UserAdd's or ChangePassword's password;
 * quorum's entry carries its bcrypt hash (base64, as auth_service.c
 * proposes it) and never the password. etcd's cost (bcrypt.DefaultCost). */
static int hash_password(char **password, char **hashed)
{
    if (*password == NULL || (*password)[0] == '\0')
        return 0; /* no password: nothing to hash */
    char raw[128];
    int rv = auth_hash_password(10, *password, raw, sizeof(raw));
    if (rv != 0)
        return rv;
    char *h = malloc(4 * (strlen(raw) / 3 + 1) + 1);
    if (h == NULL) {
        explicit_bzero(raw, sizeof(raw));
        return -ENOMEM;
    }
    EVP_EncodeBlock((unsigned char *)h, (const unsigned char *)raw, (int)strlen(raw));
    explicit_bzero(raw, sizeof(raw));
    explicit_bzero(*password, strlen(*password));
    /* the unpacked message owns its strings (malloc'd by protobuf-c):
     * free_unpacked frees this one */
    if (*hashed != NULL && *hashed != protobuf_c_empty_string)
        free(*hashed);
    *hashed = h;
    return 0;
}

/* v2_request: etcd's own v2 writes. 0 with |b| empty (a no-op) or filled
 * (a member entry). */
static int v2_request(struct conv *c, const struct etcdwal_entry *e, const Etcdserverpb__Request *r,
                      struct buf *b)
{
    const char *path = r->path ? r->path : "";
    const char *method = r->method ? r->method : "";
    static const char pre[] = "/0/members/";
    if (strcmp(method, "PUT") == 0 && strncmp(path, pre, sizeof(pre) - 1) == 0) {
        const char *idp = path + sizeof(pre) - 1;
        char *end;
        uint64_t id = strtoull(idp, &end, 16);
        if (end != idp && strcmp(end, "/attributes") == 0 && r->val != NULL) {
            struct etcdwal_member m;
            if (etcdwal_member_json((const uint8_t *)r->val, strlen(r->val), &m) != 0)
                return QERR_CORRUPT;
            char *client[ETCDWAL_MAX_URLS];
            for (size_t i = 0; i < m.n_client; i++)
                client[i] = m.client[i];
            Etcdserverpb__Member pm = ETCDSERVERPB__MEMBER__INIT;
            pm.id = id;
            pm.name = m.name;
            pm.clienturls = client;
            pm.n_clienturls = m.n_client;
            return put_entry(b, ENTRY_MEMBER, ENTRY_FLAG_INTERNAL, NULL, &pm.base);
        }
    }
    if (strcmp(method, "SYNC") == 0 || strcmp(path, "/0/version") == 0)
        return 0;
    if (strncmp(path, "/0/", 3) == 0 || strcmp(path, "/0") == 0)
        return 0; /* etcd's own bookkeeping: membership lives elsewhere */
    c->v2_dropped++;
    log_warn("server",
             "etcd import: entry %" PRIu64 ": a v2 %s of %s dropped (etcd's v2 store is "
             "not carried over)",
             e->index, method, path);
    return 0;
}

static int normal_entry(struct conv *c, const struct etcdwal_entry *e, struct buf *b, char *err,
                        size_t cap)
{
    if (e->len == 0)
        return 0; /* a new leader's empty entry */
    Etcdserverpb__InternalRaftRequest *r =
        etcdserverpb__internal_raft_request__unpack(NULL, e->len, e->data);
    if (r == NULL || r->v2 != NULL) {
        /* etcd's fallback: a bare v2 Request */
        Etcdserverpb__Request *v2 =
            r != NULL ? r->v2 : etcdserverpb__request__unpack(NULL, e->len, e->data);
        int rv = v2 != NULL ? v2_request(c, e, v2, b) : QERR_CORRUPT;
        if (r != NULL)
            etcdserverpb__internal_raft_request__free_unpacked(r, NULL);
        else if (v2 != NULL)
            etcdserverpb__request__free_unpacked(v2, NULL);
        if (rv == QERR_CORRUPT)
            return fail(err, cap, rv, "entry %" PRIu64 " (term %" PRIu64 ") does not decode",
                        e->index, e->term);
        return rv;
    }
    const Etcdserverpb__RequestHeader *h = r->header;
    int rv = 0;
    /* etcd 3.4 logs a new password; quorum's entry carries its hash */
    if (r->auth_user_add != NULL)
        rv = hash_password(&r->auth_user_add->password, &r->auth_user_add->hashedpassword);
    if (r->auth_user_change_password != NULL)
        rv = hash_password(&r->auth_user_change_password->password,
                           &r->auth_user_change_password->hashedpassword);
#define M(field) ((const ProtobufCMessage *)r->field)
    const struct {
        const ProtobufCMessage *req;
        int kind; /* enum entry_kind; -1: a no-op after a restart */
        unsigned flags;
    } map[] = {
        {M(range), -1, 0},
        {M(authenticate), -1, 0},
        {M(put), ENTRY_PUT, 0},
        {M(delete_range), ENTRY_DELETE_RANGE, 0},
        {M(txn), ENTRY_TXN, 0},
        {M(compaction), ENTRY_COMPACT, ENTRY_FLAG_INTERNAL},
        {M(lease_grant), ENTRY_LEASE_GRANT, 0},
        {M(lease_revoke), ENTRY_LEASE_REVOKE, ENTRY_FLAG_INTERNAL},
        {M(lease_checkpoint), ENTRY_LEASE_CHECKPOINT, ENTRY_FLAG_INTERNAL},
        {M(alarm), ENTRY_ALARM, ENTRY_FLAG_INTERNAL},
        {M(auth_enable), ENTRY_AUTH_ENABLE, 0},
        {M(auth_disable), ENTRY_AUTH_DISABLE, 0},
        {M(auth_user_add), ENTRY_AUTH_USER_ADD, 0},
        {M(auth_user_delete), ENTRY_AUTH_USER_DELETE, 0},
        {M(auth_user_get), ENTRY_AUTH_USER_GET, 0},
        {M(auth_user_change_password), ENTRY_AUTH_USER_CHANGE_PASSWORD, 0},
        {M(auth_user_grant_role), ENTRY_AUTH_USER_GRANT_ROLE, 0},
        {M(auth_user_revoke_role), ENTRY_AUTH_USER_REVOKE_ROLE, 0},
        {M(auth_user_list), ENTRY_AUTH_USER_LIST, 0},
        {M(auth_role_list), ENTRY_AUTH_ROLE_LIST, 0},
        {M(auth_role_add), ENTRY_AUTH_ROLE_ADD, 0},
        {M(auth_role_delete), ENTRY_AUTH_ROLE_DELETE, 0},
        {M(auth_role_get), ENTRY_AUTH_ROLE_GET, 0},
        {M(auth_role_grant_permission), ENTRY_AUTH_ROLE_GRANT_PERMISSION, 0},
        {M(auth_role_revoke_permission), ENTRY_AUTH_ROLE_REVOKE_PERMISSION, 0},
    };
#undef M
    const char *refuse = "a request of a kind etcd 3.4 does not write";
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]) && rv == 0; i++) {
        if (map[i].req == NULL)
            continue;
        refuse = NULL;
        if (map[i].kind >= 0)
            rv = put_entry(b, (enum entry_kind)map[i].kind, map[i].flags, h, map[i].req);
        break;
    }
    if (rv != 0)
        refuse = NULL;
    etcdserverpb__internal_raft_request__free_unpacked(r, NULL);
    if (refuse != NULL)
        return fail(err, cap, -ENOTSUP,
                    "entry %" PRIu64 " is %s, which quorum cannot translate (start etcd again "
                    "so that it applies it, then stop it and start quorum)",
                    e->index, refuse);
    if (rv != 0)
        return fail(err, cap, rv, "entry %" PRIu64 ": %s", e->index, q_strerror(rv));
    return 0;
}

/* conf_entry: a ConfChange at index > C: quorum's membership entry (or a
 * member entry for an update). */
static int conf_entry(struct conv *c, const struct etcdwal_entry *e, struct buf *b,
                      struct raft_entry *out, char *err, size_t cap)
{
    Raftpb__ConfChange *cc = raftpb__conf_change__unpack(NULL, e->len, e->data);
    if (cc == NULL)
        return fail(err, cap, QERR_CORRUPT, "conf change entry %" PRIu64 " does not decode",
                    e->index);
    struct etcdwal_member m;
    bool have_m = cc->has_context && cc->context.len > 0 &&
                  etcdwal_member_json(cc->context.data, cc->context.len, &m) == 0;
    int rv = 0;
    if (cc->type == RAFTPB__CONF_CHANGE_TYPE__ConfChangeUpdateNode) {
        if (have_m && m.n_peer > 0) {
            char *peer[ETCDWAL_MAX_URLS];
            for (size_t i = 0; i < m.n_peer; i++)
                peer[i] = m.peer[i];
            Etcdserverpb__Member pm = ETCDSERVERPB__MEMBER__INIT;
            pm.id = cc->node_id;
            pm.peerurls = peer;
            pm.n_peerurls = m.n_peer;
            rv = put_entry(b, ENTRY_MEMBER, ENTRY_FLAG_INTERNAL, NULL, &pm.base);
        }
        out->type = RAFT_ENTRY_NORMAL;
    } else {
        if (have_m && m.n_peer > 0 && c->n_added < ETCDWAL_MAX_MEMBERS) {
            m.id = cc->node_id;
            c->added[c->n_added++] = m;
        }
        if ((rv = conf_change(&c->conf, cc->type, cc->node_id)) == 0) {
            if (buf_reserve(b, raft_membership_size(&c->conf)) != 0)
                rv = -ENOMEM;
            else
                b->len = raft_membership_encode(&c->conf, b->data);
        }
        out->type = RAFT_ENTRY_CONF;
    }
    raftpb__conf_change__free_unpacked(cc, NULL);
    if (rv != 0)
        return fail(err, cap, rv, "conf change entry %" PRIu64 ": %s", e->index,
                    rv == -E2BIG    ? "too many members"
                    : rv == -EINVAL ? "an unknown change or node id 0"
                                    : q_strerror(rv));
    return 0;
}

int server_etcd_translate(int type, const uint8_t *data, size_t len, struct raft_membership *conf,
                          struct buf *out, uint8_t *raft_type, char *err, size_t cap)
{
    struct conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->conf = *conf;
    struct etcdwal_entry e = {
        .term = 1, .index = 1, .type = type, .data = (uint8_t *)data, .len = len};
    struct raft_entry o = {.type = RAFT_ENTRY_NORMAL};
    int rv;
    if (type == ETCDWAL_ENTRY_CONF_CHANGE)
        rv = conf_entry(c, &e, out, &o, err, cap);
    else if (type == ETCDWAL_ENTRY_NORMAL)
        rv = normal_entry(c, &e, out, err, cap);
    else
        rv = fail(err, cap, -ENOTSUP, "entry type %d", type);
    if (rv == 0) {
        *conf = c->conf;
        *raft_type = o.type;
    }
    free(c);
    return rv;
}

static int translate(struct conv *c, char *err, size_t cap)
{
    const struct etcdwal_state *st = &c->st;
    c->out = calloc(st->n_entries + 1, sizeof(*c->out));
    c->bufs = calloc(st->n_entries + 1, sizeof(*c->bufs));
    if (c->out == NULL || c->bufs == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < st->n_entries; i++) {
        const struct etcdwal_entry *e = &st->entries[i];
        if (e->type == ETCDWAL_ENTRY_CONF_CHANGE_V2)
            return fail(err, cap, -ENOTSUP,
                        "entry %" PRIu64 " is a ConfChangeV2, which etcd 3.4 does not write",
                        e->index);
        if (e->index <= c->ci) {
            /* applied already: only the membership matters */
            if (e->type == ETCDWAL_ENTRY_CONF_CHANGE) {
                Raftpb__ConfChange *cc = raftpb__conf_change__unpack(NULL, e->len, e->data);
                if (cc == NULL)
                    return fail(err, cap, QERR_CORRUPT,
                                "conf change entry %" PRIu64 " does not decode", e->index);
                struct etcdwal_member m;
                if (cc->has_context && cc->context.len > 0 &&
                    etcdwal_member_json(cc->context.data, cc->context.len, &m) == 0 &&
                    m.n_peer > 0 && c->n_added < ETCDWAL_MAX_MEMBERS) {
                    m.id = cc->node_id;
                    c->added[c->n_added++] = m;
                }
                int rv = conf_change(&c->conf, cc->type, cc->node_id);
                raftpb__conf_change__free_unpacked(cc, NULL);
                if (rv != 0)
                    return fail(err, cap, rv, "conf change entry %" PRIu64 ": %s", e->index,
                                rv == -E2BIG ? "too many members"
                                             : "an unknown change or node id 0");
            }
            continue;
        }
        if (e->type != ETCDWAL_ENTRY_NORMAL && e->type != ETCDWAL_ENTRY_CONF_CHANGE)
            return fail(err, cap, QERR_CORRUPT, "entry %" PRIu64 " has unknown type %d", e->index,
                        e->type);
        struct raft_entry *o = &c->out[c->n_out];
        struct buf *b = &c->bufs[c->n_out];
        o->term = e->term;
        o->index = e->index;
        o->type = RAFT_ENTRY_NORMAL;
        int rv = e->type == ETCDWAL_ENTRY_CONF_CHANGE ? conf_entry(c, e, b, o, err, cap)
                                                      : normal_entry(c, e, b, err, cap);
        if (rv != 0)
            return rv;
        o->data = b->data;
        o->len = b->len;
        c->n_out++;
    }
    return 0;
}

/* ---- the store's members ---- */

/* fill_members gives every member of the membership (and every member a
 * later conf change adds) the URLs etcd recorded, where the store
 * etcdfmt_db_import built does not have them. */
static int fill_members(struct conv *c, const char *dbdir, char *err, size_t cap)
{
    struct etcdwal_member v2[ETCDWAL_MAX_MEMBERS];
    int nv2 = c->st.snap.data != NULL
                  ? etcdwal_v2_members(c->st.snap.data, c->st.snap.len, v2, ETCDWAL_MAX_MEMBERS)
                  : 0;
    if (nv2 < 0)
        nv2 = 0;
    struct backend_options bo = {.dir = dbdir};
    backend *be = NULL;
    int rv = backend_open(&bo, &be);
    if (rv != 0)
        return fail(err, cap, rv, "cannot open the converted store: %s", q_strerror(rv));
    struct server *s = calloc(1, sizeof(*s)); /* members.c's functions want one */
    if (s == NULL) {
        backend_close(be);
        return -ENOMEM;
    }
    s->be = be;
    if ((rv = backend_batch_begin(be)) == 0) {
        for (size_t k = 0; k < (size_t)nv2 + c->n_added && rv == 0; k++) {
            const struct etcdwal_member *m = k < (size_t)nv2 ? &v2[k] : &c->added[k - (size_t)nv2];
            struct member_info mi;
            if (server_member_get(s, m->id, &mi) == 0 || server_member_removed(s, m->id))
                continue;
            memset(&mi, 0, sizeof(mi));
            mi.id = m->id;
            memcpy(mi.name, m->name, sizeof(mi.name) - 1); /* etcd names fit */
            for (size_t i = 0; i < m->n_peer && i < CONFIG_MAX_URLS; i++)
                snprintf(mi.peer[mi.n_peer++], sizeof(mi.peer[0]), "%s", m->peer[i]);
            for (size_t i = 0; i < m->n_client && i < CONFIG_MAX_URLS; i++)
                snprintf(mi.client[mi.n_client++], sizeof(mi.client[0]), "%s", m->client[i]);
            rv = server_member_put(s, &mi);
        }
        if (rv == 0)
            rv = backend_meta_put(be, "consistent_index", c->ci);

        if (rv == 0)
            rv = backend_batch_commit(be);
        else
            backend_batch_abort(be);
    }
    backend_close(be);
    free(s);
    if (rv != 0)
        return fail(err, cap, rv, "cannot write the converted store: %s", q_strerror(rv));
    return 0;
}

/* ---- the log ---- */

static int build_log(struct conv *c, const char *stage, const char *walstage, char *err,
                     size_t cap)
{
    const struct etcdwal_state *st = &c->st;
    int rv;
    if (c->ci > 0) {
        struct raft_snapshot snap = {.index = c->ci, .term = c->ci_term, .conf = c->conf};
        if ((rv = wal_snap_save(stage, &snap)) != 0)
            return fail(err, cap, rv, "cannot write the log's snapshot: %s", q_strerror(rv));
    }
    struct wal_options wo = {.data_dir = stage,
                             .wal_dir = walstage,
                             .node_id = st->node_id,
                             .cluster_id = st->cluster_id};
    struct wal *w = NULL;
    char werr[WAL_ERR_LEN] = "";
    if ((rv = wal_create(&wo, &w, werr, sizeof(werr))) != 0)
        return fail(err, cap, rv, "cannot create the log: %s", werr[0] ? werr : q_strerror(rv));
    /* the log restarts after the store's index, as after a snapshot
     * received from a leader: a dropping marker, so segments cut below
     * start at the right index */
    if (c->ci > 0)
        rv = wal_save_snapshot(w, c->ci, c->ci_term, WAL_SNAP_DROP_ENTRIES);
    struct raft_hard_state hs = {.term = st->term, .vote = st->vote, .commit = st->commit};
    /* in chunks, so a long tail neither builds one huge write nor misses
     * the segment cuts */
    size_t done = 0;
    do {
        size_t n = c->n_out - done > 4096 ? 4096 : c->n_out - done;
        if (rv == 0)
            rv = wal_save(w, done + n == c->n_out ? &hs : NULL, c->out + done, n);
        done += n;
    } while (rv == 0 && done < c->n_out);
    if (rv == 0)
        rv = wal_sync(w);
    wal_close(w);
    if (rv != 0)
        return fail(err, cap, rv, "cannot write the log: %s", q_strerror(rv));
    return 0;
}

/* ---- the conversion ---- */

static void conv_free(struct conv *c)
{
    for (size_t i = 0; c->bufs != NULL && i < c->st.n_entries + 1; i++)
        buf_free(&c->bufs[i]);
    free(c->bufs);
    free(c->out);
    etcdwal_state_free(&c->st);
}

static int sync_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rv = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rv;
}

/* convert builds quorum's member dir in <stage>/member, from etcd's
 * |member| and its log in |waldir| (NULL: <member>/wal); quorum's log in
 * |walstage| (NULL: <stage>/member/wal). */
static int convert(const char *member, const char *waldir, const char *stage,
                   const char *walstage, char *err, size_t cap)
{
    struct conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    char why[ETCDWAL_ERR_LEN] = "", path[1500], dbdir[1400];
    int rv = etcdwal_read_dirs(member, waldir, &c->st, why, sizeof(why));
    if (rv != 0) {
        rv = fail(err, cap, rv, "cannot read etcd's log: %s", why[0] ? why : q_strerror(rv));
        goto out;
    }
    if (c->st.torn)
        log_warn("server",
                 "etcd import: etcd's log ends in a torn write (%s): what follows is "
                 "left out, as etcd's repair would",
                 c->st.torn_at);
    snprintf(dbdir, sizeof(dbdir), "%s/member/db", stage);
    snprintf(path, sizeof(path), "%s/snap/db", member);
    struct etcdfmt_db_info *info = calloc(1, sizeof(*info));
    if (info == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    rv = etcdfmt_db_import(path, dbdir, info, why, sizeof(why));
    c->ci = info->consistent_index;
    int64_t revision = info->revision;
    free(info);
    if (rv != 0) {
        rv = fail(err, cap, rv, "cannot convert etcd's store %s: %s", path,
                  why[0] ? why : q_strerror(rv));
        goto out;
    }
    /* the store is at C: the log must hold C's term and everything after */
    const struct etcdwal_state *st = &c->st;
    uint64_t last = st->n_entries ? st->entries[st->n_entries - 1].index : st->snap.index;
    if (c->ci < st->snap.index || c->ci > last) {
        rv = fail(err, cap, QERR_CORRUPT,
                  "etcd's store is at index %" PRIu64 ", its log holds %" PRIu64 "..%" PRIu64,
                  c->ci, st->snap.index, last);
        goto out;
    }
    if (st->commit < c->ci || st->commit > last) {
        rv = fail(err, cap, QERR_CORRUPT,
                  "etcd's log commits index %" PRIu64 ", its entries and store say %" PRIu64
                  "..%" PRIu64,
                  st->commit, c->ci, last);
        goto out;
    }
    c->ci_term =
        c->ci == st->snap.index ? st->snap.term : st->entries[c->ci - st->snap.index - 1].term;
    for (size_t i = 0; i < st->snap.conf.n_voters; i++)
        c->conf.voters[c->conf.n_voters++] = st->snap.conf.voters[i];
    for (size_t i = 0; i < st->snap.conf.n_learners; i++)
        c->conf.learners[c->conf.n_learners++] = st->snap.conf.learners[i];
    if ((rv = translate(c, why, sizeof(why))) != 0) {
        rv = fail(err, cap, rv, "cannot convert etcd's log: %s", why);
        goto out;
    }
    if ((rv = fill_members(c, dbdir, err, cap)) != 0 ||
        (rv = build_log(c, stage, walstage, err, cap)) != 0)
        goto out;
    /* everything durable before the stage says COMPLETE */
    const char *dirs[] = {"member/db", "member/wal", "member/snap", "member", ""};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && rv == 0; i++) {
        snprintf(path, sizeof(path), "%s/%s", stage, dirs[i]);
        if (exists(path))
            rv = fs_fsync_dir(path);
    }
    if (rv == 0 && walstage != NULL)
        rv = fs_fsync_dir(walstage);
    snprintf(path, sizeof(path), "%s/data.mdb", dbdir);
    if (rv == 0)
        rv = sync_file(path);
    if (rv != 0) {
        rv = fail(err, cap, rv, "cannot sync %s: %s", stage, strerror(-rv));
        goto out;
    }
    log_info("server",
             "etcd import: member %016" PRIx64 " of cluster %016" PRIx64 ": store at index %" PRIu64
             " (revision %" PRId64 "), %zu log entries after it (commit %" PRIu64 ", term %" PRIu64
             ")%s",
             st->node_id, st->cluster_id, c->ci, revision, c->n_out, st->commit, st->term,
             c->v2_dropped ? "; v2 store writes dropped" : "");
out:
    conv_free(c);
    free(c);
    return rv;
}

static int write_complete(const char *stage)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/COMPLETE", stage);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rv = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rv == 0 ? fs_fsync_dir(stage) : rv;
}

static int move(const char *from, const char *to, const char *dir, char *err, size_t cap)
{
    if (rename(from, to) != 0)
        return fail(err, cap, -errno, "cannot rename %s to %s: %s", from, to, strerror(errno));
    int rv = fs_fsync_dir(dir);
    if (rv != 0)
        return fail(err, cap, rv, "cannot sync %s: %s", dir, strerror(-rv));
    return 0;
}

/* is_bbolt: the file starts with a bbolt meta page (page header, then the
 * magic 0xED0CDAED) */
static bool is_bbolt(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t b[20];
    bool ok = pread(fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) && b[16] == 0xed && b[17] == 0xda &&
              b[18] == 0x0c && b[19] == 0xed;
    close(fd);
    return ok;
}

static bool is_etcd_member(const char *member, const char *waldir)
{
    char db[1200];
    snprintf(db, sizeof(db), "%s/snap/db", member);
    return exists(db) && (waldir != NULL ? etcdwal_is_etcd_dir(waldir) : etcdwal_is_etcd(member));
}

static void parent_of(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == NULL)
        snprintf(out, cap, ".");
    else
        slash[slash == out ? 1 : 0] = '\0';
}

int server_etcd_import(const char *data_dir, char *err, size_t cap)
{
    return server_etcd_import_wal(data_dir, NULL, err, cap);
}

int server_etcd_import_wal(const char *data_dir, const char *wal_dir, char *err, size_t cap)
{
    char member[1100], orig[1100], stage[1100], done[1200], smember[1200];
    snprintf(member, sizeof(member), "%s/member", data_dir);
    snprintf(orig, sizeof(orig), "%s/" ORIG, data_dir);
    snprintf(stage, sizeof(stage), "%s/" STAGE, data_dir);
    snprintf(done, sizeof(done), "%s/COMPLETE", stage);
    snprintf(smember, sizeof(smember), "%s/member", stage);
    /* --wal-dir: etcd's log there, kept as <wal-dir>.etcd; ours built in
     * <wal-dir>.etcd-import */
    const char *waldir = wal_dir != NULL && wal_dir[0] != '\0' ? wal_dir : NULL;
    char walorig[1100] = "", walstage[1100] = "", walparent[1100] = "";
    if (waldir != NULL) {
        snprintf(walorig, sizeof(walorig), "%s" WAL_ORIG, waldir);
        snprintf(walstage, sizeof(walstage), "%s" WAL_STAGE, waldir);
        parent_of(waldir, walparent, sizeof(walparent));
    }
    int rv;
    /* a conversion that stopped during its renames (the stage is
     * COMPLETE and etcd's member was moved aside): the rest of them */
    if (exists(done) && (exists(orig) || !exists(member))) {
        if (waldir != NULL && exists(waldir) && !exists(walorig) &&
            (rv = move(waldir, walorig, walparent, err, cap)) != 0)
            return rv;
        if (!exists(member) && exists(smember) && (rv = move(smember, member, data_dir, err, cap)))
            return rv;
        if (waldir != NULL && !exists(waldir) && exists(walstage) &&
            (rv = move(walstage, waldir, walparent, err, cap)) != 0)
            return rv;
        log_info("server", "etcd import: finished the conversion an earlier start began");
        fs_remove_tree(stage);
        return 0;
    }
    if (!exists(member) && exists(orig)) {
        if (!is_etcd_member(orig, waldir != NULL && !exists(waldir) ? walorig : waldir))
            return 0; /* not ours to touch */
        if ((rv = move(orig, member, data_dir, err, cap)) != 0)
            return rv;
        if (waldir != NULL && !exists(waldir) && exists(walorig) &&
            (rv = move(walorig, waldir, walparent, err, cap)) != 0)
            return rv;
        log_info("server", "etcd import: an earlier conversion did not finish; converting again");
    }
    if (exists(stage))
        fs_remove_tree(stage);
    if (waldir != NULL && exists(walstage))
        fs_remove_tree(walstage);
    if (!is_etcd_member(member, waldir)) {
        char db[1200], wal[1200];
        snprintf(db, sizeof(db), "%s/snap/db", member);
        if (waldir != NULL)
            snprintf(wal, sizeof(wal), "%s", waldir);
        else
            snprintf(wal, sizeof(wal), "%s/wal", member);
        if (is_bbolt(db) && !wal_exist_dir(wal))
            /* etcd's store without its log: etcd ran with another
             * --wal-dir, or the log was lost; starting would ignore the
             * store */
            return fail(err, cap, -ENOENT,
                        "%s is etcd's store but %s holds no log (%s); nothing was changed", db,
                        wal,
                        waldir != NULL ? "start quorum with the --wal-dir etcd ran with"
                                       : "did etcd run with --wal-dir? start quorum with the "
                                         "same --wal-dir");
        return 0;
    }
    if (exists(orig) || (waldir != NULL && exists(walorig)))
        return fail(err, cap, -EEXIST,
                    "%s is an etcd member directory, but %s (where quorum keeps etcd's original "
                    "when it converts one) is already there: move it away first",
                    member, exists(orig) ? orig : walorig);
    log_info("server",
             "etcd import: %s is an etcd 3.4 member directory; converting it (etcd's "
             "is kept as %s%s%s)",
             member, orig, waldir != NULL ? ", its log as " : "", waldir != NULL ? walorig : "");
    if ((rv = fs_mkdir_p(stage)) != 0)
        return fail(err, cap, rv, "cannot create %s: %s", stage, strerror(-rv));
    char why[1024] = "";
    rv = convert(member, waldir, stage, waldir != NULL ? walstage : NULL, why, sizeof(why));
    if (rv == 0)
        rv = write_complete(stage);
    if (rv != 0) {
        fs_remove_tree(stage);
        if (waldir != NULL)
            fs_remove_tree(walstage);
        return fail(err, cap, rv,
                    "cannot start on etcd's data directory %s: %s (nothing was "
                    "changed)",
                    data_dir, why[0] ? why : q_strerror(rv));
    }
    /* the swap: etcd's aside, then ours in place */
    if ((rv = move(member, orig, data_dir, err, cap)) != 0) {
        fs_remove_tree(stage);
        if (waldir != NULL)
            fs_remove_tree(walstage);
        return rv;
    }
    /* from here on, the next start finishes what a failure leaves */
    if (waldir != NULL && (rv = move(waldir, walorig, walparent, err, cap)) != 0)
        return rv;
    if ((rv = move(smember, member, data_dir, err, cap)) != 0)
        return rv;
    if (waldir != NULL && (rv = move(walstage, waldir, walparent, err, cap)) != 0)
        return rv;
    fs_remove_tree(stage);
    log_info("server", "etcd import: done; etcd's member directory is %s%s%s", orig,
             waldir != NULL ? ", its log " : "", waldir != NULL ? walorig : "");
    return 0;
}
