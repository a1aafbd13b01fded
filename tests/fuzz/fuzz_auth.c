/* tests/fuzz/fuzz_auth.c: libFuzzer target for the Auth requests as a
 * client sends them (protobuf-c unpack of the 16 request types) applied to
 * the auth store (auth/auth.h) on a real LMDB backend, with permission
 * checks in between. The input is a sequence of records: one byte picks
 * the request type (or a check), two bytes give the length, then the
 * message bytes. Every step must return 0 or one of the errors etcd
 * answers, never crash; after the sequence, the state read back from the
 * backend (auth_reload) must equal the state in memory. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth.h"
#include "backend/backend.h"
#include "base/err.h"
#include "rpc.pb-c.h"

static char dir[64];
static backend *be;

static void cleanup(void)
{
    if (be != NULL)
        backend_close(be);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* one backend for the process; each input starts from empty databases */
static void fresh(void)
{
    if (be == NULL) {
        snprintf(dir, sizeof(dir), "/tmp/quorum-fuzz-auth-XXXXXX");
        if (mkdtemp(dir) == NULL)
            abort();
        struct backend_options o = {.dir = dir, .map_size = 64u << 20};
        if (backend_open(&o, &be) != 0)
            abort();
        atexit(cleanup);
    }
    if (backend_batch_begin(be) != 0)
        abort();
    MDB_txn *txn = backend_batch_txn(be);
    enum backend_db dbs[] = {BACKEND_DB_AUTH, BACKEND_DB_AUTH_USERS, BACKEND_DB_AUTH_ROLES};
    for (size_t i = 0; i < 3; i++)
        if (mdb_drop(txn, backend_dbi(be, dbs[i]), 0) != 0)
            abort();
    if (backend_batch_commit(be) != 0)
        abort();
}

static int ok_err(int rv)
{
    return rv == 0 || (q_is_qerr(rv) && rv != QERR_STORAGE && rv != QERR_CORRUPT);
}

static const char *str(const char *s)
{
    return s != NULL ? s : "";
}

