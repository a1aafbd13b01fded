/* server/auth_service.c: /etcdserverpb.Auth/ and the permission checks
 * of every other service (etcd's v3_server auth paths, authApplierV3 and
 * authMaintenanceServer).
 *
 * Who a call runs as: its face hands over the "token" metadata (and the
 * common name of a verified client certificate); server_auth_identity
 * turns them into an auth_info when a check needs one, on whatever thread
 * the check runs (a front loop for local reads, the core otherwise), as
 * etcd reads AuthInfoFromCtx per request.
 *
 * Where the checks are (as etcd 3.4):
 *   reads (Range, read-only Txn): when served, on the loop that serves them;
 *   writes (Put, DeleteRange, Txn, LeaseRevoke): at apply, against the auth
 *     state of that point of the log, with the user and auth revision the
 *     proposing member put in the entry (node.c), so a permission revoked
 *     while the request was in flight is seen; an entry made before the
 *     last auth change is refused "revision of auth store is old"; the
 *     member that proposed it proposes it again with the identity as it
 *     is now, as etcd's raftRequest loops (node.c, retry_old_auth), unless
 *     that identity is no newer (a JWT carries its own revision: that
 *     client gets the error and takes a new token);
 *   Auth RPCs: through the log, admin (root) needed at apply, but a user
 *     may read itself (UserGet) and its roles (RoleGet); Authenticate checks
 *     the password first (bcrypt, on a worker thread), then proposes;
 *   Watch creation, LeaseTimeToLive with keys, Lock and Election keys:
 *     in their services; Defragment, Snapshot, Hash, HashKV and membership
 *     changes: admin, in their services (server_auth_admin).
 * Passwords are hashed on a worker (bcrypt at cost 10 takes ~50 ms) by the
 * member that takes the request, and the log entry carries the hash
 * (etcd 3.5's hashedPassword), never the password. */
#include "server/server_int.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "base/err.h"
#include "base/log.h"

/* ---- who a call runs as ---- */

int server_auth_identity(struct server *s, const char *token, size_t tlen, const char *cn,
                         struct auth_info *ai, char *buf, size_t cap)
{
    ai->user = NULL;
    ai->revision = 0;
    if (s->auth == NULL)
        return 0;
    /* a token is resolved even with auth off, as etcd 3.4 does: one that
     * is not live (auth disable dropped it) is refused */
    if (token != NULL) {
        uint64_t rev = 0;
        if (auth_token_info(s->auth, token, tlen, buf, cap, &rev) != 0) {
            if (log_enabled(LOG_WARN)) { /* etcd's line, with the token */
                char t[256];
                snprintf(t, sizeof(t), "%.*s", (int)(tlen < 255 ? tlen : 255), token);
                log_kv(LOG_WARN, "auth", "invalid auth token", LF_STR("token", t));
            }
            return QERR_INVALID_TOKEN;
        }
        ai->user = buf;
        ai->revision = rev;
        return 0;
    }
    if (cn != NULL && auth_enabled(s->auth) && s->cfg.client_tls.client_cert_auth) {
        /* etcd: the common name of a verified client certificate */
        size_t n = strlen(cn);
        if (n >= cap)
            return 0;
        memcpy(buf, cn, n + 1);
        ai->user = buf;
        ai->revision = auth_revision(s->auth);
    }
    return 0;
}

int server_call_identity(struct server *s, qcall *call, struct auth_info *ai, char *buf,
                         size_t cap)
{
    return server_auth_identity(s, call->token, call->token_len, call->cn, ai, buf, cap);
}

int server_auth_admin(qcall *call)
{
    struct server *s = server_of(call);
    if (s->auth == NULL || (!auth_enabled(s->auth) && call->token == NULL))
        return 0;
    struct auth_info ai;
    char buf[AUTH_NAME_MAX];
    int rv = server_call_identity(s, call, &ai, buf, sizeof(buf));
    return rv != 0 ? rv : auth_check_admin(s->auth, &ai);
}

bool server_require_admin(qcall *call)
{
    int rv = server_auth_admin(call);
    if (rv != 0)
        server_reply_error(call, rv);
    return rv == 0;
}

