/* server/members.c: the members database and /etcdserverpb.Cluster/ —
 * MemberAdd, MemberRemove, MemberUpdate, MemberList, MemberPromote — and
 * Maintenance/MoveLeader.
 *
 * Who is a member (voter or learner) is the Raft core's applied
 * membership. What a member is called and where it listens are its
 * attributes, replicated as ENTRY_MEMBER log entries (an
 * Etcdserverpb__Member: peer URLs from MemberAdd/MemberUpdate, name and
 * client URLs published by the member itself once it runs, as etcd's
 * publish) and kept in the "members" database:
 *
 *   'm' | u64 id (big-endian)  ->  packed Etcdserverpb__Member
 *   'r' | u64 id               ->  ""  (removed: the id is never reused)
 *
 * Member ids: an initial member's id is etcd's (SHA-1 of its peer URLs and
 * the cluster token); MemberAdd gives the new member the same derivation
 * with the adding member's token. The new process, started with
 * --initial-cluster-state existing, does not derive it: as etcd's, it asks
 * the members it was given for this list (server_members_pack, over the
 * peer port) and takes its id and the cluster id from it by peer URL
 * (bootstrap.c), whatever its own --initial-cluster-token.
 *
 * A change of membership is two steps, as etcd's: the attributes entry,
 * then (once it applied) the configuration change, proposed through the
 * leader; the request is answered when the new membership is applied here,
 * or fails with "request timed out". */
#include "server/server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

enum conf_op { OP_ADD, OP_REMOVE, OP_PROMOTE, OP_UPDATE, OP_MOVE_LEADER };

/* A membership request in flight. */
struct conf_wait {
    struct conf_wait *next;
    struct server *s;
    qcall *call; /* NULL once the client went away */
    enum conf_op op;
    uint64_t id;
    bool learner;
    bool proposed_conf; /* ADD: the attributes applied, the change proposed */
    uint64_t deadline;
    char peer[CONFIG_MAX_URLS][300];
    size_t n_peer;
};

/* ---- the database ---- */

static void member_key(uint8_t k[9], char tag, uint64_t id)
{
    k[0] = (uint8_t)tag;
    for (int i = 0; i < 8; i++)
        k[1 + i] = (uint8_t)(id >> (56 - 8 * i));
}

/* with_txn runs on the open batch, or a read txn of its own. */
static int get_raw(struct server *s, char tag, uint64_t id, MDB_val *v, MDB_txn **own)
{
    MDB_txn *txn = backend_batch_txn(s->be);
    *own = NULL;
    if (txn == NULL) {
        int rv = backend_read_begin(s->be, &txn);
        if (rv != 0)
            return rv;
        *own = txn;
    }
    uint8_t k[9];
    member_key(k, tag, id);
    MDB_val key = {9, k};
    int rc = mdb_get(txn, backend_dbi(s->be, BACKEND_DB_MEMBERS), &key, v);
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    return backend_err(rc);
}

static void copy_urls(char dst[][300], size_t *n, char *const *src, size_t ns)
{
    *n = 0;
    for (size_t i = 0; i < ns && i < CONFIG_MAX_URLS; i++)
        snprintf(dst[(*n)++], 300, "%s", src[i]);
}

int server_member_get(struct server *s, uint64_t id, struct member_info *out)
{
    MDB_val v;
    MDB_txn *own;
    int rv = get_raw(s, 'm', id, &v, &own);
    if (rv == 0) {
        Etcdserverpb__Member *m = etcdserverpb__member__unpack(NULL, v.mv_size, v.mv_data);
        if (m == NULL) {
            rv = QERR_CORRUPT;
        } else {
            memset(out, 0, sizeof(*out));
            out->id = id;
            snprintf(out->name, sizeof(out->name), "%s", m->name ? m->name : "");
            copy_urls(out->peer, &out->n_peer, m->peerurls, m->n_peerurls);
            copy_urls(out->client, &out->n_client, m->clienturls, m->n_clienturls);
            etcdserverpb__member__free_unpacked(m, NULL);
        }
    }
    if (own)
        backend_read_end(own);
    return rv;
}

bool server_member_removed(struct server *s, uint64_t id)
{
    MDB_val v;
    MDB_txn *own;
    int rv = get_raw(s, 'r', id, &v, &own);
    if (own)
        backend_read_end(own);
    return rv == 0;
}

