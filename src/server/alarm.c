/* server/alarm.c: member alarms and the backend quota (see alarm.h). The
 * alarm list is small (one per member and type), kept in memory and
 * mirrored in BACKEND_DB_META so it survives restarts. */
#include "server/alarm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "server/server_int.h"
#include "server/zk_tree.h"
#include "zk.pb-c.h"

#define ALARM_PREFIX "alarm/"
#define KV_OVERHEAD 256   /* etcd's quota.go kvOverhead */
#define LEASE_OVERHEAD 64 /* etcd's quota.go leaseOverhead */

static const char *type_name(int type)
{
    switch (type) {
    case ETCDSERVERPB__ALARM_TYPE__NOSPACE:
        return "NOSPACE";
    case ETCDSERVERPB__ALARM_TYPE__CORRUPT:
        return "CORRUPT";
    default:
        return "NONE";
    }
}

void server_alarm_string(const struct alarm_member *m, char *out, size_t outlen)
{
    /* Go's compact text form leaves out zero fields */
    int n = 0;
    out[0] = '\0';
    if (m->member_id != 0)
        n = snprintf(out, outlen, "memberID:%llu ", (unsigned long long)m->member_id);
    if (m->type != 0 && n >= 0 && (size_t)n < outlen)
        snprintf(out + n, outlen - (size_t)n, "alarm:%s ", type_name(m->type));
}

static void record_name(const struct alarm_member *m, char *out, size_t outlen)
{
    snprintf(out, outlen, ALARM_PREFIX "%016llx/%d", (unsigned long long)m->member_id, m->type);
}

int server_alarms_load(struct server *s)
{
    s->alarms.n = 0;
    MDB_txn *txn;
    int rv = backend_read_begin(s->be, &txn);
    if (rv != 0)
        return rv;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, backend_dbi(s->be, BACKEND_DB_META), &cur);
    if (rc != 0) {
        backend_read_end(txn);
        return backend_err(rc);
    }
    MDB_val k = {strlen(ALARM_PREFIX), (void *)ALARM_PREFIX}, v;
    size_t plen = strlen(ALARM_PREFIX);
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size < plen || memcmp(k.mv_data, ALARM_PREFIX, plen) != 0)
            break;
        char name[64];
        if (k.mv_size >= sizeof(name))
            continue;
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = '\0';
        unsigned long long id;
        int type;
        if (sscanf(name + plen, "%16llx/%d", &id, &type) != 2 || s->alarms.n == ALARM_MAX)
            continue;
        s->alarms.a[s->alarms.n++] = (struct alarm_member){id, type};
        char text[96];
        server_alarm_string(&s->alarms.a[s->alarms.n - 1], text, sizeof(text));
        log_warn("alarm", "alarm raised before the restart is still active: %s", text);
    }
    rv = (rc == 0 || rc == MDB_NOTFOUND) ? 0 : backend_err(rc);
    mdb_cursor_close(cur);
    backend_read_end(txn);
    return rv;
}

bool server_alarm_active(const struct server *s, int type)
{
    for (size_t i = 0; i < s->alarms.n; i++)
        if (s->alarms.a[i].type == type)
            return true;
    return false;
}

static struct alarm_member *find(struct server *s, uint64_t id, int type)
{
    for (size_t i = 0; i < s->alarms.n; i++)
        if (s->alarms.a[i].member_id == id && s->alarms.a[i].type == type)
            return &s->alarms.a[i];
    return NULL;
}

/* activate adds (id, type) in memory and in the open batch; an alarm
 * already raised is left as it is. */
static int activate(struct server *s, uint64_t id, int type)
{
    if (find(s, id, type) != NULL)
        return 0;
    if (s->alarms.n == ALARM_MAX)
        return -ENOMEM;
    struct alarm_member m = {id, type};
    char name[64];
    record_name(&m, name, sizeof(name));
    int rv = backend_meta_put(s->be, name, 1);
    if (rv != 0)
        return rv;
    s->alarms.a[s->alarms.n++] = m;
    char text[96];
    server_alarm_string(&m, text, sizeof(text));
    log_warn("alarm", "alarm raised: %s", text);
    return 0;
}

/* deactivate removes (id, type); *|found| says whether it was raised. */
static int deactivate(struct server *s, uint64_t id, int type, bool *found)
{
    struct alarm_member *m = find(s, id, type);
    *found = m != NULL;
    if (m == NULL)
        return 0;
    char name[64];
    record_name(m, name, sizeof(name));
    MDB_val k = {strlen(name), name};
    int rc = backend_del(s->be, backend_batch_txn(s->be), BACKEND_DB_META, &k);
    if (rc != 0 && rc != MDB_NOTFOUND)
        return backend_err(rc);
    char text[96];
    server_alarm_string(m, text, sizeof(text));
    log_info("alarm", "alarm cleared: %s", text);
    *m = s->alarms.a[--s->alarms.n];
    return 0;
}

