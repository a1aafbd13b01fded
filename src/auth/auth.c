/* auth/auth.c: users, roles, permissions and the auth switch (auth.h). */
#include "auth/auth.h"

#include <crypt.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "auth/token.h"
#include "base/err.h"
#include "base/log.h"

#define ROOT "root"

/* An end of a permission interval; len 0 is "no end" (+infinity), as
 * etcd's BytesAffineComparable treats an empty slice. */
struct bound {
    const uint8_t *p;
    size_t len;
};

struct ivl {
    struct bound begin, end;
};

/* One user as the checks see it. */
struct user {
    Authpb__User *pb;
    bool root;
    struct ivl *rd, *wr; /* merged, sorted, disjoint */
    size_t n_rd, n_wr;
    uint8_t *mem; /* keys the intervals point at */
};

/* One published state: immutable once built. */
struct state {
    bool enabled;
    uint64_t revision;
    struct user *users; /* sorted by name */
    size_t n_users;
    Authpb__Role **roles; /* sorted by name */
    size_t n_roles;
};

struct auth_store {
    backend *be;
    pthread_rwlock_t lock; /* guards |st| */
    struct state *st;
    _Atomic bool enabled; /* st->enabled, for the no-lock fast path */
    _Atomic uint64_t revision;
    unsigned bcrypt_cost;
    struct auth_tokens *tokens;
};

/* ---- ordering of bounds ---- */

static int bound_cmp(struct bound a, struct bound b)
{
    if (a.len == 0)
        return b.len == 0 ? 0 : 1;
    if (b.len == 0)
        return -1;
    size_t n = a.len < b.len ? a.len : b.len;
    int c = memcmp(a.p, b.p, n);
    if (c != 0)
        return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int ivl_cmp(const void *x, const void *y)
{
    return bound_cmp(((const struct ivl *)x)->begin, ((const struct ivl *)y)->begin);
}

/* merge sorts |v| by begin and joins overlapping or touching intervals;
 * returns the new count. */
static size_t merge(struct ivl *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), ivl_cmp);
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        if (bound_cmp(v[i].begin, v[k].end) <= 0) {
            if (bound_cmp(v[i].end, v[k].end) > 0)
                v[k].end = v[i].end;
        } else {
            v[++k] = v[i];
        }
    }
    return k + 1;
}

/* covered: |q| lies inside one merged interval of |v| (intervals are
 * disjoint and not touching after merge, so a cover is one of them). An
 * empty request interval is covered by nothing, as etcd's Contains. */