/* put_member writes |mi| in the open batch. */
static int put_member(struct server *s, const struct member_info *mi)
{
    char *peer[CONFIG_MAX_URLS], *client[CONFIG_MAX_URLS];
    for (size_t i = 0; i < mi->n_peer; i++)
        peer[i] = (char *)mi->peer[i];
    for (size_t i = 0; i < mi->n_client; i++)
        client[i] = (char *)mi->client[i];
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    m.id = mi->id;
    m.name = (char *)mi->name;
    m.peerurls = peer;
    m.n_peerurls = mi->n_peer;
    m.clienturls = client;
    m.n_clienturls = mi->n_client;
    uint8_t buf[8192];
    size_t n = etcdserverpb__member__get_packed_size(&m);
    if (n > sizeof(buf))
        return -EINVAL;
    n = etcdserverpb__member__pack(&m, buf);
    uint8_t k[9];
    member_key(k, 'm', mi->id);
    MDB_val key = {9, k}, val = {n, buf};
    return backend_err(
        backend_put(s->be, backend_batch_txn(s->be), BACKEND_DB_MEMBERS, &key, &val, 0));
}

int server_member_put(struct server *s, const struct member_info *mi)
{
    s->peers_dirty = true;
    return put_member(s, mi);
}

int server_members_clear(struct server *s)
{
    int rc = mdb_drop(backend_batch_txn(s->be), backend_dbi(s->be, BACKEND_DB_MEMBERS), 0);
    return backend_err(rc);
}

int server_members_ids(struct server *s, uint64_t *ids, size_t max)
{
    MDB_txn *txn = backend_batch_txn(s->be), *own = NULL;
    if (txn == NULL) {
        if (backend_read_begin(s->be, &own) != 0)
            return 0;
        txn = own;
    }
    MDB_cursor *cur;
    size_t n = 0;
    if (mdb_cursor_open(txn, backend_dbi(s->be, BACKEND_DB_MEMBERS), &cur) == 0) {
        MDB_val k, v;
        int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; rc == 0 && n < max; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            const uint8_t *p = k.mv_data;
            if (k.mv_size != 9 || p[0] != 'm')
                continue;
            uint64_t id = 0;
            for (int i = 0; i < 8; i++)
                id = id << 8 | p[1 + i];
            ids[n++] = id;
        }
        mdb_cursor_close(cur);
    }
    if (own != NULL)
        backend_read_end(own);
    return (int)n;
}

int server_members_bootstrap(struct server *s, const uint64_t *ids)
{
    for (size_t i = 0; i < s->cfg.n_initial_cluster; i++) {
        const struct member_cfg *mc = &s->cfg.initial_cluster[i];
        struct member_info mi = {.id = ids[i]};
        snprintf(mi.name, sizeof(mi.name), "%s", mc->name);
        for (size_t k = 0; k < mc->n_peer_urls; k++)
            snprintf(mi.peer[mi.n_peer++], 300, "%s", mc->peer_urls[k].text);
        int rv = put_member(s, &mi);
        if (rv != 0)
            return rv;
    }
    return 0;
}

int server_member_apply(struct server *s, const Etcdserverpb__Member *m)
{
    if (m->id == 0 || server_member_removed(s, m->id))
        return 0;
    struct member_info mi;
    int rv = server_member_get(s, m->id, &mi);
    if (rv == -ENOENT) {
        memset(&mi, 0, sizeof(mi));
        mi.id = m->id;
    } else if (rv != 0) {
        return rv;
    }
    if (m->n_peerurls > 0)
        copy_urls(mi.peer, &mi.n_peer, m->peerurls, m->n_peerurls);
    if ((m->name != NULL && m->name[0] != '\0') || m->n_clienturls > 0) {
        snprintf(mi.name, sizeof(mi.name), "%s", m->name ? m->name : "");
        copy_urls(mi.client, &mi.n_client, m->clienturls, m->n_clienturls);
    }
    s->peers_dirty = true;
    return put_member(s, &mi);
}

static bool in_membership(const struct raft_membership *m, uint64_t id)
{
    return raft_membership_is_voter(m, id) || raft_membership_is_learner(m, id);
}