bool server_require_admin_raw(qcall *call)
{
    int rv = server_auth_admin(call);
    if (rv == 0)
        return true;
    /* etcd's authMaintenanceServer returns the auth package's error as
     * is: gRPC makes it Unknown with the "auth: ..." text */
    const char *t = rv == QERR_PERMISSION_DENIED ? "auth: permission denied"
                    : rv == QERR_USER_EMPTY      ? "auth: user name is empty"
                    : rv == QERR_INVALID_TOKEN   ? "auth: invalid auth token"
                    : rv == QERR_USER_NOT_FOUND  ? "auth: user not found"
                                                 : NULL;
    if (t != NULL)
        qcall_finish(call, GRPC_STATUS_UNKNOWN, t);
    else
        server_reply_error(call, rv);
    return false;
}

/* ---- the checks of KV requests ---- */

static int check(struct server *s, const struct auth_info *ai, ProtobufCBinaryData key,
                 ProtobufCBinaryData end, enum auth_perm_type t)
{
    return auth_check(s->auth, ai, key.data, key.len, end.data, end.len, t);
}

static const ProtobufCBinaryData none = {0, NULL};

static int check_range_req(struct server *s, const struct auth_info *ai,
                           const Etcdserverpb__RangeRequest *r)
{
    return check(s, ai, r->key, r->range_end, AUTH_READ);
}

static int check_txn(struct server *s, const struct auth_info *ai,
                     const Etcdserverpb__TxnRequest *r);

static int check_ops(struct server *s, const struct auth_info *ai, Etcdserverpb__RequestOp **ops,
                     size_t n)
{
    int rv = 0;
    for (size_t i = 0; rv == 0 && i < n; i++) {
        const Etcdserverpb__RequestOp *op = ops[i];
        switch (op->request_case) {
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
            rv = check_range_req(s, ai, op->request_range);
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
            rv = check(s, ai, op->request_put->key, none, AUTH_WRITE);
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE: {
            const Etcdserverpb__DeleteRangeRequest *d = op->request_delete_range;
            if (d->prev_kv)
                rv = check(s, ai, d->key, d->range_end, AUTH_READ);
            if (rv == 0)
                rv = check(s, ai, d->key, d->range_end, AUTH_WRITE);
            break;
        }
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
            /* etcd 3.4 skips nested txns here; 3.5 checks them: so do we */
            rv = check_txn(s, ai, op->request_txn);
            break;
        default:
            break;
        }
    }
    return rv;
}

static int check_txn(struct server *s, const struct auth_info *ai,
                     const Etcdserverpb__TxnRequest *r)
{
    int rv = 0;
    for (size_t i = 0; rv == 0 && i < r->n_compare; i++)
        rv = check(s, ai, r->compare[i]->key, r->compare[i]->range_end, AUTH_READ);
    if (rv == 0)
        rv = check_ops(s, ai, r->success, r->n_success);
    if (rv == 0)
        rv = check_ops(s, ai, r->failure, r->n_failure);
    return rv;
}

int server_auth_check_read(struct server *s, const struct auth_info *ai, bool range,
                           const ProtobufCMessage *req)
{
    if (s->auth == NULL || !auth_enabled(s->auth))
        return 0;
    return range ? check_range_req(s, ai, (const Etcdserverpb__RangeRequest *)req)
                 : check_txn(s, ai, (const Etcdserverpb__TxnRequest *)req);
}

int server_auth_check_call_read(struct server *s, qcall *call, bool range,
                                const ProtobufCMessage *req)
{
    if (s->auth == NULL || (!auth_enabled(s->auth) && call->token == NULL))
        return 0;
    struct auth_info ai;
    char buf[AUTH_NAME_MAX];
    int rv = server_call_identity(s, call, &ai, buf, sizeof(buf));
    return rv != 0 ? rv : server_auth_check_read(s, &ai, range, req);
}

/* every key of lease |id| must allow |type| (writes: etcd's
 * checkLeasePuts; reads: its checkLeaseTimeToLive) */
struct lease_check {
    struct server *s;
    const struct auth_info *ai;
    enum auth_perm_type type;
    int rv;
};

static void lease_key(const uint8_t *key, size_t len, void *arg)
{
    struct lease_check *c = arg;
    if (c->rv == 0)
        c->rv = auth_check(c->s->auth, c->ai, key, len, NULL, 0, c->type);
}

static int check_lease_keys(struct server *s, const struct auth_info *ai, int64_t id,
                            enum auth_perm_type type)
{
    if (id == 0 || s->leases == NULL)
        return 0;
    struct lease_check c = {s, ai, type, 0};
    lessor_keys(s->leases, id, lease_key, &c);
    return c.rv;
}