static const ProtobufCMessageDescriptor *const types[] = {
    &etcdserverpb__auth_enable_request__descriptor,
    &etcdserverpb__auth_disable_request__descriptor,
    &etcdserverpb__auth_user_add_request__descriptor,
    &etcdserverpb__auth_user_get_request__descriptor,
    &etcdserverpb__auth_user_list_request__descriptor,
    &etcdserverpb__auth_user_delete_request__descriptor,
    &etcdserverpb__auth_user_change_password_request__descriptor,
    &etcdserverpb__auth_user_grant_role_request__descriptor,
    &etcdserverpb__auth_user_revoke_role_request__descriptor,
    &etcdserverpb__auth_role_add_request__descriptor,
    &etcdserverpb__auth_role_get_request__descriptor,
    &etcdserverpb__auth_role_list_request__descriptor,
    &etcdserverpb__auth_role_delete_request__descriptor,
    &etcdserverpb__auth_role_grant_permission_request__descriptor,
    &etcdserverpb__auth_role_revoke_permission_request__descriptor,
    &etcdserverpb__authenticate_request__descriptor,
    &etcdserverpb__range_request__descriptor, /* a permission check */
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

static int step(auth_store *as, unsigned t, const ProtobufCMessage *m, struct arena *a)
{
    switch (t) {
    case 0:
        return auth_apply_enable(as);
    case 1:
        return auth_apply_disable(as);
    case 2: {
        const Etcdserverpb__AuthUserAddRequest *q = (const void *)m;
        bool nopw = q->options != NULL && q->options->no_password;
        return auth_apply_user_add(as, str(q->name), str(q->hashedpassword), nopw);
    }
    case 3: {
        char **roles;
        size_t n;
        return auth_user_get(as, str(((const Etcdserverpb__AuthUserGetRequest *)m)->name), a,
                             &roles, &n);
    }
    case 4: {
        char **names;
        size_t n;
        int rv = auth_user_list(as, a, &names, &n);
        for (size_t i = 1; rv == 0 && i < n; i++)
            if (strcmp(names[i - 1], names[i]) >= 0)
                abort(); /* listed in order, no duplicates */
        return rv;
    }
    case 5:
        return auth_apply_user_delete(as, str(((const Etcdserverpb__AuthUserDeleteRequest *)m)->name));
    case 6: {
        const Etcdserverpb__AuthUserChangePasswordRequest *q = (const void *)m;
        return auth_apply_user_change_password(as, str(q->name), str(q->hashedpassword));
    }
    case 7: {
        const Etcdserverpb__AuthUserGrantRoleRequest *q = (const void *)m;
        return auth_apply_user_grant_role(as, str(q->user), str(q->role));
    }
    case 8: {
        const Etcdserverpb__AuthUserRevokeRoleRequest *q = (const void *)m;
        return auth_apply_user_revoke_role(as, str(q->name), str(q->role));
    }
    case 9:
        return auth_apply_role_add(as, str(((const Etcdserverpb__AuthRoleAddRequest *)m)->name));
    case 10: {
        Authpb__Permission **p;
        size_t n;
        return auth_role_get(as, str(((const Etcdserverpb__AuthRoleGetRequest *)m)->role), a, &p,
                             &n);
    }
    case 11: {
        char **names;
        size_t n;
        return auth_role_list(as, a, &names, &n);
    }
    case 12:
        return auth_apply_role_delete(as, str(((const Etcdserverpb__AuthRoleDeleteRequest *)m)->role));
    case 13: {
        const Etcdserverpb__AuthRoleGrantPermissionRequest *q = (const void *)m;
        Authpb__Permission empty = AUTHPB__PERMISSION__INIT;
        return auth_apply_role_grant_permission(as, str(q->name), q->perm ? q->perm : &empty);
    }
    case 14: {
        const Etcdserverpb__AuthRoleRevokePermissionRequest *q = (const void *)m;
        return auth_apply_role_revoke_permission(as, str(q->role), q->key.data, q->key.len,
                                                 q->range_end.data, q->range_end.len);
    }
    case 15: { /* Authenticate: the apply half (a token for the user) */
        const Etcdserverpb__AuthenticateRequest *q = (const void *)m;
        char tok[64];
        return auth_token_assign(as, str(q->name), "abcdefghijklmnop", 1, true, tok, sizeof(tok));
    }
    default: { /* a Range checked as every user there is, and as nobody */
        const Etcdserverpb__RangeRequest *q = (const void *)m;
        char **names;
        size_t n;
        if (auth_user_list(as, a, &names, &n) != 0)
            return 0;
        for (size_t i = 0; i <= n; i++) {
            struct auth_info ai = {i < n ? names[i] : NULL, auth_revision(as)};
            for (int w = 0; w < 2; w++) {
                int rv = auth_check(as, &ai, q->key.data, q->key.len, q->range_end.data,
                                    q->range_end.len, w ? AUTH_WRITE : AUTH_READ);
                if (rv != 0 && rv != QERR_PERMISSION_DENIED && rv != QERR_USER_EMPTY)
                    abort();
            }
            if (!ok_err(auth_check_admin(as, &ai)))
                abort();
        }
        return 0;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fresh();
    auth_store *as;
    struct auth_options ao = {.token_opts = "simple", .token_ttl_ms = 1000, .bcrypt_cost = 4};
    char err[128];
    if (auth_open(be, &ao, &as, err, sizeof(err)) != 0)
        abort();
    struct arena a = {0};
    size_t i = 0;
    while (i + 3 <= size) {
        unsigned t = data[i] % NTYPES;
        size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
        i += 3;
        if (len > size - i)
            len = size - i;
        ProtobufCMessage *m = protobuf_c_message_unpack(types[t], NULL, len, data + i);
        i += len;
        if (m == NULL)
            continue;
        if (backend_batch_begin(be) != 0)
            abort();
        int rv = step(as, t, m, &a);
        if (!ok_err(rv))
            abort();
        if (backend_batch_commit(be) != 0)
            abort();
        protobuf_c_message_free_unpacked(m, NULL);
        arena_reset(&a);
    }
    /* what is on disk is what is in memory */
    bool en = auth_enabled(as);
    uint64_t rev = auth_revision(as);
    char **u1, **u2;
    size_t n1, n2;
    if (auth_user_list(as, &a, &u1, &n1) != 0 || auth_reload(as) != 0 ||
        auth_user_list(as, &a, &u2, &n2) != 0)
        abort();
    if (en != auth_enabled(as) || rev != auth_revision(as) || n1 != n2)
        abort();
    for (size_t k = 0; k < n1; k++)
        if (strcmp(u1[k], u2[k]) != 0)
            abort();
    arena_free(&a);
    auth_close(as);
    return 0;
}