int server_members_conf_applied(struct server *s, const struct raft_membership *prev,
                                const struct raft_membership *next)
{
    uint64_t ids[2 * RAFT_MAX_MEMBERS];
    size_t n = 0;
    for (uint32_t i = 0; i < prev->n_voters; i++)
        ids[n++] = prev->voters[i];
    for (uint32_t i = 0; i < prev->n_learners; i++)
        ids[n++] = prev->learners[i];
    MDB_txn *txn = backend_batch_txn(s->be);
    for (size_t i = 0; i < n; i++) {
        if (in_membership(next, ids[i]))
            continue;
        uint8_t k[9];
        member_key(k, 'm', ids[i]);
        MDB_val key = {9, k}, empty = {0, (void *)""};
        int rc = backend_del(s->be, txn, BACKEND_DB_MEMBERS, &key);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return backend_err(rc);
        member_key(k, 'r', ids[i]);
        if ((rc = backend_put(s->be, txn, BACKEND_DB_MEMBERS, &key, &empty, 0)) != 0)
            return backend_err(rc);
        log_info("server", "member %016llx removed from the cluster", (unsigned long long)ids[i]);
    }
    return 0;
}

/* ---- the member list as the Cluster service answers it ---- */

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static char *arena_str(struct arena *a, const char *src)
{
    size_t n = strlen(src) + 1;
    char *p = arena_alloc(a, n);
    if (p != NULL)
        memcpy(p, src, n);
    return p;
}

/* member_pb fills |o| from |mi| with strings copied into |a|. */
static int member_pb(struct arena *a, const struct member_info *mi, bool learner,
                     Etcdserverpb__Member *o)
{
    etcdserverpb__member__init(o);
    o->id = mi->id;
    o->islearner = learner;
    o->name = arena_str(a, mi->name);
    o->peerurls = arena_alloc(a, (mi->n_peer + 1) * sizeof(char *));
    o->clienturls = arena_alloc(a, (mi->n_client + 1) * sizeof(char *));
    if (o->name == NULL || o->peerurls == NULL || o->clienturls == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < mi->n_peer; i++)
        if ((o->peerurls[i] = arena_str(a, mi->peer[i])) == NULL)
            return -ENOMEM;
    for (size_t i = 0; i < mi->n_client; i++)
        if ((o->clienturls[i] = arena_str(a, mi->client[i])) == NULL)
            return -ENOMEM;
    o->n_peerurls = mi->n_peer;
    o->n_clienturls = mi->n_client;
    return 0;
}

/* members_pb lists the applied membership, sorted by id as etcd's. */
static int members_pb(struct server *s, struct arena *a, Etcdserverpb__Member ***out, size_t *n)
{
    const struct raft_membership *m = raft_get_membership(s->raft);
    uint64_t ids[2 * RAFT_MAX_MEMBERS];
    size_t k = 0;
    for (uint32_t i = 0; i < m->n_voters; i++)
        ids[k++] = m->voters[i];
    for (uint32_t i = 0; i < m->n_learners; i++)
        ids[k++] = m->learners[i];
    qsort(ids, k, sizeof(ids[0]), cmp_id);
    Etcdserverpb__Member **v = arena_alloc(a, (k + 1) * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < k; i++) {
        struct member_info mi;
        if (server_member_get(s, ids[i], &mi) != 0) {
            memset(&mi, 0, sizeof(mi));
            mi.id = ids[i];
        }
        v[i] = arena_alloc(a, sizeof(**v));
        if (v[i] == NULL)
            return -ENOMEM;
        int rv = member_pb(a, &mi, raft_membership_is_learner(m, ids[i]), v[i]);
        if (rv != 0)
            return rv;
    }
    *out = v;
    *n = k;
    return 0;
}

int server_members_pack(struct server *s, struct buf *out)
{
    struct arena a = {0};
    Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.cluster_id = s->cluster_id;
    h.member_id = s->member_id;
    r.header = &h;
    int rv = members_pb(s, &a, &r.members, &r.n_members);
    if (rv == 0)
        rv = server_pack(out, &r.base);
    arena_free(&a);
    return rv;
}

/* etcd's Cluster service headers carry no revision */
static void cluster_header(struct server *s, Etcdserverpb__ResponseHeader *h)
{
    etcdserverpb__response_header__init(h);
    server_fill_header(s, h);
    h->revision = 0;
}