static Etcdserverpb__AlarmMember *member_pb(struct arena *a, uint64_t id, int type)
{
    Etcdserverpb__AlarmMember *m = arena_alloc(a, sizeof(*m));
    if (m != NULL) {
        etcdserverpb__alarm_member__init(m);
        m->memberid = id;
        m->alarm = type;
    }
    return m;
}

int server_alarm_apply(struct server *s, const Etcdserverpb__AlarmRequest *req, struct arena *a,
                       Etcdserverpb__AlarmResponse **out)
{
    Etcdserverpb__AlarmResponse *r = arena_alloc(a, sizeof(*r));
    Etcdserverpb__AlarmMember **list = arena_alloc(a, (ALARM_MAX + 1) * sizeof(*list));
    if (r == NULL || list == NULL)
        return -ENOMEM;
    etcdserverpb__alarm_response__init(r); /* no header: etcd's has none */
    r->alarms = list;
    int rv = 0;
    switch (req->action) {
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET:
        for (size_t i = 0; i < s->alarms.n; i++)
            if ((list[r->n_alarms] = member_pb(a, s->alarms.a[i].member_id, s->alarms.a[i].type)) ==
                NULL)
                return -ENOMEM;
            else
                r->n_alarms++;
        break;
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE:
        /* etcd 3.4 activates even type NONE (it then lists "memberID:N ") */
        rv = activate(s, req->memberid, req->alarm);
        if (rv == 0 && (list[r->n_alarms++] = member_pb(a, req->memberid, req->alarm)) == NULL)
            rv = -ENOMEM;
        break;
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE: {
        bool found = false;
        rv = deactivate(s, req->memberid, req->alarm, &found);
        if (rv == 0 && found &&
            (list[r->n_alarms++] = member_pb(a, req->memberid, req->alarm)) == NULL)
            rv = -ENOMEM;
        break;
    }
    default:
        /* etcd ignores unknown actions and answers an empty list */
        break;
    }
    if (rv != 0)
        return rv;
    *out = r;
    return 0;
}

/* ---- quota ---- */

static uint64_t cost_put(const Etcdserverpb__PutRequest *p)
{
    return KV_OVERHEAD + p->key.len + p->value.len;
}

/* etcd's costTxn: the larger of the two branches' puts (nested txns are
 * not counted, as in etcd 3.4). */
static uint64_t cost_txn(const Etcdserverpb__TxnRequest *t)
{
    uint64_t sz[2] = {0, 0};
    for (size_t i = 0; i < t->n_success; i++)
        if (t->success[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
            sz[0] += cost_put(t->success[i]->request_put);
    for (size_t i = 0; i < t->n_failure; i++)
        if (t->failure[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
            sz[1] += cost_put(t->failure[i]->request_put);
    return sz[0] > sz[1] ? sz[0] : sz[1];
}

int server_quota_check(struct server *s, const struct entry *e)
{
    /* applierV3Corrupt: every write fails DATA_LOSS "etcdserver: corrupt
     * cluster" (reads are served outside the log and still work). The
     * server's own lease revokes are let through: the lessor would retry
     * them every tick. */
    if (server_alarm_active(s, ETCDSERVERPB__ALARM_TYPE__CORRUPT) && e->kind != ENTRY_ALARM &&
        e->kind != ENTRY_LEASE_CHECKPOINT && (e->kind != ENTRY_LEASE_REVOKE || !e->internal))
        return QERR_CORRUPT;
    uint64_t cost;
    switch (e->kind) {
    case ENTRY_PUT:
        cost = cost_put((const Etcdserverpb__PutRequest *)e->req);
        break;
    case ENTRY_TXN:
        cost = cost_txn((const Etcdserverpb__TxnRequest *)e->req);
        break;
    case ENTRY_LEASE_GRANT:
        cost = LEASE_OVERHEAD;
        break;
    case ENTRY_ZK_WRITE: {
        const Quorumzk__Write *w = (const Quorumzk__Write *)e->req;
        cost = zk_write_cost(w->request.data, w->request.len, &s->arena);
        if (cost == 0)
            return 0; /* deletes, checks, syncs free space or take none */
        break;
    }
    default:
        return 0; /* deletes, compactions, revokes, alarms: never refused */
    }
    /* applierV3Capped: a txn without puts still goes through */
    if (server_alarm_active(s, ETCDSERVERPB__ALARM_TYPE__NOSPACE) &&
        (e->kind != ENTRY_TXN || cost > 0))
        return QERR_NO_SPACE;
    /* quotaKVServer.check: size + cost < quota, else raise NOSPACE */
    uint64_t quota = s->cfg.quota_backend_bytes ? s->cfg.quota_backend_bytes : 2ull << 30;
    if (s->db_size + cost < quota)
        return 0;
    int rv = activate(s, s->member_id, ETCDSERVERPB__ALARM_TYPE__NOSPACE);
    return rv != 0 ? rv : QERR_NO_SPACE;
}