int server_auth_lease_keys(qcall *call, int64_t id)
{
    struct server *s = server_of(call);
    if (s->auth == NULL || (!auth_enabled(s->auth) && call->token == NULL))
        return 0;
    struct auth_info ai;
    char buf[AUTH_NAME_MAX];
    int rv = server_call_identity(s, call, &ai, buf, sizeof(buf));
    if (rv != 0)
        return rv;
    if (auth_check_admin(s->auth, &ai) == 0)
        return 0;
    return check_lease_keys(s, &ai, id, AUTH_READ);
}

static bool needs_admin(enum entry_kind k)
{
    switch (k) {
    case ENTRY_AUTH_ENABLE:
    case ENTRY_AUTH_DISABLE:
    case ENTRY_AUTH_USER_ADD:
    case ENTRY_AUTH_USER_DELETE:
    case ENTRY_AUTH_USER_CHANGE_PASSWORD:
    case ENTRY_AUTH_USER_GRANT_ROLE:
    case ENTRY_AUTH_USER_REVOKE_ROLE:
    case ENTRY_AUTH_ROLE_ADD:
    case ENTRY_AUTH_ROLE_DELETE:
    case ENTRY_AUTH_ROLE_GRANT_PERMISSION:
    case ENTRY_AUTH_ROLE_REVOKE_PERMISSION:
    case ENTRY_AUTH_USER_LIST:
    case ENTRY_AUTH_ROLE_LIST:
        return true;
    default:
        return false;
    }
}

int server_auth_check_entry(struct server *s, const struct entry *e)
{
    if (e->internal || s->auth == NULL || !auth_enabled(s->auth))
        return 0;
    const struct auth_info ai = {e->auth_user, e->auth_rev};
    if (needs_admin(e->kind))
        return auth_check_admin(s->auth, &ai);
    switch (e->kind) {
    case ENTRY_PUT: {
        const Etcdserverpb__PutRequest *r = (const Etcdserverpb__PutRequest *)e->req;
        int rv = check(s, &ai, r->key, none, AUTH_WRITE);
        if (rv == 0)
            rv = check_lease_keys(s, &ai, r->lease, AUTH_WRITE);
        if (rv == 0 && r->prev_kv)
            rv = check(s, &ai, r->key, none, AUTH_READ);
        return rv;
    }
    case ENTRY_DELETE_RANGE: {
        const Etcdserverpb__DeleteRangeRequest *r =
            (const Etcdserverpb__DeleteRangeRequest *)e->req;
        int rv = check(s, &ai, r->key, r->range_end, AUTH_WRITE);
        if (rv == 0 && r->prev_kv)
            rv = check(s, &ai, r->key, r->range_end, AUTH_READ);
        return rv;
    }
    case ENTRY_TXN:
        return check_txn(s, &ai, (const Etcdserverpb__TxnRequest *)e->req);
    case ENTRY_LEASE_REVOKE:
        return check_lease_keys(s, &ai, ((const Etcdserverpb__LeaseRevokeRequest *)e->req)->id,
                                AUTH_WRITE);
    case ENTRY_AUTH_USER_GET: {
        int rv = auth_check_admin(s->auth, &ai);
        const char *name = ((const Etcdserverpb__AuthUserGetRequest *)e->req)->name;
        if (rv != 0 && ai.user != NULL && strcmp(name, ai.user) == 0)
            rv = 0; /* a user may read itself */
        return rv;
    }
    case ENTRY_AUTH_ROLE_GET: {
        int rv = auth_check_admin(s->auth, &ai);
        const char *role = ((const Etcdserverpb__AuthRoleGetRequest *)e->req)->role;
        if (rv != 0 && ai.user != NULL && auth_user_has_role(s->auth, ai.user, role))
            rv = 0; /* and its own roles */
        return rv;
    }
    default:
        return 0;
    }
}

/* ---- applying Auth entries ---- */