/* reply_members answers |op| for |w| with the current member list. */
static void reply_members(struct server *s, struct conf_wait *w)
{
    qcall *call = w->call;
    if (call == NULL)
        return;
    arena_reset(&s->arena);
    Etcdserverpb__Member **ms = NULL;
    size_t n = 0;
    int rv = members_pb(s, &s->arena, &ms, &n);
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    Etcdserverpb__ResponseHeader h;
    cluster_header(s, &h);
    switch (w->op) {
    case OP_ADD: {
        Etcdserverpb__Member added = ETCDSERVERPB__MEMBER__INIT;
        char *peer[CONFIG_MAX_URLS];
        for (size_t i = 0; i < w->n_peer; i++)
            peer[i] = w->peer[i];
        added.id = w->id;
        added.peerurls = peer;
        added.n_peerurls = w->n_peer;
        added.islearner = w->learner;
        Etcdserverpb__MemberAddResponse r = ETCDSERVERPB__MEMBER_ADD_RESPONSE__INIT;
        r.header = &h;
        r.member = &added;
        r.members = ms;
        r.n_members = n;
        server_reply(s, call, &r.base);
        break;
    }
    case OP_REMOVE: {
        Etcdserverpb__MemberRemoveResponse r = ETCDSERVERPB__MEMBER_REMOVE_RESPONSE__INIT;
        r.header = &h;
        r.members = ms;
        r.n_members = n;
        server_reply(s, call, &r.base);
        break;
    }
    case OP_UPDATE: {
        Etcdserverpb__MemberUpdateResponse r = ETCDSERVERPB__MEMBER_UPDATE_RESPONSE__INIT;
        r.header = &h;
        r.members = ms;
        r.n_members = n;
        server_reply(s, call, &r.base);
        break;
    }
    case OP_PROMOTE: {
        Etcdserverpb__MemberPromoteResponse r = ETCDSERVERPB__MEMBER_PROMOTE_RESPONSE__INIT;
        r.header = &h;
        r.members = ms;
        r.n_members = n;
        server_reply(s, call, &r.base);
        break;
    }
    case OP_MOVE_LEADER: {
        /* etcd 3.4 answers an empty MoveLeaderResponse (no header) */
        Etcdserverpb__MoveLeaderResponse r = ETCDSERVERPB__MOVE_LEADER_RESPONSE__INIT;
        server_reply(s, call, &r.base);
        break;
    }
    }
    qcall_set_data(call, NULL);
}

/* ---- requests in flight ---- */

static struct conf_wait *new_wait(struct server *s, qcall *call, enum conf_op op, uint64_t id)
{
    struct conf_wait *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->s = s;
    w->call = call;
    w->op = op;
    w->id = id;
    w->deadline = uv_now(s->loop) + s->request_timeout_ms;
    w->next = s->conf_waits;
    s->conf_waits = w;
    return w;
}