static bool covered(const struct ivl *v, size_t n, struct ivl q)
{
    if (bound_cmp(q.begin, q.end) >= 0)
        return false;
    size_t lo = 0, hi = n;
    while (lo < hi) { /* first interval whose begin > q.begin */
        size_t mid = (lo + hi) / 2;
        if (bound_cmp(v[mid].begin, q.begin) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return false;
    const struct ivl *c = &v[lo - 1];
    return bound_cmp(c->end, q.end) >= 0;
}

/* request_ivl: [key, end) as etcd's checks read a request: no end is the
 * key alone ([key, key+"\0")), "\0" is no end. |tmp| holds key+"\0". */
static struct ivl request_ivl(const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                              uint8_t *tmp)
{
    struct ivl q;
    q.begin = (struct bound){key, klen};
    if (elen == 0) {
        if (klen > 0)
            memcpy(tmp, key, klen);
        tmp[klen] = 0;
        q.end = (struct bound){tmp, klen + 1};
    } else if (elen == 1 && end[0] == 0) {
        q.end = (struct bound){NULL, 0};
    } else {
        q.end = (struct bound){end, elen};
    }
    return q;
}

/* ---- building a state ---- */

static void state_free(struct state *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n_users; i++) {
        authpb__user__free_unpacked(st->users[i].pb, NULL);
        free(st->users[i].rd);
        free(st->users[i].wr);
        free(st->users[i].mem);
    }
    for (size_t i = 0; i < st->n_roles; i++)
        authpb__role__free_unpacked(st->roles[i], NULL);
    free(st->users);
    free(st->roles);
    free(st);
}

static int name_cmp_bytes(const ProtobufCBinaryData *a, const char *b)
{
    size_t bl = strlen(b);
    size_t n = a->len < bl ? a->len : bl;
    int c = n ? memcmp(a->data, b, n) : 0;
    if (c != 0)
        return c;
    return a->len < bl ? -1 : a->len > bl;
}

static struct user *find_user(const struct state *st, const char *name)
{
    size_t lo = 0, hi = st->n_users;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = name_cmp_bytes(&st->users[mid].pb->name, name);
        if (c == 0)
            return &st->users[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static Authpb__Role *find_role(const struct state *st, const char *name)
{
    size_t lo = 0, hi = st->n_roles;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = name_cmp_bytes(&st->roles[mid]->name, name);
        if (c == 0)
            return st->roles[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool has_role(const Authpb__User *u, const char *role)
{
    for (size_t i = 0; i < u->n_roles; i++)
        if (strcmp(u->roles[i], role) == 0)
            return true;
    return false;
}

/* compile builds |u|'s merged read and write intervals from its roles. */
static int compile(const struct state *st, struct user *u)
{
    u->root = has_role(u->pb, ROOT);
    size_t total = 0, bytes = 0;
    for (size_t i = 0; i < u->pb->n_roles; i++) {
        const Authpb__Role *r = find_role(st, u->pb->roles[i]);
        if (r == NULL)
            continue;
        total += r->n_keypermission;
        for (size_t j = 0; j < r->n_keypermission; j++)
            bytes += r->keypermission[j]->key.len + 1;
    }
    if (total == 0)
        return 0;
    u->rd = calloc(total, sizeof(*u->rd));
    u->wr = calloc(total, sizeof(*u->wr));
    u->mem = malloc(bytes);
    if (u->rd == NULL || u->wr == NULL || u->mem == NULL)
        return -ENOMEM;
    uint8_t *m = u->mem;
    for (size_t i = 0; i < u->pb->n_roles; i++) {
        const Authpb__Role *r = find_role(st, u->pb->roles[i]);
        if (r == NULL)
            continue;
        for (size_t j = 0; j < r->n_keypermission; j++) {
            const Authpb__Permission *p = r->keypermission[j];
            struct ivl v = request_ivl(p->key.data, p->key.len, p->range_end.data,
                                       p->range_end.len, m);
            if (p->range_end.len == 0)
                m += p->key.len + 1;
            /* a permission on an empty key names nothing etcd can match
             * but the "no end" point; keep it as etcd does */
            if (p->permtype == AUTHPB__PERMISSION__TYPE__READ ||
                p->permtype == AUTHPB__PERMISSION__TYPE__READWRITE)
                u->rd[u->n_rd++] = v;
            if (p->permtype == AUTHPB__PERMISSION__TYPE__WRITE ||
                p->permtype == AUTHPB__PERMISSION__TYPE__READWRITE)
                u->wr[u->n_wr++] = v;
        }
    }
    u->n_rd = merge(u->rd, u->n_rd);
    u->n_wr = merge(u->wr, u->n_wr);
    return 0;
}

static int user_cmp(const void *a, const void *b)
{
    const ProtobufCBinaryData *x = &((const struct user *)a)->pb->name;
    const ProtobufCBinaryData *y = &((const struct user *)b)->pb->name;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, n) : 0;
    return c != 0 ? c : (x->len < y->len ? -1 : x->len > y->len);
}

/* load reads every record of the three buckets through |txn|. LMDB walks
 * keys in byte order, so users and roles come sorted by name. */
static int load(backend *be, MDB_txn *txn, struct state **out)
{
    struct state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return -ENOMEM;
    int rv = 0;
    MDB_val k = {strlen("authEnabled"), "authEnabled"}, v;
    int rc = mdb_get(txn, backend_dbi(be, BACKEND_DB_AUTH), &k, &v);
    if (rc == 0)
        st->enabled = v.mv_size == 1 && ((const uint8_t *)v.mv_data)[0] == 1;
    else if (rc != MDB_NOTFOUND)
        rv = backend_err(rc);
    k = (MDB_val){strlen("authRevision"), "authRevision"};
    rc = rv == 0 ? mdb_get(txn, backend_dbi(be, BACKEND_DB_AUTH), &k, &v) : 0;
    if (rv == 0 && rc == 0 && v.mv_size == 8) {
        const uint8_t *b = v.mv_data;
        for (int i = 0; i < 8; i++)
            st->revision = st->revision << 8 | b[i];
    } else if (rv == 0 && rc != 0 && rc != MDB_NOTFOUND) {
        rv = backend_err(rc);
    }
    if (st->revision == 0)
        st->revision = 1; /* etcd commits revision 1 when it creates the store */
    for (int pass = 0; pass < 2 && rv == 0; pass++) {
        MDB_cursor *cur;
        enum backend_db db = pass == 0 ? BACKEND_DB_AUTH_ROLES : BACKEND_DB_AUTH_USERS;
        if ((rc = mdb_cursor_open(txn, backend_dbi(be, db), &cur)) != 0) {
            rv = backend_err(rc);
            break;
        }
        MDB_stat ms;
        mdb_stat(txn, backend_dbi(be, db), &ms);
        size_t n = ms.ms_entries;
        if (pass == 0)
            st->roles = calloc(n + 1, sizeof(*st->roles));
        else
            st->users = calloc(n + 1, sizeof(*st->users));
        if ((pass == 0 && st->roles == NULL) || (pass == 1 && st->users == NULL)) {
            mdb_cursor_close(cur);
            rv = -ENOMEM;
            break;
        }
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (pass == 0 && st->n_roles < n) {
                Authpb__Role *r = authpb__role__unpack(NULL, v.mv_size, v.mv_data);
                if (r == NULL) {
                    log_error("auth", "undecodable role record skipped");
                    continue;
                }
                st->roles[st->n_roles++] = r;
            } else if (pass == 1 && st->n_users < n) {
                Authpb__User *u = authpb__user__unpack(NULL, v.mv_size, v.mv_data);
                if (u == NULL) {
                    log_error("auth", "undecodable user record skipped");
                    continue;
                }
                st->users[st->n_users++].pb = u;
            }
        }
        mdb_cursor_close(cur);
        if (rc != MDB_NOTFOUND)
            rv = backend_err(rc);
    }
    if (rv == 0)
        qsort(st->users, st->n_users, sizeof(*st->users), user_cmp);
    for (size_t i = 0; rv == 0 && i < st->n_users; i++)
        rv = compile(st, &st->users[i]);
    if (rv != 0) {
        state_free(st);
        return rv;
    }
    *out = st;
    return 0;
}

/* publish swaps in |st| (built by load) and frees the old state. */
static void publish(auth_store *as, struct state *st)
{
    pthread_rwlock_wrlock(&as->lock);
    struct state *old = as->st;
    as->st = st;
    atomic_store(&as->enabled, st->enabled);
    atomic_store(&as->revision, st->revision);
    pthread_rwlock_unlock(&as->lock);
    state_free(old);
}

/* reload_txn rebuilds the state from |txn| and publishes it. */
static int reload_txn(auth_store *as, MDB_txn *txn)
{
    struct state *st;
    int rv = load(as->be, txn, &st);
    if (rv != 0)
        return rv;
    publish(as, st);
    return 0;
}

int auth_reload(auth_store *as)
{
    MDB_txn *txn = backend_batch_txn(as->be);
    bool own = txn == NULL;
    if (own) {
        int rv = backend_read_begin(as->be, &txn);
        if (rv != 0)
            return rv;
    }
    int rv = reload_txn(as, txn);
    if (own)
        backend_read_end(txn);
    if (rv == 0 && !auth_enabled(as))
        auth_tokens_clear(as->tokens);
    return rv;
}

int auth_open(backend *be, const struct auth_options *o, auth_store **out, char *err,
              size_t errlen)
{
    auth_store *as = calloc(1, sizeof(*as));
    if (as == NULL)
        return -ENOMEM;
    as->be = be;
    pthread_rwlock_init(&as->lock, NULL);
    as->bcrypt_cost = (o->bcrypt_cost >= 4 && o->bcrypt_cost <= 31) ? o->bcrypt_cost : 10;
    if (o->bcrypt_cost != as->bcrypt_cost)
        log_warn("auth", "bcrypt cost %u is outside 4..31; using the default, 10", o->bcrypt_cost);
    int rv = auth_tokens_new(o->token_opts, o->token_ttl_ms, &as->tokens, err, errlen);
    if (rv == 0)
        rv = auth_reload(as);
    if (rv != 0) {
        auth_close(as);
        return rv;
    }
    *out = as;
    return 0;
}

void auth_close(auth_store *as)
{
    if (as == NULL)
        return;
    auth_tokens_free(as->tokens);
    state_free(as->st);
    pthread_rwlock_destroy(&as->lock);
    free(as);
}

bool auth_enabled(const auth_store *as)
{
    return atomic_load_explicit(&((auth_store *)as)->enabled, memory_order_acquire);
}

uint64_t auth_revision(const auth_store *as)
{
    return atomic_load_explicit(&((auth_store *)as)->revision, memory_order_acquire);
}

unsigned auth_bcrypt_cost(const auth_store *as)
{
    return as->bcrypt_cost;
}

bool auth_is_jwt(const auth_store *as)
{
    return auth_tokens_is_jwt(as->tokens);
}

/* ---- writing records (inside the batch) ---- */

static int put_rec(auth_store *as, enum backend_db db, const char *name,
                   const ProtobufCMessage *msg)
{
    MDB_txn *txn = backend_batch_txn(as->be);
    if (txn == NULL)
        return -EINVAL;
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n + 1);
    if (b == NULL)
        return -ENOMEM;
    protobuf_c_message_pack(msg, b);
    MDB_val k = {strlen(name), (void *)name}, v = {n, b};
    int rc = backend_put(as->be, txn, db, &k, &v, 0);
    free(b);
    return rc == 0 ? 0 : backend_err(rc);
}

static int del_rec(auth_store *as, enum backend_db db, const char *name)
{
    MDB_val k = {strlen(name), (void *)name};
    int rc = backend_del(as->be, backend_batch_txn(as->be), db, &k);
    return (rc == 0 || rc == MDB_NOTFOUND) ? 0 : backend_err(rc);
}

static int put_raw(auth_store *as, const char *name, const void *p, size_t n)
{
    MDB_val k = {strlen(name), (void *)name}, v = {n, (void *)p};
    int rc = backend_put(as->be, backend_batch_txn(as->be), BACKEND_DB_AUTH, &k, &v, 0);
    return rc == 0 ? 0 : backend_err(rc);
}

/* commit bumps the revision, writes it, and publishes the new state read
 * back from the batch (etcd: commitRevision + refreshRangePermCache). */
static int commit(auth_store *as)
{
    uint64_t rev = auth_revision(as) + 1;
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(rev >> (56 - 8 * i));
    int rv = put_raw(as, "authRevision", b, 8);
    if (rv == 0)
        rv = reload_txn(as, backend_batch_txn(as->be));
    return rv;
}

/* The state as the core sees it: only the core changes it, so it reads
 * without the lock. */
static const struct state *cur(const auth_store *as)
{
    return as->st;
}

/* copy_msg makes an owned, modifiable copy of a stored user or role (a
 * pack and an unpack: protobuf-c has no deep copy). */
static ProtobufCMessage *copy_msg(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n + 1);
    if (b == NULL)
        return NULL;
    protobuf_c_message_pack(m, b);
    ProtobufCMessage *c = protobuf_c_message_unpack(m->descriptor, NULL, n, b);
    free(b);
    return c;
}

static Authpb__User *copy_user(const Authpb__User *u)
{
    return (Authpb__User *)copy_msg(&u->base);
}

/* drop_role takes |role| out of a copied user's roles */
static void drop_role(Authpb__User *c, const char *role)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n_roles; i++) {
        if (strcmp(c->roles[i], role) == 0)
            free(c->roles[i]);
        else
            c->roles[k++] = c->roles[i];
    }
    c->n_roles = k;
}