/* b64_decode decodes base64 |in| into a NUL-terminated malloc'd string. */
static char *b64_decode(const char *in)
{
    size_t n = strlen(in);
    unsigned char *out = malloc(n / 4 * 3 + 4);
    if (out == NULL)
        return NULL;
    int m = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
    if (m < 0) {
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock counts padding bytes as zeros: drop them */
    if (n >= 1 && in[n - 1] == '=')
        m--;
    if (n >= 2 && in[n - 2] == '=')
        m--;
    out[m] = '\0';
    return (char *)out;
}

#define RESP(T, INIT)                                                                              \
    T *r = arena_alloc(&s->arena, sizeof(T));                                                      \
    Etcdserverpb__ResponseHeader *hd = arena_alloc(&s->arena, sizeof(*hd));                        \
    if (r == NULL || hd == NULL)                                                                   \
        return -ENOMEM;                                                                            \
    *r = (T)INIT;                                                                                  \
    etcdserverpb__response_header__init(hd);                                                       \
    r->header = hd;                                                                                \
    *resp = &r->base;                                                                              \
    *h = hd;

int server_auth_apply(struct server *s, struct entry *e, ProtobufCMessage **resp,
                      Etcdserverpb__ResponseHeader **h)
{
    auth_store *as = s->auth;
    int rv;
    switch (e->kind) {
    case ENTRY_AUTH_ENABLE: {
        if ((rv = auth_apply_enable(as)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthEnableResponse, ETCDSERVERPB__AUTH_ENABLE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_DISABLE: {
        if ((rv = auth_apply_disable(as)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthDisableResponse, ETCDSERVERPB__AUTH_DISABLE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTHENTICATE: {
        const Etcdserverpb__InternalAuthenticateRequest *q =
            (const Etcdserverpb__InternalAuthenticateRequest *)e->req;
        char tok[4096];
        tok[0] = '\0';
        bool want = e->call != NULL;
        if ((rv = auth_token_assign(as, q->name, q->simple_token, e->index, want, tok,
                                    sizeof(tok))) != 0)
            /* a token that cannot be made fails this request only */
            return q_is_qerr(rv) ? rv : QERR_AUTH_FAILED;
        RESP(Etcdserverpb__AuthenticateResponse, ETCDSERVERPB__AUTHENTICATE_RESPONSE__INIT);
        r->token = arena_dup(&s->arena, tok, strlen(tok) + 1);
        return r->token != NULL ? 0 : -ENOMEM;
    }
    case ENTRY_AUTH_USER_ADD: {
        const Etcdserverpb__AuthUserAddRequest *q =
            (const Etcdserverpb__AuthUserAddRequest *)e->req;
        bool nopw = q->options != NULL && q->options->no_password;
        char *hash = NULL;
        if (!nopw && q->name[0] != '\0' && (hash = b64_decode(q->hashedpassword)) == NULL)
            return QERR_AUTH_FAILED;
        rv = auth_apply_user_add(as, q->name, hash, nopw);
        free(hash);
        if (rv != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserAddResponse, ETCDSERVERPB__AUTH_USER_ADD_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_USER_DELETE: {
        const Etcdserverpb__AuthUserDeleteRequest *q =
            (const Etcdserverpb__AuthUserDeleteRequest *)e->req;
        if ((rv = auth_apply_user_delete(as, q->name)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserDeleteResponse, ETCDSERVERPB__AUTH_USER_DELETE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_USER_CHANGE_PASSWORD: {
        const Etcdserverpb__AuthUserChangePasswordRequest *q =
            (const Etcdserverpb__AuthUserChangePasswordRequest *)e->req;
        char *hash = b64_decode(q->hashedpassword);
        if (hash == NULL)
            return -ENOMEM;
        rv = auth_apply_user_change_password(as, q->name, hash);
        free(hash);
        if (rv != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserChangePasswordResponse,
             ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_USER_GRANT_ROLE: {
        const Etcdserverpb__AuthUserGrantRoleRequest *q =
            (const Etcdserverpb__AuthUserGrantRoleRequest *)e->req;
        if ((rv = auth_apply_user_grant_role(as, q->user, q->role)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserGrantRoleResponse,
             ETCDSERVERPB__AUTH_USER_GRANT_ROLE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_USER_REVOKE_ROLE: {
        const Etcdserverpb__AuthUserRevokeRoleRequest *q =
            (const Etcdserverpb__AuthUserRevokeRoleRequest *)e->req;
        if ((rv = auth_apply_user_revoke_role(as, q->name, q->role)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserRevokeRoleResponse,
             ETCDSERVERPB__AUTH_USER_REVOKE_ROLE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_ROLE_ADD: {
        const Etcdserverpb__AuthRoleAddRequest *q = (const Etcdserverpb__AuthRoleAddRequest *)e->req;
        if ((rv = auth_apply_role_add(as, q->name)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleAddResponse, ETCDSERVERPB__AUTH_ROLE_ADD_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_ROLE_DELETE: {
        const Etcdserverpb__AuthRoleDeleteRequest *q =
            (const Etcdserverpb__AuthRoleDeleteRequest *)e->req;
        if ((rv = auth_apply_role_delete(as, q->role)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleDeleteResponse, ETCDSERVERPB__AUTH_ROLE_DELETE_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_ROLE_GRANT_PERMISSION: {
        const Etcdserverpb__AuthRoleGrantPermissionRequest *q =
            (const Etcdserverpb__AuthRoleGrantPermissionRequest *)e->req;
        Authpb__Permission empty = AUTHPB__PERMISSION__INIT;
        if ((rv = auth_apply_role_grant_permission(as, q->name, q->perm ? q->perm : &empty)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleGrantPermissionResponse,
             ETCDSERVERPB__AUTH_ROLE_GRANT_PERMISSION_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_ROLE_REVOKE_PERMISSION: {
        const Etcdserverpb__AuthRoleRevokePermissionRequest *q =
            (const Etcdserverpb__AuthRoleRevokePermissionRequest *)e->req;
        if ((rv = auth_apply_role_revoke_permission(as, q->role, q->key.data, q->key.len,
                                                    q->range_end.data, q->range_end.len)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleRevokePermissionResponse,
             ETCDSERVERPB__AUTH_ROLE_REVOKE_PERMISSION_RESPONSE__INIT);
        return 0;
    }
    case ENTRY_AUTH_USER_GET: {
        const Etcdserverpb__AuthUserGetRequest *q = (const Etcdserverpb__AuthUserGetRequest *)e->req;
        char **roles;
        size_t n;
        if ((rv = auth_user_get(as, q->name, &s->arena, &roles, &n)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserGetResponse, ETCDSERVERPB__AUTH_USER_GET_RESPONSE__INIT);
        r->roles = roles;
        r->n_roles = n;
        return 0;
    }
    case ENTRY_AUTH_USER_LIST: {
        char **names;
        size_t n;
        if ((rv = auth_user_list(as, &s->arena, &names, &n)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthUserListResponse, ETCDSERVERPB__AUTH_USER_LIST_RESPONSE__INIT);
        r->users = names;
        r->n_users = n;
        return 0;
    }
    case ENTRY_AUTH_ROLE_GET: {
        const Etcdserverpb__AuthRoleGetRequest *q = (const Etcdserverpb__AuthRoleGetRequest *)e->req;
        Authpb__Permission **perms;
        size_t n;
        if ((rv = auth_role_get(as, q->role, &s->arena, &perms, &n)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleGetResponse, ETCDSERVERPB__AUTH_ROLE_GET_RESPONSE__INIT);
        r->perm = perms;
        r->n_perm = n;
        return 0;
    }
    case ENTRY_AUTH_ROLE_LIST: {
        char **names;
        size_t n;
        if ((rv = auth_role_list(as, &s->arena, &names, &n)) != 0)
            return rv;
        RESP(Etcdserverpb__AuthRoleListResponse, ETCDSERVERPB__AUTH_ROLE_LIST_RESPONSE__INIT);
        r->roles = names;
        r->n_roles = n;
        return 0;
    }
    default:
        return -EINVAL;
    }
}

/* ---- the Auth service ---- */

/* Work a worker thread does for a call before it is proposed: hashing a
 * new password, or checking one (Authenticate). */
struct auth_job {
    struct auth_job *next;
    struct server *s;
    qcall *call; /* NULL once the client went away */
    uv_work_t work;
    enum entry_kind kind;
    ProtobufCMessage *req;
    char *password; /* the password to hash or check (wiped after) */
    unsigned cost;  /* hashing: the bcrypt cost */
    char stored[256]; /* Authenticate: the user's hash, taken on the core */
    char hash_checked[256]; /* the same, kept for the re-check after */
    bool ok;          /* Authenticate: it matched */
    char hash[160];   /* the new hash, base64 */
    uint64_t rev;   /* Authenticate: the auth revision it was checked at */
    int rv;
};

static void wipe_free(char *p)
{
    if (p != NULL) {
        explicit_bzero(p, strlen(p));
        free(p);
    }
}

/* on a worker: needs nothing of the server (which may be stopping) */
static void job_work(uv_work_t *w)
{
    struct auth_job *j = w->data;
    if (j->kind == ENTRY_AUTHENTICATE) {
        j->ok = auth_hash_matches(j->password, j->stored);
        return;
    }
    char raw[128];
    j->rv = auth_hash_password(j->cost, j->password, raw, sizeof(raw));
    if (j->rv == 0)
        EVP_EncodeBlock((unsigned char *)j->hash, (const unsigned char *)raw, (int)strlen(raw));
    explicit_bzero(raw, sizeof(raw));
}

static void job_unlink(struct server *s, struct auth_job *j)
{
    for (struct auth_job **pp = &s->auth_jobs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            return;
        }
}

/* job_free wipes what the job knew of passwords and frees it */
static void job_free(struct auth_job *j)
{
    wipe_free(j->password);
    explicit_bzero(j->stored, sizeof(j->stored));
    explicit_bzero(j->hash_checked, sizeof(j->hash_checked));
    explicit_bzero(j->hash, sizeof(j->hash));
    protobuf_c_message_free_unpacked(j->req, NULL);
    free(j);
}

static void job_done(uv_work_t *w, int status)
{
    struct auth_job *j = w->data;
    struct server *s = j->s;
    wipe_free(j->password);
    j->password = NULL;
    explicit_bzero(j->stored, sizeof(j->stored));
    if (s == NULL) {
        /* the server stopped meanwhile (server_auth_detach) */
        job_free(j);
        return;
    }
    job_unlink(s, j);
    if (j->kind == ENTRY_AUTHENTICATE && j->rv == 0 && !j->ok) {
        /* etcd's two lines (auth/store.go, then etcdserver/v3_server.go) */
        const char *name = ((Etcdserverpb__AuthenticateRequest *)j->req)->name;
        log_kv(LOG_INFO, "auth", "invalid password", LF_STR("user-name", name));
        j->rv = QERR_AUTH_FAILED;
        log_kv(LOG_WARN, "auth", "invalid authentication was requested", LF_STR("user", name),
               LF_STR("error", server_etcd_err_text(j->rv)));
    }
    qcall *call = j->call;
    if (call != NULL)
        qcall_set_data(call, NULL);
    if (call == NULL || s->closing) {
        if (call != NULL)
            server_reply_error(call, QERR_STOPPED);
        job_free(j);
        return;
    }
    if (status != 0 || j->rv != 0) {
        server_reply_error(call, status != 0 ? QERR_STOPPED : j->rv);
        job_free(j);
        return;
    }
    switch (j->kind) {
    case ENTRY_AUTHENTICATE: {
        /* the auth state may have moved during the check (etcd checks
         * again): the password still holds if the user still has the hash
         * it was checked against */
        if (j->rev != auth_revision(s->auth)) {
            char now[sizeof(j->stored)];
            uint64_t rev;
            const char *name = ((Etcdserverpb__AuthenticateRequest *)j->req)->name;
            int rv = auth_user_hash(s->auth, name, now, sizeof(now), &rev);
            bool same = rv == 0 && strcmp(now, j->hash_checked) == 0;
            explicit_bzero(now, sizeof(now));
            if (!same) {
                server_reply_error(call, rv != 0 ? rv : QERR_AUTH_FAILED);
                job_free(j);
                return;
            }
        }
        Etcdserverpb__InternalAuthenticateRequest q =
            ETCDSERVERPB__INTERNAL_AUTHENTICATE_REQUEST__INIT;
        char prefix[17] = "";
        q.name = ((Etcdserverpb__AuthenticateRequest *)j->req)->name;
        if (!auth_is_jwt(s->auth) && auth_token_prefix(prefix) != 0) {
            server_reply_error(call, -EIO);
            break;
        }
        q.simple_token = prefix;
        server_propose_copy(s, call, ENTRY_AUTHENTICATE, &q.base);
        break;
    }
    case ENTRY_AUTH_USER_ADD: {
        Etcdserverpb__AuthUserAddRequest *q = (Etcdserverpb__AuthUserAddRequest *)j->req;
        char *orig = q->hashedpassword; /* the password itself was wiped */
        q->hashedpassword = j->hash;
        server_propose_copy(s, call, ENTRY_AUTH_USER_ADD, &q->base);
        q->hashedpassword = orig;
        break;
    }
    case ENTRY_AUTH_USER_CHANGE_PASSWORD: {
        Etcdserverpb__AuthUserChangePasswordRequest *q =
            (Etcdserverpb__AuthUserChangePasswordRequest *)j->req;
        char *orig = q->hashedpassword;
        q->hashedpassword = j->hash;
        server_propose_copy(s, call, ENTRY_AUTH_USER_CHANGE_PASSWORD, &q->base);
        q->hashedpassword = orig;
        break;
    }
    default:
        server_reply_error(call, -EINVAL);
        break;
    }
    job_free(j);
}

/* start_job takes |req| and its password (moved out of the message) to a
 * worker. */
static void start_job(qcall *call, enum entry_kind kind, ProtobufCMessage *req, char **password)
{
    struct server *s = server_of(call);
    struct auth_job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        protobuf_c_message_free_unpacked(req, NULL);
        server_reply_error(call, -ENOMEM);
        return;
    }
    j->s = s;
    j->call = call;
    j->kind = kind;
    j->req = req;
    j->password = *password; /* the job owns it now */
    *password = NULL;
    j->cost = auth_bcrypt_cost(s->auth);
    if (kind == ENTRY_AUTHENTICATE) {
        const char *name = ((const Etcdserverpb__AuthenticateRequest *)req)->name;
        int rv = auth_user_hash(s->auth, name, j->stored, sizeof(j->stored), &j->rev);
        memcpy(j->hash_checked, j->stored, sizeof(j->stored));
        if (rv != 0) {
            job_free(j);
            server_reply_error(call, rv);
            return;
        }
    }
    j->work.data = j;
    if (uv_queue_work(s->loop, &j->work, job_work, job_done) != 0) {
        job_free(j);
        server_reply_error(call, -ENOMEM);
        return;
    }
    j->next = s->auth_jobs;
    s->auth_jobs = j;
    qcall_set_data(call, j);
}

void server_auth_detach(struct server *s)
{
    for (struct auth_job *j = s->auth_jobs; j != NULL; j = j->next) {
        j->s = NULL;
        j->call = NULL;
    }
    s->auth_jobs = NULL;
}

/* a call whose job is on a worker forgets it; otherwise it is waiting
 * for its entry like any other */
static void on_auth_close(qcall *call)
{
    struct server *s = server_of(call);
    for (struct auth_job *j = s->auth_jobs; j != NULL; j = j->next)
        if (j->call == call) {
            j->call = NULL;
            return;
        }
    server_entry_call_closed(call);
}

#define UNPACK(T, DESC)                                                                            \
    struct server *s = server_of(call);                                                           \
    T *q = (T *)server_unpack(call, &DESC, msg, len);                                              \
    if (q == NULL)                                                                                 \
        return;                                                                                    \
    (void)s;

static void propose_plain(qcall *call, enum entry_kind kind, ProtobufCMessage *req)
{
    server_propose(server_of(call), call, kind, req);
}

static void on_auth_enable(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthEnableRequest, etcdserverpb__auth_enable_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ENABLE, &q->base);
}

static void on_auth_disable(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthDisableRequest, etcdserverpb__auth_disable_request__descriptor);
    propose_plain(call, ENTRY_AUTH_DISABLE, &q->base);
}

static void on_authenticate(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthenticateRequest, etcdserverpb__authenticate_request__descriptor);
    int rv = 0;
    int st = auth_user_state(s->auth, q->name);
    if (!auth_enabled(s->auth))
        rv = QERR_AUTH_NOT_ENABLED;
    else if (st == 0)
        rv = QERR_AUTH_FAILED;
    else if (st == 2)
        rv = QERR_NO_PASSWORD_USER; /* added with --no-password: TLS only */
    if (rv != 0 && rv != QERR_AUTH_NOT_ENABLED)
        log_kv(LOG_WARN, "auth", "invalid authentication was requested", LF_STR("user", q->name),
               LF_STR("error", server_etcd_err_text(rv)));
    if (rv != 0) {
        server_reply_error(call, rv);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return;
    }
    char *pw = strdup(q->password);
    explicit_bzero(q->password, strlen(q->password));
    if (pw == NULL) {
        server_reply_error(call, -ENOMEM);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return;
    }
    start_job(call, ENTRY_AUTHENTICATE, &q->base, &pw);
}

static void on_user_add(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserAddRequest, etcdserverpb__auth_user_add_request__descriptor);
    bool nopw = q->options != NULL && q->options->no_password;
    /* a client must not slip in a hash of its choosing, and a password
     * never goes into the log */
    explicit_bzero(q->hashedpassword, strlen(q->hashedpassword));
    if (nopw || q->name[0] == '\0') {
        explicit_bzero(q->password, strlen(q->password));
        propose_plain(call, ENTRY_AUTH_USER_ADD, &q->base);
        return;
    }
    char *pw = strdup(q->password);
    explicit_bzero(q->password, strlen(q->password));
    if (pw == NULL) {
        server_reply_error(call, -ENOMEM);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return;
    }
    start_job(call, ENTRY_AUTH_USER_ADD, &q->base, &pw);
}

static void on_user_get(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserGetRequest, etcdserverpb__auth_user_get_request__descriptor);
    propose_plain(call, ENTRY_AUTH_USER_GET, &q->base);
}

static void on_user_list(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserListRequest, etcdserverpb__auth_user_list_request__descriptor);
    propose_plain(call, ENTRY_AUTH_USER_LIST, &q->base);
}

static void on_user_delete(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserDeleteRequest, etcdserverpb__auth_user_delete_request__descriptor);
    propose_plain(call, ENTRY_AUTH_USER_DELETE, &q->base);
}

static void on_user_change_password(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserChangePasswordRequest,
           etcdserverpb__auth_user_change_password_request__descriptor);
    explicit_bzero(q->hashedpassword, strlen(q->hashedpassword));
    char *pw = strdup(q->password);
    explicit_bzero(q->password, strlen(q->password));
    if (pw == NULL) {
        server_reply_error(call, -ENOMEM);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return;
    }
    start_job(call, ENTRY_AUTH_USER_CHANGE_PASSWORD, &q->base, &pw);
}

static void on_user_grant_role(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserGrantRoleRequest,
           etcdserverpb__auth_user_grant_role_request__descriptor);
    propose_plain(call, ENTRY_AUTH_USER_GRANT_ROLE, &q->base);
}

static void on_user_revoke_role(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthUserRevokeRoleRequest,
           etcdserverpb__auth_user_revoke_role_request__descriptor);
    propose_plain(call, ENTRY_AUTH_USER_REVOKE_ROLE, &q->base);
}

static void on_role_add(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleAddRequest, etcdserverpb__auth_role_add_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_ADD, &q->base);
}

static void on_role_get(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleGetRequest, etcdserverpb__auth_role_get_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_GET, &q->base);
}

static void on_role_list(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleListRequest, etcdserverpb__auth_role_list_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_LIST, &q->base);
}

static void on_role_delete(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleDeleteRequest, etcdserverpb__auth_role_delete_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_DELETE, &q->base);
}

static void on_role_grant_permission(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleGrantPermissionRequest,
           etcdserverpb__auth_role_grant_permission_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_GRANT_PERMISSION, &q->base);
}

static void on_role_revoke_permission(qcall *call, const uint8_t *msg, size_t len)
{
    UNPACK(Etcdserverpb__AuthRoleRevokePermissionRequest,
           etcdserverpb__auth_role_revoke_permission_request__descriptor);
    propose_plain(call, ENTRY_AUTH_ROLE_REVOKE_PERMISSION, &q->base);
}

const struct qcall_method server_auth_methods[] = {
    {"/etcdserverpb.Auth/AuthEnable", QCALL_UNARY, on_auth_enable, NULL, NULL},
    {"/etcdserverpb.Auth/AuthDisable", QCALL_UNARY, on_auth_disable, NULL, NULL},
    {"/etcdserverpb.Auth/Authenticate", QCALL_UNARY, on_authenticate, NULL, on_auth_close},
    {"/etcdserverpb.Auth/UserAdd", QCALL_UNARY, on_user_add, NULL, on_auth_close},
    {"/etcdserverpb.Auth/UserGet", QCALL_UNARY, on_user_get, NULL, NULL},
    {"/etcdserverpb.Auth/UserList", QCALL_UNARY, on_user_list, NULL, NULL},
    {"/etcdserverpb.Auth/UserDelete", QCALL_UNARY, on_user_delete, NULL, NULL},
    {"/etcdserverpb.Auth/UserChangePassword", QCALL_UNARY, on_user_change_password, NULL,
     on_auth_close},
    {"/etcdserverpb.Auth/UserGrantRole", QCALL_UNARY, on_user_grant_role, NULL, NULL},
    {"/etcdserverpb.Auth/UserRevokeRole", QCALL_UNARY, on_user_revoke_role, NULL, NULL},
    {"/etcdserverpb.Auth/RoleAdd", QCALL_UNARY, on_role_add, NULL, NULL},
    {"/etcdserverpb.Auth/RoleGet", QCALL_UNARY, on_role_get, NULL, NULL},
    {"/etcdserverpb.Auth/RoleList", QCALL_UNARY, on_role_list, NULL, NULL},
    {"/etcdserverpb.Auth/RoleDelete", QCALL_UNARY, on_role_delete, NULL, NULL},
    {"/etcdserverpb.Auth/RoleGrantPermission", QCALL_UNARY, on_role_grant_permission, NULL, NULL},
    {"/etcdserverpb.Auth/RoleRevokePermission", QCALL_UNARY, on_role_revoke_permission, NULL,
     NULL},
};
const size_t server_auth_methods_n = sizeof(server_auth_methods) / sizeof(server_auth_methods[0]);