static void drop_wait(struct server *s, struct conf_wait *w)
{
    for (struct conf_wait **pp = &s->conf_waits; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    free(w);
}

static void fail_wait(struct server *s, struct conf_wait *w, int err)
{
    if (w->call != NULL)
        server_reply_error(w->call, err);
    drop_wait(s, w);
}

static bool satisfied(struct server *s, const struct conf_wait *w)
{
    const struct raft_membership *m = raft_get_membership(s->raft);
    switch (w->op) {
    case OP_ADD:
        return w->proposed_conf && in_membership(m, w->id);
    case OP_REMOVE:
        return !in_membership(m, w->id);
    case OP_PROMOTE:
        return raft_membership_is_voter(m, w->id);
    case OP_MOVE_LEADER:
        return raft_get_leader(s->raft) == w->id;
    default:
        return false;
    }
}

void server_members_check_waits(struct server *s)
{
    for (struct conf_wait *w = s->conf_waits, *next; w != NULL; w = next) {
        next = w->next;
        if (w->op != OP_UPDATE && satisfied(s, w)) {
            reply_members(s, w);
            drop_wait(s, w);
        }
    }
}

void server_members_fail_waits(struct server *s, int err, bool expired_only)
{
    uint64_t now = uv_now(s->loop);
    if (s->raft != NULL)
        server_members_check_waits(s); /* a leader change ends a MoveLeader */
    for (struct conf_wait *w = s->conf_waits, *next; w != NULL; w = next) {
        next = w->next;
        /* a wait whose attributes entry is in flight is ended by that
         * entry's completion (which times out with it) */
        if (w->op == OP_UPDATE || (w->op == OP_ADD && !w->proposed_conf))
            continue;
        if (expired_only && w->deadline > now)
            continue;
        fail_wait(s, w, err);
    }
}

static void member_call_closed(qcall *call)
{
    struct server *s = server_of(call);
    for (struct conf_wait *w = s->conf_waits; w != NULL; w = w->next)
        if (w->call == call)
            w->call = NULL;
}

/* ---- Cluster service ---- */

static int parse_peer_urls(char **urls, size_t n)
{
    if (n == 0 || n > CONFIG_MAX_URLS)
        return QERR_MEMBER_BAD_URLS;
    for (size_t i = 0; i < n; i++) {
        struct url u;
        size_t k = 0;
        char err[200];
        if (config_parse_urls(urls[i], &u, 1, &k, err, sizeof(err)) != 0 || k != 1)
            return QERR_MEMBER_BAD_URLS;
    }
    return 0;
}

/* url_taken: another member already has one of |urls| */
static bool url_taken(struct server *s, char **urls, size_t n, uint64_t except)
{
    const struct raft_membership *m = raft_get_membership(s->raft);
    uint64_t ids[2 * RAFT_MAX_MEMBERS];
    size_t k = 0;
    for (uint32_t i = 0; i < m->n_voters; i++)
        ids[k++] = m->voters[i];
    for (uint32_t i = 0; i < m->n_learners; i++)
        ids[k++] = m->learners[i];
    for (size_t i = 0; i < k; i++) {
        struct member_info mi;
        if (ids[i] == except || server_member_get(s, ids[i], &mi) != 0)
            continue;
        for (size_t a = 0; a < mi.n_peer; a++)
            for (size_t b = 0; b < n; b++)
                if (strcmp(mi.peer[a], urls[b]) == 0)
                    return true;
    }
    return false;
}

/* ---- --strict-reconfig-check (etcd's mayAddMember, mayRemoveMember,
 * mayPromoteMember): a change is refused before anything is proposed. */

/* etcd's HealthInterval: a peer counts as connected once its link has been
 * up this long */
#define HEALTH_INTERVAL_MS 5000

/* started: the member has published its name (etcd's Member.IsStarted) */
static bool started(struct server *s, uint64_t id)
{
    struct member_info mi;
    return server_member_get(s, id, &mi) == 0 && mi.name[0] != '\0';
}

/* connected_since counts the voters this member has been linked to since
 * |since| without a break, itself included (etcd's numConnectedSince). */
static size_t connected_since(struct server *s, const struct raft_membership *m, uint64_t since)
{
    size_t n = 0;
    for (uint32_t i = 0; i < m->n_voters; i++) {
        uint64_t t = m->voters[i] == s->member_id ? 1
                                                  : server_peer_active_since(s, m->voters[i]);
        if (m->voters[i] == s->member_id || (t != 0 && t <= since))
            n++;
    }
    return n;
}

static uint64_t health_since(struct server *s)
{
    uint64_t now = uv_now(s->loop);
    return now > HEALTH_INTERVAL_MS ? now - HEALTH_INTERVAL_MS : 0;
}

/* may_add: a voter is added only when the started voters stay a quorum of
 * the cluster it makes (one started member may add a second: etcd's
 * restore-a-cluster case), and only when every voter has been connected
 * for the health interval. */
static int may_add(struct server *s, bool learner)
{
    if (!s->cfg.strict_reconfig_check)
        return 0;
    const struct raft_membership *m = raft_get_membership(s->raft);
    if (!learner) {
        size_t members = 1, n_started = 0;
        for (uint32_t i = 0; i < m->n_voters; i++, members++)
            n_started += started(s, m->voters[i]);
        if (!(n_started == 1 && members == 2) && n_started < members / 2 + 1) {
            log_warn("server", "rejecting member add request; not enough healthy members "
                               "(started %zu, quorum %zu)", n_started, members / 2 + 1);
            return QERR_NOT_ENOUGH_STARTED;
        }
    }
    if (connected_since(s, m, health_since(s)) != m->n_voters) {
        log_warn("server", "rejecting member add request; local member has not been connected "
                           "to all peers, reconfigure breaks active quorum");
        return QERR_UNHEALTHY;
    }
    return 0;
}

/* may_remove: removing a voter must leave the started voters a quorum of
 * the rest and, unless the one removed is down, the voters this member is
 * connected to a quorum without it. */
static int may_remove(struct server *s, uint64_t id)
{
    if (!s->cfg.strict_reconfig_check)
        return 0;
    const struct raft_membership *m = raft_get_membership(s->raft);
    if (raft_membership_is_learner(m, id))
        return 0;
    size_t members = 0, n_started = 0;
    for (uint32_t i = 0; i < m->n_voters; i++) {
        if (m->voters[i] == id)
            continue;
        members++;
        n_started += started(s, m->voters[i]);
    }
    if (n_started < members / 2 + 1) {
        log_warn("server", "rejecting member remove request; not enough healthy members "
                           "(started %zu, quorum %zu)", n_started, members / 2 + 1);
        return QERR_NOT_ENOUGH_STARTED;
    }
    if (id != s->member_id && server_peer_active_since(s, id) == 0)
        return 0; /* a member that is down is no part of the active quorum */
    size_t active = connected_since(s, m, health_since(s));
    if (active < 1 + 1 + (m->n_voters - 1) / 2) {
        log_warn("server", "rejecting member remove request; local member has not been "
                           "connected to all peers, reconfigure breaks active quorum "
                           "(active peers %zu)", active);
        return QERR_UNHEALTHY;
    }
    return 0;
}

/* may_promote: the voters with the learner promoted keep a started
 * quorum. */
static int may_promote(struct server *s)
{
    if (!s->cfg.strict_reconfig_check)
        return 0;
    const struct raft_membership *m = raft_get_membership(s->raft);
    size_t members = 1, n_started = 0;
    for (uint32_t i = 0; i < m->n_voters; i++, members++)
        n_started += started(s, m->voters[i]);
    if (n_started < members / 2 + 1) {
        log_warn("server", "rejecting member promote request; not enough healthy members");
        return QERR_NOT_ENOUGH_STARTED;
    }
    return 0;
}

static void on_attrs_applied(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    (void)resp;
    (void)len;
    struct conf_wait *w = arg;
    if (err != 0) {
        fail_wait(s, w, err);
        return;
    }
    if (w->op == OP_UPDATE) {
        reply_members(s, w);
        drop_wait(s, w);
        return;
    }
    if (w->call == NULL) {
        drop_wait(s, w); /* timed out or gone: do not change membership */
        return;
    }
    struct raft_membership next = *raft_get_membership(s->raft);
    if (in_membership(&next, w->id)) {
        fail_wait(s, w, QERR_MEMBER_EXISTS);
        return;
    }
    if (w->learner)
        next.learners[next.n_learners++] = w->id;
    else
        next.voters[next.n_voters++] = w->id;
    int rv = server_propose_conf(s, &next);
    if (rv != 0) {
        fail_wait(s, w, rv == -EBUSY ? QERR_TIMEOUT : rv);
        return;
    }
    w->proposed_conf = true;
    server_members_check_waits(s);
}

/* propose_attrs proposes an ENTRY_MEMBER for |w| */
static void propose_attrs(struct server *s, struct conf_wait *w, const char *name, char **client,
                          size_t n_client)
{
    char *peer[CONFIG_MAX_URLS];
    for (size_t i = 0; i < w->n_peer; i++)
        peer[i] = w->peer[i];
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    m.id = w->id;
    m.name = (char *)name;
    m.peerurls = peer;
    m.n_peerurls = w->n_peer;
    m.clienturls = client;
    m.n_clienturls = n_client;
    server_propose_cb(s, ENTRY_MEMBER, &m.base, on_attrs_applied, w);
}

static void on_member_add(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__MemberAddRequest *r = (Etcdserverpb__MemberAddRequest *)server_unpack(
        call, &etcdserverpb__member_add_request__descriptor, msg, len);
    if (r == NULL)
        return;
    int rv = parse_peer_urls(r->peerurls, r->n_peerurls);
    uint64_t id = 0;
    if (rv == 0 && url_taken(s, r->peerurls, r->n_peerurls, 0))
        rv = QERR_PEER_URL_EXISTS;
    if (rv == 0) {
        id = server_member_id((const char *const *)r->peerurls, r->n_peerurls,
                              s->cfg.initial_cluster_token);
        const struct raft_membership *m = raft_get_membership(s->raft);
        if (server_member_removed(s, id))
            rv = QERR_ID_REMOVED;
        else if (in_membership(m, id))
            rv = QERR_MEMBER_EXISTS;
        else if (r->islearner && m->n_learners >= 1)
            rv = QERR_TOO_MANY_LEARNERS; /* etcd 3.4 allows one */
        else if (m->n_voters + m->n_learners >= RAFT_MAX_MEMBERS)
            rv = -EINVAL;
        else
            rv = may_add(s, r->islearner);
    }
    struct conf_wait *w = NULL;
    if (rv == 0 && (w = new_wait(s, call, OP_ADD, id)) == NULL)
        rv = -ENOMEM;
    if (rv != 0) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        server_reply_error(call, rv);
        return;
    }
    w->learner = r->islearner;
    copy_urls(w->peer, &w->n_peer, r->peerurls, r->n_peerurls);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    propose_attrs(s, w, "", NULL, 0);
}