int auth_apply_enable(auth_store *as)
{
    const struct state *st = cur(as);
    if (st->enabled)
        return 0; /* etcd: already enabled, ignored */
    const struct user *u = find_user(st, ROOT);
    if (u == NULL)
        return QERR_ROOT_USER_NOT_EXIST;
    if (!u->root)
        return QERR_ROOT_ROLE_NOT_EXIST;
    uint8_t one = 1;
    int rv = put_raw(as, "authEnabled", &one, 1);
    /* etcd does not bump the revision on enable */
    if (rv == 0)
        rv = reload_txn(as, backend_batch_txn(as->be));
    if (rv == 0)
        log_info("auth", "authentication enabled");
    return rv;
}

int auth_apply_disable(auth_store *as)
{
    if (!cur(as)->enabled)
        return 0;
    uint8_t zero = 0;
    int rv = put_raw(as, "authEnabled", &zero, 1);
    if (rv == 0)
        rv = commit(as);
    if (rv == 0) {
        auth_tokens_clear(as->tokens);
        log_info("auth", "authentication disabled");
    }
    return rv;
}

int auth_apply_user_add(auth_store *as, const char *name, const char *hash, bool no_password)
{
    if (name[0] == '\0')
        return QERR_USER_EMPTY;
    if (find_user(cur(as), name) != NULL)
        return QERR_USER_EXISTS;
    Authpb__User u = AUTHPB__USER__INIT;
    Authpb__UserAddOptions opt = AUTHPB__USER_ADD_OPTIONS__INIT;
    u.name = (ProtobufCBinaryData){strlen(name), (uint8_t *)name};
    if (!no_password && hash != NULL)
        u.password = (ProtobufCBinaryData){strlen(hash), (uint8_t *)hash};
    opt.no_password = no_password;
    u.options = &opt;
    int rv = put_rec(as, BACKEND_DB_AUTH_USERS, name, &u.base);
    return rv == 0 ? commit(as) : rv;
}

int auth_apply_user_delete(auth_store *as, const char *name)
{
    if (cur(as)->enabled && strcmp(name, ROOT) == 0)
        return QERR_INVALID_AUTH_MGMT;
    if (find_user(cur(as), name) == NULL)
        return QERR_USER_NOT_FOUND;
    int rv = del_rec(as, BACKEND_DB_AUTH_USERS, name);
    if (rv == 0)
        rv = commit(as);
    if (rv == 0)
        auth_tokens_invalidate_user(as->tokens, name);
    return rv;
}

int auth_apply_user_change_password(auth_store *as, const char *name, const char *hash)
{
    const struct user *u = find_user(cur(as), name);
    if (u == NULL)
        return QERR_USER_NOT_FOUND;
    Authpb__User *c = copy_user(u->pb);
    if (c == NULL)
        return -ENOMEM;
    free(c->password.data); /* the copy's own: replaced below */
    if (c->options == NULL || !c->options->no_password)
        c->password = (ProtobufCBinaryData){strlen(hash), (uint8_t *)hash};
    else
        c->password = (ProtobufCBinaryData){0, NULL};
    int rv = put_rec(as, BACKEND_DB_AUTH_USERS, name, &c->base);
    c->password = (ProtobufCBinaryData){0, NULL};
    authpb__user__free_unpacked(c, NULL);
    if (rv == 0)
        rv = commit(as);
    if (rv == 0)
        auth_tokens_invalidate_user(as->tokens, name);
    return rv;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int auth_apply_user_grant_role(auth_store *as, const char *user, const char *role)
{
    const struct user *u = find_user(cur(as), user);
    if (u == NULL)
        return QERR_USER_NOT_FOUND;
    if (strcmp(role, ROOT) != 0 && find_role(cur(as), role) == NULL)
        return QERR_ROLE_NOT_FOUND;
    if (has_role(u->pb, role))
        return 0; /* etcd: already granted, ignored (no revision bump) */
    Authpb__User *c = copy_user(u->pb);
    if (c == NULL)
        return -ENOMEM;
    char **roles = realloc(c->roles, (c->n_roles + 1) * sizeof(char *));
    char *dup = strdup(role);
    if (roles == NULL || dup == NULL) {
        if (roles != NULL)
            c->roles = roles;
        free(dup);
        authpb__user__free_unpacked(c, NULL);
        return -ENOMEM;
    }
    c->roles = roles;
    c->roles[c->n_roles++] = dup;
    qsort(c->roles, c->n_roles, sizeof(char *), str_cmp);
    int rv = put_rec(as, BACKEND_DB_AUTH_USERS, user, &c->base);
    authpb__user__free_unpacked(c, NULL);
    return rv == 0 ? commit(as) : rv;
}

int auth_apply_user_revoke_role(auth_store *as, const char *user, const char *role)
{
    if (cur(as)->enabled && strcmp(user, ROOT) == 0 && strcmp(role, ROOT) == 0)
        return QERR_INVALID_AUTH_MGMT;
    const struct user *u = find_user(cur(as), user);
    if (u == NULL)
        return QERR_USER_NOT_FOUND;
    if (!has_role(u->pb, role))
        return QERR_ROLE_NOT_GRANTED;
    Authpb__User *c = copy_user(u->pb);
    if (c == NULL)
        return -ENOMEM;
    drop_role(c, role);
    int rv = put_rec(as, BACKEND_DB_AUTH_USERS, user, &c->base);
    authpb__user__free_unpacked(c, NULL);
    return rv == 0 ? commit(as) : rv;
}

int auth_apply_role_add(auth_store *as, const char *name)
{
    if (name[0] == '\0')
        return QERR_ROLE_EMPTY;
    if (find_role(cur(as), name) != NULL)
        return QERR_ROLE_EXISTS;
    Authpb__Role r = AUTHPB__ROLE__INIT;
    r.name = (ProtobufCBinaryData){strlen(name), (uint8_t *)name};
    int rv = put_rec(as, BACKEND_DB_AUTH_ROLES, name, &r.base);
    return rv == 0 ? commit(as) : rv;
}

int auth_apply_role_delete(auth_store *as, const char *name)
{
    const struct state *st = cur(as);
    if (st->enabled && strcmp(name, ROOT) == 0)
        return QERR_INVALID_AUTH_MGMT;
    if (find_role(st, name) == NULL)
        return QERR_ROLE_NOT_FOUND;
    int rv = del_rec(as, BACKEND_DB_AUTH_ROLES, name);
    /* and take it from every user that has it */
    for (size_t i = 0; rv == 0 && i < st->n_users; i++) {
        const Authpb__User *u = st->users[i].pb;
        if (!has_role(u, name))
            continue;
        Authpb__User *c = copy_user(u);
        if (c == NULL) {
            rv = -ENOMEM;
            break;
        }
        drop_role(c, name);
        char uname[1024];
        snprintf(uname, sizeof(uname), "%.*s", (int)u->name.len, (const char *)u->name.data);
        rv = put_rec(as, BACKEND_DB_AUTH_USERS, uname, &c->base);
        authpb__user__free_unpacked(c, NULL);
    }
    return rv == 0 ? commit(as) : rv;
}

static Authpb__Role *copy_role(const Authpb__Role *r)
{
    return (Authpb__Role *)copy_msg(&r->base);
}

static int bin_cmp(const ProtobufCBinaryData *a, const uint8_t *b, size_t bl)
{
    size_t n = a->len < bl ? a->len : bl;
    int c = n ? memcmp(a->data, b, n) : 0;
    return c != 0 ? c : (a->len < bl ? -1 : a->len > bl);
}

int auth_apply_role_grant_permission(auth_store *as, const char *role, const Authpb__Permission *p)
{
    const Authpb__Role *r = find_role(cur(as), role);
    if (r == NULL)
        return QERR_ROLE_NOT_FOUND;
    Authpb__Role *c = copy_role(r);
    if (c == NULL)
        return -ENOMEM;
    /* the first permission whose key is >= p's (sorted by key) */
    size_t idx = 0;
    while (idx < c->n_keypermission &&
           bin_cmp(&c->keypermission[idx]->key, p->key.data, p->key.len) < 0)
        idx++;
    int rv = 0;
    if (idx < c->n_keypermission &&
        bin_cmp(&c->keypermission[idx]->key, p->key.data, p->key.len) == 0 &&
        bin_cmp(&c->keypermission[idx]->range_end, p->range_end.data, p->range_end.len) == 0) {
        c->keypermission[idx]->permtype = p->permtype; /* update it */
        rv = put_rec(as, BACKEND_DB_AUTH_ROLES, role, &c->base);
    } else {
        /* insert at idx: the stored slice stays sorted by key (etcd
         * appends and sorts; equal keys keep their order) */
        while (idx < c->n_keypermission &&
               bin_cmp(&c->keypermission[idx]->key, p->key.data, p->key.len) == 0)
            idx++;
        Authpb__Permission **v =
            realloc(c->keypermission, (c->n_keypermission + 1) * sizeof(*v));
        if (v == NULL) {
            authpb__role__free_unpacked(c, NULL);
            return -ENOMEM;
        }
        c->keypermission = v;
        memmove(&v[idx + 1], &v[idx], (c->n_keypermission - idx) * sizeof(*v));
        Authpb__Permission np = AUTHPB__PERMISSION__INIT;
        np.permtype = p->permtype;
        np.key = p->key;
        np.range_end = p->range_end;
        v[idx] = &np;
        c->n_keypermission++;
        rv = put_rec(as, BACKEND_DB_AUTH_ROLES, role, &c->base);
        /* take our stack entry out before protobuf-c frees the rest */
        memmove(&v[idx], &v[idx + 1], (c->n_keypermission - idx - 1) * sizeof(*v));
        c->n_keypermission--;
    }
    authpb__role__free_unpacked(c, NULL);
    return rv == 0 ? commit(as) : rv;
}

int auth_apply_role_revoke_permission(auth_store *as, const char *role, const uint8_t *key,
                                      size_t klen, const uint8_t *end, size_t elen)
{
    const Authpb__Role *r = find_role(cur(as), role);
    if (r == NULL)
        return QERR_ROLE_NOT_FOUND;
    Authpb__Role *c = copy_role(r);
    if (c == NULL)
        return -ENOMEM;
    size_t k = 0, n = c->n_keypermission;
    for (size_t i = 0; i < n; i++) {
        Authpb__Permission *p = c->keypermission[i];
        if (bin_cmp(&p->key, key, klen) == 0 && bin_cmp(&p->range_end, end, elen) == 0)
            authpb__permission__free_unpacked(p, NULL);
        else
            c->keypermission[k++] = p;
    }
    c->n_keypermission = k;
    int rv = k == n ? QERR_PERMISSION_NOT_GRANTED
                    : put_rec(as, BACKEND_DB_AUTH_ROLES, role, &c->base);
    authpb__role__free_unpacked(c, NULL);
    return rv == 0 ? commit(as) : rv;
}

/* ---- reads ---- */

static char *arena_str(struct arena *a, const void *p, size_t n)
{
    char *s = arena_alloc(a, n + 1);
    if (s != NULL && n > 0)
        memcpy(s, p, n);
    return s;
}

int auth_user_get(auth_store *as, const char *name, struct arena *a, char ***roles, size_t *n)
{
    pthread_rwlock_rdlock(&as->lock);
    int rv = 0;
    const struct user *u = find_user(as->st, name);
    if (u == NULL) {
        rv = QERR_USER_NOT_FOUND;
    } else {
        *n = u->pb->n_roles;
        *roles = arena_alloc(a, (*n + 1) * sizeof(char *));
        for (size_t i = 0; *roles != NULL && i < *n; i++)
            if (((*roles)[i] = arena_str(a, u->pb->roles[i], strlen(u->pb->roles[i]))) == NULL)
                *roles = NULL;
        if (*roles == NULL)
            rv = -ENOMEM;
    }
    pthread_rwlock_unlock(&as->lock);
    return rv;
}

/* list_names copies the names of the users (|users|) or roles, in order */
static int list_names(auth_store *as, bool users, struct arena *a, char ***names, size_t *n)
{
    pthread_rwlock_rdlock(&as->lock);
    int rv = 0;
    *n = users ? as->st->n_users : as->st->n_roles;
    *names = arena_alloc(a, (*n + 1) * sizeof(char *));
    for (size_t i = 0; *names != NULL && i < *n; i++) {
        const ProtobufCBinaryData *b =
            users ? &as->st->users[i].pb->name : &as->st->roles[i]->name;
        if (((*names)[i] = arena_str(a, b->data, b->len)) == NULL)
            *names = NULL;
    }
    if (*names == NULL)
        rv = -ENOMEM;
    pthread_rwlock_unlock(&as->lock);
    return rv;
}

int auth_user_list(auth_store *as, struct arena *a, char ***names, size_t *n)
{
    return list_names(as, true, a, names, n);
}

int auth_role_get(auth_store *as, const char *name, struct arena *a, Authpb__Permission ***perms,
                  size_t *n)
{
    pthread_rwlock_rdlock(&as->lock);
    int rv = 0;
    const Authpb__Role *r = find_role(as->st, name);
    if (r == NULL) {
        rv = QERR_ROLE_NOT_FOUND;
    } else {
        *n = r->n_keypermission;
        *perms = arena_alloc(a, (*n + 1) * sizeof(**perms));
        for (size_t i = 0; *perms != NULL && i < *n; i++) {
            const Authpb__Permission *s = r->keypermission[i];
            Authpb__Permission *p = arena_alloc(a, sizeof(*p));
            if (p == NULL) {
                *perms = NULL;
                break;
            }
            authpb__permission__init(p);
            p->permtype = s->permtype;
            p->key = (ProtobufCBinaryData){s->key.len, arena_dup(a, s->key.data, s->key.len)};
            p->range_end = (ProtobufCBinaryData){s->range_end.len,
                                                 arena_dup(a, s->range_end.data, s->range_end.len)};
            (*perms)[i] = p;
        }
        if (*perms == NULL)
            rv = -ENOMEM;
    }
    pthread_rwlock_unlock(&as->lock);
    return rv;
}

int auth_role_list(auth_store *as, struct arena *a, char ***names, size_t *n)
{
    return list_names(as, false, a, names, n);
}

bool auth_user_has_role(auth_store *as, const char *user, const char *role)
{
    pthread_rwlock_rdlock(&as->lock);
    const struct user *u = find_user(as->st, user);
    bool r = u != NULL && has_role(u->pb, role);
    pthread_rwlock_unlock(&as->lock);
    return r;
}

int auth_user_state(auth_store *as, const char *name)
{
    pthread_rwlock_rdlock(&as->lock);
    const struct user *u = find_user(as->st, name);
    int r = u == NULL ? 0 : (u->pb->options != NULL && u->pb->options->no_password) ? 2 : 1;
    pthread_rwlock_unlock(&as->lock);
    return r;
}

/* ---- checks ---- */

int auth_check_admin(auth_store *as, const struct auth_info *ai)
{
    if (!auth_enabled(as))
        return 0;
    if (ai == NULL || ai->user == NULL || ai->user[0] == '\0')
        return QERR_USER_EMPTY;
    pthread_rwlock_rdlock(&as->lock);
    int rv = 0;
    if (as->st->enabled) {
        const struct user *u = find_user(as->st, ai->user);
        rv = u == NULL ? QERR_USER_NOT_FOUND : u->root ? 0 : QERR_PERMISSION_DENIED;
    }
    pthread_rwlock_unlock(&as->lock);
    return rv;
}

int auth_check(auth_store *as, const struct auth_info *ai, const uint8_t *key, size_t klen,
               const uint8_t *end, size_t elen, enum auth_perm_type type)
{
    if (!auth_enabled(as))
        return 0;
    if (ai == NULL || ai->user == NULL || ai->revision == 0)
        return QERR_USER_EMPTY;
    if (ai->revision < auth_revision(as))
        return QERR_AUTH_OLD_REVISION;
    uint8_t small[256];
    uint8_t *tmp = klen < sizeof(small) ? small : malloc(klen + 1);
    if (tmp == NULL)
        return -ENOMEM;
    struct ivl q = request_ivl(key, klen, end, elen, tmp);
    pthread_rwlock_rdlock(&as->lock);
    int rv = 0;
    if (as->st->enabled) {
        const struct user *u = find_user(as->st, ai->user);
        if (u == NULL) {
            rv = QERR_PERMISSION_DENIED;
        } else if (!u->root) {
            bool ok = type == AUTH_WRITE ? covered(u->wr, u->n_wr, q) : covered(u->rd, u->n_rd, q);
            rv = ok ? 0 : QERR_PERMISSION_DENIED;
        }
    }
    pthread_rwlock_unlock(&as->lock);
    if (tmp != small)
        free(tmp);
    return rv;
}

/* ---- passwords ---- */

int auth_hash_password(unsigned cost, const char *password, char *out, size_t cap)
{
    char setting[CRYPT_GENSALT_OUTPUT_SIZE];
    if (crypt_gensalt_rn("$2b$", cost, NULL, 0, setting, sizeof(setting)) == NULL)
        return -errno;
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    if (cd == NULL)
        return -ENOMEM;
    const char *h = crypt_rn(password, setting, cd, sizeof(*cd));
    int rv = 0;
    if (h == NULL || h[0] == '*' || strlen(h) >= cap)
        rv = -EINVAL;
    else
        strcpy(out, h);
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return rv;
}

int auth_password_hash(auth_store *as, const char *password, char *out, size_t cap)
{
    return auth_hash_password(as->bcrypt_cost, password, out, cap);
}

bool auth_hash_matches(const char *password, const char *stored)
{
    size_t n = strlen(stored);
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    bool ok = false;
    if (cd != NULL && n > 0) {
        const char *h = crypt_rn(password, stored, cd, sizeof(*cd));
        if (h != NULL && h[0] != '*' && strlen(h) == n) {
            unsigned char d = 0; /* compared in constant time */
            for (size_t i = 0; i < n; i++)
                d |= (unsigned char)(h[i] ^ stored[i]);
            ok = d == 0;
        }
    }
    if (cd != NULL)
        explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return ok;
}

int auth_user_hash(auth_store *as, const char *user, char *out, size_t cap, uint64_t *rev)
{
    if (!auth_enabled(as))
        return QERR_AUTH_NOT_ENABLED;
    pthread_rwlock_rdlock(&as->lock);
    const struct user *u = find_user(as->st, user);
    int rv = 0;
    if (u == NULL || (u->pb->options != NULL && u->pb->options->no_password) ||
        u->pb->password.len >= cap) {
        rv = QERR_AUTH_FAILED;
    } else {
        if (u->pb->password.len > 0)
            memcpy(out, u->pb->password.data, u->pb->password.len);
        out[u->pb->password.len] = '\0';
        *rev = as->st->revision;
    }
    pthread_rwlock_unlock(&as->lock);
    return rv;
}

int auth_password_check(auth_store *as, const char *user, const char *password, uint64_t *rev)
{
    char hash[256];
    int rv = auth_user_hash(as, user, hash, sizeof(hash), rev);
    if (rv != 0)
        return rv;
    /* outside the lock: bcrypt takes tens of milliseconds */
    bool ok = auth_hash_matches(password, hash);
    if (!ok)
        log_kv(LOG_INFO, "auth", "invalid password", LF_STR("user-name", user));
    return ok ? 0 : QERR_AUTH_FAILED;
}

/* ---- tokens ---- */

int auth_token_prefix(char out[17])
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    uint8_t r[16];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return -EIO;
    for (int i = 0; i < 16; i++)
        out[i] = letters[r[i] % 52];
    out[16] = '\0';
    return 0;
}

int auth_token_assign(auth_store *as, const char *user, const char *prefix, uint64_t index,
                      bool want, char *out, size_t cap)
{
    if (!auth_enabled(as))
        return QERR_AUTH_NOT_ENABLED;
    int st = auth_user_state(as, user);
    if (st != 1)
        return QERR_AUTH_FAILED;
    return auth_tokens_assign(as->tokens, user, prefix, index, auth_revision(as), want, out, cap);
}

int auth_token_info(auth_store *as, const char *token, size_t len, char *user, size_t usercap,
                    uint64_t *revision)
{
    *revision = auth_revision(as);
    return auth_tokens_info(as->tokens, token, len, user, usercap, revision);
}

void auth_tokens_expire(auth_store *as)
{
    auth_tokens_sweep(as->tokens);
}