static void on_member_remove(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__MemberRemoveRequest *r = (Etcdserverpb__MemberRemoveRequest *)server_unpack(
        call, &etcdserverpb__member_remove_request__descriptor, msg, len);
    if (r == NULL)
        return;
    uint64_t id = r->id;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    struct raft_membership next = *raft_get_membership(s->raft);
    int rv = in_membership(&next, id) ? 0 : QERR_MEMBER_NOT_FOUND;
    if (rv == 0)
        rv = may_remove(s, id);
    if (rv == 0) {
        struct raft_membership cur = next;
        next.n_voters = next.n_learners = 0;
        for (uint32_t i = 0; i < cur.n_voters; i++)
            if (cur.voters[i] != id)
                next.voters[next.n_voters++] = cur.voters[i];
        for (uint32_t i = 0; i < cur.n_learners; i++)
            if (cur.learners[i] != id)
                next.learners[next.n_learners++] = cur.learners[i];
        rv = server_propose_conf(s, &next);
        if (rv == -EBUSY)
            rv = QERR_TIMEOUT;
    }
    if (rv == 0 && new_wait(s, call, OP_REMOVE, id) == NULL)
        rv = -ENOMEM;
    if (rv != 0)
        server_reply_error(call, rv);
}

static void on_member_update(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__MemberUpdateRequest *r = (Etcdserverpb__MemberUpdateRequest *)server_unpack(
        call, &etcdserverpb__member_update_request__descriptor, msg, len);
    if (r == NULL)
        return;
    int rv = in_membership(raft_get_membership(s->raft), r->id) ? 0 : QERR_MEMBER_NOT_FOUND;
    if (rv == 0)
        rv = parse_peer_urls(r->peerurls, r->n_peerurls);
    if (rv == 0 && url_taken(s, r->peerurls, r->n_peerurls, r->id))
        rv = QERR_PEER_URL_EXISTS;
    struct conf_wait *w = NULL;
    if (rv == 0 && (w = new_wait(s, call, OP_UPDATE, r->id)) == NULL)
        rv = -ENOMEM;
    if (rv != 0) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        server_reply_error(call, rv);
        return;
    }
    copy_urls(w->peer, &w->n_peer, r->peerurls, r->n_peerurls);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    propose_attrs(s, w, "", NULL, 0);
}

static void on_member_promote(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__MemberPromoteRequest *r = (Etcdserverpb__MemberPromoteRequest *)server_unpack(
        call, &etcdserverpb__member_promote_request__descriptor, msg, len);
    if (r == NULL)
        return;
    uint64_t id = r->id;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    struct raft_membership next = *raft_get_membership(s->raft);
    int rv = 0;
    if (raft_membership_is_voter(&next, id))
        rv = QERR_MEMBER_NOT_LEARNER;
    else if (!raft_membership_is_learner(&next, id))
        rv = QERR_MEMBER_NOT_FOUND;
    /* etcd's isLearnerReady: a learner that holds less than 90% of the
     * leader's log is not promoted (a dead one would cost the quorum) */
    else if (server_is_leader(s) &&
             (double)raft_get_match(s->raft, id) <
                 (double)raft_get_match(s->raft, s->member_id) * 0.9)
        rv = QERR_LEARNER_NOT_READY;
    if (rv == 0)
        rv = may_promote(s);
    if (rv == 0) {
        struct raft_membership cur = next;
        next.n_learners = 0;
        for (uint32_t i = 0; i < cur.n_learners; i++)
            if (cur.learners[i] != id)
                next.learners[next.n_learners++] = cur.learners[i];
        next.voters[next.n_voters++] = id;
        rv = server_propose_conf(s, &next);
        if (rv == -EBUSY)
            rv = QERR_TIMEOUT;
    }
    if (rv == 0 && new_wait(s, call, OP_PROMOTE, id) == NULL)
        rv = -ENOMEM;
    if (rv != 0)
        server_reply_error(call, rv);
}

static void on_member_list(qcall *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *req =
        server_unpack(call, &etcdserverpb__member_list_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    arena_reset(&s->arena);
    Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h;
    cluster_header(s, &h);
    r.header = &h;
    int rv = members_pb(s, &s->arena, &r.members, &r.n_members);
    if (rv != 0)
        server_reply_error(call, rv);
    else
        server_reply(s, call, &r.base);
}

void server_on_move_leader(qcall *call, const uint8_t *msg, size_t len)
{
    if (!server_require_admin(call))
        return;
    struct server *s = server_of(call);
    Etcdserverpb__MoveLeaderRequest *r = (Etcdserverpb__MoveLeaderRequest *)server_unpack(
        call, &etcdserverpb__move_leader_request__descriptor, msg, len);
    if (r == NULL)
        return;
    uint64_t id = r->targetid;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    int rv = 0;
    if (!server_is_leader(s))
        rv = QERR_NOT_LEADER;
    else if (!raft_membership_is_voter(raft_get_membership(s->raft), id))
        rv = QERR_BAD_TRANSFEREE;
    else if (id != s->member_id)
        rv = server_transfer_leader(s, id);
    struct conf_wait *w = NULL;
    if (rv == 0 && (w = new_wait(s, call, OP_MOVE_LEADER, id)) == NULL)
        rv = -ENOMEM;
    if (rv != 0) {
        server_reply_error(call, rv);
        return;
    }
    server_node_pass(s);
    server_members_check_waits(s);
}

/* ---- publishing our own attributes ---- */

static void on_published(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    (void)resp;
    (void)len;
    (void)arg;
    s->publishing = false;
    s->published = err == 0;
    if (err == 0)
        log_info("server", "published %s (member %016llx) with client URLs to the cluster",
                 s->cfg.name, (unsigned long long)s->member_id);
}

void server_members_publish(struct server *s)
{
    if (s->publishing || s->published)
        return;
    struct member_info mi;
    if (server_member_get(s, s->member_id, &mi) == 0 && strcmp(mi.name, s->cfg.name) == 0 &&
        mi.n_client == s->cfg.n_advertise_client) {
        bool same = true;
        for (size_t i = 0; i < mi.n_client && same; i++)
            same = strcmp(mi.client[i], s->cfg.advertise_client[i].text) == 0;
        if (same) {
            s->published = true;
            return;
        }
    }
    char *client[CONFIG_MAX_URLS];
    for (size_t i = 0; i < s->cfg.n_advertise_client; i++)
        client[i] = (char *)s->cfg.advertise_client[i].text;
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    m.id = s->member_id;
    m.name = s->cfg.name;
    m.clienturls = client;
    m.n_clienturls = s->cfg.n_advertise_client;
    s->publishing = true;
    server_propose_cb(s, ENTRY_MEMBER, &m.base, on_published, NULL);
}

const struct qcall_method server_cluster_methods[] = {
    {"/etcdserverpb.Cluster/MemberAdd", QCALL_UNARY, on_member_add, NULL, member_call_closed},
    {"/etcdserverpb.Cluster/MemberRemove", QCALL_UNARY, on_member_remove, NULL, member_call_closed},
    {"/etcdserverpb.Cluster/MemberUpdate", QCALL_UNARY, on_member_update, NULL, member_call_closed},
    {"/etcdserverpb.Cluster/MemberList", QCALL_UNARY, on_member_list, NULL, NULL},
    {"/etcdserverpb.Cluster/MemberPromote", QCALL_UNARY, on_member_promote, NULL,
     member_call_closed},
};
const size_t server_cluster_methods_n =
    sizeof(server_cluster_methods) / sizeof(server_cluster_methods[0]);
